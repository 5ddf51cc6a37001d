"""MQTT 3.1.1's numbered server rules that no other test checked on a 3.1.1 connection,
each over a raw socket at protocol level 4 and cited as "3.1.1 MQTT-x.y.z-n": 3.1.1 numbers
its statements apart from 5.0 (test_mqtt_normative.py), often the same rule under another
id, so the version goes with each id. Where 5.0 answers with a reason code, 3.1.1 closes
the connection without a word (§4.8).

The bytes are built here and in raw.py, not by boxmq's codec, so the codec is not tested
against itself.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import WAIT, RunningServer, start_server
from tests.integration.mqtt.raw import (
    PINGREQ,
    answers_to,
    connect_packet_311,
    longer,
    nothing,
    packet,
    read,
    string,
    until_closed,
)

from boxmq.clock import ManualClock
from boxmq.mqtt.settings import Limits, MqttSettings


def _connect(client_id: str = "c", *, flags: int = 0x02, rest: bytes = b"") -> bytes:
    """A 3.1.1 CONNECT (protocol level 4, Keep Alive 30 s) with these Connect Flags
    (§3.1.2.3; 0x02 CleanSession), `rest` after the client id (Will, User Name, Password)."""
    return packet(0x10, string("MQTT") + bytes([4, flags, 0, 30]) + string(client_id) + rest)


def _connack(server: RunningServer, connect: bytes) -> tuple[socket.socket, bytes]:
    """A socket that sent `connect`, and the body of the CONNACK it got."""
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    sock.sendall(connect)
    kind, body = read(sock)
    assert kind == 0x20, (hex(kind), body.hex())
    return sock, body


def _connected(server: RunningServer, client_id: str = "c", *, clean: bool = True) -> socket.socket:
    sock, body = _connack(server, _connect(client_id, flags=0x02 if clean else 0x00))
    assert body[1] == 0, body.hex()
    return sock


def _answers_to(
    server: RunningServer, sent: bytes, *, first: bool = False
) -> list[tuple[int, bytes]]:
    """Every packet the server sent for `sent` before it closed the connection: `sent` after
    a 3.1.1 CONNECT it accepted, or as the connection's first packet (`first`)."""
    if first:
        return answers_to(socket.create_connection((server.host, server.port), timeout=WAIT), sent)
    return answers_to(_connected(server), sent)


def _publish(
    topic: str, payload: bytes, *, qos: int = 0, packet_id: int = 0, retain: bool = False
) -> bytes:
    """A 3.1.1 PUBLISH (no properties), with a packet id at QoS 1 and 2."""
    ident = packet_id.to_bytes(2, "big") if qos else b""
    return packet(0x30 | qos << 1 | int(retain), string(topic) + ident + payload)


def _subscribe(packet_id: int, *filters: tuple[str, int]) -> bytes:
    """A 3.1.1 SUBSCRIBE of these (filter, Requested QoS byte) pairs: no properties, and
    no subscription options but the QoS (§3.8.3.1)."""
    pairs = b"".join(string(f) + bytes([qos]) for f, qos in filters)
    return packet(0x82, packet_id.to_bytes(2, "big") + pairs)


def _received(sock: socket.socket) -> tuple[int, str, bytes]:
    """(first byte, topic, payload) of the next PUBLISH, a QoS 0 one."""
    kind, body = read(sock)
    assert kind & 0xF0 == 0x30, (hex(kind), body.hex())
    end = 2 + int.from_bytes(body[:2], "big")
    return kind, body[2:end].decode(), body[end:]


def _subscribed(server: RunningServer, client_id: str, filter: str) -> socket.socket:
    """A clean 3.1.1 connection subscribed to `filter` at QoS 0."""
    sock = _connected(server, client_id)
    sock.sendall(_subscribe(1, (filter, 0)))
    assert read(sock) == (0x90, b"\x00\x01\x00")
    return sock


def _will(message: str) -> bytes:
    """A 3.1.1 CONNECT payload's Will (no properties): topic "w", this message."""
    return string("w") + string(message)


# A CONNECT the spec calls malformed; 3.1.1 has no return code that says so (a CONNACK's
# codes are 0x01 to 0x05, none of them "malformed"), so it gets none.
BAD_CONNECTS = [
    ("reserved flag set", _connect(flags=0x03)),  # 3.1.1 MQTT-3.1.2-3
    ("Will QoS without a Will", _connect(flags=0x02 | 0x08)),  # 3.1.1 MQTT-3.1.2-13
    ("Will QoS 3", _connect(flags=0x02 | 0x04 | 0x18, rest=_will("x"))),  # 3.1.1 MQTT-3.1.2-14
    ("Will Retain without a Will", _connect(flags=0x02 | 0x20)),  # 3.1.1 MQTT-3.1.2-15
    ("User Name Flag without one", _connect(flags=0x02 | 0x80)),  # 3.1.1 MQTT-3.1.2-19
    ("Password without User Name", _connect(flags=0x02 | 0x40, rest=string("p"))),  # -22
    ("Will Topic not UTF-8", _connect(flags=0x06, rest=b"\x00\x01\xff" + string("x"))),
    ("a wildcard in the Will Topic", _connect(flags=0x06, rest=string("a/+") + string("x"))),
    ("an empty Will Topic", _connect(flags=0x06, rest=string("") + string("x"))),  # 4.7.3-1
    ("Will Flag without a Will", _connect(flags=0x06)),  # 3.1.1 MQTT-3.1.2-9
    ("Will Topic without a Will Message", _connect(flags=0x06, rest=string("w"))),  # -9
    ("a Will without the Will Flag", _connect(rest=_will("x"))),  # 3.1.1 MQTT-3.1.2-11
    ("a User Name without its flag", _connect(rest=string("u"))),  # 3.1.1 MQTT-3.1.2-18
    ("a Password without its flag", _connect(flags=0x82, rest=string("u") + string("p"))),  # -20
    ("Password Flag without one", _connect(flags=0xC2, rest=string("u"))),  # MQTT-3.1.2-21
    ("no Client Identifier", packet(0x10, string("MQTT") + bytes([4, 0x02, 0, 30]))),  # 3.1.3-3
]


@pytest.mark.parametrize("bad", [c[1] for c in BAD_CONNECTS], ids=[c[0] for c in BAD_CONNECTS])
def test_a_malformed_connect_is_closed_without_a_connack(server: RunningServer, bad: bytes) -> None:
    """3.1.1 MQTT-3.1.4-1: the server checks the CONNECT and closes a connection whose
    CONNECT breaks the spec; 3.1.1 MQTT-3.2.2-6: with no CONNACK, none of its return codes
    fitting (the Will Topic is a UTF-8 string, 3.1.1 MQTT-3.1.3-10, MQTT-1.5.3-1). A field
    its flag leaves out (3.1.1 MQTT-3.1.2-11, MQTT-3.1.2-18, MQTT-3.1.2-20) or one it calls
    for missing (3.1.1 MQTT-3.1.2-9, MQTT-3.1.2-21, and the Client Identifier, always there,
    3.1.1 MQTT-3.1.3-3) is a CONNECT that breaks the spec too, as is a Will Topic with a
    wildcard or empty, no Topic Name (3.1.1 MQTT-4.7.1-1, MQTT-4.7.3-1)."""
    assert _answers_to(server, bad, first=True) == []


def test_a_will_is_published_retained_as_its_will_retain_says(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.2-8: the Will goes out when the connection closes without DISCONNECT
    (here for a second CONNECT, 3.1.1 MQTT-3.1.0-2); 3.1.1 MQTT-3.1.2-17: Will Retain 1
    publishes it as a retained message, which a later subscriber gets with RETAIN 1 (3.1.1
    MQTT-3.3.1-8), one already subscribed with 0 (3.1.1 MQTT-3.3.1-9); 3.1.1 MQTT-3.1.2-16:
    Will Retain 0 publishes it not retained, the retained one left as it was."""
    with _subscribed(server, "watcher", "w") as watcher:
        for client_id, retain, message in (("a", 0x20, "kept"), ("b", 0x00, "passing")):
            sock, body = _connack(
                server, _connect(client_id, flags=0x06 | retain, rest=_will(message))
            )
            assert body == b"\x00\x00"
            sock.sendall(_connect(client_id))
            assert until_closed(sock) == []
            sock.close()
            assert _received(watcher) == (0x30, "w", message.encode())
    with _subscribed(server, "late", "w") as late:
        assert _received(late) == (0x31, "w", b"kept")
        assert nothing(late)


def test_an_end_without_a_will_publishes_nothing_and_leaves_the_retained_message(
    server: RunningServer,
) -> None:
    """3.1.1 MQTT-3.1.2-12: a connection whose Will Flag was 0 publishes nothing when it
    breaks; 3.1.1 MQTT-3.1.2-7: the retained message it published is no part of its session,
    and stays when the session ends with the connection (CleanSession 1)."""
    with _subscribed(server, "watcher", "w/#") as watcher:
        with _connected(server, "gone") as gone:
            _published(gone, "w/state", b"kept", retain=True)
        assert _received(watcher) == (0x30, "w/state", b"kept")
        assert nothing(watcher)
    with _subscribed(server, "late", "w/#") as late:
        assert _received(late) == (0x31, "w/state", b"kept")


def test_a_connect_of_another_protocol_name_is_refused(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.2-1: a Protocol Name other than "MQTT" may be closed, or handled by
    another protocol's rules, never by 3.1.1's: boxmq closes it, after at most a CONNACK
    refusing its version (0x01)."""
    connect = packet(0x10, string("MQTX") + bytes([4, 0x02, 0, 30]) + string("c"))
    assert _answers_to(server, connect, first=True) in ([], [(0x20, b"\x00\x01")])


def test_an_empty_client_id_needs_a_clean_session(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.3-8: an empty client id with CleanSession 0 gets CONNACK 0x02
    (Identifier rejected) with Session Present 0 (3.1.1 MQTT-3.2.2-4), then the close (3.1.1
    MQTT-3.2.2-5); 3.1.1 MQTT-3.1.3-6: with CleanSession 1 it is accepted, and the server
    names the session itself: two such clients at once keep their connections."""
    assert _answers_to(server, _connect("", flags=0x00), first=True) == [(0x20, b"\x00\x02")]
    with _connected(server, "") as one, _connected(server, "") as two:
        for sock in (one, two):
            sock.sendall(PINGREQ)
            assert read(sock) == (0xD0, b"")


def test_a_client_id_of_23_listed_characters_is_accepted(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.3-5: 1 to 23 bytes of 0-9, a-z, A-Z are always allowed, and answered
    with return code 0x00 (3.1.1 MQTT-3.1.4-4)."""
    client_id = "0123456789abcdefghijXYZ"
    assert len(client_id) == 23
    sock, body = _connack(server, _connect(client_id))
    sock.close()
    assert body == b"\x00\x00"


def test_nothing_after_a_refused_connect_is_acted_on(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.4-5: a PUBLISH in the same write as a CONNECT refused (0x02) is not
    processed: a subscriber to its topic gets nothing."""
    with _subscribed(server, "watcher", "after/refusal") as watcher:
        refused = _connect("", flags=0x00) + _publish("after/refusal", b"no")
        assert _answers_to(server, refused, first=True) == [(0x20, b"\x00\x02")]
        assert nothing(watcher)


def test_session_present_says_whether_a_session_was_resumed(server: RunningServer) -> None:
    """3.1.1 MQTT-3.2.2-3: CleanSession 0 without a stored session gets Session Present 0;
    3.1.1 MQTT-3.2.2-2: with one (kept after its connection closed, 3.1.1 MQTT-3.1.2-4), 1;
    3.1.1 MQTT-3.2.2-1: CleanSession 1 gets 0, and discards the session (3.1.1
    MQTT-3.1.2-6, MQTT-3.1.4-3), so CleanSession 0 after it gets 0 again. The client id
    names the session each time (3.1.1 MQTT-3.1.3-2)."""
    answers = []
    for flags in (0x00, 0x00, 0x02, 0x00):
        sock, body = _connack(server, _connect("kept", flags=flags))
        sock.close()
        answers.append(body)
    assert answers == [b"\x00\x00", b"\x01\x00", b"\x00\x00", b"\x00\x00"]


def test_the_same_client_id_again_closes_the_older_connection(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.4-2: the server disconnects the client already connected with that
    client id (3.1.1 has no DISCONNECT from the server: a close), and the new one is served:
    its PINGREQ gets a PINGRESP (3.1.1 MQTT-3.12.4-1)."""
    with _connected(server, "twin") as old, _connected(server, "twin") as new:
        assert until_closed(old) == []
        new.sendall(PINGREQ)
        assert read(new) == (0xD0, b"")


def test_a_client_silent_for_one_and_a_half_keep_alives_is_closed(tmp_path: Path) -> None:
    """3.1.1 MQTT-3.1.2-24: a client that sends nothing for one and a half times its Keep
    Alive (10 s here: 15 s) is closed as if it had failed (no DISCONNECT in 3.1.1); its last
    packet, a PINGREQ, starts the count again, and 14.9 s after it the connection stands. The
    broker's clock moves when the test says, so no test waits 15 s."""
    clock = ManualClock()
    with (
        start_server(tmp_path / "root", clock=clock) as running,
        socket.create_connection((running.host, running.port), timeout=WAIT) as sock,
    ):
        sock.sendall(connect_packet_311("k", keep_alive=10))
        assert read(sock) == (0x20, b"\x00\x00")
        clock.advance(14)
        sock.sendall(PINGREQ)
        assert read(sock) == (0xD0, b"")
        clock.advance(14.9)
        assert nothing(sock)  # the broker looks every 0.25 s
        clock.advance(0.2)
        assert until_closed(sock) == []


def _published(sock: socket.socket, topic: str, payload: bytes, *, retain: bool = False) -> None:
    """Publish at QoS 1 and wait for the PUBACK, which comes once a retained message is stored."""
    sock.sendall(_publish(topic, payload, qos=1, packet_id=1, retain=retain))
    assert read(sock) == (0x40, b"\x00\x01")


def test_retain_replaces_empty_deletes_and_retain_0_leaves_it(server: RunningServer) -> None:
    """3.1.1 MQTT-3.3.1-5: RETAIN 1 stores the message, replacing the topic's; 3.1.1
    MQTT-3.3.1-10, MQTT-3.3.1-11: an empty one deletes it and is not stored; 3.1.1
    MQTT-3.3.1-12: RETAIN 0 neither stores nor deletes. A subscriber already there gets each
    with RETAIN 0 (3.1.1 MQTT-3.3.1-9), the empty one too; a new one gets what is stored
    with RETAIN 1 (3.1.1 MQTT-3.3.1-8)."""
    with _connected(server, "p") as pub, _subscribed(server, "live", "r/+") as live:
        _published(pub, "r/a", b"old", retain=True)
        _published(pub, "r/a", b"new", retain=True)
        _published(pub, "r/a", b"not kept")
        _published(pub, "r/b", b"gone", retain=True)
        _published(pub, "r/b", b"", retain=True)
        got = [_received(live) for _ in range(5)]
        assert got == [
            (0x30, "r/a", b"old"),
            (0x30, "r/a", b"new"),
            (0x30, "r/a", b"not kept"),
            (0x30, "r/b", b"gone"),
            (0x30, "r/b", b""),
        ]
        with _subscribed(server, "late", "r/+") as late:
            assert _received(late) == (0x31, "r/a", b"new")
            assert nothing(late)


# A Topic Name is a UTF-8 string without U+0000 (3.1.1 MQTT-1.5.3-2, MQTT-4.7.3-2) of at least one
# character (3.1.1 MQTT-4.7.3-1); anything else closes the connection.
BAD_TOPICS = [
    ("U+0000", packet(0x30, b"\x00\x03a\x00b" + b"x")),
    ("empty", _publish("", b"x")),
]


@pytest.mark.parametrize("bad", [c[1] for c in BAD_TOPICS], ids=[c[0] for c in BAD_TOPICS])
def test_a_publish_to_a_topic_name_that_cannot_be_is_closed(
    server: RunningServer, bad: bytes
) -> None:
    """3.1.1 MQTT-1.5.3-2, MQTT-4.7.3-1: closed, nothing sent (3.1.1 MQTT-4.8.0-1), and a
    subscriber to every topic gets nothing."""
    with _subscribed(server, "watcher", "#") as watcher:
        assert _answers_to(server, bad) == []
        assert nothing(watcher)


def _acknowledged(sock: socket.socket, kind: int, body: bytes) -> tuple[str, bytes] | None:
    """Answer a packet a subscriber read as its QoS says (a PUBLISH of QoS 1 with PUBACK, of
    QoS 2 with PUBREC, a PUBREL with PUBCOMP): the PUBLISH's (topic, payload), None for a
    PUBREL."""
    if kind == 0x62:  # the PUBREL of a QoS 2 one
        sock.sendall(packet(0x70, body))
        return None
    end = 2 + int.from_bytes(body[:2], "big")
    sock.sendall(packet(0x40 if kind & 0x06 == 0x02 else 0x50, body[end : end + 2]))
    return body[2:end].decode(), body[end + 2 :]


def _publish_fields(sock: socket.socket) -> tuple[int, str, int, bytes]:
    """(first byte, topic, packet id, payload) of the next PUBLISH, a QoS 1 one."""
    kind, body = read(sock)
    assert kind & 0xF6 == 0x32, (hex(kind), body.hex())
    end = 2 + int.from_bytes(body[:2], "big")
    return kind, body[2:end].decode(), int.from_bytes(body[end : end + 2], "big"), body[end + 2 :]


def test_a_persistent_session_gets_again_what_it_did_not_acknowledge(
    server: RunningServer,
) -> None:
    """3.1.1 MQTT-4.4.0-1: CleanSession 0 resumes the session, and the server sends again
    each PUBLISH not acknowledged, under its packet id, with DUP 1 (3.1.1 MQTT-3.3.1-1);
    sent first, DUP is 0, whatever DUP the publisher set (3.1.1 MQTT-3.3.1-3); and one kept
    for the session while it was away matched an established subscription, so it comes with
    RETAIN 0 though it was published retained (3.1.1 MQTT-3.3.1-9). The server kept them
    for the session while it was away (3.1.1 MQTT-3.1.2-5, MQTT-4.5.0-1), sends its CONNACK
    before them (3.1.1 MQTT-3.2.0-1), and holds each unacknowledged until its PUBACK (3.1.1
    MQTT-4.3.2-1): session state kept for as long as the session lasts (3.1.1 MQTT-4.1.0-1)."""
    with _connected(server, "away", clean=False) as away:
        away.sendall(_subscribe(1, ("jobs/#", 1)))
        assert read(away) == (0x90, b"\x00\x01\x01")
    with _connected(server, "p") as pub:
        _published(pub, "jobs/1", b"kept", retain=True)
        pub.sendall(packet(0x3A, string("jobs/2") + b"\x00\x07" + b"dup"))  # DUP 1, QoS 1
        assert read(pub) == (0x40, b"\x00\x07")
    with _connected(server, "away", clean=False) as back:
        # Order across topics is not MQTT's to keep (3.1.1 §4.6 keeps it per topic).
        first = sorted((_publish_fields(back) for _ in range(2)), key=lambda got: got[1])
    assert [(kind, topic, payload) for kind, topic, _, payload in first] == [
        (0x32, "jobs/1", b"kept"),
        (0x32, "jobs/2", b"dup"),
    ]
    with _connected(server, "away", clean=False) as again:
        resent = sorted((_publish_fields(again) for _ in range(2)), key=lambda got: got[1])
        assert resent == [(0x3A, topic, ident, payload) for _, topic, ident, payload in first]
        for _, _, ident, _ in resent:
            again.sendall(packet(0x40, ident.to_bytes(2, "big")))
        assert nothing(again)


def _unsubscribe(packet_id: int, *filters: str) -> bytes:
    return packet(0xA2, packet_id.to_bytes(2, "big") + b"".join(map(string, filters)))


# A SUBSCRIBE or UNSUBSCRIBE that breaks its payload's rules closes the connection: 3.1.1
# has neither properties nor subscription options, so a byte that 5.0 reads as No Local,
# Retain As Published or Retain Handling is a reserved bit set.
BAD_SUBSCRIPTIONS = [
    ("SUBSCRIBE without a filter", packet(0x82, b"\x00\x01")),  # 3.1.1 MQTT-3.8.3-3
    ("UNSUBSCRIBE without a filter", packet(0xA2, b"\x00\x01")),  # 3.1.1 MQTT-3.10.3-2
    ("Requested QoS 3", _subscribe(1, ("a", 3))),  # 3.1.1 MQTT-3.8.3-4
    ("v5's No Local bit", _subscribe(1, ("a", 0x04))),  # 3.1.1 MQTT-3.8.3-4
    ("v5's Retain As Published bit", _subscribe(1, ("a", 0x08))),  # 3.1.1 MQTT-3.8.3-4
    ("v5's Retain Handling 1", _subscribe(1, ("a", 0x10))),  # 3.1.1 MQTT-3.8.3-4
    ("the top reserved bit", _subscribe(1, ("a", 0x80))),  # 3.1.1 MQTT-3.8.3-4
]


@pytest.mark.parametrize(
    "bad", [c[1] for c in BAD_SUBSCRIPTIONS], ids=[c[0] for c in BAD_SUBSCRIPTIONS]
)
def test_a_subscribe_or_unsubscribe_breaking_its_payload_rules_is_closed(
    server: RunningServer, bad: bytes
) -> None:
    """3.1.1 MQTT-3.8.3-3, MQTT-3.10.3-2, MQTT-3.8.3-4: closed without a SUBACK or UNSUBACK
    (3.1.1 MQTT-4.8.0-1)."""
    assert _answers_to(server, bad) == []


def test_suback_and_unsuback_answer_each_filter_in_order(server: RunningServer) -> None:
    """3.1.1 MQTT-3.8.4-1, MQTT-3.8.4-2: a SUBACK with the SUBSCRIBE's packet id; 3.1.1
    MQTT-3.8.4-4, MQTT-3.8.4-5, MQTT-3.9.3-1: one for several filters, a return code each in
    their order, the QoS granted (3.1.1 MQTT-3.8.4-6) or 0x80 Failure for a filter whose
    wildcards do not take whole levels or whose '#' is not last (3.1.1 MQTT-4.7.1-2,
    MQTT-4.7.1-3), and no other code (3.1.1 MQTT-3.9.3-2); 3.1.1 MQTT-3.10.4-4,
    MQTT-3.10.4-5: an UNSUBACK with the UNSUBSCRIBE's packet id (3.1.1 MQTT-2.3.1-7, for
    the SUBACK too), even for filters never subscribed, one for all three (3.1.1
    MQTT-3.10.4-6). Wildcards are served (3.1.1 MQTT-3.8.3-2): "c/+" and "#" granted."""
    with _connected(server, "s") as sock:
        filters = [("a", 2), ("a/#/b", 1), ("b+", 0), ("c/+", 1), ("#", 0)]
        sock.sendall(_subscribe(0x0203, *filters))
        assert read(sock) == (0x90, b"\x02\x03\x02\x80\x80\x01\x00")
        sock.sendall(_unsubscribe(0x0405, "never", "a", "b+"))
        assert read(sock) == (0xB0, b"\x04\x05")


def test_unsubscribe_deletes_only_the_filter_it_names_character_for_character(
    server: RunningServer,
) -> None:
    """3.1.1 MQTT-3.10.4-1: a filter that only matches the same topics ("a/#" for "a/+")
    deletes nothing; the one it names stops the messages (3.1.1 MQTT-3.10.4-2)."""
    with _subscribed(server, "s", "a/+") as sock, _connected(server, "p") as pub:
        sock.sendall(_unsubscribe(2, "a/#", "A/+"))
        assert read(sock) == (0xB0, b"\x00\x02")
        _published(pub, "a/b", b"kept")
        assert _received(sock) == (0x30, "a/b", b"kept")
        sock.sendall(_unsubscribe(3, "a/+"))
        assert read(sock) == (0xB0, b"\x00\x03")
        _published(pub, "a/b", b"gone")
        assert nothing(sock)


def test_subscribing_again_replaces_and_sends_the_retained_message_again(
    server: RunningServer,
) -> None:
    """3.1.1 MQTT-3.8.4-3: a SUBSCRIBE of a filter already subscribed replaces the
    subscription (one copy of each message after it) and sends its retained messages again."""
    with _connected(server, "p") as pub, _connected(server, "s") as sub:
        _published(pub, "r/t", b"kept", retain=True)
        for qos in (0, 1):
            sub.sendall(_subscribe(1, ("r/t", qos)))
            assert read(sub) == (0x90, bytes([0, 1, qos]))
            kind, body = read(sub)
            assert (kind & 0xF1, body[:5]) == (0x31, string("r/t")), body.hex()
            if qos:
                sub.sendall(packet(0x40, body[5:7]))
        _published(pub, "r/t", b"once")
        assert read(sub)[0] == 0x32  # at the QoS of the last SUBSCRIBE
        assert nothing(sub)


def test_a_wildcard_first_does_not_match_a_topic_starting_with_dollar(
    server: RunningServer,
) -> None:
    """3.1.1 MQTT-4.7.2-1: "#" and "+/x" do not match "$app/x"; "$app/x" itself does."""
    with _connected(server, "p") as pub, _connected(server, "s") as sub:
        sub.sendall(_subscribe(1, ("#", 0), ("+/x", 0), ("$app/x", 0)))
        assert read(sub) == (0x90, b"\x00\x01\x00\x00\x00")
        _published(pub, "$app/x", b"d")
        assert _received(sub) == (0x30, "$app/x", b"d")
        assert nothing(sub)


# A fixed header's flag bits other than PUBLISH's are reserved, as §2.2.2's table lists them
# (3.1.1 MQTT-2.2.2-1); a receiver closes the connection for any other (3.1.1
# MQTT-2.2.2-2). Each packet's own rule is named beside it.
BAD_FLAGS = [
    ("PUBACK 0x41", bytes([0x41, 2, 0, 1])),  # §3.4.1
    ("PUBREC 0x51", bytes([0x51, 2, 0, 1])),  # §3.5.1
    ("PUBREL 0x60", bytes([0x60, 2, 0, 1])),  # 3.1.1 MQTT-3.6.1-1
    ("PUBCOMP 0x71", bytes([0x71, 2, 0, 1])),  # §3.7.1
    ("UNSUBSCRIBE 0xA0", packet(0xA0, b"\x00\x01" + string("a"))),  # 3.1.1 MQTT-3.10.1-1
    ("PINGREQ 0xC1", bytes([0xC1, 0])),  # §3.12.1
    ("DISCONNECT 0xE1", bytes([0xE1, 0])),  # 3.1.1 MQTT-3.14.1-1
]


@pytest.mark.parametrize("bad", [c[1] for c in BAD_FLAGS], ids=[c[0] for c in BAD_FLAGS])
def test_reserved_flag_bits_not_as_listed_close_the_connection(
    server: RunningServer, bad: bytes
) -> None:
    """3.1.1 MQTT-2.2.2-2: closed, nothing sent (3.1.1 MQTT-4.8.0-1)."""
    assert _answers_to(server, bad) == []


def test_disconnect_discards_the_will(server: RunningServer) -> None:
    """3.1.1 MQTT-3.14.4-3, MQTT-3.1.2-10: a DISCONNECT deletes the Will unpublished; the
    same client closing without one has its Will published (3.1.1 MQTT-3.1.2-8), so the
    first is not merely late."""
    with _subscribed(server, "watcher", "w") as watcher:
        for message, goodbye in (("discarded", bytes([0xE0, 0])), ("published", b"")):
            sock, body = _connack(server, _connect("willed", flags=0x06, rest=_will(message)))
            assert body == b"\x00\x00"
            with sock:
                sock.sendall(goodbye)
                if goodbye:
                    assert until_closed(sock) == []
        assert _received(watcher) == (0x30, "w", b"published")
        assert nothing(watcher)


def _connect_with_id(encoded: bytes) -> bytes:
    """A 3.1.1 CONNECT whose client id field is these bytes, their length before them."""
    client_id = len(encoded).to_bytes(2, "big") + encoded
    return packet(0x10, string("MQTT") + bytes([4, 0x02, 0, 30]) + client_id)


# Each string of a 3.1.1 packet is well-formed UTF-8 (3.1.1 MQTT-1.5.3-1: no surrogate
# either) without U+0000 (3.1.1 MQTT-1.5.3-2); a receiver closes the connection for one
# that is not. In a CONNECT there is no return code for it: no CONNACK (3.1.1 MQTT-3.2.2-6).
BAD_STRINGS_IN_CONNECT = [
    ("client id not UTF-8", _connect_with_id(b"\xff\xfe")),  # 3.1.1 MQTT-3.1.3-4
    ("client id with U+0000", _connect_with_id(b"a\x00b")),  # 3.1.1 MQTT-3.1.3-4
    ("client id with a surrogate", _connect_with_id(b"\xed\xa0\x80")),  # MQTT-3.1.3-4
    ("Will Topic with U+0000", _connect(flags=0x06, rest=b"\x00\x01\x00" + string("x"))),
    ("User Name not UTF-8", _connect(flags=0x82, rest=b"\x00\x01\xff")),  # MQTT-3.1.3-11
    ("User Name with U+0000", _connect(flags=0x82, rest=b"\x00\x01\x00")),  # MQTT-3.1.3-11
]


@pytest.mark.parametrize(
    "bad", [c[1] for c in BAD_STRINGS_IN_CONNECT], ids=[c[0] for c in BAD_STRINGS_IN_CONNECT]
)
def test_a_connect_string_that_cannot_be_is_closed_without_a_connack(
    server: RunningServer, bad: bytes
) -> None:
    """3.1.1 MQTT-1.5.3-1, MQTT-1.5.3-2, MQTT-3.1.4-1: closed, nothing sent."""
    assert _answers_to(server, bad, first=True) == []


BAD_STRINGS_AFTER_CONNECT = [
    ("SUBSCRIBE filter not UTF-8", packet(0x82, b"\x00\x01\x00\x01\xff\x00")),  # MQTT-3.8.3-1
    ("UNSUBSCRIBE filter not UTF-8", packet(0xA2, b"\x00\x01\x00\x01\xff")),  # MQTT-3.10.3-1
    ("SUBSCRIBE filter with U+0000", packet(0x82, b"\x00\x01\x00\x03a\x00b\x00")),
    ("empty SUBSCRIBE filter", _subscribe(1, ("", 0))),  # 3.1.1 MQTT-4.7.3-1
    ("empty UNSUBSCRIBE filter", _unsubscribe(1, "")),  # 3.1.1 MQTT-4.7.3-1
    ("a surrogate in a Topic Name", packet(0x30, b"\x00\x03\xed\xa0\x80x")),  # MQTT-3.3.2-1
    ("SUBSCRIBE packet id 0", _subscribe(0, ("a", 0))),  # 3.1.1 MQTT-2.3.1-1
    ("UNSUBSCRIBE packet id 0", _unsubscribe(0, "a")),  # 3.1.1 MQTT-2.3.1-1
]


@pytest.mark.parametrize(
    "bad",
    [c[1] for c in BAD_STRINGS_AFTER_CONNECT],
    ids=[c[0] for c in BAD_STRINGS_AFTER_CONNECT],
)
def test_a_string_or_packet_id_that_cannot_be_closes_the_connection(
    server: RunningServer, bad: bytes
) -> None:
    """3.1.1 MQTT-1.5.3-1, MQTT-1.5.3-2, MQTT-4.7.3-1 (a filter is at least one character
    long), MQTT-2.3.1-1 (a SUBSCRIBE's or UNSUBSCRIBE's packet id is not 0): closed without a
    SUBACK or UNSUBACK (3.1.1 MQTT-4.8.0-1)."""
    assert _answers_to(server, bad) == []


def test_qos_2_both_ways_survives_a_reconnect_once_and_only_once(server: RunningServer) -> None:
    """3.1.1 MQTT-4.3.3-2: the server, receiving a QoS 2 PUBLISH, answers PUBREC, and the
    same packet id sent again before the PUBREL, here with DUP on a resumed session, gets
    PUBREC again and is not delivered a second time; the PUBREL gets PUBCOMP. Sending one,
    the server answers the PUBREC with PUBREL (3.1.1 MQTT-4.3.3-1), and a resumed session
    gets that PUBREL again, not the PUBLISH (3.1.1 MQTT-4.4.0-1). The QoS 2 message was
    kept for the session while it was away (3.1.1 MQTT-3.1.2-5), and each PUBREC, PUBREL and
    PUBCOMP has its PUBLISH's packet id (3.1.1 MQTT-2.3.1-6)."""
    with _connected(server, "device", clean=False) as device:
        device.sendall(_subscribe(1, ("q/#", 2)))
        assert read(device) == (0x90, b"\x00\x01\x02")
    with _subscribed(server, "watcher", "q/#") as watcher:
        with _connected(server, "sender", clean=False) as sender:
            sender.sendall(_publish("q/1", b"two", qos=2, packet_id=4))
            assert read(sender) == (0x50, b"\x00\x04")
        with _connected(server, "sender", clean=False) as sender:
            sender.sendall(packet(0x3C, string("q/1") + b"\x00\x04" + b"two"))  # DUP 1
            assert read(sender) == (0x50, b"\x00\x04")
            sender.sendall(packet(0x62, b"\x00\x04"))
            assert read(sender) == (0x70, b"\x00\x04")
        assert _received(watcher) == (0x30, "q/1", b"two")
        assert nothing(watcher)
    with _connected(server, "device", clean=False) as device:
        kind, body = read(device)
        assert (kind, body[:5], body[7:]) == (0x34, string("q/1"), b"two"), body.hex()
        packet_id = body[5:7]
        device.sendall(packet(0x50, packet_id))
        assert read(device) == (0x62, packet_id)
    with _connected(server, "device", clean=False) as device:
        assert read(device) == (0x62, packet_id)
        device.sendall(packet(0x70, packet_id))
        assert nothing(device)


def test_overlapping_subscriptions_get_a_copy_at_the_highest_qos(server: RunningServer) -> None:
    """3.1.1 MQTT-3.3.5-1: a message matching several of a client's filters is delivered at
    the highest QoS they were granted; boxmq also sends a copy for each other filter at its
    own QoS, which 3.1.1 §3.3.5 allows. Each copy goes by itself: its own packet id at QoS 1
    and 2, its DUP 0 (3.1.1 MQTT-2.3.1-4, MQTT-3.3.1-3)."""
    with _connected(server, "s") as sub, _connected(server, "p") as pub:
        sub.sendall(_subscribe(1, ("a/#", 0), ("a/b", 2), ("+/b", 1)))
        assert read(sub) == (0x90, b"\x00\x01\x00\x02\x01")
        pub.sendall(_publish("a/b", b"x", qos=2, packet_id=1))
        assert read(pub) == (0x50, b"\x00\x01")
        pub.sendall(packet(0x62, b"\x00\x01"))
        assert read(pub) == (0x70, b"\x00\x01")
        copies = sorted(read(sub) for _ in range(3))
        assert [kind for kind, _ in copies] == [0x30, 0x32, 0x34]
        assert copies[0][1] == string("a/b") + b"x"
        ids = [body[5:7] for _, body in copies[1:]]
        assert [body[:5] + body[7:] for _, body in copies[1:]] == [string("a/b") + b"x"] * 2
        assert b"\x00\x00" not in ids, ids
        assert ids[0] != ids[1], ids
        assert nothing(sub)


@pytest.mark.parametrize("qos", [1, 2])
def test_what_an_unsubscribe_caught_in_flight_is_still_delivered(
    server: RunningServer, qos: int
) -> None:
    """3.1.1 MQTT-3.10.4-3: a server that deletes a subscription completes the delivery of
    the QoS 1 and 2 messages it began to send on it: a PUBREC after the UNSUBACK gets its
    PUBREL, and a persistent session that comes back without having acknowledged gets the
    PUBLISH (with DUP 1), or the PUBREL, again (3.1.1 MQTT-4.4.0-1)."""
    with _connected(server, "p") as pub, _connected(server, "s", clean=False) as sub:
        sub.sendall(_subscribe(1, ("u/#", qos)))
        assert read(sub) == (0x90, bytes([0, 1, qos]))
        pub.sendall(_publish("u/1", b"x", qos=qos, packet_id=1))
        if qos == 2:
            assert read(pub) == (0x50, b"\x00\x01")
            pub.sendall(packet(0x62, b"\x00\x01"))
        assert read(pub) == (0x40 if qos == 1 else 0x70, b"\x00\x01")
        kind, body = read(sub)
        assert (kind, body[:5], body[7:]) == (qos << 1 | 0x30, string("u/1"), b"x"), body.hex()
        packet_id = body[5:7]
        sub.sendall(_unsubscribe(2, "u/#"))
        assert read(sub) == (0xB0, b"\x00\x02")
        if qos == 2:
            sub.sendall(packet(0x50, packet_id))
            assert read(sub) == (0x62, packet_id)
    expected = (0x3A, body) if qos == 1 else (0x62, packet_id)
    with _connected(server, "s", clean=False) as back:
        assert read(back) == expected
        back.sendall(packet(0x40 if qos == 1 else 0x70, packet_id))
        assert nothing(back)


def test_acknowledgements_and_deliveries_keep_the_order_messages_came_in(
    server: RunningServer,
) -> None:
    """3.1.1 MQTT-4.6.0-2, MQTT-4.6.0-3: PUBACKs and PUBRECs go in the order their PUBLISHes
    came, here ten QoS 1 and ten QoS 2 ones interleaved in one write, each answered as its
    QoS says (3.1.1 MQTT-3.3.4-1); 3.1.1 MQTT-4.6.0-5,
    MQTT-4.6.0-6: each topic is ordered, and its subscribers get its messages of one QoS
    in the order they came from the publisher."""
    with _subscribed(server, "s", "o/#") as sub, _connected(server, "p") as pub:
        sub.sendall(_subscribe(2, ("o/#", 2)))
        assert read(sub) == (0x90, b"\x00\x02\x02")
        sent = b""
        for n in range(1, 21):
            qos = 1 + n % 2
            sent += _publish(f"o/{qos}", str(n).encode(), qos=qos, packet_id=n)
        pub.sendall(sent)
        answers = [read(pub) for _ in range(20)]
        assert answers == [(0x50 if n % 2 else 0x40, n.to_bytes(2, "big")) for n in range(1, 21)]
        pub.sendall(b"".join(packet(0x62, n.to_bytes(2, "big")) for n in range(1, 21, 2)))
        assert [read(pub) for _ in range(10)] == [
            (0x70, n.to_bytes(2, "big")) for n in range(1, 21, 2)
        ]
        got: dict[str, list[bytes]] = {"o/1": [], "o/2": []}
        while sum(map(len, got.values())) < 20:
            if (message := _acknowledged(sub, *read(sub))) is not None:
                topic, payload = message
                got[topic].append(payload)
        assert got == {
            "o/1": [str(n).encode() for n in range(2, 21, 2)],
            "o/2": [str(n).encode() for n in range(1, 21, 2)],
        }


@pytest.mark.parametrize("level", [3, 5 + 1, 255])
def test_a_protocol_level_not_served_gets_return_code_1_then_the_close(
    server: RunningServer, level: int
) -> None:
    """3.1.1 MQTT-3.1.2-2: CONNACK 0x01 (unacceptable protocol level), then the close."""
    connect = packet(0x10, string("MQTT") + bytes([level, 0x02, 0, 30]) + string("c"))
    assert _answers_to(server, connect, first=True) == [(0x20, b"\x00\x01")]


NOT_A_CONNECT_FIRST = [
    ("PINGREQ", PINGREQ),
    ("PUBLISH", _publish("first", b"x")),
    ("SUBSCRIBE", _subscribe(1, ("first", 0))),
    ("DISCONNECT", bytes([0xE0, 0])),
]


@pytest.mark.parametrize(
    "first", [c[1] for c in NOT_A_CONNECT_FIRST], ids=[c[0] for c in NOT_A_CONNECT_FIRST]
)
def test_a_first_packet_other_than_connect_is_closed(server: RunningServer, first: bytes) -> None:
    """3.1.1 MQTT-3.1.0-1: a client's first packet is its CONNECT; any other breaks the
    protocol and is closed without an answer (3.1.1 MQTT-4.8.0-1)."""
    assert _answers_to(server, first, first=True) == []


def test_a_client_id_the_server_cannot_keep_is_rejected_with_0x02(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.3-9: a client id the server rejects (here one too long to name its
    session's record) gets CONNACK 0x02 (Identifier rejected), then the close."""
    assert _answers_to(server, _connect("x" * 4000), first=True) == [(0x20, b"\x00\x02")]


# A PUBLISH that breaks its own rules closes the connection (3.1.1 MQTT-4.8.0-1).
BAD_PUBLISHES = [
    ("QoS 3", packet(0x36, string("a") + b"\x00\x01" + b"x")),  # 3.1.1 MQTT-3.3.1-4
    ("DUP 1 at QoS 0", packet(0x38, string("a") + b"x")),  # 3.1.1 MQTT-3.3.1-2
    ("QoS 1 with packet id 0", _publish("a", b"x", qos=1, packet_id=0)),  # MQTT-2.3.1-1
    ("'+' in a Topic Name", _publish("a/+", b"x")),  # 3.1.1 MQTT-3.3.2-2, MQTT-4.7.1-1
    ("'#' in a Topic Name", _publish("a/#", b"x")),  # 3.1.1 MQTT-3.3.2-2, MQTT-4.7.1-1
    ("a Topic Name of '#'", _publish("#", b"x")),  # 3.1.1 MQTT-3.3.2-2, MQTT-4.7.1-1
    ("'+' inside a level", _publish("a+b", b"x", qos=1, packet_id=1)),  # MQTT-4.7.1-1
    ("a SUBSCRIBE with flags 0x80", packet(0x80, b"\x00\x01" + string("a") + b"\x00")),
    ("a SUBSCRIBE with flags 0x83", packet(0x83, b"\x00\x01" + string("a") + b"\x00")),
]


@pytest.mark.parametrize("bad", [c[1] for c in BAD_PUBLISHES], ids=[c[0] for c in BAD_PUBLISHES])
def test_a_publish_or_subscribe_breaking_its_header_rules_is_closed(
    server: RunningServer, bad: bytes
) -> None:
    """3.1.1 MQTT-3.3.1-4, MQTT-3.3.1-2, MQTT-2.3.1-1, MQTT-3.3.2-2, MQTT-4.7.1-1,
    MQTT-3.8.1-1 (a SUBSCRIBE's flags are 0010): closed, nothing sent, and a subscriber to
    every topic gets nothing."""
    with _subscribed(server, "watcher", "#") as watcher:
        assert _answers_to(server, bad) == []
        assert nothing(watcher)


def test_a_retained_qos_0_message_replaces_the_retained_one(server: RunningServer) -> None:
    """3.1.1 MQTT-3.3.1-7: a QoS 0 PUBLISH with RETAIN 1 discards the message retained for
    its topic, and is kept in its place; 3.1.1 MQTT-3.3.1-6: a new subscription gets it."""
    with _connected(server, "p") as pub:
        _published(pub, "r/q", b"at qos 1", retain=True)
        pub.sendall(_publish("r/q", b"at qos 0", retain=True))
        pub.sendall(PINGREQ)  # its answer comes after the PUBLISH was taken
        assert read(pub) == (0xD0, b"")
    with _subscribed(server, "late", "r/q") as late:
        assert _received(late) == (0x31, "r/q", b"at qos 0")
        assert nothing(late)


def test_a_qos_1_packet_id_again_after_its_puback_is_a_new_message(server: RunningServer) -> None:
    """3.1.1 MQTT-4.3.2-2: once it sent the PUBACK, the server takes a PUBLISH with the same
    packet id, DUP 1 or not, as a new message, delivered again; to a QoS 0 subscriber each
    goes with DUP 0 (3.1.1 MQTT-3.3.1-2, MQTT-4.3.1-1) and no packet id (3.1.1
    MQTT-2.3.1-5)."""
    with _subscribed(server, "s", "n/#") as sub, _connected(server, "p") as pub:
        for first in (0x32, 0x3A, 0x3A):
            pub.sendall(packet(first, string("n/1") + b"\x00\x05" + b"again"))
            assert read(pub) == (0x40, b"\x00\x05")
        assert [read(sub) for _ in range(3)] == [(0x30, string("n/1") + b"again")] * 3
        assert nothing(sub)


def test_topics_are_matched_as_sent_never_normalised(server: RunningServer) -> None:
    """3.1.1 MQTT-4.7.3-4: no normalisation when matching: "café" composed does not match
    "café" decomposed, nor "A" "a"; 3.1.1 MQTT-1.5.3-3: a U+FEFF at the start of a Topic
    Name is kept, neither skipped nor stripped, so it matches only a filter that has it."""
    composed, decomposed, bom = "caf\u00e9", "cafe\u0301", "\ufeffb"
    with _connected(server, "s") as sub, _connected(server, "p") as pub:
        sub.sendall(_subscribe(1, (composed, 0), ("A", 0), ("b", 0), (bom, 0)))
        assert read(sub) == (0x90, b"\x00\x01\x00\x00\x00\x00")
        for topic in (decomposed, "a", bom, composed):
            _published(pub, topic, b"x")
        assert _received(sub) == (0x30, bom, b"x")
        assert _received(sub) == (0x30, composed, b"x")
        assert nothing(sub)


def test_messages_sent_again_keep_their_order_and_pubrels_follow_the_pubrecs(
    server: RunningServer,
) -> None:
    """3.1.1 MQTT-4.6.0-1: a resumed session gets the QoS 1 PUBLISHes it did not acknowledge
    again in the order they were first sent; 3.1.1 MQTT-4.6.0-4: the server sends its
    PUBRELs in the order the PUBRECs came, here the reverse of the PUBLISHes'."""
    with _connected(server, "s", clean=False) as sub:
        sub.sendall(_subscribe(1, ("one/#", 1), ("two/#", 2)))
        assert read(sub) == (0x90, b"\x00\x01\x01\x02")
    with _connected(server, "p") as pub:
        for n in range(5):
            _published(pub, "one/t", str(n).encode())
    with _connected(server, "s", clean=False) as sub:
        first = [_publish_fields(sub) for _ in range(5)]
        assert [payload for *_, payload in first] == [str(n).encode() for n in range(5)]
    with _connected(server, "s", clean=False) as sub:
        again = [_publish_fields(sub) for _ in range(5)]
        assert again == [(0x3A, topic, ident, payload) for _, topic, ident, payload in first]
        sub.sendall(b"".join(packet(0x40, ident.to_bytes(2, "big")) for _, _, ident, _ in again))
        with _connected(server, "p") as pub:
            for n in range(3):
                pub.sendall(_publish("two/t", str(n).encode(), qos=2, packet_id=n + 1))
                assert read(pub) == (0x50, bytes([0, n + 1]))
                pub.sendall(packet(0x62, bytes([0, n + 1])))
                assert read(pub) == (0x70, bytes([0, n + 1]))
        ids = []
        for n in range(3):
            kind, body = read(sub)
            assert (kind, body[:7], body[9:]) == (0x34, string("two/t"), str(n).encode())
            ids.append(body[7:9])
        assert len(set(ids)) == 3, ids
        sub.sendall(b"".join(packet(0x50, ident) for ident in reversed(ids)))
        assert [read(sub) for _ in range(3)] == [(0x62, ident) for ident in reversed(ids)]
        sub.sendall(b"".join(packet(0x70, ident) for ident in reversed(ids)))
        assert nothing(sub)


# Client ids that a file name could fold into one (a '/', its percent-encoding, a case, a
# dot name, a composed and a decomposed 'é', two long ids alike up to their last byte).
CLIENT_IDS_APART = ["a/b", "a%2Fb", "a%2fb", "A/b", ".", "..", "é", "e\u0301", "x" * 99 + "y"]


def test_client_ids_a_file_name_could_fold_name_sessions_apart(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.3-2: the client id identifies the session the server keeps, so each of
    these gets its own: none finds a session (Session Present 0) but its own, the second
    time (1), and a message for one's subscription goes to it alone."""
    ids = [*CLIENT_IDS_APART, "x" * 100]
    for expected in (b"\x00\x00", b"\x01\x00"):
        for client_id in ids:
            sock, body = _connack(server, _connect(client_id, flags=0x00))
            sock.close()
            assert body == expected, client_id
    with _connected(server, "a/b", clean=False) as sub:
        sub.sendall(_subscribe(1, ("apart", 1)))
        assert read(sub) == (0x90, b"\x00\x01\x01")
    with _connected(server, "p") as pub:
        _published(pub, "apart", b"for a/b")
    for client_id in CLIENT_IDS_APART[1:]:
        with _connected(server, client_id, clean=False) as other:
            assert nothing(other), client_id
    with _connected(server, "a/b", clean=False) as sub:
        assert _publish_fields(sub)[3] == b"for a/b"


def test_a_clean_session_takes_nothing_of_the_one_before(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.2-6: with CleanSession 1 the previous session is discarded and nothing
    of its state is reused: neither the message it held nor its subscription reaches the
    new connection, nor a persistent session opened after it (Session Present 0)."""
    with _connected(server, "k", clean=False) as sub:
        sub.sendall(_subscribe(1, ("d/#", 1)))
        assert read(sub) == (0x90, b"\x00\x01\x01")
    with _connected(server, "p") as pub:
        _published(pub, "d/1", b"held")
    with _connected(server, "k") as sub, _connected(server, "p") as pub:
        assert nothing(sub)
        _published(pub, "d/1", b"not subscribed")
        assert nothing(sub)
    sock, body = _connack(server, _connect("k", flags=0x00))
    with sock, _connected(server, "p") as pub:
        assert body == b"\x00\x00"
        _published(pub, "d/1", b"not subscribed either")
        assert nothing(sock)


def test_a_will_once_published_is_gone_from_the_session(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.2-10: the Will, published when its connection was taken over by the
    same client id (the server closes the older one, 3.1.1 MQTT-3.1.4-2, so MQTT-3.1.2-8
    applies), is removed from the session: the session resumed without a Will and broken
    off again publishes nothing."""
    with _subscribed(server, "watcher", "w") as watcher:
        old, body = _connack(server, _connect("wk", flags=0x04, rest=_will("once")))
        with old, _connected(server, "wk", clean=False):
            assert until_closed(old) == []
            assert _received(watcher) == (0x30, "w", b"once")
        sock, body = _connack(server, _connect("wk", flags=0x00))
        sock.close()
        assert body == b"\x01\x00"
        assert nothing(watcher, within=1.0)


def test_a_retained_message_keeps_its_qos(server: RunningServer) -> None:
    """3.1.1 MQTT-3.3.1-5: the server stores a retained message and its QoS: a new
    subscription gets each at the lower of that QoS and the one granted (3.1.1
    MQTT-3.8.4-6), here QoS 0, 1 and 2 messages to subscriptions granted 0, 1 and 2."""
    with _connected(server, "p") as pub:
        pub.sendall(_publish("r/0", b"x", retain=True))
        _published(pub, "r/1", b"x", retain=True)
        pub.sendall(_publish("r/2", b"x", qos=2, packet_id=2, retain=True))
        assert read(pub) == (0x50, b"\x00\x02")
        pub.sendall(packet(0x62, b"\x00\x02"))
        assert read(pub) == (0x70, b"\x00\x02")
    for granted in (0, 1, 2):
        with _connected(server, f"s{granted}") as sub:
            sub.sendall(_subscribe(1, ("r/+", granted)))
            assert read(sub) == (0x90, bytes([0, 1, granted]))
            got = sorted(read(sub)[0] for _ in range(3))
            assert got == [0x31 | min(qos, granted) << 1 for qos in (0, 1, 2)], got


def test_a_qos_2_packet_id_again_after_its_pubcomp_is_a_new_message(
    server: RunningServer,
) -> None:
    """3.1.1 MQTT-4.3.3-2: once it sent the PUBCOMP, the server takes a PUBLISH with the
    same packet id as a new message, DUP 1 or not, and on a persistent session resumed in
    between too: each of the three is delivered."""
    with _subscribed(server, "w", "q2/#") as watcher:
        for n, first in enumerate((0x34, 0x3C, 0x34)):
            with _connected(server, "snd", clean=False) as sender:
                sender.sendall(packet(first, string("q2/1") + b"\x00\x04" + bytes([n])))
                assert read(sender) == (0x50, b"\x00\x04")
                sender.sendall(packet(0x62, b"\x00\x04"))
                assert read(sender) == (0x70, b"\x00\x04")
        assert [_received(watcher) for _ in range(3)] == [
            (0x30, "q2/1", bytes([n])) for n in range(3)
        ]
        assert nothing(watcher)


def test_payload_fields_are_read_in_their_order(server: RunningServer) -> None:
    """3.1.1 MQTT-3.1.3-1: Client Identifier, Will Topic, Will Message, User Name, Password,
    in that order: a CONNECT with all five is accepted (a server without users takes any),
    and its Will goes out under the topic and with the message it gave."""
    with _subscribed(server, "watcher", "w") as watcher:
        rest = _will("m") + string("u") + string("p")
        sock, body = _connack(server, _connect("all5", flags=0xC6, rest=rest))
        sock.close()
        assert body == b"\x00\x00"
        assert _received(watcher) == (0x30, "w", b"m")


# Topic Names a store of files could spell otherwise: spaces, percent signs, dots, empty
# levels, a leading and a trailing '/', non-ASCII, a U+FEFF, a control character.
TOPICS_KEPT = ["a b/%41/..", "/lead", "trail/", "a//b", "ü/ß", "\ufeffx", "A/a", ".", "..", "%25"]


def test_a_message_held_for_a_session_keeps_its_topic_name(server: RunningServer) -> None:
    """3.1.1 MQTT-3.3.2-3: the Topic Name of each PUBLISH the server sends matches the
    subscription's filter: messages kept on disk for a persistent session while it was away
    come with the Topic Name they were published to, byte for byte (3.1.1 MQTT-4.7.3-4)."""
    topics = [*TOPICS_KEPT, "\u0001c"]
    with _connected(server, "s", clean=False) as sub:
        sub.sendall(_subscribe(1, ("#", 1)))
        assert read(sub) == (0x90, b"\x00\x01\x01")
    with _connected(server, "p") as pub:
        for topic in topics:
            _published(pub, topic, topic.encode())
    with _connected(server, "s", clean=False) as sub:
        got = [_publish_fields(sub) for _ in topics]
        for _, _, ident, _ in got:
            sub.sendall(packet(0x40, ident.to_bytes(2, "big")))
        # Order across topics is not MQTT's to keep (3.1.1 §4.6 keeps it per topic).
        assert sorted((topic, payload) for _, topic, _, payload in got) == sorted(
            (topic, topic.encode()) for topic in topics
        )


def test_subscribing_again_does_not_interrupt_the_flow(server: RunningServer) -> None:
    """3.1.1 MQTT-3.8.4-3: a SUBSCRIBE replacing a subscription does not interrupt the flow
    of its publications: while another client publishes 300 QoS 1 messages, a persistent
    session subscribes again to the same filter 20 times, at QoS 1 and 2 by turns, and gets
    every message once, in the order they were published (3.1.1 MQTT-4.6.0-6)."""
    count = 300
    with _connected(server, "s", clean=False) as sub, _connected(server, "p") as pub:
        sub.sendall(_subscribe(1, ("flow/#", 1)))
        assert read(sub) == (0x90, b"\x00\x01\x01")

        def publish() -> None:
            for n in range(count):
                _published(pub, "flow/1", str(n).encode())

        publisher = threading.Thread(target=publish)
        publisher.start()
        got: list[int] = []
        resubscribed = 0
        while len(got) < count:
            if resubscribed < 20 and len(got) >= resubscribed * 10:
                resubscribed += 1
                sub.sendall(_subscribe(1 + resubscribed, ("flow/#", 1 + resubscribed % 2)))
            kind, body = read(sub)
            if kind == 0x90:
                continue
            if (message := _acknowledged(sub, kind, body)) is not None:
                got.append(int(message[1]))
        publisher.join()
        assert resubscribed == 20
        assert got == list(range(count))
        assert nothing(sub)


def test_dup_is_set_on_what_was_sent_before_and_only_on_it(tmp_path: Path) -> None:
    """3.1.1 MQTT-3.3.1-3, MQTT-3.3.1-1: DUP says whether this PUBLISH is sent again, and
    nothing else: with two deliveries in flight at most, a session that leaves with five
    messages unacknowledged gets, once resumed, the two it was sent with DUP 1 and the
    three held behind them with DUP 0, in order (3.1.1 MQTT-4.6.0-1)."""
    settings = MqttSettings(limits=Limits(max_inflight=2))
    with start_server(tmp_path / "root", settings) as running:
        with _connected(running, "s", clean=False) as sub, _connected(running, "p") as pub:
            sub.sendall(_subscribe(1, ("w/#", 1)))
            assert read(sub) == (0x90, b"\x00\x01\x01")
            for n in range(5):
                _published(pub, "w/1", str(n).encode())
            assert [_publish_fields(sub)[3] for _ in range(2)] == [b"0", b"1"]
            assert nothing(sub)
        with _connected(running, "s", clean=False) as sub:
            got = []
            for _ in range(5):
                kind, _, packet_id, payload = _publish_fields(sub)
                got.append((kind, payload))
                sub.sendall(packet(0x40, packet_id.to_bytes(2, "big")))
            assert got == [(0x3A, b"0"), (0x3A, b"1"), (0x32, b"2"), (0x32, b"3"), (0x32, b"4")]
            assert nothing(sub)


def test_a_remaining_length_longer_than_it_needs_is_read(server: RunningServer) -> None:
    """3.1.1 §2.2.3 asks for no shortest form of the Remaining Length (5.0's MQTT-1.5.5-1
    does), and its decoding algorithm reads 0x80 0x00 as 0: a CONNECT, a PINGREQ and a
    SUBSCRIBE so are answered, not closed as malformed."""
    sock, body = _connack(server, longer(0x10, _connect("long")[2:], 3))
    with sock:
        assert body == b"\x00\x00"
        for size in (2, 3, 4):
            sock.sendall(longer(0xC0, b"", size))
            assert read(sock) == (0xD0, b"")
        sock.sendall(longer(0x82, _subscribe(1, ("a", 0))[2:], 4))
        assert read(sock) == (0x90, b"\x00\x01\x00")
