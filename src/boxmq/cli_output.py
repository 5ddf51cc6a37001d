"""What the command line prints: lines, bytes, JSON documents and tables on the standard
output, whose refused writes are an `OutputError` (a reader that left stays a
BrokenPipeError), with the values shown on one line and bytes that are not UTF-8 as \\xNN."""

from __future__ import annotations

import base64
import codecs
import datetime
import json
import math
import re
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from boxmq.client.lifecycle import shown
from boxmq.model import PropertyValue, property_text

if TYPE_CHECKING:
    import argparse

__all__ = [
    "OutputError",
    "cell",
    "emit",
    "err",
    "expires",
    "flush",
    "json_body",
    "listed",
    "out",
    "out_bytes",
    "out_json_with_body",
    "said",
    "said_by",
    "table",
    "to_json",
    "when",
]


class OutputError(Exception):
    """The standard output refused a write (`> /dev/full`, a full disk under `> file`): said
    as such, not as an error of the root's disk, which it is not (a reader that left, a
    BrokenPipeError, is not one: see `main`)."""

    def __init__(self, error: OSError) -> None:
        what = error.strerror or str(error)
        super().__init__(f"cannot write its output: {what}")


def out(*values: object, flush: bool = False) -> None:
    """print() to stdout, whose errors other than a closed pipe are an OutputError; the line
    in one write, where print() writes its end apart (two writes reach the output under
    PYTHONUNBUFFERED, or for a line longer than its buffer): another process writing to the
    same pipe, or a reader taking what has come, saw half a line."""
    if sys.stdout is None:  # `serve >&-`: as print(), nothing
        return
    try:
        sys.stdout.write(" ".join(map(str, values)) + "\n")
        if flush:
            sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as error:
        raise OutputError(error) from None


def err(line: str, *, flush: bool = False) -> None:
    """A line to stderr in one write, as `out` writes one to stdout (print() wrote its end
    apart); none when stderr is closed (`2>&-`), where print() wrote it to stdout."""
    if sys.stderr is None:
        return
    sys.stderr.write(line + "\n")
    if flush:
        sys.stderr.flush()


def out_bytes(data: bytes | bytearray) -> None:
    try:
        sys.stdout.buffer.write(data)
    except BrokenPipeError:
        raise
    except OSError as error:
        raise OutputError(error) from None


def flush() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as error:
        raise OutputError(error) from None


def to_json(value: object) -> str:
    """One JSON document; NaN and infinite float properties as the strings "NaN", "Infinity"
    and "-Infinity" (the file name's spelling), which JSON has no numbers for; and text read
    from a name in bytes that are not UTF-8 with those bytes as \\xNN, which a JSON reader
    would otherwise turn into U+FFFD and lose."""
    return json.dumps(_jsonable(value), allow_nan=False)


def _jsonable(value: object) -> object:
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {shown(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value


def table(rows: list[dict[str, Any]]) -> None:
    columns = list(dict.fromkeys(column for row in rows for column in row))  # every row's
    widths = {c: max(len(c), *(len(cell(r.get(c, ""))) for r in rows)) for c in columns}
    out("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        cells = (cell(row.get(c, "")) for c in columns)
        out(
            "  ".join(
                cell.ljust(widths[c]) for c, cell in zip(columns, cells, strict=True)
            ).rstrip()
        )


_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F)} | {0x0A: "\\n", 0x09: "\\t"}


def cell(value: object) -> str:
    """A value on one line (a table cell, a line of `get`'s header): control characters (a
    newline in a queue's name) escaped, and bytes that are not UTF-8 as \\xNN. One with a
    blank at an end (a queue named ' ', 'jobs ') is quoted, as an error quotes a name: left
    bare it was a row with no name, or two names alike; and so is one that starts with a
    quote, which would read as quoted."""
    text = str(value)
    if text and (text[0].isspace() or text[-1].isspace() or text[0] in "'\""):
        return said(repr(text))
    return shown(text).translate(_CONTROLS)


# A byte that is not UTF-8 (a surrogate escape, PEP 383) as repr() writes it, after an even
# number of backslashes: the text `\udcff` a user typed is repr()'d `\\udcff`, and stays
# (only where a message gives it without repr(), as argparse's "unrecognized arguments"
# does, is it read as the byte: text no one types).
_REPR_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\udc([89a-f][0-9a-f])")


def said(message: str) -> str:
    """A message fit for the standard error, on one line: what the user gave in bytes that
    are not UTF-8 (an argument, a file name, which Python reads with surrogate escapes) as
    \\xNN, as `peek` and `ls` show them, whether the message holds them as they are or as
    repr() writes them ('q\\udcff', a Python escape no shell user can read or type); and its
    control characters (a newline in an id or a file name given) escaped, as `cell` does."""
    return bytes_shown(message).translate(_CONTROLS)


def bytes_shown(message: str) -> str:
    """`message` with what the user gave in bytes that are not UTF-8 as \\xNN, whether it
    holds them as they are or as repr() writes them: what `said` and the log's formatter
    (cli.OneLineFormatter) write, each then escaping control characters its own way."""
    if message.isascii() and "\\udc" not in message:
        return message  # the common case: nothing to look for
    message = _REPR_ESCAPE.sub(r"\1\\x\2", message)
    try:
        return shown(message)
    except UnicodeEncodeError:  # a lone surrogate no byte escapes to (not from the system)
        return message.encode("utf-8", "backslashreplace").decode()


def when(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(timespec="seconds")


def expires(epoch_ms: int) -> str:
    """An expiration as `when` shows it; one that a date cannot show (after year 9999, such
    as Java's Long.MAX_VALUE that a script may write for "never") as the epoch ms its name
    gives: printing what was locked must not fail on what an outside producer wrote."""
    try:
        return when(epoch_ms / 1000)
    except (OverflowError, ValueError, OSError):
        return f"{epoch_ms} ms after 1970-01-01T00:00:00+00:00"


def json_body(body: bytes) -> dict[str, str]:
    """A body in a JSON record: `body` as text, bytes that are not UTF-8 as `\\xNN` (for
    reading), and then also `body_base64`, the bytes exactly: a literal backslash-x in a
    body reads the same as an escaped byte, so the text alone could not give them back."""
    try:
        return {"body": body.decode()}
    except UnicodeDecodeError:
        shown = body.decode("utf-8", "backslashreplace")
        return {"body": shown, "body_base64": base64.b64encode(body).decode("ascii")}


_CHUNK = 3 << 16  # a multiple of 3: base64 of each chunk joins into that of the whole


def out_json_with_body(
    record: dict[str, Any],
    body: bytes,
    after: dict[str, Any] | None = None,
    *,
    flush_too: bool = False,
) -> None:
    """`to_json(record | json_body(body) | after)` as one line in one write, as `out` writes
    it, built a chunk of the body at a time: the whole document made at once took some 17
    copies of a big body that is not UTF-8 (its text, shown's, JSON's escaping, the line's,
    base64's), where the line (all ASCII) is now made once, in bytes; the bytes written are
    the same. `flush_too`: flushed after, as `out(..., flush=True)` (a stream of them)."""
    if sys.stdout is None:  # `serve >&-`: as print(), nothing
        return
    head = to_json(record)
    line = bytearray(head[:-1].encode("ascii"))
    line += b', "body": "' if record else b'"body": "'
    for shown_bytes in _shown_chunks(body):
        line += json.dumps(shown_bytes.decode())[1:-1].encode("ascii")
    line += b'"'
    if not _is_utf_8(body):
        line += b', "body_base64": "'
        for start in range(0, len(body), _CHUNK):
            line += base64.b64encode(body[start : start + _CHUNK])
        line += b'"'
    if after:
        line += b", " + to_json(after)[1:].encode("ascii")
    else:
        line += b"}"
    line += b"\n"
    flush()  # what was written as text goes before these bytes
    out_bytes(line)
    if flush_too:
        flush()


def out_text_with_body(head: str, body: bytes, *, flush_too: bool = False) -> None:
    """`out(head + body as text)` for a body that may be big and not UTF-8, in one write
    too, built a chunk of the body at a time into the line's bytes: the text made whole, and
    then the line of it, took 7.5 to 12 times the body (each byte that is not UTF-8 is four
    characters, \\xNN). The bytes written are the same, in stdout's own encoding."""
    if sys.stdout is None:  # `serve >&-`: as print(), nothing
        return
    encoding, errors = sys.stdout.encoding, sys.stdout.errors or "strict"
    line = bytearray(head.encode(encoding, errors))
    as_is = codecs.lookup(encoding).name == "utf-8"
    for shown_bytes in _shown_chunks(body):
        line += shown_bytes if as_is else shown_bytes.decode().encode(encoding, errors)
    line += b"\n" if as_is else "\n".encode(encoding, errors)
    flush()  # what was written as text goes before these bytes
    out_bytes(line)
    if flush_too:
        flush()


def _shown_chunks(body: bytes) -> Iterator[bytes]:
    """`body.decode("utf-8", "backslashreplace").encode()` a chunk at a time: the body in
    UTF-8 with each byte that is not UTF-8 as the four characters \\xNN. The decoder calls
    its error handler back for each such byte, so that a 200 MB body of random bytes took 38 s
    to show on a busy machine and outlasted subscribe's 30 s lock; decoded with surrogate
    escapes (PEP 383), which the UTF-8 encoder writes as \\udcNN by itself, \\udc then made
    \\x, the text comes in half the time, and that body's line in 9 s (`get --json` 15 s). A
    body that holds the text \\udc, which would be taken for such an escape, goes the slow
    way."""
    slow = b"\\udc" in body
    decoder = codecs.getincrementaldecoder("utf-8")(
        "backslashreplace" if slow else "surrogateescape"
    )
    for start in range(0, len(body), _CHUNK):
        yield _encoded(decoder.decode(body[start : start + _CHUNK]), slow=slow)
    yield _encoded(decoder.decode(b"", final=True), slow=slow)


def _encoded(text: str, *, slow: bool) -> bytes:
    if slow:
        return text.encode()
    return text.encode("utf-8", "backslashreplace").replace(b"\\udc", b"\\x")


def _is_utf_8(body: bytes) -> bool:
    try:
        str(body, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


def said_by(args: argparse.Namespace) -> str:
    """What an error line starts with: the command as typed, `boxmq put`, and with its action
    for `session` (`boxmq session end`), whose actions do different things."""
    if args.name == "session":
        return f"boxmq session {args.action}"
    return f"boxmq {args.name}"


def listed(properties: Mapping[str, PropertyValue]) -> str:
    """Properties as NAME=VALUE,... for a person to read; bytes that are not UTF-8 as \\xNN.
    Values in Java's spelling (`1.0E20`, `true`, `NaN`), as the file name, the Spark source
    and an MQTT v5 User Property give them: Python's (`1e+20`, `True`) read as another value."""
    return shown(",".join(f"{name}={property_text(value)}" for name, value in properties.items()))


def emit(args: argparse.Namespace, record: dict[str, Any], text: str) -> None:
    """`record` as JSON with --json, else `text`: what a command that did one thing says, on
    one line as `said` writes it (a newline in a queue's name printed two)."""
    out(to_json(record) if args.json else said(text))
