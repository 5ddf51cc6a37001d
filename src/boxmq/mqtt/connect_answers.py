"""A CONNECT answered (MQTT 5.0 §3.1, §3.2): its password checked in a thread (or its client's
certificate taken for its user), its answer put after an earlier connection's disk work or
another server's claim on its session, its session taken over, resumed or made (resuming.py),
its first record written, and its CONNACK sent, or a refusal and the connection closed. The
registries are the broker's, shared: `clients` (link -> its client), `sessions`, `links`
(client id -> its connected client), `named` (consumer name -> client id) and `timers` (when
each connection is next looked at). The broker hands each CONNECT to `answer`, the first
packet of a connection, and nothing else: no other packet's path comes here."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial

from boxmq.clock import Clock
from boxmq.core.deadlines import Deadlines
from boxmq.core.durations import spelled
from boxmq.errors import store_failure
from boxmq.mqtt.batches import Batches
from boxmq.mqtt.claim_wait import CLAIM_HELD, wait_for_claim
from boxmq.mqtt.clients import Client, Link, Outgoing, log_level
from boxmq.mqtt.connect_terms import (
    connecting,
    expiry_of,
    granted_keep_alive,
    reason_text,
    refusal_of,
    response_information,
)
from boxmq.mqtt.delivery import Delivery
from boxmq.mqtt.disconnects import stop_reading
from boxmq.mqtt.disk import Job, no_answer
from boxmq.mqtt.drops import DropLog, tell_by_host
from boxmq.mqtt.lifetimes import CLAIMED, AfterDiskWork, Lifetimes
from boxmq.mqtt.packets import Connack, Connect, ProtocolVersion
from boxmq.mqtt.password_checks import PasswordChecks
from boxmq.mqtt.properties import EMPTY, Properties
from boxmq.mqtt.reasons import ReasonCode, reason_for
from boxmq.mqtt.recording import Recorder
from boxmq.mqtt.resuming import Resuming
from boxmq.mqtt.session import Session
from boxmq.mqtt.settings import MqttSettings
from boxmq.mqtt.stored import consumer_name
from boxmq.mqtt.subscribing import Subscribing, hold_the_rest
from boxmq.mqtt.wills import Wills

__all__ = ["ConnectAnswers"]

log = logging.getLogger("boxmq.mqtt")

_R = ReasonCode

# Connections of one client id told in a run before the rest are counted (`tell_counts`).
_TOLD_CONNECTIONS = 3


def _nothing_told() -> None:
    """What a CONNECT's record job tells: nothing, CONNACK is in the connection already."""


class ConnectAnswers:
    """Answers the CONNECTs (`answer`): CONNACK and a session, or a refusal and a close."""

    def __init__(
        self,
        settings: MqttSettings,
        clock: Clock,
        checks: PasswordChecks,
        resuming: Resuming,
        lifetimes: Lifetimes,
        wills: Wills,
        records: Recorder,
        batches: Batches,
        out: Outgoing,
        delivery: Delivery,
        subscribing: Subscribing,
        *,
        clients: dict[Link, Client],
        sessions: dict[str, Session],
        links: dict[str, Client],
        named: dict[str, str],
        timers: Deadlines[Client],
        take_turns: Callable[[Session], None],
        resume: Callable[[Client], None],
        closed: Callable[[Link, str], None],
        after_disk_work: AfterDiskWork,
    ) -> None:
        self._settings = settings
        self._limits = settings.limits
        self._clock = clock
        self._checks = checks
        self._resuming = resuming
        self._lifetimes = lifetimes
        self._wills = wills
        self._records = records
        self._batches = batches
        self._out = out
        self._delivery = delivery
        self._subscribing = subscribing
        self._clients = clients
        self._sessions = sessions
        self._links = links
        self._named = named
        self._timers = timers
        # The session's share-group memberships take their turns again (the broker's).
        self._take_turns = take_turns
        # The packets held behind a CONNECT are handled (the broker's, as a read's).
        self._resume = resume
        self._closed = closed
        self._after_disk_work = after_disk_work
        # Connections whose CONNECT's record waits for the Will of the one they took over
        # to be written (Wills.when_written), their packets held until then.
        self._after_will: set[Client] = set()
        # Refused CONNECTs by client host and reason: a device that retries a wrong password
        # in a loop, or a script guessing them, wrote a line a try; the first is told, those
        # after it from there for that reason counted (`tell_counts`), as drops.py does.
        self._refusals: DropLog[tuple[str, str]] = DropLog()
        # Connections by client id: one reconnecting in a loop (a keep-alive its network
        # cannot hold, two devices with one client id taking it from each other) wrote two
        # lines a connection; the first few of a run are told, the rest `quiet`, counted.
        self._connections: DropLog[str] = DropLog(told=_TOLD_CONNECTIONS)

    def clock_stepped(self, by: float) -> None:
        """The wall clock was stepped `by` seconds: the counts' intervals move (DropLog.shift)."""
        self._refusals.shift(by)
        self._connections.shift(by)

    def tell_counts(self, *, now: float | None = None) -> None:
        """Log the refusals and the reconnections counted in the intervals over by `now`
        (None: all, at close)."""
        connections = self._connections
        for again in connections.summaries(now=now):
            # INFO: a script that connects to publish, again and again, does so by design.
            log.info(
                "client %s connected %d more time(s) in the last %s, their lines at debug "
                "level (-v); if it should stay connected, its first disconnects say why it goes",
                again.key,
                again.dropped,
                spelled(connections.interval),
            )
        tell_by_host(self._refusals, "CONNECT(s) refused", now=now)

    def answer(self, client: Client, packet: Connect) -> None:
        """A connection's first packet, its CONNECT: answered now, or once its password is
        checked (in a thread), or an earlier connection's disk work is done."""
        identity = client.link.identity
        if identity is not None:
            # Its certificate, which the listener's CA signed, says who it is: the user name
            # and password it sent are not asked (a password file has no entry to check).
            packet = dataclasses.replace(packet, username=identity, password=None)
            self._answer_connect(client, packet, authenticated=True)
            return
        authenticator = self._settings.authenticator
        if authenticator is None or packet.properties.authentication_method is not None:
            self._answer_connect(client, packet, authenticated=authenticator is None)
            return
        # A password's hash takes tens of milliseconds (scrypt): on the loop, clients sending
        # wrong passwords would stall every other one. The packets behind the CONNECT wait.
        hold_the_rest(client)
        client.checking = packet
        clients = self._clients

        def check() -> bool:  # in a checking thread
            if clients.get(client.link) is not client or client.checking is None:
                return False  # closed while it waited: no hash
            return authenticator.authenticate(packet.username, packet.password, packet.client_id)

        self._checks.put(client.link.peer, check, partial(self._checked, client, packet))

    def _checked(self, client: Client, packet: Connect, future: Future[bool]) -> None:
        """On the loop: the password of `client`'s CONNECT was checked."""
        if self._clients.get(client.link) is not client or client.checking is None:
            return  # closed meanwhile
        client.checking = None
        try:
            authenticated = future.result()
        except Exception:  # a bug of the authenticator: refused, with its traceback
            log.exception("checking the password of client %r failed", packet.client_id)
            authenticated = False
        self._answer_held(client, packet, authenticated=authenticated)

    def _answer_held(
        self, client: Client, packet: Connect, *, authenticated: bool, waited: bool = False
    ) -> None:
        """On the loop: answer a CONNECT whose packets were held behind it (a password being
        checked, an earlier connection's disk work), unless its client closed meanwhile."""
        if self._clients.get(client.link) is not client:
            return  # closed meanwhile
        self._answer_connect(client, packet, authenticated=authenticated, waited=waited)
        if client.session is not None and client not in self._after_will:
            self._resume(client)  # the packets held behind the CONNECT, and the CONNACK out

    def _answer_connect(
        self, client: Client, packet: Connect, *, authenticated: bool, waited: bool = False
    ) -> None:
        if not waited and self._wait_for_earlier(client, packet, authenticated=authenticated):
            return
        connection = client.link.connection
        v5 = packet.version is ProtocolVersion.V5
        props = packet.properties
        refusal = refusal_of(packet, authenticated=authenticated)
        if refusal is not None:
            words = reason_text(refusal, packet.version)
            self._refuse_counted(client, packet, refusal, words, logging.INFO)
            return
        client_id = packet.client_id
        assigned = record = None
        if not client_id:
            client_id = assigned = f"auto-{uuid.uuid4().hex}"
        else:
            try:
                record = self._resuming.record_of(client_id)
            except OSError as error:
                # EMFILE, EIO, EACCES: raised out of the read, it closed the socket without
                # a CONNACK nor a word (asyncio logs an OSError of a read in debug mode only).
                self._refuse_failed(client, packet, "its session's record could not be read", error)
                return
        if assigned is None and self._resuming.belongs_to_another(
            client_id, packet.username, record
        ):
            # A device of another user retrying with the client id wrote a warning a try.
            words = "its session belongs to another user"
            self._refuse_counted(client, packet, _R.CLIENT_IDENTIFIER_NOT_VALID, words)
            return
        expiry = expiry_of(packet, self._limits)
        keep_alive = granted_keep_alive(packet.keep_alive, self._limits.max_keepalive, v5=v5)
        connack_told: Properties = EMPTY
        if v5:
            connack_told = self._connack_properties(packet, client_id, assigned, expiry, keep_alive)
            limit = connection.client_max_packet_size
            if limit and (size := connection.sent_size(Connack(properties=connack_told))) > limit:
                # Before anything changes: a connected session of its client id stays as is,
                # and one a dead server left is not taken on (its claim, its Will sent).
                self._refuse_too_small(client, packet, size, limit)
                return
        try:
            taken = self._lifetimes.left_by_the_dead(record)
        except OSError as error:
            # Its claim or its record under it (EMFILE, EIO): raised out of a claim's retry
            # or a password's check, it went to the loop as a traceback, no CONNACK sent.
            why = "its session, held by a server of this host that died, could not be taken on"
            self._refuse_failed(client, packet, why, error)
            return
        if taken is CLAIMED:
            # Another server of this host takes it on from one that died: answered again.
            again = partial(
                self._answer_held, client, packet, authenticated=authenticated, waited=waited
            )
            busy = partial(self._refuse_claimed, client, packet)
            wait_for_claim(client, self._clock.now(), again, busy)
            return
        record = taken
        client.quiet = not self._connections.dropped(client_id, now=self._clock.now())
        try:
            present, session = self._resuming.take(client_id, packet.clean_start, expiry, record)
        except OSError as error:
            # The record of the session a clean start ends, read to send its delayed Will
            # (Wills.send_early): raised, the CONNECT went unanswered and the Will was lost.
            why = "its session's record could not be read to send its Will before it ends"
            self._refuse_failed(client, packet, why, error)
            return
        session.expiry = expiry
        client.asked_expiry = props.session_expiry_interval or 0
        session.will = packet.will
        session.username = packet.username
        session.connected = True
        self._take_turns(session)
        window = min(props.receive_maximum or 65_535, self._limits.max_inflight)
        if window != session.outbox.window:
            session.outbox.window = window
            self._subscribing.fit_window(session)
        client.session = session
        self._links[client_id] = client
        self._named[consumer_name(client_id)] = client_id
        earlier = self._batches.last(client_id)
        if earlier is not None and earlier is not client:
            # A connection of this client id before this one still has disk work: an empty
            # job queues this one's behind it (batches.py), and keeps its PUBLISHes, PUBRELs
            # and Will off the paths that skip the disk (they look for jobs), so that none
            # overtakes what the client sent before (MQTT 5.0 §4.6).
            client.jobs.append(Job(None, no_answer))
            self._batches.start(client)

        def said_connected() -> None:
            if self._links.get(client_id) is not client:  # refused or closed meanwhile
                return
            if session.persistent:
                kind = "persistent session, resumed" if present else "persistent session"
            elif present:  # an MQTT 5.0 Clean Start 0 with a Session Expiry of 0: its session
                # kept for this connection alone ("clean session, resumed" read as a contradiction)
                kind = "session resumed, ends at disconnect"
            else:
                kind = "clean session"
            log.log(
                log_level(client),
                "client %s connected from %s (MQTT %s, %s%s)",
                client_id,
                client.link.peer,
                "5.0" if v5 else "3.1.1",
                "" if packet.username is None else f"user {packet.username!r}, ",
                kind,
            )

        # The first record of a new persistent session, which the disk may refuse, and the
        # CONNECT with it (`_record_refused`): its client is said connected once it is written.
        new_record = session.persistent and not present
        if session.persistent or present:
            # Present but expiry 0: a persistent session resumed to end with this connection;
            # its subscriptions are still on disk, so a crash must end it at the restart.
            # Its CONNACK waits for the record (flushed under fsync=always).
            # After the Will of a connection taken over is written (Wills.when_written): this
            # record, without it, would lose it to a SIGKILL before. Its CONNACK waits.
            client.holding += 1
            reading = True  # the read that took this CONNECT begins its batch, if run at once
            self._after_will.add(client)

            def record_it() -> None:
                client.holding -= 1
                self._after_will.discard(client)
                self._out.dirty.add(client)
                record = self._records.record(session)
                # A session resumed has a record on disk already (a restart finds it).
                refused = None if present else partial(self._record_refused, client, session)
                told = said_connected if new_record else _nothing_told
                self._records.write(client, record, told, hold=True, refused=refused, kept=present)
                if not reading:  # later, on the Will's write: nothing else begins or sends
                    if client.jobs:
                        self._batches.start(client)
                    self._resume(client)  # the packets held behind the CONNECT (below)
                    self._out.flush()

            self._wills.when_written(client_id, record_it)
            reading = False
            if client.refused:  # its record, written at once, was refused: so is the CONNECT
                return
            if client in self._after_will and client.held is None:
                # The record being written holds the Will of the connection taken over: the
                # packets behind this CONNECT wait for its record, which comes after that
                # Will's write (a SUBSCRIBE's record, written first, dropped the Will from
                # the disk while it was being written, and a SIGKILL then lost it).
                hold_the_rest(client)
        connection.keep_alive = keep_alive
        # Its CONNECT timeout is over; its keep-alive, if any, is looked at when it can end.
        deadline = connection.deadline()
        if deadline is None:
            self._timers.discard(client)
        else:
            self._timers.set(client, deadline)
        connection.accepted = True
        self._out.send(client, Connack(session_present=present, properties=connack_told))
        if not new_record:
            said_connected()
        self._delivery.resend(client, session)
        self._delivery.pump(session)

    def _connack_properties(
        self, packet: Connect, client_id: str, assigned: str | None, expiry: int, keep_alive: int
    ) -> Properties:
        """What a v5 CONNACK that accepts `packet` tells its client."""
        requested = packet.properties.session_expiry_interval or 0
        return Properties.build(
            assigned_client_identifier=assigned,
            session_expiry_interval=expiry if expiry != requested else None,
            server_keep_alive=keep_alive if keep_alive != packet.keep_alive else None,
            receive_maximum=self._limits.receive_maximum,
            maximum_packet_size=self._limits.max_packet_size,
            topic_alias_maximum=self._limits.topic_alias_maximum,
            retain_available=1,
            wildcard_subscription_available=1,
            subscription_identifier_available=1,
            shared_subscription_available=1,
            response_information=response_information(self._settings, packet, client_id),
        )

    def _refuse_too_small(self, client: Client, packet: Connect, size: int, limit: int) -> None:
        """A v5 CONNECT whose Maximum Packet Size (`limit`) is under its CONNACK's `size`,
        without all it may go without (connection.py `_shortened`): the server must not send it
        (MQTT-3.1.2-24), and no client can do without the rest (its assigned client id, the
        server's Receive Maximum and limits). Refused with a bare CONNACK 0x95 Packet too
        large, which says what to change, if that fits; else closed without a word, as
        mosquitto closes in both cases."""
        refusal = Connack(reason=_R.PACKET_TOO_LARGE)
        told = client.link.connection.sent_size(refusal) <= limit
        log.warning(
            "%s refused: its Maximum Packet Size of %d bytes is under the %d bytes of its "
            "CONNACK (MQTT-3.1.2-24): %s",
            connecting(client, packet),
            limit,
            size,
            "CONNACK 0x95 (packet too large)" if told else "closed, nothing fits",
        )
        if told:
            self._refuse(client, _R.PACKET_TOO_LARGE)
            return
        stop_reading(client)
        client.link.close()

    def _record_refused(self, client: Client, session: Session, error: OSError) -> None:
        """The disk refused the first record of the persistent session a CONNECT made (full,
        read-only): its CONNACK, still unsent, becomes a refusal (v5 0x97 for a full disk,
        0x80 otherwise; 3.1.1 0x03), rather than tell the client a session is kept that the
        next restart would not know. The session ends at once, as a clean one would, and the
        CONNECT's Will goes nowhere (its connection was never accepted). A resumed session
        is not refused: its last record stays on disk, and a restart finds it."""
        failure = store_failure(error)
        if self._links.get(session.client_id) is not client:
            # Closed meanwhile (or taken over, the session another connection's now): its
            # close dealt with the session, as with any whose record the disk refuses.
            log.warning("client %s: session record not written: %s", session.client_id, failure)
            return
        reason = reason_for(failure)
        connection = client.link.connection
        log.warning(
            "client %s refused: its session's record was not written (%s): %s",
            session.client_id,
            reason_text(reason, connection.version or ProtocolVersion.V5),
            failure,
        )
        connection.refuse(reason)
        client.clean_exit = True  # the Will of a connection never accepted goes nowhere
        client.refused = True
        session.expiry = 0  # ends at the close, as a clean session
        self._out.flush()
        self._closed(client.link, "its CONNECT refused")
        client.link.close()

    def _wait_for_earlier(self, client: Client, packet: Connect, *, authenticated: bool) -> bool:
        """A CONNECT that resumes a session from the disk (none in memory, clean start 0)
        while an earlier connection of its client id still has disk work is answered after
        that work, its packets behind it held (True). That work may be making a subscription
        of the session that just ended: its dropbox opened by a worker, closed on the loop
        once done and deleted by a worker after (subscribing.py `_drop_late`); found on disk in
        between, it was opened a second time, which raised out of the read (InvalidArgument:
        the consumer is already open), and the CONNECT got no CONNACK."""
        client_id = packet.client_id
        if (
            not client_id
            or packet.clean_start
            or client_id in self._sessions
            or self._batches.last(client_id) is None
        ):
            return False
        if client.held is None:  # held already while its password was checked
            hold_the_rest(client)

        def answer(_: object) -> None:
            self._answer_held(client, packet, authenticated=authenticated, waited=True)

        self._after_disk_work(client_id, lambda: None, answer)
        return True

    def _refuse_claimed(self, client: Client, packet: Connect) -> None:
        """Refuse as server busy a CONNECT whose session another server of this host still
        claims (claim_wait): a device retrying wrote a warning a try."""
        self._refuse_counted(client, packet, _R.SERVER_BUSY, CLAIM_HELD)

    def _refuse_counted(
        self,
        client: Client,
        packet: Connect,
        reason: ReasonCode,
        words: str,
        level: int = logging.WARNING,
    ) -> None:
        """Refuse a CONNECT (`reason`), saying why (`words`) at `level` the first time for
        its client host and then counting the refusals for the same words (`tell_counts`)."""
        if self._refusals.dropped((client.link.peer.host, words), now=self._clock.now()):
            log.log(level, "%s refused: %s", connecting(client, packet), words)
        self._refuse(client, reason)

    def _refuse_failed(self, client: Client, packet: Connect, why: str, error: OSError) -> None:
        """Refuse a CONNECT the file system failed (`why`), with the reason code its errno
        gives, in one ERROR line."""
        failure = store_failure(error)
        reason = reason_for(failure)
        log.error(
            "%s refused: %s (%s): %s",
            connecting(client, packet),
            why,
            reason_text(reason, packet.version),
            failure,
        )
        self._refuse(client, reason)

    def _refuse(self, client: Client, reason: ReasonCode) -> None:
        """Answer a CONNECT with a refusal and close: nothing more it sent is acted on."""
        self._out.send(client, Connack(reason=reason))
        self._out.flush()
        stop_reading(client)
        client.link.close()
