"""A producer's properties too long for a file name, kept in a side file as MQTT v5 properties.

A message put, published or stored exactly-once by the Python API or the CLI, or written by
Spark's sink (spark/messages.py), carries its properties in its name, where a put has 135
bytes (docs/file-format.md, "The 255-byte limit"). Where they do not fit, they
are kept as the MQTT door keeps a long v5 property list: as PUBLISH property bytes in a side
file (store/side_files.py), whose key the name carries in `PROPERTIES_FILE`. The bytes are
what the MQTT door sends a v5 subscriber for the message as it was (mqtt/stored.py,
`_built`): each property other than the `mqtt.*` ones as a User Property, its value as text,
in name order; each `mqtt.*` one (client/mqtt_fields.py) as the v5 property it names; the
reply-to and correlation id as Response Topic and Correlation Data, which win over
`mqtt.response-topic` and `mqtt.correlation-data`. So a v5 subscriber gets what it got
before, and the other readers (store/v5_properties.py) show what they showed before.

Invariants:
- A name that fits pays nothing here: callers try it first and come here on MetadataTooLong.
- Only the producer's own properties move, and as a last try its reply-to and correlation id
  (the name's fields 5 and 6), which the bytes carry as Response Topic and Correlation Data
  already: readers show those as the message's reply-to and correlation id, as they do an
  MQTT v5 request's (store/v5_properties.py), and a DropboxMQ-style reader of the name sees
  none. They stay while a name with them fits, and where MQTT cannot carry them (a reply-to
  with U+0000). boxmq's `bx_*` stay in the name, and a message that carries v5 properties
  already (the MQTT door's: `bx_v5`, `bx_v5h`) is its door's business.
- Stay in the name as they were: the message's group (GROUP_KEY, which dispatch reads from the
  name; in the bytes too, as the MQTT door keeps it), and a property MQTT cannot carry (U+0000,
  over 65,535 bytes, an `mqtt.*` value with no meaning), which no v5 subscriber got before
  either. Properties that are not strings (int, bool, float) stay too where they fit beside the
  key, so readers see them typed (the name's own win over the side file's text): as many as
  fit, the shortest first; those that do not are in the side file only, and readers see them
  as the text a v5 subscriber gets.
- The side file is written once a name that names it fits, and before the message file that
  names it: the commit's flush then covers it too (store/side_files.py). A message whose own
  file is then refused (a full disk) withdraws it: it was named by nothing until the hourly
  collection.
- What still does not fit raises MetadataTooLong: the error of the smallest name tried (the
  topic and the type stay in the name), saying that the properties went to a side file
  first, whose key takes room in the name too: a producer sees why shortening the fields the
  error names helps, and the long properties do not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TypeVar

from boxmq.client import mqtt_fields
from boxmq.client.copies import carries_v5
from boxmq.core.topics import validate_topic
from boxmq.errors import InvalidArgument, InvalidTopic, MetadataTooLong
from boxmq.model import (
    GROUP_KEY,
    PROPERTIES_FILE,
    RESERVED_PREFIX,
    Envelope,
    Property,
    PropertyType,
    property_text,
)
from boxmq.store import v5_properties
from boxmq.store.side_files import Placed, SideFiles, key_of

__all__ = ["place_door_file", "spilled", "v5_bytes", "withdraw"]

_T = TypeVar("_T")


def place_door_file(side_files: SideFiles | None, data: bytes) -> Placed:
    """Write the side file of a door's message's v5 properties (`SideFiles.place`), which a
    name or a retained message's header names; InvalidArgument on a box that keeps none."""
    if side_files is None:  # a door's message, on a box without side files
        raise InvalidArgument("this box keeps no side files for the properties named")
    return side_files.place(data)


def withdraw(side_files: SideFiles | None, placed: Placed | None) -> None:
    """Delete a side file `spilled` or `place_door_file` made for a message that failed,
    unless another message's put found or replaced it (`SideFiles.withdraw`)."""
    if placed is not None and side_files is not None:
        side_files.withdraw(placed)


def spilled(
    envelope: Envelope,
    side_files: SideFiles | None,
    name_of: Callable[[Envelope], _T],
    refused: MetadataTooLong,
    *,
    write: bool = True,
) -> tuple[Envelope, _T, Placed | None]:
    """`envelope`, whose name `name_of` refused with `refused`, with its properties in a side
    file instead, its name, and the side file written (for `SideFiles.withdraw` if the
    message's own file fails; None with write=False): first with its typed properties still
    in the name, then with fewer of them, down to none, then all that again with its reply-to
    and correlation id left to the side file too (`_tries`). `refused` again if nothing can
    move; the smallest name's error if even that does not fit. write=False: a publication no
    subscription gets a copy of, refused as one that a subscription gets would be, and no side
    file written (no file would name it, and it stayed until the sweep collected it)."""
    if side_files is None:
        raise refused
    if not _movable(envelope):
        raise _naming_uncarried(envelope, refused) from None
    raw = v5_bytes(envelope)
    named = Property(PROPERTIES_FILE, PropertyType.STRING, key_of(raw))
    tried: list[Envelope] = []
    for keep_fields, typed in _tries(envelope):
        kept = tuple(p for p in envelope.properties if _stays(p, keep_typed=p in typed))
        reply_to, correlation_id = _fields_kept(envelope, keep_fields=keep_fields)
        candidate = dataclasses.replace(
            envelope,
            properties=(*kept, named),
            reply_to=reply_to,
            correlation_id=correlation_id,
        )
        left = (len(kept), reply_to, correlation_id)
        if left == (len(envelope.properties), envelope.reply_to, envelope.correlation_id):
            continue  # nothing would leave the name
        if candidate in tried:
            continue  # no more than at an earlier try
        tried.append(candidate)
        try:
            name = name_of(candidate)
        except MetadataTooLong as error:
            refused = error
            continue
        return candidate, name, side_files.place(raw) if write else None
    raise _naming_uncarried(
        envelope,
        MetadataTooLong(
            "the properties are too long for a file name, and with them in a side file, what"
            f" stays in the name with the side file's key is still too long: {refused}"
        ),
    ) from None


def _naming_uncarried(envelope: Envelope, refused: MetadataTooLong) -> MetadataTooLong:
    """`refused`, naming the first producer's property that stayed in the name because MQTT
    cannot carry it in a side file (over 65,535 bytes, a U+0000): the docs promise a side file
    for properties too long for the name, and "shorten the properties" alone left a producer
    wondering why a 100 kB value did not go there when a 1 kB one did."""
    for prop in envelope.properties:
        if prop.name.startswith(RESERVED_PREFIX) or prop.name == GROUP_KEY:
            continue
        why = mqtt_fields.not_carried(prop.name) or mqtt_fields.not_carried(
            property_text(prop.value)
        )
        if why is not None:
            return MetadataTooLong(
                f"{refused}; property {prop.name!r} cannot go to a side file, which holds MQTT"
                f" v5 properties ({why}), so it stays in the name: put large values in the body"
            )
    return refused


def _tries(envelope: Envelope) -> Iterator[tuple[bool, frozenset[Property]]]:
    """What stays in the name at each try: whether the reply-to and correlation id do, and
    which typed properties. A DropboxMQ-style reader of the name keeps its JMSReplyTo and
    JMSCorrelationID while a name with them fits; only then do they go where an MQTT v5
    client's go (the side file). The typed properties go one at a time, the longest first, so
    that those that fit stay typed (a `False` left to the side file reads back as "false",
    which Python takes for true)."""
    typed = [
        p
        for p in envelope.properties
        if _stays(p, keep_typed=True) and not _stays(p, keep_typed=False)
    ]
    typed.sort(key=lambda p: len(p.name) + len(property_text(p.value)))
    for keep_fields in (True, False):
        for count in range(len(typed), -1, -1):
            yield keep_fields, frozenset(typed[:count])


def _fields_kept(envelope: Envelope, *, keep_fields: bool) -> tuple[str | None, str | None]:
    """The reply-to and correlation id that stay in the name: both with `keep_fields`, else
    each that its side file cannot carry (`v5_bytes` has the others as Response Topic and
    Correlation Data, which readers show as the message's: store/v5_properties.py)."""
    reply_to, correlation_id = envelope.reply_to, envelope.correlation_id
    if keep_fields:
        return reply_to, correlation_id
    return (
        reply_to if not reply_to or _response_topic(reply_to) is None else None,
        correlation_id if not correlation_id or _correlation_data(correlation_id) is None else None,
    )


def v5_bytes(envelope: Envelope) -> bytes:
    """The PUBLISH property list a v5 subscriber gets for `envelope`, a message stored without
    v5 properties (as mqtt/stored.py builds it), less what MQTT cannot carry."""
    users: list[tuple[str, str]] = []
    values: dict[str, str | bytes | int] = {}
    for prop in envelope.properties:
        carried = _carried(prop)
        if carried is None:
            continue
        if prop.name in mqtt_fields.FIELDS:
            values[prop.name] = carried
        else:
            users.append((prop.name, property_text(prop.value)))
    wanted = mqtt_fields.Requested.of(values)
    reply_to, correlation_id = envelope.reply_to, envelope.correlation_id
    return v5_properties.encode(
        payload_format=wanted.payload_format,
        content_type=wanted.content_type,
        response_topic=_response_topic(reply_to) if reply_to else wanted.response_topic,
        correlation_data=(
            _correlation_data(correlation_id) if correlation_id else wanted.correlation_data
        ),
        user_properties=tuple(users),
    )


def _carried(prop: Property) -> str | bytes | int | None:
    """What `prop` goes to a v5 subscriber as (its text, or the `mqtt.*` value it names);
    None for one of boxmq's own, or one MQTT cannot carry."""
    if prop.name.startswith(RESERVED_PREFIX):
        return None
    text = property_text(prop.value)
    if mqtt_fields.not_carried(prop.name) or mqtt_fields.not_carried(text):
        return None
    if prop.name not in mqtt_fields.FIELDS:
        return text
    try:
        return mqtt_fields.requested(prop.name, prop.value)
    except InvalidArgument:
        return None


def _movable(envelope: Envelope) -> bool:
    """Whether some property of `envelope`, or its reply-to or correlation id, could leave its
    name for a side file."""
    if carries_v5(envelope):
        return False
    if _fields_kept(envelope, keep_fields=False) != (envelope.reply_to, envelope.correlation_id):
        return True
    return any(not _stays(p, keep_typed=False) for p in envelope.properties)


def _stays(prop: Property, *, keep_typed: bool) -> bool:
    """Whether `prop` stays in the name of a message whose properties go to a side file."""
    if prop.name == GROUP_KEY or _carried(prop) is None:
        return True
    return keep_typed and prop.type is not PropertyType.STRING


def _response_topic(reply_to: str) -> str | None:
    """A reply-to as a Response Topic, as mqtt/stored.py sends it: None if it is no topic name
    (left out of what a v5 subscriber gets, as it was before)."""
    try:
        return validate_topic(reply_to)
    except InvalidTopic:
        return None


def _correlation_data(correlation_id: str) -> bytes | None:
    """A correlation id as Correlation Data, its UTF-8 bytes, as mqtt/stored.py sends it (a
    name's limit keeps it far below MQTT's 65,535 bytes)."""
    try:
        return correlation_id.encode()
    except UnicodeEncodeError:
        return None
