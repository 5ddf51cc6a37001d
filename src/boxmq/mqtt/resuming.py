"""A CONNECT's session (MQTT 5.0 §3.1.4): taken over from a connection of its client id,
resumed from memory, read back from the disk (a session this process does not know: boxmq
was restarted, or another server on this root held it), or new. The record on disk is read
once per CONNECT (`record_of`), for its owner (`belongs_to_another`) and then for resuming
it (`take`). The registries are the broker's, shared: `sessions` (client id -> session),
`links` (client id -> its connected client), `durable` (client id -> filter -> its dropbox);
`token` names this broker in the records. connect_answers.py answers the CONNECT."""

from __future__ import annotations

import logging

from boxmq.client.box import Box
from boxmq.client.subscriber import Subscriber
from boxmq.clock import Clock
from boxmq.core import parse_filter
from boxmq.errors import store_failure
from boxmq.mqtt.clients import Client, Kick, log_level
from boxmq.mqtt.delivery import Delivery
from boxmq.mqtt.lifetimes import Lifetimes, owned_on_disk
from boxmq.mqtt.reasons import ReasonCode
from boxmq.mqtt.session import HeldTotals, Session, SubscriptionOptions
from boxmq.mqtt.session_record import AwayAtStart, DeliveryOptions, SessionRecord, read_record
from boxmq.mqtt.settings import MqttSettings
from boxmq.mqtt.stored import consumer_name, exactly_once_source
from boxmq.mqtt.subscribing import Subscribing
from boxmq.mqtt.wills import Wills
from boxmq.store.process import process_alive

__all__ = ["Resuming"]

log = logging.getLogger("boxmq.mqtt")

_R = ReasonCode


class Resuming:
    """Finds, takes over, resumes or makes the session of a CONNECT."""

    def __init__(
        self,
        box: Box,
        settings: MqttSettings,
        clock: Clock,
        token: str,
        wills: Wills,
        lifetimes: Lifetimes,
        subscribing: Subscribing,
        delivery: Delivery,
        *,
        sessions: dict[str, Session],
        links: dict[str, Client],
        durable: dict[str, dict[str, Subscriber]],
        held_totals: HeldTotals,
        kick: Kick,
    ) -> None:
        self._box = box
        self._limits = settings.limits
        self._settings = settings
        self._clock = clock
        self._token = token
        self._wills = wills
        self._lifetimes = lifetimes
        self._subscribing = subscribing
        self._delivery = delivery
        self._sessions = sessions
        self._links = links
        self._durable = durable
        self._held_totals = held_totals
        self._kick = kick

    def record_of(self, client_id: str) -> SessionRecord | None:
        """The record on disk of a session this process does not hold (one it holds is
        newer): read once per CONNECT, for its owner and then for resuming it. A session
        held here whose client is away may have been resumed since by another broker on
        this root (DESIGN.md §7): if its record says so (`Lifetimes.stale_here`: not one
        this broker's refused writes left), the copy here is stale (what it was sent and
        has since acknowledged there would go out again), and is let go, to be resumed from
        the disk like any other."""
        session = self._sessions.get(client_id)
        if session is None:
            return read_record(self._box.root, client_id)
        if session.connected:
            return None
        record = read_record(self._box.root, client_id)
        if not self._lifetimes.stale_here(client_id, record):
            return None
        self._lifetimes.let_go(session)
        return record

    def belongs_to_another(
        self, client_id: str, username: str | None, record: SessionRecord | None
    ) -> bool:
        """Whether `client_id` names a session (connected, or persistent in memory or on disk,
        `record`) of a user other than `username`: a client must not take over, resume or
        end what another user's client holds (its messages, its subscriptions, its Will)."""
        session = self._sessions.get(client_id)
        if session is not None:
            return session.username != username
        return record is not None and record.username != username

    def take(
        self, client_id: str, clean: bool, expiry: int, record: SessionRecord | None
    ) -> tuple[bool, Session]:
        """Session takeover and resumption (MQTT 5.0 §3.1.4): (session present, session).
        `record`: the session's record on disk (`record_of`), for one not in memory."""
        old_client = self._links.get(client_id)
        if old_client is not None:
            level = log_level(old_client)  # DEBUG: a reconnect loop's
            log.log(level, "client %s: taken over by a new connection", client_id)
            # §3.1.2.5: the old connection closes without DISCONNECT, so its Will goes out
            # as at any such close (broker `closed`: written down in a persistent session's record
            # until its write ended), unless it has a delay that the new connection now
            # cancels below (its session lives on). A clean start ends the session, which
            # sends it early; a session with expiry 0 ends with the old connection, whatever
            # the new one asks: nothing resumes it, so nothing cancels its Will (§3.1.4).
            self._kick(old_client, _R.SESSION_TAKEN_OVER, "session taken over")
        if clean:  # §3.1.3.2.2: the old session ends now, so its delayed Will goes out
            now = self._clock.now()
            waited = self._wills.waiting(client_id)
            if (
                client_id not in self._sessions
                and record is not None
                and record.will_due is not None
                and record.will_due > now
            ):
                # Left waiting out its delay by another server on this root (whose timer
                # finds the record changed or gone, and lets it be): sent from the record.
                # One due already is that server's to send (sent at the close, if it had no
                # delay): sent here too, it could go out twice.
                self._wills.resume(AwayAtStart(record, record), now)
            try:
                self._wills.send_early(client_id)
            except OSError:
                # Its record unreadable (EIO): the CONNECT is refused (connect_answers), the
                # session not ended, its Will left to whoever timed it before.
                if not waited:
                    self._wills.forget_timer(client_id)
                raise
        self._wills.forget_timer(client_id)
        self._lifetimes.cancel_expiry(client_id)
        if not clean and self._lifetimes.finish_end(client_id, record):
            record = None  # its session ended here, the disk refusing part of its end
        session = self._sessions.get(client_id)
        if clean:
            if session is not None:
                self._lifetimes.end(session)
            # `record`, read once for this CONNECT: None for a session held here, whose
            # record `end` has just removed.
            self._lifetimes.forget_on_disk(client_id, record)
            session = None
        elif session is None:
            session = self._from_disk(client_id, expiry, record)
        elif session.taken_from is not None:
            self._take_back(session)
        if session is not None:
            return True, session
        session = self._new_session(client_id)
        self._sessions[client_id] = session
        return False, session

    def _take_back(self, session: Session) -> None:
        """A session resumed from memory that this broker took from the disk while its
        client's connection to another server was open (`Session.taken_from`): that server
        may have claimed messages for the session since, and left them locked to it when it
        let go (TakenElsewhere `disconnect`, `let_go`), for a resumption from the
        disk that a session held here never makes. They are taken back now, in their order
        among what the session has to send, as that resumption takes them
        (subscribing.attach); what this broker holds
        for the session is left as it is (sent again by `Delivery.resend`). One look in
        each subscription's processing/, for such sessions only; once that server is dead,
        nothing more can come from it, and the looks stop."""
        taken_from = session.taken_from
        assert taken_from is not None
        done = process_alive(taken_from) is False  # asked first: it claims nothing after
        self._subscribing.take_back(session)  # each dropbox logs what it took back
        if done:
            session.taken_from = None

    def _new_session(self, client_id: str) -> Session:
        limits = self._limits
        return Session(
            client_id,
            window=limits.max_inflight,
            queue_limit=limits.max_queued,
            queue_bytes=limits.max_queued_bytes,
            totals=self._held_totals,
        )

    def _from_disk(
        self, client_id: str, expiry: int, record: SessionRecord | None
    ) -> Session | None:
        """A persistent session this process does not know (boxmq was restarted): its
        durable subscriptions are on disk, their options read back from their records, and
        so are the QoS 2 messages it got PUBREC for and has not released yet, and the packet
        ids its own record says it was sent PUBREL for (outbox.expect_release). Resumed with
        an expiry of 0 too (MQTT 5.0 §3.1.2.4): it then ends with this connection, its
        subscriptions on disk with it, where a new session would leave them behind. Only the
        subscriptions its record names are its own (`owned_on_disk`): another door may have
        made one under a name that is its client id."""
        if record is None and not expiry:
            return None  # a clean session most likely: spare it the scan of every subscription
        found = owned_on_disk(self._box.topics, client_id, record)
        # Its QoS 2 messages are the topics' (never a queue's): their working/ alone is
        # listed, not each queue's too, on the loop at each such CONNECT.
        unreleased = self._box.intake.pending(exactly_once_source(client_id), queues=False)
        if not found and not unreleased and record is None:
            return None
        saved = {} if record is None else record.options
        session = self._new_session(client_id)
        session.expiry = expiry  # before attaching: persistent memberships are not process-bound
        if record is not None and record.holder not in (None, self._token):
            # Its client is connected there still (a server that died is not named any
            # more: `left_by_the_dead`), and may be sent messages there until it notices.
            session.taken_from = record.holder
        if record is not None:
            session.outbox.expect_release(record.releasing)
            # Before the subscriptions take back their locks: those messages go out first.
            for message_id, packet_id, queue in record.sent:
                if (queue, message_id) in session.sent_before:  # an older record's copy
                    session.sent_before_repeated.setdefault(message_id, []).append(packet_id)
                else:
                    session.sent_before[queue, message_id] = packet_id
            session.sent_qos2_before = frozenset(record.sent_qos2)
            session.outbox.reserve(packet_id for _, packet_id, _ in record.sent)
            # New ids go on where the process before left off: the client may still hold one
            # it used, in flight or not (its record written at a clean close names none).
            # A record without it (an older boxmq's): past every id it names.
            if record.next_packet_id is not None:
                session.outbox.start_at(record.next_packet_id)
            else:
                session.outbox.start_after(
                    (*record.releasing, *(packet_id for _, packet_id, _ in record.sent))
                )
        self._sessions[client_id] = session
        for text, subscription in found:
            if not self._may_keep(client_id, record, text):
                continue
            # A membership its record does not name was unsubscribed while it held messages
            # of the group: it is left once those are settled, and takes no new ones
            # (MQTT-3.10.4-2, -3), as before the restart.
            leaving = record is not None and text not in saved and parse_filter(text).shared
            delivery = saved.get(text, DeliveryOptions())
            # A share group's record holds the highest QoS any member was granted; the
            # session's record, this member's own (MQTT-3.8.4-8).
            granted = subscription.qos if delivery.qos is None else delivery.qos
            options = SubscriptionOptions(
                qos=min(subscription.qos, granted),
                durable=True,
                no_local=subscription.no_local,
                retain_as_published=delivery.retain_as_published,
                identifier=delivery.identifier,
            )
            (session.leaving if leaving else session.subscriptions)[text] = options
            self._subscribing.attach(session, text, options, found=True)
            if leaving:
                self._durable[client_id][text].pause(keep_claimed=True)  # it holds those
        if session.leaving:
            self._delivery.close_drained(session)  # those that hold nothing any more
        log.info(
            "client %s: session found on disk (%d subscription(s), %d QoS 2 awaiting PUBREL)",
            client_id,
            len(found),
            len(unreleased),
        )
        cap = self._limits.max_subscriptions
        if cap and session.held_count() > cap:  # a cap lowered since: kept, never dropped
            log.warning(
                "client %s: its session holds %d subscription(s), over [mqtt.limits] "
                "max_subscriptions = %d: it keeps them, and may subscribe to no new filter",
                client_id,
                session.held_count(),
                cap,
            )
        return session

    def _may_keep(self, client_id: str, record: SessionRecord | None, text: str) -> bool:
        """Whether a subscription found on disk is still allowed by the ACL (which may have
        changed since the restart): one it refuses now is removed, as a new SUBSCRIBE to it
        would be refused."""
        authorizer = self._settings.authorizer
        username = None if record is None else record.username
        if authorizer is None or authorizer.can_subscribe(username, client_id, text):
            return True
        log.warning(
            "client %s: its subscription to %s is no longer allowed by the ACL: removed",
            client_id,
            text,
        )
        try:
            self._box.unsubscribe(text, consumer_name(client_id))
        except OSError as error:  # still on disk: checked again when the session resumes
            log.error("client %s: removing %s failed: %s", client_id, text, store_failure(error))
        return False
