"""The pubsub service: parsed requests in, stanzas out, boxmq queues underneath.

Node mapping (docs/xmpp.md): a node id is a boxmq queue's name if such a queue exists, and
otherwise the topic of that name. On a queue node create makes the queue's folders, delete
removes them, publish is a put, and a subscription is a consumer whose `max_in_flight` is
`pubsub#queue_requests`; on a topic node publish is a publish, and the XMPP subscribers are the
members of one share group. Item ids are boxmq message ids.

Synchronous and free of sockets and asyncio: the component (component.py) feeds it elements
and sends what it returns through `send`; tests do the same with a list. Deliveries come in
through `poll()` (the component calls it after each batch of stanzas and on its timer).

This module keeps the dispatch and the state (subscriptions, the queues known here, their
locks and timers); each other concept is a module of its own that gets what it needs passed
in: answers.py (every answer within the stanza size limit), publishing.py, qos_in.py
(urn:xmpp:qos received), nodes.py (create, delete, configure), disco.py, listings.py,
subscribing.py (a subscribe's fields), bounces.py and delivery_failures.py.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Final
from xml.etree.ElementTree import Element

from boxmq.client.box import Box
from boxmq.client.consumer import Consumer
from boxmq.client.message import Message
from boxmq.client.queue import Queue
from boxmq.client.receiver import Receiver
from boxmq.clock import periodic_due
from boxmq.core.refusal_lines import RefusalLines, passed_over_said
from boxmq.core.topics import SHARE_PREFIX, about_sys, sys_unserved
from boxmq.errors import (
    BoxMQError,
    Closed,
    Conflict,
    InvalidArgument,
    InvalidName,
    ItemNotFound,
    LockError,
    MetadataTooLong,
    QueueNotFound,
    TargetMissing,
    store_failure,
)
from boxmq.store.commit import FsyncPolicy
from boxmq.store.layout import State, broken_target, no_dropbox, queue_path
from boxmq.store.names import check_consumer_name
from boxmq.xmpp import ns, render
from boxmq.xmpp.answers import Answers
from boxmq.xmpp.bounces import error_of, says_gone
from boxmq.xmpp.conditions import (
    BROKEN,
    FORBIDDEN,
    INTERNAL,
    INVALID_JID,
    STOPPING,
    Condition,
    condition_for,
)
from boxmq.xmpp.delivery_failures import not_delivered, not_taken, unsendable
from boxmq.xmpp.disco import FEATURES, Disco
from boxmq.xmpp.errors import StanzaError
from boxmq.xmpp.jids import normal
from boxmq.xmpp.listings import Listings
from boxmq.xmpp.nodes import NodeAdmin, recorded_owner
from boxmq.xmpp.payloads import NOT_XML, payload_of
from boxmq.xmpp.publishing import Publishing
from boxmq.xmpp.qos_in import QosReceiver, node_of, stamped
from boxmq.xmpp.qos_out import Level, ReliableSender, msg_id_of
from boxmq.xmpp.records import SubscriberRecords
from boxmq.xmpp.requests import (
    Configure,
    Create,
    Delete,
    DiscoInfo,
    DiscoItems,
    Iq,
    Publish,
    QosAcknowledged,
    QosAssured,
    QosDeliver,
    Request,
    Retract,
    RetrieveAffiliations,
    RetrieveSubscriptions,
    Subscribe,
    Unacknowledged,
    Unlock,
    Unsubscribe,
    bare,
    parse_iq,
    parse_message,
    parse_request,
)
from boxmq.xmpp.settings import ENVELOPE, STANZA_SIZE_LIMIT, stanza_size_refusal
from boxmq.xmpp.subscribe_options import QOS_LEVEL, QUEUE_REQUESTS
from boxmq.xmpp.subscribing import (
    names_requester,
    qos_level,
    queue_requests_of,
    subscription_xml,
)
from boxmq.xmpp.subscriptions import (
    SHARE_GROUP,
    Subscription,
    Subscriptions,
    consumer_name,
)

__all__ = ["FEATURES", "QueueService"]  # FEATURES: disco.py's, still importable from here

log = logging.getLogger("boxmq.xmpp")

SILENT_TIMEOUTS: Final = 3  # lock timeouts in a row, nothing answered: the subscriber is gone
# Seconds between looks for queues another process deleted (`boxmq delete`), as sweeps go
DELETED_CHECK: Final = 1.0
_NOT_SUBSCRIBED: Final = Condition("cancel", "unexpected-request", "not-subscribed")
# Why a stanza was refused, as its sender is told: the condition, the text, and the error's
# own child in place of the echoed request (a StanzaError's payload), if it has one.
_Refused = tuple[Condition, str, str | None]

_INVALID_SUBID: Final = Condition("modify", "not-acceptable", "invalid-subid")

Send = Callable[[str], None]


class QueueService:
    def __init__(
        self,
        box: Box,
        *,
        domain: str,
        send: Send,
        lock_timeout: float = 30.0,
        stanza_size_limit: int = STANZA_SIZE_LIMIT,
        now: Callable[[], float] = time.time,
    ) -> None:
        if lock_timeout <= 0:
            raise InvalidArgument("the lock timeout must be a positive number of seconds")
        if (refused := stanza_size_refusal(stanza_size_limit)) is not None:
            raise InvalidArgument(refused)
        self.domain = domain
        self._box = box
        self._send = send
        self._lock_timeout = lock_timeout
        self._subscriptions = Subscriptions()
        # On disk while they last, for the next start after a crash (records.py): flushed
        # as the root's other records are, under fsync=always only.
        self._records = SubscriberRecords(box.root, domain, flush=box.fsync is FsyncPolicy.ALWAYS)
        self._queues: dict[str, Queue] = {}
        self._ids = (f"bx{n}" for n in itertools.count(1))
        self._now = now
        self._reliable = ReliableSender(sender=domain, send=send)
        self._sys_lines: RefusalLines[str] = RefusalLines()  # $SYS subscribes, by bare JID
        # A bigger stanza from the component ends its stream (Prosody: not-well-formed). An
        # item leaves room for its event's envelope. What a client sends within its own limit
        # (256 KiB) may not fit once stored as XML: publishing.py's storable.
        self._stanza_size_limit = stanza_size_limit
        self._max_item = stanza_size_limit - ENVELOPE  # bytes of <item>...</item>
        self._surely_fits = self._max_item // 4  # characters: 4 bytes each at most in UTF-8
        # Every answer to an iq or a message, within the stanza size limit (answers.py)
        self._answers = Answers(send=send, stanza_size_limit=stanza_size_limit, now=now)
        # This batch's publishes, put at its end (flush), and what the disk refused of it
        self._publishing = Publishing(
            box,
            self._answers,
            max_item=self._max_item,
            queue=self._queue,
            is_queue=self._is_queue,
            deleted_elsewhere=self._deleted_elsewhere,
            reply=self._reply,
        )
        self._qos = QosReceiver(  # made here: a bad trusted_sources entry is refused here
            box,
            now=now,
            touch=lambda node: self._touched.add(node),  # not the set: poll_touched renews it
            storable=self._publishing.storable,
            put_on_node=self._put_on_node,
            deleted_elsewhere=self._deleted_elsewhere,
            is_queue=self._is_queue,
        )
        self._touched: set[str] = set()  # nodes whose deliveries may have changed
        # (full JID, node) -> item id -> its lock deadline: what an unsubscribe gave back,
        # for the unlocks XEP-0254 §4 sends after it (see _unlock); kept until that deadline
        self._given_back: dict[tuple[str, str], dict[str, float]] = {}
        self._next_deleted_check = 0.0
        self._closed = False  # stopping: see iq
        self._nodes = NodeAdmin(
            box,
            self._queues,
            self._subscriptions,
            lock_timeout=lock_timeout,
            is_queue=self._is_queue,
            queue=self._queue,
            deleted_elsewhere=self._deleted_elsewhere,
            forget_deleted=self._forget_deleted,
            drop_queue_subscribers=self._drop_queue_subscribers,
        )
        self._disco = Disco(
            box,
            domain=domain,
            stanza_size_limit=stanza_size_limit,
            is_queue=self._is_queue,
            queue=self._queue,
            deleted_elsewhere=self._deleted_elsewhere,
            refuse_unreachable_topic=self._refuse_unreachable_topic,
        )
        self._listings = Listings(
            box,
            self._subscriptions,
            stanza_size_limit=stanza_size_limit,
            size_line=self._answers.size_line,
        )

    # -- what the component feeds in -------------------------------------------------------------

    def iq(self, element: Element) -> None:
        """Answer one iq get/set (every one gets exactly one reply)."""
        iq = parse_iq(element)
        if self._answers.unanswerable(iq):
            return
        if self._closed:
            # The stream lasts a moment after the close (until the server's </stream>): a
            # subscribe served then (a client that subscribes again at its notice, as the
            # docs say) was answered 'subscribed' by a component about to exit. Answered as
            # the server answers while no component is connected: try again.
            self._answers.send_error(iq, STOPPING, text="the component is stopping")
            return

        def answer() -> str | None:
            request = parse_request(iq)
            if isinstance(request, (Publish, Retract, Unlock, Subscribe, Unsubscribe)):
                self._touched.add(request.node)
            return self._answer(iq, request)

        self._reply(iq, answer)

    def _reply(self, iq: Iq, answer: Callable[[], str | None]) -> None:
        """Send what `answer` returns for `iq` (None: answered later), or the error it raised."""

        def sent() -> None:
            if (reply := answer()) is not None:
                self._answers.send_answer(iq, reply)

        refused = self._refusal(sent, "answering %.80s from %s", iq.id, iq.sender)
        if refused is not None:
            condition, text, inner = refused
            self._or_logged(
                partial(self._answers.send_error, iq, condition, text=text, inner=inner),
                "%s to iq %.80s from %s not sent",
                condition.name,
                iq.id,
                iq.sender,
            )

    def _or_logged(self, answer: Callable[[], None], unsent: str, *args: object) -> None:
        """Send the answer to a refused stanza; if that fails too (a bug), its traceback is
        logged (as `unsent % args`) and the stanza goes unanswered: raised, the failure left
        the component's data handler, which ended its stream and every notification in
        flight."""
        try:
            answer()
        except Exception:
            log.exception(unsent, *args)

    def _refusal(self, act: Callable[[], None], doing: str, *args: object) -> _Refused | None:
        """Do `act`; None if it went through, else what its sender is told: the condition and
        text of a refusal (a StanzaError's own payload in place of the echoed request), a
        file system's failure (logged once, at the batch's end), or a bug's internal error
        (logged as `doing % args`), which must cost one stanza, never the component's stream."""
        try:
            act()
            return None
        except BoxMQError as error:
            inner = error.payload if isinstance(error, StanzaError) else None
            return condition_for(error), str(error), inner
        except OSError as error:  # the file system failed: an answer for the sender, no bug
            failed = store_failure(error)
            self._publishing.store_failed(failed)
            return condition_for(failed), str(failed), None
        except Exception:
            log.exception(doing, *args)
            return INTERNAL, "", None

    def unserved(self, element: Element) -> None:
        """A stanza whose serving raised (a bug, or the file system failing where no answer
        handles it), its traceback logged by the caller: its sender is answered
        internal-server-error, of type wait (RFC 6120 §8.3.3.5), if it asked for an answer:
        an iq get/set, or a message other than an error, a headline or a groupchat. A result,
        an error or a presence is never answered with an error (§8.3.1). The answer is made
        from the envelope alone, without the request echoed: the parse may be what failed."""
        kind = element.get("type", "")
        sender, to, stanza_id = element.get("from", ""), element.get("to", ""), element.get("id")
        name = element.tag.rsplit("}", 1)[-1]
        if name == "iq" and kind in ("get", "set"):
            iq = Iq(id=stanza_id or "", type=kind, sender=sender, to=to, child=None, children=0)
            if self._answers.unanswerable(iq):
                return
            answer = partial(self._answers.send_error, iq, INTERNAL, inner="")
        elif name == "message" and kind != "error":
            message = Unacknowledged(stanza_id, kind, sender, to, element)
            answer = partial(self._answers.refuse_message, message, INTERNAL, "")
        else:
            return
        self._or_logged(
            answer, "internal-server-error to %s %.80s from %s not sent", name, stanza_id, sender
        )

    def gone(self, jid: str) -> None:
        """XEP-0254 §4: unavailable presence (or a bounce): unlock all it held, unsubscribe.
        `jid` as the stanza's `from` wrote it: compared in the form its requests were (jids.py).
        Only a full JID is gone: one without a resource is an account, not a session."""
        if "/" not in jid:
            return
        jid = normal(jid) or jid
        # What an unsubscribe gave back stays answered (_given_back_at_unsubscribe): a
        # subscriber that lost its stream between the unsubscribe and its unlocks sends them
        # once back; expire() forgets them at their lock deadlines. What it gives back here
        # is not kept: its late unlocks are told the lock is gone, as after a timeout.
        # Its topic nodes' ends told to the other processes once, not once per node.
        with self._box.topics.ending_together():
            for subscription in self._subscriptions.of_jid(jid):
                self._touched.add(subscription.node)
                # One node's store failing must not keep the leaver's items of the others
                # locked to no one until their lock timeouts: each ends on its own. What
                # the failed one held stays in processing/ under its lock, for the sweep.
                try:
                    self._end(subscription)
                except Exception:
                    log.exception(
                        "%s left: its subscription to %s not ended", jid, subscription.node
                    )

    def message(self, element: Element) -> None:
        """A <message/> to the component. Of type error, one the server or a client bounced:
        its sender is gone (XEP-0254 §4), if it is a subscriber's full JID and the error says
        it is gone or refuses (says_gone, bounces.py); nothing is stored or answered. Any other is
        urn:xmpp:qos's at-most-once level, put on the node its address names as an
        <acknowledged/> one is (_put_on_node), and answered only if refused."""
        if element.get("type") == "error":
            self._bounced(element)
            return
        message = parse_message(element)

        def put() -> None:
            node = node_of(message.to)
            self._touched.add(node)
            body = stamped(message.message, sender=message.sender, to=message.to)
            self._put_on_node(node, self._publishing.storable(body), message.sender)

        refused = self._refusal(put, "storing a message from %s to %s", message.sender, message.to)
        if refused is None:
            return
        condition, text, _ = refused  # a message error echoes nothing: no payload
        self._or_logged(
            partial(self._answers.refuse_message, message, condition, text),
            "%s to message %.80s from %s not sent",
            condition.name,
            message.id,
            message.sender,
        )

    def _bounced(self, element: Element) -> None:
        """An error bounced to the service: the end of its sender's subscriptions if it says
        the sender is gone or refuses; one that says to try later (a full offline store:
        wait resource-constraint) leaves them, and the item it bounced comes back at its
        lock timeout, as a silence (a subscriber that bounces every item is dropped after
        SILENT_TIMEOUTS of them). Every bounce ended them, a subscriber still there
        stopped getting items, told nothing."""
        sender = element.get("from", "")
        error = error_of(element)
        if says_gone(error):
            self.gone(sender)
            return
        kind, condition = error
        log.debug(  # not info: a peer that sends errors in a loop would write a line each
            "%s bounced a message (%s %s): its subscriptions stay, the item comes back at its "
            "lock timeout",
            sender,
            kind,
            condition,
        )

    def _delivered(self, subscription: Subscription, message: Message) -> None:
        """A message the subscription's consumer locked for it: notify (XEP-0254 §2.2)."""
        if subscription.closed:
            _quietly(message.unlock)  # it left meanwhile: the lock went back already
            return
        item_id = message.id
        if not (item_id.isascii() and item_id.isprintable()) and NOT_XML.search(item_id):
            # a file a script dropped, `4.a%01b.T`: no escape writes it in XML
            unsendable(subscription.node, message, "its id holds a character XML lacks")
            return
        # Quoted: a file a script dropped may carry any id (`4.a%27b.T` is `a'b`).
        item = f"<item id={_attr(item_id)}>{payload_of(message.body)}</item>"
        if len(item) > self._surely_fits and (size := len(item.encode())) > self._max_item:
            unsendable(
                subscription.node,
                message,
                f"it is {size} bytes as an XMPP item, over the {self._stanza_size_limit} a "
                "component's stanza may carry (Prosody's component_stanza_size_limit; "
                "--xmpp-stanza-size-limit if the server's was raised)",
            )
            return
        self._subscriptions.hold(subscription, message)
        level = subscription.qos
        jid, node = subscription.jid, subscription.node
        if level is Level.UNACKNOWLEDGED:  # a plain message: nothing to retry or fail
            self._send(render.event(next(self._ids), self.domain, jid, node, item))
            return
        event = render.event(next(self._ids), self.domain, jid, node, item, wrapped=True)
        self._reliable.send(
            jid,
            event,
            level,
            msg_id=msg_id_of(node, item_id),
            now=self._now(),
            on_failed=lambda: self._undeliverable(subscription, message),
        )

    def answer(self, element: Element) -> None:
        """An iq result or error: the answer to a notification sent with QoS, or nothing."""
        self._reliable.answer(element, self._now())

    def expire(self, now: float) -> None:
        """XEP-0254 §4: a lock that timed out: unlock notification, then the next subscriber.
        Now and then also the queues that another process deleted under their subscribers,
        and the subscriber records the disk refused."""
        if periodic_due(now, self._next_deleted_check, DELETED_CHECK):  # a clock stepped back too
            self._next_deleted_check = now + DELETED_CHECK
            for node in {s.node for s in self._subscriptions.all()} & self._queues.keys():
                self._deleted_elsewhere(node)
            for key, items in list(self._given_back.items()):
                if all(deadline <= now for deadline in items.values()):
                    del self._given_back[key]
            self._records.retry()  # the subscriber records the disk refused
        # The subscribers gone silent, ended after every unlock notification, in one pass:
        # their topic nodes' ends told to the other processes once, not once per node.
        silent: dict[Subscription, None] = {}
        for subscription, message in self._subscriptions.timed_out(now):
            if (extended := self._extended_elsewhere(subscription, message, now)) is not None:
                self._subscriptions.hold(subscription, extended)
                continue
            self._reliable.cancel(subscription.jid, msg_id_of(subscription.node, message.id))
            _quietly(message.unlock)  # the engine may have released it already
            self._notify_unlock(subscription, message.id)
            if self._silent(subscription, message, now):
                silent[subscription] = None
        with self._box.topics.ending_together():
            for subscription in silent:
                self._drop_silent(subscription)
            self._reliable.retry(now)  # its give-ups count as silences too (_undeliverable)

    def _extended_elsewhere(
        self, subscription: Subscription, message: Message, now: float
    ) -> Message | None:
        """`message`, held until the later deadline its file's name says, when an extend by id
        from another process (`boxmq extend`) pushed its lock past `now`: that holds for a
        consumer of a running process too (docs/cli.md), this door's subscribers included,
        whose timer knew only the deadline the item was sent with. None: the lock ends now
        (and when the file cannot be looked at: the deadline the door knows stands)."""
        try:
            if self._is_queue(subscription.node):
                dropbox = self._queue(subscription.node)
            else:
                dropbox = self._box.subscription(f"{SHARE_PREFIX}{SHARE_GROUP}/{subscription.node}")
            found = dropbox.find(message.id, states=[State.PROCESSING])
        except (BoxMQError, OSError):
            return None
        if found is None or found.holder != message.consumer or found.lock_deadline is None:
            return None
        if found.lock_deadline <= now:
            return None
        return replace(message, lock_deadline=found.lock_deadline)

    def _silent(self, subscription: Subscription, message: Message, now: float) -> bool:
        """One more silence of `subscription`, whose `message` was given back unanswered at
        `now`; whether it has been silent SILENT_TIMEOUTS times in a row, and is taken for
        gone. Locks given before the last silence that counted end with it, or just after:
        one silence, not several, or a subscriber slow on one batch of queue_requests >= 3
        items would be taken for gone at its first timeout."""
        if message.lock_deadline - self._lock_timeout >= subscription.silent_at:
            subscription.timeouts += 1
            subscription.silent_at = now
        return subscription.timeouts >= SILENT_TIMEOUTS and not subscription.closed

    def _drop_silent(self, subscription: Subscription) -> None:
        """Its unavailable presence was lost (the component was away when it left, or it never
        sent directed presence): stop feeding it items that only time out or bounce, each one
        a delivery closer to error/."""
        log.info(
            "%s: %s answered nothing, or refused each item: unsubscribed",
            subscription.node,
            subscription.jid,
        )
        self._drop(subscription)

    def next_deadline(self) -> float | None:
        deadlines = (self._subscriptions.next_deadline(), self._reliable.next_deadline())
        return min((d for d in deadlines if d is not None), default=None)

    def poll_touched(self) -> int:
        """Take the deliveries of the nodes that requests touched since the last call: what
        the component does after each batch of stanzas (not every subscription each time)."""
        nodes, self._touched = self._touched, set()
        return self.poll([s for node in nodes for s in self._subscriptions.of_node(node)])

    def poll(self, subscriptions: list[Subscription] | None = None) -> int:
        """Take every delivery ready now, for these subscriptions (default: all), without
        waiting."""
        taken = 0
        for subscription in self._subscriptions.all() if subscriptions is None else subscriptions:
            if subscription.closed:
                continue
            try:
                messages = subscription.consumer.receive_ready()
            except Closed:
                # Its queue was deleted under it by this process (box.delete_queue closes
                # the queue's consumers here first): told as for a delete over XMPP.
                self._deleted_elsewhere(subscription.node)
                if not subscription.closed:  # the box was closed, or the queue made again
                    self._drop(subscription)
                continue
            except BoxMQError as error:  # a file swept away under us: try again later
                log.warning("%s for %s: %s", subscription.node, subscription.jid, error)
                continue
            except OSError as error:  # raised, it cost every subscription after this one
                not_taken(subscription, error)
                continue
            if subscription.failing.recovered():
                log.info("%s: deliveries to %s taken again", subscription.node, subscription.jid)
            for message in messages:
                # Inline, not a wrapper's call: a try costs nothing until it catches, and
                # this is every item's way.
                try:
                    self._delivered(subscription, message)
                except Exception:
                    not_delivered(subscription, message)
            taken += len(messages)
        return taken

    def close(
        self,
        *,
        heard: bool = True,
        once_written: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        """The component stops: subscriptions are not kept across a restart, so each
        subscriber is told that its subscription ended (it subscribes again). Not `heard`
        (no connection to the server now): their records stay, and the next start tells
        them, as after a crash. `once_written` as for `tell_left_over`: a record goes once
        its notice was written, so that a stream dropped while stopping leaves it for the
        next start to tell; deleted at once, that subscriber was never told."""
        self._closed = True
        with self._box.topics.ending_together():  # told to the other processes once
            for subscription in self._subscriptions.all():
                self._drop(subscription, forget=False)
                if heard:
                    self._forget_once_told(subscription.jid, subscription.node, once_written)

    def tell_left_over(
        self, once_written: Callable[[Callable[[], None]], None] | None = None
    ) -> None:
        """Before serving: tell each subscriber that an earlier run recorded and never told
        (it died: SIGKILL, a power cut) that its subscription is gone, as a clean stop
        would have (XEP-0060 §8.8.4), so that it subscribes again; then forget them. Called
        at the first connection, while nobody is subscribed here yet.

        A record is deleted once its notice was handed to the transport: `once_written(then)`
        runs `then` after what was sent so far is written, and never if the stream dropped
        first (the component's flush), so that the next start tells that subscriber still;
        deleted before, a drop at that moment left it never told. Without it (a `send` that
        takes each stanza at once, as tests' lists do), at once."""
        for record in self._records.left_over():
            self._send(self._subscription_none(record.jid, record.node))
            self._forget_once_told(record.jid, record.node, once_written)

    def _forget_once_told(
        self, jid: str, node: str, once_written: Callable[[Callable[[], None]], None] | None
    ) -> None:
        """The record of a subscriber just sent its notice (left over, or at a stop) goes
        once that notice is written (`once_written`, as for `tell_left_over`; at once
        without it)."""
        told = partial(self._told_gone, jid, node)
        if once_written is None:
            told()
        else:
            once_written(told)

    def _told_gone(self, jid: str, node: str) -> None:
        """A subscriber was told its subscription is gone (left over, or at a stop): its
        record goes, unless it subscribed again meanwhile, which wrote the record anew
        under the same name, its own now."""
        if self._subscriptions.get(jid, node) is None:
            self._records.remove(jid, node)

    # -- requests ---------------------------------------------------------------------------------

    def _answer(self, iq: Iq, request: Request) -> str | None:
        match request:
            case Publish():
                return self._publishing.publish(iq, request)
            case Retract():
                return self._retract(iq, request)
            case Unlock():
                return self._unlock(iq, request)
            case Subscribe():
                return self._subscribe(iq, request)
            case Unsubscribe():
                return self._unsubscribe(iq, request)
            case RetrieveSubscriptions():
                return self._listings.subscriptions_of(iq, request)
            case RetrieveAffiliations():
                return self._listings.affiliations_of(iq, request, self._owner_of)
            case QosAcknowledged() | QosAssured() | QosDeliver():
                return self._qos.received(iq, request)
            case DiscoInfo():
                return self._disco.info(iq, request)
            case DiscoItems():
                return self._disco.items(iq, request)
            case Create():
                return self._nodes.create(iq, request)
            case Delete():
                return self._nodes.delete(iq, request)
            case Configure():
                return self._nodes.configure(iq, request)

    def flush(self) -> None:
        """Put the publishes of this batch of stanzas, one commit per queue (one flush for all
        under fsync=always), then answer them: the result promises the item is stored."""
        self._publishing.flush()

    def _retract(self, iq: Iq, request: Retract) -> str:
        """XEP-0254 §2.3: the receiver deletes the item; only it hears of the deletion."""
        self._release(iq, request, Message.ack, Queue.ack)
        notice = f"<retract id={_attr(request.item_id)}/>"
        self._send(render.event(next(self._ids), self.domain, iq.sender, request.node, notice))
        return render.result(iq)

    def _unlock(self, iq: Iq, request: Unlock) -> str:
        """XEP-0254 §2.4: the receiver gives the item back; the next subscriber gets it."""
        if self._given_back_at_unsubscribe(iq.sender, request):
            return render.result(iq)
        subscription = self._release(iq, request, Message.unlock, Queue.unlock)
        if subscription is not None:  # a late unlock by one no longer subscribed: no event
            self._notify_unlock(subscription, request.item_id)
        return render.result(iq)

    def _release(
        self,
        iq: Iq,
        request: Retract | Unlock,
        held_done: Callable[[Message], object],
        queue_done: Callable[[Queue, str, str], object],
    ) -> Subscription | None:
        """What a retract and an unlock share: the item leaves the requester's hands
        (`held_done` on the message it holds; else `queue_done` asks the queue, whose
        check_holder says why not: XEP-0254 §2.3/§2.4's errors), its reliable send stops,
        and the subscriber answered, so its silences start again. Its subscription, if any."""
        subscription = self._subscriptions.get(iq.sender, request.node)
        held = subscription.held.pop(request.item_id, None) if subscription else None
        self._reliable.cancel(iq.sender, msg_id_of(request.node, request.item_id))
        if subscription is not None:
            subscription.timeouts = 0
        consumer = self._consumer_of(iq.sender)
        try:
            if held is not None:
                held_done(held)
            elif not self._deleted_elsewhere(request.node) and self._is_queue(request.node):
                # a queue deleted elsewhere is looked for first: still known here, its
                # refusal named the deleted folder's path on this disk to the client
                queue_done(self._queue(request.node), request.item_id, consumer)
            else:
                raise self._not_held_on_topic(request.node, request.item_id)
        except LockError as error:
            raise _told_by_jid(error, consumer, iq.sender) from None
        return subscription

    def _given_back_at_unsubscribe(self, jid: str, request: Unlock) -> bool:
        """Whether `jid` held the item when it unsubscribed from the node, not subscribed
        again since, before its lock deadline: XEP-0254 §4 has a subscriber that cannot go
        on "unsubscribe and then unlock all of its outstanding queue items", and the
        unsubscribe gave them back already. Its unlock is answered as done (once; no
        notification, it is no longer subscribed), not with wait/unexpected-request, which
        tells it to try again later."""
        given_back = self._given_back.get((jid, request.node))
        deadline = given_back.pop(request.item_id, None) if given_back else None
        if given_back is not None and not given_back:
            del self._given_back[jid, request.node]
        return deadline is not None and self._now() < deadline

    def _subscribe(self, iq: Iq, request: Subscribe) -> str:
        if not names_requester(request.jid, iq.sender):
            raise StanzaError(INVALID_JID, f"{iq.sender} may subscribe its own JID only")
        self._deleted_elsewhere(request.node)  # else a subscription to a queue that is gone
        existing = self._subscriptions.get(iq.sender, request.node)
        if existing is None:
            is_queue = self._is_queue(request.node)  # one look at its folder, for both uses
            if not is_queue:
                self._refuse_unreachable_topic(request.node)
                if about_sys(request.node):
                    self._tell_sys(iq.sender, request.node)
            count = queue_requests_of(request)
            level = qos_level((request.options or {}).get(QOS_LEVEL, "unacknowledged"))
            name = consumer_name(iq.sender)
            consumer = self._receiver(request.node, name, count, is_queue=is_queue)
            existing = Subscription(
                iq.sender, request.node, count, consumer, request.jid, qos=level
            )
            self._subscriptions.add(existing)
            self._records.add(iq.sender, request.node)
            # what it gave back is its own again to lock and unlock, the usual way
            self._given_back.pop((iq.sender, request.node), None)
        elif request.options is not None:
            # Subscribing again with options changes them (XEP-0254 §2.1: queue_requests is
            # what the subscriber can take at once); without, the subscription is answered.
            # An option left out stays as it is: configuration-required is §2.1's answer to
            # a first subscribe, not to one changing its QoS level alone.
            given = request.options
            count = existing.queue_requests
            if QUEUE_REQUESTS in given:
                count = queue_requests_of(request)
            level = qos_level(given.get(QOS_LEVEL, existing.qos.value))
            existing.consumer.set_limits(max_in_flight=count, lock_timeout=self._lock_timeout)
            existing.queue_requests, existing.qos = count, level
        existing.named = request.jid  # the answer names what this subscribe named
        return render.result(iq, subscription_xml(existing, "subscribed"))

    def _tell_sys(self, jid: str, node: str) -> None:
        """A subscribe to a topic node under `$SYS`: served (an MQTT client an ACL lets
        publish there reaches it), but the figures each boxmq serve publishes there go to its
        MQTT clients only, which the operator is told. Once a minute a bare JID at most: any
        JID may subscribe and unsubscribe in a loop, and the API's subscribe, which warned
        at each, wrote a WARNING line each time."""
        passed_over = self._sys_lines.refused(bare(jid), now=self._now())
        if passed_over is not None:
            log.info(
                "%s subscribed to the topic node %s, %s%s",
                jid,
                node,
                sys_unserved("it"),  # the API's and the CLI's wording of it
                passed_over_said(passed_over),
            )

    def _refuse_unreachable_topic(self, node: str) -> None:
        """A topic node whose every publish is refused (each item carries the topic in its
        file name, docs/xmpp.md) is refused a subscription alike, with the same condition
        and text: answered result, it could never receive. A filter is refused when even
        the shortest topic it matches does not fit (each `+` an empty level, no `/#`)."""
        levels = node.split("/")
        if levels[-1] == "#":
            levels.pop()
        shortest = "/".join("" if level == "+" else level for level in levels)
        if not shortest:
            return  # `#`, `+`: topics of any length match
        try:
            self._box.topics.check_room(shortest)
        except MetadataTooLong as error:
            raise MetadataTooLong(
                f"topic node {node!r} could never receive an item, no publish to it fits: {error}"
            ) from None
        except InvalidArgument:
            return  # not a topic a publish may name; the subscribe says what is wrong

    def _owner_of(self, node: str) -> str | None:
        """The bare JID that owns the queue `node`; None for a topic, or a queue without one.
        A queue not in use here is not kept in `_queues` for this: a list of every queue's
        owners would keep them all. No look at the folder first (a listing asks this per
        queue): box.queue makes one, and a known queue deleted elsewhere has no owner to read,
        which says None as that look did."""
        queue = self._queues.get(node)
        if queue is None:
            try:
                queue = self._box.queue(node, create=False)
            except (QueueNotFound, InvalidName):
                return None
        return recorded_owner(queue)

    def _unsubscribe(self, iq: Iq, request: Unsubscribe) -> str:
        """XEP-0254 §4: unsubscribing releases the subscriber's locks to the others."""
        if not names_requester(request.jid, iq.sender):  # XEP-0060 §6.2.3.3
            raise StanzaError(FORBIDDEN, f"{iq.sender} may not unsubscribe {request.jid}")
        subscription = self._subscriptions.get(iq.sender, request.node)
        if subscription is None:
            # XEP-0060 §6.2.3.4: a queue node exists while its queue does, a topic node while
            # it has subscribers here; a queue deleted elsewhere is looked for first, or the
            # one nobody subscribed to, still known here, was not-subscribed
            self._deleted_elsewhere(request.node)
            if not self._is_queue(request.node) and not self._subscriptions.of_node(request.node):
                raise QueueNotFound(f"no node {request.node!r}")
            raise StanzaError(_NOT_SUBSCRIBED, f"{iq.sender} is not subscribed to {request.node}")
        if request.subid is not None and request.subid != consumer_name(iq.sender):
            # XEP-0060 §6.2.3.5: a subid not current for the subscriber ends nothing
            raise StanzaError(
                _INVALID_SUBID,
                f"subid {request.subid!r} is not {iq.sender}'s subscription to {request.node}",
            )
        held = len(subscription.held)
        if held:  # given back now: its unlocks may follow (XEP-0254 §4)
            self._given_back[iq.sender, request.node] = {
                item: message.lock_deadline for item, message in subscription.held.items()
            }
        try:
            self._end(subscription)
        except OSError as error:
            # Answered result all the same, which is what the subscriber's view holds: the
            # subscription is ended before its locks are released (no item comes to it any
            # more, and a second unsubscribe is not-subscribed). Kept instead, it would go
            # on feeding items to a client that asked to stop. An error (wait: try again)
            # said the unsubscribe was not done. What it held stays in processing/ under
            # its lock, and comes back to the others at its deadline (the sweep).
            log.error(
                "%s unsubscribed from %s; its %d held item(s) not given back: %s; they "
                "stay locked until their lock timeout",
                iq.sender,
                request.node,
                held,
                store_failure(error),
            )
        return render.result(iq)

    def _put_on_node(self, node: str, body: bytes, sender: str) -> None:
        """An <acknowledged/> message, or a plain one: put on the queue `node`, else
        published to the topic `node`. As a publish does (flush): the queue known here is put
        to without a look at its folder first; the put finds it deleted elsewhere, and the
        node is a topic."""
        if self._is_queue(node):
            try:
                self._queue(node).put(body)
                return
            except QueueNotFound:
                if not self._deleted_elsewhere(node):
                    raise
        self._box.publish(node, body, qos=1, source=sender)

    # -- helpers ----------------------------------------------------------------------------------

    def _is_queue(self, node: str) -> bool:
        """A node is a queue if one of that name exists; any other node is a topic. A queue
        is remembered (until it is found deleted elsewhere); a topic is looked for again at
        each request, with one look at the folder, since a queue of its name may be made
        at any time by the CLI or the API. A queue is its folder, as for a queue deleted
        elsewhere: one whose target/ is moved aside to be made again (docs/operations.md,
        "Disk usage") is still a queue, its requests refused until target/ is back (_queue),
        not the topic of that name, which took its publishes from its consumers."""
        if node in self._queues:
            return True
        try:
            # no_dropbox first, not box.queue(create=False) alone: its QueueNotFound looks at
            # the folder a second time to word its advice, which nobody reads here
            path = queue_path(self._box.root, node)
            if no_dropbox(path):
                return os.path.isdir(path)  # its target/ alone missing: a queue still
            self._queue(node)
        except (QueueNotFound, InvalidName):
            return False
        return True

    def _receiver(self, node: str, name: str, queue_requests: int, *, is_queue: bool) -> Receiver:
        """A queue's consumer, or a member of the topic's XMPP share group: the XMPP
        subscribers of a topic node compete for its messages as a queue's do (XEP-0254),
        while every other subscription of the topic (MQTT's) gets its own copy. `is_queue` as
        the subscribe found it: a second look at a topic's folder was a second stat."""
        if is_queue:
            return self._queue(node).consumer(
                name, max_in_flight=queue_requests, lock_timeout=self._lock_timeout
            )
        # The topics' own subscribe: the API's warns its caller of a $SYS filter, a line a
        # subscribe; this door tells of one itself (_tell_sys), as the MQTT door does.
        return self._box.topics.subscribe(
            f"{SHARE_PREFIX}{SHARE_GROUP}/{node}",
            name,
            max_in_flight=queue_requests,
            lock_timeout=self._lock_timeout,
        )

    def _not_held_on_topic(self, node: str, item_id: str) -> LockError:
        """A topic's share group has no queue of its own to ask: what the door knows."""
        if any(item_id in s.held for s in self._subscriptions.of_node(node)):
            return Conflict(item_id, "locked by another subscriber")
        return ItemNotFound(item_id, "not held by you, nor by anyone here")

    def _queue(self, node: str) -> Queue:
        queue = self._queues.get(node)
        if queue is None:
            try:
                queue = self._box.queue(node, create=False)
            except QueueNotFound as error:  # item-not-found; not the API's `boxmq ls`, root
                path = queue_path(self._box.root, node)
                if broken_target(path) is not None:  # in box.queue's words: how to mend it
                    raise StanzaError(BROKEN, str(error)) from None
                if os.path.isdir(path):  # its folder there, target/ moved aside: wait for it
                    target = os.path.join(path, State.TARGET.value)
                    missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), target)
                    raise TargetMissing(missing, node, target) from error
                raise QueueNotFound(f"no node {node!r}") from None
            self._queues[node] = queue
        return queue

    def _consumer_of(self, jid: str) -> str:
        return check_consumer_name(consumer_name(jid))

    def _notify_unlock(self, subscription: Subscription, item_id: str) -> None:
        # Written in the namespace the feature names, not Listing 11's urn:xmpp:queueing:0.
        notice = f"<unlock xmlns='{ns.QUEUEING}' id={_attr(item_id)}/>"
        self._send(
            render.event(next(self._ids), self.domain, subscription.jid, subscription.node, notice)
        )

    def _undeliverable(self, subscription: Subscription, message: Message) -> None:
        """The subscriber never acknowledged (or refused) the item: it is told, as for a lock
        timeout (XEP-0254 §4), and the next one gets it. A silence, as a lock timeout is: a
        client that does not serve urn:xmpp:qos refuses each iq at once, and the server does
        for a full JID gone unheard (service-unavailable, RFC 6120 §10.5.3.1); no lock of it
        ever timed out, and each item came back to it until it went to error/."""
        if subscription.held.pop(message.id, None) is not None:
            _quietly(message.unlock)
            self._notify_unlock(subscription, message.id)
            log.info(
                "%s: %s not acknowledged by %s", subscription.node, message.id, subscription.jid
            )
            if self._silent(subscription, message, self._now()):
                self._drop_silent(subscription)

    def _deleted_elsewhere(self, node: str) -> bool:
        """Whether another process (`boxmq delete`), or this one's API (box.delete_queue),
        deleted the queue `node` since it was looked up here; if so its subscribers here are
        told and unsubscribed, as for a delete over XMPP (XEP-0060 §8.4.2), and the node is
        looked up again at its next request.
        Without this the node stayed a queue here: every publish to it refused, every
        subscribe to it answered with a subscription to nothing. Deleted is its folder gone
        (a delete renames it away), not its target/ alone: that one is moved aside and made
        again to recreate it (docs/operations.md, "Disk usage"), under the same subscribers."""
        if node not in self._queues or os.path.isdir(queue_path(self._box.root, node)):
            return False
        self._forget_deleted(node)
        return True

    def _forget_deleted(self, node: str) -> None:
        """The queue `node`, known here, was found deleted elsewhere (`_deleted_elsewhere`,
        or a caller that has just looked at its folder itself): forgotten, its subscribers
        here told and unsubscribed."""
        del self._queues[node]
        self._drop_queue_subscribers(node)

    def _drop_queue_subscribers(self, node: str) -> None:
        """The queue `node` was deleted (here or elsewhere): its subscribers are told (XEP-0060
        §8.4.2) and unsubscribed. Subscribers of the topic of that name (they subscribed before
        the queue was made elsewhere) stay: the delete ends the queue, not the topic, which
        the node is again from now on (docs/xmpp.md)."""
        for subscription in self._subscriptions.of_node(node):
            if isinstance(subscription.consumer, Consumer):
                self._send(
                    render.event_delete(next(self._ids), self.domain, subscription.jid, node)
                )
                self._drop(subscription)  # then told that its subscription ended

    def _drop(self, subscription: Subscription, *, forget: bool = True) -> None:
        """The service ends a subscription its subscriber did not end (three silences, its
        queue deleted, the component stopping): ended, and the subscriber is told (XEP-0060
        §8.8.4), else a client still connected would wait for items for ever. Not for one
        that left (unavailable presence, a bounce): nobody is there to hear it."""
        self._end(subscription, forget=forget)
        self._send(self._subscription_none(subscription.jid, subscription.node, subscription.named))

    def _subscription_none(self, jid: str, node: str, named: str | None = None) -> str:
        """The notice that `jid`'s subscription to `node` ended, naming it as its subscribe
        did (`named`); a subscription left by a crash, whose record keeps the full JID alone,
        by its bare JID, as a subscribe without a jid is."""
        return render.event_subscription(
            next(self._ids), self.domain, jid, node, named or bare(jid), consumer_name(jid), "none"
        )

    def _end(self, subscription: Subscription, *, forget: bool = True) -> None:
        """`forget`: its record goes too (records.py); kept, the next start tells it."""
        for item in subscription.held:
            self._reliable.cancel(subscription.jid, msg_id_of(subscription.node, item))
        self._subscriptions.remove(subscription)
        if forget:
            self._records.remove(subscription.jid, subscription.node)
        subscription.held.clear()
        subscription.consumer.close()  # owner gone: its locks go to the other subscribers


def _told_by_jid(error: LockError, consumer: str, jid: str) -> LockError:
    """`error` as an XMPP client reads it: the queue's text names the requester by its
    consumer (`xmpp.<hash>`, the subid), which the client does not know itself by, and
    calls the others consumers; the door names it by its JID, and them subscribers."""
    detail = error.detail.replace(consumer, jid).replace("another consumer", "another subscriber")
    return type(error)(error.message_id, detail)


_attr = render.attr  # not a function of its own: one call per attribute, not two


def _quietly(action: Callable[[], object]) -> None:
    try:
        action()
    except BoxMQError as error:
        log.debug("ignored: %s", error)
