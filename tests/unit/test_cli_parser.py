"""The command line's parser: a command builds its own parser only (docs/benchmarks.md, "CLI
start-up"), and what `--help` prints stays the same, byte for byte.

cli_help.txt holds `boxmq --help` and every `boxmq COMMAND --help` at 80 columns, as Python
3.11's argparse writes them. After changing a help on purpose, write it anew:
`COLUMNS=80 PYTHONPATH=src python tests/unit/test_cli_parser.py > tests/unit/cli_help.txt`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from boxmq import cli, cli_parser

HELPS = Path(__file__).with_name("cli_help.txt")


def _commands(parser: argparse.ArgumentParser) -> cli_parser.Commands:
    (commands,) = [a for a in parser._actions if isinstance(a, cli_parser.Commands)]
    return commands


def _help(*words: str) -> str:
    """What `boxmq WORDS... --help` prints."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exit:
        cli.main([*words, "--help"])
    assert exit.value.code == 0
    return printed.getvalue()


def _helps() -> str:
    names = _commands(cli_parser.parser()).choices
    assert names is not None
    return "".join(
        f"$ {' '.join(['boxmq', *w, '--help'])}\n{_help(*w)}" for w in [(), *[(n,) for n in names]]
    )


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11),
    reason="cli_help.txt is what 3.11's argparse writes (make test's); others format it apart",
)
def test_every_help_is_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert _helps() == HELPS.read_text(encoding="utf-8")


def test_a_command_builds_its_own_parser_only() -> None:
    parser = cli_parser.parser()
    args = parser.parse_args(["--fsync", "never", "put", "jobs", "hi"])
    assert (args.name, args.queue, args.body, args.fsync) == ("put", "jobs", "hi", "never")
    assert list(_commands(parser)._name_parser_map) == ["put"]


@pytest.mark.parametrize(
    ("words", "given"),
    [
        ("put jobs --priority 7 hello", {"queue": "jobs", "body": "hello", "priority": 7}),
        ("put jobs -p tenant=acme hello", {"queue": "jobs", "body": "hello"}),
        ("publish t --qos 2 --retain hi", {"topic": "t", "body": "hi", "qos": 2}),
        ("session end --force c1", {"action": "end", "client_id": "c1", "force": True}),
        ("put jobs hello --priority 7", {"queue": "jobs", "body": "hello", "priority": 7}),
        ("put jobs -- --priority", {"queue": "jobs", "body": "--priority"}),
    ],
)
def test_options_may_come_between_a_commands_arguments(words: str, given: dict[str, Any]) -> None:
    """`boxmq put jobs --priority 7 hello` was refused: "unrecognized arguments: hello"."""
    args = cli_parser.parser().parse_args(words.split())
    assert {key: getattr(args, key) for key in given} == given


def test_the_top_level_help_lists_every_command_by_its_summary() -> None:
    # what each command's own --help says under its usage
    commands = _commands(cli_parser.parser())
    listed = {a.dest: a.help for a in commands._get_subactions()}
    assert listed == {name: p.description for name, p in commands.parsers().items()}
    assert len(listed) == 19


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "80")
    sys.stdout.write(_helps())


def test_the_help_says_how_a_script_sends_without_boxmq() -> None:
    """DESIGN.md §8: a dropbox is a public interface, and the command line says so; `boxmq
    --help` said nothing of it (only the README and file-format.md did)."""
    recipe = "echo hi > data/jobs/working/x && mv data/jobs/working/x data/jobs/target/4.x.T"
    assert f"\n  {recipe}\n" in _help()


def test_every_option_of_every_command_says_what_it_does() -> None:
    """`boxmq purge --help` listed `--state {target,processed,error,expired}` with no word,
    so nothing said that `boxmq purge jobs` empties target/, every ready message; `requeue
    --from`, `peek --state` and `--limit`, `-v` and others were as bare."""
    top = cli_parser.parser()
    parsers = {"boxmq": top, **_commands(top).parsers()}
    bare = [
        f"{name} {'/'.join(action.option_strings)}"
        for name, parser in parsers.items()
        for action in parser._actions
        if action.option_strings and action.help is None
    ]
    assert bare == []


@pytest.mark.parametrize(
    ("given", "server"),
    [
        (":5347", ("127.0.0.1", 5347)),
        ("[]:5347", ("127.0.0.1", 5347)),
        ("xmpp.example.org:5347", ("xmpp.example.org", 5347)),
        ("[::1]:5347", ("::1", 5347)),
    ],
)
def test_an_xmpp_server_without_its_host_is_this_machines_loopback(
    given: str, server: tuple[str, int]
) -> None:
    """`--xmpp-server :5347` connected to 0.0.0.0, as `--mqtt :1883` listens on every address:
    a connection goes to one host, and the default's is 127.0.0.1 (docs/cli.md)."""
    words = ["serve", "--no-mqtt", "--xmpp-component", "q.example.org", "--xmpp-server", given]
    assert cli_parser.parser().parse_args(words).xmpp_server == server


def test_an_mqtt_listener_without_its_host_still_listens_on_every_address() -> None:
    args = cli_parser.parser().parse_args(["serve", "--mqtt", ":1883"])
    assert args.mqtt == [("0.0.0.0", 1883)]
