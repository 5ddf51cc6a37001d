"""What a persistent session keeps across a restart of the server: its end, on time, and the
options its messages go out with (the session's record, mqtt/session_record.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import RunningServer, paho, paho_properties, start_server

from boxmq.store.topics import subscription_key, subscription_path

EXPIRY = 2  # seconds: the Session Expiry Interval of the sessions here


def _dropbox(root: Path, filter: str, client_id: str) -> str:
    return subscription_path(str(root), filter, subscription_key(None, client_id))


def _away_with_identifier(server: RunningServer, client_id: str, filter: str) -> None:
    """A v5 client with a persistent session subscribes with Subscription Identifier 7 and
    Retain As Published, then disconnects."""
    client = paho(server, client_id, clean=False, expiry=EXPIRY)
    props = paho_properties(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7)
    client.subscribe(filter, 1, retainAsPublished=True, properties=props)
    client.stop()


def _message_files(root: Path) -> list[str]:
    """The files under topic-root but the generation marker: messages, records, members."""
    return [
        os.path.join(folder, name)
        for folder, _, names in os.walk(root / "topic-root")
        for name in names
        if name != ".generation"
    ]


def test_a_session_back_within_its_interval_after_a_restart_gets_its_identifier(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    first = start_server(root)
    try:
        _away_with_identifier(first, "back", "sid/#")
        paho(first, "pub").publish("sid/away", b"while away", 1, retain=True)
    finally:
        first.shutdown()
    second = start_server(root)
    try:
        back = paho(second, "back", clean=False, expiry=EXPIRY)
        assert back.session_present
        waited = back.next()
        assert (waited.payload, waited.properties.SubscriptionIdentifier) == (b"while away", [7])
        assert waited.retain  # Retain As Published
        paho(second, "pub").publish("sid/after", b"after", 1)
        after = back.next()
        assert (after.payload, after.properties.SubscriptionIdentifier) == (b"after", [7])
        time.sleep(EXPIRY + 0.5)  # past the interval counted from the first disconnect
        assert os.path.isdir(_dropbox(root, "sid/#", "back"))  # its client came back in time
    finally:
        second.shutdown()


def test_a_session_not_back_within_its_interval_after_a_restart_ends(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first = start_server(root)
    try:
        _away_with_identifier(first, "gone", "gone/#")
        paho(first, "old", v5=False, clean=False).subscribe("kept/#", 1)  # 3.1.1: never expires
    finally:
        first.shutdown()  # before the interval: the first server's timer dies with it
    second = start_server(root)
    try:
        dropbox = _dropbox(root, "gone/#", "gone")
        deadline = time.monotonic() + EXPIRY + 3
        while os.path.isdir(dropbox) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(dropbox)
        paho(second, "pub").publish("gone/x", b"for nobody", 1)
        assert _message_files(root) == [
            os.path.join(_dropbox(root, "kept/#", "old"), ".subscription")
        ]
    finally:
        second.shutdown()
