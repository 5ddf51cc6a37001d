"""A share group's member whose persistent session lives on while its client is away takes no
turns meanwhile: the group's messages go to the members that are there. What it had been sent
stays its own, and comes again (DUP) when it returns (MQTT 5.0 §4.8.2 lets the server wait)."""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import RunningServer, paho, paho_properties, start_server
from tests.integration.mqtt.raw import (
    open_raw,
    packet,
    puback,
    publishes,
    pubrec,
    read,
    string,
    subscribe,
    take_publishes,
)
from tests.waiting import until

GROUP = "$share/workers/jobs/#"
# Each PUBLISH a member is expected to get is waited for with `take_publishes` (up to 10 s on a
# loaded machine); only "nothing more" is a short silence.


def test_a_member_away_takes_no_turns_and_keeps_what_it_was_sent(server: RunningServer) -> None:
    away, _ = open_raw(server, "away-member")
    away.sendall(subscribe(1, GROUP, 1))
    assert read(away)[0] == 0x90
    there = paho(server, "member-there")
    there.subscribe(GROUP, 1)
    publisher = paho(server, "publisher")
    for n in range(2):  # one each, round robin
        publisher.publish("jobs/x", f"before{n}".encode(), 1)
    [(kept, _, _)] = take_publishes(away, 1)  # not acknowledged
    assert publishes(away, within=0.5) == []
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
        again = take_publishes(back, 1)
        assert publishes(back, within=0.5) == []
        assert [(m.dup, m.payload) for m in again] == [(True, kept)]
        back.sendall(puback(again[0].packet_id))
    finally:
        back.close()


def _unsubscribe(packet_id: int, filter: str) -> bytes:
    return packet(0xA2, packet_id.to_bytes(2, "big") + b"\x00" + string(filter))


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "persistent"])
def test_a_member_that_unsubscribes_completes_what_it_was_sent_and_nobody_else_gets_it(
    server: RunningServer, clean: bool
) -> None:
    """MQTT-3.10.4-3: the server completes the delivery of what it began to send; the group
    gives each message to one member. It gave the message to the others at the UNSUBSCRIBE,
    and the member's PUBACK then settled nothing: sent twice."""
    leaving, _ = open_raw(server, "leaving-member", clean=clean, expiry=0 if clean else 300)
    leaving.sendall(subscribe(1, GROUP, 1))
    assert read(leaving)[0] == 0x90
    publisher = paho(server, "publisher")
    publisher.publish("jobs/1", b"first", 1)  # the only member: it is the leaving one's
    [(payload, packet_id, _)] = take_publishes(leaving, 1)
    assert publishes(leaving, within=0.5) == []
    assert payload == b"first"
    staying = paho(server, "member-staying")
    staying.subscribe(GROUP, 1)
    leaving.sendall(_unsubscribe(2, GROUP))
    assert read(leaving)[0] == 0xB0  # UNSUBACK
    assert staying.nothing(within=0.5)
    leaving.sendall(puback(packet_id))
    publisher.publish("jobs/2", b"second", 1)
    assert staying.next().payload == b"second"
    assert staying.nothing(within=0.5)  # "first" went to nobody else
    assert publishes(leaving, within=0.3) == []  # and nothing more to the member that left
    leaving.close()
    for client in (staying, publisher):
        client.stop()


def test_a_member_that_unsubscribed_and_ends_without_settling_gives_it_to_the_others(
    server: RunningServer,
) -> None:
    leaving, _ = open_raw(server, "leaving-member", clean=True, expiry=0)
    leaving.sendall(subscribe(1, GROUP, 1))
    assert read(leaving)[0] == 0x90
    publisher = paho(server, "publisher")
    publisher.publish("jobs/1", b"first", 1)
    assert [m.payload for m in take_publishes(leaving, 1)] == [b"first"]
    assert publishes(leaving, within=0.5) == []
    staying = paho(server, "member-staying")
    staying.subscribe(GROUP, 1)
    leaving.sendall(_unsubscribe(2, GROUP))
    assert read(leaving)[0] == 0xB0
    leaving.close()  # its session ends: what it held goes to the remaining members
    assert staying.next().payload == b"first"
    for client in (staying, publisher):
        client.stop()


def _three_settled(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The broker's lines on settling a message, once there are three (it logs them in its
    own thread): not any line with the word, which the test's path (test_settling_...)
    carries wherever the root logger lets INFO through (pytest --log-level=INFO)."""

    def settling() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage().startswith("client leaving: settling")]

    until(lambda: len(settling()) >= 3, lambda: caplog.messages)
    return settling()


@pytest.mark.parametrize("qos", [1, 2])
def test_settling_what_a_left_subscription_sent_is_no_warning(
    server: RunningServer, caplog: pytest.LogCaptureFixture, qos: int
) -> None:
    """MQTT-3.10.4-3 for a plain subscription of a persistent session: the UNSUBSCRIBE deletes
    its dropbox, and each later PUBACK / PUBREC of a message it had sent found no lock to
    settle. A warning each ('no longer holds the lock') for the normal flow: debug now."""
    leaving, _ = open_raw(server, "leaving", clean=False, expiry=300)
    leaving.sendall(subscribe(1, "orders/#", qos))
    assert read(leaving)[0] == 0x90
    publisher = paho(server, "publisher")
    for n in range(3):
        publisher.publish(f"orders/{n}", f"order {n}".encode(), qos)
    sent = take_publishes(leaving, 3)
    with caplog.at_level(logging.DEBUG, logger="boxmq.mqtt"):
        leaving.sendall(_unsubscribe(2, "orders/#"))
        assert read(leaving)[0] == 0xB0  # UNSUBACK
        for message in sent:
            leaving.sendall(puback(message.packet_id) if qos == 1 else pubrec(message.packet_id))
        if qos == 2:
            for _ in sent:
                assert read(leaving)[0] == 0x62  # PUBREL: the exchange goes on
        publisher.publish("orders/late", b"after", qos)  # not the subscription's any more
        assert publishes(leaving, within=0.5) == []
        settled = _three_settled(caplog)
    assert [r.levelno for r in settled] == [logging.DEBUG] * 3, [r.getMessage() for r in settled]
    assert all("of a subscription it left" in r.getMessage() for r in settled)
    leaving.close()
    publisher.stop()


def test_under_hash_by_key_an_away_members_topics_go_to_the_members_there(
    tmp_path: Path,
) -> None:
    """The away member's keys (here topics) waited for it, for as long as its client was away:
    hash-by-key routed over every member, the paused one included."""
    with start_server(tmp_path / "root", group_dispatch={"workers": "hash-by-key"}) as running:
        away = paho(running, "away-member", clean=False, expiry=300)
        away.subscribe(GROUP, 1)
        there = paho(running, "member-there", v5=False)
        there.subscribe(GROUP, 1)
        publisher = paho(running, "publisher")
        away.stop()  # a DISCONNECT: its session lives on
        topics = [f"jobs/{n}" for n in range(10)]
        for topic in topics:
            publisher.publish(topic, topic.encode(), 1)
        got = sorted(there.next().topic for _ in topics)
        assert got == sorted(topics)
        assert there.nothing(within=0.5)
        back = paho(running, "away-member", clean=False, expiry=300)
        assert back.session_present
        assert back.nothing(within=0.5)  # all taken by the member there
        back.stop()


def test_under_hash_by_key_a_group_whose_member_leaves_goes_on_in_order_at_another(
    tmp_path: Path,
) -> None:
    with start_server(tmp_path / "root", group_dispatch={"workers": "hash-by-key"}) as running:
        members = {"a": paho(running, "member-a"), "b": paho(running, "member-b", v5=False)}
        for member in members.values():
            member.subscribe(GROUP, 1)
        publisher = paho(running, "publisher")
        group = paho_properties(PacketTypes.PUBLISH, UserProperty=[("JMSXGroupID", "o-1")])
        for n in range(5):  # five topics, one group: the group is the key
            publisher.publish(f"jobs/{n}", f"m{n}".encode(), 1, properties=group)
        got: dict[str, list[bytes]] = {name: [] for name in members}
        deadline = time.monotonic() + 10
        while sum(map(len, got.values())) < 5 and time.monotonic() < deadline:
            for name, member in members.items():
                with contextlib.suppress(queue.Empty):
                    got[name].append(member.messages.get(timeout=0.05).payload)
        [(first, taken)] = [(name, payloads) for name, payloads in got.items() if payloads]
        assert taken == [f"m{n}".encode() for n in range(5)]
        [other] = [member for name, member in members.items() if name != first]
        assert other.nothing(within=0.5)
        members[first].stop()  # it leaves the group
        for n in range(5, 10):
            publisher.publish(f"jobs/{n}", f"m{n}".encode(), 1, properties=group)
        assert [other.next().payload for _ in range(5)] == [f"m{n}".encode() for n in range(5, 10)]
        other.stop()
        publisher.stop()


@pytest.mark.parametrize("qos", [1, 2])
def test_settling_what_a_left_subscription_sent_is_no_warning_once_subscribed_again(
    server: RunningServer, caplog: pytest.LogCaptureFixture, qos: int
) -> None:
    """As in test_settling_what_a_left_subscription_sent_is_no_warning, with the same filter
    subscribed again before the acknowledgements: a new dropbox on the old one's path, so
    the old messages looked like the new subscription's, and each settling was a warning
    again (found by a churn torture)."""
    leaving, _ = open_raw(server, "leaving", clean=False, expiry=300)
    leaving.sendall(subscribe(1, "orders/#", qos))
    assert read(leaving)[0] == 0x90
    publisher = paho(server, "publisher")
    for n in range(3):
        publisher.publish(f"orders/{n}", f"order {n}".encode(), qos)
    sent = take_publishes(leaving, 3)
    with caplog.at_level(logging.DEBUG, logger="boxmq.mqtt"):
        leaving.sendall(_unsubscribe(2, "orders/#"))
        assert read(leaving)[0] == 0xB0  # UNSUBACK
        leaving.sendall(subscribe(3, "orders/#", qos))
        assert read(leaving)[0] == 0x90  # SUBACK
        for message in sent:
            leaving.sendall(puback(message.packet_id) if qos == 1 else pubrec(message.packet_id))
        if qos == 2:
            for _ in sent:
                assert read(leaving)[0] == 0x62  # PUBREL: the exchange goes on
        settled = _three_settled(caplog)
        publisher.publish("orders/late", b"after", qos)  # the new subscription's
        assert [m.payload for m in take_publishes(leaving, 1)] == [b"after"]
    assert [r.levelno for r in settled] == [logging.DEBUG] * 3, [r.getMessage() for r in settled]
    leaving.close()
    publisher.stop()
