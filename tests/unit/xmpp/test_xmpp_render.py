"""What render writes parses back to what it was given, whatever the text."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st

from boxmq.xmpp import render

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
