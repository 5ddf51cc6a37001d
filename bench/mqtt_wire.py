"""What the raw MQTT clients of the benchmarks share (chaos.py's QoS 2 publisher,
mqtt_topics.py's devices, mqtt_groups.py's members, mqtt_idle.py's connections, soak.py): a packet's
framing, a string field, a Variable Byte Integer, MQTT 5's CONNECT and PUBLISH, reading
one packet from a stream, a received PUBLISH's PUBACK, and a publisher's send loop that keeps
at most a window of QoS 1 PUBLISHes unanswered, and a publisher of its own that waits until
its messages arrived. Not a benchmark (bench/README.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

__all__ = [
    "connect5",
    "packet",
    "puback_for",
    "publish5",
    "publish_until",
    "read_packet",
    "read_varint",
    "send_windowed",
    "string",
    "varint",
]


def varint(n: int) -> bytes:
    """A Variable Byte Integer (a Remaining Length, a property length, an identifier)."""
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(body: bytes | bytearray, at: int) -> tuple[int, int]:
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


def connect5(
    client_id: str, clean: bool, receive_maximum: int, *, expiry: int | None = None
) -> bytes:
    """An MQTT 5 CONNECT, keep alive 60 s: a clean start ending with the connection, or a
    session kept an hour; `expiry`, another Session Expiry Interval (s)."""
    if expiry is None:
        expiry = 0 if clean else 3600
    properties = bytes([0x11]) + expiry.to_bytes(4, "big")  # Session Expiry Interval
    properties += bytes([0x21]) + receive_maximum.to_bytes(2, "big")  # Receive Maximum
    body = string("MQTT") + bytes([5, 0x02 if clean else 0x00]) + (60).to_bytes(2, "big")
    body += varint(len(properties)) + properties + string(client_id)
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


def puback_for(body: bytes) -> bytes:
    """The PUBACK (success) of a received QoS 1 PUBLISH, given its body: its packet id
    follows the topic."""
    topic_end = 2 + int.from_bytes(body[:2], "big")
    return packet(0x40, body[topic_end : topic_end + 2] + b"\x00")


async def send_windowed(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    publishes: Iterable[bytes],
    qos: int,
    window: int,
    budget: float,
) -> None:
    """Each of `publishes` (PUBLISHes at `qos`) written to `writer`, drained every 500; at
    QoS 1 no more than `window` (the broker's Receive Maximum: more unanswered ones close the
    connection) wait for their PUBACK from `reader`, each read within `budget` seconds."""
    acked = 0
    for n, publish in enumerate(publishes):
        writer.write(publish)
        if qos and n + 1 - acked >= window:
            await writer.drain()
            while n + 1 - acked >= window:
                kind, _ = await asyncio.wait_for(read_packet(reader), budget)
                acked += kind >> 4 == 4
        elif n % 500 == 499:
            await writer.drain()
    await writer.drain()


async def publish_until(
    port: int,
    client_id: str,
    publishes: Iterable[bytes],
    qos: int,
    window: int,
    budget: float,
    arrived: asyncio.Event,
) -> bool:
    """`publishes` sent by a clean session `client_id` of its own on 127.0.0.1:`port`, as
    send_windowed does; True when `arrived` (set by the receivers, cleared by the caller
    before) is set within `budget` seconds after the last one."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(connect5(client_id, True, window))
    await read_packet(reader)
    await send_windowed(reader, writer, publishes, qos, window, budget)
    try:
        await asyncio.wait_for(arrived.wait(), budget)
        return True
    except TimeoutError:
        return False
    finally:
        writer.close()
