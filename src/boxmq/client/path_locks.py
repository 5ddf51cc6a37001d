"""One lock per dropbox path, for the threads of one process that make and delete dropboxes.

A subscription's dropbox (a share group's above all) is made by one thread and may be deleted
by another at the same moment: an MQTT broker's disk threads join a member to a share group
while its loop has the group's last member leave, which deletes the group. Each holds the
dropbox's lock for the whole of its step (client/topics.py), so that a join comes wholly before
the leave or wholly after it, never in between.

Invariants: one lock per path while anyone holds or waits for it, dropped after (the paths of
a long-lived process's groups come and go); a thread may take a lock it holds again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PathLocks"]


class PathLocks:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, tuple[threading.RLock, int]] = {}  # path -> its lock, its users

    @contextmanager
    def held(self, path: str) -> Iterator[None]:
        """Hold the lock of `path` (waiting for any other thread that holds it)."""
        with self._lock:
            lock, users = self._locks.get(path) or (threading.RLock(), 0)
            self._locks[path] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._lock:
                lock, users = self._locks[path]
                if users == 1:
                    del self._locks[path]
                else:
                    self._locks[path] = (lock, users - 1)
