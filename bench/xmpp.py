"""bench/xmpp: XEP-0254 queueing through Prosody and the boxmq component, against Prosody's own
mod_pubsub doing plain publish -> notify, with the same slixmpp clients in the same run.

    python bench/xmpp.py [--items 2000] [--window 100] [--queue-requests 50] [--fsync never]

Queueing, per item: publish + result, one event to one of 2 subscribers, its retract +
result, the retract notification (6 stanzas). mod_pubsub, per item: publish + result and one
event to each of the 2 subscribers (4 stanzas). The component runs as `boxmq serve` in its own
process, so its CPU time (from /proc) is its own; Prosody's is read the same way.
Issue 6's goals: queueing items/s >= mod_pubsub's, and <= 0.25 ms component CPU per item.
Needs prosody (make test installs it) and the xmpp extra.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for harness.*

from harness.prosody import PS, PUBSUB, SECRET, SERVICE, Client, Prosody, clients, run_prosody

import boxmq
from boxmq.store.commit import FsyncPolicy

# cpu_seconds: a process's own time, not its children's: neither prosody nor serve starts one
from processes import boxmq_command, cpu_seconds, start_logged, stop


@dataclass(frozen=True)
class Run:
    case: str
    items: int
    seconds: float
    component_cpu: float | None
    prosody_cpu: float

    @property
    def rate(self) -> float:
        return self.items / self.seconds


async def _publish_all(publisher: Client, service: str, node: str, items: int, window: int) -> None:
    gate = asyncio.Semaphore(window)

    async def one(n: int) -> None:
        async with gate:
            reply = await publisher.request(
                f"<pubsub xmlns='{PS}'><publish node='{node}'><item>"
                f"<job xmlns='urn:example'>{n:08d}</job></item></publish></pubsub>",
                to=service,
            )
            assert reply.get("type") == "result", reply

    await asyncio.gather(*(one(n) for n in range(items)))


async def _wait(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not finish in time")
        await asyncio.sleep(0.01)


async def queueing(server: Prosody, component_pid: int, args: argparse.Namespace) -> Run:
    async with clients(server, "alice", "bob", "carol") as [alice, bob, carol]:
        for subscriber in (alice, bob):
            subscriber.auto_retract = True
            reply = await subscriber.subscribe(args.queue_requests)
            assert reply.get("type") == "result", reply

        def done() -> bool:
            return bool(alice.retracted + bob.retracted >= args.items)

        cpu0, prosody0, t0 = (
            cpu_seconds(component_pid),
            cpu_seconds(server.pid),
            time.perf_counter(),
        )
        await _publish_all(carol, SERVICE, "jobs", args.items, args.window)
        await _wait(done, 60)
        seconds = time.perf_counter() - t0
        return Run(
            "XEP-0254 queueing via boxmq (6 stanzas/item)",
            args.items,
            seconds,
            cpu_seconds(component_pid) - cpu0,
            cpu_seconds(server.pid) - prosody0,
        )


async def mod_pubsub(server: Prosody, args: argparse.Namespace) -> Run:
    async with clients(server, "alice", "bob", "carol") as [alice, bob, carol]:
        # Items kept in memory only (the lighter case for Prosody): with persist_items, its
        # default, mod_pubsub writes each item to its archive store (--persist).
        created = await carol.request(
            f"<pubsub xmlns='{PS}'><create node='plain'/><configure>"
            "<x xmlns='jabber:x:data' type='submit'><field var='FORM_TYPE' type='hidden'>"
            f"<value>{PS}#node_config</value></field>"
            f"<field var='pubsub#persist_items'><value>{int(args.persist)}</value></field>"
            "</x></configure></pubsub>",
            to=PUBSUB,
        )
        assert created.get("type") == "result", ET.tostring(created)
        for subscriber in (alice, bob):
            reply = await subscriber.request(
                f"<pubsub xmlns='{PS}'><subscribe node='plain' jid='{subscriber.boundjid.full}'/>"
                "</pubsub>",
                to=PUBSUB,
            )
            assert reply.get("type") == "result", reply
        prosody0, t0 = cpu_seconds(server.pid), time.perf_counter()
        await _publish_all(carol, PUBSUB, "plain", args.items, args.window)
        await _wait(lambda: min(len(alice.received), len(bob.received)) >= args.items, 60)
        seconds = time.perf_counter() - t0
        return Run(
            f"Prosody mod_pubsub publish -> notify (2 subs, 4 stanzas/item, "
            f"persist_items={int(args.persist)})",
            args.items,
            seconds,
            None,
            cpu_seconds(server.pid) - prosody0,
        )


def serve(server: Prosody, folder: Path, fsync: str) -> subprocess.Popen[bytes]:
    """`boxmq serve`, the component alone, on `folder`/data, logging to `folder`/serve.log."""
    component = ("--xmpp-component", SERVICE, "--xmpp-server", f"127.0.0.1:{server.component_port}")
    command = boxmq_command(folder, fsync, "", "--no-mqtt", *component)
    return start_logged(command, folder, "serve", env={**os.environ, "BOXMQ_XMPP_SECRET": SECRET})


async def wait_for_component(server: Prosody) -> None:
    async with clients(server, "dave") as [dave]:
        for _ in range(200):
            reply = await dave.request(
                "<query xmlns='http://jabber.org/protocol/disco#info'/>", type="get"
            )
            if reply.get("type") == "result":
                return
            await asyncio.sleep(0.05)
    raise TimeoutError("the component did not come up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--window", type=int, default=100, help="publishes in flight")
    parser.add_argument("--queue-requests", type=int, default=50)
    parser.add_argument("--fsync", default="never", choices=FsyncPolicy.words())
    parser.add_argument(
        "--persist", action="store_true", help="mod_pubsub stores items (its default)"
    )
    parser.add_argument("--dir", default=None, help="where the root goes (e.g. /dev/shm)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-xmpp-", dir=args.dir) as folder:
        root = Path(folder)
        with run_prosody(root / "prosody") as server:
            data = root / "data"
            with boxmq.open(data, fsync="never") as box:
                box.queue("jobs")
            component = serve(server, root, args.fsync)
            try:
                asyncio.run(wait_for_component(server))
                runs = [asyncio.run(queueing(server, component.pid, args))]
                runs.append(asyncio.run(mod_pubsub(server, args)))
            finally:
                stop(component)
    print(
        f"{args.items} items, window {args.window}, queue_requests {args.queue_requests}, "
        f"fsync={args.fsync}, root in {args.dir or tempfile.gettempdir()}"
    )
    print(f"{'case':<70} {'items/s':>8} {'component ms/item':>18} {'prosody ms/item':>16}")
    for run in runs:
        component_ms = (
            "-" if run.component_cpu is None else f"{1000 * run.component_cpu / run.items:.3f}"
        )
        print(
            f"{run.case:<70} {run.rate:>8.0f} {component_ms:>18} "
            f"{1000 * run.prosody_cpu / run.items:>16.3f}"
        )


if __name__ == "__main__":
    main()
