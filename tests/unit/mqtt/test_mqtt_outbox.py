"""The outbox: packet ids, the in-flight window and the queue, as a client's acks drive them."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.mqtt.errors import ProtocolError
from boxmq.mqtt.outbox import Outbox, Stage
from boxmq.mqtt.packets import Publish, Pubrel
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.reasons import ReasonCode


def _msg(n: int, qos: int = 1) -> Publish:
    return Publish("t", str(n).encode(), qos)


def test_qos0_goes_at_once_without_an_id() -> None:
    outbox: Outbox[int] = Outbox(window=1, limit=10)
    sent = outbox.push(_msg(0, qos=0), 0)
    assert sent is not None
    assert sent.packet_id is None
    assert len(outbox) == 0


def test_the_window_holds_back_and_acks_release_in_order() -> None:
    outbox: Outbox[int] = Outbox(window=2, limit=10)
    first, second = outbox.push(_msg(1), 1), outbox.push(_msg(2), 2)
    assert first is not None
    assert second is not None
    assert outbox.push(_msg(3), 3) is None
    assert outbox.push(_msg(4, qos=0), 4) is None  # behind a waiting QoS 1: order kept
    acked = outbox.acked(first.packet_id or 0, Stage.AWAIT_PUBACK, refused=False)
    assert acked.token == 1
    assert [p.payload for p, _ in outbox.ready()] == [b"3", b"4"]


def test_qos2_goes_pubrec_pubrel_pubcomp() -> None:
    outbox: Outbox[str] = Outbox(window=5, limit=5)
    sent = outbox.push(_msg(1, qos=2), "m")
    assert sent is not None
    packet_id = sent.packet_id or 0
    with pytest.raises(ProtocolError):
        outbox.acked(packet_id, Stage.AWAIT_PUBCOMP, refused=False)  # too early
    step = outbox.acked(packet_id, Stage.AWAIT_PUBREC, refused=False)
    assert step.release
    assert outbox.resend() == [Pubrel(packet_id)]  # never the message again (§4.4)
    done = outbox.acked(packet_id, Stage.AWAIT_PUBCOMP, refused=False)
    assert (done.token, done.refused) == (None, False)
    assert len(outbox) == 0


def test_a_pubrec_gives_the_token_back_and_the_id_stays_taken_until_pubcomp() -> None:
    # The client has the message at PUBREC (MQTT 5.0 §4.3.3): whatever happens to the session
    # after, its token (a share group's message) must never go to anyone else.
    outbox: Outbox[str] = Outbox(window=1, limit=5)
    sent = outbox.push(_msg(1, qos=2), "m")
    assert sent is not None
    assert sent.packet_id is not None
    step = outbox.acked(sent.packet_id, Stage.AWAIT_PUBREC, refused=False)
    assert step.token == "m"
    assert outbox.push(_msg(2, qos=2), "n") is None  # the window is still full
    assert outbox.releasing() == [sent.packet_id]
    assert outbox.clear() == [None, "n"]  # the session ends: nothing of "m" comes back


def test_ids_released_before_a_restart_get_their_pubrel_first_and_are_not_reused() -> None:
    outbox: Outbox[str] = Outbox(window=3, limit=5)
    outbox.expect_release([1, 2])
    assert outbox.resend() == [Pubrel(1), Pubrel(2)]
    sent = outbox.push(_msg(1, qos=2), "m")
    assert sent is not None
    assert sent.packet_id == 3
    assert outbox.acked(1, Stage.AWAIT_PUBCOMP, refused=False).token is None
    assert outbox.releasing() == [2]
    again = outbox.acked(2, Stage.AWAIT_PUBREC, refused=False)  # released: its PUBREL again
    assert (again.stray, again.release, again.reply) == (True, True, None)
    assert outbox.releasing() == [2]
    with pytest.raises(ProtocolError):
        outbox.acked(2, Stage.AWAIT_PUBACK, refused=False)  # it was QoS 2


def test_an_answer_for_an_id_with_nothing_in_flight_changes_nothing() -> None:
    """A client that answers twice, or after a resume what was settled: no protocol error.
    A positive PUBREC gets PUBREL 0x92 (MQTT-4.3.3-4, §3.6.2.1), the rest nothing."""
    outbox: Outbox[str] = Outbox(window=1, limit=5)
    sent = outbox.push(_msg(1), "m")
    assert sent is not None
    packet_id = sent.packet_id or 0
    assert outbox.acked(packet_id, Stage.AWAIT_PUBACK, refused=False).token == "m"
    for stage, refused in [(Stage.AWAIT_PUBACK, False), (Stage.AWAIT_PUBCOMP, False)]:
        assert outbox.acked(packet_id, stage, refused) == (None, False, False, True, None, False)
    assert outbox.acked(9, Stage.AWAIT_PUBREC, refused=True) == (
        None,
        False,
        False,
        True,
        None,
        False,
    )
    stray = outbox.acked(9, Stage.AWAIT_PUBREC, refused=False)
    reply = Pubrel(9, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
    assert stray == (None, False, False, True, reply, False)
    assert outbox.push(_msg(2), "n") is not None  # the slot was freed once, and is free
    assert len(outbox) == 1


def test_what_a_restart_sends_again_takes_its_ids_back_with_dup_and_nobody_takes_them_first() -> (
    None
):
    outbox: Outbox[str] = Outbox(window=4, limit=5)
    outbox.reserve([1, 3])
    fresh = outbox.push(_msg(0), "new")
    assert fresh is not None
    assert fresh.packet_id == 2  # 1 is to be sent again
    again = outbox.push_again(_msg(1, qos=2), "old", 3)
    assert again is not None
    assert (again.packet_id, again.dup, again.qos) == (3, True, 2)
    assert outbox.sent() == [(2, "new"), (3, "old")]
    assert outbox.acked(3, Stage.AWAIT_PUBREC, refused=False).token == "old"
    assert outbox.sent() == [(2, "new")]  # after PUBREC only its PUBREL is left to send
    outbox.unreserve()  # 1 was settled meanwhile: free again, when the ids come round
    later = outbox.push(_msg(4), "later")
    assert later is not None
    assert later.packet_id == 4  # 3 waits for its PUBCOMP


def test_what_a_restart_sends_again_past_the_window_is_held_and_goes_in_its_order() -> None:
    """A client may come back after a restart with a smaller Receive Maximum than the
    messages its session had in flight: those past it wait, in the order they were given
    (first sent), and go before anything new as acknowledgements free slots (MQTT-4.6.0-1)."""
    outbox: Outbox[str] = Outbox(window=2, limit=5)
    outbox.reserve([5, 3, 9])
    sent = [
        outbox.push_again(_msg(n), f"old{n}", packet_id) for n, packet_id in enumerate([5, 3, 9])
    ]
    assert [None if p is None else (p.packet_id, p.dup) for p in sent] == [
        (5, True),
        (3, True),
        None,
    ]
    assert outbox.free == 0
    assert outbox.push(_msg(3), "new") is None  # queued behind the one held
    assert outbox.sent() == [(5, "old0"), (3, "old1"), (9, "old2")]  # the record's order
    outbox.acked(3, Stage.AWAIT_PUBACK, refused=False)
    [(held, token)] = outbox.ready()
    assert (held.packet_id, held.dup, token) == (9, True, "old2")
    outbox.acked(5, Stage.AWAIT_PUBACK, refused=False)
    [(new, token)] = outbox.ready()
    assert (new.dup, token) == (False, "new")


def test_after_a_restart_new_ids_start_past_those_the_record_names() -> None:
    """A client may hold a stale copy under an id the process before used (libmosquitto,
    docs/mqtt.md): new messages start after the highest id the record names, not at 1."""
    outbox: Outbox[str] = Outbox(window=4, limit=5)
    outbox.expect_release([7])
    outbox.reserve([3, 9])
    outbox.start_after([7, 3, 9])
    fresh = outbox.push(_msg(0), "new")
    assert fresh is not None
    assert fresh.packet_id == 10
    wrapped: Outbox[str] = Outbox(window=4, limit=5)
    wrapped.expect_release([1])
    wrapped.start_after([65_535, 1])
    ids = [wrapped.push(_msg(n), str(n)) for n in range(2)]
    assert [p.packet_id for p in ids if p is not None] == [2, 3]  # round past 65 535, 1 in use
    empty: Outbox[str] = Outbox(window=1, limit=5)
    empty.start_after([])
    first = empty.push(_msg(0), "m")
    assert first is not None
    assert first.packet_id == 1


def test_a_refused_pubrec_ends_the_exchange() -> None:
    outbox: Outbox[str] = Outbox(window=5, limit=5)
    sent = outbox.push(_msg(1, qos=2), "m")
    assert sent is not None
    refused = outbox.acked(sent.packet_id or 0, Stage.AWAIT_PUBREC, refused=True)
    assert (refused.token, refused.refused, refused.release) == ("m", True, False)


def test_resend_sets_dup_and_clear_gives_every_token_back() -> None:
    outbox: Outbox[int] = Outbox(window=1, limit=5)
    outbox.push(_msg(1), 1)
    outbox.push(_msg(2), 2)
    [again] = outbox.resend()
    assert isinstance(again, Publish)
    assert again.dup
    assert outbox.clear() == [1, 2]


def test_a_full_queue_drops_qos0_first_then_refuses() -> None:
    outbox: Outbox[int] = Outbox(window=1, limit=2)
    outbox.push(_msg(0), 0)  # in flight
    outbox.push(_msg(1), 1)  # queued
    outbox.push(_msg(2, qos=0), 2)  # queued behind it
    outbox.push(_msg(3), 3)  # the QoS 0 one made room
    assert outbox.dropped == 1
    with pytest.raises(OverflowError):
        outbox.push(_msg(4), 4)
    assert outbox.clear() == [0, 1, 3]


def test_a_queue_full_of_qos1_refuses_without_looking_through_it_for_qos0() -> None:
    """A subscriber that stopped reading has its queue full of QoS 1 messages: each message
    more for it looked through all of them for a QoS 0 one to drop, on the loop every client
    shares. At max_queued = 10,000 one slow subscriber cut a publisher's rate of 1 KB QoS 1
    messages from about 8,000 to 1,300 a second; raised as the warning advises, to 1,000,000,
    each message took tens of milliseconds. The refusals are timed against the pushes that
    filled the queue: a look through it each would take many times longer."""
    limit = 100_000
    outbox: Outbox[int] = Outbox(window=1, limit=limit)
    start = time.perf_counter()
    for n in range(limit + 1):  # one in flight, the rest queued
        outbox.push(_msg(n), n)
    filled = time.perf_counter() - start
    start = time.perf_counter()
    for n in range(500):
        with pytest.raises(OverflowError):
            outbox.push(_msg(n), n)
    refused = time.perf_counter() - start
    assert refused < filled, (refused, filled)
    assert outbox.dropped == 0


@given(
    window=st.integers(1, 5),
    steps=st.lists(st.tuples(st.sampled_from(["push", "ack"]), st.integers(0, 2)), max_size=60),
)
def test_ids_are_unique_in_flight_and_every_token_comes_back_once(
    window: int, steps: list[tuple[str, int]]
) -> None:
    outbox: Outbox[int] = Outbox(window=window, limit=1000)
    in_flight: dict[int, tuple[int, Stage]] = {}
    returned: list[int] = []
    pushed = 0

    def track(sent: Publish, token: int) -> None:
        packet_id = sent.packet_id
        assert packet_id is not None
        assert packet_id not in in_flight
        stage = Stage.AWAIT_PUBACK if sent.qos == 1 else Stage.AWAIT_PUBREC
        in_flight[packet_id] = (token, stage)

    for action, qos in steps:
        if action == "push":
            sent = outbox.push(_msg(pushed, qos), pushed)
            if sent is not None and qos:
                track(sent, pushed)
            elif sent is not None:
                returned.append(pushed)  # QoS 0: done once sent
            pushed += 1
        elif in_flight:
            packet_id, (token, stage) = next(iter(in_flight.items()))
            acked = outbox.acked(packet_id, stage, refused=False)
            # Given back once: at PUBACK, or at the PUBREC of QoS 2 (not its PUBCOMP).
            assert acked.token == (None if stage is Stage.AWAIT_PUBCOMP else token)
            if acked.token is not None:
                returned.append(acked.token)
            if acked.release:
                in_flight[packet_id] = (token, Stage.AWAIT_PUBCOMP)
            else:
                del in_flight[packet_id]
            for sent, ready_token in outbox.ready():
                if sent.qos:
                    track(sent, ready_token)
                else:
                    returned.append(ready_token)
        assert len(in_flight) <= window
    returned += [token for token in outbox.clear() if token is not None]
    assert sorted(returned) == list(range(pushed))


def _expiring(n: int, seconds: int, qos: int = 1) -> Publish:
    from boxmq.mqtt.properties import Properties

    props = Properties.build(message_expiry_interval=seconds)
    return Publish("t", str(n).encode(), qos, properties=props)


def test_a_queued_message_leaves_with_what_is_left_of_its_expiry_or_not_at_all() -> None:
    """MQTT 5.0 §3.3.2.3.3: the interval sent is what is left of it; an expired message is
    not sent, and its token is given back in `lapsed`."""
    outbox: Outbox[int] = Outbox(window=1, limit=10)
    first = outbox.push(_msg(0), 0, now=100.0)  # in flight: the others wait
    assert first is not None
    assert outbox.push(_expiring(1, 10), 1, now=100.0) is None
    assert outbox.push(_expiring(2, 3, qos=0), 2, now=100.0) is None
    assert outbox.push(_expiring(3, 60, qos=0), 3, now=101.0) is None
    outbox.acked(first.packet_id or 0, Stage.AWAIT_PUBACK, refused=False)
    ready = outbox.ready(now=104.5)
    assert [(p.payload, p.properties.message_expiry_interval) for p, _ in ready] == [
        (b"1", 6),  # 10 - 4.5, rounded up
        (b"3", 57),
    ]
    assert outbox.lapsed == [2]


def test_a_resent_message_carries_what_is_left_of_its_expiry() -> None:
    """MQTT 5.0 §3.3.2.3.3 for a PUBLISH sent again (DUP) once its session resumes; one past
    its interval goes with a second left, at QoS 1 as at QoS 2: every unacknowledged PUBLISH
    is resent (MQTT-4.4.0-1), its onward delivery had started (MQTT-3.3.2-5; for QoS 2,
    MQTT-4.3.3-7: no Message expiry once the PUBLISH was sent). A QoS 1 one was dropped."""
    outbox: Outbox[int] = Outbox(window=5, limit=10)
    for n, seconds, qos in [(1, 20, 1), (2, 3, 1), (3, 3, 2), (4, 0, 1)]:
        outbox.push(_expiring(n, seconds, qos) if seconds else _msg(n), n, now=100.0)
    resent = [p for p in outbox.resend(now=104.5) if isinstance(p, Publish)]
    assert [(p.payload, p.dup, p.properties.message_expiry_interval) for p in resent] == [
        (b"1", True, 16),  # 20 - 4.5, rounded up
        (b"2", True, 1),
        (b"3", True, 1),
        (b"4", True, None),
    ]
    assert [p.packet_id for p in resent] == [1, 2, 3, 4]  # their own ids
    assert outbox.lapsed == []
    assert len(outbox) == 4


def test_a_held_message_past_its_expiry_is_resent_as_slots_free() -> None:
    """A QoS 1 PUBLISH held past a smaller Receive Maximum at the resume, whose interval ran
    out, goes when a slot frees (DUP, a second left), under its id: it was dropped."""
    outbox: Outbox[int] = Outbox(window=2, limit=10)
    for n in (1, 2):
        outbox.push(_expiring(n, 3), n, now=100.0)
    outbox.window = 1  # the client came back with Receive Maximum 1
    [first] = outbox.resend(now=104.5)
    assert isinstance(first, Publish)
    assert first.packet_id == 1
    outbox.acked(1, Stage.AWAIT_PUBACK, refused=False)
    [(held, token)] = outbox.ready(now=105.0)
    assert (held.packet_id, held.dup, held.properties.message_expiry_interval) == (2, True, 1)
    assert token == 2
    assert outbox.lapsed == []


def test_the_queue_holds_at_most_byte_limit_bytes_of_messages() -> None:
    """A subscriber that stops reading must not hold max_queued times max_packet_size: past the
    byte limit the oldest QoS 0 messages go first, then a new one is refused. A message
    weighs its payload and its topic ("t": 1 byte here)."""
    outbox: Outbox[int] = Outbox(window=1, limit=100, byte_limit=12)
    assert outbox.push(Publish("t", b"in flight", 1), 0) is not None
    assert outbox.push(Publish("t", b"q1-b", 1), 1) is None  # 5 bytes queued
    assert outbox.push(Publish("t", b"q0-a", 0), 2) is None  # 10, behind the QoS 1 one
    assert outbox.push(Publish("t", b"q1-cc", 1), 3) is None  # 16 > 12: the QoS 0 one goes
    assert outbox.dropped == 1
    with pytest.raises(OverflowError):
        outbox.push(Publish("t", b"q1-d", 1), 4)  # 16 > 12, no QoS 0 left to drop
    outbox.acked(1, Stage.AWAIT_PUBACK, refused=False)
    assert [p.payload for p, _ in outbox.ready()] == [b"q1-b"]  # 6 bytes left queued
    assert outbox.push(Publish("t", b"q1-dd", 1), 4) is None  # 12: room again


def test_the_topic_and_properties_of_a_queued_message_count_against_byte_limit() -> None:
    """A v5 publisher may fill a packet with User Properties and send no payload: counted by
    payload alone, 300 such messages of 480 KB were queued under a limit of 16 MiB."""
    heavy = Properties.build(user_properties=(("k", "v" * 1000),))
    outbox: Outbox[int] = Outbox(window=1, limit=100, byte_limit=3000)
    assert outbox.push(Publish("t", b"", 1), 0) is not None  # in flight
    assert outbox.push(Publish("t", b"", 1, properties=heavy), 1) is None
    assert outbox.push(Publish("t", b"", 1, properties=heavy), 2) is None
    with pytest.raises(OverflowError):
        outbox.push(Publish("t", b"", 1, properties=heavy), 3)
    with pytest.raises(OverflowError):
        outbox.push(Publish("t" * 1000, b"", 1), 3)
    outbox.acked(1, Stage.AWAIT_PUBACK, refused=False)
    assert len(outbox.ready()) == 1  # one leaves the queue: its room is back
    assert outbox.push(Publish("t" * 1000, b"", 1), 3) is None


def test_a_resend_past_a_smaller_receive_maximum_holds_the_rest_until_slots_free() -> None:
    """MQTT 5.0 §4.9, MQTT-3.3.4-9: a client back with a Receive Maximum of 2 gets 2 of the 4
    messages its session had in flight; the others follow, under their own ids with DUP, as
    it acknowledges, and before anything that was queued."""
    outbox: Outbox[int] = Outbox(window=4, limit=10)
    ids = [(outbox.push(_msg(n), n) or _msg(n)).packet_id for n in range(4)]
    assert outbox.push(_msg(4), 4) is None  # queued behind the window
    outbox.window = 2
    resent = outbox.resend()
    assert [(p.packet_id, p.dup) for p in resent if isinstance(p, Publish)] == [
        (ids[0], True),
        (ids[1], True),
    ]
    assert outbox.waiting
    assert outbox.holding
    assert outbox.free == 0
    assert outbox.push(_msg(5, qos=0), 5) is None  # QoS 0 keeps its place behind them
    assert outbox.ready() == []  # no slot freed yet
    outbox.acked(ids[0] or 0, Stage.AWAIT_PUBACK, refused=False)
    [(third, token)] = outbox.ready()
    assert (third.packet_id, third.dup, token) == (ids[2], True, 2)
    outbox.acked(ids[1] or 0, Stage.AWAIT_PUBACK, refused=False)
    outbox.acked(ids[2] or 0, Stage.AWAIT_PUBACK, refused=False)
    fourth, *queued = outbox.ready()
    assert (fourth[0].packet_id, fourth[0].dup, fourth[1]) == (ids[3], True, 3)
    assert [(p.payload, p.dup) for p, _ in queued] == [(b"4", False), (b"5", False)]
    assert not outbox.holding


def test_pubrels_go_again_whatever_the_window_and_take_its_slots() -> None:
    outbox: Outbox[int] = Outbox(window=5, limit=10)
    sent = [outbox.push(_msg(n, qos=2), n) or _msg(n) for n in range(4)]
    for publish in sent[:2]:
        outbox.acked(publish.packet_id or 0, Stage.AWAIT_PUBREC, refused=False)
    outbox.window = 3
    pubrels = [Pubrel(sent[0].packet_id or 0), Pubrel(sent[1].packet_id or 0)]
    assert outbox.resend() == [*pubrels, replace(sent[2], dup=True)]
    outbox.window = 1
    assert outbox.resend() == pubrels  # past the window too, and no PUBLISH


def test_an_acknowledgement_of_a_held_message_frees_its_slot() -> None:
    """A client may answer a PUBLISH it had before the new connection: held or not, the
    answer counts, and the message is not sent again."""
    outbox: Outbox[int] = Outbox(window=2, limit=10)
    ids = [(outbox.push(_msg(n), n) or _msg(n)).packet_id or 0 for n in range(2)]
    outbox.window = 1
    assert [p.packet_id for p in outbox.resend()] == [ids[0]]
    assert outbox.acked(ids[1], Stage.AWAIT_PUBACK, refused=False).token == 1
    assert not outbox.holding
    assert outbox.free == 0  # the first is still on the wire


@given(
    window=st.integers(1, 4),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("push"), st.integers(0, 2)),
            st.tuples(st.just("ack"), st.integers(0, 3)),
            st.tuples(st.just("resume"), st.integers(1, 4)),
        ),
        max_size=60,
    ),
)
def test_no_publish_goes_past_the_window_of_its_connection_and_every_token_comes_back_once(
    window: int, steps: list[tuple[str, int]]
) -> None:
    """Pushes, acknowledgements and resumes with a new Receive Maximum, in any order: a
    PUBLISH goes only while fewer than the connection's window are unanswered (PUBRELs
    awaiting PUBCOMP included), a resent one keeps its id and has DUP, ids in flight are
    unique, and every token is given back exactly once."""
    outbox: Outbox[int] = Outbox(window=window, limit=1000)
    stage_of: dict[int, Stage] = {}  # every id in flight: what it waits for
    token_of: dict[int, int] = {}
    wire: set[int] = set()  # ids sent on this connection (or PUBREL-stage) not yet final
    returned: list[int] = []
    pushed = 0

    def went(sent: Publish, token: int, *, again: bool) -> None:
        packet_id = sent.packet_id
        assert packet_id is not None
        assert len(wire) < outbox.window  # MQTT-3.3.4-9
        assert sent.dup == again
        if again:
            assert token_of[packet_id] == token
        else:
            assert packet_id not in stage_of
            stage_of[packet_id] = Stage.AWAIT_PUBACK if sent.qos == 1 else Stage.AWAIT_PUBREC
            token_of[packet_id] = token
        wire.add(packet_id)

    def take_ready() -> None:
        for sent, token in outbox.ready():
            if sent.qos:
                went(sent, token, again=sent.dup)
            else:
                returned.append(token)

    for action, n in steps:
        if action == "push":
            sent = outbox.push(_msg(pushed, n), pushed)
            if sent is not None and n:
                went(sent, pushed, again=False)
            elif sent is not None:
                returned.append(pushed)
            pushed += 1
        elif action == "ack" and wire:
            packet_id = sorted(wire)[n % len(wire)]
            acked = outbox.acked(packet_id, stage_of[packet_id], refused=False)
            if acked.token is not None:
                returned.append(acked.token)
            if acked.release:
                stage_of[packet_id] = Stage.AWAIT_PUBCOMP
            else:
                del stage_of[packet_id], token_of[packet_id]
                wire.discard(packet_id)
            take_ready()
        elif action == "resume":
            outbox.window = n
            wire = {i for i, stage in stage_of.items() if stage is Stage.AWAIT_PUBCOMP}
            for packet in outbox.resend():
                if isinstance(packet, Pubrel):
                    assert stage_of[packet.packet_id] is Stage.AWAIT_PUBCOMP
                else:
                    went(packet, token_of[packet.packet_id or 0], again=True)
            take_ready()
    returned += [token for token in outbox.clear() if token is not None]
    assert sorted(returned) == list(range(pushed))


def test_an_acknowledgement_tells_whether_messages_wait_behind_the_window() -> None:
    """`Acked.waiting` is `Outbox.waiting` as the acknowledgement left it: the broker asks it
    at every acknowledgement, a field where the property was a call."""
    outbox: Outbox[int] = Outbox(window=1, limit=10)
    first = outbox.push(_msg(0), 0)
    assert first is not None
    assert outbox.push(_msg(1), 1) is None  # queued behind the full window
    acked = outbox.acked(first.packet_id or 0, Stage.AWAIT_PUBACK, refused=False)
    assert acked.waiting
    assert outbox.waiting
    [(second, _)] = outbox.ready()
    acked = outbox.acked(second.packet_id or 0, Stage.AWAIT_PUBACK, refused=False)
    assert not acked.waiting
    assert not outbox.waiting


def test_after_a_restart_new_ids_go_on_from_the_one_the_record_kept() -> None:
    """The record keeps `next_id` (session_record.py): a restart starts there, passing the
    ids still in use, and a new outbox's is 1."""
    assert Outbox[str](window=4, limit=5).next_id == 1
    outbox: Outbox[str] = Outbox(window=4, limit=5)
    outbox.expect_release([40])
    outbox.reserve([41])
    outbox.start_at(40)
    fresh = outbox.push(_msg(0), "new")
    assert fresh is not None
    assert fresh.packet_id == 42
    assert outbox.next_id == 43
