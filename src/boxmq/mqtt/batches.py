"""Each client's disk work, run as one batch at a time, and the client paused when it piles up.

A read's disk work (its PUBLISHes, PUBRELs, records) goes into `Client.jobs`; the end of the
read starts a batch with them (`disk.run_all`, which never blocks the loop on a flush).

Invariants:
- One batch runs at a time per client, in order: its acknowledgements and its messages keep
  their order. What arrives meanwhile waits and goes in the next one.
- Past `_BACKLOG_HIGH` jobs waiting, the client is not read, until they halve (and no
  SUBSCRIBE holds its packets back).
- A batch's answers are given even for a client gone: its messages still go on; and each
  job is answered even when disk work raised a bug (disk.py's `WorkFailed`, answered as a
  store failure), where no job's was and its client waited for ever.
- One client id's disk work runs in the order of its connections: a new connection's (a
  takeover, a reconnect) waits until the one before has none left (`last`). So a PUBREL
  read before a session ended is delivered before that end discards what was left
  awaiting PUBREL (lifetimes.py), and the next session's messages come after both.
- Under fsync=always, a batch that a read begins for a client that `gathers` waits for
  the client's next read, or `gather` seconds if that comes first, and takes what came: one
  commit instead of two. A client gathers once it was seen to send while its batch was
  committing (what came then is begun at once, when the batch ends); it stops when a wait
  brought nothing. So a client that sends one message and waits for its answer never waits
  here.
- `after(client)` is told when a client's batch is done, its answers given (and not yet
  written); `ready()` whenever a batch's messages may be taken by their subscribers, which
  under fsync=always is before the batch is done (its commit's last flush).

Why: `mosquitto_pub` (Nagle's algorithm on) sends the first PUBLISH of a window and holds
the rest until TCP acknowledges it, which the broker's kernel did only with the PUBACK, after
the commit: each window of 20 came as 1, then 19, and took two commits. The reads of disk
work are now acknowledged at once (`received`, through `Link.acknowledge_reads`), and the
wait joins the rest to the first (docs/benchmarks.md, "The share group's round trip,
traced"). Nagle's algorithm sends all it held back once acknowledged, so the next read
brings the rest: waiting longer would only delay the commit ("A publisher answered first",
same page).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Final

from boxmq.client.box import Box
from boxmq.clock import Clock, SystemClock
from boxmq.mqtt.clients import Client, name_of
from boxmq.mqtt.disk import StoreFailureLog, run_all
from boxmq.store.commit import FsyncPolicy

__all__ = ["Batches"]

log = logging.getLogger("boxmq.mqtt")

_BACKLOG_HIGH: Final = 4096  # disk jobs waiting for one client before we stop reading it
GATHER: Final = 0.00015  # seconds a gathering client waits: about a round trip on loopback


class Batches:
    """The clients' batches running. `after` runs on the loop once a client's batch is
    done (the broker answers it, takes more messages out of the dropboxes and writes to its
    clients); `ready`, if given, once a batch's messages may be taken (the broker takes
    them out of the dropboxes)."""

    def __init__(
        self,
        box: Box,
        pool: Executor,
        after: Callable[[Client], None],
        *,
        ready: Callable[[], None] | None = None,
        gather: float = GATHER,
        clock: Clock | None = None,
    ) -> None:
        self._box = box  # its topics are made on first use
        self._clock = clock or SystemClock()
        # What the file system refused, a client's first batch told, the rest counted.
        self.failures = StoreFailureLog()
        self._pool = pool
        self._after = after
        self._ready = ready
        self._working: set[Client] = set()  # clients with a disk batch running, gone or not
        # Only a commit that waits for the disk is worth waiting for more to join it.
        self._gather = gather if box.fsync is FsyncPolicy.ALWAYS else 0.0
        self._gathering: dict[Client, asyncio.TimerHandle] = {}  # waiting to begin
        # Client id -> the connection whose disk work runs for it, and the later connections
        # of that id waiting for it to finish.
        self._owners: dict[str, Client] = {}
        self._behind: dict[Client, list[Client]] = {}

    def last(self, client_id: str) -> Client | None:
        """The latest connection of `client_id` whose disk work is begun or waiting, if any:
        disk work appended to its jobs runs after that of every connection of the client id
        before it, and before that of any connection after it."""
        owner = self._owners.get(client_id)
        if owner is None:
            return None
        behind = self._behind.get(owner)
        return behind[-1] if behind else owner

    def received(self, client: Client) -> None:
        """A read of the client brought disk work: `start` it. Under `always`, TCP
        acknowledges the read at once: the answer waits for the disk, TCP's need not."""
        if self._gather:
            client.link.acknowledge_reads()
        self.start(client)

    def start(self, client: Client) -> None:
        """Run the client's waiting disk work as one batch (`disk.run_all`). One batch runs
        at a time per client, so its messages keep their order; what arrives meanwhile waits
        and goes in the next one. A batch is thus as large as the disk is slow: under
        `always` one group commit answers a whole publisher window, not one message (for a
        client that gathers, after a wait for the rest of it)."""
        session = client.session
        if session is not None:
            owner = self._owners.setdefault(session.client_id, client)
            if owner is not client:  # the connection before still has disk work: after it
                behind = self._behind.setdefault(owner, [])
                if client not in behind:
                    behind.append(client)
                return
        waiting = self._gathering.pop(client, None)
        if waiting is not None:  # more came (the rest of a window; a closed client's record)
            waiting.cancel()
            self._begin(client)
            return
        if client.tail is not None:
            if len(client.jobs) >= _BACKLOG_HIGH and not client.paused:
                client.paused = True
                client.link.pause_reading()
            return
        if client.gathers and self._gather:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(self._gather, self._gathered, client)
            self._gathering[client] = timer
            return
        self._begin(client)

    def _gathered(self, client: Client) -> None:
        """No read came while a gathering client waited: its batch begins with what it
        holds (a wait starts only with jobs held, and only a batch takes them), and the next
        one does not wait."""
        del self._gathering[client]
        client.gathers = False
        self._begin(client)

    def _begin(self, client: Client) -> None:
        """Run what the client holds as one batch, now."""
        jobs, client.jobs = client.jobs, []
        tail: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        client.tail = tail
        self._working.add(client)

        def done(results: list[object]) -> None:
            try:
                self.failures.failed(name_of(client), jobs, results, self._clock.now())
                failed: list[Exception] = []
                for job, result in zip(jobs, results, strict=True):
                    try:
                        job.then(result)  # even for a client gone: its message still goes on
                    except Exception as error:
                        # A bug in one answer: the later ones still route their messages
                        # and answer their clients, who would wait for a PUBACK for ever.
                        failed.append(error)
                if failed:
                    log.error(
                        "answering disk work for %s failed (%d of %d answers): %r",
                        client.link.peer,
                        len(failed),
                        len(jobs),
                        failed[0],
                        exc_info=failed[0],
                    )
            except Exception as error:
                log.error("disk work for %s failed: %r", client.link.peer, error, exc_info=error)
            finally:
                tail.set_result(None)
                self._finished(client)

        run_all(self._box.topics, jobs, self._pool, done, self._ready)

    def _finished(self, client: Client) -> None:
        client.tail = None
        self._working.discard(client)
        if client.jobs:  # sent while the batch was committing: gathered already
            client.gathers = True
            self._begin(client)
        if client.paused and len(client.jobs) < _BACKLOG_HIGH // 2 and client.held is None:
            client.paused = False
            if not client.stopped:
                client.link.resume_reading()
        if client.tail is None:
            self._hand_over(client)
        self._after(client)

    def _hand_over(self, client: Client) -> None:
        """The client has no disk work left: the later connections of its client id begin
        theirs (the first becomes the owner, the others wait for it)."""
        session = client.session
        if session is None or self._owners.get(session.client_id) is not client:
            return
        del self._owners[session.client_id]
        for waiting in self._behind.pop(client, []):
            if waiting.jobs:
                self.start(waiting)

    async def wait_all(self) -> None:
        """Until no batch runs and none waits to gather (shutting down: everything
        acknowledged is on disk). A batch's end may start another that gathers (packets a
        SUBSCRIBE held back, handled as it ends): that one begins at once too, or its PUBACK
        would be written after the DISCONNECT (found by a review)."""
        while True:
            gathering, self._gathering = self._gathering, {}
            for client, timer in gathering.items():
                timer.cancel()
                self._begin(client)
            tails = [c.tail for c in self._working if c.tail is not None]
            if not tails:
                return
            await asyncio.gather(*tails, return_exceptions=True)
