"""Two last members of a share group, each on its own `boxmq serve` over one root
(docs/operations.md), unsubscribe at once. MQTT-234's last member ends the group, but each
server reads the members in its own process (subscribing._last_member), so both may take the
other for still there: then both leave as members do, completing what they were sent, and the
last of them out ends the group (Topics._left, under the group folder's lock, which the two
processes share). Found so, the group ends whole: its record, members and folder gone, every
message it sent completed by its client."""

from __future__ import annotations

import os
import threading
from typing import Any

from tests.integration.mqtt.clients import RunningServer, Served, paho, subscriptions_on_disk
from tests.waiting import until

from boxmq.store import topics as layout

ROUNDS = 4  # bounded: each round a group of its own, ~1 s
MESSAGES = 6


def _holding(running: RunningServer, client_id: str) -> tuple[Any, list[tuple[int, bytes]]]:
    """A member that answers nothing it is sent until told (manual acks): it holds them, at
    most half the messages (Receive Maximum), so that the other member is sent the rest."""
    member = paho(
        running,
        client_id,
        configure=lambda c: c.manual_ack_set(True),
        connect_properties={"ReceiveMaximum": MESSAGES // 2},
    )
    got: list[tuple[int, bytes]] = []
    member.client.on_message = lambda _c, _u, m: got.append((m.mid, bytes(m.payload)))
    return member, got


def _both_leave_at_once(
    first: RunningServer, second: RunningServer, publisher: Any, round: int
) -> None:
    group, topic = f"g{round}", f"t/{round}"
    shared = f"$share/{group}/{topic}/#"
    a, got_a = _holding(first, f"a{round}")
    b, got_b = _holding(second, f"b{round}")
    a.subscribe(shared, 1)
    b.subscribe(shared, 1)
    folder = layout.subscription_path(
        str(first.root), f"{topic}/#", layout.subscription_key(group, None)
    )
    assert os.path.isdir(folder)
    for n in range(MESSAGES):
        publisher.publish(f"{topic}/x", f"m{n}", 1)
    until(lambda: len(got_a) + len(got_b) == MESSAGES, f"{group}: every message sent")
    said: list[Any] = []
    leaving = [
        threading.Thread(target=lambda m=m: said.append(m.unsubscribe(shared))) for m in (a, b)
    ]
    for each in leaving:
        each.start()
    for each in leaving:
        each.join(timeout=30)
    assert [str(reason) for [reason] in said] == ["Success", "Success"], said
    for member, got in ((a, got_a), (b, got_b)):
        for mid, _ in got:
            member.client.ack(mid, 1)
    assert sorted(p for _, p in got_a + got_b) == [f"m{n}".encode() for n in range(MESSAGES)]
    until(
        lambda: not [s for s in subscriptions_on_disk(first.root) if s[1] == group],
        f"{group}: the group ended",
    )
    until(lambda: not os.path.exists(folder), f"{group}: its folder gone with its record")
    for member in (a, b):
        member.stop()


def test_two_last_members_on_two_servers_leave_at_once_and_the_group_ends_whole(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    first, second, _ = two_servers
    publisher = paho(first, "pub")
    for round in range(ROUNDS):
        _both_leave_at_once(first, second, publisher, round)
    publisher.stop()
