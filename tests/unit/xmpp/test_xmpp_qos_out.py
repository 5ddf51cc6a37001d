"""Notifications at the subscriber's urn:xmpp:qos level: retries, back-off, give-up (seed 003)."""

from __future__ import annotations

from collections.abc import Iterator
from xml.etree import ElementTree as ET

import pytest
from tests.unit.xmpp.wire import (
    ALICE,
    BOB,
    PS,
    SERVICE,
    Wire,
    condition,
    error_text,
    form_values,
    wired,
)

import boxmq
from boxmq.clock import ManualClock
from boxmq.xmpp import ns
from boxmq.xmpp.qos_out import Level, ReliableSender

QOS = ns.QOS


def _subscribe(
    wire: Wire, jid: str, level: str, queue_requests: int = 1, node: str = "jobs"
) -> ET.Element:
    return wire.iq(
        jid,
        f"<pubsub xmlns='{PS}'><subscribe node='{node}' jid='{jid.split('/')[0]}'/><options>"
        "<x xmlns='jabber:x:data' type='submit'>"
        f"<field var='pubsub#queue_requests'><value>{queue_requests}</value></field>"
        f"<field var='boxmq#qos'><value>{level}</value></field></x></options></pubsub>",
    )


def _qos_iqs(wire: Wire) -> list[ET.Element]:
    wire.service.poll()
    return [s for s in wire.take() if s.get("type") == "set"]


def _msg_id(iq: ET.Element, kind: str) -> str | None:
    """The msgId of the <assured/> or <deliver/> (`kind`) that `iq` carries."""
    element = iq.find(f"{{{QOS}}}{kind}")
    assert element is not None, ET.tostring(iq)
    return element.get("msgId")


def _answer(wire: Wire, iq: ET.Element, inner: str = "", type: str = "result") -> None:
    wire.service.answer(
        ET.fromstring(
            f"<iq xmlns='{ns.COMPONENT}' type='{type}' id='{iq.get('id')}' "
            f"from='{iq.get('to')}' to='{SERVICE}'>{inner}</iq>"
        )
    )


@pytest.fixture
def wire(manual_box: boxmq.Box, clock: ManualClock) -> Iterator[Wire]:
    with wired(manual_box, lock_timeout=300, now=clock.now) as wire:
        yield wire


def test_acknowledged_wraps_the_event_and_retries_with_back_off(
    wire: Wire, clock: ManualClock
) -> None:
    assert _subscribe(wire, ALICE, "acknowledged").get("type") == "result"
    item = wire.publish()
    [first] = _qos_iqs(wire)
    assert first.get("to") == ALICE
    event = first.find(f"{{{QOS}}}acknowledged/{{jabber:client}}message/{{{ns.PUBSUB_EVENT}}}event")
    assert event is not None
    assert event.find(f".//{{{ns.PUBSUB_EVENT}}}item").get("id") == item  # type: ignore[union-attr]
    times = []
    for _ in range(4):  # unanswered: sent again after 2, 4, 8, 16 s
        assert wire.service.next_deadline() is not None
        step = wire.service.next_deadline() - clock.now()  # type: ignore[operator]
        times.append(round(step))
        clock.advance(step)
        wire.service.expire(clock.now())
        [again] = _qos_iqs(wire)
        assert again.find(f"{{{QOS}}}acknowledged") is not None
    assert times == [2, 4, 8, 16]
    _answer(wire, again)
    remaining = wire.service.next_deadline()  # only the 300 s lock is left to watch
    assert remaining is not None
    assert remaining > clock.now() + 200
    assert wire.retract(ALICE, item).get("type") == "result"


def test_under_the_default_lock_timeout_the_lock_ends_the_retries_before_a_fifth_attempt(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    # docs/xmpp.md: a notification is sent again after 2, 4, 8 and 16 s, and given up after
    # the fifth attempt, due 30 s after the first: the default lock (30 s) ends first, so a
    # subscriber that never answers is sent it four times, then told it is unlocked.
    with wired(manual_box, now=clock.now) as wire:
        _subscribe(wire, ALICE, "acknowledged")
        item = wire.publish()
        start = clock.now()
        sent: list[float] = []
        unlocked: list[tuple[float, str | None]] = []
        wire.service.poll()
        while clock.now() < start + 100:
            for stanza in wire.take():
                if stanza.find(f"{{{QOS}}}acknowledged") is not None:
                    sent.append(round(clock.now() - start))
                elif (unlock := stanza.find(f".//{{{ns.QUEUEING}}}unlock")) is not None:
                    unlocked.append((round(clock.now() - start), unlock.get("id")))
            if unlocked:
                break
            deadline = wire.service.next_deadline()
            assert deadline is not None
            clock.advance(max(deadline - clock.now(), 0.0))
            wire.service.expire(clock.now())
            wire.service.poll()
        assert sent == [0, 2, 6, 14]
        assert unlocked == [(30, item)]


def test_assured_is_two_steps_and_a_give_up_goes_to_the_next(
    wire: Wire, clock: ManualClock
) -> None:
    _subscribe(wire, ALICE, "assured")
    item = wire.publish()
    [assured] = _qos_iqs(wire)
    assert _msg_id(assured, "assured") == f"jobs/{item}"  # the node and the item: msg_id_of
    _answer(wire, assured, f"<received xmlns='{QOS}' msgId='jobs/{item}'/>")
    [deliver] = _qos_iqs(wire)
    assert _msg_id(deliver, "deliver") == f"jobs/{item}"
    _answer(wire, deliver)
    assert wire.retract(ALICE, item).get("type") == "result"
    # the next item is never answered: after the last retry it goes to bob
    second = wire.publish()
    _qos_iqs(wire)
    _subscribe(wire, BOB, "unacknowledged")
    for _ in range(5):  # four retries, then the give-up
        deadline = wire.service.next_deadline()
        assert deadline is not None
        clock.advance(deadline - clock.now())
        wire.service.expire(clock.now())
    assert (BOB, "item", second) in wire.events()
    assert condition(wire.retract(ALICE, second)) == ("wait", "unexpected-request")


@pytest.mark.parametrize(
    "inner",
    ["", f"<received xmlns='{QOS}' msgId='another'/>", f"<received xmlns='{QOS}'/>"],
    ids=["empty", "another-msgId", "no-msgId"],
)
def test_a_result_to_assured_that_is_no_receipt_of_its_msgid_does_not_count(
    wire: Wire, clock: ManualClock, inner: str
) -> None:
    # urn:xmpp:qos, exactly once: "a received response is returned ... [it] echoes the msgId".
    # Any result was taken for it, and `deliver` sent for a message the receiver may not hold.
    _subscribe(wire, ALICE, "assured")
    item = wire.publish()
    [assured] = _qos_iqs(wire)
    _answer(wire, assured, inner)
    assert _qos_iqs(wire) == []  # no deliver
    deadline = wire.service.next_deadline()
    assert deadline is not None
    clock.advance(deadline - clock.now())
    wire.service.expire(clock.now())
    [again] = _qos_iqs(wire)  # still unanswered: asked again, the same msgId
    assert _msg_id(again, "assured") == f"jobs/{item}"
    _answer(wire, again, f"<received xmlns='{QOS}' msgId='jobs/{item}'/>")
    [deliver] = _qos_iqs(wire)
    assert _msg_id(deliver, "deliver") == f"jobs/{item}"


def test_an_unanswered_deliver_is_sent_again_and_an_error_to_it_hands_the_item_on(
    wire: Wire, clock: ManualClock
) -> None:
    # urn:xmpp:qos, Assured service: "For both the assured and deliver messages, a retry
    # mechanism similar to the one used for acknowledged service is to be used"
    _subscribe(wire, ALICE, "assured")
    item = wire.publish()
    [assured] = _qos_iqs(wire)
    _answer(wire, assured, f"<received xmlns='{QOS}' msgId='jobs/{item}'/>")
    [deliver] = _qos_iqs(wire)
    deadline = wire.service.next_deadline()
    assert deadline == clock.now() + 2
    clock.advance(2)
    wire.service.expire(clock.now())
    [again] = _qos_iqs(wire)  # the deliver, not the assured, under the same msgId
    assert [child.tag for child in again] == [f"{{{QOS}}}deliver"]
    assert _msg_id(again, "deliver") == f"jobs/{item}"
    assert again.get("id") != deliver.get("id")
    _subscribe(wire, BOB, "unacknowledged")
    _answer(wire, again, _BOUNCE, type="error")
    assert (BOB, "item", item) in wire.events()


def test_a_receipt_written_as_the_documents_example_writes_it_counts(wire: Wire) -> None:
    # The example's <received msgId='984232334'/> carries no xmlns: in the stream's namespace
    _subscribe(wire, ALICE, "assured")
    item = wire.publish()
    [assured] = _qos_iqs(wire)
    _answer(wire, assured, f"<received msgId='jobs/{item}'/>")
    [deliver] = _qos_iqs(wire)
    assert _msg_id(deliver, "deliver") == f"jobs/{item}"


def test_one_item_of_two_subscriptions_goes_under_two_msgids(
    wire: Wire, clock: ManualClock
) -> None:
    # urn:xmpp:qos, Message IDs: "Outstanding message IDs used in assured delivery, must be
    # unique for the sender", and a receiver ignores a second message under a msgId it holds
    # (Assured service). A subscriber of sensors/+ and sensors/# was sent one publish twice
    # under the item id alone: the second copy was taken for a repeat of the first, and the
    # retract of one stopped the other's retries.
    for node in ("sensors/+", "sensors/#"):
        assert _subscribe(wire, ALICE, "assured", node=node).get("type") == "result"
    item = wire.publish(node="sensors/1")
    sent = _qos_iqs(wire)
    msg_ids = {_msg_id(iq, "assured") for iq in sent}
    assert len(sent) == len(msg_ids) == 2
    assert wire.retract(ALICE, item, node="sensors/+").get("type") == "result"
    deadline = wire.service.next_deadline()
    assert deadline is not None
    clock.advance(deadline - clock.now())
    wire.service.expire(clock.now())
    [again] = _qos_iqs(wire)  # the other subscription's copy is still being sent
    assert again.find(f".//{{{ns.PUBSUB_EVENT}}}items").get("node") == "sensors/#"  # type: ignore[union-attr]


def test_an_error_answer_gives_the_item_to_the_next_at_once(wire: Wire) -> None:
    _subscribe(wire, ALICE, "acknowledged")
    item = wire.publish()
    [sent] = _qos_iqs(wire)
    assert sent.get("to") == ALICE
    _subscribe(wire, BOB, "unacknowledged")
    assert wire.events() == []  # alice holds it until she answers
    _answer(wire, sent, type="error")
    assert sorted(wire.events()) == [(ALICE, "unlock", item), (BOB, "item", item)]


def _invalid_options(reply: ET.Element) -> None:
    """XEP-0060 §6.3.6: a bad option is bad-request + invalid-options, as a bad queue_requests
    is; the QoS level's was a plain bad-request, which does not say the options were at fault."""
    assert condition(reply) == ("modify", "bad-request"), ET.tostring(reply)
    assert reply.find(f".//{{{ns.PUBSUB_ERRORS}}}invalid-options") is not None, ET.tostring(reply)
    assert "boxmq#qos" in error_text(reply)


def test_an_unknown_level_is_invalid_options(wire: Wire) -> None:
    _invalid_options(_subscribe(wire, ALICE, "twice"))
    wire.publish()
    assert wire.items_to(ALICE) == []


def test_an_unknown_level_changing_a_subscription_is_invalid_options_and_changes_nothing(
    wire: Wire,
) -> None:
    assert _subscribe(wire, ALICE, "acknowledged").get("type") == "result"
    _invalid_options(_subscribe(wire, ALICE, "twice", queue_requests=5))
    in_force = form_values(wire.subscribe(ALICE, None))
    assert in_force["boxmq#qos"] == "acknowledged"
    assert in_force["pubsub#queue_requests"] == "1"


# A form's value may be surrounded by XML's blanks (space, tab, CR, LF), as pubsub#queue_requests
# may: no other white space, so that the two fields of one form are read by one rule.
@pytest.mark.parametrize("written", [" assured", "assured\n", "\t\r\nAssured  "])
def test_a_level_may_be_surrounded_by_xml_blanks(written: str) -> None:
    assert Level.parse(written) is Level.ASSURED


@pytest.mark.parametrize(
    "written", ["\u00a0assured", "assured\u2003", "\u3000assured", "\x85assured"]
)
def test_a_level_surrounded_by_other_white_space_is_refused(wire: Wire, written: str) -> None:
    with pytest.raises(boxmq.InvalidArgument, match="QoS level"):
        Level.parse(written)
    _invalid_options(_subscribe(wire, ALICE, written))


def test_unacknowledged_sends_the_message_itself() -> None:
    sent: list[str] = []
    sender = ReliableSender(sender=SERVICE, send=sent.append)
    sender.send(ALICE, "<message/>", Level.UNACKNOWLEDGED, msg_id="m", now=0, on_failed=print)
    assert sent == ["<message/>"]
    assert sender.in_flight() == 0
    assert sender.next_deadline() is None


def test_a_settled_item_is_not_sent_again(wire: Wire, clock: ManualClock) -> None:
    _subscribe(wire, ALICE, "acknowledged")
    item = wire.publish()
    [sent] = _qos_iqs(wire)
    assert wire.retract(ALICE, item).get("type") == "result"  # settled before it answered
    clock.advance(60)
    wire.service.expire(clock.now())
    assert _qos_iqs(wire) == []
    _answer(wire, sent)  # a late answer is simply not ours any more


def test_only_the_subscriber_a_notification_went_to_can_answer_it(wire: Wire) -> None:
    _subscribe(wire, ALICE, "acknowledged")
    item = wire.publish()
    [sent] = _qos_iqs(wire)
    _subscribe(wire, BOB, "unacknowledged")
    for spoofer in (BOB, "alice@localhost/other", "alice@localhost"):
        wire.service.answer(
            ET.fromstring(
                f"<iq xmlns='{ns.COMPONENT}' type='error' id='{sent.get('id')}' "
                f"from='{spoofer}' to='{SERVICE}'/>"
            )
        )
        assert wire.events() == []  # ignored: alice still holds it
    _answer(wire, sent)  # alice's own answer is taken
    assert wire.retract(ALICE, item).get("type") == "result"


def test_an_answer_from_the_subscriber_written_in_other_case_is_its_own(wire: Wire) -> None:
    """RFC 7622: the localpart and domainpart compare without case, the resource with it."""
    _subscribe(wire, ALICE, "acknowledged")
    item = wire.publish()
    [sent] = _qos_iqs(wire)
    _subscribe(wire, BOB, "unacknowledged")
    for answerer in ("alice@localhost/A", "Alice@LocalHost/a"):
        wire.service.answer(
            ET.fromstring(
                f"<iq xmlns='{ns.COMPONENT}' type='error' id='{sent.get('id')}' "
                f"from='{answerer}' to='{SERVICE}'/>"
            )
        )
    # the first is someone else, ignored; the second is alice saying no: bob has it now
    assert sorted(wire.events()) == [(ALICE, "unlock", item), (BOB, "item", item)]


def test_notification_ids_cannot_be_guessed_from_another_run() -> None:
    first: list[str] = []
    second: list[str] = []
    for sent in (first, second):
        sender = ReliableSender(sender=SERVICE, send=sent.append)
        for n in range(2):
            sender.send(ALICE, "<m/>", Level.ACKNOWLEDGED, msg_id=str(n), now=0, on_failed=print)
    ids = [ET.fromstring(x).get("id", "") for x in first + second]
    assert len(set(ids)) == 4
    assert min(len(i) for i in ids) >= 16  # a random part, not bq1, bq2, ...
    assert ids[0].rsplit("-", 1)[0] != ids[2].rsplit("-", 1)[0]


def test_a_give_up_tells_the_holder_its_item_was_unlocked(wire: Wire, clock: ManualClock) -> None:
    _subscribe(wire, ALICE, "acknowledged")
    item = wire.publish()
    _qos_iqs(wire)
    _subscribe(wire, BOB, "unacknowledged")
    seen = []
    for _ in range(5):  # never answered: four retries, then the give-up
        deadline = wire.service.next_deadline()
        assert deadline is not None
        clock.advance(deadline - clock.now())
        wire.service.expire(clock.now())
        seen += wire.events()
    # XEP-0254 §4, as for a lock timeout: the holder hears that the item went back
    assert seen == [(ALICE, "unlock", item), (BOB, "item", item)]


@pytest.mark.parametrize("level", ["acknowledged", "assured"])
def test_the_wrapped_message_leaves_its_to_and_from_to_the_iq(wire: Wire, level: str) -> None:
    # urn:xmpp:qos, To and from attributes: those of an embedded message "should be ignored
    # and left out by the sender" (the receiver overwrites them from the iq's). They were
    # written, a copy of the iq's, on every notification sent acknowledged or assured.
    _subscribe(wire, ALICE, level)
    wire.publish()
    [sent] = _qos_iqs(wire)
    assert (sent.get("from"), sent.get("to")) == (SERVICE, ALICE)
    message = sent.find(f"{{{QOS}}}{level}/{{jabber:client}}message")
    assert message is not None
    assert (message.get("from"), message.get("to")) == (None, None)
    assert message.find(f"{{{ns.PUBSUB_EVENT}}}event") is not None


_BOUNCE = (
    "<error type='cancel'><service-unavailable xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/>"
    "</error>"
)


def test_a_subscriber_whose_notifications_bounce_three_times_in_a_row_is_unsubscribed(
    wire: Wire, manual_box: boxmq.Box, clock: ManualClock
) -> None:
    # A subscriber at a QoS level that left unheard (no directed presence, or it left while
    # the component was away): the server answers each notification iq service-unavailable
    # (RFC 6120 §10.5.3.1) at once. Each answer unlocked the item and gave it back to it a
    # second later, no lock ever timed out, and in five seconds the item was in error/,
    # then the next one, the subscriber never unsubscribed: the queue drained into error/.
    _subscribe(wire, ALICE, "acknowledged", queue_requests=2)
    wire.publish()
    wire.publish()
    bounced, stanzas = 0, []
    for _ in range(6):
        wire.service.poll()
        stanzas += wire.take()
        clock.advance(0.01)  # the way to the server and back
        for iq in [s for s in stanzas if s.get("type") == "set"]:
            _answer(wire, iq, _BOUNCE, type="error")
            bounced += 1
        stanzas = [s for s in stanzas if s.get("type") != "set"]
        clock.advance(1.1)  # past the handoff: what it let go waits a second for another
        wire.service.expire(clock.now())
    assert bounced == 6  # both items, three times, each time together: three silences
    ended = f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}subscription"
    told = [s.find(ended) for s in stanzas + wire.take() if s.find(ended) is not None]
    assert [(e.get("node"), e.get("subscription")) for e in told if e is not None] == [
        ("jobs", "none")
    ]
    counts = manual_box.queue("jobs").counts()
    assert (counts.ready, counts.dead) == (2, 0)  # waiting for the next subscriber


def test_a_subscriber_that_never_answers_its_notifications_is_unsubscribed_after_three_give_ups(
    wire: Wire, manual_box: boxmq.Box, clock: ManualClock
) -> None:
    # The lock (300 s here) outlasts the retries (a give-up 62 s in): no lock timed out, so
    # only the give-ups can tell that the subscriber is gone.
    _subscribe(wire, ALICE, "acknowledged")
    wire.publish()
    assert len(_qos_iqs(wire)) == 1
    ended = f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}subscription"
    unlock = f".//{{{ns.QUEUEING}}}unlock"
    told: list[ET.Element] = []
    gave_up, until = 0, clock.now() + 1000
    while not told and clock.now() < until:
        deadline = wire.service.next_deadline()
        # to the next retry, or past the handoff after a give-up
        clock.advance(1.1 if deadline is None else max(deadline - clock.now(), 0.0))
        wire.service.expire(clock.now())
        wire.service.poll()
        for stanza in wire.take():
            gave_up += stanza.find(unlock) is not None
            told += [e for e in [stanza.find(ended)] if e is not None]
    assert [(e.get("node"), e.get("subscription")) for e in told] == [("jobs", "none")]
    assert gave_up == 3
    counts = manual_box.queue("jobs").counts()
    assert (counts.ready, counts.dead) == (1, 0)


def test_a_clock_stepped_back_does_not_put_a_resend_off_by_the_step() -> None:
    # The resends are times of the wall clock: stepped back an hour (NTP, date -s), an
    # unanswered notification was sent again an hour late.
    sent: list[str] = []
    sender = ReliableSender(sender=SERVICE, send=sent.append, first_retry=2.0)
    sender.send(ALICE, "<m/>", Level.ACKNOWLEDGED, msg_id="m", now=1000.0, on_failed=print)
    sender.retry(1001.0)
    sender.retry(1001.0 - 3600)  # the clock went back an hour a second after the send
    assert sender.next_deadline() == pytest.approx(1002.0 - 3600)
    sender.retry(1002.0 - 3600)
    assert len(sent) == 2  # sent again two seconds after the first, not an hour and 2 s
