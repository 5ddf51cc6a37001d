"""Retained messages: the last one per topic, kept apart from every dropbox.

    <root>/topic-root/.retained/<sha256 of the topic>

Each file is one JSON header line (the topic, the message's encoded name, and the side file of
its v5 properties where the name has no room for its key: PROPERTIES_SIDE_FILE) and then the body;
the sweep, which looks for expired ones, reads the header line alone (`RetainedStore.remove_if`).
Topics can be longer than a file name, hence the hash. A new retained message replaces the old
one with one rename; an empty body deletes it (MQTT 5.0 §3.3.1.3). While an exactly-once
"delivered" marker is on the root (a retained publication may be finished by a restart), a
delete puts an empty file, a tombstone, in its place the same way: no retained message to
every reader (an older boxmq takes it for a file cut short, passed by as well), but a file
whose `version` tells that restart that a delete came since its marker (`written_since`);
otherwise (no marker, or no marked message waiting in the incoming working/) it unlinks
the file. The expiry sweep deletes tombstones older than the caller
says (`remove_if`). Writes go through the committer, so they are as durable as the fsync
policy says.

A SUBSCRIBE reads only what it may send: the file of its topic when its filter has no
wildcard, else the files of the topics it matches, known from their names. A name is the hash of
its topic, so once read, the topic of a name is known for good: later listings tell which topics
have a retained message now (a replacement or a delete by any process shows there at once), and
only the matching ones are read again, for their current message (`RetainedStore.matching`).

Replacing is two steps, `stage` then `replace`, so that a publisher can write the new message
first and put it in place last, once the publication's copies are committed: a publication
refused to its publisher (or cut short by a crash) never replaces the retained message.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from boxmq.errors import naming
from boxmq.store.commit import Committer, FsyncPolicy, Move, flush_directories
from boxmq.store.layout import TOPIC_ROOT
from boxmq.store.records import read_file
from boxmq.store.spares import rename_noreplace
from boxmq.store.temporaries import temporary_in
from boxmq.store.topics import exactly_once_markers, incoming_working

__all__ = [
    "ASIDE_PREFIX",
    "PROPERTIES_SIDE_FILE",
    "RETAINED_DIR",
    "Marked",
    "Retained",
    "RetainedHeader",
    "RetainedStore",
    "Staged",
    "Version",
    "read_header",
]

RETAINED_DIR = ".retained"  # under topic-root/
# The header's field naming the side file of a message's v5 properties that its name has no
# room for, as `bx_v5hS=<key>`: the form the side files' collection finds in a name, so that
# a boxmq that does not know this field keeps the file too (and sends the message without).
PROPERTIES_SIDE_FILE = "properties_file"
# A file the expiry sweep moved aside to delete it (`_remove_judged`): not a `.tmp-`, which
# the temporaries' sweep deletes unread, since one a sweep killed there left may be a
# publisher's new message, to be put back (`_put_back`).
ASIDE_PREFIX = ".aside-"

log = logging.getLogger("boxmq.store")


@dataclass(frozen=True, slots=True)
class Retained:
    topic: str
    name: str  # the message's DropboxMQ name (its metadata)
    body: bytes
    # `PROPERTIES_SIDE_FILE`'s value: `bx_v5hS=<key>`, the side file of the message's v5
    # properties where its name had no room for that key (a long topic); None if none.
    properties_file: str | None = None


@dataclass(frozen=True, slots=True)
class RetainedHeader:
    """A retained message without its body: what its file's first line says."""

    topic: str
    name: str  # the message's DropboxMQ name (its metadata: its expiry among them)


@dataclass(frozen=True, slots=True)
class Staged:
    """A retained message written but not yet in place (`RetainedStore.stage`)."""

    topic: str
    path: str  # the topic's retained file
    # The new one, beside it (empty: a tombstone, the topic's is deleted); None: the topic's
    # is to be deleted, no tombstone.
    temporary: str | None


Version = tuple[int, int, int]
"""Which file a topic's retained file is: its (st_ino, st_mtime_ns, st_size). Every write,
a delete's tombstone too, is a new file renamed into place, so a write since a look makes
another version, whatever the clocks' ticks (file times are taken from a coarse clock, of a
second on some file systems, where two writes may share one)."""


@dataclass(frozen=True, slots=True)
class Marked:
    """A publication decided before a crash and finished by a restart (an exactly-once
    `deliver` marked): when its marker was written, and which retained file of its topic was
    in place then (`RetainedStore.version`: None if none), if the marker says (a boxmq
    before 2026-11-30 wrote none: `recorded` False). `superseded`: its deliver was told a
    later retained message is in place, and replaces none."""

    at: float  # the marker's st_mtime
    recorded: bool
    version: Version | None = None
    superseded: bool = False


def _a_directory(topic: str, path: str) -> IsADirectoryError:
    """The refusal of a retained publish whose topic's file is a directory (made by hand, see
    `RetainedStore._not_a_file`): the rename's error named the temporary file written
    beside it first, which the user neither made nor can act on."""
    return IsADirectoryError(
        errno.EISDIR,
        f"the retained message of topic {topic!r} cannot be written: a directory is at its "
        "file's name; remove it",
        path,
    )


class RetainedStore:
    def __init__(self, root: str, committer: Committer) -> None:
        self._dir = os.path.join(root, TOPIC_ROOT, RETAINED_DIR)
        self._markers = exactly_once_markers(root)
        self._incoming = incoming_working(root)
        self._committer = committer
        # The topic of each file name read so far (and listed at the last look), so that a
        # wildcard subscription reads only the files of the topics it matches. Never stale:
        # a name stands for one topic (its hash); only whether it has a message, and which,
        # change, and those are read from the folder each time. Replaced whole, never changed
        # in place, so threads that look at once need no lock. As big as the folder was at the
        # last look read to its end (a name cleared or swept since goes at the next): 216
        # bytes a topic, 21.6 MB for 100,000 `dev/<n>/status` (tracemalloc), half of it the
        # names; keyed by the hash's 32 bytes it took 182, but 40 % more work at each look.
        self._topics: dict[str, str] = {}
        # The paths told of as not files (`_not_a_file`): told once, not at every look and
        # every sweep. A set's add is atomic: two threads may both tell one, never break it.
        self._told: set[str] = set()

    def _path(self, topic: str) -> str:
        return os.path.join(self._dir, _file_name(topic))

    def stage(
        self, topic: str, name: str, body: bytes, *, properties_file: str | None = None
    ) -> Staged:
        """Write `body` beside the topic's retained message, which stays until `replace`
        (or `discard`); an empty `body` is a delete, a tombstone while a marker is on the
        root (see the module's docstring). `properties_file` (`bx_v5hS=<key>`) goes in the
        header (PROPERTIES_SIDE_FILE): the side file is written before, and the committer's
        flush at `replace` covers it as it covers this file. Raises the OSError of a failed
        write, leaving nothing behind, and the IsADirectoryError of `replace` (`_a_directory`)
        for a directory at the topic's file: refused here, before the publication's copies
        go out (Publishing._publish_retained), its publisher is not told of a failure for a
        message delivered, which a QoS 1 or 2 one would send again. A stat a publish: 1 us
        beside the 6 system calls of its write."""
        path = self._path(topic)
        if os.path.isdir(path):
            raise _a_directory(topic, path)
        if not body and not (_holds_any(self._markers) and _holds_any(self._incoming)):
            # No publication marked delivered is to be finished, or one whose deliver
            # looked at the retained file before now is under way: whether its restart
            # finds this delete or the file it saw gone, it puts its message in place, as
            # its deliver does after it (the delete came first). A file's creation costs
            # 10 times an unlink (here: 300 us, 30). Markers stay for done_ttl (an hour)
            # after their message is sent, but only one whose message still waits in the
            # incoming working/ (where every exactly-once message to a topic is written
            # before its marker, and which it leaves after its retained replacement) can
            # have a restart replace a retained message: a marker there at the first look
            # whose message is gone at the second was finished before this delete.
            return Staged(topic, path, None)
        os.makedirs(self._dir, exist_ok=True)
        temporary = temporary_in(self._dir)
        try:
            if not body:  # a tombstone: nothing to write, so 2 system calls, not 6
                os.close(os.open(temporary, _CREATE, 0o666))
                return Staged(topic, path, temporary)
            fields = {"topic": topic, "name": name}
            if properties_file is not None:
                fields[PROPERTIES_SIDE_FILE] = properties_file
            header = json.dumps(fields).encode() + b"\n"
            with open(temporary, "wb") as out:
                out.write(header + body)
        except OSError as error:
            _unlink_quietly(temporary)
            if error.filename is None:  # a write or a close names no file: this one
                raise naming(error, temporary) from error
            raise
        return Staged(topic, path, temporary)

    def replace(self, staged: Staged) -> None:
        """Make the staged message the topic's retained one (a tombstone, or none, deletes
        it, as durably as a replacement: a topic with none gets the tombstone too, which
        tells a restart that a delete came, see `written_since`). A failure leaves the
        staged file where it is, for `discard`, which tells whether it went in place. A
        directory made at the topic's file since `stage` raises an IsADirectoryError naming
        the topic and the directory (`_a_directory`)."""
        try:
            self._put_in_place(staged)
        except IsADirectoryError as error:
            raise _a_directory(staged.topic, staged.path) from error

    def _put_in_place(self, staged: Staged) -> None:
        if staged.temporary is None:
            try:
                os.unlink(staged.path)
            except FileNotFoundError:
                return  # no retained message: nothing to delete, nothing to flush
            if self._committer.policy is FsyncPolicy.ALWAYS:
                # As durable as a replacement: a delete acknowledged to its publisher must not
                # come back after a power cut (the unlink is in the folder's entries).
                flush_directories([self._dir])
            return
        self._committer.commit([Move(staged.temporary, staged.path)])

    @staticmethod
    def discard(staged: Staged) -> bool:
        """The publication failed: the topic keeps its retained message, unless a `replace`
        that failed renamed the staged one into place first (a flush failing after it).
        True if the staged file was still there, so never in place (a rename leaves no file
        under the name it took it from), and is gone now; False if it was not, or may be."""
        if staged.temporary is None:
            return False
        try:
            os.unlink(staged.temporary)
        except OSError:  # renamed, or a failing file system: it may be in place
            return False
        return True

    def version(self, topic: str) -> Version | None:
        """Which file the topic's retained file is now (a tombstone too); None if none."""
        try:
            return _version(os.stat(self._path(topic)))
        except FileNotFoundError:
            return None

    def written_since(self, topic: str, marked: Marked) -> bool:
        """Whether the topic's retained file was written since `marked` (a retained message
        or a delete's tombstone): a message whose publication was decided then and is
        finished only now, after a restart, must not replace it. Told by its version; for a
        marker that records none (an older boxmq's), by the times: the file's st_mtime is
        the marker's or later. A topic without a file was not written: a delete leaves a
        tombstone, which the sweep deletes only once older than every marker (this one's
        too), and the sweep of expired messages removes no publication. (A boxmq before
        2026-11-30 deleted by unlinking: such a delete since the marker is undone.)"""
        try:
            found = os.stat(self._path(topic))
        except FileNotFoundError:
            return False
        if not marked.recorded:
            return found.st_mtime >= marked.at
        return _version(found) != marked.version

    def get(self, topic: str) -> Retained | None:
        path = self._path(topic)
        try:
            found = _load(path)
        except IsADirectoryError:
            self._not_a_file(path)
            return None
        # Another topic's under this one's name (a file copied or edited by hand) is not
        # this topic's, as a wildcard's look (`_scan`) passes it by.
        return found if found is not None and found.topic == topic else None

    def matching(self, wanted: Callable[[str], bool]) -> Iterator[Retained]:
        """The retained messages of the topics `wanted` takes, each read when it is reached.
        One listing of the folder, and a read of each file that matches, or whose topic is not
        known yet (20,000 topics: 20,000 reads the first time, then one per match)."""
        return (found for _, found in self._scan(wanted, _load))

    def get_sized(self, topic: str) -> tuple[Retained, int] | None:
        """`get` with its body's length in place of its body, which is never read: what
        `boxmq retained` shows (a body of 4 MB was read whole for its size alone). The
        Retained's body is empty."""
        path = self._path(topic)
        try:
            found = _load_sized(path)
        except IsADirectoryError:
            self._not_a_file(path)
            return None
        if found is None or found.topic != topic:  # another topic's, as `get` passes it by
            return None
        return found.retained, found.size

    def matching_sized(self, wanted: Callable[[str], bool]) -> Iterator[tuple[Retained, int]]:
        """`matching` with each body's length in place of its body (`get_sized`): one read of
        each file's header and an fstat."""
        return ((found.retained, found.size) for _, found in self._scan(wanted, _load_sized))

    def remove_if(
        self,
        stale: Callable[[RetainedHeader], bool],
        *,
        tombstones_before: float | None = None,
        pinned: Mapping[str, float] | None = None,
    ) -> int:
        """Delete each retained message `stale` says so of (an expired one): how many. One
        that a publisher, of this process or another, puts in place meanwhile stays. Only
        each file's header is read, never its body. Tombstones written before
        `tombstones_before` (st_mtime), and before its time in `pinned` for a topic there, go
        too, uncounted: the caller knows that no publication marked before them is still to
        be finished (`written_since`)."""
        removed = 0
        # A tombstone holds no topic: known by its name.
        pins = {_file_name(topic): at for topic, at in (pinned or {}).items()}

        def read(path: str) -> _Opened | None:
            return _open_header(path, headerless)

        def headerless(path: str, fd: int) -> None:
            if tombstones_before is not None:
                before = tombstones_before
                if (pin := pins.get(os.path.basename(path))) is not None:
                    before = min(before, pin)
                self._remove_tombstone(path, fd, before)

        asides: list[str] = []  # what sweeps killed in `_remove_judged` left, for below
        # Each topic read is learnt: a server's first wildcard SUBSCRIBE after its start-up
        # sweep reads only the files it sends.
        # Every topic wanted: each file opened is yielded, so each descriptor is closed here.
        for path, opened in self._scan(_every, read, asides):
            try:
                if stale(opened.header):
                    removed += self._remove_judged(path, os.fstat(opened.fd))
            finally:
                os.close(opened.fd)
        self._put_back(asides)
        # No flush, even under `always`: one that a power cut brings back is stale still,
        # never sent, and deleted again.
        return removed

    def _scan(
        self,
        wanted: Callable[[str], bool],
        read: Callable[[str], _Read | None],
        asides: list[str] | None = None,
    ) -> Iterator[tuple[str, _Read]]:
        """The path of each file of the folder, and what `read` found there, whose topic
        `wanted` takes, or is not known yet: one listing, the topic of each name learnt from
        its first read, and the names gone since the last listing forgotten (once the listing
        is read to its end). `asides`, when given, gets the path of each file ASIDE_PREFIX
        names."""
        known = self._topics
        listed: dict[str, str] = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(self._dir) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    if asides is not None and entry.name.startswith(ASIDE_PREFIX):
                        asides.append(entry.path)
                    continue
                topic = known.get(entry.name)
                if topic is not None:
                    listed[entry.name] = topic
                    if not wanted(topic):
                        continue
                try:
                    found = read(entry.path)  # None: deleted since, a tombstone, or damaged
                except IsADirectoryError:
                    self._not_a_file(entry.path)
                    continue
                if found is None or _file_name(found.topic) != entry.name:
                    # Not named for the topic it holds, it was not put there by a publish:
                    # no topic's (`get` never finds it), and no retained message a delete
                    # of its topic could clear. Passed by, never learnt: it may be replaced.
                    continue
                listed[entry.name] = found.topic
                if wanted(found.topic):
                    yield entry.path, found
        self._topics = listed

    def _not_a_file(self, path: str) -> None:
        """A directory at a retained file's name (made by hand: a publish only renames files
        there) holds no retained message: passed by, as a damaged file is, so that a
        subscriber gets every other topic's and the sweep goes on, where its IsADirectoryError
        stopped both (and `boxmq serve` at its start). Told once; left as it is, since what it
        holds is not the store's to delete: a publish to its topic fails until it is removed."""
        if path in self._told:
            return
        self._told.add(path)
        log.warning(
            "retained messages: %s is a directory, not a retained message's file: passed by "
            "(its topic has none, and a retained publish to it fails); remove it",
            path,
        )

    def _remove_tombstone(self, path: str, fd: int, before: float) -> None:
        """Delete the file at `path`, open at `fd`, if it is a tombstone written before
        `before` (a file without a header that is not empty, damaged, stays until its
        topic's next write)."""
        judged = os.fstat(fd)
        if judged.st_size == 0 and judged.st_mtime < before:
            self._remove_judged(path, judged)

    def _remove_judged(self, path: str, judged: os.stat_result) -> int:
        """Delete the file at `path` if it is still the one judged stale (`judged`, held open
        by the caller, so that no new file can take its inode number): 1, else 0.

        A publisher of any process may have replaced it since: a new inode at `path`, left
        alone, untouched. If one lands in the two system calls between that look and the
        move aside, the move takes it: it goes back, unless a newer one is in place already;
        until then its topic has none to a subscriber that looks, and a delete acknowledged
        in between is undone. Not deleted in place: no unlink says "only this inode".
        A process killed between the move aside and the link back (or the unlink) leaves
        the file aside, under ASIDE_PREFIX: the next sweep of any process puts it back
        (`_put_back`), and may put it back under this one's feet, which then has
        nothing left to do."""
        try:
            if not os.path.samestat(os.lstat(path), judged):
                return 0  # replaced since it was read: the new one stays
        except FileNotFoundError:
            return 0  # deleted by its publisher meanwhile
        aside = os.path.join(self._dir, f"{ASIDE_PREFIX}{os.urandom(16).hex()}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return 0
        removed = 0
        try:
            removed = int(os.path.samestat(os.lstat(aside), judged))
        except FileNotFoundError:
            return 0  # put back by another process's sweep meanwhile (`_put_back`)
        finally:
            if not removed:  # put back: a fresh one, or one not known to be the one judged
                # FileNotFoundError: another sweep put it back already.
                with contextlib.suppress(FileExistsError, FileNotFoundError):
                    os.link(aside, path)
            _unlink_quietly(aside)
        return removed

    def _put_back(self, asides: list[str]) -> None:
        """Put each file a sweep killed in `_remove_judged` left aside (`asides`, their
        paths) back under its topic's name, unless the topic has another file since (a
        newer message or a tombstone), which stays and the aside goes. Left aside, a
        message a publisher put in place just before the move aside was lost once its
        publisher had been told it was retained (a PUBACK), and nothing ever read or
        deleted the file. The one judged stale goes back too, and goes at the next sweep
        (no reader sends an expired one meanwhile); an aside without a header is a
        tombstone judged old, deleted. As for a file put back by a live sweep, a delete
        that came in between is undone."""
        for aside in asides:
            opened = _open_header(aside)
            if opened is None:  # a tombstone (or a damaged file), or put back already
                _unlink_quietly(aside)
                continue
            os.close(opened.fd)
            try:
                rename_noreplace(aside, self._path(opened.topic))
            except FileExistsError:  # the topic has a newer file: it stays
                _unlink_quietly(aside)
            except FileNotFoundError:
                pass  # put back by another sweep meanwhile


class _Opened(NamedTuple):
    """A retained file's header, and the file held open (the sweep's judgement of it). A
    tuple: a frozen dataclass's __init__ cost the sweep 4,500 instructions a file more."""

    topic: str  # the header's, for `RetainedStore._scan`
    header: RetainedHeader
    fd: int


class _Topical(Protocol):
    @property
    def topic(self) -> str: ...


_Read = TypeVar("_Read", bound=_Topical)


def _every(topic: str) -> bool:
    return True


def _holds_any(folder: str) -> bool:
    """Whether `folder` holds any entry (a missing one holds none): one listing, stopped at
    its first entry."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is not None
    except FileNotFoundError:
        return False


def _version(found: os.stat_result) -> Version:
    return found.st_ino, found.st_mtime_ns, found.st_size


def _file_name(topic: str) -> str:
    return hashlib.sha256(topic.encode()).hexdigest()


def _load(path: str) -> Retained | None:
    try:
        data = read_file(path)
    except FileNotFoundError:
        return None
    header, newline, body = data.partition(b"\n")
    # No newline: a delete's tombstone (empty), or cut short after its header (damaged), not
    # a message with an empty body, which MQTT reads as a delete (§3.3.1.3) and a subscriber
    # would get as one.
    fields = _fields(header) if newline else None
    if fields is None:
        return None
    topic, name, properties_file = fields
    return Retained(topic, name, body, properties_file)


class _Sized(NamedTuple):
    """A retained message read without its body (empty in `retained`), and its body's length."""

    topic: str  # the header's, for `RetainedStore._scan`
    retained: Retained
    size: int


def _load_sized(path: str) -> _Sized | None:
    """`_load`, the body's length from the file's size less its header's line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        header = read_header(fd)  # EISDIR for a directory, as `_load`'s read
        fields = None if header is None else _fields(header)
        if header is None or fields is None:
            return None  # a tombstone, or damaged: as `_load` says
        size = os.fstat(fd).st_size - len(header) - 1
    finally:
        os.close(fd)
    topic, name, properties_file = fields
    return _Sized(topic, Retained(topic, name, b"", properties_file), size)


def _open_header(
    path: str, headerless: Callable[[str, int], object] | None = None
) -> _Opened | None:
    """The file's header, and the file left open (for the caller to close), or None; one
    without a header (a tombstone, or damaged) is given to `headerless` with its descriptor
    before it is closed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        header = read_header(fd)
        fields = None if header is None else _fields(header)
    except BaseException:
        os.close(fd)
        raise
    if fields is None:
        try:
            if headerless is not None:
                headerless(path, fd)
        finally:
            os.close(fd)
        return None
    return _Opened(fields[0], RetainedHeader(fields[0], fields[1]), fd)


def _fields(header: bytes) -> tuple[str, str, str | None] | None:
    """The topic, name and PROPERTIES_SIDE_FILE (None if none, or not a string) a file's
    first line holds; None if it is damaged, as a power cut
    can leave it under fsync interval or never (renamed, its data never written, or only
    part of it: a first line with no newline after it is damaged too): passed by,
    as if the topic had none, not read as the failure of every subscription its topic
    matches. The topic's next retained message replaces it."""
    try:
        fields = json.loads(header)
        topic, name = str(fields["topic"]), str(fields["name"])  # a dict's, past here
    except (ValueError, KeyError, TypeError):
        return None
    side = fields.get(PROPERTIES_SIDE_FILE)
    return topic, name, side if isinstance(side, str) else None


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def read_header(fd: int) -> bytes | None:
    """The file's first line, without its newline; None if the file holds no newline (cut
    short: damaged). A read of a page, which holds the line unless its topic is long (MQTT
    allows 65,535 bytes), and never the body beyond that page (the sweep looks at every
    retained file for its expiry, a body of 1 MB among them)."""
    chunks = []
    size = _HEADER_READ
    while chunk := os.read(fd, size):
        line, newline, _ = chunk.partition(b"\n")
        chunks.append(line)
        if newline:
            return b"".join(chunks)
        size = _LONG_HEADER_READ
    return None


_HEADER_READ = 4096  # a page: a header of up to about 4,000 bytes in one read
_LONG_HEADER_READ = 1 << 16


def _unlink_quietly(path: str) -> None:
    """Best effort: a file system failing now may refuse this too (the name starts with a
    dot, so a leftover is never taken for a retained message)."""
    with contextlib.suppress(OSError):
        os.unlink(path)
