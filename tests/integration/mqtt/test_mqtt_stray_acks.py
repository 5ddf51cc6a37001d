"""Answers for packet ids with nothing in flight, over a raw socket: a client that acknowledges
twice, or after a resume what the server had already settled, keeps its connection.

MQTT 5.0 requires no disconnect for them: a PUBREC is answered with PUBREL (MQTT-4.3.3-4),
0x92 Packet Identifier not found when the id is not known (§3.6.2.1), and a PUBACK or PUBCOMP
changes nothing. mosquitto 2.0 does the same (it answers such a PUBREC with PUBREL 0x00). The
wrong kind of answer for a message in flight (a PUBACK for QoS 2) stays a protocol error, as in
mosquitto.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import WAIT, RunningServer, paho, start_server
from tests.integration.mqtt.raw import (
    PINGREQ,
    connect_packet,
    connect_packet_311,
    open_raw,
    packet,
    puback,
    pubcomp,
    pubrec,
    pubrel,
    read,
    string,
    take_publishes,
)


def _open(server: RunningServer, client_id: str, v5: bool) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    if v5:
        sock.sendall(connect_packet(client_id, clean=True))
    else:
        sock.sendall(connect_packet_311(client_id))
    kind, body = read(sock)
    assert (kind, body[1]) == (0x20, 0), body.hex()
    return sock


def _subscribe(sock: socket.socket, v5: bool, topic_filter: str) -> None:
    options = b"\x00" if v5 else b""  # v5: no properties
    sock.sendall(packet(0x82, (1).to_bytes(2, "big") + options + string(topic_filter) + b"\x02"))
    assert read(sock)[0] == 0x90  # SUBACK


def _alive(sock: socket.socket) -> list[tuple[int, bytes]]:
    """What came before the PINGRESP to a PINGREQ sent now: the connection stayed open."""
    sock.sendall(PINGREQ)
    got: list[tuple[int, bytes]] = []
    while (answer := read(sock))[0] != 0xD0:
        assert answer[0], f"closed after {got}"
        assert answer[0] != 0xE0, f"DISCONNECT {answer[1].hex()}"
        got.append(answer)
    return got


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_answers_for_ids_with_nothing_in_flight_change_nothing(
    server: RunningServer, v5: bool
) -> None:
    sock = _open(server, "stray", v5)
    try:
        sock.sendall(puback(777) + pubcomp(778) + pubrec(779))
        not_found = b"\x92" if v5 else b""
        assert _alive(sock) == [(0x62, (779).to_bytes(2, "big") + not_found)]  # PUBREL
    finally:
        sock.close()


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
@pytest.mark.parametrize("qos", [1, 2])
def test_a_message_answered_twice_is_settled_once_and_the_client_stays(
    server: RunningServer, v5: bool, qos: int
) -> None:
    sock = _open(server, "twice", v5)
    publisher = paho(server, "publisher")
    try:
        _subscribe(sock, v5, "twice/#")
        publisher.publish("twice/a", b"once", qos)
        publisher.publish("twice/b", b"next", qos)
        first, second = _two_publishes(sock, v5)
        ids = first.to_bytes(2, "big")
        if qos == 1:
            sock.sendall(puback(first) + puback(first))
            assert _alive(sock) == []
        else:
            sock.sendall(pubrec(first) + pubrec(first))  # a repeat gets its PUBREL again
            assert _alive(sock) == [(0x62, ids), (0x62, ids)]
            sock.sendall(pubcomp(first) + pubcomp(first))
            assert _alive(sock) == []
        sock.sendall(puback(second) if qos == 1 else pubrec(second) + pubcomp(second))
        _alive(sock)
    finally:
        sock.close()
        publisher.stop()
    for info in server.box.topics.subscriptions():  # v5's, in its dropbox: settled, once
        assert (info.counts.ready, info.counts.locked, info.counts.dead) == (0, 0, 0)


def _two_publishes(sock: socket.socket, v5: bool) -> tuple[int, int]:
    if v5:
        first, second = take_publishes(sock, 2)
        assert (first.payload, second.payload) == (b"once", b"next")
        return first.packet_id, second.packet_id
    ids = []
    for payload in (b"once", b"next"):
        kind, body = read(sock)
        assert kind & 0xF0 == 0x30, hex(kind)
        end = 2 + int.from_bytes(body[:2], "big")
        assert body[end + 2 :] == payload
        ids.append(int.from_bytes(body[end : end + 2], "big"))
    return ids[0], ids[1]


def test_the_wrong_answer_for_a_message_in_flight_is_still_a_protocol_error(
    server: RunningServer,
) -> None:
    sock = _open(server, "wrong", v5=True)
    publisher = paho(server, "publisher")
    try:
        _subscribe(sock, True, "wrong/#")
        publisher.publish("wrong/a", b"x", 2)
        [received] = take_publishes(sock, 1)
        sock.sendall(puback(received.packet_id))  # a QoS 2 message waits for PUBREC
        assert read(sock) == (0xE0, b"\x82")  # DISCONNECT, Protocol Error
    finally:
        sock.close()
        publisher.stop()


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_a_qos_1_publish_reusing_the_id_of_a_qos_2_one_awaiting_pubrel_leaves_it_intact(
    server: RunningServer, v5: bool
) -> None:
    """The id of a QoS 2 PUBLISH is in use until its PUBCOMP (MQTT-2.2.1-3): a QoS 1 PUBLISH
    that takes it meanwhile is the client's mistake, a session state out of step. v5 is told
    so, PUBACK 0x91 Packet Identifier in use, and the QoS 1 message is not taken (mosquitto
    2.0 answers 0x10 and forgets the QoS 2 message, whose PUBREL then sends nothing); 3.1.1
    has no negative PUBACK, and it is taken. Either way the QoS 2 message still waits for its
    PUBREL, which sends it on."""
    subscriber = _open(server, "in-use-sub", v5=True)
    publisher = _open(server, "in-use-pub", v5)
    properties = b"\x00" if v5 else b""

    def publish(qos: int, packet_id: int, payload: bytes) -> bytes:
        variable = string("in-use/a") + packet_id.to_bytes(2, "big") + properties
        return packet(0x30 | qos << 1, variable + payload)

    try:
        _subscribe(subscriber, True, "in-use/#")
        publisher.sendall(publish(2, 7, b"two"))
        assert read(publisher) == (0x50, b"\x00\x07")  # PUBREC
        publisher.sendall(publish(1, 7, b"one"))
        kind, body = read(publisher)
        if v5:
            assert (kind, body[:3]) == (0x40, b"\x00\x07\x91")
            assert b"awaits its PUBREL" in body  # the Reason String says which
        else:
            assert (kind, body) == (0x40, b"\x00\x07")
        publisher.sendall(pubrel(7))
        assert read(publisher) == (0x70, b"\x00\x07")  # PUBCOMP, success: it was still held
        publisher.sendall(publish(1, 8, b"last"))
        assert read(publisher) == (0x40, b"\x00\x08")
        got = [received.payload for received in take_publishes(subscriber, 3 - v5)]
        assert got == ([b"two", b"last"] if v5 else [b"one", b"two", b"last"])
    finally:
        subscriber.close()
        publisher.close()


@pytest.mark.parametrize("expiry", [300, 0], ids=["persistent", "behind-disk-work"])
def test_a_qos_1_publish_reusing_the_id_of_a_qos_2_one_in_the_same_read_is_refused(
    server: RunningServer, expiry: int
) -> None:
    """The id of a QoS 2 PUBLISH is in use from the moment it is sent: a QoS 1 PUBLISH
    behind it in the same TCP segment, the QoS 2 one not yet held (a persistent session's
    is written to the intake first; a clean one's waits behind the disk work of a retained
    PUBLISH before it), got PUBACK 0x00 and went on, where one read later got 0x91. It gets
    0x91 in its turn now, after the PUBREC, and the QoS 2 message still waits for its
    PUBREL."""
    subscriber = _open(server, "same-read-sub", v5=True)
    publisher, _ = open_raw(server, "same-read-pub", clean=True, expiry=expiry)

    def publish(qos: int, packet_id: int, payload: bytes, retain: bool = False) -> bytes:
        variable = string("same-read/a") + packet_id.to_bytes(2, "big") + b"\x00"
        return packet(0x30 | qos << 1 | retain, variable + payload)

    try:
        _subscribe(subscriber, True, "same-read/#")
        ahead = b"" if expiry else publish(1, 6, b"retained", retain=True)
        publisher.sendall(ahead + publish(2, 7, b"two") + publish(1, 7, b"one"))
        if not expiry:
            assert read(publisher) == (0x40, b"\x00\x06")
        assert read(publisher) == (0x50, b"\x00\x07")  # PUBREC
        kind, body = read(publisher)
        assert (kind, body[:3]) == (0x40, b"\x00\x07\x91"), (kind, body)
        publisher.sendall(pubrel(7))
        assert read(publisher) == (0x70, b"\x00\x07")  # PUBCOMP, success: it was held
        publisher.sendall(publish(1, 8, b"last"))
        assert read(publisher) == (0x40, b"\x00\x08")
        got = [received.payload for received in take_publishes(subscriber, 3 - bool(expiry))]
        assert got == ([b"two", b"last"] if expiry else [b"retained", b"two", b"last"])
    finally:
        subscriber.close()
        publisher.close()


@pytest.mark.parametrize(
    ("answer", "v5"),
    [("refused", True), ("refused", False), ("in-use", True), ("repeat", True), ("repeat", False)],
    ids=["refused-v5", "refused-v311", "in-use-v5", "repeat-v5", "repeat-v311"],
)
def test_an_answer_without_disk_work_waits_for_the_acks_of_the_publishes_read_before_it(
    server: RunningServer, answer: str, v5: bool
) -> None:
    """PUBACKs go in the order their QoS 1 PUBLISHes came, PUBRECs in that of their QoS 2 ones
    (MQTT-4.6.0-2, -3). A PUBLISH answered without disk work (one to a $SYS topic, refused:
    0x87, 3.1.1 acknowledged and dropped; a v5 QoS 1 one reusing the id of a held QoS 2 one,
    0x91; a held QoS 2 one's repeat, PUBREC again) was answered at once, ahead of a retained
    PUBLISH read just before it (the same TCP segment), whose ack waits for its write. Its
    answer now waits its turn behind that one's."""
    publisher = _open(server, f"ack-order-{answer}", v5)
    properties = b"\x00" if v5 else b""

    def publish(qos: int, packet_id: int, topic: str, flags: int = 0) -> bytes:
        variable = string(topic) + packet_id.to_bytes(2, "big") + properties
        return packet(0x30 | qos << 1 | flags, variable + b"x")

    try:
        publisher.sendall(publish(2, 7, "ack-order/held"))
        assert read(publisher) == (0x50, b"\x00\x07")  # PUBREC: held until its PUBREL
        qos = 2 if answer == "repeat" else 1
        ahead = publish(qos, 6, "ack-order/retained", flags=0x01)  # RETAIN: written first
        behind = {
            "refused": publish(qos, 8, "$SYS/ack-order"),
            "in-use": publish(1, 7, "ack-order/in-use"),
            "repeat": publish(2, 7, "ack-order/held", flags=0x08),  # DUP
        }[answer]
        publisher.sendall(ahead + behind)
        ack = 0x50 if qos == 2 else 0x40
        assert read(publisher) == (ack, b"\x00\x06")
        kind, body = read(publisher)
        expected = {"refused": b"\x00\x08", "in-use": b"\x00\x07", "repeat": b"\x00\x07"}[answer]
        reason = {"refused": b"\x87", "in-use": b"\x91", "repeat": b""}[answer] if v5 else b""
        assert (kind, body[:3]) == (ack, expected + reason)
        assert _alive(publisher) == []
    finally:
        publisher.close()


def test_a_refusal_waits_for_the_pubrec_of_a_persistent_sessions_qos_2_publish_before_it(
    tmp_path: Path,
) -> None:
    """The same behind a persistent session's QoS 2 PUBLISH, written to the intake (and
    flushed, under fsync=always) before its PUBREC: the PUBREC 0x87 of a QoS 2 PUBLISH to a
    $SYS topic read right after it came first."""
    with start_server(tmp_path / "root", fsync="always") as server:
        publisher, _ = open_raw(server, "ack-order-persistent", expiry=300)

        def publish(packet_id: int, topic: str) -> bytes:
            return packet(0x34, string(topic) + packet_id.to_bytes(2, "big") + b"\x00x")

        try:
            publisher.sendall(publish(5, "ack-order/kept") + publish(8, "$SYS/ack-order"))
            assert read(publisher) == (0x50, b"\x00\x05")
            assert read(publisher)[1][:3] == b"\x00\x08\x87"
            assert _alive(publisher) == []
        finally:
            publisher.close()
