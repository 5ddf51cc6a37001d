"""The ACL file: which client may publish to, and subscribe to, which topics (mosquitto-like).

    # comment
    topic read public/#              # before any `user` line: clients without a user name
    user alice
    topic readwrite alice/#          # alice's rules (ACCESS is read, write, readwrite or deny;
    topic deny alice/secret/#        #   readwrite when left out; the filter never is)
    pattern write devices/%c/up      # everyone, with %u = user name, %c = client id

Decision, for a client with (user name, client id): its rules are its `user` section (or the
anonymous section when it has no user name) plus every `pattern`, substituted.
- publish to a topic: no `deny` rule matches it, and some `write`/`readwrite` rule does;
- subscribe to a filter (a `$share/<group>/` prefix stripped first): no `deny` rule overlaps
  it, and one `read`/`readwrite` rule covers it whole (`read a/+` does not allow `a/#`).
Anything else is refused: with an ACL file, the default is no.

Invariants: an allowing pattern whose %u or %c value holds '+', '#' or '/' is skipped for that
client (it would widen the rule or reach into another client's levels), and so is one whose
value would make its first level a `$` one; a `deny` pattern is never skipped so (skipping it
would widen the client's rights), it takes the values as they are. A %u pattern does not apply
to a client without a user name.
Rules are checked when the file is read; an error names the file and the line.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Final, TypeVar

from boxmq.core.filter_relations import covers, overlaps
from boxmq.core.topics import SHARE_PREFIX, matches, parse_filter, validate_filter
from boxmq.errors import InvalidArgument, InvalidTopic
from boxmq.mqtt.passwords import ReadAtStart, entry_user

__all__ = ["PLACEHOLDERS", "Access", "Acl", "Rule", "substitute"]

# What `substitute` fills in: the user name and the client id.
PLACEHOLDERS: Final = ("%u", "%c")
_UNSAFE_IN_VALUE: Final = ("+", "#", "/")
_PLACEHOLDER: Final = re.compile("|".join(PLACEHOLDERS))
_DECISIONS_KEPT: Final = 65_536
# The clients whose rules (their section's, and every pattern filled in for them) are kept.
_CLIENTS_KEPT: Final = 4_096
# A decision whose topic, client id and user name are longer together is taken afresh each
# time, not kept: 65,536 of 65,535-byte topics were 4.3 GB a client could fill (as routes.py).
_LONGEST_KEPT: Final = 256
# Seconds between two looks at the ACL file for a change, however many refusals come.
_LOOK_EVERY: Final = 1.0

log = logging.getLogger("boxmq.mqtt")

_Key = TypeVar("_Key", bound=tuple[object, ...])
_Kept = TypeVar("_Kept")


class Access(Enum):
    READ = "read"
    WRITE = "write"
    READWRITE = "readwrite"
    DENY = "deny"

    @property
    def reads(self) -> bool:
        return self in (Access.READ, Access.READWRITE)

    @property
    def writes(self) -> bool:
        return self in (Access.WRITE, Access.READWRITE)


_ACCESS_WORDS: Final = frozenset(access.value for access in Access)


@dataclass(frozen=True, slots=True)
class Rule:
    access: Access
    filter: str  # a topic filter; in a pattern, it may hold %u and %c
    line: int  # where it was written, for messages


@dataclass(frozen=True)
class Acl:
    """The `Authorizer` of `boxmq.mqtt.settings`, read from an ACL file."""

    path: Path
    anonymous: tuple[Rule, ...]
    users: Mapping[str, tuple[Rule, ...]]
    patterns: tuple[Rule, ...]
    # Decisions already taken, keyed by (publish?, user name, client id, topic or filter). The
    # rules never change, so an answer never goes stale; it saves ~20 µs on every PUBLISH to a
    # topic a client has used before. Emptied when full, and long keys never kept, to bound
    # its memory.
    _decisions: dict[tuple[bool, str | None, str, str], bool] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # Each client's rules, keyed by (user name, client id), which are all they depend on:
    # filled in again for every topic or filter not yet decided, the patterns were more than
    # half of a decision's ~21 us, and one SUBSCRIBE of 60,000 filters the ACL refused held
    # the event loop for over a second. Emptied when full, long keys never kept, as above.
    _client_rules: dict[tuple[str | None, str], tuple[Rule, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The file as it was read (file_version), None when not read from a file. It is read at
    # start only: a rule added since still refuses, and the first refusal after each change
    # says why (as the password file's first login does).
    read_as: ReadAtStart | None = None
    # When the file was last looked at (`clock`, seconds): a client refused in a tight loop
    # would otherwise pay a stat on the event loop for each refusal; once a second is soon
    # enough for an operator waiting on his change.
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    _looked_at: list[float] = field(default_factory=list, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Acl:
        source = Path(path)
        read_as = ReadAtStart.before_reading("ACL file", source)
        try:
            # utf-8-sig: an editor's byte order mark is not part of the first keyword.
            text = source.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            raise InvalidArgument(f"ACL file {source} does not exist") from None
        except UnicodeDecodeError:
            raise InvalidArgument(f"ACL file {source} is not UTF-8 text") from None
        except OSError as error:
            raise InvalidArgument(f"cannot read ACL file {source}: {error.strerror}") from None
        return dataclasses.replace(cls.parse(text, source), read_as=read_as)

    @classmethod
    def parse(cls, text: str, path: Path) -> Acl:
        anonymous: list[Rule] = []
        users: dict[str, list[Rule]] = {}
        patterns: list[Rule] = []
        section = anonymous
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keyword, rest = _first_word(line)
            try:
                if keyword == "user":
                    if not rest:
                        raise InvalidArgument("`user` needs a user name")
                    section = users.setdefault(rest, [])
                elif keyword == "topic":
                    section.append(_rule(rest, number))
                elif keyword == "pattern":
                    patterns.append(_rule(rest, number))
                else:
                    raise InvalidArgument(_unknown_keyword(keyword, line))
            except InvalidArgument as error:
                raise InvalidArgument(f"{path}:{number}: {error}") from None
        return cls(
            path,
            tuple(anonymous),
            {name: tuple(rules) for name, rules in users.items()},
            tuple(patterns),
        )

    # -- Authorizer ---------------------------------------------------------------------------

    def can_publish(self, username: str | None, client_id: str, topic: str) -> bool:
        return self._decide((True, username, client_id, topic), self._may_publish)

    def can_subscribe(self, username: str | None, client_id: str, topic_filter: str) -> bool:
        return self._decide((False, username, client_id, topic_filter), self._may_subscribe)

    def _tell_if_changed(self) -> None:
        """A warning when the file on disk is no longer the one read, once per change."""
        if self.read_as is None:
            return
        looked_at = self.clock()
        if self._looked_at and looked_at - self._looked_at[0] < _LOOK_EVERY:
            return
        self._looked_at[:] = [looked_at]
        self.read_as.tell_if_changed()

    def _decide(
        self,
        key: tuple[bool, str | None, str, str],
        rule: Callable[[str | None, str, str], bool],
    ) -> bool:
        decided = self._decisions.get(key)
        if decided is None:
            decided = rule(key[1], key[2], key[3])
            _keep(self._decisions, key, decided, _DECISIONS_KEPT)
        if not decided:  # a refusal, which a rule added to the file since may have lifted
            self._tell_if_changed()
        return decided

    def _may_publish(self, username: str | None, client_id: str, topic: str) -> bool:
        rules = self._rules_of(username, client_id)
        if any(r.access is Access.DENY and matches(r.filter, topic) for r in rules):
            return False
        return any(r.access.writes and matches(r.filter, topic) for r in rules)

    def _may_subscribe(self, username: str | None, client_id: str, topic_filter: str) -> bool:
        try:
            wanted = parse_filter(topic_filter).filter  # "$share/g/a/#" is checked as "a/#"
        except InvalidTopic:
            return False
        rules = self._rules_of(username, client_id)
        if any(r.access is Access.DENY and overlaps(r.filter, wanted) for r in rules):
            return False
        return any(r.access.reads and covers(r.filter, wanted) for r in rules)

    def _rules_of(self, username: str | None, client_id: str) -> tuple[Rule, ...]:
        key = (username, client_id)
        rules = self._client_rules.get(key)
        if rules is None:
            rules = tuple(self._rules_for(username, client_id))
            _keep(self._client_rules, key, rules, _CLIENTS_KEPT)
        return rules

    def _rules_for(self, username: str | None, client_id: str) -> Iterable[Rule]:
        yield from self.anonymous if username is None else self.users.get(username, ())
        for rule in self.patterns:
            concrete = _substitute(rule, username, client_id)
            if concrete is not None:
                yield concrete


def _keep(kept: dict[_Key, _Kept], key: _Key, value: _Kept, most: int) -> None:
    """`value` kept under `key` in `kept`, emptied first once it holds `most`; not kept when
    the key's texts are together longer than _LONGEST_KEPT, to bound the memory a client's
    long topics or ids could fill."""
    if sum(len(part) for part in key if isinstance(part, str)) > _LONGEST_KEPT:
        return
    if len(kept) >= most:
        kept.clear()
    kept[key] = value


def _unknown_keyword(keyword: str, line: str) -> str:
    """What to say of a line that starts with no keyword. A password file's entry is told as
    one, without its hash, which the message would otherwise show to the terminal and the log."""
    user = entry_user(line)
    if user is not None:
        return (
            f"a line of a password file (user {user!r} and the hash of a password), not of an "
            "ACL: acl_file names the password file (give it as password_file, and the ACL file "
            "as acl_file)"
        )
    return f"unknown keyword {keyword!r}: expected user, topic or pattern"


def _first_word(text: str) -> tuple[str, str]:
    """("topic", "read a b") from "topic  read a b": spaces or tabs after the first word."""
    words = text.split(maxsplit=1)
    return (words[0], words[1].strip() if len(words) > 1 else "") if words else ("", "")


def _rule(text: str, number: int) -> Rule:
    """`[ACCESS] FILTER`; the filter is the rest of the line and may hold spaces."""
    first, after = _first_word(text)
    access = Access.READWRITE
    if first in _ACCESS_WORDS:
        if not after:
            # Read as a filter, `topic deny` would grant readwrite on a topic named "deny".
            raise InvalidArgument(
                f"{first!r} is an access with no topic filter after it: expected "
                f"[read|write|readwrite|deny] FILTER (for a topic named {first!r}, "
                f"give its access first: readwrite {first})"
            )
        access, text = Access(first), after
    elif after and "/" not in first:
        # `topic denny alice/secret/#` read as readwrite on the topic "denny alice/secret/#":
        # the deny was lost, and alice read her secrets. A misspelt access is an error; a
        # filter whose first level holds a space is written with its access first.
        raise InvalidArgument(
            f"{first!r} is no access: expected read, write, readwrite or deny before the "
            f"filter (for a topic filter whose first level holds a space, give its access "
            f"first: readwrite {text})"
        )
    if not text:
        raise InvalidArgument("expected [read|write|readwrite|deny] FILTER")
    if text.startswith(SHARE_PREFIX):
        raise InvalidArgument(
            f"{text!r}: name the topic filter without '$share/<group>/' "
            "(a shared subscription is checked by its filter)"
        )
    try:
        validate_filter(text)  # %u and %c are plain characters to the filter syntax
    except InvalidTopic as error:
        raise InvalidArgument(str(error)) from None
    return Rule(access, text, number)


def _substitute(rule: Rule, username: str | None, client_id: str) -> Rule | None:
    """The pattern for one client, or None when it does not apply to that client."""
    if rule.access is Access.DENY:
        # Skipping a deny widens the client's rights, and the client chose its id: `deny
        # devices/%c/firmware/#` skipped for client `d1/x` let it write its own firmware. So a
        # deny takes the values as they are: `d1/x` is denied devices/d1/x/firmware/#, and
        # `+` every device's (a wildcard value denies more, never less).
        text = _filled_in(rule.filter, username, client_id)
    else:
        text = substitute(rule.filter, username, client_id)
    if text is None:
        return None
    try:
        validate_filter(text)
    except InvalidTopic:
        # e.g. a client id that makes the filter too long, or `a#` within a level: no topic
        # holds such a level or is that long, so a deny left out this way denies nothing.
        return None
    return Rule(rule.access, text, rule.line)


def _filled_in(template: str, username: str | None, client_id: str) -> str | None:
    """`template` with %u and %c filled in as they are; None for a %u without a user name,
    which has no user's topics to deny."""
    if "%u" in template and username is None:
        return None
    values = {"%u": username or "", "%c": client_id}
    # One pass, so that a user name holding "%c" is not substituted again.
    return _PLACEHOLDER.sub(lambda m: values[m[0]], template)


def substitute(template: str, username: str | None, client_id: str) -> str | None:
    """`template` with %u (user name) and %c (client id) filled in for one client; None when
    a value it needs is missing, or holds '+', '#' or '/' (it would widen a filter or reach
    into another client's levels), or when it would start a filter with '$' that the
    template does not (client id `$SYS` and `%c/#`: the server's own topics, MQTT 5.0 §4.7.2,
    which only a rule written so may give)."""
    values = {"%u": username, "%c": client_id}
    needed = [values[p] for p in PLACEHOLDERS if p in template]
    if any(not value or any(c in value for c in _UNSAFE_IN_VALUE) for value in needed):
        return None
    text = _filled_in(template, username, client_id)
    if text is None or (text.startswith("$") and not template.startswith("$")):
        return None
    return text
