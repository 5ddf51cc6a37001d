"""Retained messages across a SIGKILL of `boxmq serve` mid-stream.

A publisher keeps replacing (and now and then deleting, with an empty payload) the retained
messages of five topics; the server is killed mid-stream and restarted on the same root. What
a new subscriber is then sent as retained on each topic must be what the publisher last had
acknowledged there (PUBACK, PUBCOMP) or something it sent after: never an older value, never
a value brought back after an acknowledged delete, never a body torn or of another topic."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    AckedPublisher,
    paho,
    serve_fresh,
    serve_process,
    stop_process,
)
from tests.waiting import waited

pytestmark = pytest.mark.slow

TOPICS = 5
LIMIT = 5000  # messages at most; the kill comes well before
AHEAD = 20  # messages sent and not yet acknowledged, at most


def _body(index: int) -> bytes:
    """Message `index`: empty (a delete) every 11th, else its number and some pages of it."""
    return b"" if index % 11 == 0 else f"{index}:".encode() + b"r" * 5000


class _Retainer(AckedPublisher[int]):
    """A publisher of retained messages; `acked`: the indices answered with success."""

    def __init__(self, port: int, qos: int) -> None:
        super().__init__(port, "retainer")
        self.qos = qos
        self.sent = 0

    def run(self) -> None:
        while self.sent < LIMIT and self.running():
            if self.unanswered(self.sent) >= AHEAD:
                time.sleep(0.002)
                continue
            index = self.sent
            self.publish(f"r/{index % TOPICS}", _body(index), self.qos, index, retain=True)
            self.sent += 1


@pytest.mark.parametrize("fsync", ["always", "interval"])
@pytest.mark.parametrize("qos", [1, 2])
def test_retained_messages_acknowledged_before_a_sigkill_are_the_ones_kept(
    tmp_path: Path, fsync: str, qos: int
) -> None:
    target, server = serve_fresh(tmp_path, "--fsync", fsync)
    try:
        retainer = _Retainer(target.port, qos)
        retainer.start()
        waited(lambda: len(retainer.acked) >= 200, within=30, every=0.01)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=20)
        retainer.end()
        acked, sent = set(retainer.acked), retainer.sent
        assert len(acked) >= 200
        assert sent < LIMIT  # the kill came mid-stream
        server = serve_process(target.root, target.port, "--fsync", fsync)
        reader = paho(target, "reader")
        reader.subscribe("r/#", 1)
        kept: dict[str, bytes] = {}
        while True:
            try:
                message = reader.next(timeout=2)
            except Exception:  # queue.Empty: every retained message came
                break
            assert message.retain
            assert message.topic not in kept, f"{message.topic}: two retained messages"
            kept[message.topic] = message.payload
        reader.stop()
        for topic in range(TOPICS):
            mine = list(range(topic, sent, TOPICS))
            last = max((i for i in mine if i in acked), default=None)
            got = kept.get(f"r/{topic}")
            if got is None:  # deleted by an empty one: the last acknowledged or a later one
                deletes = [i for i in mine if _body(i) == b""]
                assert last is None or any(i >= last for i in deletes), (topic, last)
                continue
            index = int(got.split(b":")[0])
            assert got == _body(index), f"r/{topic}: a torn body"
            assert index in mine, f"r/{topic}: message {index} is another topic's"
            assert last is None or index >= last, f"r/{topic}: {index}, acknowledged {last}"
    finally:
        stop_process(server)
