"""The codec: `decode(frame, version) -> Packet` and `encode(packet, version) -> bytes`.

Invariants:
- Sans-IO and stateless. What depends on the connection (a second CONNECT, Topic Alias Maximum,
  Receive Maximum, a client sending a Subscription Identifier) is the session's to check.
- `decode` raises only `MalformedPacket` and its subclasses (mqtt/errors.py), never IndexError,
  UnicodeDecodeError or ValueError. Every byte is accounted for: trailing bytes are malformed.
- CONNECT comes before the version is known: `Connect.version` decides it, `version` is
  ignored. `connect_version` tells which CONNACK to answer a CONNECT that does not decode with.
- `encode` writes what it is given; a value no peer could decode (QoS 3, a packet id of 0,
  a lone surrogate) is an InvalidArgument, our bug rather than the peer's.
- PUBLISH is the hot path: decoded and encoded inline, properties kept as bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

from boxmq.errors import InvalidArgument, MalformedPacket
from boxmq.mqtt.errors import (
    ClientIdNotValid,
    ProtocolError,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from boxmq.mqtt.framing import (
    Frame,
    PacketType,
    encode_binary,
    encode_utf8,
    encode_varint,
    read_binary,
    read_utf8,
)
from boxmq.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    ProtocolVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    RetainHandling,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    ack_builder,
    new_publish,
)
from boxmq.mqtt.properties import EMPTY, Properties, read_properties
from boxmq.mqtt.reasons import (
    ReasonCode,
    connect_return_code,
    reason_from_connect_return_code,
    reason_from_v311_suback,
    reason_of,
    v311_suback_code,
)

__all__ = [
    "POSITIVE_ACKS",
    "connect_version",
    "decode",
    "decode_publish",
    "encode",
    "encode_publish",
]

_V5: Final = ProtocolVersion.V5
_V311: Final = ProtocolVersion.V311
_PROTOCOL_NAME: Final = "MQTT"  # MQTT 5.0 §3.1.2.1
_MQTT31_NAME: Final = "MQIsdp"  # MQTT 3.1 (level 3): a version we do not speak
# boxmq.core.topics.SHARE_PREFIX, spelled again: the codec imports nothing of boxmq but its
# values and errors (test_mqtt_reasons.test_the_codec_is_sans_io).
_SHARE_PREFIX: Final = "$share/"  # MQTT 5.0 §4.8.2
# MQTT 5.0 §2.1.3: the flags every packet but PUBLISH must carry.
_FLAG_OF: Final = [0b0010 if kind in (6, 8, 10) else 0 for kind in range(16)]  # PUBREL, (UN)SUB
_FIRST_BYTE: Final = [kind << 4 | flags for kind, flags in enumerate(_FLAG_OF)]
# The kind of a positive PUBACK, PUBREC, PUBREL or PUBCOMP in its common form (its packet id
# alone, in either version), by its fixed header's first byte: a connection reads one as a
# `ShortAck`, without `decode` (three of the four packets a QoS 2 message brings in are such).
POSITIVE_ACKS: Final[Mapping[int, type[Puback] | type[Pubrec] | type[Pubrel] | type[Pubcomp]]] = {
    _FIRST_BYTE[PacketType.PUBACK]: Puback,
    _FIRST_BYTE[PacketType.PUBREC]: Pubrec,
    _FIRST_BYTE[PacketType.PUBREL]: Pubrel,
    _FIRST_BYTE[PacketType.PUBCOMP]: Pubcomp,
}
# Plain ints and lists on the hot paths: an enum attribute or an enum-keyed dict costs more.
_PUBLISH: Final = int(PacketType.PUBLISH)
_AUTH: Final = int(PacketType.AUTH)
_Ack = TypeVar("_Ack", Puback, Pubrec, Pubrel, Pubcomp)
_T = TypeVar("_T")


# --- decoding -------------------------------------------------------------------------------


def decode(frame: Frame, version: ProtocolVersion) -> Packet:
    """One validated packet from one frame, read as `version` (ignored for CONNECT)."""
    kind, flags, body = frame
    if kind == _PUBLISH:
        return decode_publish(flags, body, version is _V5)
    if flags != _FLAG_OF[kind] or not kind or (kind == _AUTH and version is _V311):
        raise _bad_fixed_header(kind, flags, version)
    return _DECODER_OF[kind](body, version)


def _bad_fixed_header(kind: int, flags: int, version: ProtocolVersion) -> MalformedPacket:
    if not kind or (kind == _AUTH and version is _V311):
        return MalformedPacket(f"packet type {kind} is reserved (MQTT 5.0 §2.1.2)")
    name, want = PacketType(kind).name, _FLAG_OF[kind]
    return MalformedPacket(f"{name}: fixed header flags {flags:#06b}, not {want:#06b} (§2.1.3)")


def connect_version(frame: Frame) -> ProtocolVersion | None:
    """The version a CONNECT frame asks for, if it names one we speak; never raises."""
    kind, _, body = frame
    try:
        name, pos = read_utf8(body, 0, "CONNECT protocol name")
    except MalformedPacket:
        return None
    if kind != PacketType.CONNECT or name != _PROTOCOL_NAME or pos >= len(body):
        return None
    level = body[pos]
    return ProtocolVersion(level) if level in (_V311, _V5) else None


def decode_publish(flags: int, body: bytes, v5: bool) -> Publish:
    """MQTT 5.0 §3.3, inline: this runs once per message."""
    qos = flags >> 1 & 3
    if qos == 3:
        raise MalformedPacket("PUBLISH: QoS 3 (MQTT 5.0 §3.3.1.2)")
    dup = flags & 0b1000 != 0
    if dup and not qos:
        raise MalformedPacket("PUBLISH: DUP is set on a QoS 0 message (MQTT 5.0 §3.3.1.1)")
    size = len(body)
    if size < 2:
        raise MalformedPacket("PUBLISH: the packet ends before its topic name")
    pos = 2 + (body[0] << 8 | body[1])
    if pos > size:
        raise MalformedPacket("PUBLISH: the topic name runs past the end of the packet")
    try:
        topic = body[2:pos].decode()  # inline `framing.utf8`: this is the hot path
    except UnicodeDecodeError:
        raise MalformedPacket("PUBLISH: the topic name is not UTF-8 (§1.5.4)") from None
    if "\x00" in topic:
        raise MalformedPacket("PUBLISH: the topic name contains U+0000 (§1.5.4)")
    if "+" in topic or "#" in topic:
        raise TopicNameInvalid(f"PUBLISH: topic name {topic!r} has a wildcard (§3.3.2.1)")
    packet_id = None
    if qos:
        if pos + 2 > size:
            raise MalformedPacket("PUBLISH: the packet ends before its packet identifier")
        packet_id = body[pos] << 8 | body[pos + 1]
        if not packet_id:
            raise ProtocolError(f"PUBLISH: packet identifier 0 at QoS {qos} (MQTT 5.0 §2.2.1)")
        pos += 2
    properties = EMPTY
    if v5:
        if pos < size and not body[pos]:
            pos += 1  # no properties: the common case needs no parsing
        else:
            properties, pos = read_properties(body, pos, _PUBLISH)
        if not topic and properties.topic_alias is None:
            raise ProtocolError("PUBLISH: empty topic name and no Topic Alias (§3.3.2.1)")
    elif not topic:
        raise TopicNameInvalid("PUBLISH: empty topic name (3.1.1 §4.7.3)")
    return new_publish(topic, body[pos:], qos, flags & 1 == 1, dup, packet_id, properties)


def _decode_connect(body: bytes, _: ProtocolVersion) -> Connect:
    """MQTT 5.0 §3.1 and 3.1.1 §3.1: the packet decides the version."""
    name, pos = read_utf8(body, 0, "CONNECT protocol name")
    level, pos = _byte(body, pos, "CONNECT protocol level")
    if name == _MQTT31_NAME:
        raise UnsupportedProtocolVersion(level, name)
    if name != _PROTOCOL_NAME:
        raise MalformedPacket(f"CONNECT: protocol name {name!r} is not 'MQTT' (§3.1.2.1)")
    if level not in (_V311, _V5):
        raise UnsupportedProtocolVersion(level)
    version = ProtocolVersion(level)
    flags, pos = _byte(body, pos, "CONNECT flags")
    _check_connect_flags(flags, version)
    if pos + 2 > len(body):
        raise MalformedPacket("CONNECT: the packet ends before its keep alive")
    keep_alive, pos = body[pos] << 8 | body[pos + 1], pos + 2
    properties = EMPTY
    if version is _V5:
        properties, pos = read_properties(body, pos, PacketType.CONNECT)
        _check_authentication(properties, "CONNECT")
    client_id, pos = read_utf8(body, pos, "CONNECT client identifier")
    if version is _V311 and not client_id and not flags & 0b10:
        raise ClientIdNotValid("CONNECT: an empty client id needs CleanSession 1 (3.1.1 §3.1.3.1)")
    will = None
    if flags & 0b100:
        will, pos = _decode_will(body, pos, flags, version)
    username = password = None
    if flags & 0x80:
        username, pos = read_utf8(body, pos, "CONNECT user name")
    if flags & 0x40:
        password, pos = read_binary(body, pos, "CONNECT password")
    _end(body, pos, "CONNECT")
    clean = flags & 0b10 != 0
    return Connect(client_id, version, clean, keep_alive, username, password, will, properties)


def _check_connect_flags(flags: int, version: ProtocolVersion) -> None:
    """MQTT 5.0 §3.1.2.3-§3.1.2.9 and 3.1.1 §3.1.2.3-§3.1.2.9."""
    if flags & 1:
        raise MalformedPacket("CONNECT: the reserved flag is set (MQTT 5.0 §3.1.2.3)")
    will_qos = flags >> 3 & 3
    if flags & 0b100:
        if will_qos == 3:
            raise MalformedPacket("CONNECT: Will QoS 3 (MQTT 5.0 §3.1.2.6)")
    elif will_qos or flags & 0x20:
        raise MalformedPacket("CONNECT: Will QoS or Retain without the Will Flag (§3.1.2.6)")
    if version is _V311 and flags & 0x40 and not flags & 0x80:
        raise MalformedPacket("CONNECT: a password without a user name (3.1.1 §3.1.2.9)")


def _check_authentication(properties: Properties, where: str) -> None:
    if properties.authentication_data is not None and properties.authentication_method is None:
        raise ProtocolError(f"{where}: Authentication Data without a method (§3.1.2.11.10)")


def _decode_will(body: bytes, pos: int, flags: int, version: ProtocolVersion) -> tuple[Will, int]:
    properties = EMPTY
    if version is _V5:
        properties, pos = read_properties(body, pos, PacketType.CONNECT, will=True)
    topic, pos = read_utf8(body, pos, "CONNECT will topic")
    if not topic or "+" in topic or "#" in topic:
        raise TopicNameInvalid(f"CONNECT: will topic {topic!r} is not a topic name (§3.1.3.3)")
    payload, pos = read_binary(body, pos, "CONNECT will payload")
    return Will(topic, payload, flags >> 3 & 3, flags & 0x20 != 0, properties), pos


def _decode_connack(body: bytes, version: ProtocolVersion) -> Connack:
    """MQTT 5.0 §3.2, 3.1.1 §3.2."""
    ack_flags, pos = _byte(body, 0, "CONNACK flags")
    if ack_flags & 0xFE:
        raise MalformedPacket("CONNACK: reserved acknowledge flags are set (§3.2.2.1)")
    code, pos = _byte(body, pos, "CONNACK reason code")
    if version is _V311:
        _end(body, pos, "CONNACK")
        return Connack(ack_flags == 1, reason_from_connect_return_code(code))
    properties, pos = read_properties(body, pos, PacketType.CONNACK)
    _end(body, pos, "CONNACK")
    return Connack(ack_flags == 1, reason_of(code, PacketType.CONNACK), properties)


def _ack_decoder(cls: type[_Ack], kind: PacketType) -> Callable[[bytes, ProtocolVersion], _Ack]:
    """PUBACK, PUBREC, PUBREL, PUBCOMP (§3.4-§3.7): reason and properties may be omitted."""
    name = kind.name
    success = ReasonCode.SUCCESS
    positive = ack_builder(cls)

    def decode_ack(body: bytes, version: ProtocolVersion) -> _Ack:
        if len(body) == 2 and (packet_id := body[0] << 8 | body[1]):
            return positive(packet_id)  # the common form, in both versions
        packet_id, pos = _packet_id(body, 0, name)
        reason, properties = success, EMPTY
        if version is _V5:
            reason = reason_of(body[pos], kind)
            pos += 1
            if pos < len(body):
                properties, pos = read_properties(body, pos, kind)
        _end(body, pos, name)
        return cls(packet_id, reason, properties)

    return decode_ack


def _decode_subscribe(body: bytes, version: ProtocolVersion) -> Subscribe:
    """MQTT 5.0 §3.8, 3.1.1 §3.8."""
    packet_id, pos = _packet_id(body, 0, "SUBSCRIBE")
    properties = EMPTY
    if version is _V5:
        properties, pos = read_properties(body, pos, PacketType.SUBSCRIBE)
    subscriptions = []
    while pos < len(body):
        topic_filter, pos = _topic_filter(body, pos, "SUBSCRIBE")
        options, pos = _byte(body, pos, "SUBSCRIBE subscription options")
        subscriptions.append(_subscription(topic_filter, options, version))
    return Subscribe(packet_id, _some(tuple(subscriptions), "SUBSCRIBE"), properties)


def _subscription(topic_filter: str, options: int, version: ProtocolVersion) -> Subscription:
    """The subscription options byte (MQTT 5.0 §3.8.3.1, 3.1.1 §3.8.3.1)."""
    qos = options & 3
    if qos == 3:
        # 3.1.1 calls it malformed (its MQTT-3.8.3-4); MQTT 5.0 a Protocol Error (§3.8.3.1),
        # as it does Retain Handling 3 below: DISCONNECT 0x82, not 0x81.
        error = MalformedPacket if version is _V311 else ProtocolError
        raise error(f"SUBSCRIBE: QoS 3 for {topic_filter!r} (§3.8.3.1)")
    if version is _V311:
        if options & 0xFC:
            raise MalformedPacket("SUBSCRIBE: reserved option bits set (3.1.1 §3.8.3.1)")
        return Subscription(topic_filter, qos)
    if options & 0xC0:
        raise MalformedPacket("SUBSCRIBE: reserved option bits 6-7 set (MQTT 5.0 §3.8.3.1)")
    retain_handling = options >> 4 & 3
    if retain_handling == 3:
        raise ProtocolError("SUBSCRIBE: Retain Handling 3 (MQTT 5.0 §3.8.3.1)")
    no_local = options & 0b100 != 0
    if no_local and topic_filter.startswith(_SHARE_PREFIX):
        raise ProtocolError("SUBSCRIBE: No Local on a shared subscription (§3.8.3.1)")
    return Subscription(
        topic_filter, qos, no_local, options & 0b1000 != 0, RetainHandling(retain_handling)
    )


def _decode_suback(body: bytes, version: ProtocolVersion) -> Suback:
    """MQTT 5.0 §3.9, 3.1.1 §3.9."""
    packet_id, pos = _packet_id(body, 0, "SUBACK")
    if version is _V311:
        reasons = tuple(reason_from_v311_suback(code) for code in body[pos:])
        properties = EMPTY
    else:
        properties, pos = read_properties(body, pos, PacketType.SUBACK)
        reasons = tuple(reason_of(code, PacketType.SUBACK) for code in body[pos:])
    return Suback(packet_id, _some(reasons, "SUBACK"), properties)


def _decode_unsubscribe(body: bytes, version: ProtocolVersion) -> Unsubscribe:
    """MQTT 5.0 §3.10, 3.1.1 §3.10."""
    packet_id, pos = _packet_id(body, 0, "UNSUBSCRIBE")
    properties = EMPTY
    if version is _V5:
        properties, pos = read_properties(body, pos, PacketType.UNSUBSCRIBE)
    topic_filters = []
    while pos < len(body):
        topic_filter, pos = _topic_filter(body, pos, "UNSUBSCRIBE")
        topic_filters.append(topic_filter)
    return Unsubscribe(packet_id, _some(tuple(topic_filters), "UNSUBSCRIBE"), properties)


def _decode_unsuback(body: bytes, version: ProtocolVersion) -> Unsuback:
    """MQTT 5.0 §3.11; 3.1.1 §3.11 has nothing but the packet identifier."""
    packet_id, pos = _packet_id(body, 0, "UNSUBACK")
    if version is _V311:
        _end(body, pos, "UNSUBACK")
        return Unsuback(packet_id)
    properties, pos = read_properties(body, pos, PacketType.UNSUBACK)
    reasons = tuple(reason_of(code, PacketType.UNSUBACK) for code in body[pos:])
    return Unsuback(packet_id, _some(reasons, "UNSUBACK"), properties)


def _no_body(packet: Pingreq | Pingresp) -> Callable[[bytes, ProtocolVersion], Packet]:
    """PINGREQ, PINGRESP (MQTT 5.0 §3.12, §3.13): no variable header, no payload."""

    def decode_empty(body: bytes, _: ProtocolVersion) -> Packet:
        _end(body, 0, type(packet).__name__.upper())
        return packet  # a frozen value with no fields: one instance serves every frame

    return decode_empty


def _decode_disconnect(body: bytes, version: ProtocolVersion) -> Disconnect:
    """MQTT 5.0 §3.14: reason and properties may be omitted; 3.1.1 §3.14 has neither."""
    if version is _V311:
        _end(body, 0, "DISCONNECT")
        return Disconnect()
    reason, properties = _reason_and_properties(body, PacketType.DISCONNECT)
    return Disconnect(reason, properties)


def _decode_auth(body: bytes, _: ProtocolVersion) -> Auth:
    """MQTT 5.0 §3.15 (the caller has refused AUTH in 3.1.1)."""
    reason, properties = _reason_and_properties(body, PacketType.AUTH)
    _check_authentication(properties, "AUTH")
    return Auth(reason, properties)


def _reason_and_properties(body: bytes, kind: PacketType) -> tuple[ReasonCode, Properties]:
    """An optional reason code, then properties (MQTT 5.0 §3.14.2, §3.15.2).

    DISCONNECT may stop after its reason code (§3.14.2.2.1); AUTH is empty or has both.
    """
    if not body:
        return ReasonCode.SUCCESS, EMPTY
    reason, properties, pos = reason_of(body[0], kind), EMPTY, 1
    if pos < len(body) or kind is PacketType.AUTH:
        properties, pos = read_properties(body, pos, kind)
    _end(body, pos, kind.name)
    return reason, properties


def _decode_reserved(_: bytes, __: ProtocolVersion) -> Packet:
    raise MalformedPacket("packet type 0 is reserved (MQTT 5.0 §2.1.2)")  # decode() stops it


def _some(items: tuple[_T, ...], where: str) -> tuple[_T, ...]:
    """SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK carry at least one entry (§3.8.3-§3.11.3)."""
    if not items:
        raise ProtocolError(f"{where}: an empty payload (MQTT 5.0 §3.8.3, §3.10.3)")
    return items


def _topic_filter(body: bytes, pos: int, where: str) -> tuple[str, int]:
    topic_filter, pos = read_utf8(body, pos, f"{where} topic filter")
    if not topic_filter:
        raise MalformedPacket(f"{where}: an empty topic filter (MQTT 5.0 §4.7.3)")
    return topic_filter, pos


def _byte(body: bytes, pos: int, what: str) -> tuple[int, int]:
    if pos >= len(body):
        raise MalformedPacket(f"{what}: the packet ends before it")
    return body[pos], pos + 1


def _packet_id(body: bytes, pos: int, where: str) -> tuple[int, int]:
    if pos + 2 > len(body):
        raise MalformedPacket(f"{where}: the packet ends before its packet identifier")
    packet_id = body[pos] << 8 | body[pos + 1]
    if not packet_id:
        raise ProtocolError(f"{where}: packet identifier 0 (MQTT 5.0 §2.2.1)")
    return packet_id, pos + 2


def _end(body: bytes, pos: int, where: str) -> None:
    if pos != len(body):
        raise MalformedPacket(f"{where}: {len(body) - pos} unexpected bytes at the end")


_DECODERS: Final[Mapping[PacketType, Callable[[bytes, ProtocolVersion], Packet]]] = {
    PacketType.CONNECT: _decode_connect,
    PacketType.CONNACK: _decode_connack,
    PacketType.PUBACK: _ack_decoder(Puback, PacketType.PUBACK),
    PacketType.PUBREC: _ack_decoder(Pubrec, PacketType.PUBREC),
    PacketType.PUBREL: _ack_decoder(Pubrel, PacketType.PUBREL),
    PacketType.PUBCOMP: _ack_decoder(Pubcomp, PacketType.PUBCOMP),
    PacketType.SUBSCRIBE: _decode_subscribe,
    PacketType.SUBACK: _decode_suback,
    PacketType.UNSUBSCRIBE: _decode_unsubscribe,
    PacketType.UNSUBACK: _decode_unsuback,
    PacketType.PINGREQ: _no_body(Pingreq()),
    PacketType.PINGRESP: _no_body(Pingresp()),
    PacketType.DISCONNECT: _decode_disconnect,
    PacketType.AUTH: _decode_auth,
}
_DECODER_OF: Final = [
    _DECODERS.get(PacketType(k), _decode_reserved) if k else _decode_reserved for k in range(16)
]


# --- encoding -------------------------------------------------------------------------------


def encode(packet: Packet, version: ProtocolVersion) -> bytes:
    """The bytes of one packet for a `version` connection (CONNECT must say the same)."""
    if type(packet) is Publish:
        return encode_publish(packet, version is _V5, packet.packet_id, packet.dup)
    return _ENCODERS[type(packet)](packet, version)


# A topic's length-prefixed UTF-8, as encode_utf8 gives it (a topic that has none raises there
# and is not kept): a topic is encoded once per message and subscriber, and most are repeated.
_TOPIC_HEADS: dict[str, bytes] = {}
_TOPIC_HEADS_MAX: Final = 4096


def encode_publish(packet: Publish, v5: bool, packet_id: int | None, dup: bool) -> bytes:
    """MQTT 5.0 §3.3, inline: this runs once per message and subscriber. `packet_id` and
    `dup` are sent for the packet's own: an outbox's copy is sent under its packet id
    without a PUBLISH built to carry it (connection.send_publish)."""
    qos = packet.qos
    if not 0 <= qos <= 2:
        raise InvalidArgument(f"PUBLISH: QoS {qos} is not 0, 1 or 2")
    topic = packet.topic
    head = _TOPIC_HEADS.get(topic)
    if head is None:
        head = encode_utf8(topic)
        if len(_TOPIC_HEADS) >= _TOPIC_HEADS_MAX:
            _TOPIC_HEADS.clear()
        _TOPIC_HEADS[topic] = head
    if qos:  # _packet_id_bytes, inline
        if packet_id is None or not 0 < packet_id <= 0xFFFF:
            raise InvalidArgument(f"PUBLISH: packet identifier {packet_id} is not 1-65535 (§2.2.1)")
        head += packet_id.to_bytes(2, "big")
    if v5:
        raw = packet.properties.raw
        head += encode_varint(len(raw)) + raw if raw else b"\x00"
    payload = packet.payload
    size = len(head) + len(payload)
    first = 0x30 | dup << 3 | qos << 1 | packet.retain
    if size < 0x80:
        return bytes((first, size)) + head + payload
    return bytes((first,)) + encode_varint(size) + head + payload


def _frame(kind: PacketType, parts: Iterable[bytes]) -> bytes:
    body = b"".join(parts)
    return bytes((_FIRST_BYTE[kind],)) + encode_varint(len(body)) + body


def _properties(properties: Properties) -> bytes:
    return encode_varint(len(properties.raw)) + properties.raw


def _packet_id_bytes(packet_id: int | None, where: str) -> bytes:
    if packet_id is None or not 0 < packet_id <= 0xFFFF:
        raise InvalidArgument(f"{where}: packet identifier {packet_id} is not 1-65535 (§2.2.1)")
    return packet_id.to_bytes(2, "big")


def _encode_connect(packet: Connect, version: ProtocolVersion) -> bytes:
    """MQTT 5.0 §3.1, 3.1.1 §3.1."""
    if packet.version is not version:
        raise InvalidArgument(f"CONNECT: a {packet.version!r} CONNECT on a {version!r} connection")
    if version is _V311 and packet.password is not None and packet.username is None:
        raise InvalidArgument("CONNECT: 3.1.1 has no password without a user name (§3.1.2.9)")
    will = packet.will
    flags = packet.clean_start << 1
    flags |= (packet.username is not None) << 7 | (packet.password is not None) << 6
    payload = [encode_utf8(packet.client_id)]
    if will is not None:
        flags |= 0b100 | will.qos << 3 | will.retain << 5
        if version is _V5:
            payload.append(_properties(will.properties))
        payload += (encode_utf8(will.topic), encode_binary(will.payload))
    if packet.username is not None:
        payload.append(encode_utf8(packet.username))
    if packet.password is not None:
        payload.append(encode_binary(packet.password))
    header = encode_utf8(_PROTOCOL_NAME) + bytes((version, flags))
    header += packet.keep_alive.to_bytes(2, "big")
    if version is _V5:
        header += _properties(packet.properties)
    return _frame(PacketType.CONNECT, (header, *payload))


def _encode_connack(packet: Connack, version: ProtocolVersion) -> bytes:
    """MQTT 5.0 §3.2; 3.1.1 §3.2 maps the reason to a return code."""
    if version is _V311:
        code = connect_return_code(packet.reason)
        return _frame(PacketType.CONNACK, (bytes((packet.session_present, code)),))
    head = bytes((packet.session_present, packet.reason))
    return _frame(PacketType.CONNACK, (head, _properties(packet.properties)))


def _ack_encoder(
    kind: PacketType,
) -> Callable[[Puback | Pubrec | Pubrel | Pubcomp, ProtocolVersion], bytes]:
    """PUBACK, PUBREC, PUBREL, PUBCOMP: the shortest form that says it all (§3.4.2.1)."""
    name, first = kind.name, _FIRST_BYTE[kind]

    def encode_ack(packet: Puback | Pubrec | Pubrel | Pubcomp, version: ProtocolVersion) -> bytes:
        packet_id = _packet_id_bytes(packet.packet_id, name)
        if version is _V311 or not (packet.reason or packet.properties):
            return bytes((first, 2)) + packet_id
        if not packet.properties:
            return bytes((first, 3)) + packet_id + bytes((packet.reason,))
        return _frame(kind, (packet_id, bytes((packet.reason,)), _properties(packet.properties)))

    return encode_ack


def _encode_subscribe(packet: Subscribe, version: ProtocolVersion) -> bytes:
    """MQTT 5.0 §3.8, 3.1.1 §3.8."""
    parts = [_packet_id_bytes(packet.packet_id, "SUBSCRIBE")]
    if version is _V5:
        parts.append(_properties(packet.properties))
    for sub in packet.subscriptions:
        options = sub.qos
        if version is _V5:
            options |= sub.no_local << 2 | sub.retain_as_published << 3 | sub.retain_handling << 4
        parts += (encode_utf8(sub.topic_filter), bytes((options,)))
    return _frame(PacketType.SUBSCRIBE, parts)


def _encode_suback(packet: Suback, version: ProtocolVersion) -> bytes:
    """MQTT 5.0 §3.9; 3.1.1 §3.9 knows only granted QoS and 0x80."""
    parts = [_packet_id_bytes(packet.packet_id, "SUBACK")]
    if version is _V311:
        parts.append(bytes(v311_suback_code(reason) for reason in packet.reasons))
    else:
        parts += (_properties(packet.properties), bytes(packet.reasons))
    return _frame(PacketType.SUBACK, parts)


def _encode_unsubscribe(packet: Unsubscribe, version: ProtocolVersion) -> bytes:
    """MQTT 5.0 §3.10, 3.1.1 §3.10."""
    parts = [_packet_id_bytes(packet.packet_id, "UNSUBSCRIBE")]
    if version is _V5:
        parts.append(_properties(packet.properties))
    parts += map(encode_utf8, packet.topic_filters)
    return _frame(PacketType.UNSUBSCRIBE, parts)


def _encode_unsuback(packet: Unsuback, version: ProtocolVersion) -> bytes:
    """MQTT 5.0 §3.11; 3.1.1 §3.11 has only the packet identifier."""
    parts = [_packet_id_bytes(packet.packet_id, "UNSUBACK")]
    if version is _V5:
        parts += (_properties(packet.properties), bytes(packet.reasons))
    return _frame(PacketType.UNSUBACK, parts)


def _encode_disconnect(packet: Disconnect, version: ProtocolVersion) -> bytes:
    """MQTT 5.0 §3.14: as short as the reason and properties allow; 3.1.1: empty."""
    if version is _V311 or not (packet.reason or packet.properties):
        return b"\xe0\x00"
    if not packet.properties:
        return bytes((0xE0, 1, packet.reason))
    return _frame(PacketType.DISCONNECT, (bytes((packet.reason,)), _properties(packet.properties)))


def _encode_auth(packet: Auth, version: ProtocolVersion) -> bytes:
    """MQTT 5.0 §3.15; AUTH does not exist in 3.1.1."""
    if version is _V311:
        raise InvalidArgument("AUTH does not exist in MQTT 3.1.1")
    if not packet.reason and not packet.properties:
        return b"\xf0\x00"
    return _frame(PacketType.AUTH, (bytes((packet.reason,)), _properties(packet.properties)))


_ENCODERS: Final[Mapping[type, Callable[[Any, ProtocolVersion], bytes]]] = {
    Connect: _encode_connect,
    Connack: _encode_connack,
    Puback: _ack_encoder(PacketType.PUBACK),
    Pubrec: _ack_encoder(PacketType.PUBREC),
    Pubrel: _ack_encoder(PacketType.PUBREL),
    Pubcomp: _ack_encoder(PacketType.PUBCOMP),
    Subscribe: _encode_subscribe,
    Suback: _encode_suback,
    Unsubscribe: _encode_unsubscribe,
    Unsuback: _encode_unsuback,
    Pingreq: lambda _, __: b"\xc0\x00",  # MQTT 5.0 §3.12
    Pingresp: lambda _, __: b"\xd0\x00",  # MQTT 5.0 §3.13
    Disconnect: _encode_disconnect,
    Auth: _encode_auth,
}
