"""Delivery guarantees as transition tables, in protocol-neutral words (DESIGN.md §5).

Two machines, one per side of a delivery:

- *Outgoing*: we send a message and wait for acknowledgements. The MQTT front-end maps
  PUBACK -> ACK, PUBREC -> RECEIVED, PUBCOMP -> COMPLETE and a reason code >= 0x80 on PUBACK or
  PUBREC -> REJECT (MQTT 5.0 §4.3); the XMPP front-end maps an iq result -> ACK, `received` ->
  RECEIVED, the result of `deliver` -> COMPLETE and an error reply -> REJECT (urn:xmpp:qos).
- *Incoming*: a peer sends us a message exactly once in two phases, ASSURED (MQTT PUBLISH with
  QoS 2, XMPP `qos:assured`) then DELIVER (PUBREL, `qos:deliver`). Each step says what to do:
  STORE it (in working/), DELIVER it (working/ -> target/), or just ANSWER.

Invariants:
- Each table lists every legal (state, event) pair; a missing pair raises ProtocolViolation,
  and nothing else is raised.
- Outgoing states only move forward (their values grow); DONE and REJECTED are final.
- Incoming: along any sequence of events, STORE happens at most once and DELIVER at most
  once, and only after STORE. Both phases are idempotent: repeats are answered, never redone.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, IntEnum, auto
from typing import Final

from boxmq.errors import ProtocolViolation

__all__ = [
    "Ack",
    "Action",
    "Incoming",
    "Outgoing",
    "QoS",
    "Request",
    "advance",
    "delivery_qos",
    "receive",
    "settled",
    "start",
]


class QoS(IntEnum):
    """MQTT 5.0 §4.3; urn:xmpp:qos unacknowledged / acknowledged / assured service."""

    AT_MOST_ONCE = 0
    AT_LEAST_ONCE = 1
    EXACTLY_ONCE = 2


def delivery_qos(published: QoS, granted: QoS) -> QoS:
    """A subscriber gets the lower of the published and the granted QoS (MQTT 5.0 §3.8.4)."""
    return min(published, granted)


# -- outgoing: we deliver and wait ------------------------------------------------------------


class Outgoing(Enum):
    """Where a message we sent stands. Values grow along every transition."""

    AWAIT_ACK = auto()  # QoS 1: sent, waiting for its acknowledgement
    AWAIT_RECEIVED = auto()  # QoS 2 phase 1: sent, re-sent as a duplicate after a reconnect
    AWAIT_COMPLETE = auto()  # QoS 2 phase 2: release/deliver sent; never re-send the message
    DONE = auto()  # acknowledged (or QoS 0: nothing to wait for)
    REJECTED = auto()  # refused by the receiver: discard, never offer it to anyone else


class Ack(Enum):
    """What the receiver answered."""

    ACK = auto()
    RECEIVED = auto()
    COMPLETE = auto()
    REJECT = auto()  # MQTT 5.0 §4.3.2/§4.3.3 reason >= 0x80; MQTT-234 note 5: discard


_START: Final[Mapping[QoS, Outgoing]] = {
    QoS.AT_MOST_ONCE: Outgoing.DONE,  # MQTT 5.0 §4.3.1: no response expected
    QoS.AT_LEAST_ONCE: Outgoing.AWAIT_ACK,  # §4.3.2
    QoS.EXACTLY_ONCE: Outgoing.AWAIT_RECEIVED,  # §4.3.3
}

# Every legal (state, ack) pair. Anything missing is a protocol violation.
_OUTGOING: Final[Mapping[tuple[Outgoing, Ack], Outgoing]] = {
    (Outgoing.AWAIT_ACK, Ack.ACK): Outgoing.DONE,
    (Outgoing.AWAIT_ACK, Ack.REJECT): Outgoing.REJECTED,
    (Outgoing.AWAIT_RECEIVED, Ack.RECEIVED): Outgoing.AWAIT_COMPLETE,
    (Outgoing.AWAIT_RECEIVED, Ack.REJECT): Outgoing.REJECTED,  # §4.3.3: no release follows
    (Outgoing.AWAIT_COMPLETE, Ack.COMPLETE): Outgoing.DONE,
}

_SETTLED: Final = frozenset({Outgoing.DONE, Outgoing.REJECTED})


def start(qos: QoS) -> Outgoing:
    """The state of a message just sent at `qos`."""
    return _START[qos]


def advance(state: Outgoing, ack: Ack) -> Outgoing:
    """The state after `ack`; ProtocolViolation if `ack` is not expected now."""
    try:
        return _OUTGOING[state, ack]
    except KeyError:
        raise ProtocolViolation(f"{ack.name} while {state.name}") from None


def settled(state: Outgoing) -> bool:
    """Whether nothing more is expected for this message."""
    return state in _SETTLED


# -- incoming: a peer delivers to us exactly once ---------------------------------------------


class Incoming(Enum):
    """Where a message a peer sends us exactly once stands. Values never go down."""

    NEW = auto()  # unknown id (never seen, or forgotten)
    STORED = auto()  # assured: stored in working/, `received` answered, awaiting deliver
    DELIVERED = auto()  # delivered (working/ -> target/); the id is remembered for a while


class Request(Enum):
    """The two phases of the sender's exactly-once delivery."""

    ASSURED = auto()  # MQTT PUBLISH QoS 2; XMPP qos:assured
    DELIVER = auto()  # MQTT PUBREL; XMPP qos:deliver


class Action(Enum):
    """What the receiver does besides answering (it always answers)."""

    STORE = auto()  # write the message in working/, then answer `received` / PUBREC
    DELIVER = auto()  # move it working/ -> target/, then answer
    ANSWER = auto()  # a repeat: answer again, store and deliver nothing
    ANSWER_UNKNOWN = auto()  # deliver for an unknown id: answer, deliver nothing
    # (MQTT 5.0 §3.7.2.1: PUBCOMP "Packet Identifier not found"; XMPP: an empty result)


_INCOMING: Final[Mapping[tuple[Incoming, Request], tuple[Incoming, Action]]] = {
    (Incoming.NEW, Request.ASSURED): (Incoming.STORED, Action.STORE),
    (Incoming.STORED, Request.ASSURED): (Incoming.STORED, Action.ANSWER),  # held already
    (Incoming.STORED, Request.DELIVER): (Incoming.DELIVERED, Action.DELIVER),
    (Incoming.DELIVERED, Request.DELIVER): (Incoming.DELIVERED, Action.ANSWER),
    (Incoming.DELIVERED, Request.ASSURED): (Incoming.DELIVERED, Action.ANSWER),  # late repeat
    (Incoming.NEW, Request.DELIVER): (Incoming.NEW, Action.ANSWER_UNKNOWN),
}


def receive(state: Incoming, request: Request) -> tuple[Incoming, Action]:
    """The next state and what to do; ProtocolViolation for a pair the table lacks."""
    try:
        return _INCOMING[state, request]
    except KeyError:
        raise ProtocolViolation(f"{request.name} while {state.name}") from None
