"""MQTT over TLS: boxmq beside mosquitto in one run, each with a plain and a TLS listener that
requires a client certificate (the CA, server and client certificates are made with the
`openssl` CLI at start).

    .venv/bin/python bench/tls.py                 # 1,000 connections, 30,000 QoS 1 messages
    .venv/bin/python bench/tls.py --connections 200 --messages 5000    # a smoke run

Two cases, each on the plain listener and then on the TLS one, so that what TLS adds shows
beside what the broker costs without it:

- `connections`: N clients (a Python asyncio client, 50 at a time) each open a socket, finish
  the TLS handshake (TLS 1.3, P-256 certificates), send an MQTT 3.1.1 CONNECT and read its
  CONNACK, and stay connected until all N are. The broker's CPU (/proc/<pid>/stat, utime +
  stime) and resident memory (VmRSS) are read before the first and after the last, and shown
  per connection; then they all close.
- `qos1`: one `mosquitto_sub -q 1` and one `mosquitto_pub -q 1 -l` (32-byte lines, in runs of
  50,000: 16-bit packet ids), both with `--cafile --cert --key` on the TLS listener; the
  clock runs from the first line published to the last one printed, each run bounded by
  `--budget` seconds. Broker CPU per message beside the rate.

boxmq runs from the `src/` beside this folder (`boxmq serve --config`, fsync always as in
bench/mqtt.py), mosquitto (Debian's) with `persistence false`, `max_queued_messages 0`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from machine import Source, interpreter
from options import chosen
from processes import (
    MOSQUITTO,
    boxmq_command,
    cpu_seconds,
    free_ports,
    mosquitto_command,
    rss_kib,
    running,
    start_logged,
    stop,
)

SRC = Path(__file__).resolve().parent.parent / "src"
CHUNK = 50_000  # lines per mosquitto_pub run at QoS 1 (16-bit packet ids)
AT_ONCE = 50  # connections opened at the same time in `connections`
CONNECT = bytes.fromhex("100c00044d5154540402003c0000")  # 3.1.1, clean, keep-alive 60, id ""
CONNACK = bytes.fromhex("20020000")


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server: tuple[Path, Path]
    client: tuple[Path, Path]


@dataclass(frozen=True)
class Ports:
    plain: int
    tls: int


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _certificates(folder: Path) -> Certificates:
    """A CA, a server certificate for localhost and 127.0.0.1, a client certificate."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ca, ca_key = folder / "ca.crt", folder / "ca.key"
    _openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=bench-ca", "-keyout", ca_key,
             "-out", ca)  # fmt: skip
    made = []
    for name, extra in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"), ("client", "")):
        cert, key, request = folder / f"{name}.crt", folder / f"{name}.key", folder / "req.csr"
        _openssl("req", *ec, "-subj", f"/CN={name}", "-keyout", key, "-out", request)
        extension = folder / "ext.cnf"
        extension.write_text(extra + "\n")
        _openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
                 "-days", "2", "-extfile", extension, "-out", cert)  # fmt: skip
        key.chmod(0o644)  # mosquitto reads it as the user it drops to
        made.append((cert, key))
    folder.chmod(0o755)
    return Certificates(ca, made[0], made[1])


def _start_boxmq(ports: Ports, certs: Certificates, folder: Path) -> subprocess.Popen[bytes]:
    server, key = certs.server
    config = (
        f'[[mqtt.listener]]\nhost = "127.0.0.1"\nport = {ports.plain}\n'
        f'[[mqtt.listener]]\nhost = "127.0.0.1"\nport = {ports.tls}\n'
        f'tls = {{ cert = "{server}", key = "{key}", ca = "{certs.ca}" }}\n'
        "[mqtt.limits]\nmax_connections = 100000\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(SRC)}
    command = boxmq_command(folder, "always", config)
    return start_logged(command, folder, "boxmq", env=environment)


def _start_mosquitto(ports: Ports, certs: Certificates, folder: Path) -> subprocess.Popen[bytes]:
    server, key = certs.server
    config = (
        "per_listener_settings false\n"
        f"listener {ports.plain} 127.0.0.1\n"
        f"listener {ports.tls} 127.0.0.1\n"
        f"cafile {certs.ca}\ncertfile {server}\nkeyfile {key}\nrequire_certificate true\n"
    )
    return start_logged(mosquitto_command(folder, config), folder, "mosquitto")


BROKERS: dict[str, Callable[[Ports, Certificates, Path], subprocess.Popen[bytes]]] = {
    "boxmq": _start_boxmq,
    "mosquitto": _start_mosquitto,
}


@contextlib.contextmanager
def _running(name: str, certs: Certificates, folder: Path) -> Iterator[tuple[Ports, int]]:
    """The broker on two free ports: yields (ports, pid) once both accept connections."""
    ports = Ports(*free_ports(2))
    process = BROKERS[name](ports, certs, folder)
    with running(process, name, folder / f"{name}.log", ports.plain, ports.tls):
        yield ports, process.pid


# -- connections ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connections:
    broker: str
    listener: str
    count: int
    seconds: float
    cpu: float  # broker CPU seconds while they connected
    rss_kib: int  # broker resident memory they added


async def _connect_all(
    port: int, count: int, context: ssl.SSLContext | None
) -> list[asyncio.StreamWriter]:
    """`count` MQTT connections, each past its CONNACK; their writers (closed by the caller)."""
    writers: list[asyncio.StreamWriter] = []
    limit = asyncio.Semaphore(AT_ONCE)

    async def one() -> None:
        async with limit:
            hostname = "localhost" if context is not None else None
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname=hostname
            )
            writer.write(CONNECT)
            if await asyncio.wait_for(reader.readexactly(4), 30) != CONNACK:
                raise RuntimeError("no CONNACK")
            writers.append(writer)

    await asyncio.gather(*(one() for _ in range(count)))
    return writers


async def _close_all(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.close()
    await asyncio.sleep(0.5)


def run_connections(
    name: str, pid: int, listener: str, port: int, count: int, context: ssl.SSLContext | None
) -> Connections:
    async def run() -> Connections:
        cpu, rss, start = cpu_seconds(pid), rss_kib(pid), time.monotonic()
        writers = await asyncio.wait_for(_connect_all(port, count, context), 300)
        seconds = time.monotonic() - start
        await asyncio.sleep(0.5)  # the broker's last reads and logs
        result = Connections(
            name, listener, count, seconds, cpu_seconds(pid) - cpu, rss_kib(pid) - rss
        )
        await _close_all(writers)
        return result

    return asyncio.run(run())


# -- qos1 -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    broker: str
    listener: str
    delivered: int
    wanted: int
    seconds: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.delivered / self.seconds if self.seconds > 0 else 0.0


def _client_options(certs: Certificates, port: int, tls: bool) -> list[str]:
    if not tls:
        return ["-h", "127.0.0.1", "-p", str(port)]
    cert, key = certs.client
    return ["-h", "localhost", "-p", str(port), "--cafile", str(certs.ca),
            "--cert", str(cert), "--key", str(key)]  # fmt: skip


def run_qos1(
    name: str, pid: int, listener: str, options: list[str], messages: int, budget: float
) -> Rate:
    topic = f"bench/tls/{listener}"
    subscriber = subprocess.Popen(
        ["timeout", "-k", "5", str(budget + 60), "mosquitto_sub", *options, "-q", "1",
         "-t", topic, "-t", f"{topic}/ready"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    counted = [0]
    ready = threading.Event()
    done = threading.Event()
    last = [time.monotonic()]

    def follow() -> None:
        assert subscriber.stdout is not None
        for line in subscriber.stdout:
            if line.startswith(b"ready"):
                ready.set()
                continue
            counted[0] += 1
            last[0] = time.monotonic()
            if counted[0] >= messages:
                done.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 20
        while not ready.is_set() and time.monotonic() < deadline:  # its subscription is live
            subprocess.run(
                ["mosquitto_pub", *options, "-q", "1", "-t", f"{topic}/ready", "-m", "ready"],
                check=True,
                timeout=20,
            )
            ready.wait(0.5)
        runs = [
            b"".join(b"%032d\n" % n for n in range(first, min(first + CHUNK, messages)))
            for first in range(0, messages, CHUNK)
        ]
        cpu, start = cpu_seconds(pid), time.monotonic()
        until = start + budget
        for lines in runs:
            left = max(0.1, until - time.monotonic())
            subprocess.run(
                ["timeout", "-k", "5", f"{left:.1f}", "mosquitto_pub", *options, "-q", "1",
                 "-t", topic, "-l"],
                input=lines,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
        while not done.wait(0.2) and time.monotonic() < until and time.monotonic() - last[0] < 15:
            pass
        end = last[0] if done.is_set() else min(time.monotonic(), until)
        return Rate(name, listener, counted[0], messages, end - start, cpu_seconds(pid) - cpu)
    finally:
        stop(subscriber, seconds=10)


# -- the run --------------------------------------------------------------------------------------


def _client_context(certs: Certificates) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certs.ca)
    context.load_cert_chain(*certs.client)
    return context


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--budget", type=float, default=90.0, help="seconds per QoS 1 run")
    parser.add_argument("--brokers", default="boxmq,mosquitto")
    args = parser.parse_args()
    names = chosen(parser, "--brokers", args.brokers, list(BROKERS))
    for tool in ("openssl", "mosquitto_pub", "mosquitto_sub", "timeout", MOSQUITTO):
        if shutil.which(tool) is None:
            print(f"bench/tls: {tool} is missing (apt-get install openssl mosquitto-clients)")
            return 1
    source = Source()
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"{source.describe()}; {os.cpu_count()} CPUs; {interpreter()}; {ssl.OPENSSL_VERSION}")
    connections: list[Connections] = []
    rates: list[Rate] = []
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as scratch:
        certs = _certificates(Path(scratch))
        context = _client_context(certs)
        for name in names:
            folder = Path(scratch) / name
            folder.mkdir()
            with _running(name, certs, folder) as (ports, pid):
                for listener, port, tls in (
                    ("plain", ports.plain, False),
                    ("tls", ports.tls, True),
                ):
                    found = run_connections(
                        name, pid, listener, port, args.connections, context if tls else None
                    )
                    connections.append(found)
                    print(f"  {name} {listener} connections: {found.seconds:.1f} s", flush=True)
                for listener, port, tls in (
                    ("plain", ports.plain, False),
                    ("tls", ports.tls, True),
                ):
                    options = _client_options(certs, port, tls)
                    rate = run_qos1(name, pid, listener, options, args.messages, args.budget)
                    rates.append(rate)
                    print(f"  {name} {listener} qos1: {rate.rate:,.0f} msg/s", flush=True)
    print()
    print(f"{args.connections} connections (CONNECT, CONNACK; held until all are in):")
    print("| broker | listener | seconds | broker CPU ms/conn | broker RSS KiB/conn |")
    print("| --- | --- | ---: | ---: | ---: |")
    for c in connections:
        print(
            f"| {c.broker} | {c.listener} | {c.seconds:.1f} | {1000 * c.cpu / c.count:.2f} "
            f"| {c.rss_kib / c.count:.1f} |"
        )
    print()
    print(
        f"QoS 1, {args.messages:,} messages of 32 bytes, one mosquitto_pub -l, one mosquitto_sub:"
    )
    print("| broker | listener | msg/s | broker CPU µs/msg | delivered |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in rates:
        per = 1e6 * r.cpu / r.delivered if r.delivered else 0.0
        print(
            f"| {r.broker} | {r.listener} | {r.rate:,.0f} | {per:.0f} | {r.delivered}/{r.wanted} |"
        )
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    return source.finish()


if __name__ == "__main__":
    sys.exit(main())
