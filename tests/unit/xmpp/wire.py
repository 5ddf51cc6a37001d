"""A QueueService with no server: stanzas in as text, stanzas out as parsed elements."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from xml.etree import ElementTree as ET

import boxmq
from boxmq.xmpp import ns
from boxmq.xmpp.service import QueueService
from boxmq.xmpp.settings import STANZA_SIZE_LIMIT

SERVICE = "queue.localhost"
ALICE = "alice@localhost/a"
BOB = "bob@localhost/b"
CAROL = "carol@localhost/c"

PS = ns.PUBSUB
EVENT = ns.tag(ns.PUBSUB_EVENT, "event")
STANZA_NS = ns.STANZAS


def in_stream(xml: str) -> ET.Element:
    return ET.fromstring(f"<stream xmlns='{ns.COMPONENT}'>{xml}</stream>")[0]


class Wire:
    def __init__(
        self,
        box: boxmq.Box,
        *,
        lock_timeout: float = 30.0,
        domain: str = SERVICE,
        now: Callable[[], float] = time.time,
        stanza_size_limit: int = STANZA_SIZE_LIMIT,
    ) -> None:
        self.sent: list[str] = []
        self.service = QueueService(
            box,
            domain=domain,
            send=self.sent.append,
            lock_timeout=lock_timeout,
            now=now,
            stanza_size_limit=stanza_size_limit,
        )
        self._n = 0
        self._backlog: list[ET.Element] = []

    def iq(self, sender: str, inner: str, *, type: str = "set", to: str = SERVICE) -> ET.Element:
        """Send one iq; return its reply (and keep any other stanzas for `take`)."""
        self._n += 1
        iq_id = f"t{self._n}"
        self.service.iq(
            in_stream(f"<iq type='{type}' id='{iq_id}' from='{sender}' to='{to}'>{inner}</iq>")
        )
        self.service.flush()  # as the component does after each batch of stanzas
        stanzas = self.take()
        replies = [e for e in stanzas if e.tag.endswith("}iq") and e.get("id") == iq_id]
        self._backlog = [e for e in stanzas if e not in replies]
        assert len(replies) == 1, [ET.tostring(e) for e in stanzas]
        return replies[0]

    def message(self, xml: str) -> list[ET.Element]:
        """Send one <message/> as the server writes it to the component; return every
        stanza the service sent since (a message is answered only when refused)."""
        self.service.message(in_stream(xml))
        self.service.flush()  # as the component does after each batch of stanzas
        return self.take()

    def take(self) -> list[ET.Element]:
        """Stanzas sent since the last look (replies already taken by `iq` excluded)."""
        out = self._backlog + [in_stream(x) for x in self.sent]
        self.sent.clear()
        self._backlog = []
        return out

    def events(self) -> list[tuple[str, str, str]]:
        """(to, what, item id) for each pubsub#event sent: what is item, retract or unlock."""
        self.service.poll()
        found = []
        for stanza in self.take():
            event = stanza.find(EVENT)
            if event is None:
                continue
            for child in event.find(ns.tag(ns.PUBSUB_EVENT, "items")) or []:
                found.append(
                    (stanza.get("to", ""), child.tag.rsplit("}", 1)[-1], child.get("id", ""))
                )
        return found

    def items_to(self, jid: str) -> list[str]:
        """The ids of the items sent to `jid` since the last look (after a poll)."""
        return [item for to, what, item in self.events() if what == "item" and to == jid]

    # -- requests by name ----------------------------------------------------------------------

    def create(self, node: str = "jobs") -> ET.Element:
        return self.iq(ALICE, f"<pubsub xmlns='{PS}'><create node='{node}'/></pubsub>")

    def subscribe(self, jid: str, queue_requests: int | None, node: str = "jobs") -> ET.Element:
        if queue_requests is not None:
            return self.subscribe_with_options(
                jid, ("pubsub#queue_requests", str(queue_requests)), node=node
            )
        bare = jid.split("/")[0]
        return self.iq(
            jid, f"<pubsub xmlns='{PS}'><subscribe node='{node}' jid='{bare}'/></pubsub>"
        )

    def subscribe_with_options(
        self, jid: str, *fields: tuple[str, str | list[str]], node: str = "jobs"
    ) -> ET.Element:
        """A subscribe whose options form gives `fields` after its FORM_TYPE, each with its
        value or, a list, its several values."""
        given = "".join(
            f"<field var='{var}'>"
            + "".join(f"<value>{v}</value>" for v in ([value] if isinstance(value, str) else value))
            + "</field>"
            for var, value in fields
        )
        bare = jid.split("/")[0]
        return self.iq(
            jid,
            f"<pubsub xmlns='{PS}'><subscribe node='{node}' jid='{bare}'/><options>"
            "<x xmlns='jabber:x:data' type='submit'><field var='FORM_TYPE' type='hidden'>"
            f"<value>{ns.SUBSCRIBE_OPTIONS}</value></field>{given}</x></options></pubsub>",
        )

    def unsubscribe(self, jid: str, node: str = "jobs") -> ET.Element:
        bare = jid.split("/")[0]
        return self.iq(
            jid, f"<pubsub xmlns='{PS}'><unsubscribe node='{node}' jid='{bare}'/></pubsub>"
        )

    def publish(self, payload: str = "<job xmlns='urn:example'>1</job>", node: str = "jobs") -> str:
        reply = self.iq(
            CAROL,
            f"<pubsub xmlns='{PS}'><publish node='{node}'>"
            f"<item>{payload}</item></publish></pubsub>",
        )
        assert reply.get("type") == "result", ET.tostring(reply)
        item = reply.find(f"{{{PS}}}pubsub/{{{PS}}}publish/{{{PS}}}item")
        assert item is not None
        return item.get("id", "")

    def retract(self, jid: str, item: str, *, type: str = "set", node: str = "jobs") -> ET.Element:
        return self.iq(
            jid,
            f"<pubsub xmlns='{PS}'><retract node='{node}'><item id='{item}'/></retract></pubsub>",
            type=type,
        )

    def unlock(
        self,
        jid: str,
        item: str,
        *,
        type: str = "get",
        namespace: str = ns.QUEUEING,
        node: str = "jobs",
    ) -> ET.Element:
        return self.iq(
            jid,
            f"<pubsub xmlns='{PS}'><unlock xmlns='{namespace}' node='{node}'>"
            f"<item id='{item}'/></unlock></pubsub>",
            type=type,
        )


def condition(reply: ET.Element) -> tuple[str, str]:
    """(error type, RFC 6120 condition) of an iq-error."""
    assert reply.get("type") == "error", ET.tostring(reply)
    error = reply.find(ns.tag(ns.COMPONENT, "error"))
    assert error is not None
    names = [c.tag.rsplit("}", 1)[-1] for c in error if c.tag.startswith("{" + STANZA_NS)]
    return error.get("type", ""), names[0]


def form_values(reply: ET.Element) -> dict[str | None, str | None]:
    """Each field of the data form in `reply` (a subscribe's options, a node's
    configuration), by its var, and its first value."""
    return {
        f.get("var"): f.findtext(ns.tag(ns.DATA, "value"))
        for f in reply.iter(ns.tag(ns.DATA, "field"))
    }


def error_text(reply: ET.Element) -> str:
    """The RFC 6120 <text/> of an iq-error, what it tells a person; "" for none."""
    return reply.findtext(f".//{{{STANZA_NS}}}text") or ""


def ready_messages(box: boxmq.Box) -> list[boxmq.Message]:
    """The messages stored ready in the queue node `jobs`, taken by a consumer of its own
    (`check`), as a subscriber would be handed them."""
    consumer = box.queue("jobs").consumer("check", max_in_flight=10)
    out = []
    while (message := consumer.receive_nowait()) is not None:
        out.append(message)
    consumer.close()
    return out


@contextlib.contextmanager
def wired(
    box: boxmq.Box,
    *,
    node: str | None = "jobs",
    lock_timeout: float = 30.0,
    now: Callable[[], float] = time.time,
) -> Iterator[Wire]:
    """What each `wire` fixture yields: a Wire on `box` (`lock_timeout`, `now`: its own), the
    node `node` made (None: none), its service closed after the test."""
    wire = Wire(box, lock_timeout=lock_timeout, now=now)
    if node is not None:
        assert wire.create(node).get("type") == "result"
    yield wire
    wire.service.close()
