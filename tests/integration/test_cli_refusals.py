"""The CLI where the file system refuses, as a user meets it: a root another user may not
look into or change (EACCES), a read-only file system (EROFS). The full disk's tests are in
test_cli.py and mqtt/test_mqtt_disk_full.py. Each command says what failed, where, and what to
fix (exit status 1, no traceback), and no stored message is lost or moved."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
from harness.ports import free_port
from tests.diskfull import as_nobody, shared_folder, small_disk
from tests.integration.mqtt.clients import serve_process, stop_process
from tests.integration.test_cli import ok
from tests.waiting import waited


def nobody(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`boxmq --data root ARGS` run as the user nobody."""
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never", *args]
    return subprocess.run(as_nobody(command), capture_output=True, text=True, timeout=60)


def refused(done: subprocess.CompletedProcess[str], command: str, where: Path) -> None:
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"boxmq {command}: {where}"), line
    assert "Permission denied: give this user access to it" in line, line


def test_publish_to_a_root_its_user_may_not_look_into_is_refused_not_sent_to_nobody() -> None:
    """os.access said "no generation file" for a root nobody may not search, so publish took
    the topic for one without a durable subscription, printed an id and exited 0: the
    message a kept subscription waits for was gone without a word."""
    with shared_folder() as folder:
        root = folder / "data"
        ok(root, "subscribe", "t/#", "--name", "k1", "--keep", "--idle", "0.1s")
        for private in (root, root / "topic-root"):
            private.chmod(0o700)
            refused(nobody(root, "publish", "t/a", "lost?"), "publish", private)
            private.chmod(0o755)
        [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
        assert row["ready"] == 0
        assert nobody(root, "publish", "t/a", "seen").returncode == 1  # may not write there
        ok(root, "publish", "t/a", "kept")
        assert ok(root, "subscribe", "t/#", "--name", "k1", "--idle", "0.2s") == "t/a kept\n"


def test_a_queue_its_user_may_not_look_into_is_told_as_such_not_as_missing() -> None:
    """The state folders were looked for with os.path.isdir, which says False for EACCES
    too: `get` said "no queue 'q' under <root> (see `boxmq ls`)" of a queue that is there.
    `ls` leaves out what it may not look into (a file system's lost+found among others)."""
    with shared_folder() as folder:
        root = folder / "data"
        ok(root, "put", "q", "one")
        for private in (root, root / "q"):
            private.chmod(0o700)
            for command in (["get", "q"], ["peek", "q"], ["requeue", "q"], ["purge", "q"]):
                refused(nobody(root, *command), command[0], root / "q" / "target")
            if private != root:  # a root it may not read is refused as a whole
                (lost_found := root / "lost+found").mkdir(mode=0o700)
                listed = nobody(root, "ls")  # no row for either, and no failure
                assert (listed.returncode, "QUEUE" in listed.stdout) == (0, False), listed
                lost_found.rmdir()
            private.chmod(0o755)
        assert json.loads(ok(root, "--json", "ls"))["queues"][0]["ready"] == 1
        assert nobody(root, "peek", "q").stdout.count("\n") == 2  # a header and the message


def test_serve_on_a_read_only_root_says_so_at_start(tmp_path: Path) -> None:
    """A recovery with nothing to do writes nothing, so `serve` said "ready" and listened
    on a root where every client's message, subscription and ack would be refused."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        ok(root, "put", "q", "kept")
        with disk.read_only():
            command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "serve"]
            command += ["--mqtt", f"127.0.0.1:{free_port()}"]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=20)
            except subprocess.TimeoutExpired:
                pytest.fail("serve started on a read-only root")
            assert done.returncode == 1, done.stderr
            assert "Traceback" not in done.stderr
            assert f"boxmq serve: {root}: Read-only file system: the file system is " in done.stderr
            assert "ready" not in done.stderr
            assert os.listdir(root / "q" / "target") != []
        server = serve_process(root, free_port())  # remounted rw: it starts
        stop_process(server)
        assert ok(root, "get", "q").endswith("kept")


def test_serve_s_sweeps_on_a_root_turned_read_only_are_told_once_and_run_again_after(
    tmp_path: Path,
) -> None:
    """One ERROR line a sweep (each second by default, 3,600 an hour) while the root was
    read-only; and nothing said when sweeps ran again."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path  # serve's log, beside the root, is kept open: not on the disk
        ok(root, "put", "q", "locked")
        log = root.parent / "serve.log"
        server = serve_process(root, free_port(), "--sweep-interval", "0.1")
        try:
            ok(root, "get", "q", "--lock", "2s")  # its lock ends while the disk is read-only
            with disk.read_only():
                waited(lambda: "ERROR" in log.read_text(), within=20, every=0.1)
                time.sleep(0.5)  # five sweeps more
            assert log.read_text().count("ERROR") == 1, log.read_text()
            assert "EROFS (Read-only file system)" in log.read_text()
            waited(lambda: "runs again" in log.read_text(), within=20, every=0.1)
            assert f"sweep of {root} runs again" in log.read_text()
            assert json.loads(ok(root, "--json", "ls"))["queues"][0]["ready"] == 1
        finally:
            stop_process(server)


def _open_files_at_most(limit: int) -> None:
    """In a child: its limit of open files, as `ulimit -n` sets it."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def test_a_command_out_of_open_files_says_to_raise_the_limit(tmp_path: Path) -> None:
    """A command whose process ran out of descriptors (EMFILE) said `boxmq subscribe:
    <root>/.deleting: Too many open files` and nothing of what to do, where the full disk
    says what to free. Run under limits from the lowest Python starts with upward, until
    one lets the command through: each refusal on the way says what to raise."""
    root = tmp_path / "data"
    ok(root, "publish", "t/a", "made")  # the root and topic-root exist
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "subscribe", "t/#"]
    command += ["--idle", "0"]
    told = []
    for limit in range(4, 32):
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=partial(_open_files_at_most, limit),
        )
        if done.returncode == 0:
            break
        if "Fatal Python error" in done.stderr:
            continue  # too low for the interpreter itself to start
        if "Too many open files" in done.stderr:
            assert done.returncode == 1, done
            assert "Traceback" not in done.stderr, done.stderr
            told.append(done.stderr.strip())
    else:
        pytest.fail("subscribe never passed under 32 open files")
    assert told, "no limit low enough to refuse the command once Python started"
    for line in told:
        assert line.startswith(f"boxmq subscribe: {root}/"), line
        assert line.endswith(": raise this process's limit of open files (ulimit -n)"), line
