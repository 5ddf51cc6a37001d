"""The exactly-once intake's "delivered" markers on disk (client/assured.py): one file a
(source, msg_id) in `<root>/.exactly-once/`, written and flushed by `deliver` before its
message is sent, holding a JSON record of who wrote it, the message's file, whether the id
is remembered and the retained version its topic had. Their writing, claiming by the
process that finishes a `deliver` cut short, and reading back (one marker, or all of them
at a restart); what the intake does with them, its books, stays there."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Mapping

from boxmq.client.copies import replaced_topic
from boxmq.errors import naming
from boxmq.store.commit import Committer, Move
from boxmq.store.names import decode_lenient
from boxmq.store.records import read_file, read_file_status, write_file
from boxmq.store.retained import Marked, Version
from boxmq.store.spares import rename_noreplace
from boxmq.store.temporaries import temporary_in
from boxmq.store.topics import exactly_once_markers, marker_name

__all__ = ["Markers", "delete_quietly"]

log = logging.getLogger("boxmq.exactly_once")


class _NewMarker(Move):
    """A "delivered" marker's move into place: FileExistsError, nothing moved, if a marker
    is there already (renameat2's RENAME_NOREPLACE, or a link where it is missing)."""

    __slots__ = ()

    def apply(self) -> None:
        assert self.target is not None
        rename_noreplace(self.source, self.target)


class Markers:
    def __init__(
        self,
        root: str,
        committer: Committer,
        *,
        retained_version: Callable[[str], Version | None] | None = None,
    ) -> None:
        self._root = root
        self._committer = committer
        # Which retained file a topic has (Topics.retained_version): written in the marker of
        # a retained message's `deliver`, for a restart that finishes it
        # (`AssuredIntake._restore_pending`).
        self._retained_version = retained_version
        self._markers = exactly_once_markers(root)
        # Names this intake in the markers it writes (`marked_since`): not the process,
        # of which a test (or an embedding program) may open the root twice.
        self._writer = os.urandom(8).hex()

    @property
    def folder(self) -> str:
        """The folder of the "delivered" markers."""
        return self._markers

    def path(self, source: str, msg_id: str) -> str:
        return os.path.join(self._markers, marker_name(source, msg_id))

    def remove(self, source: str, msg_id: str) -> None:
        """Delete the marker of (source, msg_id), if there is one."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(source, msg_id))

    def mark_all(
        self,
        keys: list[tuple[tuple[str, str], str, str | None]],
        *,
        remember: bool,
        superseded: bool,
    ) -> tuple[list[OSError | None], set[tuple[str, str]]]:
        """Write and flush the "delivered" marker of each (key, its message's file, the topic
        whose retained message that replaces at its `deliver`, if any), the file named in
        it (relative to the root: while that file waits in working/, the marker stays,
        `MarkerSweep.forget`): each one's error, if any, and the keys whose marker another
        process had written first (overwritten by this one's). remember=False is written in
        it: a restart finishes that deliver and forgets the id, as the deliver would have once
        its messages were sent (`AssuredIntake._restore`). So is, for a retained message, the
        version of its topic's retained file (null: none), looked at before the marker is
        written: a restart that finishes the deliver replaces it only if it is still the one
        in place (`Marked`), whatever the clock's ticks; or, `superseded` (a later one is in
        place), that it replaces none: the restart sends its copies alone, where the times
        (the later file older than the marker) would let it replace that one."""
        if not keys:
            return [], set()
        errors: list[OSError | None] = [None] * len(keys)
        moves: list[list[Move]] = []
        for index, ((source, msg_id), file, topic) in enumerate(keys):
            temporary = temporary_in(self._markers)
            try:
                record: dict[str, object] = {"source": source, "msg_id": msg_id}
                record["by"] = self._writer
                if not remember:
                    record["remember"] = False
                record["file"] = os.path.relpath(file, self._root)
                if topic is not None and superseded:
                    record["superseded"] = True
                elif topic is not None and self._retained_version is not None:
                    record["retained"] = self._retained_version(topic)
                data = json.dumps(record).encode()
                try:
                    write_file(temporary, data)
                except FileNotFoundError:
                    # The folder, made at the first marker (not looked for at each: three
                    # system calls a deliver), or again if it was deleted by hand.
                    os.makedirs(self._markers, exist_ok=True)
                    write_file(temporary, data)
            except OSError as error:
                delete_quietly([temporary])
                # A write refused at the file's close (a full disk) names no file.
                errors[index] = error if error.filename else naming(error, temporary)
                moves.append([])
                continue
            moves.append([_NewMarker(temporary, self.path(source, msg_id))])
        committed = self._committer.commit_each(moves)
        # A marker already there: another process's deliver (or a restart's) marked the key
        # first. The rename that refuses to replace it says so, where a look before it cost
        # every deliver a system call; this one's marker is then put in its place.
        again = [i for i, failure in enumerate(committed) if isinstance(failure, FileExistsError)]
        if again:
            retried = [[Move(moves[i][0].source, moves[i][0].target)] for i in again]
            for index, failure in zip(again, self._committer.commit_each(retried), strict=True):
                committed[index] = failure
        for index, (failure, group) in enumerate(zip(committed, moves, strict=True)):
            if failure is not None:
                delete_quietly([move.source for move in group])
                errors[index] = failure
        return errors, {keys[i][0] for i in again}

    def marked_since(self, key: tuple[str, str]) -> bool:
        """Whether the marker of `key` is now another intake's, written over this one's by
        a `deliver` of the same message in another process."""
        if (found := _marker_record(self.path(*key))) is None:
            return False
        writer = found[0].get("by")
        return isinstance(writer, str) and writer != self._writer

    def claim(self, key: tuple[str, str], file: str) -> None:
        """Put this intake's name in the marker of `key` before it sends `file` from it (a
        start, a sender's arrival or a sweep finishing a `deliver` cut short): the `deliver`
        that wrote it may still be running in another process, between its marker and its
        send, and, its file gone, it tells one sent from one swept away by the marker's
        writer (`marked_since`). The record and its time are kept (the time dates the
        `deliver`: `Marked`, done_ttl). One that is no record (no `deliver` wrote it as it
        stands) or that marks another file is left. Left open: the rename puts back a marker
        deleted (or replaced) between its read and it. A message swept away while this one
        sends it, its `deliver` deleting the marker meanwhile, then has a marker answering
        a repeat of that `deliver` as done (`AssuredIntake._sent_elsewhere`), as the failed
        send here already takes it for sent (`AssuredIntake._restore_pending`); and a new
        message under the id, its `deliver` marked in that instant, a marker naming the
        earlier file, which marks it not (`marks`). Not claimed (a disk refusing it), the
        `deliver` still running takes its message for swept away, as it did before."""
        path = self.path(*key)
        if (found := _marker_record(path)) is None:
            return
        record, written = found  # its time, as read: kept by the rewrite
        if record.get("by") == self._writer or not self.marks(record.get("file"), file):
            return
        record["by"] = self._writer
        temporary = temporary_in(self._markers)
        try:
            write_file(temporary, json.dumps(record).encode())
            os.utime(temporary, ns=(written.st_atime_ns, written.st_mtime_ns))
            [failure] = self._committer.commit_each([[Move(temporary, path)]])
        except OSError as error:
            failure = error
        if failure is not None:
            delete_quietly([temporary])
            log.warning("exactly once: claiming %s to send its message: %s", path, failure)

    def marked(self, key: tuple[str, str], file: str) -> tuple[Marked, bool | None] | None:
        """The "delivered" marker of `key` whose message `file` waits in working/, as
        `read_all` reads it, and whether its `deliver` remembers the id; None if there
        is none, or if it names another file: it is an earlier message's under the id, whose
        `deliver` (still running in another process) wrote it after a new message's
        `assured` deleted it (a reclaim), and it marked the new one, which a restart, a
        sender's arrival or a sweep then sent before its own `deliver`. One that is no such
        record marks it all the same, its times deciding, remembering nothing it can tell
        (None): only a `deliver` writes a file under that name, and its message, still in
        working/, was never sent (a damaged marker taken for none left it waiting for a
        `deliver` its sender need not send again, dropped after pending_ttl)."""
        path = self.path(*key)
        try:
            raw, status = read_file_status(path)
        except FileNotFoundError:
            return None
        at = status.st_mtime
        try:
            data = json.loads(raw.decode())
        except ValueError:
            return Marked(at, recorded=False), None
        if not isinstance(data, dict) or "source" not in data or "msg_id" not in data:
            return Marked(at, recorded=False), None
        if not self.marks(data.get("file"), file):
            return None
        return _as_marked(data, at), data.get("remember", True) is not False

    def marks(self, named: object, file: str) -> bool:
        """Whether a marker whose record names `named` (a file relative to the root, as
        `mark_all` writes it) marks the message `file`: one that names none (a boxmq before
        2026-11-30's) marks whatever waits under its key."""
        return not isinstance(named, str) or named == os.path.relpath(file, self._root)

    def read_all(
        self,
    ) -> tuple[
        dict[tuple[str, str], Marked],
        set[tuple[str, str]],
        dict[str, float],
        dict[tuple[str, str], object],
    ]:
        """Each marker's key, time and retained version; the keys of those written by a
        deliver that remembers nothing (older markers say nothing of it: remembered); the
        name and time of each that is no such record, which still marks the key it is named
        for (`marked`); and the file each record names (`marks`)."""
        found = {}
        unremembered = set()
        damaged = {}
        files: dict[tuple[str, str], object] = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(self._markers) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    raw, status = read_file_status(entry.path)  # one open for both
                    data = json.loads(raw.decode())
                    key = str(data["source"]), str(data["msg_id"])
                    remember = data.get("remember", True)
                    found[key] = _as_marked(data, status.st_mtime)
                    files[key] = data.get("file")
                except FileNotFoundError:
                    continue  # forgotten right now
                except (ValueError, TypeError, KeyError, AttributeError) as error:
                    # Skipped in silence, a damaged record let a late repeat of its id be
                    # stored again without a word; one holding JSON that is no object (a
                    # list) failed every exactly-once call with a TypeError.
                    log.warning(
                        "exactly once: %s is no delivery record (%r): a message waiting in "
                        "working/ under the id it is named for is sent as delivered, but a "
                        "late repeat of that id is taken for a new message; a sweep deletes "
                        "it once done_ttl is past, or delete it",
                        entry.path,
                        error,
                    )
                    with contextlib.suppress(FileNotFoundError):
                        damaged[entry.name] = entry.stat().st_mtime
                    continue
                _rename_older(entry, marker_name(*key))
                if remember is False:
                    unremembered.add(key)
        return found, unremembered, damaged, files

    def waits(self, marker: str) -> tuple[bool | None, str | None]:
        """Whether the message file `marker` names still waits in working/ (None if it names
        none), and the topic whose retained message a restart that finishes it replaces."""
        try:
            record = json.loads(read_file(marker).decode())
        except FileNotFoundError:
            return False, None  # forgotten meanwhile (a reclaim)
        except ValueError:
            return None, None
        file = record.get("file") if isinstance(record, dict) else None
        if not isinstance(file, str):
            return None, None
        if not os.path.lexists(os.path.join(self._root, file)):
            return False, None
        envelope, reason = decode_lenient(os.path.basename(file))
        superseded = record.get("superseded") is True
        return True, None if reason is not None else replaced_topic(envelope, superseded)


def _marker_record(path: str) -> tuple[dict[str, object], os.stat_result] | None:
    """The record of the marker at `path` and the status of the file read (`claim` keeps
    its time); None if it is gone, unreadable or damaged, or no JSON object: it tells of no
    writer (`marked_since`), and is no record to claim."""
    try:
        data, status = read_file_status(path)
        record = json.loads(data.decode())
    except (OSError, ValueError):
        return None
    return (record, status) if isinstance(record, dict) else None


def _as_marked(record: Mapping[str, object], at: float) -> Marked:
    """A marker's record, written at `at`, and the retained version it holds: a list of
    three ints, or null for no retained file. A boxmq before 2026-11-30 wrote none, and one
    edited into something else is taken as none written: the times decide. `superseded`
    true: the deliver replaced no retained message (a later one was in place)."""
    if record.get("superseded") is True:
        return Marked(at, recorded=True, superseded=True)
    version = record.get("retained", ())
    if version is None:
        return Marked(at, recorded=True)
    if isinstance(version, list) and len(version) == 3 and all(type(n) is int for n in version):
        return Marked(at, recorded=True, version=(version[0], version[1], version[2]))
    return Marked(at, recorded=False)


def _rename_older(entry: os.DirEntry[str], name: str) -> None:
    """Give a delivery record the name this boxmq looks for. One written before fd6c436
    for a source holding a NUL has the name every other source's record has: read back by
    its content, it was never removed by name (a reclaim, a deliver that remembers
    nothing), and at the next restart it passed a new message under its id for one
    delivered, sent without its deliver. Not flushed: a crash undoes it, the next restart
    does it again."""
    if entry.name == name:
        return
    target = os.path.join(os.path.dirname(entry.path), name)
    with contextlib.suppress(FileNotFoundError):
        if os.path.lexists(target):  # written since by this boxmq: the newer of the two
            os.unlink(entry.path)
        else:
            os.rename(entry.path, target)


def delete_quietly(paths: list[str]) -> None:
    """Best effort: a file system failing now may refuse this too (working/'s sweep removes
    a temporary left behind; a message file left there is dropped by `expire`)."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
