"""MQTT messages as files and back: names, properties, expiry."""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.waiting import logged

import boxmq
from boxmq.client.publishing import Publication
from boxmq.errors import MetadataTooLong
from boxmq.model import (
    GROUP_KEY,
    PROPERTIES_FILE,
    V5_PROPERTIES,
    ConsumerId,
    Envelope,
    MessageId,
    Property,
    PropertyType,
    PropertyValue,
    properties_from,
    property_text,
)
from boxmq.mqtt import stored
from boxmq.mqtt.framing import PacketType
from boxmq.mqtt.packets import Publish
from boxmq.mqtt.properties import Properties, PropertyId, subscription_identifier, validated
from boxmq.mqtt.session import SubscriptionOptions
from boxmq.mqtt.stored import (
    consumer_name,
    group_of,
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


_IDS = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=120)


@given(_IDS, _IDS)
def test_every_client_id_has_a_distinct_name_that_fits_a_lock(a: str, b: str) -> None:
    """A long id (a `device-<uuid>`, a path of a plant's line and station) is shortened; no
    id, short or long, takes another's name."""
    assert check_consumer_name(consumer_name(a)) == consumer_name(a)
    assert (consumer_name(a) == consumer_name(b)) == (a == b)


def test_a_long_client_id_keeps_its_first_plain_characters() -> None:
    name = consumer_name("device-3f2a1c9e-8b7d-4e6f-a5c4-1b2d3e4f5a6b")
    assert name.startswith("device-3f2a1c9e-8b7d%h")
    assert consumer_name("device-3f2a1c9e") == "device-3f2a1c9e"  # short: as it always was


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
        kept = _stored(Publish("t", b"", 1, packet_id=1, properties=props), side)
        options = SubscriptionOptions(qos=1, durable=True)
        back = retained_publish(_envelope(kept), b"", options, now=0, side_files=side)
    assert back.properties == props.without(PropertyId.TOPIC_ALIAS)  # the alias was ours
    assert bool(kept) == bool(user or content_type is not None or correlation is not None)


def test_what_is_left_of_the_expiry_is_sent_on(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    kept = kept_properties(
        Publish("t", b"", 1, packet_id=1, properties=Properties.build(message_expiry_interval=60))
    )
    envelope = _envelope(kept, expiration=1_000_060_000)  # epoch ms: 60 s after now=1_000_000
    back = retained_publish(
        envelope, b"", SubscriptionOptions(qos=1, durable=True), now=1_000_045.5, side_files=side
    )
    assert back.properties.message_expiry_interval == 15  # rounded up, never 0


def test_a_message_whose_name_lost_its_expiration_goes_out_without_an_expiry(
    tmp_path: Path,
) -> None:
    # A requeue from expired/ drops the expiration that passed from the name; the stored v5
    # bytes still hold the Message Expiry Interval the publisher set (found by a review).
    side = SideFiles(str(tmp_path))
    props = Properties.build(message_expiry_interval=1, content_type="text/plain")
    kept = kept_properties(Publish("t", b"", 1, packet_id=1, properties=props))
    back = retained_publish(
        _envelope(kept),
        b"",
        SubscriptionOptions(qos=1, durable=True),
        now=1_000_000,
        side_files=side,
    )
    assert back.properties.message_expiry_interval is None
    assert back.properties == Properties.build(content_type="text/plain")


_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_LONG = Properties.build(
    user_properties=[("traceparent", _TRACEPARENT), ("tenant", "acme")],
    response_topic="rpc/replies/client-7f3a9c2e",
    correlation_data=bytes(range(32)),
)
_OPTIONS = SubscriptionOptions(qos=1, durable=True)


def test_properties_too_long_for_a_name_go_to_a_side_file_and_come_back(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    kept = _stored(Publish("t", b"", 1, packet_id=1, properties=_LONG), side)
    assert list(kept) == [PROPERTIES_FILE]
    assert len(kept[PROPERTIES_FILE]) == 32  # what the name carries instead of 200 bytes
    fresh = SideFiles(str(tmp_path))  # another process, or after a restart: no cache
    back = retained_publish(_envelope(kept), b"", _OPTIONS, now=0, side_files=fresh)
    assert back.properties == _LONG


def test_a_missing_side_file_costs_the_properties_not_the_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = _stored(Publish("t", b"", 1, packet_id=1, properties=_LONG), SideFiles(str(tmp_path)))
    os.unlink(tmp_path / ".properties" / kept[PROPERTIES_FILE])  # deleted by hand
    side = SideFiles(str(tmp_path))
    with caplog.at_level(logging.WARNING, "boxmq.store"):
        for _ in range(3):
            back = retained_publish(_envelope(kept), b"body", _OPTIONS, now=0, side_files=side)
            assert (back.payload, back.properties) == (b"body", Properties())
    assert len(logged(caplog, "missing")) == 1  # once


def _stored(packet: Publish, side: SideFiles) -> dict[str, str]:
    """`kept_properties`, its side file written as a publish writes it where a name holds
    its key (`side_file_of`)."""
    kept = kept_properties(packet)
    file = stored.side_file_of(packet, kept)
    if file is not None:
        side.put(file)
    return kept


def _room(properties: dict[str, str]) -> int:
    """A store's room for the topic beside `properties` (tests with a store made up here)."""
    return 38


def test_short_properties_that_the_topic_leaves_no_room_for_are_spilled() -> None:
    packet = Publish("t", b"", 1, packet_id=1, properties=Properties.build(content_type="json"))
    tried: list[dict[str, str]] = []

    def store(properties: dict[str, str]) -> str:
        tried.append(properties)
        if V5_PROPERTIES in properties:
            raise MetadataTooLong("no room")
        return "stored"

    assert store_with_properties(packet, store, _room) == "stored"
    assert [list(p) for p in tried] == [[V5_PROPERTIES], [PROPERTIES_FILE]]


def test_a_topic_that_leaves_no_room_even_for_the_key_is_stored_without_properties(
    caplog: pytest.LogCaptureFixture,
) -> None:
    packet = Publish("t", b"", 1, packet_id=1, properties=_LONG)
    tried: list[dict[str, str]] = []

    def store(properties: dict[str, str]) -> str:
        tried.append(properties)
        if properties:
            raise MetadataTooLong("no room")
        return "stored"

    assert store_with_properties(packet, store, _room) == "stored"
    assert tried[-1] == {}
    assert "no room in a file name for its v5 properties" in caplog.text


def test_the_side_file_of_a_publish_is_for_a_name_or_a_retained_messages_header() -> None:
    """What the publish writes where a file names it (Topics.publish): for a name holding
    its key, and for a retained message whose name holds none of them (its header, in
    store/retained.py); none where the name holds the properties themselves, for a copy that
    is not retained and has no room, or for a PUBLISH without properties."""
    retained = Publish("t", b"x", 1, True, packet_id=1, properties=_LONG)
    assert stored.side_file_of(retained, {}) == _LONG.raw
    grouped = {GROUP_KEY: "g"}  # the group went alone
    assert stored.side_file_of(retained, grouped) == _LONG.raw
    keyed = kept_properties(retained)
    assert PROPERTIES_FILE in keyed
    assert stored.side_file_of(retained, keyed) == _LONG.raw
    short = Publish("t", b"x", 1, True, packet_id=1, properties=Properties.build(content_type="a"))
    in_name = kept_properties(short)
    assert V5_PROPERTIES in in_name
    assert stored.side_file_of(short, in_name) is None
    plain = Publish("t", b"x", 1, False, packet_id=1, properties=_LONG)
    assert stored.side_file_of(plain, {}) is None
    assert stored.side_file_of(plain, kept_properties(plain)) == _LONG.raw
    bare = Publish("t", b"x", 1, True, packet_id=1)
    assert stored.side_file_of(bare, {}) is None


def test_a_topic_too_long_even_without_properties_is_refused() -> None:
    packet = Publish("t", b"", 1, packet_id=1, properties=_LONG)

    def store(properties: dict[str, str]) -> None:
        raise MetadataTooLong("no room")

    with pytest.raises(MetadataTooLong):
        store_with_properties(packet, store, _room)


def test_the_docs_give_the_topic_lengths_the_names_have_room_for(tmp_path: Path) -> None:
    """The numbers in the docs are computed here (Topics.topic_room): a change to what a
    name holds fails this test until the docs follow. A retained message with an expiry
    has the room of neither alone: the pages that speak of retained messages only gave it
    the 25 bytes of an expiry, where it has 13."""
    docs = Path(__file__).parents[3] / "docs"
    key = {PROPERTIES_FILE: "0" * 32}
    with boxmq.open(tmp_path, fsync="never") as box:
        room = box.topics.topic_room
        both = room(key, retain=True, expires_in=60)
        said = (
            f"more than {room(key)} bytes once escaped, each `/` counting 3; "
            f"{room(key, retain=True)} if retained, {room(key, expires_in=60)} with a Message "
            f"Expiry Interval, {both} with both"
        )
        retained = (
            f"more than {room(key, retain=True)} bytes once escaped, each `/` counting 3; "
            f"{both} with a Message Expiry Interval"
        )
        mosquitto = (
            f"topic of more than {room(key, retain=True)} bytes once escaped ({both} with a "
            "Message Expiry Interval)"
        )
        bare = f"Without properties a message takes a topic of up to {room()} bytes"
    pages = (
        ("file-format.md", (said, bare)),
        ("mqtt.md", (said, mosquitto)),
        ("cli.md", (retained,)),
    )
    for page, sayings in pages:
        text = " ".join((docs / page).read_text().split())
        for saying in sayings:
            assert saying in text, page


# -- the properties of messages that did not come over MQTT v5, and a publisher's group ---------

_VALUES = (
    st.text(max_size=6)
    | st.integers(-(2**40), 2**40)
    | st.booleans()
    | st.floats(allow_nan=True, allow_infinity=True)
)


@given(st.dictionaries(st.text(min_size=1, max_size=6), _VALUES, max_size=4))
def test_a_message_without_v5_properties_goes_out_with_its_own_as_user_properties(
    own: dict[str, PropertyValue],
) -> None:
    envelope = Envelope(
        MessageId("m"),
        properties=(
            Property("bx_topic", PropertyType.STRING, "t"),
            Property("bx_dc", PropertyType.INT, 2),
            *properties_from(own),
        ),
    )
    with tempfile.TemporaryDirectory() as root:
        back = retained_publish(envelope, b"", _OPTIONS, now=0, side_files=SideFiles(root))
    expected = [
        (name, property_text(value))
        for name, value in own.items()
        if not name.startswith("bx_") and "\0" not in name + property_text(value)
    ]
    assert list(back.properties.user_properties) == expected
    assert back.properties.get_all(PropertyId.USER_PROPERTY) == tuple(expected)
    assert (back.properties.raw == b"") == (not expected)


_REPLY_TO = st.text(max_size=8) | st.sampled_from(["rpc/replies/7", "a/+/b", "#", ""])


@given(_REPLY_TO, st.none() | st.text(max_size=8), st.booleans())
def test_reply_to_and_correlation_id_go_out_as_response_topic_and_correlation_data(
    reply_to: str, correlation_id: str | None, with_user_property: bool
) -> None:
    own = {"tenant": "acme"} if with_user_property else {}
    envelope = Envelope(
        MessageId("m"),
        correlation_id=correlation_id,
        reply_to=reply_to or None,
        properties=(Property("bx_topic", PropertyType.STRING, "t"), *properties_from(own)),
    )
    with tempfile.TemporaryDirectory() as root:
        back = retained_publish(envelope, b"", _OPTIONS, now=0, side_files=SideFiles(root))
    props = back.properties
    valid_topic = (
        bool(reply_to)
        and not {"+", "#", "\0"} & set(reply_to)
        and not any(0xD800 <= ord(c) <= 0xDFFF for c in reply_to)
    )
    assert props.response_topic == (reply_to if valid_topic else None)
    try:
        data = correlation_id.encode() if correlation_id else None
    except UnicodeEncodeError:
        data = None  # a lone surrogate: no UTF-8 bytes, so left out
    assert props.correlation_data == data
    assert list(props.user_properties) == list(own.items())
    assert validated(props.raw, PacketType.PUBLISH) == props  # nothing a subscriber refuses


def test_a_reply_to_that_is_no_topic_name_is_left_out_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    envelope = Envelope(
        MessageId("m"), correlation_id="req-1", reply_to="rpc/+/wild", properties=()
    )
    with tempfile.TemporaryDirectory() as root, caplog.at_level(logging.WARNING):
        for _ in range(3):
            back = retained_publish(envelope, b"", _OPTIONS, now=0, side_files=SideFiles(root))
            assert back.properties.response_topic is None
            assert back.properties.correlation_data == b"req-1"
    assert sum("rpc/+/wild" in r.getMessage() for r in caplog.records) == 1


def test_a_message_with_v5_properties_keeps_them_whatever_its_name_says(tmp_path: Path) -> None:
    props = Properties.build(response_topic="rpc/v5", correlation_data=b"\x00v5")
    side = SideFiles(str(tmp_path))
    kept = kept_properties(Publish("t", b"", 1, packet_id=1, properties=props))
    envelope = _envelope(kept)
    envelope = Envelope(
        envelope.message_id,
        correlation_id="other",
        reply_to="rpc/other",
        properties=envelope.properties,
    )
    back = retained_publish(envelope, b"", _OPTIONS, now=0, side_files=side)
    assert back.properties == props


def test_a_message_with_v5_properties_goes_out_with_exactly_those(tmp_path: Path) -> None:
    props = Properties.build(user_properties=[("JMSXGroupID", "o-17"), ("tenant", "acme")])
    side = SideFiles(str(tmp_path))
    kept = kept_properties(Publish("t", b"", 1, packet_id=1, properties=props))
    assert kept[GROUP_KEY] == "o-17"  # also in the name: the message's group
    back = retained_publish(_envelope(kept), b"", _OPTIONS, now=0, side_files=side)
    assert back.properties == props  # not the group again, nor anything else of the name's


@given(st.lists(st.tuples(st.sampled_from(["JMSXGroupID", "tenant", "jmsxgroupid"]), _MQTT_TEXT)))
def test_the_first_jmsxgroupid_user_property_is_the_group(pairs: list[tuple[str, str]]) -> None:
    first = next((value for name, value in pairs if name == GROUP_KEY), "")
    props = Properties.build(user_properties=pairs, content_type="json")
    assert group_of(props) == ({GROUP_KEY: first} if first else {})


@pytest.mark.parametrize("long", [False, True])
def test_the_group_goes_into_the_name_with_the_properties(long: bool) -> None:
    users = [("JMSXGroupID", "o-17"), *(_LONG.user_properties if long else [])]
    props = Properties.build(user_properties=users)
    kept = kept_properties(Publish("t", b"", 1, packet_id=1, properties=props))
    assert list(kept) == [PROPERTIES_FILE if long else V5_PROPERTIES, GROUP_KEY]


def test_without_room_for_both_the_properties_go_first_then_the_group_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    props = Properties.build(user_properties=[("JMSXGroupID", "o-17")], content_type="json")
    packet = Publish("t", b"", 1, packet_id=1, properties=props)
    tried: list[list[str]] = []

    def store(room: int) -> Callable[[dict[str, str]], str]:
        def attempt(properties: dict[str, str]) -> str:
            tried.append(list(properties))
            if len(properties) > room:
                raise MetadataTooLong("no room")
            return "stored"

        return attempt

    assert store_with_properties(packet, store(1), _room) == "stored"
    assert tried == [[V5_PROPERTIES, GROUP_KEY], [PROPERTIES_FILE, GROUP_KEY], [PROPERTIES_FILE]]
    assert "no room in a file name for its JMSXGroupID" in caplog.text
    tried.clear()

    def only_the_group(properties: dict[str, str]) -> str:
        tried.append(list(properties))
        if list(properties) != [GROUP_KEY]:
            raise MetadataTooLong("no room")
        return "stored"

    assert store_with_properties(packet, only_the_group, _room) == "stored"
    assert tried[-1] == [GROUP_KEY]
    assert "no room in a file name for its v5 properties" in caplog.text


@pytest.mark.parametrize(
    ("topic", "kept"), [("orders/17123456", True), ("orders/171234567", False)]
)
def test_the_group_s_warning_gives_the_longest_topic_that_keeps_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, topic: str, kept: bool
) -> None:
    """docs/mqtt.md: with the group `order-17` and no other property, a topic of at most 17
    bytes once escaped (`orders/17123456`, its '/' counting 3) keeps it in the names."""
    props = Properties.build(user_properties=[("JMSXGroupID", "order-17")])
    packet = Publish(topic, b"paid", 1, packet_id=1, properties=props)
    with boxmq.open(tmp_path, fsync="never") as box:
        box.subscribe("$share/g/#", "m", process_bound=False).detach()  # a group to copy to

        def publish(properties: dict[str, str]) -> MessageId:
            return box.topics.publish(topic, b"paid", properties=properties, reserved=True)

        with caplog.at_level(logging.WARNING, "boxmq.mqtt"):
            store_with_properties(packet, publish, box.topics.topic_room)
    if kept:
        assert "no room" not in caplog.text
    else:
        assert "(a topic of at most 17 bytes, each '/' counting 3, keeps them)" in caplog.text


@pytest.mark.parametrize(
    "raw",
    [
        b"\x11\x00\x00\x00\x05",  # a Session Expiry Interval: no PUBLISH carries one
        b"\x26\x00\x05ten",  # truncated
        b"\x03\x00\x02\xff\xfe",  # not UTF-8
        b"\x23\x00\x00",  # a Topic Alias of 0
    ],
)
def test_property_bytes_a_subscriber_must_refuse_are_not_sent_and_the_message_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, raw: bytes
) -> None:
    blob = base64.urlsafe_b64encode(raw).decode().rstrip("=")  # a name edited by hand
    stored._inline.cache_clear()  # checked once per process: logged the first time only
    envelope = _envelope({V5_PROPERTIES: blob}, expiration=1_000_060_000)
    side = SideFiles(str(tmp_path))
    with caplog.at_level(logging.WARNING, "boxmq.mqtt"):
        back = retained_publish(envelope, b"body", _OPTIONS, now=1_000_000, side_files=side)
    assert back.payload == b"body"
    assert back.properties == Properties.build(message_expiry_interval=60)  # only what is left
    assert "cannot be sent" in caplog.text


def test_a_stored_topic_alias_is_never_sent_on(tmp_path: Path) -> None:
    raw = Properties.build(topic_alias=3, content_type="json").raw
    blob = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    side = SideFiles(str(tmp_path))
    back = retained_publish(_envelope({V5_PROPERTIES: blob}), b"", _OPTIONS, now=0, side_files=side)
    assert back.properties == Properties.build(content_type="json")


def test_mqtt_properties_go_out_as_what_they_name_and_a_bad_one_stored_is_left_out_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    own = {
        "mqtt.content-type": "text/csv",
        "mqtt.payload-format": "3",  # a name a script wrote: no Payload Format
        "mqtt.response-topic": "r/7",
        "mqtt.correlation-data": "cmVxLTc=",
        "tenant": "acme",
    }
    envelope = Envelope(
        MessageId("m9"),
        properties=(Property("bx_topic", PropertyType.STRING, "t"), *properties_from(own)),
    )
    with tempfile.TemporaryDirectory() as root, caplog.at_level(logging.WARNING):
        for _ in range(2):
            props = retained_publish(envelope, b"", _OPTIONS, now=0, side_files=SideFiles(root))
            assert props.properties.content_type == "text/csv"
            assert props.properties.payload_format_indicator is None
            assert props.properties.response_topic == "r/7"
            assert props.properties.correlation_data == b"req-7"
            assert props.properties.user_properties == (("tenant", "acme"),)
        # The name's own reply-to and correlation id win, as readers show them.
        answer = Envelope(
            MessageId("m10"), correlation_id="c-1", reply_to="own", properties=envelope.properties
        )
        props = retained_publish(answer, b"", _OPTIONS, now=0, side_files=SideFiles(root))
    assert (props.properties.response_topic, props.properties.correlation_data) == ("own", b"c-1")
    warned = logged(caplog, "mqtt.payload-format")
    assert len(warned) == 2  # once per message
    assert warned[0].startswith("message m9: its property 'mqtt.payload-format'")


_NAMES = st.sampled_from(
    [
        "bx_qos",
        "bx_retain",
        "bx_rp",
        "bx_dc",
        "bx_topic",
        "bx_other",
        V5_PROPERTIES,
        "color",
        "n",
    ]
)
_VALUES = (
    st.booleans()
    | st.integers(-3, 3)
    | st.floats(allow_nan=False)
    | st.sampled_from(["", "x", "true", "AQI"])  # "AQI": a Payload Format Indicator, inline
)


class _NoSettler:
    def ack(self, message_id: MessageId, consumer: str, delivery: int | None) -> None: ...
    def unlock(
        self, message_id: MessageId, consumer: str, delay: float, delivery: int | None
    ) -> None: ...
    def reject(self, message_id: MessageId, consumer: str, delivery: int | None) -> None: ...
    def decline(self, message_id: MessageId, consumer: str, delivery: int | None) -> None: ...
    def extend(
        self, message_id: MessageId, consumer: str, seconds: float | None, delivery: int | None
    ) -> None: ...


_NO_SETTLER = _NoSettler()


def _general_publish_of(
    message: boxmq.Message, topic: str, options: SubscriptionOptions, now: float, side: SideFiles
) -> Publish:
    """What `publish_of` gives, the way each accessor finds it (one look each)."""
    props = stored._remaining_expiry(
        stored._properties_of(message.envelope, side), message.envelope, now
    )
    if options.identifier:
        props = props + subscription_identifier(options.identifier)
    qos = min(message.qos, options.qos)
    return Publish(
        topic,
        message.body,
        qos,
        message.retained or (options.retain_as_published and message.published_retained),
        qos > 0 and message.delivery_count > 1,  # MQTT-3.3.1-2: no DUP at QoS 0
        None,
        props,
    )


@given(
    st.lists(st.tuples(_NAMES, _VALUES), max_size=6),
    st.integers(0, 2),
    st.booleans(),
    st.none() | st.integers(1, 5),
    st.sampled_from([0, 1_000_060_000]),
)
def test_publish_of_looks_once_and_finds_what_each_accessor_finds(
    pairs: list[tuple[str, PropertyValue]],
    granted: int,
    retain_as_published: bool,
    identifier: int | None,
    expiration: int,
) -> None:
    kinds = {bool: PropertyType.BOOLEAN, int: PropertyType.INT, float: PropertyType.DOUBLE}
    props = tuple(Property(n, kinds.get(type(v), PropertyType.STRING), v) for n, v in pairs)
    envelope = Envelope(MessageId("m"), expiration=expiration, properties=props)
    message = boxmq.Message("q", envelope, b"body", ConsumerId("c"), 0.0, _NO_SETTLER)
    options = SubscriptionOptions(
        qos=granted,
        durable=True,
        retain_as_published=retain_as_published,
        identifier=identifier,
    )
    with tempfile.TemporaryDirectory() as root:
        side = SideFiles(root)
        fast = stored.publish_of(message, "t", options, 1_000_000.0, side)
        general = _general_publish_of(message, "t", options, 1_000_000.0, side)
    assert fast == general


@given(
    st.text(min_size=1, max_size=10),
    st.binary(max_size=10),
    st.integers(0, 2),
    st.text(min_size=1, max_size=10),
    st.none() | st.integers(1, 100),
)
def test_a_publish_without_properties_becomes_what_the_general_path_makes(
    topic: str, payload: bytes, qos: int, client_id: str, expiry: int | None
) -> None:
    props = Properties.build(message_expiry_interval=expiry)
    packet = Publish(topic, payload, qos, packet_id=1 if qos else None, properties=props)
    general = Publication(
        topic,
        payload,
        qos,
        properties=kept_properties(packet) or None,
        expires_in=props.message_expiry_interval or None,
        source=consumer_name(client_id),
    )
    assert stored.publication_of(client_id, packet) == general
