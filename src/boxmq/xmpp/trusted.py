"""`ExactlyOnceLimits.trusted_sources` as the XMPP door reads it. The set is the box's, shared
with the MQTT door, which compares its `mqtt:<client id>` entries exactly (an MQTT client id is
case-sensitive), so it is never rewritten: the door keeps its own index of the entries by
their RFC 7622 form (jids.py), and names a sender by the entries it matches, so that
`Alice@Example.org` listed trusts `alice@example.org/phone`, whom the server stamps so."""

from __future__ import annotations

from collections.abc import Iterable

from boxmq.errors import InvalidArgument
from boxmq.model import MQTT_SOURCE_PREFIX
from boxmq.xmpp.jids import normal

__all__ = ["TrustedJids"]


class TrustedJids:
    """The trusted entries that name JIDs, by their normal form."""

    def __init__(self, sources: Iterable[str]) -> None:
        self._spellings: dict[str, tuple[str, ...]] = {}
        for entry in sorted(sources):
            if entry.startswith(MQTT_SOURCE_PREFIX):
                continue  # the MQTT door's
            form = normal(entry)
            if form is None:
                raise InvalidArgument(
                    f"trusted_sources: {entry!r} is no JID (RFC 7622), so no XMPP sender can "
                    f"match it: write a JID (alice@example.org) or an MQTT client's "
                    f"{MQTT_SOURCE_PREFIX}<client id>"
                )
            self._spellings[form] = (*self._spellings.get(form, ()), entry)

    def entries_of(self, *jids: str) -> tuple[str, ...]:
        """The entries, as written, that name any of `jids` (each in the door's normal form)."""
        return tuple(entry for jid in jids for entry in self._spellings.get(jid, ()))
