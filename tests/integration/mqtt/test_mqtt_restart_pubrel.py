"""A persistent publisher's QoS 2 message answered with PUBREC, whose PUBREL comes after a
restart of the server (SIGTERM or SIGKILL): the exactly-once intake kept it in working/, and
the PUBREL sends it on, once, to the durable subscriptions and to the subscribers in memory,
as it would without the restart, with its properties and what is left of its interval."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    paho,
    recorded_away,
    serve_fresh,
    serve_process,
    stop_process,
)
from tests.integration.mqtt.raw import open_raw, packet, pubrel, read, string

INTERVAL = 100  # seconds: the Message Expiry Interval of the message here
PUBREC, PUBCOMP = 0x50, 0x70


def _publish(packet_id: int, *, dup: bool = False, properties: bool = True) -> bytes:
    """A QoS 2 PUBLISH to kept/1 with, unless told, a Message Expiry Interval and a User
    Property (independent bytes: MQTT 5.0 §3.3.2.3)."""
    props = b""
    if properties:
        props = bytes([0x02]) + INTERVAL.to_bytes(4, "big") + b"\x26" + string("k") + string("v")
    body = string("kept/1") + packet_id.to_bytes(2, "big") + bytes([len(props)]) + props
    return packet(0x34 | (0x08 if dup else 0), body + b"payload")


def _answer(sock: socket.socket) -> tuple[int, int, int]:
    """(packet type, packet id, reason) of the next packet, a PUBREC or a PUBCOMP."""
    kind, body = read(sock)
    return kind, int.from_bytes(body[:2], "big"), body[2] if len(body) > 2 else 0


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
@pytest.mark.parametrize("repeat", [False, True], ids=["pubrel", "publish-again"])
def test_a_pubrel_after_a_restart_reaches_the_subscribers_in_memory_too(
    tmp_path: Path, how: signal.Signals, repeat: bool
) -> None:
    """Without a restart the subscribers in memory get the message at its PUBREL from the
    PUBLISH the server holds; after one they got nothing (the PUBREL found nothing held), or,
    when the client sent its PUBLISH again first, the repeat's copy: its properties instead of
    the stored ones, and its interval counted from the repeat."""
    target, server = serve_fresh(tmp_path)
    try:
        durable = paho(target, "durable", clean=False, expiry=300)
        durable.subscribe("kept/#", 2)
        durable.stop()
        publisher, _ = open_raw(target, "publisher")
        publisher.sendall(_publish(7))
        assert _answer(publisher) == (PUBREC, 7, 0)
        published = time.monotonic()
        publisher.close()
        recorded_away(target.root, "publisher")  # before a SIGKILL
        server.send_signal(how)
        server.wait(timeout=20)
        server = serve_process(target.root, target.port)
        memory = paho(target, "memory")
        memory.subscribe("kept/#", 2)
        publisher, present = open_raw(target, "publisher")
        assert present
        if repeat:  # the same message, without its properties: which copy goes on shows
            publisher.sendall(_publish(7, dup=True, properties=False))
            assert _answer(publisher) == (PUBREC, 7, 0)
        time.sleep(max(0.0, published + 1.5 - time.monotonic()))  # a second of its interval
        publisher.sendall(pubrel(7))
        assert _answer(publisher) == (PUBCOMP, 7, 0)
        for subscriber in (memory, paho(target, "durable", clean=False, expiry=300)):
            got = subscriber.next()
            assert (got.topic, got.payload, got.qos) == ("kept/1", b"payload", 2)
            assert got.properties.UserProperty == [("k", "v")]
            assert 0 < got.properties.MessageExpiryInterval < INTERVAL
            assert subscriber.nothing(0.5)  # once
        publisher.close()
    finally:
        stop_process(server)
