"""What the queue engine asks the runtime to do: one effect, one rename.

Invariants:
- Effects are values; the engine has already updated its own state when it returns one.
- Each effect names exactly one state change of one file (DESIGN.md §1): `Claim` target →
  processing, `Finish` processing → processed, `Release` processing → target, `DeadLetter`
  processing → error, `Expire` target → expired (or processing → expired, a claim its holder
  had not received yet: `expire_claimed`), `Extend` processing → processing.
- After `Finish`, `Release`, `DeadLetter` and `Expire` the engine no longer holds the message as
  ready; a released one comes back through `QueueEngine.offer` with its new key.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from boxmq.core.leases import Lease
from boxmq.core.ready import Ready
from boxmq.model import ConsumerId, cheap_init

__all__ = [
    "Claim",
    "DeadLetter",
    "DeadReason",
    "Effect",
    "Expire",
    "Extend",
    "Finish",
    "Release",
    "ReleaseReason",
]


class ReleaseReason(Enum):
    UNLOCKED = "unlocked"  # XEP-0254 §2.4: the holder unlocked it
    TIMED_OUT = "timed-out"  # XEP-0254 §4: no delete or unlock in time
    OWNER_GONE = "owner-gone"  # XEP-0254 §4: unavailable presence, disconnect, process died
    GIVEN_BACK = "given-back"  # claimed for a consumer that paused before receiving it
    DECLINED = "declined"  # its holder cannot take it (too large for it): for another one


class DeadReason(Enum):
    REJECTED = "rejected"  # the holder said it can never be processed
    MAX_DELIVERIES = "max-deliveries"  # released too many times: a poison message
    TOO_LARGE = "too-large"  # declined by every consumer: larger than any of them can take


_NOT_DECLINED = frozenset({ReleaseReason.OWNER_GONE, ReleaseReason.GIVEN_BACK})


# Lock `message` for `holder` until `deadline` (target → processing), XEP-0254 §2.2: the
# lease the claim made, its `delivery` too. One value per message claimed, not a lease and an
# effect that repeats its fields (a value costs ~3,000 instructions to make).
Claim: TypeAlias = Lease


@cheap_init
@dataclass(frozen=True, slots=True)
class Finish:
    """The holder acked it (XEP-0254 §2.3 delete): processing → processed."""

    message: Ready
    holder: ConsumerId


@cheap_init
@dataclass(frozen=True, slots=True)
class Release:
    """Unlock it for redelivery: processing → target.

    `delivery_count` is already incremented; `not_before` is now + delay, or 0 for no delay.
    `passed_over` becomes the file's last holder, so that it goes to the *next* consumer.
    """

    message: Ready
    holder: ConsumerId
    reason: ReleaseReason
    not_before: float
    delivery_count: int

    @property
    def passed_over(self) -> ConsumerId | None:
        """Whom the next dispatch passes over while another consumer has room (XEP-0254
        §2.4): the holder that unlocked the message or let its lock time out. Nobody when the
        holder is gone (a disconnect, a shutdown, a dead process) or never received it (given
        back): it did not decline the message, and if it comes back (an MQTT session resumed
        after a restart) it must find its messages in their order, not behind newer ones for a
        handoff."""
        return None if self.reason in _NOT_DECLINED else self.holder


@cheap_init
@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Processing → error. `holder` is None when no consumer held it."""

    message: Ready
    holder: ConsumerId | None
    reason: DeadReason


@cheap_init
@dataclass(frozen=True, slots=True)
class Expire:
    """Its expiration passed before it was delivered: target → expired (processing →
    expired for a message claimed ahead and not received yet: QueueEngine.expire_claimed)."""

    message: Ready


@cheap_init
@dataclass(frozen=True, slots=True)
class Extend:
    """The holder is still working on it: the lock now lasts until `deadline`."""

    message: Ready
    holder: ConsumerId
    deadline: float


Effect: TypeAlias = Claim | Finish | Release | DeadLetter | Expire | Extend
