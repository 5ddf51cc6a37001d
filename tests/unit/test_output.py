"""harness/output.py: reading a child's pipe with a deadline, never for ever."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness.output import Drained, read_line
from harness.stopping import kill

SILENT = "import time; time.sleep(60)"
CHATTY = "import sys; print('ready', flush=True); sys.stdout.write('x' * 2**20); print('end')"
TWO_LINES = "print('ready', flush=True); print('held', flush=True); import time; time.sleep(60)"


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[Any]]]:
    started: list[subprocess.Popen[Any]] = []
    yield started
    for child in started:
        kill(child)
        if child.stdout is not None:
            child.stdout.close()


def _python(children: list[subprocess.Popen[Any]], source: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True)
    children.append(child)
    return child


def test_a_silent_child_ends_the_read_at_its_deadline_not_never(
    children: list[subprocess.Popen[Any]],
) -> None:
    """stdout.readline() here waited as long as the child lived: a test hung with it."""
    child = _python(children, SILENT)
    assert child.stdout is not None
    began = time.monotonic()
    line = read_line(child.stdout, 0.5)
    waited = time.monotonic() - began
    assert line == "", f"a child that said nothing was read as {line!r}"
    assert 0.5 <= waited < 5, f"a read with a deadline of 0.5 s took {waited:.2f} s"
    assert child.poll() is None, "the read ended at its deadline, not at the child's end"


def test_lines_are_read_one_at_a_time_none_lost_to_a_buffer(
    children: list[subprocess.Popen[Any]],
) -> None:
    """Both lines may come in one write to the pipe; the first read_line leaves the second."""
    child = _python(children, TWO_LINES)
    assert child.stdout is not None
    assert read_line(child.stdout, 30) == "ready\n"
    assert read_line(child.stdout, 30) == "held\n"


def test_a_child_that_ended_gives_what_it_said_without_waiting(
    children: list[subprocess.Popen[Any]],
) -> None:
    child = _python(children, "import sys; sys.stdout.write('half')")
    assert child.stdout is not None
    began = time.monotonic()
    assert read_line(child.stdout, 30) == "half"
    assert time.monotonic() - began < 10, "the read waited past the child's end"


def test_a_binary_pipe_is_read_alike(children: list[subprocess.Popen[Any]]) -> None:
    child = subprocess.Popen([sys.executable, "-c", TWO_LINES], stdout=subprocess.PIPE)
    children.append(child)
    assert child.stdout is not None
    assert read_line(child.stdout, 30) == "ready\n"


def test_a_child_saying_more_than_a_pipe_holds_goes_on_to_its_end_when_drained(
    children: list[subprocess.Popen[Any]],
) -> None:
    """A test that read only the ready line of a chatty child (`boxmq serve` logging) left it
    stopped in a write once the pipe's 64 KiB were full: this child never ended so."""
    child = _python(children, CHATTY)
    assert child.stdout is not None
    assert read_line(child.stdout, 30) == "ready\n"
    said = Drained(child.stdout)
    assert child.wait(timeout=30) == 0, "the child stopped in a write to its full pipe"
    assert said.text() == "x" * 2**20 + "end\n"
