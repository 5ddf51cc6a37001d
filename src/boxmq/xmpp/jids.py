"""JIDs as XMPP compares them (RFC 7622 §3): `Alice@LocalHost/a` and `alice@localhost/a` are
one address, `alice@localhost/A` another. The door compares and keys subscribers, lock holders
and QoS answers by this form only, whether a JID came from a `from` the server stamped or from
an attribute the client wrote (a subscribe's `jid`), so that the two always meet."""

from __future__ import annotations

from functools import lru_cache

from slixmpp.jid import JID, InvalidJID

__all__ = ["normal"]


# Every iq's `from` passes here, and the same few senders come back stanza after stanza: a
# look-up is a tenth of slixmpp's 0.3 µs (docs/xmpp.md, Performance), and the bound keeps a
# flood of made-up JIDs from growing it.
@lru_cache(maxsize=4096)
def normal(jid: str) -> str | None:
    """`jid` in the form the XMPP server compares: the localpart case-folded (stringprep's
    nodeprep, as Prosody applies it), the domainpart lower-cased without its final dot, the
    resourcepart as written, since it is case-sensitive. None if `jid` is no JID (`a@b/`)."""
    try:
        return str(JID(jid))
    except InvalidJID:
        return None
