"""Which refusals of a sender get a log line: its first at once, then at most one per interval.

urn:xmpp:qos, Memory attacks: invalid use of the assured messaging service (an untrusted
sender, a limit reached) "should be logged ... so that the source of the error can be found".
A sender flooding the service must not flood the log too: after a line about it, its
refusals for an interval are counted, not told, and its next line says how many were passed
over. Both doors use this, each with its own words: XMPP's exactly-once messages
(xmpp/refusals.py), MQTT's QoS 2 PUBLISHes (mqtt/publishing.py).

Sans-IO: the caller passes `now` and writes the line. No count is lost while a sender is
remembered. Memory is bounded, since the senders are whoever a peer claims to be: at most
`kept` are remembered, in the order their intervals end; past `kept`, those quiet again are
forgotten from the front (a forgotten sender's next refusal is a first again). When all
`kept` are within their interval, a new sender is not remembered: all such senders share
one line an interval (the crowd's), which counts the refusals of all of them passed over.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

__all__ = ["INTERVAL", "RefusalLines", "passed_over_said"]

INTERVAL: Final = 60.0  # seconds between two lines about one sender
_KEPT: Final = 1000  # senders remembered at most

Sender = TypeVar("Sender", bound=Hashable)


@dataclass(slots=True)
class _Quiet:
    until: float  # its next refusal before this is counted, not told
    passed_over: int = 0


class RefusalLines(Generic[Sender]):
    def __init__(self, *, interval: float = INTERVAL, kept: int = _KEPT) -> None:
        self.interval = interval
        self._kept = kept
        # Oldest interval end first: a told sender moves to the end, so the quiet-again are
        # always at the front and forgetting them costs nothing per refusal.
        self._quiet: OrderedDict[Sender, _Quiet] = OrderedDict()
        self._crowd = _Quiet(until=float("-inf"))

    def refused(self, sender: Sender, *, now: float) -> int | None:
        """Count one refusal of `sender`: None if it is passed over (a line about it was
        told less than an interval ago); else a line is due now, and this is how many
        refusals were passed over since the last one (0: none, or a first). A sender not
        remembered, `kept` others being within their interval, shares the crowd's line."""
        quiet = self._quiet.get(sender)
        if quiet is not None:
            if now < quiet.until:
                quiet.passed_over += 1
                return None
            del self._quiet[sender]
        if len(self._quiet) >= self._kept:
            self._forget_quiet_again(now)  # only now: until then, no count is lost
            if len(self._quiet) >= self._kept:
                return self._crowd_refused(now)
        self._quiet[sender] = _Quiet(now + self.interval)
        return 0 if quiet is None else quiet.passed_over

    def remembered(self) -> int:
        """How many senders are remembered now (at most `kept`)."""
        return len(self._quiet)

    def _forget_quiet_again(self, now: float) -> None:
        while self._quiet:
            oldest = next(iter(self._quiet.values()))
            if now < oldest.until:
                return
            self._quiet.popitem(last=False)

    def _crowd_refused(self, now: float) -> int | None:
        crowd = self._crowd
        if now < crowd.until:
            crowd.passed_over += 1
            return None
        passed_over, crowd.passed_over, crowd.until = crowd.passed_over, 0, now + self.interval
        return passed_over


def passed_over_said(passed_over: int) -> str:
    """What a line adds of the refusals passed over since the last one (nothing for none)."""
    return f" ({passed_over} more since the last line)" if passed_over else ""
