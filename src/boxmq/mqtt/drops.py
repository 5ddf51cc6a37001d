"""How often the log speaks of messages dropped because a client's queue is full.

A subscriber that stopped reading while a publisher floods can lose thousands of messages a
second; one log line each would flood the log in turn. So the first drop for a client is told
at once, and the drops after it are counted and told as one line per client per `interval`
("client c1: queue full, N more message(s) dropped in the last 10s", as delivery.py writes
it), for as long as they go on. An interval without a drop ends the run: the next drop is a
first again.

The same counts serve failed TLS handshakes and sockets closed for a protocol error
(server.py), and refused CONNECTs (connect_answers.py), keyed by client host and reason in
place of a client id: a device that retries every second with an expired certificate, a
wrong password or a bad packet. And the packets a full disk refuses to a client (disk.py),
counted by client, a batch at a time.
Connections refused at a limit (`Refusals`) are told once while the limit holds, and counted
till one is accepted again.

A client that reconnects in a loop (connect_answers.py) is counted by client id, its first
few connections of a run told (`told`): one that comes back once after a network blip is
told as always.

Sans-IO: the caller passes `now` and writes the lines (those of the counts by client host
and reason, all alike, with `tell_by_host`). No count is lost: every drop is
either told as a first or counted into a later summary, and `flush` hands over what is
still counted (at shutdown).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from boxmq.clock import periodic_due
from boxmq.core.durations import spelled

__all__ = ["DropLog", "Refusals", "Summary", "tell_by_host"]

log = logging.getLogger("boxmq.mqtt")

INTERVAL: Final = 10.0  # seconds between two summary lines for one client

# What a run is counted by: a client id (str), or a (host, reason) pair for handshakes, told
# back as it was given, never a string to be parsed back.
Key = TypeVar("Key", bound=Hashable)


class Refusals:
    """Connections refused while a limit is reached (max_connections, the descriptors kept
    for files): the first refusal of a run is told, those after it counted, and the count
    told when a connection is accepted again: clients that reconnect in a loop would write
    a line per attempt."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0  # refused since the run began; 0 while none

    def refused(self) -> bool:
        """Count one refusal; whether it begins a run (and is to be told)."""
        self.count += 1
        return self.count == 1

    def accepted(self) -> int:
        """One is accepted: the run's refusals, which end (0: none to tell)."""
        count, self.count = self.count, 0
        return count


@dataclass(slots=True)
class _Run:
    """A client's drops since its first one was told."""

    ends: float  # when the current interval ends and its count is told
    counted: int = 0  # drops in the current interval, not told yet
    told: int = 1  # drops of the run told at once (up to DropLog.told)


@dataclass(frozen=True, slots=True)
class Summary(Generic[Key]):
    key: Key  # what the run is counted by: a client id, or a handshake's (host, reason)
    dropped: int  # messages dropped in the interval, after those already told


class DropLog(Generic[Key]):
    """Per client: whether a drop is told now, and the counts that are due."""

    def __init__(self, *, interval: float = INTERVAL, told: int = 1) -> None:
        self.interval = interval
        self.told = told  # how many of a run are told at once before the rest are counted
        self._runs: dict[Key, _Run] = {}  # only keys dropping lately: checked every tick

    def dropped(self, key: Key, *, now: float, count: int = 1) -> bool:
        """Count one drop for `key` (a client id, a handshake's host and reason), of `count`
        things (the packets of a batch); True when it is the first of a run and is to be told
        at once (with its count: not counted then)."""
        run = self._runs.get(key)
        if run is None:
            self._runs[key] = _Run(ends=now + self.interval)
            return True
        if run.told < self.told:
            run.told += 1
            return True
        run.counted += count
        return False

    def due(self, *, now: float) -> list[Summary[Key]]:
        """The counts of the intervals over by `now`; a run whose interval counted nothing
        is over."""
        summaries: list[Summary[Key]] = []
        for key, run in list(self._runs.items()):
            if not periodic_due(now, run.ends, self.interval):  # a clock stepped back too
                continue
            if run.counted:
                summaries.append(Summary(key, run.counted))
                run.counted, run.ends = 0, now + self.interval
            else:
                del self._runs[key]
        return summaries

    def summaries(self, *, now: float | None = None) -> list[Summary[Key]]:
        """The counts of the intervals over by `now` (`due`), or every count not told yet
        when `now` is None (`flush`: the broker is closing): what each summariser tells."""
        return self.flush() if now is None else self.due(now=now)

    def shift(self, by: float) -> None:
        """The wall clock was stepped `by` seconds (MqttServer tells it): the intervals under
        way end that much later or sooner, so a count says what `interval` it was over (a
        step forward told it at the next tick, "in the last 10s" for what a second counted)."""
        for run in self._runs.values():
            run.ends += by

    def flush(self) -> list[Summary[Key]]:
        """Every count not told yet, whatever the time (the broker is closing)."""
        summaries = [Summary(k, run.counted) for k, run in self._runs.items() if run.counted]
        self._runs.clear()
        return summaries


def tell_by_host(counts: DropLog[tuple[str, str]], what: str, *, now: float | None) -> None:
    """Log the counts by client host and reason over by `now` (None: all, at close), one line
    each: "host: 3 more `what` in the last 10s: reason" (refused CONNECTs, sockets closed
    silent or for a protocol error, failed TLS handshakes)."""
    for summary in counts.summaries(now=now):
        host, words = summary.key
        log.info(
            "%s: %d more %s in the last %s: %s",
            host,
            summary.dropped,
            what,
            spelled(counts.interval),
            words,
        )
