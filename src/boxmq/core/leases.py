"""Locks with deadlines: which consumer holds which message, and until when.

Invariants:
- A message id has at most one lease; a consumer's leases are indexed for counting.
- Every claim numbers its lease (`delivery`: 1, 2, ... in this table, never reused, kept by
  `extend`): a holder's handle names the delivery it got, so that a message that came back to
  the same holder is not settled through the handle of the delivery before (core/queue.py).
- Deadlines sit in a min-heap pruned lazily: an item whose deadline no longer matches the lease
  (extended, dropped) is skipped, so `due` and `next_deadline` never scan every lease. When
  stale items outnumber the leases by far (acks come long before the deadlines: 300,000 of
  them at 10,000 acks a second and 30 s locks), the heap is rebuilt from the leases.
- `next_due` is the deadline at the top of that heap (stale or not; math.inf when it is
  empty), kept at every push and pop: `due(now)` has nothing to do while `now < next_due`.
- Nothing here reads a clock; callers pass `now` (STYLE.md snippet 3). Whether a dropped lease was
  an ack, a release or a rejection is the caller's business.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from boxmq.core.ready import Ready
from boxmq.errors import InvalidArgument
from boxmq.model import ConsumerId, MessageId, cheap_init

__all__ = ["Lease", "LeaseTable"]

_STALE_SLACK = 1024  # heap items beyond twice the leases before a rebuild


@cheap_init
@dataclass(frozen=True, slots=True)
class Lease:
    """`holder` has locked `message` until `deadline` (epoch seconds). XEP-0254 §2.2.
    `delivery` tells this lock from the holder's earlier or later ones on the same message."""

    message: Ready
    holder: ConsumerId
    deadline: float
    delivery: int


class LeaseTable:
    def __init__(self, *, stale_slack: int = _STALE_SLACK) -> None:
        self._leases: dict[MessageId, Lease] = {}
        self._by_holder: dict[ConsumerId, dict[MessageId, Lease]] = {}
        self._deadlines: list[tuple[float, MessageId]] = []  # min-heap, pruned lazily
        # The top of _deadlines, read as an attribute by the engine at every receive and ack
        # (a call to due_by costs several times the comparison).
        self.next_due = math.inf
        self._slack = stale_slack
        self._rebuild_at = stale_slack  # heap size that triggers a rebuild (_compact)
        self._claims = 0  # the last lease's `delivery`
        # The lease of an id, or None: the dict's own get, not a method that calls it (the
        # engine asks at every put, receive and ack of a message).
        self.get: Callable[[MessageId], Lease | None] = self._leases.get

    def __len__(self) -> int:
        return len(self._leases)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._leases

    def of(self, holder: ConsumerId) -> list[Lease]:
        """The holder's leases, oldest claim first."""
        return list(self._by_holder.get(holder, {}).values())

    def count(self, holder: ConsumerId) -> int:
        return len(self._by_holder.get(holder, ()))

    def claim(self, message: Ready, holder: ConsumerId, *, deadline: float) -> Lease:
        message_id = message.message_id
        if message_id in self._leases:
            raise InvalidArgument(f"{message_id} is already leased")
        self._claims += 1
        lease = Lease(message, holder, deadline, self._claims)  # _store's work, without its call
        self._leases[message_id] = lease
        self._by_holder.setdefault(holder, {})[message_id] = lease
        heapq.heappush(self._deadlines, (deadline, message_id))
        if deadline < self.next_due:
            self.next_due = deadline
        return lease

    def extend(self, message_id: MessageId, *, deadline: float) -> Lease:
        """Move the deadline of an existing lease (KeyError if there is none)."""
        lease = self._store(replace(self._leases[message_id], deadline=deadline))
        if len(self._deadlines) > self._rebuild_at:
            self._compact()
        return lease

    def restore(self, lease: Lease) -> None:
        """Put back a lease `drop` returned, as it was (its delivery too)."""
        if lease.message.message_id in self._leases:
            raise InvalidArgument(f"{lease.message.message_id} is already leased")
        self._store(lease)

    def drop(self, message_id: MessageId) -> Lease | None:
        lease = self._leases.pop(message_id, None)
        if lease is not None:
            held = self._by_holder[lease.holder]
            del held[message_id]
            if not held:
                del self._by_holder[lease.holder]
            if len(self._deadlines) > self._rebuild_at:
                self._compact()
        return lease

    def _compact(self) -> None:
        """Rebuild the heap from the leases: the stale items go (amortized: the next rebuild
        waits until as many more have piled up as there are leases now, plus a slack)."""
        self._deadlines = [(lease.deadline, key) for key, lease in self._leases.items()]
        heapq.heapify(self._deadlines)
        self._rebuild_at = 2 * len(self._deadlines) + self._slack
        self._top_changed()

    def due(self, *, now: float) -> list[Lease]:
        """Drop and return the leases whose deadline is <= now, earliest first."""
        expired: list[Lease] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, message_id = heapq.heappop(self._deadlines)
            lease = self._leases.get(message_id)
            if lease is not None and lease.deadline == deadline:
                self.drop(message_id)
                expired.append(lease)
        self._top_changed()
        return expired

    def due_by(self, now: float) -> bool:
        """True if `due(now)` may find something (a stale deadline counts: it is cheap)."""
        return self.next_due <= now

    def next_deadline(self) -> float | None:
        while self._deadlines:
            deadline, message_id = self._deadlines[0]
            lease = self._leases.get(message_id)
            if lease is not None and lease.deadline == deadline:
                return deadline
            heapq.heappop(self._deadlines)
            self._top_changed()
        return None

    def _store(self, lease: Lease) -> Lease:
        message_id = lease.message.message_id
        self._leases[message_id] = lease
        self._by_holder.setdefault(lease.holder, {})[message_id] = lease
        heapq.heappush(self._deadlines, (lease.deadline, message_id))
        if lease.deadline < self.next_due:
            self.next_due = lease.deadline
        return lease

    def _top_changed(self) -> None:
        deadlines = self._deadlines
        self.next_due = deadlines[0][0] if deadlines else math.inf
