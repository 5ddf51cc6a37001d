"""`boxmq serve`: recovery at start, housekeeping on a timer, a clean stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boxmq
from boxmq.store.names import Lock, decode, locked_name
from boxmq.store.process import process_token


def dead_token() -> str:
    finished = subprocess.Popen(["true"])
    finished.wait()
    return process_token(finished.pid)


def test_serve_recovers_dead_locks_sweeps_and_stops_on_sigterm(root: Path) -> None:
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        jobs.put(b"orphan")
        jobs.put(b"short-lived", expires_in=0.5)
        processing = root / "jobs" / "processing"
        [name] = [n for n in os.listdir(root / "jobs" / "target") if decode(n).expiration == 0]
        far = int((time.time() + 3600) * 1000)  # the deadline is far: only the owner's death counts
        os.rename(
            root / "jobs" / "target" / name,
            processing / locked_name(name, Lock(boxmq.model.ConsumerId("w"), far, dead_token())),
        )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "boxmq.cli",
            "--data",
            str(root),
            "serve",
            "--sweep-interval",
            "0.2",
            "--mqtt",
            "127.0.0.1:0",  # a free port: tests run side by side
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            counts = boxmq.open(root, fsync="never").queue("jobs").counts()
            if counts.locked == 0 and counts.expired == 1:
                break
            time.sleep(0.1)
        assert counts.locked == 0
        assert counts.ready == 1
        assert counts.expired == 1
        [back] = os.listdir(root / "jobs" / "target")
        assert decode(back).delivery_count == 1
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.stderr is not None
    log = server.stderr.read()
    server.stderr.close()
    assert "process of 'w' is gone" in log
    assert "1 message(s) expired" in log
    assert "stopping" in log


def _stale_temporary(folder: Path) -> Path:
    """What a write leaves when its process dies before the rename, written two hours ago."""
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / ".tmp-left-by-a-dead-writer"
    temporary.write_text("half")
    two_hours_ago = time.time() - 7200
    os.utime(temporary, (two_hours_ago, two_hours_ago))
    return temporary


def test_serve_sweeps_the_temporaries_of_mqtt_session_records(root: Path) -> None:
    """The session records (.mqtt/sessions/) are the MQTT door's: its broker has the sweep
    look there too, as in the box's own folders."""
    boxmq.open(root, fsync="never").close()
    left = _stale_temporary(root / ".mqtt" / "sessions")
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "serve"]
    server = subprocess.Popen(
        [*command, "--sweep-interval", "0.2", "--mqtt", "127.0.0.1:0"], stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while left.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left.exists()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
