"""A full disk under the XMPP door: a publish the store refused is answered with an error the
sender can act on (resource-constraint, type wait), and nothing of it is kept.

The disk is a real one: a small tmpfs filled until the kernel answers ENOSPC (tests/diskfull.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.diskfull import SmallDisk, small_disk
from tests.unit.xmpp.wire import CAROL, PS, Wire, condition

import boxmq


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
