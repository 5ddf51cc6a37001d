"""A raw MQTT 5 client over a socket (and a 3.1.1 CONNECT), for what paho hides: PUBREC reasons,
and a QoS 2 exchange left without its PUBREL. Independent byte builders, so the codec is not
tested against itself."""

from __future__ import annotations

import socket
from typing import NamedTuple

from tests.integration.mqtt.clients import WAIT, RunningServer

__all__ = [
    "PINGREQ",
    "Received",
    "answers_to",
    "binary",
    "connect_packet",
    "connect_packet_311",
    "longer",
    "nothing",
    "open_raw",
    "packet",
    "puback",
    "pubcomp",
    "publish",
    "publish_fields",
    "publish_qos2",
    "publishes",
    "pubrec",
    "pubrel",
    "read",
    "string",
    "subscribe",
    "take_publishes",
    "until_closed",
]

PINGREQ = bytes([0xC0, 0])


def packet(kind: int, body: bytes) -> bytes:
    length, size = b"", len(body)
    while True:
        byte, size = size & 0x7F, size >> 7
        length += bytes([byte | (0x80 if size else 0)])
        if not size:
            return bytes([kind]) + length + body


def longer(first: int, body: bytes, size: int) -> bytes:
    """A packet whose Remaining Length takes `size` bytes (2 to 4), more than its value
    needs (under 128: one byte): 0x80 0x00 for 0 in two."""
    assert len(body) < 0x80
    return bytes([first, len(body) | 0x80, *[0x80] * (size - 2), 0]) + body


def string(text: str) -> bytes:
    """A UTF-8 Encoded String (§1.5.4): its length counts bytes, not characters."""
    return binary(text.encode())


def binary(data: bytes) -> bytes:
    """Binary Data (§1.5.6): two bytes of length, then the bytes (a Will's message, a
    Password)."""
    return len(data).to_bytes(2, "big") + data


def connect_packet(
    client_id: str,
    *,
    clean: bool = False,
    expiry: int = 300,
    will: tuple[str, bytes] | None = None,
    will_delay: int | None = None,
    receive_maximum: int | None = None,
) -> bytes:
    """MQTT 5 CONNECT with a Session Expiry Interval of `expiry` seconds; `will`: a retained
    QoS 0 Will (topic, payload), with a Will Delay Interval of `will_delay` seconds if given;
    `receive_maximum`: how many QoS 1 and 2 messages the server may have in flight to it at
    once (§3.1.2.11.3)."""
    properties = bytes([0x11]) + expiry.to_bytes(4, "big")
    if receive_maximum is not None:
        properties += bytes([0x21]) + receive_maximum.to_bytes(2, "big")
    properties = bytes([len(properties)]) + properties
    flags = 0x02 if clean else 0x00
    payload = string(client_id)
    if will is not None:
        flags |= 0x04 | 0x20  # Will Flag, Will Retain (§3.1.2.5, §3.1.2.7)
        topic, message = will
        will_properties = b"" if will_delay is None else b"\x18" + will_delay.to_bytes(4, "big")
        payload += bytes([len(will_properties)]) + will_properties
        payload += string(topic) + binary(message)
    variable = string("MQTT") + bytes([5, flags, 0, 30]) + properties
    return packet(0x10, variable + payload)


def connect_packet_311(
    client_id: str,
    *,
    clean: bool = True,
    keep_alive: int = 30,
    will: tuple[str, bytes] | None = None,
    will_qos: int = 0,
    username: str | None = None,
    password: bytes | None = None,
) -> bytes:
    """MQTT 3.1.1 CONNECT (protocol level 4, §3.1): CleanSession if `clean`, Keep Alive
    `keep_alive` seconds; `will`: a Will (topic, message) of QoS `will_qos`, not retained;
    `username` and `password`: the User Name and Password fields, each flagged if given."""
    flags = 0x02 if clean else 0x00
    payload = string(client_id)
    if will is not None:
        flags |= 0x04 | will_qos << 3  # Will Flag, Will QoS (§3.1.2.5, §3.1.2.6)
        topic, message = will
        payload += string(topic) + binary(message)
    if username is not None:
        flags |= 0x80
        payload += string(username)
    if password is not None:
        flags |= 0x40
        payload += binary(password)
    variable = string("MQTT") + bytes([4, flags]) + keep_alive.to_bytes(2, "big")
    return packet(0x10, variable + payload)


def publish(
    topic: str,
    payload: bytes,
    *,
    qos: int = 0,
    packet_id: int | None = None,
    retain: bool = False,
    dup: bool = False,
) -> bytes:
    """MQTT 5 PUBLISH without properties; a packet id is given for QoS 1 and 2 only."""
    assert (qos == 0) is (packet_id is None), "a packet id is for QoS 1 and 2"
    ident = b"" if packet_id is None else packet_id.to_bytes(2, "big")
    flags = qos << 1 | (0x08 if dup else 0) | (0x01 if retain else 0)
    return packet(0x30 | flags, string(topic) + ident + b"\x00" + payload)


def publish_qos2(topic: str, packet_id: int, payload: bytes) -> bytes:
    return publish(topic, payload, qos=2, packet_id=packet_id)


def pubrel(packet_id: int) -> bytes:
    return packet(0x62, packet_id.to_bytes(2, "big"))


def puback(packet_id: int) -> bytes:
    return packet(0x40, packet_id.to_bytes(2, "big"))


def publish_fields(body: bytes) -> tuple[bytes, int]:
    """(payload, packet id) of a v5 QoS 1/2 PUBLISH body without properties."""
    end = 2 + int.from_bytes(body[:2], "big")
    packet_id = int.from_bytes(body[end : end + 2], "big")
    assert body[end + 2] == 0, "no properties were expected"
    return body[end + 3 :], packet_id


def pubrec(packet_id: int) -> bytes:
    return packet(0x50, packet_id.to_bytes(2, "big"))


def pubcomp(packet_id: int) -> bytes:
    return packet(0x70, packet_id.to_bytes(2, "big"))


def subscribe(packet_id: int, filter: str, qos: int) -> bytes:
    """MQTT 5 SUBSCRIBE of one filter, without properties."""
    return packet(0x82, packet_id.to_bytes(2, "big") + b"\x00" + string(filter) + bytes([qos]))


def read(sock: socket.socket) -> tuple[int, bytes]:
    """(first byte, body) of the next packet; (0, b"") once the server closed."""
    head = sock.recv(1)
    if not head:
        return 0, b""
    length, shift = 0, 0
    while True:
        byte = sock.recv(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    return head[0], body


def until_closed(sock: socket.socket) -> list[tuple[int, bytes]]:
    """Every packet the server sent before it closed the connection."""
    got: list[tuple[int, bytes]] = []
    while (answer := read(sock))[0]:
        got.append(answer)
    return got


def answers_to(sock: socket.socket, sent: bytes) -> list[tuple[int, bytes]]:
    """Every packet the server sent on `sock` for `sent` before it closed the connection;
    `sock` is closed after."""
    with sock:
        sock.sendall(sent)
        return until_closed(sock)


def nothing(sock: socket.socket, within: float = 0.3) -> bool:
    """Whether no packet comes in the next `within` seconds."""
    sock.settimeout(within)
    try:
        return not sock.recv(1)  # the server closing says nothing more will come either
    except TimeoutError:
        return True
    finally:
        sock.settimeout(WAIT)


def open_raw(
    running: RunningServer,
    client_id: str,
    *,
    clean: bool = False,
    expiry: int = 300,
    will: tuple[str, bytes] | None = None,
    will_delay: int | None = None,
    receive_maximum: int | None = None,
) -> tuple[socket.socket, bool]:
    """A connected socket, and whether its CONNACK said the session was present."""
    sock = socket.create_connection((running.host, running.port), timeout=WAIT)
    connect = connect_packet(
        client_id,
        clean=clean,
        expiry=expiry,
        will=will,
        will_delay=will_delay,
        receive_maximum=receive_maximum,
    )
    sock.sendall(connect)
    kind, body = read(sock)
    assert kind == 0x20, hex(kind)  # CONNACK
    assert body[1] == 0, body.hex()
    return sock, bool(body[0] & 0x01)


class Received(NamedTuple):
    payload: bytes
    packet_id: int
    dup: bool


def _next_publish(sock: socket.socket) -> Received:
    """The next PUBLISH (v5, no properties, QoS 1/2), not answered. A PUBREL on the way, of
    an exchange a server killed at once had no time to finish, is answered with PUBCOMP."""
    while True:
        kind, body = read(sock)
        if kind & 0xF0 == 0x60:
            sock.sendall(pubcomp(int.from_bytes(body[:2], "big")))
            continue
        assert kind & 0xF0 == 0x30, hex(kind)
        payload, packet_id = publish_fields(body)
        return Received(payload, packet_id, bool(kind & 0x08))


def publishes(sock: socket.socket, within: float) -> list[Received]:
    """Each PUBLISH that comes before `within` seconds of silence (`_next_publish`)."""
    sock.settimeout(within)
    got: list[Received] = []
    while True:
        try:
            got.append(_next_publish(sock))
        except TimeoutError:
            return got


def take_publishes(sock: socket.socket, count: int, timeout: float = WAIT) -> list[Received]:
    """The next `count` PUBLISHes (`_next_publish`), however long a loaded machine or a
    restarted server takes (up to `timeout` seconds for each packet); what comes after them
    is left unread, for a check that nothing more arrives."""
    sock.settimeout(timeout)
    got: list[Received] = []
    while len(got) < count:
        try:
            got.append(_next_publish(sock))
        except TimeoutError:
            raise AssertionError(f"{len(got)} of {count} PUBLISHes in {timeout} s") from None
    return got
