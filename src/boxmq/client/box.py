"""`boxmq.open(root)`: a root of queues, used directly on its files, with no server.

Any number of processes (and threads) may open the same root: every change is a rename, and
two claims of one file cannot both win. Within one process, each opened Box keeps one engine
per queue for its consumers; `close()` releases whatever they still hold.

Box is the root object of the embedded API (docs/api.md): it opens the root, makes its queues
and subscriptions' Queue views, deletes queues and closes, and leaves the rest to what it keeps:
- the engines of this process, their reminders and listeners (Engines, client/engines.py);
- the housekeeping sweeps and what they keep between them (Housekeeping, client/housekeeping.py);
- publish/subscribe (Topics, client/topics.py) and exactly once (AssuredIntake,
  client/assured.py), made on first use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from boxmq import log_lines
from boxmq.client.engines import Engines, Listener, closed_box
from boxmq.client.housekeeping import Housekeeping
from boxmq.client.live_queue import LiveQueue
from boxmq.client.live_state import LiveOptions
from boxmq.client.queue import KnownNames, Queue, QueueCounts, counts_of
from boxmq.client.sweeps import SweepLimits, SweepReport
from boxmq.clock import Clock, SystemClock
from boxmq.core import Dispatch, ExactlyOnceLimits, QueuePolicy, parse_filter
from boxmq.core.durations import check_seconds
from boxmq.core.topics import about_sys, is_share_name, sys_unserved
from boxmq.errors import (
    Closed,
    InvalidArgument,
    QueueNotFound,
    check_count,
    check_flag,
)
from boxmq.forks import renew_in_children
from boxmq.ids import IdFactory
from boxmq.model import ConsumerId, MessageId, Property, PropertyValue
from boxmq.store.commit import Committer, FsyncPolicy
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import (
    State,
    broken_target,
    dropbox_folders,
    escaped_name,
    in_the_way,
    is_dropbox,
    list_dropboxes,
    queue_path,
    remove_dropbox,
)
from boxmq.store.process import process_token
from boxmq.store.side_files import SideFiles
from boxmq.store.spares import Spares
from boxmq.store.v5_properties import V5Reader

if TYPE_CHECKING:  # imported where first used: see Box.topics
    from boxmq.client.assured import AssuredIntake
    from boxmq.client.subscriber import Subscriber
    from boxmq.client.topics import Topics

__all__ = ["Box", "open"]

log = logging.getLogger("boxmq")
# Each record of boxmq on one line, whatever handler the application writes it with: a
# newline in a queue's name, a client id or a topic began a line of its own.
log_lines.install()


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
        self._options = options
        self._clock = clock
        self._committer = Committer(self.root, fsync, interval=fsync_interval)
        self._ids = IdFactory(clock)
        self._token = process_token()
        self._spares = Spares(self.root, self._token, limit=spares) if spares > 0 else None
        self._lock = threading.Lock()
        # What `get` decoded of each queue's target/ names, by dropbox path: kept here, not
        # on a Queue, so that `box.queue(name).get()` in a loop decodes each name once too.
        self._known_names: dict[str, KnownNames] = {}
        self._topics: Topics | None = None
        self._intake: AssuredIntake | None = None
        self._exactly_once = exactly_once
        self._closed = False
        # Metadata too long for a file name (MQTT v5 properties), named by its messages.
        self.side_files = SideFiles(self.root)
        self.v5 = V5Reader(self.side_files)  # those properties, for readers that are not MQTT
        self._engines = Engines(
            self.root,
            options=options,
            clock=clock,
            token=self._token,
            v5=self.v5,
            group_dispatch=group_dispatch or {},
            owner=self,
        )
        self._housekeeping = Housekeeping(
            self.root,
            self._committer,
            options=options,
            clock=clock,
            token=self._token,
            spares=self._spares,
            side_files=self.side_files,
        )
        renew_in_children(self)

    def renew_in_child(self) -> None:
        """In a forked child: the consumers, subscriptions and locks of this box are the
        parent's (its watchers' events, its locks' token); the child makes its own as it
        uses the box, under its own token. A consumer made before the fork stays the
        parent's: in the child it raises Closed (docs/python.md, "Processes")."""
        self._lock = threading.Lock()
        self._token = process_token()
        self._engines.renew_in_child(self._token)
        self._topics = None
        self._intake = None
        self._housekeeping.renew_in_child(self._token)

    @property
    def options(self) -> LiveOptions:
        """The settings of its engines and sweeps."""
        return self._options

    @options.setter
    def options(self, options: LiveOptions) -> None:
        """Settings set on an open box rule the engines made and the sweeps run from then on
        (a test sets a long rescan_interval so), as when the box read its own each time: its
        engines and housekeeping, which keep their own reference, are given them."""
        self._options = options
        self._engines.options = options
        self._housekeeping.options = options

    @property
    def fsync(self) -> FsyncPolicy:
        return self._committer.policy

    @property
    def fsync_interval(self) -> float:
        """Seconds between flushes under fsync="interval" (1 unless given; unused otherwise)."""
        return self._committer.interval

    @property
    def exactly_once(self) -> ExactlyOnceLimits:
        """The limits of the exactly-once intake (the XMPP door reads its trusted_sources)."""
        return self._exactly_once

    def now(self) -> float:
        """Now, epoch seconds, as this box's clock says (the `clock` given to `open`): the time
        its lock deadlines, expirations and delays are read against, so a reader that says
        whether a lock ended or a delay passed (`boxmq peek`) agrees with `counts()`."""
        return self._clock.now()

    def queue(self, name: str, *, create: bool = True) -> Queue:
        """The queue `name`; created (its folders made) unless `create=False`."""
        check_flag("create", create)
        path = queue_path(self.root, name)
        try:
            # Its own look at the folder (no_dropbox) says whether there is one: looked at
            # here first too, a queue's target/ was looked at twice.
            dropbox = Dropbox(path, self._committer, create=create, spares=self._spares)
        except QueueNotFound:
            raise QueueNotFound(self._missing(name, path)) from None
        except NotADirectoryError as error:
            # Its folders cannot be made under a file standing where the queue's folder goes:
            # the errno against `<queue>/working` sent the user to another --data folder.
            if not _is_file(path):
                raise
            raise InvalidArgument(f"queue {name!r} cannot be made: {_a_file(path)}") from error
        return self._queue_of(name, dropbox, lambda: self._engines.live(name, dropbox))

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
            lambda: self._engines.live(dropbox.path, dropbox, parsed.share_group, str(parsed)),
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
            opened=lambda: self._engines.opened(dropbox.path),
            limits=self.options.limits,
            v5=self.v5,
            side_files=self.side_files,
            check_getter=check_getter,
            known=self._known_names.setdefault(dropbox.path, {}),
        )

    def _missing(self, name: str, path: str) -> str:
        """Why `name` is no queue; for a folder made by hand under the name unescaped (listed
        by `boxmq ls`), how to reach it."""
        if (target := broken_target(path)) is not None:
            # Its folder is there, target/ replaced by a file (a script's `>`, an editor's
            # save): "no queue" sent the user looking for a queue that is there.
            return (
                f"queue {name!r} is broken: {target} is a file, not a folder (every queue "
                "has one, for its ready messages); move that file away and make the folder "
                f"(docs/file-format.md), or `boxmq delete {name}` deletes the queue"
            )
        if _is_file(path):
            # `ls` lists no file: "see boxmq ls" sent the user looking for a queue elsewhere.
            return f"no queue {name!r}: {_a_file(path)}"
        unescaped = os.path.join(self.root, name)
        if os.sep not in name and name not in (".", "..") and is_dropbox(unescaped):
            if (queue := escaped_name(name)) is not None:
                # The name a folder has on disk (`ls data` shows my%20jobs, the folder of
                # `put 'my jobs'`): to rename boxmq's own folder was no advice to give.
                return (
                    f"no queue {name!r}: {unescaped} is the folder of the queue {queue!r} "
                    "(a queue's folder is its name escaped: docs/file-format.md); give "
                    f"{queue!r}, as `boxmq ls` lists it"
                )
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
                    live_for=lambda dropbox, group, shown: self._engines.live(
                        dropbox.path, dropbox, group, shown
                    ),
                    refuse_if_closed=self._engines.refuse_if_closed,
                    opened=self._engines.opened,
                    forget=self._forget_live,
                    ended=self._housekeeping.ended,
                    spares=self._spares,
                    v5=self.v5,
                    side_files=self.side_files,
                    expiring=self._housekeeping.published_expiring,
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
        # Refused once closed by Topics.subscribe, before its records are written, and taken
        # back there if the close comes after them (a check here too raced it all the same).
        made = self.topics.subscribe(
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
        if about_sys(made.filter.filter):
            # mqtt.md's figures, asked of the API, waited in silence. Logged as the API's other
            # warnings are: a warnings.warn raises under `filterwarnings = error`, and the
            # subscription is a right one when an MQTT client an ACL lets publish there sends.
            # The doors that tell their users themselves (the CLI, MQTT) call topics.subscribe.
            log.warning("%s subscribed to %s, %s", subscriber, filter, sys_unserved("it"))
        return made

    def unsubscribe(self, filter: str, subscriber: str) -> bool:
        return self.topics.unsubscribe(filter, subscriber)

    def unsubscribe_many(self, filters: Iterable[str], subscriber: str) -> list[bool]:
        return self.topics.unsubscribe_many(filters, subscriber)

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
                    fan_out=lambda files, superseded, marked, routes: self.topics.send_files(
                        files, superseded=superseded, marked=marked, routes=routes
                    ),
                    route_of=lambda envelope, source: self.topics.exactly_once_route(
                        envelope, source
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
        identities: tuple[str, ...] = (),
    ) -> bool:
        """Exactly once, step 1: store it (flushed) for `source`'s `msg_id`. True if new; False
        for a repeat, which stores nothing and must be answered again all the same.
        expires_in: it expires that many seconds from now, waiting for step 2 or after.

        reclaim=True: an id whose message was delivered already names a new one (urn:xmpp:qos
        lets a sender reuse an id once `deliver` succeeded); repeats of `deliver` are still
        recognised. By default a delivered id is remembered for `done_ttl` and a new `assured`
        under it is taken for a late repeat.

        identities: other names `source` is known by, any of which `trusted_sources` may list
        (the XMPP door gives a sender's bare JID, its full JID being the source)."""
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
            identities=identities,
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
            counts[name] = counts_of(dropbox, self._clock.now())
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
            if counted is None:
                return
            try:
                taken = Dropbox(moved, self._committer, create=False, complete=False)
            except QueueNotFound:  # a broken one (target/ a file): what its other folders held
                counted.append(_counts_by_hand(moved))
                return
            # At the box's clock, as counts() and `ls` count: an ended lock is ready, not locked.
            counted.append(counts_of(taken, self._clock.now()))

        removed = remove_dropbox(self.root, path, taken=count)
        if removed and self._spares is not None:
            self._spares.close_gone()  # its messages' files that puts here keep open
        return removed

    def _forget_live(self, path: str) -> None:
        """A dropbox about to be deleted (a queue, a plain subscription, a share group its last
        member left): its consumers in this process are closed, and its engine here is
        forgotten, so that one made again at its path starts afresh: no lock, delivery count
        or name of the old folder's messages is taken for the new one's (a watcher of another
        process follows the path by itself: store/watch.py)."""
        self._engines.forget(path)
        self._known_names.pop(path, None)

    def sweep(self, *, full: bool = True) -> dict[str, SweepReport]:
        """One round of housekeeping over every queue and subscription (what `boxmq serve`
        runs on a timer); share groups whose members all died, and subscriptions that were to
        end with a process that died, are ended.

        full=False (serve's timer): every queue but those whose folders stayed as their
        last visit saw them, with nothing due yet; of the subscriptions only those where
        something may be due: a lock's deadline or an expiry the last visit saw, a copy with
        an expiry published by this process, a consumer here receiving from it where
        something changed since (LiveQueue.wants_sweep), a process holding locks or
        subscriptions that died; and every queue and subscription once every
        FULL_SWEEP_EVERY seconds, for what other processes did meanwhile. Offline MQTT
        sessions, connected ones and idle queues with nothing due then cost next to nothing
        (docs/operations.md; how: client/housekeeping.py)."""
        return self._housekeeping.sweep(
            full=full, topics=self.topics, intake=self.intake, wanting=self._engines.wanting_visits
        )

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
        self._housekeeping.sweep_temporaries_in(folder)

    def listen_offered(self, listener: Listener) -> None:
        """Have `listener` told the consumers attached in this process to a queue or
        subscription that this process just put messages in, and the `queue` that its
        messages name (from the putting thread: it must be quick and thread-safe). Other
        processes' messages are not told: a receive reads them from the watcher. It is
        called with no lock of the box or the queue held, so it may call back into them (a
        receive, from its thread or another)."""
        if not callable(listener):
            # Taken, it failed at each later put, once its message was stored: a producer
            # that sent it again on the TypeError stored it twice.
            raise InvalidArgument(
                f"listen_offered takes a callable, listener(consumers, queue), not {listener!r}"
            )
        self._engines.listen(listener)

    def forget_offered(self, listener: Listener) -> None:
        """`listener` is told no more (`listen_offered`)."""
        self._engines.unlisten(listener)

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
        self._engines.read_news()

    def _refused(self) -> Closed:
        return closed_box(self.root)

    def close(self) -> None:
        """Release every lock this box's consumers hold, then stop the committer: from then
        on a put, a publish, a consumer or a subscription raises Closed. A release the disk
        refuses (a read-only root) closes the rest all the same, then raises: it left the
        other queues' receives waiting forever, and the committer running."""
        with self._lock:
            self._closed = True
            topics = self._topics
        live = self._engines.close()
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
    expired_retention: float | None = None,
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
    seconds, None: forever) rather than deleting. expired_retention: seconds an expired
    message stays in expired/ before a sweep deletes it (None: forever).
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
            f"fsync {fsync!r}: choose one of {', '.join(FsyncPolicy.words())}"
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
    if expired_retention is not None:
        check_seconds("expired_retention (None: forever)", expired_retention, zero=True)
    check_seconds("abandon_after", abandon_after, zero=True)
    check_count("spares", spares, least=0)
    options = LiveOptions(
        policy=QueuePolicy(max_deliveries=max_deliveries, dispatch=strategy),
        limits=SweepLimits(
            working_ttl=abandon_after,
            pending_ttl=(exactly_once or ExactlyOnceLimits()).pending_ttl,
            processed_retention=processed_retention,
            expired_retention=expired_retention,
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


def _is_file(path: str) -> bool:
    """Something, no folder (a file, a link to none), stands at `path`."""
    return os.path.lexists(path) and not os.path.isdir(path)


def _a_file(path: str) -> str:
    return f"{path} is a file, not a queue's folder: move it away (a put then makes the queue)"


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


def _counts_by_hand(path: str) -> QueueCounts:
    """The files in each folder of a dropbox whose target/ is no folder (Dropbox refuses it),
    for the count of its delete: none ready, since target/ held none."""

    def files(state: State) -> int:
        try:
            return len(os.listdir(os.path.join(path, state.value)))
        except (FileNotFoundError, NotADirectoryError):
            return 0

    return QueueCounts(
        ready=0,
        locked=files(State.PROCESSING),
        done=files(State.PROCESSED),
        dead=files(State.ERROR),
        expired=files(State.EXPIRED),
        uncommitted=files(State.WORKING),
    )
