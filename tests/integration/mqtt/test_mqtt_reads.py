"""The server reads every socket into one buffer (server.py): a packet that arrives in pieces
must come out whole however many other sockets' reads went through the buffer between its
pieces."""

from __future__ import annotations

from tests.integration.mqtt.clients import RunningServer, paho
from tests.integration.mqtt.raw import open_raw, publish, read


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
