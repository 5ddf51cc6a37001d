"""MQTT v5 properties across the doors, with real sockets and real clients.

What an MQTT v5 publisher sets (User Properties, Content Type, Correlation Data, ...) is what
the Python API and the CLI show (store/v5_properties.py); what the Python API or the CLI sets
is what an MQTT v5 subscriber gets, as User Properties (mqtt/stored.py); and a User Property
named JMSXGroupID is the message's group, which `hash-by-key` keeps on one share-group member.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import (
    WAIT,
    Paho,
    RunningServer,
    keeper_target,
    mosquitto_tools,
    paho,
    paho_properties,
    put_file,
    start_server,
)
from tests.waiting import logged, waited

from boxmq.model import V5_PROPERTIES, Envelope, MessageId, Property, PropertyType
from boxmq.store.names import encode

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
SHORT: dict[str, object] = {  # fits in the file name (bx_v5)
    "UserProperty": [("tenant", "acme")],
    "ContentType": "text/csv",
}
LONG: dict[str, object] = {  # goes to a side file (bx_v5h)
    "UserProperty": [("tenant", "acme"), ("traceparent", TRACEPARENT), ("tenant", "other")],
    "ContentType": "application/json",
    "CorrelationData": b"\x01\x02req-7",
    "ResponseTopic": "rpc/replies/client-7f3a9c2e",
    "PayloadFormatIndicator": 1,
}
SHOWN = {
    "short": {"mqtt.content-type": "text/csv", "tenant": "acme"},
    "long": {
        "mqtt.content-type": "application/json",
        "mqtt.response-topic": "rpc/replies/client-7f3a9c2e",
        "mqtt.correlation-data": "AQJyZXEtNw==",  # base64 of the bytes
        "mqtt.payload-format": "utf-8",
        "tenant": "acme",  # a name repeated: its first value
        "traceparent": TRACEPARENT,
    },
}
PUBLISHED: dict[str, dict[str, object]] = {"short": SHORT, "long": LONG}


def _cli(root: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _publish(server: RunningServer, topic: str, kind: str) -> None:
    props = paho_properties(PacketTypes.PUBLISH, **PUBLISHED[kind])
    client = paho(server, f"pub-{kind}")
    client.publish(topic, b"{}", 1, properties=props)
    client.stop()


@pytest.mark.parametrize("kind", ["short", "long"])
def test_the_python_api_shows_what_an_mqtt_publisher_set(server: RunningServer, kind: str) -> None:
    kept = server.box.subscribe("orders/#", "audit")  # a durable subscription
    member = server.box.subscribe("$share/billing/orders/#", "worker")  # a share group
    _publish(server, "orders/1", kind)
    for subscriber in (kept, member):
        message = subscriber.receive(timeout=WAIT)
        assert message is not None
        assert message.properties == SHOWN[kind]
        message.ack()
        subscriber.close()


def test_the_cli_shows_what_an_mqtt_publisher_set(server: RunningServer) -> None:
    root = server.root
    server.box.subscribe("orders/#", "audit").close()  # kept: it collects while away
    _publish(server, "orders/1", "short")
    _publish(server, "orders/2", "long")
    lines = _cli(root, "--json", "subscribe", "orders/#", "--name", "audit", "--count", "2")
    got = {
        record["topic"]: record["properties"] for record in map(json.loads, lines.split("\n")[:2])
    }
    assert got == {"orders/1": SHOWN["short"], "orders/2": SHOWN["long"]}


def test_get_and_peek_show_what_an_mqtt_publisher_set_once_a_script_moved_it_to_a_queue(
    server: RunningServer,
) -> None:
    root = server.root
    server.box.subscribe("orders/#", "audit").close()
    _publish(server, "orders/2", "long")
    _cli(root, "put", "redrive", "placeholder")  # makes the queue; its message goes first
    _cli(root, "get", "redrive")
    target = next(root.glob("topic-root/*/.subscriptions/client.audit/target"))
    waited(lambda: os.listdir(target))
    [name] = os.listdir(target)
    os.rename(target / name, root / "redrive" / "target" / name)  # as a shell script would

    [row] = json.loads(_cli(root, "--json", "peek", "redrive"))
    assert row["properties"] == SHOWN["long"]
    # Where to answer, and with what, as `get` (and `Message`) show them.
    assert (row["reply-to"], row["correlation-id"]) == (LONG["ResponseTopic"], "\x01\x02req-7")
    [peeked] = server.box.queue("redrive").peek()
    assert (peeked.reply_to, peeked.correlation_id) == (row["reply-to"], row["correlation-id"])
    table = _cli(root, "peek", "redrive")
    assert "tenant=acme" in table
    assert "mqtt.content-type=application/json" in table
    assert "rpc/replies/client-7f3a9c2e" in table.splitlines()[1]  # the REPLY-TO column
    assert "bx_v5" not in table
    text = _cli(root, "get", "redrive")
    fields = dict(line.split(None, 1) for line in text.split("\n\n")[0].splitlines())
    assert fields["properties"] == ",".join(f"{k}={v}" for k, v in SHOWN["long"].items())
    _cli(root, "unlock", "redrive", fields["id"])
    got = json.loads(_cli(root, "--json", "get", "redrive"))
    assert got["properties"] == SHOWN["long"]


def _user_properties(client: Paho) -> list[tuple[str, str]]:
    received = client.next()
    return list(getattr(received.properties, "UserProperty", []))


def test_a_v5_subscriber_gets_what_the_python_api_and_the_cli_set_as_user_properties(
    server: RunningServer,
) -> None:
    persistent = paho(server, "keeper", clean=False, expiry=300)  # its own dropbox
    persistent.subscribe("jobs/#", 1)
    member = paho(server, "member")  # a share group: one dropbox
    member.subscribe("$share/workers/jobs/#", 1)
    old = paho(server, "old", v5=False, clean=False)  # 3.1.1: the message, no properties
    old.subscribe("jobs/#", 1)

    server.box.publish("jobs/a", b"a", properties={"tenant": "acme", "retries": 3, "ok": True})
    expected = [("tenant", "acme"), ("retries", "3"), ("ok", "true")]
    assert _user_properties(persistent) == expected
    assert _user_properties(member) == expected
    assert old.next().payload == b"a"

    _cli(server.root, "publish", "jobs/b", "b", "-p", "tenant=acme", "-p", "n:int=7")
    assert _user_properties(persistent) == [("tenant", "acme"), ("n", "7")]
    assert _user_properties(member) == [("tenant", "acme"), ("n", "7")]
    assert old.next().payload == b"b"


def _mosquitto_pub(server: RunningServer, topic: str, *options: str) -> None:
    command = ["timeout", "-k", "5", "60", "mosquitto_pub", "-h", server.host]
    command += ["-p", str(server.port), "-V", "5", "-q", "1", "-t", topic, "-m", topic, *options]
    subprocess.run(command, check=True)


def test_a_jmsxgroupid_user_property_keeps_its_group_on_one_share_group_member(
    tmp_path: Path,
) -> None:
    mosquitto_tools()
    with start_server(tmp_path / "root", group_dispatch={"billing": "hash-by-key"}) as running:
        members = {name: paho(running, name) for name in ("member-a", "member-b")}
        for client in members.values():
            client.subscribe("$share/billing/orders/#", 1)
        topics = [f"orders/{i}" for i in range(8)]
        # Without a group, hash-by-key keys on the topic: these go to both members.
        assert {zlib.crc32(t.encode()) % 2 for t in topics} == {0, 1}
        for topic in topics:
            _mosquitto_pub(running, topic, "-D", "publish", "user-property", "JMSXGroupID", "o-17")
        got = _gather(members, len(topics))
        assert sorted(len(messages) for messages in got.values()) == [0, len(topics)]
        [received] = [messages for messages in got.values() if messages]
        assert sorted(r.topic for r in received) == topics
        for message in received:  # the User Property once, as it was published
            assert message.properties.UserProperty == [("JMSXGroupID", "o-17")]


def _gather(members: dict[str, Paho], count: int) -> dict[str, list[Any]]:
    got: dict[str, list[Any]] = {name: [] for name in members}
    deadline = time.monotonic() + WAIT
    while sum(map(len, got.values())) < count and time.monotonic() < deadline:
        for name, client in members.items():
            with contextlib.suppress(queue.Empty):
                got[name].append(client.messages.get(timeout=0.05))
    for name, client in members.items():  # anything more would be a stray copy
        while not client.nothing(0.3):
            got[name].append(None)
    return got


def test_a_message_whose_stored_properties_are_malformed_is_delivered_without_them(
    server: RunningServer,
) -> None:
    keeper, target = keeper_target(server, "jobs/#")
    bad = [b"\x11\x00\x00\x00\x05", b"\x26\x00\x05ten", b"\x03\x00\x02\xff\xfe"]
    for i, raw in enumerate(bad):  # names edited by hand, dropped into its dropbox
        blob = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        own = (
            Property("bx_topic", PropertyType.STRING, "jobs/a"),
            Property("bx_qos", PropertyType.BYTE, 1),
            Property(V5_PROPERTIES, PropertyType.STRING, blob),
        )
        envelope = Envelope(MessageId(f"m{i}"), properties=own)
        put_file(target, encode(envelope), b"m%d" % i)
    got = sorted(keeper.next().payload for _ in bad)
    assert got == [b"m0", b"m1", b"m2"]
    assert keeper.disconnects.empty()  # nothing it had to refuse


def test_a_python_worker_answers_an_mqtt_v5_request_on_its_response_topic(
    server: RunningServer,
) -> None:
    """MQTT 5.0 §4.10: the requester names where the answer goes and how to match it; the
    worker reads them as `reply_to` and `correlation_id`, and publishes the answer with them."""
    worker = server.box.subscribe("rpc/requests", "worker")  # a durable subscription
    # Persistent: its subscription has a dropbox, which another process's answer reaches.
    requester = paho(server, "device-7", clean=False, expiry=300)
    requester.subscribe("rpc/replies/device-7", 1)
    request = paho_properties(
        PacketTypes.PUBLISH, ResponseTopic="rpc/replies/device-7", CorrelationData=b"req-7"
    )
    requester.publish("rpc/requests", b"ping", 1, properties=request)

    message = worker.receive(timeout=WAIT)
    assert message is not None
    assert (message.reply_to, message.correlation_id) == ("rpc/replies/device-7", "req-7")
    assert message.properties["mqtt.correlation-data"] == "cmVxLTc="  # still shown as before
    reply_to = message.reply_to
    assert reply_to is not None
    server.box.publish(reply_to, b"pong", correlation_id=message.correlation_id)
    message.ack()
    worker.close()

    answer = requester.next()
    assert (answer.topic, answer.payload) == ("rpc/replies/device-7", b"pong")
    assert answer.properties.CorrelationData == b"req-7"
    assert not hasattr(answer.properties, "ResponseTopic")

    requester.stop()


def test_a_cli_worker_answers_an_mqtt_v5_request_on_its_response_topic(
    server: RunningServer,
) -> None:
    server.box.subscribe("rpc/requests", "worker").close()  # kept: it collects while away
    requester = paho(server, "device-8", clean=False, expiry=300)
    requester.subscribe("rpc/replies/device-8", 1)
    request = paho_properties(
        PacketTypes.PUBLISH, ResponseTopic="rpc/replies/device-8", CorrelationData=b"\xffreq"
    )
    requester.publish("rpc/requests", b"ping", 1, properties=request)

    line = _cli(
        server.root, "--json", "subscribe", "rpc/requests", "--name", "worker", "--count", "1"
    )
    record = json.loads(line.split("\n")[0])
    assert record["reply-to"] == "rpc/replies/device-8"
    assert record["correlation-id"] == "/3JlcQ=="  # not UTF-8: its base64
    _cli(
        server.root,
        "publish",
        record["reply-to"],
        "pong",
        "--correlation-id",
        record["correlation-id"],
        "--reply-to",
        "rpc/requests",
    )
    answer = requester.next()
    assert answer.payload == b"pong"
    assert answer.properties.CorrelationData == b"/3JlcQ=="  # the text's bytes, as documented
    assert answer.properties.ResponseTopic == "rpc/requests"
    requester.stop()


def test_a_property_a_script_wrote_in_bytes_that_are_not_utf8_is_left_out_the_message_goes_whole(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A script's name whose property escapes are not UTF-8 (`%ED%A0%80` encodes a surrogate,
    `%FF` is no UTF-8 at all): MQTT cannot carry them (§1.5.4), so the subscriber gets the
    message with its topic and its other properties, without those two, and a warning for
    each names the message and the property."""
    keeper, target = keeper_target(server, "jobs/#")
    name = "4.m1.T.....bx_topicS=jobs%2Fa&bx_qosY=1&tenantS=acme&kS=%ED%A0%80&n%FFS=v"
    with caplog.at_level(logging.WARNING, logger="boxmq"):
        put_file(target, name, b"whole")
        received = keeper.next()
    assert (received.topic, received.payload, received.qos) == ("jobs/a", b"whole", 1)
    assert received.properties.UserProperty == [("tenant", "acme")]
    warned = logged(caplog, "message m1")
    assert len(warned) == 2
    assert "'k'" in warned[0]
    assert "'n\\xff'" in warned[1]
    assert keeper.disconnects.empty()
    keeper.stop()


def test_mqtt_properties_set_by_the_python_api_and_the_cli_go_out_as_what_they_name(
    server: RunningServer,
) -> None:
    """`mqtt.*` are the names readers show an MQTT v5 message's Content Type, Response Topic,
    Correlation Data and Payload Format under: set by a producer, they go out as those, never
    as User Properties; and a message read and published again goes out as it came in."""
    keeper = paho(server, "keeper", clean=False, expiry=300)
    keeper.subscribe("jobs/#", 1)

    # Each name takes some 25 bytes of the 135 a put's name has: two or three of them fit.
    properties: dict[str, str | int] = {
        "mqtt.content-type": "text/csv",
        "mqtt.payload-format": "utf-8",
        "n": 1,
    }
    server.box.publish("jobs/a", b"{}", properties=properties)
    got = keeper.next().properties
    assert (got.ContentType, got.PayloadFormatIndicator) == ("text/csv", 1)
    assert got.UserProperty == [("n", "1")]

    data = base64.b64encode(b"\xffr").decode()
    _cli(
        server.root,
        "publish",
        "jobs/b",
        "b",
        *("-p", "mqtt.response-topic=r/7", "-p", f"mqtt.correlation-data={data}"),
    )
    got = keeper.next().properties
    assert (got.ResponseTopic, got.CorrelationData) == ("r/7", b"\xffr")
    assert not hasattr(got, "UserProperty")

    # An MQTT v5 message, read by a Python worker and published again with what it shows.
    worker = server.box.subscribe("orders/#", "worker")
    _publish(server, "orders/1", "short")
    message = worker.receive(timeout=WAIT)
    assert message is not None
    server.box.publish("jobs/again", message.body, properties=message.properties)
    message.ack()
    worker.close()
    again = keeper.next().properties
    assert (again.ContentType, again.UserProperty) == (SHORT["ContentType"], SHORT["UserProperty"])
    keeper.stop()


def test_an_mqtt_v5_request_read_and_published_again_goes_out_as_it_came_in(
    server: RunningServer,
) -> None:
    """docs/mqtt.md, "The `mqtt.*` names work both ways": an ordinary v5 request, too long
    for a name once its `mqtt.*` properties are shown, is kept in a side file when published
    again through the Python API, and a v5 subscriber gets what the requester sent."""
    worker = server.box.subscribe("rt/#", "worker")  # a durable subscription: a dropbox
    keeper, _ = keeper_target(server, "out/#")  # its own dropbox: the copy goes through disk
    request: dict[str, object] = {
        "UserProperty": [("tenant", "acme")],
        "ResponseTopic": "replies/dev1",
        "CorrelationData": b"abc",
        "ContentType": "application/json",
        "PayloadFormatIndicator": 1,
    }
    requester = paho(server, "requester")
    requester.publish(
        "rt/in", b'{"a":1}', 1, properties=paho_properties(PacketTypes.PUBLISH, **request)
    )
    requester.stop()

    message = worker.receive(timeout=WAIT)
    assert message is not None
    server.box.publish("out/dev1", message.body, properties=message.properties)
    message.ack()
    worker.close()

    again = keeper.next()
    assert (again.topic, again.payload) == ("out/dev1", b'{"a":1}')
    got = again.properties
    assert got.UserProperty == request["UserProperty"]
    assert (got.ResponseTopic, got.CorrelationData) == ("replies/dev1", b"abc")
    assert (got.ContentType, got.PayloadFormatIndicator) == ("application/json", 1)
    keeper.stop()
