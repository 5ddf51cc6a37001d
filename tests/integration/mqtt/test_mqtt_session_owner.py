"""A session is its user's: another user's client cannot take it over, resume it or end it by
its client id, and what the ACL no longer allows after a restart is not delivered from it."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import Paho, paho, start_server
from tests.integration.mqtt.raw import connect_packet_311
from tests.waiting import logged

import boxmq
from boxmq.clock import ManualClock
from boxmq.mqtt.server import MqttServer
from boxmq.mqtt.settings import Listener, MqttSettings

USERS = {"alice": b"wonderland", "bob": b"builder"}


class Passwords:
    def authenticate(self, username: str | None, password: bytes | None, client_id: str) -> bool:
        return username is not None and USERS.get(username) == password


class OwnTopics:
    """Each user reads and writes under its own name; `revoked` filters are refused."""

    def __init__(self, revoked: frozenset[str] = frozenset()) -> None:
        self.revoked = revoked

    def can_publish(self, username: str | None, client_id: str, topic: str) -> bool:
        return topic.startswith(f"{username}/")

    def can_subscribe(self, username: str | None, client_id: str, topic_filter: str) -> bool:
        return topic_filter.startswith(f"{username}/") and topic_filter not in self.revoked


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_another_user_cannot_resume_a_persistent_session(tmp_path: Path, v5: bool) -> None:
    with start_server(
        tmp_path / "root", MqttSettings(authenticator=Passwords(), authorizer=OwnTopics())
    ) as running:

        def persistent(user: str, expect: int = 0) -> Paho:
            password = USERS[user].decode()
            expiry = 3600 if v5 else None
            return paho(running, "laptop", v5=v5, clean=False, expiry=expiry, username=user,
                        password=password, expect=expect)  # fmt: skip

        alice = persistent("alice")
        alice.subscribe("alice/inbox", 1)
        alice.stop()
        sender = paho(running, "sender", username="alice", password="wonderland")
        sender.publish("alice/inbox", b"private", 1)
        refused = 0x85  # Client Identifier not valid (paho's name for 3.1.1's 0x02 too)
        persistent("bob", expect=refused)
        paho(running, "laptop", username="bob", password="builder", v5=v5, expect=refused)
        back = persistent("alice")
        assert back.session_present  # neither resumed nor ended by bob
        assert back.next().payload == b"private"


def test_a_subscription_the_acl_no_longer_allows_is_removed_at_resumption(
    tmp_path: Path,
) -> None:
    with start_server(
        tmp_path / "root", MqttSettings(authenticator=Passwords(), authorizer=OwnTopics())
    ) as running:
        alice = paho(
            running, "laptop", username="alice", password="wonderland", clean=False, expiry=3600
        )
        alice.subscribe("alice/salaries", 1)
        alice.subscribe("alice/news", 1)
        alice.stop()
    revoked = OwnTopics(revoked=frozenset({"alice/salaries"}))
    with start_server(
        tmp_path / "root", MqttSettings(authenticator=Passwords(), authorizer=revoked)
    ) as running:
        back = paho(
            running, "laptop", username="alice", password="wonderland", clean=False, expiry=3600
        )
        assert back.session_present
        sender = paho(running, "sender", username="alice", password="wonderland")
        sender.publish("alice/salaries", b"secret", 1)
        sender.publish("alice/news", b"public", 1)
        assert back.next().payload == b"public"
        assert back.nothing(within=0.5)


def _connect(port: int, user: str) -> bytes:
    """A 3.1.1 CONNECT of client id "laptop", persistent, as `user`: its CONNACK."""
    connect = connect_packet_311("laptop", clean=False, username=user, password=USERS[user])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(connect)
        return client.recv(4)


def test_a_refused_takeover_is_told_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another user's device retrying with a client id whose session is alice's wrote a
    warning a try; as other refused CONNECTs, the first is told, the next counted."""
    clock = ManualClock()
    settings = MqttSettings(
        listeners=(Listener("127.0.0.1", 0),), authenticator=Passwords(), authorizer=OwnTopics()
    )
    refused = "refused: its session belongs to another user"

    async def run() -> None:
        box = boxmq.open(tmp_path / "root", fsync="never")
        server = MqttServer(box, settings, clock=clock)
        try:
            [(_, port)] = await server.start()
            assert await asyncio.to_thread(_connect, port, "alice") == bytes.fromhex("20020000")
            for _ in range(3):
                answer = await asyncio.to_thread(_connect, port, "bob")
                assert answer == bytes.fromhex("20020002")  # identifier rejected
            [line] = logged(caplog, refused)
            assert line.startswith("client 'laptop' (user 'bob', from 127.0.0.1:")
            clock.advance(10)
            server.broker.tick(clock.now())
            assert logged(caplog, "more CONNECT(s)") == [
                "127.0.0.1: 2 more CONNECT(s) refused in the last 10s: its session belongs to "
                "another user"
            ]
        finally:
            await server.close()
            box.close()

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        asyncio.run(run())
