"""A lock held by many at once (`shared`) or by one alone (`exclusive`).

Retained publishes of one process run together, each through its own commit (and flush), as
before; a subscription that reads the retained store and writes its copies holds the lock
alone, so that no retained message is routed and replaced half before it and half after
(client/topics.py).

Invariants: an exclusive holder waits until no shared one is left, and while it holds the
lock nobody else enters. A shared holder may enter again (a retained publish made from a
hand-over inside another one): an exclusive one waiting does not stop it, so a steady run
of shared holders can keep an exclusive one waiting.
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

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._changed:
            while self._exclusive:
                self._changed.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._changed:
                self._shared -= 1
                if not self._shared:
                    self._changed.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._changed:
            while self._exclusive or self._shared:
                self._changed.wait()
            self._exclusive = True
        try:
            yield
        finally:
            with self._changed:
                self._exclusive = False
                self._changed.notify_all()
