"""A lock held by many at once (`shared`) or by one alone (`exclusive`).

Retained publishes of one process run together, each through its own commit (and flush), as
before; a subscription that reads the retained store and writes its copies holds the lock
alone, so that no retained message is routed and replaced half before it and half after
(client/publishing.py and client/topics.py).

Invariants: an exclusive holder waits until no shared one is left, and while it holds the
lock nobody else enters. While an exclusive one waits, a thread that holds no share waits
behind it: otherwise a steady run of retained publishes, each holding its share through a
flush, kept a new subscription (and its client's SUBACK) waiting for as long as they went
on (9 to 21 s with three MQTT publishers under fsync=always). A thread that holds a share
already may take another (a retained publish made from a hand-over inside another one),
so that it never waits for an exclusive holder that waits for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SharedLock"]


class SharedLock:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0  # exclusive holders waiting to enter
        self._held = threading.local()  # `count`: the shares this thread holds

    @contextmanager
    def shared(self) -> Iterator[None]:
        held = getattr(self._held, "count", 0)
        with self._changed:
            while self._exclusive or (self._waiting and not held):
                self._changed.wait()
            self._shared += 1
        self._held.count = held + 1
        try:
            yield
        finally:
            self._held.count = held
            with self._changed:
                self._shared -= 1
                if not self._shared:
                    self._changed.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._changed:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._changed.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._changed:
                self._exclusive = False
                self._changed.notify_all()
