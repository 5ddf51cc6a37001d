"""A session that ends takes its QoS 2 exchanges with it (MQTT 5.0 §3.1.2.4, §4.3.3): the
messages a client got PUBREC for and never released leave the exactly-once intake at once,
whether the session ends by a clean start, by its expiry, or by an expiry found at a restart,
rather than after the intake's pending_ttl; and the client's packet ids name new messages."""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration.mqtt.clients import RunningServer, paho, start_server
from tests.integration.mqtt.raw import (
    connect_packet_311,
    open_raw,
    packet,
    publish_qos2,
    pubrel,
    read,
    string,
)
from tests.waiting import logged, waited

from boxmq.mqtt.session_record import read_record, records_folder
from boxmq.mqtt.stored import consumer_name, exactly_once_source
from boxmq.store.topics import incoming_working, subscription_path

PUBREC_7 = (0x50, b"\x00\x07")


def _unreleased(running: RunningServer) -> list[Path]:
    """The QoS 2 messages to topics that wait in the intake for their PUBREL."""
    folder = Path(incoming_working(str(running.root)))
    return [path for path in folder.iterdir() if not path.name.startswith(".")]


def _unreleased_within(running: RunningServer, seconds: float) -> list[Path]:
    """`_unreleased` once it is empty, or after `seconds` (a timer ends the session)."""
    waited(lambda: not _unreleased(running), within=seconds)
    return _unreleased(running)


def _leave_unreleased(running: RunningServer, client_id: str, *, expiry: int = 300) -> None:
    """A persistent session's QoS 2 PUBLISH answered with PUBREC, then the connection drops
    before its PUBREL."""
    sock, _ = open_raw(running, client_id, expiry=expiry)
    with sock:
        sock.sendall(publish_qos2("t/q", 7, b"first"))
        assert read(sock) == PUBREC_7
    assert len(_unreleased(running)) == 1


def test_a_clean_start_discards_the_qos2_messages_awaiting_pubrel(server: RunningServer) -> None:
    member = paho(server, "member")
    member.subscribe("$share/g/t/#", qos=2)  # a durable route: QoS 2 goes through the intake
    try:
        _leave_unreleased(server, "pub")
        sock, present = open_raw(server, "pub", clean=True)
        with sock:
            assert not present
            assert _unreleased(server) == []
            assert server.box.pending(exactly_once_source("pub")) == []
            sock.sendall(publish_qos2("t/q", 7, b"second"))  # the same packet id: a new message
            assert read(sock) == PUBREC_7
            sock.sendall(pubrel(7))
            assert read(sock) == (0x70, b"\x00\x07")  # PUBCOMP
        assert member.next().payload == b"second"
        assert member.nothing(within=0.5)
    finally:
        member.stop()


@pytest.mark.parametrize("expiry", [300, 0], ids=["persistent", "not-persistent"])
def test_a_pubrel_of_an_exchange_a_clean_start_ended_is_told_its_packet_id_is_unknown(
    server: RunningServer, expiry: int
) -> None:
    """MQTT 5.0 §3.7.2.1: a PUBREL for an exchange the session no longer holds is answered
    PUBCOMP 0x92, Packet Identifier not found; the message it would have released was
    discarded with the old session and goes nowhere. A new session persistent or not."""
    member = paho(server, "member")
    member.subscribe("$share/g/t/#", qos=2)  # a durable route: QoS 2 goes through the intake
    try:
        _leave_unreleased(server, "pub")
        sock, present = open_raw(server, "pub", clean=True, expiry=expiry)
        with sock:
            assert not present
            sock.sendall(pubrel(7))
            assert read(sock) == (0x70, b"\x00\x07\x92")  # PUBCOMP 0x92
        assert member.nothing(within=0.5)
    finally:
        member.stop()


def test_a_pubrel_of_an_exchange_a_clean_session_ended_is_answered_pubcomp_in_v311(
    server: RunningServer,
) -> None:
    """MQTT 3.1.1 §4.3.3: PUBREL is answered PUBCOMP, which has no reason code, whether the
    session knows the packet id or not; the message a clean session discarded goes nowhere."""
    member = paho(server, "member")
    member.subscribe("$share/g/t/#", qos=2)
    try:
        with _connect_v311(server, "pub311", clean=False) as sock:
            sock.sendall(packet(0x34, string("t/q") + b"\x00\x07" + b"first"))  # QoS 2
            assert read(sock) == PUBREC_7
        with _connect_v311(server, "pub311", clean=True) as sock:
            sock.sendall(pubrel(7))
            assert read(sock) == (0x70, b"\x00\x07")  # PUBCOMP
        assert member.nothing(within=0.5)
    finally:
        member.stop()


def _connect_v311(server: RunningServer, client_id: str, *, clean: bool) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=5)
    sock.sendall(connect_packet_311(client_id, clean=clean))
    assert read(sock) == (0x20, b"\x00\x00")  # CONNACK, no session present
    return sock


def test_a_session_that_expires_discards_its_qos2_messages_awaiting_pubrel(
    server: RunningServer,
) -> None:
    _leave_unreleased(server, "brief", expiry=1)
    assert _unreleased_within(server, 5.0) == []
    assert server.box.pending(exactly_once_source("brief")) == []


def test_a_session_expired_during_a_restart_discards_its_qos2_messages(tmp_path: Path) -> None:
    first = start_server(tmp_path / "root")
    try:
        _leave_unreleased(first, "away", expiry=1)
    finally:
        first.shutdown()  # before the expiry: the first server's timer dies with it
    time.sleep(1.2)
    with start_server(tmp_path / "root") as second:
        assert _unreleased_within(second, 5.0) == []


def _refuse_unlink(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """The file system refuses to delete `path` (EIO), and nothing else."""
    unlink = os.unlink

    def failing(target: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(target) == path:
            raise OSError(errno.EIO, "Input/output error", path)
        unlink(target, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", failing)


def _subscribed(running: RunningServer, client_id: str) -> list[str]:
    return sorted(text for text, _ in running.box.topics.subscribed(consumer_name(client_id)))


def test_a_subscription_the_disk_will_not_delete_leaves_the_rest_of_an_expiry_done(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="boxmq.mqtt")
    client = paho(server, "brief", clean=False, expiry=1)
    client.subscribe("a/#", qos=1)
    client.subscribe("b/#", qos=1)
    stuck = subscription_path(str(server.root), "a/#", "client.brief")
    _refuse_unlink(monkeypatch, os.path.join(stuck, ".subscription"))
    client.stop()
    waited(lambda: read_record(str(server.root), "brief") is None, within=5.0)
    assert read_record(str(server.root), "brief") is None  # the session's end went on
    assert _subscribed(server, "brief") == ["a/#"]  # only what the disk refused is left
    [line] = logged(caplog, "client brief: its session ended, but deleting its subscription")
    assert "to a/# failed" in line
    assert "EIO" in line


def test_a_session_record_the_disk_will_not_delete_does_not_keep_a_clean_start_waiting(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="boxmq.mqtt")
    client = paho(server, "again", clean=False, expiry=300)
    client.subscribe("a/#", qos=1)
    client.stop()
    _refuse_unlink(monkeypatch, os.path.join(records_folder(str(server.root)), "again"))
    back = paho(server, "again", clean=True)  # its CONNACK comes, with no session present
    try:
        assert not back.session_present
        assert _subscribed(server, "again") == []  # the old session's end went on
        lines = logged(caplog, "client again: its session ended, but deleting its session")
        assert lines
        assert all("EIO" in line for line in lines)
    finally:
        back.stop()
