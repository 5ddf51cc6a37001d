"""Each log record of boxmq on one line, whatever handler an application writes it with.

What a client or a script chooses (a queue's or a stray file's name, a client id, a topic:
MQTT lets them hold line breaks) goes into boxmq's log lines, and into the messages of
exceptions whose tracebacks it logs (a library user's authenticator that failed on a client
id). `boxmq serve` writes its records through cli.OneLineFormatter; an application embedding
boxmq writes them through its own handlers, where a newline in a name began a line that read
as another record and an escape sequence could rewrite a terminal's screen. So every logger of
boxmq (`LOGGERS`) has a filter that writes such a record's message, and the messages in its
traceback, with their control characters escaped as repr() does (\\n, \\x1b), and bytes that
are not UTF-8 (surrogate escapes) as \\xNN. A record without any is left as it was made.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterator
from typing import Final

__all__ = ["FORMAT", "LOGGERS", "install", "one_line"]

# How boxmq's own handlers write a record (the CLI's, and a Spark stream's runner process's):
# its time, its level, its logger, then its message.
FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Every logger boxmq's modules log to (tests/unit/test_log_lines.py checks the list).
LOGGERS: Final = (
    "boxmq",
    "boxmq.cli_session",
    "boxmq.exactly_once",
    "boxmq.mqtt",
    "boxmq.mqtt.session_record",
    "boxmq.queue",
    "boxmq.serve",
    "boxmq.spark",
    "boxmq.store",
    "boxmq.sweep",
    "boxmq.xmpp",
)

# Control characters but the tab, the line and paragraph separators, and surrogates.
_UNSAFE: Final = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def one_line(text: str) -> str:
    """`text` with its control characters as repr() writes them and bytes not UTF-8 as \\xNN."""
    return _UNSAFE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match[0]
    if "\udc80" <= char <= "\udcff":  # a byte that is not UTF-8 (os.fsdecode's surrogate)
        return f"\\x{ord(char) - 0xDC00:02x}"
    return repr(char)[1:-1]


class _OneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _UNSAFE.search(message):
            record.msg, record.args = one_line(message), None
        if record.exc_info and record.exc_text is None:
            record.exc_text = _traceback(record.exc_info)  # None: the formatter's own
        return True


def _traceback(exc_info: logging._SysExcInfoType) -> str | None:
    """The traceback as logging's Formatter writes it, the messages of its exceptions on
    one line each; None when none needs it."""
    _, error, _ = exc_info
    if error is None:
        return None
    said = [text for text in _messages(error) if _UNSAFE.search(text)]
    if not said:
        return None
    text = "".join(traceback.format_exception(error)).removesuffix("\n")
    for message in said:
        text = text.replace(message, one_line(message))
    return text


def _messages(error: BaseException) -> Iterator[str]:
    """What the traceback writes of `error` and the exceptions it was raised from or in."""
    seen: set[int] = set()
    chained: BaseException | None = error
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        try:
            message = str(chained)
        except Exception:  # traceback writes <exception str() failed> in its place
            message = ""
        yield message
        yield from (note for note in getattr(chained, "__notes__", ()) if isinstance(note, str))
        chained = chained.__cause__ or chained.__context__


_FILTER: Final = _OneLine()


def install() -> None:
    """Give each of boxmq's loggers the filter (again: once; client/box.py, at its import)."""
    for name in LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)  # a filter there already is not added
