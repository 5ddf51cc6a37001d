"""Files a script drops straight into a subscription's dropbox, with no topic in their names
(DropboxMQ's minimum `4.someid.T`): MQTT cannot send a PUBLISH without a topic name (MQTT 5.0
§3.3.2.1), so such a message goes out on the subscription's filter when that is a topic name,
and to error/ (logged, never lost) when the filter has wildcards."""

from __future__ import annotations

import logging
import os

import pytest
from tests.integration.mqtt.clients import RunningServer, keeper_target, paho, put_file
from tests.waiting import waited


def test_a_file_without_a_topic_goes_out_on_a_filter_that_is_a_topic_name(
    server: RunningServer,
) -> None:
    keeper, target = keeper_target(server, "sensors/kitchen")
    put_file(target, "4.dropped-1.T", b"from a script")
    received = keeper.next()
    assert (received.topic, received.payload, received.qos) == (
        "sensors/kitchen",
        b"from a script",
        1,
    )
    assert keeper.disconnects.empty()
    keeper.stop()


def test_a_file_without_a_topic_in_a_wildcard_share_group_goes_to_error(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    member = paho(server, "member")
    member.subscribe("$share/g/sensors/#", 1)
    group = next(server.root.glob("topic-root/*/.subscriptions/*g*"))
    with caplog.at_level(logging.WARNING, logger="boxmq"):
        put_file(group / "target", "4.dropped-2.T", b"nowhere to go")
        waited(lambda: list((group / "error").glob("4.dropped-2.*")), every=0.02)
    assert [p.read_bytes() for p in (group / "error").glob("4.dropped-2.*")] == [b"nowhere to go"]
    assert any("dropped-2" in r.getMessage() and "topic" in r.getMessage() for r in caplog.records)
    # The member is still connected and gets what comes next.
    member.publish("sensors/hall", b"next", 1)
    received = member.next()
    assert (received.topic, received.payload) == ("sensors/hall", b"next")
    assert member.disconnects.empty()
    member.stop()


def test_a_directory_or_a_pipe_in_a_subscription_dropbox_goes_to_error_and_serving_goes_on(
    server: RunningServer,
) -> None:
    """They were claimed and read as messages: the directory stopped the MQTT service for
    every client, the pipe froze the event loop."""
    keeper, target = keeper_target(server, "sensors/kitchen")
    (target / "9.folder.T").mkdir()
    os.mkfifo(target / "9.pipe.T")
    put_file(target, "4.dropped-3.T", b"after them")
    received = keeper.next()
    assert (received.topic, received.payload) == ("sensors/kitchen", b"after them")
    errors = target.parent / "error"
    waited(lambda: len(os.listdir(errors)) >= 2, every=0.02)
    assert sorted(os.listdir(errors)) == ["9.folder.T", "9.pipe.T"]
    keeper.publish("sensors/kitchen", b"next", 1)
    assert keeper.next().payload == b"next"
    assert keeper.disconnects.empty()
    keeper.stop()


def test_a_far_future_expiration_goes_out_as_the_longest_interval_mqtt_has(
    server: RunningServer,
) -> None:
    keeper, target = keeper_target(server, "x/#")
    # Java's Long.MAX_VALUE ms: years past what a Message Expiry Interval (4 bytes) can say.
    put_file(target, "4.far.T.9223372036854775807....bx_topicS=x%2Ffar", b"far off")
    received = keeper.next()
    assert (received.topic, received.payload) == ("x/far", b"far off")
    assert received.properties.MessageExpiryInterval == 2**32 - 1
    keeper.publish("x/next", b"next", 1)  # the door is still up
    assert keeper.next().payload == b"next"
    assert keeper.disconnects.empty()
    keeper.stop()


@pytest.mark.parametrize(
    "topic",
    ["x%2F%FFbad", "x%2F%00nul", "x%2F%23"],
    ids=["not-utf8", "nul", "wildcard"],
)
def test_a_file_whose_topic_no_publish_can_carry_goes_to_error(
    server: RunningServer, caplog: pytest.LogCaptureFixture, topic: str
) -> None:
    keeper, target = keeper_target(server, "x/#")
    with caplog.at_level(logging.WARNING, logger="boxmq"):
        put_file(target, f"4.bad.T.....bx_topicS={topic}", b"cannot go")
        error = target.parent / "error"
        waited(lambda: list(error.glob("4.bad.*")), every=0.02)
    assert [p.read_bytes() for p in error.glob("4.bad.*")] == [b"cannot go"]
    assert any("bad" in r.getMessage() and "topic" in r.getMessage() for r in caplog.records)
    keeper.publish("x/next", b"next", 1)
    assert keeper.next().payload == b"next"
    assert keeper.disconnects.empty()
    keeper.stop()


def test_a_file_whose_qos_is_no_qos_goes_out_at_qos_1(server: RunningServer) -> None:
    keeper, target = keeper_target(server, "x/#")
    put_file(target, "4.q.T.....bx_topicS=x%2Fq&bx_qosY=-1", b"odd qos")
    received = keeper.next()
    assert (received.topic, received.payload, received.qos) == ("x/q", b"odd qos", 1)
    keeper.stop()


def test_a_file_too_large_for_any_mqtt_packet_goes_to_error_and_serving_goes_on(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A PUBLISH's Remaining Length is at most 268,435,455 bytes (MQTT 5.0 §1.5.5): a larger
    file in a dropbox cannot be encoded, and the error stopped the MQTT service for every
    client. It goes to error/, logged, and the others are still served."""
    keeper, target = keeper_target(server, "sensors/kitchen")
    watcher = paho(server, "watcher")
    watcher.subscribe("sensors/#", 1)
    working = target.parent / "working"
    working.mkdir(exist_ok=True)
    with open(working / "4.huge.T", "wb") as huge:
        huge.truncate(300 * 1024 * 1024)  # sparse: no disk, but 300 MB to read
    errors = target.parent / "error"
    with caplog.at_level(logging.WARNING, logger="boxmq"):
        os.rename(working / "4.huge.T", target / "4.huge.T")
        waited(lambda: list(errors.glob("4.huge.*")))
    assert [path.stat().st_size for path in errors.glob("4.huge.*")] == [300 * 1024 * 1024]
    assert any("huge" in r.getMessage() and "encoded" in r.getMessage() for r in caplog.records)
    keeper.publish("sensors/kitchen", b"next", 1)
    assert keeper.next().payload == b"next"
    assert watcher.next().payload == b"next"
    assert keeper.disconnects.empty()
    keeper.stop()
    watcher.stop()
