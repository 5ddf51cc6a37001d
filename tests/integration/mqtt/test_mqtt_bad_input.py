"""Malformed and forbidden input over a raw socket: each answered the way its version demands.

v5: a DISCONNECT with the reason code (MQTT 5.0 §4.13), or a CONNACK when CONNECT itself is bad.
3.1.1: the connection is closed, with nothing sent (3.1.1 §4.8), except the CONNACK return codes
3.1.1 has for a bad protocol level (0x01) or client id (0x02).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import WAIT, RunningServer, paho, start_server
from tests.integration.mqtt.raw import connect_packet_311, packet, read, string
from tests.waiting import logged, until

from boxmq.clock import ManualClock
from boxmq.mqtt.settings import Limits, MqttSettings

V5_CONNECT = bytes.fromhex("1011 00044d515454 05 02 001e 00 0004 63616661".replace(" ", ""))
V311_CONNECT = bytes.fromhex("1010 00044d515454 04 02 001e 0004 63616661".replace(" ", ""))


def _exchange(server: RunningServer, first: bytes, then: bytes = b"") -> bytes:
    """Send `first` (read its answer), then `then`; everything that came back until close."""
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(first)
        answer = sock.recv(4096) if then else b""
        if then:
            sock.sendall(then)
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def _after_connack(data: bytes) -> bytes:
    assert data[0] == 0x20, data.hex()
    return data[2 + data[1] :]


PUBLISH_QOS3 = bytes.fromhex("3605 0001 61 0001".replace(" ", ""))
PUBLISH_WILDCARD = bytes.fromhex("3004 0002 612b".replace(" ", ""))
PUBLISH_PACKET_ID_0 = bytes.fromhex("3205 0001 61 0000".replace(" ", ""))
PUBLISH_BAD_UTF8 = bytes.fromhex("3004 0002 ff61".replace(" ", ""))
SUBSCRIBE_BAD_FLAGS = bytes.fromhex("8006 0001 0001 61 00".replace(" ", ""))
LENGTH_TOO_LONG = bytes.fromhex("30ffffffff7f")
RESERVED_TYPE = bytes.fromhex("0000")
TOO_LARGE = bytes.fromhex("30ffff7f")  # 2 MB announced; the limit is 1 MB


def _v5_publish(props: bytes, topic: bytes = b"a") -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + bytes([len(props)]) + props
    return bytes([0x30, len(body)]) + body


V5_CASES = [
    ("QoS 3", PUBLISH_QOS3, 0x81),
    ("wildcard in a topic name", PUBLISH_WILDCARD, 0x90),
    ("packet id 0", PUBLISH_PACKET_ID_0, 0x82),
    ("bad UTF-8", PUBLISH_BAD_UTF8, 0x81),
    ("SUBSCRIBE reserved flags", SUBSCRIBE_BAD_FLAGS, 0x81),
    ("remaining length over 4 bytes", LENGTH_TOO_LONG, 0x81),
    ("reserved packet type 0", RESERVED_TYPE, 0x81),
    ("over the maximum packet size", TOO_LARGE, 0x95),
    ("a second CONNECT", V5_CONNECT, 0x82),
    ("Topic Alias 0", _v5_publish(bytes.fromhex("230000")), 0x94),
    ("an alias never set", _v5_publish(bytes.fromhex("230005"), topic=b""), 0x82),
    ("an alias over the maximum", _v5_publish(bytes.fromhex("23ffff")), 0x94),
    (
        "No Local on a shared filter",
        bytes.fromhex("8210 0001 00 000a 2473686172652f672f61 04".replace(" ", "")),
        0x82,
    ),
    ("AUTH without a method", bytes.fromhex("f000"), 0x82),
    ("an empty Response Topic", _v5_publish(bytes.fromhex("080000")), 0x82),  # MQTT-4.7.3-1
    # A Protocol Error in MQTT 5.0 (§3.8.3.1), as Retain Handling 3: mosquitto 2.0.11 says 0x81.
    ("SUBSCRIBE Maximum QoS 3", bytes.fromhex("8207 0001 00 0001 61 03".replace(" ", "")), 0x82),
]


@pytest.mark.parametrize(("bad", "reason"), [c[1:] for c in V5_CASES], ids=[c[0] for c in V5_CASES])
def test_v5_is_told_why_with_a_disconnect(server: RunningServer, bad: bytes, reason: int) -> None:
    answer = _after_connack(_exchange(server, V5_CONNECT, bad))
    assert answer[0] == 0xE0, answer.hex()  # DISCONNECT
    assert answer[2] == reason


def _connect_with_will(v5: bool) -> bytes:
    """A CONNECT of client "cafa" (clean, keep alive 30 s) whose QoS 0 Will is "gone" to w/x."""
    header = bytes.fromhex("00044d515454 05 06 001e 00" if v5 else "00044d515454 04 06 001e")
    will = bytes.fromhex("00" if v5 else "") + b"\x00\x03w/x" + b"\x00\x04gone"
    body = header + b"\x00\x04cafa" + will
    return bytes([0x10, len(body)]) + body


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_a_second_connect_sends_the_will(server: RunningServer, v5: bool) -> None:
    """A second CONNECT is a protocol error (MQTT-3.1.0-2), and a connection closed for one
    sends its Will (MQTT 5.0 §3.1.2.5, 3.1.1 §3.1.2.5)."""
    watcher = paho(server, "watcher")
    watcher.subscribe("w/#", 0)
    second = V5_CONNECT if v5 else V311_CONNECT
    answer = _after_connack(_exchange(server, _connect_with_will(v5), second))
    assert (answer[:1], answer[2:3]) == ((b"\xe0", b"\x82") if v5 else (b"", b""))  # or closed
    will = watcher.next()
    assert (will.topic, will.payload) == ("w/x", b"gone")
    watcher.stop()


def _v311_subscribe(options: int) -> bytes:
    """A 3.1.1 SUBSCRIBE of filter "a" (no properties) whose options byte is `options`."""
    return bytes([0x82, 6, 0, 1, 0, 1, ord("a"), options])


V311_CASES = [
    *V5_CASES[:8],
    ("a second CONNECT", V311_CONNECT, 0),
    ("AUTH, which 3.1.1 does not have", bytes.fromhex("f000"), 0),
    # 5.0's option bits are reserved in 3.1.1, which must be 0 (3.1.1 MQTT-3.8.3-4).
    ("v5's No Local in a 3.1.1 SUBSCRIBE", _v311_subscribe(0x04), 0),
    ("v5's Retain As Published in a 3.1.1 SUBSCRIBE", _v311_subscribe(0x08), 0),
    ("v5's Retain Handling 1 in a 3.1.1 SUBSCRIBE", _v311_subscribe(0x11), 0),
    # A v5 SUBSCRIBE whole: its Properties Length (0) and its filter length's first byte are
    # read as 3.1.1's filter length, of an empty filter: malformed before any options.
    ("a v5 SUBSCRIBE, its filter length wrong to 3.1.1", V5_CASES[12][1], 0),
]


@pytest.mark.parametrize("bad", [c[1] for c in V311_CASES], ids=[c[0] for c in V311_CASES])
def test_v311_is_closed_without_a_word(server: RunningServer, bad: bytes) -> None:
    assert _after_connack(_exchange(server, V311_CONNECT, bad)) == b""


@pytest.mark.parametrize(
    ("connect", "answer", "told"),
    [
        # MQTT 3.1 ("MQIsdp", level 3) and an unknown level: return code 0x01 (3.1.1 §3.1.2.2)
        (
            bytes.fromhex("1012 00064d514973647003 02001e 0004 63616661".replace(" ", "")),
            "20020001",
            "CONNACK return code 0x01",
        ),
        (
            bytes.fromhex("1010 00044d515454 07 02 001e 0004 63616661".replace(" ", "")),
            "20020001",
            "CONNACK return code 0x01",
        ),
        # 3.1.1: an empty client id needs CleanSession 1 (§3.1.3.1): 0x02
        (
            bytes.fromhex("100c 00044d515454 04 00 001e 0000".replace(" ", "")),
            "20020002",
            "CONNACK return code 0x02",
        ),
        # a packet before CONNECT: closed, nothing said
        (PUBLISH_QOS3, "", "nothing sent"),
        # v5 CONNECT with bad UTF-8 in the client id: CONNACK 0x81
        (
            bytes.fromhex("1011 00044d515454 05 02 001e 00 0004 ff616661".replace(" ", "")),
            "2003008100",
            "CONNACK 0x81",
        ),
        # a CONNECT over the maximum packet size (2 MB announced; the limit is 1 MB), refused
        # from its fixed header: v5 CONNACK 0x95 (MQTT 5.0 §3.2.2.2), 3.1.1 closed
        (
            bytes.fromhex("10ffff7f 00044d515454 05 02 001e 00 0004 63616661".replace(" ", "")),
            "2003009500",
            "CONNACK 0x95",
        ),
        (
            bytes.fromhex("10ffff7f 00044d515454 04 02 001e 0004 63616661".replace(" ", "")),
            "",
            "nothing sent",
        ),
    ],
    ids=[
        "mqtt-3.1",
        "level-7",
        "empty-id-persistent",
        "publish-first",
        "v5-bad-utf8-id",
        "v5-too-large",
        "v311-too-large",
    ],
)
def test_a_bad_connect_is_answered_then_closed(
    server: RunningServer, connect: bytes, answer: str, told: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The log line says what the client got: it said "(reason 0x84)" for a 3.1.1 client
    sent return code 0x01, and a reason code for one sent nothing."""
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        assert _exchange(server, connect).hex() == answer
    [line] = logged(caplog, ": closing: ")
    assert line.endswith(f" ({told})"), line


def test_a_bad_packet_sent_in_a_loop_is_told_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A script sending the same bad packet on socket after socket wrote a line a socket
    (found driving `boxmq serve`: 100 sockets, 100 lines); the first is told with its port,
    the rest counted into a line every 10 s, and into one at close."""
    clock = ManualClock()
    closing = ": closing: CONNECT protocol name: its length runs past the end of the packet"
    more = "127.0.0.1: {} more connection(s) closed in the last 10s: CONNECT protocol name"
    bad = b"\x10\x05\x00\x04MQXX"  # a CONNECT whose protocol name runs past its end

    def told() -> list[str]:
        return [m for m in caplog.messages if m.startswith("127.0.0.1") and "clos" in m]

    def told_then(count: int) -> list[str]:
        until(lambda: len(told()) >= count, told, every=0.02)
        return told()

    with (
        caplog.at_level(logging.INFO, logger="boxmq.mqtt"),
        start_server(tmp_path / "root", MqttSettings(), clock=clock) as running,
    ):
        for _ in range(5):
            assert _exchange(running, bad) == b""
        [first] = told_then(1)
        assert closing in first
        assert first.endswith("(nothing sent)")
        clock.advance(10)  # the server's next tick tells the count
        counted = told_then(2)[1]
        assert counted.startswith(more.format(4))
        assert counted.endswith("(nothing sent)")
        clock.advance(10)
        time.sleep(0.6)  # two ticks: none since, the run is over
        assert _exchange(running, bad) == b""
        assert closing in told_then(3)[2]
        assert _exchange(running, bad) == b""
    assert told()[3].startswith(more.format(1))  # told at close
    assert len(told()) == 4


@pytest.mark.parametrize("trickle", [False, True], ids=["silent", "a-byte-at-a-time"])
def test_a_socket_without_connect_is_closed_after_the_connect_timeout(
    tmp_path: Path, trickle: bool
) -> None:
    """The 0.5 s the broker gives a socket to send its CONNECT count from the accept, on the
    broker's clock, which the test moves: past 0.5 s, the next tick closes it, whether it
    said nothing or sent a CONNECT's first bytes meanwhile. (On the system clock, the close had
    to come within 3 s, and a loaded machine took longer.)"""
    clock = ManualClock()
    with (
        start_server(
            tmp_path / "root", MqttSettings(limits=Limits(connect_timeout=0.5)), clock=clock
        ) as running,
        socket.create_connection((running.host, running.port), timeout=WAIT) as sock,
    ):
        deadline = time.monotonic() + WAIT  # accepted: the timeout counts from here
        while not running.server.broker._clients:
            assert time.monotonic() < deadline, "not accepted"
            time.sleep(0.01)
        [client] = running.server.broker._clients.values()
        if trickle:  # a CONNECT that never completes, a byte every 0.1 s of its clock
            for sent, byte in enumerate(V5_CONNECT[:4], 1):
                sock.sendall(bytes([byte]))
                while client.link.connection._reader.buffered() < sent:  # read at this time
                    assert time.monotonic() < deadline, f"byte {sent} not read"
                    time.sleep(0.01)
                clock.advance(0.1)
            clock.advance(0.2)  # 0.6 s since the accept, 0.2 since the last byte
        else:
            clock.advance(0.6)
        with contextlib.suppress(ConnectionResetError):  # closed with a byte of ours unread
            assert sock.recv(10) == b""  # closed by the server, at its next tick


def test_keep_alive_timeout_closes_a_quiet_client(server: RunningServer) -> None:
    """Keep Alive 1 s: 1.5 s of silence, then the next tick (every 0.25 s) closes it. The
    reads wait WAIT for it, not 5 s: a loaded machine may be seconds late to any step."""
    connect = bytes.fromhex("1011 00044d515454 05 02 0001 00 0004 63616661".replace(" ", ""))
    with socket.create_connection((server.host, server.port), timeout=WAIT) as sock:
        # From the CONNECT's send, the last packet the client sends: the server's count
        # starts when it reads it, never earlier, and a test descheduled after the send
        # must not shorten the 1.5 s it measures.
        started = time.monotonic()
        sock.sendall(connect)
        data = b""
        while chunk := sock.recv(4096):  # CONNACK, then DISCONNECT 0x8D after 1.5 s of silence
            data += chunk
        waited = time.monotonic() - started
    rest = _after_connack(data)
    assert rest[:3] == bytes([0xE0, 1, 0x8D]) or rest[:3] == bytes([0xE0, 2, 0x8D]), rest.hex()
    assert waited >= 1.5, f"closed after {waited:.2f} s of a 1 s Keep Alive"  # not before 1.5 s


def test_the_packets_before_a_bad_one_in_the_same_read_are_acted_on(
    server: RunningServer,
) -> None:
    """Three good QoS 1 PUBLISHes and a bad one in one segment: the good ones are answered
    and delivered as if they had come alone, then the DISCONNECT for the bad one."""
    subscriber = paho(server, "watcher")
    subscriber.subscribe("a", 1)
    good = b"".join(
        bytes([0x32, 8]) + b"\x00\x01a" + i.to_bytes(2, "big") + b"\x00" + b"m%d" % i
        for i in (1, 2, 3)
    )
    answer = _after_connack(_exchange(server, V5_CONNECT, good + PUBLISH_WILDCARD))
    pubacks = b"".join(b"\x40\x02" + i.to_bytes(2, "big") for i in (1, 2, 3))
    assert answer == pubacks + b"\xe0\x01\x90", answer.hex()  # then DISCONNECT 0x90
    assert [subscriber.next().payload for _ in range(3)] == [b"m1", b"m2", b"m3"]


def _subscribe(packet_id: int, topic_filter: bytes, qos: int) -> bytes:
    body = packet_id.to_bytes(2, "big") + len(topic_filter).to_bytes(2, "big") + topic_filter
    return bytes([0x82, len(body) + 1]) + body + bytes([qos])


def test_nothing_sent_after_a_disconnect_in_the_same_read_is_acted_on(
    server: RunningServer,
) -> None:
    """MQTT-3.14.4-1: a client sends nothing after its DISCONNECT, and what it sends anyway
    (here in the same TCP segment) is not acted on: a PUBLISH is not delivered, and a
    SUBSCRIBE does not subscribe the session that the DISCONNECT left (persistent, so a
    subscription made would show when it comes back)."""
    watcher = paho(server, "watcher", v5=False)
    watcher.subscribe("a", 1)
    publish = bytes([0x32, 7]) + b"\x00\x01a" + b"\x00\x01" + b"m1"  # QoS 1 to "a"
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(connect_packet_311("leaver", clean=False))
        assert sock.recv(4) == bytes.fromhex("20020000")  # CONNACK, a new session
        sock.sendall(b"\xe0\x00" + publish + _subscribe(1, b"b", 1))
        assert sock.recv(4096) == b""  # closed, nothing answered (no PUBACK, no SUBACK)
    assert watcher.nothing(within=0.5), "a PUBLISH sent after DISCONNECT was delivered"
    publisher = paho(server, "publisher", v5=False)
    publisher.publish("b", b"for b", 1)
    back = paho(server, "leaver", v5=False, clean=False)
    assert back.session_present
    assert back.nothing(within=0.5), "a SUBSCRIBE sent after DISCONNECT subscribed"


def test_nothing_sent_after_a_refused_connect_in_the_same_read_is_handled(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """MQTT-3.1.4-6: the server acts on nothing a client sent after a CONNECT it refused.
    The packets behind one the broker refuses (here a client id too long to be stored) in
    the same read went on to be handled without a session, an assertion failing in the
    loop (asyncio's "Fatal error: protocol.buffer_updated() call failed", a traceback)."""
    watcher = paho(server, "watcher", v5=False)
    watcher.subscribe("a", 1)
    publish = bytes([0x32, 7]) + b"\x00\x01a" + b"\x00\x01" + b"m1"
    answer = _exchange(server, connect_packet_311("x" * 300) + publish)
    assert answer.hex() == "20020002"  # identifier rejected, then closed
    assert watcher.nothing(within=0.5)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


def test_a_reserved_packet_type_before_connect_is_closed_without_a_traceback(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Two bytes, a packet of the reserved type 0, as a socket's first: closed, nothing said,
    as any packet before CONNECT is. Naming the type for the log raised ValueError inside
    the read (asyncio's "Fatal error: protocol.buffer_updated() call failed", a traceback);
    found by fuzzing `boxmq serve`."""
    assert _exchange(server, RESERVED_TYPE) == b""
    assert _exchange(server, V5_CONNECT + b"\xe0\x00")[:1] == b"\x20"  # a CONNACK: serving on
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


def _connect_limited(client_id: str, limit: int, expiry: int = 0) -> bytes:
    """A v5 CONNECT (clean start, Keep Alive 30) with a Maximum Packet Size of `limit`."""
    properties = b"\x11" + expiry.to_bytes(4, "big") + b"\x27" + limit.to_bytes(4, "big")
    variable = string("MQTT") + bytes([5, 0x02, 0, 30, len(properties)]) + properties
    return packet(0x10, variable + string(client_id))


@pytest.mark.parametrize(
    ("client_id", "limit", "answer"),
    [
        # Its CONNACK without what may be dropped: 16 bytes (Receive Maximum, Maximum Packet
        # Size, Topic Alias Maximum); an assigned client id adds 40.
        ("small", 16, "fits"),
        ("small", 15, "20030095 00"),
        ("", 55, "20030095 00"),
        ("small", 5, "20030095 00"),
        ("small", 4, ""),  # not even the refusal fits: closed without a word
        ("small", 1, ""),
    ],
)
def test_a_connack_over_the_clients_maximum_packet_size_is_never_sent(
    server: RunningServer, client_id: str, limit: int, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """MQTT-3.1.2-24: the server must not send a packet over the Maximum Packet Size the
    client set. A CONNACK goes without what it may (Reason String, User Properties, Response
    Information, the availabilities); one that still cannot fit refuses the CONNECT with a
    bare CONNACK 0x95 Packet too large, or, if even that is too large, closes without a
    word (as mosquitto 2.0 does in both cases). It was sent over the limit before."""
    if answer == "fits":
        with socket.create_connection((server.host, server.port), timeout=WAIT) as sock:
            sock.sendall(_connect_limited(client_id, limit))
            kind, body = read(sock)
            assert (kind, body[:2]) == (0x20, b"\x00\x00"), body.hex()  # CONNACK, success
            assert 2 + len(body) == limit
        return
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        got = _exchange(server, _connect_limited(client_id, limit))
    assert got.hex() == answer.replace(" ", "")
    [line] = logged(caplog, "Maximum Packet Size")
    assert f"Maximum Packet Size of {limit} bytes" in line, line


def test_a_connect_refused_for_its_maximum_packet_size_leaves_the_session_alone(
    server: RunningServer,
) -> None:
    """Refused before its session is looked at: the connection of the same client id stays
    up, its session not taken over."""
    with socket.create_connection((server.host, server.port), timeout=WAIT) as first:
        first.sendall(_connect_limited("kept", 1000, expiry=300))
        assert read(first)[1][:2] == b"\x00\x00"
        assert _exchange(server, _connect_limited("kept", 10, expiry=300)).hex() == "2003009500"
        first.sendall(bytes([0xC0, 0]))  # PINGREQ
        assert read(first) == (0xD0, b"")  # PINGRESP: not taken over


@pytest.mark.parametrize(
    ("request_", "closes"),
    [
        (b"GET /health HTTP/1.0\r\n\r\n", False),  # whole, its client waiting for an answer
        (b"GET /mqtt HTTP/1.1\r\nHost: loc", True),  # cut short: its client gone mid-headers
    ],
    ids=["whole", "cut-short"],
)
def test_a_short_http_request_is_named_and_closed_at_once(
    server: RunningServer, caplog: pytest.LogCaptureFixture, request_: bytes, closes: bool
) -> None:
    """An HTTP request shorter than the 69-byte frame "GET " announces waited for the rest:
    the server closed it at connect_timeout (10 s) as "no CONNECT within 10s", or said
    nothing if its client gave up first. It is named as a longer one is, and closed now."""
    with (
        caplog.at_level(logging.INFO, logger="boxmq.mqtt"),
        socket.create_connection((server.host, server.port), timeout=5) as browser,
    ):
        began = time.monotonic()
        browser.sendall(request_)
        if closes:
            browser.shutdown(socket.SHUT_WR)
        assert browser.recv(100) == b""  # closed, with nothing sent
        assert time.monotonic() - began < 3
    [line] = logged(caplog, ": closing: ")
    assert line.endswith(": closing: an HTTP request, not MQTT (nothing sent)"), line
