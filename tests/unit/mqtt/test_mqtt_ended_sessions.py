"""What a session ended leaves in the broker's memory: nothing. Its Session, and the live queues
of its dropboxes with their messages, are collected once it ends (a soak's heap counts seemed to
show every session ever made kept; the counts' own list of gc.get_objects() kept them)."""

from __future__ import annotations

import gc
from pathlib import Path

from tests.unit.mqtt.peers import Peer, connect_peer, run_broker
from tests.waiting import until_async

from boxmq.client.live_queue import LiveQueue
from boxmq.clock import ManualClock
from boxmq.mqtt.broker import Broker
from boxmq.mqtt.packets import (
    Connect,
    Disconnect,
    ProtocolVersion,
    Publish,
    Subscribe,
    Subscription,
    Will,
)
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.session import Session

_SESSIONS = 8
V5 = ProtocolVersion.V5


def _alive(kind: type) -> int:
    gc.collect()
    return sum(isinstance(thing, kind) for thing in gc.get_objects())


def test_sessions_ended_leave_no_session_and_no_live_queue_behind(tmp_path: Path) -> None:
    """Persistent sessions (expiry 1 s) subscribed at QoS 1 and 2, sent messages while
    connected and while away, half of them gone without DISCONNECT (with a Will), half
    with one: once their expiry passed, as many Session and LiveQueue objects are alive as
    before the first."""
    clock = ManualClock(1000.0)

    async def test(broker: Broker) -> None:
        publisher = connect_peer(broker, "publisher")
        sessions, queues = _alive(Session), _alive(LiveQueue)
        for n in range(_SESSIONS):
            client = Peer(broker)
            will = Will("gone", b"bye", 1) if n % 2 else None
            props = Properties.build(session_expiry_interval=1)
            connect = Connect(f"away-{n}", V5, clean_start=False, properties=props, will=will)
            client.send(connect)
            client.send(Subscribe(1, (Subscription("jobs/#", 1 + n % 2),)))
            publisher.send(Publish("jobs/now", b"while connected", 1, packet_id=2 * n + 1))
            assert _alive(Session) > sessions  # what must go
            assert _alive(LiveQueue) > queues
            if n % 2:
                client.close()
            else:
                client.send(Disconnect())
            publisher.send(Publish("jobs/later", b"while away", 1, packet_id=2 * n + 2))
            clock.advance(2)
            broker.tick(clock.now())
        await until_async(
            lambda: _alive(Session) <= sessions and _alive(LiveQueue) <= queues,
            lambda: (
                f"{_alive(Session) - sessions} sessions, "
                f"{_alive(LiveQueue) - queues} live queues kept"
            ),
        )

    run_broker(tmp_path, test, clock)
