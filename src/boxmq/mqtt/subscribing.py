"""SUBSCRIBE and UNSUBSCRIBE, and the durable subscriptions of sessions (their dropboxes).

A subscription of a non-persistent session is in memory (the broker's MemoryRoutes); one of a
persistent session, or to a share group, is durable: a dropbox of the Box, registered on disk,
kept across restarts with its delivery options in the session's record (recording.py).

Invariants:
- Each filter of a SUBSCRIBE is checked here, and a durable one then registered on disk;
  under fsync=always by a worker, its records flushed, and SUBACK goes once every one is done
  and the session's record written: the client's later packets wait for it (`Client.held`),
  so they find the subscriptions in place as if they had been made at once. Under the other
  policies nothing is flushed, and all is done at once on the loop, unless the client's disk
  work read before it is still to be done: then after it, as under fsync=always. A
  subscription in memory too, under every policy: those PUBLISHes are routed to the
  subscriptions in memory once written, and must not find it.
- An UNSUBSCRIBE read behind disk work of its client still to be done (a PUBLISH for a
  durable subscriber) removes its subscriptions after that work, under every policy, so that
  those messages still meet them; the client's later packets wait for its UNSUBACK.
- A subscription made for a session that ended while the disk worked is undone, as its end
  would have done (unless a new session of the client has it: the same dropbox), its folder
  deleted by a worker, before the disk work of the client id's later connections.
- A subscription the disk refuses to delete stays the session's, open, and the client is
  told: v5 in its UNSUBACK, 3.1.1 by closing the connection.
- A session holds at most `max_subscriptions` distinct filters (session.py says which):
  a SUBSCRIBE's new filters past it are refused (SUBACK 0x97 Quota exceeded; 3.1.1: 0x80),
  before anything is made for them, and those within it in the same packet are subscribed.
  A filter the session holds already may always be subscribed to again (it replaces it), so
  a session resumed with more than a lowered cap keeps what it has and adds nothing.
- SUBACK goes before the retained messages of its subscriptions in memory (MQTT 5.0 §3.8.4).
  Up to `_CHUNK` of a filter's are read on the loop; the rest by a worker, in chunks sent on
  the loop as they come, while the client's later packets wait and what is routed to those
  subscriptions is held until the last chunk (delivery.py): the client meets them in the
  order it did when all were read at once on the loop, which held every client meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from boxmq.client.box import Box
from boxmq.client.message import Message
from boxmq.client.subscriber import Subscriber
from boxmq.clock import Clock
from boxmq.core import QoS, Subscription, TopicFilter, matcher, parse_filter
from boxmq.core.durations import LONGEST
from boxmq.errors import BoxMQError, InvalidArgument, StoreFailed, store_failure
from boxmq.model import ConsumerId, Envelope
from boxmq.mqtt.clients import Client, Kick, Outgoing, disk_work_ahead, log_level
from boxmq.mqtt.delivery import Delivery
from boxmq.mqtt.disk import Job, run_now
from boxmq.mqtt.errors import ProtocolError
from boxmq.mqtt.framing import PacketType
from boxmq.mqtt.lifetimes import session_end_step
from boxmq.mqtt.packets import (
    ProtocolVersion,
    RetainHandling,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from boxmq.mqtt.packets import (
    Subscription as SubscribeRequest,
)
from boxmq.mqtt.reasons import ReasonCode, reason_for, reason_in
from boxmq.mqtt.recording import Recorder
from boxmq.mqtt.routes import MemoryRoutes
from boxmq.mqtt.session import Session, SubscriptionOptions
from boxmq.mqtt.settings import MqttSettings
from boxmq.mqtt.stored import consumer_name, retained_publish
from boxmq.mqtt.sys_topics import SysTopics, send_sys

__all__ = ["Subscribing", "hold_the_rest"]

log = logging.getLogger("boxmq.mqtt")

# MQTT has no ack timeout: a session's locks end with it (its end releases them), never by
# time. A session may outlast any fixed timeout (`max_session_expiry` goes up to 0xFFFFFFFF,
# never, a client may stay connected for months): a lock that timed out first
# sent its message again, as new, beside the DUP its session's record resends. So the longest
# deadline boxmq writes, a century (docs/mqtt.md, "Locks last as long as the session").
_LOCK_TIMEOUT: Final = LONGEST
_R = ReasonCode


def _refusal_of(error: BoxMQError) -> ReasonCode:
    """A SUBACK's reason for a subscription that could not be made: as a PUBACK's for the
    disk (0x97 full, 0x80 otherwise), 0x8F for a filter the store cannot name."""
    if isinstance(error, StoreFailed):
        return reason_for(error)
    return _R.TOPIC_FILTER_INVALID if isinstance(error, InvalidArgument) else _R.UNSPECIFIED_ERROR


def _nothing_removed(text: str) -> ReasonCode:
    """An UNSUBACK's reason for a filter no subscription had: 0x8F for one MQTT does not
    allow (§4.7, §4.8.2), which nothing could have subscribed to, 0x11 otherwise. Parsed
    only here, off the path of the filters that were subscribed."""
    try:
        parse_filter(text)
    except InvalidArgument:
        return _R.TOPIC_FILTER_INVALID
    return _R.NO_SUBSCRIPTION_EXISTED


@dataclass(eq=False, slots=True)
class _Wanted:
    """One filter of a SUBSCRIBE on its way to its SUBACK (its disk work may still change
    it, hence not frozen): `options` None if it is refused, for `reason`."""

    text: str
    reason: ReasonCode  # the QoS granted, or why not
    options: SubscriptionOptions | None = None
    existed: bool = False  # the session had it already (Retain Handling 1)
    shared: bool = False
    opened: bool = False  # its dropbox was made by this SUBSCRIBE, with its retained messages
    due: bool = False  # it gets the retained messages of its filter (Retain Handling)
    replaced: bool = False  # the same filter came again later in its SUBSCRIBE
    failed: bool = False  # the disk refused it (and the log said so)


Found = tuple[Envelope, bytes]  # a retained message, as the retained store reads it

# Retained messages read on the loop at a SUBSCRIBE before a worker reads the rest: one file
# read costs about 9,000 instructions (docs/benchmarks.md, "Retained lookups (stop 40)").
_CHUNK: Final = 100


@dataclass(eq=False, slots=True)
class _Read:
    """The retained messages of one filter of a SUBSCRIBE, being read (`found`, one thread
    at a time) and sent."""

    text: str
    options: SubscriptionOptions  # the subscription as made: another one stops the reading
    found: Iterator[Found]
    sent: dict[str, str] = field(default_factory=dict)  # topic -> id sent as retained
    over: bool = False  # all read
    stopped: bool = False  # told by the loop: no one to send them to any more

    def take(self) -> list[Found]:
        chunk = list(itertools.islice(self.found, _CHUNK))
        self.over = len(chunk) < _CHUNK
        return chunk


def _holds_some(subscriber: Subscriber | None) -> bool:
    return subscriber is not None and subscriber.holding() > 0


def _settle_sent(sent: list[Message]) -> None:
    """Acknowledge on disk what the session's outbox holds of a subscriber's messages (sent
    or queued, `sent`): the group they are in ends, and its client's answers will find them
    gone (Delivery._left). One settled meanwhile (a PUBACK read before) is passed over."""
    for token in sent:
        with contextlib.suppress(BoxMQError):
            token.ack()


def hold_the_rest(client: Client) -> None:
    """The client's packets after this one wait (the broker's `_resume`): the rest of this
    read, and the reads to come, which are not even made until then."""
    if client.held is None:  # else held already (a SUBSCRIBE that waited): kept, in order
        client.held = deque(client.reading or ())  # the read's loop finds nothing left
    client.link.pause_reading()


class Subscribing:
    """Subscribes and unsubscribes sessions. The registries are the broker's, shared:
    `sessions` (client id -> session), `memory` (the in-memory subscriptions), `durable`
    (client id -> filter -> its dropbox). `kick` closes a client's connection, `resume`
    handles the packets a SUBSCRIBE held back (the broker's)."""

    def __init__(
        self,
        box: Box,
        settings: MqttSettings,
        clock: Clock,
        out: Outgoing,
        delivery: Delivery,
        records: Recorder,
        *,
        sessions: dict[str, Session],
        memory: MemoryRoutes,
        durable: dict[str, dict[str, Subscriber]],
        kick: Kick,
        resume: Callable[[Client], None],
        sys_topics: SysTopics,
    ) -> None:
        self._box = box
        self._settings = settings
        self._clock = clock
        self._out = out
        self._delivery = delivery
        self._records = records
        self._sessions = sessions
        self._memory = memory
        self._durable = durable
        self._kick = kick
        self._resume = resume
        self._sys = sys_topics

    def subscribe(self, client: Client, session: Session, packet: Subscribe) -> None:
        """As `_subscribe_now`, once the retained messages the server is writing that its
        filters could get are written and routed (retained_window.py): a subscription made
        before would read the message one replaces from the store, and get the new one live.
        Meanwhile it waits at the head of the client's held packets, handled again (once)
        when the broker resumes them, as after the disk work of a SUBSCRIBE."""
        if client.waited is packet:  # its wait is over: those written since do not hold it
            client.waited = None
            self._subscribe_now(client, session, packet)
            return
        window = self._delivery.retained_window
        under_way = window.under_way(_matchers(packet))
        if not under_way:
            self._subscribe_now(client, session, packet)
            return
        hold_the_rest(client)
        assert client.held is not None
        client.held.appendleft(packet)
        client.waited = packet
        loop = asyncio.get_running_loop()
        window.when_done(under_way, lambda: loop.call_soon(self._resume, client))

    def _subscribe_now(self, client: Client, session: Session, packet: Subscribe) -> None:
        """Each filter checked here; a durable one (persistent session, share group) is then
        registered on disk. Under fsync=always its records are flushed (store/records.py),
        so by a worker, and SUBACK goes once every one is done and the session's record
        written: the client's later packets wait for it (`Client.held`), so they find the
        subscriptions in place as if they had been made at once. Under the other policies
        nothing is flushed, and all is done at once on the loop."""
        identifiers = packet.properties.subscription_identifiers
        identifier = identifiers[0] if identifiers else None
        wanted: list[_Wanted] = []
        last: dict[str, _Wanted] = {}
        cap = self._settings.limits.max_subscriptions
        room = cap - session.held_count() if cap else None  # None: no cap
        for request in packet.subscriptions:
            one = self._checked(client, session, request, identifier)
            wanted.append(one)
            if one.options is None:
                continue
            earlier = last.get(one.text)
            if room is not None and earlier is None and not session.holds(one.text):
                if room <= 0:
                    self._over_cap(client, session, one, cap, holding=cap - room)
                    continue
                room -= 1
            if earlier is not None:
                # The same filter again: as a SUBSCRIBE after the earlier one's (MQTT-3.8.4-5),
                # it replaces that subscription (MQTT-3.8.4-3), which is made once, as this one.
                earlier.replaced = one.existed = True
            due = not one.shared and self._retained_due(one.options, one.existed)
            one.due = due or (earlier is not None and earlier.due)
            last[one.text] = one
        jobs = []
        # The client's PUBLISHes read before this SUBSCRIBE and still to be written are
        # routed to the subscriptions in memory once written: one made in memory now would
        # get them. It is made after them, in turn with its client's disk work.
        later = disk_work_ahead(client)
        for one in wanted:
            if one.options is None or one.replaced:
                continue
            try:
                work = self._begin_subscription(
                    session, one.text, one.options, retained=one.due, later=later
                )
            except OSError as error:  # the old subscription it replaces could not be deleted
                self._subscription_made(client, session, one, store_failure(error))
                continue
            if work is None and not later:
                continue  # made in memory, at once
            if one.text not in session.subscriptions:  # held from now on, for the cap
                if session.adding is None:
                    session.adding = set()
                session.adding.add(one.text)
            if work is None:
                made = partial(self._memory_made, session, one)
            else:
                made = partial(self._subscription_made, client, session, one)
            jobs.append(Job(work, made, logs=True))
        answer = partial(self._subscribed, client, session, packet.packet_id, wanted)
        refused = partial(self._record_refused, session, wanted, answer)
        record = (
            self._records.record(session, [(one.text, one.options) for one in wanted])
            if session.persistent
            else None
        )
        if self._records.flushed and (jobs or record is not None):
            client.jobs += jobs
            hold_the_rest(client)
            self._records.write(client, record, answer, refused=refused)
            return
        if jobs and later:
            # Nothing flushed, but the client's PUBLISHes read before this SUBSCRIBE are
            # still to be written: a dropbox made now would get them, also one that an
            # UNSUBSCRIBE between them took away. Made after them, as under fsync=always.
            client.jobs += jobs
            hold_the_rest(client)
            client.jobs.append(
                Job(None, lambda _: self._records.write(client, record, answer, refused=refused))
            )
            return
        for job in jobs:  # nothing flushed: done at once on the loop, as before
            run_now(job)
        # Unflushed: stored at once, then answered.
        self._records.write(client, record, answer, refused=refused)

    def _record_refused(
        self, session: Session, wanted: list[_Wanted], answer: Callable[[], None], error: OSError
    ) -> None:
        """The disk refused the session's record written for a SUBSCRIBE: said, unless it
        refused a subscription of that SUBSCRIBE too, which said it already (one refusal of
        the disk, one line); answered all the same (its SUBACK says what was made)."""
        if not any(one.failed for one in wanted):
            self._records.not_written(session.client_id, error)
        answer()

    @staticmethod
    def _over_cap(
        client: Client, session: Session, wanted: _Wanted, cap: int, *, holding: int
    ) -> None:
        """A new filter past `max_subscriptions` (the session `holding` that many with the
        ones its SUBSCRIBE added before it): refused, and the first refusal of the connection
        logged, so that a client that keeps trying does not flood the log."""
        wanted.reason, wanted.options = _R.QUOTA_EXCEEDED, None
        if client.over_subscriptions:
            log.debug(
                "client %s may not subscribe to %s: over the cap", session.client_id, wanted.text
            )
            return
        client.over_subscriptions = True
        log.warning(
            "client %s: subscribing to %s refused: its session holds %d subscription(s), "
            "[mqtt.limits] max_subscriptions = %d; further refusals on this connection are "
            "not logged",
            session.client_id,
            wanted.text,
            holding,
            cap,
        )

    @staticmethod
    def _too_deep(client: Client, session: Session, filter: str, deepest: int) -> None:
        """The first filter of a connection past `max_topic_levels` logged (the start of it:
        it may be 65,535 bytes), the others at debug level, so that a client that keeps
        trying does not flood the log."""
        levels = filter.count("/") + 1
        shown = filter if len(filter) <= 100 else f"{filter[:100]}..."
        if client.too_deep:
            log.debug(
                "client %s may not subscribe to %s: %d levels", session.client_id, shown, levels
            )
            return
        client.too_deep = True
        log.log(
            log_level(client, logging.WARNING),  # a reconnect loop's: DEBUG
            "client %s: subscribing to %s refused: its filter has %d levels, over [mqtt.limits] "
            "max_topic_levels = %d; further refusals on this connection are not logged",
            session.client_id,
            shown,
            levels,
            deepest,
        )

    def _checked(
        self, client: Client, session: Session, request: SubscribeRequest, identifier: int | None
    ) -> _Wanted:
        """One filter of a SUBSCRIBE, with its options if it may be subscribed to, or the
        reason it may not."""
        text = request.topic_filter
        try:
            parsed = parse_filter(text)
        except InvalidArgument:
            return _Wanted(text, _R.TOPIC_FILTER_INVALID)
        deepest = self._settings.limits.max_topic_levels
        if deepest and parsed.filter.count("/") >= deepest:
            # 0x8F: "correctly formed but not allowed for this Client" (MQTT 5.0 §3.9.3).
            self._too_deep(client, session, parsed.filter, deepest)
            return _Wanted(text, _R.TOPIC_FILTER_INVALID)
        if parsed.shared and request.no_local:
            raise ProtocolError(f"{text}: No Local on a shared subscription (§3.8.3.1)")
        authorizer = self._settings.authorizer
        if authorizer is not None and not authorizer.can_subscribe(
            session.username, session.client_id, text
        ):
            if client.told_subscribe:
                log.debug("client %s may not subscribe to %s", session.client_id, text)
            else:
                client.told_subscribe = True
                log.log(
                    log_level(client),  # a reconnect loop's: DEBUG
                    "client %s may not subscribe to %s; further refusals of its filters on "
                    "this connection are logged at debug level",
                    session.client_id,
                    text,
                )
            return _Wanted(text, _R.NOT_AUTHORIZED)
        held = session.subscriptions.get(text)
        options = SubscriptionOptions(
            qos=request.qos,
            # One on disk stays there: a session resumed with expiry 0 is not persistent, but
            # moving its subscription to memory would delete the messages waiting in it.
            durable=parsed.shared or session.persistent or (held is not None and held.durable),
            no_local=request.no_local,
            retain_as_published=request.retain_as_published,
            retain_handling=request.retain_handling,
            identifier=identifier,
        )
        return _Wanted(
            text, ReasonCode(request.qos), options, text in session.subscriptions, parsed.shared
        )

    def _subscription_made(
        self, client: Client, session: Session, wanted: _Wanted, result: object
    ) -> None:
        """On the loop, once the disk work of one filter (`client`'s) is done: the
        subscription is the session's now, or the SUBACK says why not."""
        client_id = session.client_id
        subscriber = result if isinstance(result, Subscriber) else None
        ended = self._sessions.get(client_id) is not session  # while the disk worked
        if session.adding is not None and not (ended and subscriber is not None):
            session.adding.discard(wanted.text)  # else once undone (`_drop_late`)
        if isinstance(result, BoxMQError):
            # The one line of a refusal (disk.py leaves it to this one): ERROR for the disk's.
            wanted.failed = isinstance(result, StoreFailed)
            level = logging.ERROR if wanted.failed else logging.WARNING
            log.log(level, "client %s: subscribing to %s: %s", client_id, wanted.text, result)
            wanted.reason, wanted.options = _refusal_of(result), None
            return
        assert wanted.options is not None
        wanted.opened = subscriber is not None
        if ended:
            if subscriber is not None:
                self._drop_late(client, session, wanted.text, subscriber)
            return
        session.subscriptions[wanted.text] = wanted.options
        if subscriber is not None:
            self._durable.setdefault(client_id, {})[wanted.text] = subscriber

    def _drop_late(
        self, client: Client, session: Session, text: str, subscriber: Subscriber
    ) -> None:
        """A subscription made for a session that ended meanwhile is undone, as its end would
        have done (unless a new session of the client has it: the same dropbox). Its folder
        is deleted by a worker, as the next job of `client` (whose disk work made it): after
        the work read before, and before any later connection's of the client id (batches
        `last`). Then it is no longer the ended session's `adding`, whose dropboxes the end
        of a session of the client id passes over meanwhile (Lifetimes `_making`)."""
        client_id = session.client_id
        current = self._sessions.get(client_id)
        with session_end_step(client_id, f"closing {text}"):
            subscriber.close()

        def undone(_: object) -> None:
            if session.adding is not None:
                session.adding.discard(text)

        if parse_filter(text).shared or (current is not None and text in current.subscriptions):
            undone(None)
            return

        def delete() -> object:  # in a worker thread
            with session_end_step(client_id, f"deleting its subscription to {text}"):
                self._box.unsubscribe(text, consumer_name(client_id))
            return None

        client.jobs.append(Job(delete, undone))

    def _subscribed(
        self, client: Client, session: Session, packet_id: int, wanted: list[_Wanted]
    ) -> None:
        """SUBACK, then the retained messages the new subscriptions get (MQTT 5.0 §3.3.1.3),
        then the packets the client sent meanwhile."""
        reasons = [one.reason for one in wanted]
        if client.link.connection.version is not ProtocolVersion.V5:
            reasons = [r if r < _R.UNSPECIFIED_ERROR else _R.UNSPECIFIED_ERROR for r in reasons]
        self._out.send(client, Suback(packet_id, tuple(reasons)))
        on_disk: list[tuple[str, int]] = []  # (filter, QoS) of a persistent session's
        reads: list[_Read] = []  # sent from memory
        for one in wanted:
            options = one.options
            if options is None or one.replaced or not one.due:
                continue
            if options.durable:  # written into its dropbox: kept until acknowledged
                if not one.opened:  # else they came with its dropbox (Topics.subscribe)
                    on_disk.append((one.text, options.qos))
                continue
            found = self._box.topics.retained_reading(one.text)
            reads.append(_Read(one.text, options, found))
        if on_disk:
            name = consumer_name(session.client_id)

            def write() -> object:
                for text, qos in on_disk:
                    self._box.topics.send_retained(text, name, qos=qos)
                return None

            client.jobs.append(Job(write, lambda _: self._delivery.pump(session)))
        try:
            for read in reads:  # a few at once; more are read by a worker, off the loop
                self._send_retained(session, read, read.take())
        except OSError as error:  # its files are read as they are reached (retained_reading)
            self._retained_refused(client, error)
            return
        pending = [read for read in reads if not read.over]
        if pending:
            self._read_later(client, session, wanted, pending)
            return
        self._retained_sent(client, session, wanted)

    def _retained_refused(self, client: Client, error: OSError) -> None:
        """The file system failed the look for a new subscription's retained messages after
        its SUBACK (EMFILE, EIO): the client is closed with one ERROR line, as for a look at
        the disk failed while its packets are read (server.py), and subscribes again once it
        reconnects. Raised out of the answer behind the client's disk work (fsync=always),
        the error was logged with a traceback and the client went without them, untold."""
        failure = store_failure(error)
        log.error("%s: closing: %s", client.link.peer, failure)
        self._kick(client, _R.UNSPECIFIED_ERROR, f"closed by the server: {failure}")

    def _send_retained(self, session: Session, read: _Read, chunk: list[Found]) -> None:
        now = self._clock.now()
        window = self._delivery.retained_window
        for envelope, body in chunk:
            if not envelope.expired(now):  # an expired retained message is not sent (§3.3.2.3.3)
                publish = retained_publish(envelope, body, read.options, now, self._box.side_files)
                self._delivery.deliver(session, publish, None)
                # If the store took it before the loop routed it, the routing must leave this
                # subscription out: it has the message already (retained_window.py).
                window.sent(publish.topic, session, read.text, envelope.message_id)
                read.sent[publish.topic] = envelope.message_id

    def _read_later(
        self, client: Client, session: Session, wanted: list[_Wanted], reads: list[_Read]
    ) -> None:
        """More retained messages than a chunk: a worker reads them (20,000 files took the
        loop, every client with it, 6.5-9.8 s), each chunk sent on the loop as it comes. The
        client's later packets wait, as for the disk work of a SUBSCRIBE, and what the
        routing brings these subscriptions meanwhile waits in `Delivery.holding`, sent after
        the retained messages, as when they were read at once."""
        if client.held is None:
            hold_the_rest(client)
        holding = self._delivery.holding
        for read in reads:
            holding[session, read.text] = []
        loop = asyncio.get_running_loop()

        def work() -> object:  # in a worker thread
            for read in reads:
                while not (read.over or read.stopped):
                    chunk = read.take()
                    try:
                        loop.call_soon_threadsafe(self._retained_chunk, session, read, chunk)
                    except RuntimeError:  # the loop is closed: nobody left to send them to
                        return None
            return None

        done = partial(self._retained_read, client, session, wanted, reads)
        client.jobs.append(Job(work, done, logs=True))

    def _reading(self, session: Session, read: _Read) -> bool:
        """Whether the subscription `read` is for is still the one made (not ended with its
        session, unsubscribed, or subscribed again): else its reading stops."""
        if not read.stopped and (
            self._sessions.get(session.client_id) is not session
            or session.subscriptions.get(read.text) is not read.options
        ):
            read.stopped = True
        return not read.stopped

    def _retained_chunk(self, session: Session, read: _Read, chunk: list[Found]) -> None:
        if self._reading(session, read):
            self._send_retained(session, read, chunk)
            self._out.flush_soon()  # not in a read's handling, nor a batch's, which do it

    def _retained_read(
        self,
        client: Client,
        session: Session,
        wanted: list[_Wanted],
        reads: list[_Read],
        result: object,
    ) -> None:
        """On the loop, the worker's reading done: what the routing held for the
        subscriptions goes out (not a message sent as retained already), then as at once."""
        if isinstance(result, BoxMQError):
            log.error(
                "client %s: reading the retained messages of %s: %s",
                session.client_id,
                ", ".join(read.text for read in reads),
                result,
            )
        live = self._sessions.get(session.client_id) is session
        for read in reads:
            held = self._delivery.holding.pop((session, read.text), [])
            if not live:
                continue
            for publish, message_id in held:
                if message_id is None or read.sent.get(publish.topic) != message_id:
                    self._delivery.deliver(session, publish, None)
        if live:
            self._retained_sent(client, session, wanted)
        else:
            self._resume_soon(client)

    def _retained_sent(self, client: Client, session: Session, wanted: list[_Wanted]) -> None:
        for one in wanted:  # this server's own, from memory (sys_topics.py)
            options = one.options
            if options is not None and not one.replaced and one.due:
                for topic, payload in self._sys.matching(one.text):
                    send_sys(self._out, client, options, topic, payload, retained=True)
        # A look into its new dropboxes, and into those its window cut short, not into all
        # of them: a member of 100 share groups looked into each at each of its SUBSCRIBEs,
        # 5,000 looks for its 100 (docs/benchmarks.md, "Many share groups").
        durable = self._durable.get(session.client_id, {})
        self._delivery.pump(session, [durable[o.text].queue for o in wanted if o.text in durable])
        self._resume_soon(client)

    @staticmethod
    def _retained_due(options: SubscriptionOptions, existed: bool) -> bool:
        handling = options.retain_handling
        return handling is RetainHandling.SEND_ON_SUBSCRIBE or (
            handling is RetainHandling.SEND_IF_NEW_SUBSCRIPTION and not existed
        )

    def _begin_subscription(
        self,
        session: Session,
        text: str,
        options: SubscriptionOptions,
        *,
        retained: bool,
        later: bool = False,
    ) -> Callable[[], object] | None:
        """On the loop: what subscribing `session` to `text` takes. Done here if it is in
        memory only (unless `later`: then by `_memory_made`, after the client's disk work);
        otherwise the disk work for a worker, returning the new Subscriber (or None: the one
        open stays), made the session's by `_subscription_made`. A new dropbox gets its
        `retained` messages as it is made (Topics.subscribe says why)."""
        client_id = session.client_id
        old = session.subscriptions.get(text)
        if text in session.leaving:  # subscribed again before it was done leaving: it stays
            del session.leaving[text]
            self._durable[client_id][text].resume()
        if old is not None and old.durable != options.durable:
            self._remove_subscription(session, text)
            old = None
        if not options.durable:
            if not later:
                self._subscribe_memory(session, text, options)
            return None
        if text not in self._durable.get(client_id, {}):
            return partial(self._open_new, session, text, options, send_retained=retained)
        if old is None or (old.qos, old.no_local) != (options.qos, options.no_local):
            return partial(self._resubscribe, session, text, options)
        return partial(self._made_again_if_gone, session, text, options)

    def _resubscribe(self, session: Session, text: str, options: SubscriptionOptions) -> None:
        # Replaced in place: what it holds in flight stays its own (MQTT-3.8.4-3).
        self._box.topics.resubscribe(
            text,
            consumer_name(session.client_id),
            qos=options.qos,
            no_local=options.no_local,
            process_bound=not session.persistent,
        )

    def _made_again_if_gone(
        self, session: Session, text: str, options: SubscriptionOptions
    ) -> None:
        """A SUBSCRIBE of a filter the session has, with the same options, changes nothing,
        unless another process ended the subscription on disk meanwhile (the Python API's
        `box.unsubscribe` under the client's name, a folder deleted by hand): then it is made
        again. The client, granted it again, got nothing more on it, routed by no process."""
        if self._box.topics.has_subscription(text, consumer_name(session.client_id)):
            return
        log.warning(
            "client %s: its subscription to %s was ended on disk by another process (the "
            "Python API, a folder deleted by hand): made again at its SUBSCRIBE",
            session.client_id,
            text,
        )
        self._resubscribe(session, text, options)

    def _subscribe_memory(self, session: Session, text: str, options: SubscriptionOptions) -> None:
        session.subscriptions[text] = options
        self._memory.subscribe(
            Subscription(
                ConsumerId(session.client_id),
                parse_filter(text),
                QoS(options.qos),
                False,
                options.no_local,
            )
        )

    def _memory_made(self, session: Session, wanted: _Wanted, _: object) -> None:
        """On the loop, once the client's disk work read before its SUBSCRIBE is done: the
        subscription in memory is made, unless its session ended meanwhile."""
        if session.adding is not None:
            session.adding.discard(wanted.text)
        if self._sessions.get(session.client_id) is not session:
            return
        assert wanted.options is not None
        self._subscribe_memory(session, wanted.text, wanted.options)

    def attach(
        self, session: Session, text: str, options: SubscriptionOptions, *, found: bool = False
    ) -> None:
        """On the loop (a session found on disk: its records are there already). found: the
        session comes from the disk after a restart, and takes back what it had been sent
        and had not acknowledged (their locks name no process), resumed with an expiry of 0
        too: its record, written at its CONNECT, ends it at the next start if the server dies
        while it is connected, as for a persistent one."""
        subscriber = self._open_durable(session, text, options, outlives=found)
        self._durable.setdefault(session.client_id, {})[text] = subscriber

    def take_back(self, session: Session) -> None:
        """Each durable subscription of the session takes back what another server's
        subscriber of its name took since and left locked to it (Subscriber.take_back),
        in its order among what the subscription has to send. One whose look the disk
        refuses leaves them for the next time."""
        for text, subscriber in self._durable.get(session.client_id, {}).items():
            try:
                subscriber.take_back()
            except OSError as error:
                log.error(
                    "client %s: what another server left locked to its subscription to %s "
                    "is not taken back: %s",
                    session.client_id,
                    text,
                    store_failure(error),
                )

    def fit_window(self, session: Session) -> None:
        """Each durable subscription of the session (a share group's membership included)
        takes as many messages at once as its client's window holds now: a resumed session's
        client may announce another Receive Maximum than the connection that opened them,
        and a larger one is used from its next read, not left at the first one's size."""
        for subscriber in self._durable.get(session.client_id, {}).values():
            subscriber.set_limits(
                max_in_flight=max(1, session.outbox.window), lock_timeout=_LOCK_TIMEOUT
            )

    def _open_new(
        self, session: Session, text: str, options: SubscriptionOptions, *, send_retained: bool
    ) -> Subscriber:
        """A SUBSCRIBE's new durable subscription. One already on disk under the client's
        name that its session did not make (kept by `boxmq subscribe --name` or the Python
        API, or left by an older boxmq) is joined, there being one dropbox per filter and
        name: said in the log, since what it collected for another consumer goes to this
        client now, and the session's end deletes it (docs/mqtt.md)."""
        if self._box.topics.has_subscription(text, consumer_name(session.client_id)):
            log.warning(
                "client %s: subscribing to %s joins a subscription on disk under its name "
                "that its session did not make (`boxmq subscribe --name`, the Python API, an "
                "older boxmq): its messages go to this client, and its session's end deletes it",
                session.client_id,
                text,
            )
        return self._open_durable(session, text, options, send_retained=send_retained)

    def _open_durable(
        self,
        session: Session,
        text: str,
        options: SubscriptionOptions,
        *,
        send_retained: bool = False,
        outlives: bool = False,
    ) -> Subscriber:
        # Not Box.subscribe, whose warning of a $SYS filter is for the API: this door sends
        # its clients the figures from memory (sys_topics.py).
        return self._box.topics.subscribe(
            text,
            consumer_name(session.client_id),
            qos=options.qos,
            durable=True,
            max_in_flight=max(1, session.outbox.window),
            lock_timeout=_LOCK_TIMEOUT,
            no_local=options.no_local,
            send_retained=send_retained,
            # A persistent member outlives a restart.
            process_bound=not (session.persistent or outlives),
        )

    def _remove_subscription(self, session: Session, text: str) -> bool:
        options = session.subscriptions.pop(text, None)
        if options is None:
            return False
        client_id = session.client_id
        if options.durable:
            subscribers = self._durable.get(client_id, {})
            held = subscribers.get(text)
            parsed = parse_filter(text)
            # MQTT-234: the last member's UNSUBSCRIBE ends the group, deleting what it had
            # not delivered; what this one was sent it still completes (its packets are in
            # its outbox, its later answers settle nothing), settled first so that a member
            # joining meanwhile is not sent them again.
            last = False
            if parsed.shared and held is not None and _holds_some(held):
                last = self._last_member(session, parsed)
                if not last:
                    # MQTT-3.10.4-3: what it was sent it completes, not another member: it
                    # takes nothing more, and closes once those are settled
                    # (Delivery.close_drained).
                    held.pause()
                    session.leaving[text] = options
                    return True
            subscriber = subscribers.pop(text, None)
            try:
                if subscriber is not None:
                    queue = subscriber.queue
                    sent = [
                        token
                        for token in session.outbox.tokens()
                        if token is not None and token.queue == queue
                    ]
                    if last:
                        _settle_sent(sent)
                    if session.orphans is None:
                        session.orphans = set()
                    session.orphans.update(sent)
                    subscriber.close()
                if not parsed.shared:
                    self._box.unsubscribe(text, consumer_name(client_id))
            except OSError:
                # Still on disk: the session's again, open again (nothing to write: its
                # record is there), so that its messages still come and an UNSUBSCRIBE sent
                # again tries again.
                session.subscriptions[text] = options
                with contextlib.suppress(BoxMQError, OSError):
                    self.attach(session, text, options)
                raise
        else:
            self._memory.unsubscribe(client_id, parse_filter(text))
        return True

    def _last_member(self, session: Session, parsed: TopicFilter) -> bool:
        """Whether the session is the only member of the share group `parsed` on disk (of
        any process, a persistent session away included); not when the disk cannot say."""
        assert parsed.share_group is not None
        try:
            members = self._box.topics.members_of(parsed.share_group, parsed.filter)
        except (BoxMQError, OSError):
            return False
        return members == [consumer_name(session.client_id)]

    def unsubscribe(self, client: Client, session: Session, packet: Unsubscribe) -> None:
        """UNSUBACK once the session's record says so. A subscription the disk refuses to
        delete (EIO, EROFS, ...) is said so: v5 with its reason (0x80, 0x97 for a full disk,
        as a PUBACK would), and 3.1.1, whose UNSUBACK has no failure, by closing the
        connection, as for a PUBLISH not stored. While the client's PUBLISHes read before it
        are still to be written, the subscriptions are removed after them (they meet them
        first, as the client sent them), and the client's later packets wait for the
        UNSUBACK, as for a SUBSCRIBE; with nothing pending, at once."""
        if disk_work_ahead(client):
            # A dropbox deleted now would miss them, and a message still to be written
            # into it would be lost with it.
            hold_the_rest(client)
            after = partial(self._unsubscribe_after, client, session, packet)
            client.jobs.append(Job(None, lambda _: after()))
            return
        self._unsubscribe_now(client, session, packet)

    def _unsubscribe_after(self, client: Client, session: Session, packet: Unsubscribe) -> None:
        """On the loop, once the disk work read before the UNSUBSCRIBE is done: its messages
        are taken out of the session's dropboxes while they are still there (sent, if the
        client has room), then the subscriptions removed, then the held packets handled."""
        if self._sessions.get(session.client_id) is not session:  # it ended meanwhile
            return
        self._delivery.pump(session)
        self._unsubscribe_now(client, session, packet, held=True)

    def _answer_held_unsubscribe(self, client: Client, unsuback: Unsuback) -> None:
        self._out.send(client, unsuback)
        self._resume_soon(client)

    def _resume_soon(self, client: Client) -> None:
        """The packets its SUBSCRIBE or UNSUBSCRIBE held (`hold_the_rest`) are handled next."""
        if client.held is not None:
            asyncio.get_running_loop().call_soon(self._resume, client)

    def _unsubscribe_now(
        self, client: Client, session: Session, packet: Unsubscribe, *, held: bool = False
    ) -> None:
        """`held`: this UNSUBSCRIBE held the client's later packets, and its answer lets them
        go. One done at once held nothing: a SUBSCRIBE read after it may be holding them
        until its own answer, which this one's, coming first, must not cut short."""
        v5 = client.link.connection.version is ProtocolVersion.V5
        reasons = []
        # Told to the other processes once, not once per filter (Topics.ending_together).
        with self._box.topics.ending_together():
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
                        why = f"an UNSUBSCRIBE failed: {failure}"
                        self._kick(client, _R.UNSPECIFIED_ERROR, why)
                        return
                    # 0x80 for a full disk too: UNSUBACK has no 0x97 (MQTT-3.11.3-2).
                    reasons.append(reason_in(PacketType.UNSUBACK, failure))
                    continue
                reasons.append(_R.SUCCESS if removed else _nothing_removed(text))
        unsuback = Unsuback(packet.packet_id, tuple(reasons) if v5 else ())
        answer = partial(
            self._answer_held_unsubscribe if held else self._out.send, client, unsuback
        )
        if session.persistent:
            self._records.write(client, self._records.record(session), answer)
        else:
            answer()


def _matchers(packet: Subscribe) -> Iterator[Callable[[str], bool]]:
    """The matchers of the SUBSCRIBE's filters that get retained messages: not a share
    group's (MQTT-3.3.1-9), nor one its checks will refuse."""
    for request in packet.subscriptions:
        try:
            parsed = parse_filter(request.topic_filter)
        except BoxMQError:
            continue
        if not parsed.shared:
            yield matcher(parsed.filter)
