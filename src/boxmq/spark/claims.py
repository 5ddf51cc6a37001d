"""A stream's claims on one dropbox: which message belongs to which micro-batch, on disk.

A micro-batch is a range of sequence numbers (start, end]. `next_end` moves ready messages
target/ → processing/ and gives each the next number, which it writes into the lock's owner
(`spark~<stream>~<seq>`, boxmq's ordinary lock suffix), so the folder itself says which batch
holds which message: a batch replayed after a crash reads exactly the files whose numbers fall
in its range, however the process that claimed them ended. Invariants:

- numbers only grow, across restarts and new checkpoints: the next one is above the persisted
  high-water mark, above every number still in processing/ and above the batch's start (research
  note §4: numbering again from 1 after a restart made "ack <= start" swallow new messages);
- a claim leaves processing/ only by `ack` (to processed/ under its original name, once Spark
  has committed its batch) or by a boxmq sweeper once the lock's deadline has passed;
- the lock carries no process token, so no liveness check releases it; only its deadline does;
- one `Claims` per stream at a time: it holds an exclusive lock on the stream's state file.

State: `<root>/.spark/streams/<stream>/state.json` (high-water mark, queue, consumer) and `lock`.
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
from collections.abc import Callable
from dataclasses import dataclass, field

from boxmq.errors import BoxMQError, InvalidArgument
from boxmq.model import ConsumerId
from boxmq.store.commit import flush_filesystem
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


@dataclass(frozen=True, slots=True)
class Claim:
    seq: int
    name: str  # in target/ before, in processed/ after
    locked: str  # in processing/
    size: int = field(compare=False)  # bytes, for maxBytesPerTrigger (0: not looked at)


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
    ) -> None:
        self.stream = stream_id(dropbox, consumer)
        self._dirs = {state: os.path.join(dropbox, state.value) for state in State}
        self._state = state_dir(root, self.stream)
        self._lock_timeout = lock_timeout
        self._flush = flush
        self._now = now
        self._pending: dict[int, Claim] = {}
        self._meta = {"dropbox": os.path.realpath(dropbox), "consumer": consumer}
        os.makedirs(self._state, exist_ok=True)
        self._lock_fd = _lock(os.path.join(self._state, "lock"), self._meta, wait)
        self._hwm = self._read_hwm()
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
        done = 0
        for seq in sorted(s for s in self._pending if s <= upto):
            claim = self._pending.pop(seq)
            try:
                os.rename(
                    os.path.join(self._dirs[State.PROCESSING], claim.locked),
                    os.path.join(self._dirs[State.PROCESSED], claim.name),
                )
                done += 1
            except FileNotFoundError:
                # Its lock timed out and a sweeper took it back: someone else delivers it now.
                log.warning("stream %s: %s was no longer in processing/", self.stream, claim.name)
        return done

    def snapshot(self) -> frozenset[str]:
        """What is ready now: Trigger.AvailableNow reads these and no later arrivals."""
        with os.scandir(self._dirs[State.TARGET]) as entries:
            return frozenset(entry.name for entry in entries)

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
        if not budget.allows(rows, size, 0):
            return []
        now = self._now()
        suffix = self._suffix(int((now + self._lock_timeout) * 1000))
        target, processing = self._dirs[State.TARGET], self._dirs[State.PROCESSING]
        claimed: list[Claim] = []
        seq = after
        wanted = None if budget.rows is None else budget.rows - rows
        candidates = self._candidates(now, only, limit=wanted, sized=budget.bytes is not None)
        for _, _, name, bytes_ in candidates:
            if not budget.allows(rows, size, bytes_):
                break
            locked = name + suffix(seq + 1)
            try:
                os.rename(os.path.join(target, name), os.path.join(processing, locked))
            except FileNotFoundError:
                continue  # another consumer was faster: no number is used up
            seq += 1
            claim = Claim(seq, name, locked, bytes_)
            self._pending[seq] = claim
            claimed.append(claim)
            rows, size = rows + 1, size + bytes_
        if claimed:
            if self._flush:
                flush_filesystem(processing)  # the claims survive a power cut before Spark's WAL
            self._write_hwm(seq)
        return claimed

    def _suffix(self, deadline: int) -> Callable[[int], str]:
        """The lock suffix for a number, as names.locked_name writes it, without encoding
        the owner again for each of a hundred thousand claims (only the digits change)."""
        probe = locked_name("x", Lock(ConsumerId(f"spark~{self.stream}~0"), deadline, ""))
        head, tail = probe[1:].split("0@", 1)  # "@spark%7E<stream>%7E", "<deadline>@"

        def suffix(seq: int) -> str:
            return f"{head}{seq}@{tail}"

        assert suffix(7) == locked_name("x", Lock(self._owner(7), deadline, ""))[1:]
        return suffix

    def _owner(self, seq: int) -> ConsumerId:
        return ConsumerId(f"spark~{self.stream}~{seq}")

    def _candidates(
        self, now: float, only: frozenset[str] | None, *, limit: int | None, sized: bool
    ) -> list[tuple[int, int, str, int]]:
        """Ready messages in delivery order, as (-priority, time, name, size): flat tuples
        sort fastest, and names are unique. Expired ones are moved to expired/ on the way."""
        found = []
        now_ms = now * 1000
        with os.scandir(self._dirs[State.TARGET]) as entries:
            for entry in entries:
                name = entry.name
                if only is not None and name not in only:
                    continue
                if len(name) > MAX_NAME and len(name.encode()) > MAX_NAME:
                    continue  # too long to carry a lock: boxmq's sweeper sends it to error/
                if not entry.is_file(follow_symlinks=False):
                    continue
                key = self._order(entry, now_ms)
                if key is None:
                    continue
                # Sizes matter for maxBytesPerTrigger only; a stat per file is not free.
                size = entry.stat(follow_symlinks=False).st_size if sized else 0
                found.append((*key, size))
        if limit is not None and limit < len(found) // 4:
            # A small batch out of a big backlog: no need to sort all of it. Extra candidates
            # stand in for those another consumer takes first.
            return heapq.nsmallest(limit + 100, found)
        found.sort()
        return found

    def _order(self, entry: os.DirEntry[str], now_ms: float) -> tuple[int, int, str] | None:
        """(-priority, timestamp ms, name), or None for a message not to deliver now."""
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
            with contextlib.suppress(FileNotFoundError):
                os.rename(entry.path, os.path.join(self._dirs[State.EXPIRED], name))
            return None
        if stamp is None:
            stamp = int(entry.stat(follow_symlinks=False).st_mtime * 1000)
        return -priority, stamp, name

    # -- state on disk -------------------------------------------------------------------------

    def _load(self) -> None:
        """Rebuild the claims still in processing/ (a new runner after a restart)."""
        processing = self._dirs[State.PROCESSING]
        with os.scandir(processing) as entries:
            for entry in entries:
                name, lock = split_lock(entry.name)
                if lock is None:
                    continue
                match = _OWNER.fullmatch(lock.owner)
                if match is None or match[1] != self.stream:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    size = entry.stat(follow_symlinks=False).st_size
                    seq = int(match[2])
                    self._pending[seq] = Claim(seq, name, entry.name, size)

    def _read_hwm(self) -> int:
        try:
            with open(os.path.join(self._state, "state.json")) as source:
                value = json.load(source).get("seq", 0)
        except FileNotFoundError:
            return 0
        except ValueError:
            raise InvalidArgument(
                f"{self._state}/state.json is damaged; it only holds the highest claim number: "
                "remove it if no query reads this stream (numbers then restart above what "
                "processing/ and the checkpoint hold)"
            ) from None
        return int(value) if isinstance(value, int) else 0

    def _write_hwm(self, seq: int) -> None:
        self._hwm = max(self._hwm, seq)
        path = os.path.join(self._state, "state.json")
        temporary = f"{path}.tmp"
        with open(temporary, "w") as out:
            json.dump({"seq": self._hwm, **self._meta}, out)
        os.replace(temporary, path)


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
