"""The exactly-once messages the QoS document's memory-attack rules refused, logged.

urn:xmpp:qos, Memory attacks: "Whenever invalid use of the assured messaging service is
detected, wether it be from untrusted sources or spam, an event should be logged ... so that
the source of the error can be found and appropriate counter measures taken." Each refusal is
answered (not-allowed, resource-constraint, not-acceptable for one over max_message_size); this
names its sender in the log: its first refusal at once, then at most one line a minute, which
counts the ones passed over since, so that a sender flooding the service cannot flood the log
too (core/refusal_lines.py, which the MQTT door's QoS 2 refusals share).
"""

from __future__ import annotations

import logging

from boxmq.core.refusal_lines import RefusalLines, passed_over_said

__all__ = ["RefusalLog"]

log = logging.getLogger("boxmq.xmpp")


class RefusalLog:
    def __init__(self) -> None:
        self._lines: RefusalLines[str] = RefusalLines()  # at most a line a minute a sender

    def refused(self, source: str, condition: str, why: str, *, now: float) -> None:
        """`source`'s exactly-once message was answered `condition` because `why`."""
        passed_over = self._lines.refused(source, now=now)
        if passed_over is None:
            return
        more = passed_over_said(passed_over)
        log.warning(
            "urn:xmpp:qos: an exactly-once message from %s refused, %s: %s%s",
            source,
            condition,
            why,
            more,
        )
