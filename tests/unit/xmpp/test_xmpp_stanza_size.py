"""Answers to iqs within the server's stanza size limit for the component (no server).

A stanza from the component over Prosody's component_stanza_size_limit (512 KiB by default)
ends the component's stream, every subscriber's notifications in flight with it. What a
client sends can grow on the way back: a `'` it writes as one byte the echo writes `&apos;`
(six), a `>` in an attribute `&gt;` (four), so a request within the client's own limit
(256 KiB) could be answered with a stanza past the component's.
"""

from __future__ import annotations

import logging
from dataclasses import astuple
from xml.etree import ElementTree as ET

import pytest
from tests.unit.xmpp.wire import (
    ALICE,
    CAROL,
    PS,
    SERVICE,
    Wire,
    condition,
    error_text,
    in_stream,
)
from tests.waiting import logged

import boxmq
from boxmq.xmpp import ns
from boxmq.xmpp.settings import STANZA_SIZE_LIMIT


def _sent(wire: Wire, xml: str) -> list[str]:
    """The stanzas the service sends for one stanza from the server, as written."""
    wire.service.iq(in_stream(xml))
    wire.service.flush()  # as the component does after each batch of stanzas
    sent, wire.sent[:] = list(wire.sent), []
    return sent


def _one_reply(wire: Wire, xml: str) -> tuple[ET.Element, int]:
    """The one stanza sent for `xml`, and its size in bytes as it goes out."""
    [reply] = _sent(wire, xml)
    return in_stream(reply), len(reply.encode())


def test_an_error_whose_echo_would_pass_the_stanza_limit_is_sent_without_it(wire: Wire) -> None:
    # 100,000 quotes in, 600,000 bytes echoed: Prosody ended the component's stream
    big = "'" * 100_000
    reply, size = _one_reply(
        wire,
        f"<iq type='get' id='e1' from='{ALICE}' to='{SERVICE}'><big xmlns='urn:e'>{big}</big></iq>",
    )
    assert size <= STANZA_SIZE_LIMIT
    assert condition(reply) == ("cancel", "service-unavailable")
    assert error_text(reply) == "{urn:e}big is not served here"
    assert reply.find("{urn:e}big") is None  # RFC 6120 §8.3.1: the echo is a MAY
    # one that fits is echoed as before
    reply, _ = _one_reply(
        wire,
        f"<iq type='get' id='e2' from='{ALICE}' to='{SERVICE}'><big xmlns='urn:e'>''</big></iq>",
    )
    assert condition(reply) == ("cancel", "service-unavailable")
    assert reply.findtext("{urn:e}big") == "''"


_QUOTES = "'" * 200_000  # 200 kB sent, within a client's 256 KiB; 1.2 MB stored as `&apos;`
_GROWING = {
    "publish": f"<pubsub xmlns='{PS}'><publish node='jobs'><item>"
    f"<t xmlns='urn:q'>{_QUOTES}</t></item></publish></pubsub>",
    "acknowledged": f"<acknowledged xmlns='{ns.QOS}'>"
    f"<message xmlns='jabber:client'><body>{_QUOTES}</body></message></acknowledged>",
    "assured": f"<assured xmlns='{ns.QOS}' msgId='q1'>"
    f"<message xmlns='jabber:client'><body>{_QUOTES}</body></message></assured>",
}


@pytest.mark.parametrize("inner", list(_GROWING.values()), ids=list(_GROWING))
def test_a_payload_stored_past_the_limit_of_an_item_is_refused(
    wire: Wire, box: boxmq.Box, inner: str
) -> None:
    # answered result, stored as 1.2 MB and moved to error/ at its first delivery, never sent
    to = SERVICE if "pubsub" in inner else f"jobs@{SERVICE}"
    reply = wire.iq(CAROL, inner, to=to)
    assert condition(reply) == ("modify", "not-acceptable")
    assert reply.find(f".//{{{ns.PUBSUB_ERRORS}}}payload-too-big") is not None
    assert "1200" in error_text(reply)  # its size, in bytes
    assert set(astuple(box.queue("jobs").counts())) == {0}  # nothing stored, in any folder


def test_a_plain_message_stored_past_the_limit_of_an_item_is_refused(
    wire: Wire, box: boxmq.Box
) -> None:
    body = f"<body>{_QUOTES}</body>"
    [answer] = wire.message(f"<message from='{CAROL}' to='jobs@{SERVICE}' id='m1'>{body}</message>")
    assert answer.get("type") == "error"
    assert answer.find(f".//{{{ns.PUBSUB_ERRORS}}}payload-too-big") is not None
    assert box.queue("jobs").counts().ready == 0


def test_an_error_whose_text_too_would_pass_the_limit_is_sent_with_its_text_cut(
    wire: Wire,
) -> None:
    # a retract of an item no one holds, its id in the echo and in the error's text
    item = ">" * 150_000
    reply, size = _one_reply(
        wire,
        f"<iq type='set' id='r1' from='{ALICE}' to='{SERVICE}'><pubsub xmlns='{PS}'>"
        f"<retract node='jobs'><item id='{item}'/></retract></pubsub></iq>",
    )
    assert size <= STANZA_SIZE_LIMIT
    assert condition(reply) == ("cancel", "item-not-found")
    assert reply.find(ns.tag(ns.PUBSUB, "pubsub")) is None
    assert error_text(reply).startswith(">>>")
    assert error_text(reply).endswith("...")


def test_an_iq_whose_id_would_pass_the_stanza_limit_in_any_answer_is_not_served(
    wire: Wire, box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    # Every answer carries the id back (RFC 6120 §8.1.3): `&gt;` four times the id's bytes.
    # Served, the item was stored and its result ended the component's stream; answered with
    # an error, the same. Nothing is done for it, and who runs the service is told.
    caplog.set_level(logging.WARNING, "boxmq.xmpp")
    huge = ">" * 150_000
    publish = (
        f"<pubsub xmlns='{PS}'><publish node='jobs'><item><job xmlns='urn:e'/></item>"
        "</publish></pubsub>"
    )
    sent = _sent(wire, f"<iq type='set' id='{huge}' from='{CAROL}' to='{SERVICE}'>{publish}</iq>")
    assert sent == []
    assert box.queue("jobs").peek() == []
    [line] = logged(caplog, "not served")
    assert CAROL in line
    assert "150000" in line
    assert huge not in line
    # an id of the same bytes that fits is served
    fits = ">" * 1000
    reply, _ = _one_reply(
        wire, f"<iq type='set' id='{fits}' from='{CAROL}' to='{SERVICE}'>{publish}</iq>"
    )
    assert reply.get("type") == "result"
    assert reply.get("id") == fits
    assert len(box.queue("jobs").peek()) == 1


def test_a_refused_message_whose_error_would_pass_the_limit_is_not_answered(
    wire: Wire, caplog: pytest.LogCaptureFixture
) -> None:
    # a plain message to the service, which names no node: refused, under its id
    caplog.set_level(logging.WARNING, "boxmq.xmpp")
    huge = ">" * 150_000
    body = "<body>x</body>"
    assert (
        wire.message(f"<message id='{huge}' from='{ALICE}' to='{SERVICE}'>{body}</message>") == []
    )
    [line] = logged(caplog, "not answered")
    assert ALICE in line
    assert huge not in line
    [error] = wire.message(f"<message id='m1' from='{ALICE}' to='{SERVICE}'>{body}</message>")
    assert error.get("type") == "error"
    assert error.get("id") == "m1"


def test_disco_items_of_the_service_are_cut_to_fit_the_stanza_limit(box: boxmq.Box) -> None:
    # 60 queues of 150-character names: 21 kB of items, the limit 16 KiB
    names = sorted(f"{n:03d}" + "q" * 147 for n in range(60))
    for name in names:
        box.queue(name)
    limit = 16 * 1024
    wire = Wire(box, stanza_size_limit=limit)
    reply, size = _one_reply(
        wire,
        f"<iq type='get' id='d1' from='{ALICE}' to='{SERVICE}'>"
        f"<query xmlns='{ns.DISCO_ITEMS}'/></iq>",
    )
    assert reply.get("type") == "result"
    assert size <= limit
    listed = [item.get("node") for item in reply.iter(ns.tag(ns.DISCO_ITEMS, "item"))]
    assert 40 < len(listed) < len(names)
    assert listed == names[: len(listed)]  # the first ones, whole
    # all of them under the default limit
    reply, _ = _one_reply(
        Wire(box),
        f"<iq type='get' id='d2' from='{ALICE}' to='{SERVICE}'>"
        f"<query xmlns='{ns.DISCO_ITEMS}'/></iq>",
    )
    assert len(list(reply.iter(ns.tag(ns.DISCO_ITEMS, "item")))) == len(names)


def test_lines_about_answers_past_the_limit_are_said_once_a_minute_per_sender_then_counted(
    box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    # A peer sending such stanzas in a loop wrote a line each (an echo dropped, an iq not
    # served, a message not answered): each is said in full the first time for a bare JID,
    # then counted, the next line a minute later saying how many were passed over
    # (core/refusal_lines.py, as the exactly-once refusals and the $SYS subscribes).
    clock = [1000.0]
    wire = Wire(box, now=lambda: clock[0], stanza_size_limit=16 * 1024)
    caplog.set_level(logging.INFO, "boxmq.xmpp")
    echoed = "<big xmlns='urn:e'>" + "'" * 3000 + "</big>"  # 18 kB echoed
    huge_id = ">" * 5000  # 20 kB in any answer
    disco = f"<query xmlns='{ns.DISCO_ITEMS}'/>"
    alice_too = "alice@localhost/other"  # the same bare JID

    def loop(sender: str, times: int) -> None:
        addresses = f"from='{sender}' to='{SERVICE}'"
        for n in range(times):
            [error] = _sent(wire, f"<iq type='get' id='e{n}' {addresses}>{echoed}</iq>")
            assert in_stream(error).get("type") == "error"  # answered, without the echo
            assert _sent(wire, f"<iq type='get' id='{huge_id}' {addresses}>{disco}</iq>") == []
            message = f"<message id='{huge_id}' {addresses}><body>x</body></message>"
            assert wire.message(message) == []

    def lines() -> list[list[str]]:
        said = [logged(caplog, words) for words in ("echoed", "not served", "not answered")]
        caplog.clear()
        return said

    loop(ALICE, 50)
    loop(alice_too, 50)
    loop(CAROL, 3)  # another sender is told of at once
    for said in lines():
        assert len(said) == 2, said
        assert ALICE in said[0]
        assert CAROL in said[1]
        assert not any("more since" in line for line in said)
    clock[0] += 59  # within the minute: counted, not said
    loop(alice_too, 1)
    assert lines() == [[], [], []]
    clock[0] += 2
    loop(alice_too, 1)
    for said in lines():
        [line] = said
        assert alice_too in line
        assert line.endswith("(100 more since the last line)")


def _long_queues(box: boxmq.Box, count: int) -> list[str]:
    """`count` queues of 150-character names, in order, owned by ALICE (a create's owner):
    100 of them list in 20 kB or more, past a limit of 16 KiB."""
    names = [f"{n:03d}" + "q" * 147 for n in range(count)]
    for name in names:
        box.queue(name).set_owner(ALICE.split("/")[0])
    return names


def test_affiliations_past_the_limit_are_refused_before_every_owner_is_read(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    limit = 16 * 1024
    wire = Wire(box, stanza_size_limit=limit)
    nodes = _long_queues(box, 100)
    owners_read: list[str] = []
    owner_of = wire.service._owner_of

    def counted(node: str) -> str | None:
        owners_read.append(node)
        return owner_of(node)

    monkeypatch.setattr(wire.service, "_owner_of", counted)
    caplog.set_level(logging.INFO, "boxmq.xmpp")
    affiliations = f"<pubsub xmlns='{PS}'><affiliations/></pubsub>"
    reply = wire.iq(ALICE, affiliations, type="get")
    assert condition(reply) == ("cancel", "resource-constraint")
    text = error_text(reply)
    assert text.startswith(f"the affiliations would pass the {limit} bytes a stanza from this ")
    fit = int(text.split("after the first ")[1].split(",")[0])
    assert 40 < fit < len(nodes)
    assert text.endswith("XEP-0059 paging is not served: ask for those of one node")
    # read in order up to the one that did not fit: the old code read all 100 first
    assert owners_read == nodes[: fit + 1]
    [line] = logged(caplog, "would pass the stanza size limit")
    assert f"after {fit} affiliations: sent as resource-constraint without the result" in line
    # one node's is answered
    one = f"<pubsub xmlns='{PS}'><affiliations node='{nodes[-1]}'/></pubsub>"
    reply = wire.iq(ALICE, one, type="get")
    listed = [a.get("node") for a in reply.iter(ns.tag(ns.PUBSUB, "affiliation"))]
    assert listed == [nodes[-1]]


def test_subscriptions_past_the_limit_are_refused_saying_how_to_ask_for_fewer(
    box: boxmq.Box,
) -> None:
    limit = 16 * 1024
    wire = Wire(box, stanza_size_limit=limit)
    nodes = _long_queues(box, 100)
    for node in nodes:
        assert wire.subscribe(ALICE, 1, node=node).get("type") == "result"
    subscriptions = f"<pubsub xmlns='{PS}'><subscriptions/></pubsub>"
    reply = wire.iq(ALICE, subscriptions, type="get")
    assert condition(reply) == ("cancel", "resource-constraint")
    # the old text said only the size: "the answer would be 29163 bytes, over the 16384 ..."
    assert error_text(reply).startswith(f"the subscriptions would pass the {limit} bytes ")
    assert error_text(reply).endswith("ask for those of one node")
    one = f"<pubsub xmlns='{PS}'><subscriptions node='{nodes[0]}'/></pubsub>"
    reply = wire.iq(ALICE, one, type="get")
    assert [s.get("node") for s in reply.iter(ns.tag(ns.PUBSUB, "subscription"))] == [nodes[0]]
    # all of them under the default limit
    reply = Wire(box).iq(ALICE, subscriptions, type="get")
    assert reply.get("type") == "result"
