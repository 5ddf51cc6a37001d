"""`boxmq.cli.main` over generated command lines: whatever the arguments, a status and at most
one line of error, never an exception (a traceback, in a shell)."""

from __future__ import annotations

import io
import signal
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import boxmq
from boxmq import cli

# What a shell passes: any bytes but NUL, which Python reads with surrogate escapes; and the
# odd words a user or a script gives.
_ODD = ["", "-", "..", "/", "a/b", "$share/g/t", "#", "+", "a\nb", "\x1b[2J", "é", "q" * 300]
_WORDS = st.one_of(
    st.binary(max_size=30).map(lambda b: b.replace(b"\0", b"").decode("utf-8", "surrogateescape")),
    st.sampled_from(_ODD),
)
_NUMBERS = st.sampled_from(["1", "0", "-1", "2", "9" * 30, "1e309", "nan", "x", "٣"])
_DURATIONS = st.sampled_from(["1s", "0.5", "5ms", "36500d", "36501d", "0", "-1", "nan", "1e999"])
_ODD_PROPERTIES = [
    "a=1", "a:int=2", "a:double=nan", "a:byte=999", "a:bool=yes", "a:float=1e39", "=x", "a",
    "a:nope=1", "mqtt.payload-format=2", "mqtt.correlation-data=!", "JMSXGroupID=g",
    "mqtt.response-topic=a/#", "mqtt.content-type=" + "c" * 300,
]  # fmt: skip
_PROPERTIES = st.one_of(st.sampled_from(_ODD_PROPERTIES), _WORDS.map(lambda word: f"k={word}"))
_SENDING = {
    "--priority": _NUMBERS, "--expires-in": _DURATIONS, "-p": _PROPERTIES,
    "--correlation-id": _WORDS, "--reply-to": _WORDS, "--file": _WORDS,
}  # fmt: skip
_SETTLING = {"--consumer": st.one_of(st.just("cli"), st.just("w"), _WORDS)}
_FOLDERS = {"--subscriber": st.one_of(st.just("k"), _WORDS)}
# What the root holds (see the test): a queue, a share group with member w, and k's durable
# subscription, each with a message ready and one `get` locked (by cli).
_THERE = st.sampled_from(["q", "$share/g/t", "t"])
_LOCKED = "<the id get locked there>"  # a settle's ID, swapped for that message's own
_SETTLES = frozenset({"ack", "unlock", "reject", "extend"})
_COMMANDS: dict[str, tuple[int, dict[str, st.SearchStrategy[str]]]] = {
    "put": (2, _SENDING | {"--type": _WORDS}),
    "publish": (2, _SENDING | {"--qos": _NUMBERS}),
    "subscribe": (1, {"--name": _WORDS, "--qos": _NUMBERS, "--count": _NUMBERS}),
    "unsubscribe": (1, {"--name": _WORDS}),
    "get": (1, _SETTLING | _FOLDERS | {"--lock": _DURATIONS}),
    "ack": (2, _SETTLING | _FOLDERS),
    "unlock": (2, _SETTLING | _FOLDERS | {"--delay": _DURATIONS}),
    "reject": (2, _SETTLING | _FOLDERS),
    "extend": (2, _SETTLING | _FOLDERS | {"--by": _DURATIONS}),
    "ls": (0, {}),
    "peek": (1, _FOLDERS | {"--limit": _NUMBERS, "--state": st.sampled_from(["error", "x"])}),
    "requeue": (1, _FOLDERS | {"--from": st.sampled_from(["expired", "target"])}),
    "purge": (1, _FOLDERS | {"--state": st.sampled_from(["error", "processing"])}),
}  # serve would run, and passwd's file may be anywhere


@st.composite
def _command_lines(draw: st.DrawFn) -> list[str]:
    name = draw(st.sampled_from(sorted(_COMMANDS)))
    positionals, options = _COMMANDS[name]
    # The first often a folder that is there, so that the rest is read, not refused first.
    words = [name, *(draw(st.one_of(_THERE, _WORDS)) for _ in range(positionals))]
    if name in _SETTLES:  # often the id of a message locked there, to be settled for real
        words[2] = draw(st.one_of(st.just(_LOCKED), _WORDS))
    if options:
        for option in draw(st.lists(st.sampled_from(sorted(options)), max_size=3)):
            words.append(f"{option}={draw(options[option])}")  # a value may start with -
    if name == "subscribe":  # it would wait for messages, or a signal
        words.append("--idle=0")
    return words


@settings(
    max_examples=200,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(words=_command_lines())
def test_any_command_line_ends_in_a_status_and_one_line_never_an_exception(
    words: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --file is read here
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"body")))  # put, no BODY
    # A signal handler subscribe sets would outlive the test: pytest's stay.
    monkeypatch.setattr(signal, "signal", lambda *args: None)
    with tempfile.TemporaryDirectory(dir=tmp_path) as root:
        with boxmq.open(root, fsync="never") as box:  # a message ready, one locked by `cli`
            box.queue("q").put(b"ready")
            box.queue("q").put(b"locked")
            locked = {"q": box.queue("q").get()}
            for folder, member in (("$share/g/t", "w"), ("t", "k")):
                box.subscribe(folder, member, process_bound=False).detach()  # kept: a member
            box.publish("t", b"locked")
            box.publish("t", b"ready")
            locked["$share/g/t"] = box.subscription("$share/g/t").get()
            locked["t"] = box.subscription("t", "k").get()
        assert None not in locked.values()
        if words[0] in _SETTLES and words[2] == _LOCKED:
            message = locked.get(words[1])
            words = [*words[:2], "nothing" if message is None else message.id, *words[3:]]
        argv = ["--data", root, "--fsync", "never", *words]
        try:
            status = cli.main(argv)
        except SystemExit as stop:  # argparse: a usage error
            status = stop.code if isinstance(stop.code, int) else 1
    assert status in (0, 1, 2, 3), argv
    err = capsys.readouterr().err
    if status == 1:
        [line] = err.splitlines()
        assert line.startswith(f"boxmq {words[0]}: "), argv
