"""The embedded API where the file system refuses a move (a read-only file system, EROFS,
made for real: a small tmpfs remounted ro, tests/diskfull.py): the call raises the OSError,
no message is lost or moved, and everything goes on once the disk takes changes again.
The full disk's tests are in test_cli.py and mqtt/test_mqtt_disk_full.py (and one here: a
spare's refusal named)."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.diskfull import small_disk

import boxmq


def test_a_receive_the_disk_refuses_raises_and_the_consumer_goes_on_once_it_takes_changes(
    tmp_path: Path,
) -> None:
    """The claim's rename failed after the engine had leased the message: the consumer's
    slots stayed taken by messages with no file in processing/, so every later receive came
    back empty, and closing the box raised KeyError."""
    # spares=0: a spare's file kept open for writing makes the remount ro EBUSY
    with (
        small_disk(tmp_path / "disk") as disk,
        boxmq.open(disk.path / "data", fsync="never", spares=0) as box,
    ):
        jobs = box.queue("jobs")
        bodies = [b"one", b"two", b"three", b"four"]
        for body in bodies:
            jobs.put(body)
        # Three claims at a time: those after the refused one were never tried either.
        with jobs.consumer("c1", max_in_flight=3) as consumer:
            with disk.read_only(), pytest.raises(OSError, match="Read-only") as refused:
                consumer.receive(timeout=1)
            assert refused.value.errno == errno.EROFS
            assert jobs.counts().ready == 4  # nothing moved
            got = []
            while (message := consumer.receive(timeout=1)) is not None:
                assert message.delivery_count == 1
                got.append(message.body)
                message.ack()
            assert got == bodies
        assert (jobs.counts().ready, jobs.counts().locked, jobs.counts().done) == (0, 0, 4)


def test_an_ack_the_disk_refuses_raises_and_can_be_tried_again(tmp_path: Path) -> None:
    """The engine ended the lease before the rename into processed/ failed: the message
    stayed locked on disk, and the ack tried again said "no such message" (ItemNotFound)
    until its lock ran out and it was delivered again."""
    with (
        small_disk(tmp_path / "disk") as disk,
        boxmq.open(disk.path / "data", fsync="never", spares=0) as box,
    ):
        jobs = box.queue("jobs")
        jobs.put("one")
        with jobs.consumer("c1") as consumer:
            message = consumer.receive(timeout=1)
            assert message is not None
            with disk.read_only(), pytest.raises(OSError, match="Read-only"):
                message.ack()
            assert (jobs.counts().locked, jobs.counts().done) == (1, 0)
            message.ack()
        assert (jobs.counts().locked, jobs.counts().done) == (0, 1)


def test_a_close_the_disk_refuses_closes_everything_then_raises(tmp_path: Path) -> None:
    """The first queue's release that failed ended Box.close there: a thread waiting in
    another queue's receive waited forever, never told Closed."""
    with small_disk(tmp_path / "disk") as disk:
        box = boxmq.open(disk.path / "data", fsync="never", spares=0)
        jobs, idle = box.queue("jobs"), box.queue("idle")
        jobs.put("held")
        holder = jobs.consumer("c1")
        assert holder.receive(timeout=1) is not None
        waiting = idle.consumer("c2")
        told: list[BaseException] = []

        def wait() -> None:
            try:
                waiting.receive(timeout=30)
            except boxmq.Closed as error:
                told.append(error)

        thread = threading.Thread(target=wait)
        thread.start()
        with disk.read_only(), pytest.raises(OSError, match="Read-only"):
            box.close()
        thread.join(timeout=5)
        assert not thread.is_alive()
        assert len(told) == 1
        with pytest.raises(boxmq.Closed):
            jobs.put("after")
        assert jobs.counts().locked == 1  # released at its deadline, by any process's sweep


def test_a_put_or_publish_a_full_disk_refuses_in_a_spare_names_where_it_was_going(
    tmp_path: Path,
) -> None:
    """Written into a spare file (one an ack gave back), the refusal named the spare,
    '<root>/.spare/<process>+0/3: No space left', which says nothing of the queue."""
    with (
        small_disk(tmp_path / "disk") as disk,
        boxmq.open(disk.path / "data", fsync="never", keep_processed=False) as box,
    ):
        root = disk.path / "data"
        jobs = box.queue("jobs")
        box.subscribe("t/#", "k1").close()  # kept: a publish to t/a is stored for it
        for n in range(4):
            jobs.put(f"small {n}")
        with jobs.consumer("c1", max_in_flight=4) as consumer:
            while (message := consumer.receive(timeout=0.5)) is not None:
                message.ack()  # its file kept as a spare
        disk.fill()
        big = b"x" * 60_000
        sends: list[tuple[Callable[[], object], Path]] = [
            (lambda: jobs.put(big), root / "jobs" / "working"),
            (lambda: box.publish("t/a", big), root / "topic-root" / ".incoming"),
        ]
        for send, where in sends:
            with pytest.raises(OSError, match="No space left") as refused:
                send()
            assert refused.value.errno == errno.ENOSPC
            assert refused.value.filename.startswith(f"{where}/"), refused.value.filename
        disk.free()
        jobs.put("after")
        assert jobs.counts().ready == 1
