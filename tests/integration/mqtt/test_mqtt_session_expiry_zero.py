"""`max_session_expiry = 0` in a real `boxmq serve --config`: no session outlives its
connection. A v5 client is told 0 in CONNACK (MQTT 5.0 §3.2.2.3.2), its Will goes at the close
whatever its delay, and a DISCONNECT that asks for an expiry again is no protocol error (its
CONNECT asked for one, §3.14.2.2.2). A 3.1.1 client, which has no expiry to be told, finds
its CleanSession 0 session gone at its next CONNECT (session present 0)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import (
    RunningServer,
    drop,
    loop_stopped,
    paho,
    paho_properties,
    serving_fresh,
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RunningServer]:
    config = tmp_path / "boxmq.toml"
    config.write_text("[mqtt.limits]\nmax_session_expiry = 0\n")
    with serving_fresh(tmp_path, "--config", str(config)) as address:
        yield address


def test_a_v5_session_ends_with_its_connection_and_its_will_goes_at_once(
    served: RunningServer,
) -> None:
    watcher = paho(served, "watcher")
    watcher.subscribe("wills/#", 1)
    client = paho(
        served, "v5", clean=False, expiry=3600, will=("wills/v5", b"gone", 1), will_delay=60
    )
    assert client.connack_properties.SessionExpiryInterval == 0  # told ours
    client.subscribe("kept/#", 1)
    started = time.monotonic()
    drop(client)
    assert watcher.next().payload == b"gone"  # not 60 s later: the session ended at the close
    assert time.monotonic() - started < 10
    again = paho(served, "v5", clean=False, expiry=3600)
    assert not again.session_present
    again.stop()
    watcher.stop()


def test_a_v5_disconnect_asking_for_an_expiry_is_a_normal_one(served: RunningServer) -> None:
    watcher = paho(served, "watcher")
    watcher.subscribe("wills/#", 1)
    client = paho(served, "v5", clean=False, expiry=3600, will=("wills/v5", b"gone", 1))
    props = paho_properties(PacketTypes.DISCONNECT, SessionExpiryInterval=3600)
    client.client.disconnect(properties=props)
    loop_stopped(client.client)
    assert watcher.nothing(within=1.0)  # a normal DISCONNECT: no Will
    again = paho(served, "v5", clean=False, expiry=3600)
    assert not again.session_present  # capped at 0 as the CONNECT's was
    again.stop()
    log = (served.root.parent / "serve.log").read_text()
    assert "protocol error" not in log.lower()
    watcher.stop()


def test_a_311_clean_session_0_session_ends_with_its_connection(served: RunningServer) -> None:
    """It was kept until a clean connect under any value of the limit: a user who set 0 (or
    any expiry) found 3.1.1 sessions collecting on disk for ever."""
    client = paho(served, "old", v5=False, clean=False)
    client.subscribe("kept/#", 1)
    client.stop()
    publisher = paho(served, "publisher")
    publisher.publish("kept/a", b"while away", 1)
    publisher.stop()
    again = paho(served, "old", v5=False, clean=False)
    assert not again.session_present
    assert again.nothing(within=0.3)
    again.stop()
    assert not list((served.root / "topic-root").glob("kept*/.subscriptions/*"))
