"""Any file a script drops into a queue's folders, under any name, on real files.

DropboxMQ interop means names made by hand: broken fields, bytes that are not UTF-8, a lock
suffix or a temporary's prefix copied from boxmq's own, dots everywhere, 255 bytes. Whatever
the name, what a user runs (`boxmq ls`, `boxmq peek`, a consumer's receive and ack, the
sweep, the recovery at open) raises nothing, loses no other message, and leaves the file
where docs/file-format.md says: delivered (with default metadata if the name is not in the
encoding), expired or held back as its name says, or in error/ under its own name with a
log line when no name could carry it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import boxmq
from boxmq import cli
from boxmq.client.lifecycle import envelope_of, shown, unusable
from boxmq.clock import ManualClock
from boxmq.log_lines import one_line
from boxmq.store.names import split_lock
from boxmq.store.process import process_token

STATES = ("target", "processing", "working", "processed", "error", "expired", "routing")
STRANGE = b"strange body"
KEPT = b"kept body"
LATER = 2 * 3600.0


def _fit(name: bytes) -> bool:
    return (
        0 < len(name) <= 255
        and b"/" not in name
        and b"\0" not in name
        and name not in (b".", b"..")
    )


def _clean(name: bytes) -> bytes:
    return name.replace(b"/", b"_").replace(b"\0", b"_")


_TEXT = st.text(
    st.characters(exclude_characters="/\0", exclude_categories=["Cs"]), min_size=1, max_size=60
).map(os.fsencode)
_BYTES = st.binary(min_size=1, max_size=60).map(_clean)
_DOTS = st.text(".a%@&=~+", min_size=1, max_size=24).map(os.fsencode)
_FIELD = st.sampled_from(
    [
        "4", "-2147483649", "2147483648", "x", "", "%", "%zz", "%FF", "%C3", "T", "Q", "b",
        "0", "1", "99999999999999999999", "12.5", "pD=1.5", "kS=%FF", "a&b", "kS=", "=S",
        "bx_dcI=999", "bx_nbL=9999999999999", "bx_lastS=w", "1795333413065000-9262574723",
        "\u00e9", "~2", "@", ".tmp-",
    ]
)  # fmt: skip
_DROPBOX = st.lists(_FIELD, min_size=1, max_size=9).map(lambda f: ".".join(f).encode())
_HOST = process_token().split("-")[0]  # a token of this host: its process is looked up
_ODD = ["", "w1", "get", "x@y", "-1", "0", "99999999999999999999", "1a2b3c4d-1-1", "h-9-1"]
_OWNER = st.sampled_from(_ODD)
_DEADLINE = st.one_of(
    st.sampled_from(_ODD), st.integers(0, 2**64).map(str), st.just("9999999999999")
)
_TOKEN = st.one_of(
    st.sampled_from(_ODD),
    st.just(process_token()),
    st.sampled_from(["4194303", "0", "1", "9999999999999999999", "\u0663", "x"]).map(
        lambda pid: f"{_HOST}-{pid}-1"
    ),
)
_LOCKED = st.tuples(_DROPBOX, _OWNER, _DEADLINE, _TOKEN).map(
    lambda p: p[0] + b"@" + "@".join(p[1:]).encode()
)
_PREFIXED = st.tuples(
    st.sampled_from([b".tmp-", b".fanout-", b".aside-", b".spare", b".", b".."]),
    st.one_of(_DROPBOX, _BYTES),
).map(b"".join)
_LONG = st.tuples(
    st.integers(150, 255), st.sampled_from([b"x", b"4.long.T.0.", "\u00e9".encode(), b"\xff"])
).map(lambda p: (p[1] * 255)[: p[0]])
NAMES = st.one_of(_TEXT, _BYTES, _DOTS, _DROPBOX, _LOCKED, _LOCKED, _PREFIXED, _LONG).filter(_fit)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record)

    def said(self, level: int) -> str:
        return "\n".join(r.getMessage() for r in self.lines if r.levelno >= level)


def _run_cli(root: Path, *argv: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(["--data", str(root), "--fsync", "never", *argv])
    assert status == 0, (argv, out.getvalue(), err.getvalue())


def _where(queue: Path) -> dict[str, list[bytes]]:
    """Every file's name in each state folder of `queue`, holding the strange body."""
    found: dict[str, list[bytes]] = {}
    for state in STATES:
        folder = os.fsencode(queue / state)
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            with open(os.path.join(folder, name), "rb") as file:
                if file.read() == STRANGE:
                    found.setdefault(state, []).append(name)
    return found


@settings(
    max_examples=60,  # ~1 s; 3,000 passed once, in 47 s
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(name=NAMES, folder=st.sampled_from(["target", "processing", "working"]))
# A lock of this host whose pid no C long holds: the sweep at open raised OverflowError.
@example(name=f"4.x.T@w1@9999999999999@{_HOST}-9999999999999999999-1".encode(), folder="processing")
# A control character and a byte not UTF-8: every log line is escaped to one line (log_lines).
@example(name=b"\x01\x80", folder="target")
def test_any_name_dropped_in_a_queue_folder_is_delivered_kept_or_set_aside(
    name: bytes, folder: str
) -> None:
    lines = _Lines()
    logger = logging.getLogger("boxmq")
    logger.addHandler(lines)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "data"
            with boxmq.open(root, fsync="never") as box:
                box.queue("jobs").put(KEPT)
            queue = root / "jobs"
            with open(os.path.join(os.fsencode(queue / folder), name), "wb") as file:
                file.write(STRANGE)

            _run_cli(root, "ls")
            for state in STATES:
                _run_cli(root, "peek", "jobs", "--state", state)
            bodies: list[bytes] = []
            bodies_later: list[bytes] = []
            with boxmq.open(root, fsync="never") as box:  # its recovery at open
                jobs = box.queue("jobs")
                if (got := jobs.get()) is not None:  # `boxmq get`'s way, then a consumer's
                    bodies.append(got.body)
                    got.ack()
                with jobs.consumer("w1") as consumer:
                    while (message := consumer.receive_nowait()) is not None:
                        bodies.append(message.body)
                        message.ack()
                box.sweep()
            _run_cli(root, "ls")
            found = _where(queue)
            # Two hours on: past a foreign lock's 5 minutes and working/'s abandon_after.
            later = ManualClock(time.time() + LATER)
            with boxmq.open(root, fsync="never", clock=later) as box:
                box.sweep()
                with box.queue("jobs").consumer("w1") as consumer:
                    while (message := consumer.receive_nowait()) is not None:
                        bodies_later.append(message.body)
                        message.ack()
            found_later = _where(queue)
    finally:
        logger.removeHandler(lines)

    assert bodies.count(KEPT) == 1  # no other message lost, nor delivered twice
    delivered = bodies.count(STRANGE)
    if delivered:  # the ack's copy (the embedded API keeps it), renamed if it was released
        assert len(found.pop("processed")) == 1
    kept = sum(len(names) for names in found.values())
    assert delivered + kept == 1, (delivered, found)  # never lost, never twice
    text = os.fsdecode(name)
    if "error" in found:  # the operator is told
        assert "to error/" in lines.said(logging.WARNING)
    if folder == "working":
        assert found == {"working": [name]}  # uncommitted: left, until abandon_after
    elif folder == "target":
        if (why := unusable(text)) is not None:
            assert found == {"error": [name]}  # under its own name, and said so
            said = one_line(f"{shown(text)} is {why}: moved to error/")  # as every line is
            assert said in lines.said(logging.ERROR)
        elif envelope_of(text).expired(time.time()):
            assert list(found) == ["expired"]
        elif envelope_of(text).not_before > time.time():
            assert list(found) == ["target"]  # held back as its name says
        else:
            assert delivered == 1

    assert KEPT not in bodies_later
    if folder == "working":
        assert found_later == {}  # abandoned: deleted, as docs/operations.md says
        assert "uncommitted" in lines.said(logging.INFO)
        return
    delivered_later = bodies_later.count(STRANGE)
    assert delivered + delivered_later <= 1
    if delivered_later:
        assert len(found_later.pop("processed")) == 1 + delivered
    elif delivered:
        assert len(found_later.pop("processed")) == 1
    assert delivered_later + sum(len(names) for names in found_later.values()) == 1 - delivered
    if folder == "processing" and split_lock(text)[1] is None:
        assert "processing" not in found_later  # a foreign lock's 5 minutes are long past
