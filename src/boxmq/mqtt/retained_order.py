"""The order in which retained PUBLISHes came, kept by the retained store's writes.

The disk work of different clients runs on several threads at once, so a retained message
read first may be written last. MQTT-3.3.1-5 keeps the last one the server received: a write
whose message came before the one its topic already holds goes to the subscribers, but
replaces nothing (its RETAIN flag still shows, for Retain As Published).

What a topic's writes need is forgotten once no write that could be older is still to come:
a server whose devices each publish their retained state to a topic of their own kept a lock
and a number for every topic it ever saw (found by bench/soak.py, docs/benchmarks.md "A
long-running server (stop 43)").

Invariants:
- `take` runs on the loop as a PUBLISH (or its PUBREL, or a Will) is acted on: the numbers
  grow in the order the server received the messages.
- A number taken is pending until its `turn` ends or it is `release`d (a message that turns
  out to be no retained one, a write that never ran); `release` comes only once no turn of
  that number is still to come.
- `turn` holds one topic's writes apart; the newest number written so far for a topic only
  grows, and only a write that did not raise counts.
- A topic's newest number is forgotten once it is below every pending number: every write
  still to come is then newer, as it would be told with the number kept. A topic's lock
  lives while a turn of it runs or waits. So what is kept is bounded by the writes in flight.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from collections import deque
from collections.abc import Iterator

__all__ = ["RetainedOrder"]


class RetainedOrder:
    def __init__(self) -> None:
        self._numbers = itertools.count()
        self._newest: dict[str, int] = {}  # topic -> the number its retained message has
        self._locks: dict[str, tuple[threading.Lock, int]] = {}  # topic -> lock, its users
        self._pending: set[int] = set()  # numbers taken whose turn may still come
        # The numbers taken, in order (so growing), each until it is the lowest and no longer
        # pending: the first one pending is the lowest, found in O(1) amortised. min() of the
        # set walked every number in flight at each write: a batch of 10,000 retained
        # PUBLISHes cost 50 million steps.
        self._taken: deque[int] = deque()
        self._written: list[tuple[int, str]] = []  # heap of (number, topic) in _newest
        self._guard = threading.Lock()

    def take(self) -> int:
        with self._guard:
            number = next(self._numbers)
            self._pending.add(number)
            self._taken.append(number)
            return number

    def release(self, number: int) -> None:
        """No turn of `number` is to come (its message was written, or never will be)."""
        with self._guard:
            self._pending.discard(number)
            self._forget_older()

    def held(self) -> int:
        """Topics with something kept (a number or a lock): the writes in flight's."""
        with self._guard:
            return len(self._newest.keys() | self._locks.keys())

    @contextlib.contextmanager
    def turn(self, topic: str, number: int) -> Iterator[bool]:
        """The topic's writes one at a time; True if the message numbered `number` is to
        replace the topic's retained one, False if a later one is written already."""
        with self._guard:
            lock, users = self._locks.get(topic, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._locks[topic] = (lock, users + 1)
        try:
            with lock:
                newest = self._newest.get(topic, -1) < number
                yield newest
                if newest:
                    with self._guard:
                        self._newest[topic] = number
                        heapq.heappush(self._written, (number, topic))
        finally:
            with self._guard:
                lock, users = self._locks[topic]
                if users == 1:
                    del self._locks[topic]
                else:
                    self._locks[topic] = (lock, users - 1)
                self._pending.discard(number)
                self._forget_older()

    def _forget_older(self) -> None:
        """Under the guard: drop the topics' numbers below every pending one."""
        taken, pending = self._taken, self._pending
        while taken and taken[0] not in pending:
            taken.popleft()
        written = self._written
        low = taken[0] if taken else None  # None: nothing is to come
        while written and (low is None or written[0][0] < low):
            number, topic = heapq.heappop(written)
            if self._newest.get(topic) == number:
                del self._newest[topic]
