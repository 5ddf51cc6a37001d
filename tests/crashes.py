"""Killing a process at a chosen change to the file system, deterministically, for tests of
what a restart (or a replay) makes of the files it left."""

from __future__ import annotations

import os
from typing import Any

import pytest

from boxmq.store import spares

__all__ = ["Killed", "kill_at", "take_everything"]

_CHANGES = ("link", "unlink", "rename", "replace", "mkdir", "rmdir")
# The change made without `os`: every rename that replaces none (`rename_noreplace`, into a
# dropbox, a spare's, a side file's, an exactly-once marker's), whichever module imported it,
# calls renameat2 through this one global. Where libc lacks it, it is a link and an unlink.
_OTHER_CHANGES = ((spares, "_RENAMEAT2"),)


class Killed(BaseException):
    """The process died here (SIGKILL: nothing after this step ran)."""


def kill_at(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Make the `step`-th change to the file system (1 = the first) kill the process: every
    change before it is done; it and everything after it are not (a cleanup on the way out,
    which a SIGKILL never runs, is killed too, until the caller's monkeypatch is undone)."""
    done = 0
    for module, name in [*((os, each) for each in _CHANGES), *_OTHER_CHANGES]:
        real = getattr(module, name)
        if real is None:  # no renameat2 here
            continue

        def change(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            nonlocal done
            done += 1
            if done >= step:
                raise Killed
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, change)


def take_everything(dropboxes: list[str]) -> dict[str, list[str]]:
    """A consumer claims and acknowledges (deletes) every ready message: its names per
    dropbox."""
    taken: dict[str, list[str]] = {}
    for dropbox in dropboxes:
        target = os.path.join(dropbox, "target")
        taken[dropbox] = []
        for name in os.listdir(target):
            os.unlink(os.path.join(target, name))
            taken[dropbox].append(name)
    return taken
