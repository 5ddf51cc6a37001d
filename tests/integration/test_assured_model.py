"""Hypothesis: the exactly-once intake of real Boxes on real files agrees with a small model.

The machine stores messages for two queues and two topics with `assured` (new ids, repeats,
`reclaim`, bodies over `max_message_size`, an expiry, properties) and with the intake's
`assured_many` (a batch: new ids, repeats within it and of earlier ones, a body too large, a
limit crossed midway), delivers them with `deliver` and `deliver_many` (`remember`,
`must_exist`, an id twice in one batch), lists and drops what waits (`pending`,
`drop_pending`), sweeps (`Box.sweep`: `pending_ttl` and `done_ttl` run out), moves a
`ManualClock`, closes a Box and opens the root again (with another set of trusted sources,
or none), makes and ends durable subscriptions (plain ones and a share group of two
members) in either Box, and moves a sender to the other Box.

A second Box on the same root stands in for another process: as docs/pubsub.md asks ("One
process per sender"), each sender takes its steps in one Box at a time, and when it moves to
the other one (after the first one stopped, or not), `pending(source)` is called there as
the MQTT server does on resuming a session it does not know: what it stored in the first
Box then waits for its `deliver` in this one, what left working/ is pending no more, and
ids it delivered there are not read again (a late repeat of one is a new message here,
unless this Box read its marker at its first use). Each Box's books hold what it read from
the files at its first use, so each one's limits and sweeps also count and drop what the
other stored before then, and `pending(source)` reads that sender's files again.

The model keeps each Box's books (what is pending, since when, and which ids are remembered,
until when), the subscriptions, and the files: after every step the folders are read back
and compared with it:

- the messages waiting in working/ (a queue's, or the topics' `.incoming/working/`) are the
  ones stored and neither delivered nor dropped;
- every message stored for a queue is in its queue at most once, and exactly once after its
  `deliver` returned True, with its body, priority and properties (a repeat, a restart or
  the other Box sends nothing again);
- a message stored for a topic has, after its `deliver` returned True, one copy in each
  subscription (a share group counting once) that matched its topic when `deliver` was
  called, made by either Box, and none anywhere else: not in one made after, nor a second
  one after a repeat, a restart or the other Box's steps; with its body, priority,
  properties, topic and the QoS the subscription was granted then;
- the "delivered" markers under `.exactly-once/` are those of the ids delivered and
  remembered, and no marker outlives a new message stored under its id (a restart would
  take that message for delivered and send it without its `deliver`);
- each call, and each element of a batch, returns what the model says, or the documented
  error: ResourceConstraint past a per-source or total limit, MessageTooLarge, NotAllowed
  for a source the Box does not trust, ItemNotFound for `must_exist` (not for an id whose
  marker of the last done_ttl says it was sent, by either Box: that is done). A batch tells of each
  element what `assured` or `deliver` would, called for the elements one after the other.

Where a Box reads a time off the files (a restart's books: a pending file's ctime, a
marker's mtime; the sweep of markers by their mtime), the model reads the same: the manual
clock starts at the wall clock's time so that the two compare. Left out: failing file
systems and crashes (tests/integration/test_assured_intake.py), memory subscriptions and
No Local (the pubsub model's), and two Boxes taking one sender's steps at once (which the
docs rule out).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import event
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from tests.integration.test_embedded_model import MODEL_SETTINGS

import boxmq
from boxmq.client.assured import AssuredMessage
from boxmq.clock import ManualClock
from boxmq.core import ExactlyOnceLimits
from boxmq.core.topics import parse_filter
from boxmq.errors import ItemNotFound, MessageTooLarge, NotAllowed, ResourceConstraint
from boxmq.model import QOS, SOURCE, SOURCE_MESSAGE_ID, Envelope, timestamp_of
from boxmq.store.layout import State, queue_path
from boxmq.store.names import decode_lenient
from boxmq.store.topics import (
    incoming_working,
    subscription_folders,
    subscription_key,
    subscription_path,
)

QUEUES = ["q1", "q2"]
TOPICS = ["t/a", "t/b"]
DESTINATIONS = [*QUEUES, *TOPICS]
SOURCES = ["s0", "s1", "s2"]
FIRST_OWNER = {"s0": 0, "s1": 0, "s2": 1}  # which Box takes each sender's steps at first
TRUSTED = frozenset({"s0", "s2"})  # when a Box trusts only some: s1 gets NotAllowed
MSG_IDS = ["1", "2"]
MAX_SIZE = 8
LIMITS = {"per_source": 2, "total": 3, "bytes_per_source": 12, "bytes_total": 20}
PENDING_TTL = 20.0
# (filter, subscriber) -> the topics it matches; the two members share one dropbox
SUBSCRIPTIONS = {
    ("t/#", "all"): set(TOPICS),
    ("t/a", "only-a"): {"t/a"},
    ("$share/g/t/+", "w1"): set(TOPICS),
    ("$share/g/t/+", "w2"): set(TOPICS),
}

Key = tuple[str, str]  # (source, msg_id)
Outcome = bool | type[Exception]


@dataclass
class Stored:
    """One message `assured` stored."""

    key: Key
    queue: str | None
    topic: str | None
    body: bytes
    priority: int
    properties: dict[str, str]
    expiration_ms: int
    made: int  # the model's count of stores and subscriptions then


@dataclass
class Pending:
    size: int
    since: float
    message_id: str  # the file's


@dataclass
class Books:
    """What one Box's intake knows: read from the files at its first use, then its own."""

    trusted: frozenset[str] | None = None
    restored: bool = False
    pending: dict[Key, Pending] = field(default_factory=dict)
    done: dict[Key, float] = field(default_factory=dict)  # remembered until

    def state(self, key: Key, now: float) -> str:
        if key in self.pending:
            return "stored"
        return "delivered" if self.done.get(key, float("-inf")) > now else "new"

    def count(self, source: str | None = None) -> int:
        return sum(1 for key in self.pending if source is None or key[0] == source)

    def size(self, source: str | None = None) -> int:
        return sum(p.size for key, p in self.pending.items() if source is None or key[0] == source)


@dataclass
class Subscription:
    """A durable subscription's dropbox (a share group's is its members')."""

    topics: set[str]  # those its filter matches
    qos: int
    members: set[str]
    made: int  # the model's count of stores and subscriptions then
    copies: dict[str, int] = field(default_factory=dict)  # message id -> its copy's QoS


def marker_name(key: Key) -> str:
    return hashlib.sha256(f"{key[0]}\0{key[1]}".encode()).hexdigest()


def outcome_name(outcome: object) -> str:
    return outcome.__name__ if isinstance(outcome, type) else str(outcome)


@st.composite
def messages(draw: st.DrawFn, source: str) -> AssuredMessage:
    """The arguments of one `assured` of `source`."""
    to = draw(st.sampled_from(DESTINATIONS))
    return AssuredMessage(
        source,
        draw(st.sampled_from(MSG_IDS)),
        draw(st.binary(max_size=MAX_SIZE + 1)),
        queue=to if to in QUEUES else None,
        topic=None if to in QUEUES else to,
        priority=draw(st.sampled_from([4, 9])),
        properties=draw(st.sampled_from([None, {"tenant": "acme"}])),
        reclaim=draw(st.booleans()),
        expires_in=draw(st.sampled_from([None, None, 5.0])),
    )


def _kind(error: object) -> type:
    """The class of boxmq.errors `error` is: the intake's refusals are subclasses that can say
    their text in a door's words (UntrustedSource for NotAllowed, SourceOverLimit)."""
    return next(c for c in type(error).__mro__ if c.__module__ == "boxmq.errors")


class AssuredModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="boxmq-assured-")
        self.clock = ManualClock(time.time())  # file times and the clock compare
        self.done_ttl = 30.0
        self.boxes: list[boxmq.Box] = []
        self.books = [Books(), Books()]
        self.owner = dict(FIRST_OWNER)
        self.stored: dict[str, Stored] = {}  # by the file's message id
        self.waiting: set[str] = set()  # in working/
        self.delivered: set[str] = set()  # sent on to their queue
        self.markers: set[Key] = set()
        self.subscriptions: dict[str, Subscription] = {}  # by its dropbox's path
        self.count = 0  # of stores and subscriptions made, to tell which came first

    def _open(self, trusted: frozenset[str] | None) -> boxmq.Box:
        limits = ExactlyOnceLimits(
            max_pending_per_source=LIMITS["per_source"],
            max_pending_total=LIMITS["total"],
            max_bytes_per_source=LIMITS["bytes_per_source"],
            max_bytes_total=LIMITS["bytes_total"],
            max_message_size=MAX_SIZE,
            trusted_sources=trusted,
            pending_ttl=PENDING_TTL,
            done_ttl=self.done_ttl,
        )
        return boxmq.open(self.root, fsync="never", clock=self.clock, exactly_once=limits, spares=0)

    @initialize(
        done_ttl=st.sampled_from([30.0, 30.0, 8.0, 0.0]),
        trusted=st.sampled_from([None, None, TRUSTED]),
    )
    def start(self, done_ttl: float, trusted: frozenset[str] | None) -> None:
        self.done_ttl = done_ttl
        self.boxes = [self._open(trusted), self._open(trusted)]
        self.books = [Books(trusted), Books(trusted)]
        for queue in QUEUES:
            self.boxes[0].queue(queue)

    def teardown(self) -> None:
        for box in self.boxes:
            box.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def now(self) -> float:
        return self.clock.now()

    def made(self) -> int:
        self.count += 1
        return self.count

    # -- the files ------------------------------------------------------------------------------

    def files(self, state: State) -> list[tuple[str, Envelope, str | None]]:
        """(path, envelope, queue) of each assured message in `state` of the queues, and in
        working/ also those of the topics waiting for their `deliver` (queue None)."""
        folders: list[tuple[str, str | None]] = [
            (os.path.join(queue_path(self.root, queue), state.value), queue) for queue in QUEUES
        ]
        if state is State.WORKING:
            folders.append((incoming_working(self.root), None))
        found = []
        for folder, queue in folders:
            if not os.path.isdir(folder):
                continue
            with os.scandir(folder) as entries:
                for entry in entries:
                    envelope, reason = decode_lenient(entry.name)
                    if reason is None and envelope.property_value(SOURCE) is not None:
                        found.append((entry.path, envelope, queue))
        return found

    def marker_path(self, key: Key) -> str:
        return os.path.join(self.root, ".exactly-once", marker_name(key))

    def markers_on_disk(self) -> dict[str, float]:
        folder = os.path.join(self.root, ".exactly-once")
        if not os.path.isdir(folder):
            return {}
        return {
            entry.name: entry.stat().st_mtime
            for entry in os.scandir(folder)
            if not entry.name.startswith(".")
        }

    @staticmethod
    def key_of(envelope: Envelope) -> Key:
        return (
            str(envelope.property_value(SOURCE)),
            str(envelope.property_value(SOURCE_MESSAGE_ID)),
        )

    def restore(self, side: int) -> None:
        """What the intake reads at its first use: markers, then what waits in working/."""
        books = self.books[side]
        if books.restored:
            return
        books.restored = True
        on_disk = self.markers_on_disk()
        for key in self.markers:
            if self.done_ttl > 0:
                books.done[key] = on_disk[marker_name(key)] + self.done_ttl
        for path, envelope, _ in self.files(State.WORKING):
            key = self.key_of(envelope)
            assert key not in self.markers, (
                f"{key} waits in working/ under a marker: a restart sends it without deliver"
            )
            stat = os.stat(path)
            books.done.pop(key, None)
            books.pending[key] = Pending(stat.st_size, stat.st_ctime, envelope.message_id)

    def reread(self, side: int, source: str) -> None:
        """What `pending(source)` reads again in a Box that read the files before."""
        books = self.books[side]
        for key, pending in list(books.pending.items()):
            if key[0] == source and pending.message_id not in self.waiting:
                del books.pending[key]
        known = {pending.message_id for pending in books.pending.values()}
        for path, envelope, _ in self.files(State.WORKING):
            key = self.key_of(envelope)
            if key[0] == source and envelope.message_id not in known and key not in books.pending:
                assert key not in self.markers, key
                stat = os.stat(path)
                books.done.pop(key, None)
                books.pending[key] = Pending(stat.st_size, stat.st_ctime, envelope.message_id)

    # -- the two steps ------------------------------------------------------------------------

    def expect_assured(self, side: int, message: AssuredMessage) -> Outcome:
        """What `assured` of `message` tells, and the books after it (the file's message id
        is filled in once it is found)."""
        books, now = self.books[side], self.now()
        key = (message.source, message.msg_id)
        if books.trusted is not None and message.source not in books.trusted:
            return NotAllowed
        state = books.state(key, now)
        if message.reclaim and state == "delivered":
            state = "new"
        if state != "new":
            return False
        size = len(message.body)
        if size > MAX_SIZE:
            return MessageTooLarge
        if (
            books.count(message.source) + 1 > LIMITS["per_source"]
            or books.size(message.source) + size > LIMITS["bytes_per_source"]
            or books.count() + 1 > LIMITS["total"]
            or books.size() + size > LIMITS["bytes_total"]
        ):
            return ResourceConstraint
        books.done.pop(key, None)
        books.pending[key] = Pending(size, now, "")
        # A new message under the id: the marker of the last one no longer stands for it.
        self.markers.discard(key)
        return True

    def store(self, side: int, batch: list[AssuredMessage]) -> None:
        """`assured` (one message) or `assured_many` (several) in Box `side`."""
        self.restore(side)
        now = self.now()
        expected = [self.expect_assured(side, message) for message in batch]
        before = {envelope.message_id for _, envelope, _ in self.files(State.WORKING)}
        results: list[Outcome]
        if len(batch) == 1:
            message = batch[0]
            try:
                results = [
                    self.boxes[side].assured(
                        message.source,
                        message.msg_id,
                        message.body,
                        queue=message.queue,
                        topic=message.topic,
                        priority=message.priority,
                        properties=message.properties,
                        reclaim=message.reclaim,
                        expires_in=message.expires_in,
                    )
                ]
            except (MessageTooLarge, ResourceConstraint, NotAllowed) as error:
                results = [_kind(error)]
        else:
            outcomes = self.boxes[side].intake.assured_many(batch)
            results = [o if isinstance(o, bool) else _kind(o) for o in outcomes]
        for result in results:
            event(f"assured{'_many' if len(batch) > 1 else ''}: {outcome_name(result)}")
        assert results == expected, (batch, results, expected)
        made = {
            self.key_of(envelope): envelope
            for _, envelope, _ in self.files(State.WORKING)
            if envelope.message_id not in before
        }
        new = [message for message, outcome in zip(batch, expected, strict=True) if outcome is True]
        assert sorted(made) == sorted((m.source, m.msg_id) for m in new), (made, new)
        for message in new:
            key = (message.source, message.msg_id)
            message_id = made[key].message_id
            expiration = int((now + message.expires_in) * 1000) if message.expires_in else 0
            self.stored[message_id] = Stored(
                key,
                message.queue,
                message.topic,
                message.body,
                message.priority,
                {name: str(value) for name, value in (message.properties or {}).items()},
                expiration,
                self.made(),
            )
            self.waiting.add(message_id)
            self.books[side].pending[key].message_id = message_id

    @rule(data=st.data(), source=st.sampled_from(SOURCES))
    def assured(self, data: st.DataObject, source: str) -> None:
        self.store(self.owner[source], [data.draw(messages(source))])

    @rule(data=st.data(), size=st.integers(2, 4))
    def assured_many(self, data: st.DataObject, size: int) -> None:
        """One batch of the senders of one Box (as the MQTT server makes of a client's
        window of QoS 2 PUBLISHes)."""
        side = data.draw(st.sampled_from(sorted(set(self.owner.values()))))
        mine = [source for source in SOURCES if self.owner[source] == side]
        batch = [data.draw(messages(data.draw(st.sampled_from(mine)))) for _ in range(size)]
        self.store(side, batch)

    def expect_deliver(self, side: int, key: Key, remember: bool, must_exist: bool) -> Outcome:
        books, now = self.books[side], self.now()
        state = books.state(key, now)
        if state == "delivered":
            return False
        if state != "stored":
            if self.marked_lately(key, now):  # delivered by the other Box: done
                event("deliver: done as its marker says")
                return False
            return ItemNotFound if must_exist else False
        pending = books.pending.pop(key)
        if pending.message_id not in self.waiting and key in self.markers:
            # sent by the other Box, whose marker says so: done, its marker kept
            event("deliver: sent by the other Box")
            if remember and self.done_ttl > 0:
                books.done[key] = now + self.done_ttl
            return False
        if pending.message_id not in self.waiting:
            # swept away by the other Box: neither pending nor delivered
            event("deliver: its file was gone")
            books.done.pop(key, None)
            self.markers.discard(key)
            return ItemNotFound if must_exist else False
        self.waiting.discard(pending.message_id)
        stored = self.stored[pending.message_id]
        if stored.queue is not None:
            self.delivered.add(pending.message_id)
        else:
            copies = 0
            for subscription in self.subscriptions.values():
                if stored.topic in subscription.topics:
                    copies += 1
                    subscription.copies[pending.message_id] = subscription.qos
                    if subscription.made > stored.made:
                        event("deliver: to a subscription made since its assured")
            event(f"deliver: {copies} copies")
        if remember:
            self.markers.add(key)
            if self.done_ttl > 0:
                books.done[key] = now + self.done_ttl
        else:
            self.markers.discard(key)
        return True

    def marked_lately(self, key: Key, now: float) -> bool:
        """Whether a marker of `key` of the last done_ttl is on disk (its message sent: no
        marker outlives a new message under its id), which answers a `deliver` of it as done
        in a Box whose books do not know it."""
        if key not in self.markers or self.done_ttl <= 0:
            return False
        return now - self.markers_on_disk()[marker_name(key)] < self.done_ttl

    def send(self, side: int, keys: list[Key], remember: bool, must_exist: bool) -> None:
        """`deliver` (one key) or `deliver_many` (several) in Box `side`."""
        self.restore(side)
        expected = [self.expect_deliver(side, key, remember, must_exist) for key in keys]
        results: list[Outcome]
        if len(keys) == 1:
            try:
                results = [
                    self.boxes[side].deliver(*keys[0], remember=remember, must_exist=must_exist)
                ]
            except ItemNotFound:
                results = [ItemNotFound]
        else:
            outcomes = self.boxes[side].intake.deliver_many(
                keys, remember=remember, must_exist=must_exist
            )
            results = [o if isinstance(o, bool) else type(o) for o in outcomes]
        for result in results:
            event(f"deliver{'_many' if len(keys) > 1 else ''}: {outcome_name(result)}")
        assert results == expected, (keys, results, expected)

    @rule(
        source=st.sampled_from(SOURCES),
        msg_id=st.sampled_from(MSG_IDS),
        remember=st.sampled_from([True, True, False]),
        must_exist=st.booleans(),
    )
    def deliver(self, source: str, msg_id: str, remember: bool, must_exist: bool) -> None:
        self.send(self.owner[source], [(source, msg_id)], remember, must_exist)

    @rule(
        data=st.data(),
        size=st.integers(2, 4),
        remember=st.sampled_from([True, True, False]),
        must_exist=st.booleans(),
    )
    def deliver_many(
        self, data: st.DataObject, size: int, remember: bool, must_exist: bool
    ) -> None:
        side = data.draw(st.sampled_from(sorted(set(self.owner.values()))))
        mine = [source for source in SOURCES if self.owner[source] == side]
        keys = [
            (data.draw(st.sampled_from(mine)), data.draw(st.sampled_from(MSG_IDS)))
            for _ in range(size)
        ]
        self.send(side, keys, remember, must_exist)

    def check_pending(self, side: int, source: str) -> None:
        """`pending` reads the files of `source` again (a sender arriving from another
        process): what waits for it there is pending here, what left is not."""
        if self.books[side].restored:
            self.reread(side, source)
        self.restore(side)
        listed = self.boxes[side].pending(source)
        expected = [msg_id for (owner, msg_id) in self.books[side].pending if owner == source]
        assert sorted(listed) == sorted(expected), (source, listed, expected)

    @rule(side=st.sampled_from([0, 1]), source=st.sampled_from(SOURCES))
    def pending(self, side: int, source: str) -> None:
        self.check_pending(side, source)

    @rule(source=st.sampled_from(SOURCES))
    def drop_pending(self, source: str) -> None:
        side = self.owner[source]
        self.restore(side)
        books = self.books[side]
        keys = [key for key in books.pending if key[0] == source]
        for key in keys:
            self.waiting.discard(books.pending.pop(key).message_id)
        assert self.boxes[side].drop_pending(source) == len(keys)

    @rule(source=st.sampled_from(SOURCES), stop=st.booleans())
    def move(self, source: str, stop: bool) -> None:
        """The sender goes on in the other Box, after the first one stopped (and started
        again) or while it runs on: its session is resumed there, which asks `pending`."""
        side = self.owner[source]
        if stop:
            self.reopen_box(side, self.books[side].trusted)
        self.owner[source] = 1 - side
        event(f"moved{' (the first one stopped)' if stop else ''}")
        self.check_pending(1 - side, source)

    # -- subscriptions --------------------------------------------------------------------------

    def path_of(self, filter: str, subscriber: str) -> str:
        parsed = parse_filter(filter)
        key = subscription_key(parsed.share_group, None if parsed.shared else subscriber)
        return subscription_path(self.root, parsed.filter, key)

    @rule(
        side=st.sampled_from([0, 1]),
        which=st.sampled_from(sorted(SUBSCRIPTIONS)),
        qos=st.sampled_from([1, 2]),
    )
    def subscribe(self, side: int, which: tuple[str, str], qos: int) -> None:
        filter, subscriber = which
        path = self.boxes[side].topics.attach_dropbox(filter, subscriber, qos=qos)
        assert path == self.path_of(filter, subscriber)
        subscription = self.subscriptions.get(path)
        if subscription is None:
            made = self.made()
            self.subscriptions[path] = Subscription(SUBSCRIPTIONS[which], qos, {subscriber}, made)
        elif filter.startswith("$share/"):  # a group's copies: the highest QoS a member has
            subscription.qos = max(subscription.qos, qos)
            subscription.members.add(subscriber)
        else:
            subscription.qos = qos

    @rule(side=st.sampled_from([0, 1]), which=st.sampled_from(sorted(SUBSCRIPTIONS)))
    def unsubscribe(self, side: int, which: tuple[str, str]) -> None:
        filter, subscriber = which
        path = self.path_of(filter, subscriber)
        subscription = self.subscriptions.get(path)
        expected = subscription is not None and subscriber in subscription.members
        if subscription is not None and expected:
            subscription.members.discard(subscriber)
            if not subscription.members:
                del self.subscriptions[path]
        assert self.boxes[side].topics.unsubscribe(filter, subscriber) == expected

    # -- time and processes ---------------------------------------------------------------------

    @rule(side=st.sampled_from([0, 1]))
    def sweep(self, side: int) -> None:
        """`Box.sweep`: pending past pending_ttl dropped, remembered ids and markers past
        done_ttl forgotten (the other Box's too: it reads them all). A queue's working/
        sweep also deletes the messages past pending_ttl that its books do not know (by
        their id's time, then their ctime); the topics' `.incoming/working/` has no such
        sweep."""
        self.restore(side)
        books, now = self.books[side], self.now()
        for path, envelope, queue in self.files(State.WORKING):
            made = timestamp_of(envelope.message_id)  # no stat of one made since
            old = made is None or made <= (now - PENDING_TTL) * 1000
            if queue is not None and old and now - os.stat(path).st_ctime > PENDING_TTL:
                event("swept from working/")
                self.waiting.discard(envelope.message_id)
        for key, pending in list(books.pending.items()):
            if pending.since + PENDING_TTL <= now:
                event("pending_ttl ran out")
                del books.pending[key]
                self.waiting.discard(pending.message_id)
        for key, until in list(books.done.items()):
            if until <= now:
                del books.done[key]
        on_disk = self.markers_on_disk()
        for key in list(self.markers):
            if on_disk[marker_name(key)] < now - self.done_ttl:
                event("marker forgotten")
                self.markers.discard(key)
        self.boxes[side].sweep()

    @rule(seconds=st.sampled_from([1.0, 4.0, 9.0, 25.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def reopen_box(self, side: int, trusted: frozenset[str] | None) -> None:
        self.boxes[side].close()
        self.boxes[side] = self._open(trusted)
        self.books[side] = Books(trusted)

    @rule(side=st.sampled_from([0, 0, 1]), trusted=st.sampled_from([None, TRUSTED]))
    def reopen(self, side: int, trusted: frozenset[str] | None) -> None:
        """Close a Box and open the root again: its books are read from the files again."""
        self.reopen_box(side, trusted)

    # -- checks -------------------------------------------------------------------------------

    def check_copy(self, path: str, envelope: Envelope, stored: Stored) -> None:
        with open(path, "rb") as src:
            assert src.read() == stored.body
        assert envelope.priority == stored.priority
        assert envelope.expiration == stored.expiration_ms
        assert envelope.user_properties() == stored.properties

    @invariant()
    def files_agree(self) -> None:
        if not self.boxes:
            return
        waiting = {envelope.message_id for _, envelope, _ in self.files(State.WORKING)}
        assert waiting == self.waiting, (waiting, self.waiting)
        out: list[str] = []
        for state in State:
            if state is State.WORKING:
                continue
            for path, envelope, queue in self.files(state):
                out.append(envelope.message_id)
                stored = self.stored[envelope.message_id]
                assert queue == stored.queue
                self.check_copy(path, envelope, stored)
                assert self.key_of(envelope) == stored.key
        assert sorted(out) == sorted(set(out)), "a message was sent twice"
        assert set(out) == self.delivered, (set(out), self.delivered)
        markers = set(self.markers_on_disk())
        assert markers == {marker_name(key) for key in self.markers}, (markers, self.markers)

    @invariant()
    def subscriptions_agree(self) -> None:
        if not self.boxes:
            return
        assert set(subscription_folders(self.root)) == set(self.subscriptions)
        for path, subscription in self.subscriptions.items():
            copies: list[tuple[str, int]] = []
            for state in State:
                folder = os.path.join(path, state.value)
                if not os.path.isdir(folder):
                    continue
                with os.scandir(folder) as entries:
                    for entry in entries:
                        if entry.name.startswith("."):
                            assert state is State.WORKING, entry  # its .exactly-once/
                            assert not os.listdir(entry.path), entry  # empty between steps
                            continue
                        envelope, reason = decode_lenient(entry.name)
                        assert reason is None, (entry.path, reason)
                        stored = self.stored[envelope.message_id]
                        assert envelope.topic == stored.topic
                        assert envelope.property_value(SOURCE) is None
                        self.check_copy(entry.path, envelope, stored)
                        qos = envelope.property_value(QOS)
                        copies.append((envelope.message_id, qos if isinstance(qos, int) else 0))
            assert len(copies) == len(dict(copies)), f"{path}: a copy was sent twice: {copies}"
            assert dict(copies) == subscription.copies, (path, copies, subscription.copies)


# About 10 to 15 s on a quiet machine; MODEL_EXAMPLES=2000 for a longer hunt.
AssuredModel.TestCase.settings = MODEL_SETTINGS
TestAssuredModel = AssuredModel.TestCase
