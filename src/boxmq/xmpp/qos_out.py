"""Notifications sent at a subscriber's chosen urn:xmpp:qos level, with retries (seed 003).

Sans-IO: `send` writes the first iq, `answer` takes the subscriber's replies, `retry(now)`
re-sends what went unanswered with a doubling back-off, and gives up after `max_attempts`
(then `on_failed` runs: the service unlocks the item for the next subscriber).

- acknowledged: <iq set><acknowledged><message/></acknowledged></iq> -> an empty result.
- assured: <assured msgId=..><message/></assured> -> a result with <received msgId=../>
  (a result that is no receipt of that msgId is not taken for one), then <deliver msgId=../>
  -> a result. Each step is idempotent at the receiver, so a retry is
  always safe; the msgId is the node and the item id (`msg_id_of`), so a redelivery of one
  item is recognised as such.
An error reply ends the transfer at once: the receiver said no.

Only the JID a notification went to may answer it: an answer whose `from` is anyone else is
ignored (the server stamps `from`, so it cannot be forged), and iq ids carry a random part
drawn per sender, so they cannot be guessed either.
"""

from __future__ import annotations

import heapq
import itertools
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from xml.etree.ElementTree import Element

from boxmq.errors import InvalidArgument
from boxmq.xmpp import ns, render
from boxmq.xmpp.forms import without_blanks
from boxmq.xmpp.jids import normal

__all__ = ["Level", "ReliableSender", "msg_id_of"]


class Level(Enum):
    UNACKNOWLEDGED = "unacknowledged"  # a plain message: at most once
    ACKNOWLEDGED = "acknowledged"  # at least once
    ASSURED = "assured"  # exactly once

    @classmethod
    def parse(cls, text: str) -> Level:
        try:
            return cls(without_blanks(text).lower())  # XML's blanks, as queue_requests
        except ValueError:
            names = ", ".join(level.value for level in cls)
            raise InvalidArgument(f"QoS level {text!r}: choose one of {names}") from None


def msg_id_of(node: str, item_id: str) -> str:
    """The msgId an item of `node` is sent under: `NODE/ITEM-ID`. The document has outstanding
    msgIds "unique for the sender" (Message IDs), and the service is one sender to every
    subscriber: one publish reaches a JID subscribed to sensors/+ and sensors/# once per
    subscription under one item id, and a file a script dropped may have its name in two
    queues. Unambiguous: an item id is a file name's, which holds no '/'."""
    return f"{node}/{item_id}"


@dataclass(eq=False)
class _Transfer:
    to: str
    message: str  # the <message/> to carry, as XML text
    level: Level
    msg_id: str
    on_failed: Callable[[], None]
    step: str  # acknowledged, assured or deliver
    iq_id: str = ""
    attempts: int = 0


class ReliableSender:
    def __init__(
        self,
        *,
        sender: str,
        send: Callable[[str], None],
        first_retry: float = 2.0,
        max_attempts: int = 5,
    ) -> None:
        self._sender = sender
        self._send = send
        self._first_retry = first_retry
        self._max_attempts = max_attempts
        self._pending: dict[str, _Transfer] = {}  # by the id of the iq in flight
        self._retries: list[tuple[float, int, str]] = []  # (when, tie, iq id), pruned lazily
        self._latest = -math.inf  # the latest time it was told (`_seen`)
        run = secrets.token_hex(8)  # per component run: ids are not guessable across runs
        self._ids = (f"bq-{run}-{n}" for n in itertools.count(1))
        self._tie = itertools.count()

    def send(
        self,
        to: str,
        message: str,
        level: Level,
        *,
        msg_id: str,
        now: float,
        on_failed: Callable[[], None],
    ) -> None:
        if level is Level.UNACKNOWLEDGED:
            self._send(message)
            return
        step = "acknowledged" if level is Level.ACKNOWLEDGED else "assured"
        self._start(_Transfer(to, message, level, msg_id, on_failed, step), now)

    def answer(self, iq: Element, now: float) -> bool:
        """Take a result or error the subscriber sent; False if it was not ours (an unknown
        id, or an answer from someone else than the JID the notification went to)."""
        iq_id = iq.get("id", "")
        transfer = self._pending.get(iq_id)
        if transfer is None or not _answered_by(transfer.to, iq.get("from", "")):
            return False
        result = iq.get("type") == "result"
        if result and transfer.step == "assured" and not _received(iq, transfer.msg_id):
            # Not a receipt: `deliver` could reach a receiver that holds nothing under the
            # msgId. Left unanswered, so its retry asks again (assured is idempotent), and
            # the give-up hands the item on if no receipt ever comes.
            return True
        del self._pending[iq_id]
        if not result:
            transfer.on_failed()
        elif transfer.step == "assured":
            transfer.step = "deliver"
            self._start(transfer, now)
        return True

    def retry(self, now: float) -> None:
        self._seen(now)
        while self._retries and self._retries[0][0] <= now:
            _, _, iq_id = heapq.heappop(self._retries)
            transfer = self._pending.pop(iq_id, None)
            if transfer is None:
                continue  # answered meanwhile
            if transfer.attempts >= self._max_attempts:
                transfer.on_failed()
            else:
                self._start(transfer, now, again=True)

    def cancel(self, to: str, msg_id: str) -> None:
        """Stop sending an item that was settled or taken back meanwhile (no late resends)."""
        for iq_id, transfer in list(self._pending.items()):
            if transfer.to == to and transfer.msg_id == msg_id:
                del self._pending[iq_id]

    def next_deadline(self) -> float | None:
        while self._retries and self._retries[0][2] not in self._pending:
            heapq.heappop(self._retries)
        return self._retries[0][0] if self._retries else None

    def in_flight(self) -> int:
        return len(self._pending)

    def _seen(self, now: float) -> None:
        """The resends are times of the wall clock, which goes back only when stepped back
        (NTP, `date -s`): by at least the difference, the resends move back with it. Without
        this, a step back of an hour sent an unanswered notification again an hour late."""
        if now < self._latest:
            by = now - self._latest
            self._retries = sorted((when + by, tie, iq_id) for when, tie, iq_id in self._retries)
        self._latest = max(self._latest, now)

    def _start(self, transfer: _Transfer, now: float, *, again: bool = False) -> None:
        self._seen(now)  # before its own resend is pushed, read from the clock as it is now
        transfer.attempts = transfer.attempts + 1 if again else 1
        transfer.iq_id = next(self._ids)
        next_try = now + self._first_retry * 2 ** (transfer.attempts - 1)
        self._pending[transfer.iq_id] = transfer
        heapq.heappush(self._retries, (next_try, next(self._tie), transfer.iq_id))
        msg_id = render.attr(transfer.msg_id)
        if transfer.step == "deliver":
            inner = f"<deliver xmlns='{ns.QOS}' msgId={msg_id}/>"
        elif transfer.step == "assured":
            inner = f"<assured xmlns='{ns.QOS}' msgId={msg_id}>{transfer.message}</assured>"
        else:
            inner = f"<acknowledged xmlns='{ns.QOS}'>{transfer.message}</acknowledged>"
        self._send(render.iq_set(transfer.iq_id, self._sender, transfer.to, inner))


def _received(result: Element, msg_id: str) -> bool:
    """Whether `result` is the receipt of `msg_id`: a <received/> echoing it (urn:xmpp:qos,
    exactly once). Its namespace is not checked: the document's own example writes the
    element without one, in the stream's."""
    return any(
        child.tag.rsplit("}", 1)[-1] == "received" and child.get("msgId") == msg_id
        for child in result
    )


def _answered_by(to: str, sender: str) -> bool:
    """Whether `sender` is the JID a notification was sent `to`: the same full JID, or any
    resource of it if it went to a bare JID. `to` is a subscriber's JID, in the form the door
    compares (jids.py); `sender` is brought to it."""
    sender = normal(sender) or sender
    return sender == to or ("/" not in to and sender.split("/", 1)[0] == to)
