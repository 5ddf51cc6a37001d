"""Publishes: a batch of stanzas' publishes to queues, put at its end in one commit per queue
and answered once on disk; a publish to a topic at once; and the one line that says what the
file system refused of the batch.

The service assigns the item id: it is the boxmq message id (docs/xmpp.md). Each payload is
checked, as the XML stored for it, to fit an item to the subscribers before it is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Final

from boxmq.client.box import Box
from boxmq.client.queue import Queue
from boxmq.errors import (
    BoxMQError,
    MessageTooLarge,
    QueueNotFound,
    StoreFailed,
    store_failure,
)
from boxmq.xmpp import ns, render
from boxmq.xmpp.answers import Answers
from boxmq.xmpp.conditions import INTERNAL, Condition, condition_for
from boxmq.xmpp.errors import StanzaError
from boxmq.xmpp.requests import Iq, Publish

__all__ = ["Publishing"]

log = logging.getLogger("boxmq.xmpp")

_PAYLOAD_REQUIRED: Final = Condition("modify", "bad-request", "payload-required")
# The <item id='...'></item> around a payload: 19 bytes and the id, 27 characters as boxmq makes
# them (`1796221183759915-7586788408`), with room to spare.
_ITEM_AROUND: Final = 100


class Publishing:
    """The service's publishes, answered through its `answers`. What it asks of the service,
    each the service's own: the queue of a node (`queue`), whether a node is a queue
    (`is_queue`), whether a queue known here was deleted elsewhere (`deleted_elsewhere`),
    and the answer to an iq, or its refusal, sent (`reply`). `max_item`: the bytes of
    <item>...</item> a notification may carry."""

    def __init__(
        self,
        box: Box,
        answers: Answers,
        *,
        max_item: int,
        queue: Callable[[str], Queue],
        is_queue: Callable[[str], bool],
        deleted_elsewhere: Callable[[str], bool],
        reply: Callable[[Iq, Callable[[], str | None]], None],
    ) -> None:
        self._box = box
        self._answers = answers
        self._max_item = max_item
        self._queue = queue
        self._is_queue = is_queue
        self._deleted_elsewhere = deleted_elsewhere
        self._reply = reply
        self._puts: dict[str, list[tuple[Iq, bytes]]] = {}  # publishes awaiting one commit
        self._store_failures: list[StoreFailed] = []  # logged once, at the batch's end

    def publish(self, iq: Iq, request: Publish) -> str | None:
        if request.payload is None:
            raise StanzaError(_PAYLOAD_REQUIRED, "publish one <item/> with a payload")
        # The service assigns the item id: it is the boxmq message id (docs/xmpp.md).
        body = self.storable(render.xml_of(request.payload).encode())
        if self._is_queue(request.node):
            self._puts.setdefault(request.node, []).append((iq, body))
            return None  # answered by flush(), once the batch is on disk
        return self._to_topic(iq, request.node, body)

    def storable(self, body: bytes) -> bytes:
        """`body`, an item's payload as the XML stored for it, if an item can carry it to the
        subscribers; else MessageTooLarge (XEP-0060 §7.1.3.4, payload-too-big). It grows on
        its way in: a `'` a client writes as one byte is `&apos;`, so 200,000 of them, within
        its 256 KiB, were stored as 1.2 MB, answered `result`, and moved to error/ at their
        first delivery, never sent (the service's _delivered)."""
        room = self._max_item - _ITEM_AROUND
        if len(body) > room:
            raise MessageTooLarge(
                f"the payload is {len(body)} bytes written as XML (a ' or \" in its text takes "
                f"6, a > 4), over the {room} an item from this service may carry (the server's "
                "component_stanza_size_limit, less room for the event around it): not stored"
            )
        return body

    def _to_topic(self, iq: Iq, node: str, body: bytes) -> str:
        """A publish to a topic: a copy for every matching subscription, MQTT's included."""
        item_id = self._box.publish(node, body, qos=1, source=iq.sender)
        return _published(iq, node, item_id)

    def flush(self) -> None:
        """Put the publishes of this batch of stanzas, one commit per queue (one flush for all
        under fsync=always), then answer them: the result promises the item is stored."""
        puts, self._puts = self._puts, {}
        for node, pending in puts.items():
            try:
                ids = self._queue(node).put_many([body for _, body in pending])
            except BoxMQError as error:
                if isinstance(error, QueueNotFound) and self._deleted_elsewhere(node):
                    # the node is the topic of that name now (docs/xmpp.md): published there
                    for iq, body in pending:
                        self._reply(iq, partial(self._to_topic, iq, node, body))
                    continue
                if isinstance(error, StoreFailed):  # TargetMissing: as the disk's own refusal
                    self._refuse_unstored([iq for iq, _ in pending], error)
                    continue
                for iq, _ in pending:
                    self._answers.send_error(iq, condition_for(error), text=str(error))
                continue
            except OSError as error:  # nothing of the batch was kept (Queue.put_many)
                self._refuse_unstored([iq for iq, _ in pending], store_failure(error))
                continue
            except Exception:  # a bug must cost these requests, never the stream
                log.exception("publishing %d item(s) to %s", len(pending), node)
                for iq, _ in pending:
                    self._answers.send_error(iq, INTERNAL)
                continue
            for (iq, _), item_id in zip(pending, ids, strict=True):
                self._answers.send_answer(iq, _published(iq, node, item_id))
        self._log_store_failures()

    def _refuse_unstored(self, iqs: list[Iq], error: StoreFailed) -> None:
        """internal-server-error, or resource-constraint for a full disk, both of type wait:
        the sender may try again later (RFC 6120 §8.3.2)."""
        condition = condition_for(error)
        for iq in iqs:
            self._answers.send_error(iq, condition, text=str(error))
        self._store_failures += [error] * len(iqs)

    def store_failed(self, failure: StoreFailed) -> None:
        """A request of this batch the file system refused, answered where it was: told in
        the batch's one line (flush)."""
        self._store_failures.append(failure)

    def _log_store_failures(self) -> None:
        """One line per batch of stanzas, however many the file system refused."""
        failures, self._store_failures = self._store_failures, []
        if failures:
            log.error("%d request(s) not stored, each answered: %s", len(failures), failures[0])


def _published(iq: Iq, node: str, item_id: str) -> str:
    return render.result(
        iq,
        f"<pubsub xmlns='{ns.PUBSUB}'><publish node={render.recurring_attr(node)}>"
        f"<item id='{item_id}'/></publish></pubsub>",
    )
