"""Who gets a copy of a publish: plain subscriptions and share groups (MQTT 5.0 §4.8, MQTT-234).

A *plain* subscription belongs to one subscriber (a session) and is keyed by (subscriber,
filter): subscribing again with the same filter replaces it (MQTT 5.0 §3.8.4). A *share group*
is keyed by (group, filter) and has members; it lives while it has at least one member, and
its undelivered messages are deleted when the last one leaves (MQTT-234 §4.9.2).

Invariants:
- `route` gives exactly one Destination per matching plain subscription and one per matching
  share group, however many members it has, sorted by `Destination.name` (unique per route).
  Overlaps are independent: a client with a plain and a shared subscription matching a topic
  gets a copy through each, and every matching group gets its own copy (MQTT-234 note 7).
- The trie holds one key per plain subscription and one per share group with members; an
  empty group is removed at once (`Unsubscribed.GROUP_ENDED` says so).
- `len(router)` is the number of subscriptions: plain ones plus group memberships.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from boxmq.core.qos import QoS, delivery_qos
from boxmq.core.subscriptions import SubscriptionTree
from boxmq.core.topics import TopicFilter, validate_topic
from boxmq.errors import InvalidArgument
from boxmq.model import ConsumerId

__all__ = ["Destination", "Router", "Subscription", "Unsubscribed", "destination_name"]

_Key = tuple[str | None, str, str]  # (group or None, group or subscriber, filter proper)


@dataclass(frozen=True, slots=True)
class Subscription:
    """One subscriber's subscription (for a shared filter: its membership of the group)."""

    subscriber: ConsumerId  # a client/session id (for a shared subscription: the member)
    filter: TopicFilter
    qos: QoS = QoS.AT_LEAST_ONCE  # the granted maximum QoS
    durable: bool = True  # in a dropbox (persistent session) or in memory only
    no_local: bool = False  # MQTT 5.0 §3.8.3.1: not to the session that published it

    def __post_init__(self) -> None:
        if self.no_local and self.filter.shared:
            # MQTT 5.0 §3.8.3.1: No Local on a shared subscription is a protocol error.
            raise InvalidArgument(f"{self.filter}: no_local is not allowed on a shared filter")


@dataclass(frozen=True, slots=True)
class Destination:
    """One copy of a published message goes to each destination."""

    name: str  # unique and stable: see `destination_name`
    filter: TopicFilter
    shared: bool
    qos: QoS  # the QoS this copy is delivered at
    durable: bool  # a dropbox (always, for a share group) or a memory inbox
    subscriber: ConsumerId | None  # the plain subscriber; None for a share group (members compete)


class Unsubscribed(Enum):
    """What an unsubscribe did. Truthy when something was removed, so it reads as a bool."""

    NOT_SUBSCRIBED = auto()  # nothing to remove
    REMOVED = auto()  # a plain subscription, or one member of a group that lives on
    GROUP_ENDED = auto()  # the group's last member left: delete its undelivered messages

    def __bool__(self) -> bool:
        return self is not Unsubscribed.NOT_SUBSCRIBED


def destination_name(filter: TopicFilter, subscriber: str | None = None) -> str:
    """The name of a destination: "share.<group>/<filter>" for a share group and
    "client.<subscriber>/<filter>" for a plain subscription, with '%' and '/' in the subscriber
    written as %25 and %2F. The words match the store's subscription keys; the part before the
    first '/' and the filter after it give back both halves, so names never collide."""
    if filter.share_group is not None:
        return f"share.{filter.share_group}/{filter.filter}"  # a share name has no '/'
    if subscriber is None:
        raise InvalidArgument(f"{filter}: a plain subscription needs a subscriber")
    escaped = subscriber.replace("%", "%25").replace("/", "%2F")
    return f"client.{escaped}/{filter.filter}"


def _key(subscriber: str, filter: TopicFilter) -> _Key:
    group = filter.share_group
    return group, subscriber if group is None else group, filter.filter


class Router:
    """The subscriptions of one broker, and the routing of topics to them."""

    def __init__(self) -> None:
        self._tree: SubscriptionTree[_Key] = SubscriptionTree()
        self._plain: dict[_Key, Subscription] = {}
        self._groups: dict[_Key, dict[ConsumerId, Subscription]] = {}  # members, joining order
        self._of: dict[str, dict[TopicFilter, None]] = {}  # subscriber -> its filters
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def subscribe(self, subscription: Subscription) -> bool:
        """Add a subscription; True if new. An existing plain (subscriber, filter) is replaced
        (MQTT 5.0 §3.8.4); a member subscribing again to its group only updates its QoS
        (MQTT-234 note 6)."""
        subscriber, filter = subscription.subscriber, subscription.filter
        key = _key(subscriber, filter)
        if filter.shared:
            members = self._groups.setdefault(key, {})
            new = subscriber not in members
            members[subscriber] = subscription
        else:
            new = key not in self._plain
            self._plain[key] = subscription
        self._tree.add(filter.filter, key)
        self._of.setdefault(subscriber, {})[filter] = None
        if new:
            self._size += 1
        return new

    def unsubscribe(self, subscriber: str, filter: TopicFilter) -> Unsubscribed:
        """Remove one subscription; GROUP_ENDED when it was a group's last member."""
        key = _key(subscriber, filter)
        outcome = self._leave(key, ConsumerId(subscriber)) if filter.shared else self._drop(key)
        if outcome:
            self._forget(subscriber, filter)
            self._size -= 1
        return outcome

    def remove_subscriber(self, subscriber: str) -> list[tuple[TopicFilter, Unsubscribed]]:
        """The session ended: drop all its subscriptions (MQTT-234: it leaves its groups).
        Returns each dropped filter with what happened to it, in subscribing order."""
        filters = list(self._of.get(subscriber, ()))
        return [(filter, self.unsubscribe(subscriber, filter)) for filter in filters]

    def members(self, group: str, filter: str) -> list[ConsumerId]:
        """The members of the share group "$share/<group>/<filter>", in joining order."""
        return list(self._groups.get((group, group, filter), ()))

    def subscriptions_of(self, subscriber: str) -> list[Subscription]:
        """The subscriber's subscriptions (its group memberships included)."""
        return [self._get(subscriber, filter) for filter in self._of.get(subscriber, ())]

    def route(self, topic: str, *, qos: QoS, source: str | None = None) -> list[Destination]:
        """Where copies of a message published to `topic` at `qos` by `source` go."""
        validate_topic(topic)
        found: list[Destination] = []
        for key in self._tree.match(topic):
            if key[0] is None:
                subscription = self._plain[key]
                if not (subscription.no_local and subscription.subscriber == source):
                    found.append(_to_plain(subscription, qos))
            else:
                found.append(_to_group(self._groups[key], qos))
        found.sort(key=lambda destination: destination.name)
        return found

    def _drop(self, key: _Key) -> Unsubscribed:
        if self._plain.pop(key, None) is None:
            return Unsubscribed.NOT_SUBSCRIBED
        self._tree.remove(key[2], key)
        return Unsubscribed.REMOVED

    def _leave(self, key: _Key, member: ConsumerId) -> Unsubscribed:
        members = self._groups.get(key)
        if members is None or members.pop(member, None) is None:
            return Unsubscribed.NOT_SUBSCRIBED
        if members:
            return Unsubscribed.REMOVED
        del self._groups[key]  # MQTT-234 §4.9.2: the shared subscription ends
        self._tree.remove(key[2], key)
        return Unsubscribed.GROUP_ENDED

    def _get(self, subscriber: str, filter: TopicFilter) -> Subscription:
        key = _key(subscriber, filter)
        return self._groups[key][ConsumerId(subscriber)] if filter.shared else self._plain[key]

    def _forget(self, subscriber: str, filter: TopicFilter) -> None:
        filters = self._of[subscriber]
        del filters[filter]
        if not filters:
            del self._of[subscriber]


def _to_plain(subscription: Subscription, published: QoS) -> Destination:
    return Destination(
        name=destination_name(subscription.filter, subscription.subscriber),
        filter=subscription.filter,
        shared=False,
        qos=delivery_qos(published, subscription.qos),
        durable=subscription.durable,
        subscriber=subscription.subscriber,
    )


def _to_group(members: dict[ConsumerId, Subscription], published: QoS) -> Destination:
    """One copy for the whole group, at the highest QoS any member was granted (each member
    still gets at most its own grant: MQTT-234 note 2), kept in the group's dropbox."""
    first = next(iter(members.values()))
    return Destination(
        name=destination_name(first.filter),
        filter=first.filter,
        shared=True,
        qos=delivery_qos(published, max(member.qos for member in members.values())),
        durable=True,  # DESIGN.md §2: a share group is always one dropbox
        subscriber=None,
    )
