"""The codec's refinements of `boxmq.errors.MalformedPacket`, one per answer a server must give.

Invariants:
- Everything the codec raises is a `MalformedPacket` or a `PacketTooLarge`, so a caller catches
  `ProtocolViolation` once. The subclasses only say *which* answer MQTT 5.0 wants
  (`reasons.reason_for` is the one table from class to reason code); none adds behaviour.
- `MalformedPacket` itself means the bytes cannot be parsed (MQTT 5.0 §4.13.1, reason 0x81).
  `ProtocolError` means they parse but break a rule (§4.13.1, reason 0x82).
"""

from __future__ import annotations

from boxmq.errors import MalformedPacket

__all__ = [
    "ClientIdNotValid",
    "ProtocolError",
    "ReceiveMaximumExceeded",
    "TopicAliasInvalid",
    "TopicNameInvalid",
    "UnsupportedProtocolVersion",
]


class ProtocolError(MalformedPacket):
    """A packet that parses but breaks a rule, e.g. a duplicate property (MQTT 5.0 §2.2.2.2)."""


class ReceiveMaximumExceeded(ProtocolError):
    """More QoS 1/2 PUBLISHes unanswered than our Receive Maximum (MQTT 5.0 §3.3.4, 0x93)."""


class TopicNameInvalid(ProtocolError):
    """A PUBLISH topic name with '+' or '#' in it (MQTT 5.0 §3.3.2.1, reason 0x90)."""


class TopicAliasInvalid(ProtocolError):
    """A Topic Alias of 0 (MQTT 5.0 §3.3.2.3.4, reason 0x94)."""


class UnsupportedProtocolVersion(MalformedPacket):
    """A CONNECT for a protocol level other than 4 (3.1.1) or 5 (MQTT 5.0 §3.1.2.2).

    The server answers with CONNACK 0x84 (v5) or return code 0x01 (3.1.1 §3.1.2.2).
    """

    def __init__(self, level: int, name: str = "MQTT") -> None:
        self.level = level
        hint = ""
        if name != "MQTT":  # "MQIsdp": MQTT 3.1, whatever the level says
            what = f"MQTT 3.1 (protocol name {name!r}, level {level})"
        elif level & 0x80 and (level & 0x7F) in (3, 4, 5):
            # a level we know with the top bit set: a mosquitto bridge announcing itself
            what = f"protocol level {level} ({level & 0x7F} with a mosquitto bridge's bit)"
            hint = ": give the bridge bridge_protocol_version mqttv50, or try_private false"
        else:
            what = f"protocol level {level}"
        super().__init__(
            f"CONNECT: {what} is not supported (only 3.1.1, level 4, and 5.0, level 5){hint}"
        )


class ClientIdNotValid(MalformedPacket):
    """A 3.1.1 CONNECT with an empty client id and CleanSession 0 (3.1.1 §3.1.3.1).

    The server answers with return code 0x02 (Identifier rejected), v5 reason 0x85.
    """
