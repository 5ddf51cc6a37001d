"""A published message's copy for one subscription: its envelope at the subscription's QoS,
its file names at each QoS, the QoS a caller asks for, and a retained file's envelope. Shared
by the publish path (client/publishing.py), the subscriptions (client/topics.py) and the
subscriber that caps what it hands out (client/subscriber.py)."""

from __future__ import annotations

from collections.abc import Iterable

from boxmq.client.lifecycle import PUT_NAME_LIMIT
from boxmq.core import QoS
from boxmq.errors import InvalidArgument, MetadataTooLong
from boxmq.model import (
    PROPERTIES_FILE,
    PUBLISHED_RETAINED,
    QOS,
    TOPIC,
    V5_PROPERTIES,
    Envelope,
    Property,
    PropertyType,
)
from boxmq.store.names import decode_lenient, encode
from boxmq.store.retained import Retained
from boxmq.store.side_files import NAMED_AS

__all__ = [
    "LEVELS",
    "as_published_retained",
    "at_qos",
    "carries_v5",
    "copy_names",
    "names_side_file",
    "published_retained",
    "qos_level",
    "replaced_topic",
    "retained_envelope",
    "sent_retained_envelope",
]


def retained_envelope(retained: Retained) -> Envelope:
    """A retained message's metadata, from its name, with the topic its file is named for:
    one written by hand with no `bx_topicS` in its name (or another) went to subscribers
    with none, and over MQTT as a PUBLISH to an empty topic."""
    envelope, _ = decode_lenient(retained.name)
    if envelope.topic == retained.topic:
        return envelope
    return envelope.with_property(TOPIC, PropertyType.STRING, retained.topic)


def sent_retained_envelope(retained: Retained) -> Envelope:
    """`retained_envelope`, naming also the side file of v5 properties that the file's header
    names where its name had no room for the key (a long topic): for a subscriber it is sent
    to from the file. A copy written into a dropbox has no more room in its name: it goes
    without them (`retained_envelope`)."""
    envelope = retained_envelope(retained)
    named = retained.properties_file
    if named is None or not named.startswith(NAMED_AS):
        return envelope
    if carries_v5(envelope):
        return envelope  # its name's own win: a header edited by hand changes nothing
    key = named.removeprefix(NAMED_AS)
    return envelope.with_property(PROPERTIES_FILE, PropertyType.STRING, key)


def carries_v5(envelope: Envelope) -> bool:
    """Whether `envelope`'s name holds its MQTT v5 properties, or the key of their side file."""
    return any(p.name in (V5_PROPERTIES, PROPERTIES_FILE) for p in envelope.properties)


def names_side_file(envelope: Envelope) -> bool:
    """Whether `envelope`'s name holds the key of a side file of MQTT v5 properties."""
    return any(p.name == PROPERTIES_FILE for p in envelope.properties)


def qos_level(value: object) -> QoS:
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1, 2):
        raise InvalidArgument(f"qos {value!r}: use 0 (at most once), 1 (at least once) or 2")
    return LEVELS[value]  # not QoS(value): Enum's lookup by value is Python code


LEVELS = tuple(QoS)  # by value: 0, 1, 2


def at_qos(envelope: Envelope, qos: QoS) -> Envelope:
    return envelope.with_made_property(_QOS_PROPERTIES[qos])


# A copy's QoS property, by level: made once, not per copy (a Property costs ~1.7 µs here).
_QOS_PROPERTIES = tuple(Property(QOS, PropertyType.BYTE, int(level)) for level in LEVELS)


def copy_names(envelope: Envelope, levels: Iterable[QoS]) -> dict[QoS, str]:
    """The file name of `envelope` at each of `levels`; MetadataTooLong if it leaves no room
    for what a dropbox appends (every level has the same length: a QoS is one digit).

    The first level is encoded and the others derived from its name: `at_qos` puts the QoS
    last among the properties, the name's last field, so the names differ in their last
    character alone (an encoding is ~25,000 instructions, and a fan-out asks for up to three
    levels per message; tests/unit/test_copy_names.py holds the two ways equal)."""
    names: dict[QoS, str] = {}
    stem = ""
    for level in levels:
        if stem:
            names[level] = stem + _DIGITS[level]
            continue
        try:
            name = encode(at_qos(envelope, level), limit=PUT_NAME_LIMIT)
        except MetadataTooLong as error:
            raise MetadataTooLong(f"{_too_long(envelope)}: {error}") from None
        names[level] = name
        stem = name[:-1]  # never empty: a name has three fields at least
    return names


_DIGITS = tuple(str(int(level)) for level in LEVELS)  # how a QoS property's value is written


def _too_long(envelope: Envelope) -> str:
    """What to shorten of a copy's name: its properties only if its publisher gave some (an
    XMPP publisher never does, nor a publish with none: told of properties, it had none)."""
    if all(p.name in _EVERY_COPYS for p in envelope.properties):
        return "use a shorter topic"
    return "use a shorter topic or fewer properties"


# The properties boxmq names every copy with, whatever its publisher gave.
_EVERY_COPYS = frozenset({TOPIC, QOS, PUBLISHED_RETAINED})


def published_retained(envelope: Envelope) -> bool:
    """Whether a message was published retained (an exactly-once file keeps the flag in
    its name from its PUBLISH to its PUBREL)."""
    return envelope.property_value(PUBLISHED_RETAINED) is True


def replaced_topic(envelope: Envelope, superseded: bool) -> str | None:
    """The topic whose retained message a restart that finishes the exactly-once `deliver`
    of the message named `envelope` replaces (`Topics.send_files`): None if none."""
    if superseded or not published_retained(envelope):
        return None
    return envelope.topic


def as_published_retained(envelope: Envelope) -> Envelope:
    """`envelope` flagged as published retained, as `published_retained` reads it."""
    return envelope.with_made_property(_PUBLISHED_RETAINED)


_PUBLISHED_RETAINED = Property(PUBLISHED_RETAINED, PropertyType.BOOLEAN, True)
