"""boxmq: a durable message broker whose state is a directory of plain files.

import boxmq
box = boxmq.open("./data")
box.queue("jobs").put(b"payload")
"""

from __future__ import annotations

import importlib
import importlib.util

# typing.TYPE_CHECKING without typing, which loads re and enum: a Ctrl-C in the ~10 ms those
# take was a traceback too (mypy knows the name and takes it as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from boxmq.client import Box, Consumer, Message, Outgoing, Peeked, Queue, QueueCounts, open
    from boxmq.client.subscriber import Subscriber
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


# Where each name of the API lives, imported when first asked for (PEP 562). `import boxmq`
# itself loads nothing: the `boxmq` command's entry point (boxmq/__main__.py) is inside this
# package, and a Ctrl-C while the client loaded here, before that entry point's try began, was
# a KeyboardInterrupt traceback. Publish/subscribe's Subscriber is a twentieth of what the
# client costs, and putting to a queue never needs it.
_HOMES = {
    **dict.fromkeys(
        ("Box", "Consumer", "Message", "Outgoing", "Peeked", "Queue", "QueueCounts", "open"),
        "boxmq.client",
    ),
    "Subscriber": "boxmq.client.subscriber",
    **dict.fromkeys(("Clock", "ManualClock", "SystemClock"), "boxmq.clock"),
    **dict.fromkeys(
        (
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
            "MessageTooLarge",
            "MetadataTooLong",
            "NotAllowed",
            "QueueNotFound",
            "ResourceConstraint",
            "UnexpectedRequest",
        ),
        "boxmq.errors",
    ),
    **dict.fromkeys(("Envelope", "MessageClass", "Property", "PropertyType"), "boxmq.model"),
    "State": "boxmq.store.layout",
}


def __getattr__(name: str) -> object:
    """`boxmq.Box`, `from boxmq import Queue`: the name's module, imported when first asked for;
    and a module of boxmq itself (`boxmq.core.ExactlyOnceLimits`, `boxmq.model.GROUP_KEY`, as
    the docs write them), which a plain `import boxmq` has not loaded."""
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"boxmq.{name}") is not None:
        value = importlib.import_module(f"boxmq.{name}")
    else:
        raise AttributeError(f"module 'boxmq' has no attribute {name!r}")
    globals()[name] = value  # asked once: the next look-up finds it without this call
    return value


def __dir__() -> list[str]:
    """Every name of the API, loaded or not: `dir(boxmq)` (and an editor's completion, and
    test_docs' namespace for python.md's defaults) listed only those asked for so far."""
    return sorted({*globals(), *__all__})
