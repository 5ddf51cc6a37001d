"""Cross-checks against paho-mqtt (2.2, the client most users have), an independent implementation.

The bytes its client sends for 3.1.1 and 5.0 decode to what it was asked to send, and its own v5
property table and property codec agree with ours.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions
from tests.unit.mqtt.packet_bytes import ours

from boxmq.mqtt import (
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Properties,
    PropertyId,
    ProtocolVersion,
    Publish,
    RetainHandling,
    Subscribe,
    Subscription,
    Unsubscribe,
)
from boxmq.mqtt.framing import PacketType
from boxmq.mqtt.properties import ALLOWED, TYPES, WILL_ALLOWED, DataType, read_properties

V311 = ProtocolVersion.V311
V5 = ProtocolVersion.V5


# --- paho-mqtt: the bytes its client sends, and its property table -----------------------------


def paho_properties(packet_type: int) -> Any:
    """paho's Properties, untyped in paho: properties are set as attributes by their names."""
    return PahoProperties(packet_type)  # type: ignore[no-untyped-call]


class _Capture(paho.Client):
    """A paho client whose packets land in a list instead of on a socket."""

    def __init__(self, protocol: MQTTProtocolVersion, client_id: str) -> None:
        super().__init__(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
        self.sent: list[bytes] = []

    def _packet_queue(
        self,
        command: int,
        packet: bytes | bytearray,
        mid: int,
        qos: int,
        info: paho.MQTTMessageInfo | None = None,
    ) -> MQTTErrorCode:
        self.sent.append(bytes(packet))
        return MQTTErrorCode.MQTT_ERR_SUCCESS


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, socket.socket]]:
    """paho publishes only when it has a socket; this one is never written to."""
    pair = socket.socketpair()
    yield pair
    for end in pair:
        end.close()


def paho_session(
    protocol: MQTTProtocolVersion, sock: socket.socket
) -> tuple[_Capture, list[Packet]]:
    v5 = protocol == paho.MQTTv5
    client = _Capture(protocol, "paho-1")
    client.username_pw_set("alice", "pw")
    will_props = None
    if v5:
        will_props = paho_properties(PacketTypes.WILLMESSAGE)
        will_props.WillDelayInterval = 5
        connect_props = paho_properties(PacketTypes.CONNECT)
        connect_props.SessionExpiryInterval = 3600
        connect_props.UserProperty = ("a", "b")
        client._connect_properties = connect_props  # what connect(properties=...) would set
    client.will_set("dev/status", b"gone", qos=1, retain=True, properties=will_props)
    client._send_connect(30)  # what connect() sends once the socket is up
    client._sock = sock
    publish_props = None
    if v5:
        publish_props = paho_properties(PacketTypes.PUBLISH)
        publish_props.MessageExpiryInterval = 60
        publish_props.ContentType = "text/plain"
        publish_props.UserProperty = ("k", "v")
    client.publish("t/0", b"zero", qos=0)
    client.publish("t/1", b"one", qos=1, retain=True, properties=publish_props)
    client.publish("t/2", b"two", qos=2)
    if v5:
        options = SubscribeOptions(qos=2, noLocal=True, retainAsPublished=True, retainHandling=2)
        client.subscribe([("a/+", options), ("$share/g/b/#", SubscribeOptions(qos=1))])
    else:
        client.subscribe([("a/+", 2), ("$share/g/b/#", 1)])
    client.unsubscribe(["a/+", "b"])
    client._send_pingreq()
    client.disconnect()
    version = V5 if v5 else V311
    return client, [ours(data, version) for data in client.sent]


@pytest.mark.parametrize("protocol", [paho.MQTTv311, paho.MQTTv5], ids=["311", "5"])
def test_paho_client_packets_decode_to_what_paho_was_asked_to_send(
    protocol: MQTTProtocolVersion, sockets: tuple[socket.socket, socket.socket]
) -> None:
    _, packets = paho_session(protocol, sockets[0])
    v5 = protocol == paho.MQTTv5
    connect, p0, p1, p2, subscribe, unsubscribe, ping, disconnect = packets
    assert isinstance(connect, Connect)
    assert (connect.version, connect.client_id, connect.keep_alive) == (
        V5 if v5 else V311,
        "paho-1",
        30,
    )
    assert (connect.username, connect.password, connect.clean_start) == ("alice", b"pw", True)
    assert connect.will is not None
    assert (connect.will.topic, connect.will.payload, connect.will.qos, connect.will.retain) == (
        "dev/status",
        b"gone",
        1,
        True,
    )
    assert p0 == Publish("t/0", b"zero")
    assert isinstance(p1, Publish)
    assert (p1.topic, p1.payload, p1.qos, p1.retain, p1.packet_id) == ("t/1", b"one", 1, True, 2)
    assert isinstance(p2, Publish)
    assert (p2.topic, p2.qos, p2.packet_id) == ("t/2", 2, 3)  # paho counts QoS 0 ones too
    assert isinstance(subscribe, Subscribe)
    assert subscribe.subscriptions == (
        Subscription("a/+", 2, v5, v5, RetainHandling.DO_NOT_SEND if v5 else RetainHandling(0)),
        Subscription("$share/g/b/#", 1),
    )
    assert isinstance(unsubscribe, Unsubscribe)
    assert unsubscribe.topic_filters == ("a/+", "b")
    assert (ping, disconnect) == (Pingreq(), Disconnect())
    if v5:
        assert connect.properties.session_expiry_interval == 3600
        assert connect.properties.user_properties == (("a", "b"),)
        assert connect.will.properties.will_delay_interval == 5
        assert p1.properties.message_expiry_interval == 60
        assert p1.properties.content_type == "text/plain"
        assert p1.properties.user_properties == (("k", "v"),)


_PAHO_TYPES = {
    "Byte": DataType.BYTE,
    "Two Byte Integer": DataType.TWO_BYTE_INTEGER,
    "Four Byte Integer": DataType.FOUR_BYTE_INTEGER,
    "Variable Byte Integer": DataType.VARIABLE_BYTE_INTEGER,
    "Binary Data": DataType.BINARY_DATA,
    "UTF-8 Encoded String": DataType.UTF8_STRING,
    "UTF-8 String Pair": DataType.UTF8_STRING_PAIR,
}


def test_our_property_table_matches_pahos() -> None:
    table = paho_properties(PacketTypes.PUBLISH)
    names = {
        name.upper().replace(" ", "_").replace("-", ""): pid for name, pid in table.names.items()
    }
    assert {p.name: int(p) for p in PropertyId} == names
    for pid, (type_index, packets) in table.properties.items():
        assert TYPES[PropertyId(pid)] == _PAHO_TYPES[table.types[type_index]], pid
        where = {PacketType(k) for k, allowed in ALLOWED.items() if pid in allowed}
        assert where == {PacketType(k) for k in packets if k != PacketTypes.WILLMESSAGE}, pid
        assert (PropertyId(pid) in WILL_ALLOWED) == (PacketTypes.WILLMESSAGE in packets), pid


def test_paho_packs_what_we_read_and_reads_what_we_build() -> None:
    theirs_ = paho_properties(PacketTypes.PUBLISH)
    theirs_.PayloadFormatIndicator = 1
    theirs_.MessageExpiryInterval = 99
    theirs_.ContentType = "json"
    theirs_.ResponseTopic = "r"
    theirs_.CorrelationData = b"\x00\x01"
    theirs_.SubscriptionIdentifier = 1000
    theirs_.TopicAlias = 3
    theirs_.UserProperty = ("a", "1")
    theirs_.UserProperty = ("a", "2")
    mine, _ = read_properties(bytes(theirs_.pack()), 0, PacketType.PUBLISH)
    assert (mine.payload_format_indicator, mine.message_expiry_interval) == (1, 99)
    assert (mine.content_type, mine.response_topic, mine.correlation_data) == (
        "json",
        "r",
        b"\x00\x01",
    )
    assert (mine.subscription_identifiers, mine.topic_alias) == ((1000,), 3)
    assert mine.user_properties == (("a", "1"), ("a", "2"))

    built = Properties.build(
        session_expiry_interval=5,
        assigned_client_identifier="id",
        server_keep_alive=7,
        receive_maximum=9,
        maximum_qos=1,
        reason_string="r",
        user_properties=[("x", "y")],
    )
    unpacked = paho_properties(PacketTypes.CONNACK)
    unpacked.unpack(bytes((len(built.raw),)) + built.raw)
    assert (unpacked.SessionExpiryInterval, unpacked.AssignedClientIdentifier) == (5, "id")
    assert (unpacked.ServerKeepAlive, unpacked.ReceiveMaximum, unpacked.MaximumQoS) == (7, 9, 1)
    assert (unpacked.ReasonString, unpacked.UserProperty) == ("r", [("x", "y")])
