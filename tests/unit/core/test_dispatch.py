"""Dispatch strategies, through the engine and through the pure helpers."""

from __future__ import annotations

import random
import zlib
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core import Claim, Dispatch, Effect, QueueEngine, QueuePolicy, Ready
from boxmq.core.dispatch import Picker, eligible, route
from boxmq.core.ready import Lane
from boxmq.model import ConsumerId, MessageId

T0 = 1_700_000_000.0
A, B, C = ConsumerId("a"), ConsumerId("b"), ConsumerId("c")


def ready(name: str, *, sequence: float = 0.0, group_key: str | None = None) -> Ready:
    return Ready(
        key=f"4.{name}.B", message_id=MessageId(name), sequence=sequence, group_key=group_key
    )


def holders(effects: list[Effect]) -> list[str]:
    return [e.holder for e in effects if isinstance(e, Claim)]


def engine_with(
    kind: Dispatch,
    *consumers: ConsumerId,
    slots: int = 100,
    rng: random.Random | None = None,
) -> QueueEngine:
    engine = QueueEngine(policy=QueuePolicy(dispatch=kind), rng=rng)
    for consumer in consumers:
        engine.add_consumer(consumer, max_in_flight=slots, lock_timeout=30.0)
    return engine


def offer_many(engine: QueueEngine, count: int, *, keys: int = 0) -> None:
    for i in range(count):
        group_key = f"g{i % keys}" if keys else None
        engine.offer(ready(f"m{i:03}", sequence=i, group_key=group_key), now=T0)


def test_round_robin_splits_evenly_in_turn() -> None:
    engine = engine_with(Dispatch.ROUND_ROBIN, A, B, C)
    offer_many(engine, 30)
    got = holders(engine.dispatch(now=T0))
    assert got[:6] == ["a", "b", "c", "a", "b", "c"]
    assert Counter(got) == {"a": 10, "b": 10, "c": 10}


def test_round_robin_passes_over_a_full_consumer() -> None:
    engine = engine_with(Dispatch.ROUND_ROBIN, A, B, C, slots=2)
    offer_many(engine, 9)
    assert holders(engine.dispatch(now=T0)) == ["a", "b", "c", "a", "b", "c"]
    engine.ack(MessageId("m001"), B, now=T0)
    assert holders(engine.dispatch(now=T0)) == ["b"]


def test_least_in_flight_fills_the_idle_first() -> None:
    engine = engine_with(Dispatch.LEAST_IN_FLIGHT, A)
    offer_many(engine, 3)
    engine.dispatch(now=T0)
    engine.add_consumer(B, max_in_flight=100, lock_timeout=30.0)
    engine.add_consumer(C, max_in_flight=100, lock_timeout=30.0)
    for i in range(3, 12):
        engine.offer(ready(f"m{i:03}", sequence=i), now=T0)
    got = holders(engine.dispatch(now=T0))
    assert got[:6] == ["b", "c", "b", "c", "b", "c"]  # ties by rotation
    assert got[6:] == ["a", "b", "c"]


def test_sticky_stays_while_there_is_room() -> None:
    engine = engine_with(Dispatch.STICKY, A, B, slots=3)
    offer_many(engine, 5)
    assert holders(engine.dispatch(now=T0)) == ["a", "a", "a", "b", "b"]
    engine.ack(MessageId("m000"), A, now=T0)
    offer_many_more = [ready(f"n{i}", sequence=10 + i) for i in range(2)]
    for message in offer_many_more:
        engine.offer(message, now=T0)
    assert holders(engine.dispatch(now=T0)) == ["b", "a"]  # b until full, then the next


def test_sticky_stays_on_a_consumer_that_unlocked_a_message_while_it_has_room() -> None:
    # The unlocked message goes to the next consumer (XEP-0254 §2.4); the rest stayed there
    # too, though the sticky consumer had room.
    engine = engine_with(Dispatch.STICKY, A, B, slots=3)
    engine.offer(ready("m0"), now=T0)
    assert holders(engine.dispatch(now=T0)) == ["a"]
    engine.unlock(MessageId("m0"), A, now=T0)
    back = Ready(key="again", message_id=MessageId("m0"), last_holder=A, delivery_count=1)
    engine.offer(back, now=T0)
    assert holders(engine.dispatch(now=T0)) == ["b"]
    for i in range(1, 4):
        engine.offer(ready(f"m{i}", sequence=i), now=T0)
    assert holders(engine.dispatch(now=T0)) == ["a", "a", "a"]


def test_hash_by_key_keeps_a_key_on_one_consumer() -> None:
    engine = engine_with(Dispatch.HASH_BY_KEY, C, A, B)
    ring = [A, B, C]
    offer_many(engine, 60, keys=6)
    effects = engine.dispatch(now=T0)
    assert len(effects) == 60
    for effect in effects:
        assert isinstance(effect, Claim)
        key = effect.message.group_key
        assert key is not None
        assert effect.holder == ring[zlib.crc32(key.encode()) % 3]
    by_key = {e.message.group_key: e.holder for e in effects if isinstance(e, Claim)}
    assert len(set(by_key.values())) > 1  # the keys spread out


def test_hash_by_key_falls_back_to_the_message_id() -> None:
    engine = engine_with(Dispatch.HASH_BY_KEY, A, B, C)
    offer_many(engine, 12)
    for effect in engine.dispatch(now=T0):
        assert isinstance(effect, Claim)
        assert effect.holder == route(effect.message, [A, B, C])


def test_hash_by_key_waits_for_a_full_consumer_and_does_not_scan_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = engine_with(Dispatch.HASH_BY_KEY, A, B, slots=1)
    key_for = {route(ready("x", group_key=f"k{i}"), [A, B]): f"k{i}" for i in range(20)}
    key_a, key_b = key_for[A], key_for[B]
    for i in range(3):
        engine.offer(ready(f"a{i}", sequence=i, group_key=key_a), now=T0)
    engine.offer(ready("b0", sequence=5, group_key=key_b), now=T0)
    assert sorted(holders(engine.dispatch(now=T0))) == ["a", "b"]
    engine.ack(MessageId("b0"), B, now=T0)
    engine.offer(ready("b1", sequence=6, group_key=key_b), now=T0)
    scanned: list[Lane] = []
    drain = engine._ready.drain

    def spy(lane: Lane, *args: object, **kwargs: object) -> None:
        scanned.append(lane)
        drain(lane, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine._ready, "drain", spy)
    assert [e.message.message_id for e in engine.dispatch(now=T0) if isinstance(e, Claim)] == ["b1"]
    assert scanned == [B]  # a is full: its two waiting messages were not looked at


def test_hash_by_key_re_routes_when_the_consumers_change() -> None:
    engine = engine_with(Dispatch.HASH_BY_KEY, A)
    offer_many(engine, 10, keys=5)
    assert set(holders(engine.dispatch(now=T0))) == {"a"}
    engine.remove_consumer(A, now=T0)  # all ten released
    engine.add_consumer(B, max_in_flight=100, lock_timeout=30.0)
    engine.add_consumer(C, max_in_flight=100, lock_timeout=30.0)
    offer_many(engine, 10, keys=5)
    for effect in engine.dispatch(now=T0):
        assert isinstance(effect, Claim)
        assert effect.holder == route(effect.message, [B, C])


def test_hash_by_key_gives_a_paused_consumers_keys_to_the_others_until_it_resumes() -> None:
    # An MQTT share group's member whose client is away is paused: the group's messages go to
    # the members there (docs/mqtt.md). Its keys waited for it, for as long as it was away.
    engine = engine_with(Dispatch.HASH_BY_KEY, A, B)
    engine.pause(A)
    offer_many(engine, 10, keys=10)
    owners = {route(ready("x", group_key=f"g{i}"), [A, B]) for i in range(10)}
    assert owners == {A, B}  # some of the keys are A's while it takes turns
    assert holders(engine.dispatch(now=T0)) == ["b"] * 10
    engine.resume(A)
    for i in range(10):
        engine.offer(ready(f"n{i:03}", sequence=10 + i, group_key=f"g{i}"), now=T0)
    for effect in engine.dispatch(now=T0):
        assert isinstance(effect, Claim)
        assert effect.holder == route(effect.message, [A, B])  # its keys are its own again


def test_hash_by_key_last_holder_gets_it_back_after_the_handoff() -> None:
    engine = QueueEngine(policy=QueuePolicy(dispatch=Dispatch.HASH_BY_KEY, handoff=2.0))
    for consumer in (A, B):
        engine.add_consumer(consumer, max_in_flight=5, lock_timeout=30.0)
    engine.offer(ready("m1", group_key="k"), now=T0)
    [claim] = engine.dispatch(now=T0)
    assert isinstance(claim, Claim)
    release = engine.unlock(MessageId("m1"), claim.holder, now=T0)
    back = Ready(
        key="again",
        message_id=MessageId("m1"),
        group_key="k",
        last_holder=claim.holder,
        delivery_count=1,
    )
    engine.offer(back, now=T0)
    assert release.holder == claim.holder
    assert engine.dispatch(now=T0 + 1) == []
    assert holders(engine.dispatch(now=T0 + 2)) == [claim.holder]


def test_hash_by_key_holds_a_group_back_behind_its_message_in_handoff() -> None:
    # m0 unlocked waits out its handoff for the group's consumer: m1 and m2 of its group wait
    # behind it (given out first, they made the group's order m1, m2, m0); other groups go on.
    engine = QueueEngine(policy=QueuePolicy(dispatch=Dispatch.HASH_BY_KEY, handoff=2.0))
    engine.add_consumer(A, max_in_flight=5, lock_timeout=30.0)
    engine.offer(ready("m0", sequence=0, group_key="order-17"), now=T0)
    assert holders(engine.dispatch(now=T0)) == ["a"]
    engine.unlock(MessageId("m0"), A, now=T0)
    back = Ready(
        key="again",
        message_id=MessageId("m0"),
        group_key="order-17",
        last_holder=A,
        delivery_count=1,
    )
    engine.offer(back, now=T0)
    engine.offer(ready("m1", sequence=1, group_key="order-17"), now=T0)
    engine.offer(ready("m2", sequence=2, group_key="order-17"), now=T0)
    engine.offer(ready("n0", sequence=3, group_key="order-18"), now=T0)
    engine.offer(ready("x0", sequence=4), now=T0)  # grouped by its own id: nothing behind it
    claimed = [e.message.message_id for e in engine.dispatch(now=T0 + 1) if isinstance(e, Claim)]
    assert claimed == ["n0", "x0"]
    claimed = [e.message.message_id for e in engine.dispatch(now=T0 + 2) if isinstance(e, Claim)]
    assert claimed == ["m0", "m1", "m2"]


def test_hash_by_key_reads_a_bounded_part_of_a_long_group_held_back() -> None:
    # Each dispatch of the handoff read every message held back: 0.3 s for 50,000 of them.
    engine = QueueEngine(policy=QueuePolicy(dispatch=Dispatch.HASH_BY_KEY, handoff=2.0))
    engine.add_consumer(A, max_in_flight=2_000, lock_timeout=30.0)
    engine.offer(ready("m0000", sequence=0, group_key="long"), now=T0)
    assert holders(engine.dispatch(now=T0)) == ["a"]
    engine.unlock(MessageId("m0000"), A, now=T0)
    back = Ready(key="again", message_id=MessageId("m0000"), group_key="long", last_holder=A)
    engine.offer(back, now=T0)
    for i in range(1, 1_000):
        engine.offer(ready(f"m{i:04}", sequence=i, group_key="long"), now=T0)
    engine.offer(ready("other", sequence=1_000, group_key="short"), now=T0)
    read: list[MessageId] = []
    live = engine._ready._live

    def spy(message_id: MessageId, generation: int) -> object:
        read.append(message_id)
        return live(message_id, generation)

    engine._ready._live = spy  # type: ignore[method-assign,assignment]
    # The other group waits behind the first 100 of them, for the handoff's end at most.
    assert engine.dispatch(now=T0 + 1) == []
    assert len(read) == 101
    claimed = [e.message.message_id for e in engine.dispatch(now=T0 + 2) if isinstance(e, Claim)]
    assert claimed == [f"m{i:04}" for i in range(1_000)] + ["other"]


@given(
    keys=st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=60),
    consumers=st.integers(min_value=1, max_value=5),
    redeliver=st.lists(st.booleans(), max_size=60),
)
def test_hash_by_key_one_key_one_consumer_across_messages_and_redeliveries(
    keys: list[str], consumers: int, redeliver: list[bool]
) -> None:
    # How the runtime builds a redelivery: the same group key, its last holder, one more count.
    members = [ConsumerId(f"c{i}") for i in range(consumers)]
    engine = engine_with(Dispatch.HASH_BY_KEY, *members)
    for i, key in enumerate(keys):
        engine.offer(ready(f"m{i:03}", sequence=i, group_key=key), now=T0)
    claims = [e for e in engine.dispatch(now=T0) if isinstance(e, Claim)]
    assert len(claims) == len(keys)
    owner: dict[str | None, ConsumerId] = {}
    for claim in claims:
        assert owner.setdefault(claim.message.group_key, claim.holder) == claim.holder
    again = [claim for claim, flag in zip(claims, redeliver, strict=False) if flag]
    for claim in again:
        engine.unlock(claim.message.message_id, claim.holder, now=T0)
        back = Ready(
            key=f"{claim.message.key}.again",
            message_id=claim.message.message_id,
            sequence=claim.message.sequence,
            delivery_count=1,
            last_holder=claim.holder,
            group_key=claim.message.group_key,
        )
        engine.offer(back, now=T0)
    later = T0 + QueuePolicy().handoff
    redelivered = [e for e in engine.dispatch(now=later) if isinstance(e, Claim)]
    assert len(redelivered) == len(again)
    for claim in redelivered:
        assert claim.holder == owner[claim.message.group_key]


def test_random_uses_the_given_rng() -> None:
    engine = engine_with(Dispatch.RANDOM, A, B, C, rng=random.Random(42))
    offer_many(engine, 30)
    expected_rng = random.Random(42)
    assert holders(engine.dispatch(now=T0)) == [expected_rng.choice([A, B, C]) for _ in range(30)]


def test_random_is_reproducible_and_spreads() -> None:
    runs = []
    for _ in range(2):
        engine = engine_with(Dispatch.RANDOM, A, B, C, rng=random.Random(7))
        offer_many(engine, 60)
        runs.append(holders(engine.dispatch(now=T0)))
    assert runs[0] == runs[1]
    assert set(runs[0]) == {"a", "b", "c"}


# -- the pure helpers ------------------------------------------------------------------------


def test_eligible_passes_over_the_last_holder() -> None:
    message = Ready(key="k", message_id=MessageId("m"), last_holder=A)
    assert eligible(message, [A, B, C], handoff_over=False) == [B, C]
    assert eligible(message, [A, B, C], handoff_over=True) == [B, C]
    assert eligible(message, [A], handoff_over=False) == []
    assert eligible(message, [A], handoff_over=True) == [A]
    assert eligible(message, [B], handoff_over=False) == [B]
    assert eligible(ready("m"), [A, B], handoff_over=False) == [A, B]


def test_route_is_stable_and_uses_crc32() -> None:
    message = ready("m", group_key="orders-17")
    assert route(message, []) is None
    assert route(message, [A, B, C]) == [A, B, C][zlib.crc32(b"orders-17") % 3]


def test_picker_needs_known_consumers() -> None:
    picker = Picker(Dispatch.ROUND_ROBIN, random.Random(0))
    picker.set_consumers([A])
    with pytest.raises(ValueError, match="consumers of this queue"):
        picker.pick(ready("m"), [B], load=lambda _: 0, handoff_over=True)


@given(
    kind=st.sampled_from([Dispatch.ROUND_ROBIN, Dispatch.LEAST_IN_FLIGHT, Dispatch.STICKY]),
    consumers=st.integers(min_value=1, max_value=3),
    slots=st.integers(min_value=1, max_value=3),
    steps=st.lists(
        st.tuples(st.sampled_from(["offer", "dispatch", "unlock", "ack"]), st.integers(0, 9)),
        max_size=40,
    ),
)
def test_a_lone_consumer_with_room_gets_what_the_picker_would_give(
    kind: Dispatch, consumers: int, slots: int, steps: list[tuple[str, int]]
) -> None:
    """The one-pass hand-out to the only consumer with room (QueueEngine._hand_out_alone)
    makes the claims, and leaves the rotation, that picking message by message makes."""
    names = [A, B, C][:consumers]
    fast, slow = engine_with(kind, *names, slots=slots), engine_with(kind, *names, slots=slots)
    slow._picker.rotates = False  # every dispatch goes through the picker, one message at a time
    for index, (step, number) in enumerate(steps):
        now = T0 + index * 0.4  # handoffs (1 s) run out along the way
        results = []
        for engine in (fast, slow):
            effects = engine.dispatch(now=now)
            claims = [(e.message.message_id, e.holder) for e in effects if isinstance(e, Claim)]
            held = sorted(
                (lease.message.message_id, c) for c in names for lease in engine.leases_of(c)
            )
            if step == "offer":
                engine.offer(ready(f"m{number}", sequence=number), now=now)
            elif held and step in ("unlock", "ack"):
                message_id, holder = held[number % len(held)]
                if step == "ack":
                    engine.ack(message_id, holder, now=now)
                else:
                    released = engine.unlock(message_id, holder, now=now)
                    engine.offer(replace(released.message, last_holder=holder), now=now)
            results.append((claims, held))
        assert results[0] == results[1]
        assert (fast._picker._cursor, fast._picker._current) == (
            slow._picker._cursor,
            slow._picker._current,
        )
