"""After a restart of `boxmq serve`, a persistent session gets the messages it had been sent and
not acknowledged before those that came while it was away: one topic's messages go out in the
order they were published (MQTT 5.0 §4.6), across a SIGTERM and a SIGKILL alike."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import RunningServer, free_port, paho, serve_process
from tests.integration.mqtt.raw import open_raw, puback, publish_fields, read, subscribe

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
    root, port = tmp_path / "root", free_port()
    address = RunningServer(root, None, "127.0.0.1", port, None, None, None, None)  # type: ignore[arg-type]
    sent = [f"m{n}".encode() for n in range(10)]
    server = serve_process(root, port)
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
    server = serve_process(root, port)
    back, present = open_raw(address, "in-order")
    try:
        assert present
        assert _taken(back, 10, ack=True) == sent
    finally:
        back.close()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
