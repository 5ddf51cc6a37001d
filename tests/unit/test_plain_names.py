"""A batch's plain publications are named from the route's first name, with the id swapped:
the names the general encoder gives them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.client.copies import copy_names
from boxmq.client.publishing import Route
from boxmq.clock import ManualClock
from boxmq.core import QoS
from boxmq.core.router import Destination
from boxmq.core.topics import parse_filter
from boxmq.errors import MetadataTooLong
from boxmq.ids import IdFactory
from boxmq.model import TOPIC, Envelope, MessageClass, Property, PropertyType


def _destination(qos: QoS) -> Destination:
    return Destination(f"d{int(qos)}", parse_filter("#"), False, qos, True, None)


@given(
    topic=st.text(min_size=1, max_size=40).filter(lambda t: "\0" not in t),
    levels=st.sets(st.sampled_from(list(QoS)), min_size=1),
    count=st.integers(1, 5),
)
def test_plain_names_are_the_encoded_names(topic: str, levels: set[QoS], count: int) -> None:
    route = Route([(_destination(qos), f"/x/{int(qos)}") for qos in levels], [], QoS(1))
    ids = IdFactory(ManualClock())
    for _ in range(count):
        envelope = Envelope(
            ids.new(), 4, MessageClass.BYTES, 0, None, None, None,
            (Property(TOPIC, PropertyType.STRING, topic),),
        )  # fmt: skip
        try:
            expected = copy_names(envelope, route.levels)
        except MetadataTooLong:
            with pytest.raises(MetadataTooLong):
                route.plain_names(envelope)
            continue
        assert route.plain_names(envelope) == expected
