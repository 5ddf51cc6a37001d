"""Publish/subscribe on a root: topics routed to subscriptions, each subscription a dropbox.

A publish routes the topic through the core's Router and puts one copy into every matching
subscription: a share group's dropbox (its members compete, the queue engine's locks apply), a
durable subscriber's dropbox, or the memory inbox of a non-durable subscriber in this process.
The body is written once and hard-linked into every dropbox (DESIGN.md §2). The Router is
rebuilt from the folders whenever another process changed the set of subscriptions.

This module keeps the subscriptions: made, listed, looked up and ended, their retained copies,
and the sweep of those a dead process left. Publishing is client/publishing.py (Topics is a
Publisher), where a publication goes client/routes.py, a subscription's receiving end
client/subscriber.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace

from boxmq.client.consumer import Consumer
from boxmq.client.copies import (
    LEVELS,
    at_qos,
    qos_level,
    retained_envelope,
    sent_retained_envelope,
)
from boxmq.client.live_queue import LiveQueue
from boxmq.client.memory import MemoryDelivery, MemoryInbox
from boxmq.client.message import qos_of
from boxmq.client.path_locks import PathLocks
from boxmq.client.publishing import Publisher
from boxmq.client.queue import QueueCounts, counts_of
from boxmq.client.routes import Routes
from boxmq.client.subscriber import Subscriber
from boxmq.client.sweeps import release_locks_of
from boxmq.clock import Clock
from boxmq.core import QoS, Subscription, TopicFilter, matcher, parse_filter, validate_topic
from boxmq.core.queue import check_consumer_limits
from boxmq.core.topics import refuse_sys
from boxmq.errors import (
    Closed,
    InvalidArgument,
    InvalidName,
    QueueNotFound,
    check_flag,
    check_listed,
    store_failure,
)
from boxmq.ids import IdFactory
from boxmq.model import QOS, RETAINED, ConsumerId, Envelope, PropertyType
from boxmq.store import topics as layout
from boxmq.store.commit import Committer, FsyncPolicy, Move, discard_unsent
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import no_dropbox
from boxmq.store.names import check_consumer_name, decode_lenient, encode
from boxmq.store.process import process_alive
from boxmq.store.retained import Retained, Version
from boxmq.store.side_files import SideFiles
from boxmq.store.spares import Spares
from boxmq.store.v5_properties import V5Reader

__all__ = ["SubscriptionInfo", "Topics", "check_filter", "check_not_sys", "check_topic_name"]

log = logging.getLogger("boxmq")

_LiveFor = Callable[[Dropbox, str | None, str], LiveQueue]  # a dropbox, its group, its name
_Opened = Callable[[str], LiveQueue | None]  # a dropbox's path: its live queue, if open here
_Forget = Callable[[str], None]  # a dropbox's path: its live queue here closed and forgotten


def check_filter(filter: str) -> None:
    """Refuse (InvalidArgument, saying what is wrong) a filter a subscribe would refuse: for a
    door that checks one before it subscribes (Spark's load(), which must not import the core)."""
    parse_filter(filter)


def check_topic_name(topic: str) -> None:
    """Refuse (InvalidArgument, saying what is wrong) a topic name a publish would refuse: for
    a door that checks one before it publishes (Spark's sink, which must not import the core).
    A `$SYS` one too (`refuse_sys`), as a user's publish refuses it."""
    validate_topic(topic)
    refuse_sys(topic)


def check_not_sys(topic: str) -> None:
    """InvalidTopic for a topic under `$SYS`, the MQTT server's own (`refuse_sys`): for a door
    that checks the rest of a topic name itself, once per message (Spark's sink, row by row)."""
    refuse_sys(topic)


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """A durable subscription or share group as `boxmq ls` shows it."""

    filter: str  # as subscribed: "$share/<group>/<filter>" or "<filter>"
    subscriber: str | None  # the plain subscriber; None for a share group
    members: tuple[str, ...]  # a share group's members
    counts: QueueCounts


class Topics(Publisher):
    """The topics of one root, as one Box in one process sees and changes them: publishing
    (Publisher, client/publishing.py) and the subscriptions (this module)."""

    def __init__(
        self,
        root: str,
        committer: Committer,
        *,
        ids: IdFactory,
        clock: Clock,
        token: str,
        live_for: _LiveFor,
        refuse_if_closed: Callable[[], None] = lambda: None,
        opened: _Opened = lambda path: None,
        forget: _Forget = lambda path: None,
        ended: _Forget = lambda path: None,
        spares: Spares | None = None,
        v5: V5Reader | None = None,
        side_files: SideFiles | None = None,
        expiring: Callable[[list[str]], object] = lambda paths: None,
    ) -> None:
        super().__init__(
            root,
            committer,
            ids=ids,
            clock=clock,
            token=token,
            routes=Routes(root),
            opened=opened,
            spares=spares,
            side_files=side_files,
            expiring=expiring,
        )
        self._root = root
        self._v5 = v5
        self._live_for = live_for
        # Closed for a closed box, before a subscription's records are written: `live_for`
        # refused only after them, and left a subscription collecting for nobody.
        self._refuse_if_closed = refuse_if_closed
        self._forget = forget
        self._ended = ended  # a subscription's folder deleted: told after (`_remove`)
        # A dropbox is made (a subscribe, a share group joined) and deleted (an unsubscribe,
        # the last member of a group leaving, a sweep) under its path's lock: a share group's
        # member may join on one thread (a broker's disk threads) while its last member leaves
        # on another, and the join must come wholly before the leave (which then keeps the
        # group, the engine the joiner attached to included) or wholly after it (a new group,
        # read by a new engine, watching the new folder), never between its check that no
        # member is left and its deletion (path_locks.py).
        self._dropboxes = PathLocks()
        # A share-group member's own granted QoS, by (dropbox, member): the group's copies
        # are stored at the highest any member was granted (Subscriber caps at this one).
        self._grants: dict[tuple[str, ConsumerId], QoS] = {}
        # A thread's `ending_together`: what it ended, told and deleted when it is over.
        self._together = threading.local()

    # -- subscribing -----------------------------------------------------------------------------

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
        """Subscribe `subscriber` to `filter` ("$share/<group>/<filter>" joins a share group).

        send_retained=False: the caller sends the retained messages itself, or none (an MQTT
        session that is resumed, or whose Retain Handling says not to). process_bound=False:
        a subscriber that outlives this process (an MQTT persistent session): no sweep removes
        its share-group membership (`close` or `unsubscribe` does), and its locks name no
        process, so that what it holds stays its own through a restart, until the lock
        timeout: `detach` leaves them, and its next subscribe takes them back.
        ends_with_process=True: a plain durable subscription that this process means to
        remove when it exits (`boxmq subscribe`): it records this process, so that a sweep
        removes it, with what it holds, once the process died without removing it (SIGKILL,
        a crash). A later subscribe of the same subscriber and filter without it makes the
        subscription outlive its process again."""
        self._refuse_if_closed()
        parsed = parse_filter(filter)
        name = check_consumer_name(subscriber, _SUBSCRIBER)
        for flag, value in (
            ("durable", durable),
            ("no_local", no_local),
            ("send_retained", send_retained),
            ("process_bound", process_bound),
            ("ends_with_process", ends_with_process),
        ):
            check_flag(flag, value)
        subscription = Subscription(
            name, parsed, qos_level(qos), parsed.shared or durable, no_local
        )
        # Before the records are written: refused by `attach` after them, it left a durable
        # subscription (or a membership) collecting for a subscriber that never came. A memory
        # one holds no locks, but took what durable=True refuses without a word.
        check_consumer_limits(max_in_flight, lock_timeout)
        # One routing entry per subscriber and filter in this Box: a memory subscription
        # beside a durable one of the same name would take its place there, and the durable
        # one would miss this Box's publications (all of them, once the memory one closed).
        if not subscription.durable:
            if self.has_subscription(filter, name):
                raise InvalidArgument(
                    f"{subscriber!r} has a durable subscription to {filter!r}: a memory one "
                    "of the same name would hide it from this process's publications; "
                    "unsubscribe it first, or subscribe under another name"
                )
            return self._subscribe_in_memory(subscription)
        if not parsed.shared:
            open_in_memory = self._routes.has_memory(name, str(parsed))
            if open_in_memory:
                raise InvalidArgument(
                    f"{subscriber!r} has a memory subscription to {filter!r} open in this "
                    "Box: close it first, or subscribe durably under another name"
                )
        owner = self._token if ends_with_process and not parsed.shared else ""
        token = None if process_bound else ""
        # Registered, opened and attached in one step of its dropbox (see __init__).
        path = self._path_of(parsed, name)
        with self._joining(path):
            if not parsed.shared and send_retained:
                with self._retained_lock.exclusive():  # see its comment in Publisher.__init__
                    dropbox, made = self._registered(subscription, token=token, owner=owner)
                    try:
                        self._send_retained(parsed, dropbox, subscription.qos)
                    except OSError:  # a full disk: refused, so not made (`_unregister`)
                        if made:
                            self._unregister(dropbox.path, None, made=True)
                        raise
            else:
                dropbox, made = self._registered(subscription, token=token, owner=owner)
            try:
                live = self._live_for(dropbox, parsed.share_group, str(parsed))
            except Closed:
                # The box closed since the check above, after the records were written: the
                # caller told Closed, they stayed, a subscription (or a member) collecting
                # for a subscriber that was never given it. Taken back as a refused disk's
                # step is (a group, once the member this made left it, only if no other is
                # in it: a group without members is the sweep's to end anyway); a close after
                # this returns a whole one, whose receive says Closed.
                self._unregister(path, name if parsed.shared and made else None, made=made)
                raise
            if live.attached(name):  # said here: attach's own names a consumer and a folder
                raise InvalidArgument(
                    f"subscriber {subscriber!r} has {filter!r} open in this Box already: "
                    "close that Subscriber first, or subscribe under another name"
                )
            live.attach(
                name,
                max_in_flight=max_in_flight,
                lock_timeout=lock_timeout,
                outlives_process=not process_bound,
            )
        consumer = Consumer(live, name)
        return Subscriber(
            parsed,
            name,
            consumer=consumer,
            on_close=lambda: self._left(parsed, name, path),
            granted=self._granted_to(path, name, subscription.qos) if parsed.shared else None,
            # One look at its member's file: another process may end the membership while the
            # group lives on (`unsubscribe`), and the Subscriber then stops taking its messages.
            still_member=(lambda: layout.is_member(path, name)) if parsed.shared else None,
        )

    def resubscribe(
        self,
        filter: str,
        subscriber: str,
        *,
        qos: int = 1,
        no_local: bool = False,
        process_bound: bool = True,
    ) -> None:
        """Change the QoS or No Local of a durable subscription (or share-group membership)
        this process has open, in place: the messages it holds stay locked to it, so the flow
        is not interrupted (MQTT 5.0 §3.8.4). Messages already waiting keep their QoS."""
        self._refuse_if_closed()
        parsed = parse_filter(filter)
        name = check_consumer_name(subscriber, _SUBSCRIBER)
        check_flag("no_local", no_local)  # else written into the record as it came
        check_flag("process_bound", process_bound)
        subscription = Subscription(name, parsed, qos_level(qos), True, no_local)
        with self._joining(self._path_of(parsed, name)):
            path, _, _ = self._register(subscription, token=None if process_bound else "")
        if parsed.shared:
            self._grants[path, name] = subscription.qos  # its Subscriber's cap from now on

    def _granted_to(self, path: str, name: ConsumerId, qos: QoS) -> Callable[[], QoS | None]:
        """A member's cap, read at each receive: `resubscribe` may change it."""
        key = (path, name)
        self._grants[key] = qos
        return lambda: self._grants.get(key)

    def attach_dropbox(self, filter: str, subscriber: str, *, qos: int = 1) -> str:
        """Register a durable subscription (or share-group member) that something other than
        a Consumer will read, such as a Spark stream, and return its dropbox's path.

        The member is bound to no process, so it stays until `unsubscribe`.
        """
        self._refuse_if_closed()
        parsed = parse_filter(filter)
        subscription = Subscription(
            check_consumer_name(subscriber, _SUBSCRIBER), parsed, qos_level(qos), True
        )
        with self._joining(self._path_of(parsed, subscription.subscriber)):
            return self._registered(subscription, token="")[0].path

    def subscriptions(self, *, now: float | None = None) -> list[SubscriptionInfo]:
        """Every durable subscription and share group under the root, with its counts as
        `Queue.counts()` gives them: a lock whose deadline passed (at `now`, epoch s; the
        box's clock's now when None) is ready (the subscription rows of `boxmq ls`, as its
        queue rows count). The files as they lie counted it locked, `ls` ready."""
        if now is None:
            now = self._clock.now()
        found = []
        for path in layout.subscription_folders(self._root):
            if (record := layout.read_record(path)) is None:
                if unreadable := layout.unreadable_record(path):
                    log.warning("%s", layout.unreadable_told(*unreadable))
                continue  # or being made or deleted right now
            try:
                # Nothing made here (create, complete): a subscription whose last member left,
                # or that was unsubscribed, right after its record was read is being deleted,
                # and folders made again under that rmtree were a FileExistsError, or stayed.
                dropbox = Dropbox(path, self._committer, create=False, complete=False)
            except QueueNotFound:
                continue  # deleted right now: the next listing does not show it either
            parsed = TopicFilter(record.filter, record.group)
            members = tuple(sorted(layout.member_names(path))) if record.group else ()
            counts = counts_of(dropbox, now)
            found.append(SubscriptionInfo(str(parsed), record.subscriber, members, counts))
        return sorted(found, key=lambda info: (info.filter, info.subscriber or ""))

    def subscribed(self, subscriber: str) -> list[tuple[str, layout.SubscriptionRecord]]:
        """The durable subscriptions and share-group memberships of `subscriber`, each as
        subscribed ("$share/<group>/<filter>" or "<filter>") with its record: what
        `subscriptions` tells of them without counting every dropbox's messages."""
        found = []
        for record, path in layout.read_records(self._root):
            if record.subscriber == subscriber or (
                record.group is not None and layout.is_member(path, subscriber)
            ):
                found.append((str(TopicFilter(record.filter, record.group)), record))
        return found

    def subscribed_among(
        self, subscriber: str, texts: Iterable[str]
    ) -> list[tuple[str, layout.SubscriptionRecord]]:
        """`subscribed`, of the filters `texts` (as subscribed) alone: a look at each one's
        own folder (its record, and for a share group this member's file), where
        `subscribed` reads the record of every subscription on the root. For a caller that
        knows what it may hold: an MQTT session's record names its filters."""
        found = []
        for text in dict.fromkeys(texts):
            try:
                parsed = parse_filter(text)
                path = self._path_of(parsed, None if parsed.shared else subscriber)
            except InvalidArgument:
                continue  # no folder holds it: no subscription under it on disk
            record = layout.read_record(path)
            if (
                record is None  # none, or a record damaged: `subscribed` leaves it out too
                or record.filter != parsed.filter  # a shortened folder name's other owner
                or record.group != parsed.share_group
            ):
                continue
            if (
                record.subscriber == subscriber
                if record.group is None
                else layout.is_member(path, subscriber)
            ):
                found.append((str(TopicFilter(record.filter, record.group)), record))
        return found

    def holds_any(self, subscriber: str) -> bool:
        """Whether `subscriber` has a durable subscription or share-group membership, as the
        root's subscriptions were at their last change read (one stat while none came since):
        False spares a caller `subscribed`'s read of every subscription's record, which every
        clean MQTT CONNECT made (a few names have some; most, a device's client id, none)."""
        return self._routes.holds_any(subscriber)

    def record_of(self, filter: str, subscriber: str) -> layout.SubscriptionRecord | None:
        """The record of `subscriber`'s durable subscription to `filter` (for
        "$share/<group>/<filter>", the group's, whoever its members), read from its own file,
        not from every subscription's as `subscribed`; None if there is none on disk."""
        return layout.read_record(self._path_of(parse_filter(filter), subscriber))

    def bound_to(self, filter: str, subscriber: str) -> str:
        """The process (its token, store/process.py) that `subscriber`'s subscription to
        `filter` ends with: a plain one's owner (SubscriptionRecord.owner), a share-group
        membership's process (a process-bound member); "" for one that outlives every
        process, or none on disk."""
        parsed = parse_filter(filter)
        path = self._path_of(parsed, subscriber)
        if parsed.shared:
            return layout.member_token(path, subscriber) or ""
        record = layout.read_record(path)
        return "" if record is None else record.owner

    def dropbox_of(self, filter: str, subscriber: str | None = None) -> Dropbox:
        """The dropbox of a share group ("$share/<group>/<filter>") or of `subscriber`'s
        durable subscription to `filter`, as `subscriptions` lists them: QueueNotFound if there
        is none on disk."""
        parsed = parse_filter(filter)
        if parsed.shared and subscriber is not None:
            raise InvalidArgument(
                f"{filter!r} is a share group: it has members, not a subscriber; name it alone"
            )
        if not parsed.shared and subscriber is None:
            raise InvalidArgument(
                f"{filter!r} is no share group: a durable subscription is named by its filter "
                "and its subscriber (see `boxmq ls`)"
            )
        if subscriber is not None and not isinstance(subscriber, str):  # "no ... of 5 to"
            raise InvalidName(_no_str(subscriber))
        path = self._path_of(parsed, None if parsed.shared else subscriber)
        try:
            return Dropbox(path, self._committer, create=False, spares=self._spares)
        except QueueNotFound:
            whose = "share group" if parsed.shared else f"subscription of {subscriber!r} to"
            raise QueueNotFound(
                f"no {whose} {filter!r} under {self._root} (see `boxmq ls`)"
            ) from None

    def members_of(self, group: str, filter: str) -> list[str]:
        """The members of a share group, as registered on disk (any process)."""
        path = self._path_of(TopicFilter(filter, group), None)
        return sorted(layout.member_names(path))

    def has_subscription(self, filter: str, subscriber: str) -> bool:
        """Whether a durable subscription of `subscriber` to `filter` exists on disk (any
        process made it); for "$share/<group>/<filter>", whether `subscriber` is a member."""
        parsed = parse_filter(filter)
        path = self._path_of(parsed, subscriber)
        if parsed.shared:
            return layout.is_member(path, subscriber)
        return os.path.isdir(path)

    def reader_named(self, filter: str, subscriber: str | None, consumer: str) -> str | None:
        """Who `consumer` is to the share group `filter` (`subscriber` None) or to
        `subscriber`'s durable subscription to it, as an error says it: "a member of the share
        group <filter>", "the subscriber of <filter>"; None when it is neither. A lock taken
        by hand (`get`) under such a name could not be told from that reader's own."""
        if subscriber is None:
            if self.has_subscription(filter, consumer):
                return f"a member of the share group {filter}"
        elif consumer == subscriber:
            return f"the subscriber of {filter}"
        return None

    def _remove(self, path: str) -> None:
        """Delete the subscription at `path` (layout.remove_subscription), its engine here
        first (its locks, its view of the folder), so that the same subscription made again
        is read afresh, its retained copies at once; and close the files of its messages that
        this process's puts keep open (Spares.close_gone_soon: at once, or at the next sweep
        when many end together): else their blocks stayed held until newer puts pushed them
        out. Called with the dropbox held (`self._dropboxes.held`)."""
        self._forget(path)
        if (together := self._ending()) is not None:
            layout.remove_record(path)  # its folder after the generation's write (`_end`)
            together.removing[path] = None
            return
        layout.remove_subscription(self._root, path)
        self._ended(path)
        if self._spares is not None:
            self._spares.close_gone_soon()

    @contextlib.contextmanager
    def ending_together(self) -> Iterator[None]:
        """Within it, the subscriptions this thread ends (`unsubscribe`, a share group's
        member leaving) are told to the processes on the root in one write of the generation,
        when it is over: an MQTT UNSUBSCRIBE of 1,000 filters wrote it 1,000 times, each a
        flock, a read and a rename (`layout.bump_generation`'s `paths`). Each is ended at
        once by its record's deletion; its folder, with its messages, is deleted after that
        write, so that a process killed in between leaves folders without records, which the
        sweep tells of and deletes, never a deleted folder that the other processes still
        route to, untold. Nested, the outermost one tells."""
        if self._ending() is not None:
            yield
            return
        together = self._together.ending = _EndingTogether()
        try:
            yield
        finally:
            self._together.ending = None
            self._end(together)

    def unsubscribe_many(self, filters: Iterable[str], subscriber: str) -> list[bool]:
        """`unsubscribe` of each of `filters`, told to the other processes together
        (`ending_together`): whether each was a subscription. The first failure is raised,
        the filters before it unsubscribed."""
        check_listed(
            "unsubscribe_many",
            filters,
            "filters",
            alone="use unsubscribe(filter, subscriber), or unsubscribe_many([filter], ...)",
        )
        with self.ending_together():
            return [self.unsubscribe(filter, subscriber) for filter in filters]

    def _ending(self) -> _EndingTogether | None:
        ending: _EndingTogether | None = getattr(self._together, "ending", None)
        return ending

    def _end(self, together: _EndingTogether) -> None:
        """What an `ending_together` ended: told in one write, then the folders of the
        subscriptions it deleted the records of deleted, each unless subscribed again since
        (`layout.remove_ended`). A folder the disk keeps (EIO) is the sweep's, as a folder
        an end killed left (`remove_if_ended`): the subscription has ended all the same."""
        if together.told:
            self._told_gone(*together.told)
        for path in together.removing:
            try:
                with self._dropboxes.held(path):
                    layout.remove_ended(self._root, path)
            except OSError as error:
                log.warning(
                    "%s ended, but its folder stays, with its messages, until the sweep "
                    "of `boxmq serve` deletes it: %s",
                    path,
                    store_failure(error),
                )
            self._ended(path)  # as `_remove` tells it (the box's sweep forgets its due time)
        if together.removing and self._spares is not None:
            self._spares.close_gone_soon()

    def unsubscribe(self, filter: str, subscriber: str) -> bool:
        """End a durable subscription: its dropbox and undelivered messages are deleted."""
        parsed = parse_filter(filter)
        if not isinstance(subscriber, str):  # 5 or None: False, as for a name never subscribed
            raise InvalidName(_no_str(subscriber))
        path = self._path_of(parsed, subscriber)
        if parsed.shared:
            return self._left(parsed, ConsumerId(subscriber), path)
        with self._dropboxes.held(path):
            if not os.path.isdir(path):
                return False
            self._remove(path)  # its engine here too (`_remove` says why)
        self._told_gone(path)
        return True

    def _told_gone(self, *paths: str) -> None:
        """`Routes.changed` after a subscription (or a member of it) at `paths` was deleted:
        done, whatever the generation's write meets (ENOSPC, EMFILE). Raised, an unsubscribe
        the disk had done was told failed (MQTT: UNSUBACK 0x97, 'the subscription stays'),
        and this process routed to the folder gone until the next change (found by a
        disk-full hunt). Other processes are told at the next change; meanwhile their copies
        into it are passed by (store/fanout.py), as for any subscription deleted as they
        publish. Within `ending_together`, told when it is over, with the others."""
        if (together := self._ending()) is not None:
            together.told.update(dict.fromkeys(paths))
            return
        try:
            self._routes.changed_together(paths)
        except OSError as error:  # this process reads every record at its next look
            log.warning(
                "%s ended, but the other processes on the root are told only at the next "
                "change of the subscriptions: %s",
                ", ".join(paths) if len(paths) <= 3 else f"{paths[0]} and {len(paths) - 1} more",
                store_failure(error),
            )

    def _registered(
        self, subscription: Subscription, token: str | None = None, owner: str = ""
    ) -> tuple[Dropbox, bool]:
        """`_register`, and the subscription's dropbox opened; whether it is new."""
        path, written, made = self._register(subscription, token, owner)
        if written:
            # write_record has just made its state folders: a Dropbox making them looked at
            # each again (seven stats a new subscription). One found on disk may lack one
            # (removed by hand), which the Dropbox makes again.
            opened = Dropbox(
                path, self._committer, create=False, complete=False, spares=self._spares
            )
            return opened, made
        return Dropbox(path, self._committer, spares=self._spares), made

    def remove_left_behind(self, filter: str, subscriber: str) -> bool:
        """Delete the folder of `subscriber`'s plain subscription to `filter` if it has no
        record: what an unsubscribe killed between its record's deletion and its folder's
        move left (`layout.remove_subscription`), the messages it held still in it. No
        look finds it (`subscribed` reads records), and the next subscribe of the filter
        under that name took it over, those messages with it. A folder with a record is
        left alone (a subscription made since, or a shortened name's other owner).
        Whether there was one."""
        try:
            parsed = parse_filter(filter)
            path = self._path_of(parsed, subscriber)
        except InvalidArgument:
            return False  # no folder holds it
        if parsed.shared:
            return False  # a group's folder is every member's: its last leave deletes it
        with self._dropboxes.held(path):
            if not os.path.isdir(path) or layout.has_record(path):
                return False
            self._remove(path)
        self._told_gone(path)  # deleted: done, whatever the generation's write meets
        return True

    def _register(
        self, subscription: Subscription, token: str | None = None, owner: str = ""
    ) -> tuple[str, bool, bool]:
        """The subscription's record (and a share group's member, bound to `token`: this
        process if None, none if ""), written unless already on disk; its dropbox's path,
        whether the record was written (its dropbox's folders made with it), and whether
        the subscription is new (a plain one, or the member). What it made is taken back
        if the disk refuses a step (`_unregister`).
        `owner`: the process a plain subscription ends with (SubscriptionRecord.owner).
        Called with the dropbox held (`_joining`): nobody else writes its record meanwhile."""
        parsed = subscription.filter
        group = parsed.share_group
        path = self._path_of(parsed, subscription.subscriber)
        record = layout.SubscriptionRecord(
            filter=parsed.filter,
            group=group,
            subscriber=None if group else subscription.subscriber,
            qos=int(subscription.qos),
            no_local=subscription.no_local,
            owner=owner,
        )
        # Under fsync=always on disk before this returns: a caller tells its client that the
        # subscription stands (an MQTT SUBACK). What is on disk already is not written again
        # (a session resumed after a restart registers every subscription it finds).
        flush = self._committer.policy is FsyncPolicy.ALWAYS
        existing = layout.read_record(path)
        # Whether this subscribe makes the subscription, which a refusal then takes back: not
        # over a record there that no boxmq reads (damaged), whose messages are kept.
        made = existing is None and not layout.has_record(path)
        if existing is None and layout.clear_left_behind(self._root, path):
            # An end killed after its record went (the session record may not name the
            # filter any more, so nothing else clears it): the new subscription took over
            # the old one's messages. This process's engine of the folder knew them too.
            self._forget(path)
        if group is not None and existing is not None and existing.qos > record.qos:
            # A group's copies are stored at the highest QoS any member was granted, and each
            # member is sent at most its own (mqtt.stored.publish_of): a member granted QoS 0
            # must not take QoS 1 from the others (MQTT 5.0 §3.8.4, MQTT-234).
            record = replace(record, qos=existing.qos)
        written = changed = existing != record
        joined = None  # the member this call adds to a share group
        try:
            if changed:
                layout.write_record(path, record, flush=flush)
            if group is not None:
                member, bound = subscription.subscriber, self._token if token is None else token
                was = layout.member_token(path, member)
                if was != bound:
                    joined = member if was is None else None
                    layout.add_member(path, member, bound, flush=flush)
                    changed = True
            if changed:
                self._routes.changed(path, flush=flush, record=record)  # on disk now: not read back
        except OSError:
            self._unregister(path, joined, made=made)
            raise
        return path, written, made if group is None else joined is not None

    def _unregister(self, path: str, member: str | None, *, made: bool) -> None:
        """Take back what a subscribe the disk refused (ENOSPC at a step after the record)
        registered at `path`: the share group's `member` it added, and the subscription if
        it `made` it (a group: unless other members joined it). Its caller is told it was
        refused (MQTT: SUBACK 0x97), and it stayed, collecting every publication for nobody,
        which a persistent MQTT session took as its own at the next start (found by a
        disk-full hunt). Deleting needs no space; a step that fails all the same leaves
        the rest to the sweeps, and the caller raises the disk's first refusal.
        What stays (a subscription that was there, its record maybe rewritten) is read
        again at this process's next look: its router kept the entry of the record before,
        the refused generation told nobody, and a new QoS or No Local went unrouted here
        until the next change of the subscriptions."""
        try:
            if member is not None:
                layout.remove_member(path, member)
            if made and not layout.member_names(path):
                self._remove(path)
                self._routes.changed(path)
                return
        except OSError:
            pass
        self._routes.forget()  # this process reads every record at its next look

    def _joining(self, path: str) -> AbstractContextManager[None]:
        """Hold the dropbox at `path` for a join (its folder made first), against the threads
        of this process and the other processes on the root that join or leave it."""
        flush = self._committer.policy is FsyncPolicy.ALWAYS
        return self._dropboxes.held(path, make=True, flush=flush)

    def _path_of(self, parsed: TopicFilter, subscriber: str | None) -> str:
        """The dropbox of a share group (whoever the member), or of a plain subscription."""
        key = layout.subscription_key(parsed.share_group, subscriber)
        try:
            return layout.subscription_path(self._root, parsed.filter, key)
        except InvalidName:
            if parsed.share_group is None and subscriber is not None:
                # Its folder is "client.<subscriber>": name the subscriber the user gave (a
                # lone surrogate, a NUL), not that folder.
                check_consumer_name(subscriber, _SUBSCRIBER)
            raise

    def _left(self, parsed: TopicFilter, member: ConsumerId, path: str) -> bool:
        """A share group member leaves; the last one out deletes the group (MQTT-234), and
        its engine here (see __init__: a member joining meanwhile waits, and makes it anew).
        Whether it was a member: False too when there is no such group (never made, or
        ended already: by its last member's unsubscribe in another process, by a sweep).

        The last member of this process out forgets the engine here too, though members of
        other processes keep the group: the last of them may delete it there, and a member of
        this process joining afterwards would be read by an engine that knows the old
        folder's messages (its watcher follows the path to the new folder: store/watch.py)."""
        if not parsed.shared:
            return False  # a durable subscription outlives its consumer; unsubscribe ends it
        with self._dropboxes.held(path):
            self._grants.pop((path, member), None)
            try:
                dropbox = Dropbox(path, self._committer, create=False)
            except QueueNotFound:
                return False  # nothing to leave, nor to tell other processes of
            was_member = layout.is_member(path, member)
            release_locks_of(dropbox, member)
            layout.remove_member(path, member)
            ended = not layout.member_names(path)
            if ended:
                self._remove(path)
            # Nobody joins meanwhile (the lock): idle stays idle until it is forgotten.
            elif (live := self._opened(path)) is not None and live.idle():
                self._forget(path)
        self._told_gone(path)
        return was_member

    def _subscribe_in_memory(self, subscription: Subscription) -> Subscriber:
        inbox = MemoryInbox()
        key = (subscription.subscriber, str(subscription.filter))
        if not self._routes.add_memory(key, subscription, inbox):
            # As a durable one open twice: the second took the first's routing entry, and
            # the first's close took it out, so that neither got anything, and nothing said.
            raise InvalidArgument(
                f"subscriber {subscription.subscriber!r} has {key[1]!r} open in this Box "
                "already: close that Subscriber first, or subscribe under another name"
            )
        now = self._clock.now()
        for retained in self._matching_retained(subscription.filter):
            # Sent from its file, as to the MQTT door's subscribers (`retained_reading`): with
            # the v5 properties its header names, which no dropbox copy's name has room for.
            envelope = sent_retained_envelope(retained)
            if envelope.expired(now):
                continue  # not sent (MQTT 5.0 §3.3.2.3.3), as a dropbox's copy expires there
            flagged = envelope.with_property(RETAINED, PropertyType.BOOLEAN, True)
            qos = min(qos_of(envelope.property_value(QOS)), subscription.qos)  # as _send_retained
            inbox.push(MemoryDelivery(at_qos(flagged, LEVELS[qos]), retained.body))

        def close() -> None:
            inbox.close()
            self._routes.remove_memory(key, subscription)

        return Subscriber(
            subscription.filter,
            subscription.subscriber,
            inbox=inbox,
            on_close=close,
            v5=self._v5,
            now=self._clock.now,
        )

    def send_retained(self, filter: str, subscriber: str, *, qos: int = 1) -> None:
        """Write the retained messages `filter` matches into `subscriber`'s durable
        subscription to it, as a new subscription gets them: for a caller that decides when
        they are due (an MQTT SUBSCRIBE's Retain Handling), so they wait on disk like any
        other message of that subscription. Nothing for a share group (MQTT-234)."""
        parsed = parse_filter(filter)
        if parsed.shared:
            return
        path = self._path_of(parsed, check_consumer_name(subscriber, _SUBSCRIBER))
        dropbox = Dropbox(path, self._committer, create=False, spares=self._spares)
        with self._retained_lock.exclusive():  # never an older retained message after a newer one
            try:
                self._send_retained(parsed, dropbox, qos_level(qos), apart=True)
            except FileNotFoundError:
                # The subscription ended meanwhile (an MQTT session's end or takeover, while
                # a worker wrote its SUBSCRIBE's copies): nobody is left to get them, as for
                # a publication's copy (Move._send_one_copy); no fault of the file system.
                if not no_dropbox(path):
                    raise
                log.debug("%s ended before its retained messages were sent: dropped", path)

    def _send_retained(
        self, parsed: TopicFilter, dropbox: Dropbox, granted: QoS, *, apart: bool = False
    ) -> None:
        """A new plain subscription gets the retained messages it matches (§3.3.1.3).
        `apart`: each copy under an id of its own, beside the message's (IdFactory.beside),
        for a subscription that may hold its live copy: a SUBSCRIBE that replaces one sends
        them again (MQTT-3.8.4-4), and under the message's own id the copy waited, unsent,
        until the client acknowledged the live one in flight (the queue holds one message
        per id). A new subscription's copies keep it, as they did: the lock keeps publishes
        from routing to it before its retained messages are in it."""
        moves: list[Move] = []
        now = self._clock.now()
        expiring = False
        try:
            for retained in self._matching_retained(parsed):
                envelope = retained_envelope(retained)
                if envelope.expired(now):
                    continue  # never sent (MQTT 5.0 §3.3.2.3.3): a copy would only expire
                envelope = envelope.with_property(RETAINED, PropertyType.BOOLEAN, True)
                qos = min(qos_of(envelope.property_value(QOS)), granted)
                envelope = at_qos(envelope.without_property(QOS), QoS(qos))
                if apart:
                    envelope = replace(envelope, message_id=self._ids.beside(envelope.message_id))
                moves.append(dropbox.write_apart(encode(envelope, as_read=True), retained.body))
                expiring = expiring or bool(envelope.expiration)
            if moves:
                dropbox.send(moves)
        except OSError:
            # The copies written and not sent are deleted: one in a spare of the pool stayed
            # in .spare/ (a body under a name nobody reads), its descriptor kept open.
            if discard_unsent(moves):
                dropbox.close_gone()
            raise
        if expiring:
            self._expiring([dropbox.path])

    def _matching_retained(self, parsed: TopicFilter) -> Iterator[Retained]:
        if parsed.shared:
            return  # MQTT-234 B: never to shared subscriptions
        if not _WILDCARDS.intersection(parsed.filter):  # one topic: its one file, by its name
            retained = self._retained.get(parsed.filter)
            if retained is not None:
                yield retained
            return
        yield from self._retained.matching(matcher(parsed.filter))

    def retained_reading(self, filter: str) -> Iterator[tuple[Envelope, bytes]]:
        """The retained messages a new subscription to `filter` would get (none if shared),
        naming the side file of their v5 properties where their file's header does
        (`sent_retained_envelope`), each file read when it is reached: a caller may take a
        few here and the rest in another thread (one thread at a time)."""
        for found in self._matching_retained(parse_filter(filter)):
            yield sent_retained_envelope(found), found.body

    def retained_sizes(self, filter: str) -> Iterator[tuple[Envelope, int]]:
        """`retained_reading` with each body's length in place of the body, which is never
        read (`boxmq retained`: one read of each file's header, and an fstat)."""
        parsed = parse_filter(filter)
        if parsed.shared:
            return  # MQTT-234 B: never to shared subscriptions
        found: Iterable[tuple[Retained, int]]
        if not _WILDCARDS.intersection(parsed.filter):  # one topic: its one file, by its name
            one = self._retained.get_sized(parsed.filter)
            found = () if one is None else (one,)
        else:
            found = self._retained.matching_sized(matcher(parsed.filter))
        for retained, size in found:
            yield sent_retained_envelope(retained), size

    def has_durable(self, topic: str, source: str | None = None) -> bool:
        """Whether a publish to `topic` by `source` would be written into any dropbox (a
        durable subscription or a share group), so a caller can keep the others in memory."""
        return self._routes.has_durable(topic, source)

    def remove_expired_retained(
        self,
        now: float,
        *,
        tombstones_before: float | None = None,
        pinned: Mapping[str, float] | None = None,
    ) -> int:
        """Delete the retained messages whose Message Expiry passed (never sent any more):
        how many; and the deletes' tombstones written before `tombstones_before`, if given,
        and before its time in `pinned` for a topic there (RetainedStore.remove_if)."""
        return self._retained.remove_if(
            lambda found: decode_lenient(found.name)[0].expired(now),
            tombstones_before=tombstones_before,
            pinned=pinned,
        )

    def retained_version(self, topic: str) -> Version | None:
        """Which file the topic's retained file is now, for an exactly-once `deliver` to
        write in its marker (see `send_files`'s `marked`); None if there is none."""
        return self._retained.version(topic)

    def retained(self, topic: str) -> tuple[Envelope, bytes] | None:
        """The topic's retained message as a subscriber gets it (`retained_reading`), naming
        the side file its file's header names: without it, one on a long topic read back
        here had none of the v5 properties every other reader shows. None if it has none."""
        found = self._retained.get(topic)
        return None if found is None else (sent_retained_envelope(found), found.body)

    def tell_others(self, path: str | None) -> OSError | None:
        """Tell every process that the subscription at `path` (several: None) changed
        (Routes.tell_others): the error the generation's write met, if it did."""
        return self._routes.tell_others(path)

    def close_memory(self) -> None:
        """End every memory subscription's receive (the box closes): a thread waiting in
        one, which nothing else would wake, ends its iteration as at the Subscriber's close."""
        for inbox in self._routes.memory_inboxes():
            inbox.close()

    def sweep_subscriptions(
        self,
        named: set[str] | None = None,
        kept: list[tuple[layout.SubscriptionRecord, str]] | None = None,
    ) -> int:
        """End what a dead process left: share-group members whose process died (a group
        left empty is deleted), and plain subscriptions that were to end with a process
        that died without removing them (SubscriptionRecord.owner). How many ended.
        `named`, when given, gets the tokens of the processes the subscriptions left end
        with: until one of them dies, another look finds nothing more to end. `kept`, when
        given, gets the (record, path) of each subscription it read and left."""
        ended = 0
        for record, path in list(layout.read_records(self._root)):
            if record.group is None:
                gone = self._end_if_owner_died(record, path)
                ended += gone
                if named is not None and record.owner and not gone:
                    named.add(record.owner)
                if kept is not None and not gone:
                    kept.append((record, path))
                continue
            with self._dropboxes.held(path):  # not while a member of this process joins
                dead = 0
                for member, token in layout.members(path).items():
                    if token and process_alive(token) is False:
                        layout.remove_member(path, member)
                        dead += 1
                    elif token and named is not None:
                        named.add(token)
                if layout.member_names(path):
                    if kept is not None:
                        kept.append((record, path))
                    continue
                self._remove(path)
            ended += 1
            # Said as a plain subscription's end is (`_end_if_owner_died`), where it went
            # unsaid with what it held; not counted, which would list its folders.
            log.warning(
                "share group %r of %s ended: %s; deleted with its messages",
                record.group,
                record.filter,
                f"the process(es) of its last {dead} member(s) died without leaving it"
                if dead
                else "no member left in it",
            )
        untold = self._routes.untold  # an earlier write failed: this sweep tells of it again
        if (ended or untold) and (error := self.tell_others(None)) is not None and ended:
            # Raised, it failed the sweep with the subscriptions ended; said once, here, with
            # what it means (the next sweep, or change, tries again, and says nothing more).
            log.warning(
                "%s not replaced: the other processes on the root go on copying messages "
                "to the %d subscription(s) this sweep ended until it is written (tried "
                "again at the next sweep or change of the subscriptions): %s",
                layout.generation_file(self._root),
                ended,
                store_failure(error),
            )
        return ended

    def _end_if_owner_died(self, record: layout.SubscriptionRecord, path: str) -> int:
        # Only a process of this host can be told dead (store/process.py): one of another
        # host sharing the root keeps its subscriptions until it, or `unsubscribe`, ends them.
        if not record.owner or process_alive(record.owner) is not False:
            return 0
        with self._dropboxes.held(path):
            if layout.read_record(path) != record:
                return 0  # removed right now by its unsubscribe, or subscribed again
            try:
                box = Dropbox(path, self._committer, create=False, spares=self._spares)
                dropped = counts_of(box)
            except QueueNotFound:
                return 0  # removed right now, by its unsubscribe
            self._remove(path)
        log.warning(
            "subscription %s of %r ended: its process (%s) died without removing it; "
            "%d message(s) it held deleted",
            record.filter,
            record.subscriber,
            record.owner,
            dropped.ready + dropped.locked,
        )
        return 1


@dataclass(slots=True)
class _EndingTogether:
    """What one `Topics.ending_together` ended, in order (dicts as ordered sets): the
    subscription folders to tell of, and those whose records it deleted (`Topics._remove`)."""

    told: dict[str, None] = field(default_factory=dict)
    removing: dict[str, None] = field(default_factory=dict)


_WILDCARDS = frozenset("+#")  # a filter without them is a topic name: one retained file
_SUBSCRIBER = "subscriber name"  # what a refused one is called: a subscriber's, not a consumer's


def _no_str(subscriber: object) -> str:
    """What check_consumer_name says of a subscriber name that is no str."""
    return f"{_SUBSCRIBER} {subscriber!r} is not a str ({type(subscriber).__name__})"
