"""A long-running server's growth: rounds of churn against one `boxmq serve` and one long-lived
embedded Box, and what each holds after every round.

    .venv/bin/python bench/soak.py                  # 12 rounds, about two minutes
    .venv/bin/python bench/soak.py --rounds 20 --clients 20 --no-tls

Not a benchmark of speed. `boxmq serve` (MQTT door on, a plain and a TLS listener when
`openssl` is there, sessions held at most `--expiry` seconds) runs as a subprocess on a fresh
root; this process opens one Box on the same root and keeps it for the whole run. Each round:
MQTT 5 and 3.1.1 clients connect with new and reused client ids, clean and persistent
sessions (persistent ones expire after `--expiry` s), subscribe to many distinct filters and
to share groups, publish at QoS 0, 1 and 2, unsubscribe and leave; others connect with a Will
and drop their socket (the Will fires); the Box makes a queue, puts, gets, acks, unlocks and
deletes it, subscribes durably, in memory and in a share group and unsubscribes, and sends
exactly-once messages. After each round, once the sessions expired and a sweep ran, it prints
what the server holds (VmRSS, descriptors, inotify watches, threads, the Python objects
of its heap, log lines), what the Box's process holds (descriptors, watches, threads, memory
tracemalloc counts in boxmq's own files), and the root's files and folders by kind. The last
table compares round 2 with the last round: a figure that rises with the rounds is a leak
(docs/benchmarks.md, "A long-running server (stop 43)").
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mqtt_wire import packet, string
from processes import free_ports, listening, rss_kib, start_logged, stop

SRC = Path(__file__).resolve().parent.parent / "src"
sys.path.insert(0, str(SRC))
import boxmq  # noqa: E402

# The server runs under this: a thread of its own waits for the file named in its first
# argument + ".want", then writes there its heap's object counts by type (which the soak
# reads), while boxmq's command line runs.
_SERVER = r"""
import collections, gc, json, os, sys, threading, time
out = sys.argv.pop(1)
def dump():
    while True:
        time.sleep(0.05)
        if os.path.exists(out + ".want"):
            gc.collect()
            counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
            with open(out + ".tmp", "w") as f:
                json.dump(counts, f)
            os.replace(out + ".tmp", out)
            os.unlink(out + ".want")
threading.Thread(target=dump, daemon=True).start()
from boxmq.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _watches(pid: int | str) -> int:
    """The inotify watches the process holds, over all its inotify descriptors."""
    total = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        total += text.count("inotify wd:")
    return total


def _descriptors(pid: int | str) -> collections.Counter[str]:
    """The process's open descriptors by what they are (a file's name without its digits)."""
    kinds: collections.Counter[str] = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kinds["".join("#" if c.isdigit() else c for c in target)] += 1
    return kinds


def _process(pid: int | str) -> dict[str, int]:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    threads = len(os.listdir(f"/proc/{pid}/task"))
    rss = rss_kib(int(pid)) if pid != "self" else rss_kib(os.getpid())
    return {"rss KiB": rss, "fds": fds, "watches": _watches(pid), "threads": threads}


def _disk(root: Path) -> dict[str, int]:
    """The root's files and folders by kind."""
    kinds: collections.Counter[str] = collections.Counter()
    for folder, dirs, files in os.walk(root):
        parts = Path(folder).relative_to(root).parts
        kinds["folders"] += 1
        kinds["files"] += len(files)
        if parts and parts[-1] in ("working", "target", "processing", "error", "expired"):
            kinds[f"files in {parts[-1]}/"] += len(files)
        if ".subscriptions" in parts[-1:]:
            kinds["subscriptions"] += len(dirs)
        if parts[-2:] == (".mqtt", "sessions"):
            kinds["session records"] += len(files)
        if ".spare" in parts:
            kinds["spares"] += len(files)
        if "topic-root" in parts and not dirs and not files:
            kinds["empty topic folders"] += 1
        kinds[".generation"] += files.count(".generation")
    return dict(sorted(kinds.items()))


def _certificates(folder: Path) -> tuple[Path, Path, Path, Path, Path] | None:
    """A CA, the server's certificate and key, a client's: None without openssl."""
    if shutil.which("openssl") is None:
        return None

    def run(*args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ca, ca_key = folder / "ca.crt", folder / "ca.key"
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=soak-ca", "-keyout", ca_key, "-out", ca)
    (folder / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    made: list[Path] = []
    for name in ("server", "client"):
        cert, key, request = folder / f"{name}.crt", folder / f"{name}.key", folder / "req.csr"
        run("req", *ec, "-subj", f"/CN={name}", "-keyout", key, "-out", request)
        run("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-days", "2", "-extfile", folder / "ext.cnf", "-out", cert)  # fmt: skip
        made += [cert, key]
    return ca, made[0], made[1], made[2], made[3]


class Server:
    def __init__(self, folder: Path, expiry: int, tls: bool) -> None:
        self.folder, self.root = folder, folder / "data"
        self.port, self.tls_port = free_ports(2)
        self.certs = _certificates(folder) if tls else None
        config = f'[[mqtt.listener]]\nhost = "127.0.0.1"\nport = {self.port}\n'
        if self.certs is not None:
            ca, cert, key = self.certs[:3]
            config += f'[[mqtt.listener]]\nhost = "127.0.0.1"\nport = {self.tls_port}\n'
            config += f'tls = {{ cert = "{cert}", key = "{key}", ca = "{ca}" }}\n'
        config += f"[mqtt.limits]\nmax_session_expiry = {expiry}\n"
        (folder / "boxmq.toml").write_text(config)
        self.heap = folder / "heap.json"
        command = [sys.executable, "-c", _SERVER, str(self.heap), "--data", str(self.root)]
        command += ["--fsync", "never", "serve", "--sweep-interval", "0.2s"]
        command += ["--config", str(folder / "boxmq.toml")]
        environment = {**os.environ, "PYTHONPATH": str(SRC)}
        self.process = start_logged(command, folder, "boxmq", env=environment)
        ports = (self.port, self.tls_port) if self.certs else (self.port,)
        try:
            listening(self.process, "boxmq", folder / "boxmq.log", *ports)
        except BaseException:  # not listening in time, Ctrl-C: no server left behind
            stop(self.process)
            raise

    def objects(self) -> collections.Counter[str]:
        self.heap.unlink(missing_ok=True)
        Path(f"{self.heap}.want").touch()
        deadline = time.monotonic() + 30
        while not self.heap.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return collections.Counter(json.loads(self.heap.read_text()))

    def log_lines(self) -> collections.Counter[str]:
        """The log's lines, each with its time and numbers taken out."""
        lines: collections.Counter[str] = collections.Counter()
        for line in (self.folder / "boxmq.log").read_text(errors="replace").splitlines():
            lines["".join("#" if c.isdigit() else c for c in line)[:90]] += 1
        return lines


def _client(
    server: Server, client_id: str, *, v5: bool, persistent: bool, tls: bool, keepalive: int
) -> paho.Client:
    protocol = paho.MQTTv5 if v5 else paho.MQTTv311
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=protocol,
        clean_session=None if v5 else not persistent,
    )
    received: list[bytes] = []
    client.user_data_set(received)
    client.on_message = lambda c, data, message: data.append(message.payload)
    port = server.port
    if tls and server.certs is not None:
        ca, _, _, cert, key = server.certs
        client.tls_set(ca_certs=str(ca), certfile=str(cert), keyfile=str(key))
        port = server.tls_port
    if v5:
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        properties.SessionExpiryInterval = 60 if persistent else 0  # the server cuts it down
        client.connect("127.0.0.1", port, keepalive=keepalive, clean_start=not persistent,
                       properties=properties)  # fmt: skip
    else:
        client.connect("127.0.0.1", port, keepalive=keepalive)
    client.loop_start()
    return client


def _will(port: int, client_id: str, topic: str) -> None:
    """A 3.1.1 CONNECT with a QoS 1 Will, then the socket dropped: the Will fires."""
    flags = 0x02 | 0x04 | 0x08
    body = string("MQTT") + bytes([4, flags]) + (30).to_bytes(2, "big") + string(client_id)
    body += string(topic) + string("gone")
    with socket.create_connection(("127.0.0.1", port), 10) as sock:
        sock.sendall(packet(0x10, body))
        sock.recv(4)


def _mqtt_round(server: Server, round_: int, args: argparse.Namespace) -> None:
    clients, filters = args.clients, args.filters
    made: list[paho.Client] = []
    for i in range(clients):
        # half the ids come back every round, half are new
        client_id = f"dev-{i}" if i % 2 else f"dev-{round_}-{i}"
        tls = server.certs is not None and i % 4 == 3
        # a reused id is persistent one round, clean the next (its old session resumed or
        # ended); so is a new one
        persistent = (i // 2 + round_) % 2 == 0
        client = _client(server, client_id, v5=i % 3 != 0, persistent=persistent, tls=tls,
                         keepalive=args.keepalive)  # fmt: skip
        for f in range(filters):
            client.subscribe(f"soak/{round_}/{i}/{f}/+", qos=f % 3)
        client.subscribe(f"$share/g{round_ % 3}/soak/shared/#", qos=1)
        client.subscribe(f"$share/once{round_}/soak/shared/#", qos=2)
        made.append(client)
    time.sleep(0.3)
    for i, client in enumerate(made):
        for qos in (0, 1, 2):
            client.publish(f"soak/{round_}/{i}/0/x", b"m", qos=qos)
            client.publish("soak/shared/x", b"s", qos=qos)
        client.publish(f"soak/retained/{round_}/{i}", b"r", qos=1, retain=True)
        client.publish(f"soak/retained/{round_}/{i}", b"", qos=1, retain=True)
    time.sleep(0.5)
    for i, client in enumerate(made):
        for f in range(0, filters, 2):
            client.unsubscribe(f"soak/{round_}/{i}/{f}/+")
        client.unsubscribe(f"$share/once{round_}/soak/shared/#")
    time.sleep(0.3)
    for client in made:
        client.disconnect()
        client.loop_stop()
    for i in range(max(1, clients // 4)):
        _will(server.port, f"will-{i}" if i % 2 else f"will-{round_}-{i}", f"soak/will/{i}")


def _box_round(box: boxmq.Box, round_: int) -> None:
    name = f"soak-q-{round_}"
    queue = box.queue(name)
    queue.put_many([f"m{n}" for n in range(40)])
    for _ in range(10):
        message = queue.get("api")
        if message is not None:
            queue.ack(message.id, "api")
    # Each get takes the same message again (an unlocked one is the oldest ready): the unlock
    # of its fifth delivery sends it to error/ (max_deliveries is 5), logged as a warning each
    # round, and the queue's deletion below removes it there.
    for _ in range(5):
        message = queue.get("api")
        if message is not None:
            queue.unlock(message.id, "api")
    consumer = queue.consumer(f"worker-{round_}")
    for n in range(10):
        message = consumer.receive(1)
        if message is None:
            break
        message.unlock() if n == 0 else message.ack()  # the next message, delivered once
    consumer.close()
    kept = box.queue("soak-kept")  # one queue lives through the run
    kept.put("k")
    message = kept.get("api")
    if message is not None:
        message.ack()
    box.delete_queue(name)
    filters = [f"soak/box/{round_}/{n}/#" for n in range(10)]
    subscribers = [box.subscribe(f, "box-durable") for f in filters]
    subscribers.append(box.subscribe("soak/box/mem/#", f"mem-{round_}", durable=False))
    subscribers.append(box.subscribe("$share/boxgroup/soak/box/#", f"member-{round_}"))
    box.publish(f"soak/box/{round_}/0/x", b"p", qos=1)
    box.publish("soak/box/mem/x", b"p", qos=0)
    for subscriber in subscribers:
        message = subscriber.receive(0.2)
        if message is not None:
            message.ack()
    for subscriber in subscribers:
        subscriber.close()
    for f in filters:
        box.unsubscribe(f, "box-durable")
    box.unsubscribe("$share/boxgroup/soak/box/#", f"member-{round_}")
    for n in range(5):
        box.assured(f"src-{round_ % 2}", str(n), b"a", queue="soak-kept")
        box.deliver(f"src-{round_ % 2}", str(n), remember=n % 2 == 0)
    while (message := kept.get("api")) is not None:
        message.ack()


def _box_memory() -> tuple[dict[str, int], tracemalloc.Snapshot]:
    """What this process holds in memory allocated by boxmq's own lines, and the snapshot."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, str(SRC / "boxmq") + "/*")]
    )
    stats = snapshot.statistics("filename")
    return {"boxmq KiB": sum(s.size for s in stats) // 1024,
            "boxmq blocks": sum(s.count for s in stats)}, snapshot  # fmt: skip


def _top_growth(before: dict[str, int], after: dict[str, int], most: int) -> list[str]:
    grown = [(after[k] - before.get(k, 0), k) for k in after if after[k] > before.get(k, 0)]
    return [f"{k} +{d}" for d, k in sorted(grown, reverse=True)[:most]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--clients", type=int, default=12, help="MQTT clients a round")
    parser.add_argument("--filters", type=int, default=10, help="distinct filters a client")
    parser.add_argument("--expiry", type=int, default=1, help="session expiry, s")
    parser.add_argument("--keepalive", type=int, default=5, help="the clients' keep-alive, s")
    parser.add_argument("--no-tls", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the root and logs")
    parser.add_argument("--keep", action="store_true", help="keep the folder afterwards")
    args = parser.parse_args(argv)
    if not 2 <= args.rounds <= 200 or not 1 <= args.clients <= 500:
        parser.error("--rounds 2..200, --clients 1..500")
    folder = Path(tempfile.mkdtemp(prefix="boxmq-soak-", dir=args.dir))
    tracemalloc.start()
    server = Server(folder, args.expiry, tls=not args.no_tls)
    try:
        box = boxmq.open(server.root, fsync="never", keep_processed=False)
    except BaseException:
        stop(server.process)
        raise
    rows: list[dict[str, int]] = []
    objects: list[collections.Counter[str]] = []
    logs: list[collections.Counter[str]] = []
    snapshots: list[tracemalloc.Snapshot] = []
    descriptors: list[tuple[collections.Counter[str], collections.Counter[str]]] = []
    started = time.monotonic()
    try:
        for round_ in range(1, args.rounds + 1):
            _mqtt_round(server, round_, args)
            _box_round(box, round_)
            time.sleep(args.expiry + 1.0)  # the round's sessions expire, a sweep or two runs
            gc.collect()
            row: dict[str, int] = {}
            row.update({f"server {k}": v for k, v in _process(server.process.pid).items()})
            row.update({f"box {k}": v for k, v in _process("self").items()})
            # Beside the kernel's count of the box's threads (`_process`), which this wrote
            # over: a thread no Python code started shows in that one alone.
            row["box Python threads"] = threading.active_count()
            memory, snapshot = _box_memory()
            row.update({f"box {k}": v for k, v in memory.items()})
            snapshots.append(snapshot)
            row.update({f"disk {k}": v for k, v in _disk(server.root).items()})
            objects.append(server.objects())
            logs.append(server.log_lines())
            descriptors.append((_descriptors(server.process.pid), _descriptors("self")))
            row["server objects"] = sum(objects[-1].values())
            for kind in ("Client", "Session", "lock"):  # connections; retained_order.py's
                row[f"server {kind} objects"] = objects[-1][kind]
            row["server log lines"] = sum(logs[-1].values())
            rows.append(row)
            print(f"round {round_:3} ({time.monotonic() - started:5.1f} s): "
                  f"server rss {row['server rss KiB']} KiB, fds {row['server fds']}, "
                  f"objects {row['server objects']}; box fds {row['box fds']}, "
                  f"boxmq KiB {row['box boxmq KiB']}; files {row.get('disk files', 0)}",
                  flush=True)  # fmt: skip
    finally:
        try:
            box.close()
        finally:  # the server stopped even when the box's close raises
            stop(server.process)
    second, last = rows[1], rows[-1]
    print(f"\n| figure | round 2 | round {len(rows)} | per round |\n|---|--:|--:|--:|")
    for key in sorted(set(second) | set(last)):
        a, b = second.get(key, 0), last.get(key, 0)
        per = (b - a) / (len(rows) - 2) if len(rows) > 2 else 0
        print(f"| {key} | {a:,} | {b:,} | {per:+,.1f} |")
    print("\nserver objects grown most from round 2:", *_top_growth(objects[1], objects[-1], 12),
          sep="\n  ")  # fmt: skip
    for n, who in enumerate(("server", "box")):
        grown = _top_growth(descriptors[1][n], descriptors[-1][n], 6)
        print(f"{who} descriptors grown most from round 2:", *grown, sep="\n  ")
    print("box allocations grown most from round 2 (tracemalloc):")
    for stat in snapshots[-1].compare_to(snapshots[1], "lineno")[:6]:
        print(f"  {stat}".replace(str(SRC) + "/", ""))
    print("log lines grown most from round 2:", *_top_growth(logs[1], logs[-1], 6), sep="\n  ")
    if args.keep:
        print(f"\nkept {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
