"""Incoming iq stanzas as values: `parse_iq(element)` -> one request dataclass; and a plain
<message/> to a node, `parse_message(element)` (urn:xmpp:qos's at-most-once level).

Works on ElementTree elements (what slixmpp hands over as `stanza.xml`), never on slixmpp's
stanza objects: reading a handful of attributes straight off the tree is what keeps the door
under its CPU budget (docs/xmpp.md, Performance). Lenient where XEP-0254's own examples are
(retract and unlock arrive as type='get' there, XEP-0060 says 'set': both are accepted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from xml.etree.ElementTree import Element

from boxmq.xmpp import ns
from boxmq.xmpp.conditions import INVALID_JID, INVALID_OPTIONS, NOT_ACCEPTABLE, Condition
from boxmq.xmpp.errors import StanzaError
from boxmq.xmpp.forms import FormError, SeveralValues, submitted, without_blanks
from boxmq.xmpp.jids import normal
from boxmq.xmpp.subscribe_options import refuse_unserved, refuse_unserved_values

__all__ = [
    "Configure",
    "Create",
    "Delete",
    "DiscoInfo",
    "DiscoItems",
    "Iq",
    "Publish",
    "QosAcknowledged",
    "QosAssured",
    "QosDeliver",
    "Request",
    "Retract",
    "RetrieveAffiliations",
    "RetrieveSubscriptions",
    "Subscribe",
    "Unacknowledged",
    "Unlock",
    "Unsubscribe",
    "bare",
    "parse_iq",
    "parse_message",
    "parse_request",
]


@dataclass(frozen=True, slots=True)
class Iq:
    """The envelope every request shares: who asked, whom, under which id."""

    id: str
    type: str
    sender: str  # the full JID, as the server stamped it
    to: str
    child: Element | None  # the request element, echoed in error replies
    children: int = 1  # how many the iq carries: RFC 6120 §8.2.3 allows a get/set one


@dataclass(frozen=True, slots=True)
class DiscoInfo:
    node: str | None


@dataclass(frozen=True, slots=True)
class DiscoItems:
    node: str | None


@dataclass(frozen=True, slots=True)
class Create:
    node: str
    config: dict[str, str]  # the node_config form sent beside it (XEP-0060 §8.1.3); {} if none


@dataclass(frozen=True, slots=True)
class Delete:
    node: str


@dataclass(frozen=True, slots=True)
class Configure:
    node: str
    submit: bool  # False: the owner asks for the form
    config: dict[str, str]  # the submitted form's fields (XEP-0060 §8.2.4); {} if none


@dataclass(frozen=True, slots=True)
class Subscribe:
    node: str
    jid: str
    options: dict[str, str] | None  # the subscribe_options form submitted; None: none, or cancelled


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    node: str
    jid: str
    subid: str | None  # the subscription it names (XEP-0060 §6.2.1); None if it names none


@dataclass(frozen=True, slots=True)
class RetrieveAffiliations:
    node: str | None  # XEP-0060 §5.7: the requester's affiliation with one node, or all


@dataclass(frozen=True, slots=True)
class RetrieveSubscriptions:
    node: str | None  # XEP-0060 §5.6: those of one node, or all the requester's


@dataclass(frozen=True, slots=True)
class Publish:
    node: str
    item_id: str | None
    payload: Element | None


@dataclass(frozen=True, slots=True)
class Retract:
    node: str
    item_id: str


@dataclass(frozen=True, slots=True)
class Unlock:
    node: str
    item_id: str


@dataclass(frozen=True, slots=True)
class QosAcknowledged:
    message: Element


@dataclass(frozen=True, slots=True)
class QosAssured:
    msg_id: str
    message: Element


@dataclass(frozen=True, slots=True)
class QosDeliver:
    msg_id: str


@dataclass(frozen=True, slots=True)
class Unacknowledged:
    """A plain <message/>, urn:xmpp:qos's at-most-once level ("a normal message stanza is
    used"): put on the node its address names, as an <acknowledged/> one is, unanswered."""

    id: str | None  # mirrored by an error answering it (RFC 6120 §8.3), if it has one
    type: str  # as written, "" for none
    sender: str  # the full JID, as the server stamped it
    to: str
    message: Element  # in jabber:client, as an <acknowledged/> one's


Request = (
    DiscoInfo
    | DiscoItems
    | Create
    | Delete
    | Configure
    | Subscribe
    | Unsubscribe
    | RetrieveSubscriptions
    | RetrieveAffiliations
    | Publish
    | Retract
    | Unlock
    | QosAcknowledged
    | QosAssured
    | QosDeliver
)

BAD_REQUEST: Final = Condition("modify", "bad-request")
SERVICE_UNAVAILABLE: Final = Condition("cancel", "service-unavailable")
_INVALID_PAYLOAD: Final = Condition("modify", "bad-request", "invalid-payload")
# XEP-0060 §7.1.3.6 and §7.2.3.4: a publish to a node whose items are kept (every node here),
# or a retract, that names no item
_ITEM_REQUIRED: Final = Condition("modify", "bad-request", "item-required")
# XEP-0060 §8.1.2: a create without a node asks for an instant node, which is not served
_INSTANT_NODE: Final = Condition("modify", "not-acceptable", "nodeid-required")

# XEP-0060's name for the feature each request not served here belongs to (§4.6's list); the
# ones served are answered before these are looked at.
_FEATURES: Final = {
    "default": "retrieve-default-sub",  # §6.4: a subscriber's defaults (the owner's: §8.3)
    "items": "retrieve-items",
    "options": "subscription-options",
}
_OWNER_FEATURES: Final = {
    "affiliations": "modify-affiliations",
    "default": "retrieve-default",
    "purge": "purge-nodes",
    "subscriptions": "manage-subscriptions",
}


# Requests served here that XEP-0060 sends as type='set' only: as a get they are malformed,
# and feature-not-implemented would deny a feature disco advertises.
_SET_ONLY: Final = frozenset({"create", "publish", "subscribe", "unsubscribe"})
_OWNER_SET_ONLY: Final = frozenset({"delete"})


def not_implemented(feature: str) -> Condition:
    """feature-not-implemented, naming the XEP-0060 feature (§7-§8: <unsupported/>)."""
    return Condition("cancel", "feature-not-implemented", "unsupported", feature)


_PUBSUB = ns.tag(ns.PUBSUB, "pubsub")
_OWNER = ns.tag(ns.PUBSUB_OWNER, "pubsub")
_PUBLISH = ns.tag(ns.PUBSUB, "publish")
_RETRACT = ns.tag(ns.PUBSUB, "retract")
_ITEM = ns.tag(ns.PUBSUB, "item")
_PUBLISH_OPTIONS = ns.tag(ns.PUBSUB, "publish-options")
_FORM = ns.tag(ns.DATA, "x")
_QUEUE_UNLOCK = ns.tag(ns.QUEUEING, "unlock")
# What XEP-0060 lets a request carry beside it in its <pubsub/>: a subscribe its options
# (§6.3.7), a publish its publish options (§7.1.5), a create its configuration (§8.1.3).
_COMPANIONS: Final = {
    ns.tag(ns.PUBSUB, "subscribe"): ns.tag(ns.PUBSUB, "options"),
    _PUBLISH: _PUBLISH_OPTIONS,
    ns.tag(ns.PUBSUB, "create"): ns.tag(ns.PUBSUB, "configure"),
}
_QUEUE_UNLOCK_TYPO = ns.tag(ns.QUEUEING_TYPO, "unlock")
_EMBEDDED_MESSAGE: Final = frozenset(
    {ns.tag(ns.CLIENT, "message"), ns.tag(ns.COMPONENT, "message")}
)
_IN_COMPONENT = f"{{{ns.COMPONENT}}}"


def bare(jid: str) -> str:
    """`user@host/resource` -> `user@host`."""
    return jid.split("/", 1)[0]


def parse_iq(element: Element) -> Iq:
    """The envelope of an iq; never fails, so every request can be answered."""
    return Iq(
        id=element.get("id", ""),
        type=element.get("type", ""),
        sender=_sender(element.get("from", "")),
        to=element.get("to", ""),
        child=element[0] if len(element) else None,
        children=len(element),
    )


def parse_message(element: Element) -> Unacknowledged:
    """A <message/> the component's stream carries, its tags taken to jabber:client: stored
    so, subscribers are handed what a client's stanza is, as from an <acknowledged/>."""
    return Unacknowledged(
        id=element.get("id"),
        type=element.get("type", ""),
        sender=_sender(element.get("from", "")),
        to=element.get("to", ""),
        message=_as_a_client_wrote_it(element),
    )


def _sender(jid: str) -> str:
    """The `from` in the form the door compares (jids.py); as it came if it is no JID, which
    a server never stamps, so that the request is still answered."""
    return normal(jid) or jid


def parse_request(iq: Iq) -> Request:
    """The request an iq get/set carries; StanzaError says why there is none."""
    if not iq.id:  # its answer could not be matched to it: served, it stored an item unseen
        raise StanzaError(
            BAD_REQUEST, "an iq needs an id, which its answer carries back (RFC 6120 §8.1.3)"
        )
    if iq.child is None:
        raise StanzaError(BAD_REQUEST, "an iq get/set needs one child element")
    if iq.children > 1:  # the others were dropped: a second publish lost
        raise StanzaError(
            BAD_REQUEST, f"an iq get/set carries one child element, this one {iq.children}"
        )
    return _request(iq, iq.child)


def _request(iq: Iq, child: Element) -> Request:
    tag = child.tag
    if tag == _PUBSUB:
        return _pubsub(iq, child)
    if tag == _OWNER:
        return _owner(iq, child)
    if tag == ns.tag(ns.DISCO_INFO, "query") and iq.type == "get":
        return DiscoInfo(child.get("node"))
    if tag == ns.tag(ns.DISCO_ITEMS, "query") and iq.type == "get":
        return DiscoItems(child.get("node"))
    if tag.startswith("{" + ns.QOS + "}") and iq.type == "set":
        return _qos(child)
    if tag.startswith(("{" + ns.DISCO_INFO + "}", "{" + ns.DISCO_ITEMS + "}", "{" + ns.QOS + "}")):
        raise StanzaError(BAD_REQUEST, f"{tag} in an iq of type {iq.type!r}")
    # RFC 6120 §8.4: a namespace the service does not understand
    raise StanzaError(SERVICE_UNAVAILABLE, f"{tag} is not served here")


def _pubsub(iq: Iq, pubsub: Element) -> Request:
    verb = _verb(pubsub)
    # The two requests of every queued item first, by their whole tag: one comparison each,
    # before the name is split off and matched (docs/benchmarks.md, XMPP, 2026-11-24).
    tag = verb.tag
    if tag == _RETRACT:  # get or set: XEP-0254 Listing 6 uses get
        return Retract(_node(verb.get("node")), _item_id(verb))
    if tag == _PUBLISH and iq.type == "set":
        if len(pubsub) > 1:  # a look only where there is more than the <publish/>
            _refuse_publish_options(pubsub)
        return _publish(verb)
    name = tag.rsplit("}", 1)[-1]
    node = verb.get("node")
    setter = iq.type == "set"
    if tag in (_QUEUE_UNLOCK, _QUEUE_UNLOCK_TYPO):
        return Unlock(_node(node), _item_id(verb))  # get or set: XEP-0254 Listing 10 uses get
    if tag != ns.tag(ns.PUBSUB, name):
        raise StanzaError(BAD_REQUEST, f"{tag} is no pubsub request")
    if name == "subscribe" and setter:
        return Subscribe(_node(node), _jid(verb, iq), _options(pubsub))
    if name == "unsubscribe" and setter:
        return Unsubscribe(_node(node), _jid(verb, iq), verb.get("subid") or None)
    if name == "affiliations" and not setter:
        return RetrieveAffiliations(node or None)
    if name == "subscriptions" and not setter:
        return RetrieveSubscriptions(node or None)
    if name == "create" and setter:
        if not node:
            raise StanzaError(_INSTANT_NODE, "name the node: instant nodes are not served here")
        return Create(node, _config(pubsub.find(ns.tag(ns.PUBSUB, "configure"))))
    raise _not_served(_FEATURES, f"pubsub {name} ({iq.type})", name, served=_SET_ONLY)


def _jid(verb: Element, iq: Iq) -> str:
    """The JID a subscribe or unsubscribe names, in the form the door compares (jids.py):
    the client writes it, and `Alice@localhost` is `alice@localhost`. The sender's bare JID
    if it names none."""
    written = verb.get("jid")
    if not written:
        return bare(iq.sender)
    jid = normal(written)
    if jid is None:
        raise StanzaError(INVALID_JID, f"{written!r} is no JID")
    return jid


def _verb(pubsub: Element) -> Element:
    """The one request a <pubsub/> (its owner's too) carries, beside it at most its
    companion. A second request was dropped without a word, the first one answered: a
    retract and a publish in one <pubsub/> lost the item published."""
    if not len(pubsub):
        raise StanzaError(BAD_REQUEST, "an empty <pubsub/>")
    verb = pubsub[0]
    if len(pubsub) > 1 and (len(pubsub) > 2 or pubsub[1].tag != _COMPANIONS.get(verb.tag)):
        names = ", ".join(f"<{child.tag.rsplit('}', 1)[-1]}/>" for child in pubsub)
        raise StanzaError(BAD_REQUEST, f"one request per <pubsub/>, not {names}")
    return verb


def _not_served(
    features: Mapping[str, str], what: str, name: str, *, served: frozenset[str]
) -> StanzaError:
    """A pubsub request boxmq does not serve: bad-request if it is one served as a set sent
    as a get, feature-not-implemented naming its XEP-0060 feature if it is one, else
    bad-request (no such request)."""
    if name in served:
        return StanzaError(BAD_REQUEST, f"{what}: send it as an iq of type 'set'")
    if name in features:
        return StanzaError(not_implemented(features[name]), f"{what} is not served here")
    return StanzaError(BAD_REQUEST, f"{what} is no pubsub request")


def _refuse_publish_options(pubsub: Element) -> None:
    """XEP-0060 §7.1.5: publish options are preconditions the node must meet (an access
    model, say). A node here has none to meet them with, and a publish that dropped them
    would go where its publisher forbade it to: refused, unless the form asks nothing (no
    field but its FORM_TYPE and labels, or cancelled), read as every other form is. A form
    that cannot be read (of another FORM_TYPE, a field given twice) asks something all the
    same, and is refused the same way."""
    form = _form_in(pubsub.find(_PUBLISH_OPTIONS))
    try:
        asked = submitted(form, ns.PUBLISH_OPTIONS)
    except FormError as error:
        raise _publish_options_refused(str(error)) from None
    if asked:
        raise _publish_options_refused(f"{next(iter(asked))}, ...")


def _publish_options_refused(what: str) -> StanzaError:
    return StanzaError(
        not_implemented("publish-options"),
        f"publish options ({what}) are not served here: publish without them",
    )


def _publish(verb: Element) -> Publish:
    node = _node(verb.get("node"))
    item = verb.find(_ITEM)
    if item is None:  # not payload-required: that is an <item/>'s without a payload
        raise StanzaError(_ITEM_REQUIRED, "publish one <item/> with a payload")
    if len(verb) > 1:  # XEP-0060 §7.1.1: one <item/>; the rest was dropped, a second one lost
        raise StanzaError(BAD_REQUEST, "publish one <item/> per request, and nothing beside it")
    if len(item) > 1:  # XEP-0060 §7.1.3.5
        raise StanzaError(_INVALID_PAYLOAD, "an item carries one payload element")
    if not len(item):
        return Publish(node, item.get("id"), None)
    if not _alone(item):
        raise StanzaError(_INVALID_PAYLOAD, "an item carries its payload element and no text")
    return Publish(node, item.get("id"), item[0])


def _alone(parent: Element) -> bool:
    """Whether the one child of `parent` has nothing beside it but XML's blanks, which a
    pretty-printed request has, and which are then dropped. Text beside it was stored as
    its tail, `<x/>text`, no one element: sent to subscribers as text, never the element."""
    child = parent[0]
    if without_blanks(parent.text or "") or without_blanks(child.tail or ""):
        return False
    child.tail = None
    return True


def _owner(iq: Iq, pubsub: Element) -> Request:
    verb = _verb(pubsub)
    name = verb.tag.rsplit("}", 1)[-1]
    if name == "delete" and iq.type == "set":
        return Delete(_node(verb.get("node")))
    if name == "configure":
        submit = iq.type == "set"
        return Configure(_node(verb.get("node")), submit, _config(verb) if submit else {})
    raise _not_served(
        _OWNER_FEATURES, f"pubsub#owner {name} ({iq.type})", name, served=_OWNER_SET_ONLY
    )


def _qos(child: Element) -> Request:
    name = child.tag.rsplit("}", 1)[-1]
    msg_id = child.get("msgId")
    if name == "deliver":
        return QosDeliver(_required(msg_id, "msgId"))
    if name not in ("acknowledged", "assured"):
        raise StanzaError(BAD_REQUEST, f"urn:xmpp:qos {name} is no request")
    # The schema's EmbeddedMessage: exactly one jabber:client <message/> (written in the
    # stream's namespace when it inherits it). Taking the first and dropping the rest lost
    # a second message its sender was told had been received.
    if len(child) != 1 or child[0].tag not in _EMBEDDED_MESSAGE or not _alone(child):
        raise StanzaError(BAD_REQUEST, f"<{name}/> carries one <message/> and nothing else")
    message = _as_a_client_wrote_it(child[0])
    if name == "acknowledged":
        return QosAcknowledged(message)
    return QosAssured(_required(msg_id, "msgId"), message)


def _as_a_client_wrote_it(message: Element) -> Element:
    """The embedded message in jabber:client. Written unqualified (as the QoS document's
    examples write it, under a prefixed <qos:acknowledged/>), it and its unqualified children
    are in the namespace of the stream the server wrote it on, the component's: stored so,
    subscribers would be handed a <message/> of a namespace no client's stanza has."""
    if message.tag.startswith(_IN_COMPONENT):
        for element in message.iter():
            if element.tag.startswith(_IN_COMPONENT):
                element.tag = ns.tag(ns.CLIENT, element.tag[len(_IN_COMPONENT) :])
    return message


def _options(pubsub: Element) -> dict[str, str] | None:
    """The submitted subscribe_options form's fields; None if there is none, or it is
    cancelled. A form that does not say one thing per field, or is of another FORM_TYPE, is an
    invalid group of options (XEP-0060 §6.3, form processing failure), and so is one with a
    field no subscription here honours (subscribe_options.py): refused here alone, before
    anything is subscribed or changed, for one value as for several."""
    form = _form_in(pubsub.find(ns.tag(ns.PUBSUB, "options")))
    try:
        options = submitted(form, ns.SUBSCRIBE_OPTIONS)
    except SeveralValues as error:
        refuse_unserved_values(error.var, error.values)  # the field's own reason, if it has one
        raise StanzaError(INVALID_OPTIONS, str(error)) from None
    except FormError as error:
        raise StanzaError(INVALID_OPTIONS, str(error)) from None
    if options is not None:
        refuse_unserved(options)
    return options


def _form_in(element: Element | None) -> Element | None:
    """The one data form a subscribe's <options/>, a configure's <configure/> or a publish's
    <publish-options/> carries; None if it carries none. Two were refused for neither: the
    first was read and the other dropped without a word, so a publish whose second form
    asked for an access model was stored where its publisher forbade it. A malformed
    request whatever the forms say (bad-request), before either is read."""
    if element is None:
        return None
    forms = element.findall(_FORM)
    if len(forms) > 1:
        name = element.tag.rsplit("}", 1)[-1]
        raise StanzaError(BAD_REQUEST, f"<{name}/> carries {len(forms)} data forms: send one")
    return forms[0] if forms else None


def _config(configure: Element | None) -> dict[str, str]:
    """A submitted node_config form's fields; {} if there is none, or it is of type 'cancel'
    (XEP-0060 §8.2.4). A form that does not say one thing per field, or is of another
    FORM_TYPE, is one the service cannot apply (XEP-0060 §8.2.5), as a field asking for another
    setting is (nodes.py's _refuse_config)."""
    form = _form_in(configure)
    try:
        return submitted(form, ns.NODE_CONFIG) or {}
    except SeveralValues as error:
        # XEP-0060's own form sends pubsub#roster_groups_allowed so: "it takes one" would
        # say one group would be applied, where no value of it is (nodes.py's _refuse_config)
        raise StanzaError(
            NOT_ACCEPTABLE,
            f"{error.var}={error.values!r} cannot be applied: no field of a node's "
            "configuration here takes several values, and every node has one fixed "
            "configuration (a configure get sends it)",
        ) from None
    except FormError as error:
        raise StanzaError(NOT_ACCEPTABLE, str(error)) from None


def _node(node: str | None) -> str:
    if not node:
        raise StanzaError(Condition("modify", "bad-request", "nodeid-required"), "no node")
    return node


def _item_id(verb: Element) -> str:
    """The id of the one <item/> a retract or unlock names. Two were one acted on and one
    left without a word; XEP-0060 §7.2.1 retracts one item per request, so they are refused
    before either is touched."""
    items = [child for child in verb if child.tag.rsplit("}", 1)[-1] == "item"]
    if len(items) > 1:
        raise StanzaError(BAD_REQUEST, f"{len(items)} items: one item per request")
    item_id = items[0].get("id") if items else None
    if not item_id:
        raise StanzaError(_ITEM_REQUIRED, "no item id")
    return item_id


def _required(value: str | None, what: str) -> str:
    if not value:
        raise StanzaError(BAD_REQUEST, f"{what} is required")
    return value
