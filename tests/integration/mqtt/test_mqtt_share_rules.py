"""The rules of the MQTT-234 shared-subscription proposal (MQTT 5.0 §4.8.2) that no other
real-client test checks, one test each, with paho-mqtt 5.0 and 3.1.1 clients."""

from __future__ import annotations

import json
import logging
import queue
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration.mqtt import raw
from tests.integration.mqtt.clients import (
    Paho,
    Received,
    RunningServer,
    boxmq_cli_ok,
    drop,
    paho,
    start_server,
)
from tests.integration.mqtt.raw import (
    open_raw,
    packet,
    puback,
    pubcomp,
    pubrec,
    read,
    string,
    subscribe,
    take_publishes,
)
from tests.waiting import until

VERSIONS = [pytest.param(True, id="v5"), pytest.param(False, id="v311")]


def _codes(reasons: list[Any]) -> list[int]:
    return [int(getattr(r, "value", r)) for r in reasons]


def _drain_received(client: Paho, within: float = 0.5) -> list[Received]:
    """Every message the client received until none came for `within` seconds."""
    got: list[Received] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            got.append(client.messages.get(timeout=0.05))
            deadline = time.monotonic() + within
        except queue.Empty:
            pass
    return got


def _drain(client: Paho, within: float = 0.5) -> list[bytes]:
    """The payloads of `_drain_received`."""
    return [message.payload for message in _drain_received(client, within)]


@pytest.mark.parametrize("v5", VERSIONS)
@pytest.mark.parametrize(
    "bad",
    ["$share/g", "$share//a", "$share/g/", "$share/+/a"],  # paho sends no "g+"
)
def test_a_share_filter_without_a_proper_share_name_or_filter_is_refused(
    server: RunningServer, v5: bool, bad: str
) -> None:
    """MQTT-234 §4.9.2: a Shared Subscription's Topic Filter MUST contain a ShareName at least
    one character long, without '/', '+' or '#', followed by a filter: SUBACK 0x8F Topic
    Filter invalid (3.1.1: 0x80 Failure), and the connection stays."""
    client = paho(server, "c", v5=v5)
    assert _codes(client.subscribe(bad, 1)) == [0x8F if v5 else 0x80]
    client.subscribe("ok", 1)
    paho(server, "pub").publish("ok", b"still here", 1)
    assert client.next().payload == b"still here"


@pytest.mark.parametrize("v5", VERSIONS)
def test_an_empty_first_level_after_the_share_name_is_part_of_the_filter(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 example 2: "$share/consumer1//finance" matches what "/finance" matches."""
    member = paho(server, "m", v5=v5)
    assert _codes(member.subscribe("$share/consumer1//finance", 1)) == [1]
    pub = paho(server, "pub")
    pub.publish("finance", b"no", 1)
    pub.publish("/finance", b"yes", 1)
    assert member.next().payload == b"yes"
    assert member.nothing()


@pytest.mark.parametrize("v5", VERSIONS)
def test_two_groups_on_one_filter_and_a_plain_subscriber_each_get_a_copy(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 example 1: "$share/consumer1/sport/tennis/+" and "$share/consumer2/sport/
    tennis/+" are distinct: each message goes to exactly one member of each, and to every
    plain subscriber."""
    one = [paho(server, f"one{i}", v5=v5) for i in range(2)]
    two = [paho(server, f"two{i}", v5=v5) for i in range(2)]
    for member in one:
        member.subscribe("$share/consumer1/sport/tennis/+", 1)
    for member in two:
        member.subscribe("$share/consumer2/sport/tennis/+", 1)
    plain = paho(server, "plain", v5=v5)
    plain.subscribe("sport/tennis/+", 1)
    pub = paho(server, "pub")
    sent = [f"{i}".encode() for i in range(10)]
    for payload in sent:
        pub.publish("sport/tennis/player1", payload, 1)
    assert sorted(_drain(one[0]) + _drain(one[1])) == sorted(sent)
    assert sorted(_drain(two[0]) + _drain(two[1])) == sorted(sent)
    assert _drain(plain) == sent


@pytest.mark.parametrize("v5", VERSIONS)
def test_a_client_in_two_groups_and_a_plain_subscription_on_one_filter_gets_three_copies(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 note 7: each Shared Subscription is independent, and a client with a shared and
    a non-shared subscription matching a message gets a copy through each; as the only member
    of two groups with the same filter it gets one copy from each."""
    client = paho(server, "c", v5=v5)
    assert _codes(client.subscribe("$share/a/t/#", 1)) == [1]
    assert _codes(client.subscribe("$share/b/t/#", 1)) == [1]
    assert _codes(client.subscribe("t/#", 1)) == [1]
    paho(server, "pub").publish("t/x", b"m", 1)
    assert _drain(client) == [b"m", b"m", b"m"]


@pytest.mark.parametrize("v5", VERSIONS)
def test_overlapping_filters_in_two_groups_each_take_the_message(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 note 7: two Shared Subscriptions with overlapping wildcard filters each process
    a message that matches both; a group's filter keeps the meaning of '+' and '#'."""
    hash_member = paho(server, "h", v5=v5)
    hash_member.subscribe("$share/g1/s/#", 1)
    plus_member = paho(server, "p", v5=v5)
    plus_member.subscribe("$share/g2/s/+/t", 1)
    pub = paho(server, "pub")
    pub.publish("s/a/t", b"both", 1)
    pub.publish("s/a/u", b"hash only", 1)
    pub.publish("s", b"hash only too", 1)
    assert _drain(hash_member) == [b"both", b"hash only", b"hash only too"]
    assert _drain(plus_member) == [b"both"]


@pytest.mark.parametrize("v5", VERSIONS)
def test_one_share_name_on_two_filters_is_two_groups(server: RunningServer, v5: bool) -> None:
    """MQTT-234: "$share/consumer1//finance" and "$share/consumer1/sport/tennis/+" are distinct
    shared subscriptions: no relationship is implied by the share name."""
    finance = paho(server, "f", v5=v5)
    finance.subscribe("$share/consumer1//finance", 1)
    tennis = paho(server, "t", v5=v5)
    tennis.subscribe("$share/consumer1/sport/tennis/+", 1)
    pub = paho(server, "pub")
    for i in range(4):
        pub.publish("/finance", f"f{i}".encode(), 1)
        pub.publish("sport/tennis/p", f"t{i}".encode(), 1)
    assert _drain(finance) == [f"f{i}".encode() for i in range(4)]
    assert _drain(tennis) == [f"t{i}".encode() for i in range(4)]


@pytest.mark.parametrize("v5", VERSIONS)
def test_no_member_joining_an_existing_group_is_sent_retained_messages(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 (3.8.4): a Session added to an existing Shared Subscription is sent no retained
    messages, a wildcard filter's included, though a plain subscription of the same client is;
    what is published later it can expect."""
    pub = paho(server, "pub")
    pub.publish("cfg/a", b"retained a", 1, retain=True)
    pub.publish("cfg/b", b"retained b", 1, retain=True)
    first = paho(server, "first", v5=v5)
    first.subscribe("$share/g/cfg/+", 1)
    second = paho(server, "second", v5=v5)
    second.subscribe("$share/g/cfg/+", 1)
    assert first.nothing()
    assert second.nothing()
    second.subscribe("cfg/#", 1)  # the same client's plain subscription is sent them
    got = sorted((m.payload, m.retain) for m in (second.next(), second.next()))
    assert got == [(b"retained a", True), (b"retained b", True)]
    pub.publish("cfg/a", b"new", 1)
    fresh = _drain(first) + _drain(second)
    assert sorted(fresh) == [b"new", b"new"]  # the plain copy, and the group's to one member


@pytest.mark.parametrize("v5", VERSIONS)
def test_subscribing_again_to_a_group_changes_the_qos_and_one_unsubscribe_leaves(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 note 6: a second SUBSCRIBE to a group the session is in changes its Requested
    QoS but does not make it a member twice (one copy of each message, not two), so its
    first UNSUBSCRIBE leaves the group."""
    member = paho(server, "m", v5=v5)
    other = paho(server, "o", v5=v5)
    other.subscribe("$share/g/q/#", 1)
    assert _codes(member.subscribe("$share/g/q/#", 0)) == [0]
    assert _codes(member.subscribe("$share/g/q/#", 2)) == [2]
    other.unsubscribe("$share/g/q/#")
    pub = paho(server, "pub")
    for i in range(4):
        pub.publish("q/x", f"{i}".encode(), 2)
    got = [member.next() for _ in range(4)]
    assert [m.payload for m in got] == [f"{i}".encode() for i in range(4)]
    assert {m.qos for m in got} == {2}  # the QoS of the second SUBSCRIBE
    assert member.nothing()  # one member, once: no second copy
    member.unsubscribe("$share/g/q/#")
    other.subscribe("$share/g/q/#", 1)  # the group lives on with the other client alone
    for i in range(4):
        pub.publish("q/x", f"after {i}".encode(), 1)
    assert _drain(other) == [f"after {i}".encode() for i in range(4)]
    assert member.nothing()


@pytest.mark.parametrize("v5", VERSIONS)
def test_a_group_outlives_the_member_that_made_it(server: RunningServer, v5: bool) -> None:
    """MQTT-234: a Shared Subscription survives when the Session that created it leaves, as
    long as another is associated with it."""
    maker = paho(server, "maker", v5=v5)
    maker.subscribe("$share/g/w/#", 1)
    joiner = paho(server, "joiner", v5=v5)
    joiner.subscribe("$share/g/w/#", 1)
    maker.stop()  # a clean session: it ends, and leaves the group
    pub = paho(server, "pub")
    for i in range(5):
        pub.publish("w/x", f"{i}".encode(), 1)
    assert _drain(joiner) == [f"{i}".encode() for i in range(5)]


@pytest.mark.parametrize("v5", VERSIONS)
def test_a_group_whose_last_member_leaves_deletes_what_it_had_not_delivered(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234: a Shared Subscription ends, and any undelivered messages associated with it
    are deleted, when no Session is associated with it any more: a member made later makes a
    new group, sent only what is published after it."""
    member = paho(
        server,
        "slow",
        v5=v5,
        configure=lambda c: c.manual_ack_set(True),  # it acknowledges nothing
        connect_properties={"ReceiveMaximum": 1} if v5 else None,
    )
    member.subscribe("$share/g/jobs/#", 1)
    pub = paho(server, "pub")
    for i in range(30):
        pub.publish("jobs/x", f"old {i}".encode(), 1)
    member.next()
    drop(member)  # a clean session ends with its connection: the group with it
    time.sleep(0.5)
    again = paho(server, "again", v5=v5)
    again.subscribe("$share/g/jobs/#", 1)
    pub.publish("jobs/x", b"new", 1)
    assert _drain(again) == [b"new"]


@pytest.mark.parametrize("v5", VERSIONS)
@pytest.mark.parametrize("persistent", [False, True], ids=["clean", "persistent"])
def test_one_session_in_one_share_name_on_overlapping_filters_is_in_two_groups(
    server: RunningServer, v5: bool, persistent: bool
) -> None:
    """MQTT-234 §4.9.2 and note 7: "$share/g/a/#" and "$share/g/a/+" are two Shared
    Subscriptions, the same ShareName implying no relationship, and a message matching both
    is processed by each: one session in both gets a copy from each, sharing the second with
    another member; unsubscribing from one leaves it in the other."""
    expiry = 3600 if v5 and persistent else None
    member = paho(server, "m", v5=v5, clean=not persistent, expiry=expiry)
    assert _codes(member.subscribe("$share/g/a/#", 1)) == [1]
    assert _codes(member.subscribe("$share/g/a/+", 1)) == [1]
    other = paho(server, "o", v5=v5)
    other.subscribe("$share/g/a/+", 1)
    pub = paho(server, "pub")
    for payload in (b"1", b"2"):
        pub.publish("a/b", payload, 1)
    assert sorted(_drain(member) + _drain(other)) == [b"1", b"1", b"2", b"2"]
    member.unsubscribe("$share/g/a/#")
    for payload in (b"3", b"4"):
        pub.publish("a/b", payload, 1)
    mine, theirs = _drain(member), _drain(other)
    assert (len(mine), len(theirs), sorted(mine + theirs)) == (1, 1, [b"3", b"4"])


@pytest.mark.parametrize("qos", [1, 2])
def test_a_groups_last_member_unsubscribing_ends_it_though_it_still_holds_a_message(
    server: RunningServer, caplog: pytest.LogCaptureFixture, qos: int
) -> None:
    """MQTT-234 §4.9.2: a Shared Subscription lasts while a Session "has not completed a
    corresponding UNSUBSCRIBE", and ends, its undelivered messages deleted, when none is left:
    at the last member's UNSUBACK, though it still completes what it was sent (MQTT-3.10.4-3).
    A member joining then makes a new group, sent only what comes after; the old one kept both
    what it had not delivered and what came after the UNSUBACK for it (until 2026-12-01)."""
    leaving, _ = open_raw(server, "leaving", clean=True, expiry=0, receive_maximum=1)
    try:
        leaving.sendall(subscribe(1, "$share/g/end/#", qos))
        assert read(leaving)[0] == 0x90
        pub = paho(server, "pub")
        for i in range(3):
            pub.publish("end/x", f"old {i}".encode(), qos)
        [held] = take_publishes(leaving, 1)
        unsubscribe = string("$share/g/end/#")
        leaving.sendall(packet(0xA2, (2).to_bytes(2, "big") + b"\x00" + unsubscribe))
        assert read(leaving) == (0xB0, b"\x00\x02\x00\x00")  # UNSUBACK, Success
        pub.publish("end/x", b"after the UNSUBACK", qos)
        joining = paho(server, "joining")
        joining.subscribe("$share/g/end/#", qos)
        pub.publish("end/x", b"after the SUBSCRIBE", qos)
        assert _drain(joining) == [b"after the SUBSCRIBE"]
        with caplog.at_level(logging.WARNING, logger="boxmq"):
            if qos == 1:
                leaving.sendall(puback(held.packet_id))
            else:
                leaving.sendall(pubrec(held.packet_id))
                assert read(leaving) == (0x62, held.packet_id.to_bytes(2, "big"))  # PUBREL
                leaving.sendall(pubcomp(held.packet_id))
            assert raw.nothing(leaving)  # the rest went with the group
            assert joining.nothing()
        assert not caplog.records, [r.getMessage() for r in caplog.records]  # settled nothing
    finally:
        leaving.close()


@pytest.mark.parametrize("bad", ["$share/g+/a", "$share/g#/a", "$share/#"])
def test_a_share_name_holding_a_wildcard_is_refused(server: RunningServer, bad: str) -> None:
    """MQTT-234 §4.9.2: a ShareName does not include '+' or '#', nor a whole-level one (which
    paho refuses to send, hence a raw client): SUBACK 0x8F Topic Filter invalid."""
    client, _ = open_raw(server, "raw", clean=True, expiry=0)
    try:
        client.sendall(subscribe(1, bad, 1))
        kind, body = read(client)
        assert (kind, body[-1]) == (0x90, 0x8F), (hex(kind), body.hex())
    finally:
        client.close()


def test_the_connack_says_shared_subscriptions_are_available(server: RunningServer) -> None:
    """MQTT-234 (3.8.3): a server MAY support Shared Subscriptions; boxmq does, and says so
    (MQTT 5.0 §3.2.2.3.15: Shared Subscription Available 1)."""
    client = paho(server, "c")
    assert client.connack_properties.SharedSubscriptionAvailable == 1


def test_the_server_picks_the_members_in_turn(server: RunningServer) -> None:
    """MQTT-234 note 1: the server chooses a member message by message, by its own criteria;
    boxmq's default is round robin (docs/mqtt.md), so three members that acknowledge at once
    get a third each."""
    members = [paho(server, f"w{i}") for i in range(3)]
    for member in members:
        member.subscribe("$share/g/rr/#", 1)
    pub = paho(server, "pub")
    for i in range(30):
        pub.publish("rr/x", f"{i}".encode(), 1)
    counts = [len(_drain(member)) for member in members]
    assert counts == [10, 10, 10]


@pytest.mark.parametrize("qos", [1, 2])
def test_a_negative_acknowledgement_is_never_sent_to_another_member(
    server: RunningServer, qos: int
) -> None:
    """MQTT-234 note 5: if a member answers a PUBLISH with a negative PUBACK (PUBREC), the
    server MUST discard the message and not send it to any other subscriber. boxmq keeps it in
    the group's error/ (docs/mqtt.md), as a dead letter, not for the members. paho sends no
    negative acknowledgement: a raw v5 client does."""
    refuser, _ = open_raw(server, "refuser", clean=True, expiry=0)
    try:
        refuser.sendall(subscribe(1, "$share/g/neg/#", qos))
        assert read(refuser)[0] == 0x90
        other = paho(server, "other")
        other.subscribe("$share/g/neg/#", qos)
        pub = paho(server, "pub")
        sent = [f"{i}".encode() for i in range(6)]
        for payload in sent:
            pub.publish("neg/x", payload, qos)
        refused = take_publishes(refuser, 1)[0]
        kind = 0x40 if qos == 1 else 0x50
        refuser.sendall(packet(kind, refused.packet_id.to_bytes(2, "big") + b"\x80"))
        refuser.close()  # its session ends: what it still held goes to the other member
        got = _drain(other, within=1.0)
        assert refused.payload not in got
        assert sorted(got) == sorted(set(sent) - {refused.payload})
    finally:
        refuser.close()


BIG = 200  # bytes of payload: over the Maximum Packet Size of a `_small` member


def _small(server: RunningServer, client_id: str, **options: Any) -> Paho:
    """A v5 member whose Maximum Packet Size (100) no message of BIG bytes fits."""
    return paho(server, client_id, connect_properties={"MaximumPacketSize": 100}, **options)


def _group_states(root: Path) -> dict[str, list[str]]:
    """The file names in each state folder of the share group's dropbox."""
    [dropbox] = root.glob("topic-root/*/.subscriptions/*")
    states = ("target", "processing", "processed", "error")
    return {state: sorted(p.name for p in (dropbox / state).glob("*")) for state in states}


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_a_message_too_large_for_the_member_it_went_to_goes_to_one_that_can_take_it(
    server: RunningServer, qos: int
) -> None:
    """MQTT-3.1.2-25: a PUBLISH over a client's Maximum Packet Size is discarded, as if it had
    been sent. For a share group, MQTT 5.0 §3.1.2.11.4 lets the server either discard it for
    every member or send it to one that can take it: boxmq sends it to one (until 2026-12-02
    it was settled as sent, lost to the group), at each QoS, and the small member still
    takes its turns with what it can take."""
    small = _small(server, "small")
    large = paho(server, "large")
    for member in (small, large):
        member.subscribe("$share/g/big/#", qos)
    pub = paho(server, "pub")
    sent = [bytes([i]) * BIG for i in range(4)]
    for payload in sent:
        pub.publish("big/x", payload, 1)
    assert sorted(_drain(large, within=1.0)) == sent
    assert _drain(small, within=0.1) == []
    for payload in (b"fits 1", b"fits 2"):
        pub.publish("big/x", payload, 1)
    assert _drain(small) == [b"fits 1"]  # its turn, then the large member's
    assert _drain(large) == [b"fits 2"]
    states = _group_states(server.root)
    assert (len(states["processed"]), states["error"]) == (6, [])
    assert states["target"] == states["processing"] == []


@pytest.mark.parametrize("members", [1, 2])
def test_a_message_too_large_for_every_member_goes_to_the_groups_error(
    server: RunningServer, members: int
) -> None:
    """No member can take it: it goes to the group's error/, its reason too-large, where
    `boxmq peek` shows it and `boxmq requeue` sends it to the members again, here to one that
    joined since and can take it; it is never dropped nor sent round for ever."""
    smalls = [_small(server, f"small{i}") for i in range(members)]
    for small in smalls:
        small.subscribe("$share/g/big/#", 1)
    pub = paho(server, "pub")
    pub.publish("big/x", b"x" * BIG, 1)
    pub.publish("big/x", b"fits", 1)
    assert sorted(p for small in smalls for p in _drain(small)) == [b"fits"]
    until(lambda: len(_group_states(server.root)["error"]) == 1, lambda: _group_states(server.root))
    [dead] = json.loads(
        boxmq_cli_ok(server.root, "--json", "peek", "$share/g/big/#", "--state", "error")
    )
    assert (dead["dead"], dead["deliveries"]) == ("too-large", 1)
    large = paho(server, "large")
    large.subscribe("$share/g/big/#", 1)
    boxmq_cli_ok(server.root, "requeue", "$share/g/big/#")
    assert _drain(large, within=1.0) == [b"x" * BIG]
    assert all(small.nothing(within=0.1) for small in smalls)
    assert _group_states(server.root)["error"] == []


def test_a_message_too_large_for_the_members_left_when_the_large_one_is_killed_goes_to_error(
    server: RunningServer,
) -> None:
    """The member that could take it ends (its connection broken, Session Expiry 0) before
    it acknowledges the message: the members left cannot take it, and it goes to error/."""
    small = _small(server, "small")
    small.subscribe("$share/g/big/#", 1)
    large, _ = open_raw(server, "large", clean=True, expiry=0)
    large.sendall(subscribe(1, "$share/g/big/#", 1))
    assert read(large)[0] == 0x90
    pub = paho(server, "pub")
    pub.publish("big/x", b"x" * BIG, 1)
    [held] = take_publishes(large, 1)  # not acknowledged
    assert held.payload == b"x" * BIG
    large.close()
    until(lambda: len(_group_states(server.root)["error"]) == 1, lambda: _group_states(server.root))
    assert "too-large" in _group_states(server.root)["error"][0]
    assert small.nothing(within=0.1)
    pub.publish("big/x", b"fits", 1)
    assert small.next().payload == b"fits"


def test_a_message_too_large_for_the_members_there_waits_for_one_away(
    server: RunningServer,
) -> None:
    """A member away (its session kept) may come back able to take it: the message waits for
    it, and goes to it when it connects again with a larger Maximum Packet Size."""
    small = _waiting_for_the_member_away(server)
    assert len(_group_states(server.root)["target"]) == 1
    back = paho(server, "away", clean=False, expiry=3600)  # no Maximum Packet Size now
    assert back.next().payload == b"x" * BIG
    assert small.nothing(within=0.1)


def test_a_qos2_message_sent_again_to_a_member_back_too_small_goes_to_no_other(
    server: RunningServer,
) -> None:
    """A member that was sent a QoS 2 message and came back (its session kept) with a
    Maximum Packet Size the message is over may have it already (its PUBREC lost): giving it
    to another member would deliver it twice, so it is settled as sent (MQTT-3.1.2-25), as
    for one subscriber, and goes to no other member and not to error/."""
    away, _ = open_raw(server, "away", clean=False, expiry=3600)
    away.sendall(subscribe(1, "$share/g/big/#", 2))
    assert read(away)[0] == 0x90
    other = paho(server, "other")
    other.subscribe("$share/g/big/#", 2)
    pub = paho(server, "pub")
    sent = [bytes([i]) * BIG for i in range(2)]
    for payload in sent:  # one to each member, in turn
        pub.publish("big/x", payload, 2)
    [kept] = take_publishes(away, 1)  # not answered
    away.close()
    [given] = _drain(other, within=1.0)
    assert {kept.payload, given} == set(sent)
    back = _small(server, "away", clean=False, expiry=3600)
    until(
        lambda: len(_group_states(server.root)["processed"]) == 2,
        lambda: _group_states(server.root),
    )
    assert other.nothing(within=0.5)
    assert back.nothing(within=0.1)
    assert _group_states(server.root)["error"] == []


def _one_each(
    server: RunningServer, client_id: str, *, clean: bool, expiry: int, qos: int = 2
) -> tuple[socket.socket, raw.Received, Paho]:
    """A raw v5 member `client_id` and a paho member "other" in group g on exact/#, and "0"
    and "1" published to exact/x at `qos`, one to each in turn: the raw member's socket, the
    PUBLISH it was sent (not answered), and the paho member."""
    member, _ = open_raw(server, client_id, clean=clean, expiry=expiry)
    member.sendall(subscribe(1, "$share/g/exact/#", qos))
    assert read(member)[0] == 0x90
    other = paho(server, "other")
    other.subscribe("$share/g/exact/#", qos)
    pub = paho(server, "pub")
    for i in range(2):  # one each, in turn
        pub.publish("exact/x", f"{i}".encode(), qos)
    [sent] = take_publishes(member, 1)
    return member, sent, other


def test_a_qos2_message_whose_member_breaks_off_is_completed_with_it_when_it_returns(
    server: RunningServer,
) -> None:
    """MQTT-234 note 3: a member whose connection breaks while it is sent a QoS 2 message
    MUST get it when it reconnects (MQTT 5.0 §4.3.3), its session having lived on; the other
    member is never sent it."""
    away, kept, other = _one_each(server, "away", clean=False, expiry=3600)  # no PUBREC
    away.close()
    [given] = _drain(other, within=1.0)
    assert given != kept.payload
    back, present = open_raw(server, "away", expiry=3600)
    try:
        assert present
        [again] = take_publishes(back, 1)
        assert (again.payload, again.dup) == (kept.payload, True)
        back.sendall(pubrec(again.packet_id))
        assert read(back) == (0x62, again.packet_id.to_bytes(2, "big"))  # PUBREL
        back.sendall(pubcomp(again.packet_id))
    finally:
        back.close()
    assert other.nothing()


def test_a_qos1_message_whose_member_breaks_off_and_ends_goes_to_another(
    server: RunningServer,
) -> None:
    """MQTT-234 note 4: if the connection to the member a QoS 1 message is being sent to
    breaks before its PUBACK, the server MAY send it to another member; boxmq does once the
    member's session ends, here with the connection (Session Expiry 0, closed without a
    DISCONNECT). A persistent member's is kept for its return (test_mqtt_share_away)."""
    gone, taken, other = _one_each(server, "gone", clean=True, expiry=0, qos=1)  # no PUBACK
    gone.close()
    got = _drain_received(other, within=1.0)
    assert sorted(m.payload for m in got) == [b"0", b"1"]
    assert taken.payload in (b"0", b"1")
    assert {m.qos for m in got} == {1}


def test_a_qos2_message_whose_member_session_ends_before_pubrec_goes_to_another(
    server: RunningServer,
) -> None:
    """MQTT-234 note 3: if the member's session ends before it reconnects the server MAY send
    the message to another member; boxmq does (decided, docs/mqtt.md), though MQTT 5.0's
    final text says MUST NOT (MQTT-4.8.2-5)."""
    gone, taken, other = _one_each(server, "gone", clean=True, expiry=0)  # no PUBREC
    gone.close()  # Session Expiry 0: the session ends with the connection
    assert sorted(_drain(other, within=1.0)) == [b"0", b"1"]
    assert taken.payload in (b"0", b"1")


def test_a_group_whose_last_member_session_expires_away_deletes_what_it_held(
    server: RunningServer,
) -> None:
    """MQTT-234: Sessions get detached from their Shared Subscriptions when they terminate,
    and the group ends with its last one, deleting what it had not delivered: here a
    persistent session (Session Expiry 1 s) away while the messages came."""
    member = paho(server, "away", expiry=1)
    member.subscribe("$share/g/held/#", 1)
    assert server.box.topics.members_of("g", "held/#")
    member.stop()
    pub = paho(server, "pub")
    for i in range(3):
        pub.publish("held/x", f"old {i}".encode(), 1)
    until(
        lambda: not server.box.topics.members_of("g", "held/#"),
        "the expired session is still a member",
    )
    again = paho(server, "again")
    again.subscribe("$share/g/held/#", 1)
    pub.publish("held/x", b"new", 1)
    assert _drain(again) == [b"new"]


@pytest.mark.parametrize("v5", VERSIONS)
@pytest.mark.parametrize("granted", [0, 1, 2])
def test_a_member_is_sent_at_the_lower_of_its_granted_and_the_published_qos(
    server: RunningServer, v5: bool, granted: int
) -> None:
    """MQTT-234: a Shared Subscription has a maximum QoS, like a plain one (MQTT 5.0 §3.8.4:
    the lower of the granted and the published QoS), whatever QoS the message came at."""
    member = paho(server, "m", v5=v5)
    assert _codes(member.subscribe("$share/g/lvl/#", granted)) == [granted]
    pub = paho(server, "pub")
    for qos in (0, 1, 2):
        pub.publish(f"lvl/{qos}", b"x", qos)
    got = {m.topic: m.qos for m in (member.next(), member.next(), member.next())}
    assert got == {f"lvl/{qos}": min(qos, granted) for qos in (0, 1, 2)}


@pytest.mark.parametrize("name", [".", "..", "$g", "a b", "é", "G"])
def test_a_share_name_may_hold_any_character_but_slash_plus_and_hash(
    server: RunningServer, name: str
) -> None:
    """MQTT-234 §4.9.2: a ShareName is "a character string that does not include '/', '+' or
    '#'": any other makes a group (a dot, two dots, a '$', a space, a letter beyond ASCII;
    "..", kept in the folder "share..", names no parent folder), distinct from "g", even "G"."""
    member = paho(server, "m")
    assert _codes(member.subscribe(f"$share/{name}/n/#", 1)) == [1]
    other = paho(server, "o")
    other.subscribe("$share/g/n/#", 1)
    pub = paho(server, "pub")
    for i in range(2):
        pub.publish("n/x", f"{i}".encode(), 1)
    assert _drain(member) == [b"0", b"1"]
    assert _drain(other) == [b"0", b"1"]


@pytest.mark.parametrize("v5", VERSIONS)
def test_a_groups_filter_is_matched_without_its_share_prefix(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 §4.9.2 (i): "The $share and {ShareName} portions of the Topic Filter are not
    taken into account when matching against publications": "$share/g/x" takes what is
    published to "x", not to the topic "$share/g/x", which "$share/h/#" does not take either
    (a '#' first does not match a topic starting with '$'). "$share" is a literal: "$SHARE/g/x"
    is a plain filter, matching that topic alone."""
    member = paho(server, "m", v5=v5)
    member.subscribe("$share/g/x", 1)
    everything = paho(server, "e", v5=v5)
    everything.subscribe("$share/h/#", 1)
    upper = paho(server, "u", v5=v5)
    assert _codes(upper.subscribe("$SHARE/g/x", 1)) == [1]
    pub = paho(server, "pub")
    for topic in ("$share/g/x", "$SHARE/g/x", "x"):
        pub.publish(topic, topic.encode(), 1)
    assert _drain(member) == [b"x"]
    assert _drain(everything) == [b"x"]
    assert _drain(upper) == [b"$SHARE/g/x"]


@pytest.mark.parametrize("v5", VERSIONS)
def test_subscribing_again_to_a_group_sends_no_retained_messages(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 (3.8.4) and note 6: a SUBSCRIBE to a group the session is already in (to change
    its QoS) is no new non-shared subscription: no retained message is sent, as it is for the
    same filter subscribed plain again (MQTT-3.8.4-3: re-sent)."""
    pub = paho(server, "pub")
    pub.publish("cfg", b"retained", 1, retain=True)
    member = paho(server, "m", v5=v5)
    member.subscribe("$share/g/cfg", 1)
    assert _codes(member.subscribe("$share/g/cfg", 2)) == [2]
    assert member.nothing()
    plain = paho(server, "p", v5=v5)
    for qos in (1, 2):
        plain.subscribe("cfg", qos)
        assert (plain.next().payload, plain.nothing()) == (b"retained", True)


@pytest.mark.parametrize("handling", [0, 1])
def test_no_retain_handling_sends_retained_messages_to_a_member(
    server: RunningServer, handling: int
) -> None:
    """MQTT-234 (3.8.4): "No retained messages are sent" to a session added to a Shared
    Subscription, new or existing, whatever MQTT 5.0's Retain Handling asks: 0 (send at
    subscribe) and 1 (send if the subscription is new) send none to its first member, nor
    to a second, nor on a SUBSCRIBE again, where they do to a plain subscription."""
    pub = paho(server, "pub")
    pub.publish("cfg", b"retained", 1, retain=True)
    first = paho(server, "first")
    assert _codes(first.subscribe("$share/g/cfg", 1, retainHandling=handling)) == [1]
    second = paho(server, "second")
    assert _codes(second.subscribe("$share/g/cfg", 1, retainHandling=handling)) == [1]
    assert _codes(second.subscribe("$share/g/cfg", 2, retainHandling=handling)) == [2]
    assert first.nothing()
    assert second.nothing()
    plain = paho(server, "plain")
    plain.subscribe("cfg", 1, retainHandling=handling)
    assert plain.next().payload == b"retained"


@pytest.mark.parametrize("v5", VERSIONS)
def test_a_retained_publication_reaches_a_member_with_retain_0(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 (3.3.1.3): RETAIN 1 goes only with what a new non-shared subscription is sent; a
    retained PUBLISH reaches a group as any other, RETAIN 0 (3.1.1's MQTT-3.3.1-9; 5.0's
    MQTT-3.3.1-12 without Retain As Published), whether its member is there or away (then from
    the group's copy on disk, sent when it comes back)."""
    expiry = 3600 if v5 else None
    member = paho(server, "m", v5=v5, clean=False, expiry=expiry)
    member.subscribe("$share/g/state", 1)
    pub = paho(server, "pub")
    pub.publish("state", b"there", 1, retain=True)
    got = member.next()
    assert (got.payload, got.retain) == (b"there", False)
    member.stop()
    pub.publish("state", b"away", 1, retain=True)
    back = paho(server, "m", v5=v5, clean=False, expiry=expiry)
    got = back.next()
    assert (got.payload, got.retain) == (b"away", False)


def test_a_retained_publication_reaches_a_member_with_retain_as_published_as_retained(
    server: RunningServer,
) -> None:
    """MQTT-3.3.1-12: a v5 member that subscribed with Retain As Published gets the RETAIN
    flag a PUBLISH was sent with, there and away (from the group's copy on disk), as a
    non-shared subscription does; the member beside it without the option gets RETAIN 0."""
    member = paho(server, "m", clean=False, expiry=3600)
    member.subscribe("$share/g/state", 1, retainAsPublished=True)
    plain = paho(server, "plain")
    plain.subscribe("$share/h/state", 1)
    pub = paho(server, "pub")
    pub.publish("state", b"there", 1, retain=True)
    pub.publish("state", b"live", 1)
    for receiver, flag in ((member, True), (plain, False)):
        got = [receiver.next(), receiver.next()]
        assert [(m.payload, m.retain) for m in got] == [(b"there", flag), (b"live", False)]
    member.stop()
    pub.publish("state", b"away", 1, retain=True)
    back = paho(server, "m", clean=False, expiry=3600).next()
    assert (back.payload, back.retain) == (b"away", True)


def test_a_qos2_message_a_member_acknowledged_with_pubrec_is_not_sent_again_when_it_ends(
    server: RunningServer,
) -> None:
    """MQTT-234 note 3: a member's session ending MAY send the QoS 2 message it was being sent
    to another member; once it answered PUBREC the message is its own (MQTT 5.0 §4.3.3), so
    its session ending before the PUBCOMP sends it to no other member: that would make two."""
    gone, received, other = _one_each(server, "gone", clean=True, expiry=0)
    gone.sendall(pubrec(received.packet_id))
    assert read(gone) == (0x62, received.packet_id.to_bytes(2, "big"))  # PUBREL, no PUBCOMP
    gone.close()  # Session Expiry 0: the session ends with the connection
    got = _drain(other, within=1.0)
    assert sorted([*got, received.payload]) == [b"0", b"1"]


@pytest.mark.parametrize("v5", VERSIONS)
def test_a_group_whose_only_member_is_away_keeps_what_comes_for_it(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234: a Shared Subscription lasts for as long as it is associated with at least one
    Session, and a persistent session away is one: the group keeps what is published while its
    only member is away, and the member, back with its session, is sent all of it."""
    expiry = 3600 if v5 else None
    member = paho(server, "m", v5=v5, clean=False, expiry=expiry)
    member.subscribe("$share/g/w", 1)
    member.stop()
    pub = paho(server, "pub")
    for i in range(3):
        pub.publish("w", f"{i}".encode(), 1)
    back = paho(server, "m", v5=v5, clean=False, expiry=expiry)
    assert back.session_present
    assert _drain(back) == [b"0", b"1", b"2"]


@pytest.mark.parametrize("v5", VERSIONS)
def test_only_the_full_share_filter_unsubscribes_from_a_group(
    server: RunningServer, v5: bool
) -> None:
    """MQTT-234 §4.9.2: a Session detaches from a Shared Subscription with an UNSUBSCRIBE that
    contains the full Shared Subscription Topic Filter: the filter alone, or another share
    name, leaves it in the group (v5: UNSUBACK 0x11 No subscription existed); and the group and
    a plain subscription on the same filter are left each by its own filter."""
    member = paho(server, "m", v5=v5)
    member.subscribe("$share/g/u", 1)
    pub = paho(server, "pub")
    for wrong in ("u", "$share/h/u"):
        assert _codes(member.unsubscribe(wrong)) == ([0x11] if v5 else [])
    pub.publish("u", b"still a member", 1)
    assert _drain(member) == [b"still a member"]
    member.subscribe("u", 1)
    member.unsubscribe("$share/g/u")
    pub.publish("u", b"the plain copy", 1)
    assert _drain(member) == [b"the plain copy"]
    member.subscribe("$share/g/u", 1)
    member.unsubscribe("u")
    pub.publish("u", b"the group's copy", 1)
    assert _drain(member) == [b"the group's copy"]


def test_a_311_and_a_v5_member_share_one_group(server: RunningServer) -> None:
    """MQTT-234 is MQTT 5.0's, and boxmq takes "$share/" from 3.1.1 clients too (docs/mqtt.md):
    a 3.1.1 client joining a v5 client's group is one more member of that group, each message
    going to one of the two, at QoS 2 to both."""
    old = paho(server, "old", v5=False)
    assert _codes(old.subscribe("$share/g/mixed", 2)) == [2]
    new = paho(server, "new")
    assert _codes(new.subscribe("$share/g/mixed", 2)) == [2]
    pub = paho(server, "pub")
    sent = [f"{i}".encode() for i in range(6)]
    for payload in sent:
        pub.publish("mixed", payload, 2)
    got = {name: _drain_received(client) for name, client in (("old", old), ("new", new))}
    assert all(got.values()), got  # both take turns
    assert sorted(m.payload for ms in got.values() for m in ms) == sent
    assert {m.qos for ms in got.values() for m in ms} == {2}


def _waiting_for_the_member_away(server: RunningServer) -> Paho:
    """A member "away" (its session kept, its Maximum Packet Size 100) and a connected small
    member in group g, and a message of BIG bytes published that neither can take: it waits
    for the one away. The small member."""
    away = _small(server, "away", clean=False, expiry=3600)
    away.subscribe("$share/g/big/#", 1)
    away.stop()
    small = _small(server, "small")
    small.subscribe("$share/g/big/#", 1)
    paho(server, "pub").publish("big/x", b"x" * BIG, 1)
    assert small.nothing(within=0.5)
    return small


def test_a_message_too_large_for_the_members_there_goes_to_error_when_the_one_away_ends(
    server: RunningServer,
) -> None:
    """The member waited for ends its session (it connects again with a clean start) holding
    nothing: the members left, who cannot take it, are told of it, and it goes to error/."""
    small = _waiting_for_the_member_away(server)
    paho(server, "away", clean=True)  # its session, and its membership, end
    until(lambda: len(_group_states(server.root)["error"]) == 1, lambda: _group_states(server.root))
    assert "too-large" in _group_states(server.root)["error"][0]
    assert small.nothing(within=0.1)


def test_under_hash_by_key_a_message_too_large_for_its_keys_member_goes_to_error(
    tmp_path: Path,
) -> None:
    """No other member may have a key's messages (their order would break): a message too
    large for its key's member goes to error/ at once, and the others' keys go on."""
    with start_server(tmp_path / "root", group_dispatch={"g": "hash-by-key"}) as running:
        small = _small(running, "small")
        large = paho(running, "large")
        for member in (small, large):
            member.subscribe("$share/g/big/#", 1)
        pub = paho(running, "pub")
        topics = [f"big/{n}" for n in range(8)]
        for topic in topics:
            pub.publish(topic, topic.encode().ljust(BIG), 1)
        got = {m.topic for m in _drain_received(large)}
        until(
            lambda: len(_group_states(running.root)["error"]) == len(topics) - len(got),
            lambda: (got, _group_states(running.root)),
        )
        assert 0 < len(got) < len(topics)  # the keys are spread over both members
        assert all("too-large" in name for name in _group_states(running.root)["error"])
        assert small.nothing(within=0.1)


def test_a_member_that_declined_a_message_gets_it_once_back_with_a_clean_start(
    server: RunningServer,
) -> None:
    """A member passed over only while it stays connected: one that declined a message
    (waiting for a member away) and connects again with a clean start and no Maximum Packet
    Size is a new member, which takes it, not left waiting for the member away."""
    small = _waiting_for_the_member_away(server)
    small.stop()
    again = paho(server, "small")  # a clean start, no Maximum Packet Size
    again.subscribe("$share/g/big/#", 1)
    assert again.next().payload == b"x" * BIG
