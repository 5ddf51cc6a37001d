"""The look for the sessions of brokers of this host that died, and the claim that takes one on.

A running broker's sweep (Lifetimes.adopt_the_dead) looks through the session records each
second, in a worker thread (`Orphans.look`), for those whose counter (followed through the
succession files: succession.py) is a broker of this host that died; the broker then takes
them on, on the loop. A session whose client was connected to a broker that died is taken
on by itself, under the claim on its record (`session_claim`), by a start, a sweep or its
client's CONNECT alike.

Invariants:
- A look that found nothing keeps what it saw (`_Quiet`): while the records folder and the
  brokers it found running are the same, the next finds nothing again, in one stat.
- A look lists the records folder once: the records, and the succession and claim files
  (the hidden entries) no record needs any more, deleted from that one listing.
- A claim is an flock of a file named for the dead broker and the record, which one
  process holds at a time; the claimer reads the record again under it and takes the
  session on only if it still names the dead broker. The file goes when its claimer lets
  go, or, left by a claimer that died holding it, with a look that finds no record naming
  that broker under its name (`_drop_unneeded_claims`): a dead broker is never named again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from boxmq.errors import store_failure
from boxmq.mqtt.session_record import read_record_file, records_folder
from boxmq.mqtt.succession import NONE, Chains
from boxmq.store.layout import SETTLED
from boxmq.store.process import process_alive

__all__ = ["CONNECTED", "Orphans", "session_claim"]

log = logging.getLogger("boxmq.mqtt")

# What flock raises where the file system keeps no flocks (NFS mounted nolock, some FUSE):
# a claim is done without there. Any other errno is a failure of one try.
_NO_FLOCKS: Final = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})


CONNECTED: Final = ""
"""`Orphans.look`'s key for the records of sessions connected to a broker that died."""


@dataclass(frozen=True, slots=True)
class _Quiet:
    """What a look through every record that found nothing to take on saw: the records
    folder (its inode and mtime, which a record written, replaced by a rename or deleted,
    and a succession or claim file made or deleted, all change) and the brokers of this
    host it found running (`Chains.running`). While the folder is the same and they all
    run, a look would find nothing again: each second's look is a stat and a /proc read
    per running broker, where a stat per record took 40 ms over 10,000. What a broker of
    another host writes names it, which counts as long as it may run (Chains.counts): a
    file system that caches a folder's attributes (NFS) may show such writes late, but
    none makes a session this host must take on."""

    folder: tuple[int, int]
    running: frozenset[str]

    def still(self, folder: tuple[int, int]) -> bool:
        """Whether a look that sees the records folder as `folder` would find nothing."""
        return folder == self.folder and all(process_alive(token) for token in self.running)


class Orphans:
    """The look through the session records of `root` for the sessions no broker that runs
    counts, as broker `token` sees them: what the last look read of each record and saw of
    the folder is kept here, for the next. One look at a time (the caller's)."""

    def __init__(self, root: str, token: str) -> None:
        self._root = root
        self._token = token
        # What each record file named when last read, by its name, with its inode and
        # mtime, so that a look reads again only the records written since (a stat each,
        # not a read and a JSON parse).
        self._holders: dict[str, tuple[tuple[int, int], str | None, bool]] = {}
        self._quiet: _Quiet | None = None  # what the last look saw, if it found nothing
        self._unreadable: set[str] = set()  # the records a look could not follow, told

    def look(self) -> dict[str, list[tuple[str, str | None]]]:
        """By the token of a broker of this host that died and whose succession none
        claimed: (path, counter) of each record away whose counter leads to it; under
        CONNECTED, those whose client was connected to a broker that died. Nothing if the
        last look found nothing and nothing changed since (`_Quiet`): one stat. Otherwise
        each record is read only if written since the last look (its inode and mtime), and
        the succession files no record leads through any more, and the claim files no
        record needs, are deleted: one listing of the folder for all."""
        chains = Chains(self._root, self._token)
        seen: dict[str, tuple[tuple[int, int], str | None, bool]] = {}
        found: dict[str, list[tuple[str, str | None]]] = {}
        folder = records_folder(self._root)
        try:
            listed = os.stat(folder)  # before the look: a change during it makes another
        except FileNotFoundError:
            return found  # no persistent session ever on this root
        seeing = (listed.st_ino, listed.st_mtime_ns)
        if self._quiet is not None and self._quiet.still(seeing):
            return found
        self._quiet = None
        try:
            entries = os.scandir(folder)
        except FileNotFoundError:
            return found
        hidden = []  # a record being written, a claim, a succession: dropped if unneeded
        unread: set[str] = set()  # the records this look could not follow
        with entries:
            for entry in entries:
                if entry.name.startswith("."):
                    hidden.append(entry)
                    continue
                try:
                    status = entry.stat()
                    key = (status.st_ino, status.st_mtime_ns)
                    known = self._holders.get(entry.name)
                    if known is not None and known[0] == key:
                        _, counter, connected = known
                    else:
                        record = read_record_file(entry.path)
                        if record is None:
                            continue  # ended now, or no record (said by `boxmq session ls`)
                        counter, connected = record.counter, record.holder is not None
                    dead = chains.resolve(counter, follow=not connected)
                except FileNotFoundError:
                    continue  # its session ended now
                except OSError as error:
                    # EIO of a failing disk, of the record or of a succession file it leads
                    # through: raised, it failed every look, and no session of a dead broker
                    # on the root was taken on while it could not be read.
                    unread.add(entry.name)
                    self._tell_unread(entry, error)
                    continue
                seen[entry.name] = (key, counter, connected)
                if not chains.counts(dead):
                    # One connected to a dead broker is taken on by itself (its claim).
                    found.setdefault(CONNECTED if connected else dead, []).append(
                        (entry.path, counter)
                    )
        self._holders = seen
        self._unreadable &= unread  # one read again is told again if it fails again
        if unread:
            # What a record not read names is not known: its succession files and claims
            # are kept (one gone, its session read later led to its dead broker with no
            # successor, and was taken on beside the broker counting it). And the look is
            # not kept: the next looks at it again, the folder unchanged.
            return found
        young = chains.drop_unneeded(hidden)  # from the same listing: one a look
        young = _drop_unneeded_claims(hidden, seen, chains.started) or young
        # Found some, the next look finds them again: taking them on may fail and change
        # nothing (a failing disk, a claim another broker holds).
        # A records folder changed less than SETTLED before the look began may change again
        # and keep its mtime: such a look is not kept, and the next looks at every record.
        if not found and not young and listed.st_mtime < chains.started - SETTLED:
            self._quiet = _Quiet(seeing, chains.running())
        return found

    def _tell_unread(self, entry: os.DirEntry[str], error: OSError) -> None:
        """A record a look could not follow (it, or a succession file it leads through,
        unreadable), told once while it stays so, not at each look."""
        if entry.name in self._unreadable:
            return
        self._unreadable.add(entry.name)
        log.error(
            "%s: its session is not taken on from a dead server while a file cannot be read "
            "(the others are; tried again at each sweep): %s",
            entry.path,
            store_failure(error),
        )


@contextlib.contextmanager
def session_claim(path: str, dead: str | None) -> Iterator[bool | None]:
    """The claim on the record at `path` counted by `dead`, a broker of this host that
    died (None: by none, a record of an older boxmq): an flock of a file named for both,
    which the kernel lets go of if this process dies too. Yields True when held, False
    if another holds it (never waited for, on the loop), None where the file system
    keeps no flocks; raises OSError if this try failed. Named for a dead broker, whose name
    no record takes again, the file is deleted when let go: no later claimer can hold
    another one while the record still names that broker (and a claimer reads the record
    again under it). One a claimer left when it died holding it goes with a look that
    finds no record naming it (`_drop_unneeded_claims`), or with its next claimer."""
    claim = os.path.join(os.path.dirname(path), _claim_name(os.path.basename(path), dead))
    # Refused (EMFILE, EIO, EACCES), the open raises: this try failed, and the caller
    # tries again (the next sweep; a CONNECT is refused). Taken for a file system with
    # no flocks, a CONNECT took the session on unclaimed, its Will sent by a sweep too.
    fd = os.open(claim, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False  # another survivor of this host is taking it on now
            return
        except OSError as error:
            if error.errno not in _NO_FLOCKS:
                raise  # this try failed (EINTR, ENOMEM), not the file system
            log.debug("%s: no claim: %s", claim, error)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(claim)
            yield None
            return
        try:
            yield True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(claim)
    finally:
        os.close(fd)


_CLAIM: Final = ".dead-"
_DIGEST: Final = 32  # hex digits of a record's name's SHA-256 in its claim's name


def _claim_name(record: str, dead: str | None) -> str:
    """The name of the claim file (`session_claim`) on the record file named `record`
    counted by `dead` (None: by none)."""
    digest = hashlib.sha256(record.encode()).hexdigest()[:_DIGEST]  # a client id's name is long
    return f"{_CLAIM}{dead or NONE}-{digest}"


def _drop_unneeded_claims(
    listed: list[os.DirEntry[str]],
    seen: dict[str, tuple[tuple[int, int], str | None, bool]],
    started: float,
) -> bool:
    """Delete the claim files among the records folder's entries `listed` by a look begun at
    `started` that a claimer left when it died holding one, and no claimer will use again:
    made before that look began, not named for a record it `seen` (by name: its counter),
    and held by no process. Such a claim was made once its dead broker had died, so the look
    read each record after that death, and one that did not name that broker then never
    will (a dead token is never named by a write). Whether one was left for its youth: a
    later look deletes it."""
    claims = [entry for entry in listed if entry.name.startswith(_CLAIM)]
    if not claims:
        return False
    tokens = {entry.name[len(_CLAIM) : -_DIGEST - 1] for entry in claims}
    needed = {
        _claim_name(name, counter)
        for name, (_, counter, _) in seen.items()
        if (counter or NONE) in tokens  # a hash for those only, not every record's
    }
    before = started - SETTLED  # as a succession file: its mtime from a lagging clock
    young = False
    for entry in claims:
        if entry.name in needed:
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue  # made by hand: no claimer's
            if entry.stat(follow_symlinks=False).st_mtime >= before:
                young = True
                continue
            _drop_claim(entry.path)
        except OSError as error:  # gone already (its claimer let go), or refused: left
            log.debug("%s: claim file left: %s", entry.path, error)
    return young


def _drop_claim(path: str) -> None:
    """Delete the claim file at `path` unless a process holds it (a claimer at work: it
    deletes it when done). One that opened it just before, and holds it once deleted, reads
    the record again under it, as every claimer does, and finds it moved on."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # never made again here
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        except OSError as error:
            if error.errno not in _NO_FLOCKS:
                raise
        os.unlink(path)
    finally:
        os.close(fd)
