"""A stream's claims on one dropbox: which message belongs to which micro-batch, on disk.

A micro-batch is a range of sequence numbers (start, end]. `next_end` picks ready messages in
delivery order, gives each the next number and writes that plan down (plans.py) before Spark
logs the batch; the batch's tasks then claim them (rename target/ → processing/ under a locked
name whose owner carries the number: `spark~<stream>~<seq>`, boxmq's ordinary lock suffix) and
read them. A batch replayed after a crash reads exactly the messages its plan numbered, however
the process that planned or claimed them ended. Invariants:

- numbers only grow, across restarts and new checkpoints: the next one is above the persisted
  high-water mark, above every number still in processing/ and above the batch's start (research
  note §4: numbering again from 1 after a restart made "ack <= start" swallow new messages);
- a number is given once: a planned message keeps its number until it is acknowledged, and is
  never planned again under another while its plan lives;
- a claim leaves processing/ only by `ack` (to processed/ under its original name, once Spark
  has committed its batch) or by a boxmq sweeper once the lock's deadline has passed;
- the lock carries no process token, so no liveness check releases it; only its deadline does;
- one `Claims` per stream at a time: it holds an exclusive lock on the stream's state file.

State: `<root>/.spark/streams/<stream>/state.json` (high-water mark, the number acknowledged up
to, queue, consumer), `plans/` and `lock`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import heapq
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from boxmq.client.lifecycle import set_aside, tell_expired, unusable
from boxmq.errors import BoxMQError, InvalidArgument, QueueNotFound
from boxmq.model import ConsumerId
from boxmq.spark.durable import write_json
from boxmq.spark.plans import Plan, load_plans, remove_plans, write_plan
from boxmq.store.commit import Committer, FsyncPolicy
from boxmq.store.dropbox import Dropbox, move_apart, moved_into_made_folder
from boxmq.store.layout import State
from boxmq.store.names import MAX_NAME, Lock, decode_lenient, locked_name, split_lock

__all__ = ["Budget", "Claim", "Claims", "StreamBusy", "state_dir", "stream_id"]

log = logging.getLogger("boxmq.spark")

_OWNER = re.compile(r"spark~([0-9a-f]{10})~([0-9]{1,19})")
# priority.id.class[.expiration[.more]] with a plain id, read without a full decode; group 2
# is the JMS time (epoch ms x 1000) of an id in DropboxMQ's shape (model.timestamp_of).
_FAST = re.compile(
    r"(-?[0-9]{1,10})\.(?:([0-9]{16})-[0-9]+|[A-Za-z0-9_-]+)\.[MBSPOT](?:$|\.([0-9]{0,18})(?:$|\.))"
)
_INT32 = 2**31
_DELAYED = "bx_nbL="  # a name with a not-before time (a delayed unlock) needs a full decode


class StreamBusy(BoxMQError):
    """Another running query already reads this destination as this consumer."""


def stream_id(dropbox: str, consumer: str) -> str:
    """Ten hex digits naming (dropbox, consumer): short enough for a 40-byte lock owner."""
    return hashlib.sha256(f"{os.path.realpath(dropbox)}\0{consumer}".encode()).hexdigest()[:10]


def state_dir(root: str, stream: str) -> str:
    return os.path.join(root, ".spark", "streams", stream)


class Claim(NamedTuple):  # a tuple: a batch makes 100,000 of them, 4x faster than a dataclass
    seq: int
    name: str  # in target/ before, in processed/ after
    locked: str  # in processing/
    size: int  # bytes, for maxBytesPerTrigger (0: not looked at)


@dataclass(frozen=True, slots=True)
class Budget:
    """How much one micro-batch may take; None is no limit."""

    rows: int | None = None
    bytes: int | None = None

    def allows(self, rows: int, size: int, next_size: int) -> bool:
        """Whether a batch of `rows` totalling `size` bytes may take one more of `next_size`."""
        if self.rows is not None and rows >= self.rows:
            return False
        # Always at least one message, or one big message would stall the stream forever.
        return self.bytes is None or rows == 0 or size + next_size <= self.bytes


class Claims:
    """The claims of one stream (a dropbox and a consumer name); used by the driver only."""

    def __init__(
        self,
        root: str,
        dropbox: str,
        consumer: str,
        *,
        lock_timeout: float,
        flush: bool,
        now: Callable[[], float] = time.time,
        wait: float = 10.0,
        subscription: str | None = None,
    ) -> None:
        self.stream = stream_id(dropbox, consumer)
        self._dropbox = dropbox
        self._subscription = subscription  # the option, when the dropbox is a subscription's
        self._dirs = {state: os.path.join(dropbox, state.value) for state in State}
        self._state = state_dir(root, self.stream)
        self._plans_dir = os.path.join(self._state, "plans")
        self._plans: dict[int, Plan] = {}  # by first number: the plans not acknowledged yet
        self._lock_timeout = lock_timeout
        self._flush = flush
        self._now = now
        self._pending: dict[int, Claim] = {}
        self._meta = {"dropbox": os.path.realpath(dropbox), "consumer": consumer}
        os.makedirs(self._plans_dir, exist_ok=True)
        self._lock_fd = _lock(os.path.join(self._state, "lock"), self._meta, wait)
        self._hwm, self._acked = self._read_state()
        self._load()

    # -- what Spark asks -----------------------------------------------------------------------

    def next_end(self, start: int, budget: Budget, only: frozenset[str] | None = None) -> int:
        """Plan the batch after `start`: acknowledge everything up to `start` (Spark committed
        it), take claims already made and not yet planned, claim more while the budget allows,
        and return the batch's end (== start when there is nothing to read)."""
        self.ack(start)
        rows = size = 0
        end = start
        for seq in sorted(s for s in self._pending if s > start):
            claim = self._pending[seq]
            if not budget.allows(rows, size, claim.size):
                return end  # the rest waits for the next batch, with the numbers it has
            rows, size, end = rows + 1, size + claim.size, seq
        claimed = self._claim(max(start, self.high_water()), budget, rows, size, only)
        return claimed[-1].seq if claimed else end

    def between(self, start: int, end: int) -> list[Claim]:
        """The claims of the batch (start, end], in order."""
        return [self._pending[seq] for seq in sorted(self._pending) if start < seq <= end]

    def ack(self, upto: int) -> int:
        """processing/ → processed/ (original name) for every claim numbered <= `upto`."""
        done = missing = 0
        acked = sorted(s for s in self._pending if s <= upto)
        if not acked:
            return 0
        processing = self._dirs[State.PROCESSING] + os.sep
        processed = self._dirs[State.PROCESSED] + os.sep
        for seq in acked:
            claim = self._pending.pop(seq)
            # Never over a file of that name: a producer may have reused it (move_apart).
            locked = processing + claim.locked
            placed = move_apart(locked, processed, claim.name)
            if placed is None:
                # processed/ deleted by hand: it stayed locked until lockTimeout, then read again
                placed = moved_into_made_folder(move_apart, locked, processed, claim.name)
            if placed is None:
                missing += 1
            else:
                done += 1
        if missing:
            # Another consumer claimed it before the task could, or its lock timed out and a
            # sweeper took it back: either way someone else delivers it.
            log.info(
                "stream %s: %d claim(s) up to %d were not in processing/",
                self.stream,
                missing,
                upto,
            )
        self._acked = max(self._acked, upto)
        self._write_state()
        finished = [plan for plan in self._plans.values() if plan.last <= upto]
        remove_plans(self._plans_dir, finished)  # after the state: no plan is read twice
        for plan in finished:
            del self._plans[plan.first]
        return done

    def snapshot(self) -> frozenset[str]:
        """What is ready now: Trigger.AvailableNow reads these and no later arrivals."""
        return frozenset(entry.name for entry in self._ready())

    def high_water(self) -> int:
        return max([self._hwm, *self._pending])

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- claiming ------------------------------------------------------------------------------

    def _claim(
        self, after: int, budget: Budget, rows: int, size: int, only: frozenset[str] | None
    ) -> list[Claim]:
        """Number ready messages after `after`, within the budget, and write the plan down;
        the batch's tasks make the claims (claim_and_read in records.py)."""
        if not budget.allows(rows, size, 0):
            return []
        now = self._now()
        head, tail = self._suffix(int((now + self._lock_timeout) * 1000))
        wanted = None if budget.rows is None else budget.rows - rows
        sized = budget.bytes is not None
        candidates = self._candidates(now, only, limit=wanted, sized=sized)
        if sized:
            chosen = []
            for candidate in candidates:
                if not budget.allows(rows, size, candidate[3]):
                    break
                chosen.append(candidate)
                rows, size = rows + 1, size + candidate[3]
        else:
            chosen = candidates[:wanted]  # no per-message test for a count (or no) limit
        if not chosen:
            return []
        first = after + 1
        planned = [
            Claim(seq, name, f"{name}{head}{seq}@{tail}", bytes_)
            for seq, (_, _, name, bytes_) in enumerate(chosen, first)
        ]
        names = tuple(claim.name for claim in planned)
        sizes = tuple(claim.size for claim in planned) if sized else ()
        plan = Plan(first, names, head, tail, sizes)
        # The plan first, then the high-water mark: a plan found at start-up raises it too.
        write_plan(self._plans_dir, plan, flush=self._flush)
        self._plans[first] = plan
        self._pending.update((claim.seq, claim) for claim in planned)
        self._write_state(plan.last)
        return planned

    def _suffix(self, deadline: int) -> tuple[str, str]:
        """The lock suffix as names.locked_name writes it, in two halves around the number
        (only the digits differ between a plan's claims): name + head + seq + "@" + tail."""
        probe = locked_name("x", Lock(ConsumerId(f"spark~{self.stream}~0"), deadline, ""))
        head, tail = probe[1:].split("0@", 1)  # "@spark%7E<stream>%7E", "<deadline>@"
        assert f"x{head}7@{tail}" == locked_name("x", Lock(self._owner(7), deadline, ""))
        return head, tail

    def _owner(self, seq: int) -> ConsumerId:
        return ConsumerId(f"spark~{self.stream}~{seq}")

    def _candidates(
        self, now: float, only: frozenset[str] | None, *, limit: int | None, sized: bool
    ) -> list[tuple[int, int, str, int]]:
        """Ready messages in delivery order, as (-priority, time, name, size): flat tuples
        sort fastest, and names are unique. Expired ones are moved to expired/ on the way."""
        found = []
        expired: list[str] = []
        now_ms = now * 1000
        # Planned earlier and not claimed yet (a plan Spark never logged): they keep their
        # numbers and come first (next_end), so they are not numbered again here.
        planned = {claim.name for claim in self._pending.values()}
        for entry in self._ready():
            name = entry.name
            if only is not None and name not in only:
                continue
            if name in planned:
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            if not name.isascii() or len(name) > MAX_NAME:
                why = unusable(name)  # not UTF-8, or too long to carry a lock
                if why is not None:
                    self._set_aside(name, why)  # as a queue consumer does: never claimed
                    continue
            key = self._order(entry, now_ms, expired)
            if key is None:
                continue
            # Sizes matter for maxBytesPerTrigger only; a stat per file is not free.
            size = entry.stat(follow_symlinks=False).st_size if sized else 0
            found.append((*key, size))
        # Said once per look, as every other reader of a queue says it: `boxmq ls` counted
        # them ready, and the query's rows will never hold them.
        tell_expired(self._meta["dropbox"], len(expired))
        if limit is not None and limit < len(found) // 4:
            # A small batch out of a big backlog: no need to sort all of it. Extra candidates
            # stand in for those another consumer takes first.
            return heapq.nsmallest(limit + 100, found)
        found.sort()
        return found

    def _ready(self) -> Iterator[os.DirEntry[str]]:
        """The entries of target/; none when it is missing (_gone: what that means)."""
        try:
            entries = os.scandir(self._dirs[State.TARGET])
        except FileNotFoundError:
            self._gone()
            return
        with entries:
            yield from entries

    def _gone(self) -> None:
        """target/ is missing. A queue deleted under the running query reads as empty until a
        put makes it again, as for any consumer of it (docs/operations.md); a subscription
        ended under it (unsubscribe) would get nothing more, ever: that query fails."""
        if self._subscription is not None:
            raise QueueNotFound(
                f"boxmq source: subscription {self._subscription!r} of "
                f"{self._meta['consumer']!r} was ended under the running query (unsubscribe, "
                "or a share group's last member left); restart the query to register it again"
            ) from None  # called while the FileNotFoundError is handled: not its cause

    def _set_aside(self, name: str, why: str) -> None:
        """target/<name>, which no row can carry, to error/ under the same name, logged."""
        box = Dropbox(self._dropbox, Committer(self._dropbox, FsyncPolicy.NEVER), create=False)
        set_aside(box, self._meta["dropbox"], name, why)

    def _order(
        self, entry: os.DirEntry[str], now_ms: float, expired: list[str]
    ) -> tuple[int, int, str] | None:
        """(-priority, timestamp ms, name), or None for a message not to deliver now; one
        whose expiration passed is moved to expired/ and its name added to `expired`."""
        name = entry.name
        fast = _FAST.match(name) if _DELAYED not in name else None
        stamp: int | None
        if fast is not None and -_INT32 <= (priority := int(fast[1])) < _INT32:
            # The common case, read without a full decode: priority, id time, expiration.
            expiration = int(fast[3] or 0)
            stamp = int(fast[2]) // 1000 if fast[2] else None
        else:
            envelope, _ = decode_lenient(name)
            if envelope.not_before * 1000 > now_ms:
                return None  # released with a delay that has not passed
            priority, expiration, stamp = envelope.priority, envelope.expiration, envelope.timestamp
        if 0 < expiration <= now_ms:
            folder = self._dirs[State.EXPIRED] + os.sep
            moved = move_apart(entry.path, folder, name)  # as Dropbox.move does
            if moved is None:
                moved = moved_into_made_folder(move_apart, entry.path, folder, name)
            if moved is not None:  # else another consumer took it (or expired it) first
                expired.append(name)
            return None
        if stamp is None:
            stamp = int(entry.stat(follow_symlinks=False).st_mtime * 1000)
        return -priority, stamp, name

    # -- state on disk -------------------------------------------------------------------------

    def _load(self) -> None:
        """Rebuild the claims not acknowledged yet (a new runner after a restart): the plans,
        and claims in processing/ that no plan lists (made by a version without plans)."""
        for plan in load_plans(self._plans_dir):
            self._plans[plan.first] = plan
            for index, name in enumerate(plan.names):
                seq = plan.first + index
                if seq > self._acked:
                    self._pending[seq] = Claim(seq, name, plan.locked(index), plan.size(index))
        processing = self._dirs[State.PROCESSING]
        try:
            entries = os.scandir(processing)
        except FileNotFoundError:
            return  # deleted by hand, so no claims: the first one makes it again (read_files)
        with entries:
            for entry in entries:
                name, lock = split_lock(entry.name)
                if lock is None:
                    continue
                match = _OWNER.fullmatch(lock.owner)
                if match is None or match[1] != self.stream:
                    continue
                seq = int(match[2])
                if seq in self._pending:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    size = entry.stat(follow_symlinks=False).st_size
                    self._pending[seq] = Claim(seq, name, entry.name, size)

    def _read_state(self) -> tuple[int, int]:
        """(high-water mark, acknowledged up to) from state.json; (0, 0) for a new stream."""
        try:
            with open(os.path.join(self._state, "state.json")) as source:
                data = json.load(source)
        except FileNotFoundError:
            return 0, 0
        except ValueError:
            raise InvalidArgument(
                f"{self._state}/state.json is damaged; it only holds the highest claim number: "
                "remove it if no query reads this stream (numbers then restart above what "
                "processing/, plans/ and the checkpoint hold)"
            ) from None
        values = [data.get(key, 0) for key in ("seq", "acked")]
        hwm, acked = (value if isinstance(value, int) else 0 for value in values)
        return hwm, acked

    def _write_state(self, seq: int = 0) -> None:
        self._hwm = max(self._hwm, seq)
        # Numbers must only grow, also after a power cut: the plans that also say how far they
        # went are removed once acknowledged.
        data = {"seq": self._hwm, "acked": self._acked, **self._meta}
        write_json(os.path.join(self._state, "state.json"), data, flush=self._flush)


def _lock(path: str, meta: dict[str, str], wait: float) -> int | None:
    """An exclusive lock held as long as the stream runs (a dead process drops it).

    `wait`: a query restarted at once may find its old runner still exiting."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                return None  # a file system without flock (some NFS): run without the guard
            if time.monotonic() > deadline:
                os.close(fd)
                raise StreamBusy(
                    f"another running query reads {meta['dropbox']} as consumer "
                    f"{meta['consumer']!r}; stop it, or give this one another "
                    '.option("consumer", ...)'
                ) from None
            time.sleep(0.2)
