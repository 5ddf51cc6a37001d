"""`boxmq`: the command line. Human tables by default, `--json` for scripts.

Exit status: 0 done, 1 an error (the message says what to fix), 2 a usage error,
3 nothing to get (`get` on a queue with no ready message), 141 the reader of stdout left,
130, 143 and 129 stopped by SIGINT, SIGTERM or SIGHUP (`serve` stops cleanly: 0).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
from collections.abc import Callable, Sequence

import boxmq
from boxmq import cli_errors, cli_parser
from boxmq import cli_output as output
from boxmq.cli_args import Default, joined_negative_durations, no_home_folder
from boxmq.client import Box, mqtt_fields
from boxmq.errors import BoxMQError, InvalidArgument, QueueNotFound
from boxmq.log_lines import FORMAT, one_line
from boxmq.model import Property
from boxmq.store.layout import in_the_way
from boxmq.store.v5_properties import CORRELATION_DATA, RESPONSE_TOPIC

__all__ = ["main"]

SIGPIPE_STATUS = 141  # 128 + SIGPIPE: what a shell reports for a tool whose reader left
_Command = Callable[[argparse.Namespace, Box], int]


# What a client chooses (a client id, a user name, a topic: MQTT lets them hold line breaks)
# is written into log lines; a line break there began a line of its own, one that read as the
# broker's (`client x<LF>... INFO boxmq.mqtt: client admin connected from ...`), and an escape
# sequence could rewrite a terminal's screen. They are written escaped as repr() does: \n,
# \x1b, \u2028. Tracebacks, added after the message, keep their lines. A file name's bytes
# that are not UTF-8 (\udcff in a str, or 'x\\udcff' where %r wrote it) are written \xff, as
# peek and ls show them: a log file opened for UTF-8 refused the record ("--- Logging error
# ---", the line lost), and standard error wrote a \udcff no one could match to the file.
# boxmq's own loggers escape their records so already (log_lines); this handler's formatter
# does it for every other logger's too (slixmpp, asyncio), with the same one_line.


class OneLineFormatter(logging.Formatter):
    """A log record's message on one line in bytes any log can hold, however it was made."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = output.bytes_shown(record.message)
        record.message = one_line(message)
        return super().formatMessage(record)


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli_parser.parser()
    words = joined_negative_durations(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(words)
    if unknown:
        # What parse_args says, but with the command's usage (`boxmq serve ... extra`): the
        # top-level usage names no option of the command.
        meant = cli_parser.near_option(parser, args.name, unknown)
        args.usage_error(f"unrecognized arguments: {' '.join(unknown)}{meant}")
    if empty := _empty_path(args):
        args.usage_error(empty)
    if unknown_home := _home_folder(args):
        args.usage_error(unknown_home)
    if (check := _USAGE_CHECKS.get(args.name)) is not None:
        check(args)  # a usage error exits (2) here, before anything is opened
    log = logging.StreamHandler(sys.stderr)
    log.setFormatter(OneLineFormatter(FORMAT))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[log])
    if sys.stdout is None and args.name != "serve":  # `>&-`: fd 1 closed, print() a no-op
        # Refused before anything is done: `subscribe` would ack each message it never
        # printed, `get` lock one nobody sees, `put` send one whose id nobody learns.
        output.err(
            f"{output.said_by(args)}: the standard output is closed, so nothing it prints could be "
            "read: give it one (>/dev/null to discard what it prints)",
        )
        return 1
    if isinstance(sys.stdout, io.TextIOWrapper):
        # An output whose encoding cannot write a character (PYTHONIOENCODING=ascii, a
        # Latin-1 terminal) shows it escaped, \u20ac, as stderr does: a UnicodeEncodeError
        # was a traceback, with the message subscribe was printing left unacked.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        status = _run(args)
        if sys.stdout is not None:  # `serve >&-` prints nothing and runs
            output.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except BoxMQError as error:
        output.err(output.said(f"{output.said_by(args)}: {error}"))
        return 1
    except output.OutputError as error:
        output.err(f"{output.said_by(args)}: {error}{_OUTPUT_LOST.get(args.name, '')}")
        return 1
    except BrokenPipeError:
        # The reader left (`boxmq get q | head -1`): quiet, as a Unix tool killed by SIGPIPE.
        # A message `get` locked stays locked until its deadline, then is delivered again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing more to flush at exit
        return SIGPIPE_STATUS
    except OSError as error:
        output.err(
            output.said(f"{output.said_by(args)}: {cli_errors.os_error(error, str(args.data))}"),
        )
        return 1
    except KeyboardInterrupt:
        return 130


def _check_message(args: argparse.Namespace) -> None:
    """put's and publish's usage errors, and the warning of a `-p mqtt.*` name mistyped."""
    if args.file is not None and args.body is not None:
        # A usage error (exit 2), as --mqtt with --no-mqtt, said before put makes the root.
        args.usage_error("give the body either as BODY or with --file, not both")
    if twice := _given_twice(args.property):
        args.usage_error(f"property {twice!r} is given twice: give each name once")
    names = {name for name, _ in args.property}
    for option, given, name, field in _OPTION_FIELDS:
        if getattr(args, given) and name in names:  # `--reply-to ""` gives none
            # The option wins (file-format.md), so the -p was dropped without a word while
            # `get` showed both: two values for one field, as a name given twice is.
            args.usage_error(
                f"{option} and -p {name} are the same MQTT v5 field ({field}): give one of them"
            )
    for name, _ in args.property:
        if (known := _near_miss(name)) is not None:
            output.err(output.said(_looks_like(args, name, known)))


def _check_session(args: argparse.Namespace) -> None:
    if (args.action == "end") != (args.client_id is not None):
        # Said before the root is opened: `session end` on a mistyped --data told of the
        # root (exit 1), not of the missing CLIENT_ID.
        args.usage_error("`session end` takes a CLIENT_ID, `session ls` none")
    if args.client_id == "":
        # A persistent session's client id is never empty (MQTT gives an empty one a clean
        # session only): it said "destination name '' is empty or contains NUL", exit 1.
        args.usage_error(
            "CLIENT_ID is empty: give the client id `boxmq session ls` lists (a persistent "
            "session's is never empty)"
        )
    if args.force and args.action == "ls":
        args.usage_error("--force goes with `session end`")
    if args.config is not None and args.action == "end":
        args.usage_error("--config goes with `session ls`")


def _check_serve(args: argparse.Namespace) -> None:
    """A usage error (exit 2, with serve's usage), said before the config is read and the
    root recovered: not an error of the run (exit 1) after both."""
    from boxmq.xmpp.settings import settings_from  # 1.3 % of a put

    if args.json:  # taken before, and it changed nothing: its log lines are for people
        args.usage_error(
            "--json: serve prints no output, only its log on stderr, as text; leave --json out"
        )
    # Made here, each rule of the settings run once (they were run three times): a refused
    # --xmpp-* value, a missing secret, a flag without --xmpp-component are usage errors.
    try:
        args.xmpp_settings = settings_from(
            args.xmpp_component,
            args.xmpp_server,
            secret=args.xmpp_secret,
            secret_file=args.xmpp_secret_file,
            lock_timeout=args.xmpp_lock_timeout,
            stanza_size_limit=args.xmpp_stanza_size_limit,
            environ=os.environ,
        )
    except InvalidArgument as refused:
        args.usage_error(str(refused))


# Each command's checks of its arguments that argparse cannot make, before it runs.
_USAGE_CHECKS: dict[str, Callable[[argparse.Namespace], None]] = {
    "put": _check_message,
    "publish": _check_message,
    "session": _check_session,
    "serve": _check_serve,
}


def _empty_path(args: argparse.Namespace) -> str:
    """What is wrong with an empty --data or --config, "" if neither is: the system reads ""
    as the current folder, so `put --data ""` made queues there, and `serve --config ""`
    said "cannot read config file .: Is a directory"."""
    if getattr(args, "config", None) == "":
        return "--config is empty: give a TOML file, or leave --config out"
    if args.name == "passwd" or str(args.data) != "":  # passwd has no root folder
        return ""
    if isinstance(args.data, Default):
        return "$BOXMQ_DATA is empty: give it the root folder, or unset it for ./data"
    return "--data is empty: give the root folder, e.g. --data ./data"


def _home_folder(args: argparse.Namespace) -> str:
    """Reads a leading `~` of --data, $BOXMQ_DATA, --config or passwd's FILE as a home folder,
    as the config file's paths are read, and says what is wrong with one that names no user
    ("" if nothing is). Quoted (`--data '~/q'`, `BOXMQ_DATA="~/q"`), no shell expands it: the
    folder `~` made in the current one was one `rm -rf ~` away from the home folder. passwd
    opens no root, so its --data is not read."""
    for key in ("file",) if args.name == "passwd" else ("data", "config"):
        path = getattr(args, key, None)
        if path is None or not path.startswith("~"):
            continue
        home = os.path.expanduser(path)
        if home.startswith("~"):  # left as it was: no such user, or no $HOME for a bare ~
            if key == "file":
                given = "FILE"  # passwd's, a positional
            else:
                given = "$BOXMQ_DATA" if isinstance(path, Default) else f"--{key}"
            return f"{given} {no_home_folder(path)}"
        setattr(args, key, Default(home) if isinstance(path, Default) else home)
    return ""


def _run(args: argparse.Namespace) -> int:
    standalone: Callable[[argparse.Namespace], int] | None = getattr(args, "standalone", None)
    if standalone is not None:  # e.g. passwd: it has no root folder to open
        return standalone(args)
    command: _Command = args.command
    before_root: Callable[[argparse.Namespace], None] | None = getattr(args, "before_root", None)
    if before_root is not None:  # put, publish, subscribe: refused before the root is made
        before_root(args)
    if not getattr(args, "creates_root", False):
        _check_root(str(args.data), getattr(args, "root_from", None))
    cli_errors.check_not_a_dropbox(str(args.data), getattr(args, "root_from", None))
    with _opened(args) as box:
        return command(args, box)


def _opened(args: argparse.Namespace) -> Box:
    """The root, with the delivery limit typed (0: none), else boxmq.open's own (5)."""
    if args.max_deliveries is None:
        return boxmq.open(args.data, fsync=args.fsync)
    return boxmq.open(args.data, fsync=args.fsync, max_deliveries=args.max_deliveries or None)


def _check_root(path: str, root_from: str | None = None) -> None:
    """A command that writes no message must not make the root: `boxmq --data typo ls` says so
    instead of leaving an empty folder behind. `root_from`: where the root came from when not
    --data or $BOXMQ_DATA (a config file's key: `data in FILE`), which the error names."""
    if not os.path.isdir(path):
        what = "it is a file, not a folder" if os.path.exists(path) else "it does not exist"
        # `--data file/sub` "did not exist"
        if (file := in_the_way(os.path.dirname(os.path.abspath(path)))) is not None:
            what = f"{file} is a file, not a folder"
        # Those that make a missing root refuse one a file stands in the way of, and one that
        # is a link to nothing (`the root ... is a symbolic link to ...`).
        remedy = (
            " (put, publish, subscribe and serve make it)"
            if what == "it does not exist"
            else ", or move the file away (no command makes a folder where a file stands)"
        )
        if os.path.islink(path) and not os.path.exists(path):
            what = f"it is a symbolic link to {os.readlink(path)}, which is no folder"
            remedy = ", or make that folder (no command makes a folder through a link)"
        given = root_from or "--data or $BOXMQ_DATA"
        raise QueueNotFound(f"no folder {path} ({what}): check {given}{remedy}")


def _near_miss(name: str) -> str | None:
    """The `mqtt.*` name boxmq sends as an MQTT v5 property (mqtt_fields.FIELDS) that the
    property name `name`, not one of them, looks like a typo of (`mqtt.content_type`,
    `MQTT.Content-Type`, `mqtt.corelation-data`), or None. Such a name is stored as a
    property of its own, a User Property over MQTT, as a v5 publisher may mean it, so it is
    not refused; compared after `mqtt.`, which all share, a name chosen on purpose
    (`mqtt.content-length` 0.69, `mqtt.payload-format-indicator` 0.74) stays under 0.8."""
    lower = name.lower()
    if name in mqtt_fields.FIELDS or not lower.startswith(_MQTT):
        return None
    import difflib  # here: only a `-p mqtt.*` pays for it

    key = lower.removeprefix(_MQTT).replace("_", "-")
    suffixes = [field.removeprefix(_MQTT) for field in mqtt_fields.FIELDS]
    close = difflib.get_close_matches(key, suffixes, n=1, cutoff=0.8)
    return _MQTT + close[0] if close else None


_MQTT = "mqtt."


def _looks_like(args: argparse.Namespace, name: str, known: str) -> str:
    return (
        f"{output.said_by(args)}: warning: property {name!r} goes as a property of its own (a User "
        f"Property to MQTT v5 subscribers), not as {known!r}, the v5 property it looks like; "
        f"if you meant that one, write -p {known}=..."
    )


# The options of put and publish that are also an MQTT v5 field a -p may name: (option, its
# argparse dest, the -p name, the field).
_OPTION_FIELDS = (
    ("--reply-to", "reply_to", RESPONSE_TOPIC, "Response Topic"),
    ("--correlation-id", "correlation_id", CORRELATION_DATA, "Correlation Data"),
)


def _given_twice(properties: list[tuple[str, Property]]) -> str | None:
    """The first name of the -p options given twice, None if none is: refused, not quietly
    the last one kept."""
    seen: set[str] = set()
    for name, _ in properties:
        if name in seen:
            return name
        seen.add(name)
    return None


# -- output ---------------------------------------------------------------------------------------


# What became of a command's work when its output failed: it stands, its words lost.
_OUTPUT_LOST = {
    "put": " (the message is sent: its id is what was lost)",
    "publish": " (the message is published: its id is what was lost)",
    "get": " (the message it locked comes back when --lock ends)",
    "subscribe": " (the message it could not write is not acked)",
}


if __name__ == "__main__":
    sys.exit(main())
