"""A full disk under the MQTT door: every QoS 1/2 PUBLISH is answered (v5: a negative
PUBACK/PUBREC; 3.1.1: the connection closes), nothing of it is kept, the broker serves the
others, and once space is back the message sent again is stored once.

The disk is a real one: a small tmpfs filled until the kernel answers ENOSPC (tests/diskfull.py).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from tests.diskfull import SmallDisk, small_disk
from tests.integration.mqtt.clients import (
    WAIT,
    Paho,
    RunningServer,
    drop,
    marked_and_bound,
    paho,
    paho_properties,
    recorded_away,
    recorded_will_sent,
    serve_fresh,
    serve_process,
    start_server,
    stop_process,
)
from tests.integration.mqtt.raw import open_raw, publish_qos2, pubrel, read
from tests.retained import retained_folder, retained_name
from tests.waiting import logged, until, waited

from boxmq.clock import ManualClock
from boxmq.mqtt.publishing import Publishing
from boxmq.mqtt.session_record import read_record
from boxmq.store.side_files import SIDE_DIR, referenced
from boxmq.store.topics import members

QUOTA_EXCEEDED = 0x97
SERVER_UNAVAILABLE_V311 = 0x88  # return code 3, as paho gives it (its v5 name)
REASON_STRING = 0x1F


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk") as disk:
        yield disk


@pytest.fixture
def running(disk: SmallDisk) -> Iterator[RunningServer]:
    running = start_server(disk.path / "root")
    try:
        yield running
    finally:
        disk.free()  # shutting down writes nothing, but a full disk must not be the reason
        running.shutdown()


@pytest.fixture
def connect(running: RunningServer) -> Iterator[Callable[..., Paho]]:
    """`connect(...)`, each client stopped at the end (no socket left to the GC)."""
    made: list[Paho] = []

    def make(*args: Any, **kwargs: Any) -> Paho:
        made.append(paho(running, *args, **kwargs))
        return made[-1]

    yield make
    for client in made:
        client.stop()


def _working_files(root: Path) -> list[Path]:
    """Files anywhere under a working/ folder: what a failed publication could leave."""
    return [path for path in root.rglob("*") if path.is_file() and "working" in path.parts]


def _acks(client: mqtt.Client) -> queue.Queue[tuple[int, int]]:
    """(mid, reason code) of each PUBACK the client gets."""
    acks: queue.Queue[tuple[int, int]] = queue.Queue()
    client.on_publish = lambda _c, _u, mid, reason, _p: acks.put((mid, reason.value))
    return acks


def _group_member(connect: Callable[..., Paho]) -> Paho:
    """A share group member: a publication on t/# must be written to disk before its ack."""
    member = connect("member")
    member.subscribe("$share/g/t/#", qos=1)
    return member


def test_v5_qos1_on_a_full_disk_gets_quota_exceeded_and_its_resend_is_stored_once(
    running: RunningServer, disk: SmallDisk, connect: Callable[..., Paho]
) -> None:
    member = _group_member(connect)
    publisher = connect("pub")
    acks = _acks(publisher.client)
    disk.fill()
    info = publisher.client.publish("t/1", b"first try", qos=1)
    assert acks.get(timeout=WAIT) == (info.mid, QUOTA_EXCEEDED)
    assert _working_files(running.root) == []
    assert member.nothing(within=0.5)
    disk.free()
    info = publisher.client.publish("t/1", b"first try", qos=1)  # v5: the sender decides
    assert acks.get(timeout=WAIT) == (info.mid, 0)
    assert member.next().payload == b"first try"
    assert member.nothing(within=0.5)


def test_v5_qos1_with_long_properties_on_a_full_disk_leaves_no_side_file_nothing_names(
    running: RunningServer, disk: SmallDisk, connect: Callable[..., Paho]
) -> None:
    """Its properties go to a side file, written as the PUBLISH arrived, before the batch
    whose copies the disk then refused (its last page taken by that file): the publisher
    told QUOTA_EXCEEDED, the file stayed named by nothing until the hourly collection."""
    member = _group_member(connect)
    publisher = connect("pub")
    acks = _acks(publisher.client)
    long = paho_properties(PacketTypes.PUBLISH, UserProperty=[("trace", "t" * 300)])
    disk.fill(leave=1)
    info = publisher.client.publish("t/1", b"x" * 20_000, qos=1, properties=long)
    assert acks.get(timeout=WAIT) == (info.mid, QUOTA_EXCEEDED)
    side = running.root / SIDE_DIR
    assert (sorted(os.listdir(side)) if side.exists() else []) == []
    disk.free()
    info = publisher.client.publish("t/1", b"x" * 20_000, qos=1, properties=long)
    assert acks.get(timeout=WAIT) == (info.mid, 0)
    assert member.next().properties.UserProperty == [("trace", "t" * 300)]
    assert sorted(os.listdir(side)) == sorted(referenced(str(running.root)))


def test_v5_qos2_on_a_full_disk_gets_a_pubrec_quota_exceeded_with_a_reason_string(
    running: RunningServer, disk: SmallDisk, connect: Callable[..., Paho]
) -> None:
    member = _group_member(connect)
    sock, _ = open_raw(running, "raw-pub")  # its session's record written (refused after)
    disk.fill()
    with sock:
        sock.sendall(publish_qos2("t/2", 7, b"exactly once"))
        kind, body = read(sock)
        assert kind == 0x50, hex(kind)  # PUBREC
        assert body[:3] == b"\x00\x07" + bytes([QUOTA_EXCEEDED])
        assert bytes([REASON_STRING]) in body[4:]
        assert b"ENOSPC" in body
        # Where: the write was refused at its file's close, an OSError that names no file.
        assert f"{running.root}/topic-root/.incoming/working/.tmp-".encode() in body
    assert _working_files(running.root) == []
    assert member.nothing(within=0.5)


def test_a_pubrel_whose_commit_fails_closes_and_the_reconnected_pubrel_delivers_once(
    running: RunningServer, disk: SmallDisk, connect: Callable[..., Paho]
) -> None:
    member = _group_member(connect)
    sock, _ = open_raw(running, "raw-rel")
    with sock:
        sock.sendall(publish_qos2("t/3", 9, b"held in working"))
        assert read(sock) == (0x50, b"\x00\x09")  # PUBREC: stored in working/
        disk.fill()
        sock.sendall(pubrel(9))
        kind, body = read(sock)
        assert (kind, body[:1]) == (0xE0, bytes([QUOTA_EXCEEDED])), (hex(kind), body.hex())
        assert read(sock) == (0, b"")  # closed: PUBCOMP has no failure code
    assert len(_working_files(running.root)) == 1  # the message waits in working/
    assert member.nothing(within=0.5)
    disk.free()
    sock, _ = open_raw(running, "raw-rel")
    with sock:
        sock.sendall(pubrel(9))  # as a client does after reconnecting (MQTT 5.0 §4.4)
        assert read(sock) == (0x70, b"\x00\x09")  # PUBCOMP, success
    assert member.next().payload == b"held in working"
    assert member.nothing(within=0.5)


def test_v311_publisher_is_closed_serves_others_and_its_resend_is_stored_once(
    running: RunningServer, disk: SmallDisk, connect: Callable[..., Paho]
) -> None:
    """3.1.1 MQTT-4.8.0-2: a full disk is a transient error met processing the PUBLISH, and
    3.1.1 has no negative PUBACK: the server closes the connection it came on, serves the
    others, and stores the message once paho sends it again."""
    member = _group_member(connect)

    def quick_reconnect(client: mqtt.Client) -> None:
        client.reconnect_delay_set(min_delay=1, max_delay=1)

    publisher = connect("pub311", v5=False, clean=False, configure=quick_reconnect)
    disk.fill()
    publisher.client.publish("t/4", b"resent by paho", qos=1)
    publisher.disconnects.get(timeout=WAIT)  # no negative PUBACK in 3.1.1: the socket closes
    other = connect("other", v5=False)  # the broker goes on serving
    other.publish("elsewhere", b"memory only", qos=1)  # no durable subscriber: no disk
    assert _working_files(running.root) == []
    assert member.nothing(within=0.2)
    disk.free()
    # paho reconnects by itself and sends the unacknowledged message again (DUP)
    assert member.next().payload == b"resent by paho"
    assert member.nothing(within=1.5)


def test_a_qos0_flood_on_a_full_disk_keeps_the_connection_and_logs_per_batch(
    running: RunningServer,
    disk: SmallDisk,
    connect: Callable[..., Paho],
    caplog: pytest.LogCaptureFixture,
) -> None:
    member = _group_member(connect)
    publisher = connect("flood")
    disk.fill()
    caplog.set_level(logging.ERROR, logger="boxmq.mqtt")
    acks = _acks(publisher.client)  # paho tells of a QoS 0 message too, once it is sent
    for n in range(200):
        publisher.client.publish("t/5", b"%d" % n, qos=0)
    info = publisher.client.publish("t/5", b"last", qos=1)
    while (ack := acks.get(timeout=WAIT))[0] != info.mid:
        assert ack[1] == 0
    assert ack == (info.mid, QUOTA_EXCEEDED)  # in order, after the flood
    assert publisher.disconnects.empty()
    lines = [r for r in caplog.records if "not stored" in r.getMessage()]
    assert 1 <= len(lines) < 201 // 2, len(lines)
    assert "ENOSPC" in lines[0].getMessage()
    assert _working_files(running.root) == []
    assert member.nothing(within=0.2)


def test_a_qos1_flood_on_a_full_disk_is_told_once_then_counted(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk refuses at once, so a flood came in batches of 1 to 20 packets and wrote an
    ERROR line a batch (found driving `boxmq serve`: 200 QoS 1 publications, 33 lines): the
    first batch is told, the packets of the next counted into a line every 10 s."""
    clock = ManualClock()
    running = start_server(disk.path / "root", clock=clock)
    member = paho(running, "member")  # a share group's: publications on t/# go to disk
    member.subscribe("$share/g/t/#", qos=1)
    publisher = paho(running, "flood")
    try:
        acks = _acks(publisher.client)
        disk.fill()
        caplog.set_level(logging.ERROR, logger="boxmq.mqtt")
        for n in range(200):
            publisher.client.publish("t/6", b"%d" % n, qos=1)
        assert [acks.get(timeout=WAIT)[1] for _ in range(200)] == [QUOTA_EXCEEDED] * 200
        [first] = _logged(caplog, "not stored")
        told = int(first.split(": ")[1].split(" of ")[0])  # "client flood: 17 of 17 packet(s)"
        assert "ENOSPC" in first
        clock.advance(10)  # the server's next tick tells the count
        [more] = _logged(caplog, "more packet(s) not stored")
        assert more.startswith(f"client flood: {200 - told} more packet(s) not stored in the last")
        assert "ENOSPC" in more
        assert len(_logged(caplog, "not stored")) == 2
    finally:
        publisher.stop()
        member.stop()
        disk.free()
        running.shutdown()


def _logged(caplog: pytest.LogCaptureFixture, words: str, within: float = WAIT) -> list[str]:
    """The captured lines holding `words`, once there is one (a worker thread may log them)."""
    waited(lambda: logged(caplog, words), within=within)
    return logged(caplog, words)


def test_a_will_the_disk_refuses_is_logged_and_still_reaches_the_subscribers_in_memory(
    running: RunningServer,
    disk: SmallDisk,
    connect: Callable[..., Paho],
    caplog: pytest.LogCaptureFixture,
) -> None:
    member = _group_member(connect)  # a durable route: the Will must be written to disk
    watcher = connect("watcher")
    watcher.subscribe("t/#", qos=1)  # a non-persistent session: served from memory
    dying = paho(running, "dying", will=("t/will", b"gone", 1))
    caplog.set_level(logging.ERROR, logger="boxmq.mqtt")
    disk.fill()
    drop(dying)
    assert watcher.next().payload == b"gone"
    [line] = _logged(caplog, "Will")
    assert "dying" in line
    assert "t/will" in line
    assert "ENOSPC" in line
    assert [r.levelno for r in caplog.records if "Will" in r.getMessage()] == [logging.ERROR]
    assert _working_files(running.root) == []
    assert member.nothing(within=0.5)


def test_a_retained_publish_the_disk_refuses_keeps_the_previous_retained_message(
    running: RunningServer, disk: SmallDisk, connect: Callable[..., Paho]
) -> None:
    publisher = connect("pub")
    publisher.publish("t/r", b"old", qos=1, retain=True)  # no subscriber: the retained store only
    member = _group_member(connect)
    acks = _acks(publisher.client)
    # A body that fills two pages but for a few bytes: the copy needs two, the retained file
    # (a header line, then the body) three. Three are left: one of the two files fits, never
    # both, even with the page the old retained file gives back once replaced.
    page = os.statvfs(disk.path).f_frsize
    new = b"n" * (2 * page - 16)
    disk.fill(leave=3)
    info = publisher.client.publish("t/r", new, qos=1, retain=True)
    assert acks.get(timeout=WAIT) == (info.mid, QUOTA_EXCEEDED)
    assert member.nothing(within=0.5)
    late = connect("late")
    late.subscribe("t/r", qos=1)
    retained = late.next()
    assert (retained.payload, retained.retain) == (b"old", True)
    assert _working_files(running.root) == []
    assert [p.name for p in retained_folder(running.root).iterdir()] == [retained_name("t/r")]


def test_a_will_the_disk_refuses_stays_in_its_session_record_and_a_restart_sends_it(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A persistent session's Will, due at once: its connection's close writes its record,
    then the disk fills up, but for a page (room for the record again), and refuses the
    Will's own write. The record keeps the Will, an ERROR line names the client, and the
    restart once space is back sends it to the persistent subscriber, which went without."""
    real = Publishing.write

    def filling(self: Publishing, client_id: str, publish: Any, *args: Any) -> Any:
        if publish.topic.startswith("will/"):
            disk.fill(leave=1)
        return real(self, client_id, publish, *args)

    monkeypatch.setattr(Publishing, "write", filling)
    root = disk.path / "root"
    payload = os.urandom(20_000)  # five pages: more than the one left
    first = start_server(root)
    try:
        keeper = paho(first, "keeper", clean=False, expiry=300)
        keeper.subscribe("will/#", 1)
        keeper.stop()  # away: the Will is for its dropbox
        dying = paho(first, "dying", clean=False, expiry=300, will=("will/dying", payload, 1))
        caplog.set_level(logging.ERROR, logger="boxmq.mqtt")
        drop(dying)
        assert _logged(caplog, "its Will to will/dying was not stored")
        deadline = time.monotonic() + 1  # the record was written again right after, if at all
        while time.monotonic() < deadline:
            record = read_record(str(root), "dying")
            assert record is not None
            assert record.holder is None  # the close's
            assert record.will is not None, "the record dropped a Will never stored"
            assert record.will.payload == payload
            time.sleep(0.05)
        [kept] = _logged(caplog, "its session record keeps it")
        assert "client dying" in kept
    finally:
        disk.free()
        first.shutdown()
    monkeypatch.undo()
    with start_server(root) as second:
        keeper = paho(second, "keeper", clean=False, expiry=300)
        will = keeper.next(timeout=WAIT)
        assert (will.topic, will.payload) == ("will/dying", payload)
        recorded_will_sent(root, "dying")
        keeper.stop()


@pytest.mark.parametrize("fsync", ["always", "never"])
@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_a_persistent_session_whose_record_the_disk_refuses_is_refused_at_connack(
    disk: SmallDisk, fsync: str, v5: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Its CONNACK said 0 (session kept) while its record was only logged as not written:
    the next restart knew nothing of it. The CONNECT is refused now (v5 0x97, 3.1.1 0x03),
    under each fsync policy (the CONNACK waits for the record under each); a clean session
    still connects, and once space is back the session is made and outlives a restart."""
    running = start_server(disk.path / "root", fsync=fsync)
    try:
        clean = paho(running, "clean", v5=v5)
        clean.subscribe("w/#", qos=1)
        disk.fill()
        with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
            refused = paho(
                running,
                "kept",
                v5=v5,
                clean=False,
                expiry=3600,
                will=("w/kept", b"gone", 1),
                expect=QUOTA_EXCEEDED if v5 else SERVER_UNAVAILABLE_V311,
            )
            refused.stop()
        [line] = logged(caplog, "client kept refused")
        assert "ENOSPC (No space left on device); the file system is full" in line, line
        # Under fsync=always it was said connected while its record was on its way.
        assert not any("client kept connected" in r.getMessage() for r in caplog.records)
        assert not any(r.getMessage().startswith("client kept: session") for r in caplog.records)
        assert clean.nothing(within=0.3)  # the refused CONNECT's Will went nowhere
        disk.free()
        kept = paho(running, "kept", v5=v5, clean=False, expiry=3600)
        assert not kept.session_present  # what the client was told: nothing kept
        kept.subscribe("t/#", qos=1)
        kept.stop()
        clean.stop()
    finally:
        disk.free()
        running.shutdown()
    with start_server(disk.path / "root", fsync=fsync) as running:
        kept = paho(running, "kept", v5=v5, clean=False, expiry=3600)
        assert kept.session_present
        kept.stop()


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_a_subscribe_the_disk_refuses_is_logged_once_naming_the_filter(
    disk: SmallDisk, fsync: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Under fsync=always two lines said it: the batch's ERROR "1 of 2 packet(s) of a batch
    not stored" and a WARNING "subscribing to u/#: ..." (under never, only the WARNING).
    Then the session's record, written for the SUBSCRIBE and refused by the same full disk,
    had a WARNING of its own. One ERROR says it now, with the filter."""
    running = start_server(disk.path / "root", fsync=fsync)
    try:
        client = paho(running, "keeper", clean=False, expiry=3600)
        disk.fill()
        with caplog.at_level(logging.WARNING, logger="boxmq.mqtt"):
            [reason] = client.subscribe("u/#", qos=1)
            assert int(reason.value) == QUOTA_EXCEEDED
            errors = [r.getMessage() for r in caplog.records]  # all before the SUBACK
        client.stop()
    finally:
        disk.free()
        running.shutdown()
    assert len(errors) == 1, errors
    assert errors[0].startswith("client keeper: subscribing to u/#: the store failed at "), errors
    assert "ENOSPC (No space left on device); the file system is full" in errors[0], errors


def test_a_server_killed_right_after_refusing_a_connect_its_disk_refused_restarts_clean(
    disk: SmallDisk,
) -> None:
    """`boxmq serve` refuses (0x97) a CONNECT asking for a persistent session whose record the
    full disk refused, then is SIGKILLed: once there is space again the next serve starts,
    knows nothing of that session (no record, half-written or whole; its Will sent nowhere),
    and a durable subscriber gets each message acknowledged before (PUBACK) once."""
    address, server = serve_fresh(disk.path)
    root, port = address.root, address.port
    try:
        subscriber = paho(address, "sub", clean=False, expiry=3600)
        subscriber.subscribe("t/#", 1)
        subscriber.subscribe("w/#", 1)
        subscriber.stop()
        recorded_away(root, "sub")
        publisher = paho(address, "pub")
        for n in range(5):
            publisher.publish("t/x", str(n), 1)  # each PUBACKed
        publisher.stop()
        disk.fill()
        refused = paho(
            address,
            "kept",
            clean=False,
            expiry=3600,
            will=("w/kept", b"gone", 1),
            expect=QUOTA_EXCEEDED,
        )
        refused.stop()
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=20)
        disk.free()
    assert read_record(str(root), "kept") is None
    server = serve_process(root, port)
    try:
        subscriber = paho(address, "sub", clean=False, expiry=3600)
        assert subscriber.session_present
        got = [subscriber.next() for _ in range(5)]
        assert sorted((m.topic, m.payload) for m in got) == [
            ("t/x", str(n).encode()) for n in range(5)
        ]
        assert subscriber.nothing(within=0.5)  # nothing twice, and no Will
        kept = paho(address, "kept", clean=False, expiry=3600)
        assert not kept.session_present
        kept.stop()
        subscriber.stop()
    finally:
        stop_process(server)


def test_a_qos0_publish_the_disk_refuses_still_reaches_the_subscribers_in_memory(
    running: RunningServer, disk: SmallDisk, connect: Callable[..., Paho]
) -> None:
    """Its copies for the share group refused, the message was dropped for everyone: one
    persistent session or share group on a topic stopped every QoS 0 feed to the clean
    sessions subscribed to it, as long as the disk was full (found by the full-disk hunt)."""
    member = _group_member(connect)
    watcher = connect("watcher")
    watcher.subscribe("t/#", qos=0)  # a clean session: served from memory
    publisher = connect("pub")
    disk.fill()
    publisher.client.publish("t/0", b"live reading", qos=0)
    publisher.client.publish("t/0", b"retained reading", qos=0, retain=True)
    assert watcher.next().payload == b"live reading"
    assert watcher.next().payload == b"retained reading"
    assert _working_files(running.root) == []
    assert member.nothing(within=0.2)
    disk.free()
    late = connect("late")  # the retained store kept nothing of the refused one
    late.subscribe("t/0", qos=0)
    assert late.nothing(within=0.2)


def test_serve_restarted_on_a_full_disk_starts_and_takes_its_sessions_on_once_space_is_back(
    disk: SmallDisk, tmp_path: Path
) -> None:
    """A persistent session away when `boxmq serve` stopped is counted by the next start,
    which claims it with a file: on a full disk the start goes on, and its ERROR line said
    `the sessions counted by process N, which died, a server of this host that died, are not
    taken on ...: the store failed: ENOSPC`, twice "died" and no file; it names the file
    now, and the session is there once space is back (found by the full-disk hunt). The
    claim is tried again at each sweep (once a second) and refused again: only the first
    refusal is an ERROR line, where each wrote one, 3,600 an hour of a full disk (found by
    the operator's probe); the next ones are at DEBUG."""
    (tmp_path / "logs").mkdir()  # its serve.log off the full disk, its root a link to it
    (tmp_path / "logs" / "root").symlink_to(disk.path, target_is_directory=True)
    address, server = serve_fresh(tmp_path / "logs")
    root, port = address.root, address.port
    try:
        subscriber = paho(address, "sub", clean=False, expiry=3600)
        subscriber.subscribe("t/#", 1)
        subscriber.stop()
        recorded_away(root, "sub")
        publisher = paho(address, "pub")
        publisher.publish("t/x", "kept", 1)  # PUBACKed
        publisher.stop()
        disk.fill()
    finally:
        stop_process(server)
    server = serve_process(root, port, "-v")  # listening: it started, on the full disk
    try:

        def refusals() -> list[str]:
            log = (tmp_path / "logs" / "serve.log").read_text()
            return [line for line in log.splitlines() if "claiming them failed" in line]

        until(lambda: len(refusals()) >= 3, refusals)  # the start's, and two sweeps'
        [line] = [line for line in refusals() if " ERROR " in line]
        assert "died, a server" not in line, line
        assert f"the store failed at {root}/.mqtt/sessions/" in line, line
        assert "ENOSPC (No space left on device); the file system is full" in line, line
        disk.free()
        subscriber = paho(address, "sub", clean=False, expiry=3600)
        assert subscriber.session_present
        assert subscriber.next().payload == b"kept"
        subscriber.stop()
    finally:
        stop_process(server)


def test_a_share_group_join_the_disk_refuses_leaves_no_member_that_keeps_the_group(
    running: RunningServer, disk: SmallDisk, connect: Callable[..., Paho]
) -> None:
    """The member's file was made, then its process token refused (SUBACK 0x97): the empty
    file left was a member bound to no process, so the group outlived its last member's
    leaving and kept everything published to it, on a disk that was full (found by the
    full-disk hunt)."""
    first = connect("first")
    first.subscribe("$share/g/x/#", qos=1)
    group = running.root / "topic-root" / "x%2F%23" / ".subscriptions" / "share.g"
    disk.fill()
    [reason] = connect("second").subscribe("$share/g/x/#", qos=1)
    assert int(reason.value) == QUOTA_EXCEEDED
    assert set(members(str(group))) == {"first"}
    disk.free()
    first.stop()
    until(  # the last member out deletes the group
        lambda: not group.exists(), lambda: f"members left: {members(str(group))}", every=0.02
    )


def test_a_broker_whose_mark_the_disk_refused_marks_itself_once_space_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker marks itself in .mqtt/brokers/ at start (brokers.py), so that `boxmq
    unsubscribe` refuses to end a connected client's share group membership; a mark the disk
    refused (its inodes all taken) was never made again nor told, so once space was back the
    CLI ended np's membership while the broker still sent to it (found by the full-disk hunt).
    The refusal is told once, and the mark made at a tick once space is back."""
    with small_disk(tmp_path / "disk", inodes=256) as disk:
        root = disk.path / "root"
        start_server(root).shutdown()  # the root made
        disk.fill_inodes()
        with caplog.at_level(logging.WARNING, logger="boxmq.mqtt"):
            running = start_server(root)
        try:
            [line] = logged(caplog, "brokers")
            assert f"the store failed at {root}/.mqtt/brokers" in line, line
            assert "ENOSPC (No space left on device)" in line, line
            disk.free()
            marked_and_bound(running, "no mark once space was back")
        finally:
            running.shutdown()
