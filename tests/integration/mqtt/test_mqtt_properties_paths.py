"""A message's whole metadata through the paths that store it or hand it on, with paho v5.

Each test publishes one message carrying every MQTT 5.0 property a publisher may set (User
Properties with a repeated name, in order; Content Type; Response Topic; Correlation Data that
is no text; Payload Format Indicator; a Message Expiry Interval), and checks that the receiver
gets them as sent but for what MQTT 5.0 says changes on the way: the interval counts down
(§3.3.2.3.3), and the Subscription Identifier is the receiver's own (§3.3.4), never the
publisher's Topic Alias (§3.3.2.3.4). test_mqtt_paho_clients checks the live path and
test_mqtt_long_properties properties too long for a file name; here the other paths.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from harness.stopping import kill
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import (
    WAIT,
    Received,
    RunningServer,
    Served,
    boxmq_cli,
    boxmq_cli_ok,
    drop,
    paho,
    paho_properties,
    serve_fresh,
    serve_process,
    stop_process,
)

INTERVAL = 60  # seconds: the Message Expiry Interval published
USER = [("tenant", "acme"), ("trace", "a1"), ("tenant", "other")]  # a name twice, in order
SENT: dict[str, object] = {
    "UserProperty": USER,
    "ContentType": "application/json",
    "ResponseTopic": "replies/dev-7",
    "CorrelationData": b"\x00\xffreq",
    "PayloadFormatIndicator": 1,
}


def _published(**more: object) -> Any:
    return paho_properties(PacketTypes.PUBLISH, MessageExpiryInterval=INTERVAL, **SENT, **more)


def _identified(identifier: int) -> Any:
    return paho_properties(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=identifier)


def _assert_as_sent(
    message: Received, identifier: int, published: float, *, waited: bool = True
) -> None:
    """What the publisher set, the receiver's Subscription Identifier, no Topic Alias, and
    what is left of the interval since `published` (time.monotonic()): less than was sent
    when the message `waited` a second or more on its way."""
    got = message.properties
    for name, value in SENT.items():
        assert getattr(got, name) == value, name
    assert got.SubscriptionIdentifier == [identifier]
    assert not hasattr(got, "TopicAlias")
    since = time.monotonic() - published
    left = got.MessageExpiryInterval
    assert INTERVAL - since - 1 <= left <= (INTERVAL - 1 if waited else INTERVAL), since


def test_a_share_members_message_given_to_another_when_it_dies_keeps_its_metadata(
    server: RunningServer,
) -> None:
    """MQTT 5.0 §4.8.2: a message a member did not acknowledge goes to another member when
    its session ends. The other gets it with its own Subscription Identifier and the time
    spent with the first taken off the interval."""
    first = paho(server, "first", configure=lambda c: c.manual_ack_set(True))  # acks nothing
    first.subscribe("$share/workers/jobs/#", 1, properties=_identified(3))
    publisher = paho(server, "publisher")
    published = time.monotonic()
    publisher.publish("jobs/1", b"{}", 1, properties=_published(TopicAlias=2))
    _assert_as_sent(first.next(), 3, published, waited=False)
    second = paho(server, "second")
    second.subscribe("$share/workers/jobs/#", 1, properties=_identified(4))
    time.sleep(1.2)  # so that what is left of the interval is less than was sent
    drop(first)  # a non-persistent session: it ends with its connection
    message = second.next()
    assert (message.topic, message.payload) == ("jobs/1", b"{}")
    _assert_as_sent(message, 4, published)
    assert second.nothing()


@pytest.mark.parametrize("stopped", [stop_process, kill], ids=["sigterm", "sigkill"])
def test_a_persistent_sessions_messages_keep_their_metadata_across_a_restart(
    tmp_path: Path, stopped: Callable[[Served], None]
) -> None:
    """`boxmq serve` stopped as a user stops it (SIGTERM), or killed (SIGKILL), and started
    again: the messages a persistent session collected while away (QoS 1, QoS 2 through the
    exactly-once intake, a retained one) and the retained store's copy, for a subscriber
    that comes after the restart. The one that matches two of the session's subscriptions
    comes once for each, with that subscription's identifier (MQTT-3.3.4-3, MQTT-3.3.4-5)."""
    served, process = serve_fresh(tmp_path)
    try:
        away = paho(served, "away", clean=False, expiry=300)
        away.subscribe("jobs/#", 2, properties=_identified(5))
        away.subscribe("jobs/1", 1, properties=_identified(7))
        away.stop()
        publisher = paho(served, "publisher")
        published = time.monotonic()
        for topic, qos, retain in (("jobs/1", 1, False), ("jobs/2", 2, False), ("jobs/r", 1, True)):
            publisher.publish(topic, topic, qos, retain=retain, properties=_published())
        publisher.stop()
        time.sleep(1.2)  # so that what is left of the interval is less than was sent
    finally:
        stopped(process)
    process = serve_process(served.root, served.port)
    try:
        back = paho(served, "away", clean=False, expiry=300)
        assert back.session_present
        got = {
            (m.payload, *m.properties.SubscriptionIdentifier): m
            for m in (back.next() for _ in range(4))
        }
        assert sorted(got) == [(b"jobs/1", 5), (b"jobs/1", 7), (b"jobs/2", 5), (b"jobs/r", 5)]
        assert [got[b"jobs/1", 5].qos, got[b"jobs/2", 5].qos] == [1, 2]
        for (_, identifier), message in got.items():
            _assert_as_sent(message, identifier, published)
        assert back.nothing()
        late = paho(served, "late")
        late.subscribe("jobs/r", 1, properties=_identified(6))
        retained = late.next()
        assert (retained.payload, retained.retain) == (b"jobs/r", True)
        _assert_as_sent(retained, 6, published)
    finally:
        stop_process(process)


def test_the_cli_and_the_python_api_show_an_mqtt_messages_expiry_as_its_expiration(
    server: RunningServer,
) -> None:
    """The Message Expiry Interval is the message's expiration on disk: `boxmq get`'s and
    `subscribe --json`'s `expires` and `Message.expiration` say when it ends, beside the
    properties that test_mqtt_properties_elsewhere checks."""
    server.box.subscribe("orders/#", "audit").close()  # kept: they collect while away
    server.box.subscribe("orders/#", "worker").close()
    before = time.time()
    paho(server, "publisher").publish("orders/1", b"{}", 1, properties=_published())
    after = time.time()
    line = boxmq_cli(
        server.root, "--json", "subscribe", "orders/#", "--name", "audit", "--count", "1"
    ).stdout
    shown = json.loads(line)
    assert (shown["body"], shown["reply-to"]) == ("{}", SENT["ResponseTopic"])
    expires = datetime.fromisoformat(shown["expires"]).timestamp()  # to the second
    assert int(before) + INTERVAL <= expires <= after + INTERVAL
    with server.box.subscribe("orders/#", "worker") as worker:
        message = worker.receive(timeout=WAIT)
        assert message is not None
        assert message.expiration is not None
        assert before + INTERVAL - 0.01 <= message.expiration <= after + INTERVAL
        message.ack()


def test_a_message_the_cli_retained_reaches_a_later_v5_subscriber_with_its_metadata(
    server: RunningServer,
) -> None:
    """docs/mqtt.md, "What the others set is what an MQTT v5 subscriber gets", through the
    retained store: `boxmq publish --retain` while the server runs, then a subscriber that
    comes after it (a non-persistent session, which gets it from the retained store). The
    request's Response Topic and Correlation Data are given by their `mqtt.*` names here, and
    by `--reply-to` and `--correlation-id` in the next test."""
    published = time.monotonic()
    boxmq_cli_ok(
        server.root,
        *("publish", "cfg/line-4", '{"speed": 3}', "--qos", "1", "--retain"),
        *("-p", "tenant=acme", "-p", "n:int=3", "-p", "mqtt.content-type=application/json"),
        *("-p", "mqtt.response-topic=cfg/answers", "-p", "mqtt.correlation-data=cmVxLTc="),
        *("--expires-in", "60s"),
    )
    time.sleep(1.2)  # so that what is left of the interval is less than was sent
    late = paho(server, "late")
    late.subscribe("cfg/#", 1, properties=_identified(9))
    message = late.next()
    assert (message.topic, message.payload, message.retain) == (
        "cfg/line-4",
        b'{"speed": 3}',
        True,
    )
    got = message.properties
    assert got.UserProperty == [("tenant", "acme"), ("n", "3")]
    assert (got.ContentType, got.ResponseTopic, got.CorrelationData) == (
        "application/json",
        "cfg/answers",
        b"req-7",
    )
    assert got.SubscriptionIdentifier == [9]
    since = time.monotonic() - published
    assert INTERVAL - since - 1 <= got.MessageExpiryInterval <= INTERVAL - 1, since
    assert late.nothing()


def test_a_request_the_cli_published_with_its_reply_to_in_a_side_file_reaches_v5_subscribers(
    server: RunningServer,
) -> None:
    """docs/file-format.md, "Properties too long for the name": `--reply-to`, `--correlation-id`,
    `--expires-in` and a content type on a 10-character topic leave the side file's key no room
    in the name, so the reply-to and the correlation id go to the side file too (refused as
    too long before). A persistent v5 subscriber away and one that comes after the retained
    message get the request as a v5 client sends one."""
    away = paho(server, "away", clean=False, expiry=300)
    away.subscribe("cfg/#", 1, properties=_identified(5))
    away.stop()
    published = time.monotonic()
    boxmq_cli_ok(
        server.root,
        *("publish", "cfg/line-4", "x", "--qos", "1", "--retain"),
        *("--reply-to", "cfg/answers", "--correlation-id", "req-7", "--expires-in", "60s"),
        *("-p", "mqtt.content-type=application/json"),
    )
    late = paho(server, "late")
    late.subscribe("cfg/#", 1, properties=_identified(9))
    back = paho(server, "away", clean=False, expiry=300)
    assert back.session_present
    for message in (late.next(), back.next()):
        assert (message.topic, message.payload) == ("cfg/line-4", b"x")
        got = message.properties
        assert (got.ContentType, got.ResponseTopic, got.CorrelationData) == (
            "application/json",
            "cfg/answers",
            b"req-7",
        )
        assert not hasattr(got, "UserProperty")
        since = time.monotonic() - published
        assert INTERVAL - since - 1 <= got.MessageExpiryInterval <= INTERVAL, since
    assert late.nothing()
    assert back.nothing()
