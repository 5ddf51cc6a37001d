"""The settles (`ack`, `unlock`, `reject`, `extend`) of a message that was settled already, as
a user meets it: a second `ack` in a script run twice, two terminals racing on one id, an id
copied from `peek --state error`. The message is there, in processed/, error/ or expired/, and
the refusal says so, with what to do next, instead of "no such message"."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.integration.test_cli import boxmq_cli, ok
from tests.stats import recorded_stats

import boxmq
from boxmq import cli


def refused(root: Path, *args: str) -> str:
    done = boxmq_cli(root, *args)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.splitlines()
    return line


@pytest.mark.parametrize("verb", ["ack", "unlock", "reject", "extend"])
def test_a_settle_of_an_acked_message_says_it_is_in_processed(root: Path, verb: str) -> None:
    message_id = ok(root, "put", "jobs", "work").strip()
    ok(root, "get", "jobs")
    ok(root, "ack", "jobs", message_id)
    line = refused(root, verb, "jobs", message_id)
    assert line == (
        f"boxmq {verb}: {message_id}: settled already: it was acked, and is in processed/ "
        "(nothing to do)"
    )
    processed = json.loads(ok(root, "--json", "peek", "jobs", "--state", "processed"))
    assert [p["id"] for p in processed] == [message_id]  # the refusal moved nothing


def test_a_settle_of_a_dead_message_says_why_and_how_to_send_it_back(root: Path) -> None:
    message_id = ok(root, "put", "jobs", "work").strip()
    ok(root, "get", "jobs")
    ok(root, "reject", "jobs", message_id)
    line = refused(root, "ack", "jobs", message_id)
    assert line == (
        f"boxmq ack: {message_id}: settled already: it is dead (rejected), in error/ "
        "(`boxmq requeue jobs` sends it back to be delivered again)"
    )


def test_a_settle_of_an_expired_message_says_so(root: Path) -> None:
    message_id = ok(root, "put", "jobs", "work", "--expires-in", "1ms").strip()
    subprocess.run(["sleep", "0.05"], check=True)
    assert boxmq_cli(root, "get", "jobs").returncode == 3  # it moves the expired one away
    line = refused(root, "ack", "jobs", message_id)
    assert line == (
        f"boxmq ack: {message_id}: it expired before it was settled, and is in expired/ "
        "(`boxmq requeue jobs --from expired` sends it back to be delivered again)"
    )


def test_a_settle_of_an_id_never_in_the_queue_is_still_no_such_message(root: Path) -> None:
    ok(root, "put", "jobs", "work")
    assert refused(root, "ack", "jobs", "1-2") == "boxmq ack: 1-2: no such message"


def test_a_refused_settle_looks_the_message_up_by_id_not_by_reading_every_settled_one(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It peeked processed/, error/ and expired/ whole to find the one id, stat'ing each
    file: seconds for the 300,000 messages a long-lived queue keeps in processed/. It stats
    only what it finds now, whatever the folders hold."""
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        ids = jobs.put_many([b"work"] * 300)
        for _ in ids:
            got = jobs.get()
            assert got is not None
            got.ack()
    stats = recorded_stats(monkeypatch)
    assert cli.main(["--data", str(root), "--fsync", "never", "ack", "jobs", ids[7]]) == 1
    assert capsys.readouterr().err.strip() == (
        f"boxmq ack: {ids[7]}: settled already: it was acked, and is in processed/ (nothing to do)"
    )
    assert len([path for path in stats if "/processed/" in path]) == 1, stats


@pytest.mark.parametrize("verb", ["ack", "unlock", "reject", "extend"])
def test_a_settle_of_an_empty_id_is_a_usage_error_that_says_so(root: Path, verb: str) -> None:
    """`boxmq ack jobs "$ID"` after a `get` that found nothing: it said "boxmq ack: : no such
    message", exit 1, as if an id were there and not found."""
    ok(root, "put", "jobs", "work")
    done = boxmq_cli(root, verb, "jobs", "")
    assert done.returncode == 2, done
    assert done.stderr.splitlines()[-1] == (
        f"boxmq {verb}: error: argument id: the message id is empty: give the id `get` "
        "printed (a script's variable that a `get` finding nothing left empty?)"
    )
    assert len(os.listdir(root / "jobs" / "target")) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["put", "", "hi"],
        ["get", ""],
        ["peek", ""],
        ["requeue", ""],
        ["purge", ""],
        ["delete", ""],
        ["ack", "", "1.x"],
        ["extend", "", "1.x"],
    ],
)
def test_an_empty_queue_name_is_a_usage_error_that_says_so(
    tmp_path: Path, command: list[str]
) -> None:
    """`boxmq get "$QUEUE"` with the variable left empty said "destination name '' is empty
    or contains NUL", exit 1, in words no command uses, where an empty message id or
    CLIENT_ID is a usage error (exit 2, docs/cli.md's exit status): found by a hunt through
    the CLI's failures. It is one now, said before the root is looked at or made."""
    root = tmp_path / "never-made"
    done = boxmq_cli(root, *command)
    assert (done.returncode, done.stdout) == (2, ""), done
    assert done.stderr.splitlines()[-1] == (
        f"boxmq {command[0]}: error: argument queue: the queue name is empty: give a "
        "queue's name, as `boxmq ls` lists it (a script's variable left empty?)"
    )
    assert not root.exists()
