"""Many idle MQTT connections: what each costs boxmq and mosquitto, in one run.

    .venv/bin/python bench/mqtt_idle.py                     # 4,000 connections, 4 clients
    .venv/bin/python bench/mqtt_idle.py --connections 10000 --idle 20

Each broker runs as a subprocess on a free port, started by processes.start_broker as in the
other broker benchmarks (`boxmq serve --fsync never` on a fresh data folder, its $SYS on as by
default; Debian's mosquitto with `max_connections -1`, logging as by default), its log in a
file. Client processes (this script with `--client`) open the connections, 200 at a time
each: a raw MQTT 3.1.1 CONNECT (clean session, keep-alive 60 s), its CONNACK awaited, then
nothing until the end.
Read from /proc/<pid>: the server's CPU (utime + stime) while it accepted them and over
`--idle` seconds while they idle, its memory (VmRSS) before and after, and its descriptors
before, with the connections, and after they all left (docs/benchmarks.md, "Many idle
connections (stop 41)"). The limit of open files is raised for the brokers (`ulimit -n`).
`--subscriptions N` makes N durable subscriptions of other consumers on boxmq's root before
it starts (backend consumers beside the devices).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from machine import Source, interpreter
from mqtt_wire import packet, string
from options import chosen
from processes import BROKERS, cpu_seconds, free_port, rss_kib, running, start_broker

BATCH = 200  # connections a client opens at once
# Beside start_broker's lines: its log_type lines keep errors and warnings alone.
_MOSQUITTO = "max_connections -1\nlog_type notice\nlog_type information\n"


def _connect_packet(client_id: str, keep_alive: int) -> bytes:
    """MQTT 3.1.1 (level 4), clean session."""
    body = string("MQTT") + bytes([4, 0x02]) + keep_alive.to_bytes(2, "big") + string(client_id)
    return packet(0x10, body)


async def _one(port: int, client_id: str) -> asyncio.StreamWriter | None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
        writer.write(_connect_packet(client_id, 60))
        connack = await asyncio.wait_for(reader.readexactly(4), 30)
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return None
    if connack[0] != 0x20 or connack[3] != 0:
        writer.close()
        return None
    return writer


async def _client(port: int, count: int, prefix: str) -> None:
    """Open `count` connections, say how many were accepted, hold them until stdin closes."""
    writers: list[asyncio.StreamWriter | None] = []
    for start in range(0, count, BATCH):
        ids = [f"{prefix}-{n}" for n in range(start, min(count, start + BATCH))]
        writers += await asyncio.gather(*(_one(port, i) for i in ids))
    print(sum(w is not None for w in writers), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for writer in writers:
        if writer is not None:
            writer.close()


def _stat(pid: int) -> tuple[float, int, int]:
    """CPU seconds, VmRSS in KiB, open descriptors."""
    return cpu_seconds(pid), rss_kib(pid), len(os.listdir(f"/proc/{pid}/fd"))


@contextmanager
def _broker(name: str, folder: Path, subscriptions: int) -> Iterator[tuple[int, int]]:
    port = free_port()
    if name == "boxmq" and subscriptions:  # durable ones of other consumers, on the root
        import boxmq

        with boxmq.open(folder / "data") as box:
            for n in range(subscriptions):
                box.subscribe(f"backend/{n}/#", f"consumer-{n}").close()
    # The figures of docs/benchmarks.md (stop 41) were measured with each broker's defaults
    # but these: boxmq's $SYS kept on (every 10 s), mosquitto logging what it logs by default
    # (start_broker's lines keep errors and warnings alone). Its "no cap on queued messages"
    # and "persistence false" change nothing here: idle clean sessions queue nothing.
    process = start_broker(
        name, port, folder, "never", mosquitto=_MOSQUITTO, boxmq="", sys_interval="10s"
    )
    log = folder / f"{name}.log"
    with running(process, name, log, port):
        time.sleep(1)  # its start-up work done
        if process.poll() is not None:  # another process took the port: it answered above
            raise RuntimeError(f"{name} exited at start; see {log}")
        yield port, process.pid


def measure(
    name: str, connections: int, clients: int, idle: float, subscriptions: int
) -> dict[str, str]:
    folder = Path(tempfile.mkdtemp(prefix=f"idle-{name}-"))
    try:
        with _broker(name, folder, subscriptions) as (port, pid):
            cpu0, rss0, fds0 = _stat(pid)
            started = time.monotonic()
            each = connections // clients
            command = [sys.executable, __file__, "--client", str(port), str(each)]
            workers = [
                subprocess.Popen(
                    [*command, f"c{n}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
                for n in range(clients)
            ]
            accepted = sum(int(w.stdout.readline() or 0) for w in workers if w.stdout)
            took = time.monotonic() - started
            time.sleep(2)  # the last CONNACKs' work and logs done
            cpu1, rss1, fds1 = _stat(pid)
            time.sleep(idle)
            cpu2, _, _ = _stat(pid)
            for worker in workers:
                if worker.stdin:
                    worker.stdin.close()
                worker.wait(60)
            time.sleep(2)
            _, rss3, fds3 = _stat(pid)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    total = each * clients
    accept, grown = cpu1 - cpu0, (rss1 - rss0) / total
    return {
        "accepted and CONNACKed": f"{accepted} of {total} in {took:.1f} s",
        "server CPU to accept them": f"{accept:.2f} s ({accept / total * 1e6:.0f} µs each)",
        "memory per connection": f"{grown:.1f} KiB ({rss0 >> 10} → {rss1 >> 10} MiB)",
        f"CPU while they idle ({idle:.0f} s)": f"{(cpu2 - cpu1) / idle * 100:.2f} % of a core",
        "descriptors: before, with them, after": f"{fds0}, {fds1}, {fds3}",
        "memory after they left": f"{rss3 >> 10} MiB",
    }


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        asyncio.run(_client(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds measured idle")
    parser.add_argument("--brokers", default="boxmq,mosquitto")
    parser.add_argument(
        "--subscriptions",
        type=int,
        default=0,
        help="durable subscriptions of other consumers made on boxmq's root first",
    )
    args = parser.parse_args()
    names = chosen(parser, "--brokers", args.brokers, BROKERS)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the brokers inherit it
    if args.connections // args.clients + 64 > hard:
        print(
            f"bench/mqtt_idle: {args.connections // args.clients} connections per client "
            f"need a higher limit of open files than {hard}: use more --clients"
        )
        return 1
    source = Source()
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"{source.describe()}; {os.cpu_count()} CPUs; {interpreter()}")
    if "mosquitto" in names and not Path("/usr/sbin/mosquitto").exists():
        print("mosquitto: not available (apt-get install mosquitto)")
        names.remove("mosquitto")
    results = {
        name: measure(name, args.connections, args.clients, args.idle, args.subscriptions)
        for name in names
    }
    rows = list(next(iter(results.values())))
    print(f"\n| {args.connections:,} idle connections | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for row in rows:
        print(f"| {row} | " + " | ".join(results[n][row] for n in names) + " |")
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    return source.finish()


if __name__ == "__main__":
    sys.exit(main())
