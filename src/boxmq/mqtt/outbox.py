"""Messages on their way to one client: packet ids, the in-flight window, and the queue behind it.

Invariants:
- At most `window` QoS 1/2 PUBLISHes are unacknowledged at once (the client's Receive Maximum,
  MQTT 5.0 §4.9); the rest wait in order in `queued`, which holds at most `limit` messages and
  `byte_limit` bytes of payload (0: no byte limit); past either, the oldest QoS 0 ones go
  first, then a new message is refused: it is the caller's to drop.
- QoS 0 never takes a packet id or a slot: it is sent at once unless QoS 1/2 messages wait,
  so the order of one subscription's messages is kept (MQTT 5.0 §4.6).
- Each in-flight entry carries the caller's `token` (e.g. a locked message on disk) and gives
  it back exactly once: when the client acknowledges it, or from `clear()` when the session ends.
  For QoS 2 that is the positive PUBREC: the client has the message then (MQTT 5.0 §4.3.3), so
  whatever becomes of the session, it must never go to anyone again; the entry stays, without
  its token, until PUBCOMP frees its packet id.
- A packet id is in use from `push` until its final acknowledgement (PUBACK or PUBCOMP), and
  `resend()` gives what a resumed session must send again, with DUP set (MQTT 5.0 §4.4).
  The window holds there too: a client may come back with a smaller Receive Maximum than
  the messages its session has in flight (§4.9 sets the quota afresh per connection). Those
  past it are *held*: in flight under their ids, not on this connection's wire, and `ready()`
  sends them (DUP) as slots free, before anything queued.
- A queued message with a Message Expiry Interval leaves `ready` with what is left of it, or
  not at all once it is over (MQTT 5.0 §3.3.2.3.3); the tokens of those go to `lapsed`. One
  sent already is always sent again (`resend`), with at least a second left: its onward
  delivery had started (MQTT-3.3.2-5), and a resumed session resends it (MQTT-4.4.0-1).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum, auto
from typing import Any, Final, Generic, NamedTuple, TypeVar, cast

from boxmq.mqtt.errors import ProtocolError
from boxmq.mqtt.packets import Publish, Pubrel, held_size, numbered, with_expiry
from boxmq.mqtt.reasons import ReasonCode

__all__ = ["Acked", "Outbox", "Stage"]

T = TypeVar("T")

_MAX_PACKET_ID = 65_535
_new_tuple = tuple.__new__


class Stage(Enum):
    """Where an outgoing QoS 1/2 message stands (MQTT 5.0 §4.3.2, §4.3.3, sender side)."""

    AWAIT_PUBACK = auto()
    AWAIT_PUBREC = auto()
    AWAIT_PUBCOMP = auto()  # PUBREL sent: the message itself is never sent again


# The stages as read per message: an Enum member read off its class goes through the
# metaclass's __getattr__ hook, about 640 instructions more than a module's name (CPython
# 3.11), and a QoS 2 message read three of them here.
_AWAIT_PUBACK: Final = Stage.AWAIT_PUBACK
_AWAIT_PUBREC: Final = Stage.AWAIT_PUBREC
_AWAIT_PUBCOMP: Final = Stage.AWAIT_PUBCOMP


@dataclass(slots=True)
class _Entry(Generic[T]):
    # As given (`offer`): its packet id is the entry's key, and DUP as sent is not kept (a
    # resend sets it). None: known only by its packet id (released before a restart).
    publish: Publish | None
    token: T | None
    stage: Stage
    sent: float = 0.0  # when it was sent first: a resend tells what is left of its expiry


class Acked(NamedTuple, Generic[T]):
    """An acknowledgement matched: whose it was, and whether the client refused the message.
    A named tuple: one is built per acknowledgement, with one `tuple.__new__`."""

    token: T | None  # None: given back before (the PUBREC of this PUBCOMP took it)
    refused: bool  # a reason code >= 0x80 on PUBACK or PUBREC (MQTT 5.0 §4.3)
    release: bool = False  # a positive PUBREC: answered with PUBREL
    stray: bool = False  # it matched nothing in flight, and changed nothing (`Outbox.acked`)
    reply: Pubrel | None = None  # a stray's answer other than a PUBREL 0x00 (`release`)
    # `Outbox.waiting` once it was matched: asked at every acknowledgement, where reading the
    # property cost about 800 instructions (CPython 3.11), a field about 50.
    waiting: bool = False


# The common matches of a message without a token (a copy sent from memory; every PUBCOMP), by
# `waiting`: made once, where building one took about 1,100 instructions per acknowledgement.
_SETTLED: Final[tuple[Acked[Any], Acked[Any]]] = (
    Acked(None, False),
    Acked(None, False, waiting=True),
)
_RELEASED: Final[tuple[Acked[Any], Acked[Any]]] = (
    Acked(None, False, release=True),
    Acked(None, False, release=True, waiting=True),
)


class Outbox(Generic[T]):
    # Every session has one, most of them empty for good (an idle device's): slots, and the
    # containers only some need made at their first use (None until then). An empty deque
    # took 760 bytes, a set 216: 1.7 KiB of each idle connection's 6.5 (docs/benchmarks.md,
    # "Many idle connections").
    __slots__ = (
        "_held",
        "_in_flight",
        "_next_id",
        "_queued",
        "_queued_bytes",
        "_queued_qos0",
        "_reserved",
        "byte_limit",
        "dropped",
        "lapsed",
        "limit",
        "window",
    )

    def __init__(self, *, window: int, limit: int, byte_limit: int = 0) -> None:
        self.window = window
        self.limit = limit
        self.byte_limit = byte_limit
        self._in_flight: dict[int, _Entry[T]] = {}
        # Behind the window, with when each was queued; None until one is.
        self._queued: deque[tuple[Publish, T, float]] | None = None
        self._queued_bytes = 0  # the messages in `_queued` (`held_size`)
        # The QoS 0 ones among them: a queue full of QoS 1/2 (a subscriber that stopped
        # reading) refuses each message more without looking through it for one to drop.
        self._queued_qos0 = 0
        self._next_id = 1
        self._reserved: set[int] | None = None  # packet ids to be taken again (`reserve`)
        self._held: deque[int] | None = None  # in flight, not resent yet: the window was full
        self.dropped = 0
        self.lapsed: list[T] = []  # tokens of queued messages that expired before they left

    def __len__(self) -> int:
        return len(self._in_flight) + len(self._queued or ())

    @property
    def waiting(self) -> bool:
        """Whether messages wait behind the window: queued, or held from a resend."""
        return bool(self._queued or self._held)

    @property
    def holding(self) -> bool:
        """Whether messages in flight wait to be sent again on this connection (`resend`)."""
        return bool(self._held)

    @property
    def free(self) -> int:
        """How many QoS 1/2 messages could be sent now."""
        return 0 if self._queued or self._held else self.window - len(self._in_flight)

    def push(self, publish: Publish, token: T, now: float = 0.0) -> Publish | None:
        """Give a message (its packet id is ignored); the PUBLISH to send now, if any.

        Returns None when it had to wait; raises OverflowError when the queue is full.
        """
        packet_id = self.offer(publish, token, now)
        if not packet_id:
            return None if packet_id is None else publish
        return numbered(publish, packet_id, dup=False)

    def offer(self, publish: Publish, token: T, now: float = 0.0) -> int | None:
        """`push`, without the PUBLISH to send built: 0 when `publish` goes now as it is
        (QoS 0), the packet id it goes now under, without DUP, or None when it had to wait.
        Each message sent from memory took a PUBLISH built for it, about 5 % of a QoS 1
        message's work (docs/benchmarks.md)."""
        if not self._queued and not self._held:  # nothing waits before it
            if not publish.qos:
                return 0
            if len(self._in_flight) < self.window:
                return self._take_id(publish, token, now)
        size = held_size(publish)
        while not self._room_for(size):
            if not self._drop_oldest_qos0():
                raise OverflowError("the session's queue is full")
        queued = self._queued
        if queued is None:
            queued = self._queued = deque()
        queued.append((publish, token, now))
        self._queued_bytes += size
        if not publish.qos:
            self._queued_qos0 += 1
        return None

    def acked(self, packet_id: int, stage: Stage, refused: bool) -> Acked[T]:
        """Match a PUBACK (AWAIT_PUBACK), PUBREC (AWAIT_PUBREC) or PUBCOMP (AWAIT_PUBCOMP).
        A positive PUBREC gives the token back (the message is the client's), a PUBCOMP none.

        One for a packet id with nothing in flight (a client that answers twice, or answers
        after a resume what the session had already settled) is `stray`: it changes nothing,
        and a positive PUBREC is answered with PUBREL 0x92, Packet Identifier not found
        (MQTT 5.0 §3.6.2.1; MQTT-4.3.3-4 wants a PUBREL for every positive PUBREC). A repeat
        of a positive PUBREC is answered with its PUBREL again. The wrong kind for a message
        in flight (a PUBACK for QoS 2, a PUBCOMP before its PUBREL) is a protocol error."""
        entry = self._in_flight.get(packet_id)
        if entry is None or entry.stage is not stage:
            return self._stray(packet_id, entry, stage, refused)
        if self._held and packet_id in self._held:
            self._held.remove(packet_id)  # the client had it from before: on this wire now
        waiting = bool(self._queued or self._held)
        token = entry.token
        if stage is _AWAIT_PUBREC and not refused:
            entry.token, entry.stage = None, _AWAIT_PUBCOMP
            if token is None:
                return _RELEASED[waiting]
            return _new_tuple(Acked, (token, False, True, False, None, waiting))
        del self._in_flight[packet_id]
        if token is None and not refused:
            return _SETTLED[waiting]
        return _new_tuple(Acked, (token, refused, False, False, None, waiting))

    def _stray(
        self, packet_id: int, entry: _Entry[T] | None, stage: Stage, refused: bool
    ) -> Acked[T]:
        if entry is None:
            reply = None
            if stage is Stage.AWAIT_PUBREC and not refused:
                reply = Pubrel(packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
            return Acked(None, False, stray=True, reply=reply)
        if entry.stage is Stage.AWAIT_PUBCOMP and stage is Stage.AWAIT_PUBREC and not refused:
            return Acked(None, False, release=True, stray=True)  # a repeat
        kind = {Stage.AWAIT_PUBACK: "PUBACK", Stage.AWAIT_PUBREC: "PUBREC"}.get(stage, "PUBCOMP")
        raise ProtocolError(
            f"a {kind}{' refusing' if refused else ''} for packet id {packet_id}, whose message "
            f"waits for {entry.stage.name.removeprefix('AWAIT_')} (MQTT 5.0 §4.3)"
        )

    def discard(self, packet_id: int) -> T | None:
        """A PUBLISH the client cannot take (over its Maximum Packet Size): done as if it had
        been sent and acknowledged (MQTT 5.0 §3.1.2.25); its slot and packet id are free."""
        return self._in_flight.pop(packet_id).token

    def ready(self, now: float = 0.0) -> list[tuple[Publish, T]]:
        """Messages that may go now (slots freed): those held from a resend first (DUP, their
        ids kept), then queued ones, QoS 1/2 ones getting their packet ids."""
        out: list[tuple[Publish, T]] = []
        if self._held:
            self._release_held(now, out)
            if self._held:
                return out
        waiting = self._queued
        while waiting:
            publish, token, queued = waiting[0]
            if publish.qos and len(self._in_flight) >= self.window:
                break
            waiting.popleft()
            self._queued_bytes -= held_size(publish)
            if not publish.qos:
                self._queued_qos0 -= 1
            interval = publish.properties.message_expiry_interval
            if interval:
                left = math.ceil(interval - (now - queued))
                if left <= 0:
                    self.lapsed.append(token)
                    continue
                if left < interval:
                    publish = with_expiry(publish, left)
            out.append((self._start(publish, token, now) if publish.qos else publish, token))
        return out

    def resend(self, now: float = 0.0) -> list[Publish | Pubrel]:
        """What a resumed session sends first, in order (MQTT 5.0 §4.4). A PUBLISH with a
        Message Expiry Interval carries what is left of it (§3.3.2.3.3), one whose interval
        is over one second: the server MUST resend every unacknowledged PUBLISH
        (MQTT-4.4.0-1), and may delete an expired copy only before its onward delivery
        started (MQTT-3.3.2-5); the client may hold its packet id meanwhile, and a QoS 2
        client would take the next message under that id for a repeat. PUBLISHes past the
        window (the client's Receive Maximum may be smaller than on its last connection) are
        held, and `ready()` gives them as acks free slots."""
        out: list[Publish | Pubrel] = []
        self._held = None
        # Every id in flight takes a slot of the new window, a PUBREL's too (its PUBCOMP is
        # to come, MQTT-3.3.4-9); the PUBRELs go whatever the window, the PUBLISHes in it.
        slots = self.window - sum(
            1
            for e in self._in_flight.values()
            if e.publish is None or e.stage is Stage.AWAIT_PUBCOMP
        )
        for packet_id, entry in list(self._in_flight.items()):
            if entry.publish is None or entry.stage is Stage.AWAIT_PUBCOMP:
                out.append(Pubrel(packet_id))
            elif slots <= 0:
                if self._held is None:
                    self._held = deque()
                self._held.append(packet_id)
            else:
                out.append(_again(packet_id, entry, now))
                slots -= 1
        return out

    def _release_held(self, now: float, out: list[tuple[Publish, T]]) -> None:
        # Held entries take no slot on this connection yet: those in flight here are the rest.
        held, in_flight = self._held, self._in_flight
        assert held is not None  # called only while some are held
        while held and len(in_flight) - len(held) < self.window:
            packet_id = held.popleft()
            entry = in_flight.get(packet_id)
            if entry is None or entry.stage is Stage.AWAIT_PUBCOMP:
                continue  # acknowledged meanwhile (the client had it from before)
            # Not a PUBCOMP's entry: it has its token.
            out.append((_again(packet_id, entry, now), cast(T, entry.token)))

    def releasing(self) -> list[int]:
        """The packet ids whose PUBREL was sent and not completed: a restart must send those
        PUBRELs again, or the client keeps them reserved (session_record.py)."""
        return [i for i, entry in self._in_flight.items() if entry.stage is Stage.AWAIT_PUBCOMP]

    def sent(self) -> list[tuple[int, T]]:
        """(packet id, token) of each PUBLISH sent and not yet acknowledged (a PUBACK or a
        PUBREC to come): a restart sends those again under the same ids (session_record.py)."""
        return [
            (packet_id, entry.token)
            for packet_id, entry in self._in_flight.items()
            if entry.token is not None and entry.stage is not Stage.AWAIT_PUBCOMP
        ]

    def tokens(self) -> list[T]:
        """The token of each message held, in flight (until its PUBACK or PUBREC) or queued."""
        held = [entry.token for entry in self._in_flight.values() if entry.token is not None]
        return held + [token for _, token, _ in self._queued or ()]

    def sent_qos2(self) -> list[int]:
        """The packet ids among `sent()` of QoS 2 PUBLISHes (a PUBREC to come)."""
        return [
            packet_id
            for packet_id, entry in self._in_flight.items()
            if entry.token is not None and entry.stage is Stage.AWAIT_PUBREC
        ]

    def reserve(self, packet_ids: Iterable[int]) -> None:
        """After a restart: ids that messages sent by the process before will take again
        (`push_again`), so that no other message takes them first."""
        if self._reserved is None:
            self._reserved = set()
        self._reserved.update(packet_ids)

    def start_after(self, packet_ids: Iterable[int]) -> None:
        """After a restart: new messages take ids after the highest of `packet_ids` (those
        the session's record names), where a new process started again at 1. A client may
        still hold an id the process before used (libmosquitto 2.0.11 keeps a second copy
        of a QoS 2 PUBLISH sent again with DUP, and answers the next message under that id
        with it: docs/mqtt.md); the ids past the last one used come round only after 65 535.
        """
        self._next_id = max(packet_ids, default=0) % _MAX_PACKET_ID + 1

    @property
    def next_id(self) -> int:
        """The packet id the next new message takes, unless it is in use by then (the
        session's record keeps it: `start_at`)."""
        return self._next_id

    def start_at(self, packet_id: int) -> None:
        """After a restart: new messages go on from `packet_id`, the `next_id` of the
        process before, as its session's record kept it (see `start_after`); an id still in
        use is passed, as always."""
        self._next_id = packet_id

    def unreserve(self) -> None:
        """Those not taken again by now are no one's any more (their messages were settled)."""
        self._reserved = None

    def push_again(
        self, publish: Publish, token: T, packet_id: int, now: float = 0.0
    ) -> Publish | None:
        """A message the process before this one sent under `packet_id` and the client did
        not acknowledge: in flight again under that id, with DUP set (MQTT 5.0 §4.4,
        MQTT-4.4.0-1, MQTT-3.3.1-1), the PUBLISH to send now. None past the window (the
        client may come back with a smaller Receive Maximum): held, as by `resend`, and
        given by `ready()` as slots free, before anything queued. Given in the order they
        were first sent, they go in that order (MQTT-4.6.0-1)."""
        if self._reserved is not None:
            self._reserved.discard(packet_id)
        stage = _AWAIT_PUBACK if publish.qos == 1 else _AWAIT_PUBREC
        self._in_flight[packet_id] = _Entry(publish, token, stage, now)
        if self._held or len(self._in_flight) > self.window:
            if self._held is None:
                self._held = deque()
            self._held.append(packet_id)
            return None
        return numbered(publish, packet_id, dup=True)

    def expect_release(self, packet_ids: Iterable[int]) -> None:
        """After a restart: these packet ids await PUBCOMP (`releasing` of the process
        before), their PUBRELs first in what `resend` gives."""
        for packet_id in packet_ids:
            self._in_flight.setdefault(packet_id, _Entry(None, None, Stage.AWAIT_PUBCOMP))

    def clear(self) -> list[T | None]:
        """The session ends: every token still held, in flight first, then queued."""
        tokens = [entry.token for entry in self._in_flight.values()]
        tokens += [token for _, token, _ in self._queued or ()]
        self._in_flight.clear()
        self._held = self._queued = None
        self._queued_bytes = self._queued_qos0 = 0
        return tokens

    def _start(self, publish: Publish, token: T, now: float) -> Publish:
        return numbered(publish, self._take_id(publish, token, now), dup=False)

    def _take_id(self, publish: Publish, token: T, now: float) -> int:
        # The next packet id not in use. The window is at most 65 535, so one is always
        # found within one turn.
        in_flight, packet_id, reserved = self._in_flight, self._next_id, self._reserved
        while packet_id in in_flight or (reserved and packet_id in reserved):
            packet_id = packet_id % _MAX_PACKET_ID + 1
        self._next_id = packet_id % _MAX_PACKET_ID + 1
        stage = _AWAIT_PUBACK if publish.qos == 1 else _AWAIT_PUBREC
        in_flight[packet_id] = _Entry(publish, token, stage, now)
        return packet_id

    def _room_for(self, size: int) -> bool:
        if len(self._queued or ()) >= self.limit:
            return False
        return not self.byte_limit or self._queued_bytes + size <= self.byte_limit

    def _drop_oldest_qos0(self) -> bool:
        queued = self._queued
        if not self._queued_qos0 or queued is None:
            return False
        for index, (publish, _, _) in enumerate(queued):
            if not publish.qos:
                del queued[index]
                self._queued_bytes -= held_size(publish)
                self._queued_qos0 -= 1
                self.dropped += 1
                return True
        return False


def _again(packet_id: int, entry: _Entry[Any], now: float) -> Publish:
    """An entry's PUBLISH sent again (DUP), with what is left of its expiry, at least a
    second (see `Outbox.resend`)."""
    publish = entry.publish
    assert publish is not None  # not a PUBREL's entry
    interval = publish.properties.message_expiry_interval
    if interval:
        left = math.ceil(interval - (now - entry.sent))
        if left < interval:
            publish = with_expiry(publish, max(left, 1))
    return replace(publish, dup=True, packet_id=packet_id)
