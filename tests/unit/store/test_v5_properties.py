"""MQTT v5 properties as readers that are not MQTT see them (store/v5_properties.py).

The property lists are built with the MQTT door's own encoder (mqtt/properties.py), so the
store's small decoder is checked against an independent writer, never against itself.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.model import (
    PROPERTIES_FILE,
    V5_PROPERTIES,
    Envelope,
    MessageId,
    Property,
    PropertyType,
)
from boxmq.mqtt.framing import PacketType
from boxmq.mqtt.properties import Properties, validated
from boxmq.store.side_files import SideFiles
from boxmq.store.v5_properties import (
    CONTENT_TYPE,
    CORRELATION_DATA,
    PAYLOAD_FORMAT,
    RESPONSE_TOPIC,
    Decoded,
    V5Reader,
    correlation_text,
    decode,
    encode,
    shown,
    unpack,
)

_TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), max_size=12)


def _pack(props: Properties) -> str:
    return base64.urlsafe_b64encode(props.raw).decode().rstrip("=")


# User Properties, Content Type, Response Topic, Correlation Data, Payload Format Indicator.
_FIELDS = (
    st.lists(st.tuples(_TEXT, _TEXT), max_size=4),
    st.none() | _TEXT,
    # A Response Topic is a topic name: no wildcard, not empty (the MQTT door refuses both,
    # and the embedded API's mqtt.response-topic too, so neither reaches the encoder).
    st.none() | _TEXT.filter(lambda t: t and "+" not in t and "#" not in t),
    st.none() | st.binary(max_size=16),
    st.none() | st.sampled_from([0, 1]),
)


def _envelope(**properties: str) -> Envelope:
    props = tuple(Property(k, PropertyType.STRING, v) for k, v in properties.items())
    topic = Property("bx_topic", PropertyType.STRING, "orders/1")
    return Envelope(MessageId("m"), properties=(topic, *props))


@given(
    *_FIELDS,
    st.none() | st.integers(0, 2**32 - 1),
)
def test_what_the_mqtt_encoder_writes_decodes_to_the_same_properties(
    users: list[tuple[str, str]],
    content_type: str | None,
    response_topic: str | None,
    correlation: bytes | None,
    payload_format: int | None,
    expiry: int | None,
) -> None:
    props = Properties.build(
        user_properties=users,
        content_type=content_type,
        response_topic=response_topic,
        correlation_data=correlation,
        payload_format_indicator=payload_format,
        message_expiry_interval=expiry,
    )
    decoded = decode(props.raw)
    assert decoded.user_properties == tuple(users)
    fields = dict(decoded.fields)
    assert fields.get(CONTENT_TYPE) == content_type
    assert fields.get(RESPONSE_TOPIC) == response_topic
    expected = None if correlation is None else base64.b64decode(fields[CORRELATION_DATA])
    assert expected == correlation
    assert fields.get(PAYLOAD_FORMAT) == {None: None, 0: "bytes", 1: "utf-8"}[payload_format]
    assert unpack(_pack(props)) == props.raw


@given(
    *_FIELDS,
)
def test_the_store_s_encoder_writes_what_the_mqtt_encoder_writes(
    users: list[tuple[str, str]],
    content_type: str | None,
    response_topic: str | None,
    correlation: bytes | None,
    payload_format: int | None,
) -> None:
    # Producers that are not MQTT keep long properties with it (client/spill.py): the MQTT
    # door forwards those bytes as they are, so they must be what it would write itself.
    raw = encode(
        payload_format=payload_format,
        content_type=content_type,
        response_topic=response_topic,
        correlation_data=correlation,
        user_properties=tuple(users),
    )
    props = Properties.build(
        user_properties=users,
        content_type=content_type,
        response_topic=response_topic,
        correlation_data=correlation,
        payload_format_indicator=payload_format,
    )
    assert raw == props.raw
    assert validated(raw, PacketType.PUBLISH).raw == raw


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"payload_format": 2}, "0 or 1"),
        ({"content_type": "a\0b"}, "U[+]0000"),
        ({"correlation_data": b"x" * 65_536}, "over MQTT's 65535"),
    ],
)
def test_the_store_s_encoder_refuses_what_mqtt_cannot_carry(
    given: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        encode(**given)


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_value_error_only(raw: bytes) -> None:
    with contextlib.suppress(ValueError):
        decode(raw)


@given(st.text(max_size=80))
def test_any_text_in_the_name_reads_as_some_properties_never_an_error(text: str) -> None:
    reader = V5Reader(None)
    assert isinstance(reader.properties(_envelope(**{V5_PROPERTIES: text})), dict)


@given(
    st.dictionaries(_TEXT, _TEXT, max_size=3),
    st.lists(st.tuples(_TEXT, _TEXT), max_size=4),
    st.lists(st.tuples(st.sampled_from([CONTENT_TYPE, RESPONSE_TOPIC]), _TEXT), max_size=2),
)
def test_the_names_own_win_then_the_mqtt_fields_then_the_first_user_property(
    own: dict[str, str], users: list[tuple[str, str]], fields: list[tuple[str, str]]
) -> None:
    own = {k: v for k, v in own.items() if not k.startswith("bx_")}  # as user_properties()
    fields = list(dict(fields).items())
    expected: dict[str, str] = {}
    for name, value in [*own.items(), *fields, *users]:
        if not name.startswith("bx_"):
            expected.setdefault(name, value)
    assert shown(own, Decoded(tuple(users), tuple(fields))) == expected
    assert shown(own, None) == own


def test_a_message_shows_its_user_properties_and_mqtt_fields_not_the_raw_bytes() -> None:
    props = Properties.build(
        user_properties=[("tenant", "acme"), ("tenant", "other"), ("bx_dc", "9")],
        content_type="application/json",
        correlation_data=b"\x01\x02req-7",
    )
    envelope = _envelope(**{V5_PROPERTIES: _pack(props), "JMSXGroupID": "order-17"})
    assert V5Reader(None).properties(envelope) == {
        "JMSXGroupID": "order-17",
        CONTENT_TYPE: "application/json",
        CORRELATION_DATA: "AQJyZXEtNw==",
        "tenant": "acme",
    }


def test_properties_in_a_side_file_are_read_from_it(tmp_path: Path) -> None:
    props = Properties.build(user_properties=[("traceparent", "00-" + "4b" * 40)])
    key = SideFiles(str(tmp_path)).put(props.raw)
    envelope = _envelope(**{PROPERTIES_FILE: key})
    reader = V5Reader(SideFiles(str(tmp_path)))  # another process: nothing cached
    assert reader.properties(envelope) == {"traceparent": "00-" + "4b" * 40}
    assert V5Reader(None).properties(envelope) == {}  # no root known: none, no error


def test_a_missing_side_file_shows_none_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = SideFiles(str(tmp_path)).put(Properties.build(content_type="json").raw)
    os.unlink(tmp_path / ".properties" / key)
    reader = V5Reader(SideFiles(str(tmp_path)))
    with caplog.at_level(logging.WARNING, "boxmq.store"):
        for _ in range(3):
            assert reader.properties(_envelope(**{PROPERTIES_FILE: key, "a": "1"})) == {"a": "1"}
    assert len(caplog.records) == 1


@pytest.mark.parametrize(
    "blob",
    [
        "not base64!",
        _pack(Properties(b"\x26\x00\x05ten")),  # truncated
        _pack(Properties(b"\x11\x00\x00\x00\x05")),  # a Session Expiry Interval: not a PUBLISH's
        _pack(Properties(b"\x03\x00\x02\xff\xfe")),  # not UTF-8
    ],
)
def test_a_bad_blob_in_the_name_shows_none_and_is_logged_once(
    blob: str, caplog: pytest.LogCaptureFixture
) -> None:
    reader = V5Reader(None)
    with caplog.at_level(logging.WARNING, "boxmq.store"):
        for _ in range(3):
            assert reader.properties(_envelope(**{V5_PROPERTIES: blob, "a": "1"})) == {"a": "1"}
    assert len(caplog.records) == 1
    assert "no MQTT v5 properties boxmq can read" in caplog.text


@given(
    st.none() | _TEXT.filter(lambda t: "+" not in t and "#" not in t),
    st.none() | st.binary(max_size=16),
)
def test_response_topic_and_correlation_data_are_the_reply_to_and_correlation_id(
    response_topic: str | None, correlation: bytes | None
) -> None:
    props = Properties.build(
        response_topic=response_topic, correlation_data=correlation, user_properties=[("a", "b")]
    )
    envelope = _envelope(**{V5_PROPERTIES: _pack(props)})
    reader = V5Reader(None)
    assert reader.reply_to(envelope) == response_topic
    cid = reader.correlation_id(envelope)
    if correlation is None:
        assert cid is None
    else:
        assert cid is not None
        # UTF-8 data is its text, exactly; other data the base64 mqtt.correlation-data shows.
        try:
            assert cid.encode() == correlation
        except AssertionError:
            assert cid == reader.properties(envelope)[CORRELATION_DATA]
            assert base64.b64decode(cid) == correlation


@given(st.binary(max_size=32))
def test_correlation_text_is_utf8_when_it_decodes_else_base64(data: bytes) -> None:
    text = correlation_text(data)
    try:
        assert text == data.decode()
    except UnicodeDecodeError:
        assert text == base64.b64encode(data).decode()


def test_the_names_own_reply_to_and_correlation_id_win_over_the_v5_ones() -> None:
    props = Properties.build(response_topic="rpc/v5", correlation_data=b"v5")
    envelope = _envelope(**{V5_PROPERTIES: _pack(props)})
    own = Envelope(
        envelope.message_id,
        correlation_id="own-id",
        reply_to="rpc/own",
        properties=envelope.properties,
    )
    reader = V5Reader(None)
    assert (reader.reply_to(own), reader.correlation_id(own)) == ("rpc/own", "own-id")
    assert (reader.reply_to(envelope), reader.correlation_id(envelope)) == ("rpc/v5", "v5")
    assert reader.properties(envelope) == {
        RESPONSE_TOPIC: "rpc/v5",
        CORRELATION_DATA: "djU=",
    }


def test_reply_fields_in_a_side_file_are_read_from_it(tmp_path: Path) -> None:
    side_files = SideFiles(str(tmp_path))
    props = Properties.build(response_topic="rpc/" + "r" * 200, correlation_data=b"\xff\x00")
    envelope = _envelope(**{PROPERTIES_FILE: side_files.put(props.raw)})
    reader = V5Reader(side_files)
    assert reader.reply_to(envelope) == "rpc/" + "r" * 200
    assert reader.correlation_id(envelope) == "/wA="  # not UTF-8: base64


def test_a_message_without_v5_properties_has_none() -> None:
    reader = V5Reader(None)
    assert reader.reply_to(_envelope()) is None
    assert reader.correlation_id(_envelope()) is None
