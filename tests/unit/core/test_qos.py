"""The delivery-guarantee tables: every pair moves on per the table or raises ProtocolViolation."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.qos import (
    Ack,
    Action,
    Incoming,
    Outgoing,
    QoS,
    Request,
    advance,
    delivery_qos,
    receive,
    settled,
    start,
)
from boxmq.errors import ProtocolViolation


@pytest.mark.parametrize(("published", "granted"), [(p, g) for p in QoS for g in QoS])
def test_delivery_qos_is_the_lower(published: QoS, granted: QoS) -> None:
    assert delivery_qos(published, granted) is QoS(min(published, granted))


def test_qos_values_are_the_wire_values() -> None:
    assert [int(q) for q in QoS] == [0, 1, 2]


# -- outgoing -----------------------------------------------------------------------------------


def test_each_qos_starts_where_the_spec_says() -> None:
    assert start(QoS.AT_MOST_ONCE) is Outgoing.DONE
    assert start(QoS.AT_LEAST_ONCE) is Outgoing.AWAIT_ACK
    assert start(QoS.EXACTLY_ONCE) is Outgoing.AWAIT_RECEIVED


@pytest.mark.parametrize(
    ("qos", "acks"),
    [
        (QoS.AT_MOST_ONCE, []),
        (QoS.AT_LEAST_ONCE, [Ack.ACK]),
        (QoS.EXACTLY_ONCE, [Ack.RECEIVED, Ack.COMPLETE]),
    ],
)
def test_the_happy_paths_end_done(qos: QoS, acks: list[Ack]) -> None:
    state = start(qos)
    for ack in acks:
        assert not settled(state)
        state = advance(state, ack)
    assert state is Outgoing.DONE
    assert settled(state)


@pytest.mark.parametrize("qos", [QoS.AT_LEAST_ONCE, QoS.EXACTLY_ONCE])
def test_a_rejection_before_receipt_ends_rejected(qos: QoS) -> None:
    assert advance(start(qos), Ack.REJECT) is Outgoing.REJECTED


def test_no_rejection_after_receipt() -> None:
    with pytest.raises(ProtocolViolation, match="REJECT while AWAIT_COMPLETE"):
        advance(Outgoing.AWAIT_COMPLETE, Ack.REJECT)


@pytest.mark.parametrize(
    ("state", "ack"),
    [
        (Outgoing.AWAIT_ACK, Ack.RECEIVED),
        (Outgoing.AWAIT_RECEIVED, Ack.ACK),
        (Outgoing.AWAIT_RECEIVED, Ack.COMPLETE),
        (Outgoing.AWAIT_COMPLETE, Ack.RECEIVED),
        (Outgoing.DONE, Ack.ACK),
        (Outgoing.REJECTED, Ack.REJECT),
    ],
)
def test_acks_out_of_turn_are_protocol_violations(state: Outgoing, ack: Ack) -> None:
    with pytest.raises(ProtocolViolation, match=f"{ack.name} while {state.name}"):
        advance(state, ack)


@given(st.sampled_from(Outgoing), st.sampled_from(Ack))
def test_every_outgoing_pair_moves_forward_or_raises_protocol_violation(
    state: Outgoing, ack: Ack
) -> None:
    with contextlib.suppress(ProtocolViolation):
        assert advance(state, ack).value > state.value


@given(st.sampled_from(QoS), st.lists(st.sampled_from(Ack), max_size=6))
def test_settled_states_accept_nothing(qos: QoS, acks: list[Ack]) -> None:
    state = start(qos)
    for ack in acks:
        try:
            state = advance(state, ack)
        except ProtocolViolation:
            continue
    if settled(state):
        for ack in Ack:
            with pytest.raises(ProtocolViolation):
                advance(state, ack)


# -- incoming -----------------------------------------------------------------------------------

TABLE = {
    (Incoming.NEW, Request.ASSURED): (Incoming.STORED, Action.STORE),
    (Incoming.STORED, Request.ASSURED): (Incoming.STORED, Action.ANSWER),
    (Incoming.STORED, Request.DELIVER): (Incoming.DELIVERED, Action.DELIVER),
    (Incoming.DELIVERED, Request.DELIVER): (Incoming.DELIVERED, Action.ANSWER),
    (Incoming.DELIVERED, Request.ASSURED): (Incoming.DELIVERED, Action.ANSWER),
    (Incoming.NEW, Request.DELIVER): (Incoming.NEW, Action.ANSWER_UNKNOWN),
}


@pytest.mark.parametrize(("pair", "outcome"), TABLE.items())
def test_the_incoming_table(
    pair: tuple[Incoming, Request], outcome: tuple[Incoming, Action]
) -> None:
    assert receive(*pair) == outcome


@given(st.sampled_from(Incoming), st.sampled_from(Request))
def test_every_incoming_pair_follows_the_table_or_raises_protocol_violation(
    state: Incoming, request: Request
) -> None:
    try:
        outcome = receive(state, request)
    except ProtocolViolation:
        assert (state, request) not in TABLE
    else:
        assert outcome == TABLE[state, request]
        assert outcome[0].value >= state.value  # never back


@given(st.lists(st.sampled_from(Request), max_size=12))
def test_any_sequence_stores_once_and_delivers_once_after_storing(
    requests: list[Request],
) -> None:
    state = Incoming.NEW
    actions: list[Action] = []
    for request in requests:
        state, action = receive(state, request)
        actions.append(action)
    assert actions.count(Action.STORE) <= 1
    assert actions.count(Action.DELIVER) <= 1
    if Action.DELIVER in actions:
        assert actions.index(Action.STORE) < actions.index(Action.DELIVER)
    assert (Action.STORE in actions) is (Request.ASSURED in requests)
    if Request.ASSURED in requests:
        first = requests.index(Request.ASSURED)
        assert (Action.DELIVER in actions) is (Request.DELIVER in requests[first:])
