"""Where a topic goes, remembered: the broker asks once per topic, not once per message.

Invariants:
- `MemoryRoutes` answers exactly what its Router would (for the granted QoS; No Local is the
  caller's, per session), and forgets every answer when any subscription changes.
- `DurableRoutes.wanted(topic)` is True when a publish to `topic` may have to go into a
  dropbox. Answers are kept until the root's subscription generation changes, which is read
  by the first `wanted` after a `recheck()` (the broker rechecks once per socket read), so a
  subscription made by another process is seen by the next read that publishes.
"""

from __future__ import annotations

from typing import Final

from boxmq.client.box import Box
from boxmq.core import QoS, Router, Subscription, TopicFilter
from boxmq.store.topics import GenerationWatch

__all__ = ["LONGEST_CACHED", "DurableRoutes", "MemoryRoutes", "Route"]

_MAX_CACHED: Final = 65_536  # topics remembered before the cache starts over
# A longer topic is answered afresh each time, not remembered: the cache would hold up to
# 65,536 topics of 65,535 bytes, 4.3 GB a client sending distinct ones filled in seconds and
# left held. Device topics are far shorter; 65,536 keys of 256 characters are 17 MB (67 MB
# of characters past U+FFFF, which Python stores in 4 bytes each).
LONGEST_CACHED: Final = 256

Route = tuple[str, str, int]  # (subscriber, filter as subscribed, granted QoS)


class MemoryRoutes:
    def __init__(self) -> None:
        self._router = Router()
        self._cache: dict[str, list[Route]] = {}

    def __len__(self) -> int:
        return len(self._router)

    def subscribe(self, subscription: Subscription) -> None:
        self._router.subscribe(subscription)
        self._cache.clear()

    def unsubscribe(self, subscriber: str, filter: TopicFilter) -> None:
        self._router.unsubscribe(subscriber, filter)
        self._cache.clear()

    def remove_subscriber(self, subscriber: str) -> None:
        if self._router.remove_subscriber(subscriber):
            self._cache.clear()

    def route(self, topic: str) -> list[Route]:
        routes = self._cache.get(topic)
        if routes is None:
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            routes = [
                (d.subscriber or "", str(d.filter), int(d.qos))
                for d in self._router.route(topic, qos=QoS.EXACTLY_ONCE)
            ]
            if len(topic) <= LONGEST_CACHED:
                self._cache[topic] = routes
        return routes


class DurableRoutes:
    """Which topics durable subscriptions want. Subscriptions made by other processes show in
    the root's generation file, looked at again (one stat, or an access while there is none)
    by the first `wanted` after `recheck`: the broker rechecks per read and per timer, and a
    read that carries no PUBLISH (a subscriber's acks) costs nothing."""

    def __init__(self, box: Box) -> None:
        self._box = box
        self._generation = GenerationWatch(box.root)
        self._cache: dict[str, bool] = {}
        self._fresh = False

    def recheck(self) -> None:
        self._fresh = False

    def wanted(self, topic: str) -> bool:
        if not self._fresh:
            if self._generation.changed():
                self._cache.clear()
            self._fresh = True
        wanted = self._cache.get(topic)
        if wanted is None:
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            # No Local is left to the fan-out itself: a copy it skips is simply not written.
            wanted = self._box.topics.has_durable(topic)
            if len(topic) <= LONGEST_CACHED:
                self._cache[topic] = wanted
        return wanted
