"""Disk work for a client's packets, done in order without blocking the loop on a flush.

Invariants:
- `run_all` returns each job's result (or the BoxMQError it raised) in the jobs' order, once
  all of them are done; the caller answers the client only then.
- A run of neighbouring publications is written by the loop's own thread, with one commit
  (one flush under fsync=always, made by the committer's thread while the loop goes on). If
  the run holds a bad message, nothing of it was written, and each job is tried alone.
- Any other disk work (the exactly-once intake, a retained message, a PUBREL) runs in a
  worker thread, since it waits for its own commit.
- A job the file system failed (ENOSPC, EIO, EROFS, EMFILE, ...) gets a StoreFailed as its
  result, never an OSError, and nothing of its message is kept: each one is answered.

Why the loop writes: when a worker thread wrote the publications, it and the loop (which claims,
reads and settles the same messages for their subscribers) traded the interpreter lock at every
system call, and a share group spent more time waiting for the lock than writing
(docs/benchmarks.md, "The loop writes its clients' publications").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from boxmq.client.topics import Publication, Topics
from boxmq.errors import BoxMQError, StoreFailed, store_failure

__all__ = ["Job", "log_store_failures", "run_all", "run_now"]

log = logging.getLogger("boxmq.mqtt")


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
                errors = await _publish(loop, topics, run)
            except BoxMQError:  # nothing was written: each alone, each with its own answer
                results[start:end] = await loop.run_in_executor(pool, _attempt_each, chunk)
            except OSError as error:  # a write failed: nothing was kept
                results[start:end] = [store_failure(error)] * len(chunk)
            else:
                results[start:end] = [None if e is None else store_failure(e) for e in errors]
        elif any(job.work is not None for job in chunk):
            results[start:end] = await loop.run_in_executor(pool, _attempt_each, chunk)
        start = end
    return results


async def _publish(
    loop: asyncio.AbstractEventLoop, topics: Topics, run: list[Publication]
) -> list[OSError | None]:
    """Write `run` here; once the committer says it is durable, each message's OSError or
    None. A bad message (BoxMQError) or a failed write (OSError) raises, nothing kept."""
    committed: asyncio.Future[list[OSError | None]] = loop.create_future()

    def settle(errors: list[OSError | None]) -> None:
        if not committed.done():
            committed.set_result(errors)

    def tell(errors: list[OSError | None]) -> None:  # from the committer's thread, or from here
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody left to answer
            loop.call_soon_threadsafe(settle, errors)

    topics.publish_many_then(run, tell)
    return await committed


def run_now(job: Job) -> None:
    """Do `job` here and now (on the loop: only for work that never waits for a flush), its
    result as `run_all` would give it."""
    [result] = _attempt_each([job])
    job.then(result)


def _attempt_each(jobs: Sequence[Job]) -> list[object]:
    """In a worker thread (or, from `run_now`, on the loop)."""
    results: list[object] = []
    for job in jobs:
        try:
            results.append(None if job.work is None else job.work())
        except BoxMQError as error:
            results.append(error)
        except OSError as error:
            results.append(store_failure(error))
    return results


def log_store_failures(who: str, results: Sequence[object]) -> None:
    """One line per batch, however many of its messages the file system refused: a full
    disk under a flood of publications must not flood the log too."""
    failures = [result for result in results if isinstance(result, StoreFailed)]
    if failures:
        log.error(
            "%s: %d of %d packet(s) of a batch not stored, the client is told: %s",
            who,
            len(failures),
            len(results),
            failures[0],
        )
