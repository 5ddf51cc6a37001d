"""MQTT messages and the files they become: names, properties, and the PUBLISH read back.

Invariants:
- A client id becomes a subscriber name that the store accepts ('%' and '/' escaped), and the
  same client id always becomes the same name (a session found again after a restart).
- The v5 properties of a stored message are kept as their wire bytes, URL-safe base64 without
  padding, in the reserved property V5_PROPERTIES; what is not forwarded (Topic Alias,
  Subscription Identifier) is never stored.
- A PUBLISH read back carries what is left of its Message Expiry Interval (§3.3.2.3.3).
"""

from __future__ import annotations

import base64
import math
from typing import Final

from boxmq.client.message import Message
from boxmq.client.topics import Publication
from boxmq.errors import InvalidArgument
from boxmq.model import QOS, RESERVED_PREFIX, Envelope
from boxmq.mqtt.packets import Publish, new_publish
from boxmq.mqtt.properties import EMPTY, Properties, PropertyId, subscription_identifier
from boxmq.mqtt.session import SubscriptionOptions
from boxmq.store.names import check_consumer_name

__all__ = [
    "NOT_FORWARDED",
    "V5_PROPERTIES",
    "consumer_name",
    "exactly_once_source",
    "kept_properties",
    "publication_of",
    "publish_of",
    "retained_publish",
    "storable",
]

V5_PROPERTIES: Final = RESERVED_PREFIX + "v5"
NOT_FORWARDED: Final = (PropertyId.TOPIC_ALIAS, PropertyId.SUBSCRIPTION_IDENTIFIER)


def consumer_name(client_id: str) -> str:
    """A client id as a subscriber name on disk ('/' cannot be in one; '%' escapes)."""
    return client_id.replace("%", "%25").replace("/", "%2F")


def storable(client_id: str) -> bool:
    """Whether the client id fits in a lock suffix once escaped (else: CONNACK 0x85)."""
    try:
        check_consumer_name(consumer_name(client_id))
    except InvalidArgument:
        return False
    return True


def exactly_once_source(client_id: str) -> str:
    """Who sends a QoS 2 message to the exactly-once intake: the MQTT client."""
    return f"mqtt:{client_id}"


def kept_properties(packet: Publish) -> dict[str, str]:
    """The envelope properties that carry a PUBLISH's v5 properties (none if it has none)."""
    props = packet.properties.without(*NOT_FORWARDED)
    return {V5_PROPERTIES: _pack(props)} if props else {}


def publication_of(client_id: str, packet: Publish) -> Publication:
    """A PUBLISH as one message of `Topics.publish_many`."""
    return Publication(
        packet.topic,
        packet.payload,
        packet.qos,
        properties=kept_properties(packet) or None,
        expires_in=packet.properties.message_expiry_interval or None,
        source=consumer_name(client_id),
    )


def publish_of(message: Message, options: SubscriptionOptions, now: float) -> Publish:
    """The PUBLISH for a message taken from a dropbox (DUP once it was delivered before)."""
    props = _remaining_expiry(_properties_of(message.envelope), message.envelope, now)
    if options.identifier:
        props = props + subscription_identifier(options.identifier)
    return new_publish(
        message.topic or "",
        message.body,
        min(message.qos, options.qos),
        message.retained or (options.retain_as_published and message.published_retained),
        message.delivery_count > 1,
        None,
        props,
    )


def retained_publish(
    envelope: Envelope, body: bytes, options: SubscriptionOptions, now: float
) -> Publish:
    """The PUBLISH for a retained message sent on a new subscription (RETAIN set)."""
    stored = envelope.property_value(QOS)
    qos = stored if isinstance(stored, int) and not isinstance(stored, bool) else 1
    props = _remaining_expiry(_properties_of(envelope), envelope, now)
    if options.identifier:
        props = props + subscription_identifier(options.identifier)
    return new_publish(envelope.topic or "", body, min(qos, options.qos), True, False, None, props)


def _properties_of(envelope: Envelope) -> Properties:
    raw = envelope.property_value(V5_PROPERTIES)
    if not isinstance(raw, str):
        return EMPTY
    try:
        return Properties(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except ValueError:
        return EMPTY


def _pack(props: Properties) -> str:
    """The property bytes as file-name text: URL-safe base64 without its padding."""
    return base64.urlsafe_b64encode(props.raw).decode().rstrip("=")


def _remaining_expiry(props: Properties, envelope: Envelope, now: float) -> Properties:
    if not envelope.expiration:
        return props
    return props.with_expiry(max(1, math.ceil(envelope.expiration / 1000 - now)))
