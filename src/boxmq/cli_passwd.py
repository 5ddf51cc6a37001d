"""`boxmq passwd FILE USER`: add a user to an MQTT password file, change a password, delete one.

It needs no root folder, so `cli.main` runs it without opening one. The password comes from
`--password` (visible to other users in the process list: for scripts on a private machine),
from standard input with `--stdin` (one line: more is refused, not cut), or from a prompt on
the terminal. `boxmq --json passwd` prints what it did as one JSON object, as every command.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from boxmq import cli_output as output
from boxmq.core.topics import MQTT_STRING_MAX
from boxmq.errors import InvalidArgument

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(standalone=run)
    p.add_argument("file", help="the password file (created, mode 0600, when missing)")
    p.add_argument("user")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--password", help="the password (other users can see it in `ps`)")
    source.add_argument("--stdin", action="store_true", help="read the password from stdin")
    source.add_argument("--delete", action="store_true", help="remove the user")


def run(args: argparse.Namespace) -> int:
    # Imported here: `boxmq.mqtt` brings the whole MQTT codec, which every other command
    # loaded with this one's parser (13 % of a `boxmq put`'s instructions).
    from boxmq.mqtt.passwords import delete_user, set_password, validate_username

    validate_username(args.user)
    if args.delete:
        delete_user(args.file, args.user)
        _report(args, "deleted", f"deleted user {args.user} from {args.file}")
        return 0
    added = set_password(args.file, args.user, _password_bytes(_password(args)))
    if added:
        _report(args, "added", f"added user {args.user} in {args.file}")
    else:
        _report(args, "changed", f"changed the password of {args.user} in {args.file}")
    return 0


def _report(args: argparse.Namespace, done: str, text: str) -> None:
    """What was done, as a line for a person or (`--json`) an object for a script. The file and
    the user as given: both were checked or written as such (the user is UTF-8 by then)."""
    if args.json:
        output.out(json.dumps({"file": args.file, "user": args.user, "done": done}))
    else:
        output.out(text)


def _password_bytes(password: str) -> bytes:
    """The bytes typed: an MQTT password is binary data (§3.1.3.6), so bytes that are not
    UTF-8 (which Python keeps as lone surrogates) are taken as they came."""
    data = password.encode("utf-8", "surrogateescape")
    if len(data) > MQTT_STRING_MAX:
        raise InvalidArgument(
            f"a password of {len(data)} bytes: MQTT allows at most {MQTT_STRING_MAX}"
        )
    return data


def _password_from_stdin() -> str:
    """One line, its line end not part of it. A pipe is read to its end: a second line is
    refused rather than dropped, since whoever piped it meant it to count (a password with a
    line break in it, a file of several), and a password other than the one sent would be
    stored without a word. From a terminal, the line typed."""
    if sys.stdin.isatty():
        return sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    text = sys.stdin.read()
    password = text.removesuffix("\n").removesuffix("\r")
    if "\n" in password:
        lines = password.count("\n") + 1
        raise InvalidArgument(
            f"--stdin read {lines} lines: give the password alone on one line (a password "
            "with a line break in it can only be given with --password); nothing changed"
        )
    return password


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password = str(args.password)
    elif args.stdin:
        password = _password_from_stdin()
    elif sys.stdin.isatty():
        try:
            password = getpass.getpass(f"password for {args.user}: ")
            again = getpass.getpass("again: ")
        except EOFError:  # Ctrl-D at the prompt: getpass raised it, shown as a traceback
            if sys.stderr.isatty():
                sys.stderr.write("\n")  # the prompt's line is left open: the error on its own
            raise InvalidArgument("no password typed (Ctrl-D); nothing changed") from None
        if again != password:
            raise InvalidArgument("the two passwords differ; nothing changed")
    else:
        raise InvalidArgument("no terminal to ask on: give --password, or --stdin and pipe it in")
    if not password:
        raise InvalidArgument("the password must not be empty")
    return password
