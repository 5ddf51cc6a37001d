"""Where time comes from. The core never reads a clock: callers pass `now`.

Deadlines are written on disk and compared by other processes, so the system clock is the wall
clock (seconds since the epoch), not a monotonic one.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    # time.time itself, not a method that calls it: the MQTT door reads the clock a few times
    # per message.
    now = staticmethod(time.time)


class ManualClock:
    """A clock that moves only when told to, for tests that must never sleep."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
