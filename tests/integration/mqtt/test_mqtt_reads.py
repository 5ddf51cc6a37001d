"""The server reads every socket into one buffer (server.py): a packet that arrives in pieces
must come out whole however many other sockets' reads went through the buffer between its
pieces. And the packets of one read are acted on in their order, though a read's copies for
the in-memory subscriptions go out after its acknowledgements."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import RunningServer, paho, start_server
from tests.integration.mqtt.raw import open_raw, packet, publish, publish_fields, read, subscribe


def test_a_packet_in_pieces_survives_other_sockets_reads_between_them(
    server: RunningServer,
) -> None:
    watcher = paho(server, "watcher")
    watcher.subscribe("pieces/#", 1)
    slow, _ = open_raw(server, "slow", clean=True)
    quick, _ = open_raw(server, "quick", clean=True)
    halting = publish("pieces/slow", b"s" * 3000)
    slow.sendall(halting[:1500])
    # Each acknowledged PUBLISH of `quick` is a later turn of the loop than the one that read
    # the first half of `slow`'s: its bytes went through the read buffer after that half.
    for n in range(1, 4):
        quick.sendall(publish("pieces/quick", bytes([n]) * 3000, qos=1, packet_id=n))
        assert read(quick) == (0x40, n.to_bytes(2, "big")), "PUBACK"
    slow.sendall(halting[1500:])
    got: dict[str, list[bytes]] = {}
    for _ in range(4):
        message = watcher.next()
        got.setdefault(message.topic, []).append(message.payload)
    assert got == {
        "pieces/quick": [bytes([n]) * 3000 for n in range(1, 4)],
        "pieces/slow": [b"s" * 3000],
    }
    slow.close()
    quick.close()
    watcher.stop()


def _answers(sock: socket.socket, within: float = 0.5) -> list[tuple[int, bytes]]:
    """Every packet that comes before `within` seconds of silence: (first byte, body)."""
    sock.settimeout(within)
    got: list[tuple[int, bytes]] = []
    while True:
        try:
            got.append(read(sock))
        except TimeoutError:
            return got


def _unsubscribe(packet_id: int, filter: str) -> bytes:
    encoded = filter.encode()
    return packet(
        0xA2, packet_id.to_bytes(2, "big") + b"\x00" + len(encoded).to_bytes(2, "big") + encoded
    )


def _payloads(answers: list[tuple[int, bytes]]) -> list[bytes]:
    return [publish_fields(body)[0] for kind, body in answers if kind & 0xF0 == 0x30]


def test_a_subscribe_read_behind_a_publish_does_not_get_that_message(
    server: RunningServer,
) -> None:
    """A client's PUBLISH then SUBSCRIBE in one write: the message came before the
    subscription, and is not sent on it (it was, routed at the end of the read; found by
    fuzzing `boxmq serve`). The next one is."""
    sock, _ = open_raw(server, "own", clean=True, expiry=0)  # a session in memory
    sock.sendall(publish("reads/own", b"before", qos=1, packet_id=1) + subscribe(2, "reads/own", 1))
    answers = _answers(sock)
    assert sorted(kind for kind, _ in answers) == [0x40, 0x90]  # PUBACK, SUBACK: no PUBLISH
    sock.sendall(publish("reads/own", b"after", qos=1, packet_id=3))
    assert _payloads(_answers(sock)) == [b"after"]
    sock.close()


def test_an_unsubscribe_read_behind_a_publish_still_gets_that_message(
    server: RunningServer,
) -> None:
    """A client's PUBLISH then UNSUBSCRIBE in one write: the subscription was there when
    the message came, and it is sent on it (it was not: routed at the end of the read, after
    the UNSUBSCRIBE; found by fuzzing `boxmq serve`). A non-persistent watcher too."""
    watcher = paho(server, "watcher")
    watcher.subscribe("reads/own", 1)
    sock, _ = open_raw(server, "own", clean=True, expiry=0)
    sock.sendall(subscribe(1, "reads/own", 1))
    assert read(sock)[0] == 0x90
    sock.sendall(publish("reads/own", b"during", qos=1, packet_id=2) + _unsubscribe(3, "reads/own"))
    answers = _answers(sock)
    assert _payloads(answers) == [b"during"]
    assert sorted(kind & 0xF0 for kind, _ in answers) == [0x30, 0x40, 0xB0]
    assert watcher.next().payload == b"during"
    sock.close()
    watcher.stop()


def test_a_message_read_between_unsubscribe_and_subscribe_is_not_sent_on_the_new_subscription(
    server: RunningServer,
) -> None:
    """A persistent session's PUBLISH, UNSUBSCRIBE, PUBLISH, SUBSCRIBE of one filter in one
    write: the second message came while the session had no subscription, and is not sent.
    It was under fsync never and interval: the first PUBLISH is disk work, so the second
    waits behind it and is routed when written, and the new dropbox, made at once on the
    loop, was there by then (found by a differential run against mosquitto; fsync=always
    made it after them, as now every policy does). The first one is sent: the UNSUBSCRIBE
    waits for it too."""
    sock, _ = open_raw(server, "own", clean=True)  # expiry 300: a persistent session
    sock.sendall(subscribe(1, "reads/again", 1))
    assert read(sock)[0] == 0x90
    sock.sendall(
        publish("reads/again", b"before", qos=1, packet_id=2)
        + _unsubscribe(3, "reads/again")
        + publish("reads/again", b"between", qos=1, packet_id=4)
        + subscribe(5, "reads/again", 1)
    )
    answers = _answers(sock)
    assert _payloads(answers) == [b"before"]
    acks = [kind & 0xF0 for kind, _ in answers if kind & 0xF0 != 0x30]
    assert sorted(acks) == [0x40, 0x40, 0x90, 0xB0]  # PUBACK x2, SUBACK, UNSUBACK
    sock.sendall(publish("reads/again", b"after", qos=1, packet_id=6))
    assert _payloads(_answers(sock)) == [b"after"]
    sock.close()


def _publish_subscribe_publish(sock: socket.socket) -> list[tuple[int, bytes]]:
    """PUBLISH, SUBSCRIBE, PUBLISH on reads/late in one write; the answers, checked to carry
    the second message only (the first was published before the subscription)."""
    sock.sendall(
        publish("reads/late", b"before", qos=1, packet_id=1)
        + subscribe(2, "reads/late", 1)
        + publish("reads/late", b"after", qos=1, packet_id=3)
    )
    answers = _answers(sock)
    assert _payloads(answers) == [b"after"]
    return answers


@pytest.mark.parametrize("fsync", ["never", "interval", "always"])
def test_a_persistent_sessions_subscribe_between_two_publishes_gets_the_second_message(
    tmp_path: Path, fsync: str
) -> None:
    """A persistent session's PUBLISH (to a topic no one wants), SUBSCRIBE, PUBLISH in one
    write: the second message came after the SUBSCRIBE, and is sent on it. It was lost under
    fsync never and interval, acknowledged and never stored: the first PUBLISH asked whether
    a durable subscription wanted the topic, and the answer, kept for the rest of the read,
    did not know of the dropbox the SUBSCRIBE then made at once (found by walking
    docs/mqtt.md's SUBSCRIBE and UNSUBSCRIBE under each policy)."""
    with start_server(tmp_path / "root", fsync=fsync) as running:
        sock, _ = open_raw(running, "own", clean=True)  # expiry 300: a persistent session
        answers = _publish_subscribe_publish(sock)
        kinds = sorted(kind & 0xF0 for kind, _ in answers)
        assert kinds == [0x30, 0x40, 0x40, 0x90]  # PUBLISH, PUBACK x2, SUBACK
        sock.close()


def _subscribed_then_publish_and_unsubscribe(
    sock: socket.socket, topic: str
) -> list[tuple[int, bytes]]:
    """SUBSCRIBE to `topic`; then PUBLISH to it and UNSUBSCRIBE from it in one write. The
    answers, checked to carry the message: it came while the subscription stood."""
    sock.sendall(subscribe(1, topic, 1))
    assert read(sock)[0] == 0x90
    sock.sendall(publish(topic, b"during", qos=1, packet_id=2) + _unsubscribe(3, topic))
    answers = _answers(sock)
    assert _payloads(answers) == [b"during"]
    return answers


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_a_persistent_sessions_unsubscribe_read_behind_a_publish_still_gets_that_message(
    tmp_path: Path, fsync: str
) -> None:
    """A persistent session's PUBLISH then UNSUBSCRIBE of its filter in one write: the
    message came while it was subscribed, and is sent. It was lost under every fsync
    policy: the PUBLISH is disk work, waiting for its batch, and the UNSUBSCRIBE deleted
    the dropbox at once on the loop, before the message was written into it (found by a
    differential run against mosquitto, which sends it). The UNSUBSCRIBE now waits for
    the disk work read before it; the UNSUBACK comes after the message."""
    with start_server(tmp_path / "root", fsync=fsync) as running:
        sock, _ = open_raw(running, "own", clean=True)  # expiry 300: a persistent session
        answers = _subscribed_then_publish_and_unsubscribe(sock, "reads/kept")
        kinds = [kind & 0xF0 for kind, _ in answers]
        assert sorted(kinds) == [0x30, 0x40, 0xB0]  # PUBLISH, PUBACK, UNSUBACK
        assert kinds[-1] == 0xB0
        assert answers[-1][1][3:] == b"\x00"  # v5 UNSUBACK: no properties, Success
        sock.sendall(publish("reads/kept", b"after", qos=1, packet_id=4))
        assert _payloads(_answers(sock)) == []  # unsubscribed now
        sock.close()


def test_an_unsubscribe_read_behind_a_publish_waiting_for_the_disk_still_gets_that_message(
    server: RunningServer,
) -> None:
    """The same for a subscription in memory, when a persistent session's subscription
    makes the PUBLISH disk work: it is routed once written, and the UNSUBSCRIBE, done at
    once, had removed the subscription by then."""
    keeper, _ = open_raw(server, "keeper", clean=True)
    keeper.sendall(subscribe(1, "reads/mixed", 1))
    assert read(keeper)[0] == 0x90
    sock, _ = open_raw(server, "own", clean=True, expiry=0)  # a session in memory
    answers = _subscribed_then_publish_and_unsubscribe(sock, "reads/mixed")
    assert sorted(kind & 0xF0 for kind, _ in answers) == [0x30, 0x40, 0xB0]
    sock.close()
    keeper.close()


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_a_subscribe_in_memory_read_behind_a_publish_waiting_for_the_disk_does_not_get_it(
    tmp_path: Path, fsync: str
) -> None:
    """A session in memory's PUBLISH, SUBSCRIBE of its topic and PUBLISH again in one write,
    while a persistent session's subscription makes its PUBLISHes disk work: the first came
    before the subscription, and is not sent on it. It was, under every fsync policy: it is
    routed to the subscriptions in memory once written, and the SUBSCRIBE, in memory, was
    made at once on the loop, before that (found by a SIGKILL torture of `boxmq serve`
    with a 3.1.1 clean session pipelining its subscription changes). The one after it is."""
    with start_server(tmp_path / "root", fsync=fsync) as running:
        keeper, _ = open_raw(running, "keeper", clean=True)  # expiry 300: a persistent session
        keeper.sendall(subscribe(1, "reads/late", 1))
        assert read(keeper)[0] == 0x90
        sock, _ = open_raw(running, "own", clean=True, expiry=0)  # a session in memory
        answers = _publish_subscribe_publish(sock)
        acks = [kind & 0xF0 for kind, _ in answers if kind & 0xF0 != 0x30]
        assert acks == [0x40, 0x90, 0x40]  # PUBACK, SUBACK, PUBACK
        sock.close()
        keeper.close()
