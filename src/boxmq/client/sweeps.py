"""Housekeeping of one dropbox: what no consumer in this process would otherwise notice.

- locks in processing/ whose deadline passed, or whose process died (DESIGN.md §4): back to
  target/ with the delivery count raised, or to error/ once max deliveries is reached;
- messages in target/ whose expiration passed: to expired/;
- files left in working/ by a producer that never committed them: deleted by age, never sent
  (an exactly-once message waiting there for its `deliver` is the intake's: deleted only
  after `pending_ttl`, as its own sweep does, or a sender's message acknowledged as received
  was lost an hour in, whatever `pending_ttl` said), and never while marked delivered: its
  `deliver` came, and a process killed before it moved the message left it to a restart;
- processed/ files older than the retention: deleted; expired/ files older than theirs (none by
  default): deleted too.

Every move is one rename of the file as it was seen; if another process moved it first the
rename finds nothing and the sweep goes on. Any number of processes may sweep one root at once.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Container
from contextlib import closing
from dataclasses import dataclass, field
from typing import Final

from boxmq.client.lifecycle import dead_name, envelope_of, released_or_dead, shown, unusable
from boxmq.core import QueuePolicy
from boxmq.core.durations import spelled
from boxmq.model import SOURCE, SOURCE_MESSAGE_ID, ConsumerId, Envelope, MessageId, timestamp_of
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import State
from boxmq.store.names import decode_lenient, split_lock
from boxmq.store.process import process_alive
from boxmq.store.topics import marker_name

__all__ = [
    "EXPIRY_NAMES_PER_SECOND",
    "Pending",
    "SweepLimits",
    "SweepReport",
    "release_locks_of",
    "release_stale_locks",
    "sweep",
]

log = logging.getLogger("boxmq.sweep")

# The names of a target/ that one second between two looks for expirations pays for: a
# folder of N names is looked through again N / this seconds after the last look (at each
# sweep under 20,000, every 20 s for 400,000: a name costs about 1 us to read and check).
EXPIRY_NAMES_PER_SECOND: Final = 20_000

_TOLD_EACH: Final = 100  # the releases of one sweep of a folder logged one by one at their level


@dataclass(frozen=True, slots=True)
class SweepLimits:
    foreign_lock_timeout: float = (
        300.0  # a processing/ file with no boxmq lock (a DropboxMQ consumer)
    )
    working_ttl: float = 3600.0  # an uncommitted file older than this is abandoned
    pending_ttl: float = 3600.0  # an exactly-once message's in working/ (the intake's)
    processed_retention: float | None = 86400.0  # None = keep acknowledged messages forever
    # How long an expired message stays in expired/ (for a look, or a requeue) once it
    # expired; None = forever. A persistent MQTT session away for weeks gets nothing from its
    # expired telemetry, which filled the disk: an operator sets how long it may stay.
    expired_retention: float | None = None


@dataclass(frozen=True, slots=True)
class SweepReport:
    released: int = 0
    dead: int = 0
    expired: int = 0
    abandoned: int = 0
    purged: int = 0
    expired_purged: int = 0  # expired/ files past expired_retention deleted
    looked: int = 0  # the names of target/ read for expirations (0: not looked through)
    # What the sweep left that will need one later: the earliest time something there is due
    # (a lock's deadline, an expiry, a working/ file's age), inf for nothing; and the tokens
    # of the other processes of this host whose locks it holds, due at their death.
    due: float = math.inf
    holders: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return any(
            (
                self.released,
                self.dead,
                self.expired,
                self.abandoned,
                self.purged,
                self.expired_purged,
            )
        )


@dataclass(slots=True)
class Pending:
    """What a sweep of one dropbox saw that will need a sweep later (SweepReport.due)."""

    due: float = math.inf
    holders: set[str] = field(default_factory=set)

    def at(self, when: float) -> None:
        self.due = min(self.due, when)


def release_stale_locks(
    box: Dropbox,
    *,
    now: float,
    policy: QueuePolicy,
    limits: SweepLimits,
    own_token: str = "",
    own_ids: Container[MessageId] = (),
    pending: Pending | None = None,
    listed: set[str] | None = None,
) -> tuple[int, int]:
    """Release timed-out and orphaned locks; (released, dead-lettered). Skips our live leases.
    `pending`, when given, learns when the locks left are due; `listed`, the names the one
    listing of processing/ found (a live queue finds its own locks among them: one listing
    a sweep, not two)."""
    released = dead = 0
    alive: dict[str, bool | None] = {}  # token -> its process lives: /proc read once per token
    if own_token:
        # This process: half of a live queue's sweep was the read of its own /proc entry.
        alive[own_token] = True
    now_ms = now * 1000
    tell = _Teller()
    later = pending or Pending()
    with closing(box.scan(State.PROCESSING)) as entries:
        for entry in entries:
            if listed is not None:
                listed.add(entry.name)
            name, lock = split_lock(entry.name)
            if (
                lock is not None
                and lock.deadline_ms > now_ms
                and (not lock.token or _alive(alive, lock.token) is not False)
            ):
                # Held, in time, by a live process (or by none): most locks, left at every sweep
                # without decoding their names (100,000 locks of a consumer took a second there).
                later.at(lock.deadline_ms / 1000)
                if lock.token and lock.token != own_token:
                    later.holders.add(lock.token)  # due at its death, as at its deadline
                continue
            envelope = envelope_of(name)
            if lock is not None and lock.token == own_token and envelope.message_id in own_ids:
                continue  # ours, and our engine's timer watches it
            if lock is None:
                age = box.age(State.PROCESSING, entry.name, now)
                if age is None:
                    continue
                if age < limits.foreign_lock_timeout:
                    later.at(now + limits.foreign_lock_timeout - age)
                    continue
                why, holder = "lock without owner timed out", None
            elif lock.deadline_ms <= now_ms:
                why, holder = f"lock of {lock.owner!r} timed out", lock.owner
            else:  # its process died (skipped above otherwise)
                # Gone, not declining it: nobody is passed over (effects.Release.passed_over).
                why, holder = f"process of {lock.owner!r} is gone", None
            if (unfit := unusable(name)) is not None:
                # Not UTF-8 (or too long to lock again): no name can carry its delivery count, and
                # no consumer could take it. Kept as it is, where people look.
                if box.move(State.PROCESSING, entry.name, State.ERROR, name):
                    dead += 1
                    tell(
                        logging.ERROR, "%s: %s; its name is %s: to error/", shown(name), why, unfit
                    )
                continue
            count = envelope.delivery_count + 1
            new, lost = released_or_dead(
                name,
                delivery_count=count,
                max_deliveries=policy.max_deliveries,
                holder=holder,
                not_before=0.0,
            )
            if lost is not None:
                owner = lock.owner if lock is not None else None  # gone or not, it held it last
                error_name = dead_name(name, lost, holder=owner, delivery_count=count)
                if box.move(State.PROCESSING, entry.name, State.ERROR, error_name):
                    dead += 1
                    # As an unlock says it: a name too long for one more count (a script wrote
                    # it, or the count passed an INT's) is no max_deliveries reached.
                    said = (
                        f"delivered {count} times"
                        if lost == "max-deliveries"
                        else "its name cannot carry one more delivery"
                    )
                    tell(logging.WARNING, "%s: %s; %s: to error/", envelope.message_id, why, said)
                continue
            assert new is not None  # released_or_dead gives the one or the other
            if box.move(State.PROCESSING, entry.name, State.TARGET, new):
                released += 1
                if envelope.expired(now):  # given to nobody: the next look at target/ moves it
                    tell(
                        logging.INFO,
                        "%s: %s after it expired: not redelivered, to expired/ at the next look",
                        envelope.message_id,
                        why,
                    )
                else:
                    tell(
                        logging.INFO,
                        "%s: %s; redelivering (delivery %d)",
                        envelope.message_id,
                        why,
                        count + 1,
                    )
    tell.summary(box.path)
    return released, dead


class _Teller:
    """Tells the releases of one sweep of a folder one by one, the first `_TOLD_EACH` of
    them at their level and the rest at DEBUG (`-v`), counted in one line at the end:
    100,000 locks that timed out at once wrote 100,000 lines to the log in one sweep."""

    def __init__(self) -> None:
        self.told = 0
        self.worst = logging.DEBUG  # the highest level among those not told at their own

    def __call__(self, level: int, message: str, *args: object) -> None:
        self.told += 1
        if self.told > _TOLD_EACH:
            self.worst = max(self.worst, level)
            level = logging.DEBUG
        log.log(level, message, *args)

    def summary(self, folder: str) -> None:
        if self.told > _TOLD_EACH:
            log.log(
                self.worst,
                "%s: %d more lock(s) released or sent to error/ in this sweep, each logged "
                "at DEBUG (-v)",
                folder,
                self.told - _TOLD_EACH,
            )


def release_locks_of(box: Dropbox, holder: ConsumerId) -> int:
    """`holder` left for good while no process held its locks (a persistent MQTT session's
    share-group membership, ended by a server that had not resumed it): its locks that name
    no process go back to target/, each a delivery ended without an ack, for the others
    (those of a live process are that process's to settle). How many went back."""
    released = 0
    with closing(box.scan(State.PROCESSING)) as entries:
        for entry in entries:
            name, lock = split_lock(entry.name)
            if lock is None or lock.owner != holder or lock.token or unusable(name) is not None:
                continue
            envelope = envelope_of(name)
            count = envelope.delivery_count + 1
            new, lost = released_or_dead(
                name, delivery_count=count, max_deliveries=None, holder=holder, not_before=0.0
            )
            if lost is not None:  # no room for its count: as a release by the engine does, and says
                dead = dead_name(name, lost, holder=holder)
                if box.move(State.PROCESSING, entry.name, State.ERROR, dead):
                    log.warning("%s: %s to error/ (%s)", box.path, envelope.message_id, lost)
                continue
            assert new is not None
            released += box.move(State.PROCESSING, entry.name, State.TARGET, new)
    if released:
        log.info("%s: %d message(s) %s held went back to the others", box.path, released, holder)
    return released


def _alive(known: dict[str, bool | None], token: str) -> bool | None:
    if token not in known:
        known[token] = process_alive(token)
    return known[token]


def expire_ready(box: Dropbox, *, now: float, pending: Pending) -> tuple[int, int]:
    """Move the ready messages whose expiration passed to expired/: (how many, how many
    names target/ held). `pending` learns when the first of those left expires."""
    expired = looked = 0
    now_ms = now * 1000
    with closing(box.scan(State.TARGET)) as entries:
        for entry in entries:
            looked += 1
            ahead = _ahead_ms(entry.name, now_ms)
            if ahead is not None:  # most names: no expiration, or one to come, seen undecoded
                if ahead != math.inf:
                    pending.at(ahead / 1000)
                continue
            envelope = envelope_of(entry.name)
            if not envelope.expired(now):
                if envelope.expiration:
                    pending.at(envelope.expiration / 1000)
                continue
            if box.move(State.TARGET, entry.name, State.EXPIRED):
                expired += 1
    return expired, looked


def _ahead_ms(name: str, now_ms: float) -> float | None:
    """When the message named `name` expires, if that is after `now_ms`, read off its
    expiration (the fourth field) without decoding the name: inf for none (the field is
    missing or empty), its time (ms) for digits of a time to come; None for a name this
    cannot tell of (an expiration due, or a field a script escaped), which is decoded, so the
    answer is always the decoding's (a name that does not decode has no expiration: it is
    never due either way). Decoding every name of target/ at every sweep was most of a
    sweep's work on a deep backlog."""
    fields = name.split(".", 4)
    if len(fields) < 4 or not (field := fields[3]):
        return math.inf
    if field.isascii() and field.isdigit() and (ms := int(field)) > now_ms:
        return float(ms)
    return None


def _remove_older(
    box: Dropbox,
    state: State,
    *,
    now: float,
    age: float,
    assured_age: float | None = None,
    markers: str | None = None,
    pending: Pending | None = None,
) -> tuple[int, int]:
    """Remove the files of `state` older than `age`; `assured_age`: the exactly-once
    messages' instead (working/: they wait for their `deliver`, not for a commit), but not
    one with a "delivered" marker in `markers`. `pending`, when given, learns when the
    files left are due. How many went, and how many of those were exactly-once messages."""
    removed = assured_removed = 0
    shortest = min(age, age if assured_age is None else assured_age)
    horizon_ms = (now - shortest) * 1000
    with closing(box.scan(state)) as entries:
        for entry in entries:
            made = _made_ms(entry.name)
            if made is not None and made > horizon_ms:
                # Made within `age`, so it cannot have changed state before (a producer whose
                # clock runs ahead only delays its purge): no stat.
                if pending is not None:
                    pending.at(made / 1000 + shortest)
                continue
            limit = age
            assured = _assured(entry.name) if assured_age is not None else None
            if assured is not None and assured_age is not None:
                limit = assured_age
            seen = box.age(state, entry.name, now)
            if seen is not None and seen > limit and _marked(markers, assured):
                # Its `deliver` was marked by a process killed before the move: a restart (or its
                # sender's arrival in another process) sends it. Deleted, it was lost, and the
                # marker answered its sender's repeated `deliver` as done.
                continue
            if seen is not None and seen > limit and box.remove(state, entry.name):
                removed += 1
                assured_removed += assured is not None
            elif seen is not None and pending is not None:
                pending.at(now + limit - seen)
    return removed, assured_removed


def _assured(name: str) -> Envelope | None:
    """The envelope of an exactly-once message's file (its name carries its sender); None
    for another file."""
    envelope, reason = decode_lenient(name)
    if reason is not None or envelope.property_value(SOURCE) is None:
        return None
    return envelope


def _marked(markers: str | None, assured: Envelope | None) -> bool:
    """Whether the exactly-once message `assured` has a "delivered" marker in `markers`."""
    if markers is None or assured is None:
        return False
    source, msg_id = assured.property_value(SOURCE), assured.property_value(SOURCE_MESSAGE_ID)
    if not isinstance(source, str) or not isinstance(msg_id, str):
        return False
    return os.path.lexists(os.path.join(markers, marker_name(source, msg_id)))


def _made_ms(name: str) -> int | None:
    """When the message was made (epoch ms), read off the id of a name in the DropboxMQ form
    `<priority>.<id>....`, without decoding the rest; None if the id carries no time."""
    fields = name.split(".", 2)
    return timestamp_of(fields[1]) if len(fields) > 1 else None


def sweep(
    box: Dropbox,
    *,
    now: float,
    policy: QueuePolicy,
    limits: SweepLimits,
    name: str,
    purge: bool = True,
    purge_expired: bool = True,
    expire: bool = True,
    markers: str | None = None,
) -> SweepReport:
    """`markers`: the folder of the exactly-once "delivered" markers of the root. `purge`,
    `purge_expired`: whether processed/ and expired/ are looked through for their retention."""
    pending = Pending()
    released = dead = expired = looked = 0
    refused: OSError | None = None
    try:
        released, dead = release_stale_locks(
            box, now=now, policy=policy, limits=limits, pending=pending
        )
        if expire:
            expired, looked = expire_ready(box, now=now, pending=pending)
    except OSError as error:
        # A move the file system refused: on ext4 a full disk refuses one into a folder whose
        # blocks are full of names. The deletes below still run, since they are what gives
        # a full disk its room back; the refusal is raised after them.
        refused = error
    abandoned, undelivered = _remove_older(
        box,
        State.WORKING,
        now=now,
        age=limits.working_ttl,
        assured_age=limits.pending_ttl,
        markers=markers,
        pending=pending,
    )
    # Each count names its own age: an operator who raised pending_ttl, told the files went
    # after working_ttl's, would look for the fault in the wrong setting.
    if abandoned > undelivered:
        log.warning(
            "%s: deleted %d uncommitted file(s) older than %s in working/",
            name,
            abandoned - undelivered,
            spelled(limits.working_ttl),
        )
    if undelivered:
        log.warning(
            "%s: deleted %d exactly-once message(s) whose deliver did not come within %s "
            "(pending_ttl) in working/",
            name,
            undelivered,
            spelled(limits.pending_ttl),
        )
    purged = 0
    if purge and limits.processed_retention is not None:
        purged, _ = _remove_older(box, State.PROCESSED, now=now, age=limits.processed_retention)
    expired_purged = 0
    if purge_expired and limits.expired_retention is not None:
        # Its age there is since it expired (the rename's ctime), not since it was made.
        expired_purged, _ = _remove_older(box, State.EXPIRED, now=now, age=limits.expired_retention)
    if refused is not None:
        raise refused
    # processed/ is not counted in `due`: its purge has its own rhythm (Box.sweep); nor are
    # expirations when target/ was not looked through (`expire`): Box.sweep knows when it is.
    return SweepReport(
        released,
        dead,
        expired,
        abandoned,
        purged,
        expired_purged,
        looked,
        pending.due,
        frozenset(pending.holders),
    )
