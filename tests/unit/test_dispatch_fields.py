"""Envelope.dispatch_fields: one look at the properties, the answers of four accessors."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from boxmq.model import (
    DELIVERY_COUNT,
    GROUP_KEY,
    LAST_HOLDER,
    NOT_BEFORE,
    TOPIC,
    Envelope,
    MessageId,
    Property,
    PropertyType,
)

_VALUES = st.one_of(st.booleans(), st.integers(-5, 10**13), st.floats(allow_nan=False), st.text())
_PROPERTIES = st.lists(
    st.builds(
        Property,
        st.sampled_from([DELIVERY_COUNT, LAST_HOLDER, NOT_BEFORE, GROUP_KEY, TOPIC, "other"]),
        st.sampled_from(list(PropertyType)),
        _VALUES,
    ),
    max_size=8,
)


@given(_PROPERTIES)
def test_dispatch_fields_say_what_the_accessors_say(properties: list[Property]) -> None:
    envelope = Envelope(MessageId("m"), properties=tuple(properties))
    assert envelope.dispatch_fields() == (
        envelope.not_before,
        envelope.delivery_count,
        envelope.last_holder,
        envelope.group_key,
    )
