"""What the engine of one live queue decides, done to its files.

Each effect of the core engine is one rename in the dropbox: a claim (target/ ->
processing/ under a lock, `_claim`), a finish (to processed/, or deleted), a release (back
to target/, its delivery counted in the name), a dead letter (to error/), an expiry (to
expired/), an extend (the lock renamed in place). A claim another process won, or a lock
another process settled or took meanwhile, is told back to the engine; a rename the disk
refuses undoes the claims not made.
"""

from __future__ import annotations

import logging
import os
from typing import Final

from boxmq.client.held_locks import HeldLocks
from boxmq.client.lifecycle import (
    dead_name,
    delay_dropped,
    lock_gone,
    released_name,
    tell_expired,
)
from boxmq.core import (
    Claim,
    DeadLetter,
    DeadReason,
    Effect,
    Expire,
    Extend,
    Finish,
    Lease,
    Release,
    ReleaseReason,
)
from boxmq.model import MessageId
from boxmq.store.layout import State
from boxmq.store.names import Lock, lock_suffixed, locked_name

__all__ = ["LiveEffects", "why_dead"]

log = logging.getLogger("boxmq.queue")

# Read from module globals on the hot path: Enum's metaclass has a __getattr__, so each
# `State.TARGET` is a slow attribute lookup (~800 instructions), a global one cached load.
_TARGET, _PROCESSING = State.TARGET, State.PROCESSING

# A read of target/ is due once the claims lost since the last one pass 1/16 of the names
# known (and 16): a lost claim (a rename that finds nothing, then the next dispatch) costs
# Python about what reading 16 names does.
_LOST_PER_READ: Final = 16

# Releases worth a line in the log: the holder did not give the message back itself.
_TOLD = frozenset({ReleaseReason.TIMED_OUT, ReleaseReason.OWNER_GONE})


class LiveEffects(HeldLocks):
    def _expire(self, now: float) -> bool:
        """End the locks whose deadline passed and expire what is due; True if any. A claim
        its consumer never received goes back as it was (the engine's give_back): timers of
        claims made ahead of a receive run from the claim (docs/python.md), and a message
        nobody saw counts no delivery and passes nobody over, so its consumer may claim it
        again at once, under a lock of its own."""
        if self._engine.lapsing(now=now):
            self._reconcile()  # another process may have extended it: its name says
        expired = self._engine.expire(now=now, unreceived=self._unreceived)
        if expired:
            self._apply_all(expired)
        return bool(expired)

    def _unreceived(self, lease: Lease) -> bool:
        message_id = lease.message.message_id
        inbox = self._inbox.get(lease.holder)
        return inbox is not None and message_id in inbox and message_id not in self._adopted

    def _apply_all(self, effects: list[Effect]) -> bool:
        """Apply effects in order; True if a claim was lost (dispatch again)."""
        lost = False
        effect: Effect | None = None
        try:
            # One try around a plain loop: enumerate's iterator and its index tuples cost
            # about 460 instructions a message; the failing effect is found only on failure.
            for effect in effects:
                # A claim is the common effect here: straight to its method, by exact type.
                lost = (
                    self._claim(effect) if type(effect) is Claim else self._apply(effect)
                ) or lost
        except (OSError, KeyboardInterrupt, SystemExit) as error:
            cut = next((i for i, each in enumerate(effects) if each is effect), None)
            if cut is None:  # a signal's, before the first
                self._unclaim(effects)
            elif isinstance(error, OSError):  # the disk refused this effect's move
                self._unclaim(effects[cut:])
            else:  # a signal's, raised at any bytecode of this effect
                self._claim_as_on_disk(effects[cut])
                self._unclaim(effects[cut + 1 :])
            raise
        finally:
            if self._expired:  # said once for the batch, as `get` says it
                tell_expired(self.name, self._expired)
                self._expired = 0
        return lost

    def _unclaim(self, effects: list[Effect]) -> None:
        """The claims among `effects` that the disk did not make, a rename refused (EROFS,
        EACCES, EIO): taken back from the engine as claims lost, their files still in target/
        offered again at the next look. Left in the engine, each held a consumer's slot with
        no file behind it: its receives came back empty, and its close raised KeyError."""
        for effect in effects:
            if type(effect) is Claim:
                self._known.pop(effect.message.key, None)  # else the rescan skips it
                self._engine.claim_lost(effect.message.message_id)
                self._next_scan = 0.0

    def _claim_as_on_disk(self, effect: Effect) -> None:
        """A claim cut short by an interrupt, which Python raises when the rename's system
        call returns (ctypes): made as far as the disk says. Its file in processing/ under its
        lock is held, in its consumer's inbox (handed out, or released at its close); else it
        is taken back as a claim not made. Left as it was, the engine counted a lock this
        process had no file name for: the consumer's close raised KeyError in place of the
        interrupt, and the message stayed locked until its deadline."""
        if type(effect) is not Claim:
            return
        message_id, holder = effect.message.message_id, effect.holder
        inbox = self._inbox[holder]
        if message_id in self._locks:  # made, the interrupt after it
            if message_id not in inbox:
                inbox.append(message_id)
            return
        locked = self._lock_name(effect)
        if os.path.lexists(self._box.file(_PROCESSING, locked)):
            self._locks[message_id] = locked
            inbox.append(message_id)
        else:
            self._unclaim([effect])

    def _lock_name(self, effect: Claim) -> str:
        token = "" if effect.holder in self._outliving else self._token  # see attach
        return lock_suffixed(effect.message.key, effect.holder, int(effect.deadline * 1000), token)

    def _apply(self, effect: Effect) -> bool:
        """Apply one effect; True if a lock it acts on was gone: a claim lost to another
        process, or a lock another process settled or took since (its move found no file)."""
        if not self._stirred:
            self._stir()
        # Claims and finishes are one each per message: tested first, by exact type (a match
        # statement's class patterns cost several attribute lookups per case).
        if type(effect) is Claim:
            return self._claim(effect)
        message = effect.message
        if not isinstance(effect, Extend):
            self._claimed.pop(message.message_id, None)  # a lock that ends before any receive
            if self._adopted:  # mostly empty: no call per settle
                self._adopted.discard(message.message_id)
            if not isinstance(effect, Expire):
                self._unqueue(message.message_id, effect.holder)
            if self._behind:
                self._let_go(message.message_id)
        if type(effect) is Finish:
            self._finish(message.message_id, message.key)
            return False
        match effect:
            case Release(reason=ReleaseReason.GIVEN_BACK):
                return self._release(effect, message.key)  # never received: back as it was
            case Release():
                return self._release(effect, _released_name(effect))
            case DeadLetter(reason=reason, holder=holder):
                held = self._locks.pop(message.message_id, None)
                if held is None:
                    return False
                why = _dead_reason(reason)
                # A reject, or the delivery that reached max deliveries, ends here: counted.
                count = message.delivery_count + 1
                dead = dead_name(message.key, why, holder=holder, delivery_count=count)
                return self._to_error(message.message_id, held, dead, why)
            case Expire():
                held = self._locks.pop(message.message_id, None)
                if held is None:
                    self._known.pop(message.key, None)
                    self._expired += self._box.move(State.TARGET, message.key, State.EXPIRED)
                else:  # locked ahead, and expired before its receive: under its own name
                    self._expired += self._move_lock(held, State.EXPIRED, message.key) is not None
            case Extend(holder=holder, deadline=deadline):
                old = self._locks[message.message_id]
                token = "" if holder in self._outliving else self._token
                wanted = locked_name(message.key, Lock(holder, int(deadline * 1000), token))
                new = self._move_lock(old, _PROCESSING, wanted)
                if not new:
                    self._forget(message.message_id)
                    raise lock_gone(message.message_id, self._box.path)
                self._locks[message.message_id] = new
        return False

    def _finish(self, message_id: MessageId, name: str) -> None:
        if not self._stirred:
            self._stir()
        processing = self._locks.pop(message_id)
        keep = self._options.keep_processed
        # _on_lock's work, written out: no closure to make for the one ack of every message.
        try:
            if self._box.finish(processing, name, keep=keep):
                return
        except OSError:
            self._locks[message_id] = processing  # where it still is
            raise
        moved = self._moved(processing)  # another process extended it by id meanwhile?
        if moved is None or not self._box.finish(moved, name, keep=keep):
            raise lock_gone(message_id, self._box.path)

    def _claim(self, effect: Claim) -> bool:
        """Rename target/ -> processing/ under the lock; True if another process won it."""
        message, holder = effect.message, effect.holder
        envelope = self._known.pop(message.key, None)
        # Our put, claimed before the watcher told of it: it will not (came and left between
        # two reads), so no news is left to skip.
        self._sent.discard(message.key)
        processing = self._box.claim(message.key, self._lock_name(effect))
        if processing is None:
            self._engine.claim_lost(message.message_id)
            self._lost += 1
            known = len(self._known) + len(self._cold)
            if self._lost > max(_LOST_PER_READ, known // _LOST_PER_READ):
                # What we know of target/ is stale (its news was lost: see _scan), and the
                # claims failing one by one on names another process took cost more than a
                # read of the folder: two processes draining 300,000 messages, one lost 188,000
                # claims for 1,500 won. Read it at the next look.
                self._next_scan = 0.0
            # A file of its id may wait in target/ behind the name that was lost (another
            # process took that name and gave the message back under a new one before we
            # looked): offered at the look that follows, not at the next full rescan.
            self._let_go(message.message_id)
            return True
        self._locks[message.message_id] = processing
        if envelope is not None:
            self._claimed[message.message_id] = envelope
        self._inbox[holder].append(message.message_id)
        return False

    def _release(self, effect: Release, new: str | None) -> bool:
        """Move a released lock's file back to target/; True if it was gone (`_apply`)."""
        message = effect.message
        processing = self._locks.pop(message.message_id)
        if new is None:  # the name cannot carry a delivery count: never loop forever on it
            dead = dead_name(message.key, "metadata-full", holder=effect.holder)
            return self._to_error(message.message_id, processing, dead, "metadata-full")
        placed = self._move_lock(processing, _TARGET, new)
        if placed is None:
            return True
        if delay_dropped(new, effect.not_before):
            log.info(
                "%s: %s released at once, not delayed: its name has no room for the delay",
                self.name,
                message.message_id,
            )
        now = self._clock.now()
        if effect.reason in _TOLD:
            log.info(
                "%s: %s %s by %s%s",
                self.name,
                message.message_id,
                effect.reason.name.lower().replace("_", " "),
                effect.holder,
                # Its expiration passed while it was locked: offered again, it goes to
                # expired/ at once (`_tick`), as it would from any process, given to nobody.
                " after it expired: to expired/" if message.expired(now) else ": redelivering",
            )
        self._offer(placed, now, cold=False)
        return False

    def _to_error(self, message_id: MessageId, processing: str, dead: str, why: str) -> bool:
        """Move a lock's file to error/ as `dead`, said in the log with `why` (a long name
        keeps no bx_why, so the log is all there is); True if it was gone (`_apply`)."""
        if self._move_lock(processing, State.ERROR, dead) is None:
            return True
        log.warning("%s: %s to error/ (%s)", self.name, message_id, why)
        return False


def _released_name(release: Release) -> str | None:
    """The target/ name of a released message (None: it cannot carry one more delivery)."""
    return released_name(
        release.message.key,
        delivery_count=release.delivery_count,
        holder=release.passed_over,
        not_before=release.not_before,
    )


def _dead_reason(reason: DeadReason) -> str:
    return reason.name.lower().replace("_", "-")  # MAX_DELIVERIES: "max-deliveries"


def why_dead(unlocked: Effect) -> str | None:
    """What `unlock` answers: None when the message went back to target/, else why it went
    to error/, as DiskSettler.unlock says it (python.md)."""
    if isinstance(unlocked, DeadLetter):
        return _dead_reason(unlocked.reason)
    if isinstance(unlocked, Release) and _released_name(unlocked) is None:
        return "metadata-full"
    return None
