"""Process tokens: this process lives, a finished one does not, a recycled pid is told apart."""

from __future__ import annotations

import subprocess

from boxmq.store.process import process_alive, process_token


def test_this_process_is_alive() -> None:
    assert process_alive(process_token()) is True


def test_a_finished_process_is_dead() -> None:
    child = subprocess.Popen(["true"])
    token = process_token(child.pid)
    child.wait()
    assert process_alive(token) is False


def test_a_recycled_pid_is_not_the_old_process() -> None:
    host, pid, start = process_token().split("-")
    assert process_alive(f"{host}-{pid}-{int(start) + 1}") is False


def test_another_host_cannot_be_judged() -> None:
    _, pid, start = process_token().split("-")
    assert process_alive(f"ffffffff-{pid}-{start}") is None
    assert process_alive("garbage") is None


def test_a_pid_no_process_can_have_is_dead() -> None:
    """A lock suffix a script wrote may name this host with any digits for a pid: the sweep
    and every `get` judged it, and a pid past a C long raised OverflowError out of them (os.kill),
    one of 0 signalled this process's group and was taken for alive with a start of 0."""
    host = process_token().split("-")[0]
    for pid in ("0", "00", "4194305", "9999999999999999999", "9" * 40):
        for start in ("0", "1"):
            assert process_alive(f"{host}-{pid}-{start}") is False, (pid, start)
    assert process_alive(f"{host}-\u0663-1") is None  # no pid: a digit, but not 0-9
