"""A copy's file names at each QoS are one encoding with the QoS digit swapped: the names the
encoder gives each level, for every shape of name, and the same refusal when one is too long."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.client.copies import at_qos, copy_names
from boxmq.client.lifecycle import PUT_NAME_LIMIT
from boxmq.core import QoS
from boxmq.errors import MetadataTooLong
from boxmq.model import QOS, TOPIC, Envelope, MessageClass, MessageId, Property, PropertyType
from boxmq.store.names import encode

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)
_NAME = _TEXT.filter(bool)
_PROPERTY = st.one_of(
    st.builds(Property, _NAME, st.just(PropertyType.STRING), _TEXT),
    st.builds(Property, _NAME, st.just(PropertyType.INT), st.integers(-(2**31), 2**31 - 1)),
    st.builds(Property, _NAME, st.just(PropertyType.BOOLEAN), st.booleans()),
    st.builds(Property, _NAME, st.just(PropertyType.DOUBLE), st.floats(allow_nan=False)),
    # a QoS already there (a copy copied again): it is replaced, not kept beside the new one
    st.builds(Property, st.just(QOS), st.just(PropertyType.BYTE), st.integers(0, 2)),
    st.builds(Property, st.just(TOPIC), st.just(PropertyType.STRING), _TEXT.filter(bool)),
)


def _unique(properties: list[Property]) -> tuple[Property, ...]:
    return tuple({p.name: p for p in properties}.values())


_ENVELOPE = st.builds(
    Envelope,
    message_id=_NAME.map(MessageId),
    priority=st.integers(0, 9),
    message_class=st.sampled_from(list(MessageClass)),
    expiration=st.integers(0, 2**63 - 1) | st.just(0),
    correlation_id=st.none() | _TEXT,
    reply_to=st.none() | _TEXT,
    type=st.none() | _TEXT,
    properties=st.lists(_PROPERTY, max_size=6).map(_unique),
)


def _encoded(envelope: Envelope, levels: list[QoS]) -> dict[QoS, str]:
    return {level: encode(at_qos(envelope, level), limit=PUT_NAME_LIMIT) for level in levels}


@given(envelope=_ENVELOPE, levels=st.lists(st.sampled_from(list(QoS)), min_size=1, unique=True))
def test_the_derived_names_are_the_encoded_names(envelope: Envelope, levels: list[QoS]) -> None:
    try:
        expected = _encoded(envelope, levels)
    except MetadataTooLong:
        with pytest.raises(MetadataTooLong, match="use a shorter topic"):
            copy_names(envelope, levels)
        return
    assert copy_names(envelope, levels) == expected


def test_a_name_at_the_limit_is_derived_at_every_level() -> None:
    # the longest topic that fits: every level's name is exactly at the limit, none over
    envelope = Envelope(MessageId("id"), properties=(Property(TOPIC, PropertyType.STRING, ""),))
    room = PUT_NAME_LIMIT - len(encode(at_qos(envelope, QoS.AT_MOST_ONCE)))
    longest = envelope.with_property(TOPIC, PropertyType.STRING, "t" * room)
    names = copy_names(longest, list(QoS))
    assert names == _encoded(longest, list(QoS))
    assert {len(name) for name in names.values()} == {PUT_NAME_LIMIT}
    with pytest.raises(MetadataTooLong):
        copy_names(longest.with_property(TOPIC, PropertyType.STRING, "t" * (room + 1)), list(QoS))
