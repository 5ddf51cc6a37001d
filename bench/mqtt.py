"""MQTT throughput: the same mosquitto_pub / mosquitto_sub clients against boxmq, mosquitto and
amqtt, in one run, for QoS 0, 1, 2 and a shared QoS 1 subscription with two members.

    .venv/bin/python bench/mqtt.py            # 200k / 100k messages per case
    .venv/bin/python bench/mqtt.py --quick    # 20k / 10k: a smoke run of a minute or two
    .venv/bin/python bench/mqtt.py --brokers boxmq,mosquitto --fsync always
    .venv/bin/python bench/mqtt.py --brokers boxmq --cases qos1 --messages 20000 --repeat 1

Every broker runs as a subprocess on a free port (boxmq on a fresh data folder, mosquitto with
a generated config, amqtt from the `bench` dependency group). For each case the subscribers
connect first; a retained `<topic>/ready` message proves their subscription is live. Then the
clock starts, the publisher sends N lines of 32 bytes (`mosquitto_pub -l`, in runs of at most
50 000 lines: its 16-bit packet ids wrap otherwise), and the clock stops when the subscribers
have printed all N. Broker CPU comes from /proc/<pid>/stat (utime + stime) before and after.
Known client quirks (docs/benchmarks.md, research/perf-baselines.md): mosquitto's default
`max_queued_messages 1000` drops QoS 1/2 messages (we set 0), and boxmq's `max_queued`
(10,000) drops past it too (we set 1,000,000, and `max_queued_bytes` 0, as the header says:
its queue has no "none"); v5 subscribers need
`-D connect receive-maximum 65535` at QoS 2; amqtt speaks MQTT 3.1.1 only, so it has no
shared subscriptions.

`--max-inflight N` (1 to 65535) passes `-M N` to every publishing `mosquitto_pub` (its own
default, 20 QoS 1/2 messages in flight, otherwise), and widens each broker's own windows to at
least N, so that the publisher's is the one that binds on every broker alike: boxmq's
`[mqtt.limits]` `receive_maximum` and `max_inflight` (100 by default; a 3.1.1 publisher over
`receive_maximum` is disconnected) and mosquitto's `max_inflight_messages` (20 by default, its
window towards the 3.1.1 subscriber); amqtt has no such limit. The v5 subscribers announce a
Receive Maximum of 65535 whatever N is: the most there is, so never the narrower window. The
run's header names the window used.

Each case runs `--repeat` times (3 by default, 1 with --quick), the brokers taking turns in
every round, so that a machine whose speed drifts during the run slows them all alike. The
goals are judged on each broker's median run of a case (the run itself: its rate, CPU and
busy cores), and every round's figures and ratios are printed beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from boxmq.store.commit import FsyncPolicy
from machine import Source, interpreter
from options import chosen
from processes import (
    MOSQUITTO,
    boxmq_command,
    cpu_seconds,
    free_port,
    mosquitto_command,
    running,
    start_logged,
    stop,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"  # brokers' folders and logs while they run; removed afterwards
VENV_BIN = Path(sys.executable).parent
CHUNK = 50_000  # lines per mosquitto_pub run at QoS 1/2 (16-bit packet ids)
STALL = 15.0  # seconds without a new message: the case is INCOMPLETE
V5_SUB = ["-V", "mqttv5", "-D", "connect", "receive-maximum", "65535"]
BOXMQ_WINDOW = 100  # boxmq's default receive_maximum and max_inflight (mqtt/settings.py)
MOSQUITTO_WINDOW = 20  # mosquitto's default max_inflight_messages
# boxmq's max_queued (messages queued in memory per session; 10,000 by default) has no "none"
# as mosquitto's max_queued_messages 0 has: this is five times the most a case sends, so that
# a subscriber falling behind makes neither broker drop.
BOXMQ_QUEUED = 1_000_000
MOST_MESSAGES = BOXMQ_QUEUED // 5  # --messages: a case's count, the queue still five times it


@dataclass(frozen=True)
class Case:
    name: str
    qos: int
    members: int  # 0: one plain subscriber; n: n members of one share group
    messages: int


@dataclass(frozen=True)
class Result:
    case: Case
    broker: str
    delivered: int
    seconds: float
    broker_cpu: float  # seconds of broker CPU during the case
    machine_busy: float  # cores busy on the whole machine during the case (all processes)
    note: str = ""

    @property
    def comparable(self) -> bool:
        """All delivered, or still flowing when the time budget ran out (not lost, not stuck)."""
        return self.delivered > 0 and self.note in ("", "TIMEOUT")

    @property
    def rate(self) -> float:
        return self.delivered / self.seconds if self.seconds > 0 else 0.0


# -- brokers --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Broker:
    name: str
    start: Callable[[int, Path], subprocess.Popen[bytes]]
    mqtt5: bool  # shared subscriptions need MQTT 5 subscribers ($share on 3.1.1 is an extension)


def _boxmq_conf(window: int | None) -> str:
    """boxmq's configuration: its queue per session as good as unlimited, as mosquitto's is
    (`max_queued_messages 0`); with `window`, its windows widened to it where that is wider
    than its own 100."""
    config = f"[mqtt.limits]\nmax_queued = {BOXMQ_QUEUED}\nmax_queued_bytes = 0\n"
    if window is not None and window > BOXMQ_WINDOW:
        config += f"receive_maximum = {window}\nmax_inflight = {window}\n"
    return config


def _start_boxmq(fsync: str, window: int | None) -> Callable[[int, Path], subprocess.Popen[bytes]]:
    def start(port: int, folder: Path) -> subprocess.Popen[bytes]:
        serve = ("--mqtt", f"127.0.0.1:{port}")  # $SYS at serve's default, every 10 s
        return start_logged(
            boxmq_command(folder, fsync, _boxmq_conf(window), *serve), folder, "boxmq"
        )

    return start


def _mosquitto_conf(port: int, window: int | None) -> str:
    """mosquitto's own lines (beside processes.mosquitto_command's, its queue unlimited among
    them); with `window`, its window towards a 3.1.1 subscriber (max_inflight_messages)
    widened to it, so that it is not the narrower; never narrowed below its default, 20,
    which -M 5 did, where boxmq's 100 is left as it is."""
    wider = window is not None and window > MOSQUITTO_WINDOW
    return f"listener {port} 127.0.0.1\n" + (f"max_inflight_messages {window}\n" if wider else "")


def _start_mosquitto(window: int | None) -> Callable[[int, Path], subprocess.Popen[bytes]]:
    def start(port: int, folder: Path) -> subprocess.Popen[bytes]:
        command = mosquitto_command(folder, _mosquitto_conf(port, window))
        return start_logged(command, folder, "mosquitto")

    return start


def _start_amqtt(port: int, folder: Path) -> subprocess.Popen[bytes]:
    config = folder / "amqtt.yaml"
    config.write_text(
        "listeners:\n  default:\n    type: tcp\n"
        f"    bind: 127.0.0.1:{port}\n"
        "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
        "    allow_anonymous: true\n"
    )
    return start_logged([str(VENV_BIN / "amqtt"), "-c", str(config)], folder, "amqtt")


def _unavailable(name: str, fsync: str) -> str | None:
    """Why this broker cannot run here, or None."""
    if name == "boxmq":
        done = subprocess.run(
            [sys.executable, "-m", "boxmq.cli", "serve", "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        if "--mqtt" not in done.stdout:
            return "`boxmq serve --mqtt` does not exist yet"
    if name == "mosquitto" and not Path(MOSQUITTO).exists():
        return f"{MOSQUITTO} is missing (apt-get install mosquitto)"
    if name == "amqtt" and not (VENV_BIN / "amqtt").exists():
        return "amqtt is not installed (pip install --group bench; it needs Python >= 3.10)"
    return None


def _brokers(fsync: str, window: int | None) -> dict[str, Broker]:
    return {
        "boxmq": Broker("boxmq", _start_boxmq(fsync, window), mqtt5=True),
        "mosquitto": Broker("mosquitto", _start_mosquitto(window), mqtt5=True),
        "amqtt": Broker("amqtt", _start_amqtt, mqtt5=False),
    }


@contextlib.contextmanager
def _running(broker: Broker, folder: Path) -> Iterator[tuple[int, int]]:
    """The broker on a free port: yields (port, pid) once it accepts connections."""
    port = free_port()
    with running(broker.start(port, folder), broker.name, folder / f"{broker.name}.log", port) as p:
        yield port, p.pid


# -- measuring ------------------------------------------------------------------------------------


def _machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


class _Counter:
    """Counts the lines every subscriber prints; notes when the Nth came."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.count = 0
        self.ready = 0
        self.last = time.monotonic()
        self.done_at: float | None = None
        self._lock = threading.Lock()
        self.finished = threading.Event()

    def follow(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with self._lock:
                if line.startswith(b"ready"):
                    self.ready += 1
                    continue
                self.count += 1
                self.last = time.monotonic()
                if self.count >= self.wanted and self.done_at is None:
                    self.done_at = self.last
                    self.finished.set()


def _client(*args: str, seconds: float = 600) -> list[str]:
    """Under coreutils' timeout, which stops the client itself (killing a wrapper would not)."""
    return ["timeout", "-k", "5", f"{max(seconds, 0.1):.1f}", *args]


TIMED_OUT = 124  # coreutils timeout's exit status


def _publish_lines(
    port: int, topic: str, qos: int, lines: bytes, seconds: float, window: int | None
) -> bool:
    """Publish `lines` as one mosquitto_pub run (`-M window` unless None); False if it ran out
    of time."""
    command = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-t", topic, "-q", str(qos)]
    if window is not None:
        command += ["-M", str(window)]
    done = subprocess.run(
        _client(*command, "-l", seconds=seconds), input=lines, stdout=subprocess.DEVNULL
    )
    if done.returncode not in (0, TIMED_OUT):
        raise RuntimeError(f"mosquitto_pub exited with {done.returncode}")
    return done.returncode == 0


def run_case(
    broker: Broker, port: int, pid: int, case: Case, budget: float, window: int | None = None
) -> Result:
    """One case; stops after `budget` seconds of publishing and delivering (TIMEOUT: the rate
    is then over what was delivered by then)."""
    topic = f"bench/{case.name}"
    ready_topic = f"{topic}/ready"
    base = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-q", str(case.qos)]
    if case.members:
        filters = ["-t", f"$share/bench/{topic}", "-t", ready_topic]
        commands = [_client(*base, *V5_SUB, *filters) for _ in range(case.members)]
    else:
        commands = [_client(*base, "-t", topic, "-t", ready_topic)]
    _publish_retained(port, ready_topic, b"ready")
    counter = _Counter(case.messages)
    subscribers: list[subprocess.Popen[bytes]] = []
    try:  # from the first start: those started before one that fails are stopped too
        for command in commands:
            subscribers.append(subprocess.Popen(command, stdout=subprocess.PIPE))
            threading.Thread(target=counter.follow, args=(subscribers[-1],), daemon=True).start()
        deadline = time.monotonic() + 20
        while counter.ready < len(subscribers) and time.monotonic() < deadline:
            time.sleep(0.02)
        _publish_retained(port, ready_topic, None)  # clear it: an empty retained message deletes
        if counter.ready < len(subscribers):
            return Result(case, broker.name, 0, 0.0, 0.0, 0.0, "SKIPPED: subscribers not ready")
        chunk = CHUNK if case.qos else case.messages
        runs = [  # made before the clock starts: 32-byte lines, numbered
            b"".join(b"%032d\n" % n for n in range(first, min(first + chunk, case.messages)))
            for first in range(0, case.messages, chunk)
        ]
        cpu_before, (busy_before, total_before) = cpu_seconds(pid), _machine_busy_ticks()
        start = time.monotonic()
        until = start + budget
        for lines in runs:
            if not _publish_lines(port, topic, case.qos, lines, until - time.monotonic(), window):
                break
        while not counter.finished.wait(0.2):
            now = time.monotonic()
            if now - counter.last > STALL or now > until:
                break
        end = counter.done_at or min(time.monotonic(), until)
        cpu = cpu_seconds(pid) - cpu_before
        busy_after, total_after = _machine_busy_ticks()
        cores = os.cpu_count() or 1
        busy = cores * (busy_after - busy_before) / max(1, total_after - total_before)
        note = ""
        if counter.count < case.messages:
            note = "TIMEOUT" if time.monotonic() >= until else "INCOMPLETE"
        return Result(case, broker.name, counter.count, end - start, cpu, busy, note)
    finally:
        stop(*subscribers, seconds=10)  # mosquitto_sub can hang in its signal handler (pitfall 3)


def _publish_retained(port: int, topic: str, payload: bytes | None) -> None:
    command = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-t", topic, "-r", "-q", "1"]
    body = ["-s"] if payload is not None else ["-n"]  # -n: a zero-length message
    subprocess.run(
        _client(*command, *body), input=payload, check=True, stdout=subprocess.DEVNULL, timeout=30
    )


# -- report ---------------------------------------------------------------------------------------


def _cases(quick: bool, messages: int | None = None) -> list[Case]:
    """Every case, with its own count (a tenth of it when quick), or `messages` for each: a small
    A/B run of one case at the count it needs, with no wrapper around the bench."""
    scale = 10 if quick else 1
    cases = [
        Case("qos0", 0, 0, 200_000 // scale),
        Case("qos1", 1, 0, 100_000 // scale),
        Case("qos2", 2, 0, 100_000 // scale),
        Case("shared-qos1", 1, 2, 100_000 // scale),
    ]
    if messages is None:
        return cases
    return [Case(c.name, c.qos, c.members, messages) for c in cases]


def _print_results(results: list[Result]) -> None:
    print(
        f"{'case':<12} {'broker':<10} {'msg/s':>9} {'seconds':>8} {'delivered':>15} "
        f"{'broker CPU µs/msg':>18} {'machine busy':>13}"
    )
    for r in results:
        per_message = 1e6 * r.broker_cpu / r.delivered if r.delivered else 0.0
        delivered = f"{r.delivered}/{r.case.messages}"
        print(
            f"{r.case.name:<12} {r.broker:<10} {r.rate:>9,.0f} {r.seconds:>8.2f} "
            f"{delivered:>15} {per_message:>18.1f} {r.machine_busy:>10.2f} cores  {r.note}"
        )


def _medians(rounds: list[list[Result]]) -> list[Result]:
    """Each broker's median run of each case, among its comparable runs (the lower of the
    two middle ones for an even count); its first run when none is comparable."""
    runs: dict[tuple[str, str], list[Result]] = {}
    for result in (r for results in rounds for r in results):
        runs.setdefault((result.broker, result.case.name), []).append(result)
    medians = []
    for same in runs.values():
        usable = sorted((r for r in same if r.comparable), key=lambda r: r.rate)
        medians.append(usable[(len(usable) - 1) // 2] if usable else same[0])
    return medians


def _rates(results: list[Result]) -> dict[tuple[str, str], float]:
    return {(r.broker, r.case.name): r.rate for r in results if r.comparable}


def _goals(
    results: list[Result], unavailable: dict[str, str], rounds: list[list[Result]]
) -> list[str]:
    """One line per goal, judged on `results` (the medians), with the ratio of every round."""
    rates = _rates(results)
    per_round = [_rates(r) for r in rounds] if len(rounds) > 1 else []
    partial = {(r.broker, r.case.name) for r in results if r.note == "TIMEOUT"}
    lines = []

    def goal(label: str, case: str, peer: str, peer_case: str, ratio: float) -> None:
        ours, theirs = rates.get(("boxmq", case)), rates.get((peer, peer_case))
        if ours is None or theirs is None:
            missing = "boxmq" if ours is None else peer
            why = unavailable.get(missing, f"no usable {missing} run (lost or stuck messages)")
            missing_case = case if missing == "boxmq" else peer_case
            if not any(r.broker == missing for r in results) and missing not in unavailable:
                why = f"{missing} was not in this run (--brokers)"
            elif not any(r.case.name == missing_case for r in results):
                why = f"{missing_case} was not in this run (--cases)"
            lines.append(f"  n/a   {label}: {why}")
            return
        verdict = "PASS" if ours >= ratio * theirs else "FAIL"
        timed_out = [
            b for b in ("boxmq", peer) if (b, case if b == "boxmq" else peer_case) in partial
        ]
        note = f" [{', '.join(timed_out)} timed out: rate over what arrived]" if timed_out else ""
        ratios = [
            f"{r[('boxmq', case)] / r[(peer, peer_case)]:.2f}x"
            if ("boxmq", case) in r and (peer, peer_case) in r
            else "n/a"
            for r in per_round
        ]
        rounds_note = f"; rounds {', '.join(ratios)}" if ratios else ""
        lines.append(
            f"  {verdict}  {label}: {ours / theirs:.2f}x (goal {ratio:g}x){rounds_note}{note}"
        )

    for case in ("qos0", "qos1", "qos2", "shared-qos1"):
        goal(f"{case} boxmq vs amqtt", case, "amqtt", case, 10.0)
    goal("qos0 boxmq vs mosquitto", "qos0", "mosquitto", "qos0", 0.5)
    goal("qos1 boxmq vs mosquitto", "qos1", "mosquitto", "qos1", 0.5)
    goal("shared-qos1 boxmq vs mosquitto qos1", "shared-qos1", "mosquitto", "qos1", 0.25)
    return lines


def _round(
    brokers: dict[str, Broker],
    names: list[str],
    cases: list[Case],
    unavailable: dict[str, str],
    budget: float,
    window: int | None,
) -> list[Result]:
    """Every case once on every broker named, each broker started afresh; a case a broker
    cannot run is noted in `unavailable`."""
    results: list[Result] = []
    for name in names:
        broker = brokers[name]
        with (
            tempfile.TemporaryDirectory(prefix=f"mqtt-{name}-", dir=RESULTS) as folder,
            _running(broker, Path(folder)) as (port, pid),
        ):
            for case in cases:
                if case.members and not broker.mqtt5:
                    unavailable.setdefault(name, "MQTT 3.1.1 only: no shared subscriptions")
                    continue
                result = run_case(broker, port, pid, case, budget, window)
                results.append(result)
                print(f"  {name} {case.name}: {result.rate:,.0f} msg/s {result.note}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    parser.add_argument("--brokers", default="boxmq,mosquitto,amqtt")
    parser.add_argument("--fsync", default="always", choices=FsyncPolicy.words())
    parser.add_argument("--cases", default="qos0,qos1,qos2,shared-qos1")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds per case (default 90, --quick 30)"
    )
    parser.add_argument(
        "--repeat", type=int, default=None, help="rounds of every case (default 3, --quick 1)"
    )
    parser.add_argument(
        "--messages",
        type=int,
        default=None,
        metavar="N",
        help=f"messages per case (default 200k for qos0, 100k otherwise, a tenth with --quick; "
        f"at most {MOST_MESSAGES:,})",
    )
    parser.add_argument(
        "--max-inflight",
        type=int,
        default=None,
        metavar="N",
        help="mosquitto_pub -M N: QoS 1/2 messages in flight (default: its own, 20); "
        "each broker's windows widened to at least N",
    )
    args = parser.parse_args()
    if args.max_inflight is not None and not 1 <= args.max_inflight <= 65_535:
        parser.error("--max-inflight must be 1 to 65535 (16-bit packet ids)")
    if args.messages is not None and not 1 <= args.messages <= MOST_MESSAGES:
        parser.error(f"--messages must be 1 to {MOST_MESSAGES:,} (boxmq's queue is lifted for it)")
    args.budget = args.budget or (30.0 if args.quick else 90.0)
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    every = _cases(args.quick, args.messages)
    wanted = chosen(parser, "--cases", args.cases, [c.name for c in every])
    cases = [c for c in every if c.name in wanted]
    brokers = _brokers(args.fsync, args.max_inflight)
    names = chosen(parser, "--brokers", args.brokers, list(brokers))
    for tool in ("mosquitto_pub", "mosquitto_sub", "timeout"):
        if shutil.which(tool) is None:
            print(f"bench/mqtt: {tool} is missing (apt-get install mosquitto-clients)")
            return 1
    unavailable = {n: why for n in names if (why := _unavailable(n, args.fsync))}
    source = Source()
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"{source.describe()}; fsync={args.fsync}; {os.cpu_count()} CPUs; {interpreter()}")
    window = args.max_inflight
    print(
        f"publisher window: mosquitto_pub -M {window}, brokers' windows at least {window}"
        if window is not None
        else "publisher window: mosquitto_pub's default (20 in flight), brokers' defaults"
    )
    print(
        f"queues per session: mosquitto max_queued_messages 0 (none), "
        f"boxmq max_queued {BOXMQ_QUEUED:,} and max_queued_bytes 0 (none)"
    )
    for name, why in unavailable.items():
        print(f"{name}: not available: {why}")
    RESULTS.mkdir(exist_ok=True)
    running = [n for n in names if n not in unavailable]  # before a round adds its notes
    rounds = [
        _round(brokers, running, cases, unavailable, args.budget, args.max_inflight)
        for _ in range(repeat)
    ]
    print()
    for number, results in enumerate(rounds, 1):
        if repeat > 1:
            print(f"round {number}:")
        _print_results(results)
        print()
    medians = _medians(rounds)
    if repeat > 1:
        print(f"medians of {repeat} rounds (each the median run itself):")
        _print_results(medians)
        print()
    print("goals (boxmq/peer msg/s):")
    print("\n".join(_goals(medians, unavailable, rounds)))
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    return source.finish()


if __name__ == "__main__":
    sys.exit(main())
