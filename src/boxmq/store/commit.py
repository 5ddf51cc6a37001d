"""Making a put durable: the fsync policies and the group committer.

A put writes its file in working/ and asks the committer to move it into target/. What
"acknowledged" means depends on the policy (DESIGN.md §5):

- ALWAYS: the file's data and its rename are on disk before `commit` returns. Concurrent
  callers are grouped: one thread takes every pending move, flushes the file system once
  (syncfs) for the data and renames them all; the renames are flushed by the next group's
  syncfs (it writes the metadata too), which is why a group's callers are woken only after
  the next group's flush, or, when no group follows, by an fsync of each directory the
  renames wrote to (usually one: a journal commit, not another flush of everybody's dirty
  pages). So a busy committer flushes once per group instead of twice. Measured with 8
  producer threads and a consumer (bench/store.py's `1p always, put() 8 threads` row, on 2
  cores other work kept busy and a shared disk where one flush took 2-4 ms): groups of 4
  messages at two flushes each before, groups of 3 at one flush each now; the row made
  1,511-3,728 msg/s against 759-3,211 before (five alternations, faster in four; persist-
  queue 1,465-4,043 in the same runs, so still not reliably beaten), put_many(100) 13-21 k
  against 10-12 k, the 2-process row unchanged within its spread. The rest is CPU: ~500 us
  a message over 10 threads, on cores other work used up to 1.8 of. Each producer's next
  put comes 1 ms (median) to 4 ms (p90) after it is woken, its CPU and interpreter lock
  shared with 9 threads, so waiting a little for the producers just woken did not make
  groups bigger (3.0 -> 3.3 messages) nor the row faster.
  Measured here: one flush per message caps a writer near 2 000 msg/s; a group of 100 costs
  about the same as one (docs/benchmarks.md). A caller of `commit_then` may also be told
  when its moves are renamed, before that last flush (`Ready`): from then on they are where
  consumers look.
- INTERVAL: the rename happens at once; a background thread flushes every `interval` seconds.
- NEVER: the rename happens at once; the kernel flushes when it likes.

A file is renamed into target/ only after its data was flushed (ALWAYS), so a crash can never
leave a half-written file where consumers look.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from boxmq.errors import Closed, RecurringFailure, store_failure
from boxmq.forks import renew_in_children
from boxmq.model import cheap_init
from boxmq.store import libc
from boxmq.store.fanout import send_through_pending
from boxmq.store.layout import open_folder, target_moved_aside
from boxmq.store.records import flush_directories

__all__ = [
    "Committed",
    "Committer",
    "FsyncPolicy",
    "Move",
    "Ready",
    "discard_unsent",
    "discard_unsent_file",
    "flush_directories",
    "flush_filesystem",
]

log = logging.getLogger("boxmq.store")

Committed = Callable[[OSError | None], None]
"""Told once moves are as durable as the policy promises: None, or the first move's error."""

Ready = Callable[[], None]
"""Told once every one of a caller's moves is renamed into place, before the renames are
flushed: consumers (of any process: they see target/) may take the messages from then on,
while their producers still wait for `Committed`. Not told if a move failed."""


class FsyncPolicy(Enum):
    """When a move is on disk. The one spelling of the policies: Box.open's `fsync`, the
    CLI's `--fsync`, the config file's `fsync` and the benches take these words."""

    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"

    @classmethod
    def words(cls) -> tuple[str, ...]:
        """The policies as a user writes them: "always", "interval", "never"."""
        return tuple(policy.value for policy in cls)


@cheap_init
@dataclass(frozen=True, slots=True)
class Move:
    """Send a written file: rename `source` to `target`; or, for a fan-out (`target` None),
    hard-link it into every path of `also` and remove `source`. A link is as atomic as a
    rename: the name appears with the whole body behind it, and the body is written (and
    flushed) once however many subscriptions get it.

    `pending` (a fan-out that must never send a copy twice, even if it is done again after a
    crash): each copy `<dropbox>/target/<name>` of `also` is linked as
    `<dropbox>/working/<pending>/<name>` first, `source` removed, then each renamed into
    target/ (store/fanout.py)."""

    source: str
    target: str | None
    also: tuple[str, ...] = ()
    pending: str | None = None

    def directories(self) -> set[str]:
        """The folders whose entries this move writes (where a crash must find them)."""
        paths = self.also if self.target is None else (self.target, *self.also)
        return {os.path.dirname(path) for path in paths}

    def apply(self) -> None:
        if self.target is not None and not self.also:  # a put's move: one rename
            os.rename(self.source, self.target)
            return
        if self.pending is not None and self.target is None:
            copies = [(os.path.dirname(os.path.dirname(c)), os.path.basename(c)) for c in self.also]
            send_through_pending(self.source, self.pending, copies)
            return
        if self.target is None and len(self.also) == 1 and self.pending is None:
            self._send_one_copy()
            return
        linked: list[str] = []
        try:
            for copy in self.also:
                try:
                    os.link(self.source, copy)
                    linked.append(copy)
                except FileExistsError:
                    pass  # a retry after a crash: already there
                except FileNotFoundError:
                    # The subscription was deleted while we published: nobody is left to
                    # receive it. Unless only its target/ is missing: raised.
                    _raise_if_target_missing(copy)
            if self.target is None:
                os.unlink(self.source)
            else:
                os.rename(self.source, self.target)
        except OSError:
            # All or nothing: the caller will say the message was not stored, so the copies
            # sent so far are taken back (one a consumer claimed meanwhile is out already).
            _unlink_quietly(linked)
            raise

    def _send_one_copy(self) -> None:
        """A fan-out to one dropbox: one rename, not a link and an unlink."""
        try:
            os.rename(self.source, self.also[0])
        except FileNotFoundError:
            if not os.path.lexists(self.source):
                raise
            _raise_if_target_missing(self.also[0])
            os.unlink(self.source)  # the subscription was deleted meanwhile: nobody gets it


def _raise_if_target_missing(copy: str) -> None:
    """A copy into `<subscription>/target/` found no folder: fine if the subscription is gone
    (deleted: `remove_subscription` renames its whole folder away in one step) or still being
    made (another process subscribing right now: its folders come in State's order); raised
    if only its target/ is missing from a subscription made whole (an operator moved it aside,
    docs/operations.md "Disk usage"), for the publication to fail and be sent again, not be
    dropped while the subscription still exists."""
    target = os.path.dirname(copy)
    if target_moved_aside(os.path.dirname(target)):
        raise FileNotFoundError(
            errno.ENOENT, "the subscription's target/ is missing (moved aside?)", target
        )


_SYNCFS = libc.function("syncfs")


def flush_filesystem(directory: str) -> None:
    """Flush every dirty page of the file system holding `directory` (syncfs(2), else sync)."""
    if _SYNCFS is None:
        os.sync()
        return
    fd = open_folder(directory)
    try:
        if _SYNCFS(fd) != 0:
            raise libc.last_error(directory)
    finally:
        os.close(fd)


class _Batch:
    """Moves that will be made durable together, and whom to tell once they are."""

    def __init__(self) -> None:
        self.moves: list[Move] = []
        self.errors: dict[int, OSError] = {}
        # Per caller: its moves are first..first+count; told `committed`, and `ready` if any.
        self.told: list[tuple[int, int, Committed, Ready | None]] = []
        self._heard = 0  # how many callers of `told` were told `committed` (each once)

    def _first_error(self, first: int, count: int) -> OSError | None:
        """The error of a caller's first failed move (its moves are first..first+count)."""
        errors = self.errors
        return next((errors[i] for i in range(first, first + count) if i in errors), None)

    def fail_unfinished(self, interruption: BaseException) -> None:
        """Something not an OSError (a MemoryError, a KeyboardInterrupt in a thread handling
        signals) stopped the flush or the renames: no move without an error of its own is
        known to be durable, so each gets one its caller sees, never a None that would
        acknowledge a put never flushed, before the interruption goes on."""
        error = OSError(
            errno.EIO,
            f"the commit was interrupted by {type(interruption).__name__}"
            f" ({interruption}): not known to be on disk",
        )
        for index in range(len(self.moves)):
            self.errors.setdefault(index, error)

    def tell_ready(self) -> None:
        """Tell the callers whose moves were all renamed (in the committing thread)."""
        for first, count, _, ready in self.told:
            if ready is None or self._first_error(first, count) is not None:
                continue
            try:
                ready()
            except Exception:  # the flush of the renames must still come
                log.exception("a commit callback failed")

    def tell(self) -> None:
        """Call back the callers of the group not told yet (in the committing thread), each
        once however often this is called. Something raised that is not an Exception (a
        KeyboardInterrupt, or a MemoryError logging a caller's failure) goes on, but only
        once every other caller was told: a producer not told waits for ever."""
        told = self.told
        try:
            while self._heard < len(told):
                first, count, committed, _ = told[self._heard]
                self._heard += 1  # before the call: a caller whose callback raised was told
                try:
                    committed(self._first_error(first, count))
                except Exception:  # one caller's failure must not strand the others
                    log.exception("a commit callback failed")
        finally:
            if self._heard < len(told):  # interrupted: the callers after still hear theirs
                self.tell()


class Committer:
    """Moves files from working/ to target/ under one fsync policy, for one root."""

    def __init__(self, root: str, policy: FsyncPolicy, *, interval: float = 1.0) -> None:
        self._root = root
        self.policy = policy
        # Read per put: an Enum member's lookup costs ~860 instructions on Python 3.11.
        self._always = policy is FsyncPolicy.ALWAYS
        self._interval_flushes = policy is FsyncPolicy.INTERVAL
        self.interval = interval  # seconds between flushes under INTERVAL (said at start)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending = _Batch()
        self.closed = False  # read without the lock by writers too, to refuse before writing
        self._thread: threading.Thread | None = None
        self.flushes = 0  # how many file-system flushes were made (group commit statistics)
        renew_in_children(self)

    def renew_in_child(self) -> None:
        """In a forked child: the committing thread is the parent's (a child has none), as are
        the moves waiting for it; the child starts its own when it first commits."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending = _Batch()
        self._thread = None

    def commit(self, moves: Sequence[Move]) -> None:
        """Return once `moves` are done as durably as the policy promises.

        Raises the OSError of the first move that failed; the others are done. Raises Closed,
        moving nothing, once the committer is closed.
        """
        if self.closed:
            raise self.refused()
        if not self._always or not moves:  # none: nothing to flush, and no group to wait for
            if self._interval_flushes:  # (_ensure_thread's test: a call less per put)
                self._ensure_thread()
            if len(moves) == 1:  # one put: its error is raised as it is (_rename_all)
                moves[0].apply()
            else:
                _rename_all(moves)
            return
        [error] = self.commit_each([moves])
        if error is not None:
            raise error

    def commit_one(self, source: str, target: str) -> None:
        """`commit([Move(source, target)])`: one put, renamed at once without a Move where no
        group waits for a flush (fsync never or interval)."""
        if self._always or self.closed:
            self.commit([Move(source, target)])
            return
        if self._interval_flushes:  # (_ensure_thread's test: a call less per put)
            self._ensure_thread()
        os.rename(source, target)  # as Move.apply renames a put's move

    def commit_each(self, groups: Sequence[Sequence[Move]]) -> list[OSError | None]:
        """`commit` for each of `groups` at once, returning each group's error (its first
        failed move's) instead of raising one for all: one flush for them all under
        `always`, where committing them one after the other would cost one flush each."""
        errors: list[OSError | None] = [None] * len(groups)
        told: list[int] = []
        done = threading.Event()

        def committed_for(index: int) -> Committed:
            def committed(error: OSError | None) -> None:
                # From the committing thread, or here for a group with no moves: whichever
                # tells last sees every index told (list.append holds the interpreter lock).
                errors[index] = error
                told.append(index)
                if len(told) == len(groups):
                    done.set()

            return committed

        for index, moves in enumerate(groups):
            self.commit_then(moves, committed_for(index))
        if groups:
            done.wait()
        return errors

    def commit_then(
        self, moves: Sequence[Move], committed: Committed, ready: Ready | None = None
    ) -> None:
        """As `commit`, without waiting: `committed` is called once the moves are done, from
        the committing thread under `always`, or before this returns under the other policies.
        Under `always`, `ready` (if given) is called from the committing thread once the moves
        are renamed, before their flush; never under the other policies, whose renames are
        done when `committed` is called.

        An event loop writes its files itself and lets the flush happen elsewhere: handing the
        whole put to a worker thread made the two threads trade the interpreter lock at every
        system call, which cost a share group more than the writes themselves."""
        if not self._always or not moves:  # none: told at once, as the committer never would be
            if self.closed:
                raise self.refused()
            self._ensure_thread()
            errors = _rename_each(moves)
            committed(errors[min(errors)] if errors else None)
            return
        with self._lock:
            if self.closed:  # its thread is gone, or goes once it has what came before
                raise self.refused()
            self._ensure_thread_locked()
            batch = self._pending
            batch.told.append((len(batch.moves), len(moves), committed, ready))
            batch.moves.extend(moves)
            self._wake.notify()

    def refused(self) -> Closed:
        """The error of a commit, or a write for one, after `close`."""
        return Closed(f"this box of {self._root} is closed: open the root again")

    def close(self) -> None:
        """Stop: what was committed before is done; a commit after raises Closed (under
        `always` it would otherwise wait for a committing thread that is gone)."""
        with self._lock:
            self.closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _ensure_thread(self) -> None:
        if self._thread is None and self._interval_flushes:
            with self._lock:
                self._ensure_thread_locked()

    def _ensure_thread_locked(self) -> None:
        if self._thread is None and self.policy is not FsyncPolicy.NEVER:
            target = self._run_groups if self.policy is FsyncPolicy.ALWAYS else self._run_interval
            self._thread = threading.Thread(target=target, name="boxmq-commit", daemon=True)
            self._thread.start()

    def _run_groups(self) -> None:
        try:
            self._commit_groups()
        except BaseException as interruption:
            # The thread ends (the interrupted group's callers were told a failure): the
            # commits queued behind it hear one too, and the next commit starts a thread of
            # its own, where they would otherwise wait for ever for this one.
            with self._lock:
                self._thread = None
                stranded, self._pending = self._pending, _Batch()
            stranded.fail_unfinished(interruption)
            stranded.tell()
            raise

    def _commit_groups(self) -> None:
        # A pipeline: one flush of the file system carries both the data of the group about to
        # be renamed and the renames of the group before it (syncfs writes the metadata too),
        # so a busy committer flushes once per group, not twice. The last group's renames, when
        # no group follows, are flushed alone: their folders only.
        renamed: _Batch | None = None  # renamed into target/, the renames not flushed yet
        while True:
            batch = self._take_pending(wait=renamed is None)
            if batch is not None:
                renamed = self._commit_group(batch, renamed)
            elif renamed is not None:
                self._flush_renames(renamed)
                renamed = None
            else:
                return  # closed, and everything committed is flushed

    def _take_pending(self, *, wait: bool) -> _Batch | None:
        """The moves waiting, if any; with `wait`, waits for some unless closed."""
        with self._lock:
            while wait and not self._pending.moves and not self.closed:
                self._wake.wait()
            if not self._pending.moves:
                return None
            batch, self._pending = self._pending, _Batch()
            return batch

    def _commit_group(self, batch: _Batch, renamed: _Batch | None) -> _Batch | None:
        """Flush the data of `batch` and the renames of `renamed` (the group before), tell
        `renamed`'s callers, then rename `batch`: returned, its renames not flushed yet."""
        told = [batch] if renamed is None else [renamed, batch]
        try:
            flush_filesystem(self._root)
        except OSError as error:
            for failed in told:
                failed.errors = dict.fromkeys(range(len(failed.moves)), error)
            _tell_all(told)
            return None
        except BaseException as interruption:
            for failed in told:
                failed.fail_unfinished(interruption)
            _tell_all(told)
            raise
        self.flushes += 1
        try:
            if renamed is not None:
                renamed.tell()  # durable now: its producers write their next puts meanwhile
            batch.errors = _rename_each(batch.moves)
            batch.tell_ready()
        except BaseException as interruption:
            batch.fail_unfinished(interruption)
            batch.tell()
            raise
        return batch

    def _flush_renames(self, batch: _Batch) -> None:
        """Flush the folders `batch` renamed into, then tell its callers."""
        try:
            flush_directories(_folders_of(batch.moves))  # the renames: now the puts are durable
            self.flushes += 1
        except OSError as error:
            batch.errors = dict.fromkeys(range(len(batch.moves)), error)
        except BaseException as interruption:
            batch.fail_unfinished(interruption)
            raise
        finally:
            batch.tell()

    def _run_interval(self) -> None:
        failing = RecurringFailure()
        while True:
            with self._lock:
                self._wake.wait(self.interval)
                closed = self.closed
            self._flush_at_interval(failing)
            if closed:
                return

    def _flush_at_interval(self, failing: RecurringFailure) -> None:
        """One flush of `interval`. One the file system refuses (EMFILE while clients hold
        every descriptor, EIO) is told once per errno and tried again at the next interval:
        raised, it ended this thread, and no flush came again for the life of the process,
        whose puts were still acknowledged."""
        try:
            flush_filesystem(self._root)
        except OSError as error:
            if failing.news(error):
                log.error(
                    "%s: the flush every %gs (fsync interval) failed, tried again at each "
                    "(puts meanwhile are on disk only as far as the kernel wrote them): %s",
                    self._root,
                    self.interval,
                    store_failure(error),
                )
            return
        self.flushes += 1
        if failing.recovered():
            log.info("%s: the fsync interval flushes again", self._root)


def _tell_all(batches: Sequence[_Batch]) -> None:
    """Tell each batch's callers: those of the next too when telling one was interrupted."""
    if batches:
        try:
            batches[0].tell()
        finally:
            _tell_all(batches[1:])


def _rename_all(moves: Sequence[Move]) -> None:
    if len(moves) == 1:  # one put: its error is raised as it is, no bookkeeping
        moves[0].apply()
        return
    errors = _rename_each(moves)
    if errors:
        raise errors[min(errors)]


def _folders_of(moves: Sequence[Move]) -> set[str]:
    """The folders `moves` wrote entries into: `Move.directories` of each, in one pass. A
    group's moves are mostly one copy each into one target/ (a publication to a share group,
    a put): its folder is read off the path, with no set per move and no posixpath.dirname
    (Python code): 1.8 against 0.6 µs a move here, for the same folders."""
    folders: set[str] = set()
    for move in moves:
        if move.target is None and len(move.also) == 1:
            folders.add(_parent(move.also[0]))
        elif move.target is not None and not move.also:
            folders.add(_parent(move.target))
        else:
            folders.update(move.directories())
    return folders


def _parent(path: str) -> str:
    """`os.path.dirname(path)`, by a slice where the last separator has a name before it
    (every path a dropbox makes); else dirname itself (a root, doubled separators, none)."""
    cut = path.rfind(os.sep)
    if cut > 0 and path[cut - 1] != os.sep:
        return path[:cut]
    return os.path.dirname(path)


def _rename_each(moves: Sequence[Move]) -> dict[int, OSError]:
    errors: dict[int, OSError] = {}
    for index, move in enumerate(moves):
        try:
            move.apply()
        except OSError as error:
            errors[index] = error
    return errors


def discard_unsent(moves: Iterable[Move]) -> list[int]:
    """After a failed commit: delete the written files that were not sent (each move whose
    source is still there), so that a message refused to its producer is never delivered
    later; returns their indexes. Only for files written for this commit: an exactly-once
    message waiting in working/ for its `deliver` must stay."""
    return [index for index, move in enumerate(moves) if discard_unsent_file(move.source)]


def discard_unsent_file(source: str) -> bool:
    """`discard_unsent` for the file of one move (`commit_one`): True if it was unsent.
    One unlink, no look first (a look and a delete were two calls, and a file gone between
    them was said unsent): gone already means sent; a delete refused otherwise leaves a file
    that was not sent all the same (best effort, as `_unlink_quietly`)."""
    try:
        os.unlink(source)
    except FileNotFoundError:
        return False
    except OSError:
        pass
    return True


def _unlink_quietly(paths: Iterable[str]) -> None:
    """Best effort: a file system failing now may refuse this too (the sweeper's age limit
    still keeps a leftover in working/ from ever being delivered)."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
