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

import time
from typing import Any

from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import Received, RunningServer, drop, paho, paho_properties

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
    publisher.publish("jobs/1", b"{}", 1, properties=_published(TopicAlias=2))
    published = time.monotonic()
    _assert_as_sent(first.next(), 3, published, waited=False)
    second = paho(server, "second")
    second.subscribe("$share/workers/jobs/#", 1, properties=_identified(4))
    time.sleep(1.2)  # so that what is left of the interval is less than was sent
    drop(first)  # a non-persistent session: it ends with its connection
    message = second.next()
    assert (message.topic, message.payload) == ("jobs/1", b"{}")
    _assert_as_sent(message, 4, published)
    assert second.nothing()
