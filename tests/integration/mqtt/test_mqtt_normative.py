"""MQTT 5.0's numbered server rules that no other test checked, each over a raw socket and
named by its id, so a grep for the id finds the test that holds the server to it.

The bytes are built here and in raw.py, not by boxmq's codec, so the codec is not tested
against itself.
"""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import WAIT, RunningServer, start_server
from tests.integration.mqtt.raw import (
    PINGREQ,
    answers_to,
    connect_packet,
    longer,
    nothing,
    open_raw,
    packet,
    publish,
    read,
    string,
    until_closed,
)

from boxmq.clock import ManualClock


def _connected(server: RunningServer, client_id: str = "n") -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    sock.sendall(connect_packet(client_id, clean=True))
    kind, body = read(sock)
    assert (kind, body[:2]) == (0x20, b"\x00\x00"), body.hex()
    return sock


def _answers_to(
    server: RunningServer, sent: bytes, *, first: bool = False
) -> list[tuple[int, bytes]]:
    """Every packet the server sent for `sent` before it closed a new connection: `sent`
    after a CONNECT it accepted, or as the connection's first packet (`first`)."""
    if first:
        return answers_to(socket.create_connection((server.host, server.port), timeout=WAIT), sent)
    return answers_to(_connected(server), sent)


# A fixed header's flag bits other than PUBLISH's are reserved and must be as §2.1.3's
# table lists them (MQTT-2.1.3-1); anything else is a Malformed Packet, answered with
# DISCONNECT 0x81 and a close (MQTT-4.13.1-1). Each packet's own rule is named beside it.
BAD_FLAGS = [
    ("PUBACK 0x41", bytes([0x41, 2, 0, 1])),  # §3.4.1
    ("PUBREC 0x51", bytes([0x51, 2, 0, 1])),  # §3.5.1
    ("PUBREL 0x60", bytes([0x60, 2, 0, 1])),  # MQTT-3.6.1-1
    ("PUBCOMP 0x71", bytes([0x71, 2, 0, 1])),  # §3.7.1
    ("SUBSCRIBE 0x80", packet(0x80, b"\x00\x01\x00" + string("a") + b"\x00")),  # MQTT-3.8.1-1
    ("UNSUBSCRIBE 0xA0", packet(0xA0, b"\x00\x01\x00" + string("a"))),  # MQTT-3.10.1-1
    ("PINGREQ 0xC1", bytes([0xC1, 0])),  # §3.12.1
    ("DISCONNECT 0xE1", bytes([0xE1, 0])),  # MQTT-3.14.1-1
    ("AUTH 0xF1", bytes([0xF1, 0])),  # MQTT-3.15.1-1
]


@pytest.mark.parametrize("bad", [c[1] for c in BAD_FLAGS], ids=[c[0] for c in BAD_FLAGS])
def test_reserved_flag_bits_not_as_listed_are_a_malformed_packet(
    server: RunningServer, bad: bytes
) -> None:
    """MQTT-2.1.3-1, MQTT-4.13.1-1: DISCONNECT 0x81 Malformed Packet, then closed."""
    assert _answers_to(server, bad) == [(0xE0, b"\x81")]


def _connect(flags: int, payload: bytes) -> bytes:
    """An MQTT 5 CONNECT with these Connect Flags (§3.1.2.3), Keep Alive 30 s, no properties."""
    return packet(0x10, string("MQTT") + bytes([5, flags, 0, 30, 0]) + payload)


def test_a_remaining_length_longer_than_it_needs_is_a_malformed_packet(
    server: RunningServer,
) -> None:
    """MQTT-1.5.5-1: the minimum number of bytes (3.1.1 asks none: test_mqtt311_normative);
    a CONNECT so gets CONNACK 0x81 (MQTT-3.1.4-1), a PINGREQ DISCONNECT 0x81 (MQTT-4.13.1-1)."""
    connect = longer(0x10, _connect(0x02, string("long"))[2:], 3)
    assert _answers_to(server, connect, first=True) == [(0x20, b"\x00\x81\x00")]
    assert _answers_to(server, longer(0xC0, b"", 2)) == [(0xE0, b"\x81")]


WILL = b"\x00" + string("w") + b"\x00\x01x"  # no Will Properties, topic "w", payload "x"

# Connect Flags that contradict each other or the payload: a Malformed Packet (§3.1.2.3).
BAD_CONNECTS = [
    ("reserved flag set", _connect(0x03, string("a"))),  # MQTT-3.1.2-3
    ("Will QoS without a Will", _connect(0x02 | 0x08, string("a"))),  # MQTT-3.1.2-11
    ("Will QoS 3", _connect(0x02 | 0x04 | 0x18, string("a") + WILL)),  # MQTT-3.1.2-12
    ("Will Retain without a Will", _connect(0x02 | 0x20, string("a"))),  # MQTT-3.1.2-13
    ("Will Flag without a Will", _connect(0x02 | 0x04, string("a"))),  # MQTT-3.1.2-9
    ("User Name Flag without one", _connect(0x02 | 0x80, string("a"))),  # MQTT-3.1.2-17
    ("Password Flag without one", _connect(0x02 | 0x40, string("a"))),  # MQTT-3.1.2-19
]


@pytest.mark.parametrize("bad", [c[1] for c in BAD_CONNECTS], ids=[c[0] for c in BAD_CONNECTS])
def test_a_malformed_connect_gets_a_refusing_connack_and_no_disconnect(
    server: RunningServer, bad: bytes
) -> None:
    """MQTT-3.1.4-1: checked and closed; CONNACK 0x81 with Session Present 0 (MQTT-3.2.2-6),
    closed after it (MQTT-3.2.2-7, MQTT-4.13.2-1), and never a DISCONNECT, which may only
    follow a CONNACK that accepted (MQTT-3.14.0-1)."""
    assert _answers_to(server, bad, first=True) == [(0x20, b"\x00\x81\x00")]


def test_the_first_answer_is_one_connack_then_pingresp(server: RunningServer) -> None:
    """MQTT-3.1.3-5: a client id of 23 of the listed characters is allowed, with CONNACK 0x00
    (MQTT-3.1.4-5); MQTT-3.2.0-1: the CONNACK comes first, with its Connect Acknowledge
    Flags' reserved bits 0 (MQTT-3.2.2-1) and Session Present 0 for Clean Start
    (MQTT-3.2.2-2); MQTT-3.2.0-2: no second CONNACK, however many packets follow;
    MQTT-3.12.4-1: each PINGREQ gets a PINGRESP."""
    client_id = "0123456789abcdefghijXYZ"
    assert len(client_id) == 23
    with socket.create_connection((server.host, server.port), timeout=WAIT) as sock:
        sock.sendall(connect_packet(client_id, clean=True) + PINGREQ * 3)
        kind, body = read(sock)
        assert (kind, body[:2]) == (0x20, b"\x00\x00"), body.hex()
        assert [read(sock) for _ in range(3)] == [(0xD0, b"")] * 3
        sock.sendall(PINGREQ)
        assert read(sock) == (0xD0, b"")


def test_session_present_says_whether_a_session_was_resumed(server: RunningServer) -> None:
    """MQTT-3.2.2-3: Clean Start 0 gets Session Present 1 when the server holds the client's
    session, known by its client id (MQTT-3.1.3-2; kept after its connection closed, its
    Session Expiry Interval being over 0, MQTT-3.1.2-23, and resumed, MQTT-3.1.2-5), else
    0 (a new one, MQTT-3.1.2-6);
    MQTT-3.2.2-2: Clean Start 1 gets 0 even when there was one, which it discarded
    (MQTT-3.1.2-4, MQTT-3.1.4-4)."""
    first, present = open_raw(server, "kept")
    first.close()
    assert not present
    again, present = open_raw(server, "kept")
    again.close()
    assert present
    clean, present = open_raw(server, "kept", clean=True)
    clean.close()
    assert not present


def _subscribe(packet_id: int, *filters: tuple[str, int]) -> bytes:
    """SUBSCRIBE of these (filter, options) pairs, without properties."""
    pairs = b"".join(string(f) + bytes([options]) for f, options in filters)
    return packet(0x82, packet_id.to_bytes(2, "big") + b"\x00" + pairs)


def _unsubscribe(packet_id: int, *filters: str) -> bytes:
    return packet(0xA2, packet_id.to_bytes(2, "big") + b"\x00" + b"".join(map(string, filters)))


def _payload(sock: socket.socket) -> bytes:
    """The payload of the next PUBLISH, a QoS 0 one without properties."""
    kind, body = read(sock)
    assert kind == 0x30, (hex(kind), body.hex())
    return body[2 + int.from_bytes(body[:2], "big") + 1 :]


BAD_SUBSCRIPTIONS = [
    ("SUBSCRIBE without a filter", packet(0x82, b"\x00\x01\x00"), 0x82),  # MQTT-3.8.3-2
    ("UNSUBSCRIBE without a filter", packet(0xA2, b"\x00\x01\x00"), 0x82),  # MQTT-3.10.3-2
    ("options' reserved bits set", _subscribe(1, ("a", 0xC1)), 0x81),  # MQTT-3.8.3-5
]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [c[1:] for c in BAD_SUBSCRIPTIONS],
    ids=[c[0] for c in BAD_SUBSCRIPTIONS],
)
def test_a_subscribe_or_unsubscribe_breaking_its_payload_rules_is_refused(
    server: RunningServer, bad: bytes, reason: int
) -> None:
    """MQTT-4.13.1-1: DISCONNECT with the reason the spec gives, then closed."""
    assert _answers_to(server, bad) == [(0xE0, bytes([reason]))]


def test_unsubscribe_deletes_only_the_filter_it_names_character_for_character(
    server: RunningServer,
) -> None:
    """MQTT-3.10.4-1: a filter that only matches the same topics ("a/#", "a/+/" for "a/+")
    deletes nothing; MQTT-3.10.4-4, MQTT-3.10.4-5: an UNSUBACK with the UNSUBSCRIBE's
    packet id even so; MQTT-3.10.4-6, MQTT-3.11.3-1: one UNSUBACK for several filters, a
    reason code each, in their order (0x11 No subscription existed). The SUBACK likewise
    (MQTT-3.8.4-1, MQTT-3.8.4-2, MQTT-3.8.4-5, MQTT-3.8.4-6, MQTT-3.9.3-1)."""
    with _connected(server, "unsubscriber") as sock, _connected(server, "sender") as sender:
        sock.sendall(_subscribe(7, ("a/+", 0), ("b", 1), ("c/#", 2)))
        assert read(sock) == (0x90, b"\x00\x07\x00\x00\x01\x02")
        sock.sendall(_unsubscribe(0x0102, "a/#", "a/+/", "A/+", "a/+ "))
        assert read(sock) == (0xB0, b"\x01\x02\x00\x11\x11\x11\x8f")  # "+ " is no level
        sender.sendall(publish("a/b", b"kept"))
        assert _payload(sock) == b"kept"
        sock.sendall(_unsubscribe(9, "b", "a/+", "nothing"))
        assert read(sock) == (0xB0, b"\x00\x09\x00\x00\x00\x11")
        with _connected(server, "witness") as witness:
            witness.sendall(_subscribe(1, ("a/+", 0)))
            assert read(witness)[0] == 0x90
            sender.sendall(publish("a/b", b"gone"))
            assert _payload(witness) == b"gone"  # the server has routed it
        assert nothing(sock)


def test_unsubscribe_of_a_malformed_filter_answers_topic_filter_invalid(
    server: RunningServer,
) -> None:
    """MQTT 5.0 §3.11.3: 0x8F Topic Filter invalid for a filter that breaks §4.7's rules
    ("#" not last, "+" beside text, a share with no filter), not 0x11 as if it could have
    been subscribed to; the well-formed filters of the same UNSUBSCRIBE are answered as
    ever, and the subscription it names is gone."""
    with _connected(server, "tidy") as sock:
        sock.sendall(_subscribe(3, ("a/+", 0)))
        assert read(sock) == (0x90, b"\x00\x03\x00\x00")
        sock.sendall(_unsubscribe(4, "a/#/b", "a/+", "a+/b", "$share/g", "never"))
        assert read(sock) == (0xB0, b"\x00\x04\x00\x8f\x00\x8f\x8f\x11")


def test_topic_matching_neither_normalizes_nor_folds_case(server: RunningServer) -> None:
    """MQTT-4.7.3-4: "é" composed (NFC, U+00E9) and decomposed (NFD, e + U+0301) are two
    topics, as are "A" and "a"; each subscriber gets only the one it named."""
    composed, decomposed = "\u00e9", "e\u0301"
    with _connected(server, "s") as sock, _connected(server, "p") as sender:
        sock.sendall(_subscribe(1, (composed, 0), ("A", 0), ("z", 0)))
        assert read(sock) == (0x90, b"\x00\x01\x00\x00\x00\x00")
        topics = [decomposed, "a", composed, "A", "z"]
        sender.sendall(b"".join(publish(topic, topic.encode()) for topic in topics))
        # Order across topics is not MQTT's to keep (MQTT-4.6.0-5 keeps it per topic).
        got = sorted(_payload(sock) for _ in range(3))
        assert got == sorted([composed.encode(), b"A", b"z"])
        assert nothing(sock)


def _connect_v5(
    server: RunningServer, client_id: str, properties: bytes, *, clean: bool = True
) -> socket.socket:
    """A connected socket whose CONNECT (Keep Alive 30 s) carried these properties."""
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    head = bytes([5, 0x02 if clean else 0x00, 0, 30, len(properties)])
    sock.sendall(packet(0x10, string("MQTT") + head + properties + string(client_id)))
    kind, body = read(sock)
    assert (kind, body[1]) == (0x20, 0), body.hex()
    return sock


def _user_property(name: str, value: str) -> bytes:
    return b"\x26" + string(name) + string(value)


# Properties a subscriber must get as they were sent (§3.3.2.3): User Properties with a
# repeated name, in an order no sorting gives back (MQTT-3.3.2-17, MQTT-3.3.2-18), a
# Payload Format Indicator (MQTT-3.3.2-4), a Content Type (MQTT-3.3.2-20), a Response
# Topic (MQTT-3.3.2-15) and Correlation Data with a zero byte (MQTT-3.3.2-16).
FORWARDED = (
    _user_property("k", "2")
    + _user_property("k", "1")
    + _user_property("a", "x")
    + _user_property("k", "2")
    + b"\x01\x01"
    + b"\x03"
    + string("text/x")
    + b"\x08"
    + string("r/t")
    + b"\x09\x00\x02\xff\x00"
)


@pytest.mark.parametrize("away", [False, True], ids=["connected", "from-disk"])
def test_a_publishs_properties_reach_a_subscriber_unaltered_and_in_order(
    server: RunningServer, away: bool
) -> None:
    """MQTT-3.3.2-4, MQTT-3.3.2-15, MQTT-3.3.2-16, MQTT-3.3.2-17, MQTT-3.3.2-18,
    MQTT-3.3.2-20, to a subscriber connected (sent from memory) and to one whose persistent
    session was away (sent from its copy on disk)."""
    expiry = b"\x11" + (300).to_bytes(4, "big")
    subscriber = _connect_v5(server, "subscriber", expiry, clean=not away)
    subscriber.sendall(_subscribe(1, ("u", 1)))
    assert read(subscriber)[0] == 0x90
    if away:
        subscriber.close()
    with _connected(server, "publisher") as publisher:
        body = string("u") + b"\x00\x05" + bytes([len(FORWARDED)]) + FORWARDED + b"body"
        publisher.sendall(packet(0x32, body))
        assert read(publisher) == (0x40, b"\x00\x05")  # PUBACK: stored
    if away:
        subscriber = _connect_v5(server, "subscriber", expiry, clean=False)
    with subscriber:
        kind, body = read(subscriber)
        assert kind & 0xF6 == 0x32, hex(kind)  # QoS 1
        packet_id, length = body[3:5], body[5]
        assert body[:3] == string("u")
        assert body[6 : 6 + length] == FORWARDED
        assert body[6 + length :] == b"body"
        subscriber.sendall(packet(0x40, packet_id))


@pytest.mark.parametrize("problems", [0, 1], ids=["no-problem-information", "problem-information"])
def test_a_reason_string_only_for_a_client_that_wants_one(
    server: RunningServer, problems: int
) -> None:
    """MQTT-3.1.2-29: with Request Problem Information 0, no Reason String on a PUBACK; here
    the PUBACK 0x91 of a QoS 1 PUBLISH reusing the packet id of a QoS 2 one awaiting its
    PUBREL, which has one for a client that asked (the default, 1)."""
    with _connect_v5(server, "asker", bytes([0x17, problems])) as sock:
        sock.sendall(packet(0x34, string("q") + b"\x00\x05\x00" + b"m"))  # QoS 2, id 5
        assert read(sock) == (0x50, b"\x00\x05")
        sock.sendall(packet(0x32, string("q") + b"\x00\x05\x00" + b"m"))  # QoS 1, id 5
        kind, body = read(sock)
        assert (kind, body[:3]) == (0x40, b"\x00\x05\x91")
        if problems:
            assert body[4] == 0x1F, body.hex()  # Reason String
        else:
            assert body[3:] in (b"", b"\x00"), body.hex()


def _topic_alias(body: bytes) -> int | None:
    """The Topic Alias of a QoS 0 PUBLISH's body, if it has one (properties under 128
    bytes, Topic Alias first or alone, as any server puts it in this test)."""
    properties = body[2 + int.from_bytes(body[:2], "big") :]
    assert properties[0] < 0x80, body.hex()
    if properties[0] and properties[1] == 0x23:
        return int.from_bytes(properties[2:4], "big")
    assert b"\x23" not in properties[1 : 1 + properties[0]], body.hex()
    return None


def test_topic_aliases_to_a_client_stay_within_its_maximum(server: RunningServer) -> None:
    """MQTT-3.1.2-27: none to a client that announced no Topic Alias Maximum;
    MQTT-3.1.2-26, MQTT-3.3.2-11: none above the maximum a client announced (1 here)."""
    topics = ["t/1", "t/2", "t/1", "t/2", "t/1"]
    with (
        _connect_v5(server, "none", b"") as none,
        _connect_v5(server, "one", b"\x22\x00\x01") as one,
        _connected(server, "sender") as sender,
    ):
        for sock in (none, one):
            sock.sendall(_subscribe(1, ("t/+", 0)))
            assert read(sock)[0] == 0x90
        sender.sendall(b"".join(publish(topic, b"m") for topic in topics))
        assert [_topic_alias(read(none)[1]) for _ in topics] == [None] * len(topics)
        aliases = {_topic_alias(read(one)[1]) for _ in topics}
        assert aliases <= {None, 1}
        assert 1 in aliases  # it did use one


def test_retain_handling_and_retain_as_published(server: RunningServer) -> None:
    """MQTT-3.3.1-10: Retain Handling 1 sends the retained message for a new subscription
    only; MQTT-3.3.1-11: Retain Handling 2 never; MQTT-3.3.1-12: Retain As Published 0
    forwards a retained PUBLISH with RETAIN 0, MQTT-3.3.1-13: 1 with the RETAIN it came
    with (a retained message sent for a subscription has RETAIN 1 either way, §3.3.1.3)."""
    with _connected(server, "publisher") as publisher, _connected(server, "s") as sock:
        publisher.sendall(packet(0x33, string("r/1") + b"\x00\x01\x00" + b"kept"))
        assert read(publisher) == (0x40, b"\x00\x01")  # stored as the retained message
        retained = (0x31, string("r/1") + b"\x00kept")
        sock.sendall(_subscribe(1, ("r/+", 0x10)))  # Retain Handling 1, new
        assert [read(sock), read(sock)] == [(0x90, b"\x00\x01\x00\x00"), retained]
        sock.sendall(_subscribe(2, ("r/+", 0x10)))  # Retain Handling 1, existing
        assert read(sock) == (0x90, b"\x00\x02\x00\x00")
        sock.sendall(_subscribe(3, ("r/#", 0x20)))  # Retain Handling 2
        assert read(sock) == (0x90, b"\x00\x03\x00\x00")
        sock.sendall(_subscribe(4, ("r/1", 0x08)))  # Retain As Published, Retain Handling 0
        assert [read(sock), read(sock)] == [(0x90, b"\x00\x04\x00\x00"), retained]
        publisher.sendall(packet(0x31, string("r/1") + b"\x00" + b"live"))
        flags = sorted(read(sock)[0] for _ in range(3))  # one copy per subscription
        assert flags == [0x30, 0x30, 0x31]


def _delivered(sock: socket.socket) -> tuple[int, bytes]:
    """(first byte, payload) of the next PUBLISH, without properties, acknowledged."""
    kind, body = read(sock)
    assert kind & 0xF0 == 0x30, (hex(kind), body.hex())
    end = 2 + int.from_bytes(body[:2], "big")
    packet_id = body[end : end + 2]
    sock.sendall(packet(0x40 if kind & 0x06 == 0x02 else 0x50, packet_id))
    return kind, body[end + 3 :]


def test_a_packet_id_is_free_again_once_its_exchange_ended(server: RunningServer) -> None:
    """A PUBLISH reusing the packet id of an exchange that ended is a new message: after
    the PUBACK (MQTT-4.3.2-5, even with DUP set), after a PUBREC of 0x80 or more
    (MQTT-4.3.3-9; here 0x87 for a PUBLISH to $SYS/) and after the PUBCOMP (MQTT-4.3.3-12).
    The DUP a subscriber gets says only whether the server is sending it again
    (MQTT-3.3.1-3): each copy here has DUP 0."""
    with _connected(server, "receiver") as receiver, _connected(server, "sender") as sender:
        receiver.sendall(_subscribe(1, ("ok", 1)))
        assert read(receiver)[0] == 0x90
        sender.sendall(publish("ok", b"one", qos=1, packet_id=9))
        assert read(sender) == (0x40, b"\x00\x09")
        sender.sendall(publish("ok", b"two", qos=1, packet_id=9, dup=True))
        assert read(sender) == (0x40, b"\x00\x09")
        assert [_delivered(receiver) for _ in range(2)] == [(0x32, b"one"), (0x32, b"two")]
        sender.sendall(publish("$SYS/x", b"refused", qos=2, packet_id=7))
        assert read(sender) == (0x50, b"\x00\x07\x87")
        for payload in (b"three", b"four"):
            sender.sendall(publish("ok", payload, qos=2, packet_id=7))
            assert read(sender) == (0x50, b"\x00\x07")
            sender.sendall(packet(0x62, b"\x00\x07"))
            assert read(sender) == (0x70, b"\x00\x07")
            assert _delivered(receiver) == (0x32, payload)


def test_a_message_goes_at_the_lower_of_its_qos_and_the_granted_one(
    server: RunningServer,
) -> None:
    """MQTT-3.8.4-8: QoS 2 published to a QoS 1 subscription arrives at QoS 1, QoS 0
    published to a QoS 2 one at QoS 0, QoS 1 to QoS 2 at QoS 1 (MQTT-4.8.2-3 says the same
    for a shared subscription's granted QoS)."""
    with _connected(server, "receiver") as receiver, _connected(server, "sender") as sender:
        receiver.sendall(_subscribe(1, ("one", 1), ("two", 2)))
        assert read(receiver) == (0x90, b"\x00\x01\x00\x01\x02")
        sender.sendall(publish("one", b"2 to 1", qos=2, packet_id=1))
        assert read(sender) == (0x50, b"\x00\x01")
        sender.sendall(packet(0x62, b"\x00\x01"))
        assert read(sender) == (0x70, b"\x00\x01")
        assert _delivered(receiver) == (0x32, b"2 to 1")
        sender.sendall(publish("two", b"0 to 2"))
        assert _payload(receiver) == b"0 to 2"  # QoS 0: _payload takes only a 0x30
        sender.sendall(publish("two", b"1 to 2", qos=1, packet_id=2))
        assert read(sender) == (0x40, b"\x00\x02")
        assert _delivered(receiver) == (0x32, b"1 to 2")


def test_a_full_send_quota_holds_back_only_publishes(server: RunningServer) -> None:
    """MQTT-3.3.4-10, MQTT-4.9.0-3: with the client's Receive Maximum (1) taken by a QoS 1
    PUBLISH it has not acknowledged, the server still answers a PINGREQ and a SUBSCRIBE,
    and the second QoS 1 message waits for the PUBACK (MQTT-3.3.4-9): a send quota that
    starts at the client's Receive Maximum, not 0 (MQTT-4.9.0-1), and at 0 sends no QoS 1
    or 2 PUBLISH (MQTT-4.9.0-2)."""
    with (
        _connect_v5(server, "slow", b"\x21\x00\x01") as slow,
        _connected(server, "sender") as sender,
    ):
        slow.sendall(_subscribe(1, ("q", 1)))
        assert read(slow)[0] == 0x90
        sender.sendall(
            publish("q", b"first", qos=1, packet_id=1) + publish("q", b"second", qos=1, packet_id=2)
        )
        assert [read(sender), read(sender)] == [(0x40, b"\x00\x01"), (0x40, b"\x00\x02")]
        kind, body = read(slow)
        assert kind == 0x32, hex(kind)
        slow.sendall(PINGREQ + _subscribe(2, ("other", 0)))
        assert [read(slow), read(slow)] == [(0xD0, b""), (0x90, b"\x00\x02\x00\x00")]
        slow.sendall(packet(0x40, body[3:5]))  # PUBACK of "first"
        assert _delivered(slow) == (0x32, b"second")


def test_retained_messages_a_subscribe_sends_wait_for_the_clients_receive_maximum(
    server: RunningServer,
) -> None:
    """MQTT-3.3.4-9: the retained QoS 1 messages a SUBSCRIBE sends count against the
    client's Receive Maximum as any PUBLISH does: with 1, three come one PUBACK at a time."""
    with _connected(server, "publisher") as publisher:
        for n in (1, 2, 3):
            publisher.sendall(packet(0x33, string(f"r/{n}") + bytes([0, n, 0]) + b"kept"))
            assert read(publisher) == (0x40, bytes([0, n]))
    with _connect_v5(server, "slow", b"\x21\x00\x01") as slow:
        slow.sendall(_subscribe(1, ("r/+", 1)))
        assert read(slow) == (0x90, b"\x00\x01\x00\x01")
        topics = []
        for _ in range(3):
            kind, body = read(slow)
            assert kind == 0x33, hex(kind)  # QoS 1, RETAIN 1
            assert nothing(slow, within=0.5)  # the next waits for this one's PUBACK
            topics.append(body[2:5])
            slow.sendall(packet(0x40, body[5:7]))
        assert sorted(topics) == [b"r/1", b"r/2", b"r/3"]


def _two_published_at_qos2(sender: socket.socket) -> None:
    """ "1" and "2" published to `two` at QoS 2 by `sender`, each PUBREC'd, released and
    completed."""
    for n in (1, 2):
        sender.sendall(publish("two", b"%d" % n, qos=2, packet_id=n))
        assert read(sender) == (0x50, n.to_bytes(2, "big"))
        sender.sendall(packet(0x62, n.to_bytes(2, "big")))
        assert read(sender) == (0x70, n.to_bytes(2, "big"))


def test_a_pubrel_sent_again_holds_its_place_under_the_clients_receive_maximum(
    server: RunningServer,
) -> None:
    """MQTT-3.3.4-9: a QoS 2 message counts against the client's Receive Maximum until its
    PUBCOMP, not only until its PUBREC: a session resumed with Receive Maximum 1 gets the
    PUBREL of the message it had answered with PUBREC again (MQTT-4.3.3-5) and the next
    message only once that PUBREL is completed."""
    subscriber, _ = open_raw(server, "window", receive_maximum=1)
    with _connected(server, "sender") as sender:
        subscriber.sendall(_subscribe(1, ("two", 2)))
        assert read(subscriber)[0] == 0x90
        _two_published_at_qos2(sender)
        kind, body = read(subscriber)
        assert (kind, body[8:]) == (0x34, b"1")
        first = body[5:7]
        assert nothing(subscriber)  # the second waits for the first's place
        subscriber.sendall(packet(0x50, first))  # PUBREC
        assert read(subscriber) == (0x62, first)  # PUBREL, then gone without PUBCOMP
        subscriber.close()
    again, present = open_raw(server, "window", receive_maximum=1)
    with again:
        assert present
        assert read(again) == (0x62, first)
        assert nothing(again)  # the PUBREL holds the one place
        again.sendall(packet(0x70, first))
        kind, body = read(again)
        assert (kind, body[8:]) == (0x34, b"2")  # DUP 0: never sent before


_FIXED_SIZES = {0x01: 1, 0x02: 4, 0x11: 4, 0x13: 2, 0x21: 2, 0x22: 2, 0x24: 1, 0x25: 1, 0x27: 4}
_FIXED_SIZES |= {0x28: 1, 0x29: 1, 0x2A: 1}
_STRINGS = {0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1A, 0x1C, 0x1F}


def _properties(data: bytes) -> list[tuple[int, bytes]]:
    """(identifier, raw value) of each property in `data` (§2.2.2.2; lengths under 128)."""
    assert data[0] < 0x80, data.hex()
    rest, found = data[1 : 1 + data[0]], []
    while rest:
        ident = rest[0]
        if ident == 0x26:  # User Property: a string pair
            first = 2 + int.from_bytes(rest[1:3], "big")
            size = first + 2 + int.from_bytes(rest[1 + first : 3 + first], "big")
        elif ident in _STRINGS:
            size = 2 + int.from_bytes(rest[1:3], "big")
        else:
            size = _FIXED_SIZES[ident]
        found.append((ident, rest[1 : 1 + size]))
        rest = rest[1 + size :]
    return found


def test_an_empty_client_id_gets_an_assigned_one_of_its_own(server: RunningServer) -> None:
    """MQTT-3.1.3-6, MQTT-3.1.3-7, MQTT-3.2.2-16: two clients connecting with an empty
    client id at once each get an Assigned Client Identifier in the CONNACK, not the same
    one, and keep their connections."""
    assigned = []
    for _ in range(2):
        sock = socket.create_connection((server.host, server.port), timeout=WAIT)
        sock.sendall(connect_packet("", clean=True))
        kind, body = read(sock)
        assert (kind, body[:2]) == (0x20, b"\x00\x00"), body.hex()
        [identifier] = [value for ident, value in _properties(body[2:]) if ident == 0x12]
        assert len(identifier) > 2, identifier
        assigned.append((sock, identifier))
    (first, one), (second, other) = assigned
    with first, second:
        assert one != other
        for sock in (first, second):  # neither took the other's session over
            sock.sendall(PINGREQ)
            assert read(sock) == (0xD0, b"")


def test_the_servers_disconnect_carries_no_session_expiry_interval(
    server: RunningServer,
) -> None:
    """MQTT-3.14.2-2: the DISCONNECT 0x8E Session taken over (MQTT-3.1.4-3) sent to the
    connection of a persistent session has no Session Expiry Interval."""
    first, _ = open_raw(server, "taken")
    with first:
        second, present = open_raw(server, "taken")
        second.close()
        assert present
        [(kind, body)] = until_closed(first)
        assert (kind, body[:1]) == (0xE0, b"\x8e"), body.hex()
        assert len(body) == 1 or 0x11 not in dict(_properties(body[1:])), body.hex()


def test_retain_flag_replaces_and_an_empty_retained_message_deletes(
    server: RunningServer,
) -> None:
    """MQTT-3.3.1-5: RETAIN 1 replaces the retained message; MQTT-3.3.1-8: RETAIN 0 leaves
    it; MQTT-3.3.1-6, MQTT-3.3.1-7: an empty retained message is sent on as usual but
    removes the retained one and is not kept itself."""
    with _connected(server, "publisher") as publisher, _connected(server, "live") as live:
        live.sendall(_subscribe(1, ("r", 0)))
        assert read(live)[0] == 0x90
        for retain, payload in ((1, b"old"), (1, b"new"), (0, b"passing")):
            publisher.sendall(packet(0x32 | retain, string("r") + b"\x00\x01\x00" + payload))
            assert read(publisher) == (0x40, b"\x00\x01")
        assert [_payload(live) for _ in range(3)] == [b"old", b"new", b"passing"]
        with _connected(server, "late") as late:
            late.sendall(_subscribe(1, ("r", 0)))
            assert [read(late), read(late)] == [
                (0x90, b"\x00\x01\x00\x00"),
                (0x31, b"\x00\x01r\x00new"),
            ]
        publisher.sendall(packet(0x33, string("r") + b"\x00\x02\x00"))
        assert read(publisher) == (0x40, b"\x00\x02")
        assert _payload(live) == b""
        with _connected(server, "later") as later:
            later.sendall(_subscribe(1, ("r", 0)))
            assert read(later) == (0x90, b"\x00\x01\x00\x00")
            assert nothing(later)


def test_wildcards_must_take_whole_levels_and_hash_the_last(server: RunningServer) -> None:
    """MQTT-4.7.1-1: "#" alone or after a "/", and last; MQTT-4.7.1-2: "+" a whole level.
    A filter that breaks them gets 0x8F Topic Filter invalid in its SUBACK and the others
    of the packet are granted."""
    filters = ["a/#/b", "a#", "a/b#", "a+", "+a/b", "a/+b", "#", "+/+/#", "a/+", "+"]
    granted = bytes([0x8F] * 6 + [0x00] * 4)
    with _connected(server) as sock:
        sock.sendall(_subscribe(5, *((f, 0) for f in filters)))
        assert read(sock) == (0x90, b"\x00\x05\x00" + granted)


def test_every_topic_alias_up_to_the_announced_maximum_is_taken(server: RunningServer) -> None:
    """MQTT-3.3.2-12: the Topic Alias Maximum a CONNACK announces is a promise: aliases 1
    and that maximum both set a topic and then stand for it."""
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    sock.sendall(connect_packet("aliaser", clean=True))
    kind, connack = read(sock)
    assert kind == 0x20, hex(kind)
    [maximum] = [int.from_bytes(v, "big") for i, v in _properties(connack[2:]) if i == 0x22]
    assert maximum > 1
    with sock, _connected(server, "receiver") as receiver:
        receiver.sendall(_subscribe(1, ("t/+", 0)))
        assert read(receiver)[0] == 0x90
        for alias, topic in ((1, "t/1"), (maximum, "t/max")):
            alias_property = b"\x03\x23" + alias.to_bytes(2, "big")
            sets = packet(0x30, string(topic) + alias_property + b"set")
            uses = packet(0x30, string("") + alias_property + b"used")
            sock.sendall(sets + uses)
            assert [_payload(receiver), _payload(receiver)] == [b"set", b"used"]


def test_a_reason_string_is_left_out_rather_than_exceed_the_clients_maximum(
    server: RunningServer,
) -> None:
    """MQTT-3.4.2-2: no Reason String on a PUBACK it would take over the client's Maximum
    Packet Size (20 bytes here; the PUBACK 0x91 of test_a_reason_string_only_for_a_client_
    that_wants_one has one of some 60): the PUBACK goes, with its reason code only."""
    small = b"\x27" + (20).to_bytes(4, "big")  # Maximum Packet Size
    with _connect_v5(server, "small", small) as sock:
        sock.sendall(packet(0x34, string("q") + b"\x00\x05\x00" + b"m"))  # QoS 2, id 5
        assert read(sock) == (0x50, b"\x00\x05")
        sock.sendall(packet(0x32, string("q") + b"\x00\x05\x00" + b"m"))  # QoS 1, id 5
        kind, body = read(sock)
        assert (kind, body[:3]) == (0x40, b"\x00\x05\x91")
        assert body[3:] in (b"", b"\x00"), body.hex()


@pytest.mark.parametrize("qos", [1, 2])
def test_a_refusing_ack_settles_the_message_for_good(server: RunningServer, qos: int) -> None:
    """MQTT-4.4.0-2: a PUBACK or PUBREC of 0x80 or more from the subscriber acknowledges
    the PUBLISH, so the resumed session does not send it again (boxmq moves it to the
    subscription's error/)."""
    subscriber, _ = open_raw(server, "refuser")
    with _connected(server, "sender") as sender:
        subscriber.sendall(_subscribe(1, ("r", qos)))
        assert read(subscriber)[0] == 0x90
        sender.sendall(publish("r", b"refused", qos=qos, packet_id=1))
        if qos == 2:
            assert read(sender) == (0x50, b"\x00\x01")
            sender.sendall(packet(0x62, b"\x00\x01"))
            assert read(sender) == (0x70, b"\x00\x01")
        else:
            assert read(sender) == (0x40, b"\x00\x01")
    kind, body = read(subscriber)
    assert kind & 0xF6 == 0x30 | qos << 1, hex(kind)
    subscriber.sendall(packet(0x40 if qos == 1 else 0x50, body[3:5] + b"\x80"))
    subscriber.sendall(PINGREQ)  # answered after the ack was read
    assert read(subscriber) == (0xD0, b"")
    subscriber.close()
    again, present = open_raw(server, "refuser")
    with again:
        assert present
        assert nothing(again)


@pytest.mark.parametrize("qos", [1, 2])
def test_a_share_members_refusal_is_not_sent_to_another_member(
    server: RunningServer, qos: int
) -> None:
    """MQTT-4.8.2-6: the member that answers PUBACK 0x80 (QoS 1) or PUBREC 0x80 (QoS 2)
    ends the message's delivery: the other member of the group does not get it, nor the
    member itself again."""
    with (
        _connected(server, "member-a") as a,
        _connected(server, "member-b") as b,
        _connected(server, "sender") as sender,
    ):
        for member in (a, b):
            member.sendall(_subscribe(1, ("$share/g/s", qos)))
            assert read(member)[0] == 0x90
        sender.sendall(publish("s", b"once", qos=qos, packet_id=1))
        if qos == 2:
            assert read(sender) == (0x50, b"\x00\x01")
            sender.sendall(packet(0x62, b"\x00\x01"))  # PUBREL
        assert read(sender) == (0x40 if qos == 1 else 0x70, b"\x00\x01")
        [chosen], _, _ = select.select([a, b], [], [], WAIT)
        other = b if chosen is a else a
        kind, body = read(chosen)
        assert kind == 0x30 | qos << 1, hex(kind)
        chosen.sendall(packet(0x40 if qos == 1 else 0x50, body[3:5] + b"\x80"))
        assert nothing(other, within=0.5)
        assert nothing(chosen, within=0.5)


NOT_UTF8 = b"\x00\x02\xc3\x28"  # a UTF-8 Encoded String whose second byte ends it early


def _publish_with(properties: bytes) -> bytes:
    return packet(0x30, string("a") + bytes([len(properties)]) + properties + b"x")


# Each field MQTT 5.0 makes a UTF-8 Encoded String, not UTF-8 (§1.5.4): a Malformed Packet.
NOT_UTF8_AFTER_CONNECT = [
    ("User Property name", _publish_with(b"\x26" + NOT_UTF8 + string("v"))),  # MQTT-1.5.7-1
    ("User Property value", _publish_with(b"\x26" + string("k") + NOT_UTF8)),  # MQTT-1.5.7-1
    ("Content Type", _publish_with(b"\x03" + NOT_UTF8)),  # MQTT-3.3.2-19
    ("Response Topic", _publish_with(b"\x08" + NOT_UTF8)),  # MQTT-3.3.2-13
    ("SUBSCRIBE filter", packet(0x82, b"\x00\x01\x00" + NOT_UTF8 + b"\x00")),  # MQTT-3.8.3-1
    ("UNSUBSCRIBE filter", packet(0xA2, b"\x00\x01\x00" + NOT_UTF8)),  # MQTT-3.10.3-1
    ("U+0000 in a filter", packet(0x82, b"\x00\x01\x00\x00\x03a\x00b\x00")),  # MQTT-4.7.3-2
]


@pytest.mark.parametrize(
    "bad", [c[1] for c in NOT_UTF8_AFTER_CONNECT], ids=[c[0] for c in NOT_UTF8_AFTER_CONNECT]
)
def test_a_string_field_that_is_not_utf8_is_a_malformed_packet(
    server: RunningServer, bad: bytes
) -> None:
    """DISCONNECT 0x81 Malformed Packet, then closed (MQTT-4.13.1-1)."""
    assert _answers_to(server, bad) == [(0xE0, b"\x81")]


NOT_UTF8_IN_CONNECT = [
    ("Will Topic", _connect(0x02 | 0x04, string("c") + b"\x00" + NOT_UTF8 + b"\x00\x01x")),
    ("User Name", _connect(0x02 | 0x80, string("c") + NOT_UTF8)),
]


@pytest.mark.parametrize(
    "bad", [c[1] for c in NOT_UTF8_IN_CONNECT], ids=[c[0] for c in NOT_UTF8_IN_CONNECT]
)
def test_a_connect_string_that_is_not_utf8_is_refused(server: RunningServer, bad: bytes) -> None:
    """MQTT-3.1.3-11 (the Will Topic), MQTT-3.1.3-12 (the User Name): CONNACK 0x81, then
    closed."""
    assert _answers_to(server, bad, first=True) == [(0x20, b"\x00\x81\x00")]


def test_the_server_gives_each_message_in_flight_its_own_packet_id(
    server: RunningServer,
) -> None:
    """MQTT-2.2.1-4, MQTT-4.3.2-1, MQTT-4.3.3-1: every QoS 1 and 2 PUBLISH the server sends
    has a non-zero packet id no exchange in flight holds, sent first with DUP 0
    (MQTT-4.3.2-2, MQTT-4.3.3-2); after a resume too, where the unacknowledged ones come
    again under their ids (MQTT-4.4.0-1; a PUBLISH stays unacknowledged until its PUBACK,
    MQTT-4.3.2-3, or PUBREC, MQTT-4.3.3-3) and those published while it was away take
    others."""
    subscriber, _ = open_raw(server, "many")
    held: dict[int, bytes] = {}
    with _connected(server, "sender") as sender:
        subscriber.sendall(_subscribe(1, ("one", 1), ("two", 2)))
        assert read(subscriber)[0] == 0x90
        for n, (topic, qos) in enumerate([("one", 1), ("two", 2), ("one", 1), ("two", 2)]):
            sender.sendall(publish(topic, b"%d" % n, qos=qos, packet_id=n + 1))
            if qos == 2:
                assert read(sender)[0] == 0x50
                sender.sendall(packet(0x62, (n + 1).to_bytes(2, "big")))
            assert read(sender)[0] in (0x40, 0x70)
        for _ in range(4):
            kind, body = read(subscriber)
            assert kind & 0xF9 == 0x30, hex(kind)  # DUP 0, RETAIN 0
            packet_id = int.from_bytes(body[5:7], "big")
            assert packet_id != 0
            assert packet_id not in held
            held[packet_id] = body[8:]
        subscriber.close()
        for n in range(4, 7):
            sender.sendall(publish("one", b"%d" % n, qos=1, packet_id=n + 1))
            assert read(sender)[0] == 0x40
    again, present = open_raw(server, "many")
    with again:
        assert present
        resent, fresh = {}, {}
        for _ in range(7):
            kind, body = read(again)
            packet_id, payload = int.from_bytes(body[5:7], "big"), body[8:]
            if payload in held.values():
                assert kind & 0xF8 == 0x38, hex(kind)  # DUP 1
                resent[packet_id] = payload
            else:  # sent before the server saw the first connection go, or after
                assert packet_id != 0
                assert packet_id not in held
                assert packet_id not in fresh
                fresh[packet_id] = payload
        assert resent == held
        assert sorted(fresh.values()) == [b"4", b"5", b"6"]


@pytest.mark.parametrize("retain", [False, True], ids=["will-retain-0", "will-retain-1"])
def test_a_will_is_published_retained_as_its_will_retain_says(
    server: RunningServer, retain: bool
) -> None:
    """MQTT-3.1.2-7: a Will is kept with the session and published when the connection
    breaks; MQTT-3.1.2-14: with Will Retain 0 as a message not retained, MQTT-3.1.2-15:
    with 1 as a retained one. A subscriber with Retain As Published sees the flag live, and
    one that subscribes after finds the retained Will, or nothing."""
    flags = 0x02 | 0x04 | (0x20 if retain else 0)
    with _connected(server, "watcher") as watcher:
        watcher.sendall(_subscribe(1, ("will/t", 0x08)))  # Retain As Published
        assert read(watcher)[0] == 0x90
        will = b"\x00" + string("will/t") + b"\x00\x01x"  # no properties, payload "x"
        with socket.create_connection((server.host, server.port), timeout=WAIT) as leaving:
            leaving.sendall(_connect(flags, string("leaver") + will))
            assert read(leaving)[0] == 0x20
        # closed without DISCONNECT: the Will goes out
        kind, body = read(watcher)
        assert (kind, body) == (0x31 if retain else 0x30, string("will/t") + b"\x00x")
    with _connected(server, "late") as late:
        late.sendall(_subscribe(1, ("will/t", 0)))
        assert read(late)[0] == 0x90
        if retain:
            assert read(late) == (0x31, string("will/t") + b"\x00x")
        else:
            assert nothing(late)


def test_overlapping_subscriptions_get_the_highest_qos_and_their_identifiers(
    server: RunningServer,
) -> None:
    """MQTT-3.3.4-2: a message matching two of a client's subscriptions reaches it at the
    highest of their QoS; MQTT-3.3.4-3: with the Subscription Identifier of each. boxmq
    sends one copy per subscription, each with its own identifier (MQTT-3.3.4-5)."""
    with _connected(server, "overlap") as sock, _connected(server, "sender") as sender:
        for packet_id, (topic_filter, qos) in ((2, ("o/#", 0)), (3, ("o/x", 2))):
            identifier = b"\x02\x0b" + bytes([packet_id])  # Subscription Identifier
            body = packet_id.to_bytes(2, "big") + identifier + string(topic_filter) + bytes([qos])
            sock.sendall(packet(0x82, body))
            assert read(sock) == (0x90, packet_id.to_bytes(2, "big") + b"\x00" + bytes([qos]))
        sender.sendall(publish("o/x", b"m", qos=2, packet_id=1))
        assert read(sender) == (0x50, b"\x00\x01")
        sender.sendall(packet(0x62, b"\x00\x01"))
        assert read(sender) == (0x70, b"\x00\x01")
        copies = []
        for _ in range(2):
            kind, body = read(sock)
            qos = kind >> 1 & 0x03
            rest = body[2 + int.from_bytes(body[:2], "big") + (2 if qos else 0) :]
            copies.append((qos, dict(_sub_ids(rest))))
            if qos:
                sock.sendall(packet(0x50, body[5:7]))
        assert sorted(copies) == [(0, {0x0B: 2}), (2, {0x0B: 3})]


def _sub_ids(properties: bytes) -> list[tuple[int, int]]:
    """The Subscription Identifiers (each under 128) among a PUBLISH's properties."""
    assert properties[0] < 0x80, properties.hex()
    data, found = properties[1 : 1 + properties[0]], []
    while data:
        assert data[0] == 0x0B, data.hex()  # nothing else was published with it
        found.append((0x0B, data[1]))
        data = data[2:]
    return found


def test_a_topic_alias_does_not_outlive_its_connection(server: RunningServer) -> None:
    """MQTT-3.3.2-7: an alias a client set on one connection means nothing on the next, even
    of the same session: a PUBLISH using it there is a Protocol Error (DISCONNECT 0x82)."""
    alias = b"\x03\x23\x00\x01"  # properties: Topic Alias 1
    first, _ = open_raw(server, "aliases")
    with first:
        first.sendall(packet(0x30, string("t") + alias + b"set") + PINGREQ)
        assert read(first) == (0xD0, b"")
    second, present = open_raw(server, "aliases")
    with second:
        assert present
        second.sendall(packet(0x30, string("") + alias + b"carried"))
        assert until_closed(second) == [(0xE0, b"\x82")]


def _topic_alias_and_payload(kind: int, body: bytes) -> tuple[str, int | None, bytes]:
    """(Topic Name, Topic Alias or None, payload) of a PUBLISH whose properties, under 128
    bytes, hold at most a Topic Alias."""
    end = 2 + int.from_bytes(body[:2], "big")
    topic, rest = body[2:end].decode(), body[end + (2 if kind & 0x06 else 0) :]
    properties, payload = rest[1 : 1 + rest[0]], rest[1 + rest[0] :]
    assert not properties or (properties[0] == 0x23 and len(properties) == 3), rest.hex()
    return topic, int.from_bytes(properties[1:], "big") if properties else None, payload


def test_a_topic_alias_set_again_stands_for_its_new_topic(server: RunningServer) -> None:
    """§3.3.2.3.4: a sender changes what an alias stands for by setting it again, with
    another Topic Name, on the same connection; the server takes every alias up to its
    maximum (MQTT-3.3.2-12), so alias 1 set to a/1, used, set to a/2 and used reaches a
    subscriber as a/1, a/1, a/2, a/2."""
    alias = b"\x03\x23\x00\x01"  # properties: Topic Alias 1
    sent = [("a/1", b"set"), ("", b"used"), ("a/2", b"set again"), ("", b"used again")]
    with _connected(server, "aliaser") as sock, _connected(server, "receiver") as receiver:
        receiver.sendall(_subscribe(1, ("a/+", 0)))
        assert read(receiver)[0] == 0x90
        sock.sendall(b"".join(packet(0x30, string(t) + alias + payload) for t, payload in sent))
        got = [_topic_alias_and_payload(*read(receiver)) for _ in sent]
        assert got == [
            ("a/1", None, b"set"),
            ("a/1", None, b"used"),
            ("a/2", None, b"set again"),
            ("a/2", None, b"used again"),
        ]


def test_the_servers_topic_aliases_start_again_on_each_connection(server: RunningServer) -> None:
    """§3.3.2.3.4: a Topic Alias mapping lasts only as long as its Network Connection (the
    client forgets it, MQTT-3.3.2-7): the QoS 1 messages a session had in flight, sent again
    on its next connection (MQTT-4.4.0-1), name their topic again before an alias stands
    for it, though the first connection had already set that alias."""
    announces = b"\x22\x00\x05" + b"\x11\x00\x00\x01\x2c"  # Topic Alias Maximum 5, expiry
    receiver = _connect_v5(server, "aliased", announces)
    with _connected(server, "sender") as sender:
        receiver.sendall(_subscribe(1, ("t/#", 1)))
        assert read(receiver)[0] == 0x90
        for n in (1, 2):
            sender.sendall(publish("t/a/long/topic", b"%d" % n, qos=1, packet_id=n))
            assert read(sender) == (0x40, n.to_bytes(2, "big"))
        first = [_topic_alias_and_payload(*read(receiver)) for _ in (1, 2)]
        assert first == [("t/a/long/topic", 1, b"1"), ("", 1, b"2")]
        receiver.close()  # neither acknowledged
    with _connect_v5(server, "aliased", announces, clean=False) as again:
        resent = [read(again) for _ in (1, 2)]
        assert [kind for kind, _ in resent] == [0x3A, 0x3A]  # QoS 1, DUP 1
        topic, alias, payload = _topic_alias_and_payload(*resent[0])
        assert (topic, payload) == ("t/a/long/topic", b"1")
        assert _topic_alias_and_payload(*resent[1]) in (
            ("t/a/long/topic", alias, b"2"),
            ("", alias or -1, b"2"),  # an alias only once this connection set it
        )


@pytest.mark.parametrize(
    "connect",
    [
        packet(0x10, string("MQTX") + bytes([5, 2, 0, 30, 0]) + string("a")),  # MQTT-3.1.2-1
        packet(0x10, string("MQTT") + bytes([6, 2, 0, 30, 0]) + string("a")),  # MQTT-3.1.2-2
    ],
    ids=["protocol-name-MQTX", "protocol-version-6"],
)
def test_a_connect_of_another_protocol_is_closed(server: RunningServer, connect: bytes) -> None:
    """MQTT-3.1.2-1, MQTT-3.1.2-2: a CONNECT whose Protocol Name is not "MQTT", or whose
    version the server does not take, is closed, after at most a CONNACK refusing it (boxmq
    sends 3.1.1's 0x01 for a version it does not know, which a client of any version reads),
    and never a DISCONNECT (MQTT-3.14.0-1)."""
    answers = _answers_to(server, connect, first=True)
    assert answers in ([], [(0x20, b"\x00\x01")], [(0x20, b"\x00\x84\x00")]), answers


def test_an_authentication_method_it_does_not_support_is_refused(server: RunningServer) -> None:
    """MQTT-4.12.0-1: boxmq has no enhanced authentication (docs/mqtt.md): a CONNECT with an
    Authentication Method gets CONNACK 0x8C Bad authentication method, then the close
    (MQTT-4.12.0-4), and no AUTH."""
    method = b"\x15" + string("SCRAM-SHA-1")
    connect = packet(
        0x10, string("MQTT") + bytes([5, 2, 0, 30, len(method)]) + method + string("a")
    )
    [(kind, body)] = _answers_to(server, connect, first=True)
    assert (kind, body[:2]) == (0x20, b"\x00\x8c"), body.hex()


BAD_PUBLISHES = [
    ("QoS 3", bytes([0x36, 5]) + string("a") + b"\x00\x01\x00", 0x81),  # MQTT-3.3.1-4
    ("'+' in the topic", publish("a/+", b"x"), 0x90),  # MQTT-3.3.2-2, MQTT-4.7.0-1
    ("'#' in the topic", publish("#", b"x"), 0x90),  # MQTT-3.3.2-2, MQTT-4.7.0-1
    ("a topic not UTF-8", packet(0x30, NOT_UTF8 + b"\x00x"), 0x81),  # MQTT-3.3.2-1
]


@pytest.mark.parametrize(
    ("bad", "reason"), [c[1:] for c in BAD_PUBLISHES], ids=[c[0] for c in BAD_PUBLISHES]
)
def test_a_publish_breaking_its_header_rules_is_refused(
    server: RunningServer, bad: bytes, reason: int
) -> None:
    """A PUBLISH with both QoS bits set is malformed (MQTT-3.3.1-4); its Topic Name is a
    UTF-8 string (MQTT-3.3.2-1) without wildcards (MQTT-3.3.2-2, MQTT-4.7.0-1, 0x90 Topic
    Name invalid): DISCONNECT, then closed (MQTT-4.13.1-1)."""
    assert _answers_to(server, bad) == [(0xE0, bytes([reason]))]


def test_a_v5_client_silent_for_one_and_a_half_keep_alives_is_closed(tmp_path: Path) -> None:
    """MQTT-3.2.2-22: a CONNACK without a Server Keep Alive (nor an Authentication Method,
    MQTT-4.12.0-6, for a CONNECT without one), so the client's own 10 s hold; MQTT-3.1.2-22:
    silent for one and a half times that (15 s), it is closed, here after a DISCONNECT 0x8D
    Keep Alive timeout, a code of DISCONNECT's table (MQTT-3.14.2-1), and nothing after it
    (MQTT-3.14.4-1, MQTT-3.14.4-2), "as if the network had failed": its Will goes out. A
    PINGREQ starts the count again; 14.9 s after it the connection stands. The broker's
    clock moves when the test says."""
    clock = ManualClock()
    with (
        start_server(tmp_path / "root", clock=clock) as running,
        _connected(running, "watcher") as watcher,
        socket.create_connection((running.host, running.port), timeout=WAIT) as sock,
    ):
        watcher.sendall(_subscribe(1, ("w", 0)))
        assert read(watcher)[0] == 0x90
        head = string("MQTT") + bytes([5, 0x02 | 0x04, 0, 10, 0])  # Clean Start, Will
        sock.sendall(packet(0x10, head + string("k") + WILL))
        kind, body = read(sock)
        assert (kind, body[:2]) == (0x20, b"\x00\x00"), body.hex()
        told = [ident for ident, _ in _properties(body[2:])]
        assert 0x13 not in told  # Server Keep Alive
        assert 0x15 not in told  # Authentication Method
        clock.advance(14)
        sock.sendall(PINGREQ)
        assert read(sock) == (0xD0, b"")
        clock.advance(14.9)
        assert nothing(sock)  # the broker looks every 0.25 s
        assert nothing(watcher, within=0.1)
        clock.advance(0.2)
        assert until_closed(sock) == [(0xE0, b"\x8d")]
        assert _payload(watcher) == b"x"


def test_a_client_that_trickles_an_unfinished_packet_is_closed_at_its_keep_alive(
    tmp_path: Path,
) -> None:
    """MQTT-3.1.2-22 counts control packets, not bytes: a client that sends a PUBLISH a few
    bytes at a time (a slowloris) and never finishes it is closed 1.5 keep-alive periods
    (30 s here, so 45 s) after its last whole packet, its CONNECT, with DISCONNECT 0x8D, as
    mosquitto closes it; one whose slow PUBLISH is whole at 44 s is heard then, and stands
    until 89 s. The broker's clock moves when the test says."""
    clock = ManualClock()
    message = publish("t", b"x" * 40, qos=1, packet_id=1)
    with (
        start_server(tmp_path / "root", clock=clock) as running,
        socket.create_connection((running.host, running.port), timeout=WAIT) as trickler,
        socket.create_connection((running.host, running.port), timeout=WAIT) as finisher,
    ):
        for sock, client_id in ((trickler, "trickler"), (finisher, "finisher")):
            sock.sendall(connect_packet(client_id, clean=True))  # Keep Alive 30 s
            assert read(sock)[0] == 0x20
        clock.advance(30)
        for sock in (trickler, finisher):
            sock.sendall(message[:10])
        time.sleep(0.3)  # read at 30 s: before the fix, heard then
        clock.advance(14)
        trickler.sendall(message[10:11])
        finisher.sendall(message[10:])
        assert read(finisher) == (0x40, b"\x00\x01")  # PUBACK: whole at 44 s
        clock.advance(1.2)
        assert until_closed(trickler) == [(0xE0, b"\x8d")]
        assert nothing(finisher)
        clock.advance(43.7)
        assert nothing(finisher)
        clock.advance(0.3)
        assert until_closed(finisher) == [(0xE0, b"\x8d")]


def test_each_answer_carries_the_packet_id_it_answers(server: RunningServer) -> None:
    """MQTT-2.2.1-5, MQTT-3.3.4-1: a QoS 1 PUBLISH gets a PUBACK (MQTT-4.3.2-4), a QoS 2 one a
    PUBREC (MQTT-4.3.3-8), its PUBREL a PUBCOMP, each under the PUBLISH's packet id and with
    a code of its own table (MQTT-3.4.2-1, MQTT-3.5.2-1, MQTT-3.7.2-1); MQTT-2.2.1-6: SUBACK
    and UNSUBACK under the id of what they answer, with codes of their tables (MQTT-3.8.4-7,
    MQTT-3.9.3-2, MQTT-3.11.3-2). A message reaches the subscriber (MQTT-4.5.0-1) under the
    Topic Name it was published to, which its filter matches (MQTT-3.3.2-3); at QoS 0 without
    a packet id (MQTT-2.2.1-2) and with DUP 0 (MQTT-4.3.1-1). A packet that has properties
    and none to carry says so with a Property Length of 0 (MQTT-2.2.2-1)."""
    with _connected(server, "ids") as sock:
        sock.sendall(_subscribe(0x0102, ("q/+", 0)))
        assert read(sock) == (0x90, b"\x01\x02\x00\x00")  # Granted QoS 0
        sock.sendall(publish("q/a", b"one", qos=1, packet_id=0x1234))
        answers = [read(sock), read(sock)]
        assert (0x40, b"\x12\x34") in answers  # PUBACK, Success (§3.4.2.1: no code, 0x00)
        assert (0x30, string("q/a") + b"\x00one") in answers  # no packet id, DUP 0, RETAIN 0
        sock.sendall(publish("q/b", b"two", qos=2, packet_id=0x4321))
        assert read(sock) == (0x50, b"\x43\x21")  # PUBREC
        sock.sendall(packet(0x62, b"\x43\x21"))  # PUBREL
        answers = [read(sock), read(sock)]
        assert (0x70, b"\x43\x21") in answers  # PUBCOMP
        assert (0x30, string("q/b") + b"\x00two") in answers
        sock.sendall(_unsubscribe(0x0A0B, "q/+", "never"))
        assert read(sock) == (0xB0, b"\x0a\x0b\x00\x00\x11")  # Success, No subscription existed


def test_a_pubrel_sent_is_sent_again_and_never_its_publish(server: RunningServer) -> None:
    """MQTT-4.3.3-4: the server answers the subscriber's PUBREC with a PUBREL under the same
    packet id, its code of PUBREL's table (MQTT-3.6.2-1); MQTT-4.3.3-5: that PUBREL stays
    unacknowledged until its PUBCOMP, so a resumed session gets it again, and MQTT-4.3.3-6:
    never the PUBLISH again, which stayed unacknowledged only until its PUBREC
    (MQTT-4.3.3-3: the one not yet answered is sent again, DUP 1)."""
    subscriber, _ = open_raw(server, "receiver")
    with _connected(server, "sender") as sender:
        subscriber.sendall(_subscribe(1, ("two", 2)))
        assert read(subscriber)[0] == 0x90
        _two_published_at_qos2(sender)
        ids = []
        for n in (1, 2):
            kind, body = read(subscriber)
            assert kind == 0x34, hex(kind)  # QoS 2, DUP 0
            ids.append(body[5:7])
            assert body[8:] == b"%d" % n
        subscriber.sendall(packet(0x50, ids[0]))  # PUBREC of the first only
        assert read(subscriber) == (0x62, ids[0])  # PUBREL, Success
        subscriber.close()
    again, present = open_raw(server, "receiver")
    with again:
        assert present
        kind, body = read(again)
        assert (kind, body) == (0x62, ids[0])  # the PUBREL again, not its PUBLISH
        kind, body = read(again)
        assert (kind, body[5:7], body[8:]) == (0x3C, ids[1], b"2")  # DUP 1, QoS 2
        again.sendall(packet(0x70, ids[0]) + packet(0x50, ids[1]))
        assert read(again) == (0x62, ids[1])
        again.sendall(packet(0x70, ids[1]))
        assert nothing(again)


def test_a_session_lasts_while_its_connection_does(tmp_path: Path) -> None:
    """MQTT-4.1.0-1: a session whose Session Expiry Interval (1 s) passed many times over
    while its connection stayed open is not discarded: its subscription still delivers."""
    clock = ManualClock()
    with start_server(tmp_path / "root", clock=clock) as running:
        sock, _ = open_raw(running, "short", expiry=1)
        with sock, _connected(running, "sender") as sender:
            sock.sendall(_subscribe(1, ("t", 1)))
            assert read(sock) == (0x90, b"\x00\x01\x00\x01")
            for _ in range(5):
                clock.advance(1)
                sock.sendall(PINGREQ)
                assert read(sock) == (0xD0, b"")
            sender.sendall(publish("t", b"still", qos=1, packet_id=1))
            assert read(sender) == (0x40, b"\x00\x01")
            assert _delivered(sock) == (0x32, b"still")


def test_no_answer_goes_over_a_small_maximum_packet_size(server: RunningServer) -> None:
    """A client whose Maximum Packet Size (20 bytes) leaves no room for a Reason String or a
    User Property gets each answer, refusals included, with its codes and no property:
    SUBACK (MQTT-3.9.2-1, MQTT-3.9.2-2), UNSUBACK (MQTT-3.11.2-1, MQTT-3.11.2-2), PUBREC
    (MQTT-3.5.2-2, MQTT-3.5.2-3), PUBREL (MQTT-3.6.2-2, MQTT-3.6.2-3), PUBCOMP
    (MQTT-3.7.2-2, MQTT-3.7.2-3), PUBACK (MQTT-3.4.2-3), and the DISCONNECT that closes it
    (MQTT-3.14.2-3, MQTT-3.14.2-4). boxmq
    gives these no property at any size today; the one answer that has a Reason String,
    PUBACK 0x91, loses it under a small maximum (test_a_reason_string_is_left_out_...), and
    this holds any property added to these later to the client's maximum as well."""
    small = b"\x27" + (20).to_bytes(4, "big")  # Maximum Packet Size
    with _connect_v5(server, "small", small) as sock:
        sock.sendall(_subscribe(1, ("a/#/b", 1), ("ok", 2)))
        assert read(sock) == (0x90, b"\x00\x01\x00\x8f\x02")  # Topic Filter invalid
        sock.sendall(_unsubscribe(2, "never"))
        assert read(sock) == (0xB0, b"\x00\x02\x00\x11")  # No subscription existed
        sock.sendall(publish("$SYS/x", b"m", qos=2, packet_id=3))
        kind, body = read(sock)
        assert (kind, body[:3]) == (0x50, b"\x00\x03\x87"), body.hex()  # Not authorized
        assert body[3:] in (b"", b"\x00"), body.hex()
        sock.sendall(publish("$SYS/x", b"m", qos=1, packet_id=4))
        kind, body = read(sock)
        assert (kind, body[:3]) == (0x40, b"\x00\x04\x87"), body.hex()
        assert body[3:] in (b"", b"\x00"), body.hex()
        sock.sendall(publish("ok", b"m", qos=2, packet_id=5))
        assert read(sock) == (0x50, b"\x00\x05")
        sock.sendall(packet(0x62, b"\x00\x05"))
        answers = [read(sock), read(sock)]  # its PUBCOMP, and the message to itself
        assert (0x70, b"\x00\x05") in answers
        [(kind, body)] = [a for a in answers if a[0] & 0xF0 == 0x30]
        assert kind == 0x34, hex(kind)
        sock.sendall(packet(0x50, body[4:6]))  # PUBREC
        assert read(sock) == (0x62, body[4:6])  # PUBREL, Success, no property
        sock.sendall(packet(0x70, body[4:6]))
        sock.sendall(packet(0x62, b"\x00\x09"))  # PUBREL of a packet id nothing holds
        kind, body = read(sock)
        assert (kind, body[:3]) == (0x70, b"\x00\x09\x92"), body.hex()  # not found
        assert body[3:] in (b"", b"\x00"), body.hex()
        sock.sendall(bytes([0xC1, 0]))  # a PINGREQ with a reserved flag set
        assert until_closed(sock) == [(0xE0, b"\x81")]  # Malformed Packet, no property


def test_a_server_of_every_qos_and_retain_takes_a_retained_qos2_will(
    server: RunningServer,
) -> None:
    """boxmq takes QoS 1 and 2 and retained messages, so its CONNACK has no Maximum QoS
    (MQTT-3.2.2-9 asks one only of a server without them) and says Retain Available 1; a
    Will of QoS 2 with Will Retain 1 is accepted (MQTT-3.2.2-12 and MQTT-3.2.2-13 refuse it
    only where those are not supported), and a SUBSCRIBE at QoS 2 is granted QoS 2
    (MQTT-3.2.2-10)."""
    will_qos2_retained = 0x02 | 0x04 | 0x10 | 0x20  # Clean Start, Will, Will QoS 2, Will Retain
    with socket.create_connection((server.host, server.port), timeout=WAIT) as sock:
        sock.sendall(_connect(will_qos2_retained, string("w2") + WILL))
        kind, body = read(sock)
        assert (kind, body[:2]) == (0x20, b"\x00\x00"), body.hex()
        told = dict(_properties(body[2:]))
        assert 0x24 not in told  # Maximum QoS
        assert told.get(0x25, b"\x01") == b"\x01"  # Retain Available (absent: 1)
        sock.sendall(_subscribe(1, ("q", 2)))
        assert read(sock) == (0x90, b"\x00\x01\x00\x02")


@pytest.mark.parametrize(
    "expiry", [pytest.param(300, id="persistent-publisher"), pytest.param(0, id="in-memory")]
)
def test_a_qos2_message_that_expired_before_its_pubrel_still_gets_its_pubcomp(
    tmp_path: Path, expiry: int
) -> None:
    """MQTT-4.3.3-13: the server, receiving at QoS 2, goes on with the exchange when the
    message's Message Expiry Interval (1 s) ran out between PUBREC and PUBREL: PUBCOMP
    0x00, as the message was taken, and the expired message goes to no subscriber. Both
    ways a QoS 2 message waits for its PUBREL: on disk (working/) for a persistent
    publisher, in the session's memory for one whose subscribers are all in memory."""
    clock = ManualClock()
    with start_server(tmp_path / "root", clock=clock) as running:
        subscriber, _ = open_raw(running, "receiver", clean=True, expiry=0)
        publisher, _ = open_raw(running, "sender", clean=True, expiry=expiry)
        with subscriber, publisher:
            subscriber.sendall(_subscribe(1, ("t", 2)))
            assert read(subscriber) == (0x90, b"\x00\x01\x00\x02")
            expiring = b"\x05\x02" + (1).to_bytes(4, "big")  # Message Expiry Interval 1 s
            publisher.sendall(packet(0x34, string("t") + b"\x00\x07" + expiring + b"m"))
            assert read(publisher) == (0x50, b"\x00\x07")
            clock.advance(5)
            publisher.sendall(packet(0x62, b"\x00\x07"))
            assert read(publisher) == (0x70, b"\x00\x07")  # PUBCOMP, Success
            assert nothing(subscriber, within=0.5)
