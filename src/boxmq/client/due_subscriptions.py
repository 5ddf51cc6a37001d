"""When each subscription a sweep visited is due next (Housekeeping, client/housekeeping.py):
what lets a sweep between full passes visit the subscriptions where something is due without
looking at every one (thousands of MQTT sessions').

Kept by path: the subscription's name in the reports, when a visit found it due next (a lock's
deadline, an expiry), and the other processes whose locks it holds (whose deaths make it due).
A full pass makes it again (`restart`); a subscription that ended here is dropped (`drop`).
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import KeysView

__all__ = ["DueSubscriptions"]

# A subscription's name in a sweep's reports, when it is due, the other processes holding
# locks in it.
_Due = tuple[str, float, frozenset[str]]

# Times on the heap past twice the subscriptions kept, before it is made again (`_compact`).
_STALE_SLACK = 64


class DueSubscriptions:
    def __init__(self) -> None:
        self._due: dict[str, _Due] = {}
        # Of `_due`, for a sweep to find what is due without looking at every subscription:
        # the times (a heap; one replaced since is passed over), and those where other
        # processes hold locks (whose deaths make them due).
        self._times: list[tuple[float, str]] = []
        self._held_by_others: set[str] = set()
        # All three: a sweep of another thread pops the heap, an end drops its subscription.
        self._lock = threading.Lock()

    def renew_in_child(self) -> None:
        """In a forked child (Housekeeping.renew_in_child): its own lock."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._due)

    def restart(self) -> None:
        """A full pass visits every subscription: what it finds is all there is."""
        with self._lock:
            self._due, self._times, self._held_by_others = {}, [], set()

    def keep(self, path: str, name: str, due: float, holders: frozenset[str]) -> None:
        """What a visit of the subscription at `path` found due."""
        with self._lock:
            self._due[path] = (name, due, holders)
            if due < math.inf:
                heapq.heappush(self._times, (due, path))
                if len(self._times) > 2 * len(self._due) + _STALE_SLACK:
                    self._compact()
            if holders:
                self._held_by_others.add(path)
            else:
                self._held_by_others.discard(path)

    def _compact(self) -> None:
        """The heap made again of the times kept: each visit pushes its subscription's time
        (the same as before, often), and a time replaced since, or of a subscription that
        ended, stays until it comes or the next full pass. A busy subscription visited each
        second left a minute's sweeps of times; now the heap holds at most twice the
        subscriptions' (and a slack), for a rebuild after as many pushes as it keeps."""
        self._times = [(due, path) for path, (_, due, _) in self._due.items() if due < math.inf]
        heapq.heapify(self._times)

    def drop(self, path: str) -> None:
        """The subscription at `path` is gone (ended here, or found missing by a visit)."""
        with self._lock:
            self._due.pop(path, None)
            self._held_by_others.discard(path)

    def get(self, path: str) -> _Due | None:
        return self._due.get(path)

    def known(self) -> KeysView[str]:
        """The subscriptions kept: those made since the last full pass are not."""
        return self._due.keys()

    def maybe_due(self, now: float) -> set[str]:
        """Those whose time came by `now` (taken off the heap), and those where other
        processes hold locks: the caller asks whether their holders died."""
        maybe = set()
        with self._lock:
            times = self._times  # in the lock: a keep may make it again
            while times and times[0][0] <= now:
                maybe.add(heapq.heappop(times)[1])
            maybe.update(self._held_by_others)
        return maybe
