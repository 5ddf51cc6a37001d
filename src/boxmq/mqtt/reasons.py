"""Reason codes: every MQTT 5.0 code, the 3.1.1 codes they map to, and the ONE error map.

Invariants:
- Packets carry a `ReasonCode` in both versions. The codec maps it to the 3.1.1 CONNACK return
  code or SUBACK code on the way out, and back on the way in (the tables below); the other
  3.1.1 acknowledgements have no reason code at all.
- `reason_for` is the only place an error becomes a reason code (STYLE rule 6): the most
  specific class in the exception's MRO that the table knows wins.
- `ALLOWED_REASONS` lists, per packet type, the codes MQTT 5.0 defines for it (§2.4); the
  codec refuses any other as a malformed packet, and `reason_in` gives an acknowledgement
  only those (MQTT-3.4.2-1, MQTT-3.5.2-1, MQTT-3.11.3-2).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Final

from boxmq.errors import (
    MalformedPacket,
    MessageTooLarge,
    MetadataTooLong,
    NotAllowed,
    PacketTooLarge,
    ProtocolViolation,
    ResourceConstraint,
    StoreFailed,
    StoreFull,
)
from boxmq.mqtt.errors import (
    ClientIdNotValid,
    ProtocolError,
    ReceiveMaximumExceeded,
    TopicAliasInvalid,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from boxmq.mqtt.framing import PacketType

__all__ = [
    "ALLOWED_REASONS",
    "ConnectReturnCode",
    "ReasonCode",
    "connect_return_code",
    "reason_for",
    "reason_from_connect_return_code",
    "reason_from_v311_suback",
    "reason_in",
    "reason_of",
    "v311_suback_code",
]


class ReasonCode(IntEnum):
    """Every MQTT 5.0 Reason Code (§2.4). Some values have two names, as in the spec's table."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00  # DISCONNECT's name for 0x00
    GRANTED_QOS_0 = 0x00  # SUBACK's name for 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class ConnectReturnCode(IntEnum):
    """The 3.1.1 CONNACK return codes (3.1.1 §3.2.2.3)."""

    ACCEPTED = 0x00
    UNACCEPTABLE_PROTOCOL_VERSION = 0x01
    IDENTIFIER_REJECTED = 0x02
    SERVER_UNAVAILABLE = 0x03
    BAD_USER_NAME_OR_PASSWORD = 0x04
    NOT_AUTHORIZED = 0x05


_R = ReasonCode

# MQTT 5.0 §3.2.2.2, §3.4.2.1, §3.5.2.1, §3.6.2.1, §3.7.2.1, §3.9.3, §3.11.3, §3.14.2.1, §3.15.2.1
_PUBACK: Final = frozenset(
    {
        _R.SUCCESS,
        _R.NO_MATCHING_SUBSCRIBERS,
        _R.UNSPECIFIED_ERROR,
        _R.IMPLEMENTATION_SPECIFIC_ERROR,
        _R.NOT_AUTHORIZED,
        _R.TOPIC_NAME_INVALID,
        _R.PACKET_IDENTIFIER_IN_USE,
        _R.QUOTA_EXCEEDED,
        _R.PAYLOAD_FORMAT_INVALID,
    }
)
_PUBREL: Final = frozenset({_R.SUCCESS, _R.PACKET_IDENTIFIER_NOT_FOUND})
ALLOWED_REASONS: Final[Mapping[PacketType, frozenset[ReasonCode]]] = {
    PacketType.CONNACK: frozenset(
        {_R.SUCCESS, *(c for c in _R if 0x80 <= c <= 0x8A)}
        | {
            _R.BAD_AUTHENTICATION_METHOD,
            _R.TOPIC_NAME_INVALID,
            _R.PACKET_TOO_LARGE,
            _R.QUOTA_EXCEEDED,
            _R.PAYLOAD_FORMAT_INVALID,
            _R.RETAIN_NOT_SUPPORTED,
            _R.QOS_NOT_SUPPORTED,
            _R.USE_ANOTHER_SERVER,
            _R.SERVER_MOVED,
            _R.CONNECTION_RATE_EXCEEDED,
        }
    ),
    PacketType.PUBACK: _PUBACK,
    PacketType.PUBREC: _PUBACK,
    PacketType.PUBREL: _PUBREL,
    PacketType.PUBCOMP: _PUBREL,
    PacketType.SUBACK: frozenset(
        {
            _R.GRANTED_QOS_0,
            _R.GRANTED_QOS_1,
            _R.GRANTED_QOS_2,
            _R.UNSPECIFIED_ERROR,
            _R.IMPLEMENTATION_SPECIFIC_ERROR,
            _R.NOT_AUTHORIZED,
            _R.TOPIC_FILTER_INVALID,
            _R.PACKET_IDENTIFIER_IN_USE,
            _R.QUOTA_EXCEEDED,
            _R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
            _R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
            _R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
        }
    ),
    PacketType.UNSUBACK: frozenset(
        {
            _R.SUCCESS,
            _R.NO_SUBSCRIPTION_EXISTED,
            _R.UNSPECIFIED_ERROR,
            _R.IMPLEMENTATION_SPECIFIC_ERROR,
            _R.NOT_AUTHORIZED,
            _R.TOPIC_FILTER_INVALID,
            _R.PACKET_IDENTIFIER_IN_USE,
        }
    ),
    PacketType.DISCONNECT: frozenset(
        {_R.NORMAL_DISCONNECTION, _R.DISCONNECT_WITH_WILL_MESSAGE}
        | (
            {c for c in _R if c >= 0x80}
            - {
                _R.UNSUPPORTED_PROTOCOL_VERSION,
                _R.CLIENT_IDENTIFIER_NOT_VALID,
                _R.BAD_USER_NAME_OR_PASSWORD,
                _R.SERVER_UNAVAILABLE,
                _R.BANNED,
                _R.BAD_AUTHENTICATION_METHOD,
                _R.PACKET_IDENTIFIER_IN_USE,
                _R.PACKET_IDENTIFIER_NOT_FOUND,
            }
        )
    ),
    PacketType.AUTH: frozenset({_R.SUCCESS, _R.CONTINUE_AUTHENTICATION, _R.RE_AUTHENTICATE}),
}

# What a v5 CONNACK reason becomes in 3.1.1 (3.1.1 §3.2.2.3); anything else is "unavailable".
_CONNECT_RETURN: Final[Mapping[ReasonCode, ConnectReturnCode]] = {
    _R.SUCCESS: ConnectReturnCode.ACCEPTED,
    _R.UNSUPPORTED_PROTOCOL_VERSION: ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION,
    _R.CLIENT_IDENTIFIER_NOT_VALID: ConnectReturnCode.IDENTIFIER_REJECTED,
    _R.SERVER_UNAVAILABLE: ConnectReturnCode.SERVER_UNAVAILABLE,
    _R.BAD_USER_NAME_OR_PASSWORD: ConnectReturnCode.BAD_USER_NAME_OR_PASSWORD,
    _R.BAD_AUTHENTICATION_METHOD: ConnectReturnCode.BAD_USER_NAME_OR_PASSWORD,
    _R.NOT_AUTHORIZED: ConnectReturnCode.NOT_AUTHORIZED,
    _R.BANNED: ConnectReturnCode.NOT_AUTHORIZED,
}
_FROM_CONNECT_RETURN: Final[Mapping[int, ReasonCode]] = {
    ConnectReturnCode.ACCEPTED: _R.SUCCESS,
    ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION: _R.UNSUPPORTED_PROTOCOL_VERSION,
    ConnectReturnCode.IDENTIFIER_REJECTED: _R.CLIENT_IDENTIFIER_NOT_VALID,
    ConnectReturnCode.SERVER_UNAVAILABLE: _R.SERVER_UNAVAILABLE,
    ConnectReturnCode.BAD_USER_NAME_OR_PASSWORD: _R.BAD_USER_NAME_OR_PASSWORD,
    ConnectReturnCode.NOT_AUTHORIZED: _R.NOT_AUTHORIZED,
}
_REASON_OF: Final[list[ReasonCode | None]] = [None] * 256  # by value: no enum call per packet
for _code in ReasonCode:
    _REASON_OF[_code] = _code
_V311_SUBACK_FAILURE: Final = 0x80  # 3.1.1 §3.9.3: the only failure code


def reason_of(code: int, kind: PacketType) -> ReasonCode:
    """The reason code byte of a `kind` packet; MalformedPacket if MQTT 5.0 §2.4 has no such."""
    reason = _REASON_OF[code]
    if reason is None or reason not in ALLOWED_REASONS[kind]:
        raise MalformedPacket(f"{kind.name}: {code:#04x} is not one of its reason codes (§2.4)")
    return reason


def connect_return_code(reason: ReasonCode) -> ConnectReturnCode:
    """The 3.1.1 CONNACK return code for a v5 CONNACK reason."""
    return _CONNECT_RETURN.get(reason, ConnectReturnCode.SERVER_UNAVAILABLE)


def reason_from_connect_return_code(code: int) -> ReasonCode:
    """The v5 reason a 3.1.1 CONNACK return code stands for; MalformedPacket for 6-255."""
    try:
        return _FROM_CONNECT_RETURN[code]
    except KeyError:
        raise MalformedPacket(f"CONNACK: 3.1.1 return code {code:#04x} is reserved") from None


def v311_suback_code(reason: ReasonCode) -> int:
    """A granted QoS stays itself; every failure becomes 0x80 (3.1.1 §3.9.3)."""
    return int(reason) if reason <= _R.GRANTED_QOS_2 else _V311_SUBACK_FAILURE


def reason_from_v311_suback(code: int) -> ReasonCode:
    if code <= _R.GRANTED_QOS_2:
        return ReasonCode(code)
    if code == _V311_SUBACK_FAILURE:
        return _R.UNSPECIFIED_ERROR
    raise MalformedPacket(f"SUBACK: 3.1.1 return code {code:#04x} is not 0, 1, 2 or 0x80")


# The ONE map from errors to what the server sends (DISCONNECT in v5, CONNACK for CONNECT).
_REASONS: Final[Mapping[type[BaseException], ReasonCode]] = {
    MalformedPacket: _R.MALFORMED_PACKET,
    ProtocolError: _R.PROTOCOL_ERROR,
    TopicNameInvalid: _R.TOPIC_NAME_INVALID,
    TopicAliasInvalid: _R.TOPIC_ALIAS_INVALID,
    ReceiveMaximumExceeded: _R.RECEIVE_MAXIMUM_EXCEEDED,
    UnsupportedProtocolVersion: _R.UNSUPPORTED_PROTOCOL_VERSION,
    ClientIdNotValid: _R.CLIENT_IDENTIFIER_NOT_VALID,
    PacketTooLarge: _R.PACKET_TOO_LARGE,
    ProtocolViolation: _R.PROTOCOL_ERROR,
    MessageTooLarge: _R.PACKET_TOO_LARGE,
    # A topic too long for a stored message's name (its properties go to a side file, or are
    # left out, before this is raised: stored.store_with_properties; a client id is hashed
    # to a short name): well-formed, not accepted by this server, MQTT 5.0 §3.4.2.1's 0x90,
    # not 0x80 Unspecified error, which told a publisher nothing it could change.
    MetadataTooLong: _R.TOPIC_NAME_INVALID,
    NotAllowed: _R.NOT_AUTHORIZED,
    ResourceConstraint: _R.QUOTA_EXCEEDED,
    StoreFull: _R.QUOTA_EXCEEDED,  # ENOSPC, EDQUOT: no room now, perhaps later
    StoreFailed: _R.UNSPECIFIED_ERROR,  # EIO, EROFS, EMFILE: nothing more precise to say
}


def reason_for(error: BaseException) -> ReasonCode:
    """The reason code for an error: the most specific mapped class in its MRO wins."""
    for cls in type(error).__mro__:
        if cls in _REASONS:
            return _REASONS[cls]
    return _R.UNSPECIFIED_ERROR


# What an acknowledgement says when its table lacks the code `reason_for` gives: a message over
# a size cap exceeds "an implementation or administrative imposed limit" (0x97, §3.4.2.1);
# DISCONNECT's 0x95 Packet too large is no PUBACK or PUBREC code.
_NEAREST: Final[Mapping[ReasonCode, ReasonCode]] = {_R.PACKET_TOO_LARGE: _R.QUOTA_EXCEEDED}


def reason_in(kind: PacketType, error: BaseException) -> ReasonCode:
    """`reason_for(error)` as a `kind` packet may carry it: one of its own Reason Codes
    (`ALLOWED_REASONS`; MQTT-3.4.2-1, MQTT-3.5.2-1, MQTT-3.11.3-2), the nearest (`_NEAREST`)
    or else 0x80 Unspecified error, which every acknowledgement has. A client reading a code
    its packet has no such treats the packet as malformed, as boxmq's own codec does."""
    allowed = ALLOWED_REASONS[kind]
    reason = reason_for(error)
    if reason in allowed:
        return reason
    nearest = _NEAREST.get(reason, _R.UNSPECIFIED_ERROR)
    return nearest if nearest in allowed else _R.UNSPECIFIED_ERROR
