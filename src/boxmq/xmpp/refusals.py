"""The exactly-once messages the QoS document's memory-attack rules refused, logged.

urn:xmpp:qos, Memory attacks: "Whenever invalid use of the assured messaging service is
detected, wether it be from untrusted sources or spam, an event should be logged ... so that
the source of the error can be found and appropriate counter measures taken." Each refusal is
answered (not-allowed, resource-constraint); this names its sender in the log: its first
refusal at once, then at most one line a minute, which counts the ones passed over since, so
that a sender flooding the service cannot flood the log too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

__all__ = ["RefusalLog"]

log = logging.getLogger("boxmq.xmpp")

INTERVAL: Final = 60.0  # seconds between two lines about one sender
_KEPT: Final = 1000  # senders remembered before the quiet ones are forgotten


@dataclass
class _Quiet:
    until: float  # its next refusal before this is counted, not logged
    passed_over: int = 0


class RefusalLog:
    def __init__(self, *, interval: float = INTERVAL) -> None:
        self._interval = interval
        self._quiet: dict[str, _Quiet] = {}

    def refused(self, source: str, condition: str, why: str, *, now: float) -> None:
        """`source`'s exactly-once message was answered `condition` because `why`."""
        quiet = self._quiet.get(source)
        if quiet is not None and now < quiet.until:
            quiet.passed_over += 1
            return
        more = f" ({quiet.passed_over} more since the last line)" if quiet else ""
        log.warning(
            "urn:xmpp:qos: an exactly-once message from %s refused, %s: %s%s",
            source,
            condition,
            why,
            more,
        )
        if len(self._quiet) >= _KEPT:  # many senders: those quiet again are forgotten
            self._quiet = {s: q for s, q in self._quiet.items() if now < q.until}
        self._quiet[source] = _Quiet(now + self._interval)
