"""Chaos run: producers, consumers, `boxmq serve` and MQTT clients on one root, SIGKILLed at random.

python bench/chaos.py run --seed 1 --fsync always [--seconds 75] [--dir DIR]

Not a test (no CI runs it): about 90 s a run. On one root: 2-3 producers (put, put_many), 2-3
consumers (max_in_flight 5, lock_timeout 2 s), `boxmq serve` with a QoS 1 publisher and a
`$share/g/#` group of two persistent QoS 1 subscribers; every 0.5-3 s one of them, at random,
is SIGKILLed and started again (same role, same MQTT client id). Every role is this script run
again (`chaos.py role ...`) and logs with one os.write a line (in the kernel when it returns:
a SIGKILL loses no line written) what returned: a put's id, a delivery, an ack, a PUBACK.
Then everything is killed, a sweep runs once the locks ran out, the queue and the sessions are
drained, and the invariants checked: every returned put and every PUBACKed publish delivered,
nothing delivered after its ack returned, every stored file's name decodes and its body
matches its checksum, nothing left in processing/ nor, past abandon_after, in working/. It
prints the kills by role and the counts, and ends with `RESULT ... violations=N` (exit 1 if
N > 0). Bounded: the chaos lasts --seconds (<= 120), the drain at most 40 s, every loop is
bounded in count and time, and every process started is killed at the end; the root and the
logs stay in --dir for a look.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import paho.mqtt.client as mqtt
from paho.mqtt.client import ConnectFlags
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

from processes import free_port

PY = sys.executable
HERE = os.path.abspath(__file__)
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
QUEUE = "chaos"
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

    def write(self, *fields: object) -> None:
        os.write(self.fd, (" ".join(str(f) for f in fields) + "\n").encode())


# ---------------------------------------------------------------- roles


def role_producer(a: argparse.Namespace) -> None:
    import boxmq

    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    q = boxmq.open(a.root, fsync=a.fsync, max_deliveries=None).queue(QUEUE)
    seq = 0
    for _ in range(1_000_000):
        if time.time() > a.until:
            break
        if rng.random() < 0.5:
            tag = f"{a.name}.{a.inc}.{seq}"
            seq += 1
            mid = q.put(body_for(tag, rng))
            log.write("P", mid, tag, now())
        else:
            tags = [f"{a.name}.{a.inc}.{seq + i}" for i in range(rng.randint(1, 6))]
            seq += len(tags)
            ids = q.put_many([body_for(t, rng) for t in tags])
            for mid, tag in zip(ids, tags, strict=True):
                log.write("P", mid, tag, now())
        time.sleep(rng.uniform(0.01, 0.06))


def role_consumer(a: argparse.Namespace) -> None:
    import boxmq

    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    box = boxmq.open(a.root, fsync=a.fsync, max_deliveries=None)
    c = box.queue(QUEUE).consumer(a.name, max_in_flight=5, lock_timeout=a.lock_timeout)
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
        if a.drain and not held:
            break
        if not a.drain and rng.random() < 0.03:
            time.sleep(LOCK_TIMEOUT + 0.5)  # let the locks run out under us
        for m in held:
            if not a.drain and rng.random() < 0.1:
                try:
                    m.unlock()
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
            time.sleep(rng.random() * 0.02)
    c.close()


def mqtt_client(client_id: str) -> mqtt.Client:
    c = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=False,
        protocol=mqtt.MQTTv311,
    )
    c.reconnect_delay_set(0.1, 0.5)  # type: ignore[arg-type]  # annotated int, sleeps a float
    return c


def role_publisher(a: argparse.Namespace) -> None:
    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    c = mqtt_client("chaos-pub")
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
    c.max_inflight_messages_set(20)
    c.connect_async("127.0.0.1", a.port, keepalive=5)
    c.loop_start()
    seq = 0
    for _ in range(1_000_000):
        if time.time() > a.until:
            break
        if not connected[0] or len(pending) >= 20:
            time.sleep(0.01)
            continue
        tag = f"{a.name}.{a.inc}.{seq}"
        seq += 1
        info = c.publish(f"chaos/t{seq % 4}", body_for(tag, rng), qos=1)
        with lock:
            if info.mid in early:
                early.discard(info.mid)
                log.write("K", tag, now())
            else:
                pending[info.mid] = tag
        time.sleep(0.005)
    c.loop_stop()


def role_subscriber(a: argparse.Namespace) -> None:
    log = Log(a.log)
    c = mqtt_client(f"chaos-{a.name}")
    last = [time.time()]

    def on_connect(
        client: mqtt.Client, _u: object, flags: ConnectFlags, rc: ReasonCode, _p: object
    ) -> None:
        if not rc.is_failure:
            log.write("C", flags.session_present, now())
            client.subscribe("$share/g/#", qos=1)

    def on_message(client: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        last[0] = time.time()
        log.write("M", check_body(msg.payload) or "BAD", msg.topic, int(msg.dup), now())

    def on_subscribe(
        client: mqtt.Client, _u: object, _mid: int, rcs: list[ReasonCode], _p: object
    ) -> None:
        log.write("S", rcs[0], now())

    c.on_connect, c.on_message, c.on_subscribe = on_connect, on_message, on_subscribe
    c.connect_async("127.0.0.1", a.port, keepalive=5)
    c.loop_start()
    start = time.time()
    for _ in range(1_000_000):
        t = time.time()
        if t > a.until or (a.drain and t - last[0] > 3 and t - start > 4):
            break
        time.sleep(0.05)
    if a.drain:
        c.disconnect()
    c.loop_stop()


ROLES = {
    "producer": role_producer,
    "consumer": role_consumer,
    "publisher": role_publisher,
    "subscriber": role_subscriber,
}

# ---------------------------------------------------------------- orchestration


class Proc:
    def __init__(self, name: str, role: str, run: Run) -> None:
        self.name, self.role, self.run = name, role, run
        self.inc = 0
        self.p: subprocess.Popen[bytes] | None = None

    def start(self, until: float, drain: bool = False) -> None:
        r = self.run
        self.inc += 1
        if self.role == "serve":
            cmd = [PY, "-m", "boxmq", "serve", "--data", r.root, "--fsync", r.fsync]
            cmd += ["--mqtt", f"127.0.0.1:{r.port}"]
        else:
            cmd = [PY, HERE, "role", self.role, "--name", self.name, "--inc", str(self.inc)]
            cmd += ["--root", r.root, "--log", os.path.join(r.logs, f"{self.name}.log")]
            cmd += ["--fsync", r.fsync, "--until", str(until), "--port", str(r.port)]
            cmd += ["--lock-timeout", str(30.0 if drain else LOCK_TIMEOUT)]
            if drain:
                cmd.append("--drain")
        with open(os.path.join(r.logs, f"{self.name}.err"), "ab") as err:
            self.p = subprocess.Popen(cmd, stdout=err, stderr=err, start_new_session=True)

    def kill(self) -> None:
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
        if self.p is not None:
            self.p.wait()


class Run:
    def __init__(self, a: argparse.Namespace) -> None:
        self.seed, self.fsync = a.seed, a.fsync
        where = a.dir or os.path.join(tempfile.gettempdir(), f"boxmq-chaos-{a.seed}-{a.fsync}")
        self.dir = os.path.abspath(where)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.root = os.path.join(self.dir, "root")
        self.logs = os.path.join(self.dir, "logs")
        os.makedirs(self.logs)
        self.port = free_port()
        self.seconds = min(a.seconds, 120)


def wait_port(port: int, limit: float) -> bool:
    end = time.time() + limit
    while time.time() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def chaos(a: argparse.Namespace) -> int:
    run = Run(a)
    rng = random.Random(a.seed)
    procs = [Proc("serve", "serve", run)]
    procs += [Proc(f"p{i}", "producer", run) for i in range(rng.choice((2, 3)))]
    procs += [Proc(f"c{i}", "consumer", run) for i in range(rng.choice((2, 3)))]
    procs += [Proc("pub", "publisher", run), Proc("sub0", "subscriber", run)]
    procs += [Proc("sub1", "subscriber", run)]
    kills: collections.Counter[str] = collections.Counter()
    until = time.time() + run.seconds
    print(f"seed {a.seed} fsync {run.fsync} dir {run.dir} roles {[p.name for p in procs]}")
    try:
        procs[0].start(until)
        wait_port(run.port, 10)
        # The share group first: a publish before it exists has nobody to go to.
        subs = [p for p in procs if p.role == "subscriber"]
        for p in subs:
            p.start(until + 5)  # the killer ends first; the roles run on a little
        for _ in range(200):
            logs = [read_log(os.path.join(run.logs, f"{p.name}.log")) for p in subs]
            if all(any(f[0] == "S" for f in lines) for lines in logs):
                break
            time.sleep(0.05)
        for p in procs[1:]:
            if p not in subs:
                p.start(until + 5)
        for _ in range(1000):
            if time.time() + 0.5 > until:
                break
            time.sleep(rng.uniform(a.kill_min, a.kill_max))
            victim = rng.choice(procs)
            victim.kill()
            kills[victim.role] += 1
            died = [p.name for p in procs if p.p is not None and p.p.poll() not in (None, -9)]
            if died:
                print("exited by itself:", died, flush=True)
            victim.start(until + 5)
    finally:
        for p in procs:
            p.kill()  # SIGKILL all at once, wherever they are
    print("kills by role:", dict(kills), flush=True)
    return check(run, procs, kills)


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


def check(run: Run, procs: list[Proc], kills: collections.Counter[str]) -> int:
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
    found, counts = scan(run)
    problems += found
    print("files after kill+sweep:", counts, flush=True)
    q = box.queue(QUEUE)
    left = q.peek(state="processing")
    if left:
        problems.append(f"{len(left)} files in {QUEUE}/processing after the locks expired + sweep")
    for folder, _dirs, files in os.walk(run.root):
        rel = os.path.relpath(folder, run.root)
        if os.path.basename(folder) == "processing" and not rel.startswith(QUEUE + "/"):
            for f in files:
                notes.append(f"after kill+sweep, held by an MQTT session: {folder}/{f[:40]}...")
    errors = q.peek(state="error")
    if errors:
        notes.append(f"{len(errors)} queue messages in error/ (requeued for the drain)")
        q.requeue()
    box.close()

    drain_start = time.time()
    # Drain the queue with a generous lock.
    drain_q = Proc("cdrain", "consumer", run)
    # Drain the MQTT sessions: serve again, both subscribers reconnect their sessions.
    serve = procs[0]
    subs = [Proc(f"sub{i}", "subscriber", run) for i in range(2)]
    try:
        drain_q.start(time.time() + 30, drain=True)
        serve.start(0)
        wait_port(run.port, 10)
        for s in subs:
            s.inc = 100
            s.start(time.time() + 30, drain=True)
        for p in [drain_q, *subs]:
            try:
                p.p.wait(40)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                notes.append(f"{p.name} drain did not end in 40 s")
    finally:
        for p in [drain_q, *subs, serve]:
            p.kill()

    print(f"drain done in {time.time() - drain_start:.1f} s", flush=True)
    # Queue invariants.
    put: dict[str, str] = {}
    for p in procs:
        if p.role == "producer":
            for line in read_log(os.path.join(run.logs, f"{p.name}.log")):
                put[line[1]] = line[2]
    events: list[tuple[int, str, str, str]] = []  # (time, kind, id, who)
    bad_bodies = 0
    for name in [p.name for p in procs if p.role == "consumer"] + ["cdrain"]:
        for line in read_log(os.path.join(run.logs, f"{name}.log")):
            if line[0] == "R":
                events.append((int(line[3]), "R", line[1], name))
                mid, tag = line[1], line[2]
                if tag == "BAD":
                    bad_bodies += 1
                elif mid in put and put[mid] != tag:
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
    lost = [m for m in put if m not in acked_at]
    if lost:
        problems.append(f"{len(lost)} returned puts never acked, e.g. {lost[:3]}")
    unknown = [m for m in acked_at if m not in put]
    redelivered = sum(1 for n in deliveries.values() if n > 1)
    print(
        f"queue: {len(put)} puts returned, {len(acked_at)} acked, {len(events)} events, "
        f"{redelivered} delivered more than once, {len(unknown)} acked not in a put log "
        "(puts whose log line a kill cut off)",
        flush=True,
    )

    # MQTT invariants.
    acked_pub = set()
    for line in read_log(os.path.join(run.logs, "pub.log")):
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


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("run")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--fsync", default="always")
    c.add_argument("--seconds", type=float, default=75)
    c.add_argument("--dir")
    c.add_argument("--kill-min", type=float, default=0.5)
    c.add_argument("--kill-max", type=float, default=3.0)
    r = sub.add_parser("role")
    r.add_argument("role", choices=sorted(ROLES))
    for opt in ("--name", "--root", "--log", "--fsync"):
        r.add_argument(opt, required=True)
    r.add_argument("--inc", type=int, default=0)
    r.add_argument("--until", type=float, required=True)
    r.add_argument("--port", type=int, default=0)
    r.add_argument("--lock-timeout", type=float, default=LOCK_TIMEOUT)
    r.add_argument("--drain", action="store_true")
    a = ap.parse_args()
    if a.cmd == "role":
        ROLES[a.role](a)
        return 0
    # Every process of the run, and the checks, use this checkout's boxmq.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, SRC)
    return chaos(a)


if __name__ == "__main__":
    sys.exit(main())
