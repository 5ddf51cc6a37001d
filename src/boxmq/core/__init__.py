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
from boxmq.core.leases import Lease
from boxmq.core.ownership import check_holder
from boxmq.core.queue import QueueEngine, QueuePolicy, QueueStats
from boxmq.core.ready import Ready

__all__ = [
    "Claim",
    "DeadLetter",
    "DeadReason",
    "Dispatch",
    "Effect",
    "Expire",
    "Extend",
    "Finish",
    "Lease",
    "QueueEngine",
    "QueuePolicy",
    "QueueStats",
    "Ready",
    "Release",
    "ReleaseReason",
    "check_holder",
]
