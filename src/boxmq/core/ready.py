"""Messages the engine may hand out, and the order it hands them out in.

A `Ready` is what the runtime saw in target/: one file, described by its metadata. `ReadySet`
keeps the ones this process has not claimed yet.

Invariants:
- Each message id is in the set at most once. Offering it again replaces it but keeps the time
  it was first offered, so a re-scan of target/ does not restart its handoff.
- Every entry is either *delayed* (its not_before was in the future at the last tick) or waits
  in exactly one *lane*. A lane is a heap ordered by priority (higher first), then sequence
  (FIFO), then key. There is one lane unless the dispatcher partitions by consumer.
- Heaps are pruned lazily: an item whose generation no longer matches its entry is ignored.
- Everything timed (not_before, expiration, handoff ends) sits in a heap, so `tick`,
  `pop_expired` and `next_deadline` never scan the whole backlog.
- A *horizon* (set by the caller, None by default) holds back what ranks at or after it: `drain`
  and `take_for` hand out only lane items that rank before it, in the lane's order (priority,
  sequence, key); one that wanted more than there was before it (room was left) says so in
  `held_at_horizon`. A caller that keeps further messages
  outside the set (a deep backlog's names, not decoded) sets it to the best of those, so that
  none is handed out ahead of one it keeps.
- `next_due` is the earliest time at the top of those three heaps (stale or not; math.inf
  when all are empty), kept at every push and pop: `due_by(now)` is `next_due <= now`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from boxmq.model import DEFAULT_PRIORITY, ConsumerId, MessageId, cheap_init

__all__ = ["Lane", "Rank", "Ready", "ReadySet"]

Lane: TypeAlias = ConsumerId | None  # the consumer a partitioned lane feeds; None: the one lane


@cheap_init
@dataclass(frozen=True, slots=True)
class Ready:
    """A message the engine may hand out. `key` is opaque to the core (the runtime's file name)."""

    key: str
    message_id: MessageId
    priority: int = DEFAULT_PRIORITY  # higher first
    sequence: float = 0.0  # FIFO order within a priority (e.g. the enqueue time); ties by key
    expiration: float = 0.0  # epoch seconds, 0 = never
    not_before: float = 0.0  # epoch seconds; delayed until then
    delivery_count: int = 0  # deliveries so far that ended without an ack
    last_holder: ConsumerId | None = None
    group_key: str | None = None  # hash-by-key: the message group (None: message_id)

    def expired(self, now: float) -> bool:
        return 0 < self.expiration <= now


class _Entry:
    """A waiting message and its bookkeeping: internal, never changed once made, and a
    plain class because a frozen dataclass costs three times as much to make (one per put)."""

    __slots__ = ("generation", "offered_at", "ready")

    def __init__(self, ready: Ready, offered_at: float, generation: int) -> None:
        self.ready = ready
        self.offered_at = offered_at
        self.generation = generation


_Timed = tuple[float, int, MessageId]  # (when, generation, message id)
_Queued = tuple[int, float, str, MessageId, int]  # (-priority, sequence, key, id, generation)
Rank: TypeAlias = tuple[int, float, str]  # (-priority, sequence, key): a lane's order


def _one_lane(ready: Ready) -> Lane:
    return None


class ReadySet:
    """The unclaimed messages of one queue, ordered for dispatch. Callers pass `now`."""

    def __init__(self, *, handoff: float) -> None:
        self._handoff = handoff
        self._entries: dict[MessageId, _Entry] = {}
        self._delayed: set[MessageId] = set()
        self._lanes: dict[Lane, list[_Queued]] = {}
        self._lane_of: Callable[[Ready], Lane] = _one_lane
        self._not_before: list[_Timed] = []
        self._expirations: list[_Timed] = []
        self._handoff_ends: list[_Timed] = []
        # The earliest top of the three, read as an attribute by the engine at every receive
        # and ack (a call to due_by costs several times the comparison).
        self.next_due = math.inf
        self._generations = itertools.count()
        # Nothing ranked at or after it is handed out (None: no horizon); True once a drain or
        # take with room left ran out of what ranks before it, until the horizon is set again.
        self.horizon: Rank | None = None
        self.held_at_horizon = False

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._entries

    @property
    def delayed(self) -> int:
        """How many wait for their not_before (as of the last tick or put)."""
        return len(self._delayed)

    def waiting(self) -> bool:
        """True if a message is not delayed (as of the last tick or put): one to hand out."""
        return len(self._entries) > len(self._delayed)

    def get(self, message_id: MessageId) -> Ready | None:
        entry = self._entries.get(message_id)
        return entry.ready if entry is not None else None

    def put(self, ready: Ready, *, now: float) -> None:
        """Add `ready`, or replace the entry with the same message id."""
        message_id = ready.message_id
        old = self._entries.get(message_id)
        offered_at = old.offered_at if old is not None else now
        entry = _Entry(ready, offered_at, next(self._generations))
        self._entries[message_id] = entry
        if old is not None:  # only an entry can be delayed
            self._delayed.discard(message_id)
        if ready.not_before > now:
            self._delayed.add(message_id)
            heapq.heappush(self._not_before, (ready.not_before, entry.generation, message_id))
            if ready.not_before < self.next_due:
                self.next_due = ready.not_before
        else:  # _enqueue's work, without its call (one per message put)
            item = (-ready.priority, ready.sequence, ready.key, message_id, entry.generation)
            heapq.heappush(self._lanes.setdefault(self._lane_of(ready), []), item)
        if ready.expiration > 0:
            heapq.heappush(self._expirations, (ready.expiration, entry.generation, message_id))
            if ready.expiration < self.next_due:
                self.next_due = ready.expiration
        handoff_end = offered_at + self._handoff
        if ready.last_holder is not None and handoff_end > max(now, ready.not_before):
            heapq.heappush(self._handoff_ends, (handoff_end, entry.generation, message_id))
            if handoff_end < self.next_due:
                self.next_due = handoff_end

    def remove(self, message_id: MessageId) -> Ready | None:
        entry = self._entries.pop(message_id, None)
        self._delayed.discard(message_id)
        return entry.ready if entry is not None else None

    def tick(self, *, now: float) -> None:
        """Move delayed messages whose time has come into their lane; forget past handoffs."""
        while self._not_before and self._not_before[0][0] <= now:
            _, generation, message_id = heapq.heappop(self._not_before)
            entry = self._live(message_id, generation)
            if entry is not None and message_id in self._delayed:
                self._delayed.discard(message_id)
                self._enqueue(entry)
        while self._handoff_ends and self._handoff_ends[0][0] <= now:
            heapq.heappop(self._handoff_ends)
        self._tops_changed()

    def due_by(self, now: float) -> bool:
        """True if `tick(now)` or `pop_expired(now)` may have something to do (an item that
        is stale counts: checking costs more than the work it would save)."""
        return self.next_due <= now

    def pop_expired(self, *, now: float) -> list[Ready]:
        """Remove and return the messages (delayed or not) whose expiration is <= now."""
        expired: list[Ready] = []
        while self._expirations and self._expirations[0][0] <= now:
            _, generation, message_id = heapq.heappop(self._expirations)
            if self._live(message_id, generation) is not None:
                ready = self.remove(message_id)
                assert ready is not None
                expired.append(ready)
        self._tops_changed()
        return expired

    def next_deadline(self) -> float | None:
        """The earliest not_before, expiration or handoff end still pending."""
        times = [
            heap[0][0]
            for heap in (self._not_before, self._expirations, self._handoff_ends)
            if self._prune(heap)
        ]
        return min(times, default=None)

    def relane(self, lane_of: Callable[[Ready], Lane]) -> None:
        """Sort every waiting message into lanes again (the set of consumers changed)."""
        self._lane_of = lane_of
        self._lanes.clear()
        for message_id, entry in self._entries.items():
            if message_id not in self._delayed:
                self._enqueue(entry)

    def drain(
        self,
        lane: Lane,
        visit: Callable[[Ready, float], bool],
        *,
        until: Callable[[], bool],
    ) -> None:
        """Offer the lane's messages in order to `visit(ready, offered_at)` until `until()`.

        A message for which `visit` returns True is taken out of the set; the others keep their
        place. `visit` must not change this set.
        """
        horizon = self.horizon
        heap = self._lanes.get(lane)
        if not heap:
            if horizon is not None and not until():
                self.held_at_horizon = True  # wanted more than there is before it
            return
        skipped: list[_Queued] = []
        try:
            while not until():
                if not heap or (horizon is not None and heap[0] > horizon):
                    if horizon is not None:
                        self.held_at_horizon = True
                    break
                item = heapq.heappop(heap)
                entry = self._live(item[3], item[4])
                if entry is None:
                    continue
                if visit(entry.ready, entry.offered_at):
                    self.remove(item[3])
                else:
                    skipped.append(item)
        finally:
            for item in skipped:
                heapq.heappush(heap, item)

    def take_for(
        self,
        lane: Lane,
        consumer: ConsumerId,
        room: int,
        *,
        now: float,
        declined: Mapping[MessageId, Collection[ConsumerId]] | None = None,
    ) -> list[Ready]:
        """Take up to `room` of the lane's messages, in order, for `consumer` when it is the
        only consumer with room: what `drain` would give it, without a call per message. A
        message it held last waits out its handoff (XEP-0254 §2.4) and keeps its place, as
        one it `declined` (message id -> who declined it) keeps it for another consumer."""
        taken: list[Ready] = []
        horizon = self.horizon
        heap = self._lanes.get(lane)
        if not heap:
            if horizon is not None and room > 0:
                self.held_at_horizon = True  # wanted more than there is before it
            return taken
        entries, skipped = self._entries, []
        while len(taken) < room:
            if not heap or (horizon is not None and heap[0] > horizon):
                if horizon is not None:
                    self.held_at_horizon = True
                break
            item = heapq.heappop(heap)
            entry = entries.get(item[3])
            if entry is None or entry.generation != item[4]:
                continue  # stale: replaced or removed since it was queued
            ready = entry.ready
            if (ready.last_holder == consumer and now < entry.offered_at + self._handoff) or (
                declined is not None and consumer in declined.get(item[3], ())
            ):
                skipped.append(item)
                continue
            del entries[item[3]]  # a message in a lane is never in the delayed set
            taken.append(ready)
        for item in skipped:
            heapq.heappush(heap, item)
        return taken

    def _enqueue(self, entry: _Entry) -> None:
        ready = entry.ready
        item = (-ready.priority, ready.sequence, ready.key, ready.message_id, entry.generation)
        heapq.heappush(self._lanes.setdefault(self._lane_of(ready), []), item)

    def _live(self, message_id: MessageId, generation: int) -> _Entry | None:
        entry = self._entries.get(message_id)
        return entry if entry is not None and entry.generation == generation else None

    def _prune(self, heap: list[_Timed]) -> bool:
        """Drop stale items from the top of `heap`; True if a live one is left."""
        while heap and self._live(heap[0][2], heap[0][1]) is None:
            heapq.heappop(heap)
            self._tops_changed()
        return bool(heap)

    def _tops_changed(self) -> None:
        self.next_due = min(
            (
                heap[0][0]
                for heap in (self._not_before, self._expirations, self._handoff_ends)
                if heap
            ),
            default=math.inf,
        )
