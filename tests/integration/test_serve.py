"""`boxmq serve`: recovery at start, housekeeping on a timer, a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.output import Drained
from harness.ports import free_port
from harness.stopping import kill, stop
from tests.integration.mqtt.clients import START, RunningServer, serve_fresh
from tests.integration.mqtt.raw import open_raw, read
from tests.processes import dead_token
from tests.waiting import until, waited

import boxmq
from boxmq import runtime
from boxmq.client.sweeps import SweepReport
from boxmq.store.names import Lock, decode, locked_name


@contextlib.contextmanager
def _reaped(server: subprocess.Popen[Any]) -> Iterator[None]:
    """Whatever the test asserts, the server does not outlive it (killed if still running)."""
    try:
        yield
    finally:
        kill(server)


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
    assert server.stderr is not None
    said = Drained(server.stderr)  # as it logs: read only at its end, a full pipe stopped it
    with _reaped(server):
        deadline = time.monotonic() + START  # its start, then a sweep
        while time.monotonic() < deadline:
            with boxmq.open(root, fsync="never") as box:
                counts = box.queue("jobs").counts()
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
    log = said.text()
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
        waited(lambda: not left.exists(), within=START, every=0.1)  # its start, then a sweep
        assert not left.exists()
    finally:
        stop(server, seconds=10)


def test_a_records_folder_that_cannot_be_listed_stops_the_start_with_what_to_fix(
    root: Path,
) -> None:
    """A session record that cannot be read waits alone (Lifetimes.resume_unread); the folder
    of them that cannot be listed (EACCES, EIO; a link to itself here) leaves no session
    known, so the start stops, as a recovery that fails does (docs/operations.md). It said
    the folder and the errno's text alone, not what the folder is nor what to fix (found at
    an earlier stop); `session ls` says the same."""
    boxmq.open(root, fsync="never").close()
    folder = root / ".mqtt" / "sessions"
    folder.parent.mkdir()
    os.symlink("sessions", folder)
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root)]
    said = (
        f"the MQTT session records in {folder} cannot be listed: ELOOP (Too many levels of "
        "symbolic links); a symbolic link that leads nowhere stands there: make it a folder. "
        "No persistent session is known until then (a record alone that cannot be read only "
        "waits for its own session)\n"
    )
    served = subprocess.run(
        [*command, "serve", "--mqtt", "127.0.0.1:0"], capture_output=True, text=True, timeout=60
    )
    assert served.returncode == 1
    assert served.stderr.endswith(f"\nboxmq serve: {said}")
    assert "Traceback" not in served.stderr
    listed = subprocess.run([*command, "session", "ls"], capture_output=True, text=True, timeout=60)
    assert (listed.returncode, listed.stdout, listed.stderr) == (1, "", f"boxmq session ls: {said}")
    assert os.readlink(folder) == "sessions"  # left as it is


def test_a_sweep_the_file_system_fails_is_told_and_serving_goes_on(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every descriptor taken by clients (EMFILE) failed a sweep of the timer, and `serve`
    ended with it, closing every door."""
    calls: list[int] = []
    told: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []  # the sweep after ran

    with boxmq.open(root, fsync="never") as box:
        real = box.sweep

        def sweep(*, full: bool = True) -> dict[str, SweepReport]:  # in serve's worker thread
            calls.append(len(calls) + 1)
            if len(calls) == 2:  # the first of the timer's: the one at start is the recovery
                raise OSError(errno.EMFILE, "Too many open files")
            report = real(full=full)
            if len(calls) == 3:
                loop, swept = told[0]
                loop.call_soon_threadsafe(swept.set)
            return report

        monkeypatch.setattr(box, "sweep", sweep)

        async def serve_until_the_sweep_after() -> None:
            told.append((asyncio.get_running_loop(), asyncio.Event()))
            stop = asyncio.Event()
            serving = asyncio.create_task(runtime.serve(box, sweep_interval=0.02, stop=stop))
            await asyncio.wait_for(told[0][1].wait(), timeout=10)
            assert not serving.done()
            stop.set()
            await serving

        with caplog.at_level(logging.ERROR, logger="boxmq"):
            asyncio.run(serve_until_the_sweep_after())
    assert "Too many open files" in caplog.text


def _under(*command: str) -> tuple[str, ...]:
    """serve_fresh's `program` for a `boxmq` run under `command` (`nohup`, `env ...`): the
    interpreter execs the command, which runs `python -m boxmq.cli` with the arguments."""
    run = [*command, sys.executable, "-m", "boxmq.cli"]
    return ("-c", f"import os, sys; os.execvp({run[0]!r}, [*{run!r}, *sys.argv[1:]])")


def test_sighup_stops_serve_as_sigterm_does(tmp_path: Path) -> None:
    """What a closed terminal sends: clients are told (DISCONNECT 0x8B, server shutting down),
    the stop is logged, and the exit is clean, instead of a death by the signal (129). The
    line said nothing of a reload, which is what mosquitto does on SIGHUP. (Its SIGHUP is
    the default one even where the tests run under nohup, which serve would keep.)"""
    address, server = serve_fresh(tmp_path, program=_under("env", "--default-signal=HUP"))
    with _reaped(server):
        sock, _ = open_raw(address, "hup", clean=True)
        with sock:
            server.send_signal(signal.SIGHUP)
            kind, body = read(sock)
            assert (kind, body[:1]) == (0xE0, b"\x8b")
        assert server.wait(timeout=20) == 0
    log = (tmp_path / "serve.log").read_text()
    assert (
        "SIGHUP received: stopping (boxmq reloads nothing on SIGHUP: its config, password, ACL "
        "and TLS files are read at start, so start it again to take in their changes)"
    ) in log  # a mosquitto user's reload, told why it stopped
    assert "MQTT listeners closed" in log


def test_sighup_leaves_serve_run_under_nohup_serving(tmp_path: Path) -> None:
    """operations.md: run `boxmq serve` under nohup to keep it past the end of a terminal
    session. nohup asks for that by ignoring SIGHUP, which the closed terminal's shell sends to
    its jobs; serve's own handler undid it, so the broker stopped with the terminal all the
    same. SIGTERM still stops it."""
    address, server = serve_fresh(tmp_path, program=_under("nohup"))
    with _reaped(server):
        server.send_signal(signal.SIGHUP)
        sock, _ = open_raw(address, "after-hup", clean=True)  # still serving
        sock.close()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    log = (tmp_path / "serve.log").read_text()
    assert "SIGHUP received" not in log
    assert "SIGTERM received: stopping" in log
    assert "SIGHUP is ignored (nohup): a closed terminal does not stop this server" in log


def test_serve_started_with_its_standard_error_closed_serves(tmp_path: Path) -> None:
    """`boxmq serve ... 2>&-` (a script that detaches it closing its descriptors): it wrote
    nothing and ended at once with status 1, the SIGUSR1 stack dump refused a missing stderr
    (`RuntimeError: sys.stderr is None`), where the broker serves without a log; its
    descriptor 2 is /dev/null, not the next file it opened (found by the operator's probe)."""
    root, port = tmp_path / "root", free_port()
    command = [*_SERVE, "--data", str(root), "serve", "--mqtt", f"127.0.0.1:{port}"]
    server = subprocess.Popen(["sh", "-c", 'exec "$@" 2>&-', "sh", *command])
    address = RunningServer(root, None, "127.0.0.1", port, None, None, None, None)  # type: ignore[arg-type]

    def serving() -> bool:
        assert server.poll() is None, f"boxmq serve ended, status {server.returncode}"
        with contextlib.suppress(ConnectionRefusedError):
            sock, _ = open_raw(address, "closed-stderr", clean=True)
            sock.close()
            return True
        return False

    with _reaped(server):
        until(serving, "boxmq serve never took a client", within=START)
        # Not a file of its own: what the interpreter writes there at a fatal error went in.
        assert os.readlink(f"/proc/{server.pid}/fd/2") == os.devnull
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0


def test_sigusr1_logs_every_thread_s_stack_and_serving_goes_on(tmp_path: Path) -> None:
    """For a broker that seems stuck: where each thread waits, in the log, and no stop."""
    address, server = serve_fresh(tmp_path)
    log = tmp_path / "serve.log"
    with _reaped(server):
        server.send_signal(signal.SIGUSR1)
        # The dump is written frame by frame: wait for its last part (the loop's own frames,
        # under runtime.py, come after the current thread's header and the asyncio ones).
        deadline = time.monotonic() + 20
        dump = ""
        while "runtime.py" not in dump.partition("Current thread")[2]:
            assert time.monotonic() < deadline, f"no stack of the loop's thread in:\n{dump}"
            time.sleep(0.05)
            dump = log.read_text()
        sock, _ = open_raw(address, "after-usr1", clean=True)  # still serving
        sock.close()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0


def test_sigusr2_is_told_what_to_use_and_serving_goes_on(tmp_path: Path) -> None:
    """mosquitto prints its subscriptions at SIGUSR2: a user of it who sent one to boxmq
    stopped the broker (the default action, status 140), with no log line and no DISCONNECT
    to its clients (found by the operator's probe)."""
    address, server = serve_fresh(tmp_path)
    log = tmp_path / "serve.log"
    with _reaped(server):
        server.send_signal(signal.SIGUSR2)
        until(lambda: "SIGUSR2" in log.read_text(), "no line for SIGUSR2", within=START)
        assert "boxmq ls" in log.read_text()
        sock, _ = open_raw(address, "after-usr2", clean=True)  # still serving
        sock.close()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0


_SERVE = (sys.executable, "-m", "boxmq.cli")


@contextlib.contextmanager
def _sweeping(root: Path) -> Iterator[None]:
    """`boxmq serve` on `root`, sweeping every 10 ms, once it has swept (a message expired)."""
    with boxmq.open(root, fsync="never") as box:
        box.queue("warm").put(b"expires at once", expires_in=0.001)
    server = subprocess.Popen(
        [
            *_SERVE,
            "--data",
            str(root),
            "serve",
            "--sweep-interval",
            "0.01",
            "--mqtt",
            "127.0.0.1:0",
        ],
        stderr=subprocess.DEVNULL,
    )
    with _reaped(server):
        until(lambda: os.listdir(root / "warm" / "expired"), "no sweep ran", within=START)
        yield
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 0


def test_an_rm_rf_of_a_queue_while_serve_sweeps_deletes_it(root: Path) -> None:
    """docs/cli.md deletes a queue with an `rm -rf` of its folder: each sweep of `boxmq serve`
    made the state folders a queue lacked, so one the rm had just deleted came back under it,
    and the rm failed (Directory not empty) and left the queue there (1 to 6 of 1,000 deletes)."""
    failed = 0
    with _sweeping(root):
        deadline = time.monotonic() + 8
        for _ in range(1000):
            if time.monotonic() > deadline:
                break
            for state in ("working", "target", "processing", "processed", "error", "expired"):
                os.makedirs(root / "q" / state, exist_ok=True)
            try:
                shutil.rmtree(root / "q")
            except OSError:
                failed += 1
                shutil.rmtree(root / "q", ignore_errors=True)
    assert failed == 0


def test_delete_queue_while_serve_sweeps_deletes_it(root: Path) -> None:
    """`Box.delete_queue` ignored what its rmtree could not delete: under a sweep that made
    the state folders again it said True and left the queue there."""
    left = 0
    with _sweeping(root), boxmq.open(root, fsync="never") as box:
        deadline = time.monotonic() + 8
        for _ in range(1000):
            if time.monotonic() > deadline:
                break
            box.queue("q").put(b"one")
            assert box.delete_queue("q")
            left += os.path.lexists(root / "q")
    assert left == 0
