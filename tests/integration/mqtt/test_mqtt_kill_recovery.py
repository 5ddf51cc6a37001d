"""`boxmq serve` SIGKILLed again while it recovers the root a SIGKILL left: its start releases
the dead process's locks and resumes the persistent sessions, and a second kill can land in
any step of that. Whatever the kills hit, the messages a persistent subscriber and a share
group were waiting for (some in flight to them at the first kill) all come after the last
restart, each once, and none is counted a poison message by the kills alone."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    RunningServer,
    paho,
    serve_fresh,
    serve_process,
    stop_process,
)
from tests.integration.mqtt.raw import open_raw, puback, read, subscribe, take_publishes

pytestmark = pytest.mark.slow

COUNT = 300  # messages published at QoS 1 (with a subscriber and a group: 600 files)
HELD = 10  # read by each subscriber and never acknowledged (the server sent its window, 100)
KILLS = 5  # SIGKILLs during recovery: more than max_deliveries (5), if each counted one


def _serve_and_kill_soon(root: Path, port: int, shuffle: random.Random) -> None:
    """Start `boxmq serve` on `root` and SIGKILL it at a random moment of its start: once its
    log says it recovers, within the next fraction of a second (or before it got there)."""
    log = root.parent / "serve.log"
    said = log.read_text().count("recovering") if log.exists() else 0
    with open(log, "ab") as out:
        command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "serve"]
        command += ["--mqtt", f"127.0.0.1:{port}", "--sweep-interval", "0.5"]
        process = subprocess.Popen(command, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and log.read_text().count("recovering") == said:
            assert process.poll() is None, "boxmq serve exited by itself"
            time.sleep(0.005)
        time.sleep(shuffle.uniform(0.0, 0.05))  # its sweep of the root takes some 20 ms
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=20)


def _holding(target: RunningServer, client_id: str, filter: str) -> socket.socket:
    """A persistent session subscribed to `filter` at QoS 1 that takes HELD messages and
    leaves without acknowledging them."""
    sock, _ = open_raw(target, client_id, clean=False, expiry=3600)
    sock.sendall(subscribe(1, filter, 1))
    assert read(sock)[0] == 0x90
    return sock


def _take_all(target: RunningServer, client_id: str) -> list[bytes]:
    """Resume `client_id`'s session and take (and acknowledge) all COUNT + 1 messages."""
    sock, present = open_raw(target, client_id, clean=False, expiry=3600)
    assert present
    got: list[bytes] = []
    while len(got) < COUNT + 1:  # one by one: the server sends a window of them at a time
        [message] = take_publishes(sock, 1, timeout=30)
        got.append(message.payload)
        sock.sendall(puback(message.packet_id))
    sock.settimeout(1.0)
    with pytest.raises(TimeoutError):  # nothing more: no message twice
        read(sock)
    sock.close()
    return got


def test_kills_during_recovery_lose_and_poison_nothing(tmp_path: Path) -> None:
    shuffle = random.Random(2025)
    target, server = serve_fresh(tmp_path, "--fsync", "always")
    names = ("plain", "member")
    try:
        plain = _holding(target, "plain", "rec/#")
        member = _holding(target, "member", "$share/g/rec/#")
        publisher = paho(target, "publisher")
        for n in range(COUNT):
            publisher.client.publish(f"rec/{n % 7}", f"m{n:04d}".encode(), 1)
        publisher.publish("rec/last", b"m-last", 1)  # all before it were answered too
        publisher.stop()
        for sock in (plain, member):
            take_publishes(sock, HELD, timeout=30)  # in flight, never acknowledged
        os.kill(server.pid, signal.SIGKILL)  # both still connected
        server.wait(timeout=20)
        plain.close()
        member.close()
        for _ in range(KILLS):
            _serve_and_kill_soon(target.root, target.port, shuffle)
            # and in the resumption of each session: a kill while its messages go again
            server = serve_process(target.root, target.port, "--fsync", "always")
            back = [open_raw(target, name, clean=False, expiry=3600)[0] for name in names]
            time.sleep(shuffle.uniform(0.0, 0.3))
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=20)
            for sock in back:
                sock.close()
        server = serve_process(target.root, target.port, "--fsync", "always")
        expected = sorted([f"m{n:04d}".encode() for n in range(COUNT)] + [b"m-last"])
        for client_id in names:
            got = _take_all(target, client_id)
            assert sorted(got) == expected, client_id
        poisoned = [p for p in target.root.rglob("error/*") if p.is_file()]
        assert poisoned == []
    finally:
        stop_process(server)
