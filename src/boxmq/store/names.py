"""The file-name codec: a message's Envelope <-> its DropboxMQ file name, plus lock suffixes.

A message file is named `priority.messageId.class.expiration.correlationId.replyTo.type.properties`
(DropboxMQ "Message Filenames"); `properties` is `name<T>=value` pairs joined by '&', T being
the PropertyType letter. Invariants:

- Every piece of text (field, property name, property value) is `quote(text, safe="")` with
  '.' and '~' also percent-encoded, so an encoded piece holds only [A-Za-z0-9_-] and %XX: never
  '.', '&', '=', '@', '/', ':', '#', '~' or NUL. The separators '.', '&', '=' and the lock mark
  '@' are therefore unambiguous, and every name encode() makes is plain ASCII.
- encode() writes priority, id and class always, drops trailing empty fields, and never returns
  more than MAX_NAME bytes, so a lock suffix (at most LOCK_RESERVE bytes) still fits NAME_LIMIT.
- decode(encode(e)) == e, except that an empty correlation id, reply-to or type is written like
  None and so reads back as None (NaN properties read back as NaN, which is != NaN).
- decode() is strict (MalformedName, nothing else); decode_lenient() never raises and, like
  DropboxMQ, takes a name it cannot read as the id of a message with default metadata.
- One piece is read whatever it holds: a property name or value whose escapes are not UTF-8
  (a script's bytes) decodes with surrogate escapes (PEP 383, as os.listdir() gives such
  bytes), so one bad property never costs a message its topic or its other metadata, and
  encode(..., as_read=True) writes those bytes back as they were (a release, a dead letter).
  A plain encode() refuses them, and every lone surrogate: what a producer puts is UTF-8.
- A lock suffix is `@owner@deadline_ms@token`; split_lock() reads it from the right, so the name
  before it may contain '@' (a file dropped in by a shell script).
- escape_segment() turns any destination name into exactly one directory name that is never
  '.', '..' or hidden, and unescape_segment() reverses it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from boxmq.errors import InvalidArgument, InvalidName, MalformedName, MetadataTooLong
from boxmq.java_floats import double_text, fits_float32, float_text, parse_float32
from boxmq.model import (
    DEFAULT_PRIORITY,
    TOPIC,
    ConsumerId,
    Envelope,
    MessageClass,
    MessageId,
    Property,
    PropertyType,
    PropertyValue,
)

__all__ = [
    "GET_TOKEN",
    "LOCK_RESERVE",
    "MAX_NAME",
    "MAX_OWNER",
    "NAME_LIMIT",
    "PLAIN_ID",
    "Lock",
    "check_consumer_name",
    "check_priority",
    "decode",
    "decode_lenient",
    "distinct_name",
    "encode",
    "escape_segment",
    "folder_segment",
    "lock_suffixed",
    "locked_name",
    "may_carry_id",
    "plain_name",
    "split_lock",
    "unescape_segment",
]

NAME_LIMIT = 255  # bytes, the usual file-system limit (ext4, xfs, btrfs, NTFS in UTF-16 units)
LOCK_RESERVE = 88  # '@' + MAX_OWNER + '@' + 15-digit deadline + '@' + 30-char token
MAX_NAME = NAME_LIMIT - LOCK_RESERVE  # the longest name encode() may produce
MAX_OWNER = 40  # longest encoded consumer name in a lock suffix

_FIELDS = (
    *("priority", "message id", "class", "expiration"),
    *("correlation id", "reply-to", "type", "properties"),
)
_REQUIRED = 3  # DropboxMQ needs priority, id and class to read a name at all
_MAX_DEADLINE = 10**15 - 1  # 15 digits: epoch ms until the year 33658, and it fits LOCK_RESERVE
_TOKEN = re.compile(r"[A-Za-z0-9-]{0,30}")
_ENCODED = re.compile(r"(?:[A-Za-z0-9_-]|%[0-9A-F]{2})+")  # what _quote() can produce
_PLAIN = re.compile(r"[A-Za-z0-9_-]*")  # what quote() keeps as it is, less '.' and '~'
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SURROGATE = re.compile("[\ud800-\udfff]")  # PEP 383
# Digit counts are capped so int() never meets Python's 4300-digit limit on hostile names.
# A '+' is read as DropboxMQ's Integer.parseInt and Long.parseLong read it (`+4` is 4).
_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,5})?")
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_SPECIAL_FLOATS |= {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}  # Python's spelling
_JAVA_SPECIAL = re.compile(r"([+-]?)(NaN|Infinity)")
# _DECIMAL with an exponent of any number of digits (1e999999, 1e0000003), as Java reads it.
_JAVA_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Java's hexadecimal floating-point literal: 0x1.8p1 is 3.0; the binary exponent is required.
_JAVA_HEX = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+")
_JAVA_SUFFIXES = ("f", "F", "d", "D")
_JAVA_BLANKS = "".join(map(chr, range(33)))  # what Double.parseDouble trims (String.trim)
_BITS = {PropertyType.BYTE: 8, PropertyType.SHORT: 16, PropertyType.INT: 32, PropertyType.LONG: 64}
_INT32 = (-(2**31), 2**31 - 1)
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Lock:
    """Who holds a message in processing/, until when, and for which process."""

    owner: ConsumerId  # the consumer holding it
    deadline_ms: int  # epoch ms when the lock times out
    token: str  # process token [A-Za-z0-9-]{0,30}: "" = no process bound, lives until deadline


# The token of a lock `get` took (Queue.get, `boxmq get`): bound to no process, as "", but
# never taken over by a consumer that outlives its process (a persistent MQTT session, a kept
# subscribe run: LiveQueue.attach adopts the "" locks under its name), so that a member
# joining a share group under get's consumer name is not sent what get's user holds. No
# process token looks like it (they are `<host>-<pid>-<start>`): the sweeps leave it to its
# deadline, as a lock of another machine's process.
GET_TOKEN = "get"


# --- text pieces ---------------------------------------------------------------------------


def _quote(text: str, errors: str = "strict") -> str:
    if _PLAIN.fullmatch(text):  # the common case (ids, numbers, plain words): nothing to escape
        return text
    # quote() leaves '.' and '~' alone; '.' is our field separator and '~' marks backup files.
    try:
        encoded = quote(text, safe="", errors=errors)
    except UnicodeEncodeError:
        raise InvalidName(f"{text!r} is not valid Unicode (it has a lone surrogate)") from None
    return encoded.replace(".", "%2E").replace("~", "%7E")


def _unquote(text: str, what: str, errors: str = "strict") -> str:
    if "%" not in text:  # the common case: nothing escaped
        return text
    # unquote() would keep a stray '%' as it is; reading it would make a name no encoder wrote.
    if _BAD_ESCAPE.search(text):
        raise MalformedName(f"{what} has a '%' that is not a %XX escape")
    try:
        return unquote(text, errors=errors)
    except UnicodeDecodeError:
        raise MalformedName(f"{what} has percent escapes that are not UTF-8") from None


def _parse_int(text: str, bounds: tuple[int, int], what: str) -> int:
    value = int(text) if _INTEGER.fullmatch(text) else _java_integer(text)
    if value is None or not bounds[0] <= value <= bounds[1]:
        raise MalformedName(f"{what} {text!r} is not an integer in [{bounds[0]}, {bounds[1]}]")
    return value


def _java_integer(text: str) -> int | None:
    """`text` as DropboxMQ's Long.parseLong reads it, unbounded; None if it reads none. Its
    Character.digit takes any script's decimal digits (Unicode's Nd, as str.isdecimal), and
    any number of leading zeros, but reads UTF-16: a digit outside the BMP is no digit."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits.isdecimal() or max(digits) > "\uffff":
        return None
    try:
        value = int(digits)  # Python's int() reads the same digits
    except ValueError:  # past Python's 4300-digit limit: no file name is that long
        return None
    return -value if text[0] == "-" else value


# --- property values -----------------------------------------------------------------------


def _int_bounds(kind: PropertyType) -> tuple[int, int]:
    half = 2 ** (_BITS[kind] - 1)
    return -half, half - 1


def _value_text(prop: Property) -> str:
    value, kind = prop.value, prop.type
    bad = f"property {prop.name!r} of type {kind.name}: {value!r}"
    if kind is PropertyType.BOOLEAN:
        if not isinstance(value, bool):
            raise InvalidArgument(f"{bad} is not a bool")
        return "true" if value else "false"
    if kind is PropertyType.STRING:
        if not isinstance(value, str):
            raise InvalidArgument(f"{bad} is not a str")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{bad} is not a number")
    if kind in _BITS:
        low, high = _int_bounds(kind)
        if not isinstance(value, int) or not low <= value <= high:
            raise InvalidArgument(f"{bad} is not an int in [{low}, {high}]")
        return str(value)
    # Java's spelling (`1.0E20`, not `1e+20`), so that DropboxMQ reads the value back.
    number = _as_float(value, kind, bad)
    return float_text(number) if kind is PropertyType.FLOAT else double_text(number)


def _as_float(value: int | float, kind: PropertyType, bad: str) -> float:
    # An int is accepted where a float is expected, as Java widens it; a huge one cannot be.
    try:
        number = float(value)
    except OverflowError:
        raise InvalidArgument(f"{bad} does not fit a double") from None
    if kind is PropertyType.FLOAT and math.isfinite(number) and not fits_float32(number):
        raise InvalidArgument(f"{bad} does not fit a Java float")
    return number


def _parse_value(text: str, kind: PropertyType, what: str) -> PropertyValue:
    if kind is PropertyType.STRING:
        return text
    if kind is PropertyType.BOOLEAN:
        # As DropboxMQ's Boolean.valueOf reads it: any text but "true" (in any case) is false.
        # Refused, it cost the message its priority and every property (its topic).
        return text.lower() == "true"
    if kind in _BITS:
        return _parse_int(text, _int_bounds(kind), what)
    if text in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[text]
    if _DECIMAL.fullmatch(text):
        if kind is PropertyType.FLOAT:
            # What DropboxMQ's Float.parseFloat reads, as boxmq hands out the floats it
            # writes: the nearest Java float (an infinity past the largest), so that a
            # script's `0.123456789` or `3.5E38` keeps its value when a redelivery writes the
            # name again.
            return float(float_text(parse_float32(text)))
        return float(text)
    if kind is PropertyType.DOUBLE and (number := _java_double(text)) is not None:
        return number
    raise MalformedName(f"{what} {text!r} is not a number")


def _java_double(text: str) -> float | None:
    """`text` as DropboxMQ's Double.parseDouble reads it where _DECIMAL does not; None if
    Java reads no number either."""
    text = text.strip(_JAVA_BLANKS)
    if special := _JAVA_SPECIAL.fullmatch(text):  # a sign before NaN is read and dropped
        return math.nan if special[2] == "NaN" else float(f"{special[1]}inf")
    if text[-1:] in _JAVA_SUFFIXES:  # a Java literal's type: 1.5f, 2d
        text = text[:-1]
    if _JAVA_DECIMAL.fullmatch(text):
        return float(text)  # which, as Java, reads a huge exponent as infinity or zero
    if not _JAVA_HEX.fullmatch(text):
        return None
    try:
        return float.fromhex(text)  # rounded to nearest, ties to even, as Java rounds it
    except OverflowError:  # Java reads infinity
        return -math.inf if text[0] == "-" else math.inf


# --- properties field ----------------------------------------------------------------------


def _encode_property(prop: Property, errors: str) -> str:
    value = prop.value
    if type(value) in _ONE_TEXT:  # most properties repeat (a topic, a QoS): encoded once
        return _encoded_property(prop.name, prop.type, value, type(value) is bool, errors)
    return _property_text(prop, errors)


# Types whose equal values have one text. Not float: 0.0 == -0.0, and their texts differ.
_ONE_TEXT = frozenset({str, int, bool})
# How property text read from a name is decoded, and written back by encode(as_read=True).
_AS_READ = "surrogateescape"


@functools.lru_cache(maxsize=4096)
def _encoded_property(
    name: str, kind: PropertyType, value: PropertyValue, is_bool: bool, errors: str
) -> str:
    # is_bool is in the key so that True and 1, which are equal, stay apart: an INT property
    # given True and a BOOLEAN one given 1 must still be refused.
    return _property_text(Property(name, kind, value), errors)


def _property_text(prop: Property, errors: str) -> str:
    if not prop.name:
        raise InvalidName("a property name is empty")
    try:
        return f"{_quote(prop.name, errors)}{prop.type.value}={_quote(_value_text(prop), errors)}"
    except InvalidName:
        raise InvalidName(
            f"property {prop.name!r} = {prop.value!r}: not valid Unicode (a lone surrogate, "
            "U+D800-U+DFFF): it could never be read as UTF-8, nor sent over MQTT"
        ) from None


def _decode_property(pair: str) -> Property:
    raw_name, equals, raw_value = pair.partition("=")
    if not equals or len(raw_name) < 2:
        raise MalformedName(f"property {pair!r} is not name<type>=value")
    try:
        kind = PropertyType(raw_name[-1])
    except ValueError:
        raise MalformedName(f"property {pair!r} has no type letter") from None
    # Bytes that are not UTF-8 are kept as surrogate escapes: the rest of the name still reads.
    # '+' is a space, as URL encoding writes one (boxmq writes %20, and '+' as %2B).
    name = _unquote(raw_name[:-1].replace("+", " "), "a property name", _AS_READ)
    what = f"property {name!r}"
    value = _unquote(raw_value.replace("+", " "), what, _AS_READ)
    return Property(name, kind, _parse_value(value, kind, what))


@functools.lru_cache(maxsize=4096)  # most names repeat their properties (a topic, a QoS)
def _decode_properties(field: str) -> tuple[Property, ...]:
    return tuple(_decode_property(pair) for pair in field.split("&")) if field else ()


# --- names ---------------------------------------------------------------------------------


def check_priority(priority: object) -> int:
    """`priority` if it can be a name's first field (an int32); else InvalidArgument. A bool
    or a float is refused, not converted: str() would write `True` or `7.0`, a name no reader
    can decode, which then goes out with priority 4 and its whole name as its id."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidArgument(f"priority {priority!r} is not an int")
    if not _INT32[0] <= priority <= _INT32[1]:
        raise InvalidArgument(f"priority {priority} is outside -2^31..2^31-1")
    return priority


def _optional(text: str | None) -> str:
    return _quote(text) if text else ""


def _fields(envelope: Envelope, errors: str) -> list[str]:
    if not envelope.message_id:
        raise InvalidArgument("the message id is empty")
    check_priority(envelope.priority)
    if not 0 <= envelope.expiration <= _LONG_MAX:
        raise InvalidArgument(f"expiration {envelope.expiration} is not in [0, {_LONG_MAX}]")
    return [
        str(envelope.priority),
        _quote(envelope.message_id),
        envelope.message_class._value_,  # not `.value`: Enum's property is two Python calls
        str(envelope.expiration) if envelope.expiration else "",  # 0 = never = empty
        _optional(envelope.correlation_id),
        _optional(envelope.reply_to),
        _optional(envelope.type),
        "&".join(_encode_property(prop, errors) for prop in envelope.properties),
    ]


def _too_long(
    fields: list[str], size: int, limit: int, envelope: Envelope, errors: str
) -> MetadataTooLong:
    longest = max(range(len(fields)), key=lambda i: len(fields[i]))
    kept = f"{NAME_LIMIT} less {LOCK_RESERVE} kept for a lock suffix"
    if limit < MAX_NAME:
        kept += f" and {MAX_NAME - limit} for what a redelivery adds"
    if _FIELDS[longest] == "properties" and (topic := _topic_over(fields, limit, envelope, errors)):
        escaped, room = topic
        return MetadataTooLong(
            "the topic is too long for a stored message's file name: escaped, it takes "
            f"{escaped} bytes, and at most {room} fit in the {limit}-byte limit ({kept}) "
            "beside the message's other fields and properties; shorten the topic (a "
            "non-ASCII character takes 6 to 12 bytes once percent-encoded)"
        )
    return MetadataTooLong(
        f"the metadata encodes to a {size}-byte file name, over the {limit}-byte limit "
        f"({kept}); shorten the "
        f"{_FIELDS[longest]} ({len(fields[longest])} bytes encoded) or the other text fields "
        "(a non-ASCII character takes 6 to 12 bytes once percent-encoded)"
    )


def _topic_over(
    fields: list[str], limit: int, envelope: Envelope, errors: str
) -> tuple[int, int] | None:
    """(its escaped length, the most that fits beside the rest of the name as it is) of the
    topic of `envelope` when it is the longest of its properties, so what to shorten; None
    if it has none, or another property is longer, or the topic would not fit at any length
    beside the others (they are what to shorten then)."""
    texts = {p.name: _property_text(p, errors) for p in envelope.properties}
    if TOPIC not in texts or max(texts.values(), key=len) is not texts[TOPIC]:
        return None
    escaped = len(texts[TOPIC]) - len(texts[TOPIC].partition("=")[0]) - 1
    room = limit - (len(".".join(fields)) - escaped)
    return (escaped, room) if room > 0 else None


def encode(envelope: Envelope, *, as_read: bool = False, limit: int = MAX_NAME) -> str:
    """The file name for `envelope`; InvalidArgument or MetadataTooLong if it has none.

    `as_read`: `envelope` was decoded from a name (to be renamed: a release, a dead letter),
    and a property's bytes that were not UTF-8 are written back as they were. `limit`: the
    longest name the caller may write (a producer leaves room for what a redelivery adds),
    at most MAX_NAME; the error names it, so a producer is told its own limit at once."""
    errors = _AS_READ if as_read else "strict"
    fields = _fields(envelope, errors)
    while len(fields) > _REQUIRED and not fields[-1]:
        fields.pop()
    name = ".".join(fields)
    if len(name) > limit:  # the name is ASCII: characters are bytes
        raise _too_long(fields, len(name), limit, envelope, errors)
    return name


# An id that needs no escaping: what IdFactory makes, and most ids of other producers.
PLAIN_ID = re.compile(r"[A-Za-z0-9_-]+")


def plain_name(priority: int, message_id: str, message_class: MessageClass, expiration: int) -> str:
    """encode() of an envelope with only these fields, without building one (the put path).

    The caller guarantees what encode() would check: `message_id` matches PLAIN_ID, priority is
    an int32 and 0 <= expiration <= 2^63-1. Such a name is far below MAX_NAME.
    """
    letter = message_class._value_  # not `.value`: Enum's property is two Python calls
    if expiration:
        return f"{priority}.{message_id}.{letter}.{expiration}"
    return f"{priority}.{message_id}.{letter}"


# What a plain put writes: priority, an id with nothing escaped, the class. Most names are
# this; they skip the general path's split, seven unquotes and property parsing.
_CLASSES = {member.value: member for member in MessageClass}  # a dict: no Enum call per name
_SIMPLE = re.compile(rf"(-?[0-9]{{1,10}})\.({PLAIN_ID.pattern})\.([MBSPOT])")
# What a publish to a topic writes: the same, an optional expiration, three empty fields and
# properties in the alphabet the encoder writes them in (no '/', NUL, '.' or non-ASCII).
_WITH_PROPERTIES = re.compile(
    rf"{_SIMPLE.pattern}\.([1-9][0-9]{{0,18}})?\.\.\.\.([A-Za-z0-9_%&=-]+)"
)


def _decode(name: str) -> Envelope:
    simple = _SIMPLE.fullmatch(name)
    if simple is not None and _INT32[0] <= (priority := int(simple[1])) <= _INT32[1]:
        return Envelope(
            message_id=MessageId(simple[2]),
            priority=priority,
            message_class=_CLASSES[simple[3]],
        )
    published = _WITH_PROPERTIES.fullmatch(name)
    if (
        published is not None
        and _INT32[0] <= (priority := int(published[1])) <= _INT32[1]
        and (expiration := int(published[4] or 0)) <= _LONG_MAX
    ):
        return Envelope(
            message_id=MessageId(published[2]),
            priority=priority,
            message_class=_CLASSES[published[3]],
            expiration=expiration,
            properties=_decode_properties(published[5]),
        )
    return _decode_fields(name)


def _decode_fields(name: str) -> Envelope:
    """The general decoding of a name: every field split off, unquoted and checked."""
    if "/" in name or "\0" in name:
        raise MalformedName("a file name cannot contain '/' or NUL")
    if _SURROGATE.search(name):  # how os.listdir() hands over bytes that are not UTF-8
        raise MalformedName("the name is not valid UTF-8")
    # The properties take the rest of the name: URL encoding as DropboxMQ's Java writes it
    # (URLEncoder) leaves '.' alone, and a double's text always has one (`priceD=12.5`).
    fields = name.split(".", len(_FIELDS) - 1)
    if len(fields) < _REQUIRED:
        raise MalformedName(f"{len(fields)} '.'-separated fields, not 3 to 8")
    fields += [""] * (len(_FIELDS) - len(fields))
    text = [_unquote(raw, what) for raw, what in zip(fields[:7], _FIELDS[:7], strict=True)]
    if not text[1]:
        raise MalformedName("the message id is empty")
    return Envelope(
        message_id=MessageId(text[1]),
        priority=_parse_int(text[0], _INT32, "priority") if text[0] else DEFAULT_PRIORITY,
        message_class=_message_class(text[2]),
        expiration=_parse_int(text[3], (0, _LONG_MAX), "expiration") if text[3] else 0,
        correlation_id=text[4] or None,
        reply_to=text[5] or None,
        type=text[6] or None,
        properties=_decode_properties(fields[7]),
    )


def _message_class(text: str) -> MessageClass:
    try:
        return MessageClass(text) if text else MessageClass.BYTES
    except ValueError:
        raise MalformedName(f"class {text!r} is not one of M, B, S, P, O, T") from None


def decode(name: str) -> Envelope:
    """The envelope a file name encodes; MalformedName (with the reason) if it encodes none."""
    try:
        return _decode(name)
    except MalformedName as error:
        raise MalformedName(f"{name!r}: {error}") from None


def decode_lenient(name: str) -> tuple[Envelope, str | None]:
    """Never raises. A name that is not in the encoding becomes a message with default metadata
    whose id is the whole name (what DropboxMQ does); the second item is the reason it was not
    decodable, or None."""
    try:
        return _decode(name), None
    except MalformedName as error:
        return Envelope(MessageId(name)), str(error)


def may_carry_id(name: str, message_id: str) -> bool:
    """False if the file `name` is surely no name of the message `message_id`, told without
    decoding it (a look-up by id among 300,000 names decoded them all for seconds); True:
    decode it to know. Its id is in it as it is (a plain id, or a name decode_lenient takes
    whole), or escaped in its id field, which then holds a '%'."""
    if message_id in name:
        return True
    if "%" not in name:
        return False
    fields = name.split(".", 2)
    return len(fields) > 1 and "%" in fields[1]


def distinct_name(name: str, number: int) -> str:
    """A name for the message of file `name` that no other file of that name has, with the id
    `<id>~<number>`: a producer may reuse a name (unique in target/ when sent) that error/,
    expired/ or processed/ already holds, or that a message unlocked back into target/ has. The
    two are different messages, and a queue tells messages apart by id. The other metadata
    stays; a name not in the encoding (its id is the whole name) gains `~<number>`, as does
    one that has no room for it."""
    envelope, reason = decode_lenient(name)
    if reason is None:
        renamed = dataclasses.replace(
            envelope, message_id=MessageId(f"{envelope.message_id}~{number}")
        )
        try:
            return encode(renamed, as_read=True)
        except InvalidArgument:
            pass  # too long: told apart as a foreign name is
    return f"{name}~{number}"


# --- locks ---------------------------------------------------------------------------------


def check_consumer_name(name: str, what: str = "consumer name") -> ConsumerId:
    """`name` as a ConsumerId, or InvalidName if it cannot be written in a lock suffix.
    `what`: the name as the caller's user gave it ("subscriber name"), for the message."""
    if not isinstance(name, str):  # else a TypeError from `in`, or None called empty
        raise InvalidName(f"{what} {name!r} is not a str ({type(name).__name__})")
    if not name or "\0" in name or "/" in name:
        why = "is empty" if not name else "contains '/'" if "/" in name else "contains NUL"
        raise InvalidName(f"{what} {name!r} {why}: {_OWNER_RULE}")
    try:
        size = len(_quote(name))
    except InvalidName:
        raise InvalidName(
            f"{what} {name!r} is not valid Unicode (it has a lone surrogate): {_OWNER_RULE}"
        ) from None
    if size > MAX_OWNER:
        raise InvalidName(
            f"{what} {name!r} encodes to {size} bytes, over the {MAX_OWNER}-byte limit: "
            + _OWNER_RULE
        )
    return ConsumerId(name)


# What a refused consumer name is told it may be: it said what was wrong, not what to give.
_OWNER_RULE = (
    f"a name goes into the lock's file name, so give 1 to {MAX_OWNER} bytes once "
    "percent-encoded (A-Z a-z 0-9 - _ are 1 byte each, any other character 3 per UTF-8 "
    "byte), without '/' or NUL, such as 'worker-1'"
)


def locked_name(name: str, lock: Lock) -> str:
    """`name` with `lock` appended; the suffix is at most LOCK_RESERVE bytes."""
    return lock_suffixed(name, lock.owner, lock.deadline_ms, lock.token)


def lock_suffixed(name: str, owner: ConsumerId, deadline_ms: int, token: str) -> str:
    """`locked_name(name, Lock(owner, deadline_ms, token))` without making the Lock (a claim
    makes one name per message)."""
    if not 0 <= deadline_ms <= _MAX_DEADLINE:
        raise InvalidArgument(f"lock deadline {deadline_ms} is not in [0, {_MAX_DEADLINE}]")
    return f"{name}{_owner_part(owner, token)}{deadline_ms}@{token}"


@functools.lru_cache(maxsize=4096)
def _owner_part(owner: str, token: str) -> str:
    # A process locks for few consumers and one token: check and quote them once, not per claim.
    if not _TOKEN.fullmatch(token):
        raise InvalidName(f"lock token {token!r} is not [A-Za-z0-9-]{{0,30}}")
    return f"@{_quote(check_consumer_name(owner))}@"


def split_lock(name: str) -> tuple[str, Lock | None]:
    """The name before the lock suffix, and the lock; (name, None) if there is no valid suffix."""
    parts = name.rsplit("@", 3)
    if len(parts) != 4:
        return name, None
    base, owner, deadline, token = parts
    if not (base and _ENCODED.fullmatch(owner) and deadline.isascii() and deadline.isdigit()):
        return name, None
    if len(deadline) > len(str(_MAX_DEADLINE)) or not _TOKEN.fullmatch(token):
        return name, None
    if (consumer := _lock_owner(owner)) is None:
        return name, None  # not our suffix: e.g. a DropboxMQ consumer's file, or a shell script's
    return base, Lock(consumer, int(deadline), token)


@functools.lru_cache(maxsize=4096)
def _lock_owner(encoded: str) -> ConsumerId | None:
    """The consumer a lock suffix names, None if it names none. The locks of a folder name
    few consumers, and a sweep reads every lock in processing/ each second: each owner is
    decoded and checked once, not once per lock."""
    try:
        return check_consumer_name(_unquote(encoded, "owner"))
    except (MalformedName, InvalidName):
        return None


# --- destination directories ---------------------------------------------------------------


def folder_segment(text: str) -> str:
    """`text` as one folder name, however long: `escape_segment(text)` when that fits, else
    the first 200 bytes of it, `%h` and 32 hex digits of the SHA-256 of `text` (escaping puts a
    '%' only before two upper-case hex digits, so no text escaped whole takes such a name)."""
    try:
        return escape_segment(text)
    except InvalidName:
        if not text or "\0" in text:
            raise
    try:
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    except UnicodeEncodeError:
        raise InvalidName(f"destination name {text[:40]!r}... is not valid Unicode") from None
    segment = quote(text, safe="")[:200]
    if "%" in segment[-2:]:
        segment = segment[: segment.rindex("%")]  # no escape cut in two
    if segment.startswith("."):
        segment = "%2E" + segment[1:]
    return f"{segment}%h{digest}"


def escape_segment(text: str) -> str:
    """`text` (a destination name) as one directory name: never '.', '..', hidden, or with '/'."""
    if not isinstance(text, str):  # else a TypeError from `in`, or None called empty
        raise InvalidName(f"destination name {text!r} is not a str ({type(text).__name__})")
    if not text or "\0" in text:
        raise InvalidName(f"destination name {text!r} is empty or contains NUL")
    try:
        segment = quote(text, safe="")  # keeps [A-Za-z0-9_.~-]; ':' goes too, Hadoop rejects it
    except UnicodeEncodeError:
        raise InvalidName(f"destination name {text!r} is not valid Unicode") from None
    if segment.startswith("."):
        segment = "%2E" + segment[1:]  # so '.', '..' and hidden directories cannot be made
    if len(segment) > NAME_LIMIT:
        raise InvalidName(
            f"destination name {text[:40]!r}... encodes to {len(segment)} bytes, "
            f"over the {NAME_LIMIT}-byte file-name limit: give a shorter name (a character "
            "other than a letter, a digit, '_', '-', '.' or '~' takes 3 to 12 bytes once "
            "percent-encoded)"
        )
    return segment


def unescape_segment(segment: str) -> str:
    """The destination name a directory holds; InvalidName if it is not percent-encoded UTF-8."""
    try:
        return _unquote(segment, "directory name")
    except MalformedName as error:
        raise InvalidName(f"{segment!r}: {error}") from None
