"""The MQTT v5 properties a message file carries, as the readers that are not MQTT see them,
and as a producer that is not MQTT writes them when its properties do not fit in a name.

An MQTT v5 message keeps its PUBLISH properties as their wire bytes (docs/file-format.md): in
its name (`model.V5_PROPERTIES`, URL-safe base64) or in a side file (`model.PROPERTIES_FILE`).
The MQTT door forwards those bytes as they are and never comes here; the CLI, the Python API
(`Message.properties`) and the Spark source decode them here, when they read a message.

What they see (docs/file-format.md, "MQTT v5 properties, as other readers see them"):
- each User Property is an ordinary string property NAME=VALUE (a name repeated: its first
  value; every pair still goes to MQTT subscribers);
- Content Type, Response Topic, Correlation Data (base64) and Payload Format Indicator
  (`bytes` or `utf-8`) are the string properties named in `FIELDS` (`mqtt.content-type`...);
- the Message Expiry Interval is not a property: it is the message's expiration already;
- Response Topic and Correlation Data are also the message's `reply_to` and `correlation_id`
  (`V5Reader.reply_to`, `V5Reader.correlation_id`) when its name has none of its own: the
  data as text (`correlation_text`: UTF-8 when it decodes as such, else its base64); for a
  message without v5 properties, its producer's `mqtt.response-topic` and
  `mqtt.correlation-data` are, which is what it goes to MQTT v5 subscribers with
  (client/mqtt_fields.py);
- the file name's own properties win over these, `mqtt.*` over a User Property of the same
  name, and nothing in boxmq's reserved `bx_*` names is ever shown.
- a name with a reply-to or correlation id of its own (one whose properties spilled to a side
  file: client/spill.py) shows them as those, not also as `mqtt.response-topic` and
  `mqtt.correlation-data` (`_without_fields_of`); one whose reply-to and correlation id left
  the name for the side file too reads as an MQTT v5 request: both ways.

Invariants:
- Reading never fails and never changes a file: properties that are not base64, not a
  well-formed property list, or in a side file gone missing, are shown as none (logged once
  each), and the message reads as if it had none.
- This module speaks the property list's wire format on its own, for the PUBLISH properties
  only: it lies below the client, which may not import the MQTT door (DESIGN.md §6). The
  tests check it against the door's encoder and validator (mqtt/properties.py).
- `encode` writes what `decode` reads, in identifier order as the door's `Properties.build`
  does, and only what a PUBLISH may carry: the caller gives text MQTT can carry (no U+0000,
  at most 65,535 bytes: client/mqtt_fields.py checks it), else ValueError.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from boxmq.model import (
    PROPERTIES_FILE,
    RESERVED_PREFIX,
    V5_PROPERTIES,
    Envelope,
    PropertyValue,
)
from boxmq.store.side_files import SideFiles

__all__ = [
    "CONTENT_TYPE",
    "CORRELATION_DATA",
    "FIELDS",
    "FORMATS",
    "PAYLOAD_FORMAT",
    "RESPONSE_TOPIC",
    "Decoded",
    "V5Reader",
    "correlation_bytes",
    "correlation_id_shown",
    "correlation_text",
    "decode",
    "encode",
    "properties_shown",
    "reply_to_shown",
    "shown",
    "unpack",
]

log = logging.getLogger("boxmq.store")

CONTENT_TYPE: Final = "mqtt.content-type"
RESPONSE_TOPIC: Final = "mqtt.response-topic"
CORRELATION_DATA: Final = "mqtt.correlation-data"  # base64 (standard alphabet, padded)
PAYLOAD_FORMAT: Final = "mqtt.payload-format"  # "bytes" (0) or "utf-8" (1)
FIELDS: Final = (CONTENT_TYPE, RESPONSE_TOPIC, CORRELATION_DATA, PAYLOAD_FORMAT)

# MQTT 5.0 §2.2.2.2: the identifiers a PUBLISH may carry, by data type (§1.5).
_BYTE: Final = {0x01: 1}  # Payload Format Indicator
_FIXED: Final = {0x01: 1, 0x02: 4, 0x23: 2}  # + Message Expiry Interval, Topic Alias
_STRINGS: Final = {0x03: CONTENT_TYPE, 0x08: RESPONSE_TOPIC}
_CORRELATION: Final = 0x09
_USER: Final = 0x26
_SUBSCRIPTION_IDENTIFIER: Final = 0x0B  # a Variable Byte Integer
_PAYLOAD_FORMAT_ID: Final = 0x01
_CONTENT_TYPE_ID: Final = 0x03
_RESPONSE_TOPIC_ID: Final = 0x08
_STRING_MAX: Final = 0xFFFF  # bytes in an MQTT string or binary value (§1.5.4, §1.5.6)
FORMATS: Final = {0: "bytes", 1: "utf-8"}  # Payload Format Indicator, as readers show it
_REMEMBERED = 1024  # property blobs decoded and remembered (a bad one: logged once meanwhile)
_LARGEST_REMEMBERED = 64 << 10  # bytes of a side file remembered decoded


@dataclass(frozen=True, slots=True)
class Decoded:
    """What a PUBLISH property list says that a reader may want."""

    user_properties: tuple[tuple[str, str], ...] = ()
    fields: tuple[tuple[str, str], ...] = ()  # (a name of FIELDS, its value as text)
    response_topic: str | None = None
    correlation_data: bytes | None = None


def correlation_text(data: bytes) -> str:
    """Correlation Data as a correlation id: the text it is when it is UTF-8 (what a reply
    sends back as Correlation Data, exactly), else its base64 (standard alphabet, padded, as
    `mqtt.correlation-data` shows it; a reply then sends back those characters, not `data`)."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return base64.b64encode(data).decode()


def correlation_bytes(text: str) -> bytes:
    """The Correlation Data that `mqtt.correlation-data` shows (`text`: base64, standard
    alphabet, padded); ValueError if it is not that."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as error:
        raise ValueError(str(error)) from None


def decode(raw: bytes) -> Decoded:
    """The properties of a PUBLISH property list (without its length prefix); ValueError if
    it is not a well-formed one (truncated, an identifier a PUBLISH cannot carry, not UTF-8)."""
    users: list[tuple[str, str]] = []
    fields: dict[str, str] = {}
    correlation: bytes | None = None
    pos, size = 0, len(raw)
    try:
        while pos < size:
            pid, pos = raw[pos], pos + 1
            if pid == _USER:
                name, pos = _utf8(raw, pos)
                value, pos = _utf8(raw, pos)
                users.append((name, value))
            elif pid in _STRINGS:
                text, pos = _utf8(raw, pos)
                fields.setdefault(_STRINGS[pid], text)
            elif pid == _CORRELATION:
                data, pos = _binary(raw, pos)
                fields.setdefault(CORRELATION_DATA, base64.b64encode(data).decode())
                correlation = data if correlation is None else correlation
            elif pid in _FIXED:
                end = pos + _FIXED[pid]
                if end > size:
                    raise ValueError("a value runs past the end of the properties")
                if pid in _BYTE:
                    fields.setdefault(PAYLOAD_FORMAT, FORMATS.get(raw[pos], str(raw[pos])))
                pos = end
            elif pid == _SUBSCRIPTION_IDENTIFIER:
                pos = _skip_varint(raw, pos)
            else:
                raise ValueError(f"{pid:#04x} is not a property of a PUBLISH")
    except IndexError:
        raise ValueError("a value runs past the end of the properties") from None
    ordered = tuple((name, fields[name]) for name in FIELDS if name in fields)
    return Decoded(tuple(users), ordered, fields.get(RESPONSE_TOPIC), correlation)


def encode(
    *,
    payload_format: int | None = None,
    content_type: str | None = None,
    response_topic: str | None = None,
    correlation_data: bytes | None = None,
    user_properties: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """A PUBLISH property list (without its length prefix) of what is given, in identifier
    order (MQTT 5.0 §2.2.2.2, §3.3.2.3); None and () leave one out. ValueError if a value
    cannot be carried (a Payload Format other than 0 or 1, U+0000, over 65,535 bytes)."""
    out = bytearray()
    if payload_format is not None:
        if payload_format not in FORMATS:
            raise ValueError(f"a Payload Format Indicator is 0 or 1, not {payload_format}")
        out += bytes((_PAYLOAD_FORMAT_ID, payload_format))
    if content_type is not None:
        out += _CONTENT_TYPE_ID.to_bytes(1, "big") + _utf8_bytes(content_type)
    if response_topic is not None:
        out += _RESPONSE_TOPIC_ID.to_bytes(1, "big") + _utf8_bytes(response_topic)
    if correlation_data is not None:
        out += _CORRELATION.to_bytes(1, "big") + _binary_bytes(correlation_data)
    for name, value in user_properties:
        out += _USER.to_bytes(1, "big") + _utf8_bytes(name) + _utf8_bytes(value)
    return bytes(out)


def _utf8_bytes(text: str) -> bytes:
    """A UTF-8 Encoded String (§1.5.4): no U+0000 (MQTT-1.5.4-2); UnicodeEncodeError, a
    ValueError, for a lone surrogate."""
    if "\0" in text:
        raise ValueError("MQTT cannot carry U+0000")
    return _binary_bytes(text.encode())


def _binary_bytes(data: bytes) -> bytes:
    """Binary Data (§1.5.6): two bytes of length, then the bytes."""
    if len(data) > _STRING_MAX:
        raise ValueError(f"{len(data)} bytes, over MQTT's {_STRING_MAX}")
    return len(data).to_bytes(2, "big") + data


def _utf8(raw: bytes, pos: int) -> tuple[str, int]:
    data, end = _binary(raw, pos)
    return data.decode(), end  # UnicodeDecodeError is a ValueError


def _binary(raw: bytes, pos: int) -> tuple[bytes, int]:
    start = pos + 2
    end = start + (raw[pos] << 8 | raw[pos + 1])
    if end > len(raw):
        raise ValueError("a value runs past the end of the properties")
    return raw[start:end], end


def _skip_varint(raw: bytes, pos: int) -> int:
    for _ in range(4):
        pos += 1
        if not raw[pos - 1] & 0x80:
            return pos
    raise ValueError("a Variable Byte Integer longer than 4 bytes")


def unpack(text: str) -> bytes:
    """The bytes of `V5_PROPERTIES` (URL-safe base64 without padding); ValueError if it is
    not that."""
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except binascii.Error as error:
        raise ValueError(str(error)) from None


def shown(own: Mapping[str, PropertyValue], decoded: Decoded | None) -> dict[str, PropertyValue]:
    """The properties a reader sees: the name's own (`own`, without the reserved ones), then
    the MQTT fields, then the User Properties; the first of a name wins, `bx_*` never shows."""
    if decoded is None:
        return dict(own)
    seen = dict(own)
    for name, value in (*decoded.fields, *decoded.user_properties):
        if name not in seen and not name.startswith(RESERVED_PREFIX):
            seen[name] = value
    return seen


def properties_shown(reader: V5Reader | None, envelope: Envelope) -> dict[str, PropertyValue]:
    """`reader.properties(envelope)`; without a reader, the name's own properties."""
    return envelope.user_properties() if reader is None else reader.properties(envelope)


def reply_to_shown(reader: V5Reader | None, envelope: Envelope) -> str | None:
    """`reader.reply_to(envelope)`; without a reader, the name's own reply-to."""
    return envelope.reply_to if reader is None else reader.reply_to(envelope)


def correlation_id_shown(reader: V5Reader | None, envelope: Envelope) -> str | None:
    """`reader.correlation_id(envelope)`; without a reader, the name's own correlation id."""
    return envelope.correlation_id if reader is None else reader.correlation_id(envelope)


class V5Reader:
    """Decodes the v5 properties of a root's messages for readers; shared by threads."""

    def __init__(self, side_files: SideFiles | None) -> None:
        self._side_files = side_files
        # One decode per blob while it is remembered: a reader asks one message for its
        # properties, its reply-to and its correlation id, and a producer repeats its
        # properties; a bad blob is so logged once, not at every read.
        self._inline = functools.lru_cache(maxsize=_REMEMBERED)(self._decode_inline)
        self._in_file = functools.lru_cache(maxsize=_REMEMBERED)(self._decode_file)

    def properties(self, envelope: Envelope) -> dict[str, PropertyValue]:
        """What `Message.properties` shows: see the module's docstring."""
        decoded = self.decoded(envelope)
        if decoded is not None and (envelope.reply_to, envelope.correlation_id) != (None, None):
            decoded = _without_fields_of(envelope, decoded)
        return shown(envelope.user_properties(), decoded)

    def reply_to(self, envelope: Envelope) -> str | None:
        """What `Message.reply_to` shows: the name's own, else the Response Topic it goes to
        MQTT v5 subscribers with (its v5 properties', else its `mqtt.response-topic`)."""
        if envelope.reply_to is not None:
            return envelope.reply_to
        decoded = self.decoded(envelope)
        if decoded is not None:
            return decoded.response_topic
        own = envelope.property_value(RESPONSE_TOPIC)
        return own if isinstance(own, str) else None

    def correlation_id(self, envelope: Envelope) -> str | None:
        """What `Message.correlation_id` shows: the name's own, else the Correlation Data it
        goes to MQTT v5 subscribers with (its v5 properties', else its
        `mqtt.correlation-data`), as text (`correlation_text`)."""
        if envelope.correlation_id is not None:
            return envelope.correlation_id
        decoded = self.decoded(envelope)
        data = None if decoded is None else decoded.correlation_data
        if decoded is None and isinstance(own := envelope.property_value(CORRELATION_DATA), str):
            with contextlib.suppress(ValueError):
                data = correlation_bytes(own)
        return None if data is None else correlation_text(data)

    def decoded(self, envelope: Envelope) -> Decoded | None:
        """The message's v5 properties; None if it has none, or none that can be read."""
        inline = envelope.property_value(V5_PROPERTIES)
        if isinstance(inline, str):
            return self._inline(inline)
        key = envelope.property_value(PROPERTIES_FILE)
        if not isinstance(key, str) or self._side_files is None:
            return None
        raw = self._side_files.get(key)  # None: missing, logged once by SideFiles
        if raw is None:
            return None
        # A large one is decoded at each read, not remembered (1024 of 1 MiB were 2 GB held).
        return (
            self._decode_file(key, raw)
            if len(raw) > _LARGEST_REMEMBERED
            else self._in_file(key, raw)
        )

    def _decode_inline(self, text: str) -> Decoded | None:
        try:
            return decode(unpack(text))
        except ValueError as error:
            _warn(f"{V5_PROPERTIES} {text!r}", error)
            return None

    def _decode_file(self, key: str, raw: bytes) -> Decoded | None:
        try:
            return decode(raw)
        except ValueError as error:
            _warn(f"side file {key!r}", error)
            return None


def _without_fields_of(envelope: Envelope, decoded: Decoded) -> Decoded:
    """`decoded` less the Response Topic and Correlation Data that are the name's own reply-to
    and correlation id: only a message whose properties spilled to a side file has both a
    field 5 or 6 and v5 properties (the MQTT door writes neither field), and its side file
    holds them as what a v5 subscriber gets (client/spill.py), made from those fields alone.
    Shown as `mqtt.*` properties too, they were properties it did not have before it spilled
    (docs/file-format.md, "Properties too long for the name")."""
    own = {
        name
        for name, field in (
            (RESPONSE_TOPIC, envelope.reply_to),
            (CORRELATION_DATA, envelope.correlation_id),
        )
        if field is not None
    }
    fields = tuple((name, value) for name, value in decoded.fields if name not in own)
    return replace(decoded, fields=fields)


def _warn(what: str, error: ValueError) -> None:
    log.warning(
        "%s holds no MQTT v5 properties boxmq can read (%s): its messages show none "
        "to readers that are not MQTT",
        what,
        error,
    )
