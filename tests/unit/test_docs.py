"""The user docs against the code: links between pages resolve, every command-line option
(with its default and choices) and config-file key a user can give is written down where a
user reads (a key with the default the code keeps), every public name of the Python API, of
boxmq.spark and of the settings of serve's parts is named with its parameters, every Spark
option is in its table with its default, every warning that tells its reader what to do is
quoted, every signature python.md gives is the code's, and every `boxmq` command line of the
docs gives options its command has (and one of a shell block parses), as every Python block
does, naming only what `boxmq` has. Each list is taken from the code (the parsers, the config
reader, `inspect`, the log calls' source), so that a new name fails here until it is written.

A user should never need the code to use a feature; these are the checks that cost nothing
to keep (whether the text is right is for a reader)."""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import enum
import importlib.util
import inspect
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import boxmq
from boxmq import cli_parser, config, config_table
from boxmq.cli_args import joined_negative_durations
from boxmq.client.subscriber import Subscriber  # not at the top of the package
from boxmq.config import Security, ServeConfig, load_config
from boxmq.core import ExactlyOnceLimits
from boxmq.errors import InvalidArgument
from boxmq.mqtt.settings import Authenticator, Authorizer, Limits, Listener, MqttSettings
from boxmq.mqtt.sys_topics import Figures, SysTopics
from boxmq.xmpp.settings import XmppSettings

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def _prose(page: Path) -> str:
    """The page without its code blocks, where `](x)` and `# x` are not links nor headings."""
    return _FENCE.sub("", page.read_text(encoding="utf-8"))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, each
    space a `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_prose(page)):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")  # GitHub numbers repeats
    return found


def _links() -> Iterator[tuple[Path, str]]:
    for page in PAGES:
        for target in _LINK.findall(_prose(page)):
            if not re.match(r"[a-z][a-z+]*:", target):  # http:, https:, mailto: are not ours
                yield page, target


def test_the_slug_is_githubs() -> None:
    assert _slug("The interpreter (2026-11-24, stop 18)") == "the-interpreter-2026-11-24-stop-18"
    assert _slug("`[mqtt.limits]`") == "mqttlimits"
    assert _slug("Locks (XEP-0254 semantics)") == "locks-xep-0254-semantics"


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page, target in _links():
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.relative_to(REPO)}: {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{page.relative_to(REPO)}: {target}: no such heading")
    assert broken == []
    assert any("#" in target for _, target in _links())  # the check sees anchors at all


# The pages whose prose is wrapped at 100 columns, as the code is (tables and code blocks
# excepted: a row or a printed line cannot be wrapped). file-format.md, operations.md and
# benchmarks.md are not yet.
_WRAPPED = [
    REPO / "README.md",
    *(
        DOCS / name
        for name in (
            "cli.md",
            "concepts.md",
            "configuration.md",
            "development.md",
            "file-format.md",
            "mqtt.md",
            "operations.md",
            "pubsub.md",
            "python.md",
            "security.md",
            "spark.md",
            "xmpp.md",
        )
    ),
]


def test_the_prose_of_the_wrapped_pages_keeps_to_100_columns() -> None:
    long = [
        f"{page.relative_to(REPO)}:{number}: {len(line)} columns"
        for page in _WRAPPED
        for number, line in _prose_lines(page)
        if len(line) > 100 and not line.lstrip().startswith("|")
    ]
    assert long == []


def _prose_lines(page: Path) -> Iterator[tuple[int, str]]:
    """The page's lines outside its code blocks, with their numbers."""
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def test_a_link_that_says_above_or_below_points_that_way() -> None:
    wrong = []
    for page in PAGES:
        text = _prose(page)
        where: dict[str, int] = {}
        for heading in _HEADING.finditer(text):
            where.setdefault(_slug(heading[1]), heading.start())
        for link in re.finditer(r"\[(above|below)\]\(#([^)]+)\)", text):
            heading_at = where.get(link[2])
            if heading_at is not None and (heading_at < link.start()) != (link[1] == "above"):
                wrong.append(f"{page.name}: {link[0]}")
    assert wrong == []


def test_every_table_starts_with_its_header_and_separator() -> None:
    """A table row after a paragraph is no table on GitHub but a line of pipes: rows added at
    the end of operations.md's sweep table, below a paragraph put in after it, read so."""
    separator = re.compile(r"^\|( *:?-+:? *\|)+ *$")
    stray = []
    for page in PAGES:
        lines = _prose(page).splitlines()
        for at, line in enumerate(lines):
            starts = line.startswith("|") and not (at and lines[at - 1].startswith("|"))
            if starts and not separator.match(lines[at + 1] if at + 1 < len(lines) else ""):
                stray.append(f"{page.name}: {line[:60]}")
    assert stray == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = _prose(REPO / "README.md")
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if f"](docs/{p.name}" not in readme]
    assert unlinked == []


def test_every_module_and_package_of_boxmq_is_in_development_md_s_layout() -> None:
    """cli_session.py and cli_settle.py were missing from it."""
    layout = (DOCS / "development.md").read_text(encoding="utf-8")
    top = REPO / "src" / "boxmq"
    names = [p.name for p in top.glob("*.py") if p.name != "__init__.py"]
    names += [f"{p.name}/" for p in top.iterdir() if (p / "__init__.py").exists()]
    assert [n for n in sorted(names) if not re.search(rf"(?<![\w/]){re.escape(n)}", layout)] == []


# What development.md may name that is not in the repository: the project's design notes.
_OUTSIDE = {"DESIGN.md"}
_FILE_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|lua|toml|txt))\b")


def test_every_file_development_md_names_is_there() -> None:
    """It said test modules had unique basenames across tests/, when five are twice there
    (test_records.py, test_topics.py, ...): each file it names is there, a path from the
    repository's root or a bare name under src/boxmq or tests/, and the basename it says is
    in two folders is in both."""
    text = (DOCS / "development.md").read_text(encoding="utf-8")
    named = set(_FILE_NAME.findall(text)) - _OUTSIDE
    missing = [
        name
        for name in sorted(named)
        if not (REPO / name).exists()
        and not any(any((REPO / top).rglob(name)) for top in ("src/boxmq", "tests"))
    ]
    assert missing == []
    assert len(named) > 40  # the names are read at all
    twice = re.search(r"`(\w+\.py)` is in `([\w/]+)` and in\s+`([\w/]+)`", text)
    assert twice is not None
    assert all((REPO / folder / twice[1]).is_file() for folder in twice.groups()[1:])


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli_parser.parser()
    (commands,) = [a for a in parser._actions if isinstance(a, cli_parser.Commands)]
    return commands.parsers()


def test_every_command_and_option_is_in_cli_md() -> None:
    """Each command is in cli.md, and each option, the global ones too, is named where cli.md
    says what it does: an option only listed in its command's usage (`[--polling]`, `[--delete]`
    until 2026-12-01) told a reader that it is there and no more."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    said = _without_usages(text)
    # `--[no-]polling` stands for `--polling` and `--no-polling`
    said += " ".join(f"--{m} --no-{m}" for m in re.findall(r"--\[no-\]([\w-]+)", said))
    missing = []
    commands = _commands()
    assert {"put", "get", "serve", "passwd"} <= set(commands)
    parsers = {"": cli_parser.parser(), **commands}
    for name, parser in parsers.items():
        if name and not re.search(rf"`{name}\b", text):
            missing.append(name)
        for action in parser._actions:
            missing += [
                f"{name} {option}".strip()
                for option in action.option_strings
                if option not in ("-h", "--help") and not re.search(rf"{option}\b", said)
            ]
    assert missing == []


def test_the_readme_s_list_of_commands_names_every_command() -> None:
    """The README's bullet on the `boxmq` command lists what a new user can type; it left out
    `retained`, which `boxmq --help` lists."""
    readme = _prose(REPO / "README.md")
    bullet = re.search(r"^- \*\*The `boxmq` command\*\*:(.*?)(?=^- |^$)", readme, re.M | re.S)
    assert bullet is not None
    listed = set(re.findall(r"[a-z]+", bullet[1].partition(";")[0]))
    assert sorted(set(_commands()) - listed) == []


def _without_usages(text: str) -> str:
    """cli.md without the first cell of each row of its tables (a command's usage: `passwd
    FILE USER [--password P \\| --stdin \\| --delete]`), up to its first `|` not escaped."""
    return re.sub(r"^\| `.*?(?<!\\)\|", "|", text, flags=re.M)


def _command_rows() -> dict[str, str]:
    """cli.md's text about each command: the rows of its table that start with it (serve
    has two, the second `serve … --xmpp-component NAME ...`) and its section below the
    table (a heading `put` in code), and for the options before any command ("") the text above the
    table."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    rows = {"": text.partition("\n| command |")[0]}
    for row in re.findall(r"^\| `([a-z]+)\b(.*)$", text, re.M):
        rows[row[0]] = rows.get(row[0], "") + row[1] + "\n"
    for name, section in re.findall(r"^### `([a-z]+)`\n(.*?)(?=^#)", text, re.M | re.S):
        rows[name] = rows.get(name, "") + section
    return rows


def _default_said(action: argparse.Action, text: str) -> bool:
    """Whether `text` gives the default of `action`'s option: a word of it that the option
    reads as its default (`30s` for 30.0, `cli-PID` for `cli-<this pid>`) written after the
    option (`--lock 30s`), before "by default" or "unless given", or after "defaults to"."""
    read = action.type if callable(action.type) else str
    default = str(action.default).replace(str(os.getpid()), "PID")
    for word in set(re.findall(r"[\w./$-]+", text)):
        with contextlib.suppress(Exception):  # a word the option refuses
            if word == default or read(word) == action.default:
                said = re.escape(word)
                options = "|".join(re.escape(option) for option in action.option_strings)
                if re.search(
                    # not the first of the choices a usage lists: `--from error\|expired`;
                    # any white space between the words, a line's end too (wrapped prose)
                    rf"(?:{options})`?(?:\s|=|`?\s+defaults\s+to\s[^.;]*?)`?{said}\b(?!\\?\|)"
                    rf"|`?{said}`?\s+(?:by\s+default|unless\s+given)",
                    text,
                ):
                    return True
    return False


def test_every_option_s_default_and_choices_are_in_its_command_s_row_of_cli_md() -> None:
    """The options whose value has a default (those left out, None, `[]`, are given or not:
    serve's defaults are the config file's, held by configuration.md's), from the parsers:
    the command's row of cli.md (for the options before the command, the text above the
    table) says the default (`--lock 30s`, `4 unless given`) and every value of a choice
    (`--from error|expired|processed`). unlock's `--delay 0`, requeue's `error`, purge's
    `target` and `--fsync`'s `always` were said by `--help` alone."""
    rows = _command_rows()
    parsers = {"": cli_parser.parser(), **_commands()}
    missing, checked = [], 0
    for name, parser in parsers.items():
        for action in parser._actions:
            option = f"{name} {action.option_strings[0]}" if action.option_strings else ""
            if (
                not option
                or action.option_strings[0] == "-h"
                or (name and option[len(name) + 1 :] in _options(parsers[""]))
            ):
                continue  # the global options repeated after a command (their default SUPPRESS)
            missing += [
                f"{option}: {choice}"
                for choice in action.choices or ()
                if not re.search(
                    rf"(?<![\w-]){re.escape(str(choice))}(?![\w-])", rows.get(name, "")
                )
            ]
            if all(action.default is not no for no in (None, False, argparse.SUPPRESS)) and (
                action.default != []  # a -p given no time; `is` for False: 0.0 == False
            ):
                checked += 1
                if not _default_said(action, rows.get(name, "")):
                    missing.append(f"{option}: default {action.default!r}")
    assert checked > 10
    assert missing == []


# `boxmq [global options] COMMAND [its arguments]`, in prose or in a block, up to the end of
# the code span, a comment or a pipe
_COMMAND_LINE = re.compile(r"boxmq((?: +--?[\w-]+(?: +[^\s`-]\S*)?)*) +([a-z]+)\b([^`#|]*)")
_OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_every_command_line_in_the_docs_gives_options_its_command_has() -> None:
    """`boxmq get --subscriber` in a page, where only peek, requeue and purge have it, sends a
    user to a usage error."""
    commands = _commands()
    first = _options(cli_parser.parser())
    wrong = []
    for page in PAGES:
        if page.name == "benchmarks.md":  # a record of runs, commands of their day included
            continue
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            for before, command, after in _COMMAND_LINE.findall(line):
                if command not in commands:
                    continue  # a word after "boxmq" in prose
                given = [(o, first) for o in _OPTION.findall(before)]
                given += [(o, _options(commands[command])) for o in _OPTION.findall(after)]
                wrong += [
                    f"{page.name}:{number}: {command} {o}" for o, has in given if o not in has
                ]
    assert wrong == []


# Config files that make the reader ask for every key: a share group (`etl`, which _keys_read
# names `<group>`) and a listener, so that their keys are asked for too; then a tls table,
# whose missing cert stops the reading there, once its keys were asked for.
_GROUP_AND_LISTENER = "[share_groups.etl]\n[[mqtt.listener]]\n"
_ALL_TABLES = [_GROUP_AND_LISTENER, _GROUP_AND_LISTENER + "tls = {}\n"]


def _keys_read(folder: Path, texts: list[str], monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Every key the config reader asks a table for, whether the file has it or not, by its
    full name as the docs write it: `mqtt.limits.max_connections`, `mqtt.listener.host`
    (no `[1]`), `share_groups.<group>.dispatch`."""
    asked: set[str] = set()
    take = config_table.Table._take

    def spy(table: config_table.Table, key: str) -> Any:
        name = re.sub(r"\[\d+\]", "", table._key(key))
        asked.add(re.sub(r"^share_groups\.etl\b", "share_groups.<group>", name))
        return take(table, key)

    monkeypatch.setattr(config_table.Table, "_take", spy)
    for text in texts:
        config_file = folder / "boxmq.toml"
        config_file.write_text(text)
        # an empty tls table is refused: its keys were asked for before that
        with contextlib.suppress(InvalidArgument):
            load_config(config_file, defaults=ServeConfig())
    return asked


def test_every_config_key_is_in_configuration_md(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = {name.rpartition(".")[2] for name in _keys_read(tmp_path, _ALL_TABLES, monkeypatch)}
    keys -= {"<group>"}  # a group's name, not a key
    assert {"data", "max_connections", "max_message_size", "require_client_cert"} <= keys
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    # a key is named in code: `key`, `[table.key]`, `mqtt.listener.key`
    missing = sorted(key for key in keys if not re.search(rf"[`\[.]{key}\b", text))
    assert missing == []


_SHELL_BLOCK = re.compile(r"^```(?:sh|console)\n(.*?)^```", re.M | re.S)
_OPERATOR = set("|&;()")  # of a word that ends a command or starts one: `|`, `&&`, `);`, `$(`


def _boxmq_commands(line: str) -> Iterator[list[str]]:
    """The words of each `boxmq` command a shell line runs (`$ ` prompt, pipes, `&&`, `$(`)."""
    lexer = shlex.shlex(line.removeprefix("$ "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    command: list[str] | None = None
    before = "("
    for word in lexer:
        if set(word) <= _OPERATOR or word == "then":
            if command:
                yield command
            command, before = None, "("
        elif command is not None:
            command.append(word)
        elif word == "boxmq" and before == "(":
            command = []
        else:
            before = word
    if command is not None:
        yield command


def _usage_error(words: list[str]) -> str | None:
    """What `boxmq WORDS...` says of its usage, None if it takes them."""
    with contextlib.redirect_stderr(io.StringIO()) as said:
        try:
            cli_parser.parser().parse_args(joined_negative_durations(words))
        except SystemExit:
            return said.getvalue().splitlines()[-1]
    return None


def test_every_boxmq_line_of_a_shell_block_is_one_the_command_takes() -> None:
    """What a user copies into a shell is parsed as `boxmq` parses it: a value its option
    refuses (`--state done`), an argument missing or one too many is a usage error the
    reader meets first. Only the parse: nothing runs."""
    assert list(_boxmq_commands('if got=$(boxmq --json get jobs); then boxmq ack jobs "$id"')) == [
        ["--json", "get", "jobs"],
        ["ack", "jobs", "$id"],
    ]
    commands = [
        (page.name, words)
        for page in PAGES
        for block in _SHELL_BLOCK.findall(page.read_text(encoding="utf-8"))
        for line in block.replace("\\\n", " ").splitlines()  # a `\` goes on below
        if "boxmq" in line
        for words in _boxmq_commands(line)
    ]
    wrong = [f"{name}: {error}" for name, words in commands if (error := _usage_error(words))]
    assert wrong == []
    assert len(commands) > 30  # the blocks are read at all


def _documented_keys() -> set[str]:
    """The first column of configuration.md's tables of keys, by full name: a row of the
    `### [mqtt.limits]` section's table is `mqtt.limits.<row>`; `[[mqtt.listener]]` is
    `mqtt.listener`."""
    keys: set[str] = set()
    section = ""
    for line in (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading = re.fullmatch(r"### `\[([\w.]+)\]`", line)
            section = heading[1] + "." if heading else ""
        elif row := re.match(r"\| `\[*([\w.<>]+)\]*` \|", line):
            keys.add(section + row[1])
    return keys


def test_every_key_configuration_md_lists_is_read_where_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other way round: a key the page lists (a renamed one, or one in the wrong table)
    that the reader does not ask for would be refused as an unknown key, a user's file that
    followed the docs refused at start."""
    documented = _documented_keys()
    assert {"data", "mqtt.listener.host", "mqtt.limits.max_connections"} <= documented
    assert "exactly_once.done_ttl" in documented
    asked = _keys_read(tmp_path, _ALL_TABLES, monkeypatch)
    assert sorted(documented - asked) == []


def _documented_defaults() -> dict[str, str]:
    """The default column of configuration.md's tables, by full key name as in
    `_documented_keys`, each as the TOML value a file would write: its first backquoted
    value or leading number (`1883, or 8883 with tls` is 1883). Rows whose default is no
    value (`none`, `see below`) are left out."""
    defaults: dict[str, str] = {}
    section, column = "", 0
    for line in (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading = re.fullmatch(r"### `\[([\w.]+)\]`", line)
            section = heading[1] + "." if heading else ""
        elif line.startswith("| key |"):
            column = [cell.strip() for cell in line.split("|")].index("default")
        elif row := re.match(r"\| `([\w.]+)` \|", line):
            cell = line.split("|")[column].strip()
            if value := re.match(r"`([^`]+)`|(\d+)\b", cell):
                defaults[section + row[1]] = value[1] or value[2]
    return defaults


def _setting(key: str, value: str) -> str:
    """A config file that writes `key` (a full name) = `value`, in its table."""
    try:
        tomllib.loads(f"v = {value}")
    except tomllib.TOMLDecodeError:
        value = f'"{value}"'  # a duration written bare in the table (`10s`)
    table, _, name = key.rpartition(".")
    header = "[[mqtt.listener]]" if table == "mqtt.listener" else f"[{table}]" if table else ""
    return f"{header}\n{name} = {value}\n"


def test_every_default_configuration_md_gives_is_the_one_the_code_keeps(tmp_path: Path) -> None:
    """A file that writes each key at the default the page gives loads as a file that writes
    nothing: a default changed in the code (or the page) is caught here, where the key lists
    above check only the names."""
    defaults = _documented_defaults()
    assert {"fsync_interval", "mqtt.listener.port", "mqtt.limits.connect_timeout"} <= set(defaults)
    assert defaults["exactly_once.done_ttl"] == '"1h"'
    del defaults["data"]  # a path, taken from the config file's folder: `./data` is the cwd's

    def loaded(text: str) -> ServeConfig:
        config_file = tmp_path / "boxmq.toml"
        config_file.write_text(text)
        read = load_config(config_file)
        # what the file was, not what it sets
        return dataclasses.replace(
            read,
            source=None,
            file_sets_nothing=False,
            listeners_from_file=False,
            fsync_interval_from_file=False,
        )

    nothing = loaded("")
    differ = [key for key, value in defaults.items() if loaded(_setting(key, value)) != nothing]
    assert differ == []


def test_a_key_in_the_wrong_table_is_told_the_table_it_reads_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config._homes (where an error sends a key written in another table) against where
    the reader asks for each key."""
    homes = config._homes()
    wrong = []
    for name in _keys_read(tmp_path, _ALL_TABLES, monkeypatch):
        table, _, key = name.rpartition(".")
        if table.startswith("share_groups"):
            continue  # a group's name, and its dispatch, which is the top's too
        said = homes.get(key, "")
        if not (table.rpartition(".")[2] in said if table else "top of the file" in said):
            wrong.append(f"{name}: {said!r}")
    assert wrong == []


def test_the_top_level_keys_are_those_the_reader_asks_for_outside_any_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config._TOP_KEYS is kept by hand: a key load_config reads at the top but missing there
    is not sent "to the top of the file" when written below a [table] header, and one listed
    there but no longer read would send a user's key to a place that refuses it too."""
    asked = _keys_read(tmp_path, [""], monkeypatch)
    assert sorted(config._TOP_KEYS) == sorted(name for name in asked if "." not in name)


# python.md's sections, each the class whose methods it writes without their owner
# (`put(...)` under "## Queue"), and the owners the page writes them with (`box.queue(...)`).
_API_SECTIONS = {"Box": "Box", "Queue": "Queue", "Consumer": "Consumer", "Message": "Message"}
_API_OWNERS = {"boxmq": "boxmq", "box": "Box", "Subscriber": "Subscriber", "Queue": "Queue"}
_API_CALL = re.compile(r"`(?:(\w+)\.)?(\w+)\(([^`()]*)\)( -> [^`]+)?`")


def _documented_parameters(parameters: str) -> list[tuple[str, bool, str | None]]:
    """(name, keyword only, default as written) of each parameter of `parameters`."""
    listed, keyword = [], False
    for word in (w.strip() for w in parameters.split(",") if w.strip()):
        if word == "*":
            keyword = True
        else:
            name, _, default = word.partition("=")
            listed.append((name.strip(), keyword, default.strip() or None))
    return listed


def _api_calls() -> list[tuple[str, str, str, bool]]:
    """(owner, name, parameters, signature) of each call python.md writes with parameters
    named, outside its code blocks: `signature` when it gives its result (`-> Queue`) or a
    `*`, so that it lists every parameter, where a call such as `queue(name, create=False)`
    names some, with the values of an example."""
    found = []
    parts = re.split(r"^## (\w+)$", _prose(DOCS / "python.md"), flags=re.M)
    for at, part in enumerate(parts):
        section = _API_SECTIONS.get(parts[at - 1], "") if at % 2 == 0 and at else ""
        if at % 2:
            continue  # a heading
        for call in _API_CALL.finditer(part.replace("\n", " ")):
            owner, name, parameters, result = call.groups()
            signature = bool(result) or "*" in parameters
            if "..." in parameters or not (signature or "=" in parameters):
                continue
            written = _documented_parameters(parameters)
            if not all(name.isidentifier() for name, _, _ in written):
                continue  # an example's arguments: `box.publish(topic, m.body, ...)`
            owner = _API_OWNERS.get(owner, "") if owner else section
            if owner:
                found.append((owner, name, " ".join(parameters.split()), signature))
    return found


def test_every_signature_python_md_gives_is_the_codes() -> None:
    """Each `name(parameters) -> result` of python.md against `inspect.signature` of what it
    names: its parameters, in order, keyword-only where the page puts them after `*`, with
    the defaults it writes; a call it shows (`extend(seconds=None)`) names parameters there
    are. `Queue.ack(id, ...)` was written so, the parameter being `message_id`."""
    namespace = {name: getattr(boxmq, name) for name in dir(boxmq)}
    calls = _api_calls()
    assert ("boxmq", "open", True) in {(owner, name, sig) for owner, name, _, sig in calls}
    assert len({(owner, name) for owner, name, _, sig in calls if sig}) > 25  # the page is read
    wrong = []
    for owner, name, parameters, signature in calls:
        home = boxmq if owner == "boxmq" else getattr(boxmq, owner, Subscriber)
        function = getattr(home, name, None)
        if function is None:
            wrong.append(f"{owner}.{name}: no such name")
            continue
        actual = inspect.signature(function).parameters
        actual_names = [p for p in actual if p != "self"]
        written = _documented_parameters(parameters)
        if signature and [n for n, _, _ in written] != actual_names:
            wrong.append(f"{owner}.{name}({parameters}): the code's are {actual_names}")
        for parameter, keyword, default in written:
            real = actual.get(parameter)
            if real is None:
                wrong.append(f"{owner}.{name}: no parameter {parameter}")
            elif signature and keyword != (real.kind is inspect.Parameter.KEYWORD_ONLY):
                wrong.append(f"{owner}.{name}: {parameter} is {real.kind.description}")
            elif signature and default is not None and eval(default, namespace) != real.default:
                wrong.append(f"{owner}.{name}: {parameter}={real.default!r}, not {default}")
    assert wrong == []


def test_every_page_names_the_parameters_of_the_calls_it_writes_by_owner() -> None:
    """A call written on its owner with names for arguments anywhere in docs/ or README.md
    (`Queue.ack(id, consumer)`, `box.pending(source)`) names parameters the code has: a reader
    takes them for the keywords. concepts.md and python.md wrote `Queue.ack(id, ...)`, the
    parameter being `message_id`."""
    owners = {**_API_OWNERS, **{name: name for name in _API_SECTIONS}}
    call = re.compile(r"`(\w+)\.(\w+)\(([^`()]*)\)")
    checked, wrong = 0, []
    for page in [*sorted(DOCS.glob("*.md")), REPO / "README.md"]:
        for owner, name, parameters in call.findall(_prose(page).replace("\n", " ")):
            written = [p for p, _, _ in _documented_parameters(parameters)]
            if owner not in owners or not written or "..." in parameters:
                continue
            if not all(p.isidentifier() for p in written):
                continue  # an example's arguments: `box.publish(topic, m.body, ...)`
            home = boxmq if owner == "boxmq" else getattr(boxmq, owners[owner], Subscriber)
            actual = inspect.signature(getattr(home, name)).parameters
            checked += 1
            wrong += [
                f"{page.name}: {owner}.{name}({parameters})" for p in written if p not in actual
            ]
    assert checked > 10
    assert wrong == []


_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def _boxmq_has(name: str) -> bool:
    """Whether `boxmq.NAME` is there: an attribute, or a subpackage not imported yet, looked
    for first (`boxmq.spark`, which `hasattr` would import, and pyspark with it)."""
    return importlib.util.find_spec(f"boxmq.{name}") is not None or hasattr(boxmq, name)


def test_every_python_block_parses_and_names_what_boxmq_has() -> None:
    """What a user copies from a ```python block runs as far as its Python and its
    `boxmq.` names go: a block that does not parse, or a `boxmq.Name` the package does not
    have, is what a reader meets first. The README's tour, python.md's and pubsub.md's
    examples were run by hand; this keeps them from drifting at no cost."""
    blocks = [
        (page.name, block)
        for page in PAGES
        for block in _PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))
    ]
    wrong = []
    for name, block in blocks:
        try:
            tree = ast.parse(block)
        except SyntaxError as error:
            wrong.append(f"{name}: {error}")
            continue
        wrong += [
            f"{name}: boxmq.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "boxmq"
            and not _boxmq_has(node.attr)
        ]
    assert wrong == []
    assert len(blocks) > 5  # the blocks are read at all


# a line of python.md's flow-control block that says what a call returns: `x.holding()  # 2: ...`
_STATED = re.compile(r"^( *)(\w+\.holding\(\)) +# (\d+)\b.*$", re.M)


def _exec_until_drained(block: str, names: dict[str, Any]) -> list[BaseException]:
    """Run `block` (whose loop waits for ever) in a thread until its queue `jobs` has three
    messages done, then close its box, which ends the loop; what it raised, if anything."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            exec(block, names)
        except BaseException as error:
            failed.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    jobs = names["box"].queue("jobs")
    deadline = time.monotonic() + 5
    while jobs.counts().done < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    names["box"].close()
    worker.join(5)
    assert not worker.is_alive()
    return failed


def test_python_md_blocks_run_as_the_page_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """python.md's blocks run as written, each after the first (`boxmq.open("./data")`) in a
    fresh folder, with what its comments say a call returns asserted: the Consumer and flow
    control blocks used a `jobs` the page never made, and the first's `for` loop stood before
    lines it kept from ever running. The Consumer block's loop waits for ever, so it runs in a
    thread until the queue is drained and the box is closed, which ends it."""
    first, consuming, flow = _PYTHON_BLOCK.findall((DOCS / "python.md").read_text("utf-8"))
    for block in (consuming, flow):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        monkeypatch.chdir(folder)
        names: dict[str, Any] = {}
        exec(first, names)
        if block is flow:
            stated = _STATED.sub(r"\1assert \2 == \3", block)
            assert stated.count("assert") == 2
            exec(stated, names)
        else:
            assert _exec_until_drained(block, names) == []
        counts = names["box"].queue("jobs").counts()
        assert counts.done >= 1
        assert counts.locked == 0
        names["box"].close()


def test_the_readme_s_topic_example_ends_after_the_message_it_shows(tmp_path: Path) -> None:
    """Its `for msg in sub:` waited for a next message for ever, run as written: the block,
    after an open of a fresh root, ends and prints the one message it published."""
    [block] = [
        block
        for block in _PYTHON_BLOCK.findall((REPO / "README.md").read_text(encoding="utf-8"))
        if block.startswith("with box.subscribe(")
    ]
    opening = f"import boxmq\nbox = boxmq.open({str(tmp_path / 'data')!r})\n"
    ran = subprocess.run(
        [sys.executable, "-c", opening + block],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert ran.stdout == "sensors/kitchen/temp b'21.5'\n"


def _public(cls: type) -> dict[str, Any]:
    """The public methods, properties and fields boxmq's own classes give `cls` (not
    `object`'s, nor a `NamedTuple`'s `count`), a dataclass's fields without a default
    included."""
    found: dict[str, Any] = {
        member: getattr(cls, member)
        for home in reversed(cls.__mro__)
        if home.__module__.startswith("boxmq")
        for member in vars(home)
        if not member.startswith("_")
    }
    if dataclasses.is_dataclass(cls):
        fields = [field.name for field in dataclasses.fields(cls)]
        found |= {name: None for name in fields if not name.startswith("_") and name not in found}
    return found


def _api_members() -> dict[str, dict[str, Any]]:
    """What a user of `import boxmq` can call or read, from the package: each class of
    `boxmq.__all__` (exceptions aside, whose one member is their text, and enums, whose
    members are values) by name, with its `_public` members; the functions under `boxmq`."""
    found: dict[str, dict[str, Any]] = {"boxmq": {}}
    for name in boxmq.__all__:
        value = getattr(boxmq, name)
        if not isinstance(value, type):
            found["boxmq"][name] = value
        elif not issubclass(value, (BaseException, enum.Enum)):
            found[name] = _public(value)
    return found


def _call_arguments(text: str, name: str) -> set[str]:
    """Every word written between the parentheses of a `name(...)` of `text` (one level of
    parentheses inside them, `states=(target, ...)`, allowed)."""
    calls = re.findall(rf"\b{name}\(((?:[^`()]|\([^`()]*\))*)\)", text)
    return {word for call in calls for word in re.findall(r"\w+", call)}


def _undocumented(members: dict[str, dict[str, Any]], pages: list[Path]) -> list[str]:
    """Of `members` (by owner), those `pages` do not name in code, and the parameters of a
    method they never write as a call giving all of them (`find(message_id, *, states=...)`)."""
    text = " ".join(" ".join(_prose(page).split()) for page in pages)
    named = {word for span in re.findall(r"`([^`]*)`", text) for word in re.findall(r"\w+", span)}
    missing = []
    for owner, found in members.items():
        for name, value in found.items():
            if name not in named:
                missing.append(f"{owner}.{name}")
            elif inspect.isfunction(value):
                parameters = [p for p in inspect.signature(value).parameters if p != "self"]
                given = _call_arguments(text, name)
                missing += [f"{owner}.{name}({p})" for p in parameters if p not in given]
    return missing


def test_every_public_name_of_the_python_api_and_its_parameters_are_in_the_docs() -> None:
    """Each method, property and field of the API's classes is named in code somewhere in
    docs/ or the README, and a method that takes parameters is written once as a call giving
    every one of them: a new keyword, a new method or a new field of Message fails here until
    the docs say it. Box.lock_processes, Box.listen_offered and the Envelope's methods were
    in no page."""
    members = _api_members()
    assert {"Box", "Queue", "Consumer", "Subscriber", "Message", "Envelope"} <= set(members)
    assert {"put", "subscribe", "ack"} <= set(members["Queue"]) | set(members["Box"])
    assert _undocumented(members, PAGES) == []


def test_every_setting_of_serve_config_and_the_doors_is_named_where_it_is_set() -> None:
    """What a program that embeds the parts of `boxmq serve` sets, from the classes
    (`_public`: their fields, methods and the parameters of each): ServeConfig in
    configuration.md, with its Security (security.md too) and the ExactlyOnceLimits that
    `boxmq.open` takes as well (python.md, pubsub.md too); the MQTT door's MqttSettings,
    Listener, Limits, and the Authenticator and Authorizer it calls, in configuration.md,
    mqtt.md or security.md; XmppSettings in xmpp.md. Listener.ssl, the authenticator's and
    authorizer's methods and ServeConfig's `*_from_file` fields were in no page."""
    mqtt = [Limits, Listener, MqttSettings, Authenticator, Authorizer]
    serve = [Security, ExactlyOnceLimits]
    wanted = [
        ({"ServeConfig": _public(ServeConfig)}, ["configuration.md"]),
        (
            {c.__name__: _public(c) for c in serve},
            ["configuration.md", "security.md", "python.md", "pubsub.md"],
        ),
        ({c.__name__: _public(c) for c in mqtt}, ["configuration.md", "mqtt.md", "security.md"]),
        ({"XmppSettings": _public(XmppSettings)}, ["xmpp.md"]),
    ]
    assert {"max_connections", "identity_as_username"} <= set(_public(Limits)) | set(
        _public(Listener)
    )
    missing = [
        name
        for members, pages in wanted
        for name in _undocumented(members, [DOCS / page for page in pages])
    ]
    assert missing == []


def _spark_tables() -> dict[str, dict[str, str]]:
    """The tables of spark.md's Options section, by the first word of the line that brings
    each in (`Everywhere`, `Reading`, `Writing`): each option the first cell names (`consumer`
    (or `subscriber`) names two) with its default cell, "" in a table without one."""
    section = _prose(DOCS / "spark.md").partition("\n## Options\n")[2].partition("\n## ")[0]
    tables: dict[str, dict[str, str]] = {}
    title, column = "", 0
    for line in section.splitlines():
        if line and not line.startswith("|"):
            title = re.findall(r"\w+", line)[0]
        elif line.startswith("| option |"):
            cells = [cell.strip() for cell in line.split("|")]
            column = cells.index("default") if "default" in cells else 0
        elif line.startswith("| `"):
            cells = line.split("|")
            for name in re.findall(r"`(\w+)`", cells[1]):
                tables.setdefault(title, {})[name] = cells[column].strip() if column else ""
    return tables


def _spark_options() -> Any:
    pytest.importorskip("pyspark")  # boxmq.spark's package needs it; options.py itself not
    from boxmq.spark import options

    return options


def test_every_name_of_boxmq_spark_is_in_spark_md() -> None:
    """boxmq.spark's `__all__` (register, local_session, StreamBusy...) and the public
    methods of its classes, with their parameters, as the API's are held to the pages:
    BoxMQDataSource's (what Spark calls) were named nowhere."""
    _spark_options()  # pyspark there
    import boxmq.spark as spark

    members: dict[str, dict[str, Any]] = {"boxmq.spark": {}}
    for name in spark.__all__:
        value = members["boxmq.spark"][name] = getattr(spark, name)
        if isinstance(value, type) and not issubclass(value, BaseException):
            members[name] = _public(value)
    assert {"register", "local_session"} <= set(members["boxmq.spark"])
    assert _undocumented(members, [DOCS / "spark.md"]) == []


def test_every_spark_option_is_in_spark_md_s_table_for_it() -> None:
    """The data source's options, from the names it checks a map against (options._KNOWN,
    _COMMON): those of every role in the "Everywhere" table, a read's in "Reading", a
    write's in "Writing" (`queue`, in both, means a read's or a write's there); and the other
    way round, an option a table gives that the data source does not take would be refused
    as unknown."""
    options = _spark_options()
    known, everywhere = options._KNOWN, set(options._COMMON)
    wanted = {
        "Everywhere": everywhere,
        "Reading": {*known["read"], *known["batch read"], *known["stream read"]} - everywhere,
        "Writing": set(known["write"]) - everywhere,
    }
    tables = _spark_tables()
    assert {"root", "fsync"} <= everywhere
    assert "lockTimeout" in wanted["Reading"]
    assert {table: set(tables.get(table, {})) for table in wanted} == wanted


def test_every_default_spark_md_gives_is_the_one_the_data_source_keeps(tmp_path: Path) -> None:
    """A read or write that gives an option at the default spark.md writes for it (`1d`,
    `spark`) is read as one that gives none: a default changed in the code or the page is
    caught here."""
    options = _spark_options()
    with boxmq.open(tmp_path, fsync="never") as box:
        box.queue("q")
    readers = [options.stream_read_options, options.batch_read_options]
    writers = [lambda given: options.sink_options(given, frozenset())]
    plain = {"root": str(tmp_path), "queue": "q"}
    defaults = {
        name: written[1]
        for table in ("Everywhere", "Reading")
        for name, cell in _spark_tables()[table].items()
        if (written := re.match(r"`([^`]+)`", cell))
    }
    assert {"fsync", "consumer", "state", "lockTimeout"} <= set(defaults)
    differ = []
    for name, value in defaults.items():
        for read in readers + writers:
            with contextlib.suppress(InvalidArgument):  # an option this role does not take
                if read({**plain, name: value}) != read(plain):
                    differ.append(f"{name}={value}")
    assert differ == []


# Words of a log line that tell its reader what to do: `(renew it)`, `restart boxmq serve`,
# `raise the limit`, `check --xmpp-server`, `give ... another name`, `delete the file`.
_TELLS_WHAT_TO_DO = re.compile(
    r"\b(?:renew|restart|raise|lower|check|give|delete the|remove|stop|run|free|set|fix|is this)\b"
)


def test_spark_md_s_shell_block_makes_what_its_example_reads_and_its_subscribe_prints_it(
    tmp_path: Path,
) -> None:
    """spark.md's first shell block is run as written (its pip line aside) in a new folder, as a
    user does before the Python example: its put makes the queue the example reads, its
    subscribe the kept subscription the example's sink publishes to. The sink's message is
    published here by the embedded API (Spark runs in tests/spark, not in a unit test), and the
    subscribe line the page gives after the example prints what the page says it prints."""
    page = (DOCS / "spark.md").read_text(encoding="utf-8")
    block = re.search(r"^```sh\n(.*?)^```", page, re.M | re.S)
    assert block is not None
    lines = [line for line in block[1].splitlines() if line.startswith("boxmq ")]
    assert len(lines) == 2  # the put and the subscribe

    def run(line: str) -> str:
        words = shlex.split(line, comments=True)
        done = subprocess.run(
            [sys.executable, "-m", *words], cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    for line in lines:
        run(line)
    assert len(list((tmp_path / "data" / "sensors" / "target").iterdir())) == 1
    after = re.search(
        r"Once the stream has run a batch, `(boxmq [^`]+)`\s+prints what the sink published "
        r"\(`([^`]+)`\)",
        page,
    )
    assert after is not None
    topic = re.search(r'\.option\("topic", "([^"]+)"\)', page)
    assert topic is not None
    with boxmq.open(tmp_path / "data") as box:
        box.publish(topic[1], b"21.5")  # the body the shell block put in the queue
    assert run(after[1]).splitlines() == [after[2]]


def _shell_block(page: str, holding: str) -> str:
    """The one shell block of docs/`page` whose text holds `holding`."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks: list[str] = [b for b in _SHELL_BLOCK.findall(text) if holding in b]
    assert len(blocks) == 1, blocks
    return blocks[0]


def _send_once(
    folder: Path, block: str, *, taken: bool, flags: str, path: str
) -> subprocess.CompletedProcess[str]:
    """file-format.md's send-once block run by `sh -<flags>c` in `folder` with PATH `path`,
    with `x` in working/ and, if `taken`, a message already under the name it sends to."""
    jobs = folder / "data" / "jobs"
    for state in ("working", "target"):
        (jobs / state).mkdir(parents=True, exist_ok=True)
    for stale in (jobs / "target").iterdir():
        stale.unlink()
    (jobs / "working" / "x").write_text("tonight")
    if taken:
        (jobs / "target" / "4.nightly.T").write_text("yesterday")
    return subprocess.run(
        ["sh", f"-{flags}c", block],
        cwd=folder,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=10,
    )


# GNU mv 9.2 to 9.4, whose `-n` exits 1 when it skips a taken name (up to 9.1, as on this
# machine, and from 9.5 it exits 0): the machine's mv, then that status, as those versions
# give it. Debian has no such coreutils to install beside the system's.
_MV_9_2 = """#!/bin/sh
{mv} "$@" || exit
if [ "$1" = -n ] && [ -e "$2" ]; then
    echo "mv: not replacing '$3'" >&2
    exit 1
fi
"""


@pytest.mark.parametrize("mv", ["this machine's", "coreutils 9.2 to 9.4"])
@pytest.mark.parametrize("flags", ["", "e"])
def test_file_format_md_s_send_once_block_fails_exactly_when_it_sent_nothing(
    tmp_path: Path, flags: str, mv: str
) -> None:
    """The block ended with `[ -e working/x ] && echo ...`: status 1 when the message went
    (the test false), 0 when the name was taken and nothing went, so a script going on with
    `&&` went on exactly when it should have stopped. Under `set -e` with a coreutils whose
    `mv -n` exits 1 when it skips, the block stopped at the mv, its message unsaid."""
    path = os.environ["PATH"]
    if mv != "this machine's":
        real = shutil.which("mv")
        assert real is not None
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "mv").write_text(_MV_9_2.format(mv=shlex.quote(real)))
        (tmp_path / "bin" / "mv").chmod(0o755)
        path = f"{tmp_path / 'bin'}{os.pathsep}{path}"
    block = _shell_block("file-format.md", "mv -n")
    jobs = tmp_path / "data" / "jobs"
    sent = _send_once(tmp_path, block, taken=False, flags=flags, path=path)
    assert (sent.returncode, sent.stdout, sent.stderr) == (0, "", "")
    assert os.listdir(jobs / "working") == []
    assert (jobs / "target" / "4.nightly.T").read_text() == "tonight"
    refused = _send_once(tmp_path, block, taken=True, flags=flags, path=path)
    assert refused.returncode == 1
    assert "4.nightly.T is taken in target/" in refused.stderr
    assert (jobs / "target" / "4.nightly.T").read_text() == "yesterday"  # not replaced
    assert (jobs / "working" / "x").read_text() == "tonight"  # to send under another name


def _warnings_and_errors() -> Iterator[tuple[str, str]]:
    """(where, text) of each `log.warning`, `log.error`, `log.exception` and `log.critical`
    of boxmq's modules, from their source, its literal text: an f-string's or a %-format's
    parts between the values as `%s`; lines whose text is all a value (`log.warning("%s",
    said)`) are left out, their words being made elsewhere."""
    for module in sorted((REPO / "src" / "boxmq").rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("warning", "error", "exception", "critical")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "log"  # every module's logging.getLogger
                and node.args
            ):
                continue
            text = node.args[0]
            if isinstance(text, ast.JoinedStr):
                written = "".join(
                    str(part.value) if isinstance(part, ast.Constant) else "%s"
                    for part in text.values
                )
            elif isinstance(text, ast.Constant) and isinstance(text.value, str):
                written = text.value
            else:
                continue
            yield f"{module.relative_to(REPO)}:{node.lineno}", written


def test_every_warning_that_tells_what_to_do_is_quoted_in_the_docs() -> None:
    """A warning or error of the log that asks its reader to act (renew a certificate,
    restart the server, delete a file) is one a user searches the docs for: one of its
    literal parts of 15 characters or more is written in a page, where the page says what it
    means. The TLS certificate's dates, a session record boxmq cannot read and a Will the disk
    refused were said in other words, no search finding them."""
    docs = " ".join(" ".join(page.read_text(encoding="utf-8").split()) for page in PAGES)
    lines = [
        (where, text) for where, text in _warnings_and_errors() if _TELLS_WHAT_TO_DO.search(text)
    ]
    assert len(lines) > 5  # the source is read at all
    missing = []
    for where, text in lines:
        parts = [part.strip(" :;,.()") for part in re.split(r"%[-\d.]*[sdrif]", text)]
        if not any(part in docs for part in parts if len(part) >= 15):
            missing.append(f"{where}: {text[:80]}")
    assert missing == []


def test_every_sys_topic_is_a_row_of_mqtt_md_s_table_of_them() -> None:
    """Each `$SYS` topic a server publishes has its row in mqtt.md's table, which says what
    its value is, and each row there is one a server publishes."""
    figures = Figures(
        connected=0,
        subscriptions=0,
        messages_received=0,
        messages_sent=0,
        bytes_received=0,
        bytes_sent=0,
    )
    published = {topic for topic, _ in SysTopics(10, version="1", started=0).update(0, figures)}
    assert {"$SYS/broker/version", "$SYS/broker/bytes/sent"} <= published
    text = (DOCS / "mqtt.md").read_text(encoding="utf-8")
    assert set(re.findall(r"^\| `(\$SYS/[^`]*)` \|", text, re.M)) == published


def test_concepts_says_the_sweeps_times_as_the_code_has_them() -> None:
    """docs/concepts.md's section on the sweep names its times in words: each is the one the
    code uses (a change of a default there leaves the page wrong otherwise)."""
    from boxmq.client.box import open as open_box
    from boxmq.client.housekeeping import FULL_SWEEP_EVERY
    from boxmq.client.sweeps import EXPIRY_NAMES_PER_SECOND, SweepLimits

    text = (REPO / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = " ".join(text.partition("## The sweep")[2].partition("\n## ")[0].split())
    defaults = inspect.signature(open_box).parameters
    limits = SweepLimits()
    assert (FULL_SWEEP_EVERY, limits.foreign_lock_timeout) == (60.0, 300.0)
    assert "once a minute" in section
    assert "goes back 5 minutes after it was moved there" in section
    assert f"every N / {EXPIRY_NAMES_PER_SECOND:,} s" in section
    assert defaults["abandon_after"].default == 3600.0
    assert "`abandon_after` (1 h)" in section
    assert defaults["processed_retention"].default == 86400.0
    assert "`processed_retention` (1 d)" in section
