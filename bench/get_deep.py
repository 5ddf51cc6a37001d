"""bench/get_deep: `Queue.get` (or a consumer's receive) on a deep queue by several processes.

    python bench/get_deep.py [--processes 1 2 4] [--each 1000 3000] [--limit 90] [--consumer]

Each case runs P spawned processes, each with its own Box on one fresh root (fsync="never"),
each putting N messages to one queue and then taking them with get + ack (`--consumer`: a
consumer's receive + ack) until the queue is empty or `--limit` seconds pass. Beside each,
one process alone with the same P x N messages. Prints msg/s (taken / the slowest process's
seconds) and what was left; docs/benchmarks.md ("get on a deep queue") has a measured table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from multiprocessing import get_context
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue as Results
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for harness.*

from harness.stopping import Worker, stop

QUEUE = "jobs"


def _worker(
    root: str, each: int, limit: float, consumer: bool, out: Results[tuple[int, float]]
) -> None:
    import boxmq

    box = boxmq.open(root, fsync="never")
    try:
        queue = box.queue(QUEUE)
        for number in range(each):
            queue.put(b"m%d" % number)
        taken, start = 0, time.monotonic()
        if consumer:
            with queue.consumer(f"c{os.getpid()}") as reader:
                while time.monotonic() - start < limit:
                    message = reader.receive(timeout=0.5)
                    if message is None:
                        break
                    message.ack()
                    taken += 1
        else:
            while time.monotonic() - start < limit and (message := queue.get()) is not None:
                queue.ack(message.id)
                taken += 1
        out.put((taken, time.monotonic() - start))
    finally:
        box.close()


def _results(
    out: Results[tuple[int, float]], workers: Sequence[BaseProcess], seconds: float
) -> list[tuple[int, float]]:
    """One result from each of `workers`, within `seconds`. A worker puts its result and
    then exits 0: one that exits otherwise (an exception, a signal) never will, so the wait
    ends at once rather than at its time."""
    results: list[tuple[int, float]] = []
    deadline = time.monotonic() + seconds
    while len(results) < len(workers):
        for worker in workers:
            if worker.exitcode not in (None, 0):
                raise RuntimeError(
                    f"worker process {worker.pid} ended with exit code {worker.exitcode} "
                    "before it gave its result (its traceback, if any, is above)"
                )
        if time.monotonic() > deadline:
            raise RuntimeError(f"the workers gave no result within {seconds:.0f} s")
        with contextlib.suppress(queue.Empty):
            results.append(out.get(timeout=0.5))
    return results


def _case(processes: int, each: int, limit: float, consumer: bool, base: str | None) -> str:
    root = tempfile.mkdtemp(prefix="get-deep-", dir=base)  # None: the system's tmp dir
    try:
        context = get_context("spawn")
        out: Results[tuple[int, float]] = context.Queue()
        workers = [
            context.Process(target=_worker, args=(root, each, limit, consumer, out))
            for _ in range(processes)
        ]
        for worker in workers:
            worker.start()
        try:
            results = _results(out, workers, limit + 600)
        except BaseException:
            # Not left to run on (and be waited for at exit): SIGTERM, SIGKILL past 10 s, joined.
            stop(*map(Worker, workers), seconds=10.0)
            raise
        for worker in workers:
            worker.join()
        taken = sum(r[0] for r in results)
        slowest = max(r[1] for r in results)
        left = len(os.listdir(os.path.join(root, QUEUE, "target")))
        return (
            f"{processes} x {each:>6,}  taken {taken:>7,} in {slowest:5.1f} s  "
            f"{taken / slowest:7.0f} msg/s  left {left:,}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--each", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--limit", type=float, default=90.0, help="seconds per process")
    parser.add_argument("--consumer", action="store_true", help="receive, not get")
    parser.add_argument("--dir", default=None, help="where the roots go (default: a tmp dir)")
    args = parser.parse_args(argv)
    way = "consumer receive + ack" if args.consumer else "get + ack"
    print(f"{way}, fsync=never, at most {args.limit:g} s a process")
    for each in args.each:
        for processes in args.processes:
            print(_case(processes, each, args.limit, args.consumer, args.dir))
            print(_case(1, processes * each, args.limit, args.consumer, args.dir) + "  (alone)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
