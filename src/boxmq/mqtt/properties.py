"""MQTT 5.0 properties (§2.2.2): kept as the bytes they came in, decoded only on demand.

Invariants:
- A `Properties` holds the raw property bytes *without* their length prefix. Decoding a packet
  builds one object per property list, never one per property: the broker forwards `raw`.
- `read_properties` (untrusted input) validates everything once, without building values:
  known ids, ids allowed in that packet (§2.2.2.2: otherwise malformed), no duplicates except
  User Property and, in PUBLISH, Subscription Identifier (§3.3.2.3.8: otherwise a protocol
  error), well-formed values and the value ranges MQTT 5.0 calls protocol errors.
- So the accessors and iteration trust `raw`; build one with `build`/`of`, not by hand.
- `mask` says which identifiers a list holds, so asking for an absent property (the usual Topic
  Alias) or dropping one costs no walk; reading a present one walks the list by lengths and
  decodes that value only.
- Equality is byte equality: the same properties in another order are a different value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import pairwise
from typing import Final, Generic, TypeVar, overload

from boxmq.errors import InvalidArgument, MalformedPacket
from boxmq.mqtt.errors import ProtocolError, TopicAliasInvalid
from boxmq.mqtt.framing import (
    MAX_VARINT,
    PacketType,
    decode_varint,
    encode_binary,
    encode_utf8,
    encode_varint,
    read_binary,
    read_utf8,
)

__all__ = [
    "ALLOWED",
    "EMPTY",
    "TYPES",
    "WILL_ALLOWED",
    "DataType",
    "Properties",
    "PropertyId",
    "PropertyValue",
    "read_properties",
    "subscription_identifier",
    "validated",
]

PropertyValue = int | str | bytes | tuple[str, str]


class PropertyId(IntEnum):
    """Every MQTT 5.0 property identifier (§2.2.2.2)."""

    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


class DataType(IntEnum):
    """The data types of MQTT 5.0 §1.5 that property values have."""

    BYTE = 1
    TWO_BYTE_INTEGER = 2
    FOUR_BYTE_INTEGER = 3
    VARIABLE_BYTE_INTEGER = 4
    UTF8_STRING = 5
    BINARY_DATA = 6
    UTF8_STRING_PAIR = 7


_P = PropertyId
# Plain ints for the validating loop: an enum attribute or hash costs more than the check.
_BYTE, _TWO, _FOUR, _VARINT, _UTF8, _BINARY, _PAIR = map(int, DataType)
_TYPES: Final[Mapping[int, int]] = {
    _P.PAYLOAD_FORMAT_INDICATOR: _BYTE,
    _P.MESSAGE_EXPIRY_INTERVAL: _FOUR,
    _P.CONTENT_TYPE: _UTF8,
    _P.RESPONSE_TOPIC: _UTF8,
    _P.CORRELATION_DATA: _BINARY,
    _P.SUBSCRIPTION_IDENTIFIER: _VARINT,
    _P.SESSION_EXPIRY_INTERVAL: _FOUR,
    _P.ASSIGNED_CLIENT_IDENTIFIER: _UTF8,
    _P.SERVER_KEEP_ALIVE: _TWO,
    _P.AUTHENTICATION_METHOD: _UTF8,
    _P.AUTHENTICATION_DATA: _BINARY,
    _P.REQUEST_PROBLEM_INFORMATION: _BYTE,
    _P.WILL_DELAY_INTERVAL: _FOUR,
    _P.REQUEST_RESPONSE_INFORMATION: _BYTE,
    _P.RESPONSE_INFORMATION: _UTF8,
    _P.SERVER_REFERENCE: _UTF8,
    _P.REASON_STRING: _UTF8,
    _P.RECEIVE_MAXIMUM: _TWO,
    _P.TOPIC_ALIAS_MAXIMUM: _TWO,
    _P.TOPIC_ALIAS: _TWO,
    _P.MAXIMUM_QOS: _BYTE,
    _P.RETAIN_AVAILABLE: _BYTE,
    _P.USER_PROPERTY: _PAIR,
    _P.MAXIMUM_PACKET_SIZE: _FOUR,
    _P.WILDCARD_SUBSCRIPTION_AVAILABLE: _BYTE,
    _P.SUBSCRIPTION_IDENTIFIER_AVAILABLE: _BYTE,
    _P.SHARED_SUBSCRIPTION_AVAILABLE: _BYTE,
}
TYPES: Final[Mapping[PropertyId, DataType]] = {
    PropertyId(pid): DataType(kind) for pid, kind in _TYPES.items()
}
_TYPE_OF: Final = [_TYPES.get(i, 0) for i in range(256)]  # 0: not a property identifier

# Values MQTT 5.0 calls a Protocol Error (§3.1.2.11, §3.2.2.3, §3.3.2.3): (lowest, highest).
_RANGES: Final[Mapping[int, tuple[int, int]]] = {
    **dict.fromkeys(
        (
            _P.PAYLOAD_FORMAT_INDICATOR,
            _P.REQUEST_PROBLEM_INFORMATION,
            _P.REQUEST_RESPONSE_INFORMATION,
            _P.MAXIMUM_QOS,
            _P.RETAIN_AVAILABLE,
            _P.WILDCARD_SUBSCRIPTION_AVAILABLE,
            _P.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            _P.SHARED_SUBSCRIPTION_AVAILABLE,
        ),
        (0, 1),
    ),
    _P.RECEIVE_MAXIMUM: (1, 0xFFFF),
    _P.MAXIMUM_PACKET_SIZE: (1, 0xFFFF_FFFF),
    _P.SUBSCRIPTION_IDENTIFIER: (1, MAX_VARINT),
}

# Which properties each packet may carry (MQTT 5.0 §2.2.2.2, the table's last column).
WILL_ALLOWED: Final = frozenset(
    {
        _P.PAYLOAD_FORMAT_INDICATOR,
        _P.MESSAGE_EXPIRY_INTERVAL,
        _P.CONTENT_TYPE,
        _P.RESPONSE_TOPIC,
        _P.CORRELATION_DATA,
        _P.WILL_DELAY_INTERVAL,
        _P.USER_PROPERTY,
    }
)
_ACK: Final = frozenset({_P.REASON_STRING, _P.USER_PROPERTY})
ALLOWED: Final[Mapping[PacketType, frozenset[PropertyId]]] = {
    PacketType.CONNECT: frozenset(
        {
            _P.SESSION_EXPIRY_INTERVAL,
            _P.AUTHENTICATION_METHOD,
            _P.AUTHENTICATION_DATA,
            _P.REQUEST_PROBLEM_INFORMATION,
            _P.REQUEST_RESPONSE_INFORMATION,
            _P.RECEIVE_MAXIMUM,
            _P.TOPIC_ALIAS_MAXIMUM,
            _P.USER_PROPERTY,
            _P.MAXIMUM_PACKET_SIZE,
        }
    ),
    PacketType.CONNACK: frozenset(
        {
            _P.SESSION_EXPIRY_INTERVAL,
            _P.ASSIGNED_CLIENT_IDENTIFIER,
            _P.SERVER_KEEP_ALIVE,
            _P.AUTHENTICATION_METHOD,
            _P.AUTHENTICATION_DATA,
            _P.RESPONSE_INFORMATION,
            _P.SERVER_REFERENCE,
            _P.REASON_STRING,
            _P.RECEIVE_MAXIMUM,
            _P.TOPIC_ALIAS_MAXIMUM,
            _P.MAXIMUM_QOS,
            _P.RETAIN_AVAILABLE,
            _P.USER_PROPERTY,
            _P.MAXIMUM_PACKET_SIZE,
            _P.WILDCARD_SUBSCRIPTION_AVAILABLE,
            _P.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            _P.SHARED_SUBSCRIPTION_AVAILABLE,
        }
    ),
    PacketType.PUBLISH: (WILL_ALLOWED - {_P.WILL_DELAY_INTERVAL})
    | {_P.SUBSCRIPTION_IDENTIFIER, _P.TOPIC_ALIAS},
    PacketType.PUBACK: _ACK,
    PacketType.PUBREC: _ACK,
    PacketType.PUBREL: _ACK,
    PacketType.PUBCOMP: _ACK,
    PacketType.SUBSCRIBE: frozenset({_P.SUBSCRIPTION_IDENTIFIER, _P.USER_PROPERTY}),
    PacketType.SUBACK: _ACK,
    PacketType.UNSUBSCRIBE: frozenset({_P.USER_PROPERTY}),
    PacketType.UNSUBACK: _ACK,
    PacketType.PINGREQ: frozenset(),
    PacketType.PINGRESP: frozenset(),
    PacketType.DISCONNECT: _ACK | {_P.SESSION_EXPIRY_INTERVAL, _P.SERVER_REFERENCE},
    PacketType.AUTH: _ACK | {_P.AUTHENTICATION_METHOD, _P.AUTHENTICATION_DATA},
}


def _mask(ids: Iterable[int]) -> int:
    return sum(1 << pid for pid in set(ids))


# Per packet type (list index = type nibble, plain ints: hashing an enum costs more than the
# check). Index 0 holds the will's properties, which no packet type uses.
_MASKS: Final = [
    _mask(ALLOWED.get(PacketType(k), ())) if k else _mask(WILL_ALLOWED) for k in range(16)
]
_WHERE: Final = [
    f"{PacketType(k).name} properties" if k else "CONNECT will properties" for k in range(16)
]
_REPEATABLE: Final = [_mask({_P.USER_PROPERTY})] * 16
_REPEATABLE[PacketType.PUBLISH] |= _mask({_P.SUBSCRIPTION_IDENTIFIER})  # §3.3.2.3.8
_SIZES: Final = {_BYTE: 1, _TWO: 2, _FOUR: 4}
_BUILD_ORDER: Final = [(pid, pid.name.lower()) for pid in PropertyId]
_TOPIC_ALIAS: Final = int(_P.TOPIC_ALIAS)
_RESPONSE_TOPIC: Final = int(_P.RESPONSE_TOPIC)
_INT_RANGES: Final = {int(pid): bounds for pid, bounds in _RANGES.items()}


def _check_response_topic(text: str, where: str) -> None:
    """A Response Topic is the Topic Name of the response (§3.3.2.3.5): no wildcard, and not
    empty (MQTT-4.7.3-1), or no response could ever be published to it."""
    if "+" in text or "#" in text:
        raise ProtocolError(f"{where}: a Response Topic has a wildcard (§3.3.2.3.5)")
    if not text:
        raise ProtocolError(f"{where}: a Response Topic is empty (§3.3.2.3.5, MQTT-4.7.3-1)")


def read_properties(
    buf: bytes, pos: int, kind: int, *, will: bool = False
) -> tuple[Properties, int]:
    """The property length and list at `pos`, validated for packet type `kind` (or its will).

    Returns (properties, next pos). `kind` is a `PacketType` or its plain int.
    """
    length, start = decode_varint(buf, pos)
    end = start + length
    slot = 0 if will else kind
    if end > len(buf):
        raise MalformedPacket(f"{_WHERE[slot]}: the length runs past the end of the packet")
    if not length:
        return EMPTY, end
    raw = buf[start:end]
    return Properties(raw, _present(raw, slot)), end


def validated(raw: bytes, kind: int) -> Properties:
    """A property list without its length prefix (as boxmq stores one), checked for packet
    type `kind` as `read_properties` checks one received: MalformedPacket (or its
    ProtocolError) if a peer would have to refuse it."""
    if not raw:
        return EMPTY
    return Properties(raw, _present(raw, kind))


def _present(raw: bytes, slot: int) -> int:
    """The mask of the properties in `raw`, checked against what packet type `slot` allows;
    MalformedPacket (or its ProtocolError) for a list a receiver must refuse."""
    try:
        return _validate(raw, _MASKS[slot], _REPEATABLE[slot], _WHERE[slot])
    except IndexError:
        raise MalformedPacket(f"{_WHERE[slot]}: a value runs past the end of the list") from None
    except UnicodeDecodeError:
        raise MalformedPacket(f"{_WHERE[slot]}: a string is not UTF-8 (§1.5.4)") from None


def _validate(raw: bytes, allowed: int, repeatable: int, where: str) -> int:
    """Walk a property list once, checking it, without building values (it runs per PUBLISH).

    Returns the identifiers seen, as a bit mask (`Properties.mask`).

    Truncation surfaces as IndexError and bad UTF-8 as UnicodeDecodeError; the caller turns
    both into MalformedPacket.
    """
    seen = 0
    pos = 0
    size = len(raw)
    while pos < size:
        pid = raw[pos]
        bit = 1 << pid
        if not allowed & bit:
            raise _unexpected(pid, where)
        if seen & bit and not repeatable & bit:
            raise ProtocolError(f"{where}: {PropertyId(pid).name} appears twice (§2.2.2.2)")
        seen |= bit
        kind = _TYPE_OF[pid]
        pos += 1
        if kind == _BINARY:
            pos += 2 + (raw[pos] << 8 | raw[pos + 1])
            if pos > size:
                raise IndexError
            continue
        if kind >= _UTF8:  # a string, or a pair of them: UTF-8 with no U+0000 (§1.5.4)
            end = pos + 2 + (raw[pos] << 8 | raw[pos + 1])
            text = raw[pos + 2 : end].decode()
            if kind == _PAIR:
                pos, end = end, end + 2 + (raw[end] << 8 | raw[end + 1])
                text += raw[pos + 2 : end].decode()
            if end > size:
                raise IndexError
            if "\x00" in text:
                raise MalformedPacket(f"{where}: a string contains U+0000 (§1.5.4)")
            if pid == _RESPONSE_TOPIC:
                _check_response_topic(text, where)
            pos = end
            continue
        if kind == _VARINT:
            value, pos = decode_varint(raw, pos)
        else:
            end = pos + _SIZES[kind]
            if end > size:
                raise IndexError
            value = int.from_bytes(raw[pos:end], "big")
            pos = end
        if pid in _INT_RANGES:
            low, high = _INT_RANGES[pid]
            if not low <= value <= high:
                raise ProtocolError(f"{where}: {PropertyId(pid).name} may not be {value}")
        elif pid == _TOPIC_ALIAS and not value:
            raise TopicAliasInvalid(f"{where}: a Topic Alias of 0 is not allowed (§3.3.2.3.4)")
    return seen


def _unexpected(pid: int, where: str) -> MalformedPacket:
    """MQTT 5.0 §2.2.2.2: an unknown identifier, or one this packet may not carry."""
    if _TYPE_OF[pid]:
        return MalformedPacket(f"{where}: {PropertyId(pid).name} is not allowed there")
    return MalformedPacket(f"{where}: {pid:#04x} is not a property identifier")


def _read_value(kind: int, raw: bytes, pos: int, where: str) -> tuple[PropertyValue, int]:
    """One value of data type `kind` at `pos`; MalformedPacket if it runs past the end."""
    if kind == _UTF8:
        return read_utf8(raw, pos, where)
    if kind == _BINARY:
        return read_binary(raw, pos, where)
    if kind == _VARINT:
        return decode_varint(raw, pos)
    if kind == _PAIR:
        name, pos = read_utf8(raw, pos, where)
        value, pos = read_utf8(raw, pos, where)
        return (name, value), pos
    size = 1 if kind == _BYTE else 2 if kind == _TWO else 4
    end = pos + size
    if end > len(raw):
        raise MalformedPacket(f"{where}: a value runs past the end of the properties")
    return int.from_bytes(raw[pos:end], "big"), end


def _encode_value(pid: int, value: PropertyValue) -> bytes:
    kind = _TYPES[pid]
    try:
        if kind == _UTF8 and isinstance(value, str):
            return encode_utf8(value)
        if kind == _BINARY and isinstance(value, bytes):
            return encode_binary(value)
        if kind == _PAIR and isinstance(value, tuple):
            name, text = value
            return encode_utf8(name) + encode_utf8(text)
        if kind == _VARINT and isinstance(value, int):
            return encode_varint(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value.to_bytes(1 if kind == _BYTE else 2 if kind == _TWO else 4, "big")
    except OverflowError:
        raise InvalidArgument(f"{PropertyId(pid).name}: {value!r} is out of range") from None
    raise InvalidArgument(f"{PropertyId(pid).name}: {value!r} is not a value of its type")


def _offsets(raw: bytes, until: int = -1) -> list[int]:
    """Where each property of a trusted list starts, found by lengths, never decoded.

    The last offset is the end of the list, or the start of the first `until` property.
    """
    offsets = []
    pos, size = 0, len(raw)
    while pos < size:
        offsets.append(pos)
        if raw[pos] == until:
            return offsets
        kind = _TYPE_OF[raw[pos]]
        pos += 1
        if kind >= _UTF8:  # length-prefixed; a pair is two of them
            pos += 2 + (raw[pos] << 8 | raw[pos + 1])
            if kind == _PAIR:
                pos += 2 + (raw[pos] << 8 | raw[pos + 1])
        elif kind == _VARINT:
            while raw[pos] & 0x80:
                pos += 1
            pos += 1
        else:
            pos += _SIZES[kind]
    offsets.append(pos)
    return offsets


def subscription_identifier(number: int) -> Properties:
    """One Subscription Identifier, to add to a forwarded PUBLISH's list (MQTT 5.0 §3.3.2.3.8)."""
    if not 0 < number <= MAX_VARINT:
        raise InvalidArgument(f"a Subscription Identifier is 1-{MAX_VARINT}, not {number}")
    return Properties(b"\x0b" + encode_varint(number), 1 << _P.SUBSCRIPTION_IDENTIFIER)


_V = TypeVar("_V", int, str, bytes, tuple[str, str])


class _One(Generic[_V]):
    """A typed accessor: the first value of one property, decoded when read, or None."""

    def __init__(self, pid: PropertyId, kind: type[_V]) -> None:
        self._pid = pid
        self._kind: type[_V] = kind

    @overload
    def __get__(self, owner: None, cls: type[Properties]) -> _One[_V]: ...
    @overload
    def __get__(self, owner: Properties, cls: type[Properties]) -> _V | None: ...
    def __get__(self, owner: Properties | None, cls: type[Properties]) -> _One[_V] | _V | None:
        if owner is None:
            return self
        value = owner.get(self._pid)
        return value if isinstance(value, self._kind) else None


class _All(Generic[_V]):
    """A typed accessor: every value of a property that may repeat, in order."""

    def __init__(self, pid: PropertyId, kind: type[_V]) -> None:
        self._pid = pid
        self._kind: type[_V] = kind

    @overload
    def __get__(self, owner: None, cls: type[Properties]) -> _All[_V]: ...
    @overload
    def __get__(self, owner: Properties, cls: type[Properties]) -> tuple[_V, ...]: ...
    def __get__(self, owner: Properties | None, cls: type[Properties]) -> _All[_V] | tuple[_V, ...]:
        if owner is None:
            return self
        return tuple(v for v in owner.get_all(self._pid) if isinstance(v, self._kind))


@dataclass(frozen=True, slots=True, repr=False)
class Properties:
    """A property list as raw bytes (no length prefix), read lazily through the accessors.

    `props.topic_alias` is an int or None, `props.user_properties` a tuple of pairs; `raw` is
    what a forwarded packet carries (drop what must not travel with `without`, append with `+`).
    """

    raw: bytes = b""
    # Bit i is set if property i may be in `raw` (-1: not known), so asking for an absent
    # Topic Alias, or dropping one, costs no walk. Not part of the value.
    mask: int = field(default=-1, compare=False)

    @classmethod
    def of(cls, items: Iterable[tuple[PropertyId, PropertyValue]]) -> Properties:
        """Encode properties in the order given (no check of which packet may carry them)."""
        items = list(items)
        raw = b"".join(bytes((pid,)) + _encode_value(pid, value) for pid, value in items)
        return cls(raw, _mask(pid for pid, _ in items))

    @classmethod
    def build(
        cls,
        *,
        payload_format_indicator: int | None = None,
        message_expiry_interval: int | None = None,
        content_type: str | None = None,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
        session_expiry_interval: int | None = None,
        assigned_client_identifier: str | None = None,
        server_keep_alive: int | None = None,
        authentication_method: str | None = None,
        authentication_data: bytes | None = None,
        request_problem_information: int | None = None,
        will_delay_interval: int | None = None,
        request_response_information: int | None = None,
        response_information: str | None = None,
        server_reference: str | None = None,
        reason_string: str | None = None,
        receive_maximum: int | None = None,
        topic_alias_maximum: int | None = None,
        topic_alias: int | None = None,
        maximum_qos: int | None = None,
        retain_available: int | None = None,
        maximum_packet_size: int | None = None,
        wildcard_subscription_available: int | None = None,
        subscription_identifier_available: int | None = None,
        shared_subscription_available: int | None = None,
        user_properties: Iterable[tuple[str, str]] = (),
        subscription_identifiers: Iterable[int] = (),
    ) -> Properties:
        """Encode the given properties in identifier order; None and () leave one out."""
        given = locals()
        items: list[tuple[PropertyId, PropertyValue]] = []
        for pid, name in _BUILD_ORDER:
            if pid == _P.USER_PROPERTY:
                items += ((pid, pair) for pair in user_properties)
            elif pid == _P.SUBSCRIPTION_IDENTIFIER:
                items += ((pid, number) for number in subscription_identifiers)
            elif (value := given[name]) is not None:
                items.append((pid, value))
        return cls.of(items)

    def __bool__(self) -> bool:
        return bool(self.raw)

    def __add__(self, other: Properties) -> Properties:
        """Both lists, one after the other (e.g. forwarded ones plus a Subscription Id)."""
        return Properties(self.raw + other.raw, self.mask | other.mask)

    def __iter__(self) -> Iterator[tuple[PropertyId, PropertyValue]]:
        """Every property, decoded, in wire order."""
        raw = self.raw
        for at in _offsets(raw)[:-1]:
            yield PropertyId(raw[at]), _read_value(_TYPE_OF[raw[at]], raw, at + 1, "")[0]

    def __repr__(self) -> str:
        shown = ", ".join(f"{pid.name.lower()}={value!r}" for pid, value in self)
        return f"Properties({shown})"

    def get_all(self, pid: PropertyId) -> tuple[PropertyValue, ...]:
        """Every value of `pid`, in order; the others are skipped, not decoded."""
        if not self.mask >> pid & 1:
            return ()
        raw, kind = self.raw, _TYPE_OF[pid]
        starts = _offsets(raw)[:-1]
        return tuple(_read_value(kind, raw, at + 1, "")[0] for at in starts if raw[at] == pid)

    def get(self, pid: PropertyId) -> PropertyValue | None:
        """The first value of `pid`, or None; the others are skipped, not decoded."""
        if self.mask >> pid & 1:
            raw = self.raw
            at = _offsets(raw, until=pid)[-1]
            if at < len(raw):
                return _read_value(_TYPE_OF[pid], raw, at + 1, "")[0]
        return None

    def without(self, *pids: PropertyId) -> Properties:
        """The same bytes minus every property in `pids` (e.g. a Topic Alias before forwarding)."""
        drop = 0
        for pid in pids:
            drop |= 1 << pid
        if not self.mask & drop:
            return self
        raw = self.raw
        kept = [raw[a:b] for a, b in pairwise(_offsets(raw)) if not drop >> raw[a] & 1]
        return Properties(b"".join(kept), self.mask & ~drop)

    def with_expiry(self, seconds: int) -> Properties:
        """The same with a Message Expiry Interval of `seconds` (what is left of it, when a
        message is sent on: MQTT 5.0 §3.3.2.3.3)."""
        kept = self.without(_P.MESSAGE_EXPIRY_INTERVAL)
        return kept + Properties.build(message_expiry_interval=seconds)

    user_properties = _All(_P.USER_PROPERTY, tuple)  # in order, duplicates kept (§3.3.2.3.7)
    subscription_identifiers = _All(_P.SUBSCRIPTION_IDENTIFIER, int)
    payload_format_indicator = _One(_P.PAYLOAD_FORMAT_INDICATOR, int)
    message_expiry_interval = _One(_P.MESSAGE_EXPIRY_INTERVAL, int)
    content_type = _One(_P.CONTENT_TYPE, str)
    response_topic = _One(_P.RESPONSE_TOPIC, str)
    correlation_data = _One(_P.CORRELATION_DATA, bytes)
    session_expiry_interval = _One(_P.SESSION_EXPIRY_INTERVAL, int)
    assigned_client_identifier = _One(_P.ASSIGNED_CLIENT_IDENTIFIER, str)
    server_keep_alive = _One(_P.SERVER_KEEP_ALIVE, int)
    authentication_method = _One(_P.AUTHENTICATION_METHOD, str)
    authentication_data = _One(_P.AUTHENTICATION_DATA, bytes)
    request_problem_information = _One(_P.REQUEST_PROBLEM_INFORMATION, int)
    will_delay_interval = _One(_P.WILL_DELAY_INTERVAL, int)
    request_response_information = _One(_P.REQUEST_RESPONSE_INFORMATION, int)
    response_information = _One(_P.RESPONSE_INFORMATION, str)
    server_reference = _One(_P.SERVER_REFERENCE, str)
    reason_string = _One(_P.REASON_STRING, str)
    receive_maximum = _One(_P.RECEIVE_MAXIMUM, int)
    topic_alias_maximum = _One(_P.TOPIC_ALIAS_MAXIMUM, int)
    topic_alias = _One(_P.TOPIC_ALIAS, int)
    maximum_qos = _One(_P.MAXIMUM_QOS, int)
    retain_available = _One(_P.RETAIN_AVAILABLE, int)
    maximum_packet_size = _One(_P.MAXIMUM_PACKET_SIZE, int)
    wildcard_subscription_available = _One(_P.WILDCARD_SUBSCRIPTION_AVAILABLE, int)
    subscription_identifier_available = _One(_P.SUBSCRIPTION_IDENTIFIER_AVAILABLE, int)
    shared_subscription_available = _One(_P.SHARED_SUBSCRIPTION_AVAILABLE, int)


EMPTY: Final = Properties(b"", 0)
