"""What the raw MQTT clients of the benchmarks share (chaos.py's QoS 2 publisher,
mqtt_topics.py's devices, mqtt_idle.py's connections): a packet's framing and a string
field. Not a benchmark (bench/README.md)."""

from __future__ import annotations

__all__ = ["packet", "string"]


def packet(first: int, body: bytes) -> bytes:
    """An MQTT packet: its first byte, its Remaining Length, its body."""
    length, n = bytearray(), len(body)
    while True:
        n, digit = divmod(n, 128)
        length.append(digit | (0x80 if n else 0))
        if not n:
            return bytes([first]) + bytes(length) + body


def string(text: str) -> bytes:
    """A UTF-8 string field: its length in bytes (two, big-endian), its bytes."""
    encoded = text.encode()
    return len(encoded).to_bytes(2, "big") + encoded
