"""Property values as people type them on the command line (`-p NAME:TYPE=VALUE`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.cli_args import parse_duration, parse_integer, parse_property
from boxmq.errors import InvalidArgument
from boxmq.model import PropertyType


@given(st.integers(-(2**63), 2**63 - 1), st.sampled_from(["", "+"]))
def test_a_long_written_in_ascii_digits_reads_back(number: int, plus: str) -> None:
    written = f"{plus}{number}" if number >= 0 else str(number)
    assert parse_property(f"n:long={written}")[1].value == number


@given(st.floats(allow_nan=False))
def test_a_double_written_as_python_writes_it_reads_back(number: float) -> None:
    assert parse_property(f"d:double={number!r}")[1].value == number


@pytest.mark.parametrize(
    "text",
    [
        "n:int=\u0663",  # ARABIC-INDIC DIGIT THREE: int() takes it
        "n:int=5_000",  # Python's separator: no Java reader writes it
        "n:int= 5",
        "n:int=5 ",
        "n:long=0x10",
        "d:double=1_0",
        "d:double= 2",
        "d:double=\u0661.5",
        "d:float=0x1p3",
    ],
)
def test_numbers_that_only_python_would_read_are_refused(text: str) -> None:
    with pytest.raises(InvalidArgument, match=r"bad (int|long|double|float) value"):
        parse_property(text)


def test_the_usual_spellings_of_a_real_are_taken() -> None:
    values = [parse_property(f"d:double={v}")[1].value for v in ("1.", ".5", "-2e-3", "1E5")]
    assert values == [1.0, 0.5, -0.002, 100000.0]
    assert parse_property("d:double=-Infinity")[1].type is PropertyType.DOUBLE


@pytest.mark.parametrize("text", ["\u0663", "\uff13", "\uff130", "5_000", " 5", "0x10", "", "+"])
def test_a_number_is_digits_0_to_9_not_whatever_int_takes(text: str) -> None:
    with pytest.raises(InvalidArgument, match="use a whole number in digits 0-9"):
        parse_integer(text)


def test_a_number_may_have_a_sign_and_too_many_digits_are_refused_not_raised() -> None:
    assert [parse_integer(t) for t in ("7", "+7", "-7", "007")] == [7, 7, -7, 7]
    with pytest.raises(InvalidArgument, match="too many digits"):
        parse_integer("9" * 5000)


@pytest.mark.parametrize("text", ["\uff130s", "\u0663", "1.\u0665s", "\u0661\u0660m"])
def test_a_duration_in_other_scripts_digits_is_refused(text: str) -> None:
    with pytest.raises(InvalidArgument, match="in digits 0-9"):
        parse_duration(text)


def test_durations_in_ascii_digits_read_as_before() -> None:
    assert [parse_duration(t) for t in ("30", "1.5", "500ms", " 2m ", "1d")] == [
        30.0,
        1.5,
        0.5,
        120.0,
        86400.0,
    ]


@pytest.mark.parametrize("text", ["-0", "-0s", " -0.0 ", "-0ms", "-00d"])
def test_a_zero_duration_with_a_minus_sign_is_zero_not_negative(text: str) -> None:
    """`--idle=-0` was refused as "it is negative (drop the '-')", though it is zero."""
    assert parse_duration(text) == 0.0


def test_a_duration_below_zero_is_still_refused_as_negative() -> None:
    with pytest.raises(InvalidArgument, match=r"it is negative \(drop the '-'\)"):
        parse_duration("-0.001s")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a:bool=yes", "bad boolean value in property 'a:bool=yes': use true or false"),
        ("n:int=5x", "bad int value in property 'n:int=5x': use a whole number in digits 0-9"),
        ("d:double=two", "bad double value in property 'd:double=two': use a number in digits"),
    ],
)
def test_a_property_value_not_of_its_type_is_told_how_to_write_it(text: str, said: str) -> None:
    """ "bad boolean value in property 'a:bool=yes'" alone left a user trying yes, 1 and on."""
    with pytest.raises(InvalidArgument) as refused:
        parse_property(text)
    assert str(refused.value).startswith(said)
