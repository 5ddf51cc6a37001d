"""What one queue's engine in this process holds, and how it is made (LiveQueue's state).

LiveQueue (live_queue) is one class built in layers on this one (live_news, target_names,
held_locks, live_effects, outliving, live_queue, each a class on the one before). The
layers are classes, not objects that call each other, so every step of a message stays a
method of the one instance, as cheap as when the class was one module (a Python call more
per message is a cost that bench/hotpath.py measures).
"""

from __future__ import annotations

import math
import os
import random
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from boxmq.client.sweeps import SweepLimits
from boxmq.clock import Clock
from boxmq.core import Dispatch, QueueEngine, QueuePolicy
from boxmq.model import ConsumerId, Envelope, MessageId
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import FolderSeen
from boxmq.store.v5_properties import V5Reader
from boxmq.store.watch import Changes, Watcher

if TYPE_CHECKING:
    from boxmq.client.live_queue import LiveQueue

__all__ = ["LiveOptions", "LiveState"]


@dataclass(frozen=True, slots=True)
class LiveOptions:
    policy: QueuePolicy = field(default_factory=QueuePolicy)
    limits: SweepLimits = field(default_factory=SweepLimits)
    rescan_interval: float = 5.0  # a full look at target/, even when inotify reports every file
    sweep_interval: float = 1.0  # a look in processing/ for other processes' dead locks
    poll_interval: float = 0.25  # the polling watcher's nap, where inotify is missing
    # While messages in memory serve the receives (this process's own puts), the watcher's
    # news (other processes' puts) is read at most this often, not once per message; a
    # receive that gets nothing from memory reads it at once.
    watch_interval: float = 0.002
    polling: bool = False  # force polling (file systems shared over the network)
    keep_processed: bool = True  # ack moves to processed/ (else: deletes)


class LiveState:
    def __init__(
        self,
        name: str,
        box: Dropbox,
        *,
        options: LiveOptions,
        clock: Clock,
        token: str,
        v5: V5Reader | None = None,
        shown: str | None = None,
        listeners: list[Callable[[list[ConsumerId], str], object]] | None = None,
        remind: Callable[[float, LiveQueue], object] | None = None,
        stirred: Callable[[LiveQueue], object] | None = None,
    ) -> None:
        self.name = name  # what the logs and errors say: a subscription's folder
        # Told the consumers attached when this process's own puts are offered (`sent`): a
        # broker pumps those, not every one of its thousands of subscribers, after a batch.
        # The box's list, shared: one added later is told too (Box.listen_offered). Told
        # from a snapshot (a tuple, copied at once under the GIL): another thread may add
        # or remove one meanwhile, and a removal during a walk of the list itself skipped
        # the listener after it.
        # Always called with this queue's mutex free (`tell` after the `with`, never in
        # it): a listener may call back into the queue, from its thread or another it
        # waits for, and a slow one holds up no other thread's receive or ack.
        self._listeners = [] if listeners is None else listeners
        # For those listeners, who look only at the queues with news (`tell`): asked to
        # `tell` at a time the engine has something due (a lock's end, a delayed message),
        # or at once while the watcher polls. `_reminded`: the earliest asked for, if to come.
        self._remind = remind
        self._reminded = -math.inf
        # What its messages' `queue` says: the name a user gives back (`box.subscription`,
        # `boxmq peek`): a subscription's filter, "$share/GROUP/FILTER" for a share group.
        self.queue = name if shown is None else shown
        self.v5 = v5  # what its messages' `properties` decode MQTT v5 properties with
        self.path = box.path  # its dropbox's folder
        self._box = box
        self._options = options
        self._clock = clock
        self._token = token
        # Seeded from the OS: under `dispatch="random"` the core's fixed default seed gave
        # every queue, in every process and every run, the same sequence of picks.
        self._engine = QueueEngine(policy=options.policy, rng=random.Random(os.urandom(16)))
        # Entered through the lock itself: Condition's own __enter__ and __exit__ are Python
        # functions around it, two calls more for each of the three entries per message.
        self._mutex = threading.RLock()  # reentrant: close() detaches its consumers
        self._cond = threading.Condition(self._mutex)
        # None while every consumer rests (`rest`): opened again by the next receive.
        self._watcher: Watcher | None = self._watch()
        self._resting: set[ConsumerId] = set()  # consumers that receive nothing for now
        self._rested = False  # one rested since the box's sweep last asked (`wants_sweep`)
        # Its folders changed since that ask (a put, claim, settlement or expiry here, news
        # of another process's files): a receiving consumer's dropbox is swept then.
        self._stirred = True
        # Told when `_rested` or `_stirred` becomes true (`_stir`): the box's sweep asks
        # `wants_sweep` of those told since its last ask only (the others would say no).
        self._told_stirred = stirred
        self._stir()
        self._watching = False
        self._looked_at = -math.inf  # the clock when the watcher's news was last read
        self._sleepers = 0  # threads in self._cond.wait: the only ones notify_all can wake
        self._known: dict[str, Envelope] = {}  # target/ names offered to the engine, decoded
        self._sent: set[str] = set()  # names this process put and offered: the watcher's skip
        self._found = 0  # names of the folder offered, not by `sent`: see `_tell_others`
        self._untold: list[ConsumerId] = []  # those to tell once the mutex is free (_hand_out)
        # Names of target/ that rank from the name alone (_RANKED), known but kept out of the
        # engine, undecoded: each ranks after every name the engine may hand out (its horizon
        # is their best), and the best are offered (`_promote`) when the engine runs short of
        # names before it.
        self._cold: set[str] = set()
        self._cold_order: dict[int, list[str]] = {}  # by priority, a heap (stale ones skipped)
        self._cold_moved = False  # a name went cold since the engine's horizon was set
        # Not under hash-by-key: a consumer's lane is known only once a name is decoded, so
        # one whose lane ran dry would not ask for more while the others have some.
        self._cold_kept = options.policy.dispatch is not Dispatch.HASH_BY_KEY
        self._claimed: dict[MessageId, Envelope] = {}  # claimed, not yet taken by a receive
        # Of those, the ones `_adopt` took back: received by a process before (or by this
        # one's consumer of that name, detached), so delivered already. Never given back
        # unchanged as a claim nobody saw: `detach` keeps their locks, a release counts them.
        self._adopted: set[MessageId] = set()
        self._bodies: dict[str, bytes] = {}  # small bodies of our puts, by target/ name
        self._locks: dict[MessageId, str] = {}  # our leases: their processing/ names
        self._inbox: dict[ConsumerId, deque[MessageId]] = {}
        # Ids that another file in target/ has, waiting until the engine lets go of its own.
        self._behind: set[MessageId] = set()
        self._outliving: set[ConsumerId] = set()  # consumers whose locks name no process
        self._next_scan = 0.0
        # The earliest a watcher's "rescan" (inotify's queue overflowed, or polling's timer)
        # reads target/ again: later for a big folder (see _scan).
        self._rescan_after = 0.0
        # How far off the last read set the next (`rescan_interval`, or more for a big
        # folder): further off than that, the wall clock was stepped back (`_scan_due`).
        self._scan_lead = 0.0
        self._lost = 0  # claims lost to other processes since the last read of target/
        self._expired = 0  # moved to expired/ by the effects being applied, not said yet
        # Claims locked ahead that expired before a receive took them: each freed a slot
        # (read and reset by receive_ready, which then hands out again).
        self._expired_ahead = 0
        self._next_sweep = 0.0
        # What the last read of target/, and the last sweep of processing/ that found it
        # empty, saw of the folder (`_settled`), and the time the read set for the next:
        # while a periodic look (the walk of an MQTT broker's idle sessions, each 5 s) finds
        # the same, nothing came, left or was renamed there since, and one stat stands for
        # the read (`_hand_out`).
        self._target_seen: FolderSeen | None = None
        self._scanned_next = -1.0
        self._empty_processing: FolderSeen | None = None
        self._closed = False
        self._forked = False  # abandoned in a forked child: every use is refused

    if TYPE_CHECKING:
        # Defined by a layer above, called from below (the one place the layers loop).

        def _watch(self) -> Watcher: ...  # live_news

        def _absorb(self, changes: Changes) -> bool: ...  # target_names

        def _stir(self) -> None: ...  # live_queue
