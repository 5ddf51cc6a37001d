"""Retained messages in flight: numbered on the loop, written by a worker, routed on the loop.

A worker's write puts a retained message in the retained store before the loop routes it to the
in-memory subscriptions (publishing.py). A SUBSCRIBE handled in between is sent the message as
retained (subscribing.py), and would get it again live: twice, where QoS 0 allows it at most
once and QoS 2 exactly once. So while a topic has a retained message numbered and not yet
routed, a SUBSCRIBE records which retained message of the topic each of its filters was sent
(`sent`), and the routing of a message leaves out the subscriptions that were sent that one, or
a later one, as retained (`routed`). A topic's records go once none of its messages is in
flight; with none in flight (the common case) nothing is recorded.

A message's place is its number in the order of retained messages (retained_order.py), known
once its routing comes. A PUBREL after a restart names a message the server reads from disk
(publishing.py, `_deliver_kept`): whether it is retained, and of which topic, is known only
once its write is done, so its number is taken for no topic (`taken(None, ...)`), and while
one such is in flight every topic's SUBSCRIBEs are recorded, as if each had a message in
flight. Left: a subscription sent a message whose routing is yet to come, when
an earlier one (slower, or superseded) is routed first, gets the earlier one live after it: an
older message after the newer, never one message twice.

A SUBSCRIBE read while a retained message it matches is still being written would read the
message it replaces from the store, then get the new one live (or a cleared one, as an empty
message): `mosquitto_pub -r` at QoS 0, then at once `mosquitto_sub`, printed the old message in
4 of 8 runs. So a SUBSCRIBE first waits (`when_done`) for the retained messages `under_way`
that it could get, those numbered before it came: the ones after it do not hold it back.

Invariants (all on the loop):
- Every number `taken` for a topic, or for none, is then `routed` or `dropped` once
  (publishing.py); one taken for none is routed under its topic or dropped for none.
- A record names a session object and a filter, never a client id: a later session of the
  client, which was sent nothing, loses nothing.
- A wait's `then` runs once every number it waits for is routed or dropped, once; a number
  taken after the wait began is not waited for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

__all__ = ["Key", "RetainedWindow", "Written"]

Key = tuple[object, str]  # (session, filter as subscribed)


class Written(NamedTuple):
    """A retained message to route: its number (retained_order.py), and the id its write gave
    it (None: not known, as for a failed write or a Will routed before its write)."""

    number: int
    message_id: str | None


class RetainedWindow:
    def __init__(self) -> None:
        self._unrouted: dict[str, set[int]] = {}  # topic -> numbers taken, not yet routed
        self._sent: dict[str, dict[Key, str]] = {}  # topic -> subscription -> id sent retained
        self._numbers: dict[str, dict[str, int]] = {}  # topic -> id -> number, those routed
        self._unplaced: set[int] = set()  # numbers taken for no topic yet, not yet routed
        self._waits: list[tuple[set[int], Callable[[], object]]] = []  # SUBSCRIBEs (when_done)

    def taken(self, topic: str | None, number: int) -> None:
        """A retained message for `topic` was numbered: it is in flight until routed. None:
        a message that may be a retained one, of a topic not known yet."""
        if topic is None:
            self._unplaced.add(number)
        else:
            self._unrouted.setdefault(topic, set()).add(number)

    def under_way(self, matching: Iterable[Callable[[str], bool]]) -> set[int]:
        """The numbers of the retained messages in flight that a subscription whose filters
        are `matching` could be sent: of a topic one matches, or of a topic not known yet."""
        if not self._unrouted and not self._unplaced:
            return set()  # the common case: nothing to look at
        numbers = set(self._unplaced)
        filters = list(matching)
        for topic, unrouted in self._unrouted.items():
            if any(match(topic) for match in filters):
                numbers |= unrouted
        return numbers

    def when_done(self, numbers: set[int], then: Callable[[], object]) -> None:
        """`then()` once every message numbered in `numbers` (`under_way`) is routed or
        dropped (at once if none is)."""
        if not numbers:
            then()
            return
        self._waits.append((set(numbers), then))

    def sent(self, topic: str, session: object, text: str, message_id: str) -> None:
        """The subscription of `session` to `text` was sent `topic`'s retained message
        `message_id`: kept only while a retained message of the topic (or of a topic not
        known yet) is in flight."""
        if topic in self._unrouted or self._unplaced:
            self._sent.setdefault(topic, {})[(session, text)] = message_id

    def routed(self, topic: str, written: Written) -> set[Key]:
        """The message `written` is routed now: the subscriptions it must not reach, since
        they were sent it, or a later one of its topic, as retained."""
        having: set[Key] = set()
        placed = written.number in self._unplaced
        if placed:  # its topic known at last
            self._unplaced.discard(written.number)
            self._unrouted.setdefault(topic, set()).add(written.number)
        in_flight = topic in self._unrouted or self._unplaced
        numbers = self._numbers.setdefault(topic, {}) if in_flight else None
        if numbers is not None and written.message_id is not None:
            numbers[written.message_id] = written.number
        sent = self._sent.get(topic)
        if sent and numbers is not None:
            # An id with no number yet is older (routed before those in flight), or one whose
            # routing is still to come (the case left, above).
            number = written.number
            having = {key for key, sent_id in sent.items() if numbers.get(sent_id, -1) >= number}
        self.dropped(topic, written.number)
        if placed and not self._unplaced:
            self._forget_unplaced()
        return having

    def dropped(self, topic: str | None, number: int) -> None:
        """The message numbered `number` will not be routed (its write failed, or it is no
        retained message: `topic` None for one taken for none), or was."""
        if self._waits:
            self._done(number)
        if topic is None:
            self._unplaced.discard(number)
            if not self._unplaced:
                self._forget_unplaced()
            return
        unrouted = self._unrouted.get(topic)
        if unrouted is None:
            return
        unrouted.discard(number)
        if not unrouted:
            del self._unrouted[topic]
            if not self._unplaced:
                self._sent.pop(topic, None)
                self._numbers.pop(topic, None)

    def _forget_unplaced(self) -> None:
        """None taken for no topic is in flight now: the records kept for those go, but
        those of the topics with a message of their own in flight."""
        for records in (self._sent, self._numbers):
            for topic in [topic for topic in records if topic not in self._unrouted]:
                del records[topic]

    def _done(self, number: int) -> None:
        """The message numbered `number` is routed or dropped: the waits it ends go on."""
        over = []
        for numbers, then in self._waits:
            numbers.discard(number)
            if not numbers:
                over.append(then)
        if over:
            self._waits = [wait for wait in self._waits if wait[0]]
            for then in over:
                then()
