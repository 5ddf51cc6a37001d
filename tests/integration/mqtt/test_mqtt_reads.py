"""The server reads every socket into one buffer (server.py): a packet that arrives in pieces
must come out whole however many other sockets' reads went through the buffer between its
pieces."""

from __future__ import annotations

from tests.integration.mqtt.clients import RunningServer, paho
from tests.integration.mqtt.raw import open_raw, packet, read, string


def _publish(topic: str, payload: bytes, packet_id: int | None = None) -> bytes:
    """A v5 PUBLISH, QoS 1 with `packet_id`, else QoS 0."""
    if packet_id is None:
        return packet(0x30, string(topic) + b"\x00" + payload)
    return packet(0x32, string(topic) + packet_id.to_bytes(2, "big") + b"\x00" + payload)


def test_a_packet_in_pieces_survives_other_sockets_reads_between_them(
    server: RunningServer,
) -> None:
    watcher = paho(server, "watcher")
    watcher.subscribe("pieces/#", 1)
    slow, _ = open_raw(server, "slow", clean=True)
    quick, _ = open_raw(server, "quick", clean=True)
    halting = _publish("pieces/slow", b"s" * 3000)
    slow.sendall(halting[:1500])
    # Each acknowledged PUBLISH of `quick` is a later turn of the loop than the one that read
    # the first half of `slow`'s: its bytes went through the read buffer after that half.
    for n in range(1, 4):
        quick.sendall(_publish("pieces/quick", bytes([n]) * 3000, packet_id=n))
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
