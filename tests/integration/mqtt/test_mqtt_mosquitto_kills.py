"""`boxmq serve --fsync interval` SIGKILLed mid-stream while mosquitto_sub (libmosquitto, not
paho) receives through the kills: a persistent subscriber and a persistent share group of
two, each reconnecting by itself after each restart. Every message the publisher had PUBCOMP
for must reach the subscriber and the group (at least once).

They subscribe at QoS 1: libmosquitto 2.0.11 cannot receive QoS 2 across a server restart
(docs/mqtt.md, "Shutdown and crashes"). test_mqtt_kills.py checks exactly once at QoS 2, with
paho on both sides."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from tests.integration.mqtt.clients import (
    mosquitto_tools,
    serve_fresh,
    serve_process,
    stop_process,
)

pytestmark = pytest.mark.slow

KILLS = 3
PER_RUN = 40  # messages each server answers the publisher before it is killed, at least
LIMIT = 2000  # messages at most


def _mosquitto_sub(port: int, client_id: str, filter: str) -> subprocess.Popen[str]:
    command = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-V", "5", "-q", "1"]
    command += ["-c", "-x", "3600", "-i", client_id, "-t", filter]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _collect(stream: IO[str], got: Counter[str], lock: threading.Lock) -> threading.Thread:
    def read() -> None:
        for line in stream:
            with lock:
                got[line.rstrip("\n")] += 1

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


class _Publisher(threading.Thread):
    """QoS 2, one message at a time, from a clean session made again after each kill (so it
    owes the server no PUBREL: what was not answered is simply not counted as sent)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.acked: list[str] = []
        self.stop = threading.Event()
        self.sent = 0
        self.failed: set[int] = set()  # packet ids answered with an error

    def _on_publish(self, _c: Any, _u: Any, mid: int, reason: Any, _p: Any) -> None:
        self.failed.add(mid) if reason.is_failure else self.failed.discard(mid)

    def _connected(self) -> mqtt.Client | None:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        client.on_publish = self._on_publish
        try:
            client.connect("127.0.0.1", self.port)
        except OSError:
            return None
        client.loop_start()
        deadline = time.monotonic() + 5
        while not client.is_connected() and time.monotonic() < deadline:
            time.sleep(0.01)
        return client

    def run(self) -> None:
        client = None
        while not self.stop.is_set() and self.sent < LIMIT:
            if client is None or not client.is_connected():
                if client is not None:
                    client.loop_stop()
                client = self._connected()
                if client is None:
                    time.sleep(0.1)
                continue
            payload = f"m{self.sent:05d}"
            self.sent += 1
            info = client.publish("mk/t", payload, 2)
            info.wait_for_publish(timeout=5)
            if info.is_published() and info.mid not in self.failed:
                self.acked.append(payload)
        if client is not None:
            client.disconnect()
            client.loop_stop()


def _acked_past(publisher: _Publisher, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(publisher.acked) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(publisher.acked) >= count, "the publisher did not get going again"


def test_mosquitto_sub_gets_every_acknowledged_message_through_sigkills_under_interval(
    tmp_path: Path,
) -> None:
    mosquitto_tools()
    shuffle = random.Random(1883)
    target, server = serve_fresh(tmp_path, "--fsync", "interval")
    lock = threading.Lock()
    plain: Counter[str] = Counter()
    group: Counter[str] = Counter()
    subscribers = [
        _mosquitto_sub(target.port, "plain", "mk/#"),
        _mosquitto_sub(target.port, "member1", "$share/g/mk/#"),
        _mosquitto_sub(target.port, "member2", "$share/g/mk/#"),
    ]
    readers = [
        _collect(process.stdout, counter, lock)  # type: ignore[arg-type]
        for process, counter in zip(subscribers, (plain, group, group), strict=True)
    ]
    publisher = _Publisher(target.port)
    try:
        deadline = time.monotonic() + 30  # until all three subscribed: the group has members
        while len(list(target.root.glob("topic-root/*/.subscriptions/*"))) < 2:
            assert time.monotonic() < deadline, "mosquitto_sub did not subscribe"
            time.sleep(0.05)
        time.sleep(0.5)
        publisher.start()
        before = 0
        for _ in range(KILLS):
            _acked_past(publisher, before + PER_RUN)  # this server took its share
            time.sleep(shuffle.uniform(0.0, 0.5))
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=20)
            before = len(publisher.acked)
            time.sleep(shuffle.uniform(0.0, 0.5))
            server = serve_process(target.root, target.port, "--fsync", "interval")
        _acked_past(publisher, before + PER_RUN)
        publisher.stop.set()
        publisher.join(timeout=20)
        acked = set(publisher.acked)
        assert publisher.sent < LIMIT  # the kills came mid-stream
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if acked <= set(plain) and acked <= set(group):
                    break
            time.sleep(0.1)
        with lock:
            assert sorted(acked - set(plain)) == []
            assert sorted(acked - set(group)) == []
    finally:
        publisher.stop.set()
        for process in subscribers:
            process.terminate()
            process.wait(timeout=10)
        for reader in readers:
            reader.join(timeout=5)
        for process in subscribers:
            process.stdout.close()  # type: ignore[union-attr]
        stop_process(server)
