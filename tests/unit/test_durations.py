"""The one check every lock timeout, delay, extension and expiry passes before anything moves."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.cli_args import parse_duration
from boxmq.core.durations import (
    LONGEST,
    check_seconds,
    check_wait,
    in_unit_of,
    spelled,
    written_seconds,
)
from boxmq.errors import InvalidArgument


@given(st.floats(min_value=0, max_value=LONGEST, exclude_min=True))
def test_a_positive_finite_duration_up_to_a_century_passes(seconds: float) -> None:
    assert check_seconds("x", seconds) == seconds


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (0, "x must be a finite number of seconds > 0, not 0"),
        (-1.5, "not -1.5"),
        (math.nan, "not nan"),
        (math.inf, "not inf"),
        (-math.inf, "not -inf"),
        ("30s", "not '30s'"),
        (None, "not None"),
        (True, "not True"),  # 1 to math: lock_timeout=True was a lock of 1 s
        (False, "not False"),
        (LONGEST * 1.01, "too long: at most 3.1536e+09 (100 years)"),
        (1e300, "x of 1e+300 seconds is too long"),
        (10**400, "x of more than 1e+308 seconds is too long"),  # OverflowError from a float
    ],
)
def test_anything_else_is_refused_saying_what_to_give(value: object, says: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(says)) as refused:
        check_seconds("x", value)  # type: ignore[arg-type]
    assert str(refused.value).startswith("x ")  # it names what was given


def test_zero_passes_only_where_it_is_allowed() -> None:
    assert check_seconds("delay", 0, zero=True) == 0.0
    with pytest.raises(InvalidArgument, match=">= 0, not -1"):
        check_seconds("delay", -1, zero=True)


@pytest.mark.parametrize("value", [math.nan, "1", b"1", True, [1]])
def test_a_receive_timeout_is_none_or_a_number(value: object) -> None:
    with pytest.raises(InvalidArgument, match="receive timeout must be None or a number"):
        check_wait(value)  # type: ignore[arg-type]


def test_a_receive_timeout_past_a_century_waits_on() -> None:
    assert [check_wait(v) for v in (None, -1, 0, 2.5, math.inf, 1e12, 10**400, -(10**400))] == [
        None,
        -1,
        0,
        2.5,
        None,
        None,
        None,  # an int past a float's range raised OverflowError, here or in the receive
        0,
    ]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (86_400.0, "1d"),
        (129_600.0, "36h"),
        (3_600.0, "1h"),
        (600.0, "10m"),
        (90.0, "90s"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (0.05, "50ms"),
        (0.3, "300ms"),
        (0.0015, "1.5ms"),
        (1_234_567.5, "1234567.5s"),
        (LONGEST, "36500d"),
    ],
)
def test_a_duration_is_spelled_as_the_docs_write_it(seconds: float, text: str) -> None:
    """serve's log said "deleted after 86400s" of a retention set, and documented, as `1d`."""
    assert spelled(seconds) == text


@given(st.integers(min_value=1, max_value=int(LONGEST * 1000)))
def test_a_spelled_duration_reads_back_as_itself(milliseconds: int) -> None:
    seconds = milliseconds / 1000
    assert math.isclose(parse_duration(spelled(seconds)), seconds, rel_tol=1e-9)


def test_a_duration_is_read_in_one_place_in_two_spellings() -> None:
    # The command line and the config file take "2h"; the Spark options also "2 h" and "5.".
    assert [written_seconds(t) for t in ("30", " 1.5 ", "500ms", "2h", "1d")] == [
        30.0,
        1.5,
        0.5,
        7200.0,
        86400.0,
    ]
    assert [written_seconds(t) for t in ("2 h", "5.", "1e3", "-5", "\u0663", "5sec", "")] == [
        None
    ] * 7
    assert [written_seconds(t, spaced=True) for t in ("2 h", "5.", " 90 s ", "1e3")] == [
        7200.0,
        5.0,
        90.0,
        None,
    ]
    assert written_seconds("9" * 400) == math.inf  # each caller says how long it takes


@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize(
    "text", ["2\u00a0h", "2\u3000h", "\u30005s", "5s\u00a0", "\u00851s", "\uff15s"]
)
def test_a_duration_is_written_in_ascii_only(text: str, spaced: bool) -> None:
    # A no-break or ideographic space (a pasted "2 h") is no blank, as "\u0663" is no digit.
    assert written_seconds(text, spaced=spaced) is None


@pytest.mark.parametrize("text", ["19h\u3000", "\u00a019h", "\u008519h"])
def test_a_limit_is_told_in_the_unit_of_an_ascii_duration_only(text: str) -> None:
    # in_unit_of reads the unit as written_seconds does: no unit in what it does not read.
    assert in_unit_of(65535, " 19h ") == "about 18.2h"
    assert in_unit_of(65535, text) == spelled(65535)
