"""Durations people give: lock timeouts, unlock delays, lock extensions, expiries.

The units a duration is written in, and how such a string is read, are here once: the command
line, the config file and the Spark options read them alike (docs/cli.md, docs/spark.md).

Each becomes a deadline in epoch milliseconds, kept in a file name (a lock's deadline has 15
digits) or a property (a delay's `bx_nb` is a long). So every one is checked here, once, before
anything is moved: finite, positive, and at most `LONGEST`, far inside what those fields hold.
A duration that passes can never fail later, with its message already half-way somewhere.
"""

from __future__ import annotations

import math
import re

from boxmq.errors import InvalidArgument

__all__ = [
    "BLANKS",
    "LONGEST",
    "check_seconds",
    "check_wait",
    "in_unit_of",
    "spelled",
    "written_seconds",
]

LONGEST = 100 * 365 * 86_400.0  # seconds: a century, the longest boxmq waits for anything


def check_seconds(what: str, value: float, *, zero: bool = False) -> float:
    """`value` if it is a usable number of seconds (> 0, or >= 0 with `zero`); else an
    InvalidArgument that names `what` and says what to give."""
    least = ">= 0" if zero else "> 0"
    try:
        usable = math.isfinite(value) and (value >= 0 if zero else value > 0)
    except TypeError:
        usable = False
    except OverflowError:  # an int past a float's range (10**400): finite, and too long below
        usable = value > 0
    if isinstance(value, bool):  # True is 1 to math: lock_timeout=True locked for 1 s
        usable = False
    if not usable:
        raise InvalidArgument(f"{what} must be a finite number of seconds {least}, not {value!r}")
    if value > LONGEST:
        # "{:g}" of an int past a float's range (10**400) raised OverflowError.
        shown = f"{value:g}" if value <= 1e308 else "more than 1e+308"
        raise InvalidArgument(
            f"{what} of {shown} seconds is too long: at most {LONGEST:g} (100 years)"
        )
    return float(value)


def check_wait(value: float | None) -> float | None:
    """`value` if it is a usable receive timeout: None (wait on), or a number of seconds that
    is not NaN (0 or less: look once). NaN passes every `now >= end` as false, so a receive
    given it waited for ever; a str or a bool is a caller's mistake. Over a century (infinity
    too) is None: a condition's wait raised OverflowError for more than threading.TIMEOUT_MAX."""
    # The usual timeout in one look: type(), as a bool is no number here; NaN is never <=.
    if (type(value) is float or type(value) is int) and -LONGEST <= value <= LONGEST:
        return value
    if value is None:
        return None
    nan = isinstance(value, float) and math.isnan(value)  # math.isnan(10**400): OverflowError
    if isinstance(value, bool) or not isinstance(value, (int, float)) or nan:
        raise InvalidArgument(
            f"a receive timeout must be None or a number of seconds (0: do not wait), not {value!r}"
        )
    # Past a century either way: wait on, or look once (0), where an int past a float's range
    # (10**400) raised OverflowError as the receive added it to the clock.
    return None if value > LONGEST else 0.0


# The units a duration is written in (docs/cli.md, docs/configuration.md, docs/spark.md).
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3_600.0, "d": 86_400.0}
_UNIT = "|".join(_UNITS)
# Digits 0-9 only: `\d` and float() also take other scripts' digits ("\u0663", "\uff13").
_WRITTEN = re.compile(rf"([0-9]+(?:\.[0-9]+)?)({_UNIT})?", re.ASCII)
# Spark's options have also taken "5." and a blank before the unit ("2 h") since they came;
# an ASCII blank: `\s` alone also takes a no-break or ideographic space ("2\u3000h").
_SPACED = re.compile(rf"([0-9]+(?:\.[0-9]*)?)\s*({_UNIT})?", re.ASCII)
# The blanks around a duration (or a Spark option's count) that are ignored: str.strip()
# alone also drops U+00A0, U+3000.
BLANKS = " \t\n\r\f\v"


def written_seconds(text: str, *, spaced: bool = False) -> float | None:
    """The seconds `text` writes: a number of seconds, or one with a unit ("500ms", "30s",
    "10m", "2h", "1d"), ASCII blanks around it ignored; None if it is no duration. `spaced` also
    takes a blank before the unit and a number ending in its point, as the Spark options do.
    The number is not checked (400 digits make infinity): each caller says what it takes."""
    match = (_SPACED if spaced else _WRITTEN).fullmatch(text.strip(BLANKS))
    return None if match is None else float(match[1]) * _UNITS[match[2] or "s"]


def spelled(seconds: float) -> str:
    """`seconds` as a duration is written in the docs and the config: in the largest unit that
    makes it a whole number (86400 as `1d`, 90 as `90s`), else in seconds (`1.5s`), and under
    a second in ms (`50ms`), never with an exponent. A log that said "deleted after 86400s"
    of a retention set as "1d" left the reader to do the sum; so it reads as it was set."""
    for unit in ("d", "h", "m", "s"):
        count = seconds / _UNITS[unit]
        whole = round(count)
        if whole >= 1 and math.isclose(count, whole, rel_tol=1e-9):
            return f"{whole}{unit}"
    number, unit = (seconds, "s") if seconds >= 1 else (seconds * 1000, "ms")
    return f"{number:.3f}".rstrip("0").rstrip(".") + unit


def in_unit_of(seconds: float, text: str) -> str:
    """`seconds` in the unit the duration `text` was written in ("about 18.2h" for 65535 and
    "19h"), or in the next smaller one it makes at least 1 of (65535 for "1d": hours), or
    `spelled` if `text` has no unit: a limit told in seconds alone left a user who wrote
    hours to do the sum."""
    match = _WRITTEN.fullmatch(text.strip(BLANKS))  # as written_seconds reads it
    if match is None or match[2] is None:
        return spelled(seconds)
    units = list(_UNITS)[: list(_UNITS).index(match[2]) + 1]  # ms up to the one written
    unit = next((u for u in reversed(units) if seconds >= _UNITS[u]), "ms")
    count = seconds / _UNITS[unit]
    number = f"{count:.1f}".rstrip("0").rstrip(".")
    return f"{number}{unit}" if float(number) == count else f"about {number}{unit}"
