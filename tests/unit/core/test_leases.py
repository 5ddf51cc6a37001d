"""LeaseTable: claims, extensions and deadlines, with `now` passed in."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.leases import Lease, LeaseTable
from boxmq.core.ready import Ready
from boxmq.errors import InvalidArgument
from boxmq.model import ConsumerId, MessageId

A, B = ConsumerId("a"), ConsumerId("b")


def ready(name: str) -> Ready:
    return Ready(key=f"4.{name}.B", message_id=MessageId(name))


def test_lease_expires_exactly_once_at_its_deadline() -> None:
    table = LeaseTable()
    table.claim(ready("m1"), A, deadline=130.0)
    assert table.next_deadline() == 130.0
    assert table.due(now=129.9) == []
    [lease] = table.due(now=130.0)
    assert lease == Lease(ready("m1"), A, 130.0, delivery=1)
    assert table.due(now=1e9) == []
    assert table.next_deadline() is None
    assert len(table) == 0
    assert table.count(A) == 0


def test_extend_moves_the_deadline_both_ways() -> None:
    table = LeaseTable()
    table.claim(ready("m1"), A, deadline=100.0)
    table.extend(MessageId("m1"), deadline=150.0)
    assert table.next_deadline() == 150.0
    assert table.due(now=140.0) == []
    table.extend(MessageId("m1"), deadline=120.0)
    assert table.next_deadline() == 120.0
    assert [lease.deadline for lease in table.due(now=120.0)] == [120.0]
    assert table.next_deadline() is None


def test_leases_are_indexed_by_holder_in_claim_order() -> None:
    table = LeaseTable()
    for name, holder in [("m1", A), ("m2", B), ("m3", A)]:
        table.claim(ready(name), holder, deadline=100.0)
    assert [lease.message.message_id for lease in table.of(A)] == ["m1", "m3"]
    assert table.count(A) == 2
    assert table.count(B) == 1
    assert table.drop(MessageId("m1")) is not None
    assert table.drop(MessageId("m1")) is None
    assert [lease.message.message_id for lease in table.of(A)] == ["m3"]
    assert MessageId("m1") not in table
    assert table.get(MessageId("m3")) == Lease(ready("m3"), A, 100.0, delivery=3)


def test_due_returns_earliest_first_and_skips_dropped() -> None:
    table = LeaseTable()
    table.claim(ready("late"), A, deadline=30.0)
    table.claim(ready("early"), B, deadline=10.0)
    table.claim(ready("gone"), B, deadline=5.0)
    table.drop(MessageId("gone"))
    assert table.next_deadline() == 10.0
    assert [lease.message.message_id for lease in table.due(now=100.0)] == ["early", "late"]


def test_each_claim_numbers_its_lease_and_an_extend_keeps_the_number() -> None:
    """Lease.delivery tells a holder's deliveries of one message apart: never reused."""
    table = LeaseTable()
    first = table.claim(ready("m1"), A, deadline=10.0)
    table.drop(MessageId("m1"))
    again = table.claim(ready("m1"), A, deadline=20.0)
    other = table.claim(ready("m2"), B, deadline=20.0)
    assert (first.delivery, again.delivery, other.delivery) == (1, 2, 3)
    assert table.extend(MessageId("m1"), deadline=50.0).delivery == 2
    assert [(lease.holder, lease.delivery) for lease in table.due(now=50.0)] == [(B, 3), (A, 2)]


def test_a_message_cannot_be_leased_twice() -> None:
    table = LeaseTable()
    table.claim(ready("m1"), A, deadline=10.0)
    with pytest.raises(InvalidArgument):
        table.claim(ready("m1"), B, deadline=10.0)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["claim", "extend", "drop", "due", "next_deadline"]),
            st.integers(0, 4),
            st.integers(0, 20),
        ),
        max_size=40,
    )
)
def test_next_due_is_the_top_of_the_deadline_heap(
    steps: list[tuple[str, int, int]],
) -> None:
    """What the engine reads instead of calling due_by: kept at every push and pop."""
    table = LeaseTable()
    for step, key, time in steps:
        message_id = MessageId(f"m{key}")
        if step == "claim" and message_id not in table:
            table.claim(ready(f"m{key}"), A, deadline=float(time))
        elif step == "extend" and message_id in table:
            table.extend(message_id, deadline=float(time))
        elif step == "drop":
            table.drop(message_id)
        elif step == "due":
            table.due(now=float(time))
        elif step == "next_deadline":
            table.next_deadline()
        heap = table._deadlines
        assert table.next_due == (heap[0][0] if heap else math.inf)
        assert table.due_by(float(time)) == (bool(heap) and heap[0][0] <= time)


def test_the_deadline_heap_stays_near_the_number_of_leases() -> None:
    """Acks come long before deadlines: their heap items must not pile up without end."""
    table = LeaseTable()
    table.claim(ready("kept"), B, deadline=5.0)  # held all along: every rebuild keeps it
    for index in range(20_000):
        table.claim(ready(f"m{index}"), A, deadline=1e9 + index)
        table.drop(MessageId(f"m{index}"))
    assert len(table._deadlines) <= 2 * len(table) + 1024
    table.claim(ready("extended"), A, deadline=6.0)
    for _ in range(5_000):
        table.extend(MessageId("extended"), deadline=6.0)
    assert len(table._deadlines) <= 2 * len(table) + 1024
    assert [lease.message.message_id for lease in table.due(now=5.0)] == ["kept"]
    assert [lease.message.message_id for lease in table.due(now=6.0)] == ["extended"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["claim", "extend", "drop", "due"]),
            st.integers(0, 6),
            st.integers(0, 30),
        ),
        max_size=200,
    )
)
def test_due_gives_exactly_the_leases_past_their_deadline_through_rebuilds(
    steps: list[tuple[str, int, int]],
) -> None:
    """Against a plain dict of deadlines, with the rebuild's slack small enough that the
    heap is rebuilt often."""
    table = LeaseTable(stale_slack=4)
    model = dict[MessageId, float]()
    for step, key, time in steps:
        message_id = MessageId(f"m{key}")
        if step == "claim" and message_id not in model:
            table.claim(ready(f"m{key}"), A, deadline=float(time))
            model[message_id] = float(time)
        elif step == "extend" and message_id in model:
            table.extend(message_id, deadline=float(time))
            model[message_id] = float(time)
        elif step == "drop":
            table.drop(message_id)
            model.pop(message_id, None)
        elif step == "due":
            expired = table.due(now=float(time))
            expected = sorted((d, m) for m, d in model.items() if d <= time)
            assert [(lease.deadline, lease.message.message_id) for lease in expired] == expected
            for _, gone in expected:
                del model[gone]
        assert len(table) == len(model)
        live = [d for m, d in model.items()]
        assert table.next_deadline() == (min(live) if live else None)
