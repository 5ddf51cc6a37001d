"""A client that sends but does not read is not buffered without end (docs/mqtt.md, "Limits
and backpressure"): once its socket's write buffer is over the high-water mark, the server
stops reading it until it drains, so what it sends waits in the kernel's buffers and then in
its own. The high-water mark is made small here (64 KiB), and so is the server's kernel send
buffer for the client (on loopback it grows to 4 MiB), so that little must be sent."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from tests.integration.mqtt.clients import WAIT, RunningServer, paho, start_server
from tests.integration.mqtt.raw import connect_packet_311, packet, string

from boxmq.clock import ManualClock
from boxmq.mqtt import server as server_module

T = TypeVar("T")

_HIGH = 64 << 10  # the write buffer's high-water mark in these tests
_PINGREQS = b"\xc0\x00" * (32 << 10)  # 64 KiB of PINGREQ: as many PINGRESP bytes to answer


@pytest.fixture
def small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningServer]:
    monkeypatch.setattr(server_module, "_WRITE_HIGH", _HIGH)
    monkeypatch.setattr(server_module, "_LINGER", 1.0)
    with start_server(tmp_path / "root") as running:
        yield running


@pytest.fixture
def clocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RunningServer, ManualClock]]:
    """`small`, its broker on a clock that moves only when the test moves it."""
    monkeypatch.setattr(server_module, "_WRITE_HIGH", _HIGH)
    monkeypatch.setattr(server_module, "_LINGER", 1.0)
    clock = ManualClock()
    with start_server(tmp_path / "root", clock=clock) as running:
        yield running, clock


def on_loop(running: RunningServer, call: Callable[[], T]) -> T:
    """`call()` in the server's thread, between two of its loop's callbacks."""

    async def run() -> T:
        return call()

    return asyncio.run_coroutine_threadsafe(run(), running.loop).result(WAIT)


def unread(running: RunningServer, client_id: str) -> tuple[int, bool] | None:
    """The bytes the server holds for `client_id` in its socket's write buffer, and whether
    it does not read the socket now; None once it is no client of the broker."""

    def look() -> tuple[int, bool] | None:
        for client in running.server.broker._clients.values():
            if client.session is not None and client.session.client_id == client_id:
                transport = client.link._transport  # type: ignore[attr-defined]
                size: int = transport.get_write_buffer_size()
                return size, not transport.is_reading()
        return None

    return on_loop(running, look)


def connect_311(
    running: RunningServer, client_id: str, keep_alive: int, *, shrink: bool = True
) -> socket.socket:
    """A 3.1.1 client with a tiny receive buffer (its window fills at once), connected;
    `shrink`: the server's kernel send buffer for it is made 16 KiB."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(WAIT)
    sock.connect((running.host, running.port))
    sock.sendall(connect_packet_311(client_id, keep_alive=keep_alive))
    assert sock.recv(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted

    def shrink_it() -> None:
        for client in running.server.broker._clients.values():
            if client.session is not None and client.session.client_id == client_id:
                tcp = client.link._tcp  # type: ignore[attr-defined]
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 10)

    if shrink:
        on_loop(running, shrink_it)
    return sock


def flood(sock: socket.socket, most: int) -> int:
    """Send PINGREQs until `most` bytes are sent or the socket blocks for a second (the
    server reads no more); how many bytes were sent."""
    sock.settimeout(1.0)
    sent, end = 0, time.monotonic() + 30
    while sent < most and time.monotonic() < end:
        try:
            sent += sock.send(_PINGREQS)
        except TimeoutError:
            break
    sock.settimeout(WAIT)
    return sent - sent % 2  # a PINGREQ cut in two is not answered


def settled(running: RunningServer, client_id: str) -> int:
    """The write buffer once the server stopped reading the client and the buffer stopped
    changing; fails if the server never stops reading it."""
    last, end = -1, time.monotonic() + 15
    while time.monotonic() < end:
        now = unread(running, client_id)
        assert now is not None, "the flooding client was disconnected"
        size, paused = now
        if paused and size == last:
            return size
        last = size
        time.sleep(0.5)
    raise AssertionError(f"still read after 15 s ({last} bytes buffered for it)")


def drain(sock: socket.socket, expected: int) -> bytes:
    got = bytearray()
    while len(got) < expected:
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {len(got)} of {expected} bytes"
        got += chunk
    return bytes(got)


def test_a_client_that_does_not_read_is_not_read_while_its_write_buffer_is_full(
    small: RunningServer,
) -> None:
    """2 MiB of PINGREQs and not one byte read: before, the server read them all and held
    every PINGRESP (RSS 29 -> 90 MB for 56 MB); now it holds its high-water mark and one
    read's answers, serves the others meanwhile, and answers every PINGREQ once the client
    reads."""
    flooder = connect_311(small, "flooder", keep_alive=0)
    sent = flood(flooder, 2 << 20)
    assert sent > 4 * (_HIGH + server_module._READ_SIZE)
    held = settled(small, "flooder")
    assert held < _HIGH + 2 * server_module._READ_SIZE, held

    other = paho(small, "other")
    other.subscribe("bp/t", 1)
    other.publish("bp/t", b"served", qos=1)
    assert other.next().payload == b"served"
    other.stop()

    assert drain(flooder, sent) == b"\xd0\x00" * (sent // 2)  # every PINGRESP, in the end
    flooder.close()


def heard(running: RunningServer, client_id: str) -> float | None:
    """When the broker last heard from `client_id`, by its clock; None once it is no client."""

    def look() -> float | None:
        for client in running.server.broker._clients.values():
            if client.session is not None and client.session.client_id == client_id:
                return client.link.connection.last_heard
        return None

    return on_loop(running, look)


def test_a_congested_client_that_reads_is_not_kicked_for_the_keep_alive(
    clocked: tuple[RunningServer, ManualClock],
) -> None:
    """Not read by us, it sends nothing we hear: while what it has not read shrinks (it
    reads) it counts as heard; once it reads nothing for 1.5 keep-alive periods it is
    disconnected, as a silent client is. The kernel's send buffer is left as it grows (to
    4 MiB on loopback): our own buffer shrinks only once a good part of it is free, which
    takes this client far longer than its keep-alive. The broker's clock moves only when the
    test moves it, a second at a time once a tick has seen the client read: on the system
    clock the client had 3 s from its SUBSCRIBEs to be seen congested and read, and a loaded
    machine took longer."""
    small, clock = clocked
    retainer = paho(small, "retainer")
    retainer.publish("bp/r", b"r" * (64 << 10), qos=1, retain=True)
    retainer.stop()
    client = connect_311(small, "slow", keep_alive=2, shrink=False)
    # Each SUBSCRIBE brings the 64 KiB retained message again (QoS 0: once congested, no more).
    client.sendall(
        b"".join(
            packet(0x82, n.to_bytes(2, "big") + string("bp/r") + b"\x00") for n in range(1, 129)
        )
    )
    settled(small, "slow")
    for _ in range(8):  # 8 s of its clock: over twice the 3 s of its keep-alive
        clock.advance(1)
        read = 0
        while read < 32 << 10:
            chunk = client.recv(4096)
            assert chunk, "closed while it read"
            read += len(chunk)
        end = time.monotonic() + WAIT  # a tick (0.25 s) sees what it read
        while (when := heard(small, "slow")) is not None and when < clock.now():
            assert time.monotonic() < end, "its reads were not heard"
            time.sleep(0.05)
        assert when is not None, "kicked while it read"
    state = unread(small, "slow")
    assert state is not None, "kicked while it read"
    assert state[1], "it caught up: the test did not hold it congested long enough"
    end = time.monotonic() + WAIT  # now it reads nothing: 3 s of its clock, then the next tick
    while unread(small, "slow") is not None and time.monotonic() < end:
        clock.advance(1)  # more than once if the tick still saw its last read acknowledged
        time.sleep(0.3)
    assert unread(small, "slow") is None, "not kicked though it read nothing"
    client.close()


def test_a_client_closed_with_its_write_buffer_full_is_let_go_of(
    clocked: tuple[RunningServer, ManualClock],
) -> None:
    """Kicked for its keep-alive (it reads nothing), a client's socket was closed the gentle
    way, which waits for the buffer to be written: it never was, and the socket and the
    buffer stayed for good, out of the count of connections. Now what is left gets
    `_LINGER` seconds (1 here), then the socket is aborted. The kick comes when the test
    moves the broker's clock, once the buffer is seen full: on the system clock it came 1.5 s
    after the last read, and a loaded machine kicked the client before `settled` saw it."""
    small, clock = clocked
    flooder = connect_311(small, "gone", keep_alive=1)
    flood(flooder, 512 << 10)
    settled(small, "gone")

    def server_socket() -> socket.socket:
        for client in small.server.broker._clients.values():
            if client.session is not None and client.session.client_id == "gone":
                tcp: socket.socket = client.link._tcp  # type: ignore[attr-defined]
                return tcp
        raise AssertionError("gone already")

    tcp = on_loop(small, server_socket)
    clock.advance(2)  # past 1.5 s of silence: the next tick kicks it
    end = time.monotonic() + 10
    while unread(small, "gone") is not None and time.monotonic() < end:
        time.sleep(0.1)
    assert unread(small, "gone") is None, "not kicked though it read nothing"
    end = time.monotonic() + 5
    while on_loop(small, tcp.fileno) != -1 and time.monotonic() < end:
        time.sleep(0.1)
    assert on_loop(small, tcp.fileno) == -1, "its socket is still open"
    flooder.close()
