"""The `$SYS` topics (sys_topics.py): what is published and when, with a manual clock; and the
broker without sockets delivering them from memory and refusing a client's PUBLISH to them."""

from __future__ import annotations

import os
from pathlib import Path

from tests.unit.mqtt.peers import Peer, connect_peer, run_broker

from boxmq.clock import ManualClock
from boxmq.mqtt.acl import Acl
from boxmq.mqtt.broker import Broker
from boxmq.mqtt.packets import Puback, Publish, Suback, Subscribe, Subscription
from boxmq.mqtt.reasons import ReasonCode
from boxmq.mqtt.settings import MqttSettings
from boxmq.mqtt.sys_topics import Figures, SysTopics, about_sys

_START = 1_000.0


def _figures(**changed: int) -> Figures:
    values = {
        "connected": 1,
        "subscriptions": 2,
        "messages_received": 3,
        "messages_sent": 4,
        "bytes_received": 5,
        "bytes_sent": 6,
    }
    return Figures(**(values | changed))


def _sys(interval: float = 10.0) -> SysTopics:
    return SysTopics(interval, version="boxmq version 9", started=_START)


def test_the_first_figures_are_due_at_once_and_the_next_an_interval_after_each() -> None:
    sys = _sys()
    assert sys.due(_START)
    sys.update(_START + 0.5, _figures())  # a tick a little late
    assert not sys.due(_START + 10.4)
    assert sys.due(_START + 10.5)


def test_a_clock_stepped_back_neither_stops_the_figures_nor_takes_the_uptime_below_zero() -> None:
    """The clock stepped back an hour (NTP, `date -s`) 5 s after an update: the next figures
    were due an hour later, and the uptime went out as -3585 seconds. They are due at once
    (the next is further off than an interval), and the uptime goes on from where it was."""
    sys = _sys()
    sys.update(_START, _figures())
    back = _START + 5 - 3600
    assert sys.due(back)
    changed = dict(sys.update(back, _figures()))
    assert changed == {}  # the uptime did not move back: 0 seconds still
    assert not sys.due(back + 9.9)
    changed = dict(sys.update(back + 10, _figures()))
    assert changed == {"$SYS/broker/uptime": b"10 seconds"}


def test_an_interval_of_zero_is_never_due() -> None:
    sys = _sys(0.0)
    assert not sys.due(_START)
    assert not sys.due(_START + 1e9)


def test_every_topic_goes_out_the_first_time_then_only_those_that_changed() -> None:
    sys = _sys()
    first = dict(sys.update(_START, _figures()))
    assert first == {
        "$SYS/broker/version": b"boxmq version 9",
        "$SYS/broker/uptime": b"0 seconds",
        "$SYS/broker/clients/connected": b"1",
        "$SYS/broker/clients/maximum": b"1",
        "$SYS/broker/subscriptions/count": b"2",
        "$SYS/broker/messages/received": b"3",
        "$SYS/broker/messages/sent": b"4",
        "$SYS/broker/bytes/received": b"5",
        "$SYS/broker/bytes/sent": b"6",
    }
    assert sys.update(_START + 10, _figures(bytes_sent=60)) == [
        ("$SYS/broker/uptime", b"10 seconds"),
        ("$SYS/broker/bytes/sent", b"60"),
    ]
    # The most clients at once stays when fewer are connected.
    changed = dict(sys.update(_START + 20.9, _figures(connected=0, bytes_sent=60)))
    assert changed == {"$SYS/broker/uptime": b"20 seconds", "$SYS/broker/clients/connected": b"0"}
    assert sys.latest["$SYS/broker/clients/maximum"] == b"1"


def test_a_new_subscription_gets_the_latest_of_what_its_filter_matches() -> None:
    sys = _sys()
    assert sys.matching("$SYS/#") == []  # nothing yet before the first interval
    sys.update(_START + 3, _figures())
    assert len(sys.matching("$SYS/#")) == 9
    assert sys.matching("$SYS/broker/uptime") == [("$SYS/broker/uptime", b"3 seconds")]
    assert [topic for topic, _ in sys.matching("$SYS/broker/+/sent")] == [
        "$SYS/broker/messages/sent",
        "$SYS/broker/bytes/sent",
    ]
    # A wildcard at the first level never matches a $ topic (MQTT 5.0 §4.7.2).
    for filter in ("#", "+/broker/uptime", "$share/g/$SYS/#", "$SYSTEM/#"):
        assert sys.matching(filter) == [], filter


def test_about_sys_is_the_first_level_alone() -> None:
    for name in ("$SYS", "$SYS/", "$SYS/broker/uptime", "$SYS/#"):
        assert about_sys(name), name
    for name in ("$SYSTEM/x", "a/$SYS", "$share/g/$SYS/#", "#"):
        assert not about_sys(name), name


# -- the broker ------------------------------------------------------------------------------------


def _sys_subscriber(broker: Broker, client_id: str, filter: str) -> tuple[Peer, list[Publish]]:
    """A client subscribed to `filter`: its SUBACK checked, and what came with it."""
    peer = connect_peer(broker, client_id)
    peer.send(Subscribe(1, (Subscription(filter, 1),)))
    suback, *rest = peer.take()
    assert isinstance(suback, Suback)
    assert suback.reasons == (ReasonCode.GRANTED_QOS_1,)
    assert all(isinstance(p, Publish) for p in rest)
    return peer, [p for p in rest if isinstance(p, Publish)]


def _by_topic(packets: list[Publish]) -> dict[str, bytes]:
    return {p.topic: p.payload for p in packets}


def test_the_broker_sends_its_figures_from_memory_at_qos_0_and_nothing_reaches_the_disk(
    tmp_path: Path,
) -> None:
    clock = ManualClock(_START)
    settings = MqttSettings(sys_interval=10.0)

    async def test(broker: Broker) -> None:
        everything, _ = _sys_subscriber(broker, "everything", "#")
        broker.tick(clock.now())  # the first interval
        watcher, got = _sys_subscriber(broker, "watcher", "$SYS/broker/+/connected")
        # At once, as retained, at QoS 0 whatever was granted: the value of the last interval.
        assert [(p.topic, p.payload, p.qos, p.retain) for p in got] == [
            ("$SYS/broker/clients/connected", b"1", 0, True)
        ]
        publisher = connect_peer(broker, "publisher")
        publisher.send(Publish("news", b"hi", 1, packet_id=1))
        clock.advance(9.9)
        broker.tick(clock.now())
        assert watcher.take() == []  # not due yet
        clock.advance(0.1)
        broker.tick(clock.now())
        [update] = watcher.take()
        assert isinstance(update, Publish)
        assert (update.topic, update.payload, update.qos, update.retain) == (
            "$SYS/broker/clients/connected",
            b"3",
            0,
            False,  # a live copy: Retain As Published was not asked
        )
        figures = broker.figures()
        # Packets of every kind, as mosquitto counts them. Received: a CONNECT and a
        # SUBSCRIBE from each subscriber, a CONNECT and a PUBLISH from the publisher. Sent:
        # a CONNACK each, a SUBACK to each subscriber, "news" to "#", two values to the
        # watcher, a PUBACK to the publisher.
        assert (figures.messages_received, figures.messages_sent) == (6, 9)
        assert figures.bytes_received > 0
        assert figures.bytes_sent > 0
        # "#" does not match $SYS topics: the publisher's message alone reached it.
        assert [p.topic for p in everything.take() if isinstance(p, Publish)] == ["news"]
        clock.advance(10)
        publisher.close()  # what it counted stays in the totals
        broker.tick(clock.now())
        assert _by_topic([p for p in watcher.take() if isinstance(p, Publish)]) == {
            "$SYS/broker/clients/connected": b"2"
        }
        assert broker.figures().messages_received == 6
        assert not any("SYS" in name for _, _, names in os.walk(tmp_path) for name in names)

    run_broker(tmp_path, test, clock, settings=settings)


def test_a_persistent_session_gets_the_figures_while_connected_and_none_are_kept_for_it(
    tmp_path: Path,
) -> None:
    clock = ManualClock(_START)

    async def test(broker: Broker) -> None:
        broker.tick(clock.now())
        peer = connect_peer(broker, "keeper", expiry=3600)
        peer.send(Subscribe(1, (Subscription("$SYS/broker/uptime", 1),)))
        assert _by_topic([p for p in peer.take() if isinstance(p, Publish)]) == {
            "$SYS/broker/uptime": b"0 seconds"
        }
        clock.advance(10)
        broker.tick(clock.now())
        assert _by_topic([p for p in peer.take() if isinstance(p, Publish)]) == {
            "$SYS/broker/uptime": b"10 seconds"
        }
        peer.close()
        clock.advance(10)
        broker.tick(clock.now())
        back = connect_peer(broker, "keeper", expiry=3600, clean=False)
        assert back.take() == []  # nothing queued while it was away

    run_broker(tmp_path, test, clock)


def test_a_publish_to_sys_is_refused_unless_the_acl_allows_it(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        watcher, _ = _sys_subscriber(broker, "watcher", "$SYS/#")
        forger = connect_peer(broker, "forger")
        forger.send(Publish("$SYS/broker/uptime", b"forged", 1, packet_id=7))
        assert forger.take() == [Puback(7, ReasonCode.NOT_AUTHORIZED)]
        forger.send(Publish("$SYS/broker/uptime", b"forged", 0))  # dropped, nothing to tell
        forger.send(Publish("$SYSTEM/x", b"fine", 1, packet_id=8))  # not $SYS: goes on
        assert forger.take() == [Puback(8)]
        assert watcher.take() == []

    run_broker(tmp_path, test)

    acl = Acl.parse("pattern readwrite $SYS/custom/%c\npattern read $SYS/#\n", Path("acl"))

    async def allowed(broker: Broker) -> None:
        watcher, _ = _sys_subscriber(broker, "watcher", "$SYS/custom/#")
        peer = connect_peer(broker, "app")
        peer.send(Publish("$SYS/custom/app", b"mine", 1, packet_id=1))
        assert peer.take() == [Puback(1)]
        assert [(p.topic, p.payload) for p in watcher.take() if isinstance(p, Publish)] == [
            ("$SYS/custom/app", b"mine")
        ]
        peer.send(Publish("$SYS/broker/uptime", b"forged", 1, packet_id=2))  # no rule for it
        assert peer.take() == [Puback(2, ReasonCode.NOT_AUTHORIZED)]

    run_broker(tmp_path, allowed, settings=MqttSettings(authorizer=acl))


def test_a_clock_stepped_forward_that_the_broker_was_told_of_is_not_counted_in_the_uptime(
    tmp_path: Path,
) -> None:
    """The server told the broker of a step of an hour forward (MqttServer compares the wall
    clock with the monotonic one, Broker.clock_stepped) 5 s after an update: the uptime
    added the step, 3615 seconds for 15 that passed. It counts the time that passed."""
    clock = ManualClock(_START)

    async def test(broker: Broker) -> None:
        broker.tick(clock.now())
        peer, _ = _sys_subscriber(broker, "watcher", "$SYS/broker/uptime")
        clock.advance(5)
        broker.tick(clock.now())
        clock.advance(3600)
        broker.clock_stepped(3600)
        broker.tick(clock.now())
        clock.advance(10)
        broker.tick(clock.now())
        uptimes = [p.payload for p in peer.take() if isinstance(p, Publish)]
        assert uptimes[-1] == b"15 seconds"

    run_broker(tmp_path, test, clock)


def test_the_figures_keep_their_interval_across_a_step_the_broker_was_told_of(
    tmp_path: Path,
) -> None:
    """A step forward of an hour the broker was told of sent the figures at the next tick,
    5 s into their interval of 10; a step back sent them at once. Either way they go out an
    interval after the last, as the time that passed counts it."""

    async def test(broker: Broker) -> None:
        now = _START  # the wall clock, as the broker's ticks read it (stepped back too)
        broker.tick(now)
        peer, _ = _sys_subscriber(broker, "watcher", "$SYS/broker/uptime")
        for step, uptime in ((3600.0, b"10 seconds"), (-7200.0, b"20 seconds")):
            now += 5
            broker.tick(now)
            now += step
            broker.clock_stepped(step)
            broker.tick(now)
            broker.tick(now + 4.9)
            assert peer.take() == []  # 9.9 s since the last figures
            now += 5
            broker.tick(now)
            assert _by_topic([p for p in peer.take() if isinstance(p, Publish)]) == {
                "$SYS/broker/uptime": uptime
            }

    run_broker(tmp_path, test, ManualClock(_START))
