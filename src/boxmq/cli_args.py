"""Parsing what people type: durations, properties and paths, with errors that say what to
fix (the config file's values are read by the same words, config_table.py)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Final

from boxmq.core.durations import BLANKS, LONGEST, written_seconds
from boxmq.errors import InvalidArgument
from boxmq.java_floats import fits_float32
from boxmq.model import Property, PropertyType

__all__ = [
    "DURATION_OPTIONS",
    "FOREVER",
    "PROPERTY_TYPES",
    "Default",
    "joined_negative_durations",
    "no_home_folder",
    "parse_duration",
    "parse_integer",
    "parse_property",
]

# Every option whose value is a duration (tests/integration/test_cli.py checks each one).
DURATION_OPTIONS = frozenset(
    {
        "--by",
        "--delay",
        "--expires-in",
        "--idle",
        "--lock",
        "--sweep-interval",
        "--sys-interval",
        "--xmpp-lock-timeout",
    }
)

# What a duration setting that may never end takes instead (here, not in config_table: the
# command line reads it too, and config_table's pathlib was 1.5 % of a `boxmq put`).
FOREVER = "forever"
# The shortest interval of a loop `boxmq serve` runs (fsync_interval, sweep_interval,
# sys_interval), from the config file or a flag: 1e-9 swept without a pause, a core kept busy
# for nothing.
SHORTEST_INTERVAL: Final = 0.01


class Default(str):
    """A flag's default value, told apart from the same text typed by the user (cli_serve)."""

    __slots__ = ()


_NEGATIVE = re.compile(r"-[0-9.]")

_TYPES = {
    "string": PropertyType.STRING,
    "int": PropertyType.INT,
    "long": PropertyType.LONG,
    "short": PropertyType.SHORT,
    "byte": PropertyType.BYTE,
    "double": PropertyType.DOUBLE,
    "float": PropertyType.FLOAT,
    "bool": PropertyType.BOOLEAN,
}
# The TYPE words of NAME:TYPE=VALUE as a user writes them, the first the default (NAME=VALUE).
PROPERTY_TYPES: Final = tuple(_TYPES)
_RANGES = {
    PropertyType.BYTE: 8,
    PropertyType.SHORT: 16,
    PropertyType.INT: 32,
    PropertyType.LONG: 64,
}


def joined_negative_durations(argv: Sequence[str]) -> list[str]:
    """`--lock -5s` as `--lock=-5s`: argparse takes a word starting with '-' for an option
    (unless it is a plain negative number) and says only "expected one argument"; joined, the
    duration's own check says what to fix. Nothing after `--` is touched: it is all operands."""
    joined: list[str] = []
    for at, arg in enumerate(argv):
        if arg == "--":
            return joined + list(argv[at:])
        if joined and joined[-1] in DURATION_OPTIONS and _NEGATIVE.match(arg):
            joined[-1] += "=" + arg
        else:
            joined.append(arg)
    return joined


def parse_duration(text: str) -> float:
    """'30s', '500ms', '10m', '2h', '1d' or a plain number of seconds."""
    seconds = written_seconds(text)
    bare = text.strip(BLANKS)
    if seconds is None and bare.startswith("-") and (size := written_seconds(bare[1:])) is not None:
        if size == 0:  # '-0', '-0s': zero whatever its sign, nothing negative to refuse
            return 0.0
        # "use a number of seconds in digits 0-9" left '-5s' looking like one.
        raise InvalidArgument(f"bad duration {text!r}: it is negative (drop the '-')")
    if seconds is None:
        raise InvalidArgument(
            f"bad duration {text!r}: use a number of seconds in digits 0-9, or one with a "
            "unit: 500ms, 30s, 10m, 2h, 1d"
        )
    if seconds > LONGEST:  # infinity too: 400 digits make one
        raise InvalidArgument(f"bad duration {text!r}: at most {LONGEST / 86_400:g}d (100 years)")
    return seconds


def no_home_folder(path: str) -> str:
    """What is wrong with a `path` whose leading `~` expanduser left as it was: it names a
    user this machine does not have, or is a bare `~` with neither $HOME nor a user entry.
    One wording for the command line's paths (cli.py) and the config file's (config_table.py),
    each putting its option or key first."""
    user = path[1:].partition("/")[0]
    missing = f"this machine has no user {user}" if user else "$HOME is not set"
    return f"{path!r}: {missing}, so ~{user} names no home folder: write its full path"


def parse_integer(text: str) -> int:
    """A whole number as people type it: digits 0-9 with an optional sign. int() also takes
    "5_000", " 5" and other scripts' digits ("\u0663", fullwidth "\uff13"), which nobody means
    as a priority or a count."""
    if not _INTEGER.fullmatch(text):
        raise InvalidArgument(f"bad number {text!r}: use a whole number in digits 0-9")
    try:
        return int(text)
    except ValueError:  # past Python's 4300-digit limit
        raise InvalidArgument(f"bad number {text[:20]!r}...: too many digits") from None


def parse_property(text: str) -> tuple[str, Property]:
    """NAME=VALUE (a string) or NAME:TYPE=VALUE, TYPE one of string int long short byte
    double float bool."""
    head, equals, value = text.partition("=")
    name, colon, kind = head.partition(":")
    if not equals or not name:
        raise InvalidArgument(
            f"bad property {text!r}: use NAME=VALUE or NAME:TYPE=VALUE (TYPE: {', '.join(_TYPES)})"
        )
    if not colon:
        return name, Property(name, PropertyType.STRING, value)
    ptype = _TYPES.get(kind)
    if ptype is None:
        raise InvalidArgument(
            f"bad property type {kind!r} in {text!r}: use one of {', '.join(_TYPES)}"
        )
    return name, Property(name, ptype, _typed_value(ptype, value, text))


# What a property's number may be written as: ASCII digits, as a Java reader of the name
# writes and reads them (DropboxMQ), with a sign; a real also with a point, an exponent, or
# as inf / infinity / nan.
_INTEGER: Final = re.compile(r"[+-]?[0-9]+", re.ASCII)
_REAL: Final = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)",
    re.ASCII | re.IGNORECASE,
)


_WHOLE = "use a whole number in digits 0-9, with an optional sign"
_WRITTEN_AS: Final = {
    PropertyType.BOOLEAN: "use true or false",
    PropertyType.DOUBLE: "use a number in digits 0-9 (such as -2.5 or 1e-3), inf or nan",
    PropertyType.FLOAT: "use a number in digits 0-9 (such as -2.5 or 1e-3), inf or nan",
    PropertyType.BYTE: _WHOLE,
    PropertyType.SHORT: _WHOLE,
    PropertyType.INT: _WHOLE,
    PropertyType.LONG: _WHOLE,
}


def _real(ptype: PropertyType, value: str, text: str) -> float:
    """A double or a float: infinity when written so ("inf", "-Infinity"), never when too
    large, which float() turns into infinity without a word (1e309)."""
    try:
        if not _REAL.fullmatch(value):  # float() also takes "1_0", " 5" and other digits
            raise ValueError(value)
        number = float(value)
    except ValueError:
        raise InvalidArgument(
            f"bad {ptype.name.lower()} value in property {text!r}: {_WRITTEN_AS[ptype]}"
        ) from None
    written = value.strip().lstrip("+-").lower()
    too_big = math.isinf(number) and written not in ("inf", "infinity")
    # A float is a Java float (32 bits): past its largest, the put refused it, but only once
    # the root was made and as an error of the run (exit 1), not a usage error as for a double.
    # Float.MAX_VALUE's own text, 3.4028235e38, is a little over it as a double: fits_float32
    # rounds as Java does, as the put's encoder (store/names.py) takes it.
    if too_big or (
        ptype is PropertyType.FLOAT and math.isfinite(number) and not fits_float32(number)
    ):
        raise InvalidArgument(f"{value} does not fit a {ptype.name.lower()} in property {text!r}")
    return number


def _typed_value(ptype: PropertyType, value: str, text: str) -> bool | int | float | str:
    if ptype in (PropertyType.DOUBLE, PropertyType.FLOAT):
        return _real(ptype, value, text)
    try:
        if ptype is PropertyType.STRING:
            return value
        if ptype is PropertyType.BOOLEAN:
            if value.lower() not in ("true", "false"):
                raise ValueError(value)
            return value.lower() == "true"
        if not _INTEGER.fullmatch(value):  # int() also takes "5_000", " 5" and other digits
            raise ValueError(value)
        number = int(value)
    except ValueError:
        # What to write instead: "bad boolean value" left a user trying yes, 1 and on.
        raise InvalidArgument(
            f"bad {ptype.name.lower()} value in property {text!r}: {_WRITTEN_AS[ptype]}"
        ) from None
    bits = _RANGES[ptype]
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise InvalidArgument(f"{number} does not fit a {ptype.name.lower()} in property {text!r}")
    return number
