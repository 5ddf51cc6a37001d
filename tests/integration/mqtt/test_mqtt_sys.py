"""The `$SYS` topics of a real `boxmq serve`, seen by a paho client as a mosquitto user sees
them, and a client's PUBLISH to one refused (sys_topics.py; docs/mqtt.md)."""

from __future__ import annotations

import os
import queue
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.mqtt.clients import (
    WAIT,
    Paho,
    Received,
    boxmq_cli,
    paho,
    persistent_paho,
    serving_fresh,
    subscriptions_on_disk,
)
from tests.retained import retained_folder


def _until(watcher: Paho, topic: str, test: Callable[[Received], bool]) -> Received:
    """The first message to `topic` that passes `test`, within WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        got = watcher.next()
        if got.topic == topic and test(got):
            return got
    raise AssertionError(f"no such message to {topic}")


def test_a_subscriber_sees_the_sys_topics_and_a_client_may_not_publish_to_them(
    tmp_path: Path,
) -> None:
    with serving_fresh(tmp_path, "--sys-interval", "500ms") as running:
        watcher = paho(running, "watcher")
        watcher.subscribe("$SYS/#")
        _until(watcher, "$SYS/broker/version", lambda m: True)  # the server's first interval
        late = paho(running, "late")
        late.subscribe("$SYS/broker/#", 1)
        first: dict[str, Received] = {}
        while len(first) < 9:  # the latest of each at once, retained, from memory, at QoS 0
            got = late.next()
            assert got.retain, got
            assert got.qos == 0, got
            first.setdefault(got.topic, got)
        late.stop()
        assert first["$SYS/broker/version"].payload.startswith(b"boxmq version ")
        assert first["$SYS/broker/uptime"].payload.endswith(b" seconds")

        forger = paho(running, "forger")
        acks: queue.Queue[Any] = queue.Queue()
        forger.client.on_publish = lambda _c, _u, _mid, reason, _p: acks.put(reason)
        forger.client.publish("$SYS/broker/clients/connected", b"forged", 1)
        assert acks.get(timeout=WAIT).value == 0x87  # Not authorized
        forger.client.publish("$SYS/broker/clients/connected", b"forged", 0)  # dropped

        # The next intervals: live copies, not retained.
        connected = _until(watcher, "$SYS/broker/clients/connected", lambda m: m.payload == b"2")
        assert not connected.retain
        received = _until(watcher, "$SYS/broker/messages/received", lambda m: True)
        assert int(received.payload) >= 6  # 2 CONNECTs, a SUBSCRIBE, 2 PUBLISHes, ...
        sent = _until(watcher, "$SYS/broker/bytes/sent", lambda m: True)
        assert int(sent.payload) > int(first["$SYS/broker/bytes/sent"].payload)
        while not watcher.messages.empty():
            assert watcher.next().payload != b"forged"
        for client in (watcher, forger):
            client.stop()
        # Kept in memory alone: nothing of them on disk.
        on_disk = [name for _, _, names in os.walk(running.root) for name in names]
        assert not [name for name in on_disk if "SYS" in name]


def test_boxmq_publish_to_a_sys_topic_is_refused_and_a_subscriber_gets_the_server_s_alone(
    tmp_path: Path,
) -> None:
    """`boxmq publish '$SYS/broker/version' fake --retain` was stored, and a new subscriber
    then got two retained messages on that one topic, the fake one and the server's own. It
    is refused (exit 1, nothing stored), saying the `$SYS` topics are the server's own."""
    with serving_fresh(tmp_path, "--sys-interval", "500ms") as running:
        refused = boxmq_cli(running.root, "publish", "$SYS/broker/version", "fake", "--retain")
        assert refused.returncode == 1, refused
        assert refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith(
            "boxmq publish: topic name '$SYS/broker/version': $SYS topics are the MQTT server's own"
        ), line
        watcher = paho(running, "watcher")
        watcher.subscribe("$SYS/broker/version")
        _until(watcher, "$SYS/broker/version", lambda m: True)  # the server's first interval
        late = paho(running, "late")
        try:
            late.subscribe("$SYS/broker/version")
            got = late.next()  # the server's latest, from memory
            assert got.retain, got
            assert got.payload.startswith(b"boxmq version "), got
            assert late.nothing(within=1.0)  # and no other: the version does not change
        finally:
            for client in (watcher, late):
                client.stop()


def test_a_sys_retained_message_an_older_boxmq_stored_can_be_deleted(tmp_path: Path) -> None:
    """A root boxmq d2f8abf0 (stop 48) wrote: its `boxmq publish '$SYS/broker/version' fake
    --retain` was stored (fixtures/README.md), and a server of today still hands it to each
    new subscriber beside its own. Today's CLI refused every publish to `$SYS`, the empty
    retained one that deletes it too, so an upgraded root kept it for good. The empty one is
    taken: the stored message is gone, and a new subscriber gets the server's alone."""
    fixture = Path(__file__).parent / "fixtures" / "sys-retained-d2f8abf0"
    root = tmp_path / "root"
    shutil.copytree(fixture, root)
    deleted = boxmq_cli(root, "publish", "$SYS/broker/version", "", "--retain")
    assert deleted.returncode == 0, deleted.stderr
    assert not os.listdir(retained_folder(root))
    again = boxmq_cli(root, "publish", "$SYS/broker/version", "fake", "--retain")
    assert again.returncode == 1, again  # a message there is still the server's alone
    with serving_fresh(tmp_path, "--sys-interval", "500ms") as running:
        late = paho(running, "late")
        try:
            late.subscribe("$SYS/broker/version")
            got = late.next()
            assert got.payload.startswith(b"boxmq version "), got
            assert late.nothing(within=1.0)
        finally:
            late.stop()


def test_a_persistent_session_s_sys_subscription_is_not_logged_as_getting_no_figures(
    tmp_path: Path,
) -> None:
    """A persistent session's `$SYS/#` is a dropbox made as the API's `box.subscribe` makes
    one, whose WARNING (mqtt.md's figures never reach the root) is for the API's users: this
    door sends its clients the figures from memory, so its log said something untrue (found
    by hand beside that warning)."""
    with serving_fresh(tmp_path, "--sys-interval", "500ms") as running:
        keeper = persistent_paho(running, "keeper", v5=True)
        keeper.subscribe("$SYS/broker/uptime", 1)
        _until(keeper, "$SYS/broker/uptime", lambda m: True)
        keeper.stop()
        assert ("$SYS/broker/uptime", None, "keeper") in subscriptions_on_disk(running.root)
    log = (tmp_path / "serve.log").read_text()
    assert "under $SYS" not in log, log
