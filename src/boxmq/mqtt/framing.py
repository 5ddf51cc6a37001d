"""Framing: bytes in, whole control packets (`Frame`) out; the wire's data types (§1.5).

Invariants:
- Pure and synchronous: no socket, no clock. `FrameReader.receive` only appends to a buffer;
  `FrameReader.frames` yields every complete frame and leaves a partial one buffered.
- The size limit is checked as soon as the fixed header is complete, before the body is
  buffered, and counts the whole packet (fixed header included, MQTT 5.0 §3.1.2.11.4).
- The data-type helpers (Variable Byte Integer, UTF-8 string, binary data; MQTT 5.0 §1.5) read
  from complete packets: running past the end is a MalformedPacket, never an IndexError.
- Only the fixed header's length is checked here. What the type nibble and the flags mean is
  the codec's business (`codec.decode`), so a frame of type 0 comes out and is refused there.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import IntEnum

from boxmq.errors import InvalidArgument, MalformedPacket, PacketTooLarge

__all__ = [
    "MAX_VARINT",
    "Frame",
    "FrameReader",
    "PacketType",
    "decode_varint",
    "encode_binary",
    "encode_utf8",
    "encode_varint",
    "read_binary",
    "read_utf8",
    "remaining_length",
    "utf8",
]

MAX_VARINT = 268_435_455  # MQTT 5.0 §1.5.5: the largest value four bytes can hold
_MAX_STRING = 65_535  # MQTT 5.0 §1.5.4, §1.5.6: a two-byte length prefix


class PacketType(IntEnum):
    """The high nibble of byte 0 (MQTT 5.0 §2.1.2). AUTH (15) does not exist in 3.1.1."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


# One complete control packet, decoded no further than its fixed header: (kind, flags, body),
# the high nibble of byte 0 (0 is reserved and refused by the codec), its low nibble, and the
# variable header and payload (exactly Remaining Length bytes). A plain tuple, read by
# unpacking: one is built per packet, and a named tuple cost about 1,000 instructions more
# to build (`tuple.__new__` of a subclass) and 100 more per field read.
Frame = tuple[int, int, bytes]


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A Variable Byte Integer inside a complete packet (MQTT 5.0 §1.5.5): (value, next pos)."""
    value = 0
    for i in range(4):
        if pos + i >= len(buf):
            raise MalformedPacket("a variable byte integer runs past the end of the packet")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if byte == 0 and i:
                # MQTT 5.0 §1.5.5 [MQTT-1.5.5-1]: the minimum number of bytes.
                raise MalformedPacket("a variable byte integer is not in its shortest form")
            return value, pos + i + 1
    raise MalformedPacket("a variable byte integer is longer than 4 bytes")


def encode_varint(value: int) -> bytes:
    """The shortest Variable Byte Integer for 0 <= value <= MAX_VARINT (MQTT 5.0 §1.5.5)."""
    if value < 0x80:
        return bytes((value,))
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value > MAX_VARINT:
        raise InvalidArgument(f"{value} does not fit in a variable byte integer")
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def utf8(data: bytes, what: str) -> str:
    """Decode a UTF-8 Encoded String's bytes the way MQTT 5.0 §1.5.4 demands."""
    try:
        text = data.decode()  # strict: refuses overlong forms and encoded surrogates
    except UnicodeDecodeError:
        raise MalformedPacket(f"{what} is not well-formed UTF-8 (MQTT 5.0 §1.5.4)") from None
    if "\x00" in text:
        raise MalformedPacket(f"{what} contains U+0000 (MQTT 5.0 §1.5.4)")
    return text


def read_utf8(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    """A length-prefixed UTF-8 Encoded String (MQTT 5.0 §1.5.4): (text, next pos)."""
    data, end = read_binary(buf, pos, what)
    return utf8(data, what), end


def read_binary(buf: bytes, pos: int, what: str) -> tuple[bytes, int]:
    """Length-prefixed Binary Data (MQTT 5.0 §1.5.6): (data, next pos)."""
    start = pos + 2
    if start > len(buf):
        raise MalformedPacket(f"{what}: the packet ends inside its length")
    end = start + (buf[pos] << 8 | buf[pos + 1])
    if end > len(buf):
        raise MalformedPacket(f"{what}: its length runs past the end of the packet")
    return buf[start:end], end


def encode_utf8(text: str) -> bytes:
    """Length-prefixed UTF-8 (MQTT 5.0 §1.5.4); InvalidArgument for what a peer must refuse."""
    try:
        data = text.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(f"{text!r} has a lone surrogate (MQTT 5.0 §1.5.4)") from None
    if "\x00" in text:
        raise InvalidArgument(f"{text!r} contains U+0000 (MQTT 5.0 §1.5.4)")
    return encode_binary(data)


def encode_binary(data: bytes) -> bytes:
    """Length-prefixed Binary Data (MQTT 5.0 §1.5.6)."""
    if len(data) > _MAX_STRING:
        raise InvalidArgument(f"{len(data)} bytes do not fit a two-byte length prefix")
    return len(data).to_bytes(2, "big") + data


def remaining_length(buf: bytes, pos: int, shortest: bool = True) -> tuple[int, int] | None:
    """The Remaining Length after byte `pos`: (length, header size), or None if incomplete.
    `shortest`: one in more bytes than it needs (0x80 0x00 for 0) is malformed, as MQTT 5.0
    §1.5.5 says (MQTT-1.5.5-1); MQTT 3.1.1 §2.2.3 asks no such thing, and its decoding
    algorithm reads it."""
    value = 0
    for i in range(1, 5):
        if len(buf) <= pos + i:
            return None
        byte = buf[pos + i]
        value |= (byte & 0x7F) << (7 * i - 7)
        if not byte & 0x80:
            if byte == 0 and i > 1 and shortest:
                raise MalformedPacket("remaining length is not in its shortest form")  # §1.5.5
            return value, 1 + i
    raise MalformedPacket("remaining length is longer than 4 bytes")  # MQTT 5.0 §2.1.4


class FrameReader:
    """Feed it bytes as they arrive; take whole frames out. Never touches a socket.

    Data is kept as the chunks it came in, and joined only when a frame needs bytes from more
    than one of them: a frame inside one chunk is sliced out of it once, and a large frame
    arriving in many chunks is joined once, when its last byte has come. A chunk given as a
    bytearray or a view is copied before `receive` returns: the server reads every socket
    into one buffer and reuses it for the next read.
    """

    __slots__ = (
        "_buffer",
        "_later",
        "_later_size",
        "_pos",
        "frames_read",
        "longer",
        "max_packet_size",
        "shortest",
    )

    def __init__(self, *, max_packet_size: int) -> None:
        self._buffer = b""  # frames are read from here, starting at _pos
        self._pos = 0
        self._later: list[bytes] = []  # chunks received after _buffer
        self._later_size = 0
        self.max_packet_size = max_packet_size  # whole packet, header included; may be lowered
        self.frames_read = 0  # frames handed out by `frames`, for the server's $SYS figures
        # Whether a Remaining Length in more bytes than it needs is malformed (MQTT 5.0), or
        # read (3.1.1: `remaining_length`); one was read so while it was not (`longer`),
        # which tells a v5 CONNECT read before its version was known (connection.py).
        self.shortest = True
        self.longer = False

    def receive(self, data: bytes | bytearray | memoryview) -> bool:
        """Keep `data`; whether it brought the last byte of a packet (a whole frame waits),
        which is what a keep-alive counts. Most reads start with a whole small packet, told
        from their first two bytes; the others ask `holds_a_frame`."""
        if not data:
            return False
        waiting = self._later_size or self._pos != len(self._buffer)
        self._later.append(bytes(data))  # no copy for bytes; a view's buffer is reused
        self._later_size += len(data)
        if not waiting and len(data) > 1 and data[1] < 0x80:
            return len(data) >= data[1] + 2
        return self.holds_a_frame()

    def buffered(self) -> int:
        """How many bytes wait for the rest of their packet."""
        return len(self._buffer) - self._pos + self._later_size

    def holds_a_frame(self) -> bool:
        """Whether a whole frame waits to be taken by `frames`: the last byte of a packet
        came. A Remaining Length that cannot be read counts as whole: `frames` raises it in
        its turn, after the frames before it."""
        try:
            header = remaining_length(self.head(5), 0, self.shortest)
        except MalformedPacket:
            return True
        return header is not None and self.buffered() >= header[0] + header[1]

    def frames(self) -> Iterator[Frame]:
        """The whole frames received, one at a time; each counted in `frames_read` as it is
        handed out (a small int in a local, added once the generator ends or is dropped: an
        attribute added to per frame made an int object per frame)."""
        count = 0
        try:
            limit = self.max_packet_size
            most = limit - 2  # the largest body of a small packet
            while True:
                buffer, pos = self._buffer, self._pos
                # Most packets are small (a one-byte Remaining Length) and whole in the buffer:
                # those are read one after the other here, the buffer and position in locals.
                length = len(buffer)
                while pos + 1 < length and (body_length := buffer[pos + 1]) < 0x80:
                    end = pos + 2 + body_length
                    if end > length or body_length > most:
                        break
                    self._pos = end  # before the yield: a consumer may stop at any frame
                    first = buffer[pos]
                    count += 1
                    yield first >> 4, first & 0x0F, buffer[pos + 2 : end]
                    if self._pos != end:
                        break  # cleared meanwhile (`clear`)
                    pos = end
                buffer, pos = self._buffer, self._pos
                if pos == len(buffer):
                    if not self._later:
                        self._buffer, self._pos = b"", 0  # let the used chunk go
                        return
                    self._join()
                    continue
                if (header := remaining_length(buffer, pos, self.shortest)) is not None:
                    body_length, header_size = header
                    if header_size > 2 and body_length < 1 << 7 * (header_size - 2):
                        self.longer = True
                elif self._later:
                    self._join()
                    continue
                else:
                    return
                size = header_size + body_length
                if size > limit:
                    raise PacketTooLarge(
                        f"a packet of {size} bytes is over the maximum packet size of {limit}"
                    )
                end = pos + size
                if end > len(buffer):
                    if self.buffered() < size:
                        return  # wait: join once, when all of it is here
                    self._join()
                    continue
                self._pos = end  # before the yield: a consumer may stop at any frame
                first = buffer[pos]
                count += 1
                yield first >> 4, first & 0x0F, buffer[pos + header_size : end]
        finally:
            self.frames_read += count

    def clear(self) -> None:
        """Forget every byte not framed yet: `frames` ends at its next step, the one being
        consumed included (a connection that ends reads nothing more of what came)."""
        self._buffer, self._pos = b"", 0
        self._later.clear()
        self._later_size = 0

    def head(self, size: int) -> bytes:
        """Up to `size` of the bytes not framed yet: the start of the packet being read (the
        fixed header and what follows it of one refused as too large, still unread)."""
        data = self._buffer[self._pos : self._pos + size]
        for chunk in self._later:
            if len(data) >= size:
                break
            data += chunk[: size - len(data)]
        return data

    def _join(self) -> None:
        """Move every later chunk into the buffer (no copy when the buffer is used up)."""
        if self._pos == len(self._buffer) and len(self._later) == 1:
            self._buffer = self._later[0]  # the common case: one chunk, nothing left over
        else:
            self._buffer = self._buffer[self._pos :] + b"".join(self._later)
        self._pos = 0
        self._later.clear()
        self._later_size = 0
