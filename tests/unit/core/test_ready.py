"""ReadySet: dispatch order, delays, expirations, handoff ends and lanes."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.ready import Lane, Ready, ReadySet
from boxmq.model import ConsumerId, MessageId

T0 = 1_700_000_000.0


def ready(
    name: str,
    *,
    priority: int = 4,
    sequence: float = 0.0,
    expiration: float = 0.0,
    not_before: float = 0.0,
    last_holder: str | None = None,
) -> Ready:
    return Ready(
        key=f"{priority}.{name}.B",
        message_id=MessageId(name),
        priority=priority,
        sequence=sequence,
        expiration=expiration,
        not_before=not_before,
        last_holder=ConsumerId(last_holder) if last_holder is not None else None,
    )


def take_all(ready_set: ReadySet, lane: Lane = None) -> list[str]:
    taken: list[str] = []

    def visit(message: Ready, offered_at: float) -> bool:
        taken.append(message.message_id)
        return True

    ready_set.drain(lane, visit, until=lambda: False)
    return taken


def test_priority_then_sequence_then_key() -> None:
    ready_set = ReadySet(handoff=1.0)
    for message in [
        ready("c", priority=4, sequence=3.0),
        ready("b", priority=9, sequence=5.0),
        ready("e", priority=4, sequence=1.0),
        ready("d", priority=4, sequence=1.0),
        ready("a", priority=0, sequence=0.0),
        ready("f", priority=9, sequence=2.0),
    ]:
        ready_set.put(message, now=T0)
    assert take_all(ready_set) == ["f", "b", "d", "e", "c", "a"]
    assert len(ready_set) == 0


def test_skipped_messages_keep_their_place() -> None:
    ready_set = ReadySet(handoff=1.0)
    for i in range(4):
        ready_set.put(ready(f"m{i}", sequence=float(i)), now=T0)
    ready_set.drain(None, lambda message, _: message.message_id == "m2", until=lambda: False)
    assert take_all(ready_set) == ["m0", "m1", "m3"]


def test_replacing_keeps_the_first_offer_time() -> None:
    ready_set = ReadySet(handoff=1.0)
    ready_set.put(ready("m1", priority=1), now=T0)
    ready_set.put(ready("m1", priority=7), now=T0 + 5)
    seen: list[tuple[int, float]] = []

    def visit(message: Ready, offered_at: float) -> bool:
        seen.append((message.priority, offered_at))
        return True

    ready_set.drain(None, visit, until=lambda: False)
    assert seen == [(7, T0)]


def test_delayed_messages_wait_in_their_own_heap() -> None:
    ready_set = ReadySet(handoff=1.0)
    ready_set.put(ready("m1", not_before=T0 + 10), now=T0)
    assert ready_set.delayed == 1
    assert take_all(ready_set) == []
    assert ready_set.next_deadline() == T0 + 10
    ready_set.tick(now=T0 + 9.9)
    assert ready_set.delayed == 1
    ready_set.tick(now=T0 + 10)
    assert ready_set.delayed == 0
    assert ready_set.next_deadline() is None
    assert take_all(ready_set) == ["m1"]


def test_expiration_pops_delayed_and_waiting_alike() -> None:
    ready_set = ReadySet(handoff=1.0)
    ready_set.put(ready("m1", expiration=T0 + 5), now=T0)
    ready_set.put(ready("m2", expiration=T0 + 6, not_before=T0 + 100), now=T0)
    ready_set.put(ready("m3", expiration=T0 + 1), now=T0)
    ready_set.remove(MessageId("m3"))
    assert ready_set.next_deadline() == T0 + 5
    assert ready_set.pop_expired(now=T0 + 4.9) == []
    assert [m.message_id for m in ready_set.pop_expired(now=T0 + 6)] == ["m1", "m2"]
    assert len(ready_set) == 0
    assert ready_set.delayed == 0


def test_handoff_end_is_a_deadline_until_it_passes() -> None:
    ready_set = ReadySet(handoff=2.0)
    ready_set.put(ready("m1", last_holder="a"), now=T0)
    assert ready_set.next_deadline() == T0 + 2
    ready_set.tick(now=T0 + 2)
    assert ready_set.next_deadline() is None
    # A delay longer than the handoff hides the handoff end.
    ready_set.put(ready("m2", last_holder="a", not_before=T0 + 10), now=T0 + 2)
    assert ready_set.next_deadline() == T0 + 10


def test_relane_partitions_waiting_messages() -> None:
    ready_set = ReadySet(handoff=1.0)
    for i in range(6):
        ready_set.put(ready(f"m{i}", sequence=float(i)), now=T0)
    ready_set.put(ready("later", not_before=T0 + 1), now=T0)

    def lane_of(message: Ready) -> Lane:
        if message.message_id == "later":
            return ConsumerId("x")
        return ConsumerId("odd" if int(message.message_id[1:]) % 2 else "even")

    ready_set.relane(lane_of)
    assert take_all(ready_set, None) == []
    assert take_all(ready_set, ConsumerId("odd")) == ["m1", "m3", "m5"]
    ready_set.tick(now=T0 + 1)
    assert take_all(ready_set, ConsumerId("x")) == ["later"]
    assert take_all(ready_set, ConsumerId("even")) == ["m0", "m2", "m4"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "remove", "tick", "pop_expired", "next_deadline", "take"]),
            st.integers(0, 4),
            st.integers(0, 20),
            st.sampled_from([0, 5, 12]),
            st.sampled_from([0, 3, 15]),
            st.sampled_from([None, "a"]),
        ),
        max_size=40,
    )
)
def test_next_due_is_the_earliest_top_of_the_timed_heaps(
    steps: list[tuple[str, int, int, int, int, str | None]],
) -> None:
    """What the engine reads instead of calling due_by: kept at every push and pop."""
    ready_set = ReadySet(handoff=2.0)
    for step, key, time, expires, delay, holder in steps:
        now = float(time)
        if step == "put":
            message = ready(
                f"m{key}",
                expiration=now + expires if expires else 0.0,
                not_before=now + delay if delay else 0.0,
                last_holder=holder,
            )
            ready_set.put(message, now=now)
        elif step == "remove":
            ready_set.remove(MessageId(f"m{key}"))
        elif step == "tick":
            ready_set.tick(now=now)
        elif step == "pop_expired":
            ready_set.pop_expired(now=now)
        elif step == "next_deadline":
            ready_set.next_deadline()
        else:
            ready_set.take_for(None, ConsumerId("b"), key, now=now)
        heaps = (ready_set._not_before, ready_set._expirations, ready_set._handoff_ends)
        tops = [heap[0][0] for heap in heaps if heap]
        assert ready_set.next_due == min(tops, default=math.inf)
        assert ready_set.due_by(now) == any(top <= now for top in tops)


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 5), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    st.integers(0, 29),
    st.booleans(),
)
def test_a_horizon_holds_back_what_ranks_after_it_and_the_order_is_kept(
    messages: list[tuple[int, int, bool]], at: int, by_drain: bool
) -> None:
    """The live queue keeps a deep backlog's plain names out of the set, their best at the
    horizon; some others (say delayed once) rank after it but are in the set. What comes out
    before the horizon, then the rest once those kept out are put, is the order of them all."""
    every = [
        (ready(f"m{i:02}", priority=priority, sequence=float(sequence)), kept)
        for i, (priority, sequence, kept) in enumerate(messages)
    ]

    def rank(message: Ready) -> tuple[int, float, str]:
        return (-message.priority, message.sequence, message.key)

    in_order = [message.message_id for message, _ in sorted(every, key=lambda m: rank(m[0]))]
    horizon_at = sorted(rank(message) for message, _ in every)[at % len(every)]
    outside = [message for message, kept in every if kept and rank(message) >= horizon_at]
    ready_set = ReadySet(handoff=1.0)
    for message, _ in every:
        if message not in outside:
            ready_set.put(message, now=T0)
    ready_set.horizon = horizon_at

    def take() -> list[str]:
        if by_drain:
            return take_all(ready_set)
        return [m.message_id for m in ready_set.take_for(None, ConsumerId("c"), 99, now=T0)]

    before = take()
    assert all(
        rank(ready_set_message) < horizon_at
        for ready_set_message, _ in every
        if ready_set_message.message_id in before
    )
    assert ready_set.held_at_horizon  # room was left: it wants what is kept out
    for message in outside:
        ready_set.put(message, now=T0)
    ready_set.horizon = None
    assert before + take() == in_order
