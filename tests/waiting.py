"""Waiting for what another thread or process does in its own time (a server's loop, a
worker thread, a child process): a condition looked at every few milliseconds until it holds
or a deadline passes. One way for every test, so that none waits for ever, and a wait that
fails says what did not come.

Lines a child prints on a pipe are waited for with harness/output.read_line instead, and
lines logged by a server in this process with `logged`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

__all__ = ["WAIT", "logged", "until", "until_async", "waited"]

WAIT = 10.0  # seconds any single expected event may take


def waited(condition: Callable[[], object], *, within: float = WAIT, every: float = 0.05) -> bool:
    """Whether `condition` held within `within` seconds, looked at first at once and then
    every `every` seconds; for a test that asserts on what came either way."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
    return True


def until(
    condition: Callable[[], object],
    why: str | Callable[[], object],
    *,
    within: float = WAIT,
    every: float = 0.05,
) -> None:
    """Wait until `condition` holds (`waited`); past `within` seconds fail with `why`, or
    with what `why()` says then (the state that was not reached, read at the end)."""
    if not waited(condition, within=within, every=every):
        raise AssertionError(why() if callable(why) else why)


async def until_async(
    condition: Callable[[], object],
    why: str | Callable[[], object] = "timed out",
    *,
    within: float = WAIT,
    every: float = 0.01,
) -> None:
    """`until` for a test on the event loop the server runs on: the loop goes on while it
    waits."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(why() if callable(why) else why)
        await asyncio.sleep(every)


def logged(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    """The captured log lines holding `words`, in order (a server thread logs them: wait
    for them with `until`)."""
    return [message for message in caplog.messages if words in message]
