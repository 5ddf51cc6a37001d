"""The lock that lets retained publishes run together and a subscription's copies alone."""

from __future__ import annotations

import threading
import time

from tests.waiting import until

from boxmq.client.shared_lock import SharedLock


def _entered(lock: SharedLock, how: str, inside: threading.Event, leave: threading.Event) -> None:
    with lock.shared() if how == "shared" else lock.exclusive():
        inside.set()
        leave.wait(10)


def _start(lock: SharedLock, how: str) -> tuple[threading.Event, threading.Event]:
    inside, leave = threading.Event(), threading.Event()
    threading.Thread(target=_entered, args=(lock, how, inside, leave), daemon=True).start()
    return inside, leave


def _until_an_exclusive_one_waits(lock: SharedLock) -> None:
    """Until the exclusive holder just started waits in the lock: a started thread may not
    have run that far yet on a loaded machine, and a shared holder that came before it went
    in, as it may."""
    until(lambda: lock._waiting, "the exclusive holder never came to the lock", every=0.001)


def test_shared_holders_enter_together_and_an_exclusive_one_waits_for_all_of_them() -> None:
    lock = SharedLock()
    first_in, first_leave = _start(lock, "shared")
    second_in, second_leave = _start(lock, "shared")
    assert first_in.wait(10)
    assert second_in.wait(10)
    alone_in, alone_leave = _start(lock, "exclusive")
    _until_an_exclusive_one_waits(lock)
    assert not alone_in.wait(0.2)
    first_leave.set()
    assert not alone_in.wait(0.2)  # one shared holder is still in
    newcomer_in, newcomer_leave = _start(lock, "shared")
    assert not newcomer_in.wait(0.2)  # a new shared holder waits behind the exclusive one
    second_leave.set()
    assert alone_in.wait(10)
    assert not newcomer_in.wait(0.2)  # nobody enters beside an exclusive holder
    alone_leave.set()
    assert newcomer_in.wait(10)
    newcomer_leave.set()


def test_a_thread_holding_a_share_takes_another_while_an_exclusive_one_waits() -> None:
    """A retained publish made from a hand-over inside another one: waiting there would wait
    for the exclusive holder, which waits for this very thread."""
    lock = SharedLock()
    outer_in, nested_in, leave = threading.Event(), threading.Event(), threading.Event()
    go_on = threading.Event()

    def nested() -> None:
        with lock.shared():
            outer_in.set()
            go_on.wait(10)
            with lock.shared():
                nested_in.set()
            leave.wait(10)

    threading.Thread(target=nested, daemon=True).start()
    assert outer_in.wait(10)
    alone_in, alone_leave = _start(lock, "exclusive")
    _until_an_exclusive_one_waits(lock)
    assert not alone_in.wait(0.2)
    go_on.set()
    assert nested_in.wait(10)
    assert not alone_in.wait(0.2)
    leave.set()
    assert alone_in.wait(10)
    alone_leave.set()


def test_a_steady_run_of_shared_holders_lets_a_waiting_exclusive_one_in() -> None:
    """Two threads that take the lock shared over and over, each hold overlapping the other's
    (retained publishes flushing in turn): an exclusive one still gets in, and soon."""
    lock = SharedLock()
    stop = threading.Event()

    def publish_retained() -> None:
        while not stop.is_set():
            with lock.shared():
                time.sleep(0.002)  # a flush

    workers = [threading.Thread(target=publish_retained, daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.05)
        alone_in, alone_leave = _start(lock, "exclusive")
        assert alone_in.wait(10)
        alone_leave.set()
    finally:
        stop.set()
        for worker in workers:
            worker.join(10)
