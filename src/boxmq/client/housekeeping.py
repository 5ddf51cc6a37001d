"""The housekeeping of one Box (Box.sweep): its sweeps over the root's queues and
subscriptions, and what it keeps between them to visit only those where something may be due.

Three things are kept between sweeps, each for one promise (`Housekeeping.sweep`):
- the quiet queues (`_Quiet`, `_unchanged`): a queue whose visit found nothing to do before a
  time is passed by while its processing/ and target/ stay as they were (two stats);
- the due subscriptions (`_due`, client/due_subscriptions.py): when each subscription a
  visit saw is due next, so that a sweep between full passes visits those alone;
- the root's listing (`_listed`, `_seen`, `_settled`) and the timings of the slower looks
  (processed/ folders, retained messages, side files, a big target/'s expirations).
A sweep visits each dropbox with client/sweeps.py; the box's live queues, its topics and its
exactly-once intake are the box's, given to each sweep.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NamedTuple

from boxmq.client.due_subscriptions import DueSubscriptions
from boxmq.client.live_state import LiveOptions
from boxmq.client.sweeps import EXPIRY_NAMES_PER_SECOND, SweepReport, sweep
from boxmq.clock import Clock, periodic_due
from boxmq.core.durations import spelled
from boxmq.errors import QueueNotFound, RecurringFailure, check_flag, store_failure
from boxmq.store.commit import Committer
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import (
    TOPIC_ROOT,
    FolderSeen,
    State,
    clear_deleting,
    dropbox_folders,
    folder_seen,
    is_dropbox,
    settled_seen,
)
from boxmq.store.process import process_alive
from boxmq.store.retained import RETAINED_DIR
from boxmq.store.side_files import COLLECT_EVERY, SideFiles, referenced
from boxmq.store.spares import Spares
from boxmq.store.temporaries import remove_stale_temporaries
from boxmq.store.topics import (
    GenerationWatch,
    SubscriptionRecord,
    generation_file,
    incoming_working,
    members,
    named_by_boxmq,
    read_record,
    remove_if_abandoned,
    remove_if_ended,
    remove_stale_staging,
    subscription_folders,
    unreadable_record,
    unreadable_told,
)

if TYPE_CHECKING:
    from boxmq.client.assured import AssuredIntake
    from boxmq.client.topics import Topics

__all__ = ["EXPIRING_KEPT", "FULL_SWEEP_EVERY", "RETAINED_EVERY", "TOMBSTONE_AGE", "Housekeeping"]

log = logging.getLogger("boxmq")

RETAINED_EVERY: Final = 60.0  # seconds between sweeps' looks for expired retained messages
TOMBSTONE_AGE: Final = 300.0  # seconds a retained delete's tombstone stays at least
# Seconds between the timer's sweeps that visit every subscription (Box.sweep): the others
# visit only those where something is due, as far as this process can tell.
FULL_SWEEP_EVERY: Final = 60.0
# Dropboxes a sweep is told to visit for their copies with an expiry (`published_expiring`),
# past which the next sweep is a full pass instead: a box that never sweeps (an application
# beside `boxmq serve`, whose sweeps visit them) kept one path per subscription ever sent one.
EXPIRING_KEPT = 10_000
# Seconds at least between two reads of every subscription record by sweeps between full
# passes, to learn the processes that subscriptions end with when the generation no longer
# names every change since the last look (`_learn_named`): a broker's burst of thousands of
# persistent sessions subscribing read them all at each sweep (bench/mqtt_topics.py, 3,000
# sessions: 1.44 ms of CPU per SUBSCRIBE against 1.35 before; 1.37 with this rest, noise).
NAMED_READ_EVERY: Final = 5.0
# Seconds at most between two sweeps' looks through a big target/ for expired messages.
_EXPIRY_AT_MOST: Final = 60.0


class Housekeeping:
    def __init__(
        self,
        root: str,
        committer: Committer,
        *,
        options: LiveOptions,
        clock: Clock,
        token: str,
        spares: Spares | None,
        side_files: SideFiles,
    ) -> None:
        self._root = root
        self._committer = committer
        self.options = options  # the box's: replaced with it (Box.options)
        self._clock = clock
        self._token = token  # this process's: its own locks are no other process's
        self._spares = spares
        self._side_files = side_files
        # Of what publishing threads and the doors tell (`_expiring`, the doors' folders).
        self._lock = threading.Lock()
        self._next_purge = 0.0  # when sweep() next looks through processed/ folders
        self._next_expired_purge = 0.0  # and expired/ folders, for expired_retention
        self._next_expiry: dict[str, float] = {}  # when it next looks through a target/, by path
        self._next_collect = 0.0  # when sweep() next looks for side files no message names
        # The unreadable subscription records the last full pass found and told of, with
        # why: one repaired or gone since is forgotten, to be told of again if damaged again.
        self._unreadable: set[tuple[str, str]] = set()
        # The subscription folders without a record the other processes were told of, by
        # the full pass that found them (`_remove_abandoned`), and its failure to tell them.
        self._told_recordless: set[str] = set()
        self._telling = RecurringFailure()
        self._next_retained = 0.0  # when sweep() next looks for expired retained messages
        self._door_folders: tuple[str, ...] = ()  # of the doors' own records (sweep_temporaries_in)
        self._new_door_folders: tuple[str, ...] = ()  # not looked through yet: at the next sweep
        # The sweeps between full passes (sweep(full=False)): when each subscription is due
        # next; the processes the subscriptions end with, and the generation that tells of
        # a subscription made since (`_learn_named`); the dropboxes this process published a
        # copy with an expiry into since the last sweep.
        self._next_full = 0.0
        self._due = DueSubscriptions()
        self._named: set[str] = set()
        self._changes = GenerationWatch(root)
        self._named_behind = False  # changes the generation did not name: a read of all due
        self._next_named_read = 0.0  # when such a read may come
        self._expiring: set[str] = set()
        self._expiring_dropped = False  # past EXPIRING_KEPT: the next sweep is a full pass
        # The queues a visit left with nothing to do before a time, by path: what their
        # processing/ and target/ were then (inode, mtime), that time and the other processes
        # whose locks they hold. A sweep between full passes passes such a queue by while
        # both stay as they were (two stats, `_unchanged`).
        self._quiet: dict[str, _Quiet] = {}
        # The root's queues as last listed, with what the root was then (`_settled`) and
        # its other folders (`_queue_folders`).
        self._listed: tuple[list[_Seen], list[tuple[str, str]], list[str]] | None = None

    def renew_in_child(self, token: str) -> None:
        """In a forked child (Box.renew_in_child): its own lock, and its own process's token."""
        self._lock = threading.Lock()
        self._token = token
        self._due.renew_in_child()

    def published_expiring(self, paths: list[str]) -> None:
        """Topics committed copies with an expiry into these dropboxes: the next sweep
        visits them, and learns when those expire."""
        with self._lock:
            self._expiring.update(paths)
            if len(self._expiring) > EXPIRING_KEPT:
                self._expiring, self._expiring_dropped = set(), True  # a full pass instead

    def ended(self, path: str) -> None:
        """The subscription at `path` ended here: what its visits found due is dropped. It
        was kept until the next full pass or its due time, whose visit found no folder: a
        broker whose clients come and go kept one entry per subscription of the minute.
        (One a sweep of another thread was visiting meanwhile may come back: that visit's
        find, dropped as before.)"""
        self._due.drop(path)

    def sweep(
        self,
        *,
        full: bool,
        topics: Topics,
        intake: AssuredIntake,
        wanting: Callable[[], set[str]],
    ) -> dict[str, SweepReport]:
        """Box.sweep: one round of housekeeping over every queue and subscription (what
        `boxmq serve` runs on a timer); share groups whose members all died, and
        subscriptions that were to end with a process that died, are ended. `topics` and
        `intake`, the box's; `wanting`, the folders of its live queues that want a visit
        (Engines.wanting_visits), asked at each pass.

        full=False (serve's timer): every queue but those whose folders stayed as their
        last visit saw them, with nothing due yet (`_unchanged`: two stats each); of the
        subscriptions only those where something may be due: a lock's deadline or an expiry
        the last visit saw, a copy with an expiry published by this process, a consumer here
        receiving from it where something changed since (LiveQueue.wants_sweep), a process
        holding locks or subscriptions that died; and every queue and subscription once
        every FULL_SWEEP_EVERY seconds, for what other processes did meanwhile. Offline MQTT
        sessions, connected ones and idle queues with nothing due then cost next to nothing
        (docs/operations.md)."""
        # Two skips between full passes, for two promises (`_visit`): they are not one
        # mechanism twice. A queue is skipped while `_quiet` holds, which asks the disk
        # whether anything changed since its last visit (two stats: a put, lock or release
        # by any process changes them), so another process's lock or expiry is acted on
        # within a sweep of its time. A subscription is skipped unless this process knows
        # something is due in it (the times in `_due`, its own publications with an expiry,
        # its consumers' wants, a holder dead): no call at all per idle one, so thousands of
        # offline MQTT sessions cost nothing, and what another process does in one waits for
        # the full pass (up to a minute). The due times alone for queues would make
        # other processes' expiries and locks that late; `_quiet` for subscriptions would
        # cost two stats per session per sweep.
        check_flag("full", full)
        now = self._clock.now()
        limits = self.options.limits
        # processed/ is the big folder (a day of traffic, by default): looked through at
        # most every hundredth of the retention (a minute at most), not every sweep; expired/
        # at its own retention's pace, so that a short one does not look through processed/.
        purge, self._next_purge = _purge_due(now, limits.processed_retention, self._next_purge)
        purge_expired, self._next_expired_purge = _purge_due(
            now, limits.expired_retention, self._next_expired_purge
        )
        with self._lock:
            expiring, self._expiring = self._expiring, set()
            dropped, self._expiring_dropped = self._expiring_dropped, False
        # A full pass visits every subscription, with the root listed again for its queues.
        every = (
            full
            or purge
            or purge_expired
            or dropped
            or periodic_due(now, self._next_full, FULL_SWEEP_EVERY)
        )
        # By path: a folder made by hand may not be escaped.
        queues = self._queue_folders(fresh=every)
        try:
            reports, subscriptions, recordless = self._visit(
                now,
                queues,
                expiring,
                every=every,
                purge=purge,
                purge_expired=purge_expired,
                markers=intake.markers,
                topics=topics,
                wanting=wanting,
            )
        except BaseException:
            # What it learnt of (copies with an expiry, subscribers gone) is lost with it:
            # the next sweep visits every subscription.
            self._next_full = 0.0
            raise
        if abandoned := remove_stale_staging(self._root, now=now, age=limits.working_ttl):
            log.warning(
                "deleted %d publication staging file(s) older than %s (a process died "
                "while publishing)",
                abandoned,
                spelled(limits.working_ttl),
            )
        # What a process killed while deleting a queue or subscription left: one scandir
        # of a folder most roots lack. A delete under way there too is only helped along.
        clear_deleting(self._root)
        if subscriptions is not None and self._spares is not None:
            # Files this process's puts keep open whose messages another process deleted
            # since (`boxmq delete` beside a server, a purge): their blocks are freed now,
            # not when newer puts push them out (a root that went quiet: never).
            self._spares.close_gone()
            # The own spares of processes that died (as their locks above): a server that
            # never put nor acked left a killed process's `.spare/` folder as it was.
            self._spares.take_over_the_dead()
        elif self._spares is not None:
            self._spares.close_gone_due()  # subscriptions that ended here since the last one
        # The subscriptions' folders only at a full pass: they take a listing of them all.
        if subscriptions is not None:
            # First: a stale temporary deleted would make its folder young again.
            self._remove_abandoned(recordless, topics, now=now, age=limits.working_ttl)
        self._remove_stale_temporaries(
            # The dropboxes' own folders at the full pass too: an hour old, a minute later.
            [*(path for _, path in queues), *subscriptions] if subscriptions is not None else [],
            now=now,
            age=limits.working_ttl,
            full=subscriptions is not None,
            markers=intake.markers,
        )
        intake.expire()
        if periodic_due(now, self._next_retained, RETAINED_EVERY):
            # Each retained message is read, as at a SUBSCRIBE: not every sweep. One expired
            # is never sent meanwhile; this only gives its room back.
            self._next_retained = now + RETAINED_EVERY
            # A delete's tombstone tells a restart that finishes a retained publication
            # marked before it that a delete came since: kept while such a marker may be
            # older (as the expire above listed them: one whose message still waits keeps
            # its own topic's, one that tells nothing keeps all), and for TOMBSTONE_AGE, for
            # one whose deliver looked at the retained file before it and is still writing
            # its marker.
            before = now - TOMBSTONE_AGE
            untold, pinned = intake.tombstones_kept()
            if untold is not None:
                before = min(before, untold)
            if expired := topics.remove_expired_retained(
                now, tombstones_before=before, pinned=pinned
            ):
                log.info("deleted %d expired retained message(s)", expired)
        if periodic_due(now, self._next_collect, COLLECT_EVERY):  # stepped back: at once
            # It lists every file of the root, so not every sweep; a file's grace period
            # (an hour) is what keeps it safe, not this rhythm.
            self._next_collect = now + COLLECT_EVERY
            try:
                self._side_files.collect(lambda: referenced(self._root), now=now)
            except OSError as error:  # the next round tries again; the rest of the sweep ran
                log.warning("side files not collected this round: %s", error)
        return reports

    def _queue_folders(self, *, fresh: bool) -> list[tuple[str, str]]:
        """dropbox_folders(root), each sweep: 10,000 queues took a stat and an unescape
        each, a second. Between full passes, a root as it was at the last listing (one stat,
        `_settled`), of which no other entry became a queue since (a folder made by hand,
        then its target/), has the same queues: a queue deleted, made or renamed changes
        the root. One whose target/ went (by hand) is visited still, and found no queue."""
        listed, polled = self._listed, self.options.polling
        if not fresh and not polled and listed is not None:
            seen, queues, others = listed
            if _seen([self._root]) == seen and not any(map(is_dropbox, others)):
                return queues
        settled = _settled([self._root])  # before the listing: a change meanwhile is seen next
        others = []
        queues = dropbox_folders(self._root, others)
        self._listed = None if settled is None or polled else (settled, queues, others)
        return queues

    def _visit(
        self,
        now: float,
        queues: list[tuple[str, str]],
        expiring: set[str],
        *,
        every: bool,
        purge: bool,
        purge_expired: bool,
        markers: str,
        topics: Topics,
        wanting: Callable[[], set[str]],
    ) -> tuple[dict[str, SweepReport], list[str] | None, list[str]]:
        """Sweep the queues and the subscriptions due (all of them, `every`: a full pass);
        the reports, and in a full pass every subscription's folder and those without a
        record readable then."""
        subscriptions: list[str] | None
        recordless: list[str] = []
        queue_paths = {path for _, path in queues}
        if every:
            boxes, subscriptions, recordless = self._every_subscription(queues, topics, wanting)
            quiet: dict[str, _Quiet] = {}
        else:
            quiet = self._quiet
            boxes = [
                *(queue for queue in queues if not _unchanged(quiet.get(queue[1]), now)),
                *self._due_subscriptions(now, expiring, queue_paths, topics, wanting),
            ]
            subscriptions = None
        # What the visits below find is kept, for the queues (a full pass makes it again).
        self._quiet = quiet
        settle = not self.options.polling
        limits = self.options.limits
        reports = {}
        refused: OSError | None = None
        for name, path in boxes:
            quiet.pop(path, None)
            # Taken before the visit: a change made during it (by another process) is one
            # the next sweep finds. Not on a polling root (NFS may cache a folder's mtime).
            folders = [os.path.join(path, _PROCESSING), os.path.join(path, _TARGET)]
            seen = _settled(folders) if settle and path in queue_paths else None
            try:
                # Not completed (no state folder made at the open), since an `rm -rf` of
                # the queue may be under way: a move into a folder that is missing makes it.
                dropbox = Dropbox(
                    path, self._committer, create=False, spares=self._spares, complete=False
                )
            except QueueNotFound:
                self._due.drop(path)
                self._next_expiry.pop(path, None)
                continue  # a queue or subscription being created or deleted right now
            # Further off than the longest wait set below: the clock was stepped back since
            # (`periodic_due`), which put off the move of its expired messages by the step.
            expire = periodic_due(now, expiry := self._next_expiry.get(path, 0.0), _EXPIRY_AT_MOST)
            try:
                reports[name] = report = sweep(
                    dropbox,
                    now=now,
                    policy=self.options.policy,
                    limits=limits,
                    name=name,
                    purge=purge,
                    purge_expired=purge_expired,
                    expire=expire,
                    markers=markers,
                )
            except OSError as error:
                # One folder's refusal (a full disk, a folder of another user) ends its own
                # visit only: the others' locks and purges, which may give the disk its room
                # back, go on. The first is raised once every folder was visited.
                refused = refused or error
                continue
            if expire:
                # A big target/ is looked through for expirations less often, in proportion
                # to its size (a minute at most): 400,000 names take about 0.4 s, 40 % of a
                # core at a sweep each second on a root where nothing happens. No consumer
                # gets an expired message meanwhile (each process expires what it offers).
                expiry = now + min(_EXPIRY_AT_MOST, report.looked / EXPIRY_NAMES_PER_SECOND)
            self._next_expiry[path] = expiry
            # Not looked through for expirations, it is due for that look at the latest.
            due = report.due if expire else min(report.due, expiry)
            if seen is not None and not report:  # (what it did changed its folders)
                quiet[path] = _Quiet(folders, seen, due, report.holders - {self._token})
            if path not in queue_paths:
                self._due.keep(path, name, due, report.holders - {self._token})
        if refused is not None:
            raise refused
        if subscriptions is not None:  # done: a pass the disk failed is made again next time
            self._next_full = now + FULL_SWEEP_EVERY
            # Those of folders deleted since are forgotten (every folder was visited).
            visited = {path for _, path in boxes}
            self._next_expiry = {p: t for p, t in self._next_expiry.items() if p in visited}
        return reports, subscriptions, recordless

    def _every_subscription(
        self, queues: list[tuple[str, str]], topics: Topics, wanting: Callable[[], set[str]]
    ) -> tuple[list[tuple[str, str]], list[str], list[str]]:
        """A full pass: the dropboxes to visit (every queue and subscription), every
        subscription's folder, its record written or not, and those whose record was not
        read (none yet, or unreadable: `_remove_abandoned`)."""
        kept: list[tuple[SubscriptionRecord, str]] = []
        self._changes.change()  # before the read: a change made during it is read again
        self._named_behind = False
        self._end_dead_and_learn(topics, kept)
        subscriptions = list(subscription_folders(self._root))  # with a record or not (yet)
        # Each record read once a pass: those sweep_subscriptions read and left are taken
        # from it (a record's filter is its folder's, never changed by a rewrite).
        recorded = {path: record for record, path in kept}
        self._due.restart()  # made again
        wanting()  # a rest before this pass is no news for the next one
        boxes = list(queues)
        recordless = []
        for path in subscriptions:
            record = recorded.get(path)
            if record is None and (record := read_record(path)) is None:  # else made since
                recordless.append(path)
            else:
                boxes.append((_swept_as(record, path), path))
        return boxes, subscriptions, recordless

    def _due_subscriptions(
        self,
        now: float,
        expiring: set[str],
        queue_paths: set[str],
        topics: Topics,
        wanting: Callable[[], set[str]],
    ) -> list[tuple[str, str]]:
        """Between full passes: the subscriptions where something may be due (`sweep`);
        `queue_paths`, the queues' folders, visited anyway."""
        alive: dict[str, bool] = {}

        def dead(tokens: set[str] | frozenset[str]) -> bool:
            for token in tokens:
                if token not in alive:
                    alive[token] = process_alive(token) is not False
                if not alive[token]:
                    return True
            return False

        self._learn_named(now, topics)
        if self._named and dead(self._named):
            self._end_dead_and_learn(topics)
        receiving = wanting()
        maybe = expiring | receiving | self._due.maybe_due(now)
        visits = []
        for path in maybe:
            if (entry := self._due.get(path)) is None:
                continue  # made since the last full pass (below), or gone
            name, due, holders = entry
            if due <= now or path in expiring or path in receiving or dead(holders):
                visits.append((name, path))
        # Made since the last full pass. Not a queue: it has no record to read, and its
        # consumer receiving put it here at every sweep (a failed open a second).
        for path in (expiring | receiving) - self._due.known() - queue_paths:
            if (record := read_record(path)) is not None:
                visits.append((_swept_as(record, path), path))
        return visits

    def _learn_named(self, now: float, topics: Topics) -> None:
        """The processes that the subscriptions changed since the last look end with, added
        to those the last full pass found: the generation names the folders of each change
        (a subscribe, a member's join), whose records alone are read. One subscription made
        after a full pass, whose process was killed (a `boxmq subscribe` run), waited for the
        next full pass, up to a minute; now it ends at the next sweep after the kill. Changes
        the file no longer names (more than KEPT_CHANGES between two looks, a write that
        failed) read every record, as a full pass does, once per NAMED_READ_EVERY at most."""
        change = self._changes.change()
        if change is not None and change.paths is None:
            self._named_behind = True
        elif change is not None:
            for path in change.paths or ():
                if (record := read_record(path)) is None:
                    continue  # ended: what it named is forgotten at the next full pass
                if record.group is not None:
                    self._named.update(token for token in members(path).values() if token)
                elif record.owner:
                    self._named.add(record.owner)
            self._named.discard(self._token)
        if self._named_behind and now >= self._next_named_read:
            self._named_behind, self._next_named_read = False, now + NAMED_READ_EVERY
            self._end_dead_and_learn(topics)

    def _end_dead_and_learn(
        self, topics: Topics, kept: list[tuple[SubscriptionRecord, str]] | None = None
    ) -> None:
        """Read every subscription record: end what dead processes left, and learn anew the
        other processes the subscriptions left end with (`kept`, when given, gets the records
        read and left)."""
        named: set[str] = set()
        topics.sweep_subscriptions(named, kept)
        self._named = named - {self._token}

    def sweep_temporaries_in(self, folder: str) -> None:
        """Box.sweep_temporaries_in, `folder` checked: the next sweep looks through it, and
        every full one."""
        with self._lock:
            if folder not in self._door_folders:
                self._door_folders = (*self._door_folders, folder)
                self._new_door_folders = (*self._new_door_folders, folder)

    def _remove_stale_temporaries(
        self, dropboxes: list[str], *, now: float, age: float, full: bool, markers: str
    ) -> None:
        """What writes of whole files left when their process died before the rename: in
        the dropboxes (settings, subscription records) and the root's own folders (the topic
        root's generation, the retained store, ...), and the doors' records. Those and the
        topic root hold a file or folder a session or filter (an MQTT broker's thousands):
        listed at a full pass only, not each second, for a file `abandon_after` old (an
        hour by default), a minute later is as good."""
        folders = [
            *dropboxes,
            os.path.join(self._root, TOPIC_ROOT, RETAINED_DIR),
            incoming_working(self._root),  # an exactly-once message's, before its `received`
            self._side_files.path,
            markers,
        ]
        with self._lock:
            # One just given is looked through at the next sweep (what a crash before this
            # start left), full pass or not.
            doors = self._door_folders if full else self._new_door_folders
            self._new_door_folders = ()
        if full:
            folders.append(os.path.join(self._root, TOPIC_ROOT))
        folders += doors
        if removed := remove_stale_temporaries(folders, now=now, age=age):
            log.warning(
                "deleted %d temporary file(s) older than %s (a process died while writing)",
                removed,
                spelled(age),
            )

    def _remove_abandoned(
        self, recordless: list[str], topics: Topics, *, now: float, age: float
    ) -> None:
        """The folders of subscriptions whose first record never landed, or whose end was
        cut short (their messages left): nothing else deletes them (no scan of subscriptions
        sees a folder without its record). One whose record is there but unreadable is told
        of, once per reason. `recordless`: the folders whose record this full pass did not
        read (each read once a pass, not again here: remove_if_abandoned and remove_if_ended
        leave a folder whose record landed since)."""
        removed = 0
        told, unreadables = set(), set()
        for path in recordless:
            if named_by_boxmq(path) and (
                path in self._told_recordless or self._tell_recordless(path, topics)
            ):
                told.add(path)
            if remove_if_abandoned(path, now=now, age=age):
                removed += 1
                told.discard(path)
            elif files := remove_if_ended(path, now=now, age=age):
                told.discard(path)
                log.warning(
                    "deleted %s, a subscription folder without a record, and the %d file(s) "
                    "in it, unchanged for %s (a process died while ending its subscription)",
                    path,
                    files,
                    spelled(age),
                )
            if unreadable := unreadable_record(path):
                unreadables.add(unreadable)
                if unreadable not in self._unreadable:
                    log.warning("%s", unreadable_told(*unreadable))
        if removed:
            log.warning(
                "deleted %d subscription folder(s) without a record nor a message, older than "
                "%s (a process died while subscribing)",
                removed,
                spelled(age),
            )
        self._told_recordless = told  # one whose record landed since is forgotten
        self._unreadable = unreadables

    def _tell_recordless(self, path: str, topics: Topics) -> bool:
        """Tell the other processes that the subscription folder at `path`, found without a
        record, is none: what an end killed after deleting the record and before the
        generation's write left (an unsubscribe, a session's end, a group's last leave).
        They went on routing copies into it until they restarted, and their copies kept it
        young, so that `remove_if_ended` never took it. Whether they were told: if not, the
        next full pass tries again (the failure logged once, not at each)."""
        if (error := topics.tell_others(path)) is None:
            self._telling.recovered()
            return True
        if self._telling.news(error):
            log.warning(
                "%s: the processes on the root that route to %s, a subscription folder "
                "without a record, are not told it is none (tried again at each full "
                "sweep): %s",
                generation_file(self._root),
                path,
                store_failure(error),
            )
        return False


_PROCESSING, _TARGET = State.PROCESSING.value, State.TARGET.value

# A folder's inode and mtime (ns), or None where there is none.
_Seen = FolderSeen | None


def _purge_due(now: float, retention: float | None, next_look: float) -> tuple[bool, float]:
    """Whether a folder kept for `retention` (None: forever) is looked through now, and when
    next: every hundredth of the retention, a minute at most."""
    if retention is None:
        return False, next_look
    every = min(60.0, retention / 100)
    if periodic_due(now, next_look, every):
        return True, now + every
    return False, next_look


def _seen(folders: list[str]) -> list[_Seen]:
    return [folder_seen(folder) for folder in folders]


def _settled(folders: list[str]) -> list[_Seen] | None:
    """What the folders are (`_seen`) when each last changed over `SETTLED` s ago: a later
    look that finds the same says nothing was made, renamed or deleted in them since. None
    otherwise, and where one is missing."""
    seen: list[_Seen] = []
    for folder in folders:
        if (found := settled_seen(folder)) is None:
            return None
        seen.append(found)
    return seen


class _Quiet(NamedTuple):
    """A queue whose last visit found nothing to do before `due`: what its processing/ and
    target/ (`folders`) were before it (`_settled`), and the other processes whose locks
    it holds."""

    folders: list[str]
    seen: list[_Seen]
    due: float
    holders: frozenset[str]


def _unchanged(quiet: _Quiet | None, now: float) -> bool:
    """Whether a sweep between full passes may pass the queue by: its last visit found
    nothing to do before a time not reached, no process holding a lock in it died since,
    and its processing/ and target/ are as they were then (two stats), so that a visit
    would list them to find the same locks, expiries and working/ files. What a producer
    that died left in working/ alone waits for the full pass (it is an hour old before it
    is due)."""
    if quiet is None or now >= quiet.due:
        return False
    if quiet.holders and any(process_alive(token) is False for token in quiet.holders):
        return False
    return _seen(quiet.folders) == quiet.seen


def _swept_as(record: SubscriptionRecord, path: str) -> str:
    """A subscription's name in a sweep's reports, the same in a full pass and between them:
    its filter and its folder's name (two subscriptions may share a filter)."""
    return f"{record.filter} ({os.path.basename(path)})"
