"""A persistent session catching up a backlog: each PUBACK's message file is renamed out of
processing/ on the event loop and unlinked by the store's deleter thread (store/deleter.py),
where the loop unlinked it (1 to 2 ms each on ext4 mounted with discard, while every other
client waited). The server runs in a thread of the test, so Python's audit hook tells which
thread made each unlink: counted, never timed."""

from __future__ import annotations

import queue
import sys
import threading
from pathlib import Path
from typing import Any

from tests.integration.mqtt.clients import WAIT, paho, persistent_paho, start_server

from boxmq.store.spares import SPARE_DIR

BACKLOG = 600  # over the 256 files the spare pool keeps: the rest are deleted
SPARES = 256

_unlinks: list[tuple[str, str]] | None = None  # (thread name, path) while recording


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _unlinks is not None and event == "os.remove":
        _unlinks.append((threading.current_thread().name, str(args[0])))


sys.addaudithook(_audit)  # for good (a hook cannot be removed): it records only when asked


def test_a_second_client_is_served_while_a_catch_up_s_acks_delete_off_the_loop(
    tmp_path: Path,
) -> None:
    global _unlinks
    running = start_server(tmp_path / "root", spares=SPARES, keep_processed=False)
    try:
        catcher = persistent_paho(running, "catcher", v5=True)
        catcher.subscribe("dev/1", 1)
        catcher.stop()
        for index in range(BACKLOG):
            running.box.publish("dev/1", f"c{index}")
        other = paho(running, "other")
        other.subscribe("other/x", 1)
        _unlinks = []

        arrived: queue.Queue[tuple[str, int]] = queue.Queue()

        def acked_by_the_test(client: Any) -> None:
            client.manual_ack_set(True)
            client.on_message = lambda _c, _u, m: arrived.put((m.payload.decode(), m.mid))

        catcher = paho(running, "catcher", clean=False, expiry=3600, configure=acked_by_the_test)
        received = []
        for index in range(BACKLOG):
            payload, mid = arrived.get(timeout=WAIT)
            received.append(payload)
            catcher.client.ack(mid, 1)
            if index == BACKLOG // 2:
                # Halfway through the acks (half of them deleting), the other client's
                # publish is acknowledged and delivered before the catch-up's next ack.
                other.publish("other/x", b"meanwhile", 1)
                assert other.next().payload == b"meanwhile"
        assert received == [f"c{index}" for index in range(BACKLOG)]  # each once, in order
        catcher.stop()
        other.stop()
    finally:
        running.shutdown()  # closes the box: the deletes still waiting are done
        unlinks, _unlinks = _unlinks or [], None
    # A message file: in processing/ as the ack finds it, or renamed into the spare pool.
    messages = [(t, p) for t, p in unlinks if "/processing/" in p or f"/{SPARE_DIR}/" in p]
    on_loop = [path for thread, path in messages if thread == "mqtt-server"]
    by_deleter = [path for thread, path in messages if thread == "boxmq-deleter"]
    assert on_loop == []
    assert len(by_deleter) >= BACKLOG - SPARES
    assert all(f"{SPARE_DIR}/" in path for path in by_deleter)  # renamed there by the ack
    subscription = tmp_path / "root" / "topic-root" / "dev%2F1" / ".subscriptions"
    assert [*(subscription / "client.catcher" / "processing").iterdir()] == []
    assert [*(subscription / "client.catcher" / "processed").iterdir()] == []
    assert not list((tmp_path / "root" / SPARE_DIR).rglob("gone.*"))  # drained
