"""The sans-IO connection: the rules one connection checks alone, with no socket and no clock."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable

import mqtt5
import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.errors import InvalidArgument, MalformedPacket, PacketTooLarge, ProtocolViolation
from boxmq.mqtt.codec import encode
from boxmq.mqtt.connection import Connection
from boxmq.mqtt.errors import ProtocolError, ReceiveMaximumExceeded, TopicAliasInvalid
from boxmq.mqtt.packets import (
    Connect,
    Disconnect,
    Packet,
    ProtocolVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
)
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.reasons import ReasonCode

V5, V311 = ProtocolVersion.V5, ProtocolVersion.V311


def _connected(version: ProtocolVersion = V5, **props: int) -> Connection:
    connection = Connection(max_packet_size=1024, receive_maximum=2, topic_alias_maximum=4, now=0)
    connect = Connect("c", version, properties=Properties.build(**props))  # type: ignore[arg-type]
    [packet] = connection.receive(encode(connect, version), now=0)
    assert packet == connect
    connection.accepted = True
    return connection


def _publish(
    topic: str, alias: int | None = None, qos: int = 0, packet_id: int | None = None
) -> bytes:
    return encode(
        Publish(
            topic, b"x", qos, packet_id=packet_id, properties=Properties.build(topic_alias=alias)
        ),
        V5,
    )


def test_stop_reading_drops_the_rest_of_the_read_undecoded() -> None:
    """The broker stops reading a connection that ends (a DISCONNECT, a refused CONNECT):
    the packets behind it in the same read are not decoded (a bad one raises nothing), and
    the read being consumed ends there."""
    connection = _connected(V311)
    data = encode(Disconnect(), V311) + encode(Publish("a", b"x"), V311) + b"\x00\x00"
    packets = connection.packets(data, now=0)
    assert next(packets) == Disconnect()
    connection.stop_reading()
    assert list(packets) == []


@pytest.mark.parametrize("version", [V311, V5])
def test_a_positive_ack_is_read_as_its_kind_and_packet_id_and_received_built(
    version: ProtocolVersion,
) -> None:
    """`packets` gives a positive PUBACK, PUBREC, PUBREL or PUBCOMP without properties as a
    ShortAck (not built: the broker's path for every QoS 1 and 2 message); one with a reason
    code is decoded; `receive` gives each built, as `decode` does."""
    acks: list[Packet] = [Puback(1), Pubrec(2), Pubrel(3), Pubcomp(4)]
    data = b"".join(encode(ack, version) for ack in acks)
    refused = Puback(5, ReasonCode.UNSPECIFIED_ERROR)
    if version is V5:
        data += encode(refused, V5)
    read = list(_connected(version).packets(data, now=0))
    assert read[:4] == [(Puback, 1), (Pubrec, 2), (Pubrel, 3), (Pubcomp, 4)]
    assert read[4:] == ([refused] if version is V5 else [])
    assert _connected(version).receive(data, now=0) == acks + read[4:]


def test_the_first_packet_must_be_connect() -> None:
    connection = Connection(max_packet_size=1024, receive_maximum=2, topic_alias_maximum=4, now=0)
    with pytest.raises(ProtocolError):
        connection.receive(_publish("a"), now=0)
    assert connection.closing(ProtocolError("x")) == (b"", "nothing sent")  # no version yet


def test_nothing_is_sent_after_a_disconnect() -> None:
    """MQTT-3.14.4-1: after its DISCONNECT the server sends nothing more on the connection,
    such as the PUBCOMP of a PUBREL held behind a SUBSCRIBE and handled at the close (it was
    written after the DISCONNECT; found by fuzzing `boxmq serve`)."""
    connection = _connected()
    connection.send(Disconnect(ReasonCode.SESSION_TAKEN_OVER))
    connection.send(Pubcomp(1, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))
    connection.acknowledge(Pubcomp, 2)
    assert connection.send(Publish("a", b"x", 1, packet_id=3))
    assert connection.data_to_send() == [encode(Disconnect(ReasonCode.SESSION_TAKEN_OVER), V5)]


def test_nothing_is_sent_after_the_disconnect_of_a_protocol_error() -> None:
    connection = _connected()
    goodbye = connection.closing(ProtocolError("x"))
    assert goodbye == (encode(Disconnect(ReasonCode.PROTOCOL_ERROR), V5), "DISCONNECT 0x82")
    connection.acknowledge(Pubcomp, 2)
    connection.send(Pubcomp(1, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))
    assert connection.data_to_send() == []


@pytest.mark.parametrize("first", [b"\x00\x00", b"\x0f\x00", b"\x00\x02\x00\x01"])
def test_a_reserved_packet_type_first_is_a_protocol_error(first: bytes) -> None:
    """Type 0 before CONNECT raised ValueError naming it (PacketType(0)), out of the
    broker's read: asyncio's "Fatal error: protocol.buffer_updated() call failed" and a
    traceback in the log for two bytes from anyone (found by fuzzing `boxmq serve`)."""
    connection = Connection(max_packet_size=1024, receive_maximum=2, topic_alias_maximum=4, now=0)
    with pytest.raises(ProtocolError, match="reserved packet type 0 before CONNECT"):
        connection.receive(first, now=0)


@pytest.mark.parametrize(
    ("version", "answer"), [(V5, bytes.fromhex("2003009500")), (V311, b"")], ids=["v5", "v311"]
)
@pytest.mark.parametrize("step", [1, 3, 1000], ids=["byte-by-byte", "in-threes", "at-once"])
def test_a_connect_over_the_maximum_packet_size_is_answered_in_its_version(
    version: ProtocolVersion, answer: bytes, step: int
) -> None:
    """Refused from its fixed header, before its body came: a v5 CONNECT still gets CONNACK
    0x95 Packet too large (MQTT 5.0 §3.2.2.2), once the bytes that name its version came."""
    connection = Connection(max_packet_size=64, receive_maximum=2, topic_alias_maximum=4, now=0)
    connect = encode(Connect("c" * 100, version), version)
    with pytest.raises(PacketTooLarge):  # noqa: PT012 - the bytes come in pieces
        for start in range(0, len(connect), step):
            connection.receive(connect[start : start + step], now=0)
    assert connection.closing(PacketTooLarge("x"))[0] == answer


def test_a_second_connect_is_a_protocol_error() -> None:
    connection = _connected()
    with pytest.raises(ProtocolError) as caught:
        connection.receive(encode(Connect("c", V5), V5), now=1)
    goodbye, told = connection.closing(caught.value)
    assert (goodbye[0], goodbye[2], told) == (0xE0, 0x82, "DISCONNECT 0x82")  # Protocol Error


def test_topic_aliases_are_resolved_and_removed() -> None:
    connection = _connected()
    [first] = connection.receive(_publish("long/name", alias=2), now=1)
    [second] = connection.receive(_publish("", alias=2), now=1)
    assert isinstance(first, Publish)
    assert isinstance(second, Publish)
    assert (first.topic, second.topic) == ("long/name", "long/name")
    assert not second.properties  # the alias is ours, not forwarded


@pytest.mark.parametrize(
    ("topic", "alias", "error"), [("a", 5, TopicAliasInvalid), ("", 3, ProtocolError)]
)
def test_bad_aliases(topic: str, alias: int, error: type[Exception]) -> None:
    with pytest.raises(error):
        _connected().receive(_publish(topic, alias=alias), now=1)


def test_receive_maximum_counts_unanswered_publishes() -> None:
    connection = _connected()
    connection.receive(_publish("a", qos=1, packet_id=1) + _publish("a", qos=1, packet_id=2), now=1)
    connection.send(Puback(1))
    connection.receive(_publish("a", qos=1, packet_id=3), now=1)
    with pytest.raises(ReceiveMaximumExceeded) as caught:
        connection.receive(_publish("a", qos=1, packet_id=4), now=1)
    assert connection.closing(caught.value)[0][2] == 0x93


def test_v311_has_no_receive_maximum() -> None:
    connection = _connected(V311)
    data = b"".join(encode(Publish("a", b"x", 1, packet_id=i), V311) for i in range(1, 200))
    assert len(connection.receive(data, now=1)) == 199


def test_a_client_may_not_send_a_subscription_identifier() -> None:
    bad = encode(Publish("a", b"x", properties=Properties.build(subscription_identifiers=[1])), V5)
    with pytest.raises(ProtocolError):
        _connected().receive(bad, now=1)


def test_keep_alive_deadline_is_one_and_a_half_periods() -> None:
    connection = _connected()
    assert connection.deadline() is None
    connection.keep_alive = 10
    connection.receive(b"\xc0\x00", now=100)  # PINGREQ
    assert connection.deadline() == 115


def test_the_bytes_of_an_unfinished_packet_do_not_count_as_heard() -> None:
    """MQTT-3.1.2-22 counts control packets: a client that sends a packet a few bytes at a
    time (a slowloris) is heard when the packet is whole, not at each of its bytes."""
    connection = _connected()
    connection.keep_alive = 10
    long = encode(Publish("a/b", b"x" * 200), V5)  # a Remaining Length of two bytes
    assert connection.receive(long[:1], now=100) == []
    assert connection.receive(long[1:3], now=101) == []
    assert connection.deadline() == 15  # still the CONNECT's, at 0
    assert len(connection.receive(long[3:], now=102)) == 1
    assert connection.deadline() == 117
    assert len(connection.receive(b"\xc0\x00" + long[:5], now=103)) == 1  # PINGREQ, a start
    assert connection.deadline() == 118
    assert connection.receive(long[5:-1], now=110) == []
    assert connection.deadline() == 118


_STREAM = [
    encode(packet, V5)
    for packet in (
        Publish("t", b"small"),
        Publish("a/longer/topic", b"y" * 300),
        Publish("t", b""),
        Publish("big", b"z" * 20_000),  # a Remaining Length of three bytes
    )
]


@given(cuts=st.sets(st.integers(1, sum(map(len, _STREAM)) - 1), max_size=40))
def test_the_keep_alive_runs_from_the_read_that_finished_the_last_packet(cuts: set[int]) -> None:
    """Whatever reads a stream of packets comes in, the keep-alive's deadline is 1.5 periods
    after the read that brought the last byte of the last whole packet."""
    connection = Connection(
        max_packet_size=1 << 20, receive_maximum=2, topic_alias_maximum=4, now=0
    )
    connection.receive(encode(Connect("c", V5), V5), now=0)
    connection.accepted = True
    connection.keep_alive = 10
    data = b"".join(_STREAM)
    ends = list(itertools.accumulate(map(len, _STREAM)))
    heard, start = 0, 0
    for now, stop in enumerate([*sorted(cuts), len(data)], start=1):
        connection.receive(data[start:stop], now=now)
        if any(start < end <= stop for end in ends):
            heard = now
        assert connection.deadline() == heard + 15
        start = stop


def test_publishes_over_the_clients_maximum_packet_size_are_not_sent() -> None:
    connection = _connected(maximum_packet_size=20)
    connection.send(Publish("t", b"small"))
    connection.send(Publish("t", b"x" * 100))
    assert len(connection.data_to_send()) == 1


def test_topic_aliases_to_the_client_while_there_is_room() -> None:
    connection = _connected(topic_alias_maximum=1)
    for topic in ("a/long/topic", "a/long/topic", "other"):
        connection.send(Publish(topic, b"x"))
    sent = []
    for data in connection.data_to_send():
        packet, _ = mqtt5.read(memoryview(data))  # an independent codec
        assert isinstance(packet, mqtt5.PublishPacket)
        sent.append((packet.topic, packet.topic_alias))
    assert sent == [("a/long/topic", 1), ("", 1), ("other", None)]


def test_a_publish_that_fits_only_without_a_topic_alias_is_sent_without_one() -> None:
    """A topic alias is the server's choice: one that would take a PUBLISH over the client's
    Maximum Packet Size is left out, rather than the message discarded (a differential run
    against mosquitto, which sends no aliases, saw it deliver what boxmq dropped)."""
    connection = _connected(topic_alias_maximum=2, maximum_packet_size=20)
    connection.send(Publish("a/topic", b"x" * 8))  # 20 bytes; its alias would add 3
    connection.send(Publish("a/topic", b"y" * 8))  # again: the alias was never set
    connection.send(Publish("b", b"z" * 14))  # 20 bytes; its alias would replace 1 byte by 3
    connection.send(Publish("a/topic", b"x"))  # room for the alias now
    connection.send(Publish("a/topic", b"x" * 12))  # over as a topic, under by its alias
    sent = []
    for data in connection.data_to_send():
        assert len(data) <= 20
        packet, _ = mqtt5.read(memoryview(data))  # an independent codec
        assert isinstance(packet, mqtt5.PublishPacket)
        sent.append((packet.topic, packet.topic_alias, len(packet.payload)))
    assert sent == [
        ("a/topic", None, 8),
        ("a/topic", None, 8),
        ("b", None, 14),
        ("a/topic", 1, 1),
        ("", 1, 12),
    ]


def test_a_publish_that_cannot_be_encoded_raises_and_leaves_no_alias_behind() -> None:
    """Its alias never reached the client: the next PUBLISH of the topic sets it again."""
    connection = _connected(topic_alias_maximum=1)
    with pytest.raises(InvalidArgument):
        connection.send(Publish("a/long/topic", b"x", 1))  # QoS 1 without a packet id
    assert connection.data_to_send() == []
    connection.send(Publish("a/long/topic", b"x"))
    [data] = connection.data_to_send()
    packet, _ = mqtt5.read(memoryview(data))
    assert isinstance(packet, mqtt5.PublishPacket)
    assert (packet.topic, packet.topic_alias) == ("a/long/topic", 1)


def test_v311_is_closed_without_a_word() -> None:
    connection = _connected(V311)
    assert connection.closing(ProtocolError("x")) == (b"", "nothing sent")


@given(st.binary(max_size=200), st.integers(1, 9))
def test_any_bytes_after_connect_give_packets_or_one_protocol_violation(
    data: bytes, step: int
) -> None:
    connection = _connected()
    with contextlib.suppress(ProtocolViolation):
        for at in range(0, len(data), step):
            connection.receive(data[at : at + step], now=1)


_ACKS = {Puback: mqtt5.PubAckPacket, Pubrec: mqtt5.PubRecPacket, Pubcomp: mqtt5.PubCompPacket}


@given(st.integers(1, 0xFFFF), st.sampled_from([V5, V311]), st.sampled_from(list(_ACKS)))
def test_acknowledge_sends_the_bytes_of_the_packet(
    packet_id: int, version: ProtocolVersion, kind: type[Puback | Pubrec | Pubcomp]
) -> None:
    fast, slow = _connected(version), _connected(version)
    fast.acknowledge(kind, packet_id)
    slow.send(kind(packet_id))
    [data] = fast.data_to_send()
    assert [data] == slow.data_to_send()
    packet, _ = mqtt5.read(memoryview(data))  # an independent codec
    assert isinstance(packet, (mqtt5.PubAckPacket, mqtt5.PubRecPacket, mqtt5.PubCompPacket))
    assert type(packet) is _ACKS[kind]
    assert packet.packet_id == packet_id


def test_acknowledge_frees_a_place_under_receive_maximum() -> None:
    connection = _connected()
    connection.receive(_publish("a", qos=1, packet_id=1) + _publish("a", qos=1, packet_id=2), now=1)
    connection.acknowledge(Puback, 1)
    connection.receive(_publish("a", qos=1, packet_id=3), now=1)
    with pytest.raises(ReceiveMaximumExceeded):
        connection.receive(_publish("a", qos=1, packet_id=4), now=1)


def test_a_qos2_publish_sent_again_before_pubrel_takes_one_place_under_receive_maximum() -> None:
    """A repeat (DUP) of a QoS 2 PUBLISH is answered with PUBREC again, but the exchange
    finishes once, at PUBCOMP: counting each repeat would disconnect the client (0x93)."""
    connection = _connected()
    for _ in range(5):  # the first, and four repeats
        connection.receive(_publish("a", qos=2, packet_id=1), now=1)
        connection.acknowledge(Pubrec, 1)
    connection.acknowledge(Pubcomp, 1)
    connection.receive(_publish("a", qos=2, packet_id=2) + _publish("a", qos=2, packet_id=3), now=1)
    with pytest.raises(ReceiveMaximumExceeded):
        connection.receive(_publish("a", qos=2, packet_id=4), now=1)


@pytest.mark.parametrize(
    "answer",
    [
        lambda connection, packet_id: connection.acknowledge(Pubcomp, packet_id),
        lambda connection, packet_id: connection.send(Pubcomp(packet_id)),
        lambda connection, packet_id: connection.send(
            Pubcomp(packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
        ),
    ],
    ids=["acknowledge", "send", "not-found"],
)
def test_a_pubcomp_for_a_pubrel_never_counted_frees_no_place_under_receive_maximum(
    answer: Callable[[Connection, int], object],
) -> None:
    """A PUBREL for a packet id this connection never took a PUBLISH under (unknown: PUBCOMP
    0x92; or one from before a reconnect, answered with success) is answered with PUBCOMP,
    but took no place: freeing one let a client keep any number of QoS 2 PUBLISHes open, and
    their messages held, past our Receive Maximum by sending PUBRELs for ids it never used."""
    connection = _connected()  # receive_maximum=2
    connection.receive(_publish("a", qos=2, packet_id=1) + _publish("a", qos=2, packet_id=2), now=1)
    for packet_id in (7, 8, 9):  # PUBRELs for ids never used
        answer(connection, packet_id)
    with pytest.raises(ReceiveMaximumExceeded):
        connection.receive(_publish("a", qos=2, packet_id=3), now=1)


@pytest.mark.parametrize(
    "request_",
    [
        b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",  # 35 bytes: 'E' said a frame of 69
        b"HEAD / HTTP/1.0\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\n\r\n",
        b"GET /mqtt HTTP/1.1\r\nHo",  # cut short, its client gone before the rest
    ],
)
def test_an_http_request_shorter_than_its_first_frame_is_said_at_once(request_: bytes) -> None:
    """ "GET " reads as the fixed header of a 69-byte PUBACK: a shorter request (a health
    check's, waiting for its answer) was no whole frame, so nothing was said until
    connect_timeout closed it as a socket without a CONNECT."""
    connection = Connection(max_packet_size=1024, receive_maximum=2, topic_alias_maximum=4, now=0)
    with pytest.raises(MalformedPacket, match=r"^an HTTP request, not MQTT$"):
        connection.receive(request_, 0)


def test_the_first_bytes_of_a_connect_or_of_a_method_are_waited_for() -> None:
    """Too few bytes to tell a method ("GE"), or a CONNECT in pieces: no error, no packet."""
    for start in (b"GE", b"OPTIONS", b"\x10\x0c\x00\x04MQ"):
        connection = Connection(
            max_packet_size=1024, receive_maximum=2, topic_alias_maximum=4, now=0
        )
        assert connection.receive(start, 0) == []
