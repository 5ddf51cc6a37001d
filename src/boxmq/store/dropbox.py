"""One dropbox: one file per message, and every change of state one atomic rename.

A producer writes the body in working/ (boxmq's own puts: in a spare file only their process
sees, store/spares.py) and renames it into target/ (through the committer, so the fsync
policy holds). A consumer claims by renaming target/ → processing/, adding its lock
to the name; two claims of one file can never both succeed, because only one rename of a path
can. Every other transition is a rename of the file the caller holds; a rename that finds no
file means somebody else moved it first, and is reported as False, never raised.
The body on disk is exactly the payload: metadata lives in the name (store/names.py).
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import os
import stat
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from boxmq.errors import QueueNotFound, naming
from boxmq.store.commit import Committer, Move
from boxmq.store.layout import State, no_dropbox
from boxmq.store.names import Lock, distinct_name, locked_name, split_lock
from boxmq.store.spares import Spares, remove_file, rename_noreplace, write_new
from boxmq.store.temporaries import removed_on_failure, temporary_in

__all__ = [
    "Dropbox",
    "Entry",
    "NotAFile",
    "folder_made_for",
    "move_apart",
    "moved_into_made_folder",
]

# Read per claim: `State.PROCESSING` on Python 3.11 goes through Enum's metaclass (~860
# instructions), a module global is one cached load.
_PROCESSING = State.PROCESSING
_READ = 1 << 16  # below malloc's mmap threshold: a small body costs no mmap/munmap
# A message is a regular file. Not followed, a symbolic link cannot lend a file outside the
# root (readable by the broker's user) to a consumer; not waited on, a named pipe cannot
# stall the reader.
_READ_FLAGS = (
    os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK
)
# Makings of a dropbox that deletes may cut short in a row before it gives up (as
# records._TRIES: 100 ran out in a test whose thread deletes the queue in a tight loop).
_MAKING_TRIES = 1000
_NOT_A_FILE = frozenset({errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EAGAIN})


class NotAFile(OSError):
    """What a message's name stands for is not a regular file (a directory, a symbolic link,
    a named pipe, a socket): no message, and never one; set aside, not retried."""


def move_apart(source: str, folder: str, name: str) -> str | None:
    """Rename the file `source` to `folder` + `name`, or, if a file there has that name, to a
    `distinct_name` (never over it); the name it took, or None if `source` was gone."""
    chosen = name
    for number in itertools.count(2):
        try:
            rename_noreplace(source, folder + chosen)
        except FileNotFoundError:
            return None
        except FileExistsError:
            chosen = distinct_name(name, number)
            continue
        return chosen
    raise AssertionError("unreachable: the names count up until one is free")


def lock_apart(source: str, folder: str, name: str) -> str | None:
    """Rename the file `source` to processing/ `folder` + `name` (a locked name), never over
    another lock's file: where one has that name (a producer sent one name twice, and the
    same holder claimed both in one millisecond, both without a process token), the lock's
    deadline moves one millisecond later until the name is free. The name it took, or None
    if `source` was gone."""
    chosen = name
    while True:
        try:
            rename_noreplace(source, folder + chosen)
        except FileNotFoundError:
            return None
        except FileExistsError:
            if chosen == name and source == folder + name:
                return name  # renamed to itself: an extend to the same millisecond
            chosen = _a_millisecond_later(chosen)
            continue
        return chosen


def folder_made_for(source: str, folder: str) -> bool:
    """A move of `source` into the state folder `folder` found no file: if it is there and it
    is `folder` that is missing (a dropbox made by hand, or by DropboxMQ: target/ alone makes a
    queue; or a state folder deleted by hand), that folder is made, and True says to move again.

    Made where a message needs it, not whenever the dropbox is opened: a sweep of `boxmq
    serve` that completed every dropbox made the folders an `rm -rf` of a queue had just
    deleted, and the rm failed (Directory not empty). One folder, never its parents: a
    dropbox deleted whole is not made again."""
    if not os.path.lexists(source):
        return False
    try:
        os.mkdir(folder)
    except FileExistsError:
        pass
    except OSError:  # the dropbox is gone, or the root takes no changes: no move
        return False
    return True


def moved_into_made_folder(
    move: Callable[[str, str, str], str | None], source: str, folder: str, name: str
) -> str | None:
    """After `move(source, folder, name)` found no file (`folder` ends with a separator):
    the move again once `folder_made_for` made a missing folder, else None. Called only then,
    so that a move that succeeds (one per claim and per ack) pays nothing for it."""
    if not folder_made_for(source, folder[:-1]):
        return None
    return move(source, folder, name)


def _a_millisecond_later(locked: str) -> str:
    base, lock = split_lock(locked)
    assert lock is not None, f"{locked!r} is not a locked name"
    return locked_name(base, Lock(lock.owner, lock.deadline_ms + 1, lock.token))


def _not_a_file(error: OSError, path: str) -> OSError:
    """`error` of opening or reading `path` as a NotAFile if it says that there is no file
    there (a symbolic link not followed, a socket, a directory, a pipe that has a writer)."""
    if error.errno in _NOT_A_FILE:
        return NotAFile(error.errno, f"not a regular file ({error.strerror})", path)
    return error


@dataclass(frozen=True, slots=True)
class Entry:
    """A file as a directory scan saw it."""

    name: str
    path: str


class Dropbox:
    """The folders of one queue (or subscription) under a root."""

    def __init__(
        self,
        path: str,
        committer: Committer,
        *,
        create: bool = True,
        spares: Spares | None = None,
        complete: bool = True,
    ) -> None:
        """`create`: make the folders; else QueueNotFound if there is no dropbox at `path`,
        and, with `complete`, the state folders it lacks are made (`_complete`). A reader that
        only counts (`boxmq ls`) passes complete=False: making a folder under an `rm -rf` of
        the dropbox made the rm fail (Directory not empty) and left the dropbox behind."""
        self.path = path
        self._committer = committer
        self._spares = spares
        self._reached: bool | None = None  # whether spares' own files can be renamed here
        self._dirs = {state: os.path.join(path, state.value) for state in State}
        # state -> "<dir>/": names never hold a '/', so a concatenation is the join, for less.
        self._prefixes = {state: directory + os.sep for state, directory in self._dirs.items()}
        # The four a message passes through, as attributes: `State.X` on Python 3.11 goes
        # through Enum's metaclass (~860 instructions), a put's and an ack's path reads them.
        self._working = self._prefixes[State.WORKING]
        self._target = self._prefixes[State.TARGET]
        self._processing = self._prefixes[State.PROCESSING]
        self._processed = self._prefixes[State.PROCESSED]
        if create:
            self._make()
        elif no_dropbox(path):
            raise QueueNotFound(f"no queue at {path}")
        elif complete:
            self._complete()

    def _make(self) -> None:
        """Make the folder and its state folders. A delete that takes the folder away
        meanwhile (layout.remove_folder renames it) cuts the making short: it starts again,
        as it would have after the delete, until a making is not cut short."""
        for _ in range(_MAKING_TRIES):
            try:
                self._make_folders()
                return
            except FileNotFoundError:
                continue
        raise FileNotFoundError(
            errno.ENOENT, f"made {_MAKING_TRIES} times and deleted each time", self.path
        )

    def _make_folders(self) -> None:
        """In State's order, working/ before target/: a making cut short leaves no folder
        that layout.target_moved_aside takes for a target/ moved aside (layout.half_made).
        Below a folder known to be there, by mkdir, not makedirs: where a delete had taken
        the folder away, makedirs made it again around the state folders left to make
        (processing/ and the rest, without target/: a target/ moved aside to every put, and
        no queue to the next delete). FileNotFoundError when the folder went meanwhile."""
        there = False  # whether the dropbox's folder itself is known to be there
        for directory in self._dirs.values():
            # One look where the folder is there (a subscription's, made with its
            # record): makedirs looked at the parent, tried a mkdir and looked again.
            if os.path.isdir(directory):
                there = True
            elif there:
                try:
                    os.mkdir(directory)
                except FileExistsError:  # made by another maker, else no folder: as makedirs
                    if not os.path.isdir(directory):
                        raise
            else:
                os.makedirs(directory, exist_ok=True)
                there = True

    def _complete(self) -> None:
        """Make the state folders a dropbox made by hand (or by DropboxMQ) may lack: target/
        alone makes a queue, and no_dropbox() has just found it a folder, so it is not looked
        at again. Where none can be made (a read-only root), scan() reads a missing folder as
        empty."""
        for state, directory in self._dirs.items():
            if state is not State.TARGET and not os.path.isdir(directory):
                with contextlib.suppress(OSError):
                    os.makedirs(directory, exist_ok=True)

    def dir(self, state: State) -> str:
        return self._dirs[state]

    # -- settings kept beside the state folders ----------------------------------------------

    def setting(self, name: str) -> str | None:
        """The text of `<dropbox>/.<name>` (e.g. `owner`), or None if it was never set. Names
        starting with '.' are no state folder, so DropboxMQ and the scans pass them by."""
        try:
            with open(os.path.join(self.path, "." + name), encoding="utf-8") as src:
                return src.read()
        except FileNotFoundError:
            return None

    def set_setting(self, name: str, value: str) -> None:
        """Write `<dropbox>/.<name>` whole (a rename, through the committer's fsync policy)."""
        temporary = temporary_in(self.path)
        with removed_on_failure(temporary):
            with open(temporary, "w", encoding="utf-8") as out:
                out.write(value)
            self._committer.commit([Move(temporary, os.path.join(self.path, "." + name))])

    def file(self, state: State, name: str) -> str:
        return self._prefixes[state] + name

    # -- producing ---------------------------------------------------------------------------

    def write(self, name: str, body: bytes, *, check: bool = True) -> Move:
        """Write `body` as working/<name>, or into one of the spares' own files (which only
        this process sees, as working/ would: store/spares.py); the returned move into
        target/ sends it.

        check=False: a spare kept open is written without looking whether its file is still
        there (Spares.write); the caller sends the move at once and, if it fails because the
        file is gone (`lost_spare`), writes again with check=True.

        Raises FileExistsError if working/<name> exists (the caller picks another id), and
        Closed, writing nothing, once the committer that would send it is closed.
        """
        return Move(self.write_file(name, body, check=check), self._target + name)

    def write_file(self, name: str, body: bytes, *, check: bool = True) -> str:
        """`write`, without the Move: the path written, which `send_file(path, name)` sends
        (one put, the common one, makes no Move under fsync never or interval)."""
        if self._committer.closed:
            raise self._committer.refused()
        if self._spares is not None:
            if self._reached is None:
                self._reached = self._spares.reaches(self.path)
            if self._reached:
                try:
                    own = self._spares.write(body, check=check)
                except OSError as error:
                    raise naming(error, self._working + name) from error
                if own is not None:
                    return own
        path = self._working + name
        write_new(path, body, self._spares)
        return path

    def write_apart(self, name: str, body: bytes) -> Move:
        """`write`, under a `distinct_name` if working/<name> is taken: for a name made from
        a message's own (a retained message's copy, the same in every subscription), which a
        process that died between writing it and sending it left in working/ (the sweeps
        delete it after `abandon_after`), or which another process writes at the same time."""
        chosen = name
        for number in itertools.count(2):
            try:
                return self.write(chosen, body)
            except FileExistsError:
                chosen = distinct_name(name, number)
        raise AssertionError("unreachable: the names count up until one is free")

    def lost_spare(self, path: str) -> bool:
        """Whether the file `path`, written with check=False, failed to send because the spare
        it was written into is gone (.spare/ deleted meanwhile): write the body again, with
        check."""
        return self._spares is not None and self._spares.lost(path)

    def send(self, moves: Sequence[Move]) -> None:
        """Commit written files (working/ → target/) as the committer's fsync policy says."""
        self._committer.commit(moves)

    def send_file(self, path: str, name: str) -> None:
        """`send([Move(path, target/<name>)])` for one file `write_file` wrote."""
        self._committer.commit_one(path, self._target + name)

    # -- consuming ---------------------------------------------------------------------------

    def scan(self, state: State, strays: list[str] | None = None) -> Generator[Entry, None, None]:
        """The files in one state folder, in no particular order; none if it is missing.
        The names of what is there but not a regular file (a directory, a symbolic link, a
        named pipe) are added to `strays`, when given, as the scan goes. The folder stays
        open until the listing ends or is closed: a reader that may stop early reads it
        `with contextlib.closing(box.scan(...))`, or a runtime without reference counting
        keeps one descriptor open per early stop."""
        try:
            entries = os.scandir(self._dirs[state])
        except FileNotFoundError:
            return  # a state folder nobody made yet holds nothing
        with entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    yield Entry(entry.name, entry.path)
                elif strays is not None:
                    strays.append(entry.name)

    def names(self, state: State) -> list[str]:
        """Every name in one state folder, files or not (`kind` tells), in one listing made
        in C: what a `get` reads of target/ when it knows most names already (30 ms at 100,000
        names, where `typed_names` takes 47)."""
        try:
            return os.listdir(self._dirs[state])
        except FileNotFoundError:
            return []  # a state folder nobody made yet holds nothing

    def kind(self, state: State, name: str) -> bool | None:
        """Whether state/<name> is a regular file (False: a directory, a symbolic link, a
        named pipe, as `scan` tells strays); None if it is gone."""
        try:
            return stat.S_ISREG(os.lstat(self._prefixes[state] + name).st_mode)
        except FileNotFoundError:
            return None

    def typed_names(self, state: State) -> tuple[list[str], set[str]]:
        """Every name in one state folder, files or not, and those of them that are no regular
        file, from one listing's file types (no stat per name where the file system gives
        them, as ext4, xfs and tmpfs do; `kind` tells one name, at 2 us where the types cost
        0.2 us a name more than `names`). What a `get` reads of target/ when many names are
        new to it: a first one on a deep queue listed it twice, and made an `Entry` of each
        file only to drop it (more than half of the 100 ms that took at 100,000 names)."""
        names: list[str] = []
        odd: set[str] = set()
        try:
            entries = os.scandir(self._dirs[state])
        except FileNotFoundError:
            return names, odd  # a state folder nobody made yet holds nothing
        with entries:
            for entry in entries:
                names.append(entry.name)
                if not entry.is_file(follow_symlinks=False):
                    odd.add(entry.name)
        return names, odd

    def count(self, state: State, *, strays: bool = False) -> int:
        """The files in one state folder; with `strays`, what is there but not a regular file
        too (in error/: a directory or a pipe set aside from target/ is a dead letter all the
        same, for whoever watches their count)."""
        # Counted from the listing's file types, with no `Entry` of each file as `scan`
        # makes: about half of what `boxmq ls` cost on 200,000 messages.
        try:
            entries = os.scandir(self._dirs[state])
        except FileNotFoundError:
            return 0  # a state folder nobody made yet holds nothing
        with entries:
            if strays:
                return sum(1 for _ in entries)
            return sum(entry.is_file(follow_symlinks=False) for entry in entries)

    def move(self, source: State, name: str, target: State, new_name: str | None = None) -> bool:
        """`place`: True if the file was moved, False if it was gone. A caller that keeps
        the name of a lock it takes uses `place`, which says the name taken."""
        return self.place(source, name, target, new_name) is not None

    def place(
        self, source: State, name: str, target: State, new_name: str | None = None
    ) -> str | None:
        """Rename source/<name> to target/<new_name or name>, and return the name it took; None
        if the file was gone.

        Never over another file: a producer may send a name again once its first message has
        left target/, and that one may wait in error/ (or expired/, processed/) under the same
        name, or come back to target/ by an unlock. The message then takes a `distinct_name`.
        Into processing/ (`new_name` a locked name) the lock's deadline moves instead
        (`lock_apart`): the holder learns it from the name returned.
        """
        wanted = new_name or name
        prefixes = self._prefixes
        move = lock_apart if target is _PROCESSING else move_apart
        placed = move(prefixes[source] + name, prefixes[target], wanted)
        if placed is None:
            return moved_into_made_folder(move, prefixes[source] + name, prefixes[target], wanted)
        return placed

    def claim(self, name: str, locked: str) -> str | None:
        """`place(State.TARGET, name, State.PROCESSING, locked)` in one call (one per
        message): the name the lock took in processing/, or None if the file was gone.
        A processing/ deleted by hand is made again, as `place` does: a consumer took every
        claim for lost to another process, and the messages stayed in target/."""
        source = self._target + name
        placed = lock_apart(source, self._processing, locked)
        if placed is None:
            return moved_into_made_folder(lock_apart, source, self._processing, locked)
        return placed

    def finish(self, processing: str, name: str, *, keep: bool) -> bool:
        """An acknowledged message leaves processing/<processing>: to processed/<name> (its
        name without the lock) when `keep`, else deleted, its file a spare for a later put
        when the root keeps spares (store/spares.py). False if it was gone."""
        if keep:  # `move`'s work, without its two Enum lookups and two calls (one per ack)
            source = self._processing + processing
            if move_apart(source, self._processed, name) is not None:
                return True
            # processed/ deleted by hand (to clear what was consumed): made again, as `move`
            # does, or every ack said the lock was taken away and the message was redelivered.
            return moved_into_made_folder(move_apart, source, self._processed, name) is not None
        if self._spares is None:
            return remove_file(self._processing + processing)
        return self._spares.give(self._processing + processing)

    def remove(self, state: State, name: str) -> bool:
        return remove_file(self._prefixes[state] + name)

    def close_gone(self) -> None:
        """After deletes (a purge): close the files this process's puts keep open for
        their spares whose messages are gone, so that their blocks are freed now
        (Spares.close_gone)."""
        if self._spares is not None:
            self._spares.close_gone()

    def read(self, state: State, name: str) -> bytes | None:
        """The body of state/<name>, or None if it is gone; NotAFile if it is no file."""
        path = self._prefixes[state] + name
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise _not_a_file(error, path) from None
        try:
            # A file past working/ never grows, so a short read is the end: one read for a
            # small body instead of a second one that only finds EOF.
            try:
                chunk = os.read(fd, _READ)
            except OSError as error:
                raise _not_a_file(error, path) from None
            if 0 < len(chunk) < _READ:
                return chunk
            # Empty, as a pipe without a writer reads, or long, as a device that never ends.
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotAFile(errno.EINVAL, "not a regular file", path)
            if not chunk:
                return chunk
            # A big body: read whole from the start into one buffer sized by fstat (FileIO's
            # readall), not in chunks joined at the end, which held it twice in memory.
            os.lseek(fd, 0, os.SEEK_SET)
            with io.FileIO(fd, "rb", closefd=False) as file:
                return file.readall()
        finally:
            os.close(fd)

    def age(self, state: State, name: str, now: float) -> float | None:
        """Seconds since the file last changed state (its ctime: a rename sets it)."""
        try:
            return now - os.stat(self.file(state, name)).st_ctime
        except FileNotFoundError:
            return None
