"""Reading what a child process says on a pipe as it says it, for the tests that SIGKILL it
at the moment it told its user something or wait for it to say it is ready: a deadline on
the whole read, never a blocking read that a silent child would hang for ever."""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["Drained", "read_line", "read_until"]


def read_until(
    stream: IO[Any], enough: Callable[[bytes], bool], seconds: float, *, most: int = 65536
) -> bytes:
    """What came on `stream` until `enough` of it holds, it closes (the child ended) or
    `seconds` pass; the caller checks which. The text may come in several writes, and one
    read may bring more than `enough` asked for (up to `most` bytes): all of it is returned.
    It reads the pipe itself, past the stream's buffer, so a text stream does as well as a
    binary one as long as nothing else reads it before."""
    said = b""
    deadline = time.monotonic() + seconds
    while not enough(said) and (left := deadline - time.monotonic()) > 0:
        if not select.select([stream], [], [], left)[0]:
            break
        if not (more := os.read(stream.fileno(), most)):
            break  # its output closed: it ended
        said += more
    return said


def read_line(stream: IO[Any], seconds: float) -> str:
    """The next line on `stream` with its newline, as `stream.readline()` says it, or what
    came of it when the child ended or `seconds` passed (no newline then: the caller's
    assertion shows it). A byte at a time, so that nothing after the line is taken from the
    pipe: the next read_line, or the child's last words read at its end, still find it."""
    return read_until(stream, lambda said: said.endswith(b"\n"), seconds, most=1).decode()


class Drained:
    """The rest of what a child says on `stream`, read by a thread as it comes. A pipe holds
    64 KiB on Linux: a chatty child (`boxmq serve` logging) whose pipe the test reads only at
    the start, or only once the child ended, stops in its next write once that is full, and
    the test then waits on a server that no longer serves. Nothing else may read `stream`
    from here on (read_until and read_line before are fine: they leave its buffer empty)."""

    def __init__(self, stream: IO[Any]) -> None:
        # Through the buffered stream, never its descriptor: the stream's close waits for
        # a read in progress, where a descriptor closed under the thread could be reused by
        # another file, the thread then reading that.
        self._source: Any = getattr(stream, "buffer", stream)
        self._said: list[bytes] = []
        self._thread = threading.Thread(target=self._read, name="drained", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while more := self._source.read1(65536):
                self._said.append(more)
        except (OSError, ValueError):  # closed by its owner: nothing more can come
            pass

    def text(self, seconds: float = 30) -> str:
        """All that came once the child ended (its pipe closed), waiting up to `seconds` for
        that end; what came until then if it did not (the caller's assertion shows it)."""
        self._thread.join(seconds)
        return b"".join(self._said).decode(errors="replace")
