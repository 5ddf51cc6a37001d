"""`ExactlyOnceLimits.trusted_sources` as the XMPP door reads it. The set is the box's, shared
with the MQTT door, which compares its `mqtt:<client id>` entries exactly (an MQTT client id is
case-sensitive), so it is never rewritten: the door keeps its own index of the entries by
their RFC 7622 form (jids.py), and names a sender by the entries it matches, so that
`Alice@Example.org` listed trusts `alice@example.org/phone`, whom the server stamps so. An
entry that is no JID (`billing job`, a source of the embedded API's `box.assured`) names no
XMPP sender: the door leaves it to the others, as it leaves the `mqtt:` ones."""

from __future__ import annotations

from collections.abc import Iterable

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
            if (form := normal(entry)) is None:
                continue  # no JID: another sender's (the embedded API names its own)
            self._spellings[form] = (*self._spellings.get(form, ()), entry)

    def entries_of(self, *jids: str) -> tuple[str, ...]:
        """The entries, as written, that name any of `jids` (each in the door's normal form)."""
        return tuple(entry for jid in jids for entry in self._spellings.get(jid, ()))
