"""The broker's clients: what it knows of a socket, one connection's side of it, and its writes.

A `Link` is the socket as server.py gives it; a `Client` is what the broker keeps per
connection (its session once CONNECT came, its disk work, what waits for its records).
`Outgoing` is how anything in the broker sends a client a packet: the packet goes into the
client's connection (sans-IO), and the client is marked to be written.

Invariants:
- The reads that came together (a publisher's PUBLISHes, its subscribers' acks) leave with one
  write per connection, at the end of the loop iteration (`flush_soon`).
- A client `holding` records (fsync=always, recording.py) is written nothing until they are on
  disk: it stays marked, and the write that follows sends it all, CONNACK first.
- `before_writes` runs before any client is written: the broker writes there the session
  records that must be on disk before what is sent (packet ids of QoS 2 messages, PUBRELs).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from boxmq.mqtt.connection import Connection
from boxmq.mqtt.disk import Job
from boxmq.mqtt.packets import Connect, Incoming, Packet, Puback, Pubcomp, Pubrec, Pubrel
from boxmq.mqtt.peer_address import PeerAddress
from boxmq.mqtt.reasons import ReasonCode
from boxmq.mqtt.session import Session

__all__ = ["Client", "Kick", "Link", "Outgoing", "disk_work_ahead", "log_level", "name_of"]


class Link(Protocol):
    """What the broker knows of a client's socket (server.py implements it)."""

    connection: Connection
    peer: PeerAddress
    identity: str | None  # the user name its TLS certificate gives (identity_as_username)
    congested: bool  # its write buffer is over the high-water mark

    def flush(self) -> None:
        """Write what the connection has to send."""

    def close(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def acknowledge_reads(self) -> None:
        """Have TCP acknowledge what was read now rather than with the next answer, which
        waits for the disk: a client that holds back small writes until its last one is
        acknowledged (Nagle's algorithm, on by default) sends the rest of its window at once."""


@dataclass(eq=False, slots=True)  # slots: one per connection (many idle devices)
class Client:
    """One connection's side of the broker."""

    link: Link
    opened: float  # when the socket was accepted: the CONNECT timeout counts from here
    session: Session | None = None
    clean_exit: bool = False  # DISCONNECT 0x00 came: no Will (MQTT 5.0 §3.1.2.5)
    # The Session Expiry Interval its CONNECT asked for (v5), before max_session_expiry: a
    # DISCONNECT may set one only if this was not 0 (§3.14.2.2.2), though ours may be 0.
    asked_expiry: int = 0
    refused: bool = False  # its CONNECT refused, or its new session's record (connect_answers.py)
    jobs: list[Job] = field(default_factory=list)  # disk work waiting for the next batch
    tail: asyncio.Future[None] | None = None  # the batch running now (one at a time, in order)
    paused: bool = False
    stopped: bool = False  # the server is shutting down: nothing more is read from it
    # Seen to send more while its disk batch was being committed: under fsync=always, a
    # batch begun by a read waits a moment for the rest (batches.py).
    gathers: bool = False
    # Records to be on disk before the client is told anything more (fsync=always): while
    # some are being written, what it is sent waits in its connection (CONNACK first).
    holding: int = 0
    # Packets read while its SUBSCRIBE waits for the disk: handled after it, in order.
    held: deque[Incoming] | None = None
    # Its SUBSCRIBE at the head of `held`, which waited for retained writes under way
    # (Subscribing.subscribe): handled again, it waits no more.
    waited: Packet | None = None
    reading: Iterator[Incoming] | None = None  # the packets of the read being handled
    over_subscriptions: bool = False  # a SUBSCRIBE of it passed max_subscriptions (logged)
    too_deep: bool = False  # a SUBSCRIBE of it passed max_topic_levels (logged)
    # Since when (the broker's clock) its CONNECT waits for another server's claim on its
    # session (claim_wait.wait_for_claim); None: it does not.
    claim_waited_since: float | None = None
    # Its CONNECT while its password waits for a check (ConnectAnswers.answer): one closed at
    # connect_timeout meanwhile sent a CONNECT, and the log must not say it sent none.
    checking: Connect | None = None
    told_sys: bool = False  # a PUBLISH of it to a $SYS topic was refused (logged once)
    # The ACL refused a PUBLISH or a SUBSCRIBE of it, or the store a PUBLISH (logged once
    # each, the others at debug level: a client refused in a loop wrote a line a message).
    told_publish: bool = False
    told_subscribe: bool = False
    told_not_stored: bool = False
    # Its client id connected more than ConnectAnswers tells in a run (a reconnect loop): its
    # connection's lines (connected, disconnected, taken over) are at debug level, counted.
    quiet: bool = False


Kick = Callable[[Client, ReasonCode, str], None]
"""Close a client's connection, telling it why (v5): the broker's `_kick`."""


def disk_work_ahead(client: Client) -> bool:
    """Whether disk work the client's packets asked for is still to be done: waiting for its
    batch (`jobs`), or in the batch running now (`tail`). What it sent after them and must
    not overtake them is then done in turn, after them."""
    return bool(client.jobs) or client.tail is not None


def log_level(client: Client, told: int = logging.INFO) -> int:
    """The level of a line about the connection: `told`, or DEBUG for one counted, not told,
    as a reconnect loop's (connect_answers.py, `Client.quiet`): a script that connects, is
    refused, and goes, again and again, wrote a line each time, however its connections
    were summarised."""
    return logging.DEBUG if client.quiet else told


def name_of(client: Client) -> str:
    session = client.session
    return str(client.link.peer) if session is None else f"client {session.client_id}"


def _nothing_to_do() -> None:
    """`Outgoing.before_writes` until the broker sets its own."""


class Outgoing:
    """The clients that have something to be written, written once per loop iteration."""

    def __init__(self) -> None:
        self.dirty: set[Client] = set()
        self._flush_due = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.before_writes: Callable[[], None] = _nothing_to_do

    def send(self, client: Client, packet: Packet) -> None:
        client.link.connection.send(packet)
        self.dirty.add(client)

    def acknowledge(
        self, client: Client, kind: type[Puback | Pubrec | Pubrel | Pubcomp], packet_id: int
    ) -> None:
        """`send(client, kind(packet_id))` for a positive acknowledgement, without the object."""
        client.link.connection.acknowledge(kind, packet_id)
        self.dirty.add(client)

    def flush(self) -> None:
        self._flush_due = False
        self.before_writes()
        dirty, self.dirty = self.dirty, set()
        for client in dirty:
            if client.holding:
                self.dirty.add(client)  # sent once its records are on disk (Recorder.write)
            else:
                client.link.flush()

    def flush_first(self, client: Client) -> None:
        """Write to `client` now, before the others of this loop iteration: the client whose
        read was just handled is answered first (a publisher's acknowledgements let it send
        its next messages while the broker writes to the subscribers)."""
        if client not in self.dirty:
            return
        self.before_writes()
        if not client.holding:
            self.dirty.discard(client)
            client.link.flush()

    def flush_soon(self) -> None:
        """Write at the end of this loop iteration: the reads that came together (a
        publisher's PUBLISHes, its subscribers' acks) leave with one write per connection."""
        if self.dirty and not self._flush_due:
            self._flush_due = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self.flush)
