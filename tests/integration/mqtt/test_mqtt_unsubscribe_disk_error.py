"""An UNSUBSCRIBE whose subscription the disk refuses to delete (EIO here, os.unlink failing
in the server's process) is answered as boxmq answers any disk error: v5 with UNSUBACK 0x80,
a full disk too (UNSUBACK has no 0x97 Quota exceeded, MQTT-3.11.3-2), the connection kept;
3.1.1, whose UNSUBACK cannot fail, by closing
the connection; an ERROR line names the client. The subscription stays, and an UNSUBSCRIBE
sent again once the disk is back deletes it."""

from __future__ import annotations

import errno
import logging
import os
import queue
from pathlib import Path
from typing import Any

import pytest
from tests.integration.mqtt.clients import WAIT, Paho, RunningServer, loop_stopped, paho

from boxmq.mqtt.stored import consumer_name
from boxmq.store.topics import subscription_key, subscription_path

SUCCESS, UNSPECIFIED_ERROR = 0x00, 0x80


def _failing_unlink(monkeypatch: pytest.MonkeyPatch, code: int = errno.EIO) -> None:
    """A subscription's record cannot be deleted (a failing disk, or `code`'s)."""
    real = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).endswith(".subscription"):
            raise OSError(code, os.strerror(code), str(path))
        real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)


def _unsubacks(client: Paho) -> queue.Queue[list[int]]:
    got: queue.Queue[list[int]] = queue.Queue()

    def on_unsubscribe(_c: Any, _u: Any, _mid: int, reasons: Any, _p: Any) -> None:
        got.put([reason.value for reason in reasons])

    client.client.on_unsubscribe = on_unsubscribe
    return got


def _subscription(server: RunningServer, client_id: str) -> Path:
    key = subscription_key(None, consumer_name(client_id))
    return Path(subscription_path(str(server.root), "keep/#", key))


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=errno.errorcode.get)
def test_v5_gets_unsuback_0x80_and_keeps_its_connection(
    server: RunningServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    code: int,
) -> None:
    """MQTT-3.11.3-2: 0x80 for a full disk too, which a SUBACK or PUBACK tells as 0x97."""
    client = paho(server, "stubborn", clean=False, expiry=600)
    try:
        client.subscribe("keep/#", qos=1)
        unsubacks = _unsubacks(client)
        _failing_unlink(monkeypatch, code)
        with caplog.at_level(logging.ERROR, logger="boxmq.mqtt"):
            client.client.unsubscribe("keep/#")
            assert unsubacks.get(timeout=WAIT) == [UNSPECIFIED_ERROR]
        assert "client stubborn: unsubscribing from keep/# failed" in caplog.text
        assert errno.errorcode[code] in caplog.text
        assert (_subscription(server, "stubborn") / ".subscription").exists()
        client.publish("keep/x", b"still", qos=1)  # the connection is still there, and so is
        assert client.next().payload == b"still"  # the subscription
        monkeypatch.undo()
        client.client.unsubscribe("keep/#")
        assert unsubacks.get(timeout=WAIT) == [SUCCESS]  # tried again, and done
        assert not _subscription(server, "stubborn").exists()
    finally:
        client.stop()


def test_v311_is_disconnected_without_unsuback(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """3.1.1 MQTT-4.8.0-2: a disk error deleting the subscription is a transient error met
    processing the UNSUBSCRIBE, and a 3.1.1 UNSUBACK cannot say it failed: the server
    closes the connection, the subscription kept."""
    client = paho(server, "old", v5=False, clean=False)
    try:
        client.subscribe("keep/#", qos=1)
        unsubacks = _unsubacks(client)
        _failing_unlink(monkeypatch)
        with caplog.at_level(logging.ERROR, logger="boxmq.mqtt"):
            client.client.unsubscribe("keep/#")
            client.disconnects.get(timeout=WAIT)
        assert unsubacks.empty()
        assert "client old: unsubscribing from keep/# failed" in caplog.text
        assert (_subscription(server, "old") / ".subscription").exists()
    finally:
        loop_stopped(client.client)
