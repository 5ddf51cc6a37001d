"""What the raw MQTT clients of the benchmarks share (chaos.py's QoS 2 publisher,
mqtt_topics.py's devices, mqtt_groups.py's members, mqtt_idle.py's connections, soak.py): a packet's
framing, a string field, a Variable Byte Integer, MQTT 5's CONNECT and PUBLISH, and reading
one packet from a stream. Not a benchmark (bench/README.md)."""

from __future__ import annotations

import asyncio

__all__ = ["connect5", "packet", "publish5", "read_packet", "read_varint", "string", "varint"]


def varint(n: int) -> bytes:
    """A Variable Byte Integer (a Remaining Length, a property length, an identifier)."""
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(body: bytes, at: int) -> tuple[int, int]:
    """The Variable Byte Integer at `at` of `body`, and where what follows it starts."""
    value, shift = 0, 0
    while True:
        byte = body[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def packet(first: int, body: bytes) -> bytes:
    """An MQTT packet: its first byte, its Remaining Length, its body."""
    return bytes([first]) + varint(len(body)) + body


def string(text: str) -> bytes:
    """A UTF-8 string field: its length in bytes (two, big-endian), its bytes."""
    encoded = text.encode()
    return len(encoded).to_bytes(2, "big") + encoded


def connect5(client_id: str, clean: bool, receive_maximum: int) -> bytes:
    """An MQTT 5 CONNECT, keep alive 60 s: a clean start ending with the connection, or a
    session kept an hour."""
    expiry = 0 if clean else 3600
    properties = bytes([0x11]) + expiry.to_bytes(4, "big")  # Session Expiry Interval
    properties += bytes([0x21]) + receive_maximum.to_bytes(2, "big")  # Receive Maximum
    body = string("MQTT") + bytes([5, 0x02 if clean else 0x00]) + (60).to_bytes(2, "big")
    body += bytes([len(properties)]) + properties + string(client_id)
    return packet(0x10, body)


def publish5(topic: str, payload: bytes, qos: int, packet_id: int) -> bytes:
    """An MQTT 5 PUBLISH without properties (`packet_id` only sent at QoS 1 and 2)."""
    body = string(topic) + (packet_id.to_bytes(2, "big") if qos else b"") + b"\x00" + payload
    return packet(0x30 | (qos << 1), body)


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The next packet of `reader`: its first byte and its body."""
    first = (await reader.readexactly(1))[0]
    size, shift = 0, 0
    while True:
        byte = (await reader.readexactly(1))[0]
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return first, await reader.readexactly(size)
