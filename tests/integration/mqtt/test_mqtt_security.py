"""Authentication and authorization through the settings' protocols, with stand-in classes
(the password file and ACL classes plug in the same way)."""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.integration.mqtt.clients import WAIT, OnlyAlice, RunningServer, drop, paho, start_server
from tests.integration.mqtt.raw import connect_packet_311
from tests.waiting import logged

from boxmq.mqtt.settings import Limits, MqttSettings

VERSIONS = [pytest.param(True, id="v5"), pytest.param(False, id="v311")]


class ReadOnlyPublic:
    """Everyone may read public/#; only alice may write, and only to public/#."""

    def can_publish(self, username: str | None, client_id: str, topic: str) -> bool:
        return username == "alice" and topic.startswith("public/")

    def can_subscribe(self, username: str | None, client_id: str, topic_filter: str) -> bool:
        return topic_filter.startswith("public/")


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[RunningServer]:
    settings = MqttSettings(authenticator=OnlyAlice(), authorizer=ReadOnlyPublic())
    with start_server(tmp_path / "root", settings) as running:
        yield running


def test_v5_connect_refused_with_0x86_or_0x87(guarded: RunningServer) -> None:
    paho(guarded, "c1", username="alice", password="wrong", expect=0x86)
    paho(guarded, "c2", expect=0x87)  # no user name at all: not authorized
    paho(guarded, "c3", username="alice", password="secret")


@pytest.mark.parametrize(
    ("username", "password", "code"),
    [("alice", b"wrong", 4), (None, None, 5), ("alice", b"secret", 0)],
    ids=["bad-password", "anonymous", "accepted"],
)
def test_v311_connack_return_codes(
    guarded: RunningServer, username: str | None, password: bytes | None, code: int
) -> None:
    with socket.create_connection((guarded.host, guarded.port), timeout=5) as sock:
        sock.sendall(connect_packet_311("id", username=username, password=password))
        assert sock.recv(4) == bytes([0x20, 2, 0, code])


@pytest.mark.parametrize("v5", VERSIONS)
def test_subscribe_refused_in_suback(guarded: RunningServer, v5: bool) -> None:
    client = paho(guarded, "s", v5=v5, username="alice", password="secret")
    [reason] = client.subscribe("private/#", 1)
    assert int(reason.value if hasattr(reason, "value") else reason) == (0x87 if v5 else 0x80)
    [granted] = client.subscribe("public/#", 1)
    assert int(granted.value if hasattr(granted, "value") else granted) == 1


def test_publish_refused_with_puback_0x87_and_not_delivered(guarded: RunningServer) -> None:
    reader = paho(guarded, "reader", username="alice", password="secret")
    reader.subscribe("public/#", 1)
    acks: queue.Queue[Any] = queue.Queue()

    def configure(client: Any) -> None:
        client.on_publish = lambda _c, _u, mid, reason, props: acks.put(int(reason.value))

    writer = paho(guarded, "w", username="alice", password="secret", configure=configure)
    writer.client.publish("private/x", b"no", 1)
    assert acks.get(timeout=WAIT) == 0x87
    writer.client.publish("public/x", b"yes", 1)
    assert acks.get(timeout=WAIT) == 0
    assert reader.next().payload == b"yes"
    assert reader.nothing(0.3)


class NotIntruder(ReadOnlyPublic):
    """As ReadOnlyPublic, but the client id "intruder" may publish nowhere."""

    def can_publish(self, username: str | None, client_id: str, topic: str) -> bool:
        return client_id != "intruder" and super().can_publish(username, client_id, topic)


def test_a_retained_will_the_acl_refuses_replaces_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Will is checked when it is due, as a PUBLISH would be (its CONNECT is accepted): one
    refused is sent to nobody, and, retained, does not replace the topic's retained message
    (an intruder's "offline" would stand for the device's status for good)."""
    settings = MqttSettings(authenticator=OnlyAlice(), authorizer=NotIntruder())
    with start_server(tmp_path / "root", settings) as running:
        device = paho(running, "device", username="alice", password="secret")
        device.publish("public/status", b"online", qos=1, retain=True)
        reader = paho(running, "reader", username="alice", password="secret")
        reader.subscribe("public/#", 1)
        assert reader.next().payload == b"online"

        def will(client: Any) -> None:
            client.will_set("public/status", b"offline", 1, retain=True)

        with caplog.at_level(logging.INFO, "boxmq.mqtt"):
            drop(paho(running, "intruder", username="alice", password="secret", configure=will))
            assert reader.nothing(0.5)
            late = paho(running, "late", username="alice", password="secret")
            late.subscribe("public/#", 1)
            assert late.next().payload == b"online"  # the topic's retained message, still
        assert "client intruder may not publish its will to public/status" in caplog.messages


def test_max_connections(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="boxmq.mqtt")
    with start_server(tmp_path / "root", MqttSettings(limits=Limits(max_connections=1))) as running:
        first = paho(running, "one")
        for _ in range(3):  # a client that tries again and again is told of once
            second = socket.create_connection((running.host, running.port), timeout=5)
            with second, contextlib.suppress(ConnectionResetError):  # aborted: reset, or closed
                assert second.recv(10) == b""
        first.publish("still/works", b"x", 1)
        first.stop()
        paho(running, "next").stop()  # its place free: accepted again, and that is told
    [refused] = logged(caplog, "refused:")
    # The operator reads which setting to raise, as the config file spells it.
    assert "refused: 1 connection(s) already, [mqtt.limits] max_connections = 1 (told once" in (
        refused
    )
    [again] = logged(caplog, "accepted again under")
    assert again.endswith("max_connections = 1 (3 refused meanwhile)")


class HeldHash:
    """A password check that takes as long as the test wants: a wrong password's check waits
    until `release` is set (a scrypt that never ends, while the test looks)."""

    def __init__(self) -> None:
        self.under_way = threading.Semaphore(0)  # one release per check begun and waiting
        self.release = threading.Event()

    def authenticate(self, username: str | None, password: bytes | None, client_id: str) -> bool:
        if password != b"secret":
            self.under_way.release()
            self.release.wait(timeout=4 * WAIT)
        return username == "alice" and password == b"secret"


def test_password_checks_do_not_stall_the_clients_already_in(tmp_path: Path) -> None:
    """Checked on the loop, four wrong passwords held every other client for 1.2 s. Here a
    round trip must be made while wrong passwords' checks are still under way, however long
    a loaded machine takes: a check on the loop would hold it until they end."""
    checks = HeldHash()
    with start_server(tmp_path / "root", MqttSettings(authenticator=checks)) as running:
        inside = paho(running, "inside", username="alice", password="secret")
        inside.subscribe("t", 1)
        with ThreadPoolExecutor(4) as pool:
            refused = [
                pool.submit(
                    paho, running, f"guess{n}", username="alice", password="guess", expect=0x86
                )
                for n in range(4)
            ]
            try:
                assert checks.under_way.acquire(timeout=WAIT)  # a check is under way, held
                inside.publish("t", b"round trip", 1)
                assert inside.next().payload == b"round trip"
            finally:
                checks.release.set()
            for future in refused:
                future.result(timeout=WAIT)
