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

import pytest
from tests.integration.mqtt.clients import WAIT, RunningServer, paho
from tests.integration.mqtt.raw import (
    connect_packet,
    packet,
    puback,
    pubcomp,
    pubrec,
    read,
    string,
    take_publishes,
)

PINGREQ = bytes([0xC0, 0])


def _open(server: RunningServer, client_id: str, v5: bool) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    if v5:
        sock.sendall(connect_packet(client_id, clean=True))
    else:
        variable = string("MQTT") + bytes([4, 0x02, 0, 30])
        sock.sendall(packet(0x10, variable + string(client_id)))
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
