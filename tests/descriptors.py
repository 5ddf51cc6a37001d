"""A process out of file descriptors, for real, for tests: its soft limit lowered to a little
over the descriptors open, and files opened up to it (the kernel then says EMFILE), all given
back at the end. What runs in other threads of the test process (a server in a thread) meets
the same limit, as a broker that ran out meets it. And the deleted files a process holds
open, whose blocks are freed only once they are closed."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from pathlib import Path

__all__ = ["deleted_files_open", "no_descriptor_left"]


@contextlib.contextmanager
def no_descriptor_left(free: int = 0) -> Iterator[None]:
    """Every descriptor this process may open taken but `free`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    taken: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 16, hard))
    try:
        with contextlib.suppress(OSError):  # EMFILE, the end
            while True:
                taken.append(os.open(os.devnull, os.O_RDONLY))
        for _ in range(free):
            os.close(taken.pop())
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def deleted_files_open(root: Path) -> list[str]:
    """The files under `root` this process holds open though they were deleted (Linux)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(root)) and target.endswith(" (deleted)"):
                held.append(target)
    return held
