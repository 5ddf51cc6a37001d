"""Consumers that wait cost nothing: threads blocked in `receive` must not wake each other.

Two consumer threads of one queue in one process once woke each other in turn for as long as
they waited, a whole core of CPU (found by the XMPP component, which runs one per subscriber).
"""

from __future__ import annotations

import gc
import sys
import threading
import time

from tests.waiting import until, waited

import boxmq
from boxmq.errors import Closed


def _blocked(thread: threading.Thread) -> bool:
    """Whether `thread` sits in the queue's wait for news: its innermost Python call is the
    poll of the process's inotify instance (`poll`), or the condition the other consumers or
    watchers sleep on (`wait`), called from a `_wait`, not the scan before it."""
    # CPython 3.11's sys._current_frames holds the interpreter's thread-state lock while it
    # makes frame objects; a collection started by one of those allocations that frees a
    # threading.local takes the same lock again and the process hangs (python/cpython#106883,
    # fixed in 3.12). It hung this suite under load, so no collection may start inside it.
    gc.disable()
    try:
        frames = sys._current_frames()
    finally:
        gc.enable()
    frame = frames.get(thread.ident or 0)
    return (
        frame is not None
        and frame.f_code.co_name in ("poll", "wait")
        and frame.f_back is not None
        and frame.f_back.f_code.co_name == "_wait"
    )


def _cpu(threads: list[threading.Thread]) -> float:
    """The CPU seconds `threads` used so far, theirs alone: the process's figure counted
    every thread of the test run too (a paho loop or a Spark thread another test left)."""
    return sum(
        time.clock_gettime(time.pthread_getcpuclockid(thread.ident or 0)) for thread in threads
    )


def test_two_waiting_consumers_use_almost_no_cpu(box: boxmq.Box) -> None:
    queue = box.queue("jobs")
    consumers = [queue.consumer(f"c{n}") for n in range(2)]
    got: list[bytes] = []

    def wait(consumer: boxmq.Consumer) -> None:
        try:
            while True:
                message = consumer.receive(timeout=5)
                if message is not None:
                    message.ack()  # before it is counted: the main thread closes once it sees it
                    got.append(message.body)
        except Closed:
            return

    threads = [threading.Thread(target=wait, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    # A fixed 0.2 s could end before a loaded machine got there.
    until(
        lambda: all(_blocked(thread) for thread in threads),
        "the consumers never sat in their wait",
        every=0.01,
    )
    gc.collect()  # a collection the setup's garbage triggers is not the waiting consumers' CPU
    cpu = _cpu(threads)
    time.sleep(1.0)
    idle = _cpu(threads) - cpu
    queue.put(b"still served")  # and waiting did not stop them from receiving
    waited(lambda: got, every=0.01)
    for consumer in consumers:
        consumer.close()
    for thread in threads:
        thread.join(10)
    assert got == [b"still served"]
    assert idle < 0.3, f"two idle consumers used {idle:.2f} s of CPU in 1 s"
