"""What an error bounced to the service says of the subscriber it was sent to.

A <message/> of type error comes back when the server or a client refused a notification.
It ends the sender's subscriptions (XEP-0254 §4) if it says the sender is gone or refuses;
one that says to try later leaves them, and the item comes back at its lock timeout.
"""

from __future__ import annotations

from typing import Final
from xml.etree.ElementTree import Element

from boxmq.xmpp import ns

__all__ = ["error_of", "says_gone"]

# The types of a bounced error that say try later, or send otherwise (RFC 6120 §8.3.2):
# the subscription stays (says_gone).
_TEMPORARY: Final = frozenset({"wait", "modify"})


def error_of(stanza: Element) -> tuple[str, str]:
    """The type and the defined condition of a stanza's <error/> (RFC 6120 §8.3.2), each ""
    if missing. The child keeps the namespace its sender wrote (slixmpp's filter renames the
    stanza's own tag alone): jabber:client or jabber:component:accept."""
    for child in stanza:
        if child.tag.rsplit("}", 1)[-1] == "error":
            conditions = (c.tag for c in child if c.tag.startswith("{" + ns.STANZAS + "}"))
            condition = next(conditions, "").rsplit("}", 1)[-1]
            return child.get("type", ""), condition
    return "", ""


def says_gone(error: tuple[str, str]) -> bool:
    """Whether a bounced error says its sender is gone or refuses the notifications, which
    ends its subscriptions: the types cancel and auth, whose errors are not to be retried
    (RFC 6120 §8.3.2), and recipient-unavailable of any type, a session gone, which the
    server answers for a full JID (RFC 6120 §8.3.3.13). wait and modify say try later, or
    send otherwise: temporary (XEP-0060 §12). Without a known type, gone, as before."""
    kind, condition = error
    return kind not in _TEMPORARY or condition == "recipient-unavailable"
