"""Spare files: the inodes of deleted messages, kept for the next put to write into.

A put that creates its file makes the file system allocate an inode, and an ack that deletes
one makes it free one. Renaming a spare into working/ and overwriting it costs two renames'
worth instead, and on ext4 without a journal far less than that: there the inode allocator
passes over every inode freed in the last one to five minutes (it reads each one's deletion
time), so a root that deletes thousands of files a second paid 1.1 to 1.4 ms of CPU per
`open(O_CREAT)` here, against 20 to 50 µs (docs/benchmarks.md, "Spare files").

The pool is the folder `.spare/` of the root (one file system, so a rename reaches every
queue), in two parts:

- **Own spares**, in a folder of this pool alone (`.spare/<process token>+<n>/`), which no
  other process takes from while this one lives. A put writes its body into one in place and
  renames it straight into target/: working/ is only there so that nobody sees a file half
  written, and nobody looks in this folder. That is one rename less than a shared spare
  (8 of 47 µs of a put → take → ack's file operations on this ext4). A process that dies
  leaves the folder; another pool adopts what is in it at its first put or ack, or at a
  sweep's full pass (`take_over_the_dead`), whichever comes first.
- **Shared spares**, `.spare/<process token>.<n>`, for the files an acking process has more
  of than it keeps as its own (half of `limit`; both together stay within `limit`), and for
  those it hands back when it closes. A process with no own spare takes one by a rename
  into working/, which two processes cannot both win. It adopts the shared spares it finds
  when it starts (deleting those over `limit`, so the folder stays near that size), and
  looks again, at most once a second, whenever it has none left: a process that only puts
  reuses the files of the processes that ack.

Only a file that no other name links to becomes a spare (a fan-out links one body into
several dropboxes), and only a small one; so is only such a file adopted from the own folder
of a process that died (a publish killed after its links leaves the body linked there, a put
killed before its rename a body of any size).

**Open own spares.** A put into an own spare leaves the file open, and when this pool's ack
gives the same file back (known by its inode number: an open file's inode cannot be freed
and reused), the spare keeps that descriptor, so the next put writes through it with one
pwrite instead of open, write and close: 1.6 against 7.1 µs here (docs/benchmarks.md, "Open
spares"). A pool holds a bounded number of them (`_kept_fds`); a message another process
acks closes its descriptor when it is pushed out.

**Deletes.** A file the pool does not keep (full, linked elsewhere, large) is renamed into
the own folder as `gone.<n>` and unlinked by a thread (deleter.py): the ack's thread, a
broker's event loop, pays a rename (20 µs) where an unlink cost it 1 to 2 ms on ext4 mounted
with discard. Files there are never messages: a dead process's are adopted as its spares are.

Until it is reused, a spare still holds the body of the message it was, as a database's free
pages hold deleted rows; `spares=0` (boxmq.open) deletes acknowledged files instead.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import sys
import threading
import time
from collections.abc import Iterable

from boxmq.errors import naming
from boxmq.forks import renew_in_children
from boxmq.store import libc
from boxmq.store.deleter import Deleter
from boxmq.store.process import process_alive, process_token

__all__ = ["SPARE_DIR", "Spares", "remove_file", "rename_noreplace", "write_new"]

SPARE_DIR = ".spare"
_LOOK_INTERVAL = 1.0  # seconds between looks in the folder by a process that has no spare
_GONE_INTERVAL = 1.0  # seconds between two close_gone for deletes (close_gone_soon)
_LARGEST = 1 << 16  # bytes: a bigger file is deleted, not kept (its blocks are worth freeing)
# The length taken for a spare found in the shared folder (`_look`, no stat): longer than any
# body, so that the rewrite always cuts the file to its body's. `give` keeps none over
# _LARGEST, but a file put there by hand, or by an older boxmq, may be of any length.
_UNKNOWN_SIZE = sys.maxsize
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_REWRITE = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
_AT_FDCWD = -100
_NOREPLACE = 1  # RENAME_NOREPLACE
_OWN = "+"  # .spare/<process token>+<n>/: one pool's own spares (a token holds no '+')
_POOLS = itertools.count()  # tells apart the pools of one process (one per open root)
_NO_FD = -1
_MOST_KEPT_FDS = 128  # descriptors a pool keeps open for messages out, at most
_FULL = (errno.ENOSPC, errno.EDQUOT)  # the disk has no room (blocks or inodes) for a spare
_KEEP_TRIES = 3  # renames into a spare folder that is being deleted, before deleting instead
_GONE = "gone."  # <own folder>/gone.<n>: a finished file the deleter's thread unlinks (deleter.py)


def _kept_fds() -> int:
    """How many written files a pool keeps open: a small share of the process's limit, so
    that sockets (a broker's clients) never run short because of it."""
    try:
        import resource  # not on every platform
    except ImportError:
        return 0
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _MOST_KEPT_FDS if soft == resource.RLIM_INFINITY else min(_MOST_KEPT_FDS, soft // 16)


# renameat2(int, const char *, int, const char *, unsigned int), called with Python ints and
# bytes only, which ctypes passes as int and char * by itself: without argtypes, ctypes
# converts them without a from_param per argument (0.4 µs of the 1.5 µs a call costs here).
_RENAMEAT2 = libc.function("renameat2")
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def rename_noreplace(source: str, target: str) -> None:
    """Rename, failing with FileExistsError if `target` exists (renameat2 RENAME_NOREPLACE;
    where the kernel or libc lacks it, a hard link and an unlink, which fail the same way)."""
    if _RENAMEAT2 is not None:
        old = source.encode(_FS_ENCODING, _FS_ERRORS)  # os.fsencode, without its wrapper
        new = target.encode(_FS_ENCODING, _FS_ERRORS)
        if _RENAMEAT2(_AT_FDCWD, old, _AT_FDCWD, new, _NOREPLACE) == 0:
            return
        error = libc.last_error(source, target)
        if error.errno not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: the file system cannot
            raise error
    os.link(source, target)
    os.unlink(source)


class Spares:
    """The spare files of one root, as one process sees them."""

    def __init__(self, root: str, token: str, *, limit: int = 256) -> None:
        self.path = os.path.join(root, SPARE_DIR)
        self.limit = limit
        self._name_by(token)
        # Spares only this pool touches: (path, size, inode, open descriptor or _NO_FD).
        self._own: list[tuple[str, int, int, int]] = []
        # Files written through an own spare, now messages: inode -> descriptor, oldest first.
        self._open: dict[int, int] = {}
        self._kept_fds = _kept_fds()
        self._own_limit = (limit + 1) // 2  # the rest of `limit` is shared with the others
        self._closed = False
        self._device: int | None = None  # st_dev of the root: a rename reaches no other
        self._numbers = itertools.count()
        self._names: list[tuple[str, int]] = []  # shared spares this pool may take, and sizes
        self._adopted = False
        self._next_look = 0.0  # time.monotonic() when an empty pool may look in the folder
        # close_gone_soon: when a delete may close at once (time.monotonic()), and whether
        # one since waits for a close (the sweep's close_gone_due, or a put's or an ack's).
        self._next_gone = 0.0
        self._gone_due = False
        self._lock = threading.Lock()
        self._deleter = Deleter()
        renew_in_children(self)

    def _name_by(self, token: str) -> None:
        """Name this pool's files by the process token `token`."""
        self._prefix = os.path.join(self.path, f"{token}.")
        self._own_dir = os.path.join(self.path, f"{token}{_OWN}{next(_POOLS)}")
        self._own_prefix = self._own_dir + os.sep

    def renew_in_child(self) -> None:
        """In a forked child: the own spares, open or not, are the parent's, which writes
        into them; the child starts with none, under its own token, and looks in the shared
        pool for itself (a take there is a rename, which only one process wins)."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        _close_all(fd for *_, fd in self._own if fd != _NO_FD)  # the child's copies only
        _close_all(self._open.values())
        self._own, self._open, self._names = [], {}, []
        self._next_look = 0.0
        self._name_by(process_token())

    def write(self, body: bytes, *, check: bool = True) -> str | None:
        """Write `body` into an own spare, in place, and return its path, for the caller to
        rename (or link) where the message goes; None when there is no own spare. On an error
        the spare is deleted and the error raised.

        check=False skips the `fstat` that finds a spare kept open whose file is gone (.spare/
        deleted): for a caller that renames the path at once and, when that fails because
        the file is gone (`lost`), writes again with check=True. One system call less per
        put (~3,600 instructions, docs/benchmarks.md)."""
        if self._gone_due:
            self._close_gone_late()
        own = self._own
        while own:  # else none: every put into a root whose acks give no file back
            try:
                path, size, inode, fd = own.pop()
            except IndexError:  # another thread took the last one
                return None
            if fd == _NO_FD:
                try:
                    fd = os.open(path, _REWRITE)
                except FileNotFoundError:
                    continue  # somebody deleted .spare/ (which costs nothing but the spares)
            elif check and not os.fstat(fd).st_nlink:  # the same, for a spare kept open: its
                self._open.pop(inode, None)  # put would fail at the rename into target/
                os.close(fd)
                continue
            _rewrite(fd, path, body, size)
            opened = self._open
            opened[inode] = fd  # kept for when this file comes back as a spare
            if len(opened) > self._kept_fds:
                self._close_oldest()
            return path
        return None

    def lost(self, path: str) -> bool:
        """After the rename of `path`, written by `write(check=False)`, failed: True if it was
        an own spare whose file is gone (.spare/ deleted meanwhile), and then the descriptors
        kept for files that are gone are closed, as `write`'s check closes them one by one.
        The caller writes again with check=True, which passes over the other spares gone."""
        if not path.startswith(self._own_prefix) or os.path.lexists(path):
            return False
        self.close_gone()
        return True

    def close_gone_soon(self) -> None:
        """`close_gone` after a delete (a subscription ended): now, unless one ran less than
        a second ago, and then at the next sweep (`close_gone_due`) or the first put or ack
        a second after the last one, whichever comes first. Each close_gone fstats every
        kept descriptor (128): 1,000 persistent sessions expiring together paid it 1,000
        times, where the first and one later close what they all left."""
        self._gone_due = True
        self._close_gone_late()

    def close_gone_due(self) -> None:
        """The `close_gone` that deletes since the last one left to the sweep, if any."""
        if self._gone_due:
            self.close_gone()

    def _close_gone_late(self) -> None:
        """`close_gone_due`, once its second is past: a delete's (`close_gone_soon`), and a
        put's or an ack's, as a script that unsubscribes and never sweeps (boxmq.open,
        docs/python.md) held the blocks of the files a delete left open until it closed the
        root. A put or an ack looks at _gone_due first (one attribute each); the clock only
        while a close waits."""
        if time.monotonic() >= self._next_gone:
            self.close_gone_due()

    def close_gone(self) -> None:
        """Close the descriptors kept for messages whose files are gone (a deleted queue's,
        or .spare/ deleted): an open file's blocks are freed only once it is closed, which
        else waited for newer puts to push it out, or the root's close."""
        self._gone_due = False  # before the look: a delete meanwhile asks for another
        self._next_gone = time.monotonic() + _GONE_INTERVAL
        with self._lock:  # as _close_oldest: a put or an ack may change _open meanwhile
            for inode, fd in list(self._open.items()):
                try:
                    gone = not os.fstat(fd).st_nlink
                except OSError:
                    continue
                if gone:
                    # The descriptor taken out is the one to close, as _close_oldest does: an
                    # ack and a put may have put another in place of the one judged (closed
                    # meanwhile, its number anybody's now), and only what the pop took is ours.
                    _close(self._open.pop(inode, _NO_FD))

    def _close_oldest(self) -> None:
        """Close kept descriptors, oldest first, down to the bound (a message another process
        acked, or one still waiting, pays its close now)."""
        with self._lock:
            opened = self._open
            while len(opened) > self._kept_fds:
                try:
                    oldest = next(iter(opened))
                except RuntimeError:  # a put or an ack changed it under the iterator
                    continue
                _close(opened.pop(oldest, _NO_FD))  # _NO_FD: an ack took it meanwhile

    def reaches(self, folder: str) -> bool:
        """Whether a rename from the pool can reach `folder` (the same file system)."""
        if self._device is None:  # the root's: the pool's folder may not be made yet
            self._device = os.stat(os.path.dirname(self.path)).st_dev
        return os.stat(folder).st_dev == self._device

    def take(self, path: str) -> int | None:
        """Move a spare to `path` (which must not exist) and return its size (_UNKNOWN_SIZE
        for one found in the shared folder); None when there is no spare."""
        if not self._adopted:
            self._adopt()
        own = self._own  # first: nobody else takes those
        while own:
            try:
                spare, size, inode, fd = own.pop()
            except IndexError:  # another thread took the last one
                break
            try:
                rename_noreplace(spare, path)
            except FileNotFoundError:  # somebody deleted .spare/
                _close(fd)
                continue
            except OSError as error:
                own.append((spare, size, inode, fd))
                if error.errno == errno.EXDEV:  # this dropbox is mounted elsewhere: create
                    return None
                raise
            _close(fd)  # the caller writes it by its new path
            return size
        if not self._names and time.monotonic() >= self._next_look:
            self._look()  # a process that only puts reuses what the ones that ack leave
        names = self._names
        while names:
            try:
                spare, size = names.pop()
            except IndexError:  # another thread took the last one
                return None
            try:
                rename_noreplace(spare, path)
            except FileNotFoundError:
                continue  # another process adopted it and took it first
            except OSError as error:
                names.append((spare, size))
                if error.errno == errno.EXDEV:  # this dropbox is mounted elsewhere: create
                    return None
                raise
            return size
        return None

    def give(self, path: str) -> bool:
        """Retire the finished file at `path`: kept as a spare, or deleted. False if it was
        gone already (somebody else moved it)."""
        if not self._adopted:
            self._adopt()
        if self._gone_due:
            self._close_gone_late()
        own = len(self._own) < self._own_limit and not self._closed
        if not own and len(self._own) + len(self._names) >= self.limit:
            return self._delete_later(path)
        # Checked before the file enters the pool, where another process may take it at once.
        # Its links cannot grow meanwhile: a fan-out links a body only before it is ready.
        try:
            status = os.stat(path)
        except FileNotFoundError:
            return False
        # What a put of this pool left open on this very file, if it did: an open file's
        # inode is never freed, so no other file can have its number meanwhile.
        fd = self._open.pop(status.st_ino, _NO_FD) if self._open else _NO_FD
        if status.st_nlink > 1 or status.st_size > _LARGEST:
            _close(fd)
            return self._delete_later(path)  # another dropbox links this body: never write in it
        folder, prefix = (self._own_dir, self._own_prefix) if own else (self.path, self._prefix)
        spare = prefix + str(next(self._numbers))
        kept: str | bool = spare
        try:  # _keep's usual case, without its call (one per ack)
            os.rename(path, spare)
        except OSError:
            # _keep tries again and sees why: no folder (it makes it), the file gone (False),
            # another file system (deleted instead) or another error (raised).
            kept = self._keep(path, folder, prefix)
        if not isinstance(kept, str):
            _close(fd)
            return kept  # True: removed instead; False: it was gone
        if not own:
            self._names.append((kept, status.st_size))
            _close(fd)  # a shared spare is another process's to take
            return True
        self._own.append((kept, status.st_size, status.st_ino, fd))
        if self._closed:  # close() ran in another thread meanwhile: hand it over too
            self._hand_over_own()
        return True

    def _delete_later(self, path: str) -> bool:
        """Delete the finished file `path`: renamed into the own folder now, out of every
        reader's sight, and unlinked by the deleter's thread (deleter.py: 20 µs on the ack's
        thread where an unlink took 1 to 2 ms). False if it was gone."""
        if self._closed:  # the own folder is gone, or going
            return remove_file(path)
        kept = self._keep(path, self._own_dir, self._own_prefix + _GONE)
        if not isinstance(kept, str):
            return kept  # deleted here after all (another file system, a full disk), or gone
        self._deleter.delete(kept)  # at once, here, if close() drained it meanwhile
        self._remove_own_folder_if_closed()
        return True

    def _remove_own_folder_if_closed(self) -> None:
        """close() ran in another thread since the check above: `_keep` made the own folder
        again (close() had removed it), and the deleter, drained, unlinked the file at once.
        Not empty: close() is still draining it, and removes it next."""
        if self._closed:
            with contextlib.suppress(OSError):
                os.rmdir(self._own_dir)

    def _keep(self, path: str, folder: str, prefix: str) -> str | bool:
        """Rename `path` into `folder` as a spare: its new path; else whether `path` was
        removed (False: it was gone)."""
        for _ in range(_KEEP_TRIES):
            spare = prefix + str(next(self._numbers))
            try:
                os.rename(path, spare)
            except FileNotFoundError:
                if os.path.isdir(folder):
                    return False  # the file was gone
                try:
                    os.makedirs(folder, exist_ok=True)
                except FileNotFoundError:  # `rm -rf .spare/` came between two of its levels
                    pass
                except OSError as error:
                    if error.errno not in _FULL:
                        raise
                    # No inode or block left for the folder: deleting the file frees one,
                    # where raising would leave the message locked and the disk full.
                    return remove_file(path)
                continue
            except OSError as error:
                # Another file system (a dropbox mounted elsewhere), or a full one, whose
                # folder needed a block more for the name: deleted instead.
                if error.errno == errno.EXDEV or error.errno in _FULL:
                    return remove_file(path)
                raise
            return spare
        # The folder went again each time it was made (somebody deletes .spare/ as we go):
        # this file is deleted, not kept, as docs/operations.md promises (an ack never fails).
        return remove_file(path)

    def close(self) -> None:
        """Hand the own spares to the shared pool (other processes may take them from there)
        and remove the own folder; later retirements go to the shared pool."""
        self._closed = True
        self._deleter.drain()  # its files are in the own folder, which goes next
        self._hand_over_own()
        with self._lock:
            _close_all(self._open.values())
            self._open.clear()

    def _hand_over_own(self) -> None:
        """Rename every own spare into the shared pool, and remove the own folder."""
        while self._own:
            try:
                path, _, _, fd = self._own.pop()
            except IndexError:
                break
            _close(fd)
            with contextlib.suppress(OSError):
                os.rename(path, self._prefix + str(next(self._numbers)))
        with contextlib.suppress(OSError):
            os.rmdir(self._own_dir)

    def take_over_the_dead(self) -> None:
        """A sweep's full pass: what `_adopt` does once (a put's or an ack's first), and
        afterwards the own folders of processes that ended since. A server that only sweeps
        (its doors idle, or none) never put nor acked, so a killed process's own folder, its
        spares and `gone.<n>` files, stayed in `.spare/` for as long as the server ran."""
        if not self._adopted:
            self._adopt()
            return
        with self._lock:
            if self._adopt_own_folders_of_the_dead():
                # Within the limit, as the first adoption leaves it: a dead process's own
                # spares moved in on top of a full shared pool made it grow by theirs.
                for extra in _loose_files(self.path)[self.limit :]:
                    remove_file(extra)

    def _adopt(self) -> None:
        """Once: take on the spares in the folder, those of ended processes' own folders
        too, and delete those over the limit."""
        with self._lock:
            if self._adopted:
                return
            self._adopted = True
            self._adopt_own_folders_of_the_dead()
            for extra in self._look()[self.limit :]:
                remove_file(extra)

    def _adopt_own_folders_of_the_dead(self) -> bool:
        """Move the files of every own folder whose process ended into the shared pool (as
        this pool's spares), and remove the folder. Whether there was any."""
        try:
            with os.scandir(self.path) as entries:
                folders = [e.path for e in entries if _OWN in e.name and e.is_dir()]
        except FileNotFoundError:
            return False
        dead = False
        for folder in folders:
            if process_alive(os.path.basename(folder).rpartition(_OWN)[0]) is not False:
                continue  # alive, or another host's: not ours to touch
            dead = True
            try:
                with os.scandir(folder) as entries:
                    found = [entry.path for entry in entries]
            except FileNotFoundError:
                continue  # another process adopted it first
            for path in found:
                with contextlib.suppress(OSError):
                    status = os.lstat(path)
                    if status.st_nlink > 1 or status.st_size > _LARGEST:
                        # A publish killed between linking its body into the subscriptions
                        # and unlinking it here: their message now, never a spare to write
                        # over (as `give` keeps no file another name links to). Or a put
                        # killed between writing a large body here and its rename: its
                        # blocks are worth freeing, as `give` frees those of a large file.
                        os.unlink(path)
                        continue
                    rename_noreplace(path, self._prefix + str(next(self._numbers)))
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        return dead

    def _look(self) -> list[str]:
        """Take on up to `limit` spares found in the folder (other processes' too: a take is a
        rename, so two takers never get one file); every path found."""
        self._next_look = time.monotonic() + _LOOK_INTERVAL
        found = _loose_files(self.path)
        self._names.extend((path, _UNKNOWN_SIZE) for path in found[: self.limit])
        return found


def _loose_files(folder: str) -> list[str]:
    """The paths of the files in the pool's `folder` (the shared spares), not of its own
    folders; none if there is no such folder."""
    try:
        with os.scandir(folder) as entries:
            return [entry.path for entry in entries if entry.is_file()]
    except FileNotFoundError:
        return []


def write_new(path: str, body: bytes, spares: Spares | None) -> None:
    """Write `body` as the new file `path`, into a spare when there is one. Raises
    FileExistsError if `path` exists; on any error nothing is left at `path`."""
    old_size = None if spares is None else spares.take(path)
    fd = os.open(path, _CREATE, 0o644) if old_size is None else os.open(path, _REWRITE)
    _rewrite(fd, path, body, old_size or 0)
    os.close(fd)


def _rewrite(fd: int, path: str, body: bytes, old_size: int) -> None:
    """Write `body` from the start of `fd` (the file `path`, `old_size` bytes long) and cut
    it to the body's length; on any error close `fd`, delete `path` and raise."""
    try:
        written = os.pwrite(fd, body, 0)
        while written < len(body):  # a short write: rare, but the body must be whole
            written += os.pwrite(fd, memoryview(body)[written:], written)
        if old_size > len(body):
            os.ftruncate(fd, len(body))  # the rest of the spare's old body
    except BaseException as error:
        os.close(fd)
        os.unlink(path)
        if isinstance(error, OSError) and error.filename is None:  # os.write names no file
            raise naming(error, path) from error
        raise


def _close(fd: int) -> None:
    if fd != _NO_FD:
        os.close(fd)


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def remove_file(path: str) -> bool:
    """Delete `path`; False if it was gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
