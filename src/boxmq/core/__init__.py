"""The pure, synchronous core: commands in, effects out, time passed in as `now`.

It imports only the standard library, `boxmq.model` and `boxmq.errors` (DESIGN.md §6).
"""

from __future__ import annotations

from boxmq.core.dispatch import Dispatch
from boxmq.core.effects import (
    Claim,
    DeadLetter,
    DeadReason,
    Effect,
    Expire,
    Extend,
    Finish,
    Release,
    ReleaseReason,
)
from boxmq.core.exactly_once import (
    ExactlyOnce,
    ExactlyOnceLimits,
    ExactlyOnceStats,
    SourceUsage,
)
from boxmq.core.leases import Lease
from boxmq.core.ownership import check_holder
from boxmq.core.qos import Ack, Action, Incoming, Outgoing, QoS, Request, delivery_qos
from boxmq.core.queue import QueueEngine, QueuePolicy, QueueStats, unlocked_until
from boxmq.core.ready import Ready
from boxmq.core.router import Destination, Router, Subscription, Unsubscribed, destination_name
from boxmq.core.subscriptions import SubscriptionTree
from boxmq.core.topics import (
    TopicFilter,
    matcher,
    matches,
    parse_filter,
    validate_filter,
    validate_topic,
)

__all__ = [
    "Ack",
    "Action",
    "Claim",
    "DeadLetter",
    "DeadReason",
    "Destination",
    "Dispatch",
    "Effect",
    "ExactlyOnce",
    "ExactlyOnceLimits",
    "ExactlyOnceStats",
    "Expire",
    "Extend",
    "Finish",
    "Incoming",
    "Lease",
    "Outgoing",
    "QoS",
    "QueueEngine",
    "QueuePolicy",
    "QueueStats",
    "Ready",
    "Release",
    "ReleaseReason",
    "Request",
    "Router",
    "SourceUsage",
    "Subscription",
    "SubscriptionTree",
    "TopicFilter",
    "Unsubscribed",
    "check_holder",
    "delivery_qos",
    "destination_name",
    "matcher",
    "matches",
    "parse_filter",
    "unlocked_until",
    "validate_filter",
    "validate_topic",
]
