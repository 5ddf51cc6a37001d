"""A persistent session's retained QoS 2 message finished after a restart is the topic's retained
message only if it is still the last one received (MQTT-3.3.1-5), and a subscriber gets it once.

Its PUBREL is marked delivered, then it replaces the topic's retained message, then its copies
go: a SIGKILL in between leaves the rest to the next start. That start replaced the retained
message whatever was published meanwhile; and a PUBREL after a restart, whose message the
server reads from disk, was sent live to a subscription that had just been sent it as retained.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    serve_fresh,
    serve_process,
    start_server,
)
from tests.integration.mqtt.clients import stop_process as stop
from tests.integration.mqtt.raw import (
    open_raw,
    publish,
    publish_fields,
    pubrel,
    read,
    subscribe,
)
from tests.retained import retained_folder

import boxmq
from boxmq.client.assured import AssuredIntake, Outcome

# `boxmq serve`, killed (SIGKILL) by itself at its `at`th replacement of a retained message:
# as the PUBREL of a retained QoS 2 message, marked delivered, is about to replace the topic's
# retained message ("before"), or once it has and its copies are still to go ("after").
_KILLED_AT_RETAINED = """
import os, signal, sys
from boxmq import cli
from boxmq.store.retained import RetainedStore
replace = RetainedStore.replace
count = [0]
def killed(self, staged):
    count[0] += 1
    if count[0] < {at} or {after}:
        replace(self, staged)
    if count[0] == {at}:
        os.kill(os.getpid(), signal.SIGKILL)
RetainedStore.replace = killed
sys.exit(cli.main(sys.argv[1:]))
"""


def _killed_at_pubrel(
    target: RunningServer,
    server: subprocess.Popen[bytes],
    payload: bytes,
    *,
    meanwhile: Callable[[RunningServer], None] | None = None,
) -> None:
    """A retained QoS 2 message of ret/1 published by the persistent session "pub", PUBREC,
    `meanwhile` done, then its PUBREL, at which the server (`_KILLED_AT_RETAINED`) kills
    itself before its PUBCOMP."""
    publisher, _ = open_raw(target, "pub", clean=False)
    publisher.sendall(publish("ret/1", payload, qos=2, packet_id=1, retain=True))
    assert read(publisher) == (0x50, b"\x00\x01")  # PUBREC
    if meanwhile is not None:
        meanwhile(target)
    publisher.sendall(pubrel(1))
    assert read(publisher) == (0, b"")  # killed before its PUBCOMP
    assert server.wait(timeout=20) == -signal.SIGKILL
    publisher.close()


def _retained_qos1(target: RunningServer) -> None:
    """A retained QoS 1 message of ret/1, b"qos1", acknowledged: its retained store done."""
    other, _ = open_raw(target, "other", clean=True, expiry=0)
    other.sendall(publish("ret/1", b"qos1", qos=1, packet_id=1, retain=True))
    assert read(other) == (0x40, b"\x00\x01")  # PUBACK: its retained store replaced
    other.close()


def _retained(sock: socket.socket, filter: str) -> list[bytes]:
    """SUBSCRIBE `filter` at QoS 1: the payloads of the retained messages sent for it (each
    with RETAIN set), read until half a second of silence."""
    sock.sendall(subscribe(1, filter, 1))
    assert read(sock)[0] == 0x90  # SUBACK
    sock.settimeout(0.5)
    got: list[bytes] = []
    while True:
        try:
            kind, body = read(sock)
        except TimeoutError:
            return got
        assert kind & 0xF0 == 0x30, hex(kind)
        assert kind & 0x01, "sent live, not as retained"
        got.append(publish_fields(body)[0])


@pytest.mark.parametrize("later", [b"new", b""], ids=["message", "delete"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_retained_message_published_while_the_server_was_down_outlives_its_recovery(
    tmp_path: Path, after: bool, later: bytes
) -> None:
    """A retained QoS 2 PUBLISH, a SIGKILL at its PUBREL, then a retained message of the same
    topic from the embedded API while the server is down: the restart finishes the PUBREL but
    keeps the newer message retained (it put back the older one, for good). An empty one, a
    delete, holds too: the topic then has no retained message (the older one came back, a
    delete leaving no file behind)."""
    script = _KILLED_AT_RETAINED.format(at=1, after=after)
    target, server = serve_fresh(tmp_path, program=("-c", script))
    try:
        _killed_at_pubrel(target, server, b"old")
        with boxmq.open(target.root) as box:
            box.publish("ret/1", later, retain=True)
        server = serve_process(target.root, target.port)
        late, _ = open_raw(target, "late", clean=True, expiry=0)
        assert _retained(late, "ret/#") == ([later] if later else [])
        late.close()
    finally:
        stop(server)


@pytest.mark.parametrize("same_tick", [False, True], ids=["apart", "same-tick"])
def test_a_retained_message_received_before_the_pubrel_is_replaced_by_its_recovery(
    tmp_path: Path, same_tick: bool
) -> None:
    """A retained QoS 1 message comes while a retained QoS 2 one awaits its PUBREL, which a
    SIGKILL cuts short before its retained store: the restart that finishes it replaces the
    QoS 1 one, as its PUBREL would have (a QoS 2 message is received at its PUBREL), though
    its id, made at its PUBLISH, is the older of the two.

    `same_tick`: the PUBREL marked in the same tick of the file system's clock (its marker's
    time set to the retained file's, as file systems of 1 s timestamps show two writes of one
    second): the restart replaces it all the same. Told by the times, it was taken for
    written after the marker, so kept, and the QoS 2 message, received last, lost its place."""
    script = _KILLED_AT_RETAINED.format(at=2, after=False)
    target, server = serve_fresh(tmp_path, program=("-c", script))
    try:
        _killed_at_pubrel(target, server, b"qos2", meanwhile=_retained_qos1)
        if same_tick:
            # Beside each, the QoS 2 message staged and a temporary: their names start with a dot.
            [retained] = retained_folder(target.root).glob("[!.]*")
            [marker] = (Path(target.root) / ".exactly-once").glob("[!.]*")
            tick = retained.stat().st_mtime_ns
            os.utime(marker, ns=(tick, tick))
        server = serve_process(target.root, target.port)
        late, _ = open_raw(target, "late", clean=True, expiry=0)
        assert _retained(late, "ret/#") == [b"qos2"]
        late.close()
    finally:
        stop(server)


def test_a_subscriber_that_comes_while_a_pubrel_after_a_restart_is_written_gets_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PUBREL after a restart sends on its retained message as working/ keeps it: the
    retained store replaced by a worker, then the subscribers in memory. A SUBSCRIBE the loop
    handled in between was sent it as retained, and live again: twice. It now waits until the
    message is routed (retained_window.py), then is sent it as retained, once."""
    root = tmp_path / "root"
    with start_server(root) as running:
        publisher, _ = open_raw(running, "pub", clean=False)
        publisher.sendall(publish("ret/1", b"v", qos=2, packet_id=1, retain=True))
        assert read(publisher) == (0x50, b"\x00\x01")  # PUBREC: in the intake
        publisher.close()
    replaced, go = threading.Event(), threading.Event()
    deliver_many = AssuredIntake.deliver_many

    def held(self: AssuredIntake, *args: Any, **kwargs: Any) -> list[Outcome]:
        """The PUBREL's delivery, its retained message replaced: done, but not yet told to
        the loop, which routes it."""
        outcomes = deliver_many(self, *args, **kwargs)
        replaced.set()
        go.wait(timeout=10)
        return outcomes

    monkeypatch.setattr(AssuredIntake, "deliver_many", held)
    running = start_server(root)
    try:
        publisher, present = open_raw(running, "pub", clean=False)
        assert present
        publisher.sendall(pubrel(1))
        assert replaced.wait(timeout=10)
        late, _ = open_raw(running, "late", clean=True, expiry=0)
        late.sendall(subscribe(1, "ret/#", 1))
        # Its SUBACK waits for the routing: read before `go`, it came when the hold's 10 s
        # ran out, a few ms before the socket's own 10 s (a loaded machine: after them).
        late.settimeout(0.5)
        with pytest.raises(TimeoutError):
            read(late)
        late.settimeout(WAIT)
        go.set()
        assert read(publisher)[0] == 0x70  # PUBCOMP
        assert read(late)[0] == 0x90  # SUBACK
        kind, body = read(late)
        assert (kind & 0xF1, publish_fields(body)[0]) == (0x31, b"v")  # retained
        late.settimeout(0.5)
        with pytest.raises(TimeoutError):  # nothing more: not "v" again, live
            read(late)
        publisher.close()
        late.close()
    finally:
        go.set()
        running.shutdown()


def test_a_pubrel_cut_short_is_finished_by_a_restart_after_done_ttl(tmp_path: Path) -> None:
    """A SIGKILL after a QoS 2 message's PUBREL was marked delivered, and another process on
    the root (here the embedded API) sweeping past done_ttl while the server is down: its
    sweep deleted the marker as an old one, though its message still waited in working/, so
    the restart took it for one whose PUBREL never came. It was never sent (here: never the
    topic's retained message) unless the client sent its PUBREL again before pending_ttl
    from its PUBLISH (done_ttl's default is pending_ttl's: already past)."""
    script = _KILLED_AT_RETAINED.format(at=1, after=False)
    target, server = serve_fresh(tmp_path, program=("-c", script))
    clock = boxmq.ManualClock(time.time())
    other = boxmq.open(target.root, clock=clock)
    try:
        other.intake.expire()  # its books read before the crash: the marker is none of its
        _killed_at_pubrel(target, server, b"old")
        clock.advance(other.intake.limits.done_ttl + 1)
        other.intake.expire()  # what its sweep runs
        other.close()
        server = serve_process(target.root, target.port)
        late, _ = open_raw(target, "late", clean=True, expiry=0)
        assert _retained(late, "ret/#") == [b"old"]
        late.close()
    finally:
        other.close()
        stop(server)


# The PUBREL of a retained QoS 2 message whose turn came after a later retained message of its
# topic was written (`deliver_many(superseded=True)`, as mqtt/publishing.py's turns call it),
# killed (SIGKILL) once marked delivered, before its copies go.
_KILLED_SUPERSEDED = """
import os, signal, sys
import boxmq
from boxmq.client.assured import AssuredMessage
from boxmq.client.topics import Topics
from boxmq.model import PUBLISHED_RETAINED
box = boxmq.open(sys.argv[1], fsync="never")
old = AssuredMessage("mqtt:pub", "1", b"old", topic="ret/1", properties={PUBLISHED_RETAINED: True})
assert box.intake.assured_one(old, reserved=True)
box.publish("ret/1", b"new", retain=True)
def killed(self, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
Topics.send_files = killed
box.intake.deliver_many([("mqtt:pub", "1")], remember=False, superseded=True)
"""


def test_a_superseded_pubrel_cut_short_leaves_the_later_retained_message(tmp_path: Path) -> None:
    """A retained QoS 2 message whose PUBREL came once a later retained message was in place
    is sent without replacing it; a SIGKILL before its copies went left its marker without
    the retained file's version, so the restart that sent them told by the times, and put
    it back over the later one, written before the marker."""
    root = tmp_path / "root"
    done = subprocess.run([sys.executable, "-c", _KILLED_SUPERSEDED, str(root)], timeout=60)
    assert done.returncode == -signal.SIGKILL
    with boxmq.open(root, fsync="never") as box:
        assert box.intake.pending("mqtt:pub") == []  # finished: its copies sent
        found = box.topics.retained("ret/1")
        assert found is not None
        assert found[1] == b"new"
