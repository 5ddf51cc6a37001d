"""Temporary files: what a write puts beside its target before renaming it into place.

Every whole-file write of the store (a retained message, a side file, a subscription or
session record, a dropbox's setting, an exactly-once marker) writes `.tmp-<random>` in the
target's folder, then renames it. A process that dies between the two leaves the temporary
behind; nothing ever reads it (its name starts with a dot), and the sweep deletes it once it
is older than any write can take.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

__all__ = ["TEMPORARY_PREFIX", "remove_stale_temporaries", "removed_on_failure", "temporary_in"]

TEMPORARY_PREFIX = ".tmp-"


def temporary_in(folder: str) -> str:
    """A new temporary's path in `folder`: unique, and named so that readers pass it by and
    `remove_stale_temporaries` finds it if the write is never renamed into place."""
    # 128 random bits, as uuid4's; importing `uuid` (and `platform`) cost `boxmq put` 2 %.
    return os.path.join(folder, f"{TEMPORARY_PREFIX}{os.urandom(16).hex()}")


@contextlib.contextmanager
def removed_on_failure(temporary: str) -> Iterator[None]:
    """Delete `temporary` if the block (its write and its rename into place) fails, then
    re-raise: a refused write (a full disk) leaves nothing behind for the sweep, and a write
    repeated on every failure does not leave one temporary each time."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):  # never written, or renamed already
            os.unlink(temporary)
        raise


def remove_stale_temporaries(folders: Iterable[str], *, now: float, age: float) -> int:
    """Delete the temporaries older than `age` seconds in `folders` (not below them); how
    many went. Missing folders are passed by."""
    removed = 0
    for folder in folders:
        with contextlib.suppress(FileNotFoundError), os.scandir(folder) as entries:
            for entry in entries:
                if not entry.name.startswith(TEMPORARY_PREFIX):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if now - entry.stat(follow_symlinks=False).st_mtime > age:
                        os.unlink(entry.path)
                        removed += 1
    return removed
