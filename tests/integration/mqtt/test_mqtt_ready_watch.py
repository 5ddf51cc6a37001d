"""serve_process's wait for `boxmq serve`'s ready line: it reads only what the log gained."""

from __future__ import annotations

import os
from pathlib import Path

from tests.integration.mqtt.clients import ready_watch

READY = b"boxmq serve: ready; sweeping every 0.5 s\n"


def test_the_ready_line_is_found_though_cut_between_two_looks(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    log.write_bytes(b"an earlier start said " + READY)  # before said_from: not this start's
    said_from = log.stat().st_size
    with ready_watch(log, said_from) as said_ready, open(log, "ab", buffering=0) as server:
        assert not said_ready()
        server.write(b"recovered 3 sessions\n" + READY[:20])
        assert not said_ready()
        server.write(READY[20:])
        assert said_ready()


def test_each_look_reads_only_what_was_appended_since_the_last(tmp_path: Path) -> None:
    # What was read once is not read again: the line written over bytes already looked at is
    # not seen, where a watch that read the whole log at each look (quadratic in a long start)
    # found it.
    log = tmp_path / "serve.log"
    log.write_bytes(b"." * len(READY) * 100)
    with ready_watch(log, 0) as said_ready:
        assert not said_ready()
        fd = os.open(log, os.O_WRONLY)
        try:
            os.pwrite(fd, READY, 0)
        finally:
            os.close(fd)
        assert not said_ready()
        with open(log, "ab") as server:
            server.write(READY)
        assert said_ready()
