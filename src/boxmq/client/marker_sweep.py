"""The sweep of the exactly-once intake's "delivered" markers (client/assured.py): which
are past done_ttl and may go, which must stay because their message still waits in working/
(a `deliver` cut short), and what they tell of the retained deletes' tombstones
(RetainedStore.remove_if). It knows `.exactly-once/` as it last listed it, so that a sweep
looks at what changed or is due, not at every marker. What a marker's record says
(client/markers.py's `waits`) and what waits in working/ (the intake's `waiting`) are read
for it."""

from __future__ import annotations

import contextlib
import heapq
import os
from collections.abc import Callable, Mapping

from boxmq.client.copies import replaced_topic
from boxmq.clock import Clock
from boxmq.model import Envelope
from boxmq.store.layout import FolderSeen, folder_seen, settled_seen

__all__ = ["MarkerSweep"]

# Whether the message file a marker names still waits in working/ (None if it names none),
# and the topic whose retained message a restart that finishes it replaces.
_Waits = Callable[[str], tuple[bool | None, str | None]]


class MarkerSweep:
    def __init__(
        self,
        markers: str,
        clock: Clock,
        *,
        polling: bool,
        waits: _Waits,
        waiting: Callable[[], Mapping[str, Envelope]],
    ) -> None:
        self._markers = markers
        self._clock = clock
        self._waits = waits
        # The envelope of each exactly-once message in working/, by its marker's name.
        self._waiting = waiting
        # What `forget` knows of `.exactly-once/`, so that a sweep looks at what
        # changed or is due, not at every marker (it stat'ed each one every second): the
        # st_mtime each marker had when first listed, until done_ttl is past for it (a heap of
        # them, an entry stale once its name's time differs); those past it whose message
        # still waits; and the folder as it was at the last listing, if it had settled then
        # (a folder whose mtime is the same was not changed since: not on a polled root,
        # where NFS may cache it). A marker is only ever renamed into place, which changes
        # the folder; one touched by hand is seen when due.
        self._polling = polling
        self._marker_times: dict[str, float] = {}
        self._marker_heap: list[tuple[float, str]] = []
        self._stuck: dict[str, float] = {}
        self._markers_seen: FolderSeen | None = None
        self._pinned: dict[str, float] = {}
        # The markers not past done_ttl that `tombstones_kept` found will never have a
        # restart replace a retained message (their file left working/, or their message
        # replaces none), each with its inode and st_mtime_ns then: not read again while
        # they stay (a marker written again under its name, a later message's, is).
        self._replace_none: dict[str, tuple[int, int]] = {}

    def listed(self) -> list[str]:
        """The markers not past done_ttl, as the last `forget` listed them (taken under the
        intake's lock, which `forget` runs under: `tombstones_kept` runs outside it)."""
        return list(self._marker_times)

    def tombstones_kept(self, names: list[str]) -> tuple[float | None, dict[str, float]]:
        """AssuredIntake.tombstones_kept, of the markers `names` (`listed`)."""
        untold: float | None = None
        pinned = dict(self._pinned)
        none: dict[str, tuple[int, int]] = {}
        for name in names:
            path = os.path.join(self._markers, name)
            try:
                status = os.stat(path)
            except FileNotFoundError:
                continue
            seen = status.st_ino, status.st_mtime_ns
            if self._replace_none.get(name) == seen:
                none[name] = seen
                continue
            waits, topic = self._waits(path)
            written = status.st_mtime
            if waits is None:
                untold = written if untold is None else min(untold, written)
            elif waits and topic is not None:
                pinned[topic] = min(written, pinned.get(topic, written))
            else:  # (one written again between the stat and the read: read again next time)
                none[name] = seen
        self._replace_none = none
        return untold, pinned

    @property
    def pinned(self) -> Mapping[str, float]:
        """AssuredIntake.pinned, as the last `forget` found them."""
        return self._pinned

    def forget(self, done_ttl: float) -> None:
        """Delete the markers past done_ttl, but not one whose message still waits in
        working/: a process killed between the marker and the send (another than this one,
        whose books were read before) left it, and only the marker tells its restart that
        the `deliver` came. Deleted, the message passed for one whose `deliver` never came:
        sent only if its sender sent its `deliver` again before pending_ttl from its
        `assured`, else dropped, though its sender was done with it. Costs what changed
        (a listing when the folder did, a stat of each marker new in it) and what is due."""
        limit = self._clock.now() - done_ttl
        self._list_markers()
        times, heap = self._marker_times, self._marker_heap
        due = list(self._stuck)
        while heap and heap[0][0] < limit:
            written, name = heapq.heappop(heap)
            if times.get(name) == written:
                del times[name]
                due.append(name)
        stuck: dict[str, float] = {}
        pinned: dict[str, float] = {}
        scanned: Mapping[str, Envelope] | None = None  # what waits, by marker name, if listed
        for name in due:
            path = os.path.join(self._markers, name)
            try:
                written = os.stat(path).st_mtime
            except FileNotFoundError:
                continue
            if written >= limit:  # written again since it was listed
                self._note_marker(name, written)
                continue
            waits, topic = self._waits(path)
            if waits is None:
                # A marker that names no file (a boxmq before 2026-11-30's, or damaged):
                # one scan of working/ for them all, after the listing (a message that
                # leaves it meanwhile was sent, and its marker may go).
                if scanned is None:
                    scanned = self._waiting()
                envelope = scanned.get(name)
                waits = envelope is not None
                topic = None if envelope is None else replaced_topic(envelope, False)
            if waits:
                stuck[name] = written
                if topic is not None:
                    pinned[topic] = min(written, pinned.get(topic, written))
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._stuck, self._pinned = stuck, pinned

    def _list_markers(self) -> None:
        """Learn the markers new in the folder since the last listing (one stat each), and
        forget those gone; nothing if the folder is as it was then, settled."""
        if self._markers_seen is not None and folder_seen(self._markers) == self._markers_seen:
            return
        seen = None if self._polling else settled_seen(self._markers)  # before the listing
        times, stuck = self._marker_times, self._stuck
        names: set[str] = set()
        with contextlib.suppress(FileNotFoundError), os.scandir(self._markers) as entries:
            for entry in entries:
                names.add(entry.name)
                if entry.name not in times and entry.name not in stuck:
                    with contextlib.suppress(FileNotFoundError):
                        self._note_marker(entry.name, entry.stat().st_mtime)
        for name in times.keys() - names:
            del times[name]
        for name in stuck.keys() - names:
            del stuck[name]
        self._markers_seen = seen

    def _note_marker(self, name: str, written: float) -> None:
        self._marker_times[name] = written
        heapq.heappush(self._marker_heap, (written, name))
