"""Bad input: a table of malformed packets with the reason code each must get, and fuzzing.

Every row is built by hand from the spec's layouts. The reason is what a v5 server sends in
DISCONNECT (or CONNACK, for a CONNECT); a 3.1.1 server closes the connection instead, except
for the CONNACK return codes 0x01 and 0x02 (3.1.1 §3.2.2.3).
"""

from __future__ import annotations

import contextlib
import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.unit.mqtt.packet_bytes import packet, props, s, vbi

from boxmq.errors import MalformedPacket, ProtocolViolation
from boxmq.mqtt import (
    FrameReader,
    Properties,
    ProtocolVersion,
    Publish,
    ReasonCode,
    Subscribe,
    Subscription,
    decode,
    encode,
    reason_for,
)
from boxmq.mqtt.codec import connect_version

V311 = ProtocolVersion.V311
V5 = ProtocolVersion.V5
R = ReasonCode


def connect(level: int, flags: int, *payload: bytes, name: str = "MQTT") -> bytes:
    properties = (b"\x00",) if level == 5 else ()
    return packet(0x10, s(name), bytes((level, flags)), b"\x00\x3c", *properties, *payload)


def decode_all(data: bytes, version: ProtocolVersion, max_packet_size: int = 1 << 20) -> None:
    reader = FrameReader(max_packet_size=max_packet_size)
    reader.shortest = version is V5  # as a connection reads once its CONNECT came
    reader.receive(data)
    for frame in reader.frames():
        decode(frame, version)


MALFORMED: list[tuple[str, ProtocolVersion, bytes, ReasonCode]] = [
    # -- the fixed header (MQTT 5.0 §2.1)
    ("remaining-length-5-bytes", V5, b"\x30\xff\xff\xff\xff\x7f", R.MALFORMED_PACKET),
    ("remaining-length-not-shortest", V5, b"\xc0\x80\x00", R.MALFORMED_PACKET),
    ("packet-type-0", V5, b"\x00\x00", R.MALFORMED_PACKET),
    ("auth-in-311", V311, b"\xf0\x00", R.MALFORMED_PACKET),
    ("pubrel-flags-0", V5, b"\x60\x02\x00\x01", R.MALFORMED_PACKET),
    ("subscribe-flags-0", V311, packet(0x80, b"\x00\x01", s("a"), b"\x00"), R.MALFORMED_PACKET),
    ("unsubscribe-flags-3", V5, packet(0xA3, b"\x00\x01\x00", s("a")), R.MALFORMED_PACKET),
    ("puback-flags-2", V311, b"\x42\x02\x00\x01", R.MALFORMED_PACKET),
    ("pingreq-flags-1", V311, b"\xc1\x00", R.MALFORMED_PACKET),
    ("connect-flags-1", V5, b"\x11" + connect(5, 2, s("c"))[1:], R.MALFORMED_PACKET),
    # -- PUBLISH (MQTT 5.0 §3.3)
    ("publish-qos-3", V5, packet(0x36, s("a"), b"\x00\x01\x00"), R.MALFORMED_PACKET),
    ("publish-dup-qos-0", V311, packet(0x38, s("a")), R.MALFORMED_PACKET),
    ("publish-topic-bad-utf8", V311, packet(0x30, b"\x00\x03a\xffb"), R.MALFORMED_PACKET),
    ("publish-topic-nul", V5, packet(0x30, s("a\x00b"), b"\x00"), R.MALFORMED_PACKET),
    ("publish-topic-surrogate", V5, packet(0x30, s("a\ud800"), b"\x00"), R.MALFORMED_PACKET),
    ("publish-topic-plus", V5, packet(0x30, s("a/+"), b"\x00"), R.TOPIC_NAME_INVALID),
    ("publish-topic-hash", V311, packet(0x30, s("#")), R.TOPIC_NAME_INVALID),
    ("publish-topic-empty-311", V311, packet(0x30, s(""), b"x"), R.TOPIC_NAME_INVALID),
    ("publish-topic-empty-no-alias", V5, packet(0x30, s(""), b"\x00x"), R.PROTOCOL_ERROR),
    ("publish-packet-id-0", V5, packet(0x32, s("a"), b"\x00\x00\x00"), R.PROTOCOL_ERROR),
    ("publish-topic-truncated", V311, packet(0x30, b"\x00\x05ab"), R.MALFORMED_PACKET),
    ("publish-packet-id-truncated", V311, packet(0x32, s("a"), b"\x01"), R.MALFORMED_PACKET),
    ("publish-no-property-length", V5, packet(0x30, s("a")), R.MALFORMED_PACKET),
    (
        "publish-topic-alias-0",
        V5,
        packet(0x30, s("a"), props(b"\x23\x00\x00")),
        R.TOPIC_ALIAS_INVALID,
    ),
    ("publish-unknown-property", V5, packet(0x30, s("a"), props(b"\x05\x00")), R.MALFORMED_PACKET),
    (
        "publish-wrong-property",
        V5,
        packet(0x30, s("a"), props(b"\x27\x00\x00\x00\x09")),
        R.MALFORMED_PACKET,
    ),
    (
        "publish-duplicate-property",
        V5,
        packet(0x30, s("a"), props(b"\x01\x00", b"\x01\x01")),
        R.PROTOCOL_ERROR,
    ),
    (
        "publish-property-truncated",
        V5,
        packet(0x30, s("a"), props(b"\x02\x00\x00")),
        R.MALFORMED_PACKET,
    ),
    (
        "publish-property-length-overruns",
        V5,
        packet(0x30, s("a"), b"\x09\x01\x00"),
        R.MALFORMED_PACKET,
    ),
    ("publish-payload-format-2", V5, packet(0x30, s("a"), props(b"\x01\x02")), R.PROTOCOL_ERROR),
    (
        "publish-user-property-bad-utf8",
        V5,
        packet(0x30, s("a"), props(b"\x26\x00\x01\xfe\x00\x00")),
        R.MALFORMED_PACKET,
    ),
    (
        "publish-response-topic-wildcard",
        V5,
        packet(0x30, s("a"), props(b"\x08" + s("r/#"))),
        R.PROTOCOL_ERROR,
    ),
    # -- CONNECT (MQTT 5.0 §3.1, 3.1.1 §3.1)
    ("connect-reserved-flag", V311, connect(4, 0x03, s("c")), R.MALFORMED_PACKET),
    ("connect-will-qos-3", V311, connect(4, 0x1E, s("c"), s("w"), s("m")), R.MALFORMED_PACKET),
    ("connect-will-qos-without-will", V5, connect(5, 0x0A, s("c")), R.MALFORMED_PACKET),
    ("connect-will-retain-without-will", V311, connect(4, 0x22, s("c")), R.MALFORMED_PACKET),
    (
        "connect-password-without-user-311",
        V311,
        connect(4, 0x42, s("c"), s("pw")),
        R.MALFORMED_PACKET,
    ),
    (
        "connect-will-topic-wildcard",
        V311,
        connect(4, 0x06, s("c"), s("w/+"), s("m")),
        R.TOPIC_NAME_INVALID,
    ),
    ("connect-client-id-bad-utf8", V311, connect(4, 0x02, b"\x00\x01\x80"), R.MALFORMED_PACKET),
    ("connect-truncated", V311, connect(4, 0x02, b"\x00"), R.MALFORMED_PACKET),
    ("connect-trailing-bytes", V311, connect(4, 0x02, s("c"), b"\x00"), R.MALFORMED_PACKET),
    ("connect-missing-user-name", V5, connect(5, 0x82, s("c")), R.MALFORMED_PACKET),
    (
        "connect-level-3",
        V311,
        connect(3, 0x02, s("c"), name="MQIsdp"),
        R.UNSUPPORTED_PROTOCOL_VERSION,
    ),
    ("connect-level-6", V5, connect(6, 0x02, s("c")), R.UNSUPPORTED_PROTOCOL_VERSION),
    ("connect-level-0", V311, connect(0, 0x02, s("c")), R.UNSUPPORTED_PROTOCOL_VERSION),
    ("connect-name-wrong", V311, connect(4, 0x02, s("c"), name="MQTX"), R.MALFORMED_PACKET),
    (
        "connect-empty-id-persistent-311",
        V311,
        connect(4, 0x00, s("")),
        R.CLIENT_IDENTIFIER_NOT_VALID,
    ),
    (
        "connect-receive-maximum-0",
        V5,
        packet(0x10, s("MQTT"), b"\x05\x02\x00\x3c", props(b"\x21\x00\x00"), s("c")),
        R.PROTOCOL_ERROR,
    ),
    (
        "connect-auth-data-without-method",
        V5,
        packet(0x10, s("MQTT"), b"\x05\x02\x00\x3c", props(b"\x16\x00\x00"), s("c")),
        R.PROTOCOL_ERROR,
    ),
    (
        "connect-will-property-not-allowed",
        V5,
        packet(
            0x10,
            s("MQTT"),
            b"\x05\x06\x00\x3c",
            b"\x00",
            s("c"),
            props(b"\x11\x00\x00\x00\x01"),
            s("w"),
            s("m"),
        ),
        R.MALFORMED_PACKET,
    ),
    # -- SUBSCRIBE / UNSUBSCRIBE (MQTT 5.0 §3.8, §3.10)
    ("subscribe-empty", V311, packet(0x82, b"\x00\x01"), R.PROTOCOL_ERROR),
    ("subscribe-empty-5", V5, packet(0x82, b"\x00\x01\x00"), R.PROTOCOL_ERROR),
    ("subscribe-packet-id-0", V311, packet(0x82, b"\x00\x00", s("a"), b"\x00"), R.PROTOCOL_ERROR),
    (
        "subscribe-reserved-bits-311",
        V311,
        packet(0x82, b"\x00\x01", s("a"), b"\x04"),
        R.MALFORMED_PACKET,
    ),
    (
        "subscribe-reserved-bits-5",
        V5,
        packet(0x82, b"\x00\x01\x00", s("a"), b"\x40"),
        R.MALFORMED_PACKET,
    ),
    ("subscribe-qos-3", V5, packet(0x82, b"\x00\x01\x00", s("a"), b"\x03"), R.PROTOCOL_ERROR),
    ("subscribe-qos-3-311", V311, packet(0x82, b"\x00\x01", s("a"), b"\x03"), R.MALFORMED_PACKET),
    (
        "subscribe-retain-handling-3",
        V5,
        packet(0x82, b"\x00\x01\x00", s("a"), b"\x30"),
        R.PROTOCOL_ERROR,
    ),
    (
        "subscribe-no-local-shared",
        V5,
        packet(0x82, b"\x00\x01\x00", s("$share/g/a"), b"\x04"),
        R.PROTOCOL_ERROR,
    ),
    ("subscribe-no-options-byte", V311, packet(0x82, b"\x00\x01", s("a")), R.MALFORMED_PACKET),
    ("subscribe-empty-filter", V311, packet(0x82, b"\x00\x01", s(""), b"\x00"), R.MALFORMED_PACKET),
    (
        "subscribe-two-subscription-ids",
        V5,
        packet(0x82, b"\x00\x01", props(b"\x0b\x01\x0b\x02"), s("a"), b"\x00"),
        R.PROTOCOL_ERROR,
    ),
    (
        "subscribe-subscription-id-0",
        V5,
        packet(0x82, b"\x00\x01", props(b"\x0b\x00"), s("a"), b"\x00"),
        R.PROTOCOL_ERROR,
    ),
    ("unsubscribe-empty", V311, packet(0xA2, b"\x00\x01"), R.PROTOCOL_ERROR),
    ("unsubscribe-empty-5", V5, packet(0xA2, b"\x00\x01\x00"), R.PROTOCOL_ERROR),
    ("unsubscribe-filter-nul", V5, packet(0xA2, b"\x00\x01\x00", s("a\x00")), R.MALFORMED_PACKET),
    # -- acknowledgements and the rest
    ("puback-packet-id-0", V311, b"\x40\x02\x00\x00", R.PROTOCOL_ERROR),
    ("puback-trailing-311", V311, b"\x40\x03\x00\x01\x00", R.MALFORMED_PACKET),
    ("puback-truncated", V5, b"\x40\x01\x00", R.MALFORMED_PACKET),
    ("puback-unknown-reason", V5, b"\x40\x03\x00\x01\x05", R.MALFORMED_PACKET),
    ("pubrel-reason-of-puback", V5, b"\x62\x03\x00\x01\x10", R.MALFORMED_PACKET),
    (
        "pubcomp-property-not-allowed",
        V5,
        packet(0x70, b"\x00\x01\x00", props(b"\x23\x00\x01")),
        R.MALFORMED_PACKET,
    ),
    ("pingreq-with-body", V5, b"\xc0\x01\x00", R.MALFORMED_PACKET),
    ("disconnect-with-body-311", V311, b"\xe0\x01\x00", R.MALFORMED_PACKET),
    ("disconnect-unknown-reason", V5, b"\xe0\x01\x03", R.MALFORMED_PACKET),
    ("disconnect-reason-of-connack", V5, b"\xe0\x01\x84", R.MALFORMED_PACKET),
    ("disconnect-trailing", V5, b"\xe0\x03\x00\x00\x00", R.MALFORMED_PACKET),
    ("auth-bad-reason", V5, b"\xf0\x02\x01\x00", R.MALFORMED_PACKET),
    ("auth-reason-without-property-length", V5, b"\xf0\x01\x18", R.MALFORMED_PACKET),
    (
        "auth-data-without-method",
        V5,
        packet(0xF0, b"\x18", props(b"\x16\x00\x00")),
        R.PROTOCOL_ERROR,
    ),
    ("connack-reserved-flags", V5, b"\x20\x03\x02\x00\x00", R.MALFORMED_PACKET),
    ("connack-311-return-code-6", V311, b"\x20\x02\x00\x06", R.MALFORMED_PACKET),
    ("suback-311-code-3", V311, b"\x90\x03\x00\x01\x03", R.MALFORMED_PACKET),
    ("suback-no-codes", V311, b"\x90\x02\x00\x01", R.PROTOCOL_ERROR),
    ("unsuback-5-no-codes", V5, b"\xb0\x03\x00\x01\x00", R.PROTOCOL_ERROR),
]


@pytest.mark.parametrize(
    ("version", "data", "reason"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_packets_get_their_reason_code(
    version: ProtocolVersion, data: bytes, reason: ReasonCode
) -> None:
    with pytest.raises(MalformedPacket) as caught:
        decode_all(data, version)
    assert reason_for(caught.value) is reason
    assert str(caught.value)  # the message says what was wrong


def test_an_oversize_packet_gets_packet_too_large() -> None:
    with pytest.raises(ProtocolViolation) as caught:
        decode_all(packet(0x30, s("a"), bytes(100)), V311, max_packet_size=100)
    assert reason_for(caught.value) is R.PACKET_TOO_LARGE


def test_unsupported_versions_carry_their_level() -> None:
    with pytest.raises(MalformedPacket) as caught:
        decode_all(connect(3, 0x02, s("c"), name="MQIsdp"), V311)
    assert getattr(caught.value, "level", None) == 3


@pytest.mark.parametrize(
    ("level", "name", "said"),
    [
        (3, "MQIsdp", "MQTT 3.1 (protocol name 'MQIsdp', level 3) is not supported"),
        # an MQTT 3.1 name is 3.1 whatever its level: "level 4 is not supported" was wrong
        (4, "MQIsdp", "MQTT 3.1 (protocol name 'MQIsdp', level 4) is not supported"),
        # a mosquitto bridge's first CONNECT (try_private, its default): 4 with the top bit
        (0x84, "MQTT", "132 (4 with a mosquitto bridge's bit) is not supported"),
        (6, "MQTT", "protocol level 6 is not supported (only 3.1.1, level 4, and 5.0"),
    ],
)
def test_an_unsupported_version_is_named_in_the_log(level: int, name: str, said: str) -> None:
    """What `boxmq serve` logs when it refuses a CONNECT (return code 0x01): the log is all a
    user sees of why an old device or a mosquitto bridge does not connect."""
    with pytest.raises(MalformedPacket) as caught:
        decode_all(connect(level, 0x02, s("c"), name=name), V311)
    assert said in str(caught.value)


@pytest.mark.parametrize(
    ("version", "data"),
    [
        (V5, connect(5, 0xC0, s("c"), s("u"))),  # user flag set, user name missing
        (V311, connect(4, 0x01, s("c"))),  # reserved flag
    ],
)
def test_a_bad_connect_still_tells_which_connack_to_send(
    version: ProtocolVersion, data: bytes
) -> None:
    reader = FrameReader(max_packet_size=1000)
    reader.receive(data)
    [frame] = reader.frames()
    with pytest.raises(MalformedPacket):
        decode(frame, version)
    assert connect_version(frame) is version


ALLOWED_BUT_ODD: list[tuple[str, ProtocolVersion, bytes]] = [
    ("password-without-user-name-5", V5, connect(5, 0x42, s("c"), s("pw"))),
    ("empty-client-id-clean-311", V311, connect(4, 0x02, s(""))),
    ("empty-client-id-persistent-5", V5, connect(5, 0x00, s(""))),
    (
        "user-property-twice",
        V5,
        packet(0x30, s("a"), props(b"\x26" + s("k") + s("v"), b"\x26" + s("k") + s("v"))),
    ),
    ("subscription-ids-in-publish", V5, packet(0x30, s("a"), props(b"\x0b\x01", b"\x0b\x02"))),
    ("topic-alias-with-empty-topic", V5, packet(0x30, s(""), props(b"\x23\x00\x01"))),
    ("bom-in-topic", V5, packet(0x30, s("\ufeffa"), b"\x00")),
    ("control-character-in-topic", V311, packet(0x30, s("a\x01"))),  # SHOULD NOT, not MUST NOT
    ("filter-syntax-left-to-the-session", V311, packet(0x82, b"\x00\x01", s("a/#/b"), b"\x00")),
    ("no-local-on-plain-filter", V5, packet(0x82, b"\x00\x01\x00", s("a"), b"\x04")),
    ("remaining-length-not-shortest-311", V311, b"\xc0\x80\x00"),  # 3.1.1 §2.2.3 asks none
]


@pytest.mark.parametrize(
    ("version", "data"), [a[1:] for a in ALLOWED_BUT_ODD], ids=[a[0] for a in ALLOWED_BUT_ODD]
)
def test_what_the_spec_allows_is_not_refused(version: ProtocolVersion, data: bytes) -> None:
    decode_all(data, version)


# --- fuzzing: the one error family, never anything else --------------------------------------


def feed(data: bytes, cuts: list[int], version: ProtocolVersion) -> None:
    """Feed `data` cut at `cuts` and decode what comes out; only ProtocolViolation may escape."""
    reader = FrameReader(max_packet_size=512)
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    with contextlib.suppress(ProtocolViolation):
        for start, end in itertools.pairwise(points):
            reader.receive(data[start:end])
            for frame in reader.frames():
                decode(frame, version)
                connect_version(frame)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.binary(max_size=600),
    st.lists(st.integers(0, 600), max_size=8),
    st.sampled_from(ProtocolVersion),
)
@example(b"\x10\x0c\x00\x04MQTT\x05\x02\x00\x3c\x03", [], V5)
def test_any_bytes_in_any_chunks_decode_or_raise_the_one_error(
    data: bytes, cuts: list[int], version: ProtocolVersion
) -> None:
    feed(data, cuts, version)


SEEDS = [
    connect(4, 0xEE, s("c"), s("w"), s("m"), s("u"), s("p")),
    packet(
        0x10,
        s("MQTT"),
        b"\x05\xc6\x00\x3c",
        props(b"\x11\x00\x00\x00\x01", b"\x26" + s("k") + s("v")),
        s("c"),
        props(b"\x18\x00\x00\x00\x01"),
        s("w"),
        s("m"),
        s("u"),
        s("p"),
    ),
    packet(
        0x3B,
        s("a/b"),
        b"\x00\x01",
        props(
            b"\x02\x00\x00\x00\x05",
            b"\x03" + s("t"),
            b"\x08" + s("r"),
            b"\x09\x00\x01x",
            b"\x0b\x01",
            b"\x23\x00\x01",
            b"\x26" + s("k") + s("v"),
        ),
        b"payload",
    ),
    packet(0x82, b"\x00\x01", props(b"\x0b\x7f"), s("a/+"), b"\x2d", s("$share/g/#"), b"\x02"),
    packet(0xA2, b"\x00\x01", props(b"\x26" + s("k") + s("v")), s("a"), s("b")),
    packet(
        0x20,
        b"\x01\x00",
        props(b"\x12" + s("id"), b"\x13\x00\x05", b"\x21\x00\x0a", b"\x24\x01", b"\x2a\x00"),
    ),
    packet(0x40, b"\x00\x01\x10", props(b"\x1f" + s("why"))),
    packet(0xE0, b"\x04", props(b"\x11\x00\x00\x00\x00", b"\x1c" + s("s"))),
    packet(0xF0, b"\x18", props(b"\x15" + s("m"), b"\x16\x00\x01d")),
    packet(0x90, b"\x00\x01", props(), b"\x00\x01\x02\x80\x87"),
    packet(0xB0, b"\x00\x01", props(), b"\x00\x11"),
]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SEEDS),
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 300),
    st.sampled_from(ProtocolVersion),
)
def test_mutated_valid_packets_decode_or_raise_the_one_error(
    seed: bytes, flips: list[tuple[int, int]], cut: int, version: ProtocolVersion
) -> None:
    data = bytearray(seed)
    for index, value in flips:
        data[index % len(data)] = value
    feed(bytes(data[: max(cut, 2)]) if cut < len(data) else bytes(data), [cut], version)
    feed(bytes(data), [], version)


@given(st.binary(max_size=40), st.sampled_from(ProtocolVersion))
def test_every_packet_type_survives_garbage_bodies(body: bytes, version: ProtocolVersion) -> None:
    for first in range(256):
        feed(bytes((first,)) + vbi(len(body)) + body, [], version)


def test_what_decodes_re_encodes_to_the_same_value() -> None:
    # Spot check that accepted input is a real packet: a decoded value survives a round trip.
    for value in (
        Publish("a", b"x", 1, False, True, 9, Properties.build(topic_alias=1)),
        Subscribe(1, (Subscription("a", 1),)),
    ):
        data = encode(value, V5)
        reader = FrameReader(max_packet_size=100)
        reader.receive(data)
        [frame] = reader.frames()
        assert encode(decode(frame, V5), V5) == data


@pytest.mark.parametrize("seed", SEEDS, ids=range(len(SEEDS)))
def test_the_fuzzing_seeds_are_valid_packets(seed: bytes) -> None:
    decode_all(seed, V5)
