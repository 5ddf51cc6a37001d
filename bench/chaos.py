"""Chaos run: producers, consumers, `boxmq serve` and MQTT clients on one root, SIGKILLed at random.

python bench/chaos.py run --seed 1 --fsync always [--seconds 75] [--dir DIR]
    [--backlog N] [--threads] [--qos2] [--share-qos2] [--kill-min S --kill-max S]
python bench/chaos.py run --mixed --seed 1 [--kills 10] [--kill-min 2 --kill-max 5]

Not a test (no CI runs it): about 90 s a run. On one root: 2-3 producers (put, put_many), 2-3
consumers (max_in_flight 5, lock_timeout 2 s), `boxmq serve` with a QoS 1 publisher and a
`$share/g/#` group of two persistent QoS 1 subscribers; every 0.5-3 s (`--kill-min`,
`--kill-max`) one of them, at random, is SIGKILLed and started again (same role, same MQTT
client id). Every role is this script run again (`chaos.py role ...`) and logs with one
os.write a line (in the kernel when it returns: a SIGKILL loses no line written) what returned:
a put's id, a delivery, an ack, a PUBACK. Then everything is killed, a sweep runs once the
locks ran out, the queue and the sessions are drained, and the invariants checked: every
returned put and every PUBACKed publish delivered, no put stored twice (its body's tag delivered
under two ids) nor an ack of an id no put returned, nothing delivered after its ack returned,
every stored file's name decodes and its body matches its checksum, nothing left in processing/
nor, past abandon_after, in working/, and no role ended by itself (not killed). It prints the
kills by role and the counts, and ends with `RESULT ... violations=N` (exit 1 if N > 0). A
`boxmq serve` that does not listen at the start or at the drain stops the run with an error
(exit 1), not as every client's failures.

The options add what the default run does not reach:
- `--backlog N`: the producers run ahead (put_many of up to 40) until the queue holds about N
  ready messages, past the FRONT of 256 that a consumer decodes (client/target_names.py): plain
  names of priorities 0-9 kept cold, one put in five with an expiry (decoded, hot), one in
  twenty of those expiring after 3 s (they must then be in expired/, and only they); the
  consumers unlock half of what they give back with a delay of 0.2-1.5 s.
- `--threads`: a second queue, kept short (one put in eight), and a process of three consumer
  threads (two on the first queue, one on the second: one inotify instance, its waits handed
  from thread to thread, store/watch.py) beside a one-thread consumer of the second queue.
- `--qos2`: a QoS 2 publisher (raw MQTT 3.1.1: see `role_publisher2` for why not paho) and a
  persistent QoS 2 subscriber of its topics, never killed, checked for exactly once (every
  PUBCOMPed publish delivered, none twice) across the server's kills; a retained publisher
  (QoS 1 and 2 at random, one at a time, 8 topics; its QoS 2 ones go through the
  exactly-once intake, its session being persistent) whose topics must each retain, after
  the drain, their last acknowledged (PUBACK, PUBCOMP) message or one sent after it.
- `--share-qos2`: an MQTT 5 share group `$share/g2/q2/#` of three QoS 2 members (raw MQTT 5:
  see `role_member5`) fed by the QoS 2 publisher (started for it without --qos2), killed
  like the others; each start takes a Session Expiry Interval of 0, 1 s or an hour (`g0`
  always an hour, so the group never ends) and one in three waits up to 3 s before
  connecting, so a session runs out while its client is away, or is resumed. Checked
  (MQTT 5.0 §4.3.3, §4.8.2; docs/mqtt.md, "Shared subscriptions"): every PUBCOMPed publish
  reaches a member that answers PUBREC (each holds half its PUBRECs 0-0.5 s, so kills find
  messages delivered and unanswered), or the group's error/; none goes again after a member
  got its PUBREL (its PUBREC settled it); none goes to a second member unless the first, or
  the server, was killed in between; nothing is left in the group's target/ or processing/.
- `--mixed` (bench/chaos_mixed.py says all it runs and checks): every door on one root, on
  one queue and one topic tree: `boxmq serve` with MQTT and the XMPP component of a Prosody
  of its own (XMPP publish, urn:xmpp:qos assured, subscribers of the queue node and of a
  topic node), the embedded producer and consumer, and the CLI (`put`, `publish`, `get` of
  the queue and of the MQTT share group, `ack`); --kills times (10) `boxmq serve` or the
  embedded consumer (now and then the producer) is SIGKILLed and started again, every
  --kill-min to --kill-max s (2-5), then a drain and the checks, across the doors (a put
  stored by one acked through another). Needs prosody; about a minute. The other options
  but --seed, --fsync and --dir do not apply to it.

Bounded: the chaos lasts --seconds (<= 120), the drain at most 40 s (more with a backlog),
every loop is bounded in count and time, and every process started is killed at the end; the
root and the logs stay in --dir for a look.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import logging
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import paho.mqtt.client as mqtt
from paho.mqtt.client import ConnectFlags
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

from mqtt_wire import connect5, packet, read_varint, string
from processes import free_port, listening, reap_killed

if TYPE_CHECKING:
    from collections.abc import Iterable

    from boxmq import Consumer

PY = sys.executable
HERE = os.path.abspath(__file__)
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
QUEUE = "chaos"
QUEUE_B = "chaos-b"  # --threads: a second queue, kept short
RETAINED_KEYS = 8
LOCK_TIMEOUT = 2.0


def now() -> int:
    return time.monotonic_ns()  # CLOCK_MONOTONIC: one clock for every process of the machine


def body_for(tag: str, rng: random.Random) -> bytes:
    payload = rng.randbytes(rng.randint(0, 600)).hex().encode()
    head = tag.encode() + b"|" + payload
    return head + b"|" + hashlib.sha256(head).hexdigest()[:16].encode()


def check_body(body: bytes | bytearray) -> str | None:
    """The tag of a well-formed body, None if it is damaged."""
    head, sep, digest = body.rpartition(b"|")
    if not sep or hashlib.sha256(head).hexdigest()[:16].encode() != digest:
        return None
    return head.split(b"|", 1)[0].decode()


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.write("B", os.getpid(), now())  # a start: what follows is this process's

    def write(self, *fields: object) -> None:
        os.write(self.fd, (" ".join(str(f) for f in fields) + "\n").encode())


# ---------------------------------------------------------------- roles


def role_producer(a: argparse.Namespace) -> None:
    import boxmq
    from boxmq import Outgoing

    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    box = boxmq.open(a.root, fsync=a.fsync, max_deliveries=None)
    queues = [box.queue(QUEUE), *([box.queue(QUEUE_B)] if a.threads else [])]
    seq = 0
    for _ in range(1_000_000):
        if time.time() > a.until:
            break
        # --threads: one put in eight goes to the second queue, kept short so its consumers wait.
        q = queues[-1] if a.threads and rng.random() < 0.125 else queues[0]
        if a.backlog and q is queues[0] and q.counts().ready > a.backlog:
            time.sleep(0.05)  # ahead enough: the deep backlog stays about --backlog deep
            continue
        single = rng.random() < 0.5
        count = 1 if single else rng.randint(1, 40 if a.backlog else 6)
        tags = [f"{a.name}.{a.inc}.{seq + i}" for i in range(count)]
        seq += count
        # --backlog: priorities 0-9 (plain names: kept cold past FRONT), one in five with an
        # expiry (decoded at once: hot), one in twenty of those short enough to expire.
        expiry, priority = [0.0] * count, [4] * count
        if a.backlog:
            for i in range(count):
                priority[i] = rng.randint(0, 9)
                if rng.random() < 0.2:
                    expiry[i] = 3.0 if rng.random() < 0.05 else 3600.0
        if single:
            body = body_for(tags[0], rng)
            ids = [q.put(body, priority=priority[0], expires_in=expiry[0] or None)]
        else:
            out = [
                Outgoing(body_for(t, rng), priority=pr, expires_in=ex or None)
                for t, pr, ex in zip(tags, priority, expiry, strict=True)
            ]
            ids = q.put_many(out)
        for mid, tag, ex in zip(ids, tags, expiry, strict=True):
            log.write("P", mid, tag, now(), ex)
        time.sleep(rng.uniform(0.01, 0.06))


def consume(a: argparse.Namespace, log: Log, rng: random.Random, c: Consumer) -> None:
    """Receive up to 5, then ack, unlock (some with a delay, --backlog) or sit on them."""
    import boxmq

    idle_since = time.time()
    for _ in range(1_000_000):
        if time.time() > a.until:
            break
        held = []
        for _ in range(rng.randint(1, 5)):
            m = c.receive(timeout=0.3)
            if m is None:
                break
            tag = check_body(m.body)
            log.write("R", m.id, tag or "BAD", now(), m.delivery_count)
            held.append(m)
        if held:
            idle_since = time.time()
        elif a.drain and time.time() - idle_since > 3:
            break  # 3 s with nothing: past any unlock's delay too
        if not a.drain and rng.random() < 0.03:
            time.sleep(LOCK_TIMEOUT + 0.5)  # let the locks run out under us
        for m in held:
            if not a.drain and rng.random() < 0.1:
                delay = rng.uniform(0.2, 1.5) if a.backlog and rng.random() < 0.5 else 0.0
                try:
                    m.unlock(delay)
                    log.write("U", m.id, now())
                except boxmq.BoxMQError as e:
                    log.write("E", m.id, type(e).__name__, now())
                continue
            try:
                m.ack()
                log.write("A", m.id, now())
            except boxmq.BoxMQError as e:
                log.write("E", m.id, type(e).__name__, now())
        if not a.drain:
            time.sleep(rng.random() * (0.1 if a.backlog else 0.02))


def role_consumer(a: argparse.Namespace) -> None:
    import boxmq

    box = boxmq.open(a.root, fsync=a.fsync, max_deliveries=None)
    c = box.queue(a.queue).consumer(a.name, max_in_flight=5, lock_timeout=a.lock_timeout)
    consume(a, Log(a.log), random.Random(f"{a.name}.{a.inc}"), c)
    c.close()


def role_consumers3(a: argparse.Namespace) -> None:
    """Three consumer threads in one process, two on QUEUE and one on QUEUE_B: one inotify
    instance, its poller handing over to a follower when killed mid-wait."""
    import boxmq

    box = boxmq.open(a.root, fsync=a.fsync, max_deliveries=None)
    log = Log(a.log)
    threads = []
    for i, queue in enumerate((QUEUE, QUEUE, QUEUE_B)):
        c = box.queue(queue).consumer(f"{a.name}t{i}", max_in_flight=5, lock_timeout=a.lock_timeout)
        rng = random.Random(f"{a.name}.{a.inc}.{i}")
        threads.append(threading.Thread(target=consume, args=(a, log, rng, c), daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def mqtt_client(client_id: str, clean: bool = False) -> mqtt.Client:
    c = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=clean,
        protocol=mqtt.MQTTv311,
    )
    c.reconnect_delay_set(0.1, 0.5)  # type: ignore[arg-type]  # annotated int, sleeps a float
    return c


def role_publisher(a: argparse.Namespace) -> None:
    """QoS 1 on chaos/t0-3 (`pub`); --qos2: retained QoS 1 or 2 (at random) on ret/k0-7, one
    at a time so each key's last PUBACK or PUBCOMP is its last publish (`ret`). The retained
    one takes a client id of its own each start, as `role_publisher2` does: a new process
    numbers its packets from 1 again, and a QoS 2 PUBLISH under an id the server holds for
    the session awaiting its PUBREL is rightly taken for a repeat of the killed one's."""
    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    window, retain = {"pub": (20, False), "ret": (1, True)}[a.name]
    c = mqtt_client(f"chaos-{a.name}-{a.inc}" if retain else f"chaos-{a.name}")
    pending: dict[int, str] = {}
    connected = [False]

    def on_connect(client: mqtt.Client, _u: object, _f: object, rc: ReasonCode, _p: object) -> None:
        connected[0] = not rc.is_failure

    def on_disconnect(client: mqtt.Client, _u: object, _f: object, _rc: object, _p: object) -> None:
        connected[0] = False

    early: set[int] = set()  # PUBACKs that came before publish() returned their mid
    lock = threading.Lock()

    def on_publish(client: mqtt.Client, _u: object, mid: int, _rc: object, _p: object) -> None:
        with lock:
            tag = pending.pop(mid, None)
            if tag is None:
                early.add(mid)
                return
        log.write("K", tag, now())

    c.on_connect, c.on_disconnect, c.on_publish = on_connect, on_disconnect, on_publish
    c.max_inflight_messages_set(window)
    c.connect_async("127.0.0.1", a.port, keepalive=5)
    c.loop_start()
    seq = 0
    for _ in range(1_000_000):
        if time.time() > a.until:
            break
        if not connected[0] or len(pending) >= window:
            time.sleep(0.01)
            continue
        tag = f"{a.name}.{a.inc}.{seq}"
        seq += 1
        topic = f"ret/k{seq % RETAINED_KEYS}" if retain else f"chaos/t{seq % 4}"
        qos = rng.choice((1, 2)) if retain else 1
        info = c.publish(topic, body_for(tag, rng), qos=qos, retain=retain)
        with lock:
            if info.mid in early:
                early.discard(info.mid)
                log.write("K", tag, now())
            else:
                pending[info.mid] = tag
        time.sleep(0.05 if retain else 0.005)
    c.loop_stop()


def _packets(buffer: bytearray) -> list[tuple[int, bytes]]:
    """The whole packets at the start of `buffer` (taken out of it): (first byte, body)."""
    out: list[tuple[int, bytes]] = []
    while len(buffer) >= 2:
        try:
            length, start = read_varint(buffer, 1)
        except IndexError:  # its Remaining Length is not all here yet
            return out
        if len(buffer) < start + length:
            return out
        out.append((buffer[0], bytes(buffer[start : start + length])))
        del buffer[: start + length]
    return out


def _connacked(sock: socket.socket, connect: bytes, buffer: bytearray) -> list[tuple[int, bytes]]:
    """Send the CONNECT packet `connect` on a fresh `sock` and read up to its CONNACK, which
    must accept (0): the packets read, the CONNACK first (a resumed session's are sent again
    with it)."""
    sock.sendall(connect)
    buffer.clear()
    while not (got := _packets(buffer)):
        data = sock.recv(4096)
        if not data:
            raise ConnectionError("closed before CONNACK")
        buffer += data
    if got[0][0] != 0x20 or got[0][1][1] != 0:
        raise ConnectionError(f"CONNACK {got[0]!r}")
    return got


def role_publisher2(a: argparse.Namespace) -> None:
    """QoS 2 on q2/t0-3 (`pub2`), 20 in flight, over a raw MQTT 3.1.1 socket: paho 2.2
    sends a PUBLISH again, as new, after its PUBREL when a reconnect takes more than one
    attempt (`_messages_reconnect_reset_out` turns `resend_pubrel` into `publish`), which
    MQTT-4.3.3 forbids and which a server rightly takes for a new message (docs/mqtt.md, "A
    paho-mqtt bug that looks like a duplicate"): with paho here, a first run saw 3 QoS 2
    messages delivered twice, each a PUBLISH paho sent again after its PUBREL. This one resends
    a PUBLISH (DUP) until its PUBREC, then only the PUBREL until its PUBCOMP. A client id of
    its own each start: the state of its packet ids dies with the process."""
    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    client_id = f"chaos-{a.name}-{a.inc}".encode()
    # Protocol level 4 (3.1.1), flags 0 (clean session 0), keep alive 0 (none).
    connect = packet(0x10, b"\x00\x04MQTT\x04\x00\x00\x00" + len(client_id).to_bytes(2) + client_id)
    flight: dict[int, tuple[str, bytes, bool]] = {}  # packet id: tag, PUBLISH, PUBREC'd
    seq, next_id = 0, 1
    sock: socket.socket | None = None
    buffer = bytearray()
    for _ in range(10_000_000):
        if time.time() > a.until:
            break
        if sock is None:
            try:
                sock = socket.create_connection(("127.0.0.1", a.port), timeout=2)
                _connacked(sock, connect, buffer)
                for packet_id, (_tag, publish, released) in flight.items():  # in sent order
                    pid = packet_id.to_bytes(2)
                    sock.sendall(packet(0x62, pid) if released else packet(0x3C, publish))
            except OSError:
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.1)
                continue
        try:
            if len(flight) < 20:
                while next_id in flight:
                    next_id = next_id % 65535 + 1
                tag = f"{a.name}.{a.inc}.{seq}"
                topic = f"q2/t{(seq + 1) % 4}".encode()
                seq += 1
                pid = next_id.to_bytes(2)
                publish = len(topic).to_bytes(2) + topic + pid + body_for(tag, rng)
                flight[next_id] = (tag, publish, False)
                next_id = next_id % 65535 + 1
                sock.sendall(packet(0x34, publish))
            ready, _, _ = select.select([sock], [], [], 0.005)
            if ready:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("closed")
                buffer += data
                for first, body in _packets(buffer):
                    packet_id = int.from_bytes(body[:2])
                    if first >> 4 == 5:  # PUBREC: the PUBREL from now on, never the PUBLISH
                        entry = flight.get(packet_id)
                        if entry is not None:
                            flight[packet_id] = (entry[0], entry[1], True)
                        sock.sendall(packet(0x62, body[:2]))
                    elif first >> 4 == 7 and packet_id in flight:  # PUBCOMP
                        log.write("K", flight.pop(packet_id)[0], now())
        except OSError:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()


def role_subscriber(a: argparse.Namespace) -> None:
    """A persistent member of `$share/g/#` at QoS 1 (`sub0`, `sub1`); --qos2: a persistent
    QoS 2 subscriber of q2/# (`sub2`), never killed (paho delivers a QoS 2 message at its
    PUBREL and keeps what awaits one in memory only), which ends, after the chaos, only once
    connected and idle for 3 s; `retcheck`, a clean session reading ret/#'s retained ones."""
    log = Log(a.log)
    filt, qos = {"sub2": ("q2/#", 2), "retcheck": ("ret/#", 1)}.get(a.name, ("$share/g/#", 1))
    c = mqtt_client(f"chaos-{a.name}", clean=a.name == "retcheck")
    last = [time.time()]
    connected_at = [0.0]

    def on_connect(
        client: mqtt.Client, _u: object, flags: ConnectFlags, rc: ReasonCode, _p: object
    ) -> None:
        if not rc.is_failure:
            log.write("C", flags.session_present, now())
            connected_at[0] = time.time()
            client.subscribe(filt, qos=qos)

    def on_disconnect(client: mqtt.Client, _u: object, _f: object, _rc: object, _p: object) -> None:
        connected_at[0] = 0.0

    def on_message(client: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        last[0] = time.time()
        log.write("M", check_body(msg.payload) or "BAD", msg.topic, int(msg.dup), now())

    def on_subscribe(
        client: mqtt.Client, _u: object, _mid: int, rcs: list[ReasonCode], _p: object
    ) -> None:
        log.write("S", rcs[0], now())

    c.on_connect, c.on_message, c.on_subscribe = on_connect, on_message, on_subscribe
    c.on_disconnect = on_disconnect
    c.connect_async("127.0.0.1", a.port, keepalive=5)
    c.loop_start()
    start = time.time()
    for _ in range(1_000_000):
        t = time.time()
        if t > a.until or (a.drain and t - last[0] > 3 and t - start > 4):
            break
        idle = t - max(last[0], connected_at[0])
        if a.idle_after and t > a.idle_after and connected_at[0] and idle > 3:
            break
        time.sleep(0.05)
    if a.drain or a.idle_after:
        c.disconnect()
    c.loop_stop()


def role_member5(a: argparse.Namespace) -> None:
    """--share-qos2: a member (`g0`-`g2`) of `$share/g2/q2/#` at QoS 2 over a raw MQTT 5 socket
    (paho delivers a QoS 2 message only at its PUBREL, keeping it in memory until then, so a
    killed paho member would lose what boxmq rightly counted as the member's at its PUBREC).
    Each start takes a Session Expiry Interval at random, 0 (the session ends with the
    connection), 1 s, or an hour (`g0` always an hour: the group never empties, which would
    end it and its messages), and one start in three waits 0-3 s before connecting, so a
    session of 1 s runs out while its client is away, or not. It logs a PUBLISH at its
    arrival (`M`, delivered then: method A of MQTT 5.0 §4.3.3, a repeat of a packet id still
    awaiting its PUBREL is not delivered again, `D`), its PUBREC (`R`), half of them held
    0-0.5 s (a kill then finds messages delivered and not yet acknowledged), then its
    PUBREL (`L`)."""
    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    expiry = 3600 if a.name == "g0" or a.drain else rng.choice((0, 1, 3600))
    if not a.drain and a.inc > 1 and rng.random() < 1 / 3:
        time.sleep(rng.uniform(0, 3))
    client_id = f"chaos-{a.name}"
    # Clean Start 0 whatever the expiry: a start may resume the session of the one before.
    connect = connect5(client_id, False, 10, expiry=expiry)
    subscribe = (1).to_bytes(2) + b"\x00" + string("$share/g2/q2/#") + b"\x02"
    log.write("C", client_id, expiry, now())
    awaiting: dict[int, str] = {}  # packet id: tag, PUBREC sent, PUBREL to come
    sock: socket.socket | None = None
    buffer = bytearray()
    early: list[tuple[int, bytes]] = []
    answers: list[tuple[float, int, str]] = []  # PUBRECs to send: when, packet id, tag
    last = time.time()
    for _ in range(10_000_000):
        t = time.time()
        if t > a.until or (a.drain and t - last > 3):
            break
        if sock is None:
            try:
                sock = socket.create_connection(("127.0.0.1", a.port), timeout=2)
                got = _connacked(sock, connect, buffer)
                body = got[0][1]
                answers.clear()  # those the server still wants, it sends again (DUP)
                if not body[0] & 1:
                    awaiting.clear()  # a new session: no PUBREL of the old one comes
                log.write("N", body[0] & 1, now())
                early = got[1:]  # what a resumed session is sent again, read with the CONNACK
                sock.sendall(packet(0x82, subscribe))
                last = time.time()
            except OSError:
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.1)
                continue
        try:
            for when, pid, tag in sorted(answers):
                if when > time.time():
                    break
                answers.remove((when, pid, tag))
                sock.sendall(packet(0x50, pid.to_bytes(2)))
                log.write("R", tag, pid, now())
            if not early:
                ready, _, _ = select.select([sock], [], [], 0.02)
                if not ready:
                    continue
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("closed")
                buffer += data
            got, early = early + _packets(buffer), []
            for first, body in got:
                kind = first >> 4
                if kind == 3:
                    qos, at = (first >> 1) & 3, 2 + int.from_bytes(body[:2])
                    topic = body[2:at].decode()
                    pid = int.from_bytes(body[at : at + 2]) if qos else 0
                    at += 2 if qos else 0
                    size, at = read_varint(body, at)
                    tag = check_body(body[at + size :]) or "BAD"
                    last = time.time()
                    if qos == 2 and pid in awaiting:  # delivered before: not again
                        kind_of = "D" if awaiting[pid] == tag else "W"  # W: another message
                        log.write(kind_of, tag, awaiting[pid], pid, now())
                    else:
                        log.write("M", tag, topic, (first >> 3) & 1, pid, now())
                    if qos == 2:
                        awaiting[pid] = tag
                        slow = not a.drain and rng.random() < 0.5
                        answers.append(
                            (time.time() + (rng.uniform(0, 0.5) if slow else 0), pid, tag)
                        )
                    elif qos == 1:
                        sock.sendall(packet(0x40, pid.to_bytes(2)))
                elif kind == 6:
                    pid = int.from_bytes(body[:2])
                    log.write("L", awaiting.pop(pid, "?"), pid, now())
                    sock.sendall(packet(0x70, body[:2]))
                elif kind == 9:
                    size, at = read_varint(body, 2)
                    log.write("S", body[at + size], now())
        except OSError:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()


ROLES = {
    "producer": role_producer,
    "consumer": role_consumer,
    "consumers3": role_consumers3,
    "publisher2": role_publisher2,
    "publisher": role_publisher,
    "subscriber": role_subscriber,
    "member5": role_member5,
}

# ---------------------------------------------------------------- orchestration


class Proc:
    def __init__(self, name: str, role: str, run: Run, queue: str = QUEUE) -> None:
        self.name, self.role, self.run, self.queue = name, role, run, queue
        self.inc = 0
        self.p: subprocess.Popen[bytes] | None = None
        self.err = os.path.join(run.logs, f"{name}.err")

    script = HERE  # whose `role` command runs the roles

    def start(self, until: float, drain: bool = False, idle_after: float = 0.0) -> None:
        self.inc += 1
        cmd = self.command(until, drain, idle_after)
        # Appended to by each start of the role; closed here, the child keeps its own copy.
        with open(self.err, "ab") as err:
            self.p = subprocess.Popen(cmd, stdout=err, stderr=err, start_new_session=True)

    def common_command(self, until: float, drain: bool) -> list[str]:
        """`boxmq serve` with MQTT on the run's port, or `script role` with the options of
        role_parser: what a start of chaos.py's and of chaos_mixed.py's have alike."""
        r = self.run
        if self.role == "serve":
            cmd = [PY, "-m", "boxmq", "serve", "--data", r.root, "--fsync", r.fsync]
            return [*cmd, "--mqtt", f"127.0.0.1:{r.port}"]
        cmd = [PY, self.script, "role", self.role, "--name", self.name, "--inc", str(self.inc)]
        cmd += ["--root", r.root, "--log", os.path.join(r.logs, f"{self.name}.log")]
        cmd += ["--fsync", r.fsync, "--until", str(until), "--port", str(r.port)]
        cmd += ["--lock-timeout", str(30.0 if drain else LOCK_TIMEOUT)]
        return cmd + (["--drain"] if drain else [])

    def command(self, until: float, drain: bool, idle_after: float) -> list[str]:
        """A start's command line: common_command, and a role's options of this script."""
        cmd = self.common_command(until, drain)
        if self.role != "serve":
            r = self.run
            cmd += ["--queue", self.queue, "--backlog", str(r.backlog)]
            cmd += ["--idle-after", str(idle_after)]
            if r.threads:
                cmd.append("--threads")
        return cmd

    def listening(self) -> None:
        """`boxmq serve` listens, or the run stops here saying so (not as every role's errors)."""
        assert self.p is not None
        listening(self.p, self.name, Path(self.err), self.run.port)

    def kill(self) -> None:
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
        if self.p is not None:
            reap_killed(self.p)  # bounded: one stuck past SIGKILL is named, not waited for ever


class Run:
    def __init__(self, a: argparse.Namespace) -> None:
        self.seed, self.fsync = a.seed, a.fsync
        self.backlog, self.threads, self.qos2 = a.backlog, a.threads, a.qos2
        self.share_qos2 = a.share_qos2
        where = a.dir or os.path.join(tempfile.gettempdir(), f"boxmq-chaos-{a.seed}-{a.fsync}")
        self.dir = os.path.abspath(where)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.root = os.path.join(self.dir, "root")
        self.logs = os.path.join(self.dir, "logs")
        os.makedirs(self.logs)
        self.port = free_port()
        self.seconds = min(a.seconds, 120)
        self.depths = [0]  # QUEUE's target/ at each kill
        self.exited: set[str] = set()  # the starts of roles that ended by themselves


def exited_by_themselves(procs: Iterable[Proc]) -> set[str]:
    """The starts of roles whose process ended other than by this script's SIGKILL (a role's
    crash, its traceback in its .err; `boxmq serve` stopping), as `name.start (exit code)`."""
    return {
        f"{p.name}.{p.inc} (exit {p.p.returncode})"
        for p in procs
        if p.p is not None and p.p.poll() not in (None, -signal.SIGKILL)
    }


def note_exits(run: Run, procs: Iterable[Proc]) -> None:
    """Each new exit of `exited_by_themselves`, printed and kept for the check, where each
    is a violation: a role that is not running checks nothing (before 2026-12-02 printed
    alone, at every kill, and the run said violations=0)."""
    new = exited_by_themselves(procs) - run.exited
    if new:
        print("exited by itself:", sorted(new), flush=True)
        run.exited |= new


def chaos(a: argparse.Namespace) -> int:
    run = Run(a)
    rng = random.Random(a.seed)
    procs = [Proc("serve", "serve", run)]
    procs += [Proc(f"p{i}", "producer", run) for i in range(rng.choice((2, 3)))]
    procs += [Proc(f"c{i}", "consumer", run) for i in range(rng.choice((2, 3)))]
    if run.threads:
        procs += [Proc("ct", "consumers3", run), Proc("cb", "consumer", run, QUEUE_B)]
    procs += [Proc("pub", "publisher", run), Proc("sub0", "subscriber", run)]
    procs += [Proc("sub1", "subscriber", run)]
    if run.qos2:
        procs += [Proc("pub2", "publisher2", run), Proc("ret", "publisher", run)]
    if run.share_qos2:
        procs += [Proc(f"g{i}", "member5", run) for i in range(3)]
        if not run.qos2:
            procs.append(Proc("pub2", "publisher2", run))
    sub2 = Proc("sub2", "subscriber", run) if run.qos2 else None  # never killed (role_subscriber)
    kills: collections.Counter[str] = collections.Counter()
    kill_log = Log(os.path.join(run.logs, "kills.log"))
    until = time.time() + run.seconds
    print(
        f"seed {a.seed} fsync {run.fsync} backlog {run.backlog} threads {run.threads} "
        f"qos2 {run.qos2} share-qos2 {run.share_qos2} dir {run.dir} "
        f"roles {[p.name for p in procs]}",
        flush=True,
    )
    try:
        procs[0].start(until)
        procs[0].listening()
        # The share group first: a publish before it exists has nobody to go to.
        subs = [p for p in procs if p.role in ("subscriber", "member5")] + ([sub2] if sub2 else [])
        for p in subs:
            if p is sub2:
                p.start(until + 120, idle_after=until)  # on through the drain's serve
            else:
                p.start(until + 5)  # the killer ends first; the roles run on a little
        for _ in range(200):
            logs = [read_log(os.path.join(run.logs, f"{p.name}.log")) for p in subs]
            if all(any(f[0] == "S" for f in lines) for lines in logs):
                break
            time.sleep(0.05)
        for p in procs[1:]:
            if p not in subs:
                p.start(until + 5)
        watched = [*procs, *([sub2] if sub2 else [])]  # whose ends by themselves count
        for _ in range(1000):
            if time.time() + 0.5 > until:
                break
            time.sleep(rng.uniform(a.kill_min, a.kill_max))
            victim = rng.choice(procs)
            victim.kill()
            kill_log.write("X", victim.name, now())
            kills[victim.role if victim.role != "publisher" else victim.name] += 1
            note_exits(run, watched)
            victim.start(until + 5)
            with contextlib.suppress(FileNotFoundError):  # no put yet
                run.depths.append(len(os.listdir(os.path.join(run.root, QUEUE, "target"))))
        note_exits(run, watched)
    except BaseException:
        if sub2 is not None:
            sub2.kill()
        raise
    finally:
        for p in procs:
            p.kill()  # SIGKILL all at once, wherever they are
        kill_log.write("X", "all", now())
    print("kills by role:", dict(kills), flush=True)
    try:
        return check(run, procs, kills, sub2)
    finally:
        if sub2 is not None:
            sub2.kill()


def scan(run: Run) -> tuple[list[str], dict[str, int]]:
    """Every file in a state folder: its name decodes, its body is whole."""
    from boxmq.store.names import decode, split_lock

    problems: list[str] = []
    counts: collections.Counter[str] = collections.Counter()
    states = {"working", "target", "processing", "processed", "expired", "error", "routing"}
    for folder, _dirs, files in os.walk(run.root):
        state = os.path.basename(folder)
        if state not in states:
            continue
        for f in files:
            path = os.path.join(folder, f)
            counts[state] += 1
            if state == "working" and os.path.basename(os.path.dirname(folder)) == ".incoming":
                # QoS 2 stored at PUBLISH, awaiting a PUBREL: of a killed pub2's session (a
                # client id each start), which never returns nor ends (MQTT 3.1.1): by design.
                counts["awaiting_pubrel"] += 1
                continue
            if state == "working":
                age = time.time() - os.stat(path).st_mtime
                counts["working_older_than_5s"] += age > 5
                continue
            try:
                decode(split_lock(f)[0])
            except Exception as e:
                problems.append(f"name does not decode: {path}: {e}")
            with open(path, "rb") as fh:
                body = fh.read()
            if check_body(body) is None:
                problems.append(f"damaged body ({len(body)} bytes): {path}")
    return problems, dict(counts)


class Caught(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def read_log(path: str) -> list[list[str]]:
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        lines = fh.read().split("\n")
    # A line cut by SIGKILL cannot happen (one os.write each), but say so if it does.
    return [ln.split() for ln in lines if ln]


def stored_twice(tags: dict[str, str]) -> list[tuple[str, list[str]]]:
    """The puts delivered under more than one id, (tag, ids) sorted: `tags` maps each
    delivered id to the tag its body carries, which a producer gives one message only (a
    body that failed its checksum, tagged BAD, is counted apart)."""
    ids_of: dict[str, set[str]] = collections.defaultdict(set)
    for mid, tag in tags.items():
        ids_of[tag].add(mid)
    return sorted(
        (tag, sorted(ids)) for tag, ids in ids_of.items() if len(ids) > 1 and tag != "BAD"
    )


def stored_twice_or_unlogged(
    put: dict[str, str], tags: dict[str, str], unknown: Iterable[str]
) -> list[str]:
    """What the queue's counts let by: a put delivered under two ids (its tag, which a
    producer gives once, `p0.3.17`, in the bodies of two messages: stored twice), and an
    acked id that no put log names (`unknown`) unless it is a put whose log line a kill cut
    off, its tag past the last one its producer's start logged. `put`: the logged puts, id
    to tag; `tags`: the delivered ids, id to the tag of their body."""
    problems: list[str] = []
    if twice := stored_twice(tags):
        problems.append(f"{len(twice)} puts delivered under two ids (stored twice): {twice[:3]}")
    last: dict[str, int] = collections.defaultdict(lambda: -1)  # a producer's start's last
    for tag in put.values():
        start, _, seq = tag.rpartition(".")
        last[start] = max(last[start], int(seq))
    logged_before = []
    for mid in unknown:
        start, _, seq = tags.get(mid, "").rpartition(".")
        if not seq.isdigit() or int(seq) <= last[start]:
            logged_before.append((mid, tags.get(mid)))
    if logged_before:
        problems.append(
            f"{len(logged_before)} acked ids no put returned (not the last puts of a killed "
            f"producer): {logged_before[:3]}"
        )
    return problems


def check(run: Run, procs: list[Proc], kills: collections.Counter[str], sub2: Proc | None) -> int:
    import boxmq

    problems: list[str] = []
    notes: list[str] = []
    # Locks of the killed consumers run out; a sweep must then leave processing/ empty.
    time.sleep(LOCK_TIMEOUT + 0.5)
    handler = Caught(logging.WARNING)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        logging.getLogger().addHandler(handler)
        box = boxmq.open(run.root, fsync=run.fsync, max_deliveries=None)
        box.sweep()
        logging.getLogger().removeHandler(handler)
    for w in warned:
        notes.append(f"warning at open/sweep: {w.message}")
    for rec in handler.records:
        notes.append(f"log at open/sweep: {rec.levelname} {rec.getMessage()}")
    problems += [f"{start} exited by itself, not killed" for start in sorted(run.exited)]
    found, counts = scan(run)
    problems += found
    print("files after kill+sweep:", counts, flush=True)
    queues = [QUEUE, *([QUEUE_B] if run.threads else [])]
    for name in queues:
        q = box.queue(name)
        left = q.peek(state="processing")
        if left:
            problems.append(
                f"{len(left)} files in {name}/processing after the locks expired + sweep"
            )
        errors = q.peek(state="error")
        if errors:
            notes.append(f"{len(errors)} {name} messages in error/ (requeued for the drain)")
            q.requeue()
    for folder, _dirs, files in os.walk(run.root):
        rel = os.path.relpath(folder, run.root)
        if os.path.basename(folder) == "processing" and rel.split("/")[0] not in queues and files:
            notes.append(f"after kill+sweep, {len(files)} held by MQTT sessions in {rel}")
    box.close()

    drain_start = time.time()
    # Drain the queues with a generous lock; the MQTT sessions: serve again, both share group
    # members reconnect their sessions (and sub2, still running, its own).
    drains = [Proc("cdrain", "consumer", run)]
    if run.threads:
        drains.append(Proc("cdrainb", "consumer", run, QUEUE_B))
    serve = procs[0]
    subs = [Proc(f"sub{i}", "subscriber", run) for i in range(2)]
    subs += [Proc(f"g{i}", "member5", run) for i in range(3 if run.share_qos2 else 0)]
    retcheck = Proc("retcheck", "subscriber", run)
    limit = 40 + (run.backlog / 50 if run.backlog else 0)  # a deep backlog takes its time
    try:
        for d in drains:
            d.start(time.time() + limit - 10, drain=True)
        serve.start(0)
        serve.listening()
        for s in subs:
            s.inc = 100
            s.start(time.time() + 30, drain=True)
        waited = [*drains, *subs, *([sub2] if sub2 else [])]
        for p in waited:
            try:
                p.p.wait(max(1.0, drain_start + limit - time.time()))  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                notes.append(f"{p.name} drain did not end in {limit:.0f} s")
        if run.qos2:
            retcheck.start(time.time() + 30, drain=True)
            try:
                retcheck.p.wait(40)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                notes.append("retcheck did not end in 40 s")
    finally:
        for p in [*drains, *subs, retcheck, serve]:
            p.kill()

    print(f"drain done in {time.time() - drain_start:.1f} s", flush=True)
    # Queue invariants.
    put: dict[str, str] = {}
    expiring: set[str] = set()
    for p in procs:
        if p.role == "producer":
            for line in read_log(os.path.join(run.logs, f"{p.name}.log")):
                if line[0] != "P":
                    continue
                put[line[1]] = line[2]
                if len(line) > 4 and 0 < float(line[4]) < 60:
                    expiring.add(line[1])
    events: list[tuple[int, str, str, str]] = []  # (time, kind, id, who)
    tags: dict[str, str] = {}  # a delivered id's put, by the tag its body carries
    bad_bodies = 0
    consumers = [p.name for p in procs if p.role in ("consumer", "consumers3")]
    for name in consumers + [d.name for d in drains]:
        for line in read_log(os.path.join(run.logs, f"{name}.log")):
            if line[0] == "R":
                events.append((int(line[3]), "R", line[1], name))
                mid, tag = line[1], line[2]
                if tag == "BAD":
                    bad_bodies += 1
                    continue
                tags[mid] = tag
                if mid in put and put[mid] != tag:
                    problems.append(f"{mid} delivered with body of {tag}, put as {put[mid]}")
            elif line[0] == "A":
                events.append((int(line[2]), "A", line[1], name))
    if bad_bodies:
        problems.append(f"{bad_bodies} queue deliveries with a damaged body")
    events.sort()
    acked_at: dict[str, tuple[int, str]] = {}
    deliveries: collections.Counter[str] = collections.Counter()
    for t, kind, mid, who in events:
        if kind == "A":
            acked_at.setdefault(mid, (t, who))
        else:
            deliveries[mid] += 1
            if mid in acked_at:
                problems.append(f"{mid} delivered to {who} after its ack by {acked_at[mid][1]}")
    expired = ids_in(run, "expired")
    # An ack() that a kill cut short after its rename (during its flush, or before its log
    # line): the message is done, though no consumer saw the ack return.
    cut = {m for m in ids_in(run, "processed") if m in put and m not in acked_at}
    lost = [m for m in put if m not in acked_at and m not in expired and m not in cut]
    if lost:
        problems.append(f"{len(lost)} returned puts never acked nor expired, e.g. {lost[:3]}")
    not_delivered = sorted(m for m in cut if not deliveries[m])
    if not_delivered:
        problems.append(f"{len(not_delivered)} in processed/, never delivered: {not_delivered[:3]}")
    wrongly = [m for m in expired if m in put and m not in expiring]
    if wrongly:
        problems.append(f"{len(wrongly)} puts without a short expiry in expired/: {wrongly[:3]}")
    unknown = [m for m in acked_at if m not in put]
    problems += stored_twice_or_unlogged(put, tags, unknown)
    redelivered = sum(1 for n in deliveries.values() if n > 1)
    print(
        f"queue: {len(put)} puts returned ({len(expiring)} with a 3 s expiry, "
        f"{len(expired)} expired), {len(acked_at)} acked, {len(events)} events, "
        f"{redelivered} delivered more than once, {len(unknown)} acked not in a put log "
        f"(puts whose log line a kill cut off), {len(cut)} acked by an ack() a kill cut short",
        flush=True,
    )
    if run.backlog:
        print(f"{QUEUE}'s ready messages at the kills: up to {max(run.depths)}", flush=True)

    # MQTT invariants.
    acked_pub = set()
    for line in read_log(os.path.join(run.logs, "pub.log")):
        if line[0] == "K":
            acked_pub.add(line[1])
    got: collections.Counter[str] = collections.Counter()
    bad_mqtt = 0
    for name in ("sub0", "sub1"):
        for line in read_log(os.path.join(run.logs, f"{name}.log")):
            if line[0] == "M":
                bad_mqtt += line[1] == "BAD"
                got[line[1]] += 1
    if bad_mqtt:
        problems.append(f"{bad_mqtt} MQTT deliveries with a damaged payload")
    missing = sorted(acked_pub - set(got))
    if missing:
        problems.append(f"{len(missing)} PUBACKed publishes never delivered, e.g. {missing[:5]}")
    print(
        f"mqtt: {len(acked_pub)} PUBACKed, {len(got)} distinct delivered, "
        f"{sum(got.values())} deliveries, {sum(1 for n in got.values() if n > 1)} more than once",
        flush=True,
    )
    if run.qos2:
        problems += check_qos2_retained(run)
    if run.share_qos2:
        problems += check_share_qos2(run)
    found, counts = scan(run)
    problems += found
    print("files after drain:", counts, flush=True)
    # What a killed producer left in working/ goes at the next sweep past abandon_after.
    box = boxmq.open(run.root, fsync=run.fsync, abandon_after=4.0)
    box.sweep()
    box.close()
    found, counts = scan(run)
    problems += found
    if counts.get("working_older_than_5s"):
        problems.append(f"working/ files left past abandon_after + a sweep: {counts}")
    print("files after a sweep with abandon_after=4s:", counts, flush=True)
    for note in notes:
        print("note:", note)
    for problem in problems:
        print("VIOLATION:", problem)
    print(
        f"RESULT seed={run.seed} fsync={run.fsync} kills={dict(kills)} violations={len(problems)}",
        flush=True,
    )
    return 1 if problems else 0


def check_qos2_retained(run: Run) -> list[str]:
    """QoS 2: every PUBCOMPed publish delivered to sub2, and no publish delivered twice.
    Retained: each key's retained message, read after the drain, is its last acknowledged
    (PUBACK, PUBCOMP) one or one sent after it (one publish at a time: sent after is
    acknowledged after)."""
    problems: list[str] = []
    completed = {line[1] for line in read_log(os.path.join(run.logs, "pub2.log")) if line[0] == "K"}
    got: collections.Counter[str] = collections.Counter()
    for line in read_log(os.path.join(run.logs, "sub2.log")):
        if line[0] == "M":
            got[line[1]] += 1
    if got["BAD"]:
        problems.append(f"{got['BAD']} QoS 2 deliveries with a damaged payload")
    missing = sorted(completed - set(got))
    if missing:
        problems.append(f"{len(missing)} PUBCOMPed QoS 2 publishes never delivered: {missing[:5]}")
    twice = sorted(t for t, n in got.items() if n > 1 and t != "BAD")
    if twice:
        problems.append(f"{len(twice)} QoS 2 publishes delivered more than once: {twice[:5]}")

    def order(tag: str) -> tuple[int, int]:
        _name, inc, seq = tag.split(".")
        return int(inc), int(seq)

    last_acked: dict[int, tuple[int, int]] = {}
    for line in read_log(os.path.join(run.logs, "ret.log")):
        if line[0] != "K":
            continue
        inc, seq = order(line[1])
        key = (seq + 1) % RETAINED_KEYS  # role_publisher numbers from 1 in the topic
        last_acked[key] = max(last_acked.get(key, (0, -1)), (inc, seq))
    kept: dict[int, str] = {}
    for line in read_log(os.path.join(run.logs, "retcheck.log")):
        if line[0] == "M":
            kept[int(line[2].rpartition("/k")[2])] = line[1]
    for key, acked in sorted(last_acked.items()):
        tag = kept.get(key)
        if tag is None or tag == "BAD" or order(tag) < acked:
            problems.append(f"ret/k{key} retains {tag}, last acknowledged {acked}")
    print(
        f"qos2: {len(completed)} PUBCOMPed, {len(got)} distinct delivered to sub2, "
        f"{sum(got.values())} deliveries; retained: {len(last_acked)} keys acknowledged, "
        f"{len(kept)} read back",
        flush=True,
    )
    return problems


def check_share_qos2(run: Run) -> list[str]:
    """--share-qos2: every PUBCOMPed publish of pub2 delivered to a member of the group and
    answered by one with PUBREC, or in its error/; none delivered after a member got its
    PUBREL (the server had its PUBREC: the message is the member's, MQTT 5.0 §4.3.3); none
    delivered again unless its member, or the server, was killed in between; a packet id
    repeated while awaiting its PUBREL only for the same message."""
    problems: list[str] = []
    completed = {line[1] for line in read_log(os.path.join(run.logs, "pub2.log")) if line[0] == "K"}
    killed: collections.defaultdict[str, list[int]] = collections.defaultdict(list)
    for line in read_log(os.path.join(run.logs, "kills.log")):
        if line[0] == "X":
            killed[line[1]].append(int(line[2]))
    events: list[tuple[int, str, str, str]] = []  # time, kind, tag, member
    answered: set[str] = set()  # PUBREC sent by a member
    for name in ("g0", "g1", "g2"):
        for line in read_log(os.path.join(run.logs, f"{name}.log")):
            if line[0] == "W":
                problems.append(f"{name} got {line[1]} under the packet id of {line[2]}")
            elif line[0] == "R":
                answered.add(line[1])
            elif line[0] in "MDL":
                events.append((int(line[-1]), line[0], line[1], name))
    events.sort()
    last: dict[str, tuple[int, str]] = {}  # tag: its last delivery
    released: dict[str, str] = {}
    redelivered = dup = 0
    for t, kind, tag, who in events:
        if kind == "L":
            released.setdefault(tag, who)
        elif kind == "D":
            dup += 1
        else:
            if tag == "BAD":
                problems.append(f"{who} got a damaged payload")
                continue
            if tag in released:
                problems.append(f"{tag} delivered to {who} after {released[tag]} got its PUBREL")
            if tag in last:
                redelivered += 1
                t1, who1 = last[tag]
                cuts = killed[who1] + killed["serve"] + killed["all"]
                if not any(t1 < k < t for k in cuts):
                    problems.append(f"{tag} to {who1}, then to {who}, with no kill between")
            last[tag] = (t, who)
    dead: set[str] = set()
    held: collections.Counter[str] = collections.Counter()
    for folder, _dirs, files in os.walk(os.path.join(run.root, "topic-root")):
        if os.path.basename(os.path.dirname(folder)) != "share.g2":
            continue
        for f in files:
            held[os.path.basename(folder)] += 1
            if os.path.basename(folder) == "error":
                with open(os.path.join(folder, f), "rb") as fh:
                    dead.add(check_body(fh.read()) or "BAD")
    missing = sorted(completed - set(last) - dead)
    if missing:
        problems.append(f"{len(missing)} PUBCOMPed publishes never delivered to g2: {missing[:5]}")
    unanswered = sorted(completed - answered - dead - set(missing))
    if unanswered:
        problems.append(
            f"{len(unanswered)} PUBCOMPed publishes no member PUBRECed: {unanswered[:5]}"
        )
    for state in ("target", "processing"):
        if held[state]:
            problems.append(f"{held[state]} messages left in the group's {state}/ after the drain")
    print(
        f"share-qos2: {len(completed)} PUBCOMPed, {len(last)} distinct delivered to g2, "
        f"{redelivered} delivered again, {len(released)} released, {dup} repeats not "
        f"delivered again, {len(dead)} in error/; group files: {dict(held)}",
        flush=True,
    )
    return problems


def ids_in(run: Run, state: str) -> set[str]:
    """The ids of the messages in one state folder of the queues."""
    from boxmq.store.names import decode, split_lock

    ids: set[str] = set()
    for queue in (QUEUE, QUEUE_B):
        folder = os.path.join(run.root, queue, state)
        for f in os.listdir(folder) if os.path.isdir(folder) else ():
            ids.add(decode(split_lock(f)[0]).message_id)
    return ids


def role_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], roles: Iterable[str]
) -> argparse.ArgumentParser:
    """The `role` command of `sub` (a parser's subparsers) with the options every role of
    `roles` takes, here and in chaos_mixed.py, as Proc.start passes them. Called once this
    checkout's boxmq comes first (`main`; chaos_mixed.py's roles inherit its PYTHONPATH)."""
    from boxmq.store.commit import FsyncPolicy

    r = sub.add_parser("role")
    r.add_argument("role", choices=sorted(roles))
    for opt in ("--name", "--root", "--log"):
        r.add_argument(opt, required=True)
    r.add_argument("--fsync", required=True, choices=FsyncPolicy.words())
    r.add_argument("--inc", type=int, default=0)
    r.add_argument("--until", type=float, required=True)
    r.add_argument("--port", type=int, default=0)
    r.add_argument("--lock-timeout", type=float, default=LOCK_TIMEOUT)
    r.add_argument("--drain", action="store_true")
    return r


def main() -> int:
    # Every process of the run, and the checks, use this checkout's boxmq: put first before
    # the first import of it (its fsync words), which the later ones would reuse.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, SRC)
    from boxmq.store.commit import FsyncPolicy

    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("run")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--fsync", default="always", choices=FsyncPolicy.words())
    c.add_argument("--seconds", type=float, default=75)
    c.add_argument("--dir")
    c.add_argument("--kill-min", type=float, help="0.5 s (--mixed: 2 s)")
    c.add_argument("--kill-max", type=float, help="3 s (--mixed: 5 s)")
    c.add_argument("--backlog", type=int, default=0, help="keep the queue about N deep")
    c.add_argument("--threads", action="store_true", help="3 consumer threads in one process")
    c.add_argument("--qos2", action="store_true", help="QoS 2 and retained publishers")
    c.add_argument("--share-qos2", action="store_true", help="an MQTT 5 QoS 2 share group")
    c.add_argument(
        "--mixed",
        action="store_true",
        help="every door on one root: serve (MQTT, XMPP via Prosody), the API, the CLI; "
        "kills serve and the embedded consumer (bench/chaos_mixed.py)",
    )
    c.add_argument("--kills", type=int, default=10, help="--mixed: how many kills")
    r = role_parser(sub, ROLES)
    r.add_argument("--queue", default=QUEUE)
    r.add_argument("--backlog", type=int, default=0)
    r.add_argument("--threads", action="store_true")
    r.add_argument("--idle-after", type=float, default=0.0)
    a = ap.parse_args()
    if a.cmd == "role":
        ROLES[a.role](a)
        return 0
    # --mixed kills serve one time in two, and a restarted serve takes about a second.
    least, most = (2.0, 5.0) if a.mixed else (0.5, 3.0)
    a.kill_min = least if a.kill_min is None else a.kill_min
    a.kill_max = most if a.kill_max is None else a.kill_max
    if a.mixed:
        sys.modules.setdefault("chaos", sys.modules[__name__])  # one copy of this module
        import chaos_mixed

        return chaos_mixed.run(a)
    return chaos(a)


if __name__ == "__main__":
    sys.exit(main())
