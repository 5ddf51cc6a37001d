"""urn:xmpp:qos, received: what a sender sends at least once (<acknowledged/>) and exactly
once (<assured/>, then <deliver/>), each an iq that wraps a message to a node
(docs/xmpp.md, QoS); qos_out.py is the other way, the notifications sent so.

An <acknowledged/> message is put on its node as a publish is; an <assured/> one is kept by
the box's exactly-once intake until its <deliver/>, which moves it to its node. The node is
named by the local part of the iq's address, XEP-0106's escapes taken out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final
from xml.etree.ElementTree import Element

from boxmq.client.assured import SendersNameTooLong, Words
from boxmq.client.box import Box
from boxmq.errors import (
    MessageTooLarge,
    MetadataTooLong,
    NotAllowed,
    QueueNotFound,
    ResourceConstraint,
)
from boxmq.xmpp import ns, render
from boxmq.xmpp.conditions import condition_for
from boxmq.xmpp.refusals import RefusalLog
from boxmq.xmpp.requests import Iq, QosAcknowledged, QosAssured, QosDeliver, bare
from boxmq.xmpp.trusted import TrustedJids

__all__ = ["QosReceiver", "node_of", "stamped"]

# An <assured/>'s texts in a stored name, as its sender knows them (urn:xmpp:qos, XEP-0060)
_ASSURED_WORDS: Final = Words(
    "msgId", "the msgId", "the sender's JID {}", "node", "the node (topic)"
)
_attr = render.attr  # not a function of its own: one call per attribute, not two


class QosReceiver:
    """The service's urn:xmpp:qos requests, received, and the exactly-once messages refused
    (`refusals`, logged for who runs it). What it asks of the service, each the service's
    own: a node marked for polling (`touch`), a body checked to fit an item (`storable`),
    a message put on a node (`put_on_node`), whether a queue known here was deleted
    elsewhere (`deleted_elsewhere`) and whether a node is a queue (`is_queue`)."""

    def __init__(
        self,
        box: Box,
        *,
        now: Callable[[], float],
        touch: Callable[[str], None],
        storable: Callable[[bytes], bytes],
        put_on_node: Callable[[str, bytes, str], None],
        deleted_elsewhere: Callable[[str], bool],
        is_queue: Callable[[str], bool],
    ) -> None:
        self._box = box
        self._now = now
        self._touch = touch
        self._storable = storable
        self._put_on_node = put_on_node
        self._deleted_elsewhere = deleted_elsewhere
        self._is_queue = is_queue
        self._refusals = RefusalLog()  # exactly-once messages refused, for who runs it
        trusted = box.exactly_once.trusted_sources
        self._trusted = None if trusted is None else TrustedJids(trusted)  # a bad entry: here

    def received(self, iq: Iq, request: QosAcknowledged | QosAssured | QosDeliver) -> str:
        """urn:xmpp:qos, received: at least once and exactly once (docs/xmpp.md, QoS)."""
        if isinstance(request, QosDeliver):
            # The node its <assured/> went to, asked before the deliver forgets it: the
            # deliver's own `to` may name another node, or the service, and the node it
            # names would be polled in its stead, the item waiting for the next round.
            node_of_assured = self._box.intake.destination(iq.sender, request.msg_id)
            # a repeat is answered all the same; an unknown id is item-not-found: the sender
            # must learn that the message cannot be delivered (urn:xmpp:qos, exactly once)
            self._box.deliver(iq.sender, request.msg_id, must_exist=True)
            if node_of_assured is not None:
                self._touch(node_of_assured)
            return render.result(iq)
        node = node_of(iq.to)
        self._touch(node)
        body = self._storable(stamped(request.message, sender=iq.sender, to=iq.to))
        if isinstance(request, QosAcknowledged):
            self._put_on_node(node, body, iq.sender)
            return render.result(iq)
        # The exactly-once intake makes a queue's folders that are missing: a queue deleted
        # elsewhere is looked for first, or it would be made again.
        self._deleted_elsewhere(node)
        queue = self._is_queue(node)
        # reclaim: once `deliver` succeeded the sender may reuse the msgId (urn:xmpp:qos,
        # Message IDs), so an `assured` under a delivered id is a new message. A repeat of the
        # first `assured` cannot come after its `deliver`: the stream keeps their order.
        try:
            self._box.assured(
                iq.sender,
                request.msg_id,
                body,
                queue=node if queue else None,
                topic=None if queue else node,
                reclaim=True,
                identities=self._identities(iq.sender),
            )
        except SendersNameTooLong as error:  # said in assured()'s words: source, msg_id
            raise MetadataTooLong(error.said(_ASSURED_WORDS)) from error
        except (MessageTooLarge, NotAllowed, ResourceConstraint) as error:
            # urn:xmpp:qos, Memory attacks: each logged. Over max_message_size is
            # payload-too-big, of type modify as the publish's (RFC 6120 §8.3.2: waiting
            # cannot help); the pending limits, which waiting can, resource-constraint.
            name = condition_for(error).name
            self._refusals.refused(iq.sender, name, str(error), now=self._now())
            raise
        return render.result(iq, f"<received xmlns='{ns.QOS}' msgId={_attr(request.msg_id)}/>")

    def _identities(self, sender: str) -> tuple[str, ...]:
        """The names trusted_sources may list `sender` by: the QoS document trusts senders "in
        the roster", bare JIDs, any resource; and the entries written in another case
        (`Alice@Example.org`) that name it or its bare JID in RFC 7622's form."""
        own = bare(sender)
        if self._trusted is None:
            return (own,)
        return (own, *self._trusted.entries_of(sender, own))


# XEP-0106 §4.2: the characters a JID's local part cannot hold, each a `\` and two hex digits
_JID_ESCAPE: Final = re.compile(r"\\(20|22|26|27|2f|3a|3c|3e|40|5c)")


def node_of(to: str) -> str:
    """A QoS-wrapped message goes to the queue named by the local part of its address, with
    XEP-0106's escapes taken out: a local part cannot hold a `/` or a space (RFC 7622), so a
    node `sensors/1` is written `sensors\\2f1`. Taken as written, it went to a topic of
    that name, which nobody subscribes to, and was dropped."""
    local, at, _ = to.partition("@")
    if not at or not local:
        raise QueueNotFound(f"send to <node>@{to.split('/')[0]}: which node is {to!r}?")
    return _JID_ESCAPE.sub(lambda escape: chr(int(escape[1], 16)), local)


def stamped(message: Element, *, sender: str, to: str) -> bytes:
    """The wrapped message with from/to taken from the iq (Prosody stamps only the iq)."""
    message.set("from", sender)
    message.set("to", to)
    return render.xml_of(message).encode()
