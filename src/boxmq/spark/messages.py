"""Rows as messages: the columns a sink understands, and the envelope and body of one row.

Only `body` is required (binary, or string for a text message); the metadata columns the
source produces are optional and mean the same thing on the way out. Columns the source adds
that a producer cannot set (destination, timestamp, delivery_count; topic, written to a queue)
are ignored, so a stream read from boxmq can be written back as it is; any other column is an
error (a typo would otherwise drop data silently). Nothing here imports pyspark: the sink
describes its schema as (name, kind) pairs. Properties too long for a file name go to a side
file, as a put's do (client/spill.py): the one write here, done by the task that stages the row.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from boxmq.client import mqtt_fields
from boxmq.client.lifecycle import PUT_NAME_LIMIT
from boxmq.client.spill import spilled
from boxmq.client.topics import check_not_sys, check_topic_name
from boxmq.clock import SystemClock
from boxmq.errors import InvalidArgument, InvalidName, MetadataTooLong
from boxmq.ids import IdFactory
from boxmq.model import (
    RESERVED_PREFIX,
    TOPIC,
    Envelope,
    MessageClass,
    MessageId,
    Property,
    PropertyType,
    check_reply_to,
    reserved_name,
)
from boxmq.store.names import encode
from boxmq.store.side_files import Placed, SideFiles
from boxmq.store.v5_properties import (
    CORRELATION_DATA,
    RESPONSE_TOPIC,
    correlation_bytes,
    correlation_text,
)

__all__ = ["Instant", "Layout", "layout_of", "message_of", "topic_for_every_row"]

# The kinds the sink tells apart; anything else is "other".
BINARY, STRING, INTEGER, TIMESTAMP, TIMESTAMP_NTZ, STRING_MAP, OTHER = (
    "binary",
    "string",
    "integer",
    "timestamp",
    "timestamp_ntz",
    "map<string,string>",  # also a map of whole numbers, written as their text
    "other",
)
_WANTED = {
    "body": (BINARY, STRING),
    "message_id": (STRING,),
    "priority": (INTEGER,),
    "class": (STRING,),
    "expiration": (TIMESTAMP, TIMESTAMP_NTZ, INTEGER),
    "correlation_id": (STRING,),
    "reply_to": (STRING,),
    "type": (STRING,),
    "properties": (STRING_MAP,),
    "topic": (STRING,),
}
_IGNORED = frozenset({"destination", "timestamp", "delivery_count"})
_QOS_ROOM = len("&bx_qosY=2")  # what a topic's fan-out adds to each copy's name
_INT32 = 2**31
# An epoch in ms under this is before 1973-03-03, while an epoch in s is up to year 5138:
# a positive expiration under it was meant as seconds (taken as ms, it had passed long ago).
_SECONDS_BELOW = 10**11


class Instant(NamedTuple):
    """A TIMESTAMP as the sink takes it: epoch microseconds, Spark's own value. A datetime
    would end at year 9999, where Spark's timestamps go on (and boxmq's expirations too)."""

    micros: int


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each column a sink uses sits in a row; None when the row has no such column."""

    body: int
    text_body: bool
    message_id: int | None = None
    priority: int | None = None
    message_class: int | None = None
    expiration: int | None = None
    expiration_wall_clock: bool = False  # a TIMESTAMP_NTZ: read in the session's time zone
    correlation_id: int | None = None
    reply_to: int | None = None
    type: int | None = None
    properties: int | None = None
    topic: int | None = None


def layout_of(columns: Sequence[tuple[str, str]], *, to_queue: bool = False) -> Layout:
    """Check a sink's input columns ((name, kind) pairs) and say where each one is.

    `to_queue`: the `topic` column is not read, as `destination` is not. A topic is where a
    message was published, kept in a subscription's copies alone (model.TOPIC): a queue's
    message has none, as `put` gives none. Stored, it read back as the message's topic and
    was the group key of hash-by-key dispatch."""
    kinds = dict(columns)
    unknown = sorted(set(kinds) - set(_WANTED) - _IGNORED)
    if unknown:
        raise InvalidArgument(
            f"boxmq sink: unknown column(s) {', '.join(unknown)}; a message is made of "
            f"{', '.join(_WANTED)} (only body is required): select or rename the columns"
        )
    if "body" not in kinds:
        raise InvalidArgument(
            "boxmq sink: the rows need a 'body' column (binary, or string for text); e.g. "
            "df.selectExpr('to_json(struct(*)) AS body')"
        )
    for name, kind in kinds.items():
        wanted = _WANTED.get(name)
        if wanted is not None and kind not in wanted:
            raise InvalidArgument(
                f"boxmq sink: column {name!r} is {kind}; it must be {' or '.join(wanted)} "
                f"(cast it, e.g. col({name!r}).cast({wanted[0]!r}))"
            )
    index = {name: position for position, (name, _) in enumerate(columns)}
    return Layout(
        body=index["body"],
        text_body=kinds["body"] == STRING,
        message_id=index.get("message_id"),
        priority=index.get("priority"),
        message_class=index.get("class"),
        expiration=index.get("expiration"),
        expiration_wall_clock=kinds.get("expiration") == TIMESTAMP_NTZ,
        correlation_id=index.get("correlation_id"),
        reply_to=index.get("reply_to"),
        type=index.get("type"),
        properties=index.get("properties"),
        topic=None if to_queue else index.get("topic"),
    )


def _check_topic(topic: str) -> str:
    """A topic a message may be published to (MQTT 5.0 §4.7: no wildcards, not empty), and
    not a `$SYS` one, which a user's publish may not write (each `boxmq serve`'s own)."""
    if not topic or "\0" in topic or "+" in topic or "#" in topic:
        raise InvalidArgument(
            f"boxmq sink: topic {topic!r} is not a topic name: it must be non-empty, "
            "without NUL and without the wildcards '+' and '#'"
        )
    try:
        check_not_sys(topic)
    except InvalidArgument as error:
        raise type(error)(f"boxmq sink: {error}") from None
    if len(topic.encode()) > 65535:
        raise InvalidArgument("boxmq sink: a topic name is at most 65535 bytes of UTF-8")
    return topic


def topic_for_every_row(topic: str) -> str:
    """The sink's `topic` option, checked once when the writer is made: a topic name that the
    name of a message with nothing else (a new id, no metadata, no properties) holds beside
    its copies' QoS. Checked row by row, one that could never be sent failed every row, in
    the tasks, under a Java stack trace; its properties may go to a side file, not the topic.

    InvalidTopic or MetadataTooLong saying what to shorten or remove."""
    check_topic_name(topic)
    alone = Envelope(
        message_id=IdFactory(SystemClock()).new(),
        message_class=MessageClass.TEXT,
        properties=(Property(TOPIC, PropertyType.STRING, topic),),
    )
    encode(alone, limit=PUT_NAME_LIMIT - _QOS_ROOM)
    return topic


def message_of(
    row: Sequence[object],
    layout: Layout,
    ids: IdFactory,
    topic: str | None,
    side_files: SideFiles | None = None,
    session_zone: datetime.tzinfo | None = None,
) -> tuple[Envelope, bytes, Placed | None]:
    """The envelope and body of one row, and the side file written for it; `topic` (the
    sink's option) wins over the column. Properties too long for the name go to a file in
    `side_files` (written now: withdrawn by the caller if the message's file is refused);
    with None, such a row is refused. A TIMESTAMP_NTZ expiration is read in `session_zone` (Spark's
    session time zone), or in this process's local zone with None.

    InvalidArgument (naming the column) for a value that cannot be a message."""
    body = _body(row[layout.body])
    message_class = MessageClass.TEXT if layout.text_body else MessageClass.BYTES
    if (text := _text(row, layout.message_class, "class")) is not None:
        try:
            message_class = MessageClass(text)
        except ValueError:
            raise InvalidArgument(
                f"boxmq sink: class {text!r}; use one of M, B, S, P, O, T"
            ) from None
    message_id = _text(row, layout.message_id, "message_id")
    properties = _properties(row, layout.properties, message_id)
    if topic is None and layout.topic is not None:
        topic = _text(row, layout.topic, "topic")
    if topic is not None:
        properties = (Property(TOPIC, PropertyType.STRING, _check_topic(topic)), *properties)
    envelope = Envelope(
        message_id=MessageId(message_id) if message_id else ids.new(),
        priority=_priority(row, layout.priority),
        message_class=message_class,
        expiration=_expiration(
            row, layout.expiration, session_zone if layout.expiration_wall_clock else None
        ),
        correlation_id=_text(row, layout.correlation_id, "correlation_id"),
        reply_to=_reply_to(row, layout.reply_to, message_id),
        type=_text(row, layout.type, "type"),
        properties=properties,
    )
    envelope = _without_v5_echoes(envelope)
    fitted, placed = _fitted(envelope, topic is not None, side_files)
    return fitted, body, placed


def _without_v5_echoes(envelope: Envelope) -> Envelope:
    """`envelope` less a correlation id and reply-to that only show what its `mqtt.*`
    properties carry (a row read from an MQTT v5 request shows its Correlation Data and
    Response Topic in both places): the properties keep the exact bytes, where the name's
    correlation id, which wins for v5 subscribers, is the base64 text of binary data; and
    the name keeps its room (store/v5_properties.py: readers show the same columns)."""
    correlation = envelope.property_value(CORRELATION_DATA)
    response = envelope.property_value(RESPONSE_TOPIC)
    drop_correlation = False
    if isinstance(correlation, str) and envelope.correlation_id is not None:
        with contextlib.suppress(ValueError):  # not base64: mqtt_fields refused it already
            shown = correlation_text(correlation_bytes(correlation))
            drop_correlation = shown == envelope.correlation_id
    drop_reply = isinstance(response, str) and response == envelope.reply_to
    if not (drop_correlation or drop_reply):
        return envelope
    return replace(
        envelope,
        correlation_id=None if drop_correlation else envelope.correlation_id,
        reply_to=None if drop_reply else envelope.reply_to,
    )


def _body(value: object) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise InvalidArgument("boxmq sink: a row has a null body; filter it out or give it b''")


def _text(row: Sequence[object], index: int | None, column: str) -> str | None:
    if index is None or row[index] is None:
        return None
    value = row[index]
    if not isinstance(value, str):
        raise InvalidArgument(f"boxmq sink: column {column!r} holds {value!r}, not a string")
    return value or None


def _priority(row: Sequence[object], index: int | None) -> int:
    value = 4 if index is None or row[index] is None else row[index]
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT32 <= value < _INT32:
        raise InvalidArgument(f"boxmq sink: priority {value!r} is not an int in -2^31..2^31-1")
    return value


def _expiration(
    row: Sequence[object], index: int | None, wall_clock_zone: datetime.tzinfo | None
) -> int:
    """Epoch ms, 0 for never: from an Instant or a datetime, or from epoch milliseconds.
    A naive timestamp is read in `wall_clock_zone`, else in this process's local zone.

    A time at or before the epoch has passed as any other: it is the first millisecond
    (expired at once), since 0, which it was clamped to, is what a name says for never.
    A number that can only be epoch seconds is refused: taken as ms, it expired at once."""
    value = None if index is None else row[index]
    if value is None:
        return 0
    if isinstance(value, Instant):
        return max(1, value.micros // 1000)
    if isinstance(value, datetime.datetime):
        # The sink hands a TIMESTAMP_NTZ over as its wall-clock time, which Spark reads in the
        # session's zone.
        if wall_clock_zone is not None:
            value = value.replace(tzinfo=wall_clock_zone)
        return max(1, int(value.timestamp() * 1000))
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 < value < _SECONDS_BELOW:
            raise InvalidArgument(
                f"boxmq sink: column 'expiration' holds {value}, which as epoch milliseconds "
                "(its unit) is before 1973 and would expire at once; it looks like epoch "
                "seconds: multiply it by 1000, or make it a timestamp "
                "(timestamp_seconds(expiration))"
            )
        return max(1, value)
    raise InvalidArgument(f"boxmq sink: expiration {value!r} is not a timestamp or epoch ms")


def _reply_to(row: Sequence[object], index: int | None, message_id: str | None) -> str | None:
    """The row's reply-to, refused with a wildcard as the API and `boxmq put` refuse it
    (model.check_reply_to): it was stored, a request no one could answer."""
    reply_to = _text(row, index, "reply_to")
    if reply_to is not None:
        try:
            check_reply_to(reply_to)
        except InvalidArgument as error:
            raise InvalidArgument(f"{_where('reply_to', message_id)}: {error}") from None
    return reply_to


def _where(column: str, message_id: str | None) -> str:
    """Which row and column a refusal is of: one row of millions fails the whole query.
    Worded only for a refusal, not for each of those rows."""
    return f"boxmq sink: column {column!r}" + (
        f" of message_id {message_id!r}" if message_id else ""
    )


def _properties(
    row: Sequence[object], index: int | None, message_id: str | None
) -> tuple[Property, ...]:
    value = None if index is None else row[index]
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{_where('properties', message_id)}: {value!r} is not a map")
    found = []
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            where = _where("properties", message_id)
            raise InvalidName(f"{where}: property name {key!r}: a name is a non-empty string")
        if key.startswith(RESERVED_PREFIX):  # the words of every put and publish
            raise InvalidName(f"{_where('properties', message_id)}: {reserved_name(key)}")
        if item is not None:
            found.append(Property(key, PropertyType.STRING, str(item)))
    try:
        mqtt_fields.check({prop.name: prop.value for prop in found})
    except InvalidArgument as error:
        raise InvalidArgument(f"{_where('properties', message_id)}: {error}") from None
    return tuple(found)


def _fitted(
    envelope: Envelope, fan_out: bool, side_files: SideFiles | None
) -> tuple[Envelope, Placed | None]:
    """`envelope` as a name holds it: as it is, or with its properties in a side file (and
    that file, as written)."""
    limit = PUT_NAME_LIMIT - (_QOS_ROOM if fan_out else 0)

    def name_of(candidate: Envelope) -> str:
        return encode(candidate, limit=limit)

    try:
        name_of(envelope)
        return envelope, None
    except MetadataTooLong as error:
        refused = error
    try:
        moved, _, placed = spilled(envelope, side_files, name_of, refused)
    except MetadataTooLong as error:
        raise MetadataTooLong(
            f"boxmq sink: message {envelope.message_id}: {error}, or move them into the body "
            "(docs/file-format.md)"
        ) from None
    return moved, placed
