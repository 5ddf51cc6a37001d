"""A retained message whose name has no room for its v5 properties' side file key names the
file in its header (store/retained.py, PROPERTIES_SIDE_FILE): the collection keeps the file
while the message is in place, and takes it once the message is replaced or deleted, or
when a kill left the file with no message naming it."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import pytest
from tests.crashes import Killed, kill_at
from tests.integration.mqtt.clients import boxmq_cli_ok

import boxmq
from boxmq.client.assured import AssuredMessage
from boxmq.model import PUBLISHED_RETAINED
from boxmq.mqtt.packets import Publish
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.stored import side_file_of
from boxmq.store.side_files import GRACE, NAMED_AS, key_of, referenced

TOPIC = "t/a-topic-of-sixty-bytes-that-leaves-a-name-no-room-for-a-key"
PROPERTIES = Properties.build(
    content_type="text/plain",
    response_topic="t/back",
    correlation_data=b"cd",
    user_properties=[("k", "v")],
)


def _retain(
    box: boxmq.Box, body: bytes, properties: Properties = PROPERTIES, *, superseded: bool = False
) -> str | None:
    """What the MQTT door does for a retained PUBLISH whose topic leaves its name no room
    for the key (mqtt/publishing.py `_write`, its last try): the publish writes the side
    file, then the message whose header names it; the header's field that names it."""
    packet = Publish(TOPIC, body, 1, True, packet_id=1, properties=properties)
    side_file = side_file_of(packet, {})
    box.topics.publish(
        TOPIC,
        body,
        retain=True,
        reserved=True,
        side_file=side_file,
        superseded=superseded,
        qos=1,
    )
    return None if side_file is None else NAMED_AS + key_of(side_file)


def _side_files(box: boxmq.Box) -> list[str]:
    try:
        return sorted(os.listdir(box.side_files.path))
    except FileNotFoundError:
        return []


def test_the_header_keeps_the_side_file_until_the_message_is_replaced_or_deleted(
    root: Path,
) -> None:
    clock = boxmq.ManualClock(time.time())  # ages are measured against the files' mtimes
    with boxmq.open(root, fsync="never", clock=clock) as box:
        named = _retain(box, b"first")
        assert named is not None
        assert named.startswith("bx_v5hS=")
        key = named.removeprefix("bx_v5hS=")
        assert box.side_files.get(key) == PROPERTIES.raw
        assert referenced(str(root)) == {key}
        [(envelope, body)] = box.topics.retained_reading(TOPIC)
        assert (envelope.property_value("bx_v5h"), body) == (key, b"first")
        # `retained` as every reader of the file: it named no key, and its readers (a
        # test's, a script's) saw the message without the properties a subscriber gets
        assert box.topics.retained(TOPIC) == (envelope, b"first")
        clock.advance(GRACE + 1)
        assert box.side_files.collect(lambda: referenced(str(root)), now=clock.now()) == 0
        assert _side_files(box) == [key]

        other = Properties.build(content_type="text/other")
        replaced = _retain(box, b"second", other)
        assert replaced is not None
        assert replaced != named
        assert referenced(str(root)) == {replaced.removeprefix("bx_v5hS=")}
        clock.advance(GRACE + 1)
        assert box.side_files.collect(lambda: referenced(str(root)), now=clock.now()) == 1
        assert _side_files(box) == [replaced.removeprefix("bx_v5hS=")]

        box.topics.publish(TOPIC, b"", retain=True, qos=1)  # a delete
        assert box.topics.retained(TOPIC) is None
        assert referenced(str(root)) == set()
        clock.advance(GRACE + 1)
        assert box.side_files.collect(lambda: referenced(str(root)), now=clock.now()) == 1
        assert _side_files(box) == []


@pytest.mark.parametrize("step", range(1, 9))
def test_a_kill_leaves_a_named_side_file_or_one_the_collection_removes(
    root: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    clock = boxmq.ManualClock(time.time())
    box = boxmq.open(root, fsync="never", clock=clock)
    with monkeypatch.context() as dying:
        kill_at(dying, step)
        with contextlib.suppress(Killed):
            _retain(box, b"body")
    box.close()
    with boxmq.open(root, fsync="never", clock=clock) as restarted:
        found = list(restarted.topics.retained_reading(TOPIC))
        if found:  # in place: its header names a side file that is there, whole
            [(envelope, body)] = found
            key = envelope.property_value("bx_v5h")
            assert isinstance(key, str), f"killed at change {step}"
            assert restarted.side_files.get(key) == PROPERTIES.raw, f"killed at change {step}"
            assert body == b"body"
        clock.advance(GRACE + 1)
        restarted.sweep(full=True)  # the temporaries a kill left, and the side files
        named = referenced(str(root))
        assert _side_files(restarted) == sorted(named), f"killed at change {step}"


def test_an_api_subscriber_in_memory_gets_the_properties_its_header_names(root: Path) -> None:
    """As the MQTT door's subscribers sent it from its file do, and as its live messages
    come: `box.subscribe(durable=False)` reads the side file the header names."""
    with boxmq.open(root, fsync="never") as box:
        _retain(box, b"body")
        with box.subscribe(TOPIC, "api", durable=False) as subscriber:
            message = subscriber.receive(timeout=5)
            assert message is not None
            assert (message.body, message.retained) == (b"body", True)
            assert message.properties == {
                "k": "v",
                "mqtt.content-type": "text/plain",
                "mqtt.response-topic": "t/back",
                "mqtt.correlation-data": "Y2Q=",
            }
            assert (message.reply_to, message.correlation_id) == ("t/back", "cd")


def test_a_delete_or_a_superseded_message_writes_no_side_file_for_a_header(root: Path) -> None:
    """An empty retained PUBLISH deletes the topic's retained message and makes no header,
    and one that came before the retained message in place (`superseded`) replaces nothing:
    a side file written for either would be named by nothing, left for the hourly
    collection."""
    with boxmq.open(root, fsync="never") as box:
        _retain(box, b"")
        _retain(box, b"older", superseded=True)
        assert box.topics.retained(TOPIC) is None
        assert _side_files(box) == []


@pytest.mark.parametrize("restarted", [False, True], ids=["held", "restarted"])
def test_an_exactly_once_retained_message_names_its_side_file_at_its_deliver(
    root: Path, restarted: bool
) -> None:
    """A persistent MQTT session's retained QoS 2 message waits in the exactly-once intake
    for its PUBREL, its name there with no room for the key: its side file is written at its
    `deliver`, which names it in the retained file's header (before, it went without). A
    restart in between leaves only its name on disk: it goes without them, as its copies."""
    raw = PROPERTIES.raw
    retained = {PUBLISHED_RETAINED: True}  # as the MQTT door's: boxmq's own bx_rp
    message = AssuredMessage(
        "mqtt:pub", "1", b"body", topic=TOPIC, properties=retained, side_file=raw
    )
    box = boxmq.open(root, fsync="never")
    assert box.intake.assured_one(message, reserved=True)
    assert _side_files(box) == []  # not yet: named by nothing until the deliver
    if restarted:
        box.close()
        box = boxmq.open(root, fsync="never")
    with box:
        assert box.intake.deliver("mqtt:pub", "1", remember=False)
        [(envelope, body)] = box.topics.retained_reading(TOPIC)
        assert body == b"body"
        if restarted:
            assert envelope.property_value("bx_v5h") is None
            assert _side_files(box) == []
        else:
            assert envelope.property_value("bx_v5h") == key_of(raw)
            assert box.side_files.get(key_of(raw)) == raw
            assert referenced(str(root)) == {key_of(raw)}


def _cli_json(root: Path, *args: str) -> object:
    return json.loads(boxmq_cli_ok(root, "--json", *args))


def test_the_cli_shows_a_subscriptions_copy_which_has_no_room_for_them(root: Path) -> None:
    """docs/cli.md: `peek` and `get` show the copy a durable subscription got, written into
    its dropbox with the retained message's name, which has no room for the key; the file
    in `.retained/` keeps naming the side file."""
    with boxmq.open(root, fsync="never") as box:
        named = _retain(box, b"body")
        box.subscribe(TOPIC, "s").close()  # gets the retained message's copy
    peeked = _cli_json(root, "peek", TOPIC, "--subscriber", "s")
    assert isinstance(peeked, list)
    assert [each["properties"] for each in peeked] == [{}]
    got = _cli_json(root, "get", TOPIC, "--subscriber", "s")
    assert isinstance(got, dict)
    assert (got["body"], got["properties"], got["reply-to"]) == ("body", {}, None)
    with boxmq.open(root, fsync="never") as box:
        [(envelope, _)] = box.topics.retained_reading(TOPIC)
        assert named == NAMED_AS + str(envelope.property_value("bx_v5h"))


@pytest.mark.parametrize("step", range(1, 12))
def test_a_kill_in_an_exactly_once_deliver_leaves_a_named_side_file_or_none(
    root: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    """The deliver writes the side file, then the retained message whose header names it: a
    kill at any step, and the restart that finishes the deliver from its marker (without the
    side file's bytes, which were in memory), leave the message whole, with the properties
    or without, and no side file the collection keeps that nothing names."""
    clock = boxmq.ManualClock(time.time())
    retained = {PUBLISHED_RETAINED: True}
    message = AssuredMessage(
        "mqtt:pub", "1", b"body", topic=TOPIC, properties=retained, side_file=PROPERTIES.raw
    )
    box = boxmq.open(root, fsync="never", clock=clock)
    assert box.intake.assured_one(message, reserved=True)
    with monkeypatch.context() as dying:
        kill_at(dying, step)
        with contextlib.suppress(Killed):
            box.intake.deliver("mqtt:pub", "1", remember=False)
    box.close()
    with boxmq.open(root, fsync="never", clock=clock) as restarted:
        restarted.intake.deliver("mqtt:pub", "1", remember=False)  # done already, or now
        [(envelope, body)] = restarted.topics.retained_reading(TOPIC)
        assert body == b"body", f"killed at change {step}"
        key = envelope.property_value("bx_v5h")
        if key is not None:
            assert restarted.side_files.get(str(key)) == PROPERTIES.raw, f"killed at {step}"
        clock.advance(GRACE + 1)
        restarted.sweep(full=True)
        restarted.side_files.collect(lambda: referenced(str(root)), now=clock.now())
        assert _side_files(restarted) == sorted(referenced(str(root))), f"killed at {step}"
