"""One lock per dropbox path, for the threads and processes that make and delete dropboxes.

A subscription's dropbox (a share group's above all) is made by one thread and may be deleted
by another at the same moment: an MQTT broker's disk threads join a member to a share group
while its loop has the group's last member leave, which deletes the group; and so may two
processes on one root (two `boxmq serve`, a server and the Python API). Each holds the
dropbox's lock for the whole of its step (client/topics.py), so that a join comes wholly before
the leave or wholly after it, never in between: a thread lock among this process's threads,
and, by the thread that holds it, the folder's flock among processes (store/topics.py).

Invariants: one lock per path while anyone holds or waits for it, dropped after (the paths of
a long-lived process's groups come and go); a thread may take a lock it holds again, and the
flock is taken once, by its outermost hold (a second flock of one folder by this process, on
another file descriptor, would wait for the first for ever).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from boxmq.store.topics import locked_folder

__all__ = ["PathLocks"]


@dataclass(slots=True)
class _Held:
    lock: threading.RLock = field(default_factory=threading.RLock)
    users: int = 0  # threads holding or waiting for it
    depth: int = 0  # how many times its holder holds it


class PathLocks:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, _Held] = {}

    @contextmanager
    def held(self, path: str, *, make: bool = False, flush: bool = False) -> Iterator[None]:
        """Hold the lock of `path` (waiting for any other thread or process that holds it).
        `make`: a join, which makes the folder first (`flush`: on disk); a step that only
        reads or deletes it holds a folder that is not there by the threads' lock alone."""
        with self._lock:
            held = self._locks.setdefault(path, _Held())
            held.users += 1
        try:
            with held.lock:
                depth = held.depth
                held.depth = depth + 1
                try:
                    if depth:
                        yield  # held by this thread already, the folder's flock with it
                    else:
                        with locked_folder(path, make=make, flush=flush):
                            yield
                finally:
                    held.depth = depth
        finally:
            with self._lock:
                held.users -= 1
                if held.users == 0:
                    del self._locks[path]
