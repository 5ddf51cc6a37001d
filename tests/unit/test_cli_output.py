"""What the command line writes to the standard error (boxmq.cli_output.said)."""

from __future__ import annotations

import pytest

from boxmq.cli_output import said


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        (
            "destination name " + repr("q\udcff") + " is not valid Unicode",
            r"destination name 'q\xff' is",
        ),
        ("bad\udcfe: no such message", r"bad\xfe: no such message"),  # given as it is
        (repr("a\\udcff"), r"'a\\udcff'"),  # a backslash typed, then 'udcff': stays
        (repr("\\\udc80"), r"'\\\x80'"),  # a backslash typed, then a byte
        ("x\ud800 y", r"x\ud800 y"),  # a lone surrogate no byte gives: escaped, not a crash
        ("plain é", "plain é"),
    ],
)
def test_said_shows_bytes_that_are_not_utf_8_as_xnn(message: str, shown: str) -> None:
    assert shown in said(message)


def test_said_is_one_line_whatever_the_message_repeats() -> None:
    said_ = said("boxmq ack: a\nb\r\udcff: no such message")
    assert said_ == r"boxmq ack: a\nb\x0d\xff: no such message"
