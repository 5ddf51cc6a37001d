"""Who counts a session away: its record's counter, followed through succession files.

A broker that takes on the sessions a dead broker of its host counted (at its start, or by
its sweep) writes no record: it claims that broker's succession, one file
`<sessions folder>/.succeeded-<dead token>` holding its own token, made with one link
(`claim`), so that one broker wins it. A record's effective counter (`Chains.resolve`) is its
`counter` (SessionRecord.counter; `none` for a record naming none, an older boxmq's),
followed through these files while that one is dead: a broker that runs (or may: of another
host) counts it; a dead one with no successor is counted by none, and the first broker to
claim its succession counts every session that resolves to it. Taking on 1,000 sessions
wrote 1,000 records (1.5-2.8 s of a start); it makes one file per dead broker.

Invariants:
- A succession file is made once and never changed: a link fails on one that exists
  (EEXIST), and the loser reads the winner's. A token is dead before its file is made, and a
  dead token is never named by a record written after: a record's chain only grows at its end.
- A succession file is deleted only when no record's chain reaches it (`drop_unneeded`), as
  read by a look at every record that began after the file was made: the records naming a
  token dead before that look started were all seen by it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from typing import Final

from boxmq.errors import naming
from boxmq.mqtt.session_record import records_folder
from boxmq.store.layout import SETTLED
from boxmq.store.process import process_alive

__all__ = ["NONE", "Chains", "claim", "successor"]

log = logging.getLogger("boxmq.mqtt")

NONE: Final = "none"
"""The counter of a record that names none (written by a boxmq before 2026-11-30)."""

_PREFIX: Final = ".succeeded-"


def _path(root: str, token: str) -> str:
    return os.path.join(records_folder(root), _PREFIX + token)


def successor(root: str, token: str) -> str | None:
    """The token of the broker that claimed `token`'s succession; None if none did."""
    try:
        with open(_path(root, token), encoding="utf-8") as file:
            return file.read().strip() or None
    except FileNotFoundError:
        return None


def claim(root: str, dead: str, me: str) -> str:
    """`dead`'s succession, claimed for `me`: its file made with one link, which fails if
    another broker made it first. Returns the successor it names, `me` if this one won.
    Raises OSError if it cannot be made (a failing disk): nothing is taken on then."""
    path = _path(root, dead)
    temporary = f"{path}.{me}.tmp"  # deleted by `drop_unneeded` if this process dies here
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(me)
            file.flush()
            os.fsync(file.fileno())  # a successor no power cut loses: one per dead broker
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if error.filename is None:  # a full disk refused the flush: the log says where
            raise naming(error, temporary) from error
        raise
    try:
        os.link(temporary, path)
    except FileExistsError:
        # Deleted since, it names none: no chain reached it, so the records read as
        # reaching it changed since; left alone (a next look resolves them again).
        return successor(root, dead) or dead
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return me


class Chains:
    """The effective counters of the records of `root`, as broker `me` (None: a command,
    which is none) sees them in one look: each token's life and successor looked up once."""

    def __init__(self, root: str, me: str | None) -> None:
        self._root = root
        self._me = me
        self._alive: dict[str, bool | None] = {}
        self._successors: dict[str, str | None] = {}
        self.reached: set[str] = set()  # every token a chain passed through, or ended at
        self.started = time.time()

    def alive(self, token: str) -> bool | None:
        """Whether the broker `token` runs: None if it cannot be told (another host's)."""
        if token == NONE:
            return False
        if token not in self._alive:
            self._alive[token] = process_alive(token)
        return self._alive[token]

    def counts(self, token: str) -> bool:
        """Whether `token` is a broker that counts what leads to it: `me`, or one that runs
        (or may: of another host)."""
        return token == self._me or self.alive(token) is not False

    def resolve(self, counter: str | None, *, follow: bool = True) -> str:
        """The broker counting a session whose record names `counter`: `me`, another that
        runs (or may run), or a dead one whose succession none claimed (NONE included).
        Not `follow`ed for a session whose client was connected to `counter`: its record
        is written by the one taking it on (the connection closed), one by one, under a
        claim of each (Lifetimes._claim_and_take)."""
        token = counter or NONE
        if not follow:
            self.reached.add(token)
            return token
        followed: set[str] = set()
        while True:
            self.reached.add(token)
            if self.counts(token):
                return token
            if token not in self._successors:
                self._successors[token] = successor(self._root, token)
            following = self._successors[token]
            if following is None or token in followed:
                return token  # (a loop cannot be made: a successor ran when it claimed)
            followed.add(token)
            token = following

    def won(self, dead: str, me: str) -> None:
        """`me` claimed `dead`'s succession during this look."""
        self._successors[dead] = me
        self.reached.add(me)

    def running(self) -> frozenset[str]:
        """The tokens this look found running (`alive`), `me` aside: only their deaths can
        change what it found while no record and no succession file changes."""
        return frozenset(token for token, alive in self._alive.items() if alive)

    def drop_unneeded(self, listed: Iterable[os.DirEntry[str]] | None = None) -> bool:
        """Delete the succession files no chain of this look reached (its look at every
        record done), those made before it began (and the temporaries a death left), among
        the entries of the records folder `listed` by that look (None: listed here).
        Whether one no chain reached was left for its youth: a later look deletes it."""
        if listed is None:
            with (
                contextlib.suppress(FileNotFoundError),
                os.scandir(records_folder(self._root)) as entries,
            ):
                return self._drop_unneeded(entries)
            return False
        return self._drop_unneeded(listed)

    def _drop_unneeded(self, listed: Iterable[os.DirEntry[str]]) -> bool:
        # A file made SETTLED before a look began is deleted only if that look found no chain
        # reaching it: its mtime is from a clock that may lag time.time() by a tick.
        before = self.started - SETTLED
        young = False
        for entry in listed:
            name = entry.name
            if not name.startswith(_PREFIX) or name[len(_PREFIX) :] in self.reached:
                continue
            with contextlib.suppress(FileNotFoundError):
                if entry.stat().st_mtime < before:
                    os.unlink(entry.path)
                else:
                    young = True
        return young
