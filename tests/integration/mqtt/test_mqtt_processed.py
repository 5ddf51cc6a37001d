"""What `boxmq serve` does with messages its MQTT clients acknowledged: deleted by default (as
a broker does), kept in processed/ with --keep-processed. Real `boxmq serve`, real paho."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import WAIT, paho, serving_fresh

import boxmq
from boxmq.client.queue import QueueCounts


def _group_counts(root: Path) -> QueueCounts:
    with boxmq.open(root, fsync="never") as box:
        [group] = [s for s in box.topics.subscriptions() if s.filter == "$share/g/jobs/#"]
        return group.counts


@pytest.mark.parametrize(
    ("flags", "kept", "said"),
    [((), 0, "are deleted (keep_processed = false)"), (("--keep-processed",), 3, "are kept")],
)
def test_acknowledged_share_group_messages_are_deleted_unless_kept(
    tmp_path: Path, flags: tuple[str, ...], kept: int, said: str
) -> None:
    with serving_fresh(tmp_path, *flags) as target:
        worker = paho(target, "worker")
        worker.subscribe("$share/g/jobs/#", 1)
        publisher = paho(target, "pub")
        for i in range(3):
            publisher.publish(f"jobs/{i}", f"{i}".encode(), 1)
        assert sorted(worker.next().payload for _ in range(3)) == [b"0", b"1", b"2"]
        deadline = time.monotonic() + WAIT  # paho acknowledges after the callback returns
        while (counts := _group_counts(target.root)).locked and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (counts.ready, counts.locked, counts.done, counts.dead) == (0, 0, kept, 0)
        assert f"acknowledged messages {said}" in (tmp_path / "serve.log").read_text()
        publisher.stop()
        worker.stop()
