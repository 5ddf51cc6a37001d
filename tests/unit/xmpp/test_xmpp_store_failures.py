"""A full disk under the XMPP door: a publish the store refused is answered with an error the
sender can act on (resource-constraint, type wait), and nothing of it is kept.

The disk is a real one: a small tmpfs filled until the kernel answers ENOSPC (tests/diskfull.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.diskfull import SmallDisk, small_disk
from tests.unit.xmpp.wire import BOB, CAROL, PS, SERVICE, Wire, condition
from tests.waiting import logged

import boxmq
from boxmq.xmpp.records import Recorded, SubscriberRecords


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk") as disk:
        yield disk


@pytest.fixture
def box(disk: SmallDisk) -> Iterator[boxmq.Box]:
    with boxmq.open(disk.path / "root", fsync="never") as opened:
        yield opened
    disk.free()


def _publish(wire: Wire, node: str) -> tuple[str, str]:
    reply = wire.iq(
        CAROL,
        f"<pubsub xmlns='{PS}'><publish node='{node}'><item><x xmlns='urn:t'/></item>"
        "</publish></pubsub>",
    )
    return condition(reply)


def _working_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and "working" in path.parts]


def test_a_publish_to_a_queue_on_a_full_disk_is_resource_constraint(
    box: boxmq.Box, disk: SmallDisk
) -> None:
    wire = Wire(box)
    wire.create("jobs")
    disk.fill()
    assert _publish(wire, "jobs") == ("wait", "resource-constraint")
    assert _working_files(disk.path) == []
    disk.free()
    wire.publish(node="jobs")  # space is back: stored and answered
    assert box.queue("jobs").counts().ready == 1
    wire.service.close()


def test_a_publish_to_a_topic_on_a_full_disk_is_resource_constraint(
    box: boxmq.Box, disk: SmallDisk
) -> None:
    wire = Wire(box)
    with box.subscribe("news", "reader", durable=True) as reader:
        disk.fill()
        assert _publish(wire, "news") == ("wait", "resource-constraint")
        assert _working_files(disk.path) == []
        assert reader.receive_nowait() is None
    wire.service.close()


def test_a_subscription_whose_record_a_full_disk_refused_is_recorded_once_space_is_back(
    box: boxmq.Box, disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """The subscription goes on in memory, but its record (what the next start after a crash
    reads to tell its subscriber that it is gone) was never written, even once space was
    back, and the WARNING said `[Errno 28] No space left on device: '...'`, not what to
    fix (found by the full-disk hunt). It is written at the component's next look."""
    wire = Wire(box)
    wire.create("jobs")
    disk.fill()
    with caplog.at_level(logging.INFO, logger="boxmq.xmpp"):
        assert wire.subscribe(BOB, 1).get("type") == "result"
        [line] = logged(caplog, "not recorded")
        assert "ENOSPC (No space left on device); the file system is full" in line, line
        records = SubscriberRecords(str(disk.path / "root"), SERVICE, flush=False)
        assert records.left_over() == []
        disk.free()
        wire.service.expire(time.time() + 2)
    assert records.left_over() == [Recorded(BOB, "jobs")]
    assert f"jobs: the subscription of {BOB} is recorded now" in caplog.messages
    wire.service.close()


def test_a_plain_message_to_a_queue_on_a_full_disk_is_answered_resource_constraint(
    box: boxmq.Box, disk: SmallDisk
) -> None:
    # urn:xmpp:qos at most once: unanswered when stored, so a refusal must be said (RFC 6120
    # §8.3), with the condition an <acknowledged/> one gets: wait, the sender may try again
    wire = Wire(box)
    wire.create("jobs")
    disk.fill()
    [answer] = wire.message(
        f"<message from='{CAROL}' to='jobs@{SERVICE}' id='m1'><body>23.4</body></message>"
    )
    assert (answer.get("type"), answer.get("id")) == ("error", "m1")
    assert condition(answer) == ("wait", "resource-constraint")
    assert _working_files(disk.path) == []
    disk.free()
    assert box.queue("jobs").counts().ready == 0
    wire.service.close()
