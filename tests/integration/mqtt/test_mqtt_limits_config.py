"""`[mqtt.limits]` read from a real config file: the highest values the file accepts still
make a server that v5 and 3.1.1 clients can use (the values go to v5 clients in CONNACK)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import paho, serve_fresh, start_server, stop_process
from tests.integration.mqtt.raw import (
    open_raw,
    puback,
    publish_fields,
    publish_qos2,
    read,
    subscribe,
)

from boxmq.config import LIMITS_HIGHEST, load_config
from boxmq.mqtt.settings import Limits, MqttSettings


@pytest.mark.parametrize("v5", [pytest.param(True, id="v5"), pytest.param(False, id="v311")])
def test_limits_at_the_highest_values_the_file_accepts(tmp_path: Path, v5: bool) -> None:
    path = tmp_path / "boxmq.toml"
    path.write_text("[mqtt.limits]\n" + "".join(f"{k} = {v}\n" for k, v in LIMITS_HIGHEST.items()))
    config = load_config(path)
    running = start_server(tmp_path / "root", config.mqtt)
    try:
        sub = paho(running, "sub", v5=v5)
        pub = paho(running, "pub", v5=v5)
        sub.subscribe("limits/#", 1)
        pub.publish("limits/a", b"at the maximum", 1)
        assert sub.next().payload == b"at the maximum"
        sub.stop()
        pub.stop()
    finally:
        running.shutdown()


def test_exactly_once_limits_from_the_file_reach_the_qos2_intake(tmp_path: Path) -> None:
    """`[exactly_once] max_message_size` in `boxmq serve`'s file: a bigger QoS 2 PUBLISH is
    refused with PUBREC 0x95 (Packet too large), a smaller one is stored (PUBREC 0x00)."""
    config = tmp_path / "boxmq.toml"
    config.write_text("[exactly_once]\nmax_message_size = 10\n")
    address, process = serve_fresh(tmp_path, "--config", str(config))
    try:
        sock, _ = open_raw(address, "raw-pub")
        with sock:
            sock.sendall(publish_qos2("eo/big", 1, b"eleven byte"))
            kind, body = read(sock)
            assert (kind, body[:3]) == (0x50, b"\x00\x01\x95")  # PUBREC: packet too large
            assert b"over max_message_size (10)" in body  # its Reason String
            sock.sendall(publish_qos2("eo/small", 2, b"ten bytes!"))
            kind, body = read(sock)
            assert (kind, body[:2]) == (0x50, b"\x00\x02")
            assert body[2:3] in (b"", b"\x00")  # success
    finally:
        stop_process(process)


def test_a_sessions_queue_is_capped_in_bytes(tmp_path: Path) -> None:
    """Behind a window of one, a queue of at most 10 bytes: the second message of 8 bytes
    waits, the third is dropped (a slow subscriber holds no more than that in memory)."""
    running = start_server(
        tmp_path / "root", MqttSettings(limits=Limits(max_inflight=1, max_queued_bytes=10))
    )
    try:
        slow, _ = open_raw(running, "slow", clean=True, expiry=0)  # its queue in memory
        slow.sendall(subscribe(1, "t", 1))
        assert read(slow)[0] == 0x90
        publisher = paho(running, "publisher")
        for n in range(3):
            publisher.publish("t", f"message{n}".encode(), 1)
        got = []
        slow.settimeout(1.0)
        with contextlib.suppress(TimeoutError):
            while True:
                _, body = read(slow)
                payload, packet_id = publish_fields(body)
                got.append(payload)
                slow.sendall(puback(packet_id))
        assert got == [b"message0", b"message1"]
        slow.close()
    finally:
        running.shutdown()
