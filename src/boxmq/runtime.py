"""The broker process: one asyncio loop that owns the root's housekeeping and the sockets.

`boxmq serve` recovers the root at start (locks of dead processes back to target/, abandoned
working/ files cleaned) and then sweeps on one timer: expired locks, expired messages,
retention. The file work runs in a worker thread, one hop per sweep, never per message.
The doors (MQTT, XMPP) join this loop in their own modules; uvloop runs it when installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import signal
import socket
from collections.abc import Coroutine, Sequence
from typing import Any, Final

from boxmq.client.box import Box
from boxmq.client.sweeps import SweepReport
from boxmq.core.durations import spelled
from boxmq.errors import RecurringFailure, store_failure
from boxmq.mqtt.settings import MqttSettings
from boxmq.store.commit import FsyncPolicy
from boxmq.xmpp.settings import XmppSettings

__all__ = ["open_files_limit", "run", "serve"]

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
                (report.expired_purged, "expired message(s) past retention deleted"),
            )
            if count
        ]
        if parts:
            lines.append(f"{name}: " + ", ".join(parts))
    return lines


async def _sweep_once(box: Box, *, full: bool = True) -> None:
    for line in _describe(await asyncio.to_thread(box.sweep, full=full)):
        log.info("%s", line)


async def _sweep_again(box: Box, failing: RecurringFailure) -> None:
    """A sweep of the timer: a file system that fails it now (EMFILE with every descriptor
    taken by clients, EIO, EROFS) is told and tried again at the next one, while the doors
    go on serving; told again only for another errno, and once a sweep runs again. Only the
    sweep at start, the recovery, ends `serve` when it fails."""
    try:
        # Between its full passes, a minute apart, a sweep visits only the subscriptions
        # where something may be due, and the queues that changed or have something due:
        # offline sessions and idle queues cost next to nothing.
        await _sweep_once(box, full=False)
    except OSError as error:
        if failing.news(error):
            log.error(
                "sweep of %s failed, tried again at each next one (told again for another "
                "error): %s",
                box.root,
                store_failure(error),
            )
        return
    if failing.recovered():
        log.info("sweep of %s runs again", box.root)


def _check_writable(root: str) -> None:
    """A root on a read-only file system let `serve` say "ready" and then refuse every
    message, subscription and acknowledgement of every client (a recovery with nothing to
    do writes nothing): refused at start instead, as a recovery that fails is. A root this
    user may not write into is only warned of: its queues and topic root may still be
    (an operator who keeps the root itself closed)."""
    if os.statvfs(root).f_flag & os.ST_RDONLY:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), root)
    if not os.access(root, os.W_OK | os.X_OK):
        log.warning(
            "%s: this user (uid %d) may not write into the root: whatever it would make "
            "there (a new queue, topic root or session folder) is refused to its client",
            root,
            os.geteuid(),
        )


def open_files_limit() -> tuple[int, str]:
    """Raise this process's soft limit of open files to its hard limit, as Go programs do
    since Go 1.19 and as systemd advises: each MQTT client holds a descriptor, and the soft
    limit is often 1024, kept low for programs that use select() (boxmq does not), where the
    hard limit allows far more. The log level and line."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return logging.INFO, f"open files: at most {soft} (ulimit -n, the hard limit too)"
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as error:  # unlimited, over what the kernel allows
        return logging.WARNING, (
            f"open files: at most {soft} (ulimit -n): raising it to the hard limit failed: {error}"
        )
    return (
        logging.INFO,
        f"open files: at most {hard}, raised from {soft} (ulimit -n) to the hard limit",
    )


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run the process's loop: uvloop's when it is installed, the standard one otherwise
    (docs/mqtt.md weighs the two: uvloop saves about 5 % of the CPU per MQTT message)."""
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        uvloop = None  # run outside the except block: an error of the loop chains no ImportError
    if uvloop is None:
        asyncio.run(main)
    else:
        uvloop.run(main)


# SIGHUP stops as SIGTERM does: it is what a closed terminal sends, and its default action
# would kill the broker without telling its clients. boxmq reloads nothing (its files are
# read at start), so the signal has no other meaning to take.
_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _ignored_by_who_started_us(sig: signal.Signals) -> bool:
    """Whether `sig` is SIGHUP and came ignored, as `nohup` leaves it: whoever started serve
    so asked that a closed terminal not stop it, and a handler of ours would undo that (the
    broker stopped with the terminal it was started from under nohup). Said at start."""
    if sig is not signal.SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN:
        return False
    log.info(
        "SIGHUP is ignored (nohup): a closed terminal does not stop this server; "
        "SIGTERM or SIGINT do"
    )
    return True


def _stop_on(sig: signal.Signals, stop: asyncio.Event) -> None:
    # A mosquitto user's `kill -HUP` (or a service's reload) to take in a new password or ACL
    # file stops the broker: the line says so, or it reads as a crash of the reload.
    why = (
        " (boxmq reloads nothing on SIGHUP: its config, password, ACL and TLS files are read "
        "at start, so start it again to take in their changes)"
        if sig is signal.SIGHUP
        else ""
    )
    log.info("%s received: stopping%s", sig.name, why)
    stop.set()


def _usr2_said() -> None:
    # mosquitto prints its subscription tree at SIGUSR2: sent to boxmq, whose default action
    # it was, it stopped the broker (status 140) without a line or a DISCONNECT to a client.
    log.info(
        "SIGUSR2 received: nothing done (mosquitto prints its subscriptions there; here "
        "`boxmq ls` lists the queues and subscriptions, `boxmq session ls` the sessions, "
        "and SIGUSR1 writes every thread's stack to this log)"
    )


def _processed_said(keep: bool, retention: float | None) -> str:
    """What becomes of processed/ files, said at start: the sweeps apply the retention to
    every queue of the root, but with `keep` false this server's clients put nothing there
    (it said "processed/ files are deleted after 1d" all the same)."""
    fate = "kept forever" if retention is None else f"deleted after {spelled(retention)}"
    if keep:
        return f"processed/ files are {fate} (processed_retention)"
    return (
        "processed/ gets nothing from this server's clients (keep_processed = false); what "
        f"other programs on the root acknowledge there is {fate} (processed_retention)"
    )


def _fsync_said(policy: FsyncPolicy, interval: float) -> str:
    """The fsync policy as the start-up line says it: under "interval" how often it flushes,
    which an operator checking that the file's fsync_interval was taken could not see."""
    if policy is FsyncPolicy.INTERVAL:
        return f"fsync=interval, every {spelled(interval)}"
    return f"fsync={policy.value}"


def _expired_said(retention: float | None) -> str:
    """What becomes of expired/ files, said at start: kept forever by default, which an
    operator whose clients send messages with an expiry learns here, not from a full disk."""
    if retention is None:
        return "expired/ files are kept until purged (expired_retention = forever)"
    return f"expired/ files are deleted {spelled(retention)} after they expired (expired_retention)"


async def serve(
    box: Box,
    *,
    sweep_interval: float,
    stop: asyncio.Event | None = None,
    mqtt: MqttSettings | None = None,
    mqtt_sockets: Sequence[list[socket.socket]] | None = None,
    xmpp: XmppSettings | None = None,
) -> None:
    """Run housekeeping, the MQTT listeners of `mqtt` and the XMPP component of `xmpp`, until
    SIGTERM/SIGINT/SIGHUP (or `stop`); a door that fails (a refused component) ends it with
    its error. `mqtt_sockets`: the listeners' sockets, bound already (None: bound here)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        if _ignored_by_who_started_us(sig):
            continue
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, _stop_on, sig, stop)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGUSR2, _usr2_said)
    queues = box.queues()
    log.info(
        "boxmq serving %s (%d queue(s), %s; acknowledged messages are %s)",
        box.root,
        len(queues),
        _fsync_said(box.fsync, box.fsync_interval),
        "kept in processed/" if box.options.keep_processed else "deleted (keep_processed = false)",
    )
    log.info(
        "%s", _processed_said(box.options.keep_processed, box.options.limits.processed_retention)
    )
    log.info("%s", _expired_said(box.options.limits.expired_retention))
    if box.options.polling:
        log.info("new files found by polling (never inotify, as for a root shared over NFS)")
    else:
        log.info("new files found by inotify where the kernel gives it, else by polling")
    log.info("recovering: releasing locks of dead processes, cleaning abandoned files")
    await _sweep_once(box)
    _check_writable(box.root)
    doors = []
    if mqtt is not None:
        from boxmq.mqtt.server import MqttServer

        server = MqttServer(box, mqtt)
        await server.start(mqtt_sockets)
        doors.append(asyncio.create_task(server.run(stop), name="mqtt"))
    if xmpp is not None:
        from boxmq.xmpp import component_runner

        run_component = component_runner()  # InvalidArgument without the xmpp extra
        component = asyncio.create_task(run_component(box, xmpp, stop), name="xmpp")
        component.add_done_callback(lambda _: stop.set())  # a refused component ends serve
        doors.append(component)
    log.info("ready; sweeping every %s", spelled(sweep_interval))
    failing = RecurringFailure()
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=sweep_interval)
            if not stop.is_set():
                await _sweep_again(box, failing)
    finally:
        stop.set()
        await asyncio.gather(*doors)  # each finishes what it acknowledged, then closes
    log.info("stopping: nothing in flight is lost (locks are on disk)")
