"""A client's disk batches (mqtt/batches.py): when a batch begins, and what it gathers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import boxmq
from boxmq.errors import StoreFailed
from boxmq.mqtt.batches import Batches
from boxmq.mqtt.clients import Client
from boxmq.mqtt.connection import Connection
from boxmq.mqtt.disk import Job, WorkFailed
from boxmq.mqtt.peer_address import PeerAddress
from boxmq.mqtt.reasons import ReasonCode, reason_for

GATHER = 0.05  # long enough that a test's own steps all happen within it


class _Link:
    """A client's socket as Batches sees it."""

    def __init__(self) -> None:
        self.connection = Connection(
            max_packet_size=1 << 20, receive_maximum=10, topic_alias_maximum=0, now=0.0
        )
        self.peer = PeerAddress("test")
        self.congested = False
        self.identity: str | None = None
        self.quick_acks = 0

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def acknowledge_reads(self) -> None:
        self.quick_acks += 1


class _Run:
    """Batches over a real box; `answers` in the order given, `batches` how many ended."""

    def __init__(self, batches_of: Callable[[Callable[[Client], None]], Batches]) -> None:
        self.answers: list[int] = []
        self.batches = 0
        self.ended: list[Client] = []  # told to `after`, a batch each
        self.link = _Link()
        self.client = Client(self.link, 0.0)
        self.under_test = batches_of(self._ended)

    def _ended(self, client: Client) -> None:
        self.batches += 1
        self.ended.append(client)

    def read(self, *numbers: int) -> None:
        """What the broker does at the end of a read that brought disk work."""
        for n in numbers:
            self.client.jobs.append(Job(None, self._answer(n)))
        self.under_test.received(self.client)

    def begun(self) -> bool:
        """A batch of the client is running."""
        return self.client.tail is not None

    def _answer(self, n: int) -> Callable[[object], None]:
        def then(_result: object) -> None:
            self.answers.append(n)

        return then


Test = Callable[[_Run], Coroutine[None, None, None]]


def _run(tmp_path: Path, test: Test, *, fsync: str, gather: float = GATHER) -> None:
    box = boxmq.open(tmp_path / "root", fsync=fsync)
    pool = ThreadPoolExecutor(1)
    try:
        run = _Run(lambda after: Batches(box, pool, after, gather=gather))
        asyncio.run(test(run))
    finally:
        pool.shutdown()
        box.close()


async def _settled(run: _Run, batches: int) -> None:
    # A batch ends after an fsync: 20 s, not 2, for a disk shared with a loaded machine.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if run.batches >= batches and run.client.tail is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{run.batches} batch(es) ended, not {batches}")


def test_a_client_not_seen_sending_during_a_commit_begins_at_once(tmp_path: Path) -> None:
    async def test(run: _Run) -> None:
        run.read(1)
        assert run.client.tail is not None  # begun within the read: no wait
        await _settled(run, 1)
        assert run.answers == [1]
        assert not run.client.gathers

    _run(tmp_path, test, fsync="always")


def test_what_comes_during_a_batch_begins_at_its_end_and_marks_the_client(
    tmp_path: Path,
) -> None:
    async def test(run: _Run) -> None:
        run.read(1)
        run.read(2, 3)  # the first batch is running: these wait for its end
        await _settled(run, 2)
        assert run.answers == [1, 2, 3]
        assert run.client.gathers

    _run(tmp_path, test, fsync="always")


def test_a_gathering_client_waits_for_its_next_read_and_begins_with_it(tmp_path: Path) -> None:
    async def test(run: _Run) -> None:
        run.client.gathers = True
        run.read(1)
        assert not run.begun()  # waiting for the rest
        run.read(2, 3)
        assert run.begun()  # the rest came: begun at once, not after the wait
        await _settled(run, 1)
        assert (run.batches, run.answers) == (1, [1, 2, 3])  # one batch, one commit
        assert run.client.gathers  # the wait was worth it: the next one waits too
        assert run.ended == [run.client]  # `after` is told whose batch ended

    _run(tmp_path, test, fsync="always")


def test_a_wait_that_brings_nothing_ends_the_gathering(tmp_path: Path) -> None:
    async def test(run: _Run) -> None:
        run.client.gathers = True
        run.read(1)
        await _settled(run, 1)
        assert run.answers == [1]
        assert not run.client.gathers
        run.read(2)  # a lone message again: no wait
        assert run.client.tail is not None
        await _settled(run, 2)

    _run(tmp_path, test, fsync="always")


def test_shutting_down_begins_a_waiting_batch_at_once(tmp_path: Path) -> None:
    async def test(run: _Run) -> None:
        run.client.gathers = True
        run.read(1)
        await asyncio.wait_for(run.under_test.wait_all(), timeout=5)  # the wait is 60 s
        assert run.answers == [1]

    _run(tmp_path, test, fsync="always", gather=60.0)


def test_reads_are_acknowledged_at_once_under_always_only(tmp_path: Path) -> None:
    async def test(run: _Run) -> None:
        run.read(1)
        await _settled(run, 1)
        assert run.link.quick_acks == 1

    _run(tmp_path / "always", test, fsync="always")


def test_without_flushes_nothing_waits_to_be_gathered(tmp_path: Path) -> None:
    async def test(run: _Run) -> None:
        run.client.gathers = True
        run.read(1)
        assert run.client.tail is not None  # a commit that flushes nothing is not waited for
        await _settled(run, 1)
        assert run.link.quick_acks == 0

    _run(tmp_path, test, fsync="never")


def test_an_answer_that_raises_does_not_starve_the_later_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A `then` that raised (a bug) skipped the batch's later answers: their messages were
    not routed, their numbers in a retained window never ended, and their clients waited
    for their PUBACKs. The others are given; the failure is logged once, with its
    traceback."""

    async def test(run: _Run) -> None:
        def broken(_result: object) -> None:
            raise RuntimeError("a bug in an answer")

        run.client.jobs.append(Job(None, run._answer(1)))
        run.client.jobs.append(Job(None, broken))
        run.read(3, 4)
        await _settled(run, 1)
        assert run.answers == [1, 3, 4]

    caplog.set_level(logging.ERROR, logger="boxmq.mqtt")
    _run(tmp_path, test, fsync="never")
    [record] = [r for r in caplog.records if r.name == "boxmq.mqtt"]
    assert record.getMessage() == (
        "answering disk work for test failed (1 of 4 answers): RuntimeError('a bug in an answer')"
    )
    assert record.exc_info is not None
    assert record.exc_info[1] is not None
    assert str(record.exc_info[1]) == "a bug in an answer"


def test_disk_work_that_raises_unexpectedly_answers_each_of_its_jobs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job's store call that raised what no store failure raises (a bug: not an OSError,
    not a BoxMQError) failed the whole batch: no job's answer ran, so its clients never got
    their PUBACK or PUBREC and waited for ever. Each job is answered: those the bug met
    with a WorkFailed (a StoreFailed: a v5 client gets 0x80, a 3.1.1 one is closed and
    sends again, publishing.py), the others with their own results; the bug is logged with
    its traceback, once per call it broke."""
    answers: list[tuple[int, object]] = []

    def answer(n: int) -> Callable[[object], None]:
        return lambda result: answers.append((n, result))

    def broken() -> object:
        raise RuntimeError("a bug in a store call")

    def broken_together(items: list[object]) -> list[object]:
        raise KeyError("a bug in a call for several")

    async def test(run: _Run) -> None:
        run.client.jobs += [
            Job(lambda: "stored 1", answer(1)),
            Job(broken, answer(2)),
            Job(lambda: "stored 3", answer(3)),
            Job(None, answer(4), None, (broken_together, 4)),
            Job(None, answer(5), None, (broken_together, 5)),
            Job(lambda: "stored 6", answer(6)),
        ]
        run.under_test.received(run.client)
        await _settled(run, 1)

    caplog.set_level(logging.ERROR, logger="boxmq.mqtt")
    _run(tmp_path, test, fsync="never")
    assert [n for n, _ in answers] == [1, 2, 3, 4, 5, 6]
    results = dict(answers)
    assert [results[n] for n in (1, 3, 6)] == ["stored 1", "stored 3", "stored 6"]
    for n in (2, 4, 5):
        failed = results[n]
        assert isinstance(failed, WorkFailed)
        assert isinstance(failed, StoreFailed)
        assert reason_for(failed) is ReasonCode.UNSPECIFIED_ERROR  # a v5 PUBACK 0x80
    assert str(results[2]) == "the server failed unexpectedly (RuntimeError)"
    bugs = [r for r in caplog.records if r.exc_info is not None and r.exc_info[1] is not None]
    assert [type(r.exc_info[1]) for r in bugs if r.exc_info] == [RuntimeError, KeyError]
