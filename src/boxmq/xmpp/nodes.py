"""Node administration: XEP-0060 §8's create, delete and configure, which only a node's owner
may delete or configure.

A created node is a queue (docs/xmpp.md, Node mapping), owned by its creator's bare JID; a
topic node is not made nor deleted, it exists while it has subscribers here. Every node has
one fixed configuration, which a form may ask for and nothing may change.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from boxmq.client.box import Box
from boxmq.client.queue import Queue
from boxmq.errors import QueueNotFound
from boxmq.store.layout import half_made, queue_path
from boxmq.xmpp import ns, render
from boxmq.xmpp.conditions import FORBIDDEN, NOT_ACCEPTABLE, Condition
from boxmq.xmpp.errors import StanzaError
from boxmq.xmpp.jids import normal
from boxmq.xmpp.requests import Configure, Create, Delete, Iq, bare
from boxmq.xmpp.subscriptions import Subscriptions

__all__ = ["NodeAdmin", "recorded_owner"]

_NODE_EXISTS: Final = Condition("cancel", "conflict")
_NOT_ALLOWED: Final = Condition("cancel", "not-allowed")
_attr = render.attr  # not a function of its own: one call per attribute, not two


class NodeAdmin:
    """The service's node administration, over the queues it knows (`queues`, the service's
    own dict, which it and this change alike) and its subscriptions. What it asks of the
    service, each the service's own: whether a node is a queue (`is_queue`), the queue of a
    node (`queue`), whether a queue known here was deleted elsewhere (`deleted_elsewhere`),
    one found so forgotten (`forget_deleted`), and a deleted queue's subscribers told and
    unsubscribed (`drop_queue_subscribers`)."""

    def __init__(
        self,
        box: Box,
        queues: dict[str, Queue],
        subscriptions: Subscriptions,
        *,
        lock_timeout: float,
        is_queue: Callable[[str], bool],
        queue: Callable[[str], Queue],
        deleted_elsewhere: Callable[[str], bool],
        forget_deleted: Callable[[str], None],
        drop_queue_subscribers: Callable[[str], None],
    ) -> None:
        self._box = box
        self._queues = queues
        self._subscriptions = subscriptions
        self._lock_timeout = lock_timeout
        self._is_queue = is_queue
        self._queue = queue
        self._deleted_elsewhere = deleted_elsewhere
        self._forget_deleted = forget_deleted
        self._drop_queue_subscribers = drop_queue_subscribers

    def create(self, iq: Iq, request: Create) -> str:
        path = queue_path(self._box.root, request.node)  # InvalidName: bad-request
        # Its folder, not its target/: one moved aside to be made again (docs/operations.md,
        # "Disk usage") is a queue still, whose subscribers a create forgot, and whose new
        # target/ it made under the operator's `mkdir target`. One whose making was cut short
        # (working/ alone: a put killed) is made, as a put makes it.
        if os.path.isdir(path) and not half_made(path):
            raise StanzaError(_NODE_EXISTS, f"node {request.node!r} exists")
        if request.node in self._queues:  # known here, its folder gone: deleted elsewhere
            self._forget_deleted(request.node)  # its subscribers are not the topic's
        if subscribers := len(self._subscriptions.of_node(request.node)):
            # A topic node exists while it has subscribers here: a queue of its name would
            # take every publish to the node from them.
            raise StanzaError(
                _NODE_EXISTS,
                f"node {request.node!r} exists: a topic with {subscribers} subscriber(s) here",
            )
        self._refuse_config(request.config, "queue")  # before anything is made
        queue = self._queues[request.node] = self._box.queue(request.node)
        queue.set_owner(bare(iq.sender))  # XEP-0060 §8.1: the creator owns the node
        return render.result(iq)

    def delete(self, iq: Iq, request: Delete) -> str:
        """The queue and every message in it go; its subscribers here are told (XEP-0060
        §8.4.2), then unsubscribed. A topic node is not deleted: it exists while it has
        subscribers here, as a create and an unsubscribe read it, and it cannot be ended
        for them (XEP-0060 §8.4.3's not-allowed, of a node that cannot be deleted); any other
        node does not exist, said in the node's words, not the API's folder and `boxmq ls`.
        A queue still known here that another process deleted is looked for first: its
        owner went with its folder, and the delete of what is gone was answered result,
        whoever asked."""
        self._deleted_elsewhere(request.node)  # its subscribers told, as for this delete
        if not self._is_queue(request.node):
            if subscribers := len(self._subscriptions.of_node(request.node)):
                raise StanzaError(
                    _NOT_ALLOWED,
                    f"node {request.node!r} is a topic with {subscribers} subscriber(s) here: "
                    "a topic node cannot be deleted, it ends as its last subscriber leaves",
                )
            raise QueueNotFound(f"no node {request.node!r}")
        self._check_owner(iq, self._queue(request.node), "delete")
        self._queues.pop(request.node, None)
        self._drop_queue_subscribers(request.node)
        self._box.delete_queue(request.node)
        return render.result(iq)

    def configure(self, iq: Iq, request: Configure) -> str:
        """Nodes have one fixed configuration: the form tells it; a submitted form is
        accepted when it asks for what the node has already, else not-acceptable. A queue
        deleted elsewhere is looked for first, as for a delete: its owner went with it."""
        self._deleted_elsewhere(request.node)
        is_queue = self._is_queue(request.node)
        if is_queue:
            self._check_owner(iq, self._queue(request.node), "configure")
        elif not self._subscriptions.of_node(request.node):
            # A topic node exists while it has subscribers here, as a delete, a create and an
            # unsubscribe read it: no form for a node that does not exist (XEP-0060 §8.2.3.4)
            raise QueueNotFound(f"no node {request.node!r}")
        destination = "queue" if is_queue else "topic"
        if request.submit:
            self._refuse_config(request.config, destination)
            return render.result(iq)
        fields = [
            (var, value, kind) for var, (value, kind) in self._node_config(destination).items()
        ]
        config = render.form(ns.NODE_CONFIG, fields, type="form")
        return render.result(
            iq,
            f"<pubsub xmlns='{ns.PUBSUB_OWNER}'><configure node={_attr(request.node)}>"
            f"{config}</configure></pubsub>",
        )

    def _node_config(self, destination: str) -> dict[str, tuple[str, str]]:
        """The one configuration every node has: field -> (value, field type)."""
        return {
            "pubsub#node_type": ("leaf", "list-single"),
            "boxmq#destination": (destination, "text-single"),
            "boxmq#lock_timeout": (f"{self._lock_timeout:g}", "text-single"),
        }

    def _refuse_config(self, submitted: dict[str, str], destination: str) -> None:
        """XEP-0060 §8.2.5: an option the service cannot apply is not-acceptable. Nothing
        here can be changed, so a field asking for other than what the node has would be
        answered result and ignored: the owner would believe max_items=5, say, was set."""
        fixed = {var: value for var, (value, _) in self._node_config(destination).items()}
        for var, value in submitted.items():
            if var not in fixed or not _same_setting(value, fixed[var]):
                has = ", ".join(f"{v}={setting}" for v, setting in fixed.items())
                raise StanzaError(
                    NOT_ACCEPTABLE,
                    f"{var}={value!r} cannot be applied: this node has one fixed "
                    f"configuration ({has}; the lock timeout is --xmpp-lock-timeout's)",
                )

    def _check_owner(self, iq: Iq, queue: Queue, what: str) -> None:
        """XEP-0060 §8: only the owner deletes or configures a node. A queue with no recorded
        owner (made by the API, the CLI or a script) is open to anyone, as it always was."""
        owner = recorded_owner(queue)
        if owner is not None and owner != bare(iq.sender):
            raise StanzaError(FORBIDDEN, f"only the owner of {queue.name!r} may {what} it")


def recorded_owner(queue: Queue) -> str | None:
    """The queue's owner in the form the door compares JIDs (jids.py): a person may have
    written it (docs/xmpp.md), `Alice@Example.org`."""
    owner = queue.owner
    return None if owner is None else normal(owner) or owner


def _same_setting(given: str, fixed: str) -> bool:
    """Whether a submitted value asks for the setting the node has: `30.0` is `30` seconds."""
    if given == fixed:
        return True
    try:
        return float(given) == float(fixed)
    except ValueError:
        return False
