"""The command line's parser: the options every command shares, and each command's own, its
parser built only when that command is given (`Commands`); the help texts are here.
`tests/unit/cli_help.txt` pins what `--help` prints."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from boxmq import __version__, cli_dropbox
from boxmq import cli_output as output
from boxmq import cli_types as types
from boxmq.cli_args import PROPERTY_TYPES, Default
from boxmq.client import Box
from boxmq.store.commit import FsyncPolicy  # loaded by boxmq.client already: no cost
from boxmq.store.layout import State

__all__ = ["Commands", "near_option", "parser"]


def _add_common(
    parser: argparse.ArgumentParser, *, defaults: bool, json_shown: bool = True
) -> None:
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--data",
        default=default(Default(os.environ.get("BOXMQ_DATA", "./data"))),
        help="the root folder (default: $BOXMQ_DATA or ./data)",
    )
    parser.add_argument(
        "--fsync",
        default=default(Default(FsyncPolicy.ALWAYS.value)),
        choices=FsyncPolicy.words(),
        help="when a put is on disk: "
        + _listed(FsyncPolicy.words(), FsyncPolicy.ALWAYS.value, "default; group commit"),
    )
    parser.add_argument(
        "--max-deliveries",
        type=types.max_deliveries,
        default=default(None),
        metavar="N",
        # The limit is the root's applications', not each process's own: a get or unlock
        # opened with another one dead-letters at it (docs/configuration.md, max_deliveries).
        help="deliveries before a message goes to error/: give the one your applications "
        "open the root with (default 5; serve: the config's max_deliveries); 0: no limit",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        # Where the keys are: a script's author reads the help first, not the code.
        help="print JSON for scripts (subscribe: a line per message; errors stay a line on "
        'stderr), its keys in docs/cli.md, "JSON output"'
        if json_shown
        else argparse.SUPPRESS,
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default(False),
        help="also log debug lines (serve: overrides the config's log_level)",
    )


def _listed(words: Sequence[str], marked: str, note: str) -> str:
    """An option's words for its help, `marked` followed by `(note)`: taken from where they
    are defined (FsyncPolicy, the property types), so that a help cannot offer a word the
    option refuses, or leave out one it takes."""
    return ", ".join(f"{word} ({note})" if word == marked else word for word in words)


# The folder behind each of `ls`'s counts that is not named as its folder is: a new user who
# read `ls` typed `peek q --state dead`, and was shown only the folders' names.
_LS_COUNTS = {
    "ready": State.TARGET,
    "locked": State.PROCESSING,
    "done": State.PROCESSED,
    "dead": State.ERROR,
}


class _Parser(argparse.ArgumentParser):
    """Its usage errors show an argument's bytes that are not UTF-8 as \\xNN (output.said)."""

    def error(self, message: str) -> NoReturn:
        super().error(output.said(message))

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's check of a value against the option's choices: the one place its
        "invalid choice" error is made with the option at hand, to name the folder or the
        word meant."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as error:
            hint = _ls_count_folder(action, value) or _near_choice(action, value)
            if not hint:
                raise
            raise argparse.ArgumentError(action, f"{error.message}{hint}") from None


def _ls_count_folder(action: argparse.Action, value: object) -> str:
    """`" (ls's DEAD is error/: --state error)"` for a folder option given the word `ls` counts
    that folder's messages under, when the option takes that folder; else ""."""
    if not isinstance(value, str):
        return ""
    folder = _LS_COUNTS.get(value)
    if folder is None or action.choices is None or folder.value not in action.choices:
        return ""
    option = action.option_strings[0]
    return f" (ls's {value.upper()} is {folder.value}/: {option} {folder.value})"


def _near_choice(action: argparse.Action, value: object) -> str:
    """`" (did you mean ls?)"` when `value` looks like a typo of one of the choices (`boxmq
    lss`, `--state procesing`), else "": a misspelt command was shown the list alone, where
    a misspelt option is told the one meant (`near_option`)."""
    if not isinstance(value, str) or action.choices is None:
        return ""
    choices = [str(choice) for choice in action.choices]
    # Another tool's word first: it says what was meant, where a look-alike only guesses
    # (`nack` is spelt near `ack`, which would settle for good what was meant to go back).
    meant = _OTHER_WORDS.get(value)
    if meant not in choices:
        meant = _closest(value, choices)
    return f" (did you mean {meant}?)" if meant else ""


# Other tools' words for a command, too far apart in spelling for `_closest` (`list` is 0.67
# of `ls`): a user coming from them typed `boxmq list` and got the list of commands alone.
_OTHER_WORDS: Final = {
    "list": "ls",
    "send": "put",
    "enqueue": "put",  # spelt near requeue, which redrives error/ instead
    "pub": "publish",
    "sub": "subscribe",
    "receive": "get",
    "consume": "get",
    "dequeue": "get",
    "release": "unlock",
    "nack": "reject",
    "redrive": "requeue",
    "remove": "delete",
    "rm": "delete",
}


def _closest(word: str, words: Sequence[str]) -> str | None:
    """The one of `words` that `word` looks like a typo of, if any: the cutoff (0.75) is the
    config file's, for a misspelt key."""
    import difflib  # here: only a usage error pays for it

    close = difflib.get_close_matches(word, words, n=1, cutoff=0.75)
    return close[0] if close else None


_Arguments = Callable[[argparse.ArgumentParser], None]  # adds one command's arguments
_Parents = Callable[[], list[argparse.ArgumentParser]]  # makes the parents of its parser


def _common(*, json_shown: bool = True) -> list[argparse.ArgumentParser]:
    """The common options after the command too (`boxmq serve --data DIR`): there they have no
    default, so one given before the command stays unless it is given again after."""
    common = _Parser(add_help=False)
    _add_common(common, defaults=False, json_shown=json_shown)
    return [common]


if TYPE_CHECKING:  # generic in typeshed only
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction


class Commands(_SubParsers):
    """COMMAND, whose parser is built when it is given, not before: building every one
    was 6 % of a `boxmq put`'s instructions (docs/benchmarks.md). The top-level help lists
    each command by its name and one-line summary, which need no parser."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._later: dict[str, tuple[str, _Arguments, _Parents]] = {}  # name: how to build it
        # Every name, for argparse's check of COMMAND and its "invalid choice" error (typeshed
        # types them as argparse's own map of the parsers, which holds the built ones only).
        self.choices = self._later  # type: ignore[assignment]

    def add(
        self,
        name: str,
        help: str,
        arguments: _Arguments,
        *,
        common: _Parents = _common,
    ) -> None:
        self._later[name] = (help, arguments, common)
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help))

    def parser(self, name: str) -> argparse.ArgumentParser:
        """`name`'s parser, built at its first use."""
        if (built := self._name_parser_map.get(name)) is not None:
            return built
        help, arguments, common = self._later[name]
        p = self.add_parser(name, description=help, parents=common())
        p.set_defaults(name=name, usage_error=p.error)  # a usage error shows the command's usage
        arguments(p)
        return p

    def parsers(self) -> dict[str, argparse.ArgumentParser]:
        """Every command's parser (for the checks of the docs)."""
        return {name: self.parser(name) for name in self._later}

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, list)  # [COMMAND, its arguments...], COMMAND one of choices
        name, *words = values
        if self.dest is not argparse.SUPPRESS:
            setattr(namespace, self.dest, name)
        # What argparse's own __call__ does, but with the options anywhere among the command's
        # arguments: its parse_known_args took `put q --priority 7 hello`'s `q` as QUEUE and
        # no BODY (an optional positional matches nothing at once), then refused `hello` as
        # an unrecognized argument. Parsed again only then: the second parse of every line
        # cost a put 3.2 M instructions (0.9 %).
        command, unknown = self.parser(name).parse_known_args(words)
        if unknown:
            command, unknown = self.parser(name).parse_known_intermixed_args(words)
        for key, value in vars(command).items():
            setattr(namespace, key, value)
        if unknown:
            vars(namespace).setdefault(argparse._UNRECOGNIZED_ARGS_ATTR, []).extend(unknown)


def near_option(parser: argparse.ArgumentParser, name: str, unknown: Sequence[str]) -> str:
    """`" (did you mean --priority?)"` when the first of the words command `name` did not take
    that is an option (`--priorty`, `--proprety=a=b`) looks like a typo of one of its long
    options, else "": a new user's typo was told "unrecognized arguments" alone, as a
    misspelt key of the config file is not. The cutoff (0.75, as the config file's) names no
    option for one of another command (purge's `--from`, requeue's: `--fsync` is 0.62), so
    that one is told the command's own word for it: `" (purge takes --state, not --from)"`."""
    words = [word for word in unknown if word.startswith("--")]
    if not words:
        return ""
    (commands,) = [action for action in parser._actions if isinstance(action, Commands)]
    options = [
        option
        for action in commands.parser(name)._actions
        for option in action.option_strings
        if option.startswith("--")
    ]
    word = words[0].partition("=")[0]
    if (meant := _closest(word, options)) is not None:
        return f" (did you mean {meant}?)"
    if (ours := _same_idea(commands, name, word)) is not None:
        return f" ({name} takes {ours}, not {word})"
    return ""


def _same_idea(commands: Commands, name: str, word: str) -> str | None:
    """Command `name`'s option for what another command calls `word`, else None: requeue
    names the folder it takes from --from, purge and peek the one they read --state, far
    apart by spelling. The same idea is an option whose choices share a value (a folder)."""
    theirs = {
        value
        for other, p in commands.parsers().items()
        if other != name
        for action in p._actions
        if word in action.option_strings and action.choices is not None
        for value in action.choices
    }
    for action in commands.parser(name)._actions:
        longs = [option for option in action.option_strings if option.startswith("--")]
        if longs and action.choices is not None and theirs & set(action.choices):
            return longs[0]
    return None


# DESIGN.md §8: a dropbox is a public interface, and the command line says how to use it.
_SCRIPTS = """\
A script sends without boxmq: it writes the file in the queue's working/ folder,
then moves it into target/ (one rename, so no consumer sees it half written):
  echo hi > data/jobs/working/x && mv data/jobs/working/x data/jobs/target/4.x.T
The name carries the metadata (docs/file-format.md, "Sending from a script")."""


def parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(
        prog="boxmq",
        description="A message broker whose state is a directory of plain files.",
        epilog=_SCRIPTS,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the recipe on a line of its own
    )
    _add_common(parser, defaults=True)
    # What `boxmq --version` said was "the following arguments are required: COMMAND"; the
    # version was to be had from an MQTT client's $SYS/broker/version alone.
    parser.add_argument(
        "--version", action="version", version=f"boxmq {__version__}", help="print it and exit"
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND", action=Commands)
    assert isinstance(commands, Commands)
    # serve prints nothing but its log: its --help does not offer --json, which main refuses
    # (before or after serve) with a usage error saying why.
    commands.add(
        "serve",
        "run the broker: recovery, lock timeouts, expiry, retention",
        _serve_arguments,
        common=lambda: _common(json_shown=False),
    )
    commands.add("put", "send a message", _put_arguments)
    commands.add(
        "publish",
        "publish to a topic: a copy to every matching subscription",
        _publish_arguments,
    )
    commands.add("subscribe", "print messages of a topic filter as they come", _subscribe_arguments)
    commands.add(
        "unsubscribe", "end a kept subscription, and drop what it holds", _unsubscribe_arguments
    )
    commands.add("get", "lock the next ready message and print it", _get_arguments)
    for verb, help in _SETTLES.items():
        commands.add(verb, help, functools.partial(_settle_arguments, verb))
    commands.add("ls", "queues and subscriptions, with their counts", _ls_arguments)
    commands.add("session", "list the persistent MQTT sessions, or end one", _session_arguments)
    commands.add(
        "retained",
        "list the retained messages of a topic filter, without subscribing",
        _retained_arguments,
    )
    commands.add(
        "passwd",
        "add a user to an MQTT password file, change their password, or delete them",
        _passwd_arguments,
        common=list,  # it opens no root: no --data, no --fsync (docs/cli.md)
    )
    commands.add("peek", "show messages without locking them", _peek_arguments)
    commands.add("requeue", "send dead (or expired/processed) messages back", _requeue_arguments)
    commands.add("purge", "delete every message of one state folder", _purge_arguments)
    commands.add("delete", "delete a queue and every message in it", _delete_arguments)
    commands.add(
        "help",
        "print a command's options (boxmq help put), or the list of commands",
        functools.partial(_help_arguments, parser, commands),
        common=list,  # it opens no root
    )
    return parser


def _help_arguments(
    top: argparse.ArgumentParser, commands: Commands, p: argparse.ArgumentParser
) -> None:
    """`boxmq help put`, the way git and pip take it: it was `invalid choice: 'help'`."""

    def show(args: argparse.Namespace) -> int:
        shown = top if args.about is None else commands.parser(args.about)
        shown.print_help()
        return 0

    p.set_defaults(standalone=show)
    # The names as the choices (COMMAND's own map, which every later add fills), so that a
    # misspelt one gets COMMAND's error and its "did you mean".
    p.add_argument("about", nargs="?", metavar="COMMAND", choices=commands.choices)


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(standalone=_serve)  # it opens the root the config names
    p.add_argument("--config", metavar="FILE", help="a TOML file (see boxmq.example.toml)")
    p.add_argument(
        "--sweep-interval", type=types.loop_interval, metavar="DURATION", help="default 1s"
    )
    p.add_argument(
        "--sys-interval",
        type=types.loop_interval_or_zero,
        metavar="DURATION",
        help="how often the MQTT $SYS topics are published (default 10s); 0: never",
    )
    p.add_argument(
        "--keep-processed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep what MQTT and XMPP clients acknowledge in processed/ (default: delete it)",
    )
    p.add_argument(
        "--processed-retention",
        type=types.retention,
        metavar="DURATION",
        help="how long processed/ files are kept, in every queue of the root (default 1d); "
        "'forever' keeps them",
    )
    p.add_argument(
        "--expired-retention",
        type=types.retention,
        metavar="DURATION",
        help="how long expired/ files are kept once expired, in every queue of the root "
        "(default forever)",
    )
    p.add_argument(
        "--polling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="find new files by polling, never inotify (a root shared over NFS)",
    )
    # Both at once is a usage error naming the two, not a broker with no listener that looks
    # as if it listened where --mqtt said.
    mqtt = p.add_mutually_exclusive_group()
    mqtt.add_argument(
        "--mqtt",
        action="append",
        type=types.address,
        metavar="HOST:PORT",
        help="an MQTT listener, repeatable (default 127.0.0.1:1883)",
    )
    mqtt.add_argument("--no-mqtt", action="store_true", help="serve no MQTT")
    p.add_argument(
        "--xmpp-component",
        metavar="NAME",
        help="serve XMPP pubsub as this component (docs/xmpp.md)",
    )
    p.add_argument(
        "--xmpp-server",
        type=types.xmpp_server,
        metavar="HOST:PORT",
        help="its XEP-0114 port (default 127.0.0.1:5347)",
    )
    p.add_argument("--xmpp-secret", metavar="SECRET", help="prefer $BOXMQ_XMPP_SECRET or a file")
    p.add_argument("--xmpp-secret-file", metavar="FILE", help="read the component secret here")
    p.add_argument(
        "--xmpp-lock-timeout",
        type=types.positive_duration,
        metavar="DURATION",
        help="unanswered XMPP deliveries go to the next subscriber after this (default 30s)",
    )
    p.add_argument(
        "--xmpp-stanza-size-limit",
        type=types.stanza_size_limit,
        metavar="BYTES",
        help="the server's component_stanza_size_limit, if raised (default 524288)",
    )


def _put_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_message

    p.set_defaults(command=cli_message.put, creates_root=True, before_root=cli_message.before_put)
    p.add_argument("queue", type=types.queue_name)
    _body_arguments(p)
    p.add_argument(
        "--priority", type=types.priority, default=4, help="default 4; higher goes first"
    )
    _property_arguments(p)
    p.add_argument("--correlation-id", help="for its answer to name, to be matched with it")
    p.add_argument("--reply-to", type=types.reply_to, help="a queue or topic to answer on")
    p.add_argument("--type", help="what the body is, e.g. application/pdf (get shows it)")


def _publish_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_message

    p.set_defaults(
        command=cli_message.publish, creates_root=True, before_root=cli_message.before_publish
    )
    p.add_argument("topic")
    _body_arguments(p)
    p.add_argument("--qos", type=types.integer, default=1, choices=[0, 1, 2], help="default 1")
    p.add_argument("--retain", action="store_true", help="keep it as the topic's last value")
    _property_arguments(p)
    p.add_argument(
        "--correlation-id", help="MQTT v5 subscribers get it as Correlation Data (UTF-8)"
    )
    p.add_argument(
        "--reply-to", type=types.reply_to, help="MQTT v5 subscribers get it as Response Topic"
    )


def _body_arguments(p: argparse.ArgumentParser) -> None:
    """put's and publish's BODY, or --file (cli.main refuses both)."""
    p.add_argument("body", nargs="?", help="the body; omit it (or '-') to read stdin")
    p.add_argument("--file", help="read the body from this file ('-': stdin)")


def _property_arguments(p: argparse.ArgumentParser) -> None:
    """put's and publish's -p options and --expires-in, read alike."""
    p.add_argument(
        "--property",
        "-p",
        action="append",
        type=types.named_property,
        default=[],
        metavar="NAME[:TYPE]=VALUE",
        help="a property, once per name; TYPE: "
        + _listed(PROPERTY_TYPES, PROPERTY_TYPES[0], "default"),
    )
    p.add_argument(
        "--expires-in",
        type=types.positive_duration,
        metavar="DURATION",
        help="not taken by then, it goes to expired/ (default: never)",
    )


def _subscribe_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(command=_subscribe, creates_root=True, before_root=_before_subscribe)
    p.add_argument("filter", help="a topic filter (+ and # wildcards), or $share/GROUP/FILTER")
    p.add_argument(
        "--name",
        dest="subscriber",  # not `name`: that one names the command in error messages
        default=f"cli-{os.getpid()}",
        help="subscriber (or member) name",
    )
    p.add_argument(
        "--qos",
        type=types.integer,
        choices=[0, 1, 2],
        help="default 1, or a kept subscription's own",
    )
    p.add_argument("--count", type=types.positive_int, help="stop after this many messages")
    p.add_argument(
        "--idle",
        type=types.duration,
        metavar="DURATION",
        help="stop after this long without a message (0: take what is ready, then stop)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the subscription (and what it collects), or the share-group membership, "
        "after exiting; one kept earlier always stays (`boxmq unsubscribe` ends it)",
    )


def _unsubscribe_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(command=_unsubscribe)
    p.add_argument("filter", help="the filter it was made with (or $share/GROUP/FILTER)")
    p.add_argument("--name", dest="subscriber", required=True, help="its subscriber name")


def _get_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_message

    p.set_defaults(command=cli_message.get)
    cli_dropbox.add_arguments(p)
    p.add_argument(
        "--lock",
        type=types.positive_duration,
        default=30.0,
        metavar="DURATION",
        help="lock timeout (default 30s)",
    )
    p.add_argument(
        "--consumer",
        default="cli",
        help="the lock's holder, whom ack, unlock, reject and extend name (default cli)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="take a durable subscription's message although the process reading it runs "
        "on another machine, which cannot be told alive from here",
    )


# The four settles of a locked message, with their one-line summaries.
_SETTLES = {
    "ack": "done with a locked message: it moves to processed/",
    "unlock": "give a locked message back, to the next consumer",
    "reject": "send a locked message to error/, no redelivery",
    "extend": "push a lock's deadline",
}


def _settle_arguments(verb: str, p: argparse.ArgumentParser) -> None:
    from boxmq import cli_message

    p.set_defaults(command=cli_message.settle(verb))
    cli_dropbox.add_arguments(p)
    p.add_argument("id", type=types.message_id, help="the message id `get` (or `peek`) printed")
    p.add_argument("--consumer", default="cli", help="the lock's holder (peek: LOCKED-BY)")
    p.add_argument(
        "--force",
        action="store_true",
        help="settle a subscription's message although the process its lock names runs "
        "on another machine, which cannot be told alive from here",
    )
    if verb == "unlock":
        p.add_argument(
            "--delay",
            type=types.duration,
            default=0.0,
            metavar="DURATION",
            help="ready again only after this (default 0)",
        )
    if verb == "extend":
        p.add_argument(
            "--by",
            type=types.positive_duration,
            default=30.0,
            metavar="DURATION",
            help="the lock's new deadline is now + this (default 30s)",
        )


def _passwd_arguments(p: argparse.ArgumentParser) -> None:
    # Imported here, where passwd is given: getpass and the MQTT user names' rules were 2.4 %
    # of every `boxmq put`'s instructions.
    from boxmq import cli_passwd

    cli_passwd.add_arguments(p)


def _ls_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_queues  # here: put, get and ack need none of it

    p.set_defaults(command=cli_queues.ls)


def _retained_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_retained  # here: put, get and ack need none of it

    p.set_defaults(command=cli_retained.retained)
    p.add_argument(
        "filter",
        nargs="?",
        default="#",
        metavar="FILTER",
        help="an MQTT topic filter, as a subscription's (default '#': every topic not "
        "starting with $)",
    )


def _session_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(command=_session, before_root=_session_config)
    p.add_argument("action", choices=["ls", "end"], help="ls: every session; end: CLIENT_ID's")
    p.add_argument("client_id", nargs="?", metavar="CLIENT_ID", help="the session to end")
    p.add_argument(
        "--force",
        action="store_true",
        help="end it although the server holding it runs on another machine, which cannot "
        "be told alive from here",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="ls: the TOML file boxmq serve runs with; each session's end shown under its "
        "[mqtt.limits] max_session_expiry, as that server applies it (default: as granted)",
    )


def _peek_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_queues

    p.set_defaults(command=cli_queues.peek)
    cli_dropbox.add_arguments(p)
    p.add_argument(
        "--state",
        default=State.TARGET.value,
        choices=[s.value for s in State],
        help="the folder shown (default target: the ready messages)",
    )
    p.add_argument(
        "--limit", type=types.positive_int, default=20, help="at most this many (default 20)"
    )


def _requeue_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_queues

    p.set_defaults(command=cli_queues.requeue)
    cli_dropbox.add_arguments(p)
    p.add_argument(
        "--from",
        dest="source",
        default=State.ERROR.value,
        choices=[s.value for s in (State.ERROR, State.EXPIRED, State.PROCESSED)],
        help="the folder sent back to target/ (default error: the dead messages)",
    )


def _purge_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_queues

    p.set_defaults(command=cli_queues.purge)
    cli_dropbox.add_arguments(p)
    p.add_argument(
        "--state",
        default=State.TARGET.value,
        choices=[s.value for s in (State.TARGET, State.PROCESSED, State.ERROR, State.EXPIRED)],
        help="the folder emptied (default target: every ready message)",
    )


def _delete_arguments(p: argparse.ArgumentParser) -> None:
    from boxmq import cli_queues

    p.set_defaults(command=cli_queues.delete)
    p.add_argument(
        "queue", type=types.queue_name, help="a queue (a subscription ends with unsubscribe)"
    )
    p.add_argument(
        "--force", action="store_true", help="delete it though consumers hold messages locked"
    )


# -- the commands loaded when they run ------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    # The broker's modules (the config file's reader, TLS, the MQTT settings) are loaded by
    # serve alone: imported at the top, they were 9 % of every `boxmq put`'s instructions.
    from boxmq import cli_serve

    return cli_serve.serve(args)


def _before_subscribe(args: argparse.Namespace) -> None:
    """A filter or a --name that is none, said before the root is made (cli._run), as
    cli_message.before_put does for put: it made an empty root at a mistyped --data first."""
    from boxmq.core.topics import about_sys, parse_filter, sys_unserved
    from boxmq.store.names import check_consumer_name

    topic_filter = parse_filter(args.filter)
    check_consumer_name(args.subscriber, "subscriber name")
    if about_sys(topic_filter.filter):
        # mqtt.md's figures, asked of the CLI, waited in silence: each serve answers them
        # from memory to its MQTT clients (the words are Box.subscribe's warning's).
        output.err(
            output.said(
                f"{output.said_by(args)}: warning: {args.filter!r} is {sys_unserved('this')}"
            )
        )


def _subscribe(args: argparse.Namespace, box: Box) -> int:
    from boxmq import cli_subscribe  # here: put, get, ack and ls need none of it

    return cli_subscribe.subscribe(args, box)


def _unsubscribe(args: argparse.Namespace, box: Box) -> int:
    from boxmq import cli_subscribe

    return cli_subscribe.unsubscribe(args, box)


def _session_config(args: argparse.Namespace) -> None:
    from boxmq import cli_session  # as _session

    cli_session.read_config(args)


def _session(args: argparse.Namespace, box: Box) -> int:
    from boxmq import cli_session  # here: the MQTT door's record, which `ls` need not load

    return cli_session.end(args, box) if args.action == "end" else cli_session.ls(args, box)
