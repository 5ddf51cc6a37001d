"""A QoS 2 message a subscriber acknowledged with PUBREC is its own (MQTT 5.0 §4.3.3): the broker
never sends it again, to that subscriber or to another member of its share group, whatever
becomes of the session; only the PUBREL goes again, after a restart too (§4.4)."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
from harness.ports import free_port
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    paho,
    recorded_away,
    serve_process,
    start_server,
    stop_process,
)
from tests.integration.mqtt.raw import (
    open_raw,
    pubcomp,
    publish_fields,
    publish_qos2,
    pubrec,
    pubrel,
    read,
    subscribe,
)

SUBACK, PUBLISH, PUBREL = 0x90, 0x30, 0x62


def _subscribed(sock: socket.socket, filter: str) -> None:
    sock.sendall(subscribe(1, filter, 2))
    kind, body = read(sock)
    assert (kind, body[-1]) == (SUBACK, 2)


def _take_with_pubrec(
    sock: socket.socket, publishes: int, pubrels: int, within: float = 0.5
) -> dict[bytes, int]:
    """Each PUBLISH, answered with PUBREC: {payload: packet id}. PUBRELs are read and left
    unanswered. The first `publishes` PUBLISHes and `pubrels` PUBRELs are waited for as long as
    a loaded machine takes; then the rest, until `within` seconds pass without a packet."""
    taken: dict[bytes, int] = {}
    released = 0
    while True:
        expected = len(taken) < publishes or released < pubrels
        sock.settimeout(WAIT if expected else within)
        try:
            kind, body = read(sock)
        except TimeoutError:
            assert not expected, f"{len(taken)} PUBLISHes, {released} PUBRELs in {WAIT} s"
            return taken
        if kind & 0xF0 == PUBLISH:
            payload, packet_id = publish_fields(body)
            taken[payload] = packet_id
            sock.sendall(pubrec(packet_id))
        elif kind == PUBREL:
            released += 1


def test_a_share_group_member_that_leaves_after_pubrec_keeps_what_it_acknowledged(
    server: RunningServer,
) -> None:
    member, _ = open_raw(server, "pubrec-member", clean=True, expiry=0)
    _subscribed(member, "$share/g/exact/#")
    other = paho(server, "other-member")
    other.subscribe("$share/g/exact/#", 2)
    publisher = paho(server, "publisher")
    sent = [str(n).encode() for n in range(8)]
    for payload in sent:
        publisher.publish("exact/t", payload, 2)
    taken = _take_with_pubrec(member, publishes=1, pubrels=0)
    assert taken, "the round robin gave the member none"
    member.close()  # before any PUBCOMP: its session ends with the connection
    rest: list[bytes] = []
    while len(taken) + len(rest) < len(sent):
        rest.append(other.next().payload)
    assert other.nothing(within=1.0)  # and nothing of what the member had
    assert sorted([*taken, *rest]) == sorted(sent)


def _released_again(back: socket.socket, packet_id: int) -> None:
    """A resumed session is sent the PUBREL it had, completes it, and is never sent the
    message again."""
    assert read(back) == (PUBREL, packet_id.to_bytes(2, "big"))
    back.sendall(pubcomp(packet_id))
    back.settimeout(1.0)
    with pytest.raises(TimeoutError):
        read(back)


@pytest.mark.parametrize("away", [True, False], ids=["away", "connected"])
def test_a_pubrel_is_sent_again_after_a_restart_and_its_message_never(
    tmp_path: Path, away: bool
) -> None:
    root = tmp_path / "root"
    first = start_server(root)
    try:
        subscriber, _ = open_raw(first, "releasing")
        _subscribed(subscriber, "exact/restart")
        paho(first, "publisher").publish("exact/restart", b"once", 2)
        taken = _take_with_pubrec(subscriber, 1, pubrels=1)  # the PUBREL read and not answered
        assert list(taken) == [b"once"]
        if away:
            subscriber.close()
            recorded_away(root, "releasing")  # before the shutdown
    finally:
        first.shutdown()  # SIGTERM's path: a connected session's record is written too
    subscriber.close()
    second = start_server(root)
    back, present = open_raw(second, "releasing")
    try:
        assert present
        _released_again(back, taken[b"once"])
        paho(second, "publisher").publish("exact/restart", b"next", 2)
        assert list(_take_with_pubrec(back, 1, pubrels=0)) == [b"next"]
    finally:
        back.close()
        second.shutdown()


def test_a_pubrel_is_sent_again_after_the_broker_was_killed(tmp_path: Path) -> None:
    root, port = tmp_path / "root", free_port()
    address = RunningServer(root, None, "127.0.0.1", port, None, None, None, None)  # type: ignore[arg-type]
    server = serve_process(root, port)
    try:
        subscriber, _ = open_raw(address, "killed-releasing")
        _subscribed(subscriber, "exact/killed")
        paho(address, "publisher").publish("exact/killed", b"once", 2)
        taken = _take_with_pubrec(subscriber, 1, pubrels=1)  # PUBREL read, no PUBCOMP
        assert list(taken) == [b"once"]
    finally:
        server.send_signal(signal.SIGKILL)  # while the subscriber is connected
        server.wait(timeout=20)
    subscriber.close()
    server = serve_process(root, port)
    back, present = open_raw(address, "killed-releasing")
    try:
        assert present
        _released_again(back, taken[b"once"])
    finally:
        back.close()
        stop_process(server)


@pytest.mark.parametrize("end", [b"\xe0\x00", b""], ids=["disconnect", "socket-closed"])
def test_a_pubrel_sent_just_before_the_client_leaves_still_delivers_its_message(
    server: RunningServer, end: bytes
) -> None:
    """A clean-session publisher sends PUBREL and leaves without waiting for PUBCOMP: the
    server read the PUBREL, so the message goes to the share group (its intake on disk). It
    was lost: the session's end discarded what awaited PUBREL before the PUBREL's disk work."""
    member = paho(server, "member")
    member.subscribe("$share/g/jobs/#", 2)
    publisher, _ = open_raw(server, "publisher", clean=True, expiry=0)
    publisher.sendall(publish_qos2("jobs/1", 1, b"released"))
    kind, body = read(publisher)
    assert (kind, body[:2]) == (0x50, b"\x00\x01")  # PUBREC
    publisher.sendall(pubrel(1) + end)  # one write: the server reads both together
    publisher.close()
    assert member.next().payload == b"released"
    assert member.nothing(within=0.5)
    member.stop()
