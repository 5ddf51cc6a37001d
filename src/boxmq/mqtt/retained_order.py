"""The order in which retained PUBLISHes came, kept by the retained store's writes.

The disk work of different clients runs on several threads at once, so a retained message
read first may be written last. MQTT-3.3.1-5 keeps the last one the server received: a write
whose message came before the one its topic already holds goes to the subscribers, but
replaces nothing (its RETAIN flag still shows, for Retain As Published).

Invariants:
- `take` runs on the loop as a PUBLISH (or its PUBREL, or a Will) is acted on: the numbers
  grow in the order the server received the messages.
- `turn` holds one topic's writes apart; the newest number written so far for a topic only
  grows, and only a write that did not raise counts.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator

__all__ = ["RetainedOrder"]


class RetainedOrder:
    def __init__(self) -> None:
        self._numbers = itertools.count()
        self._newest: dict[str, int] = {}  # topic -> the number its retained message has
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def take(self) -> int:
        return next(self._numbers)

    @contextlib.contextmanager
    def turn(self, topic: str, number: int) -> Iterator[bool]:
        """The topic's writes one at a time; True if the message numbered `number` is to
        replace the topic's retained one, False if a later one is written already."""
        with self._guard:
            lock = self._locks.setdefault(topic, threading.Lock())
        with lock:
            newest = self._newest.get(topic, -1) < number
            yield newest
            if newest:
                self._newest[topic] = number
