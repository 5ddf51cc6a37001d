"""Disk work off the loop: a client's PUBLISHes that must be on disk before they are answered.

Invariants:
- A job's `work` runs in a worker thread and its `then` on the loop, with the work's result
  (or the BoxMQError it raised): the answer to the client is only sent once the work is done.
- `run_all` keeps the jobs' order; a run of neighbouring publications is written with one
  commit (one flush under fsync=always). If that run fails, nothing of it was committed and
  each job is tried alone, so each gets its own answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from boxmq.client.topics import Publication, Topics
from boxmq.errors import BoxMQError

__all__ = ["Job", "run_all"]


@dataclass(frozen=True, slots=True)
class Job:
    """Disk work for one packet (in a worker thread), then its answer (on the loop)."""

    work: Callable[[], object]
    then: Callable[[object], None]
    publication: Publication | None = None  # may be done with its neighbours, in one commit


def run_all(topics: Topics, jobs: list[Job]) -> list[object]:
    """In a worker thread: each job's result, in order."""
    results: list[object] = [None] * len(jobs)
    start = 0
    while start < len(jobs):
        end = start
        while end < len(jobs) and jobs[end].publication is not None:
            end += 1
        if end - start > 1:
            run = [job.publication for job in jobs[start:end] if job.publication is not None]
            try:
                topics.publish_many(run)
            except BoxMQError:  # nothing was committed: each alone, each with its own answer
                for index in range(start, end):
                    results[index] = _attempt(jobs[index])
            start = end
        else:
            results[start] = _attempt(jobs[start])
            start += 1
    return results


def _attempt(job: Job) -> object:
    try:
        return job.work()
    except BoxMQError as error:
        return error
