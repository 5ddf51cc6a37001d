"""harness.stopping, the one stop of the child processes the tests, the benchmarks and the
Prosody harness start: real processes, one that ends at SIGTERM (`sleep`) and one that
ignores it, as a broker stuck in its stop would."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import get_context
from multiprocessing.synchronize import Event as EventType

import pytest
from harness.output import read_line
from harness.stopping import Worker, kill, stop

# A child that ignores SIGTERM, and says so once it does (only then is the test's signal sent).
_DEAF = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("deaf", flush=True)
time.sleep(60)
"""


@contextmanager
def _deaf() -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", _DEAF], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            assert read_line(child.stdout, 30) == "deaf\n"
            yield child
        finally:
            if child.poll() is None:  # left by a failed check: Popen's exit then waits for it
                child.kill()


def test_a_process_that_ends_at_sigterm_is_stopped_by_it_and_reaped() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    assert stop(sleeper, seconds=30) == []
    assert sleeper.returncode == -signal.SIGTERM  # reaped: its status taken


def test_a_process_that_ignores_sigterm_is_killed_past_the_time_reaped_and_returned() -> None:
    with _deaf() as deaf:
        assert stop(deaf, seconds=0.5) == [deaf]
        assert deaf.returncode == -signal.SIGKILL  # not left a zombie for Popen's collection


def test_several_are_signalled_at_once_and_only_the_stuck_ones_are_killed() -> None:
    first, last = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
    with _deaf() as deaf, _deaf() as other:
        assert stop(first, deaf, other, last, seconds=0.5) == [deaf, other]
        codes = [p.returncode for p in (first, deaf, other, last)]
        assert codes == [-signal.SIGTERM, -signal.SIGKILL, -signal.SIGKILL, -signal.SIGTERM]


def test_a_process_already_ended_is_left_as_it_ended() -> None:
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    done.wait()
    assert stop(done, seconds=0.5) == []
    kill(done)
    assert done.returncode == 3


def test_kill_reaps_what_it_kills() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    with _deaf() as deaf:
        kill(deaf, sleeper)
        assert (deaf.returncode, sleeper.returncode) == (-signal.SIGKILL, -signal.SIGKILL)


class _KillLost(subprocess.Popen[bytes]):
    """A real process whose SIGKILL goes astray, as it seems to of one stuck in the kernel (an
    uninterruptible wait on a hung disk): nothing a test makes survives a real SIGKILL."""

    def kill(self) -> None:
        pass


def test_a_process_not_gone_after_its_sigkill_is_an_error_naming_it_the_others_reaped() -> None:
    """kill waited for it without end: the test run or benchmark hung, saying nothing."""
    sleeper = subprocess.Popen(["sleep", "60"])
    with _KillLost(["sleep", "60"]) as lost:
        try:
            started = time.monotonic()
            with pytest.raises(RuntimeError, match=rf"^pid {lost.pid} still running 0.3 s after"):
                kill(lost, sleeper, seconds=0.3)
            assert time.monotonic() - started < 10
            assert sleeper.returncode == -signal.SIGKILL  # reaped all the same
            assert lost.poll() is None
        finally:
            subprocess.Popen.kill(lost)  # its own SIGKILL, for the Popen's exit to reap it


def _deaf_worker(ready: EventType) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(60)


def test_multiprocessing_workers_are_stopped_as_popens_are() -> None:
    """bench/get_deep's workers are multiprocessing processes: Worker gives them Popen's
    signal, wait and kill, so one that ends at SIGTERM is joined, and one that ignores it is
    killed past the time, joined and returned."""
    context = get_context("fork")  # _deaf_worker runs as it is, nothing pickled
    ready = context.Event()
    sleeper = context.Process(target=time.sleep, args=(60,))
    deaf = context.Process(target=_deaf_worker, args=(ready,))
    sleeper.start()
    deaf.start()
    try:
        assert ready.wait(timeout=30)
        first, second = Worker(sleeper), Worker(deaf)
        assert stop(first, second, seconds=0.5) == [second]
        assert (sleeper.exitcode, deaf.exitcode) == (-signal.SIGTERM, -signal.SIGKILL)
    finally:
        for process in (sleeper, deaf):
            process.kill()
            process.join()
