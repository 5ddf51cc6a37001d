"""`boxmq serve --fsync interval` SIGKILLed mid-stream while mosquitto_sub (libmosquitto, not
paho) receives through the kills: a persistent subscriber and a persistent share group of
two, each reconnecting by itself after each restart. Every message the publisher had PUBCOMP
for must reach the subscriber and the group (at least once).

At QoS 1, and at QoS 2: libmosquitto 2.0.11 keeps a stale copy of a QoS 2 PUBLISH sent
again after a restart, and takes the next message under its packet id for it (docs/mqtt.md,
"Shutdown and crashes"), which boxmq's new ids after a restart keep clear of.
test_mqtt_kills.py checks exactly once at QoS 2, with paho on both sides."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

import paho.mqtt.client as mqtt
import pytest
from harness.stopping import stop
from paho.mqtt.enums import CallbackAPIVersion
from tests.integration.mqtt.clients import (
    loop_stopped,
    mosquitto_tools,
    recorded_connected_since,
    serve_fresh,
    serve_process,
    stop_process,
)
from tests.waiting import until, waited

from boxmq.mqtt.session_record import read_record

pytestmark = pytest.mark.slow

KILLS = 3
PER_RUN = 40  # messages each server answers the publisher before it is killed, at least
LIMIT = 2000  # messages at most
RECEIVE_MAXIMUM = 1000  # mosquitto_sub's, told in its CONNECT (`_mosquitto_sub`)


def _mosquitto_sub(port: int, client_id: str, filter: str, qos: int) -> subprocess.Popen[str]:
    """libmosquitto 2.0.11 counts a QoS 2 message it kept across a reconnect twice against
    its Receive Maximum once the restarted server sends it again with DUP (one packet id, one
    message in flight: MQTT-3.3.4-9), and quits with a protocol error when the server fills
    the window its CONNECT gave (20 by default; docs/mqtt.md): 1 run in 10 under load, the
    messages after it left in its dropbox. Given RECEIVE_MAXIMUM, past boxmq's max_inflight
    (100) and any kept copies, it never fills. (Started again instead, a new mosquitto_sub
    has none of what the one that quit had answered with PUBREC and not seen released yet:
    libmosquitto delivers at the PUBREL, so at QoS 2 those were its own and went with it.)"""
    command = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-V", "5", "-q", str(qos)]
    command += ["-c", "-x", "3600", "-i", client_id, "-t", filter]
    command += ["-D", "connect", "receive-maximum", str(RECEIVE_MAXIMUM)]
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
                    loop_stopped(client)
                client = self._connected()
                if client is None:
                    time.sleep(0.1)
                continue
            payload = f"m{self.sent:05d}"
            self.sent += 1
            info = client.publish("mk/t", payload, 2)
            try:
                info.wait_for_publish(timeout=5)
            except RuntimeError:
                # paho refuses a publish once its connection is gone (a kill can come between
                # is_connected and publish): not sent, so not counted; the next turn reconnects
                continue
            if info.is_published() and info.mid not in self.failed:
                self.acked.append(payload)
        if client is not None:
            client.disconnect()
            loop_stopped(client)


def _acked_past(publisher: _Publisher, count: int) -> None:
    waited(lambda: len(publisher.acked) >= count, within=30, every=0.02)
    assert len(publisher.acked) >= count, "the publisher did not get going again"


def _through_kills(tmp_path: Path, qos: int) -> tuple[set[str], Counter[str], Counter[str]]:
    """What the publisher had PUBCOMP for, and what the plain subscriber and the group got
    (waited for until they have it all, 60 s at most)."""
    shuffle = random.Random(1883)
    target, server = serve_fresh(tmp_path, "--fsync", "interval")
    lock = threading.Lock()
    plain: Counter[str] = Counter()
    group: Counter[str] = Counter()
    subscribers = [
        _mosquitto_sub(target.port, "plain", "mk/#", qos),
        _mosquitto_sub(target.port, "member1", "$share/g/mk/#", qos),
        _mosquitto_sub(target.port, "member2", "$share/g/mk/#", qos),
    ]
    readers = [
        _collect(process.stdout, counter, lock)  # type: ignore[arg-type]
        for process, counter in zip(subscribers, (plain, group, group), strict=True)
    ]
    publisher = _Publisher(target.port)
    try:
        until(  # all three subscribed: the group has members
            lambda: len(list(target.root.glob("topic-root/*/.subscriptions/*"))) >= 2,
            "mosquitto_sub did not subscribe",
            within=30,
        )
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
            return acked, plain.copy(), group.copy()
    finally:
        publisher.stop.set()
        stop(*subscribers, seconds=10)
        for reader in readers:
            reader.join(timeout=5)
        for process in subscribers:
            process.stdout.close()  # type: ignore[union-attr]
        stop_process(server)


def test_mosquitto_sub_gets_every_acknowledged_message_through_sigkills_under_interval(
    tmp_path: Path,
) -> None:
    mosquitto_tools()
    acked, plain, group = _through_kills(tmp_path, 1)
    assert sorted(acked - set(plain)) == []
    assert sorted(acked - set(group)) == []


def test_mosquitto_sub_at_qos2_loses_nothing_through_sigkills(tmp_path: Path) -> None:
    """libmosquitto keeps a stale copy of a QoS 2 PUBLISH sent again after a restart, and
    takes the next message under its packet id for it (docs/mqtt.md): new ids after a
    restart start past those the session's record names, so none comes round in this run.
    Started at 1, one or two of ~160 messages went missing in each run."""
    mosquitto_tools()
    acked, plain, group = _through_kills(tmp_path, 2)
    assert sorted(acked - set(plain)) == []
    assert sorted(acked - set(group)) == []


class _Gate(threading.Thread):
    """A TCP relay from mosquitto_sub to the server that can swallow what the client sends
    (`swallow`): what a server killed before it read its socket never got. `swallowed` counts
    the chunks it took; `pubcomps` the PUBCOMPs it passed on (the server reads them before a
    close of the same connection, which comes after them on it); `subacks` the SUBACKs it
    passed back (the client reads each before what the server sends after it); `cut` drops
    the connections open (the client connects again by itself)."""

    def __init__(self, server_port: int) -> None:
        super().__init__(daemon=True)
        self.server_port = server_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.swallow = False
        self.swallowed = 0
        self.pubcomps = 0
        self.subacks = 0
        self.open: list[socket.socket] = []

    def run(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed: the test is over
            while True:
                client, _ = self.listener.accept()
                try:
                    server = socket.create_connection(("127.0.0.1", self.server_port))
                except OSError:
                    client.close()  # the server is down: the client tries again
                    continue
                self.open += [client, server]
                for source, sink, gated in ((client, server, True), (server, client, False)):
                    threading.Thread(
                        target=self._pipe, args=(source, sink, gated), daemon=True
                    ).start()

    def cut(self) -> None:
        for end in self.open:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def _pipe(self, source: socket.socket, sink: socket.socket, gated: bool) -> None:
        kinds: _Kinds | None = _Kinds()
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if gated and self.swallow:
                    self.swallowed += 1
                    kinds = None  # a packet cut short: this stream's kinds are lost
                    continue
                sink.sendall(data)
                if kinds is None:
                    continue
                if gated:
                    self.pubcomps += kinds.read(data).count(mqtt.PUBCOMP >> 4)
                else:
                    self.subacks += kinds.read(data).count(mqtt.SUBACK >> 4)
        for end in (source, sink):  # one side gone: the connection is over for both
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


class _Kinds:
    """The packet types of an MQTT stream read in chunks as they come (a packet may straddle
    two): each packet's fixed header read, its remaining length skipped."""

    def __init__(self) -> None:
        self._unread = b""

    def read(self, data: bytes) -> list[int]:
        self._unread += data
        kinds: list[int] = []
        while True:
            length, shift, at = 0, 0, 1
            while True:  # the remaining length: 7 bits a byte, the high bit says more follow
                if at >= len(self._unread):
                    return kinds
                byte = self._unread[at]
                length, shift, at = length | (byte & 0x7F) << shift, shift + 7, at + 1
                if not byte & 0x80:
                    break
            if len(self._unread) < at + length:
                return kinds
            kinds.append(self._unread[0] >> 4)
            self._unread = self._unread[at + length :]


def _publish_qos2(port: int, payload: str) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        info = client.publish("pk/t", payload, 2)
        info.wait_for_publish(timeout=10)
        assert info.is_published()
    finally:
        client.disconnect()
        loop_stopped(client)


def _lines_until(got: list[str], lock: threading.Lock, wanted: int, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with lock:
            if len(got) >= wanted:
                break
        time.sleep(0.05)
    with lock:
        return list(got)


@pytest.mark.parametrize("then", ["at once", "after a restart with none in flight"])
def test_mosquitto_subs_stale_qos2_copy_does_not_take_the_next_message_after_a_restart(
    tmp_path: Path, then: str
) -> None:
    """The libmosquitto bug made to happen (docs/mqtt.md): the PUBREC of "A" never reaches the
    server, killed then; the restart sends "A" again under its packet id with DUP, which
    libmosquitto keeps a second copy of. "B" must not go under that id: started again at 1, it
    did, and mosquitto_sub printed "A" twice and never "B". Nor after a second restart whose
    session record names no packet id (written when the client connected again, with nothing
    in flight): the ids go on from the one it keeps (`next_packet_id`), where they started
    at 1 again, and mosquitto_sub printed "A" twice and never "B"."""
    mosquitto_tools()
    target, server = serve_fresh(tmp_path, "--fsync", "interval")
    gate = _Gate(target.port)
    gate.start()
    command = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(gate.port), "-V", "5", "-q", "2"]
    command += ["-c", "-x", "3600", "-i", "stale", "-t", "pk/t"]
    subscriber = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    lock = threading.Lock()
    got: list[str] = []

    def read() -> None:
        for line in subscriber.stdout:  # type: ignore[union-attr]
            with lock:
                got.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        until(
            lambda: list(target.root.glob("topic-root/*/.subscriptions/*")),
            "mosquitto_sub did not subscribe",
            within=30,
        )
        until(lambda: gate.subacks, "mosquitto_sub was not sent its SUBACK")  # read first
        gate.swallow = True
        _publish_qos2(target.port, "A")
        until(  # its PUBREC, which the server will never read
            lambda: gate.swallowed, "mosquitto_sub did not answer the PUBLISH", every=0.01
        )
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=20)
        gate.swallow = False
        server = serve_process(target.root, target.port, "--fsync", "interval")
        assert _lines_until(got, lock, 1, 30) == ["A"]  # sent again with DUP, then released
        # Its PUBCOMP, which frees the packet id, passed on to the server: read before the
        # cut's close. No record says so (none is written at a PUBCOMP): the last one names
        # the id as releasing until the close's.
        until(lambda: gate.pubcomps, "mosquitto_sub did not answer the PUBREL", every=0.01)
        if then != "at once":
            # Back after the cut: the record its CONNECT wrote then, which names no packet id,
            # not the close's, nor the connection's before (a try of mosquitto_sub's while
            # the server restarted was accepted by the gate, and closed, too).
            cut = time.time_ns()
            gate.cut()  # (mosquitto_sub ends at a server's DISCONNECT: no SIGTERM here)
            recorded_connected_since(target.root, "stale", cut)
            record = read_record(str(target.root), "stale")
            assert record is not None
            assert (record.releasing, record.sent) == ((), ()), "its PUBCOMP was not read"
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=20)
            server = serve_process(target.root, target.port, "--fsync", "interval")
        _publish_qos2(target.port, "B")
        assert _lines_until(got, lock, 2, 10) == ["A", "B"]
    finally:
        stop(subscriber, seconds=10)
        reader.join(timeout=5)
        subscriber.stdout.close()  # type: ignore[union-attr]
        gate.listener.close()
        stop_process(server)
