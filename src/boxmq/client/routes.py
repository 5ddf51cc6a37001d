"""Where a publication on a root goes, as one process knows it: the core's Router made from
the subscription records on disk, kept in step with them through the root's generation
(store/topics.py GenerationWatch, bump_generation), and this process's memory subscriptions.

A change of the subscriptions (a subscribe, an unsubscribe, a member's join or leave, a sweep's
end) is told to every process by writing the generation, naming the folder that changed; each
process reads again only the folders named since its last look, or every record when it fell
behind or a write failed to tell (ENOSPC).
"""

from __future__ import annotations

import threading

from boxmq.client.memory import MemoryInbox
from boxmq.core import Destination, QoS, Router, Subscription, TopicFilter
from boxmq.model import ConsumerId
from boxmq.store import topics as layout

__all__ = ["Routes"]

_Key = tuple[str | None, str | None, str]  # (share group, plain subscriber, filter)


def _key_of(destination: Destination) -> _Key:
    group = destination.filter.share_group
    return group, None if group else destination.subscriber, destination.filter.filter


class Routes:
    """The routes of one root in one process (one Topics): thread-safe."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._router = Router()
        self._paths: dict[_Key, str] = {}  # durable subscription -> its dropbox
        # Dropbox -> its subscription and the router's entries for it, replaced when a change
        # names that dropbox (_refresh).
        self._routed: dict[str, tuple[_Key, list[Subscription]]] = {}
        self._memory: dict[tuple[str, str], tuple[Subscription, MemoryInbox]] = {}
        self._generation = layout.GenerationWatch(root)  # looked at by every _refresh
        # A change of the subscriptions the generation's write failed to tell (ENOSPC): the
        # next write (`_bump`) tells of any change, so the other processes read every record.
        self._untold = False
        # Held by one `_bump` at a time, from its look at `_untold` until a failure set it
        # again: cleared before the write, a thread's failed write set it back only after
        # another thread's write had told of its own change alone.
        self._telling = threading.Lock()

    def destinations(
        self, topic: str, level: QoS, source: str | None
    ) -> tuple[list[tuple[Destination, str]], list[tuple[MemoryInbox, Destination]]]:
        """Where a message on `topic`, at `level`, from `source` goes: each durable
        subscription's destination with its dropbox's path, and each memory subscriber's
        inbox with its destination."""
        with self._lock:
            self._refresh()
            destinations = self._router.route(topic, qos=level, source=source)
            durable = [(d, self._paths[_key_of(d)]) for d in destinations if d.durable]
            memory = [
                (entry[1], d)
                for d in destinations
                if not d.durable
                and (entry := self._memory.get((d.subscriber or "", str(d.filter)))) is not None
            ]
        return durable, memory

    def has_durable(self, topic: str, source: str | None = None) -> bool:
        """Whether a publish to `topic` by `source` would be written into any dropbox."""
        with self._lock:
            self._refresh()
            routed = self._router.route(topic, qos=QoS.EXACTLY_ONCE, source=source)
        return any(destination.durable for destination in routed)

    def holds_any(self, subscriber: str) -> bool:
        """Whether `subscriber` has a durable subscription or share-group membership, as the
        root's subscriptions were at their last change read (Topics.holds_any)."""
        with self._lock:
            self._refresh()
            return any(s.durable for s in self._router.subscriptions_of(subscriber))

    def has_memory(self, subscriber: str, filter: str) -> bool:
        """Whether `subscriber` has a memory subscription to `filter` open in this process."""
        with self._lock:
            return (subscriber, filter) in self._memory

    def add_memory(
        self, key: tuple[str, str], subscription: Subscription, inbox: MemoryInbox
    ) -> bool:
        """A memory subscription (`key`: its subscriber and filter) routed from now on; False,
        nothing changed, if one of that key is open already."""
        with self._lock:
            if key in self._memory:
                return False
            self._router.subscribe(subscription)
            self._memory[key] = (subscription, inbox)
            return True

    def remove_memory(self, key: tuple[str, str], subscription: Subscription) -> None:
        with self._lock:
            self._memory.pop(key, None)
            self._router.unsubscribe(subscription.subscriber, subscription.filter)
            # A durable one of the same subscriber and filter (another process's) that it
            # stood in for here (`_read_again`) is routed again: it went with it, and this
            # process's publications reached nobody until the next change.
            path = self._paths.get((None, subscription.subscriber, subscription.filter.filter))
            if path is not None:
                for durable in self._routed[path][1]:
                    self._router.subscribe(durable)

    def memory_inboxes(self) -> list[MemoryInbox]:
        with self._lock:
            return [inbox for _, inbox in self._memory.values()]

    def forget(self) -> None:
        """What this process knows of the subscriptions is read again at its next look, every
        record: a change it made was not told, or not read into its router."""
        with self._lock:
            self._generation.forget()

    @property
    def untold(self) -> bool:
        """Whether a change of the subscriptions was left untold by a failed write."""
        return self._untold

    def _refresh(self) -> None:
        change = self._generation.change()
        if change is None:
            return
        try:
            if change.paths is None:
                self._read_all()
            else:
                for path in change.paths:
                    self._read_again(path)
        except OSError:
            # Read again at the next look: the change counted as seen, the router kept from
            # before it routed nothing to a subscription made since, whose messages the
            # publishers were told were stored (a QoS 1 PUBACK 0), until the next change.
            self._generation.forget()
            raise

    def changed(
        self, path: str, *, flush: bool = False, record: layout.SubscriptionRecord | None = None
    ) -> None:
        """Tell every process that the subscription at `path` changed (the generation), and
        keep this one's router in step with it while it saw every change before: its folder
        read again here, not at the next look, where a burst of this process's own changes
        (over `layout._KEPT`) between two looks read every record on the root again.
        `record`: the one on disk now, which the caller has just written or read."""
        self.changed_together((path,), flush=flush, record=record)

    def changed_together(
        self,
        paths: tuple[str, ...],
        *,
        flush: bool = False,
        record: layout.SubscriptionRecord | None = None,
    ) -> None:
        """`changed` for the subscriptions at `paths`, told in one write of the generation
        (`layout.bump_generation`'s `paths`): what one request changed (an UNSUBSCRIBE of
        many filters, a session's end). `record`: that of the one path, as for `changed`."""
        told = self._bump(paths, flush=flush)
        if told is None:
            return
        counted, paths_told = told
        if paths_told is None:
            return  # it told of any change: this process too reads every record at its look
        with self._lock:
            if self._generation.caught_up(counted):
                try:
                    for path in paths_told:
                        self._read_again(path, record if len(paths_told) == 1 else None)
                except OSError:
                    self._generation.forget()  # the next look reads every record again

    def tell_others(self, path: str | None) -> OSError | None:
        """Tell every process that the subscription at `path` (several: None) changed, for
        what a sweep ended or found ended, which no `changed` told: the error the
        generation's write met (ENOSPC, EMFILE), if it did, after which this process too
        reads every record at its next look."""
        try:
            self._bump(None if path is None else (path,))
        except OSError as error:
            return error
        return None

    def _bump(
        self, paths: tuple[str, ...] | None, *, flush: bool = False
    ) -> tuple[layout.Counted, tuple[str, ...] | None] | None:
        """`layout.bump_generation` for `paths`, or for any change (None) while a change
        before was left untold by a failed write, which only a later write can tell: the other
        processes read only the folders the generation names. The change as counted and the
        paths this process reads again itself (None: every record), None where no count can
        be trusted. A write that fails leaves this process to read every record at its next
        look too, whoever called: a caller that had to say so itself, and one that did not
        (`remove_left_behind`), routed to a folder it had deleted until the next change
        (found by stop 45's second read)."""
        with self._telling:  # the writes take the topic root's flock one at a time anyway
            with self._lock:
                untold, self._untold = self._untold, False
            told = None if untold or paths is None else tuple(dict.fromkeys(paths))
            # More than the file names are written as any change (`bump_generation`), which
            # the other processes read as every record; this one, knowing which changed,
            # reads those alone if it saw every change before (`changed_together`): a full
            # read here was O(subscriptions on the root) for one UNSUBSCRIBE.
            written = told if told is not None and len(told) <= layout.KEPT_CHANGES else None
            try:
                counted = layout.bump_generation(self._root, flush=flush, paths=written or ())
            except OSError:
                with self._lock:  # `untold` is read by any thread
                    self._untold = True
                    self._generation.forget()
                raise
        return None if counted is None else (counted, told)

    def _read_all(self) -> None:
        """The router made anew from every subscription on disk (and this process's memory
        subscriptions)."""
        router: Router = Router()
        paths: dict[_Key, str] = {}
        routed: dict[str, tuple[_Key, list[Subscription]]] = {}
        for record, path in layout.read_records(self._root):
            self._add(router, paths, routed, record, path)
        for subscription, _ in self._memory.values():
            router.subscribe(subscription)
        self._router, self._paths, self._routed = router, paths, routed

    def _read_again(self, path: str, record: layout.SubscriptionRecord | None = None) -> None:
        """The one subscription at `path` changed (made, ended, a member joined or left):
        its routing entries are replaced by what its folder holds now (`record`, when the
        caller has it, is its record)."""
        touched: list[Subscription] = []
        if (before := self._routed.pop(path, None)) is not None:
            key, touched = before
            del self._paths[key]
            for subscription in touched:
                self._router.unsubscribe(subscription.subscriber, subscription.filter)
        if record is None:
            record = layout.read_record(path)
        if record is not None:
            touched = touched + self._add(self._router, self._paths, self._routed, record, path)
        for subscription in touched:
            # A memory subscription of this process under the same name and filter as a
            # durable one (made by another process) keeps its place, as `_read_all` leaves it.
            if memory := self._memory.get((subscription.subscriber, str(subscription.filter))):
                self._router.subscribe(memory[0])

    def _add(
        self,
        router: Router,
        paths: dict[_Key, str],
        routed: dict[str, tuple[_Key, list[Subscription]]],
        record: layout.SubscriptionRecord,
        path: str,
    ) -> list[Subscription]:
        """The subscription at `path` routed: its entries, one per member of a group."""
        parsed = TopicFilter(record.filter, record.group)
        members = layout.member_names(path) if record.group else [record.subscriber or ""]
        # A group whose members all left without a sweep yet still collects its messages.
        subscriptions = [
            Subscription(ConsumerId(member), parsed, QoS(record.qos), True, record.no_local)
            for member in members or ["(no member)"]
        ]
        for subscription in subscriptions:
            router.subscribe(subscription)
        key = (record.group, record.subscriber, record.filter)
        paths[key] = path
        routed[path] = key, subscriptions
        return subscriptions
