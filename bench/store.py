"""bench/store: put → get → ack through boxmq, beside the bare file-system floor and persist-queue.

    python bench/store.py [--messages 100000] [--size 200] [--dir DIR] [--quick] [--case TEXT]

Every case puts messages of `--size` bytes, gets each one and acks it, in one OS process or in
two processes sharing one queue, under one fsync policy. Messages/s = messages / (last ack -
first put), over every process of the case. Beside boxmq, in the same run:

- the floor: the same file operations in a plain Python loop, one message at a time (create +
  write in working/, rename to target/, rename to processing/, unlink or rename to processed/);
  under `always` each message also gets fsync(file) and fsync(target dir): one flush per message;
- persist-queue's SQLiteAckQueue doing the same puts, gets and acks, at the durability closest
  to the policy (the legend under the table says which PRAGMA).

`--case TEXT` (repeatable) runs only the rows whose label holds one of the TEXTs, as the table
prints it (`--case processed/`: the `ack→processed/` rows; `--case "1p never"`), each with
its own floor and persist-queue measurement: a row's figures in minutes, not the whole run.

Each measurement runs in fresh spawned processes on a fresh directory, deleted afterwards:
ext4 directories never shrink, and a queue that follows a big one would pay for its empty
entries. docs/benchmarks.md has a measured table and what limits each number.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from multiprocessing import get_context
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

from machine import Source, interpreter

QUEUE = "bench"
ROUND = 100  # put_many's batch; persist-queue also clears its acked rows every ROUND acks
PRODUCER_THREADS = 8  # per process
IN_FLIGHT = 100
LOCK_TIMEOUT = 60.0  # far longer than any case: no lock times out, nothing is redelivered
STALL = 60.0  # a consumer that waits this long for a message is stuck: the case fails
TAG = 12  # bytes at the head of every body that name it: process (2) and sequence (10)
QUICK_MESSAGES = 5_000
FLOOR_SHARE = 0.60  # goal: boxmq with fsync=never reaches this share of the bare floor
GROUP_SPEEDUP = 5.0  # goal: boxmq with fsync=always is this many times one fsync per message
NOISY = 0.5  # CPU cores used by other processes during a measurement that make a verdict noisy
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


class Policy(Enum):
    NEVER = "never"
    INTERVAL = "interval"
    ALWAYS = "always"


class Producer(Enum):
    PUT = "put"  # one thread: put() one message, get it, ack it; then the next (the floor's shape)
    BATCH = "put_many"  # put_many() of ROUND messages (one commit, one flush), then get+ack them
    THREADS = "threads"  # PRODUCER_THREADS threads call put() while the main thread gets+acks


class Kind(Enum):
    BOXMQ = "boxmq"
    FLOOR = "floor"
    PERSIST_QUEUE = "persist-queue"


class Goal(Enum):
    NONE = "none"
    FLOOR_SHARE = "floor-share"
    GROUP_COMMIT = "group-commit"


# persist-queue's SQLiteAckQueue puts SQLite in WAL mode and leaves `synchronous` at SQLite's
# default, FULL: a WAL fsync at every commit. We set it per connection to match each policy.
# The producer's connection makes puts as durable as boxmq's puts; the consumer's makes gets
# and acks as durable as boxmq's renames into processing/ and out of it, which no policy
# flushes at once. NORMAL in WAL mode fsyncs only at checkpoints.
PQ_PUT_SYNC = {Policy.NEVER: "OFF", Policy.INTERVAL: "NORMAL", Policy.ALWAYS: "FULL"}
PQ_ACK_SYNC = {Policy.NEVER: "OFF", Policy.INTERVAL: "NORMAL", Policy.ALWAYS: "NORMAL"}


@dataclass(frozen=True, slots=True)
class Plan:
    """How many messages each kind of measurement gets, from --messages.

    Rates are comparable across counts: no backlog grows with the count (at most ROUND
    messages wait), so a shorter run only has fewer samples. The short counts keep the default
    run well under ten minutes on two cores: creating files that are kept (ack→processed/)
    costs ext4 far more than reusing freed inodes, and a flush per message caps near 2 000/s.
    """

    full: int  # fsync=never, ack→unlink: boxmq, persist-queue and their floor
    short: int  # ack→processed/, interval and group-commit rows
    flushed: int  # one flush per message: the `always` floor and persist-queue under `always`
    single: int  # boxmq put() from 1 thread under `always`: two syncfs per message

    @classmethod
    def of(cls, messages: int) -> Plan:
        return cls(
            full=messages,
            short=min(messages, max(messages // 5, 2_000)),
            flushed=min(messages, 5_000),
            single=min(messages, 1_000),
        )


@dataclass(frozen=True, slots=True)
class Work:
    """What one process of a measurement does; sent to a spawned child, so it pickles."""

    root: str
    index: int
    share: int  # messages this process puts (it gets as many, whoever put them)
    size: int
    policy: Policy
    keep_processed: bool
    producer: Producer
    spares: int  # boxmq.open(spares=...): files of acked messages kept for later puts


@dataclass(frozen=True, slots=True)
class Timing:
    first_put: float  # time.monotonic(): on Linux one clock for every process
    last_ack: float
    tags: list[bytes]  # the head of every body acked, to count losses and duplicates
    cpu: float = 0.0  # CPU seconds this process used on the clock (filled in by _child)


@dataclass(frozen=True, slots=True)
class Outcome:
    rate: float
    messages: int
    problem: str | None  # messages lost or acked twice
    others: float  # CPU cores other processes used meanwhile: the noise on this machine


@dataclass(frozen=True, slots=True)
class Case:
    procs: int
    policy: Policy
    keep_processed: bool
    producer: Producer
    messages: int
    goal: Goal

    @property
    def durable(self) -> bool:
        return self.policy is Policy.ALWAYS

    def label(self) -> str:
        producer = {
            Producer.PUT: "put() 1 thread",
            Producer.BATCH: f"put_many({ROUND})",
            Producer.THREADS: f"put() {PRODUCER_THREADS} threads",
        }[self.producer]
        ack = "processed/" if self.keep_processed else "unlink"
        return f"{self.procs}p {self.policy.value}, {producer}, ack→{ack}"


@dataclass(frozen=True, slots=True)
class Row:
    case: Case
    boxmq: Outcome
    floor: Outcome
    persist_queue: Outcome

    @property
    def others(self) -> float:
        return max(self.boxmq.others, self.floor.others, self.persist_queue.others)


_FloorKey = tuple[int, bool, bool]  # procs, durable, keep_processed
_ReferenceKey = tuple[int, Policy, bool]  # procs, policy, threads


@dataclass(slots=True)
class Run:
    """One invocation: where measurements go, and the references rows share."""

    base: str
    size: int
    plan: Plan
    spares: int = 256
    count: int = 0
    floors: dict[_FloorKey, Outcome] = field(default_factory=dict)
    references: dict[_ReferenceKey, Outcome] = field(default_factory=dict)

    def fresh(self, kind: Kind) -> str:
        # The run's pid in the name: ext4 places a folder under a `+T` parent in a block group
        # chosen by a hash of its name, so without it a measurement lands where the same
        # measurement of a run minutes before freed its files, and creates there are slow for
        # a while; with it, each run draws its groups anew, the same odds for every row.
        self.count += 1
        return os.path.join(self.base, f"{self.count:02d}-{kind.value}-{os.getpid()}")


# -- the three workloads, each in its own process(es) ---------------------------------------------


def _bodies(work: Work) -> list[bytes]:
    return [
        f"{work.index:02d}{seq:010d}".encode().ljust(work.size, b".") for seq in range(work.share)
    ]


def _boxmq(work: Work, start: Callable[[], None]) -> Timing:
    import boxmq

    box = boxmq.open(
        work.root,
        fsync=work.policy.value,
        keep_processed=work.keep_processed,
        spares=work.spares,
    )
    try:
        queue = box.queue(QUEUE)
        bodies = _bodies(work)
        with queue.consumer(
            f"c{work.index}", max_in_flight=IN_FLIGHT, lock_timeout=LOCK_TIMEOUT
        ) as consumer:

            def get_and_ack() -> bytes:
                message = consumer.receive(timeout=STALL)
                if message is None:
                    raise RuntimeError(f"no message for {STALL} s: stuck")
                message.ack()
                return message.body[:TAG]

            def put_each(share: Sequence[bytes]) -> None:
                for body in share:
                    queue.put(body)

            start()
            first = time.monotonic()
            if work.producer is Producer.THREADS:
                # The consumer works while the producers wait for their flushes.
                with _Threads(put_each, bodies, PRODUCER_THREADS):
                    tags = [get_and_ack() for _ in bodies]
            elif work.producer is Producer.BATCH:
                tags = []
                for begin in range(0, len(bodies), ROUND):
                    chunk = bodies[begin : begin + ROUND]
                    queue.put_many(chunk)
                    tags += [get_and_ack() for _ in chunk]
            else:
                tags = []
                for body in bodies:
                    queue.put(body)
                    tags.append(get_and_ack())  # with two processes: whichever message comes
            last = time.monotonic()
    finally:
        box.close()
    return Timing(first, last, tags)


def _floor(work: Work, start: Callable[[], None]) -> Timing:
    folders = [
        os.path.join(work.root, QUEUE, state)
        for state in ("working", "target", "processing", "processed")
    ]
    working, target, processing, processed = folders
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
    body = b"." * work.size
    names = [f"{work.index:02d}{seq:010d}" for seq in range(work.share)]
    target_fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    durable, keep = work.policy is Policy.ALWAYS, work.keep_processed
    start()
    first = time.monotonic()
    for name in names:
        written = os.path.join(working, name)
        ready = os.path.join(target, name)
        locked = os.path.join(processing, name)
        fd = os.open(written, _CREATE, 0o644)
        os.write(fd, body)
        if durable:
            os.fsync(fd)
        os.close(fd)
        os.rename(written, ready)
        if durable:
            os.fsync(target_fd)  # the rename too: a durable put must survive a crash in target/
        os.rename(ready, locked)
        if keep:
            os.rename(locked, os.path.join(processed, name))
        else:
            os.unlink(locked)
    last = time.monotonic()
    os.close(target_fd)
    return Timing(first, last, [])  # each process handles only its own files: nothing to count


def _persist_queue(work: Work, start: Callable[[], None]) -> Timing:
    import persistqueue
    from persistqueue.exceptions import Empty

    threads = work.producer is Producer.THREADS
    # Two queue objects on one database, one for puts and one for gets and acks, so that each
    # connection has its own `synchronous` (the library writes an ack on the put connection of
    # the object that acks).
    producing = persistqueue.SQLiteAckQueue(work.root, multithreading=threads, auto_resume=False)
    consuming = persistqueue.SQLiteAckQueue(work.root, auto_resume=False)
    _synchronous(producing, PQ_PUT_SYNC[work.policy])
    _synchronous(consuming, PQ_ACK_SYNC[work.policy])
    bodies = _bodies(work)
    acked = 0

    def get_and_ack() -> bytes:
        nonlocal acked
        deadline = time.monotonic() + STALL
        while True:
            try:
                item = consuming.get(block=False, raw=True)
                break
            except Empty:
                # Its blocking get waits on an event that only a put on the same object sets:
                # puts by the other object (or process) never set it, so poll.
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no message for {STALL} s: stuck") from None
                time.sleep(0.0005)
        consuming.ack(id=item["pqid"])
        acked += 1
        if acked % ROUND == 0:
            # Acked rows stay in the table and every get walks past them from the first id:
            # without this, 100 000 messages slow down to under 100/s. The library's answer.
            consuming.clear_acked_data(keep_latest=0)
        data: bytes = item["data"]
        return data[:TAG]

    def put_each(share: Sequence[bytes]) -> None:
        for body in share:
            producing.put(body)

    start()
    first = time.monotonic()
    if threads:
        with _Threads(put_each, bodies, PRODUCER_THREADS):
            tags = [get_and_ack() for _ in bodies]
    else:
        # No put_many in SQLiteAckQueue: put_many rows compare with one commit per put.
        tags = []
        for body in bodies:
            producing.put(body)
            tags.append(get_and_ack())
    last = time.monotonic()
    producing.close()
    consuming.close()
    return Timing(first, last, tags)


def _create_database(root: str) -> None:
    """Make the database (and switch it to WAL) before the processes start: two processes
    switching a new database to WAL at once fail with "database is locked"."""
    import persistqueue

    persistqueue.SQLiteAckQueue(root, auto_resume=False).close()


def _synchronous(queue: object, level: str) -> None:
    connections = (queue._putter, queue._getter)  # type: ignore[attr-defined]
    for connection in {id(c): c for c in connections}.values():
        connection.execute(f"PRAGMA synchronous={level}")


class _Threads:
    """Run `work` over `items` split between `count` threads; re-raise the first error."""

    def __init__(
        self, work: Callable[[Sequence[bytes]], None], items: Sequence[bytes], count: int
    ) -> None:
        self._errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._guard, args=(work, items[n::count]), daemon=True)
            for n in range(count)
        ]

    def _guard(self, work: Callable[[Sequence[bytes]], None], items: Sequence[bytes]) -> None:
        try:
            work(items)
        except BaseException as error:
            self._errors.append(error)
            raise

    def __enter__(self) -> _Threads:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for thread in self._threads:
            thread.join()
        if self._errors:
            raise self._errors[0]


_WORKLOADS: dict[Kind, Callable[[Work, Callable[[], None]], Timing]] = {
    Kind.BOXMQ: _boxmq,
    Kind.FLOOR: _floor,
    Kind.PERSIST_QUEUE: _persist_queue,
}


def _child(kind: Kind, work: Work, pipe: Connection, go: Event) -> None:
    """A spawned process: set up, say ready, wait for the start, run, send the timing."""

    began = []

    def start() -> None:
        pipe.send("ready")
        go.wait()
        began.append(_self_cpu())

    try:
        timing = _WORKLOADS[kind](work, start)
        pipe.send(replace(timing, cpu=_self_cpu() - began[0]))
    except BaseException:
        pipe.send(traceback.format_exc())
    finally:
        pipe.close()


# -- running a measurement ------------------------------------------------------------------------


def _measure(run: Run, kind: Kind, case: Case) -> Outcome:
    """Run one workload of `case` in `case.procs` fresh processes on a fresh directory."""
    root = run.fresh(kind)
    os.makedirs(root)
    if kind is Kind.PERSIST_QUEUE:
        _create_database(root)
    shares = [case.messages // case.procs] * case.procs
    shares[0] += case.messages - sum(shares)
    works = [
        Work(root, i, share, run.size, case.policy, case.keep_processed, case.producer, run.spares)
        for i, share in enumerate(shares)
    ]
    context = get_context("spawn")
    go = context.Event()
    pipes, processes = [], []
    for work in works:
        ours, theirs = context.Pipe()
        process = context.Process(target=_child, args=(kind, work, theirs, go), daemon=True)
        process.start()
        theirs.close()
        pipes.append(ours)
        processes.append(process)
    try:
        for pipe in pipes:
            _expect(pipe, "ready")
        go.set()  # every process is set up: the clock starts at the first put after this
        busy, wall = _busy_seconds(), time.monotonic()
        timings = [_timing(pipe) for pipe in pipes]
        busy, wall = _busy_seconds() - busy, time.monotonic() - wall
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
        _remove(root)
    elapsed = max(t.last_ack for t in timings) - min(t.first_put for t in timings)
    problem = None if kind is Kind.FLOOR else _check(works, timings)
    others = max(0.0, (busy - sum(t.cpu for t in timings)) / wall)
    return Outcome(case.messages / elapsed, case.messages, problem, others)


def _expect(pipe: Connection, what: str) -> object:
    """The worker's next answer; a traceback (any str but "ready") means it failed."""
    if not pipe.poll(STALL * 10):
        raise RuntimeError(f"no {what} from a worker in {STALL * 10:.0f} s")
    try:
        answer: object = pipe.recv()
    except EOFError:
        raise RuntimeError(f"a worker died before sending its {what}") from None
    if isinstance(answer, str) and answer != "ready":
        raise RuntimeError(f"a worker failed:\n{answer}")
    return answer


def _timing(pipe: Connection) -> Timing:
    answer = _expect(pipe, "timing")
    if not isinstance(answer, Timing):
        raise RuntimeError(f"a worker answered {answer!r}, not a timing")
    return answer


def _check(works: Sequence[Work], timings: Sequence[Timing]) -> str | None:
    """Every message acked exactly once, counted from the tags at the head of the bodies."""
    expected = {body[:TAG] for work in works for body in _bodies(work)}
    acked = [tag for timing in timings for tag in timing.tags]
    duplicates = len(acked) - len(set(acked))
    lost = len(expected - set(acked))
    if duplicates or lost:
        return f"{duplicates} acked twice and {lost} never acked, of {len(expected)}"
    return None


def _remove(root: str) -> None:
    shutil.rmtree(root, ignore_errors=True)
    # Write the deletes back now, or their write-back lands inside the next clock.
    os.sync()


def _busy_seconds() -> float:
    try:
        with open("/proc/stat") as stat:
            ticks = [int(f) for f in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the cases ------------------------------------------------------------------------------------


def _cases(plan: Plan) -> list[Case]:
    cases = []
    for procs in (1, 2):
        cases += [
            Case(procs, Policy.NEVER, False, Producer.PUT, plan.full, Goal.FLOOR_SHARE),
            Case(procs, Policy.NEVER, True, Producer.PUT, plan.short, Goal.FLOOR_SHARE),
            Case(procs, Policy.INTERVAL, False, Producer.PUT, plan.short, Goal.NONE),
        ]
        if procs == 1:  # the second process changes nothing in how processed/ costs
            cases.append(Case(procs, Policy.INTERVAL, True, Producer.PUT, plan.short, Goal.NONE))
        cases.append(
            Case(procs, Policy.ALWAYS, False, Producer.BATCH, plan.short, Goal.GROUP_COMMIT)
        )
        if procs == 1:
            cases.append(
                Case(procs, Policy.ALWAYS, True, Producer.BATCH, plan.short, Goal.GROUP_COMMIT)
            )
        cases.append(
            Case(procs, Policy.ALWAYS, False, Producer.THREADS, plan.short, Goal.GROUP_COMMIT)
        )
        if procs == 1:
            # One put at a time has nothing to group: shown for honesty, with no goal.
            cases.append(Case(procs, Policy.ALWAYS, False, Producer.PUT, plan.single, Goal.NONE))
    return cases


def _chosen(cases: list[Case], texts: Sequence[str] | None) -> list[Case]:
    """The cases whose label holds one of `texts`; all of them without any."""
    if not texts:
        return cases
    return [case for case in cases if any(text in case.label() for text in texts)]


def _run_case(run: Run, case: Case) -> Row:
    plan = run.plan
    # The floor depends only on the file operations and the flushes, so one measurement
    # serves every producer and both policies without fsync.
    floor = Case(
        case.procs,
        Policy.ALWAYS if case.durable else Policy.NEVER,
        case.keep_processed,
        Producer.PUT,
        plan.flushed if case.durable else plan.short if case.keep_processed else plan.full,
        Goal.NONE,
    )
    floor_key = (case.procs, case.durable, case.keep_processed)
    if floor_key not in run.floors:
        _say(f"  floor          {floor.label()}: {floor.messages:,} messages")
        run.floors[floor_key] = _measure(run, Kind.FLOOR, floor)
    _say(f"  boxmq          {case.label()}: {case.messages:,} messages")
    boxmq = _measure(run, Kind.BOXMQ, case)
    # persist-queue deletes its acked rows (see _persist_queue), so one run serves both ack
    # rows; with no batch put, a put_many row gets the one-put-at-a-time run.
    threads = case.producer is Producer.THREADS
    reference = Case(
        case.procs,
        case.policy,
        False,
        Producer.THREADS if threads else Producer.PUT,
        plan.flushed if case.durable else case.messages,
        Goal.NONE,
    )
    reference_key = (case.procs, case.policy, threads)
    if reference_key not in run.references:
        _say(f"  persist-queue  {reference.label()}: {reference.messages:,} messages")
        run.references[reference_key] = _measure(run, Kind.PERSIST_QUEUE, reference)
    row = Row(case, boxmq, run.floors[floor_key], run.references[reference_key])
    _say(
        f"    boxmq {boxmq.rate:,.0f}  floor {row.floor.rate:,.0f}  persist-queue "
        f"{row.persist_queue.rate:,.0f} msg/s  (others used {boxmq.others:.2f} / "
        f"{row.floor.others:.2f} / {row.persist_queue.others:.2f} cores)"
    )
    return row


# -- the table ------------------------------------------------------------------------------------

_HEADER = [
    "| case | boxmq msg/s | floor msg/s | persist-queue msg/s | ratio | goal | PASS/FAIL |",
    "|---|--:|--:|--:|--:|---|---|",
]


def _table(rows: Sequence[Row]) -> list[str]:
    lines = list(_HEADER)
    for row in rows:
        lines += _lines(row)
    return lines


def _lines(row: Row) -> list[str]:
    case = row.case
    label = f"{case.label()} ({_thousands(case.messages)})"
    cells = " | ".join(_cell(o, case) for o in (row.boxmq, row.floor, row.persist_queue))
    ratio = row.boxmq.rate / row.floor.rate
    goal, verdict = "(info)", "—"
    if case.goal is Goal.FLOOR_SHARE:
        goal, verdict = f"≥ {FLOOR_SHARE:.2f} x floor", _verdict(row, ratio >= FLOOR_SHARE)
    elif case.goal is Goal.GROUP_COMMIT:
        goal, verdict = f"≥ {GROUP_SPEEDUP:.0f} x floor", _verdict(row, ratio >= GROUP_SPEEDUP)
    versus = row.boxmq.rate / row.persist_queue.rate
    if row.persist_queue.problem:
        versus_verdict = "n/a: persist-queue acked twice"
    else:
        versus_verdict = _verdict(row, versus > 1.0)
    return [
        f"| {label} | {cells} | {ratio:.2f} x floor | {goal} | {verdict} |",
        f"| ↳ same case vs persist-queue | | | | {versus:.2f} x pq | > 1 x pq | {versus_verdict} |",
    ]


def _cell(outcome: Outcome, case: Case) -> str:
    text = f"{outcome.rate:,.0f}"
    if outcome.messages != case.messages:
        text += f" ({_thousands(outcome.messages)})"
    return text + (" ⚠" if outcome.problem else "")


def _thousands(messages: int) -> str:
    return f"{messages / 1000:g}k"


def _verdict(row: Row, holds: bool) -> str:
    if row.boxmq.problem:
        return "FAIL: messages lost or acked twice"
    verdict = "PASS" if holds else "FAIL"
    return f"{verdict} (noisy)" if row.others >= NOISY else verdict


def _legend(rows: Sequence[Row]) -> list[str]:
    sync = ", ".join(f"{p.value}: put {PQ_PUT_SYNC[p]}, get+ack {PQ_ACK_SYNC[p]}" for p in Policy)
    legend = [
        "",
        "(Nk): messages in that measurement; rates are comparable across counts. "
        "msg/s = messages / (last ack - first put), over all processes of the case.",
        "put() 1 thread: put one message, get it, ack it, then the next (the floor's shape). "
        f"put_many({ROUND}): one commit per {ROUND} messages (under always: two syncfs for "
        f"all {ROUND}), then get+ack them. put() {PRODUCER_THREADS} threads: {PRODUCER_THREADS} "
        "producer threads per process, put() concurrently (the committer groups whatever is "
        "waiting) while the main thread gets and acks. always + put() 1 thread: every put "
        "waits for its own flush, nothing to group; no goal.",
        "floor: per message, create+write in working/, rename to target/, rename to "
        "processing/, unlink (ack→processed/ rows: rename to processed/); under always also "
        "fsync(file) before the first rename and fsync(target dir) after it. It does not read "
        "the body back; boxmq does (one open+read+close). 2p floor: two processes, half the "
        "messages each, on the folders of one queue.",
        "persist-queue: SQLiteAckQueue (SQLite WAL), put(), get(raw=True), ack(id=...), "
        "one object for puts and one for gets+acks, PRAGMA synchronous per policy "
        f"({sync}); clear_acked_data(keep_latest=0) every {ROUND} acks, so acked rows are "
        "deleted (like ack→unlink) in every row. No batch put: put_many rows compare with its "
        "one-commit-per-put run. With 2 processes it polls get() every 0.5 ms when empty.",
        f"boxmq consumers: max_in_flight={IN_FLIGHT}, lock_timeout={LOCK_TIMEOUT:.0f} s.",
    ]
    problems = [
        f"⚠ {name} {row.case.procs}p {row.case.policy.value}: {outcome.problem}"
        for row in rows
        for name, outcome in (("boxmq", row.boxmq), ("persist-queue", row.persist_queue))
        if outcome.problem
    ]
    legend += list(dict.fromkeys(problems))
    noisiest = max(rows, key=lambda row: row.others)
    legend.append(
        f"(noisy): other processes used {NOISY} core or more during one of the row's three "
        f"measurements (/proc/stat busy time less our own processes' CPU); here at most "
        f"{noisiest.others:.2f} of {os.cpu_count()} cores ({noisiest.case.label()})."
    )
    return legend


def _machine(directory: str) -> list[str]:
    import sqlite3
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return [
        f"machine: {os.cpu_count()} cores, Linux {os.uname().release}; {_filesystem(directory)}",
        interpreter(),
        f"boxmq {installed('boxmq')}, persist-queue {installed('persist-queue')}, "
        f"SQLite {sqlite3.sqlite_version}",
    ]


_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS = 0x80086601, 0x40086602  # linux/fs.h, 64-bit
_FS_TOPDIR_FL = 0x00020000  # `chattr +T`: ext4 spreads the folders made in it


def _spread(base: str) -> str:
    """Mark `base` so that ext4 puts each measurement's fresh folder in a block group of its
    own. Without a journal, ext4's inode allocator passes over every inode its block group
    freed in the last minutes, so a measurement that creates files right after another one
    deleted its own paid for those deletes: the same loop went from 7,548 to 3,408 to 1,923
    msg/s in three runs, and held 7,572-7,675 with the mark (docs/benchmarks.md)."""
    import array
    import fcntl

    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = array.array("i", [0])  # the kernel reads and writes an int
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
        flags[0] |= _FS_TOPDIR_FL
        fcntl.ioctl(fd, _FS_IOC_SETFLAGS, flags, True)
    except OSError as error:
        return f"measurement folders not spread over block groups ({error.strerror})"
    finally:
        os.close(fd)
    return "each measurement's folder in a block group of its own (chattr +T on the run's folder)"


def _filesystem(path: str) -> str:
    """The file system holding `path`, from the longest mount point that contains it."""
    path = os.path.realpath(path)
    device, kind, mount = "?", "?", ""
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(mount):
                    device, kind, mount = fields[0], fields[2], point
    except (OSError, IndexError):
        pass
    return f"{os.path.dirname(path)} is on {kind} ({device} mounted at {mount})"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="put → get → ack through boxmq, beside the file-system floor and "
        "persist-queue (docs/benchmarks.md)"
    )
    parser.add_argument("--messages", type=int, default=100_000, help="default 100000")
    parser.add_argument("--size", type=int, default=200, help="body bytes, default 200")
    parser.add_argument(
        "--dir",
        default=os.path.join("bench", "results"),
        help="a fresh folder is made (and removed) under it; default ./bench/results. "
        "Not tmpfs: the point is the disk",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_MESSAGES:,} messages: a smoke run"
    )
    parser.add_argument(
        "--spares",
        type=int,
        default=256,
        help="boxmq.open(spares=N), default 256; 0 deletes acked files at once, as "
        "boxmq did before spare files",
    )
    parser.add_argument(
        "--case",
        action="append",
        metavar="TEXT",
        help="only the rows whose label holds TEXT (e.g. 'processed/', '1p never'); "
        "repeatable: a row matching any of them",
    )
    args = parser.parse_args(argv)
    messages: int = QUICK_MESSAGES if args.quick else args.messages
    if messages < 2 * ROUND:
        parser.error(f"--messages must be at least {2 * ROUND}")
    if args.size < TAG:
        parser.error(f"--size must be at least {TAG}: the head of a body names the message")
    plan = Plan.of(messages)
    every = _cases(plan)
    cases = _chosen(every, args.case)
    # Each TEXT must hold for a row: a typo beside another TEXT ran that one's rows alone.
    unmatched = [text for text in args.case or () if not _chosen(every, [text])]
    if unmatched:
        labels = "; ".join(case.label() for case in every)
        parser.error(f"no row's label holds {' or '.join(map(repr, unmatched))}: {labels}")
    # After the arguments' own checks: a typo is said as such where the reference is missing.
    if importlib.util.find_spec("persistqueue") is None:
        parser.error("persist-queue, the reference, is missing: run `make bench` once")
    base = os.path.join(
        os.path.abspath(args.dir), f"store-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    )
    os.makedirs(base)
    machine = [*_machine(base), _spread(base)]
    if " on tmpfs " in machine[0]:
        _say("warning: --dir is on tmpfs: these numbers are CPU costs, not disk costs")
    source = Source()
    run = Run(base, args.size, plan, args.spares)
    started = time.monotonic()
    rows = []
    try:
        for case in cases:
            rows.append(_run_case(run, case))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("\n".join([*machine, source.describe()]))
    print(
        f"--messages {messages:,}, --size {args.size}, --spares {args.spares}; "
        f"the run took {time.monotonic() - started:.0f} s\n"
    )
    print("\n".join(_table(rows) + _legend(rows)))
    return source.finish()


if __name__ == "__main__":
    sys.exit(main())
