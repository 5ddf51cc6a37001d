"""Disk work for a client's packets, done in order without blocking the loop on a flush.

Invariants:
- `run_all` tells its `done`, on the loop and never within its own call, each job's result
  (or the BoxMQError it raised) in the jobs' order, once all of them are done; the caller
  answers the client only then.
- A run of neighbouring publications is written by the loop's own thread, with one commit
  (one flush under fsync=always, made by the committer's thread while the loop goes on). If
  the run holds a bad message, nothing of it was written, and each job is tried alone.
  Under fsync=always, `ready` is told on the loop once a run's messages are in their
  dropboxes, before the commit's last flush: subscribers may take them meanwhile.
- A run of neighbouring jobs with the same `together` function (the exactly-once intake's
  stores, its deliveries at PUBREL) is done by one call of it in a worker thread, with one
  commit for them all: a QoS 2 window costs a flush, not a flush per message.
- Any other disk work (a retained message, a record) runs in a worker thread, since it waits
  for its own commit.
- A job the file system failed (ENOSPC, EIO, EROFS, EMFILE, ...) gets a StoreFailed as its
  result, never an OSError, and nothing of its message is kept: each one is answered.
- A job whose work raised anything else (a bug) gets a `WorkFailed`, a StoreFailed, and
  the jobs after it are done as usual; a run done by one call fails whole, and a bug in
  this module's own steps fails every job not done yet. Every job is answered, so no client
  waits for ever for its PUBACK, PUBREC, PUBCOMP or SUBACK. The bug is logged once, with
  its traceback.

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
from concurrent.futures import Executor, Future
from functools import partial
from typing import Any, NamedTuple

from boxmq.client.publishing import Publication
from boxmq.client.topics import Topics
from boxmq.core.durations import spelled
from boxmq.errors import BoxMQError, StoreFailed, store_failure
from boxmq.mqtt.drops import DropLog

__all__ = [
    "Job",
    "StoreFailureLog",
    "Together",
    "WorkFailed",
    "log_store_failures",
    "no_answer",
    "run_all",
    "run_now",
]

log = logging.getLogger("boxmq.mqtt")


Together = tuple[Callable[[list[Any]], list[object]], Any]
"""A job's part of work done for several at once: the function, called with its neighbours'
items in order, returns each one's result in order (an OSError of one is its result); and
this job's item."""


class WorkFailed(StoreFailed):
    """Disk work that raised what no store failure raises (a bug, logged with its traceback
    where it happened): answered as a store failure, so that its client is told it was not
    stored (a v5 PUBACK or PUBREC 0x80; a 3.1.1 connection closed, so that its client sends
    it again) instead of waiting for an answer that never comes. Whether some of it was
    written is not known: at worst the client's next try is a duplicate (QoS 1), or is
    answered as a repeat (the exactly-once intake)."""

    def __init__(self, error: BaseException) -> None:
        self.errno = 0
        self.path = None
        BoxMQError.__init__(self, f"the server failed unexpectedly ({type(error).__name__})")


class Job(NamedTuple):
    """Disk work for one packet, then its answer (on the loop). `work` None: nothing to write,
    the job only keeps its answer in order behind the others. A named tuple: one is made per
    PUBLISH, and a frozen dataclass's `__init__` costs twice as much."""

    work: Callable[[], object] | None
    then: Callable[[object], None]
    publication: Publication | None = None  # may be done with its neighbours, in one commit
    together: Together | None = None  # done with its neighbours of the same function instead
    logs: bool = False  # its `then` logs a refusal itself (a SUBSCRIBE's, naming the filter)
    answered: bool = True  # a refusal reaches the client; not a QoS 0 PUBLISH's (no ack)


def no_answer(_: object) -> None:
    """A job's `then` when there is nothing to answer: it writes a record, or only keeps a
    place in line (batches.py)."""


Results = Callable[[list[object]], None]
"""Told once, on the loop: each job's result in order (a bug's jobs: a `WorkFailed`)."""


def run_all(
    topics: Topics,
    jobs: Sequence[Job],
    pool: Executor,
    done: Results,
    ready: Callable[[], None] | None = None,
) -> None:
    """On the loop: start `jobs`; `done` gets each one's result, in order, on the loop. Told
    by callbacks, not through a task: a batch costs the loop one iteration once its commit
    is made, not three (docs/benchmarks.md, "The share group's loop"). `ready` is told on
    the loop whenever a run of publications may be taken by its subscribers, before its
    commit is done (under fsync=always only)."""
    run = _Run(asyncio.get_running_loop(), topics, jobs, pool, done, ready)
    run.go(0)
    run.begun = False


class _Run:
    """One batch of jobs, a run of neighbouring ones at a time, each begun once the one before
    is done."""

    __slots__ = ("_done", "_jobs", "_loop", "_pool", "_ready", "_results", "_topics", "begun")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        topics: Topics,
        jobs: Sequence[Job],
        pool: Executor,
        done: Results,
        ready: Callable[[], None] | None,
    ) -> None:
        self._loop = loop
        self._topics = topics
        self._jobs = jobs
        self._pool = pool
        self._done = done
        self._ready = ready
        self._results: list[object] = [None] * len(jobs)
        self.begun = True  # in `run_all` still: `done` is told on the loop's next turn

    def go(self, start: int) -> None:
        """Begin with the run at `start` (or finish). A bug here fails the jobs not done
        yet (`_failed`), and the batch ends."""
        try:
            jobs = self._jobs
            while start < len(jobs):
                kind = _kind(jobs[start])
                end = start + 1
                while end < len(jobs) and _kind(jobs[end]) == kind:
                    end += 1
                if kind is _PUBLICATION:
                    if self._publish(start, end):
                        return  # goes on once committed
                elif kind is not None:
                    self._together_in_pool(start, end)
                    return  # goes on once done
                elif any(job.work is not None for job in jobs[start:end]):
                    self._each_in_pool(start, end)
                    return  # goes on once done
                start = end
        except Exception as error:
            self._failed(start, len(self._jobs), error)
        self._finish()

    def _failed(self, start: int, end: int, error: Exception) -> None:
        """A bug met by jobs start..end: each of them is answered with a `WorkFailed`. It
        skipped the whole batch's answers, and their clients waited for ever."""
        self._results[start:end] = [_unexpected(error, end - start)] * (end - start)

    def _finish(self) -> None:
        if self.begun:  # never inside the caller's own call
            self._loop.call_soon(self._done, self._results)
        else:
            self._done(self._results)

    def _publish(self, start: int, end: int) -> bool:
        """Write the run here; False if it is already answered (a failed write), True if it
        goes on from `_committed` or, for a bad message, from each job tried alone."""
        run = [job.publication for job in self._jobs[start:end] if job.publication is not None]
        loop = self._loop

        def tell(errors: list[OSError | None]) -> None:  # from the committer's thread, or here
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody left to answer
                loop.call_soon_threadsafe(self._committed, start, end, errors)

        ready = self._ready

        def renamed() -> None:  # from the committer's thread
            assert ready is not None
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(ready)

        try:
            then = None if ready is None else renamed
            self._topics.publish_many_then(run, tell, then, reserved=True)  # bx_v5: boxmq's
        except BoxMQError:  # nothing was written: each alone, each with its own answer
            self._each_in_pool(start, end)
        except OSError as error:  # a write failed: nothing was kept
            self._results[start:end] = [store_failure(error)] * (end - start)
            return False
        return True

    def _committed(self, start: int, end: int, errors: list[OSError | None]) -> None:
        self._results[start:end] = [None if e is None else store_failure(e) for e in errors]
        self.go(end)

    def _each_in_pool(self, start: int, end: int) -> None:
        self._in_pool(start, end, partial(_attempt_each, self._jobs[start:end]))

    def _together_in_pool(self, start: int, end: int) -> None:
        together = [job.together for job in self._jobs[start:end] if job.together is not None]
        do = together[0][0]  # the run's jobs share it
        self._in_pool(start, end, partial(_attempt_together, do, [item for _, item in together]))

    def _in_pool(self, start: int, end: int, work: Callable[[], list[object]]) -> None:
        """Run `work` (the results of jobs start..end) in a worker; go on, on the loop, after."""
        loop = self._loop
        future = self._pool.submit(work)

        def finished(future: Future[list[object]]) -> None:  # in the worker thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody left to answer
                loop.call_soon_threadsafe(self._pooled, start, end, future)

        future.add_done_callback(finished)

    def _pooled(self, start: int, end: int, future: Future[list[object]]) -> None:
        try:
            self._results[start:end] = future.result()
        except Exception as error:  # a bug in a job's work: the runs after it go on
            self._failed(start, end, error)
        self.go(end)


def run_now(job: Job) -> None:
    """Do `job` here and now (on the loop: only for work that never waits for a flush), its
    result as `run_all` would give it."""
    [result] = _attempt_each([job])
    job.then(result)


_PUBLICATION = object()  # the kind of a job with a publication (Topics.publish_many_then)


def _kind(job: Job) -> object:
    """Which neighbours a job is done with: a publication with publications, a `together`
    with those of the same function, any other (None) one by one."""
    if job.publication is not None:
        return _PUBLICATION
    return None if job.together is None else job.together[0]


def _attempt_together(do: Callable[[list[Any]], list[object]], items: list[Any]) -> list[object]:
    """In a worker thread: each item's result, as `_attempt_each` gives a job's."""
    try:
        results = do(items)
    except BoxMQError as error:
        return [error] * len(items)
    except OSError as error:
        return [store_failure(error)] * len(items)
    except Exception as error:  # a bug
        return [_unexpected(error, len(items))] * len(items)
    return [store_failure(r) if isinstance(r, OSError) else r for r in results]


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
        except Exception as error:  # a bug: this job alone, the next ones are done
            results.append(_unexpected(error, 1))
    return results


def _unexpected(error: Exception, jobs: int) -> WorkFailed:
    """The answer of `jobs` job(s) whose work raised `error` (a bug), logged here with its
    traceback: once, however many jobs it fails."""
    log.error(
        "disk work failed unexpectedly, %d job(s) answered as not stored: %r",
        jobs,
        error,
        exc_info=error,
    )
    return WorkFailed(error)


def _failed(jobs: Sequence[Job], results: Sequence[object]) -> list[tuple[Job, StoreFailed]]:
    """The jobs of a batch the file system refused, but those that log their own refusal
    (`Job.logs`), with what each was told."""
    if not any(isinstance(result, StoreFailed) for result in results):
        return []  # nothing more per job in a batch the disk took
    return [
        (job, result)
        for job, result in zip(jobs, results, strict=True)
        if isinstance(result, StoreFailed) and not job.logs
    ]


class StoreFailureLog:
    """The batches the file system refused, told sparingly. A full disk refuses at once, so a
    flood of publications comes in batches of 1 to 20 packets, and one line a batch was 33
    ERROR lines for 200 publications (found driving `boxmq serve` on a full tmpfs). A client's
    first refused batch is told as `log_store_failures` tells it; the refused packets of its
    batches after it are counted and told as one line per interval, with the last refusal,
    while they go on (drops.py), and at close (`tell`, `now` None)."""

    def __init__(self) -> None:
        self._counts: DropLog[str] = DropLog()
        self._last: dict[str, StoreFailed] = {}  # the last refusal counted, by client

    def failed(self, who: str, jobs: Sequence[Job], results: Sequence[object], now: float) -> None:
        """A batch of `who` is done: its refusals told, or counted."""
        failed = _failed(jobs, results)
        if not failed:
            return
        if self._counts.dropped(who, now=now, count=len(failed)):
            log_store_failures(who, jobs, results)
        else:
            self._last[who] = failed[-1][1]

    def clock_stepped(self, by: float) -> None:
        """The wall clock was stepped `by` seconds: the counts' intervals move (DropLog.shift)."""
        self._counts.shift(by)

    def tell(self, *, now: float | None = None) -> None:
        """Log the refusals counted in the intervals over by `now` (None: all)."""
        counts = self._counts
        for summary in counts.summaries(now=now):
            log.error(
                "%s: %d more packet(s) not stored in the last %s (the client told of each "
                "but QoS 0 ones, which only the subscribers served from memory got): %s",
                summary.key,
                summary.dropped,
                spelled(counts.interval),
                self._last.pop(summary.key),
            )


def log_store_failures(who: str, jobs: Sequence[Job], results: Sequence[object]) -> None:
    """One line per batch, however many of its messages the file system refused: a full
    disk under a flood of publications must not flood the log too. The refusals of jobs
    that log their own (`Job.logs`) are left to them: one line each, not two."""
    failed = _failed(jobs, results)
    if not failed:
        return
    quiet = sum(1 for job, _ in failed if not job.answered)
    # A QoS 0 PUBLISH has no acknowledgement to refuse: its sender never hears of it, and
    # the subscribers served from memory get it all the same (publishing.py).
    if not quiet:
        told = "the client is told"
    elif quiet == len(failed):
        told = "QoS 0 PUBLISH(es), the client not told (no acknowledgement), sent only to the "
        told += "subscribers served from memory"
    else:
        told = f"the client is told of {len(failed) - quiet}; the other {quiet} QoS 0 "
        told += "PUBLISH(es), not told (no acknowledgement), sent only to the subscribers "
        told += "served from memory"
    log.error(
        "%s: %d of %d packet(s) of a batch not stored, %s: %s",
        who,
        len(failed),
        len(results),
        told,
        failed[0][1],
    )
