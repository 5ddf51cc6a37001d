"""Small records that say what exists (a subscription, its members, an MQTT session): each
replaced whole by a rename, and on disk before the call returns when asked to `flush`.

Under fsync=always a client is told that such a record stands (SUBACK, CONNACK of a
persistent session), so it must survive a power cut as a message does (DESIGN.md §5): the
file is fsynced before its rename (a crash can never leave a renamed name over an empty
file), then its folder (the rename itself), and the parents of the folders made for it (a
new folder is an entry of its parent). Under the other policies nothing is flushed.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Iterator
from typing import Final

from boxmq.errors import naming
from boxmq.store.layout import open_folder
from boxmq.store.temporaries import removed_on_failure, temporary_in

__all__ = [
    "flush_directories",
    "make_folders",
    "read_file",
    "read_file_status",
    "replace_file",
    "write_file",
]


def make_folders(path: str, *, flush: bool, within: str) -> None:
    """`os.makedirs(path, exist_ok=True)`; with `flush`, each folder made below `within` is on
    disk after: its parent is fsynced."""
    if os.path.isdir(path):
        return  # the common case, one look
    made = _makedirs(path)
    if flush and made:
        inside = within.rstrip(os.sep) + os.sep
        flush_directories(_parents(folder for folder in made if folder.startswith(inside)))


_TRIES = 1000  # makes of a folder another process deletes each time before one is taken


def _makedirs(path: str) -> list[str]:
    """`os.makedirs(path, exist_ok=True)`, and the folders it made, topmost first. A folder
    another process deletes between two steps is made again, and those under it: an empty
    filter's folder its last subscription's end removes (topics.remove_subscription) as a
    subscribe makes its folder in it, which is then refused (FileNotFoundError); a share
    group's folder its last member's leave deletes as a member joins, found there by mkdir
    and gone at makedirs' look (FileExistsError out of the join, 1 in 12 runs of a test that
    does 400). Each try looks again for what is missing, so that every folder made is told
    (`flush` fsyncs their parents)."""
    made: list[str] = []
    for _ in range(_TRIES):
        missing = []
        folder = path
        while not os.path.isdir(folder):
            missing.append(folder)
            parent = os.path.dirname(folder)
            if not parent or parent == folder:  # "" above a relative path's top: the cwd
                break
            folder = parent
        try:
            for folder in reversed(missing):
                try:
                    os.mkdir(folder)
                except FileExistsError:
                    if os.path.isdir(folder):
                        continue  # made by another process meanwhile
                    if os.path.lexists(folder):
                        raise  # a file there, not a folder
                    raise FileNotFoundError(errno.ENOENT, "made and deleted", folder) from None
                made.append(folder)
            return made
        except FileNotFoundError:
            continue  # a folder above deleted meanwhile: look again
    raise FileExistsError(errno.EEXIST, f"made {_TRIES} times and deleted each time", path)


def flush_directories(directories: Iterable[str]) -> None:
    """fsync each folder: its entries (renames and links into it) are on disk after. A folder
    gone since holds no entry left to keep (a subscription deleted while a publication linked
    into it): passed by, not a failure of the others' commit."""
    for directory in directories:
        try:
            fd = open_folder(directory)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _parents(folders: Iterable[str]) -> list[str]:
    return [os.path.dirname(folder) for folder in folders]


def replace_file(
    path: str,
    text: str,
    *,
    flush: bool,
    aside: str | None = None,
    later_than: int | None = None,
) -> os.stat_result:
    """Replace `path` with `text`: written aside (a temporary, deleted if this fails), then
    renamed over it; with `flush`, fsynced before the rename and its folder after. Returns
    the new file's status as written (a rename keeps its inode and mtime): a later stat of
    `path` that differs says another writer replaced it since. `aside`: the folder of the
    temporary (on the same file system), where `path`'s own folder must hold no other file
    for its readers. `later_than`: an mtime (ns) the new file's must be after, set so where
    the clock gave it no later one (`_made_later`)."""
    folder = os.path.dirname(path)
    temporary = temporary_in(aside or folder)
    with removed_on_failure(temporary):
        with _writing(temporary, text.encode()) as fd:
            written = os.fstat(fd)
            if later_than is not None and written.st_mtime_ns <= later_than:
                written = _made_later(fd, written, later_than)
            if flush:
                os.fsync(fd)
        os.rename(temporary, path)
    if flush:
        flush_directories([folder])
    return written


def _made_later(fd: int, status: os.stat_result, than: int) -> os.stat_result:
    """The file at `fd` given an mtime just after `than`, its status then. A file's time is
    the kernel's coarse clock (a tick, 1 to 4 ms), which a burst of writes shares: Linux
    6.13's multigrain timestamps give a finer one only to a file whose times were read since
    its last change (ext4, XFS, btrfs, tmpfs; not NFS). Each step is tried until the file
    system keeps one (nanoseconds on ext4, whole seconds on ext4 with 128-byte inodes, two
    on FAT)."""
    for step in _STEPS:
        os.utime(fd, ns=(status.st_atime_ns, than + step))
        status = os.fstat(fd)
        if status.st_mtime_ns > than:
            break
    return status


_STEPS: Final = (1, 1_000, 1_000_000, 1_000_000_000, 2_000_000_000)


def write_file(path: str, data: bytes) -> None:
    """Write a new file (or one to truncate) holding `data`: open, write, close, where
    `open(path, "w")` makes four system calls more (fstat, ioctl, two lseeks). Not flushed."""
    with _writing(path, data):
        pass


def read_file(path: str) -> bytes:
    """The whole file: open, fstat, one read, close, where `open(path, "rb").read()` makes nine
    system calls, and a text file's buffer more (a record is read whole at each connect,
    subscribe and look; a SUBSCRIBE to `#` reads each retained file)."""
    return read_file_status(path)[0]


def read_file_status(path: str) -> tuple[bytes, os.stat_result]:
    """`read_file`, and the file's status as its fstat found it: the inode and time of the
    very file read (a file replaced by a rename meanwhile is the next one)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        status = os.fstat(fd)
        return _read_all(fd, status.st_size), status
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    """What `fd` holds, `size` bytes as its fstat said, in one read."""
    chunks = []
    if size < _ONE_READ:
        chunk = os.read(fd, size + 1)  # a byte more than it holds, to see its end
        if len(chunk) == size:
            return chunk
        chunks.append(chunk)  # it changed since the fstat (not done by boxmq): read on
    while chunk := os.read(fd, _ONE_READ):
        chunks.append(chunk)
    return b"".join(chunks)


_ONE_READ = 1 << 30  # Linux reads at most 2 GiB - 4 KiB at once


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a write may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def _writing(path: str, data: bytes) -> Iterator[int]:
    """The descriptor of a new (or truncated) file at `path` holding `data`, for the block,
    closed after it. A descriptor, not open(): a text file's buffer cost four system calls
    more (fstat, ioctl, two lseeks), a share group's first member three such records. An
    OSError of the open, the write or the block has `path` as its file: a write refused
    when the file is closed (ENOSPC, EDQUOT, EIO) names none, and `boxmq subscribe` on a
    full disk said "No space left on device" without where."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            _write_all(fd, data)
            yield fd
        finally:
            os.close(fd)
    except OSError as error:
        if error.filename is not None:
            raise
        raise naming(error, path) from error
