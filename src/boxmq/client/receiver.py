"""What every source of messages offers: receive with a timeout, iterate, close."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from types import TracebackType
from typing import Self

from boxmq.client.message import Message
from boxmq.errors import Closed, InvalidArgument, check_count

__all__ = ["Receiver", "check_most"]


class Receiver(ABC):
    @abstractmethod
    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message; None if none came within `timeout` seconds (None: wait on)."""

    @abstractmethod
    def close(self) -> None: ...

    def set_limits(self, *, max_in_flight: int, lock_timeout: float) -> None:
        """Change how many locked messages it may hold, and for how long each (the ones it
        holds keep their deadlines). Only receivers that lock messages have limits."""
        raise InvalidArgument(f"{type(self).__name__} holds no locks: it has no limits to set")

    def receive_nowait(self) -> Message | None:
        return self.receive(timeout=0)

    def receive_ready(self, *, most: int | None = None) -> list[Message]:
        """Every message that is there for it now, without waiting (maybe none); at most
        `most` of them if given."""
        check_most(most)
        ready: list[Message] = []
        while most is None or len(ready) < most:
            message = self.receive_nowait()
            if message is None:
                break
            ready.append(message)
        return ready

    def __iter__(self) -> Iterator[Message]:
        """Messages as they come, blocking while there are none, until closed."""
        while True:
            try:
                message = self.receive()
            except Closed:
                return
            if message is not None:
                yield message

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def check_most(most: int | None) -> None:
    """InvalidArgument unless `most` is None or an int >= 0: -1 gave nothing (where "all"
    may have been meant), 1.5 as many as 2, "3" a TypeError from a comparison."""
    check_count("most", most, least=0, none=True)
