"""`boxmq.open(root)`: a root of queues, used directly on its files, with no server.

Any number of processes (and threads) may open the same root: every change is a rename, and
two claims of one file cannot both win. Within one process, each opened Box keeps one engine
per queue for its consumers; `close()` releases whatever they still hold.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Final, NamedTuple

from boxmq.client.live_queue import LiveQueue
from boxmq.client.live_state import LiveOptions
from boxmq.client.queue import KnownNames, Queue, QueueCounts, counts_of
from boxmq.client.sweeps import EXPIRY_NAMES_PER_SECOND, SweepLimits, SweepReport, sweep
from boxmq.clock import Clock, SystemClock
from boxmq.core import Dispatch, ExactlyOnceLimits, QueuePolicy, parse_filter
from boxmq.core.durations import check_seconds, spelled
from boxmq.core.topics import is_share_name
from boxmq.errors import (
    Closed,
    InvalidArgument,
    QueueNotFound,
    RecurringFailure,
    check_count,
    check_flag,
    store_failure,
)
from boxmq.forks import renew_in_children
from boxmq.ids import IdFactory
from boxmq.model import ConsumerId, MessageId, Property, PropertyValue
from boxmq.store.commit import Committer, FsyncPolicy
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import (
    TOPIC_ROOT,
    FolderSeen,
    State,
    clear_deleting,
    dropbox_folders,
    folder_seen,
    in_the_way,
    is_dropbox,
    list_dropboxes,
    no_dropbox,
    queue_path,
    remove_dropbox,
    settled_seen,
)
from boxmq.store.process import process_alive, process_token
from boxmq.store.retained import RETAINED_DIR
from boxmq.store.side_files import COLLECT_EVERY, SideFiles, referenced
from boxmq.store.spares import Spares
from boxmq.store.temporaries import remove_stale_temporaries
from boxmq.store.topics import (
    SubscriptionRecord,
    generation_file,
    incoming_working,
    named_by_boxmq,
    read_record,
    remove_if_abandoned,
    remove_if_ended,
    remove_stale_staging,
    subscription_folders,
    unreadable_record,
    unreadable_told,
)
from boxmq.store.v5_properties import V5Reader
from boxmq.store.watch import read_news

if TYPE_CHECKING:  # imported where first used: see Box.topics
    from boxmq.client.assured import AssuredIntake
    from boxmq.client.subscriber import Subscriber
    from boxmq.client.topics import Topics

__all__ = ["Box", "open"]

log = logging.getLogger("boxmq")

RETAINED_EVERY: Final = 60.0  # seconds between sweeps' looks for expired retained messages
TOMBSTONE_AGE: Final = 300.0  # seconds a retained delete's tombstone stays at least
# Seconds between the timer's sweeps that visit every subscription (Box.sweep): the others
# visit only those where something is due, as far as this process can tell.
FULL_SWEEP_EVERY: Final = 60.0
# Dropboxes a sweep is told to visit for their copies with an expiry (`_published_expiring`),
# past which the next sweep is a full pass instead: a box that never sweeps (an application
# beside `boxmq serve`, whose sweeps visit them) kept one path per subscription ever sent one.
EXPIRING_KEPT = 10_000


class Box:
    def __init__(
        self,
        root: str,
        *,
        fsync: FsyncPolicy,
        fsync_interval: float,
        options: LiveOptions,
        clock: Clock,
        exactly_once: ExactlyOnceLimits,
        spares: int = 256,
        group_dispatch: Mapping[str, Dispatch] | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        _make_root(self.root)
        self.options = options
        self._group_dispatch = dict(group_dispatch or {})  # share group -> its strategy
        self._clock = clock
        self._committer = Committer(self.root, fsync, interval=fsync_interval)
        self._ids = IdFactory(clock)
        self._token = process_token()
        self._spares = Spares(self.root, self._token, limit=spares) if spares > 0 else None
        self._lock = threading.Lock()
        self._live: dict[str, LiveQueue] = {}  # by dropbox path
        # What `get` decoded of each queue's target/ names, by dropbox path: kept here, not
        # on a Queue, so that `box.queue(name).get()` in a loop decodes each name once too.
        self._known_names: dict[str, KnownNames] = {}
        # Called with the consumers of a dropbox this process just put messages in, from the
        # thread that put them (LiveQueue.sent), and with those of a dropbox that may have
        # something new for them (`read_news`): an MQTT broker's `pump_all` takes those.
        self._listeners: list[Callable[[list[ConsumerId], str], object]] = []
        # The live queues' reminders (LiveQueue._remind_when_due), asked for from any thread,
        # by time (a count breaks ties). A queue is held weakly: one closed and forgotten is
        # no reason to keep it.
        self._reminders: list[tuple[float, int, weakref.ref[LiveQueue]]] = []
        self._reminder_numbers = itertools.count()
        self._reading = threading.Lock()  # the reminders' heap
        # The live queues that may want the sweep's visit (LiveQueue.wants_sweep): each adds
        # itself when something makes it want one, so the sweep asks those, not each of the
        # thousands an MQTT broker's connected sessions keep (4,000 asks a second cost as
        # much as the rest of their idle walk). Its lock is taken under a queue's mutex.
        self._wanting: set[LiveQueue] = set()
        self._wanting_lock = threading.Lock()
        self._topics: Topics | None = None
        self._intake: AssuredIntake | None = None
        self._exactly_once = exactly_once
        self._closed = False
        self._next_purge = 0.0  # when sweep() next looks through processed/ folders
        self._next_expiry: dict[str, float] = {}  # when it next looks through a target/, by path
        # Metadata too long for a file name (MQTT v5 properties), named by its messages.
        self.side_files = SideFiles(self.root)
        self.v5 = V5Reader(self.side_files)  # those properties, for readers that are not MQTT
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
        # next, by path, with its name and the other processes whose locks it holds; the
        # processes the subscriptions end with; the dropboxes this process published a copy
        # with an expiry into since the last sweep.
        self._next_full = 0.0
        self._due: dict[str, tuple[str, float, frozenset[str]]] = {}
        # Of `_due`, for a sweep to find what is due without looking at every subscription
        # (thousands of MQTT sessions'): the times (a heap; one replaced since is passed
        # over), and those where other processes hold locks (whose deaths make them due).
        self._due_times: list[tuple[float, str]] = []
        self._held_by_others: set[str] = set()
        self._named: set[str] = set()
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
        renew_in_children(self)

    def renew_in_child(self) -> None:
        """In a forked child: the consumers, subscriptions and locks of this box are the
        parent's (its watchers' events, its locks' token); the child makes its own as it
        uses the box, under its own token. A consumer made before the fork stays the
        parent's: in the child it raises Closed (docs/python.md, "Processes")."""
        self._lock = threading.Lock()
        self._token = process_token()
        for live in self._live.values():
            live.abandon_in_child()
        self._live = {}
        self._listeners = []  # the parent's broker, which a child's puts are no news to
        self._reminders = []  # the parent's queues'
        self._reading = threading.Lock()
        self._wanting = set()
        self._wanting_lock = threading.Lock()
        self._topics = None
        self._intake = None

    @property
    def fsync(self) -> FsyncPolicy:
        return self._committer.policy

    def queue(self, name: str, *, create: bool = True) -> Queue:
        """The queue `name`; created (its folders made) unless `create=False`."""
        check_flag("create", create)
        path = queue_path(self.root, name)
        if not create and no_dropbox(path):
            raise QueueNotFound(self._missing(name, path))
        dropbox = Dropbox(path, self._committer, create=create, spares=self._spares)
        return self._queue_of(name, dropbox, lambda: self._live_queue(name, dropbox))

    def subscription(self, filter: str, subscriber: str | None = None) -> Queue:
        """A share group ("$share/<group>/<filter>"), or `subscriber`'s durable subscription to
        `filter`, as a queue to inspect and repair: `counts`, `peek`, `requeue` (its dead
        letters back to its members), `purge`. QueueNotFound if there is none. Its messages
        are taken through `subscribe`, which knows its members; a `put` here would skip the
        topic's routing. Its `get` refuses a consumer name that is one of its readers'."""
        dropbox = self.topics.dropbox_of(filter, subscriber)
        parsed = parse_filter(filter)

        def check_getter(consumer: ConsumerId) -> None:
            # As `boxmq get` refuses it: peek's holder and a settle by consumer name could not
            # tell the lock from that reader's own (docs/cli.md).
            if (whose := self.topics.reader_named(filter, subscriber, consumer)) is not None:
                raise InvalidArgument(
                    f"{consumer} is {whose}: a lock get took under its name could not be told "
                    "from its own (peek's holder, a settle by consumer name). Get it under "
                    "another consumer name (the default is cli)"
                )

        return self._queue_of(
            filter,
            dropbox,
            lambda: self._live_queue(dropbox.path, dropbox, parsed.share_group, str(parsed)),
            check_getter,
        )

    def _queue_of(
        self,
        name: str,
        dropbox: Dropbox,
        live: Callable[[], LiveQueue],
        check_getter: Callable[[ConsumerId], None] | None = None,
    ) -> Queue:
        """A queue, or a subscription seen as one, on `dropbox`; `live` makes (or finds) its
        engine in this process."""
        return Queue(
            name,
            dropbox,
            ids=self._ids,
            now=self._clock.now,
            policy=self.options.policy,
            keep_processed=self.options.keep_processed,
            live=live,
            opened=lambda: self._live.get(dropbox.path),
            limits=self.options.limits,
            v5=self.v5,
            side_files=self.side_files,
            check_getter=check_getter,
            known=self._known_names.setdefault(dropbox.path, {}),
        )

    def _missing(self, name: str, path: str) -> str:
        """Why `name` is no queue; for a folder made by hand under the name unescaped (listed
        by `boxmq ls`), how to reach it."""
        unescaped = os.path.join(self.root, name)
        if os.sep not in name and name not in (".", "..") and is_dropbox(unescaped):
            return (
                f"no queue {name!r}: the folder {unescaped} is not named in boxmq's escaped "
                f"form; rename it to {path} (docs/file-format.md)"
            )
        return f"no queue {name!r} under {self.root} (see `boxmq ls`)"

    # -- publish / subscribe (docs/pubsub.md) ------------------------------------------------------

    @property
    def topics(self) -> Topics:
        with self._lock:
            if self._topics is None:
                # Publish/subscribe and the exactly-once intake (below) are imported by the
                # first box that uses them: a process that only puts and gets (`boxmq put`)
                # saves 5 % of its instructions.
                from boxmq.client.topics import Topics

                self._topics = Topics(
                    self.root,
                    self._committer,
                    ids=self._ids,
                    clock=self._clock,
                    token=self._token,
                    live_for=lambda dropbox, group, shown: self._live_queue(
                        dropbox.path, dropbox, group, shown
                    ),
                    opened=self._live.get,
                    forget=self._forget_live,
                    ended=self._subscription_ended,
                    spares=self._spares,
                    v5=self.v5,
                    side_files=self.side_files,
                    expiring=self._published_expiring,
                )
            return self._topics

    def publish(
        self,
        topic: str,
        body: bytes | str,
        *,
        qos: int = 1,
        retain: bool = False,
        properties: Mapping[str, PropertyValue | Property] | None = None,
        expires_in: float | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        source: str | None = None,
    ) -> MessageId:
        """Send to every subscription whose filter matches `topic` (one copy per share group)."""
        if self._closed:  # (with no subscription it would commit nothing, and not see it)
            raise self._refused()
        return self.topics.publish(
            topic,
            body,
            qos=qos,
            retain=retain,
            properties=properties,
            expires_in=expires_in,
            correlation_id=correlation_id,
            reply_to=reply_to,
            source=source,
        )

    def subscribe(
        self,
        filter: str,
        subscriber: str,
        *,
        qos: int = 1,
        durable: bool = True,
        max_in_flight: int = 1,
        lock_timeout: float = 30.0,
        no_local: bool = False,
        send_retained: bool = True,
        process_bound: bool = True,
        ends_with_process: bool = False,
    ) -> Subscriber:
        """Subscribe to a topic filter; "$share/<group>/<filter>" joins a share group."""
        if self._closed:  # before its records are written: a subscription nobody reads
            raise self._refused()
        return self.topics.subscribe(
            filter,
            subscriber,
            qos=qos,
            durable=durable,
            max_in_flight=max_in_flight,
            lock_timeout=lock_timeout,
            no_local=no_local,
            send_retained=send_retained,
            process_bound=process_bound,
            ends_with_process=ends_with_process,
        )

    def unsubscribe(self, filter: str, subscriber: str) -> bool:
        return self.topics.unsubscribe(filter, subscriber)

    # -- exactly once (urn:xmpp:qos assured, MQTT QoS 2) ------------------------------------------

    @property
    def intake(self) -> AssuredIntake:
        with self._lock:
            if self._intake is None:
                from boxmq.client.assured import AssuredIntake

                self._intake = AssuredIntake(
                    self.root,
                    self._committer,
                    ids=self._ids,
                    clock=self._clock,
                    limits=self._exactly_once,
                    fan_out=lambda files, superseded, marked: self.topics.send_files(
                        files, superseded=superseded, marked=marked
                    ),
                    side_files=self.side_files,
                    retained_version=lambda topic: self.topics.retained_version(topic),
                    polling=self.options.polling,
                )
            return self._intake

    def assured(
        self,
        source: str,
        msg_id: str,
        body: bytes | str,
        *,
        queue: str | None = None,
        topic: str | None = None,
        priority: int = 4,
        properties: Mapping[str, PropertyValue | Property] | None = None,
        reclaim: bool = False,
        expires_in: float | None = None,
    ) -> bool:
        """Exactly once, step 1: store it (flushed) for `source`'s `msg_id`. True if new; False
        for a repeat, which stores nothing and must be answered again all the same.
        expires_in: it expires that many seconds from now, waiting for step 2 or after.

        reclaim=True: an id whose message was delivered already names a new one (urn:xmpp:qos
        lets a sender reuse an id once `deliver` succeeded); repeats of `deliver` are still
        recognised. By default a delivered id is remembered for `done_ttl` and a new `assured`
        under it is taken for a late repeat."""
        if self._closed:
            raise self._refused()
        return self.intake.assured(
            source,
            msg_id,
            body,
            queue=queue,
            topic=topic,
            priority=priority,
            properties=properties,
            reclaim=reclaim,
            expires_in=expires_in,
        )

    def pending(self, source: str) -> list[str]:
        """Exactly once: the msg ids `source` stored (step 1) that wait for step 2."""
        return self.intake.pending(source)

    def drop_pending(self, source: str) -> int:
        """Exactly once: delete what `source` stored (step 1) and never delivered, when no
        step 2 will come (its session ended); returns how many."""
        return self.intake.drop_pending(source)

    def deliver(
        self, source: str, msg_id: str, *, remember: bool = True, must_exist: bool = False
    ) -> bool:
        """Exactly once, step 2: deliver what step 1 stored. True once; False for a repeat
        (and for an unknown id, unless `must_exist`).

        remember=False: the id may be used again at once for a new message (an MQTT packet id
        after PUBCOMP, MQTT 5.0 §4.3.3), so nothing answers late repeats.
        must_exist=True: an id that names nothing stored (never sent, expired) raises
        ItemNotFound, so the sender can learn that its message was lost (urn:xmpp:qos)."""
        return self.intake.deliver(source, msg_id, remember=remember, must_exist=must_exist)

    def queues(self) -> list[str]:
        return list_dropboxes(self.root)

    def counts(self) -> dict[str, QueueCounts]:
        """Every queue's counts by name, folders made by hand under names that are not
        escaped included (found by path, not by name)."""
        counts = {}
        for name, path in dropbox_folders(self.root):
            try:
                dropbox = Dropbox(path, self._committer, create=False, complete=False)
            except QueueNotFound:
                continue  # deleted right now
            counts[name] = counts_of(dropbox)
        return counts

    def delete_queue(self, name: str, *, counted: list[QueueCounts] | None = None) -> bool:
        """Remove the queue `name` and every message in it; False if there was none.

        Its consumers in this process are closed first, and its engine here is forgotten, so a
        queue created again under the same name starts afresh (and is watched afresh).
        Consumers in other processes find their folder gone. `counted`, when given (a list),
        gets the counts of the messages deleted with it, as they were once its folder was
        renamed away: a count taken before would miss what was put or locked meanwhile.
        """
        if counted is not None and not callable(getattr(counted, "append", None)):
            raise InvalidArgument(f"counted must be a list, not {type(counted).__name__}")
        path = queue_path(self.root, name)
        self._forget_live(path)

        def count(moved: str) -> None:
            if counted is not None:
                taken = Dropbox(moved, self._committer, create=False, complete=False)
                counted.append(counts_of(taken))

        removed = remove_dropbox(self.root, path, taken=count)
        if removed and self._spares is not None:
            self._spares.close_gone()  # its messages' files that puts here keep open
        return removed

    def _published_expiring(self, paths: list[str]) -> None:
        """Topics committed copies with an expiry into these dropboxes: the next sweep
        visits them, and learns when those expire."""
        with self._lock:
            self._expiring.update(paths)
            if len(self._expiring) > EXPIRING_KEPT:
                self._expiring, self._expiring_dropped = set(), True  # a full pass instead

    def _forget_live(self, path: str) -> None:
        """A dropbox about to be deleted (a queue, a plain subscription, a share group its last
        member left): its consumers in this process are closed, and its engine here is
        forgotten, so that one made again at its path starts afresh: no lock, delivery count
        or name of the old folder's messages is taken for the new one's (a watcher of another
        process follows the path by itself: store/watch.py)."""
        with self._lock:
            live = self._live.pop(path, None)
        self._known_names.pop(path, None)
        if live is not None:
            live.close()
            # Else held until the next sweep asks: a box that never sweeps (an application
            # beside `boxmq serve`) kept each subscription and queue it ever ended this way.
            with self._wanting_lock:
                self._wanting.discard(live)

    def _subscription_ended(self, path: str) -> None:
        """The subscription at `path` ended here: what its visits found due is dropped. It
        was kept until the next full pass or its due time, whose visit found no folder: a
        broker whose clients come and go kept one entry per subscription of the minute.
        (One a sweep of another thread was visiting meanwhile may come back: that visit's
        find, dropped as before.)"""
        self._due.pop(path, None)
        self._held_by_others.discard(path)

    def sweep(self, *, full: bool = True) -> dict[str, SweepReport]:
        """One round of housekeeping over every queue and subscription (what `boxmq serve`
        runs on a timer); share groups whose members all died, and subscriptions that were to
        end with a process that died, are ended.

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
        # something is due in it (the `_due_times` heap, its own publications with an
        # expiry, its consumers' wants, a holder dead): no call at all per idle one, so
        # thousands of offline MQTT sessions cost nothing, and what another process does in
        # one waits for the full pass (up to a minute). The heap alone for queues would make
        # other processes' expiries and locks that late; `_quiet` for subscriptions would
        # cost two stats per session per sweep.
        check_flag("full", full)
        now = self._clock.now()
        limits = self.options.limits
        retention, purge = limits.processed_retention, False
        if retention is not None and now >= self._next_purge:
            # processed/ is the big folder (a day of traffic, by default): looked through at
            # most every hundredth of the retention (a minute at most), not every sweep.
            purge, self._next_purge = True, now + min(60.0, retention / 100)
        with self._lock:
            expiring, self._expiring = self._expiring, set()
            dropped, self._expiring_dropped = self._expiring_dropped, False
        # A full pass visits every subscription, with the root listed again for its queues.
        every = full or purge or dropped or now >= self._next_full
        # By path: a folder made by hand may not be escaped.
        queues = self._queue_folders(fresh=every)
        try:
            reports, subscriptions, recordless = self._visit(
                now, queues, expiring, every=every, purge=purge
            )
        except BaseException:
            # What it learnt of (copies with an expiry, subscribers gone) is lost with it:
            # the next sweep visits every subscription.
            self._next_full = 0.0
            raise
        if abandoned := remove_stale_staging(self.root, now=now, age=limits.working_ttl):
            log.warning(
                "deleted %d publication staging file(s) older than %s (a process died "
                "while publishing)",
                abandoned,
                spelled(limits.working_ttl),
            )
        # What a process killed while deleting a queue or subscription left: one scandir
        # of a folder most roots lack. A delete under way there too is only helped along.
        clear_deleting(self.root)
        if subscriptions is not None and self._spares is not None:
            # Files this process's puts keep open whose messages another process deleted
            # since (`boxmq delete` beside a server, a purge): their blocks are freed now,
            # not when newer puts push them out (a root that went quiet: never).
            self._spares.close_gone()
        elif self._spares is not None:
            self._spares.close_gone_due()  # subscriptions that ended here since the last one
        # The subscriptions' folders only at a full pass: they take a listing of them all.
        if subscriptions is not None:
            # First: a stale temporary deleted would make its folder young again.
            self._remove_abandoned(recordless, now=now, age=limits.working_ttl)
        self._remove_stale_temporaries(
            # The dropboxes' own folders at the full pass too: an hour old, a minute later.
            [*(path for _, path in queues), *subscriptions] if subscriptions is not None else [],
            now=now,
            age=limits.working_ttl,
            full=subscriptions is not None,
        )
        self.intake.expire()
        if now >= self._next_retained:
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
            untold, pinned = self.intake.tombstones_kept()
            if untold is not None:
                before = min(before, untold)
            if expired := self.topics.remove_expired_retained(
                now, tombstones_before=before, pinned=pinned
            ):
                log.info("deleted %d expired retained message(s)", expired)
        if now >= self._next_collect:
            # It lists every file of the root, so not every sweep; a file's grace period
            # (an hour) is what keeps it safe, not this rhythm.
            self._next_collect = now + COLLECT_EVERY
            try:
                self.side_files.collect(lambda: referenced(self.root), now=now)
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
            if _seen([self.root]) == seen and not any(map(is_dropbox, others)):
                return queues
        settled = _settled([self.root])  # before the listing: a change meanwhile is seen next
        others = []
        queues = dropbox_folders(self.root, others)
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
    ) -> tuple[dict[str, SweepReport], list[str] | None, list[str]]:
        """Sweep the queues and the subscriptions due (all of them, `every`: a full pass);
        the reports, and in a full pass every subscription's folder and those without a
        record readable then."""
        subscriptions: list[str] | None
        recordless: list[str] = []
        queue_paths = {path for _, path in queues}
        if every:
            boxes, subscriptions, recordless = self._every_subscription(now, queues)
            quiet: dict[str, _Quiet] = {}
        else:
            quiet = self._quiet
            boxes = [
                *(queue for queue in queues if not _unchanged(quiet.get(queue[1]), now)),
                *self._due_subscriptions(now, expiring, queue_paths),
            ]
            subscriptions = None
        # What the visits below find is kept, for the queues (a full pass makes it again).
        self._quiet = quiet
        settle = not self.options.polling
        limits = self.options.limits
        reports = {}
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
                self._due.pop(path, None)
                self._held_by_others.discard(path)
                self._next_expiry.pop(path, None)
                continue  # a queue or subscription being created or deleted right now
            expire = now >= (expiry := self._next_expiry.get(path, 0.0))
            reports[name] = report = sweep(
                dropbox,
                now=now,
                policy=self.options.policy,
                limits=limits,
                name=name,
                purge=purge,
                expire=expire,
                markers=self.intake.markers,
            )
            if expire:
                # A big target/ is looked through for expirations less often, in proportion
                # to its size (a minute at most): 400,000 names take about 0.4 s, 40 % of a
                # core at a sweep each second on a root where nothing happens. No consumer
                # gets an expired message meanwhile (each process expires what it offers).
                expiry = now + min(60.0, report.looked / EXPIRY_NAMES_PER_SECOND)
            self._next_expiry[path] = expiry
            # Not looked through for expirations, it is due for that look at the latest.
            due = report.due if expire else min(report.due, expiry)
            if seen is not None and not report:  # (what it did changed its folders)
                quiet[path] = _Quiet(folders, seen, due, report.holders - {self._token})
            if path not in queue_paths:
                self._keep_due(path, name, due, report.holders - {self._token})
        if subscriptions is not None:  # done: a pass the disk failed is made again next time
            self._next_full = now + FULL_SWEEP_EVERY
            # Those of folders deleted since are forgotten (every folder was visited).
            visited = {path for _, path in boxes}
            self._next_expiry = {p: t for p, t in self._next_expiry.items() if p in visited}
        return reports, subscriptions, recordless

    def _every_subscription(
        self, now: float, queues: list[tuple[str, str]]
    ) -> tuple[list[tuple[str, str]], list[str], list[str]]:
        """A full pass: the dropboxes to visit (every queue and subscription), every
        subscription's folder, its record written or not, and those whose record was not
        read (none yet, or unreadable: `_remove_abandoned`)."""
        named: set[str] = set()
        kept: list[tuple[SubscriptionRecord, str]] = []
        self.topics.sweep_subscriptions(named, kept)
        self._named = named - {self._token}
        subscriptions = list(subscription_folders(self.root))  # with a record or not (yet)
        # Each record read once a pass: those sweep_subscriptions read and left are taken
        # from it (a record's filter is its folder's, never changed by a rewrite).
        recorded = {path: record for record, path in kept}
        self._due, self._due_times, self._held_by_others = {}, [], set()  # made again
        self._wanting_visits()  # a rest before this pass is no news for the next one
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
        self, now: float, expiring: set[str], queue_paths: set[str]
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

        if self._named and dead(self._named):
            named: set[str] = set()
            self.topics.sweep_subscriptions(named)
            self._named = named - {self._token}
        receiving = self._wanting_visits()
        maybe = expiring | receiving
        times = self._due_times
        with self._lock:  # (a sweep of another thread pops too)
            while times and times[0][0] <= now:
                maybe.add(heapq.heappop(times)[1])
        maybe.update(self._held_by_others)
        visits = []
        for path in maybe:
            if (entry := self._due.get(path)) is None:
                continue  # made since the last full pass (below), or gone
            name, due, holders = entry
            if due <= now or path in expiring or path in receiving or dead(holders):
                visits.append((name, path))
        # Made since the last full pass. Not a queue: it has no record to read, and its
        # consumer receiving put it here at every sweep (a failed open a second).
        for path in (expiring | receiving) - self._due.keys() - queue_paths:
            if (record := read_record(path)) is not None:
                visits.append((_swept_as(record, path), path))
        return visits

    def _keep_due(self, path: str, name: str, due: float, holders: frozenset[str]) -> None:
        """What a visit of the subscription at `path` found due (`_due`)."""
        self._due[path] = (name, due, holders)
        if due < math.inf:
            heapq.heappush(self._due_times, (due, path))
        if holders:
            self._held_by_others.add(path)
        else:
            self._held_by_others.discard(path)

    def _wanting_visits(self) -> set[str]:
        """The folders of the live queues that want a visit (LiveQueue.wants_sweep), asked
        only of those that said they may since the last ask: the others would say no."""
        with self._wanting_lock:
            wanting, self._wanting = self._wanting, set()
        with self._lock:  # one forgotten since (its queue deleted) is not asked
            asked = [live for live in wanting if self._live.get(live.path) is live]
        return {live.path for live in asked if live.wants_sweep()}

    def _may_want_visit(self, live: LiveQueue) -> None:
        with self._wanting_lock:
            self._wanting.add(live)

    def sweep_temporaries_in(self, folder: str | os.PathLike[str]) -> None:
        """Have the next sweep and every full one (a minute apart in serve) also delete the
        stale temporaries in `folder`: a door's own records under the root (MQTT's
        sessions), of which the box knows nothing.

        Checked here, not at the sweep: a folder that is no path made every later sweep
        raise, and one outside the root had them delete others' `.tmp-*` files."""
        path = _str_path(folder, "a folder to sweep is a str or a path")
        folder = os.path.abspath(path)
        root = os.path.realpath(self.root)
        if os.path.commonpath([os.path.realpath(folder), root]) != root:
            raise InvalidArgument(
                f"{path!r} is not under the root {self.root!r}: sweep_temporaries_in is for "
                "records of your own there"
            )
        with self._lock:
            if folder not in self._door_folders:
                self._door_folders = (*self._door_folders, folder)
                self._new_door_folders = (*self._new_door_folders, folder)

    def _remove_stale_temporaries(
        self, dropboxes: list[str], *, now: float, age: float, full: bool
    ) -> None:
        """What writes of whole files left when their process died before the rename: in
        the dropboxes (settings, subscription records) and the root's own folders (the topic
        root's generation, the retained store, ...), and the doors' records. Those and the
        topic root hold a file or folder a session or filter (an MQTT broker's thousands):
        listed at a full pass only, not each second, for a file `abandon_after` old (an
        hour by default), a minute later is as good."""
        folders = [
            *dropboxes,
            os.path.join(self.root, TOPIC_ROOT, RETAINED_DIR),
            incoming_working(self.root),  # an exactly-once message's, before its `received`
            self.side_files.path,
            self.intake.markers,
        ]
        with self._lock:
            # One just given is looked through at the next sweep (what a crash before this
            # start left), full pass or not.
            doors = self._door_folders if full else self._new_door_folders
            self._new_door_folders = ()
        if full:
            folders.append(os.path.join(self.root, TOPIC_ROOT))
        folders += doors
        if removed := remove_stale_temporaries(folders, now=now, age=age):
            log.warning(
                "deleted %d temporary file(s) older than %s (a process died while writing)",
                removed,
                spelled(age),
            )

    def _remove_abandoned(self, recordless: list[str], *, now: float, age: float) -> None:
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
                path in self._told_recordless or self._tell_recordless(path)
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

    def _tell_recordless(self, path: str) -> bool:
        """Tell the other processes that the subscription folder at `path`, found without a
        record, is none: what an end killed after deleting the record and before the
        generation's write left (an unsubscribe, a session's end, a group's last leave).
        They went on routing copies into it until they restarted, and their copies kept it
        young, so that `remove_if_ended` never took it. Whether they were told: if not, the
        next full pass tries again (the failure logged once, not at each)."""
        if (error := self.topics.tell_others(path)) is None:
            self._telling.recovered()
            return True
        if self._telling.news(error):
            log.warning(
                "%s: the processes on the root that route to %s, a subscription folder "
                "without a record, are not told it is none (tried again at each full "
                "sweep): %s",
                generation_file(self.root),
                path,
                store_failure(error),
            )
        return False

    def _live_queue(
        self, name: str, dropbox: Dropbox, group: str | None = None, shown: str | None = None
    ) -> LiveQueue:
        """The engine of `dropbox` in this process; `shown`: a subscription's name for its
        messages' `queue` (one dropbox is one filter and subscriber: whoever makes it first
        gives the same)."""
        with self._lock:
            if self._closed:
                raise self._refused()
            live = self._live.get(dropbox.path)
            if live is None:
                options = self.options
                if group is not None and group in self._group_dispatch:
                    policy = replace(options.policy, dispatch=self._group_dispatch[group])
                    options = replace(options, policy=policy)
                live = LiveQueue(
                    name,
                    dropbox,
                    options=options,
                    clock=self._clock,
                    token=self._token,
                    v5=self.v5,
                    shown=shown,
                    listeners=self._listeners,
                    remind=self._remind,
                    stirred=self._may_want_visit,
                )
                self._live[dropbox.path] = live
            return live

    def listen_offered(self, listener: Callable[[list[ConsumerId], str], object]) -> None:
        """Have `listener` told the consumers attached in this process to a queue or
        subscription that this process just put messages in, and the `queue` that its
        messages name (from the putting thread: it must be quick and thread-safe). Other
        processes' messages are not told: a receive reads them from the watcher. It is
        called with no lock of the box or the queue held, so it may call back into them (a
        receive, from its thread or another)."""
        self._listeners.append(listener)

    def forget_offered(self, listener: Callable[[list[ConsumerId], str], object]) -> None:
        """`listener` is told no more (`listen_offered`)."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def read_news(self) -> None:
        """For a process that never waits in a receive but receives with `receive_ready`
        from those its `listen_offered` listeners name (an MQTT broker): tell them the
        consumers of each queue and subscription open here that may have something new,
        with no look at the others. Those whose folders had files come or go since their
        last receive (what other processes put or took: one read of the process's inotify
        instance, store/watch.py; this process's own puts, told as they were put, and its
        own claims are no news), and those whose engine has something due now (a lock's
        end, a delayed message: each asks when it has one) or whose folder is polled (no
        inotify: told at each call). What they got back from another consumer (a detach, an
        unlock) was told as it came. A look at each of its receivers now and then is still
        their caller's, for what a watch misses (the receive's own rescans and sweeps)."""
        read_news()
        now = self._clock.now()
        due: list[LiveQueue] = []
        with self._reading:
            reminders = self._reminders
            while reminders and reminders[0][0] <= now:
                if (live := heapq.heappop(reminders)[2]()) is not None:
                    due.append(live)
        for live in due:  # out of the lock: each takes its own
            live.tell()

    def _remind(self, when: float, live: LiveQueue) -> None:
        with self._reading:
            heapq.heappush(self._reminders, (when, next(self._reminder_numbers), weakref.ref(live)))

    def _refused(self) -> Closed:
        return Closed(f"this box of {self.root} is closed: open the root again")

    def close(self) -> None:
        """Release every lock this box's consumers hold, then stop the committer: from then
        on a put, a publish, a consumer or a subscription raises Closed. A release the disk
        refuses (a read-only root) closes the rest all the same, then raises: it left the
        other queues' receives waiting forever, and the committer running."""
        with self._lock:
            self._closed = True
            live, self._live = list(self._live.values()), {}
            topics = self._topics
        refused: OSError | None = None
        for queue in live:
            try:
                queue.close()
            except OSError as error:
                refused = refused or error
        if topics is not None:
            topics.close_memory()
        self._committer.close()
        if self._spares is not None:
            self._spares.close()  # its own files, for other processes to reuse
        if refused is not None:
            raise refused

    def __del__(self) -> None:
        # A box dropped without close(): said as an unclosed file is (ResourceWarning), then
        # closed as close() would, in a thread of its own: the collector may run this in
        # any thread, one that holds a lock close() takes (the committer's, the inotify
        # instance's) among them. A daemon, as the committer's: a close that hangs (a hung
        # network disk) must not keep the process from ending, which lets go of its locks
        # for the other processes all the same (their owner is gone).
        if getattr(self, "_closed", True):  # closed, or never opened (__init__ raised)
            return
        if sys.is_finalizing():
            return  # the process ends: a thread started now hung it (nothing to close it for)
        try:
            warnings.warn(f"unclosed box {self.root!r}", ResourceWarning, stacklevel=1, source=self)
        finally:
            with contextlib.suppress(RuntimeError):  # no new thread at interpreter shutdown
                closing = threading.Thread(
                    target=self._close_dropped, name="boxmq-unclosed", daemon=True
                )
                closing.start()

    def _close_dropped(self) -> None:
        # Whatever it raises has nobody to be raised to: logged, not left to the thread's
        # hook (a traceback on stderr, past the application's log).
        try:
            self.close()
        except OSError as error:  # as close() raises it
            log.warning("closing a box of %s dropped unclosed: %s", self.root, error)
        except Exception:
            log.exception("closing a box of %s dropped unclosed", self.root)

    def __enter__(self) -> Box:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_PROCESSING, _TARGET = State.PROCESSING.value, State.TARGET.value

# A folder's inode and mtime (ns), or None where there is none.
_Seen = FolderSeen | None


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


def open(
    root: str | os.PathLike[str],
    *,
    fsync: str = "always",
    fsync_interval: float | None = None,
    max_deliveries: int | None = 5,
    dispatch: str = "round-robin",
    group_dispatch: Mapping[str, str] | None = None,
    keep_processed: bool = True,
    processed_retention: float | None = 86400.0,
    abandon_after: float = 3600.0,
    polling: bool = False,
    exactly_once: ExactlyOnceLimits | None = None,
    clock: Clock | None = None,
    spares: int = 256,
) -> Box:
    """Open (and create) a boxmq root.

    fsync: "always" (a put returns once on disk; concurrent puts share one flush), "interval"
    (flushed every `fsync_interval` seconds, 1 when None; refused with another policy) or
    "never". dispatch: "round-robin", "least-in-flight", "sticky", "hash-by-key" or
    "random", for every queue and share group; group_dispatch: a strategy for some share
    groups, by group name. max_deliveries: deliveries before a message goes to error/
    (None: no limit). keep_processed: ack moves to processed/ (kept `processed_retention`
    seconds, None: forever) rather than deleting.
    abandon_after: seconds after which a file a producer left in working/ is deleted.
    polling: never use inotify (for roots shared over NFS). spares: how many files of
    deleted messages this process keeps for later puts to overwrite (cheaper than creating
    files; 0: delete at once, when an acknowledged body must not stay on disk;
    docs/operations.md).
    """
    try:
        policy = FsyncPolicy(fsync)
    except ValueError:
        raise InvalidArgument(
            f"fsync {fsync!r}: choose one of {', '.join(p.value for p in FsyncPolicy)}"
        ) from None
    path = _root_path(root)
    # Each of these was taken as it came and failed later, deep inside, or never: a list of
    # pairs for group_dispatch or an int for exactly_once with an AttributeError here, a
    # clock without now() at the first put, keep_processed="no" as True.
    if group_dispatch is not None and not isinstance(group_dispatch, Mapping):
        raise InvalidArgument(
            f"group_dispatch maps share group names to strategies (a dict), not {group_dispatch!r}"
        )
    if exactly_once is not None and not isinstance(exactly_once, ExactlyOnceLimits):
        raise InvalidArgument(
            f"exactly_once is a boxmq.core.ExactlyOnceLimits or None, not {exactly_once!r}"
        )
    if clock is not None and not callable(getattr(clock, "now", None)):
        raise InvalidArgument(f"clock is a boxmq.Clock (it has now()) or None, not {clock!r}")
    check_flag("keep_processed", keep_processed)
    check_flag("polling", polling)
    strategy = dispatch_named(dispatch)
    by_group = {group: dispatch_named(name) for group, name in (group_dispatch or {}).items()}
    for group in by_group:
        if not isinstance(group, str) or not is_share_name(group):
            # No client's $share/<group>/ can name it (MQTT 5.0 §4.8.2): its strategy would
            # never be used, without a word. The config file's [share_groups] refuses it too.
            raise InvalidArgument(
                f"group_dispatch: {group!r} is not a share group's name, which is not empty "
                "and has no '/', '+' or '#': for clients of $share/etl/sensors/#, give 'etl'"
            )
    if fsync_interval is None:
        fsync_interval = 1.0
    elif policy is not FsyncPolicy.INTERVAL:
        # Taken without a word and never used, as the config file's was before serve warned
        # of it: the caller who meant a flush each 5 s got one at every put ("always").
        raise InvalidArgument(
            f'fsync_interval is only used with fsync="interval", not {fsync!r}: '
            'give fsync="interval", or leave fsync_interval out'
        )
    # Checked here, where the caller hears of it: later, a text ("1d") failed the first sweep,
    # and the committing thread under "interval", which then flushed nothing; 0 made it flush
    # without a pause, a negative retention purged processed/ at once.
    check_seconds("fsync_interval", fsync_interval)
    if processed_retention is not None:
        check_seconds("processed_retention (None: forever)", processed_retention, zero=True)
    check_seconds("abandon_after", abandon_after, zero=True)
    check_count("spares", spares, least=0)
    options = LiveOptions(
        policy=QueuePolicy(max_deliveries=max_deliveries, dispatch=strategy),
        limits=SweepLimits(
            working_ttl=abandon_after,
            pending_ttl=(exactly_once or ExactlyOnceLimits()).pending_ttl,
            processed_retention=processed_retention,
        ),
        polling=polling,
        keep_processed=keep_processed,
    )
    return Box(
        path,
        fsync=policy,
        fsync_interval=fsync_interval,
        options=options,
        clock=clock or SystemClock(),
        exactly_once=exactly_once or ExactlyOnceLimits(),
        spares=spares,
        group_dispatch=by_group,
    )


def _str_path(value: object, refused: str) -> str:
    """`value` as a str path (a str, or a path of one); InvalidArgument("{refused}, not ...")
    for anything else, where os.fspath or a later makedirs raised a TypeError (None, 5) or
    took bytes."""
    path = value
    with contextlib.suppress(TypeError):
        path = os.fspath(value)  # type: ignore[call-overload]
    if not isinstance(path, str):
        raise InvalidArgument(f"{refused}, not {value!r}")
    return path


def _root_path(root: str | os.PathLike[str]) -> str:
    """`root` as a str path; InvalidArgument for what is none: "" opened the current
    directory as the root, None, 5 or bytes raised a TypeError from os.fspath or makedirs."""
    path = _str_path(root, "the root is a folder's path, a str or a path")
    if not path or "\0" in path:
        raise InvalidArgument(
            f"the root {path!r} is empty or holds NUL: give a folder's path ('.' for this one)"
        )
    return path


def _make_root(root: str) -> None:
    """Make the folder `root` (and its parents). Where a file stands in the way, makedirs'
    FileExistsError or NotADirectoryError said neither which path nor what to do."""
    try:
        os.makedirs(root, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:
        raise InvalidArgument(_in_the_way(root)) from error


def _in_the_way(root: str) -> str:
    """What stands where `root` (absolute) or one of its parents must be a folder."""
    blocker = in_the_way(root) or root
    where = f"the root {root}" + ("" if blocker == root else f" cannot be made: {blocker}")
    if os.path.islink(blocker):
        return (
            f"{where} is a symbolic link to {os.readlink(blocker)}, which is no folder; make "
            "that folder, or give another path"
        )
    return f"{where} is a file, not a folder: give a folder's path, or move the file away"


def dispatch_named(name: str) -> Dispatch:
    """The strategy called `name` ("round-robin", ...); InvalidArgument lists them."""
    try:
        return Dispatch(name.lower().replace("_", "-"))
    except (ValueError, AttributeError, TypeError):  # TypeError: bytes' replace of a str
        names = ", ".join(d.value for d in Dispatch)
        raise InvalidArgument(f"dispatch {name!r}: choose one of {names}") from None
