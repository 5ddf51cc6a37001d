"""Retained messages on two `boxmq serve` processes sharing one root: the retained store is
the root's, so what one server sets or clears is what a subscriber of either one is sent, and
the Retain Handling of a session resumed on the other server counts the subscription it made
on the first."""

from __future__ import annotations

from tests.integration.mqtt.clients import RunningServer, Served, paho


def test_set_on_one_server_cleared_on_the_other_and_resumed_there(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    a, b, _ = two_servers
    on_a, on_b = paho(a, "pub-a"), paho(b, "pub-b")
    on_a.publish("status/x", b"on", qos=1, retain=True)
    on_b.publish("status/x", b"", qos=1, retain=True)  # cleared on B
    for served, name in ((a, "sub-a"), (b, "sub-b")):
        subscriber = paho(served, name)
        subscriber.subscribe("status/#", 1)
        assert subscriber.nothing(0.3), f"{name} was sent the cleared message"
        subscriber.stop()
    for value in range(5):  # the last acknowledged wins, whichever server took it
        on_a.publish("status/y", f"a{value}".encode(), qos=1, retain=True)
        on_b.publish("status/y", f"b{value}".encode(), qos=1, retain=True)

    roamer = paho(a, "roamer", clean=False, expiry=60)
    # QoS 0: a QoS 1 copy whose PUBACK A had not read yet when roamer left would come
    # again from B (DUP), as it should, and be taken for a retained message sent again.
    roamer.subscribe("status/#", 0, retainHandling=1)
    got = roamer.next()
    assert (got.payload, got.retain) == (b"b4", True)
    roamer.stop()
    roamer = paho(b, "roamer", clean=False, expiry=60)
    assert roamer.session_present
    roamer.subscribe("status/#", 0, retainHandling=1)  # not new, though new to B
    assert roamer.nothing(0.3)
    roamer.subscribe("status/#", 0, retainHandling=0)
    assert roamer.next().payload == b"b4"
    roamer.subscribe("status/#", 0, retainHandling=2)
    grouped = paho(b, "grouped", clean=False, expiry=60)
    grouped.subscribe("$share/g/status/#", 1)  # never to a shared subscription (MQTT 5.0 §4.8.2)
    assert roamer.nothing(0.3)
    assert grouped.nothing(0.1)
    for client in (on_a, on_b, roamer, grouped):
        client.stop()
