"""One live queue's locks as processing/ shows them.

This process's locks are files in processing/ whose names carry its token (or, for a
consumer that outlives its process, no token), and other processes may act on them by id:
`boxmq extend` renames one there (it now ends at the deadline its new name says), `boxmq
ack`, `unlock` or `reject` moves it out (its slot is free again). Each act on our lock's
file looks for it under its new name if the old one is gone, and the sweep of processing/
(`_sweep`, which also releases other processes' dead locks) brings the engine in step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import TypeVar

from boxmq.client.lifecycle import set_aside_claimed
from boxmq.client.sweeps import Pending, release_stale_locks
from boxmq.client.target_names import TargetNames
from boxmq.model import ConsumerId, MessageId
from boxmq.store.dropbox import NotAFile
from boxmq.store.layout import State
from boxmq.store.names import Lock, split_lock

__all__ = ["HeldLocks"]

log = logging.getLogger("boxmq.queue")

# A module global: Enum's metaclass has a __getattr__, so `State.PROCESSING` is a slow lookup.
_PROCESSING = State.PROCESSING
_Done = TypeVar("_Done", bool, str | None)  # what acting on a lock's file gives: falsy, failed


class HeldLocks(TargetNames):
    def _relocated(self, message_id: MessageId, processing: str) -> str | None:
        """Our lock's file under the name an extend by id gave it since we last looked (None:
        it left processing/): known by that name, and ending at its deadline, from now on."""
        moved = self._moved(processing)
        if moved is None:
            return None
        _, lock = split_lock(moved)
        self._locks[message_id] = moved
        if lock is not None:
            self._engine.locked_until(message_id, lock.deadline_ms / 1000)
        return moved

    def _read(self, processing: str, name: str) -> bytes | None:
        """The body of a claimed message; None if it is gone or was no file (a directory or
        a pipe moved into target/: its name came by the watcher, which does not say what it
        is), which goes to error/."""
        try:
            return self._box.read(_PROCESSING, processing)
        except NotAFile:
            set_aside_claimed(self._box, self.name, processing, name)
            return None

    def _reconcile(self, listed: set[str] | None = None) -> None:
        """Our locks as processing/ shows them. One renamed there was extended by id from
        another process (`boxmq extend`): it now ends at the deadline its name says. One whose
        file left it was settled by id from another process (`boxmq ack`, `unlock`,
        `reject`), so its slot is free again (its holder, asking, is told its lock is gone),
        and an unlocked one is offered again. `listed`: the names of processing/, listed
        just before (none: listed here)."""
        if not self._locks:
            return
        missing = self._missing(listed=listed)
        if missing:
            missing = self._missing(missing)  # a rename while the folder was read: look again
        for message_id in missing:
            del self._locks[message_id]
            self._claimed.pop(message_id, None)
            self._adopted.discard(message_id)
            self._let_go(message_id)
            if (lease := self._engine.lock_lost(message_id)) is not None:
                self._unqueue(message_id, lease.holder)
                log.info(
                    "%s: %s left processing/ while %s held it", self.name, message_id, lease.holder
                )
            self._next_scan = 0.0  # unlocked: back in target/, under a name to offer

    def _missing(
        self, among: list[MessageId] | None = None, listed: set[str] | None = None
    ) -> list[MessageId]:
        """Our locks (or those `among` them) whose file is not in processing/ under the name
        we know, as a listing of it (or `listed`) shows; those found under another name of
        ours are known by it from now on."""
        present = (
            {entry.name for entry in self._box.scan(_PROCESSING)} if listed is None else listed
        )
        locks = self._locks
        missing = [m for m in (locks if among is None else among) if locks[m] not in present]
        if not missing:
            return missing
        renamed = self._renamed(present - set(locks.values()))
        gone = []
        for message_id in missing:
            if (found := renamed.get(_lock_key(locks[message_id]))) is None:
                gone.append(message_id)
                continue
            name, lock = found
            locks[message_id] = name
            self._engine.locked_until(message_id, lock.deadline_ms / 1000)
        return gone

    def _renamed(self, names: Iterable[str]) -> dict[tuple[str, ConsumerId], tuple[str, Lock]]:
        """Among `names` in processing/, the locks of this process's token, by name and owner."""
        found: dict[tuple[str, ConsumerId], tuple[str, Lock]] = {}
        for name in names:
            base, lock = split_lock(name)
            if lock is not None and (
                lock.token == self._token or (not lock.token and lock.owner in self._outliving)
            ):
                found[base, lock.owner] = (name, lock)
        return found

    def _moved(self, processing: str) -> str | None:
        """The name our lock's file has in processing/ now that `processing` is gone: another
        process extended it by id since we last looked (None: it left processing/)."""
        found = self._renamed(entry.name for entry in self._box.scan(_PROCESSING))
        moved = found.get(_lock_key(processing))
        return None if moved is None else moved[0]

    def _sweep(self, now: float) -> None:
        """Release the locks in processing/ that ended or whose process died; then ours as
        processing/ shows them. Found empty where it had not changed for a while, and with
        none of ours, it is not read again while it stays so (`_still`)."""
        seen = self._settled(State.PROCESSING)
        later = Pending()
        listed: set[str] = set()
        released, dead = release_stale_locks(
            self._box,
            now=now,
            policy=self._options.policy,
            limits=self._options.limits,
            own_token=self._token,
            own_ids=self._locks,
            pending=later,
            listed=listed,
        )
        # With none of ours, a file there is either released (the folder changes) or due
        # later (`later` learns when): neither, and the folder held none.
        empty = not (self._locks or released or dead or later.holders) and later.due == math.inf
        self._empty_processing = seen if empty else None
        # Ours are among the names listed: the sweep moves none of them (`own_ids`).
        self._reconcile(listed)

    def _unqueue(self, message_id: MessageId, holder: ConsumerId | None) -> None:
        """A lock that ended before its holder received it leaves the holder's inbox: the
        message may come back under the same id, ready or claimed again, and a stale entry
        would then hand it out twice or, taken, make the engine forget it while it waits in
        target/ (then nobody in this process ever got it)."""
        inbox = self._inbox.get(holder) if holder is not None else None
        if inbox and message_id in inbox:
            inbox.remove(message_id)

    def _move_lock(self, processing: str, target: State, new: str) -> str | None:
        """Move our lock's file out of processing/ (or rename it there): the name it took
        (`new`, or in target/ a distinct one if another file has that name), or None."""
        return self._on_lock(
            processing, lambda held: self._box.place(_PROCESSING, held, target, new)
        )

    def _on_lock(self, processing: str, act: Callable[[str], _Done]) -> _Done:
        """`act` on our lock's file, under the name another process may have given it since
        we last looked (an extend by id) if `processing` is gone; falsy if both fail."""
        if done := act(processing):
            return done
        moved = self._moved(processing)
        return done if moved is None else act(moved)

    def _forget(self, message_id: MessageId) -> None:
        self._let_go(message_id)
        self._locks.pop(message_id, None)
        self._claimed.pop(message_id, None)
        self._adopted.discard(message_id)
        self._engine.claim_lost(message_id)


def _lock_key(processing: str) -> tuple[str, ConsumerId]:
    """A lock file's name without the lock, and its owner: what an extend keeps."""
    base, lock = split_lock(processing)
    return base, lock.owner if lock is not None else ConsumerId("")
