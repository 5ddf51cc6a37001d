"""A batch of disk jobs (mqtt/disk.py): neighbours done together, results in order."""

from __future__ import annotations

import asyncio
import errno
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boxmq
from boxmq.errors import InvalidArgument, StoreFailed
from boxmq.mqtt.disk import Job, run_all


def test_neighbouring_jobs_of_one_function_are_done_by_one_call(tmp_path: Path) -> None:
    calls: list[list[int]] = []

    def doubled(items: list[int]) -> list[object]:  # one commit for all, in the real ones
        calls.append(items)
        return [OSError(errno.EIO, "I/O error") if n == 3 else 2 * n for n in items]

    def refused(items: list[int]) -> list[object]:
        raise InvalidArgument("a bug of the caller")

    jobs = [
        *(Job(None, print, None, (doubled, n)) for n in (1, 2, 3)),
        Job(lambda: "alone", print),
        Job(None, print, None, (doubled, 4)),
        Job(None, print, None, (refused, 5)),
        Job(None, print, None, (refused, 6)),
    ]

    async def run() -> list[object] | BaseException:
        loop = asyncio.get_running_loop()
        told: asyncio.Future[list[object] | BaseException] = loop.create_future()
        with boxmq.open(tmp_path, fsync="never") as box, ThreadPoolExecutor(2) as pool:
            run_all(box.topics, jobs, pool, told.set_result)
            return await asyncio.wait_for(told, timeout=10)

    results = asyncio.run(run())
    assert isinstance(results, list)
    assert results[:2] == [2, 4]
    assert isinstance(results[2], StoreFailed)  # an OSError is told as the store's failure
    assert results[3:5] == ["alone", 8]
    assert [type(r) for r in results[5:]] == [InvalidArgument, InvalidArgument]
    assert calls == [[1, 2, 3], [4]]  # the job between them splits the run
