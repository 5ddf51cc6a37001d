"""Where a Will meets its session (MQTT 5.0 §3.1.2.5, §3.1.3.2.2): a Will Delay Interval longer
than the session, over real sockets and paho clients, each case under a few seconds."""

from __future__ import annotations

import time

from tests.integration.mqtt.clients import WAIT, RunningServer, paho
from tests.integration.mqtt.raw import open_raw


def test_a_will_delay_longer_than_the_session_sends_the_will_when_the_session_ends(
    server: RunningServer,
) -> None:
    """Session Expiry 1 s, Will Delay 30 s: the Will goes out when the session ends, a second
    after the close, not 30 s later ("until the Will Delay Interval has passed or the Session
    ends, whichever happens first", §3.1.3.2.2), and the session is gone."""
    watcher = paho(server, "watcher")
    watcher.subscribe("wills/#", 1)
    sock, _ = open_raw(server, "short", expiry=1, will=("wills/short", b"gone"), will_delay=30)
    closed = time.monotonic()
    sock.close()  # no DISCONNECT: the Will waits for the delay or the session's end
    assert watcher.nothing(0.5)  # the session's second runs
    will = watcher.next(timeout=WAIT)
    waited = time.monotonic() - closed
    assert (will.topic, will.payload) == ("wills/short", b"gone")
    assert 0.9 < waited < 10, f"the Will came {waited:.2f} s after the close"
    assert not paho(server, "short", clean=False, expiry=60).session_present
    assert watcher.nothing(0.3)  # once
