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
    "message_error",
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
    """An element as XML text that parses back to it, its namespaces declared where they
    start, as slixmpp's `tostring` writes them.

    Not `tostring` itself, which changed what it wrote: a tab, line feed or carriage return
    in an attribute went out as it was, which every parser reads as a space (XML 1.0
    §3.3.3), a carriage return in text as a line feed (§2.11), an attribute in a namespace
    other than xml: was left out, and a namespace with a quote in it broke the XML. The
    usual payload, one element with text and plain attributes, is written as slixmpp wrote
    it, and was written without its writer for 12,500 fewer instructions per item, 2 %
    (docs/benchmarks.md, XMPP: it escapes character by character in Python). An element
    in no namespace says so (xmlns=""), unlike `tostring`: its text goes inside a stanza's
    <item/>, where `<x />` is in the namespace of pubsub#event, so a published
    `<x xmlns=''/>` reached its subscribers as another element."""
    if not len(element):  # the usual payload: one element, no stack to keep
        return _leaf(element, None)
    out: list[str] = []
    # From a stack, not by a call per level: a payload of 2,000 nested elements (14 kB, which
    # the server passes on) raised RecursionError, in the publish and again in its error's
    # echo of it, and the component's stream ended at each.
    todo: list[tuple[Element, str | None] | str] = [(element, None)]
    while todo:
        step = todo.pop()
        if isinstance(step, str):  # an end tag, and the tail of its element
            out.append(step)
            continue
        written, outer = step
        if not len(written):
            out.append(_leaf(written, outer))
            continue
        start, namespace, name = _start_tag(written, outer)
        text, tail = written.text, written.tail
        out.append(f"{start}>{_escape_text(text)}" if text else f"{start}>")
        todo.append(f"</{name}>{_escape_text(tail)}" if tail else f"</{name}>")
        todo.extend((child, namespace) for child in reversed(written))
    return "".join(out)


def _leaf(element: Element, outer: str | None) -> str:
    """An element without children, its tail after it; `outer`: the namespace around it."""
    start, _, name = _start_tag(element, outer)
    text, tail = element.text, element.tail
    out = f"{start}>{_escape_text(text)}</{name}>" if text else f"{start} />"
    return out + _escape_text(tail) if tail else out


XML_NAMESPACE = "http://www.w3.org/XML/1998/namespace"


def _start_tag(element: Element, outer: str | None) -> tuple[str, str, str]:
    """The start tag of `element` without its closing `>`, its namespace and its name."""
    tag = element.tag
    namespace, _, name = tag[1:].rpartition("}") if tag[:1] == "{" else ("", "", tag)
    out = f"<{name}"
    if outer is None or namespace != outer:  # at the top, the stanza's is not its own
        out += f' xmlns="{_namespace(namespace)}"'
    prefixes: dict[str, str] | None = None  # of the namespaces of its attributes, if any
    for key, value in element.attrib.items():
        if key[:1] == "{":
            key_namespace, _, key = key[1:].rpartition("}")
            if key_namespace == XML_NAMESPACE:
                key = f"xml:{key}"
            else:
                prefixes = {} if prefixes is None else prefixes
                if key_namespace not in prefixes:
                    prefixes[key_namespace] = prefix = f"ns{len(prefixes)}"
                    out += f' xmlns:{prefix}="{_namespace(key_namespace)}"'
                key = f"{prefixes[key_namespace]}:{key}"
        out += f' {key}="{_escape_attribute(value)}"'
    return out, namespace, name


def _escape_text(text: str) -> str:
    """slixmpp's `escape` (& < > ' " as entities), and a carriage return as a reference,
    which a parser would read as a line feed. Text with none of them, the usual, is checked
    by one regular expression, which costs less than the replaces that would find nothing."""
    if _PLAIN_TEXT.fullmatch(text):
        return text
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("'", "&apos;")
        .replace('"', "&quot;")
        .replace("\r", "&#13;")
    )


_PLAIN_TEXT = re.compile(r"[^&<>'\"\r]*")


def _escape_attribute(text: str) -> str:
    """`_escape_text`, and a tab or a line feed as a reference: a parser reads them as a
    space in an attribute."""
    if _PLAIN.fullmatch(text):
        return text
    return _escape_text(text).replace("\t", "&#9;").replace("\n", "&#10;")


# A payload's namespaces recur item after item: each escaped once (bounded, keyed by itself).
_namespace = functools.lru_cache(maxsize=256)(_escape_attribute)


def result(iq: Iq, inner: str = "") -> str:
    """The iq-result for `iq`, from whichever address it was sent to (XEP-0114 keeps it)."""
    return (
        f"<iq type='result' id={attr(iq.id)} to={recurring_attr(iq.sender)} "
        f"from={recurring_attr(iq.to)}>{inner}</iq>"
    )


def error(iq: Iq, condition: Condition, *, text: str = "", inner: str | None = None) -> str:
    """The iq-error for `iq`: the request echoed (or `inner`), then the error (RFC 6120 §8.3)."""
    echoed = inner if inner is not None else (xml_of(iq.child) if iq.child is not None else "")
    # An iq without an id is refused (RFC 6120 §8.1.3): none to mirror (_error_stanza).
    return _error_stanza("iq", iq.id, iq.sender, iq.to, echoed + _error(condition, text))


def message_error(
    message_id: str | None, sender: str, to: str, condition: Condition, *, text: str = ""
) -> str:
    """The message-error for a message refused (RFC 6120 §8.3): to its sender, from the
    address it was sent to, under its id if it had one. The message is not echoed (a MAY,
    §8.3.1): one refused for its size would not fit back into a stanza."""
    return _error_stanza("message", message_id, sender, to, _error(condition, text))


def _error_stanza(kind: str, stanza_id: str | None, sender: str, to: str, inner: str) -> str:
    """A stanza of type error (RFC 6120 §8.3): to the sender of the one refused, from the
    address it was sent to, under its id if it had one (id='' is no id)."""
    mirrored = f" id={attr(stanza_id)}" if stanza_id else ""
    return (
        f"<{kind} type='error'{mirrored} to={recurring_attr(sender)} "
        f"from={recurring_attr(to)}>{inner}</{kind}>"
    )


def _error(condition: Condition, text: str) -> str:
    """The <error/> element of a stanza error: the condition, pubsub's, then the text."""
    feature = f" feature={attr(condition.feature)}" if condition.feature is not None else ""
    extra = (
        f"<{condition.pubsub} xmlns='{ns.PUBSUB_ERRORS}'{feature}/>"
        if condition.pubsub is not None
        else ""
    )
    said = f"<text xmlns='{ns.STANZAS}'>{escape(text)}</text>" if text else ""
    return (
        f"<error type='{condition.type}'><{condition.name} xmlns='{ns.STANZAS}'/>{extra}{said}"
        "</error>"
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
    `wrapped`: it goes inside a urn:xmpp:qos element, so it names its own namespace, and has
    no `to` and `from`: the QoS document's sender leaves them out, the iq's say who (its
    receiver overwrites them from the iq's)."""
    if wrapped:
        head = f"<message xmlns='jabber:client' id={attr(message_id)}>"
    else:
        head = (
            f"<message id={attr(message_id)} to={recurring_attr(to)} from={recurring_attr(sender)}>"
        )
    return (
        f"{head}<event xmlns='{ns.PUBSUB_EVENT}'>"
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


def disco_items(
    node: str | None,
    items: Iterable[tuple[str, str | None, str | None]],
    *,
    room: int | None = None,
) -> str:
    """items: (jid, node or None, name or None). `room`: the bytes the <query/> may take, the
    first items that fit listed whole and the rest left out (None: all of them). XEP-0030 has
    no word for "there are more" (that is XEP-0059's paging, not served)."""
    at = f" node={attr(node)}" if node is not None else ""
    head, tail = f"<query xmlns='{ns.DISCO_ITEMS}'{at}>", "</query>"
    parts = [head]
    left = None if room is None else room - len(head.encode()) - len(tail)
    for jid, item_node, name in items:
        item = f"<item jid={attr(jid)}"
        if item_node is not None:
            item += f" node={attr(item_node)}"
        if name is not None:
            item += f" name={attr(name)}"
        item += "/>"
        if left is not None:
            left -= len(item.encode())
            if left < 0:
                break
        parts.append(item)
    parts.append(tail)
    return "".join(parts)
