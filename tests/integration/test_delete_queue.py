"""Box.delete_queue: the queue and its messages go, its consumers here are closed, and a queue
made again under the name starts afresh."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import boxmq
from boxmq.clock import ManualClock
from boxmq.errors import Closed, ItemNotFound, UnexpectedRequest


def test_delete_closes_consumers_and_a_new_queue_starts_afresh(box: boxmq.Box) -> None:
    queue = box.queue("jobs")
    queue.put(b"old")
    consumer = queue.consumer("worker")
    assert consumer.receive(timeout=5) is not None
    assert box.delete_queue("jobs") is True
    assert "jobs" not in box.queues()
    with pytest.raises(Closed):
        consumer.receive(timeout=0)
    assert box.delete_queue("jobs") is False
    again = box.queue("jobs")
    fresh = again.consumer("worker")
    again.put(b"new")
    message = fresh.receive(timeout=1)  # watched afresh: no wait for a rescan
    assert message is not None
    assert message.body == b"new"
    fresh.close()


def test_a_queue_made_while_another_thread_deletes_it_is_made_whole_or_not_at_all(
    box: boxmq.Box, root: Path
) -> None:
    # Dropbox made its state folders with makedirs: a delete that took the folder away after
    # its target/ was made had the next makedirs make the folder again around processing/
    # and the rest alone, which every put took for a target/ moved aside (TargetMissing)
    # and delete_queue for no queue (False, the folder left); or box.queue raised the
    # FileNotFoundError of a mkdir whose parent had just gone.
    folder = root / "jobs"
    failures: list[str] = []
    broken: list[list[str]] = []

    def make() -> None:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                box.queue("jobs")
            except Exception as error:  # what the test is looking for
                failures.append(f"{type(error).__name__}: {error}")

    maker = threading.Thread(target=make)
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the two threads take turns within a making, not between
    try:
        maker.start()
        while maker.is_alive():
            box.delete_queue("jobs")
            with contextlib.suppress(FileNotFoundError):
                entries = os.listdir(folder)  # one look: no delete and making between two
                if "processing" in entries and "target" not in entries:
                    broken.append(sorted(entries))
        maker.join()
    finally:
        sys.setswitchinterval(switching)
    assert failures == []
    assert broken == []
    made = (folder / "target").is_dir()
    assert box.delete_queue("jobs") is made
    assert not folder.exists()


def _delete_in_another_process(root: str, name: str) -> None:
    code = "import sys, boxmq\nwith boxmq.open(sys.argv[1]) as b: b.delete_queue(sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, root, name], check=True, timeout=60)


def test_a_settle_of_a_message_got_from_a_queue_another_process_deleted_says_so(
    box: boxmq.Box,
) -> None:
    """A handle of Queue.get (the settles by files) and of a consumer (the engine) whose
    queue another process deleted were told the lock was taken away, or no such message,
    which sent their users looking for who took it."""
    queue = box.queue("jobs")
    queue.put_many([b"a", b"b", b"c", b"d", b"e"])
    got = [queue.get("w") for _ in range(4)]
    consumer = queue.consumer("c")
    received = consumer.receive(timeout=5)
    assert received is not None
    assert all(message is not None for message in got)
    _delete_in_another_process(box.root, "jobs")
    deleted = f"its queue was deleted ({os.path.join(box.root, 'jobs')} is gone)"
    for message, settle in zip(got, ("ack", "unlock", "reject", "extend"), strict=True):
        assert message is not None
        with pytest.raises(UnexpectedRequest, match=re.escape(deleted)):
            getattr(message, settle)()
    with pytest.raises(UnexpectedRequest, match=re.escape(deleted)):
        received.ack()
    consumer.close()


def test_an_ack_by_id_on_a_queue_deleted_meanwhile_says_it_was_deleted(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with boxmq.open(root) as box:
        box.queue("jobs").put(b"a")
        message = box.queue("jobs").get("w")
        assert message is not None
        settler = box.queue("jobs")
        _delete_in_another_process(str(root), "jobs")
        with pytest.raises(ItemNotFound, match="no such message: its queue was deleted"):
            settler.ack(message.id, "w")


def test_a_queue_folder_made_by_hand_as_deleting_keeps_its_messages(root: Path) -> None:
    """A hidden folder made by hand is a queue (docs/file-format.md), so a DropboxMQ root may
    hold one named `.deleting`, before boxmq took that name for the folders it deletes: each
    sweep and each delete wiped its state folders and messages (found by an upgrade hunt)."""
    target = root / ".deleting" / "target"
    target.mkdir(parents=True)
    (target / "4.kept.T").write_text("kept")
    with boxmq.open(root, fsync="never") as box:
        box.queue("gone").put("x")
        assert box.delete_queue("gone") is True
        box.sweep()
        assert os.listdir(target) == ["4.kept.T"]
        assert box.counts()[".deleting"].ready == 1
        assert os.listdir(root / ".deleting") == ["target"]  # and the state folders boxmq made


def test_a_message_locked_between_the_cli_deletes_check_and_its_rename_goes_with_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`boxmq delete` looks for locked messages, then renames the queue away: a consumer of
    another process may lock one in between (docs/cli.md). Only that in-flight message goes
    with the queue the user deleted, and its consumer is told at its ack, which cannot
    pass for done; no folder is left or made again."""
    from boxmq import cli
    from boxmq.client.box import Box

    root = tmp_path / "data"
    with boxmq.open(root, fsync="never") as other:
        jobs = other.queue("jobs")
        jobs.put_many([b"a", b"b"])
        consumer = other.queue("jobs").consumer("w")
        delete, locked = Box.delete_queue, []

        def after_a_lock(box: Box, name: str, **options: Any) -> bool:
            locked.append(consumer.receive(timeout=5))  # after the check: nothing was locked
            return delete(box, name, **options)

        monkeypatch.setattr(Box, "delete_queue", after_a_lock)
        assert cli.main(["--data", str(root), "--fsync", "never", "delete", "jobs"]) == 0
        [message] = locked
        assert message is not None
        with pytest.raises(UnexpectedRequest, match="its queue was deleted"):
            message.ack()
        assert consumer.receive(timeout=0) is None
        assert not {"jobs", ".deleting"} & set(os.listdir(root))
        consumer.close()


def test_the_cli_delete_counts_what_it_deleted_not_what_its_check_saw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`boxmq delete` said "deleted, with its N message(s)" with N counted at its check for
    locks: a message put (or locked) by another process before the rename was deleted too,
    and left out of N. It counts what the folder held once renamed away."""
    from boxmq import cli
    from boxmq.client.box import Box

    root = tmp_path / "data"
    with boxmq.open(root, fsync="never") as other:
        other.queue("jobs").put_many([b"a", b"b"])
        delete = Box.delete_queue

        def after_a_put(box: Box, name: str, **options: Any) -> bool:
            other.queue("jobs").put(b"put after the check")
            return delete(box, name, **options)

        monkeypatch.setattr(Box, "delete_queue", after_a_put)
        argv = ["--data", str(root), "--fsync", "never", "--json", "delete", "jobs", "--force"]
        assert cli.main(argv) == 0
        deleted = json.loads(capsys.readouterr().out)
        assert (deleted["queue"], deleted["deleted"], deleted["ready"]) == ("jobs", 3, 3)
        other.queue("jobs").put(b"again")  # and one more put after the check
        assert cli.main([*argv[:4], "delete", "jobs"]) == 0
        assert capsys.readouterr().out == "jobs: deleted, with its 2 message(s) (2 ready)\n"


def test_delete_queue_counts_what_it_deleted_in_each_state(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    jobs.put_many([b"a", b"b", b"c"])
    got = jobs.get("w")
    assert got is not None
    got.ack()
    assert jobs.get("w") is not None
    counted: list[boxmq.QueueCounts] = []
    assert box.delete_queue("jobs", counted=counted) is True
    assert [(c.ready, c.locked, c.done) for c in counted] == [(1, 1, 1)]
    assert box.delete_queue("jobs", counted=counted) is False
    assert len(counted) == 1  # nothing deleted, nothing counted


def test_delete_queue_counts_a_lock_whose_deadline_passed_as_ready_as_ls_does(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    """Nobody holds it: the next get takes it, and `ls`, `box.counts()` and `queue.counts()`
    count it ready. The count of what was deleted counted the files as they lay, `locked`, so
    `boxmq delete` said `1 locked` of a queue `ls` had just listed with none."""
    jobs = manual_box.queue("jobs")
    jobs.put_many([b"ends", b"held"])
    assert jobs.get("w", lock_timeout=10) is not None
    assert jobs.get("w", lock_timeout=100) is not None
    clock.advance(10)
    listed = manual_box.counts()["jobs"]
    counted: list[boxmq.QueueCounts] = []
    assert manual_box.delete_queue("jobs", counted=counted) is True
    assert [(c.ready, c.locked) for c in counted] == [(listed.ready, listed.locked)] == [(1, 1)]


def test_the_cli_delete_says_which_states_its_messages_were_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deleted, with its 4 message(s)` counted the done ones (processed/, consumed already:
    a day of them under keep_processed) as if they were lost with the ready, locked and dead
    ones; it says each state as `boxmq ls` names it."""
    from boxmq import cli

    root = tmp_path / "data"
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"done", b"dead", b"locked", b"ready"])
        for settle in ("ack", "reject", None):
            got = jobs.get("w")
            assert got is not None
            if settle is not None:
                getattr(got, settle)()
    argv = ["--data", str(root), "--fsync", "never", "delete", "jobs", "--force"]
    assert cli.main(argv) == 0
    said = "jobs: deleted, with its 4 message(s) (1 ready, 1 locked, 1 done, 1 dead)\n"
    assert capsys.readouterr().out == said
