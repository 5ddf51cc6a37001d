"""A persistent session whose client moves between two `boxmq serve` processes on one root
(DESIGN.md §7): the server it left keeps the session in memory until its expiry, and must
not end it under the other one, which the client came back to (its durable subscriptions
deleted while in use), nor send its Will, nor deliver a message twice."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from harness.output import read_line
from harness.ports import free_port
from harness.stopping import kill
from tests.integration.mqtt.clients import (
    START,
    WAIT,
    RunningServer,
    Served,
    drop,
    paho,
    recorded_away,
    serve_fresh,
    serve_process,
    start_server,
    stop_process,
    subscriptions_on_disk,
)
from tests.integration.mqtt.raw import (
    connect_packet,
    open_raw,
    packet,
    puback,
    pubcomp,
    publish_fields,
    publishes,
    pubrec,
    read,
    string,
    subscribe,
    take_publishes,
)
from tests.processes import dead_token
from tests.waiting import logged, until

from boxmq.clock import ManualClock
from boxmq.mqtt import claim_wait
from boxmq.mqtt.session_record import (
    SessionRecord,
    read_record,
    record_path,
    records_folder,
    write_record,
)
from boxmq.mqtt.succession import successor

EXPIRY = 2  # seconds: the session outlives each move, and the timer of the server left fires


def test_a_session_moved_to_another_server_outlives_the_expiry_of_the_one_it_left(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    a, b, _ = two_servers
    root = a.root
    watcher = paho(b, "watcher")
    watcher.subscribe("wills/#", 1)
    sender = paho(a, "sender")
    roamer = paho(a, "roamer", clean=False, expiry=EXPIRY, will=("wills/roamer", b"gone", 1),
                  will_delay=EXPIRY)  # fmt: skip
    roamer.subscribe("news/#", 2)
    drop(roamer)  # away from A, without DISCONNECT: its Will waits for its delay
    recorded_away(root, "roamer")
    sender.publish("news/1", b"while away", 2)
    # Back within its expiry, to B: its session, and what came while it was away.
    roamer = paho(b, "roamer", clean=False, expiry=EXPIRY, will=("wills/roamer", b"gone", 1),
                  will_delay=EXPIRY)  # fmt: skip
    assert roamer.session_present
    assert roamer.next().payload == b"while away"
    time.sleep(EXPIRY + 1.5)  # A's timers (the session's end, its Will) fire
    assert ("news/#", None, "roamer") in subscriptions_on_disk(root)
    sender.publish("news/2", b"after A's expiry", 2)
    received = roamer.next()
    assert (received.payload, received.qos) == (b"after A's expiry", 2)
    assert roamer.nothing(within=1.0)  # once
    assert watcher.nothing(within=0.5)  # no Will: the client is connected
    # And back to A, which let go of it: the same session, from the disk.
    drop(roamer)
    recorded_away(root, "roamer")
    roamer = paho(a, "roamer", clean=False, expiry=EXPIRY, will=("wills/roamer", b"gone", 1),
                  will_delay=EXPIRY)  # fmt: skip
    assert roamer.session_present
    time.sleep(EXPIRY + 1.5)  # B's timers fire
    assert ("news/#", None, "roamer") in subscriptions_on_disk(root)
    sender.publish("news/3", b"after B's expiry", 2)
    assert roamer.next().payload == b"after B's expiry"
    assert roamer.nothing(within=1.0)
    assert watcher.nothing(within=0.5)
    roamer.stop()


@pytest.mark.parametrize("expiry", [0, 60], ids=["new-session-expiry-0", "new-persistent"])
def test_a_clean_start_on_the_other_server_sends_the_delayed_will_at_once_and_once(
    two_servers: tuple[RunningServer, RunningServer, Served], expiry: int
) -> None:
    """A clean start ends the session, and a Will waiting out its delay goes out then (MQTT
    5.0 §3.1.3.2.2). Across servers it was lost (the new session's record named B, and A's
    timer let the Will be), or, when the new session kept no record, A sent it at its due
    time. About 3 s: A's timer must fire to show that it sends nothing."""
    a, b, _ = two_servers
    watcher = paho(b, "watcher", clean=False, expiry=60)  # on disk: sent what either sends
    watcher.subscribe("wills/#", 1)
    roamer = paho(a, "roamer", clean=False, expiry=60, will=("wills/roamer", b"gone", 1),
                  will_delay=2)  # fmt: skip
    drop(roamer)
    recorded_away(a.root, "roamer")
    roamer = paho(b, "roamer", expiry=expiry)  # clean start
    assert not roamer.session_present
    assert watcher.next(timeout=1.5).payload == b"gone"  # at once, not after its delay
    assert watcher.nothing(within=2.5)  # once: A's timer finds the session ended
    roamer.stop()


def test_a_quick_return_to_the_first_server_resumes_the_session_the_second_one_moved_on(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """A to B and back to A within the expiry: A still holds the session in memory, as it
    was when the client left it; what B delivered since is not sent again."""
    a, b, _ = two_servers
    root = a.root
    sender = paho(a, "sender")
    roamer = paho(a, "roamer", clean=False, expiry=EXPIRY)
    roamer.subscribe("news/#", 2)
    roamer.stop()
    recorded_away(root, "roamer")
    roamer = paho(b, "roamer", clean=False, expiry=EXPIRY)
    assert roamer.session_present
    sender.publish("news/1", b"on B", 2)
    assert roamer.next().payload == b"on B"
    roamer.stop()
    recorded_away(root, "roamer")
    roamer = paho(a, "roamer", clean=False, expiry=EXPIRY)
    assert roamer.session_present
    assert roamer.nothing(within=1.0)  # B delivered it: not again
    time.sleep(EXPIRY + 1.5)  # B's expiry passes
    assert ("news/#", None, "roamer") in subscriptions_on_disk(root)
    sender.publish("news/2", b"on A", 2)
    assert roamer.next().payload == b"on A"
    assert roamer.nothing(within=1.0)
    roamer.stop()


def test_a_qos2_message_settled_on_the_second_server_is_not_sent_again_by_the_first(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """In flight at QoS 2 when the client left A, sent again by B (same packet id, DUP) and
    acknowledged there: A, which the client comes back to within the expiry, held it in
    flight in memory, and must not send it again (a client that completed the exchange takes
    it for a new message, and delivers it twice)."""
    a, b, _ = two_servers
    root = a.root
    roamer, _ = open_raw(a, "roamer", expiry=30)
    try:
        roamer.sendall(subscribe(1, "news/#", 2))
        assert read(roamer)[0] == 0x90
        sender = paho(a, "sender")
        sender.publish("news/1", b"once", 2)
        sender.stop()
        [first] = take_publishes(roamer, 1)  # never answered
        roamer.close()
        recorded_away(root, "roamer")
        roamer, present = open_raw(b, "roamer", expiry=30)
        assert present
        [again] = take_publishes(roamer, 1)
        assert (again.payload, again.packet_id, again.dup) == (b"once", first.packet_id, True)
        roamer.sendall(pubrec(again.packet_id))
        assert read(roamer)[0] & 0xF0 == 0x60  # PUBREL
        roamer.sendall(pubcomp(again.packet_id))
        roamer.close()
        recorded_away(root, "roamer")
        # B reads the PUBCOMP before the close's end of stream, and the record it writes at
        # the close shows it handled: the packet id no longer awaits its PUBCOMP.
        away = read_record(str(root), "roamer")
        assert away is not None
        assert (away.releasing, away.sent) == ((), ())
        roamer, present = open_raw(a, "roamer", expiry=30)
        assert present
        assert publishes(roamer, within=1.0) == []
    finally:
        roamer.close()


def _on_both(
    a: RunningServer, b: RunningServer, *, qos: int, expiry: int
) -> tuple[socket.socket, socket.socket]:
    """Client `roamer` connected to A and subscribed to news/# at `qos`, then connected to B
    too, its connection to A still open (a network that changed under it, before A noticed):
    the two connections, the session present on B."""
    on_a, _ = open_raw(a, "roamer", expiry=expiry)
    on_a.sendall(subscribe(1, "news/#", qos))
    assert read(on_a)[0] == 0x90
    on_b, present = open_raw(b, "roamer", expiry=expiry)
    assert present
    return on_a, on_b


def test_a_client_connected_to_both_servers_keeps_its_session_when_the_first_connection_ends(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """The client connects to B while its connection to A is still open (a network that
    changed under it, before A noticed). B cannot close A's connection (another process):
    both stay open until A's closes; then A must not write the session as away and kept by
    A over B's record, whose expiry then ended the session under B's client."""
    a, b, _ = two_servers
    root = a.root
    on_a, on_b = _on_both(a, b, qos=1, expiry=EXPIRY)
    try:
        taken = read_record(str(root), "roamer")
        assert taken is not None
        assert taken.holder is not None
        on_a.close()
        log = root.parent / "serve.log"  # both servers' (serve_process's)
        until(
            lambda: "client roamer: its session was taken by another server" in log.read_text(),
            "A did not log that it saw the close and let the session go to B",
        )
        assert read_record(str(root), "roamer") == taken  # still B's, its client connected
        time.sleep(EXPIRY + 1.0)  # A's expiry, had it kept the session, passes
        assert ("news/#", None, "roamer") in subscriptions_on_disk(root)
        sender = paho(a, "sender")
        sender.publish("news/1", b"to B", 1)
        [got] = take_publishes(on_b, 1)
        assert got.payload == b"to B"
        on_b.sendall(puback(got.packet_id))
        sender.stop()
    finally:
        on_a.close()
        on_b.close()


def test_a_server_that_would_send_qos2_on_a_connection_whose_session_moved_closes_it(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """Connected to A and then to B, A's connection still open: A is about to send a QoS 2
    message, which writes the session's record first. Written over B's, it named A again,
    and when A's connection closed A kept the session as its own and ended it at its expiry
    under the client connected to B (subscriptions deleted, nothing more delivered). A must
    close its connection instead (0x8E Session taken over), the message left to the session."""
    a, b, _ = two_servers
    root = a.root
    on_a, on_b = _on_both(a, b, qos=2, expiry=EXPIRY)
    try:
        taken = read_record(str(root), "roamer")
        assert taken is not None
        sender = paho(a, "sender")
        for n in range(3):
            sender.publish("news/1", f"m{n}".encode(), 2)
        kind, body = read(on_a)
        assert (kind, body[:1]) == (0xE0, b"\x8e"), (hex(kind), body.hex())  # no PUBLISH first
        assert read(on_a) == (0, b"")  # closed
        record = read_record(str(root), "roamer")
        assert record is not None
        assert (record.held_by, record.disconnected_at) == (taken.held_by, None)  # B's
        time.sleep(EXPIRY + 1.0)  # A's expiry, had it kept the session, passes
        assert ("news/#", None, "roamer") in subscriptions_on_disk(root)
        sender.publish("news/1", b"later", 2)
        # What B claimed of m0-m2 comes before the message published after them, however
        # long a loaded machine makes B take (a second of silence let a late one pass for
        # "later").
        got: set[bytes] = set()
        while (next_one := take_publishes(on_b, 1)[0].payload) != b"later":
            got.add(next_one)
        sender.stop()
        # What A had claimed for its connection and never sent is the session's: it goes
        # out at the session's next resumption, here from the disk (A let go of it); B's
        # from memory takes it back too (the last test here).
        on_b.close()
        recorded_away(root, "roamer")
        on_b, present = open_raw(a, "roamer", expiry=EXPIRY)
        assert present
        while not got >= {b"m0", b"m1", b"m2"}:  # each comes in up to 10 s, or it fails
            got.add(take_publishes(on_b, 1)[0].payload)
    finally:
        on_a.close()
        on_b.close()


def test_a_client_back_on_the_surviving_server_gets_its_session_and_the_dead_one_its_will(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """A is killed (SIGKILL) while the client is connected to it, a QoS 2 message in
    flight; the client connects to B, which still runs. Its session is there, the message
    in flight again under its packet id (DUP) and the one published meanwhile after it; and
    the connection A held ended without DISCONNECT, so its Will goes out, as a restart of A
    sends it: B, finding the record of a dead server, never sent it."""
    a, b, killed = two_servers
    watcher = paho(b, "watcher")
    watcher.subscribe("wills/#", 1)
    on_a, _ = open_raw(a, "roamer", expiry=30, will=("wills/roamer", b"gone"))
    on_b = None
    try:
        on_a.sendall(subscribe(1, "news/#", 2))
        assert read(on_a)[0] == 0x90
        sender = paho(b, "sender")
        sender.publish("news/1", b"m0", 2)
        [first] = take_publishes(on_a, 1)  # never answered
        kill(killed)
        sender.publish("news/1", b"m1", 2)
        sender.stop()
        on_b, present = open_raw(b, "roamer", expiry=30)
        assert present
        again = take_publishes(on_b, 2)
        assert [(p.payload, p.dup) for p in again] == [(b"m0", True), (b"m1", False)]
        assert again[0].packet_id == first.packet_id
        assert watcher.next().payload == b"gone"
        assert watcher.nothing(within=0.5)  # once
    finally:
        on_a.close()
        if on_b is not None:
            on_b.close()


def test_a_session_whose_server_died_ends_on_time_while_another_server_runs(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """A is killed while the client is connected to it, and the client never comes back.
    B runs on: the session's expiry passes, and its Will is due at once."""
    a, b, killed = two_servers
    root = a.root
    watcher = paho(b, "watcher")
    watcher.subscribe("wills/#", 1)
    on_a, _ = open_raw(a, "roamer", expiry=EXPIRY, will=("wills/roamer", b"gone"))
    try:
        on_a.sendall(subscribe(1, "news/#", 1))
        assert read(on_a)[0] == 0x90
        kill(killed)
    finally:
        on_a.close()
    assert watcher.next(timeout=EXPIRY + 3.0).payload == b"gone"
    time.sleep(EXPIRY + 1.0)
    assert ("news/#", None, "roamer") not in subscriptions_on_disk(root)
    assert read_record(str(root), "roamer") is None


def test_a_subscribe_on_a_connection_whose_session_moved_closes_it(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """As above, with a SUBSCRIBE on A's connection, which writes the record too: A closes
    that connection rather than write its name back over B's."""
    a, b, _ = two_servers
    root = a.root
    on_a, on_b = _on_both(a, b, qos=1, expiry=EXPIRY)
    try:
        taken = read_record(str(root), "roamer")
        assert taken is not None
        on_a.sendall(subscribe(2, "other/#", 1))
        kind, body = read(on_a)
        assert (kind, body[:1]) == (0xE0, b"\x8e"), (hex(kind), body.hex())  # no SUBACK
        assert read_record(str(root), "roamer") == taken
        assert ("other/#", None, "roamer") not in subscriptions_on_disk(root)
    finally:
        on_a.close()
        on_b.close()


def test_an_unsubscribe_on_a_connection_whose_session_moved_closes_it(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """As above, with an UNSUBSCRIBE, which writes the record too: A closes that connection
    rather than write its name back over B's, and the subscription stays the session's."""
    a, b, _ = two_servers
    root = a.root
    on_a, on_b = _on_both(a, b, qos=1, expiry=EXPIRY)
    try:
        taken = read_record(str(root), "roamer")
        assert taken is not None
        on_a.sendall(packet(0xA2, (3).to_bytes(2, "big") + b"\x00" + string("news/#")))
        kind, body = read(on_a)
        assert (kind, body[:1]) == (0xE0, b"\x8e"), (hex(kind), body.hex())  # no UNSUBACK
        assert read_record(str(root), "roamer") == taken
        assert ("news/#", None, "roamer") in subscriptions_on_disk(root)
    finally:
        on_a.close()
        on_b.close()


def _claim_path(root: Path, client_id: str, dead: str) -> Path:
    """Where a survivor claims the session of `client_id` from `dead` (adoption.session_claim)."""
    name = os.path.basename(record_path(str(root), client_id))
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]
    return Path(records_folder(str(root))) / f".dead-{dead}-{digest}"


_HOLD_CLAIM = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_two_survivors_send_the_will_of_a_session_whose_server_died_once(
    two_servers: tuple[RunningServer, RunningServer, Served], tmp_path: Path
) -> None:
    """A is killed with the client connected; B and C both run on the root, and only the
    one that wins the claim takes the session on. A claimer that dies holding the claim
    (here a process the test kills) leaves it to the next one."""
    a, b, killed = two_servers
    root = a.root
    c = RunningServer(root, None, "127.0.0.1", free_port(), None, None, None, None)  # type: ignore[arg-type]
    third = serve_process(root, c.port)
    claimer = None
    try:
        watcher = paho(b, "watcher", clean=False, expiry=60)
        watcher.subscribe("wills/#", 1)
        on_a, _ = open_raw(a, "roamer", expiry=EXPIRY, will=("wills/roamer", b"gone"))
        record = read_record(str(root), "roamer")
        assert record is not None
        assert record.holder is not None
        claim = _claim_path(root, "roamer", record.holder)
        claimer = subprocess.Popen(
            [sys.executable, "-c", _HOLD_CLAIM, str(claim)], stdout=subprocess.PIPE
        )
        assert claimer.stdout is not None
        assert read_line(claimer.stdout, 30) == "held\n"
        kill(killed)
        on_a.close()
        assert watcher.nothing(within=3.0)  # B and C sweep, and find the session claimed
        kill(claimer)
        assert watcher.next(timeout=EXPIRY + 5.0).payload == b"gone"
        assert watcher.nothing(within=3.0)  # once
        assert not claim.exists()
        time.sleep(EXPIRY + 1.0)
        assert read_record(str(root), "roamer") is None
        watcher.stop()
    finally:
        if claimer is not None:
            if claimer.poll() is None:
                kill(claimer)
            assert claimer.stdout is not None
            claimer.stdout.close()
        stop_process(third)


def test_a_share_groups_messages_held_by_a_session_whose_server_died_go_to_a_member_on_b(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """What the dead session was sent and never acknowledged stays locked to it until its
    expiry (its client may come back for it), then goes to the group's member on B."""
    a, b, killed = two_servers
    on_a, _ = open_raw(a, "roamer", expiry=EXPIRY)
    try:
        on_a.sendall(subscribe(1, "$share/g/jobs/#", 1))
        assert read(on_a)[0] == 0x90
        sender = paho(b, "sender")
        for n in range(2):
            sender.publish(f"jobs/{n}", b"job %d" % n, 1)
        taken = take_publishes(on_a, 2)  # never acknowledged
        assert sorted(p.payload for p in taken) == [b"job 0", b"job 1"]
        worker = paho(b, "worker", clean=False, expiry=60)
        worker.subscribe("$share/g/jobs/#", 1)
        kill(killed)
    finally:
        on_a.close()
    got = [worker.next(timeout=EXPIRY + 5.0).payload for _ in range(2)]
    assert sorted(got) == [b"job 0", b"job 1"]
    assert worker.nothing(within=1.0)  # once each
    worker.stop()
    sender.stop()


def test_a_client_coming_back_while_its_dead_servers_session_is_claimed_keeps_it(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """A is killed; the client comes back to B while the session is claimed (by a claimer
    the test then kills): B's CONNECT waits for the claim, takes the session over once (one
    Will), and nothing ends it under the connected client when its expiry passes."""
    a, b, killed = two_servers
    root = a.root
    watcher = paho(b, "watcher", clean=False, expiry=60)
    watcher.subscribe("wills/#", 1)
    on_a, _ = open_raw(a, "roamer", expiry=EXPIRY, will=("wills/roamer", b"gone"))
    on_a.sendall(subscribe(1, "news/#", 1))
    assert read(on_a)[0] == 0x90
    record = read_record(str(root), "roamer")
    assert record is not None
    assert record.holder is not None
    claim = _claim_path(root, "roamer", record.holder)
    # In a pool, not a bare thread: the connection's failure is raised here, once.
    with ThreadPoolExecutor(1) as pool:
        with subprocess.Popen(
            [sys.executable, "-c", _HOLD_CLAIM, str(claim)], stdout=subprocess.PIPE
        ) as claimer:
            try:
                assert claimer.stdout is not None
                assert read_line(claimer.stdout, 30) == "held\n"
                kill(killed)
                on_a.close()
                back = pool.submit(open_raw, b, "roamer", expiry=EXPIRY)
                with pytest.raises(TimeoutError):  # its CONNECT waits for the claim
                    back.result(timeout=1.0)
            finally:
                claimer.kill()
        on_b, present = back.result(timeout=30)
    try:
        assert present
        assert watcher.next(timeout=5.0).payload == b"gone"
        assert watcher.nothing(within=1.0)  # once
        time.sleep(EXPIRY + 1.5)
        assert ("news/#", None, "roamer") in subscriptions_on_disk(root)
        sender = paho(b, "sender")
        sender.publish("news/1", b"still here", 1)
        assert take_publishes(on_b, 1)[0].payload == b"still here"
        sender.stop()
    finally:
        on_b.close()
    watcher.stop()


def _settled(sock: socket.socket, within: float) -> list[tuple[bytes, bool]]:
    """(payload, DUP) of each QoS 2 PUBLISH before `within` s of silence, each answered with
    PUBREC, and each PUBREL with PUBCOMP: what the client took, exactly once."""
    sock.settimeout(within)
    got: list[tuple[bytes, bool]] = []
    while True:
        try:
            kind, body = read(sock)
        except TimeoutError:
            return got
        if kind & 0xF0 == 0x60:
            sock.sendall(pubcomp(int.from_bytes(body[:2], "big")))
            continue
        assert kind & 0xF0 == 0x30, hex(kind)
        payload, packet_id = publish_fields(body)
        got.append((payload, bool(kind & 0x08)))
        sock.sendall(pubrec(packet_id))


def test_a_server_killed_after_closing_a_connection_whose_session_moved_loses_nothing(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """A checks the session's record before a QoS 2 write, finds B named (`TakenElsewhere.since`),
    closes its connection (0x8E) with what it had claimed for it left locked to the session,
    and is SIGKILLed right then: the client, on B, takes each message published (PUBACKed to
    its sender) exactly once, before and after it leaves B and comes back, and a later one."""
    a, b, killed = two_servers
    root = a.root
    on_a, on_b = _on_both(a, b, qos=2, expiry=30)
    try:
        sender = paho(a, "sender")  # A's own: it claims them for its connection at once
        for n in range(3):
            sender.publish("news/1", f"m{n}".encode(), 2)
        kind, body = read(on_a)
        assert (kind, body[:1]) == (0xE0, b"\x8e"), (hex(kind), body.hex())
        killed.kill()  # right after the close: A's disk work for it may be under way
        killed.wait()
        sender.stop()
        got = _settled(on_b, within=1.0)
        on_b.close()
        recorded_away(root, "roamer")
        on_b, present = open_raw(b, "roamer", expiry=30)
        assert present
        got += _settled(on_b, within=2.0)
        later = paho(b, "sender")
        later.publish("news/1", b"later", 2)
        got += _settled(on_b, within=1.0)
        later.stop()
        fresh = sorted(payload for payload, dup in got if not dup)
        assert sorted({payload for payload, _ in got}) == [b"later", b"m0", b"m1", b"m2"], got
        assert len(fresh) == len(set(fresh)), got  # none taken twice as new
    finally:
        on_a.close()
        on_b.close()


def test_a_claim_held_by_a_stopped_server_keeps_a_connect_waiting_but_not_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A record names a dead server of this host, and a process (standing for a server
    stopped by SIGSTOP, or on a slow NFS) holds the claim on it. The CONNECT of its client
    took the flock, blocking, on the loop: every other client of the server froze with it.
    Now another client connects meanwhile, and that CONNECT is refused as server busy once
    its patience ran out (on the server's clock, moved by the test); with the claim let go,
    the client gets its session."""
    root = tmp_path / "root"
    dead = dead_token()
    clock = ManualClock(time.time())
    running = start_server(root, clock=clock)  # which takes on such records found at its start
    os.makedirs(records_folder(str(root)), exist_ok=True)
    claimer = subprocess.Popen(
        [sys.executable, "-c", _HOLD_CLAIM, str(_claim_path(root, "roamer", dead))],
        stdout=subprocess.PIPE,
    )
    try:
        assert claimer.stdout is not None
        assert read_line(claimer.stdout, 30) == "held\n"
        write_record(str(root), SessionRecord("roamer", 3600, holder=dead, server=dead))
        with socket.create_connection((running.host, running.port), timeout=WAIT) as waiting:
            waiting.sendall(connect_packet("roamer"))
            time.sleep(0.2)  # its CONNECT read, and waiting for the claim
            other = paho(running, "other")  # served meanwhile
            other.stop()
            clock.advance(claim_wait.CLAIM_PATIENCE)
            kind, body = read(waiting)
        assert (kind, body[1]) == (0x20, 0x89)  # CONNACK, server busy
        [line] = logged(caplog, "taken on by another")
        assert line.startswith("client 'roamer' (no user name, from 127.0.0.1:"), line
    finally:
        kill(claimer)
        assert claimer.stdout is not None
        claimer.stdout.close()
    try:
        back, present = open_raw(running, "roamer")
        back.close()
        assert present
    finally:
        running.shutdown()


def _ended(root: Path, client_id: str, within: float) -> bool:
    """Whether the session of `client_id` ends within `within` s: its record and its
    subscription to news/# deleted."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        subscribed = ("news/#", None, client_id) in subscriptions_on_disk(root)
        if read_record(str(root), client_id) is None and not subscribed:
            return True
        time.sleep(0.05)
    return False


def test_a_server_started_beside_one_keeping_an_away_session_leaves_its_will_to_that_one(
    tmp_path: Path,
) -> None:
    """A (boxmq serve) keeps the session of a client that left without DISCONNECT, its Will
    delayed 1 s (its expiry); B starts on the root meanwhile (in the test's process: its start takes
    less than the delay). B counted every session away it found at its start, this one
    too, which A still counted: both sent the Will when due, and both ended the session.
    B leaves it to A now: the Will comes once, and the session ends on time."""
    a, process = serve_fresh(tmp_path)
    b = None
    try:
        watcher = paho(a, "watcher", clean=False, expiry=60)
        watcher.subscribe("wills/#", 1)
        on_a, _ = open_raw(a, "roamer", expiry=1, will=("wills/roamer", b"gone"), will_delay=1)
        on_a.sendall(subscribe(1, "news/#", 1))
        assert read(on_a)[0] == 0x90
        on_a.close()
        recorded_away(a.root, "roamer")
        b = start_server(a.root)
        assert watcher.next(timeout=WAIT).payload == b"gone"
        assert watcher.nothing(within=0.5)  # once (a second one came within ms)
        assert _ended(a.root, "roamer", within=WAIT)
        watcher.stop()
    finally:
        if b is not None:
            b.shutdown()
        stop_process(process)


@contextlib.contextmanager
def _a_process_and_b_sweep_held(
    tmp_path: Path,
) -> Iterator[tuple[RunningServer, subprocess.Popen[bytes], RunningServer]]:
    """A, a `boxmq serve` process, and B in the test's process, whose sweep for sessions of
    dead servers waits for `_let_sweep` (else it would take a session on first); A killed,
    and B stopped, at the end."""
    a, process = serve_fresh(tmp_path)
    b = start_server(a.root)
    b.loop.call_soon_threadsafe(setattr, b.server.broker, "_next_adoption", float("inf"))
    try:
        yield a, process, b
    finally:
        if process.poll() is None:
            kill(process)
        b.shutdown()


def _let_sweep(b: RunningServer) -> None:
    """B's sweep for sessions of dead servers runs at its next tick."""
    b.loop.call_soon_threadsafe(setattr, b.server.broker, "_next_adoption", 0.0)


def _restart_killed(a: RunningServer, taken_on: Callable[[], object], what: str) -> None:
    """A restarted, which counts the sessions it finds from its start, then killed the
    moment it has taken the session on (`taken_on`, `what` it does then), before the Will it
    counts is due. Killed once it said it was ready, it lived on through the rest of its
    start: a loaded machine's run found the session ended by it, its Will sent and its record
    gone. Its MQTT door is on a port of its own (no client comes to it)."""
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(a.root), "serve"]
    log_path = a.root.parent / "restart.log"
    with open(log_path, "wb") as log:  # the child keeps its own copy
        restarted = subprocess.Popen([*command, "--mqtt", "127.0.0.1:0"], stderr=log)
    try:
        until(
            lambda: taken_on() or restarted.poll() is not None,
            f"the restart did not {what} within {START:.0f} s",
            within=START,
            every=0.01,
        )
    finally:
        kill(restarted)
    assert restarted.returncode == -signal.SIGKILL, log_path.read_text()  # it had not ended


def _counted(root: Path, client_id: str) -> bool:
    """Whether `client_id`'s record says a server counts the session as away, its holder
    gone (a restart writes it so when it finds the holder dead)."""
    record = read_record(str(root), client_id)
    return record is not None and record.holder is None and record.disconnected_at is not None


def test_a_session_taken_on_by_a_restart_is_taken_on_again_when_that_server_dies(
    tmp_path: Path,
) -> None:
    """B runs (in the test's process, its sweep for dead servers held off until A's restart
    took the session on: it would take it first). A is killed with the client connected,
    and restarted: the restart counts the session, its record naming no server; then that
    restart is killed too. B's sweep passed over records naming no server, so nothing sent
    the Will or ended the session until another server started on the host. B takes it on
    once the server that counts it died."""
    with _a_process_and_b_sweep_held(tmp_path) as (a, process, b):
        watcher = paho(b, "watcher", clean=False, expiry=60)
        watcher.subscribe("wills/#", 1)
        on_a, _ = open_raw(a, "roamer", expiry=EXPIRY, will=("wills/roamer", b"gone"), will_delay=1)
        on_a.sendall(subscribe(1, "news/#", 1))
        assert read(on_a)[0] == 0x90
        kill(process)
        on_a.close()
        _restart_killed(a, lambda: _counted(a.root, "roamer"), "write the session as away")
        record = read_record(str(a.root), "roamer")
        assert record is not None
        assert (record.server, record.holder) == (None, None)
        assert record.disconnected_at is not None
        _let_sweep(b)
        assert watcher.next(timeout=WAIT).payload == b"gone"
        assert watcher.nothing(within=0.5)  # once (a second one came within ms)
        assert _ended(a.root, "roamer", within=EXPIRY + 3.0)
        watcher.stop()


def test_a_session_away_a_restart_took_on_goes_to_a_survivor_when_that_restart_dies(
    tmp_path: Path,
) -> None:
    """A keeps the session of a client that left without DISCONNECT, its Will delayed; A is
    killed, and its restart takes the session on by claiming A's succession, writing no
    record (a restart over 1,000 such sessions took 1.5-2.8 s writing each); that restart is
    killed too before the Will is due. B, running all along (its sweep held off until then),
    follows the record through A's succession to the dead restart, claims that one's, and
    sends the Will once."""
    with _a_process_and_b_sweep_held(tmp_path) as (a, process, b):
        watcher = paho(b, "watcher", clean=False, expiry=60)
        watcher.subscribe("wills/#", 1)
        on_a, _ = open_raw(a, "roamer", expiry=EXPIRY, will=("wills/roamer", b"gone"), will_delay=2)
        on_a.close()
        recorded_away(a.root, "roamer")
        kill(process)
        found = read_record(str(a.root), "roamer")
        assert found is not None
        assert found.server is not None
        dead = found.server
        _restart_killed(a, lambda: successor(str(a.root), dead), "claim A's succession")
        assert read_record(str(a.root), "roamer") == found  # not written
        _let_sweep(b)
        assert watcher.next(timeout=WAIT).payload == b"gone"
        assert watcher.nothing(within=0.5)  # once
        assert _ended(a.root, "roamer", within=EXPIRY + 3.0)
        watcher.stop()
