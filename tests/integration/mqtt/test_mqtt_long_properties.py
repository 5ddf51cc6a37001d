"""v5 properties far past what a file name holds, through every path that stores a message.

A request/response client's Response Topic and Correlation Data, and a W3C traceparent, do
not fit the ~60 bytes a name leaves them: they go to a side file (store/side_files.py) and
must come back intact, after a restart too (docs/file-format.md, "The 255-byte limit").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import RunningServer, paho, paho_properties, start_server

from boxmq.store.side_files import SIDE_DIR, referenced

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
USER = [
    ("traceparent", TRACEPARENT),
    ("tenant", "acme-industrial"),
    ("request-kind", "invoice.render"),
    ("attempt", "1"),
]
RESPONSE_TOPIC = "rpc/replies/client-7f3a9c2e"
CORRELATION = bytes(range(32))


def _long_properties() -> Any:
    return paho_properties(
        PacketTypes.PUBLISH,
        UserProperty=USER,
        ResponseTopic=RESPONSE_TOPIC,
        CorrelationData=CORRELATION,
        ContentType="application/json",
    )


def _assert_intact(properties: Any) -> None:
    assert properties.UserProperty == USER
    assert properties.ResponseTopic == RESPONSE_TOPIC
    assert properties.CorrelationData == CORRELATION
    assert properties.ContentType == "application/json"


def test_a_persistent_session_gets_long_properties_intact(server: RunningServer) -> None:
    sub = paho(server, "sub", clean=False, expiry=300)  # persistent: its messages are files
    sub.subscribe("rpc/#", 1)
    paho(server, "pub").publish("rpc/call", b"{}", 1, properties=_long_properties())
    message = sub.next()
    assert message.payload == b"{}"
    _assert_intact(message.properties)


def test_a_share_group_member_gets_long_properties_intact(server: RunningServer) -> None:
    worker = paho(server, "worker")
    worker.subscribe("$share/renderers/rpc/#", 1)
    paho(server, "pub").publish("rpc/call", b"{}", 1, properties=_long_properties())
    _assert_intact(worker.next().properties)


def test_long_properties_survive_a_restart_between_publish_and_delivery(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with start_server(root) as first:
        away = paho(first, "keeper", clean=False, expiry=3600)
        away.subscribe("rpc/#", 1)
        away.stop()
        paho(first, "pub").publish("rpc/call", b"kept", 1, properties=_long_properties())
    with start_server(root) as second:
        message = paho(second, "keeper", clean=False, expiry=3600).next()
        assert message.payload == b"kept"
        _assert_intact(message.properties)


def test_long_properties_of_a_qos_2_message_go_through_the_exactly_once_intake(
    server: RunningServer,
) -> None:
    sub = paho(server, "sub", clean=False, expiry=300)
    sub.subscribe("rpc/#", 2)
    paho(server, "pub").publish("rpc/call", b"once", 2, properties=_long_properties())
    message = sub.next()
    assert (message.payload, message.qos) == (b"once", 2)
    _assert_intact(message.properties)
    assert sub.nothing(0.3)


def test_a_retained_message_keeps_its_long_properties(server: RunningServer) -> None:
    paho(server, "pub").publish("cfg/a", b"v1", 1, retain=True, properties=_long_properties())
    durable = paho(server, "durable", clean=False, expiry=300)  # gets it through its dropbox
    durable.subscribe("cfg/#", 1)
    plain = paho(server, "plain")  # gets it from the retained store, in memory
    plain.subscribe("cfg/#", 1)
    for client in (durable, plain):
        message = client.next()
        assert (message.payload, message.retain) == (b"v1", True)
        _assert_intact(message.properties)


@pytest.mark.parametrize("subscribed", [False, True], ids=["nobody", "a persistent session"])
def test_a_retained_delete_writes_a_side_file_only_for_a_copy(
    server: RunningServer, subscribed: bool
) -> None:
    """A retained PUBLISH with no payload deletes its topic's retained message and is kept
    nowhere (MQTT 5.0 §3.3.1.3): its long properties go to a side file only where a
    subscription's copy names it. Before, one was written all the same, which no file named
    and the sweep collected only an hour later."""
    sub = paho(server, "sub", clean=False, expiry=300) if subscribed else None
    if sub is not None:
        sub.subscribe("cfg/#", 1)
    paho(server, "pub").publish("cfg/a", b"", 1, retain=True, properties=_long_properties())
    if sub is not None:
        message = sub.next()
        assert message.payload == b""
        _assert_intact(message.properties)
    side = server.root / SIDE_DIR
    assert len(os.listdir(side) if side.exists() else []) == (1 if subscribed else 0)


LONG_TOPIC = "cfg/a-topic-of-sixty-bytes-that-leaves-no-room-for-a-key-her"


@pytest.mark.parametrize("persistent", [False, True], ids=["plain", "persistent"])
def test_a_retained_qos2_message_on_a_long_topic_keeps_its_properties(
    server: RunningServer, persistent: bool
) -> None:
    """MQTT-3.3.2-17/18: a retained message's properties go to every later subscriber. On a
    topic that leaves its name no room even for their side file's key, its file's header
    names the side file. A persistent session's QoS 2 one waits in the exactly-once intake
    for its PUBREL, then replaces the retained message there: before, without the header's
    field, so a later subscriber got it without its properties."""
    assert len(LONG_TOPIC) == 60
    publisher = paho(server, "pub", clean=not persistent, expiry=300 if persistent else None)
    publisher.publish(LONG_TOPIC, b"v1", 2, retain=True, properties=_long_properties())
    later = paho(server, "later")  # gets it from the retained store
    later.subscribe("cfg/#", 2)
    message = later.next()
    assert (message.payload, message.retain, message.qos) == (b"v1", True, 2)
    _assert_intact(message.properties)


@pytest.mark.parametrize("retain", [False, True], ids=["plain", "retained"])
def test_a_qos2_message_on_a_long_topic_leaves_no_side_file_nothing_names(
    server: RunningServer, retain: bool
) -> None:
    """A persistent session's QoS 2 PUBLISH goes through the exactly-once intake, whose name
    for it on a topic with no room for the side file's key holds none of its properties.
    Before, its side file was written at the first try all the same, named by no file until
    the hourly collection; now only the retained message's header names one, written at the
    PUBREL."""
    publisher = paho(server, "pub", clean=False, expiry=300)
    publisher.publish(LONG_TOPIC, b"v1", 2, retain=retain, properties=_long_properties())
    side = server.root / SIDE_DIR
    kept = sorted(os.listdir(side)) if side.exists() else []
    assert kept == sorted(referenced(str(server.root)))
    assert len(kept) == (1 if retain else 0)


def test_boxmq_retained_shows_a_retained_message_s_long_properties(
    server: RunningServer,
) -> None:
    """`boxmq retained` lists what a later subscriber would be sent: on a topic whose name
    has no room for them, its properties come from the side file its header names, as the
    subscriber's do."""
    publisher = paho(server, "pub")
    publisher.publish(LONG_TOPIC, b"v1", 2, retain=True, properties=_long_properties())
    later = paho(server, "later")  # the retained message is in place: a subscriber gets it
    later.subscribe("cfg/#", 2)
    assert later.next().payload == b"v1"
    listed = subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "--data", str(server.root), "--json", "retained"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [row] = json.loads(listed.stdout)
    assert (row["topic"], row["bytes"], row["qos"], row["expires-in"]) == (LONG_TOPIC, 2, 2, None)
    assert row["reply-to"] == RESPONSE_TOPIC
    assert row["correlation-id"] == CORRELATION.decode()  # as `get --json` shows it
    assert {name: row["properties"][name] for name, _ in USER} == dict(USER)
