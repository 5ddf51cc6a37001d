"""The state of one MQTT session, which can outlive its network connection (MQTT 5.0 §4.1).

Pure values and bookkeeping; the broker (broker.py and the parts it drives) does the I/O around it.

Invariants:
- A session is persistent when its Session Expiry Interval is over 0 (a 3.1.1 CleanSession 0
  session's is `max_session_expiry`, `NEVER` only if that is). A non-persistent session ends
  with its connection.
- `subscriptions` maps the filter exactly as subscribed ("$share/g/a/#" included) to its
  options; subscribing again to the same filter replaces the options (MQTT 5.0 §3.8.4).
- The filters a session holds, which `max_subscriptions` caps, are its `subscriptions`, the
  share groups it is `leaving` and the filters it is `adding`: each a distinct filter (a
  filter is in one of the three at most), counted by `held_count()` with three len()s.
- `awaiting_release` holds the packet ids of QoS 2 PUBLISHes answered with PUBREC and not yet
  released (MQTT 5.0 §4.3.3); a repeat of one is answered again and never routed twice.
  `entering_release` counts, by packet id, the QoS 2 PUBLISHes read and not yet held there
  (the disk work they need, or that ahead of them, not done): their ids are in use too.
  `held_bytes` is the payload bytes of the PUBLISHes it keeps. `HeldTotals`, shared by every
  session of a broker, sums both over the sessions that have not ended (`stop_counting`).
- The outbox holds what is on its way to the client (outbox.py); its tokens are locked
  messages on disk (to settle when the client answers) or None (memory only).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Final, NamedTuple

from boxmq.client.message import Message
from boxmq.client.subscriber import Subscriber
from boxmq.mqtt.outbox import Outbox
from boxmq.mqtt.packets import Publish, RetainHandling, Will, held_size

__all__ = [
    "NEVER",
    "NO_IDS",
    "HeldTotals",
    "Looked",
    "Release",
    "Session",
    "SubscriptionOptions",
    "Token",
]

_new_tuple = tuple.__new__
NO_IDS: Final[frozenset[int]] = frozenset()  # one for all: CPython 3.11 makes each anew
NEVER: Final = 0xFFFF_FFFF  # MQTT 5.0 §3.1.2.11.2: this Session Expiry Interval never expires

Token = Message | None  # what an outbox entry settles: a locked message on disk, or nothing


@dataclass(frozen=True, slots=True)
class SubscriptionOptions:
    """What a SUBSCRIBE asked for one filter (MQTT 5.0 §3.8.3.1), as granted."""

    qos: int
    durable: bool  # served from a dropbox (persistent session, share group), not from memory
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: RetainHandling = RetainHandling.SEND_ON_SUBSCRIBE
    identifier: int | None = None  # Subscription Identifier (§3.8.2.1.2), sent back with each


class Release(NamedTuple):
    """A QoS 2 PUBLISH answered with PUBREC: on PUBREL, deliver what the exactly-once intake
    stored (`stored`) and route `publish` to the memory subscriptions, or nothing (`refused`).
    A named tuple: one is built per QoS 2 message, with one `tuple.__new__`."""

    publish: Publish | None
    stored: bool = False
    refused: bool = False
    received: float = 0.0  # when its PUBLISH came, if it has a Message Expiry Interval
    # A retained one written at PUBREL: the id made in its PUBLISH's turn (its place among its
    # publisher's messages in a subscription, which orders them by id; MQTT-4.6.0-5).
    message_id: str | None = None


class HeldTotals:
    """The QoS 2 PUBLISHes all sessions hold until their PUBREL, together: how many, and their
    payload bytes (what [exactly_once] max_pending_total and max_bytes_total bound)."""

    __slots__ = ("count", "held_bytes")

    def __init__(self) -> None:
        self.count = 0
        self.held_bytes = 0


class Looked:
    """What a session's last look into each of its durable subscriptions found, by the
    subscription's `queue` (its filter and Subscriber): a pump with news looks into those
    whose look the window cut short (`cut`) and those news names alone, not those found with
    no more than it took (`dry`) until news names them again, or an acknowledgement of one
    of theirs frees a slot its dropbox has something for (delivery.py, `pump` and `acked`).
    A subscription is in one of the two at most. Two dicts, not one with a mark each: a pump
    goes through the `cut` ones alone, not through every subscription of a member of 100
    share groups (docs/benchmarks.md, "Many share groups")."""

    __slots__ = ("cut", "dry")

    def __init__(self) -> None:
        self.dry: dict[str, tuple[str, Subscriber]] = {}
        self.cut: dict[str, tuple[str, Subscriber]] = {}


class Session:
    # One per connection, for good, most of them idle devices': slots, and the sets only some
    # sessions use made at their first use (None until then: an empty set takes 216 bytes;
    # docs/benchmarks.md, "Many idle connections").
    __slots__ = (
        "_expiry",
        "_totals",
        "adding",
        "awaiting_release",
        "client_id",
        "connected",
        "entering_release",
        "held_bytes",
        "leaving",
        "looked",
        "orphans",
        "outbox",
        "persistent",
        "sent_before",
        "sent_before_repeated",
        "sent_before_taken",
        "sent_qos2_before",
        "subscriptions",
        "taken_from",
        "username",
        "will",
    )

    def __init__(
        self,
        client_id: str,
        *,
        window: int,
        queue_limit: int,
        queue_bytes: int = 0,
        totals: HeldTotals | None = None,
    ) -> None:
        self.client_id = client_id
        self.persistent = False  # expiry > 0, kept by `expiry`'s setter
        self._expiry = 0
        self.subscriptions: dict[str, SubscriptionOptions] = {}
        self.outbox: Outbox[Token] = Outbox(
            window=window, limit=queue_limit, byte_limit=queue_bytes
        )
        self.awaiting_release: dict[int, Release] = {}
        self.held_bytes = 0  # payload bytes of the PUBLISHes `awaiting_release` keeps
        self._totals = totals  # where both count too, until the session ends
        # The QoS 2 PUBLISHes read and not yet held (publishing.py, `_publish_later`), by
        # packet id: a QoS 1 one reusing an id meanwhile is refused as if it were held.
        self.entering_release: dict[int, int] | None = None
        # Share groups unsubscribed while the session held some of their messages: paused
        # (they take nothing more) until those are settled, then closed (delivery.py); with
        # the options those go out with.
        self.leaving: dict[str, SubscriptionOptions] = {}
        # New filters of SUBSCRIBEs whose disk work is not done yet (subscribing.py): counted
        # as held, so that a SUBSCRIBE of a new connection meanwhile cannot pass the cap.
        self.adding: set[str] | None = None
        # What its subscriptions on disk sent (or queued) before an UNSUBSCRIBE deleted them:
        # its acknowledgements find no lock, as expected, even once the session subscribed
        # to the same filter again (a new dropbox on the same path; delivery.py, `_left`).
        self.orphans: set[Message] | None = None
        # What its pumps' last looks found in its durable subscriptions (`Looked`); None
        # until its first pump with a durable subscription.
        self.looked: Looked | None = None
        # After a restart: the packet ids the process before sent its messages in flight
        # under, by subscription (a message's `queue`) and message id (the record's `sent`),
        # to send them again under (outbox.py). One message matching two of its filters is
        # in both dropboxes under one id, sent under two packet ids. The subscription is
        # None in a record of a boxmq that did not write it (delivery.py, `_sent_before`).
        self.sent_before: dict[tuple[str | None, str], int] = {}
        # Such a record names the copies of one message by its id alone: the packet ids of
        # its copies after the first, taken in turn under the one key (delivery.py, `_taken`).
        self.sent_before_repeated: dict[str, list[int]] = {}
        self.sent_qos2_before = NO_IDS  # those of `sent_before` sent at QoS 2
        # Whether its first pump took them, to send them in their order (delivery.py,
        # `_send_before_again`): one a dropbox refused then comes when it can, as it comes.
        self.sent_before_taken = False
        # The server (its process token) whose connection of this client was open when this
        # one took the session from the disk: it may claim messages for the session until it
        # notices, and leave them locked to it (resuming.py, `_take_back`). None for most.
        self.taken_from: str | None = None
        self.will: Will | None = None
        self.username: str | None = None
        self.connected = False

    @property
    def expiry(self) -> int:
        """Seconds after disconnect; NEVER; 0: ends with the connection."""
        return self._expiry

    @expiry.setter
    def expiry(self, seconds: int) -> None:
        # `persistent` is read per message (whether a QoS 2 PUBLISH is stored, a PUBREC
        # recorded): an attribute set here, not a property computed at each read.
        self._expiry = seconds
        self.persistent = seconds > 0

    def hold_for_release(
        self,
        packet_id: int,
        publish: Publish | None,
        *,
        stored: bool = False,
        refused: bool = False,
        received: float = 0.0,
        message_id: str | None = None,
    ) -> None:
        earlier = self.awaiting_release.get(packet_id)
        size = 0 if publish is None else held_size(publish)
        if earlier is not None and earlier.publish is not None:
            size -= held_size(earlier.publish)
        self.held_bytes += size
        totals = self._totals
        if totals is not None:
            totals.held_bytes += size
            if earlier is None:
                totals.count += 1
        self.awaiting_release[packet_id] = _new_tuple(
            Release, (publish, stored, refused, received, message_id)
        )

    def enter_release(self, packet_id: int) -> None:
        """A QoS 2 PUBLISH read, to be held once the disk work it waits for is done; a
        count, as a repeat of it may be read before it is held."""
        entering = self.entering_release
        if entering is None:
            self.entering_release = entering = {}
        entering[packet_id] = entering.get(packet_id, 0) + 1

    def entered_release(self, packet_id: int) -> None:
        """That disk work is done: the PUBLISH is held (`hold_for_release`), or refused."""
        entering = self.entering_release
        assert entering is not None
        left = entering.pop(packet_id) - 1
        if left:
            entering[packet_id] = left

    def release(self, packet_id: int) -> Release | None:
        """The PUBREL for `packet_id`: what to deliver (None: not known in this process)."""
        held = self.awaiting_release.pop(packet_id, None)
        if held is not None:
            size = 0 if held.publish is None else held_size(held.publish)
            self.held_bytes -= size
            totals = self._totals
            if totals is not None:
                totals.held_bytes -= size
                totals.count -= 1
        return held

    def stop_counting(self) -> None:
        """The session ended: what it holds leaves the totals, with the session. A PUBLISH of
        its last read still held after this (its disk work came first) counts in the
        session's own numbers only, so the totals never keep what nobody holds."""
        totals, self._totals = self._totals, None
        if totals is not None:
            totals.count -= len(self.awaiting_release)
            totals.held_bytes -= self.held_bytes

    def qos2_sent_before(self) -> list[int]:
        """The packet ids of `sent_before` (and of `sent_before_repeated`, after those) that
        the process before sent at QoS 2 (`sent_qos2_before`), in the order they were sent."""
        at_qos2 = self.sent_qos2_before
        if not at_qos2:
            return []
        left = chain(self.sent_before.values(), *self.sent_before_repeated.values())
        return [packet_id for packet_id in left if packet_id in at_qos2]

    def holds(self, text: str) -> bool:
        """Whether `text` is one of the filters the session holds: subscribing to it again
        replaces that subscription, and adds none."""
        adding = self.adding
        return text in self.subscriptions or text in self.leaving or bool(adding and text in adding)

    def held_count(self) -> int:
        """How many distinct filters the session holds (`max_subscriptions` caps it)."""
        return len(self.subscriptions) + len(self.leaving) + len(self.adding or ())
