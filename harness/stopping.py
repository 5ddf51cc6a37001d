"""The one way the tests, the benchmarks and the Prosody harness stop the child processes
they start (`boxmq serve`, Prosody, mosquitto, mosquitto_sub, workers): a graceful stop
first, a SIGKILL past its time, and each process reaped, so none is left a zombie holding
its pipes until the garbage collector finds its Popen. A subprocess.Popen is stopped as it
is; a multiprocessing worker through `Worker`, which gives it Popen's signal, wait and kill."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from multiprocessing.process import BaseProcess
from typing import Protocol, TypeVar

__all__ = ["KILLED_WITHIN", "Stoppable", "Worker", "kill", "reap_killed", "stop"]


class Stoppable(Protocol):
    """What stop and kill need of a process: subprocess.Popen's signal, wait and kill."""

    @property
    def pid(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


P = TypeVar("P", bound=Stoppable)


class Worker:
    """A started multiprocessing process as a Stoppable: signalled only while it runs (as
    Popen does), waited for by a join that raises TimeoutExpired as Popen's wait does, so
    stop and kill treat it as they treat a Popen."""

    def __init__(self, process: BaseProcess) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        assert self.process.pid is not None, "a worker not started"
        return self.process.pid

    def send_signal(self, sig: int) -> None:
        if self.process.is_alive():  # not reaped, so its pid is still its own
            os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(str(self.process.name), timeout or 0.0)
        return self.process.exitcode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# How long a process SIGKILLed may take to be gone. SIGKILL cannot be caught, so it takes
# milliseconds; one still there after this is stuck in the kernel (an uninterruptible wait on
# a hung disk or mount) and a wait without end would hang the test run or the benchmark in
# silence: it is an error, naming the process.
KILLED_WITHIN = 10.0


def stop(*processes: P, seconds: float) -> list[P]:
    """SIGTERM (a broker's graceful stop) to each of `processes` still running,
    all at once so their stops overlap, then wait for each until `seconds` after that
    signal; SIGKILL those not over by then, and wait for them too (kill: RuntimeError for one
    still there KILLED_WITHIN after). Returns the processes it had to kill, in the order
    given, for the caller to say so in its own words."""
    for process in processes:
        process.send_signal(signal.SIGTERM)  # Popen's own: nothing for a process already reaped
    overdue = _not_over_within(processes, seconds)
    kill(*overdue)
    return overdue


def kill(*processes: Stoppable, seconds: float = KILLED_WITHIN) -> None:
    """SIGKILL each of `processes` still running, and wait for each: a killed process not
    waited for stays a zombie, its pipes open, until its Popen is collected. RuntimeError,
    naming them, for those not gone within `seconds` (reap_killed)."""
    for process in processes:
        process.kill()
    reap_killed(*processes, seconds=seconds)


def reap_killed(*processes: Stoppable, seconds: float = KILLED_WITHIN) -> None:
    """Wait for each of `processes`, SIGKILLed already (by kill, or to their process group by
    the caller), until `seconds` after the call; RuntimeError naming by pid those not gone by
    then, once the others are reaped. The wait was without end: a process stuck in the kernel
    hung its caller for ever, saying nothing."""
    if stuck := _not_over_within(processes, seconds):
        pids = ", ".join(str(process.pid) for process in stuck)
        raise RuntimeError(
            f"pid {pids} still running {seconds:g} s after SIGKILL (stuck in the kernel? "
            "its State in /proc/PID/status says)"
        )


def _not_over_within(processes: tuple[P, ...], seconds: float) -> list[P]:
    """Wait for each of `processes` (reaping it) until `seconds` after the call, one deadline
    for all, so a slow one does not give the next more time; those still running then, in
    the order given."""
    deadline = time.monotonic() + seconds
    running: list[P] = []
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            running.append(process)
    return running
