"""The `wire` most of these tests use: the service with the queue node `jobs` made
(test_xmpp_nodes_and_qos.py and test_xmpp_qos_out.py define their own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.unit.xmpp.wire import Wire, wired

import boxmq


@pytest.fixture
def wire(box: boxmq.Box) -> Iterator[Wire]:
    with wired(box) as wire:
        yield wire
