"""The broker process: one asyncio loop that owns the root's housekeeping (and, later, sockets).

`boxmq serve` recovers the root at start (locks of dead processes back to target/, abandoned
working/ files cleaned) and then sweeps on one timer: expired locks, expired messages,
retention. The file work runs in a worker thread, one hop per sweep, never per message.
The doors (MQTT, XMPP) join this loop in their own modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from boxmq.client.box import Box
from boxmq.client.sweeps import SweepReport

__all__ = ["serve"]

log = logging.getLogger("boxmq.serve")


def _describe(reports: dict[str, SweepReport]) -> list[str]:
    lines = []
    for name, report in reports.items():
        parts = [
            f"{count} {what}"
            for count, what in (
                (report.released, "lock(s) released for redelivery"),
                (report.dead, "message(s) to error/ after max deliveries"),
                (report.expired, "message(s) expired"),
                (report.abandoned, "abandoned working/ file(s) deleted"),
                (report.purged, "processed message(s) past retention deleted"),
            )
            if count
        ]
        if parts:
            lines.append(f"{name}: " + ", ".join(parts))
    return lines


async def _sweep_once(box: Box) -> None:
    for line in _describe(await asyncio.to_thread(box.sweep)):
        log.info("%s", line)


async def serve(box: Box, *, sweep_interval: float, stop: asyncio.Event | None = None) -> None:
    """Run housekeeping until SIGTERM/SIGINT (or `stop` is set)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    queues = box.queues()
    log.info("boxmq serving %s (%d queue(s), fsync=%s)", box.root, len(queues), box.fsync.value)
    log.info("recovering: releasing locks of dead processes, cleaning abandoned files")
    await _sweep_once(box)
    log.info("ready; sweeping every %gs", sweep_interval)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=sweep_interval)
        if not stop.is_set():
            await _sweep_once(box)
    log.info("stopping: nothing in flight is lost (locks are on disk)")
