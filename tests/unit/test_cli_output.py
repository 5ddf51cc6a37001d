"""What the command line writes to the standard error (boxmq.cli_output.said)."""

from __future__ import annotations

import sys
import tracemalloc

import pytest

from boxmq import cli_output
from boxmq.cli_output import (
    cell,
    json_body,
    out_json_with_body,
    out_text_with_body,
    said,
    to_json,
)


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


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (" ", "' '"),  # a row with no name, left bare
        ("jobs ", "'jobs '"),
        ("\u3000x", r"'\u3000x'"),  # a blank no eye tells from a space
        ("'x'", "\"'x'\""),  # would read as x quoted
        (" \udcff\n", r"' \xff\n'"),
        ("a b", "a b"),
        ("jobs", "jobs"),
        ("", ""),  # a column a row lacks
        (7, "7"),
    ],
)
def test_a_cell_blank_at_an_end_is_quoted_as_an_error_quotes_a_name(
    value: object, shown: str
) -> None:
    assert cell(value) == shown


_CHUNK = cli_output._CHUNK
_BODIES = [
    b"",
    b"plain",
    '\u00e9 \U0001f600 "quoted" \\x41\n\t\x00'.encode(),
    b"\xff\xfe not utf-8",
    # a character and an invalid sequence across a chunk's end, and a body of whole chunks
    b"a" * (_CHUNK - 1) + "\U0001f600".encode() + b"\xf0\x9f" + b"b" * _CHUNK,
    b"\xe2\x82" + b"x" * (_CHUNK - 3) + b"\xe2\x82\xac" + b"\xff" * (2 * _CHUNK - 1),
    b"y" * (2 * _CHUNK),
    # beside a byte that is not UTF-8: a character whose JSON escape is a surrogate pair
    # ending \udc80-\udcff (U+10080), and the text \ud800, a backslash, which JSON escapes
    "\U00010080".encode() + b"\xff" + "\U000100ff\U00010000".encode() + b"\xfe",
    b"\\ud800\xff \\\xfe \\\\udc80",
]


@pytest.mark.parametrize("body", _BODIES)
@pytest.mark.parametrize("record", [{}, {"id": "q\udcff", "n": 1.5, "p": {"k": float("nan")}}])
@pytest.mark.parametrize("after", [{}, {"reply-to": "r\udcfe/\n", "x": float("-inf")}])
def test_a_body_written_in_chunks_is_the_json_record_byte_for_byte(
    body: bytes,
    record: dict[str, object],
    after: dict[str, object],
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    print("before", end=" ")  # text written before goes out before the line
    out_json_with_body(record, body, after)
    expected = "before " + to_json(record | json_body(body) | after) + "\n"
    assert capsysbinary.readouterr().out == expected.encode()


_BIG = {
    "not UTF-8": bytes(range(256)) * (16 << 12),  # 16 MiB, half of it not UTF-8
    "UTF-8": ("\u00e9\u20aca\U0001f600" * ((16 << 20) // 10)).encode(),  # 16 MiB, UTF-8
}


@pytest.mark.parametrize("body", _BIG.values(), ids=_BIG.keys())
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_big_body_costs_a_few_chunks_not_its_line(
    body: bytes, as_json: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line made whole before its one write took 6 times a body half of which is not
    UTF-8 with --json (8.6 for one in UTF-8, decoded whole to tell that it is), 2.9 without,
    by tracemalloc: `get --json` of 200 MB near a GB; written as it is made, a few chunks."""
    with open("/dev/null", "w") as null:  # not kept in memory
        monkeypatch.setattr(sys, "stdout", null)
        tracemalloc.start()
        try:
            if as_json:
                out_json_with_body({"id": "x"}, body)
            else:
                out_text_with_body("t/a ", body)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < len(body) / 2, f"{peak / len(body):.2f} times the body"
