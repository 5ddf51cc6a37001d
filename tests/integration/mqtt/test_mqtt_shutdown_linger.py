"""A SIGTERM's DISCONNECT 0x8B reaches a v5 client even when the server had much to send it:
the shutdown's close lingers as any other (`_Linger`), rather than dropping the socket with
what the kernel had not sent yet, the DISCONNECT behind it."""

from __future__ import annotations

import signal
from pathlib import Path

from harness.ports import free_port
from tests.integration.mqtt.clients import WAIT, RunningServer, loop_stopped, paho, serve_process

RUNS = 20
FLOOD = 2000  # QoS 0 messages of 4 KiB published to the subscriber before each SIGTERM


def test_a_v5_client_reads_the_shutdown_disconnect_every_time(tmp_path: Path) -> None:
    root, port = tmp_path / "root", free_port()
    served = RunningServer(root, None, "127.0.0.1", port, None, None, None, None)  # type: ignore[arg-type]
    said = []
    for _ in range(RUNS):
        process = serve_process(root, port)
        try:
            sink = paho(served, "sink")
            sink.subscribe("flood", 0)
            source = paho(served, "source")
            for n in range(FLOOD):
                source.client.publish("flood", n.to_bytes(4, "big") * 1024, 0)
            sink.next()  # the flood reaches it; most of it is still to be sent
            process.send_signal(signal.SIGTERM)
            said.append(int(sink.disconnects.get(timeout=WAIT).value))
            loop_stopped(source.client)
            loop_stopped(sink.client)
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
    assert said == [0x8B] * RUNS
