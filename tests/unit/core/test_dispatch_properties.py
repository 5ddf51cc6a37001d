"""Hypothesis: every dispatch strategy hands out what it may, to whom it may, and no more.

The machine plays the runtime of one queue (consumers that come, pause, resume and go; messages
put with and without a group key and a priority; acks, unlocks with and without a delay, and
time passing on a manual clock) and checks each `dispatch`:
- each claim goes to a consumer with a free slot that may take the message: not its last
  holder during the hand-off while another could take it (XEP-0254 §2.4); under hash-by-key
  the key's consumer over those that take turns; under least-in-flight one holding the fewest
  among those that could take it; under sticky the sticky one while it has room;
- a claim goes only to a consumer below its max_in_flight, never to a paused one;
- after it, no message that is due waits while a consumer could take it: it waits only for
  its last holder's hand-off, for its key's consumer to have room, or (hash-by-key) behind an
  earlier message of its group (or behind 100 such, which no run here puts in one lane);
- under hash-by-key, no message of a group goes out while an earlier one of its group waits
  (its hand-off, after an unlock). (That one consumer holds a group's messages at a time is
  only promised while the consumers that take turns stay the same: then every claim of the
  group goes to the key's consumer, which each claim is checked for.)
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from boxmq.core import Claim, Dispatch, QueueEngine, QueuePolicy, Ready, Release
from boxmq.core.dispatch import eligible, route
from boxmq.model import ConsumerId, MessageId

T0 = 1_700_000_000.0
HANDOFF = 1.0
CONSUMERS = [ConsumerId(name) for name in ("a", "b", "c", "d")]
GROUPS = [None, None, "g1", "g2", "g3"]


def _order(message: Ready) -> tuple[int, float, str]:
    return (-message.priority, message.sequence, message.key)


class DispatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kind = Dispatch.ROUND_ROBIN
        self.engine = QueueEngine()
        self.now = T0
        self.slots: dict[ConsumerId, int] = {}  # consumers, in the order they were added
        self.paused: set[ConsumerId] = set()
        self.ready: dict[MessageId, tuple[Ready, float]] = {}  # and when it was offered
        self.held: dict[MessageId, tuple[Ready, ConsumerId]] = {}
        self.sticky: ConsumerId | None = None
        self.counter = 0

    @initialize(kind=st.sampled_from(Dispatch))
    def start(self, kind: Dispatch) -> None:
        self.kind = kind
        self.engine = QueueEngine(
            policy=QueuePolicy(max_deliveries=None, dispatch=kind, handoff=HANDOFF)
        )

    # -- helpers ----------------------------------------------------------------------------

    def load(self, consumer: ConsumerId) -> int:
        return sum(1 for _, holder in self.held.values() if holder == consumer)

    def free(self) -> list[ConsumerId]:
        return [
            consumer
            for consumer, slots in self.slots.items()
            if consumer not in self.paused and self.load(consumer) < slots
        ]

    def ring(self) -> list[ConsumerId]:
        return sorted(consumer for consumer in self.slots if consumer not in self.paused)

    def handoff_over(self, message_id: MessageId) -> bool:
        return self.now >= self.ready[message_id][1] + HANDOFF

    def due(self) -> list[Ready]:
        return sorted(
            (message for message, _ in self.ready.values() if message.not_before <= self.now),
            key=_order,
        )

    def release(self, effect: Release) -> None:
        """What the runtime does with a release: the file back in target/, offered at once."""
        message = effect.message
        del self.held[message.message_id]
        again = Ready(
            key=f"{message.message_id}.{effect.delivery_count}",
            message_id=message.message_id,
            priority=message.priority,
            sequence=message.sequence,
            not_before=effect.not_before,
            delivery_count=effect.delivery_count,
            last_holder=effect.passed_over,
            group_key=message.group_key,
        )
        self.ready[message.message_id] = (again, self.now)
        self.engine.offer(again, now=self.now)

    # -- rules ------------------------------------------------------------------------------

    @rule(
        group=st.sampled_from(GROUPS),
        priority=st.sampled_from([4, 4, 7]),
        then_dispatch=st.booleans(),
    )
    def put(self, group: str | None, priority: int, then_dispatch: bool) -> None:
        self.counter += 1
        message_id = MessageId(f"m{self.counter:03}")
        message = Ready(
            key=f"{message_id}.0",
            message_id=message_id,
            priority=priority,
            sequence=float(self.counter),
            group_key=group,
        )
        self.ready[message_id] = (message, self.now)
        self.engine.offer(message, now=self.now)
        if then_dispatch:  # as a consumer's receive does after a put of its process
            self.dispatch()

    @rule(consumer=st.sampled_from(CONSUMERS), slots=st.integers(1, 3))
    def add(self, consumer: ConsumerId, slots: int) -> None:
        self.engine.add_consumer(consumer, max_in_flight=slots, lock_timeout=1_000.0)
        self.slots[consumer] = slots

    @rule(consumer=st.sampled_from(CONSUMERS))
    def remove(self, consumer: ConsumerId) -> None:
        for effect in self.engine.remove_consumer(consumer, now=self.now):
            assert isinstance(effect, Release)
            self.release(effect)
        self.slots.pop(consumer, None)
        self.paused.discard(consumer)

    @rule(consumer=st.sampled_from(CONSUMERS))
    def pause(self, consumer: ConsumerId) -> None:
        self.engine.pause(consumer)
        if consumer in self.slots:
            self.paused.add(consumer)

    @rule(consumer=st.sampled_from(CONSUMERS))
    def resume(self, consumer: ConsumerId) -> None:
        self.engine.resume(consumer)
        self.paused.discard(consumer)

    @precondition(lambda self: self.held)
    @rule(data=st.data(), verb=st.sampled_from(["ack", "unlock", "unlock later"]))
    def settle(self, data: st.DataObject, verb: str) -> None:
        message_id = data.draw(st.sampled_from(sorted(self.held)))
        holder = self.held[message_id][1]
        if verb == "ack":
            self.engine.ack(message_id, holder, now=self.now)
            del self.held[message_id]
            return
        delay = 1.5 if verb == "unlock later" else 0.0
        effect = self.engine.unlock(message_id, holder, now=self.now, delay=delay)
        assert isinstance(effect, Release)
        self.release(effect)
        self.dispatch()  # the runtime hands out again after every answer

    @rule(seconds=st.sampled_from([0.25, 0.5, 1.0, 2.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def dispatch(self) -> None:
        free = self.free()
        ring = self.ring()
        effects = self.engine.dispatch(now=self.now)
        for effect in effects:
            assert isinstance(effect, Claim)
            message, holder = effect.message, effect.holder
            message_id = message.message_id
            assert message_id in self.ready
            assert message_id not in self.held
            assert message.not_before <= self.now
            assert holder in free, f"{holder} has no free slot, or is paused"
            over = self.handoff_over(message_id)
            if self.kind is Dispatch.HASH_BY_KEY:  # its key's consumer, whoever else has room
                assert holder == route(message, ring)
                assert message.last_holder != holder or over
            else:
                candidates = eligible(message, free, handoff_over=over)
                assert holder in candidates, f"{holder} was passed over for {message_id}"
            if self.kind is Dispatch.LEAST_IN_FLIGHT:
                assert self.load(holder) == min(self.load(c) for c in candidates)
            if self.kind is Dispatch.STICKY:
                if self.sticky in candidates:
                    assert holder == self.sticky
                elif self.sticky not in free:  # full, paused or gone: the next one
                    self.sticky = holder
                # else passed over as the message's last holder: still the sticky one
            del self.ready[message_id]
            self.held[message_id] = (message, holder)
            if self.load(holder) >= self.slots[holder]:
                free.remove(holder)
        if self.kind is Dispatch.HASH_BY_KEY:
            self.no_group_overtaken([e for e in effects if isinstance(e, Claim)])
        self.nothing_waits_for_a_consumer_with_room()

    def no_group_overtaken(self, claims: list[Claim]) -> None:
        """A message of a group is not handed out while an earlier one of its group waits."""
        waiting = self.due()
        for claim in claims:
            group = claim.message.group_key
            if group is None:
                continue
            for message in waiting:
                if message.group_key == group:
                    assert _order(claim.message) < _order(message), (
                        f"{claim.message.message_id} went out before {message.message_id}"
                    )

    def nothing_waits_for_a_consumer_with_room(self) -> None:
        free = self.free()
        ring = self.ring()
        earlier_groups: set[str] = set()
        for message in self.due():
            message_id = message.message_id
            over = self.handoff_over(message_id)
            if self.kind is Dispatch.HASH_BY_KEY:
                target = route(message, ring)
                waits = (
                    target not in free
                    or (target == message.last_holder and not over)
                    or message.group_key in earlier_groups
                )
                assert waits, f"{message_id} waits while {target} has room"
                if message.group_key is not None:
                    earlier_groups.add(message.group_key)
            else:
                candidates = eligible(message, free, handoff_over=over)
                assert not candidates, f"{message_id} waits while {candidates} have room"

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def the_engine_holds_what_the_model_holds(self) -> None:
        # (new limits may leave a consumer above them: no claim for it then, which `dispatch`
        # checks; what it holds it keeps)
        for consumer in self.slots:
            assert len(self.engine.leases_of(consumer)) == self.load(consumer)
        assert self.engine.statistics().in_flight == len(self.held)


DispatchMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_dispatch_strategies = DispatchMachine.TestCase
