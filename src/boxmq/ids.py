"""New message ids, in DropboxMQ's shape: `<epoch ms * 1000 + counter>-<random>`.

DropboxMQ encodes the JMS timestamp in the id; so do we, which gives consumers a FIFO order
within a priority without reading any clock of the producer's. The random part keeps ids of
different processes apart; a collision in working/ is detected (O_EXCL) and retried.
"""

from __future__ import annotations

import random
import threading

from boxmq.clock import Clock
from boxmq.model import MessageId

__all__ = ["IdFactory"]


class IdFactory:
    def __init__(self, clock: Clock, rng: random.Random | None = None) -> None:
        self._clock = clock
        self._rng = rng or random.SystemRandom()
        self._lock = threading.Lock()
        self._last = 0

    def new(self) -> MessageId:
        with self._lock:
            # Never go backwards within this process, even if the wall clock does.
            stamp = max(int(self._clock.now() * 1000) * 1000, self._last + 1)
            self._last = stamp
        return MessageId(f"{stamp:016d}-{self._rng.randrange(10**10):010d}")
