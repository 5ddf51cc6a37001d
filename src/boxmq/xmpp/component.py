"""The XEP-0114 component: the only XMPP code that awaits (docs/xmpp.md).

A thin `slixmpp.ComponentXMPP`: the stanzas the door serves go to the service as raw
elements (iq, unavailable presence, messages), the service answers with XML text written
straight to the transport. Deliveries are taken on the loop (no thread per subscriber): once
after each batch of stanzas, and on the one timer task, which also runs lock timeouts and QoS
retries. A lost connection is retried with back-off. A refusal by the server (a second
instance with this name: conflict, a wrong secret: not-authorized, a name it has no
component of: host-unknown) is final: `run_component` raises ComponentRefused, as it does
at once for a second process serving this name from the same root (a flock:
records.hold_component).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from xml.etree.ElementTree import Element

from slixmpp import ComponentXMPP
from slixmpp.xmlstream import StanzaBase

from boxmq.client.box import Box
from boxmq.core.durations import spelled
from boxmq.errors import BoxMQError
from boxmq.host_names import host_port
from boxmq.xmpp import ns
from boxmq.xmpp.records import ComponentHeld, hold_component
from boxmq.xmpp.service import QueueService
from boxmq.xmpp.settings import XmppSettings, component_domain

__all__ = ["ComponentRefused", "QueueComponent", "run_component"]

log = logging.getLogger("boxmq.xmpp")

_IQ = ns.tag(ns.COMPONENT, "iq")
_PRESENCE = ns.tag(ns.COMPONENT, "presence")
_MESSAGE = ns.tag(ns.COMPONENT, "message")
POLL = 0.05  # seconds: how soon messages that others put reach the subscribers
# Seconds the commit and the deliveries of a batch of stanzas wait for more stanzas to join
# it: under load one commit and one look at the queue serve several stanzas instead of one
# each (docs/benchmarks.md, XMPP); idle, a publish is answered this much later.
GATHER = 0.002
_FINAL_STREAM_ERRORS = {"conflict", "not-authorized", "host-unknown", "invalid-namespace"}


class ComponentRefused(BoxMQError):
    """The XMPP server will not take this component (name taken, wrong secret, a name it
    does not serve), or another process serves it from this root."""


class QueueComponent(ComponentXMPP):
    def __init__(self, box: Box, settings: XmppSettings) -> None:
        # XmppSettings refused a component name that is no JID ('a b'), naming it as written.
        # The domain as the server compares it: slixmpp opens the stream to the name as given,
        # and Prosody refused `Queue.Example` for its `queue.example` (host-unknown).
        self.domain = domain = component_domain(settings.component)
        super().__init__(  # type: ignore[no-untyped-call]  # ComponentXMPP.__init__ is untyped
            domain, settings.secret, settings.host, settings.port
        )
        self.settings = settings
        self.refused: str | None = None
        self.connected = asyncio.Event()
        self._stopping = False
        self._told_left_over = False
        self._delay = 0.5
        self._poll_pending = False
        self._outgoing: list[str] = []  # stanzas of this loop iteration, written in one go
        self._once_written: list[Callable[[], None]] = []  # run once those are written
        self.service = QueueService(
            box,
            domain=domain,
            send=self._send,
            lock_timeout=settings.lock_timeout,
            stanza_size_limit=settings.stanza_size_limit,
        )
        self.add_event_handler("session_start", self._started)
        self.add_event_handler("disconnected", self._disconnected)
        self.add_event_handler("stream_error", self._stream_error)
        self.add_event_handler("connection_failed", self._connection_failed)
        self._timer = asyncio.get_running_loop().create_task(self._expire_locks())

    # -- stanzas in --------------------------------------------------------------------------

    def _spawn_event(self, xml: Element) -> None:
        """Hand the stanzas the door serves to the service as plain elements, before slixmpp
        builds stanza objects and matches them against every handler: that layer cost more
        than all the rest of an item (docs/xmpp.md, Performance). Anything else (the
        handshake, stream errors) takes slixmpp's usual way."""
        xml = self.incoming_filter(xml)  # type: ignore[no-untyped-call]  # jabber:client -> ours
        try:
            self._serve(xml)
        except Exception:
            # Raised, it left slixmpp's data_received (slixmpp guards its own handlers, which
            # these stanzas bypass), and asyncio closed the transport: the stream ended, an
            # OSError without a word, every notification in flight and the stanzas read
            # with it lost, the sender unanswered.
            log.exception("%s not served", _described(xml))
            self.service.unserved(xml)
            self._poll_soon()

    def _serve(self, xml: Element) -> None:
        tag, kind = xml.tag, xml.get("type", "")
        if tag == _IQ:
            if kind in ("get", "set"):
                self.service.iq(xml)
                self._poll_soon()
            else:
                self.service.answer(xml)  # a result or error for a notification sent with QoS
        elif tag == _MESSAGE:  # to a node (urn:xmpp:qos, at most once), or a bounced event
            self.service.message(xml)
            self._poll_soon()
        elif tag == _PRESENCE and kind == "unavailable":  # XEP-0254 §4: gone
            self.service.gone(xml.get("from", ""))
            self._poll_soon()
        elif tag != _PRESENCE:
            super()._spawn_event(xml)

    def _poll_soon(self) -> None:
        """Commit the publishes and take new deliveries once the stanzas that arrive
        together (within GATHER) are all handled."""
        if not self._poll_pending:
            self._poll_pending = True
            asyncio.get_running_loop().call_later(GATHER, self._poll)

    def _poll(self) -> None:
        self._poll_pending = False
        try:
            self.service.flush()  # the batch's publishes, one commit per queue
            if self.connected.is_set():  # else the timer's round after the reconnect
                self.service.poll_touched()
        except Exception:
            # A bug: raised, it went to asyncio's handler ("Exception in callback"), without
            # a word of what was left undone. The timer's next round takes the deliveries.
            log.exception(
                "a batch of stanzas' publishes or deliveries failed; the timer's next round "
                "takes the deliveries again"
            )

    # -- stanzas out -------------------------------------------------------------------------

    def _send(self, xml: str) -> None:
        """Queue a stanza; all of one loop iteration go out in one write (one system call for
        a batch of answers and notifications, not one each)."""
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing.append(xml)

    def _flush(self) -> None:
        """Write to the server; while disconnected the stanzas are dropped, and what they
        carried comes back through the lock timeout (nothing is lost, it is only late)."""
        data, self._outgoing = "".join(self._outgoing), []
        written, self._once_written = self._once_written, []
        transport = self.transport
        if transport is None or transport.is_closing():
            log.debug("not connected; dropped %.80s", data)
            return
        transport.write(data.encode())
        for then in written:
            then()

    def _after_written(self, then: Callable[[], None]) -> None:
        """Run `then` once the stanzas sent so far are handed to the transport (the next
        `_flush`); never if they are dropped, the connection lost meanwhile."""
        self._once_written.append(then)

    # -- connection --------------------------------------------------------------------------

    def _started(self, _: object) -> None:
        self._delay = 0.5
        self.connected.set()
        if not self._told_left_over:  # the first connection, before any stanza is served
            self._told_left_over = True
            self.service.tell_left_over(self._after_written)
        log.info(
            "XMPP component %s connected to %s",
            self.domain,
            host_port(self.settings.host, self.settings.port),
        )

    def _stream_error(self, error: StanzaBase) -> None:
        condition = error["condition"]
        if condition in _FINAL_STREAM_ERRORS:
            text = error["text"] or condition
            self.refused = f"the XMPP server refused component {self.domain}: {text}"
            if condition == "conflict":
                self.refused += " (another instance with this name is connected)"
            elif condition == "not-authorized":
                # Prosody's text ("Given token does not match calculated token") names no fix.
                self.refused += (
                    " (not-authorized: the secret differs from the server's component_secret "
                    "for this component; check $BOXMQ_XMPP_SECRET, --xmpp-secret-file or "
                    "--xmpp-secret)"
                )
            elif condition == "host-unknown":
                # Prosody's text ("... does not match any configured external components")
                # says neither where the name is configured nor where it comes from here.
                self.refused += (
                    f" (host-unknown: the server serves no component {self.domain}; add "
                    f'Component "{self.domain}" with its component_secret to its '
                    "configuration and reload or restart it, or give --xmpp-component the name "
                    "configured there)"
                )
            log.error("%s", self.refused)

    def _disconnected(self, _: object) -> None:
        self.connected.clear()
        if self._stopping or self.refused:
            return
        log.warning("XMPP server connection lost; reconnecting in %s", spelled(self._delay))
        delay, self._delay = self._delay, min(self._delay * 2, self.settings.reconnect_max)
        asyncio.get_running_loop().call_later(delay, self._reconnect)

    def _connection_failed(self, error: object) -> None:
        log.warning(
            "cannot reach the XMPP server at %s (%s); retrying (check --xmpp-server and "
            "that the server listens for components there)",
            host_port(self.settings.host, self.settings.port),
            error,
        )

    def reschedule_connection_attempt(self) -> asyncio.Future[None] | None:
        """slixmpp's own back-off while the server cannot be reached grows to 300 s; ours
        stops at `reconnect_max`, as after a dropped connection."""
        attempt = super().reschedule_connection_attempt()
        # read when the attempt starts, on a later turn of the loop
        self._connect_loop_wait = min(self._connect_loop_wait, self.settings.reconnect_max)
        return attempt

    def _reconnect(self) -> None:
        if not (self._stopping or self.refused):
            self.connect()

    async def _expire_locks(self) -> None:
        while True:
            deadline = self.service.next_deadline()
            pause = POLL if deadline is None else min(POLL, max(0.0, deadline - time.time()))
            await asyncio.sleep(pause)
            try:
                self.service.flush()
                self.service.expire(time.time())
                # Nothing is taken while disconnected: each item would be locked to a
                # subscriber who cannot hear of it, time out unseen, a delivery closer to
                # error/, and each subscriber would look silent, then gone.
                if self.connected.is_set():
                    self.service.poll()
            except Exception:  # a bug must not stop the one timer: timeouts depend on it
                log.exception("lock timeouts and deliveries")

    async def stop(self) -> None:
        self._stopping = True
        self._timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._timer
        self.service.flush()  # publishes of the last batch are stored and answered
        # every subscriber's locks go back to target/, and each is told its subscription
        # ended, before the stream's end; with no server to tell, the next start does
        self.service.close(heard=self.connected.is_set(), once_written=self._after_written)
        self._flush()
        # Between two tries there is no stream to end, but a try under way would connect
        # after the stop, with no one left to close its socket.
        self.cancel_connection_attempt()
        if self.transport is not None:
            await self.disconnect(wait=1.0)


def _described(stanza: Element) -> str:
    """How a log line names a stanza: `set iq 'a1' from alice@example.org/r`, `unavailable
    presence from ...` (an id cut at 80 characters, as the service's lines cut it)."""
    words = [stanza.get("type", ""), stanza.tag.rsplit("}", 1)[-1]]
    if (stanza_id := stanza.get("id")) is not None:
        words.append(repr(stanza_id[:80]))
    return " ".join(word for word in words if word) + f" from {stanza.get('from', '?')}"


async def run_component(box: Box, settings: XmppSettings, stop: asyncio.Event) -> None:
    """Serve the component until `stop` is set; ComponentRefused if the server says no, or
    if another process serves this component from this root (records.hold_component).
    Its log lines and errors name it by its domain, as the server and its records do (a
    final dot and capitals gone); the name as typed is said once, at start."""
    domain = component_domain(settings.component)
    if domain != settings.component:
        log.info("XMPP component %r is served as %s (RFC 7622)", settings.component, domain)
    try:
        held = hold_component(box.root, settings.component)
    except ComponentHeld as error:
        by = f" (process {error.holder})" if error.holder else ""
        raise ComponentRefused(
            f"XMPP component {domain} is served from {box.root} by another "
            f"process{by}: one process per component and root, or each would take the "
            "other's subscribers for a crashed one's and tell them their subscriptions "
            "ended; stop the other, or give this one another component name"
        ) from None
    try:
        component = QueueComponent(box, settings)
        component.connect()
        try:
            while not stop.is_set() and component.refused is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=0.2)
        finally:
            await component.stop()
    finally:
        if held is not None:
            held.release()  # the records are this process's no more: the next may read them
    if component.refused is not None:
        raise ComponentRefused(component.refused)
