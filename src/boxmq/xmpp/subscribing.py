"""A subscribe's own fields, read as the service serves them, and the subscription it answers.

XEP-0254 §2.1's queue_requests (required, 1..10000) and boxmq#qos's level are checked here,
as is the JID a subscribe or unsubscribe names; subscribe_options.py refuses the fields and
values no one serves. The <subscription/> element is the one a subscribe's result, the
listing of subscriptions and a notice of its end all write.
"""

from __future__ import annotations

import re
from typing import Final

from boxmq.errors import InvalidArgument
from boxmq.xmpp import ns, render
from boxmq.xmpp.conditions import INVALID_OPTIONS, Condition
from boxmq.xmpp.errors import StanzaError
from boxmq.xmpp.qos_out import Level
from boxmq.xmpp.requests import Subscribe, bare
from boxmq.xmpp.subscribe_options import QOS_LEVEL, QUEUE_REQUESTS
from boxmq.xmpp.subscriptions import Subscription, consumer_name

__all__ = [
    "names_requester",
    "qos_level",
    "queue_requests_of",
    "subscription_element",
    "subscription_xml",
]

_CONFIGURATION_REQUIRED: Final = Condition("modify", "not-acceptable", "configuration-required")
_attr = render.attr  # not a function of its own: one call per attribute, not two


def names_requester(jid: str, sender: str) -> bool:
    """Whether a subscribe's or unsubscribe's `jid` names its sender: its bare JID, or its
    own full JID. XEP-0060 §6.1.3.1 asks a service to compare the bare JIDs "at a minimum";
    a subscription here is the sending resource's, so another resource of the same user
    would have been answered for and the sender subscribed (or unsubscribed) instead."""
    return jid in (bare(sender), sender)


def subscription_element(subscription: Subscription, state: str) -> str:
    return (
        f"<subscription jid={_attr(subscription.named)} node={_attr(subscription.node)} "
        f"subid={_attr(consumer_name(subscription.jid))} subscription='{state}'/>"
    )


def subscription_xml(subscription: Subscription, state: str) -> str:
    options = render.form(
        ns.SUBSCRIBE_OPTIONS,
        [
            (QUEUE_REQUESTS, str(subscription.queue_requests), ""),
            (QOS_LEVEL, subscription.qos.value, ""),
        ],
        type="result",
    )
    return (
        f"<pubsub xmlns='{ns.PUBSUB}'>{subscription_element(subscription, state)}"
        f"<options>{options}</options></pubsub>"
    )


_XS_INTEGER = re.compile(r"(?P<sign>[+-]?)(?P<digits>[0-9]+)")  # XML Schema 1.0, 3.3.13


def queue_requests_of(request: Subscribe) -> int:
    """XEP-0254 §2.1: no options -> configuration-required, with the form to fill in."""
    value = (request.options or {}).get(QUEUE_REQUESTS)
    if value is None:
        form = render.form(
            ns.SUBSCRIBE_OPTIONS, [(QUEUE_REQUESTS, None, "text-single")], type="form"
        )
        at = f"jid={_attr(request.jid)} node={_attr(request.node)}"
        raise StanzaError(
            _CONFIGURATION_REQUIRED,
            f"{QUEUE_REQUESTS} is required",
            payload=f"<pubsub xmlns='{ns.PUBSUB}'><subscribe {at}/><options {at}>{form}</options>"
            "</pubsub>",
        )
    # xs:integer's lexical form, whose blanks around it the form's reader took off
    # (forms.submitted): a client may write 10000 as "010000" or "+10000". Not int(),
    # which also takes "1_0" and other scripts' digits.
    written = _XS_INTEGER.fullmatch(value)
    digits = written["digits"].lstrip("0") if written and written["sign"] != "-" else ""
    count = int(digits) if 1 <= len(digits) <= 5 else 0  # 0: refused below, as is 10001..99999
    if not 1 <= count <= 10_000:
        raise StanzaError(INVALID_OPTIONS, f"{QUEUE_REQUESTS} must be 1..10000, not {value!r}")
    return count


def qos_level(written: str) -> Level:
    """The boxmq#qos option's level. A word that names none is an invalid option, refused as
    a bad queue_requests is (XEP-0060 §6.3.6: bad-request + invalid-options), not with the
    plain bad-request an InvalidArgument is answered with, which leaves the subscriber to
    guess that its options were at fault."""
    try:
        return Level.parse(written)
    except InvalidArgument as error:
        raise StanzaError(INVALID_OPTIONS, f"{QOS_LEVEL}: {error}") from None
