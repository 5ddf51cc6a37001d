"""A share group's members are each sent a message at the QoS they were granted, whatever
the others were granted (MQTT 5.0 §3.8.4): the group's copies are stored at the highest."""

from __future__ import annotations

import queue
import signal
import time
from pathlib import Path

from tests.integration.mqtt.clients import (
    WAIT,
    Paho,
    RunningServer,
    paho,
    serve_fresh,
    serve_process,
    start_server,
    stop_process,
)
from tests.integration.mqtt.raw import open_raw, read, subscribe, take_publishes

GROUP = "$share/workers/jobs/#"


def _levels(members: dict[str, Paho], count: int) -> dict[str, set[int]]:
    """The QoS levels each member was sent `count` messages at, between them."""
    levels: dict[str, set[int]] = {name: set() for name in members}
    deadline = time.monotonic() + WAIT
    while count:
        assert time.monotonic() < deadline, f"{count} messages missing; so far {levels}"
        for name, member in members.items():
            try:
                levels[name].add(member.messages.get(timeout=0.05).qos)
                count -= 1
            except queue.Empty:
                pass
    return levels


def test_a_member_granted_qos_0_does_not_lower_the_others(server: RunningServer) -> None:
    high = paho(server, "granted-1")
    assert [r.value for r in high.subscribe(GROUP, 1)] == [1]
    low = paho(server, "granted-0")
    assert [r.value for r in low.subscribe(GROUP, 0)] == [0]
    publisher = paho(server, "publisher")
    for n in range(6):
        publisher.publish("jobs/x", f"both{n}", 1)
    assert _levels({"high": high, "low": low}, 6) == {"high": {1}, "low": {0}}
    low.stop()  # the group is the QoS 1 member's alone now
    for n in range(2):
        publisher.publish("jobs/x", f"alone{n}", 1)
    assert _levels({"high": high}, 2) == {"high": {1}}


def test_a_member_granted_qos_0_keeps_it_across_a_restart(tmp_path: Path) -> None:
    """A persistent session's membership is resumed from disk at the QoS it was granted, not
    at the group's (the highest any member was granted, which its dropbox's record holds):
    the session's record keeps its own (MQTT 5.0 §3.8.4, MQTT-3.8.4-8)."""
    root = tmp_path / "root"
    with start_server(root) as first:
        high = paho(first, "granted-1", clean=False, expiry=300)
        assert [r.value for r in high.subscribe(GROUP, 1)] == [1]
        low = paho(first, "granted-0", clean=False, expiry=300)
        assert [r.value for r in low.subscribe(GROUP, 0)] == [0]
        high.stop()
        low.stop()
    with start_server(root) as second:
        low = paho(second, "granted-0", clean=False, expiry=300)
        assert low.session_present
        publisher = paho(second, "publisher")
        for n in range(2):
            publisher.publish("jobs/x", f"after{n}", 1)
        assert _levels({"low": low}, 2) == {"low": {0}}


def test_a_message_sent_again_to_a_member_granted_qos_0_has_no_dup(tmp_path: Path) -> None:
    """MQTT-3.3.1-2: a QoS 0 PUBLISH has DUP 0. A message whose delivery ended without an ack
    (here a non-persistent member's lock, released by the restart after a SIGKILL) counts a
    delivery, which sets DUP on its next QoS 1/2 PUBLISH; a member granted QoS 0 gets it
    without (a strict client takes DUP on QoS 0 for a malformed packet)."""
    target, server = serve_fresh(tmp_path)
    try:
        low, _ = open_raw(target, "granted-0")  # a persistent session: it outlives the kill
        low.sendall(subscribe(1, GROUP, 0))
        assert read(low)[0] == 0x90
        low.close()
        high, _ = open_raw(target, "granted-1", clean=True, expiry=0)
        high.sendall(subscribe(1, GROUP, 1))
        assert read(high)[0] == 0x90
        publisher = paho(target, "publisher")
        publisher.publish("jobs/x", b"held", 1)
        publisher.stop()
        assert [m.payload for m in take_publishes(high, 1)] == [b"held"]  # never acknowledged
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=20)
        high.close()
        server = serve_process(target.root, target.port)
        low, present = open_raw(target, "granted-0")
        with low:
            assert present
            low.settimeout(WAIT)
            kind, body = read(low)
        assert (kind, body[-4:]) == (0x30, b"held"), hex(kind)  # QoS 0, DUP 0, RETAIN 0
    finally:
        stop_process(server)
