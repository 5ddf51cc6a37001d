"""MQTT 3.1.1 and 5.0, server side: the sans-IO codec (framing, packets, properties, reasons).

reader = FrameReader(max_packet_size=limit)
reader.receive(data)
for frame in reader.frames():
    packet = decode(frame, version)     # CONNECT decides `version`: Connect.version
out = encode(Puback(packet_id), version)

Errors: everything the codec refuses is a `boxmq.errors.MalformedPacket` or `PacketTooLarge`
(both `ProtocolViolation`); `reason_for(error)` says which reason code to answer with.
"""

from __future__ import annotations

from boxmq.mqtt.codec import connect_version, decode, encode
from boxmq.mqtt.errors import (
    ClientIdNotValid,
    ProtocolError,
    TopicAliasInvalid,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from boxmq.mqtt.framing import Frame, FrameReader, PacketType
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
)
from boxmq.mqtt.properties import Properties, PropertyId, PropertyValue, subscription_identifier
from boxmq.mqtt.reasons import ConnectReturnCode, ReasonCode, reason_for

__all__ = [
    "Auth",
    "ClientIdNotValid",
    "Connack",
    "Connect",
    "ConnectReturnCode",
    "Disconnect",
    "Frame",
    "FrameReader",
    "Packet",
    "PacketType",
    "Pingreq",
    "Pingresp",
    "Properties",
    "PropertyId",
    "PropertyValue",
    "ProtocolError",
    "ProtocolVersion",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "ReasonCode",
    "RetainHandling",
    "Suback",
    "Subscribe",
    "Subscription",
    "TopicAliasInvalid",
    "TopicNameInvalid",
    "Unsuback",
    "Unsubscribe",
    "UnsupportedProtocolVersion",
    "Will",
    "connect_version",
    "decode",
    "encode",
    "reason_for",
    "subscription_identifier",
]
