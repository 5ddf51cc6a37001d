"""`[mqtt.limits] max_subscriptions` against `boxmq serve`, with real paho clients: a
SUBSCRIBE's new filters past the cap get SUBACK 0x97 (3.1.1: 0x80) and are not subscribed
(no route, no dropbox); those within it are; a persistent session keeps its own across
reconnects and a restart with a lower cap, and adds no more."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness.ports import free_port
from paho.mqtt.subscribeoptions import SubscribeOptions
from tests.integration.mqtt.clients import (
    WAIT,
    Paho,
    RunningServer,
    paho,
    serve_process,
    stop_process,
)

GRANTED_1, QUOTA, FAILURE = 1, 0x97, 0x80


def _serve(tmp_path: Path, cap: int) -> tuple[RunningServer, subprocess.Popen[bytes]]:
    """`boxmq serve` on `tmp_path/root` (kept from an earlier run) with the cap `cap`."""
    config = tmp_path / f"cap{cap}.toml"
    config.write_text(f"[mqtt.limits]\nmax_subscriptions = {cap}\n")
    root, port = tmp_path / "root", free_port()
    address = RunningServer(root, None, "127.0.0.1", port, None, None, None, None)  # type: ignore[arg-type]
    return address, serve_process(root, port, "--config", str(config))


def _subscribe(client: Paho, *filters: str) -> list[int]:
    """One SUBSCRIBE of `filters` at QoS 1: its SUBACK's reason codes."""
    wanted: list[Any] = [(text, SubscribeOptions(qos=1)) for text in filters]
    if client.client.protocol != 5:  # 3.1.1: (filter, QoS)
        wanted = [(text, 1) for text in filters]
    client.client.subscribe(wanted)
    return [int(reason.value) for reason in client.subacks.get(timeout=WAIT)]


def _folders(root: Path) -> list[str]:
    """The folders of `topic-root/`: one per filter subscribed on disk, named after it
    ('/' escaped as %2F), and one per share group."""
    return sorted(path.name for path in (root / "topic-root").iterdir() if path.is_dir())


@pytest.mark.parametrize("v5", [pytest.param(True, id="v5"), pytest.param(False, id="v311")])
def test_filters_past_the_cap_are_refused_and_not_subscribed(tmp_path: Path, v5: bool) -> None:
    address, process = _serve(tmp_path, 3)
    try:
        over = QUOTA if v5 else FAILURE
        sub = paho(address, "sub", v5=v5)
        assert _subscribe(sub, "a", "b") == [GRANTED_1] * 2
        # b again replaces it: allowed; c is the third; d and e pass the cap.
        assert _subscribe(sub, "b", "c", "d", "e") == [GRANTED_1, GRANTED_1, over, over]
        pub = paho(address, "pub")
        for topic in ("d", "e", "c"):
            pub.publish(topic, topic.encode(), 1)
        assert sub.next().payload == b"c"  # the only one routed to it
        assert sub.nothing()
        sub.client.unsubscribe("a")
        assert _subscribe(sub, "d") == [GRANTED_1]  # a's room is free again
        pub.stop()
        sub.stop()
    finally:
        stop_process(process)


@pytest.mark.parametrize("v5", [pytest.param(True, id="v5"), pytest.param(False, id="v311")])
def test_a_persistent_session_keeps_its_subscriptions_and_adds_none_past_the_cap(
    tmp_path: Path, v5: bool
) -> None:
    """Share groups count; nothing is made on disk for a refused filter; a reconnect keeps
    the session's subscriptions and still refuses a new one; a restart with a lower cap keeps
    the three (never dropped), lets the client subscribe to them again, and to nothing new."""
    over = QUOTA if v5 else FAILURE
    expiry = 3600 if v5 else None
    address, process = _serve(tmp_path, 3)
    try:
        keeper = paho(address, "keeper", v5=v5, clean=False, expiry=expiry)
        answers = _subscribe(keeper, "p/1", "$share/g/p/2", "p/3", "p/4")
        assert answers == [GRANTED_1, GRANTED_1, GRANTED_1, over]
        folders = _folders(address.root)
        assert folders == ["p%2F1", "p%2F2", "p%2F3"]  # p/2 the share group's; none for p/4
        keeper.stop()
        keeper = paho(address, "keeper", v5=v5, clean=False, expiry=expiry)
        assert keeper.session_present
        assert _subscribe(keeper, "p/4", "p/1") == [over, GRANTED_1]
        keeper.stop()
    finally:
        stop_process(process)
    address, process = _serve(tmp_path, 2)
    try:
        keeper = paho(address, "keeper", v5=v5, clean=False, expiry=expiry)
        assert keeper.session_present
        assert _subscribe(keeper, "p/5", "p/3", "$share/g/p/2") == [over, GRANTED_1, GRANTED_1]
        assert _folders(address.root) == folders  # nothing made for p/5
        pub = paho(address, "pub")
        for topic in ("p/1", "p/2", "p/3", "p/5"):
            pub.publish(topic, topic.encode(), 1)
        got = sorted(keeper.next().payload for _ in range(3))
        assert got == [b"p/1", b"p/2", b"p/3"]  # all three kept
        assert keeper.nothing()
        pub.stop()
        keeper.stop()
    finally:
        stop_process(process)
    log = (tmp_path / "serve.log").read_text()
    assert log.count("subscribing to p/4 refused") == 2  # once per connection
    assert "its session holds 3 subscription(s), over [mqtt.limits] max_subscriptions = 2" in log
