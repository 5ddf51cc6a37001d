"""`boxmq delete` refused, as a user meets it: not for a lock whose deadline passed, which
holds the message for nobody (a settle by its holder is refused: "it ended"), which the user
could otherwise not get past but with --force; and for a subscription, which is no queue,
with the `boxmq unsubscribe` that ends it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from tests.integration.test_cli import boxmq_cli, ok


def test_delete_is_not_refused_for_a_lock_that_ended(root: Path) -> None:
    """It was refused with `1 by boxmq get: settle them by id (ack, unlock)`, and the unlock
    it advised was refused in turn (`'cli' no longer holds the lock: it ended`): a loop."""
    ok(root, "put", "jobs", "one")
    ok(root, "put", "jobs", "two")
    ok(root, "get", "jobs", "--lock", "100ms")
    time.sleep(0.3)
    deleted = json.loads(ok(root, "--json", "delete", "jobs"))
    assert (deleted["deleted"], deleted["ready"], deleted["locked"]) == (2, 2, 0)  # it ended
    assert not (root / "jobs").exists()


def test_delete_is_still_refused_for_a_lock_in_time_beside_one_that_ended(root: Path) -> None:
    ok(root, "put", "jobs", "one")
    ok(root, "put", "jobs", "two")
    ok(root, "get", "jobs", "--lock", "100ms")
    time.sleep(0.3)
    ok(root, "get", "jobs", "--lock", "10m")  # sends the ended one back first, then locks it
    ok(root, "get", "jobs", "--lock", "10m")
    refused = boxmq_cli(root, "delete", "jobs")
    assert refused.returncode == 1, refused
    assert "jobs: 2 message(s) locked: 2 by `boxmq get`" in refused.stderr
    assert len(os.listdir(root / "jobs" / "processing")) == 2  # nothing moved or deleted


@pytest.mark.parametrize(
    ("name", "ends"),
    [
        ("s/#", "`boxmq unsubscribe 's/#' --name kk` ends it"),
        ("$share/g/x", "`boxmq unsubscribe '$share/g/x' --name m1` ends it"),
    ],
)
def test_delete_of_a_subscription_says_how_to_end_it(root: Path, name: str, ends: str) -> None:
    """It said `no queue 's/#'` alone, where get, peek and the settles name the subscription
    and what to add: delete takes queues only, and a subscription ends with unsubscribe."""
    ok(
        root,
        "subscribe",
        name,
        "--name",
        "kk" if name == "s/#" else "m1",
        "--keep",
        "--idle",
        "10ms",
    )
    refused = boxmq_cli(root, "delete", name)
    assert refused.returncode == 1, refused
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"boxmq delete: no queue {name!r} under {root}"), line
    assert line.endswith(f"; {name!r} is a subscription, not a queue: {ends}"), line
    assert name in json.loads(ok(root, "--json", "ls"))["subscriptions"][0]["subscription"]


def test_a_queue_whose_target_is_a_file_is_said_broken_and_delete_removes_it(root: Path) -> None:
    """get, peek and delete said `no queue 'q1'` of a queue whose target/ was a file (an
    editor's save, a script's `>`), and delete could not remove it: the user is told which
    path is wrong and what it must be, and delete removes that queue alone."""
    ok(root, "put", "q1", "hi")
    target = root / "q1" / "target"
    for name in os.listdir(target):
        os.remove(target / name)
    target.rmdir()
    target.write_text("not a folder")
    ok(root, "put", "q2", "kept")
    for command in (["get", "q1"], ["peek", "q1"]):
        done = boxmq_cli(root, *command)
        assert done.returncode == 1, command
        assert f"{target} is a file, not a folder" in done.stderr, command
        assert "`boxmq delete q1` deletes the queue" in done.stderr, command
    assert target.read_text() == "not a folder"  # told, never touched
    assert ok(root, "delete", "q1").startswith("q1: deleted")
    assert not (root / "q1").exists()
    assert ok(root, "get", "q2").endswith("kept")  # another queue's files are left alone


def test_a_queue_name_that_is_a_file_says_so_and_what_to_do(root: Path) -> None:
    """A file under the root where a queue's folder goes (`echo x > data/jobs`) was `no queue
    'jobs' ... (see boxmq ls)` to get, peek, purge, requeue, delete and the settles, though
    `ls` lists no file, and a put's `.../jobs/working: Not a directory` told the user to
    choose another --data folder (found by a hunt through the CLI's failures): each names
    the file and says to move it away, exit 1, and the file is never touched."""
    ok(root, "put", "other", "kept")
    (root / "jobs").write_text("a file")
    told = f"{root / 'jobs'} is a file, not a queue's folder: move it away"
    for command in (
        ["get", "jobs"],
        ["peek", "jobs"],
        ["purge", "jobs"],
        ["requeue", "jobs"],
        ["delete", "jobs"],
        ["ack", "jobs", "1.x"],
        ["put", "jobs", "hi"],
    ):
        done = boxmq_cli(root, *command)
        assert (done.returncode, done.stdout) == (1, ""), command
        assert done.stderr.startswith(f"boxmq {command[0]}: "), command
        assert told in done.stderr, (command, done.stderr)
        assert "--data" not in done.stderr, command
    assert (root / "jobs").read_text() == "a file"
    assert ok(root, "get", "other").endswith("kept")
