"""`[mqtt.limits]` read from a real config file: the highest values the file accepts still
make a server that v5 and 3.1.1 clients can use (the values go to v5 clients in CONNACK)."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import paho, serving_fresh, start_server
from tests.integration.mqtt.raw import (
    open_raw,
    puback,
    publish,
    publish_fields,
    publish_qos2,
    pubrel,
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
    with start_server(tmp_path / "root", config.mqtt) as running:
        sub = paho(running, "sub", v5=v5)
        pub = paho(running, "pub", v5=v5)
        sub.subscribe("limits/#", 1)
        pub.publish("limits/a", b"at the maximum", 1)
        assert sub.next().payload == b"at the maximum"
        sub.stop()
        pub.stop()


def _eleven_bytes_refused_ten_taken(sock: socket.socket) -> None:
    """Under `[exactly_once] max_message_size = 10`: an 11-byte QoS 2 PUBLISH gets PUBREC 0x97
    (Quota exceeded) with a Reason String naming the cap, a 10-byte one PUBREC success."""
    sock.sendall(publish_qos2("eo/big", 1, b"eleven byte"))
    kind, body = read(sock)
    assert (kind, body[:3]) == (0x50, b"\x00\x01\x97")  # PUBREC: quota exceeded
    assert b"over max_message_size (10)" in body  # its Reason String
    sock.sendall(publish_qos2("eo/small", 2, b"ten bytes!"))
    kind, body = read(sock)
    assert (kind, body[:2]) == (0x50, b"\x00\x02")
    assert body[2:3] in (b"", b"\x00")  # success


def test_exactly_once_limits_from_the_file_reach_the_qos2_intake(tmp_path: Path) -> None:
    """`[exactly_once] max_message_size` in `boxmq serve`'s file: a bigger QoS 2 PUBLISH is
    refused with PUBREC 0x97 (Quota exceeded: a PUBREC carries only a PUBREC Reason Code,
    MQTT-3.5.2-1, and 0x95 Packet too large is none), its Reason String naming the cap; a
    smaller one is stored (PUBREC 0x00)."""
    config = tmp_path / "boxmq.toml"
    config.write_text("[exactly_once]\nmax_message_size = 10\n")
    with serving_fresh(tmp_path, "--config", str(config)) as address:
        sock, _ = open_raw(address, "raw-pub")
        with sock:
            _eleven_bytes_refused_ten_taken(sock)


def test_max_message_size_bounds_a_qos2_message_held_in_memory_as_it_bounds_the_intake(
    tmp_path: Path,
) -> None:
    """A non-persistent publisher's QoS 2 message with no durable subscriber is held in
    memory until its PUBREL, not in the intake: `[exactly_once] max_message_size` bounds it
    alike (PUBREC 0x97 naming the cap). Found by a hunt across the doors: the hold checked
    the counts and bytes, not the size, so the same 11 bytes refused to a persistent
    publisher were taken from a clean one, for every MQTT subscriber of the topic."""
    config = tmp_path / "boxmq.toml"
    config.write_text("[exactly_once]\nmax_message_size = 10\n")
    with serving_fresh(tmp_path, "--config", str(config)) as address:
        sock, _ = open_raw(address, "clean-pub", clean=True, expiry=0)
        with sock:
            _eleven_bytes_refused_ten_taken(sock)


def test_exactly_once_limits_bound_the_qos2_messages_a_client_holds_in_memory(
    tmp_path: Path,
) -> None:
    """A non-persistent publisher's QoS 2 message for memory subscribers is kept in its session
    until its PUBREL, not in working/: `max_pending_per_source` and `max_bytes_per_source`
    bound those too. Over them, v5 gets PUBREC 0x97 (a PUBREL frees the room) and 3.1.1, which
    has no Receive Maximum and no negative PUBREC, is disconnected: it could hold 65,535."""
    config = tmp_path / "boxmq.toml"
    config.write_text("[exactly_once]\nmax_pending_per_source = 3\nmax_bytes_per_source = 100\n")
    with serving_fresh(tmp_path, "--config", str(config)) as address:
        sock, _ = open_raw(address, "v5", clean=True, expiry=0)
        with sock:
            for packet_id in (1, 2, 3, 4):
                sock.sendall(publish_qos2("eo/a", packet_id, b"ten bytes!"))
            answers = [read(sock) for _ in range(4)]
            assert [body[:3] for _, body in answers[:3]] == [b"\x00\x01", b"\x00\x02", b"\x00\x03"]
            assert (answers[3][0], answers[3][1][:3]) == (0x50, b"\x00\x04\x97")  # quota
            assert b"max_pending_per_source (3)" in answers[3][1]  # its Reason String
            sock.sendall(pubrel(1))
            assert read(sock) == (0x70, b"\x00\x01")  # PUBCOMP: its room is free again
            sock.sendall(publish_qos2("eo/a", 4, b"ten bytes!"))
            assert read(sock) == (0x50, b"\x00\x04")
        sock, _ = open_raw(address, "v5-bytes", clean=True, expiry=0)
        with sock:
            sock.sendall(publish_qos2("eo/a", 1, bytes(60)) + publish_qos2("eo/a", 2, bytes(60)))
            assert read(sock) == (0x50, b"\x00\x01")
            kind, body = read(sock)
            assert (kind, body[:3]) == (0x50, b"\x00\x02\x97")
            assert b"max_bytes_per_source (100)" in body
        sock, _ = open_raw(address, "v5-topic", clean=True, expiry=0)
        with sock:  # over by its topic, not its payload: the limit it passes is named
            sock.sendall(publish_qos2("eo/" + "t" * 90, 1, bytes(20)))
            kind, body = read(sock)
            assert (kind, body[:3]) == (0x50, b"\x00\x01\x97")
            assert b"max_bytes_per_source (100)" in body
        with socket.create_connection((address.host, address.port), timeout=10) as old:
            old.sendall(bytes.fromhex("100f 00044d515454 04 02 001e 0003 763331"))  # 3.1.1
            assert read(old) == (0x20, b"\x00\x00")
            for packet_id in (1, 2, 3, 4):  # 3.1.1 PUBLISH QoS 2: no properties
                body = b"\x00\x04eo/a" + packet_id.to_bytes(2, "big") + b"ten bytes!"
                old.sendall(bytes([0x34, len(body)]) + body)
            assert [read(old)[0] for _ in range(3)] == [0x50] * 3
            assert read(old) == (0, b"")  # closed: nothing to say no with


def test_exactly_once_refusals_of_a_persistent_session_name_its_client_id(
    tmp_path: Path,
) -> None:
    """A persistent session's QoS 2 PUBLISH goes to the exactly-once intake, whose refusals
    quoted its source: the Reason String showed the client boxmq's internal name for it
    (`'mqtt:persist'`), not its client id as the held messages' refusals say it."""
    config = tmp_path / "boxmq.toml"
    config.write_text("[exactly_once]\nmax_pending_per_source = 1\n")
    with serving_fresh(tmp_path, "--config", str(config)) as address:
        sock, _ = open_raw(address, "persist")
        with sock:
            sock.sendall(publish_qos2("eo/a", 1, b"one") + publish_qos2("eo/a", 2, b"two"))
            assert read(sock) == (0x50, b"\x00\x01")
            kind, body = read(sock)
            assert (kind, body[:3]) == (0x50, b"\x00\x02\x97")  # quota
            assert b"client persist: this message would pass max_pending_per_source (1)" in body
            assert b"mqtt:" not in body, body


def test_trusted_sources_of_the_file_choose_who_may_publish_at_qos_2(tmp_path: Path) -> None:
    """`[exactly_once] trusted_sources` in `boxmq serve`'s file (before, the embedded API's
    alone): a client whose id it does not list has its QoS 2 PUBLISH refused with PUBREC 0x87
    Not authorized, naming its client id, whether stored or to be held in memory; a listed
    one's is stored and delivered, and QoS 1 stays open to both."""
    config = tmp_path / "boxmq.toml"
    config.write_text('[exactly_once]\ntrusted_sources = ["mqtt:billing", "alice@example.org"]\n')
    with serving_fresh(tmp_path, "--config", str(config)) as address:
        reader = paho(address, "reader", clean=False, expiry=300)
        reader.subscribe("eo/#", 2)
        stranger, _ = open_raw(address, "stranger")
        with stranger:
            stranger.sendall(publish_qos2("eo/a", 1, b"from a stranger"))
            kind, body = read(stranger)
            assert (kind, body[:3]) == (0x50, b"\x00\x01\x87")  # PUBREC: not authorized
            assert b"client stranger may not send messages exactly once" in body
            stranger.sendall(publish("eo/b", b"at least once", qos=1, packet_id=2))
            assert read(stranger) == (0x40, b"\x00\x02")  # PUBACK
        # Connected clean, for a subscriber in memory alone: held until its PUBREL, not stored.
        watcher = paho(address, "watcher")
        watcher.subscribe("mem/#", 2)
        passer_by, _ = open_raw(address, "passer-by", clean=True, expiry=0)
        with passer_by:
            passer_by.sendall(publish_qos2("mem/a", 1, b"held in memory"))
            kind, body = read(passer_by)
            assert (kind, body[:3]) == (0x50, b"\x00\x01\x87")
        assert watcher.nothing()
        watcher.stop()
        billing, _ = open_raw(address, "billing")
        with billing:
            billing.sendall(publish_qos2("eo/c", 1, b"exactly once"))
            assert read(billing) == (0x50, b"\x00\x01")  # PUBREC: stored
            billing.sendall(pubrel(1))
            assert read(billing) == (0x70, b"\x00\x01")  # PUBCOMP
        got = [reader.next() for _ in range(2)]
        assert [(m.topic, m.payload) for m in got] == [
            ("eo/b", b"at least once"),
            ("eo/c", b"exactly once"),
        ]
        reader.stop()


def test_exactly_once_totals_bound_the_qos2_messages_all_clients_hold_in_memory(
    tmp_path: Path,
) -> None:
    """`max_pending_total` and `max_bytes_total` bound what all non-persistent publishers
    hold in memory until their PUBRELs, together, as they bound working/: clients each under
    their own caps held past them all the same, as many as connected. A session's end takes
    its holds out of the totals."""
    config = tmp_path / "boxmq.toml"
    config.write_text("[exactly_once]\nmax_pending_total = 4\nmax_bytes_total = 100\n")
    with serving_fresh(tmp_path, "--config", str(config)) as address:
        first, _ = open_raw(address, "first", clean=True, expiry=0)
        with first, open_raw(address, "second", clean=True, expiry=0)[0] as second:
            for packet_id in (1, 2, 3):
                first.sendall(publish_qos2("eo/a", packet_id, b"ten bytes!"))
            assert [read(first) for _ in range(3)] == [(0x50, bytes([0, n])) for n in (1, 2, 3)]
            second.sendall(publish_qos2("eo/a", 1, b"ten bytes!"))
            assert read(second) == (0x50, b"\x00\x01")  # the fourth of all
            second.sendall(publish_qos2("eo/a", 2, b"ten bytes!"))
            kind, body = read(second)
            assert (kind, body[:3]) == (0x50, b"\x00\x02\x97")  # quota
            assert b"max_pending_total (4), all clients together" in body
            first.close()  # its session ends: its three leave the totals
            deadline = time.monotonic() + 10
            while True:
                second.sendall(publish_qos2("eo/a", 2, b"ten bytes!"))
                if read(second) == (0x50, b"\x00\x02"):
                    break
                assert time.monotonic() < deadline, "the first session's holds still count"
                time.sleep(0.05)
            second.sendall(publish_qos2("eo/a", 3, bytes(81)))  # 20 held + 81 > 100
            kind, body = read(second)
            assert (kind, body[:3]) == (0x50, b"\x00\x03\x97")
            assert b"max_bytes_total (100), all clients together" in body


def test_a_sessions_queue_is_capped_in_bytes(tmp_path: Path) -> None:
    """Behind a window of one, a queue of at most 10 bytes: the second message of 8 bytes
    waits, the third is dropped (a slow subscriber holds no more than that in memory)."""
    with start_server(
        tmp_path / "root", MqttSettings(limits=Limits(max_inflight=1, max_queued_bytes=10))
    ) as running:
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
