"""Box.delete_queue: the queue and its messages go, its consumers here are closed, and a queue
made again under the name starts afresh."""

from __future__ import annotations

import pytest

import boxmq
from boxmq.errors import Closed


def test_delete_closes_consumers_and_a_new_queue_starts_afresh(box: boxmq.Box) -> None:
    queue = box.queue("jobs")
    queue.put(b"old")
    consumer = queue.consumer("worker")
    assert consumer.receive(timeout=5) is not None
    assert box.delete_queue("jobs") is True
    assert "jobs" not in box.queues()
    with pytest.raises(Closed):
        consumer.receive(timeout=0)
    assert box.delete_queue("jobs") is False
    again = box.queue("jobs")
    fresh = again.consumer("worker")
    again.put(b"new")
    message = fresh.receive(timeout=1)  # watched afresh: no wait for a rescan
    assert message is not None
    assert message.body == b"new"
    fresh.close()
