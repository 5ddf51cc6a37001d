"""The MQTT broker: sessions, routing, and the bridge to the dropboxes. Runs on the asyncio loop.

Where messages live (DESIGN.md §2, "persistence follows the subscriber"):
- A non-persistent session's plain subscriptions are in memory (the core Router here): what
  only such sessions want never touches the disk, and their QoS 1/2 state is in memory too.
- A persistent session's subscriptions and every share group are dropboxes of the Box: a
  publish that any of them matches is written (and flushed, per the fsync policy) before the
  publisher gets its PUBACK / PUBREC; the loop takes messages out of them with
  `receive_nowait` whenever a publish went in, a client acknowledged, or the timer ticks.
- QoS 2 from a client goes through the Box's exactly-once intake (working/ -> PUBREC;
  PUBREL -> target/ -> PUBCOMP) when the message must be on disk (a persistent publisher or a
  durable subscriber); otherwise the packet id is remembered in the session until PUBREL.

Invariants:
- File work for a client's PUBLISHes runs as one batch per read (`disk.run_all`: a flush never
  blocks the loop), and a client's batches run in order: its acknowledgements and its messages
  keep their order.
- Under fsync=always, the records an answer stands for (a persistent session's before its
  CONNACK, a subscription's before its SUBACK) are flushed first, by a worker thread: the
  answer waits (`_write_session`), and so do the client's packets behind a SUBSCRIBE
  (`Client.held`). Under the other policies they are written at once on the loop.
- Only this module maps sessions to connections; `Link` is all it knows of a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Final

from boxmq.client.box import Box
from boxmq.client.topics import Subscriber
from boxmq.clock import Clock
from boxmq.core import QoS, Subscription, parse_filter
from boxmq.errors import (
    BoxMQError,
    InvalidArgument,
    ProtocolViolation,
    StoreFailed,
    store_failure,
)
from boxmq.model import ConsumerId, Envelope
from boxmq.mqtt.batches import Batches
from boxmq.mqtt.clients import Client, Link, Outgoing
from boxmq.mqtt.delivery import Delivery
from boxmq.mqtt.disk import Job, run_now
from boxmq.mqtt.errors import ProtocolError
from boxmq.mqtt.lifetimes import Lifetimes, session_end_step
from boxmq.mqtt.outbox import Stage
from boxmq.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    ProtocolVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    RetainHandling,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from boxmq.mqtt.packets import (
    Subscription as SubscribeRequest,
)
from boxmq.mqtt.properties import EMPTY, Properties
from boxmq.mqtt.publishing import Publishing
from boxmq.mqtt.reasons import ReasonCode, reason_for
from boxmq.mqtt.recording import Recorder
from boxmq.mqtt.routes import DurableRoutes, MemoryRoutes
from boxmq.mqtt.session import NEVER, Session, SubscriptionOptions
from boxmq.mqtt.session_record import (
    DeliveryOptions,
    read_record,
    records_folder,
)
from boxmq.mqtt.settings import MqttSettings
from boxmq.mqtt.stored import (
    consumer_name,
    exactly_once_source,
    retained_publish,
    storable,
)
from boxmq.mqtt.wills import Wills
from boxmq.store.commit import FsyncPolicy
from boxmq.store.process import process_token

__all__ = ["Broker", "Link"]

log = logging.getLogger("boxmq.mqtt")

_LOCK_TIMEOUT: Final = 7 * 24 * 3600.0  # MQTT has no ack timeout: a session holds its locks
_R = ReasonCode


def _refusal_of(error: BoxMQError) -> ReasonCode:
    """A SUBACK's reason for a subscription that could not be made: as a PUBACK's for the
    disk (0x97 full, 0x80 otherwise), 0x8F for a filter the store cannot name."""
    if isinstance(error, StoreFailed):
        return reason_for(error)
    return _R.TOPIC_FILTER_INVALID if isinstance(error, InvalidArgument) else _R.UNSPECIFIED_ERROR


def _nothing_told() -> None:
    """What a CONNECT's record job tells: nothing, CONNACK is in the connection already."""


@dataclass(eq=False, slots=True)
class _Wanted:
    """One filter of a SUBSCRIBE on its way to its SUBACK (its disk work may still change
    it, hence not frozen): `options` None if it is refused, for `reason`."""

    text: str
    reason: ReasonCode  # the QoS granted, or why not
    options: SubscriptionOptions | None = None
    existed: bool = False  # the session had it already (Retain Handling 1)
    shared: bool = False


class Broker:
    def __init__(self, box: Box, settings: MqttSettings, clock: Clock) -> None:
        self.box = box
        self.settings = settings
        self.limits = settings.limits
        self._clock = clock
        self._clients: dict[Link, Client] = {}
        self._sessions: dict[str, Session] = {}
        self._links: dict[str, Client] = {}  # client id -> its connected client
        self._memory = MemoryRoutes()  # non-persistent sessions' plain subscriptions
        self._durable_routes = DurableRoutes(box)
        self._durable: dict[str, dict[str, Subscriber]] = {}  # client id -> filter -> dropbox
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="boxmq-mqtt-disk")
        self._out = Outgoing()  # the clients to be written at the end of this iteration
        self._send = self._out.send
        self._acknowledge = self._out.acknowledge
        self._delivery = Delivery(
            box,
            clock,
            self._out,
            sessions=self._sessions,
            links=self._links,
            memory=self._memory,
            durable=self._durable,
        )
        self._acked = self._delivery.acked  # per PUBACK: no call more than before
        self._publishing = Publishing(
            box,
            settings,
            self._out,
            self._delivery,
            self._durable_routes,
            self._pool,
            self._kick,
        )
        self._publish = self._publishing.publish  # per PUBLISH, likewise
        self._batches = Batches(box, self._pool, self._batch_done)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._token = process_token()  # names this broker in the session records it writes
        self._wills = Wills(
            box.root,
            clock,
            self._token,
            self._sessions,
            self._publishing.publish_will,
            self._out.flush,
        )
        self._lifetimes = Lifetimes(
            box,
            clock,
            self._token,
            self._wills,
            sessions=self._sessions,
            memory=self._memory,
            durable=self._durable,
        )
        # Under fsync=always a client is told of a record (CONNACK, SUBACK) once it is on disk.
        self._records = Recorder(
            box.root,
            self._token,
            flushed=box.fsync is FsyncPolicy.ALWAYS,
            out=self._out,
            batches=self._batches,
        )
        # A record's write that its process did not live to rename leaves a temporary there.
        box.sweep_temporaries_in(records_folder(box.root))

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # -- connections -------------------------------------------------------------------------------

    def opened(self, link: Link) -> bool:
        """A socket was accepted; False if over max_connections (close it)."""
        if len(self._clients) >= self.limits.max_connections:
            log.warning(
                "%s refused: %d connection(s) already, [mqtt.limits] max_connections = %d",
                link.peer,
                len(self._clients),
                self.limits.max_connections,
            )
            return False
        self._clients[link] = Client(link, self._clock.now())
        return True

    def received(self, link: Link, packets: Iterable[Packet]) -> None:
        """Act on what a read brought. ProtocolViolation goes back to the caller (close)."""
        client = self._clients[link]
        if client.held is not None:
            client.held.extend(packets)
            return
        self._durable_routes.recheck()
        # A SUBSCRIBE that waits for the disk takes the rest (_hold_the_rest): no packet pays
        # for a check.
        client.reading = iter(packets)
        try:
            for packet in client.reading:
                self._handle(client, packet)
        finally:
            client.reading = None
            if self._delivery.settled:
                self._delivery.refill()
            if client.jobs:
                self._batches.start(client)
            self._out.flush_soon()

    def closed(self, link: Link, reason: str) -> None:
        """The socket is gone (or about to be): the session lives on or ends."""
        client = self._clients.pop(link, None)
        if client is None:
            return
        session = client.session
        if session is None or self._links.get(session.client_id) is not client:
            return  # never connected, or taken over by a newer connection
        del self._links[session.client_id]
        session.connected = False
        log.info("client %s disconnected (%s)", session.client_id, reason)
        will = None if client.clean_exit else session.will
        session.will = None
        due = None if will is None else self._wills.schedule(session, will)
        if session.persistent:
            # A Will waiting out its delay is written down: a restart sends it (resume_expiries).
            record = self._records.record(
                session,
                disconnected_at=self._clock.now(),
                will=None if due is None else will,
                will_due=due,
            )
            self._records.save(client, record)
            self._lifetimes.schedule_expiry(session)
        else:
            self._lifetimes.end(session)
        self.flush()

    def flush(self) -> None:
        self._out.flush()

    def tick(self, now: float) -> None:
        """The timer: keep-alives, CONNECT timeouts, and messages others dropped in dropboxes."""
        for client in list(self._clients.values()):
            connection = client.link.connection
            if client.session is None:
                # From the opening, not the last byte: a socket that trickles a byte at a
                # time must not hold its slot forever.
                if now - client.opened > self.limits.connect_timeout:
                    log.info(
                        "%s closed: no CONNECT within %gs",
                        client.link.peer,
                        self.limits.connect_timeout,
                    )
                    client.link.close()
                continue
            deadline = connection.deadline()
            if deadline is not None and now > deadline:
                self._kick(client, _R.KEEP_ALIVE_TIMEOUT, "keep-alive timeout")
        self._wills.retry(now=now)
        self.pump_all()
        self.flush()

    def resume_expiries(self) -> None:
        """At start: the persistent sessions on disk end when their records say (lifetimes.py)."""
        self._lifetimes.resume_expiries()

    def pump_all(self) -> None:
        for client_id in list(self._durable):
            session = self._sessions.get(client_id)
            if session is not None and session.connected:
                self._delivery.pump(session)

    def _batch_done(self) -> None:
        """A client's disk batch is done: its subscribers may have messages to take."""
        self.pump_all()
        self.flush()

    async def close(self) -> None:
        """Shutting down: every client is told (v5) and its connection closed; then the disk
        work in flight finishes, so everything acknowledged is on disk."""
        for client in list(self._clients.values()):
            self._kick(client, _R.SERVER_SHUTTING_DOWN, "server shutting down")
        await self._batches.wait_all()
        for session in list(self._sessions.values()):
            for subscriber in self._durable.pop(session.client_id, {}).values():
                subscriber.detach()  # locks released; the dropboxes and groups stay
        self._pool.shutdown(wait=True)

    # -- dispatch ----------------------------------------------------------------------------------

    def _handle(self, client: Client, packet: Packet) -> None:
        session = client.session
        if session is None:
            assert isinstance(packet, Connect)  # Connection lets nothing else through first
            self._connect(client, packet)
            return
        kind = type(packet)
        if kind is Publish:
            assert isinstance(packet, Publish)
            self._publish(client, session, packet)
        elif kind is Puback:
            assert isinstance(packet, Puback)
            self._acked(session, packet.packet_id, Stage.AWAIT_PUBACK, packet.reason)
        elif kind is Pubrec:
            assert isinstance(packet, Pubrec)
            self._acked(session, packet.packet_id, Stage.AWAIT_PUBREC, packet.reason)
        elif kind is Pubcomp:
            assert isinstance(packet, Pubcomp)
            self._acked(session, packet.packet_id, Stage.AWAIT_PUBCOMP, packet.reason)
        elif kind is Pubrel:
            assert isinstance(packet, Pubrel)
            self._publishing.released(client, session, packet.packet_id)
        elif kind is Subscribe:
            assert isinstance(packet, Subscribe)
            self._subscribe(client, session, packet)
        elif kind is Unsubscribe:
            assert isinstance(packet, Unsubscribe)
            self._unsubscribe(client, session, packet)
        elif kind is Pingreq:
            self._send(client, Pingresp())
        elif kind is Disconnect:
            assert isinstance(packet, Disconnect)
            self._disconnected(client, session, packet)
        elif kind is Auth:
            raise ProtocolError("AUTH without an Authentication Method in CONNECT (§4.12)")
        else:
            raise ProtocolError(f"a client may not send {kind.__name__.upper()}")

    # -- CONNECT -----------------------------------------------------------------------------------

    def _connect(self, client: Client, packet: Connect) -> None:
        connection = client.link.connection
        v5 = packet.version is ProtocolVersion.V5
        props = packet.properties
        refusal = self._refusal(packet)
        if refusal is not None:
            log.info("client %r refused: %s", packet.client_id, refusal.name.lower())
            self._send(client, Connack(reason=refusal))
            self.flush()
            client.link.close()
            return
        client_id = packet.client_id
        assigned = None
        if not client_id:
            client_id = assigned = f"auto-{uuid.uuid4().hex}"
        expiry = self._expiry_of(packet)
        keep_alive = packet.keep_alive
        if v5 and keep_alive > self.limits.max_keepalive:
            keep_alive = self.limits.max_keepalive
        present, session = self._take_session(client_id, packet.clean_start, expiry)
        session.expiry = expiry
        session.will = packet.will
        session.username = packet.username
        session.connected = True
        window = min(props.receive_maximum or 65_535, self.limits.max_inflight)
        session.outbox.window = window
        client.session = session
        self._links[client_id] = client
        if session.persistent or present:
            # Present but expiry 0: a persistent session resumed to end with this connection;
            # its subscriptions are still on disk, so a crash must end it at the restart.
            # Its CONNACK waits for the record (flushed under fsync=always).
            self._records.write(client, self._records.record(session), _nothing_told, hold=True)
        connection.keep_alive = keep_alive
        connection.accepted = True
        requested = props.session_expiry_interval or 0
        self._send(
            client,
            Connack(
                session_present=present,
                properties=Properties.build(
                    assigned_client_identifier=assigned,
                    session_expiry_interval=expiry if v5 and expiry != requested else None,
                    server_keep_alive=keep_alive
                    if v5 and keep_alive != packet.keep_alive
                    else None,
                    receive_maximum=self.limits.receive_maximum,
                    maximum_packet_size=self.limits.max_packet_size,
                    topic_alias_maximum=self.limits.topic_alias_maximum,
                    retain_available=1,
                    wildcard_subscription_available=1,
                    subscription_identifier_available=1,
                    shared_subscription_available=1,
                )
                if v5
                else EMPTY,
            ),
        )
        log.info(
            "client %s connected from %s (MQTT %s, %s session%s)",
            client_id,
            client.link.peer,
            "5.0" if v5 else "3.1.1",
            "persistent" if session.persistent else "clean",
            ", resumed" if present else "",
        )
        self._delivery.transmit(client, session, session.outbox.resend())
        self._delivery.pump(session)

    def _refusal(self, packet: Connect) -> ReasonCode | None:
        if packet.properties.authentication_method is not None:
            return _R.BAD_AUTHENTICATION_METHOD  # no enhanced authentication (§4.12)
        authenticator = self.settings.authenticator
        if authenticator is not None and not authenticator.authenticate(
            packet.username, packet.password, packet.client_id
        ):
            return _R.NOT_AUTHORIZED if packet.username is None else _R.BAD_USER_NAME_OR_PASSWORD
        if packet.client_id and not storable(packet.client_id):
            return _R.CLIENT_IDENTIFIER_NOT_VALID
        return None

    def _expiry_of(self, packet: Connect) -> int:
        if packet.version is ProtocolVersion.V5:
            # Capped, "never" too (told in CONNACK): an operator's limit is a limit.
            return min(
                packet.properties.session_expiry_interval or 0, self.limits.max_session_expiry
            )
        return 0 if packet.clean_start else NEVER  # 3.1.1: CleanSession 0 is kept until clean

    def _take_session(self, client_id: str, clean: bool, expiry: int) -> tuple[bool, Session]:
        """Session takeover and resumption (MQTT 5.0 §3.1.4): (session present, session)."""
        old_client = self._links.get(client_id)
        if old_client is not None:
            log.info("client %s: taken over by a new connection", client_id)
            old_session = old_client.session
            will = None if old_session is None else old_session.will
            # §3.1.2.5: the old connection closes without DISCONNECT, so its Will goes out,
            # unless it has a delay that the new connection now cancels (its session lives on).
            if will is not None and (clean or not will.properties.will_delay_interval):
                assert old_session is not None
                self._publishing.publish_will(old_session.client_id, old_session.username, will)
            if old_session is not None:
                old_session.will = None
            self._kick(old_client, _R.SESSION_TAKEN_OVER, "session taken over")
        if clean:  # §3.1.3.2.2: the old session ends now, so its delayed Will goes out
            self._wills.send_early(client_id)
        self._wills.forget_timer(client_id)
        self._lifetimes.cancel_expiry(client_id)
        session = self._sessions.get(client_id)
        if clean:
            if session is not None:
                self._lifetimes.end(session)
            self._lifetimes.forget_on_disk(client_id)
            session = None
        elif session is None:
            session = self._session_from_disk(client_id, expiry)
        if session is not None:
            return True, session
        session = Session(
            client_id, window=self.limits.max_inflight, queue_limit=self.limits.max_queued
        )
        self._sessions[client_id] = session
        return False, session

    def _session_from_disk(self, client_id: str, expiry: int) -> Session | None:
        """A persistent session this process does not know (boxmq was restarted): its
        durable subscriptions are on disk, their options read back from their records, and
        so are the QoS 2 messages it got PUBREC for and has not released yet. Resumed with
        an expiry of 0 too (MQTT 5.0 §3.1.2.4): it then ends with this connection, its
        subscriptions on disk with it, where a new session would leave them behind."""
        record = read_record(self.box.root, client_id)
        if record is None and not expiry:
            return None  # a clean session most likely: spare it the scan of every subscription
        found = self.box.topics.subscribed(consumer_name(client_id))
        unreleased = self.box.pending(exactly_once_source(client_id))
        if not found and not unreleased and record is None:
            return None
        # No record: the session was left by a boxmq that wrote none, its options are the defaults.
        saved = {} if record is None else record.options
        session = Session(
            client_id, window=self.limits.max_inflight, queue_limit=self.limits.max_queued
        )
        session.expiry = expiry  # before attaching: persistent memberships are not process-bound
        self._sessions[client_id] = session
        for text, subscription in found:
            delivery = saved.get(text, DeliveryOptions())
            options = SubscriptionOptions(
                qos=subscription.qos,
                durable=True,
                no_local=subscription.no_local,
                retain_as_published=delivery.retain_as_published,
                identifier=delivery.identifier,
            )
            session.subscriptions[text] = options
            self._attach(session, text, options)
        log.info(
            "client %s: session found on disk (%d subscription(s), %d QoS 2 awaiting PUBREL)",
            client_id,
            len(found),
            len(unreleased),
        )
        return session

    def _kick(self, client: Client, reason: ReasonCode, why: str) -> None:
        connection = client.link.connection
        if connection.version is ProtocolVersion.V5 and connection.accepted:
            self._send(client, Disconnect(reason))
        self.flush()
        self.closed(client.link, why)
        client.link.close()

    def _disconnected(self, client: Client, session: Session, packet: Disconnect) -> None:
        client.clean_exit = packet.reason != _R.DISCONNECT_WITH_WILL_MESSAGE
        asked = packet.properties.session_expiry_interval
        if asked is not None:
            if session.expiry == 0 and asked:
                raise ProtocolError(
                    "DISCONNECT sets a Session Expiry Interval after 0 (§3.14.2.2.2)"
                )
            session.expiry = min(asked, self.limits.max_session_expiry)
        self.closed(client.link, f"DISCONNECT, reason {packet.reason:#04x}")
        client.link.close()

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------------------

    def _subscribe(self, client: Client, session: Session, packet: Subscribe) -> None:
        """Each filter checked here; a durable one (persistent session, share group) is then
        registered on disk. Under fsync=always its records are flushed (store/records.py),
        so by a worker, and SUBACK goes once every one is done and the session's record
        written: the client's later packets wait for it (`Client.held`), so they find the
        subscriptions in place as if they had been made at once. Under the other policies
        nothing is flushed, and all is done at once on the loop."""
        identifiers = packet.properties.subscription_identifiers
        identifier = identifiers[0] if identifiers else None
        wanted: list[_Wanted] = []
        for request in packet.subscriptions:
            wanted.append(self._checked(session, request, identifier))
        jobs = []
        for one in wanted:
            if one.options is None:
                continue
            try:
                work = self._begin_subscription(session, one.text, one.options)
            except OSError as error:  # the old subscription it replaces could not be deleted
                self._subscription_made(session, one, store_failure(error))
                continue
            if work is not None:
                jobs.append(Job(work, partial(self._subscription_made, session, one)))
        answer = partial(self._subscribed, client, session, packet.packet_id, wanted)
        record = (
            self._records.record(session, [(one.text, one.options) for one in wanted])
            if session.persistent
            else None
        )
        if self._records.flushed and (jobs or record is not None):
            client.jobs += jobs
            self._hold_the_rest(client)
            self._records.write(client, record, answer)
            return
        for job in jobs:  # nothing flushed: done at once on the loop, as before
            run_now(job)
        if record is not None:
            self._records.store(record, flush=False)
        answer()

    def _checked(
        self, session: Session, request: SubscribeRequest, identifier: int | None
    ) -> _Wanted:
        """One filter of a SUBSCRIBE, with its options if it may be subscribed to, or the
        reason it may not."""
        text = request.topic_filter
        try:
            parsed = parse_filter(text)
        except InvalidArgument:
            return _Wanted(text, _R.TOPIC_FILTER_INVALID)
        if parsed.shared and request.no_local:
            raise ProtocolError(f"{text}: No Local on a shared subscription (§3.8.3.1)")
        authorizer = self.settings.authorizer
        if authorizer is not None and not authorizer.can_subscribe(
            session.username, session.client_id, text
        ):
            log.info("client %s may not subscribe to %s", session.client_id, text)
            return _Wanted(text, _R.NOT_AUTHORIZED)
        options = SubscriptionOptions(
            qos=request.qos,
            durable=parsed.shared or session.persistent,
            no_local=request.no_local,
            retain_as_published=request.retain_as_published,
            retain_handling=request.retain_handling,
            identifier=identifier,
        )
        return _Wanted(
            text, ReasonCode(request.qos), options, text in session.subscriptions, parsed.shared
        )

    def _subscription_made(self, session: Session, wanted: _Wanted, result: object) -> None:
        """On the loop, once the disk work of one filter is done: the subscription is the
        session's now, or the SUBACK says why not."""
        client_id = session.client_id
        if isinstance(result, BoxMQError):
            log.warning("client %s: subscribing to %s: %s", client_id, wanted.text, result)
            wanted.reason, wanted.options = _refusal_of(result), None
            return
        assert wanted.options is not None
        subscriber = result if isinstance(result, Subscriber) else None
        if self._sessions.get(client_id) is not session:  # it ended while the disk worked
            if subscriber is not None:
                self._drop_late(session, wanted.text, subscriber)
            return
        session.subscriptions[wanted.text] = wanted.options
        if subscriber is not None:
            self._durable.setdefault(client_id, {})[wanted.text] = subscriber

    def _drop_late(self, session: Session, text: str, subscriber: Subscriber) -> None:
        """A subscription made for a session that ended meanwhile is undone, as its end would
        have done (unless a new session of the client has it: the same dropbox)."""
        client_id = session.client_id
        current = self._sessions.get(client_id)
        with session_end_step(client_id, f"deleting its subscription to {text}"):
            subscriber.close()
            if not parse_filter(text).shared and (
                current is None or text not in current.subscriptions
            ):
                self.box.unsubscribe(text, consumer_name(client_id))

    def _subscribed(
        self, client: Client, session: Session, packet_id: int, wanted: list[_Wanted]
    ) -> None:
        """SUBACK, then the retained messages the new subscriptions get (MQTT 5.0 §3.3.1.3),
        then the packets the client sent meanwhile."""
        reasons = [one.reason for one in wanted]
        if client.link.connection.version is not ProtocolVersion.V5:
            reasons = [r if r < _R.UNSPECIFIED_ERROR else _R.UNSPECIFIED_ERROR for r in reasons]
        self._send(client, Suback(packet_id, tuple(reasons)))
        on_disk: list[tuple[str, int]] = []  # (filter, QoS) of a persistent session's
        retained: list[tuple[Envelope, bytes, SubscriptionOptions]] = []  # sent from memory
        for one in wanted:
            options = one.options
            if options is None or one.shared or not self._retained_due(options, one.existed):
                continue
            if options.durable:  # written into its dropbox: kept until acknowledged
                on_disk.append((one.text, options.qos))
                continue
            matching = self.box.topics.retained_matching(one.text)
            retained += [(env, body, options) for env, body in matching]
        if on_disk:
            name = consumer_name(session.client_id)

            def write() -> object:
                for text, qos in on_disk:
                    self.box.topics.send_retained(text, name, qos=qos)
                return None

            client.jobs.append(Job(write, lambda _: self._delivery.pump(session)))
        now = self._clock.now()
        for envelope, body, options in retained:
            if not envelope.expired(now):  # an expired retained message is not sent (§3.3.2.3.3)
                publish = retained_publish(envelope, body, options, now, self.box.side_files)
                self._delivery.deliver(session, publish, None)
        self._delivery.pump(session)
        if client.held is not None:
            self.loop.call_soon(self._resume, client)

    @staticmethod
    def _retained_due(options: SubscriptionOptions, existed: bool) -> bool:
        handling = options.retain_handling
        return handling is RetainHandling.SEND_ON_SUBSCRIBE or (
            handling is RetainHandling.SEND_IF_NEW_SUBSCRIPTION and not existed
        )

    @staticmethod
    def _hold_the_rest(client: Client) -> None:
        """The client's packets after this one wait (`_resume`): the rest of this read, and
        the reads to come, which are not even made until then."""
        client.held = deque(client.reading or ())  # the read's loop finds nothing left
        client.link.pause_reading()

    def _resume(self, client: Client) -> None:
        """The packets a SUBSCRIBE held back are handled, now that it is answered."""
        held, client.held = client.held, None
        if held is None or self._clients.get(client.link) is not client:
            return  # the connection closed meanwhile
        if not client.paused:
            client.link.resume_reading()
        try:
            self.received(client.link, held)
        except ProtocolViolation as error:  # as the server does for a read (server.py)
            log.info("%s: closing: %s", client.link.peer, error)
            self._kick(client, reason_for(error), f"protocol error: {error}")

    def _begin_subscription(
        self, session: Session, text: str, options: SubscriptionOptions
    ) -> Callable[[], object] | None:
        """On the loop: what subscribing `session` to `text` takes. Done here if it is in
        memory only; otherwise the disk work for a worker, returning the new Subscriber (or
        None: the one open stays), made the session's by `_subscription_made`."""
        client_id = session.client_id
        old = session.subscriptions.get(text)
        if old is not None and old.durable != options.durable:
            self._remove_subscription(session, text)
            old = None
        if not options.durable:
            session.subscriptions[text] = options
            self._memory.subscribe(
                Subscription(
                    ConsumerId(client_id),
                    parse_filter(text),
                    QoS(options.qos),
                    False,
                    options.no_local,
                )
            )
            return None
        if text not in self._durable.get(client_id, {}):
            return partial(self._open_durable, session, text, options)
        if old is None or (old.qos, old.no_local) != (options.qos, options.no_local):
            # Replaced in place: what it holds in flight stays its own (MQTT-3.8.4-3).
            return partial(
                self.box.topics.resubscribe,
                text,
                consumer_name(client_id),
                qos=options.qos,
                no_local=options.no_local,
                process_bound=not session.persistent,
            )
        return lambda: None

    def _attach(self, session: Session, text: str, options: SubscriptionOptions) -> None:
        """On the loop (a session found on disk: its records are there already)."""
        subscriber = self._open_durable(session, text, options)
        self._durable.setdefault(session.client_id, {})[text] = subscriber

    def _open_durable(
        self, session: Session, text: str, options: SubscriptionOptions
    ) -> Subscriber:
        return self.box.subscribe(
            text,
            consumer_name(session.client_id),
            qos=options.qos,
            durable=True,
            max_in_flight=max(1, session.outbox.window),
            lock_timeout=_LOCK_TIMEOUT,
            no_local=options.no_local,
            send_retained=False,
            process_bound=not session.persistent,  # a persistent member outlives a restart
        )

    def _remove_subscription(self, session: Session, text: str) -> bool:
        options = session.subscriptions.pop(text, None)
        if options is None:
            return False
        client_id = session.client_id
        if options.durable:
            subscriber = self._durable.get(client_id, {}).pop(text, None)
            try:
                if subscriber is not None:
                    subscriber.close()
                if not parse_filter(text).shared:
                    self.box.unsubscribe(text, consumer_name(client_id))
            except OSError:
                # Still on disk: the session's again, open again (nothing to write: its
                # record is there), so that its messages still come and an UNSUBSCRIBE sent
                # again tries again.
                session.subscriptions[text] = options
                with contextlib.suppress(BoxMQError, OSError):
                    self._attach(session, text, options)
                raise
        else:
            self._memory.unsubscribe(client_id, parse_filter(text))
        return True

    def _unsubscribe(self, client: Client, session: Session, packet: Unsubscribe) -> None:
        """UNSUBACK once the session's record says so. A subscription the disk refuses to
        delete (EIO, EROFS, ...) is said so: v5 with its reason (0x80, 0x97 for a full disk,
        as a PUBACK would), and 3.1.1, whose UNSUBACK has no failure, by closing the
        connection, as for a PUBLISH not stored."""
        v5 = client.link.connection.version is ProtocolVersion.V5
        reasons = []
        for text in packet.topic_filters:
            try:
                removed = self._remove_subscription(session, text)
            except InvalidArgument:
                removed = False
            except OSError as error:
                failure = store_failure(error)
                log.error(
                    "client %s: unsubscribing from %s failed, the subscription stays: %s",
                    session.client_id,
                    text,
                    failure,
                )
                if not v5:
                    self._kick(client, _R.UNSPECIFIED_ERROR, f"an UNSUBSCRIBE failed: {failure}")
                    return
                reasons.append(reason_for(failure))
                continue
            reasons.append(_R.SUCCESS if removed else _R.NO_SUBSCRIPTION_EXISTED)
        unsuback = Unsuback(packet.packet_id, tuple(reasons) if v5 else ())
        if session.persistent:
            record = self._records.record(session)
            self._records.write(client, record, partial(self._send, client, unsuback))
        else:
            self._send(client, unsuback)
