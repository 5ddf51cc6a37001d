"""Reading one TOML table with types checked and every error naming the file and the key.

A `Table` hands out values by key and remembers which keys it handed out; `finish()` then
refuses whatever is left, so a misspelt key is an error rather than a silently ignored line.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterator, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

from boxmq.cli_args import FOREVER, no_home_folder, parse_duration
from boxmq.core.durations import LONGEST, in_unit_of, written_seconds
from boxmq.errors import InvalidArgument

__all__ = ["Table"]

# A character no file name should hold: C0 (NUL apart: refused with its own reason), DEL, C1.
_CONTROL: Final = re.compile("[\x01-\x1f\x7f-\x9f]")
_TOML_LOWEST: Final = -(2**63)
_TOML_HIGHEST: Final = 2**63 - 1
# Words for a time that never ends, which no duration is: a limit whose largest value means
# that (max_session_expiry's 0xFFFFFFFF) is told to write it.
_ENDLESS: Final = frozenset({"forever", "never", "infinite", "infinity", "unlimited", "inf"})


class Table:
    def __init__(
        self,
        values: dict[str, Any],
        *,
        source: Path,
        folder: Path | None = None,
        path: str = "",
        homes: Mapping[str, str] | None = None,
        foreign: Mapping[str, str] | None = None,
    ) -> None:
        self._values = values
        self._source = source
        # Where relative file names are taken from: the file's folder unless told otherwise.
        self._folder = source.parent if folder is None else folder
        self._path = path  # "mqtt.listener[2]": where this table sits, for messages
        self._used: set[str] = set()
        # Where each key of the file goes ("in [mqtt.limits]"), said of one found elsewhere.
        self._homes: Mapping[str, str] = homes or {}
        # Keys of another program's file (mosquitto.conf's) with what to write instead.
        self._foreign: Mapping[str, str] = foreign or {}

    def error(self, key: str, problem: str) -> InvalidArgument:
        return InvalidArgument(f"{self._source}: {self._key(key)}: {problem}")

    def _key(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def has(self, key: str) -> bool:
        return key in self._values

    def names(self) -> list[str]:
        """The keys of a table whose keys are names (such as [share_groups.<group>])."""
        return list(self._values)

    def _take(self, key: str) -> Any:
        self._used.add(key)
        return self._values.get(key)

    def string(self, key: str) -> str | None:
        value = self._take(key)
        if value is not None and not isinstance(value, str):
            hint = self._table_given(key, value)
            raise self.error(key, f"expected a string, got {_kind(value)}{hint}")
        return value

    def strings(self, key: str) -> list[str] | None:
        """A list of strings, none of them twice: a repeat is a slip, the entry meant to be
        there written as another one's copy. Each is named `key[n]`, from 1, as tables are."""
        value = self._take(key)
        if value is None:
            return None
        if not isinstance(value, list):
            # `trusted_sources = "mqtt:a"`: one entry without its brackets
            fix = f" ({value!r}): write [{_quoted(value)}]" if isinstance(value, str) else ""
            raise self.error(key, f"expected a list of strings, got {_kind(value)}{fix}")
        seen: dict[str, int] = {}
        for index, item in enumerate(value, start=1):
            if not isinstance(item, str):
                raise self.error(f"{key}[{index}]", f"expected a string, got {_kind(item)}")
            if item in seen:
                raise self.error(
                    f"{key}[{index}]", f"{item!r} is listed twice ({key}[{seen[item]}] too)"
                )
            seen[item] = index
        return value

    def choice(self, key: str, choices: tuple[str, ...]) -> str | None:
        value = self.string(key)
        if value is not None and value not in choices:
            # "Always", "round_robin", "allways": the one meant, where one is close.
            close = difflib.get_close_matches(value.lower(), choices, n=1, cutoff=0.7)
            meant = f": did you mean {close[0]!r}?" if close else ""
            raise self.error(key, f"{value!r} is not one of {', '.join(choices)}{meant}")
        return value

    def boolean(self, key: str) -> bool | None:
        value = self._take(key)
        if value is not None and not isinstance(value, bool):
            # `keep_processed = "true"`: TOML's booleans are bare words; "yes" and "off" are
            # YAML's and INI files'.
            word = BOOLEAN_WORDS.get(value.strip().lower()) if isinstance(value, str) else None
            fix = f" ({value!r}): write {word}, without quotes" if word else ""
            fix = fix or self._table_given(key, value)
            raise self.error(key, f"expected true or false, got {_kind(value)}{fix}")
        return value

    def integer(
        self,
        key: str,
        *,
        low: int,
        high: int | None = None,
        seconds: bool = False,
        in_bytes: bool = False,
    ) -> int | None:
        """An integer from `low` to `high`; `seconds`: a count of whole seconds, which may
        also be written as a duration ("60s", "7d"), as the other times of the file are;
        `in_bytes`: a size, whose error says the bytes of one written with a unit ("1MB")."""
        value = written = self._take(key)
        if value is None:
            return None
        if seconds and isinstance(value, str):
            try:
                duration = self._duration(key, value)
            except InvalidArgument as error:
                too_long = (written_seconds(value) or 0) > LONGEST  # not mistyped: past 100 years
                endless = value.strip().lower() in _ENDLESS  # the longest meant, in words
                if high is None or high <= LONGEST or not (too_long or endless):
                    raise  # a duration mistyped, or a limit a duration can say
                # max_session_expiry's largest (0xFFFFFFFF: never, to MQTT) is no duration.
                raise InvalidArgument(
                    f"{error}; or write {high}, the most it takes, as an integer"
                ) from None
            if not duration.is_integer():
                raise self.error(key, f"{value!r} is not a whole number of seconds")
            value = int(duration)
        if isinstance(value, bool) or not isinstance(value, int):  # bool is an int subclass
            hint = (_as_bytes(value) if in_bytes else "") or _as_integer(value)
            hint = hint or self._table_given(key, value)
            raise self.error(key, f"expected an integer, got {_kind(value)}{hint}")
        if not _TOML_LOWEST <= value <= _TOML_HIGHEST:
            # TOML's integers are 64-bit (its spec: an error past them), which tomllib does
            # not check: another reader of the file would refuse it, and no limit needs more.
            raise self.error(
                key,
                f"{value} is past TOML's integers, {_TOML_LOWEST} to {_TOML_HIGHEST} (64 bits)",
            )
        if value < low or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
            if isinstance(written, str):  # a duration: its limits in seconds and in its unit
                least = in_unit_of(low, written)
                limits = (
                    f"at least {least}"
                    if high is None
                    else f"{least} to {in_unit_of(high, written)}"
                )
                raise self.error(
                    key,
                    f"{written!r} ({value} seconds) is out of range: use {bounds} seconds "
                    f"({limits})",
                )
            raise self.error(key, f"{value} is out of range: use {bounds}")
        return value

    def seconds(self, key: str, *, zero: bool = False, shortest: float = 0.0) -> float | None:
        """A positive number of seconds (`zero`: or 0), or a duration string ("500ms", "30s",
        "10m"); if not 0, at least `shortest`."""
        value = self._take(key)
        if value is None:
            return None
        shown = repr(value)  # as the user wrote it: "0ms", not 0.0
        if isinstance(value, str):
            value = self._duration(key, value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            hint = self._table_given(key, value)
            raise self.error(key, f"expected seconds (a number or '30s'), got {_kind(value)}{hint}")
        if zero and (not math.isfinite(value) or value < 0):
            raise self.error(key, f"{shown} is not 0 or more seconds")
        if not zero and (not math.isfinite(value) or value <= 0):
            raise self.error(key, f"{shown} is not a positive number of seconds")
        if 0 < value < shortest:
            raise self.error(
                key,
                f"{shown} is too short: at least {shortest:g} seconds "
                f"({in_unit_of(shortest, 'ms')}); a loop that often keeps a core busy",
            )
        if value > LONGEST:
            raise self.error(key, f"{value:g} seconds is too long: at most {LONGEST:g} (100 years)")
        return float(value)

    def _duration(self, key: str, value: str) -> float:
        """A duration string ("500ms", "30s", "10m") in seconds; an error names `key`."""
        try:
            return parse_duration(value)
        except InvalidArgument as error:
            raise self.error(key, str(error)) from None

    def seconds_or_forever(self, key: str) -> float | None:
        """`seconds`, or the string "forever", which gives math.inf (a time that never ends)."""
        if self._values.get(key) == FOREVER:
            self._used.add(key)
            return math.inf
        try:
            return self.seconds(key)
        except InvalidArgument as error:
            raise InvalidArgument(f'{error} (or "{FOREVER}")') from None

    def path(self, key: str) -> Path | None:
        """A file name; a relative one is taken from the config file's folder (the folder
        the table was given)."""
        value = self.string(key)
        if value is None:
            return None
        if not value:
            raise self.error(key, "expected a file name, got an empty string")
        if "\0" in value:  # a TOML "\u0000": no file name holds one (open() raised ValueError)
            raise self.error(key, "a file name cannot hold a NUL character (\\u0000)")
        if control := _CONTROL.search(value):
            # "state\n" (an escape in a basic string meant for a Windows path, a pasted line)
            # made a folder whose name no log line nor `ls` shows as typed.
            raise self.error(
                key,
                f"{value!r} holds a control character ({control[0]!r}): no file name should; "
                "write the name without it (in double quotes a backslash starts an escape: "
                "use single quotes or / for a path)",
            )
        try:
            named = Path(value).expanduser()
        except RuntimeError:
            # "~ada/state" of a user this machine does not have (or "~" with neither $HOME
            # nor a user entry): pathlib raised RuntimeError, which serve showed as a traceback.
            raise self.error(key, no_home_folder(value)) from None  # as the CLI words it
        return self._folder / named

    def _table_given(self, key: str, value: object) -> str:
        """What to write for a key of one value that the file made a table, "" for another
        value: a `[fsync]` header (or `fsync = {...}`) read as "expected a string, got a
        table", which sent the user looking at a value they never wrote."""
        if not isinstance(value, dict):
            return ""
        if not self._path:
            where = "above the first [table] header"
        elif "[" in self._path:
            where = f"in its [[{_header_of(self._path)}]] table"
        else:
            where = f"under [{self._path}]"
        return (
            f" ([{_header_of(self._key(key))}] is a table's header, and {key} one value: "
            f"write {key} = ... {where})"
        )

    def table(self, key: str, *, example: str = "...") -> Table:
        """The table at `key` (empty if absent); `example`, its keys as an inline table
        shows them, for the error of a value that is not a table."""
        value = self._take(key)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            # The header as a file writes it: "[mqtt.listener[1].tls]" was no TOML a user could
            # write, and a table inside one of an array of tables is best written inline.
            header = _header_of(self._key(key))
            if "[" in self._path:
                above = _header_of(self._path)
                write = (
                    f"write {key} = {{ {example} }} in its [[{above}]] table, or its keys "
                    f"below a [{header}] header under that [[{above}]]"
                )
            else:
                write = f"write its keys below a [{header}] header, or {key} = {{ {example} }}"
            raise self.error(key, f"expected a table, got {_kind(value)}: {write}")
        return self._child(value, self._key(key))

    def _child(self, values: dict[str, Any], path: str) -> Table:
        """The table `values` at `path` inside this one: of its file, with its hints."""
        return Table(
            values,
            source=self._source,
            folder=self._folder,
            path=path,
            homes=self._homes,
            foreign=self._foreign,
        )

    def tables(self, key: str, *, if_empty: str) -> Iterator[Table]:
        """An array of tables ([[key]]), numbered from 1 in messages. An empty one (`key = []`)
        is refused with `if_empty`, what to write instead: it reads as "none", which the
        default that a missing key gets is not."""
        value = self._take(key)
        if value is None:
            return
        if value == []:
            raise self.error(key, f"an empty list: {if_empty}")
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(key, f"expected tables ([[{self._key(key)}]]), got {_kind(value)}")
        for index, item in enumerate(value, start=1):
            path = f"{self._key(key)}[{index}]"
            yield self._child(item, path)

    def finish(self) -> None:
        unknown = sorted(set(self._values) - self._used)
        if not unknown:
            return
        home = self._homes.get(unknown[0])
        if home is None and (instead := self._foreign.get(unknown[0])) is not None:
            raise self.error(unknown[0], f"unknown key: {instead}")
        if home is None:
            # A misspelling of a key of the file: the key meant, and its table if another.
            close = difflib.get_close_matches(unknown[0], self._homes, n=1, cutoff=0.75)
            if not close:
                raise self.error(unknown[0], f"unknown key: {self._keys_here()}")
            meant = close[0]
            there = "" if meant in self._used else f" {self._homes[meant]}"  # asked here
            raise self.error(unknown[0], f"unknown key: did you mean {meant}{there}?")
        # A key of another table: TOML puts every key under the last [table] header above
        # it, so a top-level key written below [mqtt] is mqtt's.
        raise self.error(unknown[0], f"not a key of {self._where}: it goes {home}")

    @property
    def _where(self) -> str:
        return "this table" if self._path else "the top of the file"

    def _keys_here(self) -> str:
        """The keys this table takes, for a key that is no misspelling of any: by the time
        `finish` runs, every key the table knows has been asked for, so `_used` holds them."""
        known = sorted(self._used - set(self._foreign))
        return f"{self._where} takes {', '.join(known) if known else 'no keys'}"


# What a boolean written as a string means: TOML's own words quoted, and other formats'
# (config._toml_hint names them when they are written bare).
BOOLEAN_WORDS: Final = {
    "true": "true",
    "false": "false",
    "yes": "true",
    "no": "false",
    "on": "true",
    "off": "false",
}


def _as_integer(value: object) -> str:
    """How to write `value` as the integer it looks like (`port = "1883"`, `1883.0`, `1e4`,
    which TOML reads as a string or a float), "" when it is none."""
    if isinstance(value, float) and value.is_integer():
        return f" ({value!r}): write {int(value)}, without a decimal point or exponent"
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return f" ({value!r}): write {int(value)}, without quotes"
    if isinstance(value, float):
        return f" ({value!r})"
    return ""


# A size with a unit, as other brokers' files take it ("1MB", "64MiB", "256 kb").
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt])(i?)b?\s*", re.IGNORECASE)


def _as_bytes(value: object) -> str:
    """The bytes of a size written with a unit, "" for anything else. "MiB" is 1024 * 1024;
    "MB" (or "M") may be meant either way, so both are said."""
    found = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        return ""
    number, power = Fraction(found[1]), "kmgt".index(found[2].lower()) + 1
    binary, decimal = number * 1024**power, number * 1000**power
    unit = "kMGT"[power - 1]
    if found[3]:  # "MiB"
        if binary.denominator != 1:
            return ""
        return f" ({value!r}): write {binary}, a number of bytes without a unit"
    if decimal.denominator != 1 or binary.denominator != 1:
        return ""
    names = ((decimal, f"{unit}B"), (binary, f"{unit.upper()}iB"))
    said = [f"{n} ({found[1]} {name})" for n, name in names]
    return f" ({value!r}): write {said[0]}, or {said[1]}, a number of bytes without a unit"


def _quoted(text: str) -> str:
    """`text` as a TOML basic string ("..."), which JSON's escapes are."""
    return json.dumps(text, ensure_ascii=False)


def _header_of(path: str) -> str:
    """A table's place as its header names it: `mqtt.listener.tls` for mqtt.listener[1].tls."""
    return re.sub(r"\[[0-9]+\]", "", path)


def _kind(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names |= {list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__)
