"""The C library, for the few calls `os` does not offer: syncfs, renameat2, inotify.

Loaded once per process: `ctypes.util.find_library` runs `ldconfig -p` in a subprocess (1.7 ms
here), and it used to run for every queue a process watched as well as at import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

__all__ = ["function", "last_error"]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None


def function(name: str) -> ctypes._NamedFuncPointer | None:
    """The C library's `name`; None where the library or the call is missing (not Linux, an
    old kernel or libc)."""
    libc = _libc()
    try:
        return None if libc is None else getattr(libc, name)
    except AttributeError:
        return None


def last_error(filename: str, filename2: str | None = None) -> OSError:
    """The OSError (FileNotFoundError, FileExistsError, ...) for the errno the last call set."""
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code), filename, None, filename2)
