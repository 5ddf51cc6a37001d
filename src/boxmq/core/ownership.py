"""Who may ack, unlock, reject or extend a message: the XEP-0254 §2.3/§2.4 error decision.

`check_holder` is the one place that decides, as a pure function of what is known about a
message, so that a path working from the files on disk can reuse it.

`PastHolders` remembers which consumers held a message before (their lock is gone: unlocked,
timed out, owner gone). Invariants:
- A *live* record exists only while the engine knows the message (ready or leased).
- A released message's record is *parked* until the message is offered again, and so is that
  of a message another process took (`set_aside`); at most `limit` parked records are kept
  (oldest forgotten first), so memory stays bounded when another process takes the message and
  it is never offered here again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

from boxmq.errors import Conflict, Forbidden, ItemNotFound, UnexpectedRequest
from boxmq.model import ConsumerId, MessageId

__all__ = ["PastHolders", "check_holder"]


def check_holder(
    message_id: MessageId,
    requester: ConsumerId,
    *,
    holder: ConsumerId | None,
    known: bool,
    past_holders: Collection[ConsumerId],
    earlier_delivery: bool = False,
    holders_unrecorded: bool = False,
) -> None:
    """Return if `requester` holds the lock; otherwise raise the XEP-0254 error, in this order.

    earlier_delivery: `holder` is the requester, but the request comes with its handle of a
    delivery before the one it holds now (that lock ended, and the message came back to it):
    its lock is gone as surely as if another consumer held the message, and the delivery it
    holds now is left to the handle of that one.
    holders_unrecorded: the message was delivered before, and nothing says to whom (a release
    when its holder left, by a restart or a disconnect, names nobody: effects.Release
    .passed_over). Unlocked, or locked by another since, it is then no proof that the
    requester never received it: it is told that its lock is gone (what the one that held it
    MUST hear, XEP-0254 §2.3/§2.4, as after a timeout), not that it never received it nor
    that another holds it."""
    if holder == requester:
        if not earlier_delivery:
            return
        raise UnexpectedRequest(
            message_id,
            f"{requester} no longer holds the lock of that delivery (the message came to it again)",
        )
    if requester in past_holders:
        # It received the item but no longer holds the lock (race, lost notification, timeout).
        raise UnexpectedRequest(message_id, f"{requester} no longer holds the lock")
    if known and holders_unrecorded:
        # Before the conflict: the one that left and came back (XEP-0254 §4) may be asking.
        raise UnexpectedRequest(
            message_id,
            f"{requester} holds no lock on it: its last lock ended when its holder left (a "
            "restart, a disconnect), and who held it was not kept",
        )
    if holder is not None:
        raise Conflict(message_id, "locked by another consumer")
    if known:
        raise Forbidden(message_id, f"{requester} did not receive this message")
    raise ItemNotFound(message_id, "no such message")


class PastHolders:
    """Consumers that held a message before, per message id."""

    def __init__(self, *, limit: int = 10_000) -> None:
        self._limit = limit
        self._live: dict[MessageId, set[ConsumerId]] = {}
        self._parked: OrderedDict[MessageId, frozenset[ConsumerId]] = OrderedDict()

    def of(self, message_id: MessageId) -> frozenset[ConsumerId]:
        live = self._live.get(message_id)
        if live is not None:
            return frozenset(live)
        return self._parked.get(message_id, frozenset())

    def is_parked(self, message_id: MessageId) -> bool:
        """Released here and not offered again yet (it should be back in target/)."""
        return message_id in self._parked

    def offered(self, message_id: MessageId, last_holder: ConsumerId | None) -> None:
        """The message is known again; its file may name a holder from another process."""
        parked = self._parked.pop(message_id, None)
        if parked is not None:
            self._live.setdefault(message_id, set()).update(parked)
        if last_holder is not None:
            self._live.setdefault(message_id, set()).add(last_holder)

    def released(self, message_id: MessageId, holder: ConsumerId) -> None:
        """`holder`'s lock is gone and the message went back to target/."""
        holders = self._live.pop(message_id, set())
        holders.add(holder)
        self._park(message_id, frozenset(holders | self._parked.get(message_id, frozenset())))

    def _park(self, message_id: MessageId, holders: frozenset[ConsumerId]) -> None:
        self._parked.pop(message_id, None)
        self._parked[message_id] = holders
        while len(self._parked) > self._limit:
            self._parked.popitem(last=False)

    def set_aside(self, message_id: MessageId) -> None:
        """Another process took it from target/: its past holders are parked, as for a
        release, so that they are told their lock is gone (UnexpectedRequest) while it is
        elsewhere and after it comes back, never that they did not receive it."""
        holders = self._live.pop(message_id, None)
        if holders:
            self._park(message_id, frozenset(holders))

    def forget(self, message_id: MessageId) -> None:
        """Finished, dead or expired: nobody can ask about it any more."""
        self._live.pop(message_id, None)
        self._parked.pop(message_id, None)
