"""A separate OS process that consumes or produces on a root, for the multi-process tests.

python worker.py consume ROOT QUEUE NAME OUT            # ack all, log ids to OUT
python worker.py consume ROOT QUEUE NAME OUT --hold N   # lock N, log them, hang
python worker.py consume ... --lock S                   # a lock timeout of S s (60)
python worker.py consume ROOT QUEUE NAME OUT --gate G   # say "ready", start once file G exists
python worker.py produce ROOT QUEUE OUT THREADS         # put until killed; log what returned
python worker.py member ROOT FILTER NAME OUT N          # join a share group, lock N, hang
python worker.py assure ROOT QUEUE OUT                  # assured+deliver 0, 1, ... until killed
python worker.py cycle ROOT QUEUE OUT                   # put two, ack one, ... until killed
python worker.py batches ROOT QUEUE OUT FIRST           # put_many from FIRST until killed; log each
"""

from __future__ import annotations

import os
import sys
import threading
import time

import boxmq

IDLE_EXIT = 3.0  # a consumer stops after this long without a message
MAX_RUN = 120.0  # and no worker ever outlives this


def consume(
    root: str, queue: str, name: str, out: str, hold: int, gate: str | None, lock: float = 60.0
) -> None:
    with boxmq.open(root, fsync="never") as box, open(out, "a") as log:
        jobs = box.queue(queue)
        with jobs.consumer(name, max_in_flight=hold or 8, lock_timeout=lock) as consumer:
            if gate is not None:  # so that a slow start-up does not leave the other all the work
                print("ready", flush=True)
                end = time.monotonic() + MAX_RUN
                while not os.path.exists(gate) and time.monotonic() < end:
                    time.sleep(0.01)
            if hold:
                for _ in range(hold):
                    message = consumer.receive(timeout=10)
                    assert message is not None
                    log.write(message.id + "\n")
                log.flush()
                print("holding", flush=True)
                time.sleep(MAX_RUN)  # killed long before this
                return
            end = time.monotonic() + MAX_RUN
            while time.monotonic() < end:
                message = consumer.receive(timeout=IDLE_EXIT)
                if message is None:
                    break
                log.write(f"{message.id} {message.body.decode()}\n")
                message.ack()


def member(root: str, filter: str, name: str, out: str, hold: int) -> None:
    with (
        boxmq.open(root, fsync="never") as box,
        open(out, "a") as log,
        box.subscribe(filter, name, max_in_flight=hold, lock_timeout=60) as subscriber,
    ):
        for _ in range(hold):
            message = subscriber.receive(timeout=10)
            assert message is not None
            log.write(message.id + "\n")
        log.flush()
        print("holding", flush=True)
        time.sleep(MAX_RUN)  # killed long before this


def assure(root: str, queue: str, out: str) -> None:
    """Exactly-once steps in a loop, logging each one only after it returned."""
    with boxmq.open(root, fsync="always") as box, open(out, "a") as log:
        print("assuring", flush=True)
        for index in range(10**6):
            box.assured("meter", str(index), str(index).encode(), queue=queue)
            log.write(f"A {index}\n")
            log.flush()
            box.deliver("meter", str(index))
            log.write(f"D {index}\n")
            log.flush()


def cycle(root: str, queue: str, out: str) -> None:
    """Put two messages and ack one, again and again: the acked files become spares (kept
    open) that later puts write into. Each step is logged only after it returned, and an ack
    also before it is made ("R")."""
    with boxmq.open(root, fsync="always", keep_processed=False) as box, open(out, "a") as log:
        jobs = box.queue(queue)
        with jobs.consumer("cycler", max_in_flight=10**6, lock_timeout=600) as consumer:
            print("cycling", flush=True)
            end = time.monotonic() + MAX_RUN
            index = 0
            while time.monotonic() < end:
                for _ in range(2):
                    log.write(f"P {jobs.put(body_for(index))} {index}\n")
                    index += 1
                message = consumer.receive(timeout=10)
                assert message is not None
                # Said before the ack too: killed between the ack and its line, the message
                # is gone from the disk with no "A" to say why.
                log.write(f"R {message.id}\n")
                log.flush()
                message.ack()
                log.write(f"A {message.id}\n")
                log.flush()


def note_for(index: int) -> str | None:
    """A property too long for a file name (a side file) on every third message."""
    return f"{index}-" + "p" * 300 if index % 3 == 0 else None


def batches(root: str, queue: str, out: str, first: int) -> None:
    """put_many of 1 to 16 messages (some with a side file) again and again, under `always`;
    each batch logged, its ids and indices, only after put_many returned."""
    with boxmq.open(root, fsync="always") as box, open(out, "a") as log:
        jobs = box.queue(queue)
        print("batching", flush=True)
        index = first
        end = time.monotonic() + MAX_RUN
        while time.monotonic() < end:
            size = 1 + index % 16
            items = []
            for i in range(index, index + size):
                note = note_for(i)
                properties = None if note is None else {"note": note}
                items.append(boxmq.Outgoing(body_for(i), properties=properties))
            ids = jobs.put_many(items)
            log.write(" ".join(f"{m}={i}" for i, m in enumerate(ids, start=index)) + "\n")
            log.flush()
            index += size


def body_for(index: int) -> bytes:
    return (f"{index}:" + "x" * 4000).encode()  # several pages: a torn write would show


def produce(root: str, queue: str, out: str, threads: int) -> None:
    box = boxmq.open(root, fsync="always")
    jobs = box.queue(queue)
    log_lock = threading.Lock()
    log = open(out, "a")  # noqa: SIM115  (open until the process is killed)
    counter = iter(range(10**9))

    def run() -> None:
        end = time.monotonic() + MAX_RUN
        while time.monotonic() < end:
            index = next(counter)
            message_id = jobs.put(body_for(index))
            with log_lock:  # only what `put` returned is logged: that is what was promised
                log.write(f"{message_id} {index}\n")
                log.flush()
                os.fsync(log.fileno())

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    print("producing", flush=True)
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "consume":
        options = dict(zip(rest[4::2], rest[5::2], strict=True))
        hold = int(options.get("--hold", 0))
        lock = float(options.get("--lock", 60))
        consume(rest[0], rest[1], rest[2], rest[3], hold, options.get("--gate"), lock)
    elif command == "assure":
        assure(rest[0], rest[1], rest[2])
    elif command == "cycle":
        cycle(rest[0], rest[1], rest[2])
    elif command == "batches":
        batches(rest[0], rest[1], rest[2], int(rest[3]))
    elif command == "member":
        member(rest[0], rest[1], rest[2], rest[3], int(rest[4]))
    else:
        produce(rest[0], rest[1], rest[2], int(rest[3]))
