"""The engine's shortcuts for the live queue's hot path, held to the general calls they stand
for: `due_by` to `lapsing` and `expire`, `acked` to `ack`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core import Claim, Finish, QueueEngine, QueuePolicy, Ready
from boxmq.errors import LockError
from boxmq.model import ConsumerId, MessageId

T0 = 1_700_000_000.0
A, B = ConsumerId("a"), ConsumerId("b")

# (what, message number, seconds after T0, a second number: expiry, delay or consumer)
_Step = tuple[str, int, int, int]
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["offer", "dispatch", "ack", "unlock", "expire"]),
        st.integers(0, 5),
        st.integers(0, 60),
        st.integers(0, 40),
    ),
    max_size=40,
)


def _engine() -> QueueEngine:
    engine = QueueEngine(policy=QueuePolicy(max_deliveries=None))
    for consumer, timeout in ((A, 7.0), (B, 13.0)):
        engine.add_consumer(consumer, max_in_flight=2, lock_timeout=timeout)
    return engine


def _message(number: int, now: float, expires: int) -> Ready:
    return Ready(
        key=f"4.m{number}.B",
        message_id=MessageId(f"m{number}"),
        sequence=float(number),
        expiration=now + expires if expires % 3 else 0.0,
    )


def _step(engine: QueueEngine, step: _Step, settle: str) -> object:
    """Apply one step; an ack through `settle` ("ack" or "acked"). What it gave, or the error
    class it raised."""
    what, number, seconds, other = step
    now = T0 + seconds
    message_id, consumer = MessageId(f"m{number}"), (A, B)[other % 2]
    held = [lease for c in (A, B) for lease in engine.leases_of(c)]
    if held and other % 4:  # mostly a lease and its holder: a settle that goes through
        lease = held[number % len(held)]
        message_id, consumer = lease.message.message_id, lease.holder
    try:
        if what == "offer":
            engine.offer(_message(number, now, other), now=now)
            return None
        if what == "dispatch":
            return engine.dispatch(now=now)
        if what == "expire":
            return engine.expire(now=now)
        if what == "unlock":
            return engine.unlock(message_id, consumer, now=now, delay=other % 4)
        if settle == "ack":
            return engine.ack(message_id, consumer, now=now)
        return Finish(engine.acked(message_id, consumer), consumer)
    except LockError as error:
        return type(error)


@given(_STEPS)
def test_acked_does_what_ack_does(steps: list[_Step]) -> None:
    """Same answers (the Finish made from what `acked` returns), same errors, same state."""
    by_ack, by_acked = _engine(), _engine()
    for step in steps:
        assert _step(by_ack, step, "ack") == _step(by_acked, step, "acked")
        assert by_ack.statistics() == by_acked.statistics()
        for consumer in (A, B):
            assert by_ack.leases_of(consumer) == by_acked.leases_of(consumer)


@given(_STEPS, st.integers(0, 80))
def test_due_by_is_false_only_when_lapsing_and_expire_have_nothing(
    steps: list[_Step], later: int
) -> None:
    engine = _engine()
    for step in steps:
        _step(engine, step, "ack")
        now = T0 + step[2] + later / 8
        if not engine.due_by(now):
            assert not engine.lapsing(now=now)
            assert engine.expire(now=now) == []


def test_acked_refuses_what_ack_refuses() -> None:
    engine = _engine()
    engine.offer(_message(1, T0, 0), now=T0)
    [claim] = engine.dispatch(now=T0)
    assert isinstance(claim, Claim)
    other = B if claim.holder == A else A
    with pytest.raises(LockError):
        engine.acked(MessageId("m1"), other)
    assert engine.acked(MessageId("m1"), claim.holder) == claim.message
    with pytest.raises(LockError):
        engine.acked(MessageId("m1"), claim.holder)
