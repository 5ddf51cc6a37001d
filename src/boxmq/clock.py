"""Where time comes from. The core never reads a clock: callers pass `now`.

Deadlines are written on disk and compared by other processes, so the system clock is the wall
clock (seconds since the epoch), not a monotonic one.
"""

from __future__ import annotations

import math
import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock", "periodic_due"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    # time.time itself, not a method that calls it: the MQTT door reads the clock a few times
    # per message.
    now = staticmethod(time.time)


def periodic_due(now: float, next_at: float, interval: float) -> bool:
    """Whether a look made every `interval` seconds, next at `next_at` (its last plus the
    interval), is due at `now`: that time came, or it is further off than an interval, which
    only a wall clock stepped back since the last makes it (NTP, a virtual machine resumed,
    `date -s`). Without the second, a step back of an hour put the look off for an hour."""
    return not 0.0 < next_at - now <= interval


class ManualClock:
    """A clock that moves only when told to, for tests that must never sleep."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        # A NaN step was taken, and the clock read NaN for good: every deadline computed from
        # it failed far from here ("cannot convert float NaN to integer" at the next put).
        number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        if not number or not math.isfinite(seconds):
            raise ValueError(f"advance takes a finite number of seconds, not {seconds!r}")
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
