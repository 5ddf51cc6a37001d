"""Packets' bytes for the codec tests: built by hand, decoded by our codec, read by mqtt5.

The builders follow the spec's layouts directly (MQTT 5.0 §1.5, §2-§3; 3.1.1 §2-§3) and never call
our encoder, so the codec is not only checked against itself. `ours` and `theirs` are the two
sides of the cross-checks against `mqtt5` (0.8, Rust), an independent implementation.
"""

from __future__ import annotations

import mqtt5

from boxmq.mqtt import FrameReader, Packet, ProtocolVersion, decode

# --- independent byte builders ----------------------------------------------------------------


def vbi(n: int) -> bytes:
    """Variable Byte Integer, the spec's algorithm (MQTT 5.0 §1.5.5)."""
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def s(text: str) -> bytes:
    """A UTF-8 string with its two-byte length; surrogates pass, so bad strings can be built."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data).to_bytes(2, "big") + data


def b(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data


def u16(n: int) -> bytes:
    return n.to_bytes(2, "big")


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def props(*parts: bytes) -> bytes:
    body = b"".join(parts)
    return vbi(len(body)) + body


def packet(first: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    return bytes((first,)) + vbi(len(body)) + body


# --- the two readers ---------------------------------------------------------------------------


def ours(data: bytes, version: ProtocolVersion = ProtocolVersion.V5) -> Packet:
    """The one whole packet in data, as our codec decodes it."""
    reader = FrameReader(max_packet_size=1 << 20)
    reader.receive(data)
    [frame] = reader.frames()
    return decode(frame, version)


def mqtt5_read(data: bytes) -> mqtt5.Packet | None:
    """mqtt5.read, or None if it refuses the bytes (ValueError, IndexError or a Rust panic)."""
    try:
        packet, size = mqtt5.read(memoryview(data))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # pyo3's PanicException derives from BaseException
        return None
    return packet if size == len(data) else None


def theirs(data: bytes) -> mqtt5.Packet:
    """The one whole packet in data, as mqtt5 reads it; it must read it."""
    packet = mqtt5_read(data)
    assert packet is not None, data
    return packet
