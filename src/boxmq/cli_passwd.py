"""`boxmq passwd FILE USER`: add a user to an MQTT password file, change a password, delete one.

It needs no root folder, so `cli.main` runs it without opening one. The password comes from
`--password` (visible to other users in the process list: for scripts on a private machine),
from the first line of standard input with `--stdin`, or from a prompt on the terminal.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from boxmq.core.topics import MQTT_STRING_MAX
from boxmq.errors import InvalidArgument
from boxmq.mqtt.passwords import delete_user, set_password, validate_username

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:  # argparse's _SubParsersAction is private
    help = "add a user to an MQTT password file, change their password, or delete them"
    p: argparse.ArgumentParser = sub.add_parser("passwd", help=help, description=help)
    p.set_defaults(standalone=run, name="passwd")
    p.add_argument("file", help="the password file (created, mode 0600, when missing)")
    p.add_argument("user")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--password", help="the password (other users can see it in `ps`)")
    source.add_argument("--stdin", action="store_true", help="read the password from stdin")
    source.add_argument("--delete", action="store_true", help="remove the user")


def run(args: argparse.Namespace) -> int:
    validate_username(args.user)
    if args.delete:
        delete_user(args.file, args.user)
        print(f"deleted user {args.user} from {args.file}")
        return 0
    added = set_password(args.file, args.user, _password_bytes(_password(args)))
    done = "added user" if added else "changed the password of"
    print(f"{done} {args.user} in {args.file}")
    return 0


def _password_bytes(password: str) -> bytes:
    """The bytes typed: an MQTT password is binary data (§3.1.3.6), so bytes that are not
    UTF-8 (which Python keeps as lone surrogates) are taken as they came."""
    data = password.encode("utf-8", "surrogateescape")
    if len(data) > MQTT_STRING_MAX:
        raise InvalidArgument(
            f"a password of {len(data)} bytes: MQTT allows at most {MQTT_STRING_MAX}"
        )
    return data


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password = str(args.password)
    elif args.stdin:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.user}: ")
        if getpass.getpass("again: ") != password:
            raise InvalidArgument("the two passwords differ; nothing changed")
    else:
        raise InvalidArgument("no terminal to ask on: give --password, or --stdin and pipe it in")
    if not password:
        raise InvalidArgument("the password must not be empty")
    return password
