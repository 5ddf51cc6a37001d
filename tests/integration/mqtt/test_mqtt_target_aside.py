"""A durable subscription whose target/ an operator moved aside (to recreate it,
docs/operations.md "Disk usage"): the subscription still exists, so a publication for it is
refused to its publisher, who sends it again, rather than acknowledged and dropped as for a
deleted subscription."""

from __future__ import annotations

import os
import queue

from tests.integration.mqtt.clients import WAIT, RunningServer, keeper_target, paho

SUCCESS = 0x00
UNSPECIFIED_ERROR = 0x80


def test_a_publication_for_a_subscription_whose_target_was_moved_aside_is_refused_then_kept(
    server: RunningServer,
) -> None:
    keeper, target = keeper_target(server, "sensors/kitchen")
    keeper.stop()  # away: what is published for it waits in its target/
    publisher = paho(server, "pub")
    acks: queue.Queue[tuple[int, int]] = queue.Queue()
    publisher.client.on_publish = lambda _c, _u, mid, reason, _p: acks.put((mid, reason.value))

    aside = target.with_name("target.aside")
    os.rename(target, aside)
    info = publisher.client.publish("sensors/kitchen", b"while aside", qos=1)
    assert acks.get(timeout=WAIT) == (info.mid, UNSPECIFIED_ERROR)
    assert os.listdir(aside) == []
    assert not target.exists()

    os.rename(aside, target)  # recreated: the publisher sends it again, and it is kept
    info = publisher.client.publish("sensors/kitchen", b"while aside", qos=1)
    assert acks.get(timeout=WAIT) == (info.mid, SUCCESS)
    publisher.stop()
    keeper = paho(server, "keeper", clean=False, expiry=300)
    received = keeper.next()
    assert (received.topic, received.payload) == ("sensors/kitchen", b"while aside")
    assert keeper.nothing(within=0.5)
    keeper.stop()


def test_a_v311_publisher_is_disconnected_and_its_resend_is_kept(server: RunningServer) -> None:
    keeper, target = keeper_target(server, "sensors/kitchen")
    keeper.stop()
    aside = target.with_name("target.aside")
    os.rename(target, aside)
    publisher = paho(server, "pub311", v5=False, clean=False)
    info = publisher.client.publish("sensors/kitchen", b"while aside", qos=1)
    publisher.disconnects.get(timeout=WAIT)  # no PUBACK: its protocol has no refusal
    assert not info.is_published()
    assert os.listdir(aside) == []

    os.rename(aside, target)  # recreated: paho reconnects and sends it again
    info.wait_for_publish(timeout=WAIT)
    assert info.is_published()
    publisher.stop()
    keeper = paho(server, "keeper", clean=False, expiry=300)
    assert keeper.next().payload == b"while aside"
    assert keeper.nothing(within=0.5)
    keeper.stop()


def test_a_qos_2_release_while_target_is_aside_is_refused_then_delivered_once(
    server: RunningServer,
) -> None:
    """A persistent publisher's QoS 2 message, stored at its PUBLISH, released (PUBREL) while
    the subscription's target/ is aside: PUBCOMP has no failure code, so the client is
    disconnected; no new target/ is made and no copy waits in the subscription's working/;
    paho sends PUBREL again once back, and the message is delivered, once."""
    keeper, target = keeper_target(server, "sensors/kitchen")
    keeper.stop()
    aside = target.with_name("target.aside")
    os.rename(target, aside)
    publisher = paho(server, "pub2", clean=False, expiry=300)
    info = publisher.client.publish("sensors/kitchen", b"released while aside", qos=2)
    publisher.disconnects.get(timeout=WAIT)  # its PUBREL refused, after TARGET_BACK_WAIT
    assert not info.is_published()
    assert not target.exists()
    assert os.listdir(aside) == []
    assert [files for _, _, files in os.walk(target.with_name("working")) if files] == []

    os.rename(aside, target)  # recreated: paho reconnects and sends PUBREL again
    info.wait_for_publish(timeout=WAIT)
    assert info.is_published()
    publisher.stop()
    keeper = paho(server, "keeper", clean=False, expiry=300)
    assert keeper.next().payload == b"released while aside"
    assert keeper.nothing(within=0.5)
    keeper.stop()
