"""Reading what a child process says on a pipe as it says it, for the tests that SIGKILL it
at the moment it told its user something: a deadline on the whole read, never a blocking
read that a silent child would hang for ever."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import IO

__all__ = ["read_until"]


def read_until(stream: IO[bytes], enough: Callable[[bytes], bool], seconds: float) -> bytes:
    """What came on `stream` until `enough` of it holds, it closes (the child ended) or
    `seconds` pass; the caller checks which. The text may come in several writes, and one
    read may bring more than `enough` asked for: all of it is returned."""
    said = b""
    deadline = time.monotonic() + seconds
    while not enough(said) and (left := deadline - time.monotonic()) > 0:
        if not select.select([stream], [], [], left)[0]:
            break
        if not (more := os.read(stream.fileno(), 65536)):
            break  # its output closed: it ended
        said += more
    return said
