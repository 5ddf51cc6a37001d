"""Side files: metadata too long for a message's file name, kept apart under its hash.

    <root>/.properties/<key>        key: the first 32 hex digits of the bytes' SHA-256

A message names its side file by the key, in the reserved property `model.PROPERTIES_FILE`
(MQTT v5 properties past what a name holds: docs/file-format.md, "The 255-byte limit"); the
body stays exactly the payload. Many messages may name one file (a fan-out's copies, or the
same properties published again).

Invariants:
- A key names one content. `put` renames a whole file into place, over an existing file under
  its key only once that file was found to hold the same bytes (so it is young again). 128
  bits of key: two different property sets meet by chance only after some 2^64 of them, and
  one crafted to meet another is refused by that check, never mixed up with it.
- `put` flushes nothing itself. Its file is in place before the message that names it is
  handed to the committer, whose flush (syncfs under `always`, the interval thread's
  otherwise) covers every file written before it: a side file is as durable as the message's
  body, which is written the same way and relies on the same flush.
- `collect` deletes a file that no message file under the root names, only once it is older
  than a grace period: a file is written (reused, written anew) before the message naming it
  is committed, so a young file may belong to a message not yet visible.
- `withdraw` deletes at once the file of a `place` whose message was never written (a full
  disk refused it): only one that place made where there was none, and that no put reused
  since. Any message naming the key came with a put of its own, which found the file there
  (it was not made) or replaced it (it is not the same file any more).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from boxmq.errors import InvalidArgument, naming
from boxmq.model import PROPERTIES_FILE, PropertyType
from boxmq.store.records import read_file
from boxmq.store.retained import RETAINED_DIR, read_header
from boxmq.store.spares import rename_noreplace
from boxmq.store.temporaries import removed_on_failure, temporary_in

__all__ = [
    "COLLECT_EVERY",
    "GRACE",
    "NAMED_AS",
    "SIDE_DIR",
    "Placed",
    "SideFiles",
    "key_of",
    "referenced",
]

log = logging.getLogger("boxmq.store")

SIDE_DIR: Final = ".properties"
GRACE: Final = 3600.0  # seconds a file is kept unnamed: far longer than a put takes to commit
COLLECT_EVERY: Final = 600.0  # seconds between collections: each lists every file of the root
_KEY = re.compile(r"[0-9a-f]{32}")
# How a name, or a retained file's header (PROPERTIES_SIDE_FILE), names a side file: this
# and its key. The collection finds every key so written.
NAMED_AS: Final = PROPERTIES_FILE + PropertyType.STRING.value + "="
_NAMED = re.compile(re.escape(NAMED_AS) + r"([0-9a-f]{32})")
_DOOMED = ".gc-"  # a file `collect` is deciding about: renamed out of the way first
_CACHED = 256  # files kept in memory: a fan-out's copies are read back one after another
# and their bytes, together, past the newest: a file may be as large as a packet (1 MiB), and
# 256 of them, a client's 256 messages of large properties, stayed held for good.
_CACHED_BYTES = 16 << 20
_WARNED = 1024  # missing keys remembered so each is logged once


@dataclass(frozen=True, slots=True)
class Placed:
    """What `SideFiles.place` did: the key, and the file it made (st_dev, st_ino,
    st_mtime_ns) where no file was; None if it reused one, which other messages may name.

    The inode alone was no identity: once a put replaced the file made (over the same bytes),
    its inode was free, and the next put of those bytes took it at once on ext4 or tmpfs, for
    a file other messages name. Its mtime, stamped at its write (a rename keeps it), tells
    them apart unless both were written within one tick of the clock (a few ms)."""

    key: str
    made: tuple[int, int, int] | None


class SideFiles:
    """The side files of one root; shared by the threads of one process."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, SIDE_DIR)
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached_bytes = 0
        self._warned: set[str] = set()

    def put(self, data: bytes) -> str:
        """Keep `data`; its key. The file is in place on return (see the module's invariants)."""
        return self.place(data).key

    def place(self, data: bytes) -> Placed:
        """`put`, telling whether it made the file: for `withdraw` if its message fails."""
        key = key_of(data)
        target = os.path.join(self.path, key)
        temporary = temporary_in(self.path)
        # A write the disk refused half-way (ENOSPC), or other bytes under the key: the
        # temporary is never left behind. Placed, it is renamed already: nothing to unlink.
        with removed_on_failure(temporary):
            try:
                _write(temporary, data)
            except FileNotFoundError:  # the first side file of this root
                os.makedirs(self.path, exist_ok=True)
                _write(temporary, data)
            written = os.stat(temporary)  # the file's identity, which its rename keeps
            while (made := self._placed(temporary, target, data)) is None:
                pass  # `collect` took the old file away meanwhile: place ours
        self._remember(key, data)
        return Placed(key, _identity(written) if made else None)

    def _placed(self, temporary: str, target: str, data: bytes) -> bool | None:
        """True if `temporary` went where no file was, False if over the same bytes; None if
        the file it was to replace went meanwhile (try again)."""
        try:
            rename_noreplace(temporary, target)
            return True
        except FileExistsError:
            pass
        try:
            same = read_file(target) == data
        except FileNotFoundError:
            return None
        if not same:
            raise InvalidArgument(f"side file {target} holds other bytes under the same key")
        # The same bytes: ours takes its place, young, so `collect` keeps it for the message to
        # come. A rename, not a utime, which another user's file would refuse.
        os.replace(temporary, target)
        return False

    def withdraw(self, placed: Placed) -> None:
        """Delete the file `placed` made, for a message that failed before its file was
        written, unless a put reused it since (another message's, to come or come). Never
        raises OSError: the message's own error is what its caller reports, and a file left
        is the collection's."""
        if placed.made is None:
            return
        path = os.path.join(self.path, placed.key)
        aside = os.path.join(self.path, _DOOMED + placed.key)
        try:
            # Aside first, then looked at, as `collect` does: a put that comes now finds no
            # file and makes its own, one that replaced ours is seen by its file's identity
            # and put back, and a kill in between leaves the file where readers and the next
            # collection (`_put_back`) find it.
            rename_noreplace(path, aside)
        except OSError:
            return
        with contextlib.suppress(OSError):
            status = os.stat(aside)
            if _identity(status) != placed.made:
                try:  # another put's: back, unless a put made the key anew meanwhile
                    rename_noreplace(aside, path)
                    return
                except FileExistsError:
                    pass  # the same bytes are in place again: this copy is one too many
            os.unlink(aside)
            with self._lock:
                data = self._cache.pop(placed.key, None)
                if data is not None:
                    self._cached_bytes -= len(data)

    def get(self, key: str) -> bytes | None:
        """The bytes kept under `key`; None (logged once per key) if there are none, or if
        the file no longer holds the bytes its key names."""
        with self._lock:
            data = self._cache.get(key)
            if data is not None:
                self._cache.move_to_end(key)
                return data
        data = self._read(key) if _KEY.fullmatch(key) else None
        if data is None:
            self._warn_missing(key)
            return None
        self._remember(key, data)
        return data

    def _read(self, key: str) -> bytes | None:
        """The file's bytes if they still match their key (a file changed by hand does not)."""
        # The second name: `collect` may be between renaming it aside and back (a put reused
        # it, or a kill left it aside: `_put_back`); the first again, renamed back meanwhile.
        for name in (key, _DOOMED + key, key):
            with contextlib.suppress(FileNotFoundError):
                data = read_file(os.path.join(self.path, name))
                return data if key_of(data) == key else None
        return None

    def _remember(self, key: str, data: bytes) -> None:
        with self._lock:
            cache = self._cache
            self._cached_bytes += len(data) - len(cache.get(key, b""))
            cache[key] = data
            cache.move_to_end(key)
            while len(cache) > _CACHED or (len(cache) > 1 and self._cached_bytes > _CACHED_BYTES):
                self._cached_bytes -= len(cache.popitem(last=False)[1])

    def _warn_missing(self, key: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            if len(self._warned) >= _WARNED:
                self._warned.clear()
            self._warned.add(key)
        log.warning(
            "side file %r is missing (deleted by hand?): its messages go without the "
            "properties it held",
            key,
        )

    def collect(self, named: Callable[[], set[str]], *, now: float, grace: float = GRACE) -> int:
        """Delete the files older than `grace` that no message names; how many went.

        `named` lists the keys the root's messages name (`referenced`). It is asked twice when
        something would go, and only what neither answer names goes: a message that moved
        from a folder not yet listed into one already listed is missed by one listing, not by
        two made apart. A file is renamed aside before it is deleted, and put back if a put
        touched it meanwhile (its mtime is young again). One a killed collection left aside,
        which its messages still read, is put back by the next (`_put_back`)."""
        old = self._older_than(now - grace)
        if not old:
            return 0
        unnamed = old - named()
        if unnamed:
            unnamed -= named()
        deleted = 0
        for key in sorted(unnamed):
            deleted += self._delete_unless_renewed(key, horizon=now - grace)
        if deleted:
            log.info("deleted %d side file(s) no message names", deleted)
        return deleted

    def _older_than(self, horizon: float) -> set[str]:
        old = set()
        with contextlib.suppress(FileNotFoundError), os.scandir(self.path) as entries:
            for entry in entries:
                key = entry.name.removeprefix(_DOOMED)
                if not _KEY.fullmatch(key):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    status = entry.stat()
                    if key != entry.name and not self._put_back(key, status, horizon):
                        continue
                    if status.st_mtime < horizon:
                        old.add(key)
        return old

    def _put_back(self, key: str, aside: os.stat_result, horizon: float) -> bool:
        """Finish the step of a collection killed between renaming `key` aside and deciding;
        True if the file is `key` again, for this collection to judge as any other. It may be
        one a put reused just before the kill, whose message came since: only the two looks
        tell, so it is not deleted as it is."""
        if aside.st_ctime >= horizon:  # renamed aside lately: a collection at work, not dead
            return False
        path = os.path.join(self.path, _DOOMED + key)
        try:
            rename_noreplace(path, os.path.join(self.path, key))
        except FileExistsError:  # a put wrote `key` anew since: the same bytes, read first
            os.unlink(path)
            return False
        return True

    def _delete_unless_renewed(self, key: str, *, horizon: float) -> int:
        path, aside = os.path.join(self.path, key), os.path.join(self.path, _DOOMED + key)
        try:
            os.rename(path, aside)  # a put that comes now finds no file and writes its own
        except FileNotFoundError:
            return 0
        try:
            if os.stat(aside).st_mtime >= horizon:  # a put reused it just before: keep it
                os.rename(aside, path)  # over a file a put made meanwhile: the same bytes
                return 0
            os.unlink(aside)
        except FileNotFoundError:  # another process's collection took it first
            return 0
        return 1


def referenced(root: str) -> set[str]:
    """The side-file keys that message files anywhere under `root` name: every dropbox's
    folders, the exactly-once and fan-out staging folders, and the retained store (whose
    files keep their message's name in their first line). Lists every file of the root."""
    keys: set[str] = set()
    for folder, subfolders, files in os.walk(root):
        if folder == root:
            subfolders[:] = [d for d in subfolders if d not in (SIDE_DIR, ".spare")]
        for name in files:
            keys.update(_NAMED.findall(name))
        if os.path.basename(folder) == RETAINED_DIR:
            for name in files:
                keys.update(_NAMED.findall(_first_line(os.path.join(folder, name))))
    return keys


def _first_line(path: str) -> str:
    """The header line of a retained file, read as the retained store reads it: a page,
    and more only for a long topic (a topic past the first page still names its
    message's properties, which must then be kept)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    try:
        header = read_header(fd)
    finally:
        os.close(fd)
    return (header or b"").decode("utf-8", "replace")


def _identity(status: os.stat_result) -> tuple[int, int, int]:
    """The file a `place` made, as `Placed.made` knows it."""
    return status.st_dev, status.st_ino, status.st_mtime_ns


def key_of(data: bytes) -> str:
    """The key `SideFiles.put(data)` keeps `data` under: known before it is written, so a
    caller can first check that a name naming it fits."""
    return hashlib.sha256(data).hexdigest()[:32]


def _write(path: str, data: bytes) -> None:
    try:
        with open(path, "xb") as out:
            out.write(data)
    except OSError as error:
        if error.filename is not None:
            raise
        # Refused when the file closed (a full disk), an OSError naming no file: the
        # user was told `No space left on device` with no word of where.
        raise naming(error, path) from error
