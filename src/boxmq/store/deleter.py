"""Deleting the files of acknowledged messages in a thread of their own.

An ack that deletes its message's file (keep_processed off, the spare pool full) paid the
unlink on the caller's thread: in `boxmq serve`, the event loop's. On ext4 mounted with
`discard`, on a disk other work kept busy, one unlink took 84 µs to 2 ms where a rename took
10 to 20 µs: a persistent session catching up 20,000 messages ran at 555 to 11,838 msg/s
(median 3,929 of seven runs; 81% of the loop's time in unlinks at 555, py-spy), and every
other client waited meanwhile (p99 from publish to receive 85 to 600 ms, median 240). With
the unlinks here: 5,613 to 12,161 msg/s (median 10,231 of eight), p99 63 to 159 ms (72).

So the ack only renames the file out of processing/ (Spares.give, into the pool's own folder,
which nobody else reads): from that rename on the message is gone for every reader, as it was
after the unlink, and this thread unlinks it later. A process that dies leaves the renamed
files in its own folder, which the next pool to start on the root adopts (spares.py): no
message is ever in it. `drain` (the pool's close) deletes what is still waiting.

The thread falls behind when acks come faster than unlinks go (10,000 msg/s against 500 to
12,000 unlinks a second): with no bound, one stop of `boxmq serve` waited ~30 s on 15,634
unlinks still waiting. Past `limit` waiting, `delete` unlinks on the caller's thread, as the
ack did before this thread: the acks slow down, the stop does not (2,000 unlinks: at most 4 s
at 2 ms each, the slowest seen).
"""

from __future__ import annotations

import collections
import logging
import os
import threading

from boxmq.forks import renew_in_children

__all__ = ["Deleter"]

log = logging.getLogger("boxmq.store")

_SAY_DRAINING = 1000  # files still to delete at a drain worth a word (a second or more)
PENDING_LIMIT = 2000  # files waiting at most: past it, `delete` unlinks at once (a stop's wait)


class Deleter:
    """Unlinks the paths handed to `delete`, oldest first, in one thread started at the first;
    with `limit` waiting, on the caller's thread."""

    def __init__(self, limit: int = PENDING_LIMIT) -> None:
        self._limit = limit
        self._pending: collections.deque[str] = collections.deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._draining = False
        renew_in_children(self)

    def renew_in_child(self) -> None:
        """In a forked child: the thread and what it had to delete are the parent's."""
        self._pending = collections.deque()
        self._wake = threading.Condition()
        self._thread = None
        self._draining = False

    @property
    def pending(self) -> int:
        """Files handed over and not deleted yet."""
        return len(self._pending)

    def delete(self, path: str) -> None:
        """Unlink `path` in the thread; at once, here, once `drain` began (nothing would) or
        with `limit` files waiting (the thread is behind: a drain would wait on them all)."""
        with self._wake:
            if not self._draining and len(self._pending) < self._limit:
                self._pending.append(path)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="boxmq-deleter", daemon=True
                    )
                    self._thread.start()
                self._wake.notify()
                return
        _unlink(path)

    def drain(self) -> None:
        """Delete every file handed over, and stop the thread; later deletes are done at once.
        A daemon thread, as the committer's: a process that ends without a drain leaves the
        files where `delete` was told they are, for the next pool to adopt."""
        with self._wake:
            self._draining = True
            thread = self._thread
            if len(self._pending) >= _SAY_DRAINING:
                log.info("deleting the files of %d acknowledged messages", len(self._pending))
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        pending = self._pending
        while True:
            with self._wake:
                while not pending and not self._draining:
                    self._wake.wait()
                if not pending:  # draining, and all done
                    self._thread = None
                    return
                path = pending.popleft()
            _unlink(path)


def _unlink(path: str) -> None:
    """Unlink `path`; a failure is logged (the ack that handed it over is long done), and the
    file left where it is, for the next pool to adopt."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        log.warning("could not delete %s (%s): left for the next start to clean", path, error)
