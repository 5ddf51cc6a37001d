"""Deadlines: keys due at a time each, with `now` passed in (a manual clock)."""

from __future__ import annotations

import gc
import weakref

from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.deadlines import Deadlines


def test_a_key_is_due_once_at_its_time_and_forgotten() -> None:
    deadlines: Deadlines[str] = Deadlines()
    deadlines.set("a", 90.0)
    deadlines.set("b", 60.0)
    assert deadlines.next_deadline() == 60.0
    assert deadlines.due(59.9) == []
    assert deadlines.due(90.0) == ["b", "a"]  # earliest first, at its time included
    assert deadlines.due(1e9) == []
    assert len(deadlines) == 0
    assert deadlines.next_deadline() is None


def test_set_again_moves_the_time_both_ways_and_discard_drops_it() -> None:
    deadlines: Deadlines[str] = Deadlines()
    deadlines.set("a", 10.0)
    deadlines.set("a", 20.0)  # later: the item at 10 is stale
    assert deadlines.due(15.0) == []
    deadlines.set("a", 5.0)  # earlier again: two items at 5 and 20, one key
    deadlines.set("a", 20.0)
    deadlines.set("a", 5.0)
    assert deadlines.next_deadline() == 5.0
    assert deadlines.due(30.0) == ["a"]  # once, though several of its items were due
    deadlines.set("b", 40.0)
    deadlines.discard("b")
    deadlines.discard("never set")
    assert "b" not in deadlines
    assert deadlines.next_deadline() is None
    assert deadlines.due(50.0) == []


def test_stale_items_are_dropped_once_they_outnumber_the_keys() -> None:
    deadlines: Deadlines[int] = Deadlines(stale_slack=4)
    for key in range(100):  # connections that come and go, each leaving an item behind
        deadlines.set(key, 1000.0 + key)
        deadlines.discard(key)
    deadlines.set(-1, 2000.0)
    assert len(deadlines._heap) <= 2 * len(deadlines) + 4
    assert deadlines.due(5000.0) == [-1]


class _Connection:
    """A key that can be watched for its release."""


def test_a_key_discarded_or_set_again_is_not_held_by_its_stale_item() -> None:
    """A closed connection's client (its session, its buffers) stayed in the broker's timer
    heap until its keep-alive would have ended (found by bench/soak.py)."""
    deadlines: Deadlines[_Connection] = Deadlines()
    gone, moved = _Connection(), _Connection()
    deadlines.set(gone, 100.0)
    deadlines.set(moved, 200.0)
    deadlines.set(moved, 300.0)  # its item at 200 is stale
    deadlines.discard(moved)
    deadlines.discard(gone)
    watched = [weakref.ref(gone), weakref.ref(moved)]
    del gone, moved
    gc.collect()
    assert [ref() for ref in watched] == [None, None]
    assert deadlines.due(1000.0) == []


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 20) | st.none()), max_size=60))
def test_due_gives_what_a_scan_of_every_key_gives(steps: list[tuple[int, int | None]]) -> None:
    """The heap answers as the look at every key it replaces: set (None: discard), and at
    each step the keys due now."""
    deadlines: Deadlines[int] = Deadlines(stale_slack=2)
    times: dict[int, float] = {}
    for now, (key, when) in enumerate(steps):
        if when is None:
            deadlines.discard(key)
            times.pop(key, None)
        else:
            deadlines.set(key, float(when))
            times[key] = float(when)
        got = deadlines.due(float(now))
        assert sorted(got) == sorted(k for k, t in times.items() if t <= now)
        assert [times[k] for k in got] == sorted(times[k] for k in got)  # earliest first
        for k in got:
            del times[k]
        assert deadlines.next_deadline() == min(times.values(), default=None)


def test_shift_moves_every_time_and_forgets_nothing() -> None:
    """A wall clock stepped an hour forward: every key is due an hour later, in its order,
    and a key set again before the shift is due at its last time only."""
    deadlines: Deadlines[str] = Deadlines()
    deadlines.set("a", 10.0)
    deadlines.set("b", 5.0)
    deadlines.set("a", 20.0)  # its item at 10 is stale
    deadlines.shift(3600.0)
    assert deadlines.next_deadline() == 3605.0
    assert deadlines.due(3619.0) == ["b"]
    assert deadlines.due(3620.0) == ["a"]
    assert len(deadlines) == 0
