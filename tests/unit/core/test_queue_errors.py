"""Every error flow of XEP-0254 §2.3 (delete = ack) and §2.4 (unlock), plus reject and extend.

item-not-found: no such message; forbidden: the requester never received it; conflict: another
consumer holds it; unexpected-request: the requester held it but its lock is gone.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace

import pytest

from boxmq.clock import ManualClock
from boxmq.core import (
    Claim,
    DeadLetter,
    DeadReason,
    Effect,
    Extend,
    Finish,
    QueueEngine,
    QueuePolicy,
    Ready,
    Release,
    ReleaseReason,
)
from boxmq.core.ownership import PastHolders
from boxmq.errors import (
    Conflict,
    Forbidden,
    InvalidArgument,
    ItemNotFound,
    LockError,
    UnexpectedRequest,
)
from boxmq.model import ConsumerId, MessageId

T0 = 1_700_000_000.0
A, B = ConsumerId("a"), ConsumerId("b")
M1, M2 = MessageId("m1"), MessageId("m2")

Operation = Callable[[QueueEngine, MessageId, ConsumerId, float], Effect]


def ack(engine: QueueEngine, message_id: MessageId, consumer: ConsumerId, now: float) -> Effect:
    return engine.ack(message_id, consumer, now=now)


def unlock(engine: QueueEngine, message_id: MessageId, consumer: ConsumerId, now: float) -> Effect:
    return engine.unlock(message_id, consumer, now=now)


def reject(engine: QueueEngine, message_id: MessageId, consumer: ConsumerId, now: float) -> Effect:
    return engine.reject(message_id, consumer, now=now)


def extend(engine: QueueEngine, message_id: MessageId, consumer: ConsumerId, now: float) -> Effect:
    return engine.extend(message_id, consumer, now=now)


OPERATIONS = pytest.mark.parametrize("operation", [ack, unlock, reject, extend])


def ready(name: str) -> Ready:
    return Ready(key=f"4.{name}.B", message_id=MessageId(name))


def reoffered(release: Release) -> Ready:
    """What the runtime offers after applying a Release: new key, new count, last holder."""
    return replace(
        release.message,
        key=f"{release.message.key}+{release.delivery_count}",
        delivery_count=release.delivery_count,
        not_before=release.not_before,
        last_holder=release.holder,
    )


@pytest.fixture
def engine() -> QueueEngine:
    """a holds m1 (its only slot); m2 waits; b is a consumer that holds nothing."""
    engine = QueueEngine(policy=QueuePolicy(handoff=0.0))
    engine.add_consumer(A, max_in_flight=1, lock_timeout=30.0)
    engine.offer(ready("m1"), now=T0)
    engine.offer(ready("m2"), now=T0)
    assert engine.dispatch(now=T0) == [Claim(ready("m1"), A, T0 + 30, 1)]
    engine.add_consumer(B, max_in_flight=1, lock_timeout=30.0)
    return engine


def timed_out(engine: QueueEngine) -> Release:
    [release] = engine.expire(now=T0 + 30)
    assert isinstance(release, Release)
    assert release.reason is ReleaseReason.TIMED_OUT
    return release


def expect(error: type[LockError], call: Callable[[], object]) -> None:
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error


@OPERATIONS
def test_item_not_found_for_an_unknown_message(engine: QueueEngine, operation: Operation) -> None:
    expect(ItemNotFound, lambda: operation(engine, MessageId("nope"), A, T0))


@OPERATIONS
def test_item_not_found_after_the_message_is_done(
    engine: QueueEngine, operation: Operation
) -> None:
    engine.ack(M1, A, now=T0)
    expect(ItemNotFound, lambda: operation(engine, M1, A, T0))
    expect(ItemNotFound, lambda: operation(engine, M1, B, T0))


@OPERATIONS
def test_forbidden_when_the_requester_never_received_it(
    engine: QueueEngine, operation: Operation
) -> None:
    expect(Forbidden, lambda: operation(engine, M2, A, T0))  # ready, never received by a
    expect(Forbidden, lambda: operation(engine, M2, ConsumerId("stranger"), T0))


@OPERATIONS
def test_forbidden_for_a_released_message_awaiting_its_next_offer(
    engine: QueueEngine, operation: Operation
) -> None:
    timed_out(engine)
    expect(Forbidden, lambda: operation(engine, M1, B, T0 + 30))


@OPERATIONS
def test_conflict_when_another_consumer_holds_it(engine: QueueEngine, operation: Operation) -> None:
    expect(Conflict, lambda: operation(engine, M1, B, T0))
    lease = engine.lease(M1)
    assert lease is not None
    assert lease.holder == A  # nothing changed


@OPERATIONS
def test_unexpected_request_after_a_lock_timeout(engine: QueueEngine, operation: Operation) -> None:
    release = timed_out(engine)
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0 + 30))  # awaiting re-offer
    engine.offer(reoffered(release), now=T0 + 31)
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0 + 31))  # ready again
    claims = engine.dispatch(now=T0 + 31)
    assert {(c.message.message_id, c.holder) for c in claims if isinstance(c, Claim)} == {
        (M1, B),
        (M2, A),
    }
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0 + 31))  # b holds it now


@OPERATIONS
def test_unexpected_request_after_an_unlock(engine: QueueEngine, operation: Operation) -> None:
    engine.unlock(M1, A, now=T0)
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0))


@OPERATIONS
def test_unexpected_request_after_the_owner_left(engine: QueueEngine, operation: Operation) -> None:
    [release] = engine.remove_consumer(A, now=T0 + 1)
    assert isinstance(release, Release)
    assert release.reason is ReleaseReason.OWNER_GONE
    engine.add_consumer(A, max_in_flight=1, lock_timeout=30.0)  # reconnects
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0 + 1))


@OPERATIONS
def test_unexpected_request_when_the_file_names_the_requester(operation: Operation) -> None:
    engine = QueueEngine()
    engine.offer(replace(ready("m1"), last_holder=A, delivery_count=1), now=T0)
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0))


@OPERATIONS
def test_unexpected_request_after_the_claim_was_lost(
    engine: QueueEngine, operation: Operation
) -> None:
    engine.claim_lost(M1)
    expect(ItemNotFound, lambda: operation(engine, M1, A, T0))  # it was never ours


@OPERATIONS
def test_unexpected_request_while_another_process_has_it_and_after_it_came_back(
    engine: QueueEngine, operation: Operation
) -> None:
    """a unlocked m1, and another process took it from target/ (withdraw) and gave it back
    (its file names that process's consumer as the last holder): a, asking, is told its lock
    is gone. It was told ItemNotFound while m1 was away, and then Forbidden ("did not receive
    this message"): the engine forgot a's part when the message left."""
    release = engine.unlock(M1, A, now=T0)
    assert isinstance(release, Release)
    engine.offer(reoffered(release), now=T0)
    engine.withdraw(M1)
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0))
    expect(Forbidden, lambda: operation(engine, M1, B, T0))  # it is somewhere, never b's
    engine.offer(replace(reoffered(release), last_holder=ConsumerId("cli")), now=T0 + 1)
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0 + 1))
    expect(Forbidden, lambda: operation(engine, M1, B, T0 + 1))


@OPERATIONS
def test_unexpected_request_after_another_process_won_the_claim_of_a_message_it_held(
    engine: QueueEngine, operation: Operation
) -> None:
    """a unlocked m1; the next claim (b's) lost the rename to another process: a is still
    told its lock is gone, b that the message was never its own."""
    release = engine.unlock(M1, A, now=T0)
    assert isinstance(release, Release)
    engine.offer(reoffered(release), now=T0)
    engine.dispatch(now=T0 + 2)
    lease = engine.lease(M1)
    assert lease is not None
    assert lease.holder == B
    engine.claim_lost(M1)
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0 + 2))


# -- a delivery whose holder nobody recorded (it left: a restart, a disconnect) ---------------


def came_back_without_a_holder(release: Release) -> Ready:
    """What the runtime offers after a Release whose holder left (OWNER_GONE): its name
    records no holder (effects.Release.passed_over), as after a restart of the process."""
    assert release.passed_over is None
    return replace(reoffered(release), last_holder=None)


@OPERATIONS
def test_unexpected_request_for_a_delivery_whose_holder_nobody_recorded(
    operation: Operation,
) -> None:
    """An engine offered a message delivered before whose file names no holder (its holder
    left, before a restart or in another process), with no holder of its own on record: the
    requester may be the one that held it, so it is told its lock is gone, as the files'
    path tells it (client/disk_locks.py), not Forbidden ("did not receive this message");
    and once another consumer holds it, not Conflict either. It was Forbidden, and Conflict."""
    engine = QueueEngine(policy=QueuePolicy(handoff=0.0))
    engine.offer(replace(ready("m1"), delivery_count=1), now=T0)
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0))
    engine.add_consumer(B, max_in_flight=1, lock_timeout=30.0)
    [claim] = engine.dispatch(now=T0)
    assert isinstance(claim, Claim)
    assert claim.holder == B
    expect(UnexpectedRequest, lambda: operation(engine, M1, A, T0))


@OPERATIONS
def test_forbidden_and_conflict_stay_where_the_engine_recorded_who_held_it(
    engine: QueueEngine, operation: Operation
) -> None:
    """a held m1 here and left (its name then records no holder): the engine kept a as a
    past holder, so b, which never received it, is still told so, and once b holds it, a
    stranger is told another holds it."""
    [release] = engine.remove_consumer(A, now=T0 + 1)
    assert isinstance(release, Release)
    engine.offer(came_back_without_a_holder(release), now=T0 + 1)
    expect(Forbidden, lambda: operation(engine, M1, B, T0 + 1))
    claims = engine.dispatch(now=T0 + 1)
    assert [(c.message.message_id, c.holder) for c in claims if isinstance(c, Claim)] == [(M1, B)]
    expect(Conflict, lambda: operation(engine, M1, ConsumerId("stranger"), T0 + 1))


def test_unexpected_request_when_the_past_holders_of_a_message_away_were_forgotten() -> None:
    """The engine's own way to the state above: a unlocked m1, another process took it
    (withdraw: a's part parked), so many others were taken meanwhile that m1's parked record
    went (PastHolders keeps at most `limit`), and m1 came back from a holder there that left.
    a, answering through its Message (the delivery it had), is told its lock is gone; it was
    told Forbidden, "a did not receive this message"."""
    engine = QueueEngine(policy=QueuePolicy(handoff=0.0))
    engine.add_consumer(A, max_in_flight=1, lock_timeout=30.0)
    engine.offer(ready("m1"), now=T0)
    [claim] = engine.dispatch(now=T0)
    assert isinstance(claim, Claim)
    release = engine.unlock(M1, A, now=T0)
    assert isinstance(release, Release)
    engine.offer(reoffered(release), now=T0)
    engine.withdraw(M1)
    elsewhere = ConsumerId("other-process")
    parked_limit = inspect.signature(PastHolders).parameters["limit"].default
    for n in range(parked_limit):
        other = replace(ready(f"o{n}"), delivery_count=1, last_holder=elsewhere)
        engine.offer(other, now=T0)
        engine.withdraw(other.message_id)
    back = replace(reoffered(release), key="4.m1.B+2", delivery_count=2, last_holder=None)
    engine.offer(back, now=T0 + 1)
    expect(UnexpectedRequest, lambda: engine.ack(M1, A, now=T0 + 1, delivery=claim.delivery))
    expect(UnexpectedRequest, lambda: engine.unlock(M1, A, now=T0 + 1, delivery=claim.delivery))


# -- a handle of an earlier delivery to the same holder ---------------------------------------

Settle = Callable[[QueueEngine, int, float], Effect]


def _ack(engine: QueueEngine, delivery: int, now: float) -> Effect:
    return engine.ack(M1, A, now=now, delivery=delivery)


def _unlock(engine: QueueEngine, delivery: int, now: float) -> Effect:
    return engine.unlock(M1, A, now=now, delivery=delivery)


def _reject(engine: QueueEngine, delivery: int, now: float) -> Effect:
    return engine.reject(M1, A, now=now, delivery=delivery)


def _extend(engine: QueueEngine, delivery: int, now: float) -> Effect:
    return engine.extend(M1, A, now=now, seconds=100.0, delivery=delivery)


def _lock_timed_out(engine: QueueEngine, clock: ManualClock) -> None:
    clock.advance(30.0)
    [release] = engine.expire(now=clock.now())
    assert isinstance(release, Release)
    engine.offer(reoffered(release), now=clock.now())


def _lock_ended_by_id(engine: QueueEngine, clock: ManualClock) -> None:
    """Another process unlocked it by id (`boxmq unlock`): the runtime saw the file leave
    processing/ and then offers its new name in target/."""
    clock.advance(1.0)
    lease = engine.lock_lost(M1)
    assert lease is not None
    engine.offer(
        replace(lease.message, key="4.m1.B+1", delivery_count=1, last_holder=A), now=clock.now()
    )


@pytest.mark.parametrize("settle", [_ack, _unlock, _reject, _extend])
@pytest.mark.parametrize("ended", [_lock_timed_out, _lock_ended_by_id])
def test_a_stale_handle_cannot_settle_the_next_delivery_to_the_same_holder(
    settle: Settle, ended: Callable[[QueueEngine, ManualClock], None]
) -> None:
    """a's lock on m1 ends, m1 comes back to a: the handle of the first delivery is told its
    lock is gone (XEP-0254: unexpected-request) and the second delivery stays as it was, for
    its own handle to settle. Before, the stale handle acked (or unlocked, rejected,
    extended) the second delivery, whose ack then failed with item-not-found."""
    clock = ManualClock(T0)
    engine = QueueEngine(policy=QueuePolicy(handoff=0.0))
    engine.add_consumer(A, max_in_flight=1, lock_timeout=30.0)
    engine.offer(ready("m1"), now=clock.now())
    engine.dispatch(now=clock.now())
    first = engine.lease(M1)
    assert first is not None
    ended(engine, clock)
    [claim] = engine.dispatch(now=clock.now())
    assert isinstance(claim, Claim)
    assert claim.holder == A
    second = engine.lease(M1)
    assert second is not None
    assert second.delivery != first.delivery
    expect(UnexpectedRequest, lambda: settle(engine, first.delivery, clock.now()))
    assert engine.lease(M1) == second  # untouched: same lock, same deadline
    assert engine.leases_of(A) == [second]
    assert engine.ack(M1, A, now=clock.now(), delivery=second.delivery) == Finish(second.message, A)
    expect(ItemNotFound, lambda: settle(engine, first.delivery, clock.now()))


def test_a_request_without_a_delivery_settles_the_lease_the_holder_has(
    engine: QueueEngine,
) -> None:
    """None: whichever lock the holder has (a request by id); the right number does too."""
    lease = engine.lease(M1)
    assert lease is not None
    engine.extend(M1, A, now=T0, delivery=lease.delivery)
    assert engine.ack(M1, A, now=T0) == Finish(ready("m1"), A)


def test_ack_finishes(engine: QueueEngine) -> None:
    assert engine.ack(M1, A, now=T0 + 1) == Finish(ready("m1"), A)
    assert engine.lease(M1) is None
    assert engine.leases_of(A) == []


def test_unlock_releases_with_one_more_delivery(engine: QueueEngine) -> None:
    assert engine.unlock(M1, A, now=T0 + 1) == Release(
        ready("m1"), A, ReleaseReason.UNLOCKED, not_before=0.0, delivery_count=1
    )
    assert engine.lease(M1) is None


def test_unlock_with_a_delay(engine: QueueEngine) -> None:
    release = engine.unlock(M1, A, now=T0 + 1, delay=9.0)
    assert isinstance(release, Release)
    assert release.not_before == T0 + 10


def test_unlock_refuses_a_negative_delay(engine: QueueEngine) -> None:
    with pytest.raises(InvalidArgument):
        engine.unlock(M1, A, now=T0, delay=-1.0)
    assert engine.lease(M1) is not None


def test_reject_goes_to_the_dead_letters(engine: QueueEngine) -> None:
    assert engine.reject(M1, A, now=T0) == DeadLetter(ready("m1"), A, DeadReason.REJECTED)
    expect(ItemNotFound, lambda: engine.ack(M1, A, now=T0))


def test_extend_pushes_the_deadline(engine: QueueEngine) -> None:
    assert engine.extend(M1, A, now=T0 + 10) == Extend(ready("m1"), A, T0 + 40)
    assert engine.extend(M1, A, now=T0 + 10, seconds=5.0) == Extend(ready("m1"), A, T0 + 15)
    lease = engine.lease(M1)
    assert lease is not None
    assert lease.deadline == T0 + 15


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan"), float("inf")])
def test_extend_refuses_bad_seconds(engine: QueueEngine, seconds: float) -> None:
    with pytest.raises(InvalidArgument):
        engine.extend(M1, A, now=T0, seconds=seconds)


@pytest.mark.parametrize("limit", [2.5, True, "5", 0, -1])
def test_max_deliveries_is_a_positive_int_or_none(limit: object) -> None:
    """2.5 dead-lettered at the third delivery and True at the first: neither is a count."""
    with pytest.raises(InvalidArgument, match="max_deliveries"):
        QueuePolicy(max_deliveries=limit)  # type: ignore[arg-type]
