"""QueueEngine life cycle: timeouts, handoff, delays, slots, owner gone, dead letters, expiry."""

from __future__ import annotations

from dataclasses import replace

import pytest

from boxmq.clock import ManualClock
from boxmq.core import (
    Claim,
    DeadLetter,
    DeadReason,
    Dispatch,
    Effect,
    Expire,
    Finish,
    Lease,
    QueueEngine,
    QueuePolicy,
    QueueStats,
    Ready,
    Release,
    ReleaseReason,
)
from boxmq.core.ready import Lane
from boxmq.errors import InvalidArgument, ItemNotFound, UnexpectedRequest
from boxmq.model import ConsumerId, MessageId

T0 = 1_700_000_000.0
A, B, C = ConsumerId("a"), ConsumerId("b"), ConsumerId("c")


def ready(
    name: str,
    *,
    priority: int = 4,
    sequence: float = 0.0,
    expiration: float = 0.0,
    delivery_count: int = 0,
) -> Ready:
    return Ready(
        key=f"{priority}.{name}.B",
        message_id=MessageId(name),
        priority=priority,
        sequence=sequence,
        expiration=expiration,
        delivery_count=delivery_count,
    )


def reoffered(release: Effect) -> Ready:
    """What the runtime offers after applying a Release: new key, new count, last holder."""
    assert isinstance(release, Release)
    return replace(
        release.message,
        key=f"{release.message.key}+{release.delivery_count}",
        delivery_count=release.delivery_count,
        not_before=release.not_before,
        last_holder=release.holder,
    )


def claimed(effects: list[Effect]) -> list[tuple[str, str]]:
    return [(e.message.message_id, e.holder) for e in effects if isinstance(e, Claim)]


def engine_with(
    *consumers: ConsumerId, slots: int = 10, policy: QueuePolicy | None = None
) -> QueueEngine:
    engine = QueueEngine(policy=policy or QueuePolicy())
    for consumer in consumers:
        engine.add_consumer(consumer, max_in_flight=slots, lock_timeout=30.0)
    return engine


# -- lock timeout (XEP-0254 §4) and extend --------------------------------------------------


def test_lock_timeout_releases_and_counts_a_delivery() -> None:
    clock = ManualClock(T0)
    engine = engine_with(A)
    engine.offer(ready("m1"), now=clock.now())
    assert engine.dispatch(now=clock.now()) == [Claim(ready("m1"), A, T0 + 30, 1)]
    assert engine.next_deadline() == T0 + 30
    clock.advance(29.9)
    assert engine.expire(now=clock.now()) == []
    clock.advance(0.1)
    assert engine.expire(now=clock.now()) == [
        Release(ready("m1"), A, ReleaseReason.TIMED_OUT, not_before=0.0, delivery_count=1)
    ]
    assert engine.next_deadline() is None
    assert engine.statistics() == QueueStats(ready=0, delayed=0, in_flight=0, consumers=1)
    with pytest.raises(UnexpectedRequest):
        engine.ack(MessageId("m1"), A, now=clock.now())


def test_extend_pushes_the_timeout() -> None:
    engine = engine_with(A)
    engine.offer(ready("m1"), now=T0)
    engine.dispatch(now=T0)
    engine.extend(MessageId("m1"), A, now=T0 + 20)
    assert engine.next_deadline() == T0 + 50
    assert engine.expire(now=T0 + 30) == []
    [release] = engine.expire(now=T0 + 50)
    assert isinstance(release, Release)


def test_a_timed_out_message_goes_to_the_next_consumer_not_back() -> None:
    """XEP-0254 §4: a lock timeout sends the item to the "next" subscriber, as an unlock does;
    sticky would give it straight back to the consumer that let it time out."""
    engine = engine_with(A, B, policy=QueuePolicy(dispatch=Dispatch.STICKY, handoff=1.0))
    engine.offer(ready("m1"), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m1", "a")]
    [release] = engine.expire(now=T0 + 30)
    engine.offer(reoffered(release), now=T0 + 30)
    assert claimed(engine.dispatch(now=T0 + 30)) == [("m1", "b")]


def test_a_single_consumer_gets_a_timed_out_message_back_after_the_handoff() -> None:
    """With one subscriber the "next" one is itself: the message waits out the hand-off."""
    engine = engine_with(A, policy=QueuePolicy(handoff=1.0))
    engine.offer(ready("m1"), now=T0)
    engine.dispatch(now=T0)
    [release] = engine.expire(now=T0 + 30)
    engine.offer(reoffered(release), now=T0 + 30)
    assert engine.dispatch(now=T0 + 30) == []
    [claim] = engine.dispatch(now=T0 + 31)
    assert isinstance(claim, Claim)
    assert (claim.holder, claim.message.delivery_count) == (A, 1)


# -- unlock goes to the next consumer (XEP-0254 §2.4) ----------------------------------------


def test_unlock_goes_to_the_next_consumer_not_back() -> None:
    engine = engine_with(A, B)
    engine.offer(ready("m1", sequence=1), now=T0)
    engine.offer(ready("m2", sequence=2), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m1", "a"), ("m2", "b")]
    # The rotation would now pick a, but a just gave m1 back.
    engine.offer(reoffered(engine.unlock(MessageId("m1"), A, now=T0 + 1)), now=T0 + 1)
    assert claimed(engine.dispatch(now=T0 + 1)) == [("m1", "b")]


def test_unlock_skips_the_last_holder_even_for_sticky() -> None:
    engine = engine_with(A, B, policy=QueuePolicy(dispatch=Dispatch.STICKY))
    engine.offer(ready("m1"), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m1", "a")]
    engine.offer(reoffered(engine.unlock(MessageId("m1"), A, now=T0)), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m1", "b")]


def test_a_single_consumer_gets_it_back_after_the_handoff() -> None:
    engine = engine_with(A, policy=QueuePolicy(handoff=1.0))
    engine.offer(ready("m1"), now=T0)
    engine.dispatch(now=T0)
    engine.offer(reoffered(engine.unlock(MessageId("m1"), A, now=T0 + 1)), now=T0 + 1)
    assert engine.dispatch(now=T0 + 1) == []
    assert engine.next_deadline() == T0 + 2
    assert engine.dispatch(now=T0 + 1.99) == []
    [claim] = engine.dispatch(now=T0 + 2)
    assert isinstance(claim, Claim)
    assert (claim.holder, claim.message.delivery_count) == (A, 1)


def test_the_last_holder_takes_it_back_when_the_others_are_full() -> None:
    engine = engine_with(A, B, slots=1, policy=QueuePolicy(handoff=1.0))
    engine.offer(ready("m1", sequence=1), now=T0)
    engine.offer(ready("m2", sequence=2), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m1", "a"), ("m2", "b")]
    engine.offer(reoffered(engine.unlock(MessageId("m1"), A, now=T0)), now=T0)
    engine.offer(ready("m3", sequence=3), now=T0)
    # a has room but m1 waits for b; m3 passes it.
    assert claimed(engine.dispatch(now=T0)) == [("m3", "a")]
    engine.ack(MessageId("m3"), A, now=T0 + 0.5)
    assert claimed(engine.dispatch(now=T0 + 0.5)) == []
    assert claimed(engine.dispatch(now=T0 + 1)) == [("m1", "a")]


def test_a_released_message_whose_holder_left_goes_anywhere() -> None:
    engine = engine_with(A, B, policy=QueuePolicy(handoff=1.0))
    engine.offer(ready("m1"), now=T0)
    engine.dispatch(now=T0)
    [release] = engine.remove_consumer(A, now=T0)
    engine.offer(reoffered(release), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m1", "b")]


def test_a_delayed_unlock_waits_and_holds_no_slot() -> None:
    engine = engine_with(A, slots=1, policy=QueuePolicy(handoff=1.0))
    engine.offer(ready("m1"), now=T0)
    engine.dispatch(now=T0)
    release = engine.unlock(MessageId("m1"), A, now=T0, delay=10.0)
    engine.offer(reoffered(release), now=T0)
    assert engine.statistics() == QueueStats(ready=0, delayed=1, in_flight=0, consumers=1)
    assert engine.next_deadline() == T0 + 10
    engine.offer(ready("m2"), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m2", "a")]  # the delayed one holds no slot
    engine.ack(MessageId("m2"), A, now=T0 + 9)
    assert claimed(engine.dispatch(now=T0 + 9.9)) == []
    assert claimed(engine.dispatch(now=T0 + 10)) == [("m1", "a")]


# -- slots (queue_requests), owner gone, dead letters ---------------------------------------


def test_max_in_flight_is_respected() -> None:
    engine = engine_with(A, slots=2)
    for i in range(5):
        engine.offer(ready(f"m{i}", sequence=i), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m0", "a"), ("m1", "a")]
    assert engine.dispatch(now=T0) == []
    engine.ack(MessageId("m0"), A, now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m2", "a")]
    assert engine.statistics() == QueueStats(ready=2, delayed=0, in_flight=2, consumers=1)


def test_re_adding_a_consumer_updates_its_limits() -> None:
    engine = engine_with(A, slots=1)
    for i in range(3):
        engine.offer(ready(f"m{i}", sequence=i), now=T0)
    engine.dispatch(now=T0)
    engine.add_consumer(A, max_in_flight=3, lock_timeout=5.0)
    assert engine.dispatch(now=T0) == [
        Claim(ready("m1", sequence=1), A, T0 + 5, 2),
        Claim(ready("m2", sequence=2), A, T0 + 5, 3),
    ]
    assert engine.statistics().consumers == 1


@pytest.mark.parametrize(
    ("max_in_flight", "lock_timeout"),
    [(0, 30.0), (True, 30.0), (1, 0.0), (1, -1.0), (1, float("nan")), (1, float("inf"))],
)
def test_add_consumer_validates(max_in_flight: int, lock_timeout: float) -> None:
    with pytest.raises(InvalidArgument):
        QueueEngine().add_consumer(A, max_in_flight=max_in_flight, lock_timeout=lock_timeout)


def test_owner_gone_releases_everything_at_once() -> None:
    engine = engine_with(A, B, policy=QueuePolicy(dispatch=Dispatch.STICKY))
    for i in range(3):
        engine.offer(ready(f"m{i}", sequence=i), now=T0)
    engine.offer(ready("poison", sequence=9, delivery_count=4), now=T0)
    engine.dispatch(now=T0)
    assert [lease.message.message_id for lease in engine.leases_of(A)] == [
        "m0",
        "m1",
        "m2",
        "poison",
    ]
    effects = engine.remove_consumer(A, now=T0 + 1)
    assert effects == [
        *[
            Release(ready(f"m{i}", sequence=i), A, ReleaseReason.OWNER_GONE, 0.0, 1)
            for i in range(3)
        ],
        DeadLetter(ready("poison", sequence=9, delivery_count=4), A, DeadReason.MAX_DELIVERIES),
    ]
    assert engine.leases_of(A) == []
    assert engine.statistics() == QueueStats(ready=0, delayed=0, in_flight=0, consumers=1)
    for release in effects[:3]:
        engine.offer(reoffered(release), now=T0 + 1)
    assert [holder for _, holder in claimed(engine.dispatch(now=T0 + 1))] == ["b", "b", "b"]


def test_a_consumer_forgotten_here_keeps_its_leases_for_the_next_process_to_adopt() -> None:
    """A holder that outlives its process (a persistent MQTT session): its leases are left as
    they are, nothing released; the next engine adopts them as they were, in its slots."""
    engine = engine_with(A, B, slots=1)
    engine.offer(ready("m0", sequence=0), now=T0)
    engine.offer(ready("m1", sequence=1), now=T0)
    engine.dispatch(now=T0)
    [lease] = engine.leases_of(A)
    engine.forget_consumer(A)
    assert engine.leases_of(A) == []
    assert engine.statistics().consumers == 1
    later = engine_with(A, B, slots=1)
    later.offer(ready("m2", sequence=2), now=T0 + 5)
    later.adopt(lease.message, A, deadline=lease.deadline)
    assert later.leases_of(A) == [lease]  # its delivery count as it was
    assert claimed(later.dispatch(now=T0 + 5)) == [("m2", "b")]  # a's one slot is taken
    assert isinstance(later.ack(lease.message.message_id, A, now=T0 + 6), Finish)


def test_an_owner_gone_release_passes_nobody_over() -> None:
    engine = engine_with(A)
    engine.offer(ready("m"), now=T0)
    engine.dispatch(now=T0)
    [gone] = engine.remove_consumer(A, now=T0)
    assert isinstance(gone, Release)
    assert gone.passed_over is None  # it declined nothing: back at once, in its place
    engine.add_consumer(A, max_in_flight=1, lock_timeout=30.0)
    engine.offer(replace(reoffered(gone), last_holder=gone.passed_over), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m", "a")]  # no handoff to wait out
    unlocked = engine.unlock(MessageId("m"), A, now=T0)
    assert isinstance(unlocked, Release)
    assert unlocked.passed_over == A  # an unlock declines it: the next consumer first


def test_a_paused_consumer_keeps_its_leases_and_gets_nothing_more_until_resumed() -> None:
    engine = engine_with(A, B, slots=2)
    for i in range(2):
        engine.offer(ready(f"m{i}", sequence=i), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m0", "a"), ("m1", "b")]
    engine.pause(A)
    engine.add_consumer(A, max_in_flight=3, lock_timeout=30.0)  # new limits: still paused
    for i in range(2, 5):
        engine.offer(ready(f"m{i}", sequence=i), now=T0)
    assert [holder for _, holder in claimed(engine.dispatch(now=T0))] == ["b"]  # B is full
    assert [lease.message.message_id for lease in engine.leases_of(A)] == ["m0"]
    engine.resume(A)
    assert [holder for _, holder in claimed(engine.dispatch(now=T0))] == ["a", "a"]  # room 3


def test_a_claim_given_back_keeps_its_delivery_count() -> None:
    engine = engine_with(A, B, policy=QueuePolicy(dispatch=Dispatch.STICKY))
    engine.offer(ready("m", delivery_count=2), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m", "a")]
    engine.pause(A)
    back = engine.give_back(MessageId("m"), A)
    assert back == Release(ready("m", delivery_count=2), A, ReleaseReason.GIVEN_BACK, 0.0, 2)
    assert back.passed_over is None
    engine.offer(replace(reoffered(back), last_holder=None), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m", "b")]  # the paused A is passed by
    with pytest.raises(UnexpectedRequest):
        engine.give_back(MessageId("m"), A)  # not its any more


def test_a_claim_whose_message_expired_before_its_receive_is_expired_not_handed_out() -> None:
    # concepts.md: a message past its expiration goes to expired/ and no consumer is given it;
    # one locked ahead for a consumer is not given it until its receive.
    engine = engine_with(A, B, slots=2)
    engine.offer(ready("lasts", sequence=1), now=T0)
    engine.offer(ready("brief", sequence=2, expiration=T0 + 5), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("lasts", "a"), ("brief", "b")]
    assert engine.expire_claimed(MessageId("brief"), B, now=T0 + 4) is None  # still in time
    assert engine.expire_claimed(MessageId("lasts"), A, now=T0 + 6) is None  # never expires
    assert engine.expire_claimed(MessageId("brief"), B, now=T0 + 5) == Expire(
        ready("brief", sequence=2, expiration=T0 + 5)
    )
    assert engine.lease(MessageId("brief")) is None
    assert engine.statistics().in_flight == 1
    with pytest.raises(ItemNotFound):
        engine.ack(MessageId("brief"), B, now=T0 + 5)  # gone, its lock with it


def test_a_lapsed_lease_its_holder_never_received_is_given_back_the_others_time_out() -> None:
    engine = engine_with(A)
    engine.offer(ready("seen", sequence=1), now=T0)
    engine.offer(ready("unseen", sequence=2), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("seen", "a"), ("unseen", "a")]
    seen, unseen = engine.expire(
        now=T0 + 30, unreceived=lambda lease: lease.message.message_id == "unseen"
    )
    assert seen == Release(ready("seen", sequence=1), A, ReleaseReason.TIMED_OUT, 0.0, 1)
    assert unseen == Release(ready("unseen", sequence=2), A, ReleaseReason.GIVEN_BACK, 0.0, 0)
    assert unseen.passed_over is None
    engine.offer(reoffered(seen), now=T0 + 30)
    engine.offer(ready("unseen", sequence=2), now=T0 + 30)
    assert claimed(engine.dispatch(now=T0 + 30)) == [("unseen", "a")]  # "seen": its hand-off
    with pytest.raises(UnexpectedRequest):
        engine.ack(MessageId("seen"), A, now=T0 + 30)


def test_a_deadline_moved_on_disk_holds_the_lease_and_lapsing_says_when_it_ends() -> None:
    engine = engine_with(A)
    engine.offer(ready("m"), now=T0)
    engine.dispatch(now=T0)
    assert not engine.lapsing(now=T0 + 29)
    assert engine.lapsing(now=T0 + 30)
    engine.locked_until(MessageId("m"), T0 + 60)  # another process extended it by id
    assert not engine.lapsing(now=T0 + 30)
    assert engine.expire(now=T0 + 30) == []
    [release] = engine.expire(now=T0 + 60)
    assert isinstance(release, Release)
    assert release.reason is ReleaseReason.TIMED_OUT


def test_removing_an_unknown_consumer_does_nothing() -> None:
    assert QueueEngine().remove_consumer(A, now=T0) == []


def test_max_deliveries_sends_a_poison_message_to_the_dead_letters() -> None:
    engine = engine_with(A, policy=QueuePolicy(max_deliveries=2, handoff=0.0))
    engine.offer(ready("m1"), now=T0)
    engine.dispatch(now=T0)
    engine.offer(reoffered(engine.unlock(MessageId("m1"), A, now=T0)), now=T0)
    [claim] = engine.dispatch(now=T0)
    assert isinstance(claim, Claim)
    assert claim.message.delivery_count == 1
    [dead] = engine.expire(now=T0 + 30)
    assert dead == DeadLetter(claim.message, A, DeadReason.MAX_DELIVERIES)
    assert engine.next_deadline() is None


def test_unlimited_deliveries() -> None:
    engine = QueueEngine(policy=QueuePolicy(max_deliveries=None))
    engine.add_consumer(A, max_in_flight=1, lock_timeout=30.0)
    engine.offer(ready("m1", delivery_count=1000), now=T0)
    engine.dispatch(now=T0)
    release = engine.unlock(MessageId("m1"), A, now=T0)
    assert isinstance(release, Release)
    assert release.delivery_count == 1001


@pytest.mark.parametrize(
    ("max_deliveries", "handoff"), [(0, 1.0), (-1, 1.0), (1, -0.5), (1, float("nan"))]
)
def test_policy_validates(max_deliveries: int, handoff: float) -> None:
    with pytest.raises(InvalidArgument):
        QueuePolicy(max_deliveries=max_deliveries, handoff=handoff)


def test_reject_never_redelivers() -> None:
    engine = engine_with(A)
    engine.offer(ready("m1"), now=T0)
    engine.dispatch(now=T0)
    assert engine.reject(MessageId("m1"), A, now=T0) == DeadLetter(
        ready("m1"), A, DeadReason.REJECTED
    )
    assert engine.dispatch(now=T0 + 100) == []
    assert engine.statistics() == QueueStats(ready=0, delayed=0, in_flight=0, consumers=1)


# -- expiration ------------------------------------------------------------------------------


def test_expire_reports_ready_messages_past_their_expiration() -> None:
    engine = QueueEngine()
    engine.offer(ready("m1", expiration=T0 + 5), now=T0)
    engine.offer(ready("m2"), now=T0)
    assert engine.next_deadline() == T0 + 5
    assert engine.expire(now=T0 + 4) == []
    assert engine.expire(now=T0 + 5) == [Expire(ready("m1", expiration=T0 + 5))]
    assert engine.next_deadline() is None
    assert engine.statistics().ready == 1


def test_dispatch_expires_instead_of_claiming() -> None:
    engine = engine_with(A)
    engine.offer(ready("old", expiration=T0 + 5, priority=9), now=T0)
    engine.offer(ready("new"), now=T0)
    assert engine.dispatch(now=T0 + 6) == [
        Expire(ready("old", expiration=T0 + 5, priority=9)),
        Claim(ready("new"), A, T0 + 36, 1),
    ]


def test_a_leased_message_does_not_expire() -> None:
    engine = engine_with(A)
    engine.offer(ready("m1", expiration=T0 + 5), now=T0)
    engine.dispatch(now=T0)
    assert engine.next_deadline() == T0 + 30
    assert engine.expire(now=T0 + 10) == []


# -- order -----------------------------------------------------------------------------------


def test_priority_first_then_fifo_then_key() -> None:
    engine = engine_with(A)
    for name, priority, sequence in [
        ("c", 4, 3.0),
        ("b", 9, 5.0),
        ("e", 4, 1.0),
        ("d", 4, 1.0),
        ("a", 0, 0.0),
        ("f", 9, 2.0),
    ]:
        engine.offer(ready(name, priority=priority, sequence=sequence), now=T0)
    assert [m for m, _ in claimed(engine.dispatch(now=T0))] == ["f", "b", "d", "e", "c", "a"]


# -- what the runtime sees on disk -----------------------------------------------------------


def test_claim_lost_frees_the_slot() -> None:
    engine = engine_with(A, slots=1)
    engine.offer(ready("m1", sequence=1), now=T0)
    engine.offer(ready("m2", sequence=2), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m1", "a")]
    engine.claim_lost(MessageId("m1"))
    assert engine.lease(MessageId("m1")) is None
    assert engine.leases_of(A) == []
    assert claimed(engine.dispatch(now=T0)) == [("m2", "a")]
    assert engine.next_deadline() == T0 + 30


def test_withdraw_removes_a_ready_message_only() -> None:
    engine = engine_with(A, slots=1)
    engine.offer(ready("m1", sequence=1), now=T0)
    engine.offer(ready("m2", sequence=2), now=T0)
    engine.dispatch(now=T0)
    engine.withdraw(MessageId("m1"))  # our own claim moved it out of target/
    engine.withdraw(MessageId("m2"))
    engine.withdraw(MessageId("unknown"))
    assert engine.lease(MessageId("m1")) == Lease(ready("m1", sequence=1), A, T0 + 30, 1)
    assert engine.statistics() == QueueStats(ready=0, delayed=0, in_flight=1, consumers=1)
    engine.ack(MessageId("m1"), A, now=T0)
    assert engine.dispatch(now=T0) == []


def test_offer_is_idempotent_by_message_id() -> None:
    engine = QueueEngine()
    engine.offer(ready("m1"), now=T0)
    engine.offer(ready("m1"), now=T0)
    engine.offer(ready("m1", priority=7), now=T0)
    assert engine.statistics().ready == 1
    engine.add_consumer(A, max_in_flight=5, lock_timeout=30.0)
    assert engine.dispatch(now=T0) == [Claim(ready("m1", priority=7), A, T0 + 30, 1)]
    engine.offer(ready("m1", priority=1), now=T0)  # leased: ignored
    assert engine.statistics() == QueueStats(ready=0, delayed=0, in_flight=1, consumers=1)
    lease = engine.lease(MessageId("m1"))
    assert lease is not None
    assert lease.message.priority == 7


def test_offer_new_takes_only_an_id_the_engine_does_not_know() -> None:
    # A put's own offer comes after its watcher's may have: the watcher's entry stays.
    engine = QueueEngine()
    assert engine.offer_new(ready("m1", priority=7), now=T0)
    assert not engine.offer_new(ready("m1", priority=1), now=T0)  # ready: kept as it was
    engine.add_consumer(A, max_in_flight=5, lock_timeout=30.0)
    assert engine.dispatch(now=T0) == [Claim(ready("m1", priority=7), A, T0 + 30, 1)]
    assert not engine.offer_new(ready("m1"), now=T0)  # leased
    assert engine.statistics() == QueueStats(ready=0, delayed=0, in_flight=1, consumers=1)
    assert engine.offer_new(ready("m2"), now=T0)
    assert engine.statistics().ready == 1


# -- timers and cost -------------------------------------------------------------------------


def test_next_deadline_is_the_earliest_timed_thing() -> None:
    engine = engine_with(A, slots=1, policy=QueuePolicy(handoff=3.0))
    assert engine.next_deadline() is None
    engine.offer(ready("leased"), now=T0)
    engine.dispatch(now=T0)
    assert engine.next_deadline() == T0 + 30  # lease deadline
    engine.offer(replace(ready("later"), not_before=T0 + 20), now=T0)
    assert engine.next_deadline() == T0 + 20  # delayed message
    engine.offer(ready("perishable", expiration=T0 + 10), now=T0)
    assert engine.next_deadline() == T0 + 10  # expiration
    engine.offer(replace(ready("back"), last_holder=B, delivery_count=1), now=T0)
    assert engine.next_deadline() == T0 + 3  # handoff end
    engine.dispatch(now=T0 + 3)
    assert engine.next_deadline() == T0 + 10


def test_dispatch_does_not_scan_without_free_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_with(A, slots=1)
    for i in range(1000):
        engine.offer(ready(f"m{i}", sequence=i), now=T0)
    engine.dispatch(now=T0)
    scanned: list[Lane] = []
    monkeypatch.setattr(engine._ready, "drain", lambda lane, *_, **__: scanned.append(lane))
    assert engine.dispatch(now=T0) == []
    assert QueueEngine().dispatch(now=T0) == []
    assert scanned == []


# -- a consumer that cannot take a message declines it (too large for its client) ----------


def reoffered_ready(name: str, last_holder: ConsumerId) -> Ready:
    """`ready(name)` as `reoffered` offers it back after a declined first delivery."""
    return replace(ready(name), key=f"{ready(name).key}+0", last_holder=last_holder)


def _declined(engine: QueueEngine, message: str, consumer: ConsumerId) -> Effect:
    """`decline`, and what the runtime then offers back if it was released."""
    effect = engine.decline(MessageId(message), consumer)
    if isinstance(effect, Release):
        engine.offer(reoffered(effect), now=T0)
    return effect


def test_a_declined_message_goes_to_another_consumer_uncounted_and_never_back() -> None:
    """Past the handoff, with nobody else free, an unlocked message goes back to its last
    holder; a declined one never does, and its delivery is not counted."""
    engine = engine_with(A, B, slots=1, policy=QueuePolicy(handoff=1.0))
    engine.offer(ready("big", sequence=1), now=T0)
    engine.offer(ready("m", sequence=2), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("big", "a"), ("m", "b")]
    back = _declined(engine, "big", A)
    assert back == Release(ready("big", sequence=1), A, ReleaseReason.DECLINED, 0.0, 0)
    assert back.passed_over == A
    assert claimed(engine.dispatch(now=T0 + 60)) == []  # A has room: big waits for B
    engine.ack(MessageId("m"), B, now=T0 + 60)
    [claim] = engine.dispatch(now=T0 + 60)
    assert isinstance(claim, Claim)
    assert (claim.message.message_id, claim.holder, claim.message.delivery_count) == ("big", B, 0)


def test_a_message_every_consumer_declined_is_dead_as_too_large() -> None:
    engine = engine_with(A, B, policy=QueuePolicy(max_deliveries=None))
    engine.offer(ready("big"), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("big", "a")]
    _declined(engine, "big", A)
    assert claimed(engine.dispatch(now=T0)) == [("big", "b")]
    dead = engine.decline(MessageId("big"), B)
    assert dead == DeadLetter(reoffered_ready("big", A), B, DeadReason.TOO_LARGE)
    assert engine.dispatch(now=T0 + 60) == []
    assert engine.statistics() == QueueStats(ready=0, delayed=0, in_flight=0, consumers=2)


def test_one_consumer_alone_declining_makes_it_dead_at_once() -> None:
    engine = engine_with(A)
    engine.offer(ready("big"), now=T0)
    engine.dispatch(now=T0)
    assert engine.decline(MessageId("big"), A) == DeadLetter(ready("big"), A, DeadReason.TOO_LARGE)


def test_a_message_declined_by_those_there_waits_for_a_paused_consumer_resumed() -> None:
    """A paused consumer (an MQTT member away) may come back able to take it; one that comes
    back after declining it is handed it again (it may take it now)."""
    engine = engine_with(A, B)
    engine.pause(B)
    engine.offer(ready("big"), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("big", "a")]
    _declined(engine, "big", A)
    assert engine.dispatch(now=T0 + 60) == []
    engine.pause(A)
    engine.resume(A)  # A away and back: it may take it now
    assert claimed(engine.dispatch(now=T0 + 60)) == [("big", "a")]
    assert isinstance(_declined(engine, "big", A), Release)  # still too small: B waited for
    engine.resume(B)
    assert claimed(engine.dispatch(now=T0 + 60)) == [("big", "b")]


def test_the_consumers_left_when_the_others_leave_try_what_they_declined_once_more() -> None:
    engine = engine_with(A, B, slots=1)
    engine.offer(ready("m", sequence=1), now=T0)
    engine.offer(ready("big", sequence=2), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("m", "a"), ("big", "b")]
    engine.ack(MessageId("m"), A, now=T0)
    back = engine.decline(MessageId("big"), B)
    assert isinstance(back, Release)
    engine.offer(replace(reoffered(back), last_holder=None), now=T0)  # a name with no room
    assert claimed(engine.dispatch(now=T0)) == [("big", "a")]
    assert isinstance(_declined(engine, "big", A), DeadLetter)
    # Had B left while A had declined it, A would be handed it again, to end it so.
    engine = engine_with(A, B, slots=1)
    engine.offer(ready("big"), now=T0)
    engine.pause(B)
    assert claimed(engine.dispatch(now=T0)) == [("big", "a")]
    _declined(engine, "big", A)
    assert engine.dispatch(now=T0 + 60) == []
    engine.remove_consumer(B, now=T0 + 60)
    assert claimed(engine.dispatch(now=T0 + 60)) == [("big", "a")]
    assert isinstance(engine.decline(MessageId("big"), A), DeadLetter)


def test_under_hash_by_key_a_message_its_consumer_declines_is_dead() -> None:
    """No other consumer may take a key's message: it would break the key's order."""
    engine = engine_with(A, B, policy=QueuePolicy(dispatch=Dispatch.HASH_BY_KEY))
    engine.offer(ready("big"), now=T0)
    [(_, holder)] = claimed(engine.dispatch(now=T0))
    dead = engine.decline(MessageId("big"), ConsumerId(holder))
    assert isinstance(dead, DeadLetter)
    assert dead.reason is DeadReason.TOO_LARGE


def test_a_consumer_that_declined_left_and_came_back_is_handed_it_again() -> None:
    """A consumer gone and attached again under its name (an MQTT member that connected
    again with a clean start, a larger Maximum Packet Size now) is a new one: it may take
    what it declined, which waited meanwhile for a paused consumer that may never return."""
    engine = engine_with(A, B)
    engine.pause(B)
    engine.offer(ready("big"), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("big", "a")]
    _declined(engine, "big", A)
    engine.remove_consumer(A, now=T0 + 1)
    engine.add_consumer(A, max_in_flight=10, lock_timeout=30.0)
    assert claimed(engine.dispatch(now=T0 + 60)) == [("big", "a")]


def test_a_consumer_paused_after_declining_is_waited_for_as_any_paused_one() -> None:
    """An MQTT member that declined a message and went away (its session kept) may connect
    again with a larger Maximum Packet Size, as one away that never saw it: the others
    declining it too wait for it, rather than make it dead as too-large."""
    engine = engine_with(A, B, slots=1)
    engine.offer(ready("big", sequence=1), now=T0)
    engine.offer(ready("m", sequence=2), now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("big", "a"), ("m", "b")]
    _declined(engine, "big", A)
    engine.pause(A)
    engine.ack(MessageId("m"), B, now=T0)
    assert claimed(engine.dispatch(now=T0)) == [("big", "b")]
    assert isinstance(_declined(engine, "big", B), Release)  # A may take it once back
    engine.resume(A)
    assert claimed(engine.dispatch(now=T0 + 60)) == [("big", "a")]
