"""Killing a process at a chosen change to the file system, deterministically, for tests of
what a restart (or a replay) makes of the files it left."""

from __future__ import annotations

import builtins
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


_WRITING_MODES = frozenset("wxa")  # open()'s modes that may create their file


class Killed(BaseException):
    """The process died here (SIGKILL: nothing after this step ran)."""


def kill_at(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Make the `step`-th change to the file system (1 = the first) kill the process: every
    change before it is done; it and everything after it are not (a cleanup on the way out,
    which a SIGKILL never runs, is killed too, until the caller's monkeypatch is undone).

    A file's creation (`os.open` with O_CREAT, `open` for writing: a put's file in working/,
    a temporary, a side file, a marker) is a change too, which kills once the file is made,
    empty, before anything is written into it: what a SIGKILL between the open and its
    write leaves. (The state just before it, the file not made, is no step of its own: it
    differs from this one by the empty file alone.)"""
    done = 0

    def killed_now() -> bool:
        nonlocal done
        done += 1
        return done >= step

    for module, name in [*((os, each) for each in _CHANGES), *_OTHER_CHANGES]:
        real = getattr(module, name)
        if real is None:  # no renameat2 here
            continue

        def change(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if killed_now():
                raise Killed
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, change)

    real_os_open, real_open = os.open, builtins.open

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_os_open(path, flags, *args, **kwargs)
        if flags & os.O_CREAT and killed_now():
            os.close(fd)
            raise Killed
        return fd

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened = real_open(file, mode, *args, **kwargs)
        named = isinstance(file, (str, bytes, os.PathLike))  # not a descriptor's
        if named and _WRITING_MODES & set(mode) and killed_now():
            opened.close()
            raise Killed
        return opened

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)


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
