"""Errors only the XMPP door can raise: a request the protocol itself refuses."""

from __future__ import annotations

from boxmq.errors import ProtocolViolation
from boxmq.xmpp.conditions import Condition

__all__ = ["StanzaError"]


class StanzaError(ProtocolViolation):
    """A request refused in XMPP's own words (e.g. configuration-required, invalid-jid)."""

    def __init__(self, condition: Condition, text: str = "", *, payload: str | None = None) -> None:
        self.condition = condition
        self.payload = payload  # the error's child in place of the echoed request (Listing 1)
        super().__init__(text or condition.name)
