"""A Prosody of our own, and real slixmpp clients of it: what the XMPP tests (tests/xmpp/)
and the benchmarks (bench/xmpp.py, bench/chaos_mixed.py) both run, kept here since bench/ runs
without tests/. The server: config from harness/prosody.cfg.lua, on free ports (ports.py),
state in a folder of its own, users registered with prosodyctl (research/xmpp.md §1). The
clients: workers that subscribe, receive and settle."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

from harness.ports import free_ports
from harness.stopping import stop
from slixmpp import ClientXMPP
from slixmpp.exceptions import IqError, IqTimeout
from slixmpp.xmlstream import StanzaBase
from slixmpp.xmlstream.handler import Callback
from slixmpp.xmlstream.matcher.base import MatcherBase

from boxmq.xmpp import ns

__all__ = [
    "PS",
    "PUBSUB",
    "SECRET",
    "SERVICE",
    "TIMEOUT",
    "USERS",
    "Client",
    "Event",
    "Prosody",
    "QosRequests",
    "clients",
    "first_to_hear",
    "prosody_or_reason",
    "run_prosody",
]

CONFIG = Path(__file__).parent / "prosody.cfg.lua"
SERVICE = "queue.localhost"
PUBSUB = "pubsub.localhost"
SECRET = "boxmq-test-secret"
USERS = ("alice", "bob", "carol", "dave")


@dataclass
class Prosody:
    c2s_port: int
    component_port: int
    folder: Path
    pid: int = 0  # of the running server (bench/xmpp.py reads its CPU time)

    def password(self, user: str) -> str:
        return f"{user}-pw"

    def log(self) -> str:
        path = self.folder / "prosody.log"
        return path.read_text() if path.exists() else ""


def prosody_or_reason() -> str | None:
    """None if Prosody can run here, else why not."""
    if shutil.which("prosody") is None or shutil.which("prosodyctl") is None:
        return "prosody is not installed (make test installs it from Debian as root)"
    return None


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@contextlib.contextmanager
def run_prosody(
    folder: Path, *, component_stanza_size_limit: int = 512 * 1024
) -> Iterator[Prosody]:
    """Prosody in `folder` on two free ports (its clients' and its components', free_ports);
    `component_stanza_size_limit`: Prosody's default unless a test raises it."""
    c2s_port, component_port = free_ports(2)
    server = Prosody(c2s_port, component_port, folder)
    (folder / "certs").mkdir(parents=True, exist_ok=True)
    config = folder / "prosody.cfg.lua"
    shutil.copy(CONFIG, config)
    env = {
        **os.environ,
        "BOXMQ_PROSODY_DIR": str(folder),
        "BOXMQ_C2S_PORT": str(server.c2s_port),
        "BOXMQ_COMPONENT_PORT": str(server.component_port),
        "BOXMQ_COMPONENT_SECRET": SECRET,
        "BOXMQ_COMPONENT_STANZA_SIZE_LIMIT": str(component_stanza_size_limit),
        # As root the binary refuses to start unless told (and then half-starts): tell it.
        "BOXMQ_PROSODY_AS_ROOT": "1" if os.geteuid() == 0 else "0",
    }
    for user in USERS:
        subprocess.run(
            [
                "prosodyctl",
                "--config",
                str(config),
                "register",
                user,
                "localhost",
                server.password(user),
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=30,
        )
    with (folder / "console.log").open("w") as console:  # the process keeps its own copy
        process = subprocess.Popen(
            ["prosody", "-F", "--config", str(config)], env=env, stdout=console, stderr=console
        )
    server.pid = process.pid
    try:
        deadline = time.monotonic() + 15
        while not (_accepts(server.c2s_port) and _accepts(server.component_port)):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"prosody did not start:\n{(folder / 'console.log').read_text()}"
                )
            time.sleep(0.02)
        yield server
    finally:
        stop(process, seconds=5)


PS = ns.PUBSUB
_EVENT = ns.tag(ns.PUBSUB_EVENT, "event")
_ITEMS = ns.tag(ns.PUBSUB_EVENT, "items")
_DELETE = ns.tag(ns.PUBSUB_EVENT, "delete")
_SUBSCRIPTION = ns.tag(ns.PUBSUB_EVENT, "subscription")
TIMEOUT = 20.0  # any one wait of a client, unless its `timeout` is set otherwise


@dataclass(frozen=True)
class Event:
    what: str  # item, retract or unlock; delete (item: the node) or subscription (its state)
    item: str
    payload: ET.Element | None


class _PubsubEvents(MatcherBase):
    def __init__(self) -> None:
        super().__init__("pubsub events")

    def match(self, xml: StanzaBase) -> bool:
        return xml.xml.find(_EVENT) is not None


class QosRequests(MatcherBase):
    """An iq set carrying a urn:xmpp:qos element: a notification the service sends with QoS."""

    def __init__(self) -> None:
        super().__init__("qos requests")

    def match(self, xml: StanzaBase) -> bool:
        element = xml.xml
        return (
            element.get("type") == "set"
            and len(element) > 0
            and element[0].tag.startswith("{" + ns.QOS + "}")
        )


class Client(ClientXMPP):
    def __init__(self, server: Prosody, user: str, resource: str = "r") -> None:
        super().__init__(
            f"{user}@localhost/{resource}",
            server.password(user),
            plugin_config={"feature_mechanisms": {"unencrypted_scram": True}},
        )
        self.enable_direct_tls = False
        self.port = server.c2s_port
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.auto_retract = False
        self.received: list[str] = []
        self.retracted = 0  # retract notifications seen
        self._settling: set[asyncio.Future[ET.Element]] = set()
        self._started = asyncio.Event()
        self.add_event_handler("session_start", lambda _: self._started.set())
        self.register_handler(Callback("events", _PubsubEvents(), self._on_event))
        self.register_handler(Callback("qos", QosRequests(), self._on_qos))
        self._assured: dict[str, ET.Element] = {}  # msgId -> message, until its deliver
        self.qos_requests = 0
        self.timeout = TIMEOUT

    async def start(self) -> None:
        self.connect("127.0.0.1", self.port)
        await asyncio.wait_for(self._started.wait(), self.timeout)
        # Directed presence: how the service learns that we left (docs/xmpp.md).
        self.send_presence(pto=SERVICE)

    def _on_event(self, stanza: StanzaBase) -> None:
        self._take_events(stanza.xml)

    def _on_qos(self, stanza: StanzaBase) -> None:
        """The receiving side of urn:xmpp:qos: answer, and process each message once."""
        self.qos_requests += 1
        request = stanza.xml[0]
        kind, msg_id = request.tag.rsplit("}", 1)[-1], request.get("msgId", "")
        message = request.find("{jabber:client}message")
        reply = self.Iq()
        reply["type"] = "result"
        reply["id"] = stanza.xml.get("id")
        reply["to"] = stanza.xml.get("from")
        if kind == "acknowledged" and message is not None:
            self._take_events(message)
        elif kind == "assured" and message is not None:
            self._assured.setdefault(msg_id, message)
            reply.append(ET.fromstring(f"<received xmlns='{ns.QOS}' msgId='{msg_id}'/>"))
        elif kind == "deliver" and msg_id in self._assured:
            self._take_events(self._assured.pop(msg_id))
        reply.send()  # type: ignore[no-untyped-call]

    def _take_events(self, message: ET.Element) -> None:
        event_element = message.find(_EVENT)
        assert event_element is not None
        for child in event_element:  # XEP-0060 §8.4.2 and §8.8.4: no <items/> around them
            if child.tag == _DELETE:
                self.events.put_nowait(Event("delete", child.get("node", ""), None))
            elif child.tag == _SUBSCRIPTION:
                self.events.put_nowait(Event("subscription", child.get("subscription", ""), child))
        items = event_element.find(_ITEMS)
        for child in list(items) if items is not None else []:
            what = child.tag.rsplit("}", 1)[-1]
            event = Event(what, child.get("id", ""), child[0] if len(child) else None)
            if what == "retract":
                self.retracted += 1
            if what == "item":
                self.received.append(event.item)
                if self.auto_retract:
                    task = asyncio.ensure_future(self.retract(event.item))
                    self._settling.add(task)
                    task.add_done_callback(self._settling.discard)
            self.events.put_nowait(event)

    async def request(self, xml: str, *, type: str = "set", to: str = SERVICE) -> ET.Element:
        """Send an iq to the service; its reply (result or error) as an element."""
        iq = self.Iq()
        iq["type"] = type
        iq["to"] = to
        iq.append(ET.fromstring(xml))
        try:
            reply = await iq.send(timeout=self.timeout)  # type: ignore[no-untyped-call]
        except IqError as error:
            return error.iq.xml  # type: ignore[no-any-return]
        except IqTimeout:
            # slixmpp's own traceback names neither the request nor whom it waited for
            raise AssertionError(
                f"{self.boundjid} got no reply from {to} within {self.timeout:g} s to: {xml}"
            ) from None
        return reply.xml  # type: ignore[no-any-return]

    async def subscribe(
        self, queue_requests: int, node: str = "jobs", *, qos: str | None = None
    ) -> ET.Element:
        level = f"<field var='boxmq#qos'><value>{qos}</value></field>" if qos else ""
        return await self.request(
            f"<pubsub xmlns='{PS}'><subscribe node='{node}' jid='{self.boundjid.bare}'/>"
            f"<options><x xmlns='jabber:x:data' type='submit'>"
            f"<field var='FORM_TYPE' type='hidden'><value>{ns.SUBSCRIBE_OPTIONS}</value></field>"
            f"<field var='pubsub#queue_requests'><value>{queue_requests}</value></field>"
            f"{level}</x></options></pubsub>"
        )

    async def publish(self, payload: str, node: str = "jobs") -> str:
        reply = await self.request(
            f"<pubsub xmlns='{PS}'><publish node='{node}'><item>{payload}</item></publish></pubsub>"
        )
        assert reply.get("type") == "result", ET.tostring(reply)
        return reply.find(f".//{{{PS}}}item").get("id", "")  # type: ignore[union-attr]

    async def retract(self, item: str, node: str = "jobs") -> ET.Element:
        return await self.request(
            f"<pubsub xmlns='{PS}'><retract node='{node}'><item id='{item}'/></retract></pubsub>"
        )

    async def unlock(self, item: str, node: str = "jobs") -> ET.Element:
        return await self.request(
            f"<pubsub xmlns='{PS}'><unlock xmlns='{ns.QUEUEING}' node='{node}'>"
            f"<item id='{item}'/></unlock></pubsub>",
            type="get",  # as XEP-0254 Listing 10 writes it
        )

    async def next_event(self) -> Event:
        return await asyncio.wait_for(self.events.get(), self.timeout)


async def first_to_hear(*users: Client) -> Client:
    """The first of `users` with an event waiting (still there for it to take)."""
    while True:
        for user in users:
            if not user.events.empty():
                return user
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def clients(server: Prosody, *users: str) -> AsyncIterator[list[Client]]:
    started = [Client(server, user) for user in users]
    try:
        await asyncio.gather(*(c.start() for c in started))
        yield started
    finally:
        # Each disconnect ends its stream, or aborts the socket after 0.5 s without an answer.
        # Awaited: a scenario that returned first left the socket open on a busy machine, and
        # its ResourceWarning failed whichever test the garbage collector ran in next.
        await asyncio.gather(*(client.disconnect(wait=0.5) for client in started))
