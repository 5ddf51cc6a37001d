"""FrameReader and the wire's data types (MQTT 5.0 §1.5, §2.1): bytes in, whole frames out."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.errors import InvalidArgument, MalformedPacket, PacketTooLarge
from boxmq.mqtt.framing import (
    MAX_VARINT,
    Frame,
    FrameReader,
    decode_varint,
    encode_binary,
    encode_utf8,
    encode_varint,
    read_binary,
    read_utf8,
)

# MQTT 5.0 §1.5.5, the spec's own table of boundaries.
VARINTS = [
    (0, b"\x00"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (16_383, b"\xff\x7f"),
    (16_384, b"\x80\x80\x01"),
    (2_097_151, b"\xff\xff\x7f"),
    (2_097_152, b"\x80\x80\x80\x01"),
    (268_435_455, b"\xff\xff\xff\x7f"),
]


def frame_bytes(first: int, body: bytes) -> bytes:
    """A packet built by hand: byte 0, the remaining length (short form), the body."""
    assert len(body) < 128
    return bytes((first, len(body))) + body


def read_all(reader: FrameReader, *chunks: bytes) -> list[Frame]:
    frames: list[Frame] = []
    for chunk in chunks:
        reader.receive(chunk)
        frames.extend(reader.frames())
    return frames


@pytest.mark.parametrize(("value", "encoded"), VARINTS)
def test_varint_boundaries_match_the_spec_table(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@given(st.integers(min_value=0, max_value=MAX_VARINT))
def test_varint_round_trips(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x80\x80\x80\x80\x01", "longer than 4 bytes"),
        (b"\x80\x00", "shortest form"),
        (b"\xff\x80\x00", "shortest form"),
        (b"\x80", "past the end"),
        (b"", "past the end"),
    ],
)
def test_bad_varints_are_malformed(data: bytes, message: str) -> None:
    with pytest.raises(MalformedPacket, match=message):
        decode_varint(data, 0)


def test_varint_over_four_bytes_cannot_be_encoded() -> None:
    with pytest.raises(InvalidArgument):
        encode_varint(MAX_VARINT + 1)


def test_strings_and_binary_are_length_prefixed() -> None:
    assert encode_utf8("A\U0002a6d4") == b"\x00\x05A\xf0\xaa\x9b\x94"  # MQTT 5.0 §1.5.4 example
    assert read_utf8(b"\x00\x05A\xf0\xaa\x9b\x94", 0, "x") == ("A\U0002a6d4", 7)
    assert encode_binary(b"\x00\xff") == b"\x00\x02\x00\xff"
    assert read_binary(b"\x00\x02\x00\xff", 0, "x") == (b"\x00\xff", 4)


def test_the_byte_order_mark_is_kept_not_stripped() -> None:
    # MQTT 5.0 §1.5.4 [MQTT-1.5.4-3]: U+FEFF is a character like any other.
    assert read_utf8(b"\x00\x03\xef\xbb\xbf", 0, "x") == ("\ufeff", 5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x01\xff", "not well-formed UTF-8"),
        (b"\x00\x03\xed\xa0\x80", "not well-formed UTF-8"),  # an encoded surrogate, U+D800
        (b"\x00\x02\xc0\x80", "not well-formed UTF-8"),  # an overlong U+0000
        (b"\x00\x01\x00", "U\\+0000"),
        (b"\x00\x05abc", "past the end"),
        (b"\x00", "inside its length"),
    ],
)
def test_bad_strings_are_malformed(data: bytes, message: str) -> None:
    with pytest.raises(MalformedPacket, match=message):
        read_utf8(data, 0, "a string")


@pytest.mark.parametrize("text", ["a\x00b", "\ud800"])
def test_strings_no_peer_could_read_are_not_encoded(text: str) -> None:
    with pytest.raises(InvalidArgument):
        encode_utf8(text)


def test_a_frame_is_its_fixed_header_split_and_its_body() -> None:
    reader = FrameReader(max_packet_size=1000)
    [frame] = read_all(reader, frame_bytes(0x62, b"\x00\x07"))
    assert frame == (6, 2, b"\x00\x07")  # (kind, flags, body)


def test_frames_come_out_whole_however_the_bytes_are_cut() -> None:
    stream = frame_bytes(0xC0, b"") + frame_bytes(0x30, b"\x00\x01ahello") + b"\xd0\x00"
    for cut in range(len(stream) + 1):
        reader = FrameReader(max_packet_size=1000)
        frames = read_all(reader, stream[:cut], stream[cut:])
        assert [kind for kind, _, _ in frames] == [12, 3, 13], cut
        assert reader.buffered() == 0


def test_a_partial_frame_waits_in_the_buffer() -> None:
    reader = FrameReader(max_packet_size=1000)
    assert read_all(reader, b"\x30\x05\x00\x01a") == []
    assert reader.buffered() == 5
    [frame] = read_all(reader, b"bc\xc0")
    assert frame[2] == b"\x00\x01abc"
    assert reader.buffered() == 1


def test_a_long_remaining_length_spans_chunks() -> None:
    body = bytes(range(256)) * 2
    packet = b"\x30" + encode_varint(len(body)) + body
    reader = FrameReader(max_packet_size=10_000)
    chunks = [packet[i : i + 7] for i in range(0, len(packet), 7)]
    [frame] = read_all(reader, *chunks)
    assert frame[2] == body


def test_a_consumer_that_stops_early_loses_nothing() -> None:
    reader = FrameReader(max_packet_size=1000)
    reader.receive(b"\xc0\x00\xd0\x00\xe0\x00")
    first = next(reader.frames())
    rest = list(reader.frames())
    assert [first[0]] + [kind for kind, _, _ in rest] == [12, 13, 14]


def test_frames_end_once_the_reader_is_cleared() -> None:
    # Connection.stop_reading: nothing after a DISCONNECT in the same read is taken.
    reader = FrameReader(max_packet_size=1000)
    reader.receive(b"\xc0\x00\xd0\x00\xe0\x00")
    frames = reader.frames()
    assert next(frames)[0] == 12
    reader.clear()
    assert list(frames) == []
    assert reader.buffered() == 0


def test_the_size_limit_counts_the_whole_packet() -> None:
    # MQTT 5.0 §3.1.2.11.4: "the total number of bytes in an MQTT Control Packet".
    reader = FrameReader(max_packet_size=4)
    assert len(read_all(reader, frame_bytes(0x40, b"\x00\x01"))) == 1
    with pytest.raises(PacketTooLarge, match="5 bytes"):
        read_all(reader, frame_bytes(0x50, b"\x00\x01\x00"))


def test_an_oversize_packet_is_refused_from_its_header_alone() -> None:
    reader = FrameReader(max_packet_size=1024)
    reader.receive(b"\x30" + encode_varint(MAX_VARINT))  # no body sent at all
    with pytest.raises(PacketTooLarge):
        list(reader.frames())


def test_the_limit_can_be_lowered_after_connect() -> None:
    reader = FrameReader(max_packet_size=1000)
    reader.max_packet_size = 3
    with pytest.raises(PacketTooLarge):
        read_all(reader, frame_bytes(0x40, b"\x00\x01"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x30\xff\xff\xff\xff\x7f", "longer than 4 bytes"),
        (b"\xc0\x80\x00", "shortest form"),
    ],
)
def test_a_bad_remaining_length_is_malformed(data: bytes, message: str) -> None:
    with pytest.raises(MalformedPacket, match=message):
        read_all(FrameReader(max_packet_size=1 << 28), data)


def test_a_bytearray_or_memoryview_is_copied_not_kept() -> None:
    data = bytearray(b"\x30\x03\x00\x01a")
    reader = FrameReader(max_packet_size=100)
    reader.receive(memoryview(data)[:3])
    data[3:] = b"\xff\xff"  # the caller reuses its buffer
    [frame] = read_all(reader, b"\x01a")
    assert frame[2] == b"\x00\x01a"


@given(
    st.lists(st.binary(max_size=20).map(lambda b: (0x30, b)), max_size=8),
    st.lists(st.integers(min_value=0, max_value=200), max_size=10),
)
def test_any_cutting_of_a_stream_gives_the_same_frames(
    packets: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(bytes((first,)) + encode_varint(len(b)) + b for first, b in packets)
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    reader = FrameReader(max_packet_size=1000)
    frames = read_all(reader, *(stream[a:b] for a, b in itertools.pairwise(points)))
    assert [(kind << 4 | flags, body) for kind, flags, body in frames] == packets
    assert reader.buffered() == 0
