"""Which consumer gets the next message: the dispatch strategies of one queue.

XEP-0254 §2.2 leaves the choice of "one of the subscribers" to the service, and §2.4 asks that an
unlocked item go to the "next" subscriber. Invariants:
- A pick is made only among the consumers offered as free (each has a free slot).
- The last holder of a released message is passed over while another free consumer exists, and
  takes it back only once its handoff is over (`eligible`).
- HASH_BY_KEY routes on zlib.crc32 of the group key (or message id) over all consumers that take
  turns (not paused), sorted by id, so a key stays on one consumer while that set is stable; the
  queue partitions its ready messages by `lane_of`, so a full consumer's messages wait without
  being scanned.
- Rotation follows the order in which consumers were added; only RANDOM uses the rng.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Collection, Sequence
from enum import Enum

from boxmq.core.ready import Lane, Ready
from boxmq.model import ConsumerId

__all__ = ["Dispatch", "Picker", "eligible", "route"]


class Dispatch(Enum):
    ROUND_ROBIN = "round-robin"  # rotate over the consumers with room
    LEAST_IN_FLIGHT = "least-in-flight"  # fewest leases; ties by rotation
    STICKY = "sticky"  # the same consumer while it has room, then the next one
    HASH_BY_KEY = "hash-by-key"  # one key, one consumer
    RANDOM = "random"  # rng.choice


_ROTATING = frozenset({Dispatch.ROUND_ROBIN, Dispatch.LEAST_IN_FLIGHT, Dispatch.STICKY})


def route(message: Ready, ring: Sequence[ConsumerId]) -> ConsumerId | None:
    """The consumer a key belongs to, over `ring` (all consumers, sorted); None if empty."""
    if not ring:
        return None
    key = message.group_key if message.group_key is not None else message.message_id
    # A key read from a file name may hold bytes that are not UTF-8 (surrogate escapes).
    return ring[zlib.crc32(key.encode(errors="surrogateescape")) % len(ring)]


def eligible(
    message: Ready, free: Collection[ConsumerId], *, handoff_over: bool
) -> list[ConsumerId]:
    """The free consumers that may take `message` now (XEP-0254 §2.4: the "next" one)."""
    last = message.last_holder
    if last is None or last not in free:
        return list(free)
    others = [consumer for consumer in free if consumer != last]
    if others:
        return others
    return [last] if handoff_over else []


class Picker:
    """Picks a consumer for each message; keeps the rotation state between picks."""

    def __init__(self, kind: Dispatch, rng: random.Random) -> None:
        self._kind = kind
        self._rng = rng
        # A lone candidate is always picked, and `took` says what that changes (RANDOM draws
        # from the rng even for one; HASH_BY_KEY may pick nobody).
        self.rotates = kind in _ROTATING
        # Read at every dispatch: an attribute, since each `Dispatch.STICKY` is a slow lookup
        # through Enum's metaclass __getattr__ (~800 instructions).
        self._sticky = kind is Dispatch.STICKY
        self._order: list[ConsumerId] = []
        self._position: dict[ConsumerId, int] = {}
        self._ring: list[ConsumerId] = []
        self._cursor = 0  # position in _order where the next rotation starts
        self._current: ConsumerId | None = None  # STICKY's consumer

    @property
    def partitioned(self) -> bool:
        """True if every message belongs to one consumer (see `lane_of`)."""
        return self._kind is Dispatch.HASH_BY_KEY

    def set_consumers(
        self, consumers: Sequence[ConsumerId], *, paused: Collection[ConsumerId] = ()
    ) -> None:
        """All consumers of the queue, in the order they were added; `paused`: those of them
        that take no turns, whose keys HASH_BY_KEY spreads over the others meanwhile."""
        self._order = list(consumers)
        self._position = {consumer: i for i, consumer in enumerate(self._order)}
        self._ring = sorted(consumer for consumer in self._order if consumer not in paused)
        if self._order:
            self._cursor %= len(self._order)

    def took(self, consumer: ConsumerId) -> None:
        """What `pick` leaves behind once it gave messages in a row to `consumer`, their only
        candidate (for the kinds that rotate)."""
        if self._sticky and self._current == consumer:
            return
        self._cursor = (self._position[consumer] + 1) % len(self._order)
        self._current = consumer

    def lane_of(self, message: Ready) -> Lane:
        return route(message, self._ring) if self.partitioned else None

    def pick(
        self,
        message: Ready,
        free: Collection[ConsumerId],
        *,
        load: Callable[[ConsumerId], int],
        handoff_over: bool,
    ) -> ConsumerId | None:
        """The consumer to claim `message` for, or None if it must wait."""
        if self._kind is Dispatch.HASH_BY_KEY:
            return self._hashed(message, free, handoff_over=handoff_over)
        candidates = eligible(message, free, handoff_over=handoff_over)
        if not candidates:
            return None
        if self._kind is Dispatch.RANDOM:
            return self._rng.choice(candidates)
        if self._sticky:
            current = self._current
            if current in candidates:
                return current
            if current is not None and current in free:
                # Passed over as the message's last holder (XEP-0254 §2.4), not full: the
                # message goes to the next one, and the consumer stays the same for the rest.
                consumer = self._rotate(candidates)
                self._current = current
                return consumer
        if self._kind is Dispatch.LEAST_IN_FLIGHT:
            least = min(load(consumer) for consumer in candidates)
            candidates = [consumer for consumer in candidates if load(consumer) == least]
        return self._rotate(candidates)

    def _hashed(
        self, message: Ready, free: Collection[ConsumerId], *, handoff_over: bool
    ) -> ConsumerId | None:
        # The key's consumer or nobody. If it is the last holder, it waits for the handoff: a
        # key never moves to another consumer, which would break its order (and the engine
        # holds the group's later messages back behind it, for the same reason).
        target = route(message, self._ring)
        if target is None or target not in free:
            return None
        if target == message.last_holder and not handoff_over:
            return None
        return target

    def _rotate(self, candidates: Collection[ConsumerId]) -> ConsumerId:
        """The first candidate at or after the cursor, in the order consumers were added."""
        count = len(self._order)
        if len(candidates) == 1:  # one consumer with room (the usual case): nothing to search
            (consumer,) = candidates
            if consumer in self._position:
                self._cursor = (self._position[consumer] + 1) % count
                self._current = consumer
                return consumer
        wanted = set(candidates)
        for step in range(count):
            consumer = self._order[(self._cursor + step) % count]
            if consumer in wanted:
                self._cursor = (self._position[consumer] + 1) % count
                self._current = consumer
                return consumer
        raise ValueError("candidates must be consumers of this queue")
