"""A producer's `mqtt.*` properties: the MQTT v5 properties they ask a subscriber to get.

The CLI, the Python API and Spark show an MQTT v5 message's Content Type, Response Topic,
Correlation Data and Payload Format Indicator as the properties named in
`store.v5_properties.FIELDS` (`mqtt.content-type`, ...). A producer that is not MQTT sets the
same names, in the same spelling, to send the same: an MQTT v5 subscriber gets them as those
properties, never as User Properties (mqtt/stored.py). So a message read and put again, its
properties copied, goes out as it came in.

Invariants:
- A value is read as the readers show it: Content Type any text; Response Topic a topic name
  (no wildcard); Correlation Data its bytes in base64 (standard alphabet, padded); Payload
  Format `bytes` or `utf-8` (or 0, 1). Each is text MQTT can carry (UTF-8, no U+0000, at most
  65,535 bytes).
- `check` refuses a value that means nothing at put (InvalidArgument, naming the property),
  so nothing is stored that could not go out; `requested` says the same of a stored one (a
  name a script wrote), which the MQTT door then leaves out, logged.
- Other names, `mqtt.*` ones included, are ordinary properties (User Properties over MQTT).
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from dataclasses import dataclass

from boxmq.core.topics import MQTT_STRING_MAX, utf8_size, validate_topic
from boxmq.errors import InvalidArgument
from boxmq.model import Property, PropertyValue, property_text
from boxmq.store.v5_properties import (
    CONTENT_TYPE,
    CORRELATION_DATA,
    FIELDS,
    FORMATS,
    PAYLOAD_FORMAT,
    RESPONSE_TOPIC,
    correlation_bytes,
)

__all__ = ["FIELDS", "Requested", "check", "not_carried", "requested"]

_MAX = MQTT_STRING_MAX  # bytes in an MQTT string or binary value (§1.5.4, §1.5.6)
_FORMAT_OF = {text: number for number, text in FORMATS.items()} | {"0": 0, "1": 1}


@dataclass(frozen=True, slots=True)
class Requested:
    """The v5 properties a message's `mqtt.*` properties ask for (None: not asked)."""

    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    payload_format: int | None = None

    @classmethod
    def of(cls, values: Mapping[str, str | bytes | int]) -> Requested:
        """The values `requested` gave, by property name."""
        content_type = values.get(CONTENT_TYPE)
        topic = values.get(RESPONSE_TOPIC)
        data = values.get(CORRELATION_DATA)
        number = values.get(PAYLOAD_FORMAT)
        return cls(
            content_type if isinstance(content_type, str) else None,
            topic if isinstance(topic, str) else None,
            data if isinstance(data, bytes) else None,
            number if isinstance(number, int) else None,
        )


def check(properties: Mapping[str, PropertyValue | Property]) -> None:
    """InvalidArgument if an `mqtt.*` property a producer gives has no MQTT v5 meaning."""
    for name, value in properties.items():
        if name in FIELDS:
            requested(name, value.value if isinstance(value, Property) else value)


def requested(name: str, value: PropertyValue) -> str | bytes | int:
    """What `mqtt.*` property `name` (one of FIELDS) = `value` asks for: the v5 property's
    value; InvalidArgument, saying why, if it has none."""
    text = property_text(value)
    try:
        _carried(text)
        if name == RESPONSE_TOPIC:
            return validate_topic(text)
        if name == CORRELATION_DATA:
            return _correlation(text)
        if name == PAYLOAD_FORMAT:
            return _format(text)
        assert name == CONTENT_TYPE, name
        return text
    except InvalidArgument as error:
        raise InvalidArgument(f"property {name!r} = {value!r}: {error}") from None


def not_carried(text: str) -> str | None:
    """Why MQTT cannot carry `text` as a UTF-8 Encoded String (§1.5.4), or None if it can: a
    U+0000, or a surrogate (bytes of a file name that are not UTF-8, read as surrogate
    escapes: store/names.py), or more than 65,535 bytes."""
    if "\0" in text:
        return "MQTT cannot carry U+0000"
    size = utf8_size(text)
    if size is None:
        return "not valid Unicode (a lone surrogate, or bytes that are not UTF-8)"
    return None if size <= _MAX else f"{size} bytes, over MQTT's {_MAX}"


def _carried(text: str) -> None:
    if (why := not_carried(text)) is not None:
        raise InvalidArgument(why)


def _correlation(text: str) -> bytes:
    try:
        data = correlation_bytes(text)
    except (ValueError, binascii.Error):
        raise InvalidArgument(
            "not base64 (standard alphabet, padded), as readers show Correlation Data"
        ) from None
    if len(data) > _MAX:
        raise InvalidArgument(f"{len(data)} bytes of data, over MQTT's {_MAX}")
    return data


def _format(text: str) -> int:
    number = _FORMAT_OF.get(text)
    if number is None:
        raise InvalidArgument("a Payload Format is bytes (0) or utf-8 (1)")
    return number
