"""The MQTT door at its edges, with real clients: topics and filters at the sizes and with the
characters MQTT allows (every Unicode plane, the characters a file name or its codec treats
apart, U+FEFF, NFC and NFD as two topics), many user properties, payloads at the packet limit,
a SUBSCRIBE of 1,000 filters, a `#` over 10,000 retained topics; persistent sessions (on disk,
in names of 255 bytes) as well as clean ones. Each bounded to a few seconds."""

from __future__ import annotations

import socket

import pytest
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    paho,
)
from tests.integration.mqtt.raw import connect_packet, packet, pubrel, read

# A topic over what a stored message's name has room for (docs/mqtt.md, "Persistence").
UNSTORABLE = "w/" + "x" * 300


def _utf8(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def _connect(server: RunningServer, v5: bool) -> socket.socket:
    """A raw connection of a non-persistent session."""
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    if v5:
        sock.sendall(connect_packet("raw", clean=True, expiry=0))
    else:
        sock.sendall(packet(0x10, _utf8("MQTT") + bytes([4, 0x02, 0, 30]) + _utf8("raw")))
    kind, body = read(sock)
    assert (kind, body[1]) == (0x20, 0), body.hex()  # CONNACK, accepted
    return sock


def _publish_qos2_retained(topic: str, packet_id: int, v5: bool) -> bytes:
    properties = b"\x00" if v5 else b""
    return packet(0x35, _utf8(topic) + packet_id.to_bytes(2, "big") + properties + b"r")


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_a_retained_qos_2_message_too_long_to_store_is_refused_before_its_pubrec(
    server: RunningServer, v5: bool
) -> None:
    """A non-persistent session's retained QoS 2 message is written at its PUBREL: its topic,
    too long for a stored message's name, was found only then, after a PUBREC and before a
    PUBCOMP that both said success, and the message was kept by no one on disk (no retained
    message, no persistent session) though its publisher was told it was received. It is
    refused at its PUBLISH now, as a QoS 1 one is: PUBREC 0x80 (3.1.1: the close)."""
    listener = paho(server)
    listener.subscribe("w/#", 2)
    with _connect(server, v5) as sock:
        sock.sendall(_publish_qos2_retained(UNSTORABLE, 7, v5))
        kind, body = read(sock)
        if v5:
            assert kind == 0x50, hex(kind)  # PUBREC
            assert body[:3] == b"\x00\x07\x80", body.hex()  # Unspecified error, as a PUBACK's
            sock.sendall(pubrel(7))
            kind, body = read(sock)
            assert (kind, body[:3]) == (0x70, b"\x00\x07\x92"), body.hex()  # nothing stored
        else:
            assert kind == 0, f"{kind:#x}: the connection should have been closed"
    assert listener.nothing()  # refused as a whole, as a QoS 1 one is
    listener.stop()


def test_the_longest_retained_topic_that_fits_is_kept_and_one_byte_more_is_refused(
    server: RunningServer,
) -> None:
    """The check at PUBLISH and the write at PUBREL agree on the limit, to the byte."""
    room = server.box.topics.topic_room(retain=True)
    with _connect(server, v5=True) as sock:
        for packet_id, topic, reason in ((1, "l" * room, 0), (2, "l" * (room + 1), 0x80)):
            sock.sendall(_publish_qos2_retained(topic, packet_id, v5=True))
            kind, body = read(sock)
            assert (kind, body[2:3] or b"\x00") == (0x50, bytes([reason])), body.hex()  # PUBREC
            sock.sendall(pubrel(packet_id))
            assert read(sock)[0] == 0x70  # PUBCOMP
    late = paho(server)
    late.subscribe("+", 1)
    kept = late.next()
    assert (kept.topic, kept.retain) == ("l" * room, True)
    assert late.nothing()
    late.stop()
