"""Publishing on a root: a message routed to every matching subscription, its body written
once and hard-linked into every subscription's dropbox (DESIGN.md §2), a copy handed to each
memory subscriber and to each live queue this process has open; a retained message put in
place once its copies are committed; a batch under one commit; exactly-once files sent
through each subscription's pending copies (store/fanout.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from boxmq.client import mqtt_fields
from boxmq.client.body import body_bytes
from boxmq.client.copies import (
    as_published_retained,
    at_qos,
    carries_v5,
    copy_names,
    names_side_file,
    published_retained,
    qos_level,
)
from boxmq.client.lifecycle import PUT_NAME_LIMIT
from boxmq.client.live_queue import LiveQueue
from boxmq.client.memory import MemoryDelivery, MemoryInbox
from boxmq.client.routes import Routes
from boxmq.client.shared_lock import SharedLock
from boxmq.client.spill import place_door_file, spilled, withdraw
from boxmq.clock import Clock
from boxmq.core import Destination, QoS, validate_topic
from boxmq.core.durations import check_seconds
from boxmq.core.topics import refuse_sys
from boxmq.errors import InvalidArgument, MetadataTooLong, check_flag, check_listed, naming
from boxmq.ids import IdFactory
from boxmq.model import (
    DEFAULT_PRIORITY,
    TOPIC,
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
from boxmq.store.commit import Committer, Move, discard_unsent
from boxmq.store.layout import State
from boxmq.store.names import encode
from boxmq.store.records import read_file
from boxmq.store.retained import Marked, RetainedStore
from boxmq.store.side_files import NAMED_AS, Placed, SideFiles
from boxmq.store.spares import Spares, write_new

__all__ = ["Publication", "PublishedEach", "Publisher", "Route"]

log = logging.getLogger("boxmq")

_Opened = Callable[[str], LiveQueue | None]  # a dropbox's path: its live queue, if open here


@cheap_init
@dataclass(frozen=True, slots=True)
class Publication:
    """One message for `Topics.publish_many` (no retain: the retained store is apart). A
    broker makes one per PUBLISH that goes to disk: cheap_init's `__init__`."""

    topic: str
    body: bytes | str  # a str is text, as for publish
    qos: int = 1
    properties: Mapping[str, PropertyValue | Property] | None = None
    expires_in: float | None = None
    source: str | None = None
    # The bytes of the side file a door's message names (`bx_v5h` in `properties`), written
    # by publish_many only where a copy names it, as `Topics.publish(side_file=...)` does.
    side_file: bytes | None = None


class Route:
    """Where a message on one topic, at one QoS, from one source goes."""

    __slots__ = ("_first", "copied", "durable", "levels", "memory", "topic")

    # The property that names the topic in each copy of a batch's plain publications: set by
    # `_stage_many`, its one reader, once per route rather than once per message (a Property
    # costs about as much as the envelope holding it). Not made here: publish's route goes with
    # an envelope that has one already, and made one per call it never read.
    topic: Property

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
        self.copied = bool(durable or memory)  # whether any subscription gets a copy
        self._first: tuple[MessageId, dict[QoS, str]] | None = None  # see plain_names

    @property
    def folders(self) -> list[str]:
        """The dropbox of each durable subscription on the route."""
        return [path for _, path in self.durable]

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


_Planned = tuple[Envelope, bytes, Route, dict[QoS, str]]  # a message, its route, its names

PublishedEach = Callable[[list[OSError | None]], None]
"""Told once a batch is as durable as the policy promises: per message, None or its error."""


def _check_source(source: object) -> None:
    """InvalidArgument unless `source` is a publisher's client id (a str) or None: No Local
    compares it with a subscriber's client id, and a 5 went out unnoticed."""
    if source is not None and not isinstance(source, str):
        raise InvalidArgument(f"source is a str or None, not {type(source).__name__}")


def _failed_messages(staged: list[Move | None], unsent: list[int]) -> list[bool]:
    """Which messages of a failed commit were not stored. A move whose file is still in
    working/ was not made; if every move was made, the flush after them failed, and none of
    them can be called durable (a copy may be delivered and its producer asked to resend it:
    at least once, never acknowledged without being on disk)."""
    indexes = [i for i, move in enumerate(staged) if move is not None]
    failed = {indexes[i] for i in unsent} if unsent else set(indexes)
    return [i in failed for i in range(len(staged))]


class Publisher:
    """The publishing of one root, as one Box in one process does it (Topics adds the
    subscriptions)."""

    def __init__(
        self,
        root: str,
        committer: Committer,
        *,
        ids: IdFactory,
        clock: Clock,
        token: str,
        routes: Routes,
        opened: _Opened = lambda path: None,
        spares: Spares | None = None,
        side_files: SideFiles | None = None,
        expiring: Callable[[list[str]], object] = lambda paths: None,
    ) -> None:
        # Told of the dropboxes that get a copy with an expiry: the box's sweeps visit them
        # then, where they would visit a dropbox nobody reads only when something is due.
        self._expiring = expiring
        self._side_files = side_files  # for properties too long for a name (client/spill.py)
        self._committer = committer
        self._ids = ids
        self._clock = clock
        self._token = token
        self._routes = routes  # where a publication goes, in step with the folders
        self._opened = opened
        self._spares = spares
        self._retained = RetainedStore(root, committer)
        # A retained publish of this process (stage, route, replace) and a subscription's
        # retained copies (registration, reading the retained store, writing the copies) are
        # one step each: a subscription made while a topic's retained message is replaced
        # gets the old one then the new, or the new one once, never the old after the new.
        # Publishes hold it shared (they run together, each with its own flush), the
        # subscription alone (shared_lock.py).
        self._retained_lock = SharedLock()
        self._incoming = layout.incoming_working(root)

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
        side_file: bytes | None = None,
    ) -> MessageId:
        """Send to every subscription matching `topic`; returns the message id.

        superseded: a retained message that came before the topic's retained one (a door
        that knows the order it received them in): it goes out as retained, and replaces
        nothing. message_id: the id to give it, from `new_id` (a door that takes a message
        in before it writes it: its place among its publisher's messages is where it was
        taken in, since a subscription orders its messages by their ids). reserved: a door's
        message, whose `bx_*` properties are boxmq's own (`bx_v5`): a user's are refused.
        side_file: the bytes of the side file of a door's message's v5 properties, written
        only where a file will name it: a copy or the topic's retained message whose name
        holds its key (`bx_v5h` in `properties`), or, where `properties` hold none of them
        (the MQTT door's long topics, whose names have no room for the key), the retained
        message's header (`RetainedStore.stage`), its copies going without. A delete, with
        no body, is kept nowhere."""
        validate_topic(topic)
        level = qos_level(qos)
        check_flag("retain", retain)
        check_flag("superseded", superseded)  # "no" kept a retained one from replacing
        check_flag("reserved", reserved)  # "no" let a user's bx_nb through
        check_given(properties, correlation_id, reply_to)
        if not reserved:  # a door's: the MQTT one lets an ACL rule allow `$SYS`
            if not (retain and not body):
                # The empty retained one deletes: a `$SYS` message an older boxmq stored
                # (before 2026-11-30's release), which each server still hands out beside
                # its own, has no other way out.
                refuse_sys(topic)
            refuse_reserved(properties)
        _check_source(source)
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
            envelope = as_published_retained(envelope)
        as_retained = retain and not superseded
        try:
            if as_retained:
                self._publish_retained(envelope, data, level, source, side_file)
            else:
                self._route(envelope, data, level, source, side_file=side_file)
        except MetadataTooLong as error:  # raised by `_names`, before anything is written
            at_level = partial(copy_names, levels=(level,))
            if as_retained:  # kept with no subscriber too (MQTT 5.0 §3.3.1.3)
                # Its name holds the key of the side file `spilled` wrote: a door's is not named.
                envelope, _, placed = spilled(envelope, self._side_files, at_level, error)
                self._publish_retained(envelope, data, level, source, placed=placed)
            else:
                # The route the copies take, found once: a subscription made after it gets
                # no copy, so none can name a side file that was not written.
                route = self._destinations(topic, level, source)
                envelope, _, placed = spilled(
                    envelope, self._side_files, at_level, error, write=route.copied
                )
                self._route(envelope, data, level, source, route, placed=placed)
        return envelope.message_id

    def new_id(self) -> MessageId:
        """A message id made now, in the order of every id this box makes (the exactly-once
        intake's too): for `publish(message_id=...)`."""
        return self._ids.new()

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
            envelope = as_published_retained(envelope)
        return PUT_NAME_LIMIT - len(encode(at_qos(envelope, QoS.EXACTLY_ONCE)))

    def check_room(
        self, topic: str, *, expires_in: float | None = None, retain: bool = False
    ) -> None:
        """MetadataTooLong, as `publish` would raise it, if the file names of a publication to
        `topic` have no room for it even without properties (which `publish` may leave out
        or put in a side file): for a door that acknowledges a message before it writes it,
        and must refuse one it could never write before it says it received it."""
        envelope = self._envelope(topic, None, expires_in, None, None, text=False)
        if retain:
            envelope = as_published_retained(envelope)
        copy_names(envelope, (QoS.EXACTLY_ONCE,))

    def _publish_retained(
        self,
        envelope: Envelope,
        data: bytes,
        level: QoS,
        source: str | None,
        side_file: bytes | None = None,
        placed: Placed | None = None,
    ) -> None:
        """All or nothing, as the publisher is told: the retained message is written first
        (a full disk refuses it before any copy went out) and put in place last, once the
        copies are committed, so copies that fail leave the old one. A crash in between
        leaves the copies out and the old retained message, for a publication that was not
        acknowledged: its resend is delivered again (at least once) and then retained. A
        directory at the topic's file is refused by `stage`, before any copy. Left: a
        rename into .retained/ that fails after the copies went out (EIO); the publisher is
        told of a failure for copies that were delivered, as when a commit's last flush fails.
        `side_file`: as `publish` says; named by the header where the name holds none of the
        properties, written before it (the committer's flush at `replace` covers it).
        `placed`: the side file `spilled` wrote for the name, withdrawn as `_route` says.
        """
        assert envelope.topic is not None
        name = copy_names(envelope, (level,))[level]  # MetadataTooLong before any write
        header, in_header = self._header_side_file(envelope, data, side_file)
        if header is not None:  # then the name holds no key: `spilled` wrote none (`placed`)
            placed = header
        with self._retained_lock.shared():
            try:
                staged = self._retained.stage(envelope.topic, name, data, properties_file=in_header)
            except BaseException:
                # Refused, its side file stayed named by nothing until the hourly collection.
                withdraw(self._side_files, placed)
                raise
            try:
                # A retained message names its side file, unless it deletes (no body).
                self._route(
                    envelope,
                    data,
                    level,
                    source,
                    side_file=side_file,
                    kept=bool(data),
                    placed=None if in_header else placed,
                )
            except BaseException:
                self._retained.discard(staged)
                if in_header is not None:  # the copies' names have no room for it: none does
                    withdraw(self._side_files, placed)
                raise
            try:
                self._retained.replace(staged)
            except BaseException:
                # Withdrawn only if the header naming it never went in place: a flush that
                # fails may follow the rename (the copies, committed, name any other).
                if self._retained.discard(staged) and in_header is not None:
                    withdraw(self._side_files, placed)
                raise

    def send_files(
        self,
        files: Sequence[tuple[Envelope, str, str | None, bytes | None]],
        *,
        superseded: bool = False,
        marked: Marked | None = None,
        routes: Mapping[tuple[str, str | None], Route] | None = None,
    ) -> list[OSError | None]:
        """Publish files already written and flushed (exactly-once messages on `deliver`),
        each `(envelope, path, source, side_file)`, in order, their copies flushed together:
        each one's error (none of its copies sent), or None. `side_file`: the bytes of the
        side file of a retained one's v5 properties, for its file's header where its name
        holds none of them (`_replace_retained`); None if none.

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
        itself before the crash, or a later one another process published meanwhile) stays.

        routes: the route of each (topic, source), as `exactly_once_route` found it for the
        caller (the intake's deliver, which looked at their target/ before its marker); one
        not given is found here. Not a retained one's that replaces its topic's retained
        message: found again once it has, as a publish's is (`_publish_retained`)."""
        if not superseded:
            for envelope, _, _, _ in files:  # a loop, not any() of a generator: half its cost
                if published_retained(envelope):
                    with self._retained_lock.shared():  # see its comment in __init__
                        return self._send_files(files, routes, retained=True, marked=marked)
        return self._send_files(files, routes, retained=False)

    def _send_files(
        self,
        files: Sequence[tuple[Envelope, str, str | None, bytes | None]],
        routes: Mapping[tuple[str, str | None], Route] | None,
        *,
        retained: bool,
        marked: Marked | None = None,
    ) -> list[OSError | None]:
        found = routes or {}
        errors: list[OSError | None] = [None] * len(files)
        planned: list[tuple[int, _Planned]] = []
        moves: list[list[Move]] = []
        for index, (envelope, path, source, side_file) in enumerate(files):
            try:
                # On a descriptor (open, fstat, read, close): a file object's made nine system
                # calls, five more each deliver (a second fstat, ioctl, two lseeks, a read).
                data = read_file(path)
            except OSError as error:
                errors[index] = error
                continue
            assert envelope.topic is not None
            route = found.get((envelope.topic, source))
            if retained and published_retained(envelope):
                try:
                    self._replace_retained(envelope, data, marked, side_file)
                except OSError as error:
                    errors[index] = error
                    continue
                # A subscription made since the route was found got the retained message
                # this one replaced, and must get this one too (see _retained_lock).
                route = None
            if route is None:
                route = self.exactly_once_route(envelope, source)
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

    def _replace_retained(
        self, envelope: Envelope, data: bytes, marked: Marked | None, side_file: bytes | None
    ) -> None:
        """An exactly-once file published retained becomes its topic's retained message,
        unless a restart finishes its `deliver` `marked` before a crash and the topic's
        retained message was written or deleted since: MQTT keeps the last one received
        (MQTT-3.3.1-5), and this one was received (its PUBREL) before that write.
        `side_file`, where its name holds none of its v5 properties (a long MQTT topic): its
        file's header names it, as `_publish_retained` does, written now, before the header
        (a side file written at its PUBLISH, named by nothing until its PUBREL, could be
        collected meanwhile)."""
        assert envelope.topic is not None
        if marked is not None and self._retained.written_since(envelope.topic, marked):
            log.info(
                "%s: a retained message (or a delete) written since this restart's delivery "
                "of an older one was marked stays in place",
                envelope.topic,
            )
            return
        name = copy_names(envelope, (QoS.EXACTLY_ONCE,))[QoS.EXACTLY_ONCE]
        placed, in_header = self._header_side_file(envelope, data, side_file)
        try:
            staged = self._retained.stage(envelope.topic, name, data, properties_file=in_header)
        except BaseException:
            # As in `_publish_retained`: the deliver is tried again.
            withdraw(self._side_files, placed)
            raise
        try:
            self._retained.replace(staged)
        except BaseException:
            if self._retained.discard(staged):  # never in place: its header names it nowhere
                withdraw(self._side_files, placed)
            raise

    def copies(self, envelope: Envelope) -> list[tuple[str, str]]:
        """Where `send_files` would put the copies of `envelope` (published at QoS 2, from no
        source): each matching durable subscription's dropbox and the copy's name there. For
        a caller that moves its copies itself (the Spark sink); memory subscribers get none.
        """
        assert envelope.topic is not None
        route = self._destinations(envelope.topic, QoS.EXACTLY_ONCE, None)
        names = copy_names(envelope, route.levels)
        return [(path, names[destination.qos]) for destination, path in route.durable]

    def exactly_once_route(self, envelope: Envelope, source: str | None) -> Route:
        """Where `send_files` sends `envelope` from `source`: for an exactly-once `deliver`,
        which looks at the target/ of its subscriptions first and hands the route to
        `send_files` (`routes`)."""
        assert envelope.topic is not None
        return self._destinations(envelope.topic, QoS.EXACTLY_ONCE, source)

    def _route(
        self,
        envelope: Envelope,
        data: bytes,
        level: QoS,
        source: str | None,
        route: Route | None = None,
        *,
        side_file: bytes | None = None,
        kept: bool = False,
        placed: Placed | None = None,
    ) -> None:
        """Send `envelope`'s copies along `route` (found now if None). `side_file`: the bytes
        of the side file a door's envelope names, written only where a file names it: a copy,
        or (`kept`) the retained message; else none, nobody reading it until the sweep
        collected it an hour later. The route is found once: a subscription made after it
        gets no copy, so none can name a side file that was not written. `placed`: the side
        file `spilled` wrote for `envelope`'s name; either is withdrawn if the copies fail
        before their commit."""
        assert envelope.topic is not None
        if route is None:
            route = self._destinations(envelope.topic, level, source)
        names = copy_names(envelope, route.levels)
        if side_file is not None and (kept or route.copied) and names_side_file(envelope):
            placed = place_door_file(self._side_files, side_file)
        try:
            move = self._staged(envelope, data, None, route.durable, names)
        except BaseException:
            # Told to send it again: a side file made for it alone stayed named by nothing
            # until the hourly collection (a full disk's last page). Not once its commit
            # began: a flush that fails may follow copies linked already, which name it.
            withdraw(self._side_files, placed)
            raise
        if move is not None:
            try:
                self._committer.commit([move])
            except OSError:
                discard_unsent([move])  # written just now: it must never go out later
                raise
        self._hand_over([(envelope, data, route, names)])

    def _header_side_file(
        self, envelope: Envelope, data: bytes, side_file: bytes | None
    ) -> tuple[Placed | None, str | None]:
        """The side file a retained message's header names, written now, and the header's
        `properties_file` naming it: a door's `side_file` where `envelope`'s name holds none
        of its v5 properties (a long MQTT topic), unless it deletes (no body, kept nowhere).
        (None, None) where no header names one."""
        if side_file is None or not data or carries_v5(envelope):
            return None, None
        placed = place_door_file(self._side_files, side_file)
        return placed, NAMED_AS + placed.key

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
        check_listed("publish_many", messages, "publications", alone="use publish_many([it])")
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
        check_listed(
            "publish_many_then", messages, "publications", alone="use publish_many_then([it], ...)"
        )
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
        decodes the name nor opens the file (LiveQueue.sent, in client/target_names.py)."""
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
        placed: list[Placed] = []  # the side files `spilled` wrote for the names
        try:
            planned = self._plan_many(messages, reserved, placed)
            moves: list[Move | None] = []
            try:
                for envelope, body, route, names in planned:
                    moves.append(self._staged(envelope, body, None, route.durable, names))
            except OSError:
                discard_unsent(move for move in moves if move is not None)
                raise
        except BaseException:
            # A bad message after them, or a write the disk refused: the batch is refused, and
            # a side file made for it alone stayed named by nothing until the hourly collection.
            for each in placed:
                withdraw(self._side_files, each)
            raise
        return planned, moves

    def _plan_many(
        self, messages: Sequence[Publication], reserved: bool, placed: list[Placed]
    ) -> list[_Planned]:
        """`_stage_many`'s checks, and each message's envelope, route and names; the side
        files written for names that spill (client/spill.py) added to `placed`."""
        check_flag("reserved", reserved)
        routes: dict[tuple[str, QoS, str | None], Route] = {}  # a batch is mostly one topic
        planned = []
        for message in messages:
            # publish's checks, each of which a batch skipped: its `mqtt.*` properties were
            # stored unchecked, a source of 5 went out, a body of 5 raised a TypeError once
            # the bodies before it were written, leaving them behind.
            _check_source(message.source)
            if message.properties:
                mqtt_fields.check(message.properties)
            body = body_bytes(message.body)
            level = qos_level(message.qos)
            key = (message.topic, level, message.source)
            route = routes.get(key)
            if route is None:
                validate_topic(message.topic)
                if not reserved:  # a door's: the MQTT one lets an ACL rule allow `$SYS`
                    refuse_sys(message.topic)
                route = routes[key] = self._destinations(*key)
                route.topic = Property(TOPIC, PropertyType.STRING, message.topic)
            if not reserved:
                refuse_reserved(message.properties)
            if message.properties or message.expires_in is not None:
                envelope = self._envelope(
                    message.topic,
                    message.properties,
                    message.expires_in,
                    None,
                    None,
                    isinstance(message.body, str),
                )
            else:  # a plain publication, most of a broker's: `_envelope`'s, made straight
                envelope = Envelope(
                    self._ids.new(),
                    DEFAULT_PRIORITY,
                    MessageClass.TEXT if isinstance(message.body, str) else MessageClass.BYTES,
                    0,
                    None,
                    None,
                    None,
                    (route.topic,),
                )
            if message.properties or message.expires_in:
                try:
                    names = copy_names(envelope, route.levels)
                except MetadataTooLong as error:
                    levels = partial(copy_names, levels=route.levels)
                    envelope, names, side_file = spilled(
                        envelope, self._side_files, levels, error, write=route.copied
                    )
                    if side_file is not None:
                        placed.append(side_file)
            else:
                names = route.plain_names(envelope)
            door_file = message.side_file
            if door_file is not None and route.copied and names_side_file(envelope):
                placed.append(place_door_file(self._side_files, door_file))  # a copy will name it
            planned.append((envelope, body, route, names))
        return planned

    def _destinations(self, topic: str, level: QoS, source: str | None) -> Route:
        durable, memory = self._routes.destinations(topic, level, source)
        return Route(durable, memory, level)

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


_SEP = os.sep
_INTO_TARGET = os.sep + State.TARGET.value + os.sep  # <dropbox> + this + <name>
