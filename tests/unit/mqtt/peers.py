"""Clients of a broker without sockets: a Peer is a client's end of an in-memory link, through the
real Connection; `run_broker` runs a test on a broker over a real Box in tmp_path on one asyncio
loop, and `connect_peer` gives a client connected to it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import boxmq
from boxmq.clock import Clock, SystemClock
from boxmq.core import ExactlyOnceLimits
from boxmq.mqtt.broker import Broker
from boxmq.mqtt.codec import decode, encode
from boxmq.mqtt.connection import Connection
from boxmq.mqtt.framing import FrameReader
from boxmq.mqtt.packets import Connack, Connect, Packet, ProtocolVersion
from boxmq.mqtt.peer_address import PeerAddress
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.reasons import ReasonCode
from boxmq.mqtt.settings import MqttSettings

__all__ = ["Peer", "connect_peer", "run_broker"]

V5 = ProtocolVersion.V5


class Peer:
    """A client's end of an in-memory link: what it sends goes through the real Connection."""

    def __init__(self, broker: Broker) -> None:
        self.connection = Connection(
            max_packet_size=1 << 20, receive_maximum=100, topic_alias_maximum=10, now=0
        )
        self.peer = PeerAddress("memory")
        self.congested = False
        self.identity: str | None = None
        self.closed = False
        self._broker = broker
        self._reader = FrameReader(max_packet_size=1 << 20)
        self.inbox: list[Packet] = []
        self.pauses = self.resumes = 0  # calls of pause_reading and resume_reading
        self.version = V5  # what `send` writes and `flush` reads
        assert broker.opened(self)

    def flush(self) -> None:
        self._reader.receive(self.connection.data_to_write())  # as the server writes it
        self.inbox += [decode(frame, self.version) for frame in self._reader.frames()]

    def close(self) -> None:
        self.closed = True
        self._broker.closed(self, "closed")

    def pause_reading(self) -> None:
        self.pauses += 1

    def resume_reading(self) -> None:
        self.resumes += 1

    def acknowledge_reads(self) -> None:
        pass

    def send(self, *packets: Packet) -> None:
        data = b"".join(encode(packet, self.version) for packet in packets)
        self._broker.received(self, self.connection.receive(data, now=0))
        self._broker.flush()  # what the end of the loop iteration does

    def take(self) -> list[Packet]:
        taken, self.inbox = self.inbox, []
        return taken


def run_broker(
    tmp_path: Path,
    test: Callable[[Broker], Awaitable[None]],
    clock: Clock | None = None,
    *,
    fsync: str = "never",
    settings: MqttSettings | None = None,
    box_clock: bool = False,
    exactly_once: ExactlyOnceLimits | None = None,
) -> None:
    """`test` run on a broker over the root in `tmp_path`; `box_clock`: the Box reads `clock`
    too (its locks' deadlines), not the system's; `exactly_once`: the Box's limits."""

    async def main() -> None:
        with boxmq.open(
            tmp_path / "root",
            fsync=fsync,
            clock=clock if box_clock else None,
            exactly_once=exactly_once,
        ) as box:
            broker = Broker(box, settings or MqttSettings(), clock or SystemClock())
            broker.resume_expiries()  # as MqttServer.start does
            try:
                await test(broker)
            finally:
                await broker.close()

    asyncio.run(main())


def connect_peer(broker: Broker, client_id: str, *, expiry: int = 0, clean: bool = True) -> Peer:
    peer = Peer(broker)
    props = Properties.build(session_expiry_interval=expiry or None)
    peer.send(Connect(client_id, V5, clean_start=clean, properties=props))
    connack = peer.inbox.pop(0)  # a resumed session's messages may follow at once
    assert isinstance(connack, Connack)
    assert connack.reason is ReasonCode.SUCCESS
    return peer
