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
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from boxmq.client.lifecycle import shown
from boxmq.model import PropertyValue, property_text

if TYPE_CHECKING:
    import argparse

__all__ = [
    "OutputError",
    "cell",
    "cells",
    "emit",
    "err",
    "expires",
    "flush",
    "json_body",
    "listed",
    "of",
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


# Two blanks in a row, what a table puts between two columns: white space other than the
# control characters (a tab, a newline), which are shown escaped (\t, \n).
_COLUMN_GAP = re.compile(r"[^\S\x00-\x1f]{2}")


def cell(value: object) -> str:
    """A value on one line (a table cell, a line of `get`'s header, a name in the line that
    says what a command did): control characters (a newline in a queue's name) escaped, and
    bytes that are not UTF-8 as \\xNN. One with a blank at an end (a queue named ' ',
    'jobs ') is quoted, as an error quotes a name: left bare it was a row with no name, or
    two names alike; so is one that starts with a quote, which would read as quoted, and one
    holding two blanks in a row ('a  b'), which a table showed as two columns."""
    text = str(value)
    if text and (
        text[0].isspace() or text[-1].isspace() or text[0] in "'\"" or _COLUMN_GAP.search(text)
    ):
        return said(repr(text))
    return shown(text).translate(_CONTROLS)


def cells(values: Iterable[object]) -> str:
    """Names in a line, each as `cell` shows it, comma-separated."""
    return ", ".join(cell(value) for value in values)


def of(filter: str, subscriber: object) -> str:
    """A durable subscription (or share group) and its subscriber (or member) named in a
    line, `news/# of reader`, each as `cell` shows it, as `ls` does."""
    return f"{cell(filter)} of {cell(subscriber)}"


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
_WRITE_AT = 1 << 20  # a line's bytes made, at which they are written


def out_json_with_body(
    record: dict[str, Any],
    body: bytes,
    after: dict[str, Any] | None = None,
    *,
    flush_too: bool = False,
) -> None:
    """`to_json(record | json_body(body) | after)` as one line, as `out` writes it, made a
    chunk of the body at a time and written as it is made (`_out_line`): the whole document
    made at once took some 17 copies of a big body that is not UTF-8 (its text, shown's,
    JSON's escaping, the line's, base64's), and the whole line, all ASCII, 4.9. The bytes
    written are the same. `flush_too`: flushed after, as `out(..., flush=True)` (a stream
    of them)."""
    if sys.stdout is None:  # `serve >&-`: as print(), nothing
        return
    head = to_json(record)[:-1] + (', "body": "' if record else '"body": "')
    end = f", {to_json(after)[1:]}" if after else "}"
    text = _BodyText(body)

    def pieces() -> Iterator[bytes | memoryview]:
        yield head.encode("ascii")
        for chunk in text:
            yield _json_escaped(chunk)
        yield b'"'
        if not text.utf_8:
            yield b', "body_base64": "'
            for start in range(0, len(body), _CHUNK):
                yield base64.b64encode(body[start : start + _CHUNK])
            yield b'"'
        yield f"{end}\n".encode("ascii")

    _out_line(pieces(), flush_too=flush_too)


def _out_line(pieces: Iterable[bytes | memoryview], *, flush_too: bool) -> None:
    """A line made of `pieces` to the standard output: in one write, as `out` writes one,
    up to _WRITE_AT bytes; past that a write each time that much is made, not the whole
    line held first (one write(2) of it was not one to a pipe either: it takes PIPE_BUF,
    4 KiB, in one piece)."""
    flush()  # what was written as text goes before these bytes
    line = bytearray()
    for piece in pieces:
        line += piece
        if len(line) >= _WRITE_AT:
            out_bytes(line)
            line = bytearray()
    out_bytes(line)
    if flush_too:
        flush()


class _BodyText:
    """A body decoded a chunk at a time, each byte that is not UTF-8 as a lone surrogate
    (PEP 383's surrogate escape, made by the decoder in C, where backslashreplace calls back
    for each such byte); `utf_8`, once read through, whether there was none. Strict until
    the first such byte, so that a UTF-8 body is not decoded a second time to tell."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self.utf_8 = True

    def __iter__(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        for start in range(0, len(self._body), _CHUNK):
            yield self._decoded(decoder, self._body[start : start + _CHUNK], final=False)
        yield self._decoded(decoder, b"", final=True)

    def _decoded(self, decoder: codecs.IncrementalDecoder, data: bytes, *, final: bool) -> str:
        if self.utf_8:
            try:
                return decoder.decode(data, final)
            except UnicodeDecodeError:  # which kept the decoder's state as it was
                self.utf_8 = False
                decoder.errors = "surrogateescape"
        return decoder.decode(data, final)


# A character past U+FFFF, whose JSON escape is a surrogate pair (U+10080 \ud800\udc80),
# its second half taken for a byte that is not UTF-8 by _json_escaped's replace: put back.
_SPLIT_PAIR = re.compile(r"(\\ud[89ab][0-9a-f]{2})\\\\x")


def _json_escaped(text: str) -> memoryview:
    """JSON's escape of `text` (`_BodyText`'s) between its quotes, in ASCII bytes, with each
    byte that is not UTF-8 as JSON's for the four characters \\xNN (`\\\\xNN`), as `json_body`
    writes it: what JSON writes of the surrogate escape (`\\udcNN`) made so by a replace,
    and not by decoding the body with backslashreplace and JSON writing that, which took
    twice the time. A text holding `\\ud` (a backslash then ud, which JSON writes `\\\\ud`),
    where the replace would find the end of what it did not make, goes that way."""
    escaped = json.dumps(text)
    if "\\udc" in escaped:
        if "\\ud" in text:
            as_shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            escaped = json.dumps(as_shown)
        else:
            escaped = _SPLIT_PAIR.sub(r"\1\\udc", escaped.replace("\\udc", "\\\\x"))
    return memoryview(escaped.encode("ascii"))[1:-1]


def out_text_with_body(head: str, body: bytes, *, flush_too: bool = False) -> None:
    """`out(head + body as text)` for a body that may be big and not UTF-8, as one line
    (`_out_line`), made a chunk of the body at a time: the text made whole, and then the
    line of it, took 7.5 to 12 times the body (each byte that is not UTF-8 is four
    characters, \\xNN). The bytes written are the same, in stdout's own encoding."""
    if sys.stdout is None:  # `serve >&-`: as print(), nothing
        return
    encoding, errors = sys.stdout.encoding, sys.stdout.errors or "strict"
    as_is = codecs.lookup(encoding).name == "utf-8"

    def pieces() -> Iterator[bytes]:
        yield head.encode(encoding, errors)
        for shown_bytes in _shown_chunks(body):
            yield shown_bytes if as_is else shown_bytes.decode().encode(encoding, errors)
        yield b"\n" if as_is else "\n".encode(encoding, errors)

    _out_line(pieces(), flush_too=flush_too)


def _shown_chunks(body: bytes) -> Iterator[bytes]:
    """`body.decode("utf-8", "backslashreplace").encode()` a chunk at a time: the body in
    UTF-8 with each byte that is not UTF-8 as the four characters \\xNN. The decoder calls
    its error handler back for each such byte, so that a 200 MB body of random bytes took 38 s
    to show on a busy machine and outlasted subscribe's 30 s lock; decoded with surrogate
    escapes (PEP 383, `_BodyText`, as --json does), which the UTF-8 encoder writes as \\udcNN
    by itself, \\udc then made \\x, the text comes in half the time, and that body's line in
    9 s. A body that holds the text \\udc, which would be taken for such an escape, goes the
    slow way."""
    if b"\\udc" in body:
        decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        for start in range(0, len(body), _CHUNK):
            yield decoder.decode(body[start : start + _CHUNK]).encode()
        yield decoder.decode(b"", final=True).encode()
        return
    for text in _BodyText(body):
        yield text.encode("utf-8", "backslashreplace").replace(b"\\udc", b"\\x")


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
