"""One frozen value per MQTT control packet, the same for 3.1.1 and 5.0.

Invariants:
- Packets are plain values: `codec.decode` builds them only from bytes it has validated, and
  `codec.encode` writes them for either version. A field 3.1.1 cannot carry (properties, most
  reason codes) is left out when encoding for 3.1.1 and has its default after decoding one.
- v5 properties stay bytes (`Properties`), so forwarding a PUBLISH copies no property values.
- Names are the MQTT 5.0 ones: `clean_start` is 3.1.1's CleanSession, `reason` is 3.1.1's
  CONNACK return code or SUBACK return code mapped onto `ReasonCode` (see reasons.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import TypeVar

from boxmq.mqtt.properties import EMPTY, Properties
from boxmq.mqtt.reasons import ReasonCode

__all__ = [
    "Auth",
    "Connack",
    "Connect",
    "Disconnect",
    "Incoming",
    "Packet",
    "Pingreq",
    "Pingresp",
    "ProtocolVersion",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "RetainHandling",
    "ShortAck",
    "Suback",
    "Subscribe",
    "Subscription",
    "Unsuback",
    "Unsubscribe",
    "Will",
    "ack_builder",
    "held_size",
    "new_publish",
    "numbered",
    "with_expiry",
]


class ProtocolVersion(IntEnum):
    """The CONNECT packet's Protocol Level (MQTT 5.0 §3.1.2.2)."""

    V311 = 4
    V5 = 5


class RetainHandling(IntEnum):
    """Subscription option bits 4-5 (MQTT 5.0 §3.8.3.1); 3.1.1 always sends retained messages."""

    SEND_ON_SUBSCRIBE = 0
    SEND_IF_NEW_SUBSCRIPTION = 1
    DO_NOT_SEND = 2


@dataclass(frozen=True, slots=True)
class Will:
    """The Will Message a CONNECT asks for (MQTT 5.0 §3.1.2.5, §3.1.3.2-§3.1.3.4)."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    properties: Properties = EMPTY  # Will Properties, incl. Will Delay Interval (v5)


@dataclass(frozen=True, slots=True)
class Connect:
    """MQTT 5.0 §3.1. `version` comes from the packet itself: it decides the connection's."""

    client_id: str
    version: ProtocolVersion = ProtocolVersion.V5
    clean_start: bool = True
    keep_alive: int = 0  # seconds; 0 turns keep-alive off (§3.1.2.10)
    username: str | None = None
    password: bytes | None = None  # binary data, not text (§3.1.3.6)
    will: Will | None = None
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Connack:
    """MQTT 5.0 §3.2."""

    session_present: bool = False
    reason: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Publish:
    """MQTT 5.0 §3.3. `packet_id` is None at QoS 0 and 1-65535 otherwise."""

    topic: str  # "" only in v5 with a Topic Alias property (§3.3.2.3.4)
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = EMPTY


def held_size(publish: Publish) -> int:
    """What a PUBLISH held in memory weighs against the limits in bytes (`max_queued_bytes`,
    the exactly-once ones): its payload, and its topic and properties too, which a client may
    fill up to the packet size with an empty payload (8 User Properties of 60 KB each: 300
    such messages queued for a subscriber under max_queued_bytes = 16 MiB held 156 MB)."""
    return len(publish.payload) + len(publish.topic) + len(publish.properties.raw)


@dataclass(frozen=True, slots=True)
class Puback:
    """MQTT 5.0 §3.4: the answer to a QoS 1 PUBLISH."""

    packet_id: int
    reason: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Pubrec:
    """MQTT 5.0 §3.5: QoS 2, part 1."""

    packet_id: int
    reason: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Pubrel:
    """MQTT 5.0 §3.6: QoS 2, part 2."""

    packet_id: int
    reason: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Pubcomp:
    """MQTT 5.0 §3.7: QoS 2, part 3."""

    packet_id: int
    reason: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE and its options (MQTT 5.0 §3.8.3.1).

    The filter's syntax ('+', '#', `$share/`) is not checked by the codec: a v5 server answers
    a bad one with SUBACK 0x8F rather than by closing, so that is the session's call.
    """

    topic_filter: str
    qos: int = 0  # the maximum QoS the subscriber accepts
    no_local: bool = False  # v5 only
    retain_as_published: bool = False  # v5 only
    retain_handling: RetainHandling = RetainHandling.SEND_ON_SUBSCRIBE  # v5 only


@dataclass(frozen=True, slots=True)
class Subscribe:
    """MQTT 5.0 §3.8. Never empty (§3.8.3)."""

    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = EMPTY  # at most one Subscription Identifier


@dataclass(frozen=True, slots=True)
class Suback:
    """MQTT 5.0 §3.9: one reason per subscription, in order."""

    packet_id: int
    reasons: tuple[ReasonCode, ...]
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """MQTT 5.0 §3.10. Never empty (§3.10.3)."""

    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Unsuback:
    """MQTT 5.0 §3.11: one reason per filter in v5; 3.1.1 has none, so `reasons` is ()."""

    packet_id: int
    reasons: tuple[ReasonCode, ...] = ()
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Pingreq:
    """MQTT 5.0 §3.12."""


@dataclass(frozen=True, slots=True)
class Pingresp:
    """MQTT 5.0 §3.13."""


@dataclass(frozen=True, slots=True)
class Disconnect:
    """MQTT 5.0 §3.14. In 3.1.1 only a client sends it, and it carries nothing."""

    reason: ReasonCode = ReasonCode.NORMAL_DISCONNECTION
    properties: Properties = EMPTY


@dataclass(frozen=True, slots=True)
class Auth:
    """MQTT 5.0 §3.15 (v5 only): enhanced authentication."""

    reason: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY


Packet = (
    Connect
    | Connack
    | Publish
    | Puback
    | Pubrec
    | Pubrel
    | Pubcomp
    | Subscribe
    | Suback
    | Unsubscribe
    | Unsuback
    | Pingreq
    | Pingresp
    | Disconnect
    | Auth
)
# A positive PUBACK, PUBREC, PUBREL or PUBCOMP without properties as a connection reads it
# (`Connection.packets`): its kind and packet id, the packet not built. Building one took
# about 3,000 instructions (`ack_builder`), and a QoS 2 message brings three in.
ShortAck = tuple[type[Puback] | type[Pubrec] | type[Pubrel] | type[Pubcomp], int]
Incoming = Packet | ShortAck  # what a connection's read gives the broker


# Building a frozen dataclass calls object.__setattr__ once per field; setting the slots through
# their descriptors builds the same value ~35% faster, and the codec builds a PUBLISH per message.
_PUBLISH_FIELDS = ("topic", "payload", "qos", "retain", "dup", "packet_id", "properties")
if tuple(field.name for field in fields(Publish)) != _PUBLISH_FIELDS:
    raise ImportError("Publish changed: update _PUBLISH_FIELDS and new_publish")
_set_topic, _set_payload, _set_qos, _set_retain, _set_dup, _set_packet_id, _set_properties = (
    Publish.__dict__[name].__set__ for name in _PUBLISH_FIELDS
)


def new_publish(
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int | None,
    properties: Properties,
) -> Publish:
    """`Publish(...)` for the hot path: the same value, built faster; every field, in order."""
    packet: Publish = object.__new__(Publish)
    _set_topic(packet, topic)
    _set_payload(packet, payload)
    _set_qos(packet, qos)
    _set_retain(packet, retain)
    _set_dup(packet, dup)
    _set_packet_id(packet, packet_id)
    _set_properties(packet, properties)
    return packet


def with_expiry(publish: Publish, left: int) -> Publish:
    """`publish` with what is left of its Message Expiry Interval (MQTT-3.3.2-6)."""
    return new_publish(
        publish.topic,
        publish.payload,
        publish.qos,
        publish.retain,
        publish.dup,
        publish.packet_id,
        publish.properties.with_expiry(left),
    )


def numbered(publish: Publish, packet_id: int | None, *, dup: bool) -> Publish:
    """`publish` as sent under `packet_id`, with `dup`."""
    return new_publish(
        publish.topic,
        publish.payload,
        publish.qos,
        publish.retain,
        dup,
        packet_id,
        publish.properties,
    )


_Ack = TypeVar("_Ack", Puback, Pubrec, Pubrel, Pubcomp)
_ACK_FIELDS = ("packet_id", "reason", "properties")
_SUCCESS = ReasonCode.SUCCESS


def ack_builder(kind: type[_Ack]) -> Callable[[int], _Ack]:
    """A function that builds `kind(packet_id)` (a positive acknowledgement without properties)
    the way `new_publish` builds a PUBLISH, for `codec.decode`: a connection reads the common
    acknowledgement as a `ShortAck` and builds none."""
    if tuple(field.name for field in fields(kind)) != _ACK_FIELDS:
        raise ImportError(f"{kind.__name__} changed: update _ACK_FIELDS and ack_builder")
    set_packet_id, set_reason, set_properties = (kind.__dict__[n].__set__ for n in _ACK_FIELDS)

    def new_ack(packet_id: int) -> _Ack:
        packet: _Ack = object.__new__(kind)
        set_packet_id(packet, packet_id)
        set_reason(packet, _SUCCESS)
        set_properties(packet, EMPTY)
        return packet

    return new_ack
