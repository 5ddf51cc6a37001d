"""After a restart of `boxmq serve`, a persistent session gets the messages it had been sent and
not acknowledged before those that came while it was away: one topic's messages go out in the
order they were published (MQTT 5.0 §4.6), across a SIGTERM and a SIGKILL alike."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    paho,
    serve_fresh,
    serve_process,
    stop_process,
)
from tests.integration.mqtt.raw import (
    Received,
    connect_packet_311,
    open_raw,
    packet,
    puback,
    pubcomp,
    publish_fields,
    pubrec,
    read,
    string,
    subscribe,
    take_publishes,
)

PUBLISH = 0x30


def _taken(sock: socket.socket, count: int, *, ack: bool) -> list[bytes]:
    """The payloads of the next `count` PUBLISHes, acknowledged or not."""
    payloads: list[bytes] = []
    while len(payloads) < count:
        kind, body = read(sock)
        assert kind & 0xF0 == PUBLISH, hex(kind)
        payload, packet_id = publish_fields(body)
        payloads.append(payload)
        if ack:
            sock.sendall(puback(packet_id))
    return payloads


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_messages_left_unacknowledged_come_back_first_after_a_restart(
    tmp_path: Path, stop: signal.Signals
) -> None:
    address, server = serve_fresh(tmp_path)
    sent = [f"m{n}".encode() for n in range(10)]
    try:
        subscriber, _ = open_raw(address, "in-order")
        subscriber.sendall(subscribe(1, "order/t", 1))
        assert read(subscriber)[0] == 0x90  # SUBACK
        publisher = paho(address, "publisher")
        for payload in sent[:5]:
            publisher.publish("order/t", payload, 1)
        assert _taken(subscriber, 5, ack=False) == sent[:5]
        subscriber.close()  # away, its five messages in flight
        for payload in sent[5:]:
            publisher.publish("order/t", payload, 1)
        publisher.stop()
    finally:
        server.send_signal(stop)
        server.wait(timeout=20)
    server = serve_process(address.root, address.port)
    back, present = open_raw(address, "in-order")
    try:
        assert present
        assert _taken(back, 10, ack=True) == sent
    finally:
        back.close()
        stop_process(server)


# (topic, QoS) of each message, one at a time: the copies in flight of two subscriptions
# interleave, QoS 1 and 2 mixed. The last is QoS 2: the record written before its write names
# every one (a SIGKILL loses what a record names only at a close).
_INTERLEAVED = [("a/1", 1), ("b/1", 2), ("a/2", 2), ("b/2", 1), ("b/3", 1), ("a/3", 2)]
_VERSIONS = pytest.mark.parametrize("v5", [False, True], ids=["v311", "v5"])


def _open(address: RunningServer, *, v5: bool) -> tuple[socket.socket, bool]:
    """The device's connection, CleanSession / Clean Start 0, and whether its session was
    present; raw, for the packet ids and DUP that paho hides."""
    if v5:
        return open_raw(address, "device")
    sock = socket.create_connection((address.host, address.port), timeout=WAIT)
    sock.sendall(connect_packet_311("device", clean=False))
    kind, body = read(sock)
    assert (kind, body[1]) == (0x20, 0), body.hex()  # CONNACK, accepted
    return sock, bool(body[0] & 0x01)


def _take(sock: socket.socket, count: int, *, v5: bool) -> list[Received]:
    """The next `count` PUBLISHes, not answered (a PUBREL is answered with PUBCOMP)."""
    if v5:
        return take_publishes(sock, count)
    sock.settimeout(WAIT)
    got: list[Received] = []
    while len(got) < count:
        kind, body = read(sock)
        if kind & 0xF0 == 0x60:
            sock.sendall(pubcomp(int.from_bytes(body[:2], "big")))
            continue
        assert kind & 0xF0 == PUBLISH, hex(kind)
        end = 2 + int.from_bytes(body[:2], "big")  # 3.1.1: no properties after the id
        packet_id = int.from_bytes(body[end : end + 2], "big")
        got.append(Received(body[end + 2 :], packet_id, bool(kind & 0x08)))
    return got


def _device(address: RunningServer, *, v5: bool) -> socket.socket:
    device, _ = _open(address, v5=v5)
    for packet_id, filter in enumerate(("a/#", "b/#"), start=1):
        options = b"\x00" if v5 else b""  # v5: no properties
        body = packet_id.to_bytes(2, "big") + options + string(filter) + bytes([2])
        device.sendall(packet(0x82, body))
        assert read(device)[0] == 0x90  # SUBACK
    return device


def _interleaved(address: RunningServer, device: socket.socket, *, v5: bool) -> list[Received]:
    """Each message of `_INTERLEAVED` published and taken (not answered) before the next."""
    publisher = paho(address, "publisher")
    held: list[Received] = []
    for n, (topic, qos) in enumerate(_INTERLEAVED):
        publisher.publish(topic, f"m{n}".encode(), qos)
        held += _take(device, 1, v5=v5)
    publisher.stop()
    assert [m.payload for m in held] == [f"m{n}".encode() for n in range(len(_INTERLEAVED))]
    return held


def _new_ones(address: RunningServer) -> None:
    """What comes for the device while it is away, a message for each subscription."""
    publisher = paho(address, "publisher")
    publisher.publish("a/4", b"new-a", 1)
    publisher.publish("b/4", b"new-b", 1)
    publisher.stop()


def _resent_in_order_then_new(device: socket.socket, held: list[Received], *, v5: bool) -> None:
    """MQTT-4.6.0-1: what was in flight comes again in the order it was first sent, across
    the subscriptions, under its packet ids with DUP; then, and only then, the new ones."""
    again = _take(device, len(held) + 2, v5=v5)
    assert again[: len(held)] == [(m.payload, m.packet_id, True) for m in held]
    assert sorted((m.payload, m.dup) for m in again[len(held) :]) == [
        (b"new-a", False),
        (b"new-b", False),
    ]


@_VERSIONS
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_what_two_subscriptions_had_in_flight_goes_again_in_its_order_after_a_restart(
    tmp_path: Path, stop: signal.Signals, v5: bool
) -> None:
    """After a restart, the copies in flight went again one subscription after the other
    (a/# first: m0 m2 m5, then b/#), and a/#'s new message before b/#'s copies sent again."""
    address, server = serve_fresh(tmp_path)
    device: socket.socket | None = None
    try:
        device = _device(address, v5=v5)
        held = _interleaved(address, device, v5=v5)
        server.send_signal(stop)  # SIGKILL: the device still connected, no close is written
        server.wait(timeout=20)
        device.close()
        server = serve_process(address.root, address.port)
        _new_ones(address)
        device, present = _open(address, v5=v5)
        assert present
        _resent_in_order_then_new(device, held, v5=v5)
    finally:
        if device is not None:
            device.close()
        stop_process(server)


@_VERSIONS
def test_what_two_subscriptions_had_in_flight_goes_again_in_its_order_on_a_reconnect(
    server: RunningServer, v5: bool
) -> None:
    """The same without a restart: the session held in memory sends again what it has in
    flight, in the order it was sent, before anything that came while its client was away."""
    device = _device(server, v5=v5)
    held = _interleaved(server, device, v5=v5)
    device.close()
    _new_ones(server)
    device, present = _open(server, v5=v5)
    try:
        assert present
        _resent_in_order_then_new(device, held, v5=v5)
    finally:
        device.close()


def test_what_two_subscriptions_had_in_flight_goes_in_its_order_through_a_smaller_window(
    tmp_path: Path,
) -> None:
    """A client back after a restart with a Receive Maximum of 1 gets what was in flight one
    at a time, each as the one before is answered, still in the order first sent, then the
    new ones."""
    address, server = serve_fresh(tmp_path)
    device: socket.socket | None = None
    try:
        device = _device(address, v5=True)
        held = _interleaved(address, device, v5=True)
        device.close()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
        server = serve_process(address.root, address.port)
        _new_ones(address)
        device, present = open_raw(address, "device", receive_maximum=1)
        assert present
        qos_of = {f"m{n}".encode(): qos for n, (_, qos) in enumerate(_INTERLEAVED)}
        got = []
        for _ in range(len(held) + 2):
            [message] = take_publishes(device, 1)
            got.append(message)
            # A QoS 2 one's slot is free at PUBCOMP, sent by `take_publishes` for its PUBREL.
            qos2 = qos_of.get(message.payload) == 2
            device.sendall(pubrec(message.packet_id) if qos2 else puback(message.packet_id))
        assert got[: len(held)] == [(m.payload, m.packet_id, True) for m in held]
        assert sorted(m.payload for m in got[len(held) :]) == [b"new-a", b"new-b"]
    finally:
        if device is not None:
            device.close()
        stop_process(server)
