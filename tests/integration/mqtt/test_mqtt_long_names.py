"""Client ids of any length MQTT devices use (a `device-<uuid>`, a plant's line and station):
their sessions, subscriptions, share-group memberships and exactly-once publishes live on disk
under names short enough for a lock, where such ids were refused (CONNACK 0x85 / 0x02). And
share names too long for a folder name, which persistent sessions were refused (SUBACK 0x8F).
(A topic, which a stored message's name carries, has its limit: docs/file-format.md.)"""

from __future__ import annotations

import contextlib
import queue
import time

import pytest
from tests.integration.mqtt.clients import WAIT, RunningServer, paho

DEVICE = "device-3f2a1c9e-8b7d-4e6f-a5c4-1b2d3e4f5a6b"
STATION = "plant/line-3/station-12/sensor-7/températures"


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v311"])
def test_a_persistent_session_with_a_long_client_id_gets_what_came_while_away(
    server: RunningServer, v5: bool
) -> None:
    expiry = 3600 if v5 else None
    station = paho(server, STATION, v5=v5, clean=False, expiry=expiry)
    station.subscribe("plant/#", 2)
    station.stop()
    device = paho(server, DEVICE, v5=v5)
    device.publish("plant/line-3", b"exactly once", 2)  # through the exactly-once intake
    device.publish("plant/line-4", b"at least once", 1)
    device.stop()
    back = paho(server, STATION, v5=v5, clean=False, expiry=expiry)
    assert back.session_present
    assert sorted(back.next().payload for _ in range(2)) == [b"at least once", b"exactly once"]
    assert back.nothing()
    back.stop()


def test_share_group_members_with_long_client_ids_split_the_messages(
    server: RunningServer,
) -> None:
    members = [paho(server, f"{DEVICE}-{n}", clean=False, expiry=600) for n in (1, 2)]
    for member in members:
        member.subscribe("$share/g/jobs/#", 1)
    sender = paho(server, "sender")
    for n in range(10):
        sender.publish(f"jobs/{n}", str(n).encode(), 1)
    got = {0: [], 1: []}  # type: dict[int, list[bytes]]
    deadline = time.monotonic() + WAIT
    while len(got[0]) + len(got[1]) < 10 and time.monotonic() < deadline:
        for n, member in enumerate(members):
            with contextlib.suppress(queue.Empty):
                got[n].append(member.next(timeout=0.1).payload)
    assert got[0]
    assert got[1]  # round robin: both members had a share
    assert sorted(got[0] + got[1], key=int) == [str(n).encode() for n in range(10)]
    for member in members:
        assert member.nothing()
        member.stop()
    sender.stop()


def test_a_client_id_too_long_to_name_its_record_is_refused(server: RunningServer) -> None:
    paho(server, "x" * 256, expect=0x85)  # 0x85: Client Identifier not valid


def test_a_share_group_with_a_name_too_long_for_a_folder_name_delivers(
    server: RunningServer,
) -> None:
    """A group name is not in the messages' names: any length works, on disk as well."""
    group = "consumers-of-" + "g" * 240
    members = [paho(server, name, clean=False, expiry=600) for name in ("m1", "m2")]
    for member in members:
        reasons = member.subscribe(f"$share/{group}/jobs/#", 1)
        assert [int(getattr(r, "value", r)) for r in reasons] == [1]
    sender = paho(server, "sender")
    sender.publish("jobs/1", b"shared", 1)
    sender.publish("jobs/2", b"shared", 1)
    assert [m.next().payload for m in members] == [b"shared", b"shared"]
    for member in members:
        member.stop()
    sender.stop()
