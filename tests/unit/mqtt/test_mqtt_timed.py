"""Work timed on the broker's clock (the delayed Wills, the ends of sessions away)."""

from __future__ import annotations

from boxmq.mqtt.timed import Timed


def test_the_runs_due_go_earliest_first_once_and_a_later_one_waits() -> None:
    ran: list[str] = []
    timed: Timed[str] = Timed()
    timed.set("b", 20, lambda: ran.append("b"))
    timed.set("a", 10, lambda: ran.append("a"))
    timed.set("c", 30, lambda: ran.append("c"))
    for run in timed.due(20):
        run()
    assert ran == ["a", "b"]
    assert "a" not in timed
    assert "c" in timed
    assert timed.next_deadline() == 30
    assert list(timed.due(20)) == []


def test_set_again_replaces_the_time_and_the_run_and_discard_drops_both() -> None:
    ran: list[str] = []
    timed: Timed[str] = Timed()
    timed.set("k", 10, lambda: ran.append("old"))
    timed.set("k", 15, lambda: ran.append("new"))
    assert list(timed.due(12)) == []
    for run in timed.due(15):
        run()
    assert ran == ["new"]
    timed.set("gone", 1, lambda: ran.append("gone"))
    timed.discard("gone")
    assert "gone" not in timed
    assert list(timed.due(100)) == []


def test_a_run_that_times_again_or_discards_a_key_due_in_the_same_look_is_heeded() -> None:
    ran: list[str] = []
    timed: Timed[str] = Timed()

    def first() -> None:
        timed.set("again", 50, lambda: ran.append("again"))
        timed.discard("gone")

    timed.set("first", 1, first)
    timed.set("again", 2, lambda: ran.append("too early"))
    timed.set("gone", 3, lambda: ran.append("gone"))
    for run in timed.due(10):
        run()
    assert ran == []
    assert "again" in timed
    assert timed.next_deadline() == 50


def test_a_step_moves_every_time_by_it() -> None:
    timed: Timed[str] = Timed()
    timed.set("k", 100, lambda: None)
    timed.shift(-60)
    assert timed.next_deadline() == 40
    assert len(list(timed.due(40))) == 1
