"""Publish/subscribe on real files: routing, share groups, retained messages, fan-out."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from tests.conftest import HeldFlush
from tests.crashes import Killed, kill_at
from tests.descriptors import deleted_files_open, no_descriptor_left
from tests.diskfull import small_disk
from tests.generations import count_generation_writes
from tests.processes import dead_token
from tests.retained import retained_folder
from tests.waiting import logged

import boxmq
from boxmq.client.publishing import Publication
from boxmq.client.subscriber import Subscriber
from boxmq.core.topics import sys_unserved
from boxmq.model import ConsumerId
from boxmq.store import topics as layout
from boxmq.store.commit import Move
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import State


def drain(subscriber: Subscriber) -> list[boxmq.Message]:
    got = []
    while (message := subscriber.receive_nowait()) is not None:
        got.append(message)
        message.ack()
    return got


def bodies(subscriber: Subscriber) -> list[str]:
    return sorted(m.text() for m in drain(subscriber))


def test_mqtt_234_distinct_groups_each_get_one_copy_plain_subscribers_theirs(
    box: boxmq.Box,
) -> None:
    c1a = box.subscribe("$share/consumer1/sport/tennis/+", "a", max_in_flight=10)
    c1b = box.subscribe("$share/consumer1/sport/tennis/+", "b", max_in_flight=10)
    c2 = box.subscribe("$share/consumer2/sport/tennis/+", "c", max_in_flight=10)
    plain = box.subscribe("sport/#", "d", max_in_flight=10)
    for index in range(10):
        box.publish("sport/tennis/player1", f"{index}")
    group1 = drain(c1a) + drain(c1b)
    assert sorted(m.text() for m in group1) == [str(i) for i in range(10)]
    assert bodies(c2) == [str(i) for i in range(10)]
    assert bodies(plain) == [str(i) for i in range(10)]
    assert group1[0].topic == "sport/tennis/player1"
    for subscriber in (c1a, c1b, c2, plain):
        subscriber.close()


def test_mqtt_234_share_of_an_empty_first_level(box: boxmq.Box) -> None:
    with box.subscribe("$share/consumer1//finance", "a") as member:
        box.publish("/finance", "ibm 180")
        box.publish("finance", "not for this filter")
        assert bodies(member) == ["ibm 180"]


def test_a_client_with_shared_and_plain_subscriptions_gets_a_copy_through_each(
    box: boxmq.Box,
) -> None:
    with (
        box.subscribe("$share/g/a/b", "client-1") as shared,
        box.subscribe("a/+", "client-1") as plain,
    ):
        box.publish("a/b", "x")
        assert bodies(shared) == ["x"]
        assert bodies(plain) == ["x"]


def test_a_subscriptions_message_names_it_as_boxmq_ls_and_the_cli_do_not_by_its_folder(
    box: boxmq.Box,
) -> None:
    # Message.queue was the dropbox's absolute path for a durable subscription or a share
    # group (a queue's message names the queue): nothing a user could give back to
    # `box.subscription` or `boxmq peek`/`ack`. With `consumer` (the subscriber), it is.
    member = box.subscribe("$share/g/sport/+", "a")
    plain = box.subscribe("sport/#", "d")
    box.publish("sport/tennis", "ace")
    shared, own = member.receive_nowait(), plain.receive_nowait()
    assert shared is not None
    assert own is not None
    assert (shared.queue, shared.consumer) == ("$share/g/sport/+", "a")
    assert (own.queue, own.consumer) == ("sport/#", "d")
    assert (member.queue, plain.queue) == ("$share/g/sport/+", "sport/#")
    [held] = box.subscription(shared.queue).peek(state="processing")
    assert held.envelope.message_id == shared.id
    box.subscription(own.queue, own.consumer).ack(own.id, own.consumer)
    shared.ack()
    for subscriber in (member, plain):
        subscriber.close()


def test_get_refuses_a_lock_under_a_readers_name_as_boxmq_get_does(box: boxmq.Box) -> None:
    """`get` on a share group under a member's name, or on a durable subscription under its
    subscriber's, was taken by the API (`boxmq get` refused it): peek's holder and a settle by
    consumer name could not tell that lock from the reader's own. Refused, nothing locked."""
    with (
        box.subscribe("$share/g/jobs/#", "w1") as member,
        box.subscribe("jobs/#", "keeper") as keeper,
    ):
        member.pause()
        keeper.pause()
        box.publish("jobs/1", "one")
        group, durable = box.subscription("$share/g/jobs/#"), box.subscription("jobs/#", "keeper")
        with pytest.raises(boxmq.InvalidArgument, match="w1 is a member of the share group"):
            group.get("w1")
        with pytest.raises(boxmq.InvalidArgument, match="keeper is the subscriber of jobs/#"):
            durable.get("keeper")
        assert (group.counts().locked, durable.counts().locked) == (0, 0)
        taken = [group.get(), durable.get("w1")]  # cli, and a name that is not keeper's
        assert [m.consumer for m in taken if m is not None] == ["cli", "w1"]


def test_fan_out_writes_the_body_once(box: boxmq.Box, root: Path) -> None:
    subscribers = [box.subscribe("t/#", f"s{i}") for i in range(5)]
    box.publish("t/x", b"y" * 10_000)
    links = {
        os.stat(path).st_nlink for path in (root / "topic-root").rglob("target/*") if path.is_file()
    }
    assert links == {5}  # one inode, five names
    assert all(bodies(s) == ["y" * 10_000] for s in subscribers)
    for subscriber in subscribers:
        subscriber.close()


def test_three_members_share_30000_messages_each_exactly_once_and_fairly(box: boxmq.Box) -> None:
    members = [box.subscribe("$share/etl/sensors/+", f"w{i}", max_in_flight=10) for i in range(3)]
    for index in range(30_000):
        box.publish("sensors/k", f"{index}")
    seen: dict[str, list[str]] = {m.name: [] for m in members}
    idle = 0
    while idle < 3:
        idle = 0
        for member in members:
            message = member.receive_nowait()
            if message is None:
                idle += 1
                continue
            seen[member.name].append(message.text())
            message.ack()
    everything = [body for got in seen.values() for body in got]
    assert sorted(everything, key=int) == [str(i) for i in range(30_000)]
    shares = sorted(len(got) for got in seen.values())
    assert shares[-1] - shares[0] <= 30, shares  # round-robin: within one window of each other
    for member in members:
        member.close()


def test_a_member_leaving_hands_its_locks_to_the_others_and_the_last_ends_the_group(
    box: boxmq.Box, root: Path
) -> None:
    a = box.subscribe("$share/g/jobs", "a", max_in_flight=5)
    b = box.subscribe("$share/g/jobs", "b", max_in_flight=5)
    for index in range(4):
        box.publish("jobs", f"{index}")
    held = [a.receive_nowait() for _ in range(2)]
    assert all(m is not None for m in held)
    a.close()
    again = drain(b)
    assert len(again) == 4
    box.publish("jobs", "undelivered")
    b.close()  # the last member: the group and its undelivered message are deleted
    assert not any((root / "topic-root").rglob("share.g"))
    with box.subscribe("$share/g/jobs", "c") as c:
        assert drain(c) == []


def test_unsubscribe_from_a_share_group_says_whether_it_was_a_member(
    box: boxmq.Box, root: Path
) -> None:
    assert box.unsubscribe("$share/g/jobs", "a") is False  # no such group: nothing ended
    member = box.subscribe("$share/g/jobs", "a")
    assert box.unsubscribe("$share/g/jobs", "b") is False  # not a member: the group stays
    assert box.topics.members_of("g", "jobs") == ["a"]
    assert box.unsubscribe("$share/g/jobs", "a") is True  # the last member: the group ends
    assert not any((root / "topic-root").rglob("share.g"))
    member.close()  # its membership ended already: nothing to do
    assert box.unsubscribe("$share/g/jobs", "a") is False


def test_the_last_subscription_to_a_filter_takes_its_folder_with_it(
    box: boxmq.Box, root: Path
) -> None:
    """A share group's end left its filter's folders behind, one empty pair per filter ever
    subscribed (`topic-root/sensors%2F%2B%2Ftemp/.subscriptions/`); another subscription to
    the filter keeps them, and a subscribe after makes them again."""
    topic_root = root / "topic-root"

    def filters() -> list[str]:
        return sorted(p.name for p in topic_root.iterdir() if not p.name.startswith("."))

    member = box.subscribe("$share/g/sensors/+/temp", "a")
    plain = box.subscribe("sensors/+/temp", "p", durable=True)
    assert filters() == ["sensors%2F%2B%2Ftemp"]
    member.close()  # the group's last member: the group ends, the plain subscription stays
    assert filters() == ["sensors%2F%2B%2Ftemp"]
    plain.close()
    assert box.unsubscribe("sensors/+/temp", "p") is True
    assert filters() == []
    with box.subscribe("$share/g/sensors/+/temp", "b") as again:
        box.publish("sensors/1/temp", b"21")
        assert bodies(again) == ["21"]
    assert filters() == []


def test_retained_last_per_topic_deleted_by_empty_never_to_shared(
    root: Path, box: boxmq.Box
) -> None:
    box.publish("sensors/kitchen/temp", "20", retain=True)
    box.publish("sensors/kitchen/temp", "21.5", retain=True)
    box.publish("sensors/hall/temp", "19", retain=True)
    box.publish("sensors/hall/temp", "", retain=True)  # deletes it
    with boxmq.open(root, fsync="never") as restarted:  # survives a restart
        with restarted.subscribe("sensors/+/temp", "dash") as plain:
            got = drain(plain)
            assert [(m.topic, m.text(), m.retained) for m in got] == [
                ("sensors/kitchen/temp", "21.5", True)
            ]
        with restarted.subscribe("$share/g/sensors/+/temp", "w") as shared:
            assert drain(shared) == []


def test_a_damaged_retained_message_is_passed_by_not_the_subscriptions_failure(
    root: Path, box: boxmq.Box
) -> None:
    """A power cut under fsync interval or never can leave a retained message renamed into
    place with its data never written: empty, or garbage. Reading it raised, so every
    subscription whose filter matched its topic failed (an MQTT SUBSCRIBE closed its
    connection), and the other retained messages never came either."""
    box.publish("sensors/kitchen/temp", "20", retain=True)
    box.publish("sensors/hall/temp", "19", retain=True)
    box.publish("sensors/cellar/temp", "12", retain=True)
    retained = sorted(retained_folder(root).iterdir())
    retained[0].write_bytes(b"")
    retained[1].write_bytes(b"\x00" * 30)
    with boxmq.open(root, fsync="never") as restarted:
        with restarted.subscribe("sensors/+/temp", "dash") as plain:
            assert len(drain(plain)) == 1  # the one left whole
        restarted.publish("sensors/kitchen/temp", "21", retain=True)
        restarted.publish("sensors/hall/temp", "18", retain=True)
        with restarted.subscribe("sensors/#", "all") as everything:
            assert bodies(everything) == ["12", "18", "21"]  # the next ones replaced them


def test_a_subscription_made_while_its_retained_message_is_replaced_ends_with_the_new_one(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscription made while a retained publish of this process has routed its copies
    and not yet replaced the stored one read the old one: it got the old message as retained,
    never the new one, and was left with a value the topic no longer holds. The two are one
    step each now, one at a time."""
    box.publish("state/door", "closed", retain=True)
    replacing, go = threading.Event(), threading.Event()
    store = type(box.topics._retained)
    original = store.replace

    def slow_replace(self: object, staged: object) -> None:
        replacing.set()
        go.wait(10)
        original(self, staged)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "replace", slow_replace)
    publisher = threading.Thread(
        target=box.publish, args=("state/door", "open"), kwargs={"retain": True}
    )
    publisher.start()
    assert replacing.wait(10)
    made: list[Subscriber] = []
    subscribing = threading.Thread(target=lambda: made.append(box.subscribe("state/#", "panel")))
    subscribing.start()
    subscribing.join(0.3)  # it waits for the publish, or (before) read the old message
    go.set()
    publisher.join(10)
    subscribing.join(10)
    [panel] = made
    with panel:
        got = [(m.text(), m.retained) for m in drain(panel)]
    assert got in ([("open", True)], [("closed", True), ("open", False)])


def test_each_share_group_member_gets_at_most_its_own_qos(box: boxmq.Box) -> None:
    """MQTT-234 note 2: the granted QoS of the subscribing session is respected. A group's
    copies are stored at the highest QoS any member was granted, and a member granted QoS 0
    was given QoS 2 messages as QoS 2 (`Message.qos`, `subscribe --json`)."""
    with (
        box.subscribe("$share/g/q/#", "low", qos=0, max_in_flight=10) as low,
        box.subscribe("$share/g/q/#", "high", qos=2, max_in_flight=10) as high,
    ):
        for n in range(6):
            box.publish("q/x", str(n), qos=2)
        seen: dict[str, set[int]] = {"low": set(), "high": set()}
        for _ in range(20):
            for name, member in (("low", low), ("high", high)):
                for message in member.receive_ready():
                    seen[name].add(message.qos)
                    message.ack()
        assert seen == {"low": {0}, "high": {2}}  # round robin: each member got some


def test_a_share_group_member_resubscribed_gets_its_new_qos(box: boxmq.Box) -> None:
    """The cap follows `resubscribe` (an MQTT SUBSCRIBE again with another QoS): kept at the
    first grant, a member raised to QoS 2 got QoS 0, which the MQTT door settles as it sends
    (at most once), and one lowered to 0 still got QoS 2."""
    with box.subscribe("$share/g/q/#", "m", qos=0, max_in_flight=10) as member:
        for qos, expected in ((2, 2), (0, 0), (1, 1)):
            box.topics.resubscribe("$share/g/q/#", "m", qos=qos)
            box.publish("q/x", "x", qos=2)
            [message] = drain(member)
            assert message.qos == expected


def test_retained_publishes_of_one_process_do_not_wait_for_each_other(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Subscriptions wait for retained publishes (above); publishes need not wait for one
    another, each through its own commit and flush: one held at its replace does not hold up
    another (a process-wide lock over the flush had halved their rate under always)."""
    replacing, go = threading.Event(), threading.Event()
    store = type(box.topics._retained)
    original = store.replace

    def slow_replace(self: object, staged: object) -> None:
        if not replacing.is_set():
            replacing.set()
            go.wait(10)
        original(self, staged)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "replace", slow_replace)
    first = threading.Thread(target=box.publish, args=("a", "1"), kwargs={"retain": True})
    first.start()
    assert replacing.wait(10)
    second = threading.Thread(target=box.publish, args=("b", "2"), kwargs={"retain": True})
    second.start()
    second.join(10)
    done_while_held = not second.is_alive()
    go.set()
    first.join(10)
    assert done_while_held


def test_non_durable_subscriptions_live_in_memory(box: boxmq.Box, root: Path) -> None:
    with box.subscribe("news/#", "reader", qos=0, durable=False) as reader:
        box.publish("news/today", "hello", qos=1)
        [message] = drain(reader)
        assert (message.text(), message.qos) == ("hello", 0)  # granted QoS caps delivery
    assert not any((root / "topic-root").rglob("client.reader"))


def test_a_memory_subscription_gets_a_retained_message_at_its_published_qos_if_lower(
    box: boxmq.Box,
) -> None:
    box.publish("news/today", "old", qos=0, retain=True)
    box.publish("news/later", "kept", qos=2, retain=True)
    with box.subscribe("news/#", "reader", qos=1, durable=False) as reader:
        got = sorted((m.text(), m.qos, m.retained) for m in drain(reader))
        assert got == [("kept", 1, True), ("old", 0, True)]  # the lower of the two, as live


def test_a_memory_subscription_gets_no_retained_message_whose_expiry_passed(
    tmp_path: Path,
) -> None:
    clock = boxmq.ManualClock()
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        box.publish("news/today", "stale", retain=True, expires_in=1.0)
        box.publish("news/later", "fresh", retain=True, expires_in=60.0)
        clock.advance(5.0)
        with box.subscribe("news/#", "reader", durable=False) as reader:
            assert [m.text() for m in drain(reader)] == ["fresh"]
        with box.subscribe("news/#", "dash") as durable:  # the same as a dropbox's copies
            assert [m.text() for m in drain(durable)] == ["fresh"]


def test_a_memory_subscriber_is_not_handed_a_message_that_expired_while_it_waited(
    tmp_path: Path,
) -> None:
    clock = boxmq.ManualClock()
    with (
        boxmq.open(tmp_path, fsync="never", clock=clock) as box,
        box.subscribe("news/#", "reader", durable=False) as reader,
        box.subscribe("news/#", "dash") as durable,
    ):
        box.publish("news/today", "stale", expires_in=1.0)
        box.publish("news/today", "fresh", expires_in=60.0)
        clock.advance(5.0)
        assert [m.text() for m in drain(reader)] == ["fresh"]
        assert [m.text() for m in drain(durable)] == ["fresh"]  # as a dropbox's copy


def test_granted_qos_caps_delivery_and_is_stored(box: boxmq.Box) -> None:
    with box.subscribe("q/#", "s", qos=1) as subscriber:
        box.publish("q/x", "a", qos=2)
        box.publish("q/x", "b", qos=0)
        assert sorted((m.text(), m.qos) for m in drain(subscriber)) == [("a", 1), ("b", 0)]


def test_durable_subscription_collects_while_away(root: Path) -> None:
    with boxmq.open(root, fsync="never") as box:
        box.subscribe("alerts/#", "pager").close()
        box.publish("alerts/fire", "!")
    with boxmq.open(root, fsync="never") as box, box.subscribe("alerts/#", "pager") as pager:
        assert bodies(pager) == ["!"]
        assert box.unsubscribe("alerts/#", "pager")


def test_no_local_skips_the_publisher(box: boxmq.Box) -> None:
    with box.subscribe("chat/#", "me", no_local=True) as me, box.subscribe("chat/#", "you") as you:
        box.publish("chat/room", "hi", source="me")
        assert bodies(me) == []
        assert bodies(you) == ["hi"]


@pytest.mark.parametrize(
    "bad", ["$share/g", "$share//x", "$share/g/", "$share/a+b/x", "a/#/b", "a+", ""]
)
def test_bad_filters_are_refused(box: boxmq.Box, bad: str) -> None:
    with pytest.raises(boxmq.InvalidTopic):
        box.subscribe(bad, "s")


@pytest.mark.parametrize("bad", ["a/+", "a/#", "", "nul\0"])
def test_bad_topic_names_are_refused(box: boxmq.Box, bad: str) -> None:
    with pytest.raises(boxmq.InvalidTopic):
        box.publish(bad, "x")


@pytest.mark.parametrize("topic", ["$SYS", "$SYS/broker/version", "$SYS/app/x"])
def test_the_servers_own_sys_topics_are_refused(box: boxmq.Box, root: Path, topic: str) -> None:
    """A `$SYS` topic is a server's own (docs/mqtt.md): `box.publish('$SYS/broker/version',
    ..., retain=True)` was stored, and a new MQTT subscriber got two retained messages on one
    topic, the server's and this one. It is refused as a wildcard is, nothing written, by
    `publish_many` and `intake.assured` too (the MQTT door's, which an ACL may allow, are not
    the user's: `reserved`)."""
    with box.subscribe("$SYS/#", "watcher") as watcher:
        with pytest.raises(boxmq.InvalidTopic, match=r"\$SYS topics are the MQTT server's own"):
            box.publish(topic, "fake", retain=True)
        with pytest.raises(boxmq.InvalidTopic, match=r"\$SYS topics are the MQTT server's own"):
            box.topics.publish_many([Publication(topic, b"fake")])
        with pytest.raises(boxmq.InvalidTopic, match=r"\$SYS topics are the MQTT server's own"):
            box.intake.assured("src", "1", b"fake", topic=topic)
        assert _message_files(root) == []
        assert drain(watcher) == []
    with box.subscribe("$SYSTEM/#", "other") as other:  # a first level that is not `$SYS`
        box.publish("$SYSTEM/x", "ok")
        assert bodies(other) == ["ok"]


@pytest.mark.parametrize("filter", ["$SYS/#", "$SYS", "$share/g/$SYS/broker/#"])
def test_a_subscription_under_sys_is_made_and_logged_as_getting_no_figures(
    box: boxmq.Box, caplog: pytest.LogCaptureFixture, filter: str
) -> None:
    """`box.subscribe('$SYS/#', ...)` (mqtt.md's figures, asked of the API) waited in silence:
    each `boxmq serve` answers them from memory to its MQTT clients, never through the root
    (found on a new user's tour; the CLI warned already). Still made, since an MQTT client an
    ACL lets publish there reaches it; said as the API's other warnings are, a WARNING of the
    `boxmq` logger, not a warnings.warn that `filterwarnings = error` would make a raise."""
    with caplog.at_level(logging.WARNING, logger="boxmq"):
        with box.subscribe(filter, "watcher") as watcher:
            assert watcher.filter.filter.startswith("$SYS")
        with box.subscribe("sys/#", "quiet"), box.subscribe("$SYSTEM/#", "other"):
            pass
    told = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(told) == 1, caplog.text
    assert told[0].getMessage() == f"watcher subscribed to {filter}, {sys_unserved('it')}"
    assert told[0].name == "boxmq"


def _message_files(root: Path) -> list[Path]:
    """Every file a publication can leave: copies in the dropboxes, staging files."""
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and path.parent.name in ("target", "working")
    ]


def test_a_batch_reaches_each_subscription_in_order_with_its_qos(box: boxmq.Box) -> None:
    with (
        box.subscribe("$share/g/sensors/+", "w", qos=2, max_in_flight=10) as group,
        box.subscribe("sensors/1", "one", qos=1, max_in_flight=10) as durable,
        box.subscribe("sensors/#", "all", qos=0, durable=False) as memory,
    ):
        box.topics.publish_many(
            [
                Publication("sensors/1", b"a", qos=2),
                Publication("sensors/2", b"b", qos=1),
                Publication("sensors/1", b"c", qos=0),
                Publication("other", b"d", qos=1),
            ]
        )
        assert [(m.body, m.qos) for m in drain(group)] == [(b"a", 2), (b"b", 1), (b"c", 0)]
        assert [(m.body, m.qos) for m in drain(durable)] == [(b"a", 1), (b"c", 0)]
        assert [(m.body, m.qos) for m in drain(memory)] == [(b"a", 0), (b"b", 0), (b"c", 0)]


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_publish_many_then_tells_once_the_batch_is_committed(tmp_path: Path, fsync: str) -> None:
    with (
        boxmq.open(tmp_path / "root", fsync=fsync) as box,
        box.subscribe("$share/g/s/#", "w", max_in_flight=10) as group,
        box.subscribe("s/#", "mem", durable=False) as memory,
    ):
        told: queue.Queue[list[OSError | None]] = queue.Queue()
        batch = [Publication("s/1", b"a"), Publication("s/2", b"b")]
        ids = box.topics.publish_many_then(batch, told.put)
        assert told.get(timeout=5) == [None, None]
        assert [(m.id, m.body) for m in drain(group)] == list(zip(ids, [b"a", b"b"], strict=True))
        assert [m.body for m in drain(memory)] == [b"a", b"b"]


def test_publish_many_then_lets_subscribers_take_the_batch_before_its_last_flush(
    tmp_path: Path, held_flush: HeldFlush
) -> None:
    """Under `always`, `ready` comes once the messages are in target/ and handed over: a
    share group takes them while the directories' flush, and so `committed`, still wait."""
    with (
        boxmq.open(tmp_path / "root", fsync="always") as box,
        box.subscribe("$share/g/s/#", "w", max_in_flight=10) as group,
    ):
        told: queue.Queue[list[OSError | None]] = queue.Queue()
        ready = threading.Event()
        batch = [Publication("s/1", b"a"), Publication("s/2", b"b")]
        box.topics.publish_many_then(batch, told.put, ready.set)
        assert ready.wait(5)
        assert held_flush.reached.wait(5)
        assert [m.body for m in drain(group)] == [b"a", b"b"]
        assert told.empty()
        held_flush.release()
        assert told.get(timeout=5) == [None, None]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (Publication("sensors/+", b"x"), boxmq.InvalidTopic),
        (Publication("sensors/" + "t" * 250, b"x"), boxmq.MetadataTooLong),
        (Publication("sensors/1", b"x", qos=3), boxmq.InvalidArgument),
    ],
)
def test_a_bad_publication_fails_its_batch_before_anything_is_written(
    box: boxmq.Box, root: Path, bad: Publication, error: type[Exception]
) -> None:
    with box.subscribe("$share/g/#", "w", max_in_flight=10) as group:
        batch = [Publication("sensors/1", b"before"), bad, Publication("sensors/1", b"after")]
        with pytest.raises(error):
            box.topics.publish_many(batch)
        with pytest.raises(error):
            box.topics.publish_many_then(batch, lambda _: pytest.fail("nothing to commit"))
        assert _message_files(root) == []
        assert drain(group) == []


@pytest.mark.parametrize("length", [100, 250])  # over a put's limit; over a name's own
def test_a_topic_too_long_is_refused_with_no_subscriber_too(box: boxmq.Box, length: int) -> None:
    with pytest.raises(boxmq.MetadataTooLong, match="use a shorter topic"):
        box.publish("t" * length, "x")
    with pytest.raises(boxmq.MetadataTooLong, match="use a shorter topic") as refused:
        box.topics.publish_many([Publication("t" * length, b"x")])
    assert "fewer properties" not in str(refused.value)  # none were given
    with pytest.raises(boxmq.MetadataTooLong, match="use a shorter topic or fewer properties"):
        box.publish("t" * length, "x", properties={"k": "v"})


def test_the_sweep_deletes_staging_files_a_dead_publisher_left(box: boxmq.Box, root: Path) -> None:
    # A publisher killed between writing a publication's staging file and linking it leaves
    # the file in topic-root/.incoming/working/; the sweep deletes it once it is older than
    # abandon_after (an hour), and leaves the exactly-once messages there alone.
    working = root / "topic-root" / ".incoming" / "working"
    working.mkdir(parents=True, exist_ok=True)
    old, fresh, assured = (working / n for n in (".fanout-1-a", ".fanout-2-a", "4.1.B"))
    for path in (old, fresh, assured):
        path.write_bytes(b"body")
    two_hours_ago = time.time() - 7200
    for path in (old, assured):
        os.utime(path, (two_hours_ago, two_hours_ago))
    box.sweep()
    assert sorted(p.name for p in working.iterdir()) == sorted([fresh.name, assured.name])


def test_a_share_group_can_dispatch_its_own_way(tmp_path: Path) -> None:
    """group_dispatch: "sticky" keeps a member fed while it has room; the other group keeps
    the box's round-robin, which alternates."""
    with boxmq.open(tmp_path / "root", fsync="never", group_dispatch={"sticky": "sticky"}) as box:
        members = {
            group: [box.subscribe(f"$share/{group}/jobs", name, max_in_flight=10) for name in "ab"]
            for group in ("sticky", "plain")
        }
        box.topics.publish_many([Publication("jobs", b"%d" % i) for i in range(4)])
        counts = {}
        for group, (first, second) in members.items():
            # The first receive takes the whole dispatch; the second sees what came its way.
            counts[group] = sorted([len(drain(first)), len(drain(second))])
            first.close()
            second.close()
        assert counts == {"sticky": [0, 4], "plain": [2, 2]}


def test_an_unknown_dispatch_strategy_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(boxmq.InvalidArgument, match="'fair': choose one of round-robin"):
        boxmq.open(tmp_path / "root", group_dispatch={"g": "fair"})


@pytest.mark.parametrize("group", ["", "etl/sensors", "$share/etl", "a+b", "#"])
def test_a_group_no_client_can_name_is_refused_by_name(tmp_path: Path, group: str) -> None:
    # MQTT 5.0 §4.8.2: a share name is not empty and has no '/', '+' or '#'; the strategy of
    # such a group would never be used. The config file's [share_groups] says the same.
    with pytest.raises(boxmq.InvalidArgument, match=f"group_dispatch: {re.escape(repr(group))} is"):
        boxmq.open(tmp_path / "root", group_dispatch={group: "sticky"})
    assert not (tmp_path / "root").exists()  # refused before anything is made


def test_hash_by_key_in_a_share_group_keeps_a_topic_on_one_member(root: Path) -> None:
    # No JMSXGroupID: the key of a subscription's copy is the topic it was published to
    with boxmq.open(root, fsync="never", group_dispatch={"etl": "hash-by-key"}) as box:
        members = {
            name: box.subscribe("$share/etl/sensors/#", name, max_in_flight=100)
            for name in ("a", "b", "c")
        }
        topics = [f"sensors/{room}/temp" for room in ("hall", "kitchen", "attic", "cellar")]
        for index in range(40):
            box.publish(topics[index % 4], f"{index}")
        owner: dict[str | None, str] = {}
        for name, member in members.items():
            for message in drain(member):
                assert owner.setdefault(message.topic, name) == name
            member.close()
        assert sorted(owner, key=str) == sorted(topics)
        assert len(set(owner.values())) > 1


def seen(message: boxmq.Message) -> tuple[object, ...]:
    """Everything a receiver reads of a message, but its delivery count."""
    return (
        message.id,
        message.body,
        message.topic,
        message.qos,
        message.priority,
        message.properties,
        message.expiration,
        message.timestamp,
        message.message_class,
        message.retained,
        message.published_retained,
        message.correlation_id,
        message.reply_to,
        message.type,
    )


_TOPICS = st.lists(st.sampled_from(["a", "b", "x y", "é", "50%", "."]), min_size=1, max_size=3)
_VALUES = st.one_of(
    st.integers(-(2**31), 2**31 - 1), st.text(alphabet="az :%&=é", max_size=8), st.booleans()
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            _TOPICS,
            st.sampled_from([0, 1, 2]),
            st.dictionaries(st.sampled_from(["tenant", "n", "k"]), _VALUES, max_size=2),
            st.sampled_from([None, 3600.0]),
            st.binary(max_size=50),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_publication_offered_in_process_is_the_message_its_file_names(
    tmp_path_factory: pytest.TempPathFactory,
    publications: list[tuple[list[str], int, dict[str, object], float | None, bytes]],
) -> None:
    """A committed copy is handed to this process's share group with its envelope and body,
    not read back: what a member receives is what another process, which reads the file and
    decodes its name, receives."""
    root = tmp_path_factory.mktemp("offered")
    with boxmq.open(root, fsync="never") as here, boxmq.open(root, fsync="never") as there:
        member = here.subscribe("$share/g/#", "here", qos=2, max_in_flight=100)
        batch = [
            Publication("/".join(levels), body, qos, properties or None, expires)  # type: ignore[arg-type]
            for levels, qos, properties, expires, body in publications
        ]
        try:
            ids = here.topics.publish_many(batch)
        except boxmq.MetadataTooLong:  # escaped text takes up to 6 bytes a character: too long
            reject()
        offered = {m.id: m for m in member.receive_ready()}
        assert sorted(offered) == sorted(ids)
        # The other member (the group ends with its last one) reads the files.
        other = there.subscribe("$share/g/#", "there", qos=2, max_in_flight=100)
        for message in offered.values():
            message.unlock()
        member.close()
        read = {m.id: m for m in other.receive_ready()}
        assert sorted(read) == sorted(ids)
        for message_id, message in offered.items():
            assert seen(message) == seen(read[message_id])
        for message in read.values():
            message.ack()


def test_a_member_given_another_process_s_message_by_another_member_s_look_is_told(
    root: Path, box: boxmq.Box
) -> None:
    """A broker's share-group members receive only when told (`listen_offered`). One
    member's look read the files another process put and claimed some for a second member
    of this process; a next look (the first one's ack) read the news of those claims, so
    the broker's read_news told nobody, and the second member's messages waited for its
    next ack or the broker's walk (5 s). It is told at the claim (found by a share-group
    hunt)."""
    told: list[tuple[list[str], str]] = []
    box.listen_offered(lambda consumers, queue: told.append((list(consumers), queue)))
    first = box.subscribe("$share/g/t", "first", max_in_flight=1)
    second = box.subscribe("$share/g/t", "second", max_in_flight=1)
    assert first.receive_ready() == second.receive_ready() == []
    with boxmq.open(root, fsync="never") as other:
        other.topics.publish_many([Publication("t", b"1"), Publication("t", b"2")])
    [taken] = first.receive_ready()  # "2" is claimed for `second`, round-robin
    taken.ack()
    assert first.receive_ready() == []  # reads the news of the claims
    box.read_news()
    assert (["second"], "$share/g/t") in told
    assert [m.body for m in second.receive_ready()] == [b"2"]
    first.close()
    second.close()


def test_a_member_told_by_another_member_s_look_may_receive_from_the_listener(
    root: Path, box: boxmq.Box
) -> None:
    """Listeners are called with the queue's mutex free (live_state.py): one that has another
    thread receive for the member told, and waits for it, does not wait for itself. The
    tell of another member's claims came from inside the look, under the mutex, where the
    thread waited until the listener gave up."""
    second = box.subscribe("$share/g/t", "second", max_in_flight=1)
    got: list[bytes] = []
    ended: list[bool] = []

    def listener(consumers: list[ConsumerId], queue: str) -> None:
        if "second" in consumers:
            helper = threading.Thread(
                target=lambda: got.extend(m.body for m in second.receive_ready()), daemon=True
            )
            helper.start()
            helper.join(5.0)
            ended.append(not helper.is_alive())

    box.listen_offered(listener)
    first = box.subscribe("$share/g/t", "first", max_in_flight=1)
    assert first.receive_ready() == second.receive_ready() == []
    with boxmq.open(root, fsync="never") as other:
        other.topics.publish_many([Publication("t", b"1"), Publication("t", b"2")])
    [taken] = first.receive_ready()  # the other is claimed for `second`, which is told
    box.forget_offered(listener)
    assert ended == [True]
    assert [taken.body, *got] in ([b"1", b"2"], [b"2", b"1"])
    first.close()
    second.close()


def test_a_member_given_this_process_s_message_by_another_member_s_look_is_told_once(
    box: boxmq.Box,
) -> None:
    """This process's puts tell every member (`sent`): a claim for a member is not told
    again, which would pump it twice per message."""
    told: list[tuple[list[str], str]] = []
    box.listen_offered(lambda consumers, queue: told.append((list(consumers), queue)))
    first = box.subscribe("$share/g/t", "first", max_in_flight=1)
    second = box.subscribe("$share/g/t", "second", max_in_flight=1)
    box.topics.publish_many([Publication("t", b"1"), Publication("t", b"2")])
    assert [m.body for m in first.receive_ready()] == [b"1"]
    assert told == [(["first", "second"], "$share/g/t")]
    assert [m.body for m in second.receive_ready()] == [b"2"]
    first.close()
    second.close()


def test_a_share_group_in_this_process_takes_a_publication_without_reading_its_file(
    box: boxmq.Box, file_reads: list[str]
) -> None:
    member = box.subscribe("$share/g/sensors/+", "m", max_in_flight=10)
    box.publish("sensors/kitchen", b"21.5")
    message = member.receive(timeout=5)
    assert message is not None
    assert message.body == b"21.5"
    assert message.topic == "sensors/kitchen"
    assert file_reads == []


@pytest.mark.parametrize("filter", ["jobs/#", "$share/g/jobs/#"])
def test_a_subscriber_that_outlives_its_process_gets_back_what_it_held(
    root: Path, filter: str
) -> None:
    """process_bound=False (an MQTT persistent session): what it received and never settled
    stays locked to it when its process lets go, and is its own again in the next one,
    its delivery not counted twice; its share group's other member never gets it."""
    with boxmq.open(root, fsync="never") as first:
        subscriber = first.subscribe(filter, "device", process_bound=False)
        first.publish("jobs/1", b"held")
        message = subscriber.receive(timeout=5)
        assert message is not None
        subscriber.detach()  # a server shutting down: the session lives on
    with boxmq.open(root, fsync="never") as second:
        if filter.startswith("$share"):
            other = second.subscribe(filter, "other")
            assert other.receive(timeout=0.5) is None
        again = second.subscribe(filter, "device", process_bound=False)
        back = again.receive(timeout=5)
        assert back is not None
        assert (back.body, back.id, back.delivery_count) == (b"held", message.id, 1)
        back.ack()
        again.close()


@pytest.mark.parametrize(
    ("filter", "ends"),
    [
        *[(f, e) for f in ("jobs/#", "$share/g/jobs/#") for e in ("detach", "box close")],
        ("jobs/#", "close"),  # a share group's last member's close ends the group
    ],
)
def test_what_a_subscriber_took_back_and_did_not_receive_again_was_still_delivered(
    root: Path, filter: str, ends: str
) -> None:
    """A message that a subscriber with process_bound=False took back at its subscribe (it
    received it in an earlier process) is a delivered one until it is settled, received
    here again or not: `detach` leaves it locked to it, as it left it the first time, and a
    close releases it with its delivery counted (it went back unchanged, in a loop of
    restarts a message never acknowledged was offered for ever without reaching error/)."""
    with boxmq.open(root, fsync="never") as first:
        subscriber = first.subscribe(filter, "device", process_bound=False)
        first.publish("jobs/1", b"held")
        assert subscriber.receive(timeout=5) is not None
        subscriber.detach()
        again = first.subscribe(filter, "device", process_bound=False)
        assert again.holding() == 1  # taken back, not received again
        if ends == "detach":
            again.detach()
        elif ends == "close":
            again.close()
    processing = [f for _, _, files in os.walk(root / "topic-root") for f in files if "@" in f]
    assert len(processing) == (1 if ends == "detach" else 0)
    with boxmq.open(root, fsync="never") as second:
        last = second.subscribe(filter, "device", process_bound=False)
        back = last.receive(timeout=5)
        assert back is not None
        assert (back.body, back.delivery_count) == (b"held", 1 if ends == "detach" else 2)
        back.ack()
        last.close()


@pytest.mark.parametrize("filter", ["jobs/#", "$share/g/jobs/#"])
def test_a_subscriber_that_outlives_its_process_takes_back_what_another_process_left_it(
    root: Path, filter: str
) -> None:
    """Subscribed under one name in two processes at once (an MQTT session whose client
    connected to a second server before the first noticed): what the other received and
    left locked to it (`detach`) is this one's again at `take_back`, in its order before
    what was claimed here since and not received yet; what this one holds is not taken
    twice, nor anything at a second look."""
    with boxmq.open(root, fsync="never") as here, boxmq.open(root, fsync="never") as there:
        mine = here.subscribe(filter, "device", process_bound=False, max_in_flight=10)
        theirs = there.subscribe(filter, "device", process_bound=False)
        here.publish("jobs/1", b"held here")
        [held] = mine.receive_ready(most=1)
        here.publish("jobs/1", b"theirs")
        taken = theirs.receive(timeout=5)
        assert taken is not None
        assert taken.body == b"theirs"
        theirs.detach()
        for body in (b"later 1", b"later 2"):
            here.publish("jobs/1", body)
        assert [m.body for m in mine.receive_ready(most=1)] == [b"later 1"]  # 2 claimed
        assert mine.take_back() == 1
        assert mine.take_back() == 0
        back = mine.receive_ready()
        assert [(m.body, m.delivery_count) for m in back] == [(b"theirs", 1), (b"later 2", 1)]
        assert held.body == b"held here"
        held.ack()


class _Pause:
    """Stops the first thread that calls `function` (before it runs) until `go` is set."""

    def __init__(self, function: Callable[..., object]) -> None:
        self.function = function
        self.reached, self.go = threading.Event(), threading.Event()

    def __call__(self, *args: object, **kwargs: object) -> object:
        if not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(timeout=10)
        return self.function(*args, **kwargs)


@pytest.mark.parametrize("race", ["none", "leave-then-join", "join-then-leave"])
def test_a_share_group_made_again_while_its_last_member_leaves_is_read_afresh(
    root: Path, monkeypatch: pytest.MonkeyPatch, race: str
) -> None:
    """A share group's last member leaving deletes it (MQTT-234); a member joining it on
    another thread meanwhile (a broker's disk threads) gets either the group kept alive or a
    new one, read by a new engine: never one the leave then deletes, nor the old engine,
    closed or watching the deleted folder, which sees what another process publishes only
    at its next full rescan. `none`: one after the other; `leave-then-join`: the member
    joins while the leave is paused between its "no member left" and the deletion (a new
    group); `join-then-leave`: the last member leaves while the join is paused between its
    record and its membership (the group is kept)."""
    filter = "$share/g/jobs/#"
    with boxmq.open(root, fsync="never") as box, boxmq.open(root, fsync="never") as other:
        # Only the watch tells of what another process publishes: no rescan within the test.
        box.options = replace(box.options, rescan_interval=3600.0)
        last = box.subscribe(filter, "first", max_in_flight=5)
        other.publish("jobs/1", b"to the old group")
        message = last.receive(timeout=5)
        assert message is not None
        message.ack()
        joined: queue.Queue[Subscriber | BaseException] = queue.Queue()

        def join() -> None:
            try:
                joined.put(box.subscribe(filter, "second", max_in_flight=5))
            except BaseException as error:
                joined.put(error)

        if race == "none":
            last.close()
            join()
        else:
            pause = _Pause(
                layout.remove_subscription if race == "leave-then-join" else layout.add_member
            )
            name = "remove_subscription" if race == "leave-then-join" else "add_member"
            monkeypatch.setattr(layout, name, pause)
            first, then = (last.close, join) if race == "leave-then-join" else (join, last.close)
            threads = [threading.Thread(target=first)]
            threads[0].start()
            assert pause.reached.wait(timeout=10)
            threads.append(threading.Thread(target=then))
            threads[1].start()
            time.sleep(0.3)  # the other step would have run its course by now, if let
            pause.go.set()
            for thread in threads:
                thread.join(timeout=10)
        member = joined.get(timeout=10)
        assert isinstance(member, Subscriber), member
        # The group on disk (its record, its member), for the publishers of every process.
        assert [text for text, _ in box.topics.subscribed("second")] == [filter]
        assert box.topics.members_of("g", "jobs/#") == ["second"]
        other.publish("jobs/2", b"to the group now")
        message = member.receive(timeout=2)  # not Closed, and no waiting for a rescan
        assert message is not None
        assert message.body == b"to the group now"
        message.ack()
        member.close()
        assert not any((root / "topic-root").rglob("share.g"))


def test_a_share_group_another_process_ended_and_made_again_here_is_read_afresh(
    root: Path,
) -> None:
    """The last member of this process leaves a share group that a member of another process
    keeps; that one leaves too, and ends the group there; a member joining here again is read
    by a new engine, watching the new folder, not by the one kept from before."""
    filter = "$share/g/jobs/#"
    with (
        boxmq.open(root, fsync="never") as here,
        boxmq.open(root, fsync="never") as there,
        boxmq.open(root, fsync="never") as publisher,
    ):
        # Only the watch tells of what another process publishes: no rescan within the test.
        here.options = replace(here.options, rescan_interval=3600.0)
        mine, theirs = here.subscribe(filter, "mine"), there.subscribe(filter, "theirs")
        publisher.publish("jobs/1", b"one")
        publisher.publish("jobs/2", b"two")
        for member in (mine, theirs):
            message = member.receive(timeout=5)
            assert message is not None
            message.ack()
        mine.close()  # the group lives on: `theirs`
        theirs.close()  # the last member: the group is deleted, by the other process
        assert not any((root / "topic-root").rglob("share.g"))
        with here.subscribe(filter, "again") as again:
            publisher.publish("jobs/3", b"three")
            message = again.receive(timeout=2)
            assert message is not None
            assert message.body == b"three"
            message.ack()


@pytest.mark.parametrize("limits", [{"max_in_flight": 0}, {"lock_timeout": 0}])
@pytest.mark.parametrize("filter", ["news/#", "$share/g/news/#"])
def test_a_subscribe_refused_for_its_limits_leaves_no_subscription_behind(
    tmp_path: Path, filter: str, limits: dict[str, float]
) -> None:
    """box.subscribe wrote the subscription's records, then refused the consumer's limits:
    the caller got InvalidArgument, and a durable subscription (or a share-group membership)
    stayed, collecting every publication for a subscriber that never came (found by a walk
    through the docs)."""
    with boxmq.open(tmp_path) as box:
        with pytest.raises(boxmq.InvalidArgument):
            box.subscribe(filter, "s", **limits)  # type: ignore[arg-type]
        assert box.topics.subscriptions() == []
        box.publish("news/a", b"x")
        assert box.topics.subscriptions() == []


def _full_disk(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("filter", "refused"),
    [
        ("news/#", "generation"),
        ("news/#", "retained copy"),
        ("$share/g/news/#", "generation"),
    ],
)
def test_a_subscribe_the_disk_refuses_after_its_record_leaves_no_subscription_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filter: str, refused: str
) -> None:
    """The record (and a member's file) written, then the disk refused what came after it:
    the generation that tells every process, or a retained message's copy. The caller got
    ENOSPC (MQTT: SUBACK 0x97), and the subscription stayed, collecting every publication
    for a subscriber told it had none; a persistent MQTT session took it as its own at the
    next start (found by a disk-full hunt)."""
    with boxmq.open(tmp_path / "root") as box:
        box.publish("news/a", b"retained", retain=True)
        if refused == "generation":
            monkeypatch.setattr(layout, "bump_generation", _full_disk)
        else:
            monkeypatch.setattr(Dropbox, "write_apart", _full_disk)
        with pytest.raises(OSError, match="No space"):
            box.subscribe(filter, "s")
        monkeypatch.undo()
        assert box.topics.subscriptions() == []
        box.publish("news/a", b"x")
        assert box.topics.subscriptions() == []
    with boxmq.open(tmp_path / "root") as box:
        assert box.topics.subscriptions() == []


def test_a_join_the_disk_refuses_leaves_the_group_to_its_other_members(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    with box.subscribe("$share/g/news/#", "first") as first:
        monkeypatch.setattr(layout, "bump_generation", _full_disk)
        with pytest.raises(OSError, match="No space"):
            box.subscribe("$share/g/news/#", "second")
        monkeypatch.undo()
        assert box.topics.members_of("g", "news/#") == ["first"]
        box.publish("news/a", b"x")
        assert bodies(first) == ["x"]


def test_a_subscribe_again_the_disk_refuses_keeps_the_subscription_and_its_messages(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    box.publish("news/b", b"retained", retain=True)
    box.subscribe("news/#", "s", send_retained=False).close()
    box.publish("news/a", b"waiting")
    monkeypatch.setattr(Dropbox, "write_apart", _full_disk)
    with pytest.raises(OSError, match="No space"):
        box.subscribe("news/#", "s")
    monkeypatch.undo()
    with box.subscribe("news/#", "s", send_retained=False) as again:
        assert bodies(again) == ["waiting"]


def test_a_subscribe_the_disk_refuses_over_an_unreadable_record_keeps_its_messages(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscription whose record no boxmq reads keeps its messages (the test above), but a
    subscribe over it that the disk refused after writing the record took it for one it had
    made, and deleted it with them (found by the second read)."""
    box.subscribe("a/#", "kept", process_bound=False).close()
    box.publish("a/1", "before")
    record = Path(layout.subscription_path(str(box.root), "a/#", "client.kept"), ".subscription")
    record.write_text("")  # renamed into place, its data lost to a power cut (fsync never)
    monkeypatch.setattr(layout, "bump_generation", _full_disk)
    with pytest.raises(OSError, match="No space"):
        box.subscribe("a/#", "kept", process_bound=False)
    monkeypatch.undo()
    with box.subscribe("a/#", "kept", process_bound=False) as again:
        message = again.receive(timeout=5)
        assert message is not None
        assert message.body == b"before"


def test_a_subscribe_again_the_disk_refuses_to_tell_leaves_no_stale_routing_here(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record of an existing subscription rewritten (No Local now), then the generation's
    write refused: this process's router kept the old record's entry until the next change
    of the subscriptions, and copied its own publications to the subscriber the record says
    to skip (found by a review of `_unregister`)."""
    box.subscribe("news/#", "s").close()
    box.publish("elsewhere", b"x")  # this process's router looked: in step with the records
    monkeypatch.setattr(layout, "bump_generation", _full_disk)
    with pytest.raises(OSError, match="No space"):
        box.subscribe("news/#", "s", no_local=True)
    monkeypatch.undo()
    box.publish("news/a", b"own", source="s")
    with box.subscribe("news/#", "s", no_local=True, send_retained=False) as again:
        assert bodies(again) == []


@pytest.mark.parametrize("filter", ["news/#", "$share/g/news/#"])
def test_an_unsubscribe_done_is_told_done_when_the_disk_refuses_to_tell_the_others(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, filter: str
) -> None:
    """The subscription deleted (a member's file), then the generation's write refused: the
    unsubscribe raised ENOSPC (MQTT: UNSUBACK 0x80, which says the subscription stays) with
    the subscription gone (found by a disk-full hunt)."""
    box.subscribe("news/#", "other").close()
    with box.subscribe(filter, "s"):  # a share group's member leaves as it closes
        monkeypatch.setattr(layout, "bump_generation", _full_disk)
        with caplog.at_level(logging.WARNING, logger="boxmq"):
            assert box.unsubscribe(filter, "s") is True
        monkeypatch.undo()
    assert "told only at the next change" in caplog.text
    assert [(s.filter, s.subscriber) for s in box.topics.subscriptions()] == [("news/#", "other")]
    box.publish("news/a", b"x")
    assert box.unsubscribe(filter, "s") is False


def test_a_sweep_ending_a_group_whose_members_died_says_so(
    box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    """A share group whose members' processes all died went with the messages it held and
    no line in the log, where a plain subscription ending with its process gets one."""
    path = box.topics.attach_dropbox("$share/g/news/#", "m")
    layout.add_member(path, "m", dead_token())
    box.publish("news/a", b"x")
    live = box.subscribe("$share/k/news/#", "live")  # a live member keeps its group
    with live, caplog.at_level(logging.WARNING, logger="boxmq"):
        box.sweep()
    assert not os.path.exists(path)
    [said] = [r for r in caplog.records if "share group" in r.message]
    assert said.levelno == logging.WARNING
    assert said.getMessage() == (
        "share group 'g' of news/# ended: the process(es) of its last 1 member(s) died "
        "without leaving it; deleted with its messages"
    )


def test_a_sweep_ending_a_dead_group_says_when_the_disk_refuses_to_tell_the_others(
    root: Path, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep deleted a share group whose members' process died, then the generation's
    write refused (ENOSPC): the sweep raised it, and nothing said that the other processes
    go on routing to the group ended until the generation is written."""
    path = box.topics.attach_dropbox("$share/g/news/#", "m")
    layout.add_member(path, "m", dead_token())
    assert box.topics.has_durable("news/a")
    monkeypatch.setattr(layout, "bump_generation", _full_disk)
    with caplog.at_level(logging.WARNING, logger="boxmq"):
        box.sweep()
    monkeypatch.undo()
    [told] = [r.getMessage() for r in caplog.records if "until it is written" in r.message]
    assert str(root / "topic-root" / ".generation") in told
    assert not os.path.exists(path)
    assert not box.topics.has_durable("news/a")  # this process reads the records again


@pytest.mark.parametrize("retry", ["sweep", "subscribe"])
def test_the_next_sweep_or_change_tells_the_others_what_a_full_disk_left_untold(
    root: Path, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch, retry: str
) -> None:
    """A sweep ended a dead group and could not write the generation (ENOSPC): once space
    frees, the next sweep (which ends nothing) or change of another subscription tells the
    other processes of any change, so they stop routing to the group ended, where nothing
    retried and the next change named only its own folder."""
    path = box.topics.attach_dropbox("$share/g/news/#", "m")
    layout.add_member(path, "m", dead_token())
    with boxmq.open(root, fsync="never") as other:
        assert other.topics.has_durable("news/a")
        monkeypatch.setattr(layout, "bump_generation", _full_disk)
        box.sweep()
        monkeypatch.undo()
        assert other.topics.has_durable("news/a")  # not told yet
        if retry == "sweep":
            box.sweep()
        else:
            box.subscribe("weather/#", "w").close()
        assert not other.topics.has_durable("news/a")


def test_a_retained_copy_a_killed_subscribe_left_in_working_does_not_stop_the_next(
    root: Path, box: boxmq.Box
) -> None:
    # A process killed while its subscribe wrote the retained copies (one written into
    # working/, not yet sent) leaves it there under the very name the next subscribe to that
    # subscription writes: that one raised FileExistsError, and so did every other until a
    # sweep deleted the leftover, an hour later (found by a torture of the embedded pub/sub).
    box.publish("state/door", "closed", retain=True)
    folder = root / "topic-root" / "state%2F%23" / ".subscriptions" / "client.dash"
    box.subscribe("state/#", "dash").close()
    (name,) = os.listdir(folder / "target")
    os.rename(folder / "target" / name, folder / "working" / name)  # as the killed one left it
    with box.subscribe("state/#", "dash") as dash:
        got = drain(dash)
    assert [(m.topic, m.text(), m.retained) for m in got] == [("state/door", "closed", True)]
    assert os.listdir(folder / "working") == [name]  # for the sweep, after abandon_after


@pytest.mark.parametrize("spares", [256, 0])
def test_retained_copies_for_a_subscription_that_ended_before_their_send_are_dropped_quietly(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, spares: int
) -> None:
    """An MQTT SUBSCRIBE's retained messages for a persistent session are written into its
    subscription by a worker (`send_retained`); a session that ended meanwhile (a DISCONNECT,
    a takeover) deleted it. Their send failed ENOENT, logged as an ERROR telling the operator
    to check the file system, and a copy written into a spare of the pool stayed in .spare/,
    the message's body under a name nobody reads (found by fuzzing `boxmq serve`). Nobody is
    left to get them: they are dropped, as a publication's copy is (`Move._send_one_copy`)."""
    with boxmq.open(root, fsync="never", keep_processed=False, spares=spares) as box:
        with box.subscribe("warm", "w") as warm:  # acknowledged files: the pool's own spares
            for _ in range(4):
                box.publish("warm", b"spare")
            assert len(drain(warm)) == 4
        box.publish("news/a", b"first retained", retain=True)
        box.publish("news/b", b"second retained", retain=True)
        box.subscribe("news/#", "s", process_bound=False, send_retained=False).close()
        written = Dropbox.write_apart
        ended: list[bool] = []

        def then_ended(dropbox: Dropbox, name: str, body: bytes) -> Move:
            move = written(dropbox, name, body)  # the first copy written; the second's write
            if not ended:  # finds no subscription (spares=0) or goes into a spare (256)
                ended.append(box.unsubscribe("news/#", "s"))
            return move

        monkeypatch.setattr(Dropbox, "write_apart", then_ended)
        with caplog.at_level(logging.DEBUG):
            box.topics.send_retained("news/#", "s")
        assert ended == [True]
        assert [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG] == []
        left = [
            path
            for path in root.rglob("*")
            if path.is_file() and path.read_bytes().endswith(b" retained")
        ]
        assert [path.relative_to(root).parts[:2] for path in left] == [
            ("topic-root", ".retained")
        ] * 2
        assert deleted_files_open(root) == []  # a spare's descriptor, its blocks held


def test_a_memory_and_a_durable_subscription_of_one_name_and_filter_are_refused_together(
    tmp_path: Path,
) -> None:
    # They shared one routing entry in a Box: the durable one subscribed after a memory one
    # got none of this Box's publications, even once the memory one had closed.
    with boxmq.open(tmp_path, fsync="never") as box:
        in_memory = box.subscribe("a/#", "s", durable=False)
        with pytest.raises(boxmq.InvalidArgument, match="memory subscription"):
            box.subscribe("a/#", "s")
        assert box.topics.subscriptions() == []
        in_memory.close()
        durable = box.subscribe("a/#", "s")
        with pytest.raises(boxmq.InvalidArgument, match="durable subscription"):
            box.subscribe("a/#", "s", durable=False)
        box.publish("a/1", b"one")
        assert bodies(durable) == ["one"]
        # Other names and filters are free to be either.
        with box.subscribe("a/#", "t", durable=False) as other, box.subscribe("b", "s") as b:
            box.publish("a/2", b"two")
            assert bodies(other) == ["two"]
            assert bodies(durable) == ["two"]
            assert bodies(b) == []
        durable.close()


def test_a_second_memory_subscription_of_one_name_and_filter_is_refused(tmp_path: Path) -> None:
    # The second took the first's routing entry (the first got nothing more, and said
    # nothing), and the first's close took it out: the second got nothing either, as a
    # second durable one is refused ("open in this Box already") (found by a second read).
    with boxmq.open(tmp_path, fsync="never") as box:
        first = box.subscribe("a/#", "s", durable=False)
        with pytest.raises(boxmq.InvalidArgument, match="open in this Box already"):
            box.subscribe("a/#", "s", durable=False)
        box.publish("a/1", b"one")
        assert bodies(first) == ["one"]
        first.close()
        with box.subscribe("a/#", "s", durable=False) as again:
            box.publish("a/2", b"two")
            assert bodies(again) == ["two"]


def test_record_of_reads_the_one_record_a_subscription_has(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`record_of` reads the subscription's own record (a share group's for "$share/..."),
    not every subscription's as `subscribed` does: `boxmq subscribe` asks it at each run."""
    with boxmq.open(root, fsync="never") as box:
        box.subscribe("a/#", "k", qos=2, no_local=True).detach()
        box.subscribe("b/#", "k", qos=0).detach()
        box.subscribe("$share/g/a/#", "m", qos=1, process_bound=False).detach()
        monkeypatch.setattr(
            "boxmq.store.topics.read_records", lambda root: pytest.fail("read every record")
        )
        record = box.topics.record_of("a/#", "k")
        assert record is not None
        assert (record.filter, record.subscriber, record.qos, record.no_local) == (
            "a/#",
            "k",
            2,
            True,
        )
        group = box.topics.record_of("$share/g/a/#", "m")
        assert group is not None
        assert (group.group, group.subscriber, group.qos) == ("g", None, 1)
        assert box.topics.record_of("a/#", "other") is None
        assert box.topics.record_of("c/#", "k") is None


@pytest.mark.parametrize("filter", ["a/b", "$share/g/a/b"])
def test_a_subscriber_name_refused_is_called_a_subscriber_s_and_a_second_one_names_the_filter(
    box: boxmq.Box, filter: str
) -> None:
    with pytest.raises(boxmq.InvalidName, match=r"^subscriber name 'x/y' contains '/'"):
        box.subscribe(filter, "x/y", durable=True)
    with pytest.raises(boxmq.InvalidName, match=r"^subscriber name 'xx+' encodes to 41 bytes"):
        box.topics.resubscribe(filter, "x" * 41)
    with box.subscribe(filter, "s", durable=True), pytest.raises(boxmq.InvalidArgument) as error:
        box.subscribe(filter, "s", durable=True)
    assert str(error.value).startswith(f"subscriber 's' has {filter!r} open in this Box already")


def test_a_subscriber_name_with_a_lone_surrogate_is_called_a_subscriber_name_everywhere(
    box: boxmq.Box,
) -> None:
    """unsubscribe and subscription named the folder the subscription would have had."""
    says = r"^subscriber name 'n\\udcff' is not valid Unicode"
    with pytest.raises(boxmq.InvalidName, match=says):
        box.subscribe("a/b", "n\udcff")
    with pytest.raises(boxmq.InvalidName, match=says):
        box.unsubscribe("a/b", "n\udcff")
    with pytest.raises(boxmq.InvalidName, match=says):
        box.subscription("a/b", "n\udcff")
    with pytest.raises(boxmq.InvalidName, match=says):
        box.topics.record_of("a/b", "n\udcff")


@pytest.mark.parametrize("filter", ["a/b", "$share/g/a/b"])
def test_a_closed_subscriber_says_it_is_a_closed_subscriber_of_its_filter(
    box: boxmq.Box, filter: str
) -> None:
    """Not "consumer 's' of '<root>/topic-root/a%2Fb/.subscriptions/client.s' is closed"."""
    subscriber = box.subscribe(filter, "s", durable=True)
    subscriber.close()
    said = f"^subscriber 's' of {re.escape(repr(filter))} is closed$"
    with pytest.raises(boxmq.Closed, match=said):
        subscriber.receive(timeout=0)
    with pytest.raises(boxmq.Closed, match=said):
        subscriber.receive_ready()
    with pytest.raises(boxmq.Closed, match=said):
        subscriber.set_limits(max_in_flight=2, lock_timeout=5)
    assert list(subscriber) == []  # iterating a closed one ends, as before


def test_a_subscription_whose_record_is_unreadable_is_told_of_and_keeps_its_messages(
    box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    """Its record read as that of a subscription being made: ls and the routing left it out,
    its messages too, and nothing named the file (found by an upgrade hunt)."""
    with box.subscribe("a/#", "kept", process_bound=False):
        pass
    box.publish("a/1", "before")
    record = Path(layout.subscription_path(str(box.root), "a/#", "client.kept"), ".subscription")
    record.write_text("")  # renamed into place, its data lost to a power cut (fsync never)
    with caplog.at_level(logging.WARNING, "boxmq"):
        assert box.topics.subscriptions() == []  # boxmq ls
        box.publish("a/2", "skipped")
        box.sweep()
        box.sweep()  # told once by the sweeps
    told = logged(caplog, str(record))
    assert len(told) == 2
    assert all("no subscription record this boxmq reads" in line for line in told)
    with box.subscribe("a/#", "kept", process_bound=False) as again:  # writes it again
        message = again.receive(timeout=5)
        assert message is not None
        assert message.body == b"before"


def test_a_record_damaged_again_after_its_repair_is_told_of_again(
    box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep told of each unreadable record once, and kept its name and reason for the
    box's life: one repaired (or deleted) and damaged again went untold, and a long-lived box
    that met many kept every one. What it keeps is what the last full pass found."""
    with box.subscribe("a/#", "kept", process_bound=False):
        pass
    record = Path(layout.subscription_path(str(box.root), "a/#", "client.kept"), ".subscription")
    with caplog.at_level(logging.WARNING, "boxmq"):
        for _ in range(2):
            record.write_text("")  # damaged
            box.sweep()
            box.sweep()  # told once while it stays so
            box.subscribe("a/#", "kept", process_bound=False).close()  # written again
            box.sweep()
    told = logged(caplog, str(record))
    assert len(told) == 2


def test_subscriptions_read_again_after_a_look_the_file_system_failed(tmp_path: Path) -> None:
    """The look that finds a new durable subscription fails (EMFILE): the next one reads it
    again. It had counted the change as seen and kept the routes from before, so a message
    to the new subscription was routed nowhere (its MQTT publisher told it was stored) until
    the subscriptions changed again."""
    root = tmp_path / "root"
    with boxmq.open(root) as broker, boxmq.open(root) as other:
        assert not broker.topics.has_durable("news")
        other.subscribe("news", "reader").close()  # durable: stays when its reader leaves
        with no_descriptor_left(), pytest.raises(OSError, match="Too many open files"):
            broker.topics.has_durable("news")
        assert broker.topics.has_durable("news")


@pytest.mark.parametrize("filter", ["a/#", "$share/g/a/#"])
def test_a_subscribe_clears_what_an_end_killed_after_its_record_left_behind(
    box: boxmq.Box, filter: str
) -> None:
    """An unsubscribe (a group's last leave) deletes its record, then moves its folder
    away; killed in between, it left the folder and its messages, which the next subscribe
    of that name took over (a session record that no longer names the filter has nothing
    clear it). They are nobody's: that subscribe starts empty."""
    path = box.topics.attach_dropbox(filter, "kept")
    box.publish("a/1", "before")
    if filter.startswith("$share"):
        layout.remove_member(path, ConsumerId("kept"))  # the leave's first step
    os.unlink(os.path.join(path, ".subscription"))  # as the kill leaves it
    with box.subscribe(filter, "kept", process_bound=False) as again:
        box.publish("a/2", "after")
        assert bodies(again) == ["after"]


def test_what_an_end_left_behind_deleted_on_a_full_disk_is_told_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`remove_left_behind` deleted the folder, then the generation's write met a full disk
    (ENOSPC): it raised, so a session's end said the folder was left on disk, and this
    process went on routing to the folder gone until the next change, where an unsubscribe
    is told done and reads every record again (found by stop 45's second read)."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        with boxmq.open(root, fsync="never", spares=0) as box, boxmq.open(root) as other:
            path = box.topics.attach_dropbox("a/#", "kept")
            box.publish("a/1", b"")  # an empty body: its deletion frees no page
            assert other.topics.has_durable("a/1")
            os.unlink(os.path.join(path, ".subscription"))  # an end killed after its record
            assert box.topics.has_durable("a/1")
            disk.fill()
            with caplog.at_level(logging.WARNING, logger="boxmq"):
                assert box.topics.remove_left_behind("a/#", "kept") is True
            assert not os.path.exists(path)
            assert "told only at the next change" in caplog.text
            assert not box.topics.has_durable("a/1")  # this process reads every record again
            assert other.topics.has_durable("a/1")  # not told yet
            disk.free()
            box.subscribe("b", "w").close()  # the next change tells of any
            assert not other.topics.has_durable("a/1")


def test_a_subscribe_killed_while_it_clears_what_an_end_left_behind_clears_it_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clearing moves each state folder that holds something away, one by one, and
    knows a folder that had a record by its working/: killed after moving working/ (a fan-out
    cut short left a file there) and before the others, the next subscribe took the folder
    for a new one, and the ended subscription's messages left for its own (found by the
    second read)."""
    for step in itertools.count(1):
        root = tmp_path / str(step)
        with boxmq.open(root, fsync="never") as box:
            path = box.topics.attach_dropbox("a/#", "kept")
            for state in State:  # what an ended subscription held, in every state
                Path(path, state.value, "ID:0:0:0:left").write_text("")
            os.unlink(os.path.join(path, ".subscription"))  # an end killed after its record
        box = boxmq.open(root, fsync="never")
        kill_at(monkeypatch, step)
        try:
            box.subscribe("a/#", "kept", process_bound=False, send_retained=False).close()
            killed = False
        except Killed:
            killed = True
        monkeypatch.undo()
        box.close()
        with boxmq.open(root, fsync="never") as box:
            box.subscribe("a/#", "kept", process_bound=False, send_retained=False).close()
        left = {s.value: os.listdir(os.path.join(path, s.value)) for s in State}
        assert left == {s.value: [] for s in State}, f"killed at change {step}"
        if not killed:
            break


def test_an_unsubscribe_of_many_writes_the_generation_once_and_others_stop_routing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`unsubscribe_many` tells every filter it ended in one write of the generation (a
    write per filter made 1,000 of them for an MQTT UNSUBSCRIBE of 1,000 filters); another
    process routes to none of them after it, and still to the one kept."""
    filters = [f"m/{n}" for n in range(100)]  # over what the file names: told as any change
    with boxmq.open(tmp_path, fsync="never") as box, boxmq.open(tmp_path) as other:
        for text in [*filters, "kept"]:
            box.subscribe(text, "s").close()
        assert all(other.topics.has_durable(text) for text in filters)
        writes = count_generation_writes(monkeypatch)
        assert box.unsubscribe_many([*filters, "never"], "s") == [True] * 100 + [False]
        assert len(writes) == 1
        assert not any(other.topics.has_durable(text) for text in filters)
        assert other.topics.has_durable("kept")
        assert [info.filter for info in box.topics.subscriptions()] == ["kept"]
        assert not os.path.exists(os.path.join(tmp_path, ".deleting"))

        def read_all(root: str) -> object:
            raise AssertionError("every record read again")

        # Told to the others as any change (over what the file names), but this process
        # knows which ended: it reads no other record again.
        more = [f"n/{n}" for n in range(layout.KEPT_CHANGES + 1)]
        for text in more:
            box.subscribe(text, "s").close()
        assert box.topics.has_durable("n/0")
        box.unsubscribe_many(more, "s")
        monkeypatch.setattr(layout, "read_records", read_all)
        assert box.topics.has_durable("kept")
        assert not box.topics.has_durable("n/0")


def test_an_unsubscribe_of_many_killed_at_any_step_leaves_no_route_to_a_folder_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed at any change of `unsubscribe_many`, another process routes to no filter whose
    folder is gone, and to every one whose record stands; what it still routes to without
    a record (a folder the kill left) it stops routing to at the next sweep of a live
    process, which deletes the folder once abandoned."""
    filters = ["k/1", "k/2", "k/3"]
    for step in itertools.count(1):
        root = tmp_path / str(step)
        with boxmq.open(root, fsync="never") as box:
            paths = {text: box.topics.attach_dropbox(text, "s") for text in filters}
            box.publish("k/1", "held")
        other = boxmq.open(root, fsync="never")
        assert all(other.topics.has_durable(text) for text in filters)
        box = boxmq.open(root, fsync="never")
        kill_at(monkeypatch, step)
        try:
            box.unsubscribe_many(filters, "s")
            killed = False
        except Killed:
            killed = True
        monkeypatch.undo()
        box.close()
        for text, path in paths.items():
            routed = other.topics.has_durable(text)
            if not os.path.isdir(path):
                assert not routed, f"killed at change {step}: {text} routed, its folder gone"
            if layout.has_record(path):
                assert routed, f"killed at change {step}: {text} stands, unrouted"
        with boxmq.open(root, fsync="never") as live:
            live.sweep(full=True)  # tells of the folders left without records
        for text, path in paths.items():
            assert other.topics.has_durable(text) == layout.has_record(path), f"step {step}"
        other.close()
        if not killed:
            assert not any(os.path.isdir(path) for path in paths.values())
            break


def test_a_publication_nobody_gets_writes_no_side_file_for_its_long_properties(
    box: boxmq.Box, root: Path
) -> None:
    """Properties too long for a name go to a side file (docs/file-format.md) only for a copy
    that names it: with no subscriber, one was written all the same, and stayed until the
    sweep collected it an hour later. A subscriber's copy, and a retained message, name one."""
    long = {"note": "y" * 300}
    box.publish("nobody/here", b"x", properties=long)
    box.topics.publish_many([Publication("nobody/here", b"y", properties=long)])
    assert not (root / ".properties").exists() or not os.listdir(root / ".properties")
    with box.subscribe("somebody/#", "s") as subscriber:
        box.publish("somebody/here", b"x", properties=long)
        box.publish("nobody/kept", b"r", properties={"note": "z" * 300}, retain=True)
        assert len(os.listdir(root / ".properties")) == 2
        got = subscriber.receive(timeout=5)
        assert got is not None
        assert got.properties == long


def test_a_member_ended_and_made_again_in_place_takes_the_group_s_messages_again(
    box: boxmq.Box,
) -> None:
    """A member ended while its Subscriber reads takes no more of the group's messages once
    its look (once a second) saw the end; made a member again in place (an MQTT client's
    SUBSCRIBE again after `box.unsubscribe` under its name: `Topics.resubscribe`, which keeps
    the Subscriber) it takes them again, the one it never took first, its delivery its first."""
    filter = "$share/g/h/#"
    m1 = box.subscribe(filter, "m1")
    m2 = box.subscribe(filter, "m2")
    m2.pause()  # the group lives on, taking nothing
    assert box.unsubscribe(filter, "m1")
    assert m1.receive(timeout=1.5) is None  # its look at the membership comes within it
    box.publish("h/a", "0")
    assert m1.receive(timeout=1.5) is None, "an ended member took the group's message"
    box.topics.resubscribe(filter, "m1")
    message = m1.receive(timeout=5)
    assert message is not None
    assert (message.text(), message.delivery_count) == ("0", 1)
    message.ack()
    m1.close()
    m2.close()
