"""A non-durable subscription: messages in this process's memory, never on disk (QoS 0).

MQTT's "QoS 0 to online non-persistent subscribers never touches the disk" (DESIGN.md §2).
It lives as long as its subscriber and sees what is published through the same Box. The
buffer is bounded: when a slow subscriber falls `limit` messages behind, the oldest are
dropped and counted, as at-most-once allows.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from boxmq.errors import Closed
from boxmq.model import Envelope

__all__ = ["MemoryDelivery", "MemoryInbox"]


@dataclass(frozen=True, slots=True)
class MemoryDelivery:
    envelope: Envelope
    body: bytes


class MemoryInbox:
    def __init__(self, limit: int = 10_000) -> None:
        self._items: deque[MemoryDelivery] = deque()
        self._limit = limit
        self._cond = threading.Condition()
        self._closed = False
        self.dropped = 0

    def push(self, delivery: MemoryDelivery) -> None:
        with self._cond:
            if self._closed:
                return
            if len(self._items) >= self._limit:
                self._items.popleft()
                self.dropped += 1
            self._items.append(delivery)
            self._cond.notify()

    def pop(self, timeout: float | None) -> MemoryDelivery | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self._closed, timeout):
                return None
            if self._closed:
                raise Closed("the subscription is closed")
            return self._items.popleft()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
