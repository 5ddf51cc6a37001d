"""What clients publish: PUBLISH and PUBREL from a client, and a client's Will.

A PUBLISH goes to the in-memory subscriptions at once (`_publish_now`, the fast path) when
nothing needs the disk; otherwise it is disk work (disk.py) for the client's next batch
(batches.py), answered once that is done: into the durable subscriptions and the retained
store (`write`), or into the exactly-once intake for QoS 2 (`_assure`), then routed from
memory and acknowledged.

Invariants:
- A client's PUBLISHes are answered in the order they came: once one waits for the disk,
  the ones behind it wait in its batch too (even those that need no disk).
- What got PUBACK/PUBREC is on disk if a durable subscription or the retained store wants it
  (flushed per the fsync policy); what the disk refused is answered with a failure (v5) or
  the connection closed (3.1.1), never acknowledged.
- A QoS 2 message is routed once: a repeat of its PUBLISH is answered again, never routed.
  A persistent session's retained one waits in the exactly-once intake for its PUBREL, as
  its others do, and replaces the retained message there (`_deliver_retained`).
- A client's Will goes to subscribers after what the client published before its connection
  ended: while that one's disk work runs or waits, the Will is the last of it. A retained
  Will, like a retained PUBLISH, goes to them once written.
- A retained message numbered as it is received (`_order_of`) is routed once, with its
  number, or told not routed if its write failed: so a subscription sent it as retained
  meanwhile is not sent it again (retained_window.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Executor, Future
from functools import partial
from typing import TypeVar

from boxmq.client.assured import AssuredMessage
from boxmq.client.box import Box
from boxmq.clock import Clock
from boxmq.core.exactly_once import (
    SourceOverLimit,
    UntrustedSource,
    check_message_size,
    check_trusted,
)
from boxmq.core.refusal_lines import RefusalLines, passed_over_said
from boxmq.errors import (
    BoxMQError,
    ItemNotFound,
    MessageTooLarge,
    MetadataTooLong,
    NotAllowed,
    ResourceConstraint,
    StoreFailed,
    store_failure,
)
from boxmq.model import PUBLISHED_RETAINED, MessageId, PropertyValue
from boxmq.mqtt.clients import Client, Kick, Outgoing, disk_work_ahead, log_level
from boxmq.mqtt.delivery import Delivery
from boxmq.mqtt.disk import Job, run_all
from boxmq.mqtt.errors import ProtocolError
from boxmq.mqtt.framing import PacketType
from boxmq.mqtt.packets import (
    ProtocolVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Will,
    held_size,
    with_expiry,
)
from boxmq.mqtt.properties import EMPTY, Properties, PropertyId
from boxmq.mqtt.reasons import ReasonCode, reason_for, reason_in
from boxmq.mqtt.retained_order import RetainedOrder
from boxmq.mqtt.retained_window import Written
from boxmq.mqtt.routes import DurableRoutes
from boxmq.mqtt.session import HeldTotals, Release, Session
from boxmq.mqtt.settings import MqttSettings
from boxmq.mqtt.stored import (
    consumer_name,
    exactly_once_identities,
    exactly_once_source,
    kept_properties,
    publication_of,
    released_publish,
    side_file_of,
    store_with_properties,
    stored_expiry,
)
from boxmq.mqtt.sys_topics import about_sys

__all__ = ["Publishing"]

log = logging.getLogger("boxmq.mqtt")

_R = ReasonCode
_Result = TypeVar("_Result")

# What the QoS document calls memory attacks, refused to a QoS 2 PUBLISH as the exactly-once
# intake refuses them to any sender: a limit reached, a message too large, an untrusted one.
_MEMORY_ATTACKS = (ResourceConstraint, MessageTooLarge, NotAllowed)

WillWritten = Callable[[BaseException | None], None]
"""What runs once a Will's disk work ended: with None if it was stored (or needed no disk),
else with the failure."""


def _tell_will_lost(client_id: str, topic: str, written: Future[None]) -> None:
    """A Will's disk write ended (in the worker thread). No client waits for a Will's answer,
    so a failure is told here or nowhere. Not retried: a Will written late could overtake
    what its client said since it came back. Its in-memory subscribers have it already."""
    if written.cancelled() or (error := written.exception()) is None:
        return
    _log_will_lost(client_id, topic, error)


def _log_will_lost(client_id: str, topic: str, error: BaseException) -> None:
    reason = store_failure(error) if isinstance(error, OSError) else error
    log.error(
        "client %s: its Will to %s was not stored, so its durable subscribers (persistent "
        "sessions, share groups) did not get it: %s",
        client_id,
        topic,
        reason,
        exc_info=None if isinstance(reason, BoxMQError) else reason,  # a bug: its traceback
    )


class Publishing:
    """Publishes for clients. `kick` closes a client's connection (the broker's)."""

    def __init__(
        self,
        box: Box,
        settings: MqttSettings,
        out: Outgoing,
        delivery: Delivery,
        durable_routes: DurableRoutes,
        pool: Executor,
        kick: Kick,
        clock: Clock,
        stored: Callable[[], None],
    ) -> None:
        """`stored`: on the loop, once a Will written outside a batch is in its dropboxes:
        the connected sessions take it and are written to, as after a batch (broker.py)."""
        self._box = box
        self._stored = stored
        self._clock = clock
        self._retained_order = RetainedOrder()
        self._settings = settings
        self._out = out
        self._delivery = delivery
        self._durable_routes = durable_routes
        self._pool = pool
        self._kick = kick
        limits = box.intake.limits  # fixed for the box's life: read once, not per message
        self._held_limit = limits.max_pending_per_source
        self._held_bytes_limit = limits.max_bytes_per_source
        self._held_total_limit = limits.max_pending_total
        self._held_total_bytes_limit = limits.max_bytes_total
        self._trusted = limits.trusted_sources  # what is held asks it here, not the intake
        self._size_limits = limits  # check_message_size's caps
        self.held_totals = HeldTotals()  # every session's holds together (broker.py gives it)
        self._refusal_lines: RefusalLines[str] = RefusalLines()  # QoS 2 refusals told per client
        self._in_use_lines: RefusalLines[str] = RefusalLines()  # 0x91 refusals told per client

    def publish(self, client: Client, session: Session, packet: Publish) -> None:
        # One comparison for two rare cases, as cheap as the test for an empty topic alone:
        # "" and every topic that begins with "$" (or a character before it) sort before "%".
        if packet.topic < "%" and self._refused_topic(client, session, packet):
            return
        qos, packet_id = packet.qos, packet.packet_id
        if packet_id in session.awaiting_release and self._in_use(client, session, packet):
            return
        # A QoS 1 PUBLISH whose packet id a QoS 2 PUBLISH read before it and not yet held
        # takes (a persistent session's waits for the intake, or any behind disk work) is
        # refused as if that were held: the id was in use when the client sent it, whatever
        # becomes of the QoS 2 one. Its PUBACK 0x91 comes in its turn, after that one's PUBREC.
        entering = session.entering_release
        if (
            entering
            and qos == 1
            and packet_id in entering
            and self._refuse_in_use(client, session, packet)
        ):
            return
        if self._settings.authorizer is not None and not self._may_publish(
            session.username, session.client_id, packet.topic
        ):  # the call only when there is someone to ask: this runs once per message
            self._refuse_publish(client, session, packet)
            return
        # `_needs_disk`, inline: its call cost about 300 instructions a message.
        disk = (
            packet.retain
            or (qos == 2 and session.persistent)
            or self._durable_routes.wanted(packet.topic)
        )
        if client.tail is not None or client.jobs or disk:  # disk_work_ahead, inline: per message
            self._publish_later(client, session, packet, disk)
        else:
            self._publish_now(client, session, packet)

    def _in_use(self, client: Client, session: Session, packet: Publish) -> bool:
        """Whether a PUBLISH whose packet id a QoS 2 message awaiting its PUBREL holds is
        answered here. At QoS 2 it is that message's repeat: PUBREC again, never routed
        twice. At QoS 1 the client reused an id it may not reuse before its PUBCOMP
        (MQTT-2.2.1-3), its session state out of step with ours: v5 is told so, PUBACK 0x91
        Packet Identifier in use, and the message is not taken (taken, a client that lost
        track of its QoS 2 message would not learn of it until its PUBREL went astray); 3.1.1
        cannot refuse a PUBLISH, and it goes on as any QoS 1 one. The QoS 2 message waits
        for its PUBREL either way (mosquitto forgets it)."""
        packet_id = packet.packet_id
        assert packet_id is not None
        if packet.qos == 2:
            self._answer(client, Pubrec(packet_id))
            return True
        return self._refuse_in_use(client, session, packet)

    def _refuse_in_use(self, client: Client, session: Session, packet: Publish) -> bool:
        """Whether a QoS 1 PUBLISH reusing the packet id of a QoS 2 one (held, `_in_use`, or
        read and not yet held, `publish`) is refused: PUBACK 0x91 Packet Identifier in use,
        in its turn (`_answer`), to a v5 client; 3.1.1 cannot refuse one, and it goes on."""
        if client.link.connection.version is not ProtocolVersion.V5:
            return False
        packet_id = packet.packet_id
        assert packet_id is not None
        # A client stuck reusing an id would write a line a PUBLISH: one a minute at most.
        passed_over = self._in_use_lines.refused(session.client_id, now=self._clock.now())
        if passed_over is not None:
            log.info(
                "client %s: a QoS 1 PUBLISH to %s reuses packet id %d, which a QoS 2 message "
                "awaiting its PUBREL holds: refused (0x91)%s",
                session.client_id,
                packet.topic,
                packet_id,
                passed_over_said(passed_over),
            )
        why = EMPTY
        if client.link.connection.problems:  # §3.1.2.11.7: else no Reason String
            why = Properties.build(
                reason_string=f"packet id {packet_id} is a QoS 2 message's that awaits its PUBREL"
            )
        self._answer(client, Puback(packet_id, _R.PACKET_IDENTIFIER_IN_USE, why))
        return True

    def _answer(self, client: Client, ack: Puback | Pubrec) -> None:
        """Send the answer to a PUBLISH just read that needs no disk work (a refusal, a QoS 2
        repeat's PUBREC): at once, or in its turn when disk work is ahead, behind the answers
        of the PUBLISHes read before it, which wait for it (MQTT-4.6.0-2, -3: PUBACKs in the
        order of their QoS 1 PUBLISHes, PUBRECs in that of their QoS 2 ones). For a PUBLISH
        just read only: a job's answer, already in its turn, sends its own."""
        if disk_work_ahead(client):  # a refusal, a repeat: not the path of every message
            client.jobs.append(Job(None, lambda _: self._out.send(client, ack)))
        else:
            self._out.send(client, ack)

    def _refused_topic(self, client: Client, session: Session, packet: Publish) -> bool:
        """Whether a PUBLISH to a topic that sorts before "%" is refused: one without a topic
        closes the connection; one to a `$SYS` topic, whose values are this server's own
        (sys_topics.py), is refused as an ACL refuses it, unless the ACL has a rule that lets
        the client publish there (no ACL: always refused). Logged once per connection."""
        topic = packet.topic
        if not topic:
            raise ProtocolError("PUBLISH without a topic name (MQTT 5.0 §3.3.2.1)")
        if not about_sys(topic):
            return False
        if self._may_publish(session.username, session.client_id, topic):
            return False
        if not client.told_sys:
            client.told_sys = True
            log.log(
                log_level(client),
                "client %s may not publish to %s: $SYS topics are the server's own (an ACL "
                "rule can allow it); further refusals on this connection are not logged",
                session.client_id,
                topic,
            )
        self._refuse_publish(client, session, packet, logged=True)
        return True

    def _publish_now(self, client: Client, session: Session, packet: Publish) -> None:
        qos = packet.qos
        if qos == 2:
            self._hold(client, session, packet)
            return
        self._delivery.route_memory(session.client_id, packet)
        if qos == 1:
            assert packet.packet_id is not None
            self._out.acknowledge(client, Puback, packet.packet_id)

    def _publish_in_turn(self, client: Client, session: Session, packet: Publish) -> None:
        """`_publish_now`, for a PUBLISH that waited for the disk work ahead of it."""
        if packet.qos == 2:
            assert packet.packet_id is not None
            session.entered_release(packet.packet_id)
        self._publish_now(client, session, packet)

    def _hold(
        self, client: Client, session: Session, packet: Publish, message_id: str | None = None
    ) -> None:
        """Hold a QoS 2 PUBLISH in memory until its PUBREL, and answer PUBREC; `message_id`:
        a retained one's, made in its PUBLISH's turn (`_hold_retained`). The exactly-once
        caps per producer bound what one client holds here too, as they bound what it has
        waiting in working/ (a 3.1.1 client has no Receive Maximum, and would otherwise hold
        up to 65,535), and the caps on all producers together what all clients hold here
        (counted apart from working/'s, as the caps per producer are): over any, PUBREC 0x97
        (3.1.1: the close). And `check_message_size`, as the intake weighs one (its payload):
        a message the intake refuses to a persistent publisher is not taken from a clean
        one. Five comparisons a message. A client trusted_sources does not list is refused
        as the intake refuses it: PUBREC 0x87 (3.1.1: the close)."""
        packet_id = packet.packet_id
        assert packet_id is not None
        client_id = session.client_id
        try:
            if self._trusted is not None:  # None: anyone, and no source to work out
                source = exactly_once_source(client_id)
                check_trusted(self._trusted, source, exactly_once_identities(client_id))
            check_message_size(len(packet.payload), self._size_limits)
        except MessageTooLarge as too_large:
            refusal = MessageTooLarge(f"client {client_id}: a QoS 2 message of {too_large}")
            self._send_error(client, session, Pubrec(packet_id), refusal)
            return
        except UntrustedSource as untrusted:
            self._send_error(client, session, Pubrec(packet_id), untrusted)
            return
        size = held_size(packet)
        totals = self.held_totals
        if (
            len(session.awaiting_release) >= self._held_limit
            or session.held_bytes + size > self._held_bytes_limit
            or totals.count >= self._held_total_limit
            or totals.held_bytes + size > self._held_total_bytes_limit
        ):
            self._refuse_holding(client, session, packet, size)
            return
        # When it came is kept for an expiry alone (`_received`): without properties (every
        # 3.1.1 PUBLISH) there is none, and no call.
        received = self._received(packet) if packet.properties.mask else 0.0
        session.hold_for_release(packet_id, packet, received=received, message_id=message_id)
        self._out.acknowledge(client, Pubrec, packet_id)

    def _refuse_holding(self, client: Client, session: Session, packet: Publish, size: int) -> None:
        """PUBREC 0x97 (3.1.1: the close) for a QoS 2 PUBLISH that holding until its PUBREL
        would take past the exactly-once caps, per producer or all together (`_hold`, which
        weighed it: `size`, its `held_size`, topic and properties with the payload)."""
        assert packet.packet_id is not None
        if len(session.awaiting_release) >= self._held_limit:
            over = f"max_pending_per_source ({self._held_limit})"
        elif session.held_bytes + size > self._held_bytes_limit:
            over = f"max_bytes_per_source ({self._held_bytes_limit})"
        elif self.held_totals.count >= self._held_total_limit:
            over = f"max_pending_total ({self._held_total_limit}), all clients together"
        else:
            over = f"max_bytes_total ({self._held_total_bytes_limit}), all clients together"
        refusal = ResourceConstraint(
            f"client {session.client_id}: a QoS 2 message held until its PUBREL would pass "
            f"{over}; try again later"
        )
        self._send_error(client, session, Pubrec(packet.packet_id), refusal)

    def _publish_later(self, client: Client, session: Session, packet: Publish, disk: bool) -> None:
        client_id = session.client_id
        packet_id = packet.packet_id
        if packet.qos == 2:
            assert packet_id is not None
            session.enter_release(packet_id)  # its id in use before it is held (`publish`)
        if not disk:
            client.jobs.append(Job(None, lambda _: self._publish_in_turn(client, session, packet)))
            return
        if packet.qos == 2 and (not packet.retain or session.persistent):
            # Into the exactly-once intake, a persistent publisher's retained one too (its
            # retain flag kept there, the retained store replaced at its PUBREL): what got
            # PUBREC survives a restart, a repeat after one is answered, never routed again,
            # and it goes on at its PUBREL in its turn among its client's others.
            assert packet_id is not None

            def stored(result: object) -> None:
                session.entered_release(packet_id)
                if isinstance(result, BoxMQError):
                    self._send_error(client, session, Pubrec(packet_id), result)
                    return
                if result is False:
                    # A repeat of one working/ keeps since before a restart: the PUBREL sends
                    # that one on, its interval counted from its first PUBLISH (`released`).
                    session.hold_for_release(packet_id, None, stored=True)
                else:
                    received = self._received(packet)
                    session.hold_for_release(packet_id, packet, stored=True, received=received)
                self._out.acknowledge(client, Pubrec, packet_id)

            client.jobs.append(
                Job(
                    lambda: self._assure(client_id, packet),
                    stored,
                    None,
                    (self._assure_many, (client_id, packet)),
                )
            )
            return
        if packet.qos == 2:
            # A non-persistent session's retained QoS 2 is written at PUBREL, not kept on
            # disk until then: its session, and so its PUBREL, does not outlive a restart.
            # Its id is made now, in its turn among its client's disk work, as the intake's
            # are for the QoS 2 PUBLISHes around it: a subscription orders by id, and one
            # made at PUBREL would put it behind those sent after it (MQTT-4.6.0-5).
            client.jobs.append(
                Job(
                    partial(self._retained_id, packet),
                    partial(self._hold_retained, client, session, packet),
                )
            )
            return

        def written(result: object) -> None:
            self._written_in_order(order)
            if isinstance(result, BoxMQError) and packet_id is not None:
                self._not_routed(packet, order)
                self._send_error(client, session, Puback(packet_id), result)
                return
            # QoS 0 whose copies the disk refused: its sender is told nothing and sends it
            # never again, so it goes to the subscribers served from memory all the same, as
            # a Will does (dropped for them too, a full disk stopped every QoS 0 feed to a
            # topic that one persistent session or share group also subscribed to).
            self._delivery.route_memory(client_id, packet, _written(order, result))
            if packet_id is not None:
                self._out.acknowledge(client, Puback, packet_id)

        # A retained message is written alone: publish_many has no retained store to keep it.
        batched = None if packet.retain else publication_of(client_id, packet)
        order = self._order_of(packet)
        work = partial(self.write, client_id, packet, order)
        client.jobs.append(Job(work, written, batched, answered=packet_id is not None))

    def _retained_id(self, packet: Publish) -> MessageId:
        """The id of a non-persistent session's retained QoS 2 PUBLISH, written at its PUBREL;
        MetadataTooLong if its topic leaves no room in a stored message's name, found now,
        before its PUBREC: at its PUBREL it was too late to tell its publisher, who had been
        told it was received, and it was kept nowhere on disk (and PUBCOMP said success)."""
        self._box.topics.check_room(packet.topic, expires_in=stored_expiry(packet), retain=True)
        return self._box.topics.new_id()

    def _hold_retained(
        self, client: Client, session: Session, packet: Publish, message_id: object
    ) -> None:
        """A retained QoS 2 PUBLISH of a non-persistent session, held for its PUBREL with the
        id made in its turn (`message_id`): PUBREC; or PUBREC with the reason it cannot be
        stored (3.1.1: acknowledged and dropped, `_send_error`)."""
        assert packet.packet_id is not None
        session.entered_release(packet.packet_id)
        if isinstance(message_id, BoxMQError):
            self._send_error(client, session, Pubrec(packet.packet_id), message_id)
            return
        assert isinstance(message_id, str)
        self._hold(client, session, packet, message_id)

    def _send_error(
        self, client: Client, session: Session, ack: Puback | Pubrec, error: BoxMQError
    ) -> None:
        """A negative PUBACK/PUBREC (MQTT 5.0 §3.4.2.1, §3.5.2.1). 3.1.1 has none, and a
        server must not acknowledge what it did not store: the connection closes, and the
        client sends the message again once it reconnects (3.1.1 §4.4). Unless it can never
        be stored (its topic too long for a stored message's name): a server that will not
        take a PUBLISH may acknowledge it instead of closing (3.1.1 MQTT-3.3.5-2), and a close made
        its client send it again on every reconnect, forever. It is acknowledged and
        dropped, as a PUBLISH the ACL refuses is (`_refuse_publish`)."""
        error = _in_clients_words(error, session.client_id)
        v5 = client.link.connection.version is ProtocolVersion.V5
        dropped = not v5 and isinstance(error, MetadataTooLong)
        stored_failed = isinstance(error, StoreFailed)  # those are logged once per batch
        what = (
            "PUBLISH acknowledged and dropped (MQTT 3.1.1 cannot refuse one)"
            if dropped
            else "PUBLISH refused"
        )
        if isinstance(ack, Pubrec) and isinstance(error, _MEMORY_ATTACKS):
            self._tell_refused(session.client_id, error, v5)
        elif not stored_failed and client.told_not_stored:
            log.debug("%s: %s", what, error)
        elif not stored_failed:
            client.told_not_stored = True
            log.log(
                log_level(client, logging.WARNING),  # a reconnect loop's: DEBUG
                "%s: %s; further such refusals on this connection are logged at debug level",
                what,
                error,
            )
        if v5:
            # §3.1.2.11.7: no Reason String for a client that asked for no problem information
            connection = client.link.connection
            why = Properties.build(reason_string=str(error)) if connection.problems else EMPTY
            kind = PacketType.PUBREC if isinstance(ack, Pubrec) else PacketType.PUBACK
            self._out.send(client, type(ack)(ack.packet_id, reason_in(kind, error), why))
        elif dropped:
            self._out.send(client, self._dropped(session, ack))
        else:
            self._kick(client, _R.UNSPECIFIED_ERROR, f"a PUBLISH was not stored: {error}")

    def _tell_refused(self, client_id: str, error: BoxMQError, v5: bool) -> None:
        """A QoS 2 PUBLISH refused by the exactly-once limits or trust (the QoS document's
        memory attacks) is logged naming its client, which an operator would otherwise not
        find: its first at once, then at most one line a minute per client, across its
        connections, that counts those passed over (core/refusal_lines.py, as XMPP's)."""
        passed_over = self._refusal_lines.refused(client_id, now=self._clock.now())
        if passed_over is None:
            return
        reason = reason_in(PacketType.PUBREC, error)
        told = (
            f"PUBREC {reason:#04x} {reason.name.lower().replace('_', ' ')}"
            if v5
            else "connection closed, MQTT 3.1.1 has no refusal"
        )
        log.warning(
            "client %s: a QoS 2 message refused (%s): %s%s",
            client_id,
            told,
            error,
            passed_over_said(passed_over),
        )

    def _refuse_publish(
        self, client: Client, session: Session, packet: Publish, *, logged: bool = False
    ) -> None:
        """MQTT 5.0 §3.3.4: PUBACK/PUBREC 0x87; 3.1.1 has no way to say no, so it is
        acknowledged and dropped (as mosquitto does). `logged`: the caller said it."""
        if not logged and client.told_publish:
            log.debug("client %s may not publish to %s", session.client_id, packet.topic)
        elif not logged:
            client.told_publish = True
            log.log(
                log_level(client),
                "client %s may not publish to %s; further refusals of its PUBLISHes on this "
                "connection are logged at debug level",
                session.client_id,
                packet.topic,
            )
        packet_id = packet.packet_id
        if packet_id is None:
            return
        ack = Puback if packet.qos == 1 else Pubrec
        if client.link.connection.version is ProtocolVersion.V5:
            self._answer(client, ack(packet_id, _R.NOT_AUTHORIZED))
        else:
            self._answer(client, self._dropped(session, ack(packet_id)))

    def _dropped(self, session: Session, ack: Puback | Pubrec) -> Puback | Pubrec:
        """3.1.1's answer to a PUBLISH it will not take: success, as if it were stored; a
        QoS 2 one's PUBREL then gets its PUBCOMP, and nothing goes on (held at once: its
        repeat is answered as a repeat, though its PUBREC may wait its turn)."""
        if isinstance(ack, Pubrec):
            session.hold_for_release(ack.packet_id, None, refused=True)
        return ack

    def _received(self, packet: Publish) -> float:
        """When a QoS 2 PUBLISH came, kept until its PUBREL if it has an expiry (else 0)."""
        properties = packet.properties
        # Most have no properties (every 3.1.1 one): then no accessor is called.
        return self._clock.now() if properties.mask and properties.message_expiry_interval else 0.0

    def _unexpired(self, client_id: str, held: Release) -> Publish | None:
        """A held QoS 2 PUBLISH as it goes on at PUBREL: the time it waited for the PUBREL
        counts against its Message Expiry Interval (MQTT-3.3.2-6), and once that ran out it
        goes nowhere (MQTT-3.3.2-5; what the intake stored expires on disk by itself)."""
        publish = held.publish
        if publish is None or not held.received:
            return publish
        interval = publish.properties.message_expiry_interval or 0
        left = math.ceil(interval - (self._clock.now() - held.received))
        if left <= 0:
            log.info(
                "client %s: QoS 2 message to %s expired before its PUBREL", client_id, publish.topic
            )
            return None
        return publish if left >= interval else with_expiry(publish, left)

    def released(self, client: Client, session: Session, packet_id: int) -> None:
        """PUBREL: the QoS 2 message goes on to its subscribers, then PUBCOMP."""
        held = session.release(packet_id)
        client_id = session.client_id
        if held is not None and held.refused:
            self._out.send(client, Pubcomp(packet_id))
            return
        if held is None and not session.persistent:
            v5 = client.link.connection.version is ProtocolVersion.V5
            reason = _R.PACKET_IDENTIFIER_NOT_FOUND if v5 else _R.SUCCESS
            self._out.send(client, Pubcomp(packet_id, reason))
            return
        if held is None:
            publish = None
        elif held.received:  # it has an expiry, which its wait for PUBREL counts against
            publish = self._unexpired(client_id, held)
        else:  # most: as it came, without a call
            publish = held.publish
        on_disk = held is None or held.stored
        if (
            not on_disk
            and publish is not None
            and not publish.retain
            and client.tail is None
            and not client.jobs
        ):
            self._delivery.route_memory(client_id, publish)
            self._out.acknowledge(client, Pubcomp, packet_id)
            return
        self._released_by_disk(client, client_id, packet_id, held, publish, on_disk=on_disk)

    def _released_by_disk(
        self,
        client: Client,
        client_id: str,
        packet_id: int,
        held: Release | None,
        publish: Publish | None,
        *,
        on_disk: bool,
    ) -> None:
        """`released`, for a message stored (or to store), or behind its client's disk work:
        answered once that work is done. A method of its own: its closures in `released` made
        every call build a cell for each variable they read, the fast path's included (about
        2,500 instructions a QoS 2 message)."""
        # Written now only if retained: one not stored at its PUBLISH goes to the memory
        # subscribers alone, as on the fast path of `released`. Written for a durable subscription
        # made since, it got an id made now, later than those of the QoS 2 messages its
        # client sent after it, and came after them (MQTT-4.6.0-5).
        write = publish is not None and not on_disk and publish.retain
        order = None if publish is None else self._order_of(publish)  # received at PUBREL
        # After a restart the server holds nothing of the message in memory (or only the
        # repeat of its PUBLISH): the subscribers in memory get it as working/ keeps it, read
        # before it is delivered (`work`).
        from_disk = on_disk and (held is None or held.publish is None)
        kept: list[Publish] = []
        # Its place among retained messages, should working/ say it is one: taken here, on
        # the loop, as the PUBREL is received (retained_order.py), and in flight for a topic
        # known once it is read: a SUBSCRIBE sent it as retained meanwhile is not sent it live
        # too (retained_window.py).
        number = 0
        if from_disk:
            number = self._retained_order.take()
            self._delivery.retained_window.taken(None, number)

        def work() -> object:
            if from_disk:
                return self._deliver_kept(client_id, packet_id, kept, number)
            if on_disk and order is not None:
                assert publish is not None
                return self._deliver_retained(client_id, packet_id, publish.topic, order)
            if on_disk:
                return self._box.deliver(
                    exactly_once_source(client_id), str(packet_id), remember=False, must_exist=True
                )
            if write:
                assert publish is not None
                assert held is not None
                return self.write(client_id, publish, order, held.message_id)
            return True

        def done(result: object) -> None:
            self._written_in_order(order)
            if from_disk:  # its turn, if it had one, is over; so is it if its work never ran
                self._written_in_order(number)
            # Read from disk and delivered now (True; a retained one: its id): routed below,
            # with its number if retained; else that number goes.
            sent_kept = bool(kept) and (result is True or isinstance(result, str))
            if from_disk and not (sent_kept and kept[0].retain):
                self._delivery.retained_window.dropped(None, number)
            reason = _R.SUCCESS
            if isinstance(result, ItemNotFound):  # never stored, expired, or released before
                log.info("client %s: PUBREL %d names no stored message", client_id, packet_id)
                v5 = client.link.connection.version is ProtocolVersion.V5
                reason = _R.PACKET_IDENTIFIER_NOT_FOUND if v5 else _R.SUCCESS
            elif isinstance(result, StoreFailed):
                # Still in working/. PUBCOMP has no failure code (MQTT 5.0 §3.7.2.1): close,
                # so that the client sends PUBREL again when it reconnects (§4.4).
                if publish is not None:
                    self._not_routed(publish, order)
                self._kick(client, reason_for(result), f"PUBREL {packet_id} failed: {result}")
                return
            elif isinstance(result, BoxMQError):
                log.warning("client %s: PUBREL %d failed: %s", client_id, packet_id, result)
            if publish is not None:
                self._delivery.route_memory(client_id, publish, _written(order, result))
            elif sent_kept:
                [read] = kept
                self._delivery.route_memory(
                    client_id, read, _written(number if read.retain else None, result)
                )
            self._out.send(client, Pubcomp(packet_id, reason))

        if on_disk and not from_disk and order is None:
            # With the neighbours' PUBRELs: their markers and moves share flushes.
            key = (exactly_once_source(client_id), str(packet_id))
            client.jobs.append(Job(work, done, None, (self._deliver_many, key)))
        else:  # alone: after a restart (it reads the message first), retained (in its
            client.jobs.append(Job(work, done))  # topic's turn), or not stored at all

    def _may_publish(self, username: str | None, client_id: str, topic: str) -> bool:
        """Whether the ACL lets the client publish to `topic`; with none, to any topic but
        a `$SYS` one (this server's own, sys_topics.py), which only an ACL rule allows."""
        authorizer = self._settings.authorizer
        if authorizer is None:
            return not about_sys(topic)
        return authorizer.can_publish(username, client_id, topic)

    def _needs_disk(self, packet: Publish, publisher: Session | None) -> bool:
        """On the loop thread only: whether `packet` must be written before it is answered:
        retained, QoS 2 from a persistent `publisher` (None: taken as not persistent), or
        wanted by a durable subscription."""
        if packet.retain or (packet.qos == 2 and publisher is not None and publisher.persistent):
            return True
        return self._durable_routes.wanted(packet.topic)

    def publish_will(
        self,
        client_id: str,
        username: str | None,
        will: Will,
        behind: Client | None = None,
        written: WillWritten | None = None,
    ) -> None:
        """Publish a client's Will. `behind`: the connection whose end sends it, if known.
        While that one's disk work still runs or waits (a retained message is routed once
        written), the Will takes its turn after it: a Will goes out after everything its client
        published (MQTT 5.0 §3.1.2.5, §4.6), or subscribers would take "online" for its last
        word. Without such work, it goes out at once. `written` runs on the loop once the
        Will's disk work ended (at once without any), with its failure if the disk refused
        it: a session record drops the Will then, not before, or a SIGKILL between the two
        lost it for the durable subscribers; and not at all if the disk refused it."""
        if not self._may_publish(username, client_id, will.topic):
            # As for a refused PUBLISH: the log says no, never that it went out; at debug
            # level for a connection of a reconnect loop, whose lines are counted.
            level = logging.INFO if behind is None else log_level(behind)
            log.log(level, "client %s may not publish its will to %s", client_id, will.topic)
            if written is not None:
                written(None)
            return
        log.info("client %s: sending its will to %s", client_id, will.topic)
        publish = Publish(
            will.topic,
            will.payload,
            will.qos,
            will.retain,
            False,
            None,
            will.properties.without(PropertyId.WILL_DELAY_INTERVAL),
        )
        self._durable_routes.recheck()  # a timer, not a read: look at the disk again
        # Numbered now, on the loop: after every retained message its client sent before.
        order = self._order_of(publish)
        write = None
        if self._needs_disk(publish, None):
            write = partial(self.write, client_id, publish, order)
        written = written or _nothing
        turn = partial(self._will_turn, client_id, publish, order, written)
        if behind is not None and disk_work_ahead(behind):
            # Begun by whoever begins the jobs before it (batches.py): the batch running now,
            # at its end, or the read or the gathering wait that holds them.
            behind.jobs.append(Job(write, turn, logs=True))  # _will_turn says a failure
            return
        if write is not None and order is not None:
            # Retained: routed once written, as a client's retained PUBLISH is. Routed first,
            # a subscription made before the write ended was sent the topic's old retained
            # message ("online") and never the Will.
            then = partial(self._will_stored, turn)
            run_all(self._box.topics, [Job(write, turn)], self._pool, partial(_first, then))
            return
        if write is not None:
            loop = asyncio.get_running_loop()
            done = self._pool.submit(write)
            done.add_done_callback(partial(_tell_will_lost, client_id, will.topic))
            then = partial(self._will_stored, written)
            done.add_done_callback(lambda done: loop.call_soon_threadsafe(then, _failure(done)))
        else:
            written(None)
        # At once, whatever the disk does: a Will reaches whom it can (see _tell_will_lost).
        # Routed before its write, it reaches no subscription made after.
        self._delivery.route_memory(client_id, publish, None)

    def _will_stored(self, then: Callable[[_Result], None], result: _Result) -> None:
        """A Will's write outside a batch ended: `then` gets its result, and the connected
        sessions it reached take it now, as after a PUBLISH's batch, not at the timer's next
        tick (up to 0.25 s later); its in-memory subscribers' copies are written too."""
        then(result)
        self._stored()

    def _will_turn(
        self,
        client_id: str,
        publish: Publish,
        order: int | None,
        written: WillWritten,
        result: object,
    ) -> None:
        """A Will's turn in its client's disk work came, its write done if it had one: to the
        in-memory subscribers, whatever the disk did, as a Will sent at once does."""
        self._written_in_order(order)
        failure = result if isinstance(result, BaseException) else None
        if failure is not None:
            _log_will_lost(client_id, publish.topic, failure)
        written(failure)
        self._delivery.route_memory(client_id, publish, _written(order, result))

    # -- disk work (run by disk.run_all) ---------------------------------------------------------

    def _order_of(self, packet: Publish) -> int | None:
        """On the loop, as the server takes `packet` in: a retained one's place in the order
        of retained messages (retained_order.py), in flight until it is routed or its write
        failed (`_not_routed`): see retained_window.py."""
        if not packet.retain:
            return None
        order = self._retained_order.take()
        self._delivery.retained_window.taken(packet.topic, order)
        return order

    def _written_in_order(self, order: int | None) -> None:
        """On the loop, once the disk work of the message numbered `order` is over: no turn
        of it is to come (retained_order.py forgets what it kept for it)."""
        if order is not None:
            self._retained_order.release(order)

    def _not_routed(self, packet: Publish, order: int | None) -> None:
        """A retained message numbered `order` whose write failed: it will not be routed."""
        if order is not None:
            self._delivery.retained_window.dropped(packet.topic, order)

    def write(
        self,
        client_id: str,
        packet: Publish,
        order: int | None = None,
        message_id: str | None = None,
    ) -> MessageId:
        """Publish into the Box: retained store and every durable subscription it matches;
        returns the message's id (`message_id` if given, made earlier: Topics.new_id). A
        retained `packet` needs its `order`: one that came before the topic's retained
        message goes to the subscribers, as retained, and replaces nothing."""
        if not packet.retain:
            return self._write(client_id, packet, superseded=False, message_id=message_id)
        assert order is not None, "a retained message is numbered as it is received"
        with self._retained_order.turn(packet.topic, order) as newest:
            if not newest:
                log.info("retained message for %s superseded by a later one", packet.topic)
            return self._write(client_id, packet, superseded=not newest, message_id=message_id)

    def _write(
        self, client_id: str, packet: Publish, *, superseded: bool, message_id: str | None
    ) -> MessageId:
        expiry = stored_expiry(packet)

        def publish(properties: dict[str, str]) -> MessageId:
            return self._box.topics.publish(
                packet.topic,
                packet.payload,
                qos=packet.qos,
                retain=packet.retain,
                properties=properties,
                expires_in=expiry,
                source=consumer_name(client_id),
                superseded=superseded,
                message_id=None if message_id is None else MessageId(message_id),
                reserved=True,  # its bx_v5 or bx_v5h, and bx_rp: boxmq's own
                # Written only where a file names it (a copy's name, or the retained
                # message's name or header): a retained delete with no durable subscriber
                # left one nobody read, collected an hour later.
                side_file=side_file_of(packet, properties),
            )

        room = partial(self._box.topics.topic_room, expires_in=expiry, retain=packet.retain)
        return store_with_properties(packet, publish, room)

    def _deliver_kept(
        self, client_id: str, packet_id: int, kept: list[Publish], number: int
    ) -> object:
        """A PUBREL's delivery out of the intake when the server no longer holds its PUBLISH
        (it restarted since): the message as working/ keeps it is put in `kept` first, for
        the subscribers in memory, who got it at the PUBREL without a restart. A file that
        cannot be read leaves them without it; the durable subscriptions get it all the
        same. A retained one takes its topic's turn as `number` (`_deliver_retained`), and
        tells its id if delivered, for its routing (retained_window.py). `number` is released
        on the loop once this is done, as every write's (`_written_in_order`)."""
        source, msg_id = exactly_once_source(client_id), str(packet_id)
        try:
            found = self._box.intake.peek(source, msg_id)
        except OSError as error:
            log.warning("client %s: reading QoS 2 message %s: %s", client_id, msg_id, error)
            found = None
        # Made before the delivery, which may settle its properties' side file.
        publish = None
        if found is not None:
            publish = released_publish(*found, self._clock.now(), self._box.side_files)
        if publish is not None and publish.retain:
            delivered = self._deliver_retained(client_id, packet_id, publish.topic, number)
        else:
            delivered = self._box.deliver(source, msg_id, remember=False, must_exist=True)
        if publish is not None:
            kept.append(publish)
        return delivered

    def _deliver_retained(self, client_id: str, packet_id: int, topic: str, order: int) -> object:
        """A PUBREL's delivery of a retained message stored at its PUBLISH: its copies, and
        its topic's retained message replaced unless a later one is in place (`write`'s
        turn). Its id, for the routing (retained_window.py); False for a repeat."""
        source, msg_id = exactly_once_source(client_id), str(packet_id)
        intake = self._box.intake
        with self._retained_order.turn(topic, order) as newest:
            message_id = intake.message_id(source, msg_id)  # before the deliver forgets it
            [outcome] = intake.deliver_many(
                [(source, msg_id)], remember=False, must_exist=True, superseded=not newest
            )
            if isinstance(outcome, BaseException):
                raise outcome  # inside the turn: a failed one does not count as written
        return message_id if outcome is True and message_id is not None else outcome

    def _deliver_many(self, keys: list[tuple[str, str]]) -> list[object]:
        """PUBRELs of QoS 2 messages stored at their PUBLISH: out of the intake together."""
        return list(self._box.intake.deliver_many(keys, remember=False, must_exist=True))

    def _assure_many(self, items: list[tuple[str, Publish]]) -> list[object]:
        """`_assure` for several PUBLISHes, stored with one commit: each one's result. One
        whose properties do not fit in its name is stored alone by `_assure`, which finds
        them room (store_with_properties)."""
        results: list[object] = [None] * len(items)
        batch: list[int] = []
        messages: list[AssuredMessage] = []
        for index, (client_id, packet) in enumerate(items):
            # Its side file, if any, is written by the intake once its name fits: one that did
            # not fit left a file named by nothing until the hourly collection.
            properties = kept_properties(packet)
            batch.append(index)
            messages.append(_assured_message(client_id, packet, properties))
        outcomes = self._box.intake.assured_many(messages, reserved=True)  # bx_v5, bx_rp
        for index, outcome in zip(batch, outcomes, strict=True):
            results[index] = outcome
            if isinstance(outcome, MetadataTooLong):
                results[index] = _attempt(partial(self._assure, *items[index]))
        return results

    def _assure(self, client_id: str, packet: Publish) -> object:
        """Into the exactly-once intake alone, its properties given room where they do not
        fit in its name (store_with_properties)."""

        def assured(properties: dict[str, str]) -> bool:
            message = _assured_message(client_id, packet, properties)
            return self._box.intake.assured_one(message, reserved=True)

        expiry = stored_expiry(packet)
        room = partial(self._box.topics.topic_room, expires_in=expiry, retain=packet.retain)
        # The intake writes the side file once a name that names it fits (an earlier
        # try's, the topic leaving no room for its key, stayed named by nothing).
        return store_with_properties(packet, assured, room)


def _in_clients_words(error: BoxMQError, client_id: str) -> BoxMQError:
    """An exactly-once refusal naming its client as it knows itself, by its client id: the
    intake's own quoted its source, boxmq's internal `mqtt:` name for it (exactly_once_source)."""
    if isinstance(error, UntrustedSource):
        return NotAllowed(error.said(f"client {client_id}"))
    if isinstance(error, SourceOverLimit):
        return ResourceConstraint(error.said(f"client {client_id}"))
    return error


def _nothing(_: BaseException | None) -> None:
    """What runs once a Will no record holds is written."""


def _failure(done: Future[MessageId]) -> BaseException | None:
    """Why a Will's write (ended) failed; None if it did not. Cancelled: never written."""
    return CancelledError() if done.cancelled() else done.exception()


def _first(then: Callable[[object], None], results: list[object]) -> None:
    """`run_all`'s answer for one job: `then` gets its result."""
    then(results[0])


def _written(order: int | None, result: object) -> Written | None:
    """A retained message's place for its routing (None: not retained), with the id its write
    returned as `result` (anything else: a failure, or no write)."""
    if order is None:
        return None
    return Written(order, result if isinstance(result, str) else None)


def _assured_message(client_id: str, packet: Publish, properties: dict[str, str]) -> AssuredMessage:
    """A QoS 2 PUBLISH as the exactly-once intake takes it, its Message Expiry Interval
    counting from now (its copies carry what is left of it, MQTT 5.0 §3.3.2.3.3)."""
    expiry = stored_expiry(packet)
    given: Mapping[str, PropertyValue] = properties
    if packet.retain:  # kept in its name until its PUBREL, which replaces the retained one
        given = {**properties, PUBLISHED_RETAINED: True}
    return AssuredMessage(
        exactly_once_source(client_id),
        str(packet.packet_id),
        packet.payload,
        topic=packet.topic,
        properties=given,
        expires_in=expiry,
        # Written by the intake where its name holds the key; else, for a retained one whose
        # name holds none of its properties (a long topic), for the header of the retained
        # message its PUBREL makes.
        side_file=side_file_of(packet, properties),
        identities=exactly_once_identities(client_id),  # `mqtt:site/7` trusts "site/7"
    )


def _attempt(work: Callable[[], object]) -> object:
    """`work()`, or the error it raised that its job's answer tells (disk.py's way)."""
    try:
        return work()
    except (BoxMQError, OSError) as error:
        return error
