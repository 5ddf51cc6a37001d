"""Exactly-once receive: store on `assured`, deliver once on `deliver` (DESIGN.md §5).

The two steps of the QoS document's assured service (MQTT's PUBLISH QoS 2 then PUBREL):

1. `assured(source, msg_id, ...)`: the message is written in its destination's working/
   (a queue's own; `topic-root/.incoming/working/` for a topic) and flushed before the call
   returns, so the answer `received` / PUBREC promises it is on disk. A repeat is answered again
   and stored nothing. The core's ExactlyOnce keeps the books and the limits.
2. `deliver(source, msg_id)`: a marker that (source, msg_id) was delivered is flushed first,
   then the file moves to target/ (or is fanned out to the topic's subscriptions). A repeat
   delivers nothing. A late repeat of step 1 while the marker lives is answered, not stored.

Everything is on disk, so a restart rebuilds the books: pending files from working/, markers
from `<root>/.exactly-once/`. A crash between marker and move is finished at restart, and
never sends a copy twice: to a queue the move is one rename (done or not); to topics the
copies pass through each subscription's `working/.exactly-once/` (store/fanout.py), so a file
still staged has no copy out yet and is sent again, and the copies of a file gone are renamed
out of their pending folders. A message to a topic stored retained (MQTT's retain flag, kept
in its name) replaces the topic's retained message before its copies go, while its file is
still staged: a crash in between sends it again at restart, its retained message with it,
unless the topic's retained message was written or deleted since the marker, which records
which retained file was in place (a later one stays).

Here: the books, staging and delivery, and the restart that rebuilds them. The markers on
disk, their records and claims, are client/markers.py's; their sweep past done_ttl, and what
they tell of retained tombstones, client/marker_sweep.py's.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

from boxmq.client import mqtt_fields
from boxmq.client.body import body_bytes
from boxmq.client.copies import at_qos, names_side_file, replaced_topic
from boxmq.client.lifecycle import PUT_NAME_LIMIT
from boxmq.client.marker_sweep import MarkerSweep
from boxmq.client.markers import Markers, delete_quietly
from boxmq.client.publishing import Route
from boxmq.client.spill import place_door_file, spilled, withdraw
from boxmq.clock import Clock
from boxmq.core import Action, ExactlyOnce, ExactlyOnceLimits, QoS
from boxmq.core.durations import check_seconds
from boxmq.core.topics import refuse_sys, validate_topic
from boxmq.errors import (
    BoxMQError,
    InvalidArgument,
    ItemNotFound,
    MetadataTooLong,
    TargetMissing,
    check_flag,
    check_listed,
    naming,
)
from boxmq.ids import IdFactory
from boxmq.model import (
    MQTT_SOURCE_PREFIX,
    SOURCE,
    SOURCE_MESSAGE_ID,
    TOPIC,
    Envelope,
    MessageClass,
    Property,
    PropertyType,
    PropertyValue,
    check_given,
    properties_from,
    refuse_reserved,
)
from boxmq.store.commit import Committer, FsyncPolicy, Move, flush_directories
from boxmq.store.dropbox import Dropbox
from boxmq.store.fanout import finish_pending
from boxmq.store.layout import (
    State,
    dropbox_folders,
    queue_path,
    target_moved_aside,
    targets_aside,
    wait_for_targets,
)
from boxmq.store.names import MAX_NAME, check_priority, decode_lenient, encode
from boxmq.store.retained import Marked, Version
from boxmq.store.side_files import Placed, SideFiles
from boxmq.store.temporaries import temporary_in
from boxmq.store.topics import (
    EXACTLY_ONCE_PENDING,
    incoming_working,
    marker_name,
    read_record,
)

__all__ = ["AssuredIntake", "AssuredMessage", "Outcome"]

_Routes = Mapping[tuple[str, str | None], Route]  # by (topic, publisher)

log = logging.getLogger("boxmq.exactly_once")

# Publish each (envelope, file in working/, source), its copies flushed together: each error.
# The flag: a retained one among them is superseded (replaces no retained message). The mark:
# a restart's, when their `deliver` was marked and the retained file then (Topics.send_files's
# `marked`), else None. The routes: those `deliver` found, by (topic, source) (Topics.send_files's
# `routes`).
_FanOut = Callable[
    [Sequence[tuple[Envelope, str, str, bytes | None]], bool, Marked | None, _Routes],
    list[OSError | None],
]


class AssuredMessage(NamedTuple):
    """One message for `AssuredIntake.assured_many`: the arguments of `assured`."""

    source: str
    msg_id: str
    body: bytes
    queue: str | None = None
    topic: str | None = None
    priority: int = 4
    properties: Mapping[str, PropertyValue | Property] | None = None
    reclaim: bool = False
    expires_in: float | None = None
    text: bool = False  # the body is a str's UTF-8: stored as class T, as a put of a str is
    identities: tuple[str, ...] = ()  # other names of the source, for trusted_sources
    # The bytes of the side file of a door's message's v5 properties. Where its properties
    # name the file's key, written once a name with them fits, before the message file (a
    # try with no room for the key wrote none, which no file would name). Else, for a
    # retained one whose name holds none of them (an MQTT topic too long even for the key),
    # for the header of the retained message its `deliver` makes (Topics.send_files),
    # written then. Held in memory only: one delivered after a restart goes without them,
    # as its copies do.
    side_file: bytes | None = None


Outcome = bool | BoxMQError | OSError
"""What `assured_many` and `deliver_many` tell of each message: what `assured` or `deliver`
returns for it, or the error it raises."""


@dataclass(frozen=True, slots=True)
class _Pending:
    path: str  # the file in working/
    queue: str | None  # the destination: a queue, or (None) the topic in the envelope
    envelope: Envelope
    side_file: bytes | None = None  # AssuredMessage.side_file; None once restored from disk


@dataclass(frozen=True, slots=True)
class _Staged:
    """A message of `assured_many` written, its room reserved: its move into working/ waits
    for the batch's commit."""

    key: tuple[str, str]  # (source, msg_id)
    move: Move
    pending: _Pending
    placed: Placed | None  # the side file its name names, withdrawn if its commit fails


class AssuredIntake:
    def __init__(
        self,
        root: str,
        committer: Committer,
        *,
        ids: IdFactory,
        clock: Clock,
        limits: ExactlyOnceLimits,
        fan_out: _FanOut,
        route_of: Callable[[Envelope, str], Route] | None = None,
        side_files: SideFiles | None = None,
        retained_version: Callable[[str], Version | None] | None = None,
        polling: bool = False,
    ) -> None:
        self._root = root
        self._side_files = side_files  # for properties too long for a name (client/spill.py)
        self._committer = committer
        self._ids = ids
        self._clock = clock
        self._fan_out = fan_out
        # Where a topic's message from a publisher goes (Topics.exactly_once_route).
        self._route_of = route_of
        self._books = ExactlyOnce(limits)
        self._pending: dict[tuple[str, str], _Pending] = {}
        # The "delivered" markers on disk (their records, claims and reads), and their sweep
        # past done_ttl, with what they tell of retained tombstones.
        self._markers = Markers(root, committer, retained_version=retained_version)
        self._lock = threading.Lock()
        self._restored = False
        self._sweep = MarkerSweep(
            self._markers.folder,
            clock,
            polling=polling,
            waits=self._markers.waits,
            waiting=self._waiting_by_marker,
        )

    @property
    def limits(self) -> ExactlyOnceLimits:
        return self._books.limits

    @property
    def markers(self) -> str:
        """The folder of the "delivered" markers."""
        return self._markers.folder

    def assured(
        self,
        source: str,
        msg_id: str,
        body: bytes | str,
        *,
        queue: str | None = None,
        topic: str | None = None,
        priority: int = 4,
        properties: Mapping[str, PropertyValue | Property] | None = None,
        reclaim: bool = False,
        expires_in: float | None = None,
        identities: tuple[str, ...] = (),
    ) -> bool:
        """Step 1. True if stored now, False if it was a repeat (answer it again all the same).

        reclaim=True: an id already delivered names a new message (its marker goes, so a
        restart cannot take the new message for delivered). expires_in: seconds from now
        after which the message expires, kept in its name (the expiration field) from here
        to its copies. identities: other names of `source` that `trusted_sources` may list
        (`ExactlyOnce.assured`). Raises NotAllowed, MessageTooLarge or ResourceConstraint,
        storing nothing.
        """
        # Before anything is reserved or written: a str body raised TypeError from the write,
        # its temporary left in working/, and an int one from len().
        data = body_bytes(body)
        _check_key(source, msg_id)  # else named as boxmq's own property, bx_src
        message = AssuredMessage(
            source,
            msg_id,
            data,
            queue,
            topic,
            priority,
            properties,
            reclaim,
            expires_in,
            isinstance(body, str),
            identities,
        )
        return self.assured_one(message)

    def assured_one(self, message: AssuredMessage, *, reserved: bool = False) -> bool:
        """`assured` of a message already made one (a door's, whose body is bytes).
        reserved: its `bx_*` properties are boxmq's own (`bx_v5`, `bx_rp`: a door's message);
        a user's are refused."""
        [outcome] = self.assured_many([message], reserved=reserved)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def assured_many(
        self, messages: Sequence[AssuredMessage], *, reserved: bool = False
    ) -> list[Outcome]:
        """Step 1 for several messages, flushed together: each one's outcome in order, what
        `assured` would return for it or the error it would raise (nothing of that one
        stored). One commit instead of one each: a publisher's window of QoS 2 messages.
        reserved: as for `assured_one`, a door's messages."""
        check_listed("assured_many", messages, "assured messages", alone="use assured_many([it])")
        outcomes: list[Outcome] = []
        with self._lock:
            self._restore()
            staged: list[tuple[int, _Staged]] = []
            for message in messages:
                try:
                    stage = self._stage(message, reserved)
                except (BoxMQError, OSError) as error:
                    outcomes.append(error)
                    continue
                if stage is not None:
                    staged.append((len(outcomes), stage))
                outcomes.append(stage is not None)
            errors = self._committer.commit_each([[stage.move] for _, stage in staged])
            failed: dict[tuple[str, str], OSError] = {}
            for (index, stage), failure in zip(staged, errors, strict=True):
                key = stage.key
                if failure is None:
                    self._books.stored(*key)
                    self._pending[key] = stage.pending
                    continue
                # Not `received`: the sender will send it again, so nothing of it may stay (a
                # renamed file whose directory flush failed would otherwise be restored later).
                self._books.forget(*key)
                delete_quietly([stage.move.source, stage.pending.path])
                withdraw(self._side_files, stage.placed)
                outcomes[index] = failed[key] = failure
            if failed:  # a repeat within the batch of one that failed was not stored either
                for index, message in enumerate(messages):
                    failure = failed.get((message.source, message.msg_id))
                    if failure is not None and outcomes[index] is False:
                        outcomes[index] = failure
        return outcomes

    def _stage(self, message: AssuredMessage, reserved: bool) -> _Staged | None:
        """Reserve room for `message` in the books and write its file; None for a repeat."""
        _check_key(message.source, message.msg_id)  # a door's message, not checked by `assured`
        check_flag("reclaim", message.reclaim)
        check_flag("text", message.text)
        source, msg_id, expires_in = message.source, message.msg_id, message.expires_in
        if expires_in is not None:
            check_seconds("expires_in", expires_in)
        check_priority(message.priority)
        if (message.queue is None) == (message.topic is None):
            raise InvalidArgument("an assured message goes to a queue or to a topic: give one")
        if message.topic is not None:
            # Before anything is kept: a topic no publish could take ("a/+", "") was stored,
            # then failed at `deliver` after its marker, and every later start with it.
            validate_topic(message.topic)
        check_given(message.properties, None, None)
        if not reserved:
            refuse_reserved(message.properties)
        mqtt_fields.check(message.properties or {})
        now = self._clock.now()
        action = self._books.assured(
            source,
            msg_id,
            size=len(message.body),
            now=now,
            reclaim=message.reclaim,
            identities=message.identities,
        )
        if action is not Action.STORE:
            return None
        try:
            if message.topic is not None and not reserved:  # the MQTT door's: an ACL may allow
                # Once the books took it for new: a repeat of one held is answered as such,
                # one a release before 2026-11-30's stored, when `$SYS` was taken, included.
                refuse_sys(message.topic)
            # A new message under the id: a marker of the last one goes (reclaimed, or no
            # longer remembered: past done_ttl, or done_ttl 0), or a restart would take the
            # new file for one delivered but not yet moved, and send it without its deliver.
            self._markers.remove(source, msg_id)
            expiration = int((now + expires_in) * 1000) if expires_in else 0
            return self._write(message, expiration)
        except BaseException:
            self._books.forget(source, msg_id)
            raise

    def _write(self, message: AssuredMessage, expiration: int) -> _Staged:
        """The message's file, written beside the name it will have in working/."""
        queue, topic = message.queue, message.topic
        extra = {SOURCE: message.source, SOURCE_MESSAGE_ID: message.msg_id} | (
            {TOPIC: topic} if topic else {}
        )
        envelope = Envelope(
            message_id=self._ids.new(),
            priority=message.priority,
            message_class=MessageClass.TEXT if message.text else MessageClass.BYTES,
            expiration=expiration,
            properties=(
                *properties_from(dict(message.properties or {})),
                *(Property(k, PropertyType.STRING, v) for k, v in extra.items()),
            ),
        )
        working = self._working_dir(queue)
        os.makedirs(working, exist_ok=True)
        checked = partial(_checked_name, to_topic=queue is None)
        placed = None  # the side file written for its name: a producer's, or a door's
        try:
            name = checked(envelope)
        except MetadataTooLong as error:
            envelope, name, placed = spilled(envelope, self._side_files, checked, error)
        side_file = message.side_file
        if side_file is not None and names_side_file(envelope):
            # The name fits: a file will name it.
            placed = place_door_file(self._side_files, side_file)
            side_file = None  # named by the message's name: no header needs it
        path = os.path.join(working, name)
        temporary = temporary_in(working)
        try:
            with open(temporary, "wb") as out:
                out.write(message.body)
        except OSError as error:
            delete_quietly([temporary])
            # The sender is told to send it again: a side file made for it alone stayed
            # named by nothing until the hourly collection (a full disk's last page).
            withdraw(self._side_files, placed)
            if error.filename is None:  # refused at the close's flush: say where, not just ENOSPC
                raise naming(error, temporary) from error
            raise
        key = (message.source, message.msg_id)
        pending = _Pending(path, queue, envelope, side_file)
        return _Staged(key, Move(temporary, path), pending, placed)

    def _working_dir(self, queue: str | None) -> str:
        """The working/ of `queue`, its folders made if it has none (a new queue, as a put
        makes it). One whose folder is there without its target/ is refused as a put refuses
        it (TargetMissing), nothing stored: that target/ was moved aside to be made again
        (operations.md's "Disk usage"), and one made here broke the operator's `mkdir`. Not
        one whose making was cut short (killed) before its target/: its sender's retry makes
        the rest of it, as ever."""
        if queue is None:
            return incoming_working(self._root)
        path = queue_path(self._root, queue)
        target = os.path.join(path, State.TARGET.value)
        # target/ looked at first: one stat where it is there, as it nearly always is
        if not os.path.isdir(target) and target_moved_aside(path):
            missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), target)
            raise TargetMissing(missing, queue, target, putting=True)
        return Dropbox(path, self._committer).dir(State.WORKING)

    def deliver(
        self, source: str, msg_id: str, *, remember: bool = True, must_exist: bool = False
    ) -> bool:
        """Step 2. True if delivered now; False for a repeat or an unknown id (deliver nothing).

        remember=False: forget the id once delivered (its marker too, removed on disk before
        this returns under `always`), so it can name a new message at once. must_exist=True:
        an unknown id (never stored, expired, or swept away) raises ItemNotFound instead of
        returning False, so the sender can be told that the message is lost; a repeat of a
        delivered id still returns False."""
        _check_key(source, msg_id)  # else False, as for an id never stored
        [outcome] = self.deliver_many([(source, msg_id)], remember=remember, must_exist=must_exist)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def deliver_many(
        self,
        keys: Sequence[tuple[str, str]],
        *,
        remember: bool = True,
        must_exist: bool = False,
        superseded: bool = False,
    ) -> list[Outcome]:
        """Step 2 for several (source, msg_id), in order: each one's outcome, what `deliver`
        would return for it or the error it would raise. Their markers are flushed together,
        then their messages sent together: two flushes for them all, not two each.

        A message to a topic stored retained (its `assured` properties say so: MQTT's
        retain flag) replaces the topic's retained message as it is sent, unless
        `superseded` (its sender knows a later one is in place); a crash after its marker
        does both at the restart (Topics.send_files)."""
        check_listed(
            "deliver_many", keys, "(source, msg_id) pairs", alone="use deliver_many([(source, id)])"
        )
        check_flag("remember", remember)
        check_flag("must_exist", must_exist)
        check_flag("superseded", superseded)
        flags = {"remember": remember, "must_exist": must_exist, "superseded": superseded}
        outcomes = self._deliver_many(keys, **flags)
        # Refused for a target/ moved aside (`_targets_back`): waited for here, out of the
        # lock, which every exactly-once store and deliver of the process takes, and those
        # whose target/ came back delivered again (a repeat within `keys` as it would be).
        aside = [o.path for o in outcomes if isinstance(o, TargetMissing) and o.path is not None]
        if aside:
            still = set(wait_for_targets({os.path.dirname(path) for path in aside}))
            again = [
                index
                for index, outcome in enumerate(outcomes)
                if isinstance(outcome, TargetMissing)
                and os.path.dirname(outcome.path or "") not in still
            ]
            if again:
                redone = self._deliver_many([keys[index] for index in again], **flags)
                for index, outcome in zip(again, redone, strict=True):
                    outcomes[index] = outcome
        return outcomes

    def _deliver_many(
        self,
        keys: Sequence[tuple[str, str]],
        *,
        remember: bool,
        must_exist: bool,
        superseded: bool,
    ) -> list[Outcome]:
        """`deliver_many` under the lock, a message whose target/ is moved aside refused at
        once (TargetMissing): the caller waits for it."""
        outcomes: list[Outcome] = []
        with self._lock:
            self._restore()
            due: list[tuple[int, tuple[str, str], _Pending]] = []
            now = self._clock.now()
            for key in keys:
                try:
                    action = self._books.deliver(*key, now=now, remember=remember)
                except BoxMQError as error:  # a deliver before its message was stored
                    outcomes.append(error)
                    continue
                pending = self._pending.pop(key, None)
                if action is Action.ANSWER:
                    outcomes.append(False)
                elif action is not Action.DELIVER or pending is None:
                    # Sent by another process on the root, whose marker says so: done, as a
                    # repeat (MQTT's PUBCOMP 0x92 told the client its packet id was unknown).
                    sent = self._sent_elsewhere(key)
                    outcomes.append(False if sent else _unknown(key[1], must_exist))
                else:
                    due.append((len(outcomes), key, pending))
                    outcomes.append(True)
            # Found once for the batch: its target/ looked at here, its copies sent there.
            routes = self._routes([pending for _, _, pending in due])
            # Refused before their markers, where a target/ is moved aside: they wait for
            # their `deliver` again (deliver_many's, once it is back), nothing on disk to undo.
            sending = self._targets_back(due, routes, outcomes)
            # `premarked`: those another process marked before this one (its marker is
            # overwritten): a file gone from working/ then was sent by it, not swept away.
            marking = [(key, pending.path, _replaces(pending)) for _, key, pending in sending]
            errors, premarked = self._markers.mark_all(
                marking, remember=remember, superseded=superseded
            )
            marked = []
            for (index, key, pending), failure in zip(sending, errors, strict=True):
                if failure is None:
                    marked.append((index, key, pending))
                else:
                    outcomes[index] = self._not_delivered(key, pending, failure, must_exist)
            to_send = [pending for _, _, pending in marked]
            errors = self._send_all(to_send, superseded, None, routes)
            forgotten = False
            for (index, key, pending), failure in zip(marked, errors, strict=True):
                if (
                    failure is not None
                    and _gone(failure, pending)
                    and (key in premarked or self._markers.marked_since(key))
                ):
                    # Another process that marked it, before this one or since (its marker
                    # then in place of this one's), sent it before this one's send: done
                    # (its marker stays, as its `deliver` leaves it), never sent twice.
                    outcomes[index] = False
                elif failure is not None:
                    # Gone with this one's marker in place: swept away (dropped past
                    # pending_ttl, or with its session). Another process that finished this
                    # `deliver` from that marker between it and this send (its start, the
                    # sender's arrival, its sweep) put its own name in the marker first
                    # (`Markers.claim`), and is told by `Markers.marked_since` above.
                    outcomes[index] = self._not_delivered(key, pending, failure, must_exist)
                elif not remember:
                    self._markers.remove(*key)
                    forgotten = True
            if forgotten:
                self._flush_forgotten()
            # A repeat within the batch of one not delivered after all (its file was gone, or
            # the file system failed it) was taken for a repeat of one delivered (False), or
            # for an unknown id if not remembered: it is told the first one's outcome, what a
            # `deliver` after that one would meet.
            failed = {key: (i, outcomes[i]) for i, key, _ in due if outcomes[i] is not True}
            for index, key in enumerate(keys):
                if key in failed and index > failed[key][0]:
                    outcomes[index] = failed[key][1]
        return outcomes

    def _targets_back(
        self,
        due: list[tuple[int, tuple[str, str], _Pending]],
        routes: _Routes,
        outcomes: list[Outcome],
    ) -> list[tuple[int, tuple[str, str], _Pending]]:
        """Those of `due` to send: a message whose queue's or subscription's target/ is moved
        aside (operations.md's "Disk usage": `mv target target.old && mkdir target`) is
        refused (TargetMissing, a store failure its door reports: the sender delivers again),
        its message still waiting; `deliver_many` waits up to TARGET_BACK_WAIT for it and
        delivers it again. A new target/ made there broke the operator's mkdir, and a copy
        renamed into none stayed in the subscription's working/ until a restart."""
        dropboxes = [self._dropboxes(pending, routes) for _, _, pending in due]
        # Each folder once: a batch's messages to one topic share their subscriptions.
        aside = set(targets_aside(dict.fromkeys(path for paths in dropboxes for path in paths)))
        if not aside:
            return due
        sending = []
        for (index, key, pending), paths in zip(due, dropboxes, strict=True):
            missing = next((path for path in paths if path in aside), None)
            if missing is None:
                sending.append((index, key, pending))
                continue
            target = os.path.join(missing, State.TARGET.value)
            error = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), target)
            name = pending.queue or os.path.relpath(missing, self._root)
            subscription = None if pending.queue is not None else _subscription_of(missing)
            outcomes[index] = TargetMissing(error, name, target, subscription=subscription)
            self._undeliver(*key, pending, marked=False)
        return sending

    def _dropboxes(self, pending: _Pending, routes: _Routes) -> list[str]:
        """The folders of the dropboxes `pending` goes to: its queue's, or those of its
        topic's subscriptions on its route in `routes` (their target/ looked at before its
        `deliver` is marked)."""
        if pending.queue is not None:
            return [queue_path(self._root, pending.queue)]
        route = routes.get(_route_key(pending))
        return [] if route is None else route.folders

    def _routes(self, pendings: list[_Pending]) -> dict[tuple[str, str | None], Route]:
        """The route of each topic's message of `pendings`, found once per topic and
        publisher (a batch of PUBRELs is mostly one client's to one topic)."""
        routes: dict[tuple[str, str | None], Route] = {}
        if self._route_of is None:
            return routes
        for pending in pendings:
            if pending.queue is None and (key := _route_key(pending)) not in routes:
                routes[key] = self._route_of(pending.envelope, key[1])
        return routes

    def _flush_forgotten(self) -> None:
        """Under `always`, the markers `deliver(remember=False)` removed are removed on disk
        before the sender is answered: it may name a new message with the id at once (an
        MQTT client reuses a packet id after PUBCOMP), and a marker a machine crash brought
        back would make a restart take that message, sent again because it was never
        answered, for a repeat of the delivered one: answered, never stored. One flush of
        the folder for the whole batch. (The marker `assured` removes for a new message needs
        none: the commit of the new file flushes the file system before its rename.)"""
        if self._committer.policy is not FsyncPolicy.ALWAYS:
            return
        folder = self._markers.folder
        try:
            flush_directories([folder])
        except OSError as error:  # delivered all the same: the disk fails the next commit too
            log.warning("exactly once: flushing %s after forgetting ids: %s", folder, error)

    def _not_delivered(
        self, key: tuple[str, str], pending: _Pending, error: OSError, must_exist: bool
    ) -> Outcome:
        """What a `deliver` the file system failed tells its caller, the books set right."""
        if _gone(error, pending):
            # Swept away before `deliver`: neither pending nor delivered, or the sender's
            # resend would pass for a repeat of a message never sent.
            self._unmark(*key)
            return _unknown(key[1], must_exist)
        self._undeliver(*key, pending)
        return error

    def _undeliver(
        self, source: str, msg_id: str, pending: _Pending, *, marked: bool = True
    ) -> None:
        """`deliver` failed in the file system (or was refused before its marker, `marked`
        False): if the message is still in working/, it waits there for a `deliver` again
        (the sender is told of the failure and repeats it)."""
        if marked:
            with contextlib.suppress(OSError):
                os.unlink(self._markers.path(source, msg_id))
        try:
            stat = os.stat(pending.path)
        except OSError:
            return  # it left working/: its copies are out, or pending (finished on restart)
        self._books.restore(source, msg_id, size=stat.st_size, since=stat.st_ctime, delivered=False)
        self._pending[source, msg_id] = pending

    def _sent_elsewhere(self, key: tuple[str, str]) -> bool:
        """Whether a marker of the last done_ttl says `key` was delivered and its file no
        longer waits: sent by another process on the root (or a restart's), which this
        one's books did not see, and which remembers it as they would have."""
        done_ttl = self._books.limits.done_ttl
        if done_ttl <= 0:
            return False  # nothing is remembered
        marker = self._markers.path(*key)
        waits, _ = self._markers.waits(marker)
        if waits is not False:
            return False
        try:
            # After its record was read: `Markers.waits` tells a marker deleted meanwhile (by the
            # `deliver` that wrote it, finding its file swept away: never sent) as one whose
            # file is gone, which alone would be taken for sent.
            written = os.stat(marker).st_mtime
        except FileNotFoundError:
            return False
        return self._clock.now() - written < done_ttl

    def _unmark(self, source: str, msg_id: str) -> None:
        self._books.forget(source, msg_id)
        self._markers.remove(source, msg_id)

    def _send_all(
        self,
        pendings: list[_Pending],
        superseded: bool = False,
        marked: Marked | None = None,
        routes: _Routes | None = None,
    ) -> list[OSError | None]:
        """Send each message on from working/, with one flush for a queue's and one for a
        topic's: each one's error, if any (nothing of that one sent). `marked`: for a
        restart's, their `deliver`'s marker (a retained message written since stays).
        `routes`: those its `deliver` found (`_routes`); else each is found as it is sent."""
        errors: list[OSError | None] = [None] * len(pendings)
        to_queues = [i for i, pending in enumerate(pendings) if pending.queue is not None]
        to_topics = [i for i, pending in enumerate(pendings) if pending.queue is None]
        if to_queues:
            moves = [[self._into_target(pendings[i])] for i in to_queues]
            for index, error in zip(to_queues, self._committer.commit_each(moves), strict=True):
                errors[index] = error
        if to_topics:
            files = [self._as_file(pendings[i]) for i in to_topics]
            sent = self._fan_out(files, superseded, marked, routes or {})
            for index, error in zip(to_topics, sent, strict=True):
                errors[index] = error
        return errors

    def _into_target(self, pending: _Pending) -> Move:
        """The move that sends `pending` into its queue's target/: the queue's folders made
        whole first (a making cut short), but not a target/ moved aside (since `deliver`
        looked: `_targets_back`), which the operator's mkdir makes, nor a queue deleted since
        `assured` (its working/ went with it, and the message): the rename fails then, and
        `deliver` tells the sender (a queue made again here came back empty and ownerless)."""
        assert pending.queue is not None
        path = queue_path(self._root, pending.queue)
        name = os.path.basename(pending.path)
        target = os.path.join(path, State.TARGET.value)
        # One stat where target/ is there, as it nearly always is; the queue's folder is
        # looked at only when it is not.
        if not os.path.isdir(target) and (not os.path.isdir(path) or target_moved_aside(path)):
            return Move(pending.path, os.path.join(target, name))
        return Move(pending.path, Dropbox(path, self._committer).file(State.TARGET, name))

    @staticmethod
    def _as_file(pending: _Pending) -> tuple[Envelope, str, str, bytes | None]:
        """What the topics' fan-out takes: the copies' envelope, the file, its sender, and
        the side file for a retained message's header."""
        source = str(pending.envelope.property_value(SOURCE))
        return _as_copied(pending.envelope), pending.path, _publisher(source), pending.side_file

    def peek(self, source: str, msg_id: str) -> tuple[Envelope, bytes] | None:
        """What `source` stored (step 1) under `msg_id` and waits for its `deliver`: its
        envelope (the name in working/) and its body; None if nothing waits under it. For a
        sender that must know the message as it delivers it and no longer holds it in
        memory (an MQTT server restarted between PUBREC and PUBREL)."""
        _check_key(source, msg_id)  # else None, as for an id never stored
        pending = self._stored_under(source, msg_id)
        if pending is None:
            return None
        try:
            with open(pending.path, "rb") as file:
                return pending.envelope, file.read()
        except FileNotFoundError:  # delivered or dropped meanwhile
            return None

    def _stored_under(self, source: str, msg_id: str) -> _Pending | None:
        """What `source` stored under `msg_id` and waits for its `deliver`, if anything."""
        with self._lock:
            self._restore()
            return self._pending.get((source, msg_id))

    def message_id(self, source: str, msg_id: str) -> str | None:
        """The id of the message `source` stored under `msg_id` that waits for its
        `deliver` (its copies will have it), or None: for a sender that must know which
        message it delivers, as an MQTT server routing a retained one."""
        pending = self._stored_under(source, msg_id)
        return None if pending is None else pending.envelope.message_id

    def destination(self, source: str, msg_id: str) -> str | None:
        """The queue or topic of the message `source` stored under `msg_id` that waits for
        its `deliver`, or None: for a sender that must wake that destination's consumers as
        it delivers, whatever the deliver itself was addressed to (an XMPP <deliver/>)."""
        pending = self._stored_under(source, msg_id)
        if pending is None:
            return None
        return pending.queue if pending.queue is not None else pending.envelope.topic

    def pending(self, source: str, *, queues: bool = True) -> list[str]:
        """The msg ids `source` stored (step 1) that wait for their `deliver`, as the files
        say now: a sender that moved here from a process that stopped finds what it stored
        there, and this process then delivers it (docs/pubsub.md, "One process per sender").
        queues=False: for a sender that stores to topics only (an MQTT client), whose
        messages no queue's working/ holds: those are not listed (one folder, not one a
        queue, at each of its arrivals)."""
        _check_key(source)  # else [], as for a source with nothing stored
        with self._lock:
            if self._restored:
                self._reread(source, queues=queues)
            else:
                self._restore()
            return [msg_id for (owner, msg_id) in self._pending if owner == source]

    def _reread(self, source: str, *, queues: bool) -> None:
        """Read the files of `source` again, as `_restore` read everyone's at the first use:
        what another process stored for it since is pending here too, and what left
        working/ meanwhile (delivered or dropped there) is pending no more. One scan of
        working/ of the topics and (`queues`) of every queue: a sender's arrival, not a
        message's."""
        mine = [(key, pending) for key, pending in self._pending.items() if key[0] == source]
        for key, pending in mine:
            # One marked delivered since by another process (killed before its send) is
            # finished below as one new here: skipped as known, its `deliver` again was
            # answered by this one's books, not as the restart would.
            if not os.path.lexists(pending.path) or os.path.lexists(self._markers.path(*key)):
                self._books.forget(*key)
                del self._pending[key]
        known = {pending.path for pending in self._pending.values()}
        for entry, queue, envelope, key in self._waiting(queues=queues):
            if key[0] != source or entry.path in known or key in self._pending:
                continue
            marked, remember = self._markers.marked(key, entry.path) or (None, None)
            if self._restore_pending(entry, queue, envelope, key, marked=marked):
                # What `_restore` does once it finished a `deliver`: its id remembered, a
                # repeat of the `deliver` answered as done (not as an unknown id, which
                # tells the sender its message is lost); or, if it remembers nothing, not
                # remembered, its marker answering that repeat (`_sent_elsewhere`).
                assert marked is not None
                if remember:
                    self._books.restore(*key, size=0, since=marked.at, delivered=True)

    def drop_pending(self, source: str) -> int:
        """Delete every message `source` stored (step 1) that waits for its `deliver`, and
        return how many: its session ended (an MQTT clean start or session expiry), so no
        `deliver` will come, and its ids name new messages from now on. A file the file
        system refuses to delete is left behind (the first such OSError is raised once the
        others are gone): a restart takes it for pending again, and `expire` drops it."""
        _check_key(source)  # else 0, as for a source with nothing stored
        with self._lock:
            self._restore()
            ids = self._books.drop_pending(source)
            dropped = [self._pending.pop((source, msg_id), None) for msg_id in ids]
        _delete_all([pending.path for pending in dropped if pending is not None])
        return len(ids)

    def expire(self) -> int:
        """Drop pending messages whose `deliver` never came, and forget old markers."""
        with self._lock:
            self._restore()
            dropped = self._books.expire(now=self._clock.now())
            count = 0
            for key in dropped:
                pending = self._pending.pop(key, None)
                if pending is not None and self._finish_marked(key, pending):
                    continue
                count += 1
                if pending is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(pending.path)
            self._sweep.forget(self._books.limits.done_ttl)
            return count

    def _finish_marked(self, key: tuple[str, str], pending: _Pending) -> bool:
        """Whether `expire` found `pending` marked delivered since by another process, killed
        before its send: then it is sent now, as its restart or its sender's arrival would
        (`_reread`), not dropped as a message whose `deliver` never came, which left the
        marker to answer the sender's `deliver` again (MQTT's PUBREL) as done: lost, and
        told delivered. One that cannot be sent stays in working/ for the restart."""
        found = self._markers.marked(key, pending.path)
        if found is None:
            return False
        marked, remember = found
        self._markers.claim(key, pending.path)
        [failure] = self._send_all([pending], marked.superseded, marked)
        if failure is not None and not _gone(failure, pending):  # gone: its marker's sent it
            log.error("exactly once: %s stays in working/: %s", pending.path, failure)
        elif remember:
            self._books.restore(*key, size=0, since=marked.at, delivered=True)
        return True

    def tombstones_kept(self) -> tuple[float | None, dict[str, float]]:
        """What keeps a retained delete's tombstone (RetainedStore.remove_if), as the last
        `expire` listed the markers: the st_mtime of the oldest marker not past done_ttl
        that tells nothing of the message it marks (one of a boxmq before 2026-11-30, which
        names no file, a damaged one, one being written), which keeps every tombstone older
        than it; and the topics whose retained message a restart may replace as it finishes
        a `deliver` whose marker is there and whose file still waits in working/, each with
        its oldest such marker's time (`pinned` too, past done_ttl), which keeps its own
        topic's. A marker whose file left working/ tells no restart anything (its retained
        message was replaced before it left, and nothing sends it again), nor does one of a
        message that replaces none (to a queue, not retained): such markers kept every
        tombstone of the root for done_ttl (an hour), one for each topic whose retained
        message was cleared meanwhile. A call (once a minute, `Box.sweep`) stats each
        marker, and reads those it has not read as they are, and those whose file waits (a
        `deliver` sends it at once)."""
        with self._lock:
            names = self._sweep.listed()
        return self._sweep.tombstones_kept(names)

    @property
    def pinned(self) -> Mapping[str, float]:
        """The topics whose retained message a restart may still replace, as it finishes a
        `deliver` cut short past done_ttl (its marker kept while its message waits), each
        with the st_mtime of its oldest such marker, as the last `expire` found them. Such a
        marker keeps its topic's tombstone alone: one session whose PUBREL was cut short,
        its process killed, and that never came back kept every tombstone of the root."""
        return self._sweep.pinned

    def _waiting_by_marker(self) -> dict[str, Envelope]:
        """The envelope of each exactly-once message in working/, by its marker's name: for
        the sweep's markers that name no file."""
        return {marker_name(*key): envelope for _, _, envelope, key in self._waiting()}

    # -- restart ---------------------------------------------------------------------------------

    def _restore(self) -> None:
        """Rebuild the books from disk, once, before the first use."""
        if self._restored:
            return
        self._restored = True
        delivered, unremembered, damaged, files = self._markers.read_all()
        for key, marked in delivered.items():
            if key not in unremembered:
                self._books.restore(key[0], key[1], size=0, since=marked.at, delivered=True)
        for entry, queue, envelope, key in self._waiting():
            mark = delivered.get(key)
            if mark is not None and not self._markers.marks(files.get(key), entry.path):
                mark = None  # an earlier message's under the id (`Markers.marked`)
            elif mark is None and (at := damaged.get(marker_name(*key))) is not None:
                mark = Marked(at, recorded=False)  # as `Markers.marked` reads it (`_reread`)
            self._restore_pending(entry, queue, envelope, key, marked=mark)
        # Copies to topics whose file left .incoming/working/ before the crash: every copy was
        # pending then, some may be out (and taken) already; the rest go out, none again.
        finish_pending(self._root, EXACTLY_ONCE_PENDING)
        # A `deliver(remember=False)` the crash cut short after its marker (MQTT's PUBREL,
        # killed before its PUBCOMP): its message is sent now, and its id is not remembered,
        # as the deliver would have done. Remembered, the client's next message under the id
        # (it may reuse the packet id once it has the PUBCOMP of the PUBREL it sends again)
        # would pass for a repeat: answered, never stored, lost. Its marker stays (a sweep
        # deletes it past done_ttl; a new message under the id, at once): the PUBREL sent
        # again, here or to another process on the root, is answered as done, where it was
        # told its packet id was unknown (PUBCOMP 0x92).

    def _waiting(
        self, *, queues: bool = True
    ) -> Iterator[tuple[os.DirEntry[str], str | None, Envelope, tuple[str, str]]]:
        """Each exactly-once message in working/ of the topics and (`queues`) of every queue:
        its entry, its destination (a queue, or None: the topic in the envelope), its
        envelope and its (source, msg_id). An ordinary producer's file there is passed over."""
        folders = [(None, incoming_working(self._root))] + [
            (queue, os.path.join(path, State.WORKING.value))
            for queue, path in (dropbox_folders(self._root) if queues else ())
            # A queue folder made by hand under a name that is not boxmq's escape of it (a
            # hidden `.x`, `50%off`) holds no exactly-once message, and its name leads to
            # another folder: opening it by that name made an empty queue there (`%2Ex`
            # beside `.x`) at the first exactly-once call of every start (a sweep's too).
            if path == queue_path(self._root, queue)
        ]
        for queue, working in folders:
            with contextlib.suppress(FileNotFoundError), os.scandir(working) as entries:
                for entry in entries:
                    envelope, reason = decode_lenient(entry.name)
                    source = envelope.property_value(SOURCE)
                    msg_id = envelope.property_value(SOURCE_MESSAGE_ID)
                    if reason is None and isinstance(source, str) and isinstance(msg_id, str):
                        yield entry, queue, envelope, (source, msg_id)

    def _restore_pending(
        self,
        entry: os.DirEntry[str],
        queue: str | None,
        envelope: Envelope,
        key: tuple[str, str],
        *,
        marked: Marked | None,
    ) -> bool:
        """Take a message of `_waiting` into the books, or send it if it was `marked`
        delivered (the crash came between the marker and the move): a retained message of
        its topic written (or deleted) since stays, as the `deliver` would have kept it
        (Topics.send_files). One that cannot be is logged and stays in working/: it
        must not keep the others from their books (their repeats would pass for new, their
        deliver for done). True if it sent it, or another process did meanwhile."""
        pending = _Pending(entry.path, queue, envelope)
        try:
            if queue is None:
                # A topic's: one that no publish could take, kept by a version before
                # `assured` checked it ('a/+', NUL, or '' which was stored as no topic at
                # all), is refused here, not at its send.
                validate_topic(envelope.topic or "")
            if marked is not None:
                self._markers.claim(key, entry.path)
                [failure] = self._send_all([pending], marked.superseded, marked)
                if failure is not None:
                    raise failure
                return True
            stat = entry.stat()
            self._books.restore(*key, size=stat.st_size, since=stat.st_ctime, delivered=False)
            self._pending[key] = pending
        except (BoxMQError, OSError) as error:
            folder = os.path.dirname(entry.path)
            if not isinstance(error, OSError) or not _gone(error, pending):
                log.error("exactly once: %s stays in %s: %s", entry.name, folder, error)
                return False
            # Gone since it was listed: sent by another process on the root that finished
            # the same `deliver` from its marker (two starts at once, a start and a sender's
            # arrival), or delivered or dropped there. A normal race: nothing stays.
            done = "sent by another process" if marked is not None else "delivered or dropped"
            log.debug("exactly once: %s left %s meanwhile, %s", entry.name, folder, done)
            return marked is not None
        return False


def _check_key(source: object, msg_id: object = "") -> None:
    """InvalidArgument for a source or msg_id that is not a str: a tuple of the two is the
    key of the books, which a 5 matches nowhere, so a caller's mistake was answered as an
    intake with nothing stored (False, [] or 0). And for one with a lone surrogate, which
    neither a file name nor a delivery record can hold: its UnicodeEncodeError came out of
    `assured_many` past the messages of the batch already written, left reserved."""
    for what, given in (("source", source), ("msg_id", msg_id)):
        if not isinstance(given, str):
            raise InvalidArgument(f"{what} is a str, not {type(given).__name__}: {given!r}")
        if not given.isascii():
            try:
                given.encode()
            except UnicodeEncodeError:
                raise InvalidArgument(f"{what} has a lone surrogate: {given!r}") from None


def _replaces(pending: _Pending) -> str | None:
    """The topic whose retained message `pending` replaces at its `deliver`, if any."""
    return replaced_topic(pending.envelope, False) if pending.queue is None else None


def _route_key(pending: _Pending) -> tuple[str, str]:
    """The (topic, publisher) a topic's message of `pending` is routed by."""
    assert pending.envelope.topic is not None
    return pending.envelope.topic, _publisher(str(pending.envelope.property_value(SOURCE)))


def _publisher(source: str) -> str:
    """Who published a message of exactly-once `source`, as the router's No Local sees it:
    an MQTT client publishes at QoS 0 and 1 as its consumer name, and its intake source is
    that name behind a prefix (model.py)."""
    return source.removeprefix(MQTT_SOURCE_PREFIX)


def _unknown(msg_id: str, must_exist: bool) -> Outcome:
    """What `deliver` tells of an id that names no stored message."""
    if must_exist:
        return ItemNotFound(msg_id, "no message is stored under this id (or it expired)")
    return False


def _gone(error: OSError, pending: _Pending) -> bool:
    """Whether a `deliver` failed because the file of `pending` left working/ before it."""
    return isinstance(error, FileNotFoundError) and not os.path.lexists(pending.path)


def _delete_all(paths: list[str]) -> None:
    """Delete each file (one gone already is deleted); the first OSError is raised after."""
    failures: list[OSError] = []
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as error:
            failures.append(error)
    if failures:
        raise failures[0]


def _as_copied(envelope: Envelope) -> Envelope:
    """A topic's copies of an assured message: without the intake's own books (its sender
    and the sender's id for it), which no subscriber needs and which would take the room
    its name has for the topic and the properties. Always the same for one file, so a copy
    sent again after a crash has the same name (store/fanout.py)."""
    return envelope.without_property(SOURCE).without_property(SOURCE_MESSAGE_ID)


def _checked_name(envelope: Envelope, *, to_topic: bool) -> str:
    """The name in working/; MetadataTooLong if what step 2 makes of it would not fit: the
    queue's file keeps it, a topic's copies add their QoS, and either must leave a put's
    room for what a redelivery adds. Refused before `received`, a message is never lost at
    `deliver` (where it would be too late to tell its sender)."""
    if not to_topic:
        return _named(envelope, PUT_NAME_LIMIT)
    # The copies first, against a put's limit. The working/ name also carries the sender's
    # source and id, which the copies leave out: only a name's own limit holds it.
    copy = at_qos(_as_copied(envelope), QoS.EXACTLY_ONCE)
    try:
        encode(copy, limit=PUT_NAME_LIMIT)
    except MetadataTooLong as error:
        if _senders_own_only(envelope):  # no properties to drop: an XMPP sender sends none
            raise SendersNameTooLong(partial(_topic_refusal, copy, PUT_NAME_LIMIT)) from None
        raise MetadataTooLong(
            f"once delivered, use a shorter topic or fewer properties: {error}"
        ) from None
    return _named(envelope, MAX_NAME)


def _topic_refusal(copy: Envelope, limit: int, words: Words) -> str:
    """What the topic takes of its copies' names, over `limit`, and how long it could be."""
    rest = _length_without(copy, TOPIC)
    topic, room = _length(copy) - rest, limit - rest
    return (
        f"once delivered, {words.the_topic} takes {topic} bytes of a copy's file name once "
        "escaped (a character other than A-Z, a-z, 0-9, - and _ takes 3 to 12), over its "
        f"{limit}-byte limit beside the rest: at most {room} fit; use a shorter {words.topic}"
    )


# What an exactly-once sender chose of a name when it sent no properties of its own (an
# XMPP <assured/>): its id, its name and the topic; the rest boxmq writes in a fixed size.
_SENDERS_OWN = frozenset({SOURCE, SOURCE_MESSAGE_ID, TOPIC})


class Words(NamedTuple):
    """What a door calls the texts of an exactly-once sender that a stored name holds."""

    msg_id: str  # as "use a shorter ..." names it
    the_msg_id: str  # as a sentence starts with it
    source: str  # a format of its value, as "{} takes 21" names it
    topic: str
    the_topic: str


API_WORDS = Words("msg_id", "msg_id", "source {!r}", "topic", "topic")
"""assured()'s parameters: what a refusal says unless its door chooses other words."""


class SendersNameTooLong(MetadataTooLong):
    """A name over its limit that holds only texts its sender chose (no properties of its
    own): `str()` says so in the API's words, `said(words)` in a door's."""

    def __init__(self, say: Callable[[Words], str]) -> None:
        super().__init__(say(API_WORDS))
        self.said = say


def _subscription_of(path: str) -> tuple[str, str] | None:
    """Who subscribes at the subscription folder `path` and to which filter, from its record,
    for TargetMissing; None if it has none any more (unsubscribed since it was routed)."""
    record = read_record(path)
    if record is None:
        return None
    if record.group is not None:
        return f"share group {record.group!r}", record.filter
    return f"subscriber {record.subscriber!r}", record.filter


def _named(envelope: Envelope, limit: int) -> str:
    """encode(envelope, limit=limit); a MetadataTooLong in its sender's words if only what
    it chose is in the name: the store's "shorten the properties" would name boxmq's own
    (its msg_id and source, kept until `deliver`), of which an XMPP sender sent none."""
    try:
        return encode(envelope, limit=limit)
    except MetadataTooLong as error:
        if not _senders_own_only(envelope):
            raise
        raise SendersNameTooLong(partial(_senders_refusal, envelope, limit)) from error


def _senders_own_only(envelope: Envelope) -> bool:
    """Whether its sender gave no properties: its name holds only what `assured` adds."""
    return all(p.name in _SENDERS_OWN for p in envelope.properties)


def _length(envelope: Envelope) -> int:
    """The bytes of `envelope`'s name, whatever its limit."""
    return len(encode(envelope, limit=_UNLIMITED))


def _length_without(envelope: Envelope, name: str) -> int:
    """`_length` with property `name`'s text emptied: what the rest of the name takes. Less
    it, `_length` gives what that text takes once escaped; less it, a limit the room left."""
    emptied = tuple(
        Property(p.name, p.type, "") if p.name == name else p for p in envelope.properties
    )
    return _length(replace(envelope, properties=emptied))


def _senders_refusal(envelope: Envelope, limit: int, words: Words) -> str:
    """What of `envelope`'s name, over `limit`, each of the sender's texts takes once escaped
    and how long its id could be: the one text it can always choose again."""
    whole, rest = _length(envelope), _length_without(envelope, SOURCE_MESSAGE_ID)
    msg_id, source = whole - rest, whole - _length_without(envelope, SOURCE)
    room = limit - rest
    others = f"{words.source.format(envelope.property_value(SOURCE))} takes {source}"
    if (topic := envelope.property_value(TOPIC)) is not None:
        others += f" and {words.the_topic} takes {whole - _length_without(envelope, TOPIC)}"
    said = (
        f"{words.the_msg_id} takes {msg_id} bytes of the stored message's file name once "
        "escaped (a character other than A-Z, a-z, 0-9, - and _ takes 3 to 12), over its "
        f"{limit}-byte limit beside the rest ({others})"
    )
    if room <= 0:  # a JID may be 3071 bytes (RFC 7622): only the topic can be shorter
        return f"{said}: no {words.msg_id} fits" + (
            f"; use a shorter {words.topic}" if topic else ""
        )
    shorter = words.msg_id if topic is None else f"{words.msg_id} or {words.topic}"
    return f"{said}: at most {room} fit; use a shorter {shorter}"


_UNLIMITED = 1 << 30  # a limit no name reaches: to measure one
