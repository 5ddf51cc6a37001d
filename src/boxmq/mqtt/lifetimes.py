"""How sessions end: in memory and on disk, on time (expiry timers), and those found at start.

A non-persistent session ends with its connection; a persistent one when its Session Expiry
Interval runs out after its client left (MQTT 5.0 §3.1.2.11.2), or on a clean start. Its end
drops its memory subscriptions, deletes its durable ones, leaves its share groups (their
messages in flight go to the other members, MQTT-234), and discards its QoS 2 messages
awaiting PUBREL and its record. At start, the sessions on disk whose clients are away are
timed again from their records (`resume_expiries`): the timers of the process before died
with it.

Invariants:
- One step of an end on disk that fails (a full or failing disk) is logged, and the next one
  is done all the same (`session_end_step`).
- A session found on disk at start ends only if its client has not come back since (here, or
  to another broker on this root: its record changed).
- A session held here ends by its timer only if its record names no other broker: one that
  does (its client came back there) is let go from memory, not ended (`let_go`), its
  subscriptions, messages awaiting PUBREL, record and locks left to that broker.
- A CONNECT that finds its session's record naming a broker of this host that died takes
  it on as a restart would (`left_by_the_dead`): away since now, its Will sent when due.
- What a session left awaiting PUBREL is discarded after the disk work of its connections
  (`after_disk_work`): a PUBREL read before the end goes on to the subscribers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial

from boxmq.client.box import Box
from boxmq.client.topics import Subscriber
from boxmq.clock import Clock
from boxmq.core import parse_filter
from boxmq.errors import store_failure
from boxmq.mqtt.routes import MemoryRoutes
from boxmq.mqtt.session import NEVER, Session
from boxmq.mqtt.session_record import (
    AwayAtStart,
    SessionRecord,
    read_record,
    read_records,
    write_record,
)
from boxmq.mqtt.stored import consumer_name, exactly_once_source
from boxmq.mqtt.wills import Wills, will_delay
from boxmq.store.process import process_alive

__all__ = ["Lifetimes", "session_end_step", "session_made"]

log = logging.getLogger("boxmq.mqtt")


@contextlib.contextmanager
def session_end_step(client_id: str, what: str) -> Iterator[None]:
    """One step of a session's end on disk. A failure (a full or failing disk) is logged,
    and the caller goes on with the next step: one thing left on disk keeps none of the
    others there, nor the session alive in memory, nor the CONNECT that ended it unanswered."""
    try:
        yield
    except OSError as error:
        log.error(
            "client %s: its session ended, but %s failed, so that is left on disk: %s",
            client_id,
            what,
            store_failure(error),
        )


def session_made(client_id: str, record: SessionRecord | None, text: str) -> bool:
    """Whether the subscription `text` found on disk under the client id's name is its
    session's own (SessionRecord.made); a session with no record (one an older boxmq left)
    owns none. Another is said, and left alone: taken by the session, its client would get
    what it never subscribed to; deleted with it, another consumer's messages would go."""
    if record is not None and record.made(text):
        return True
    log.warning(
        "client %s: a subscription to %s under its name on disk is not its session's (made "
        "by `boxmq subscribe --name` or the Python API, or left by an older boxmq): left "
        "alone, neither taken nor deleted; give that subscriber or this client another name",
        client_id,
        text,
    )
    return False


AfterDiskWork = Callable[[str, Callable[[], object], Callable[[object], None]], bool]
"""`(client id, work, then)`: run `work` after the disk work of the client id's connections,
and `then` with its result (or the error it raised) on the loop; False if none has any
(the caller does it now)."""


class Lifetimes:
    """Ends sessions, and times their ends. The registries are the broker's, shared:
    `sessions` (client id -> session), `memory` (the in-memory subscriptions), `durable`
    (client id -> filter -> its dropbox); `token` names this broker in the records."""

    def __init__(
        self,
        box: Box,
        clock: Clock,
        token: str,
        wills: Wills,
        *,
        sessions: dict[str, Session],
        memory: MemoryRoutes,
        durable: dict[str, dict[str, Subscriber]],
        after_disk_work: AfterDiskWork,
        remove_record: Callable[[str], None],
    ) -> None:
        self._box = box
        self._after_disk_work = after_disk_work
        self._remove_record = remove_record  # recording.Recorder.remove
        self._clock = clock
        self._token = token
        self._wills = wills
        self._sessions = sessions
        self._memory = memory
        self._durable = durable
        self.expiries: dict[str, asyncio.TimerHandle] = {}  # client id -> its session's end

    def forget_on_disk(self, client_id: str, record: SessionRecord | None) -> None:
        """A session this process holds nothing of ended (a clean start, or one found on disk
        at start whose time ran out): what it left on disk is deleted, its durable
        subscriptions (those its `record` names, as the caller just read it: `session_made`),
        its QoS 2 messages awaiting PUBREL and its record."""
        name = consumer_name(client_id)
        for text, _ in self._box.topics.subscribed(name):
            if not session_made(client_id, record, text):
                continue
            with session_end_step(client_id, f"deleting its subscription to {text}"):
                self._box.unsubscribe(text, name)
        self._discard_session_state(client_id)

    def _discard_session_state(self, client_id: str) -> None:
        """What a session keeps on disk besides its subscriptions: its QoS 2 messages awaiting
        PUBREL and its record. Both ways a session ends come here; a clean start of a session
        held in memory goes both ways, and the second finds nothing left."""
        self._drop_unreleased(client_id)
        self._remove_record(client_id)

    def _drop_unreleased(self, client_id: str) -> None:
        """The session ended, and its QoS 2 exchanges with it (MQTT 5.0 §3.1.2.4): what it got
        PUBREC for and never released leaves the intake now, not after its pending_ttl, so
        its packet ids name new messages (not repeats of the old ones, which would be sent
        instead) and the old ones stop counting against the client's limits. Before the next
        session's first PUBLISH can reach the intake: on the loop, or, while a connection of
        the client still has disk work (a PUBREL read just before a DISCONNECT or a
        takeover), after that work, ahead of the next connection's (batches.py)."""
        source = exactly_once_source(client_id)

        def dropped(result: object) -> None:
            if isinstance(result, BaseException):  # left in working/, to be dropped by age
                log.warning("client %s: QoS 2 messages awaiting PUBREL kept: %s", client_id, result)
            elif result:
                log.info(
                    "client %s: %d QoS 2 message(s) awaiting PUBREL discarded with its session",
                    client_id,
                    result,
                )

        if self._after_disk_work(client_id, partial(self._box.drop_pending, source), dropped):
            return
        try:
            count: object = self._box.drop_pending(source)
        except OSError as error:
            count = error
        dropped(count)

    def end(self, session: Session) -> None:
        """The session is over: memory subscriptions dropped, durable ones deleted, share
        groups left (their messages in flight go to the other members, MQTT-234), QoS 2
        messages awaiting PUBREL discarded."""
        client_id = session.client_id
        self._drop_from_memory(session)
        name = consumer_name(client_id)
        for text, subscriber in self._durable.pop(client_id, {}).items():
            shared = parse_filter(text).shared
            leaving = f"leaving the share group of {text}" if shared else f"closing {text}"
            with session_end_step(client_id, leaving):
                subscriber.close()
            if not shared:
                with session_end_step(client_id, f"deleting its subscription to {text}"):
                    self._box.unsubscribe(text, name)
        self._discard_session_state(client_id)

    def _drop_from_memory(self, session: Session) -> None:
        """What both an end and a let-go do first: the session is no longer held here, its
        expiry timer cancelled, its memory subscriptions dropped, its in-flight window and
        its exactly-once counts forgotten."""
        client_id = session.client_id
        self._sessions.pop(client_id, None)
        self.cancel_expiry(client_id)
        self._memory.remove_subscriber(client_id)
        session.outbox.clear()
        session.stop_counting()

    def held_elsewhere(self, record: SessionRecord | None) -> bool:
        """Whether `record`, read from disk now, says that another broker on this root holds
        the session (its client came back there): this one's copy in memory is stale."""
        other = None if record is None else record.held_by
        return other is not None and other != self._token

    def left_by_the_dead(self, record: SessionRecord | None) -> SessionRecord | None:
        """`record`, read for a CONNECT of its client, as this broker takes it on: if it
        names a broker of this host that died (SIGKILL), the client's connection there
        closed with it, unseen, and that death is counted from now, as a restart does
        (`_away_since_restart`: written away since now); the Will of that connection, or one
        left waiting out its delay there, goes out when due, at once if it has no delay (or
        is overdue). One with a delay still to run is cancelled by this CONNECT, which
        resumes the session (MQTT 5.0 §3.1.3.2.2), unless it starts clean, which sends it."""
        held = None if record is None else record.held_by
        if held is None or held == self._token or process_alive(held) is not False:
            return record
        assert record is not None
        now = self._clock.now()
        away = self._away_since_restart(record, now)
        assert away is not None  # its holder is None (it was away) or that dead broker
        log.info(
            "client %s: its session was held by a server of this host that died: taken over",
            record.client_id,
        )
        if away.counted.will_due is not None:
            self._wills.resume(away, now)
        return away.counted

    def let_go(self, session: Session) -> None:
        """The session lives on in another broker on this root: dropped from memory here
        without ending it. Its durable subscriptions, its QoS 2 messages awaiting PUBREL,
        its record and the locks of what it was sent stay, for that broker (detach)."""
        client_id = session.client_id
        log.info("client %s: its session is held by another server on this root now", client_id)
        self._drop_from_memory(session)
        self._wills.forget_timer(client_id)
        for subscriber in self._durable.pop(client_id, {}).values():
            subscriber.detach()

    def resume_expiries(self) -> None:
        """At start: the persistent sessions on disk end when their records say, those whose
        time is up at once. The timers of the process before died with it; without this, a
        session whose client never returns would collect messages on disk forever."""
        now = self._clock.now()
        for found in read_records(self._box.root):
            away = self._away_since_restart(found, now)
            if away is None:
                continue
            if away.counted.will_due is not None:
                self._wills.resume(away, now)  # first: a Will due with the end goes before it
            deadline = away.counted.deadline()
            if deadline is None:
                continue
            if deadline <= now:
                self._end_if_still_away(away)
            else:
                self.expiries[found.client_id] = asyncio.get_running_loop().call_later(
                    deadline - now, self._end_if_still_away, away
                )

    def _away_since_restart(self, record: SessionRecord, now: float) -> AwayAtStart | None:
        """A session whose client is away; None if its client is connected to another broker
        on this root that still runs, or may run (another host: its own)."""
        holder = record.holder
        if holder is None:
            return AwayAtStart(record, record)
        if holder != self._token and process_alive(holder) is not False:
            return None
        # The broker died with the client connected, so no disconnect was recorded: the network
        # connection closed with it, and the restart is the first moment known after that (MQTT
        # 5.0 §3.1.2.11). Written, so a second restart does not start the countdown again.
        # Nobody holds it in memory: a client's return takes it from the disk.
        away = replace(record, holder=None, server=None, disconnected_at=now)
        if record.will is not None:  # the connection closed without DISCONNECT: a Will to send
            away = replace(away, will_due=now + will_delay(record.will, record.expiry))
        try:
            write_record(self._box.root, away)
        except OSError as error:
            # Its end and its Will keep their time here all the same (AwayAtStart.found);
            # only a restart before they come would count from itself again.
            log.warning(
                "client %s: the restart's time not written into its session record, which "
                "still says it was connected: %s; its session still ends on time",
                record.client_id,
                error,
            )
        return AwayAtStart(away, record)

    def _end_if_still_away(self, away: AwayAtStart) -> None:
        """The end of a session found on disk at start, unless its client came back (here, or
        to another broker on this root: its record changed)."""
        client_id = away.counted.client_id
        self.expiries.pop(client_id, None)
        if client_id in self._sessions:
            return
        record = read_record(self._box.root, client_id)
        if not away.still_away(record):
            return
        log.info("client %s: session expired (it was on disk at start)", client_id)
        self.forget_on_disk(client_id, record)

    def schedule_expiry(self, session: Session) -> None:
        if session.expiry == NEVER:
            return
        client_id = session.client_id

        def expire() -> None:
            self.expiries.pop(client_id, None)
            current = self._sessions.get(client_id)
            if current is not session or session.connected:
                return
            if self.held_elsewhere(read_record(self._box.root, client_id)):
                # Its client came back to another broker on this root, which holds the
                # session now (and counts its expiry from the client's next close there).
                self.let_go(session)
                return
            log.info("client %s: session expired", client_id)
            self.end(session)

        self.expiries[client_id] = asyncio.get_running_loop().call_later(session.expiry, expire)

    def cancel_expiry(self, client_id: str) -> None:
        handle = self.expiries.pop(client_id, None)
        if handle is not None:
            handle.cancel()
