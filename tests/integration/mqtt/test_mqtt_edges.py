"""The MQTT door at its edges, with real clients: topics and filters at the sizes and with the
characters MQTT allows (every Unicode plane, the characters a file name or its codec treats
apart, U+FEFF, NFC and NFD as two topics), odd client ids, thousands of user properties, a
SUBSCRIBE of 1,000 filters, a `#` over 2,000 retained topics; persistent sessions (on disk,
in names of 255 bytes) as well as clean ones. Each bounded to a few seconds."""

from __future__ import annotations

import socket
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.subscribeoptions import SubscribeOptions
from tests.integration.mqtt.clients import (
    WAIT,
    Paho,
    RunningServer,
    paho,
    paho_properties,
    persistent_paho,
    start_server,
)
from tests.integration.mqtt.raw import (
    connect_packet,
    connect_packet_311,
    packet,
    pubrel,
    read,
    string,
)

# A topic over what a stored message's name has room for (docs/mqtt.md, "Persistence").
UNSTORABLE = "w/" + "x" * 300


def _connect(server: RunningServer, v5: bool) -> socket.socket:
    """A raw connection of a non-persistent session."""
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    if v5:
        sock.sendall(connect_packet("raw", clean=True, expiry=0))
    else:
        sock.sendall(connect_packet_311("raw"))
    kind, body = read(sock)
    assert (kind, body[1]) == (0x20, 0), body.hex()  # CONNACK, accepted
    return sock


def _publish_qos2_retained(topic: str, packet_id: int, v5: bool) -> bytes:
    properties = b"\x00" if v5 else b""
    return packet(0x35, string(topic) + packet_id.to_bytes(2, "big") + properties + b"r")


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_a_retained_qos_2_message_too_long_to_store_is_refused_before_its_pubrec(
    server: RunningServer, v5: bool
) -> None:
    """A non-persistent session's retained QoS 2 message is written at its PUBREL: its topic,
    too long for a stored message's name, was found only then, after a PUBREC and before a
    PUBCOMP that both said success, and the message was kept by no one on disk (no retained
    message, no persistent session) though its publisher was told it was received. It is
    refused at its PUBLISH now, as a QoS 1 one is: PUBREC 0x90 Topic Name invalid. 3.1.1
    has no negative PUBREC: acknowledged and dropped, as the ACL's refusals are (the close it
    got made its client send it again on every reconnect, forever)."""
    listener = paho(server)
    listener.subscribe("w/#", 2)
    with _connect(server, v5) as sock:
        sock.sendall(_publish_qos2_retained(UNSTORABLE, 7, v5))
        kind, body = read(sock)
        if v5:
            assert kind == 0x50, hex(kind)  # PUBREC
            assert body[:3] == b"\x00\x07\x90", body.hex()  # Topic Name invalid, as a PUBACK's
            sock.sendall(pubrel(7))
            kind, body = read(sock)
            assert (kind, body[:3]) == (0x70, b"\x00\x07\x92"), body.hex()  # nothing stored
        else:
            assert (kind, body) == (0x50, b"\x00\x07"), f"{kind:#x} {body.hex()}"  # PUBREC
            sock.sendall(pubrel(7))
            assert read(sock) == (0x70, b"\x00\x07")  # PUBCOMP: done with, on both sides
    assert listener.nothing()  # refused as a whole, as a QoS 1 one is
    listener.stop()


def test_a_qos_1_message_too_long_for_a_persistent_session_gets_puback_topic_name_invalid(
    server: RunningServer,
) -> None:
    """MQTT 5.0 §3.4.2.1: 0x90 Topic Name invalid, "not malformed, but not accepted by this
    Server", not 0x80 Unspecified error, which told the publisher nothing it could change;
    a topic that fits still gets 0x00. Its reason string names the topic, its escaped length
    and the room there is (it said "shorten the properties" of a PUBLISH that had none)."""
    persistent_paho(server, "keeps", v5=True).subscribe("w/#", 1)
    with _connect(server, v5=True) as sock:
        for packet_id, topic, reason in ((1, "w/short", 0), (2, UNSTORABLE, 0x90)):
            sock.sendall(packet(0x32, string(topic) + packet_id.to_bytes(2, "big") + b"\x00b"))
            kind, body = read(sock)
            assert (kind, body[2:3] or b"\x00") == (0x40, bytes([reason])), body.hex()  # PUBACK
    said = body[3:].decode(errors="replace")  # its properties: a reason string (0x1F)
    assert "the topic is too long" in said, said
    room = server.box.topics.topic_room()
    assert f"it takes 304 bytes, and at most {room} fit" in said, said  # 'w' '%2F' 300 'x'
    assert "shorten the properties" not in said, said


@pytest.mark.parametrize("qos", [1, 2])
def test_a_311_publication_too_long_to_store_is_acknowledged_and_dropped_not_resent_forever(
    server: RunningServer, qos: int
) -> None:
    """MQTT 3.1.1 has no negative PUBACK or PUBREC, and a server that will not take a PUBLISH
    "MUST either make a positive acknowledgement ... or close the Network Connection"
    (3.1.1 MQTT-3.3.5-2). It closed, and paho, as a persistent 3.1.1 session must (MQTT-4.4.0-1),
    sent the same PUBLISH again on every reconnect, to be refused again, forever: a topic
    too long for a stored message's name never fits. It is acknowledged and dropped now,
    with a warning, as a PUBLISH the ACL refuses is; the connection stays up, the client
    has nothing left to resend, and what it publishes next is delivered."""
    persistent_paho(server, "keeps", v5=True).subscribe("w/#", 1)  # a copy on disk is wanted
    listener = paho(server)
    listener.subscribe("w/#", 1)
    publisher = persistent_paho(server, "old", v5=False)
    publisher.publish(UNSTORABLE, b"never fits", qos)  # asserts it was acknowledged
    publisher.publish("w/short", b"fits", qos)
    assert publisher.disconnects.empty()  # the connection was not closed
    assert not publisher.client._out_messages  # nothing in flight to send again on reconnect
    got = listener.next()
    assert (got.topic, got.payload) == ("w/short", b"fits")  # the long one went nowhere
    assert listener.nothing()
    publisher.stop()
    listener.stop()


def test_the_longest_retained_topic_that_fits_is_kept_and_one_byte_more_is_refused(
    server: RunningServer,
) -> None:
    """The check at PUBLISH and the write at PUBREL agree on the limit, to the byte."""
    room = server.box.topics.topic_room(retain=True)
    with _connect(server, v5=True) as sock:
        for packet_id, topic, reason in ((1, "l" * room, 0), (2, "l" * (room + 1), 0x90)):
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


# Topics whose characters the file system, the file-name codec (percent-encoding, `.` as its
# field separator, `~` for backups) or a reader of names treats apart; every Unicode plane;
# U+FEFF; NFC and NFD forms, two distinct topics (MQTT compares code points, §4.7.3).
ODD_TOPICS = [
    "a///b//",
    "/",
    ".",
    "..",
    "a/./../b",
    "%",
    "%2F%00%h",
    "c:/x:y",
    " a / b ",
    "\ufeff/\ufeff",
    "a\\b*?<>|",
    "~/x.lock",
    "\x01\x1f\x7f\u2028\t",
    "\ufffe\uffff",
    # Every plane, 4 a topic: one character of the planes above the first takes 12 bytes
    # escaped, and a topic of a stored message has room for 79 (docs/mqtt.md, "Persistence").
    *(
        "".join(chr(0x10000 * plane + 0x41) for plane in range(n, min(n + 4, 17)))
        for n in (0, 4, 8, 12, 16)
    ),
    unicodedata.normalize("NFC", "é/ü"),
    unicodedata.normalize("NFD", "é/ü"),
]
ODD_IDS = [".", "..", "%2E", "a/b", "/", "\ufeff", "A", "a", " ", "~", "x.lock", "😀", "#", "-"]
ODD_IDS += [unicodedata.normalize(form, "é") for form in ("NFC", "NFD")]


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[list[RunningServer]]:
    """A server in a thread over tmp_path/root, in a list a test may put its restart in."""
    servers = [start_server(tmp_path / "root")]
    try:
        yield servers
    finally:
        servers[-1].shutdown()


def _restart(servers: list[RunningServer]) -> RunningServer:
    servers[-1].shutdown()
    servers.append(start_server(servers[-1].root))
    return servers[-1]


def _exactly(client: Paho, count: int, within: float = 0.3) -> list[tuple[str, bytes]]:
    """(topic, payload) of the next `count` messages, each waited for as long as a loaded
    machine takes; then no other for `within` seconds."""
    got = [client.next() for _ in range(count)]
    assert client.nothing(within), "a message more than expected"
    return [(message.topic, message.payload) for message in got]


def _subscribe_all(client: Paho, filters: list[str], v5: bool) -> list[int]:
    """One SUBSCRIBE of every filter at QoS 1: the SUBACK's codes."""
    if v5:
        client.client.subscribe([(f, SubscribeOptions(qos=1)) for f in filters])
    else:
        client.client.subscribe([(f, 1) for f in filters])
    return [int(getattr(r, "value", r)) for r in client.subacks.get(timeout=WAIT)]


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_odd_topics_reach_exact_filters_of_persistent_sessions_across_a_restart(
    restartable: list[RunningServer], v5: bool
) -> None:
    """Each topic an exact filter of one persistent session (a dropbox each, named by the
    filter), published to while the client is away and the server restarted between: each
    message comes once, by its own filter alone, its topic as it was sent, NFC and NFD apart;
    a clean session's exact filter too."""
    served = restartable[0]
    away = persistent_paho(served, "odd", v5)
    assert _subscribe_all(away, ODD_TOPICS, v5) == [1] * len(ODD_TOPICS)
    away.stop()
    served = _restart(restartable)
    clean = paho(served, v5=v5)
    clean.subscribe(ODD_TOPICS[-1], 1)
    publisher = paho(served, v5=v5)
    for n, topic in enumerate(ODD_TOPICS):
        publisher.publish(topic, str(n).encode(), 1)
    publisher.stop()
    assert _exactly(clean, 1) == [(ODD_TOPICS[-1], str(len(ODD_TOPICS) - 1).encode())]
    clean.stop()
    back = persistent_paho(served, "odd", v5)
    assert back.session_present
    assert sorted(_exactly(back, len(ODD_TOPICS))) == sorted(
        (t, str(n).encode()) for n, t in enumerate(ODD_TOPICS)
    )
    back.stop()


def test_odd_client_ids_keep_their_own_persistent_sessions_across_a_restart(
    restartable: list[RunningServer],
) -> None:
    """A session record and dropboxes are named by the client id: ids that are special
    names on a file system (`.`, `..`, `/`), escapes of each other (`%2E` and `.`), apart only
    by case or by normalization (NFC, NFD) are each their own session after a restart."""
    served = restartable[0]
    for n, client_id in enumerate(ODD_IDS):
        away = persistent_paho(served, client_id, v5=n % 2 == 0)
        away.subscribe(f"id/{n}", 1)
        away.stop()
    served = _restart(restartable)
    publisher = paho(served)
    for n in range(len(ODD_IDS)):
        publisher.publish(f"id/{n}", str(n).encode(), 1)
    publisher.stop()
    for n, client_id in enumerate(ODD_IDS):
        back = persistent_paho(served, client_id, v5=n % 2 == 0)
        assert back.session_present, client_id
        assert _exactly(back, 1, 0.1) == [(f"id/{n}", str(n).encode())], client_id
        back.stop()


def test_thousands_of_user_properties_with_repeated_keys_keep_their_order(
    restartable: list[RunningServer],
) -> None:
    """5,000 User Properties (MQTT 5.0 §3.3.2.3.7: repeated names allowed, order kept) reach
    a persistent session across a restart, and a later subscriber as the retained message,
    every pair in its place."""
    served = restartable[0]
    away = persistent_paho(served, "props", True)
    away.subscribe("u/p", 1)
    away.stop()
    properties = paho_properties(PacketTypes.PUBLISH)
    properties.UserProperty = [(f"k{n % 7}", f"{n}") for n in range(5000)]
    publisher = paho(served)
    publisher.publish("u/p", b"x", 1, properties=properties, retain=True)
    publisher.stop()
    served = _restart(restartable)
    back = persistent_paho(served, "props", True)
    late = paho(served)
    late.subscribe("u/p", 1)
    for client in (back, late):
        assert client.next().properties.UserProperty == properties.UserProperty
        client.stop()


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_one_subscribe_of_a_thousand_filters_is_granted_each(
    server: RunningServer, v5: bool
) -> None:
    client = paho(server, v5=v5)
    filters = [f"f/{n}" for n in range(1000)]
    assert _subscribe_all(client, filters, v5) == [1] * 1000
    publisher = paho(server, v5=v5)
    publisher.publish("f/999", b"last", 1)
    assert client.next().payload == b"last"
    client.stop()
    publisher.stop()


def test_a_wildcard_subscription_gets_thousands_of_retained_messages(
    server: RunningServer,
) -> None:
    """Each of 2,000 topics' retained message, once, to a `#` made after them (10,000 were
    tried by hand: 6 s to publish and 3 s for `#` on a loaded machine, too long for a test)."""
    count = 2000
    publisher = paho(server)
    for n in range(count):
        publisher.client.publish(f"r/{n}", str(n).encode(), 0, retain=True)
    publisher.publish("r/last", b"last", 1, retain=True)  # after the others, on one connection
    publisher.stop()
    client = paho(server)
    client.subscribe("#", 1)
    got = [client.next() for _ in range(count + 1)]
    assert client.nothing()
    assert sorted((m.topic, m.payload) for m in got) == sorted(
        [("r/last", b"last"), *((f"r/{n}", str(n).encode()) for n in range(count))]
    )
    client.stop()
