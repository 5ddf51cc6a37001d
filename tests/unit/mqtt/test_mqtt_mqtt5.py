"""Cross-checks against `mqtt5` (0.8, Rust, MQTT 5.0 only), an independent implementation.

Its packets decode with our codec to the same values, and ours decode in it, so the codec is
never only tested against itself. mqtt5 panics on some invalid UTF-8 with a `BaseException`, so
every call into it on untrusted bytes goes through `mqtt5_read`.
"""

from __future__ import annotations

import mqtt5
import pytest
from tests.unit.mqtt.packet_bytes import mqtt5_read, ours, theirs

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
    encode,
)

V311 = ProtocolVersion.V311
V5 = ProtocolVersion.V5


# --- mqtt5 writes, we read ---------------------------------------------------------------------


def test_an_mqtt5_connect_with_everything_decodes_to_the_same_values() -> None:
    sent = mqtt5.ConnectPacket(
        "device-7",
        username="alice",
        password=b"\x00\xffpw",
        clean_start=True,
        keep_alive=45,
        will=mqtt5.Will(
            "dev/7/status",
            payload=b"offline",
            qos=mqtt5.QoS.EXACTLY_ONCE,
            retain=True,
            payload_format_indicator=1,
            message_expiry_interval=600,
            content_type="text/plain",
            response_topic="dev/7/ack",
            correlation_data=b"c1",
            will_delay_interval=30,
            user_properties=[("k", "v"), ("k", "v")],
        ),
        session_expiry_interval=3600,
        authentication_method="SCRAM-SHA-1",
        authentication_data=b"client-first",
        request_problem_info=False,
        request_response_info=True,
        receive_max=20,
        topic_alias_max=8,
        max_packet_size=65536,
        user_properties=[("app", "x")],
    )
    got = ours(sent.write(), V311)  # CONNECT decides the version itself
    assert isinstance(got, Connect)
    assert (got.version, got.client_id, got.username, got.password) == (
        V5,
        "device-7",
        "alice",
        b"\x00\xffpw",
    )
    assert (got.clean_start, got.keep_alive) == (True, 45)
    p = got.properties
    assert (p.session_expiry_interval, p.receive_maximum, p.topic_alias_maximum) == (3600, 20, 8)
    assert (p.maximum_packet_size, p.request_problem_information) == (65536, 0)
    assert (p.request_response_information, p.authentication_method) == (1, "SCRAM-SHA-1")
    assert (p.authentication_data, p.user_properties) == (b"client-first", (("app", "x"),))
    assert got.will is not None
    assert (got.will.topic, got.will.payload, got.will.qos, got.will.retain) == (
        "dev/7/status",
        b"offline",
        2,
        True,
    )
    w = got.will.properties
    assert (w.will_delay_interval, w.payload_format_indicator, w.message_expiry_interval) == (
        30,
        1,
        600,
    )
    assert (w.content_type, w.response_topic, w.correlation_data) == (
        "text/plain",
        "dev/7/ack",
        b"c1",
    )
    assert w.user_properties == (("k", "v"), ("k", "v"))


def test_an_mqtt5_publish_with_every_property_decodes_to_the_same_values() -> None:
    sent = mqtt5.PublishPacket(
        "sensors/kitchen/temp",
        b"21.5",
        qos=mqtt5.QoS.AT_LEAST_ONCE,
        retain=True,
        packet_id=513,
        duplicate=True,
        payload_format_indicator=1,
        message_expiry_interval=60,
        content_type="text/plain",
        response_topic="replies/1",
        correlation_data=b"\x01\x02",
        subscription_ids=[7, 300_000],
        topic_alias=4,
        user_properties=[("b", "2"), ("a", "1"), ("b", "3")],
    )
    got = ours(sent.write())
    assert isinstance(got, Publish)
    assert (got.topic, got.payload, got.qos, got.retain, got.dup, got.packet_id) == (
        "sensors/kitchen/temp",
        b"21.5",
        1,
        True,
        True,
        513,
    )
    p = got.properties
    assert (p.payload_format_indicator, p.message_expiry_interval, p.content_type) == (
        1,
        60,
        "text/plain",
    )
    assert (p.response_topic, p.correlation_data, p.topic_alias) == ("replies/1", b"\x01\x02", 4)
    assert p.subscription_identifiers == (7, 300_000)
    assert p.user_properties == (("b", "2"), ("a", "1"), ("b", "3"))  # order and duplicates kept
    # forwarded as bytes: dropping the alias leaves a list mqtt5 still reads
    forwarded = Publish(
        "sensors/kitchen/temp", b"21.5", properties=p.without(PropertyId.TOPIC_ALIAS)
    )
    again = theirs(encode(forwarded, V5))
    assert isinstance(again, mqtt5.PublishPacket)
    assert (again.topic_alias, again.subscription_ids) == (None, [7, 300_000])
    assert again.user_properties == [("b", "2"), ("a", "1"), ("b", "3")]


def test_an_mqtt5_subscribe_and_unsubscribe_decode_with_their_options() -> None:
    sent = mqtt5.SubscribePacket(
        9,
        [
            mqtt5.TopicFilter(
                "a/+/c",
                max_qos=mqtt5.QoS.AT_LEAST_ONCE,
                no_local=True,
                retain_as_published=True,
                retain_handling=mqtt5.RetainHandling.SEND_NEVER,
            ),
            mqtt5.TopicFilter(
                "$share/g/#",
                max_qos=mqtt5.QoS.AT_MOST_ONCE,
                retain_as_published=False,
                retain_handling=mqtt5.RetainHandling.SEND_IF_SUBSCRIPTION_NOT_EXISTS,
            ),
        ],
        subscription_id=42,
        user_properties=[("x", "y")],
    )
    assert ours(sent.write()) == Subscribe(
        9,
        (
            Subscription("a/+/c", 1, True, True, RetainHandling.DO_NOT_SEND),
            Subscription("$share/g/#", 0, False, False, RetainHandling.SEND_IF_NEW_SUBSCRIPTION),
        ),
        Properties.build(subscription_identifiers=[42], user_properties=[("x", "y")]),
    )
    unsubscribe = mqtt5.UnsubscribePacket(10, ["a/+/c", "b"], user_properties=[("x", "y")])
    got = ours(unsubscribe.write())
    assert isinstance(got, Unsubscribe)
    assert (got.packet_id, got.topic_filters, got.properties.user_properties) == (
        10,
        ("a/+/c", "b"),
        (("x", "y"),),
    )


MQTT5_ACKS: list[tuple[object, Packet]] = [
    (mqtt5.PubAckPacket(1), Puback(1)),
    (
        mqtt5.PubAckPacket(2, reason_code=mqtt5.PubAckReasonCode.NOT_AUTHORIZED, reason_str="acl"),
        Puback(2, ReasonCode.NOT_AUTHORIZED, Properties.build(reason_string="acl")),
    ),
    (
        mqtt5.PubRecPacket(3, reason_code=mqtt5.PubRecReasonCode.NO_MATCHING_SUBSCRIBERS),
        Pubrec(3, ReasonCode.NO_MATCHING_SUBSCRIBERS),
    ),
    (mqtt5.PubRelPacket(4), Pubrel(4)),
    (
        mqtt5.PubCompPacket(5, reason_code=mqtt5.PubCompReasonCode.PACKET_ID_NOT_FOUND),
        Pubcomp(5, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND),
    ),
    (mqtt5.PingReqPacket(), Pingreq()),
    (mqtt5.PingRespPacket(), Pingresp()),
    (mqtt5.DisconnectPacket(), Disconnect()),
    (
        mqtt5.DisconnectPacket(
            reason_code=mqtt5.DisconnectReasonCode.DISCONNECT_WITH_WILL_MESSAGE,
            session_expiry_interval=0,
        ),
        Disconnect(
            ReasonCode.DISCONNECT_WITH_WILL_MESSAGE, Properties.build(session_expiry_interval=0)
        ),
    ),
    (mqtt5.AuthPacket(), Auth()),
    (
        mqtt5.AuthPacket(
            reason_code=mqtt5.AuthReasonCode.CONTINUE_AUTHENTICATION,
            authentication_method="SCRAM",
            authentication_data=b"\x00",
        ),
        Auth(
            ReasonCode.CONTINUE_AUTHENTICATION,
            Properties.build(authentication_method="SCRAM", authentication_data=b"\x00"),
        ),
    ),
    (
        mqtt5.SubAckPacket(
            1,
            [
                mqtt5.SubAckReasonCode.GRANTED_QOS_EXACTLY_ONCE,
                mqtt5.SubAckReasonCode.QUOTA_EXCEEDED,
            ],
        ),
        Suback(1, (ReasonCode.GRANTED_QOS_2, ReasonCode.QUOTA_EXCEEDED)),
    ),
    (
        mqtt5.UnsubAckPacket(1, [mqtt5.UnsubAckReasonCode.NO_SUBSCRIPTION_EXISTED]),
        Unsuback(1, (ReasonCode.NO_SUBSCRIPTION_EXISTED,)),
    ),
]


@pytest.mark.parametrize(("sent", "expected"), MQTT5_ACKS, ids=lambda v: type(v).__name__)
def test_mqtt5_acknowledgements_decode_to_the_same_values(sent: object, expected: Packet) -> None:
    write = getattr(sent, "write")  # noqa: B009  (every mqtt5 packet has it; the union does not say)
    assert ours(write()) == expected


def test_an_mqtt5_connack_with_every_property_decodes_to_the_same_values() -> None:
    sent = mqtt5.ConnAckPacket(
        session_present=True,
        reason_code=mqtt5.ConnAckReasonCode.SUCCESS,
        session_expiry_interval=100,
        assigned_client_id="auto-1",
        server_keep_alive=20,
        response_info="resp/",
        server_reference="other:1883",
        reason_str="welcome",
        receive_max=50,
        topic_alias_max=10,
        max_qos=mqtt5.QoS.AT_LEAST_ONCE,
        retain_available=False,
        max_packet_size=4096,
        wildcard_subscription_available=False,
        subscription_id_available=False,
        shared_subscription_available=False,
        user_properties=[("a", "b")],
    )
    got = ours(sent.write())
    assert isinstance(got, Connack)
    assert (got.session_present, got.reason) == (True, ReasonCode.SUCCESS)
    p = got.properties
    assert (p.session_expiry_interval, p.assigned_client_identifier, p.server_keep_alive) == (
        100,
        "auto-1",
        20,
    )
    assert (p.response_information, p.server_reference, p.reason_string) == (
        "resp/",
        "other:1883",
        "welcome",
    )
    assert (p.receive_maximum, p.topic_alias_maximum, p.maximum_qos, p.retain_available) == (
        50,
        10,
        1,
        0,
    )
    assert (p.maximum_packet_size, p.wildcard_subscription_available) == (4096, 0)
    assert (p.subscription_identifier_available, p.shared_subscription_available) == (0, 0)
    assert p.user_properties == (("a", "b"),)


# --- we write, mqtt5 reads ---------------------------------------------------------------------


def test_our_connack_reads_in_mqtt5_with_every_server_property() -> None:
    sent = Connack(
        False,
        ReasonCode.SUCCESS,
        Properties.build(
            session_expiry_interval=0,
            assigned_client_identifier="boxmq-1",
            server_keep_alive=90,
            receive_maximum=100,
            topic_alias_maximum=16,
            maximum_qos=1,
            retain_available=1,
            maximum_packet_size=1 << 20,
            wildcard_subscription_available=1,
            subscription_identifier_available=1,
            shared_subscription_available=1,
            reason_string="hello",
            user_properties=[("server", "boxmq")],
        ),
    )
    got = theirs(encode(sent, V5))
    assert isinstance(got, mqtt5.ConnAckPacket)
    assert (got.session_present, got.reason_code) == (False, mqtt5.ConnAckReasonCode.SUCCESS)
    assert (got.assigned_client_id, got.server_keep_alive, got.receive_max) == ("boxmq-1", 90, 100)
    assert (got.topic_alias_max, got.max_qos, got.max_packet_size) == (16, 1, 1 << 20)
    assert (got.session_expiry_interval, got.reason_str) == (0, "hello")
    assert got.user_properties == [("server", "boxmq")]


def test_our_refusing_connack_reads_in_mqtt5() -> None:
    got = theirs(encode(Connack(reason=ReasonCode.BAD_USER_NAME_OR_PASSWORD), V5))
    assert isinstance(got, mqtt5.ConnAckPacket)
    assert got.reason_code == mqtt5.ConnAckReasonCode.BAD_USER_NAME_OR_PASSWORD


def test_our_acknowledgements_read_in_mqtt5() -> None:
    why = Properties.build(reason_string="why", user_properties=[("k", "v")])
    pairs: list[tuple[Packet, object]] = [
        (Puback(7), mqtt5.PubAckPacket(7)),
        (
            Puback(7, ReasonCode.QUOTA_EXCEEDED, why),
            mqtt5.PubAckPacket(
                7,
                reason_code=mqtt5.PubAckReasonCode.QUOTA_EXCEEDED,
                reason_str="why",
                user_properties=[("k", "v")],
            ),
        ),
        (
            Pubrec(8, ReasonCode.NO_MATCHING_SUBSCRIBERS),
            mqtt5.PubRecPacket(8, reason_code=mqtt5.PubRecReasonCode.NO_MATCHING_SUBSCRIBERS),
        ),
        (Pubrel(9), mqtt5.PubRelPacket(9)),
        (
            Pubcomp(10, properties=why),
            mqtt5.PubCompPacket(10, reason_str="why", user_properties=[("k", "v")]),
        ),
        (
            Suback(3, (ReasonCode.GRANTED_QOS_1, ReasonCode.TOPIC_FILTER_INVALID)),
            mqtt5.SubAckPacket(
                3,
                [
                    mqtt5.SubAckReasonCode.GRANTED_QOS_AT_LEAST_ONCE,
                    mqtt5.SubAckReasonCode.TOPIC_FILTER_INVALID,
                ],
            ),
        ),
        (
            Unsuback(4, (ReasonCode.SUCCESS,), why),
            mqtt5.UnsubAckPacket(
                4,
                [mqtt5.UnsubAckReasonCode.SUCCESS],
                reason_str="why",
                user_properties=[("k", "v")],
            ),
        ),
        (Pingresp(), mqtt5.PingRespPacket()),
        (
            Disconnect(ReasonCode.SESSION_TAKEN_OVER, Properties.build(server_reference="b:1")),
            mqtt5.DisconnectPacket(
                reason_code=mqtt5.DisconnectReasonCode.SESSION_TAKEN_OVER, server_reference="b:1"
            ),
        ),
        (
            Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT),
            mqtt5.DisconnectPacket(reason_code=mqtt5.DisconnectReasonCode.KEEP_ALIVE_TIMEOUT),
        ),
        (
            Auth(ReasonCode.CONTINUE_AUTHENTICATION, Properties.build(authentication_method="m")),
            mqtt5.AuthPacket(
                reason_code=mqtt5.AuthReasonCode.CONTINUE_AUTHENTICATION, authentication_method="m"
            ),
        ),
    ]
    for packet, expected in pairs:
        assert repr(theirs(encode(packet, V5))) == repr(expected), packet


def test_our_publish_and_client_packets_read_in_mqtt5() -> None:
    publish = Publish(
        "a/b",
        b"\x00\x01",
        qos=2,
        retain=True,
        dup=True,
        packet_id=77,
        properties=Properties.build(
            payload_format_indicator=0,
            message_expiry_interval=1,
            content_type="bin",
            response_topic="r/1",
            correlation_data=b"xyz",
            subscription_identifiers=[1, 2],
            user_properties=[("k", "1"), ("k", "2")],
        ),
    )
    expected = mqtt5.PublishPacket(
        "a/b",
        b"\x00\x01",
        qos=mqtt5.QoS.EXACTLY_ONCE,
        retain=True,
        packet_id=77,
        duplicate=True,
        message_expiry_interval=1,
        content_type="bin",
        response_topic="r/1",
        correlation_data=b"xyz",
        subscription_ids=[1, 2],
        user_properties=[("k", "1"), ("k", "2")],
    )
    assert repr(theirs(encode(publish, V5))) == repr(expected)
    subscribe = Subscribe(
        5,
        (Subscription("x/#", 2, False, True, RetainHandling.SEND_IF_NEW_SUBSCRIPTION),),
        Properties.build(subscription_identifiers=[12]),
    )
    got = theirs(encode(subscribe, V5))
    assert repr(got) == repr(
        mqtt5.SubscribePacket(
            5,
            [
                mqtt5.TopicFilter(
                    "x/#",
                    max_qos=mqtt5.QoS.EXACTLY_ONCE,
                    no_local=False,
                    retain_as_published=True,
                    retain_handling=mqtt5.RetainHandling.SEND_IF_SUBSCRIPTION_NOT_EXISTS,
                )
            ],
            subscription_id=12,
        )
    )
    connect = Connect(
        "c",
        V5,
        clean_start=False,
        keep_alive=10,
        username="u",
        password=b"p",
        will=Will("w", b"m", 1, True, Properties.build(will_delay_interval=3)),
        properties=Properties.build(session_expiry_interval=7, receive_maximum=3),
    )
    got_connect = theirs(encode(connect, V5))
    assert isinstance(got_connect, mqtt5.ConnectPacket)
    assert (got_connect.client_id, got_connect.username, got_connect.password) == ("c", "u", b"p")
    assert (got_connect.session_expiry_interval, got_connect.receive_max) == (7, 3)
    assert got_connect.will is not None
    assert (got_connect.will.topic, got_connect.will.will_delay_interval) == ("w", 3)


def test_an_empty_auth_is_our_spec_reading_not_mqtt5s() -> None:
    # MQTT 5.0 §3.15.2.1: "The Reason Code and Property Length can be omitted if the Reason Code
    # is 0x00 (Success) and there are no Properties." mqtt5 0.8 refuses that form (and writes
    # b"\xf0\x02\x00\x00"); we read both and write the short one.
    assert encode(Auth(), V5) == b"\xf0\x00"
    assert mqtt5_read(b"\xf0\x00") is None
    assert ours(mqtt5.AuthPacket().write()) == Auth()
