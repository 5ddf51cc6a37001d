"""Keys each due at a time, for a timer that must not look at every key at every tick.

A broker with 10,000 idle connections looked at each one's keep-alive four times a second
(1.2-1.5 % of a core for 4,000 of them, docs/benchmarks.md "Many idle connections"); with
the time each is next due kept here, a tick looks only at those whose time came.

Invariants:
- A key has at most one time: `set` replaces it, `discard` drops it, and `due(now)` gives
  each key whose time is at or before `now` once, and forgets it (the caller sets it again
  if it is to be looked at later: a keep-alive checked and found not yet over).
- The times sit in a min-heap pruned lazily: an item whose key was set again or discarded
  is skipped when it comes to the top. When stale items outnumber the keys by far (clients
  that connect and leave with a long keep-alive each leave one), the heap is rebuilt.
- A stale item holds no key: a key set again or discarded is let go of by its old item at
  once, not when that item's time comes (a closed connection's client, session and buffers
  stayed in memory for 1.5 keep-alive periods: bench/soak.py).
- Nothing here reads a clock; callers pass `now` (STYLE.md snippet 3).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["Deadlines"]

K = TypeVar("K", bound=Hashable)

_STALE_SLACK = 1024  # heap items beyond twice the keys before a rebuild


class Deadlines(Generic[K]):
    def __init__(self, *, stale_slack: int = _STALE_SLACK) -> None:
        # Each key's heap item, itself: (time, order, [key]). The list is emptied when the
        # item goes stale (its key set again or discarded), so an item popped is a key's time
        # only if its list still holds the key.
        self._items: dict[K, tuple[float, int, list[K]]] = {}
        self._heap: list[tuple[float, int, list[K]]] = []
        self._pushed = 0  # the items' order among equal times: keys need not be comparable
        self._slack = stale_slack

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def set(self, key: K, when: float) -> None:
        """`key` is due at `when` (and no longer at any time it had)."""
        item = self._items.get(key)
        if item is not None:
            if item[0] == when:
                return
            item[2].clear()  # stale: lets go of the key
        self._pushed += 1
        item = self._items[key] = (when, self._pushed, [key])
        heapq.heappush(self._heap, item)
        if len(self._heap) > 2 * len(self._items) + self._slack:
            self._heap = sorted(self._items.values())  # a sorted list is a heap

    def discard(self, key: K) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            item[2].clear()

    def due(self, now: float) -> list[K]:
        """The keys due at or before `now`, earliest first, each forgotten."""
        out: list[K] = []
        heap, items = self._heap, self._items
        while heap and heap[0][0] <= now:
            held = heapq.heappop(heap)[2]
            if held:
                key = held[0]
                del items[key]
                out.append(key)
        return out

    def shift(self, by: float) -> None:
        """Move every key's time `by` seconds (the wall clock they were read from was stepped
        by that much): their order stays, and stale items are dropped."""
        self._items = {
            key: (when + by, order, held) for key, (when, order, held) in self._items.items()
        }
        self._heap = sorted(self._items.values())  # a sorted list is a heap

    def next_deadline(self) -> float | None:
        """The earliest time of a key; None if there is none."""
        heap = self._heap
        while heap and not heap[0][2]:
            heapq.heappop(heap)  # stale: set again or discarded
        return heap[0][0] if heap else None
