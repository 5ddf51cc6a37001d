"""What the broker remembers per topic (routes, ACL decisions) is bounded in bytes, not only
in entries: a client publishing to many distinct long topics cannot make it hold gigabytes."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

import boxmq
from boxmq.core import QoS, Subscription, parse_filter
from boxmq.model import ConsumerId
from boxmq.mqtt.acl import Acl
from boxmq.mqtt.routes import DurableRoutes, MemoryRoutes

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
