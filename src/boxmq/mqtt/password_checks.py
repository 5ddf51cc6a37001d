"""The password checks of CONNECTs: a password's hash takes tens of milliseconds (scrypt), so
it is checked in a thread, never on the loop, where clients sending wrong passwords would
stall every other one. Two at a time at most, beside the loop and the disk work; those that
wait for a thread take their turn by the client's address: a host sending CONNECTs with
guessed passwords as fast as they are answered kept every other client's login waiting
behind its own (100 of them: 6.5-9.3 s, near connect_timeout)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Final

from boxmq.mqtt.fair import FairQueue
from boxmq.mqtt.peer_address import PeerAddress

__all__ = ["PasswordChecks"]

_CHECKERS: Final = 2  # password checks at once, each in a thread of its own
_Answer = Callable[[Future[bool]], None]  # a check's answer, on the loop
_Check = tuple[Callable[[], bool], _Answer]  # a check (in a thread), and its answer


class PasswordChecks:
    """The checks under way (`running`) and those waiting for a thread, by address. A check's
    answer is given its future on the loop, once its thread went to the next check."""

    def __init__(self) -> None:
        self._threads = ThreadPoolExecutor(
            max_workers=_CHECKERS, thread_name_prefix="boxmq-mqtt-auth"
        )
        self._waiting: FairQueue[str, _Check] = FairQueue()
        self.running = 0

    def __len__(self) -> int:
        """The checks under way or waiting."""
        return self.running + len(self._waiting)

    def put(self, peer: PeerAddress, check: Callable[[], bool], answer: _Answer) -> None:
        """On the loop: `check` the password of a CONNECT from `peer` in its turn (its host's),
        in a thread, and `answer` with its future on the loop."""
        self._waiting.put(peer.host, (check, answer))
        self._start()

    def _start(self) -> None:
        """Password checks given their threads, in turn by address, while one is free."""
        while self.running < _CHECKERS and (job := self._waiting.take()):
            check, answer = job
            self.running += 1
            done = partial(_back_to, asyncio.get_running_loop(), self._ended, answer)
            self._threads.submit(check).add_done_callback(done)

    def _ended(self, answer: _Answer, future: Future[bool]) -> None:
        """On the loop: a check is over; its thread goes to the next, then it is answered."""
        self.running -= 1
        self._start()
        answer(future)

    def shutdown(self) -> None:
        """What waits its turn is dropped, as cancel_futures drops what waits in the pool: a
        check under way that ends now would give the next one to the shut-down pool."""
        self._waiting = FairQueue()
        self._threads.shutdown(wait=False, cancel_futures=True)


def _back_to(
    loop: asyncio.AbstractEventLoop,
    ended: Callable[[_Answer, Future[bool]], None],
    answer: _Answer,
    future: Future[bool],
) -> None:
    """In the check's thread: its end goes to the loop."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to answer
        loop.call_soon_threadsafe(ended, answer, future)
