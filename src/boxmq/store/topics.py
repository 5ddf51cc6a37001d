"""Where topics live on disk: subscriptions as dropboxes, and the registry of them.

    <root>/topic-root/
        .generation                          replaced on every subscribe/unsubscribe (its count
                                             and the subscriptions the last changes touched)
        .incoming/working/                   exactly-once messages to topics, awaiting `deliver`,
                                             and publications' staging files (.fanout-*)
        .retained/                           the last retained message of each topic
        <filter>/.subscriptions/<key>/       one dropbox per subscription (DropboxMQ's layout)
            .subscription                    what it is: filter, group or subscriber, QoS (JSON)
            .members/<member>                a share group's members, each naming its process
            working/ target/ processing/ ...
            working/.exactly-once/           copies of exactly-once messages on their way
                                             from .incoming/working/ to target/ (fanout.py)

`<filter>` is the topic filter escaped as one folder name; `<key>` is `share.<group>` for a
share group and `client.<subscriber>` for a plain durable subscription, escaped the same way.
Publishers in any process see that the subscriptions changed when `.generation` does (a
rename gives it another inode, and each write a later mtime than the file it replaces, which
one stat sees). It holds a count of the changes and the subscriptions the last `_KEPT` of
them touched, the latest first ("<count>\n<filter folder>/.subscriptions/<key>\n..."; an
empty line for a change of several, a sweep's), written under an flock of the topic root so
that no two changes get one count: a reader that saw one of those counts reads again the
subscriptions changed since; one further behind, or that finds an empty line among them or
no count (a version before counts), scans the whole tree again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Final

from boxmq.store.layout import TOPIC_ROOT, State, open_folder, remove_folder
from boxmq.store.names import escape_segment, folder_segment, unescape_segment
from boxmq.store.records import make_folders, read_file, read_file_status, replace_file
from boxmq.store.temporaries import TEMPORARY_PREFIX

__all__ = [
    "EXACTLY_ONCE_PENDING",
    "KEPT_CHANGES",
    "SUBSCRIPTIONS_DIR",
    "Change",
    "Counted",
    "SubscriptionRecord",
    "bump_generation",
    "clear_left_behind",
    "exactly_once_markers",
    "generation",
    "generation_file",
    "has_record",
    "incoming_working",
    "locked_folder",
    "make_folder",
    "marker_name",
    "named_by_boxmq",
    "read_record",
    "read_records",
    "remove_ended",
    "remove_if_abandoned",
    "remove_if_ended",
    "remove_record",
    "remove_stale_staging",
    "remove_subscription",
    "staging_name",
    "subscription_folders",
    "subscription_key",
    "subscription_path",
    "unreadable_record",
    "unreadable_told",
    "write_record",
]

_RECORD = ".subscription"
SUBSCRIPTIONS_DIR: Final = ".subscriptions"  # a topic folder's folder of its subscriptions
_GENERATION = ".generation"


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    """A durable subscription as written on disk (plain values: the store knows no core)."""

    filter: str  # the filter proper, without $share/<group>/
    group: str | None  # the share group, or None
    subscriber: str | None  # the plain subscriber, or None for a share group
    qos: int
    no_local: bool = False
    # A plain subscription that ends with its process (`boxmq subscribe` without --keep): the
    # process token (store/process.py) of that process, so that a sweep can remove it once
    # the process died without removing it (SIGKILL, a crash). "" for one that outlives it.
    owner: str = ""


def topic_root(root: str) -> str:
    return os.path.join(root, TOPIC_ROOT)


def incoming_working(root: str) -> str:
    """The folder of exactly-once messages to topics before `deliver`, and of staging files."""
    return os.path.join(topic_root(root), ".incoming", State.WORKING.value)


def exactly_once_markers(root: str) -> str:
    """The folder of the exactly-once "delivered" markers (client/markers.py)."""
    return os.path.join(root, ".exactly-once")


def marker_name(source: str, msg_id: str) -> str:
    """The name of the "delivered" marker of (source, msg_id) in `exactly_once_markers`.
    Source, NUL, msg_id names one key only when the source holds no NUL: ('a\\0b', 'c') and
    ('a', 'b\\0c') read alike, so the second deliver overwrote the first's record and a
    restart forgot it. A source with a NUL is hashed apart, behind a byte no UTF-8 text
    begins with; every other name is the one an earlier boxmq gave it, so its records are
    still found (and removed) by name."""
    if "\0" in source:
        text = b"\xff" + json.dumps([source, msg_id]).encode()
    else:
        text = f"{source}\0{msg_id}".encode()
    return hashlib.sha256(text).hexdigest()


# Where, in a subscription's working/, the copies of an exactly-once message wait between the
# removal of its file from .incoming/working/ and their rename into target/ (store/fanout.py).
EXACTLY_ONCE_PENDING = ".exactly-once"

# A publication's body, written once in the incoming working/ folder before it is linked into
# every subscription it goes to (then unlinked here). The id is unique within its process and
# the token among the processes of a root.
_STAGING_PREFIX = ".fanout-"


def staging_name(message_id: str, token: str) -> str:
    return f"{_STAGING_PREFIX}{message_id}-{token}"


def remove_stale_staging(root: str, *, now: float, age: float) -> int:
    """Delete the staging files written more than `age` seconds ago: a publish links its
    staging file and unlinks it within one commit, so one that old was left by a process that
    died in between (its copies were never linked, or all were). How many went."""
    removed = 0
    with contextlib.suppress(FileNotFoundError), os.scandir(incoming_working(root)) as entries:
        for entry in entries:
            if not entry.name.startswith(_STAGING_PREFIX):
                continue  # an exactly-once message awaiting `deliver`: not ours to judge
            with contextlib.suppress(FileNotFoundError):
                if now - entry.stat().st_mtime > age:
                    os.unlink(entry.path)
                    removed += 1
    return removed


def subscription_key(group: str | None, subscriber: str | None) -> str:
    return f"share.{group}" if group is not None else f"client.{subscriber}"


def subscription_path(root: str, filter: str, key: str) -> str:
    """A filter or a share group's name too long for a folder name is shortened: the record
    inside holds them whole."""
    return os.path.join(
        topic_root(root), folder_segment(filter), SUBSCRIPTIONS_DIR, folder_segment(key)
    )


def _root_of(path: str) -> str:
    """The root of the subscription folder at `path` (`subscription_path`'s inverse)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(path))))


def make_folder(path: str, *, flush: bool = False) -> None:
    """The folder of the subscription at `path`, and those above it, made if need be; with
    `flush`, on disk when this returns (store/records.py)."""
    make_folders(path, flush=flush, within=_root_of(path))


def write_record(path: str, record: SubscriptionRecord, *, flush: bool = False) -> None:
    """Write (or replace) the record of the subscription at `path`, its folders made if need
    be; with `flush` (fsync=always), on disk when this returns (store/records.py)."""
    make_folder(path, flush=flush)
    for state in State:  # a dropbox before it is a subscription: a copy needs its target/
        folder = os.path.join(path, state.value)
        try:
            os.mkdir(folder)  # in `path`, just made: makedirs looked at it before each
        except FileExistsError:
            if not os.path.isdir(folder):
                raise
        except FileNotFoundError:  # `path` deleted since (by hand: its holder waits)
            os.makedirs(folder, exist_ok=True)
    replace_file(os.path.join(path, _RECORD), json.dumps(_fields(record)), flush=flush)


def _fields(record: SubscriptionRecord) -> dict[str, object]:
    """The record as JSON fields; no `owner` unless set, so that every record that has none
    stays as versions before it wrote them (and read them)."""
    fields = asdict(record)
    if not record.owner:
        del fields["owner"]
    return fields


def read_records(root: str) -> Iterator[tuple[SubscriptionRecord, str]]:
    """Every durable subscription under the root, with its dropbox path."""
    for path in subscription_folders(root):
        record = read_record(path)
        if record is not None:
            yield record, path


def subscription_folders(root: str) -> Iterator[str]:
    """The folder of every subscription under the root, its record written or not: one
    whose first record was never renamed into place (its process died) is no subscription,
    but may hold that record's temporary."""
    base = topic_root(root)
    with contextlib.suppress(FileNotFoundError), os.scandir(base) as filters:
        for entry in filters:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            holder = os.path.join(entry.path, SUBSCRIPTIONS_DIR)
            with contextlib.suppress(FileNotFoundError), os.scandir(holder) as keys:
                for key in keys:
                    yield key.path


def has_record(path: str) -> bool:
    """Whether the folder at `path` is a subscription's: its record is there, readable or not
    (a folder without one is what a subscribe that died left, `remove_if_abandoned`)."""
    return os.path.lexists(os.path.join(path, _RECORD))


def read_record(path: str) -> SubscriptionRecord | None:
    """The record of the subscription at `path`; None if it has none (yet, or any more)."""
    return _read(os.path.join(path, _RECORD))


def _read(path: str) -> SubscriptionRecord | None:
    try:
        return _read_strictly(path)
    except ValueError:
        return None  # a record damaged or not ours: `unreadable_record` tells why


def _read_strictly(path: str) -> SubscriptionRecord | None:
    """The record in `path`, None if there is none; ValueError if the file is no record."""
    try:
        data = json.loads(read_file(path))
    except (FileNotFoundError, NotADirectoryError):
        return None  # being created or removed right now: the next generation shows it
    if not isinstance(data, dict):
        raise ValueError(f"JSON that is no object: {type(data).__name__}")
    try:
        record = SubscriptionRecord(**data)
    except TypeError:  # a field missing, or one no boxmq writes
        raise ValueError(f"its fields are {', '.join(sorted(data)) or 'none'}") from None
    if wrong := _wrong_field(record):
        raise ValueError(wrong)
    return record


_FIELDS = ("filter", "group", "subscriber", "qos", "no_local", "owner")


def _wrong_field(record: SubscriptionRecord) -> str:
    """What is wrong with a field of `record` as boxmq writes none (edited by hand), or "":
    the JSON gave it any type. A "no_local": 0 routed, but the subscribe of a resumed MQTT
    session or `boxmq subscribe` that read it was refused with "no_local is True or False,
    not 0", an argument its user never gave; a "qos": "1" made every publish fail."""
    fields: dict[str, object] = {name: getattr(record, name) for name in _FIELDS}
    if not isinstance(filter_ := fields["filter"], str):
        return f"filter {filter_!r} is no string"
    for name in ("group", "subscriber"):
        if (value := fields[name]) is not None and not isinstance(value, str):
            return f"{name} {value!r} is no string nor null"
    if type(qos := fields["qos"]) is not int or not 0 <= qos <= 2:
        return f"qos {qos!r} is not 0, 1 or 2"
    if not isinstance(no_local := fields["no_local"], bool):
        return f"no_local {no_local!r} is not true or false"
    if not isinstance(owner := fields["owner"], str):
        return f"owner {owner!r} is no string"
    return ""


def unreadable_record(path: str) -> tuple[str, str] | None:
    """(the record file, why) for the subscription at `path` whose record is there but is
    no record this boxmq reads (damaged, edited by hand); None for one that is fine or has
    none. Such a subscription is left out of every listing and routing: it read as one being
    made, so its messages went unlisted and its publications elsewhere, and nothing said so;
    a record holding JSON that is no object made ls and every publish fail."""
    file = os.path.join(path, _RECORD)
    try:
        _read_strictly(file)
    except ValueError as error:
        return file, str(error)
    return None


def unreadable_told(file: str, why: str) -> str:
    """What `boxmq ls` and the sweep of `boxmq serve` say of an `unreadable_record`."""
    return (
        f"{file} is no subscription record this boxmq reads ({why}): the subscription is not "
        "listed and publications skip it, its messages kept; subscribing again to its filter "
        "under its name (boxmq subscribe F --name S --keep, or a share group's member) "
        "writes it again"
    )


def clear_left_behind(root: str, path: str) -> bool:
    """Delete the messages in the folder of a subscription that has no record: what an
    unsubscribe (or a share group's last leave) killed between its record's deletion and
    its folder's move left, the messages of a subscription that ended. Each state folder
    that holds anything is renamed into `<root>/.deleting/` and deleted there
    (`remove_folder`); the folder stays, for the caller, which holds its flock
    (`locked_folder`) and writes the record next. Under that flock no other process is
    making the subscription (a join writes the record before it lets go), so a folder
    without a record is no subscription being made. An empty state folder is left: where
    the file system keeps no flocks it may be one a subscribe is making right now.
    A folder with a record, readable or not, is left alone. Whether anything was deleted."""
    # write_record makes working/ first: a folder that never had a record (a new
    # subscription's, which its subscribe has just made) has none, and costs one stat.
    if not os.path.isdir(os.path.join(path, _FIRST_STATE)):
        return False
    try:
        with os.scandir(path) as entries:
            found = {e.name: e for e in entries}
    except FileNotFoundError:
        return False
    if _RECORD in found:  # damaged: its messages are kept (`unreadable_record` tells)
        return False
    # The first state last: it is how the next subscribe knows a folder that had a record,
    # which one killed after moving it (and before the others) took for a new one.
    states = sorted(
        (e.path for name, e in found.items() if name in _STATES and e.is_dir()),
        key=lambda folder: folder.endswith(_FIRST_STATE_END),
    )
    cleared = False
    for folder in states:
        try:
            with os.scandir(folder) as entries:
                if next(entries, None) is None:
                    continue
        except FileNotFoundError:
            continue
        cleared = remove_folder(root, folder) or cleared
    return cleared


_STATES = frozenset(state.value for state in State)
_FIRST_STATE = next(iter(State)).value  # the first write_record makes
_FIRST_STATE_END = os.sep + _FIRST_STATE


def remove_if_abandoned(path: str, *, now: float, age: float) -> bool:
    """Delete the folder of a subscription whose first record never landed (its process
    died between making the folder and renaming the record into it), once nothing in it
    changed for `age` seconds (the rule for temporaries) and it holds no file but stale
    temporaries: never a message, in whatever state folder. True if it went.

    Its folders go one by one with rmdir, never with their contents: a subscribe or a file
    arriving meanwhile keeps what it needs (a subscribe whose folder went just before its
    record fails, and says so). A folder under a name boxmq gives none is another program's
    (`named_by_boxmq`), left alone however empty."""
    if not named_by_boxmq(path) or has_record(path):
        return False
    folders: list[str] = []
    temporaries: list[str] = []
    try:
        for folder, _, names in os.walk(path, topdown=False, onerror=_raise):
            if now - os.stat(folder).st_mtime <= age:
                return False
            for name in names:
                file = os.path.join(folder, name)
                if not name.startswith(TEMPORARY_PREFIX) or now - os.lstat(file).st_mtime <= age:
                    return False  # a message (or a record, a member) is no leftover
                temporaries.append(file)
            folders.append(folder)  # deepest first
        for file in temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(file)
        for folder in folders:
            os.rmdir(folder)
    except OSError:  # gone already, or something arrived (ENOTEMPTY): left as it is
        return False
    _remove_empty_filter(path)
    return True


def _raise(error: OSError) -> None:
    raise error


# flock(2) refused where the file system keeps no such locks (some NFS setups): no lock.
_NO_LOCKS = frozenset({errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL})

# The folders `_open_held` has open (locked_folder, _counting), each fd's flock taken or
# about to be. An flock belongs to the open file, which a fork shares with the child: the
# child's copy, never closed there, kept the group locked after this process let go or was
# killed, for as long as the child lived (a multiprocessing worker: for ever), and every join
# and leave of the group, here or in any process on the root, waited for it. A forked child
# closes its copies first thing; the lock (held across the fork) keeps an fd from being
# opened unseen while the fork is made.
_open_folders: set[int] = set()
_open_folders_lock = threading.Lock()


def _close_open_folders_in_child() -> None:
    for fd in _open_folders:
        with contextlib.suppress(OSError):
            os.close(fd)
    _open_folders.clear()
    _open_folders_lock.release()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(
        before=_open_folders_lock.acquire,
        after_in_parent=_open_folders_lock.release,
        after_in_child=_close_open_folders_in_child,
    )


@contextlib.contextmanager
def locked_folder(path: str, *, make: bool = False, flush: bool = False) -> Iterator[bool]:
    """Hold the folder of the subscription at `path` against every other process on the
    root: an flock on the folder itself, so a share group's last member leaving in one process
    (which deletes the folder) and a member joining in another come one wholly before the
    other, never the join's record and member written into a folder the leave then deleted.

    The lock is the folder's, not the path's: one taken on a folder another process deleted
    meanwhile is let go and taken again on what the path holds now. `make`: the folder is
    made first (a join; `flush` as `make_folder`); else one that is not there is not locked.
    Yields whether the folder is there and held (True where the file system keeps no flocks:
    held by this process alone, as before)."""
    while True:
        if make:
            make_folder(path, flush=flush)
        try:
            fd = _open_held(path)
        except FileNotFoundError:
            if make:
                continue  # deleted between its making and its opening: made again
            yield False
            return
        try:
            if _flock(fd):
                try:
                    now = os.stat(path)
                except FileNotFoundError:
                    continue  # deleted by the holder we waited for
                held = os.fstat(fd)
                if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                    continue  # deleted by the holder we waited for, and made again since
            yield True
            return
        finally:
            _close_held(fd)


def _open_held(path: str) -> int:
    """The folder at `path` opened for its flock, its fd closed in a child forked while it
    is open (`_open_folders`)."""
    with _open_folders_lock:
        fd = open_folder(path)
        _open_folders.add(fd)
    return fd


def _flock(fd: int) -> bool:
    """Take the flock of `fd`, waiting for it; False where the file system keeps no flocks."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as error:
        if error.errno not in _NO_LOCKS:
            raise
        return False
    return True


def _close_held(fd: int) -> None:
    """Close an fd of `_open_held`, which lets go of its flock."""
    with _open_folders_lock:
        if fd in _open_folders:  # else closed in a child this thread forked
            _open_folders.discard(fd)
            os.close(fd)


def remove_subscription(root: str, path: str) -> None:
    """Delete a subscription of `root` and every message it holds (its last member left, or
    its unsubscribe). Its record goes first, so that publishers stop seeing it and a disk
    that refuses (EIO) leaves it whole and says so; then its folder is renamed into
    `<root>/.deleting/` in one step and deleted there (layout.remove_folder). Deleted in
    place, a publication of another process fanning out into it, a requeue or a sweep moving
    a message in it under the rmtree made it fail (Directory not empty) and left its folders
    behind, a message in them, with no record. The flock a share group's join or leave holds
    is the folder's: it goes with it, and a join waiting for it finds the path gone and makes
    a new folder (`locked_folder`)."""
    remove_record(path)
    remove_folder(root, path)
    _remove_empty_filter(path)


def remove_record(path: str) -> None:
    """`remove_subscription`'s first step alone: the record of the subscription at `path`
    deleted, which ends it for every look that reads it; its folder, with its messages,
    stays for `remove_ended`. For several subscriptions ended together, told to the other
    processes in one write of the generation between the two steps: killed before that
    write, the folders left without records are what the sweep of `boxmq serve` tells of
    and deletes (Box._tell_recordless, `remove_if_ended`), as after one end killed there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(path, _RECORD))


def remove_ended(root: str, path: str) -> None:
    """`remove_subscription`'s second step: the folder at `path` deleted with its messages,
    unless it has a record (a subscribe made it again since `remove_record`, and took over
    the folder, its old messages cleared: `clear_left_behind`). Called under the folder's
    lock, as a subscribe writes its record."""
    if has_record(path):
        return
    remove_folder(root, path)
    _remove_empty_filter(path)


def _remove_empty_filter(path: str) -> None:
    """The folders of the filter of the subscription at `path`, once it left them, if it was
    the filter's last: they stayed behind, one pair per filter ever subscribed. rmdir takes
    an empty folder only, so another subscription to the filter keeps them; and a subscribe
    (or a share group's join) in another process making its folder in them as they go makes
    them again (records.make_folders), as a join waiting for the group's flock makes again
    the group's folder the last member's leave deleted (`locked_folder`)."""
    holder = os.path.dirname(path)
    for folder in (holder, os.path.dirname(holder)):
        try:
            os.rmdir(folder)
        except OSError:  # another subscription is there (ENOTEMPTY), or it is gone already
            return


def named_by_boxmq(path: str) -> bool:
    """Whether the subscription folder at `path` has a name boxmq gives one (`client.*`,
    `share.*`): any other is another program's (DropboxMQ's `sub.conn`), never routed to."""
    return os.path.basename(path).startswith(("client.", "share."))


def remove_if_ended(path: str, *, now: float, age: float) -> int:
    """Delete the folder of a subscription whose end was cut short, with the messages in it:
    `remove_subscription` deletes the record, then moves the folder away, and a process killed
    in between (an unsubscribe, a session's or a share group's end) left the messages of a
    subscription that ended, which nothing reads (no scan of subscriptions sees a folder
    without its record) and nothing deleted unless a subscribe came under the same name.
    Once nothing in it changed for `age` seconds (its folders' and files' times), and under
    the folder's flock, which a subscribe making it holds until its record is written: not
    where the file system keeps no flocks (no subscribe under way could be told apart), nor
    in a folder boxmq gives no subscription (`client.*`, `share.*`: another program's).
    How many files went with it (its messages and what else it held); 0 if it stayed."""
    if not named_by_boxmq(path) or has_record(path):
        return 0
    try:
        fd = _open_held(path)
    except FileNotFoundError:
        return 0
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: a join is under way
            held = os.fstat(fd)
            current = os.stat(path)
        except OSError:  # held, or no flocks here, or gone
            return 0
        if (held.st_dev, held.st_ino) != (current.st_dev, current.st_ino) or has_record(path):
            return 0  # made again since it was opened, or its record landed
        files = _files_if_unchanged(path, now=now, age=age)
        if not files:
            return 0  # changed lately, or empty: `remove_if_abandoned`'s
        if not remove_folder(_root_of(path), path):
            return 0
    finally:
        _close_held(fd)  # a join waiting for it finds the folder gone, and makes a new one
    _remove_empty_filter(path)
    return files


def _files_if_unchanged(path: str, *, now: float, age: float) -> int:
    """How many files are under `path`, 0 if a folder or file there changed within `age`."""
    files = 0
    try:
        for folder, _, names in os.walk(path, onerror=_raise):
            if now - os.stat(folder).st_mtime <= age:
                return 0
            for name in names:
                if now - os.lstat(os.path.join(folder, name)).st_mtime <= age:
                    return 0
            files += len(names)
    except OSError:
        return 0
    return files


def generation(root: str) -> tuple[int, int] | None:
    """The subscriptions' generation on `root`: the generation file's inode and time (one
    stat), None while there is none."""
    return _generation_at(generation_file(root))


def generation_file(root: str) -> str:
    """The path of the generation file of `root`, to name it in a message."""
    return os.path.join(topic_root(root), _GENERATION)


_UNSEEN: Final = (-1, -1)  # no generation file's (inode, time): `changed` says yes after it
_KEPT: Final = 64  # changes the generation file names: a reader this far behind reads them
KEPT_CHANGES: Final = _KEPT  # how many changes one write may name (`bump_generation`)


@dataclass(frozen=True, slots=True)
class Change:
    """What changed since a reader last looked: the subscription folders to read again, or
    None: every subscription (read the tree again)."""

    paths: tuple[str, ...] | None


_EVERYTHING: Final = Change(None)


class GenerationWatch:
    """Tells one reader whether the subscriptions on a root changed since it last asked: a
    stat of the generation file (an access while there is none), whose path is built once
    (the broker asks once per read that publishes, and the two joins were a third of the
    look)."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._folder = topic_root(root)
        self._file = os.path.join(self._folder, _GENERATION)
        self._seen: tuple[int, int] | None = None  # nothing yet, as a root with no file
        self._count: int | None = None  # the count of the change last seen, if read
        self._lookable = False  # the topic root found open to this user once (`_absent`)

    def changed(self) -> bool:
        if self._seen is None and self._absent():
            return False
        seen = _generation_at(self._file)
        if seen == self._seen:
            return False
        self._seen = seen
        return True

    def change(self) -> Change | None:
        """What changed since the last call (None: nothing). The subscription folders the
        changes since the count seen before named, when the file still names them all: a
        reader that kept every subscription from before reads only those again, where a scan
        of the tree read every record (O(subscriptions) at each subscribe: 10,000 persistent
        sessions subscribing at connect made 50 million record reads). Else everything."""
        if self._seen is None and self._absent():
            return None
        if _generation_at(self._file) == self._seen:
            return None
        before, self._count = self._count, None
        try:
            # On a descriptor: a text file's buffer made six system calls more a read
            # (fstat, ioctl, two lseeks, a second read), as the records' did before.
            data, status = read_file_status(self._file)
            text = data.decode()
        except FileNotFoundError:
            self._seen = None  # gone (a root emptied by hand): read the tree
            return _EVERYTHING
        self._seen = status.st_ino, status.st_mtime_ns
        count, *named = text.split("\n")
        if not count.isdigit():
            return _EVERYTHING  # written by a version before counts
        self._count = int(count)
        if before is None or not 0 < self._count - before <= len(named):
            return _EVERYTHING
        since = named[: self._count - before]
        if "" in since:
            return _EVERYTHING  # a change of several subscriptions
        return Change(tuple(os.path.join(self._folder, path) for path in dict.fromkeys(since)))

    def caught_up(self, counted: Counted) -> bool:
        """This reader's own process made the change `counted` (and reads its folder again
        itself): True if the reader had seen every change before it, and now counts it seen
        too, as a look at the file would. A process making subscriptions faster than it
        looks (a broker's burst of persistent devices, 200 at once) fell more than `_KEPT`
        changes behind its own, and read every record again at its next look."""
        # None too after `forget` (a change refused or read into nothing), which stands
        # until `change` says everything: a change of its own then is no catching up.
        if self._count is None or self._count != counted.count - counted.changes:
            return False  # changes it never saw came before: its next look reads the file
        self._count, self._seen = counted.count, counted.seen
        return True

    def forget(self) -> None:
        """The next `changed` says yes, and `change` says everything: what the last change
        was read into failed (EMFILE, EIO), and the reader must read it again, not keep
        what it had."""
        self._seen = _UNSEEN
        self._count = None

    def _absent(self) -> bool:
        """Still no file (a root where no durable subscription was ever made): asked without
        the FileNotFoundError of a stat, which cost about 5,500 instructions. os.access also
        says no when this user may not look into the root or its topic root (EACCES): that
        is no "no subscription", which let a publication there be dropped as sent to nobody,
        so then the stat raises why. The topic root found open once is not asked again: the
        look comes once per read that publishes, and a folder's mode does not come and go."""
        if os.access(self._file, os.F_OK):
            return False
        if self._lookable or os.access(self._folder, os.X_OK):
            self._lookable = True
            return True  # the folder can be looked into, and holds no file
        if os.access(self._root, os.X_OK) and not os.access(self._folder, os.F_OK):
            return True  # no topic root yet (a root of queues only)
        _generation_at(self._file)  # raises what hides the file, if something does
        return True


def _generation_at(file: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(file)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


@dataclass(frozen=True, slots=True)
class Counted:
    """A change `bump_generation` counted: its count, and the generation file it wrote as
    a stat shows it (inode, mtime) while no later change replaced it."""

    count: int
    seen: tuple[int, int]
    changes: int = 1  # how many changes the write counted (`bump_generation`'s `paths`)


def bump_generation(root: str, *, flush: bool = False, paths: Sequence[str] = ()) -> Counted | None:
    """Tell every process that the subscriptions at `paths` (their folders) changed, or any
    (none given: a sweep's, or one a failed write left untold). With `flush`, the topic
    root's folder is fsynced after: a new filter's folder is one of its entries. The change
    as counted, None where no count can be trusted (a file system without flocks).
    Several `paths` changed together (an MQTT UNSUBSCRIBE of many filters, a session's end)
    are told in one write as that many changes, each named, as that many writes would have
    named them: one write per filter made an UNSUBSCRIBE of 1,000 filters write the file
    1,000 times. More than the file names (`_KEPT`) are told as any change, which a reader
    that far behind would read as that all the same."""
    named_paths = list(dict.fromkeys(paths))
    if len(named_paths) > _KEPT:
        named_paths = []  # any change: every reader reads every record
    base = topic_root(root)
    make_folders(base, flush=flush, within=root)
    file = os.path.join(base, _GENERATION)
    with _counting(base) as counted:
        if not counted:  # two changes could get one count: no reader may trust a count
            before = _generation_at(file)
            replace_file(file, "", flush=flush, later_than=None if before is None else before[1])
            return None
        try:
            data, status = read_file_status(file)
            count, *named = data.decode().split("\n")
            later_than: int | None = status.st_mtime_ns
        except FileNotFoundError:
            count, named, later_than = "", [], None
        if not count.isdigit():
            count, named = "0", []  # a version before counts wrote it
        # The last named first, as so many writes one after the other would have left them.
        changed = [os.path.relpath(told, base) for told in reversed(named_paths)] or [""]
        kept = "\n".join([*changed, *named[: _KEPT - len(changed)]])
        # Later than the file it replaces: a rename's file takes the inode number of the one
        # before the last (A, B, A), and a burst of changes shares one tick of the clock, so
        # a reader that saw A could find it again after two changes, and route by records
        # from before them until the next (found by a second read).
        text = f"{int(count) + len(changed)}\n{kept}"
        written = replace_file(file, text, flush=flush, later_than=later_than)
        seen = (written.st_ino, written.st_mtime_ns)
        return Counted(int(count) + len(changed), seen, len(changed))


@contextlib.contextmanager
def _counting(base: str) -> Iterator[bool]:
    """The topic root's flock, held by one change of the generation at a time in every
    process (its fd closed in a child forked meanwhile, as `locked_folder`'s). Yields False
    where the file system keeps no flocks."""
    fd = _open_held(base)
    try:
        yield _flock(fd)
    finally:
        _close_held(fd)


def members_path(path: str) -> str:
    return os.path.join(path, ".members")


def add_member(path: str, member: str, token: str, *, flush: bool = False) -> None:
    """Register `member` of the share group at `path`, bound to the process `token` ("" for
    none); with `flush`, on disk when this returns."""
    folder = members_path(path)
    make_folders(folder, flush=flush, within=path)
    # Written aside, then renamed in: written in place, a full disk refused the token after
    # the file was made (or emptied), and an empty file is a member bound to no process,
    # which kept the group, and what was published to it, after its real members left.
    file = os.path.join(folder, escape_segment(member))
    replace_file(file, token, flush=flush, aside=path)


def remove_member(path: str, member: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(members_path(path), escape_segment(member)))


def is_member(path: str, member: str) -> bool:
    """Whether `member` is registered in the share group at `path` (one look at its file,
    where `members` reads every member's)."""
    return os.path.isfile(os.path.join(members_path(path), escape_segment(member)))


def member_token(path: str, member: str) -> str | None:
    """The process token `member` of the share group at `path` is bound to; None if it is no
    member (one file read, where `members` reads every member's)."""
    try:
        return read_file(os.path.join(members_path(path), escape_segment(member))).decode()
    except FileNotFoundError:
        return None


def member_names(path: str) -> list[str]:
    """The members of the share group at `path` (its folder listed, where `members` reads
    every member's file too)."""
    with contextlib.suppress(FileNotFoundError), os.scandir(members_path(path)) as entries:
        return [unescape_segment(entry.name) for entry in entries]
    return []


def members(path: str) -> dict[str, str]:
    """member -> process token."""
    found = {}
    with contextlib.suppress(FileNotFoundError), os.scandir(members_path(path)) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                found[unescape_segment(entry.name)] = read_file(entry.path).decode()
    return found
