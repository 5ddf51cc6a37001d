"""Differential tests against `mqtt5` (0.8, Rust): generated and mutated packets, both ways.

What we encode mqtt5 reads back the same, what mqtt5 writes we decode the same, and whatever
mutated bytes our stricter codec accepts, mqtt5 reads with the same values.
"""

from __future__ import annotations

import mqtt5
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.mqtt.packet_bytes import mqtt5_read, ours, theirs

from boxmq.errors import ProtocolViolation
from boxmq.mqtt import (
    Connect,
    FrameReader,
    Properties,
    ProtocolVersion,
    Publish,
    Subscribe,
    decode,
    encode,
)

V5 = ProtocolVersion.V5


TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
TOPIC = TEXT.filter(lambda t: t != "" and "+" not in t and "#" not in t)


@st.composite
def publish_pairs(draw: st.DrawFn) -> tuple[Publish, mqtt5.PublishPacket]:
    qos = draw(st.integers(0, 2))
    fields = {
        "topic": draw(TOPIC),
        "payload": draw(st.binary(max_size=64)),
        "retain": draw(st.booleans()),
        "packet_id": draw(st.integers(1, 0xFFFF)) if qos else None,
        "duplicate": draw(st.booleans()) if qos else False,
    }
    expiry = draw(st.none() | st.integers(0, 2**32 - 1))
    content_type = draw(st.none() | TEXT)
    correlation = draw(st.none() | st.binary(max_size=8))
    users = draw(st.lists(st.tuples(TEXT, TEXT), max_size=3))
    sub_ids = draw(st.lists(st.integers(1, 268_435_455), max_size=2))
    ours_ = Publish(
        fields["topic"],  # type: ignore[arg-type]
        fields["payload"],  # type: ignore[arg-type]
        qos,
        fields["retain"],  # type: ignore[arg-type]
        fields["duplicate"],  # type: ignore[arg-type]
        fields["packet_id"],  # type: ignore[arg-type]
        Properties.build(
            message_expiry_interval=expiry,
            content_type=content_type,
            correlation_data=correlation,
            subscription_identifiers=sub_ids,
            user_properties=users,
        ),
    )
    theirs_ = mqtt5.PublishPacket(
        fields["topic"],  # type: ignore[arg-type]
        fields["payload"],  # type: ignore[arg-type]
        qos=mqtt5.QoS(qos),
        message_expiry_interval=expiry,
        content_type=content_type,
        correlation_data=correlation,
        subscription_ids=sub_ids,
        user_properties=users,
        **{k: v for k, v in fields.items() if k in ("retain", "packet_id", "duplicate")},  # type: ignore[arg-type]
    )
    return ours_, theirs_


@given(publish_pairs())
def test_generated_publishes_agree_both_ways_with_mqtt5(
    pair: tuple[Publish, mqtt5.PublishPacket],
) -> None:
    mine, other = pair
    assert repr(theirs(encode(mine, V5))) == repr(other)
    assert ours(other.write()) == mine  # mqtt5 writes properties in the order build() does


SEEDS = [
    mqtt5.PublishPacket(
        "a/b",
        b"hi",
        qos=mqtt5.QoS.AT_LEAST_ONCE,
        packet_id=1,
        content_type="t",
        user_properties=[("k", "v")],
    ).write(),
    mqtt5.SubscribePacket(
        1, [mqtt5.TopicFilter("a/+"), mqtt5.TopicFilter("b", no_local=True)], subscription_id=3
    ).write(),
    mqtt5.ConnectPacket(
        "c", username="u", password=b"p", will=mqtt5.Will("w", payload=b"x")
    ).write(),
]


@given(
    st.sampled_from(SEEDS),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=3),
)
def test_what_we_accept_mqtt5_reads_the_same_way(seed: bytes, flips: list[tuple[int, int]]) -> None:
    data = bytearray(seed)
    for index, value in flips:
        data[index % len(data)] = value
    reader = FrameReader(max_packet_size=1 << 20)
    reader.receive(bytes(data))
    try:
        frame = next(reader.frames())
        mine = decode(frame, V5)
    except (ProtocolViolation, StopIteration):  # StopIteration: the flips made it incomplete
        return
    other = mqtt5_read(bytes(data[: len(data) - reader.buffered()]))  # just that one packet
    assert other is not None, f"we accept {bytes(data)!r}, mqtt5 does not: {mine!r}"
    if isinstance(mine, Publish):
        assert isinstance(other, mqtt5.PublishPacket)
        assert (other.topic, other.payload, other.qos, other.packet_id) == (
            mine.topic,
            mine.payload,
            mine.qos,
            mine.packet_id,
        )
        assert other.user_properties == list(mine.properties.user_properties)
    elif isinstance(mine, Subscribe):
        assert isinstance(other, mqtt5.SubscribePacket)
        assert [f.pattern for f in other.topic_filters] == [
            s.topic_filter for s in mine.subscriptions
        ]
        assert [f.max_qos for f in other.topic_filters] == [s.qos for s in mine.subscriptions]
    elif isinstance(mine, Connect):
        assert isinstance(other, mqtt5.ConnectPacket)
        assert (other.client_id, other.username, other.password) == (
            mine.client_id,
            mine.username,
            mine.password,
        )
