"""What the CLI says it did holds across a SIGKILL the moment it says it: `put` and `publish`
printing the id, `ack`, `unlock` and `reject` their line, `requeue`, `purge` and `delete`
theirs, each killed as its first line is read, before it can close the root. Under every
fsync policy: a crash of a process loses nothing that returned under any (docs/operations.md,
Durability); the policy is for a crash of the machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness.output import read_until
from harness.stopping import kill

import boxmq
from boxmq.store.commit import FsyncPolicy

SAID_WITHIN = 30.0  # seconds for a CLI run to print its line


@pytest.fixture(params=FsyncPolicy.words())
def fsync(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _killed_as_it_says(root: Path, fsync: str, *args: str) -> str:
    """Run `boxmq --fsync FSYNC ARGS`, SIGKILL it as soon as its first line of output is
    read, and return that line (what it told its user it had done)."""
    run = subprocess.Popen(
        [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", fsync, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ.copy(),
    )
    try:
        assert run.stdout is not None
        # the text and its newline may come in two writes: read until the line is whole
        line = read_until(run.stdout, lambda said: said.endswith(b"\n"), SAID_WITHIN)
    finally:
        kill(run)
        _, errors = run.communicate(timeout=10)
    assert line.endswith(b"\n"), (line, errors)  # a whole line: it was told, then killed
    return line.decode().strip()


def test_a_put_killed_as_it_prints_its_id_is_stored(root: Path, fsync: str) -> None:
    message_id = _killed_as_it_says(root, fsync, "put", "jobs", "hello")
    with boxmq.open(root, fsync="never") as box:
        message = box.queue("jobs").get("check")
        assert message is not None
        assert (message.id, message.body) == (message_id, b"hello")


def test_a_publish_killed_as_it_prints_its_id_reached_the_subscription_and_retained(
    root: Path, fsync: str
) -> None:
    with boxmq.open(root, fsync="always") as box:
        box.subscribe("sensors/+", "keeper", process_bound=False).close()
    message_id = _killed_as_it_says(root, fsync, "publish", "sensors/1", "21.5", "--retain")
    with boxmq.open(root, fsync="never") as box:
        [copy] = box.subscription("sensors/+", "keeper").peek()
        assert copy.envelope.message_id == message_id
        retained = [envelope for envelope, _ in box.topics.retained_reading("sensors/1")]
        assert [envelope.message_id for envelope in retained] == [message_id]


def test_an_ack_killed_as_it_says_so_stays_done(root: Path, fsync: str) -> None:
    with boxmq.open(root, fsync="always") as box:
        jobs = box.queue("jobs")
        jobs.put(b"once")
        message = jobs.get("cli")  # the lock `boxmq get` takes
        assert message is not None
    assert _killed_as_it_says(root, fsync, "ack", "jobs", message.id) == f"ack: {message.id}"
    with boxmq.open(root, fsync="never") as box:
        found = box.queue("jobs").find(message.id)
        assert found is not None
        assert found.state is boxmq.State.PROCESSED
        assert box.queue("jobs").get("check") is None  # never delivered again


@pytest.mark.parametrize(("verb", "state"), [("unlock", "TARGET"), ("reject", "ERROR")])
def test_an_unlock_or_reject_killed_as_it_says_so_is_done(
    root: Path, fsync: str, verb: str, state: str
) -> None:
    with boxmq.open(root, fsync="always") as box:
        jobs = box.queue("jobs")
        jobs.put(b"back")
        message = jobs.get("cli")  # the lock `boxmq get` takes, for 30 s
        assert message is not None
    said = _killed_as_it_says(root, fsync, verb, "jobs", message.id)
    assert said == f"{verb}: {message.id}"
    with boxmq.open(root, fsync="never") as box:
        found = box.queue("jobs").find(message.id)
        assert found is not None
        assert found.state is boxmq.State[state]  # not locked for the rest of its 30 s


@pytest.mark.parametrize(
    ("args", "line", "ready"),
    [
        (("purge", "jobs"), "jobs: 3 message(s) deleted from target/", 0),
        (("requeue", "jobs"), "jobs: 1 message(s) from error/ back to target/", 4),
    ],
)
def test_a_purge_or_requeue_killed_as_it_says_so_is_done(
    root: Path, fsync: str, args: tuple[str, ...], line: str, ready: int
) -> None:
    with boxmq.open(root, fsync="always") as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"dead", b"a", b"b", b"c"])
        dead = jobs.get("cli")
        assert dead is not None
        dead.reject()  # to error/
    assert _killed_as_it_says(root, fsync, *args) == line
    with boxmq.open(root, fsync="never") as box:
        assert box.queue("jobs").counts().ready == ready


def test_a_delete_killed_as_it_says_so_leaves_no_queue(root: Path, fsync: str) -> None:
    with boxmq.open(root, fsync="always") as box:
        box.queue("jobs").put(b"x")
    said = _killed_as_it_says(root, fsync, "delete", "jobs")
    assert said == "jobs: deleted, with its 1 message(s) (1 ready)"
    with boxmq.open(root, fsync="never") as box:
        with pytest.raises(boxmq.QueueNotFound):
            box.queue("jobs", create=False)
        assert box.queues() == []
