"""boxmq: a durable message broker whose state is a directory of plain files.

import boxmq
box = boxmq.open("./data")
box.queue("jobs").put(b"payload")
"""

from __future__ import annotations

from boxmq.client import Box, Consumer, Message, Outgoing, Peeked, Queue, QueueCounts, open
from boxmq.client.topics import Subscriber
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
