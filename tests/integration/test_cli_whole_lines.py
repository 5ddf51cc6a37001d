"""Each line the `boxmq` command prints goes out in one write, so that two commands writing to
one pipe, or a reader taking what has come so far, never see half a line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def writes(root: Path, *args: str, to: str = "stdout", status: int = 0) -> list[bytes]:
    """The writes the command made to its standard output (`to` "stdout") or error, one
    each: a SOCK_SEQPACKET socket keeps the bounds of each write, where a pipe runs them
    together. PYTHONUNBUFFERED=1, as a container image or a service's unit often sets it,
    has every write reach the output as it is made, as a line longer than the output's
    buffer does without it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        other = subprocess.PIPE
        done = subprocess.run(
            [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never", *args],
            stdout=theirs.fileno() if to == "stdout" else other,
            stderr=theirs.fileno() if to == "stderr" else other,
            timeout=60,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )
        assert done.returncode == status, (done.stdout, done.stderr)
        theirs.close()
        written = []
        while packet := ours.recv(1 << 20):
            written.append(packet)
    return written


def test_each_line_printed_is_one_write(tmp_path: Path) -> None:
    [put] = writes(tmp_path, "put", "jobs", "x" * 10_000)
    assert put.endswith(b"\n")
    assert put.count(b"\n") == 1
    listed = writes(tmp_path, "ls")
    assert [write.count(b"\n") for write in listed] == [1, 1]  # the header, the queue's row
    assert b"".join(listed).splitlines()[1].split()[:2] == [b"jobs", b"1"]
    [message] = writes(tmp_path, "get", "jobs", "--json")
    assert message.endswith(b"\n")
    assert message.count(b"\n") == 1


def test_each_line_said_on_stderr_is_one_write(tmp_path: Path) -> None:
    [nothing] = writes(tmp_path, "get", "jobs", to="stderr", status=1)  # no such queue
    assert nothing.startswith(b"boxmq get: ")
    assert nothing.count(b"\n") == 1
    assert nothing.endswith(b"\n")
