"""The receiving side of exactly-once delivery: what is pending, what was delivered, and limits.

A message sent exactly once is known by (source, msg_id). The first ASSURED reserves room
for it (Action.STORE); the caller writes it in working/ and then calls `stored` (answer
`received` / PUBREC) or `forget` (the write failed). DELIVER moves it on (Action.DELIVER:
working/ -> target/), after which the id is remembered for `done_ttl` seconds so that late
repeats are answered and not stored again. The transitions are `qos.receive`'s table.

The limits are the urn:xmpp:qos "Memory attacks" counter-measures: assured service only from
trusted sources (NotAllowed), and caps on the number and bytes of pending messages per source
and in total (ResourceConstraint); plus a cap on one message (MessageTooLarge).

Invariants:
- The per-source and total counts and bytes always equal a recount of the pending messages
  (reserved or stored) and never go negative; sources with nothing pending are not listed.
- A refused call (any exception) changes nothing.
- A pending message older than `pending_ttl` is handed back once by `expire` (its deliver
  never came: DESIGN.md §1, cleaned up by age, never delivered), unless its source's session
  ended first: `drop_pending` hands back all of that source's at once.
- With `done_ttl == 0` nothing is remembered after delivery. MQTT needs that: after PUBCOMP a
  PUBLISH with the same packet id is a new message (MQTT 5.0 §4.3.3).
- Deadlines sit in min-heaps pruned lazily, so `expire` and `next_deadline` never scan all.
  The pending one is rebuilt when its stale items (messages delivered, forgotten or dropped
  since) outnumber the pending ones by more than a slack: MQTT delivers a QoS 2 message long
  before its pending_ttl, and each left its item for that hour (~100 million at 30,000 a
  second). The remembered one is not: an item of it goes stale only when an id is forgotten
  or reclaimed after its delivery, at most one for each delivery within `done_ttl`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, replace

from boxmq.core.durations import check_seconds
from boxmq.core.qos import Action, Incoming, Request, receive
from boxmq.errors import (
    InvalidArgument,
    MessageTooLarge,
    NotAllowed,
    ProtocolViolation,
    ResourceConstraint,
    check_count,
)

__all__ = [
    "ExactlyOnce",
    "ExactlyOnceLimits",
    "ExactlyOnceStats",
    "SourceOverLimit",
    "SourceUsage",
    "UntrustedSource",
    "check_message_size",
    "check_trusted",
]

_Key = tuple[str, str]  # (source, msg_id)
_COUNT_FIELDS = (
    "max_pending_per_source",
    "max_pending_total",
    "max_bytes_per_source",
    "max_bytes_total",
    "max_message_size",
)
_TTL_FIELDS = ("pending_ttl", "done_ttl")
_STALE_SLACK = 1024  # pending heap items beyond twice the pending messages before a rebuild


@dataclass(frozen=True, slots=True)
class ExactlyOnceLimits:
    max_pending_per_source: int = 1000
    max_pending_total: int = 100_000
    max_bytes_per_source: int = 64 * 2**20
    max_bytes_total: int = 1 * 2**30
    max_message_size: int = 16 * 2**20
    trusted_sources: frozenset[str] | None = None  # None: everyone; others get NotAllowed
    pending_ttl: float = 3600.0  # a stored message whose deliver never comes is dropped then
    done_ttl: float = 3600.0  # how long a delivered id is remembered to answer late repeats

    def __post_init__(self) -> None:
        # Each was compared as it came: True as 1, a NaN count or ttl as no limit at all
        # (every comparison with it false), "5" or None a TypeError from the first `<`.
        for name in _COUNT_FIELDS:
            check_count(name, getattr(self, name), least=0)
        for name in _TTL_FIELDS:
            check_seconds(name, getattr(self, name), zero=True)
        trusted: object = self.trusted_sources
        if trusted is not None:
            refused = InvalidArgument(
                f"trusted_sources is None or a set of str (client ids, JIDs), not {trusted!r}"
            )
            # A str is a collection of its characters: "client" was `in` "trusted-client".
            if isinstance(trusted, str | bytes) or not isinstance(trusted, Iterable):
                raise refused
            sources = list(trusted)
            if not all(isinstance(source, str) for source in sources):
                raise refused
            object.__setattr__(self, "trusted_sources", frozenset(sources))


_DEFAULTS = ExactlyOnceLimits()


def check_trusted(
    trusted: frozenset[str] | None, source: str, identities: tuple[str, ...] = ()
) -> None:
    """UntrustedSource unless `trusted` (ExactlyOnceLimits.trusted_sources; None: anyone)
    lists `source` or one of `identities`, the other names its door knows it by (see
    `ExactlyOnce.assured`). The intake's check, and the MQTT door's for a QoS 2 message it
    holds in memory until its PUBREL, so that one client is trusted alike by both."""
    # Checked trusted or not, so that a mistake shows at once: identities="alice" would
    # have been searched letter by letter.
    if not isinstance(identities, tuple) or not all(isinstance(i, str) for i in identities):
        raise InvalidArgument(f"identities is a tuple of str, not {identities!r}")
    if trusted is None or source in trusted:
        return
    if not any(identity in trusted for identity in identities):
        # urn:xmpp:qos, Memory attacks 1: not-allowed for untrusted sources
        raise UntrustedSource(source)


def check_message_size(size: int, limits: ExactlyOnceLimits) -> None:
    """MessageTooLarge for a message of `size` bytes that no room could ever take: over
    `max_message_size`, or alone over `max_bytes_per_source` or `max_bytes_total` (refused as
    ResourceConstraint, it told the sender to wait, XMPP's `wait`, for room it never has). The
    intake's check, and the MQTT door's for a QoS 2 message it holds in memory (its payload,
    as the intake weighs one), which puts its own words before these ("client x: a QoS 2
    message of " + "N bytes is over max_message_size (M)")."""
    if (
        0 <= size <= limits.max_message_size
        and size <= limits.max_bytes_per_source
        and size <= limits.max_bytes_total
    ):
        return  # the usual message, without the table below
    if size < 0:
        raise InvalidArgument(f"a message size cannot be negative, got {size}")
    for name, limit in (
        ("max_message_size", limits.max_message_size),
        ("max_bytes_per_source", limits.max_bytes_per_source),
        ("max_bytes_total", limits.max_bytes_total),
    ):
        if size > limit:
            raise MessageTooLarge(f"{size} bytes is over {name} ({limit})")


@dataclass(frozen=True, slots=True)
class SourceUsage:
    source: str
    pending: int
    pending_bytes: int


@dataclass(frozen=True, slots=True)
class ExactlyOnceStats:
    pending: int  # reserved or stored, awaiting deliver
    pending_bytes: int
    remembered: int  # delivered ids still remembered (until the next `expire` drops them)
    sources: tuple[SourceUsage, ...]  # sources with something pending, sorted by name

    def source(self, name: str) -> SourceUsage:
        for usage in self.sources:
            if usage.source == name:
                return usage
        return SourceUsage(name, 0, 0)


@dataclass(frozen=True, slots=True)
class _Pending:
    size: int
    since: float
    stored: bool  # False while the caller is still writing it (reserved)


class ExactlyOnce:
    """Pending and recently delivered exactly-once messages of every source. Callers pass
    `now` (epoch seconds)."""

    def __init__(
        self, limits: ExactlyOnceLimits = _DEFAULTS, *, stale_slack: int = _STALE_SLACK
    ) -> None:
        self._limits = limits
        self._pending: dict[_Key, _Pending] = {}
        self._done: dict[_Key, float] = {}  # -> remembered until
        self._count: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self._total_count = 0
        self._total_bytes = 0
        self._pending_deadlines: list[tuple[float, str, str]] = []  # min-heaps, pruned lazily
        self._done_deadlines: list[tuple[float, str, str]] = []
        self._slack = stale_slack

    @property
    def limits(self) -> ExactlyOnceLimits:
        return self._limits

    def assured(
        self,
        source: str,
        msg_id: str,
        *,
        size: int,
        now: float,
        reclaim: bool = False,
        identities: tuple[str, ...] = (),
    ) -> Action:
        """Phase 1. STORE: new, room reserved (call `stored` or `forget` next). ANSWER: a
        repeat of a pending or remembered message; answer `received` again, store nothing.

        reclaim=True: a remembered (delivered) id names a new message, as urn:xmpp:qos allows
        ("Message IDs ... can be reclaimed after ... a successful delivery"); it stays
        remembered only to answer repeats of `deliver`.

        identities: other names the caller knows `source` by, any of which `trusted_sources`
        may list (an XMPP door's sender is its full JID, and trusted as its bare one). Only
        the caller's protocol knows them: a source is never taken apart here (an MQTT client
        id may hold a '/')."""
        check_trusted(self._limits.trusted_sources, source, identities)
        key = (source, msg_id)
        state = self._state(key, now)
        if reclaim and state is Incoming.DELIVERED:
            state = Incoming.NEW
        _, action = receive(state, Request.ASSURED)
        if action is Action.STORE:
            check_message_size(size, self._limits)
            self._check_room(source, size)
            self._done.pop(key, None)  # a remembered id past done_ttl: a new message
            self._add(key, _Pending(size, now, stored=False))
        return action

    def stored(self, source: str, msg_id: str) -> bool:
        """The caller wrote the reserved message; True if it is still pending (answer
        `received`), False if it was forgotten or expired meanwhile (delete the file)."""
        key = (source, msg_id)
        pending = self._pending.get(key)
        if pending is None:
            return False
        self._pending[key] = replace(pending, stored=True)
        return True

    def forget(self, source: str, msg_id: str) -> None:
        """The store failed, or the stored message was lost before it went out: the id is
        neither pending nor delivered, so a resend is a new message. No-op if unknown."""
        self._remove((source, msg_id))
        self._done.pop((source, msg_id), None)  # its heap item is skipped when it comes due

    def drop_pending(self, source: str) -> list[str]:
        """Drop every pending message of `source` and return their msg ids (the caller
        deletes their files): the sender's session ended, and with it the exchanges it had
        under way (MQTT 5.0 §3.1.2.4), so its ids name new messages from now on, and its
        room is free at once rather than after pending_ttl. Remembered ids stay."""
        if source not in self._count:  # nothing pending: the usual case, and no scan
            return []
        dropped = [msg_id for owner, msg_id in self._pending if owner == source]
        for msg_id in dropped:
            self._remove((source, msg_id))  # its heap item is skipped when it comes due
        return dropped

    def deliver(self, source: str, msg_id: str, *, now: float, remember: bool = True) -> Action:
        """Phase 2. DELIVER: move it working/ -> target/ (it is no longer pending and is
        remembered, unless `remember` is False). ANSWER: already delivered. ANSWER_UNKNOWN: no
        such message."""
        key = (source, msg_id)
        pending = self._pending.get(key)
        if pending is not None and not pending.stored:
            # `received` cannot have been answered yet, so the peer is ahead of itself.
            raise ProtocolViolation(f"deliver of {msg_id!r} from {source!r} before it was stored")
        _, action = receive(self._state(key, now), Request.DELIVER)
        if action is Action.DELIVER:
            self._remove(key)
            if remember:
                self._remember(key, until=now + self._limits.done_ttl)
        return action

    def expire(self, *, now: float) -> list[tuple[str, str]]:
        """Drop and return the pending messages older than pending_ttl, earliest first (the
        caller deletes their files); drop remembered ids older than done_ttl silently."""
        expired: list[tuple[str, str]] = []
        while self._pending_deadlines and self._pending_deadlines[0][0] <= now:
            deadline, source, msg_id = heapq.heappop(self._pending_deadlines)
            if self._live_pending(deadline, (source, msg_id)):
                self._remove((source, msg_id))
                expired.append((source, msg_id))
        while self._done_deadlines and self._done_deadlines[0][0] <= now:
            until, source, msg_id = heapq.heappop(self._done_deadlines)
            if self._done.get((source, msg_id)) == until:
                del self._done[source, msg_id]
        return expired

    def restore(
        self, source: str, msg_id: str, *, size: int, since: float, delivered: bool
    ) -> None:
        """Rebuild from disk after a restart, without limit checks. `since` is when it was
        stored (pending) or delivered (remembered)."""
        key = (source, msg_id)
        self._remove(key)
        self._done.pop(key, None)
        if delivered:
            self._remember(key, until=since + self._limits.done_ttl)
        else:
            self._add(key, _Pending(max(size, 0), since, stored=True))

    def next_deadline(self) -> float | None:
        """When `expire` next has something to do."""
        while self._pending_deadlines:
            deadline, source, msg_id = self._pending_deadlines[0]
            if self._live_pending(deadline, (source, msg_id)):
                break
            heapq.heappop(self._pending_deadlines)
        while self._done_deadlines:
            until, source, msg_id = self._done_deadlines[0]
            if self._done.get((source, msg_id)) == until:
                break
            heapq.heappop(self._done_deadlines)
        times = [heap[0][0] for heap in (self._pending_deadlines, self._done_deadlines) if heap]
        return min(times, default=None)

    def statistics(self) -> ExactlyOnceStats:
        sources = tuple(
            SourceUsage(source, count, self._bytes[source])
            for source, count in sorted(self._count.items())
        )
        return ExactlyOnceStats(self._total_count, self._total_bytes, len(self._done), sources)

    # -- helpers ---------------------------------------------------------------------------------

    def _state(self, key: _Key, now: float) -> Incoming:
        if key in self._pending:
            return Incoming.STORED  # reserved counts too: a repeat is answered, not stored
        until = self._done.get(key)
        return Incoming.DELIVERED if until is not None and until > now else Incoming.NEW

    def _check_room(self, source: str, size: int) -> None:
        """urn:xmpp:qos, Memory attacks 2 and 3: resource-constraint per source and in total."""
        limits = self._limits
        count, used = self._count.get(source, 0), self._bytes.get(source, 0)
        checks = (
            ("max_pending_per_source", count + 1, limits.max_pending_per_source),
            ("max_bytes_per_source", used + size, limits.max_bytes_per_source),
            ("max_pending_total", self._total_count + 1, limits.max_pending_total),
            ("max_bytes_total", self._total_bytes + size, limits.max_bytes_total),
        )
        for name, wanted, limit in checks:
            if wanted > limit:
                raise SourceOverLimit(source, f"{name} ({limit})")

    def _add(self, key: _Key, pending: _Pending) -> None:
        source = key[0]
        self._pending[key] = pending
        self._count[source] = self._count.get(source, 0) + 1
        self._bytes[source] = self._bytes.get(source, 0) + pending.size
        self._total_count += 1
        self._total_bytes += pending.size
        deadline = pending.since + self._limits.pending_ttl
        heapq.heappush(self._pending_deadlines, (deadline, *key))

    def _remove(self, key: _Key) -> None:
        pending = self._pending.pop(key, None)
        if pending is None:
            return
        source = key[0]
        self._count[source] -= 1
        self._bytes[source] -= pending.size
        if not self._count[source]:
            del self._count[source], self._bytes[source]
        self._total_count -= 1
        self._total_bytes -= pending.size
        if len(self._pending_deadlines) > 2 * len(self._pending) + self._slack:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the pending heap from the pending messages: the stale items go (amortized:
        as many more must go stale as there are pending now, plus the slack, before the next
        rebuild)."""
        ttl = self._limits.pending_ttl
        self._pending_deadlines = [
            (pending.since + ttl, *key) for key, pending in self._pending.items()
        ]
        heapq.heapify(self._pending_deadlines)

    def _remember(self, key: _Key, *, until: float) -> None:
        if self._limits.done_ttl <= 0:
            return  # nothing to remember (MQTT: a packet id is free again after PUBCOMP)
        self._done[key] = until
        heapq.heappush(self._done_deadlines, (until, *key))

    def _live_pending(self, deadline: float, key: _Key) -> bool:
        """Whether a heap item still stands for a pending message (not one since removed)."""
        pending = self._pending.get(key)
        return pending is not None and pending.since + self._limits.pending_ttl == deadline


class UntrustedSource(NotAllowed):
    """NotAllowed for a source trusted_sources does not list. `str()` quotes the source as
    the intake knows it; `said(name)` says the same of the name its door's client knows
    (an MQTT client id, not its internal `mqtt:` source)."""

    def __init__(self, source: str) -> None:
        super().__init__(self.said(repr(source)))

    @staticmethod
    def said(name: str) -> str:
        return f"{name} may not send messages exactly once"


class SourceOverLimit(ResourceConstraint):
    """ResourceConstraint for a source's message over `over` (a limit and its value), with
    `said(name)` in its door's words as UntrustedSource's."""

    def __init__(self, source: str, over: str) -> None:
        self.over = over
        super().__init__(self.said(repr(source)))

    def said(self, name: str) -> str:
        return f"{name}: this message would pass {self.over}; try again later"
