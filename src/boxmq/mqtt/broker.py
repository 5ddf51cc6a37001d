"""The MQTT broker: sessions, routing, and the bridge to the dropboxes. Runs on the asyncio loop.

Where messages live (DESIGN.md §2, "persistence follows the subscriber"):
- A non-persistent session's plain subscriptions are in memory (the core Router here): what
  only such sessions want never touches the disk, and their QoS 1/2 state is in memory too.
- A persistent session's subscriptions and every share group are dropboxes of the Box: a
  publish that any of them matches is written (and flushed, per the fsync policy) before the
  publisher gets its PUBACK / PUBREC; the loop takes messages out of them with
  `receive_nowait` whenever a publish went in, a client acknowledged, or the timer ticks.
- QoS 2 from a client goes through the Box's exactly-once intake (working/ -> PUBREC;
  PUBREL -> target/ -> PUBCOMP) when the message must be on disk (a persistent publisher or a
  durable subscriber); otherwise the packet id is remembered in the session until PUBREL.

This module is the coordinator: connections (accepted, read, closed), the dispatch of a
client's packets (a CONNECT handed to `connect_answers`) and DISCONNECT, and the timer. It
owns the registries (sessions, connected clients, memory and durable subscriptions) and hands
them to the parts that do the work, each in its own module: `clients` (what is written to a
client), `batches` (its disk work), `publishing` (PUBLISH, PUBREL, Wills published),
`delivery` (to subscribers, acks), `subscribing` (SUBSCRIBE, UNSUBSCRIBE, durable
subscriptions), `recording` (session records), `lifetimes` (sessions' ends), `wills` (delayed
Wills), `connect_answers` (a CONNECT answered: its password, its session, CONNACK or a
refusal), `connect_terms` (what a CONNECT is granted or refused), `sys_figures` (what
$SYS counts), `admission` (max_connections), `password_checks` (CONNECTs' passwords, in
threads), `resuming` (a CONNECT's session taken over, resumed, or read from the disk),
`claim_wait` (a CONNECT waiting for another server's claim on its session), `taken_elsewhere`
(a connected session another server on this root took meanwhile), `disconnects`
(what a DISCONNECT says, and the end of a connection's reading), `idle_walk` (the ticks'
walk through the sessions with durable subscriptions).

Invariants:
- File work for a client's PUBLISHes runs as one batch per read (`disk.run_all`: a flush never
  blocks the loop), and a client's batches run in order: its acknowledgements and its messages
  keep their order (batches.py).
- Under fsync=always, the records an answer stands for (a persistent session's before its
  CONNACK, a subscription's before its SUBACK) are flushed first, by a worker thread: the
  answer waits (`Recorder.write`), and so do the client's packets behind a SUBSCRIBE
  (`Client.held`, handled by `_resume`). Under the other policies they are written at once on
  the loop.
- Only this module maps sessions to connections; `Link` is all it knows of a socket.
- A PUBLISH and a PUBACK cost no call more than before the split: the broker calls the
  methods of Publishing and Delivery (`self._publishing.publish`), which call their
  collaborators' the same way. Not bound methods kept as attributes: CPython 3.11 calls those
  more slowly than an attribute's method.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Final

import boxmq
from boxmq.client.box import Box
from boxmq.client.subscriber import Subscriber
from boxmq.clock import Clock, periodic_due
from boxmq.core import parse_filter
from boxmq.core.deadlines import Deadlines
from boxmq.core.durations import spelled
from boxmq.errors import ProtocolViolation
from boxmq.model import ConsumerId
from boxmq.mqtt.admission import Admission
from boxmq.mqtt.batches import Batches
from boxmq.mqtt.claim_wait import waits_for_claim
from boxmq.mqtt.clients import Client, Link, Outgoing, log_level
from boxmq.mqtt.connect_answers import ConnectAnswers
from boxmq.mqtt.connect_terms import connecting
from boxmq.mqtt.delivery import Delivery
from boxmq.mqtt.disconnects import stop_reading, take_disconnect
from boxmq.mqtt.disk import Job
from boxmq.mqtt.drops import DropLog, tell_by_host
from boxmq.mqtt.errors import ProtocolError
from boxmq.mqtt.idle_walk import IdleWalk
from boxmq.mqtt.lifetimes import Lifetimes
from boxmq.mqtt.outbox import Stage
from boxmq.mqtt.packets import (
    Auth,
    Connect,
    Disconnect,
    Incoming,
    Pingreq,
    Pingresp,
    ProtocolVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    Unsubscribe,
)
from boxmq.mqtt.password_checks import PasswordChecks
from boxmq.mqtt.peer_address import PeerAddress
from boxmq.mqtt.publishing import Publishing
from boxmq.mqtt.reasons import ReasonCode, reason_for
from boxmq.mqtt.recording import Recorder
from boxmq.mqtt.resuming import Resuming
from boxmq.mqtt.routes import DurableRoutes, MemoryRoutes
from boxmq.mqtt.session import Session
from boxmq.mqtt.session_record import (
    records_folder,
)
from boxmq.mqtt.settings import MqttSettings
from boxmq.mqtt.stored import (
    consumer_name,
)
from boxmq.mqtt.subscribing import Subscribing
from boxmq.mqtt.sys_figures import Traffic, send_changed
from boxmq.mqtt.sys_topics import Figures, SysTopics
from boxmq.mqtt.taken_elsewhere import TakenElsewhere
from boxmq.mqtt.wills import Wills, will_delay
from boxmq.store.commit import FsyncPolicy
from boxmq.store.process import process_token

__all__ = ["Broker", "Link"]

log = logging.getLogger("boxmq.mqtt")

_R = ReasonCode


# What an acknowledgement answers, as `_handle` reads it per packet: an Enum member read off
# its class costs about 640 instructions more than a module's name (outbox.py).
_AWAIT_PUBACK: Final = Stage.AWAIT_PUBACK
_AWAIT_PUBREC: Final = Stage.AWAIT_PUBREC
_AWAIT_PUBCOMP: Final = Stage.AWAIT_PUBCOMP
_SUCCESS: Final = ReasonCode.SUCCESS
_STAGE_OF: Final[Mapping[type[Puback | Pubrec | Pubrel | Pubcomp], Stage]] = {  # not Pubrel
    Puback: _AWAIT_PUBACK,
    Pubrec: _AWAIT_PUBREC,
    Pubcomp: _AWAIT_PUBCOMP,
}

_ACKS: Final = (tuple, Puback, Pubrec, Pubrel, Pubcomp)  # what `_handle` takes as an answer
# Seconds between the sweeps for sessions held by servers of this host that died
# (Lifetimes.adopt_the_dead): a stat of the records folder while nothing changed there and
# no server of this host died, else a stat per record, read only if written since.
_ADOPT_EVERY: Final = 1.0


class Broker:
    """What server.py drives: `opened`, `received`, `closed`, `flush`, `tick`, `pump_all`,
    `resume_expiries` (at start) and `close` (at shutdown)."""

    def __init__(self, box: Box, settings: MqttSettings, clock: Clock) -> None:
        self.box = box
        self.settings = settings
        self.limits = settings.limits
        self._clock = clock
        self._clients: dict[Link, Client] = {}
        sys_topics = SysTopics(
            settings.sys_interval,
            version=f"boxmq version {boxmq.__version__}",
            started=clock.now(),
        )
        self._sessions: dict[str, Session] = {}
        self._links: dict[str, Client] = {}  # client id -> its connected client
        self._memory = MemoryRoutes()  # non-persistent sessions' plain subscriptions
        self._durable_routes = DurableRoutes(box)
        self._durable: dict[str, dict[str, Subscriber]] = {}  # client id -> filter -> dropbox
        # The consumers of the dropboxes this process put messages in, with those dropboxes'
        # `queue` (Box.listen_offered, from the disk threads), until `pump_all` takes them;
        # and the connected clients by their consumer name (stored.consumer_name), which
        # those are.
        self._offered: deque[tuple[str, str]] = deque()
        self._named: dict[str, str] = {}
        box.listen_offered(self._listener)
        # The ticks' walk through the connected sessions with durable subscriptions.
        self._walk = IdleWalk(clock.now())
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="boxmq-mqtt-disk")
        self._checks = PasswordChecks()  # in threads, in turn by address
        self._out = Outgoing()  # the clients to be written at the end of this iteration
        self._out.before_writes = self._record_unrecorded
        self._delivery = Delivery(
            box,
            clock,
            self._out,
            sessions=self._sessions,
            links=self._links,
            memory=self._memory,
            durable=self._durable,
        )
        self._publishing = Publishing(
            box,
            settings,
            self._out,
            self._delivery,
            self._durable_routes,
            self._pool,
            self._kick,
            clock,
            stored=self._batch_ready,
        )
        self._batches = Batches(
            box, self._pool, self._batch_done, ready=self._batch_ready, clock=clock
        )
        self._token = process_token()  # names this broker in the session records it writes
        # Under fsync=always a client is told of a record (CONNACK, SUBACK) once it is on disk.
        self._records = Recorder(
            box.root,
            self._token,
            flushed=box.fsync is FsyncPolicy.ALWAYS,
            out=self._out,
            batches=self._batches,
        )
        self._wills = Wills(
            box.root,
            clock,
            self._token,
            self._sessions,
            self._publishing.publish_will,
            self._out.flush,
            self._records.will_sent,
        )
        self._lifetimes = Lifetimes(
            box,
            clock,
            self._token,
            self._wills,
            sessions=self._sessions,
            memory=self._memory,
            durable=self._durable,
            after_disk_work=self._after_disk_work,
            remove_record=self._records.remove,
            refused_here=self._records.refused_here,
            max_expiry=self.limits.max_session_expiry,
        )
        # A connected session another broker on this root took meanwhile.
        self._taken = TakenElsewhere(
            box.root, self._records, self._lifetimes, self._wills, self._batches, self._kick
        )
        self._subscribing = Subscribing(
            box,
            settings,
            clock,
            self._out,
            self._delivery,
            self._records,
            sessions=self._sessions,
            memory=self._memory,
            durable=self._durable,
            kick=self._kick,
            resume=self._resume,
            sys_topics=sys_topics,
        )
        self._resuming = Resuming(
            box,
            settings,
            clock,
            self._token,
            self._wills,
            self._lifetimes,
            self._subscribing,
            self._delivery,
            sessions=self._sessions,
            links=self._links,
            durable=self._durable,
            held_totals=self._publishing.held_totals,
            kick=self._kick,
        )
        # When each connection is next looked at by the timer: its CONNECT timeout, then its
        # keep-alive. A tick looks at those due, not at every connection (`_look_at`).
        self._timers: Deadlines[Client] = Deadlines()
        self._connects = ConnectAnswers(
            settings,
            clock,
            self._checks,
            self._resuming,
            self._lifetimes,
            self._wills,
            self._records,
            self._batches,
            self._out,
            self._delivery,
            self._subscribing,
            clients=self._clients,
            sessions=self._sessions,
            links=self._links,
            named=self._named,
            timers=self._timers,
            take_turns=partial(self._share_turns, take=True),
            resume=self._resume,
            closed=self.closed,
            after_disk_work=self._after_disk_work,
        )
        self._next_adoption = 0.0  # the next sweep for sessions of dead servers (tick)
        self._admission = Admission(self.limits.max_connections)
        self._sys = sys_topics
        self._traffic = Traffic()  # what the connections counted, for $SYS
        # Sockets closed at connect_timeout, by client host and why (no CONNECT, or its
        # password still waiting for its check): a script or a scanner that opens them by the
        # hundred, or a burst of logins, wrote a line each; the first told, the rest counted.
        self._silent: DropLog[tuple[str, str]] = DropLog()
        # A record's write that its process did not live to rename leaves a temporary there.
        box.sweep_temporaries_in(records_folder(box.root))

    # -- connections -------------------------------------------------------------------------------

    def opened(self, link: Link, accepted: float | None = None) -> bool:
        """A socket was accepted (`accepted`, when it was before its TLS handshake: the CONNECT
        timeout counts from then); False if over max_connections (close it)."""
        if not self._admission.room_for(link.peer, len(self._clients)):
            return False
        opened = self._clock.now() if accepted is None else accepted
        client = self._clients[link] = Client(link, opened)
        self._timers.set(client, client.opened + self.limits.connect_timeout)
        return True

    def handshake_started(self, peer: PeerAddress) -> bool:
        """A socket of a TLS listener was accepted; False if over max_connections (close it).
        Its handshake counts as a connection until `handshake_ended`: each holds memory and a
        descriptor for up to connect_timeout, so stalled ones must not go past the limit."""
        return self._admission.handshake_started(peer, len(self._clients))

    @property
    def handshaking(self) -> int:
        """TLS handshakes under way, counted as connections for max_connections."""
        return self._admission.handshaking

    def handshake_ended(self) -> None:
        """A handshake counted by `handshake_started` is over (its connection, if it made
        one, is counted by `opened` from now on)."""
        self._admission.handshake_ended()

    def received(self, link: Link, packets: Iterable[Incoming]) -> None:
        """Act on what a read brought. ProtocolViolation goes back to the caller (close)."""
        client = self._clients[link]
        if client.held is not None:
            client.held.extend(packets)
            return
        self._durable_routes.recheck()
        # A SUBSCRIBE that waits for the disk takes the rest (subscribing.hold_the_rest): no
        # packet pays for a check.
        client.reading = iter(packets)
        deferring = self._delivery.defer_routes()
        try:
            for packet in client.reading:
                self._handle(client, packet)
        finally:
            client.reading = None
            if self._delivery.settled:
                self._delivery.refill()
            if client.jobs:
                self._batches.received(client)
            self._out.flush_first(client)
            if deferring:
                self._delivery.route_deferred()
            self._out.flush_soon()

    def _record_unrecorded(self) -> None:
        """Before any client is written (Outgoing.before_writes): the persistent sessions
        about to be sent a PUBREL, or a QoS 2 PUBLISH, have their records written (unflushed:
        a SIGKILL keeps the page cache), so that a restart sends those PUBRELs again, and
        those PUBLISHes under their packet ids with DUP (session_record.py)."""
        if not self._delivery.unrecorded:
            return
        unrecorded, self._delivery.unrecorded = self._delivery.unrecorded, {}
        taken: list[tuple[Client, Callable[[Client], None]]] = []
        for client_id, session in unrecorded.items():
            client = self._links.get(client_id)
            if client is None or client.session is not session:
                continue
            close = self._taken.closes(session)  # taken elsewhere, or its record unseen
            if close is not None:
                taken.append((client, close))  # after the others' records: a kick writes all
                continue
            self._records.ahead(client, self._records.record(session))
        for client, close in taken:
            # What it was about to be sent is dropped unsent: its record, which would name
            # those packet ids, is not written, and the messages stay locked to the session
            # for its next resumption (from the disk, or by the server that took it:
            # `Resuming._take_back`), never sent on a connection its client may have left.
            client.link.connection.data_to_send()
            close(client)

    def _after_disk_work(
        self, client_id: str, work: Callable[[], object], then: Callable[[object], None]
    ) -> bool:
        """Lifetimes' `AfterDiskWork`: as a job of the latest connection of the client id
        with disk work (batches.py), if one has any."""
        last = self._batches.last(client_id)
        if last is None:
            return False
        last.jobs.append(Job(work, then))
        self._batches.start(last)
        return True

    def closed(self, link: Link, reason: str) -> None:
        """The socket is gone (or about to be): the session lives on or ends."""
        client = self._clients.pop(link, None)
        if client is None:
            return
        self._timers.discard(client)
        self._traffic.retire(link)
        stop_reading(client)
        session = client.session
        if session is None or self._links.get(session.client_id) is not client:
            return  # never connected, or taken over by a newer connection
        if client.held:
            self._held_at_close(client, session)
        del self._links[session.client_id]
        self._named.pop(consumer_name(session.client_id), None)
        session.connected = False
        level = log_level(client)  # DEBUG if counted (connect_answers)
        log.log(level, "client %s disconnected (%s)", session.client_id, reason)
        self._share_turns(session, take=False)
        will = None if client.clean_exit else session.will
        session.will = None
        now = self._clock.now()
        due = None if will is None else now + will_delay(will, session.expiry)
        if session.persistent and self._taken.at_close(session):
            self._taken.let_go(client, session, will)
        elif session.persistent:
            # The Will is written down, and stays until it went out and was written (Wills):
            # a restart sends it (resume_expiries), at once if due. Dropped here, one sent at
            # once was lost by a SIGKILL before its write for the durable subscribers ended.
            record = self._records.record(session, disconnected_at=now, will=will, will_due=due)
            self._records.save(client, record)  # before the Will: a job of `client`'s first
            if will is not None:
                self._wills.schedule(session, will, client, record)
            self._lifetimes.schedule_expiry(session)
            for subscriber in self._durable.get(session.client_id, {}).values():
                subscriber.rest()  # its watcher's descriptors, until its client is back
        else:
            if will is not None:
                self._wills.schedule(session, will, client, None)
            if client.jobs:  # its last read's (a PUBREL before DISCONNECT): before the end's
                self._batches.start(client)
            self._lifetimes.end(session)
        self.flush()

    def flush(self) -> None:
        self._out.flush()

    def clock_stepped(self, by: float) -> None:
        """The wall clock was stepped `by` seconds (NTP, `date -s`: MqttServer tells it
        against a monotonic clock). The keep-alives and CONNECT timeouts count from each
        connection's last packet and opening, read from that clock: they move with it, or a
        step forward closed every connection (and sent its Will) at the next tick, and a step
        back kept a silent one open the step longer. The delayed Wills and the ends of the
        sessions away move too, as the loop's real-time timers that timed them did; the $SYS
        uptime does not count the step, and the $SYS figures and every count of the log
        (drops.py: drops, refusals, reconnections, sockets closed, packets the disk refused)
        keep their intervals (the looks every second, adoption and the Wills' retries, are
        left to `periodic_due`: one a second early or at once is no harm)."""
        self._wills.clock_stepped(by)
        self._sys.clock_stepped(by)
        self._delivery.clock_stepped(by)
        self._lifetimes.clock_stepped(by)
        self._connects.clock_stepped(by)
        self._batches.failures.clock_stepped(by)
        self._silent.shift(by)
        for client in self._clients.values():
            client.opened += by
            client.link.connection.last_heard += by
            if client.claim_waited_since is not None:
                client.claim_waited_since += by
        self._timers.shift(by)

    def tick(self, now: float) -> None:
        """The timer: keep-alives, CONNECT timeouts, delayed Wills, the ends of sessions away,
        messages others dropped in dropboxes, the sessions of servers of this host that died,
        and the counts of messages full queues dropped, of CONNECTs refused, of reconnections
        and of packets the disk refused."""
        for client in self._timers.due(now):
            self._look_at(client, now)
        self._wills.retry(now=now)
        self._wills.send_due(now)  # first: a Will due with its session's end goes before it
        self._lifetimes.end_due(now)
        if periodic_due(now, self._next_adoption, _ADOPT_EVERY):  # a clock stepped back too
            self._next_adoption = now + _ADOPT_EVERY
            self._lifetimes.adopt_the_dead()
            self._lifetimes.resume_unread()
            self._lifetimes.finish_ends()
            self._records.retry()
        self._tell_counts(now)
        if self._sys.due(now):
            self._publish_sys(now)
        # What other processes dropped, locks and delays that ended: the sessions with news
        # join `_offered`, read at once for all of them. A look at each of 4,000 idle
        # sessions (a read of the inotify instance each) kept 40 % of a core busy.
        self.box.read_news()
        self.pump_all()
        for client_id in self._delivery.refused():  # claims the file system refused: again
            self._pump_connected(client_id)
        self._walk_on(now)
        self.flush()

    def _look_at(self, client: Client, now: float) -> None:
        """The timer's look at a connection whose time came (`_timers`): closed if it sent no
        CONNECT in time, or no whole packet for 1.5 keep-alive periods; else looked at again
        when that can be over. Every read that ends a packet moves a keep-alive's end
        (`Connection.last_heard`), not this time: a client heard since is looked at once per
        period, not per read."""
        if client.session is None:
            # From the opening, not the last byte: a socket that trickles a byte at a
            # time must not hold its slot forever. One whose CONNECT came and waits for
            # another server's claim is answered within `CLAIM_PATIENCE` (a second more
            # for a retry that failed, OSError, and left it waiting): looked at each tick.
            late = now - client.opened > self.limits.connect_timeout
            if late and client.checking is not None:
                timeout = spelled(self.limits.connect_timeout)
                why = f"no answer within {timeout}, the password still waiting for its check"
                if self._silent.dropped((client.link.peer.host, why), now=now):
                    log.info(
                        "%s closed: no answer within %s: its password still waited for its "
                        "check (%d check(s) under way or waiting, taking turns by address: many "
                        "logins at once, or a host guessing passwords?)",
                        connecting(client, client.checking),
                        timeout,
                        len(self._checks),
                    )
                # Its answer must not come: a TLS socket is in the broker's clients until its
                # close is over (up to _LINGER), and the check's end would connect it there.
                client.checking = None
                client.link.close()
            elif late and not waits_for_claim(client, now):
                why = f"no CONNECT within {spelled(self.limits.connect_timeout)}"
                if self._silent.dropped((client.link.peer.host, why), now=now):
                    log.info("%s closed: %s", client.link.peer, why)
                client.link.close()
            else:
                self._timers.set(client, max(now, client.opened + self.limits.connect_timeout))
            return
        deadline = client.link.connection.deadline()
        if deadline is None:
            return  # no keep-alive: nothing to look at
        if now > deadline:
            self._kick(client, _R.KEEP_ALIVE_TIMEOUT, "keep-alive timeout")
        else:
            self._timers.set(client, deadline)

    def _tell_counts(self, now: float | None) -> None:
        """Log the counts of lines held back (drops.py) over by `now` (None: all, at close):
        messages full queues dropped, CONNECTs refused, reconnections, packets the disk
        refused, sockets closed silent."""
        self._delivery.report_drops(now=now)
        self._connects.tell_counts(now=now)
        self._batches.failures.tell(now=now)
        tell_by_host(self._silent, "socket(s) closed", now=now)

    def figures(self) -> Figures:
        """This server's figures now, for $SYS (sys_figures.py)."""
        return self._traffic.figures(self._clients, len(self._links), self._sessions.values())

    def _publish_sys(self, now: float) -> None:
        """The $SYS values that changed since the last interval, to the connected clients
        whose subscriptions match them (sys_topics.py)."""
        changed = self._sys.update(now, self.figures())
        if changed:
            send_changed(self._out, self._links.values(), changed)

    def resume_expiries(self) -> None:
        """At start: the persistent sessions on disk end when their records say (lifetimes.py)."""
        self._lifetimes.resume_expiries()

    def pump_all(self) -> None:
        """The connected sessions with durable subscriptions take what they have room for:
        those whose dropboxes may have something new for them since the last call
        (`_offered`): this process put messages in them (after each disk batch), or the
        box's `read_news` told of them (each tick: what other processes dropped, locks and
        delays that ended), or another consumer gave messages back (a share group member
        that left). One QoS 1 message to one of 4,000 connected devices cost a walk of
        4,000 pumps per batch, and each tick a walk of 4,000 (docs/benchmarks.md, "Many
        connected persistent sessions"). A session whose acknowledgements freed slots is
        refilled at the end of its read (Delivery.refill); one that resumes, or subscribes,
        is pumped then. Which order the sessions take decides no share group member's
        share: the messages of a group's dropbox are handed to its members by its engine's
        dispatch (round-robin by default) at the first member's look, whichever it is, and
        each takes its own (every member here is told of the group's messages); every
        session pumped is written out at the same flush."""
        offered = self._offered
        if not offered:
            return
        news: dict[str, set[str]] = {}  # consumer name -> the queues with news for it
        for _ in range(len(offered)):  # the disk threads only append: popleft is safe
            name, queue = offered.popleft()
            news.setdefault(name, set()).add(queue)
        named = self._named
        for name, queues in news.items():
            client_id = named.get(name)
            if client_id is not None:
                self._pump_connected(client_id, queues)

    def _listener(self, consumers: list[ConsumerId], queue: str) -> None:
        """Box.listen_offered's, from any thread: one extend of a deque by a list is atomic."""
        self._offered.extend([(consumer, queue) for consumer in consumers])

    def _pump_connected(self, client_id: str, news: set[str] | None = None) -> None:
        """`news`: the queues to look into (and those its window cut short); None: all."""
        if client_id in self._durable:
            session = self._sessions.get(client_id)
            if session is not None and session.connected:
                self._delivery.pump(session, news)

    def _walk_on(self, now: float) -> None:
        """Pump the next connected sessions with durable subscriptions, news or not: each
        once per `WALK_EVERY` seconds, a share of them at each tick (idle_walk.py). For what
        no news tells: the rescans and sweeps a live queue makes as it is pumped."""
        for client_id in self._walk.next(now, self._durable, self._links):
            self._pump_connected(client_id)

    def _batch_ready(self) -> None:
        """A batch's messages are in their dropboxes, the commit's last flush (a journal
        commit) still to come: the subscribers take them meanwhile, and the publisher's
        PUBACKs wait for the flush (`_batch_done`). A share group's window took 15 % less
        time so (docs/benchmarks.md, "Answers before copies")."""
        self.pump_all()
        self.flush()

    def _batch_done(self, client: Client) -> None:
        """A client's disk batch is done. Its answers are written first: a publisher's
        acknowledgements let it send its next messages while the broker claims and sends
        this batch's to the subscribers (under fsync=always, `_batch_ready` did most of
        that already), who may now have messages to take."""
        self._out.flush_first(client)
        self.pump_all()
        self.flush()

    async def close(self) -> None:
        """Shutting down: nothing more is read; the disk work of what was read finishes and
        its answers (PUBACK, PUBREC, PUBCOMP) are written, so a client is not left to send
        again what was stored; then every client is told (v5) and its connection closed,
        and the disk work that this brings (records, session ends) finishes too."""
        for client in list(self._clients.values()):
            client.stopped = True
            client.link.pause_reading()
        await self._batches.wait_all()
        self.flush()
        for client in list(self._clients.values()):
            self._kick(client, _R.SERVER_SHUTTING_DOWN, "server shutting down")
        await self._batches.wait_all()
        self._tell_counts(None)  # the counts of unfinished intervals, not lost
        for session in list(self._sessions.values()):
            for subscriber in self._durable.pop(session.client_id, {}).values():
                subscriber.detach()  # dropboxes, groups, a persistent session's locks stay
        self._pool.shutdown(wait=True)
        self._checks.shutdown()
        self.box.forget_offered(self._listener)

    # -- dispatch ----------------------------------------------------------------------------------

    def _handle(self, client: Client, packet: Incoming) -> None:
        session = client.session
        if session is None:
            assert isinstance(packet, Connect)  # Connection lets nothing else through first
            self._connects.answer(client, packet)
            return
        # The packets of every message first, each told by one test that also narrows its
        # type for mypy: a PUBLISH (Publish has no subclass), then a positive acknowledgement
        # not built (packets.ShortAck). A type() kept and an assert more cost about 100
        # instructions each.
        if isinstance(packet, Publish):
            self._publishing.publish(client, session, packet)
            return
        if type(packet) is tuple:
            ack, packet_id = packet
            if ack is Pubrel:
                self._publishing.released(client, session, packet_id)
            else:
                self._delivery.acked(session, packet_id, _STAGE_OF[ack], _SUCCESS)
            return
        kind = type(packet)
        if kind is Puback:
            assert isinstance(packet, Puback)
            self._delivery.acked(session, packet.packet_id, _AWAIT_PUBACK, packet.reason)
        elif kind is Pubrec:
            assert isinstance(packet, Pubrec)
            self._delivery.acked(session, packet.packet_id, _AWAIT_PUBREC, packet.reason)
        elif kind is Pubcomp:
            assert isinstance(packet, Pubcomp)
            self._delivery.acked(session, packet.packet_id, _AWAIT_PUBCOMP, packet.reason)
        elif kind is Pubrel:
            assert isinstance(packet, Pubrel)
            self._publishing.released(client, session, packet.packet_id)
        elif kind is Subscribe:
            assert isinstance(packet, Subscribe)
            if self._closed_if_taken(client, session):
                return
            self._delivery.route_deferred_so_far()  # the PUBLISHes before it miss it
            self._subscribing.subscribe(client, session, packet)
            # Made at once on the loop (fsync never, interval), a durable subscription is in
            # the root's generation only: a PUBLISH later in this read would be told the
            # topic's answer from before it, kept since the read began, and miss it.
            self._durable_routes.recheck()
        elif kind is Unsubscribe:
            assert isinstance(packet, Unsubscribe)
            if self._closed_if_taken(client, session):
                return
            self._delivery.route_deferred_so_far()  # the PUBLISHes before it still meet it
            self._subscribing.unsubscribe(client, session, packet)
        elif kind is Pingreq:
            self._out.send(client, Pingresp())
        elif kind is Disconnect:
            assert isinstance(packet, Disconnect)
            self._disconnected(client, session, packet)
        elif kind is Auth:
            raise ProtocolError("AUTH without an Authentication Method in CONNECT (§4.12)")
        else:
            raise ProtocolError(f"a client may not send {kind.__name__.upper()}")

    def _closed_if_taken(self, client: Client, session: Session) -> bool:
        """Before a SUBSCRIBE or an UNSUBSCRIBE writes the record of a persistent session:
        whether another broker on this root took the session (`TakenElsewhere.since`), its
        connection then closed (written, its record named this broker again); so too if its
        record cannot be looked at (EIO), as a disk failure (`TakenElsewhere.closes`)."""
        close = self._taken.closes(session) if session.persistent else None
        if close is not None:
            close(client)
            return True
        return False

    def _share_turns(self, session: Session, *, take: bool) -> None:
        """A persistent session's share-group memberships take their turns only while its
        client is connected: while it is away, the group's messages go to the members there,
        and those claimed for it and not yet sent go back to them at once (what it was sent
        stays its own, for its return: MQTT 5.0 §4.8.2 lets a server wait for it)."""
        for text, subscriber in self._durable.get(session.client_id, {}).items():
            if parse_filter(text).shared and text not in session.leaving:
                if take:
                    subscriber.resume()
                else:
                    subscriber.pause()

    def _kick(self, client: Client, reason: ReasonCode, why: str) -> None:
        connection = client.link.connection
        if connection.version is ProtocolVersion.V5 and connection.accepted:
            self._out.send(client, Disconnect(reason))
        self.flush()
        self.closed(client.link, why)
        client.link.close()

    def _disconnected(self, client: Client, session: Session, packet: Disconnect) -> None:
        take_disconnect(client, session, packet, self.limits.max_session_expiry)
        self.closed(client.link, f"DISCONNECT, reason {packet.reason:#04x}")
        client.link.close()

    def _held_at_close(self, client: Client, session: Session) -> None:
        """The connection ends while packets wait behind a SUBSCRIBE (fsync=always,
        subscribing.hold_the_rest). Those that settle what was sent or received stand, as if
        handled in turn: a PUBREL releases its message (which got PUBREC), an acknowledgement
        settles its own, a DISCONNECT says how the session ends (no Will). A PUBLISH that was
        never answered and a SUBSCRIBE go with the connection."""
        held, client.held = client.held, None
        dropped = 0
        try:
            for packet in held or ():
                kind = type(packet)
                try:
                    if kind is Disconnect:
                        assert isinstance(packet, Disconnect)
                        take_disconnect(client, session, packet, self.limits.max_session_expiry)
                        return  # nothing may follow a DISCONNECT
                    if kind in _ACKS:
                        self._handle(client, packet)
                    else:
                        dropped += 1
                except ProtocolViolation as error:
                    log.info("client %s: a packet held at close: %s", session.client_id, error)
                    return
        finally:
            if dropped and client.stopped:  # a stop's: the operator may wonder what went
                log.info(
                    "client %s: %d packet(s) held behind its SUBSCRIBE or CONNECT still being "
                    "answered at the stop dropped, as if never read (none was answered)",
                    session.client_id,
                    dropped,
                )

    def _resume(self, client: Client) -> None:
        """The packets a SUBSCRIBE held back are handled, now that it is answered; unless the
        server is stopping: then they stay held for the close (`_held_at_close`), which
        drops those unanswered. Handled one after another, each SUBSCRIBE with its flushes,
        a client's backlog of them kept a SIGTERM'd server busy for over a minute."""
        if client.stopped and client.held is not None:
            return
        held, client.held = client.held, None
        if held is None or self._clients.get(client.link) is not client:
            return  # the connection closed meanwhile
        if not client.paused and not client.stopped:
            client.link.resume_reading()
        try:
            self.received(client.link, held)
        except ProtocolViolation as error:  # as the server does for a read (server.py)
            log.info("%s: closing: %s", client.link.peer, error)
            self._kick(client, reason_for(error), f"protocol error: {error}")
