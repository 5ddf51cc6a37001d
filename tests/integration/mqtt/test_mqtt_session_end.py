"""A session that ends takes its QoS 2 exchanges with it (MQTT 5.0 §3.1.2.4, §4.3.3): the
messages a client got PUBREC for and never released leave the exactly-once intake at once,
whether the session ends by a clean start, by its expiry, or by an expiry found at a restart,
rather than after the intake's pending_ttl; and the client's packet ids name new messages."""

from __future__ import annotations

import time
from pathlib import Path

from tests.integration.mqtt.clients import RunningServer, paho, start_server
from tests.integration.mqtt.raw import open_raw, publish_qos2, pubrel, read

from boxmq.mqtt.stored import exactly_once_source
from boxmq.store.topics import incoming_working

PUBREC_7 = (0x50, b"\x00\x07")


def _unreleased(running: RunningServer) -> list[Path]:
    """The QoS 2 messages to topics that wait in the intake for their PUBREL."""
    folder = Path(incoming_working(str(running.root)))
    return [path for path in folder.iterdir() if not path.name.startswith(".")]


def _unreleased_within(running: RunningServer, seconds: float) -> list[Path]:
    """`_unreleased` once it is empty, or after `seconds` (a timer ends the session)."""
    deadline = time.monotonic() + seconds
    while (left := _unreleased(running)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


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
    second = start_server(tmp_path / "root")
    try:
        assert _unreleased_within(second, 5.0) == []
    finally:
        second.shutdown()
