"""What a persistent session keeps across a restart of the server: its end, on time, the
options its messages go out with, and a Will waiting out its delay (the session's record,
mqtt/session_record.py)."""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.ports import free_port
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import (
    WAIT,
    Paho,
    RunningServer,
    boxmq_cli,
    drop,
    loop_stopped,
    paho,
    paho_properties,
    record_deleted,
    recorded_away,
    recorded_will_sent,
    serve_fresh,
    serve_process,
    start_server,
    stop_process,
)
from tests.integration.mqtt.raw import connect_packet, read, subscribe
from tests.processes import dead_token
from tests.waiting import waited

from boxmq.clock import ManualClock
from boxmq.mqtt.packets import Will
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.publishing import Publishing
from boxmq.mqtt.session_record import SessionRecord, read_record, records_folder, write_record
from boxmq.mqtt.settings import Limits, MqttSettings
from boxmq.store.process import process_token
from boxmq.store.topics import subscription_key, subscription_path

EXPIRY = 2  # seconds: the Session Expiry Interval of the sessions here


def _dropbox(root: Path, filter: str, client_id: str) -> str:
    return subscription_path(str(root), filter, subscription_key(None, client_id))


def _away_with_identifier(server: RunningServer, client_id: str, filter: str) -> None:
    """A v5 client with a persistent session subscribes with Subscription Identifier 7 and
    Retain As Published, then disconnects."""
    client = paho(server, client_id, clean=False, expiry=EXPIRY)
    props = paho_properties(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7)
    client.subscribe(filter, 1, retainAsPublished=True, properties=props)
    client.stop()


def _message_files(root: Path) -> list[str]:
    """The files under topic-root but the generation marker: messages, records, members."""
    return [
        os.path.join(folder, name)
        for folder, _, names in os.walk(root / "topic-root")
        for name in names
        if name != ".generation"
    ]


def _left_at(root: Path, client_id: str) -> float:
    """When the server took the client's connection to have closed, as its session's record
    says: the moment a Will's delay and a session's interval count from. A clock read by the
    test before a drop or a restart counted the drop's latency or the server's start-up too,
    so that a slow start could make a lower bound on the wait unable to fail."""
    record = read_record(str(root), client_id)
    assert record is not None, f"no session record of {client_id}"
    assert record.disconnected_at is not None, f"the record of {client_id} has it connected"
    return record.disconnected_at


def test_a_session_back_within_its_interval_after_a_restart_gets_its_identifier(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    with start_server(root) as first:
        _away_with_identifier(first, "back", "sid/#")
        paho(first, "pub").publish("sid/away", b"while away", 1, retain=True)
    with start_server(root) as second:
        back = paho(second, "back", clean=False, expiry=EXPIRY)
        assert back.session_present
        waited = back.next()
        assert (waited.payload, waited.properties.SubscriptionIdentifier) == (b"while away", [7])
        assert waited.retain  # Retain As Published
        paho(second, "pub").publish("sid/after", b"after", 1)
        after = back.next()
        assert (after.payload, after.properties.SubscriptionIdentifier) == (b"after", [7])
        time.sleep(EXPIRY + 0.5)  # past the interval counted from the first disconnect
        assert os.path.isdir(_dropbox(root, "sid/#", "back"))  # its client came back in time


def test_a_session_not_back_within_its_interval_after_a_restart_ends(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first = start_server(root)
    try:
        _away_with_identifier(first, "gone", "gone/#")
        # 3.1.1: max_session_expiry, 7 days by default
        paho(first, "old", v5=False, clean=False).subscribe("kept/#", 1)
    finally:
        first.shutdown()  # before the interval: the first server's timer dies with it
    with start_server(root) as second:
        dropbox = _dropbox(root, "gone/#", "gone")
        waited(lambda: not os.path.isdir(dropbox), within=EXPIRY + 3, every=0.1)
        assert not os.path.exists(dropbox)
        paho(second, "pub").publish("gone/x", b"for nobody", 1)
        assert _message_files(root) == [
            os.path.join(_dropbox(root, "kept/#", "old"), ".subscription")
        ]


def test_a_restart_under_a_lower_max_session_expiry_ends_a_session_away_by_it(
    tmp_path: Path,
) -> None:
    """A session granted an hour, its Will a 10-minute delay, left under the default limit;
    the server restarted with `max_session_expiry = 3`: the session ends 3 s after its
    client left, its Will with it (no later than the session's end, MQTT 5.0 §3.1.3.2.2),
    as it would have had it connected under that limit. It kept the hour it was granted.
    The 3 s are counted on the brokers' clock, which stands still until moved here: on the
    system's, the restart's own time counted toward them, and the test saw only what was
    left of them once its watcher had subscribed."""
    root, capped = tmp_path / "root", 3
    clock = ManualClock(time.time())
    first = start_server(root, clock=clock)
    try:
        gone = paho(
            first, "gone", clean=False, expiry=3600, will=("wills/gone", b"gone", 1), will_delay=600
        )
        gone.subscribe("gone/#", 1)
        drop(gone)  # no DISCONNECT: its Will waits out its delay
        recorded_away(root, "gone")
    finally:
        first.shutdown()
    limits = Limits(max_session_expiry=capped)
    with start_server(root, MqttSettings(limits=limits), clock=clock) as second:
        watcher = paho(second, "watcher")
        watcher.subscribe("wills/#", 1)
        clock.advance(capped - 0.5)
        assert watcher.nothing(0.5)  # two ticks before the session's end
        assert os.path.isdir(_dropbox(root, "gone/#", "gone"))
        clock.advance(1)
        assert watcher.next(timeout=WAIT).payload == b"gone"
        record_deleted(root, "gone")
        assert not os.path.exists(_dropbox(root, "gone/#", "gone"))


def test_a_session_end_killed_between_a_subscriptions_record_and_folder_is_finished(
    tmp_path: Path,
) -> None:
    """A SIGKILL while a session's end deleted a subscription, after its record and before
    its folder (store/topics.remove_subscription), left that folder with its messages, and
    the session's record, deleted last. The restart ended the session, but no look found
    the folder: the next client of that id to subscribe to the filter got those messages."""
    root = tmp_path / "root"
    with start_server(root) as first:
        _away_with_identifier(first, "gone", "gone/#")
        paho(first, "pub").publish("gone/x", b"for the ended session", 1)
    dropbox = _dropbox(root, "gone/#", "gone")
    os.unlink(os.path.join(dropbox, ".subscription"))  # where the end was killed
    record = read_record(str(root), "gone")
    assert record is not None
    write_record(str(root), replace(record, disconnected_at=time.time() - 60))  # ran out
    with start_server(root) as second:
        record_deleted(root, "gone")  # ended at start
        again = paho(second, "gone", clean=False, expiry=EXPIRY)
        assert not again.session_present
        again.subscribe("gone/#", 1)
        assert again.nothing(0.5)
        assert _message_files(root) == [os.path.join(dropbox, ".subscription")]


WILL_DELAY = 2  # seconds: the Will Delay Interval of the Wills here
WILL_PAYLOAD = bytes(range(256))  # binary, not text


def _with_will(client_id: str, delay: int) -> Any:
    """A paho `configure` that sets a Will with a delay, a user property and a binary payload."""

    def configure(client: Any) -> None:
        props = paho_properties(
            PacketTypes.WILLMESSAGE, WillDelayInterval=delay, UserProperty=("k", "v")
        )
        client.will_set(f"will/{client_id}", WILL_PAYLOAD, 1, retain=False, properties=props)

    return configure


def _dying(server: RunningServer, client_id: str, delay: int = WILL_DELAY) -> Paho:
    return paho(server, client_id, clean=False, expiry=60, configure=_with_will(client_id, delay))


def _drop_together(*clients: Paho) -> None:
    """`drop` for several clients whose connections end at the same moment. Stopping a paho
    loop takes up to a second (it waits out its select); one `drop` after the other would start
    the first client's Will delay a second before the last connection even closes."""
    stoppers = [threading.Thread(target=loop_stopped, args=(client.client,)) for client in clients]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join()
    for client in clients:
        sock = client.client.socket()
        assert sock is not None
        sock.close()


def _watcher(server: RunningServer) -> Paho:
    watcher = paho(server, "watcher")
    watcher.subscribe("will/#", 1)
    return watcher


def test_a_delayed_will_is_sent_after_a_restart(tmp_path: Path) -> None:
    """The Will's delay, counted from its client's close on the broker's clock (moved here,
    not waited for), runs on across a restart: not sent before it, sent once after it."""
    root = tmp_path / "root"
    clock = ManualClock(time.time())
    first = start_server(root, clock=clock)
    try:
        drop(_dying(first, "dying"))  # no DISCONNECT: its Will waits out its delay
        recorded_away(root, "dying")
    finally:
        first.shutdown()  # at once: the first server's timer dies with it
    with start_server(root, clock=clock) as second:
        watcher = _watcher(second)
        clock.advance(WILL_DELAY - 0.5)
        assert watcher.nothing(0.5)  # two ticks before it is due
        clock.advance(1)
        will = watcher.next(timeout=WAIT)
        assert (will.topic, will.payload, will.qos) == ("will/dying", WILL_PAYLOAD, 1)
        assert will.properties.UserProperty == [("k", "v")]
        clock.advance(WILL_DELAY)
        assert watcher.nothing(0.5)  # once only
    third = start_server(root, clock=clock)  # sent: its record no longer holds it
    try:
        watcher = _watcher(third)
        clock.advance(WILL_DELAY)
        assert watcher.nothing(0.5)
    finally:
        third.shutdown()


def test_a_client_back_within_the_will_delay_after_a_restart_cancels_its_will(
    tmp_path: Path,
) -> None:
    """Two clients drop; after the restart one comes back within the delay: only the other's
    Will is sent (which shows the Wills do outlive the restart)."""
    # "back" reconnects within its delay, counted from its close on the broker's clock,
    # which stands still until it is moved past both delays.
    delay = 4
    root = tmp_path / "root"
    clock = ManualClock(time.time())
    with start_server(root, clock=clock) as first:
        _drop_together(_dying(first, "back", delay), _dying(first, "gone", delay))
        recorded_away(root, "back")
        recorded_away(root, "gone")
    with start_server(root, clock=clock) as second:
        watcher = _watcher(second)
        back = paho(second, "back", clean=False, expiry=60)
        assert back.session_present
        clock.advance(delay + 1)
        assert watcher.next(timeout=WAIT).topic == "will/gone"
        # Had "back"'s Will not been cancelled it would have been due with "gone"'s: three
        # ticks past that still cover it.
        assert watcher.nothing(0.75)


def test_a_will_of_a_client_connected_when_the_server_was_killed_is_sent_at_the_restart(
    tmp_path: Path,
) -> None:
    root, port = tmp_path / "root", free_port()
    address = RunningServer(root, None, "127.0.0.1", port, None, None, None, None)  # type: ignore[arg-type]
    process = serve_process(root, port)
    try:
        loop_stopped(_dying(address, "killed").client)  # no reconnect: it cancels the Will
        process.send_signal(signal.SIGKILL)  # no close of the connection is ever recorded
        process.wait(timeout=WAIT)
        process = serve_process(root, port)
        restarted = _left_at(root, "killed")  # the restart is the close: the delay counts from it
        watcher = _watcher(address)
        will = watcher.next(timeout=WAIT)
        assert WILL_DELAY - 0.5 < time.time() - restarted < WAIT
        assert (will.topic, will.payload) == ("will/killed", WILL_PAYLOAD)
    finally:
        stop_process(process)


def test_a_will_whose_sent_record_the_disk_refused_is_not_sent_again_by_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk refuses both the restart's record and the one that says the Will was sent:
    the Will goes out once, the log says a restart could repeat it, and the record is written
    again until the disk takes it; a later restart then sends nothing."""
    root = tmp_path / "root"
    folder = records_folder(str(root))
    will = Will("will/killed", b"gone", qos=1, properties=Properties.build(will_delay_interval=1))
    write_record(str(root), SessionRecord("killed", 60, holder=process_token(), will=will))
    rename = os.rename

    def refused(source: str, target: str) -> None:
        if os.path.dirname(target) == folder:
            raise OSError(errno.ENOSPC, "No space left on device", target)
        rename(source, target)

    monkeypatch.setattr(os, "rename", refused)
    with start_server(root) as second:
        watcher = _watcher(second)
        with caplog.at_level(logging.ERROR, logger="boxmq.mqtt"):
            assert watcher.next(timeout=WAIT).payload == b"gone"
        assert "a restart before it is written sends the Will again" in caplog.text
        record = read_record(str(root), "killed")
        assert record is not None
        assert record.will is not None  # the disk is still full
        assert watcher.nothing(2.5)  # never twice in one run
        monkeypatch.undo()  # space is back
        recorded_will_sent(root, "killed")
    with start_server(root) as third:
        assert _watcher(third).nothing(2.5)


def _slow_will_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Will's write (to topics under will/) takes a second more: a slow disk, which holds
    open the moment a SIGKILL would find between a Will sent and its durable copy written."""
    real = Publishing.write

    def slow(self: Publishing, client_id: str, publish: Any, *args: Any) -> Any:
        if publish.topic.startswith("will/"):
            time.sleep(1.0)
        return real(self, client_id, publish, *args)

    monkeypatch.setattr(Publishing, "write", slow)


def _keeper_away(server: RunningServer) -> Path:
    """A persistent session subscribed to will/#, away: the `target/` of its dropbox, where a
    Will for it waits."""
    keeper = paho(server, "keeper", clean=False, expiry=300)
    keeper.subscribe("will/#", 1)
    keeper.stop()
    return next(server.root.glob("topic-root/*/.subscriptions/client.keeper/target"))


def _record_keeps_the_will_until_it_reaches(server: RunningServer, target: Path) -> None:
    """Until the Will is in the keeper's dropbox, client `dying`'s record still holds it."""
    deadline = time.monotonic() + WAIT
    while not list(target.iterdir()):
        assert time.monotonic() < deadline, "the Will never reached the dropbox"
        record = read_record(str(server.root), "dying")
        assert record is not None
        assert record.will is not None, "the record dropped a Will not yet written"
        time.sleep(0.01)


def _will_leaves_its_record_only_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay: int
) -> None:
    """A SIGKILL may come at any moment: never may the record have dropped a Will sent while
    the Will's file is not yet in a persistent subscriber's dropbox, or the restart sends it
    to nobody. The Will's write is slowed here (a slow disk) to hold that moment open."""
    _slow_will_writes(monkeypatch)
    with start_server(tmp_path / "root", fsync="always") as server:
        target = _keeper_away(server)
        drop(_dying(server, "dying", delay))
        _record_keeps_the_will_until_it_reaches(server, target)
        recorded_will_sent(server.root, "dying")


def test_a_delayed_will_leaves_its_record_only_once_its_durable_copy_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its record was written, without the Will, before the Will's write ended."""
    _will_leaves_its_record_only_once_written(tmp_path, monkeypatch, 1)


def test_a_will_without_delay_leaves_a_persistent_sessions_record_only_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sent at the close of its connection: the record written at that close dropped it
    while its write ran."""
    _will_leaves_its_record_only_once_written(tmp_path, monkeypatch, 0)


def test_a_will_sent_at_a_takeover_leaves_the_record_only_once_its_durable_copy_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second CONNECT with the client id takes the session over: the old connection's Will
    (no delay) goes out at once. The new connection's record, written at its CONNECT, held
    nothing of it while its write ran (slowed, as above): a SIGKILL then lost it for every
    persistent subscriber."""
    _slow_will_writes(monkeypatch)
    with start_server(tmp_path / "root", fsync="always") as server:
        target = _keeper_away(server)
        loop_stopped(_dying(server, "dying", 0).client)  # no reconnect of its own
        # In a pool, not a bare thread: the connection's failure is raised here, once.
        with ThreadPoolExecutor(1) as pool:
            taking = pool.submit(paho, server, "dying", clean=False, expiry=60)
            _record_keeps_the_will_until_it_reaches(server, target)
            taking.result(timeout=WAIT)  # the new connection was accepted
        record = read_record(str(server.root), "dying")
        assert record is not None
        assert record.will is None  # the new connection's: it has none
        assert record.holder is not None


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_a_subscribe_before_the_connack_of_a_takeover_keeps_the_old_wills_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: str
) -> None:
    """As above, the new connection sending a SUBSCRIBE right behind its CONNECT, before
    its CONNACK came (as a client that subscribes at once may): the SUBSCRIBE writes the
    session's record too, and must not replace the one holding the old connection's Will
    before that Will is written (a SIGKILL then would lose it)."""
    _slow_will_writes(monkeypatch)
    server = start_server(tmp_path / "root", fsync=fsync)
    taker = None
    try:
        target = _keeper_away(server)
        loop_stopped(_dying(server, "dying", 0).client)  # no reconnect of its own
        taker = socket.create_connection((server.host, server.port), timeout=WAIT)
        taker.sendall(connect_packet("dying", expiry=60) + subscribe(1, "news/#", 1))
        _record_keeps_the_will_until_it_reaches(server, target)
        assert read(taker)[0] == 0x20  # CONNACK
        assert read(taker)[0] == 0x90  # SUBACK
        deadline = time.monotonic() + WAIT
        while (record := read_record(str(server.root), "dying")) is None or record.will:
            assert time.monotonic() < deadline, "the record still holds the Will sent"
            time.sleep(0.01)
        assert "news/#" in record.options  # the SUBSCRIBE's, written after
    finally:
        if taker is not None:
            taker.close()
        server.shutdown()


def test_a_client_back_after_its_server_died_keeps_that_connections_will_until_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record names a server of this host that died with the client connected (another
    `boxmq serve` on the root, SIGKILLed): the client's CONNECT to this one sends that
    connection's Will (lifetimes.left_by_the_dead), and the new record, without it, must
    wait for the Will's write, as at a takeover (a SIGKILL before would lose it)."""
    _slow_will_writes(monkeypatch)
    server = start_server(tmp_path / "root", fsync="always")
    taker = None
    try:
        target = _keeper_away(server)
        token = dead_token()
        will = Will("will/dying", b"gone", qos=1)
        record = SessionRecord("dying", 60, holder=token, server=token, will=will)
        write_record(str(server.root), record)
        taker = socket.create_connection((server.host, server.port), timeout=WAIT)
        taker.sendall(connect_packet("dying", expiry=60))
        _record_keeps_the_will_until_it_reaches(server, target)
        kind, body = read(taker)
        assert (kind, body[0]) == (0x20, 1)  # CONNACK, session present
    finally:
        if taker is not None:
            taker.close()
        server.shutdown()


def test_a_session_record_that_cannot_be_read_does_not_stop_the_server_from_starting(
    tmp_path: Path,
) -> None:
    """One session record the file system refused to read at start (EIO of a failing disk;
    ELOOP here, a symlink to itself) stopped `boxmq serve` from starting, for every client,
    and `boxmq session ls` from listing the other sessions (found by a second read). The
    server starts and serves, the record told at ERROR and left as it is, and once it reads
    again its session is taken on: its time up, it ends."""
    root = tmp_path / "root"
    now = time.time()
    for client_id in ("kept", "broken"):
        record = SessionRecord(client_id, 2, disconnected_at=now, counted_by=dead_token())
        write_record(str(root), record)
    path = Path(records_folder(str(root))) / "broken"
    aside = tmp_path / "aside"  # out of the folder, where it would be read as a record
    os.rename(path, aside)
    os.symlink("broken", path)
    listed = boxmq_cli(root, "session", "ls")
    assert listed.returncode == 0, listed.stderr
    assert "kept" in listed.stdout, listed.stdout
    assert "broken" not in listed.stdout, listed.stdout
    assert f"{path} cannot be read (" in listed.stderr, listed.stderr
    address, process = serve_fresh(tmp_path)
    try:
        said = (tmp_path / "serve.log").read_text()
        assert f"{path} cannot be read (" in said, said
        paho(address, "someone").stop()
        record_deleted(root, "kept")
        assert os.readlink(path) == "broken"  # left as it is
        os.unlink(path)
        os.rename(aside, path)  # it reads again
        record_deleted(root, "broken")
    finally:
        stop_process(process)
