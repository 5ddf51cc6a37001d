"""A batch of disk jobs (mqtt/disk.py): neighbours done together, results in order."""

from __future__ import annotations

import asyncio
import errno
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import boxmq
from boxmq.errors import InvalidArgument, StoreFailed, store_failure
from boxmq.mqtt.disk import Job, log_store_failures, run_all


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


def test_a_batch_line_says_which_refusals_the_client_is_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It said "the client is told" of QoS 0 PUBLISHes too, whose sender hears nothing."""
    full = store_failure(OSError(errno.ENOSPC, "No space left on device"))
    qos1, qos0 = Job(None, print), Job(None, print, answered=False)
    with caplog.at_level(logging.ERROR, logger="boxmq.mqtt"):
        log_store_failures("client c", [qos1, qos0, qos0], [full, full, None])
        log_store_failures("client c", [qos0, qos0, qos1], [full, full, None])
        log_store_failures("client c", [qos1, qos1], [full, None])
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith(
        "client c: 2 of 3 packet(s) of a batch not stored, the client is told of 1; the "
        "other 1 QoS 0 PUBLISH(es), not told (no acknowledgement), sent only to the "
        "subscribers served from memory: "
    )
    assert lines[1].startswith(
        "client c: 2 of 3 packet(s) of a batch not stored, QoS 0 PUBLISH(es), the client not "
        "told (no acknowledgement), sent only to the subscribers served from memory: "
    )
    assert lines[2].startswith(
        "client c: 1 of 2 packet(s) of a batch not stored, the client is told: "
    )
