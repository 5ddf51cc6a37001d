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
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from boxmq.store import libc

__all__ = ["Changes", "InotifyWatcher", "PollingWatcher", "Watcher", "watch"]

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


@dataclass(frozen=True, slots=True)
class Changes:
    names: list[str] = field(default_factory=list)  # came, and had not left at the read
    everything: bool = False  # the caller must rescan: overflow, or a poll
    gone: list[str] = field(default_factory=list)  # left (claimed, moved, deleted), came before


class Watcher(Protocol):
    def wait(self, timeout: float | None) -> Changes:
        """Block until something lands, `wakeup` is called, or `timeout` seconds pass."""
        ...

    def wakeup(self) -> None:
        """Make a `wait` in another thread return now (e.g. a slot was freed by an ack)."""
        ...

    def close(self) -> None: ...


class InotifyWatcher:
    """New files in one directory, by name, as the kernel reports them."""

    def __init__(self, directory: str, *, retry_interval: float = 0.25) -> None:
        if _INOTIFY_INIT is None or _INOTIFY_ADD is None:
            raise OSError(errno.ENOSYS, "this system has no inotify")
        self._add = _INOTIFY_ADD
        self._fd = _INOTIFY_INIT(_IN_NONBLOCK | _IN_CLOEXEC)
        if self._fd < 0:
            raise libc.last_error(directory)
        self._path = os.fsencode(directory)
        named = directory.rstrip(os.sep) or os.sep  # "q/target/" is the folder "target" too
        self._parent = os.fsencode(os.path.dirname(named) or ".")
        self._base = os.fsencode(os.path.basename(named))
        self._folder_wd = self._parent_wd = _NO_WATCH
        self._retry_interval = retry_interval
        self._retry_at: float | None = None  # while the path holds no folder: when to look
        self._error: OSError | None = None  # why the last look found no folder to watch
        if not self._rewatch():
            os.close(self._fd)
            assert self._error is not None
            raise self._error
        try:
            self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:  # EMFILE: the caller polls instead; the instance is not kept
            os.close(self._fd)
            raise
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._poll.register(self._wake_read, select.POLLIN)

    def wait(self, timeout: float | None) -> Changes:
        if timeout == 0:
            # The descriptor does not block: a read answers what a poll would, in one call
            # (a wake-up left in the pipe only makes the next blocking wait return early).
            return self._read()
        if self._retry_at is not None:  # no folder watched: look for one when due
            due = max(0.0, self._retry_at - time.monotonic())
            timeout = due if timeout is None else min(timeout, due)
        millis = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        ready = {fd for fd, _ in self._poll.poll(millis)}
        if self._wake_read in ready:
            while True:
                try:
                    os.read(self._wake_read, 4096)
                except BlockingIOError:
                    break
        return self._read() if self._fd in ready or self._retry_at is not None else Changes()

    def wakeup(self) -> None:
        with contextlib.suppress(BlockingIOError):  # the pipe is full of wake-ups already
            os.write(self._wake_write, b"!")

    def _read(self) -> Changes:
        # A name is kept as the event carries it, NUL padding and all (the same padding for
        # the same name: a key as good as the name), and decoded only if it is reported: most
        # names came and left between two reads (this process's puts, claimed at once).
        names: dict[bytes, None] = {}  # in order of arrival, and quick to take one out of
        gone: list[bytes] = []
        everything = moved = False  # moved: the folder may have left its path
        folder, parent = self._folder_wd, self._parent_wd
        unpack, header = _EVENT.unpack_from, _EVENT.size
        while True:
            try:
                data = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                break
            drained = len(data) <= _BUFFER - _LARGEST_EVENT  # else more may wait: read again
            offset = 0
            while offset < len(data):
                wd, mask, _, length = unpack(data, offset)
                start = offset + header
                offset = start + length
                if mask & _IN_Q_OVERFLOW:
                    everything = moved = True  # what was lost may be the folder's leaving
                elif wd == folder:
                    if mask & _SELF:
                        moved = True
                    elif length:
                        raw = data[start:offset]
                        if not mask & _LEFT:
                            names[raw] = None
                        elif raw in names:
                            del names[raw]
                        else:
                            gone.append(raw)
                elif wd == parent and (
                    mask & _SELF or data[start:offset].rstrip(b"\0") == self._base
                ):
                    moved = True
                # else: a watch let go of (the folder before the one there now), or another
                # name in the parent: old news, or none of ours
            if drained:  # poll() is level-triggered: anything that comes later wakes it again
                break
        if moved or (self._retry_at is not None and time.monotonic() >= self._retry_at):
            # What the old folder held is gone with it: the caller rescans (the new folder's
            # files, those that came before its watch included).
            watched = self._rewatch()
            return Changes(everything=moved or watched)
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
        return Changes(came, everything, left)

    def _rewatch(self) -> bool:
        """Watch the folder at the path and its parent, whichever they are now, and let go
        of the watches of folders that left it; True if watched, else look again later (or
        when the parent, if there is one, says that a folder came to the name)."""
        parent = self._add(self._fd, self._parent, _PARENT_MASK)
        folder = self._add(self._fd, self._path, _FOLDER_MASK) if parent >= 0 else _NO_WATCH
        if folder < 0:
            self._error = libc.last_error(os.fsdecode(self._path))
        for old in {self._folder_wd, self._parent_wd} - {folder, parent, _NO_WATCH}:
            self._unwatch(old)
        self._folder_wd, self._parent_wd = folder, parent
        watched = folder >= 0
        self._retry_at = None if watched else time.monotonic() + self._retry_interval
        return watched

    def _unwatch(self, wd: int) -> None:
        if _INOTIFY_RM is not None:
            _INOTIFY_RM(self._fd, wd)  # EINVAL if the kernel let go of it already: as wanted

    def close(self) -> None:
        if self._fd >= 0:
            for fd in (self._fd, self._wake_read, self._wake_write):
                os.close(fd)
            self._fd = -1


class PollingWatcher:
    """Naps, then says "rescan" at most once per interval (a rescan costs a directory scan)."""

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


def watch(directory: str, *, poll_interval: float, polling: bool = False) -> Watcher:
    """The best watcher for `directory`: inotify if we can, polling if asked or if we cannot."""
    if not polling:
        try:
            return InotifyWatcher(directory, retry_interval=poll_interval)
        except OSError:
            pass  # e.g. the inotify instance limit: fall back to polling
    return PollingWatcher(poll_interval)
