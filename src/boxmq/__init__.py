"""boxmq: a durable message broker whose state is a directory of plain files.

import boxmq
box = boxmq.open("./data")
box.queue("jobs").put(b"payload")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from boxmq.client import Box, Consumer, Message, Outgoing, Peeked, Queue, QueueCounts, open
from boxmq.clock import Clock, ManualClock, SystemClock
from boxmq.errors import (
    BoxMQError,
    Closed,
    Conflict,
    Forbidden,
    InvalidArgument,
    InvalidName,
    InvalidTopic,
    ItemNotFound,
    LockError,
    MalformedName,
    MessageTooLarge,
    MetadataTooLong,
    NotAllowed,
    QueueNotFound,
    ResourceConstraint,
    UnexpectedRequest,
)
from boxmq.model import Envelope, MessageClass, Property, PropertyType
from boxmq.store.layout import State

if TYPE_CHECKING:
    from boxmq.client.subscriber import Subscriber

__version__ = "0.1.0"

__all__ = [
    "Box",
    "BoxMQError",
    "Clock",
    "Closed",
    "Conflict",
    "Consumer",
    "Envelope",
    "Forbidden",
    "InvalidArgument",
    "InvalidName",
    "InvalidTopic",
    "ItemNotFound",
    "LockError",
    "MalformedName",
    "ManualClock",
    "Message",
    "MessageClass",
    "MessageTooLarge",
    "MetadataTooLong",
    "NotAllowed",
    "Outgoing",
    "Peeked",
    "Property",
    "PropertyType",
    "Queue",
    "QueueCounts",
    "QueueNotFound",
    "ResourceConstraint",
    "State",
    "Subscriber",
    "SystemClock",
    "UnexpectedRequest",
    "open",
]


def __getattr__(name: str) -> object:
    """`boxmq.Subscriber`, imported when first asked for: its module (publish/subscribe) is a
    twentieth of what `import boxmq` costs, and putting to a queue never needs it (PEP 562)."""
    if name == "Subscriber":
        from boxmq.client.subscriber import Subscriber

        return Subscriber
    raise AttributeError(f"module 'boxmq' has no attribute {name!r}")
