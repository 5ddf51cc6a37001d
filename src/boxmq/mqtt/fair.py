"""A queue that takes its jobs in turn by key (a client's address): one key's many jobs do not
keep the others waiting.

Invariants: `take` gives the oldest job of the key that has waited longest since its last turn;
a key with jobs left goes to the back; a key with none is forgotten. Every job put is taken
once, and the jobs of one key in the order they were put.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["FairQueue"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class FairQueue(Generic[K, T]):
    def __init__(self) -> None:
        self._jobs: dict[K, deque[T]] = {}  # keys in their turn's order (a dict keeps it)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def put(self, key: K, job: T) -> None:
        jobs = self._jobs.get(key)
        if jobs is None:
            jobs = self._jobs[key] = deque()
        jobs.append(job)
        self._count += 1

    def take(self) -> T | None:
        """The next job in turn; None when there is none."""
        if not self._jobs:
            return None
        key = next(iter(self._jobs))
        jobs = self._jobs.pop(key)
        job = jobs.popleft()
        if jobs:
            self._jobs[key] = jobs  # to the back of the turns
        self._count -= 1
        return job
