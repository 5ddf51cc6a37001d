"""A client the server closes on gets to read why (server.py `_Linger`): the server shuts its
side once its last packet is written and reads, discarding, for up to a second, so that a
client that writes before it reads (paho-style loops) is not answered with a RST that takes
the DISCONNECT or the CONNACK refusal with it; and it lets the socket go after that second
whatever the client does. Real sockets, raw packets."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import OnlyAlice, RunningServer, start_server
from tests.integration.mqtt.raw import (
    connect_packet_311,
    open_raw,
    packet,
    publish_qos2,
    pubrel,
    read,
)
from tests.waiting import until

from boxmq.mqtt import server as server_module
from boxmq.mqtt.settings import Limits, MqttSettings

_CLOSE_WAIT = 8  # tcpi_state (include/net/tcp_states.h): our peer sent its FIN
_LINGER = 0.3  # server.py's _DISCARD_TIME (1 s), shortened (`short_linger`)


# 3.1.1 CONNECT, clean session, keep-alive 30, client id "id", user alice with a wrong password
_WRONG_PASSWORD = connect_packet_311("id", username="alice", password=b"wrong")


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[RunningServer]:
    limits = Limits(receive_maximum=2)
    with start_server(tmp_path / "root", MqttSettings(limits=limits)) as running:
        yield running


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[RunningServer]:
    with start_server(tmp_path / "root", MqttSettings(authenticator=OnlyAlice())) as running:
        yield running


def _state(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


def _wait_for_fin(sock: socket.socket) -> None:
    """Until the server has closed (its FIN came), without reading what came before it."""
    until(lambda: _state(sock) == _CLOSE_WAIT, "the server did not close", within=5, every=0.005)


def _write_then_read(sock: socket.socket, data: bytes) -> list[tuple[int, bytes]]:
    """Write `data` to a server that has closed, then a PINGREQ, then read everything, as a
    loop that writes what it has before it reads does: a write after a RST (drawn by the first,
    back within a moment on the loopback) fails with ECONNRESET/EPIPE, and such a client
    (paho's) gives up without reading."""
    _wait_for_fin(sock)
    sock.sendall(data)
    time.sleep(0.05)  # the RST, if one comes, is there by now
    sock.sendall(packet(0xC0, b""))
    got = []
    while (kind_body := read(sock))[0]:
        got.append(kind_body)
    return got


def test_a_client_over_receive_maximum_that_writes_first_reads_the_disconnect(
    strict: RunningServer,
) -> None:
    sock, _ = open_raw(strict, "eager", clean=True, expiry=0)
    with sock:
        for packet_id in (1, 2, 3):  # QoS 2, never released: the third is one too many
            sock.sendall(publish_qos2("t", packet_id, b"x"))
        got = _write_then_read(sock, pubrel(1))
    assert [kind for kind, _ in got] == [0x50, 0x50, 0xE0], got  # PUBREC, PUBREC, DISCONNECT
    assert got[-1][1][0] == 0x93  # Receive Maximum exceeded


def test_a_v311_client_refused_that_pings_first_reads_the_connack(guarded: RunningServer) -> None:
    with socket.create_connection((guarded.host, guarded.port), timeout=5) as sock:
        sock.sendall(_WRONG_PASSWORD)
        got = _write_then_read(sock, packet(0xC0, b""))  # PINGREQ, twice
    assert got == [(0x20, b"\x00\x04")]  # CONNACK: bad user name or password


def _held_by_server(server_port: int, client_port: int) -> bool:
    """Whether the server's end of the connection is a socket a process holds: Linux shows
    one no process holds any more (closed, its FIN sent) with inode 0 in /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], int(fields[9])
        ports = int(local.split(":")[1], 16), int(remote.split(":")[1], 16)
        if ports == (server_port, client_port):
            return inode != 0
    return False


@pytest.fixture
def short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "_DISCARD_TIME", _LINGER)


@pytest.mark.usefixtures("short_linger")
def test_a_client_that_neither_reads_nor_closes_is_let_go_after_the_linger(
    guarded: RunningServer,
) -> None:
    with socket.create_connection((guarded.host, guarded.port), timeout=5) as sock:
        client_port = sock.getsockname()[1]
        sock.sendall(_WRONG_PASSWORD)
        _wait_for_fin(sock)
        sock.sendall(packet(0xC0, b""))  # and never reads, nor closes, till the end
        assert _held_by_server(guarded.port, client_port)  # it lingers, reading
        # Let go at the linger's end, or held until the client closes: the bound of the
        # linger and half a second it had left a loaded machine 0.2 s (let go 0.31-0.33 s
        # after the FIN, measured under 7 other test runs).
        until(
            lambda: not _held_by_server(guarded.port, client_port),
            "held past the linger",
            every=0.02,
        )
        assert _state(sock) == _CLOSE_WAIT  # no RST: the PINGREQ was read and dropped


@pytest.fixture
def long_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "_DISCARD_TIME", 60.0)


@pytest.mark.usefixtures("long_linger")
def test_a_client_that_keeps_writing_is_let_go_after_64_kib(guarded: RunningServer) -> None:
    """Well before the linger is over: made a minute long here, so that only the 64 KiB can
    let it go within the wait (with the linger's second, the half second the test gave it
    was a margin of a few hundred milliseconds on a loaded machine)."""
    with socket.create_connection((guarded.host, guarded.port), timeout=5) as sock:
        client_port = sock.getsockname()[1]
        sock.sendall(_WRONG_PASSWORD)
        _wait_for_fin(sock)
        with contextlib.suppress(ConnectionError):  # reset once the server stopped reading
            sock.sendall(packet(0xC0, b"") * (40 << 10))  # 80 KiB of PINGREQs
        until(
            lambda: not _held_by_server(guarded.port, client_port),
            "read past 64 KiB",
            every=0.02,
        )
