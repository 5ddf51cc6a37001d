"""What the broker remembers per topic (routes, ACL decisions) or per message properties (side
files) is bounded in bytes, not only in entries: a client publishing to many distinct long
topics, or many messages of large properties, cannot make it hold gigabytes."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

import boxmq
from boxmq.core import QoS, Subscription, parse_filter
from boxmq.model import (
    PROPERTIES_FILE,
    ConsumerId,
    Envelope,
    MessageId,
    Property,
    PropertyType,
)
from boxmq.mqtt.acl import Acl
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.routes import DurableRoutes, MemoryRoutes
from boxmq.mqtt.stored import _properties_of
from boxmq.store.side_files import SideFiles
from boxmq.store.v5_properties import V5Reader

TOPICS = 200
LONG = 60_000  # characters: each of the 65,536 topics a cache kept could be this long


def _held_after(ask: Callable[[str], object]) -> int:
    """Bytes still allocated after `ask` took TOPICS distinct long topics, the test's own
    references to them gone: what a cache kept of them."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for number in range(TOPICS):
            ask(f"dev/{number}/" + "x" * LONG)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_acl_decisions_on_long_topics_are_not_kept() -> None:
    acl = Acl.parse("pattern readwrite %c/#\n", Path("acl"))
    assert _held_after(lambda topic: acl.can_publish(None, "dev", topic)) < LONG * 5
    assert acl.can_publish(None, "dev", "dev/" + "x" * LONG)  # decided all the same
    assert not acl.can_publish(None, "other", "dev/" + "x" * LONG)


def test_routes_of_long_topics_are_not_kept() -> None:
    routes = MemoryRoutes()
    routes.subscribe(Subscription(ConsumerId("c"), parse_filter("dev/#"), QoS.AT_LEAST_ONCE))
    assert _held_after(routes.route) < LONG * 5
    assert routes.route("dev/" + "x" * LONG) == [("c", "dev/#", 1)]
    assert routes.route("dev/a") is routes.route("dev/a")  # a short one is remembered


@pytest.mark.parametrize("subscribed", [False, True])
def test_durable_routes_of_long_topics_are_not_kept(tmp_path: Path, subscribed: bool) -> None:
    with boxmq.open(tmp_path / "root", fsync="never") as box:
        if subscribed:
            box.subscribe("dev/#", "c")
        routes = DurableRoutes(box)
        assert _held_after(routes.wanted) < LONG * 5
        assert routes.wanted("dev/" + "x" * LONG) is subscribed


def test_large_side_files_are_not_held_by_the_property_caches(tmp_path: Path) -> None:
    """Properties too long for a file name go to a side file, up to a packet's size: the
    caches of their bytes and of what they decode to held 256 and 1024 of them for good."""
    side_files = SideFiles(str(tmp_path))
    reader = V5Reader(side_files)

    def read(number: int) -> None:
        value = str(number).ljust(60_000, "v")  # 15 of them: 900 KB, as a packet of 1 MiB
        raw = Properties.build(user_properties=(("k", value),) * 15).raw
        key = side_files.put(raw)
        envelope = Envelope(
            MessageId(f"m{number}"),
            properties=(Property(PROPERTIES_FILE, PropertyType.STRING, key),),
        )
        assert reader.decoded(envelope) is not None
        assert len(_properties_of(envelope, side_files).raw) == len(raw)

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for number in range(40):
            read(number)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 17 * 2**20  # SideFiles' own 16 MiB, not 40 blobs (34 MiB) in each cache
