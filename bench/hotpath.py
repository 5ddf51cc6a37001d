"""bench/hotpath: the CPU one message costs boxmq, put -> receive -> ack, one at a time.

    python bench/hotpath.py [--messages 20000] [--dir /dev/shm] [--path queue|share|assured]
                            [--subscriptions 10]
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python bench/hotpath.py --boxmq-only --messages N [--path share|assured]

Prints user and system CPU per message for boxmq (fsync=never, ack deletes), for the bare
file-system sequence of bench/store.py's floor, and for `bare`: the least a Python queue on the
same files can do (a DropboxMQ name, an in-memory heap, a claim rename that writes the lock's
owner and deadline into the name, the body read back, an unlink), in one run. `bare` shows how
much of boxmq's distance to the floor is Python's and how much is boxmq's own. `--path share`
measures an MQTT share group's path instead of a queue's: publications to a topic, ten per
`publish_many` (a broker's read), taken and acknowledged by a member of `$share/g/sensors/+`.
`--path assured` measures the exactly-once intake's (MQTT QoS 2 stored on disk): ten messages to
a topic stored (`assured_many`, a client's window of PUBLISHes), then delivered (`deliver_many`,
their PUBRELs), each to `--subscriptions` durable subscriptions whose copies nobody takes.
On tmpfs the figures are the Python cost without the disk's. Under callgrind, the difference
of two runs with different --messages divided by the difference of the counts is the
instructions per message: a figure that does not move with the load of a shared machine
(docs/benchmarks.md uses it to compare commits).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import resource
import shutil
import tempfile
import time

import boxmq
from boxmq.client.assured import AssuredMessage
from boxmq.client.publishing import Publication
from machine import interpreter

BODY = b"x" * 200


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _report(label: str, messages: int, started: float, cpu: tuple[float, float]) -> None:
    elapsed = time.perf_counter() - started
    user, system = (after - before for after, before in zip(_cpu(), cpu, strict=True))
    print(
        f"{label:<6} {messages / elapsed:>8.0f} msg/s  wall {elapsed / messages * 1e6:6.1f} µs  "
        f"user {user / messages * 1e6:6.1f} µs  sys {system / messages * 1e6:6.1f} µs"
    )


def boxmq_loop(root: str, messages: int) -> None:
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        queue = box.queue("jobs")
        with queue.consumer("w", max_in_flight=100, lock_timeout=30) as consumer:
            for _ in range(500):  # warm up: imports, caches, the watcher
                queue.put(BODY)
                message = consumer.receive(timeout=5)
                assert message is not None
                message.ack()
            cpu, started = _cpu(), time.perf_counter()
            for _ in range(messages):
                queue.put(BODY)
                message = consumer.receive(timeout=5)
                if message is None:
                    raise RuntimeError("no message within 5 s: stuck")
                message.ack()
            _report("boxmq", messages, started, cpu)


def share_loop(root: str, messages: int) -> None:
    batch = [Publication("sensors/1", BODY) for _ in range(10)]
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        topics = box.topics
        member = topics.subscribe("$share/g/sensors/+", "w", max_in_flight=100)

        def publish_and_take(count: int) -> None:
            taken = 0
            while taken < count:
                topics.publish_many(batch)
                for _ in batch:
                    message = member.receive(timeout=5)
                    if message is None:
                        raise RuntimeError("no message within 5 s: stuck")
                    message.ack()
                taken += len(batch)

        publish_and_take(500)  # warm up: imports, caches, the watcher
        cpu, started = _cpu(), time.perf_counter()
        publish_and_take(messages)
        _report("share", messages, started, cpu)
        member.close()


def assured_loop(root: str, messages: int, subscriptions: int) -> None:
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        for number in range(subscriptions):
            box.subscribe("sensors/#", f"s{number}").close()
        intake = box.intake
        ids = itertools.count()

        def store_and_deliver(count: int) -> None:
            for _ in range(count // 10):
                window = [
                    AssuredMessage("mqtt:pub", str(next(ids)), BODY, topic="sensors/1")
                    for _ in range(10)
                ]
                if intake.assured_many(window) != [True] * len(window):
                    raise RuntimeError("a window was not stored")
                keys = [(message.source, message.msg_id) for message in window]
                if intake.deliver_many(keys, remember=False) != [True] * len(keys):
                    raise RuntimeError("a window was not delivered")

        store_and_deliver(500)  # warm up: imports, caches
        cpu, started = _cpu(), time.perf_counter()
        store_and_deliver(messages)
        _report("assured", messages, started, cpu)


class _BareQueue:
    """The least work a put -> receive -> ack on boxmq's file protocol needs, in one process:
    no other process, no watcher, no expiry, no redelivery, no housekeeping."""

    def __init__(self, root: str) -> None:
        self.working, self.target, self.processing = (
            os.path.join(root, state) + "/" for state in ("working", "target", "processing")
        )
        for folder in (self.working, self.target, self.processing):
            os.makedirs(folder)
        self.ready: list[tuple[int, int, str]] = []
        self.numbers = itertools.count()
        self.held: dict[str, str] = {}  # name -> its path in processing/

    def put(self, body: bytes, priority: int = 4) -> None:
        number = next(self.numbers)
        name = f"{priority}.{os.getpid():x}-{number}.B"
        fd = os.open(self.working + name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        os.rename(self.working + name, self.target + name)
        heapq.heappush(self.ready, (-priority, number, name))

    def receive(self, owner: str, lock_timeout: float) -> tuple[str, bytes] | None:
        while self.ready:
            name = heapq.heappop(self.ready)[2]
            locked = f"{self.processing}{name}.{owner}.{int((time.time() + lock_timeout) * 1000)}"
            try:
                os.rename(self.target + name, locked)
            except FileNotFoundError:
                continue
            fd = os.open(locked, os.O_RDONLY | os.O_CLOEXEC)
            try:
                body = os.read(fd, 1 << 16)
            finally:
                os.close(fd)
            self.held[name] = locked
            return name, body
        return None

    def ack(self, name: str) -> None:
        os.unlink(self.held.pop(name))


def bare_loop(root: str, messages: int) -> None:
    queue = _BareQueue(os.path.join(root, "bare"))
    cpu, started = _cpu(), time.perf_counter()
    for _ in range(messages):
        queue.put(BODY)
        taken = queue.receive("w", 30.0)
        assert taken is not None
        queue.ack(taken[0])
    _report("bare", messages, started, cpu)


def floor_loop(root: str, messages: int) -> None:
    working, target, processing = (
        os.path.join(root, "floor", state) for state in ("working", "target", "processing")
    )
    for folder in (working, target, processing):
        os.makedirs(folder)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    cpu, started = _cpu(), time.perf_counter()
    for index in range(messages):
        name = f"/4.{index:016d}-0000000000.B"
        fd = os.open(working + name, flags, 0o644)
        os.write(fd, BODY)
        os.close(fd)
        os.rename(working + name, target + name)
        os.rename(target + name, processing + name)
        os.unlink(processing + name)
    _report("floor", messages, started, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--dir", default="/dev/shm", help="default /dev/shm: the CPU alone")
    parser.add_argument("--boxmq-only", action="store_true", help="no floor (for callgrind)")
    parser.add_argument("--path", choices=["queue", "share", "assured"], default="queue")
    parser.add_argument(
        "--subscriptions", type=int, default=10, help="--path assured: subscriptions to the topic"
    )
    args = parser.parse_args()
    if args.messages % 10:
        parser.error("--messages must be a multiple of 10 (share and assured go ten at a time)")
    print(interpreter())
    root = tempfile.mkdtemp(prefix="hotpath-", dir=args.dir)
    try:
        boxmq_root = os.path.join(root, "boxmq")
        if args.path == "assured":
            assured_loop(boxmq_root, args.messages, args.subscriptions)
        else:
            loop = share_loop if args.path == "share" else boxmq_loop
            loop(boxmq_root, args.messages)
        if not args.boxmq_only:
            floor_loop(root, args.messages)
            bare_loop(root, args.messages)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
