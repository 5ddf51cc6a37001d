"""v5 properties (MQTT 5.0 §2.2.2): lazy bytes, accessors, building, and the validating read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.mqtt.packet_bytes import vbi

from boxmq.errors import InvalidArgument, MalformedPacket
from boxmq.mqtt.errors import ProtocolError, TopicAliasInvalid
from boxmq.mqtt.framing import PacketType, encode_varint
from boxmq.mqtt.properties import (
    ALLOWED,
    EMPTY,
    TYPES,
    WILL_ALLOWED,
    DataType,
    Properties,
    PropertyId,
    PropertyValue,
    read_properties,
    subscription_identifier,
    validated,
)


def s(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def with_length(raw: bytes) -> bytes:
    assert len(raw) < 128
    return bytes((len(raw),)) + raw


def read(raw: bytes, kind: PacketType = PacketType.PUBLISH, *, will: bool = False) -> Properties:
    properties, pos = read_properties(with_length(raw), 0, kind, will=will)
    assert pos == len(raw) + 1
    return properties


def test_every_property_id_has_a_type_and_a_packet() -> None:
    assert len(PropertyId) == 27
    assert set(TYPES) == set(PropertyId)
    used = set(WILL_ALLOWED).union(*ALLOWED.values())
    assert used == set(PropertyId)


def test_values_are_decoded_only_on_demand_and_keep_their_order() -> None:
    raw = (
        b"\x02\x00\x00\x00\x3c"  # Message Expiry Interval 60
        + b"\x26"
        + s("k")
        + s("1")
        + b"\x0b\x80\x01"  # Subscription Identifier 128
        + b"\x26"
        + s("k")
        + s("2")
        + b"\x03"
        + s("text/plain")
        + b"\x09\x00\x02\xca\xfe"
        + b"\x0b\x05"
    )
    props = read(raw)
    assert props.raw == raw
    assert props.message_expiry_interval == 60
    assert props.user_properties == (("k", "1"), ("k", "2"))
    assert props.subscription_identifiers == (128, 5)
    assert props.content_type == "text/plain"
    assert props.correlation_data == b"\xca\xfe"
    assert props.topic_alias is None
    assert list(props)[:2] == [
        (PropertyId.MESSAGE_EXPIRY_INTERVAL, 60),
        (PropertyId.USER_PROPERTY, ("k", "1")),
    ]
    assert props.get(PropertyId.SUBSCRIPTION_IDENTIFIER) == 128
    assert props.get_all(PropertyId.USER_PROPERTY) == (("k", "1"), ("k", "2"))


def test_build_encodes_in_identifier_order() -> None:
    props = Properties.build(
        user_properties=[("a", "b")],
        topic_alias=7,
        payload_format_indicator=1,
        subscription_identifiers=[3, 300],
    )
    assert props.raw == b"\x01\x01\x0b\x03\x0b\xac\x02\x23\x00\x07\x26" + s("a") + s("b")


def test_every_accessor_reads_what_build_wrote() -> None:
    values: dict[str, PropertyValue] = {}
    for pid, kind in TYPES.items():
        if pid in (PropertyId.USER_PROPERTY, PropertyId.SUBSCRIPTION_IDENTIFIER):
            continue
        name = pid.name.lower()
        value: PropertyValue = 1
        if kind is DataType.UTF8_STRING:
            value = f"<{name}>"
        elif kind is DataType.BINARY_DATA:
            value = name.encode()
        values[name] = value
    props = Properties.build(**values)  # type: ignore[arg-type]
    for name, value in values.items():
        assert getattr(props, name) == value, name


def test_without_drops_only_the_named_properties() -> None:
    props = Properties.build(topic_alias=3, message_expiry_interval=9, user_properties=[("a", "")])
    kept = props.without(PropertyId.TOPIC_ALIAS)
    assert kept == Properties.build(message_expiry_interval=9, user_properties=[("a", "")])
    assert (
        props.without(
            PropertyId.TOPIC_ALIAS, PropertyId.MESSAGE_EXPIRY_INTERVAL, PropertyId.USER_PROPERTY
        )
        == EMPTY
    )


def test_lists_add_up_for_forwarding() -> None:
    forwarded = Properties.build(content_type="x") + Properties.build(subscription_identifiers=[4])
    assert forwarded.content_type == "x"
    assert forwarded.subscription_identifiers == (4,)
    assert not EMPTY
    assert forwarded


def test_repr_shows_decoded_values() -> None:
    assert repr(Properties.build(topic_alias=2)) == "Properties(topic_alias=2)"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([(PropertyId.TOPIC_ALIAS, "x")], "not a value of its type"),
        ([(PropertyId.TOPIC_ALIAS, 70_000)], "out of range"),
        ([(PropertyId.MAXIMUM_QOS, -1)], "out of range"),
        ([(PropertyId.CONTENT_TYPE, b"x")], "not a value of its type"),
        ([(PropertyId.USER_PROPERTY, ("a", "\x00"))], "U\\+0000"),
        ([(PropertyId.RETAIN_AVAILABLE, True)], "not a value of its type"),
    ],
)
def test_values_of_the_wrong_type_are_not_encoded(
    items: list[tuple[PropertyId, PropertyValue]], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Properties.of(items)


def test_the_empty_list_is_one_byte_and_the_shared_empty_value() -> None:
    properties, pos = read_properties(b"\x00", 0, PacketType.PUBLISH)
    assert properties is EMPTY
    assert pos == 1


def test_user_property_may_repeat_everywhere_subscription_identifier_only_in_publish() -> None:
    pair = b"\x26" + s("a") + s("b")
    assert read(pair + pair, PacketType.PUBACK).user_properties == (("a", "b"), ("a", "b"))
    assert read(b"\x0b\x01\x0b\x02").subscription_identifiers == (1, 2)
    with pytest.raises(ProtocolError, match="SUBSCRIPTION_IDENTIFIER appears twice"):
        read(b"\x0b\x01\x0b\x02", PacketType.SUBSCRIBE)


def test_will_properties_have_their_own_table() -> None:
    assert read(b"\x18\x00\x00\x00\x05", PacketType.CONNECT, will=True).will_delay_interval == 5
    with pytest.raises(MalformedPacket, match="CONNECT will properties: SESSION_EXPIRY"):
        read(b"\x11\x00\x00\x00\x05", PacketType.CONNECT, will=True)
    with pytest.raises(MalformedPacket, match="CONNECT properties: WILL_DELAY"):
        read(b"\x18\x00\x00\x00\x05", PacketType.CONNECT)


@pytest.mark.parametrize(
    ("raw", "kind", "error", "message"),
    [
        (b"\x05\x00", PacketType.PUBLISH, MalformedPacket, "0x05 is not a property identifier"),
        (b"\x80\x01\x00", PacketType.PUBLISH, MalformedPacket, "0x80 is not a property"),
        (
            b"\x11\x00\x00\x00\x01",
            PacketType.PUBLISH,
            MalformedPacket,
            "SESSION_EXPIRY_INTERVAL is not allowed",
        ),
        (b"\x23\x00\x01", PacketType.CONNECT, MalformedPacket, "TOPIC_ALIAS is not allowed"),
        (
            b"\x26" + s("a") + s("b"),
            PacketType.PINGREQ,
            MalformedPacket,
            "USER_PROPERTY is not allowed",
        ),
        (
            b"\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02",
            PacketType.PUBLISH,
            ProtocolError,
            "appears twice",
        ),
        (b"\x02\x00\x00", PacketType.PUBLISH, MalformedPacket, "runs past"),
        (b"\x03\x00\x05ab", PacketType.PUBLISH, MalformedPacket, "runs past"),
        (b"\x26\x00\x01a\x00\x05b", PacketType.PUBLISH, MalformedPacket, "runs past"),
        (b"\x26\x00\x01a", PacketType.PUBLISH, MalformedPacket, "runs past"),
        (b"\x09\x00\x09", PacketType.PUBLISH, MalformedPacket, "runs past"),
        (b"\x0b\x80", PacketType.PUBLISH, MalformedPacket, "past the end"),
        (b"\x0b\x80\x00", PacketType.PUBLISH, MalformedPacket, "shortest form"),
        (b"\x03\x00\x01\xff", PacketType.PUBLISH, MalformedPacket, "not UTF-8"),
        (b"\x26\x00\x01a\x00\x01\xc3", PacketType.PUBLISH, MalformedPacket, "not UTF-8"),
        (b"\x03\x00\x01\x00", PacketType.PUBLISH, MalformedPacket, "U\\+0000"),
        (b"\x08" + s("a/+"), PacketType.PUBLISH, ProtocolError, "Response Topic has a wildcard"),
        # a Topic Name for the response, and none is empty (MQTT-4.7.3-1): none could be sent
        (b"\x08" + s(""), PacketType.PUBLISH, ProtocolError, "Response Topic is empty"),
        (b"\x01\x02", PacketType.PUBLISH, ProtocolError, "PAYLOAD_FORMAT_INDICATOR may not be 2"),
        (b"\x17\x02", PacketType.CONNECT, ProtocolError, "REQUEST_PROBLEM_INFORMATION"),
        (b"\x21\x00\x00", PacketType.CONNECT, ProtocolError, "RECEIVE_MAXIMUM may not be 0"),
        (b"\x27\x00\x00\x00\x00", PacketType.CONNECT, ProtocolError, "MAXIMUM_PACKET_SIZE"),
        (b"\x24\x02", PacketType.CONNACK, ProtocolError, "MAXIMUM_QOS may not be 2"),
        (b"\x0b\x00", PacketType.SUBSCRIBE, ProtocolError, "SUBSCRIPTION_IDENTIFIER may not be 0"),
        (b"\x23\x00\x00", PacketType.PUBLISH, TopicAliasInvalid, "Topic Alias of 0"),
    ],
)
def test_bad_property_lists_are_refused(
    raw: bytes, kind: PacketType, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        read(raw, kind)


def test_a_will_with_an_empty_response_topic_is_refused() -> None:
    with pytest.raises(ProtocolError, match="CONNECT will properties: a Response Topic is empty"):
        read(b"\x08" + s(""), PacketType.CONNECT, will=True)


def test_a_property_length_past_the_packet_is_malformed() -> None:
    with pytest.raises(MalformedPacket, match="PUBLISH properties: the length runs past"):
        read_properties(b"\x05\x01\x00", 0, PacketType.PUBLISH)


PUBLISH_VALUES = st.fixed_dictionaries(
    {},
    optional={
        "payload_format_indicator": st.integers(0, 1),
        "message_expiry_interval": st.integers(0, 2**32 - 1),
        "content_type": st.text(
            st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
        ),
        "correlation_data": st.binary(max_size=40),
        "topic_alias": st.integers(1, 0xFFFF),
        "user_properties": st.lists(
            st.tuples(st.text(max_size=5), st.text(max_size=5)).filter(
                lambda p: "\x00" not in p[0] + p[1]
            ),
            max_size=3,
        ),
        "subscription_identifiers": st.lists(st.integers(1, 268_435_455), max_size=3),
    },
)


@given(PUBLISH_VALUES)
def test_what_build_writes_a_publish_reads_back(values: dict[str, object]) -> None:
    props = Properties.build(**values)  # type: ignore[arg-type]
    properties, _ = read_properties(
        b"\x00" + vbi(len(props.raw)) + props.raw, 1, PacketType.PUBLISH
    )
    assert properties == props
    for name, value in values.items():
        assert getattr(props, name) == (tuple(value) if isinstance(value, list) else value)


def test_the_mask_answers_absent_properties_without_a_walk() -> None:
    props = read(b"\x02\x00\x00\x00\x3c")
    assert props.mask == 1 << PropertyId.MESSAGE_EXPIRY_INTERVAL
    assert props.without(PropertyId.TOPIC_ALIAS) is props  # nothing to drop: no copy
    assert props.topic_alias is None
    assert props.get_all(PropertyId.USER_PROPERTY) == ()
    unknown = Properties(props.raw)  # built by hand: mask -1, every question walks
    assert unknown == props
    assert unknown.message_expiry_interval == 60
    assert unknown.without(PropertyId.MESSAGE_EXPIRY_INTERVAL) == EMPTY


def test_a_forwarded_list_gets_its_subscription_identifier_appended() -> None:
    incoming = read(b"\x23\x00\x05" + b"\x26" + s("k") + s("v"))
    outgoing = incoming.without(PropertyId.TOPIC_ALIAS) + subscription_identifier(300)
    assert outgoing.raw == b"\x26" + s("k") + s("v") + b"\x0b\xac\x02"
    assert outgoing.subscription_identifiers == (300,)
    assert outgoing.topic_alias is None
    with pytest.raises(InvalidArgument):
        subscription_identifier(0)


@given(st.binary(max_size=40), st.sampled_from([PacketType.PUBLISH, PacketType.CONNECT]))
def test_a_stored_list_is_checked_as_a_received_one(raw: bytes, kind: PacketType) -> None:
    # `validated` takes a list without its length (as boxmq stores one): same verdict, same value.
    try:
        received, _ = read_properties(encode_varint(len(raw)) + raw, 0, kind)
    except MalformedPacket as error:
        with pytest.raises(type(error)):
            validated(raw, kind)
        return
    stored = validated(raw, kind)
    assert stored == received
    assert stored.mask == received.mask
