"""The embedded API where the file system refuses a move (a read-only file system, EROFS,
made for real: a small tmpfs remounted ro, tests/diskfull.py): the call raises the OSError,
no message is lost or moved, and everything goes on once the disk takes changes again.
The full disk's tests are in test_cli.py and mqtt/test_mqtt_disk_full.py (and here: a
spare's refusal named, and a sweep on a full ext4)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from harness.output import read_line
from tests.diskfull import small_disk, small_ext4_disk
from tests.waiting import waited

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


# Receives the six messages of the queue jobs on argv[1] (bodies "0" to "5"), then acks the
# one each line of its stdin names, saying "acked N" or "refused N <errno>"; its test kills it.
_ACK_ON_REQUEST = """
import sys
import boxmq
with boxmq.open(sys.argv[1], fsync="never", spares=0) as box:
    consumer = box.queue("jobs").consumer("c", max_in_flight=6, lock_timeout=600)
    held = {}
    while len(held) < 6:
        message = consumer.receive(timeout=10)
        held[message.body.decode()] = message
    print("holding", flush=True)
    for line in sys.stdin:
        body = line.strip()
        try:
            held[body].ack()
        except OSError as error:
            print("refused", body, error.errno, flush=True)
        else:
            print("acked", body, flush=True)
"""


@pytest.mark.parametrize("killed", ["read-only", "writable-again"])
def test_a_consumer_killed_between_an_ack_the_disk_refused_and_its_retry_loses_nothing(
    tmp_path: Path, killed: str
) -> None:
    """An ack the disk refused keeps its lease in memory until the move is made (tried again):
    SIGKILLed in between, while the disk is still read-only or once it takes changes again,
    the process leaves the message locked to a dead process, and the next consumer takes it
    (once), as every message whose ack never returned; an ack that returned, at first or when
    tried again, is done and never delivered again."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        with boxmq.open(root, fsync="never") as box:
            box.queue("jobs").put_many([str(i).encode() for i in range(6)])
        consumer = subprocess.Popen(
            [sys.executable, "-c", _ACK_ON_REQUEST, str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=os.environ.copy(),
            text=True,
        )
        assert consumer.stdin is not None
        assert consumer.stdout is not None

        def ack(body: str) -> str:
            assert consumer.stdin is not None
            assert consumer.stdout is not None
            consumer.stdin.write(body + "\n")
            consumer.stdin.flush()
            return read_line(consumer.stdout, 30).strip()

        try:
            assert read_line(consumer.stdout, 30).strip() == "holding"
            assert ack("0") == "acked 0"
            with disk.read_only():
                assert ack("1") == f"refused 1 {errno.EROFS}"
                assert ack("2") == f"refused 2 {errno.EROFS}"
                if killed == "read-only":
                    consumer.kill()
                    consumer.wait(timeout=10)
            if killed == "writable-again":
                assert ack("2") == "acked 2"  # the same ack, tried again
                consumer.kill()
                consumer.wait(timeout=10)
        finally:
            consumer.kill()
            consumer.wait(timeout=10)
            consumer.stdin.close()
            consumer.stdout.close()
        acked = {"0", "2"} if killed == "writable-again" else {"0"}
        with boxmq.open(root, fsync="never") as box:
            jobs = box.queue("jobs")
            got = []
            with jobs.consumer("rescuer", max_in_flight=6) as rescuer:
                while (message := rescuer.receive(timeout=2)) is not None:
                    got.append(message.body.decode())
                    message.ack()
            assert sorted(got) == sorted({"1", "2", "3", "4", "5"} - acked)  # each once
            counts = jobs.counts()
            assert (counts.ready, counts.locked, counts.done) == (0, 0, 6)


def test_an_ack_that_deletes_on_a_disk_out_of_inodes_frees_one_for_the_next_put(
    tmp_path: Path,
) -> None:
    """A root filled to its last inode before any ack had no `.spare/`, and the ack that
    deletes (keep_processed=False) renames into it: making the folder raised ENOSPC, so
    every ack failed, the messages stayed locked, and the disk stayed full for good."""
    with (
        small_disk(tmp_path / "disk", inodes=64) as disk,
        boxmq.open(disk.path / "data", fsync="never", keep_processed=False) as box,
    ):
        jobs = box.queue("jobs")
        sent = _put_until_full(jobs)
        with jobs.consumer("c1") as consumer:
            first = consumer.receive(timeout=1)
            assert first is not None
            assert first.id == sent[0]
            first.ack()  # no inode for .spare/: the file is deleted instead
            sent.append(jobs.put(b"again"))  # ... which gives the put its inode
            got = [first.id]
            while len(got) < len(sent) and (message := consumer.receive(timeout=1)):
                got.append(message.id)
                message.ack()
        assert sorted(got) == sorted(sent)
        assert jobs.counts().locked == 0


def _put_until_full(queue: boxmq.Queue) -> list[str]:
    """Put small messages until the disk refuses one with ENOSPC: the ids of those sent."""
    sent: list[str] = []
    with pytest.raises(OSError, match="No space left") as full:  # noqa: PT012 (a loop)
        while len(sent) < 1000:
            sent.append(queue.put(b"x%d" % len(sent)))
    assert full.value.errno == errno.ENOSPC
    return sent


def test_a_sweep_whose_moves_a_full_disk_refuses_still_deletes_what_frees_it(
    tmp_path: Path,
) -> None:
    """On ext4 a move into expired/ needs a new block of the folder once its blocks are full
    of names. On a full disk each sweep raised that ENOSPC at the first expired message of
    the first queue it visited, before the purge of its processed/ and before any other
    queue's visit: the files past their retention that would have freed the disk were never
    deleted, and every put was refused until someone deleted files by hand."""
    with (
        small_ext4_disk(tmp_path / "disk") as disk,
        boxmq.open(disk.path / "data", fsync="never", spares=0, processed_retention=2) as box,
    ):
        # Visited in order of name: "a" refuses its expiries, and has nothing to purge.
        expiring, done = box.queue("a"), box.queue("b")
        done.put_many([b"x" * 1000] * 100)
        with done.consumer("c", max_in_flight=100) as consumer:
            while (message := consumer.receive(timeout=0.5)) is not None:
                message.ack()
        # More names than expired/'s first block holds, expired well before processed/ is
        # due for its purge: the sweeps meet the refused moves first.
        for queue in (expiring, done):
            queue.put_many([boxmq.Outgoing(b"e%d" % n, expires_in=0.1) for n in range(40)])
        disk.fill()

        def swept() -> bool:
            """A sweep passed, once every message expired and processed/ was purged."""
            try:
                box.sweep()
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                return False
            counts = [queue.counts() for queue in (expiring, done)]
            return all((c.ready, c.done, c.expired) == (0, 0, 40) for c in counts)

        assert waited(swept, within=10, every=0.1), (expiring.counts(), done.counts())
        done.put(b"room again")
