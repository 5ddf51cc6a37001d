"""What boxmq's log formatter writes of names it did not make: each record on one line, in
bytes any log file can hold (docs/operations.md), as a real handler writes it to a file."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import boxmq
from boxmq import log_lines
from boxmq.cli import OneLineFormatter

FORGED = "2026-01-01 00:00:00,000 INFO boxmq.serve: ready; sweeping every 1s"


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[tuple[logging.Logger, Path]]:
    """A logger writing through the formatter to a UTF-8 file that refuses what is not
    (errors="strict", FileHandler's default), as an application's log file may."""
    path = tmp_path / "boxmq.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    # A logger of its own, outside logging's tree: pytest's capture of the records (on the
    # root logger) would carry the surrogates into a report that pytest-xdist cannot encode.
    logger = logging.Logger("boxmq.test_log_lines")
    logger.addHandler(handler)
    try:
        yield logger, path
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_a_name_with_a_line_break_and_bytes_not_utf_8_stays_on_its_line(
    log_file: tuple[logging.Logger, Path],
) -> None:
    # A file name a script wrote (os.fsdecode: \udcff for the byte 0xff) logged as it is: the
    # record was lost to a UnicodeEncodeError ("--- Logging error ---" on stderr, nothing in
    # the file); it is written with that byte as \xff, as peek and ls show it.
    logger, path = log_file
    name = os.fsdecode(b"y\xff\n" + FORGED.encode() + b"\x1b[2J")
    logger.error("q: %s stays in working/", name)
    logger.warning("process of %r is gone", os.fsdecode(b"w\xfe"))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines == [
        f"ERROR boxmq.test_log_lines: q: y\\xff\\n{FORGED}\\x1b[2J stays in working/",
        "WARNING boxmq.test_log_lines: process of 'w\\xfe' is gone",
    ]


def test_a_stray_named_with_a_line_break_is_logged_on_one_line(tmp_path: Path) -> None:
    # The real process and its log (standard error): a directory a script made in target/
    # under a name that holds a line break and the start of a log line, set aside by `get`.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def boxmq(*args: str, given: str = "") -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "boxmq.cli", "--data", str(tmp_path / "d"), *args]
        return subprocess.run(command, input=given, capture_output=True, text=True, env=env)

    assert boxmq("--fsync", "never", "put", "q", given="hi").returncode == 0
    stray = tmp_path / "d" / "q" / "target" / f"x\n{FORGED}\x1b[2J"
    stray.mkdir()
    got = boxmq("get", "q")
    assert got.returncode == 0, got.stderr
    assert got.stderr.splitlines() == [
        line for line in got.stderr.splitlines() if " ERROR boxmq: " in line
    ]
    assert f"q: x\\n{FORGED}\\x1b[2J is not a regular file: moved to error/" in got.stderr
    assert not any(line.startswith(FORGED) for line in got.stderr.splitlines())
    assert (tmp_path / "d" / "q" / "error" / stray.name).is_dir()


@pytest.fixture
def plain_handler(tmp_path: Path) -> Iterator[Path]:
    """What an application embedding boxmq may write its log with: a plain handler and
    formatter on the root logger, none of boxmq's."""
    path = tmp_path / "app.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        handler.close()


def test_an_application_s_own_handler_writes_boxmq_s_records_of_names_on_one_line(
    tmp_path: Path, plain_handler: Path
) -> None:
    """Through the API, with the application's formatter: a stray named with a line break
    in target/ (logged when `get` sets it aside), and a traceback of a library user's
    callback whose exception names a client id holding one (an authenticator that failed):
    each line of them one of the record's, none that reads as another record."""
    with boxmq.open(tmp_path / "d", fsync="never") as box:
        box.queue("q").put(b"hi")
        (tmp_path / "d" / "q" / "target" / f"x\n{FORGED}\x1b[2J").mkdir()
        got = box.queue("q").get()
        assert got is not None
        got.ack()
    try:
        raise ValueError(f"no user for client dev\n{FORGED}\x1b[2J")
    except ValueError:
        logging.getLogger("boxmq.mqtt").exception("checking the password of %r failed", "dev")
    lines = plain_handler.read_text(encoding="utf-8").splitlines()
    assert f"ERROR boxmq: q: x\\n{FORGED}\\x1b[2J is not a regular file: moved to error/" in lines
    assert f"ValueError: no user for client dev\\n{FORGED}\\x1b[2J" in lines
    assert not any(line.startswith(FORGED) or "\x1b" in line for line in lines)


def test_every_logger_of_boxmq_writes_its_records_on_one_line() -> None:
    """A logger a module adds (`logging.getLogger("boxmq.new")`) must be in LOGGERS, or its
    records go out with their line breaks."""
    source = Path(__file__).parents[2] / "src" / "boxmq"
    named = set()
    for module in source.rglob("*.py"):
        text = module.read_text(encoding="utf-8")
        named.update(re.findall(r'getLogger\("(boxmq[\w.]*)"\)', text))
        if "getLogger(__name__)" in text:
            named.add(".".join(module.relative_to(source.parent).with_suffix("").parts))
    assert named == set(log_lines.LOGGERS)
