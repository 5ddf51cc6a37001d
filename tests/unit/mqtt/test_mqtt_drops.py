"""Drops on full queues, told sparingly: the first at once, then one count per interval."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import boxmq
from boxmq.mqtt.drops import DropLog, Summary, tell_by_host
from boxmq.mqtt.server import MqttServer
from boxmq.mqtt.settings import MqttSettings


def test_the_first_drop_is_told_and_the_next_are_counted_per_interval() -> None:
    drops: DropLog[str] = DropLog(interval=10)
    assert drops.dropped("slow", now=0)
    assert [drops.dropped("slow", now=t) for t in (1, 2, 3)] == [False, False, False]
    assert drops.dropped("other", now=5)  # each client has its own run
    assert drops.due(now=9.9) == []
    assert drops.due(now=10) == [Summary("slow", 3)]
    assert not drops.dropped("slow", now=12)  # the run goes on: counted
    assert drops.due(now=15) == []  # "other" dropped nothing after its first: its run is over
    assert drops.due(now=20) == [Summary("slow", 1)]
    assert drops.due(now=30) == []  # an interval without a drop ends the run
    assert drops.dropped("slow", now=31)  # a first again
    assert not drops.dropped("slow", now=32)
    assert drops.flush() == [Summary("slow", 1)]  # at shutdown, before its interval is over
    assert drops.flush() == []


def test_summaries_are_the_due_counts_at_a_tick_and_every_count_at_close() -> None:
    drops: DropLog[str] = DropLog(interval=10)
    for t in (0, 1, 2):
        drops.dropped("slow", now=t)
    drops.dropped("late", now=5)
    drops.dropped("late", now=6)
    assert drops.summaries(now=9.9) == []
    assert drops.summaries(now=10) == [Summary("slow", 2)]  # "late"'s interval goes on
    assert drops.summaries() == [Summary("late", 1)]  # closing: what is still counted
    assert drops.summaries() == []


def test_the_first_few_of_a_run_are_told_when_asked() -> None:
    """Reconnections (connect_answers.py): a client that comes back after a blip is told."""
    connections: DropLog[str] = DropLog(interval=10, told=3)
    assert [connections.dropped("c", now=t) for t in range(5)] == [True] * 3 + [False] * 2
    assert connections.due(now=10) == [Summary("c", 2)]
    assert not connections.dropped("c", now=11)  # the run goes on: counted, not told again
    assert connections.due(now=20) == [Summary("c", 1)]
    assert connections.due(now=30) == []  # over
    assert connections.dropped("c", now=31)


def test_a_clock_stepped_back_does_not_hold_a_count_back_for_the_step() -> None:
    """The clock stepped back an hour (NTP, `date -s`) during a run: its count was told an
    hour later, every drop of that hour in one line. It is told at the next tick."""
    drops: DropLog[str] = DropLog(interval=10)
    assert drops.dropped("slow", now=100)
    assert not drops.dropped("slow", now=105)
    back = 106 - 3600
    assert drops.due(now=back) == [Summary("slow", 1)]
    assert not drops.dropped("slow", now=back + 1)  # the run goes on, its next count due
    assert drops.due(now=back + 9.9) == []
    assert drops.due(now=back + 10) == [Summary("slow", 1)]


@given(st.lists(st.tuples(st.sampled_from("ab"), st.floats(0, 5)), max_size=60))
def test_every_drop_is_told_once_as_a_first_or_in_a_count(steps: list[tuple[str, float]]) -> None:
    drops: DropLog[str] = DropLog(interval=10)
    now, told = 0.0, 0
    for client_id, elapsed in steps:
        now += elapsed
        told += sum(s.dropped for s in drops.due(now=now))
        told += drops.dropped(client_id, now=now)
    told += sum(s.dropped for s in drops.flush())
    assert told == len(steps)


def test_a_key_is_told_back_as_it_was_given() -> None:
    """Failed handshakes count by (host, reason): an IPv6 host and a reason with ": " in it
    come back whole, with nothing to parse."""
    drops: DropLog[tuple[str, str]] = DropLog(interval=10)
    key = ("::1", "certificate verify failed: certificate has expired")
    assert drops.dropped(key, now=0)
    assert not drops.dropped(key, now=1)
    assert drops.flush() == [Summary(key, 1)]


def test_a_step_told_moves_the_interval_under_way() -> None:
    """A step forward of an hour (which MqttServer tells against the monotonic clock) told
    the count at the next tick, "in the last 10s" for what 3 s counted; a step back at once.
    Shifted by the step, each count is told when its interval is over."""
    drops: DropLog[str] = DropLog(interval=10)
    assert drops.dropped("slow", now=100)
    assert not drops.dropped("slow", now=103)
    drops.shift(3600)
    assert drops.due(now=3703) == []
    assert drops.due(now=3710) == [Summary("slow", 1)]
    assert not drops.dropped("slow", now=3712)
    drops.shift(-7200)
    assert drops.due(now=3712 - 7200) == []
    assert drops.due(now=3720 - 7200) == [Summary("slow", 1)]


def test_counts_by_host_are_told_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    refusals: DropLog[tuple[str, str]] = DropLog(interval=10)
    for t in (0, 1, 2):
        refusals.dropped(("10.0.0.7", "Bad user name or password"), now=t)
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        tell_by_host(refusals, "CONNECT(s) refused", now=9)
        assert caplog.messages == []  # the interval goes on
        tell_by_host(refusals, "CONNECT(s) refused", now=10)
    assert caplog.messages == [
        "10.0.0.7: 2 more CONNECT(s) refused in the last 10s: Bad user name or password"
    ]


def _drop_logs(server: MqttServer) -> list[DropLog[Any]]:
    """Every DropLog the server and the parts of its broker keep, however deep."""
    found: list[DropLog[Any]] = []
    seen: set[int] = set()
    todo: list[object] = [server]
    while todo:
        part = todo.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        if isinstance(part, DropLog):
            found.append(part)
            continue
        names = list(getattr(part, "__dict__", {})) + list(getattr(type(part), "__slots__", ()))
        for name in names:
            value = getattr(part, name, None)
            if type(value).__module__.startswith("boxmq.mqtt"):
                todo.append(value)
    return found


def test_every_count_moves_with_a_step_of_the_clock_the_server_tells(tmp_path: Path) -> None:
    """Of the server's seven counts (drops, refused CONNECTs, reconnections, sockets closed
    silent or for a protocol error, failed handshakes, packets the disk refused), two moved
    with a step of the wall clock and five told their count at the next tick, "in the last
    10s" for what a second counted; each, one added later too, moves alike."""
    with boxmq.open(tmp_path / "root", fsync="never") as box:
        server = MqttServer(box, MqttSettings())
        counts = _drop_logs(server)
        assert len(counts) >= 7
        for number, count in enumerate(counts):
            for _ in range(count.told + 1):  # the first told, one counted
                count.dropped(f"key {number}", now=1000.0)
        server._stepped((1000.0, 0.0), (4600.0, 0.0))  # an hour forward, no time passed
        assert [count.due(now=4609.5) for count in counts] == [[]] * len(counts)
        assert [len(count.due(now=4610.0)) for count in counts] == [1] * len(counts)
