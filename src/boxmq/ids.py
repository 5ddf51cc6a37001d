"""New message ids, in DropboxMQ's shape: `<epoch ms * 1000 + n>-<random>`.

DropboxMQ encodes the JMS timestamp in the id; so do we, which gives consumers a FIFO order
within a priority without reading any clock of the producer's. Our n is the microsecond (bumped
past the last id's when the clock has not moved on), not a counter of the process's own: a
counter restarting at 0 each millisecond in every process ordered the puts of two processes
within one millisecond by their random parts, a put after another's often first. The random
part keeps ids of different processes apart; a collision in working/ is detected (O_EXCL) and
retried.
It comes from a generator seeded once from the OS (a system call per id cost 1.7 getrandom
calls per message) and seeded again in a forked child, so parent and child never share a
sequence.
"""

from __future__ import annotations

import os
import random
import threading

from boxmq.clock import Clock
from boxmq.forks import renew_in_children
from boxmq.model import MessageId, timestamp_of

__all__ = ["IdFactory", "stamp_of"]


class IdFactory:
    def __init__(self, clock: Clock, rng: random.Random | None = None) -> None:
        self._clock = clock
        self._rng = rng or _seeded()
        if rng is None:
            renew_in_children(self)
        self._lock = threading.Lock()
        self._last = 0

    def renew_in_child(self) -> None:
        self._rng = _seeded()
        self._lock = threading.Lock()  # a lock held by another thread at fork stays held

    def new(self) -> MessageId:
        with self._lock:
            # Never go backwards within this process, even if the wall clock does. (Not
            # max(): a builtin that parses its arguments as keywords, ~800 instructions.)
            stamp = int(self._clock.now() * 1_000_000)
            if stamp <= self._last:
                stamp = self._last + 1
            self._last = stamp
        # 33 random bits are below 10^10: ten digits, as DropboxMQ's ids have. (printf-style:
        # half the cost of an f-string with two format specs.)
        return MessageId("%016d-%010d" % (stamp, self._rng.getrandbits(33)))  # noqa: UP031

    def beside(self, message_id: MessageId) -> MessageId:
        """A new id that takes `message_id`'s place in a queue's order (its stamp, if it has
        the shape `new` gives ids), for a copy of that message that must be a message of its
        own; `new()` for an id without a stamp. The order is (priority, stamp, file name): a
        new id put a copy after every message queued since the original."""
        if timestamp_of(message_id) is None:
            return self.new()
        return MessageId("%s-%010d" % (message_id[:16], self._rng.getrandbits(33)))  # noqa: UP031


def stamp_of(message_id: MessageId) -> int:
    """The epoch ms an id made by IdFactory carries (what model.timestamp_of reads from any
    id in DropboxMQ's shape), without checking the shape: the first 13 of its 16 digits."""
    return int(message_id[:13])


def _seeded() -> random.Random:
    return random.Random(int.from_bytes(os.urandom(16), "big"))
