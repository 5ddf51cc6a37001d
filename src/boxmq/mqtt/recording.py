"""When a session's record is written: in order with its client's disk work, and before the
answer that stands for it.

A persistent session's record (session_record.py) says what a restart needs: when the session
ends, how its durable subscriptions' messages go out, its Will, the packet ids of its QoS 2
messages in flight. It is written at CONNECT, at SUBSCRIBE/UNSUBSCRIBE, when the connection
closes, and before the client is sent a QoS 2 PUBLISH or a PUBREL (`ahead`).

Invariants:
- Under fsync=always, the records an answer stands for (a persistent session's before its
  CONNACK, a subscription's before its SUBACK) are flushed first, by a worker thread, as a job
  of the client's batch (batches.py): the answer waits (`write`); with `hold`, nothing at all
  reaches the client before (`Client.holding`). Under the other policies they are written at
  once on the loop, unflushed.
- A record written when a connection closes (`save`) goes after the records the client's disk
  work still writes, so that the last one says the last.
- A record the disk refuses is logged: it costs only what the record is for. The first one of
  a new persistent session, at its CONNECT, is for the session itself: that CONNECT is
  refused instead (`write`'s `refused`, connect_answers.py), its CONNACK still unsent.
- A session's record is removed after the record writes still queued for its client id
  (`remove`): one of them would write it back, and a restart would find the session (and
  send its Will).
- A record the disk refuses (full, out of inodes, read-only) is written again by the broker's
  sweep, once a second, until the disk takes it (`retry`), but a new session's first one,
  whose CONNECT is refused with it: left, a close's record said the client was still
  connected, holding its Will, so `boxmq session ls` listed it connected until its end, and a
  restart sent its Will again and counted the end from the restart; a resumed CONNECT's or a
  SUBSCRIBE's left the session listed away, or without that subscription after a restart.
  The latest record of a client id wins: a newer one written (its client's return), the
  session's end, or another broker's record of it since (its client came back there)
  forgets the refused one; a Will sent meanwhile leaves it (`will_sent`).
  A session this broker wrote no record of (resumed after a restart, its CONNECT's record
  refused too) takes the one on disk for its own (`_known`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import partial

from boxmq.client.lifecycle import shown
from boxmq.errors import store_failure
from boxmq.mqtt.batches import Batches
from boxmq.mqtt.clients import Client, Outgoing
from boxmq.mqtt.disk import Job, no_answer
from boxmq.mqtt.lifetimes import EndStep, session_end_step
from boxmq.mqtt.packets import Will
from boxmq.mqtt.session import Session, SubscriptionOptions
from boxmq.mqtt.session_record import (
    DeliveryOptions,
    SessionRecord,
    record_path,
    remove_record,
    write_record,
)

__all__ = ["Recorder"]

log = logging.getLogger("boxmq.mqtt")


class Recorder:
    """Writes sessions' records. `token` names this broker in them (the holder of a connected
    session); `flushed`: they are flushed before their answers (fsync=always)."""

    def __init__(
        self, root: str, token: str, *, flushed: bool, out: Outgoing, batches: Batches
    ) -> None:
        self._root = root
        self._token = token
        self.flushed = flushed
        self._out = out
        self._batches = batches
        # Client id -> (inode, mtime) of the record this broker wrote last (`replaced`).
        self._written: dict[str, tuple[int, int]] = {}
        self._queued: dict[str, int] = {}  # client id -> its record writes queued as jobs
        self._paths: dict[str, str] = {}  # client id -> its record's path (`_path`)
        # Client id -> the record of its connection's close the disk refused, for `retry`.
        self._refused: dict[str, SessionRecord] = {}
        self._unseen: set[str] = set()  # those `retry` could not look at the file of, told
        self._unknown: set[str] = set()  # those `_known` could not look at: `replaced` does

    def record(
        self,
        session: Session,
        wanted: Iterable[tuple[str, SubscriptionOptions | None]] = (),
        *,
        disconnected_at: float | None = None,
        will: Will | None = None,
        will_due: float | None = None,
    ) -> SessionRecord:
        """What a restart needs to end the session on time, to send its messages as they
        were subscribed (with the subscriptions `wanted` on their way), and to send its Will
        (session_record.py). Connected: the Will is the connection's; closed
        (`disconnected_at`), `will` is the one still to be sent, at `will_due`."""
        options = {
            text: DeliveryOptions(options.identifier, options.retain_as_published, options.qos)
            for text, options in session.subscriptions.items()
            if options.durable
        }
        for text, wanted_options in wanted:
            if wanted_options is not None and wanted_options.durable:
                options[text] = DeliveryOptions(
                    wanted_options.identifier,
                    wanted_options.retain_as_published,
                    wanted_options.qos,
                )
        return SessionRecord(
            session.client_id,
            session.expiry,
            holder=self._token if disconnected_at is None else None,
            server=self._token,  # connected here, or away and kept here
            disconnected_at=disconnected_at,
            options=options,
            username=session.username,
            will=session.will if disconnected_at is None else will,
            will_due=will_due,
            releasing=tuple(session.outbox.releasing()),
            sent=(*_sent_before(session), *_sent(session)),
            sent_qos2=(*session.qos2_sent_before(), *session.outbox.sent_qos2()),
            leaving=tuple(session.leaving),
            next_packet_id=session.outbox.next_id,
        )

    def store(
        self, record: SessionRecord, *, flush: bool, logged: bool = True, kept: bool = True
    ) -> OSError | None:
        """A failure costs only what the record is for, so it is logged (unless `logged`
        False: its caller says it) and returned; the record is tried again (`retry`), unless
        not `kept` (a new session's, whose CONNECT is refused with it). Any record stored, or
        tried, supersedes an older one refused."""
        client_id = record.client_id
        self._refused.pop(client_id, None)
        self._unseen.discard(client_id)
        try:
            written = write_record(self._root, record, flush=flush)
        except OSError as error:
            if logged:
                self.not_written(client_id, error)
            if kept:
                self._refused[client_id] = record
            if client_id not in self._written:
                self._known(client_id)
            return error
        self._written[client_id] = (written.st_ino, written.st_mtime_ns)
        self._unknown.discard(client_id)
        return None

    def _known(self, client_id: str) -> None:
        """The record on disk that this broker's refused write would have replaced, taken for
        its own (`replaced`): a session resumed after a restart whose records the disk refused
        since had none written here, which `replaced` took for another broker's, so `retry`
        forgot the refused close and the record kept the close before the restart."""
        try:
            now = os.stat(self._path(client_id))
        except (FileNotFoundError, NotADirectoryError):
            return  # none there: nothing another broker could have written since
        except OSError:
            # One there, unseen (EIO): taken for another broker's, and the refused close
            # with it forgotten by `retry`, the record keeping the close before the restart.
            self._unknown.add(client_id)
            return
        self._unknown.discard(client_id)
        self._written.setdefault(client_id, (now.st_ino, now.st_mtime_ns))

    def retry(self) -> None:
        """On the broker's sweep (once a second): the records of closes the disk refused are
        written again, quietly, and told once written. One with a write of its client id on
        its way waits for it (which has the last word); one whose record on disk another
        broker wrote since (its client came back there) is forgotten; one whose file cannot
        be looked at (EIO of a failing disk) waits for the next sweep, told once."""
        for client_id, record in list(self._refused.items()):
            if client_id in self._queued:
                continue
            try:
                replaced = self.replaced(client_id)
            except OSError as error:  # raised, it stopped the server
                self._not_seen(client_id, error)
                continue
            self._unseen.discard(client_id)
            if replaced:
                del self._refused[client_id]
                continue
            try:
                written = write_record(self._root, record, flush=False)
            except OSError:
                continue  # said once already; the disk is still refusing
            self._refused.pop(client_id, None)
            self._written[client_id] = (written.st_ino, written.st_mtime_ns)
            log.info(
                "client %s: its session record is written now%s",
                client_id,
                ", its close with it" if record.disconnected_at is not None else "",
            )

    def will_sent(self, client_id: str, due: float | None) -> None:
        """The client's Will due at `due` was sent (wills.py): a refused record of its close
        that holds it is written without it, or a restart would send it again."""
        record = self._refused.get(client_id)
        if record is not None and record.will is not None and record.will_due == due:
            self._refused[client_id] = replace(record, will=None, will_due=None)

    def _not_seen(self, client_id: str, error: OSError) -> None:
        """`retry` could not look at the client's record file: told once, not each second."""
        if client_id in self._unseen:
            return
        self._unseen.add(client_id)
        log.warning(
            "client %s: its session record cannot be looked at, so the one the disk refused "
            "waits (tried again each second): %s",
            shown(client_id),
            store_failure(error),
        )

    @staticmethod
    def not_written(client_id: str, error: OSError) -> None:
        """The log's line for a record the disk refused."""
        # In the words of the other refusals: what to fix, not "[Errno 30] ...".
        log.warning(
            "client %s: session record not written: %s", shown(client_id), store_failure(error)
        )

    def _storing(
        self,
        record: SessionRecord,
        flush: bool,
        then: Callable[[object], None],
        *,
        logged: bool = True,
        kept: bool = True,
    ) -> Job:
        """A job that stores `record`, then runs `then` on the loop with the refusal (an
        OSError) or None. Until it has, the record on disk is not replaced (`replaced`): this
        broker's word on the session is on its way, and will be the last."""
        client_id = record.client_id
        self._queued[client_id] = self._queued.get(client_id, 0) + 1

        def stored(result: object) -> None:
            left = self._queued.pop(client_id) - 1
            if left:
                self._queued[client_id] = left
            then(result)

        return Job(partial(self.store, record, flush=flush, logged=logged, kept=kept), stored)

    def replaced(self, client_id: str) -> bool:
        """Whether the session's record on disk may not be the one this broker wrote last:
        another broker on this root (or this one's Wills, its restart) wrote it since, or it
        is gone. One stat: a caller reads the record only then. No while one of this
        broker's writes is on its way: that one replaces whatever is there now, and has the
        last word (TakenElsewhere.at_close says why a close may go by it)."""
        if client_id in self._queued:
            return False
        written = self._written.get(client_id)
        if written is None and client_id not in self._unknown:
            return True
        try:
            now = os.stat(self._path(client_id))
        except (FileNotFoundError, NotADirectoryError):
            return True
        if written is None:  # `_known`'s look, failed then (EIO), made now
            self._unknown.discard(client_id)
            self._written[client_id] = written = (now.st_ino, now.st_mtime_ns)
        return (now.st_ino, now.st_mtime_ns) != written

    def refused_here(self, client_id: str) -> bool:
        """Whether the disk refused this broker's last record of the session (kept for
        `retry`) and the record there is still the one it would have replaced (`replaced`):
        what that record says of who holds the session is stale by this broker's own
        refusal, not another broker's word. OSError if the file cannot be looked at."""
        return client_id in self._refused and not self.replaced(client_id)

    def _path(self, client_id: str) -> str:
        """The client's record's path, kept: escaping the client id costs four times the stat
        that `replaced` makes of it at each write of the record."""
        path = self._paths.get(client_id)
        if path is None:
            path = self._paths[client_id] = record_path(self._root, client_id)
        return path

    def save(self, client: Client, record: SessionRecord) -> None:
        """Write `record`, nobody waiting for it (a connection closed): not flushed, but after
        the records the client's disk work still writes, so that the last one says the last."""
        if not self.flushed or (client.tail is None and not client.jobs):
            self.store(record, flush=False)
            return
        client.jobs.append(self._storing(record, False, no_answer))
        self._batches.start(client)

    def remove(self, client_id: str, step: EndStep = session_end_step) -> None:
        """Delete the record of a session that ended, as a `step` of its end. Under
        fsync=always, record writes may be queued as jobs of the client id's connections (an
        UNSUBSCRIBE's, a close's): the removal goes after them (batches.py orders one client
        id's jobs). Otherwise every record is written at once on the loop, and so is this."""

        def remove_now() -> None:
            self._written.pop(client_id, None)
            self._unknown.discard(client_id)
            self._paths.pop(client_id, None)
            self._refused.pop(client_id, None)
            self._unseen.discard(client_id)
            with step(client_id, "deleting its session record"):
                remove_record(self._root, client_id)

        last = self._batches.last(client_id) if self.flushed else None
        if last is None:
            remove_now()
            return
        last.jobs.append(Job(remove_now, no_answer))
        self._batches.start(last)

    def ahead(self, client: Client, record: SessionRecord) -> None:
        """Write `record` before the client is written anything more (Outgoing.before_writes
        calls this): unflushed, since what it names (the packet ids in flight) only has to
        outlive the process. At once on the loop, unless the client's disk work is writing
        records (fsync=always): then after them, and what it is sent waits (`holding`)."""
        if not self.flushed or (client.tail is None and not client.jobs):
            self.store(record, flush=False)
            return
        client.holding += 1

        def written(_: object) -> None:
            client.holding -= 1
            self._out.dirty.add(client)

        client.jobs.append(self._storing(record, False, written))
        self._batches.start(client)

    def write(
        self,
        client: Client,
        record: SessionRecord | None,
        told: Callable[[], None],
        *,
        hold: bool = False,
        refused: Callable[[OSError], None] | None = None,
        kept: bool = True,
    ) -> None:
        """Write `record` (a persistent session's; None: none to write), then run `told`,
        which answers the client: in order with its disk work, and flushed first under
        fsync=always, since the answer says the session is kept (DESIGN.md §5). `hold`:
        nothing at all reaches the client before (its CONNACK is waiting in its connection).
        Under the other policies, written at once on the loop, unflushed, as before.
        `refused`: run instead of `told` if the disk refuses the record (which it then
        logs), under every policy, the answer still unsent. `kept` False: a refused record is
        not tried again (`store`)."""
        if not self.flushed:
            error = (
                None
                if record is None
                else self.store(record, flush=False, logged=not refused, kept=kept)
            )
            if error is not None and refused is not None:
                refused(error)
            else:
                told()
            return
        if record is None:
            client.jobs.append(Job(None, lambda _: told()))
            return
        if hold:
            client.holding += 1

        def written(error: object) -> None:
            if hold:
                client.holding -= 1
                self._out.dirty.add(client)
            if isinstance(error, OSError) and refused is not None:
                refused(error)
            else:
                told()

        client.jobs.append(
            self._storing(record, self.flushed, written, logged=not refused, kept=kept)
        )


def _sent(session: Session) -> Iterator[tuple[str, int, str | None]]:
    """(message id, packet id, subscription) of each stored message in flight."""
    for packet_id, token in session.outbox.sent():
        if token is not None:
            yield token.id, packet_id, token.queue


def _sent_before(session: Session) -> Iterator[tuple[str, int, str | None]]:
    """After a restart, what the process before sent and the session has not taken back yet
    (`Session.sent_before`): named as the record it came from named it, ahead of what is in
    flight now (it was sent first). The record written at a resuming CONNECT, before its
    first pump, named none of it: a SIGKILL then left locked messages no record named, so
    the next restart sent its QoS 2 ones again under new packet ids without DUP (delivered
    twice by a client that had them) and never sent the PUBREL of one settled meanwhile,
    whose id the client then held for good."""
    for (queue, message_id), packet_id in session.sent_before.items():
        yield message_id, packet_id, queue
    for message_id, packet_ids in session.sent_before_repeated.items():  # an older record's
        for packet_id in packet_ids:
            yield message_id, packet_id, None
