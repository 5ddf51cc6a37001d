"""Publish/subscribe on a root: topics routed to subscriptions, each subscription a dropbox.

A publish routes the topic through the core's Router and puts one copy into every matching
subscription: a share group's dropbox (its members compete, the queue engine's locks apply), a
durable subscriber's dropbox, or the memory inbox of a non-durable subscriber in this process.
The body is written once and hard-linked into every dropbox (DESIGN.md §2). The Router is
rebuilt from the folders whenever another process changed the set of subscriptions.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from functools import partial

from boxmq.client import mqtt_fields
from boxmq.client.body import body_bytes
from boxmq.client.consumer import Consumer
from boxmq.client.copies import (
    LEVELS,
    at_qos,
    copy_names,
    published_retained,
    qos_level,
    retained_envelope,
)
from boxmq.client.lifecycle import PUT_NAME_LIMIT
from boxmq.client.live_queue import LiveQueue
from boxmq.client.memory import MemoryDelivery, MemoryInbox
from boxmq.client.message import qos_of
from boxmq.client.path_locks import PathLocks
from boxmq.client.queue import QueueCounts, counts_of
from boxmq.client.routes import Routes
from boxmq.client.shared_lock import SharedLock
from boxmq.client.spill import spilled
from boxmq.client.subscriber import Subscriber
from boxmq.client.sweeps import release_locks_of
from boxmq.clock import Clock
from boxmq.core import (
    Destination,
    QoS,
    Subscription,
    TopicFilter,
    matcher,
    parse_filter,
    validate_topic,
)
from boxmq.core.durations import check_seconds
from boxmq.core.queue import check_consumer_limits
from boxmq.errors import (
    InvalidArgument,
    InvalidName,
    MetadataTooLong,
    QueueNotFound,
    naming,
    store_failure,
)
from boxmq.ids import IdFactory
from boxmq.model import (
    PUBLISHED_RETAINED,
    QOS,
    RETAINED,
    TOPIC,
    ConsumerId,
    Envelope,
    MessageClass,
    MessageId,
    Property,
    PropertyType,
    PropertyValue,
    cheap_init,
    check_given,
    properties_from,
    refuse_reserved,
)
from boxmq.store import topics as layout
from boxmq.store.commit import Committer, FsyncPolicy, Move, discard_unsent
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import State
from boxmq.store.names import check_consumer_name, decode_lenient, encode
from boxmq.store.process import process_alive
from boxmq.store.records import read_file
from boxmq.store.retained import Marked, Retained, RetainedStore, Version
from boxmq.store.side_files import SideFiles
from boxmq.store.spares import Spares, write_new
from boxmq.store.v5_properties import V5Reader

__all__ = [
    "Publication",
    "PublishedEach",
    "SubscriptionInfo",
    "Topics",
    "check_filter",
]

log = logging.getLogger("boxmq")

_LiveFor = Callable[[Dropbox, str | None, str], LiveQueue]  # a dropbox, its group, its name
_Opened = Callable[[str], LiveQueue | None]  # a dropbox's path: its live queue, if open here
_Forget = Callable[[str], None]  # a dropbox's path: its live queue here closed and forgotten


def check_filter(filter: str) -> None:
    """Refuse (InvalidArgument, saying what is wrong) a filter a subscribe would refuse: for a
    door that checks one before it subscribes (Spark's load(), which must not import the core)."""
    parse_filter(filter)


@cheap_init
@dataclass(frozen=True, slots=True)
class Publication:
    """One message for `Topics.publish_many` (no retain: the retained store is apart). A
    broker makes one per PUBLISH that goes to disk: cheap_init's `__init__`."""

    topic: str
    body: bytes
    qos: int = 1
    properties: Mapping[str, PropertyValue | Property] | None = None
    expires_in: float | None = None
    source: str | None = None


class _Route:
    """Where a message on one topic, at one QoS, from one source goes."""

    __slots__ = ("_first", "durable", "levels", "memory")

    def __init__(
        self,
        durable: list[tuple[Destination, str]],
        memory: list[tuple[MemoryInbox, Destination]],
        level: QoS,
    ) -> None:
        self.durable = durable  # a dropbox each, with its path
        self.memory = memory  # in-memory subscribers of this process
        # The QoS of each copy's file name; the published one when there is no copy, so the
        # name's length is still checked.
        self.levels = {d.qos for d, _ in durable} or {level}
        self._first: tuple[MessageId, dict[QoS, str]] | None = None  # see plain_names

    def plain_names(self, envelope: Envelope) -> dict[QoS, str]:
        """`copy_names(envelope, self.levels)` for a publication on this route with no properties
        and no expiry. Such names differ in the id alone, which IdFactory makes with nothing
        to escape and of one length: the route's first one's names, with the id swapped (an
        encoding per batch, not per message)."""
        first = self._first
        if first is None or len(first[0]) != len(envelope.message_id):
            names = copy_names(envelope, self.levels)
            self._first = (envelope.message_id, names)
            return names
        first_id, names = first
        # The id is the name's first field that can hold it: the one before is a priority.
        return {
            level: name.replace(first_id, envelope.message_id, 1) for level, name in names.items()
        }


_Planned = tuple[Envelope, bytes, _Route, dict[QoS, str]]  # a message, its route, its names

PublishedEach = Callable[[list[OSError | None]], None]
"""Told once a batch is as durable as the policy promises: per message, None or its error."""


def _failed_messages(staged: list[Move | None], unsent: list[int]) -> list[bool]:
    """Which messages of a failed commit were not stored. A move whose file is still in
    working/ was not made; if every move was made, the flush after them failed, and none of
    them can be called durable (a copy may be delivered and its producer asked to resend it:
    at least once, never acknowledged without being on disk)."""
    indexes = [i for i, move in enumerate(staged) if move is not None]
    failed = {indexes[i] for i in unsent} if unsent else set(indexes)
    return [i in failed for i in range(len(staged))]


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """A durable subscription or share group as `boxmq ls` shows it."""

    filter: str  # as subscribed: "$share/<group>/<filter>" or "<filter>"
    subscriber: str | None  # the plain subscriber; None for a share group
    members: tuple[str, ...]  # a share group's members
    counts: QueueCounts


class Topics:
    """The topics of one root, as one Box in one process sees and changes them."""

    def __init__(
        self,
        root: str,
        committer: Committer,
        *,
        ids: IdFactory,
        clock: Clock,
        token: str,
        live_for: _LiveFor,
        opened: _Opened = lambda path: None,
        forget: _Forget = lambda path: None,
        spares: Spares | None = None,
        v5: V5Reader | None = None,
        side_files: SideFiles | None = None,
        expiring: Callable[[list[str]], object] = lambda paths: None,
    ) -> None:
        self._root = root
        # Told of the dropboxes that get a copy with an expiry: the box's sweeps visit them
        # then, where they would visit a dropbox nobody reads only when something is due.
        self._expiring = expiring
        self._v5 = v5
        self._side_files = side_files  # for properties too long for a name (client/spill.py)
        self._committer = committer
        self._ids = ids
        self._clock = clock
        self._token = token
        self._live_for = live_for
        self._opened = opened
        self._forget = forget
        self._spares = spares
        self._retained = RetainedStore(root, committer)
        # A dropbox is made (a subscribe, a share group joined) and deleted (an unsubscribe,
        # the last member of a group leaving, a sweep) under its path's lock: a share group's
        # member may join on one thread (a broker's disk threads) while its last member leaves
        # on another, and the join must come wholly before the leave (which then keeps the
        # group, the engine the joiner attached to included) or wholly after it (a new group,
        # read by a new engine, watching the new folder), never between its check that no
        # member is left and its deletion (path_locks.py).
        self._dropboxes = PathLocks()
        # A retained publish of this process (stage, route, replace) and a subscription's
        # retained copies (registration, reading the retained store, writing the copies) are
        # one step each: a subscription made while a topic's retained message is replaced
        # gets the old one then the new, or the new one once, never the old after the new.
        # Publishes hold it shared (they run together, each with its own flush), the
        # subscription alone (shared_lock.py).
        self._retained_lock = SharedLock()
        # A share-group member's own granted QoS, by (dropbox, member): the group's copies
        # are stored at the highest any member was granted (Subscriber caps at this one).
        self._grants: dict[tuple[str, ConsumerId], QoS] = {}
        self._routes = Routes(root)  # where a publication goes, in step with the folders
        self._incoming = layout.incoming_working(root)

    # -- publishing ------------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        body: bytes | str,
        *,
        qos: int = 1,
        retain: bool = False,
        properties: Mapping[str, PropertyValue | Property] | None = None,
        expires_in: float | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        source: str | None = None,
        superseded: bool = False,
        message_id: MessageId | None = None,
        reserved: bool = False,
    ) -> MessageId:
        """Send to every subscription matching `topic`; returns the message id.

        superseded: a retained message that came before the topic's retained one (a door
        that knows the order it received them in): it goes out as retained, and replaces
        nothing. message_id: the id to give it, from `new_id` (a door that takes a message
        in before it writes it: its place among its publisher's messages is where it was
        taken in, since a subscription orders its messages by their ids). reserved: a door's
        message, whose `bx_*` properties are boxmq's own (`bx_v5`): a user's are refused."""
        validate_topic(topic)
        level = qos_level(qos)
        check_given(properties, correlation_id, reply_to)
        if not reserved:
            refuse_reserved(properties)
        # No Local compares the source with a subscriber's client id: a 5 went out unnoticed.
        if source is not None and not isinstance(source, str):
            raise InvalidArgument(f"source is a str or None, not {type(source).__name__}")
        mqtt_fields.check(properties or {})
        data = body_bytes(body)
        envelope = self._envelope(
            topic,
            properties,
            expires_in,
            correlation_id,
            reply_to,
            isinstance(body, str),
            message_id,
        )
        if retain:
            # MQTT 5.0 §3.3.1.3: kept even with no subscriber; an empty body deletes. Its copies
            # say so, for the subscribers that ask (Retain As Published, MQTT 5.0 §3.8.3.1).
            envelope = envelope.with_property(PUBLISHED_RETAINED, PropertyType.BOOLEAN, True)
        as_retained = retain and not superseded
        try:
            self._send(envelope, data, level, source, as_retained=as_retained)
        except MetadataTooLong as error:  # raised by `_names`, before anything is written
            at_level = partial(copy_names, levels=(level,))
            envelope, _ = spilled(envelope, self._side_files, at_level, error)
            self._send(envelope, data, level, source, as_retained=as_retained)
        return envelope.message_id

    def new_id(self) -> MessageId:
        """A message id made now, in the order of every id this box makes (the exactly-once
        intake's too): for `publish(message_id=...)`."""
        return self._ids.new()

    def _send(
        self, envelope: Envelope, data: bytes, level: QoS, source: str | None, *, as_retained: bool
    ) -> None:
        if as_retained:
            self._publish_retained(envelope, data, level, source)
        else:
            self._route(envelope, data, level, source)

    def topic_room(
        self,
        properties: Mapping[str, PropertyValue | Property] | None = None,
        *,
        expires_in: float | None = None,
        retain: bool = False,
    ) -> int:
        """How many bytes of topic, escaped (a '/' takes 3), the file names of a publication
        have room for beside `properties` and the rest of their metadata: the name of an
        empty topic, as `publish` would make it, less the limit. For a publisher told why its
        metadata did not fit; negative if even an empty topic leaves no room."""
        envelope = self._envelope("", properties, expires_in, None, None, text=False)
        if retain:
            envelope = envelope.with_property(PUBLISHED_RETAINED, PropertyType.BOOLEAN, True)
        return PUT_NAME_LIMIT - len(encode(at_qos(envelope, QoS.EXACTLY_ONCE)))

    def _publish_retained(
        self, envelope: Envelope, data: bytes, level: QoS, source: str | None
    ) -> None:
        """All or nothing, as the publisher is told: the retained message is written first
        (a full disk refuses it before any copy went out) and put in place last, once the
        copies are committed, so copies that fail leave the old one. A crash in between
        leaves the copies out and the old retained message, for a publication that was not
        acknowledged: its resend is delivered again (at least once) and then retained. Left:
        a rename into .retained/ that fails after the copies went out (EIO); the publisher is
        told of a failure for copies that were delivered, as when a commit's last flush fails.
        """
        assert envelope.topic is not None
        with self._retained_lock.shared():
            staged = self._retained.stage(
                envelope.topic, copy_names(envelope, (level,))[level], data
            )
            try:
                self._route(envelope, data, level, source)
            except BaseException:
                self._retained.discard(staged)
                raise
            self._retained.replace(staged)

    def send_files(
        self,
        files: Sequence[tuple[Envelope, str, str | None]],
        *,
        superseded: bool = False,
        marked: Marked | None = None,
    ) -> list[OSError | None]:
        """Publish files already written and flushed (exactly-once messages on `deliver`),
        each `(envelope, path, source)`, in order, their copies flushed together: each one's
        error (none of its copies sent), or None.

        The copies pass through each subscription's `working/.exactly-once/` (store/fanout.py),
        so that sending a file again after a crash never sends a copy twice (the copies a
        crash left pending are finished by `store.fanout.finish_pending`).

        A file published retained (its envelope says so) replaces its topic's retained
        message before its copies go (unless `superseded`: a later one is in place): the
        file stays in working/ until its copies are pending, so a crash in between leaves
        it there, and the restart that sends it again replaces the retained message again
        (the same message), never leaving copies out without it.

        marked: for such a restart, when the files' `deliver` was marked and which retained
        file was in place then: a retained message or a delete written since (the file
        itself before the crash, or a later one another process published meanwhile) stays."""
        if not superseded:
            for envelope, _, _ in files:  # a loop, not any() of a generator: half its cost
                if envelope.property_value(PUBLISHED_RETAINED) is True:
                    with self._retained_lock.shared():  # see its comment in __init__
                        return self._send_files(files, retained=True, marked=marked)
        return self._send_files(files, retained=False)

    def _send_files(
        self,
        files: Sequence[tuple[Envelope, str, str | None]],
        *,
        retained: bool,
        marked: Marked | None = None,
    ) -> list[OSError | None]:
        errors: list[OSError | None] = [None] * len(files)
        planned: list[tuple[int, _Planned]] = []
        moves: list[list[Move]] = []
        for index, (envelope, path, source) in enumerate(files):
            try:
                # On a descriptor (open, fstat, read, close): a file object's made nine system
                # calls, five more each deliver (a second fstat, ioctl, two lseeks, a read).
                data = read_file(path)
            except OSError as error:
                errors[index] = error
                continue
            assert envelope.topic is not None
            if retained and published_retained(envelope):
                try:
                    self._replace_retained(envelope, data, marked)
                except OSError as error:
                    errors[index] = error
                    continue
            route = self._destinations(envelope.topic, QoS.EXACTLY_ONCE, source)
            names = copy_names(envelope, route.levels)
            move = self._staged(envelope, data, path, route.durable, names)
            planned.append((index, (envelope, data, route, names)))
            moves.append([] if move is None else [move])
        sent = []
        for (index, plan), failure in zip(planned, self._committer.commit_each(moves), strict=True):
            errors[index] = failure
            if failure is None:
                sent.append(plan)
        self._hand_over(sent)
        return errors

    def _replace_retained(self, envelope: Envelope, data: bytes, marked: Marked | None) -> None:
        """An exactly-once file published retained becomes its topic's retained message,
        unless a restart finishes its `deliver` `marked` before a crash and the topic's
        retained message was written or deleted since: MQTT keeps the last one received
        (MQTT-3.3.1-5), and this one was received (its PUBREL) before that write."""
        assert envelope.topic is not None
        if marked is not None and self._retained.written_since(envelope.topic, marked):
            log.info(
                "%s: a retained message (or a delete) written since this restart's delivery "
                "of an older one was marked stays in place",
                envelope.topic,
            )
            return
        name = copy_names(envelope, (QoS.EXACTLY_ONCE,))[QoS.EXACTLY_ONCE]
        self._retained.replace(self._retained.stage(envelope.topic, name, data))

    def copies(self, envelope: Envelope) -> list[tuple[str, str]]:
        """Where `send_files` would put the copies of `envelope` (published at QoS 2, from no
        source): each matching durable subscription's dropbox and the copy's name there. For
        a caller that moves its copies itself (the Spark sink); memory subscribers get none.
        """
        assert envelope.topic is not None
        route = self._destinations(envelope.topic, QoS.EXACTLY_ONCE, None)
        names = copy_names(envelope, route.levels)
        return [(path, names[destination.qos]) for destination, path in route.durable]

    def _route(self, envelope: Envelope, data: bytes, level: QoS, source: str | None) -> None:
        assert envelope.topic is not None
        route = self._destinations(envelope.topic, level, source)
        names = copy_names(envelope, route.levels)
        move = self._staged(envelope, data, None, route.durable, names)
        if move is not None:
            try:
                self._committer.commit([move])
            except OSError:
                discard_unsent([move])  # written just now: it must never go out later
                raise
        self._hand_over([(envelope, data, route, names)])

    def _envelope(
        self,
        topic: str,
        properties: Mapping[str, PropertyValue | Property] | None,
        expires_in: float | None,
        correlation_id: str | None,
        reply_to: str | None,
        text: bool,
        message_id: MessageId | None = None,
    ) -> Envelope:
        if expires_in is not None:
            check_seconds("expires_in", expires_in)
        expiration = int((self._clock.now() + expires_in) * 1000) if expires_in else 0
        user = properties_from(dict(properties)) if properties else ()
        return Envelope(
            message_id=self._ids.new() if message_id is None else message_id,
            message_class=MessageClass.TEXT if text else MessageClass.BYTES,
            expiration=expiration,
            # "" as None, as its name writes both (an empty field): a subscriber that got it
            # from memory read "" where one that read the file read None.
            correlation_id=correlation_id or None,
            reply_to=reply_to or None,
            properties=(Property(TOPIC, PropertyType.STRING, topic), *user),
        )

    def publish_many(
        self, messages: Sequence[Publication], *, reserved: bool = False
    ) -> list[MessageId]:
        """Publish several messages, in order, with one commit: under fsync=always they share
        one flush instead of one each (a broker takes many PUBLISHes per socket read).

        Every message is checked before anything is written, so a bad one fails the batch
        and leaves nothing behind. reserved: as for `publish`, a door's messages."""
        planned, staged = self._stage_many(messages, reserved)
        moves = [move for move in staged if move is not None]
        if moves:
            try:
                self._committer.commit(moves)
            except OSError:
                discard_unsent(moves)
                raise
        self._hand_over(planned)
        return [envelope.message_id for envelope, *_ in planned]

    def publish_many_then(
        self,
        messages: Sequence[Publication],
        committed: PublishedEach,
        ready: Callable[[], None] | None = None,
        *,
        reserved: bool = False,
    ) -> list[MessageId]:
        """As `publish_many`, but return once the files are written, and call `committed`
        once they are as durable as the fsync policy promises (from the committing thread
        under `always`, before returning otherwise) with each message's outcome. A bad
        message raises here (an OSError too), with nothing written; a message whose commit
        failed is told its OSError, and none of its copies is sent, then or later.

        Under `always`, `ready` (if given) is called from the committing thread once every
        message is in its dropboxes and handed to this process's subscribers, before the
        last flush: they may be taken while `committed` waits for it (other processes see
        them in target/ from then on anyway). A consumer may thus have a message before its
        producer's acknowledgement; a crash of the machine in between may lose the rename,
        and the producer, never told, sends it again: at least once still holds."""
        planned, staged = self._stage_many(messages, reserved)
        moves = [move for move in staged if move is not None]
        handed_over = False

        def renamed() -> None:
            nonlocal handed_over
            handed_over = True
            self._hand_over(planned)
            assert ready is not None
            ready()

        def done(error: OSError | None) -> None:
            if error is None:
                if not handed_over:
                    self._hand_over(planned)
                committed([None] * len(planned))
                return
            failed = _failed_messages(staged, discard_unsent(moves))
            if not handed_over:  # else every move was renamed: none failed
                self._hand_over([p for p, bad in zip(planned, failed, strict=True) if not bad])
            committed([error if bad else None for bad in failed])

        if moves:
            self._committer.commit_then(moves, done, None if ready is None else renamed)
        else:
            done(None)
        return [envelope.message_id for envelope, *_ in planned]

    def _hand_over(self, planned: list[_Planned]) -> None:
        """Give stored messages to this process's subscribers: a copy to each in-memory
        subscriber, and each committed copy to its dropbox's live queue if this process has
        one open (a share group a broker's client is in), offered now with its body, as a
        queue's own puts are, so the receive that takes it neither waits for the watcher nor
        decodes the name nor opens the file (live_queue.LiveQueue.sent)."""
        for envelope, body, route, _ in planned:
            for inbox, destination in route.memory:
                inbox.push(MemoryDelivery(at_qos(envelope, destination.qos), body))
        offers: dict[str, tuple[LiveQueue, list[tuple[str, Envelope, bytes]]]] = {}
        opened = self._opened
        for envelope, body, route, names in planned:
            if envelope.expiration and route.durable:  # committed: a sweep now finds them
                self._expiring([path for _, path in route.durable])
            for destination, path in route.durable:
                entry = offers.get(path)
                if entry is None:
                    live = opened(path)
                    if live is None:
                        continue
                    entry = offers[path] = (live, [])
                qos = destination.qos
                entry[1].append((names[qos], at_qos(envelope, qos), body))
        for live, sent in offers.values():
            live.sent(sent)

    def _stage_many(
        self, messages: Sequence[Publication], reserved: bool
    ) -> tuple[list[_Planned], list[Move | None]]:
        """Check every message, then write each body once; per message, the move that will
        send it (None: no durable copy). If a write fails, the files written before it are
        deleted and its OSError raised. reserved: `bx_*` properties are boxmq's own."""
        routes: dict[tuple[str, QoS, str | None], _Route] = {}  # a batch is mostly one topic
        planned = []
        for message in messages:
            level = qos_level(message.qos)
            key = (message.topic, level, message.source)
            route = routes.get(key)
            if route is None:
                validate_topic(message.topic)
                route = routes[key] = self._destinations(*key)
            if not reserved:
                refuse_reserved(message.properties)
            envelope = self._envelope(
                message.topic, message.properties, message.expires_in, None, None, False
            )
            if message.properties or message.expires_in:
                try:
                    names = copy_names(envelope, route.levels)
                except MetadataTooLong as error:
                    levels = partial(copy_names, levels=route.levels)
                    envelope, names = spilled(envelope, self._side_files, levels, error)
            else:
                names = route.plain_names(envelope)
            planned.append((envelope, message.body, route, names))
        moves: list[Move | None] = []
        try:
            for envelope, body, route, names in planned:
                moves.append(self._staged(envelope, body, None, route.durable, names))
        except OSError:
            discard_unsent(move for move in moves if move is not None)
            raise
        return planned, moves

    def _destinations(self, topic: str, level: QoS, source: str | None) -> _Route:
        durable, memory = self._routes.destinations(topic, level, source)
        return _Route(durable, memory, level)

    def _staged(
        self,
        envelope: Envelope,
        body: bytes,
        staging: str | None,
        destinations: list[tuple[Destination, str]],
        names: dict[QoS, str],
    ) -> Move | None:
        """The body written once (unless `staging` holds it), and the move that links it into
        every dropbox under its name at that dropbox's QoS; None when there is nothing to
        write. A file given as `staging` is an exactly-once message: sent through pending
        copies (store/fanout.py)."""
        written = staging is None
        if staging is None:
            if not destinations:
                return None
            staging = self._write_staged(envelope, body)
        copies = tuple(path + _INTO_TARGET + names[d.qos] for d, path in destinations)
        if written:
            return Move(staging, None, copies)
        return Move(staging, None, copies, pending=layout.EXACTLY_ONCE_PENDING)

    def _staging(self, envelope: Envelope) -> str:
        """The path of a message's body in the root's incoming working/, where one not
        written into a spare goes (`_write_staged` joins it itself: one call less a put)."""
        return self._incoming + _SEP + layout.staging_name(envelope.message_id, self._token)

    def _write_staged(self, envelope: Envelope, body: bytes) -> str:
        """The body written once, in one of the spares' own files (store/spares.py) or else
        in the root's incoming working/: its path."""
        spares = self._spares
        # The pool lives in this root, so its own files rename into the root's dropboxes.
        if spares is not None:
            try:
                own = spares.write(body)
            except OSError as error:
                raise naming(error, self._staging(envelope)) from error
            if own is not None:
                return own
        # Joined by hand (os.path.join is Python code): no name here holds a separator.
        staging = self._incoming + _SEP + layout.staging_name(envelope.message_id, self._token)
        try:
            write_new(staging, body, spares)
        except FileNotFoundError:  # the first publish on this root, or after a cleanup
            os.makedirs(self._incoming, exist_ok=True)
            write_new(staging, body, spares)
        return staging

    # -- subscribing -----------------------------------------------------------------------------

    def subscribe(
        self,
        filter: str,
        subscriber: str,
        *,
        qos: int = 1,
        durable: bool = True,
        max_in_flight: int = 1,
        lock_timeout: float = 30.0,
        no_local: bool = False,
        send_retained: bool = True,
        process_bound: bool = True,
        ends_with_process: bool = False,
    ) -> Subscriber:
        """Subscribe `subscriber` to `filter` ("$share/<group>/<filter>" joins a share group).

        send_retained=False: the caller sends the retained messages itself, or none (an MQTT
        session that is resumed, or whose Retain Handling says not to). process_bound=False:
        a subscriber that outlives this process (an MQTT persistent session): no sweep removes
        its share-group membership (`close` or `unsubscribe` does), and its locks name no
        process, so that what it holds stays its own through a restart, until the lock
        timeout: `detach` leaves them, and its next subscribe takes them back.
        ends_with_process=True: a plain durable subscription that this process means to
        remove when it exits (`boxmq subscribe`): it records this process, so that a sweep
        removes it, with what it holds, once the process died without removing it (SIGKILL,
        a crash). A later subscribe of the same subscriber and filter without it makes the
        subscription outlive its process again."""
        parsed = parse_filter(filter)
        name = check_consumer_name(subscriber, _SUBSCRIBER)
        subscription = Subscription(
            name, parsed, qos_level(qos), parsed.shared or durable, no_local
        )
        # One routing entry per subscriber and filter in this Box: a memory subscription
        # beside a durable one of the same name would take its place there, and the durable
        # one would miss this Box's publications (all of them, once the memory one closed).
        if not subscription.durable:
            if self.has_subscription(filter, name):
                raise InvalidArgument(
                    f"{subscriber!r} has a durable subscription to {filter!r}: a memory one "
                    "of the same name would hide it from this process's publications; "
                    "unsubscribe it first, or subscribe under another name"
                )
            return self._subscribe_in_memory(subscription)
        if not parsed.shared:
            open_in_memory = self._routes.has_memory(name, str(parsed))
            if open_in_memory:
                raise InvalidArgument(
                    f"{subscriber!r} has a memory subscription to {filter!r} open in this "
                    "Box: close it first, or subscribe durably under another name"
                )
        # Before the records are written: refused by `attach` after them, it left a durable
        # subscription (or a membership) collecting for a subscriber that never came.
        check_consumer_limits(max_in_flight, lock_timeout)
        owner = self._token if ends_with_process and not parsed.shared else ""
        token = None if process_bound else ""
        # Registered, opened and attached in one step of its dropbox (see __init__).
        with self._joining(self._path_of(parsed, name)):
            if not parsed.shared and send_retained:
                with self._retained_lock.exclusive():  # see its comment in __init__
                    dropbox, made = self._registered(subscription, token=token, owner=owner)
                    try:
                        self._send_retained(parsed, dropbox, subscription.qos)
                    except OSError:  # a full disk: refused, so not made (`_unregister`)
                        if made:
                            self._unregister(dropbox.path, None, made=True)
                        raise
            else:
                dropbox, _ = self._registered(subscription, token=token, owner=owner)
            path = dropbox.path
            live = self._live_for(dropbox, parsed.share_group, str(parsed))
            if live.attached(name):  # said here: attach's own names a consumer and a folder
                raise InvalidArgument(
                    f"subscriber {subscriber!r} has {filter!r} open in this Box already: "
                    "close that Subscriber first, or subscribe under another name"
                )
            live.attach(
                name,
                max_in_flight=max_in_flight,
                lock_timeout=lock_timeout,
                outlives_process=not process_bound,
            )
        consumer = Consumer(live, name)
        return Subscriber(
            parsed,
            name,
            consumer=consumer,
            on_close=lambda: self._left(parsed, name, path),
            granted=self._granted_to(path, name, subscription.qos) if parsed.shared else None,
        )

    def resubscribe(
        self,
        filter: str,
        subscriber: str,
        *,
        qos: int = 1,
        no_local: bool = False,
        process_bound: bool = True,
    ) -> None:
        """Change the QoS or No Local of a durable subscription (or share-group membership)
        this process has open, in place: the messages it holds stay locked to it, so the flow
        is not interrupted (MQTT 5.0 §3.8.4). Messages already waiting keep their QoS."""
        parsed = parse_filter(filter)
        name = check_consumer_name(subscriber, _SUBSCRIBER)
        subscription = Subscription(name, parsed, qos_level(qos), True, no_local)
        with self._joining(self._path_of(parsed, name)):
            path, _, _ = self._register(subscription, token=None if process_bound else "")
        if parsed.shared:
            self._grants[path, name] = subscription.qos  # its Subscriber's cap from now on

    def _granted_to(self, path: str, name: ConsumerId, qos: QoS) -> Callable[[], QoS | None]:
        """A member's cap, read at each receive: `resubscribe` may change it."""
        key = (path, name)
        self._grants[key] = qos
        return lambda: self._grants.get(key)

    def attach_dropbox(self, filter: str, subscriber: str, *, qos: int = 1) -> str:
        """Register a durable subscription (or share-group member) that something other than
        a Consumer will read, such as a Spark stream, and return its dropbox's path.

        The member is bound to no process, so it stays until `unsubscribe`.
        """
        parsed = parse_filter(filter)
        subscription = Subscription(
            check_consumer_name(subscriber, _SUBSCRIBER), parsed, qos_level(qos), True
        )
        with self._joining(self._path_of(parsed, subscription.subscriber)):
            return self._registered(subscription, token="")[0].path

    def subscriptions(self) -> list[SubscriptionInfo]:
        """Every durable subscription and share group under the root, with its counts."""
        found = []
        for path in layout.subscription_folders(self._root):
            if (record := layout.read_record(path)) is None:
                if unreadable := layout.unreadable_record(path):
                    log.warning("%s", layout.unreadable_told(*unreadable))
                continue  # or being made or deleted right now
            try:
                # Nothing made here (create, complete): a subscription whose last member left,
                # or that was unsubscribed, right after its record was read is being deleted,
                # and folders made again under that rmtree were a FileExistsError, or stayed.
                dropbox = Dropbox(path, self._committer, create=False, complete=False)
            except QueueNotFound:
                continue  # deleted right now: the next listing does not show it either
            parsed = TopicFilter(record.filter, record.group)
            members = tuple(sorted(layout.member_names(path))) if record.group else ()
            counts = counts_of(dropbox)
            found.append(SubscriptionInfo(str(parsed), record.subscriber, members, counts))
        return sorted(found, key=lambda info: (info.filter, info.subscriber or ""))

    def subscribed(self, subscriber: str) -> list[tuple[str, layout.SubscriptionRecord]]:
        """The durable subscriptions and share-group memberships of `subscriber`, each as
        subscribed ("$share/<group>/<filter>" or "<filter>") with its record: what
        `subscriptions` tells of them without counting every dropbox's messages."""
        found = []
        for record, path in layout.read_records(self._root):
            if record.subscriber == subscriber or (
                record.group is not None and layout.is_member(path, subscriber)
            ):
                found.append((str(TopicFilter(record.filter, record.group)), record))
        return found

    def subscribed_among(
        self, subscriber: str, texts: Iterable[str]
    ) -> list[tuple[str, layout.SubscriptionRecord]]:
        """`subscribed`, of the filters `texts` (as subscribed) alone: a look at each one's
        own folder (its record, and for a share group this member's file), where
        `subscribed` reads the record of every subscription on the root. For a caller that
        knows what it may hold: an MQTT session's record names its filters."""
        found = []
        for text in dict.fromkeys(texts):
            try:
                parsed = parse_filter(text)
                path = self._path_of(parsed, None if parsed.shared else subscriber)
            except InvalidArgument:
                continue  # no folder holds it: no subscription under it on disk
            record = layout.read_record(path)
            if (
                record is None  # none, or a record damaged: `subscribed` leaves it out too
                or record.filter != parsed.filter  # a shortened folder name's other owner
                or record.group != parsed.share_group
            ):
                continue
            if (
                record.subscriber == subscriber
                if record.group is None
                else layout.is_member(path, subscriber)
            ):
                found.append((str(TopicFilter(record.filter, record.group)), record))
        return found

    def holds_any(self, subscriber: str) -> bool:
        """Whether `subscriber` has a durable subscription or share-group membership, as the
        root's subscriptions were at their last change read (one stat while none came since):
        False spares a caller `subscribed`'s read of every subscription's record, which every
        clean MQTT CONNECT made (a few names have some; most, a device's client id, none)."""
        return self._routes.holds_any(subscriber)

    def record_of(self, filter: str, subscriber: str) -> layout.SubscriptionRecord | None:
        """The record of `subscriber`'s durable subscription to `filter` (for
        "$share/<group>/<filter>", the group's, whoever its members), read from its own file,
        not from every subscription's as `subscribed`; None if there is none on disk."""
        return layout.read_record(self._path_of(parse_filter(filter), subscriber))

    def bound_to(self, filter: str, subscriber: str) -> str:
        """The process (its token, store/process.py) that `subscriber`'s subscription to
        `filter` ends with: a plain one's owner (SubscriptionRecord.owner), a share-group
        membership's process (a process-bound member); "" for one that outlives every
        process, or none on disk."""
        parsed = parse_filter(filter)
        path = self._path_of(parsed, subscriber)
        if parsed.shared:
            return layout.member_token(path, subscriber) or ""
        record = layout.read_record(path)
        return "" if record is None else record.owner

    def dropbox_of(self, filter: str, subscriber: str | None = None) -> Dropbox:
        """The dropbox of a share group ("$share/<group>/<filter>") or of `subscriber`'s
        durable subscription to `filter`, as `subscriptions` lists them: QueueNotFound if there
        is none on disk."""
        parsed = parse_filter(filter)
        if parsed.shared and subscriber is not None:
            raise InvalidArgument(
                f"{filter!r} is a share group: it has members, not a subscriber; name it alone"
            )
        if not parsed.shared and subscriber is None:
            raise InvalidArgument(
                f"{filter!r} is no share group: a durable subscription is named by its filter "
                "and its subscriber (see `boxmq ls`)"
            )
        path = self._path_of(parsed, None if parsed.shared else subscriber)
        try:
            return Dropbox(path, self._committer, create=False, spares=self._spares)
        except QueueNotFound:
            whose = "share group" if parsed.shared else f"subscription of {subscriber!r} to"
            raise QueueNotFound(
                f"no {whose} {filter!r} under {self._root} (see `boxmq ls`)"
            ) from None

    def members_of(self, group: str, filter: str) -> list[str]:
        """The members of a share group, as registered on disk (any process)."""
        path = self._path_of(TopicFilter(filter, group), None)
        return sorted(layout.member_names(path))

    def has_subscription(self, filter: str, subscriber: str) -> bool:
        """Whether a durable subscription of `subscriber` to `filter` exists on disk (any
        process made it); for "$share/<group>/<filter>", whether `subscriber` is a member."""
        parsed = parse_filter(filter)
        path = self._path_of(parsed, subscriber)
        if parsed.shared:
            return layout.is_member(path, subscriber)
        return os.path.isdir(path)

    def reader_named(self, filter: str, subscriber: str | None, consumer: str) -> str | None:
        """Who `consumer` is to the share group `filter` (`subscriber` None) or to
        `subscriber`'s durable subscription to it, as an error says it: "a member of the share
        group <filter>", "the subscriber of <filter>"; None when it is neither. A lock taken
        by hand (`get`) under such a name could not be told from that reader's own."""
        if subscriber is None:
            if self.has_subscription(filter, consumer):
                return f"a member of the share group {filter}"
        elif consumer == subscriber:
            return f"the subscriber of {filter}"
        return None

    def _remove(self, path: str) -> None:
        """Delete the subscription at `path` (layout.remove_subscription), its engine here
        first (its locks, its view of the folder), so that the same subscription made again
        is read afresh, its retained copies at once; and close the files of its messages that
        this process's puts keep open (Spares.close_gone_soon: at once, or at the next sweep
        when many end together): else their blocks stayed held until newer puts pushed them
        out. Called with the dropbox held (`self._dropboxes.held`)."""
        self._forget(path)
        layout.remove_subscription(self._root, path)
        if self._spares is not None:
            self._spares.close_gone_soon()

    def unsubscribe(self, filter: str, subscriber: str) -> bool:
        """End a durable subscription: its dropbox and undelivered messages are deleted."""
        parsed = parse_filter(filter)
        path = self._path_of(parsed, subscriber)
        if parsed.shared:
            return self._left(parsed, ConsumerId(subscriber), path)
        with self._dropboxes.held(path):
            if not os.path.isdir(path):
                return False
            self._remove(path)  # its engine here too (`_remove` says why)
        self._told_gone(path)
        return True

    def _told_gone(self, path: str) -> None:
        """`Routes.changed` after a subscription (or a member of it) at `path` was deleted: done,
        whatever the generation's write meets (ENOSPC, EMFILE). Raised, an unsubscribe the
        disk had done was told failed (MQTT: UNSUBACK 0x97, 'the subscription stays'), and
        this process routed to the folder gone until the next change (found by a disk-full
        hunt). Other processes are told at the next change; meanwhile their copies into it
        are passed by (store/fanout.py), as for any subscription deleted as they publish."""
        try:
            self._routes.changed(path)
        except OSError as error:
            self._routes.forget()  # this process reads every record at its next look
            log.warning(
                "%s ended, but the other processes on the root are told only at the next "
                "change of the subscriptions: %s",
                path,
                store_failure(error),
            )

    def _registered(
        self, subscription: Subscription, token: str | None = None, owner: str = ""
    ) -> tuple[Dropbox, bool]:
        """`_register`, and the subscription's dropbox opened; whether it is new."""
        path, written, made = self._register(subscription, token, owner)
        if written:
            # write_record has just made its state folders: a Dropbox making them looked at
            # each again (seven stats a new subscription). One found on disk may lack one
            # (removed by hand), which the Dropbox makes again.
            opened = Dropbox(
                path, self._committer, create=False, complete=False, spares=self._spares
            )
            return opened, made
        return Dropbox(path, self._committer, spares=self._spares), made

    def remove_left_behind(self, filter: str, subscriber: str) -> bool:
        """Delete the folder of `subscriber`'s plain subscription to `filter` if it has no
        record: what an unsubscribe killed between its record's deletion and its folder's
        move left (`layout.remove_subscription`), the messages it held still in it. No
        look finds it (`subscribed` reads records), and the next subscribe of the filter
        under that name took it over, those messages with it. A folder with a record is
        left alone (a subscription made since, or a shortened name's other owner).
        Whether there was one."""
        try:
            parsed = parse_filter(filter)
            path = self._path_of(parsed, subscriber)
        except InvalidArgument:
            return False  # no folder holds it
        if parsed.shared:
            return False  # a group's folder is every member's: its last leave deletes it
        with self._dropboxes.held(path):
            if not os.path.isdir(path) or layout.has_record(path):
                return False
            self._remove(path)
        self._told_gone(path)  # deleted: done, whatever the generation's write meets
        return True

    def _register(
        self, subscription: Subscription, token: str | None = None, owner: str = ""
    ) -> tuple[str, bool, bool]:
        """The subscription's record (and a share group's member, bound to `token`: this
        process if None, none if ""), written unless already on disk; its dropbox's path,
        whether the record was written (its dropbox's folders made with it), and whether
        the subscription is new (a plain one, or the member). What it made is taken back
        if the disk refuses a step (`_unregister`).
        `owner`: the process a plain subscription ends with (SubscriptionRecord.owner).
        Called with the dropbox held (`_joining`): nobody else writes its record meanwhile."""
        parsed = subscription.filter
        group = parsed.share_group
        path = self._path_of(parsed, subscription.subscriber)
        record = layout.SubscriptionRecord(
            filter=parsed.filter,
            group=group,
            subscriber=None if group else subscription.subscriber,
            qos=int(subscription.qos),
            no_local=subscription.no_local,
            owner=owner,
        )
        # Under fsync=always on disk before this returns: a caller tells its client that the
        # subscription stands (an MQTT SUBACK). What is on disk already is not written again
        # (a session resumed after a restart registers every subscription it finds).
        flush = self._committer.policy is FsyncPolicy.ALWAYS
        existing = layout.read_record(path)
        # Whether this subscribe makes the subscription, which a refusal then takes back: not
        # over a record there that no boxmq reads (damaged), whose messages are kept.
        made = existing is None and not layout.has_record(path)
        if existing is None and layout.clear_left_behind(self._root, path):
            # An end killed after its record went (the session record may not name the
            # filter any more, so nothing else clears it): the new subscription took over
            # the old one's messages. This process's engine of the folder knew them too.
            self._forget(path)
        if group is not None and existing is not None and existing.qos > record.qos:
            # A group's copies are stored at the highest QoS any member was granted, and each
            # member is sent at most its own (mqtt.stored.publish_of): a member granted QoS 0
            # must not take QoS 1 from the others (MQTT 5.0 §3.8.4, MQTT-234).
            record = replace(record, qos=existing.qos)
        written = changed = existing != record
        joined = None  # the member this call adds to a share group
        try:
            if changed:
                layout.write_record(path, record, flush=flush)
            if group is not None:
                member, bound = subscription.subscriber, self._token if token is None else token
                was = layout.member_token(path, member)
                if was != bound:
                    joined = member if was is None else None
                    layout.add_member(path, member, bound, flush=flush)
                    changed = True
            if changed:
                self._routes.changed(path, flush=flush, record=record)  # on disk now: not read back
        except OSError:
            self._unregister(path, joined, made=made)
            raise
        return path, written, made if group is None else joined is not None

    def _unregister(self, path: str, member: str | None, *, made: bool) -> None:
        """Take back what a subscribe the disk refused (ENOSPC at a step after the record)
        registered at `path`: the share group's `member` it added, and the subscription if
        it `made` it (a group: unless other members joined it). Its caller is told it was
        refused (MQTT: SUBACK 0x97), and it stayed, collecting every publication for nobody,
        which a persistent MQTT session took as its own at the next start (found by a
        disk-full hunt). Deleting needs no space; a step that fails all the same leaves
        the rest to the sweeps, and the caller raises the disk's first refusal.
        What stays (a subscription that was there, its record maybe rewritten) is read
        again at this process's next look: its router kept the entry of the record before,
        the refused generation told nobody, and a new QoS or No Local went unrouted here
        until the next change of the subscriptions."""
        try:
            if member is not None:
                layout.remove_member(path, member)
            if made and not layout.member_names(path):
                self._remove(path)
                self._routes.changed(path)
                return
        except OSError:
            pass
        self._routes.forget()  # this process reads every record at its next look

    def _joining(self, path: str) -> AbstractContextManager[None]:
        """Hold the dropbox at `path` for a join (its folder made first), against the threads
        of this process and the other processes on the root that join or leave it."""
        flush = self._committer.policy is FsyncPolicy.ALWAYS
        return self._dropboxes.held(path, make=True, flush=flush)

    def _path_of(self, parsed: TopicFilter, subscriber: str | None) -> str:
        """The dropbox of a share group (whoever the member), or of a plain subscription."""
        key = layout.subscription_key(parsed.share_group, subscriber)
        try:
            return layout.subscription_path(self._root, parsed.filter, key)
        except InvalidName:
            if parsed.share_group is None and subscriber is not None:
                # Its folder is "client.<subscriber>": name the subscriber the user gave (a
                # lone surrogate, a NUL), not that folder.
                check_consumer_name(subscriber, _SUBSCRIBER)
            raise

    def _left(self, parsed: TopicFilter, member: ConsumerId, path: str) -> bool:
        """A share group member leaves; the last one out deletes the group (MQTT-234), and
        its engine here (see __init__: a member joining meanwhile waits, and makes it anew).
        Whether it was a member: False too when there is no such group (never made, or
        ended already: by its last member's unsubscribe in another process, by a sweep).

        The last member of this process out forgets the engine here too, though members of
        other processes keep the group: the last of them may delete it there, and a member of
        this process joining afterwards would be read by an engine that knows the old
        folder's messages (its watcher follows the path to the new folder: store/watch.py)."""
        if not parsed.shared:
            return False  # a durable subscription outlives its consumer; unsubscribe ends it
        with self._dropboxes.held(path):
            self._grants.pop((path, member), None)
            try:
                dropbox = Dropbox(path, self._committer, create=False)
            except QueueNotFound:
                return False  # nothing to leave, nor to tell other processes of
            was_member = layout.is_member(path, member)
            release_locks_of(dropbox, member)
            layout.remove_member(path, member)
            ended = not layout.member_names(path)
            if ended:
                self._remove(path)
            # Nobody joins meanwhile (the lock): idle stays idle until it is forgotten.
            elif (live := self._opened(path)) is not None and live.idle():
                self._forget(path)
        self._told_gone(path)
        return was_member

    def _subscribe_in_memory(self, subscription: Subscription) -> Subscriber:
        inbox = MemoryInbox()
        key = (subscription.subscriber, str(subscription.filter))
        self._routes.add_memory(key, subscription, inbox)
        now = self._clock.now()
        for retained in self._matching_retained(subscription.filter):
            envelope = retained_envelope(retained)
            if envelope.expired(now):
                continue  # not sent (MQTT 5.0 §3.3.2.3.3), as a dropbox's copy expires there
            flagged = envelope.with_property(RETAINED, PropertyType.BOOLEAN, True)
            qos = min(qos_of(envelope.property_value(QOS)), subscription.qos)  # as _send_retained
            inbox.push(MemoryDelivery(at_qos(flagged, LEVELS[qos]), retained.body))

        def close() -> None:
            inbox.close()
            self._routes.remove_memory(key, subscription)

        return Subscriber(
            subscription.filter,
            subscription.subscriber,
            inbox=inbox,
            on_close=close,
            v5=self._v5,
            now=self._clock.now,
        )

    def send_retained(self, filter: str, subscriber: str, *, qos: int = 1) -> None:
        """Write the retained messages `filter` matches into `subscriber`'s durable
        subscription to it, as a new subscription gets them: for a caller that decides when
        they are due (an MQTT SUBSCRIBE's Retain Handling), so they wait on disk like any
        other message of that subscription. Nothing for a share group (MQTT-234)."""
        parsed = parse_filter(filter)
        if parsed.shared:
            return
        path = self._path_of(parsed, check_consumer_name(subscriber, _SUBSCRIBER))
        dropbox = Dropbox(path, self._committer, create=False, spares=self._spares)
        with self._retained_lock.exclusive():  # never an older retained message after a newer one
            self._send_retained(parsed, dropbox, qos_level(qos), apart=True)

    def _send_retained(
        self, parsed: TopicFilter, dropbox: Dropbox, granted: QoS, *, apart: bool = False
    ) -> None:
        """A new plain subscription gets the retained messages it matches (§3.3.1.3).
        `apart`: each copy under an id of its own, beside the message's (IdFactory.beside),
        for a subscription that may hold its live copy: a SUBSCRIBE that replaces one sends
        them again (MQTT-3.8.4-4), and under the message's own id the copy waited, unsent,
        until the client acknowledged the live one in flight (the queue holds one message
        per id). A new subscription's copies keep it, as they did: the lock keeps publishes
        from routing to it before its retained messages are in it."""
        moves = []
        now = self._clock.now()
        expiring = False
        for retained in self._matching_retained(parsed):
            envelope = retained_envelope(retained)
            if envelope.expired(now):
                continue  # never sent (MQTT 5.0 §3.3.2.3.3): a copy would only expire there
            envelope = envelope.with_property(RETAINED, PropertyType.BOOLEAN, True)
            qos = min(qos_of(envelope.property_value(QOS)), granted)
            envelope = at_qos(envelope.without_property(QOS), QoS(qos))
            if apart:
                envelope = replace(envelope, message_id=self._ids.beside(envelope.message_id))
            moves.append(dropbox.write_apart(encode(envelope, as_read=True), retained.body))
            expiring = expiring or bool(envelope.expiration)
        if moves:
            dropbox.send(moves)
            if expiring:
                self._expiring([dropbox.path])

    def _matching_retained(self, parsed: TopicFilter) -> Iterator[Retained]:
        if parsed.shared:
            return  # MQTT-234 B: never to shared subscriptions
        if not _WILDCARDS.intersection(parsed.filter):  # one topic: its one file, by its name
            retained = self._retained.get(parsed.filter)
            if retained is not None:
                yield retained
            return
        yield from self._retained.matching(matcher(parsed.filter))

    def retained_reading(self, filter: str) -> Iterator[tuple[Envelope, bytes]]:
        """The retained messages a new subscription to `filter` would get (none if shared),
        each file read when it is reached: a caller may take a few here and the rest in
        another thread (one thread at a time)."""
        for found in self._matching_retained(parse_filter(filter)):
            yield retained_envelope(found), found.body

    def has_durable(self, topic: str, source: str | None = None) -> bool:
        """Whether a publish to `topic` by `source` would be written into any dropbox (a
        durable subscription or a share group), so a caller can keep the others in memory."""
        return self._routes.has_durable(topic, source)

    def remove_expired_retained(
        self,
        now: float,
        *,
        tombstones_before: float | None = None,
        pinned: Mapping[str, float] | None = None,
    ) -> int:
        """Delete the retained messages whose Message Expiry passed (never sent any more):
        how many; and the deletes' tombstones written before `tombstones_before`, if given,
        and before its time in `pinned` for a topic there (RetainedStore.remove_if)."""
        return self._retained.remove_if(
            lambda found: decode_lenient(found.name)[0].expired(now),
            tombstones_before=tombstones_before,
            pinned=pinned,
        )

    def retained_version(self, topic: str) -> Version | None:
        """Which file the topic's retained file is now, for an exactly-once `deliver` to
        write in its marker (see `send_files`'s `marked`); None if there is none."""
        return self._retained.version(topic)

    def retained(self, topic: str) -> tuple[Envelope, bytes] | None:
        found = self._retained.get(topic)
        return None if found is None else (retained_envelope(found), found.body)

    def tell_others(self, path: str | None) -> OSError | None:
        """Tell every process that the subscription at `path` (several: None) changed
        (Routes.tell_others): the error the generation's write met, if it did."""
        return self._routes.tell_others(path)

    def close_memory(self) -> None:
        """End every memory subscription's receive (the box closes): a thread waiting in
        one, which nothing else would wake, ends its iteration as at the Subscriber's close."""
        for inbox in self._routes.memory_inboxes():
            inbox.close()

    def sweep_subscriptions(
        self,
        named: set[str] | None = None,
        kept: list[tuple[layout.SubscriptionRecord, str]] | None = None,
    ) -> int:
        """End what a dead process left: share-group members whose process died (a group
        left empty is deleted), and plain subscriptions that were to end with a process
        that died without removing them (SubscriptionRecord.owner). How many ended.
        `named`, when given, gets the tokens of the processes the subscriptions left end
        with: until one of them dies, another look finds nothing more to end. `kept`, when
        given, gets the (record, path) of each subscription it read and left."""
        ended = 0
        for record, path in list(layout.read_records(self._root)):
            if record.group is None:
                gone = self._end_if_owner_died(record, path)
                ended += gone
                if named is not None and record.owner and not gone:
                    named.add(record.owner)
                if kept is not None and not gone:
                    kept.append((record, path))
                continue
            with self._dropboxes.held(path):  # not while a member of this process joins
                dead = 0
                for member, token in layout.members(path).items():
                    if token and process_alive(token) is False:
                        layout.remove_member(path, member)
                        dead += 1
                    elif token and named is not None:
                        named.add(token)
                if layout.member_names(path):
                    if kept is not None:
                        kept.append((record, path))
                    continue
                self._remove(path)
            ended += 1
            # Said as a plain subscription's end is (`_end_if_owner_died`), where it went
            # unsaid with what it held; not counted, which would list its folders.
            log.warning(
                "share group %r of %s ended: %s; deleted with its messages",
                record.group,
                record.filter,
                f"the process(es) of its last {dead} member(s) died without leaving it"
                if dead
                else "no member left in it",
            )
        untold = self._routes.untold  # an earlier write failed: this sweep tells of it again
        if (ended or untold) and (error := self.tell_others(None)) is not None and ended:
            # Raised, it failed the sweep with the subscriptions ended; said once, here, with
            # what it means (the next sweep, or change, tries again, and says nothing more).
            log.warning(
                "%s not replaced: the other processes on the root go on copying messages "
                "to the %d subscription(s) this sweep ended until it is written (tried "
                "again at the next sweep or change of the subscriptions): %s",
                layout.generation_file(self._root),
                ended,
                store_failure(error),
            )
        return ended

    def _end_if_owner_died(self, record: layout.SubscriptionRecord, path: str) -> int:
        # Only a process of this host can be told dead (store/process.py): one of another
        # host sharing the root keeps its subscriptions until it, or `unsubscribe`, ends them.
        if not record.owner or process_alive(record.owner) is not False:
            return 0
        with self._dropboxes.held(path):
            if layout.read_record(path) != record:
                return 0  # removed right now by its unsubscribe, or subscribed again
            try:
                box = Dropbox(path, self._committer, create=False, spares=self._spares)
                dropped = counts_of(box)
            except QueueNotFound:
                return 0  # removed right now, by its unsubscribe
            self._remove(path)
        log.warning(
            "subscription %s of %r ended: its process (%s) died without removing it; "
            "%d message(s) it held deleted",
            record.filter,
            record.subscriber,
            record.owner,
            dropped.ready + dropped.locked,
        )
        return 1


_WILDCARDS = frozenset("+#")  # a filter without them is a topic name: one retained file
_SUBSCRIBER = "subscriber name"  # what a refused one is called: a subscriber's, not a consumer's
_SEP = os.sep
_INTO_TARGET = os.sep + State.TARGET.value + os.sep  # <dropbox> + this + <name>
