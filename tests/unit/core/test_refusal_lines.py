"""core/refusal_lines.py: one line per sender an interval, the passed-over ones counted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.refusal_lines import RefusalLines


def test_a_senders_first_refusal_is_told_then_one_line_an_interval_counts_the_rest() -> None:
    lines: RefusalLines[str] = RefusalLines(interval=60)
    assert lines.refused("a", now=0) == 0
    assert [lines.refused("a", now=t) for t in (1, 30, 59.9)] == [None, None, None]
    assert lines.refused("b", now=10) == 0  # each sender its own
    assert lines.refused("a", now=60) == 3
    assert lines.refused("a", now=61) is None
    assert lines.refused("a", now=500) == 1
    assert lines.refused("b", now=500) == 0  # nothing passed over since its last line


def test_past_the_senders_kept_those_quiet_again_are_forgotten_and_counted_as_firsts() -> None:
    lines: RefusalLines[int] = RefusalLines(interval=10, kept=3)
    for sender in range(3):
        assert lines.refused(sender, now=0) == 0
    assert lines.refused(0, now=5) is None  # counted: 0 is still in its interval
    assert lines.refused(3, now=20) == 0  # 0, 1, 2 are quiet again: forgotten
    assert lines.refused(0, now=21) == 0  # a first again, its passed-over count gone with it
    assert lines.refused(3, now=25) is None  # kept


def test_past_the_senders_kept_all_within_their_interval_new_senders_share_one_line() -> None:
    lines: RefusalLines[int] = RefusalLines(interval=10, kept=2)
    assert [lines.refused(s, now=0) for s in (0, 1)] == [0, 0]
    assert lines.refused(2, now=1) == 0  # the crowd's first line
    assert [lines.refused(s, now=2) for s in (3, 4, 2)] == [None, None, None]
    assert lines.remembered() == 2  # 2, 3 and 4 were never remembered
    assert lines.refused(0, now=5) is None  # the two remembered keep their own lines
    assert lines.refused(5, now=11) == 0  # 0 and 1 are quiet again: forgotten for 5
    assert lines.refused(6, now=11) == 0  # and 6
    assert lines.refused(7, now=12) == 3  # the crowd's next line counts 3, 4 and 2's
    assert lines.refused(0, now=12) is None  # forgotten, and no room: one of the crowd


refusals_in_time = st.lists(
    st.tuples(st.integers(0, 30), st.floats(0, 2, allow_nan=False)), max_size=300
)


@given(refusals_in_time)
def test_past_kept_senders_lines_an_interval_and_memory_stay_bounded(
    refusals: list[tuple[int, float]],
) -> None:
    """At most `kept` senders remembered, and at most `kept` + 1 lines (theirs and the
    crowd's) within any interval, however many senders a peer makes up."""
    lines: RefusalLines[int] = RefusalLines(interval=3, kept=4)
    now, told_at = 0.0, []
    for sender, step in refusals:
        now += step
        if lines.refused(sender, now=now) is not None:
            told_at.append(now)
        assert lines.remembered() <= 4
    for i, start in enumerate(told_at):
        assert sum(1 for t in told_at[i:] if t < start + 3) <= 5


@given(refusals_in_time)
def test_with_room_for_every_sender_each_line_counts_exactly_its_passed_over(
    refusals: list[tuple[int, float]],
) -> None:
    lines: RefusalLines[int] = RefusalLines(interval=3, kept=31)
    now, last_told, passed = 0.0, dict[int, float](), dict[int, int]()
    for sender, step in refusals:
        now += step
        said = lines.refused(sender, now=now)
        if said is None:
            assert now < last_told[sender] + 3
            passed[sender] += 1
        else:
            assert now >= last_told.get(sender, -3.0) + 3
            assert said == passed.get(sender, 0)
            last_told[sender], passed[sender] = now, 0
