"""The ticks' walk through the connected sessions with durable subscriptions, news or not:
each is pumped once per `WALK_EVERY` seconds, a share of them at each tick (all at once, 4,000
looks of 30-120 us would hold the loop a tenth of a second or more). For what no news tells:
the rescans and sweeps a live queue makes as it is pumped (broker.py `_walk_on` pumps them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

__all__ = ["WALK_EVERY", "IdleWalk"]

# Seconds in which the ticks pump each connected persistent session in turn, news or not:
# for what no news tells, a live queue's rescan of target/ (each 5 s) and sweep of
# processing/ (each 1 s while pumped) among them.
WALK_EVERY: Final = 5.0


class IdleWalk:
    """The client ids of this round, how far it went, and when."""

    def __init__(self, started: float) -> None:
        self._walk: list[str] = []
        self._walk_at = 0
        self._walked = started

    def next(
        self, now: float, durable: Mapping[str, object], links: Mapping[str, object]
    ) -> list[str]:
        """The client ids to pump at the tick of `now`: the next share of this round, or of
        a new one, through the fewer of the sessions with subscriptions on disk (`durable`:
        every offline one among them) and the connected clients (`links`: every clean one
        among them)."""
        walk = self._walk
        if self._walk_at >= len(walk):  # a new round, through those there are now
            self._walk = walk = list(durable if len(durable) < len(links) else links)
            self._walk_at = 0
        share = min(1.0, max(0.0, now - self._walked) / WALK_EVERY)
        self._walked = now
        start = self._walk_at
        self._walk_at = end = start + max(1, math.ceil(len(walk) * share))
        return walk[start:end]
