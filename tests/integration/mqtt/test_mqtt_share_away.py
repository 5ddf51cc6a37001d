"""A share group's member whose persistent session lives on while its client is away takes no
turns meanwhile: the group's messages go to the members that are there. What it had been sent
stays its own, and comes again (DUP) when it returns (MQTT 5.0 §4.8.2 lets the server wait)."""

from __future__ import annotations

import socket

from tests.integration.mqtt.clients import RunningServer, paho
from tests.integration.mqtt.raw import open_raw, puback, publish_fields, read, subscribe

GROUP = "$share/workers/jobs/#"


def _publishes(sock: socket.socket, within: float) -> list[tuple[int, bytes, int]]:
    """(first byte, payload, packet id) of each PUBLISH before `within` seconds of silence."""
    sock.settimeout(within)
    got: list[tuple[int, bytes, int]] = []
    while True:
        try:
            kind, body = read(sock)
        except TimeoutError:
            return got
        assert kind & 0xF0 == 0x30, hex(kind)
        payload, packet_id = publish_fields(body)
        got.append((kind, payload, packet_id))


def test_a_member_away_takes_no_turns_and_keeps_what_it_was_sent(server: RunningServer) -> None:
    away, _ = open_raw(server, "away-member")
    away.sendall(subscribe(1, GROUP, 1))
    assert read(away)[0] == 0x90
    there = paho(server, "member-there")
    there.subscribe(GROUP, 1)
    publisher = paho(server, "publisher")
    for n in range(2):  # one each, round robin
        publisher.publish("jobs/x", f"before{n}".encode(), 1)
    [(_, kept, _)] = _publishes(away, within=0.5)  # not acknowledged
    away.close()
    for n in range(6):
        publisher.publish("jobs/x", f"while{n}".encode(), 1)
    got = sorted(there.next().payload for _ in range(7))
    assert got == sorted(
        {b"before0", b"before1"} - {kept} | {f"while{n}".encode() for n in range(6)}
    )
    assert there.nothing(within=0.5)
    back, present = open_raw(server, "away-member")
    try:
        assert present
        again = _publishes(back, within=1.0)
        assert [(kind & 0x08, payload) for kind, payload, _ in again] == [(0x08, kept)]  # DUP
        back.sendall(puback(again[0][2]))
    finally:
        back.close()
