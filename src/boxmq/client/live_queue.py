"""One queue's engine in this process, kept in step with its folder.

The core engine decides (who gets what, when locks end); this class does what it decides to
the files and tells it what the files say: new names in target/ (from the watcher or a rescan),
claims lost to other processes, locks other processes swept away. All consumers of one queue
in one `Box` share one LiveQueue, one lock and one watcher; whichever consumer thread is
waiting watches the folder for the others, and claims made for a consumer land in its inbox.

This module holds the consumers (attach, pause, rest, detach), their receives and their
answers (ack, unlock, reject, extend); the class is built on layers, one module each, each on
the next: the locks of consumers that outlive their process (outliving), the engine's
effects done to the files (live_effects), our locks as processing/ shows them (held_locks),
the names of target/ known or kept cold (target_names), the watcher's news and who is told
(live_news), and the state they all share (live_state).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

from boxmq.client.lifecycle import envelope_of, lock_gone
from boxmq.client.live_effects import why_dead
from boxmq.client.message import Message
from boxmq.client.outliving import Outliving
from boxmq.clock import periodic_due
from boxmq.core import Claim, Effect, Extend, Lease, Release
from boxmq.errors import Closed, InvalidArgument
from boxmq.model import ConsumerId, Envelope, MessageId
from boxmq.store.layout import State
from boxmq.store.watch import Watcher

__all__ = ["LiveQueue"]

_Decision = Callable[[float], Effect]  # given `now`, what the engine says to do

# How far ahead a queue asks its box for a reminder of its next deadline (`_remind_when_due`):
# a persistent MQTT session's locks end in a century, and each reminder holds its place
# until then.
_REMIND_WITHIN: Final = 3600.0


class LiveQueue(Outliving):
    # -- consumers ---------------------------------------------------------------------------

    def attach(
        self,
        consumer: ConsumerId,
        *,
        max_in_flight: int,
        lock_timeout: float,
        outlives_process: bool = False,
    ) -> None:
        """outlives_process: the consumer is one a later process may go on with (a persistent
        MQTT session): its locks name no process, so that they last through this one's end
        until their deadline, and those it left on disk are its own again here, first in its
        inbox, their deliveries not counted twice."""
        with self._mutex:
            if consumer in self._inbox:
                raise InvalidArgument(f"consumer {consumer!r} is already open on {self.name!r}")
            self._engine.add_consumer(
                consumer, max_in_flight=max_in_flight, lock_timeout=lock_timeout
            )
            self._inbox[consumer] = deque()
            if not self._stirred:  # the next sweep learns of what it holds
                self._stir()
            if outlives_process:
                self._outliving.add(consumer)
                self._adopt(consumer)

    def set_limits(self, consumer: ConsumerId, *, max_in_flight: int, lock_timeout: float) -> None:
        """New limits for an attached consumer: more room is used at its next receive. Less
        room gives back at once, as `pause` does, what was claimed for it beyond the new
        limit and not received: kept, it was held from the other consumers (those of other
        processes too) until its locks timed out, the consumer holding more than its
        queue_requests (XEP-0254 §2.1)."""
        with self._mutex:
            inbox = self._inbox.get(consumer)
            if inbox is None:
                raise self._closed_error(consumer)
            self._engine.add_consumer(
                consumer, max_in_flight=max_in_flight, lock_timeout=lock_timeout
            )
            given_back = self._give_back_over(consumer, inbox, max_in_flight)
            self._apply_all(given_back)
            self._cond.notify_all()
        if given_back:
            self.tell()  # to the other consumers, whose receives they go to now

    def pause(self, consumer: ConsumerId, *, keep_claimed: bool = False) -> None:
        """Nothing more for `consumer` until `resume`: the messages claimed for it and not
        received go back to the other consumers at once; those it received stay locked to it.
        keep_claimed: those claimed stay its own too (the ones `attach` found it held when its
        last process ended, which it received there)."""
        with self._mutex:
            inbox = self._inbox.get(consumer)
            if inbox is None:
                return
            self._engine.pause(consumer)
            if keep_claimed:
                return
            given_back = self._give_back(consumer, inbox)
            kept = [m for m in inbox if m in self._adopted]  # received: they stay its own
            inbox.clear()
            inbox.extend(kept)
            self._apply_all(given_back)
            self._wake_others()
        if given_back:
            self.tell()  # to the other consumers, whose receives they go to now

    def rest(self, consumer: ConsumerId) -> None:
        """`consumer` receives nothing for a while (an MQTT client away, its persistent
        session kept). Once every consumer attached rests, the box's next sweep closes the
        watcher (its watches in the process's inotify instance, and the news the instance
        keeps for it): there, not here, so that a client back within a sweep keeps it. The
        next receive opens it again and reads target/ afresh, so what came meanwhile is
        found. The box's sweeps then visit this dropbox only when something in it is due."""
        with self._mutex:
            if consumer in self._inbox:
                self._resting.add(consumer)
                if not self._rested:
                    self._rested = True
                    if self._told_stirred is not None:
                        self._told_stirred(self)

    def _stir(self) -> None:
        """Its folders changed: the box's next sweep asks `wants_sweep` (told once, until
        that ask)."""
        self._stirred = True
        if self._told_stirred is not None:
            self._told_stirred(self)

    def _all_resting(self) -> bool:
        return self._resting.issuperset(self._inbox)

    def wants_sweep(self) -> bool:
        """For the box's sweep (in its thread): whether a consumer here is receiving and
        something changed in the folders since the last call (a message put, claimed,
        settled, expired here, or files another process's moved in or out of target/), or
        one began to rest (what it holds is due at its locks' deadlines, which the sweep
        that visits it then learns). A receiver with nothing new is visited when the last
        visit's deadlines say: its own receives sweep processing/ meanwhile, and expire
        what they offer; a visit each second of each of 2,000 connected idle MQTT devices
        was most of the 12 % of a core they cost (docs/benchmarks.md, "Many connected
        persistent sessions").
        A watcher every consumer rests from is closed now."""
        idle: Watcher | None = None
        with self._mutex:
            rested, self._rested = self._rested, False
            stirred, self._stirred = self._stirred, False
            receiving = bool(self._inbox) and not self._all_resting()
            if rested and not receiving and not self._watching:
                idle, self._watcher = self._watcher, None
        if idle is not None:
            idle.close()  # out of the mutex: a receive that comes meanwhile opens a new one
        return rested or (receiving and stirred)

    def attached(self, consumer: ConsumerId) -> bool:
        """Whether `consumer` is attached (open in this process)."""
        with self._mutex:
            return consumer in self._inbox

    def holding(self, consumer: ConsumerId) -> int:
        """How many messages `consumer` holds locked."""
        with self._mutex:
            return len(self._engine.leases_of(consumer))

    def idle(self) -> bool:
        """Whether no consumer is attached (all detached, or none yet)."""
        with self._mutex:
            return not self._inbox

    def resume(self, consumer: ConsumerId) -> None:
        with self._mutex:
            if consumer in self._inbox:
                self._engine.resume(consumer)
                self._cond.notify_all()

    def detach(self, consumer: ConsumerId, *, keep_locks: bool = False) -> None:
        """Owner gone: every lock it holds is released at once, to the other consumers. What
        was claimed for it and never received goes back unchanged, as `pause` gives it: a
        consumer opened and closed again and again must not count deliveries nobody saw.

        keep_locks, for a consumer that outlives its process (`attach`): what it received
        stays locked on disk, for a later process to go on with; the rest goes back."""
        with self._mutex:
            released = self._detach(consumer, keep_locks=keep_locks)
        if released:
            self.tell()  # to the other consumers, whose receives they go to now

    def _detach(self, consumer: ConsumerId, *, keep_locks: bool = False) -> bool:
        """`detach`'s work, under the mutex; whether it gave messages back (to be told)."""
        inbox = self._inbox.pop(consumer, None)
        if inbox is None:
            return False
        self._resting.discard(consumer)
        effects = self._give_back(consumer, inbox)
        if keep_locks and consumer in self._outliving:
            self._apply_all(effects)
            for lease in self._engine.leases_of(consumer):
                self._locks.pop(lease.message.message_id, None)
                self._claimed.pop(lease.message.message_id, None)
                self._adopted.discard(lease.message.message_id)
            self._engine.forget_consumer(consumer)
        else:
            effects += self._engine.remove_consumer(consumer, now=self._clock.now())
            self._apply_all(effects)
        self._outliving.discard(consumer)
        self._wake_others()
        # Waiting: what every consumer left had declined is theirs to try again (the engine's
        # decline), and they hear of it as of a message given back.
        return bool(effects) or self._engine.waiting()

    def _give_back(self, consumer: ConsumerId, inbox: deque[MessageId]) -> list[Effect]:
        """The claims in `inbox` still leased to `consumer` (none timed out) that it never
        received, handed back."""
        return [
            self._engine.give_back(m, consumer) for m in self._claims_not_received(consumer, inbox)
        ]

    def _give_back_over(
        self, consumer: ConsumerId, inbox: deque[MessageId], max_in_flight: int
    ) -> list[Effect]:
        """`_give_back` of as many of the claims in `inbox` as `consumer` holds over
        `max_in_flight`, the latest first: the earliest keep their turn, in their order. What
        it received stays its own, to settle, even over the limit."""
        over = len(self._engine.leases_of(consumer)) - max_in_flight
        if over <= 0:
            return []
        surplus = self._claims_not_received(consumer, inbox)[-over:]
        for message_id in surplus:
            inbox.remove(message_id)
        return [self._engine.give_back(m, consumer) for m in surplus]

    def _claims_not_received(
        self, consumer: ConsumerId, inbox: deque[MessageId]
    ) -> list[MessageId]:
        """The claims in `inbox` still leased to `consumer` (none timed out) that it never
        received: not those `_adopt` took back, which it did."""
        return [
            m
            for m in inbox
            if m not in self._adopted and _holder(self._engine.lease(m)) == consumer
        ]

    def receive(self, consumer: ConsumerId, timeout: float | None) -> Message | None:
        # The timeout is how long the caller waits: wall time, not the box's clock, which a
        # test's ManualClock holds still (a receive on it waited for ever). The clock still
        # says when locks end and messages expire.
        end = None if timeout is None else time.monotonic() + timeout
        # What was taken for the caller, set with no call between the take and it: an
        # interrupt (Ctrl-C's KeyboardInterrupt, raised at a call) before the caller has it
        # gives it back (`_not_received`).
        taken: list[Message | None] = [None]
        try:
            try:
                self._receive(consumer, end, taken)
            finally:
                self._tell_others()
        except BaseException:
            self._not_received(taken)
            raise
        return taken[0]

    def _receive(
        self, consumer: ConsumerId, end: float | None, taken: list[Message | None]
    ) -> None:
        with self._mutex:
            while True:
                if consumer not in self._inbox or self._closed:  # _check_open, without a call
                    raise self._closed_error(consumer)
                if self._inbox[consumer]:
                    self._expire(self._clock.now())  # never hand out a lock that ran out
                    if (delivery := self._take(consumer)) is not None:
                        taken[0] = delivery
                        return
                self._pump(consumer)
                # _take_live, without its call (one per message)
                if self._inbox[consumer] and self._engine.due_by(now := self._clock.now()):
                    self._expire(now)
                if (delivery := self._take(consumer)) is not None:
                    taken[0] = delivery
                    return
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return
                self._wait(self._nap(self._clock.now(), left))

    def receive_ready(self, consumer: ConsumerId, most: int | None = None) -> list[Message]:
        """What `receive(consumer, 0)` would return call after call (at most `most`), with
        one pump."""
        ready: list[Message] = []  # as `receive`'s `taken`
        try:
            with self._mutex:
                self._check_open(consumer)
                self._pump(consumer)
                self._expired_ahead = 0
                while most is None or len(ready) < most:
                    if (delivery := self._take_live(consumer)) is not None:
                        ready.append(delivery)
                        continue
                    if not self._expired_ahead:
                        break
                    # A claim locked ahead expired before this take: its slot is free, and
                    # what waits behind it is handed out now, as receive(consumer, 0) would.
                    # Bounded: each expired message is gone for good.
                    self._expired_ahead = 0
                    self._pump(consumer)
            self._tell_others()
        except BaseException:
            self._not_received(ready)
            raise
        return ready

    def has_more(self, consumer: ConsumerId) -> bool:
        """Whether a receive of `consumer` might get something now that no news told of: a
        claim waits in its inbox, a message the engine has not handed out (every consumer
        was full, or it came while it was), a deadline passed, a sweep of processing/ due
        while it holds locks, names kept cold or waiting behind a lock, a read of target/
        asked for, or a watcher that only a look reads
        (polling, closed while every consumer rested, or read by a thread waiting on it).
        False: what comes next comes with news (`tell`: a put, a lock ended or given back,
        another process's file at the tick), so a broker need not look after a PUBACK, nor
        a group's member told of a put another member's look claimed (docs/benchmarks.md,
        "Many share groups")."""
        with self._mutex:
            inbox = self._inbox.get(consumer)
            watcher = self._watcher
            return (
                inbox is None  # closed: the receive says so
                or bool(inbox)
                or watcher is None
                or watcher.polls
                or self._watching  # a thread waits on the watcher: it, not a tick, reads it
                or self._engine.waiting()
                or self._engine.due_by(now := self._clock.now())
                # The sweep it holds locks for (the reminder `_remind_when_due` asks): another
                # process may have settled or extended one of them by id (`_reconcile`).
                or bool(self._locks and self._sweep_due(now))
                or bool(self._cold or self._behind)
                or self._next_scan != self._scanned_next  # a read asked for, not the periodic
            )

    def _check_open(self, consumer: ConsumerId) -> None:
        if consumer not in self._inbox or self._closed:
            raise self._closed_error(consumer)

    def _closed_error(self, consumer: ConsumerId) -> Closed:
        if self._forked:
            return Closed(
                f"consumer {consumer!r} of {self.name!r} was made before this process was "
                "forked: it is the parent's; make a new consumer in this process"
            )
        return Closed(f"consumer {consumer!r} of {self.name!r} is closed")

    # -- settling (XEP-0254 §2.3, §2.4) ----------------------------------------------------------

    # `delivery`: the Message's, which the engine checks (a stale handle's is refused with
    # UnexpectedRequest before anything changes); None: whichever lock `consumer` holds.

    def ack(self, message_id: MessageId, consumer: ConsumerId, delivery: int | None = None) -> None:
        # _settle's work with the Finish applied straight (one ack per message): no lambda,
        # no _apply and its look at the effect's type.
        with self._mutex:
            if self._forked:
                raise self._closed_error(consumer)
            engine, now = self._engine, self._clock.now()
            if engine.due_by(now):  # else _expire has nothing to do: one call, not three
                self._expire(now)  # a late answer finds its lock gone
            lease = engine.ended_by_ack(message_id, consumer, delivery)
            self._claimed.pop(message_id, None)  # acked before any receive took it
            if self._adopted:  # mostly empty: no call per ack
                self._adopted.discard(message_id)
            if self._behind:
                self._let_go(message_id)
            try:
                self._finish(message_id, lease.message.key)
            except OSError:
                # The move refused (read-only, EACCES, EIO): still locked, in memory as on
                # disk, so the ack may be tried again; an ack by id then said no such message.
                engine.unacked(lease)
                raise
            if self._sleepers or self._watching:  # _wake_others' test, without its call
                self._wake_others()

    def unlock(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        delay: float,
        delivery: int | None = None,
    ) -> str | None:
        """None when the message is back in target/; else why it went to error/ instead."""
        return why_dead(
            self._settle(
                consumer,
                lambda now: self._engine.unlock(
                    message_id, consumer, now=now, delay=delay, delivery=delivery
                ),
            )
        )

    def decline(
        self, message_id: MessageId, consumer: ConsumerId, delivery: int | None = None
    ) -> str | None:
        """None when the message is back in target/ for the other consumers; else why it went
        to error/ ("too-large": every consumer declined it)."""
        return why_dead(
            self._settle(
                consumer,
                lambda now: self._engine.decline(message_id, consumer, delivery=delivery),
            )
        )

    def reject(
        self, message_id: MessageId, consumer: ConsumerId, delivery: int | None = None
    ) -> None:
        self._settle(
            consumer,
            lambda now: self._engine.reject(message_id, consumer, now=now, delivery=delivery),
        )

    def extend(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        seconds: float | None,
        delivery: int | None = None,
    ) -> float:
        effect = self._settle(
            consumer,
            lambda now: self._engine.extend(
                message_id, consumer, now=now, seconds=seconds, delivery=delivery
            ),
        )
        assert isinstance(effect, Extend)  # what the engine's extend answers
        return effect.deadline

    def _settle(self, consumer: ConsumerId, decide: _Decision) -> Effect:
        with self._mutex:
            if self._forked:
                raise self._closed_error(consumer)
            now = self._clock.now()
            self._expire(now)  # a late answer finds its lock gone
            effect = decide(now)
            if self._apply(effect):  # another process settled or took the lock meanwhile
                raise lock_gone(effect.message.message_id, self._box.path)
            self._wake_others()
            if self._remind is not None and self._listeners:
                # An extend may end the lock before the reminder asked for (its sweep's),
                # and no receive need come to ask again.
                self._remind_when_due(now)
        if isinstance(effect, Release):
            self.tell()  # back in target/: for any consumer, now or at its delay's end
        return effect

    @property
    def forked(self) -> bool:
        """Whether this is the parent's queue in a forked child (abandon_in_child)."""
        return self._forked

    def abandon_in_child(self) -> None:
        """In a forked child: this queue's locks and watcher are the parent's. Stop watching
        (the parent keeps every event) and refuse every use, without releasing a lock on
        disk, which close() would do."""
        self._mutex = threading.RLock()  # another thread may have held it at the fork
        self._cond = threading.Condition(self._mutex)
        self._closed = self._forked = True
        if self._watcher is not None:
            self._watcher.close()

    def close(self) -> None:
        """Release what the consumers hold, and end their receives. A release the disk
        refuses (read-only, EIO) stops none of the rest: the first such error is raised
        once everything is closed, and what stays locked ends at its deadline."""
        refused: OSError | None = None
        with self._mutex:
            # `_detach`, not `detach`: the consumers given back what another one held all
            # leave too, so nobody is left to tell (and a listener is never called here,
            # under the mutex).
            for consumer in list(self._inbox):
                try:
                    self._detach(consumer)
                except OSError as error:
                    refused = refused or error
            self._closed = True
            # A receiving thread may be in the watcher's wait, the mutex released: closing the
            # watcher under it made it read a closed wake pipe (OSError EBADF, or a read of
            # whatever file took that descriptor number meanwhile). It leaves once woken.
            while self._watching and self._watcher is not None:
                self._watcher.wakeup()
                self._sleepers += 1
                try:
                    self._cond.wait(0.1)
                finally:
                    self._sleepers -= 1
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if refused is not None:
            raise refused

    # -- keeping the engine in step with the folder ------------------------------------------------

    def _take_live(self, consumer: ConsumerId) -> Message | None:
        """`_take`, after ending the claims whose lock ran out while the pump made them: one
        that lost claim after claim to other processes (a stale look at a long target/) and
        dispatched again each time may have taken longer than a lock lasts."""
        if self._inbox[consumer] and self._engine.due_by(now := self._clock.now()):
            self._expire(now)
        return self._take(consumer)

    def _not_received(self, taken: Sequence[Message | None]) -> None:
        """The messages a receive took for its consumer and could not return, an interrupt
        raised meanwhile (a KeyboardInterrupt the caller catches and carries on from): back
        at the front of their consumer's inbox, in their order, for its next receive (or its
        close to give back). Left out of it, each held one of the consumer's slots, locked
        to it until the lock's end, and nobody had it."""
        with self._mutex:
            for message in reversed(taken):
                if message is not None:
                    self._back_in_inbox(message.consumer, message.id, message.envelope)

    def _back_in_inbox(
        self, consumer: ConsumerId, message_id: MessageId, envelope: Envelope | None = None
    ) -> None:
        """`message_id` first in `consumer`'s inbox again, if it still holds its lock and it is
        not there already (`_not_received`, `_take`)."""
        inbox = self._inbox.get(consumer)
        if inbox is None or message_id in inbox or message_id not in self._locks:
            return
        if _holder(self._engine.lease(message_id)) != consumer:
            return
        inbox.appendleft(message_id)
        if envelope is not None:
            self._claimed[message_id] = envelope

    def _take(self, consumer: ConsumerId) -> Message | None:
        inbox = self._inbox[consumer]
        while inbox:
            # Not popleft(): an interrupt is raised when a call returns, and the id would be
            # out of the inbox and not yet named here, for `_back_in_inbox` to put back.
            message_id = inbox[0]
            del inbox[0]
            try:
                lease = self._engine.lease(message_id)
                if lease is None or lease.holder != consumer:
                    # Its lock ended before this receive (an ack by id): the engine is done with
                    # it, and may know it again as ready, which a claim_lost would forget.
                    continue
                processing = self._locks.get(message_id)
                if processing is None:
                    self._forget(message_id)
                    continue
                if lease.message.expiration and self._expired_unseen(message_id, consumer):
                    continue
                body = self._bodies.pop(lease.message.key, None)  # our own put's, if kept
                if body is None and (body := self._read(processing, lease.message.key)) is None:
                    # Gone from processing/, or renamed there by an extend by id from another
                    # process since we last looked: then it is still ours, under its new name.
                    if (moved := self._relocated(message_id, processing)) is None or (
                        body := self._read(moved, lease.message.key)
                    ) is None:
                        self._forget(message_id)  # swept away by another process, or no file
                        continue
                    lease = self._engine.lease(message_id)
                    if lease is None or lease.deadline <= self._clock.now():
                        # Shortened, and over: back as it was, never received (still in the inbox).
                        inbox.appendleft(message_id)
                        self._expire(self._clock.now())
                        continue
                envelope = self._claimed.pop(message_id, None) or envelope_of(lease.message.key)
                if self._adopted:  # mostly empty: no call per receive
                    self._adopted.discard(message_id)
                return Message(
                    self.queue,
                    envelope,
                    body,
                    consumer,
                    lease.deadline,
                    self,
                    self.v5,
                    lease.delivery,
                )
            except BaseException:
                self._back_in_inbox(consumer, message_id)
                raise
        return None

    def _expired_unseen(self, message_id: MessageId, consumer: ConsumerId) -> bool:
        """Whether the message locked ahead for `consumer` expired before this receive took
        it: then it goes to expired/, as a ready one does, and nobody is given it. One taken
        back (adopted) was received before, in another process: it is handed out."""
        if message_id in self._adopted:
            return False
        expired = self._engine.expire_claimed(message_id, consumer, now=self._clock.now())
        if expired is None:
            return False
        self._bodies.pop(expired.message.key, None)
        self._apply_all([expired])
        self._expired_ahead += 1
        return True

    def _pump(self, consumer: ConsumerId) -> None:
        """Take in the folder's news, then hand out. The news is read first, unless it was
        read less than `watch_interval` ago and messages wait in memory: then only if they
        gave `consumer` nothing. So a receive never comes back empty or waits without looking,
        and one process's own puts do not cost a read of the watcher each."""
        now = self._clock.now()
        deferred = False
        found = self._found
        if self._resting:
            self._resting.discard(consumer)  # it receives again: so does the watcher
        if not self._watching:  # else the thread that waits on the watcher reads it
            if 0.0 <= now - self._looked_at < self._options.watch_interval and (
                self._engine.waiting()
            ):
                deferred = True
            else:
                now = self._look(now)
        self._hand_out(now, consumer, found)
        if deferred and not self._inbox[consumer]:
            self._hand_out(self._look(now), consumer, found)

    def _sweep_due(self, now: float) -> bool:
        """Whether processing/ is to be looked at now (stepped back an hour, the locks of
        this host's dead processes stayed an hour: `periodic_due`)."""
        return periodic_due(now, self._next_sweep, self._options.sweep_interval)

    def _hand_out(self, now: float, pumping: ConsumerId, found: int) -> None:
        """Claim what waits for the consumers with room, for `pumping`'s receive, whose pump
        began when `_found` was `found`: the others it claimed for are told if names read
        from the folder were offered since (`_tell_others`)."""
        looked = False
        # `_sweep_due` and `_scan_due`, without their calls (each of them one per receive).
        if periodic_due(now, self._next_sweep, self._options.sweep_interval):
            self._next_sweep = now + self._options.sweep_interval
            if self._locks or not self._still(self._empty_processing, State.PROCESSING):
                self._sweep(now)
                looked = True
        # After the sweep: what it sent back to target/ is offered.
        if periodic_due(now, self._next_scan, self._scan_lead):
            if (
                self._next_scan == self._scanned_next  # the periodic one, nothing asked sooner
                and not self._behind
                and not self._cold
                and self._still(self._target_seen, State.TARGET)
            ):
                self._next_scan = self._scanned_next = now + self._options.rescan_interval
                self._scan_lead = self._options.rescan_interval
            else:
                self._scan(now)
                looked = True
        if looked:
            # Long folders (and a busy machine) may take longer to read than a lock lasts:
            # what is claimed below is locked from now, or its lock could end before the
            # receive hands it out.
            now = self._clock.now()
        moved = self._engine.due_by(now) and self._expire(now)  # one look when nothing is due
        engine = self._engine
        others: list[ConsumerId] | None = None
        while True:
            if self._cold_moved:
                self._promote(now)
            claims = engine.dispatch(now=now)
            moved = moved or bool(claims)
            if claims and self._found != found and self._listeners:
                # Not for this process's puts alone (no offer from the folder): one is told
                # to every consumer already (`sent`), and a tell more is a pump more.
                others = others or []
                others += [c.holder for c in claims if type(c) is Claim and c.holder != pumping]
            lost = self._apply_all(claims)
            if engine.held_at_horizon():
                # A consumer with room found nothing before the horizon (which may be a
                # name gone since): the best names kept cold are offered, and it goes on.
                self._promote(now, wanted=True)
                continue
            if not lost:
                break  # else a claim was lost to another process: its slot is free again
            # Each failed rename took a while: the next claims are locked from now.
            now = self._clock.now()
            if self._scan_due(now):  # a lost claim let go of a file waiting behind it
                self._scan(now)
        if moved and (self._sleepers or self._watching):
            # Only news wakes the other consumers: waking them for nothing made two idle
            # consumer threads wake each other in turn, forever (a core's worth of CPU).
            self._wake_others()
        if others:
            self._untold += others  # told once the receive lets go of the mutex
        if self._remind is not None and self._listeners:
            self._remind_when_due(now)

    def _remind_when_due(self, now: float) -> None:
        """Ask to be told (`tell`) when the engine next has something due, within an hour
        (later ones are asked for by a look closer to them); at the next sweep of
        processing/ while this process holds locks (another process may settle or extend
        one by id: `_reconcile`, which the watch of target/ does not see); at once, while
        the watcher polls: only a look finds what came. One reminder at a time, unless an
        earlier one is due."""
        watcher = self._watcher
        if watcher is not None and watcher.polls:
            due: float | None = now
        else:
            due = self._engine.next_deadline()
            if self._locks and (due is None or self._next_sweep < due):
                due = self._next_sweep
        if due is None or due - now > _REMIND_WITHIN:
            return
        if due < self._reminded or self._reminded <= now:
            self._reminded = due
            assert self._remind is not None
            self._remind(due, self)


def _holder(lease: Lease | None) -> ConsumerId | None:
    return None if lease is None else lease.holder
