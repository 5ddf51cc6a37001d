"""Outgoing stanzas as XML text, written straight from values.

No stanza objects: a notification is one f-string, which is most of why the door spends a
fraction of what slixmpp's ElementBase layer would (docs/xmpp.md, Performance). Attribute
values and text always go through `quoteattr`/`escape`; payloads are XML that was parsed
(and so is well formed) before it was stored.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from xml.etree.ElementTree import Element
from xml.sax.saxutils import escape, quoteattr

from slixmpp.xmlstream import tostring

from boxmq.xmpp import ns
from boxmq.xmpp.conditions import Condition
from boxmq.xmpp.requests import Iq

__all__ = [
    "attr",
    "disco_info",
    "disco_items",
    "error",
    "event",
    "event_delete",
    "event_subscription",
    "form",
    "iq_set",
    "recurring_attr",
    "result",
    "xml_of",
]


_PLAIN = re.compile(r"[^&<>'\"\r\n\t]*")


def attr(value: str) -> str:
    """An attribute value, quoted: ids and JIDs are plain almost always, and checking that
    with one regular expression costs a fifth of `quoteattr` (which handles the rest)."""
    return f"'{value}'" if _PLAIN.fullmatch(value) else quoteattr(value)


@functools.lru_cache(maxsize=1024)
def recurring_attr(value: str) -> str:
    """`attr` for the values that come back stanza after stanza (JIDs, node names, the
    service's own address): each is checked and quoted once, then looked up. The cache is
    bounded (the least recently used of 1,024 values goes) and keyed by the value, so it
    cannot answer for another value. Ids, new in every stanza, take `attr`. Each stanza of
    an item has two or three such values: looked up, they cost a quarter of `attr`
    (docs/benchmarks.md, XMPP, 2026-11-24: 26,000 fewer instructions per item, 4 %)."""
    return attr(value)


def xml_of(element: Element) -> str:
    """An element as XML text, its namespaces declared where they start (slixmpp's writer).

    A payload is most often one element with text and plain attributes (a publish's
    `<job xmlns='urn:example'>…</job>`): that one is written here, exactly as slixmpp's
    `tostring` writes it (a Hypothesis test holds the two together), for 12,500 fewer
    instructions per item, 2 % (tostring escapes character by character in Python).
    Anything else takes `tostring`."""
    tag = element.tag
    if len(element) or tag[:1] != "{":
        return tostring(element, top_level=True)
    namespace, _, name = tag[1:].partition("}")
    if not namespace or "}" in name or _needs_escape(namespace):
        return tostring(element, top_level=True)  # (it would write such a namespace as is)
    out = f'<{name} xmlns="{namespace}"'
    for key, value in element.attrib.items():
        if "}" in key:  # namespaced attributes: tostring's own rules
            return tostring(element, top_level=True)
        out += f' {key}="{_escape(value)}"'
    text, tail = element.text, element.tail
    out += f">{_escape(text)}</{name}>" if text else " />"
    return out + _escape(tail) if tail else out


def _needs_escape(text: str) -> bool:
    return "&" in text or "<" in text or ">" in text or "'" in text or '"' in text


def _escape(text: str) -> str:
    """slixmpp's `escape`: & < > ' " as entities (chained replaces: each is one pass in C,
    and gives back the same string when there is nothing to replace)."""
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("'", "&apos;")
        .replace('"', "&quot;")
    )


def result(iq: Iq, inner: str = "") -> str:
    """The iq-result for `iq`, from whichever address it was sent to (XEP-0114 keeps it)."""
    return (
        f"<iq type='result' id={attr(iq.id)} to={recurring_attr(iq.sender)} "
        f"from={recurring_attr(iq.to)}>{inner}</iq>"
    )


def error(iq: Iq, condition: Condition, *, text: str = "", inner: str | None = None) -> str:
    """The iq-error for `iq`: the request echoed (or `inner`), then the error (RFC 6120 §8.3)."""
    echoed = inner if inner is not None else (xml_of(iq.child) if iq.child is not None else "")
    feature = f" feature={attr(condition.feature)}" if condition.feature is not None else ""
    extra = (
        f"<{condition.pubsub} xmlns='{ns.PUBSUB_ERRORS}'{feature}/>"
        if condition.pubsub is not None
        else ""
    )
    said = f"<text xmlns='{ns.STANZAS}'>{escape(text)}</text>" if text else ""
    return (
        f"<iq type='error' id={attr(iq.id)} to={recurring_attr(iq.sender)} "
        f"from={recurring_attr(iq.to)}>{echoed}<error type='{condition.type}'>"
        f"<{condition.name} xmlns='{ns.STANZAS}'/>{extra}{said}</error></iq>"
    )


def iq_set(iq_id: str, sender: str, to: str, inner: str) -> str:
    return (
        f"<iq type='set' id={attr(iq_id)} to={recurring_attr(to)} "
        f"from={recurring_attr(sender)}>{inner}</iq>"
    )


def event(
    message_id: str, sender: str, to: str, node: str, inner: str, *, wrapped: bool = False
) -> str:
    """A pubsub#event message: `inner` is the <item/>, <retract/> or <unlock/> in <items/>.
    `wrapped`: it goes inside a urn:xmpp:qos element, so it names its own namespace."""
    xmlns = " xmlns='jabber:client'" if wrapped else ""
    return (
        f"<message{xmlns} id={attr(message_id)} to={recurring_attr(to)} "
        f"from={recurring_attr(sender)}><event xmlns='{ns.PUBSUB_EVENT}'>"
        f"<items node={recurring_attr(node)}>{inner}</items>"
        "</event></message>"
    )


def event_subscription(
    message_id: str, sender: str, to: str, node: str, jid: str, subid: str, state: str
) -> str:
    """The pubsub#event that tells a subscriber its subscription is now `state` (`none`: the
    service ended it; XEP-0060 §8.8.4, "Notification of Subscription State Changes")."""
    return (
        f"<message id={attr(message_id)} to={recurring_attr(to)} "
        f"from={recurring_attr(sender)}><event xmlns='{ns.PUBSUB_EVENT}'>"
        f"<subscription node={recurring_attr(node)} jid={recurring_attr(jid)} "
        f"subid={attr(subid)} subscription={attr(state)}/></event></message>"
    )


def event_delete(message_id: str, sender: str, to: str, node: str) -> str:
    """The pubsub#event that tells a subscriber its node was deleted (XEP-0060 §8.4.2)."""
    return (
        f"<message id={attr(message_id)} to={recurring_attr(to)} "
        f"from={recurring_attr(sender)}><event xmlns='{ns.PUBSUB_EVENT}'>"
        f"<delete node={recurring_attr(node)}/></event></message>"
    )


def form(form_type: str, fields: Iterable[tuple[str, str | None, str]], *, type: str) -> str:
    """A jabber:x:data form; fields are (var, value or None, field type, "" for none)."""
    parts = [
        f"<x xmlns='{ns.DATA}' type='{type}'><field var='FORM_TYPE' type='hidden'>"
        f"<value>{escape(form_type)}</value></field>"
    ]
    for var, value, field_type in fields:
        typed = f" type='{field_type}'" if field_type else ""
        inside = f"<value>{escape(value)}</value>" if value is not None else "<required/>"
        parts.append(f"<field var={attr(var)}{typed}>{inside}</field>")
    parts.append("</x>")
    return "".join(parts)


def disco_info(node: str | None, identity: tuple[str, str, str], features: Iterable[str]) -> str:
    category, kind, name = identity
    at = f" node={attr(node)}" if node is not None else ""
    found = "".join(f"<feature var={attr(f)}/>" for f in features)
    return (
        f"<query xmlns='{ns.DISCO_INFO}'{at}><identity category={attr(category)} "
        f"type={attr(kind)} name={attr(name)}/>{found}</query>"
    )


def disco_items(node: str | None, items: Iterable[tuple[str, str | None, str | None]]) -> str:
    """items: (jid, node or None, name or None)."""
    at = f" node={attr(node)}" if node is not None else ""
    parts = [f"<query xmlns='{ns.DISCO_ITEMS}'{at}>"]
    for jid, item_node, name in items:
        parts.append(f"<item jid={attr(jid)}")
        if item_node is not None:
            parts.append(f" node={attr(item_node)}")
        if name is not None:
            parts.append(f" name={attr(name)}")
        parts.append("/>")
    parts.append("</query>")
    return "".join(parts)
