"""A share group's members are each sent a message at the QoS they were granted, whatever
the others were granted (MQTT 5.0 §3.8.4): the group's copies are stored at the highest."""

from __future__ import annotations

import queue
import time
from pathlib import Path

from tests.integration.mqtt.clients import WAIT, Paho, RunningServer, paho, start_server

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
    first = start_server(root)
    try:
        high = paho(first, "granted-1", clean=False, expiry=300)
        assert [r.value for r in high.subscribe(GROUP, 1)] == [1]
        low = paho(first, "granted-0", clean=False, expiry=300)
        assert [r.value for r in low.subscribe(GROUP, 0)] == [0]
        high.stop()
        low.stop()
    finally:
        first.shutdown()
    second = start_server(root)
    try:
        low = paho(second, "granted-0", clean=False, expiry=300)
        assert low.session_present
        publisher = paho(second, "publisher")
        for n in range(2):
            publisher.publish("jobs/x", f"after{n}", 1)
        assert _levels({"low": low}, 2) == {"low": {0}}
    finally:
        second.shutdown()
