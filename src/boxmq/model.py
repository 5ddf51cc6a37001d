"""Values shared by every layer: message metadata, property types, ids.

The metadata of a message is its DropboxMQ *envelope*: the eight fields that the file name
encodes (see docs/file-format.md). The body is the file's content and is never part of it.
boxmq's own bookkeeping (delivery count, last holder, not-before time) travels as ordinary
properties whose names start with RESERVED_PREFIX, so DropboxMQ still reads the files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NewType, TypeVar, cast

from boxmq.errors import InvalidArgument, InvalidName
from boxmq.java_floats import double_text, fits_float32, float_text

__all__ = [
    "DEFAULT_PRIORITY",
    "GROUP_KEY",
    "RESERVED_PREFIX",
    "ConsumerId",
    "Envelope",
    "MessageClass",
    "MessageId",
    "Property",
    "PropertyType",
    "PropertyValue",
    "cheap_init",
    "check_given",
    "check_reply_to",
    "property_text",
    "refuse_reserved",
    "reserved_name",
    "timestamp_of",
]

MessageId = NewType("MessageId", str)
ConsumerId = NewType("ConsumerId", str)
PropertyValue = bool | int | float | str

DEFAULT_PRIORITY = 4  # JMS Message.DEFAULT_PRIORITY, DropboxMQ's default
RESERVED_PREFIX = (
    "bx_"  # properties boxmq writes for itself; '.' would clash with the field separator
)


def reserved_name(name: str) -> str:
    """What a put says of a property `name` in boxmq's own `bx_*`: what to do, too."""
    return (
        f"property name {name!r} starts with {RESERVED_PREFIX}, which boxmq keeps for its own "
        "properties: give it another name"
    )


def refuse_reserved(properties: object) -> None:
    """InvalidName, saying what to do, for a producer's property named in boxmq's `bx_*`: a
    `bx_nb` held every copy back until it says (epoch ms: the year 5138 for 99999999999999),
    a `bx_dc` or `bx_why` was read as boxmq's delivery count or dead reason. Every public
    put and publish calls it; a door passes boxmq's own (`bx_v5`, `bx_rp`) around it. A
    `properties` that is no mapping is left to `check_given` and `properties_from`."""
    if properties is None:  # most puts and publishes: no ABC check (check_given's reason)
        return
    if type(properties) is dict or isinstance(properties, Mapping):
        for name in properties:
            if isinstance(name, str) and name.startswith(RESERVED_PREFIX):
                raise InvalidName(reserved_name(name))


# The message group of a message, set by its producer as an ordinary property (JMS's name for
# it, as in ActiveMQ and Artemis): the key that `hash-by-key` dispatch keeps on one consumer.
GROUP_KEY = "JMSXGroupID"

# Reserved property names (without their type letter).
DELIVERY_COUNT = RESERVED_PREFIX + "dc"  # deliveries that ended without an ack
LAST_HOLDER = RESERVED_PREFIX + "last"  # the consumer that held it last (unlock goes to the *next*)
NOT_BEFORE = RESERVED_PREFIX + "nb"  # epoch ms before which it is not delivered (delayed unlock)
DEAD_REASON = RESERVED_PREFIX + "why"  # why it went to error/
TOPIC = RESERVED_PREFIX + "topic"  # the topic it was published to (subscriptions only)
QOS = RESERVED_PREFIX + "qos"  # the QoS it is delivered at (min of published and granted)
RETAINED = RESERVED_PREFIX + "retain"  # sent because it was retained, on a new subscription
PUBLISHED_RETAINED = RESERVED_PREFIX + "rp"  # published with RETAIN set (Retain As Published)
SOURCE = RESERVED_PREFIX + "src"  # exactly-once: who sent it
SOURCE_MESSAGE_ID = RESERVED_PREFIX + "mid"  # exactly-once: the sender's id for it
# The MQTT door's exactly-once senders are named this prefix and the client's consumer name
# (mqtt/stored.py), so that they never meet another door's in the intake; the name alone is
# the publisher No Local compares with a subscriber (client/assured.py, core/router.py).
MQTT_SOURCE_PREFIX = "mqtt:"
# The key of the side file (store/side_files.py) that holds the MQTT v5 properties too long
# for the name. Here, not in mqtt/, because the store's collection looks for it in names.
PROPERTIES_FILE = RESERVED_PREFIX + "v5h"
# An MQTT v5 message's properties, in its name: URL-safe base64 of their wire bytes, without
# padding (mqtt/stored.py writes it; store/v5_properties.py decodes it for other readers).
V5_PROPERTIES = RESERVED_PREFIX + "v5"


_T = TypeVar("_T")


def cheap_init(cls: type[_T]) -> type[_T]:
    """A frozen slots dataclass made at the cost of a plain one: for the values made once per
    message (an envelope, a ready entry, a lease, an effect, a message, a move).

    The `__init__` @dataclass generates for a frozen class sets each field with
    `object.__setattr__(self, name, value)`, a call that checks the type's setattr chain: about
    twice the cost of the object itself. Every way to store into a slot of a class that refuses
    `__setattr__` is such a call (a slot descriptor's `__set__` is the cheapest, ~700
    instructions a field). So the object is made instead as an instance of a plain twin class
    with the same slots, whose fields are stored as a plain object's are, and then given its
    class (`__class__` assignment: one check that the layouts are the same): a `__new__` that
    does this, and `object.__init__`. Nothing else changes: fields, defaults, equality,
    hashing, `replace`, pickling (through `__getnewargs__`, since `__new__` takes the fields)
    and the refusal to change a field afterwards are the dataclass's own. An envelope costs
    half as much to make again (docs/benchmarks.md).

    Only for classes whose fields are all plain positional-or-keyword parameters with plain
    defaults (no default_factory, kw_only, init=False or __post_init__): anything else is
    refused at import."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: cheap_init is for frozen slots dataclasses")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: cheap_init does not run __post_init__")
    fields = dataclasses.fields(cast(Any, cls))
    for each in fields:
        if not each.init or each.kw_only or each.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{each.name}: cheap_init takes plain fields only")
    names = [each.name for each in fields]
    twin = type(f"{cls.__name__}Fields", (), {"__slots__": cls.__dict__["__slots__"]})
    twin.__module__ = cls.__module__
    probe = twin()
    probe.__class__ = cls  # TypeError now, at import, if the layouts ever differ
    stores = "".join(f"    self.{name} = {name}\n" for name in names)
    values = "".join(f"self.{name}, " for name in names)
    source = (
        f"def __new__(cls, {', '.join(names)}):\n    self = _twin()\n{stores}"
        "    self.__class__ = cls\n    return self\n"
        f"def __getnewargs__(self):\n    return ({values})\n"
    )
    made: dict[str, Any] = {}
    exec(source, {"_twin": twin}, made)  # the text is made of field names only
    new, getnewargs = made["__new__"], made["__getnewargs__"]
    new.__defaults__ = cast(Any, cls).__init__.__defaults__
    for function in (new, getnewargs):
        function.__qualname__ = f"{cls.__qualname__}.{function.__name__}"
        function.__module__ = cls.__module__
    setattr(cls, "__new__", staticmethod(new))  # noqa: B010 - mypy refuses assigning to a method
    setattr(cls, "__init__", object.__init__)  # noqa: B010
    setattr(cls, "__getnewargs__", getnewargs)  # noqa: B010
    return cls


class MessageClass(Enum):
    """DropboxMQ field 3: the JMS message class."""

    MESSAGE = "M"
    BYTES = "B"
    STREAM = "S"
    MAP = "P"
    OBJECT = "O"
    TEXT = "T"

    # Members are singletons, so identity is their equality. Enum's own __hash__ is Python
    # code, and a class or a property type is a cache key for each name encoded.
    __hash__ = object.__hash__


class PropertyType(Enum):
    """The type letter that ends a DropboxMQ property name."""

    BOOLEAN = "B"
    BYTE = "Y"
    SHORT = "H"
    INT = "I"
    LONG = "L"
    FLOAT = "F"
    DOUBLE = "D"
    STRING = "S"

    __hash__ = object.__hash__  # as MessageClass's


@cheap_init
@dataclass(frozen=True, slots=True)
class Property:
    name: str
    type: PropertyType
    value: PropertyValue


@cheap_init
@dataclass(frozen=True, slots=True)
class Envelope:
    """Everything about a message except its body: the eight DropboxMQ file-name fields."""

    message_id: MessageId
    priority: int = DEFAULT_PRIORITY
    message_class: MessageClass = MessageClass.BYTES
    expiration: int = 0  # epoch milliseconds; 0 = never
    correlation_id: str | None = None
    reply_to: str | None = None
    type: str | None = None
    properties: tuple[Property, ...] = field(default=())

    def property_value(self, name: str) -> PropertyValue | None:
        for prop in self.properties:
            if prop.name == name:
                return prop.value
        return None

    def user_properties(self) -> dict[str, PropertyValue]:
        """The properties a producer set, without boxmq's reserved ones."""
        return {p.name: p.value for p in self.properties if not p.name.startswith(RESERVED_PREFIX)}

    def with_property(self, name: str, kind: PropertyType, value: PropertyValue) -> Envelope:
        return self.with_made_property(Property(name, kind, value))

    def with_made_property(self, prop: Property) -> Envelope:
        """`with_property` for a property made once and shared (a copy's QoS, one per copy
        published): a property of its name is looked for before a tuple is made without it."""
        properties, name = self.properties, prop.name
        for each in properties:
            if each.name == name:
                properties = tuple(p for p in properties if p.name != name)
                break
        return self._with_properties((*properties, prop))

    def without_property(self, name: str) -> Envelope:
        return self._with_properties(tuple(p for p in self.properties if p.name != name))

    def _with_properties(self, properties: tuple[Property, ...]) -> Envelope:
        # Not dataclasses.replace, which looks up the fields on every call: this is done for
        # each copy of each message published.
        return Envelope(
            self.message_id,
            self.priority,
            self.message_class,
            self.expiration,
            self.correlation_id,
            self.reply_to,
            self.type,
            properties,
        )

    @property
    def delivery_count(self) -> int:
        return _count(self.property_value(DELIVERY_COUNT))

    @property
    def last_holder(self) -> ConsumerId | None:
        return _holder(self.property_value(LAST_HOLDER))

    @property
    def not_before(self) -> float:
        """Epoch seconds before which the message is not handed out (0 = now)."""
        return _not_before(self.property_value(NOT_BEFORE))

    @property
    def topic(self) -> str | None:
        return _text(self.property_value(TOPIC))

    @property
    def group_key(self) -> str | None:
        """The key `hash-by-key` dispatch routes on: the producer's GROUP_KEY property, else the
        topic a subscription's copy was published to; None (the core uses the message id)."""
        return _group_key(self.property_value(GROUP_KEY), self.property_value(TOPIC))

    def dispatch_fields(self) -> tuple[float, int, ConsumerId | None, str | None]:
        """(not_before, delivery_count, last_holder, group_key), as the properties of those
        names say, in one look at the properties instead of one each (a subscription's copy
        carries some: its Ready is made from them)."""
        first: dict[str, PropertyValue] = {}
        for prop in self.properties:
            first.setdefault(prop.name, prop.value)  # property_value's answer: the first
        get = first.get
        return (
            _not_before(get(NOT_BEFORE)),
            _count(get(DELIVERY_COUNT)),
            _holder(get(LAST_HOLDER)),
            _group_key(get(GROUP_KEY), get(TOPIC)),
        )

    @property
    def timestamp(self) -> int | None:
        return timestamp_of(self.message_id)

    def expired(self, now: float) -> bool:
        return self.expiration > 0 and self.expiration <= now * 1000


def _count(value: PropertyValue | None) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _holder(value: PropertyValue | None) -> ConsumerId | None:
    return ConsumerId(value) if isinstance(value, str) else None


def _not_before(value: PropertyValue | None) -> float:
    return value / 1000 if isinstance(value, int) and not isinstance(value, bool) else 0.0


def _text(value: PropertyValue | None) -> str | None:
    return value if isinstance(value, str) else None


def _group_key(group: PropertyValue | None, topic: PropertyValue | None) -> str | None:
    if group is not None:
        return group if isinstance(group, str) else str(group)
    return _text(topic)


_DROPBOXMQ_ID = re.compile(r"(\d{16})-\d+")


def timestamp_of(message_id: str) -> int | None:
    """Epoch ms a DropboxMQ-made id carries (it encodes the JMS timestamp, times 1000).

    The shape is `_DROPBOXMQ_ID`'s, checked with str methods (half the regex's cost, once per
    message offered): `\\d` is a Unicode decimal digit, what `isdecimal` accepts."""
    if (
        len(message_id) > 17
        and message_id[16] == "-"
        and message_id[:16].isdecimal()
        and message_id[17:].isdecimal()
    ):
        return int(message_id[:16]) // 1000
    return None


def property_text(value: PropertyValue) -> str:
    """A property value as text, in Java's spelling (`true`, `3`, `0.5`, `1.0E20`, `NaN`):
    the Spark source's `properties` map, and the User Property value an MQTT v5 subscriber
    gets for a property of a message that was not published over MQTT v5."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return double_text(value)
    return str(value)


def typed(value: PropertyValue) -> PropertyType:
    """The property type a Python value is stored as when the caller does not say."""
    if isinstance(value, bool):
        return PropertyType.BOOLEAN
    if isinstance(value, int):
        return PropertyType.LONG if not -(2**31) <= value < 2**31 else PropertyType.INT
    if isinstance(value, float):
        return PropertyType.DOUBLE
    return PropertyType.STRING


def properties_from(values: Mapping[str, PropertyValue | Property]) -> tuple[Property, ...]:
    """Properties from plain values (typed by `typed`) or from `Property` (kept as typed).
    InvalidArgument (InvalidName for a name) naming the property if a name is not a
    non-empty str or a `Property`'s type is not a PropertyType: a producer is told what to
    fix, not an AttributeError from deep in the encoder."""
    return tuple(_property(name, value) for name, value in values.items())


def _property(name: object, value: PropertyValue | Property) -> Property:
    if not isinstance(name, str):
        raise InvalidName(f"property name {name!r}: a name is a str, not {type(name).__name__}")
    if not name:
        raise InvalidName("a property name is empty")
    if not isinstance(value, Property):
        if not isinstance(value, str | int | float):  # bool is an int
            # Typed STRING by `typed`, it was refused as "of type STRING: ... is not a str".
            raise InvalidArgument(
                f"property {name!r} = {value!r}: a value is a str, int, float, bool or "
                f"boxmq.Property, not {type(value).__name__}"
            )
        return Property(name, typed(value), value)
    if not isinstance(value.type, PropertyType):
        raise InvalidArgument(
            f"property {name!r}: its type {value.type!r} is not a boxmq.PropertyType "
            "(a member such as PropertyType.STRING, not its letter)"
        )
    given = value.value
    if value.type in _FLOATS and type(given) is int:
        # Widened as the name writes it ("300.0", as Java does): kept an int, it reached a
        # consumer of this process as 300 and one of another as 300.0. A bool is refused,
        # and an int past any double too, by the encoder (store/names.py).
        with contextlib.suppress(OverflowError):
            given = float(given)
    if value.type is PropertyType.FLOAT and type(given) is float and fits_float32(given):
        # The value the name holds, Float.toString's as Java writes it (0.123456789 is
        # 0.12345679, 68268928.0 is 6.826893E7): a consumer of this process is handed what
        # one of another process reads. One past a Java float is refused by the encoder.
        given = float(float_text(given))
    return Property(name, value.type, given)


_FLOATS = frozenset({PropertyType.FLOAT, PropertyType.DOUBLE})


def check_given(
    properties: object, correlation_id: object, reply_to: object, kind: object = None
) -> None:
    """InvalidArgument, saying what to give, for a producer's `properties` that are not a
    mapping or a `correlation_id`, `reply_to` or `type` (`kind`) that is not a str: each came
    out of the name encoder's regex or `dict()` as a TypeError that named neither. The
    common case (a dict, strs or None) is one test of each, no ABC check: 240 ns a call
    with one (`isinstance(x, Mapping)`) for every put and publish with properties."""
    if (
        (properties is None or type(properties) is dict)
        and (correlation_id is None or type(correlation_id) is str)
        and (reply_to is None or (type(reply_to) is str and not _wildcard(reply_to)))
        and (kind is None or type(kind) is str)
    ):
        return
    if properties is not None and not isinstance(properties, Mapping):
        raise InvalidArgument(
            f"properties map names to values (a dict), not {type(properties).__name__}: "
            f"{properties!r}"
        )
    for what, value in (("correlation_id", correlation_id), ("reply_to", reply_to), ("type", kind)):
        if value is not None and not isinstance(value, str):
            hint = ""
            if what == "correlation_id" and isinstance(value, bytes | bytearray | memoryview):
                hint = " (bytes go in properties={'mqtt.correlation-data': base64 text})"
            raise InvalidArgument(f"{what} is a str or None, not {type(value).__name__}{hint}")
    if isinstance(reply_to, str):
        try:
            check_reply_to(reply_to)
        except InvalidArgument as error:  # which argument: the CLI's parser says --reply-to
            raise InvalidArgument(f"reply_to {error}") from None


def _wildcard(text: str) -> bool:
    return "+" in text or "#" in text


def check_reply_to(reply_to: str) -> None:
    """InvalidArgument for a reply-to holding `+` or `#`: a wildcard makes a topic filter,
    which no one publishes to (a publish to one is refused), so such a request could never
    be answered, and MQTT v5 subscribers were sent it without its Response Topic (left out,
    logged). `put`, `publish` and `boxmq put/publish --reply-to` all refuse it here."""
    if _wildcard(reply_to):
        raise InvalidArgument(
            f"{reply_to!r} holds a wildcard ('+' or '#'), which makes a topic filter: a reply "
            "goes to one queue or topic, named without them (as the property "
            "mqtt.response-topic is)"
        )
