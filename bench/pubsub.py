"""bench/pubsub: publish -> deliver -> ack through the core and the store.

    python bench/pubsub.py [--messages 20000] [--dir DIR] [--quick]

Cases (issue 3):
  1. one topic to one share group of 4 members
  2. 1,000 topics matched by 100 wildcard filters (100 durable subscriptions)
  3. fan-out to 1 and to 10 durable subscribers (goal: 10 costs < 3x of 1)
  4. routing cost per publish in the core Router with 10 vs 10,000 subscriptions of which the
     same few match (goal: it grows with the matching ones, not with the total)
Each store case runs in a fresh folder with fsync=never (the routing and file costs, not the
disk's flush latency; bench/store.py measures the fsync policies).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import boxmq
from boxmq.client.subscriber import Subscriber
from boxmq.core import QoS, Router, Subscription, parse_filter
from boxmq.model import ConsumerId


@dataclass(frozen=True)
class Result:
    case: str
    messages: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


@contextmanager
def fresh_box(parent: str) -> Iterator[boxmq.Box]:
    path = tempfile.mkdtemp(prefix="pubsub-", dir=parent)
    try:
        with boxmq.open(path, fsync="never", keep_processed=False) as box:
            yield box
    finally:
        shutil.rmtree(path, ignore_errors=True)


def body(index: int) -> bytes:
    return f"{index:08d}".encode() + b"x" * 92  # 100 bytes


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


def run_case(
    case: str,
    box: boxmq.Box,
    subscribers: list[Subscriber],
    publish: Callable[[int], str],
    messages: int,
    copies: int,
) -> Result:
    """Publish `messages` from one thread while one thread per subscriber receives and acks.

    The body starts with the message's index, so a copy's latency needs no shared clock but
    this process's: from just before its publish to just after its receive.
    """
    sent = [0.0] * messages
    latencies: list[float] = []
    lock = threading.Lock()
    expected = messages * copies
    received = [0]
    done = threading.Event()

    def consume(subscriber: Subscriber) -> None:
        while not done.is_set():
            message = subscriber.receive(timeout=0.2)
            if message is None:
                continue
            now = time.perf_counter()
            message.ack()
            index = int(message.body[:8])
            with lock:
                latencies.append(now - sent[index])
                received[0] += 1
                if received[0] >= expected:
                    done.set()

    threads = [threading.Thread(target=consume, args=(s,), daemon=True) for s in subscribers]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    for index in range(messages):
        sent[index] = time.perf_counter()
        publish(index)
    if not done.wait(timeout=600):
        raise SystemExit(f"{case}: only {received[0]} of {expected} copies arrived")
    elapsed = time.perf_counter() - start
    for thread in threads:
        thread.join()
    return Result(
        case, messages, elapsed, _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    )


def share_group(parent: str, messages: int) -> Result:
    with fresh_box(parent) as box:
        members = [
            box.subscribe("$share/etl/sensors/temp", f"w{i}", max_in_flight=50) for i in range(4)
        ]
        result = run_case(
            "1 topic -> 1 share group of 4",
            box,
            members,
            lambda i: box.publish("sensors/temp", body(i)),
            messages,
            1,
        )
        for member in members:
            member.close()
        return result


def wildcard_topics(parent: str, messages: int) -> Result:
    with fresh_box(parent) as box:
        subs = [box.subscribe(f"site/{k}/+", f"s{k}", max_in_flight=50) for k in range(100)]
        topics = [f"site/{j % 100}/device{j}" for j in range(1000)]
        result = run_case(
            "1,000 topics, 100 wildcard filters",
            box,
            subs,
            lambda i: box.publish(topics[i % 1000], body(i)),
            messages,
            1,
        )
        for sub in subs:
            sub.close()
        return result


def fan_out(parent: str, messages: int, width: int) -> tuple[Result, float]:
    """Publish cost measured alone (no consumer running: no GIL shared with them), then the
    whole publish -> deliver -> ack run with consumers."""
    with fresh_box(parent) as box:
        subs = [box.subscribe(f"alone{width}/#", f"d{i}") for i in range(width)]
        started = time.perf_counter()
        for index in range(messages):
            box.publish(f"alone{width}/fire", body(index))
        publish_us = (time.perf_counter() - started) / messages * 1e6
        for sub in subs:
            sub.close()
            box.unsubscribe(f"alone{width}/#", sub.name)
        subs = [box.subscribe("alerts/#", f"d{i}", max_in_flight=50) for i in range(width)]
        result = run_case(
            f"fan-out to {width}",
            box,
            subs,
            lambda i: box.publish("alerts/fire", body(i)),
            messages,
            width,
        )
        for sub in subs:
            sub.close()
        return result, publish_us


def routing_cost(total: int, rounds: int) -> float:
    """µs per Router.route() when 5 subscriptions match and `total` exist."""
    router = Router()
    for k in range(5):
        router.subscribe(Subscription(ConsumerId(f"hit{k}"), parse_filter("a/b/+"), QoS(1)))
    for k in range(total - 5):
        router.subscribe(Subscription(ConsumerId(f"miss{k}"), parse_filter(f"other/{k}/+"), QoS(1)))
    started = time.perf_counter()
    for _ in range(rounds):
        assert len(router.route("a/b/c", qos=QoS(1))) == 5
    return (time.perf_counter() - started) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--dir", default=os.path.join("bench", "results"))
    parser.add_argument("--quick", action="store_true", help="2,000 messages: a smoke run")
    args = parser.parse_args()
    messages = 2_000 if args.quick else args.messages
    os.makedirs(args.dir, exist_ok=True)

    print(f"bench/pubsub: {messages} messages of 100 bytes per case, fsync=never, {args.dir}")
    results = [share_group(args.dir, messages), wildcard_topics(args.dir, messages)]
    (one, one_publish), (ten, ten_publish) = (
        fan_out(args.dir, messages, 1),
        fan_out(args.dir, messages, 10),
    )
    results += [one, ten]
    print(f"\n{'case':<36} {'msg/s':>9} {'copies/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for result in results:
        copies = 10 if result is ten else 1
        print(
            f"{result.case:<36} {result.rate:>9.0f} {result.rate * copies:>9.0f} "
            f"{result.p50_ms:>8.2f} {result.p99_ms:>8.2f}"
        )

    ratio = ten_publish / one_publish
    print(
        f"\npublish cost: fan-out to 1 {one_publish:.0f} µs, to 10 {ten_publish:.0f} µs "
        f"= {ratio:.2f}x  (goal < 3x: {'PASS' if ratio < 3 else 'FAIL'})"
    )
    few, many = routing_cost(10, 20_000), routing_cost(10_000, 20_000)
    growth = many / few
    print(
        f"core routing, 5 matching of 10 subscriptions: {few:.2f} µs; of 10,000: {many:.2f} µs "
        f"= {growth:.2f}x  (goal: no growth with the total, < 1.5x: "
        f"{'PASS' if growth < 1.5 else 'FAIL'})"
    )
    spread = statistics.pstdev([r.rate for r in results]) / statistics.mean(
        [r.rate for r in results]
    )
    print(f"(rates vary by {spread:.0%} across cases)")


if __name__ == "__main__":
    main()
