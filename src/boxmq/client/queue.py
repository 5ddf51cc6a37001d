"""A queue of the embedded API: put, consume, inspect and repair, straight on the files."""

from __future__ import annotations

import functools
import heapq
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import TypeAlias

from boxmq.client import mqtt_fields
from boxmq.client.body import body_bytes
from boxmq.client.consumer import Consumer
from boxmq.client.disk_locks import DiskSettler, GotLock
from boxmq.client.lifecycle import (
    NOT_A_FILE,
    PUT_NAME_LIMIT,
    envelope_of,
    redrive_name,
    set_aside,
    set_aside_claimed,
    set_aside_strays,
    shown,
    tell_expired,
    unusable,
)
from boxmq.client.live_queue import LiveQueue
from boxmq.client.message import Message
from boxmq.client.ranked_names import ranked_priority
from boxmq.client.spill import spilled, withdraw
from boxmq.client.sweeps import SweepLimits, release_stale_locks
from boxmq.core import QueuePolicy
from boxmq.core.durations import check_seconds
from boxmq.errors import (
    InvalidArgument,
    MetadataTooLong,
    QueueNotFound,
    TargetMissing,
    check_count,
    check_listed,
)
from boxmq.ids import IdFactory
from boxmq.model import (
    DEAD_REASON,
    ConsumerId,
    Envelope,
    MessageClass,
    MessageId,
    Property,
    PropertyValue,
    check_given,
    properties_from,
    refuse_reserved,
)
from boxmq.store.commit import Move, discard_unsent, discard_unsent_file
from boxmq.store.dropbox import Dropbox, NotAFile
from boxmq.store.layout import State
from boxmq.store.names import (
    GET_TOKEN,
    Lock,
    check_consumer_name,
    check_priority,
    encode,
    locked_name,
    may_carry_id,
    plain_name,
    split_lock,
)
from boxmq.store.side_files import Placed, SideFiles
from boxmq.store.v5_properties import (
    V5Reader,
    correlation_id_shown,
    properties_shown,
    reply_to_shown,
)

__all__ = ["Outgoing", "Peeked", "Queue", "QueueCounts", "counts_of"]

log = logging.getLogger("boxmq")

# Read from module globals by a put: Enum's metaclass has a __getattr__, so each
# `MessageClass.BYTES` is a slow attribute lookup (~800 instructions), a global one cached load.
_TEXT, _BYTES = MessageClass.TEXT, MessageClass.BYTES
# The folders `find` looks in by default: where a message is once put (working/ holds
# only what is not put yet), those it is most likely in first.
_WHERE_A_MESSAGE_IS = (
    State.TARGET,
    State.PROCESSING,
    State.PROCESSED,
    State.ERROR,
    State.EXPIRED,
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message to put, for `put_many`."""

    body: bytes | str
    priority: int = 4
    properties: Mapping[str, PropertyValue | Property] | None = None
    expires_in: float | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    type: str | None = None


@dataclass(frozen=True, slots=True)
class Peeked:
    envelope: Envelope
    size: int
    state: State
    holder: ConsumerId | None = None
    _v5: V5Reader | None = field(default=None, repr=False, compare=False)
    # processing/: when its lock times out (epoch seconds), as the lock's name says; past it,
    # the message goes back to target/ at the next sweep (`boxmq serve`, a consumer's).
    lock_deadline: float | None = None
    # processing/: the lock is `get`'s (Queue.get, `boxmq get`), bound to no process: it is
    # held by hand until lock_deadline, or until settled by id, not by a consumer running.
    by_get: bool = False

    @property
    def properties(self) -> dict[str, PropertyValue]:
        """What `Message.properties` would show for it."""
        return properties_shown(self._v5, self.envelope)

    @property
    def topic(self) -> str | None:
        """The topic a subscription's message was published to, as `Message.topic`."""
        return self.envelope.topic

    @property
    def dead(self) -> str | None:
        """error/: why it went there, as its name records it ("rejected", "max-deliveries",
        "too-large", "metadata-full"; None for a name that could not carry it, or one a script
        moved)."""
        why = self.envelope.property_value(DEAD_REASON)
        return why if isinstance(why, str) else None

    @property
    def correlation_id(self) -> str | None:
        """What `Message.correlation_id` would show for it: an MQTT v5 request's Correlation
        Data too."""
        return correlation_id_shown(self._v5, self.envelope)

    @property
    def reply_to(self) -> str | None:
        """What `Message.reply_to` would show for it: an MQTT v5 request's Response Topic too."""
        return reply_to_shown(self._v5, self.envelope)


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """How many files each state folder holds; `ready` includes delayed messages."""

    ready: int
    locked: int
    done: int
    dead: int
    expired: int
    uncommitted: int


class Queue:
    def __init__(
        self,
        name: str,
        box: Dropbox,
        *,
        ids: IdFactory,
        now: Callable[[], float],
        policy: QueuePolicy,
        keep_processed: bool,
        live: Callable[[], LiveQueue],
        opened: Callable[[], LiveQueue | None] = lambda: None,
        limits: SweepLimits | None = None,
        v5: V5Reader | None = None,
        side_files: SideFiles | None = None,
        check_getter: Callable[[ConsumerId], None] | None = None,
        known: KnownNames | None = None,
    ) -> None:
        self.name = name
        # A subscription's: refuses a `get` under the name of one of its readers.
        self._check_getter = check_getter
        self._box = box
        self._v5 = v5
        self._side_files = side_files  # for properties too long for a name (client/spill.py)
        self._ids = ids
        self._now = now
        self._live = live
        self._opened = opened  # this process's consumers of the queue, if it has any
        self._policy = policy
        self._limits = limits or SweepLimits()
        self._disk = DiskSettler(box, policy, now, keep_processed)
        # What `get` read of the names in target/ (`_Known`), by name: a name whose order
        # comes from its id says the same whatever file it names, so each get decodes only
        # the names that came since (threads may share it: one dict operation each). The
        # Box's for the queue's path, which every Queue it hands out for that path shares.
        self._known: KnownNames = {} if known is None else known
        self._bursting = False  # the last get found many new names in target/ (`_many`)

    # -- producing ---------------------------------------------------------------------------

    def put(
        self,
        body: bytes | str,
        *,
        priority: int = 4,
        properties: Mapping[str, PropertyValue | Property] | None = None,
        expires_in: float | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        type: str | None = None,
    ) -> MessageId:
        """Send one message; returns its id once it is as durable as the fsync policy says."""
        if (
            priority == 4
            and properties is None
            and expires_in is None
            and correlation_id is None
            and reply_to is None
            and type is None
        ):
            return self._put_body(body)  # a bare body: no Outgoing to build and read
        outgoing = Outgoing(body, priority, properties, expires_in, correlation_id, reply_to, type)
        return self.put_many([outgoing])[0]

    def _check_not_deleted(self, error: FileNotFoundError, written: str | None = None) -> None:
        """QueueNotFound if the queue's folder is gone (box.delete_queue, or another process,
        since this Queue was made); TargetMissing, a store failure, if only its target/ is
        (moved aside to be made again, operations.md's "Disk usage"): a state that passes,
        not a delete, so the doors keep the queue's subscribers. Not a FileNotFoundError
        naming a file in working/. A put does not make target/ again itself: without it the
        folder is no queue (DropboxMQ), and a put racing an `rm -rf` or a
        `mv target target.old && mkdir target` would undo or break it.

        Called before the put's file is discarded: where another thread or process has made
        the queue again since the delete, the folder is there (half made, or whole), and
        only the file the put wrote, gone with the folder it was written in, tells. The
        folder is read in one look: another delete or making may come between two. Returns
        where the file `written` and target/ are both there, or where a write that failed
        (`written` None) named no path in the queue's folder."""
        path = self._box.path
        try:
            folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            raise QueueNotFound(
                f"queue {self.name!r} was deleted (no folder {path}) since this "
                f"Queue was made: box.queue({self.name!r}) makes it again"
            ) from error
        try:
            entries = os.listdir(folder)
            listed = os.fstat(folder).st_ino
        finally:
            os.close(folder)
        target = self._box.dir(State.TARGET)
        if State.TARGET.value not in entries:
            if State.PROCESSING.value not in entries:  # layout.half_made: being made again
                raise self._deleted(f"{path} is being made again: put again once it is") from error
            if not _still_at(path, listed):
                # The folder listed was renamed away by a delete while it was read, and its
                # files were being deleted there: target/ went first, processing/ was left.
                raise self._deleted(f"{path} was deleted as it was looked at") from error
            raise TargetMissing(
                error, self.name, target, putting=True, since=" since this Queue was made"
            ) from error
        if written is None:  # a write that failed: into no working/, or another folder's
            failed = str(error.filename)
            if failed == path or failed.startswith(path + os.sep):
                raise self._deleted(f"{path} was made again since: put again") from error
        elif not os.path.lexists(written):  # gone with the folder it was written in
            raise self._deleted(f"{path} was made again since: put again") from error
        # Else the file is there and so is target/: target/ was away at the rename (moved
        # aside, or the folder deleted and made again, the file written in a spare or the
        # new working/), and is back (`_send_again`).

    def _send_again(
        self, error: FileNotFoundError, written: str | None, send: Callable[[], None]
    ) -> None:
        """After a put's send failed with `error`: the error that tells why
        (`_check_not_deleted`), or, where target/ was away at the rename and is back with
        the put's file still there, `send` once more, to the queue there now. Failing so
        again, TargetMissing."""
        self._check_not_deleted(error, written)
        try:
            send()
        except FileNotFoundError as again:
            self._check_not_deleted(again, written)
            target = self._box.dir(State.TARGET)
            raise TargetMissing(
                again, self.name, target, putting=True, since=" twice during this put"
            ) from again

    def _deleted(self, since: str) -> QueueNotFound:
        """The QueueNotFound of a put a delete of its queue cut short, where the queue's
        folder is there again (another thread or process made it since)."""
        return QueueNotFound(f"queue {self.name!r} was deleted during this put, and {since}")

    def _put_body(self, body: bytes | str) -> MessageId:
        """`put_many([body])[0]` for one bare body, the common put, in one call instead of
        five (put_many, _write_body, _write_as, _name, plain_name): the same envelope, name,
        write, commit and offer to this process's consumers."""
        data, message_class = _bare(body)
        box = self._box
        # A spare kept open is written without the fstat that tells whether its file is still
        # there: the rename that sends it tells, in the rare case it is not (lost_spare).
        check = False
        while True:
            message_id = self._ids.new()
            name = f"4.{message_id}.{message_class._value_}"  # plain_name(4, id, class, 0)
            try:
                path = box.write_file(name, data, check=check)  # no Move: send_file sends it
            except FileExistsError:  # an id taken in working/: draw again
                continue
            except FileNotFoundError as error:  # no working/: a folder deleted
                self._check_not_deleted(error)
                raise
            try:
                box.send_file(path, name)
                break
            except FileNotFoundError as error:
                if box.lost_spare(path):  # .spare/ was deleted: write again, with the check
                    check = True
                    continue
                try:
                    # Before the discard: the file tells where it was written.
                    self._send_again(error, path, functools.partial(box.send_file, path, name))
                    break
                except BaseException:
                    discard_unsent_file(path)  # refused to the caller: never delivered later
                    raise
            except BaseException:  # the disk's error, or Closed by a close meanwhile (put_many)
                discard_unsent_file(path)
                raise
        if (live := self._opened()) is not None:
            live.sent([(name, Envelope(message_id, 4, message_class, 0), data)])
        return message_id

    def put_many(self, messages: Iterable[Outgoing | bytes | str]) -> list[MessageId]:
        """Send many messages with one commit (one flush for all under fsync=always)."""
        if isinstance(messages, (str, bytes, bytearray, memoryview)):
            # A body is iterable too: put_many("abc") put three messages, "a", "b" and "c".
            raise InvalidArgument(
                f"put_many takes a list of messages, not one body ({type(messages).__name__}): "
                "use put(body), or put_many([body])"
            )
        # None or 5 failed as "not iterable", and a dict put its keys as messages.
        check_listed("put_many", messages, "messages", alone="use put_many([message, ...])")
        moves, sent, ids = [], [], []
        placed: list[Placed | None] = []  # each message's side file (client/spill.py)
        try:
            for item in messages:
                if isinstance(item, Outgoing):
                    envelope, name, move, body, side_file = self._write(item)
                else:
                    envelope, name, move, body = self._write_body(item)
                    side_file = None
                moves.append(move)
                placed.append(side_file)
                sent.append((name, envelope, body))
                ids.append(envelope.message_id)
        except BaseException as error:
            try:
                if isinstance(error, FileNotFoundError):  # no working/: a folder deleted
                    self._check_not_deleted(error)
            finally:
                self._withdraw(moves, placed)
            raise
        try:
            self._box.send(moves)
        except FileNotFoundError as error:
            try:
                # Before the discard: the files tell where they were written.
                # The rename that failed names its file (Move.apply).
                written = error.filename if isinstance(error.filename, str) else None
                self._send_again(error, written, lambda: self._box.send(_unsent(moves)))
            except BaseException:
                self._withdraw(moves, placed)
                raise
        except BaseException:
            self._withdraw(moves, placed)
            raise
        if (live := self._opened()) is not None:
            live.sent(sent)  # our consumers need not wait for the watcher to read the names
        return ids

    def _withdraw(self, moves: list[Move], placed: list[Placed | None]) -> None:
        """The caller hears of a failure (the disk's, or a bad item half-way): none of those
        written goes out later, nor waits in working/ for the sweep, nor a side file made for
        one of them alone, named by nothing until the hourly collection."""
        for index in discard_unsent(moves):
            withdraw(self._side_files, placed[index])

    def _write(self, outgoing: Outgoing) -> tuple[Envelope, str, Move, bytes, Placed | None]:
        """Write one message in working/ under a fresh id: its envelope, its name, the move
        that sends it, the body written, and the side file written for its properties."""
        plain = not (
            outgoing.properties or outgoing.correlation_id or outgoing.reply_to or outgoing.type
        )
        envelope, body = self._envelope(outgoing, plain)
        return self._write_as(envelope, body, plain)

    def _write_body(self, body: bytes | str) -> tuple[Envelope, str, Move, bytes]:
        """`_write(Outgoing(body))` without the Outgoing (a frozen dataclass of seven fields,
        made and read for each body put_many is given) or the checks of fields it would leave
        at their defaults: 11,000 fewer instructions per put (docs/benchmarks.md, XMPP). Its
        name is written as `_put_body` writes it, not through _write_as, _name and plain_name
        (a plain body's name never needs a side file)."""
        data, message_class = _bare(body)
        while True:
            message_id = self._ids.new()
            name = f"4.{message_id}.{message_class._value_}"  # plain_name(4, id, class, 0)
            try:
                move = self._box.write(name, data)
            except FileExistsError:  # an id taken in working/: draw again
                continue
            return Envelope(message_id, 4, message_class, 0), name, move, data

    def _write_as(
        self, envelope: Envelope, body: bytes, plain: bool
    ) -> tuple[Envelope, str, Move, bytes, Placed | None]:
        placed = None
        try:
            name = self._name(envelope, plain)
        except MetadataTooLong as error:
            envelope, name, placed = spilled(envelope, self._side_files, _put_name, error)
        while True:
            try:
                return envelope, name, self._box.write(name, body), body, placed
            except FileExistsError:  # an id taken in working/: draw again
                envelope = replace(envelope, message_id=self._ids.new())
                name = self._name(envelope, plain)
            except BaseException:  # a full disk: the message is refused, its side file too
                withdraw(self._side_files, placed)
                raise

    @staticmethod
    def _name(envelope: Envelope, plain: bool) -> str:
        if plain:  # the common put (a body, maybe a priority or expiry): no general encoder
            return plain_name(
                envelope.priority, envelope.message_id, envelope.message_class, envelope.expiration
            )
        return _put_name(envelope)

    def _envelope(self, outgoing: Outgoing, plain: bool) -> tuple[Envelope, bytes]:
        check_priority(outgoing.priority)
        check_given(outgoing.properties, outgoing.correlation_id, outgoing.reply_to, outgoing.type)
        expiration = 0
        if outgoing.expires_in is not None:
            check_seconds("expires_in", outgoing.expires_in)
            expiration = int((self._now() + outgoing.expires_in) * 1000)
        text = isinstance(outgoing.body, str)
        body = body_bytes(outgoing.body)
        message_id = self._ids.new()
        message_class = MessageClass.TEXT if text else MessageClass.BYTES
        if plain:
            return Envelope(message_id, outgoing.priority, message_class, expiration), body
        properties = dict(outgoing.properties or {})
        given = properties_from(properties)  # names and types checked before anything else
        refuse_reserved(properties)
        mqtt_fields.check(properties)
        envelope = Envelope(
            message_id=message_id,
            priority=outgoing.priority,
            message_class=message_class,
            expiration=expiration,
            correlation_id=outgoing.correlation_id,
            reply_to=outgoing.reply_to,
            type=outgoing.type,
            properties=given,
        )
        return envelope, body

    # -- consuming ---------------------------------------------------------------------------

    def consumer(
        self, name: str, *, max_in_flight: int = 1, lock_timeout: float = 30.0
    ) -> Consumer:
        """A consumer in this process; iterate it, or call `receive`. Close it when done."""
        consumer = check_consumer_name(name)
        live = self._live()
        live.attach(consumer, max_in_flight=max_in_flight, lock_timeout=lock_timeout)
        return Consumer(live, consumer)

    def get(self, consumer: str = "cli", *, lock_timeout: float = 30.0) -> Message | None:
        """Lock the next ready message for `consumer`, with no process bound to the lock.

        The lock lives until its deadline or until `ack`/`unlock`/`reject` by id, from any
        process: this is what the CLI uses. It is `get`'s (GET_TOKEN): a subscriber that
        joins under `consumer`'s name later does not take it for its own. Returns None if
        nothing is ready. Locks whose deadline passed (or whose process died) go back to
        target/ first, as a server's sweep would, so that queues work without `boxmq serve`.
        """
        holder = check_consumer_name(consumer)
        check_seconds("the lock timeout", lock_timeout)
        if self._check_getter is not None:
            self._check_getter(holder)
        now = self._now()
        release_stale_locks(self._box, now=now, policy=self._policy, limits=self._limits)
        for name, envelope in self._ready_in_order(now):
            # From now, not from before the look at the folders, which may have taken longer
            # than the lock lasts (thousands of names, a busy machine).
            deadline = self._now() + lock_timeout
            locked = locked_name(name, Lock(holder, int(deadline * 1000), GET_TOKEN))
            processing = self._box.place(State.TARGET, name, State.PROCESSING, locked)
            if processing is None:
                continue  # another consumer was faster
            try:
                body = self._box.read(State.PROCESSING, processing)
            except NotAFile:  # made so between the look and the claim
                set_aside_claimed(self._box, self.name, processing, name)
                continue
            if body is None:
                continue
            settler = GotLock(self._disk, lock_timeout, name)
            return Message(self.name, envelope, body, holder, deadline, settler, self._v5)
        return None

    def _ready_in_order(self, now: float) -> Iterable[tuple[str, Envelope]]:
        """The ready names of target/, best first. Each get reads the folder (another process
        may have put or taken any name since), but decodes only the names it had not seen:
        decoding every name at every get made a get cost ~20 us per message waiting, so four
        processes draining 12,000 took ~45 ms a message."""
        ready = []
        strays: list[str] = []
        expired = []
        known = self._known
        # The names not seen yet that are no file are told by a listing's file types or by an
        # lstat of each: 2.2 us a new name, where the types cost 0.17 us a name of the folder
        # more than the names alone (47 ms against 30 at 100,000). A get that knows most
        # names (a consumer catching up a backlog, get after get) lists the names alone and
        # looks at its few new ones; a first get (each `boxmq get` run) or one after a burst
        # that the last get found (a producer's, likely again) lists with the types; a burst
        # that comes unforeseen is listed again with the types, not looked at name by name.
        odd: set[str] | None
        if not known or self._bursting:
            names, odd = self._box.typed_names(State.TARGET)
            new = len(names) - len(known)
        else:
            names, odd = self._box.names(State.TARGET), None
            new = len(names) - len(known)
            if _many(new, names):
                names, odd = self._box.typed_names(State.TARGET)
        self._bursting = bool(known) and _many(new, names)
        for name in names:
            if (item := known.get(name)) is None:
                # Looked at once per name: a file that a directory or a link replaces since
                # is found at its claim (NotAFile, below), as one made so after a look; a
                # name gone since the listing, at its claim too.
                if odd is not None and name not in odd:
                    regular: bool | None = True
                else:
                    regular = self._box.kind(State.TARGET, name)
                if not regular:
                    if regular is False:
                        strays.append(name)
                    continue
                if (why := unusable(name)) is not None:
                    set_aside(self._box, self.name, name, why)  # never lost, blocks nobody
                    continue
                item = _known_of(name, self._box.file(State.TARGET, name))
                if item.lasting:
                    known[name] = item
            if item.ends <= now:
                expired.append(name)
            elif item.due <= now:
                ready.append(item.order)
        if len(known) > 2 * len(names) + 1000:  # the names gone since, dropped now and then
            for name in known.keys() - set(names):  # in place: other Queues share the dict
                known.pop(name, None)
        if expired:
            self._expire(expired)
        set_aside_strays(self._box, self.name, strays)
        heapq.heapify(ready)
        while ready:
            _, _, name, envelope = heapq.heappop(ready)
            yield name, envelope_of(name) if envelope is None else envelope

    def _expire(self, names: list[str]) -> None:
        """Move to expired/ what get found expired in target/, said once: `boxmq ls` counted
        those READY, and a get that then said "no message is ready" told nothing of them."""
        tell_expired(self.name, sum(self._box.move(State.TARGET, n, State.EXPIRED) for n in names))

    def ack(self, message_id: str, consumer: str = "cli") -> None:
        self._disk.ack(_message_id(message_id), check_consumer_name(consumer))

    def unlock(self, message_id: str, consumer: str = "cli", *, delay: float = 0.0) -> str | None:
        """Give the lock back: None, the message is in target/ again; or, when it went to
        error/ instead, why ("max-deliveries", or "metadata-full": its name cannot carry one
        more delivery)."""
        return self._disk.unlock(_message_id(message_id), check_consumer_name(consumer), delay)

    def reject(self, message_id: str, consumer: str = "cli") -> None:
        self._disk.reject(_message_id(message_id), check_consumer_name(consumer))

    def extend(self, message_id: str, consumer: str = "cli", *, seconds: float) -> None:
        self._disk.extend(_message_id(message_id), check_consumer_name(consumer), seconds)

    def lock_process(self, message_id: str, consumer: str = "cli") -> str | None:
        """The process the lock `consumer` holds on `message_id` is bound to, as its process
        token (docs/file-format.md, the lock suffix): GET_TOKEN ("get") for `get`'s, "" for
        another lock bound to no process (a persistent MQTT session's), None if `consumer`
        holds no lock on it. What
        tells `boxmq unlock` whether a running process counts the message as in flight."""
        return self._disk.lock_process(_message_id(message_id), check_consumer_name(consumer))

    def lock_processes(self) -> list[str | None]:
        """The process token of each file in processing/, as `lock_process` gives one
        (GET_TOKEN for `get`'s, "" for one bound to no process), None for a file whose name
        has no lock (a script's claim, or DropboxMQ's): what tells `boxmq delete`, in one
        look at the folder, how many messages are locked and whether a running process
        holds them. A lock whose deadline passed is left out: it holds the message for nobody
        (its holder's settle is refused, and the next sweep or `get` sends it back), so it
        refused a delete that no settle could then let through."""
        tokens: list[str | None] = []
        now_ms = self._now() * 1000
        for entry in self._box.scan(State.PROCESSING):
            _, lock = split_lock(entry.name)
            if lock is not None and lock.deadline_ms <= now_ms:
                continue
            tokens.append(None if lock is None else lock.token)
        return tokens

    # -- inspecting and repairing ----------------------------------------------------------------

    @property
    def owner(self) -> str | None:
        """Who owns the queue, if a door recorded it (XMPP: the bare JID that created the
        node); None for a queue made by the API, the CLI or a script."""
        return self._box.setting("owner")

    def set_owner(self, owner: str) -> None:
        """Record the queue's owner on disk (`<queue>/.owner`): it survives restarts."""
        # 5 or bytes failed inside the file's write ("write() argument must be str"), and a
        # lone surrogate with a UnicodeEncodeError.
        try:
            usable = isinstance(owner, str) and bool(owner.encode())
        except UnicodeEncodeError:
            usable = False
        if not usable:
            raise InvalidArgument(
                f"an owner is a non-empty str that UTF-8 can encode (a JID), not {owner!r}"
            )
        self._box.set_setting("owner", owner)

    def counts(self) -> QueueCounts:
        """How many messages each state holds; a lock whose deadline passed is ready, as
        `boxmq ls` and `Box.counts()` count it (nobody holds it: the next get takes it). The
        files as they lie said `locked` until a sweep moved it, and `ls` said `ready`."""
        return counts_of(self._box, self._now())

    def count(self, state: State | str = State.TARGET) -> int:
        """The messages in one state folder as they lie, from its listing alone, where
        `counts` lists all six (a lock whose deadline passed is in processing/ still; error/
        counts what is no regular file too, as `counts` does): what a purge or a requeue
        interrupted left of the folder it empties."""
        state = state_of(state)
        return self._box.count(state, strays=state is State.ERROR)

    def peek(self, *, state: State | str = State.TARGET, limit: int | None = None) -> list[Peeked]:
        """Messages in one state folder without locking them, in delivery order for target/;
        at most `limit` (an int >= 1) of them, or all with None."""
        # Sliced with it, -1 would drop the last message and 0 show none: say so instead.
        check_count("limit", limit, least=1, none=True)
        state = state_of(state)

        def rows() -> Iterator[_PeekRow]:
            with closing(self._box.scan(state)) as entries:
                for entry in entries:
                    name, lock = _name_and_lock(entry.name, state)
                    if (ranked := _ranked(name)) is not None:  # decoded only if shown
                        yield (*ranked, name), entry.path, None, lock, None
                        continue
                    envelope = envelope_of(name)
                    status = None
                    if (stamp := envelope.timestamp) is not None:
                        sequence = stamp / 1000
                    elif (status := _status(entry.path)) is not None:
                        sequence = status.st_mtime
                    else:
                        continue  # gone since the listing
                    # Within a priority as a consumer takes them (_ready_in_order).
                    yield (-envelope.priority, sequence, name), entry.path, envelope, lock, status

        # With a limit, only that many rows are kept as the folder is read, and only the
        # files shown are stat'ed for their size: `boxmq peek --limit 10` on 300,000 ready
        # messages held and stat'ed all of them (3.5 s, 180 MB).
        chosen = (
            sorted(rows(), key=_peek_order)
            if limit is None
            else heapq.nsmallest(limit, rows(), key=_peek_order)
        )
        peeked = []
        for (_, _, name), path, envelope, lock, status in chosen:
            if status is None and (status := _status(path)) is None:
                continue  # gone since the listing
            if envelope is None:
                envelope = envelope_of(name)
            peeked.append(self._peeked(envelope, status, state, lock))
        return peeked

    def find(
        self, message_id: str, *, states: Iterable[State | str] = _WHERE_A_MESSAGE_IS
    ) -> Peeked | None:
        """The message `message_id` as `peek` shows it, from the first of `states` that
        holds it (every folder a message lies in, by default); None if none does. Looked up
        by the id its file's name carries: only the names that may carry it are decoded,
        and only its file stat'ed, where a peek of a folder of 300,000 messages read them
        all (seconds)."""
        wanted = _message_id(message_id)
        for state in _states_listed(states):
            # Closed as it returns mid-listing: CPython closed the folder only as its last
            # reference went, and a build without reference counting kept it open.
            with closing(self._box.scan(state)) as entries:
                for entry in entries:
                    if not may_carry_id(entry.name, wanted):
                        continue
                    name, lock = _name_and_lock(entry.name, state)
                    envelope = envelope_of(name)
                    if envelope.message_id != wanted or (status := _status(entry.path)) is None:
                        continue  # another message's, or gone since the listing
                    return self._peeked(envelope, status, state, lock)
        return None

    def _peeked(
        self, envelope: Envelope, status: os.stat_result, state: State, lock: Lock | None
    ) -> Peeked:
        holder, deadline = (lock.owner, lock.deadline_ms / 1000) if lock else (None, None)
        by_get = lock is not None and lock.token == GET_TOKEN
        return Peeked(envelope, status.st_size, state, holder, self._v5, deadline, by_get)

    def purge(self, *, state: State | str = State.TARGET) -> int:
        """Delete every message in one state folder; how many were deleted."""
        state = state_of(state)
        if state in (State.PROCESSING, State.WORKING):
            raise InvalidArgument(f"{state.value}/ holds messages in use; purge another state")
        removed = sum(self._box.remove(state, entry.name) for entry in list(self._box.scan(state)))
        if removed:
            # Its messages' files that this process's puts keep open, blocks and all, for
            # the spares their acks would give back: closed now, not at the next full sweep.
            self._box.close_gone()
        return removed

    def requeue(self, *, source: State | str = State.ERROR, left: list[str] | None = None) -> int:
        """Send dead (or expired, or processed) messages back to target/: a redrive. An
        expiration that has passed is dropped, so that the message is delivered. How many
        were sent back.

        What can never be delivered stays where it is, logged, its name added to `left` when
        given: a name that is not UTF-8 or too long to lock, and what is not a regular file
        (a directory, a pipe). A consumer sets those aside to error/ (docs/file-format.md);
        sent back, each was counted as requeued and set aside again at the next look."""
        source = state_of(source)
        if source in (State.TARGET, State.PROCESSING, State.WORKING):
            raise InvalidArgument(
                f"requeue takes messages from error, expired or processed, not {source.value}"
            )
        if left is not None and not callable(getattr(left, "append", None)):
            # Else an AttributeError at the first name left, after the others were moved:
            # the caller heard neither how many went back nor which stayed.
            raise InvalidArgument(f"left is a list for the names left, or None, not {left!r}")
        moved, now = 0, self._now()
        strays: list[str] = []
        for entry in list(self._box.scan(source, strays)):
            new = redrive_name(entry.name, now=now)
            if (why := unusable(new)) is not None:
                self._not_requeued(source, entry.name, why, left)
                continue
            moved += self._box.move(source, entry.name, State.TARGET, new)
        for name in strays:
            self._not_requeued(source, name, NOT_A_FILE, left)
        return moved

    def _not_requeued(self, source: State, name: str, why: str, left: list[str] | None) -> None:
        log.warning(
            "%s: %s is %s: left in %s/ (it can never be delivered)",
            self.name,
            shown(name),
            why,
            source.value,
        )
        if left is not None:
            left.append(name)


def _message_id(value: str) -> MessageId:
    """`value` as a MessageId; InvalidArgument if it is no str: a 5 or bytes was ItemNotFound
    ("no such message"), and `lock_process` said of it that no lock was held."""
    if not isinstance(value, str):
        raise InvalidArgument(f"message id {value!r} is not a str ({type(value).__name__})")
    return MessageId(value)


def _name_and_lock(name: str, state: State) -> tuple[str, Lock | None]:
    """The message's name and lock of file `name` in `state`'s folder, as peek and find read
    it: only processing/ holds locked names, a name elsewhere is taken whole."""
    return split_lock(name) if state is State.PROCESSING else (name, None)


def _states_listed(states: object) -> list[State]:
    """`find`'s states, each a State or its folder's name; InvalidArgument for one state given
    alone, which `peek`'s state= takes: "target" was read a character at a time ("no state
    't'"), and State.TARGET raised TypeError, not being iterable."""
    # Not check_listed: a dict of states (the CLI's, by state) gives its keys, as before.
    if isinstance(states, (str, State)) or not isinstance(states, Iterable):
        raise InvalidArgument(
            f"states takes a list of states, such as ['target', 'error'], not {states!r}"
        )
    return [state_of(state) for state in states]


def state_of(value: State | str) -> State:
    """A State, given as one or by its folder's name ("target")."""
    if isinstance(value, State):
        return value
    try:
        return State(value)
    except ValueError:
        names = ", ".join(state.value for state in State)
        raise InvalidArgument(f"no state {value!r}: use one of {names}") from None


def counts_of(box: Dropbox, now: float | None = None) -> QueueCounts:
    """How many files each state folder of a queue or subscription holds. Given `now` (epoch
    s), a lock whose deadline passed counts as ready, not locked: nobody holds it, the next get
    takes it (moving it back to target/ first), and peek shows it "(ended)"."""
    now_ms = -math.inf if now is None else now * 1000
    locked = ended = 0
    for entry in box.scan(State.PROCESSING):  # one scan: a get meanwhile moves a file of it
        locked += 1
        lock = split_lock(entry.name)[1]
        ended += lock is not None and lock.deadline_ms <= now_ms
    return QueueCounts(
        ready=box.count(State.TARGET) + ended,
        locked=locked - ended,
        done=box.count(State.PROCESSED),
        dead=box.count(State.ERROR, strays=True),
        expired=box.count(State.EXPIRED),
        uncommitted=box.count(State.WORKING),
    )


def _many(new: int, names: list[str]) -> bool:
    """Whether a get's new names (its listing's less those it knew) are so many that a
    listing with the file types costs less than an lstat of each: more than a fifth of the
    folder (2.2 us a new name, where that listing takes 0.47 us a name of the folder), and
    more than 100."""
    return new > max(_MANY_UNSEEN, len(names) // 5)


# The fewest new names a get tells by its listing's file types rather than by their lstats.
_MANY_UNSEEN = 100


@dataclass(frozen=True, slots=True)
class _Known:
    """What `get` reads of a name in target/: its order among the ready ones (priority, then
    its sequence, then its name), when it expires (epoch s, infinity for never) and when it
    may be handed out (epoch s). `lasting`: it may be kept for the next gets, its sequence
    coming from its name, not from its file's mtime (another file may come under that name).
    The envelope ending `order` is None for a name that ranks undecoded (ranked_names): it is
    decoded when handed out."""

    order: tuple[int, float, str, Envelope | None]
    ends: float
    due: float
    lasting: bool


KnownNames: TypeAlias = dict[str, _Known]


def _known_of(name: str, path: str) -> _Known:
    if (ranked := _ranked(name)) is not None:
        # A get decoded every name it had not seen and kept its envelope: a second and 40 MB
        # of a `boxmq get` on a queue of 200,000. Such a name has no expiration nor delay.
        return _Known((*ranked, name, None), math.inf, 0.0, True)
    envelope = envelope_of(name)
    order = (-envelope.priority, _sequence(path, envelope), name, envelope)
    # Envelope.expired's test, as seconds: expired once ends <= now.
    ends = envelope.expiration / 1000 if envelope.expiration > 0 else math.inf
    return _Known(order, ends, envelope.not_before, envelope.timestamp is not None)


def _ranked(name: str) -> tuple[int, float] | None:
    """(-priority, sequence) of a name whose order the name alone tells (ranked_names), as
    `_known_of` and peek order a decoded one; None for another name. Such a name is ordered
    undecoded, as a consumer keeps a cold name: its id's first 16 digits are timestamp_of's."""
    if (priority := ranked_priority(name)) is None:
        return None
    return -priority, int(name[name.index(".") + 1 :][:16]) // 1000 / 1000


def _sequence(path: str, envelope: Envelope) -> float:
    """What orders the message within its priority: its id's time, else (a name a script
    wrote) the file's mtime."""
    if (stamp := envelope.timestamp) is not None:
        return stamp / 1000
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0


_PeekRow: TypeAlias = tuple[
    tuple[int, float, str], str, Envelope | None, Lock | None, os.stat_result | None
]


def _peek_order(row: _PeekRow) -> tuple[int, float, str]:
    return row[0]


def _status(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _put_name(envelope: Envelope) -> str:
    """A put's name for `envelope`, room left for what a redelivery adds; MetadataTooLong if
    it has none."""
    return encode(envelope, limit=PUT_NAME_LIMIT)


def _bare(body: bytes | str) -> tuple[bytes, MessageClass]:
    """A bare body's bytes and message class, as `put` and `put_many` name it."""
    if type(body) is bytes:  # the usual body: body_bytes would return it as it is
        return body, _BYTES
    return body_bytes(body), _TEXT if isinstance(body, str) else _BYTES


def _still_at(path: str, inode: int) -> bool:
    """Whether the folder whose inode is `inode` is still at `path`."""
    try:
        return os.stat(path).st_ino == inode
    except (FileNotFoundError, NotADirectoryError):
        return False


def _unsent(moves: list[Move]) -> list[Move]:
    """Those of a put's `moves` whose file is still where it was written: not sent."""
    return [move for move in moves if os.path.lexists(move.source)]
