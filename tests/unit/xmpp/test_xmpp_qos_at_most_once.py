"""urn:xmpp:qos, Unacknowledged service (at most once): a plain <message/> to NODE@component,
"a normal message stanza ... as defined by the XMPP protocol itself" (seed 003, Use Cases).
Before 2026-12-01 the component dropped it without a word, though it advertises urn:xmpp:qos."""

from __future__ import annotations

from collections.abc import Iterator
from xml.etree import ElementTree as ET

import pytest
from tests.unit.xmpp.wire import (
    BOB,
    CAROL,
    EVENT,
    SERVICE,
    Wire,
    condition,
    error_text,
    ready_messages,
    wired,
)

import boxmq
from boxmq.xmpp import ns

NODE_AT = f"jobs@{SERVICE}"
_SENSOR = (
    "<fields xmlns='urn:xmpp:iot:sensordata' seqnr='1' done='true'><node nodeId='Temp01'>"
    "<numeric name='Temperature' momentary='true' value='23.4' unit='C'/></node></fields>"
)


@pytest.fixture
def wire(box: boxmq.Box) -> Iterator[Wire]:
    with wired(box) as wire:  # the queue node `jobs`
        yield wire


def _message(to: str = NODE_AT, *, type: str | None = None, id: str | None = "m1") -> str:
    """The document's "Sensor sending a momentary value", as the server hands it on."""
    typed = f" type='{type}'" if type is not None else ""
    named = f" id='{id}'" if id is not None else ""
    return f"<message from='{CAROL}' to='{to}'{named}{typed}>{_SENSOR}</message>"


def _stored(box: boxmq.Box) -> list[bytes]:
    return [message.body for message in ready_messages(box)]


def test_a_plain_message_is_stored_as_an_acknowledged_one_is_and_not_answered(
    wire: Wire, box: boxmq.Box
) -> None:
    assert wire.message(_message()) == []  # at most once: no answer on success
    acknowledged = (
        f"<acknowledged xmlns='{ns.QOS}'>"
        f"<message xmlns='jabber:client' id='m1'>{_SENSOR}</message></acknowledged>"
    )
    assert wire.iq(CAROL, acknowledged, to=NODE_AT).get("type") == "result"
    plain, wrapped = (ET.canonicalize(body.decode()) for body in _stored(box))
    assert plain == wrapped  # the same stored form: a jabber:client <message/>
    message = ET.fromstring(plain)
    assert message.tag == "{jabber:client}message"
    assert (message.get("from"), message.get("to")) == (CAROL, NODE_AT)
    assert message[0].tag == "{urn:xmpp:iot:sensordata}fields"


@pytest.mark.parametrize("type", [None, "normal", "chat", "headline", "groupchat", "other"])
def test_a_message_of_any_type_but_error_is_stored(
    wire: Wire, box: boxmq.Box, type: str | None
) -> None:
    # RFC 6121 §5.2.2: no type, or one not understood, is 'normal'
    assert wire.message(_message(type=type)) == []
    [body] = _stored(box)
    assert ET.fromstring(body).get("type") == type


def test_a_queue_subscriber_gets_the_message(wire: Wire) -> None:
    wire.subscribe(BOB, 1)
    wire.message(_message())
    wire.service.poll()
    [event] = [s for s in wire.take() if s.find(EVENT) is not None]
    assert event.get("to") == BOB
    payload = event.find(f".//{{{ns.PUBSUB_EVENT}}}item/{{jabber:client}}message")
    assert payload is not None
    assert payload.get("from") == CAROL


def test_to_a_topic_node_the_message_is_published_to_its_subscribers(wire: Wire) -> None:
    wire.subscribe(BOB, 1, node="sensors")
    assert wire.message(_message(f"sensors@{SERVICE}")) == []
    assert len(wire.items_to(BOB)) == 1


_REFUSED = {
    "no-node": SERVICE,
    "wildcard-topic": f"a+b@{SERVICE}",
    "topic-too-long": f"{'x' * 300}@{SERVICE}",
}


@pytest.mark.parametrize("to", list(_REFUSED.values()), ids=list(_REFUSED))
@pytest.mark.parametrize("type", [None, "normal", "chat"])
def test_a_refused_message_is_answered_with_the_error_its_acknowledged_form_gets(
    wire: Wire, box: boxmq.Box, to: str, type: str | None
) -> None:
    """RFC 6120 §8.3: a message of type error, to its sender, from the address it went to,
    under its id, with the stanza error the <acknowledged/> path gives."""
    [answer] = wire.message(_message(to, type=type))
    acknowledged = wire.iq(
        CAROL,
        f"<acknowledged xmlns='{ns.QOS}'><message xmlns='jabber:client'/></acknowledged>",
        to=to,
    )
    assert answer.tag == ns.tag(ns.COMPONENT, "message")
    assert (answer.get("to"), answer.get("from"), answer.get("id")) == (CAROL, to, "m1")
    assert condition(answer) == condition(acknowledged)
    assert error_text(answer) == error_text(acknowledged) != ""
    assert _stored(box) == []


def test_a_refused_message_without_an_id_is_answered_without_one(wire: Wire) -> None:
    [answer] = wire.message(_message(SERVICE, id=None))
    assert condition(answer) == ("cancel", "item-not-found")
    assert "id" not in answer.attrib


@pytest.mark.parametrize("type", ["headline", "groupchat", "error"])
def test_no_error_answers_a_refused_headline_groupchat_or_error_message(
    wire: Wire, type: str
) -> None:
    # An error answering an error could bounce back and forth between two services for
    # ever; a headline asks no reply (RFC 6121 §5.2.2), a groupchat comes from a room that
    # hands whatever it is sent to every occupant.
    assert wire.message(_message(SERVICE, type=type)) == []


def test_a_message_of_type_error_is_not_stored(wire: Wire, box: boxmq.Box) -> None:
    assert wire.message(_message(type="error")) == []
    assert _stored(box) == []


def test_a_bounced_event_still_ends_the_subscription_of_its_subscriber(wire: Wire) -> None:
    # XEP-0254 §4: the server bounces an event to a subscriber that is gone as an error
    wire.subscribe(BOB, 1)
    bounced = f"<message type='error' from='{BOB}' to='{SERVICE}'><error type='cancel'/></message>"
    assert wire.message(bounced) == []
    wire.publish()
    assert wire.items_to(BOB) == []
