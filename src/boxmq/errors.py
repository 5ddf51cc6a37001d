"""One error tree for all of boxmq, in protocol-neutral words.

Front-ends map these classes to their own vocabulary once (MQTT reason codes, XMPP stanza
conditions, CLI exit messages); nothing here knows those vocabularies.
"""

from __future__ import annotations

__all__ = [
    "BoxMQError",
    "Closed",
    "Conflict",
    "Forbidden",
    "InvalidArgument",
    "InvalidName",
    "InvalidTopic",
    "ItemNotFound",
    "LockError",
    "MalformedName",
    "MalformedPacket",
    "MessageTooLarge",
    "MetadataTooLong",
    "NotAllowed",
    "PacketTooLarge",
    "ProtocolViolation",
    "QueueNotFound",
    "ResourceConstraint",
    "UnexpectedRequest",
]


class BoxMQError(Exception):
    """The root of every error boxmq raises on purpose."""


class InvalidArgument(BoxMQError, ValueError):
    """The caller passed something boxmq cannot use; the message says what to fix."""


class InvalidName(InvalidArgument):
    """A destination, consumer or property name that cannot be stored safely."""


class MetadataTooLong(InvalidArgument):
    """The message's metadata does not fit in a file name (see docs/file-format.md)."""


class InvalidTopic(InvalidArgument):
    """A topic name or topic filter that MQTT 5.0 §4.7 does not allow."""


class MessageTooLarge(InvalidArgument):
    """A body over the configured size limit."""


class ResourceConstraint(BoxMQError):
    """A limit on pending state was reached (QoS document, memory attacks); try again later."""


class NotAllowed(BoxMQError):
    """The source may not do this (e.g. an untrusted source asking for exactly-once)."""


class ProtocolViolation(BoxMQError):
    """A peer did something its state does not allow (an acknowledgement out of turn)."""


class MalformedPacket(ProtocolViolation):
    """Bytes from a peer that do not decode (a bad length, bad UTF-8, a reserved bit set)."""


class PacketTooLarge(ProtocolViolation):
    """A packet over the agreed maximum size."""


class MalformedName(BoxMQError):
    """A file name that is not in the DropboxMQ encoding (raised by the strict decoder only)."""


class QueueNotFound(BoxMQError):
    """The destination does not exist under the root."""


class Closed(BoxMQError):
    """The consumer, queue or box was closed."""


class LockError(BoxMQError):
    """A lock operation (ack, unlock, reject, extend) that XEP-0254 §2.3/§2.4 refuses."""

    def __init__(self, message_id: str, detail: str = "") -> None:
        self.message_id = message_id
        super().__init__(f"{message_id}: {detail}" if detail else message_id)


class ItemNotFound(LockError):
    """No such message in the queue (XEP-0254: item-not-found)."""


class Forbidden(LockError):
    """The requester never received this message (XEP-0254: forbidden)."""


class Conflict(LockError):
    """The message is locked by another consumer (XEP-0254: conflict)."""


class UnexpectedRequest(LockError):
    """The requester held this message, but its lock is gone (XEP-0254: unexpected-request)."""
