"""The locks of a live queue's consumers that outlive their process, taken back.

A consumer a later process may go on with (a persistent MQTT session, `attach` with
outlives_process) holds locks that name no process: they last through its process's end
until their deadline, and the next process that attaches a consumer of that name takes them
back (`_adopt`), first in its inbox, their deliveries not counted twice, as delivered
already.
"""

from __future__ import annotations

import logging

from boxmq.client.lifecycle import envelope_of, ready_of, unusable
from boxmq.client.live_effects import LiveEffects
from boxmq.core.durations import LONGEST
from boxmq.errors import UnexpectedRequest
from boxmq.model import ConsumerId, MessageId
from boxmq.store.layout import State
from boxmq.store.names import split_lock

__all__ = ["Outliving"]

log = logging.getLogger("boxmq.queue")


class Outliving(LiveEffects):
    def take_back(self, consumer: ConsumerId) -> int:
        """For a consumer attached with outlives_process: the locks under its name that name
        no process and that this process does not hold are its own again here, in its inbox
        in their order (one look in processing/); how many. Another process's consumer of
        that name took them since this one's attach, and closed keeping them: an MQTT
        session whose client was connected to another server meanwhile. Those this process
        holds, for this consumer or any other, are left as they are."""
        with self._mutex:
            if consumer not in self._outliving or consumer not in self._inbox:
                return 0
            inbox = self._inbox[consumer]
            waiting = len(inbox)
            found = self._adopt(consumer, "taken by another process meanwhile")
            if found and waiting:  # behind what was claimed here since: put in order
                ordered = sorted(inbox, key=self._dispatch_order)
                inbox.clear()
                inbox.extend(ordered)
            return found

    def _dispatch_order(self, message_id: MessageId) -> tuple[int, float, str]:
        """Where a claimed message goes among others, as the engine dispatches them."""
        lease = self._engine.lease(message_id)
        if lease is None:
            return (0, 0.0, "")  # its lock ended: `_take` skips it
        message = lease.message
        return (-message.priority, message.sequence, message.key)

    def _adopt(self, consumer: ConsumerId, why: str = "held when its last process ended") -> int:
        """The locks of `consumer` that name no process, left in processing/ by a process
        before this one (or by this one's consumer of that name, closed keeping them); how
        many."""
        now_ms = self._clock.now() * 1000
        found = []
        for entry in self._box.scan(State.PROCESSING):
            name, lock = split_lock(entry.name)
            if lock is None or lock.owner != consumer or lock.token or lock.deadline_ms <= now_ms:
                continue
            if unusable(name) is not None:
                continue  # the sweeps set it aside once its lock ends
            envelope = envelope_of(name)
            message_id = envelope.message_id
            if message_id in self._locks or self._engine.lease(message_id) is not None:
                continue  # held here already, by another name
            stamp = envelope.timestamp
            sequence = stamp / 1000 if stamp is not None else 0.0
            found.append((sequence, entry.name, name, envelope, lock.deadline_ms / 1000))
        for sequence, processing, name, envelope, deadline in sorted(found):
            ready = ready_of(name, envelope, sequence)
            self._engine.adopt(ready, consumer, deadline=deadline)
            # Seen in target/ before the other process claimed it, it is no longer a name
            # to skip there: given back unchanged, it is offered again.
            self._known.pop(name, None)
            self._cold.discard(name)
            self._locks[envelope.message_id] = processing
            self._claimed[envelope.message_id] = envelope
            self._adopted.add(envelope.message_id)
            self._inbox[consumer].append(envelope.message_id)
        if found and self._engine.lock_timeout(consumer) >= LONGEST:
            # A lock its consumer's timeout makes last a century (an MQTT session's: only
            # its end releases it) that ends within half of one was written by a boxmq
            # before 2026-11-29, which gave such locks 7 days: a sweep would release it on
            # day 8, and the session get its message again as new beside its DUP resend.
            soon = now_ms / 1000 + LONGEST / 2
            for _, _, _, envelope, deadline in found:
                if deadline < soon:
                    self._lengthen(consumer, envelope.message_id)
        if found:
            log.info(
                "%s: %d message(s) %s %s are its own again",
                self.name,
                len(found),
                consumer,
                why,
            )
        return len(found)

    def _lengthen(self, consumer: ConsumerId, message_id: MessageId) -> None:
        """Renew a lock `_adopt` took back for its consumer's lock timeout from now, on disk
        too (any process's sweep reads its deadline there). One the disk refuses to rename
        keeps the deadline it had, said once here."""
        effect = self._engine.extend(message_id, consumer, now=self._clock.now())
        try:
            self._apply(effect)
        except OSError as error:
            log.warning(
                "%s: the lock of %s could not be renewed, it ends at its deadline: %s",
                self.name,
                message_id,
                error,
            )
        except UnexpectedRequest:
            pass  # another process settled it since the look: the next receive skips it
