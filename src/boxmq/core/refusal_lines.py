"""Which refusals of a sender get a log line: its first at once, then at most one per interval.

urn:xmpp:qos, Memory attacks: invalid use of the assured messaging service (an untrusted
sender, a limit reached) "should be logged ... so that the source of the error can be found".
A sender flooding the service must not flood the log too: after a line about it, its
refusals for an interval are counted, not told, and its next line says how many were passed
over. Both doors use this, each with its own words: XMPP's exactly-once messages
(xmpp/refusals.py), MQTT's QoS 2 PUBLISHes (mqtt/publishing.py).

Sans-IO: the caller passes `now` and writes the line. No count is lost while a sender is
remembered; past `kept` senders, those whose interval is over are forgotten, and their
next refusal is a first again.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

__all__ = ["INTERVAL", "RefusalLines", "passed_over_said"]

INTERVAL: Final = 60.0  # seconds between two lines about one sender
_KEPT: Final = 1000  # senders remembered before the quiet ones are forgotten

Sender = TypeVar("Sender", bound=Hashable)


@dataclass(slots=True)
class _Quiet:
    until: float  # its next refusal before this is counted, not told
    passed_over: int = 0


class RefusalLines(Generic[Sender]):
    def __init__(self, *, interval: float = INTERVAL, kept: int = _KEPT) -> None:
        self.interval = interval
        self._kept = kept
        self._quiet: dict[Sender, _Quiet] = {}

    def refused(self, sender: Sender, *, now: float) -> int | None:
        """Count one refusal of `sender`: None if it is passed over (a line about it was
        told less than an interval ago); else a line is due now, and this is how many of
        its refusals were passed over since the last one (0: none, or a first)."""
        quiet = self._quiet.get(sender)
        if quiet is not None and now < quiet.until:
            quiet.passed_over += 1
            return None
        if len(self._quiet) >= self._kept:  # many senders: those quiet again are forgotten
            self._quiet = {s: q for s, q in self._quiet.items() if now < q.until}
        self._quiet[sender] = _Quiet(now + self.interval)
        return 0 if quiet is None else quiet.passed_over


def passed_over_said(passed_over: int) -> str:
    """What a line adds of the refusals passed over since the last one (nothing for none)."""
    return f" ({passed_over} more since the last line)" if passed_over else ""
