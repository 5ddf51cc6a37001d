"""paho-mqtt 3.1.1 and 5.0 against the boxmq server: what a device SDK meets."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    drop,
    loop_stopped,
    paho,
    paho_properties,
    recorded_away,
    start_server,
)
from tests.integration.mqtt.raw import connect_packet_311, packet, string
from tests.waiting import until

from boxmq.clock import ManualClock

VERSIONS = [pytest.param(True, id="v5"), pytest.param(False, id="v311")]


@pytest.mark.parametrize("v5", VERSIONS)
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_publish_subscribe_at_each_qos(server: RunningServer, v5: bool, qos: int) -> None:
    sub = paho(server, "sub", v5=v5)
    pub = paho(server, "pub", v5=v5)
    sub.subscribe("sensors/+/temp", qos)
    for i in range(20):
        pub.publish(f"sensors/k{i % 3}/temp", f"{i}".encode(), qos)
    got = [sub.next() for _ in range(20)]
    assert [m.payload for m in got] == [f"{i}".encode() for i in range(20)]  # in order (§4.6)
    assert {m.qos for m in got} == {qos}
    assert sub.nothing(0.3)
    sub.stop()
    pub.stop()


@pytest.mark.parametrize("v5", VERSIONS)
def test_the_granted_qos_caps_delivery(server: RunningServer, v5: bool) -> None:
    sub = paho(server, "sub", v5=v5)
    sub.subscribe("a/#", 1)
    paho(server, "pub", v5=v5).publish("a/b", b"x", 2)
    assert sub.next().qos == 1


@pytest.mark.parametrize("v5", VERSIONS)
def test_retained_message_goes_to_new_subscribers_and_empty_clears_it(
    server: RunningServer, v5: bool
) -> None:
    pub = paho(server, "pub", v5=v5)
    pub.publish("home/door", b"open", 1, retain=True)
    late = paho(server, "late", v5=v5)
    late.subscribe("home/#", 1)
    message = late.next()
    assert (message.topic, message.payload, message.retain) == ("home/door", b"open", True)
    pub.publish("home/door", b"", 1, retain=True)
    later = paho(server, "later", v5=v5)
    later.subscribe("home/#", 1)
    assert later.nothing()


@pytest.mark.parametrize("v5", VERSIONS)
def test_will_is_sent_when_the_connection_breaks(server: RunningServer, v5: bool) -> None:
    watcher = paho(server, "watcher", v5=v5)
    watcher.subscribe("status/#", 1)
    dying = paho(server, "dying", v5=v5, will=("status/dying", b"gone", 1))
    drop(dying)  # no DISCONNECT: an abnormal end (§3.1.2.5)
    message = watcher.next()
    assert (message.topic, message.payload) == ("status/dying", b"gone")


def test_no_will_after_a_normal_disconnect(server: RunningServer) -> None:
    watcher = paho(server, "watcher")
    watcher.subscribe("status/#", 1)
    paho(server, "polite", will=("status/polite", b"gone", 1)).stop()
    assert watcher.nothing(0.7)


@pytest.mark.parametrize("reason", [0x04, 0x80, 0x81])
def test_will_is_sent_after_a_disconnect_other_than_normal(
    server: RunningServer, reason: int
) -> None:
    """Only DISCONNECT 0x00 deletes the Will (MQTT-3.1.2-8, MQTT-3.1.2-10): 0x04 asks for it,
    and a client that ends with an error (0x80 Unspecified error, 0x81 Malformed Packet) ends
    as abnormally as one whose connection breaks."""
    from paho.mqtt.reasoncodes import ReasonCode

    watcher = paho(server, "watcher")
    watcher.subscribe("status/#", 1)
    failing = paho(server, "failing", will=("status/failing", b"gone", 1))
    failing.client.disconnect(reasoncode=ReasonCode(PacketTypes.DISCONNECT, identifier=reason))
    loop_stopped(failing.client)
    message = watcher.next()
    assert (message.topic, message.payload) == ("status/failing", b"gone")


def test_will_delay_lets_a_quick_reconnect_cancel_the_will(tmp_path: Path) -> None:
    """The reconnect within the delay cancels the Will: the broker's clock moved past the
    delay (not waited for in real time) sends nothing."""
    clock = ManualClock(time.time())
    with start_server(tmp_path / "root", clock=clock) as server:
        watcher = paho(server, "watcher")
        watcher.subscribe("status/#", 1)
        flaky = paho(
            server, "flaky", clean=False, expiry=60, will=("status/flaky", b"gone", 1), will_delay=2
        )
        drop(flaky)
        recorded_away(server.root, "flaky")
        paho(server, "flaky", clean=False, expiry=60)
        clock.advance(3)
        assert watcher.nothing(0.75)  # three ticks past the delay


def test_a_clean_start_within_the_will_delay_sends_the_will_at_once(server: RunningServer) -> None:
    """MQTT 5.0 §3.1.3.2.2: the Will goes out when its delay ends or its session does, and a
    clean start ends the old session."""
    watcher = paho(server, "watcher")
    watcher.subscribe("status/#", 1)
    flaky = paho(
        server, "flaky", clean=False, expiry=60, will=("status/flaky", b"gone", 1), will_delay=30
    )
    drop(flaky)
    assert watcher.nothing(0.3)  # the delay runs
    paho(server, "flaky", clean=True)
    message = watcher.next()
    assert (message.topic, message.payload) == ("status/flaky", b"gone")
    assert watcher.nothing(0.3)  # once


@pytest.mark.parametrize("v5", VERSIONS)
def test_persistent_session_gets_what_came_while_it_was_away(
    server: RunningServer, v5: bool
) -> None:
    away = paho(server, "away", v5=v5, clean=False, expiry=300)
    away.subscribe("jobs/#", 1)
    away.stop()
    pub = paho(server, "pub", v5=v5)
    for i in range(5):
        pub.publish(f"jobs/{i}", f"job {i}".encode(), 1)
    back = paho(server, "away", v5=v5, clean=False, expiry=300)
    assert [back.next().payload for _ in range(5)] == [f"job {i}".encode() for i in range(5)]
    assert back.nothing(0.3)


@pytest.mark.parametrize("v5", VERSIONS)
@pytest.mark.parametrize("persistent", [False, True], ids=["clean", "persistent"])
@pytest.mark.parametrize("filter", ["twice/#", "$share/g/twice/#"])
def test_a_filter_twice_in_one_subscribe_is_subscribed_at_the_last_qos(
    server: RunningServer, v5: bool, persistent: bool, filter: str
) -> None:
    """MQTT-3.8.4-5: a SUBSCRIBE of several filters is handled as a sequence of SUBSCRIBEs,
    and MQTT-3.8.4-3: the same filter again replaces the subscription. A durable one (a
    persistent session's, a share group's) was opened twice, and the second refused."""
    sub = paho(server, "twice", v5=v5, clean=not persistent, expiry=300 if persistent else 0)
    sub.client.subscribe([(filter, 1), (filter, 2)])
    assert [int(getattr(r, "value", r)) for r in sub.subacks.get(timeout=WAIT)] == [1, 2]
    paho(server, "pub", v5=v5).publish("twice/x", b"x", 2)
    assert sub.next().qos == 2
    assert sub.nothing(0.3)


@pytest.mark.parametrize("how", ["unsubscribe", "clean-start"])
def test_a_persistent_session_subscribing_again_gets_the_retained_message_first(
    server: RunningServer, how: str
) -> None:
    """MQTT-3.3.1-9, §4.6: a SUBSCRIBE with Retain Handling 0 sends the retained message, and
    one published after it comes after it. A persistent session's subscription is a dropbox;
    one deleted (UNSUBSCRIBE, a clean start ending the session) and made again at its path
    was read by the old one's engine, whose watch had gone with the old folder: the retained
    copy waited for the next rescan (5 s), and a newer message overtook it."""
    pub = paho(server, "pub")
    pub.publish("cfg/device", b"v1", 1, retain=True)
    sub = paho(server, "device", clean=False, expiry=300)
    sub.subscribe("cfg/#", 1)
    assert sub.next().payload == b"v1"
    if how == "unsubscribe":
        sub.unsubscribe("cfg/#")
    else:
        sub.stop()
        sub = paho(server, "device", clean=True, expiry=300)
    sub.subscribe("cfg/#", 1)
    pub.publish("cfg/device", b"v2", 1, retain=True)
    got = [sub.next(), sub.next()]
    assert [(m.payload, m.retain) for m in got] == [(b"v1", True), (b"v2", False)]


@pytest.mark.parametrize("how", ["unsubscribe", "disconnect"])
def test_a_share_group_ended_and_made_again_gets_what_another_process_publishes_at_once(
    tmp_path: Path, how: str
) -> None:
    """MQTT-234: the last member out ends the group, and a member subscribing again makes a new
    one. Its dropbox is made again at the same path; the old one's engine, whose watch went
    with the old folder, was kept and read it: a message another process published (`boxmq
    publish`, the Python API) reached the member only at the next full rescan (5 s). Under
    fsync=always, as `boxmq serve` runs: the SUBSCRIBE is done by a disk thread."""
    import boxmq

    with start_server(tmp_path / "root", fsync="always") as running:
        # Only the watch tells of what another process publishes: no rescan within the test.
        running.box.options = replace(running.box.options, rescan_interval=3600.0)
        with boxmq.open(running.root, fsync="never") as other:  # as another process would
            for round in range(2):
                member = paho(running, "member")
                member.subscribe("$share/g/jobs/#", 1)
                other.publish("jobs/x", f"round {round}".encode(), qos=1)
                assert member.next().payload == f"round {round}".encode()
                if how == "unsubscribe":
                    member.unsubscribe("$share/g/jobs/#")
                member.stop()
                until(  # its session ended: the group with it
                    lambda: not any(running.root.glob("topic-root/*/.subscriptions/share.g")),
                    "the group outlived its last member",
                    every=0.02,
                )


def test_a_subscription_folder_made_again_by_hand_is_watched_again(tmp_path: Path) -> None:
    """docs/operations.md: a folder grown large is made again (`mv`, `mkdir`) with the server
    running. Its watch stayed on the folder moved aside: what another process published
    (`boxmq publish`) reached the client only at each full rescan (5 s), until a restart."""
    with start_server(tmp_path / "root", fsync="always") as running:
        # Only the watch tells of what another process publishes: no rescan within the test.
        running.box.options = replace(running.box.options, rescan_interval=3600.0)
        keeper = paho(running, "keeper", clean=False, expiry=300)
        keeper.subscribe("jobs/#", 1)
        _publish_elsewhere(running.root, "jobs/1", "before")
        assert keeper.next().payload == b"before"
        [target] = running.root.glob("topic-root/*/.subscriptions/*/target")
        target.rename(target.with_name("target.old"))
        target.mkdir()
        for number in range(2):
            _publish_elsewhere(running.root, f"jobs/{number}", f"after {number}")
            assert keeper.next().payload == f"after {number}".encode()
        keeper.stop()


def _publish_elsewhere(root: Path, topic: str, body: str) -> None:
    """`boxmq publish`, a process of its own on the server's root."""
    command = [sys.executable, "-m", "boxmq", "--data", str(root), "--fsync", "never"]
    subprocess.run(
        [*command, "publish", topic, body],
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_clean_start_discards_the_old_session(server: RunningServer) -> None:
    away = paho(server, "gone", clean=False, expiry=300)
    away.subscribe("jobs/#", 1)
    away.stop()
    paho(server, "pub").publish("jobs/1", b"lost", 1)
    fresh = paho(server, "gone", clean=True)
    assert fresh.nothing(0.5)


def test_session_takeover_moves_the_session_to_the_new_connection(server: RunningServer) -> None:
    first = paho(server, "same", clean=False, expiry=300)
    first.subscribe("t/#", 1)
    second = paho(server, "same", clean=False, expiry=300)
    assert int(first.disconnects.get(timeout=5).value) == 0x8E  # Session taken over
    paho(server, "pub").publish("t/1", b"x", 1)
    assert second.next().payload == b"x"


def test_share_group_load_balances_and_never_duplicates(server: RunningServer) -> None:
    workers = [paho(server, f"w{i}") for i in range(3)]
    for worker in workers:
        worker.subscribe("$share/etl/jobs/#", 1)
    pub = paho(server, "pub", v5=False)
    for i in range(30):
        pub.publish(f"jobs/{i}", f"{i}".encode(), 1)
    seen: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(seen) < 30 and time.monotonic() < deadline:
        for worker in workers:
            while not worker.messages.empty():
                seen.append(worker.messages.get().payload)
        time.sleep(0.05)
    assert sorted(seen) == sorted(f"{i}".encode() for i in range(30))
    assert all(not w.messages.qsize() for w in workers)


def test_v311_client_may_join_a_share_group(server: RunningServer) -> None:
    worker = paho(server, "old", v5=False)
    assert worker.subscribe("$share/g/x", 1)
    paho(server, "pub", v5=False).publish("x", b"1", 1)
    assert worker.next().payload == b"1"


def test_no_retained_messages_on_a_shared_subscription(server: RunningServer) -> None:
    paho(server, "pub").publish("cfg", b"retained", 1, retain=True)
    worker = paho(server, "w")
    worker.subscribe("$share/g/cfg", 1)
    assert worker.nothing()


def _props(**values: object) -> Any:
    return paho_properties(PacketTypes.PUBLISH, **values)


def test_v5_properties_travel_with_the_message(server: RunningServer) -> None:
    sub = paho(server, "sub")
    sub.subscribe("rpc/#", 1)
    pub = paho(server, "pub")
    props = _props(
        UserProperty=[("k", "v"), ("k", "w")],
        ContentType="text/plain",
        ResponseTopic="rpc/reply",
        CorrelationData=b"\x01\x02",
        PayloadFormatIndicator=1,
    )
    pub.publish("rpc/call", b"hi", 1, properties=props)
    got = sub.next().properties
    assert got.UserProperty == [("k", "v"), ("k", "w")]
    assert got.ContentType == "text/plain"
    assert got.ResponseTopic == "rpc/reply"
    assert got.CorrelationData == b"\x01\x02"
    assert got.PayloadFormatIndicator == 1


def test_v5_properties_travel_through_a_dropbox_however_long(server: RunningServer) -> None:
    sub = paho(server, "sub", clean=False, expiry=300)  # persistent: its messages are files
    sub.subscribe("rpc/#", 1)
    pub = paho(server, "pub")
    pub.publish("rpc/a", b"1", 1, properties=_props(ContentType="json", CorrelationData=b"7"))
    got = sub.next().properties
    assert (got.ContentType, got.CorrelationData) == ("json", b"7")
    pub.publish("rpc/b", b"2", 1, properties=_props(UserProperty=[("k", "v" * 200)]))
    message = sub.next()  # past what a file name holds: kept in a side file
    assert message.payload == b"2"
    assert message.properties.UserProperty == [("k", "v" * 200)]


def test_subscription_identifier_comes_back(server: RunningServer) -> None:
    sub = paho(server, "sub")
    props = paho_properties(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=42)
    sub.subscribe("a/#", 1, properties=props)
    paho(server, "pub").publish("a/b", b"x", 1)
    assert sub.next().properties.SubscriptionIdentifier == [42]


@pytest.mark.parametrize("persistent", [False, True], ids=["clean", "persistent"])
@pytest.mark.parametrize("filter", ["ids/#", "$share/g/ids/#"])
def test_a_subscribe_of_the_same_filter_replaces_its_identifier(
    server: RunningServer, persistent: bool, filter: str
) -> None:
    """§3.8.2.1.2: a Subscription Identifier belongs to the subscription a SUBSCRIBE creates
    or modifies, and MQTT-3.8.4-3: the same filter again replaces the subscription, so the
    next message carries the new identifier, and none once a SUBSCRIBE without one replaced
    it. A persistent session's subscription and a share group are dropboxes on disk, whose
    identifier is kept apart from the filter."""
    sub = paho(server, "ids", clean=True, expiry=300 if persistent else 0)
    pub = paho(server, "pub")
    for identifier in (7, 8, None):
        values = {} if identifier is None else {"SubscriptionIdentifier": identifier}
        sub.subscribe(filter, 1, properties=paho_properties(PacketTypes.SUBSCRIBE, **values))
        pub.publish("ids/x", str(identifier), 1)
        got = sub.next()
        assert got.payload == str(identifier).encode()
        assert getattr(got.properties, "SubscriptionIdentifier", None) == (
            None if identifier is None else [identifier]
        )
    assert sub.nothing(0.3)


def test_no_local_keeps_a_client_from_its_own_messages(server: RunningServer) -> None:
    chat = paho(server, "chat")
    chat.subscribe("room", 1, noLocal=True)
    chat.publish("room", b"mine", 1)
    paho(server, "other").publish("room", b"theirs", 1)
    assert chat.next().payload == b"theirs"


def test_retain_as_published_and_retain_handling(server: RunningServer) -> None:
    pub = paho(server, "pub")
    pub.publish("r", b"old", 1, retain=True)
    keep = paho(server, "keep")
    keep.subscribe("r", 1, retainAsPublished=True, retainHandling=2)  # no retained on subscribe
    plain = paho(server, "plain")
    plain.subscribe("r", 1)
    assert plain.next().retain is True  # sent because retained
    pub.publish("r", b"new", 1, retain=True)
    assert keep.next().retain is True  # as published
    assert plain.next().retain is False  # a live message: flag cleared (§3.3.1.3)


def test_topic_alias_from_the_client(server: RunningServer) -> None:
    sub = paho(server, "sub")
    sub.subscribe("long/topic/name", 1)
    pub = paho(server, "pub")
    pub.publish("long/topic/name", b"1", 1, properties=_props(TopicAlias=3))
    pub.publish("", b"2", 1, properties=_props(TopicAlias=3))
    assert [sub.next().payload, sub.next().payload] == [b"1", b"2"]


def test_assigned_client_identifier_in_connack(server: RunningServer) -> None:
    body = b"\x00\x04MQTT\x05\x02\x00\x1e\x00" + b"\x00\x00"  # v5, clean, empty id
    with socket.create_connection((server.host, server.port), timeout=5) as raw:
        raw.sendall(bytes([0x10, len(body)]) + body)
        data = raw.recv(1024)
    assert data[0] == 0x20
    assert data[3] == 0x00
    assert b"\x12\x00\x25auto-" in data  # Assigned Client Identifier (§3.2.2.3.7)


def test_unsubscribe_stops_delivery(server: RunningServer) -> None:
    sub = paho(server, "sub")
    sub.subscribe("u/#", 1)
    sub.subscribe("fence", 1)
    sub.unsubscribe("u/#")
    pub = paho(server, "pub")
    pub.publish("u/1", b"x", 1)
    pub.publish("fence", b"after", 1)
    assert sub.next().payload == b"after"  # and not u/1, published and routed before it


def test_server_restart_keeps_a_persistent_session(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with start_server(root) as first:
        away = paho(first, "keeper", clean=False, expiry=3600)
        away.subscribe("k/#", 1)
        away.stop()
        paho(first, "pub").publish("k/1", b"kept", 1)
    with start_server(root) as second:
        back = paho(second, "keeper", clean=False, expiry=3600)
        assert back.next().payload == b"kept"


def test_message_expiry_counts_the_time_spent_waiting(server: RunningServer) -> None:
    away = paho(server, "away", clean=False, expiry=300)
    away.subscribe("exp/#", 1)
    away.stop()
    pub = paho(server, "pub")
    published = time.monotonic()  # before the send: the interval counts from the server's read
    pub.publish("exp/short", b"gone", 1, properties=_props(MessageExpiryInterval=1))
    pub.publish("exp/long", b"kept", 1, properties=_props(MessageExpiryInterval=60))
    pub.publish("exp/retained", b"old", 1, retain=True, properties=_props(MessageExpiryInterval=1))
    time.sleep(2.2)
    back = paho(server, "away", clean=False, expiry=300)
    message = back.next()
    waited = time.monotonic() - published  # 2.2 s and more, on a loaded machine
    assert message.payload == b"kept"
    left = message.properties.MessageExpiryInterval  # what is left of it
    assert 60 - waited - 1 <= left < 60, (left, waited)
    assert back.nothing()
    late = paho(server, "late")
    late.subscribe("exp/#", 1)
    assert late.nothing()  # the retained one expired too


def test_a_message_expiry_interval_over_100_years_is_stored_capped_not_refused(
    server: RunningServer,
) -> None:
    """MQTT lets a Message Expiry Interval be any Four Byte Integer (§3.3.2.3.3), up to 136
    years; the store keeps no deadline past 100 (core/durations.py). A message for a
    persistent session, a QoS 2 one and a retained one are stored, expiring in 100 years,
    where they were refused (PUBACK / PUBREC 0x80) and so never reached the disk."""
    from boxmq.core.durations import LONGEST

    never = 0xFFFF_FFFF
    away = paho(server, "away", clean=False, expiry=300)
    away.subscribe("far/#", 2)
    away.stop()
    live = paho(server, "live")
    live.subscribe("far/#", 2)
    pub = paho(server, "pub")
    for topic, qos, retain in (("far/1", 1, False), ("far/2", 2, False), ("far/r", 1, True)):
        pub.publish(
            topic, topic, qos, retain=retain, properties=_props(MessageExpiryInterval=never)
        )
    sent = [live.next() for _ in range(3)]  # from memory: as they came
    assert sorted(m.topic for m in sent) == ["far/1", "far/2", "far/r"]
    assert {m.properties.MessageExpiryInterval for m in sent} == {never}
    back = paho(server, "away", clean=False, expiry=300)
    stored = [back.next() for _ in range(3)]
    assert sorted(m.payload for m in stored) == [b"far/1", b"far/2", b"far/r"]
    for message in stored:  # what is left of at most 100 years
        assert LONGEST - 60 <= message.properties.MessageExpiryInterval <= LONGEST
    late = paho(server, "late")
    late.subscribe("far/#", 1)
    assert late.next().payload == b"far/r"


def test_a_message_published_with_the_python_api_reaches_a_persistent_session(
    server: RunningServer,
) -> None:
    import boxmq

    sub = paho(server, "durable", clean=False, expiry=300)
    sub.subscribe("api/#", 1)
    with boxmq.open(server.root, fsync="never") as other:  # another Box: as another process would
        other.publish("api/x", b"from python", qos=1)
    message = sub.next(timeout=5)
    assert (message.topic, message.payload) == ("api/x", b"from python")


def test_a_subscription_made_by_another_process_gets_the_next_mqtt_publish(
    server: RunningServer,
) -> None:
    """The broker learns of durable subscriptions made outside it (the root's generation
    file) before it handles the next PUBLISH, even when its last reads carried only acks."""
    import boxmq

    pub = paho(server, "pub")
    pub.publish("proc/x", b"before: nobody wants proc/x", 1)  # PUBACKed: "nobody" is cached
    with boxmq.open(server.root, fsync="never") as other:  # another Box: as another process would
        worker = other.subscribe("proc/#", "worker", max_in_flight=5)
        pub.publish("proc/x", b"for the worker", 1)
        message = worker.receive(timeout=5)
        assert message is not None
        assert message.body == b"for the worker"
        message.ack()
        worker.close()


def test_retained_messages_that_arrive_in_one_read_are_all_kept(server: RunningServer) -> None:
    """Several retained PUBLISHes in one TCP segment go to the disk as one batch; each must be
    retained as if it had come alone."""
    topics = [f"burst/{i}" for i in range(4)]
    connect = connect_packet_311("raw", keep_alive=60)
    publishes = b"".join(
        packet(0x33, string(topic) + (i + 1).to_bytes(2, "big") + f"v{i}".encode())
        for i, topic in enumerate(topics)
    )
    with socket.create_connection((server.host, server.port), timeout=5) as raw:
        raw.sendall(connect)
        assert raw.recv(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted
        raw.sendall(publishes)  # one write: one read on the server's side
        acks = b""
        while len(acks) < 4 * len(topics):
            chunk = raw.recv(64)
            assert chunk, "connection closed before every PUBACK"
            acks += chunk
        assert acks == b"".join(b"\x40\x02" + (i + 1).to_bytes(2, "big") for i in range(4))
    late = paho(server, "late")
    late.subscribe("burst/#", 1)
    got = sorted((m.topic, m.payload, m.retain) for m in (late.next() for _ in topics))
    assert got == [(topic, f"v{i}".encode(), True) for i, topic in enumerate(topics)]
