"""What a persistent session had been sent and had not acknowledged when the server stopped
(SIGTERM) or died (SIGKILL) stays its own: its locks name no process, and its resumed session
takes them back. They went back to the dropbox at the restart: a share group gave them to
another member, a QoS 2 one included (MQTT-4.8.2-4), and each restart counted a delivery, so
a message a device never acknowledged went to error/ after five."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import (
    RunningServer,
    paho,
    paho_properties,
    serve_fresh,
    serve_process,
)
from tests.integration.mqtt.clients import stop_process as stop
from tests.integration.mqtt.raw import (
    Received,
    connect_packet,
    nothing,
    open_raw,
    packet,
    puback,
    pubcomp,
    publish,
    publish_fields,
    publishes,
    pubrec,
    pubrel,
    read,
    string,
    subscribe,
    take_publishes,
)
from tests.waiting import until

from boxmq.mqtt.session_record import read_record

GROUP = "$share/g/k/#"


def _subscribed(
    target: RunningServer, client_id: str, filter: str, qos: int, *, expiry: int = 300
) -> socket.socket:
    """A raw v5 client with a persistent session, subscribed to `filter` (SUBACK read)."""
    sock, _ = open_raw(target, client_id, clean=False, expiry=expiry)
    sock.sendall(subscribe(1, filter, qos))
    assert read(sock)[0] == 0x90
    return sock


def _payloads(sock: socket.socket, within: float) -> list[bytes]:
    return [message.payload for message in publishes(sock, within)]


def _exactly(sock: socket.socket, count: int) -> list[bytes]:
    """The payloads of the next `count` PUBLISHes, waited for as long as a restarted server on a
    loaded machine takes; then half a second in which no other may come."""
    got = [message.payload for message in take_publishes(sock, count)]
    assert _payloads(sock, within=0.5) == []
    return got


def _settle_all(sock: socket.socket, count: int) -> list[bytes]:
    """Take `count` QoS 2 PUBLISHes and complete each (PUBREC, PUBREL, PUBCOMP)."""
    got: list[bytes] = []
    completed = 0
    while completed < count:
        kind, body = read(sock)
        if kind & 0xF0 == 0x30:
            payload, packet_id = publish_fields(body)
            got.append(payload)
            sock.sendall(pubrec(packet_id))
        elif kind & 0xF0 == 0x60:  # PUBREL
            sock.sendall(pubcomp(int.from_bytes(body[:2], "big")))
            completed += 1
    return got


def _held_come_again(target: RunningServer, held: list[Received], *, in_order: bool = True) -> None:
    """The device resumes its session after a restart: the QoS 2 PUBLISHes it `held` come
    again under their packet ids with DUP (in that order, or any), it answers each PUBREC,
    and nothing else comes."""
    device, present = open_raw(target, "device", clean=False, expiry=300)
    assert present
    again = take_publishes(device, len(held))
    expected = [(m.payload, m.packet_id, True) for m in held]
    if in_order:
        assert again == expected
    else:
        assert sorted(again) == sorted(expected)
    for message in again:
        device.sendall(pubrec(message.packet_id))
    assert publishes(device, within=0.5) == []  # answers the PUBRELs; nothing else comes
    device.close()


def _restart(
    server: subprocess.Popen[bytes], how: signal.Signals, target: RunningServer, *args: str
) -> subprocess.Popen[bytes]:
    server.send_signal(how)
    server.wait(timeout=20)
    return serve_process(target.root, target.port, *args)


def _resumed_after_a_restart(
    device: socket.socket,
    server: subprocess.Popen[bytes],
    how: signal.Signals,
    target: RunningServer,
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """`device` closed, once its session's record names what was in flight (a SIGKILL must
    come after the close is written), the server restarted by `how`, and the device's session
    resumed: the new server and connection."""
    device.close()
    until(
        lambda: _sent_in_record(target, "device") > 0,
        "no record of the close names what was in flight",
    )
    server = _restart(server, how, target)
    device, present = open_raw(target, "device", clean=False, expiry=300)
    assert present
    return server, device


def _sent_in_record(target: RunningServer, client_id: str) -> int:
    """The messages in flight that the session record of `client_id` names (0: no record)."""
    record = read_record(str(target.root), client_id)
    return 0 if record is None else len(record.sent)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_share_member_gets_back_what_it_had_after_a_restart_and_nobody_else(
    tmp_path: Path, how: signal.Signals
) -> None:
    target, server = serve_fresh(tmp_path)
    try:
        members = {}
        for name in ("a", "b"):
            members[name] = _subscribed(target, name, GROUP, 2)
        publisher = paho(target, "publisher")
        for n in range(4):
            publisher.publish(f"k/{n}", f"k{n}".encode(), 2)
        publisher.stop()
        held = _exactly(members["a"], 2)  # no PUBREC: in flight
        assert len(_settle_all(members["b"], 2)) == 2
        for sock in members.values():
            sock.close()
        server = _restart(server, how, target)
        b, _ = open_raw(target, "b", clean=False, expiry=300)
        assert _payloads(b, within=1.0) == []  # not b's
        a, present = open_raw(target, "a", clean=False, expiry=300)
        assert present
        assert sorted(_settle_all(a, 2)) == sorted(held)
        a.close()
        b.close()
    finally:
        stop(server)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_share_member_that_unsubscribed_holding_a_message_stays_out_after_a_restart(
    tmp_path: Path, how: signal.Signals
) -> None:
    """MQTT-3.10.4-2: after UNSUBACK no new message goes to the client. A persistent session
    that left a share group while it held one of its messages (MQTT-3.10.4-3: it completes
    that one) is still a member on disk until then; a restart resumed it as a subscription,
    and it took its turns of the group's new messages again."""
    target, server = serve_fresh(tmp_path)
    try:
        leaver = _subscribed(target, "leaver", GROUP, 1)
        stayer = _subscribed(target, "stayer", GROUP, 1)
        stayer.close()  # away: the group's messages go to the leaver
        publisher = paho(target, "publisher")
        publisher.publish("k/1", b"held", 1)
        assert _exactly(leaver, 1) == [b"held"]  # never acknowledged
        leaver.sendall(packet(0xA2, (2).to_bytes(2, "big") + b"\x00" + string(GROUP)))
        assert read(leaver) == (0xB0, b"\x00\x02\x00\x00")  # UNSUBACK, success
        leaver.close()
        publisher.stop()
        server = _restart(server, how, target)
        leaver, present = open_raw(target, "leaver", clean=False, expiry=300)
        assert present
        [(payload, packet_id, dup)] = take_publishes(leaver, 1)  # completed, not another's
        assert (payload, dup) == (b"held", True)
        leaver.sendall(puback(packet_id))
        stayer, _ = open_raw(target, "stayer", clean=False, expiry=300)
        publisher = paho(target, "publisher")
        for n in range(4):
            publisher.publish(f"k/{n}", f"new{n}".encode(), 1)
        publisher.stop()
        assert sorted(_exactly(stayer, 4)) == [b"new0", b"new1", b"new2", b"new3"]
        assert _payloads(leaver, within=0.5) == []
        leaver.close()
        stayer.close()
    finally:
        stop(server)


def test_a_message_never_acknowledged_outlives_restarts_without_going_to_error(
    tmp_path: Path,
) -> None:
    target, server = serve_fresh(tmp_path)
    try:
        device = _subscribed(target, "device", "jobs/#", 1)
        paho(target, "publisher").publish("jobs/1", b"slow", 1)
        for restart in range(7):
            assert _exactly(device, 1) == [b"slow"], restart  # never acknowledged
            device.close()
            server = _restart(server, signal.SIGKILL if restart % 2 else signal.SIGTERM, target)
            device, present = open_raw(target, "device", clean=False, expiry=300)
            assert present
        assert _exactly(device, 1) == [b"slow"]
        device.close()
        errors = [f for _, _, files in os.walk(target.root / "topic-root") for f in files]
        assert not [f for f in errors if "bx_why" in f]
    finally:
        stop(server)


@pytest.mark.parametrize("filter", ["jobs/#", "$share/g/jobs/#"], ids=["plain", "shared"])
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_session_resumed_with_expiry_0_after_a_restart_gets_what_it_had_been_sent(
    tmp_path: Path, how: signal.Signals, filter: str
) -> None:
    """MQTT-4.4.0-1: clean start 0 resumes the session (its expiry 0 ends it with this
    connection), and what it had been sent and had not acknowledged is sent again. Found on
    disk after a restart, its subscriptions took back none of their locks: session present,
    and the messages held locked to nobody, then deleted with the session at its end."""
    target, server = serve_fresh(tmp_path)
    try:
        device = _subscribed(target, "device", filter, 1)
        paho(target, "publisher").publish("jobs/1", b"slow", 1)
        assert _exactly(device, 1) == [b"slow"]  # never acknowledged
        device.close()
        server = _restart(server, how, target)
        device, present = open_raw(target, "device", clean=False, expiry=0)
        assert present
        assert _exactly(device, 1) == [b"slow"]
        device.close()
    finally:
        stop(server)


def test_a_share_member_whose_session_ends_while_the_server_was_down_gives_it_to_the_others(
    tmp_path: Path,
) -> None:
    target, server = serve_fresh(tmp_path)
    try:
        a = _subscribed(target, "a", GROUP, 1, expiry=2)
        paho(target, "publisher").publish("k/1", b"held", 1)
        assert _exactly(a, 1) == [b"held"]
        a.close()
        server = _restart(server, signal.SIGKILL, target)
        b = paho(target, "b")
        b.subscribe(GROUP, 1)
        assert b.next(timeout=10).payload == b"held"  # once a's session expired (2 s)
        b.stop()
    finally:
        stop(server)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_what_was_in_flight_goes_again_under_its_packet_ids_with_dup(
    tmp_path: Path, how: signal.Signals
) -> None:
    """MQTT-4.4.0-1: the server resends unacknowledged PUBLISHes with their original packet
    ids, and MQTT-3.3.1-1: with DUP set. They came as new PUBLISHes after a restart."""
    target, server = serve_fresh(tmp_path)
    try:
        device = _subscribed(target, "device", "jobs/#", 1)
        publisher = paho(target, "publisher")
        publisher.publish("jobs/0", b"done", 1)
        [(_, first_id, _)] = take_publishes(device, 1)
        assert publishes(device, within=0.5) == []
        device.sendall(puback(first_id))  # the next ones take other ids than 1
        for n in range(1, 4):
            publisher.publish(f"jobs/{n}", f"held{n}".encode(), 1)
        publisher.stop()
        held = take_publishes(device, 3)
        assert publishes(device, within=0.5) == []
        assert [m.payload for m in held] == [b"held1", b"held2", b"held3"]
        # Its session's record names what was in flight, and under which ids.
        server, device = _resumed_after_a_restart(device, server, how, target)
        again = take_publishes(device, 3)  # a 4th would fail the check after the PUBACKs
        assert again == [(m.payload, m.packet_id, True) for m in held]
        for _, packet_id, _ in again:
            device.sendall(puback(packet_id))
        assert publishes(device, within=0.5) == []
        device.close()
    finally:
        stop(server)


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_qos2_messages_in_flight_when_the_server_is_killed_go_again_under_their_ids(
    tmp_path: Path, fsync: str
) -> None:
    """A QoS 2 subscriber still connected when the server is SIGKILLed holds the packet ids of
    the PUBLISHes it has not answered (it may have delivered them already, MQTT 5.0 §4.3.3):
    after the restart they must come under those ids with DUP, or it would deliver them twice.
    The session's record names them before they are sent, so no close has to write it; they
    came as new PUBLISHes, with new ids."""
    target, server = serve_fresh(tmp_path, "--fsync", fsync)
    try:
        device = _subscribed(target, "device", "jobs/#", 2)
        publisher = paho(target, "publisher")
        publisher.publish("jobs/0", b"done", 2)
        assert _settle_all(device, 1) == [b"done"]  # the next ones take other ids than 1
        for n in range(1, 4):
            publisher.publish(f"jobs/{n}", f"held{n}".encode(), 2)
        publisher.stop()
        held = take_publishes(device, 3)  # not answered: the device holds them and their ids
        assert [m.payload for m in held] == [b"held1", b"held2", b"held3"]
        assert [m.packet_id for m in held] != [1, 2, 3]
        # The device still connected: no close is written (its socket is closed once the
        # server is dead).
        server = _restart(server, signal.SIGKILL, target, "--fsync", fsync)
        device.close()
        _held_come_again(target, held)
    finally:
        stop(server)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_message_in_flight_from_two_overlapping_filters_goes_again_under_both_ids(
    tmp_path: Path, how: signal.Signals
) -> None:
    """A message matching two filters of a session is in two of its dropboxes under one
    message id, and was sent under two packet ids. The record named them by message id alone:
    after a restart one copy went again under the other's packet id, and the other as a new
    PUBLISH, which a QoS 2 client that had it delivers a second time (found by a differential
    run against mosquitto)."""
    target, server = serve_fresh(tmp_path)
    try:
        device = _subscribed(target, "device", "jobs/#", 2)
        device.sendall(subscribe(2, "jobs/+", 2))
        assert read(device)[0] == 0x90
        publisher = paho(target, "publisher")
        publisher.publish("jobs/1", b"held", 2)
        publisher.stop()
        held = take_publishes(device, 2)  # one copy per subscription, not answered
        assert [m.payload for m in held] == [b"held", b"held"]
        # SIGKILL: the device still connected, no close is written (its socket is closed
        # once the server is dead).
        server = _restart(server, how, target)
        device.close()
        _held_come_again(target, held, in_order=False)
    finally:
        stop(server)


def test_a_qos2_message_in_flight_goes_again_at_qos2_after_a_downgrade_and_a_kill(
    tmp_path: Path,
) -> None:
    """The device was sent a QoS 2 message it did not answer, then subscribed again to the
    filter at QoS 1. After a restart the message went again under its packet id at QoS 1,
    the QoS granted now, where a reconnect sends it as it went (MQTT-4.4.0-1): a client
    holding it as a QoS 2 message delivers a QoS 1 copy a second time."""
    target, server = serve_fresh(tmp_path)
    try:
        device = _subscribed(target, "device", "jobs/#", 2)
        publisher = paho(target, "publisher")
        publisher.publish("jobs/1", b"held", 2)
        publisher.stop()
        kind, body = read(device)
        assert kind == 0x34  # QoS 2, no DUP: not answered
        held = publish_fields(body)
        device.sendall(subscribe(2, "jobs/#", 1))
        assert read(device)[0] == 0x90  # its record written, naming the message in flight
        server = _restart(server, signal.SIGKILL, target)
        device.close()
        device, present = open_raw(target, "device", clean=False, expiry=300)
        assert present
        kind, body = read(device)
        assert (kind, publish_fields(body)) == (0x3C, held)  # QoS 2 again, DUP
        device.close()
    finally:
        stop(server)


@pytest.mark.parametrize("qos", [1, 2])
def test_a_message_in_flight_goes_again_at_its_qos_after_a_downgrade_to_qos0_and_a_restart(
    tmp_path: Path, qos: int
) -> None:
    """The device was sent a QoS 1 or 2 message it did not answer, then subscribed again to
    the filter at QoS 0. After a restart the message went as a QoS 0 PUBLISH, without the
    packet id the device holds, and a QoS 2 one's id got a PUBREL though the device had sent
    no PUBREC; a reconnect without a restart sends it as it went (MQTT-4.4.0-1)."""
    target, server = serve_fresh(tmp_path)
    try:
        device = _subscribed(target, "device", "jobs/#", 2)
        publisher = paho(target, "publisher")
        publisher.publish("jobs/1", b"held", qos)
        publisher.stop()
        kind, body = read(device)
        assert kind == 0x30 | qos << 1  # no DUP: not answered
        held = publish_fields(body)
        device.sendall(subscribe(2, "jobs/#", 0))
        assert read(device)[0] == 0x90
        server, device = _resumed_after_a_restart(device, server, signal.SIGTERM, target)
        kind, body = read(device)
        assert kind == 0x38 | qos << 1  # its QoS, DUP (it came at QoS 0: 0x30)
        assert publish_fields(body) == held  # under its packet id
        assert nothing(device, within=0.5)  # no PUBREL before its PUBREC, no other copy
        device.close()
    finally:
        stop(server)


def test_a_qos1_copy_goes_again_at_qos1_after_an_upgrade_to_qos2_and_a_restart(
    tmp_path: Path,
) -> None:
    """A QoS 2 message waited in the device's dropbox (Receive Maximum 1) while the device
    subscribed again at QoS 1, went to it at QoS 1, and the device subscribed again at QoS 2
    before answering it. After a restart the copy went again under its packet id at QoS 2,
    the QoS granted now (a QoS 2 exchange for an id the client holds as a QoS 1 message);
    a reconnect without a restart sends it as it went, at QoS 1 (MQTT-4.4.0-1)."""
    target, server = serve_fresh(tmp_path)
    try:
        device, _ = open_raw(target, "device", clean=False, expiry=300, receive_maximum=1)
        device.sendall(subscribe(1, "jobs/#", 2))
        assert read(device)[0] == 0x90
        publisher = paho(target, "publisher")
        publisher.publish("jobs/1", b"first", 2)
        publisher.publish("jobs/2", b"held", 2)
        publisher.stop()
        kind, body = read(device)
        assert kind == 0x34
        _, first_id = publish_fields(body)
        device.sendall(subscribe(2, "jobs/#", 1))
        assert read(device)[0] == 0x90
        device.sendall(pubrec(first_id))
        assert read(device)[0] == 0x62  # PUBREL
        device.sendall(pubcomp(first_id))
        kind, body = read(device)
        assert kind == 0x32  # the one that waited, at the QoS granted now
        held = publish_fields(body)
        device.sendall(subscribe(3, "jobs/#", 2))
        assert read(device)[0] == 0x90
        server, device = _resumed_after_a_restart(device, server, signal.SIGTERM, target)
        kind, body = read(device)
        assert kind == 0x3A  # QoS 1 as it went, DUP (it came at QoS 2: 0x3C)
        assert publish_fields(body) == held
        assert nothing(device, within=0.5)
        device.close()
    finally:
        stop(server)


def test_a_qos2_message_settled_by_a_pubrec_the_record_missed_gets_its_pubrel_after_a_kill(
    tmp_path: Path,
) -> None:
    """A positive PUBREC settles its message at once (the file leaves the dropbox); the record
    names its PUBREL only before the write that sends it. A SIGKILL in between (seen in 3 of
    19 runs under fsync=always by an audit) left a record naming the message as sent, and no
    file: the restarted server sent no PUBREL, the device held the packet id for ever, and
    took the next message under it for a repeat (lost). Here the file is removed after the
    kill, as that settle would have, and the PUBREL must come."""
    target, server = serve_fresh(tmp_path, "--fsync", "always")
    try:
        device = _subscribed(target, "device", "jobs/#", 2)
        publisher = paho(target, "publisher")
        publisher.publish("jobs/1", b"taken", 2)
        publisher.stop()
        [held] = take_publishes(device, 1)
        record = read_record(str(target.root), "device")
        assert record is not None
        assert record.sent_qos2 == (held.packet_id,)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=20)
        device.close()
        [settled] = [
            os.path.join(folder, name)
            for folder, _, names in os.walk(target.root / "topic-root")
            if folder.endswith(os.sep + "processing")
            for name in names
        ]
        os.unlink(settled)  # what the PUBREC's settle did before the record was written
        server = serve_process(target.root, target.port, "--fsync", "always")
        device, present = open_raw(target, "device", clean=False, expiry=300)
        assert present
        device.settimeout(20)
        kind, body = read(device)
        assert (kind, int.from_bytes(body[:2], "big")) == (0x62, held.packet_id)  # PUBREL
        device.sendall(pubcomp(held.packet_id))
        assert publishes(device, within=0.5) == []
        device.close()
    finally:
        stop(server)


def _expiring(sock: socket.socket) -> tuple[bytes, int, bool, int]:
    """The next PUBLISH (v5, QoS 1, its only property a Message Expiry Interval): payload,
    packet id, DUP and what is left of the interval."""
    kind, body = read(sock)
    assert kind & 0xF6 == 0x32, hex(kind)  # a QoS 1 PUBLISH
    end = 2 + int.from_bytes(body[:2], "big")
    packet_id = int.from_bytes(body[end : end + 2], "big")
    assert body[end + 2 : end + 4] == bytes([5, 0x02]), body.hex()  # the expiry alone
    left = int.from_bytes(body[end + 4 : end + 8], "big")
    return body[end + 8 :], packet_id, bool(kind & 0x08), left


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_qos1_message_whose_expiry_ran_out_over_a_restart_is_sent_again_with_a_second(
    tmp_path: Path, how: signal.Signals
) -> None:
    """A QoS 1 message sent and not acknowledged whose interval ran out while its client was
    away is sent again when the session resumes, DUP under its packet id, with one second
    left, as a QoS 2 one is: MQTT-4.4.0-1 wants every unacknowledged PUBLISH resent, and
    MQTT-3.3.2-5 lets the server delete an expired copy only before its onward delivery
    started (docs/mqtt.md). It was dropped, to expired/."""
    target, server = serve_fresh(tmp_path)
    try:
        device = _subscribed(target, "device", "jobs/#", 1)
        publisher = paho(target, "publisher")
        for payload, interval in ((b"short", 1), (b"long", 300)):
            props = paho_properties(PacketTypes.PUBLISH, MessageExpiryInterval=interval)
            publisher.publish("jobs/1", payload, 1, properties=props)
        publisher.stop()
        published = time.monotonic()
        held = [_expiring(device), _expiring(device)]
        assert [(m[0], m[2]) for m in held] == [(b"short", False), (b"long", False)]
        device.close()
        # A SIGKILL must come after the close is written.
        until(
            lambda: _sent_in_record(target, "device") == 2,
            "no record of the close names both messages in flight",
        )
        time.sleep(max(0.0, published + 1.5 - time.monotonic()))  # "short" is past its interval
        server = _restart(server, how, target)
        device, present = open_raw(target, "device", clean=False, expiry=300)
        assert present
        device.settimeout(20)
        again = [_expiring(device), _expiring(device)]
        assert [m[:3] for m in again] == [(b"short", held[0][1], True), (b"long", held[1][1], True)]
        assert again[0][3] == 1
        assert 0 < again[1][3] < 300
        for message in again:
            device.sendall(puback(message[1]))
        assert publishes(device, within=1.0) == []
        device.close()
        assert not [
            name
            for folder, _, names in os.walk(target.root / "topic-root")
            if folder.endswith(os.sep + "expired")
            for name in names
        ]
    finally:
        stop(server)


def test_a_share_group_left_holding_a_message_that_expires_over_a_restart_is_left(
    tmp_path: Path,
) -> None:
    """A persistent session that left a share group while it held one of its messages stays
    a member until that one is settled; when its interval runs out over a restart, it is
    sent again (a second left) and the member's file goes at its PUBACK (`close_drained`);
    it stayed on disk until the session ended. (The group has another member, away: its
    last member's UNSUBSCRIBE would have ended it.)"""
    target, server = serve_fresh(tmp_path)
    try:
        leaver = _subscribed(target, "leaver", GROUP, 1)
        publisher = paho(target, "publisher")
        props = paho_properties(PacketTypes.PUBLISH, MessageExpiryInterval=1)
        publisher.publish("k/1", b"short", 1, properties=props)
        publisher.stop()
        published = time.monotonic()
        assert _expiring(leaver)[0] == b"short"  # never acknowledged
        _subscribed(target, "stayer", GROUP, 1).close()
        leaver.sendall(packet(0xA2, (2).to_bytes(2, "big") + b"\x00" + string(GROUP)))
        assert read(leaver) == (0xB0, b"\x00\x02\x00\x00")  # UNSUBACK, success
        leaver.close()
        [members] = target.root.glob("topic-root/*/.subscriptions/share.g/.members")
        assert sorted(path.name for path in members.iterdir()) == ["leaver", "stayer"]
        time.sleep(max(0.0, published + 1.5 - time.monotonic()))  # past its interval
        server = _restart(server, signal.SIGTERM, target)
        leaver, present = open_raw(target, "leaver", clean=False, expiry=300)
        assert present
        payload, packet_id, dup, left = _expiring(leaver)
        assert (payload, dup, left) == (b"short", True, 1)
        assert (members / "leaver").exists()  # it holds the message still
        leaver.sendall(puback(packet_id))
        until(lambda: not (members / "leaver").exists(), "the PUBACK let go of nothing")
        assert [path.name for path in members.iterdir()] == ["stayer"]
        leaver.close()
    finally:
        stop(server)


# `boxmq serve`, killed (SIGKILL) by itself once it has written the first record of the
# client "device" connected to it: the record a resuming CONNECT writes, before its first
# pump sends what the session had in flight (and writes the record again).
_KILLED_AT_CONNECT = """
import os, signal, sys
from boxmq import cli
from boxmq.mqtt import recording
write = recording.write_record
def write_record(root, record, *, flush):
    written = write(root, record, flush=flush)
    if record.client_id == "device" and record.holder is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return written
recording.write_record = write_record
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_kill_between_a_resuming_connects_record_and_its_resend_keeps_the_qos2_ids(
    tmp_path: Path,
) -> None:
    """The record a CONNECT writes when it resumes a session after a restart named nothing
    in flight: what the process before had sent was named again only once the first pump
    took it back. A SIGKILL in between left its messages locked and no record naming them:
    the next restart sent them as new PUBLISHes, new ids and no DUP, which a QoS 2 client
    that had them delivers twice (and one settled meanwhile never got its PUBREL)."""
    target, server = serve_fresh(tmp_path)
    try:
        device = _subscribed(target, "device", "jobs/#", 2)
        publisher = paho(target, "publisher")
        for n in range(1, 3):
            publisher.publish(f"jobs/{n}", f"held{n}".encode(), 2)
        publisher.stop()
        held = take_publishes(device, 2)  # not answered: the device holds them and their ids
        stop(server)  # its record of the device names them, and under which ids
        device.close()
        server = serve_process(target.root, target.port, program=("-c", _KILLED_AT_CONNECT))
        device = socket.create_connection((target.host, target.port), timeout=20)
        device.sendall(connect_packet("device", clean=False, expiry=300))
        assert read(device) == (0, b"")  # killed before its CONNACK
        assert server.wait(timeout=20) == -signal.SIGKILL
        device.close()
        server = serve_process(target.root, target.port)
        _held_come_again(target, held)
    finally:
        stop(server)


# `boxmq serve`, killed (SIGKILL) by itself as it is about to send its first PUBREC: the QoS 2
# PUBLISH it answers is on disk, and its client never learns so.
_KILLED_AT_PUBREC = """
import os, signal, sys
from boxmq import cli
from boxmq.mqtt.clients import Outgoing
acknowledge = Outgoing.acknowledge
def killed(self, client, kind, packet_id):
    if kind.__name__ == "Pubrec":
        os.kill(os.getpid(), signal.SIGKILL)
    acknowledge(self, client, kind, packet_id)
Outgoing.acknowledge = killed
sys.exit(cli.main(sys.argv[1:]))
"""

# Killed by itself once it has replaced a retained message: for a persistent session's
# retained QoS 2 one, at its PUBREL, between that replacement and the copies.
_KILLED_AT_RETAINED = """
import os, signal, sys
from boxmq import cli
from boxmq.store.retained import RetainedStore
replace = RetainedStore.replace
def killed(self, staged):
    replace(self, staged)
    os.kill(os.getpid(), signal.SIGKILL)
RetainedStore.replace = killed
sys.exit(cli.main(sys.argv[1:]))
"""


def _retained_once(target: RunningServer) -> None:
    """The away subscriber "sub" of ret/# gets the message once; a new subscriber gets it as
    the topic's retained message."""
    sub, present = open_raw(target, "sub", clean=False)
    assert present
    assert _exactly(sub, 1) == [b"v"]
    sub.close()
    late, _ = open_raw(target, "late", clean=True)
    late.sendall(subscribe(1, "ret/#", 1))
    assert read(late)[0] == 0x90
    kind, body = read(late)
    assert kind & 0xF1 == 0x31, hex(kind)  # a PUBLISH, retained
    assert publish_fields(body)[0] == b"v"
    late.close()


def test_a_retained_qos2_message_repeated_after_a_kill_before_its_pubrec_goes_once(
    tmp_path: Path,
) -> None:
    """A persistent session's retained QoS 2 PUBLISH was written and routed at once, before
    its PUBREC; a SIGKILL before that PUBREC went out lost the knowledge, and the client's
    repeat (DUP) after the restart was routed a second time: a subscriber got it twice. It
    waits in the exactly-once intake for its PUBREL now, as any QoS 2 message does."""
    target, server = serve_fresh(tmp_path, program=("-c", _KILLED_AT_PUBREC))
    try:
        _subscribed(target, "sub", "ret/#", 2).close()
        publisher, _ = open_raw(target, "pub", clean=False)
        publisher.sendall(publish("ret/1", b"v", qos=2, packet_id=1, retain=True))
        assert read(publisher) == (0, b"")  # killed before its PUBREC
        assert server.wait(timeout=20) == -signal.SIGKILL
        publisher.close()
        server = serve_process(target.root, target.port)
        publisher, present = open_raw(target, "pub", clean=False)
        assert present
        publisher.sendall(publish("ret/1", b"v", qos=2, packet_id=1, retain=True, dup=True))
        assert read(publisher) == (0x50, b"\x00\x01")  # PUBREC
        publisher.sendall(pubrel(1))
        assert read(publisher) == (0x70, b"\x00\x01")  # PUBCOMP
        publisher.close()
        _retained_once(target)
    finally:
        stop(server)


def test_a_kill_between_a_retained_qos2_messages_retained_store_and_its_copies_is_finished(
    tmp_path: Path,
) -> None:
    """At its PUBREL, a persistent session's retained QoS 2 message replaces its topic's
    retained message, then its copies go out of the intake: a SIGKILL in between leaves it
    there, marked delivered, and the restart sends its copies (once) and keeps it retained."""
    target, server = serve_fresh(tmp_path, program=("-c", _KILLED_AT_RETAINED))
    try:
        _subscribed(target, "sub", "ret/#", 2).close()
        publisher, _ = open_raw(target, "pub", clean=False)
        publisher.sendall(publish("ret/1", b"v", qos=2, packet_id=1, retain=True))
        assert read(publisher) == (0x50, b"\x00\x01")  # PUBREC
        publisher.sendall(pubrel(1))
        assert read(publisher) == (0, b"")  # killed before its PUBCOMP
        assert server.wait(timeout=20) == -signal.SIGKILL
        publisher.close()
        server = serve_process(target.root, target.port)
        publisher, present = open_raw(target, "pub", clean=False)
        assert present
        publisher.sendall(pubrel(1))
        assert read(publisher) == (0x70, b"\x00\x01")  # PUBCOMP: success, not 0x92
        publisher.close()
        _retained_once(target)
    finally:
        stop(server)
