"""A QoS 2 message keeps its Message Expiry Interval through the exactly-once intake (MQTT 5.0
§3.3.2.3.3): stored in working/ with its expiration, its copies in a persistent subscriber's
dropbox expire there while the subscriber is away, and one sent later carries what is left
of its interval, not the interval it was published with. Real paho v5 clients."""

from __future__ import annotations

import time

from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import RunningServer, paho, paho_properties


def _publish_qos2(server: RunningServer, payload: bytes, expiry: int) -> None:
    publisher = paho(server, "publisher")
    try:
        props = paho_properties(PacketTypes.PUBLISH, MessageExpiryInterval=expiry)
        publisher.publish("readings/now", payload, qos=2, properties=props)
    finally:
        publisher.stop()


def _subscribe_then_leave(server: RunningServer) -> None:
    subscriber = paho(server, "reader", clean=False, expiry=600)
    subscriber.subscribe("readings/#", qos=2)
    subscriber.stop()


def test_a_qos2_message_expires_while_its_subscriber_is_away(server: RunningServer) -> None:
    _subscribe_then_leave(server)
    _publish_qos2(server, b"stale", expiry=1)
    time.sleep(2.2)
    back = paho(server, "reader", clean=False, expiry=600)
    try:
        assert back.session_present
        assert back.nothing(within=1.5)
    finally:
        back.stop()


def test_a_qos2_message_is_sent_with_what_is_left_of_its_interval(
    server: RunningServer,
) -> None:
    _subscribe_then_leave(server)
    _publish_qos2(server, b"fresh", expiry=30)
    time.sleep(2.2)
    back = paho(server, "reader", clean=False, expiry=600)
    try:
        received = back.next()
        assert (received.payload, received.qos) == (b"fresh", 2)
        assert received.properties.MessageExpiryInterval <= 28
    finally:
        back.stop()
