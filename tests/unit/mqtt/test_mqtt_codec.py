"""The codec against bytes built by hand (never by our encoder), and round trips of every packet.

The byte builders (packet_bytes.py) follow the spec's layouts directly (MQTT 5.0 §2-§3, 3.1.1
§2-§3), in the manner of mosquitto's broker tests, so the codec is not only checked against itself.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.mqtt.packet_bytes import b, ours, packet, props, s, u16, u32, vbi

from boxmq.errors import InvalidArgument
from boxmq.mqtt import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    PropertyId,
    ProtocolVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    RetainHandling,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    codec,
    connect_version,
    encode,
)
from boxmq.mqtt.packets import new_publish

V311 = ProtocolVersion.V311
V5 = ProtocolVersion.V5


# --- byte-exact expectations -------------------------------------------------------------------

USER = b"\x26" + s("region") + s("eu")

EXACT: list[tuple[str, ProtocolVersion, Packet, bytes]] = [
    (
        "connect-311-minimal",
        V311,
        Connect("pub", V311, clean_start=True, keep_alive=60),
        packet(0x10, s("MQTT"), b"\x04", b"\x02", u16(60), s("pub")),
    ),
    (
        "connect-311-will-user-password",
        V311,
        Connect(
            "dev-1",
            V311,
            clean_start=False,
            keep_alive=30,
            username="alice",
            password=b"\x00secret",
            will=Will("dev/1/status", b"offline", qos=1, retain=True),
        ),
        # flags: user 0x80, password 0x40, will retain 0x20, will QoS 1 0x08, will 0x04
        packet(
            0x10,
            s("MQTT"),
            b"\x04\xec",
            u16(30),
            s("dev-1"),
            s("dev/1/status"),
            b(b"offline"),
            s("alice"),
            b(b"\x00secret"),
        ),
    ),
    (
        "connect-5-properties-will-properties",
        V5,
        Connect(
            "",
            V5,
            clean_start=True,
            keep_alive=0,
            username="bob",
            password=None,
            will=Will("w", b"", qos=2, properties=Properties.build(will_delay_interval=10)),
            properties=Properties.build(session_expiry_interval=3600, receive_maximum=20),
        ),
        packet(
            0x10,
            s("MQTT"),
            b"\x05\x96",  # user 0x80, will QoS 2 0x10, will 0x04, clean start 0x02
            u16(0),
            props(b"\x11" + u32(3600), b"\x21" + u16(20)),
            s(""),
            props(b"\x18" + u32(10)),
            s("w"),
            b(b""),
            s("bob"),
        ),
    ),
    ("connack-311", V311, Connack(session_present=True), b"\x20\x02\x01\x00"),
    (
        "connack-311-refused",
        V311,
        Connack(reason=ReasonCode.NOT_AUTHORIZED),
        b"\x20\x02\x00\x05",
    ),
    ("connack-5-bare", V5, Connack(), b"\x20\x03\x00\x00\x00"),
    (
        "connack-5-properties",
        V5,
        Connack(
            reason=ReasonCode.SUCCESS,
            properties=Properties.build(
                assigned_client_identifier="auto-1", topic_alias_maximum=10, maximum_qos=1
            ),
        ),
        packet(0x20, b"\x00\x00", props(b"\x12" + s("auto-1"), b"\x22" + u16(10), b"\x24\x01")),
    ),
    (
        "publish-311-qos0",
        V311,
        Publish("a/b", b"21.5"),
        packet(0x30, s("a/b"), b"21.5"),
    ),
    (
        "publish-311-qos1-retain",
        V311,
        Publish("sensors/kitchen", b"x", qos=1, retain=True, packet_id=10),
        packet(0x33, s("sensors/kitchen"), u16(10), b"x"),
    ),
    (
        "publish-5-qos2-dup-properties",
        V5,
        Publish(
            "a/b",
            b"\x00\xff",
            qos=2,
            dup=True,
            packet_id=0xFFFF,
            properties=Properties.build(
                message_expiry_interval=5, user_properties=[("region", "eu")]
            ),
        ),
        packet(0x3C, s("a/b"), u16(0xFFFF), props(b"\x02" + u32(5), USER), b"\x00\xff"),
    ),
    ("publish-5-bare", V5, Publish("t", b"p"), packet(0x30, s("t"), b"\x00", b"p")),
    (
        "publish-5-topic-alias-only",
        V5,
        Publish("", b"p", properties=Properties.build(topic_alias=3)),
        packet(0x30, s(""), props(b"\x23" + u16(3)), b"p"),
    ),
    (
        "publish-5-long-payload",
        V5,
        Publish("t", bytes(300)),
        b"\x30" + vbi(304) + s("t") + b"\x00" + bytes(300),
    ),
    ("puback-311", V311, Puback(7), b"\x40\x02\x00\x07"),
    ("puback-5-success-short", V5, Puback(7), b"\x40\x02\x00\x07"),
    (
        "puback-5-no-subscribers",
        V5,
        Puback(7, ReasonCode.NO_MATCHING_SUBSCRIBERS),
        b"\x40\x03\x00\x07\x10",
    ),
    (
        "puback-5-reason-string",
        V5,
        Puback(7, ReasonCode.QUOTA_EXCEEDED, Properties.build(reason_string="full")),
        packet(0x40, u16(7), b"\x97", props(b"\x1f" + s("full"))),
    ),
    ("pubrec-311", V311, Pubrec(1), b"\x50\x02\x00\x01"),
    ("pubrel-311", V311, Pubrel(1), b"\x62\x02\x00\x01"),
    (
        "pubrel-5-not-found",
        V5,
        Pubrel(1, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND),
        b"\x62\x03\x00\x01\x92",
    ),
    ("pubcomp-5", V5, Pubcomp(0x1234), b"\x70\x02\x12\x34"),
    (
        "subscribe-311",
        V311,
        Subscribe(2, (Subscription("a/#", qos=1), Subscription("$share/g/b", qos=2))),
        packet(0x82, u16(2), s("a/#"), b"\x01", s("$share/g/b"), b"\x02"),
    ),
    (
        "subscribe-5-options",
        V5,
        Subscribe(
            3,
            (
                Subscription(
                    "a/+",
                    qos=1,
                    no_local=True,
                    retain_as_published=True,
                    retain_handling=RetainHandling.DO_NOT_SEND,
                ),
                Subscription("b", retain_handling=RetainHandling.SEND_IF_NEW_SUBSCRIPTION),
            ),
            Properties.build(subscription_identifiers=[200]),
        ),
        packet(0x82, u16(3), props(b"\x0b" + vbi(200)), s("a/+"), b"\x2d", s("b"), b"\x10"),
    ),
    (
        "suback-311",
        V311,
        Suback(2, (ReasonCode.GRANTED_QOS_1, ReasonCode.UNSPECIFIED_ERROR)),
        b"\x90\x04\x00\x02\x01\x80",
    ),
    (
        "suback-5",
        V5,
        Suback(3, (ReasonCode.GRANTED_QOS_2, ReasonCode.NOT_AUTHORIZED)),
        b"\x90\x05\x00\x03\x00\x02\x87",
    ),
    (
        "unsubscribe-311",
        V311,
        Unsubscribe(4, ("a/#", "b")),
        packet(0xA2, u16(4), s("a/#"), s("b")),
    ),
    (
        "unsubscribe-5",
        V5,
        Unsubscribe(4, ("a",), Properties.build(user_properties=[("region", "eu")])),
        packet(0xA2, u16(4), props(USER), s("a")),
    ),
    ("unsuback-311", V311, Unsuback(4), b"\xb0\x02\x00\x04"),
    (
        "unsuback-5",
        V5,
        Unsuback(4, (ReasonCode.SUCCESS, ReasonCode.NO_SUBSCRIPTION_EXISTED)),
        b"\xb0\x05\x00\x04\x00\x00\x11",
    ),
    ("pingreq", V311, Pingreq(), b"\xc0\x00"),
    ("pingresp", V5, Pingresp(), b"\xd0\x00"),
    ("disconnect-311", V311, Disconnect(), b"\xe0\x00"),
    ("disconnect-5-normal", V5, Disconnect(), b"\xe0\x00"),
    (
        "disconnect-5-with-will",
        V5,
        Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE),
        b"\xe0\x01\x04",
    ),
    (
        "disconnect-5-taken-over",
        V5,
        Disconnect(ReasonCode.SESSION_TAKEN_OVER, Properties.build(reason_string="bye")),
        packet(0xE0, b"\x8e", props(b"\x1f" + s("bye"))),
    ),
    ("auth-5-success", V5, Auth(), b"\xf0\x00"),
    (
        "auth-5-continue",
        V5,
        Auth(
            ReasonCode.CONTINUE_AUTHENTICATION,
            Properties.build(authentication_method="SCRAM", authentication_data=b"\x01"),
        ),
        packet(0xF0, b"\x18", props(b"\x15" + s("SCRAM"), b"\x16" + b(b"\x01"))),
    ),
]


@pytest.mark.parametrize(
    ("version", "value", "data"), [c[1:] for c in EXACT], ids=[c[0] for c in EXACT]
)
def test_encode_gives_the_bytes_built_by_hand(
    version: ProtocolVersion, value: Packet, data: bytes
) -> None:
    assert encode(value, version) == data


@pytest.mark.parametrize(
    ("version", "value", "data"), [c[1:] for c in EXACT], ids=[c[0] for c in EXACT]
)
def test_decode_of_the_bytes_built_by_hand_gives_the_value(
    version: ProtocolVersion, value: Packet, data: bytes
) -> None:
    assert ours(data, version) == value


def test_long_forms_decode_as_well_as_the_short_ones() -> None:
    # MQTT 5.0 §3.4.2.1, §3.14.2.1: reason code and property length may be there or not.
    assert ours(b"\x40\x04\x00\x07\x00\x00", V5) == Puback(7)
    assert ours(b"\x40\x03\x00\x07\x00", V5) == Puback(7)
    assert ours(b"\xe0\x02\x00\x00", V5) == Disconnect()
    assert ours(b"\xf0\x02\x00\x00", V5) == Auth()
    assert ours(b"\xf0\x02\x19\x00", V5) == Auth(ReasonCode.RE_AUTHENTICATE)
    assert encode(Auth(ReasonCode.RE_AUTHENTICATE), V5) == b"\xf0\x02\x19\x00"


def test_311_encoding_leaves_out_what_311_cannot_carry() -> None:
    # reasons and properties of acknowledgements, DISCONNECT and SUBACK/CONNACK details
    assert encode(Puback(7, ReasonCode.QUOTA_EXCEEDED), V311) == b"\x40\x02\x00\x07"
    assert encode(Publish("t", properties=Properties.build(topic_alias=1)), V311) == packet(
        0x30, s("t")
    )
    assert encode(Disconnect(ReasonCode.SERVER_SHUTTING_DOWN), V311) == b"\xe0\x00"
    assert encode(Suback(1, (ReasonCode.QUOTA_EXCEEDED,)), V311) == b"\x90\x03\x00\x01\x80"
    assert encode(Unsuback(1, (ReasonCode.SUCCESS,)), V311) == b"\xb0\x02\x00\x01"


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (ReasonCode.SUCCESS, 0),
        (ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, 1),
        (ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, 2),
        (ReasonCode.SERVER_UNAVAILABLE, 3),
        (ReasonCode.SERVER_BUSY, 3),
        (ReasonCode.BAD_USER_NAME_OR_PASSWORD, 4),
        (ReasonCode.NOT_AUTHORIZED, 5),
        (ReasonCode.BANNED, 5),
    ],
)
def test_311_connack_return_codes(reason: ReasonCode, code: int) -> None:
    # 3.1.1 §3.2.2.3, Table 3.1
    assert encode(Connack(reason=reason), V311) == bytes((0x20, 2, 0, code))


def test_connect_decides_the_version_whatever_the_caller_guessed() -> None:
    data = packet(0x10, s("MQTT"), b"\x05\x02", u16(10), props(), s("c"))
    decoded = ours(data, V311)
    assert isinstance(decoded, Connect)
    assert decoded.version is V5


def test_connect_version_peeks_without_raising() -> None:
    good = packet(0x10, s("MQTT"), b"\x04\xff")  # flags invalid, but the version is readable
    assert connect_version((1, 0, good[2:])) is V311
    assert connect_version((1, 0, packet(0x10, s("MQTT"), b"\x05")[2:])) is V5
    assert connect_version((1, 0, packet(0x10, s("MQTT"), b"\x03")[2:])) is None
    assert connect_version((1, 0, b"\x00")) is None
    assert connect_version((3, 0, good[2:])) is None


@pytest.mark.parametrize(
    ("value", "version", "message"),
    [
        (Publish("t", qos=1), V5, "packet identifier None"),
        (Publish("t", qos=1, packet_id=0x10000), V311, "packet identifier 65536"),
        (Publish("t", qos=3, packet_id=1), V5, "QoS 3"),
        (Publish("t\ud800"), V5, "surrogate"),
        (Puback(0), V5, "packet identifier 0"),
        (Auth(), V311, "AUTH does not exist"),
        (Connect("c", V5), V311, "CONNECT"),
        (Connect("c", V311, password=b"x"), V311, "password without a user name"),
    ],
)
def test_encode_refuses_what_no_peer_could_decode(
    value: Packet, version: ProtocolVersion, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        encode(value, version)


# --- round trips -------------------------------------------------------------------------------

P5 = Properties.build(user_properties=[("k", "v"), ("k", "v2")], reason_string="why")
ROUND_TRIP_311: list[Packet] = [
    Connect("c1", V311),
    Connect(
        "c2",
        V311,
        clean_start=False,
        keep_alive=65535,
        username="",
        password=b"",
        will=Will("w/t", b"bye", qos=2, retain=False),
    ),
    Connack(session_present=True),
    Connack(reason=ReasonCode.BAD_USER_NAME_OR_PASSWORD),
    Publish("a", b"", qos=0),
    Publish("a/b/c", b"\x00" * 1000, qos=2, retain=True, dup=True, packet_id=1),
    Puback(1),
    Pubrec(2),
    Pubrel(3),
    Pubcomp(65535),
    Subscribe(1, (Subscription("#", 0), Subscription("+/x", 2))),
    Suback(1, (ReasonCode.GRANTED_QOS_0, ReasonCode.UNSPECIFIED_ERROR, ReasonCode.GRANTED_QOS_2)),
    Unsubscribe(9, ("#", "a/b")),
    Unsuback(9),
    Pingreq(),
    Pingresp(),
    Disconnect(),
]
ROUND_TRIP_5: list[Packet] = [
    Connect("c1", V5),
    Connect(
        "c2",
        V5,
        clean_start=False,
        keep_alive=5,
        password=b"token",
        will=Will(
            "w",
            b"x",
            qos=1,
            retain=True,
            properties=Properties.build(
                will_delay_interval=60,
                payload_format_indicator=1,
                content_type="text/plain",
                response_topic="r",
                correlation_data=b"id",
                message_expiry_interval=9,
                user_properties=[("a", "b")],
            ),
        ),
        properties=Properties.build(
            session_expiry_interval=0xFFFFFFFF,
            receive_maximum=1,
            maximum_packet_size=1 << 20,
            topic_alias_maximum=0,
            request_response_information=1,
            request_problem_information=0,
            authentication_method="m",
            authentication_data=b"d",
            user_properties=[("k", "v")],
        ),
    ),
    Connack(
        True,
        ReasonCode.SUCCESS,
        Properties.build(
            session_expiry_interval=10,
            assigned_client_identifier="x",
            server_keep_alive=30,
            authentication_method="m",
            authentication_data=b"",
            response_information="ri",
            server_reference="other",
            reason_string="ok",
            receive_maximum=100,
            topic_alias_maximum=5,
            maximum_qos=0,
            retain_available=0,
            maximum_packet_size=1000,
            wildcard_subscription_available=0,
            subscription_identifier_available=0,
            shared_subscription_available=1,
        ),
    ),
    Connack(reason=ReasonCode.SERVER_MOVED, properties=Properties.build(server_reference="b")),
    Publish(
        "a/b",
        b"payload",
        qos=1,
        packet_id=2,
        properties=Properties.build(subscription_identifiers=[1, 268_435_455], topic_alias=9),
    ),
    Puback(1, ReasonCode.PAYLOAD_FORMAT_INVALID, P5),
    Pubrec(2, ReasonCode.PACKET_IDENTIFIER_IN_USE),
    Pubrel(3, properties=P5),
    Pubcomp(4, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND, P5),
    Subscribe(
        5,
        (Subscription("x", 1, True, True, RetainHandling.DO_NOT_SEND),),
        P5.without(PropertyId.REASON_STRING) + Properties.build(subscription_identifiers=[7]),
    ),
    Suback(5, (ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,), P5),
    Unsubscribe(6, ("x", "y"), Properties.build(user_properties=[("a", "")])),
    Unsuback(6, (ReasonCode.TOPIC_FILTER_INVALID, ReasonCode.SUCCESS), P5),
    Pingreq(),
    Pingresp(),
    Disconnect(ReasonCode.NORMAL_DISCONNECTION, Properties.build(session_expiry_interval=0)),
    Disconnect(ReasonCode.USE_ANOTHER_SERVER, Properties.build(server_reference="s2")),
    Auth(
        ReasonCode.RE_AUTHENTICATE, Properties.build(authentication_method="x", reason_string="r")
    ),
]


@pytest.mark.parametrize(
    ("version", "value"),
    [(V311, p) for p in ROUND_TRIP_311] + [(V5, p) for p in ROUND_TRIP_5],
    ids=[f"311-{type(p).__name__}" for p in ROUND_TRIP_311]
    + [f"5-{type(p).__name__}" for p in ROUND_TRIP_5],
)
def test_every_packet_type_round_trips(version: ProtocolVersion, value: Packet) -> None:
    assert ours(encode(value, version), version) == value


def test_the_round_trips_cover_every_packet_type_in_both_versions() -> None:
    every = {Connect, Connack, Publish, Puback, Pubrec, Pubrel, Pubcomp, Subscribe, Suback}
    every |= {Unsubscribe, Unsuback, Pingreq, Pingresp, Disconnect}
    assert {type(p) for p in ROUND_TRIP_311} == every
    assert {type(p) for p in ROUND_TRIP_5} == every | {Auth}


TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20)
TOPIC = TEXT.filter(lambda t: t and "+" not in t and "#" not in t)
FILTER = TEXT.filter(lambda t: t and not t.startswith("$share/"))


@st.composite
def publishes(draw: st.DrawFn, version: ProtocolVersion) -> Publish:
    qos = draw(st.integers(0, 2))
    properties = Properties()
    if version is V5:
        properties = Properties.build(
            message_expiry_interval=draw(st.none() | st.integers(0, 2**32 - 1)),
            content_type=draw(st.none() | TEXT),
            correlation_data=draw(st.none() | st.binary(max_size=16)),
            user_properties=draw(st.lists(st.tuples(TEXT, TEXT), max_size=3)),
        )
    return Publish(
        draw(TOPIC),
        draw(st.binary(max_size=300)),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(st.integers(1, 0xFFFF)) if qos else None,
        properties,
    )


@st.composite
def subscribes(draw: st.DrawFn, version: ProtocolVersion) -> Subscribe:
    def one(topic_filter: str) -> Subscription:
        if version is V311:
            return Subscription(topic_filter, draw(st.integers(0, 2)))
        return Subscription(
            topic_filter,
            draw(st.integers(0, 2)),
            draw(st.booleans()),
            draw(st.booleans()),
            draw(st.sampled_from(RetainHandling)),
        )

    filters = draw(st.lists(FILTER, min_size=1, max_size=4))
    return Subscribe(draw(st.integers(1, 0xFFFF)), tuple(one(f) for f in filters))


@given(
    st.sampled_from(ProtocolVersion).flatmap(
        lambda v: st.tuples(st.just(v), publishes(v) | subscribes(v))
    )
)
def test_generated_packets_round_trip(case: tuple[ProtocolVersion, Packet]) -> None:
    version, value = case
    assert ours(encode(value, version), version) == value


def test_the_hot_path_publish_builder_makes_the_same_value() -> None:
    properties = Properties.build(topic_alias=1)
    built = new_publish("t", b"p", 1, True, False, 5, properties)
    assert built == Publish("t", b"p", 1, True, False, 5, properties)
    assert hash(built) == hash(Publish("t", b"p", 1, True, False, 5, properties))
    with pytest.raises(AttributeError):
        built.qos = 2  # type: ignore[misc]


@given(st.sampled_from(ProtocolVersion).flatmap(lambda v: st.tuples(st.just(v), publishes(v))))
def test_a_publish_encodes_the_same_with_its_topic_remembered_or_not(
    case: tuple[ProtocolVersion, Publish],
) -> None:
    version, value = case
    codec._TOPIC_HEADS.clear()
    first = encode(value, version)  # the topic encoded and remembered
    assert encode(value, version) == first  # the topic remembered
    assert ours(first, version) == value
    # Another message on the topic: only the topic is remembered, not its packet id.
    other = new_publish(
        value.topic,
        b"x" + value.payload,
        value.qos,
        value.retain,
        value.dup,
        value.packet_id % 0xFFFF + 1 if value.packet_id else None,
        value.properties,
    )
    assert ours(encode(other, version), version) == other


def test_a_topic_that_cannot_be_encoded_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(InvalidArgument):
            encode(Publish("a\x00b", b"", 0), ProtocolVersion.V5)
    assert "a\x00b" not in codec._TOPIC_HEADS
