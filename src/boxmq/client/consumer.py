"""A named consumer of one queue: receive locked messages, one per free slot."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType

from boxmq.client.live_queue import LiveQueue
from boxmq.client.message import Message
from boxmq.errors import Closed
from boxmq.model import ConsumerId

__all__ = ["Consumer"]


class Consumer:
    """Holds at most `max_in_flight` locked messages (XEP-0254 `queue_requests`).

    Closing it is "owner gone": whatever it still holds goes back to the other consumers at
    once. A consumer whose process dies is noticed by the other processes on the root.
    """

    def __init__(self, live: LiveQueue, name: ConsumerId) -> None:
        self._live = live
        self.name = name
        self.queue = live.name
        self._closed = False

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, locked for us; None if none came within `timeout` seconds."""
        delivery = self._live.receive(self.name, timeout)
        if delivery is None:
            return None
        return Message(
            queue=self.queue,
            envelope=delivery.envelope,
            body=delivery.body,
            consumer=self.name,
            lock_deadline=delivery.deadline,
            _settler=self._live,
        )

    def receive_nowait(self) -> Message | None:
        return self.receive(timeout=0)

    def __iter__(self) -> Iterator[Message]:
        """Messages as they come, blocking while there are none, until the consumer closes."""
        while True:
            try:
                message = self.receive()
            except Closed:
                return
            if message is not None:
                yield message

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._live.detach(self.name)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
