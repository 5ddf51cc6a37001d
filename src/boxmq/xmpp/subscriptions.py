"""Who is subscribed to which queue node, and what each one holds right now.

A subscription is one full JID on one node, backed by one boxmq receiver (a queue's consumer,
or a member of the topic's `$share/xmpp/` group) whose `max_in_flight` is the subscriber's
`pubsub#queue_requests` (XEP-0254 §2.1). `held` is what the
door has notified and not seen settled; the lock itself lives in the consumer (and on disk).
"""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass, field
from typing import Final

from boxmq.client.message import Message
from boxmq.client.receiver import Receiver
from boxmq.core.topics import SHARE_PREFIX
from boxmq.errors import RecurringFailure
from boxmq.xmpp.qos_out import Level

__all__ = ["SHARE_GROUP", "Subscription", "Subscriptions", "consumer_name", "topic_node_of"]

SHARE_GROUP: Final = "xmpp"  # the XMPP subscribers of a topic node: $share/xmpp/<node>
_PREFIX: Final = "xmpp."  # consumer_name's


def consumer_name(jid: str) -> str:
    """The boxmq consumer name of a full JID: short enough for a lock suffix (40 bytes),
    stable across restarts, and never holding a '/' (JIDs do)."""
    return _PREFIX + hashlib.blake2b(jid.encode(), digest_size=8).hexdigest()


def topic_node_of(filter: str, subscriber: str) -> str | None:
    """The topic node whose XMPP subscriber `subscriber`'s membership of the share group
    `filter` looks to be (its name the component's, `consumer_name`); None if it is not
    one. For the CLI, which must not end a member the component still serves."""
    group = f"{SHARE_PREFIX}{SHARE_GROUP}/"
    if filter.startswith(group) and subscriber.startswith(_PREFIX):
        return filter[len(group) :]
    return None


@dataclass(eq=False)
class Subscription:
    jid: str  # the subscribing full JID: events go there
    node: str
    queue_requests: int
    consumer: Receiver  # a queue consumer, or a topic share-group member
    # The JID its last subscribe named, `jid` or its bare JID, which the answers and notices
    # about it name (XEP-0060 §6.1.2: the JID subscribed, as XEP-0254's Listing 3 echoes it)
    named: str
    qos: Level = Level.UNACKNOWLEDGED  # how its items are sent (urn:xmpp:qos)
    held: dict[str, Message] = field(default_factory=dict)  # item id -> its locked delivery
    closed: bool = False
    timeouts: int = 0  # deliveries in a row that timed out unanswered
    silent_at: float = float("-inf")  # when the last of those timed out
    # The store refusing to take its items (poll), told once, not at each round of the timer
    failing: RecurringFailure = field(default_factory=RecurringFailure)


class Subscriptions:
    """The live subscriptions, by (full JID, node), with the lock deadlines in one heap."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], Subscription] = {}
        self._deadlines: list[tuple[float, int, Subscription, str]] = []  # pruned lazily
        self._tie = 0

    def get(self, jid: str, node: str) -> Subscription | None:
        return self._by_key.get((jid, node))

    def add(self, subscription: Subscription) -> None:
        self._by_key[subscription.jid, subscription.node] = subscription

    def remove(self, subscription: Subscription) -> None:
        subscription.closed = True
        self._by_key.pop((subscription.jid, subscription.node), None)

    def of_jid(self, jid: str) -> list[Subscription]:
        return [s for (owner, _), s in self._by_key.items() if owner == jid]

    def of_node(self, node: str) -> list[Subscription]:
        return [s for (_, name), s in self._by_key.items() if name == node]

    def all(self) -> list[Subscription]:
        return list(self._by_key.values())

    def hold(self, subscription: Subscription, message: Message) -> None:
        subscription.held[message.id] = message
        self._tie += 1
        heapq.heappush(
            self._deadlines, (message.lock_deadline, self._tie, subscription, message.id)
        )

    def timed_out(self, now: float) -> list[tuple[Subscription, Message]]:
        """Held deliveries whose lock deadline has passed, taken out of `held`."""
        out = []
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, subscription, item = heapq.heappop(self._deadlines)
            message = subscription.held.get(item)
            if message is not None and message.lock_deadline == deadline:
                del subscription.held[item]
                out.append((subscription, message))
        return out

    def next_deadline(self) -> float | None:
        while self._deadlines:
            deadline, _, subscription, item = self._deadlines[0]
            message = subscription.held.get(item)
            if message is not None and message.lock_deadline == deadline:
                return deadline
            heapq.heappop(self._deadlines)
        return None
