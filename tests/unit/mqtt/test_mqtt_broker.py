"""The broker without sockets: in-memory links, a real Box on tmp_path, one asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import HeldFlush, StuckCheck
from tests.processes import dead_token
from tests.unit.mqtt.peers import Peer, connect_peer, run_broker
from tests.waiting import logged, until_async

import boxmq
from boxmq.client import assured as assured_module
from boxmq.client.assured import AssuredMessage
from boxmq.client.message import Message
from boxmq.client.subscriber import Subscriber
from boxmq.clock import ManualClock, SystemClock
from boxmq.core import ExactlyOnceLimits
from boxmq.model import PROPERTIES_FILE, MessageId
from boxmq.mqtt import batches, claim_wait, recording
from boxmq.mqtt import lifetimes as lifetimes_module
from boxmq.mqtt import wills as wills_module
from boxmq.mqtt.acl import Acl
from boxmq.mqtt.broker import Broker
from boxmq.mqtt.codec import encode
from boxmq.mqtt.connect_terms import reason_text
from boxmq.mqtt.errors import ProtocolError
from boxmq.mqtt.lifetimes import CLAIMED
from boxmq.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    ProtocolVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from boxmq.mqtt.peer_address import PeerAddress
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.publishing import Publishing
from boxmq.mqtt.reasons import ReasonCode
from boxmq.mqtt.session import Session, Token
from boxmq.mqtt.session_record import (
    AwayAtStart,
    DeliveryOptions,
    SessionRecord,
    read_record,
    record_path,
    records_folder,
    remove_record,
    write_record,
)
from boxmq.mqtt.settings import Limits, MqttSettings
from boxmq.mqtt.stored import consumer_name, exactly_once_source
from boxmq.mqtt.subscribing import Subscribing
from boxmq.mqtt.succession import NONE, claim, successor
from boxmq.store import layout as store_layout
from boxmq.store import topics as layout
from boxmq.store.process import process_token, token_pid
from boxmq.store.topics import subscription_key, subscription_path
from boxmq.store.watch import Changes, InotifyWatcher

V5 = ProtocolVersion.V5


def _subscriber(
    broker: Broker, client_id: str, topic_filter: str, qos: int, *, expiry: int = 0
) -> Peer:
    """A connected client subscribed to one filter, its SUBACK taken; `expiry`: as connect_peer."""
    peer = connect_peer(broker, client_id, expiry=expiry)
    peer.send(Subscribe(1, (Subscription(topic_filter, qos),)))
    peer.take()
    return peer


def _connack(
    broker: Broker, client_id: str, *, clean: bool = True, **properties: int
) -> tuple[Peer, Connack]:
    """A client that connects with CONNECT `properties`, and the CONNACK it got."""
    peer = Peer(broker)
    props = Properties.build(**properties)  # type: ignore[arg-type]
    peer.send(Connect(client_id, V5, clean_start=clean, properties=props))
    connack = peer.inbox.pop(0)
    assert isinstance(connack, Connack)
    return peer, connack


async def _until(condition: Callable[[], bool]) -> None:
    # What is waited for often follows an fsync or a one-second timer: 20 s, not 2, for a
    # loaded machine.
    await until_async(condition, within=20)


def _files(root: Path) -> list[str]:
    return [name for _, _, names in os.walk(root / "topic-root") for name in names]


@pytest.mark.parametrize(
    ("asked", "cap", "granted", "told"),
    [
        (0, 2, 2, 2),  # none is more than any cap: told the cap, held to it
        (100, 2, 2, 2),
        (1, 2, 1, None),
        (0, 65_535, 0, None),  # the default cap caps nothing
    ],
)
def test_max_keepalive_caps_what_a_v5_client_asks_none_included(
    tmp_path: Path, asked: int, cap: int, granted: int, told: int | None
) -> None:
    async def test(broker: Broker) -> None:
        peer = Peer(broker)
        peer.send(Connect("ka", V5, clean_start=True, keep_alive=asked))
        [connack] = peer.take()
        assert isinstance(connack, Connack)
        assert connack.properties.server_keep_alive == told
        assert peer.connection.keep_alive == granted
        if granted:  # silent since 0: closed once 1.5 periods have passed (§3.1.2.10)
            broker.tick(1.5 * granted - 0.1)
            assert not peer.closed
            broker.tick(1.5 * granted + 0.1)
            assert peer.closed

    settings = MqttSettings(limits=Limits(max_keepalive=cap))
    run_broker(tmp_path, test, ManualClock(0), settings=settings)


def test_the_timer_looks_at_a_keep_alive_again_when_it_can_end(tmp_path: Path) -> None:
    """Keep Alive 10 s: a client silent since its CONNECT (at 0) is closed by the first tick
    past 15 s; one heard at 12 s, looked at then and found alive, is closed by the first tick
    past 27 s and not before; one without a keep-alive is never closed. The timer keeps when
    each can end (core/deadlines.py) instead of looking at every connection at every tick: a
    look put off and never made again would leave a silent client connected for good."""

    async def test(broker: Broker) -> None:
        peers = {name: Peer(broker) for name in ("silent", "talker", "forever")}
        for name, peer in peers.items():
            peer.send(
                Connect(name, V5, clean_start=True, keep_alive=0 if name == "forever" else 10)
            )
            assert isinstance(peer.take()[0], Connack)
        talker = peers["talker"]
        broker.received(talker, talker.connection.packets(encode(Pingreq(), V5), 12.0))
        broker.flush()
        assert talker.take() == [Pingresp()]

        def closed_by(now: float) -> list[str]:
            broker.tick(now)
            return [name for name, peer in peers.items() if peer.closed]

        assert closed_by(14.9) == []
        assert closed_by(15.1) == ["silent"]
        assert closed_by(26.9) == ["silent"]
        assert closed_by(27.1) == ["silent", "talker"]
        assert closed_by(1e6) == ["silent", "talker"]

    run_broker(tmp_path, test, ManualClock(0))


def test_a_clean_connect_reads_no_subscription_record_when_its_id_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean CONNECT without a session record looks for subscriptions on disk under its
    client id only to say that another's is there (test_mqtt_adopt.py). It read the record
    of every subscription on the root to find none, at each CONNECT: with 1,000 of them, a
    device connecting read 1,000 files. It now asks the root's subscriptions as last read,
    which a stat tells unchanged: read once, after the subscription below was made."""

    async def test(broker: Broker) -> None:
        broker.box.subscribe("backend/#", "backend").close()  # durable, someone else's
        reads: list[str] = []
        read_records = layout.read_records

        def counted(root: str) -> Iterator[tuple[layout.SubscriptionRecord, str]]:
            reads.append(root)
            return read_records(root)

        monkeypatch.setattr(layout, "read_records", counted)
        for n in range(3):
            connect_peer(broker, f"device-{n}").close()
        assert len(reads) == 1

    run_broker(tmp_path, test)


def test_a_persistent_connect_lists_the_topics_intake_alone_for_its_qos2_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A persistent CONNECT of a session this process does not know looks in the
    exactly-once intake for the QoS 2 messages its client left (on another server of the
    root, say): it listed the root and every queue's working/, on the loop, at each one
    (1,000 queues: 1,000 listings a device). A client's QoS 2 messages go to topics only:
    the topics' working/ alone is listed, and one stored elsewhere is still found."""

    async def test(broker: Broker) -> None:
        for i in range(3):
            broker.box.queue(f"q{i}")
        connect_peer(broker, "first", expiry=600).close()  # the intake's first use reads all
        with boxmq.open(tmp_path / "root", fsync="never") as other:  # another server's
            source = exactly_once_source("device-9")
            assert other.intake.assured_one(AssuredMessage(source, "7", b"x", topic="t"))
        listed: list[str] = []
        folders = store_layout.dropbox_folders

        def counted(root: str) -> list[tuple[str, str]]:
            listed.append(root)
            return folders(root)

        monkeypatch.setattr(assured_module, "dropbox_folders", counted)
        for n in range(3):
            connect_peer(broker, f"device-{n}", expiry=600).close()
        device = connect_peer(broker, "device-9", expiry=600, clean=False)
        assert listed == []
        device.send(Pubrel(7))
        await _until(lambda: bool(device.inbox))
        assert device.take() == [Pubcomp(7)]  # found: released, not 0x92 (not found)

    run_broker(tmp_path, test)


def test_clean_sessions_exchange_qos1_in_memory_only(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        sub, pub = connect_peer(broker, "sub"), connect_peer(broker, "pub")
        sub.send(Subscribe(1, (Subscription("a/+", 1),)))
        assert sub.take() == [Suback(1, (ReasonCode.GRANTED_QOS_1,))]
        pub.send(Publish("a/b", b"x", 1, packet_id=7))
        assert pub.take() == [Puback(7)]
        [delivered] = sub.take()
        assert isinstance(delivered, Publish)
        assert (delivered.topic, delivered.payload, delivered.qos) == ("a/b", b"x", 1)
        assert _files(tmp_path / "root") == []  # nothing touched the disk

    run_broker(tmp_path, test)


def test_qos2_in_memory_is_routed_once_at_pubrel(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        sub, pub = connect_peer(broker, "sub"), connect_peer(broker, "pub")
        sub.send(Subscribe(1, (Subscription("t", 2),)))
        sub.take()
        pub.send(Publish("t", b"once", 2, packet_id=5))
        pub.send(Publish("t", b"once", 2, dup=True, packet_id=5))  # a repeat: PUBREC again
        assert pub.take() == [Pubrec(5), Pubrec(5)]
        assert sub.take() == []  # nothing before PUBREL
        pub.send(Pubrel(5))
        assert pub.take() == [Pubcomp(5)]
        [delivered] = sub.take()
        assert isinstance(delivered, Publish)
        assert delivered.payload == b"once"

    run_broker(tmp_path, test)


def test_persistent_session_messages_wait_in_its_dropbox(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        away = _subscriber(broker, "away", "jobs/#", 1, expiry=600)
        away.send(Disconnect())
        pub = connect_peer(broker, "pub")
        pub.send(Publish("jobs/1", b"work", 1, packet_id=1))
        await _until(lambda: pub.inbox == [Puback(1)])  # once the file is in the dropbox
        assert len(_files(tmp_path / "root")) >= 1
        back = connect_peer(broker, "away", expiry=600, clean=False)
        await _until(lambda: bool(back.inbox))
        [delivered] = back.take()
        assert isinstance(delivered, Publish)
        assert delivered.payload == b"work"

    run_broker(tmp_path, test)


def _pumped(broker: Broker) -> list[str]:
    """The client ids of the sessions the broker pumps from now on, one per pump."""
    pumped: list[str] = []
    pump = broker._delivery.pump

    def counted(session: Session, news: Iterable[str] | None = None) -> None:
        pumped.append(session.client_id)
        pump(session, news)

    broker._delivery.pump = counted  # type: ignore[method-assign]
    return pumped


def test_a_message_to_one_of_many_persistent_sessions_pumps_that_one_alone(
    tmp_path: Path,
) -> None:
    """After a disk batch, the connected persistent sessions whose dropboxes got messages
    are pumped, not every one: a QoS 1 command to one of 4,000 connected devices walked all
    4,000 (docs/benchmarks.md, "Many connected persistent sessions"). Counted, not timed."""

    async def test(broker: Broker) -> None:
        devices = []
        for number in range(20):
            device = connect_peer(broker, f"dev{number}", expiry=600, clean=False)
            device.send(Subscribe(1, (Subscription(f"dev/{number}/cmd", 1),)))
            await _until(lambda d=device: any(isinstance(p, Suback) for p in d.inbox))  # type: ignore[misc]
            device.take()
            devices.append(device)
        pub = connect_peer(broker, "pub")
        pumped = _pumped(broker)
        for packet_id in (1, 2):
            pub.send(Publish("dev/7/cmd", b"go", 1, packet_id=packet_id))
            await _until(lambda i=packet_id: Puback(i) in pub.inbox)  # type: ignore[misc]
        await _until(lambda: len(devices[7].inbox) == 2)
        assert [p.payload for p in devices[7].take() if isinstance(p, Publish)] == [b"go"] * 2
        assert set(pumped) == {"dev7"}, pumped
        assert not any(device.inbox for device in devices)

    run_broker(tmp_path, test)


def test_a_member_of_many_share_groups_looks_into_the_groups_with_news_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client joins 40 share groups (their dropboxes its session's), a SUBSCRIBE each, then
    gets QoS 1 messages of one of them: each SUBSCRIBE looks into its new group's dropbox,
    each PUBACK and each batch into the group with news, not into all: a member of 100 of
    1,000 groups spent 1.2 ms of CPU per QoS 1 message on those looks, and 5,000 looks on
    its joins (docs/benchmarks.md, "Many share groups"). Counted, not timed."""

    async def test(broker: Broker) -> None:
        looked = _looks(monkeypatch)
        member = connect_peer(broker, "member")
        await _join_forty_groups(member)
        assert len(looked) == 40, len(looked)  # one look into each new group
        looked.clear()
        await _ten_acknowledged(connect_peer(broker, "pub"), "dev/7/x", [member])
        assert set(looked) == {"$share/g7/dev/7/#"}, sorted(set(looked))[:5]

    run_broker(tmp_path, test)


def test_a_puback_looks_into_its_share_group_only_when_something_waits_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two members of a share group get QoS 1 messages one at a time: each put tells both,
    and the one pumped first looks and claims it, for itself or (every other message, the
    engine takes turns) for the other, which then looks to take it; a member whose look
    would find nothing (the message claimed for the first) does not look, nor does a PUBACK
    that frees a slot of a dropbox with nothing waiting in it. 30 looks for 10 messages
    before, at 1,000 groups 3.1 a message (docs/benchmarks.md, "Many share groups").
    Counted, not timed."""

    async def test(broker: Broker) -> None:
        members = [_subscriber(broker, name, "$share/g/t", 1) for name in ("a", "b")]
        looked = _looks(monkeypatch)
        await _ten_acknowledged(connect_peer(broker, "pub"), "t", members)
        assert len(looked) <= 15, len(looked)  # one or two a put, none at the PUBACK

    run_broker(tmp_path, test)


def _looks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the `queue` of each dropbox a subscriber looks into (`receive_ready`)."""
    looked: list[str] = []
    receive_ready = Subscriber.receive_ready

    def counted(subscriber: Subscriber, *, most: int | None = None) -> list[Message]:
        looked.append(subscriber.queue)
        return receive_ready(subscriber, most=most)

    monkeypatch.setattr(Subscriber, "receive_ready", counted)
    return looked


async def _join_forty_groups(member: Peer) -> None:
    """`member` joins the share groups g0 to g39 (of dev/0/# to dev/39/#), a SUBSCRIBE each."""
    for n in range(40):
        member.send(Subscribe(n + 1, (Subscription(f"$share/g{n}/dev/{n}/#", 1),)))
        await _until(lambda: any(isinstance(p, Suback) for p in member.inbox))
        member.take()


async def _ten_acknowledged(pub: Peer, topic: str, members: list[Peer]) -> None:
    """Ten QoS 1 messages to `topic`, one at a time, each acknowledged by the member it
    reached: all ten reach them, in order."""
    got: list[bytes] = []
    for packet_id in range(1, 11):
        pub.send(Publish(topic, b"%d" % packet_id, 1, packet_id=packet_id))
        await _until(lambda: any(isinstance(p, Publish) for m in members for p in m.inbox))
        for member in members:
            for publish in member.take():
                assert isinstance(publish, Publish)
                assert publish.packet_id is not None
                got.append(publish.payload)
                member.send(Puback(publish.packet_id))
    assert got == [b"%d" % n for n in range(1, 11)]


class _Walked(dict[str, Subscriber]):
    """A session's subscribers that count the pumps that go through all of them."""

    walks = 0

    def items(self) -> Any:  # dict_items, which typing does not name
        self.walks += 1
        return super().items()


def test_a_pump_with_news_goes_through_the_subscriptions_it_names_alone(
    tmp_path: Path,
) -> None:
    """A member of 40 share groups gets QoS 1 messages of one of them: the pumps of each
    put's news and of each PUBACK's refill go to that group's dropbox without going
    through the 40 (21 us a pump with 100 on a loaded machine, two or three pumps a
    message: docs/benchmarks.md, "Many share groups"). Counted, not timed."""

    async def test(broker: Broker) -> None:
        member = connect_peer(broker, "member")
        await _join_forty_groups(member)
        walked = broker._durable["member"] = _Walked(broker._durable["member"])
        await _ten_acknowledged(connect_peer(broker, "pub"), "dev/7/x", [member])
        assert walked.walks == 0, walked.walks

    run_broker(tmp_path, test)


def test_a_tick_after_this_server_s_own_deliveries_tells_no_session(tmp_path: Path) -> None:
    """The watch of a share group's dropbox reports the server's own moves (each copy put
    in target/, each claim out of it), which the member's receives, served from memory
    (the box's clock stands still: within watch_interval), did not read: the tick told the
    group's members of them, each pumped for a look that found nothing (docs/benchmarks.md,
    "Many share groups"). Counted: what the tick's read of the watches tells (`_offered`)."""

    async def test(broker: Broker) -> None:
        member = _subscriber(broker, "a", "$share/g/t", 0)
        pub = connect_peer(broker, "pub")
        for packet_id in range(1, 6):
            pub.send(Publish("t", b"m%d" % packet_id, 1, packet_id=packet_id))
            await _until(lambda i=packet_id: Puback(i) in pub.inbox)  # type: ignore[misc]
        got: list[bytes] = []

        def delivered() -> bool:
            got.extend(p.payload for p in member.take() if isinstance(p, Publish))
            return len(got) == 5

        await _until(delivered)
        broker.pump_all()  # what the puts told as they were made
        broker.box.read_news()  # the tick's read of the watches
        assert not broker._offered, list(broker._offered)

    run_broker(tmp_path, test, ManualClock(0), box_clock=True)


def test_an_idle_tick_looks_at_the_sessions_with_news_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick reads the process's inotify instance once and pumps the connected persistent
    sessions whose dropboxes had files come since, and a twentieth of the others in turn
    (each once in 5 s): a look at the watcher of each of 4,000 idle devices, 4 times a
    second, kept 40 % of a core busy (docs/benchmarks.md, "Many connected persistent
    sessions"). A file another process drops still reaches its session at the next tick.
    Counted, not timed."""

    async def test(broker: Broker) -> None:
        devices = []
        for number in range(40):
            device = connect_peer(broker, f"dev{number}", expiry=600, clean=False)
            device.send(Subscribe(1, (Subscription(f"dev/{number}/cmd", 1),)))
            await _until(lambda d=device: any(isinstance(p, Suback) for p in d.inbox))  # type: ignore[misc]
            device.take()
            devices.append(device)
        now = 1.0
        broker.tick(now)  # what the subscribes left to tell
        pumped = _pumped(broker)
        looks = 0
        wait = InotifyWatcher.wait

        def looked(watcher: InotifyWatcher, timeout: float | None) -> Changes:
            nonlocal looks
            looks += 1
            return wait(watcher, timeout)

        monkeypatch.setattr(InotifyWatcher, "wait", looked)
        for _ in range(4):  # a second of idle ticks
            now += 0.25
            broker.tick(now)
        # 40 sessions * 0.25 s / 5 s: 2 a tick; each pump looks at one watcher.
        assert len(pumped) == 8, pumped
        assert looks == 8
        # A script drops a file, as DropboxMQ says: written in working/, renamed in target/
        # (not through the broker's box: only its watcher can tell).
        dropbox = Path(
            subscription_path(str(tmp_path / "root"), "dev/7/cmd", subscription_key(None, "dev7"))
        )
        (dropbox / "working").mkdir(exist_ok=True)
        (dropbox / "working" / "4.dropped-1.T").write_bytes(b"from a script")
        os.rename(dropbox / "working" / "4.dropped-1.T", dropbox / "target" / "4.dropped-1.T")
        del pumped[:]
        now += 0.25
        broker.tick(now)
        assert "dev7" in pumped, pumped
        assert len(pumped) <= 3, pumped
        [publish] = devices[7].take()
        assert isinstance(publish, Publish)
        assert publish.payload == b"from a script"

    run_broker(tmp_path, test, ManualClock(0))


def test_what_a_share_group_member_that_left_held_goes_to_another_at_the_next_pump(
    tmp_path: Path,
) -> None:
    """A member that leaves gives its unacknowledged messages back to the group, and the
    dropbox tells the other members' sessions, which the next pump of those told (each
    tick's) sends them: no tick looks at every session any more (docs/mqtt.md, "within a
    tick")."""

    async def test(broker: Broker) -> None:
        members = []
        for name in ("a", "b"):
            member = connect_peer(broker, name)
            member.send(Subscribe(1, (Subscription("$share/g/t", 1),)))
            await _until(lambda m=member: any(isinstance(p, Suback) for p in m.inbox))  # type: ignore[misc]
            member.take()
            members.append(member)
        pub = connect_peer(broker, "pub")
        for packet_id in (1, 2):
            pub.send(Publish("t", b"m%d" % packet_id, 1, packet_id=packet_id))
            await _until(lambda i=packet_id: Puback(i) in pub.inbox)  # type: ignore[misc]
        first, second = members
        await _until(lambda: bool(first.inbox) and bool(second.inbox))
        [held] = [p.payload for p in first.take() if isinstance(p, Publish)]
        second.take()
        first.close()  # without its PUBACK

        def sent_on() -> bool:
            broker.pump_all()
            broker.flush()
            return any(isinstance(p, Publish) and p.payload == held for p in second.inbox)

        await _until(sent_on)

    run_broker(tmp_path, test)


def test_takeover_disconnects_the_old_connection_with_0x8e(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        first = connect_peer(broker, "same")
        connect_peer(broker, "same")
        assert first.take() == [Disconnect(ReasonCode.SESSION_TAKEN_OVER)]
        assert first.closed

    run_broker(tmp_path, test)


def test_a_share_members_negative_puback_sends_the_message_to_error(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        member = _subscriber(broker, "member", "$share/g/t", 1)
        pub = connect_peer(broker, "pub")
        pub.send(Publish("t", b"poison", 1, packet_id=1))
        await _until(lambda: any(isinstance(p, Publish) for p in member.inbox))
        [delivered] = member.take()
        assert isinstance(delivered, Publish)
        assert delivered.packet_id is not None
        member.send(Puback(delivered.packet_id, ReasonCode.UNSPECIFIED_ERROR))
        [info] = broker.box.topics.subscriptions()
        assert (info.counts.dead, info.counts.ready, info.counts.locked) == (1, 0, 0)
        [dead] = broker.box.subscription("$share/g/t").peek(state="error")  # as `boxmq peek`
        assert (dead.topic, dead.dead, dead.envelope.delivery_count) == ("t", "rejected", 1)

    run_broker(tmp_path, test)


def test_a_publisher_is_answered_before_its_message_goes_to_the_share_group(
    tmp_path: Path,
) -> None:
    """The PUBACK is written before the batch's messages are claimed and sent: the
    publisher sends its next ones while the broker serves the members."""

    async def test(broker: Broker) -> None:
        member = _subscriber(broker, "member", "$share/g/t", 1)
        pub = connect_peer(broker, "pub")
        answered_first: list[bool] = []
        deliver = broker._delivery.deliver

        def watched(session: Session, publish: Publish, token: Token) -> None:
            answered_first.append(any(isinstance(p, Puback) for p in pub.inbox))
            deliver(session, publish, token)

        broker._delivery.deliver = watched  # type: ignore[method-assign]
        pub.send(Publish("t", b"m", 1, packet_id=1))
        await _until(lambda: any(isinstance(p, Publish) for p in member.inbox))
        assert answered_first == [True]

    run_broker(tmp_path, test)


def test_under_always_the_members_are_served_while_the_commit_flushes(
    tmp_path: Path, held_flush: HeldFlush
) -> None:
    """The messages of a batch are claimed and sent once they are in the dropbox, before
    the commit's last flush; the publisher's PUBACK waits for that flush."""

    async def test(broker: Broker) -> None:
        member = connect_peer(broker, "member")
        member.send(Subscribe(1, (Subscription("$share/g/t", 1),)))
        await _until(lambda: any(isinstance(p, Suback) for p in member.inbox))
        member.take()
        pub = connect_peer(broker, "pub")
        pub.send(Publish("t", b"m", 1, packet_id=1))
        await _until(lambda: any(isinstance(p, Publish) for p in member.inbox))
        assert pub.inbox == []
        held_flush.release()
        await _until(lambda: pub.inbox == [Puback(1)])

    run_broker(tmp_path, test, fsync="always")


def test_a_read_is_answered_before_its_messages_go_to_memory_subscribers(
    tmp_path: Path,
) -> None:
    """The PUBACK and PUBCOMP of a read are written before its messages are routed to a
    non-persistent session, and the messages still go out in the order they came."""

    async def test(broker: Broker) -> None:
        sub = _subscriber(broker, "sub", "t", 2)
        pub = connect_peer(broker, "pub")
        pub.send(Publish("t", b"m2", 2, packet_id=2))
        assert pub.take() == [Pubrec(2)]
        answers_written: list[list[Packet]] = []
        deliver = broker._delivery.deliver

        def watched(session: Session, publish: Publish, token: Token) -> None:
            answers_written.append(list(pub.inbox))
            deliver(session, publish, token)

        broker._delivery.deliver = watched  # type: ignore[method-assign]
        pub.send(Publish("t", b"m1", 1, packet_id=1), Pubrel(2), Publish("t", b"m3", 0))
        answers = [Puback(1), Pubcomp(2)]
        assert answers_written == [answers, answers, answers]
        assert [p.payload for p in sub.inbox if isinstance(p, Publish)] == [b"m1", b"m2", b"m3"]

    run_broker(tmp_path, test)


def test_publishes_that_need_the_disk_are_answered_in_order_with_backpressure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One disk batch per client at a time: what arrives meanwhile waits for the next one,
    and past the high-water mark the client is not read until the waiting jobs halve."""
    monkeypatch.setattr(batches, "_BACKLOG_HIGH", 4)

    async def test(broker: Broker) -> None:
        _subscriber(broker, "member", "$share/g/t", 1)  # a share group: the publishes go to disk
        pub = connect_peer(broker, "pub")
        for packet_id in range(1, 11):  # ten reads before the first batch gets a thread
            pub.send(Publish("t", f"m{packet_id}".encode(), 1, packet_id=packet_id))
        assert (pub.pauses, pub.resumes) == (1, 0)
        await _until(lambda: len(pub.inbox) == 10)
        assert pub.inbox == [Puback(packet_id) for packet_id in range(1, 11)]
        assert (pub.pauses, pub.resumes) == (1, 1)
        [info] = broker.box.topics.subscriptions()
        assert info.counts.ready + info.counts.locked == 10

    run_broker(tmp_path, test)


async def _publish(broker: Broker, topic: str, body: bytes, qos: int) -> None:
    pub = connect_peer(broker, "pub")
    pub.send(Publish(topic, body, qos, packet_id=1))
    await _until(lambda: bool(pub.inbox))
    if qos == 2:
        assert pub.take() == [Pubrec(1)]
        pub.send(Pubrel(1))


@pytest.mark.parametrize("qos", [1, 2])
def test_subscribing_again_does_not_interrupt_a_message_in_flight(tmp_path: Path, qos: int) -> None:
    """MQTT 5.0 §3.8.4: a SUBSCRIBE for a filter the session has replaces the subscription,
    but the flow of publications must not be interrupted: the message in flight stays held
    by its packet id, and the client's acknowledgement settles it (no second copy)."""

    async def test(broker: Broker) -> None:
        sub = _subscriber(broker, "sub", "rs/#", qos, expiry=600)
        await _publish(broker, "rs/a", b"once", qos)
        await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
        [first] = sub.take()
        assert isinstance(first, Publish)
        assert first.packet_id is not None
        sub.send(Subscribe(2, (Subscription("rs/#", qos),)))
        assert sub.take() == [Suback(2, (ReasonCode(qos),))]
        if qos == 1:
            sub.send(Puback(first.packet_id))
        else:
            sub.send(Pubrec(first.packet_id))
            assert sub.take() == [Pubrel(first.packet_id)]
            sub.send(Pubcomp(first.packet_id))
        await asyncio.sleep(0.3)  # a second copy would come within a pump or two
        assert [p for p in sub.take() if isinstance(p, Publish)] == []
        [info] = broker.box.topics.subscriptions()
        assert (info.counts.ready, info.counts.locked, info.counts.dead) == (0, 0, 0)

    run_broker(tmp_path, test)


@pytest.mark.parametrize("qos", [1, 2])
@pytest.mark.parametrize("expiry", [0, 600], ids=["memory", "dropbox"])
def test_subscribing_again_sends_the_retained_message_whose_live_copy_is_in_flight(
    tmp_path: Path, qos: int, expiry: int
) -> None:
    """MQTT-3.8.4-4: a SUBSCRIBE that replaces a subscription sends its retained messages
    again (Retain Handling 0, MQTT-3.3.1-9: at the time of the subscribe). A persistent
    session's copy went into its dropbox under the message's own id, that of the live copy
    in flight: it waited there, unsent, until the client acknowledged the live one."""

    async def test(broker: Broker) -> None:
        sub = connect_peer(broker, "sub", expiry=expiry)
        sub.send(Subscribe(1, (Subscription("rs/#", qos),)))
        await _until(lambda: any(isinstance(p, Suback) for p in sub.inbox))
        sub.take()
        pub = connect_peer(broker, "pub")
        pub.send(Publish("rs/a", b"kept", qos, retain=True, packet_id=1))
        if qos == 2:
            await _until(lambda: pub.inbox == [Pubrec(1)])
            pub.send(Pubrel(1))
        await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
        [live] = sub.take()
        assert isinstance(live, Publish)
        assert (live.payload, live.retain) == (b"kept", False)  # not acknowledged: in flight
        sub.send(Subscribe(2, (Subscription("rs/#", qos),)))
        await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
        suback, again = sub.take()
        assert suback == Suback(2, (ReasonCode(qos),))
        assert isinstance(again, Publish)
        assert (again.payload, again.retain, again.dup) == (b"kept", True, False)
        assert again.packet_id not in (None, live.packet_id)
        for packet_id in (live.packet_id or 0, again.packet_id or 0):
            if qos == 1:
                sub.send(Puback(packet_id))
            else:
                sub.send(Pubrec(packet_id))
                assert sub.take() == [Pubrel(packet_id)]
                sub.send(Pubcomp(packet_id))
        await asyncio.sleep(0.3)  # a third copy would come within a pump or two
        assert [p for p in sub.take() if isinstance(p, Publish)] == []
        for info in broker.box.topics.subscriptions():
            assert (info.counts.ready, info.counts.locked, info.counts.dead) == (0, 0, 0)

    run_broker(tmp_path, test)


def test_retained_messages_to_many_topics_leave_nothing_kept_per_topic(tmp_path: Path) -> None:
    """Each retained PUBLISH (QoS 0, 1, 2, and a Will) to a topic of its own left a lock and
    a number in retained_order.py for as long as the server ran (found by bench/soak.py)."""

    async def test(broker: Broker) -> None:
        pub = connect_peer(broker, "pub")
        for n in range(30):
            qos, packet_id = n % 3, (n + 1 if n % 3 else None)
            pub.send(Publish(f"state/{n}", b"on", qos, retain=True, packet_id=packet_id))
            if qos == 2:
                assert packet_id is not None
                await _until(lambda p=packet_id: Pubrec(p) in pub.inbox)  # type: ignore[misc]
                pub.send(Pubrel(packet_id))
        await _until(lambda: Pubcomp(30) in pub.inbox)  # the last, n = 29
        device = Peer(broker)
        device.send(Connect("dev", V5, clean_start=True, will=Will("state/dev", b"gone", 1, True)))
        device.close()
        await _until(lambda: broker.box.topics.retained("state/dev") is not None)
        await asyncio.sleep(0.05)  # the Will's turn runs on the loop after its write
        assert broker._publishing._retained_order.held() == 0

    run_broker(tmp_path, test)


@pytest.mark.parametrize("persistent", [False, True], ids=["memory", "dropbox"])
def test_a_publish_over_the_clients_maximum_packet_size_is_done_with_as_if_sent(
    tmp_path: Path, persistent: bool
) -> None:
    """MQTT 5.0 §3.1.2.25: discarded, and the server behaves as if it had completed sending
    it: the slot of a Receive Maximum of 1 frees for the next message, the stored copy is
    settled, and no topic alias is spent on it (the next PUBLISH still carries its topic)."""

    async def test(broker: Broker) -> None:
        sub = Peer(broker)
        props = Properties.build(
            maximum_packet_size=200,
            receive_maximum=1,
            topic_alias_maximum=10,
            session_expiry_interval=600 if persistent else None,
        )
        sub.send(Connect("small", V5, clean_start=True, properties=props))
        sub.send(Subscribe(1, (Subscription("u/#", 1),)))
        assert [type(p) for p in sub.take()] == [Connack, Suback]
        pub = connect_peer(broker, "pub")
        pub.send(Publish("u/x", b"X" * 500, 1, packet_id=1))
        pub.send(Publish("u/x", b"small", 1, packet_id=2))
        await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
        [delivered] = sub.take()
        assert isinstance(delivered, Publish)
        assert (delivered.topic, delivered.payload) == ("u/x", b"small")
        assert delivered.properties.topic_alias == 1  # set here, with the topic: usable later
        assert delivered.packet_id is not None
        sub.send(Puback(delivered.packet_id))
        if persistent:
            await _until(lambda: broker.box.topics.subscriptions()[0].counts.locked == 0)
            [info] = broker.box.topics.subscriptions()
            assert (info.counts.ready, info.counts.dead) == (0, 0)

    run_broker(tmp_path, test)


def test_a_will_the_acl_refuses_is_logged_as_refused_not_as_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = Acl.parse("user bob\ntopic write bob/#\nuser alice\ntopic read alarm/#\n", Path("acl"))

    async def test(broker: Broker) -> None:
        watcher = Peer(broker)
        watcher.send(Connect("ops", V5, clean_start=True, username="alice"))
        watcher.send(Subscribe(1, (Subscription("alarm/#", 1),)))
        watcher.take()
        will = Will("alarm/dev-17", b"offline", 1)
        device = Peer(broker)
        device.send(Connect("dev-17", V5, clean_start=True, username="bob", will=will))
        device.close()  # without DISCONNECT: its Will is due
        await asyncio.sleep(0.1)
        assert watcher.take() == []

    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        run_broker(tmp_path, test, settings=MqttSettings(authorizer=acl))
    lines = logged(caplog, "dev-17")
    assert "client dev-17 may not publish its will to alarm/dev-17" in lines
    assert not [line for line in lines if "sending its will" in line]
    assert "(MQTT 5.0, user 'bob', clean session)" in lines[0]  # the connected line


def test_the_connected_line_of_a_session_resumed_to_end_at_its_disconnect_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An MQTT 5.0 CONNECT with Clean Start 0 and no Session Expiry resumes the session it
    finds, to end with this connection: its line said "clean session, resumed", which reads
    as a contradiction to an operator (a clean session is a new one; found by a hunt)."""

    async def test(broker: Broker) -> None:
        first, made = _connack(broker, "dev", clean=False, session_expiry_interval=600)
        assert not made.session_present
        first.close()
        await _until(lambda: not broker._sessions["dev"].connected)
        _, resumed = _connack(broker, "dev", clean=False)
        assert resumed.session_present

    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        run_broker(tmp_path, test)
    connected = [line for line in logged(caplog, "dev") if "connected from" in line]
    assert len(connected) == 2, connected
    assert connected[0].endswith("(MQTT 5.0, persistent session)"), connected
    assert connected[1].endswith("(MQTT 5.0, session resumed, ends at disconnect)"), connected


def test_qos_2_messages_refused_by_the_exactly_once_limits_are_logged_per_client_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The QoS document's memory attacks (here max_pending_per_source) as XMPP logs them: a
    warning naming the client, at most one a minute per client, across its connections, the
    next counting those passed over. Only the first on each connection was told, at warning
    level with the others at debug, so a client refused all day showed one line per
    reconnect and an operator could not see how many."""
    clock = ManualClock()
    quota = ReasonCode.QUOTA_EXCEEDED

    def held_then_refused(peer: Peer, first: int, count: int) -> list[ReasonCode]:
        for packet_id in range(first, first + count):
            peer.send(Publish("eo/a", b"x", 2, packet_id=packet_id))
        return [p.reason for p in peer.take() if isinstance(p, Pubrec)]

    async def test(broker: Broker) -> None:
        flood = connect_peer(broker, "flood")
        assert held_then_refused(flood, 1, 3) == [ReasonCode.SUCCESS, quota, quota]
        again = connect_peer(broker, "flood")  # a new connection, its clean session: one is held
        assert held_then_refused(again, 1, 2) == [ReasonCode.SUCCESS, quota]
        other = connect_peer(broker, "other")
        assert held_then_refused(other, 1, 2) == [ReasonCode.SUCCESS, quota]
        clock.advance(61)
        assert held_then_refused(again, 3, 1) == [quota]

    limits = ExactlyOnceLimits(max_pending_per_source=1)
    with caplog.at_level(logging.DEBUG, "boxmq.mqtt"):
        run_broker(tmp_path, test, clock, exactly_once=limits)
    told = logged(caplog, "QoS 2 message refused")
    assert [r.levelno for r in caplog.records if r.getMessage() in told] == [logging.WARNING] * 3
    assert [line.split(":")[0] for line in told] == ["client flood", "client other", "client flood"]
    assert all("(PUBREC 0x97 quota exceeded): " in line for line in told), told
    assert "max_pending_per_source (1)" in told[0]
    assert told[2].endswith(" (2 more since the last line)"), told[2]


def test_a_qos_2_message_of_an_untrusted_client_is_refused_naming_its_client_id(
    tmp_path: Path,
) -> None:
    """trusted_sources refuses a persistent session's QoS 2 PUBLISH at the exactly-once
    intake: its Reason String quoted boxmq's internal name for the client ('mqtt:stranger'),
    a name the client never gave; it names its client id now."""

    async def test(broker: Broker) -> None:
        stranger = connect_peer(broker, "stranger", expiry=300, clean=False)
        stranger.send(Publish("eo/a", b"x", 2, packet_id=1))
        await _until(lambda: bool(stranger.inbox))  # once the intake answered
        (pubrec,) = [p for p in stranger.take() if isinstance(p, Pubrec)]
        assert pubrec.reason is ReasonCode.NOT_AUTHORIZED
        said = pubrec.properties.reason_string
        assert said == "client stranger may not send messages exactly once", said

    run_broker(tmp_path, test, exactly_once=ExactlyOnceLimits(trusted_sources=frozenset({"x"})))


def test_an_untrusted_311_client_resending_on_each_reconnect_is_summarised_not_a_line_a_try(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 3.1.1 client trusted_sources does not list is closed at each QoS 2 PUBLISH (3.1.1
    has no refusal) and sends it again at each reconnect (§4.4), paho once a second: its
    connections are told 3 times then counted every 10 s, its refusals once a minute with
    a count, never a line a try (checked driving boxmq serve with paho for 75 s: 10 lines a
    minute, 2 warnings)."""
    clock = ManualClock(0)

    async def resend(broker: Broker, again: bool) -> None:
        peer = Peer(broker)
        peer.version = ProtocolVersion.V311
        peer.send(Connect("stranger", ProtocolVersion.V311, clean_start=False))
        peer.send(Publish("eo/a", b"x", 2, packet_id=1, dup=again))
        await _until(lambda: peer.closed)  # the intake's answer: the close

    async def test(broker: Broker) -> None:
        for second in range(61):  # serve ticks each second
            if second < 10 or second == 60:  # ten tries, then one a minute after the first
                await resend(broker, again=second > 0)
            clock.advance(1)
            broker.tick(clock.now())

    trusted = ExactlyOnceLimits(trusted_sources=frozenset({"mqtt:billing"}))
    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        run_broker(tmp_path, test, clock, exactly_once=trusted)
    told = [r.getMessage() for r in caplog.records if r.getMessage().startswith("client ")]
    refused = "client stranger: a QoS 2 message refused"
    assert [m.split(" from ")[0].split(" (")[0] for m in told] == [
        "client stranger connected",
        refused,
        "client stranger disconnected",
        "client stranger connected",
        "client stranger disconnected",
        "client stranger connected",
        "client stranger disconnected",
        "client stranger connected 7 more time(s) in the last 10s, their lines at debug level",
        "client stranger connected",  # the loop over: told again
        refused,
        "client stranger disconnected",
    ], told
    assert "(connection closed, MQTT 3.1.1 has no refusal)" in told[1], told[1]
    assert told[-2].endswith(" (9 more since the last line)"), told[-2]


def test_a_qos_2_message_held_in_memory_of_an_untrusted_client_is_refused(
    tmp_path: Path,
) -> None:
    """A non-persistent session's QoS 2 PUBLISH that needs no disk (only memory subscribers),
    or a retained one, is held in memory until its PUBREL, never through the exactly-once
    intake, and trusted_sources was asked of the intake alone: a client it does not list
    was served as long as it connected clean. It is refused as the intake refuses one."""

    async def test(broker: Broker) -> None:
        reader = connect_peer(broker, "reader")
        reader.send(Subscribe(1, (Subscription("eo/#", 2),)))
        stranger = connect_peer(broker, "stranger")
        stranger.send(Publish("eo/a", b"x", 2, packet_id=1))
        stranger.send(Publish("eo/r", b"x", 2, packet_id=2, retain=True))
        await _until(lambda: len(stranger.inbox) >= 2)
        pubrecs = [p for p in stranger.take() if isinstance(p, Pubrec)]
        assert [p.reason for p in pubrecs] == [ReasonCode.NOT_AUTHORIZED] * 2
        said = {p.properties.reason_string for p in pubrecs}
        assert said == {"client stranger may not send messages exactly once"}, said
        trusted = connect_peer(broker, "x")
        trusted.send(Publish("eo/b", b"y", 2, packet_id=1))
        await _until(lambda: bool(trusted.inbox))
        assert [type(p) for p in trusted.take()] == [Pubrec]
        assert not [p for p in reader.take() if isinstance(p, Publish)]  # only at its PUBREL

    run_broker(tmp_path, test, exactly_once=ExactlyOnceLimits(trusted_sources=frozenset({"x"})))


@pytest.mark.parametrize("persistent", [True, False], ids=["intake", "held"])
@pytest.mark.parametrize("client_id", ["site/7", "100%", "device-" + "d" * 40])
def test_a_client_whose_id_is_escaped_on_disk_is_trusted_by_the_id_it_gives(
    tmp_path: Path, client_id: str, persistent: bool
) -> None:
    """trusted_sources names an MQTT client `mqtt:<client id>` (docs/configuration.md), but
    the intake compared its source, the id as its files name it (exactly_once_source): a '/'
    or '%' escaped, a long id shortened to a hash, so such a client listed was refused."""

    async def test(broker: Broker) -> None:
        peer = connect_peer(broker, client_id, expiry=300 if persistent else 0)
        peer.send(Publish("eo/a", b"x", 2, packet_id=1))
        await _until(lambda: bool(peer.inbox))
        (pubrec,) = peer.take()
        assert isinstance(pubrec, Pubrec)
        assert pubrec.reason is ReasonCode.SUCCESS, pubrec.properties.reason_string

    trusted = ExactlyOnceLimits(trusted_sources=frozenset({f"mqtt:{client_id}"}))
    run_broker(tmp_path, test, exactly_once=trusted)


def test_qos_1_publishes_refused_for_an_id_in_use_are_logged_per_client_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """PUBACK 0x91 (a QoS 1 PUBLISH reusing the id of a QoS 2 one awaiting its PUBREL) was
    logged at INFO once per PUBLISH: a client stuck reusing an id filled the log. Now as the
    exactly-once refusals: a line naming the client, at most one a minute per client, across
    its connections, the next counting those passed over."""
    clock = ManualClock()
    in_use = ReasonCode.PACKET_IDENTIFIER_IN_USE

    def refused(peer: Peer, count: int) -> list[ReasonCode]:
        for _ in range(count):
            peer.send(Publish("iu/a", b"x", 1, packet_id=7))
        return [p.reason for p in peer.take() if isinstance(p, Puback)]

    async def test(broker: Broker) -> None:
        stuck = connect_peer(broker, "stuck")
        stuck.send(Publish("iu/a", b"two", 2, packet_id=7))
        assert [type(p) for p in stuck.take()] == [Pubrec]
        assert refused(stuck, 3) == [in_use] * 3
        other = connect_peer(broker, "other")
        other.send(Publish("iu/a", b"two", 2, packet_id=7))
        other.take()
        assert refused(other, 1) == [in_use]
        clock.advance(61)
        assert refused(stuck, 1) == [in_use]

    with caplog.at_level(logging.DEBUG, "boxmq.mqtt"):
        run_broker(tmp_path, test, clock)
    told = logged(caplog, "refused (0x91)")
    assert [line.split(":")[0] for line in told] == ["client stuck", "client other", "client stuck"]
    assert "reuses packet id 7" in told[0]
    assert told[0].endswith("refused (0x91)"), told[0]
    assert told[2].endswith(" (2 more since the last line)"), told[2]


def test_a_qos_2_repeat_and_a_qos_1_reuse_in_one_read_are_answered_in_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A persistent session's QoS 2 PUBLISH, its repeat and a QoS 1 PUBLISH under the same
    packet id in one read: the two QoS 2 ones go through the intake (one message), the QoS 1
    one is refused (0x91) as its id is in use, each answered in its turn, and the count of
    those not yet held (`Session.entering_release`) comes back to none."""

    async def test(broker: Broker) -> None:
        peer = connect_peer(broker, "again", expiry=60)
        two = Publish("ag/a", b"two", 2, packet_id=7)
        peer.send(two, replace(two, dup=True), Publish("ag/a", b"one", 1, packet_id=7))
        await _until(lambda: len(peer.inbox) == 3)
        assert [(type(p), getattr(p, "reason", None)) for p in peer.take()] == [
            (Pubrec, ReasonCode.SUCCESS),
            (Pubrec, ReasonCode.SUCCESS),
            (Puback, ReasonCode.PACKET_IDENTIFIER_IN_USE),
        ]
        session = broker._sessions["again"]
        assert session.entering_release == {}
        assert list(session.awaiting_release) == [7]

    with caplog.at_level(logging.WARNING, logger="boxmq"):
        run_broker(tmp_path, test)
    assert [r.getMessage() for r in caplog.records] == []


def test_a_refused_connect_is_logged_with_its_user_address_and_reason_code(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator reading why a device cannot connect needs who, from where, and the code
    the device was told; a missing user name reads as such, not as `None`. (Each from a host
    of its own: a host's refusals for one reason after its first are counted, not told.)"""

    async def test(broker: Broker) -> None:
        for username, host in (("carol", "memory"), (None, "elsewhere")):
            peer = Peer(broker)
            peer.peer = PeerAddress(host)
            props = Properties.build(authentication_method="SCRAM-SHA-1")
            peer.send(Connect("dev-9", V5, clean_start=True, username=username, properties=props))
            [connack] = peer.take()
            assert isinstance(connack, Connack)
            assert connack.reason is ReasonCode.BAD_AUTHENTICATION_METHOD

    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        run_broker(tmp_path, test)
    assert logged(caplog, "refused") == [
        "client 'dev-9' (user 'carol', from memory) refused: bad authentication method (0x8c)",
        "client 'dev-9' (no user name, from elsewhere) refused: bad authentication method (0x8c)",
    ]


def test_a_client_reconnecting_in_a_loop_is_told_a_few_times_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client in a reconnect loop wrote two lines a connection (found driving `boxmq
    serve`: 300 reconnections, 600 lines, and a line more for each that took over the one
    before): its first 3 of a run are told, the rest at debug level and counted into a line
    every 10 s; a client that comes back now and then is told each time."""
    clock = ManualClock(0)

    async def test(broker: Broker) -> None:
        connect = partial(connect_peer, broker)
        for _ in range(10):
            connect("looper").close()
        connect("looper")  # and another takes it over
        connect("looper").close()
        connect("steady").close()
        clock.advance(10)
        broker.tick(clock.now())
        clock.advance(10)
        broker.tick(clock.now())  # none since: the run is over
        connect("looper").close()
        clock.advance(15)
        connect("steady").close()  # now and then: told each time

    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        run_broker(tmp_path, test, clock)
    told = [m for m in caplog.messages if m.startswith("client ")]
    assert [m.split(" from ")[0] for m in told] == [
        "client looper connected",
        "client looper disconnected (closed)",
    ] * 3 + [
        "client steady connected",
        "client steady disconnected (closed)",
        "client looper connected 9 more time(s) in the last 10s, their lines at debug level "
        "(-v); if it should stay connected, its first disconnects say why it goes",
        "client looper connected",
        "client looper disconnected (closed)",
        "client steady connected",
        "client steady disconnected (closed)",
    ]


@pytest.mark.parametrize(
    ("reason", "version", "logged"),
    [
        (ReasonCode.BAD_USER_NAME_OR_PASSWORD, V5, "bad user name or password (0x86)"),
        (
            ReasonCode.BAD_USER_NAME_OR_PASSWORD,
            ProtocolVersion.V311,
            "bad user name or password (return code 4)",
        ),
        (ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, V5, "client identifier not valid (0x85)"),
        (
            ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
            ProtocolVersion.V311,
            "identifier rejected (return code 2)",
        ),
        (
            ReasonCode.NOT_AUTHORIZED,
            ProtocolVersion.V311,
            "not authorized (return code 5)",
        ),
    ],
)
def test_a_refusal_is_logged_with_the_code_its_clients_version_was_sent(
    reason: ReasonCode, version: ProtocolVersion, logged: str
) -> None:
    """A 3.1.1 client is sent a CONNACK return code, not the v5 reason: the log names the one
    it got (found by a review: `(0x86)` for a device that was told 4)."""
    assert reason_text(reason, version) == logged


@pytest.mark.parametrize(
    ("client_id", "username", "asked", "told"),
    [
        ("dev-1", "carol", 1, "reply/carol/dev-1/"),
        ("dev-1", "carol", 0, None),  # not asked: never told (MQTT-3.1.2-28)
        ("dev-1", None, 1, None),  # %u without a user name: nothing to fill in
        ("a/b", "carol", 1, None),  # a client id that would reach into other levels
        ("", "carol", 1, "reply/carol/auto-"),  # the id the server assigned
    ],
)
def test_response_information_is_filled_in_for_a_client_that_asks(
    tmp_path: Path, client_id: str, username: str | None, asked: int, told: str | None
) -> None:
    async def test(broker: Broker) -> None:
        peer = Peer(broker)
        props = Properties.build(request_response_information=asked)
        peer.send(Connect(client_id, V5, clean_start=True, username=username, properties=props))
        [connack] = peer.take()
        assert isinstance(connack, Connack)
        assert connack.reason is ReasonCode.SUCCESS
        got = connack.properties.response_information
        if told is not None and told.endswith("auto-"):
            assigned = connack.properties.assigned_client_identifier
            assert assigned is not None
            assert got == told[: -len("auto-")] + assigned + "/"
        else:
            assert got == told

    run_broker(tmp_path, test, settings=MqttSettings(response_information="reply/%u/%c/"))


@pytest.mark.parametrize(("limit", "told"), [(64, False), (1024, True)])
def test_a_connack_over_the_clients_maximum_packet_size_goes_without_response_information(
    tmp_path: Path, limit: int, told: bool
) -> None:
    """MQTT-3.1.2-24: it holds the client id, and a long id made the CONNACK 94 bytes for a
    client that takes 64; the server may leave it out, and keeps what the client needs. A
    Reason String and User Properties would go first (MQTT-3.2.2-19, MQTT-3.2.2-20; boxmq
    puts neither on a CONNACK, connection._CONNACK_OPTIONAL drops them with it)."""

    async def test(broker: Broker) -> None:
        peer = Peer(broker)
        props = Properties.build(request_response_information=1, maximum_packet_size=limit)
        peer.send(Connect("c" * 60, V5, clean_start=True, properties=props))
        [connack] = peer.take()
        assert isinstance(connack, Connack)
        assert connack.reason is ReasonCode.SUCCESS
        assert len(encode(connack, V5)) <= limit
        assert (connack.properties.response_information is not None) is told
        assert connack.properties.topic_alias_maximum == Limits().topic_alias_maximum  # kept

    run_broker(tmp_path, test, settings=MqttSettings(response_information="reply/%c/"))


def test_a_connack_over_the_clients_maximum_packet_size_goes_without_the_availabilities(
    tmp_path: Path,
) -> None:
    """MQTT-3.1.2-24: an assigned client id (37 bytes) and a capped Session Expiry Interval
    made a CONNACK of 69 bytes for a client that takes 64 (found by fuzzing `boxmq serve`).
    Retain, Wildcard Subscription, Subscription Identifier and Shared Subscription Available
    are sent as 1, which their absence means too (§3.2.2.3): they go first."""

    async def test(broker: Broker) -> None:
        peer = Peer(broker)
        props = Properties.build(session_expiry_interval=0xFFFFFFFF, maximum_packet_size=64)
        peer.send(Connect("", V5, clean_start=True, properties=props))
        [connack] = peer.take()
        assert isinstance(connack, Connack)
        assert connack.reason is ReasonCode.SUCCESS
        assert len(encode(connack, V5)) <= 64
        got = connack.properties
        assert got.assigned_client_identifier is not None
        assert got.session_expiry_interval == Limits().max_session_expiry
        assert got.receive_maximum == Limits().receive_maximum
        assert got.maximum_packet_size == Limits().max_packet_size
        assert got.topic_alias_maximum == Limits().topic_alias_maximum
        assert got.retain_available is None  # left out: available
        assert got.shared_subscription_available is None

    run_broker(tmp_path, test)


@pytest.mark.parametrize(
    ("delay", "clean", "expiry", "sent"),
    [
        (None, False, 600, True),
        (None, True, 600, True),
        (30, False, 600, False),
        (30, True, 600, True),
        # A session with expiry 0 ends with its connection: nothing is resumed, so nothing
        # cancels the delayed Will (§3.1.4: "the original Session is ended on the takeover").
        (30, False, 0, True),
        (30, True, 0, True),
    ],
)
def test_a_session_taken_over_sends_its_will_unless_a_delay_is_cancelled(
    tmp_path: Path, delay: int | None, clean: bool, expiry: int, sent: bool
) -> None:
    """MQTT 5.0 §3.1.4 and §3.1.2.5: the old connection is closed without DISCONNECT, so its
    Will is published, unless it has a Will Delay and the new connection resumes the session
    before the delay is over."""

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        old = _with_a_will(broker, "w", delay=delay, expiry=expiry)
        connect_peer(broker, "w", expiry=600, clean=clean)
        assert old.take()[-1] == Disconnect(ReasonCode.SESSION_TAKEN_OVER)
        await asyncio.sleep(0.1)
        got = [p.payload for p in watcher.take() if isinstance(p, Publish)]
        assert got == ([b"gone"] if sent else [])

    run_broker(tmp_path, test)


def test_an_invalid_disconnect_does_not_delete_the_will(tmp_path: Path) -> None:
    """DISCONNECT 0x00 with a Session Expiry Interval after CONNECT's 0 is a protocol error,
    not a DISCONNECT (§3.14.2.2.2): the connection is closed for it, so the Will goes out
    (MQTT-3.1.2-8)."""

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        device = Peer(broker)
        device.send(Connect("dev", V5, clean_start=True, will=Will("will/dev", b"gone")))
        with pytest.raises(ProtocolError):
            device.send(
                Disconnect(ReasonCode.SUCCESS, Properties.build(session_expiry_interval=100))
            )
        device.close()  # what the server does with the error (server.py)
        await asyncio.sleep(0.1)
        assert [p.payload for p in watcher.take() if isinstance(p, Publish)] == [b"gone"]

    run_broker(tmp_path, test)


@pytest.mark.parametrize(
    ("reason", "sent"),
    [
        (ReasonCode.NORMAL_DISCONNECTION, False),
        (ReasonCode.DISCONNECT_WITH_WILL_MESSAGE, True),
        (ReasonCode.UNSPECIFIED_ERROR, True),
        (ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, True),
    ],
)
def test_only_a_normal_disconnect_discards_the_will(
    tmp_path: Path, reason: ReasonCode, sent: bool
) -> None:
    """MQTT 5.0 §3.1.2.5: the Will goes out when the client "closes the Network Connection
    without first sending a DISCONNECT packet with a Reason Code 0x00"; only 0x00 discards it
    (MQTT-3.14.4-3). mosquitto 2.0.11 sends it on 0x04 alone (docs/mqtt.md, "Coming from
    mosquitto"), so a client that says 0x80 on its way out gets different Wills from each."""

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        device = Peer(broker)
        device.send(Connect("dev", V5, clean_start=True, will=Will("will/dev", b"gone")))
        device.send(Disconnect(reason))
        device.close()
        await asyncio.sleep(0.1)
        got = [p.payload for p in watcher.take() if isinstance(p, Publish)]
        assert got == ([b"gone"] if sent else [])

    run_broker(tmp_path, test)


def test_a_session_expiry_of_never_is_capped_and_told_in_connack(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        _, connack = _connack(broker, "forever", session_expiry_interval=0xFFFF_FFFF)
        limit = broker.limits.max_session_expiry
        assert connack.properties.session_expiry_interval == limit

    run_broker(tmp_path, test)


def test_a_311_persistent_session_ends_max_session_expiry_after_its_client_left(
    tmp_path: Path,
) -> None:
    """CleanSession 0 asks for no end, as a v5 "never" does: it gets the same limit (it was
    kept for ever under any value), written in its record for a restart to count."""
    settings = MqttSettings(limits=Limits(max_session_expiry=600))

    async def test(broker: Broker) -> None:
        peer = Peer(broker)
        peer.version = ProtocolVersion.V311
        peer.send(Connect("old", ProtocolVersion.V311, clean_start=False))
        assert peer.take() == [Connack()]
        record = read_record(str(tmp_path / "root"), "old")
        assert record is not None
        assert record.expiry == 600

    run_broker(tmp_path, test, settings=settings)


def test_a_session_away_ends_when_the_brokers_clock_passes_its_expiry(tmp_path: Path) -> None:
    """MQTT-4.1.0-2: the session state is discarded once its Session Expiry Interval has
    passed since its client left, timed on the broker's clock (its keep-alives' too), so
    that a test need not wait a minute of real time (it ran on the loop's timer)."""
    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        away = _subscriber(broker, "away", "news/#", 1, expiry=60)
        away.close()
        clock.advance(59)
        broker.tick(clock.now())
        assert "away" in broker._sessions  # 1 s left
        clock.advance(2)
        broker.tick(clock.now())
        assert "away" not in broker._sessions
        assert read_record(str(tmp_path / "root"), "away") is None
        assert _subscribed(broker, consumer_name("away")) == []

    run_broker(tmp_path, test, clock)


def _will_sent(watcher: Peer) -> list[bytes]:
    """The payloads of the Wills `watcher` was sent since its last look."""
    return [p.payload for p in watcher.take() if isinstance(p, Publish)]


def _with_a_will(broker: Broker, client_id: str, *, delay: int | None, expiry: int) -> Peer:
    """A client connected (its CONNACK not taken) with a Will "gone" to will/`client_id`
    delayed `delay` seconds, and a Session Expiry of `expiry`."""
    delayed = Properties.build(will_delay_interval=delay)
    will = Will(f"will/{client_id}", b"gone", properties=delayed)
    device = Peer(broker)
    device.send(
        Connect(
            client_id,
            V5,
            clean_start=True,
            will=will,
            properties=Properties.build(session_expiry_interval=expiry),
        )
    )
    return device


def _left_with_a_will(broker: Broker, client_id: str, *, delay: int, expiry: int) -> None:
    """A persistent client with a delayed Will, gone without DISCONNECT."""
    device = _with_a_will(broker, client_id, delay=delay, expiry=expiry)
    device.take()
    device.close()


@pytest.mark.parametrize("retain", [False, True])
def test_a_will_reaches_a_connected_durable_subscriber_with_no_tick(
    tmp_path: Path, retain: bool
) -> None:
    """A Will written into a connected persistent session's dropbox is sent to it once
    written, as a PUBLISH's batch is (Broker.pump_all), not at the timer's next tick (up to
    0.25 s later): the tick is never called here."""

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 1, expiry=600)
        device = Peer(broker)
        will = Will("will/dev", b"gone", qos=1, retain=retain)
        device.send(Connect("dev", V5, clean_start=True, will=will))
        device.take()
        device.close()
        await _until(lambda: bool(watcher.inbox))
        [sent] = watcher.take()
        assert isinstance(sent, Publish)
        assert (sent.topic, sent.payload) == ("will/dev", b"gone")

    run_broker(tmp_path, test)


def test_a_delayed_will_goes_when_the_brokers_clock_passes_its_delay(tmp_path: Path) -> None:
    """MQTT 5.0 §3.1.3.2.2: the Will waits its Will Delay Interval, timed on the broker's
    clock, as the session's end is, not on the loop's real-time timer (a clock moved on
    sent no Will, and its tests waited real seconds)."""
    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        _left_with_a_will(broker, "dev", delay=30, expiry=600)
        clock.advance(29)
        broker.tick(clock.now())
        await asyncio.sleep(0.05)  # what a Will due would have sent by then
        assert _will_sent(watcher) == []
        clock.advance(2)
        broker.tick(clock.now())
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]
        record = read_record(str(tmp_path / "root"), "dev")
        assert record is not None
        assert (record.will, record.will_due) == (None, None)  # sent: a restart sends none

    run_broker(tmp_path, test, clock)


def test_a_clock_stepped_forward_neither_sends_a_delayed_will_nor_ends_its_session_early(
    tmp_path: Path,
) -> None:
    """A delayed Will and a session's end are times of the broker's (wall) clock; stepped
    forward an hour (NTP, `date -s`: MqttServer tells the broker the step), they move with it,
    as the keep-alives do, where they would all be due at the next tick: the loop's timers
    they replace counted real time, which no step changes."""
    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        _left_with_a_will(broker, "dev", delay=30, expiry=60)
        clock.advance(3600)
        broker.clock_stepped(3600)
        clock.advance(1)
        broker.tick(clock.now())
        await asyncio.sleep(0.05)  # what a Will due would have sent by then
        assert _will_sent(watcher) == []
        assert "dev" in broker._sessions
        clock.advance(30)
        broker.tick(clock.now())
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]
        assert "dev" in broker._sessions  # its end is 60 s after it left, the step aside

    run_broker(tmp_path, test, clock)


def test_a_will_delayed_past_its_session_goes_at_its_end_on_the_brokers_clock(
    tmp_path: Path,
) -> None:
    """MQTT-3.1.3-9: the Will goes at the earlier of its delay and the session's end; with
    the end on the broker's clock and the Will on the loop's, a clock moved past the end
    ended the session and never sent its Will."""
    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        _left_with_a_will(broker, "dev", delay=3600, expiry=10)
        clock.advance(11)
        broker.tick(clock.now())
        assert "dev" not in broker._sessions
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]

    run_broker(tmp_path, test, clock)


class _CreepingClock(ManualClock):
    """A clock that moves a microsecond at each read, as a real one does between two reads of
    one close (the Will's time, then its session's end)."""

    def now(self) -> float:
        read = super().now()
        self.advance(1e-6)
        return read


def test_a_will_delayed_past_its_session_goes_with_its_end_not_a_tick_before(
    tmp_path: Path,
) -> None:
    """MQTT 5.0 §3.1.3.2.2: a Will goes when its delay passes or its session ends, whichever
    first. A delay not shorter than the expiry was timed apart from the end, from a read of
    the clock microseconds earlier at the close: a tick between the two sent the Will with
    the session still there, and its client, reconnecting the moment it saw its Will (a
    loaded machine's test_mqtt_will_edges), found the session present. The Will now goes
    with the end, right before it: the session is gone when the Will is seen."""
    clock = _CreepingClock(time.time())

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        _left_with_a_will(broker, "dev", delay=3600, expiry=10)
        record = read_record(str(tmp_path / "root"), "dev")
        assert record is not None
        assert record.will_due is not None
        for at in (record.will_due, record.will_due + 1):  # the first: a tick before the end
            broker.tick(at)
            with contextlib.suppress(AssertionError):
                await until_async(lambda: bool(watcher.inbox), within=0.2)
                break
        assert _will_sent(watcher) == [b"gone"]
        _, connack = _connack(broker, "dev", clean=False, session_expiry_interval=10)
        assert not connack.session_present

    run_broker(tmp_path, test, clock)


def _away_with_a_will_due_at_its_end(root: Path, now: float) -> None:
    """The record of "away", left at `now` by a dead server of this host: a Session Expiry
    of 10 s and a Will to will/away delayed an hour, so due with the session's end."""
    will = Will("will/away", b"gone", properties=Properties.build(will_delay_interval=3600))
    record = SessionRecord(
        "away", 10, disconnected_at=now, will=will, will_due=now + 10, counted_by=dead_token()
    )
    write_record(str(root), record)


def test_a_will_found_at_start_due_with_its_session_goes_right_before_its_end(
    tmp_path: Path,
) -> None:
    """A Will on disk at start whose delay is not shorter than its session's expiry (its due
    time the session's end) goes with that end, once, right before it: its client,
    reconnecting the moment it sees it, finds no session."""
    root = tmp_path / "root"
    clock = ManualClock(time.time())
    now = clock.now()
    _away_with_a_will_due_at_its_end(root, now)

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        broker.tick(now + 9)
        await asyncio.sleep(0.05)  # what a Will due would have sent by then
        assert _will_sent(watcher) == []
        broker.tick(now + 10)
        await _until(lambda: bool(watcher.inbox))
        _, connack = _connack(broker, "away", clean=False, session_expiry_interval=10)
        assert not connack.session_present
        await asyncio.sleep(0.05)  # a second copy would come with it
        assert _will_sent(watcher) == [b"gone"]

    run_broker(tmp_path, test, clock)


def test_a_will_sent_by_its_sessions_end_killed_before_the_end_is_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Will sent right before its session's end leaves the session's record once written
    (wills' _sent_from), though the end deletes that record a moment later: a server killed
    between the two (here: the end doing nothing, as nothing after a SIGKILL runs) left the
    record without it, and the restart ends the session without sending the Will again.
    Kept in it, the restart sent it a second time (MQTT 5.0 §3.1.3.2.2: once)."""
    root = tmp_path / "root"
    clock = ManualClock(time.time())
    now = clock.now()
    _away_with_a_will_due_at_its_end(root, now)
    ended: list[str] = []

    async def killed_at_the_end(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 1, expiry=600)
        watcher.close()  # away: its durable subscription keeps what comes
        monkeypatch.setattr(
            lifetimes_module.Lifetimes,
            "forget_on_disk",
            lambda _, client_id, record: ended.append(client_id),
        )
        broker.tick(now + 10)

        def without_its_will() -> bool:
            record = read_record(str(root), "away")
            return record is not None and record.will is None

        await _until(without_its_will)
        assert ended == ["away"]
        monkeypatch.undo()

    async def restarted(broker: Broker) -> None:
        await _until(lambda: read_record(str(root), "away") is None)  # ended at start
        watcher = connect_peer(broker, "watcher", expiry=600, clean=False)
        await _until(lambda: any(isinstance(p, Publish) for p in watcher.inbox))
        await asyncio.sleep(0.05)  # a second copy would come with it
        assert _will_sent(watcher) == [b"gone"]

    run_broker(tmp_path, killed_at_the_end, clock)
    clock.advance(11)
    run_broker(tmp_path, restarted, clock)


def test_a_will_due_while_the_server_stops_goes_at_the_next_start(tmp_path: Path) -> None:
    """docs/mqtt.md "At a SIGTERM": a delayed Will that came due after the broker's last tick
    is not sent by its stop (no tick runs then); its record keeps it, and the next start
    sends it at once, to a durable subscriber too, once, and drops it from the record."""
    root = str(tmp_path / "root")
    clock = ManualClock(time.time())

    async def first(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 1, expiry=600)
        watcher.close()  # away: its durable subscription keeps what comes
        _left_with_a_will(broker, "dev", delay=30, expiry=600)
        clock.advance(31)  # due, and the server stops before its next tick

    async def then(broker: Broker) -> None:
        watcher = connect_peer(broker, "watcher", expiry=600, clean=False)
        # No tick: a Will's write into the watcher's dropbox that ends after the watcher's
        # resume read it is sent to it then, as a PUBLISH's batch is (Broker.pump_all).
        await _until(lambda: any(isinstance(p, Publish) for p in watcher.inbox))
        await asyncio.sleep(0.05)  # a second copy would come with it
        [will] = [p for p in watcher.take() if isinstance(p, Publish)]
        assert (will.topic, will.payload) == ("will/dev", b"gone")
        await _until(lambda: (read_record(root, "dev") or SessionRecord("", 0)).will is None)

    run_broker(tmp_path, first, clock)
    record = read_record(root, "dev")
    assert record is not None
    assert record.will is not None  # not sent at the stop
    run_broker(tmp_path, then, clock)


def _taken_on_elsewhere(root: Path, client_id: str) -> None:
    """The session's record as another server writes it when it takes the session on from
    one of its host that died (Lifetimes._take_on), or as that one's restart does: away
    since now, held by no server, counted by the one that wrote it (here a process of this
    host that runs: this test's parent)."""
    record = read_record(str(root), client_id)
    assert record is not None
    taken = replace(record, holder=None, server=None, disconnected_at=time.time())
    write_record(str(root), replace(taken, counted_by=process_token(os.getppid())))


def test_a_session_kept_here_and_taken_on_by_another_server_is_let_go_at_its_expiry(
    tmp_path: Path,
) -> None:
    """Its client left this server for another on the root, which died; a third took the
    session on (or the dead one's restart did), its record naming no server. This server's
    copy is stale, but its expiry timer, counted from the client's leaving here, ended the
    session before the time its record says (its subscriptions and record deleted): it
    read a record naming no server as one no other holds. It lets go of its copy now."""
    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        roamer = _subscriber(broker, "roamer", "news/#", 1, expiry=1)
        roamer.close()
        _taken_on_elsewhere(tmp_path / "root", "roamer")
        clock.advance(2)
        broker.tick(clock.now())  # past its expiry here
        assert "roamer" not in broker._sessions
        assert read_record(str(tmp_path / "root"), "roamer") is not None
        assert _subscribed(broker, consumer_name("roamer")) == ["news/#"]

    run_broker(tmp_path, test, clock)


def test_a_session_kept_here_and_taken_on_by_another_server_is_resumed_from_the_disk(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As above, its client comes back here: the stale copy (what was sent from here,
    since acknowledged there) is let go, and the session read from the disk."""

    async def test(broker: Broker) -> None:
        roamer = connect_peer(broker, "roamer", expiry=600)
        roamer.close()
        stale = broker._sessions["roamer"]
        _taken_on_elsewhere(tmp_path / "root", "roamer")
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            connect_peer(broker, "roamer", expiry=600, clean=False)
        assert broker._sessions["roamer"] is not stale
        assert "client roamer: its session is held by another server" in caplog.text

    run_broker(tmp_path, test)


def _in_two_lives(
    tmp_path: Path,
    first: Callable[[Broker], Awaitable[None]],
    then: Callable[[Broker], Awaitable[None]],
    *,
    later: float = 0.0,
) -> None:
    """Run `first` on a broker, shut it down, then `then` on a new one over the same root (a
    restart: nothing but the disk carries over), whose clock is `later` seconds on."""
    run_broker(tmp_path, first)
    run_broker(tmp_path, then, ManualClock(time.time() + later) if later else None)


def _subscribed(broker: Broker, client_id: str) -> list[str]:
    return [text for text, _ in broker.box.topics.subscribed(client_id)]


def test_a_restart_keeps_a_publishers_qos2_awaiting_pubrel(tmp_path: Path) -> None:
    """A persistent publisher got PUBREC for a QoS 2 message; after a restart its session is
    present (so it keeps its PUBREL, MQTT 5.0 §4.4) and PUBREL delivers the message."""

    async def first(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600)
        keeper.send(Subscribe(1, (Subscription("nr/#", 2),)))
        keeper.send(Disconnect())
        pub = connect_peer(broker, "pubp", expiry=600)
        pub.send(Publish("nr/q2", b"stored", 2, packet_id=10))
        await _until(lambda: pub.inbox == [Pubrec(10)])

    async def then(broker: Broker) -> None:
        pub, connack = _connack(broker, "pubp", clean=False, session_expiry_interval=600)
        assert connack.session_present
        pub.send(Pubrel(10))
        await _until(lambda: bool(pub.inbox))
        assert pub.take() == [Pubcomp(10)]
        keeper = connect_peer(broker, "keeper", expiry=600, clean=False)
        await _until(lambda: any(isinstance(p, Publish) for p in keeper.inbox))
        assert [p.payload for p in keeper.take() if isinstance(p, Publish)] == [b"stored"]

    _in_two_lives(tmp_path, first, then)


def test_a_restart_keeps_no_local_on_a_persistent_subscription(tmp_path: Path) -> None:
    async def first(broker: Broker) -> None:
        own = connect_peer(broker, "own", expiry=600)
        own.send(Subscribe(1, (Subscription("s/#", 1, no_local=True),)))
        assert own.take() == [Suback(1, (ReasonCode.GRANTED_QOS_1,))]

    async def then(broker: Broker) -> None:
        own = connect_peer(broker, "own", expiry=600, clean=False)
        own.send(Publish("s/mine", b"mine", 1, packet_id=1))
        await _publish(broker, "s/theirs", b"theirs", 1)
        await _until(lambda: any(isinstance(p, Publish) for p in own.inbox))
        await asyncio.sleep(0.2)
        assert [p.payload for p in own.take() if isinstance(p, Publish)] == [b"theirs"]

    _in_two_lives(tmp_path, first, then)


def test_a_pubrel_for_nothing_stored_gets_pubcomp_0x92(tmp_path: Path) -> None:
    """A persistent session's PUBREL for an id with no stored message (one released before,
    or lost) is told so: PUBCOMP "Packet Identifier not found" (MQTT 5.0 §3.7.2.1)."""

    async def test(broker: Broker) -> None:
        pub = connect_peer(broker, "pubp", expiry=600)
        pub.send(Pubrel(77))
        await _until(lambda: bool(pub.inbox))
        assert pub.take() == [Pubcomp(77, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)]

    run_broker(tmp_path, test)


async def _exchange_qos2(pub: Peer, publish: Publish) -> None:
    """Publish at QoS 2 and complete the exchange: PUBREC, PUBREL, PUBCOMP."""
    packet_id = publish.packet_id or 0
    pub.send(publish)
    await _until(lambda: pub.inbox == [Pubrec(packet_id)])
    pub.take()
    pub.send(Pubrel(packet_id))
    await _until(lambda: pub.inbox == [Pubcomp(packet_id)])
    pub.take()


def test_a_restart_goes_on_with_the_packet_ids_where_a_clean_close_left_them(
    tmp_path: Path,
) -> None:
    """A persistent session closed with nothing in flight: its record names no packet id, but
    its client may still hold a stale copy under one it used (libmosquitto keeps one of a QoS 2
    PUBLISH sent again with DUP, docs/mqtt.md). After a restart its new messages take the ids
    after those, where they started again at 1 (session_record.py: `next_packet_id`)."""

    async def first(broker: Broker) -> None:
        device = connect_peer(broker, "device", expiry=600)
        device.send(Subscribe(1, (Subscription("ids/#", 2),)))
        await _until(lambda: any(isinstance(p, Suback) for p in device.inbox))
        device.take()
        pub = connect_peer(broker, "pub")
        for n in range(1, 4):
            await _exchange_qos2(pub, Publish(f"ids/{n}", b"m", 2, packet_id=n))
            await _until(lambda: any(isinstance(p, Publish) for p in device.inbox))
            [publish] = device.take()
            assert isinstance(publish, Publish)
            device.send(Pubrec(publish.packet_id or 0))
            await _until(lambda: bool(device.inbox))
            assert device.take() == [Pubrel(publish.packet_id or 0)]
            device.send(Pubcomp(publish.packet_id or 0))
        device.send(Disconnect())  # nothing in flight: the record names no packet id

    async def then(broker: Broker) -> None:
        device = connect_peer(broker, "device", expiry=600, clean=False)
        pub = connect_peer(broker, "pub")
        await _exchange_qos2(pub, Publish("ids/4", b"new", 2, packet_id=1))
        await _until(lambda: any(isinstance(p, Publish) for p in device.inbox))
        [publish] = [p for p in device.take() if isinstance(p, Publish)]
        assert (publish.payload, publish.packet_id, publish.dup) == (b"new", 4, False)

    _in_two_lives(tmp_path, first, then)


def test_pubrels_for_messages_settled_before_a_restart_go_in_the_order_they_were_sent(
    tmp_path: Path,
) -> None:
    """MQTT-4.6.0-4: PUBRELs go in the order their PUBRECs came, which a client sends in the
    order it got the PUBLISHes (MQTT-4.6.0-3). After a restart, the QoS 2 messages a record
    names as sent whose files are gone were settled by PUBRECs read after that record, and
    are sent PUBREL: in the order the record lists them, where they went sorted by packet
    id, so ids that wrapped (65535, then 1) went 1 first."""

    async def first(broker: Broker) -> None:
        device = connect_peer(broker, "device", expiry=600)
        device.send(Subscribe(1, (Subscription("jobs/#", 2),)))
        await _until(lambda: any(isinstance(p, Suback) for p in device.inbox))
        for n in range(2):
            await _publish(broker, f"jobs/{n}", b"m", 2)
        await _until(lambda: sum(isinstance(p, Publish) for p in device.inbox) == 2)
        device.send(Disconnect())  # its record names both, not answered

    run_broker(tmp_path, first)
    root = tmp_path / "root"
    record = read_record(str(root), "device")
    assert record is not None
    assert len(record.sent) == 2
    # As if sent under the last id and the first, and each PUBREC read after the record
    # was written: their files gone (settled), no PUBREL recorded.
    (m0, _, q0), (m1, _, q1) = record.sent
    sent = ((m0, 65_535, q0), (m1, 1, q1))
    write_record(str(root), replace(record, sent=sent, sent_qos2=(65_535, 1)))
    for folder, _, names in os.walk(root / "topic-root"):
        if folder.endswith(os.sep + "processing"):
            for name in names:
                os.unlink(os.path.join(folder, name))

    async def then(broker: Broker) -> None:
        device = connect_peer(broker, "device", expiry=600, clean=False)
        await _until(lambda: len(device.inbox) == 2)
        assert device.take() == [Pubrel(65_535), Pubrel(1)]

    run_broker(tmp_path, then)


@pytest.mark.parametrize("fsync", ["never", "always"])
@pytest.mark.parametrize("then", ["disconnect", "close", "takeover"])
def test_a_pubrel_read_just_before_the_session_ends_still_delivers_its_message(
    tmp_path: Path, fsync: str, then: str
) -> None:
    """A clean session's QoS 2 message for a share group waits on disk for PUBREL, which
    moves it to the group's dropbox as disk work. A PUBREL followed at once by the session's
    end (DISCONNECT, a closed socket, a clean takeover) lost the message: the end discarded
    what awaited PUBREL before that work ran. The next connection's message with the same
    packet id is a new one, after it."""

    async def test(broker: Broker) -> None:
        member = connect_peer(broker, "member")
        member.send(Subscribe(1, (Subscription("$share/g/jobs/#", 2),)))
        await _until(lambda: member.take() == [Suback(1, (ReasonCode.GRANTED_QOS_2,))])
        pub = connect_peer(broker, "pub")
        pub.send(Publish("jobs/1", b"first", 2, packet_id=1))
        await _until(lambda: pub.inbox == [Pubrec(1)])
        pub.send(Pubrel(1))
        if then == "disconnect":
            pub.send(Disconnect())
        elif then == "close":
            pub.close()
        else:
            pub = connect_peer(broker, "pub")  # clean start: the old session ends now
            await _exchange_qos2(pub, Publish("jobs/2", b"second", 2, packet_id=1))
        expected = [b"first"] if then != "takeover" else [b"first", b"second"]
        await _until(lambda: len(member.inbox) >= len(expected))
        await asyncio.sleep(0.2)  # and nothing more (member answers nothing: no PUBREL comes)
        assert [p.payload for p in member.take() if isinstance(p, Publish)] == expected

    run_broker(tmp_path, test, fsync=fsync)


def _before_writing(
    monkeypatch: pytest.MonkeyPatch, topic: str, before: Callable[[], object]
) -> None:
    """`Publishing.write` of a message to `topic` calls `before` first (it may wait, or
    raise); the writes to other topics go on as usual."""
    write = Publishing.write

    def patched(
        self: Publishing,
        client_id: str,
        packet: Publish,
        order: int | None = None,
        message_id: str | None = None,
    ) -> MessageId:
        if packet.topic == topic:
            before()
        return write(self, client_id, packet, order, message_id)

    monkeypatch.setattr(Publishing, "write", patched)


def test_a_pubrel_on_a_new_connection_then_the_sessions_end_delivers_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A persistent publisher's QoS 2 message got PUBREC; its connection drops while its last
    disk work is slow; it comes back (clean start 0), sends PUBREL and ends the session
    (DISCONNECT, expiry 0). The PUBREL waits behind the first connection's work, and so must
    the end's discard of what awaits PUBREL: it ran before the PUBREL (PUBCOMP 0x92, lost)."""
    slow = threading.Event()
    _before_writing(monkeypatch, "slow", lambda: slow.wait(20))

    async def test(broker: Broker) -> None:
        member = connect_peer(broker, "member")
        member.send(Subscribe(1, (Subscription("$share/g/jobs/#", 2),)))
        await _until(lambda: member.take() == [Suback(1, (ReasonCode.GRANTED_QOS_2,))])
        first = connect_peer(broker, "pub", expiry=100)
        first.send(Publish("jobs/1", b"work", 2, packet_id=1))
        await _until(lambda: first.take() == [Pubrec(1)])
        first.send(Publish("slow", b"r", 1, retain=True, packet_id=2))  # held up on disk
        first.close()
        again = connect_peer(broker, "pub", expiry=100, clean=False)
        again.send(Pubrel(1), Disconnect(properties=Properties.build(session_expiry_interval=0)))
        slow.set()
        await _until(lambda: bool(again.inbox))
        assert again.take() == [Pubcomp(1)]
        await _until(lambda: bool(member.inbox))
        assert [p.payload for p in member.take() if isinstance(p, Publish)] == [b"work"]

    run_broker(tmp_path, test)


@pytest.mark.parametrize("version", [V5, ProtocolVersion.V311], ids=["v5", "v311"])
def test_a_publish_whose_store_call_fails_unexpectedly_is_answered_as_not_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: ProtocolVersion
) -> None:
    """A store call that raised what no store failure raises (a bug) left every PUBLISH of
    its batch unanswered: the client waited for its PUBACK for ever. It is answered as a
    store failure: a v5 PUBACK 0x80, the others of the batch as they went; a 3.1.1 client,
    which has no negative PUBACK, is closed so that it sends the message again (§4.4)."""

    def broken() -> None:
        raise RuntimeError("a bug in a store call")

    _before_writing(monkeypatch, "broken", broken)

    async def test(broker: Broker) -> None:
        pub = Peer(broker)
        pub.version = version
        pub.send(Connect("pub", version, clean_start=True))
        assert isinstance(pub.take()[0], Connack)
        pub.send(  # retained: each written alone (Publishing.write), in one batch
            Publish("broken", b"x", 1, retain=True, packet_id=1),
            Publish("fine", b"x", 1, retain=True, packet_id=2),
        )
        if version is ProtocolVersion.V311:
            await _until(lambda: pub.closed)
            return
        await _until(lambda: len(pub.inbox) == 2)
        acks = pub.take()
        assert [(a.packet_id, a.reason) for a in acks if isinstance(a, Puback)] == [
            (1, ReasonCode.UNSPECIFIED_ERROR),
            (2, ReasonCode.SUCCESS),
        ]

    run_broker(tmp_path, test)


@pytest.mark.parametrize("then", ["disconnect", "takeover"])
def test_packets_held_behind_a_subscribe_still_count_when_the_connection_ends(
    tmp_path: Path, then: str
) -> None:
    """Under fsync=always, the packets read behind a SUBSCRIBE that waits for the disk wait
    for its SUBACK. A PUBREL and a DISCONNECT among them were dropped if the connection ended
    first (the client closed its socket after DISCONNECT, or reconnected): the message that
    got PUBREC was lost, and the Will went out after a normal DISCONNECT."""

    async def test(broker: Broker) -> None:
        member = connect_peer(broker, "member")
        member.send(Subscribe(1, (Subscription("$share/g/jobs/#", 2),)))
        await _until(lambda: member.take() == [Suback(1, (ReasonCode.GRANTED_QOS_2,))])
        watcher = connect_peer(broker, "watcher")
        watcher.send(Subscribe(1, (Subscription("will/#", 1),)))
        await _until(lambda: bool(watcher.take()))
        pub = Peer(broker)
        pub.send(Connect("pub", V5, clean_start=True, will=Will("will/pub", b"gone", 1)))
        assert isinstance(pub.take()[0], Connack)
        pub.send(Publish("jobs/1", b"work", 2, packet_id=1))
        await _until(lambda: pub.take() == [Pubrec(1)])
        waits = Subscribe(2, (Subscription("$share/other/x", 1),))  # on disk: holds the rest
        if then == "disconnect":
            pub.send(waits, Pubrel(1), Disconnect())
            pub.close()  # as a client does after DISCONNECT, before the SUBACK came
        else:
            pub.send(waits, Pubrel(1))
            connect_peer(broker, "pub")  # a takeover, clean start: the Will goes out
        await _until(lambda: bool(member.inbox))
        assert [p.payload for p in member.take() if isinstance(p, Publish)] == [b"work"]
        await asyncio.sleep(0.2)
        wills = [p.payload for p in watcher.take() if isinstance(p, Publish)]
        assert wills == ([] if then == "disconnect" else [b"gone"])

    run_broker(tmp_path, test, fsync="always")


def test_a_record_written_behind_the_sessions_end_does_not_bring_it_back(tmp_path: Path) -> None:
    """Under fsync=always, an UNSUBSCRIBE's record is a queued job; a DISCONNECT with expiry 0
    in the same read ends the session, and its record is removed. That removal ran at once,
    then the queued write put the record back, with the Will: a restart sent that Will."""

    async def test(broker: Broker) -> None:
        root = str(tmp_path / "root")
        pub = Peer(broker)
        props = Properties.build(session_expiry_interval=100)
        will = Will("will/pub", b"gone", 1)
        pub.send(Connect("pub", V5, clean_start=True, properties=props, will=will))
        pub.send(Subscribe(1, (Subscription("x/#", 1),)))
        await _until(lambda: any(isinstance(p, Suback) for p in pub.inbox))
        ended = Properties.build(session_expiry_interval=0)
        pub.send(Unsubscribe(2, ("x/#",)), Disconnect(properties=ended))
        await _until(lambda: any(isinstance(p, Unsuback) for p in pub.inbox))  # written
        await _until(lambda: read_record(root, "pub") is None)

    run_broker(tmp_path, test, fsync="always")


@pytest.mark.parametrize("second", ["publish", "will"])
def test_a_reconnected_client_does_not_overtake_what_its_last_connection_sent(
    tmp_path: Path, second: str
) -> None:
    """A client's first connection sends "one" behind disk work (a retained message) and
    drops; the client comes back at once and sends "two" on the same topic, or its new
    connection drops too and its Will says "two". The new connection's packets took the
    paths that skip the disk and overtook "one" (MQTT 5.0 §4.6): a status topic ended up
    "online" after its Will's "offline"."""

    async def test(broker: Broker) -> None:
        sub = _subscriber(broker, "sub", "status/#", 1)
        first = connect_peer(broker, "pub", expiry=100)
        first.send(Publish("status/pub", b"one", 1, retain=True, packet_id=1))
        first.close()
        will = Will("status/pub", b"two", 1) if second == "will" else None
        again = Peer(broker)
        props = Properties.build(session_expiry_interval=100)
        again.send(Connect("pub", V5, clean_start=False, properties=props, will=will))
        if second == "will":
            again.close()
        else:
            again.send(Publish("status/pub", b"two", 1, packet_id=2))
        await _until(lambda: len([p for p in sub.inbox if isinstance(p, Publish)]) >= 2)
        assert [p.payload for p in sub.take() if isinstance(p, Publish)] == [b"one", b"two"]

    run_broker(tmp_path, test)


def test_subscribing_again_after_resuming_with_expiry_0_keeps_the_waiting_messages(
    tmp_path: Path,
) -> None:
    """A session resumed with clean start 0 and expiry 0 is not persistent any more; its
    client subscribes again on connect, as most do. That SUBSCRIBE moved the subscription to
    memory, which deleted its dropbox, and the messages acknowledged to their publisher with it
    (MQTT-3.8.4-3: replacing a subscription loses nothing)."""

    async def test(broker: Broker) -> None:
        away = connect_peer(broker, "s", expiry=100)
        away.send(Subscribe(1, (Subscription("a", 1),)))
        away.send(Disconnect())
        pub = connect_peer(broker, "pub")
        for n in range(5):
            pub.send(Publish("a", b"m%d" % n, 1, packet_id=n + 1))
        await _until(lambda: len(pub.inbox) == 5)
        back, connack = _connack(broker, "s", clean=False, receive_maximum=1)
        assert connack.session_present
        back.send(Subscribe(2, (Subscription("a", 1),)))
        got: list[bytes] = []
        while len(got) < 5:
            await _until(lambda: any(isinstance(p, Publish) for p in back.inbox))
            for packet in back.take():
                if isinstance(packet, Publish):
                    got.append(packet.payload)
                    back.send(Puback(packet.packet_id or 0))
        assert got == [b"m%d" % n for n in range(5)]

    run_broker(tmp_path, test)


def test_a_session_resumed_with_a_smaller_receive_maximum_gets_its_messages_within_it(
    tmp_path: Path,
) -> None:
    """MQTT 5.0 §4.9, MQTT-3.3.4-9: a client that had 4 messages in flight comes back with a
    Receive Maximum of 2. It gets 2 of them again (DUP, same ids), the next one as it
    acknowledges one, and never more than 2 unanswered; all 6 arrive once, in order."""

    async def test(broker: Broker) -> None:
        away, _ = _connack(broker, "s", session_expiry_interval=100, receive_maximum=4)
        away.send(Subscribe(1, (Subscription("a", 1),)))
        pub = connect_peer(broker, "pub")
        for n in range(6):
            pub.send(Publish("a", b"m%d" % n, 1, packet_id=n + 1))
        await _until(lambda: len([p for p in away.inbox if isinstance(p, Publish)]) == 4)
        first_ids = [p.packet_id for p in away.take() if isinstance(p, Publish)]
        away.close()  # no PUBACK: all four stay in flight
        back, connack = _connack(broker, "s", clean=False, receive_maximum=2)
        assert connack.session_present
        got: list[Publish] = [p for p in back.take() if isinstance(p, Publish)]
        assert [(p.packet_id, p.dup) for p in got] == [(i, True) for i in first_ids[:2]]
        unanswered = [p.packet_id or 0 for p in got]
        while len(got) < 6:
            back.send(Puback(unanswered.pop(0)))
            await _until(lambda: any(isinstance(p, Publish) for p in back.inbox))
            new = [p for p in back.take() if isinstance(p, Publish)]
            unanswered += [p.packet_id or 0 for p in new]
            assert len(unanswered) <= 2
            got += new
        assert [p.payload for p in got] == [b"m%d" % n for n in range(6)]
        assert [p.dup for p in got] == [True] * 4 + [False] * 2

    run_broker(tmp_path, test)


@pytest.mark.parametrize(
    "client_id", ["s", "sensor.kitchen.temperature.building-7.floor-3.room-12"]
)
def test_no_local_holds_back_a_persistent_sessions_own_qos2_messages(
    tmp_path: Path, client_id: str
) -> None:
    """MQTT-3.8.3-3: with No Local, a session never gets its own messages back. A persistent
    session's subscription is served from disk, and its QoS 2 messages go through the
    exactly-once intake, which names their sender `mqtt:<name>`: the fan-out took that for
    someone else's, and sent the message back. A long client id is named by a hash (the same
    on both sides)."""

    async def test(broker: Broker) -> None:
        me = connect_peer(broker, client_id, expiry=100)
        me.send(Subscribe(1, (Subscription("a", 2, no_local=True),)))
        me.take()
        me.send(Publish("a", b"mine", 2, packet_id=1))
        await _until(lambda: me.take() == [Pubrec(1)])
        me.send(Pubrel(1))
        await _until(lambda: Pubcomp(1) in me.inbox)
        other = connect_peer(broker, "other")
        other.send(Publish("a", b"theirs", 2, packet_id=1))
        await _until(lambda: other.take() == [Pubrec(1)])
        other.send(Pubrel(1))
        await _until(lambda: any(isinstance(p, Publish) for p in me.inbox))
        payloads = [p.payload for p in me.take() if isinstance(p, Publish)]
        assert payloads == [b"theirs"]

    run_broker(tmp_path, test)


@pytest.mark.parametrize("through_intake", [False, True], ids=["memory", "intake"])
def test_the_wait_for_pubrel_counts_against_a_qos2_messages_expiry(
    tmp_path: Path, through_intake: bool
) -> None:
    """MQTT-3.3.2-5, MQTT-3.3.2-6: a QoS 2 message goes on at its PUBREL, so the time it
    waited for it is time in the server. One whose interval ran out meanwhile reached a
    subscriber with an interval of 1; one that had time left went with all of it."""
    clock = ManualClock(1000.0)

    async def test(broker: Broker) -> None:
        if through_intake:  # a persistent subscriber away: QoS 2 goes through the disk
            away = connect_peer(broker, "away", expiry=100)
            away.send(Subscribe(1, (Subscription("e/#", 2),)))
            away.send(Disconnect())
        sub = _subscriber(broker, "sub", "e/#", 2)
        pub = connect_peer(broker, "pub")
        for packet_id, (topic, seconds) in enumerate([("e/old", 1), ("e/new", 10)], start=1):
            props = Properties.build(message_expiry_interval=seconds)
            pub.send(Publish(topic, b"x", 2, packet_id=packet_id, properties=props))
        await _until(lambda: pub.inbox == [Pubrec(1), Pubrec(2)])
        pub.take()
        clock.advance(3.2)
        pub.send(Pubrel(1), Pubrel(2))
        await _until(lambda: Pubcomp(2) in pub.inbox)
        assert pub.take() == [Pubcomp(1), Pubcomp(2)]  # both done for the publisher
        await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
        got = [p for p in sub.take() if isinstance(p, Publish)]
        assert [(p.topic, p.properties.message_expiry_interval) for p in got] == [("e/new", 7)]

    run_broker(tmp_path, test, clock)


@pytest.mark.parametrize("reconnect", [True, False], ids=["after-reconnect", "same-connection"])
def test_a_retained_qos2_message_sent_again_during_its_write_is_routed_once(
    tmp_path: Path, reconnect: bool
) -> None:
    """A persistent session's retained QoS 2 message was written and routed at its PUBLISH:
    its repeat (DUP), read before that write ended (the client reconnected, or sent it again
    at once), found no trace of it yet, and was written and routed a second time. It goes
    through the exactly-once intake now, which answers such a repeat without storing it."""

    async def test(broker: Broker) -> None:
        sub = _subscriber(broker, "sub", "r/#", 2)
        for attempt in range(5):
            pub = connect_peer(broker, "p", expiry=100, clean=attempt == 0)
            first = Publish(f"r/{attempt}", b"v", 2, retain=True, packet_id=1)
            repeat = Publish(f"r/{attempt}", b"v", 2, retain=True, dup=True, packet_id=1)
            if reconnect:
                pub.send(first)
                pub.close()
                pub = connect_peer(broker, "p", expiry=100, clean=False)
                pub.send(repeat)
            else:
                pub.send(first, repeat)
            await _until(lambda peer=pub: Pubrec(1) in peer.inbox)  # type: ignore[misc]
            pub.send(Pubrel(1))
            await _until(lambda peer=pub: Pubcomp(1) in peer.inbox)  # type: ignore[misc]
            pub.send(Disconnect())
        await _until(lambda: len([p for p in sub.inbox if isinstance(p, Publish)]) >= 5)
        await asyncio.sleep(0.2)  # a second copy, if any, follows its first at once
        got = [p.topic for p in sub.take() if isinstance(p, Publish)]
        assert got == [f"r/{n}" for n in range(5)]

    run_broker(tmp_path, test)


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_a_shutdown_answers_what_it_stored_before_it_disconnects(
    tmp_path: Path, fsync: str
) -> None:
    """SIGTERM (broker.close) while a publisher's messages are being written: they are stored,
    and the publisher is told so before DISCONNECT 0x8B. The connection was closed first, the
    PUBACKs written to a closed link, and the publisher sent them all again after the
    restart (found by an audit: a SIGTERM gave as many duplicates as a SIGKILL)."""

    async def test(broker: Broker) -> None:
        member = connect_peer(broker, "member")  # a share group: what "pub" sends is written
        member.send(Subscribe(1, (Subscription("$share/g/a", 1),)))
        await _until(lambda: any(isinstance(p, Suback) for p in member.inbox))
        pub = connect_peer(broker, "pub")
        pub.send(*[Publish("a", b"m%d" % n, 1, packet_id=n + 1) for n in range(5)])
        await broker.close()
        *answers, last = pub.take()
        assert answers == [Puback(n + 1) for n in range(5)]
        assert isinstance(last, Disconnect)
        assert last.reason is ReasonCode.SERVER_SHUTTING_DOWN

    run_broker(tmp_path, test, fsync=fsync)


@pytest.mark.parametrize("gathers", [False, True])
def test_a_shutdown_drops_a_publish_held_behind_a_subscribe_unanswered(
    tmp_path: Path, gathers: bool
) -> None:
    """Under fsync=always a SUBSCRIBE holds back what its read brought after it. The shutdown
    let the PUBLISH go when the SUBSCRIBE's record was written, in a batch of its own, which
    for a client that gathers (one that sends while its batches commit) waited for its next
    read: its PUBACK came after the DISCONNECT, and the publisher sent the message again
    after the restart. Such packets are dropped at a stop now (a backlog of SUBSCRIBEs kept
    a server busy for over a minute): not stored, not answered, the DISCONNECT after the
    SUBACK, as if the PUBLISH had not been read."""

    async def test(broker: Broker) -> None:
        member = connect_peer(broker, "member")  # a share group: what "pub" sends is written
        member.send(Subscribe(1, (Subscription("$share/g/a", 1),)))
        await _until(lambda: any(isinstance(p, Suback) for p in member.inbox))
        pub = Peer(broker)
        props = Properties.build(session_expiry_interval=100)
        pub.send(Connect("pub", V5, clean_start=True, properties=props))
        await _until(lambda: bool(pub.inbox))  # the CONNACK, once the session's record is
        assert [type(packet) for packet in pub.take()] == [Connack]  # written
        [client] = [c for link, c in broker._clients.items() if link is pub]
        client.gathers = gathers  # as after a read that came while its batch committed
        pub.send(Subscribe(1, (Subscription("x/#", 1),)), Publish("a", b"m", 1, packet_id=7))
        await broker.close()
        assert [type(packet) for packet in pub.take()] == [Suback, Disconnect]
        assert not [packet for packet in member.take() if isinstance(packet, Publish)]

    run_broker(tmp_path, test, fsync="always")


def test_a_client_id_spelled_like_a_long_ids_name_does_not_share_its_qos2_intake(
    tmp_path: Path,
) -> None:
    """A long client id is named on disk by a prefix, `%h` and a hash; a short id spelled just
    like that name took the long one's exactly-once intake: its session's end dropped the
    long one's QoS 2 message awaiting PUBREL (PUBCOMP 0x92, the message lost)."""
    long_id = "sensor.kitchen.temperature.building-7.floor-3.room-12"

    async def test(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=100)
        keeper.send(Subscribe(1, (Subscription("t/#", 2),)))
        keeper.send(Disconnect())  # away: QoS 2 for it goes through the intake on disk
        victim = connect_peer(broker, long_id)
        victim.send(Publish("t/v", b"from the long id", 2, packet_id=1))
        await _until(lambda: victim.take() == [Pubrec(1)])
        other = connect_peer(broker, consumer_name(long_id))
        other.send(Disconnect())  # its session ends, and what it awaits PUBREL for with it
        victim.send(Pubrel(1))
        await _until(lambda: bool(victim.inbox))
        assert victim.take() == [Pubcomp(1)]

    run_broker(tmp_path, test)


class _RecordReader(Peer):
    """A peer that reads its session's record as each write reaches it: what the disk says
    at the moment the client has the packets (a SIGKILL then keeps just that)."""

    def __init__(self, broker: Broker, root: Path, client_id: str) -> None:
        super().__init__(broker)
        self.root, self.client_id = root, client_id
        self.seen: list[tuple[Packet, SessionRecord | None]] = []

    def flush(self) -> None:
        before = len(self.inbox)
        super().flush()
        record = read_record(str(self.root), self.client_id)
        self.seen += [(packet, record) for packet in self.inbox[before:]]


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_a_persistent_session_record_names_qos2_packet_ids_before_they_are_sent(
    tmp_path: Path, fsync: str
) -> None:
    """Each QoS 2 PUBLISH reaches the client with its packet id in the session's record, and
    each PUBREL with its id among those releasing: a restart after a SIGKILL sends them under
    those ids (session_record.py), where the client expects them."""

    async def test(broker: Broker) -> None:
        device = _RecordReader(broker, tmp_path / "root", "device")
        props = Properties.build(session_expiry_interval=600)
        device.send(Connect("device", V5, clean_start=True, properties=props))
        device.send(Subscribe(1, (Subscription("jobs/#", 2),)))
        await _until(lambda: any(isinstance(p, Suback) for p in device.inbox))
        pub = connect_peer(broker, "pub")
        for n in range(1, 4):
            await _exchange_qos2(pub, Publish(f"jobs/{n}", f"m{n}".encode(), 2, packet_id=n))
        await _until(lambda: sum(isinstance(p, Publish) for p in device.inbox) == 3)
        for packet in device.take():
            if isinstance(packet, Publish):
                device.send(Pubrec(packet.packet_id or 0))
        await _until(lambda: sum(isinstance(p, Pubrel) for p in device.inbox) == 3)
        publishes = [(p, r) for p, r in device.seen if isinstance(p, Publish)]
        pubrels = [(p, r) for p, r in device.seen if isinstance(p, Pubrel)]
        assert len(publishes) == len(pubrels) == 3
        for publish, record in publishes:
            assert record is not None
            assert publish.packet_id in {packet_id for _, packet_id, _ in record.sent}
        for pubrel, record in pubrels:
            assert record is not None
            assert pubrel.packet_id in record.releasing

    run_broker(tmp_path, test, fsync=fsync)


def test_a_retained_qos2_message_that_got_pubrec_survives_a_restart(tmp_path: Path) -> None:
    """A persistent session's retained QoS 2 message waits in the exactly-once intake, its
    retain flag with it, for its PUBREL, which after a restart sends it on once, as
    retained: its repeat (DUP) after the restart is answered, not routed again (it was
    routed at its PUBLISH, and a restart before PUBREC forgot so: a second copy)."""

    async def first(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600)
        keeper.send(Subscribe(1, (Subscription("ret/#", 2),)))
        keeper.send(Disconnect())
        pub = connect_peer(broker, "pubp", expiry=600)
        pub.send(Publish("ret/q2", b"kept", 2, retain=True, packet_id=11))
        await _until(lambda: bool(pub.inbox))
        assert pub.take() == [Pubrec(11)]
        pub.send(Publish("ret/q2", b"kept", 2, retain=True, dup=True, packet_id=11))
        assert pub.take() == [Pubrec(11)]  # a repeat: answered again

    async def then(broker: Broker) -> None:
        pub = connect_peer(broker, "pubp", expiry=600, clean=False)
        pub.send(Publish("ret/q2", b"kept", 2, retain=True, dup=True, packet_id=11))
        await _until(lambda: bool(pub.inbox))
        assert pub.take() == [Pubrec(11)]
        pub.send(Pubrel(11))
        await _until(lambda: bool(pub.inbox))
        assert pub.take() == [Pubcomp(11)]
        keeper = connect_peer(broker, "keeper", expiry=600, clean=False)
        await _until(lambda: any(isinstance(p, Publish) for p in keeper.inbox))
        await asyncio.sleep(0.2)  # a second copy, if any, follows its first at once
        assert [p.payload for p in keeper.take() if isinstance(p, Publish)] == [b"kept"]
        late = connect_peer(broker, "late")
        late.send(Subscribe(1, (Subscription("ret/#", 2),)))
        await _until(lambda: any(isinstance(p, Publish) for p in late.inbox))
        [retained] = [p for p in late.take() if isinstance(p, Publish)]
        assert (retained.topic, retained.payload, retained.retain) == ("ret/q2", b"kept", True)

    _in_two_lives(tmp_path, first, then)


class _HeldWrites:
    """`Publishing.write` held, once it is done, until `release`: the window in which the
    retained store holds a message that the loop has not yet routed to its subscribers. Only
    the writes to `topics`, each topic's first; the others go on."""

    def __init__(self, write: Callable[..., MessageId], *topics: str) -> None:
        self._write = write
        self.done = {topic: threading.Event() for topic in topics}
        self.release = {topic: threading.Event() for topic in topics}

    def __call__(
        self,
        client_id: str,
        packet: Publish,
        order: int | None = None,
        message_id: str | None = None,
    ) -> MessageId:
        try:
            return self._write(client_id, packet, order, message_id)
        finally:
            if packet.topic in self.done:
                self.done[packet.topic].set()
                self.release[packet.topic].wait(20)


class _HeldDelivers:
    """`Publishing._deliver_retained` held as `_HeldWrites` holds a write: a persistent
    session's retained QoS 2 message, sent on out of the intake at its PUBREL."""

    def __init__(self, deliver: Callable[[str, int, str, int], object], *topics: str) -> None:
        self._deliver = deliver
        self.done = {topic: threading.Event() for topic in topics}
        self.release = {topic: threading.Event() for topic in topics}

    def __call__(self, client_id: str, packet_id: int, topic: str, order: int) -> object:
        try:
            return self._deliver(client_id, packet_id, topic, order)
        finally:
            if topic in self.done:
                self.done[topic].set()
                self.release[topic].wait(20)


def _publishes(peer: Peer) -> list[tuple[bytes, bool]]:
    return [(p.payload, p.retain) for p in peer.take() if isinstance(p, Publish)]


@pytest.mark.parametrize(
    ("qos", "expiry"),
    [(0, 0), (1, 0), (2, 0), (2, 600)],
    ids=["qos0", "qos1", "qos2-written-at-pubrel", "qos2-persistent-stored-at-publish"],
)
def test_a_subscribe_while_a_retained_message_is_written_gets_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qos: int, expiry: int
) -> None:
    """A SUBSCRIBE read after the retained store took a message but before the loop routed
    it waits for its routing (retained_window.py), then gets it as retained, and not live
    again (at most once, exactly once); a subscriber from before gets it live once, and what
    is published after the SUBSCRIBE goes out live."""

    async def test(broker: Broker) -> None:
        held: _HeldWrites | _HeldDelivers
        if expiry:  # in the intake since its PUBLISH: sent on (and retained) at its PUBREL
            held = _HeldDelivers(broker._publishing._deliver_retained, "r/t")
            monkeypatch.setattr(broker._publishing, "_deliver_retained", held)
        else:
            held = _HeldWrites(broker._publishing.write, "r/t")
            monkeypatch.setattr(broker._publishing, "write", held)
        early = _subscriber(broker, "early", "r/#", 2)
        pub = connect_peer(broker, "pub", expiry=expiry)
        late = connect_peer(broker, "late")
        pub.send(Publish("r/t", b"one", qos, retain=True, packet_id=None if qos == 0 else 1))
        if qos == 2:
            await _until(lambda: bool(pub.inbox))
            assert pub.take() == [Pubrec(1)]
            pub.send(Pubrel(1))
        await _until(held.done["r/t"].is_set)  # in the store, its routing held back
        late.send(Subscribe(1, (Subscription("r/#", 2),)))
        await asyncio.sleep(0.05)
        assert late.take() == []  # not even its SUBACK: it waits for the routing
        held.release["r/t"].set()
        await _until(lambda: bool(early.inbox) and bool(late.inbox))
        await asyncio.sleep(0.05)  # whatever else the routing would send
        assert _publishes(early) == [(b"one", False)]
        assert _publishes(late) == [(b"one", True)]
        pub.send(Publish("r/t", b"two", 1, retain=True, packet_id=2))
        await _until(lambda: bool(late.inbox))
        await asyncio.sleep(0.05)
        assert _publishes(late) == [(b"two", False)]
        assert _publishes(early) == [(b"two", False)]

    run_broker(tmp_path, test)


def test_a_subscribe_while_a_retained_will_is_written_behind_its_client_gets_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retained Will that waits for its client's retained message to be written is routed
    once written, as that message is: a SUBSCRIBE in between waits for both to be routed,
    then gets each once, as retained."""

    async def test(broker: Broker) -> None:
        held = _HeldWrites(broker._publishing.write, "r/t", "r/w")
        monkeypatch.setattr(broker._publishing, "write", held)
        early = _subscriber(broker, "early", "r/#", 1)
        pub = Peer(broker)
        will = Will("r/w", b"gone", 1, retain=True)
        pub.send(Connect("pub", V5, clean_start=True, will=will))
        pub.send(Publish("r/t", b"one", 1, retain=True, packet_id=1))
        await _until(held.done["r/t"].is_set)
        pub.close()  # its Will waits behind the message being written
        held.release["r/t"].set()
        await _until(held.done["r/w"].is_set)
        late = connect_peer(broker, "late")
        late.send(Subscribe(1, (Subscription("r/#", 1),)))
        await asyncio.sleep(0.05)
        assert late.take() == []  # it waits for the routing of both
        held.release["r/w"].set()
        await _until(lambda: len(early.inbox) == 2 and bool(late.inbox))
        await asyncio.sleep(0.05)
        assert _publishes(early) == [(b"one", False), (b"gone", False)]
        assert sorted(_publishes(late)) == [(b"gone", True), (b"one", True)]

    run_broker(tmp_path, test)


def test_a_message_that_expires_while_queued_behind_a_slow_client_is_not_sent(
    tmp_path: Path,
) -> None:
    async def test(broker: Broker) -> None:
        slow = Peer(broker)
        props = Properties.build(receive_maximum=1)
        slow.send(Connect("slow", V5, clean_start=True, properties=props))
        slow.send(Subscribe(1, (Subscription("x", 1),)))
        slow.take()
        pub = connect_peer(broker, "pub")
        pub.send(Publish("x", b"first", 1, packet_id=1))
        soon = Properties.build(message_expiry_interval=1)
        pub.send(Publish("x", b"expires", 1, packet_id=2, properties=soon))
        [first] = [p for p in slow.take() if isinstance(p, Publish)]
        assert first.payload == b"first"
        await asyncio.sleep(1.2)  # the second waits behind the first, past its interval
        assert first.packet_id is not None
        slow.send(Puback(first.packet_id))
        assert [p for p in slow.take() if isinstance(p, Publish)] == []

    run_broker(tmp_path, test)


class _GatedReading:
    """`Topics.retained_reading`, whose reading in a thread other than the loop's stops after
    `after` messages until `go` is set: the loop's turns while a worker reads are counted, not
    timed. Read on the loop (as before the worker did), it never waits."""

    def __init__(self, reading: Callable[[str], Any], after: int) -> None:
        self._reading = reading
        self._after = after
        self.waiting = threading.Event()
        self.go = threading.Event()

    def __call__(self, topic_filter: str) -> Any:
        for count, found in enumerate(self._reading(topic_filter)):
            if count == self._after and threading.current_thread() is not threading.main_thread():
                self.waiting.set()
                self.go.wait(20)
            yield found


def _retained_topics(broker: Broker, count: int) -> set[bytes]:
    for n in range(count):
        broker.box.publish(f"dev/{n}/status", f"s{n}".encode(), qos=0, retain=True)
    return {f"s{n}".encode() for n in range(count)}


def test_a_big_retained_subscribe_is_read_off_the_loop_and_its_subscription_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,000 retained topics: a SUBSCRIBE to dev/# is answered at once with a chunk of them,
    the rest read by a worker, a chunk at a time; meanwhile the server answers another
    client's PINGREQ, and what is published to the subscription waits until every retained
    message is sent (a retained one sent already not twice). Was: all read on the loop, every
    client of the server held for seconds with 20,000."""

    async def test(broker: Broker) -> None:
        expected = _retained_topics(broker, 2_000)
        gated = _GatedReading(broker.box.topics.retained_reading, after=500)
        monkeypatch.setattr(broker.box.topics, "retained_reading", gated)
        sub = connect_peer(broker, "sub")
        other = connect_peer(broker, "other")
        sub.send(Subscribe(1, (Subscription("dev/#", 0),)))
        first = sub.take()
        assert isinstance(first[0], Suback)
        got = [(p.payload, p.retain) for p in first[1:] if isinstance(p, Publish)]
        assert 0 < len(got) < 500  # a chunk on the loop, the rest by a worker
        await _until(gated.waiting.is_set)
        await _until(lambda: len(got) + len(sub.inbox) >= 500)
        other.send(Pingreq())
        assert other.take() == [Pingresp()]  # the loop is free while the worker reads
        other.send(Publish("dev/7/status", b"new", 1, retain=True, packet_id=1))
        other.send(Publish("dev/new", b"live", 0))
        [held] = broker._delivery.holding.values()
        await _until(lambda: len(held) == 2)  # routed to the subscription, held
        got += _publishes(sub)
        assert len(got) == 500  # nothing more while the reading waits, nothing live
        gated.go.set()
        await _until(lambda: any(getattr(p, "payload", 0) == b"live" for p in sub.inbox))
        await asyncio.sleep(0.05)  # whatever else would come
        got += _publishes(sub)
        retained = [payload for payload, retain in got if retain]
        live = [payload for payload, retain in got if not retain]
        assert len(retained) == len(set(retained)) == 2_000
        if b"s7" in retained:  # read before "new" came: that one is sent live, after
            assert set(retained) == expected
            assert live == [b"new", b"live"]
        else:  # read after: sent as retained, and not live again
            assert set(retained) == expected - {b"s7"} | {b"new"}
            assert live == [b"live"]
        assert got[len(retained) :] == [(payload, False) for payload in live]

    run_broker(tmp_path, test)


def test_a_subscriber_gone_while_its_retained_messages_are_read_stops_the_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that disconnects while a worker reads its SUBSCRIBE's retained messages is
    sent nothing more, what was held for it goes, and the reading stops at its next chunk."""

    async def test(broker: Broker) -> None:
        _retained_topics(broker, 1_000)
        gated = _GatedReading(broker.box.topics.retained_reading, after=300)
        monkeypatch.setattr(broker.box.topics, "retained_reading", gated)
        sub = connect_peer(broker, "sub")
        sub.send(Subscribe(1, (Subscription("dev/#", 1),)))
        await _until(gated.waiting.is_set)
        await _until(lambda: len(sub.inbox) >= 301)  # SUBACK, 300 before the wait
        sub.take()
        other = connect_peer(broker, "other")
        other.send(Publish("dev/new", b"live", 0))
        assert len(broker._delivery.holding[broker._sessions["sub"], "dev/#"]) == 1
        sub.close()
        gated.go.set()
        await _until(lambda: not broker._delivery.holding)  # the reading is over
        assert "sub" not in broker._sessions
        assert sub.take() == []

    run_broker(tmp_path, test)


def test_a_persistent_sessions_retained_messages_wait_on_disk_until_acknowledged(
    tmp_path: Path,
) -> None:
    """The retained messages a persistent session's SUBSCRIBE brings are written into its
    dropbox: one it had not acknowledged when the server restarted comes again."""

    async def first(broker: Broker) -> None:
        pub = connect_peer(broker, "pub")
        pub.send(Publish("ret/a", b"kept", 1, retain=True, packet_id=1))
        await _until(lambda: pub.inbox == [Puback(1)])
        sub = connect_peer(broker, "sub", expiry=600)
        sub.send(Subscribe(1, (Subscription("ret/#", 1),)))
        await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
        [sent] = [p for p in sub.take() if isinstance(p, Publish)]
        assert (sent.payload, sent.retain) == (b"kept", True)  # never acknowledged

    async def then(broker: Broker) -> None:
        back = connect_peer(broker, "sub", expiry=600, clean=False)

        def arrived() -> bool:
            broker.tick(SystemClock().now())  # the server's timer: the hand-off back is 1 s
            return any(isinstance(p, Publish) for p in back.inbox)

        await _until(arrived)
        [again] = [p for p in back.take() if isinstance(p, Publish)]
        assert (again.payload, again.retain) == (b"kept", True)

    _in_two_lives(tmp_path, first, then)


def test_retain_as_published_on_a_persistent_session_and_a_share_group(tmp_path: Path) -> None:
    """A live retained message reaches a subscription on disk with RETAIN as published when it
    asked for Retain As Published, and with RETAIN 0 otherwise (MQTT 5.0 §3.3.1.3)."""

    async def test(broker: Broker) -> None:
        subscribers = {}
        for name, text, rap in (
            ("keeps", "r/#", True),
            ("clears", "r/#", False),
            ("member", "$share/g/r/#", True),
        ):
            peer = connect_peer(broker, name, expiry=600)
            peer.send(Subscribe(1, (Subscription(text, 1, retain_as_published=rap),)))
            peer.take()
            subscribers[name] = peer
        await _publish(broker, "r/live", b"now", 1)
        pub = connect_peer(broker, "pub2")
        pub.send(Publish("r/live", b"kept", 1, retain=True, packet_id=2))

        def all_have_two() -> bool:
            return all(
                len([x for x in peer.inbox if isinstance(x, Publish)]) == 2
                for peer in subscribers.values()
            )

        await _until(all_have_two)
        got = {
            name: [(p.payload, p.retain) for p in peer.take() if isinstance(p, Publish)]
            for name, peer in subscribers.items()
        }
        assert got == {
            "keeps": [(b"now", False), (b"kept", True)],
            "clears": [(b"now", False), (b"kept", False)],
            "member": [(b"now", False), (b"kept", True)],
        }

    run_broker(tmp_path, test)


def test_a_restart_keeps_the_subscription_identifier_and_retain_as_published(
    tmp_path: Path,
) -> None:
    """MQTT 5.0 §3.8.2.1.2 and §3.8.3.1: options of a persistent subscription that shape what
    it is sent, restored from the session's record."""

    async def first(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600)
        wanted = Subscription("id/#", 1, retain_as_published=True)
        props = Properties.build(subscription_identifiers=(42,))
        keeper.send(Subscribe(1, (wanted, Subscription("$share/g/sh/#", 1)), properties=props))
        assert keeper.take() == [Suback(1, (ReasonCode.GRANTED_QOS_1, ReasonCode.GRANTED_QOS_1))]

    async def then(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600, clean=False)
        pub = connect_peer(broker, "pub")
        pub.send(Publish("id/x", b"kept", 1, retain=True, packet_id=1))
        pub.send(Publish("sh/x", b"shared", 1, packet_id=2))
        await _until(lambda: len([p for p in keeper.inbox if isinstance(p, Publish)]) == 2)
        got = {p.payload: p for p in keeper.take() if isinstance(p, Publish)}
        assert got[b"kept"].properties.subscription_identifiers == (42,)
        assert got[b"kept"].retain  # Retain As Published
        assert got[b"shared"].properties.subscription_identifiers == (42,)

    _in_two_lives(tmp_path, first, then)


def test_subscriptions_under_a_client_id_with_no_session_record_are_left_alone(
    tmp_path: Path,
) -> None:
    """What a session record does not name may be another door's (`boxmq subscribe --name`,
    the Python API), or an older boxmq's: a persistent client with that id is not given it
    (no session present, none of its messages), and its clean start does not delete it."""

    async def first(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600)
        keeper.send(Subscribe(1, (Subscription("old/#", 1),)))

    async def then(broker: Broker) -> None:
        pub = connect_peer(broker, "pub")
        pub.send(Publish("old/x", b"kept", 1, packet_id=1))
        keeper, connack = _connack(broker, "keeper", clean=False, session_expiry_interval=600)
        assert not connack.session_present
        await asyncio.sleep(0.3)
        assert not any(isinstance(p, Publish) for p in keeper.take())
        _connack(broker, "keeper", clean=True)
        assert _subscribed(broker, "keeper") == ["old/#"]
        assert broker.box.subscription("old/#", "keeper").counts().ready == 1

    run_broker(tmp_path, first)
    remove_record(str(tmp_path / "root"), "keeper")
    run_broker(tmp_path, then)


def test_a_client_with_no_session_record_takes_its_old_subscription_back_by_subscribing(
    tmp_path: Path,
) -> None:
    """Told its session is not present, a client subscribes again: to the same filter, it
    gets what its old subscription (an older boxmq's) collected, which is its own from then."""

    async def first(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600)
        keeper.send(Subscribe(1, (Subscription("old/#", 1),)))

    async def then(broker: Broker) -> None:
        connect_peer(broker, "pub").send(Publish("old/x", b"kept", 1, packet_id=1))
        keeper, connack = _connack(broker, "keeper", clean=False, session_expiry_interval=600)
        assert not connack.session_present
        keeper.send(Subscribe(1, (Subscription("old/#", 1),)))
        await _until(lambda: any(isinstance(p, Publish) for p in keeper.inbox))
        assert [p.payload for p in keeper.take() if isinstance(p, Publish)] == [b"kept"]
        record = read_record(broker.box.root, "keeper")
        assert record is not None
        assert record.made("old/#")

    run_broker(tmp_path, first)
    remove_record(str(tmp_path / "root"), "keeper")
    run_broker(tmp_path, then)


def test_an_older_boxmqs_record_keeps_a_membership_it_does_not_name_after_a_restart(
    tmp_path: Path,
) -> None:
    """A record of a boxmq that did not list the share groups being left owns every
    membership under its name (SessionRecord.made): the look at the filters its record
    names alone would not find one it left, so such a record's session scans them all. The
    membership is found as one being left, and, holding no message, left at once."""

    async def first(broker: Broker) -> None:
        member = connect_peer(broker, "member", expiry=600)
        member.send(Subscribe(1, (Subscription("$share/g/x/#", 1), Subscription("own/#", 1))))
        member.close()

    async def then(broker: Broker) -> None:
        assert sorted(_subscribed(broker, consumer_name("member"))) == ["$share/g/x/#", "own/#"]
        connect_peer(broker, "member", expiry=600, clean=False)
        assert list(broker._sessions["member"].subscriptions) == ["own/#"]
        assert _subscribed(broker, consumer_name("member")) == ["own/#"]

    run_broker(tmp_path, first)
    root = str(tmp_path / "root")
    record = read_record(root, "member")
    assert record is not None
    options = {"own/#": record.options["own/#"]}
    write_record(root, replace(record, options=options, leaving=None))
    run_broker(tmp_path, then)


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("overlapping-in-flight-090cabb", [(b"q2/a", 1, 2, True), (b"q2/a", 2, 2, True)]),
        ("overlapping-qos-090cabb", [(b"q2/a", 1, 1, True), (b"q2/a", 2, 2, True)]),
    ],
)
def test_an_older_boxmqs_message_in_flight_from_two_filters_goes_again_under_both_ids(
    tmp_path: Path, fixture: str, expected: list[tuple[bytes, int, int, bool]]
) -> None:
    """Roots written by boxmq 090cabb (stop 40), stopped with SIGTERM: a session record names
    a message in flight from two overlapping filters (q2/# and q2/+) twice, by message id
    alone, under packet ids 1 and 2. The copy of one dropbox went again under id 2 and the
    other as a new PUBLISH under id 3, which the client, holding both, delivers a third time
    (found by an upgrade hunt). In the second, q2/+ was granted QoS 1 and went first under id
    1, and its record lists q2/# first (a broker that resumed the session from the disk took
    its dropboxes in the order found, not always its record's): the QoS 2 copy, taken first
    here, must not take id 1, which the client holds as a QoS 1 message."""
    shutil.copytree(Path(__file__).parent / "fixtures" / fixture, tmp_path / "root")
    left = read_record(str(tmp_path / "root"), "s3")
    assert left is not None
    assert left.disconnected_at is not None

    async def then(broker: Broker) -> None:
        peer, connack = _connack(broker, "s3", clean=False, session_expiry_interval=3600)
        assert connack.session_present
        await _until(lambda: len(peer.inbox) >= 2)
        again = [
            (p.payload, p.packet_id, p.qos, p.dup) for p in peer.take() if isinstance(p, Publish)
        ]
        assert sorted(again) == expected

    run_broker(tmp_path, then, ManualClock(left.disconnected_at + 5))


def test_a_resuming_connects_record_names_an_older_records_repeated_ids() -> None:
    """The record written at a resuming CONNECT, before its first pump, names what the
    process before had in flight; an older record's further copies of one message (its
    repeated ids, `Session.sent_before_repeated`) with them, or a SIGKILL in that window left
    the next start one id short, the copy going as new."""
    session = Session("s3", window=10, queue_limit=10)
    session.sent_before[None, "m1"] = 1
    session.sent_before_repeated["m1"] = [2]
    session.sent_qos2_before = frozenset({1, 2})
    assert list(recording._sent_before(session)) == [("m1", 1, None), ("m1", 2, None)]
    assert session.qos2_sent_before() == [1, 2]


def test_a_session_whose_time_ran_out_while_the_broker_was_down_ends_at_start(
    tmp_path: Path,
) -> None:
    async def first(broker: Broker) -> None:
        for client_id, expiry in (("gone", 600), ("kept", 3600)):
            away = connect_peer(broker, client_id, expiry=expiry)
            away.send(Subscribe(1, (Subscription(f"{client_id}/#", 1),)))
            away.send(Disconnect())

    async def then(broker: Broker) -> None:
        assert _subscribed(broker, "gone") == []  # its dropbox is deleted: it collects no more
        assert read_record(broker.box.root, "gone") is None
        assert _subscribed(broker, "kept") == ["kept/#"]
        # It ends at its own deadline, unless its client returns.
        assert "kept" in broker._lifetimes.expiries
        kept = connect_peer(broker, "kept", expiry=3600, clean=False)
        assert "kept" not in broker._lifetimes.expiries
        kept.send(Disconnect())
        assert "kept" in broker._lifetimes.expiries

    _in_two_lives(tmp_path, first, then, later=700)


def test_a_session_connected_when_its_broker_died_counts_from_the_restart(
    tmp_path: Path,
) -> None:
    """No disconnect was recorded (a SIGKILL): MQTT 5.0 §3.1.2.11 counts the interval from the
    close of the network connection, which went with the broker; the restart stands for it."""
    root = str(tmp_path / "root")

    async def first(broker: Broker) -> None:
        killed = connect_peer(broker, "killed", expiry=60)
        killed.send(Subscribe(1, (Subscription("k/#", 1),)))

    clock = ManualClock(time.time() + 3600)  # the broker stayed down for an hour

    async def then(broker: Broker) -> None:
        assert _subscribed(broker, "killed") == ["k/#"]
        record = read_record(root, "killed")
        assert record is not None
        assert (record.holder, record.disconnected_at) == (None, clock.now())
        assert "killed" in broker._lifetimes.expiries

    run_broker(tmp_path, first)
    # What a SIGKILL leaves: the record as written at SUBSCRIBE, naming a broker that is gone.
    killed = SessionRecord("killed", 60, holder=process_token(), options={"k/#": DeliveryOptions()})
    write_record(root, killed)
    run_broker(tmp_path, then, clock)


def test_a_start_leaves_the_sessions_a_running_server_keeps_or_counts_to_it(
    tmp_path: Path,
) -> None:
    """A server that starts counted every session away it found, those another server that
    runs keeps in memory (its client left it) or took on and counts too: both sent the Will
    when due, and both ended the session. It leaves those to that server now, and takes on
    the one whose counter died, by claiming that one's succession: its record unwritten."""
    root = str(tmp_path / "root")
    running = process_token(os.getppid())  # a process of this host that runs
    dead = dead_token()
    will, long_ago = Will("status/x", b"gone"), time.time() - 3600
    found = {
        "kept": SessionRecord(
            "kept", 60, server=running, disconnected_at=long_ago, will=will, will_due=long_ago
        ),
        "counted": SessionRecord(
            "counted",
            60,
            disconnected_at=long_ago,
            will=will,
            will_due=long_ago,
            counted_by=running,
        ),
        "orphan": SessionRecord("orphan", 600, disconnected_at=time.time(), counted_by=dead),
    }
    for record in found.values():
        write_record(root, record)

    async def test(broker: Broker) -> None:
        for client_id in ("kept", "counted"):
            assert read_record(root, client_id) == found[client_id]  # its Will unsent, not ended
            assert client_id not in broker._lifetimes.expiries
        assert read_record(root, "orphan") == found["orphan"]
        assert successor(root, dead) == process_token()
        assert "orphan" in broker._lifetimes.expiries

    run_broker(tmp_path, test)


def test_a_record_written_by_a_clock_ahead_counts_no_more_than_its_expiry_and_will_delay(
    tmp_path: Path,
) -> None:
    """A session record whose time is in the future (written by a server on this root whose
    clock runs an hour ahead, or by this host before NTP stepped its clock back an hour): its
    session ended an hour and a minute later, and its Will went out an hour late, as if the
    client had left at that time. A start counts from now at most the expiry (60 s) and the
    Will's delay (10 s) it was written with."""
    root = str(tmp_path / "root")
    ahead = time.time() + 3600
    will = Will("status/ahead", b"gone", properties=Properties.build(will_delay_interval=10))
    record = SessionRecord(
        "ahead", 60, disconnected_at=ahead, will=will, will_due=ahead + 10, counted_by=dead_token()
    )
    write_record(root, record)

    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        # Both timed on the broker's clock: the Will due within 10 s, the end within 60 s.
        assert "ahead" in broker._lifetimes.expiries
        broker.tick(clock.now() + 10)
        await _until(lambda: getattr(read_record(root, "ahead"), "will", None) is None)
        assert "ahead" in broker._lifetimes.expiries  # the Will went; the session is still on
        broker.tick(clock.now() + 60)
        await _until(lambda: read_record(root, "ahead") is None)

    run_broker(tmp_path, test, clock)


def test_a_start_follows_the_successions_and_takes_on_a_dead_servers_with_one_file(
    tmp_path: Path,
) -> None:
    """Each session a start took on was claimed and its record written: 1,000 of them took
    1.5-2.8 s. It claims the succession of the dead server they lead to, one file, and
    writes none of them; one leading to a server that runs (which took it on) is left to
    it, and the succession files no record leads through any more are deleted."""
    root = str(tmp_path / "root")
    first, second, gone, stale = (dead_token() for _ in range(4))
    running = process_token(os.getppid())  # a process of this host that runs
    now = time.time()
    found = [SessionRecord(f"c{i}", 600, disconnected_at=now, counted_by=first) for i in range(3)]
    found.append(SessionRecord("older", 600, disconnected_at=now))  # no counter named
    left = [
        SessionRecord("kept", 600, server=running, disconnected_at=now),
        SessionRecord("left", 600, server=gone, disconnected_at=now),  # `running` counts it
    ]
    for record in (*found, *left):
        write_record(root, record)
    for dead, then in ((first, second), (gone, running), (stale, running)):
        claim(root, dead, then)  # `first` died, then `second` which took its sessions on
    old = time.time() - 10
    os.utime(os.path.join(root, ".mqtt", "sessions", f".succeeded-{stale}"), (old, old))

    async def test(broker: Broker) -> None:
        for record in found:
            assert read_record(root, record.client_id) == record  # unwritten
            assert record.client_id in broker._lifetimes.expiries
        assert (successor(root, second), successor(root, NONE)) == (process_token(),) * 2
        assert successor(root, first) == second  # the chain still leads here
        assert successor(root, stale) is None  # no record leads through it
        for record in left:
            assert read_record(root, record.client_id) == record
            assert record.client_id not in broker._lifetimes.expiries

    run_broker(tmp_path, test)


def test_a_running_server_takes_on_a_session_whose_counter_died(tmp_path: Path) -> None:
    """The server that took on a session away (from one that died, or at its restart) died
    too: its record names no server as holding it, which the sweep of the servers still
    running passed over, so that nothing ended the session until a server started. The
    sweep takes it on now, here to end it at once (its time ran out meanwhile)."""
    root = str(tmp_path / "root")
    orphan = SessionRecord("orphan", 1, disconnected_at=time.time() - 10, counted_by=dead_token())
    # Kept by one that died, taken on by another (its succession) that died too.
    kept, successor_died = dead_token(), dead_token()
    chained = SessionRecord("chained", 1, server=kept, disconnected_at=time.time() - 10)

    async def test(broker: Broker) -> None:
        write_record(root, orphan)
        write_record(root, chained)
        claim(root, kept, successor_died)
        broker._lifetimes.adopt_the_dead()  # its timer's sweep
        await _until(lambda: read_record(root, "orphan") is None)
        await _until(lambda: read_record(root, "chained") is None)
        assert successor(root, successor_died) == process_token()

    run_broker(tmp_path, test)


def test_a_clock_stepped_back_does_not_put_off_taking_on_the_sessions_of_dead_servers(
    tmp_path: Path,
) -> None:
    """The timer looks every second for sessions whose server died. Its next look was a time
    of the wall clock: stepped back an hour (NTP, `date -s`), it did not look for an hour,
    and a session whose server was killed meanwhile was neither ended nor its Will sent."""
    root = str(tmp_path / "root")
    orphan = SessionRecord("orphan", 1, disconnected_at=time.time() - 10, counted_by=dead_token())

    async def test(broker: Broker) -> None:
        now = time.time()
        broker.tick(now)  # its look: the next in a second
        await _until(lambda: not broker._lifetimes._looking)
        write_record(root, orphan)
        broker.tick(now + 2 - 3600)  # two seconds on, the clock stepped back an hour
        await _until(lambda: read_record(root, "orphan") is None)

    run_broker(tmp_path, test)


def test_a_server_that_stopped_is_not_said_to_have_died(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server stopped by SIGTERM writes its sessions away (disconnected_at, held by none),
    as the sessions away when one was killed are: the server that took them on called it
    "process N, which died" all the same."""
    root = str(tmp_path / "root")
    away = time.time() - 10
    stopped, later = dead_token(), dead_token()
    write_record(root, SessionRecord("a", 3600, disconnected_at=away, counted_by=stopped))

    async def test(broker: Broker) -> None:  # its start took "a" on; "b" comes after it
        write_record(root, SessionRecord("b", 3600, disconnected_at=away, counted_by=later))
        connect_peer(broker, "b", expiry=3600, clean=False)

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        run_broker(tmp_path, test)
    lines = logged(caplog, "taken")
    assert lines == [
        f"the sessions counted by process {token_pid(stopped)} (a server of this host that "
        "no longer runs) are taken on",
        "client b: its session was counted by a server of this host that no longer runs: "
        "taken over",
    ]


def test_a_connect_refused_for_its_maximum_packet_size_leaves_a_dead_servers_session_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A v5 CONNECT whose Maximum Packet Size cannot hold its CONNACK is refused (0x95)
    before anything changes: the session of a server of this host that died is not taken on
    by it (its record rewritten under a claim, the Will of the connection that died sent),
    but by the client's next CONNECT. The refusal came after that, which took it on."""
    root = str(tmp_path / "root")
    dead = SessionRecord("b", 3600, server=dead_token(), will=Will("wills/b", b"gone"))

    async def test(broker: Broker) -> None:  # its start took none on: "b" comes after it
        write_record(root, dead)
        peer = Peer(broker)
        too_small = Properties.build(session_expiry_interval=3600, maximum_packet_size=10)
        peer.send(Connect("b", V5, clean_start=False, properties=too_small))
        assert [(type(p), getattr(p, "reason", None)) for p in peer.take()] == [
            (Connack, ReasonCode.PACKET_TOO_LARGE)
        ]
        assert read_record(root, "b") == dead  # as the dead server left it
        connect_peer(broker, "b", expiry=3600, clean=False)  # takes it on now

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        run_broker(tmp_path, test)
    lines = logged(caplog, "taken over")
    assert len(lines) == 1, lines


# (path, whether the files below it are meant, what was seen) while `_audit` records
_audited: tuple[str, bool, list[str]] | None = None
_auditing = False


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _audited is None or event not in ("open", "os.scandir"):
        return
    path, below, seen = _audited
    if args[0] == path:
        seen.append(event)
    elif below and isinstance(args[0], str) and args[0].startswith(path + os.sep):
        seen.append(f"{event} {os.path.relpath(args[0], path)}")


@contextlib.contextmanager
def _audit_of(path: str, *, below: bool = False) -> Iterator[list[str]]:
    """The events "open" and "os.scandir" of `path` in this process (the real calls, told
    by Python's audit hook: installed once, for good, since a hook cannot be removed); with
    `below`, those of the files and folders under it too, each with its path from there."""
    global _audited, _auditing
    if not _auditing:
        sys.addaudithook(_audit)
        _auditing = True
    _audited = (path, below, [])
    try:
        yield _audited[2]
    finally:
        _audited = None


def test_the_look_for_dead_servers_sessions_lists_no_record_while_nothing_changed(
    tmp_path: Path,
) -> None:
    """Each second's look for the sessions of dead servers (the sweep, `Orphans.look`) stat'ed
    every record: 40 ms a look over 10,000 records, 4 % of a core for nothing. It lists
    them only if the records folder changed since its last look, which found nothing, or a
    server of this host it found running died; and such a look lists it once, for the
    records and the succession files alike (it listed it again for the latter)."""
    root = str(tmp_path / "root")
    folder = records_folder(root)
    other = subprocess.Popen(["sleep", "60"])  # another server of this host, then dies

    async def test(broker: Broker) -> None:
        token = process_token(other.pid)
        kept = [SessionRecord(f"k{n}", 600, server=token, disconnected_at=1.0) for n in range(3)]
        for record in kept:
            write_record(root, record)
        old = time.time() - 10
        os.utime(folder, (old, old))  # its last change long before the looks
        look = broker._lifetimes._orphans.look
        with _audit_of(folder) as listed:
            assert look() == {}
            assert look() == {}  # one stat: nothing changed
            assert listed == ["os.scandir"]  # the first's: its records and successions
        other.kill()
        other.wait()
        with _audit_of(folder) as listed:
            paths = sorted(path for path, _ in look()[token])  # its death: a look at each
            assert paths == sorted(record_path(root, r.client_id) for r in kept)
            assert listed == ["os.scandir"]
        for record in kept:
            remove_record(root, record.client_id)
        os.utime(folder, (old, old))
        assert look() == {}
        write_record(root, replace(kept[0], client_id="new"))  # the folder changes
        assert [path for path, _ in look()[token]] == [record_path(root, "new")]

    try:
        run_broker(tmp_path, test)
    finally:
        other.kill()
        other.wait()


def test_a_persistent_connect_after_a_restart_reads_only_its_own_subscriptions_records(
    tmp_path: Path,
) -> None:
    """After a restart each persistent session's return read the record of every
    subscription on the root to find its own: 10,000 devices coming back read 10^8 records.
    It reads those its session's record names: a plain subscription's, a share group's
    (and its own member file there). A client with no record (its first CONNECT) reads none
    while no subscription on the root is under its name."""
    root = str(tmp_path / "root")
    topic_root = os.path.join(root, "topic-root")

    async def first(broker: Broker) -> None:
        for n in range(20):
            device = connect_peer(broker, f"d{n}", expiry=600)
            device.send(Subscribe(1, (Subscription(f"dev/{n}/#", 1),)))
            if n == 3:
                device.send(Subscribe(2, (Subscription("$share/g/all/#", 1),)))
            device.close()

    async def then(broker: Broker) -> None:
        await _publish(broker, "dev/3/x", b"one", 1)  # routing reads them all, once
        with _audit_of(topic_root, below=True) as seen:
            device = connect_peer(broker, "d3", expiry=600, clean=False)
        # Each read by the look, then by the opening of its dropbox; no other one.
        records = {event.split()[1].split(os.sep)[0] for event in seen if _of_record(event)}
        assert records == {"all%2F%23", "dev%2F3%2F%23"}, seen
        await _until(lambda: any(isinstance(p, Publish) for p in device.inbox))
        assert sorted(_subscribed(broker, consumer_name("d3"))) == ["$share/g/all/#", "dev/3/#"]
        with _audit_of(topic_root, below=True) as seen:
            connect_peer(broker, "new", expiry=600, clean=False)
        assert not [event for event in seen if _of_record(event)]

    _in_two_lives(tmp_path, first, then)


def _of_record(event: str) -> bool:
    return event.startswith("open ") and event.endswith(os.sep + ".subscription")


def test_a_persistent_sessions_close_reads_its_record_only_if_another_wrote_it(
    tmp_path: Path,
) -> None:
    """At every close of a persistent session the broker read and parsed its record, to
    learn whether another server on the root took the session meanwhile. One stat now: the
    record is read only if a write other than this broker's last one replaced it, and a
    record naming another server that runs still has the session let go, not ended."""
    root = str(tmp_path / "root")
    other = process_token(os.getppid())  # a server of this host that runs

    async def test(broker: Broker) -> None:
        path = record_path(root, "roamer")
        roamer = connect_peer(broker, "roamer", expiry=600)
        with _audit_of(path) as opened:
            roamer.close()
        assert opened == []  # the stat told it is this broker's own
        assert read_record(root, "roamer").held_by == process_token()  # type: ignore[union-attr]
        roamer = connect_peer(broker, "roamer", expiry=600, clean=False)
        taken = read_record(root, "roamer")
        assert taken is not None
        write_record(root, replace(taken, holder=other, server=other))  # its client went there
        with _audit_of(path) as opened:
            roamer.close()
        assert opened == ["open"]
        assert "roamer" not in broker._sessions  # let go
        assert read_record(root, "roamer") == replace(taken, holder=other, server=other)

    run_broker(tmp_path, test)


def test_a_close_behind_a_queued_record_write_keeps_the_session_another_server_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync=always: the record write of a SUBSCRIBE is still queued when the client
    connects to another server (which writes the record naming itself) and leaves this one.
    The close does not read the record (`replaced` says no while a write is queued): that
    write lands after the other server's, naming this one, so letting go of the session
    would leave it counted by none; it keeps it, its record written after as this one's."""
    root = str(tmp_path / "root")
    me, other = process_token(), process_token(os.getppid())
    entered, release = threading.Event(), threading.Event()
    write = write_record  # as recording.py calls it

    def held_write(root: str, record: SessionRecord, *, flush: bool = False) -> os.stat_result:
        if record.options:  # the SUBSCRIBE's, on the disk thread
            entered.set()
            assert release.wait(5)
        return write(root, record, flush=flush)

    monkeypatch.setattr(recording, "write_record", held_write)

    async def test(broker: Broker) -> None:
        roamer = Peer(broker)
        props = Properties.build(session_expiry_interval=600)
        roamer.send(Connect("roamer", V5, clean_start=True, properties=props))
        await _until(lambda: bool(roamer.inbox))  # its CONNACK, once its record is flushed
        roamer.send(Subscribe(1, (Subscription("a/#", 1),)))
        await asyncio.to_thread(entered.wait, 5)
        taken = read_record(root, "roamer")
        assert taken is not None
        write_record(root, replace(taken, holder=other, server=other))  # connected there
        roamer.close()
        release.set()
        await _until(lambda: broker._batches.last("roamer") is None)  # its disk work done
        record = read_record(root, "roamer")
        assert record is not None
        assert (record.holder, record.server) == (None, me)  # away, kept here
        assert "roamer" in broker._sessions
        assert "roamer" in broker._lifetimes.expiries

    run_broker(tmp_path, test, fsync="always")


def _refuse_session_records(monkeypatch: pytest.MonkeyPatch, root: str) -> None:
    """The disk refuses every new session record (ENOSPC at its rename); deleting works."""
    rename = os.rename
    folder = os.path.join(root, ".mqtt", "sessions")

    def refused(source: str, target: str) -> None:
        if os.path.dirname(target) == folder:
            raise OSError(errno.ENOSPC, "No space left on device", target)
        rename(source, target)

    monkeypatch.setattr(os, "rename", refused)


def test_a_record_the_restart_cannot_rewrite_does_not_postpone_the_sessions_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart's time is written into the record of a session whose broker died (see
    above); if the disk refuses it, the session still ends by the deadline kept in memory,
    rather than at a later restart (which would count from itself again)."""
    root = str(tmp_path / "root")
    # What a SIGKILL leaves: the record written at its SUBSCRIBE, naming a broker now gone.
    killed = SessionRecord("killed", 1, holder=process_token(), options={"k/#": DeliveryOptions()})

    async def first(broker: Broker) -> None:
        connect_peer(broker, "killed", expiry=60).send(Subscribe(1, (Subscription("k/#", 1),)))

    clock = ManualClock(time.time())

    async def then(broker: Broker) -> None:
        assert read_record(root, "killed") == killed  # not rewritten
        clock.advance(1.5)  # past its expiry (1 s), counted from the restart
        broker.tick(clock.now())
        await _until(lambda: _subscribed(broker, "killed") == [])
        assert read_record(root, "killed") is None

    run_broker(tmp_path, first)
    write_record(root, killed)
    _refuse_session_records(monkeypatch, root)
    run_broker(tmp_path, then, clock)


def test_a_record_the_restart_cannot_rewrite_does_not_hold_back_a_delayed_will(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "root")
    delayed = Properties.build(will_delay_interval=1)
    will = Will("status/killed", b"gone", properties=delayed)
    killed = SessionRecord("killed", 60, holder=process_token(), will=will)
    clock = ManualClock(time.time())

    async def then(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "status/#", 0)
        clock.advance(1.5)  # past its delay (1 s), counted from the restart
        broker.tick(clock.now())
        await _until(lambda: any(isinstance(p, Publish) for p in watcher.inbox))
        [sent] = [p for p in watcher.take() if isinstance(p, Publish)]
        assert (sent.topic, sent.payload) == ("status/killed", b"gone")

    write_record(root, killed)
    _refuse_session_records(monkeypatch, root)
    run_broker(tmp_path, then, clock)


def test_a_session_connected_to_another_running_broker_is_left_to_it(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    other = SessionRecord("elsewhere", 1, holder=process_token(os.getppid()))  # alive

    async def then(broker: Broker) -> None:
        assert read_record(root, "elsewhere") == other
        assert "elsewhere" not in broker._lifetimes.expiries

    write_record(root, other)
    run_broker(tmp_path, then, ManualClock(time.time() + 3600))


def test_a_session_resumed_from_memory_takes_back_what_another_server_left_locked_to_it(
    tmp_path: Path,
) -> None:
    """Taken from the disk while its client's connection to another server A was open (a
    Box of its own on the root here, as A's): A claims a message for the session after that
    and lets go of it unsent (0x8E, TakenElsewhere.since), locked to the session, A left
    running. The client leaves this broker and comes back: its session, resumed from
    memory, takes it back and sends it, before a later one; what this broker has in flight
    itself is sent again once (DUP), not taken a second time. Before, that message waited
    for a restart of this broker."""
    root = str(tmp_path / "root")
    name = consumer_name("roamer")
    at_a = SessionRecord(
        "roamer",
        60,
        holder=process_token(os.getppid()),  # alive: its connection still open
        server=process_token(os.getppid()),
        options={"news/#": DeliveryOptions(qos=2)},
    )

    def payloads(peer: Peer) -> list[tuple[bytes, bool]]:
        return [(p.payload, p.dup) for p in peer.take() if isinstance(p, Publish)]

    async def test(broker: Broker) -> None:
        with boxmq.open(root) as a:
            on_a = a.topics.subscribe(
                "news/#", name, qos=2, send_retained=False, process_bound=False
            )
            write_record(root, at_a)
            roamer, connack = _connack(broker, "roamer", clean=False, session_expiry_interval=60)
            assert connack.session_present
            sender = connect_peer(broker, "sender")
            sender.send(Publish("news/1", b"own", 1, packet_id=1))
            await _until(lambda: any(isinstance(p, Publish) for p in roamer.inbox))
            assert payloads(roamer) == [(b"own", False)]  # never answered
            a.topics.publish("news/1", b"theirs", qos=2)
            taken = on_a.receive(timeout=5.0)  # A claims it, as for its open connection
            assert taken is not None
            assert taken.body == b"theirs"
            on_a.detach()  # A lets go of the session: the message stays locked to it
            roamer.close()
            sender.send(Publish("news/1", b"later", 1, packet_id=2))
            back, connack = _connack(broker, "roamer", clean=False, session_expiry_interval=60)
            assert connack.session_present
            await _until(lambda: sum(isinstance(p, Publish) for p in back.inbox) >= 3)
            assert payloads(back) == [(b"own", True), (b"theirs", False), (b"later", False)]

    run_broker(tmp_path, test)


def test_sockets_that_send_no_connect_are_told_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A script or a scanner that opens sockets by the hundred and sends nothing wrote a line
    each at connect_timeout; the first from a host is told, the rest counted every 10 s."""
    clock = ManualClock(0)
    settings = MqttSettings(limits=Limits(connect_timeout=1.0))

    async def test(broker: Broker) -> None:
        silent = [Peer(broker) for _ in range(5)]
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            broker.tick(1.5)
            assert all(peer.closed for peer in silent)
            broker.tick(11.6)
            broker.tick(21.7)  # none in the interval: the run is over
            Peer(broker)  # opened at 0 on the clock, which the ticks do not move: late
            broker.tick(21.8)  # a first again

    run_broker(tmp_path, test, clock, settings=settings)
    told = logged(caplog, "CONNECT within")
    assert told == [
        "memory closed: no CONNECT within 1s",
        "memory: 4 more socket(s) closed in the last 10s: no CONNECT within 1s",
        "memory closed: no CONNECT within 1s",
    ]


def test_a_connect_waiting_for_a_claim_is_not_closed_as_one_that_sent_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """connect_timeout closes a socket that sent no whole CONNECT. One whose CONNECT waits
    for another server's claim on its session (claim_wait.wait_for_claim, up to 5 s) sent it:
    the tick past connect_timeout closed it all the same, logged "no CONNECT within", its
    client told nothing, where it was to get its session once the claim was let go (or
    server busy)."""
    root = tmp_path / "root"
    dead = dead_token()
    settings = MqttSettings(limits=Limits(connect_timeout=1.0))

    async def test(broker: Broker) -> None:
        write_record(str(root), SessionRecord("roamer", 3600, holder=dead, server=dead))
        path = record_path(str(root), "roamer")
        digest = hashlib.sha256(os.path.basename(path).encode()).hexdigest()[:32]
        claim = os.path.join(os.path.dirname(path), f".dead-{dead}-{digest}")
        held = os.open(claim, os.O_CREAT | os.O_RDWR, 0o600)  # another server's claim
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
            peer = Peer(broker)
            props = Properties.build(session_expiry_interval=3600)
            peer.send(Connect("roamer", V5, clean_start=False, properties=props))
            assert peer.inbox == []  # waits for the claim
            with caplog.at_level(logging.INFO, "boxmq.mqtt"):
                broker.tick(time.time() + 2.0)  # past connect_timeout
            assert not peer.closed
            assert "no CONNECT within" not in caplog.text
        finally:
            os.close(held)  # the claim let go
        await _until(lambda: bool(peer.inbox))
        [connack] = peer.take()
        assert isinstance(connack, Connack)
        assert (connack.reason, connack.session_present) == (ReasonCode.SUCCESS, True)

    run_broker(tmp_path, test, settings=settings)


def test_a_connect_refused_while_another_server_holds_its_sessions_claim_is_told_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CONNECT whose session another server of this host still claims after
    claim_wait.CLAIM_PATIENCE is refused as server busy: that was a warning in full at each
    try, so a device retrying wrote a line every 5 s for as long as the claim was held. As
    other refused CONNECTs (a session of another user), the first is told, the next counted
    by client host, one line per interval."""
    root = tmp_path / "root"
    dead = dead_token()
    clock = ManualClock(time.time())
    refused = "refused: its session is being taken on by another server"

    async def test(broker: Broker) -> None:
        write_record(str(root), SessionRecord("roamer", 3600, holder=dead, server=dead))
        held = os.open(_claim_path(root, "roamer", dead), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)  # another server's claim, never let go here
            for _ in range(3):
                peer = Peer(broker)
                props = Properties.build(session_expiry_interval=3600)
                peer.send(Connect("roamer", V5, clean_start=False, properties=props))
                assert peer.inbox == []  # waits for the claim
                clock.advance(claim_wait.CLAIM_PATIENCE)
                await _until(partial(bool, peer.inbox))
                [connack] = peer.take()
                assert isinstance(connack, Connack)
                assert connack.reason is ReasonCode.SERVER_BUSY
            [line] = logged(caplog, refused)
            assert line.startswith("client 'roamer' (no user name, from memory"), line
            assert [r.levelno for r in caplog.records if refused in r.getMessage()] == [
                logging.WARNING
            ]
            clock.advance(10)
            broker.tick(clock.now())
            assert logged(caplog, "more CONNECT(s)") == [
                f"memory: 2 more CONNECT(s) refused in the last 10s: {claim_wait.CLAIM_HELD}"
            ]
        finally:
            os.close(held)

    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        run_broker(tmp_path, test, clock)


def _claim_path(root: Path, client_id: str, dead: str) -> str:
    """Where a server claims the session of `client_id` from `dead` (adoption.session_claim)."""
    path = record_path(str(root), client_id)
    digest = hashlib.sha256(os.path.basename(path).encode()).hexdigest()[:32]
    return os.path.join(os.path.dirname(path), f".dead-{dead}-{digest}")


def test_what_a_connect_and_a_sweep_get_of_a_session_whose_server_died(tmp_path: Path) -> None:
    """`Lifetimes.left_by_the_dead` (a CONNECT) and `_claim_and_take` (a start, a sweep) take
    on a session whose client was connected to a server that died, each under its claim,
    and say what they found: the record itself if a server that runs counts it, CLAIMED or
    None while another holds the claim, the record read again (None for the sweep) if it
    was taken on since or is gone, and otherwise the record as taken on, written."""
    root = str(tmp_path / "root")
    dead, running = dead_token(), process_token(os.getppid())
    clock = ManualClock(time.time())
    will = Will("status/x", b"gone", properties=Properties.build(will_delay_interval=30))
    found = SessionRecord("x", 600, holder=dead, server=dead, will=will)
    now = clock.now()
    taken = replace(
        found,
        holder=None,
        server=None,
        counted_by=process_token(),
        disconnected_at=now,
        will_due=now + 30,
    )
    moved = replace(found, holder=None, server=None, counted_by=running, disconnected_at=1.0)

    async def test(broker: Broker) -> None:
        lifetimes = broker._lifetimes
        connect = lifetimes.left_by_the_dead
        sweep = partial(lifetimes._claim_and_take, now=now, sweep=True)
        assert connect(None) is None
        counted = replace(found, holder=running, server=running)
        assert connect(counted) is counted
        write_record(root, found)
        held = os.open(_claim_path(tmp_path / "root", "x", dead), os.O_CREAT | os.O_RDWR)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)  # another server's claim
            assert connect(found) is CLAIMED
            assert sweep(found) is None
        finally:
            os.close(held)
        assert read_record(root, "x") == found
        write_record(root, moved)  # another server took it on since it was read
        assert (connect(found), sweep(found)) == (moved, None)
        remove_record(root, "x")
        assert (connect(found), sweep(found)) == (None, None)
        write_record(root, found)
        assert connect(found) == taken
        assert read_record(root, "x") == taken
        assert broker._wills._due.next_deadline() == now + 30  # its Will, on the clock
        write_record(root, found)
        assert sweep(found) == AwayAtStart(taken, found)
        assert read_record(root, "x") == taken

    run_broker(tmp_path, test, clock)


def test_a_claim_left_by_a_claimer_that_died_goes_once_no_record_needs_it(
    tmp_path: Path,
) -> None:
    """A server that died holding the claim on a session (`adoption.session_claim`) left its file,
    which stayed for good once the session's record moved on: nothing deleted it. A look
    for the sessions of dead servers deletes it now, unless a record still names that
    server (a next claimer would take it over), a process holds it, or it is too young."""
    root = tmp_path / "root"
    folder = records_folder(str(root))
    dead, running = dead_token(), process_token(os.getppid())
    then = time.time() - 10

    def old(path: str) -> None:
        os.utime(path, (then, then))

    def left(claims: dict[str, str]) -> set[str]:
        return {client_id for client_id, path in claims.items() if os.path.exists(path)}

    async def test(broker: Broker) -> None:
        # Names the dead server, counted by its successor, which runs: no look finds it.
        write_record(str(root), SessionRecord("named", 600, disconnected_at=1.0, counted_by=dead))
        claim(str(root), dead, running)
        for client_id in ("moved", "held"):  # its client came back to a server that runs
            write_record(str(root), SessionRecord(client_id, 600, server=running))
        claims = {
            client_id: _claim_path(root, client_id, dead)
            for client_id in ("named", "moved", "held", "ended", "young")
        }
        for client_id, path in claims.items():
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
            if client_id != "young":
                old(path)
        held = os.open(claims["held"], os.O_RDWR)
        fcntl.flock(held, fcntl.LOCK_EX)  # a claimer at work
        look = broker._lifetimes._orphans.look
        try:
            old(folder)
            assert look() == {}
            assert left(claims) == {"named", "held", "young"}
        finally:
            os.close(held)
        old(claims["young"])
        old(folder)  # as the first look saw it: the young claim kept it from rest
        assert look() == {}
        assert left(claims) == {"named"}

    run_broker(tmp_path, test)


def test_a_claim_that_cannot_be_opened_fails_the_sweep_not_the_file_system(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim file refused (EISDIR here; EMFILE, EIO alike) was taken for a file system
    without flocks: told so for good ("no claim could be made"), and a CONNECT took the
    session on without a claim, its Will sent twice if a sweep took it too. Now this sweep
    failed, said once, and the next one takes the session on."""
    root = tmp_path / "root"
    dead = dead_token()

    async def test(broker: Broker) -> None:
        write_record(str(root), SessionRecord("roamer", 3600, holder=dead, server=dead))
        claim = _claim_path(root, "roamer", dead)
        os.mkdir(claim)  # open(O_RDWR) refuses it
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            broker.tick(time.time())
            await _until(lambda: "sweep for sessions of dead servers" in caplog.text)
        assert "no claim could be made" not in caplog.text
        [error] = [r for r in caplog.records if "sweep for sessions" in r.getMessage()]
        assert error.levelno == logging.ERROR
        assert "Is a directory" in error.getMessage()
        record = read_record(str(root), "roamer")
        assert record is not None
        assert record.held_by == dead  # not taken on unclaimed
        os.rmdir(claim)
        broker.tick(time.time() + 1.0)
        await _until(lambda: read_record(str(root), "roamer").held_by is None)  # type: ignore[union-attr]

    run_broker(tmp_path, test)


def test_a_connect_whose_dead_servers_session_cannot_be_claimed_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim on a session left by a server that died, or its record read under it,
    failing (EISDIR here; EMFILE, EIO alike): the OSError went to the loop as a traceback
    when the CONNECT was tried again after waiting for another server's claim, its client
    never answered. Refused now (v5 0x80) with one ERROR line, at once or after the wait."""
    root = tmp_path / "root"
    dead = dead_token()
    props = Properties.build(session_expiry_interval=3600)

    async def test(broker: Broker) -> None:
        write_record(str(root), SessionRecord("roamer", 3600, holder=dead, server=dead))
        claim = _claim_path(root, "roamer", dead)
        held = os.open(claim, os.O_CREAT | os.O_RDWR, 0o600)  # another server's claim
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = Peer(broker)
        waiting.send(Connect("roamer", V5, clean_start=False, properties=props))
        assert waiting.inbox == []  # waits for the claim
        os.unlink(claim)
        os.close(held)  # let go, and the claim file refused from now on
        os.mkdir(claim)
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            await _until(lambda: bool(waiting.inbox))
            now = Peer(broker)  # and one that comes meanwhile: refused at once
            now.send(Connect("roamer", V5, clean_start=False, properties=props))
        for peer in (waiting, now):
            [connack] = peer.take()
            assert isinstance(connack, Connack)
            assert connack.reason is ReasonCode.UNSPECIFIED_ERROR
            assert peer.closed
        told = [r for r in caplog.records if "could not be taken on" in r.getMessage()]
        assert [r.levelno for r in told] == [logging.ERROR] * 2
        assert "Is a directory" in told[0].getMessage()
        record = read_record(str(root), "roamer")
        assert record is not None
        assert record.held_by == dead  # left for a later try

    run_broker(tmp_path, test)


def test_a_connect_refused_as_server_busy_says_how_long_it_waited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The WARNING said the other server "has held it for 5s": 5 s is how long this CONNECT
    waited, the claim may have been held for hours. The wait is timed on the broker's clock
    (it was the loop's, which a ManualClock does not move: this test waited the real 5 s
    or shortened the patience): the tries go on while it stands still, and the one after
    it passed the patience refuses the CONNECT."""
    root = tmp_path / "root"
    dead = dead_token()
    clock = ManualClock(time.time())

    async def answered(peer: Peer, within: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_until(lambda: bool(peer.inbox)), within)
        return bool(peer.inbox)

    async def test(broker: Broker) -> None:
        write_record(str(root), SessionRecord("roamer", 3600, holder=dead, server=dead))
        held = os.open(_claim_path(root, "roamer", dead), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)  # another server's claim
            peer = Peer(broker)
            props = Properties.build(session_expiry_interval=3600)
            with caplog.at_level(logging.WARNING, "boxmq.mqtt"):
                peer.send(Connect("roamer", V5, clean_start=False, properties=props))
                clock.advance(4.9)
                assert not await answered(peer, 0.2)  # tried again meanwhile, still waiting
                clock.advance(0.1)
                assert await answered(peer, 2.0)
        finally:
            os.close(held)
        [connack] = peer.take()
        assert isinstance(connack, Connack)
        assert connack.reason is ReasonCode.SERVER_BUSY
        [line] = logged(caplog, "taken on by another")
        assert line.endswith(
            "from one that died, and its claim was still held after this CONNECT waited "
            "5s (that server stopped?)"
        ), line

    run_broker(tmp_path, test, clock)


def test_a_session_resumed_after_a_restart_with_expiry_0_ends_with_its_connection(
    tmp_path: Path,
) -> None:
    """Clean start 0 resumes the session whatever the new interval (MQTT 5.0 §3.1.2.4); with
    0 it ends when the connection closes, and its dropbox with it."""

    async def first(broker: Broker) -> None:
        away = connect_peer(broker, "brief", expiry=600)
        away.send(Subscribe(1, (Subscription("b/#", 1),)))
        away.send(Disconnect())

    async def then(broker: Broker) -> None:
        back, connack = _connack(broker, "brief", clean=False)
        assert connack.session_present
        back.send(Disconnect())
        assert _subscribed(broker, "brief") == []
        assert read_record(broker.box.root, "brief") is None

    _in_two_lives(tmp_path, first, then)


@pytest.mark.parametrize(
    ("qos", "expiry", "retain"),
    [(1, 0, False), (1, 60, False), (1, 0, True), (2, 0, False)],
    ids=["qos1", "expiring", "retained", "qos2"],
)
def test_the_warning_for_properties_left_off_names_the_longest_topic_that_keeps_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, qos: int, expiry: int, retain: bool
) -> None:
    """The number is the names' room for the topic beside a side file's key, computed from
    what they hold (Topics.topic_room): a topic of that length keeps its properties on disk,
    one byte longer goes without them, and the warning says that length."""
    trace = [("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01")]  # a side file's
    props = Properties.build(user_properties=trace, message_expiry_interval=expiry or None)

    async def test(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600)  # served from disk
        keeper.send(Subscribe(1, (Subscription("#", 1),)))
        room = broker.box.topics.topic_room(
            {PROPERTIES_FILE: "0" * 32}, expires_in=expiry or None, retain=retain
        )
        pub = connect_peer(broker, "pub")
        answers: list[Packet] = []

        def answered(*expected: Packet) -> bool:
            answers.extend(pub.take())
            return all(packet in answers for packet in expected)

        for packet_id, topic in enumerate(("k" * room, "x" * (room + 1)), start=1):
            pub.send(Publish(topic, b"m", qos, retain, packet_id=packet_id, properties=props))
            if qos == 2:
                await _until(partial(answered, Pubrec(packet_id)))
                pub.send(Pubrel(packet_id))
        await _until(lambda: len([p for p in keeper.inbox if isinstance(p, Publish)]) == 2)
        # The warning is logged on the disk thread once the copies are written, and the
        # subscriber served from disk may have them before it is: the publisher's answers
        # come after it.
        done = Pubcomp if qos == 2 else Puback
        await _until(partial(answered, done(1), done(2)))
        got = {p.topic[0]: p.properties for p in keeper.take() if isinstance(p, Publish)}
        assert (got["k"].user_properties, got["x"].user_properties) == (tuple(trace), ())
        [warning] = logged(caplog, "no room")
        assert warning.startswith("x" * (room + 1) + ":")
        assert f"a topic of at most {room} bytes" in warning

    run_broker(tmp_path, test)


_SLOW = MqttSettings(limits=Limits(max_inflight=1, max_queued=2))  # what _flood_slow fills


def _flood_slow(broker: Broker) -> None:
    """Ten QoS 1 messages to a subscriber "slow" that acknowledges nothing: under _SLOW, 1 in
    flight, 2 queued, the 7 others dropped."""
    _subscriber(broker, "slow", "flood/#", 1)
    pub = connect_peer(broker, "pub")
    for packet_id in range(1, 11):
        pub.send(Publish("flood/a", b"x", 1, packet_id=packet_id))


def test_drops_on_a_full_queue_are_logged_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A subscriber that acknowledges nothing: 1 in flight, 2 queued, the 7 others dropped.
    The log tells the first drop, then the count once the interval is over: 2 lines, not 7."""
    clock = ManualClock(1000.0)

    async def test(broker: Broker) -> None:
        _flood_slow(broker)
        broker.tick(clock.now())
        clock.advance(10)
        broker.tick(clock.now())
        broker.tick(clock.now())  # told once

    with caplog.at_level(logging.WARNING, "boxmq.mqtt"):
        run_broker(tmp_path, test, clock, settings=_SLOW)
    assert logged(caplog, "queue full") == [
        "client slow: queue full (max_queued 2, max_queued_bytes 67108864), a QoS 1 message "
        "dropped; further drops are counted and logged every 10s. It reads slower than its "
        "messages come: raise [mqtt.limits] max_queued, or give it a persistent session, whose "
        "messages wait on disk",
        "client slow: queue full, 6 more message(s) dropped in the last 10s",
    ]


def test_the_count_of_drops_keeps_its_interval_across_a_step_the_broker_was_told_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A step forward of an hour (Broker.clock_stepped) 5 s into the count's interval told
    it at the next tick, "in the last 10s" for 5; it is told when the 10 s are over."""
    clock = ManualClock(1000.0)

    async def test(broker: Broker) -> None:
        _flood_slow(broker)
        broker.tick(clock.now())
        clock.advance(3605)
        broker.clock_stepped(3600)
        broker.tick(clock.now())
        assert not logged(caplog, "more message(s) dropped")
        clock.advance(5)
        broker.tick(clock.now())

    with caplog.at_level(logging.WARNING, "boxmq.mqtt"):
        run_broker(tmp_path, test, clock, settings=_SLOW)
    assert logged(caplog, "more message(s) dropped") == [
        "client slow: queue full, 6 more message(s) dropped in the last 10s",
    ]


def test_the_count_of_reconnections_keeps_its_interval_across_a_step_the_broker_was_told_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As the count of drops does: a step forward of an hour 5 s into the count's interval
    told the reconnections at the next tick, "in the last 10s" for 5 (found reading the
    seven DropLogs: two moved with a step, five did not)."""
    clock = ManualClock(1000.0)

    async def test(broker: Broker) -> None:
        for _ in range(5):
            connect_peer(broker, "looper").close()
        broker.tick(clock.now())
        clock.advance(3605)
        broker.clock_stepped(3600)
        broker.tick(clock.now())
        assert not logged(caplog, "more time(s)")
        clock.advance(5)
        broker.tick(clock.now())

    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        run_broker(tmp_path, test, clock)
    assert [m.split(",")[0] for m in logged(caplog, "more time(s)")] == [
        "client looper connected 2 more time(s) in the last 10s",
    ]


def test_a_subscription_another_process_makes_is_seen_by_the_next_publishing_read(
    tmp_path: Path,
) -> None:
    """The broker remembers per topic whether a durable subscription wants it, and looks at
    the root's subscription generation again once per read (docs/mqtt.md): a topic it knew
    nobody on disk wanted goes into a subscription another process made since."""

    async def test(broker: Broker) -> None:
        pub = connect_peer(broker, "pub")
        pub.send(Publish("jobs/1", b"before", 1, packet_id=1))
        assert pub.take() == [Puback(1)]  # nobody wanted it: answered from memory, dropped
        with (
            boxmq.open(tmp_path / "root", fsync="never") as other,  # another process's view
            other.subscribe("jobs/#", "worker", qos=1) as subscription,
        ):
            pub.send(Publish("jobs/1", b"after", 1, packet_id=2))
            await _until(lambda: pub.inbox == [Puback(2)])
            message = subscription.receive(timeout=20)
            assert message is not None
            assert message.body == b"after"
            message.ack()

    run_broker(tmp_path, test)


_QUOTA = ReasonCode.QUOTA_EXCEEDED
_Q1 = ReasonCode.GRANTED_QOS_1


def _capped(cap: int) -> MqttSettings:
    return MqttSettings(limits=Limits(max_subscriptions=cap))


def test_the_new_filters_of_a_subscribe_past_max_subscriptions_are_refused(
    tmp_path: Path,
) -> None:
    """Distinct filters count, share groups included; one the session has already, or that
    came earlier in the same SUBSCRIBE, replaces it and is always allowed. A refused filter
    is in no route: a message on its topic does not come."""

    async def test(broker: Broker) -> None:
        sub = connect_peer(broker, "sub")
        sub.send(Subscribe(1, (Subscription("a", 1), Subscription("$share/g/a", 1))))
        assert sub.take() == [Suback(1, (_Q1, _Q1))]
        wanted = ("b", "b", "c", "a", "$share/g/a", "$share/h/a")
        sub.send(Subscribe(2, tuple(Subscription(text, 1) for text in wanted)))
        assert sub.take() == [Suback(2, (_Q1, _Q1, _QUOTA, _Q1, _Q1, _QUOTA))]
        sub.send(Unsubscribe(3, ("b",)))
        assert sub.take() == [Unsuback(3, (ReasonCode.SUCCESS,))]
        sub.send(Subscribe(4, (Subscription("c", 1), Subscription("d", 1))))
        assert sub.take() == [Suback(4, (_Q1, _QUOTA))]  # b's room went to c
        pub = connect_peer(broker, "pub")
        for packet_id, topic in enumerate(("d", "c"), start=1):
            pub.send(Publish(topic, topic.encode(), 1, packet_id=packet_id))
        await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
        await asyncio.sleep(0.1)  # the share groups' deliveries come from the disk
        got = sorted(p.payload for p in sub.take() if isinstance(p, Publish))
        assert got == [b"c"]  # not d
        assert len(broker._memory) == 2  # a and c: the refused ones are not routed

    run_broker(tmp_path, test, settings=_capped(3))


def test_a_persistent_session_past_max_subscriptions_makes_nothing_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under fsync=always the subscriptions are made by a worker: those still being made
    count, so a SUBSCRIBE of the next connection of the client meanwhile (the same session)
    cannot pass the cap either."""
    slow = threading.Event()
    open_durable = Subscribing._open_durable

    def slow_open(self: Subscribing, session: Session, text: str, *args: Any, **kw: Any) -> Any:
        slow.wait(20)
        return open_durable(self, session, text, *args, **kw)

    monkeypatch.setattr(Subscribing, "_open_durable", slow_open)

    async def test(broker: Broker) -> None:
        props = Properties.build(session_expiry_interval=600)
        keeper = Peer(broker)
        keeper.send(Connect("keeper", V5, clean_start=True, properties=props))
        await _until(lambda: bool(keeper.take()))  # CONNACK, once its record is flushed
        keeper.send(Subscribe(1, tuple(Subscription(f"k/{n}", 1) for n in range(3))))
        again = Peer(broker)  # while the disk works
        again.send(Connect("keeper", V5, clean_start=False, properties=props))
        again.send(Subscribe(1, (Subscription("k/3", 1),)))
        slow.set()
        await _until(lambda: any(isinstance(p, Suback) for p in again.inbox))
        assert [p for p in again.take() if isinstance(p, Suback)] == [Suback(1, (_QUOTA,))]
        names = sorted(_subscribed(broker, consumer_name("keeper")))
        assert names == ["k/0", "k/1", "k/2"]  # no dropbox for k/3
        assert not list((tmp_path / "root" / "topic-root").glob("k/3*"))

    run_broker(tmp_path, test, fsync="always", settings=_capped(3))


def test_a_session_resumed_over_a_lowered_max_subscriptions_keeps_them_but_adds_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def first(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600)
        keeper.send(Subscribe(1, tuple(Subscription(f"k/{n}", 1) for n in range(3))))
        assert keeper.take() == [Suback(1, (_Q1,) * 3)]

    async def then(broker: Broker) -> None:
        keeper = connect_peer(broker, "keeper", expiry=600, clean=False)
        keeper.send(Subscribe(2, (Subscription("k/9", 1), Subscription("k/0", 0))))
        assert keeper.take() == [Suback(2, (_QUOTA, ReasonCode.GRANTED_QOS_0))]
        keeper.send(Subscribe(3, (Subscription("k/8", 1),)))
        assert keeper.take() == [Suback(3, (_QUOTA,))]
        assert sorted(_subscribed(broker, consumer_name("keeper"))) == ["k/0", "k/1", "k/2"]

    run_broker(tmp_path, first)
    with caplog.at_level(logging.DEBUG, "boxmq.mqtt"):
        run_broker(tmp_path, then, settings=_capped(2))
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert told == [
        "client keeper: its session holds 3 subscription(s), over [mqtt.limits] "
        "max_subscriptions = 2: it keeps them, and may subscribe to no new filter",
        "client keeper: subscribing to k/9 refused: its session holds 3 subscription(s), "
        "[mqtt.limits] max_subscriptions = 2; further refusals on this connection are not "
        "logged",
    ]  # k/8's refusal is not


def test_max_subscriptions_0_is_no_limit(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        sub = connect_peer(broker, "sub")
        sub.send(Subscribe(1, tuple(Subscription(f"f/{n}", 1) for n in range(1500))))
        assert sub.take() == [Suback(1, (_Q1,) * 1500)]

    run_broker(tmp_path, test, settings=_capped(0))


def test_refusals_of_one_connection_are_logged_once_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client whose PUBLISHes or SUBSCRIBEs the ACL refuses, or the store (here: topics too
    long for a file name), wrote one log line each, as fast as it sent them. The first of each
    kind on a connection is told, the others at debug level; a new connection is told again."""
    acl = Acl.parse("pattern readwrite %c/#\n", tmp_path / "acl")
    long_topic = "c/" + "é" * 200  # too long for the message's file name, escaped

    async def test(broker: Broker) -> None:
        for attempt in range(2):
            client = connect_peer(broker, "c", expiry=60)
            client.send(Subscribe(100, (Subscription("c/#", 1),)))  # durable: to the disk
            await _until(lambda: bool(client.take()))  # noqa: B023 (awaited here)
            for n in range(5):
                client.send(
                    Publish(f"other/{n}", b"x", 1, packet_id=3 * n + 1),
                    Subscribe(3 * n + 2, (Subscription(f"other/{n}", 1),)),
                    Publish(long_topic, b"x", 1, packet_id=3 * n + 3),
                )
            await _until(lambda: len(client.inbox) >= 15)  # noqa: B023 (awaited here)
            client.close()
            told = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
            refusals = [m for m in told if "may not" in m or "PUBLISH refused" in m]
            assert len(refusals) == 3 * (attempt + 1), refusals  # one of each kind

    with caplog.at_level(logging.DEBUG, "boxmq.mqtt"):
        run_broker(tmp_path, test, settings=MqttSettings(authorizer=acl))
    assert (
        "client c may not publish to other/0; further refusals of its PUBLISHes on this "
        "connection are logged at debug level" in caplog.messages
    )
    assert (
        "client c may not subscribe to other/0; further refusals of its filters on this "
        "connection are logged at debug level" in caplog.messages
    )
    assert "client c may not publish to other/4" in caplog.messages  # at debug level
    debug = [
        r
        for r in caplog.records
        if r.levelno == logging.DEBUG and "PUBLISH refused" in r.getMessage()
    ]
    assert len(debug) == 8  # 5 a connection, the first of each told


class _TimedChecks:
    """An authenticator whose every check takes a while (as scrypt's 40-90 ms do), and that
    notes whose CONNECT it checked, in order."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def authenticate(self, username: str | None, password: bytes | None, client_id: str) -> bool:
        self.order.append(client_id)
        time.sleep(0.01)
        return password == b"secret"


def test_password_checks_take_turns_by_address(tmp_path: Path) -> None:
    """A host sending CONNECTs with guessed passwords kept every other client's login behind
    its own: 100 of them held a right password 6.5-9.3 s, near connect_timeout. Another address
    waits for the checks under way and at most one more of that host's."""
    checks = _TimedChecks()

    async def test(broker: Broker) -> None:
        guesses = []
        for n in range(12):
            guess = Peer(broker)
            guess.peer = PeerAddress("10.0.0.1", 4000 + n)
            guess.send(Connect(f"guess{n}", V5, username="alice", password=b"guess"))
            guesses.append(guess)
        right = Peer(broker)
        right.peer = PeerAddress("10.0.0.2", 5000)
        right.send(Connect("right", V5, username="alice", password=b"secret"))
        await _until(lambda: all(peer.inbox for peer in (*guesses, right)))
        [connack] = right.take()
        assert isinstance(connack, Connack)
        assert connack.reason is ReasonCode.SUCCESS
        assert checks.order.index("right") <= 3  # 2 under way, then one guess, then it
        assert checks.order[:3] == ["guess0", "guess1", "guess2"]  # one host's in order
        assert sorted(checks.order) == sorted([f"guess{n}" for n in range(12)] + ["right"])

    run_broker(tmp_path, test, settings=MqttSettings(authenticator=checks))


def test_a_connect_closed_while_its_password_waits_is_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CONNECT still waiting for its password check at connect_timeout (a burst of TLS
    logins on a loaded machine: 141 of 150) was closed with "no CONNECT within 3s" in the
    log: the operator looked for clients that sent none, when every one had."""
    clock = ManualClock()
    stuck = StuckCheck()
    limits = Limits(connect_timeout=3.0)

    async def test(broker: Broker) -> None:
        peer = Peer(broker)
        peer.peer = PeerAddress("10.0.0.1", 4000)
        peer.send(Connect("c1", V5, username="carol", password=b"rose"))
        clock.advance(4)
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            broker.tick(clock.now())
        stuck.release.set()
        assert peer.closed

    run_broker(tmp_path, test, clock, settings=MqttSettings(authenticator=stuck, limits=limits))
    assert "no CONNECT within" not in caplog.text
    assert (
        "client 'c1' (user 'carol', from 10.0.0.1:4000) closed: no answer within 3s: its "
        "password still waited for its check (1 check(s) under way or waiting, taking turns "
        "by address: many logins at once, or a host guessing passwords?)"
    ) in caplog.messages


def test_connects_closed_in_a_burst_while_their_passwords_wait_are_told_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A burst of logins past connect_timeout wrote a line a login (found driving `boxmq
    serve` with connect_timeout = "1s": 100 logins, 75 lines): one line, then a count."""
    clock = ManualClock()
    stuck = StuckCheck()
    limits = Limits(connect_timeout=3.0)

    async def test(broker: Broker) -> None:
        peers = []
        for n in range(5):
            peer = Peer(broker)
            peer.peer = PeerAddress("10.0.0.1", 4000 + n)
            peer.send(Connect(f"c{n}", V5, username="carol", password=b"rose"))
            peers.append(peer)
        clock.advance(4)
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            broker.tick(clock.now())
            clock.advance(10)
            broker.tick(clock.now())
        stuck.release.set()
        assert all(peer.closed for peer in peers)

    run_broker(tmp_path, test, clock, settings=MqttSettings(authenticator=stuck, limits=limits))
    told = logged(caplog, "within 3s")
    assert len(told) == 2, told
    assert told[0].endswith("closed: no answer within 3s: its password still waited for its "
        "check (5 check(s) under way or waiting, taking turns by address: many logins at once, "
        "or a host guessing passwords?)")  # fmt: skip
    assert told[1] == (
        "10.0.0.1: 4 more socket(s) closed in the last 10s: no answer within 3s, the password "
        "still waiting for its check"
    )


def test_a_close_during_a_flood_of_password_checks_starts_no_more(tmp_path: Path) -> None:
    """Checks waiting their turn by address were not dropped at the close, so a check under
    way that ended after it gave the next one to the shut-down pool: a RuntimeError in a
    callback of the loop (found by a second read)."""
    failures: list[dict[str, object]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: failures.append(context)
        )
        with boxmq.open(tmp_path / "root", fsync="never") as box:
            broker = Broker(box, MqttSettings(authenticator=_TimedChecks()), SystemClock())
            for n in range(6):
                guess = Peer(broker)
                guess.peer = PeerAddress("10.0.0.1", 4000 + n)
                guess.send(Connect(f"guess{n}", V5, username="alice", password=b"guess"))
            await broker.close()
            await asyncio.sleep(0.1)  # the checks under way end, their answers come

    asyncio.run(main())
    assert failures == []


def test_a_filter_past_max_topic_levels_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The index of filters holds an entry per level: `a` and 65,000 slashes took 19 MB of
    the server's memory, so a client's 1000 subscriptions could take 19 GB. A share group's
    prefix is not counted; a refused filter is in no route."""
    invalid = ReasonCode.TOPIC_FILTER_INVALID

    async def test(broker: Broker) -> None:
        sub = connect_peer(broker, "sub")
        wanted = ("a/b/c", "a/b/c/d", "$share/g/a/b/c", "a/b/+/#", "//", "x" + "/" * 65_000)
        with caplog.at_level(logging.DEBUG, "boxmq.mqtt"):
            sub.send(Subscribe(1, tuple(Subscription(text, 1) for text in wanted)))
            assert sub.take() == [Suback(1, (_Q1, invalid, _Q1, invalid, _Q1, invalid))]
        [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warning == (
            "client sub: subscribing to a/b/c/d refused: its filter has 4 levels, over "
            "[mqtt.limits] max_topic_levels = 3; further refusals on this connection are not "
            "logged"
        )
        assert "x/////" in caplog.text
        assert "/" * 101 not in caplog.text  # its start only
        assert len(broker._memory) == 2  # a/b/c and //: the refused ones are not routed
        pub = connect_peer(broker, "pub")
        pub.send(Publish("a/b/c/d", b"deep", 1, packet_id=1))
        pub.send(Publish("a/b/c", b"ok", 1, packet_id=2))
        await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
        await asyncio.sleep(0.1)  # the share group's copy comes from the disk
        got = [p.payload for p in sub.take() if isinstance(p, Publish)]
        assert b"ok" in got
        assert b"deep" not in got

    run_broker(tmp_path, test, settings=MqttSettings(limits=Limits(max_topic_levels=3)))


@pytest.mark.parametrize(
    ("cap", "levels", "allowed"), [(None, 128, True), (None, 129, False), (0, 5000, True)]
)
def test_max_topic_levels_is_128_by_default_and_0_is_no_limit(
    tmp_path: Path, cap: int | None, levels: int, allowed: bool
) -> None:
    limits = Limits() if cap is None else Limits(max_topic_levels=cap)
    reason = _Q1 if allowed else ReasonCode.TOPIC_FILTER_INVALID

    async def test(broker: Broker) -> None:
        sub = connect_peer(broker, "sub")
        sub.send(Subscribe(1, (Subscription("/".join("l" * levels), 1),)))
        assert sub.take() == [Suback(1, (reason,))]

    run_broker(tmp_path, test, settings=MqttSettings(limits=limits))


@pytest.mark.parametrize("away", [False, True], ids=["connected", "away"])
def test_a_sessions_message_in_flight_stays_its_own_past_seven_days(
    tmp_path: Path, away: bool
) -> None:
    """A session may last longer than a week (`max_session_expiry` raised, a 3.1.1 session
    that never expires, a client connected that long): the lock of what it was sent must not
    time out before it. A 7-day lock put the message back in target/ on day 8, and the session
    got it again as a new PUBLISH beside its record's resend (DUP): a QoS 2 duplicate."""
    month = 30 * 86_400
    clock = ManualClock(time.time())  # the Box's too: its locks' deadlines are read from it
    settings = MqttSettings(limits=Limits(max_session_expiry=month))

    async def test(broker: Broker) -> None:
        holder = _subscriber(broker, "holder", "hold/#", 2, expiry=month)
        connect_peer(broker, "pub").send(Publish("hold/x", b"kept", 1, packet_id=1))
        await _until(lambda: any(isinstance(p, Publish) for p in holder.inbox))
        [sent] = [p for p in holder.take() if isinstance(p, Publish)]  # never answered
        if away:
            holder.close()
        clock.advance(8 * 86_400)
        broker.tick(clock.now())
        if away:
            holder = connect_peer(broker, "holder", expiry=month, clean=False)
        for _ in range(3):  # a lock that timed out brings it again (as new) within a second
            await asyncio.sleep(0.1)
            clock.advance(1)
            broker.tick(clock.now())
        got = [(p.payload, p.dup, p.packet_id) for p in holder.take() if isinstance(p, Publish)]
        assert got == ([(b"kept", True, sent.packet_id)] if away else [])

    run_broker(tmp_path, test, clock, settings=settings, box_clock=True)


def test_an_older_boxmqs_seven_day_lock_of_a_session_lasts_as_long_as_it_once_resumed(
    tmp_path: Path,
) -> None:
    """A root written by boxmq d0e0878 (before 2026-11-29's century-long session locks),
    stopped with SIGTERM: the QoS 2 message its session s1 was sent and did not answer is
    locked to it for 7 days. Resumed by this boxmq, the lock kept that deadline: on day 8 it
    went back to target/ and came again as a new PUBLISH beside the DUP resend, a QoS 2
    duplicate (found by an upgrade hunt)."""
    shutil.copytree(Path(__file__).parent / "fixtures" / "week-lock-d0e0878", tmp_path / "root")
    left = read_record(str(tmp_path / "root"), "s1")
    assert left is not None
    assert left.disconnected_at is not None
    month = 30 * 86_400
    clock = ManualClock(left.disconnected_at + 5)
    settings = MqttSettings(limits=Limits(max_session_expiry=month))

    async def test(broker: Broker) -> None:
        holder = connect_peer(broker, "s1", expiry=month, clean=False)
        await _until(lambda: any(isinstance(p, Publish) for p in holder.inbox))
        again = [(p.payload, p.dup, p.packet_id) for p in holder.take() if isinstance(p, Publish)]
        assert again == [(b"d3", True, 4)]
        clock.advance(8 * 86_400)
        broker.tick(clock.now())
        broker.box.sweep()  # as boxmq serve's, or another process's on the root
        for _ in range(3):  # a lock that timed out brings it again (as new) within a second
            await asyncio.sleep(0.1)
            clock.advance(1)
            broker.tick(clock.now())
        assert [p for p in holder.take() if isinstance(p, Publish)] == []

    run_broker(tmp_path, test, clock, settings=settings, box_clock=True)


def test_offline_persistent_sessions_hold_no_watcher_and_are_not_swept(tmp_path: Path) -> None:
    """Each offline session's subscription kept an inotify watcher (3 descriptors, one of
    the 128 instances a user has), and every sweep of `serve` read its record and scanned
    its folders: 2,000 offline sessions took 17 % of a core doing nothing."""

    async def test(broker: Broker) -> None:
        for i in range(100):
            peer = connect_peer(broker, f"dev{i}", expiry=600)
            peer.send(Subscribe(1, (Subscription(f"dev/{i}/cmd", 1),)))
            peer.take()
            peer.send(Disconnect())
        lives = list(broker.box._engines._live.values())
        assert len(lives) == 100
        broker.box.sweep(full=False)  # the first, a full pass: it closes their watchers
        assert not any(live.watching() for live in lives)
        assert broker.box.sweep(full=False) == {}
        pub = connect_peer(broker, "pub")
        pub.send(Publish("dev/9/cmd", b"while away", 1, packet_id=1))
        await _until(lambda: pub.inbox == [Puback(1)])
        back = connect_peer(broker, "dev9", expiry=600, clean=False)
        await _until(lambda: bool(back.inbox))
        [delivered] = back.take()
        assert isinstance(delivered, Publish)
        assert delivered.payload == b"while away"
        assert [live.watching() for live in lives].count(True) == 1

    run_broker(tmp_path, test)


def _read_failing(root: str, client_id: str) -> SessionRecord | None:
    """A read_record of a failing disk (EIO), for a monkeypatch of a module's reader."""
    raise OSError(errno.EIO, "Input/output error")


@contextlib.contextmanager
def _record_looping(root: Path, client_id: str, *, till_written: bool = False) -> Iterator[None]:
    """The client's record file made a symlink to itself, which every stat and read of it
    refuses (ELOOP: an OSError as root that is neither FileNotFoundError nor
    NotADirectoryError, as EIO of a failing disk is), then the record put back as it was
    (a rename keeps its inode and mtime: still the one this broker wrote). Aside out of the
    records folder: there, a start or a sweep read it as the client's record. `till_written`:
    a record the broker wrote meanwhile (over the symlink) is kept, not put back over with
    the one before."""
    path = record_path(str(root), client_id)
    aside = os.path.join(root.parent, f"{os.path.basename(path)}.aside")
    os.rename(path, aside)
    os.symlink(os.path.basename(path), path)
    try:
        yield
    finally:
        if till_written and not os.path.islink(path):
            os.unlink(aside)
        else:
            os.unlink(path)
            os.rename(aside, path)


def test_a_session_end_left_whose_record_cannot_be_read_waits_for_the_next_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep that finishes the ends the disk refused a step of read each one's record
    with no guard: a read failing with anything but a missing file (EIO of a failing disk,
    the very case the sweep is for) left Broker.tick and stopped the server (found by a
    second read). The end waits for the next sweep, the failure told once."""

    async def test(broker: Broker) -> None:
        root = tmp_path / "root"
        connect_peer(broker, "gone", expiry=1, clean=False).close()
        assert read_record(str(root), "gone") is not None

        def refused(*_: object) -> None:
            raise OSError(errno.EROFS, "Read-only file system")

        monkeypatch.setattr(os, "unlink", refused)
        broker.tick(2.0)  # its end: the record's deletion refused, the end left
        monkeypatch.undo()
        assert read_record(str(root), "gone") is not None
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            with _record_looping(root, "gone"):
                for now in (3.0, 4.0, 5.0):
                    broker.tick(now)
            told = logged(caplog, "client gone: its record cannot be")
            assert len(told) == 1, told
            assert "ELOOP" in told[0], told
            broker.tick(6.0)
        assert read_record(str(root), "gone") is None
        assert "client gone: what its session's end left on disk is deleted now" in (
            caplog.messages
        )

    run_broker(tmp_path, test, ManualClock(0))


def test_a_refused_close_record_whose_file_cannot_be_looked_at_waits_for_the_next_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep that writes again the close records the disk refused looked at each one's
    file first (whether another broker wrote it since) catching only a missing file: any
    other failure (EIO of a failing disk, the very case the sweep is for) left Broker.tick
    and stopped the server (found by a second read). The record waits for the next sweep,
    the failure told once."""

    async def test(broker: Broker) -> None:
        root = tmp_path / "root"
        peer = connect_peer(broker, "away", expiry=600, clean=False)

        def full(*_: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "rename", full)
        peer.close()  # its close's record refused, kept for the sweep
        monkeypatch.undo()
        before = read_record(str(root), "away")
        assert before is not None
        assert before.disconnected_at is None
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            with _record_looping(root, "away"):
                for now in (1.0, 2.0, 3.0):
                    broker.tick(now)
            told = logged(caplog, "client away: its session record cannot")
            assert len(told) == 1, told
            assert "ELOOP" in told[0], told
            broker.tick(4.0)
        after = read_record(str(root), "away")
        assert after is not None
        assert after.disconnected_at is not None
        assert "client away: its session record is written now, its close with it" in (
            caplog.messages
        )

    run_broker(tmp_path, test, ManualClock(0))


def test_a_delayed_will_whose_record_cannot_be_read_when_due_waits_for_the_next_try(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A delayed Will found on disk at start reads its record when due (whether its client
    came back meanwhile) with no guard: a read failing with anything but a missing file
    (EIO of a failing disk) left Broker.tick and stopped the server (found by a second
    read). The Will waits for the next try, a second on, the failure told once, and goes
    out once the record reads."""
    root = tmp_path / "root"
    clock = ManualClock(time.time())
    now = clock.now()
    will = Will("status/away", b"gone", properties=Properties.build(will_delay_interval=10))
    record = SessionRecord(
        "away", 60, disconnected_at=now, will=will, will_due=now + 10, counted_by=dead_token()
    )
    write_record(str(root), record)

    async def test(broker: Broker) -> None:
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            with _record_looping(root, "away"):
                for later in (10, 11, 12):
                    broker.tick(now + later)
            told = logged(caplog, "client away: its session record cannot")
            assert len(told) == 1, told
            assert "ELOOP" in told[0], told
            held = read_record(str(root), "away")
            assert held is not None
            assert held.will is not None  # not sent
            broker.tick(now + 13)
            await _until(lambda: getattr(read_record(str(root), "away"), "will", 1) is None)

    run_broker(tmp_path, test, clock)


def test_a_subscribe_whose_record_cannot_be_looked_at_is_answered_as_a_disk_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before a SUBSCRIBE writes the record of a persistent session the broker looks whether
    another server took the session (TakenElsewhere.since) with no guard: a look failing
    with anything but a missing file (EIO of a failing disk) raised out of the packet's
    handling, the SUBSCRIBE dropped with a traceback and no answer (found by a second read).
    The connection is closed as a disk failure is answered (0x80 for EIO, one ERROR line
    naming the client), its record left as it was."""

    async def test(broker: Broker) -> None:
        root = tmp_path / "root"
        peer = connect_peer(broker, "sub", expiry=600, clean=False)
        before = read_record(str(root), "sub")
        with caplog.at_level(logging.INFO, "boxmq.mqtt"), _record_looping(root, "sub"):
            peer.send(Subscribe(1, (Subscription("a/b", 1),)))
            peer.flush()
        [answer] = peer.take()
        assert isinstance(answer, Disconnect), answer
        assert answer.reason is ReasonCode.UNSPECIFIED_ERROR
        told = logged(caplog, "client sub: its session record cannot")
        assert len(told) == 1, told
        assert "ELOOP" in told[0], told
        assert read_record(str(root), "sub") == before

    run_broker(tmp_path, test)


@pytest.mark.parametrize("answer", ["qos 2 publish", "pubrel"])
def test_a_qos2_publish_or_pubrel_whose_record_cannot_be_looked_at_is_a_disk_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, answer: str
) -> None:
    """Before a QoS 2 PUBLISH or a PUBREL goes to a connected persistent session, its record is
    written (Broker._record_unrecorded), after a look whether another server took the
    session (TakenElsewhere.closes). A record that look cannot stat nor read (ELOOP here, EIO
    of a failing disk) closes the connection as a disk failure (DISCONNECT 0x80, one ERROR
    line naming the client), the packet not sent; nothing is lost: the session, resumed,
    gets the message, or the PUBREL again."""

    async def test(broker: Broker) -> None:
        root = tmp_path / "root"
        sub = _subscriber(broker, "sub", "q2/#", 2, expiry=600)
        packet_id = 0
        with contextlib.ExitStack() as stack:
            if answer == "qos 2 publish":
                stack.enter_context(_record_looping(root, "sub", till_written=True))
            await _publish(broker, "q2/a", b"m", 2)
            if answer == "pubrel":
                await _until(lambda: any(isinstance(p, Publish) for p in sub.inbox))
                [publish] = sub.take()
                assert isinstance(publish, Publish)
                packet_id = publish.packet_id or 0
                stack.enter_context(_record_looping(root, "sub", till_written=True))
            with caplog.at_level(logging.INFO, "boxmq.mqtt"):
                if answer == "pubrel":
                    sub.send(Pubrec(packet_id))
                await _until(lambda: any(isinstance(p, Disconnect) for p in sub.inbox))
            got = sub.take()
            assert got == [Disconnect(ReasonCode.UNSPECIFIED_ERROR)], got
            told = logged(caplog, "client sub: its session record cannot")
            assert len(told) == 1, told
            assert "ELOOP" in told[0], told
        back = connect_peer(broker, "sub", expiry=600, clean=False)
        await _until(lambda: bool(back.inbox))
        [again] = back.take()
        if answer == "pubrel":
            assert again == Pubrel(packet_id), again
        else:
            assert isinstance(again, Publish), again
            assert (again.topic, again.payload, again.qos) == ("q2/a", b"m", 2)

    run_broker(tmp_path, test)


def test_a_clean_start_whose_will_record_cannot_be_read_is_refused_and_keeps_the_will(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A clean start ends its session, which sends its delayed Will early (Wills.send_early)
    after a read of its record (whether its client came back elsewhere) with no guard: a
    read failing there (EIO of a failing disk, after the CONNECT's own read) raised out of
    the CONNECT, unanswered, with the Will's timer forgotten, so the Will was never sent.
    The CONNECT is refused as a disk failure (CONNACK 0x80, one ERROR line), the session
    not ended, and the Will keeps its time."""
    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        _left_with_a_will(broker, "dev", delay=30, expiry=600)
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            monkeypatch.setattr(wills_module, "read_record", _read_failing)
            again, refused = _connack(broker, "dev", session_expiry_interval=600)
            monkeypatch.undo()
        assert refused.reason is ReasonCode.UNSPECIFIED_ERROR
        assert again.closed
        told = [m for m in caplog.messages if "dev" in m and "refused" in m]
        assert len(told) == 1, told
        assert "EIO" in told[0], told
        await asyncio.sleep(0.05)
        assert _will_sent(watcher) == []  # not early: its session did not end
        assert "dev" in broker._sessions
        clock.advance(31)
        broker.tick(clock.now())
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]

    run_broker(tmp_path, test, clock)


def test_a_delayed_will_whose_record_cannot_be_read_at_its_time_waits_for_the_next_try(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Will a close left waiting out its delay reads its record when due (whether its
    client came back elsewhere) with no guard, unlike one found at start (35dde634): a read
    failing with anything but a missing file (ELOOP here, EIO of a failing disk) left
    Broker.tick and stopped the server. It waits a second more at a time, told once, and
    goes out once the record reads."""
    clock = ManualClock(time.time())
    root = tmp_path / "root"

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        _left_with_a_will(broker, "dev", delay=30, expiry=600)
        clock.advance(30)
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            with _record_looping(root, "dev"):
                for later in (0, 1, 2):
                    broker.tick(clock.now() + later)
            told = logged(caplog, "client dev: its session record cannot")
            assert len(told) == 1, told
            assert "ELOOP" in told[0], told
        await asyncio.sleep(0.05)  # what a Will sent would have been by then
        assert _will_sent(watcher) == []
        broker.tick(clock.now() + 3)
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]

    run_broker(tmp_path, test, clock)


def test_a_will_due_with_its_session_whose_record_cannot_be_read_puts_the_end_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Will due with its session's end is sent by that end, right before it
    (Wills.send_early), judged by the record the end read. That read failing (EIO of a
    failing disk), the end waits a second, with the Will, rather than end the session
    without it."""
    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        _left_with_a_will(broker, "dev", delay=3600, expiry=10)
        clock.advance(10)
        monkeypatch.setattr(lifetimes_module, "read_record", _read_failing)
        broker.tick(clock.now())
        monkeypatch.undo()
        await asyncio.sleep(0.05)  # what a Will sent would have been by then
        assert _will_sent(watcher) == []
        assert "dev" in broker._sessions
        broker.tick(clock.now() + 1)
        assert "dev" not in broker._sessions
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]

    run_broker(tmp_path, test, clock)


@pytest.mark.parametrize("found_at_start", [False, True])
def test_a_session_end_that_sends_its_will_reads_its_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found_at_start: bool
) -> None:
    """The end on time of a session whose Will is due with it read its record (whether its
    client came back elsewhere), then the Will read it again (Wills.send_early): two reads
    of one file for one decision, and a record changed between them could have the end and
    its Will judge it apart. The Will is sent from the record the end read; the one read
    after is the Will's once written (Wills._sent_from: whether the record still holds it)."""
    root = tmp_path / "root"
    clock = ManualClock(time.time())
    now = clock.now()
    if found_at_start:
        _away_with_a_will_due_at_its_end(root, now)
    reads: list[str] = []

    def counting(root: str, client_id: str) -> SessionRecord | None:
        reads.append(client_id)
        return read_record(root, client_id)

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        if not found_at_start:
            _left_with_a_will(broker, "away", delay=3600, expiry=10)
        monkeypatch.setattr(wills_module, "read_record", counting)
        monkeypatch.setattr(lifetimes_module, "read_record", counting)
        broker.tick(now + 10)
        monkeypatch.undo()
        assert reads == ["away", "away"]
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]
        await _until(lambda: read_record(str(root), "away") is None)

    run_broker(tmp_path, test, clock)


@pytest.mark.parametrize("found_at_start", [False, True])
def test_a_session_end_whose_record_cannot_be_read_waits_for_the_next_try(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, found_at_start: bool
) -> None:
    """A session's end on time reads its record (whether its client came back elsewhere)
    with no guard: a read failing with anything but a missing file (ELOOP here, EIO of a
    failing disk) left Broker.tick and stopped the server. The end waits a second more at a
    time, told once, and is done once the record reads."""
    clock = ManualClock(time.time())
    root = tmp_path / "root"
    now = clock.now()
    if found_at_start:
        away = SessionRecord("away", 10, disconnected_at=now, counted_by=dead_token())
        write_record(str(root), away)

    async def test(broker: Broker) -> None:
        if not found_at_start:
            connect_peer(broker, "away", expiry=10, clean=True).close()
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            with _record_looping(root, "away"):
                for later in (10, 11, 12):
                    broker.tick(now + later)
            told = logged(caplog, "client away: its session record cannot")
            assert len(told) == 1, told
            assert "ELOOP" in told[0], told
            assert read_record(str(root), "away") is not None
            broker.tick(now + 13)
        assert read_record(str(root), "away") is None
        assert "away" not in broker._sessions

    run_broker(tmp_path, test, clock)


def test_a_refused_clean_start_leaves_another_servers_will_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean start of a client whose session another server on the root counts sends that
    session's delayed Will from its record (Resuming.take: the other server lets it be).
    Refused as a disk failure, the Will's record failing to read (EIO), the CONNECT leaves
    the Will to that server, which still counts it: timed here too, it went out twice."""
    clock = ManualClock(time.time())
    root = tmp_path / "root"
    now = clock.now()
    will = Will("will/dev", b"gone", properties=Properties.build(will_delay_interval=30))
    elsewhere = process_token(os.getppid())  # a process of this host that runs
    record = SessionRecord(
        "dev", 600, disconnected_at=now, will=will, will_due=now + 30, counted_by=elsewhere
    )
    write_record(str(root), record)

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        monkeypatch.setattr(wills_module, "read_record", _read_failing)
        _, refused = _connack(broker, "dev", session_expiry_interval=600)
        monkeypatch.undo()
        assert refused.reason is ReasonCode.UNSPECIFIED_ERROR
        clock.advance(31)
        broker.tick(clock.now())
        await asyncio.sleep(0.1)  # what a Will sent would have been by then
        assert _will_sent(watcher) == []
        assert read_record(str(root), "dev") == record

    run_broker(tmp_path, test, clock)


def test_a_will_sent_whose_record_cannot_be_read_after_is_dropped_from_it_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Will sent from its session's record is dropped from it once written: the record is
    read first (Wills._sent_from: its client may have come back since) with no guard, so a
    read failing there (EIO of a failing disk) raised out of the Will's end, which left the
    record holding it (a restart sent it again) and the client's next CONNECT waiting for
    that end for ever, unanswered. The record is read again at the next try, told once."""
    clock = ManualClock(time.time())
    root = str(tmp_path / "root")

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        device = Peer(broker)
        props = Properties.build(session_expiry_interval=600)
        device.send(
            Connect("dev", V5, clean_start=True, will=Will("will/dev", b"gone"), properties=props)
        )
        device.take()
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            monkeypatch.setattr(wills_module, "read_record", _read_failing)
            device.close()
            await _until(lambda: bool(watcher.inbox))
            await asyncio.sleep(0.1)  # the Will's end, after its write
            monkeypatch.undo()
            told = logged(caplog, "client dev: its session record cannot")
            assert len(told) == 1, told
        assert _will_sent(watcher) == [b"gone"]
        clock.advance(1)
        broker.tick(clock.now())
        assert (read_record(root, "dev") or SessionRecord("", 0, will=Will("x", b""))).will is None
        back = Peer(broker)
        back.send(Connect("dev", V5, clean_start=False, properties=props))
        await _until(lambda: bool(back.inbox))
        connack = back.inbox[0]
        assert isinstance(connack, Connack), connack
        assert connack.session_present

    run_broker(tmp_path, test, clock)


@pytest.mark.parametrize("clean", [False, True])
def test_a_connect_to_a_session_held_away_whose_record_cannot_be_read_is_refused_and_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, clean: bool
) -> None:
    """A CONNECT to a session held here whose client is away reads its record (whether
    another server on this root resumed it since, Resuming.record_of). A read failing with
    anything but a missing file (ELOOP here, EIO of a failing disk) refuses the CONNECT as a
    disk failure (CONNACK 0x80, one ERROR line naming the client), before anything changes:
    the session stays held, its record as it was, its delayed Will on its timer (a clean
    start does not end it), and the next CONNECT resumes it."""
    clock = ManualClock(time.time())
    root = tmp_path / "root"

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        _left_with_a_will(broker, "dev", delay=30, expiry=600)
        before = read_record(str(root), "dev")
        assert before is not None
        with caplog.at_level(logging.INFO, "boxmq.mqtt"), _record_looping(root, "dev"):
            again, refused = _connack(broker, "dev", clean=clean, session_expiry_interval=600)
        assert refused.reason is ReasonCode.UNSPECIFIED_ERROR
        assert again.closed
        told = [m for m in caplog.messages if "dev" in m and "refused" in m]
        assert len(told) == 1, told
        assert "its session's record could not be read" in told[0], told
        assert "ELOOP" in told[0], told
        held = broker._sessions["dev"]
        assert not held.connected
        assert read_record(str(root), "dev") == before
        await asyncio.sleep(0.05)  # what a Will sent early would have been by then
        assert _will_sent(watcher) == []
        clock.advance(30)
        broker.tick(clock.now())
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]
        _, resumed = _connack(broker, "dev", clean=False, session_expiry_interval=600)
        assert resumed.reason is ReasonCode.SUCCESS
        assert resumed.session_present
        assert broker._sessions["dev"] is held

    run_broker(tmp_path, test, clock)


@pytest.mark.parametrize("how", ["lost", "disconnect"])
def test_a_close_whose_record_cannot_be_looked_at_goes_on_as_this_servers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """At the close of a persistent session's connection (lost, or a DISCONNECT), the broker
    looks whether another server on this root took the session since (TakenElsewhere.at_close:
    a stat of its record, the record read if another wrote it). A record that look cannot
    stat nor read (ELOOP here, EIO of a failing disk) counts as this server's, told by one
    WARNING line naming the client: the close goes on whole (its record written, with the
    Will of a connection lost, timed here), where raised out of the close it was left half
    done, and the next CONNECT resumes the session."""
    clock = ManualClock(time.time())
    root = tmp_path / "root"

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        device = _with_a_will(broker, "dev", delay=30, expiry=600)
        assert isinstance(device.take()[0], Connack)
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            with _record_looping(root, "dev", till_written=True):
                if how == "lost":
                    device.close()
                else:
                    device.send(Disconnect())
                    device.close()
            told = logged(caplog, "could not be read at its close")
            assert len(told) == 1, told
            assert "client dev:" in told[0], told
            assert "ELOOP" in told[0], told
        record = read_record(str(root), "dev")
        assert record is not None
        assert record.disconnected_at is not None
        assert record.held_by == broker._token
        assert (record.will is not None) is (how == "lost")
        assert not broker._sessions["dev"].connected
        clock.advance(30)
        broker.tick(clock.now())
        await asyncio.sleep(0.05)  # what a Will sent would have been by then
        assert _will_sent(watcher) == ([b"gone"] if how == "lost" else [])
        _, resumed = _connack(broker, "dev", clean=False, session_expiry_interval=600)
        assert resumed.session_present

    run_broker(tmp_path, test, clock)


def test_a_connect_whose_dead_servers_successor_cannot_be_read_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CONNECT to a session away whose record names a server of this host that died looks
    who took its sessions on (the dead server's succession file, succession.successor, read
    by Lifetimes' look whether a server that runs counts the session). A file it cannot read
    (EISDIR here; EIO of a failing disk alike) refuses the CONNECT as a disk failure (v5
    0x80, one ERROR line naming the client), the session not taken on, its record as it
    was; once the file reads, the next CONNECT takes the session on and resumes it."""
    root = tmp_path / "root"
    dead = dead_token()
    record = SessionRecord("roamer", 3600, disconnected_at=time.time(), counted_by=dead)
    succession = os.path.join(records_folder(str(root)), f".succeeded-{dead}")

    async def test(broker: Broker) -> None:
        write_record(str(root), record)
        os.mkdir(succession)  # open() for reading refuses it
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            refused, connack = _connack(broker, "roamer", clean=False, session_expiry_interval=3600)
        assert connack.reason is ReasonCode.UNSPECIFIED_ERROR
        assert refused.closed
        told = [r for r in caplog.records if "roamer" in r.getMessage()]
        assert [r.levelno for r in told] == [logging.ERROR], [r.getMessage() for r in told]
        assert "could not be taken on" in told[0].getMessage()
        assert "Is a directory" in told[0].getMessage()
        assert read_record(str(root), "roamer") == record
        assert "roamer" not in broker._sessions
        os.rmdir(succession)
        _, resumed = _connack(broker, "roamer", clean=False, session_expiry_interval=3600)
        assert resumed.reason is ReasonCode.SUCCESS
        assert resumed.session_present

    run_broker(tmp_path, test)


@pytest.mark.parametrize("unreadable", ["record", "succession"])
def test_a_sweep_for_dead_servers_sessions_skips_a_file_it_cannot_read_told_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, unreadable: str
) -> None:
    """The sweep for the sessions of servers of this host that died (Broker.tick, Orphans.look
    in a worker thread) stats and reads each record, and follows a dead server's succession
    file. One it cannot read (a record made a symlink to itself, ELOOP; a succession file
    made a directory, EISDIR; EIO of a failing disk alike) failed the whole sweep, every
    second, so no session of a dead server on the root was ever taken on while it could not
    (found by a second read). It is skipped, told once by an ERROR line naming its record,
    left as it was; the sessions of the other records are taken on; and once the file
    reads, the next sweep takes its session on."""
    root = tmp_path / "root"
    dead, other = dead_token(), dead_token()
    folder = records_folder(str(root))
    if unreadable == "record":  # its client was connected to the dead server: no succession
        record = SessionRecord("roamer", 3600, holder=dead, server=dead)
    else:
        record = SessionRecord("roamer", 3600, disconnected_at=time.time(), counted_by=dead)
    readable = SessionRecord("walker", 3600, holder=other, server=other)

    async def test(broker: Broker) -> None:
        write_record(str(root), record)
        write_record(str(root), readable)
        lifetimes = broker._lifetimes
        with contextlib.ExitStack() as stack, caplog.at_level(logging.INFO, "boxmq.mqtt"):
            if unreadable == "record":
                stack.enter_context(_record_looping(root, "roamer"))
            else:
                succession = os.path.join(folder, f".succeeded-{dead}")
                os.mkdir(succession)
                stack.callback(os.rmdir, succession)
            start = time.time()
            for later in (0.0, 1.0, 2.0):
                broker.tick(start + later)
                assert lifetimes._looking
                await _until(lambda: not lifetimes._looking)
            walker = read_record(str(root), "walker")
            assert walker is not None
            assert walker.counted_by == broker._token  # taken on all the same
        told = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.levelno for r in told] == [logging.ERROR], [r.getMessage() for r in told]
        assert f"{os.path.join(folder, 'roamer')}: " in told[0].getMessage()
        assert ("ELOOP" if unreadable == "record" else "Is a directory") in told[0].getMessage()
        assert read_record(str(root), "roamer") == record
        assert successor(str(root), dead) is None
        broker.tick(start + 3.0)
        if unreadable == "record":
            await _until(lambda: getattr(read_record(str(root), "roamer"), "holder", 1) is None)
        else:
            await _until(lambda: successor(str(root), dead) == broker._token)

    run_broker(tmp_path, test)


def test_a_will_found_at_start_due_with_its_session_whose_record_cannot_be_read_puts_the_end_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Will on disk at start due with its session's end is sent by that end, right before
    it (Wills.send_early, from Lifetimes._end_if_still_away), judged by the end's read of its
    record (whether its client came back elsewhere). That read failing (EIO of a failing
    disk), the end waits a second, with the Will, told once by a WARNING line naming the
    client, rather than end the session without it; the next try sends the Will and ends
    the session."""
    root = tmp_path / "root"
    clock = ManualClock(time.time())
    now = clock.now()
    _away_with_a_will_due_at_its_end(root, now)

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            monkeypatch.setattr(lifetimes_module, "read_record", _read_failing)
            broker.tick(now + 10)
            broker.tick(now + 11)
            monkeypatch.undo()
        told = logged(caplog, "client away:")
        assert len(told) == 1, told
        assert "its session's end waits" in told[0], told
        assert "EIO" in told[0], told
        await asyncio.sleep(0.05)  # what a Will sent would have been by then
        assert _will_sent(watcher) == []
        assert read_record(str(root), "away") is not None
        broker.tick(now + 12)
        await _until(lambda: bool(watcher.inbox))
        assert _will_sent(watcher) == [b"gone"]
        await _until(lambda: read_record(str(root), "away") is None)

    run_broker(tmp_path, test, clock)


def test_a_session_end_left_whose_record_could_not_be_read_then_is_finished_once_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A step of a session's end the disk refused (its record's deletion, EIO) is done again
    by the sweep, which reads the record first and finishes the end only if it is the one
    the end left (its client came back elsewhere, otherwise). Read right after the step
    (EndsLeft.step) and failing there too (ELOOP here, EIO of a failing disk), the end was
    forgotten, for the next start: the sweep said it would try again each second and never
    did, and the client's next CONNECT resumed the session that had expired (session present
    1, its subscription deleted). The record read once the disk lets it is the end's if it
    still names this server: the sweep deletes it then, and the CONNECT starts anew."""

    async def test(broker: Broker) -> None:
        root = tmp_path / "root"
        sub = _subscriber(broker, "gone", "a/#", 1, expiry=1)
        sub.close()
        path = record_path(str(root), "gone")
        unlink = os.unlink

        def refused(target: Any, *args: Any, **kwargs: Any) -> None:
            if os.fspath(target) != path:
                unlink(target, *args, **kwargs)
                return
            # The disk fails the deletion, and every read of the record from now on.
            os.rename(path, f"{path}.aside")
            os.symlink(os.path.basename(path), path)
            raise OSError(errno.EIO, "Input/output error")

        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            monkeypatch.setattr(os, "unlink", refused)
            broker.tick(2.0)  # its end: the record's deletion refused, the record unread
            monkeypatch.undo()
            assert "gone" not in broker._sessions
            os.unlink(path)
            os.rename(f"{path}.aside", path)  # the disk reads again
            broker.tick(3.0)
        assert read_record(str(root), "gone") is None
        assert "client gone: what its session's end left on disk is deleted now" in (
            caplog.messages
        )
        _, back = _connack(broker, "gone", clean=False, session_expiry_interval=600)
        assert not back.session_present

    run_broker(tmp_path, test, ManualClock(0))


def test_a_refused_record_whose_file_could_not_be_looked_at_then_is_written_by_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A session resumed after a restart has no record written by this broker: the first
    write of it the disk refuses takes the record there for the one it would have replaced
    (Recorder._known, a stat), so that the sweep writing the refused records again does not
    take it for another server's. That stat failing too (ELOOP here, EIO of a failing disk)
    was let be: the sweep then took the record for another server's, forgot the close the
    disk had refused, and the record kept the close before the restart. The file is looked at
    again once it can be (`replaced`), and the close is written."""
    root = tmp_path / "root"
    clock = ManualClock(time.time())
    before = SessionRecord(
        "dev", 600, disconnected_at=clock.now() - 100, counted_by=dead_token()
    )  # its close before a restart
    write_record(str(root), before)
    path = record_path(str(root), "dev")
    rename = os.rename
    refusals: list[str] = []

    def refused(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(target) != path:
            rename(source, target, *args, **kwargs)
            return
        os.unlink(source)  # its temporary file
        if not refusals:  # the first refusal: no look at the file either
            rename(path, f"{path}.aside")
            os.symlink(os.path.basename(path), path)
        refusals.append(path)
        raise OSError(errno.EIO, "Input/output error")

    async def test(broker: Broker) -> None:
        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            monkeypatch.setattr(os, "rename", refused)
            device, connack = _connack(broker, "dev", clean=False, session_expiry_interval=600)
            assert connack.session_present
            clock.advance(5)
            device.close()  # its close's record refused, and no look at the file
            monkeypatch.undo()
            os.unlink(path)
            rename(f"{path}.aside", path)  # the disk writes and reads again
            broker.tick(clock.now())
        after = read_record(str(root), "dev")
        assert after is not None
        assert after.disconnected_at == clock.now(), (after, before)
        assert after.held_by == broker._token
        assert "client dev: its session record is written now, its close with it" in (
            caplog.messages
        )

    run_broker(tmp_path, test, clock)


def test_a_record_unreadable_at_start_is_told_and_taken_on_once_it_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The start read every session record catching only a record that is none: one the
    file system refused to read (EIO of a failing disk; ELOOP here) raised out of
    `resume_expiries`, so one such file stopped the server from starting, for every client
    (found by a second read). The start goes on without it, told once at ERROR; a CONNECT
    of its client is refused as a disk failure meanwhile; and once it reads, the sweep
    takes it on as the start would have (here counted by the dead server whose succession
    the start won for the other session), its end timed from its record, which no step
    deleted or wrote before."""
    clock = ManualClock(time.time())
    root = tmp_path / "root"
    now = clock.now()
    dead = dead_token()
    for client_id in ("readable", "unreadable"):
        write_record(str(root), SessionRecord(client_id, 60, disconnected_at=now, counted_by=dead))
    with contextlib.ExitStack() as looping:
        looping.enter_context(_record_looping(root, "unreadable"))

        async def test(broker: Broker) -> None:
            told = logged(caplog, "cannot be read")
            assert len(told) == 1, told
            assert "unreadable" in told[0], told
            assert "ELOOP" in told[0], told
            _, refused = _connack(broker, "unreadable", clean=False, session_expiry_interval=60)
            assert refused.reason is ReasonCode.UNSPECIFIED_ERROR
            broker.tick(now + 1)
            looping.close()  # it reads again
            broker.tick(now + 2)
            assert read_record(str(root), "unreadable") is not None
            clock.advance(61)
            broker.tick(clock.now())
            await _until(lambda: read_record(str(root), "unreadable") is None)
            assert read_record(str(root), "readable") is None

        with caplog.at_level(logging.INFO, "boxmq"):
            run_broker(tmp_path, test, clock)


def test_a_succession_file_unreadable_at_start_is_told_and_followed_once_it_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The start follows each session record through the succession files of the dead
    servers that counted it (succession.successor) catching only a missing file: one it
    cannot read (EISDIR here; EIO of a failing disk alike) raised out of `resume_expiries`
    and stopped the server from starting (found by a second read). The start goes on, the
    session told at ERROR and left as it was, and taken on once the file reads."""
    clock = ManualClock(time.time())
    root = tmp_path / "root"
    dead = dead_token()
    record = SessionRecord("roamer", 60, disconnected_at=clock.now(), counted_by=dead)
    write_record(str(root), record)
    succession = os.path.join(records_folder(str(root)), f".succeeded-{dead}")
    os.mkdir(succession)  # open() for reading refuses it

    async def test(broker: Broker) -> None:
        for later in (0, 1, 2):
            broker.tick(clock.now() + later)
        told = logged(caplog, "client roamer")
        assert len(told) == 1, told
        assert "succession file" in told[0], told
        assert "Is a directory" in told[0], told
        assert read_record(str(root), "roamer") == record
        os.rmdir(succession)
        broker.tick(clock.now() + 3)
        await _until(lambda: successor(str(root), dead) == broker._token)
        clock.advance(61)
        broker.tick(clock.now())
        await _until(lambda: read_record(str(root), "roamer") is None)

    with caplog.at_level(logging.INFO, "boxmq"):
        run_broker(tmp_path, test, clock)


def test_a_start_that_could_not_read_a_record_keeps_the_succession_files(
    tmp_path: Path,
) -> None:
    """A start deletes the succession files no record it read leads through: one only an
    unreadable record led through (its dead server's sessions taken on by another that
    runs) went, so once that record read, its session led to the dead server with no
    successor, and a sweep took it on beside the server counting it (its Will sent twice).
    A start that could not read every record keeps them all."""
    root = tmp_path / "root"
    dead = dead_token()
    running = process_token(os.getppid())  # a process of this host that runs
    record = SessionRecord("roamer", 600, disconnected_at=time.time(), counted_by=dead)
    write_record(str(root), record)
    claim(str(root), dead, running)
    old = time.time() - 10
    os.utime(os.path.join(records_folder(str(root)), f".succeeded-{dead}"), (old, old))
    with _record_looping(root, "roamer"):

        async def test(broker: Broker) -> None:
            assert successor(str(root), dead) == running

        run_broker(tmp_path, test)


def _unlink_read_only(path: str) -> None:
    raise OSError(errno.EROFS, "Read-only file system", path)


@pytest.mark.parametrize("disk", ["full", "read-only"])
def test_a_resumed_session_whose_records_the_disk_refused_ends_at_its_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: str
) -> None:
    """A session found on disk (its record written by a server before this one), resumed by
    its client's CONNECT and closed while the disk refused every record (ENOSPC; a root
    turned read-only alike): at its expiry the record on disk, still the one found, names
    no server but this one, so `expire` took the session for moved on (another server took
    it) and let it go from memory without ending it; the disk writable again, the sweep
    wrote the refused close naming this server, and no server ever ended the session (found
    by a throwaway test). The record on disk is the one this server's refused write would
    have replaced (Recorder.replaced): the session ends, and its end is finished on disk
    once it can be."""
    root = str(tmp_path / "root")
    clock = ManualClock(time.time())
    found = SessionRecord(
        "back", 5, disconnected_at=clock.now(), counted_by=dead_token(), options={}
    )
    write_record(root, found)

    async def test(broker: Broker) -> None:
        _refuse_session_records(monkeypatch, root)
        if disk == "read-only":  # its end's deletions refused too: finished by the sweep
            monkeypatch.setattr(os, "unlink", _unlink_read_only)
        connect_peer(broker, "back", expiry=5, clean=False).close()
        assert read_record(root, "back") == found  # every write refused
        clock.advance(6)
        broker.tick(clock.now())
        assert "back" not in broker._sessions
        monkeypatch.undo()
        for later in (1, 2, 3):
            broker.tick(clock.now() + later)
        await _until(lambda: read_record(root, "back") is None)

    run_broker(tmp_path, test, clock)


def test_a_resumed_session_whose_records_the_disk_refused_keeps_its_subscriptions_at_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As its expiry did (above), a CONNECT of a client whose session, resumed after a
    restart, is held here away took the record found at the start, still on disk since
    every write of it was refused, for another server's word (Resuming.record_of): the copy
    here was let go and the session resumed from that record, which names no subscription
    made since, so what the client subscribed to meanwhile was no longer its (found
    checking `moved_on`'s other caller). The copy here is kept, and delivers."""
    root = str(tmp_path / "root")
    found = SessionRecord("back", 600, disconnected_at=time.time(), counted_by=dead_token())
    write_record(root, found)

    async def test(broker: Broker) -> None:
        _refuse_session_records(monkeypatch, root)
        peer = connect_peer(broker, "back", expiry=600, clean=False)
        peer.send(Subscribe(1, (Subscription("news/#", 1),)))
        await _until(lambda: any(isinstance(p, Suback) for p in peer.inbox))
        peer.close()
        assert read_record(root, "back") == found  # every write refused
        back = connect_peer(broker, "back", expiry=600, clean=False)
        connect_peer(broker, "pub").send(Publish("news/1", b"for back", 1, packet_id=1))
        await _until(lambda: any(isinstance(p, Publish) for p in back.inbox))
        [delivered] = [p for p in back.take() if isinstance(p, Publish)]
        assert delivered.payload == b"for back"

    run_broker(tmp_path, test)


@pytest.mark.parametrize("disk", ["full", "read-only"])
def test_a_session_found_at_start_whose_records_the_disk_refused_ends_at_its_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: str
) -> None:
    """The end of a session found on disk at start (Lifetimes._end_if_still_away) reads its
    record for its client's return, as `expire` does, but does not ask whether this
    server's refused write left it (Recorder.refused_here): the record found, naming the
    server that died with its client connected, stays on disk when the disk refuses the
    start's record and its Will's (ENOSPC), and is taken for the session still away
    (AwayAtStart.found), not for another server's word. Its Will goes out once, the
    session ends at its expiry and its client's next CONNECT finds no session. On a root
    turned read-only after the start, the end's deletions refused too, the Will's refused
    record was written again by its retry once the disk took it (SentWills.retry), over
    the record the end had left, so the sweep took the session for resumed elsewhere and
    never finished its end: its record and subscription stayed, and its client's return
    resumed the session that had ended (found by this test)."""
    root = str(tmp_path / "root")
    delayed = Properties.build(will_delay_interval=1)
    will = Will("status/gone", b"gone", properties=delayed)
    found = SessionRecord(
        "gone", 5, holder=dead_token(), options={"k/#": DeliveryOptions()}, will=will
    )
    clock = ManualClock(time.time())

    async def first(broker: Broker) -> None:
        connect_peer(broker, "gone", expiry=60).send(Subscribe(1, (Subscription("k/#", 1),)))

    async def then(broker: Broker) -> None:
        assert read_record(root, "gone") == found  # the start's record refused
        if disk == "read-only":  # after the start's claim: its end's deletions refused too
            monkeypatch.setattr(os, "unlink", _unlink_read_only)
        watcher = _subscriber(broker, "watcher", "status/#", 0)
        clock.advance(1.5)  # past its Will's delay (1 s), counted from the restart
        broker.tick(clock.now())
        await _until(lambda: any(isinstance(p, Publish) for p in watcher.inbox))
        clock.advance(4)  # past its expiry (5 s)
        broker.tick(clock.now())
        # Ended: its record deleted, or on a read-only disk left as found for the sweep.
        assert read_record(root, "gone") == (found if disk == "read-only" else None)
        monkeypatch.undo()
        for later in (1, 2, 3):  # the disk writable again: the sweep finishes the end
            broker.tick(clock.now() + later)
        await until_async(lambda: read_record(root, "gone") is None, within=5)
        assert _subscribed(broker, "gone") == []
        wills = [p for p in watcher.take() if isinstance(p, Publish)]
        assert [(p.topic, p.payload) for p in wills] == [("status/gone", b"gone")]
        _, connack = _connack(broker, "gone", clean=False, session_expiry_interval=60)
        assert not connack.session_present

    run_broker(tmp_path, first)
    write_record(root, found)
    _refuse_session_records(monkeypatch, root)
    run_broker(tmp_path, then, clock)


def test_a_will_sent_by_its_sessions_end_on_a_read_only_disk_leaves_the_end_to_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session held here whose Will goes out with its end (Will Delay not shorter than its
    expiry), on a root turned read-only: the record without the Will is refused and retried
    each second (SentWills), and so are the end's deletions (EndsLeft). The retry, going on
    after the end, wrote that record over the one the end left once the disk took it, so
    the sweep took the session for resumed elsewhere and its record and subscription
    stayed; the end forgets the retry now (Wills.session_ended), and the sweep finishes."""
    root = str(tmp_path / "root")
    clock = ManualClock(time.time())

    async def test(broker: Broker) -> None:
        watcher = _subscriber(broker, "watcher", "will/#", 0)
        device = _with_a_will(broker, "w", delay=10, expiry=2)
        device.send(Subscribe(1, (Subscription("k/#", 1),)))
        await asyncio.sleep(0.1)
        device.close()
        await asyncio.sleep(0.1)
        _refuse_session_records(monkeypatch, root)
        monkeypatch.setattr(os, "unlink", _unlink_read_only)
        clock.advance(3)
        broker.tick(clock.now())
        await _until(lambda: any(isinstance(p, Publish) for p in watcher.inbox))
        await asyncio.sleep(0.2)
        assert "w" not in broker._sessions
        monkeypatch.undo()
        for later in (1, 2, 3):
            broker.tick(clock.now() + later)
            await asyncio.sleep(0.05)
        await until_async(lambda: read_record(root, "w") is None, within=5)
        assert _subscribed(broker, "w") == []

    run_broker(tmp_path, test, clock)
