"""Disk work for a client's packets, done in order without blocking the loop on a flush.

Invariants:
- `run_all` returns each job's result (or the BoxMQError it raised) in the jobs' order, once
  all of them are done; the caller answers the client only then.
- A run of neighbouring publications is written by the loop's own thread, with one commit
  (one flush under fsync=always, made by the committer's thread while the loop goes on). If
  the run holds a bad message, nothing of it was written, and each job is tried alone.
- Any other disk work (the exactly-once intake, a retained message, a PUBREL) runs in a
  worker thread, since it waits for its own commit.

Why the loop writes: when a worker thread wrote the publications, it and the loop (which claims,
reads and settles the same messages for their subscribers) traded the interpreter lock at every
system call, and a share group spent more time waiting for the lock than writing
(docs/benchmarks.md, "The loop writes its clients' publications").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from boxmq.client.topics import Publication, Topics
from boxmq.errors import BoxMQError

__all__ = ["Job", "run_all"]


@dataclass(frozen=True, slots=True)
class Job:
    """Disk work for one packet, then its answer (on the loop). `work` None: nothing to write,
    the job only keeps its answer in order behind the others."""

    work: Callable[[], object] | None
    then: Callable[[object], None]
    publication: Publication | None = None  # may be done with its neighbours, in one commit


async def run_all(topics: Topics, jobs: Sequence[Job], pool: Executor) -> list[object]:
    """On the loop: each job's result, in order."""
    loop = asyncio.get_running_loop()
    results: list[object] = [None] * len(jobs)
    start = 0
    while start < len(jobs):
        batched = jobs[start].publication is not None
        end = start + 1
        while end < len(jobs) and (jobs[end].publication is not None) is batched:
            end += 1
        chunk = jobs[start:end]
        if batched:
            run = [job.publication for job in chunk if job.publication is not None]
            try:
                await _publish(loop, topics, run)
            except BoxMQError:  # nothing was written: each alone, each with its own answer
                results[start:end] = await loop.run_in_executor(pool, _attempt_each, chunk)
        elif any(job.work is not None for job in chunk):
            results[start:end] = await loop.run_in_executor(pool, _attempt_each, chunk)
        start = end
    return results


async def _publish(loop: asyncio.AbstractEventLoop, topics: Topics, run: list[Publication]) -> None:
    """Write `run` here; return once the committer says it is durable (OSError if not)."""
    committed: asyncio.Future[OSError | None] = loop.create_future()

    def settle(error: OSError | None) -> None:
        if not committed.done():
            committed.set_result(error)

    def tell(error: OSError | None) -> None:  # from the committer's thread, or from here
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody left to answer
            loop.call_soon_threadsafe(settle, error)

    topics.publish_many_then(run, tell)
    error = await committed
    if error is not None:
        raise error


def _attempt_each(jobs: Sequence[Job]) -> list[object]:
    """In a worker thread."""
    results: list[object] = []
    for job in jobs:
        try:
            results.append(None if job.work is None else job.work())
        except BoxMQError as error:
            results.append(error)
    return results
