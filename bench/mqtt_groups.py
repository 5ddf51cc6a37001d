"""Many share groups: G groups `$share/g<j>/...` with two members each, spread over a pool of
MQTT 5 clients, then one publisher sends messages at QoS 0 and at QoS 1, against boxmq and
mosquitto in one run.

    .venv/bin/python bench/mqtt_groups.py                         # G = 1, 10, 100, 1000
    .venv/bin/python bench/mqtt_groups.py --groups 1000 --filters overlap --brokers boxmq

Two shapes of filters (`--filters`):
- `distinct`: group j on `dev/<j>/#`, each message to a random `dev/<j>/x`: one copy per
  message, so what grows with G is only what the broker pays for groups it does not route to;
- `overlap`: every group on one of `s/#`, `s/+/t`, `s/+/+` (overlapping wildcards), each
  message to `s/<n>/t`: G copies per message (K // G messages, at least 20, are sent).

Figures per broker and case: the seconds and the broker's CPU per group while the members
subscribe (one filter per SUBSCRIBE, a client's SUBSCRIBEs one after the other), and per QoS
the messages a second, the broker's CPU per message published and per copy delivered. Every
SUBSCRIBE carries the group's number as its Subscription Identifier, so each copy says which
group it came through: the run counts copies that came twice to one group (DUPS) and those
that never came (MISSING), which must both be 0 at QoS 1 (each message goes to exactly one
member of each group). A raw asyncio client speaks MQTT 5 on 127.0.0.1; each broker runs as
a subprocess on a free port, boxmq on a fresh data folder under /dev/shm when it exists.
Every wait is bounded (--budget seconds per phase): a phase that runs out says TIMEOUT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from boxmq.store.commit import FsyncPolicy
from mqtt_wire import (
    connect5,
    packet,
    puback_for,
    publish5,
    publish_until,
    read_packet,
    read_varint,
    string,
    varint,
)
from options import chosen, counts
from processes import BROKERS, broker_running, cpu_seconds

_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
_POOL = 20  # member clients at most; group j has members j % pool and (j + 1) % pool
_WINDOW = 100  # QoS 1 PUBLISHes the publisher keeps unanswered (boxmq's Receive Maximum)
_OVERLAP = ("s/#", "s/+/t", "s/+/+")
_MOSQUITTO = "max_inflight_messages 100\n"  # config lines beside start_broker's
_BOXMQ = "[mqtt.limits]\nmax_subscriptions = 0\n"  # its config file


def _subscribe(packet_id: int, filter: str, identifier: int) -> bytes:
    properties = b"\x0b" + varint(identifier)
    body = packet_id.to_bytes(2, "big") + varint(len(properties)) + properties
    return packet(0x82, body + string(filter) + b"\x01")


def _groups_of(body: bytes, qos: int) -> tuple[list[int], bytes]:
    """The Subscription Identifiers of a received PUBLISH's body, and its payload."""
    at = 2 + int.from_bytes(body[:2], "big") + (2 if qos else 0)
    length, at = read_varint(body, at)
    end, identifiers = at + length, []
    while at < end:
        kind = body[at]
        if kind != 0x0B:  # nothing else is sent to these clients
            raise ValueError(f"a PUBLISH with property {kind:#x}")
        identifier, at = read_varint(body, at + 1)
        identifiers.append(identifier)
    return identifiers, body[end:]


@dataclass
class Member:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


@dataclass
class Figures:
    broker: str
    groups: int
    filters: str
    clean: bool
    subscribe_s: float = 0.0
    subscribe_cpu: float = 0.0
    rate: dict[int, float] = field(default_factory=dict)  # messages a second, per QoS
    per_message_us: dict[int, float] = field(default_factory=dict)
    per_copy_us: dict[int, float] = field(default_factory=dict)
    dups: dict[int, int] = field(default_factory=dict)
    missing: dict[int, int] = field(default_factory=dict)
    note: str = ""


class Run:
    def __init__(self, port: int, figures: Figures, budget: float) -> None:
        self.port, self.figures, self.budget = port, figures, budget
        self.members: list[Member] = []
        self.copies: Counter[tuple[int, bytes]] = Counter()
        self.received = 0
        self.wanted = 0
        self.arrived = asyncio.Event()

    def filter_of(self, j: int) -> str:
        if self.figures.filters == "distinct":
            return f"$share/g{j}/dev/{j}/#"
        return f"$share/g{j}/{_OVERLAP[j % len(_OVERLAP)]}"

    async def open_member(self, i: int) -> Member:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 16)
        writer.write(connect5(f"member{i}", self.figures.clean, _WINDOW))
        kind, _ = await read_packet(reader)
        assert kind >> 4 == 2, kind
        return Member(reader, writer)

    async def join(self, member: Member, groups: list[int]) -> None:
        for n, j in enumerate(groups):
            member.writer.write(_subscribe(n % 65535 + 1, self.filter_of(j), j + 1))
            kind, body = await read_packet(member.reader)
            assert kind >> 4 == 9, kind
            assert body[-1] == 1, body  # granted QoS 1

    async def subscribe_all(self) -> None:
        g = self.figures.groups
        pool = min(_POOL, max(2, g))
        self.members = list(await asyncio.gather(*(self.open_member(i) for i in range(pool))))
        joins: list[list[int]] = [[] for _ in range(pool)]
        for j in range(g):
            joins[j % pool].append(j)
            joins[(j + 1) % pool].append(j)
        await asyncio.gather(*(self.join(m, js) for m, js in zip(self.members, joins, strict=True)))

    async def listen(self, member: Member) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                kind, body = await read_packet(member.reader)
                if kind >> 4 != 3:
                    continue
                qos = (kind >> 1) & 3
                if qos:
                    member.writer.write(puback_for(body))
                identifiers, payload = _groups_of(body, qos)
                for identifier in identifiers:
                    self.copies[identifier, payload] += 1
                    self.received += 1
                if self.received >= self.wanted:
                    self.arrived.set()

    async def publish(self, topics: list[str], qos: int, expected: int) -> bool:
        """Every topic published once (payload: its qos and number); True when `expected`
        copies arrived within the budget."""
        self.received, self.wanted = 0, expected
        self.arrived.clear()
        publishes = (
            publish5(t, f"{qos}:{n}".encode(), qos, n % 65535 + 1) for n, t in enumerate(topics)
        )
        client_id = f"pub{qos}-{random.random()}"
        done = await publish_until(
            self.port, client_id, publishes, qos, _WINDOW, self.budget, self.arrived
        )
        await asyncio.sleep(0.5)  # a copy sent twice would come now
        return done


def _topics(figures: Figures, messages: int, rng: random.Random) -> tuple[list[str], int]:
    """The topics to publish and the copies they make."""
    g = figures.groups
    if figures.filters == "distinct":
        return [f"dev/{rng.randrange(g)}/x" for _ in range(messages)], messages
    count = max(20, messages // g)
    return [f"s/{n}/t" for n in range(count)], count * g


async def _case(pid: int, port: int, figures: Figures, messages: int, budget: float) -> None:
    run = Run(port, figures, budget)
    cpu, started = cpu_seconds(pid), time.monotonic()
    try:
        await asyncio.wait_for(run.subscribe_all(), budget)
    except TimeoutError:
        figures.note = "TIMEOUT subscribing"
        return
    finally:
        figures.subscribe_s = time.monotonic() - started
        figures.subscribe_cpu = cpu_seconds(pid) - cpu
    listeners = [asyncio.create_task(run.listen(member)) for member in run.members]
    rng = random.Random(42)
    for qos in (0, 1):
        topics, copies = _topics(figures, messages, rng)
        run.copies.clear()
        cpu, started = cpu_seconds(pid), time.monotonic()
        if not await run.publish(topics, qos, copies):
            figures.note += f" qos{qos} TIMEOUT: {run.received}/{copies} copies"
        seconds = time.monotonic() - started - 0.5
        used = cpu_seconds(pid) - cpu
        figures.rate[qos] = len(topics) / seconds
        figures.per_message_us[qos] = used / len(topics) * 1e6
        figures.per_copy_us[qos] = used / copies * 1e6
        figures.dups[qos] = sum(n - 1 for n in run.copies.values() if n > 1)
        figures.missing[qos] = copies - len(run.copies)
    for task in listeners:
        task.cancel()
    for member in run.members:
        member.writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--groups", type=counts, default="1,10,100,1000", help="G values, comma-separated"
    )
    parser.add_argument("--messages", type=int, default=5_000, help="K per QoS")
    parser.add_argument("--filters", default="distinct,overlap")
    parser.add_argument("--brokers", default="boxmq,mosquitto")
    parser.add_argument("--sessions", default="clean")
    parser.add_argument("--fsync", default="always", choices=FsyncPolicy.words())
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per phase")
    args = parser.parse_args()
    every_filters = chosen(parser, "--filters", args.filters, ("distinct", "overlap"))
    every_sessions = chosen(parser, "--sessions", args.sessions, ("clean", "persistent"))
    brokers = chosen(parser, "--brokers", args.brokers, BROKERS)
    results = []
    for filters in every_filters:
        for g in args.groups:
            for sessions in every_sessions:
                for broker in brokers:
                    figures = Figures(broker, g, filters, sessions == "clean")
                    with broker_running(
                        broker,
                        args.fsync,
                        prefix="mqtt-groups-",
                        scratch=_SCRATCH,
                        mosquitto=_MOSQUITTO,
                        boxmq=_BOXMQ,
                    ) as (pid, port):
                        asyncio.run(_case(pid, port, figures, args.messages, args.budget))
                    results.append(figures)
                    _print(figures)
    print()
    print(
        f"{'broker':<10} {'filters':<9} {'G':>5} {'sessions':<10} {'SUBACKs s':>9} "
        f"{'CPU/group ms':>12} {'msg/s Q0':>9} {'Q1':>7} {'CPU/msg us Q0':>13} {'Q1':>7} "
        f"{'CPU/copy us Q0':>14} {'Q1':>6} {'dups Q1':>7} {'missing Q1':>10}  note"
    )
    for figures in results:
        _print(figures)


def _print(f: Figures) -> None:
    def cells(values: dict[int, float], width: int, digits: int = 0) -> list[str]:
        return [
            f"{values[q]:{width}.{digits}f}" if q in values else f"{'-':>{width}}" for q in (0, 1)
        ]

    rate, message, copy = cells(f.rate, 7), cells(f.per_message_us, 7), cells(f.per_copy_us, 6)
    print(
        f"{f.broker:<10} {f.filters:<9} {f.groups:>5} {'clean' if f.clean else 'persistent':<10} "
        f"{f.subscribe_s:9.1f} {f.subscribe_cpu / f.groups * 1e3:12.2f} {rate[0]:>9} {rate[1]} "
        f"{message[0]:>13} {message[1]} {copy[0]:>14} {copy[1]} "
        f"{f.dups.get(1, '-'):>7} {f.missing.get(1, '-'):>10}  {f.note}",
        flush=True,
    )


if __name__ == "__main__":
    main()
