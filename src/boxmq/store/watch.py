"""Waking up when a file lands in a directory, without busy polling.

On Linux the kernel tells us (inotify, through ctypes: no dependency). Elsewhere, or on file
systems whose changes come from other machines (NFS), `PollingWatcher` rescans on a timer and
reports that everything may have changed. Both give the same answer to `wait(timeout)`:
`Changes`, a list of new names, or `everything=True` when the caller must rescan.

A watch is on a folder (an inode), a reader's folder is a path: the folder may be deleted and
made again at that path by any process (a subscription ended and made again, a queue deleted
and put to again, target/ recreated by hand). `InotifyWatcher` follows its path: told that
the folder left it, it watches whatever folder is there now (or looks again on a timer until
one is), and says "rescan".

A process has one inotify instance, whatever its number of watchers (`_Inotify`): Linux gives
a user 128 (`fs.inotify.max_user_instances`), and a broker reads hundreds of subscriptions at
once. The kernel gives one watch to a folder however many watchers ask for it: the watch is
kept until the last of them lets go, and its events go to each. An overflow of the one queue
lost events of every watcher: each is told "rescan".
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from boxmq.forks import renew_in_children
from boxmq.store import libc

__all__ = ["Changes", "InotifyWatcher", "PollingWatcher", "Watcher", "read_news", "watch"]

log = logging.getLogger("boxmq.queue")

_IN_CLOSE_WRITE = 0x00000008
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_LEFT = _IN_MOVED_FROM | _IN_DELETE
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_IGNORED = 0x00008000  # the watch is gone: its inode was deleted (or the watch removed)
_SELF = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_IN_Q_OVERFLOW = 0x00004000
_IN_MASK_ADD = 0x20000000  # to what the folder's watch asks already (another watcher's role)
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len
_BUFFER = 65536
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
_LARGEST_EVENT = _EVENT.size + 255 + 1  # a header and NAME_MAX bytes of name with its NUL
_INOTIFY_INIT, _INOTIFY_ADD = libc.function("inotify_init1"), libc.function("inotify_add_watch")
_INOTIFY_RM = libc.function("inotify_rm_watch")
# Renamed in (the producer protocol), linked in (a fan-out: IN_CREATE), or written in place by a
# producer that ignores the protocol (IN_CLOSE_WRITE, once complete). And what leaves: a name
# that came and left between two reads (another process's put it claimed at once) is never
# offered, so never claimed in vain; one that left after it was reported is withdrawn by the
# reader. And the folder itself leaving its path.
_FOLDER_MASK = _IN_MOVED_TO | _IN_CREATE | _IN_CLOSE_WRITE | _LEFT | _IN_DELETE_SELF | _IN_MOVE_SELF
# Its parent, for the folder's name leaving it: the folder's own IN_DELETE_SELF comes only once
# nothing holds its inode, and an open file that was renamed into it does (a spare's kept
# descriptor, store/spares.py: until it is pushed out), where its parent's IN_DELETE comes at
# the rmdir. And for a folder coming to the name (made, or renamed over it).
_PARENT_MASK = _LEFT | _IN_CREATE | _IN_MOVED_TO | _IN_DELETE_SELF | _IN_MOVE_SELF
_NO_WATCH = -1
# Names a watcher keeps unread before it says "rescan" instead: what the kernel's queue holds by
# default (fs.inotify.max_queued_events), as when each watcher had an instance of its own.
_UNREAD = 16384
# A reader refused inotify (no instance, no watch, no folder) polls, and tries inotify again
# after a second, then twice as long each time, at most once a minute: a broker that started
# while the machine was full is woken by inotify again once it has room, and a try refused
# again costs a system call or two, less than a poll's directory scan.
_RETRY_FIRST = 1.0
_RETRY_MOST = 60.0


@dataclass(frozen=True, slots=True)
class Changes:
    names: list[str] = field(default_factory=list)  # came, and had not left at the read
    everything: bool = False  # the caller must rescan: overflow, or a poll
    gone: list[str] = field(default_factory=list)  # left (claimed, moved, deleted), came before


class Watcher(Protocol):
    # Called (with no lock held) by `read_news` when news came that no `wait` read yet:
    # for a caller that never blocks on its watchers (an MQTT broker's thousands of
    # sessions) and looks only at those with news. A polling watcher has none to tell.
    on_news: Callable[[], object] | None

    @property
    def polls(self) -> bool:
        """Whether only a `wait` finds news, on a timer (no watch is held): `on_news` is
        never called, and its owner must look at least every poll interval."""
        ...

    def wait(self, timeout: float | None) -> Changes:
        """Block until something lands, `wakeup` is called, or `timeout` seconds pass."""
        ...

    def wakeup(self) -> None:
        """Make a `wait` in another thread return now (e.g. a slot was freed by an ack)."""
        ...

    def close(self) -> None: ...


class _Backoff:
    """When a reader refused inotify tries it again: `_RETRY_FIRST` seconds after `now`, and
    after each try refused again twice as long as before, at most `_RETRY_MOST`."""

    __slots__ = ("_delay", "due")

    def __init__(self, *, now: float) -> None:
        self._delay = _RETRY_FIRST
        self.due = now + self._delay

    def refused(self, *, now: float) -> None:
        self._delay = min(self._delay * 2, _RETRY_MOST)
        self.due = now + self._delay


class _Watch:
    """One folder's watch in the process's instance: the kernel gives one watch (one descriptor
    number) per folder however many ask, so it is kept until the last watcher that asked lets
    go, and its events go to each of them."""

    __slots__ = ("folders", "parents")

    def __init__(self) -> None:
        self.folders: list[InotifyWatcher] = []  # watchers of this folder
        self.parents: list[InotifyWatcher] = []  # watchers of a folder in it


class _Inotify:
    """The process's inotify instance, shared by all its watchers. There is no thread of its
    own: whichever watcher waits first polls it (the poller) and hands each event to the
    watchers of its folder, waking those that wait on their condition; when it stops waiting,
    one of those polls in its place. A `wait(0)` reads what is there itself."""

    def __init__(self) -> None:
        assert _INOTIFY_INIT is not None
        assert _INOTIFY_ADD is not None
        self._add = _INOTIFY_ADD
        fd = _INOTIFY_INIT(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise libc.last_error("inotify_init1")
        try:  # for `wakeup` of the watcher that polls
            self._kick = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:  # EMFILE: the caller polls instead; the instance is not kept
            os.close(fd)
            raise
        self.fd = fd
        self.lock = threading.Lock()  # the watches, the watchers' news, who polls
        self.forked = False  # the parent's, in a forked child: touch nothing of it
        self.poller: InotifyWatcher | None = None
        self.followers: dict[InotifyWatcher, None] = {}  # waiting on their conditions
        self.watchers: set[InotifyWatcher] = set()  # open: all told of an overflow
        # Handed news by another watcher's read since their own last wait (`read_news`).
        self.pending: set[InotifyWatcher] = set()
        self._watches: dict[int, _Watch] = {}
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._poll.register(self._kick, select.POLLIN)
        renew_in_children(self, first=True)  # its watchers close through it as a box renews

    def renew_in_child(self) -> None:
        """In a forked child: reading the instance would take the parent's events, and
        removing a watch would remove the parent's. The child's watchers use an instance of
        its own, made at the first that needs one; the inherited ones move to it."""
        global _process, _making, _instance_retry, _instance_refused
        _process, _making = None, threading.Lock()
        _instance_retry = _instance_refused = None  # the child asks for its own at once
        _told.clear()  # the child's log is told again
        self.lock = threading.Lock()  # another thread may have held it at the fork
        self.forked = True
        self.poller, self.followers, self._watches = None, {}, {}
        self.watchers, self.pending = set(), set()
        os.close(self.fd)  # the child's copies: the parent's instance lives on
        os.close(self._kick)

    def add(self, path: bytes, mask: int) -> int:
        """The watch descriptor of the folder at `path` (-1, errno set, if none): the one
        it has already, if another watcher asked, its events those both asked for."""
        return int(self._add(self.fd, path, mask | _IN_MASK_ADD))

    def holds(self, wd: int) -> bool:
        """Whether a watcher of this process holds the watch `wd` (else the kernel just
        made it)."""
        return wd in self._watches

    def hold(self, wd: int, watcher: InotifyWatcher, parent: bool) -> None:
        watch = self._watches.get(wd)
        if watch is None:
            watch = self._watches[wd] = _Watch()
        (watch.parents if parent else watch.folders).append(watcher)

    def let_go(self, wd: int, watcher: InotifyWatcher, parent: bool) -> None:
        watch = self._watches.get(wd)
        if watch is None:  # _NO_WATCH, or one the kernel let go of (its folder deleted)
            return
        holders = watch.parents if parent else watch.folders
        with contextlib.suppress(ValueError):
            holders.remove(watcher)
        if not watch.folders and not watch.parents:
            del self._watches[wd]
            if _INOTIFY_RM is not None:
                _INOTIFY_RM(self.fd, wd)  # EINVAL if the kernel let go of it already

    def drain(self, reader: InotifyWatcher | None) -> None:
        """Hand out what the instance holds, without waiting."""
        try:
            data = os.read(self.fd, _BUFFER)
        except BlockingIOError:
            return
        self.hand_out(data, reader)

    def hand_out(self, data: bytes, reader: InotifyWatcher | None) -> None:
        """Give each watcher its news in `data`, read by `reader`'s thread (and what more
        the instance holds), wake those that wait for it, and note the others as pending
        (`read_news`)."""
        touched: set[InotifyWatcher] = set()
        watches = self._watches
        unpack, header = _EVENT.unpack_from, _EVENT.size
        while True:
            offset = 0
            while offset < len(data):
                wd, mask, _, length = unpack(data, offset)
                start = offset + header
                offset = start + length
                watch = watches.get(wd)
                if watch is None:
                    if mask & _IN_Q_OVERFLOW:  # the queue is every watcher's: all lost news
                        for watcher in self.watchers:
                            watcher.lose()
                            watcher.moved = True  # what was lost may be the folder's leaving
                        touched.update(self.watchers)
                    continue  # else a watch let go of: old news
                if mask & _IN_IGNORED:
                    del watches[wd]  # the kernel let go of it: its folder was deleted
                if folders := watch.folders:
                    if mask & _SELF:
                        for watcher in folders:
                            watcher.moved = True
                    elif length:
                        # The name, NUL padding and all (see InotifyWatcher.names), for each
                        # watcher of the folder: inlined, two events per message put and
                        # taken in this process.
                        raw = data[start:offset]
                        came = not mask & _LEFT
                        for watcher in folders:
                            if watcher.everything:
                                continue  # a rescan is due: names are no news
                            names = watcher.names
                            if came:
                                names[raw] = None
                                if len(names) > _UNREAD:
                                    watcher.lose()
                            elif raw in names:
                                del names[raw]
                            else:
                                gone = watcher.gone
                                gone.append(raw)
                                if len(gone) > _UNREAD:
                                    watcher.lose()
                    touched.update(folders)
                if watch.parents and mask & (_PARENT_MASK | _SELF):
                    name = data[start:offset].rstrip(b"\0")
                    for watcher in watch.parents:
                        if mask & _SELF or name == watcher.base:
                            watcher.moved = True
                            touched.add(watcher)
                    # else another name in the parent: none of its watchers'
            if len(data) <= _BUFFER - _LARGEST_EVENT:  # else more may wait: read again
                break
            try:
                data = os.read(self.fd, _BUFFER)
            except BlockingIOError:
                break
        if not touched:
            return
        touched.discard(reader)  # it takes its news now
        self.pending |= touched
        if not self.followers and self.poller is None:
            return  # nobody waits: a lone receive's look (wait(0)) wakes nobody
        for watcher in touched:
            if watcher in self.followers:
                watcher.cond.notify()
            elif watcher is self.poller:
                self.kick()  # it polls: the events it would have woken for were read here

    def poll(self, poller: InotifyWatcher, timeout: float | None) -> None:
        """Wait for events (or `poller`'s wakeup) with the lock released, then hand them
        out."""
        millis = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        self.poller = poller
        self.lock.release()
        try:
            ready = self._poll.poll(millis)
        finally:
            self.lock.acquire()
            self.poller = None
        for fd, _ in ready:
            if fd == self._kick:
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(self._kick)
        self.drain(poller)

    def kick(self) -> None:
        os.eventfd_write(self._kick, 1)

    def hand_over(self) -> None:
        """The poller stops waiting: one of the watchers still waiting polls in its place."""
        if self.poller is None and self.followers:
            next(iter(self.followers)).cond.notify()


_process: _Inotify | None = None  # made by the first watcher, kept for the process's life
_making = threading.Lock()
# While the kernel refuses the process an instance: when to ask again, for all its readers
# (one inotify_init1 per try, not one per reader), and the refusal, which those that ask
# before then are given again.
_instance_retry: _Backoff | None = None
_instance_refused: OSError | None = None
# Why readers of this process poll instead of being woken, said once each in the log, and the
# end of it once if it ends: cause -> whether its end was said. The causes: "instance" (the
# kernel refused an instance), "watches" (fs.inotify.max_user_watches reached), "missing" (no
# folder at a path read, whose end is each folder's: not said), "system" (no inotify), or
# the errno's name of another refused watch.
_told: dict[str, bool] = {}
_MAX_WATCHES = "/proc/sys/fs/inotify/max_user_watches"


def _polls(cause: str, level: int, message: str, *args: object) -> None:
    """Say in the log why readers poll, once per process for each cause."""
    if cause not in _told:
        _told[cause] = False
        log.log(level, message, *args)


def _works_again(cause: str, message: str, *args: object) -> None:
    """Say once that a cause of polling said before has ended."""
    if _told.get(cause) is False:
        _told[cause] = True
        log.info(message, *args)


def _max_watches() -> str:
    try:
        with open(_MAX_WATCHES) as limit:
            return limit.read().strip()
    except OSError:
        return "?"


def _shared() -> _Inotify:
    """The process's inotify instance: made at the first call, and after a fork in the
    child at its first. Refused, it is asked for again when `_instance_retry` says, whoever
    asks: a call before then raises the refusal again (`_instance_due`)."""
    global _process, _instance_retry, _instance_refused
    if (shared := _process) is None:
        with _making:
            if (shared := _process) is None:
                now = time.monotonic()
                retry, refused = _instance_retry, _instance_refused
                if retry is not None and refused is not None and now < retry.due:
                    raise OSError(refused.errno, refused.strerror)
                try:
                    shared = _process = _Inotify()
                except OSError as error:
                    if retry is None:
                        _instance_retry = _Backoff(now=now)
                    else:
                        retry.refused(now=now)
                    _instance_refused = error
                    _polls(
                        "instance",
                        logging.WARNING,
                        "no inotify instance for this process (%s: the user's "
                        "fs.inotify.max_user_instances taken by other processes, or "
                        "ulimit -n): its readers find new files by polling",
                        error.strerror,
                    )
                    raise
                _instance_retry = _instance_refused = None
                _works_again(
                    "instance",
                    "an inotify instance for this process at last: its readers are woken by "
                    "inotify again, those that polled from their next try (within a minute)",
                )
    return shared


def _instance_due() -> float | None:
    """While the process has no instance: when it is asked for again (`_shared`)."""
    retry = _instance_retry
    return None if _process is not None or retry is None else retry.due


def _refused_watch(error: OSError, interval: float) -> None:
    """Say why a folder cannot be watched (`error`, from inotify_add_watch), once per cause:
    its readers poll it every `interval` seconds. Called at each look again of a watcher
    without a watch: a cause said already costs a lookup."""
    code = error.errno or 0
    if code == errno.ENOSPC:
        cause = "watches"
    elif code in (errno.ENOENT, errno.ENOTDIR):
        cause = "missing"
    else:
        cause = errno.errorcode.get(code, "other")
    if cause in _told:
        return
    path = error.filename
    if cause == "watches":
        # Each folder read takes two watches, its own and its parent's: raising the limit
        # is the fix (the sysctl applies at once, to processes already running).
        _polls(
            cause,
            logging.WARNING,
            "inotify watch limit reached (fs.inotify.max_user_watches = %s, first refused "
            "for %s): folders beyond it are polled every %g s, which costs latency and CPU; "
            "raise it with `sysctl fs.inotify.max_user_watches=N` (two watches per queue or "
            "subscription read at once, for all of the user's processes; in /etc/sysctl.d/ "
            "to keep it after a reboot)",
            _max_watches(),
            path,
            interval,
        )
    elif cause == "missing":
        # Debug only: a folder deleted on purpose (a queue, an unsubscribe) is missing under
        # its last readers, and `boxmq subscribe` prints INFO lines above its own answer.
        _polls(
            cause,
            logging.DEBUG,
            "%s is missing (deleted, or not made yet): its readers look in it every %g s, "
            "by polling; another missing folder is not said again",
            path,
            interval,
        )
    else:
        _polls(
            cause,
            logging.WARNING,
            "cannot watch %s with inotify (%s): its readers find new files by polling every "
            "%g s; others refused for the same reason are not said again",
            path,
            error.strerror,
            interval,
        )


class InotifyWatcher:
    """New files in one directory, by name, as the kernel reports them. Every watcher of a
    process shares its one inotify instance (`_Inotify`): a user may have 128."""

    def __init__(self, directory: str, *, retry_interval: float = 0.25) -> None:
        if _INOTIFY_INIT is None or _INOTIFY_ADD is None:
            raise OSError(errno.ENOSYS, "this system has no inotify")
        self._inotify = inotify = _shared()
        self.cond = threading.Condition(inotify.lock)  # for the news the poller hands out
        self._path = os.fsencode(directory)
        named = directory.rstrip(os.sep) or os.sep  # "q/target/" is the folder "target" too
        self._parent = os.fsencode(os.path.dirname(named) or ".")
        self.base = os.fsencode(os.path.basename(named))
        self._folder_wd = self._parent_wd = _NO_WATCH
        self._retry_interval = retry_interval
        self._retry_at: float | None = None  # while the path holds no folder: when to look
        self._error: OSError | None = None  # why the last look found no folder to watch
        # The news the instance handed out since the last wait. A name is kept as the event
        # carries it, NUL padding and all (the same padding for the same name: a key as good
        # as the name), and decoded only if it is reported: most names came and left between
        # two waits (this process's puts, claimed at once).
        self.names: dict[bytes, None] = {}  # in order of arrival, and quick to take one out of
        self.gone: list[bytes] = []  # left, and came before the last wait
        self.moved = False  # the folder may have left its path
        self.everything = False  # news was lost: rescan
        self._woken = False
        self._closed = False
        # In a forked child the kernel refused an instance of its own: it polls meanwhile, and
        # tries for one again when `_backoff` says (`_move_to_child`).
        self._polling: PollingWatcher | None = None
        self._backoff: _Backoff | None = None
        self.on_news: Callable[[], object] | None = None
        with inotify.lock:
            if not self._rewatch():
                self._let_go()
                assert self._error is not None
                raise self._error
            inotify.watchers.add(self)

    @property
    def polls(self) -> bool:
        """While no folder is at its path, it looks for one on a timer, at a `wait`; while
        a forked child has no instance, it polls."""
        return self._retry_at is not None or self._polling is not None

    def lose(self) -> None:
        """News was lost (the instance's queue overflowed), or too much of it is unread
        (`_UNREAD`): the caller rescans."""
        self.everything = True
        self.names.clear()
        self.gone.clear()

    def wait(self, timeout: float | None) -> Changes:
        inotify = self._inotify
        if inotify.forked:
            child = self._move_to_child()
            if child is None:
                return self._poll_in_child(timeout)
            inotify = child
        with inotify.lock:
            inotify.pending.discard(self)
            if timeout != 0:
                self._wait(inotify, timeout)
            else:
                # The descriptor does not block: what the kernel holds now is read in this
                # thread, in one call when there is nothing (most receives' looks).
                try:
                    data = os.read(inotify.fd, _BUFFER)
                except BlockingIOError:
                    pass
                else:
                    inotify.hand_out(data, self)
            if self.moved or self.everything or self._retry_at is not None:
                return self._rescan()
            names, gone = self.names, self.gone
            if not names and not gone:
                return Changes()
            self.names, self.gone = {}, []
        # Decoded in loops of their own, not a function or comprehension per list: read at
        # every receive, a read's few names must not cost more than decoding them at once.
        came: list[str] = []
        for raw in names:
            if name := raw.rstrip(b"\0"):
                came.append(name.decode(_FS_ENCODING, _FS_ERRORS))  # os.fsdecode, inlined
        left: list[str] = []
        for raw in gone:
            if name := raw.rstrip(b"\0"):
                left.append(name.decode(_FS_ENCODING, _FS_ERRORS))
        return Changes(came, False, left)

    def _wait(self, inotify: _Inotify, timeout: float | None) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        if self._retry_at is not None:  # no folder watched: look for one when due
            end = self._retry_at if end is None else min(end, self._retry_at)
        try:
            while not (self._woken or self.moved or self.names or self.gone or self.everything):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                if inotify.poller is None:
                    inotify.poll(self, left)
                else:
                    inotify.followers[self] = None
                    try:
                        self.cond.wait(left)
                    finally:
                        del inotify.followers[self]
        finally:
            self._woken = False  # a wake-up before the wait ends it at once, as a pipe's did
            inotify.hand_over()

    def _rescan(self) -> Changes:
        if self.moved or (self._retry_at is not None and time.monotonic() >= self._retry_at):
            # What the old folder held is gone with it: the caller rescans (the new folder's
            # files, those that came before its watch included).
            moved = self.moved
            watched = not self._closed and self._rewatch()
            self.moved = self.everything = False  # what it said came before the rescan
            self.names.clear()
            self.gone.clear()
            # A folder there that the kernel would not watch (its watch limit reached) is
            # polled: rescanned at each look, or what lands in it waited for the reader's
            # next full rescan.
            return Changes(everything=moved or watched or self._unwatchable())
        if self.everything:
            self.everything = False
            return Changes(everything=True)
        return Changes()  # no folder to watch yet, nor time to look again

    def wakeup(self) -> None:
        inotify = self._inotify
        with inotify.lock:
            self._rouse(inotify)
        if (polling := self._polling) is not None:
            polling.wakeup()

    def _rouse(self, inotify: _Inotify) -> None:
        """End this watcher's wait in another thread, or the next one. Under the lock."""
        self._woken = True
        if self in inotify.followers:
            self.cond.notify()
        elif inotify.poller is self:
            inotify.kick()

    def _rewatch(self) -> bool:
        """Watch the folder at the path and its parent, whichever they are now, and let go
        of the watches of folders that left it; True if watched, else look again later (or
        when the parent, if there is one, says that a folder came to the name). Under the
        instance's lock."""
        inotify = self._inotify
        # What the instance holds came before this watch (another watcher's folder may be
        # this one's, or its parent): its watchers' news, not this one's.
        inotify.drain(self)
        parent = inotify.add(self._parent, _PARENT_MASK)
        folder = inotify.add(self._path, _FOLDER_MASK) if parent >= 0 else _NO_WATCH
        if folder < 0:
            self._error = libc.last_error(os.fsdecode(self._path))
            _refused_watch(self._error, self._retry_interval)
        else:
            self._error = None
            if _told.get("watches") is False and not inotify.holds(folder):
                _works_again(
                    "watches",
                    "inotify watches to be had again (fs.inotify.max_user_watches = %s): "
                    "folders that could not be watched are watched from their readers' next "
                    "try (within a minute)",
                    _max_watches(),
                )
        # Held before the old ones are let go: the same folder keeps its watch.
        if parent >= 0:
            inotify.hold(parent, self, True)
        if folder >= 0:
            inotify.hold(folder, self, False)
        self._let_go()
        self._folder_wd, self._parent_wd = folder, parent
        watched = folder >= 0
        self._retry_at = None if watched else time.monotonic() + self._retry_interval
        return watched

    def _unwatchable(self) -> bool:
        """The last look found a folder at the path, which could not be watched."""
        error = self._error
        return error is not None and error.errno not in (errno.ENOENT, errno.ENOTDIR)

    def _let_go(self) -> None:
        self._inotify.let_go(self._folder_wd, self, False)
        self._inotify.let_go(self._parent_wd, self, True)
        self._folder_wd = self._parent_wd = _NO_WATCH

    def _move_to_child(self) -> _Inotify | None:
        """In a forked child, at its first wait: watch through the child's own instance, and
        say "rescan" (what came meanwhile went to the parent's). None if the kernel refuses
        the child an instance (said once in the log, `_shared`): the watcher polls, and
        tries again when `_backoff` says."""
        now = time.monotonic()
        backoff = self._backoff
        if backoff is not None and now < backoff.due:
            return None
        try:
            inotify = _shared()
        except OSError:
            if backoff is None:
                backoff = self._backoff = _Backoff(now=now)
                self._polling = PollingWatcher(self._retry_interval)
                self.everything = True  # what came before went to the parent's: rescan
            else:
                backoff.refused(now=now)
            if (due := _instance_due()) is not None:
                backoff.due = due  # the child's next ask, for all its watchers
            return None
        self._inotify = inotify
        self.cond = threading.Condition(inotify.lock)
        with inotify.lock:
            self._folder_wd = self._parent_wd = _NO_WATCH
            # The watch is made at this wait's `_rescan`, before it says "rescan": a file
            # that landed while the watcher polled is in that rescan, or in its news.
            self.moved = True
            if not self._closed:
                inotify.watchers.add(self)
        if (polling := self._polling) is not None:
            self._polling = self._backoff = None
            polling.close()  # a wait polling in another thread ends, to wait on the watch
        return inotify

    def _poll_in_child(self, timeout: float | None) -> Changes:
        """A wait in a forked child the kernel refused an instance: a poll."""
        polling = self._polling
        if polling is None:  # another thread's wait has just moved it to the child's instance
            return Changes(everything=True)
        if self.everything:
            self.everything = False
            return Changes(everything=True)
        return polling.wait(timeout)

    def close(self) -> None:
        inotify = self._inotify
        with inotify.lock:
            if self._closed:
                return
            self._closed = True
            if not inotify.forked:  # else the watches are the parent's
                self._let_go()
            inotify.watchers.discard(self)
            inotify.pending.discard(self)
            self._rouse(inotify)  # a wait in another thread ends, as a polling watcher's does
        if (polling := self._polling) is not None:
            polling.close()


class PollingWatcher:
    """Naps, then says "rescan" at most once per interval (a rescan costs a directory scan)."""

    polls = True
    on_news: Callable[[], object] | None = None  # never called: only a wait finds news

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._woken = threading.Event()
        self._last = time.monotonic()

    def wait(self, timeout: float | None) -> Changes:
        due = self._last + self._interval - time.monotonic()
        nap = due if timeout is None else min(timeout, due)
        if nap > 0:
            self._woken.wait(nap)
            self._woken.clear()
        if time.monotonic() < self._last + self._interval:
            return Changes()
        self._last = time.monotonic()
        return Changes(everything=True)

    def wakeup(self) -> None:
        self._woken.set()

    def close(self) -> None:
        self._woken.set()


class _Refused:
    """A reader's watcher when inotify was refused it (no instance for the process, no watch
    left, no folder at its path): it polls, and tries inotify again when `_Backoff` says, as
    a watcher does whose folder was made again (`InotifyWatcher._rewatch`). Once watched, it
    says "rescan" (the watch is made before: a file that landed meanwhile is in that rescan,
    or in the watch's news) and waits on the watch from then on. A reader that polled for
    the whole life of a broker started while the machine was full (its 128 instances taken)
    is woken again within a minute of there being room."""

    def __init__(self, directory: str, *, poll_interval: float) -> None:
        self._directory = directory
        self._interval = poll_interval
        self._polling = PollingWatcher(poll_interval)
        self._watched: InotifyWatcher | None = None
        self._backoff = _Backoff(now=time.monotonic())
        self._trying = threading.Lock()  # held by the thread trying
        self._closed = False
        self._on_news: Callable[[], object] | None = None

    @property
    def on_news(self) -> Callable[[], object] | None:
        return self._on_news

    @on_news.setter
    def on_news(self, told: Callable[[], object] | None) -> None:
        self._on_news = told
        if (watched := self._watched) is not None:
            watched.on_news = told

    @property
    def polls(self) -> bool:
        watched = self._watched
        return watched is None or watched.polls

    def wait(self, timeout: float | None) -> Changes:
        if (watched := self._watched) is not None:
            return watched.wait(timeout)
        if not self._closed and time.monotonic() >= self._backoff.due and self._try():
            return Changes(everything=True)
        # A nap of a poll interval at most: the next try is late by no more.
        return self._polling.wait(timeout)

    def _try(self) -> bool:
        """Watch with inotify if it is to be had now; True if watched (by this thread's try or
        another's)."""
        # Not waited for: a thread that finds another trying polls meanwhile (and a child
        # forked during a try, which holds it for ever, polls).
        if not self._trying.acquire(blocking=False):
            return False
        try:
            if self._watched is not None:
                return True
            now = time.monotonic()
            if now < self._backoff.due:
                return False
            try:  # said in the log once per cause, and its end once (`_works_again`)
                watched = InotifyWatcher(self._directory, retry_interval=self._interval)
            except OSError:
                self._backoff.refused(now=now)
                if (due := _instance_due()) is not None:
                    self._backoff.due = due  # the process's next ask, for all its readers
                return False
            watched.on_news = self._on_news
            self._watched = watched
        finally:
            self._trying.release()
        if self._closed:  # closed during the try, which close() did not see: let go of it
            watched.close()
        self._polling.close()  # a wait polling in another thread ends, to wait on the watch
        return True

    def wakeup(self) -> None:
        if (watched := self._watched) is not None:
            watched.wakeup()
        self._polling.wakeup()

    def close(self) -> None:
        self._closed = True  # before it looks for a watcher: a try after it closes its own
        if (watched := self._watched) is not None:
            watched.close()
        self._polling.close()


def read_news() -> None:
    """Read the process's inotify instance now, without waiting, and call the `on_news` of
    each watcher it gave news that no `wait` of that watcher read yet (once: the next call
    tells it again only of news that came since). For a process that does not wait on its
    watchers but looks at them in turn: an MQTT broker with thousands of connected
    sessions reads the instance once per tick, then looks at those with news alone, where
    a look at each (a read of the instance) cost 30-120 us (docs/benchmarks.md, "Many
    connected persistent sessions")."""
    inotify = _process
    if inotify is None or inotify.forked:
        return  # no watcher yet; or the parent's, which a child's watcher moves from at its wait
    with inotify.lock:
        inotify.drain(None)
        pending, inotify.pending = inotify.pending, set()
    for watcher in pending:  # out of the lock: a callback may take its owner's
        if (told := watcher.on_news) is not None:
            told()


def watch(directory: str, *, poll_interval: float, polling: bool = False) -> Watcher:
    """The best watcher for `directory`: inotify if we can; polling if asked, or if we cannot,
    trying inotify again now and then if it was refused (`_Refused`)."""
    if not polling:
        try:
            return InotifyWatcher(directory, retry_interval=poll_interval)
        except OSError as error:  # said in the log once per cause (`_polls`)
            if error.errno != errno.ENOSYS:
                return _Refused(directory, poll_interval=poll_interval)
            _polls("system", logging.INFO, "no inotify on this system: readers poll")
    return PollingWatcher(poll_interval)
