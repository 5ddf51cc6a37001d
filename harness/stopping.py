"""The one way the tests, the benchmarks and the Prosody harness stop the child processes
they start (`boxmq serve`, Prosody, mosquitto, mosquitto_sub, workers): a graceful stop
first, a SIGKILL past its time, and each process reaped, so none is left a zombie holding
its pipes until the garbage collector finds its Popen."""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any

__all__ = ["kill", "stop"]


def stop(*processes: subprocess.Popen[Any], seconds: float) -> list[subprocess.Popen[Any]]:
    """SIGTERM (a broker's graceful stop) to each of `processes` still running,
    all at once so their stops overlap, then wait for each until `seconds` after that
    signal; SIGKILL those not over by then, and wait for them too. Returns the processes it
    had to kill, in the order given, for the caller to say so in its own words."""
    for process in processes:
        process.send_signal(signal.SIGTERM)  # Popen's own: nothing for a process already reaped
    deadline = time.monotonic() + seconds
    overdue: list[subprocess.Popen[Any]] = []
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            overdue.append(process)
    kill(*overdue)
    return overdue


def kill(*processes: subprocess.Popen[Any]) -> None:
    """SIGKILL each of `processes` still running, and wait for each: a killed process not
    waited for stays a zombie, its pipes open, until its Popen is collected."""
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()  # SIGKILL cannot be caught: the wait is short
