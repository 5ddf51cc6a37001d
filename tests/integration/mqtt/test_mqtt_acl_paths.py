"""The ACL and the limits on each way a message goes in or out of a real server, alike: a
message that a check stops on one path must not get past it on another (a resumed session's
waiting messages after the ACL changed, a QoS 2 message held in memory for its PUBREL)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import paho, start_server
from tests.integration.mqtt.raw import open_raw, publish_qos2, pubrel, read
from tests.waiting import logged, until

from boxmq.core import ExactlyOnceLimits
from boxmq.mqtt.acl import Acl
from boxmq.mqtt.settings import MqttSettings

BEFORE = "user alice\ntopic readwrite alice/#\n"
AFTER = "user alice\ntopic readwrite alice/#\ntopic deny alice/secret/#\n"


def _acl(tmp_path: Path, text: str) -> MqttSettings:
    path = tmp_path / "acl"
    path.write_text(text)
    return MqttSettings(authorizer=Acl.load(path))


def test_a_resumed_session_gets_none_of_what_waited_for_a_filter_the_acl_no_longer_allows(
    tmp_path: Path,
) -> None:
    """alice's persistent session subscribed to alice/secret/# and left; messages for it
    waited on disk. The server restarts with an ACL that denies alice/secret/#: at her return
    the subscription is removed, and none of what waited for it reaches her, while what
    waited for a filter still allowed does."""
    root = tmp_path / "root"
    with start_server(root, _acl(tmp_path, BEFORE)) as running:
        alice = paho(running, "alice-1", username="alice", clean=False, expiry=300)
        assert alice.subscribe("alice/secret/#", qos=1)[0].value == 1
        assert alice.subscribe("alice/notes/#", qos=1)[0].value == 1
        alice.stop()
        writer = paho(running, "alice-2", username="alice")
        writer.publish("alice/secret/plan", b"hidden", qos=1)
        writer.publish("alice/notes/a", b"allowed", qos=1)
        writer.stop()
    with start_server(root, _acl(tmp_path, AFTER)) as running:
        alice = paho(running, "alice-1", username="alice", clean=False, expiry=300)
        try:
            got = alice.next()
            assert (got.topic, got.payload) == ("alice/notes/a", b"allowed")
            assert alice.nothing(within=1.0)
        finally:
            alice.stop()


def test_trusted_sources_bound_a_qos2_message_held_in_memory_as_they_bound_the_intake(
    tmp_path: Path,
) -> None:
    """`trusted_sources` lets only the sources it lists send exactly once. A persistent
    publisher's QoS 2 message goes to the intake, which refuses an untrusted one (PUBREC
    0x87); a clean publisher's, for subscribers served from memory, is held for its PUBREL,
    which did not ask: the same client id sent exactly once by starting clean. Both now get
    0x87 naming the client, and the subscriber nothing; a listed client is taken either way."""
    limits = ExactlyOnceLimits(trusted_sources=frozenset({"mqtt:good"}))
    with start_server(tmp_path / "root", exactly_once=limits) as running:
        reader = paho(running, "reader")
        reader.subscribe("eo/#", qos=2)
        try:
            for clean, expiry in ((False, 300), (True, 0)):
                bad, _ = open_raw(running, "bad", clean=clean, expiry=expiry)
                with bad:
                    bad.sendall(publish_qos2("eo/bad", 1, b"not trusted"))
                    kind, body = read(bad)
                    assert (kind, body[:3]) == (0x50, b"\x00\x01\x87"), (clean, body)
                    assert b"client bad may not send messages exactly once" in body
                assert reader.nothing(within=0.5), clean
                good, _ = open_raw(running, "good", clean=clean, expiry=expiry)
                with good:
                    good.sendall(publish_qos2("eo/good", 1, b"trusted"))
                    assert read(good) == (0x50, b"\x00\x01")
                    good.sendall(pubrel(1))
                    assert read(good) == (0x70, b"\x00\x01")  # PUBCOMP
                assert reader.next().payload == b"trusted"
        finally:
            reader.stop()


def test_a_client_refused_in_a_reconnect_loop_is_told_as_its_connections_are(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A script that connects, publishes to a topic the ACL denies (and subscribes to a
    filter it denies), and goes, again and again: its connections are told for the first 3
    of a run and then counted, but each connection's first refusal was told at INFO, one
    line a run however the connections were summarised. Its refusals now go as its
    connection lines do: the first 3 connections' told, the rest's at debug level."""
    (tmp_path / "acl").write_text("pattern readwrite %c/#\n")
    settings = MqttSettings(authorizer=Acl.load(tmp_path / "acl"))
    with (
        caplog.at_level(logging.DEBUG, "boxmq.mqtt"),
        start_server(tmp_path / "root", settings) as running,
    ):
        for _ in range(12):
            client = paho(running, "dev-1")
            try:
                assert client.subscribe("other/#", qos=1)[0].value == 0x87
                client.client.publish("other/x", b"x", 1).wait_for_publish(timeout=10)
            finally:
                client.stop()
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len([m for m in told if "may not publish to other/x" in m]) == 3, told
    assert len([m for m in told if "may not subscribe to other/#" in m]) == 3, told
    quiet = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len([m for m in quiet if "may not publish to other/x" in m]) == 9, quiet


def test_wills_refused_in_a_reconnect_loop_are_told_as_its_connections_are(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A device that connects with a Will to a topic the ACL denies and loses its connection,
    again and again: its connections were counted past the first 3, but each Will refused
    was told at INFO, a line a connection. Now told as its connection lines are."""
    (tmp_path / "acl").write_text("pattern readwrite %c/#\n")
    settings = MqttSettings(authorizer=Acl.load(tmp_path / "acl"))
    with (
        caplog.at_level(logging.DEBUG, "boxmq.mqtt"),
        start_server(tmp_path / "root", settings) as running,
    ):
        for _ in range(12):
            sock, _ = open_raw(running, "dev-1", clean=True, expiry=0, will=("other/w", b"gone"))
            sock.close()  # no DISCONNECT: its Will is due
        until(
            lambda: len(logged(caplog, "its will to other/w")) >= 12, "not every Will was refused"
        )
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len([m for m in told if "may not publish its will to other/w" in m]) == 3, told
