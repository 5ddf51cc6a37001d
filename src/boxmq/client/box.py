"""`boxmq.open(root)`: a root of queues, used directly on its files, with no server.

Any number of processes (and threads) may open the same root: every change is a rename, and
two claims of one file cannot both win. Within one process, each opened Box keeps one engine
per queue for its consumers; `close()` releases whatever they still hold.
"""

from __future__ import annotations

import logging
import os
import threading
from types import TracebackType

from boxmq.client.live_queue import LiveOptions, LiveQueue
from boxmq.client.queue import Queue
from boxmq.client.sweeps import SweepLimits, SweepReport, sweep
from boxmq.clock import Clock, SystemClock
from boxmq.core import Dispatch, QueuePolicy
from boxmq.errors import InvalidArgument, QueueNotFound
from boxmq.ids import IdFactory
from boxmq.store.commit import Committer, FsyncPolicy
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import is_dropbox, list_dropboxes, queue_path
from boxmq.store.process import process_token

__all__ = ["Box", "open"]

log = logging.getLogger("boxmq")


class Box:
    def __init__(
        self,
        root: str,
        *,
        fsync: FsyncPolicy,
        fsync_interval: float,
        options: LiveOptions,
        clock: Clock,
    ) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.options = options
        self._clock = clock
        self._committer = Committer(self.root, fsync, interval=fsync_interval)
        self._ids = IdFactory(clock)
        self._token = process_token()
        self._lock = threading.Lock()
        self._live: dict[str, LiveQueue] = {}
        self._closed = False

    @property
    def fsync(self) -> FsyncPolicy:
        return self._committer.policy

    def queue(self, name: str, *, create: bool = True) -> Queue:
        """The queue `name`; created (its folders made) unless `create=False`."""
        path = queue_path(self.root, name)
        if not create and not is_dropbox(path):
            raise QueueNotFound(f"no queue {name!r} under {self.root} (see `boxmq ls`)")
        dropbox = Dropbox(path, self._committer, create=create)
        return Queue(
            name,
            dropbox,
            ids=self._ids,
            now=self._clock.now,
            policy=self.options.policy,
            keep_processed=self.options.keep_processed,
            live=lambda: self._live_queue(name, dropbox),
        )

    def queues(self) -> list[str]:
        return list_dropboxes(self.root)

    def sweep(self) -> dict[str, SweepReport]:
        """One round of housekeeping over every queue (what `boxmq serve` runs on a timer)."""
        now = self._clock.now()
        reports = {}
        for name in self.queues():
            dropbox = Dropbox(queue_path(self.root, name), self._committer, create=False)
            reports[name] = sweep(
                dropbox, now=now, policy=self.options.policy, limits=self.options.limits, name=name
            )
        return reports

    def _live_queue(self, name: str, dropbox: Dropbox) -> LiveQueue:
        with self._lock:
            if self._closed:
                raise InvalidArgument("this box is closed")
            live = self._live.get(name)
            if live is None:
                live = LiveQueue(
                    name, dropbox, options=self.options, clock=self._clock, token=self._token
                )
                self._live[name] = live
            return live

    def close(self) -> None:
        """Release every lock this box's consumers hold, then stop the committer."""
        with self._lock:
            self._closed = True
            live, self._live = list(self._live.values()), {}
        for queue in live:
            queue.close()
        self._committer.close()

    def __enter__(self) -> Box:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open(
    root: str | os.PathLike[str],
    *,
    fsync: str = "always",
    fsync_interval: float = 1.0,
    max_deliveries: int | None = 5,
    dispatch: str = "round-robin",
    keep_processed: bool = True,
    processed_retention: float | None = 86400.0,
    abandon_after: float = 3600.0,
    polling: bool = False,
    clock: Clock | None = None,
) -> Box:
    """Open (and create) a boxmq root.

    fsync: "always" (a put returns once on disk; concurrent puts share one flush), "interval"
    (flushed every `fsync_interval` seconds) or "never". dispatch: "round-robin",
    "least-in-flight", "sticky", "hash-by-key" or "random". max_deliveries: deliveries before
    a message goes to error/ (None: no limit). keep_processed: ack moves to processed/ (kept
    `processed_retention` seconds, None: forever) rather than deleting. abandon_after: seconds
    after which a file a producer left in working/ is deleted. polling: never use inotify
    (for roots shared over NFS).
    """
    try:
        policy = FsyncPolicy(fsync)
    except ValueError:
        raise InvalidArgument(
            f"fsync {fsync!r}: choose one of {', '.join(p.value for p in FsyncPolicy)}"
        ) from None
    try:
        strategy = Dispatch[dispatch.upper().replace("-", "_")]
    except KeyError:
        names = ", ".join(d.name.lower().replace("_", "-") for d in Dispatch)
        raise InvalidArgument(f"dispatch {dispatch!r}: choose one of {names}") from None
    options = LiveOptions(
        policy=QueuePolicy(max_deliveries=max_deliveries, dispatch=strategy),
        limits=SweepLimits(working_ttl=abandon_after, processed_retention=processed_retention),
        polling=polling,
        keep_processed=keep_processed,
    )
    return Box(
        os.fspath(root),
        fsync=policy,
        fsync_interval=fsync_interval,
        options=options,
        clock=clock or SystemClock(),
    )
