"""A server out of file descriptors (docs/operations.md, "Many connections"): it stops
accepting for a while, says so once, serves the clients it has, and accepts again."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    WAIT,
    free_port,
    serve_process,
    start_server,
    stop_process,
)
from tests.integration.mqtt.raw import connect_packet, read


@contextlib.contextmanager
def _no_descriptor_left() -> Iterator[None]:
    """Every descriptor this process may open taken (a soft limit a little over those open,
    and files opened up to it), given back at the end."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    taken: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 16, hard))
    try:
        with contextlib.suppress(OSError):  # EMFILE, the end
            while True:
                taken.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _messages(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


def test_out_of_descriptors_accepting_waits_is_told_once_and_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    running = start_server(tmp_path / "root")
    try:
        with socket.socket() as client:
            client.settimeout(WAIT)
            with _no_descriptor_left():
                # The kernel takes the connection into the listener's queue: no descriptor
                # of the server's yet; its accept finds none left.
                client.connect((running.host, running.port))
                client.sendall(connect_packet("late", clean=True))
                deadline = time.monotonic() + WAIT
                while not _messages(caplog, "cannot accept"):
                    assert time.monotonic() < deadline, "the failed accept was not told"
                    time.sleep(0.01)
                time.sleep(0.6)  # tries again meanwhile: each 0.25 s
            # Descriptors free: the client waiting is accepted and served.
            assert read(client)[0] == 0x20
    finally:
        running.shutdown()
    [told] = _messages(caplog, "cannot accept")
    assert "too many open files" in told
    assert "ulimit -n" in told
    # asyncio's own accept loop told each of 100 accepts in a row, and again at each retry.
    assert not [r for r in caplog.records if r.name == "asyncio"]
    assert len(_messages(caplog, "accepting connections again")) == 1


def _open_files(pid: int) -> tuple[int, int]:
    """(soft, hard) limits of open files of process `pid`."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line")


def test_serve_raises_its_limit_of_open_files_to_the_hard_one_and_says_so(
    tmp_path: Path,
) -> None:
    root, port = tmp_path / "root", free_port()
    process = serve_process(root, port, open_files=(256, 512))
    try:
        assert _open_files(process.pid) == (512, 512)
    finally:
        stop_process(process)
    log = (tmp_path / "serve.log").read_text()
    assert "open files: at most 512, raised from 256 (ulimit -n) to the hard limit" in log
