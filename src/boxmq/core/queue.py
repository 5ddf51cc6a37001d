"""The queue engine: the in-memory brain of ONE queue in ONE process (XEP-0254 semantics).

The directory is the truth (DESIGN.md §1). The runtime tells the engine what it sees in target/
(`offer`, `withdraw`), what consumers ask (`ack`, `unlock`, `reject`, `extend`) and what time it
is; the engine answers with effects, which the runtime applies as renames. Another process may
win a claim, and then the runtime calls `claim_lost`.

Invariants:
- A message id is in at most one place: ready (maybe delayed), leased, or released and awaiting
  its next offer. Finished, dead and expired messages are forgotten; withdrawn and lost ones
  (another process has them) keep their past holders parked, in case they come back.
- A claim never takes a consumer beyond its `max_in_flight` (XEP-0254 §2.1 queue_requests);
  delayed and released messages count against nobody.
- A release adds one to the delivery count; reaching `max_deliveries` turns it into a dead
  letter instead.
- A message its holder declines (`decline`: it cannot take it) counts no delivery and is never
  handed to a consumer that declined it, while that one stays a consumer and until it resumes;
  one every consumer declined is dead (TOO_LARGE). The declines of a message are kept only
  while the engine knows it, so none is kept that no consumer may be handed.
- Lock errors are decided by `check_holder` alone (XEP-0254 §2.3/§2.4). A request may name the
  delivery it answers (`Lease.delivery`, which a holder's handle keeps): one that names an
  earlier delivery of the message to the same holder is told its lock is gone
  (UnexpectedRequest) and changes nothing; the holder's later delivery is its own handle's.
  Without one (None), the holder's lease answers, whichever delivery it is.
- A lease stays valid until `expire(now)` reports it; `next_deadline()` says when to call
  `expire` and then `dispatch` again, and nothing here reads a clock or scans the backlog for it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from boxmq.core.dispatch import Dispatch, Picker
from boxmq.core.durations import check_seconds
from boxmq.core.effects import (
    Claim,
    DeadLetter,
    DeadReason,
    Effect,
    Expire,
    Extend,
    Finish,
    Release,
    ReleaseReason,
)
from boxmq.core.leases import Lease, LeaseTable
from boxmq.core.ownership import PastHolders, check_holder
from boxmq.core.ready import Lane, Rank, Ready, ReadySet
from boxmq.errors import InvalidArgument, check_count
from boxmq.model import ConsumerId, MessageId

__all__ = ["QueueEngine", "QueuePolicy", "QueueStats", "check_consumer_limits", "unlocked_until"]


def unlocked_until(delay: float, *, now: float) -> float:
    """The `not_before` of a message unlocked `now` with `delay` seconds: the epoch seconds
    it waits until, or 0 for no delay (ready at once, no `bx_nb` in its name)."""
    return now + delay if delay > 0 else 0.0


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    max_deliveries: int | None = 5  # a release reaching this count dead-letters; None: unlimited
    dispatch: Dispatch = Dispatch.ROUND_ROBIN
    handoff: float = 1.0  # seconds a released message waits for *another* consumer

    def __post_init__(self) -> None:
        # A bool or a float is refused, not used: 2.5 dead-lettered at the third delivery and
        # True at the first, where a reader of the setting would expect neither.
        check_count("max_deliveries", self.max_deliveries, least=1, none=True)
        if not (math.isfinite(self.handoff) and self.handoff >= 0):
            raise InvalidArgument(f"handoff must be a finite number >= 0, not {self.handoff}")


@dataclass(frozen=True, slots=True)
class QueueStats:
    ready: int
    delayed: int
    in_flight: int
    consumers: int


@dataclass(frozen=True, slots=True)
class _Limits:
    max_in_flight: int
    lock_timeout: float


_DEFAULT_POLICY = QueuePolicy()


class QueueEngine:
    """One queue: ready messages, consumers and their leases. Callers pass `now`."""

    def __init__(
        self, *, policy: QueuePolicy = _DEFAULT_POLICY, rng: random.Random | None = None
    ) -> None:
        self._policy = policy
        self._consumers: dict[ConsumerId, _Limits] = {}
        self._paused: dict[ConsumerId, int] = {}  # a paused consumer's max_in_flight, kept
        self._leases = LeaseTable()
        # A message's lease, or None (a receive asks, per message): the table's, with no call
        # of a method between.
        self.lease: Callable[[MessageId], Lease | None] = self._leases.get
        self._ready = ReadySet(handoff=policy.handoff)
        self._past = PastHolders()
        # message id -> the consumers that declined it (`decline`); mostly empty, and looked at
        # on the hot paths only through its truth.
        self._declined: dict[MessageId, set[ConsumerId]] = {}
        # A fixed seed by default keeps the core deterministic; pass an rng to vary it.
        self._picker = Picker(policy.dispatch, rng if rng is not None else random.Random(0))
        self._consumers_changed()

    # -- consumers ------------------------------------------------------------------------

    def add_consumer(
        self, consumer: ConsumerId, *, max_in_flight: int, lock_timeout: float
    ) -> None:
        """Add a consumer, or update its limits. `max_in_flight` is XEP-0254 queue_requests."""
        check_consumer_limits(max_in_flight, lock_timeout)
        added = consumer not in self._consumers
        if consumer in self._paused:
            self._paused[consumer] = max_in_flight  # still paused: the room is for `resume`
            max_in_flight = 0
        self._consumers[consumer] = _Limits(max_in_flight, lock_timeout)
        if added:
            self._consumers_changed()
            # One gone and attached again under its name (an MQTT client back with a clean
            # start) may take what it declined before, as one resumed may.
            self._declines_forgotten(consumer)

    def pause(self, consumer: ConsumerId) -> None:
        """No more messages for `consumer` until `resume`; it keeps the leases it has (an
        MQTT share-group member whose client is away: its turns go to the members there)."""
        limits = self._consumers.get(consumer)
        if limits is None or consumer in self._paused:
            return
        self._paused[consumer] = limits.max_in_flight
        self._consumers[consumer] = _Limits(0, limits.lock_timeout)  # no slot is ever free
        # Under hash-by-key its keys go to the consumers that take turns until it resumes:
        # kept on it, they waited for it (for as long as an MQTT session's client is away).
        self._consumers_changed()
        # Away, it is waited for as one that never declined (`decline`): back, it may take
        # what it declined (a larger Maximum Packet Size), which resume hands it again.
        self._declines_forgotten(consumer)

    def resume(self, consumer: ConsumerId) -> None:
        max_in_flight = self._paused.pop(consumer, None)
        limits = self._consumers.get(consumer)
        if max_in_flight is not None and limits is not None:
            self._consumers[consumer] = _Limits(max_in_flight, limits.lock_timeout)
            self._consumers_changed()  # its keys are its own again
            self._declines_forgotten(consumer)

    def give_back(self, message_id: MessageId, consumer: ConsumerId) -> Release:
        """A message claimed for `consumer` that it never received (it went away first): back
        for the others as it was, its delivery count unchanged, nobody passed over."""
        lease = self._held(message_id, consumer, None)
        self._leases.drop(message_id)
        return self._given_back(lease)

    def expire_claimed(
        self, message_id: MessageId, consumer: ConsumerId, *, now: float
    ) -> Expire | None:
        """A message claimed ahead for `consumer`, about to be received: Expire if its
        expiration has passed by `now` (the lease dropped: nobody is given an expired
        message, and nobody saw this one), else None and the lease stays."""
        lease = self._held(message_id, consumer, None)
        if not lease.message.expired(now):
            return None
        self._forget(message_id)
        return Expire(lease.message)

    def remove_consumer(self, consumer: ConsumerId, *, now: float) -> list[Effect]:
        """The owner is gone: release all its leases at once (XEP-0254 §4)."""
        if consumer not in self._consumers:
            return []
        effects: list[Effect] = []
        for lease in self._leases.of(consumer):
            self._leases.drop(lease.message.message_id)
            effects.append(self._release(lease, ReleaseReason.OWNER_GONE, not_before=0.0))
        del self._consumers[consumer]
        self._paused.pop(consumer, None)
        self._consumers_changed()
        self._declines_reopened()
        return effects

    def adopt(self, message: Ready, consumer: ConsumerId, *, deadline: float) -> None:
        """A lock of `consumer` left on disk by a process before this one, for a holder that
        outlives processes (a persistent MQTT session): leased to it again as it was, in one
        of its slots, its delivery not counted again."""
        self._ready.remove(message.message_id)
        self._leases.claim(message, consumer, deadline=deadline)

    def forget_consumer(self, consumer: ConsumerId) -> None:
        """The consumer stops here and its leases stay as they are on disk, for a process
        after this one (`adopt`): nothing is released."""
        if consumer not in self._consumers:
            return
        for lease in self._leases.of(consumer):
            self._leases.drop(lease.message.message_id)
        del self._consumers[consumer]
        self._paused.pop(consumer, None)
        self._consumers_changed()
        self._declines_reopened()

    # -- what the runtime sees in target/ -------------------------------------------------

    def offer(self, message: Ready, *, now: float) -> None:
        """The message is in target/. Replaces an unleased one with the same id."""
        if self._leases.get(message.message_id) is not None:  # a method: `in` costs a slot call
            return
        self._past.offered(message.message_id, message.last_holder)
        self._ready.put(message, now=now)

    def offer_new(self, message: Ready, *, now: float) -> bool:
        """`offer` for a message its own process just put: taken only if its id is new here.
        False when the engine has it already, leased or ready under any name (the process's
        watcher told of the file first, and a consumer may have claimed or released it
        since): the engine's entry is the one to keep."""
        message_id = message.message_id
        if self._leases.get(message_id) is not None or self._ready.get(message_id) is not None:
            return False
        self._past.offered(message_id, message.last_holder)
        self._ready.put(message, now=now)
        return True

    def withdraw(self, message_id: MessageId) -> None:
        """It vanished from target/ (another process took it). Who held it here before is
        kept, parked: asking, they are told their lock is gone, not that they never had it."""
        if message_id in self._leases:
            return  # our own claim moved it
        self._ready.remove(message_id)
        self._park_past(message_id)

    def claim_lost(self, message_id: MessageId) -> None:
        """Another process won the rename: free the slot and let go of the message (its past
        holders parked, as `withdraw` parks them; the claim's holder never had it)."""
        self._leases.drop(message_id)
        self._ready.remove(message_id)
        self._park_past(message_id)

    def lock_lost(self, message_id: MessageId) -> Lease | None:
        """Another process ended the lease on disk (an ack, unlock or reject by id): the
        holder's slot is free again, and the holder, asking, is told its lock is gone."""
        lease = self._leases.drop(message_id)
        if lease is not None:
            self._past.released(message_id, lease.holder)
        self._declined.pop(message_id, None)
        return lease

    def locked_until(self, message_id: MessageId, deadline: float) -> None:
        """Another process moved the lease's deadline on disk (an extend by id): the lease
        now ends then, whoever asked for it."""
        if message_id in self._leases:
            self._leases.extend(message_id, deadline=deadline)

    def hold_from(self, horizon: Rank | None) -> None:
        """Hand out nothing that ranks at or after `horizon` (None: anything), as the runtime
        keeps the names of a deep backlog outside the engine, the best of them at `horizon`
        (see ReadySet)."""
        self._ready.horizon = horizon
        self._ready.held_at_horizon = False

    def held_at_horizon(self) -> bool:
        """True if a dispatch since `hold_from` ran out of messages before the horizon while a
        consumer had room, or found none waiting: the runtime has more to offer."""
        return self._ready.held_at_horizon

    # -- time -----------------------------------------------------------------------------

    def dispatch(self, *, now: float) -> list[Effect]:
        """Hand out ready messages to consumers with free slots (XEP-0254 §2.2)."""
        effects: list[Effect] = [] if now < self._ready.next_due else self._tick(now)
        if not self._ready.waiting():
            if self._ready.horizon is not None:
                self._ready.held_at_horizon = True  # the runtime may have more to offer
            return effects  # nothing to hand out: the common case of a consumer's poll
        if len(self._consumers) == 1 and self._picker.rotates:  # no other to share with
            (consumer,) = self._consumers
            self._hand_out_alone(consumer, now, effects)
            return effects
        free = {
            consumer: None
            for consumer, limits in self._consumers.items()
            if self._leases.count(consumer) < limits.max_in_flight
        }
        if not free:
            return effects
        if len(free) == 1 and self._picker.rotates:  # the usual case: one consumer with room
            (consumer,) = free
            self._hand_out_alone(consumer, now, effects)
            return effects

        # Hash-by-key: the groups whose earlier message waits out its handoff (it goes back
        # to its last holder, the group's consumer); their later messages wait behind it, or
        # the consumer got them first and the group's order was lost. Each one passed is
        # counted (`behind`), so that a long group does not make every dispatch of the
        # handoff read all of it.
        held_back: set[str] | None = set() if self._picker.partitioned else None
        behind = [0]
        declined = self._declined

        def visit(message: Ready, offered_at: float) -> bool:
            if held_back and message.group_key in held_back:
                behind[0] += 1
                return False
            handoff_over = now >= offered_at + self._policy.handoff
            takers: dict[ConsumerId, None] = free
            if declined and (refused := declined.get(message.message_id)):
                takers = {consumer: None for consumer in free if consumer not in refused}
            consumer = self._picker.pick(
                message, takers, load=self._leases.count, handoff_over=handoff_over
            )
            if consumer is None:
                if held_back is not None and message.group_key is not None:
                    held_back.add(message.group_key)
                return False
            effects.append(self._claim(message, consumer, now=now))
            if self._leases.count(consumer) >= self._consumers[consumer].max_in_flight:
                del free[consumer]
            return True

        if held_back is None:
            self._ready.drain(None, visit, until=_stop_when_full(free, None))
            return effects
        for lane in list(free):
            behind[0] = 0
            self._ready.drain(lane, visit, until=_stop_when_lane_ends(free, lane, behind))
        return effects

    def expire(
        self, *, now: float, unreceived: Callable[[Lease], bool] | None = None
    ) -> list[Effect]:
        """Time out leases (XEP-0254 §4) and expire ready messages whose time passed.

        A lease for which `unreceived(lease)` is True was claimed ahead for its holder, which
        never received it: nobody saw it, so it goes back as it was (`give_back`), its
        delivery count unchanged and nobody passed over, rather than time out."""
        if now < self._leases.next_due and now < self._ready.next_due:
            return []  # the common case: nothing timed has come (called at every receive)
        effects: list[Effect] = [
            self._given_back(lease)
            if unreceived is not None and unreceived(lease)
            else self._release(lease, ReleaseReason.TIMED_OUT, not_before=0.0)
            for lease in self._leases.due(now=now)
        ]
        effects.extend(self._tick(now))
        return effects

    def due_by(self, now: float) -> bool:
        """False while nothing timed has come: `lapsing(now)` is False and `expire(now)` has
        nothing to do. One look for the live queue's receive and ack, instead of a call to
        each (an ack looks before it settles)."""
        return now >= self._leases.next_due or now >= self._ready.next_due

    def lapsing(self, *, now: float) -> bool:
        """True if a lease's deadline has come: `expire(now)` would end it."""
        if now < self._leases.next_due:
            return False  # the common case, without a call
        deadline = self._leases.next_deadline()  # drops the deadlines of leases gone
        return deadline is not None and deadline <= now

    def next_deadline(self) -> float | None:
        """When `expire(now)` and then `dispatch(now)` may have something new to do."""
        times = [
            t for t in (self._leases.next_deadline(), self._ready.next_deadline()) if t is not None
        ]
        return min(times, default=None)

    # -- what the holder asks ---------------------------------------------------------------

    def ack(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        *,
        now: float,
        delivery: int | None = None,
    ) -> Finish:
        """XEP-0254 §2.3: the holder deletes the item; it is done."""
        return Finish(self.acked(message_id, consumer, delivery), consumer)

    def acked(
        self, message_id: MessageId, consumer: ConsumerId, delivery: int | None = None
    ) -> Ready:
        """`ack(...).message` without making the Finish: the same checks, the same state
        after."""
        return self.ended_by_ack(message_id, consumer, delivery).message

    def ended_by_ack(
        self, message_id: MessageId, consumer: ConsumerId, delivery: int | None = None
    ) -> Lease:
        """`acked`, with the lease that ended (the live queue's ack needs only that, and a
        frozen Finish costs ~3,000 instructions to make): `unacked` takes it back."""
        lease = self._leases.get(message_id)
        if (  # _held's usual answer, without its call (one per ack)
            lease is None
            or lease.holder != consumer
            or (delivery is not None and lease.delivery != delivery)
        ):
            lease = self._held(message_id, consumer, delivery)  # the error, raised
        self._leases.drop(message_id)
        self._past.forget(message_id)
        if self._declined:
            self._declined.pop(message_id, None)
        return lease

    def unacked(self, lease: Lease) -> None:
        """Undo `ended_by_ack`: the file system refused the ack's move (read-only, EACCES,
        EIO), so the lease stands as it was, its holder may ack again, or it ends at its
        deadline."""
        self._leases.restore(lease)

    def unlock(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        *,
        now: float,
        delay: float = 0.0,
        delivery: int | None = None,
    ) -> Release | DeadLetter:
        """XEP-0254 §2.4: the holder gives it back, for the next consumer (after `delay`)."""
        check_seconds("an unlock delay", delay, zero=True)  # before the lease is dropped
        lease = self._held(message_id, consumer, delivery)
        self._leases.drop(message_id)
        not_before = unlocked_until(delay, now=now)
        return self._release(lease, ReleaseReason.UNLOCKED, not_before=not_before)

    def reject(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        *,
        now: float,
        delivery: int | None = None,
    ) -> DeadLetter:
        """The holder says it can never be processed: straight to error/, no redelivery."""
        lease = self._held(message_id, consumer, delivery)
        self._forget(message_id)
        return DeadLetter(lease.message, lease.holder, DeadReason.REJECTED)

    def decline(
        self, message_id: MessageId, consumer: ConsumerId, *, delivery: int | None = None
    ) -> Release | DeadLetter:
        """The holder cannot take it (larger than its client may receive): back for the
        others, its delivery not counted (nothing was delivered), and never handed to this
        consumer again until it resumes. Declined by every consumer (a paused one, even one
        that declined it before it paused, may come back able to take it), or by the one its
        key belongs to under hash-by-key (no other may have it), it is dead: TOO_LARGE."""
        lease = self._held(message_id, consumer, delivery)
        self._leases.drop(message_id)
        declined = self._declined.setdefault(message_id, set())
        declined.add(consumer)
        if self._picker.partitioned or declined.issuperset(self._consumers):
            self._forget(message_id)
            return DeadLetter(lease.message, consumer, DeadReason.TOO_LARGE)
        message = lease.message
        self._past.released(message_id, consumer)
        return Release(message, consumer, ReleaseReason.DECLINED, 0.0, message.delivery_count)

    def extend(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        *,
        now: float,
        seconds: float | None = None,
        delivery: int | None = None,
    ) -> Extend:
        """Work in progress: the lock lasts `seconds` (default: its lock_timeout) from now."""
        if seconds is not None:
            check_seconds("a lock extension", seconds)
        self._held(message_id, consumer, delivery)
        if seconds is None:
            seconds = self._consumers[consumer].lock_timeout
        lease = self._leases.extend(message_id, deadline=now + seconds)
        return Extend(lease.message, lease.holder, lease.deadline)

    # -- queries --------------------------------------------------------------------------

    def leases_of(self, consumer: ConsumerId) -> list[Lease]:
        return self._leases.of(consumer)

    def lock_timeout(self, consumer: ConsumerId) -> float:
        return self._consumers[consumer].lock_timeout

    def ready_key(self, message_id: MessageId) -> str | None:
        """The key (file name) of the ready message with this id, if one is."""
        ready = self._ready.get(message_id)
        return None if ready is None else ready.key

    def waiting(self) -> bool:
        """True if a ready message is not delayed: one `dispatch` may hand out if a consumer
        has room (as of the last `offer`, `expire` or `dispatch`)."""
        return self._ready.waiting()

    def statistics(self) -> QueueStats:
        delayed = self._ready.delayed
        return QueueStats(
            ready=len(self._ready) - delayed,
            delayed=delayed,
            in_flight=len(self._leases),
            consumers=len(self._consumers),
        )

    # -- internals ------------------------------------------------------------------------

    def _consumers_changed(self) -> None:
        self._picker.set_consumers(list(self._consumers), paused=self._paused)
        if self._picker.partitioned:
            self._ready.relane(self._picker.lane_of)

    def _tick(self, now: float) -> list[Effect]:
        if not self._ready.due_by(now):
            return []  # (dispatch looks at next_due itself: one call less per receive)
        self._ready.tick(now=now)
        expired: list[Effect] = []
        for message in self._ready.pop_expired(now=now):
            self._forget_past(message.message_id)
            expired.append(Expire(message))
        return expired

    def _hand_out_alone(self, consumer: ConsumerId, now: float, effects: list[Effect]) -> None:
        """`dispatch` when `consumer` is the only one with room: the claims the picker would
        make, message by message, made in one pass over the ready set."""
        limits = self._consumers[consumer]
        room = limits.max_in_flight - self._leases.count(consumer)
        if room <= 0:
            return
        declined = self._declined or None
        taken = self._ready.take_for(None, consumer, room, now=now, declined=declined)
        if not taken:
            return
        self._picker.took(consumer)
        deadline = now + limits.lock_timeout
        for message in taken:
            effects.append(self._leases.claim(message, consumer, deadline=deadline))

    def _claim(self, message: Ready, consumer: ConsumerId, *, now: float) -> Claim:
        deadline = now + self._consumers[consumer].lock_timeout
        return self._leases.claim(message, consumer, deadline=deadline)

    def _held(self, message_id: MessageId, consumer: ConsumerId, delivery: int | None) -> Lease:
        """The consumer's lease on the message (of `delivery`, if named), or the XEP-0254
        error that says why not."""
        lease = self._leases.get(message_id)
        if (
            lease is not None
            and lease.holder == consumer
            and (lease.delivery == delivery or delivery is None)
        ):
            return lease  # the usual answer, without gathering what an error would need
        # Held by `consumer`, but not as the delivery named: the request is a stale handle's.
        earlier = lease is not None and lease.holder == consumer
        # Leased counts as known: `holders_unrecorded` holds while another consumer has it too.
        known = lease is not None or message_id in self._ready or self._past.is_parked(message_id)
        past_holders = self._past.of(message_id)
        check_holder(
            message_id,
            consumer,
            holder=lease.holder if lease is not None else None,
            known=known,
            past_holders=past_holders,
            earlier_delivery=earlier,
            # Delivered before, and nobody on record here: its name kept no holder (one that
            # left, before a restart or in another process) and this engine recorded none, or
            # forgot them (PastHolders' limit). The requester may be the one that held it, as
            # the files' path decides (client/disk_locks.py). Any holder on record is taken as
            # the whole record: one not among them is told it never received it, as before.
            holders_unrecorded=not past_holders and self._delivered_before(message_id, lease),
        )
        assert lease is not None  # check_holder returned: the requester holds it
        return lease

    def _delivered_before(self, message_id: MessageId, lease: Lease | None) -> bool:
        """Whether the message, held (`lease`) or ready, had a delivery that ended unacked
        (a lease's message counts those before the delivery it is)."""
        message = lease.message if lease is not None else self._ready.get(message_id)
        return message is not None and message.delivery_count > 0

    def _release(
        self, lease: Lease, reason: ReleaseReason, *, not_before: float
    ) -> Release | DeadLetter:
        """Turn a dropped lease into a redelivery, or a dead letter at max deliveries."""
        message, holder = lease.message, lease.holder
        count = message.delivery_count + 1
        limit = self._policy.max_deliveries
        if limit is not None and count >= limit:
            self._forget_past(message.message_id)
            return DeadLetter(message, holder, DeadReason.MAX_DELIVERIES)
        self._past.released(message.message_id, holder)
        return Release(message, holder, reason, not_before, count)

    def _given_back(self, lease: Lease) -> Release:
        """A dropped lease whose holder never received the message: back as it was."""
        message = lease.message
        self._past.released(message.message_id, lease.holder)
        return Release(message, lease.holder, ReleaseReason.GIVEN_BACK, 0.0, message.delivery_count)

    def _forget(self, message_id: MessageId) -> None:
        self._leases.drop(message_id)
        self._forget_past(message_id)

    def _forget_past(self, message_id: MessageId) -> None:
        """Who held the message, and who declined it, forgotten: it left the queue (settled,
        expired, dead); the two go together, so that no decline outlives its message."""
        self._past.forget(message_id)
        self._declined.pop(message_id, None)

    def _park_past(self, message_id: MessageId) -> None:
        """Who held the message parked (asking, they are told their lock is gone, not that
        they never had it), who declined it forgotten: another process took it."""
        self._past.set_aside(message_id)
        self._declined.pop(message_id, None)

    def _declines_forgotten(self, consumer: ConsumerId) -> None:
        """`consumer` paused, or is back (resumed, or attached again): it may take what it
        declined (an MQTT client that connected again with a larger Maximum Packet Size)."""
        for declined in self._declined.values():
            declined.discard(consumer)

    def _declines_reopened(self) -> None:
        """A consumer left: a message every one left had declined is handed to them once more,
        so that the next decline makes it dead rather than leave it waiting for nobody."""
        consumers = self._consumers
        for message_id, declined in list(self._declined.items()):
            if declined.issuperset(consumers):
                del self._declined[message_id]


def check_consumer_limits(max_in_flight: int, lock_timeout: float) -> None:
    """InvalidArgument unless a consumer may have these limits; for a caller that must refuse
    them before it does anything else (a subscription's records are written before its
    consumer is added)."""
    # An int only: 1.5 would pass `>= 1` and make "how many slots are free" a fraction.
    check_count("max_in_flight", max_in_flight, least=1)
    check_seconds("the lock timeout", lock_timeout)


# How many messages held back behind their group's message in handoff one dispatch passes in
# a consumer's lane before it leaves the rest of the lane for later: the messages of other
# groups after them then wait at most for that handoff's end (when the next dispatch is due).
_HELD_BACK_SCAN = 100


def _stop_when_lane_ends(
    free: dict[ConsumerId, None], lane: ConsumerId, behind: list[int]
) -> Callable[[], bool]:
    """Stop draining a consumer's lane (hash-by-key) when it has no room left, or when the
    drain passed `_HELD_BACK_SCAN` messages held back behind their group."""
    return lambda: lane not in free or behind[0] >= _HELD_BACK_SCAN


def _stop_when_full(free: dict[ConsumerId, None], lane: Lane) -> Callable[[], bool]:
    """Stop draining a lane when nobody (or, for a consumer's own lane, it) has room left."""
    if lane is None:
        return lambda: not free
    return lambda: lane not in free
