"""The C library, for the few calls `os` does not offer: syncfs, renameat2, inotify.

Not searched for: the interpreter runs on it, so its functions are among the process's own
symbols (`CDLL(None)`, dlopen of the program). `ctypes.util.find_library` ran `ldconfig -p` in
a subprocess, at the import of the store: every `boxmq put` paid a fork and an exec for it.
"""

from __future__ import annotations

import ctypes
import functools
import os

__all__ = ["function", "last_error"]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
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
