"""Hypothesis: the exactly-once intake of real Boxes on real files agrees with a small model.

The machine stores messages for two queues with `assured` (new ids, repeats, `reclaim`,
bodies over `max_message_size`, an expiry, properties), delivers them with `deliver`
(`remember`, `must_exist`), lists and drops what waits (`pending`, `drop_pending`), sweeps
(`Box.sweep`: `pending_ttl` and `done_ttl` run out), moves a `ManualClock`, and closes a Box
and opens the root again. A second Box on the same root stands in for another process: as
docs/pubsub.md asks ("One process per sender"), it takes the steps of its own sender, and
each Box's books hold what it read from the files at its first use, so each one's limits and
sweeps also count and drop what the other stored before then, and `pending(source)` reads
that sender's files again.

The model keeps each Box's books (what is pending, since when, and which ids are remembered,
until when) and the files: after every step the folders are read back and compared with it:

- the messages waiting in working/ are the ones stored and neither delivered nor dropped;
- every stored message is in its queue at most once, and exactly once after its `deliver`
  returned True, with its body, priority and properties (a repeat, a restart or the other
  Box sends nothing again);
- the "delivered" markers under `.exactly-once/` are those of the ids delivered and
  remembered, and no marker outlives a new message stored under its id (a restart would
  take that message for delivered and send it without its `deliver`);
- each call returns what the model says, or raises the documented error: ResourceConstraint
  past a per-source or total limit, MessageTooLarge, ItemNotFound for `must_exist`.

Where a Box reads a time off the files (a restart's books: a pending file's ctime, a
marker's mtime; the sweep of markers by their mtime), the model reads the same: the manual
clock starts at the wall clock's time so that the two compare. Left out: topics (the fan-out
has its own tests), `assured_many`/`deliver_many`, trusted sources, failing file systems and
crashes (tests/integration/test_assured_intake.py), and a sender taking its steps in the
other Box (only its `pending` is read there).
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
from boxmq.clock import ManualClock
from boxmq.core import ExactlyOnceLimits
from boxmq.errors import ItemNotFound, MessageTooLarge, ResourceConstraint
from boxmq.model import SOURCE, SOURCE_MESSAGE_ID, Envelope, timestamp_of
from boxmq.store.layout import State, queue_path
from boxmq.store.names import decode_lenient

QUEUES = ["q1", "q2"]
SOURCES = {0: ["s0", "s1"], 1: ["s2"]}  # each Box's own senders
MSG_IDS = ["1", "2"]
MAX_SIZE = 8
LIMITS = {"per_source": 2, "total": 3, "bytes_per_source": 12, "bytes_total": 20}
PENDING_TTL = 20.0

Key = tuple[str, str]  # (source, msg_id)


@dataclass
class Stored:
    """One message `assured` stored."""

    key: Key
    queue: str
    body: bytes
    priority: int
    properties: dict[str, str]
    expiration_ms: int


@dataclass
class Pending:
    size: int
    since: float
    message_id: str  # the file's


@dataclass
class Books:
    """What one Box's intake knows: read from the files at its first use, then its own."""

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


def marker_name(key: Key) -> str:
    return hashlib.sha256(f"{key[0]}\0{key[1]}".encode()).hexdigest()


class AssuredModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="boxmq-assured-")
        self.clock = ManualClock(time.time())  # file times and the clock compare
        self.done_ttl = 30.0
        self.boxes: list[boxmq.Box] = []
        self.books = [Books(), Books()]
        self.stored: dict[str, Stored] = {}  # by the file's message id
        self.waiting: set[str] = set()  # in working/
        self.delivered: set[str] = set()  # sent on to their queue
        self.markers: set[Key] = set()

    def _open(self) -> boxmq.Box:
        limits = ExactlyOnceLimits(
            max_pending_per_source=LIMITS["per_source"],
            max_pending_total=LIMITS["total"],
            max_bytes_per_source=LIMITS["bytes_per_source"],
            max_bytes_total=LIMITS["bytes_total"],
            max_message_size=MAX_SIZE,
            pending_ttl=PENDING_TTL,
            done_ttl=self.done_ttl,
        )
        return boxmq.open(self.root, fsync="never", clock=self.clock, exactly_once=limits, spares=0)

    @initialize(done_ttl=st.sampled_from([30.0, 30.0, 8.0, 0.0]))
    def start(self, done_ttl: float) -> None:
        self.done_ttl = done_ttl
        self.boxes = [self._open(), self._open()]
        for queue in QUEUES:
            self.boxes[0].queue(queue)

    def teardown(self) -> None:
        for box in self.boxes:
            box.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def now(self) -> float:
        return self.clock.now()

    # -- the files ------------------------------------------------------------------------------

    def files(self, state: State) -> list[tuple[str, Envelope, str]]:
        """(path, envelope, queue) of each assured message in `state` of the queues."""
        found = []
        for queue in QUEUES:
            folder = os.path.join(queue_path(self.root, queue), state.value)
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
            key = (
                str(envelope.property_value(SOURCE)),
                str(envelope.property_value(SOURCE_MESSAGE_ID)),
            )
            assert key not in self.markers, (
                f"{key} waits in working/ under a marker: a restart sends it without deliver"
            )
            stat = os.stat(path)
            books.done.pop(key, None)
            books.pending[key] = Pending(stat.st_size, stat.st_ctime, envelope.message_id)

    # -- the two steps ------------------------------------------------------------------------

    @rule(
        data=st.data(),
        msg_id=st.sampled_from(MSG_IDS),
        body=st.binary(max_size=MAX_SIZE + 1),
        queue=st.sampled_from(QUEUES),
        priority=st.sampled_from([4, 9]),
        props=st.sampled_from([{}, {"tenant": "acme"}]),
        reclaim=st.booleans(),
        expires_in=st.sampled_from([None, None, 5.0]),
    )
    def assured(
        self,
        data: st.DataObject,
        msg_id: str,
        body: bytes,
        queue: str,
        priority: int,
        props: dict[str, str],
        reclaim: bool,
        expires_in: float | None,
    ) -> None:
        side = data.draw(st.sampled_from([0, 0, 1]))
        source = data.draw(st.sampled_from(SOURCES[side]))
        key = (source, msg_id)
        self.restore(side)
        books, now = self.books[side], self.now()
        state = books.state(key, now)
        if reclaim and state == "delivered":
            state = "new"
        expected: type[Exception] | bool = state == "new"
        if state == "new":
            size = len(body)
            if size > MAX_SIZE:
                expected = MessageTooLarge
            elif (
                books.count(source) + 1 > LIMITS["per_source"]
                or books.size(source) + size > LIMITS["bytes_per_source"]
                or books.count() + 1 > LIMITS["total"]
                or books.size() + size > LIMITS["bytes_total"]
            ):
                expected = ResourceConstraint
        before = {envelope.message_id for _, envelope, _ in self.files(State.WORKING)}
        try:
            result: bool | type[Exception] = self.boxes[side].assured(
                source,
                msg_id,
                body,
                queue=queue,
                priority=priority,
                properties=props or None,
                reclaim=reclaim,
                expires_in=expires_in,
            )
        except (MessageTooLarge, ResourceConstraint) as error:
            result = type(error)
        event(f"assured: {result if isinstance(result, bool) else result.__name__}")
        assert result == expected, (key, result, expected)
        if result is not True:
            return
        made = [
            envelope
            for _, envelope, _ in self.files(State.WORKING)
            if envelope.message_id not in before
        ]
        assert len(made) == 1, made
        message_id = made[0].message_id
        expiration = int((now + expires_in) * 1000) if expires_in else 0
        self.stored[message_id] = Stored(key, queue, body, priority, props, expiration)
        self.waiting.add(message_id)
        books.done.pop(key, None)
        books.pending[key] = Pending(len(body), now, message_id)
        # A new message under the id: the marker of the last one no longer stands for it.
        self.markers.discard(key)

    @rule(
        data=st.data(),
        msg_id=st.sampled_from(MSG_IDS),
        remember=st.sampled_from([True, True, False]),
        must_exist=st.booleans(),
    )
    def deliver(self, data: st.DataObject, msg_id: str, remember: bool, must_exist: bool) -> None:
        side = data.draw(st.sampled_from([0, 0, 1]))
        source = data.draw(st.sampled_from(SOURCES[side]))
        key = (source, msg_id)
        self.restore(side)
        books, now = self.books[side], self.now()
        state = books.state(key, now)
        expected: bool | type[Exception]
        if state == "stored":
            pending = books.pending.pop(key)
            if pending.message_id in self.waiting:
                expected = True
                self.waiting.discard(pending.message_id)
                self.delivered.add(pending.message_id)
                if remember:
                    self.markers.add(key)
                    if self.done_ttl > 0:
                        books.done[key] = now + self.done_ttl
                else:
                    self.markers.discard(key)
            else:  # swept away by the other Box: neither pending nor delivered
                event("deliver: its file was gone")
                expected = ItemNotFound if must_exist else False
                books.done.pop(key, None)
                self.markers.discard(key)
        elif state == "delivered":
            expected = False
        else:
            expected = ItemNotFound if must_exist else False
        try:
            result: bool | type[Exception] = self.boxes[side].deliver(
                source, msg_id, remember=remember, must_exist=must_exist
            )
        except ItemNotFound:
            result = ItemNotFound
        event(f"deliver: {result if isinstance(result, bool) else result.__name__}")
        assert result == expected, (key, result, expected)

    @rule(side=st.sampled_from([0, 1]), source=st.sampled_from(["s0", "s1", "s2"]))
    def pending(self, side: int, source: str) -> None:
        """`pending` reads the files of `source` again (a sender arriving from another
        process): what waits for it there is pending here, what left is not."""
        books = self.books[side]
        if books.restored:
            for key, pending in list(books.pending.items()):
                if key[0] == source and pending.message_id not in self.waiting:
                    del books.pending[key]
            known = {pending.message_id for pending in books.pending.values()}
            for path, envelope, _ in self.files(State.WORKING):
                key = (
                    str(envelope.property_value(SOURCE)),
                    str(envelope.property_value(SOURCE_MESSAGE_ID)),
                )
                if (
                    key[0] == source
                    and envelope.message_id not in known
                    and key not in books.pending
                ):
                    assert key not in self.markers, key
                    stat = os.stat(path)
                    books.done.pop(key, None)
                    books.pending[key] = Pending(stat.st_size, stat.st_ctime, envelope.message_id)
        self.restore(side)
        listed = self.boxes[side].pending(source)
        expected = [msg_id for (owner, msg_id) in self.books[side].pending if owner == source]
        assert sorted(listed) == sorted(expected), (source, listed, expected)

    @rule(data=st.data())
    def drop_pending(self, data: st.DataObject) -> None:
        side = data.draw(st.sampled_from([0, 1]))
        source = data.draw(st.sampled_from(SOURCES[side]))
        self.restore(side)
        books = self.books[side]
        keys = [key for key in books.pending if key[0] == source]
        for key in keys:
            self.waiting.discard(books.pending.pop(key).message_id)
        assert self.boxes[side].drop_pending(source) == len(keys)

    # -- time and processes ---------------------------------------------------------------------

    @rule(side=st.sampled_from([0, 1]))
    def sweep(self, side: int) -> None:
        """`Box.sweep`: pending past pending_ttl dropped, remembered ids and markers past
        done_ttl forgotten (the other Box's too: it reads them all). working/'s sweep also
        deletes the messages past pending_ttl that its books do not know (by their id's
        time, then their ctime)."""
        self.restore(side)
        books, now = self.books[side], self.now()
        for path, envelope, _ in self.files(State.WORKING):
            made = timestamp_of(envelope.message_id)  # no stat of one made since
            old = made is None or made <= (now - PENDING_TTL) * 1000
            if old and now - os.stat(path).st_ctime > PENDING_TTL:
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

    @rule(side=st.sampled_from([0, 0, 1]))
    def reopen(self, side: int) -> None:
        """Close a Box and open the root again: its books are read from the files again."""
        self.boxes[side].close()
        self.boxes[side] = self._open()
        self.books[side] = Books()

    # -- checks -------------------------------------------------------------------------------

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
                with open(path, "rb") as src:
                    assert src.read() == stored.body
                assert envelope.priority == stored.priority
                assert envelope.expiration == stored.expiration_ms
                assert envelope.user_properties() == stored.properties
                key = (envelope.property_value(SOURCE), envelope.property_value(SOURCE_MESSAGE_ID))
                assert key == stored.key
        assert sorted(out) == sorted(set(out)), "a message was sent twice"
        assert set(out) == self.delivered, (set(out), self.delivered)
        markers = set(self.markers_on_disk())
        assert markers == {marker_name(key) for key in self.markers}, (markers, self.markers)


# About 10 s on a quiet machine; MODEL_EXAMPLES=2000 for a longer hunt.
AssuredModel.TestCase.settings = MODEL_SETTINGS
TestAssuredModel = AssuredModel.TestCase
