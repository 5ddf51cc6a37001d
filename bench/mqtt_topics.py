"""Many subscriptions: N MQTT 5 clients each subscribe to `dev/<i>/#` at QoS 1 (persistent
sessions: durable subscriptions in boxmq; or clean ones: memory subscriptions), then one
publisher sends K messages at QoS 0 and K at QoS 1 to random `dev/<i>/x` topics, against
boxmq and mosquitto in one run.

    .venv/bin/python bench/mqtt_topics.py                     # N = 1000, 5000; K = 20000
    .venv/bin/python bench/mqtt_topics.py --clients 10000 --brokers boxmq

Figures per broker and case: the seconds until every SUBACK, while another client publishes
`--beside` messages a second to topics nobody subscribes to (each one routed), and the
broker's CPU then per subscription; its CPU for 5 s with every client connected and quiet;
and its CPU per message published (until every subscriber got its copies). A raw asyncio
client (not thousands of paho threads) speaks MQTT 5 on 127.0.0.1; each broker runs as a
subprocess on a free port, boxmq on a fresh data folder under /dev/shm when it exists.
Every wait is bounded (--budget seconds per phase): a phase that runs out says TIMEOUT
beside its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import time
from dataclasses import dataclass

from boxmq.store.commit import FsyncPolicy
from mqtt_wire import connect5, packet, puback_for, publish5, publish_until, read_packet, string
from options import chosen, counts
from processes import BROKERS, broker_running, cpu_seconds

_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
_BATCH = 200  # connections opened at once
_IDLE = 5.0  # seconds the broker's CPU is read with every client connected and quiet
_WINDOW = 100  # Receive Maximum each client gives; QoS 1 PUBLISHes unanswered (boxmq's own)
_MOSQUITTO = ""  # config lines beside start_broker's
_BOXMQ = "[mqtt.limits]\nmax_connections = 30000\n"  # its config file


def _subscribe(packet_id: int, filter: str, qos: int) -> bytes:
    return packet(0x82, packet_id.to_bytes(2, "big") + b"\x00" + string(filter) + bytes([qos]))


@dataclass
class Device:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    got: int = 0


class Run:
    def __init__(self, port: int, clean: bool, budget: float) -> None:
        self.port, self.clean, self.budget = port, clean, budget
        self.devices: list[Device] = []
        self.received = 0
        self.arrived = asyncio.Event()
        self.wanted = 0

    async def open_device(self, i: int) -> Device:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 16)
        writer.write(connect5(f"dev{i}", self.clean, _WINDOW))
        kind, _ = await read_packet(reader)
        assert kind >> 4 == 2, kind
        writer.write(_subscribe(1, f"dev/{i}/#", 1))
        kind, body = await read_packet(reader)
        assert kind >> 4 == 9, kind
        assert body[-1] == 1, body  # granted QoS 1
        return Device(reader, writer)

    async def subscribe_all(self, n: int, beside: float) -> None:
        """`beside`: messages a second another client publishes meanwhile (to topics nobody
        subscribes to: each one routed, none delivered)."""
        publisher = asyncio.create_task(self.publish_beside(beside)) if beside else None
        try:
            for start in range(0, n, _BATCH):
                batch = range(start, min(n, start + _BATCH))
                self.devices += await asyncio.gather(*(self.open_device(i) for i in batch))
        finally:
            if publisher is not None:
                publisher.cancel()

    async def publish_beside(self, rate: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(connect5("beside", True, _WINDOW))
        await read_packet(reader)
        try:
            for n in range(1_000_000):
                writer.write(publish5(f"status/{n}", b"up", 0, 0))
                await asyncio.sleep(1 / rate)
        finally:
            writer.close()

    async def listen(self, device: Device) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                kind, body = await read_packet(device.reader)
                if kind >> 4 != 3:
                    continue
                if (kind >> 1) & 3:
                    device.writer.write(puback_for(body))
                self.received += 1
                if self.received >= self.wanted:
                    self.arrived.set()

    async def publish(self, topics: list[str], qos: int) -> bool:
        """Every topic published once; True when every copy arrived within the budget."""
        self.received, self.wanted = 0, len(topics)
        self.arrived.clear()
        publishes = (publish5(t, b"x" * 32, qos, n % 65535 + 1) for n, t in enumerate(topics))
        client_id = f"pub{qos}-{random.random()}"
        return await publish_until(
            self.port, client_id, publishes, qos, _WINDOW, self.budget, self.arrived
        )


@dataclass
class Figures:
    broker: str
    clients: int
    clean: bool
    subscribe_s: float = 0.0
    subscribe_cpu: float = 0.0
    idle_cpu: float = 0.0  # share of a core
    per_message_us: dict[int, float] | None = None
    note: str = ""


async def _case(
    pid: int, port: int, figures: Figures, messages: int, budget: float, beside: float
) -> None:
    run = Run(port, figures.clean, budget)
    cpu, started = cpu_seconds(pid), time.monotonic()
    try:
        await asyncio.wait_for(run.subscribe_all(figures.clients, beside), budget)
    except TimeoutError:
        figures.note = f"TIMEOUT after {len(run.devices)} subscriptions"
        return
    finally:
        figures.subscribe_s = time.monotonic() - started
        figures.subscribe_cpu = cpu_seconds(pid) - cpu
    listeners = [asyncio.create_task(run.listen(device)) for device in run.devices]
    cpu = cpu_seconds(pid)
    await asyncio.sleep(_IDLE)  # every client connected, nothing published
    figures.idle_cpu = (cpu_seconds(pid) - cpu) / _IDLE
    figures.per_message_us = {}
    rng = random.Random(42)
    for qos in (0, 1):
        topics = [f"dev/{rng.randrange(figures.clients)}/x" for _ in range(messages)]
        cpu = cpu_seconds(pid)
        if not await run.publish(topics, qos):
            figures.note += f" qos{qos}: {run.received}/{messages} arrived"
        figures.per_message_us[qos] = (cpu_seconds(pid) - cpu) / messages * 1e6
    for task in listeners:
        task.cancel()
    for device in run.devices:
        device.writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--clients", type=counts, default="1000,5000", help="N values, comma-separated"
    )
    parser.add_argument("--messages", type=int, default=20_000, help="K per QoS")
    parser.add_argument("--brokers", default="boxmq,mosquitto")
    parser.add_argument("--sessions", default="persistent,clean")
    parser.add_argument("--fsync", default="always", choices=FsyncPolicy.words())
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per phase")
    parser.add_argument(
        "--beside", type=float, default=50.0, help="msg/s published while they subscribe"
    )
    args = parser.parse_args()
    every_sessions = chosen(parser, "--sessions", args.sessions, ("clean", "persistent"))
    brokers = chosen(parser, "--brokers", args.brokers, BROKERS)
    results = []
    for n in args.clients:
        for sessions in every_sessions:
            for broker in brokers:
                figures = Figures(broker, n, sessions == "clean")
                with broker_running(
                    broker,
                    args.fsync,
                    prefix="mqtt-topics-",
                    scratch=_SCRATCH,
                    mosquitto=_MOSQUITTO,
                    boxmq=_BOXMQ,
                ) as (pid, port):
                    case = _case(pid, port, figures, args.messages, args.budget, args.beside)
                    asyncio.run(case)
                results.append(figures)
                _print(figures)
    print()
    print(
        f"{'broker':<10} {'N':>6} {'sessions':<10} {'SUBACKs s':>10} {'CPU/sub ms':>11} "
        f"{'idle CPU %':>10} {'CPU/msg QoS0 us':>16} {'QoS1 us':>9}  note"
    )
    for figures in results:
        _print(figures)


def _print(f: Figures) -> None:
    per = f.per_message_us or {}
    cells = [f"{per[q]:9.0f}" if q in per else f"{'-':>9}" for q in (0, 1)]
    print(
        f"{f.broker:<10} {f.clients:>6} {'clean' if f.clean else 'persistent':<10} "
        f"{f.subscribe_s:10.1f} {f.subscribe_cpu / f.clients * 1e3:11.2f} "
        f"{f.idle_cpu * 100:10.0f} {cells[0]:>16} {cells[1]}  {f.note}",
        flush=True,
    )


if __name__ == "__main__":
    main()
