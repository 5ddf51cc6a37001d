"""The ONE map from boxmq errors to stanza error conditions (RFC 6120 §8.3, XEP-0254 §2.3-2.4).

The XEP-0254 rows follow the document's text; where its listings disagree with it (Listing 8
shows <forbidden/> for "locked by another subscriber", which the text says is <conflict/>),
the text wins. docs/xmpp.md lists every such choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from boxmq.errors import (
    BoxMQError,
    Conflict,
    Forbidden,
    InvalidArgument,
    ItemNotFound,
    MessageTooLarge,
    NotAllowed,
    QueueNotFound,
    ResourceConstraint,
    StoreFailed,
    StoreFull,
    UnexpectedRequest,
)

__all__ = [
    "ANSWER_TOO_BIG",
    "FORBIDDEN",
    "INTERNAL",
    "INVALID_JID",
    "INVALID_OPTIONS",
    "NOT_ACCEPTABLE",
    "STOPPING",
    "Condition",
    "condition_for",
]


@dataclass(frozen=True, slots=True)
class Condition:
    """An error's type attribute and its RFC 6120 condition, plus an optional pubsub#errors one."""

    type: str
    name: str
    pubsub: str | None = None
    feature: str | None = None  # <unsupported feature=.../>: the XEP-0060 feature not served


_CONDITIONS: Final[Mapping[type[BoxMQError], Condition]] = {
    ItemNotFound: Condition("cancel", "item-not-found"),
    QueueNotFound: Condition("cancel", "item-not-found"),
    Forbidden: Condition("auth", "forbidden"),
    Conflict: Condition("cancel", "conflict"),
    UnexpectedRequest: Condition("wait", "unexpected-request"),
    ResourceConstraint: Condition("wait", "resource-constraint"),
    NotAllowed: Condition("cancel", "not-allowed"),
    MessageTooLarge: Condition("modify", "not-acceptable", "payload-too-big"),
    InvalidArgument: Condition("modify", "bad-request"),
    StoreFull: Condition("wait", "resource-constraint"),  # ENOSPC, EDQUOT: retry once freed
    StoreFailed: Condition("wait", "internal-server-error"),  # EIO, EROFS, EMFILE
}

INTERNAL: Final = Condition("wait", "internal-server-error")
# A queue whose target/ is a file: a store fault as the others are, but of type cancel, since
# waiting will not mend it (the operator must, docs/file-format.md).
BROKEN: Final = Condition("cancel", "internal-server-error")
# A request that reaches the component as it stops: what Prosody answers while no component
# is connected, which docs/xmpp.md tells clients to retry.
STOPPING: Final = Condition("wait", "remote-server-timeout")
# The refusals of a submitted form, as the request that carries it reads it and as the service
# answers what it asks: a subscribe's options (XEP-0060 §6.3.6) and a node configuration
# (§8.2.5). One place, so that the reader and the service cannot word one refusal two ways.
INVALID_OPTIONS: Final = Condition("modify", "bad-request", "invalid-options")
NOT_ACCEPTABLE: Final = Condition("modify", "not-acceptable")
# A subscribe whose jid is no JID, as its reader finds it, or not the requester's own, as the
# service does (XEP-0060 §6.1.3.1): one condition for both.
INVALID_JID: Final = Condition("modify", "bad-request", "invalid-jid")
# A result that would pass the stanza size limit: what it says cannot be cut (answers.py's
# send_answer), nor can a listing (listings.py): one condition for both.
ANSWER_TOO_BIG: Final = Condition("cancel", "resource-constraint")
# What only a node's owner may do (nodes.py), or a subscriber alone for itself (the service's
# unsubscribe of another JID, XEP-0060 §6.2.3.3).
FORBIDDEN: Final = Condition("auth", "forbidden")


def condition_for(error: BoxMQError) -> Condition:
    """The most specific mapping wins: walk the exception's MRO. A StanzaError (the door's
    own refusals) carries its condition already."""
    own = getattr(error, "condition", None)
    if isinstance(own, Condition):
        return own
    for cls in type(error).__mro__:
        found = _CONDITIONS.get(cls)
        if found is not None:
            return found
    return INTERNAL
