"""The lock that lets retained publishes run together and a subscription's copies alone."""

from __future__ import annotations

import threading

from boxmq.client.shared_lock import SharedLock


def _entered(lock: SharedLock, how: str, inside: threading.Event, leave: threading.Event) -> None:
    with lock.shared() if how == "shared" else lock.exclusive():
        inside.set()
        leave.wait(10)


def _start(lock: SharedLock, how: str) -> tuple[threading.Event, threading.Event]:
    inside, leave = threading.Event(), threading.Event()
    threading.Thread(target=_entered, args=(lock, how, inside, leave), daemon=True).start()
    return inside, leave


def test_shared_holders_enter_together_and_an_exclusive_one_waits_for_all_of_them() -> None:
    lock = SharedLock()
    first_in, first_leave = _start(lock, "shared")
    second_in, second_leave = _start(lock, "shared")
    assert first_in.wait(10)
    assert second_in.wait(10)
    alone_in, alone_leave = _start(lock, "exclusive")
    assert not alone_in.wait(0.2)
    first_leave.set()
    assert not alone_in.wait(0.2)  # one shared holder is still in
    with lock.shared():  # a shared holder may still enter while the exclusive one waits
        pass
    second_leave.set()
    assert alone_in.wait(10)
    late_in, late_leave = _start(lock, "shared")
    assert not late_in.wait(0.2)  # nobody enters beside an exclusive holder
    alone_leave.set()
    assert late_in.wait(10)
    late_leave.set()
