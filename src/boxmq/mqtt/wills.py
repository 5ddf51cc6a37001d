"""Wills: sent at once or after their delay, resumed at start, and the records that held them.

A connection that closes without DISCONNECT 0x00 sends its Will (MQTT 5.0 §3.1.2.5), at once or
after its Will Delay Interval (§3.1.3.2.2), which `Wills` times on the broker's clock (its
`send_due`, at each tick, before the sessions' ends); one whose delay is not shorter than its
session's expiry has no time of its own: that end sends it, right before it ends
(`send_early`, MQTT-3.1.3-9). Timed apart, from a read of the clock microseconds before the
end's, it could go a tick before the end, and a client reconnecting the moment it saw its
Will found its session still there. A persistent session's record holds a Will waiting out
its delay, so a restart of the broker sends it when due (`resume`), unless its client came
back (here, or to another broker on this root: its record changed). A stop runs no tick: a
Will due then stays in its record, for the next start to send at once.

A Will waiting in a session record (a delay, a broker that died with its client connected, or
one sent at once at the close of a persistent session's connection) is removed from the record
once sent and its write for the durable subscribers ended, so that a restart does not send it
again, nor loses it (a kill between the two sends it again). A new connection that took the
session over writes its record only then (`when_written`). A Will whose own write the disk
refused stays in the record, for a restart to send again (`_sent_from`), not this broker,
which sent it already (`_kept`). If the disk refuses
that record (full, failing), the Will stays in it:

- this broker remembers that it sent it, so that it never sends it twice however the record
  reads (MQTT 5.0 §3.1.3.2.2: a Will is published once);
- the record is written again on every `retry` (the broker's timer) until the disk takes it,
  unless the record changed meanwhile (the client came back, the session ended), which
  settles it; until then, a restart would send the Will again, as the log says.

If the disk refused the record of the close itself, the record on disk still says the client
is connected, and the Will goes out all the same; the refused record, which the Recorder
writes again (recording.py), is told so (`unrecorded_sent`), or once written it would hold
the Will for a restart to send again.

Invariants: at most one Will per client id is waiting to be recorded; one is forgotten once
its record is written or no longer holds it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from boxmq.clock import Clock, periodic_due
from boxmq.core.durations import spelled
from boxmq.errors import store_failure
from boxmq.mqtt.clients import Client
from boxmq.mqtt.packets import Will
from boxmq.mqtt.publishing import WillWritten
from boxmq.mqtt.session import NEVER, Session
from boxmq.mqtt.session_record import AwayAtStart, SessionRecord, read_record, write_record
from boxmq.mqtt.timed import Timed

__all__ = ["SentWills", "Wills", "will_delay"]

log = logging.getLogger("boxmq.mqtt")

_RETRY_EVERY: Final = 1.0  # seconds between two tries of a refused record

HoldsIt = Callable[[SessionRecord | None], bool]
"""Whether the record on disk now is still the one that holds the Will sent."""

UnrecordedSent = Callable[[str, float | None], None]
"""A client's Will, due at that time, was sent: the refused record of its close, waiting to
be written again, no longer holds it (recording.Recorder.will_sent)."""

PublishWill = Callable[[str, str | None, Will, Client | None, WillWritten], None]
"""Publish a client's Will: (client id, its username, the Will, the connection whose end
sends it if known, whose disk work goes first, what to run once its disk work ended);
publishing.py's."""


Read = Callable[[], SessionRecord | None]
"""The record of a Will's client as it is now: read from the disk, or the one the session's
end has just read (`send_early`)."""

Send = Callable[[bool, Read], None]
"""What sends a delayed Will: (`early`: run by `send_early`, the session ending now, not on
the Will's time; its record now) -> None; raises the OSError of a record it cannot read only
if `early`."""

WrittenIfDue = Callable[[SessionRecord | None], WillWritten | None]
"""Whether a Will due still goes out, given its record now: what runs once it is written,
or None if not (its client came back, or it was sent already)."""


@dataclass(frozen=True, slots=True)
class _Due:
    """A Will waiting for its time (or due now), and how its record, read then, says
    whether it still goes: one sender (`Wills._send`) for a close's Will and one found at
    start, which were two near-copies."""

    client_id: str
    username: str | None
    will: Will
    behind: Client | None  # the connection whose end left it, whose disk work goes first
    written_if_due: WrittenIfDue
    came_back: Callable[[], bool]  # its client is here again: cancelled without a read


def _nothing(_: BaseException | None) -> None:
    """What runs once a Will no record holds is written."""


def will_delay(will: Will, expiry: int) -> int:
    """Seconds from the close of its connection to a Will: its Will Delay Interval, but no
    later than the end of the session (MQTT 5.0 §3.1.3.2.2); at once if that ends with it."""
    delay = will.properties.will_delay_interval or 0
    return delay if expiry == NEVER else min(delay, expiry)


def _holds(recorded: SessionRecord, current: SessionRecord | None) -> bool:
    """Whether `current`, read from disk, is still `recorded` as written at the close of
    its connection, with its Will (compared by what changes: a new close has a new time)."""
    return (
        current is not None
        and current.holder is None
        and current.will is not None
        and current.disconnected_at == recorded.disconnected_at
        and current.will_due == recorded.will_due
    )


@dataclass(frozen=True, slots=True)
class _Unrecorded:
    sent: SessionRecord  # the record the Will was sent from
    holds_it: HoldsIt


class SentWills:
    def __init__(self, root: str) -> None:
        self._root = root
        self._unrecorded: dict[str, _Unrecorded] = {}
        self._unread: set[str] = set()  # those `retry` could not read the record of, told
        self._next_try = 0.0

    def already_sent(self, record: SessionRecord) -> bool:
        """Whether this broker sent the Will `record` holds (the record could not say so)."""
        waiting = self._unrecorded.get(record.client_id)
        return waiting is not None and waiting.sent.will_due == record.will_due

    def sent(self, record: SessionRecord, holds_it: HoldsIt, *, now: float) -> None:
        """The Will of `record` was sent: the record without it is written, or retried."""
        client_id = record.client_id
        try:
            self._write(record)
        except OSError as error:
            self._unrecorded[client_id] = _Unrecorded(record, holds_it)
            self._next_try = now + _RETRY_EVERY
            log.error(
                "client %s: its Will was sent, but its session record, which still holds it, "
                "could not be rewritten: %s; tried again every %s, and a restart before it "
                "is written sends the Will again",
                client_id,
                store_failure(error),
                spelled(_RETRY_EVERY),
            )
            return
        self._unrecorded.pop(client_id, None)
        self._unread.discard(client_id)

    def sent_unread(
        self, record: SessionRecord, holds_it: HoldsIt, error: OSError, *, now: float
    ) -> None:
        """The Will of `record` was sent, but the record could not be read (EIO) to see
        whether it still holds it (its client may have come back): `retry` reads it again,
        and writes it without the Will if it still holds it."""
        self._unrecorded[record.client_id] = _Unrecorded(record, holds_it)
        self._next_try = now + _RETRY_EVERY
        self._not_read(record.client_id, error)

    def retry(self, *, now: float) -> None:
        """Write the records still holding a Will sent; on the broker's timer. One whose
        record cannot be read (EIO of a failing disk) waits for the next try, told once."""
        if not self._unrecorded or not periodic_due(now, self._next_try, _RETRY_EVERY):
            return
        self._next_try = now + _RETRY_EVERY
        for client_id, waiting in list(self._unrecorded.items()):
            try:
                current = read_record(self._root, client_id)
            except OSError as error:  # raised, it left Broker.tick and stopped the server
                self._not_read(client_id, error)
                continue
            self._unread.discard(client_id)
            if not waiting.holds_it(current):
                del self._unrecorded[client_id]  # the client came back, or the session ended
                continue
            try:
                self._write(waiting.sent)
            except OSError:
                continue  # said once already; the disk is still refusing
            del self._unrecorded[client_id]
            log.info("client %s: its session record no longer holds its Will sent", client_id)

    def forget(self, client_id: str) -> None:
        """The client's session ended: its record is not to be written again without the
        Will. Its end's deletion refused (a read-only disk), the record left holds it
        still, and `retry` wrote it again over what the end left once the disk took it, so
        the sweep took the session for resumed elsewhere and never finished its end."""
        self._unrecorded.pop(client_id, None)
        self._unread.discard(client_id)

    def _not_read(self, client_id: str, error: OSError) -> None:
        """`retry` could not read the client's record: told once, not each second."""
        if client_id in self._unread:
            return
        self._unread.add(client_id)
        log.warning(
            "client %s: its session record cannot be read, so its rewrite without the Will "
            "sent waits (tried again every %s): %s",
            client_id,
            spelled(_RETRY_EVERY),
            store_failure(error),
        )

    def _write(self, record: SessionRecord) -> None:
        write_record(self._root, replace(record, will=None, will_due=None))


class Wills:
    """The Wills waiting out their delay, and what they run when they go out. `sessions` is
    the broker's (client id -> session), shared; `token` names this broker in the records."""

    def __init__(
        self,
        root: str,
        clock: Clock,
        token: str,
        sessions: dict[str, Session],
        publish_will: PublishWill,
        flush: Callable[[], None],
        unrecorded_sent: UnrecordedSent,
    ) -> None:
        self._root = root
        self._clock = clock
        self._token = token
        self._sessions = sessions
        self._publish_will = publish_will
        self._flush = flush
        self._unrecorded_sent = unrecorded_sent
        # Delayed Wills: client id -> when it is due, on the broker's clock (`send_due`, at
        # each of its ticks, as the sessions' ends are: the loop's timer ran on real time, so
        # a clock moved on past a session's end ended it and sent no Will). And what sends it
        # then (a clean start runs it early).
        self._due: Timed[str] = Timed()
        # What sends each Will waiting, timed (`_due`) or due with its session's end (its
        # delay not shorter than its expiry), run by that end right before it (`send_early`),
        # on no timer of its own.
        self._sends: dict[str, Send] = {}
        self._unread: set[str] = set()  # those whose Will, due, waits for its record, told
        self._sent = SentWills(root)  # sent from records that still hold them
        # Client id -> when its Will was due, for a Will this broker sent whose own write the
        # disk refused, so that its record keeps it for a restart (`_sent_from`): sent
        # here already, it is not sent again from that record (`_found`).
        self._kept: dict[str, float | None] = {}
        # A Will sent at once from a record (a persistent session's close): what waits for its
        # write to end (`when_written`), per client id, for the latest one.
        self._writing: dict[str, list[Callable[[], None]]] = {}

    def send_early(self, client_id: str, ending: Read | None = None) -> None:
        """The session ends now (a clean start, or its end on time: Lifetimes): its delayed
        Will, if any, goes out now, before the end (a Will due with it waits for this).
        `ending`: the record the end has just read, which the Will goes by (read twice, the
        end and its Will could judge two records); else it is read now. A record that cannot
        be read now (EIO), which says whether its client came back elsewhere, raises its
        OSError, the Will left waiting as it was: the caller does not end the session yet
        (raised from within the Will, its timer was forgotten first, and the Will never
        sent)."""
        send = self._sends.get(client_id)
        if send is not None:
            send(True, self._reader(client_id) if ending is None else ending)

    def _reader(self, client_id: str) -> Read:
        return functools.partial(read_record, self._root, client_id)

    def clock_stepped(self, by: float) -> None:
        """The wall clock was stepped `by` seconds (Broker.clock_stepped): the delays under
        way move with it, counting the time that passed, not the step."""
        self._due.shift(by)

    def send_due(self, now: float) -> None:
        """On the broker's timer, before the sessions' ends (Lifetimes.end_due): the delayed
        Wills whose time came at `now` go out. A Will is due no later than its session's end
        (`will_delay`, Lifetimes._capped); one due with it is sent by that end (`send_early`),
        so that the two are one step, in that order (MQTT-3.1.3-9)."""
        for send in self._due.due(now):
            send()

    def retry(self, *, now: float) -> None:
        """On the broker's timer: the records still holding a Will sent (SentWills)."""
        self._sent.retry(now=now)

    def resume(self, away: AwayAtStart, now: float, *, with_end: bool = False) -> None:
        """At start: a Will that waited out its delay when the broker stopped (or whose
        connection died with it) goes out when due, at once if that time has passed; by its
        session's end (`with_end`: due with it, Lifetimes._count) if not."""
        due, left_at = away.counted.will_due, away.counted.disconnected_at
        assert due is not None
        # Never more than its delay from now: a record written by a clock ahead of ours
        # (another server's on this root, or ours before NTP stepped it back) sent it that
        # lead late (an hour for a delay of 10 s).
        wait = due - now if left_at is None else min(due - now, due - left_at)
        client_id = away.counted.client_id
        send = functools.partial(self._send, self._found(away))
        if wait <= 0:
            send(False, self._reader(client_id))
        else:
            self._delay(client_id, now + wait, send, with_end=with_end)

    def _found(self, away: AwayAtStart) -> _Due:
        """A Will found on disk at start, unless its client came back (here, or to another
        broker on this root: its record changed), which cancels it (MQTT 5.0 §3.1.3.2.2)."""
        scheduled = away.counted
        client_id, will = scheduled.client_id, scheduled.will
        assert will is not None

        def written_if_due(current: SessionRecord | None) -> WillWritten | None:
            if (
                not away.will_unsent(current)
                or self._sent.already_sent(scheduled)  # its record could not say so
                or self._sent_here(scheduled)  # its own write refused
            ):
                return None
            # Its record drops it once it is written: a SIGKILL before then sends it again at
            # the restart (at least once), where dropped first it was lost. So does its
            # client's return meanwhile: its CONNECT's record waits for that write
            # (`when_written`).
            sent = functools.partial(self._sent_from, scheduled, away.will_unsent)
            return self._waited_for(client_id, sent)

        def came_back() -> bool:  # here; or sent already (resumed twice)
            return client_id in self._sessions or client_id in self._writing

        return _Due(client_id, scheduled.username, will, None, written_if_due, came_back)

    def _send(self, due: _Due, early: bool, read: Read) -> None:
        """Send a delayed Will, if its record, read now (whether its client came back
        elsewhere), says it is still due."""
        client_id = due.client_id
        if due.came_back():
            self._untimed(client_id)
            return
        try:
            current = read()
        except OSError as error:  # raised, it left Broker.tick and stopped the server
            if early:
                raise  # send_early's caller's
            self._not_read(client_id, functools.partial(self._send, due), error)
            return
        self.forget_timer(client_id)  # and that its read was refused, if it was
        written = due.written_if_due(current)
        if written is None:
            return
        self._publish_will(client_id, due.username, due.will, due.behind, written)
        self._flush()

    def _not_read(self, client_id: str, send: Send, error: OSError) -> None:
        """A Will due could not read its record (EIO of a failing disk), which says whether
        the client came back: the Will waits for the next try, told once."""
        self._delay(client_id, self._clock.now() + _RETRY_EVERY, send)
        if client_id in self._unread:
            return
        self._unread.add(client_id)
        log.warning(
            "client %s: its session record cannot be read, so its Will, due, waits (tried "
            "again every %s): %s",
            client_id,
            spelled(_RETRY_EVERY),
            store_failure(error),
        )

    def _sent_here(self, record: SessionRecord) -> bool:
        """Whether this broker sent the Will `record` holds, which the record keeps since its
        write was refused (`_kept`)."""
        return record.client_id in self._kept and self._kept[record.client_id] == record.will_due

    def _sent_from(
        self, record: SessionRecord, holds_it: HoldsIt, failure: BaseException | None
    ) -> None:
        """The Will `record` holds was sent and written: the record without it is written,
        unless its client came back meanwhile (or its session ended): that record is newer.
        So too right before its session's end, which deletes the record a moment later: a
        kill in between leaves it without the Will, which the restart does not send again.
        Its write failed (`failure`: a full or failing disk), the record keeps it, so that a
        restart sends it again, to the durable subscribers too; not this broker, which sent
        it already to those in memory (a Will is published once)."""
        if failure is not None:
            # A clean start of its client found that record (its end refused too) and sent
            # the Will again at each CONNECT it sent, refused by the same disk.
            self._kept[record.client_id] = record.will_due
            log.error(
                "client %s: its Will was not stored for its durable subscribers, and its "
                "session record keeps it: a restart of the broker sends it again, unless the "
                "client connects again before",
                record.client_id,
            )
            return
        self._unrecorded_sent(record.client_id, record.will_due)
        try:
            current = read_record(self._root, record.client_id)
        except OSError as error:
            # Raised, it left the Will's end half done: the record kept the Will for a
            # restart to send again, and the next CONNECT waited for that end for ever.
            self._sent.sent_unread(record, holds_it, error, now=self._clock.now())
            return
        if holds_it(current):
            self._sent.sent(record, holds_it, now=self._clock.now())

    def schedule(
        self, session: Session, will: Will, behind: Client, recorded: SessionRecord | None
    ) -> None:
        """The connection `behind` closed without DISCONNECT 0x00: its Will goes out now or
        after its delay, after what that connection published (publishing.py). `recorded`:
        the record of a persistent session written at that close, which holds the Will and
        when it is due; the Will leaves it once sent and written, unless the record changed
        meanwhile (its client came back)."""
        delay = will_delay(will, session.expiry)
        client_id, username = session.client_id, session.username
        self._kept.pop(client_id, None)  # a newer Will of the client id
        if not delay:
            written: WillWritten = _nothing
            if recorded is not None:
                holds = functools.partial(_holds, recorded)
                written = self._waited_for(
                    client_id, functools.partial(self._sent_from, recorded, holds)
                )
            self._publish_will(client_id, username, will, behind, written)
            return
        # Only a persistent session's Will waits (will_delay): its record holds when.
        assert recorded is not None
        due = recorded.will_due
        assert due is not None

        def written_if_due(record: SessionRecord | None) -> WillWritten | None:
            ours = record is not None and record.holder is None and record.will_due == due
            if record is None or (not ours and record.holder != self._token):
                # Its client came back to another broker on this root (or left it again), or
                # started clean there, which ended the session and sent this Will.
                return None
            if ours:
                assert record is not None
                sent = record
                return functools.partial(self._sent_from, sent, lambda now: now == sent)
            # The record of its close was refused, and is tried again (recording.py).
            return functools.partial(self._sent_unrecorded, client_id, due)

        left = _Due(client_id, username, will, behind, written_if_due, lambda: False)
        send = functools.partial(self._send, left)
        self._delay(client_id, due, send, with_end=delay == session.expiry)

    def _sent_unrecorded(self, client_id: str, due: float, failure: BaseException | None) -> None:
        """A Will sent whose close's record the disk refused: that record, written again
        later, leaves it, unless the Will's write failed (as `_sent_from` keeps it)."""
        if failure is None:
            self._unrecorded_sent(client_id, due)
        else:
            self._kept[client_id] = due

    def _waited_for(self, client_id: str, written: WillWritten) -> WillWritten:
        """`written`, for a Will sent at once from its record: until it has run, the client
        id's next CONNECT waits to write its record (`when_written`)."""
        waiting: list[Callable[[], None]] = []
        self._writing[client_id] = waiting

        def then_the_others(failure: BaseException | None) -> None:
            written(failure)
            if self._writing.get(client_id) is waiting:
                del self._writing[client_id]
            for then in waiting:
                then()

        return then_the_others

    def when_written(self, client_id: str, then: Callable[[], None]) -> None:
        """Run `then` once the Will the client id's last connection sent at once from its
        record was written (at once if none is being written): a new connection's record,
        which holds its own Will, must not replace that record before (a takeover)."""
        waiting = self._writing.get(client_id)
        if waiting is None:
            then()
        else:
            waiting.append(then)

    def _delay(self, client_id: str, due: float, send: Send, *, with_end: bool = False) -> None:
        """The client's Will goes out at `due` (the broker's clock) by `send`, or, `with_end`
        (due with its session's end), by that end (`send_early`). One time per client id: a
        Will resumed at start, and again at its client's return (Lifetimes.left_by_the_dead),
        is one Will."""
        self._sends[client_id] = send
        if with_end:
            self._due.discard(client_id)
        else:
            self._due.set(client_id, due, functools.partial(send, False, self._reader(client_id)))

    def forget_timer(self, client_id: str) -> None:
        """No timer for the client's Will any more (it fired, went out early, or was
        cancelled by the client's return), nor a wait for its session's end; nor the mark
        of one whose record could not be read (`_unread`): kept, it silenced the warning of
        the client id's next Will waiting so."""
        self._untimed(client_id)
        self._unread.discard(client_id)

    def _untimed(self, client_id: str) -> None:
        self._due.discard(client_id)
        self._sends.pop(client_id, None)

    def session_ended(self, client_id: str) -> None:
        """The client's session ended: a record of it holding a Will sent is not written
        again without it (`SentWills.forget`)."""
        self._sent.forget(client_id)

    def waiting(self, client_id: str) -> bool:
        """Whether a delayed Will of the client id waits (timed, or for its session's end)."""
        return client_id in self._sends
