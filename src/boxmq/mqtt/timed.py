"""Work timed on the broker's clock: each key's one run, due at a time, done at a tick.

The delayed Wills (wills.py) and the ends of the sessions away (lifetimes.py) are timed so,
not by the loop's timers, which ran on real time: a clock moved on (a test's) or stepped
(`shift`) did not move them.

Invariants:
- A key has at most one time and one run: `set` replaces both, `discard` drops both.
- `due(now)` gives the runs of the keys whose time came, earliest first, each forgotten; one
  that an earlier run of the same look set again (timed anew) is not given.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from boxmq.core.deadlines import Deadlines

__all__ = ["Timed"]

K = TypeVar("K", bound=Hashable)


class Timed(Generic[K]):
    def __init__(self) -> None:
        self._when: Deadlines[K] = Deadlines()
        self._runs: dict[K, Callable[[], None]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._when

    def set(self, key: K, when: float, run: Callable[[], None]) -> None:
        """`run` is done at `when` (and no other run of `key`, at no other time)."""
        self._when.set(key, when)
        self._runs[key] = run

    def discard(self, key: K) -> None:
        self._when.discard(key)
        self._runs.pop(key, None)

    def shift(self, by: float) -> None:
        """Every time moves `by` seconds (the clock was stepped): counted, not stepped."""
        self._when.shift(by)

    def due(self, now: float) -> Iterator[Callable[[], None]]:
        """The runs whose time came at `now`, one by one: each is done before the next key
        is looked at, which it may have timed again or discarded."""
        for key in self._when.due(now):
            if key in self._when:
                continue  # timed again by a run before it here
            run = self._runs.pop(key, None)
            if run is not None:  # not discarded by a run before it
                yield run

    def next_deadline(self) -> float | None:
        """The earliest time of a key; None if there is none."""
        return self._when.next_deadline()
