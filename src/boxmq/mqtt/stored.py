"""MQTT messages and the files they become: names, properties, and the PUBLISH read back.

Invariants:
- A client id becomes a subscriber name that the store accepts ('%' and '/' escaped), and the
  same client id always becomes the same name (a session found again after a restart).
- The v5 properties of a stored message are kept as their wire bytes: in its name, URL-safe
  base64 without padding, in the reserved property V5_PROPERTIES when they are short; else in
  a side file (store/side_files.py) whose key the name carries in PROPERTIES_FILE. What is not
  forwarded (Topic Alias, Subscription Identifier) is never stored. A side file gone missing,
  or property bytes that are not a PUBLISH's well-formed list (a name edited by hand), cost
  their messages their properties (logged), never their delivery: they are checked as a
  PUBLISH from a client is before they go out, so no subscriber is sent what it must refuse.
  A retained message whose topic leaves no room even for the key names its side file in its
  file's header (`side_file_of`, written by Topics.publish), for the subscribers sent it from
  there; its copies in dropboxes go without.
- A PUBLISH read back carries what is left of its Message Expiry Interval (§3.3.2.3.3), at
  most MQTT's 2^32-1 seconds however far off the name's expiration is (a script's
  Long.MAX_VALUE), and none when the name has no expiration (a requeue dropped one that had
  passed), whatever the stored property bytes say; a QoS in a name that is not 0, 1 or 2 is
  read as 1, like one that is not an int; and a topic that is no topic name
  (`unsendable_topic`) is for the caller to set aside: nothing a name says can make a PUBLISH
  that cannot be encoded.
- A User Property named GROUP_KEY (`JMSXGroupID`) is also stored as that name property, the
  message's group for `hash-by-key` dispatch; a PUBLISH without one pays a bytes search.
- A message stored without v5 properties (put by the Python API, the CLI, Spark, a script)
  goes to v5 subscribers with its properties, not boxmq's `bx_*`, as User Properties, values
  as text, except its `mqtt.*` ones (client/mqtt_fields.py), which go as the v5 properties
  they name; and its reply-to and correlation id as Response Topic and Correlation Data (the
  id's UTF-8 bytes), which win over `mqtt.response-topic` and `mqtt.correlation-data`. What
  MQTT cannot carry (a reply-to that is no topic name, an id or a property in bytes that are
  not UTF-8 or with U+0000, an `mqtt.*` value with no meaning) is left out (logged once per
  message while cached), never the message. One with v5 properties goes with exactly those
  (its bytes, as they came): it pays none of this.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import logging
import math
import re
from collections.abc import Callable
from typing import Final, TypeVar

from boxmq.client import mqtt_fields
from boxmq.client.lifecycle import shown
from boxmq.client.message import Message, qos_of
from boxmq.client.publishing import Publication
from boxmq.core.durations import LONGEST
from boxmq.core.topics import validate_topic
from boxmq.errors import InvalidArgument, InvalidTopic, MalformedPacket, MetadataTooLong
from boxmq.model import (
    DELIVERY_COUNT,
    GROUP_KEY,
    MQTT_SOURCE_PREFIX,
    PROPERTIES_FILE,
    PUBLISHED_RETAINED,
    QOS,
    RESERVED_PREFIX,
    RETAINED,
    V5_PROPERTIES,
    Envelope,
    PropertyValue,
    property_text,
)
from boxmq.mqtt.framing import PacketType, encode_utf8
from boxmq.mqtt.packets import Publish, new_publish
from boxmq.mqtt.properties import (
    EMPTY,
    Properties,
    PropertyId,
    subscription_identifier,
    validated,
)
from boxmq.mqtt.session import SubscriptionOptions
from boxmq.store.names import check_consumer_name, escape_segment
from boxmq.store.side_files import SideFiles, key_of

__all__ = [
    "INLINE_MAX",
    "NOT_FORWARDED",
    "V5_PROPERTIES",
    "consumer_name",
    "exactly_once_identities",
    "exactly_once_source",
    "group_of",
    "kept_properties",
    "publication_of",
    "publish_of",
    "released_publish",
    "retained_publish",
    "side_file_of",
    "storable",
    "store_with_properties",
    "stored_expiry",
    "unsendable_topic",
]

log = logging.getLogger("boxmq.mqtt")

_T = TypeVar("_T")
NOT_FORWARDED: Final = (PropertyId.TOPIC_ALIAS, PropertyId.SUBSCRIPTION_IDENTIFIER)
# Base64 characters tried in a name before a side file: about what a name leaves them after a
# short topic (docs/file-format.md). Longer ones could never fit; shorter ones are tried, and
# go to a side file if the topic leaves them no room after all (`kept_properties(spill=True)`).
INLINE_MAX: Final = 60
_GROUP_KEY_BYTES: Final = encode_utf8(GROUP_KEY)  # as a User Property's name is on the wire
_USER_PROPERTY: Final = int(PropertyId.USER_PROPERTY)
_UNSET: Final = object()  # a property not (yet) found: `publish_of` keeps the first of a name
# MQTT 5.0 §3.3.2.3.3: a Message Expiry Interval is a Four Byte Integer. An expiration farther
# off than that (136 years) is capped, not left out: left out means "never expires", and a
# subscriber that stores the message or sends it on should still see that it does expire;
# capped, it can only expire earlier than asked, and no earlier than 136 years from now.
_EXPIRY_MAX: Final = 0xFFFF_FFFF


def stored_expiry(packet: Publish) -> float | None:
    """How long a copy of `packet` on disk lasts: its Message Expiry Interval (None without
    one), at most LONGEST. MQTT allows up to 2^32-1 seconds (136 years); the store keeps no
    deadline past 100 years (core/durations.py) and would refuse the message. Capped, it can
    only expire earlier than asked, and no earlier than 100 years from now; its copies from
    disk carry what is left of that, those from memory the interval as it came."""
    interval = packet.properties.message_expiry_interval
    return min(interval, LONGEST) if interval else None


@functools.lru_cache(maxsize=4096)  # once per PUBLISH stored: a connected client's, cached
def consumer_name(client_id: str) -> str:
    """A client id as a subscriber name on disk ('/' cannot be in one; '%' escapes), short
    enough for a lock suffix (MAX_OWNER bytes). A longer one (a `device-<uuid>`) is named by
    its first plain characters, `%h` and 16 hex digits of its SHA-256: no id escaped whole
    holds `%h` (its every '%' is a `%25` or a `%2F`), so no short id can take a long one's name."""
    escaped = client_id.replace("%", "%25").replace("/", "%2F")
    try:
        check_consumer_name(escaped)
    except InvalidArgument:
        return _shortened(client_id, escaped)
    return escaped


_SHORT_PREFIX = re.compile(r"[A-Za-z0-9_-]{0,20}")  # 20 + '%25h' + 16 = MAX_OWNER encoded


def _shortened(client_id: str, escaped: str) -> str:
    prefix = _SHORT_PREFIX.match(escaped)
    digest = hashlib.sha256(client_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{prefix[0] if prefix else ''}%h{digest}"


def storable(client_id: str) -> bool:
    """Whether the client id can name its session's record (a file: 255 bytes once escaped);
    else CONNACK 0x85 (v5), 0x02 (3.1.1)."""
    try:
        escape_segment(client_id)
        check_consumer_name(consumer_name(client_id))
    except InvalidArgument:
        return False
    return True


def exactly_once_source(client_id: str) -> str:
    """Who sends a QoS 2 message to the exactly-once intake: the MQTT client, as its
    `consumer_name` (a long id shortened, so that its messages' names keep room for the rest).
    Always the escaped name: a short id spelled like a long one's name (`x%h<hex>`) took the
    long one's intake, and could drop or release its messages."""
    return MQTT_SOURCE_PREFIX + consumer_name(client_id)


def exactly_once_identities(client_id: str) -> tuple[str, ...]:
    """The name `trusted_sources` lists the client by, `mqtt:<client id>` as the client gives
    its id (docs/configuration.md), when its source (`exactly_once_source`) is another: an id
    whose '/' or '%' its files escape, or one shortened to its hash. () when they are one."""
    listed = MQTT_SOURCE_PREFIX + client_id
    return () if listed == exactly_once_source(client_id) else (listed,)


def kept_properties(packet: Publish, *, spill: bool = False) -> dict[str, str]:
    """The envelope properties that carry a PUBLISH's v5 properties (none if it has none):
    the properties themselves when short, else (or with `spill`) the key of their side file.
    Never written here: the publish writes `side_file_of(packet, ...)` only where a file
    will name it, withdrawn if its own write fails (one written here for a message whose
    name then had no room, or whose write the disk refused, stayed named by nothing until
    the hourly collection)."""
    props = packet.properties.without(*NOT_FORWARDED)
    if not props:
        return {}
    packed = _pack(props)
    if len(packed) <= INLINE_MAX and not spill:
        return {V5_PROPERTIES: packed, **group_of(props)}
    return {PROPERTIES_FILE: key_of(props.raw), **group_of(props)}


def side_file_of(packet: Publish, properties: dict[str, str]) -> bytes | None:
    """The bytes of the side file of the PUBLISH's v5 properties, for the publish to write
    where a file will name it (Topics.publish): the names of its copies and of its retained
    message when `properties` (what its name holds: `kept_properties(packet, ...)`, or what
    `store_with_properties` tried last) hold the key; else, for a retained message whose
    name holds none of them (a topic that left no room even for the key), its file's header
    in `.retained/`. None if no file can name one."""
    if V5_PROPERTIES in properties:
        return None  # in the name itself
    if PROPERTIES_FILE not in properties and not packet.retain:
        return None  # its copies on disk go without: no room
    return packet.properties.without(*NOT_FORWARDED).raw or None


def group_of(props: Properties) -> dict[str, str]:
    """{GROUP_KEY: value} when a User Property names the message's group (the first such,
    non-empty), else {}. Only a list that holds the name's bytes is decoded."""
    if not props.mask >> _USER_PROPERTY & 1 or _GROUP_KEY_BYTES not in props.raw:
        return {}
    for name, value in props.user_properties:
        if name == GROUP_KEY:
            return {GROUP_KEY: value} if value else {}
    return {}


def store_with_properties(
    packet: Publish,
    store: Callable[[dict[str, str]], _T],
    room: Callable[[dict[str, str]], int],
) -> _T:
    """`store(properties)` with the PUBLISH's v5 properties in the name, or, where the topic
    leaves them too little room there, in a side file (written by `store`, as
    `kept_properties` says). Where even the side file's key does not fit beside the topic,
    the message is stored without them (and a warning logged, with the longest topic that
    `room(properties)` says `store` has room for beside the key): refusing it would keep it
    from every subscriber, the ones in memory too, who get it whole. The message's group
    (`group_of`) goes with the properties where it fits, else the properties go without it,
    else it goes alone (each time with a warning)."""
    properties = kept_properties(packet)
    try:
        return store(properties)
    except MetadataTooLong:
        if not properties:
            raise  # the topic alone is too long: nothing to leave out
    spilled = properties
    if V5_PROPERTIES in properties:
        spilled = kept_properties(packet, spill=True)
        with contextlib.suppress(MetadataTooLong):
            return store(spilled)
    # The longest topic that keeps them all, for the warning: in the name or in a side file,
    # whichever takes less (the side file's key alone was one byte short of the topic that
    # short properties in the name leave room for, and the warning said one byte too few).
    kept = max(room(properties), room(spilled))
    if GROUP_KEY in spilled:
        ungrouped = {k: v for k, v in spilled.items() if k != GROUP_KEY}
        with contextlib.suppress(MetadataTooLong):
            return _stored_without(store, ungrouped, packet.topic, f"its {GROUP_KEY}", kept)
        group = {GROUP_KEY: spilled[GROUP_KEY]}
        with contextlib.suppress(MetadataTooLong):
            return _stored_without(store, group, packet.topic, "its v5 properties", kept)
    return _stored_without(store, {}, packet.topic, "its v5 properties", kept)


def _stored_without(
    store: Callable[[dict[str, str]], _T],
    properties: dict[str, str],
    topic: str,
    what: str,
    kept: int,
) -> _T:
    """`store(properties)`, then a warning that the copies on disk go without `what`; `kept`
    is the longest topic that would have kept them."""
    stored = store(properties)
    log.warning(
        "%s: the topic leaves no room in a file name for %s: the copies on disk go without "
        "(a topic of at most %d bytes, each '/' counting 3, keeps them)",
        topic,
        what,
        kept,
    )
    return stored


def publication_of(client_id: str, packet: Publish) -> Publication:
    """A PUBLISH as one message of `Topics.publish_many`, which writes its side file, if
    any, where a copy names it (a batch refused withdraws it), before the commit whose
    flush covers it. Made on the loop as the packet arrives: nothing written here, where
    a refused write could be told to no one, and a file written for a batch the disk then
    refused stayed named by nothing until the hourly collection."""
    if not packet.properties.raw:  # every 3.1.1 PUBLISH, most v5 ones: nothing to keep
        return Publication(
            packet.topic, packet.payload, packet.qos, None, None, consumer_name(client_id)
        )
    properties = kept_properties(packet)
    return Publication(
        packet.topic,
        packet.payload,
        packet.qos,
        properties=properties or None,
        expires_in=stored_expiry(packet),
        source=consumer_name(client_id),
        side_file=side_file_of(packet, properties),
    )


def publish_of(
    message: Message, topic: str, options: SubscriptionOptions, now: float, side_files: SideFiles
) -> Publish:
    """The PUBLISH on `topic` for a message taken from a dropbox (DUP once it was delivered
    before, unless it goes at QoS 0). One look at the envelope's properties for all it needs
    (this runs for every message sent from disk): the same answers as the message's `qos`,
    `retained`, `published_retained` and `delivery_count` and `_properties_of`, each of which
    looks again (a Hypothesis test holds them equal)."""
    envelope = message.envelope
    qos: object = _UNSET
    retained = published = count = qos
    inline = key = None
    users: list[tuple[str, str]] = []
    for prop in envelope.properties:
        name = prop.name
        if not name.startswith(RESERVED_PREFIX):
            users.append((name, property_text(prop.value)))
        elif name == QOS:
            if qos is _UNSET:
                qos = prop.value
        elif name == V5_PROPERTIES:
            inline = prop.value
        elif name == PROPERTIES_FILE:
            key = prop.value
        elif name == DELIVERY_COUNT:
            if count is _UNSET:
                count = prop.value
        elif name == RETAINED:
            if retained is _UNSET:
                retained = prop.value
        elif name == PUBLISHED_RETAINED and published is _UNSET:
            published = prop.value
    props = _remaining_expiry(_properties(envelope, inline, key, users, side_files), envelope, now)
    if options.identifier:
        props = props + subscription_identifier(options.identifier)
    asked = qos_of(qos)
    sent = asked if asked < options.qos else options.qos
    return new_publish(
        topic,
        message.body,
        sent,
        retained is True or (options.retain_as_published and published is True),
        # DUP never on QoS 0 (MQTT-3.3.1-2), whatever deliveries the message had before.
        sent > 0 and isinstance(count, int) and not isinstance(count, bool) and count > 0,
        None,
        props,
    )


def retained_publish(
    envelope: Envelope,
    body: bytes,
    options: SubscriptionOptions,
    now: float,
    side_files: SideFiles,
) -> Publish:
    """The PUBLISH for a retained message sent on a new subscription (RETAIN set)."""
    qos = qos_of(envelope.property_value(QOS))
    props = _remaining_expiry(_properties_of(envelope, side_files), envelope, now)
    if options.identifier:
        props = props + subscription_identifier(options.identifier)
    return new_publish(envelope.topic or "", body, min(qos, options.qos), True, False, None, props)


def released_publish(
    envelope: Envelope, body: bytes, now: float, side_files: SideFiles
) -> Publish | None:
    """A QoS 2 PUBLISH as the exactly-once intake keeps it in working/ (its topic, body and
    properties, and what is left of its Message Expiry Interval), as its PUBREL sends it on
    to the subscribers in memory when the server holds it in memory no more (it restarted
    since the PUBLISH); None once its interval ran out (MQTT-3.3.2-5)."""
    if envelope.expired(now) or not envelope.topic:
        return None
    props = _remaining_expiry(_properties_of(envelope, side_files), envelope, now)
    retain = envelope.property_value(PUBLISHED_RETAINED) is True  # kept in its name
    return new_publish(envelope.topic, body, 2, retain, False, None, props)


@functools.lru_cache(maxsize=1024)
def unsendable_topic(topic: str) -> str | None:
    """Why `topic`, read from a message's name, cannot be a PUBLISH's topic name (a script
    wrote a wildcard, U+0000 or bytes that are not UTF-8 into it: §3.3.2.1), or None if it
    can. Cached: a dropbox's messages share a few topics, and this runs for each of them."""
    try:
        validate_topic(topic)
    except InvalidTopic as error:
        return str(error)
    return None


def _properties_of(envelope: Envelope, side_files: SideFiles) -> Properties:
    """The v5 properties a message goes out with: those it came with, or, for a message that
    came without (not over MQTT v5), its own properties as User Properties and its reply-to
    and correlation id as Response Topic and Correlation Data."""
    inline = key = None
    users: list[tuple[str, str]] = []
    for prop in envelope.properties:  # one pass (`publish_of` makes the same one)
        name = prop.name
        if not name.startswith(RESERVED_PREFIX):
            users.append((name, property_text(prop.value)))
        elif name == V5_PROPERTIES:
            inline = prop.value
        elif name == PROPERTIES_FILE:
            key = prop.value
    return _properties(envelope, inline, key, users, side_files)


def _properties(
    envelope: Envelope,
    inline: PropertyValue | None,
    key: PropertyValue | None,
    users: list[tuple[str, str]],
    side_files: SideFiles,
) -> Properties:
    """`_properties_of` once its pass over the properties is made."""
    if isinstance(inline, str):
        return _inline(inline)
    if key is not None:
        kept = side_files.get(key) if isinstance(key, str) else None
        if kept is None:
            return EMPTY
        if len(kept) > _LARGEST_REMEMBERED:
            return _checked(kept, f"side file {key}")  # not held by the cache below
        return _side_file(kept, key)
    if users or envelope.reply_to or envelope.correlation_id:
        return _built(envelope, users)
    return EMPTY


# Property bytes are checked before they go out, once per kind: a publisher repeats its
# properties, and a side file's key names one content, so most messages cost a lookup here.
# (A check is ~2 µs of Python per list; a message taken from disk costs some 45 µs in all.)
# Names carry at most INLINE_MAX characters of them; side files may be large: fewer of those.


@functools.lru_cache(maxsize=4096)
def _inline(packed: str) -> Properties:
    """The properties a name carries (`_pack`'s text), checked as `_checked` does."""
    try:
        raw = base64.urlsafe_b64decode(packed + "=" * (-len(packed) % 4))
    except ValueError:
        return _unusable(f"{V5_PROPERTIES} {packed}", "it is not base64")
    return _checked(raw, f"{V5_PROPERTIES} {packed}")


# Side files larger than this are checked at each read, not remembered: the cache below
# holds its keys' bytes and their properties, and 256 of 1 MiB each were 512 MB held for good.
_LARGEST_REMEMBERED = 64 << 10


@functools.lru_cache(maxsize=256)
def _side_file(raw: bytes, key: str) -> Properties:
    """The properties side file `key` holds (`raw`: SideFiles checked them against the key),
    checked as `_checked` does."""
    return _checked(raw, f"side file {key}")


def _checked(raw: bytes, where: str) -> Properties:
    """Stored property bytes, checked as a client's PUBLISH is (§2.2.2.2), less what is never
    forwarded; EMPTY (logged, once while cached) if they are not a well-formed list, which a
    subscriber would have to refuse, and disconnect."""
    try:
        return validated(raw, PacketType.PUBLISH).without(*NOT_FORWARDED)
    except MalformedPacket as error:
        return _unusable(where, str(error))


def _unusable(where: str, why: str) -> Properties:
    log.warning(
        "the v5 properties in %s cannot be sent (%s): their messages go without them",
        where,
        why,
    )
    return EMPTY


def _built(envelope: Envelope, pairs: list[tuple[str, str]]) -> Properties:
    """A message's own properties as v5 properties: its `mqtt.*` ones (client/mqtt_fields.py)
    as what they name, the others as User Properties (MQTT 5.0 §3.3.2.3.7), and its reply-to
    and correlation id as Response Topic and Correlation Data (§3.3.2.3.5, §3.3.2.3.6,
    §4.10), which win over `mqtt.response-topic` and `mqtt.correlation-data`. What MQTT
    cannot carry (U+0000, or bytes that are not UTF-8, in a name a script wrote, §1.5.4; a
    reply-to with a wildcard) is left out, logged, rather than sent to a subscriber who must
    refuse it; the message goes all the same."""
    users: list[tuple[str, str]] = []
    values: dict[str, str | bytes | int] = {}
    for name, value in pairs:
        try:
            if name in mqtt_fields.FIELDS:
                values[name] = mqtt_fields.requested(name, value)
            elif (why := mqtt_fields.not_carried(name) or mqtt_fields.not_carried(value)) is None:
                users.append((name, value))
            else:
                _left_out(_property_of(envelope, name), why)
        except InvalidArgument as error:
            _left_out(_property_of(envelope, name), str(error))
    wanted = mqtt_fields.Requested.of(values)
    reply_to, correlation_id = envelope.reply_to, envelope.correlation_id
    return Properties.build(
        payload_format_indicator=wanted.payload_format,
        content_type=wanted.content_type,
        response_topic=_response_topic(reply_to) if reply_to else wanted.response_topic,
        correlation_data=(
            _correlation_data(correlation_id) if correlation_id else wanted.correlation_data
        ),
        user_properties=users,
    )


@functools.lru_cache(maxsize=1024)
def _response_topic(reply_to: str) -> str | None:
    """A reply-to as a Response Topic: a topic name (§3.3.2.3.5), else None (logged once
    while cached). Cached: a few reply topics are used by many messages."""
    try:
        return validate_topic(reply_to)
    except InvalidTopic as error:
        _left_out(f"a message's reply-to {reply_to!r}", str(error))
        return None


def _correlation_data(correlation_id: str) -> bytes | None:
    """A correlation id as Correlation Data: its UTF-8 bytes, at most 65,535 (§1.5.6); else
    None (logged once while cached)."""
    try:
        data = correlation_id.encode()
    except UnicodeEncodeError:
        _left_out(f"a message's correlation id {correlation_id!r}", "it is not well-formed UTF-8")
        return None
    if len(data) > 0xFFFF:
        _left_out(
            f"a message's correlation id {correlation_id[:40]!r}", f"it is {len(data)} bytes long"
        )
        return None
    return data


@functools.lru_cache(maxsize=1024)
def _left_out(subject: str, why: str) -> None:
    """Logged once while cached: a message redelivered, a script's batch of them, or many
    messages naming one reply topic say so once."""
    log.warning(
        "%s cannot go to MQTT v5 subscribers (%s): they get the message without it", subject, why
    )


def _pack(props: Properties) -> str:
    """The property bytes as file-name text: URL-safe base64 without its padding."""
    return base64.urlsafe_b64encode(props.raw).decode().rstrip("=")


def _remaining_expiry(props: Properties, envelope: Envelope, now: float) -> Properties:
    """The properties with what is left of the name's expiration as Message Expiry Interval.
    The name's expiration is the message's: one it no longer has (a requeue dropped it once it
    had passed) leaves the stored bytes' interval out, which would tell the subscriber that a
    message boxmq never expires runs out as soon as it comes."""
    if not envelope.expiration:
        return props.without(PropertyId.MESSAGE_EXPIRY_INTERVAL)
    left = math.ceil(envelope.expiration / 1000 - now)
    return props.with_expiry(min(max(1, left), _EXPIRY_MAX))


def _property_of(envelope: Envelope, name: str) -> str:
    return f"message {shown(envelope.message_id)}: its property '{shown(name)}'"
