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
out of their pending folders.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from boxmq.client import mqtt_fields
from boxmq.client.lifecycle import PUT_NAME_LIMIT
from boxmq.clock import Clock
from boxmq.core import Action, ExactlyOnce, ExactlyOnceLimits
from boxmq.core.durations import check_seconds
from boxmq.errors import InvalidArgument, ItemNotFound, MetadataTooLong
from boxmq.ids import IdFactory
from boxmq.model import (
    QOS,
    SOURCE,
    SOURCE_MESSAGE_ID,
    TOPIC,
    Envelope,
    MessageClass,
    Property,
    PropertyType,
    PropertyValue,
    properties_from,
)
from boxmq.store.commit import Committer, Move
from boxmq.store.dropbox import Dropbox
from boxmq.store.fanout import finish_pending
from boxmq.store.layout import State, list_dropboxes, queue_path
from boxmq.store.names import decode_lenient, encode
from boxmq.store.temporaries import temporary_in
from boxmq.store.topics import EXACTLY_ONCE_PENDING, incoming_working

__all__ = ["AssuredIntake"]

_FanOut = Callable[[Envelope, str, str], None]  # (envelope, pending file, source): publish it


@dataclass(frozen=True, slots=True)
class _Pending:
    path: str  # the file in working/
    queue: str | None  # the destination: a queue, or (None) the topic in the envelope
    envelope: Envelope


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
    ) -> None:
        self._root = root
        self._committer = committer
        self._ids = ids
        self._clock = clock
        self._fan_out = fan_out
        self._books = ExactlyOnce(limits)
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._markers = os.path.join(root, ".exactly-once")
        self._lock = threading.Lock()
        self._restored = False

    @property
    def markers(self) -> str:
        """The folder of the "delivered" markers."""
        return self._markers

    def assured(
        self,
        source: str,
        msg_id: str,
        body: bytes,
        *,
        queue: str | None = None,
        topic: str | None = None,
        priority: int = 4,
        properties: Mapping[str, PropertyValue | Property] | None = None,
        reclaim: bool = False,
        expires_in: float | None = None,
    ) -> bool:
        """Step 1. True if stored now, False if it was a repeat (answer it again all the same).

        reclaim=True: an id already delivered names a new message (its marker goes, so a
        restart cannot take the new message for delivered). expires_in: seconds from now
        after which the message expires, kept in its name (the expiration field) from here
        to its copies. Raises NotAllowed, MessageTooLarge or ResourceConstraint, storing
        nothing.
        """
        if expires_in is not None:
            check_seconds("expires_in", expires_in)
        if (queue is None) == (topic is None):
            raise InvalidArgument("an assured message goes to a queue or to a topic: give one")
        mqtt_fields.check(properties or {})
        with self._lock:
            self._restore()
            now = self._clock.now()
            books = self._books
            if books.assured(source, msg_id, size=len(body), now=now, reclaim=reclaim) is not (
                Action.STORE
            ):
                return False
            try:
                if reclaim:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._marker(source, msg_id))
                expiration = int((now + expires_in) * 1000) if expires_in else 0
                pending = self._store(
                    source, msg_id, body, queue, topic, priority, properties, expiration
                )
            except BaseException:
                self._books.forget(source, msg_id)
                raise
            self._books.stored(source, msg_id)
            self._pending[source, msg_id] = pending
            return True

    def _store(
        self,
        source: str,
        msg_id: str,
        body: bytes,
        queue: str | None,
        topic: str | None,
        priority: int,
        properties: Mapping[str, PropertyValue | Property] | None,
        expiration: int,
    ) -> _Pending:
        extra = {SOURCE: source, SOURCE_MESSAGE_ID: msg_id} | ({TOPIC: topic} if topic else {})
        envelope = Envelope(
            message_id=self._ids.new(),
            priority=priority,
            message_class=MessageClass.BYTES,
            expiration=expiration,
            properties=(
                *properties_from(dict(properties or {})),
                *(Property(k, PropertyType.STRING, v) for k, v in extra.items()),
            ),
        )
        working = self._working_dir(queue)
        os.makedirs(working, exist_ok=True)
        temporary = temporary_in(working)
        path = os.path.join(working, _checked_name(envelope, to_topic=queue is None))
        try:
            with open(temporary, "wb") as out:
                out.write(body)
            self._committer.commit([Move(temporary, path)])  # flushed: now `received` is true
        except OSError:
            # Not `received`: the sender will send it again, so nothing of it may stay (a
            # renamed file whose directory flush failed would otherwise be restored later).
            for leftover in (temporary, path):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
            raise
        return _Pending(path, queue, envelope)

    def _working_dir(self, queue: str | None) -> str:
        if queue is None:
            return incoming_working(self._root)
        return Dropbox(queue_path(self._root, queue), self._committer).dir(State.WORKING)

    def deliver(
        self, source: str, msg_id: str, *, remember: bool = True, must_exist: bool = False
    ) -> bool:
        """Step 2. True if delivered now; False for a repeat or an unknown id (deliver nothing).

        remember=False: forget the id once delivered (its marker too), so it can name a new
        message at once. must_exist=True: an unknown id (never stored, expired, or swept away)
        raises ItemNotFound instead of returning False, so the sender can be told that the
        message is lost; a repeat of a delivered id still returns False."""
        with self._lock:
            self._restore()
            action = self._books.deliver(source, msg_id, now=self._clock.now(), remember=remember)
            pending = self._pending.pop((source, msg_id), None)
            if action is Action.ANSWER:
                return False
            if action is not Action.DELIVER or pending is None:
                return self._unknown(msg_id, must_exist)
            try:
                self._mark(source, msg_id)
                self._send(pending)
            except OSError as error:
                if not os.path.lexists(pending.path) and isinstance(error, FileNotFoundError):
                    # Swept away before `deliver`: neither pending nor delivered, or the
                    # sender's resend would pass for a repeat of a message never sent.
                    self._unmark(source, msg_id)
                    return self._unknown(msg_id, must_exist)
                self._undeliver(source, msg_id, pending)
                raise
            if not remember:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._marker(source, msg_id))
            return True

    def _undeliver(self, source: str, msg_id: str, pending: _Pending) -> None:
        """`deliver` failed in the file system: if the message is still in working/, it waits
        there for a `deliver` again (the sender is told of the failure and repeats it)."""
        with contextlib.suppress(OSError):
            os.unlink(self._marker(source, msg_id))
        try:
            stat = os.stat(pending.path)
        except OSError:
            return  # it left working/: its copies are out, or pending (finished on restart)
        self._books.restore(source, msg_id, size=stat.st_size, since=stat.st_ctime, delivered=False)
        self._pending[source, msg_id] = pending

    @staticmethod
    def _unknown(msg_id: str, must_exist: bool) -> bool:
        if must_exist:
            raise ItemNotFound(msg_id, "no message is stored under this msgId (or it expired)")
        return False

    def _mark(self, source: str, msg_id: str) -> None:
        os.makedirs(self._markers, exist_ok=True)
        temporary = temporary_in(self._markers)
        try:
            with open(temporary, "w") as out:
                json.dump({"source": source, "msg_id": msg_id}, out)
            self._committer.commit([Move(temporary, self._marker(source, msg_id))])
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def _unmark(self, source: str, msg_id: str) -> None:
        self._books.forget(source, msg_id)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._marker(source, msg_id))

    def _marker(self, source: str, msg_id: str) -> str:
        digest = hashlib.sha256(f"{source}\0{msg_id}".encode()).hexdigest()
        return os.path.join(self._markers, digest)

    def _send(self, pending: _Pending) -> None:
        if pending.queue is None:
            source = pending.envelope.property_value(SOURCE)
            self._fan_out(_as_copied(pending.envelope), pending.path, str(source))
            return
        box = Dropbox(queue_path(self._root, pending.queue), self._committer)
        name = os.path.basename(pending.path)
        self._committer.commit([Move(pending.path, box.file(State.TARGET, name))])

    def pending(self, source: str) -> list[str]:
        """The msg ids `source` stored (step 1) that wait for their `deliver`."""
        with self._lock:
            self._restore()
            return [msg_id for (owner, msg_id) in self._pending if owner == source]

    def drop_pending(self, source: str) -> int:
        """Delete every message `source` stored (step 1) that waits for its `deliver`, and
        return how many: its session ended (an MQTT clean start or session expiry), so no
        `deliver` will come, and its ids name new messages from now on. A file the file
        system refuses to delete is left behind (the first such OSError is raised once the
        others are gone): a restart takes it for pending again, and `expire` drops it."""
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
            for key in dropped:
                pending = self._pending.pop(key, None)
                if pending is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(pending.path)
            self._forget_markers()
            return len(dropped)

    def _forget_markers(self) -> None:
        limit = self._clock.now() - self._books.limits.done_ttl
        with contextlib.suppress(FileNotFoundError), os.scandir(self._markers) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    if entry.stat().st_mtime < limit:
                        os.unlink(entry.path)

    # -- restart ---------------------------------------------------------------------------------

    def _restore(self) -> None:
        """Rebuild the books from disk, once, before the first use."""
        if self._restored:
            return
        self._restored = True
        delivered = self._read_markers()
        for key, since in delivered.items():
            self._books.restore(key[0], key[1], size=0, since=since, delivered=True)
        for queue in [None, *list_dropboxes(self._root)]:
            working = self._working_dir(queue)
            with contextlib.suppress(FileNotFoundError), os.scandir(working) as entries:
                for entry in entries:
                    self._restore_pending(entry, queue, delivered)
        # Copies to topics whose file left .incoming/working/ before the crash: every copy was
        # pending then, some may be out (and taken) already; the rest go out, none again.
        finish_pending(self._root, EXACTLY_ONCE_PENDING)

    def _restore_pending(
        self, entry: os.DirEntry[str], queue: str | None, delivered: Mapping[tuple[str, str], float]
    ) -> None:
        envelope, reason = decode_lenient(entry.name)
        source, msg_id = envelope.property_value(SOURCE), envelope.property_value(SOURCE_MESSAGE_ID)
        if reason is not None or not isinstance(source, str) or not isinstance(msg_id, str):
            return  # an ordinary producer's file, not an assured one
        pending = _Pending(entry.path, queue, envelope)
        if (source, msg_id) in delivered:
            self._send(pending)  # marked but not moved: the crash came in between
            return
        stat = entry.stat()
        self._books.restore(source, msg_id, size=stat.st_size, since=stat.st_ctime, delivered=False)
        self._pending[source, msg_id] = pending

    def _read_markers(self) -> dict[tuple[str, str], float]:
        found = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(self._markers) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                with contextlib.suppress(FileNotFoundError, ValueError), open(entry.path) as src:
                    data = json.load(src)
                    found[str(data["source"]), str(data["msg_id"])] = entry.stat().st_mtime
        return found


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
    name = encode(envelope)
    sent = (
        encode(_as_copied(envelope).with_property(QOS, PropertyType.BYTE, 2)) if to_topic else name
    )
    if len(sent) > PUT_NAME_LIMIT:
        raise MetadataTooLong(
            f"the metadata needs {len(sent)} bytes of file name once delivered, the limit for "
            f"a put is {PUT_NAME_LIMIT}: use a shorter topic or fewer properties"
        )
    return name
