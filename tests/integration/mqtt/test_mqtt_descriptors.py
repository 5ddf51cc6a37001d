"""A server out of file descriptors (docs/operations.md, "Many connections"): it stops
accepting for a while, says so once, serves the clients it has, and accepts again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import time
from pathlib import Path

import pytest
from harness.ports import free_port, free_ports
from tests.descriptors import no_descriptor_left
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    serve_process,
    start_server,
    stop_process,
)
from tests.integration.mqtt.raw import (
    connect_packet,
    open_raw,
    publish,
    read,
    string,
    subscribe,
)
from tests.waiting import logged, until

import boxmq
from boxmq.mqtt.server import MqttServer
from boxmq.mqtt.settings import Listener, MqttSettings


def test_out_of_descriptors_accepting_waits_is_told_once_and_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with start_server(tmp_path / "root") as running, socket.socket() as client:
        client.settimeout(WAIT)
        with no_descriptor_left():
            # The kernel takes the connection into the listener's queue: no descriptor
            # of the server's yet; its accept finds none left.
            client.connect((running.host, running.port))
            client.sendall(connect_packet("late", clean=True))
            until(
                lambda: logged(caplog, "cannot accept"),
                "the failed accept was not told",
                every=0.01,
            )
            time.sleep(0.6)  # tries again meanwhile: each 0.25 s
        # Descriptors free: the client waiting is accepted and served.
        assert read(client)[0] == 0x20
    [told] = logged(caplog, "cannot accept")
    assert "too many open files" in told
    assert "ulimit -n" in told
    # asyncio's own accept loop told each of 100 accepts in a row, and again at each retry.
    assert not [r for r in caplog.records if r.name == "asyncio"]
    assert len(logged(caplog, "accepting connections again")) == 1


def test_a_connect_whose_session_record_cannot_be_read_is_refused_and_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with start_server(tmp_path / "root") as running, socket.socket() as client:
        client.settimeout(WAIT)
        with no_descriptor_left(free=1):  # the socket's: none for the session's record
            client.connect((running.host, running.port))
            client.sendall(connect_packet("short"))  # a persistent session: its record
            kind, body = read(client)
        assert (kind, body[:2]) == (0x20, b"\x00\x80")  # CONNACK: unspecified error
    [told] = logged(caplog, "refused: its session's record could not be read")
    assert "EMFILE" in told
    assert "unspecified error (0x80)" in told


def test_a_publish_the_disk_cannot_route_closes_its_connection_told_and_the_close_is_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A QoS 1 PUBLISH whose look for durable subscriptions finds no descriptor: its client
    is closed with an ERROR line (it resends: nothing was acknowledged), and the close of
    its persistent session goes on whole with no descriptor left (the session is kept, and
    resumed at the next CONNECT)."""
    caplog.set_level(logging.INFO)
    with start_server(tmp_path / "root") as running:
        sock, _ = open_raw(running, "p")
        sock.sendall(subscribe(1, "a", 1))
        assert read(sock)[0] == 0x90
        sock.settimeout(WAIT)
        with sock, no_descriptor_left():
            sock.sendall(publish("a", b"x", qos=1, packet_id=2))
            with contextlib.suppress(ConnectionResetError):
                assert read(sock) == (0, b"")  # closed, no PUBACK
        again, present = open_raw(running, "p")
        with again:
            assert present
            again.sendall(publish("a", b"y", qos=1, packet_id=3))
            got = sorted([read(again), read(again)])
            assert got[0][0] == 0x32  # the PUBLISH to its subscription
            assert got[0][1].endswith(b"y")
            assert got[1] == (0x40, b"\x00\x03")
    [told] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert ": closing: the store failed at" in told
    assert "EMFILE" in told
    # The close's look at its record is one stat now (TakenElsewhere.at_close), which needs
    # no descriptor: no read for EMFILE to fail, so no line says the session stays; that it
    # stayed is `present` above.
    # The close raised out of connection_lost, half done, and asyncio logged a traceback.
    assert not [r for r in caplog.records if r.name == "asyncio"]


def _open_files(pid: int) -> tuple[int, int]:
    """(soft, hard) limits of open files of process `pid`."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line")


def test_serve_raises_its_limit_of_open_files_to_the_hard_one_and_says_so(
    tmp_path: Path,
) -> None:
    root, port = tmp_path / "root", free_port()
    process = serve_process(root, port, open_files=(256, 512))
    try:
        assert _open_files(process.pid) == (512, 512)
    finally:
        stop_process(process)
    log = (tmp_path / "serve.log").read_text()
    assert "open files: at most 512, raised from 256 (ulimit -n) to the hard limit" in log


def _connected(port: int, client_id: str) -> tuple[socket.socket, bool]:
    """A socket that sent a CONNECT, and whether a CONNACK came (False: closed at once, a
    reset since the server did not read the CONNECT)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    sock.sendall(connect_packet(client_id, clean=True))
    try:
        return sock, read(sock)[0] == 0x20
    except ConnectionResetError:
        return sock, False


def test_the_last_descriptors_are_kept_for_files_past_them_clients_are_refused_once_told(
    tmp_path: Path,
) -> None:
    root, port = tmp_path / "root", free_port()
    process = serve_process(root, port, open_files=(64, 64))  # 8 kept for files
    address = RunningServer(root, None, "127.0.0.1", port, None, None, None, None)  # type: ignore[arg-type]
    others: list[socket.socket] = []
    try:
        reader, _ = open_raw(address, "reader")  # a persistent session: a dropbox on disk
        reader.sendall(subscribe(1, "t", 1))
        assert read(reader)[0] == 0x90  # SUBACK
        while len(others) < 64:
            sock, accepted = _connected(port, f"c{len(others)}")
            if not accepted:
                sock.close()
                break
            others.append(sock)
        assert 40 < len(others) < 64
        for _ in range(3):  # refused again, not told again
            sock, accepted = _connected(port, "again")
            sock.close()
            assert not accepted
        # The clients connected are served, and so is the disk: a QoS 1 message to a
        # persistent session is stored (PUBACK 0) and delivered.
        reader.sendall(publish("t", b"kept", qos=1, packet_id=7))
        got = sorted([read(reader), read(reader)])  # its PUBACK, and the PUBLISH it sent
        assert got[0] == (0x32, string("t") + b"\x00\x01\x00kept")  # QoS 1, packet id 1
        assert got[1] == (0x40, b"\x00\x07")
        others.pop().close()  # a descriptor free: accepted again
        deadline = time.monotonic() + WAIT
        while True:
            sock, accepted = _connected(port, "late")
            sock.close()
            if accepted:
                break
            assert time.monotonic() < deadline, "no connection accepted again"
            time.sleep(0.05)
        reader.close()
    finally:
        for sock in others:
            sock.close()
        stop_process(process)
    log = (tmp_path / "serve.log").read_text()
    assert "about 56 connections at most, not [mqtt.limits] max_connections = 10000" in log
    assert log.count("refusing new connections") == 1
    assert "the last 8 are kept for the broker's files" in log
    # 4 at least: one more for each try of "late" before the server saw a client leave.
    [again] = re.findall(r"accepting connections again \((\d+) refused meanwhile\)", log)
    assert int(again) >= 4
    assert "EMFILE" not in log


def test_a_listener_refused_at_start_leaves_no_socket_open(tmp_path: Path) -> None:
    """A listener whose port another program listens on stops the start, and the listeners
    bound before it are closed: left open, the first one listened, taking clients for a
    server that never started (each listens as it is bound, since a second serve could
    bind beside one not listening yet)."""
    free, taken = free_ports(2)
    other = socket.socket()
    other.bind(("127.0.0.1", taken))
    other.listen()

    async def start(server: MqttServer) -> None:
        try:
            with pytest.raises(OSError, match="in use"):
                await server.start()
        finally:
            await server.close()

    listeners = (Listener("127.0.0.1", free), Listener("127.0.0.1", taken))
    with other, boxmq.open(tmp_path / "data", fsync="never") as box:
        asyncio.run(start(MqttServer(box, MqttSettings(listeners=listeners))))
    with socket.socket() as again:  # the first listener's socket was closed: its port is free
        again.bind(("127.0.0.1", free))
        again.listen()


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_a_subscribe_whose_retained_look_finds_no_descriptor_closes_its_client_told(
    tmp_path: Path, fsync: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The look for the retained messages of a clean session's SUBSCRIBE opens the topic's
    file, after the SUBACK: under fsync=always (serve's default), where the SUBACK waits
    behind the client's disk work, with no descriptor left the OSError raised out of the
    answer, was logged with its traceback, and the client went on without its retained
    messages, never told. Now it is closed with one ERROR line, as when that look fails
    while its packets are read (fsync=never), and subscribes again once it reconnects."""
    caplog.set_level(logging.INFO)
    with start_server(tmp_path / "root", fsync=fsync) as running:
        sock, _ = open_raw(running, "s", clean=True, expiry=0)  # in memory: no disk work
        with sock, no_descriptor_left():
            sock.sendall(subscribe(1, "a/b", 1))
            assert read(sock) == (0x90, b"\x00\x01\x00\x01")  # SUBACK: granted QoS 1
            assert read(sock) == (0xE0, b"\x80")  # DISCONNECT: unspecified error
            assert read(sock) == (0, b"")
        again, _ = open_raw(running, "s", clean=True, expiry=0)
        with again:
            again.sendall(subscribe(1, "a/b", 1))
            assert read(again) == (0x90, b"\x00\x01\x00\x01")
    [told] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert ": closing: the store failed at" in told
    assert "EMFILE" in told
    assert not [r for r in caplog.records if r.exc_info]
