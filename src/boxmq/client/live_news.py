"""A live queue's news: the watcher of its target/ and who is told.

The watcher says what other processes dropped in target/ or took from it; one consumer
thread waits on it for all the others (`_wait`), or a look reads it without waiting (`_look`,
`_news` at an MQTT broker's tick). The listeners (Box.listen_offered) are told the consumers
that may have something new, always with the queue's mutex free. A state folder found as it
was, where inotify watches it, needs no read (`_settled`, `_still`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable

from boxmq.client.live_state import LiveState
from boxmq.clock import periodic_due
from boxmq.model import ConsumerId
from boxmq.store.layout import FolderSeen, State, folder_seen, settled_seen
from boxmq.store.watch import Watcher, watch

log = logging.getLogger("boxmq")

__all__ = ["LiveNews"]


class LiveNews(LiveState):
    def watching(self) -> bool:
        """Whether the watcher is open (its descriptors held)."""
        return self._watcher is not None

    def _watch(self) -> Watcher:
        watcher = watch(
            self._box.dir(State.TARGET),
            poll_interval=self._options.poll_interval,
            polling=self._options.polling,
        )
        # What other processes dropped (watch.read_news). Held weakly: the process's inotify
        # instance holds its watchers until they close, and through this, held strongly, the
        # queue and its box, which a box dropped without close() then never left.
        news = weakref.WeakMethod(self._news)

        def on_news() -> None:
            if (told := news()) is not None:
                told()

        watcher.on_news = on_news
        return watcher

    def _news(self) -> None:
        """The watcher's `on_news` (Box.read_news: an MQTT broker's tick): its news taken in
        now, and the listeners told only if a receive has something to do with it. Much of
        what the watch of target/ reports is this process's own doing: its puts, offered
        as they were put (`sent`, which told the listeners then), and its claims, names it
        knows no more. Told, each made a tick pump the consumers of the dropbox (both
        members of a share group) for looks that found nothing (docs/benchmarks.md, "Many
        share groups"). Another process's file is a name this process did not put: told."""
        if not self._listeners:
            return  # nobody to tell: the next receive reads it
        with self._mutex:
            watcher = self._watcher
            # A thread waits on the watcher (an embedded consumer): that thread reads it.
            told = watcher is None or self._watching
            if watcher is not None and not told:
                self._looked_at = self._clock.now()
                try:
                    told = self._absorb(watcher.wait(0))
                except OSError:  # a stray the disk refused to set aside: the receive meets it
                    told = True
        if told:
            self.tell()

    def tell(self) -> None:
        """Tell the listeners (Box.listen_offered) the consumers attached here, and the
        `queue` their messages name: the queue may have something for them (news the
        watcher has, a deadline come, messages given back), which their next receive finds.
        Never called under the mutex (see `_listeners`): it is taken here only to read who
        is attached."""
        if not self._listeners:
            return
        with self._mutex:
            consumers = list(self._inbox)
        if consumers:
            for listener in tuple(self._listeners):
                _tell(listener, consumers, self.queue)

    def _watcher_open(self) -> Watcher:
        """The watcher, opened again after a rest: target/ is read again at the next look,
        since nothing told of what landed meanwhile."""
        watcher = self._watcher
        if watcher is None:
            watcher = self._watcher = self._watch()
            self._next_scan = 0.0
            self._sent.clear()
        return watcher

    def _look(self, now: float) -> float:
        """Absorb the news the watcher holds, without waiting for more; the time after it
        (thousands of names another process put take a while to decode)."""
        self._looked_at = now
        changes = self._watcher_open().wait(0)
        self._absorb(changes)
        return self._clock.now() if changes.names else now

    def _tell_others(self) -> None:
        """Tell the listeners of the consumers that another's receive claimed messages for,
        when it offered the engine names read from the folder: they receive only when told
        (an MQTT broker's share-group members, `receive_ready`). The news of those files
        (another process's) was this receive's read, and that of the claims (their files
        leaving target/) might be the next receive's, before the broker asks (`read_news`),
        which then told nobody: the messages waited for their member's next ack or the
        broker's walk (5 s). This process's puts told every consumer already (`sent`).
        Called by the receive once it let go of the mutex, as every listener is."""
        if not self._untold:
            return
        with self._mutex:
            told, self._untold = list(dict.fromkeys(self._untold)), []
        for listener in tuple(self._listeners):
            _tell(listener, told, self.queue)

    def _settled(self, state: State) -> FolderSeen | None:
        """What a state folder is (layout.settled_seen), taken before a read of it, when
        inotify watches this dropbox: a later stat that finds the same says nothing was made,
        renamed or deleted there since. None otherwise: a polling watcher's file system may
        cache a folder's attributes (NFS)."""
        watcher = self._watcher
        if watcher is None or watcher.polls:
            return None
        return settled_seen(self._box.dir(state))

    def _still(self, seen: FolderSeen | None, state: State) -> bool:
        """Whether the state folder is as `seen` (see `_settled`) still: one stat."""
        return seen is not None and folder_seen(self._box.dir(state)) == seen

    def _nap(self, now: float, left: float | None) -> float:
        """How long to wait for news: until the next scan, sweep or deadline of the clock's,
        at most `left` seconds (the receive's own wait, in wall time). A scan or sweep
        further off than its interval is due now (`periodic_due`, a clock stepped back since
        the look that set it): waited for, a step back of an hour between the receive's look
        and its wait held a `receive()` an hour without those looks."""
        limits = [
            _until(now, self._next_scan, self._scan_lead),
            _until(now, self._next_sweep, self._options.sweep_interval),
        ]
        if left is not None:
            limits.append(left)
        if (deadline := self._engine.next_deadline()) is not None:
            limits.append(deadline - now)
        return max(0.0, min(limits))

    def _wait(self, seconds: float) -> None:
        """Wait for news with the lock released; one thread watches the folder for all."""
        if self._watching:
            self._sleepers += 1
            try:
                self._cond.wait(seconds)
            finally:
                self._sleepers -= 1
            return
        watcher = self._watcher_open()
        self._watching = True
        self._mutex.release()
        try:
            changes = watcher.wait(seconds)
        finally:
            self._mutex.acquire()
            self._watching = False
        self._looked_at = self._clock.now()
        self._absorb(changes)
        if self._sleepers:
            self._cond.notify_all()

    def _wake_others(self) -> None:
        if self._sleepers:  # notify_all costs several Python calls even when nobody waits
            self._cond.notify_all()
        if self._watching and self._watcher is not None:
            self._watcher.wakeup()


def _until(now: float, next_at: float, interval: float) -> float:
    """The seconds from `now` to a periodic look next at `next_at`: none when it is due."""
    return 0.0 if periodic_due(now, next_at, interval) else next_at - now


def _tell(
    listener: Callable[[list[ConsumerId], str], object], consumers: list[ConsumerId], queue: str
) -> None:
    """One listener told, its bug logged and no more: a put calls it once its message is
    stored, and an exception from it made the put raise, so that a producer that sent the
    message again on the error stored it twice."""
    try:
        listener(consumers, queue)
    except Exception:
        log.exception("%s: a listen_offered listener failed (its news is lost)", queue)
