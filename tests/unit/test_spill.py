"""A producer's properties too long for a name, kept in a side file (client/spill.py).

The bytes are checked against the MQTT door's own builder (mqtt/stored.py), which is what a v5
subscriber got for the message before it spilled, and read back by the readers' decoder
(store/v5_properties.py), which must show what they showed before."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.client.spill import spilled, v5_bytes
from boxmq.errors import MetadataTooLong
from boxmq.model import (
    GROUP_KEY,
    PROPERTIES_FILE,
    TOPIC,
    Envelope,
    MessageId,
    Property,
    PropertyType,
    PropertyValue,
    property_text,
)
from boxmq.mqtt.stored import _properties_of
from boxmq.store.names import encode
from boxmq.store.side_files import SideFiles
from boxmq.store.v5_properties import (
    CONTENT_TYPE,
    CORRELATION_DATA,
    PAYLOAD_FORMAT,
    RESPONSE_TOPIC,
    Decoded,
    V5Reader,
)

_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=12)
_NAME = _TEXT.filter(lambda name: not name.startswith("bx_"))
# The `mqtt.*` values as readers show them, which is how a message read is published again.
_MQTT = {
    CONTENT_TYPE: _TEXT.filter(lambda t: "\0" not in t),
    RESPONSE_TOPIC: st.sampled_from(["replies/dev1", "a"]),
    CORRELATION_DATA: st.binary(max_size=8).map(lambda data: base64.b64encode(data).decode()),
    PAYLOAD_FORMAT: st.sampled_from(["bytes", "utf-8"]),
}
_VALUE: st.SearchStrategy[PropertyValue] = st.one_of(
    _TEXT, st.integers(-(2**40), 2**40), st.booleans(), st.floats(allow_nan=False)
)


@st.composite
def _envelopes(draw: st.DrawFn) -> Envelope:
    own: dict[str, PropertyValue] = draw(st.dictionaries(_NAME, _VALUE, max_size=5))
    for name, values in _MQTT.items():
        if draw(st.booleans()):
            own[name] = draw(values)
    properties = [Property(TOPIC, PropertyType.STRING, "orders/1")]
    properties += [Property(k, _typed(v), v) for k, v in own.items()]
    return Envelope(
        MessageId("m1"),
        correlation_id=draw(st.none() | st.sampled_from(["req-7", "c"])),
        reply_to=draw(st.none() | st.sampled_from(["replies/x", "no/+"])),
        properties=tuple(properties),
    )


@st.composite
def _mqtt(draw: st.DrawFn) -> dict[str, str]:
    return {name: draw(values) for name, values in _MQTT.items() if draw(st.booleans())}


def _typed(value: PropertyValue) -> PropertyType:
    if isinstance(value, bool):
        return PropertyType.BOOLEAN
    if isinstance(value, int):
        return PropertyType.LONG
    return PropertyType.DOUBLE if isinstance(value, float) else PropertyType.STRING


def _refused(envelope: Envelope) -> str:
    raise MetadataTooLong("no room")


@given(_envelopes())
def test_the_bytes_are_what_the_mqtt_door_sends_for_the_message_as_it_was(
    envelope: Envelope,
) -> None:
    sides = SideFiles("/nonexistent")  # a message without v5 properties reads none
    assert v5_bytes(envelope) == _properties_of(envelope, sides).raw


@given(own=st.dictionaries(_NAME, _VALUE, max_size=5), mqtt=_mqtt(), keep_typed=st.booleans())
def test_readers_see_what_they_saw_before_it_spilled(
    tmp_path_factory: pytest.TempPathFactory,
    own: dict[str, PropertyValue],
    mqtt: dict[str, str],
    keep_typed: bool,
) -> None:
    envelope = _envelope(**own, **mqtt)
    sides = SideFiles(str(tmp_path_factory.mktemp("root")))

    def name_of(candidate: Envelope) -> str:
        if not keep_typed and candidate.user_properties():
            raise MetadataTooLong("no room for the typed ones")
        return encode(candidate)

    try:
        moved, _, _ = spilled(envelope, sides, name_of, MetadataTooLong("long"))
    except MetadataTooLong:
        return  # nothing leaves the name (U+0000 stays in it), or the typed ones found no room
    reader = V5Reader(sides)
    kept = moved.user_properties()
    # Typed ones left in the name read as they were; in the side file, as the text a v5
    # subscriber gets.
    expected = {
        name: value if name in kept else property_text(value)
        for name, value in reader.properties(envelope).items()
    }
    assert reader.properties(moved) == expected


def test_a_reply_to_and_a_correlation_id_read_back_the_same_and_add_no_property(
    tmp_path: Path,
) -> None:
    envelope = dataclasses.replace(
        _envelope(note="y" * 200), reply_to="replies/x", correlation_id="req-7"
    )
    sides = SideFiles(str(tmp_path))
    moved, _, _ = spilled(envelope, sides, encode, MetadataTooLong("long"))
    reader = V5Reader(sides)
    assert (reader.reply_to(moved), reader.correlation_id(moved)) == ("replies/x", "req-7")
    # The side file has them as Response Topic and Correlation Data, which a v5 subscriber
    # gets (as it did before the spill), but they are the name's fields 5 and 6 again: shown
    # as `mqtt.response-topic` and `mqtt.correlation-data` too, they were properties the
    # message did not have before it spilled (docs/file-format.md: the same names and values).
    assert reader.properties(moved) == {"note": "y" * 200}
    assert reader.decoded(moved) == Decoded(
        fields=(
            (RESPONSE_TOPIC, "replies/x"),
            (CORRELATION_DATA, base64.b64encode(b"req-7").decode()),
        ),
        user_properties=(("note", "y" * 200),),
        response_topic="replies/x",
        correlation_data=b"req-7",
    )


def test_a_producers_mqtt_fields_still_show_beside_a_spilled_message_without_a_reply_to(
    tmp_path: Path,
) -> None:
    envelope = _envelope(note="y" * 200, **{RESPONSE_TOPIC: "r/1", CORRELATION_DATA: "AQI="})
    sides = SideFiles(str(tmp_path))
    moved, _, _ = spilled(envelope, sides, encode, MetadataTooLong("long"))
    reader = V5Reader(sides)
    assert reader.properties(moved) == reader.properties(envelope)
    assert reader.reply_to(moved) == reader.reply_to(envelope) == "r/1"
    assert reader.correlation_id(moved) == reader.correlation_id(envelope) == "\x01\x02"


def test_typed_properties_stay_in_the_name_where_they_fit_and_leave_it_where_they_do_not(
    tmp_path: Path,
) -> None:
    envelope = _envelope(note="y" * 200, n=3, ok=True)
    sides = SideFiles(str(tmp_path))
    moved, name, _ = spilled(envelope, sides, encode, MetadataTooLong("long"))
    assert moved.user_properties() == {"n": 3, "ok": True}
    assert name == encode(moved)
    assert V5Reader(sides).properties(moved) == {"n": 3, "ok": True, "note": "y" * 200}

    def no_room_for_typed(candidate: Envelope) -> str:
        if candidate.user_properties():
            raise MetadataTooLong("no room")
        return encode(candidate)

    moved, _, _ = spilled(envelope, sides, no_room_for_typed, MetadataTooLong("long"))
    assert moved.user_properties() == {}
    assert V5Reader(sides).properties(moved) == {"note": "y" * 200, "n": "3", "ok": "true"}


def test_the_typed_properties_that_fit_stay_in_the_name_when_not_all_of_them_do(
    tmp_path: Path,
) -> None:
    # Two long counters leave no room for every typed property beside the key; before
    # 2026-12-02 all of them left the name then, and `urgent=False` read back as "false",
    # a str Python takes for true.
    counters = {f"counter_with_a_long_name_{k}": 2**62 + k for k in range(2)}
    envelope = _envelope(note="y" * 200, urgent=False, n=3, **counters)
    sides = SideFiles(str(tmp_path))
    moved, name, _ = spilled(envelope, sides, encode, MetadataTooLong("long"))
    assert name == encode(moved)
    kept = moved.user_properties()
    assert {"urgent": False, "n": 3}.items() <= kept.items()
    assert set(kept) < {"urgent", "n", *counters}  # not all of them fit
    expected = {"note": "y" * 200, "urgent": False, "n": 3}
    expected |= {k: v if k in kept else str(v) for k, v in counters.items()}
    assert V5Reader(sides).properties(moved) == expected


def test_the_group_and_what_mqtt_cannot_carry_stay_in_the_name(tmp_path: Path) -> None:
    envelope = _envelope(**{GROUP_KEY: "g-1", "nul": "a\0b", "note": "y" * 200})
    moved, _, _ = spilled(envelope, SideFiles(str(tmp_path)), encode, MetadataTooLong("long"))
    assert moved.user_properties() == {GROUP_KEY: "g-1", "nul": "a\0b"}
    assert V5Reader(SideFiles(str(tmp_path))).properties(moved) == envelope.user_properties()


def test_what_cannot_move_is_refused_with_the_callers_error_and_no_side_file(
    tmp_path: Path,
) -> None:
    sides = SideFiles(str(tmp_path))
    refused = MetadataTooLong("the topic is too long")
    for envelope in (_envelope(), _envelope(**{GROUP_KEY: "g"}), _with_v5_file()):
        with pytest.raises(MetadataTooLong) as raised:
            spilled(envelope, sides, encode, refused)
        assert raised.value is refused
    with pytest.raises(MetadataTooLong, match="no room"):  # moved, and still too long
        spilled(_envelope(note="y"), sides, _refused, refused)
    with pytest.raises(MetadataTooLong):
        spilled(_envelope(note="y"), None, encode, refused)  # no side files to go to
    assert not (tmp_path / ".properties").exists()


def _envelope(**properties: PropertyValue) -> Envelope:
    own = [Property(k, _typed(v), v) for k, v in properties.items()]
    return Envelope(MessageId("m1"), properties=(Property(TOPIC, PropertyType.STRING, "t"), *own))


def _with_v5_file() -> Envelope:
    # The MQTT door's message: its v5 properties are its door's (mqtt/stored.py), never moved.
    key = Property(PROPERTIES_FILE, PropertyType.STRING, "0" * 32)
    return Envelope(MessageId("m1"), properties=(key, Property("note", PropertyType.STRING, "y")))


def _fields_in_the_name(candidate: Envelope) -> str:
    """A caller whose name has room for the key only once the reply-to and correlation id
    left it (a short topic, a content type and an expiration: docs/file-format.md)."""
    if candidate.reply_to is not None or candidate.correlation_id is not None:
        raise MetadataTooLong("no room beside the reply-to and the correlation id")
    return encode(candidate)


def test_a_reply_to_and_a_correlation_id_leave_the_name_last_and_read_back_the_same(
    tmp_path: Path,
) -> None:
    """Where the key finds no room beside them, the reply-to and the correlation id go to the
    side file too, where they were already (as Response Topic and Correlation Data): the
    message reads as an MQTT v5 request does, its fields restored from there. The typed
    properties stay in the name first: only the fields had to leave."""
    envelope = dataclasses.replace(
        _envelope(**{CONTENT_TYPE: "application/json"}, n=3),
        reply_to="cfg/answers",
        correlation_id="req-7",
    )
    sides = SideFiles(str(tmp_path))
    moved, name, _ = spilled(envelope, sides, _fields_in_the_name, MetadataTooLong("long"))
    assert (moved.reply_to, moved.correlation_id) == (None, None)
    assert moved.user_properties() == {"n": 3}
    assert name == encode(moved)
    key = moved.property_value(PROPERTIES_FILE)
    assert isinstance(key, str)
    assert sides.get(key) == v5_bytes(envelope)  # the bytes a v5 subscriber got before
    reader = V5Reader(sides)
    assert (reader.reply_to(moved), reader.correlation_id(moved)) == ("cfg/answers", "req-7")
    assert reader.properties(moved) == {
        "n": 3,
        CONTENT_TYPE: "application/json",
        RESPONSE_TOPIC: "cfg/answers",
        CORRELATION_DATA: base64.b64encode(b"req-7").decode(),
    }


def test_a_field_mqtt_cannot_carry_stays_in_the_name_and_the_other_leaves(
    tmp_path: Path,
) -> None:
    """A reply-to holding U+0000 is no Response Topic (a v5 subscriber never got it): it stays
    in the name, and the error is the caller's when it still does not fit; the correlation
    id, which Correlation Data carries, leaves."""
    envelope = dataclasses.replace(_envelope(), reply_to="a\0b", correlation_id="req-7")
    sides = SideFiles(str(tmp_path))

    def no_correlation_id(candidate: Envelope) -> str:
        if candidate.correlation_id is not None:
            raise MetadataTooLong("no room beside the correlation id")
        return encode(candidate)

    moved, _, _ = spilled(envelope, sides, no_correlation_id, MetadataTooLong("long"))
    assert (moved.reply_to, moved.correlation_id) == ("a\0b", None)
    reader = V5Reader(sides)
    assert (reader.reply_to(moved), reader.correlation_id(moved)) == ("a\0b", "req-7")
    with pytest.raises(MetadataTooLong, match="no room beside the reply-to"):
        spilled(envelope, sides, _fields_in_the_name, MetadataTooLong("long"))
