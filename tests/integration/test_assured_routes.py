"""An exactly-once `deliver` to a topic (MQTT's PUBREL, urn:xmpp:qos `<deliver/>`) finds the
subscriptions it goes to once: the route whose target/ folders it looks at before its marker
is the one its copies take, found once for a batch's messages to one topic, each folder looked
at once. A retained one that replaces its topic's retained message is routed again once it has,
so that a subscription made meanwhile, sent the old retained message, gets the new one too.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from tests.waiting import WAIT

import boxmq
from boxmq.client import assured
from boxmq.client.assured import AssuredMessage
from boxmq.client.subscriber import Subscriber
from boxmq.model import PUBLISHED_RETAINED
from boxmq.store import layout

SUBSCRIBERS = ("s0", "s1", "s2")


@pytest.fixture
def subscribed(box: boxmq.Box) -> boxmq.Box:
    for subscriber in SUBSCRIBERS:
        box.subscribe("t/#", subscriber).close()
    return box


def _counted_routes(box: boxmq.Box, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The topic of each route the box's publishing finds from now on."""
    routes = box.topics._routes
    found: list[str] = []
    original = routes.destinations

    def counted(topic: str, *args: object, **kwargs: object) -> object:
        found.append(topic)
        return original(topic, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(routes, "destinations", counted)
    return found


def _stored(box: boxmq.Box, count: int) -> list[tuple[str, str]]:
    keys = [("meter", str(number)) for number in range(count)]
    for source, msg_id in keys:
        assert box.assured(source, msg_id, msg_id.encode(), topic="t/x")
    return keys


def _received(box: boxmq.Box, subscriber: str) -> list[bytes]:
    with box.subscribe("t/#", subscriber) as subscription:
        bodies = []
        while (message := subscription.receive_nowait()) is not None:
            bodies.append(message.body)
            message.ack()
    return bodies


def test_a_deliver_to_a_topic_finds_its_subscriptions_once(
    subscribed: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    [key] = _stored(subscribed, 1)
    routes = _counted_routes(subscribed, monkeypatch)
    assert subscribed.deliver(*key) is True
    assert routes == ["t/x"]  # two before: once for its target/ look, once for its copies
    for subscriber in SUBSCRIBERS:
        assert _received(subscribed, subscriber) == [b"0"]


def test_a_batch_of_delivers_to_one_topic_finds_its_subscriptions_once(
    subscribed: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = _stored(subscribed, 5)
    routes = _counted_routes(subscribed, monkeypatch)
    looked: list[str] = []
    original = layout.targets_aside

    def counted(dropboxes: Iterable[str]) -> list[str]:
        folders = list(dropboxes)
        looked.extend(folders)
        return original(folders)

    monkeypatch.setattr(assured, "targets_aside", counted)
    assert subscribed.intake.deliver_many(keys) == [True] * 5
    assert routes == ["t/x"]  # ten before
    assert len(looked) == len(SUBSCRIBERS)  # each target/ once, not once a message
    for subscriber in SUBSCRIBERS:
        assert sorted(_received(subscribed, subscriber)) == [b"0", b"1", b"2", b"3", b"4"]


def test_a_subscription_made_during_a_retained_deliver_gets_the_old_then_the_new(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made once the deliver found its route, before it replaced the retained message: sent
    the old one as it subscribed, it gets the new one as a copy (pubsub.md: "the old message
    and then the new one, or the new one once"), never only the old."""
    box.publish("t/x", b"old", retain=True)
    retained = {PUBLISHED_RETAINED: True}
    message = AssuredMessage("mqtt:pub", "1", b"new", topic="t/x", properties=retained)
    assert box.intake.assured_one(message, reserved=True)
    marking = box.intake._markers.mark_all
    late: list[Subscriber] = []

    def subscribe_then_mark(*args: object, **kwargs: object) -> object:
        late.append(box.subscribe("t/#", "late"))
        return marking(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(box.intake._markers, "mark_all", subscribe_then_mark)
    assert box.intake.deliver_many([("mqtt:pub", "1")], remember=False) == [True]
    [subscription] = late
    with subscription:
        bodies: list[bytes] = []
        while (got := subscription.receive(timeout=WAIT if len(bodies) < 2 else 0)) is not None:
            bodies.append(got.body)
            got.ack()
    assert bodies == [b"old", b"new"]
