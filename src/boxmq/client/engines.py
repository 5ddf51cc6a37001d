"""The engines one Box keeps in this process: a LiveQueue (client/live_queue.py) per queue or
subscription its consumers use, by dropbox path, and what they ask of the box.

- Made on first use (`live`), forgotten when their dropbox is deleted (`forget`), closed with
  the box (`close`), abandoned in a forked child (`renew_in_child`).
- Their reminders (LiveQueue._remind_when_due), a heap by time, read by `read_news`.
- The listeners told of what this process put (`listen`, Box.listen_offered).
- Those that may want the sweep's visit (LiveQueue.wants_sweep), asked by `wanting_visits`.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial

from boxmq.client.live_queue import LiveQueue
from boxmq.client.live_state import LiveOptions
from boxmq.clock import Clock
from boxmq.core import Dispatch
from boxmq.errors import Closed
from boxmq.model import ConsumerId
from boxmq.store.dropbox import Dropbox
from boxmq.store.v5_properties import V5Reader
from boxmq.store.watch import read_news

__all__ = ["Engines", "Listener", "closed_box"]

# Told the consumers of a dropbox and the `queue` its messages name (Box.listen_offered).
Listener = Callable[[list[ConsumerId], str], object]


def closed_box(root: str) -> Closed:
    """What a closed box of `root` raises."""
    return Closed(f"this box of {root} is closed: open the root again")


class Engines:
    def __init__(
        self,
        root: str,
        *,
        options: LiveOptions,
        clock: Clock,
        token: str,
        v5: V5Reader,
        group_dispatch: Mapping[str, Dispatch],
        owner: object,
    ) -> None:
        self._root = root
        # The box, held weakly here, strongly by each engine's reminder (`live`): a box with
        # no engine is collected as soon as it is dropped, one with engines as before the
        # engines were its own, once they are unused too (Box.__del__ closes it).
        self._owner = weakref.ref(owner)
        self.options = options  # the box's: replaced with it (Box.options)
        self._group_dispatch = dict(group_dispatch)  # share group -> its strategy
        self._clock = clock
        self._token = token
        self._v5 = v5
        self._lock = threading.Lock()
        self._closed = False
        self._live: dict[str, LiveQueue] = {}  # by dropbox path
        # Called with the consumers of a dropbox this process just put messages in, from the
        # thread that put them (LiveQueue.sent), and with those of a dropbox that may have
        # something new for them (`read_news`): an MQTT broker's `pump_all` takes those.
        self._listeners: list[Listener] = []
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

    def renew_in_child(self, token: str) -> None:
        """In a forked child (Box.renew_in_child): the parent's engines are abandoned, the
        child makes its own as it uses the box, under its own token."""
        self._lock = threading.Lock()
        self._token = token
        for live in self._live.values():
            live.abandon_in_child()
        self._live = {}
        self._listeners = []  # the parent's broker, which a child's puts are no news to
        self._reminders = []  # the parent's queues'
        self._reading = threading.Lock()
        self._wanting = set()
        self._wanting_lock = threading.Lock()

    def live(
        self, name: str, dropbox: Dropbox, group: str | None = None, shown: str | None = None
    ) -> LiveQueue:
        """The engine of `dropbox` in this process; `shown`: a subscription's name for its
        messages' `queue` (one dropbox is one filter and subscriber: whoever makes it first
        gives the same)."""
        with self._lock:
            self.refuse_if_closed()
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
                    v5=self._v5,
                    shown=shown,
                    listeners=self._listeners,
                    remind=partial(self._remind, self._owner()),
                    stirred=self._may_want_visit,
                )
                self._live[dropbox.path] = live
            return live

    def refuse_if_closed(self) -> None:
        """Closed once the box is closed: `live`'s check, and for a caller that writes before
        it asks for an engine (Topics.subscribe's records), which `live` refused only after."""
        if self._closed:
            raise closed_box(self._root)

    def opened(self, path: str) -> LiveQueue | None:
        """The engine of the dropbox at `path`, if this process made one."""
        return self._live.get(path)

    def forget(self, path: str) -> None:
        """The dropbox at `path` is about to be deleted (Box._forget_live): its engine here
        is closed and forgotten."""
        with self._lock:
            live = self._live.pop(path, None)
        if live is not None:
            live.close()
            # Else held until the next sweep asks: a box that never sweeps (an application
            # beside `boxmq serve`) kept each subscription and queue it ever ended this way.
            with self._wanting_lock:
                self._wanting.discard(live)

    def close(self) -> list[LiveQueue]:
        """No engine is made from now on (Closed); those made, for the box to close."""
        with self._lock:
            self._closed = True
            live, self._live = list(self._live.values()), {}
        return live

    def wanting_visits(self) -> set[str]:
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

    def listen(self, listener: Listener) -> None:
        """Box.listen_offered."""
        self._listeners.append(listener)

    def unlisten(self, listener: Listener) -> None:
        """Box.forget_offered."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def read_news(self) -> None:
        """Box.read_news: the engines with news, or with something due now, tell their
        consumers."""
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

    def _remind(self, owner: object, when: float, live: LiveQueue) -> None:
        """A reminder `live` asked for; `owner`, the box its engine keeps (`__init__`)."""
        with self._reading:
            heapq.heappush(self._reminders, (when, next(self._reminder_numbers), weakref.ref(live)))
