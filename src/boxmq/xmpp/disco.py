"""Service discovery: XEP-0030's disco#info and disco#items, for the service and its nodes.

What the service advertises is what it serves (XEP-0060 §10), and every node is a leaf: a
queue lists its ready items, a topic keeps nothing of its own. Each answer fits the stanza
size limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from boxmq.client.box import Box
from boxmq.client.queue import Queue
from boxmq.xmpp import ns, render
from boxmq.xmpp.payloads import NOT_XML
from boxmq.xmpp.requests import DiscoInfo, DiscoItems, Iq

__all__ = ["FEATURES", "Disco"]

# XEP-0060 §10: what the door serves, and only that (what it refuses feature-not-implemented,
# requests.py's lists, is not here): a client relies on what disco advertises.
FEATURES: Final = (
    ns.DISCO_INFO,
    ns.DISCO_ITEMS,
    ns.PUBSUB,
    ns.PUBSUB + "#create-nodes",
    ns.PUBSUB + "#delete-nodes",
    ns.PUBSUB + "#config-node",
    ns.PUBSUB + "#persistent-items",  # every node keeps its items until they are retracted
    ns.PUBSUB + "#publish",
    ns.PUBSUB + "#retract-items",
    ns.PUBSUB + "#retrieve-affiliations",
    ns.PUBSUB + "#retrieve-subscriptions",
    ns.PUBSUB + "#subscribe",
    ns.PUBSUB + "#subscription-notifications",  # XEP-0060: a MUST for who sends them
    ns.QUEUEING,
    ns.QOS,
)


class Disco:
    """The service's disco#info and disco#items. What it asks of the service, each the
    service's own: whether a node is a queue (`is_queue`), the queue of a node (`queue`),
    whether a queue known here was deleted elsewhere (`deleted_elsewhere`), and the refusal
    of a topic node no publish fits (`refuse_unreachable_topic`), as its subscribe has it."""

    def __init__(
        self,
        box: Box,
        *,
        domain: str,
        stanza_size_limit: int,
        is_queue: Callable[[str], bool],
        queue: Callable[[str], Queue],
        deleted_elsewhere: Callable[[str], bool],
        refuse_unreachable_topic: Callable[[str], None],
    ) -> None:
        self.domain = domain
        self._box = box
        self._stanza_size_limit = stanza_size_limit
        self._is_queue = is_queue
        self._queue = queue
        self._deleted_elsewhere = deleted_elsewhere
        self._refuse_unreachable_topic = refuse_unreachable_topic

    def info(self, iq: Iq, request: DiscoInfo) -> str:
        """Any node is a leaf: one that names no queue is the topic of that name, published
        to (its MQTT subscribers get it) with no subscriber here. Not XEP-0060 §5.4's
        item-not-found, as a delete, a configure and an unsubscribe answer such a node: a
        client may look before it publishes, and Smack's getOrCreateLeafNode creates the
        node on item-not-found, a queue here, which would take every later publish from the
        topic's subscribers (docs/xmpp.md). A topic node no publish fits is no such node: it
        is refused as its subscribe is, with the same condition and text, as a filter that
        fits is not (a subscribe to it is served, and Smack's getNode asks disco#info first)."""
        if request.node is None:
            identity = ("pubsub", "service", "boxmq queues")
        else:
            if self._deleted_elsewhere(request.node) or not self._is_queue(request.node):
                self._refuse_unreachable_topic(request.node)  # as its disco#items is
            identity = ("pubsub", "leaf", request.node)
        return render.result(iq, render.disco_info(request.node, identity, FEATURES))

    def items(self, iq: Iq, request: DiscoItems) -> str:
        # A name XML cannot carry (a queue the API made, a file a script dropped) would break
        # the stream: left out, as no client could name it anyway.
        if request.node is None:
            items: Iterable[tuple[str, str | None, str | None]] = (
                (self.domain, name, name) for name in self._box.queues() if not NOT_XML.search(name)
            )
        elif not self._deleted_elsewhere(request.node) and self._is_queue(request.node):
            # a queue deleted elsewhere is the topic of that name: its subscribers told now
            ready = self._queue(request.node).peek(limit=100)
            items = (  # §5.5: name=
                (self.domain, None, p.envelope.message_id)
                for p in ready
                if not NOT_XML.search(p.envelope.message_id)
            )
        else:
            self._refuse_unreachable_topic(request.node)  # as its disco#info is
            items = ()  # a topic keeps nothing of its own
        # Cut to fit the stanza size limit (the first items, whole): a root of many queues
        # with long names listed them all in one stanza, and Prosody ended the stream.
        room = self._stanza_size_limit - len(render.result(iq).encode())
        return render.result(iq, render.disco_items(request.node, items, room=room))
