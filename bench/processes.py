"""What the broker benchmarks share about the processes they start: a free port (harness/
ports.py's), a log file, an MQTT broker's command line and start, the wait until it listens, a
process's CPU time and memory from /proc, and its stop (harness/stopping.py's; reap_killed
as it is there). Not a benchmark (bench/README.md)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for harness.*

from harness import stopping
from harness.ports import free_port, free_ports
from harness.stopping import reap_killed

__all__ = [
    "MOSQUITTO",
    "boxmq_command",
    "broker_running",
    "cpu_seconds",
    "free_port",
    "free_ports",
    "listening",
    "mosquitto_command",
    "reap_killed",
    "rss_kib",
    "running",
    "start_broker",
    "start_logged",
    "stop",
]

_TICK = os.sysconf("SC_CLK_TCK")


def start_logged(
    command: list[str], folder: Path, name: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`command` started (a broker), its output discarded but stderr, which goes to
    `folder`/`name`.log, emptied first; `env`, its environment if not ours."""
    log = os.open(folder / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=env)
    finally:
        os.close(log)  # the process has its own copy


MOSQUITTO = "/usr/sbin/mosquitto"  # Debian's
# What every bench's mosquitto has before its own lines: anonymous clients, in memory, errors
# and warnings on stderr (its log), and no cap on the messages queued for a client (its
# default, 1000, silently drops QoS 1/2 messages under load).
_MOSQUITTO_BASE = (
    "allow_anonymous true\npersistence false\nmax_queued_messages 0\n"
    "log_dest stderr\nlog_type error\nlog_type warning\n"
)


def mosquitto_command(folder: Path, config: str) -> list[str]:
    """mosquitto with `folder`/mosquitto.conf, written as the lines every bench gives it and
    then `config` (its listeners and the bench's own lines)."""
    path = folder / "mosquitto.conf"
    path.write_text(_MOSQUITTO_BASE + config)
    return [MOSQUITTO, "-c", str(path)]


def boxmq_command(folder: Path, fsync: str, config: str, *serve: str) -> list[str]:
    """`boxmq serve` on `folder`/data under `fsync`, with `folder`/boxmq.toml, written as
    `config`, and `serve`, its other options."""
    path = folder / "boxmq.toml"
    path.write_text(config)
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(folder / "data")]
    return [*command, "--fsync", fsync, "serve", "--config", str(path), *serve]


BROKERS = ("boxmq", "mosquitto")  # what start_broker starts


def start_broker(
    broker: str,
    port: int,
    folder: Path,
    fsync: str,
    *,
    mosquitto: str,
    boxmq: str,
    sys_interval: str = "0",
) -> subprocess.Popen[bytes]:
    """`broker`, mosquitto or boxmq, on 127.0.0.1:`port`, logging to `folder`/<broker>.log:
    mosquitto (`mosquitto_command`) with the config lines `mosquitto` more; boxmq's `serve
    --mqtt` (`boxmq_command`) under `fsync`, with `boxmq` as its config file and $SYS every
    `sys_interval` (0: none). Any other `broker` is a ValueError: it started boxmq, logged
    under the name given."""
    if broker not in BROKERS:
        raise ValueError(f"start_broker: no broker {broker!r} ({', '.join(BROKERS)})")
    if broker == "mosquitto":
        command = mosquitto_command(folder, f"listener {port} 127.0.0.1\n" + mosquitto)
    else:
        serve = ("--mqtt", f"127.0.0.1:{port}", "--sys-interval", sys_interval)
        command = boxmq_command(folder, fsync, boxmq, *serve)
    return start_logged(command, folder, broker)


@contextmanager
def broker_running(
    broker: str, fsync: str, *, prefix: str, scratch: str | None, mosquitto: str, boxmq: str
) -> Iterator[tuple[int, int]]:
    """`broker` started (`start_broker`) on a free port in a new folder `prefix`* under
    `scratch`: (its pid, its port) once it listens (`running`). Its folder deleted at the end."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch))
    try:
        port = free_port()
        process = start_broker(broker, port, folder, fsync, mosquitto=mosquitto, boxmq=boxmq)
        with running(process, broker, folder / f"{broker}.log", port):
            yield process.pid, port
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def running(
    process: subprocess.Popen[bytes], name: str, log: Path, *ports: int
) -> Iterator[subprocess.Popen[bytes]]:
    """`process` (the broker `name`, logging in `log`) once it listens on each of `ports`
    (`listening`), stopped at the end (`stop`), whether it started or not; the end of its log
    printed to stderr first if the run raised."""
    try:
        listening(process, name, log, *ports)
        yield process
    except Exception:
        with contextlib.suppress(OSError):
            print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
        raise
    finally:
        stop(process)


def listening(process: subprocess.Popen[bytes], name: str, log: Path, *ports: int) -> None:
    """Returns once each of `ports` on 127.0.0.1 accepts a connection; raises if `process`
    (the broker `name`, logging in `log`) exits first or does not listen within 30 s."""
    deadline = time.monotonic() + 30
    for port in ports:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited at start; see {log}")
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not listen within 30 s; see {log}")
            time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """The process's user and system time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (proc(5) fields 14, 15)


def rss_kib(pid: int) -> int:
    """The process's resident memory (VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def stop(*processes: subprocess.Popen[bytes], seconds: float = 20) -> None:
    """harness.stopping.stop (SIGTERM to each of `processes` at once, SIGKILL to those not
    over within `seconds`, each reaped), with the benchmarks' 20 s for a broker's stop."""
    stopping.stop(*processes, seconds=seconds)
