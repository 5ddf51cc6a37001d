"""MQTT messages as files and back: names, properties, expiry."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import boxmq
from boxmq.errors import MetadataTooLong
from boxmq.model import PROPERTIES_FILE, Envelope, MessageId, Property, PropertyType
from boxmq.mqtt.packets import Publish
from boxmq.mqtt.properties import Properties, PropertyId
from boxmq.mqtt.session import SubscriptionOptions
from boxmq.mqtt.stored import (
    V5_PROPERTIES,
    consumer_name,
    kept_properties,
    retained_publish,
    store_with_properties,
)
from boxmq.store.names import check_consumer_name
from boxmq.store.side_files import SideFiles


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_client_ids_become_distinct_names_without_a_slash(a: str, b: str) -> None:
    assert "/" not in consumer_name(a)
    assert (consumer_name(a) == consumer_name(b)) == (a == b)


def test_a_client_id_with_a_slash_is_a_valid_subscriber_name() -> None:
    assert check_consumer_name(consumer_name("site/7%")) == "site%2F7%25"


def _envelope(kept: dict[str, str], expiration: int = 0) -> Envelope:
    props = tuple(Property(k, PropertyType.STRING, v) for k, v in kept.items())
    topic = Property("bx_topic", PropertyType.STRING, "t")
    return Envelope(MessageId("m"), expiration=expiration, properties=(topic, *props))


_MQTT_TEXT = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=8)  # §1.5.4


@given(
    st.lists(st.tuples(_MQTT_TEXT, _MQTT_TEXT), max_size=3),
    st.none() | _MQTT_TEXT,
    st.none() | st.binary(max_size=10),
)
def test_v5_properties_round_trip_through_the_envelope(
    user: list[tuple[str, str]], content_type: str | None, correlation: bytes | None
) -> None:
    props = Properties.build(
        user_properties=user, content_type=content_type, correlation_data=correlation, topic_alias=3
    )
    with tempfile.TemporaryDirectory() as root:
        side = SideFiles(root)
        kept = kept_properties(Publish("t", b"", 1, packet_id=1, properties=props), side)
        options = SubscriptionOptions(qos=1, durable=True)
        back = retained_publish(_envelope(kept), b"", options, now=0, side_files=side)
    assert back.properties == props.without(PropertyId.TOPIC_ALIAS)  # the alias was ours
    assert bool(kept) == bool(user or content_type is not None or correlation is not None)


def test_what_is_left_of_the_expiry_is_sent_on(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    kept = kept_properties(
        Publish("t", b"", 1, packet_id=1, properties=Properties.build(message_expiry_interval=60)),
        side,
    )
    envelope = _envelope(kept, expiration=1_000_060_000)  # epoch ms: 60 s after now=1_000_000
    back = retained_publish(
        envelope, b"", SubscriptionOptions(qos=1, durable=True), now=1_000_045.5, side_files=side
    )
    assert back.properties.message_expiry_interval == 15  # rounded up, never 0


_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_LONG = Properties.build(
    user_properties=[("traceparent", _TRACEPARENT), ("tenant", "acme")],
    response_topic="rpc/replies/client-7f3a9c2e",
    correlation_data=bytes(range(32)),
)
_OPTIONS = SubscriptionOptions(qos=1, durable=True)


def test_properties_too_long_for_a_name_go_to_a_side_file_and_come_back(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    kept = kept_properties(Publish("t", b"", 1, packet_id=1, properties=_LONG), side)
    assert list(kept) == [PROPERTIES_FILE]
    assert len(kept[PROPERTIES_FILE]) == 32  # what the name carries instead of 200 bytes
    fresh = SideFiles(str(tmp_path))  # another process, or after a restart: no cache
    back = retained_publish(_envelope(kept), b"", _OPTIONS, now=0, side_files=fresh)
    assert back.properties == _LONG


def test_a_missing_side_file_costs_the_properties_not_the_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = kept_properties(
        Publish("t", b"", 1, packet_id=1, properties=_LONG), SideFiles(str(tmp_path))
    )
    os.unlink(tmp_path / ".properties" / kept[PROPERTIES_FILE])  # deleted by hand
    side = SideFiles(str(tmp_path))
    with caplog.at_level(logging.WARNING, "boxmq.store"):
        for _ in range(3):
            back = retained_publish(_envelope(kept), b"body", _OPTIONS, now=0, side_files=side)
            assert (back.payload, back.properties) == (b"body", Properties())
    assert len([r for r in caplog.records if "missing" in r.getMessage()]) == 1  # once


def _room(properties: dict[str, str]) -> int:
    """A store's room for the topic beside `properties` (tests with a store made up here)."""
    return 38


def test_short_properties_that_the_topic_leaves_no_room_for_are_spilled(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    packet = Publish("t", b"", 1, packet_id=1, properties=Properties.build(content_type="json"))
    tried: list[dict[str, str]] = []

    def store(properties: dict[str, str]) -> str:
        tried.append(properties)
        if V5_PROPERTIES in properties:
            raise MetadataTooLong("no room")
        return "stored"

    assert store_with_properties(packet, side, store, _room) == "stored"
    assert [list(p) for p in tried] == [[V5_PROPERTIES], [PROPERTIES_FILE]]


def test_a_topic_that_leaves_no_room_even_for_the_key_is_stored_without_properties(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    packet = Publish("t", b"", 1, packet_id=1, properties=_LONG)
    tried: list[dict[str, str]] = []

    def store(properties: dict[str, str]) -> str:
        tried.append(properties)
        if properties:
            raise MetadataTooLong("no room")
        return "stored"

    assert store_with_properties(packet, SideFiles(str(tmp_path)), store, _room) == "stored"
    assert tried[-1] == {}
    assert "no room in a file name for its v5 properties" in caplog.text


def test_a_topic_too_long_even_without_properties_is_refused(tmp_path: Path) -> None:
    packet = Publish("t", b"", 1, packet_id=1, properties=_LONG)

    def store(properties: dict[str, str]) -> None:
        raise MetadataTooLong("no room")

    with pytest.raises(MetadataTooLong):
        store_with_properties(packet, SideFiles(str(tmp_path)), store, _room)


def test_the_docs_give_the_topic_lengths_the_names_have_room_for(tmp_path: Path) -> None:
    """The numbers in the docs are computed here (Topics.topic_room): a change to what a
    name holds fails this test until the docs follow."""
    docs = Path(__file__).parents[3] / "docs"
    key = {PROPERTIES_FILE: "0" * 32}
    with boxmq.open(tmp_path, fsync="never") as box:
        room = box.topics.topic_room
        said = (
            f"more than {room(key)} bytes once escaped, each `/` counting 3; "
            f"{room(key, retain=True)} if retained, {room(key, expires_in=60)} with a Message "
            "Expiry Interval"
        )
        bare = f"Without properties a message takes a topic of up to {room()} bytes"
    for page, sayings in (("file-format.md", (said, bare)), ("mqtt.md", (said,))):
        text = " ".join((docs / page).read_text().split())
        for saying in sayings:
            assert saying in text, page
