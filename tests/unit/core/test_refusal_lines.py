"""core/refusal_lines.py: one line per sender an interval, the passed-over ones counted."""

from __future__ import annotations

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
