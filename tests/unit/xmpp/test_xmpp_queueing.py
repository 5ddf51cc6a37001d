"""Every XEP-0254 flow, stanzas fed to the service with no server (seed 001, §2-§4)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from tests.unit.xmpp.wire import (
    ALICE,
    BOB,
    CAROL,
    PS,
    SERVICE,
    Wire,
    condition,
    error_text,
    form_values,
    in_stream,
    wired,
)
from tests.waiting import logged

import boxmq
from boxmq.clock import ManualClock
from boxmq.xmpp import ns

EV = ns.PUBSUB_EVENT


@pytest.fixture
def timed_wire(manual_box: boxmq.Box) -> Iterator[Wire]:
    """A wire on the manual clock, its locks timing out after 10 s, the node jobs made."""
    with wired(manual_box, lock_timeout=10) as wire:
        yield wire


def test_subscribe_without_options_is_configuration_required_with_the_form(wire: Wire) -> None:
    reply = wire.subscribe(ALICE, None)
    assert condition(reply) == ("modify", "not-acceptable")
    error = reply.find(ns.tag(ns.COMPONENT, "error"))
    assert error is not None
    assert error.find(ns.tag(ns.PUBSUB_ERRORS, "configuration-required")) is not None
    # Listing 1: the options form, with FORM_TYPE and a required queue_requests field.
    form = reply.find(f"{{{PS}}}pubsub/{{{PS}}}options/{{{ns.DATA}}}x")
    assert form is not None
    assert form.get("type") == "form"
    fields = {f.get("var"): f for f in form.iter(ns.tag(ns.DATA, "field"))}
    assert fields["FORM_TYPE"].findtext(ns.tag(ns.DATA, "value")) == ns.SUBSCRIBE_OPTIONS
    assert fields["pubsub#queue_requests"].find(ns.tag(ns.DATA, "required")) is not None


def test_subscribe_with_queue_requests_answers_the_options_in_force(wire: Wire) -> None:
    reply = wire.subscribe(ALICE, 5)
    assert reply.get("type") == "result"
    subscription = reply.find(f"{{{PS}}}pubsub/{{{PS}}}subscription")
    assert subscription is not None
    assert subscription.get("subscription") == "subscribed"
    assert subscription.get("jid") == "alice@localhost"
    assert subscription.get("subid")
    values = [v.text for v in reply.iter(ns.tag(ns.DATA, "value"))]
    assert values == [ns.SUBSCRIBE_OPTIONS, "5", "unacknowledged"]


def test_configuration_required_echoes_the_subscribe_and_names_the_options_it_asks_for(
    wire: Wire,
) -> None:
    # XEP-0254 §2.1, Listing 1: the error carries the <subscribe/> it answers and an
    # <options/> naming the same jid and node, its queue_requests field a text-single, so a
    # client can fill in the form and send it back as Listing 2 does.
    reply = wire.subscribe(ALICE, None)
    subscribe = reply.find(f"{{{PS}}}pubsub/{{{PS}}}subscribe")
    options = reply.find(f"{{{PS}}}pubsub/{{{PS}}}options")
    assert subscribe is not None
    assert options is not None
    assert (subscribe.get("jid"), subscribe.get("node")) == ("alice@localhost", "jobs")
    assert (options.get("jid"), options.get("node")) == ("alice@localhost", "jobs")
    [field] = [
        f for f in options.iter(ns.tag(ns.DATA, "field")) if f.get("var") == "pubsub#queue_requests"
    ]
    assert field.get("type") == "text-single"


def test_the_subscription_result_names_its_node_and_returns_a_result_form(wire: Wire) -> None:
    # XEP-0254 §2.1, Listing 3: the <subscription/> names the node subscribed to, and the
    # options established come back as a form of type 'result' inside <options/>.
    wire.create("mail")
    reply = wire.subscribe(ALICE, 5, node="mail")
    subscription = reply.find(f"{{{PS}}}pubsub/{{{PS}}}subscription")
    assert subscription is not None
    assert subscription.get("node") == "mail"
    form = reply.find(f"{{{PS}}}pubsub/{{{PS}}}options/{{{ns.DATA}}}x")
    assert form is not None
    assert form.get("type") == "result"


def _subscribe_with_queue_requests(wire: Wire, value: str) -> ET.Element:
    """Alice's subscribe to jobs with a form of pubsub#queue_requests alone, `value` written
    as it comes (no FORM_TYPE, unlike Wire.subscribe's form)."""
    return wire.iq(
        ALICE,
        f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='alice@localhost'/><options>"
        f"<x xmlns='jabber:x:data' type='submit'><field var='pubsub#queue_requests'>"
        f"<value>{value}</value></field></x></options></pubsub>",
    )


# int() would also take "1_0" and other scripts' digits: Arabic-Indic 3, fullwidth 5. A sign
# alone, two signs, a blank inside, or 10000 and one written with leading zeros are no count.
@pytest.mark.parametrize(
    "value",
    [
        *("0", "-1", "-0", "many", "1_0", "\u0663", "\uff15", "9" * 5000, "", "+", "++1"),
        *("+-1", "- 1", "1 0", "10001", "0010001", "1.0", "1e3", "0x10"),
    ],
)
def test_a_bad_queue_requests_is_refused(wire: Wire, value: str) -> None:
    reply = _subscribe_with_queue_requests(wire, value)
    assert condition(reply) == ("modify", "bad-request")


def test_queue_requests_may_have_blanks_around_its_digits(wire: Wire) -> None:
    reply = _subscribe_with_queue_requests(wire, " 3\n")
    assert reply.get("type") == "result"
    values = [v.text for v in reply.iter(ns.tag(ns.DATA, "value"))]
    assert values == [ns.SUBSCRIBE_OPTIONS, "3", "unacknowledged"]


# xs:integer's lexical forms, as a client filling in the text-single field may write them:
# leading zeros (six digits for 10000) and a leading plus sign (XML Schema 1.0, 3.3.13).
@pytest.mark.parametrize(
    ("value", "count"),
    [("010000", "10000"), ("+5", "5"), ("+0010000", "10000"), ("0" * 5000 + "7", "7")],
)
def test_queue_requests_may_be_written_as_any_xs_integer(
    wire: Wire, value: str, count: str
) -> None:
    reply = _subscribe_with_queue_requests(wire, value)
    assert reply.get("type") == "result"
    values = [v.text for v in reply.iter(ns.tag(ns.DATA, "value"))]
    assert values == [ns.SUBSCRIBE_OPTIONS, count, "unacknowledged"]


# XML's blanks (space, tab, CR, LF) around the value are taken, as for the boxmq#qos field;
# no other white space (a no-break space, an em space), which xs:integer does not allow.
@pytest.mark.parametrize(
    ("value", "taken"),
    [(" 7", True), ("7\t\r\n", True), ("\u00a07", False), ("7\u2003", False), ("\x857", False)],
)
def test_queue_requests_may_be_surrounded_by_xml_blanks_only(
    wire: Wire, value: str, taken: bool
) -> None:
    reply = _subscribe_with_queue_requests(wire, value)
    if taken:
        assert reply.get("type") == "result"
    else:
        assert condition(reply) == ("modify", "bad-request")


def test_subscribing_someone_else_is_invalid_jid(wire: Wire) -> None:
    reply = wire.iq(
        ALICE, f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='bob@localhost'/></pubsub>"
    )
    assert condition(reply) == ("modify", "bad-request")


def test_a_jid_that_differs_in_the_case_of_its_local_or_domain_part_is_ones_own(
    wire: Wire,
) -> None:
    # RFC 7622 §3.2-§3.3: the localpart and domainpart compare without case; the server
    # stamps the sender's in lower case, the client writes the attribute as it likes.
    reply = wire.iq(
        ALICE, f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='Alice@LocalHost'/></pubsub>"
    )
    assert condition(reply) == ("modify", "not-acceptable")  # configuration-required: served
    wire.subscribe(ALICE, 1)
    reply = wire.iq(
        ALICE, f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='ALICE@localhost'/></pubsub>"
    )
    assert reply.get("type") == "result"


def test_a_subscribe_naming_no_jid_is_invalid_jid(wire: Wire) -> None:
    reply = wire.iq(ALICE, f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='a@b/'/></pubsub>")
    assert condition(reply) == ("modify", "bad-request")
    assert "'a@b/' is no JID" in error_text(reply)


def test_a_sender_written_in_other_case_is_the_same_lock_holder(wire: Wire, box: boxmq.Box) -> None:
    """A server that passes `from` on as the client wrote it: the unavailable presence of
    alice@localhost/a still finds the locks Alice@LocalHost/a took, and its retract the item;
    the resource stays case-sensitive (alice@localhost/A is someone else)."""
    wire.subscribe("Alice@LocalHost/a", 2)
    items = [wire.publish(), wire.publish()]
    assert sorted(wire.items_to(ALICE)) == sorted(items)  # sent to the form it compares
    assert wire.retract(ALICE, items[0]).get("type") == "result"
    wire.service.gone("alice@localhost/A")
    assert box.queue("jobs").counts().locked == 1
    wire.service.gone(ALICE)
    assert box.queue("jobs").counts().locked == 0


def test_publish_notifies_exactly_one_subscriber_with_the_payload(wire: Wire) -> None:
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    item = wire.publish("<job xmlns='urn:example'>payload</job>")
    wire.service.poll()
    events = [s for s in wire.take() if s.find(ns.tag(EV, "event")) is not None]
    assert len(events) == 1
    [delivered] = events[0].iter(ns.tag(EV, "item"))
    assert delivered.get("id") == item
    assert delivered[0].tag == "{urn:example}job"
    assert delivered[0].text == "payload"
    assert events[0].get("from") == "queue.localhost"
    assert events[0].get("to") in (ALICE, BOB)


def test_a_payload_reaches_the_subscriber_and_the_queue_as_it_was_published(
    wire: Wire, box: boxmq.Box
) -> None:
    # A tab and a line feed in an attribute were stored as they were, which a parser reads
    # as spaces, a carriage return in text as a line feed, and the attribute in urn:p was
    # left out: the subscriber and the queue's readers got another payload.
    wire.publish(
        "<job xmlns='urn:example' xmlns:p='urn:p' a='x&#9;y&#10;z' p:b='1'>"
        "l1&#13;<k xml:lang='en'>l2&#13;</k></job>"
    )
    jobs = box.queue("jobs")
    stored = jobs.get()
    assert stored is not None
    jobs.unlock(stored.id)
    wire.subscribe(ALICE, 1)
    wire.service.poll()
    [event] = [s for s in wire.take() if s.find(ns.tag(EV, "event")) is not None]
    [delivered] = event.iter(ns.tag(EV, "item"))
    for job in (ET.fromstring(stored.body), delivered[0]):
        assert job.attrib == {"a": "x\ty\nz", "{urn:p}b": "1"}
        assert job.text == "l1\r"
        assert job[0].text == "l2\r"
        assert job[0].attrib == {"{http://www.w3.org/XML/1998/namespace}lang": "en"}


def test_queue_requests_bounds_what_each_subscriber_holds(wire: Wire) -> None:
    wire.subscribe(ALICE, 2)
    wire.subscribe(BOB, 3)
    for _ in range(10):
        wire.publish()
    events = wire.events()
    assert sorted(to for to, _, _ in events) == [ALICE] * 2 + [BOB] * 3


def test_retract_by_the_receiver_deletes_and_notifies_only_it(wire: Wire, box: boxmq.Box) -> None:
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    item = wire.publish()
    [(to, _, _)] = wire.events()
    # Listing 6 sends the retract as type='get'; it is accepted like a set.
    reply = wire.retract(to, item, type="get")
    assert reply.get("type") == "result"
    assert wire.events() == [(to, "retract", item)]
    assert box.queue("jobs").counts().done == 1
    assert condition(wire.retract(to, item)) == ("cancel", "item-not-found")


def test_the_delete_notification_comes_before_the_result_of_the_retract(
    wire: Wire, box: boxmq.Box
) -> None:
    # XEP-0254 §2.3: the subscriber "SHOULD NOT commit any pending transactions until it
    # receives the delete notification", so the notification goes out first: a client that
    # commits on the result has had the notification already.
    wire.subscribe(ALICE, 1)
    item = wire.publish()
    assert wire.items_to(ALICE) == [item]
    wire.service.iq(
        in_stream(
            f"<iq type='set' id='r1' from='{ALICE}' to='queue.localhost'><pubsub xmlns='{PS}'>"
            f"<retract node='jobs'><item id='{item}'/></retract></pubsub></iq>"
        )
    )
    wire.service.flush()
    sent = [in_stream(x) for x in wire.sent]
    retracted = f"{{{EV}}}event/{{{EV}}}items/{{{EV}}}retract"
    assert [
        (s.tag.rsplit("}", 1)[-1], s.get("id") if s.find(retracted) is None else "notice")
        for s in sent
    ] == [
        ("message", "notice"),
        ("iq", "r1"),
    ]
    assert box.queue("jobs").counts().done == 1


def test_unlock_notifies_the_holder_and_hands_the_item_to_the_next(wire: Wire) -> None:
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    item = wire.publish()
    [(first, _, _)] = wire.events()
    other = BOB if first == ALICE else ALICE
    assert wire.unlock(first, item).get("type") == "result"  # type='get', as Listing 10
    events = wire.events()
    assert (first, "unlock", item) in events
    assert (other, "item", item) in events
    assert len(events) == 2


def test_each_notification_names_the_node_of_its_item(wire: Wire) -> None:
    # XEP-0254 Listings 5, 7 and 11: the publish, delete and unlock notifications each carry
    # <items node=.../>, which is how a subscriber of several nodes tells whose item it is.
    wire.create("mail")
    wire.subscribe(ALICE, 1)
    wire.subscribe(ALICE, 2, node="mail")
    job = wire.publish()
    first, second = wire.publish(node="mail"), wire.publish(node="mail")
    wire.service.poll()
    wire.retract(ALICE, first, node="mail")
    wire.unlock(ALICE, second, node="mail")
    wire.service.poll()
    found = []
    for stanza in wire.take():
        for items in stanza.iterfind(f"{{{EV}}}event/{{{EV}}}items"):
            found += [
                (child.tag.rsplit("}", 1)[-1], child.get("id"), items.get("node"))
                for child in items
            ]
    assert sorted(found) == sorted(
        [
            ("item", job, "jobs"),
            ("item", first, "mail"),
            ("item", second, "mail"),
            ("retract", first, "mail"),
            ("unlock", second, "mail"),
        ]
    )


def test_the_unlock_notification_is_written_in_the_feature_namespace(wire: Wire) -> None:
    wire.subscribe(ALICE, 1)
    item = wire.publish()
    wire.events()
    wire.unlock(ALICE, item)
    [notice] = [s for s in wire.take() if s.find(ns.tag(EV, "event")) is not None]
    assert notice.find(f".//{{{ns.QUEUEING}}}unlock") is not None  # not Listing 11's typo
    assert notice.find(f".//{{{ns.QUEUEING_TYPO}}}unlock") is None


def test_an_unlock_in_the_typo_namespace_is_accepted(wire: Wire) -> None:
    wire.subscribe(ALICE, 1)
    item = wire.publish()
    wire.events()
    assert wire.unlock(ALICE, item, namespace=ns.QUEUEING_TYPO).get("type") == "result"


def _one_held_one_waiting(wire: Wire) -> tuple[str, str, str, str]:
    """Alice and Bob subscribed with room for one each, and three items published: the
    holder's, the other's, and one waiting for room. The holder, the other, the holder's
    item and the waiting one."""
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    held = wire.publish()
    [(holder, _, _)] = wire.events()
    other = BOB if holder == ALICE else ALICE
    wire.publish()
    assert [to for to, _, _ in wire.events()] == [other]
    waiting = wire.publish()  # nobody has room: never delivered to anyone
    assert wire.events() == []
    return holder, other, held, waiting


def test_the_errors_of_listings_8_to_15(wire: Wire) -> None:
    holder, other, held, waiting = _one_held_one_waiting(wire)
    for act in (wire.retract, wire.unlock):
        # locked by another subscriber: conflict (the text of §2.3; Listing 8 shows forbidden)
        assert condition(act(other, held)) == ("cancel", "conflict")
        # not delivered to the requester: forbidden (Listing 13)
        assert condition(act(other, waiting)) == ("auth", "forbidden")
        # no such item: item-not-found (Listing 12)
        assert condition(act(holder, "no-such-id")) == ("cancel", "item-not-found")
    # held once, lock gone: unexpected-request (Listings 9 and 15)
    wire.unlock(holder, held)
    wire.events()
    for act in (wire.retract, wire.unlock):
        assert condition(act(holder, held)) == ("wait", "unexpected-request")


def test_a_lock_refusal_names_the_subscribers_jid_not_its_internal_consumer(wire: Wire) -> None:
    # The queue's refusals name the consumer, xmpp.<hash> (the subid): an XMPP client reads
    # the text, and knows itself by its JID.
    holder, other, held, waiting = _one_held_one_waiting(wire)

    for act in (wire.retract, wire.unlock):
        forbidden = error_text(act(other, waiting))
        assert f"{other} did not receive" in forbidden, forbidden
        conflict = error_text(act(other, held))
        assert "locked by another subscriber" in conflict, conflict
        assert "xmpp." not in forbidden + conflict
    wire.unlock(holder, held)
    wire.events()
    for act in (wire.retract, wire.unlock):
        gone = error_text(act(holder, held))
        assert f"{holder} no longer holds the lock" in gone, gone
        assert "xmpp." not in gone, gone


def test_an_answer_after_a_restart_of_the_component_says_the_lock_is_gone(root: Path) -> None:
    # The items a subscriber held go back to the queue when the component stops, with no
    # record of who held them (a holder that left is passed over by nobody). Its retract or
    # unlock after the restart was answered auth/forbidden, "did not receive this message",
    # where XEP-0254 §2.3/§2.4 answer unexpected-request to the subscriber that received it.
    with boxmq.open(root, fsync="never") as box:
        wire = Wire(box)
        wire.create()
        wire.subscribe(ALICE, 1)
        item = wire.publish()
        assert wire.items_to(ALICE) == [item]
        wire.service.close()
    with boxmq.open(root, fsync="never") as box:
        wire = Wire(box)
        waiting = wire.publish()  # never delivered to anyone: forbidden, as before
        for act in (wire.retract, wire.unlock):
            assert condition(act(ALICE, item)) == ("wait", "unexpected-request")
            assert condition(act(ALICE, waiting)) == ("auth", "forbidden")
        assert box.queue("jobs").counts().ready == 2  # nothing settled
        wire.service.close()


@pytest.mark.parametrize("verb", ["retract", "unlock"])
def test_a_retract_or_unlock_of_two_items_is_bad_request_and_touches_neither(
    wire: Wire, box: boxmq.Box, verb: str
) -> None:
    # XEP-0060 §7.2.1 retracts one item per request: the first was acted on and the second
    # silently left, so a client could not tell which of its two it had settled.
    wire.subscribe(ALICE, 2)
    first, second = wire.publish(), wire.publish()
    assert {item for _, _, item in wire.events()} == {first, second}
    namespace = f" xmlns='{ns.QUEUEING}'" if verb == "unlock" else ""
    reply = wire.iq(
        ALICE,
        f"<pubsub xmlns='{PS}'><{verb}{namespace} node='jobs'><item id='{first}'/>"
        f"<item id='{second}'/></{verb}></pubsub>",
        type="get" if verb == "unlock" else "set",
    )
    assert condition(reply) == ("modify", "bad-request")
    assert "one item per request" in error_text(reply)
    assert wire.events() == []
    assert box.queue("jobs").counts().locked == 2  # both still hers, as they were
    for item in (first, second):
        assert wire.retract(ALICE, item).get("type") == "result"


def test_an_error_reply_echoes_the_request(wire: Wire) -> None:
    reply = wire.retract(ALICE, "nope")
    retract = reply.find(f"{{{PS}}}pubsub/{{{PS}}}retract")
    assert retract is not None
    assert retract.get("node") == "jobs"


def test_an_unlock_error_echoes_the_unlock_as_listings_12_to_15(wire: Wire) -> None:
    # XEP-0254 §2.4, Listings 12-15: each error to an unlock carries the <unlock/> it
    # answers, in the queueing namespace, with its node and item, so that a client with
    # several unlocks in flight knows which one failed.
    holder, other, held, waiting = _one_held_one_waiting(wire)

    def assert_refused_echoing(jid: str, item: str, error: str) -> None:
        reply = wire.unlock(jid, item)
        assert condition(reply)[1] == error
        unlock = reply.find(f"{{{PS}}}pubsub/{{{ns.QUEUEING}}}unlock")
        assert unlock is not None, ET.tostring(reply)
        assert unlock.get("node") == "jobs"
        assert [i.get("id") for i in unlock.iter(ns.tag(ns.QUEUEING, "item"))] == [item]

    assert_refused_echoing(holder, "no-such-id", "item-not-found")  # Listing 12
    assert_refused_echoing(other, waiting, "forbidden")  # Listing 13
    assert_refused_echoing(other, held, "conflict")  # Listing 14
    assert wire.unlock(holder, held).get("type") == "result"
    wire.events()
    assert_refused_echoing(holder, held, "unexpected-request")  # Listing 15


def test_unavailable_presence_unlocks_and_unsubscribes(wire: Wire, box: boxmq.Box) -> None:
    wire.subscribe(ALICE, 2)
    wire.subscribe(BOB, 1)
    items = {wire.publish() for _ in range(3)}
    before = wire.events()
    alice_items = {item for to, _, item in before if to == ALICE}
    assert len(alice_items) == 2
    wire.service.gone(ALICE)
    assert box.queue("jobs").counts().locked == 1  # only bob's: alice's went back at once
    items |= {wire.publish() for _ in range(2)}
    # bob works through everything, alice's two included; nothing more reaches alice
    delivered: list[str] = [item for to, _, item in before if to == BOB]
    for _ in range(10):
        for item in delivered[-1:]:
            assert wire.retract(BOB, item).get("type") == "result"
        new = [(to, item) for to, what, item in wire.events() if what == "item"]
        assert all(to == BOB for to, _ in new)
        delivered += [item for _, item in new]
        if not new:
            break
    assert sorted(delivered) == sorted(items)
    assert box.queue("jobs").counts().done == 5
    # and alice is no longer subscribed
    reply = wire.unsubscribe(ALICE)
    assert condition(reply) == ("cancel", "unexpected-request")


def test_a_bare_jid_going_is_no_session_ending(wire: Wire, box: boxmq.Box) -> None:
    # XEP-0254 §4 ends a subscriber's full JID; unavailable presence or a bounce from an
    # address without a resource (an account, not a session) ends nothing, whoever calls
    wire.subscribe("alice@localhost", 1)
    item = wire.publish()
    assert wire.events() == [("alice@localhost", "item", item)]
    wire.service.gone("alice@localhost")
    assert box.queue("jobs").counts().locked == 1


def test_unavailable_presence_unlocks_what_it_held_on_every_node(
    wire: Wire, box: boxmq.Box
) -> None:
    # XEP-0254 §4: "unlock all outstanding queue items associated with the subscriber and
    # unsubscribe the subscriber": all of them, on each queue node it subscribed to, and
    # another resource of the same user keeps its own.
    wire.create("mail")
    other_resource = "alice@localhost/other"
    wire.subscribe(ALICE, 2)
    wire.subscribe(ALICE, 2, node="mail")
    wire.subscribe(other_resource, 1, node="mail")
    for node in ("jobs", "jobs", "mail", "mail", "mail"):
        wire.publish(node=node)
    assert len(wire.items_to(ALICE)) == 4
    wire.service.gone(ALICE)
    assert box.queue("jobs").counts().locked == 0
    assert box.queue("mail").counts().locked == 1  # the other resource's
    for node in ("jobs", "mail"):
        wire.publish(node=node)
    assert wire.items_to(ALICE) == []


def test_a_subscriber_back_after_leaving_is_told_its_lock_is_gone_not_conflict(
    wire: Wire,
) -> None:
    # XEP-0254 §4: unavailable, everything alice held is unlocked, and bob is given it. Back
    # and answering late, she no longer holds the lock: unexpected-request (§2.3/§2.4), as
    # after a lock timeout, not the conflict of a subscriber that never had it.
    wire.subscribe(ALICE, 1)
    item = wire.publish()
    assert wire.events() == [(ALICE, "item", item)]
    wire.subscribe(BOB, 1)
    wire.service.gone(ALICE)
    assert (BOB, "item", item) in wire.events()
    wire.subscribe(ALICE, 1)
    for act in (wire.retract, wire.unlock):
        assert condition(act(ALICE, item)) == ("wait", "unexpected-request")
    assert wire.retract(BOB, item).get("type") == "result"


def test_unsubscribe_releases_the_locks_to_the_others(wire: Wire) -> None:
    wire.subscribe(ALICE, 1)
    item = wire.publish()
    assert wire.events() == [(ALICE, "item", item)]
    wire.subscribe(BOB, 1)
    reply = wire.unsubscribe(ALICE)
    assert reply.get("type") == "result"
    assert wire.events() == [(BOB, "item", item)]
    again = wire.unsubscribe(ALICE)
    assert condition(again) == ("cancel", "unexpected-request")


@pytest.mark.parametrize("gone", [False, True], ids=["subscribed", "then-unavailable"])
def test_the_unlocks_after_an_unsubscribe_are_answered_until_the_locks_would_end(
    manual_box: boxmq.Box, clock: ManualClock, gone: bool
) -> None:
    # XEP-0254 §4: "unsubscribe and then unlock all of its outstanding queue items". The
    # unsubscribe gave them back; each unlock is answered result, once, until the lock it
    # asks to end would have timed out anyway; after that, the usual unexpected-request.
    # `gone`: a subscriber that unsubscribed, lost its connection (unavailable presence) and
    # came back to send those unlocks: the presence took nothing more, so each unlock is
    # still answered result, not wait/unexpected-request, which tells it to try again (and
    # again) later.
    with wired(manual_box, lock_timeout=10, now=clock.now) as wire:
        wire.subscribe(ALICE, 2)
        first, second = wire.publish(), wire.publish()
        assert {item for _, _, item in wire.events()} == {first, second}
        assert wire.unsubscribe(ALICE).get("type") == "result"
        if gone:
            wire.service.gone(ALICE)
        assert wire.unlock(ALICE, first).get("type") == "result"
        assert condition(wire.unlock(ALICE, first)) == ("wait", "unexpected-request")
        assert wire.events() == []  # no notification: she is not subscribed
        clock.advance(10)
        wire.service.expire(clock.now())
        assert condition(wire.unlock(ALICE, second)) == ("wait", "unexpected-request")
        assert manual_box.queue("jobs").counts().ready == 2


def test_an_unlock_after_subscribing_again_unlocks_the_item_held_again(wire: Wire) -> None:
    # What an unsubscribe gave back is answered as unlocked only while the subscriber is not
    # subscribed again: subscribed again and given the same item, its unlock must unlock it.
    wire.subscribe(ALICE, 1)
    item = wire.publish()
    assert wire.events() == [(ALICE, "item", item)]
    assert wire.unsubscribe(ALICE).get("type") == "result"
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    deadline = time.monotonic() + 5
    while not (holders := [to for to, what, sent in wire.events() if sent == item]):
        assert time.monotonic() < deadline
        wire.service.poll()
        time.sleep(0.05)
    [holder] = holders
    assert wire.unlock(holder, item).get("type") == "result"
    assert (holder, "unlock", item) in wire.events()


def _pubsub_error(reply: ET.Element) -> str | None:
    error = reply.find(f"{{{ns.COMPONENT}}}error")
    assert error is not None
    found = [c.tag.rsplit("}", 1)[-1] for c in error if c.tag.startswith("{" + ns.PUBSUB_ERRORS)]
    return found[0] if found else None


def test_unsubscribing_another_jid_is_forbidden(wire: Wire) -> None:
    wire.subscribe(BOB, 1)
    reply = wire.iq(
        ALICE, f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='bob@localhost'/></pubsub>"
    )
    assert condition(reply) == ("auth", "forbidden")  # XEP-0060 §6.2.3.3


def test_unsubscribing_from_a_node_that_does_not_exist_is_item_not_found(wire: Wire) -> None:
    reply = wire.iq(
        ALICE, f"<pubsub xmlns='{PS}'><unsubscribe node='nope' jid='alice@localhost'/></pubsub>"
    )
    assert condition(reply) == ("cancel", "item-not-found")  # XEP-0060 §6.2.3.4


def test_unsubscribing_with_a_subid_not_its_own_is_invalid_subid_and_unsubscribes_nothing(
    wire: Wire,
) -> None:
    # slixmpp's unsubscribe(..., subid=...) names the subscription; one that is not current
    # is XEP-0060 §6.2.3.5's not-acceptable + invalid-subid (before 2026-11-30 the
    # subscription ended all the same)
    subid = _subid(wire.subscribe(ALICE, 1))
    item = wire.publish()
    assert wire.items_to(ALICE) == [item]

    def unsubscribe(with_subid: str) -> ET.Element:
        return wire.iq(
            ALICE,
            f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='alice@localhost' "
            f"subid='{with_subid}'/></pubsub>",
        )

    reply = unsubscribe("not-" + subid)
    assert condition(reply) == ("modify", "not-acceptable")
    assert _pubsub_error(reply) == "invalid-subid"
    assert wire.retract(ALICE, item).get("type") == "result"  # still subscribed, still holding
    assert unsubscribe(subid).get("type") == "result"  # its own subid unsubscribes


def _subid(reply: ET.Element) -> str:
    subscription = reply.find(f"{{{PS}}}pubsub/{{{PS}}}subscription")
    assert subscription is not None
    return subscription.get("subid", "")


def test_an_item_with_two_payloads_is_invalid_payload(wire: Wire, box: boxmq.Box) -> None:
    reply = wire.iq(
        ALICE,
        f"<pubsub xmlns='{PS}'><publish node='jobs'><item><a xmlns='urn:a'/>"
        "<b xmlns='urn:b'/></item></publish></pubsub>",
    )
    assert condition(reply) == ("modify", "bad-request")  # XEP-0060 §7.1.3.5
    assert _pubsub_error(reply) == "invalid-payload"
    assert box.queue("jobs").counts().ready == 0


@pytest.mark.parametrize("node", ["jobs", "sensors/1"])  # a queue node, a topic node
@pytest.mark.parametrize(
    "beside",
    ["<item><b xmlns='urn:b'>2</b></item>", "<note xmlns='urn:n'/>"],
    ids=["two-items", "another-element"],
)
def test_a_publish_of_more_than_its_one_item_is_bad_request_and_stores_nothing(
    wire: Wire, box: boxmq.Box, node: str, beside: str
) -> None:
    """XEP-0254 §2.2 pushes one item to the node (Listing 4), as XEP-0060 §7.1.1's <publish/>
    carries no <item/> or one. Before 2026-12-01 the first <item/> was stored and the rest
    dropped: a second item was lost while its publisher was answered result, as a retract of
    two items was before 2026-11-30."""
    wire.subscribe(ALICE, 5, node=node)
    reply = wire.iq(
        CAROL,
        f"<pubsub xmlns='{PS}'><publish node='{node}'><item><a xmlns='urn:a'>1</a></item>"
        f"{beside}</publish></pubsub>",
    )
    assert condition(reply) == ("modify", "bad-request")
    assert error_text(reply) == "publish one <item/> per request, and nothing beside it"
    assert wire.events() == []
    assert box.queue("jobs").counts().ready == 0


_PUBLISH = "<publish node='jobs'><item><a xmlns='urn:a'>1</a></item></publish>"


@pytest.mark.parametrize(
    "second",
    [_PUBLISH, "<retract node='jobs'><item id='{held}'/></retract>", "<unsubscribe node='jobs'/>"],
    ids=["publish", "retract", "unsubscribe"],
)
@pytest.mark.parametrize(
    "first",
    ["<retract node='jobs'><item id='{held}'/></retract>", _PUBLISH],
    ids=["after-a-retract", "after-a-publish"],
)
def test_a_pubsub_of_two_requests_is_bad_request_and_does_neither(
    wire: Wire, box: boxmq.Box, first: str, second: str
) -> None:
    """A <pubsub/> carries one request, with the one companion XEP-0060 gives some of them
    (a subscribe's <options/>, §6.3.7; a publish's <publish-options/>, §7.1.5; a create's
    <configure/>, §8.1.3). Before 2026-12-01 the first was done and the rest dropped without
    a word: a retract and a publish in one <pubsub/> retracted, answered result, and lost the
    item published (XEP-0254 §2.2-§2.3's publish and delete, one per request)."""
    wire.subscribe(ALICE, 5)
    held = wire.publish()
    assert wire.items_to(ALICE) == [held]
    inner = (first + second).format(held=held)
    reply = wire.iq(ALICE, f"<pubsub xmlns='{PS}'>{inner}</pubsub>")
    assert condition(reply) == ("modify", "bad-request")
    assert "one request per <pubsub/>" in error_text(reply)
    wire.service.flush()
    assert wire.events() == []  # nothing published, retracted, or unsubscribed
    counts = box.queue("jobs").counts()
    assert (counts.ready, counts.locked, counts.done) == (0, 1, 0)
    assert wire.retract(ALICE, held).get("type") == "result"  # still hers, still subscribed


@pytest.mark.parametrize("node", ["jobs", "sensors/1"])  # a queue node, a topic node
def test_a_publish_without_an_item_is_item_required(wire: Wire, box: boxmq.Box, node: str) -> None:
    # XEP-0060 §7.1.3.6: a node whose items are kept (every node here: a topic's are held by
    # its subscribers until retracted) bounces a publish with no <item/> item-required; it
    # was answered payload-required, the condition of an <item/> that carries no payload
    reply = wire.iq(ALICE, f"<pubsub xmlns='{PS}'><publish node='{node}'/></pubsub>")
    assert condition(reply) == ("modify", "bad-request")
    assert _pubsub_error(reply) == "item-required"
    assert box.queue("jobs").counts().ready == 0


def test_an_item_without_a_payload_is_payload_required(wire: Wire, box: boxmq.Box) -> None:
    reply = wire.iq(ALICE, f"<pubsub xmlns='{PS}'><publish node='jobs'><item/></publish></pubsub>")
    assert condition(reply) == ("modify", "bad-request")  # XEP-0060 §7.1.3.6
    assert _pubsub_error(reply) == "payload-required"
    assert box.queue("jobs").counts().ready == 0


def test_a_lock_that_times_out_notifies_and_goes_to_the_next(
    timed_wire: Wire, clock: ManualClock
) -> None:
    wire = timed_wire
    wire.subscribe(ALICE, 1)
    item = wire.publish()
    assert wire.events() == [(ALICE, "item", item)]
    wire.subscribe(BOB, 1)
    clock.advance(9)
    wire.service.expire(clock.now())
    assert wire.events() == []
    assert wire.service.next_deadline() == pytest.approx(clock.now() + 1, abs=0.001)
    clock.advance(1)
    wire.service.expire(clock.now())
    events = wire.events()
    assert (ALICE, "unlock", item) in events
    assert (BOB, "item", item) in events
    # alice answers late: her lock is gone, for an unlock as for a retract (XEP-0254 §2.4,
    # Listing 15: the unlock path has a way of its own, for what an unsubscribe gave back)
    assert condition(wire.unlock(ALICE, item)) == ("wait", "unexpected-request")
    assert condition(wire.retract(ALICE, item)) == ("wait", "unexpected-request")
    assert (BOB, "unlock", item) not in wire.events()  # bob's lock untouched by either


def test_a_topic_node_shares_among_xmpp_and_copies_to_other_subscribers(
    wire: Wire, box: boxmq.Box
) -> None:
    # "sensors/1" is no queue: it is the topic of that name (docs/xmpp.md, node mapping)
    embedded = box.subscribe("sensors/+", "dashboard")
    wire.subscribe(ALICE, 5, node="sensors/1")
    wire.subscribe(BOB, 5, node="sensors/1")
    items = {wire.publish(f"<r xmlns='urn:example'>{n}</r>", node="sensors/1") for n in range(4)}
    events = wire.events()
    assert sorted(item for _, what, item in events if what == "item") == sorted(items)
    assert len(events) == 4  # each to one XMPP subscriber: they compete, as on a queue
    for _ in range(4):  # the other subscription got its own copies
        copy = embedded.receive(timeout=5)
        assert copy is not None
        copy.ack()
    to, _, item = events[0]
    other = BOB if to == ALICE else ALICE
    assert condition(wire.retract(other, item, node="sensors/1")) == ("cancel", "conflict")
    assert condition(wire.retract(to, "nope", node="sensors/1")) == ("cancel", "item-not-found")
    assert wire.retract(to, item, node="sensors/1").get("type") == "result"
    embedded.close()


def test_a_body_put_by_the_embedded_api_arrives_wrapped(wire: Wire, box: boxmq.Box) -> None:
    wire.subscribe(ALICE, 3)
    box.queue("jobs").put("plain <text> & more")
    box.queue("jobs").put(b"\xff\x00")
    wire.service.poll()
    payloads = [s.find(f".//{{{EV}}}item") for s in wire.take()]
    texts = sorted((p[0].tag, p[0].text) for p in payloads if p is not None)
    assert texts == [("{urn:boxmq:0}data", "/wA="), ("{urn:boxmq:0}text", "plain <text> & more")]


@pytest.mark.parametrize(
    "body",
    [
        b"<?xml version='1.0'?><a/>",  # an XML declaration
        b"<!DOCTYPE a [<!ENTITY e 'x'>]><a>&e;</a>",  # a DTD and an entity of its own
        b"<a><!-- note --></a>",
        b"<a><?pi data?></a>",
        b"<x:a/>",  # an unbound prefix
        b"<a/><b/>",
        b"<a>",
    ],
)
def test_a_body_that_a_stream_may_not_carry_arrives_as_text(
    wire: Wire, box: boxmq.Box, body: bytes
) -> None:
    # RFC 6120 §11.1: passed through, any of these would make the server close the stream.
    wire.subscribe(ALICE, 1)
    box.queue("jobs").put(body)
    wire.service.poll()
    payloads = [s.find(f".//{{{EV}}}item") for s in wire.take()]
    assert [(p[0].tag, p[0].text) for p in payloads if p is not None] == [
        ("{urn:boxmq:0}text", body.decode())
    ]


def test_an_element_with_namespaces_passes_through_as_it_is(wire: Wire, box: boxmq.Box) -> None:
    wire.subscribe(ALICE, 1)
    box.queue("jobs").put(b"<e xmlns='urn:x' xmlns:y='urn:y'><y:f>1 &amp; 2</y:f></e>")
    wire.service.poll()
    payloads = [s.find(f".//{{{EV}}}item") for s in wire.take()]
    assert [ET.tostring(p[0]) for p in payloads if p is not None] == [
        b'<ns0:e xmlns:ns0="urn:x" xmlns:ns1="urn:y"><ns1:f>1 &amp; 2</ns1:f></ns0:e>'
    ]


def test_an_item_id_from_a_dropped_file_is_escaped(wire: Wire, box: boxmq.Box) -> None:
    # A script names its file as it likes: the id decoded from `4.a%27b%3Cc%26d.T` holds
    # ' < &, which written as is would make the event malformed and close the stream.
    wire.subscribe(ALICE, 1)
    target = Path(box.root) / "jobs" / "target"
    (target / "4.a%27b%3Cc%26d.T").write_bytes(b"<job xmlns='urn:example'/>")
    wire.service.poll()  # the watcher's news, or the rescan, brings it
    assert wire.events() == [(ALICE, "item", "a'b<c&d")]
    reply = wire.retract(ALICE, "a&apos;b&lt;c&amp;d")  # wire.retract writes it as is
    assert reply.get("type") == "result"
    assert wire.events() == [(ALICE, "retract", "a'b<c&d")]


def test_an_item_id_that_xml_cannot_carry_goes_to_error(
    wire: Wire, box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    # `4.a%01b.T` decodes to the id "a\x01b": no escape writes it in XML, so the event
    # broke the stream (Prosody: not-well-formed) at each try, and no client could have
    # named it in a retract anyway.
    wire.subscribe(ALICE, 2)
    target = Path(box.root) / "jobs" / "target"
    (target / "4.a%01b.T").write_bytes(b"<job xmlns='urn:example'/>")
    (target / "4.ok.T").write_bytes(b"<job xmlns='urn:example'/>")
    wire.service.poll()
    with caplog.at_level(logging.WARNING, logger="boxmq.xmpp"):
        assert wire.events() == [(ALICE, "item", "ok")]
    assert [p.envelope.message_id for p in box.queue("jobs").peek(state="error")] == ["a\x01b"]
    assert any("moved to error/" in r.getMessage() for r in caplog.records)


def test_an_iq_of_two_requests_is_bad_request_and_does_neither(wire: Wire, box: boxmq.Box) -> None:
    """RFC 6120 §8.2.3: an iq of type get or set "MUST contain exactly one child element".
    Before 2026-12-01 its first child was served and the others dropped: two <pubsub/>
    publishes in one iq stored the first item and lost the second, answered result."""
    publish = f"<pubsub xmlns='{PS}'><publish node='jobs'><item>{{}}</item></publish></pubsub>"
    reply = wire.iq(
        CAROL,
        publish.format("<a xmlns='urn:a'>1</a>") + publish.format("<a xmlns='urn:a'>2</a>"),
    )
    assert condition(reply) == ("modify", "bad-request")
    assert error_text(reply) == "an iq get/set carries one child element, this one 2"
    wire.service.flush()
    assert box.queue("jobs").counts().ready == 0


@pytest.mark.parametrize("given", ["", " id=''"], ids=["no-id", "empty-id"])
def test_an_iq_without_an_id_is_bad_request_and_stores_nothing(
    wire: Wire, box: boxmq.Box, given: str
) -> None:
    """RFC 6120 §8.1.3: an iq's id is REQUIRED, its answer mirrors it. Before 2026-12-01 an
    iq without one was served, its item stored, and answered with id='', which no
    requester can match to its request (and which the schema's NMTOKEN does not allow)."""
    item = "<item><a xmlns='urn:a'/></item>"
    publish = f"<pubsub xmlns='{PS}'><publish node='jobs'>{item}</publish></pubsub>"
    wire.service.iq(
        in_stream(f"<iq type='set'{given} from='{CAROL}' to='{SERVICE}'>{publish}</iq>")
    )
    wire.service.flush()
    [reply] = wire.take()
    assert condition(reply) == ("modify", "bad-request")
    assert "id" not in reply.attrib  # none to mirror: an empty one is no id either
    assert "id" in error_text(reply)
    assert box.queue("jobs").counts().ready == 0


def test_a_request_in_an_unknown_namespace_is_service_unavailable(wire: Wire) -> None:
    reply = wire.iq(ALICE, "<query xmlns='urn:example:nothing'/>", type="get")
    assert condition(reply) == ("cancel", "service-unavailable")  # RFC 6120 §8.4
    assert ET.tostring(reply)  # and it is still one well-formed reply


def _unsupported(reply: ET.Element) -> str | None:
    found = reply.find(f"{{{ns.COMPONENT}}}error/{{{ns.PUBSUB_ERRORS}}}unsupported")
    return None if found is None else found.get("feature")


@pytest.mark.parametrize(
    ("inner", "type", "feature"),
    [
        (
            f"<pubsub xmlns='{PS}'><options node='jobs' jid='alice@localhost'/></pubsub>",
            "get",
            "subscription-options",
        ),
        (f"<pubsub xmlns='{PS}'><items node='jobs'/></pubsub>", "get", "retrieve-items"),
        # slixmpp's get_subscription_options(service, node): XEP-0060 §6.4, the default
        # subscription options (before 2026-11-30 named retrieve-default, §8.3's, the owner's)
        (f"<pubsub xmlns='{PS}'><default node='jobs'/></pubsub>", "get", "retrieve-default-sub"),
        (f"<pubsub xmlns='{PS}'><default/></pubsub>", "get", "retrieve-default-sub"),
        (f"<pubsub xmlns='{ns.PUBSUB_OWNER}'><default/></pubsub>", "get", "retrieve-default"),
        (f"<pubsub xmlns='{ns.PUBSUB_OWNER}'><purge node='jobs'/></pubsub>", "set", "purge-nodes"),
        (
            f"<pubsub xmlns='{ns.PUBSUB_OWNER}'><subscriptions node='jobs'/></pubsub>",
            "get",
            "manage-subscriptions",
        ),
    ],
)
def test_feature_not_implemented_names_the_feature(
    wire: Wire, inner: str, type: str, feature: str
) -> None:
    reply = wire.iq(ALICE, inner, type=type)
    assert condition(reply) == ("cancel", "feature-not-implemented")
    assert _unsupported(reply) == feature  # XEP-0060: <unsupported feature=.../>


@pytest.mark.parametrize(
    "inner",
    [
        f"<pubsub xmlns='{PS}'><publish node='jobs'><item><a xmlns='urn:a'/></item></publish>"
        "</pubsub>",
        f"<pubsub xmlns='{PS}'><create node='made'/></pubsub>",
        f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='alice@localhost'/></pubsub>",
        f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='alice@localhost'/></pubsub>",
        f"<pubsub xmlns='{ns.PUBSUB_OWNER}'><delete node='jobs'/></pubsub>",
    ],
)
def test_a_served_request_sent_as_a_get_is_bad_request_not_an_unserved_feature(
    wire: Wire, inner: str
) -> None:
    # XEP-0060 sends these as type='set'. As a get they were answered feature-not-implemented
    # naming a feature disco advertises (before 2026-11-30): a client would take the service
    # for one without publish or subscribe. The request is malformed, and nothing is done.
    reply = wire.iq(ALICE, inner, type="get")
    assert condition(reply) == ("modify", "bad-request")
    assert _unsupported(reply) is None
    assert wire.create("jobs").get("type") == "error"  # jobs not deleted (conflict: it exists)
    assert wire.create("made").get("type") == "result"  # made not made


def test_a_subscriber_retrieves_its_subscriptions_all_or_of_one_node(
    wire: Wire, box: boxmq.Box
) -> None:
    # slixmpp's get_subscriptions(service[, node]), XEP-0060 §5.6: before 2026-11-30 it was
    # feature-not-implemented, and a client could not learn whether it was still subscribed
    box.queue("mail")
    jobs_subid = _subid(wire.subscribe(ALICE, 1))
    mail_subid = _subid(wire.subscribe(ALICE, 2, node="mail"))
    wire.subscribe(BOB, 1)  # another's: not listed

    def subscriptions(node: str = "") -> tuple[str | None, list[dict[str, str]]]:
        attribute = f" node='{node}'" if node else ""
        reply = wire.iq(
            ALICE, f"<pubsub xmlns='{PS}'><subscriptions{attribute}/></pubsub>", type="get"
        )
        assert reply.get("type") == "result", ET.tostring(reply)
        listed = reply.find(f"{{{PS}}}pubsub/{{{PS}}}subscriptions")
        assert listed is not None
        return listed.get("node"), [dict(s.attrib) for s in listed]

    alice = {"jid": "alice@localhost", "subscription": "subscribed"}
    assert subscriptions() == (
        None,
        [
            {**alice, "node": "jobs", "subid": jobs_subid},
            {**alice, "node": "mail", "subid": mail_subid},
        ],
    )
    assert subscriptions("mail") == ("mail", [{**alice, "node": "mail", "subid": mail_subid}])
    wire.unsubscribe(ALICE)
    assert subscriptions("jobs") == ("jobs", [])
    disco = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}'/>", type="get")
    features = {f.get("var") for f in disco.iter(ns.tag(ns.DISCO_INFO, "feature"))}
    assert ns.PUBSUB + "#retrieve-subscriptions" in features


def test_the_subscription_names_the_jid_its_subscribe_named(wire: Wire, box: boxmq.Box) -> None:
    # XEP-0060 §6.1.2 and XEP-0254's Listing 3: the <subscription/> of a subscribe's result
    # carries the JID subscribed, as the request named it. One made with the sender's own full
    # JID was answered, listed and ended with its bare JID, which another resource shares.
    box.queue("mail")
    options = (
        f"<options><x xmlns='{ns.DATA}' type='submit'><field var='pubsub#queue_requests'>"
        "<value>1</value></field></x></options>"
    )

    def subscribe(jid: str, node: str) -> ET.Element:
        return wire.iq(
            ALICE, f"<pubsub xmlns='{PS}'><subscribe node='{node}' jid='{jid}'/>{options}</pubsub>"
        )

    def jids(reply: ET.Element) -> list[str | None]:
        assert reply.get("type") == "result", ET.tostring(reply)
        return [s.get("jid") for s in reply.iter(f"{{{PS}}}subscription")]

    assert jids(subscribe(ALICE, "jobs")) == [ALICE]
    assert jids(subscribe("alice@localhost", "mail")) == ["alice@localhost"]
    listed = wire.iq(ALICE, f"<pubsub xmlns='{PS}'><subscriptions/></pubsub>", type="get")
    assert jids(listed) == [ALICE, "alice@localhost"]  # jobs, then mail
    assert jids(subscribe(ALICE, "mail")) == [ALICE]  # subscribed again: as it names it now
    wire.take()
    wire.service.close()  # each told its subscription ended (XEP-0060 §8.8.4), in those words
    ended = [s for stanza in wire.take() for s in stanza.iter(f"{{{ns.PUBSUB_EVENT}}}subscription")]
    assert {(s.get("node"), s.get("jid"), s.get("subscription")) for s in ended} == {
        ("jobs", ALICE, "none"),
        ("mail", ALICE, "none"),
    }


def _publish_with_options(wire: Wire, fields: str) -> ET.Element:
    return wire.iq(
        CAROL,
        f"<pubsub xmlns='{PS}'><publish node='jobs'><item><job xmlns='urn:e'>1</job></item>"
        f"</publish><publish-options><x xmlns='{ns.DATA}' type='submit'>"
        f"<field var='FORM_TYPE' type='hidden'><value>{ns.PUBSUB}#publish-options</value></field>"
        f"{fields}</x></publish-options></pubsub>",
    )


def test_a_publish_with_options_is_refused_publish_options_and_stores_nothing(
    wire: Wire, box: boxmq.Box
) -> None:
    # slixmpp's publish(..., options=form): XEP-0060 §7.1.5 makes them preconditions (an
    # access model, say) the node must meet. Before 2026-11-30 they were dropped without a
    # word and the item published where its publisher had forbidden it to go.
    reply = _publish_with_options(
        wire, "<field var='pubsub#access_model'><value>whitelist</value></field>"
    )
    assert condition(reply) == ("cancel", "feature-not-implemented")
    assert _unsupported(reply) == "publish-options"
    assert box.queue("jobs").peek() == []
    assert _publish_with_options(wire, "").get("type") == "result"  # a form that asks nothing
    assert len(box.queue("jobs").peek()) == 1


def _publish_with_form(wire: Wire, form: str) -> ET.Element:
    return wire.iq(
        CAROL,
        f"<pubsub xmlns='{PS}'><publish node='jobs'><item><job xmlns='urn:e'>1</job></item>"
        f"</publish><publish-options>{form}</publish-options></pubsub>",
    )


def test_publish_options_are_read_as_every_other_form_is(wire: Wire, box: boxmq.Box) -> None:
    # A third reader walked every <field/> below <publish-options/>: a cancelled form, which
    # submits nothing (XEP-0004 §3.1), and a fixed label were refused as options asked, and a
    # node_config form carrying only its FORM_TYPE was taken as publish options asking nothing.
    access = "<field var='pubsub#access_model'><value>whitelist</value></field>"
    cancelled = f"<x xmlns='{ns.DATA}' type='cancel'>{access}</x>"
    assert _publish_with_form(wire, cancelled).get("type") == "result"
    label = f"<x xmlns='{ns.DATA}' type='submit'><field type='fixed'><value>a</value></field></x>"
    assert _publish_with_form(wire, label).get("type") == "result"
    assert len(box.queue("jobs").peek()) == 2
    other_kind = (
        f"<x xmlns='{ns.DATA}' type='submit'><field var='FORM_TYPE' type='hidden'>"
        f"<value>{ns.NODE_CONFIG}</value></field></x>"
    )
    reply = _publish_with_form(wire, other_kind)
    assert condition(reply) == ("cancel", "feature-not-implemented")
    assert "pubsub#publish-options" in ET.tostring(reply, encoding="unicode")
    twice = _publish_with_options(wire, access + access)
    assert condition(twice) == ("cancel", "feature-not-implemented")
    assert len(box.queue("jobs").peek()) == 2


def test_subscription_options_are_not_advertised(wire: Wire) -> None:
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}'/>", type="get")
    features = {f.get("var") for f in reply.iter(ns.tag(ns.DISCO_INFO, "feature"))}
    assert ns.PUBSUB + "#subscription-options" not in features


def test_subscribing_again_with_other_options_takes_them(wire: Wire) -> None:
    wire.subscribe(ALICE, 1)
    first, second, third = wire.publish(), wire.publish(), wire.publish()
    assert [e[2] for e in wire.events()] == [first]  # one slot
    reply = wire.subscribe(ALICE, 3)
    values = form_values(reply)
    assert values["pubsub#queue_requests"] == "3"  # the options in force now
    assert [e[2] for e in wire.events()] == [second, third]  # and it holds up to three


def test_subscribing_again_without_options_answers_the_subscription_as_it_is(
    wire: Wire, box: boxmq.Box
) -> None:
    # XEP-0254 §2.1's configuration-required answers a subscribe that would make a
    # subscription without its queue_requests; one that exists has it. A client that
    # subscribes again to make sure it is subscribed (docs/xmpp.md) is answered the
    # subscription and the options in force, and keeps the items it holds.
    wire.subscribe(ALICE, 2)
    held = sorted([wire.publish(), wire.publish()])
    wire.publish()
    assert sorted(wire.items_to(ALICE)) == held
    reply = wire.subscribe(ALICE, None)
    assert reply.get("type") == "result", ET.tostring(reply)
    subscription = reply.find(f"{{{PS}}}pubsub/{{{PS}}}subscription")
    assert subscription is not None
    assert (subscription.get("node"), subscription.get("subscription")) == ("jobs", "subscribed")
    values = [v.text for v in reply.iter(ns.tag(ns.DATA, "value"))]
    assert values == [ns.SUBSCRIBE_OPTIONS, "2", "unacknowledged"]
    assert wire.events() == []  # nothing unlocked, nothing more sent
    assert box.queue("jobs").counts().locked == 2
    assert wire.retract(ALICE, held[0]).get("type") == "result"  # still its lock


def test_subscribing_again_with_one_option_keeps_the_other(wire: Wire) -> None:
    # A subscriber that changes its QoS level alone was refused configuration-required,
    # XEP-0254 §2.1's answer to a first subscribe without options, though its
    # queue_requests was in force already; and one that gives queue_requests alone keeps
    # its level.
    wire.subscribe(ALICE, 3)

    def options(*fields: tuple[str, str]) -> dict[str | None, str | None]:
        reply = wire.subscribe_with_options(ALICE, *fields)
        assert reply.get("type") == "result", ET.tostring(reply)
        return form_values(reply)

    in_force = options(("boxmq#qos", "acknowledged"))
    assert in_force["pubsub#queue_requests"] == "3"
    assert in_force["boxmq#qos"] == "acknowledged"
    in_force = options(("pubsub#queue_requests", "2"))
    assert in_force["pubsub#queue_requests"] == "2"
    assert in_force["boxmq#qos"] == "acknowledged"
    # a first subscribe still needs it
    reply = wire.subscribe_with_options(BOB, ("boxmq#qos", "acknowledged"))
    assert condition(reply) == ("modify", "not-acceptable")


def test_a_queue_deleted_behind_the_doors_back_ends_its_subscriptions(
    wire: Wire, box: boxmq.Box
) -> None:
    wire.subscribe(ALICE, 1)
    assert box.delete_queue("jobs")
    assert wire.service.poll() == 0  # no error: the subscription ends, and alice is told
    deleted = f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}delete"
    assert [s.get("to") for s in wire.take() if s.find(deleted) is not None] == [ALICE]
    reply = wire.unsubscribe(ALICE)
    assert condition(reply) == ("cancel", "item-not-found")  # the topic `jobs` now


def test_a_publish_while_target_is_moved_aside_is_refused_and_the_subscribers_stay(
    wire: Wire, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # operations.md's "Disk usage" recreates a queue's target/ (moved aside, a new one made):
    # a publish in between took the queue for deleted elsewhere, told its subscriber so,
    # unsubscribed it and published the item to the topic `jobs`, which nobody kept.
    wire.subscribe(ALICE, 1)
    folder = root / "jobs"
    (folder / "target").rename(folder / "target.old")
    before = sorted(root.rglob("*"))
    with caplog.at_level(logging.ERROR, logger="boxmq.xmpp"):
        reply = wire.iq(
            CAROL,
            f"<pubsub xmlns='{PS}'><publish node='jobs'><item><x xmlns='urn:t'/></item>"
            "</publish></pubsub>",
        )
    assert condition(reply) == ("wait", "internal-server-error")  # refused: try again later
    assert "has no target/" in error_text(reply)
    assert logged(caplog, "not stored")  # an operator hears of it, as of any store failure
    assert wire.take() == []  # no <delete/> told to alice
    assert sorted(root.rglob("*")) == before  # nothing of it kept, no target/ made
    (folder / "target").mkdir()
    item = wire.publish()  # target/ is back: stored, and alice, still subscribed, gets it
    assert wire.items_to(ALICE) == [item]


def test_a_subscriber_that_lets_three_locks_time_out_in_a_row_is_unsubscribed(
    timed_wire: Wire, manual_box: boxmq.Box, clock: ManualClock
) -> None:
    wire = timed_wire
    wire.subscribe(ALICE, 1)
    for _ in range(4):
        wire.publish()

    def time_out() -> None:
        clock.advance(10)
        wire.service.expire(clock.now())

    assert len(wire.items_to(ALICE)) == 1
    time_out()  # one silent timeout...
    [second] = wire.items_to(ALICE)
    assert wire.retract(ALICE, second).get("type") == "result"  # ...then an answer: count reset
    assert len(wire.items_to(ALICE)) == 1
    time_out()
    assert len(wire.items_to(ALICE)) == 1  # two silent timeouts in a row: still subscribed
    time_out()
    assert len(wire.items_to(ALICE)) == 1
    time_out()  # the third in a row: treated as gone...
    # ...and told so (XEP-0060 §8.8.4), after the unlock notification: a live client waited
    # for items for ever
    path = f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}subscription"
    [(to, state)] = [(s.get("to"), s.find(path)) for s in wire.take() if s.find(path) is not None]
    assert state is not None
    assert (to, state.get("node"), state.get("subscription")) == (ALICE, "jobs", "none")
    assert wire.items_to(ALICE) == []
    assert manual_box.queue("jobs").counts().ready == 3  # everything back, one done


def test_the_locks_of_one_batch_that_time_out_together_count_as_one_silence(
    timed_wire: Wire, manual_box: boxmq.Box, clock: ManualClock
) -> None:
    # XEP-0254 §4 asks only for the unlock notifications and the next subscriber. A worker
    # that subscribed with queue_requests 5 (as §2.1's Listing 2 does) and was slow on its
    # first five items was unsubscribed when they timed out together, five timeouts "in a
    # row", and never told: it waited for items that never came.
    wire = timed_wire
    wire.subscribe(ALICE, 5)
    for _ in range(5):
        wire.publish()

    def time_out() -> None:
        clock.advance(10)
        wire.service.expire(clock.now())
        clock.advance(1)  # the handoff: what it let go waits a second for another subscriber

    assert len(wire.items_to(ALICE)) == 5
    time_out()
    assert len(wire.items_to(ALICE)) == 5  # one silence: still subscribed, the five again
    time_out()
    assert len(wire.items_to(ALICE)) == 5  # two
    time_out()  # the third round in a row: treated as gone
    assert wire.items_to(ALICE) == []
    assert manual_box.queue("jobs").counts().ready == 5


def test_an_item_over_the_servers_stanza_limit_goes_to_error_not_to_the_stream(
    wire: Wire, box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    # A 450 kB body put by the API (or MQTT) is 600 kB of base64 in its event, over
    # Prosody's 512 KiB for a component's stanzas: Prosody ended the component's stream
    # (not-well-formed) at each try, every lock timeout, taking every other subscriber's
    # notifications in flight with it, until the item reached its maximum of deliveries.
    jobs = box.queue("jobs")
    big = jobs.put(bytes(range(256)) * 1760)
    small = jobs.put(b"small")
    wire.subscribe(ALICE, 2)
    with caplog.at_level(logging.WARNING, logger="boxmq.xmpp"):
        assert wire.events() == [(ALICE, "item", small)]
    assert jobs.counts().dead == 1
    assert [p.envelope.message_id for p in jobs.peek(state="error")] == [big]
    [warning] = logged(caplog, "stanza")
    assert big in warning
    assert "moved to error/" in warning


def test_after_a_request_only_the_nodes_it_touched_are_polled(wire: Wire, box: boxmq.Box) -> None:
    wire.create("mail")
    wire.subscribe(ALICE, 5)
    wire.subscribe(BOB, 5, node="mail")
    wire.service.poll_touched()
    box.queue("mail").put(b"from elsewhere")  # not through the door: the timer's business
    wire.publish()
    assert wire.service.poll_touched() == 1  # jobs only
    assert wire.service.poll_touched() == 0  # and only once
    assert wire.service.poll() == 1  # the timer's full round finds mail's


def test_the_publishes_of_one_batch_are_answered_once_stored_together(
    wire: Wire, box: boxmq.Box
) -> None:
    for n in (1, 2):
        wire.service.iq(
            in_stream(
                f"<iq type='set' id='p{n}' from='{ALICE}' to='queue.localhost'>"
                f"<pubsub xmlns='{PS}'><publish node='jobs'><item><x xmlns='urn:e'>{n}</x>"
                "</item></publish></pubsub></iq>"
            )
        )
    assert wire.sent == []  # no answer before the batch is stored
    assert box.queue("jobs").counts().ready == 0
    wire.service.flush()
    replies = wire.take()
    assert [r.get("id") for r in replies] == ["p1", "p2"]
    assert all(r.get("type") == "result" for r in replies)
    assert box.queue("jobs").counts().ready == 2


def test_subscribing_again_to_a_topic_node_takes_the_new_queue_requests(wire: Wire) -> None:
    wire.subscribe(ALICE, 1, node="t/1")
    items = [wire.publish(node="t/1") for _ in range(2)]
    assert [e[2] for e in wire.events()] == items[:1]
    wire.subscribe(ALICE, 2, node="t/1")
    assert [e[2] for e in wire.events()] == items[1:]


_WORKER = "workerbee237@shakespeare.lit/foo"
_LISTED_NODE = "a290fjssl29j19kjb"
_LISTED_ITEM = "ae890ac52d0df67ed7cfd51b644e901"


def _events_to(wire: Wire, jid: str) -> list[ET.Element]:
    """The <items/> of each pubsub#event sent to `jid` since the last look."""
    wire.service.poll()
    return [
        items
        for stanza in wire.take()
        if stanza.get("to") == jid
        for items in stanza.iterfind(f"{{{EV}}}event/{{{EV}}}items")
    ]


def test_the_listings_of_xep_0254_sent_as_they_are_written(wire: Wire) -> None:
    """XEP-0254 §2.1-§2.4, Listings 2, 4, 6 and 10 sent as written (the one node their typos
    spell three ways, ids and all), answered as Listings 3, 5, 7 and 11 show. Listing 2's
    <options/> names its jid and node, its field has no type. Listing 4's publisher proposes
    an item id the service does not use (docs/xmpp.md: the item id is the boxmq message id),
    so the notification of Listing 5 and the requests after it carry the id the result
    named; the publisher's is no item here."""
    wire.create(_LISTED_NODE)
    subscribe = (
        f"<pubsub xmlns='{PS}'><subscribe jid='workerbee237@shakespeare.lit'"
        f" node='{_LISTED_NODE}'/><options jid='workerbee237@shakespeare.lit'"
        f" node='{_LISTED_NODE}'><x xmlns='jabber:x:data' type='submit'>"
        "<field var='FORM_TYPE' type='hidden'>"
        "<value>http://jabber.org/protocol/pubsub#subscribe_options</value></field>"
        "<field var='pubsub#queue_requests'><value>5</value></field></x></options></pubsub>"
    )
    listing_3 = wire.iq(_WORKER, subscribe)  # Listing 2
    subscription = listing_3.find(f"{{{PS}}}pubsub/{{{PS}}}subscription")
    assert subscription is not None
    assert (subscription.get("node"), subscription.get("subscription")) == (
        _LISTED_NODE,
        "subscribed",
    )
    assert form_values(listing_3)["pubsub#queue_requests"] == "5"

    def publish() -> str:  # Listing 4, from the publisher's JID
        reply = wire.iq(
            "engine.shakespeare.lit",
            f"<pubsub xmlns='{PS}'><publish node='{_LISTED_NODE}'><item id='{_LISTED_ITEM}'>"
            "<example xmlns='urn:xmpp:example'>payload</example></item></publish></pubsub>",
        )
        assert reply.get("type") == "result"
        published = reply.find(f"{{{PS}}}pubsub/{{{PS}}}publish/{{{PS}}}item")
        assert published is not None
        return published.get("id", "")

    item, second = publish(), publish()  # the same proposed id twice: two items
    assert _LISTED_ITEM not in (item, second)
    assert "" not in (item, second)
    assert item != second
    listing_5 = _events_to(wire, _WORKER)
    assert [items.get("node") for items in listing_5] == [_LISTED_NODE] * 2
    assert [(e.get("id"), e[0].tag, e[0].text) for items in listing_5 for e in items] == [
        (item, "{urn:xmpp:example}example", "payload"),
        (second, "{urn:xmpp:example}example", "payload"),
    ]

    def request(verb: str, namespace: str, item_id: str) -> ET.Element:  # Listings 6, 10
        return wire.iq(
            _WORKER,
            f"<pubsub xmlns='{PS}'><{verb}{namespace} node='{_LISTED_NODE}'>"
            f"<item id='{item_id}'/></{verb}></pubsub>",
            type="get",
        )

    assert request("retract", "", item).get("type") == "result"  # Listing 6
    [listing_7] = _events_to(wire, _WORKER)
    assert listing_7.get("node") == _LISTED_NODE
    assert [(e.tag, e.get("id")) for e in listing_7] == [(f"{{{EV}}}retract", item)]
    queueing = f" xmlns='{ns.QUEUEING}'"
    # the id the publisher proposed names no item: Listing 12's item-not-found
    assert condition(request("unlock", queueing, _LISTED_ITEM)) == ("cancel", "item-not-found")
    assert request("unlock", queueing, second).get("type") == "result"  # Listing 10
    [listing_11] = _events_to(wire, _WORKER)
    assert listing_11.get("node") == _LISTED_NODE
    assert [(e.tag, e.get("id")) for e in listing_11] == [(f"{{{ns.QUEUEING}}}unlock", second)]


def test_a_publish_to_a_queue_not_known_here_while_its_target_is_moved_aside_is_refused(
    box: boxmq.Box, root: Path
) -> None:
    # A queue this process has not met yet (made by the CLI, or by another component) was
    # looked up by its target/: during operations.md's `mv target target.old && mkdir target`
    # a publish to it went to the topic of that name, lost to the queue's consumers.
    box.queue("orders")
    folder = root / "orders"
    (folder / "target").rename(folder / "target.old")
    with wired(box, node=None) as wire:
        reply = wire.iq(
            CAROL,
            f"<pubsub xmlns='{PS}'><publish node='orders'><item><x xmlns='urn:t'/></item>"
            "</publish></pubsub>",
        )
        assert condition(reply) == ("wait", "internal-server-error")  # try again later
        assert "has no target/" in error_text(reply)
        assert not (folder / "target").exists()  # none made: the operator's mkdir is to come
        (folder / "target").mkdir()
        item = wire.publish(node="orders")  # target/ is back: stored in the queue
    assert [p.envelope.message_id for p in box.queue("orders").peek()] == [item]


def test_a_subscribe_or_disco_items_while_target_is_moved_aside_says_nothing_was_changed(
    box: boxmq.Box, root: Path
) -> None:
    # The refusal of a request that puts nothing (a subscribe, a disco#items) to a queue whose
    # target/ is moved aside said "nothing was put; put again", the words of a put.
    box.queue("orders")
    folder = root / "orders"
    (folder / "target").rename(folder / "target.old")
    with wired(box, node=None) as wire:
        disco = f"<query xmlns='{ns.DISCO_ITEMS}' node='orders'/>"
        for reply in (wire.subscribe(BOB, 1, node="orders"), wire.iq(BOB, disco, type="get")):
            assert condition(reply) == ("wait", "internal-server-error")  # try again later
            said = error_text(reply)
            assert "queue 'orders' has no target/" in said, said
            assert "nothing was changed; try again once it is back" in said, said
            assert "nothing was put" not in said, said
        assert not (folder / "target").exists()  # none made: the operator's mkdir is to come
        (folder / "target").mkdir()
        assert wire.subscribe(BOB, 1, node="orders").get("type") == "result"


def test_a_queue_whose_target_is_a_file_is_refused_as_broken_not_as_moved_aside(
    box: boxmq.Box, root: Path
) -> None:
    # A queue whose target/ is a file (a script's `>`) was told it "has no target/" and to
    # try again once it is back: waiting never mends it. The API and the CLI call it broken.
    box.queue("orders")
    folder = root / "orders"
    (folder / "target").rmdir()
    (folder / "target").write_bytes(b"")
    with wired(box, node=None) as wire:
        publish = wire.iq(
            CAROL,
            f"<pubsub xmlns='{PS}'><publish node='orders'><item><x xmlns='urn:t'/></item>"
            "</publish></pubsub>",
        )
        disco = f"<query xmlns='{ns.DISCO_ITEMS}' node='orders'/>"
        replies = (publish, wire.subscribe(BOB, 1, node="orders"), wire.iq(BOB, disco, type="get"))
        for reply in replies:
            assert condition(reply) == ("cancel", "internal-server-error")  # waiting won't mend it
            said = error_text(reply)
            assert "queue 'orders' is broken" in said, said
            assert "has no target/" not in said, said
    assert (folder / "target").is_file()  # left as it was: the operator mends it


def test_an_assured_while_target_is_moved_aside_is_refused_and_no_target_is_made(
    box: boxmq.Box, root: Path
) -> None:
    # The exactly-once intake made a queue's missing folders, target/ among them: during
    # operations.md's `mv target target.old && mkdir target` an <assured/> made a new target/
    # and the operator's mkdir failed. Refused as a publish is then, nothing stored.
    box.queue("orders")
    folder = root / "orders"
    (folder / "target").rename(folder / "target.old")
    message = "<message xmlns='jabber:client'><body>1</body></message>"
    assured = f"<assured xmlns='{ns.QOS}' msgId='m1'>{message}</assured>"
    deliver = f"<deliver xmlns='{ns.QOS}' msgId='m1'/>"
    with wired(box, node=None) as wire:
        reply = wire.iq(CAROL, assured, to=f"orders@{SERVICE}")
        assert condition(reply) == ("wait", "internal-server-error")  # try again later
        said = error_text(reply)
        assert "queue 'orders' has no target/" in said, said
        assert not (folder / "target").exists()  # none made: the operator's mkdir is to come
        assert not list((folder / "working").iterdir())  # nothing stored
        (folder / "target").mkdir()
        assert wire.iq(CAROL, assured, to=f"orders@{SERVICE}").get("type") == "result"
        assert wire.iq(CAROL, deliver, to=f"orders@{SERVICE}").get("type") == "result"
    assert len(box.queue("orders").peek()) == 1
