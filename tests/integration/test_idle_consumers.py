"""Consumers that wait cost nothing: threads blocked in `receive` must not wake each other.

Two consumer threads of one queue in one process once woke each other in turn for as long as
they waited, a whole core of CPU (found by the XMPP component, which runs one per subscriber).
"""

from __future__ import annotations

import threading
import time

import boxmq
from boxmq.errors import Closed


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
    time.sleep(0.2)  # both are waiting now
    cpu = time.process_time()
    time.sleep(1.0)
    idle = time.process_time() - cpu
    queue.put(b"still served")  # and waiting did not stop them from receiving
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    for consumer in consumers:
        consumer.close()
    for thread in threads:
        thread.join(10)
    assert got == [b"still served"]
    assert idle < 0.3, f"two idle consumers used {idle:.2f} s of CPU in 1 s"
