"""The fields a subscribe's options form may carry, and which values of them are served.

XEP-0060 §6.3.6 (Form Processing, Failure): "an invalid group of options" is refused with
bad-request + invalid-options. A field no one serves here (a misspelt `pubsub#queue_request`)
is such a group, and so is a standard pubsub#subscribe_options field (§16.4.2) asking for
what the service does not do: answered result, the subscriber would believe it granted
(`pubsub#deliver` = false, and the items keep coming). A standard field asking for what every
subscription here is anyway, or left empty (slixmpp's `Form.reply()` sends a field left
unfilled so), is taken: a client library may fill them in for every service it talks to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from boxmq.xmpp.conditions import INVALID_OPTIONS
from boxmq.xmpp.errors import StanzaError

__all__ = ["QOS_LEVEL", "QUEUE_REQUESTS", "refuse_unserved", "refuse_unserved_values"]

QUEUE_REQUESTS: Final = "pubsub#queue_requests"  # XEP-0254 §2.1
QOS_LEVEL: Final = "boxmq#qos"  # how notifications are sent: docs/xmpp.md, QoS

_TRUE: Final = frozenset({"1", "true"})  # XML Schema's boolean, as XEP-0004 §3.3 writes it
_FALSE: Final = frozenset({"0", "false"})


def _one_of(*served: str) -> Callable[[str], bool]:
    return lambda value: value in served


# A standard field -> whether a value of it asks for what a subscription here is anyway. The
# checks of the service's own fields (queue_requests' range, the QoS level's word) are
# subscribing.py's.
_STANDARD: Final[Mapping[str, tuple[Callable[[str], bool], str]]] = {
    "pubsub#deliver": (
        _TRUE.__contains__,
        "every subscription is sent its items: unsubscribe to have none",
    ),
    "pubsub#digest": (_FALSE.__contains__, "items are sent one by one, never in digests"),
    # the period of digests, which are never sent: it asks for nothing
    "pubsub#digest_frequency": (lambda _: True, ""),
    "pubsub#include_body": (_FALSE.__contains__, "an item is sent as its payload, no <body/>"),
    # "presence" is what every subscription here does: unavailable presence ends it
    # (docs/xmpp.md, Clients: directed presence); a date would be a lease nothing ends
    "pubsub#expire": (_one_of("presence"), "a subscription ends at unavailable presence"),
    # a subscriber's <show/> is not looked at: a list of them would go unheeded
    "pubsub#show-values": (_one_of(), "items are sent whatever the subscriber's show"),
    "pubsub#subscription_type": (_one_of("items"), "a node sends items, not nodes"),
    # every node is a leaf, and the depth is a collection's (XEP-0248)
    "pubsub#subscription_depth": (_one_of("1", "all"), "every node here is a leaf"),
}


def refuse_unserved(options: Mapping[str, str]) -> None:
    """Refuse the form, naming the field, if one of its fields is not served or asks for what
    the service does not do; boxmq's own fields are read by the subscribe that takes them."""
    for var, value in options.items():
        refuse_unserved_values(var, [value])


def refuse_unserved_values(var: str, values: Sequence[str]) -> None:
    """Refuse field `var` given `values`, as `refuse_unserved` does one value: the forms'
    reader refuses a field of several values for their count, which is the wrong reason for
    a field refused whatever it is given (XEP-0060's own options form lists pubsub#show-values,
    which no value of is served)."""
    if var in (QUEUE_REQUESTS, QOS_LEVEL):
        return
    standard = _STANDARD.get(var)
    if standard is None:
        served = ", ".join([QUEUE_REQUESTS, QOS_LEVEL, *_STANDARD])
        raise StanzaError(
            INVALID_OPTIONS, f"{var} is no subscription option here: the options are {served}"
        )
    taken, why = standard
    refused = [value for value in values if value and not taken(value)]
    if refused:
        shown = repr(refused[0]) if len(values) == 1 else repr(list(values))
        raise StanzaError(INVALID_OPTIONS, f"{var}={shown} cannot be honoured: {why}")
