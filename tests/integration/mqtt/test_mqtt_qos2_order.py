"""One client's QoS 2 messages on a topic reach each subscriber in the order they were sent
(MQTT-4.6.0-5), however many are in flight, whether each went through the exactly-once intake
(a durable subscriber when it came) or waited in the session for its PUBREL (none then)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.mqtt.clients import start_server
from tests.integration.mqtt.raw import (
    open_raw,
    publish,
    publish_qos2,
    publishes,
    pubrel,
    read,
    subscribe,
)

PUBREC, PUBACK, PUBCOMP, SUBACK = 0x50, 0x40, 0x70, 0x90


@pytest.mark.parametrize("fsync", ["always", "never"])
@pytest.mark.parametrize("behind", [False, True], ids=["pubrels-alone", "behind-disk-work"])
def test_a_durable_subscription_made_between_publish_and_pubrel_keeps_the_order(
    tmp_path: Path, fsync: str, behind: bool
) -> None:
    """Three QoS 2 PUBLISHes come while no durable subscription wants their topic, so each
    waits in its session for its PUBREL; then a persistent session subscribes and goes away,
    and nine more come, which go through the exactly-once intake. The PUBRELs of all twelve
    come together, behind a QoS 1 PUBLISH that the subscription wants or alone. Behind it,
    the first three were written at their PUBREL with ids made then, and the subscription
    (ordered by id) gave them after the nine sent later; alone, they went to memory only.
    Now the durable subscriptions that get a QoS 2 message are those its PUBLISH found, as
    for one without disk work before its PUBREL: the subscriber gets the nine, in order."""
    with start_server(tmp_path / "root", fsync=fsync) as running:
        publisher, _ = open_raw(running, "pub", clean=True, expiry=0)
        publisher.sendall(b"".join(publish_qos2("line/1", n + 1, b"%d" % n) for n in range(3)))
        assert [read(publisher)[0] for _ in range(3)] == [PUBREC] * 3
        subscriber, _ = open_raw(running, "sub")
        subscriber.sendall(subscribe(1, "line/#", 2))
        assert read(subscriber)[0] == SUBACK
        subscriber.close()
        publisher.sendall(b"".join(publish_qos2("line/1", n + 1, b"%d" % n) for n in range(3, 12)))
        assert [read(publisher)[0] for _ in range(3, 12)] == [PUBREC] * 9
        first = publish("line/2", b"x", qos=1, packet_id=100) if behind else b""
        publisher.sendall(first + b"".join(pubrel(n + 1) for n in range(12)))
        kinds = [read(publisher)[0] for _ in range(12 + behind)]
        assert kinds == [PUBACK] * behind + [PUBCOMP] * 12
        publisher.close()
        subscriber, present = open_raw(running, "sub")
        assert present
        got = [r.payload for r in publishes(subscriber, within=1.0)]
        assert [p for p in got if p != b"x"] == [b"%d" % n for n in range(3, 12)]
        subscriber.close()
