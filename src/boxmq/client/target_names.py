"""The names of target/ that one live queue knows: offered to the engine, or kept cold.

A read of the folder (`_scan`), the watcher's news (`_absorb`) and this process's own puts
(`sent`) bring names; each is offered to the engine decoded, or, in a deep backlog, kept as a
bare name in the engine's order (`_cold`) until the engine runs short of names before it
(`_promote`). An id the engine holds already under another name waits behind it (`_behind`).
"""

from __future__ import annotations

import heapq
import os
from typing import Final

from boxmq.client.lifecycle import envelope_of, ready_of, set_aside, set_aside_strays, unusable
from boxmq.client.live_news import LiveNews
from boxmq.client.ranked_names import ranked_priority
from boxmq.clock import periodic_due
from boxmq.ids import stamp_of
from boxmq.model import Envelope, MessageId
from boxmq.store.layout import State
from boxmq.store.watch import Changes

__all__ = ["FRONT", "RESCAN_NAMES_PER_SECOND", "TargetNames"]

# The bodies of this process's own puts kept for their receive: at most this many (4 MiB).
_CACHED_BODIES = 1024
_CACHED_BODY_SIZE = 4096  # bytes: a larger body is read back from its file

# The names of target/ that one second between two reads of the whole folder pays for, when
# the watcher asks for a rescan (inotify's queue overflowed, or the polling timer): at its
# every look under 5,000 names, every 15 s for 300,000 (a name costs a few us to read, set
# and compare).
RESCAN_NAMES_PER_SECOND: Final = 20_000

# A deep backlog's names are kept undecoded (a string each, ~100 bytes, where a decoded one
# costs ~650): only the best FRONT or so of target/ are offered to the engine, decoded, and
# the rest wait as names (`_cold`), in the engine's order, until the front runs low.
FRONT: Final = 256


class TargetNames(LiveNews):
    def _let_go(self, message_id: MessageId) -> None:
        """The engine no longer has `message_id`: a file of that id that waited in target/
        is offered at the next look."""
        if message_id in self._behind:
            self._behind.discard(message_id)
            self._next_scan = 0.0

    def _scan_due(self, now: float) -> bool:
        """Whether target/ is to be read now: its time came, or it is further off than the
        last read set it, which only a wall clock stepped back makes it (`periodic_due`).
        Without the second, stepped back an hour, a box that polls (NFS) received nothing
        new for an hour."""
        return periodic_due(now, self._next_scan, self._scan_lead)

    def _scan(self, now: float) -> None:
        self._sent.clear()
        self._behind.clear()  # what still waits is put back by its offer below
        strays: list[str] = []
        self._target_seen = self._settled(State.TARGET)
        present = {entry.name for entry in self._box.scan(State.TARGET, strays)}
        # A folder of N names is read again no sooner than N / RESCAN_NAMES_PER_SECOND s
        # after this read, whatever asks: another process draining 300,000 messages beside
        # this one overflowed inotify's queue while this one read them (2.5 s), and the
        # watcher's "rescan" then made each receive read them again (polling's timer did, on
        # its own, every 0.25 s). Meanwhile names another process took are found gone at
        # their claim (a rename that finds nothing), and new ones wait for the next read.
        self._rescan_after = now + len(present) / RESCAN_NAMES_PER_SECOND
        self._lost = 0
        self._next_scan = max(now + self._options.rescan_interval, self._rescan_after)
        self._scanned_next = self._next_scan
        self._scan_lead = self._next_scan - now
        set_aside_strays(self._box, self.name, strays)
        for name in self._known.keys() - present:
            self._engine.withdraw(self._known.pop(name).message_id)
        cold = self._cold
        if cold:
            cold &= present
            self._cold_moved = True
            if sum(map(len, self._cold_order.values())) > 2 * len(cold) + FRONT:
                for heap in self._cold_order.values():  # names gone since: dropped at last
                    heap[:] = [name for name in dict.fromkeys(heap) if name in cold]
                    heapq.heapify(heap)
        new = present - self._known.keys()
        new -= cold
        for name in new:
            self._offer(name, now)

    def _offer(self, name: str, now: float, *, cold: bool = True) -> None:
        """Offer a name of target/ to the engine, or keep it cold (`_cold`) if `cold` allows
        and its name ranks it (_RANKED), and the engine holds a front's worth, or others are
        cold already."""
        if name in self._known or name in self._cold:
            return
        if (why := unusable(name)) is not None:
            # It can never be claimed (no id, or no room for a lock suffix): it goes where
            # people look, rather than block the messages behind it.
            set_aside(self._box, self.name, name, why)
            return
        if (
            cold
            and self._cold_kept
            and (self._cold or len(self._known) >= FRONT)
            and self._keep_cold(name)
        ):
            return
        self._offer_decoded(name, now)

    def _keep_cold(self, name: str) -> bool:
        """Keep a name cold: True; False if its name does not rank it (it is decoded)."""
        if (priority := ranked_priority(name)) is None:
            return False
        self._cold.add(name)
        heap = self._cold_order.get(priority)
        if heap is None:
            heap = self._cold_order[priority] = []
        heapq.heappush(heap, name)
        self._cold_moved = True
        return True

    def _cold_top(self) -> tuple[int, list[str]] | None:
        """The priority and heap of the best cold name (its heap's top), stale tops dropped."""
        cold, best = self._cold, None
        for priority, heap in self._cold_order.items():
            while heap and heap[0] not in cold:
                heapq.heappop(heap)
            if heap and (best is None or priority > best[0]):
                best = (priority, heap)
        return best

    def _promote(self, now: float, *, wanted: bool = False) -> None:
        """Offer the best cold names to the engine, decoded, if it wants them or holds less
        than half a front (a front's worth, at least a quarter of one); then move the horizon
        to the best name left cold."""
        engine = self._engine
        if wanted or len(self._known) < FRONT // 2:
            count = max(FRONT - len(self._known), FRONT // 4, 1)
            cold = self._cold
            while count > 0 and (top := self._cold_top()) is not None:
                heap = top[1]  # the best priority's until it runs out
                while count > 0 and heap:
                    name = heapq.heappop(heap)
                    if name in cold:
                        cold.remove(name)
                        self._offer_decoded(name, now)
                        count -= 1
        self._cold_moved = False
        top = self._cold_top()
        if top is None:
            engine.hold_from(None)
            return
        priority, name = top[0], top[1][0]
        at = name.index(".") + 1
        # The rank this name gets once decoded (ready_of): its id's time in ms, as
        # Envelope.timestamp reads it, not the microseconds the id's 16 digits stamp; those
        # order it by the rank's last field, the name. A horizon in us would rank a decoded
        # name of the same ms and a later us before it, handed out first (two processes
        # putting within one ms). test_ranked_names checks both against the decoding.
        engine.hold_from((-priority, int(name[at : at + 13]) / 1000, name))

    def _offer_decoded(self, name: str, now: float) -> None:
        self._found += 1
        envelope = envelope_of(name)
        message_id = envelope.message_id
        if (lease := self._engine.lease(message_id)) is not None:
            if lease.message.key != name:
                # Back in target/ under another name while our lock holds it: another process
                # unlocked it by id (look in processing/ at once; the rescan that follows
                # offers it); or another message with its id (a producer that reused one),
                # offered at the look after the lock.
                self._next_sweep = 0.0
                self._behind.add(message_id)
            elif os.path.lexists(self._box.file(State.TARGET, name)):
                # Our claim renamed that file away: this is another of that name (a script's
                # nightly 4.nightly.T sent again while the last is locked), offered at the
                # look after the lock, where it waited for the next full read of target/.
                self._behind.add(message_id)
            return  # else our own claim, which the watcher tells of late
        if (ready := self._engine.ready_key(message_id)) is not None:
            if ready == name:
                return
            if os.path.lexists(self._box.file(State.TARGET, ready)):
                # The engine knows messages by id: an offer would put this one in place of
                # the other, which then nobody gets. One at a time, as behind a lock.
                self._behind.add(message_id)
                return
            # The engine's name left target/ unseen: our own unlock's (or put's), which
            # another process took before our watcher read its coming, so that its leaving
            # is no news either, and gave back under this one. Kept, it held this name
            # back until a claim of it failed, after the hand-off of our consumer that
            # unlocked it, though another held the message since.
            self._known.pop(ready, None)
            self._engine.withdraw(message_id)
        if (stamp := envelope.timestamp) is not None:
            sequence = stamp / 1000
        else:
            try:
                sequence = os.stat(self._box.file(State.TARGET, name)).st_mtime
            except FileNotFoundError:
                return
        self._known[name] = envelope
        self._engine.offer(ready_of(name, envelope, sequence), now=now)

    def _absorb(self, changes: Changes) -> bool:
        """Take in the watcher's news; True unless all of it was this process's own doing
        (its puts, offered already, and names it knows no more: its claims), which gives a
        receive nothing new (`_news`)."""
        if (changes.names or changes.gone or changes.everything) and not self._stirred:
            self._stir()
        if changes.everything:
            self._next_scan = min(self._next_scan, self._rescan_after)
            self._sent.clear()
            return True
        news = False
        known = self._known
        # A name both gone and come left and came back since the last read (Changes): it is
        # there, as known (a claim given back unchanged, ours or another process's). Taken
        # away and offered again, it was a new offer: its last holder's hand-off began again.
        back = set(changes.names) if changes.gone and changes.names else ()
        for name in changes.gone:  # claimed by another process, or moved away: not ours
            if name in back:
                continue
            if (envelope := known.pop(name, None)) is not None:
                news = True
                self._engine.withdraw(envelope.message_id)
                if self._behind and self._engine.lease(envelope.message_id) is None:
                    self._let_go(envelope.message_id)
            elif self._cold:
                self._cold.discard(name)  # its heap's entry is skipped when it comes up
        now = None  # read once, and only for a name to offer (most are our own puts)
        sent = self._sent
        for name in changes.names:
            if name in sent:
                sent.discard(name)  # offered when it was put (it may be claimed, even done)
            else:
                news = True
                if now is None:
                    now = self._clock.now()
                self._offer(name, now)
        return news

    def sent(self, messages: list[tuple[str, Envelope, bytes]]) -> None:
        """Names this process just committed to target/, with their envelopes and ids that
        IdFactory made (ordered by the time they carry, read without checking): offered now,
        without the watcher's read and the decoding of each name. Their watcher news is
        skipped when it comes; a rescan forgets what it never brought (polling can miss a
        name that came and went between two looks), and the worst a stale entry costs is
        one decoding.

        Their bodies too, when small: a file never changes once in target/, so the receive
        that takes one of them need not open and read it back (three system calls). Bodies
        of messages another process took stay until the cache is full, then all go.

        A name the watcher told of first (a consumer thread read it between the put's rename
        and this call) is left as the watcher's offer made it: the engine may have it claimed
        since, or released under another name, and offering it again would make `_known`
        hold a name the engine does not (a claim given back under it was then never
        offered again)."""
        with self._mutex:
            if not self._stirred:
                self._stir()
            now = self._clock.now()
            bodies = self._bodies
            engine = self._engine
            if len(bodies) + len(messages) > _CACHED_BODIES:
                bodies.clear()
            known, cold = self._known, self._cold
            for name, envelope, body in messages:
                if name in known or name in cold:
                    continue
                if (cold or len(known) >= FRONT) and self._cold_kept and self._keep_cold(name):
                    # Decoded again when it nears the front (its id decides then, as the
                    # watcher's news would, whether the engine has it already).
                    self._sent.add(name)
                    continue
                sequence = stamp_of(envelope.message_id) / 1000
                if not engine.offer_new(ready_of(name, envelope, sequence), now=now):
                    continue  # the watcher told of it first: claimed, or released, since
                if len(body) <= _CACHED_BODY_SIZE:
                    bodies[name] = body
                self._known[name] = envelope
                self._sent.add(name)
        if messages:
            self.tell()  # outside the mutex: a listener never waits for this queue's
