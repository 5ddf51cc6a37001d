"""ExactlyOnce: two-phase receive with deduplication and the urn:xmpp:qos memory-attack limits."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.exactly_once import ExactlyOnce, ExactlyOnceLimits, ExactlyOnceStats, SourceUsage
from boxmq.core.qos import Action
from boxmq.errors import (
    BoxMQError,
    InvalidArgument,
    MessageTooLarge,
    NotAllowed,
    ProtocolViolation,
    ResourceConstraint,
)

SMALL = ExactlyOnceLimits(
    max_pending_per_source=3,
    max_pending_total=5,
    max_bytes_per_source=100,
    max_bytes_total=150,
    max_message_size=60,
    trusted_sources=frozenset({"a", "b", "c"}),
    pending_ttl=100.0,
    done_ttl=50.0,
)


def store(box: ExactlyOnce, source: str, msg_id: str, size: int = 10, now: float = 0.0) -> None:
    assert box.assured(source, msg_id, size=size, now=now) is Action.STORE
    assert box.stored(source, msg_id)


def test_the_two_phases_store_once_and_deliver_once() -> None:
    box = ExactlyOnce()
    assert box.assured("s", "m1", size=10, now=0.0) is Action.STORE
    assert box.stored("s", "m1")
    assert box.assured("s", "m1", size=10, now=1.0) is Action.ANSWER  # repeat: answer again
    assert box.statistics() == ExactlyOnceStats(1, 10, 0, (SourceUsage("s", 1, 10),))
    assert box.deliver("s", "m1", now=2.0) is Action.DELIVER
    assert box.deliver("s", "m1", now=3.0) is Action.ANSWER  # repeat: deliver nothing
    assert box.assured("s", "m1", size=10, now=4.0) is Action.ANSWER  # late repeat of phase 1
    assert box.statistics() == ExactlyOnceStats(0, 0, 1, ())


def test_deliver_of_an_unknown_id_is_answered_as_unknown() -> None:
    box = ExactlyOnce()
    assert box.deliver("s", "nope", now=0.0) is Action.ANSWER_UNKNOWN
    assert box.statistics() == ExactlyOnceStats(0, 0, 0, ())


def test_the_same_id_from_two_sources_is_two_messages() -> None:
    box = ExactlyOnce()
    store(box, "s1", "m")
    store(box, "s2", "m")
    assert box.deliver("s1", "m", now=1.0) is Action.DELIVER
    assert box.deliver("s2", "m", now=1.0) is Action.DELIVER


def test_deliver_before_the_store_finished_is_a_protocol_violation() -> None:
    box = ExactlyOnce()
    assert box.assured("s", "m", size=5, now=0.0) is Action.STORE
    assert box.assured("s", "m", size=5, now=0.0) is Action.ANSWER
    before = box.statistics()
    with pytest.raises(ProtocolViolation):
        box.deliver("s", "m", now=1.0)
    assert box.statistics() == before
    assert box.stored("s", "m")
    assert box.deliver("s", "m", now=1.0) is Action.DELIVER


def test_forget_undoes_the_reservation() -> None:
    box = ExactlyOnce()
    assert box.assured("s", "m", size=5, now=0.0) is Action.STORE
    box.forget("s", "m")
    box.forget("s", "m")  # no-op
    assert box.statistics() == ExactlyOnceStats(0, 0, 0, ())
    assert not box.stored("s", "m")  # gone: the caller deletes what it wrote
    assert box.deliver("s", "m", now=1.0) is Action.ANSWER_UNKNOWN
    assert box.assured("s", "m", size=5, now=2.0) is Action.STORE  # the retry stores it


def test_forget_of_a_delivered_id_makes_a_resend_a_new_message() -> None:
    box = ExactlyOnce()
    box.assured("s", "m", size=5, now=0.0)
    box.stored("s", "m")
    assert box.deliver("s", "m", now=1.0) is Action.DELIVER
    box.forget("s", "m")  # the file was lost before it went out
    assert box.assured("s", "m", size=5, now=2.0) is Action.STORE
    assert box.expire(now=10**9) == [("s", "m")]  # the old remembered deadline is skipped


def test_an_untrusted_source_is_not_allowed() -> None:
    box = ExactlyOnce(SMALL)
    with pytest.raises(NotAllowed, match="'x'"):
        box.assured("x", "m", size=1, now=0.0)
    assert box.statistics() == ExactlyOnceStats(0, 0, 0, ())


def test_a_source_is_trusted_by_any_name_its_caller_gives_but_never_by_a_part_of_it() -> None:
    box = ExactlyOnce(replace(SMALL, trusted_sources=frozenset({"alice@example.org"})))
    # the XMPP door's full JID, listed by its bare JID: trusted as the door names it
    full = "alice@example.org/phone"
    assert box.assured(full, "m", size=1, now=0.0, identities=("alice@example.org",)) is (
        Action.STORE
    )
    # not taken apart here: a source with a '/' (an MQTT client id may have one) is itself
    with pytest.raises(NotAllowed, match="phone"):
        box.assured(full, "n", size=1, now=0.0)
    with pytest.raises(InvalidArgument, match="identities is a tuple of str"):
        box.assured(full, "n", size=1, now=0.0, identities="alice@example.org")  # type: ignore[arg-type]
    assert box.statistics().pending == 1


def test_a_message_over_the_size_limit_is_too_large() -> None:
    box = ExactlyOnce(SMALL)
    with pytest.raises(MessageTooLarge, match="max_message_size"):
        box.assured("a", "m", size=61, now=0.0)
    with pytest.raises(InvalidArgument):
        box.assured("a", "m", size=-1, now=0.0)
    store(box, "a", "m", size=60)


@pytest.mark.parametrize(
    ("limits", "size", "limit"),
    [
        (replace(SMALL, max_bytes_per_source=50), 51, "max_bytes_per_source"),
        (replace(SMALL, max_bytes_total=40, max_bytes_per_source=50), 41, "max_bytes_total"),
    ],
)
def test_a_message_no_room_could_ever_take_is_too_large_not_a_wait(
    limits: ExactlyOnceLimits, size: int, limit: str
) -> None:
    """Alone over a cap on bytes (under max_message_size): ResourceConstraint told the sender
    to wait (XMPP's `wait`), for room it can never have; it is too large, as over the size."""
    box = ExactlyOnce(limits)
    with pytest.raises(MessageTooLarge, match=f"{size} bytes is over {limit}"):
        box.assured("a", "m", size=size, now=0.0)
    assert box.statistics() == ExactlyOnceStats(0, 0, 0, ())
    store(box, "a", "m", size=size - 1)  # one byte less fits, on an empty book


@pytest.mark.parametrize(
    ("setup", "source", "size", "limit"),
    [
        ([("a", 10)] * 3, "a", 10, "max_pending_per_source"),
        ([("a", 50), ("a", 40)], "a", 11, "max_bytes_per_source"),
        ([("a", 1), ("a", 1), ("b", 1), ("b", 1), ("c", 1)], "c", 1, "max_pending_total"),
        ([("a", 60), ("b", 60)], "c", 31, "max_bytes_total"),
    ],
)
def test_limits_answer_resource_constraint_and_change_nothing(
    setup: list[tuple[str, int]], source: str, size: int, limit: str
) -> None:
    box = ExactlyOnce(SMALL)
    for i, (who, bytes_) in enumerate(setup):
        store(box, who, f"m{i}", size=bytes_)
    before = box.statistics()
    with pytest.raises(ResourceConstraint, match=limit):
        box.assured(source, "new", size=size, now=1.0)
    assert box.statistics() == before
    assert box.assured("a", "m0", size=size, now=1.0) is Action.ANSWER  # repeats still answered


def test_a_repeat_is_answered_even_when_full() -> None:
    box = ExactlyOnce(SMALL)
    for i in range(3):
        store(box, "a", f"m{i}")
    assert box.assured("a", "m1", size=10, now=1.0) is Action.ANSWER


def test_a_stored_message_whose_deliver_never_comes_expires() -> None:
    box = ExactlyOnce(SMALL)
    store(box, "a", "m1", now=0.0)
    store(box, "a", "m2", now=10.0)
    assert box.next_deadline() == 100.0
    assert box.expire(now=99.9) == []
    assert box.expire(now=110.0) == [("a", "m1"), ("a", "m2")]
    assert box.statistics() == ExactlyOnceStats(0, 0, 0, ())
    assert box.next_deadline() is None
    assert box.deliver("a", "m1", now=111.0) is Action.ANSWER_UNKNOWN


def test_a_re_sent_message_is_not_expired_by_its_old_deadline() -> None:
    box = ExactlyOnce(SMALL)
    store(box, "a", "m", now=0.0)
    box.forget("a", "m")
    store(box, "a", "m", now=30.0)
    assert box.next_deadline() == 130.0
    assert box.expire(now=100.0) == []
    assert box.expire(now=130.0) == [("a", "m")]


def test_delivered_ids_are_remembered_for_done_ttl() -> None:
    box = ExactlyOnce(SMALL)
    store(box, "a", "m", now=0.0)
    assert box.deliver("a", "m", now=10.0) is Action.DELIVER
    assert box.next_deadline() == 60.0
    assert box.assured("a", "m", size=10, now=59.0) is Action.ANSWER
    assert box.assured("a", "m", size=10, now=60.0) is Action.STORE  # forgotten: a new message
    assert box.stored("a", "m")
    assert box.statistics().remembered == 0


def test_expire_drops_remembered_ids_silently() -> None:
    box = ExactlyOnce(SMALL)
    store(box, "a", "m", now=0.0)
    box.deliver("a", "m", now=10.0)
    assert box.expire(now=60.0) == []
    assert box.statistics().remembered == 0
    assert box.next_deadline() is None
    assert box.deliver("a", "m", now=61.0) is Action.ANSWER_UNKNOWN


def test_done_ttl_zero_frees_the_id_at_once() -> None:
    # MQTT 5.0 §4.3.3: after PUBCOMP, a PUBLISH with the same packet id is a new message.
    box = ExactlyOnce(ExactlyOnceLimits(done_ttl=0.0))
    store(box, "c", "7")
    assert box.deliver("c", "7", now=1.0) is Action.DELIVER
    assert box.deliver("c", "7", now=1.0) is Action.ANSWER_UNKNOWN
    assert box.assured("c", "7", size=1, now=1.0) is Action.STORE
    assert box.statistics().remembered == 0


def test_drop_pending_frees_one_sources_room_and_its_ids_at_once() -> None:
    box = ExactlyOnce(SMALL)
    store(box, "a", "1", size=10)
    store(box, "a", "2", size=20)
    store(box, "b", "1", size=30)
    assert sorted(box.drop_pending("a")) == ["1", "2"]
    assert box.statistics() == ExactlyOnceStats(1, 30, 0, (SourceUsage("b", 1, 30),))
    assert box.assured("a", "1", size=10, now=1.0) is Action.STORE  # a new message, not a repeat
    assert box.deliver("a", "2", now=1.0) is Action.ANSWER_UNKNOWN
    assert box.drop_pending("nobody") == []
    assert box.expire(now=1000.0) == [("b", "1"), ("a", "1")]  # the dropped ones never expire


def test_restore_rebuilds_without_limit_checks() -> None:
    box = ExactlyOnce(SMALL)
    for i in range(5):
        box.restore("x", f"p{i}", size=100, since=float(i), delivered=False)  # untrusted, big
    box.restore("a", "d", size=10, since=20.0, delivered=True)
    box.restore("x", "p0", size=100, since=0.0, delivered=False)  # twice: no double count
    stats = box.statistics()
    assert stats == ExactlyOnceStats(5, 500, 1, (SourceUsage("x", 5, 500),))
    assert stats.source("x").pending == 5
    assert stats.source("nobody") == SourceUsage("nobody", 0, 0)
    assert box.assured("a", "d", size=10, now=21.0) is Action.ANSWER
    assert box.deliver("x", "p3", now=21.0) is Action.DELIVER
    box.restore("x", "p4", size=100, since=22.0, delivered=True)  # found in processed/
    assert box.statistics().pending == 3
    assert box.next_deadline() == 70.0  # the remembered "d": 20 + done_ttl


def test_limits_must_not_be_negative() -> None:
    with pytest.raises(InvalidArgument, match="pending_ttl"):
        ExactlyOnceLimits(pending_ttl=-1.0)
    with pytest.raises(InvalidArgument, match="max_pending_total"):
        ExactlyOnceLimits(max_pending_total=-1)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        # A count was compared as it came: True as 1, NaN as no limit (every `<` false),
        # 1.5 as a fraction of a message, and "5" or None a TypeError from the comparison.
        ({"max_pending_total": True}, "max_pending_total must be an int >= 0, not True"),
        ({"max_bytes_total": math.nan}, "max_bytes_total must be an int >= 0, not nan"),
        ({"max_message_size": 1.5}, "max_message_size must be an int >= 0, not 1.5"),
        ({"max_pending_per_source": "5"}, "max_pending_per_source must be an int >= 0, not '5'"),
        ({"max_bytes_per_source": None}, "max_bytes_per_source must be an int >= 0, not None"),
        # A ttl as every duration: NaN kept a message for ever, infinity too (OverflowError
        # nowhere, but a deadline no heap reaches), True a second.
        ({"pending_ttl": math.nan}, "pending_ttl must be a finite number of seconds >= 0"),
        ({"done_ttl": math.inf}, "done_ttl must be a finite number of seconds >= 0"),
        ({"done_ttl": True}, "done_ttl must be a finite number of seconds >= 0, not True"),
        ({"pending_ttl": "1h"}, "pending_ttl must be a finite number of seconds >= 0"),
        # A str is a collection of its characters: "client" was "in" "trusted-client".
        ({"trusted_sources": "trusted-client"}, "trusted_sources is None or a set of str"),
        ({"trusted_sources": {"a", 5}}, "trusted_sources is None or a set of str"),
    ],
)
def test_limits_of_the_wrong_type_are_refused_naming_them(
    given: dict[str, object], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(says)):
        ExactlyOnceLimits(**given)  # type: ignore[arg-type]


def test_trusted_sources_may_be_any_collection_of_str() -> None:
    assert ExactlyOnceLimits(trusted_sources=frozenset()).trusted_sources == frozenset()
    single: Any = {"a"}
    assert ExactlyOnceLimits(trusted_sources=single).trusted_sources == frozenset({"a"})
    listed: Any = ["a", "b"]
    assert ExactlyOnceLimits(trusted_sources=listed).trusted_sources == frozenset({"a", "b"})
    assert ExactlyOnceLimits(trusted_sources=None).trusted_sources is None


# -- property: counts always equal a recount of what the caller holds --------------------------

SOURCES = st.sampled_from(["a", "b", "c", "x"])
IDS = st.sampled_from(["1", "2", "3", "4"])
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("assured"),
            SOURCES,
            IDS,
            st.integers(0, 70),
            st.sampled_from(["stored", "forget", "later"]),
        ),
        st.tuples(st.just("stored"), SOURCES, IDS),
        st.tuples(st.just("deliver"), SOURCES, IDS),
        st.tuples(st.just("forget"), SOURCES, IDS),
        st.tuples(st.just("expire")),
        st.tuples(st.just("drop"), SOURCES),
        st.tuples(st.just("tick"), st.floats(0, 60)),
    ),
    max_size=60,
)


def _recount(files: dict[tuple[str, str], int]) -> ExactlyOnceStats:
    usage: dict[str, list[int]] = {}
    for (source, _), size in files.items():
        entry = usage.setdefault(source, [0, 0])
        entry[0] += 1
        entry[1] += size
    sources = tuple(SourceUsage(s, n, b) for s, (n, b) in sorted(usage.items()))
    return ExactlyOnceStats(len(files), sum(files.values()), 0, sources)


@given(OPS)
def test_counts_equal_a_naive_recount_after_any_sequence(ops: list[tuple[object, ...]]) -> None:
    box = ExactlyOnce(SMALL)
    files: dict[tuple[str, str], int] = {}  # what the caller has in working/
    delivered: list[tuple[str, str]] = []
    now = 0.0
    for op in ops:
        before = box.statistics()
        try:
            now = _apply(box, op, files, delivered, now)
        except BoxMQError:
            assert box.statistics() == before  # a refusal changes nothing
        stats = box.statistics()
        assert stats.pending >= 0
        assert stats.pending_bytes >= 0
        assert all(u.pending > 0 and u.pending_bytes >= 0 for u in stats.sources)
        assert stats.pending <= SMALL.max_pending_total
        assert stats.pending_bytes <= SMALL.max_bytes_total
        assert stats.sources == _recount(files).sources
        assert (stats.pending, stats.pending_bytes) == (len(files), sum(files.values()))
    assert "x" not in {source for source, _ in delivered}


def _apply(
    box: ExactlyOnce,
    op: tuple[object, ...],
    files: dict[tuple[str, str], int],
    delivered: list[tuple[str, str]],
    now: float,
) -> float:
    kind = op[0]
    if kind == "tick":
        assert isinstance(op[1], float)
        return now + op[1]
    if kind == "expire":
        for key in box.expire(now=now):
            del files[key]
        return now
    if kind == "drop":
        dropped = box.drop_pending(str(op[1]))
        assert sorted(dropped) == sorted(m for s, m in files if s == op[1])
        for msg_id in dropped:
            del files[str(op[1]), msg_id]
        return now
    source, msg_id = str(op[1]), str(op[2])
    key = (source, msg_id)
    if kind == "assured":
        assert isinstance(op[3], int)
        if box.assured(source, msg_id, size=op[3], now=now) is Action.STORE:
            assert key not in files  # never stored twice
            files[key] = op[3]
            if op[4] == "stored":
                assert box.stored(source, msg_id)
            elif op[4] == "forget":
                box.forget(source, msg_id)
                del files[key]
    elif kind == "stored":
        assert box.stored(source, msg_id) is (key in files)
    elif kind == "forget":
        box.forget(source, msg_id)
        files.pop(key, None)
    elif box.deliver(source, msg_id, now=now) is Action.DELIVER:
        del files[key]  # moved working/ -> target/: only what was stored, once
        delivered.append(key)
    return now


def test_reclaim_takes_a_delivered_id_for_a_new_message() -> None:
    box = ExactlyOnce()
    assert box.assured("s", "m", size=1, now=0.0) is Action.STORE
    box.stored("s", "m")
    assert box.deliver("s", "m", now=1.0) is Action.DELIVER
    assert box.assured("s", "m", size=1, now=2.0) is Action.ANSWER  # a late repeat
    assert box.assured("s", "m", size=1, now=2.0, reclaim=True) is Action.STORE
    assert box.assured("s", "m", size=1, now=2.0, reclaim=True) is Action.ANSWER  # pending
    box.stored("s", "m")
    assert box.deliver("s", "m", now=3.0) is Action.DELIVER
    assert box.deliver("s", "m", now=4.0) is Action.ANSWER


def test_the_pending_deadline_heap_stays_near_the_number_pending() -> None:
    """MQTT's QoS 2 delivers each message long before its pending_ttl: the deadlines of the
    delivered ones must not pile up till then (30,000 a second for an hour)."""
    box = ExactlyOnce(ExactlyOnceLimits(done_ttl=0.0))  # MQTT's: nothing remembered
    store(box, "kept", "1", now=0.0)  # pending all along: every rebuild keeps it
    for index in range(20_000):
        now = 1.0 + index / 1000
        store(box, "c", str(index % 65_535), now=now)
        assert box.deliver("c", str(index % 65_535), now=now) is Action.DELIVER
    assert len(box._pending_deadlines) <= 2 * box.statistics().pending + 1024
    store(box, "late", "1", now=30.0)
    assert box.next_deadline() == 3600.0
    assert box.expire(now=3599.0) == []
    assert box.expire(now=3600.0) == [("kept", "1")]
    assert box.expire(now=3630.0) == [("late", "1")]
    assert box.next_deadline() is None


# A step on a box against a plain dict of what is pending and when it expires: store
# (assured then stored) or restore, either some seconds back, so that deadlines come out of
# the order they were added in; churn (stored and delivered, some times over: MQTT's QoS 2,
# which leaves stale heap items), deliver, forget, drop one source's, expire, and tick.
BOOK_STEPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["store", "restore"]), SOURCES, IDS, st.integers(0, 5)),
        st.tuples(st.just("churn"), SOURCES, IDS, st.integers(1, 20)),
        st.tuples(st.sampled_from(["deliver", "forget"]), SOURCES, IDS),
        st.tuples(st.just("drop"), SOURCES),
        st.tuples(st.just("expire")),
        st.tuples(st.just("tick"), st.integers(0, 6)),
    ),
    max_size=200,
)


@given(BOOK_STEPS)
def test_expire_gives_exactly_the_pending_past_their_ttl_through_rebuilds(
    steps: list[tuple[object, ...]],
) -> None:
    """With the rebuild's slack small enough that the heap is rebuilt often: it never holds
    more than twice the pending messages and the slack, and `expire` and `next_deadline`
    answer as a scan of every pending one does."""
    box = ExactlyOnce(ExactlyOnceLimits(pending_ttl=10.0, done_ttl=0.0), stale_slack=2)
    model: dict[tuple[str, str], float] = {}  # pending -> its deadline
    now = 0.0
    for step in steps:
        kind = step[0]
        if kind == "tick":
            assert isinstance(step[1], int)
            now += step[1]
        elif kind == "expire":
            due = sorted((deadline, *key) for key, deadline in model.items() if deadline <= now)
            assert box.expire(now=now) == [(source, msg_id) for _, source, msg_id in due]
            model = {key: deadline for key, deadline in model.items() if deadline > now}
        elif kind == "drop":
            dropped = box.drop_pending(str(step[1]))
            assert sorted(dropped) == sorted(m for s, m in model if s == step[1])
            model = {key: deadline for key, deadline in model.items() if key[0] != step[1]}
        else:
            key = (str(step[1]), str(step[2]))
            if kind == "store" and key not in model:
                assert isinstance(step[3], int)
                store(box, *key, now=now - step[3])
                model[key] = now - step[3] + 10.0
            elif kind == "churn" and key not in model:
                assert isinstance(step[3], int)
                for _ in range(step[3]):
                    store(box, *key, now=now)
                    assert box.deliver(*key, now=now) is Action.DELIVER
            elif kind == "deliver" and key in model:
                assert box.deliver(*key, now=now) is Action.DELIVER
                del model[key]
            elif kind == "forget":
                box.forget(*key)
                model.pop(key, None)
            elif kind == "restore":  # found in working/ again
                assert isinstance(step[3], int)
                box.restore(*key, size=1, since=now - step[3], delivered=False)
                model[key] = now - step[3] + 10.0
        assert len(box._pending_deadlines) <= 2 * len(model) + 2
        assert box.next_deadline() == min(model.values(), default=None)
