"""A subscriber of many topic nodes that goes unavailable, or falls silent on all of them
(three lock timeouts in a row), and the component's stop, tell the other processes on the
root once (one write of the subscriptions' generation), not once per node, as the MQTT
door's UNSUBSCRIBE of many filters does (Topics.ending_together). The other processes still
stop routing to every node ended."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.generations import count_generation_writes
from tests.unit.xmpp.wire import ALICE, BOB, Wire

import boxmq
from boxmq.clock import ManualClock
from boxmq.xmpp import ns

NODES = [f"sensors/{n}" for n in range(12)]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The generation's writes from now on, each as the number of changes it told."""
    return count_generation_writes(monkeypatch)


def _subscribed(wire: Wire, jid: str) -> None:
    for node in NODES:
        assert wire.subscribe(jid, 5, node=node).get("type") == "result"


def test_an_unavailable_subscriber_of_many_topic_nodes_writes_the_generation_once(
    box: boxmq.Box, root: Path, writes: list[int]
) -> None:
    wire = Wire(box)
    _subscribed(wire, ALICE)
    assert wire.subscribe(BOB, 5, node="kept").get("type") == "result"
    with boxmq.open(root, fsync="never") as other:  # another process on the root
        assert all(other.topics.has_durable(node) for node in NODES)
        writes.clear()
        wire.service.gone(ALICE)
        assert writes == [len(NODES)]  # one write, naming each node's share group
        assert not any(other.topics.has_durable(node) for node in NODES)
        assert other.topics.has_durable("kept")
    wire.service.close()


def test_the_stop_of_the_component_writes_the_generation_once(
    box: boxmq.Box, root: Path, writes: list[int]
) -> None:
    wire = Wire(box)
    _subscribed(wire, ALICE)
    with boxmq.open(root, fsync="never") as other:
        writes.clear()
        wire.service.close()
        assert writes == [len(NODES)]
        assert not any(other.topics.has_durable(node) for node in NODES)


def test_a_subscriber_silent_on_many_topic_nodes_is_unsubscribed_with_one_write(
    manual_box: boxmq.Box, root: Path, clock: ManualClock, writes: list[int]
) -> None:
    # The third lock timeout in a row of each node came in one `expire`, and each of its
    # subscriptions was ended on its own: one write of the generation per node.
    wire = Wire(manual_box, lock_timeout=10)
    _subscribed(wire, ALICE)
    assert wire.subscribe(BOB, 5, node="kept").get("type") == "result"
    for node in NODES:
        wire.publish(node=node)
    assert len(wire.items_to(ALICE)) == len(NODES)
    with boxmq.open(root, fsync="never") as other:
        for silence in range(3):
            if silence:  # the handoff: what it let go waits a second for another subscriber
                clock.advance(1)
                assert len(wire.items_to(ALICE)) == len(NODES)
            clock.advance(10)
            writes.clear()
            wire.service.expire(clock.now())
        assert writes == [len(NODES)]  # one write, naming each node's share group
        ended = f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}subscription"
        told = [s.find(ended) for s in wire.take() if s.find(ended) is not None]
        assert sorted((e.get("node"), e.get("subscription")) for e in told if e is not None) == [
            (node, "none") for node in sorted(NODES)
        ]
        assert not any(other.topics.has_durable(node) for node in NODES)
        assert other.topics.has_durable("kept")
    wire.service.close()
