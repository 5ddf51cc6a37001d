"""A resumed persistent session's durable subscriptions (its own dropboxes and its share-group
memberships) send as many messages at once as its client's Receive Maximum of now allows, not
as many as the connection that opened them announced (found by a churn torture: a subscriber
that first came with Receive Maximum 1 got one message at a time ever after)."""

from __future__ import annotations

import socket

import pytest
from tests.integration.mqtt.clients import WAIT, RunningServer, paho
from tests.integration.mqtt.raw import packet, publishes, read, string, subscribe, take_publishes


def _connect(server: RunningServer, client_id: str, receive_maximum: int) -> socket.socket:
    """A v5 connection resuming (or starting) the persistent session `client_id`, with that
    Receive Maximum."""
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    properties = bytes([0x11]) + (300).to_bytes(4, "big")  # Session Expiry Interval
    properties += bytes([0x21]) + receive_maximum.to_bytes(2, "big")
    variable = string("MQTT") + bytes([5, 0, 0, 60, len(properties)]) + properties
    sock.sendall(packet(0x10, variable + string(client_id)))
    kind, body = read(sock)
    assert (kind, body[1]) == (0x20, 0), body.hex()
    return sock


@pytest.mark.parametrize(
    ("filter", "first", "then"),
    [("orders/#", 1, 5), ("$share/g/orders/#", 1, 5), ("orders/#", 5, 2)],
    ids=["subscription-grows", "member-grows", "subscription-shrinks"],
)
def test_a_resumed_session_gets_as_many_at_once_as_its_receive_maximum_allows_now(
    server: RunningServer, filter: str, first: int, then: int
) -> None:
    sock = _connect(server, "device", first)
    sock.sendall(subscribe(1, filter, 1))
    assert read(sock)[0] == 0x90  # SUBACK
    sock.close()
    publisher = paho(server, "publisher")
    for n in range(8):
        publisher.publish(f"orders/{n}", f"order {n}".encode(), 1)
    back = _connect(server, "device", then)
    try:
        got = take_publishes(back, then)  # none acknowledged
        assert publishes(back, within=0.5) == []
        assert [m.payload for m in got] == [f"order {n}".encode() for n in range(then)]
    finally:
        back.close()
        publisher.stop()
