"""Topic names and topic filters: validation, `$share/` parsing and the reference matcher.

Invariants:
- A valid topic name or filter is non-empty, has no NUL, encodes as UTF-8 (no lone surrogates)
  and is at most 65,535 bytes long (MQTT 5.0 §1.5.4, §4.7.3). A topic name has no wildcard.
- In a valid filter, '+' and '#' fill a whole level, and '#' is the last level (§4.7.1).
- A `TopicFilter` is valid on construction: a shared one has a non-empty share name without
  '/', '+' or '#', and its filter proper is valid (§4.8.2); a plain one does not start with
  "$share/". So `parse_filter(str(f)) == f`: `str()` gives back the original text.
- `matches` is the naive, obviously-right matcher; the subscription trie and `matcher` are
  tested against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from boxmq.errors import InvalidTopic

__all__ = [
    "MQTT_STRING_MAX",
    "SHARE_PREFIX",
    "SYS",
    "TopicFilter",
    "about_sys",
    "is_share_name",
    "matcher",
    "matches",
    "parse_filter",
    "refuse_sys",
    "sys_unserved",
    "utf8_size",
    "validate_filter",
    "validate_topic",
]

MQTT_STRING_MAX = 65_535  # MQTT 5.0 §1.5.4: a UTF-8 string is prefixed by a two-byte length
# What a shared subscription's filter starts with, $share/GROUP/FILTER (MQTT 5.0 §4.8.2): the
# one spelling every door reads it by (but Spark's options, which import no core).
SHARE_PREFIX = "$share/"
SYS = "$SYS"  # the first level of an MQTT server's own topics (§4.7.2; mqtt/sys_topics.py)
_SEPARATOR = "/"
_ONE_LEVEL = "+"
_ALL_BELOW = "#"


def utf8_size(text: str) -> int | None:
    """The bytes `text` takes as an MQTT UTF-8 Encoded String (§1.5.4), to be held to
    MQTT_STRING_MAX; None if it has none (a lone surrogate: bytes that were not UTF-8, read as
    surrogate escapes). U+0000, which MQTT forbids too, is each caller's own check."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def _check_string(text: str, what: str) -> None:
    """The rules every topic name and filter share (MQTT 5.0 §1.5.4, §4.7.3)."""
    if not isinstance(text, str):  # a caller's bytes or None: said so, not a TypeError
        raise InvalidTopic(f"a {what} is a str, not {type(text).__name__}: {text!r}")
    if not text:
        raise InvalidTopic(f"a {what} must be at least one character long")  # §4.7.3
    # Named, as a wildcard's refusal names it: of a batch, the caller could not tell which.
    if "\x00" in text:
        raise InvalidTopic(f"{what} {text!r} must not contain NUL (U+0000)")  # §1.5.4
    size = utf8_size(text)
    if size is None:
        raise InvalidTopic(f"{what} {text!r} must be well-formed UTF-8 (no lone surrogates)")
    if size > MQTT_STRING_MAX:
        raise InvalidTopic(f"a {what} is {size} bytes in UTF-8, the limit is {MQTT_STRING_MAX}")


def validate_topic(name: str) -> str:
    """Return `name` if it is a valid topic name, else raise InvalidTopic saying why."""
    _check_string(name, "topic name")
    if _ONE_LEVEL in name or _ALL_BELOW in name:
        # MQTT 5.0 §4.7.1: wildcards are for filters, never in a topic name.
        raise InvalidTopic(f"topic name {name!r} must not contain the wildcards '+' or '#'")
    return name


def about_sys(name: str) -> bool:
    """Whether a topic name, or a subscription's filter, is under `$SYS` (its first level):
    only such a filter can match these topics (a wildcard at the first level never matches
    a `$` topic, MQTT 5.0 §4.7.2), and only such a topic is the server's to publish."""
    return name.startswith(SYS) and (len(name) == len(SYS) or name[len(SYS)] == "/")


def sys_unserved(subscription: str) -> str:
    """Why a subscription under `$SYS` made other than over MQTT (the Python API, the CLI, an
    XMPP topic node) gets none of the server's figures, and where they are: the one wording
    of every warning of it. Not refused: what an MQTT client an ACL lets publish under
    `$SYS` sends is stored, and reaches it. `subscription`: how the sentence names it."""
    return (
        "under $SYS, the MQTT server's own topics: each boxmq serve publishes its figures "
        f"there from memory, to its MQTT clients only, so {subscription} gets none of them "
        "(ask a server over MQTT: mosquitto_sub -t '$SYS/#' -v)"
    )


def refuse_sys(name: str) -> None:
    """InvalidTopic for a topic name under `$SYS`, published by a user (the CLI, the Python
    API), not through a door: each `boxmq serve` answers those topics itself, from memory, so
    one stored retained there made a new subscriber get two retained messages on one topic.
    An MQTT client may publish there only where an ACL rule lets it (mqtt/publishing.py)."""
    if about_sys(name):
        raise InvalidTopic(
            f"topic name {name!r}: $SYS topics are the MQTT server's own (each boxmq serve "
            "publishes its figures there): publish under another first level"
        )


def validate_filter(filter: str) -> str:
    """Return `filter` if it is a valid topic filter, else raise InvalidTopic saying why."""
    _check_string(filter, "topic filter")
    levels = filter.split(_SEPARATOR)
    for index, level in enumerate(levels):
        if _ALL_BELOW in level and (level != _ALL_BELOW or index != len(levels) - 1):
            # MQTT 5.0 §4.7.1.2
            raise InvalidTopic(f"topic filter {filter!r}: '#' must be alone in the last level")
        if _ONE_LEVEL in level and level != _ONE_LEVEL:
            # MQTT 5.0 §4.7.1.3
            raise InvalidTopic(f"topic filter {filter!r}: '+' must fill a whole level")
    return filter


def is_share_name(group: str) -> bool:
    """Whether a client can name the share group `group` in "$share/<group>/<filter>": MQTT
    5.0 §4.8.2 wants at least one character, and none of '/', '+', '#'. The one rule for
    every place that takes a group's name (the config file's [share_groups.<group>] and
    boxmq.open's group_dispatch as well as a SUBSCRIBE's filter)."""
    return bool(group) and not any(c in group for c in (_SEPARATOR, _ONE_LEVEL, _ALL_BELOW))


def _check_share_name(group: str, text: str) -> None:
    """MQTT 5.0 §4.8.2: at least one character, and none of '/', '+', '#'."""
    if not group:
        raise InvalidTopic(f"{text!r}: the share name after '$share/' must not be empty")
    if not is_share_name(group):
        raise InvalidTopic(f"{text!r}: the share name {group!r} must not contain '/', '+' or '#'")


@dataclass(frozen=True, slots=True)
class TopicFilter:
    """A subscription's filter: `filter` is matched against topics; `share_group` names the
    shared subscription it belongs to ("$share/<share_group>/<filter>"), or is None."""

    filter: str  # the filter proper, without "$share/<group>/"
    share_group: str | None = None  # None for a plain (non-shared) subscription

    def __post_init__(self) -> None:
        validate_filter(self.filter)
        if self.share_group is None and self.filter.startswith(SHARE_PREFIX):
            # MQTT 5.0 §4.8.2: that prefix marks a shared subscription; str() must round-trip.
            raise InvalidTopic(f"{self.filter!r} is a shared subscription: use parse_filter")
        if self.share_group is not None:
            text = str(self)
            _check_share_name(self.share_group, text)
            _check_string(text, "shared subscription filter")  # the 65,535 bytes cover it all

    @property
    def shared(self) -> bool:
        return self.share_group is not None

    def __str__(self) -> str:
        if self.share_group is None:
            return self.filter
        return f"{SHARE_PREFIX}{self.share_group}/{self.filter}"


def parse_filter(text: str) -> TopicFilter:
    """Parse "a/+" or "$share/{ShareName}/{filter}" (MQTT 5.0 §4.8.2); InvalidTopic says why.

    Only text starting with "$share/" is shared; "$share" alone is a plain filter.
    """
    if not isinstance(text, str) or not text.startswith(SHARE_PREFIX):
        return TopicFilter(validate_filter(text))  # which refuses what is not a str
    _check_string(text, "shared subscription filter")
    rest = text[len(SHARE_PREFIX) :]
    group, separator, filter = rest.partition(_SEPARATOR)
    _check_share_name(group, text)
    if not separator:
        raise InvalidTopic(f"{text!r}: the share name must be followed by '/' and a topic filter")
    if not filter:
        raise InvalidTopic(f"{text!r}: a shared subscription needs a topic filter after the name")
    return TopicFilter(filter, group)


def matches(filter: str, topic: str) -> bool:
    """Whether the (valid) filter matches the (valid) topic name: the reference matcher.

    '+' matches exactly one level (possibly empty), '#' this level and every level below,
    including none at all ("a/#" matches "a"). A topic starting with '$' is never matched by
    a filter whose first level is a wildcard (MQTT 5.0 §4.7.2).
    """
    wanted = filter.split(_SEPARATOR)
    levels = topic.split(_SEPARATOR)
    if topic.startswith("$") and wanted[0] in (_ONE_LEVEL, _ALL_BELOW):
        return False  # MQTT 5.0 §4.7.2
    for index, level in enumerate(wanted):
        if level == _ALL_BELOW:
            return True  # MQTT 5.0 §4.7.1.2: also the parent level
        if index >= len(levels) or level not in (_ONE_LEVEL, levels[index]):
            return False
    return len(wanted) == len(levels)


def matcher(filter: str) -> Callable[[str], bool]:
    """`matches` with the filter compiled once, for one filter against many topics (a new
    subscription and the retained messages of 20,000 topics: 3 times as fast)."""
    wanted = filter.split(_SEPARATOR)
    below = wanted[-1] == _ALL_BELOW
    levels = wanted[:-1] if below else wanted
    pattern = _SEPARATOR.join(
        "[^/]*" if level == _ONE_LEVEL else re.escape(level) for level in levels
    )
    if below:  # this level and every level below, none at all included ("a/#" matches "a")
        pattern = f"{pattern}(?:/.*)?" if levels else ".*"
    fullmatch = re.compile(pattern, re.DOTALL).fullmatch
    if wanted[0] in (_ONE_LEVEL, _ALL_BELOW):  # MQTT 5.0 §4.7.2
        return lambda topic: not topic.startswith("$") and fullmatch(topic) is not None
    return lambda topic: fullmatch(topic) is not None
