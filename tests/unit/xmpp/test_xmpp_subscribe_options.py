"""The fields a subscribe's options form may carry (XEP-0060 §6.3.6, §16.4.2), no server.

A subscriber's client library may fill in the standard pubsub#subscribe_options fields; each
is taken when it asks for what every subscription here is anyway, and refused with
bad-request + invalid-options, naming it, when it asks for what the service would not do:
answered result, the subscriber would believe it granted.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest
from tests.unit.xmpp.wire import ALICE, Wire, condition, error_text, form_values

from boxmq.xmpp import ns


def _subscribe(wire: Wire, *fields: tuple[str, str | list[str]]) -> ET.Element:
    return wire.subscribe_with_options(ALICE, *fields)


def _invalid_options(reply: ET.Element, field: str) -> None:
    assert condition(reply) == ("modify", "bad-request")
    assert reply.find(f".//{{{ns.PUBSUB_ERRORS}}}invalid-options") is not None
    assert field in ET.tostring(reply, encoding="unicode")


def _queue_requests_in_force(wire: Wire) -> str | None:
    """The queue_requests of alice's subscription, as a subscribe without options answers it."""
    return form_values(wire.subscribe(ALICE, None)).get("pubsub#queue_requests")


def test_an_unknown_field_is_refused_naming_it_and_nothing_is_subscribed(wire: Wire) -> None:
    # a misspelt queue_requests beside the real one: it was ignored, the subscriber none the
    # wiser that what it meant to ask was never read
    reply = _subscribe(wire, ("pubsub#queue_requests", "2"), ("pubsub#queue_request", "5"))
    _invalid_options(reply, "pubsub#queue_request")
    wire.publish()
    assert wire.items_to(ALICE) == []


def test_a_changed_subscription_with_an_unknown_field_stays_as_it_was(wire: Wire) -> None:
    assert wire.subscribe(ALICE, 1).get("type") == "result"
    reply = _subscribe(wire, ("pubsub#queue_requests", "5"), ("boxmq#qos_level", "assured"))
    _invalid_options(reply, "boxmq#qos_level")
    assert _queue_requests_in_force(wire) == "1"


def test_xep_0060s_own_example_form_minus_show_values_is_taken(wire: Wire) -> None:
    # §6.3.7's form (deliver, digest, include_body) asks for what a subscription here is
    reply = _subscribe(
        wire,
        ("pubsub#queue_requests", "2"),
        ("pubsub#deliver", "1"),
        ("pubsub#digest", "0"),
        ("pubsub#include_body", "false"),
    )
    assert reply.get("type") == "result", ET.tostring(reply)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pubsub#deliver", "true"),
        ("pubsub#digest", "false"),
        ("pubsub#digest_frequency", "86400000"),  # of digests, which are not sent
        ("pubsub#include_body", "0"),
        ("pubsub#expire", "presence"),  # unavailable presence ends a subscription here
        ("pubsub#subscription_type", "items"),
        ("pubsub#subscription_depth", "1"),  # every node is a leaf: depth is a collection's
        ("pubsub#subscription_depth", "all"),
        ("pubsub#show-values", ""),  # slixmpp's Form.reply() of an unfilled field
        ("pubsub#deliver", ""),
    ],
)
def test_a_standard_field_asking_what_a_subscription_is_anyway_is_taken(
    wire: Wire, field: str, value: str
) -> None:
    reply = _subscribe(wire, ("pubsub#queue_requests", "3"), (field, value))
    assert reply.get("type") == "result", ET.tostring(reply)
    assert _queue_requests_in_force(wire) == "3"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pubsub#deliver", "false"),  # no notification at all: unsubscribe instead
        ("pubsub#deliver", "0"),
        ("pubsub#deliver", "yes"),  # no XML Schema boolean
        ("pubsub#digest", "1"),
        ("pubsub#include_body", "true"),
        ("pubsub#expire", "2026-12-31T00:00:00Z"),  # a lease: nothing here would end it
        ("pubsub#subscription_type", "nodes"),
        ("pubsub#subscription_depth", "2"),
        ("pubsub#show-values", "online"),  # the show of a subscriber is not looked at
        ("pubsub#show-values", ["chat", "online", "away"]),
    ],
)
def test_a_standard_field_asking_what_the_service_does_not_do_is_refused(
    wire: Wire, field: str, value: str | list[str]
) -> None:
    reply = _subscribe(wire, ("pubsub#queue_requests", "3"), (field, value))
    _invalid_options(reply, field)
    wire.publish()
    assert wire.items_to(ALICE) == []


def test_show_values_of_several_values_is_refused_for_the_show_not_for_the_count(
    wire: Wire,
) -> None:
    # XEP-0060's own options form lists show-values as several values (list-multi): it was
    # refused "has 3 values: it takes one", as if one value would do, where no value is taken
    reply = _subscribe(wire, ("pubsub#show-values", ["chat", "online", "away"]))
    _invalid_options(reply, "pubsub#show-values")
    text = error_text(reply)
    assert "whatever the subscriber's show" in text, text
    assert "takes one" not in text, text
