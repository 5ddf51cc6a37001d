"""The password checks of CONNECTs: a password's hash takes tens of milliseconds (scrypt), so
it is checked in a thread, never on the loop, where clients sending wrong passwords would
stall every other one. Two at a time at most, beside the loop and the disk work; those that
wait for a thread take their turn by the client's address: a host sending CONNECTs with
guessed passwords as fast as they are answered kept every other client's login waiting
behind its own (100 of them: 6.5-9.3 s, near connect_timeout)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

from boxmq.mqtt.fair import FairQueue

__all__ = ["PasswordChecks"]

_CHECKERS: Final = 2  # password checks at once, each in a thread of its own
_Check = tuple[Callable[[], bool], Callable[[Future[bool]], None]]  # a check, and its answer


class PasswordChecks:
    """The checks under way (`running`) and those waiting for a thread, by address. A check
    answers from its thread (`checked`, given its future); the broker tells `ended` on the
    loop, which gives the thread to the next."""

    def __init__(self) -> None:
        self._threads = ThreadPoolExecutor(
            max_workers=_CHECKERS, thread_name_prefix="boxmq-mqtt-auth"
        )
        self._waiting: FairQueue[str, _Check] = FairQueue()
        self.running = 0

    def __len__(self) -> int:
        """The checks under way or waiting."""
        return self.running + len(self._waiting)

    def put(
        self, peer: str, check: Callable[[], bool], checked: Callable[[Future[bool]], None]
    ) -> None:
        """`check` the password of a CONNECT from `peer` (`host:port`) in its turn."""
        self._waiting.put(_host(peer), (check, checked))
        self._start()

    def ended(self) -> None:
        """On the loop: a check's answer came."""
        self.running -= 1
        self._start()

    def _start(self) -> None:
        """Password checks given their threads, in turn by address, while one is free."""
        while self.running < _CHECKERS and (job := self._waiting.take()):
            check, checked = job
            self.running += 1
            self._threads.submit(check).add_done_callback(checked)

    def shutdown(self) -> None:
        """What waits its turn is dropped, as cancel_futures drops what waits in the pool: a
        check under way that ends now would give the next one to the shut-down pool."""
        self._waiting = FairQueue()
        self._threads.shutdown(wait=False, cancel_futures=True)


def _host(peer: str) -> str:
    """The address of a client's `host:port` (an IPv6 one holds colons too), whose password
    checks take their turn together."""
    host, colon, _ = peer.rpartition(":")
    return host if colon else peer
