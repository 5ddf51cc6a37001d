"""A persistent session's SUBACK and UNSUBACK hold across a SIGKILL of `boxmq serve` right
after them, under either way of writing its record: the restarted server routes to the
filters its SUBACKs granted and to none its UNSUBACK removed (MQTT 5.0 §4.1: the session's
subscriptions are its state)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    RunningServer,
    paho,
    serve_fresh,
    serve_process,
    stop_process,
)


def _killed_and_started_again(
    target: RunningServer, server: subprocess.Popen[bytes], fsync: str
) -> subprocess.Popen[bytes]:
    os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    return serve_process(target.root, target.port, "--fsync", fsync)


# always: the session's record flushed before the answer; interval and never share the other
# way, the record written at once, unflushed (recording.py), which a killed process keeps too.
@pytest.mark.parametrize("fsync", ["always", "never"])
def test_subscriptions_granted_and_removed_just_before_a_sigkill_are_as_acknowledged(
    tmp_path: Path, fsync: str
) -> None:
    target, server = serve_fresh(tmp_path, "--fsync", fsync)
    try:
        keeper = paho(target, "keeper", clean=False, expiry=3600)
        for filter in ("kept/#", "removed/#"):
            [granted] = keeper.subscribe(filter, 1)
            assert granted.value == 1
        [removed] = keeper.unsubscribe("removed/#")
        assert removed.value == 0  # Success
        server = _killed_and_started_again(target, server, fsync)  # at once after the UNSUBACK
        keeper.stop()
        keeper = paho(target, "keeper", clean=False, expiry=3600)
        assert keeper.session_present
        [granted] = keeper.subscribe("last/#", 1)
        assert granted.value == 1
        server = _killed_and_started_again(target, server, fsync)  # at once after the SUBACK
        keeper.stop()
        publisher = paho(target, "publisher")
        for topic in ("kept/1", "removed/1", "last/1"):
            publisher.publish(topic, topic.encode(), 1)
        publisher.stop()
        back = paho(target, "keeper", clean=False, expiry=3600)
        assert back.session_present
        got = sorted(back.next().payload for _ in range(2))
        assert got == [b"kept/1", b"last/1"]
        assert back.nothing(within=0.5), "a filter its UNSUBACK removed is routed to again"
        back.stop()
    finally:
        stop_process(server)
