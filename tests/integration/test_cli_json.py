"""What `--json` prints, parsed as a script parses it: every command's document holds the
keys docs/cli.md's "JSON output" table names for it, and its times are in the one format."""

from __future__ import annotations

import argparse
import datetime
import io
import json
import random
import re
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_cli import boxmq_cli, ok

import boxmq
from boxmq import cli_subscribe
from boxmq.cli_output import json_body, out_json_with_body, out_text_with_body, to_json
from boxmq.mqtt.session_record import DeliveryOptions, SessionRecord, write_record
from boxmq.store.process import process_token

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

# The keys whose values are times (UTC, to the second), in every command that has them.
TIMES = {"lock-until", "expires", "delay-until", "away_since", "ends"}


def documented() -> dict[str, tuple[set[str], set[str]]]:
    """The JSON table of docs/cli.md: command -> (every key it names, those not in brackets,
    i.e. always there)."""
    text = DOCS.read_text().split("## JSON output", 1)[1].split("\n## ", 1)[0]
    table: dict[str, tuple[set[str], set[str]]] = {}
    for line in text.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| `") or len(cells) < 2:
            continue
        keys = set(re.findall(r'"([\w-]+)"', cells[1]))
        optional = set(re.findall(r'\["([\w-]+)"\]', cells[1]))
        for command in re.findall(r"`([^`]+)`", cells[0]):
            table[command] = (keys, keys - optional)
    return table


def keys_of(document: Any) -> set[str]:
    """Every key of a document, its nested records' too (`ls`'s rows), not a property's."""
    if isinstance(document, list):
        return set().union(*(keys_of(item) for item in document))
    if not isinstance(document, dict):
        return set()
    nested = (keys_of(v) for k, v in document.items() if k != "properties")
    return set(document).union(*nested)


def times_in(document: Any) -> list[str]:
    if isinstance(document, list):
        return [t for item in document for t in times_in(item)]
    if not isinstance(document, dict):
        return []
    found = [v for k, v in document.items() if k in TIMES and v is not None]
    return found + [t for v in document.values() for t in times_in(v)]


def test_peek_shows_the_type_get_shows(root: Path) -> None:
    ok(root, "put", "docs", "%PDF", "--type", "application/pdf")
    ok(root, "put", "docs", "plain")
    typed, untyped = json.loads(ok(root, "--json", "peek", "docs"))
    assert typed["type"] == "application/pdf"
    assert "type" not in untyped  # only when set, as peek's correlation-id and reply-to
    assert "TYPE" in ok(root, "peek", "docs").splitlines()[0]
    assert json.loads(ok(root, "--json", "get", "docs"))["type"] == "application/pdf"
    [locked] = json.loads(ok(root, "--json", "peek", "docs", "--state", "processing"))
    assert locked["type"] == "application/pdf"


def test_subscribe_shows_when_a_message_expires_as_get_does(root: Path) -> None:
    ok(root, "subscribe", "t/#", "--name", "s", "--keep", "--idle", "0")
    ok(root, "subscribe", "u/#", "--name", "s", "--keep", "--idle", "0")
    ok(root, "publish", "t/a", "soon", "--expires-in", "1h")
    ok(root, "publish", "t/a", "never")
    ok(root, "publish", "u/a", "soon", "--expires-in", "1h")
    got = json.loads(ok(root, "--json", "get", "u/#", "--subscriber", "s"))
    soon, never = map(
        json.loads,
        ok(root, "--json", "subscribe", "t/#", "--name", "s", "--idle", "0").splitlines(),
    )
    # The same time (published a moment apart), written the same way.
    apart = datetime.datetime.fromisoformat(soon["expires"]) - datetime.datetime.fromisoformat(
        got["expires"]
    )
    assert abs(apart.total_seconds()) < 10
    assert soon["expires"].endswith("+00:00")
    assert "expires" not in never  # only when set, as its correlation-id and reply-to


_CHUNK = 3 << 16  # cli_output's
_SUBSCRIBED = [
    b"plain",
    '\u00e9 \U0001f600 "quoted" \\x41\n\t\x00'.encode(),
    b"\xff\xfe not utf-8",
    # big: a character and an invalid sequence across a chunk's end, half of it not UTF-8
    b"a" * (_CHUNK - 1) + "\U0001f600".encode() + b"\xf0\x9f" + bytes(range(256)) * 2048,
]


def test_subscribe_prints_each_record_as_the_whole_document_would_byte_for_byte(
    root: Path,
) -> None:
    """`subscribe --json` writes a body a chunk at a time, as `get --json` does: each line
    is the one the record made whole gave, its keys in the same order (the body's before
    correlation-id, reply-to and expires), for UTF-8, not UTF-8 and big bodies."""
    ok(root, "subscribe", "t/#", "--name", "s", "--keep", "--idle", "0")
    with boxmq.open(root, fsync="never") as box:
        for index, body in enumerate(_SUBSCRIBED):
            box.publish(
                "t/a",
                body,
                qos=1,
                correlation_id=f"c{index}" if index % 2 else None,
                reply_to="r/\u00e9" if index else None,
                expires_in=3600 if index > 1 else None,
            )
    lines = ok(root, "--json", "subscribe", "t/#", "--name", "s", "--idle", "0").splitlines()
    assert len(lines) == len(_SUBSCRIBED)
    for line, body in zip(lines, _SUBSCRIBED, strict=True):
        got = json.loads(line)
        record = {key: got[key] for key in ("topic", "id", "qos", "retained", "properties")}
        after = {key: got[key] for key in ("correlation-id", "reply-to", "expires") if key in got}
        assert line == to_json(record | json_body(body) | after)


_BIG_MIXED_BODY = bytes(range(256)) * (4 << 12)  # 4 MiB, half of it not UTF-8


def printing_peak(
    root: Path, monkeypatch: pytest.MonkeyPatch, *, as_json: bool
) -> tuple[int, boxmq.Message]:
    """The peak traced memory of printing a subscription's message of _BIG_MIXED_BODY (to
    /dev/null, so the output is not kept), and the message, to print it again."""
    with boxmq.open(root, fsync="never") as box:
        subscription = box.subscribe("t/#", "s")
        box.publish("t/a", _BIG_MIXED_BODY, qos=1)
        message = subscription.receive(timeout=10)
        assert message is not None
        with open("/dev/null", "w") as null, monkeypatch.context() as patched:
            patched.setattr(sys, "stdout", null)
            tracemalloc.start()
            try:
                cli_subscribe._print_message(argparse.Namespace(json=as_json), message)
                return tracemalloc.get_traced_memory()[1], message
            finally:
                tracemalloc.stop()


def test_subscribe_prints_a_big_body_that_is_not_utf_8_at_the_cost_of_its_line(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record made whole took 18.6 times a 4 MiB body half of which is not UTF-8 (its
    text, JSON's escaping, base64's, the line's), by tracemalloc; a chunk at a time into the
    line, 5.8; the line written as it is made, 0.8 (a few chunks, whatever the body)."""
    peak, _ = printing_peak(root, monkeypatch, as_json=True)
    assert peak < 2 * len(_BIG_MIXED_BODY), f"{peak / len(_BIG_MIXED_BODY):.1f} times the body"


def test_plain_subscribe_prints_a_big_body_that_is_not_utf_8_at_the_cost_of_its_line(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --json: the body decoded whole, then the line made of it, took 7.5 to 12 times
    a 4 MiB body half of which is not UTF-8 (each bad byte is 4 characters of text, and
    then the line's copy); a chunk at a time, into the line's bytes. The bytes printed are
    the topic, a space, the body with bad bytes as \\xNN, and the newline."""
    peak, message = printing_peak(root, monkeypatch, as_json=False)
    printed = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(printed, encoding="utf-8"))
    cli_subscribe._print_message(argparse.Namespace(json=False), message)
    sys.stdout.flush()
    assert peak < 4 * len(_BIG_MIXED_BODY), f"{peak / len(_BIG_MIXED_BODY):.1f} times the body"
    expected = f"t/a {_BIG_MIXED_BODY.decode('utf-8', 'backslashreplace')}\n".encode()
    assert printed.getvalue() == expected


# Bytes not UTF-8 beside the text `\udc` (a literal, not an escape) and characters whose
# JSON escape has a low surrogate \udc80-\udcff (U+10080): what no shortcut may change.
_TRICKY = b"\\udcff \xff\\\xfe" + "\U00010080 \u00e9".encode() + b"\xed\xb3\xbf"


@pytest.mark.parametrize("body", [_TRICKY, _TRICKY.replace(b"\\udc", b"\\u")])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_body_is_shown_as_its_decoding_with_backslashes_shows_it(
    body: bytes, as_json: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    printed = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(printed, encoding="utf-8"))
    if as_json:
        out_json_with_body({"id": "i"}, body)
        expected = to_json({"id": "i"} | json_body(body)) + "\n"
    else:
        out_text_with_body("t ", body)
        expected = f"t {body.decode('utf-8', 'backslashreplace')}\n"
    sys.stdout.flush()
    assert printed.getvalue() == expected.encode()


def test_a_body_that_is_not_utf_8_is_shown_in_a_fraction_of_the_time_decoding_it_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decoder calls its error handler back for each byte that is not UTF-8: a 200 MB
    body of random bytes took 38 s to print on a busy two-core machine, so `subscribe` (and
    `get --json`, which shows the body the same way) outlasted the 30 s lock and the message
    came again, printed twice. Timed against that decoding alone, in this process, the best
    of five each, taken in turns so that both meet the same load (a clean clone's CI once
    measured 0.68 where the best of three of each, one after the other, was asked for under
    0.65): the line took 0.75 to 1.1 times it, and takes about half now."""
    body = random.Random(7).randbytes(4 << 20)

    def timed(run: Callable[[], object]) -> float:
        start = time.process_time()
        run()
        return time.process_time() - start

    decodings, shown = [], []
    with open("/dev/null", "w", encoding="utf-8") as null:
        monkeypatch.setattr(sys, "stdout", null)
        for _ in range(5):
            decodings.append(timed(lambda: body.decode("utf-8", "backslashreplace")))
            shown.append(timed(lambda: out_text_with_body("t ", body)))
    best_shown, best_decoding = min(shown), min(decodings)
    assert best_shown < 0.7 * best_decoding, f"{best_shown:.3f} s against {best_decoding:.3f} s"


def test_every_document_is_the_documented_one(root: Path, tmp_path: Path) -> None:
    """Each command run on a real root (a ready, a locked, a delayed, a dead, an expired
    message, a subscription and a share group): what it prints is valid JSON with the keys
    docs/cli.md names for it, and no other, and each time is an ISO 8601 UTC one."""
    table = documented()
    printed: dict[str, list[Any]] = {}

    def run(command: str, *args: str) -> Any:
        document = json.loads(ok(root, "--json", *args))
        printed.setdefault(command, []).append(document)
        return document

    def lines(command: str, *args: str) -> None:
        for line in ok(root, "--json", *args).splitlines():  # one document a line
            printed.setdefault(command, []).append(json.loads(line))

    run("put", "put", "q", "one", "-p", "n:int=3", "--correlation-id", "c", "--reply-to", "r")
    run("put", "put", "q", "two", "--type", "text/plain", "--expires-in", "1h")
    run("put", "put", "q", "three")
    run("put", "put", "gone", "x", "--expires-in", "1ms")
    lines("subscribe", "subscribe", "t/#", "--name", "s", "--keep", "--idle", "0")
    lines("subscribe", "subscribe", "$share/g/t/#", "--name", "m", "--keep", "--idle", "0")
    run("publish", "publish", "t/a", "hi", "--correlation-id", "c", "--expires-in", "1h")
    run("publish", "publish", "t/b", "\udcff")  # a body that is not UTF-8
    first = run("get", "get", "q", "--lock", "1h")["id"]
    second = run("get", "get", "q")["id"]
    run("get", "get", "t/#", "--subscriber", "s")
    run("get", "get", "$share/g/t/#")
    run("extend", "extend", "q", first, "--by", "2h")
    run("unlock", "unlock", "q", first, "--delay", "1h")
    run("reject", "reject", "q", second)
    run("ls", "ls")
    for state in ("target", "processing", "error", "expired"):
        run("peek", "peek", "q", "--state", state)
    run("peek", "peek", "gone", "--state", "expired")
    run("peek", "peek", "t/#", "--subscriber", "s", "--state", "processing")
    lines("subscribe", "subscribe", "t/#", "--name", "s", "--keep", "--idle", "0")
    third = run("get", "get", "q")["id"]
    run("ack", "ack", "q", third)
    run("requeue", "requeue", "q", "--from", "error")
    run("purge", "purge", "q", "--state", "processed")
    run("unsubscribe", "unsubscribe", "t/#", "--name", "s")
    # A session a killed server left (its record, as that server wrote it): listed, ended.
    dead_server = f"{process_token().rsplit('-', 1)[0]}-1"  # this pid, a start long gone
    options = {"t/#": DeliveryOptions()}
    away = SessionRecord(
        "c", 3600, server=dead_server, disconnected_at=time.time(), options=options
    )
    write_record(str(root), away)
    run("session ls", "session", "ls")
    run("session end", "session", "end", "c")
    run("delete", "delete", "q", "--force")
    printed["passwd"] = [
        json.loads(ok(root, "--json", "passwd", str(tmp_path / "pw"), "u", "--password", "p"))
    ]

    assert set(printed) <= set(table)
    for command, documents in printed.items():
        keys, always = table[command]
        for document in documents:
            rows = document if isinstance(document, list) else [document]
            for row in rows:
                assert keys_of(row) <= keys, (command, keys_of(row) - keys)
                assert always <= keys_of(row) or command in ("ls",), (
                    command,
                    always - keys_of(row),
                )
    # Each optional key was seen once at least, so the run covers what the table names.
    seen = set().union(*(keys_of(d) for ds in printed.values() for d in ds))
    assert {"body_base64", "delay-until", "dead", "by-get", "topic", "subscriber", "type"} <= seen
    assert {"away_since", "ends", "qos2_discarded"} <= seen  # the session's, listed and ended
    stamps = [t for ds in printed.values() for d in ds for t in times_in(d)]
    assert len(stamps) > 5
    for stamp in stamps:
        parsed = datetime.datetime.fromisoformat(stamp)
        assert stamp.endswith("+00:00"), stamp
        assert parsed.microsecond == 0, stamp


def test_an_error_under_json_is_a_line_on_stderr_and_no_document(root: Path) -> None:
    """As docs/cli.md says: a script tells an error by the exit status, and reads no half
    document on the standard output."""
    ok(root, "put", "q", "one")
    ok(root, "get", "q")
    for args, status in (
        (["get", "nosuch"], 1),
        (["ack", "q", "nosuchid"], 1),
        (["get", "q"], 3),  # nothing ready: the one left is locked
        (["peek", "q", "--limit", "0"], 2),
    ):
        done = boxmq_cli(root, "--json", *args)
        assert (done.returncode, done.stdout) == (status, ""), args
        assert done.stderr.strip(), args
        if status != 2:  # a usage error prints the usage first, as argparse does
            assert len(done.stderr.splitlines()) == 1, done.stderr


def test_delete_counts_by_state_as_its_line_and_ls_do(root: Path) -> None:
    for body in ("a", "b", "c", "d"):
        ok(root, "put", "q", body)
    ok(root, "ack", "q", json.loads(ok(root, "--json", "get", "q"))["id"])
    ok(root, "reject", "q", json.loads(ok(root, "--json", "get", "q"))["id"])
    ok(root, "get", "q")
    [listed] = json.loads(ok(root, "--json", "ls"))["queues"]
    deleted = json.loads(ok(root, "--json", "delete", "q", "--force"))
    assert deleted == {**listed, "deleted": 4, "uncommitted": 0}
    assert (deleted["ready"], deleted["locked"], deleted["done"], deleted["dead"]) == (1, 1, 1, 1)


def test_ls_lists_a_share_group_s_members_so_a_comma_in_a_name_is_no_second_member(
    root: Path,
) -> None:
    ok(root, "subscribe", "$share/g/t", "--name", "a,b", "--keep", "--idle", "0")
    ok(root, "subscribe", "$share/g/t", "--name", "c", "--keep", "--idle", "0")
    ok(root, "subscribe", "t", "--name", "d,e", "--keep", "--idle", "0")
    group, durable = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (group["subscriber"], group["members"]) == ("a,b,c", ["a,b", "c"])  # as it was, and
    assert (durable["subscriber"], "members" in durable) == ("d,e", False)  # one subscriber
