"""An UNSUBSCRIBE of many filters, and the end of a session that holds many, tell the other
processes on the root once (one write of the subscriptions' generation), not once per filter:
an UNSUBSCRIBE of 1,000 filters wrote it 1,000 times. The other processes still stop routing
to every filter ended, and a subscription that stays is still routed."""

from __future__ import annotations

import pytest
from paho.mqtt.subscribeoptions import SubscribeOptions
from tests.generations import count_generation_writes
from tests.integration.mqtt.clients import WAIT, Paho, RunningServer, paho, persistent_paho

import boxmq

FILTERS = [f"u/{n}" for n in range(40)]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The generation's writes from now on, each as the number of changes it told."""
    return count_generation_writes(monkeypatch)


def _subscribed(server: RunningServer, client_id: str, v5: bool) -> Paho:
    client = persistent_paho(server, client_id, v5)
    if v5:
        client.client.subscribe([(f, SubscribeOptions(qos=1)) for f in [*FILTERS, "kept"]])
    else:
        client.client.subscribe([(f, 1) for f in [*FILTERS, "kept"]])
    client.subacks.get(timeout=WAIT)
    return client


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_an_unsubscribe_of_many_filters_writes_the_generation_once(
    server: RunningServer, writes: list[int], v5: bool
) -> None:
    client = _subscribed(server, "many", v5)
    with boxmq.open(server.root) as other:  # another process on the root
        assert all(other.topics.has_durable(f) for f in FILTERS)
        writes.clear()
        client.client.unsubscribe(FILTERS)
        reasons = client.unsubacks.get(timeout=WAIT)
        if v5:
            assert [int(getattr(r, "value", r)) for r in reasons] == [0] * len(FILTERS)
        assert writes == [len(FILTERS)]  # one write, naming each filter's folder
        assert not any(other.topics.has_durable(f) for f in FILTERS)
        assert other.topics.has_durable("kept")
        assert not any(server.box.topics.has_durable(f) for f in FILTERS)
    client.stop()


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_the_end_of_a_session_of_many_filters_writes_the_generation_once(
    server: RunningServer, writes: list[int], v5: bool
) -> None:
    _subscribed(server, "ends", v5).stop()
    with boxmq.open(server.root) as other:
        assert other.topics.has_durable("kept")
        writes.clear()
        paho(server, "ends", v5=v5, clean=True).stop()  # a clean start ends the session
        assert len(writes) == 1
        assert not any(other.topics.has_durable(f) for f in [*FILTERS, "kept"])
