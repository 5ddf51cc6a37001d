"""What render writes parses back to what it was given, whatever the text."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st
from slixmpp.xmlstream import tostring

from boxmq.xmpp import ns, payloads, render

# XML 1.0 characters only: no other control characters can appear in a JID or an item id.
_XML_TEXT = st.text(
    st.sampled_from("\t\n\r")
    | st.characters(min_codepoint=0x20, codec="utf-8", blacklist_characters="\ufffe\uffff")
)


@given(_XML_TEXT)
def test_an_attribute_round_trips(value: str) -> None:
    assert ET.fromstring(f"<x a={render.attr(value)}/>").get("a") == value


def test_plain_values_take_the_fast_path() -> None:
    assert render.attr("alice@localhost/r 1") == "'alice@localhost/r 1'"
    assert render.attr("it's") == '"it\'s"'


@given(st.lists(_XML_TEXT, min_size=1, max_size=5))
def test_a_recurring_attribute_is_what_attr_writes_each_time(values: list[str]) -> None:
    # the cache answers for the value it was asked, the first time and every later one
    for value in values + values:
        assert render.recurring_attr(value) == render.attr(value)
        assert ET.fromstring(f"<x a={render.recurring_attr(value)}/>").get("a") == value


# What a parser can give: no attribute named xmlns (a declaration), no reserved namespace, no
# "}" in a namespace (expat refuses its own separator)
_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,8}", fullmatch=True).filter(
    lambda name: not name.lower().startswith("xml")
)
_ELEMENT_NAMESPACES = _XML_TEXT.filter(
    lambda name: "}" not in name and not name.startswith("http://www.w3.org/")
)
_ODD_NAMESPACES = st.sampled_from(["", "a&b", "x'y", 'q"r'])
_ODD_KEYS = st.sampled_from(["{urn:x}k", "{http://www.w3.org/XML/1998/namespace}lang"])


@st.composite
def _elements(draw: st.DrawFn, *, odd: bool) -> ET.Element:
    """A payload element: with `odd`, also what the fast path leaves to slixmpp (children,
    no namespace, namespaced attributes, a namespace with characters to escape)."""
    namespace = draw(
        _ELEMENT_NAMESPACES | _ODD_NAMESPACES if odd else _ELEMENT_NAMESPACES.filter(bool)
    )
    name = draw(_NAMES)
    tag = f"{{{namespace}}}{name}" if not odd or draw(st.booleans()) else name
    keys = _NAMES | _ODD_KEYS if odd else _NAMES
    element = ET.Element(tag, draw(st.dictionaries(keys, _XML_TEXT, max_size=3)))
    element.text = draw(st.none() | _XML_TEXT)
    element.tail = draw(st.none() | _XML_TEXT)
    if odd and draw(st.booleans()):
        ET.SubElement(element, "{urn:example}child").text = draw(_XML_TEXT)
    return element


@given(_elements(odd=False) | _elements(odd=True))
def test_xml_of_parses_back_to_the_element(element: ET.Element) -> None:
    # tostring wrote a tab, line feed or carriage return in an attribute as it was, which a
    # parser reads as a space, a carriage return in text as a line feed, and it left out an
    # attribute in a namespace (urn:x): a published item was stored and sent altered. Inside
    # an <item/> of a stanza, as it is sent: a payload in no namespace, written `<x />`, took
    # the item's (found by a second read).
    item = f"<item xmlns='{ns.PUBSUB_EVENT}'>{render.xml_of(element)}</item>"
    parsed = ET.fromstring(item)
    assert len(parsed) == 1
    assert _shape(parsed[0]) == _shape(element)


def _shape(element: ET.Element) -> object:
    tag = element.tag.removeprefix("{}")  # no namespace, said either way
    children = [_shape(child) for child in element]
    return tag, element.attrib, element.text or "", element.tail or "", children


def test_a_payload_nested_past_pythons_recursion_limit_is_written_whole() -> None:
    # Written by a call per level, 2,000 levels raised RecursionError, which ended the
    # component's stream (tests/xmpp: the publish of one through Prosody)
    depth = 5000
    text = "<a xmlns='urn:deep'>" + "<b xmlns='urn:b' x='1'>t" * depth + "</b>tail" * depth
    element = ET.fromstring(text + "</a>")
    again = ET.fromstring(render.xml_of(element))
    assert [_flat(e) for e in again.iter()] == [_flat(e) for e in element.iter()]


def _flat(element: ET.Element) -> object:
    return element.tag, element.attrib, element.text, element.tail, len(element)


@given(_elements(odd=False))
def test_the_usual_payload_is_written_as_slixmpp_wrote_it(element: ET.Element) -> None:
    # the text stored for a payload as it always was, where slixmpp's writer kept it whole
    attributes = "".join(element.attrib.values())
    texts = (element.text or "") + (element.tail or "")
    namespace = element.tag  # written raw
    if (
        not set("\t\n\r") & set(attributes)
        | set("\r") & set(texts)
        | set("&<>'\"\t\n\r") & set(namespace)
    ):
        assert render.xml_of(element) == tostring(element, top_level=True)


_BODY_TEXT = st.text(st.sampled_from("ab-_.:é ]>&<'\"\t\n\r\x01;#x"), max_size=12)
_PLAIN_TEXT = st.text(st.sampled_from("ab-_.:/ >'\"\t\n\r;#x\\"), max_size=12)
_NAMESPACES = st.sampled_from(
    ["", "urn:example", "http://www.w3.org/XML/1998/namespace", "http://www.w3.org/2000/xmlns/"]
)


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    """Bodies of the shape payloads passes without expat, and across its edges."""
    name = draw(st.sampled_from(["job", "a.b-c", "_x", "x:y", "1a", "é", "xmlns"]) | _BODY_TEXT)
    close = draw(st.sampled_from([name, name, name + "x", ""]))
    namespace = draw(_NAMESPACES | _PLAIN_TEXT | _BODY_TEXT)
    text = draw(_PLAIN_TEXT | _BODY_TEXT)
    head = f'<{name} xmlns="{namespace}"'
    body = draw(st.sampled_from([f"{head}>{text}</{close}>", f"{head} />", f"{head}>{text}"]))
    return body.encode()


@settings(max_examples=500)  # a few percent of the examples have the shape
@given(_bodies() | st.binary(max_size=40))
def test_a_body_passed_through_without_expat_is_one_that_expat_passes(body: bytes) -> None:
    # The check without a parser may send a body to expat that it could have passed; it must
    # never pass one that expat refuses (it would break the component's stream).
    if payloads._PLAIN_ELEMENT.fullmatch(body):
        assert payloads._is_one_element(body)


@settings(max_examples=300)
@given(st.binary(max_size=40) | _XML_TEXT.map(str.encode) | _bodies())
def test_whatever_the_body_its_payload_is_one_element_a_stream_allows(body: bytes) -> None:
    # b"\x01\x02\x03" is UTF-8, but no XML: sent as <text/> as it was, Prosody ended the
    # component's stream (not-well-formed) at each try (found by an XMPP hunt).
    assert payloads._is_one_element(payloads.payload_of(body).encode())
