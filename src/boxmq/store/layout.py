"""Where things are on disk: the root, its dropboxes and their state folders (DESIGN.md §1).

    <root>/<queue>/{working,target,processing,processed,routing,expired,error}/
    <root>/topic-root/...          (topics; DropboxMQ's layout, see the topics issue)

A queue's directory name is the queue name escaped by `names.escape_segment`, so no name can
leave the root. Names starting with '.' never come from a queue (the escape encodes a leading
dot), which leaves them to boxmq's own bookkeeping.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Final

from boxmq.errors import InvalidName
from boxmq.store.names import escape_segment, unescape_segment

__all__ = [
    "SETTLED",
    "TARGET_BACK_WAIT",
    "TOPIC_ROOT",
    "FolderSeen",
    "State",
    "clear_deleting",
    "dropbox_folders",
    "escaped_name",
    "folder_seen",
    "half_made",
    "in_the_way",
    "is_dropbox",
    "list_dropboxes",
    "no_dropbox",
    "open_folder",
    "queue_path",
    "remove_dropbox",
    "remove_folder",
    "settled_seen",
    "target_moved_aside",
    "targets_aside",
    "wait_for_targets",
]

TOPIC_ROOT = "topic-root"
# Where a dropbox being deleted is renamed first (remove_dropbox): no target/, so no queue.
DELETING_DIR = ".deleting"


class State(Enum):
    """The folders of a dropbox, one per state of a message."""

    WORKING = "working"  # being written, not yet sent
    TARGET = "target"  # ready
    PROCESSING = "processing"  # locked by one consumer
    PROCESSED = "processed"  # acknowledged
    ROUTING = "routing"  # content-based routes (DropboxMQ); kept for compatibility
    EXPIRED = "expired"  # expiration passed before delivery
    ERROR = "error"  # dead letters

    # Members are singletons, so identity is their equality. Enum's own __hash__ is Python code,
    # and a state is a dict key on every file operation of the hot path.
    __hash__ = object.__hash__


def queue_path(root: str, queue: str) -> str:
    if queue == TOPIC_ROOT:
        raise InvalidName(f"{TOPIC_ROOT!r} is where topics live; pick another queue name")
    return os.path.join(root, escape_segment(queue))


def is_dropbox(path: str) -> bool:
    return os.path.isdir(os.path.join(path, State.TARGET.value))


def no_dropbox(path: str) -> bool:
    """`not is_dropbox(path)`, for telling a user "no such queue": a folder above `path` that
    this user may not look into (EACCES) hides a queue that is there, so the OSError that
    hides it is raised instead, naming the path and the errno."""
    try:
        return not stat.S_ISDIR(os.stat(os.path.join(path, State.TARGET.value)).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return True


def broken_target(path: str) -> str | None:
    """The path of the target/ of the dropbox at `path` when it is there but no folder (a
    script's `>`, an editor's save): the queue is there, broken; None otherwise."""
    target = os.path.join(path, State.TARGET.value)
    if os.path.isdir(path) and os.path.lexists(target) and not os.path.isdir(target):
        return target
    return None


def half_made(path: str) -> bool:
    """Whether the folder `path` is there with neither target/ nor processing/: a dropbox whose
    making is not over (a put killed, a subscription being made by another process right now),
    to be finished or left to its maker, not refused. Dropbox makes its folders in State's
    order, working/, target/, then processing/ and the rest, so a dropbox made whole once keeps
    its processing/ (`target_moved_aside`); a file beside them (`.owner`, `.subscription`) says
    nothing either way."""
    entries = _entries(path)
    return entries is not None and not entries & {State.TARGET.value, State.PROCESSING.value}


def target_moved_aside(path: str) -> bool:
    """Whether the dropbox folder `path` is there without its target/ though it was made whole
    (its processing/ is there): target/ moved aside to be made again, operations.md's "Disk
    usage", where a put is refused (a new one made there broke the operator's `mkdir target`)
    and a fan-out fails for its publisher to send again. A dropbox still being made is
    `half_made`; a target/ that is a file is no moving aside (`broken_target`); no folder at
    `path` is a dropbox deleted, or one to make."""
    entries = _entries(path)
    return (
        entries is not None
        and State.TARGET.value not in entries
        and State.PROCESSING.value in entries
    )


# Seconds an exactly-once deliver waits for a target/ moved aside to come back (an operator's
# `mv target target.old && mkdir target` takes milliseconds) before it is refused, and between
# two looks meanwhile.
TARGET_BACK_WAIT = 2.0
_TARGET_LOOK_EVERY = 0.05


def targets_aside(dropboxes: Iterable[str]) -> list[str]:
    """Those of the dropbox folders `dropboxes` whose target/ is moved aside
    (`target_moved_aside`): one stat each where target/ is there, as it nearly always is."""
    return [
        path
        for path in dropboxes
        if not os.path.isdir(os.path.join(path, State.TARGET.value)) and target_moved_aside(path)
    ]


def wait_for_targets(dropboxes: Iterable[str]) -> list[str]:
    """Those of `dropboxes` whose target/ is moved aside, once each has come back or
    TARGET_BACK_WAIT has passed: those still aside then. None aside: no wait at all."""
    aside = targets_aside(dropboxes)
    deadline = time.monotonic() + TARGET_BACK_WAIT
    while aside and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(_TARGET_LOOK_EVERY, left))
        aside = targets_aside(aside)
    return aside


def _entries(path: str) -> set[str] | None:
    try:
        return set(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return None


def in_the_way(path: str) -> str | None:
    """What stands where `path` (absolute) or a folder above it must be a folder: the topmost
    of them that exists and is none (a file, a link to no folder); None if none does."""
    paths = [path]
    while (parent := os.path.dirname(paths[-1])) != paths[-1]:
        paths.append(parent)
    return next((p for p in reversed(paths) if os.path.lexists(p) and not os.path.isdir(p)), None)


def remove_dropbox(root: str, path: str, *, taken: Callable[[str], None] | None = None) -> bool:
    """Delete the dropbox at `path` (under `root`) and every file in it; False if there was
    none.

    It is renamed into `<root>/.deleting/` first, then deleted there: one rename takes it
    from its path at once, so a process moving a message in it meanwhile (a consumer of
    another process, a sweep of `boxmq serve`) finds no file and makes no folder under the
    delete. Deleted in place, a folder made or filled again under the rmtree made it fail
    (Directory not empty) and left the dropbox there (a fifth of deletes beside a busy
    consumer). What a process that died while deleting left there goes with the next delete,
    or the next sweep (`clear_deleting`). `taken`, when given, is called with the folder's
    path in `.deleting/` before it is deleted there: what it holds then is what is deleted
    (no process can move a message into it once it has left its path)."""
    try:  # anything at target/: a dropbox, or a broken one (`broken_target`), deleted too
        os.lstat(os.path.join(path, State.TARGET.value))
    except (FileNotFoundError, NotADirectoryError):  # as `no_dropbox`: EACCES is raised
        return False
    return remove_folder(root, path, taken=taken)


def remove_folder(root: str, path: str, *, taken: Callable[[str], None] | None = None) -> bool:
    """Rename the folder at `path` into `<root>/.deleting/` and delete it there, with what
    other deletes left (`remove_dropbox`, which says what `taken` is). False if it was not
    there."""
    deleting = os.path.join(root, DELETING_DIR)
    for _ in range(100):  # each retry follows another process's rmdir of an empty .deleting/
        # Not makedirs(exist_ok=True): it raised FileExistsError when another process removed
        # the folder between its mkdir's EEXIST and its check that a folder is there.
        with contextlib.suppress(FileExistsError):
            os.mkdir(deleting)
        moved = os.path.join(deleting, os.urandom(_DELETED_BYTES).hex())
        try:
            os.rename(path, moved)
            break
        except FileNotFoundError:
            if not os.path.lexists(path):
                return False  # deleted by another process right now
    else:
        raise FileNotFoundError(errno.ENOENT, "kept vanishing under the delete", deleting)
    try:
        if taken is not None:
            taken(moved)
    except Exception:  # deleted all the same: it has left its path, no one else can reach it
        clear_deleting(root)
        raise
    # Not on a Ctrl-C (KeyboardInterrupt is no Exception): it stops the delete here, as it
    # does amid the deletes below, and the next delete or sweep clears what is left; it went
    # on to delete every file first (minutes for 200,000 on some disks).
    clear_deleting(root)
    return True


_DELETED_BYTES = 16
_DELETED = re.compile(f"[0-9a-f]{{{2 * _DELETED_BYTES}}}")  # the names remove_folder gives


def clear_deleting(root: str) -> int:
    """Delete what is in `<root>/.deleting/` (the dropbox just renamed there, and any a
    process killed while deleting left), then the folder itself, so that on most roots it is
    not there: one scandir that finds nothing (a sweep of `boxmq serve` calls this). How many
    folders it found there."""
    deleting = os.path.join(root, DELETING_DIR)
    try:
        entries = list(os.scandir(deleting))
    except FileNotFoundError:
        return 0
    found = 0
    for entry in entries:
        if _DELETED.fullmatch(entry.name):
            shutil.rmtree(entry.path, ignore_errors=True)
            found += 1
        # Else not ours: `.deleting` is a queue made by hand (hidden folders are, before
        # boxmq took this name), whose state folders and messages the sweep wiped.
    # Another delete may have renamed a folder in meanwhile (ENOTEMPTY): it clears it.
    with contextlib.suppress(OSError):
        os.rmdir(deleting)
    return found


def list_dropboxes(root: str) -> list[str]:
    """The queue names under `root`, sorted."""
    return [name for name, _ in dropbox_folders(root)]


def dropbox_folders(root: str, others: list[str] | None = None) -> list[tuple[str, str]]:
    """(name, path) of every queue under `root`, sorted by name. A folder made by hand whose
    name is not the escaped form of any name (e.g. "50%off", "a%41": escaped, "aA" would be
    "aA") is named as it is on disk, bytes that are not UTF-8 as \\xNN, and " (not escaped)"
    after that when a queue's own folder has that name ("50%25off"), so that no two are named
    alike: such a name does not lead back to its folder, so use the path. A hidden folder
    made by hand (".x": boxmq's own is "%2Ex") is one of those; the root's other hidden
    folders (.spare, .properties, .mqtt, ...) hold no target/, so they are no queue.
    `others`, when given, gets the path of each other entry (the topic root's aside)."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    escaped, by_hand = [], []
    for entry in entries:
        # A folder this user may not look into is left out, not refused: a root that is a
        # file system's top has its lost+found, root's and of mode 0700.
        if entry.name == TOPIC_ROOT:
            continue
        if not is_dropbox(entry.path):
            if others is not None:
                others.append(entry.path)
            continue
        if (name := escaped_name(entry.name)) is not None:
            escaped.append((name, entry.path))
        else:
            shown = os.fsencode(entry.name).decode("utf-8", "backslashreplace")
            by_hand.append((shown, entry.path))
    taken = {name for name, _ in escaped}
    by_hand = [(f"{n} (not escaped)" if n in taken else n, path) for n, path in by_hand]
    return sorted(escaped + by_hand)


def escaped_name(folder: str) -> str | None:
    """The queue name whose escaped form `folder` is, or None (a folder made by hand)."""
    try:
        name = unescape_segment(folder)
        return name if escape_segment(name) == folder else None
    except InvalidName:  # not percent-encoded UTF-8 (a lone surrogate escapes as not Unicode)
        return None


_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def open_folder(path: str) -> int:
    """A file descriptor of the folder `path`: for calls relative to it (`dir_fd=`, which walk
    one name instead of a whole path) and for fsync. The caller closes it."""
    return os.open(path, _FOLDER_FLAGS)


# A folder's inode and mtime (ns): a later stat that finds the same says nothing was made,
# renamed or deleted in it since, once it is `settled_seen`.
FolderSeen = tuple[int, int]

# A folder that changed less than this before a look may change again and keep its mtime
# (the kernel stamps it from a clock that lags time.time() by up to a tick; coarser file
# systems keep it coarser): its mtime then proves nothing, and the next look reads it.
SETTLED: Final = 1.0


def folder_seen(path: str) -> FolderSeen | None:
    """The folder's inode and mtime now (one stat); None where there is none."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns


def settled_seen(path: str) -> FolderSeen | None:
    """The folder's inode and mtime (`folder_seen`), taken before a read of it, when it last
    changed over `SETTLED` s ago; None otherwise, and where there is none. Not on a polled
    file system: it may cache a folder's attributes (NFS)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    if status.st_mtime > time.time() - SETTLED:
        return None
    return status.st_ino, status.st_mtime_ns
