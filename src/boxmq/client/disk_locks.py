"""Settling a lock from the files alone, for a process that did not take it (the CLI).

`boxmq get` claims in one process and `boxmq ack` answers in another, so the answer is decided
from what the folder shows: the lock suffix names the holder, the `bx_last` property names the
previous one. The decision itself is the core's (`check_holder`), the same as in the engine.

An answer by id names no delivery: it settles the lock the consumer holds on the message. A
`Message` that `Queue.get` returned names its own (`GotLock.name`, the name it was locked
under): every delivery after it has another name (an unlock, a timeout and a redrive each
rewrite the name's delivery count or holder; an extend keeps it), so a lock of the same
consumer under another name is a later delivery's, and the old handle is told its lock is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass

from boxmq.client.lifecycle import (
    dead_name,
    delay_dropped,
    envelope_of,
    lock_gone,
    released_or_dead,
)
from boxmq.core import QueuePolicy, check_holder, unlocked_until
from boxmq.core.durations import check_seconds
from boxmq.errors import InvalidArgument, ItemNotFound, LockError
from boxmq.model import ConsumerId, Envelope, MessageId
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import State, is_dropbox
from boxmq.store.names import Lock, locked_name, split_lock

__all__ = ["DiskSettler", "GotLock"]

_Now = Callable[[], float]

log = logging.getLogger("boxmq")


class DiskSettler:
    """Ack, unlock, reject and extend by message id, against the files of one queue."""

    def __init__(self, box: Dropbox, policy: QueuePolicy, now: _Now, keep_processed: bool) -> None:
        self._box = box
        self._policy = policy
        self._now = now
        self._keep_processed = keep_processed

    # `delivery`: the name, without its lock, of the delivery a handle answers for (GotLock);
    # None: whichever lock `consumer` holds on the message (an answer by id).

    def ack(self, message_id: MessageId, consumer: ConsumerId, delivery: str | None = None) -> None:
        name, processing, _ = self._held(message_id, consumer, delivery)
        if not self._box.finish(processing, name, keep=self._keep_processed):
            raise self._lost(message_id, consumer, delivery)

    def unlock(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        delay: float,
        delivery: str | None = None,
    ) -> str | None:
        """Back to target/ (None), not to be delivered for `delay` seconds (0: at once); or
        to error/ at max deliveries, or when the name cannot carry one more delivery: then
        the reason, which the caller is told (and the log)."""
        check_seconds("an unlock delay", delay, zero=True)
        name, processing, _ = self._held(message_id, consumer, delivery)
        count = envelope_of(name).delivery_count + 1
        not_before = unlocked_until(delay, now=self._now())
        new, dead = released_or_dead(
            name,
            delivery_count=count,
            max_deliveries=self._policy.max_deliveries,
            holder=consumer,
            not_before=not_before,
        )
        if dead is not None:
            # At max deliveries, this one counted; a name that cannot grow keeps its count.
            counted = count if dead == "max-deliveries" else None
            if not self._to_error(processing, name, dead, counted, consumer):
                raise self._lost(message_id, consumer, delivery)
            log.warning("%s: %s to error/ (%s)", self._box.path, message_id, dead)
            return dead
        assert new is not None
        if not self._box.move(State.PROCESSING, processing, State.TARGET, new):
            raise self._lost(message_id, consumer, delivery)
        if delay_dropped(new, not_before):
            log.info(
                "%s: %s released at once, not delayed: its name has no room for the delay",
                self._box.path,
                message_id,
            )
        return None

    def reject(
        self, message_id: MessageId, consumer: ConsumerId, delivery: str | None = None
    ) -> None:
        name, processing, _ = self._held(message_id, consumer, delivery)
        count = envelope_of(name).delivery_count + 1
        if not self._to_error(processing, name, "rejected", count, consumer):
            raise self._lost(message_id, consumer, delivery)

    def extend(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        seconds: float | None,
        delivery: str | None = None,
    ) -> float:
        """The lock's new deadline, epoch seconds, as its name now says it."""
        if seconds is None:
            raise InvalidArgument("say for how many seconds to extend the lock")
        check_seconds("a lock extension", seconds)
        name, processing, lock = self._held(message_id, consumer, delivery)
        deadline_ms = int((self._now() + seconds) * 1000)
        new = locked_name(name, Lock(lock.owner, deadline_ms, lock.token))
        if not self._box.move(State.PROCESSING, processing, State.PROCESSING, new):
            raise self._lost(message_id, consumer, delivery)
        return deadline_ms / 1000

    def lock_process(self, message_id: MessageId, consumer: ConsumerId) -> str | None:
        """The process token of the lock `consumer` holds on the message ("": bound to no
        process; GET_TOKEN: `get`'s, bound to none either), None if it holds none."""
        with closing(self._locked()) as locked:
            for _, name, lock in locked:
                if lock is None or lock.owner != consumer:
                    continue
                if envelope_of(name).message_id == message_id:
                    return lock.token
        return None

    def _to_error(
        self, processing: str, name: str, why: str, count: int | None, holder: ConsumerId
    ) -> bool:
        """To error/, with `count` deliveries ended without an ack (None: as the name says)
        and `holder`'s the last; False if the file was gone from processing/ (`_lost` says
        why)."""
        dead = dead_name(name, why, holder=holder, delivery_count=count)
        return self._box.move(State.PROCESSING, processing, State.ERROR, dead)

    def _lost(self, message_id: MessageId, consumer: ConsumerId, delivery: str | None) -> LockError:
        """The error of a settle whose file left processing/ between its look and its move:
        another thread or process settled it meanwhile (an ack: it is gone, ItemNotFound, as
        for an ack after the ack; an unlock: back in target/), or a sweep took its lock.
        Looked for again, it says which; "the lock was taken away" said so for an ack that
        lost to another ack, where docs/python.md promises ItemNotFound. Still held (another
        process's extend renamed it meanwhile): told as before, its lock not where it was."""
        try:
            self._held(message_id, consumer, delivery)
        except LockError as error:
            return error
        return lock_gone(message_id, self._box.path)

    def _held(
        self, message_id: MessageId, consumer: ConsumerId, delivery: str | None
    ) -> tuple[str, str, Lock]:
        """(name, processing name, lock) of a message `consumer` holds (as `delivery`, if
        named), or the XEP-0254 error."""
        with closing(self._locked()) as locked:
            for processing, name, lock in locked:
                envelope = envelope_of(name)
                if envelope.message_id != message_id:
                    continue
                holder = lock.owner if lock is not None else None
                if lock is not None and lock.deadline_ms <= self._now() * 1000:
                    holder = None  # timed out: a sweep will move it; it is nobody's any more
                earlier = delivery is not None and name != delivery
                _check_found(message_id, consumer, envelope, lock, holder, earlier=earlier)
                assert lock is not None  # check_holder passed, so `consumer` holds the lock
                return name, processing, lock
        with closing(self._box.scan(State.TARGET)) as ready:
            for entry in ready:
                envelope = envelope_of(entry.name)
                if envelope.message_id == message_id:
                    _check_found(message_id, consumer, envelope, None, None, earlier=False)
        if not is_dropbox(self._box.path):
            if delivery is not None:  # a handle's: held, its lock gone with the queue
                raise lock_gone(message_id, self._box.path)
            gone = f"no such message: its queue was deleted ({self._box.path} is gone)"
            raise ItemNotFound(message_id, gone)
        check_holder(message_id, consumer, holder=None, known=False, past_holders=())
        raise AssertionError("check_holder accepts no unknown message")  # pragma: no cover

    def _locked(self) -> Generator[tuple[str, str, Lock | None], None, None]:
        # Its readers stop at the lock they look for, closing this: the listing closes too.
        with closing(self._box.scan(State.PROCESSING)) as entries:
            for entry in entries:
                name, lock = split_lock(entry.name)
                yield entry.name, name, lock


@dataclass(frozen=True, slots=True)
class GotLock:
    """The settler of one message `Queue.get` locked: the queue's files, the lock timeout
    `get` was given, which `Message.extend()` without seconds renews, and the name it was
    locked under, which tells its delivery from a later one to the same consumer."""

    disk: DiskSettler
    lock_timeout: float
    name: str

    def ack(self, message_id: MessageId, consumer: ConsumerId, delivery: int | None) -> None:
        self.disk.ack(message_id, consumer, self.name)

    def unlock(
        self, message_id: MessageId, consumer: ConsumerId, delay: float, delivery: int | None
    ) -> str | None:
        return self.disk.unlock(message_id, consumer, delay, self.name)

    def reject(self, message_id: MessageId, consumer: ConsumerId, delivery: int | None) -> None:
        self.disk.reject(message_id, consumer, self.name)

    def decline(
        self, message_id: MessageId, consumer: ConsumerId, delivery: int | None
    ) -> str | None:
        # The files know no other consumer to keep it for: an unlock, for whoever comes next.
        return self.disk.unlock(message_id, consumer, 0.0, self.name)

    def extend(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        seconds: float | None,
        delivery: int | None,
    ) -> float:
        seconds = self.lock_timeout if seconds is None else seconds
        return self.disk.extend(message_id, consumer, seconds, self.name)


def _check_found(
    message_id: MessageId,
    consumer: ConsumerId,
    envelope: Envelope,
    lock: Lock | None,
    holder: ConsumerId | None,
    *,
    earlier: bool,
) -> None:
    """`check_holder` for a message found on disk as `envelope`, under `lock` (None: in
    target/), `holder` holding it now (None: nobody, or a `lock` that timed out); `earlier`:
    the request names a delivery before this one."""
    last = envelope.last_holder
    # Who held it before: the previous holder, and the holder of a lock that timed out.
    past = {last} if last is not None else set()
    if lock is not None and holder is None:
        past.add(lock.owner)
    check_holder(
        message_id,
        consumer,
        holder=holder,
        known=True,
        past_holders=past,
        earlier_delivery=earlier,
        # Delivered before, and its name keeps no holder: the lock of a holder that left (a
        # restart of its process, a disconnect) went back without one (effects.Release
        # .passed_over), so the requester may be the one that held it.
        holders_unrecorded=envelope.delivery_count > 0 and last is None,
    )
