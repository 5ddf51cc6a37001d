"""Hypothesis: random operations keep the engine's invariants.

The machine plays the runtime: it applies every effect to a model of the directory (where each
message is), re-offers released messages with their new delivery count, and asks consumers to
ack, unlock, reject and extend. Checked after every step:
- no message is leased twice, and a claim never takes a consumer beyond max_in_flight;
- every offered message is in exactly one place, and the engine agrees with the model;
- lock errors are exactly the ones XEP-0254 §2.3/§2.4 asks for (a past holder of a message
  another process took is told its lock is gone, not that it never received it);
- nothing is due before next_deadline(), and after expire(now) it lies in the future.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum, auto

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from boxmq.core import (
    Claim,
    DeadLetter,
    DeadReason,
    Dispatch,
    Effect,
    Expire,
    Extend,
    Finish,
    QueueEngine,
    QueuePolicy,
    Ready,
    Release,
)
from boxmq.errors import Conflict, Forbidden, ItemNotFound, LockError, UnexpectedRequest
from boxmq.model import ConsumerId, MessageId

T0 = 1_700_000_000.0
MAX_DELIVERIES = 2
CONSUMERS = [ConsumerId(name) for name in "abcd"]


class Place(Enum):
    READY = auto()  # in target/, known to the engine (maybe delayed)
    LEASED = auto()  # in processing/
    RELEASED = auto()  # back in target/, not offered again yet
    FINISHED = auto()
    DEAD = auto()
    EXPIRED = auto()
    GONE = auto()  # withdrawn or claim lost: another process has it


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.engine = QueueEngine()
        self.limits: dict[ConsumerId, tuple[int, float]] = {}
        self.place: dict[MessageId, Place] = {}
        self.message: dict[MessageId, Ready] = {}  # the latest version offered (or to offer)
        self.holder: dict[MessageId, ConsumerId] = {}
        self.past: dict[MessageId, set[ConsumerId]] = {}
        self.counter = 0

    @initialize(kind=st.sampled_from(Dispatch), handoff=st.sampled_from([0.0, 1.0]))
    def start(self, kind: Dispatch, handoff: float) -> None:
        policy = QueuePolicy(max_deliveries=MAX_DELIVERIES, dispatch=kind, handoff=handoff)
        self.engine = QueueEngine(policy=policy)

    # -- helpers ----------------------------------------------------------------------------

    def ids(self, *places: Place) -> list[MessageId]:
        return sorted(m for m, p in self.place.items() if p in places)

    def apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            self.apply_one(effect)

    def apply_one(self, effect: Effect) -> None:
        message_id = effect.message.message_id
        if isinstance(effect, Claim):
            assert self.place[message_id] is Place.READY  # never leased twice
            assert effect.message == self.message[message_id]
            assert effect.message.not_before <= self.now
            assert not effect.message.expired(self.now)
            self.place[message_id] = Place.LEASED
            self.holder[message_id] = effect.holder
            limit, timeout = self.limits[effect.holder]
            assert len(self.engine.leases_of(effect.holder)) <= limit
            assert effect.deadline == self.now + timeout
        elif isinstance(effect, Expire):
            assert self.place[message_id] is Place.READY
            assert effect.message.expired(self.now)
            self.end(message_id, Place.EXPIRED)
        else:
            assert isinstance(effect, Release | DeadLetter)
            assert self.place[message_id] is Place.LEASED
            assert effect.holder == self.holder.pop(message_id)
            count = effect.message.delivery_count + 1
            if isinstance(effect, DeadLetter):
                assert effect.reason is DeadReason.MAX_DELIVERIES
                assert count >= MAX_DELIVERIES
                self.end(message_id, Place.DEAD)
                return
            assert effect.delivery_count == count < MAX_DELIVERIES
            self.place[message_id] = Place.RELEASED
            self.past.setdefault(message_id, set()).add(effect.holder)
            self.message[message_id] = replace(
                effect.message,
                key=f"{message_id}.{count}",
                delivery_count=count,
                not_before=effect.not_before,
                last_holder=effect.holder,
            )

    def end(self, message_id: MessageId, place: Place) -> None:
        self.place[message_id] = place
        self.holder.pop(message_id, None)
        if place is not Place.GONE:  # another process has it: who held it here is kept
            self.past.pop(message_id, None)

    def expected_error(self, message_id: MessageId, consumer: ConsumerId) -> type[LockError] | None:
        holder = self.holder.get(message_id)
        if holder == consumer:
            return None
        if consumer in self.past.get(message_id, ()):
            return UnexpectedRequest
        if holder is not None:
            return Conflict
        if self.place.get(message_id) in (Place.READY, Place.RELEASED):
            return Forbidden
        if self.place.get(message_id) is Place.GONE and self.past.get(message_id):
            return Forbidden  # it is somewhere (another process has it)
        return ItemNotFound

    # -- the runtime ------------------------------------------------------------------------

    @rule(
        priority=st.integers(0, 9),
        expires_in=st.sampled_from([0.0, 0.5, 5.0, 60.0]),
        delay=st.sampled_from([0.0, 0.0, 2.0]),
    )
    def offer(self, priority: int, expires_in: float, delay: float) -> None:
        self.counter += 1
        message_id = MessageId(f"m{self.counter:03}")
        message = Ready(
            key=f"{message_id}.0",
            message_id=message_id,
            priority=priority,
            sequence=self.now,
            expiration=self.now + expires_in if expires_in else 0.0,
            not_before=self.now + delay if delay else 0.0,
        )
        self.place[message_id] = Place.READY
        self.message[message_id] = message
        self.engine.offer(message, now=self.now)

    @precondition(lambda self: self.ids(Place.RELEASED))
    @rule(data=st.data())
    def reoffer(self, data: st.DataObject) -> None:
        message_id = data.draw(st.sampled_from(self.ids(Place.RELEASED)))
        self.place[message_id] = Place.READY
        self.engine.offer(self.message[message_id], now=self.now)
        self.dispatch()  # the runtime dispatches after every change

    @precondition(lambda self: self.ids(Place.READY))
    @rule(data=st.data(), again=st.sampled_from([True, True, False]))
    def offer_again_or_withdraw(self, data: st.DataObject, again: bool) -> None:
        message_id = data.draw(st.sampled_from(self.ids(Place.READY)))
        if again:
            self.engine.offer(self.message[message_id], now=self.now)  # a re-scan
        else:
            self.engine.withdraw(message_id)
            self.end(message_id, Place.GONE)

    @precondition(lambda self: self.ids(Place.LEASED))
    @rule(data=st.data())
    def claim_lost(self, data: st.DataObject) -> None:
        message_id = data.draw(st.sampled_from(self.ids(Place.LEASED)))
        self.engine.claim_lost(message_id)
        self.end(message_id, Place.GONE)

    @rule()
    def dispatch(self) -> None:
        self.apply(self.engine.dispatch(now=self.now))

    @rule()
    def expire(self) -> None:
        self.apply(self.engine.expire(now=self.now))
        deadline = self.engine.next_deadline()
        assert deadline is None or deadline > self.now  # the one timer never spins

    @rule(seconds=st.sampled_from([0.0, 0.25, 1.0, 3.0, 31.0]))
    def advance(self, seconds: float) -> None:
        deadline = self.engine.next_deadline()
        self.now += seconds
        if deadline is None or self.now < deadline:
            assert self.engine.expire(now=self.now) == []

    # -- consumers --------------------------------------------------------------------------

    @rule(
        consumer=st.sampled_from(CONSUMERS),
        max_in_flight=st.integers(1, 3),
        lock_timeout=st.sampled_from([5.0, 30.0]),
    )
    def add_consumer(self, consumer: ConsumerId, max_in_flight: int, lock_timeout: float) -> None:
        self.engine.add_consumer(consumer, max_in_flight=max_in_flight, lock_timeout=lock_timeout)
        self.limits[consumer] = (max_in_flight, lock_timeout)
        self.dispatch()

    @rule(consumer=st.sampled_from(CONSUMERS))
    def remove_consumer(self, consumer: ConsumerId) -> None:
        self.apply(self.engine.remove_consumer(consumer, now=self.now))
        self.limits.pop(consumer, None)
        assert consumer not in self.holder.values()

    @precondition(lambda self: self.ids(Place.LEASED))
    @rule(
        data=st.data(),
        verb=st.sampled_from(["ack", "unlock", "reject", "extend"]),
        delay=st.sampled_from([0.0, 1.5]),
    )
    def holder_request(self, data: st.DataObject, verb: str, delay: float) -> None:
        message_id = data.draw(st.sampled_from(self.ids(Place.LEASED)))
        self.request(verb, message_id, self.holder[message_id], delay)
        self.dispatch()

    @precondition(lambda self: self.place)
    @rule(
        data=st.data(),
        consumer=st.sampled_from(CONSUMERS),
        verb=st.sampled_from(["ack", "unlock", "reject", "extend"]),
    )
    def any_request(self, data: st.DataObject, consumer: ConsumerId, verb: str) -> None:
        message_id = data.draw(st.sampled_from(sorted(self.place)))
        self.request(verb, message_id, consumer, 0.0)

    def request(self, verb: str, message_id: MessageId, consumer: ConsumerId, delay: float) -> None:
        expected = self.expected_error(message_id, consumer)
        if expected is not None:
            with pytest.raises(expected) as info:
                self.call(verb, message_id, consumer, delay)
            assert type(info.value) is expected
            return
        effect = self.call(verb, message_id, consumer, delay)
        if isinstance(effect, Finish):
            self.end(message_id, Place.FINISHED)
        elif isinstance(effect, Extend):
            lease = self.engine.lease(message_id)
            assert lease is not None
            assert lease.deadline == effect.deadline == self.now + self.limits[consumer][1]
        elif isinstance(effect, DeadLetter) and effect.reason is DeadReason.REJECTED:
            assert self.holder.pop(message_id) == consumer
            self.end(message_id, Place.DEAD)
        else:
            self.apply_one(effect)

    def call(self, verb: str, message_id: MessageId, consumer: ConsumerId, delay: float) -> Effect:
        if verb == "ack":
            return self.engine.ack(message_id, consumer, now=self.now)
        if verb == "unlock":
            return self.engine.unlock(message_id, consumer, now=self.now, delay=delay)
        if verb == "reject":
            return self.engine.reject(message_id, consumer, now=self.now)
        return self.engine.extend(message_id, consumer, now=self.now)

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def engine_agrees_with_the_model(self) -> None:
        leased = self.ids(Place.LEASED)
        stats = self.engine.statistics()
        assert stats.in_flight == len(leased)
        assert stats.ready + stats.delayed == len(self.ids(Place.READY))
        assert stats.consumers == len(self.limits)
        held = [
            lease.message.message_id
            for consumer in CONSUMERS
            for lease in self.engine.leases_of(consumer)
        ]
        assert sorted(held) == leased  # each leased message exactly once
        for message_id in leased:
            lease = self.engine.lease(message_id)
            assert lease is not None
            assert lease.holder == self.holder[message_id]
        for message_id in self.ids(*(p for p in Place if p is not Place.LEASED)):
            assert self.engine.lease(message_id) is None


QueueMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_queue_engine_invariants = QueueMachine.TestCase
