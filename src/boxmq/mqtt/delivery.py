"""Delivery to subscribers: copies routed from memory, queues, the in-flight window, acks.

A message reaches a session two ways: a PUBLISH routed to the in-memory subscriptions of
non-persistent sessions (`route_memory`), or a message taken out of one of the session's
dropboxes (`pump`, while it has room in flight). Either goes into the session's outbox
(outbox.py) and, if its client is connected and the window lets it, out at once.

Invariants:
- A message taken out of a dropbox stays locked until its client acknowledges it (settled:
  acked, or rejected to error/ for a negative ack, MQTT-234) or it is dropped (queue full,
  expired while queued, over the client's Maximum Packet Size), which unlocks or settles it;
  one that cannot be encoded as a PUBLISH is rejected to error/. A share group's message
  over its member's Maximum Packet Size is declined (`_decline`): another member gets it,
  and once none can, the group's error/ has it; it is never dropped.
- A QoS 0 copy for a congested client is dropped (at most once): a slow reader loses QoS 0,
  not memory.
- Sessions whose acks freed slots are refilled once at the end of the read (`refill`), not
  once per ack.
- While a read is handled, its in-memory copies wait (`defer_routes`) and go out in the
  order they came (`route_deferred`) once the reader's acknowledgements are written, or
  before a SUBSCRIBE or UNSUBSCRIBE of that read changes the subscriptions they meet.
- A retained message routed after the retained store took it does not reach a subscription
  sent it (or a later one of its topic) as retained meanwhile (retained_window.py).
- A copy routed to a subscription whose retained messages a worker is still reading waits in
  `holding` (at most max_queued of them) and goes out after those, unless it is one of them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Final

from boxmq.client.box import Box
from boxmq.client.lifecycle import shown
from boxmq.client.message import Message
from boxmq.client.subscriber import Subscriber
from boxmq.clock import Clock
from boxmq.core.durations import spelled
from boxmq.core.topics import SHARE_PREFIX, parse_filter
from boxmq.errors import BoxMQError, Closed, LockError, store_failure
from boxmq.mqtt.clients import Client, Outgoing
from boxmq.mqtt.drops import DropLog
from boxmq.mqtt.outbox import Stage
from boxmq.mqtt.packets import Publish, Pubrel, new_publish, numbered
from boxmq.mqtt.properties import subscription_identifier
from boxmq.mqtt.reasons import ReasonCode
from boxmq.mqtt.retained_window import Key, RetainedWindow, Written
from boxmq.mqtt.routes import MemoryRoutes, Route
from boxmq.mqtt.session import NO_IDS, Looked, Session, SubscriptionOptions, Token
from boxmq.mqtt.stored import NOT_FORWARDED, publish_of, unsendable_topic

__all__ = ["Delivery"]

log = logging.getLogger("boxmq.mqtt")

_R = ReasonCode
# Read per acknowledgement: an Enum member read off its class costs about 640 instructions
# more than a module's name (outbox.py).
_UNSPECIFIED_ERROR: Final = ReasonCode.UNSPECIFIED_ERROR  # a refusal from here up


class Delivery:
    """Sends sessions their messages. The registries are the broker's, shared: `sessions`
    (client id -> session), `links` (client id -> its connected client), `memory` (the
    in-memory subscriptions) and `durable` (client id -> filter -> its dropbox)."""

    def __init__(
        self,
        box: Box,
        clock: Clock,
        out: Outgoing,
        *,
        sessions: dict[str, Session],
        links: dict[str, Client],
        memory: MemoryRoutes,
        durable: dict[str, dict[str, Subscriber]],
    ) -> None:
        self._box = box
        self._clock = clock
        self._out = out
        self._sessions = sessions
        self._links = links
        self._memory = memory
        self._durable = durable
        # Sessions that settled messages in this read: refilled once at its end, not per ack.
        self.settled: dict[str, Session] = {}
        # Persistent sessions sent a PUBREL, or a QoS 2 PUBLISH, that their records do not
        # name yet: written before the write that sends them (broker._record_unrecorded).
        self.unrecorded: dict[str, Session] = {}
        # The messages of the read being handled (source, packet, place of a retained one),
        # routed once it is answered.
        self._deferred: list[tuple[str, Publish, Written | None]] | None = None
        # Retained messages written and not yet routed, and who was sent them as retained.
        self.retained_window = RetainedWindow()
        # Subscriptions whose retained messages a worker is still reading (subscribing.py):
        # what the routing brings them meanwhile waits here, with the id of a retained one,
        # and goes out after those, as when they were read at once.
        self.holding: dict[Key, list[tuple[Publish, str | None]]] = {}
        self._drops: DropLog[str] = DropLog()  # messages dropped on full queues, logged sparingly
        # (client id, filter) whose dropbox the file system refused to take from: told once.
        self._refused: set[tuple[str, str]] = set()

    def defer_routes(self) -> bool:
        """Keep what `route_memory` is given until `route_deferred`: a publisher's PUBACKs
        and PUBCOMPs are written before the broker spends its time on the subscribers, so
        the publisher's next window is on its way meanwhile (QoS 2 in memory: about 10-20 %
        more messages a second here, docs/benchmarks.md). False when they are kept already
        (a nested read)."""
        if self._deferred is not None:
            return False
        self._deferred = []
        return True

    def route_deferred(self) -> None:
        deferred, self._deferred = self._deferred, None
        for source, packet, written in deferred or ():
            self.route_memory(source, packet, written)

    def route_deferred_so_far(self) -> None:
        """Route the copies deferred until now, and go on deferring: a SUBSCRIBE or an
        UNSUBSCRIBE read behind PUBLISHes of the same client must not change the
        subscriptions those meet. Routed at the end of the read, a message reached a
        subscription made after it (a client's own PUBLISH then SUBSCRIBE, one write) and
        missed one it deleted after it (MQTT 5.0 §4.5: the subscriptions that match when
        the server takes a message get it)."""
        if self._deferred:  # None: not deferring, nothing kept
            try:
                self.route_deferred()
            finally:
                self._deferred = []

    def refused(self) -> list[str]:
        """The client ids of the sessions with a dropbox the file system refused to take
        messages from (`_refused_claim`): tried again at each tick, until it lets them."""
        return list({client_id for client_id, _ in self._refused})

    def refill(self) -> None:
        """At the end of a read: the sessions whose acks freed slots take more messages."""
        settled, self.settled = self.settled, {}
        for session in settled.values():
            self.pump(session, ())  # those the acks named, and those the window cut short

    def route_memory(self, source: str, packet: Publish, written: Written | None = None) -> None:
        """Copies for the in-memory subscriptions of connected non-persistent sessions.
        `written`: a retained message's place, given once it was written (or not): not for
        the subscriptions sent it as retained meanwhile (retained_window.py)."""
        deferred = self._deferred
        if deferred is not None:
            deferred.append((source, packet, written))
            return
        routes = self._memory.route(packet.topic)
        if written is not None:
            having = self.retained_window.routed(packet.topic, written)
            if having:
                routes = self._without(routes, having)
        if not routes:
            return
        props = packet.properties
        if props.raw:
            props = props.without(*NOT_FORWARDED)
        topic, payload, published = packet.topic, packet.payload, packet.qos
        retained = packet.retain
        # The copy is the packet itself when it would be the same (its packet id is not used:
        # the outbox gives its own), as it is for a subscriber that granted the same QoS.
        same = props is packet.properties and not packet.dup
        sessions = self._sessions
        holding = self.holding
        for subscriber, text, granted in routes:
            session = sessions.get(subscriber)
            if session is None:
                continue
            options = session.subscriptions.get(text)
            if options is None or (options.no_local and subscriber == source):
                continue
            retain = retained and options.retain_as_published
            qos = granted if granted < published else published
            if options.identifier:
                extra = subscription_identifier(options.identifier)
                out = new_publish(topic, payload, qos, retain, False, None, props + extra)
            elif same and qos == published and retain == retained:
                out = packet
            else:
                out = new_publish(topic, payload, qos, retain, False, None, props)
            if holding:
                held = holding.get((session, text))
                if held is not None:
                    if len(held) < session.outbox.limit:
                        held.append((out, None if written is None else written.message_id))
                    else:  # as a full queue does: what waits is bounded by max_queued
                        self._tell_dropped(session, out)
                    continue
            self.deliver(session, out, None)

    def _without(self, routes: list[Route], having: set[Key]) -> list[Route]:
        """`routes` but those of the subscriptions in `having`."""
        sessions = self._sessions
        return [route for route in routes if (sessions.get(route[0]), route[1]) not in having]

    def deliver(self, session: Session, publish: Publish, token: Token) -> None:
        # When it left counts for a Message Expiry Interval alone (outbox._again, ready): one
        # without properties (every 3.1.1 message) has none, and reads no clock.
        now = self._clock.now() if publish.properties.mask else 0.0
        try:
            packet_id = session.outbox.offer(publish, token, now)
        except OverflowError:
            self._tell_dropped(session, publish)
            if token is not None:
                _give_back(token)
            return
        if packet_id is None:
            return  # queued behind the window
        client = self._links.get(session.client_id)
        if client is None:
            return
        # What follows is `transmit` of the one PUBLISH the outbox just took, under its
        # `packet_id`, without a PUBLISH built for it unless it is not sent; here and not in
        # a method of its own, as it was: its call cost about 500 instructions a message.
        dup = False
        if not packet_id:  # QoS 0: as it came
            if client.link.congested:
                session.outbox.dropped += 1  # at most once: a slow reader loses QoS 0, not memory
                return
            packet_id, dup = publish.packet_id, publish.dup
        if session.persistent and publish.qos == 2:
            self.unrecorded[session.client_id] = session  # as `transmit` says
        # A try, not contextlib.suppress: its object and two calls cost about 2 % of a QoS 1
        # message's work, and a try nothing.
        try:
            sent = client.link.connection.send_publish(publish, packet_id, dup)
        except Exception:  # transmit below meets it again, and says it
            sent = False
        if sent:
            self._out.dirty.add(client)
            return
        # Not sent (over the client's Maximum Packet Size, or not encodable): a rare path, so
        # transmit tries once more, with the PUBLISH built, and settles it as it does.
        self.transmit(client, session, [numbered(publish, packet_id, dup=dup)])

    def _tell_dropped(self, session: Session, publish: Publish) -> None:
        """The first drop of a run is logged; those after it are counted (drops.py)."""
        if self._drops.dropped(session.client_id, now=self._clock.now()):
            outbox = session.outbox
            log.warning(
                "client %s: queue full (max_queued %d, max_queued_bytes %d), a QoS %d message "
                "dropped; further drops are counted and logged every %s. It reads slower than "
                "its messages come: raise [mqtt.limits] max_queued, or give it a persistent "
                "session, whose messages wait on disk",
                session.client_id,
                outbox.limit,
                outbox.byte_limit,
                publish.qos,
                spelled(self._drops.interval),
            )

    def clock_stepped(self, by: float) -> None:
        """The wall clock was stepped `by` seconds: the counts' intervals move (DropLog.shift)."""
        self._drops.shift(by)

    def report_drops(self, *, now: float | None = None) -> None:
        """Log the drops counted in the intervals over by `now` (None: all of them, now)."""
        for summary in self._drops.summaries(now=now):
            log.warning(
                "client %s: queue full, %d more message(s) dropped in the last %s",
                summary.key,
                summary.dropped,
                spelled(self._drops.interval),
            )

    def transmit(self, client: Client, session: Session, packets: list[Publish | Pubrel]) -> None:
        """Send to the client. A PUBLISH over its Maximum Packet Size is discarded and done with
        as if the client had acknowledged it (MQTT 5.0 §3.1.2.25): its message is settled, and
        its slot goes to the next one, sent after those given. A PUBLISH that cannot be encoded
        at all (a file dropped in a dropbox, larger than any MQTT packet) is discarded too, its
        message rejected to error/: the error would stop the MQTT service for every client."""
        connection = client.link.connection
        if session.persistent and any(
            type(packet) is Publish and packet.qos == 2 for packet in packets
        ):
            # Its record names the packet ids before the client has the PUBLISHes: after a
            # SIGKILL, the restart sends them again under those ids, with DUP, and a client
            # that has one already does not deliver it twice (MQTT 5.0 §4.3.3, §4.4).
            self.unrecorded[session.client_id] = session
        while packets:
            freed: list[Publish | Pubrel] = []
            for packet in packets:
                unencodable: Exception | None = None
                try:
                    if connection.send(packet) or type(packet) is not Publish:
                        continue
                except Exception as error:
                    if type(packet) is not Publish:
                        raise
                    unencodable = error
                freed += self._discard(session, packet, unencodable)
            packets = freed
        self._out.dirty.add(client)

    def _discard(
        self, session: Session, packet: Publish, unencodable: Exception | None
    ) -> list[Publish]:
        """A PUBLISH not sent: its message settled as if acknowledged (over the client's
        Maximum Packet Size), declined for another member (a share group's, `_decline`), or
        rejected to error/ (`unencodable`: why it could not be encoded). Returns what may go
        out in its slot now."""
        packet_id = packet.packet_id
        message = None if packet_id is None else session.outbox.discard(packet_id)
        if (
            unencodable is None
            and message is not None
            and message.queue.startswith(SHARE_PREFIX)
            # A QoS 2 message sent again (a member back with a smaller Maximum Packet Size)
            # may be with the member already: another member's copy would be a second
            # delivery, so it is settled as sent, as for one subscriber (MQTT-3.1.2-25).
            and not (packet.dup and packet.qos == 2)
        ):
            self._decline(session, message)
            return [publish for publish, _ in self._ready(session)]
        if unencodable is None:
            log.warning(
                "client %s: a message on %s is larger than its Maximum Packet Size: not sent",
                session.client_id,
                packet.topic,
            )
        else:  # a QoS 0 copy has no message left to reject: one from a dropbox was settled
            log.warning(  # as `pump` took it
                "client %s: message %s on %s cannot be encoded as an MQTT PUBLISH (%s): %s",
                session.client_id,
                "-" if message is None else shown(message.id),
                packet.topic,
                unencodable,
                "not sent" if message is None else "not sent, moved to error/",
                exc_info=None if isinstance(unencodable, BoxMQError) else unencodable,  # a bug
            )
        if packet_id is None:
            return []
        self._settle(session, message, refused=unencodable is not None)
        return [publish for publish, _ in self._ready(session)]

    def resend(self, client: Client, session: Session) -> None:
        """What a resumed session had in flight, sent again (MQTT 5.0 §4.4), those whose
        Message Expiry Interval ran out meanwhile too (outbox.py, `resend`)."""
        self.transmit(client, session, session.outbox.resend(self._clock.now()))

    def _ready(self, session: Session) -> list[tuple[Publish, Token]]:
        """What may leave the session's queue now; those whose Message Expiry Interval ran
        out while they waited are dropped (MQTT 5.0 §3.3.2.3.3), a stored one unlocked, so
        its dropbox moves it to expired/."""
        outbox = session.outbox
        ready = outbox.ready(self._clock.now())
        if outbox.lapsed:
            lapsed, outbox.lapsed = outbox.lapsed, []
            log.info("client %s: %d message(s) expired on the way", session.client_id, len(lapsed))
            for token in lapsed:
                if token is not None:
                    _give_back(token)
            if session.leaving:
                self.close_drained(session)
        return ready

    def close_drained(self, session: Session) -> None:
        """The share groups the session left while it held some of their messages are
        closed once it holds none (subscribing.py, `_remove_subscription`)."""
        subscribers = self._durable.get(session.client_id, {})
        for text in list(session.leaving):
            subscriber = subscribers.get(text)
            if subscriber is None or not subscriber.holding():
                del session.leaving[text]
                if subscriber is not None:
                    del subscribers[text]
                    try:
                        subscriber.close()
                    except OSError as error:  # its membership file stays: swept as stale
                        log.error(
                            "client %s: leaving the share group of %s: %s",
                            session.client_id,
                            text,
                            store_failure(error),
                        )

    def _decline(self, session: Session, message: Message) -> None:
        """A share group's message larger than this member's Maximum Packet Size, not sent:
        for a member that can take it (MQTT 5.0 §3.1.2.11.4 lets a server send it to one),
        its delivery not counted, never to this member again while it stays connected; once
        no member can (every one declined it), to the group's error/ as too-large. Settled
        as sent, as MQTT-3.1.2-25 has it for one subscriber, it was lost to the group."""
        try:
            dead = message.decline()
        except BoxMQError as error:
            self._not_settled(session, message, error)
            return
        if dead is None:
            log.info(
                "client %s: message %s on %s is larger than its Maximum Packet Size: not "
                "sent, for another member of its share group",
                session.client_id,
                shown(message.id),
                message.topic,
            )
            return
        log.warning(
            "client %s: message %s on %s is larger than the Maximum Packet Size of every "
            "member of its share group: not sent, moved to error/ (%s)",
            session.client_id,
            shown(message.id),
            message.topic,
            dead,
        )

    def _settle(self, session: Session, message: Token, *, refused: bool) -> None:
        if message is None:
            return
        try:
            if refused:
                message.reject()  # MQTT-234: to error/, never to another member
            else:
                message.ack()
        except BoxMQError as error:
            self._not_settled(session, message, error)

    def _not_settled(self, session: Session, message: Message, error: BoxMQError) -> None:
        """A settle the message's lock refused: told, unless it is the normal flow."""
        if isinstance(error, LockError) and self._left(session, message):
            # MQTT-3.10.4-3: a message sent before its UNSUBSCRIBE is delivered all the
            # same, and its PUBACK / PUBREC then finds its subscription deleted: the
            # normal flow, not worth a warning each.
            log.debug(
                "client %s: settling %s of a subscription it left: %s",
                session.client_id,
                message.id,
                error,
            )
            return
        log.warning("client %s: settling %s: %s", session.client_id, message.id, error)

    def _left(self, session: Session, message: Message) -> bool:
        """Whether `message` came by a subscription the session holds no more (each of its
        durable subscriptions, those it is leaving included, has its subscriber here), or by
        one an UNSUBSCRIBE deleted though the same filter was subscribed again since."""
        orphans = session.orphans
        if orphans and message in orphans:
            orphans.discard(message)  # settled the only way it can be
            return True
        subscribers = self._durable.get(session.client_id, {}).values()
        return all(subscriber.queue != message.queue for subscriber in subscribers)

    def acked(self, session: Session, packet_id: int, stage: Stage, reason: ReasonCode) -> None:
        # Unpacked at once: reading four of its fields by name cost about 50 instructions each.
        token, refused, release, stray, reply, waiting = session.outbox.acked(
            packet_id, stage, reason >= _UNSPECIFIED_ERROR
        )
        if stray:  # nothing in flight under that id: nothing settles, nothing is recorded
            log.debug(
                "client %s: an answer for packet id %d, not in flight", session.client_id, packet_id
            )
            client = self._links.get(session.client_id)
            if client is not None:
                if release:  # a repeated PUBREC: its PUBREL again
                    self._out.acknowledge(client, Pubrel, packet_id)
                elif reply is not None:
                    self._out.send(client, reply)
            return
        if release:
            client = self._links.get(session.client_id)
            if client is not None:
                self._out.acknowledge(client, Pubrel, packet_id)
            if session.persistent:
                self.unrecorded[session.client_id] = session
        # A positive PUBREC settles too: the message is the client's from then on, so a share
        # group never gives it to another member, even if this session ends before PUBCOMP.
        # A message in memory has no token (nor has a PUBCOMP): nothing to settle, no call.
        if token is not None:
            self._settle(session, token, refused=refused)
            looked = session.looked
            if (
                looked is not None
                and (found := looked.dry.get(token.queue)) is not None
                and found[1].has_more()
            ):
                # A slot of its consumer is free and its dropbox holds what it may fill it
                # with (a message that waited while every member was full): the refill looks
                # (`cut`). Not otherwise: what comes next comes with news, and a look at
                # each PUBACK was a third of a share group's looks (docs/benchmarks.md,
                # "Many share groups").
                del looked.dry[token.queue]
                looked.cut[token.queue] = found
        if session.leaving:
            self.close_drained(session)
        self.settled[session.client_id] = session  # its freed slots are filled after the read
        if not waiting:  # as the ack left the outbox: settling does not change it
            return  # nothing queued behind the window (most acks): nothing to send
        # The client is looked up only here and above, where it is needed: a PUBACK that
        # frees a slot nothing waits for (most) sends nothing.
        client = self._links.get(session.client_id)
        if client is None and session.outbox.holding:
            return  # held from a resend: the next connection's resend sends them again
        ready = self._ready(session)
        if client is not None:
            self.transmit(client, session, [publish for publish, _ in ready])
        else:
            for _, token in ready:
                if token is not None:
                    _give_back(token)

    def pump(self, session: Session, news: Iterable[str] | None = None) -> None:
        """Take messages out of the session's dropboxes while it has room in flight: out of
        each of them, or with `news` (the `queue` of the dropboxes that may have something
        new: none for a refill after acknowledgements) out of those and of the ones whose
        last look was cut short by the window, not of those found dry since, and of those
        only the ones with something to take (`Subscriber.has_more`). A member of 1,000
        share groups looked into each of its 100 dropboxes (10 us each) at every PUBACK:
        1.2 ms of CPU per QoS 1 message (docs/benchmarks.md, "Many share groups")."""
        subscribers = self._durable.get(session.client_id)
        if not subscribers or not session.connected:
            return
        outbox = session.outbox
        if session.sent_before and not session.sent_before_taken:
            self._send_before_again(session, subscribers)
        looked = session.looked
        if looked is None:
            looked = session.looked = Looked()
        dry, cut = looked.dry, looked.cut
        if news is None:
            dry.clear()
            cut.clear()
            chosen = list(subscribers.items())
        else:
            chosen = _chosen(subscribers, dry, cut, news)
        for text, subscriber in chosen:
            queue = subscriber.queue
            if queue in dry:
                continue  # nothing more there at its last look, and no news of it since
            # One being left takes nothing new (paused): what it holds, after a restart.
            options = session.subscriptions.get(text) or session.leaving.get(text)
            if options is None:
                continue
            # As many as the outbox has room for, with one look at the dropbox: a loop of
            # receive_nowait looked again after the last one, and most such looks (a third of
            # the share group's receives) found nothing.
            while (room := outbox.free) > 0:
                if news is not None and not subscriber.has_more():
                    # Told of, but taken since: a put tells every member of its group, and
                    # the look of the one before this one claimed it. Its look found nothing
                    # (half of a share group's looks); what comes later comes with news.
                    dry[queue] = (text, subscriber)
                    cut.pop(queue, None)
                    break
                try:
                    messages = subscriber.receive_ready(most=room)
                except Closed:
                    cut.pop(queue, None)
                    break
                except OSError as error:
                    self._refused_claim(session, text, error)
                    cut[queue] = (text, subscriber)  # tried again at the next pump too
                    break
                if self._refused:
                    self._claimed_again(session, text)
                for message in messages:
                    self._hand(session, message, text, options)
                if len(messages) < room:
                    # Nothing more now: what comes later comes with news (Box.listen_offered:
                    # a put, a lock given back or ended, another process's file).
                    dry[queue] = (text, subscriber)
                    cut.pop(queue, None)
                    break
            else:  # the window is full: the next pump looks again, news or not
                cut[queue] = (text, subscriber)
        if session.sent_before and not outbox.waiting and outbox.free > 0:
            # Every message taken back had room to go: the ids left name settled ones.
            self._done_before(session)

    def _send_before_again(self, session: Session, subscribers: dict[str, Subscriber]) -> None:
        """After a restart, the first pump of the resumed session: what the process before
        sent and the client did not acknowledge goes again first, in the order it was first
        sent (its record lists them so), across subscriptions, and before anything new
        (MQTT-4.6.0-1); those past the client's window are held in that order (outbox.py).
        Each dropbox hands first the messages it took back at the restart (their locks last
        as long as the session: subscribing.py), so one look at each finds all the session
        held; those not sent again (queued, or a QoS 1 one sent since the record's last
        write) follow as new, in their dropbox's order. Taken and sent one subscription after
        the other, the copies of the first went before those of the second, and its new
        messages before the second's copies too."""
        session.sent_before_taken = True
        places = {key: place for place, key in enumerate(session.sent_before)}
        again: list[tuple[int, Message, str, SubscriptionOptions]] = []
        after: list[tuple[Message, str, SubscriptionOptions]] = []
        complete = True
        for text, subscriber in list(subscribers.items()):
            options = session.subscriptions.get(text) or session.leaving.get(text)
            if options is None:
                continue
            # What it holds is what it took back: nothing was received from it yet.
            held = subscriber.holding()
            if not held:
                continue
            try:
                messages = subscriber.receive_ready(most=held)
            except Closed:
                continue
            except OSError as error:  # its copies go when `pump` can take them, as they come
                self._refused_claim(session, text, error)
                complete = False
                continue
            for message in messages:
                before = _sent_before(session, message)
                if before is None:
                    after.append((message, text, options))
                else:
                    again.append((places[before], message, text, options))
        again.sort(key=lambda taken: taken[0])
        for _, message, text, options in again:
            self._hand(session, message, text, options)
        for message, text, options in after:
            self._hand(session, message, text, options)
        if complete:  # every message taken back was taken: the ids left name settled ones
            self._done_before(session)

    def _done_before(self, session: Session) -> None:
        self._release_settled(session)
        session.sent_before.clear()
        session.sent_before_repeated.clear()
        session.outbox.unreserve()

    def _refused_claim(self, session: Session, text: str, error: OSError) -> None:
        """The file system refused to move a message of the subscription `text` into
        processing/ (read-only, EACCES, EIO): it stays in target/, and the next pump (each
        tick at least) tries again. Raised, it closed the connection of whichever client's
        read was being handled, the subscriber's at each of its reconnects."""
        if (session.client_id, text) in self._refused:
            return
        self._refused.add((session.client_id, text))
        log.error(
            "client %s: messages of %s not sent, tried again at each tick: %s",
            shown(session.client_id),
            text,
            store_failure(error),
        )

    def _claimed_again(self, session: Session, text: str) -> None:
        if (session.client_id, text) in self._refused:
            self._refused.discard((session.client_id, text))
            log.info("client %s: messages of %s are sent again", shown(session.client_id), text)

    def _hand(
        self, session: Session, message: Message, text: str, options: SubscriptionOptions
    ) -> None:
        """Send a message `pump` took out of the dropbox of the subscription `text`."""
        topic = _topic_to_send(message, text)
        if topic is None:
            return
        now = self._clock.now()
        publish = publish_of(message, topic, options, now, self._box.side_files)
        before = _sent_before(session, message)
        if before is None and message.envelope.expired(now):
            self._lapse(session, message)
            return
        if before is not None:  # whatever QoS its subscription grants now: `_send_again`
            self._send_again(session, publish, message, before, now)
        elif publish.qos == 0:
            if message.queue.startswith(SHARE_PREFIX) and self._too_large(session, publish):
                # Acked first (at most once), it could no longer go to another member.
                self._decline(session, message)
                return
            message.ack()
            self.deliver(session, publish, None)
        else:
            self.deliver(session, publish, message)

    def _too_large(self, session: Session, publish: Publish) -> bool:
        """Whether `publish` is over the Maximum Packet Size of the session's client."""
        client = self._links.get(session.client_id)
        return client is not None and not client.link.connection.fits(publish)

    def _lapse(self, session: Session, message: Message) -> None:
        """A message taken from a dropbox and never sent to this client (one its session
        queued when the process before ended, or one whose deadline passed as it was
        taken) whose Message Expiry Interval ran out: not sent, as a queued one in memory
        is not (outbox.py, `ready`), and given back, so its dropbox moves it to expired/
        (MQTT 5.0 §3.3.2.3.3, MQTT-3.3.2-5). One the process before sent goes again, with
        one second left, as on a resumed session without a restart (outbox.py, `resend`):
        its onward delivery had started."""
        log.info(
            "client %s: message %s expired while its session was held",
            session.client_id,
            shown(message.id),
        )
        _give_back(message)
        if session.leaving:  # a share group it left may have waited for this one alone
            self.close_drained(session)

    def _release_settled(self, session: Session) -> None:
        """After a restart: QoS 2 messages the record names as sent, whose files are gone,
        were settled by a PUBREC the process before read after writing that record; their
        PUBRELs may never have gone out, and the client holds their ids until one comes
        (session_record.py, `sent_qos2`). Sent now; a client that had it answers PUBCOMP
        all the same (0x92 if it was done). In the order they were sent, as the client sent
        their PUBRECs (MQTT-4.6.0-3), which their PUBRELs follow (MQTT-4.6.0-4): sorted by
        packet id, ids that wrapped (65535, then 1) went the other way. An older record's
        further copies of one message (`sent_before_repeated`) come after."""
        gone = session.qos2_sent_before()
        session.sent_qos2_before = NO_IDS
        if not gone:
            return
        log.info(
            "client %s: PUBREL again for %d settled QoS 2 message(s)", session.client_id, len(gone)
        )
        session.outbox.expect_release(gone)
        self.unrecorded[session.client_id] = session  # its record names them, before the write
        client = self._links.get(session.client_id)
        if client is not None:
            self.transmit(client, session, [Pubrel(packet_id) for packet_id in gone])

    def _send_again(
        self,
        session: Session,
        publish: Publish,
        message: Message,
        before: tuple[str | None, str],
        now: float,
    ) -> None:
        """A message the process before this one sent and the client did not acknowledge:
        under its packet id again, with DUP (outbox.push_again), or held past the window."""
        packet_id = _taken(session, before, qos2=publish.qos == 2)
        went_at = 2 if packet_id in session.sent_qos2_before else 1
        # A record that names no subscriptions (an older boxmq's) may be older than its
        # `sent_qos2` too: a copy is not lowered on its word, only raised.
        if publish.qos < went_at or (publish.qos > went_at and before[0] is not None):
            # Its subscription granted another QoS since (a SUBSCRIBE again): the client
            # holds it under this id as a message of the QoS it went at, and it comes again
            # so (MQTT-4.4.0-1, as outbox.resend does without a restart). A QoS 1 copy of a
            # QoS 2 one it delivered a second time; a QoS 0 copy left its id held for good,
            # and the id, taken for settled, was sent a PUBREL the client had not asked for;
            # a QoS 2 copy of a QoS 1 one began an exchange for an id the client had done with.
            publish = replace(publish, qos=went_at)  # once a message after a restart
        sent = session.outbox.push_again(publish, message, packet_id, now)
        client = self._links.get(session.client_id)
        if client is not None and sent is not None:  # None: past the window, held
            self.transmit(client, session, [sent])


def _sent_before(session: Session, message: Message) -> tuple[str | None, str] | None:
    """Where a message taken from a dropbox is in `session.sent_before`, if the process
    before sent it: by its subscription and id, or by its id alone in a record that names no
    subscriptions (session_record.py, `sent`)."""
    sent_before = session.sent_before
    if not sent_before:  # every message but those of the first pumps after a restart
        return None
    for key in ((message.queue, message.id), (None, message.id)):
        if key in sent_before:
            return key
    return None


def _taken(session: Session, before: tuple[str | None, str], qos2: bool) -> int:
    """The packet id `before` names in `session.sent_before`, taken for a copy going again at
    QoS 2 or not (`qos2`). A record that names no subscriptions lists a message matching two
    of the session's filters once per copy, under one id: each copy takes one of its packet
    ids in turn, one that went at its QoS first, so that both go again under their own, where
    one went as new and its client, holding both, had a QoS 2 message a third time, and no
    QoS 1 copy takes the id of a QoS 2 one the client holds (session_record.py, `sent`)."""
    queue, message_id = before
    repeated = session.sent_before_repeated.get(message_id) if queue is None else None
    if not repeated:
        return session.sent_before.pop(before)
    ids = [session.sent_before[before], *repeated]
    packet_id = next((i for i in ids if (i in session.sent_qos2_before) is qos2), ids[0])
    ids.remove(packet_id)
    session.sent_before[before], repeated[:] = ids[0], ids[1:]
    return packet_id


def _topic_to_send(message: Message, subscribed: str) -> str | None:
    """The topic name a message from a dropbox goes out on, or None if it cannot go out (then
    it is in error/, logged): a name a script wrote may hold a topic that no PUBLISH can carry,
    and encoding one would stop the MQTT door for every client."""
    topic = message.topic
    if not topic:
        return _topic_of_a_dropped_file(message, subscribed)
    why = unsendable_topic(topic)
    if why is None:
        return topic
    log.warning(
        "message %s: its topic cannot go out over MQTT (%s): moved to error/",
        shown(message.id),
        why,
    )
    _to_error(message)
    return None


def _topic_of_a_dropped_file(message: Message, subscribed: str) -> str | None:
    """The topic for a message that has none (a file a script dropped straight into the
    dropbox, named as little as DropboxMQ allows): the subscription's filter, if that is a topic
    name. A PUBLISH must name one (MQTT 5.0 §3.3.2.1) and a filter with wildcards names none,
    so then the message goes to error/, logged, and None: never lost, never sent wrong."""
    filter = parse_filter(subscribed).filter
    if "+" not in filter and "#" not in filter:
        return filter
    log.warning(
        "message %s in the dropbox of %s has no topic, and MQTT cannot send it on the filter "
        "%s: moved to error/",
        shown(message.id),
        subscribed,
        filter,
    )
    _to_error(message)
    return None


def _give_back(message: Message) -> None:
    """Unlock a stored message this server holds: back to its dropbox for the next taker.
    One settled meanwhile by another process (`boxmq ack` by id) is no longer ours to give
    back, and that is no fault of the client's."""
    try:
        message.unlock()
    except BoxMQError as error:
        log.warning("message %s: giving it back: %s", shown(message.id), error)


def _to_error(message: Message) -> None:
    try:
        message.reject()
    except BoxMQError as error:
        log.warning("message %s: moving it to error/: %s", shown(message.id), error)


def _chosen(
    subscribers: dict[str, Subscriber],
    dry: dict[str, tuple[str, Subscriber]],
    cut: dict[str, tuple[str, Subscriber]],
    news: Iterable[str],
) -> list[tuple[str, Subscriber]]:
    """The subscriptions a pump with `news` looks into: those whose last look the window cut
    short, and those news names (no longer dry); not the others, so that a member of 100
    share groups does not go through all 100 at each PUBACK and each put (21 us a pump on
    the machine of docs/benchmarks.md, "Many share groups"). A subscription news names
    that no look has sorted yet (new, or subscribed again since) has every one looked
    through but those still `dry` (`pump` skips them: no news of them since their last
    look), where a pump without news looks into those too."""
    chosen = {}
    for queue, (text, subscriber) in list(cut.items()):
        if subscribers.get(text) is subscriber:
            chosen[queue] = (text, subscriber)
        else:
            del cut[queue]  # left, or replaced by a subscription of the same filter
    told = [(queue, dry.pop(queue, None)) for queue in news]  # dry no more, whichever way
    for queue, found in told:
        entry = found or chosen.get(queue)
        if entry is None or subscribers.get(entry[0]) is not entry[1]:
            return list(subscribers.items())
        chosen[queue] = entry
    return list(chosen.values())
