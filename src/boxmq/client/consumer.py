"""A named consumer of one queue: receive locked messages, one per free slot."""

from __future__ import annotations

from boxmq.client.live_queue import LiveQueue
from boxmq.client.message import Message
from boxmq.client.receiver import Receiver, check_most
from boxmq.core.durations import check_wait
from boxmq.errors import check_flag
from boxmq.model import ConsumerId

__all__ = ["Consumer"]


class Consumer(Receiver):
    """Holds at most `max_in_flight` locked messages (XEP-0254 `queue_requests`).

    Closing it is "owner gone": whatever it still holds goes back to the other consumers at
    once. A consumer whose process dies is noticed by the other processes on the root.
    """

    def __init__(self, live: LiveQueue, name: ConsumerId) -> None:
        self._live = live
        self.name = name
        self.queue = live.queue
        self._closed = False

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, locked for us; None if none came within `timeout` seconds."""
        return self._live.receive(self.name, check_wait(timeout))  # NaN: never reached

    def receive_ready(self, *, most: int | None = None) -> list[Message]:
        """Every message locked for us now, up to our free slots (and `most`): one look at
        the folder for all of them (a loop of receive_nowait looks once more after the
        last). What was claimed for us beyond `most` waits for the next receive."""
        check_most(most)
        return self._live.receive_ready(self.name, most)

    def set_limits(self, *, max_in_flight: int, lock_timeout: float) -> None:
        self._live.set_limits(self.name, max_in_flight=max_in_flight, lock_timeout=lock_timeout)

    def pause(self, *, keep_claimed: bool = False) -> None:
        """Take nothing more until `resume`; what was claimed for us and not received goes
        back to the other consumers (unless `keep_claimed`), what we received stays ours."""
        check_flag("keep_claimed", keep_claimed)
        self._live.pause(self.name, keep_claimed=keep_claimed)

    def resume(self) -> None:
        self._live.resume(self.name)

    def rest(self) -> None:
        """We receive nothing for a while (an MQTT client away): the queue's watcher is
        closed once every consumer of it rests, until a receive (LiveQueue.rest)."""
        self._live.rest(self.name)

    def take_back(self) -> int:
        """For a consumer that outlives its process: what another process's consumer of our
        name took and left locked to it since we attached is ours again (LiveQueue.take_back);
        how many."""
        return self._live.take_back(self.name)

    def holding(self) -> int:
        """How many messages we hold locked (received, or claimed for a receive to come)."""
        return self._live.holding(self.name)

    def has_more(self) -> bool:
        """Whether a receive might get something no news told of (LiveQueue.has_more)."""
        return self._live.has_more(self.name)

    def made_before_fork(self) -> bool:
        """Whether we are the parent's, in a forked child: what we raise then says so."""
        return self._live.forked

    def close(self, *, keep_locks: bool = False) -> None:
        """keep_locks: for a consumer that outlives its process (a subscriber with
        process_bound=False), what it received stays locked to it, on disk."""
        check_flag("keep_locks", keep_locks)
        if not self._closed:
            self._closed = True
            self._live.detach(self.name, keep_locks=keep_locks)
