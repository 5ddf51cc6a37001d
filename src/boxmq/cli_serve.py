"""`boxmq serve`: its configuration (the `--config` file first, then the flags the user typed),
its listeners bound before its root is opened, and the run; loaded by serve alone.

A flag's default must not override the file, so `cli_parser` gives `--data` and `--fsync` defaults
of type `Default`: text the user did not type. Values the file leaves out keep those defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import faulthandler
import logging
import os
import re
import signal
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import boxmq
from boxmq import cli_errors
from boxmq.cli_args import Default
from boxmq.config import ServeConfig, load_config
from boxmq.core import ExactlyOnceLimits
from boxmq.errors import InvalidArgument
from boxmq.mqtt.acl import PLACEHOLDERS, Acl
from boxmq.mqtt.passwords import PasswordFile
from boxmq.mqtt.settings import Listener, MqttSettings, host_port

if TYPE_CHECKING:  # imported when they are used: the XMPP door's only with a component
    import socket

    from boxmq.xmpp.settings import XmppSettings

__all__ = [
    "describe_security",
    "describe_trusted_sources",
    "listener_setting",
    "mqtt_settings",
    "security_warnings",
    "serve",
    "serve_config",
]


def _typed(value: str | None) -> str | None:
    return None if value is None or isinstance(value, Default) else value


def serve_config(args: argparse.Namespace) -> ServeConfig:
    _check_flag_listeners(args.mqtt or [])
    defaults = ServeConfig(data=Path(args.data), fsync=str(args.fsync))
    config = defaults if args.config is None else load_config(args.config, defaults=defaults)
    return config.override(
        data=_typed(args.data),
        fsync=_typed(args.fsync),
        sweep_interval=args.sweep_interval,
        keep_processed=args.keep_processed,
        processed_retention=args.processed_retention,
        expired_retention=args.expired_retention,
        polling=args.polling,
        sys_interval=args.sys_interval,
        max_deliveries=args.max_deliveries,
    )


def mqtt_settings(args: argparse.Namespace, settings: MqttSettings) -> MqttSettings | None:
    """`--no-mqtt`: none; `--mqtt HOST:PORT`...: these listeners instead of the configured."""
    if args.no_mqtt:
        return None
    if args.mqtt:
        listeners = tuple(Listener(host, port) for host, port in args.mqtt)
        return dataclasses.replace(settings, listeners=listeners)
    return settings


def replaced_listeners(args: argparse.Namespace, config: ServeConfig) -> tuple[int, str] | None:
    """The log line (and its level) that says the file's listeners are not opened, because
    `--mqtt` or `--no-mqtt` replaced them; None when they are. A TLS listener that a flag
    typed to try something took away is a warning: the broker is then plain TCP only."""
    if not (args.mqtt or args.no_mqtt) or not config.listeners_from_file:
        return None
    dropped = config.mqtt.listeners
    flag = "--no-mqtt" if args.no_mqtt else "--mqtt"
    level = logging.WARNING if any(o.ssl is not None for o in dropped) else logging.INFO
    shown = ", ".join(str(o) for o in dropped)
    return level, (
        f"{flag} replaces the [[mqtt.listener]] tables of {config.source}: {shown} not opened"
    )


def _check_flag_listeners(addresses: list[tuple[str, int]]) -> None:
    """An address given twice to --mqtt (`:1883` and `0.0.0.0:1883` too) is refused here, as
    the file's [[mqtt.listener]] tables are: the second bind would fail as "address already in
    use", and send the operator looking for another program. Port 0 is a new port each time."""
    seen: set[tuple[str, int]] = set()
    for host, port in addresses:
        if port and (host, port) in seen:
            address = host_port(host, port)
            raise InvalidArgument(f"--mqtt {address} is given twice: give each address once")
        seen.add((host, port))


# The address in asyncio's bind error, `('127.0.0.1', 1883)`: its host and port. An IPv6
# address is shown with two more fields: ('::1', 1883, 0, 0).
_BIND_ADDRESS = re.compile(r"\('([^']*)', (\d+)[,)]")


def listener_setting(args: argparse.Namespace, config: ServeConfig, problem: str) -> str:
    """Where the MQTT listener named in `problem` (asyncio's bind error, which shows the
    address as `('127.0.0.1', 1883)`) was set: a flag, a table of the file, or the default."""
    if args.mqtt:
        return "--mqtt HOST:PORT"
    if config.listeners_from_file:
        listeners = config.mqtt.listeners
        shown = _BIND_ADDRESS.findall(problem)
        named = [i for i, o in enumerate(listeners, 1) if (o.host, str(o.port)) in shown]
        table = f"mqtt.listener[{named[0]}]" if len(named) == 1 else "[[mqtt.listener]]"
        return f"{table} in {config.source}"
    return "--mqtt HOST:PORT (or [[mqtt.listener]] in a --config file)"


def own_listeners_in_use(listeners: Sequence[Listener], problem: str) -> str:
    """The hint for a bind refused as "address already in use" (`problem`, asyncio's text,
    names the address as `('127.0.0.1', 1883)`) when this server has more than one listener
    on that port: `--mqtt :1883 --mqtt 127.0.0.1:1883`, or `localhost` beside `127.0.0.1`, are
    different addresses to _check_flag_listeners and to the file's check, but the first one
    bound takes the second's address. "" when the port is this server's once."""
    found = _BIND_ADDRESS.search(problem)
    port = int(found[2]) if found else 0
    same = [listener for listener in listeners if port and listener.port == port]
    if len(same) < 2:
        return ""
    shown = " and ".join(host_port(o.host, o.port) for o in same)
    return (
        f" (this server listens on {shown}: one bound first takes the other's address, as "
        "0.0.0.0 takes every address of this machine and a host name its own; give them "
        "different ports, or one address each. Else another program listens there: stop it)"
    )


def describe_security(config: ServeConfig, mqtt: MqttSettings | None) -> list[str]:
    """What a client meets at the MQTT door, in words, for the start-up log, at the
    listeners served: `mqtt` as `mqtt_settings` made it, whose `--mqtt` listeners replace
    the file's (its identity_as_username ones were said of a door not opened). Nothing of
    it when there is no door (None: `--no-mqtt`), where "any client may connect" told of
    clients that cannot."""
    if config.source is None:
        source = "config: none (defaults and flags)"
    elif config.file_sets_nothing:
        # Named alone, an empty file (a 0-byte one a deployment wrote, or a copy of the
        # example with every line still commented out) read as if its settings were in force.
        source = f"config: no settings in {config.source}, using the defaults (and flags)"
    else:
        source = f"config: {config.source}"
    if mqtt is None:
        return [source]
    authenticator, authorizer = mqtt.authenticator, mqtt.authorizer
    if isinstance(authenticator, PasswordFile):
        anonymous = "accepted" if authenticator.allow_anonymous else "refused"
        who = (
            f"authentication: {authenticator.path} ({len(authenticator.entries)} user(s)), "
            f"clients without a user name {anonymous}"
        )
    elif authenticator is None:
        who = "authentication: none (no password_file): any client may connect"
    else:
        who = f"authentication: {type(authenticator).__name__}"
    by_certificate = [str(o) for o in mqtt.listeners if o.identity_as_username]
    if by_certificate:
        # Those take the user name from the certificate and ask no password: the line above
        # alone read as if every client of theirs were checked against the password file.
        who += (
            f"; on {', '.join(by_certificate)}: the user name is the client certificate's "
            "Common Name, and no password is asked"
        )
    if isinstance(authorizer, Acl):
        # Each part of the file counted: an ACL of rules for clients without a user name
        # alone read "0 user section(s), 0 pattern(s)", as if it were empty.
        what = (
            f"authorization: {authorizer.path} ({len(authorizer.anonymous)} rule(s) for "
            f"clients without a user name, {len(authorizer.users)} user section(s), "
            f"{len(authorizer.patterns)} pattern(s)); anything not allowed is refused"
        )
    elif authorizer is None:
        what = "authorization: none (no acl_file): every client may publish and subscribe to all"
    else:
        what = f"authorization: {type(authorizer).__name__}"
    return [source, who, what]


def describe_trusted_sources(limits: ExactlyOnceLimits, *, doors: bool) -> str | None:
    """Who may send exactly once, for the start-up log, when `trusted_sources` lists them: a
    client not listed had its QoS 2 PUBLISHes refused with nothing at start to say a list was
    in force (`[]` refusing every one). None when anyone may (no list, the default), or when
    no door is served (`doors` False: `--no-mqtt` and no XMPP), where no sender can meet it."""
    trusted = limits.trusted_sources
    if trusted is None or not doors:
        return None
    if not trusted:
        return (
            "exactly once: trusted_sources is [], no one may send: every QoS 2 or assured "
            "message is refused"
        )
    return (
        f"exactly once: trusted_sources lists {len(trusted)} sender(s); any other sender's "
        "QoS 2 or assured messages are refused"
    )


def security_warnings(mqtt: MqttSettings | None) -> list[str]:
    """What in the security settings is weaker than it looks, for the start-up log; `mqtt`
    as `describe_security` takes it: none without an MQTT door (None), which alone reads
    those settings."""
    if mqtt is None:
        return []
    authenticator, authorizer = mqtt.authenticator, mqtt.authorizer
    by_name = isinstance(authorizer, Acl) and (
        authorizer.users or any("%u" in rule.filter for rule in authorizer.patterns)
    )
    warnings = _literal_placeholders(authorizer) if isinstance(authorizer, Acl) else []
    warnings += _response_information_literals(mqtt.response_information)
    # A listener with identity_as_username takes the user name from the client certificate,
    # checked by its CA, not from the password file: its clients are neither unchecked
    # claims nor names the password file must hold.
    by_certificate = any(listener.identity_as_username for listener in mqtt.listeners)
    by_password = not all(listener.identity_as_username for listener in mqtt.listeners)
    if isinstance(authenticator, PasswordFile):
        warnings += _loose_mode(authenticator.path, "password file", stat.S_IROTH | _WRITABLE)
    if isinstance(authorizer, Acl):
        warnings += _loose_mode(authorizer.path, "ACL file", _WRITABLE)
    # Each TLS private key once, however many listeners share it (ssh refuses a key others
    # may read; the broker only warns, as of the password file).
    for key in dict.fromkeys(o.tls_key for o in mqtt.listeners if o.tls_key is not None):
        warnings += _loose_mode(key, "TLS key file", _key_loose(key))
    if authenticator is None and by_name and by_password:
        warnings.append(
            "the ACL gives rights by user name, and without a password_file nobody checks the "
            "user name a client claims: any client may take any user's rights (set "
            "[security] password_file)"
        )
    if not isinstance(authenticator, PasswordFile):
        return warnings
    if not authenticator.entries and not authenticator.allow_anonymous and not by_certificate:
        # As allow_anonymous = false without a password file, which is refused: nobody could
        # connect. Warned of only, since a broker may start before its users are provisioned.
        warnings.append(
            f"the password file {authenticator.path} has no user and clients without a user "
            "name are refused: no client can connect (add users with `boxmq passwd`, then "
            "restart)"
        )
    if isinstance(authorizer, Acl) and authorizer.anonymous and not authenticator.allow_anonymous:
        # Rules written at the top of the file read as "for everyone"; they are for clients
        # without a user name only, and this broker refuses those, so they allow nothing.
        warnings.append(
            f"{authorizer.path}: the {len(authorizer.anonymous)} rule(s) before the first "
            f"`user` line (line {authorizer.anonymous[0].line}) are for clients without a user "
            "name, which are refused (allow_anonymous = false): no client gets them (for rules "
            "every client gets, write `pattern` instead of `topic`)"
        )
    if isinstance(authorizer, Acl) and not by_certificate:
        # A section no client can log in as, a misspelt name most likely: its user is refused
        # what it was meant to be allowed, and nothing would say why. A certificate's name
        # cannot be known at start: with such a listener, none is warned of.
        known = set(authenticator.users())
        for name, rules in authorizer.users.items():
            if name not in known:
                where = f" (line {rules[0].line})" if rules else ""
                warnings.append(
                    f"{authorizer.path}: the section of user {name!r}{where} names no user of "
                    f"the password file {authenticator.path}: no client gets its rules (check "
                    "the name)"
                )
    return warnings


# Who besides the owner may change a file: its group, or everyone.
_WRITABLE = stat.S_IWGRP | stat.S_IWOTH


def _key_loose(path: Path) -> int:
    """What of a TLS key file's mode is too open: any read or write but its owner's, but the
    group's read where that is how this broker reads it (a key of root's, group ssl-cert,
    0640, read by a broker that runs as a member of ssl-cert)."""
    loose = stat.S_IRGRP | stat.S_IROTH | _WRITABLE
    try:
        found = os.stat(path)
    except OSError:
        return loose
    if found.st_uid != os.geteuid() and found.st_gid in {os.getegid(), *os.getgroups()}:
        loose &= ~stat.S_IRGRP
    return loose


def _loose_mode(path: Path, what: str, loose: int) -> list[str]:
    """A warning when users of the machine other than the file's owner may read the password
    file's hashes (an offline guess at each password, with no log line and no scrypt cost
    on the broker) or the TLS private key (whoever has it can pass for the broker), or may
    write any of them (add a user, give one any right, swap the key), which takes effect at
    the next start. mosquitto warns of such a password file too, ssh of such a key."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return []  # read at start just now; a file gone since is not this warning's matter
    if not mode & loose:
        return []
    can = " and ".join(
        verb
        for bits, verb in ((stat.S_IRGRP | stat.S_IROTH, "read"), (_WRITABLE, "change"))
        if mode & loose & bits
    )
    return [
        f"the {what} {path} has mode {mode:04o}: users of this machine other than its owner "
        f"may {can} it (chmod {mode & ~loose:04o} {path})"
    ]


def _literal_placeholders(acl: Acl) -> list[str]:
    """A `topic` rule with %u or %c, which only `pattern` fills in: as written it names a
    topic with a literal "%u" level, so the user it was meant for is refused."""
    rules = [*acl.anonymous, *(rule for rules in acl.users.values() for rule in rules)]
    return [
        f"{acl.path}:{rule.line}: `topic {rule.access.value} {rule.filter}` is taken "
        "literally: only `pattern` lines fill in %u (user name) and %c (client id); write "
        f"`pattern {rule.access.value} {rule.filter}` if that was meant"
        for rule in sorted(rules, key=lambda rule: rule.line)
        if any(placeholder in rule.filter for placeholder in PLACEHOLDERS)
    ]


def _response_information_literals(template: str | None) -> list[str]:
    """`response_information` holding a % sequence other than %c and %u (`reply/%C/`): it is
    told to clients as it is, so with no placeholder left every client gets the same basis
    for its response topics, and may subscribe to the others' answers."""
    if template is None:
        return []
    odd = sorted({found for found in re.findall(r"%.?", template) if found not in PLACEHOLDERS})
    if not odd:
        return []
    same = not any(placeholder in template for placeholder in PLACEHOLDERS)
    return [
        f"response_information {template!r} holds {', '.join(odd)}, which is taken as it is: "
        "only %c (client id) and %u (user name) are filled in"
        + (
            ", so every client is told the same response topics and may read the others' answers"
            if same
            else ""
        )
    ]


def _hold_closed_standard_descriptors() -> None:
    """Started with its standard input, output or error closed (`2>&-`), the process gives
    that number to the next file it opens, an epoll or a message's file, where whatever is
    written to the standard stream (the interpreter's fatal error, a library's) would land:
    /dev/null holds each one closed, as daemons do."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # the lowest free number: a lower one closed too is held first
                os.dup2(null, fd)
                os.close(null)


def serve(args: argparse.Namespace) -> int:
    """`boxmq serve`: its settings said and checked, its listeners bound, then its root served
    until a signal stops it."""
    from boxmq.runtime import open_files_limit

    _hold_closed_standard_descriptors()
    config = serve_config(args)
    log = logging.getLogger("boxmq.serve")
    if not args.verbose:
        logging.getLogger().setLevel(config.logging_level)
    # Before the root is opened: its spare files keep a share of the limit open (spares.py).
    log.log(*open_files_limit())
    mqtt = mqtt_settings(args, config.mqtt)
    xmpp: XmppSettings | None = args.xmpp_settings  # made and checked with the arguments
    for line in describe_security(config, mqtt):
        log.info("%s", line)
    doors = mqtt is not None or xmpp is not None
    if trusted := describe_trusted_sources(config.exactly_once, doors=doors):
        log.info("%s", trusted)
    for line in security_warnings(mqtt):
        log.warning("%s", line)
    for line in config.unused_settings():
        log.warning("%s", line)
    if replaced := replaced_listeners(args, config):
        log.log(*replaced)
    # Bound, and listening, before the root is opened: an address in use (another serve's
    # too), or a host that does not resolve, had the root made (a mistyped --data) and
    # recovered before the bind that stopped serve.
    root_from = f"data in {config.source}" if config.data_from_file else None
    cli_errors.check_not_a_dropbox(str(config.data), root_from)
    sockets = None if mqtt is None else _bind_listeners(args, config, mqtt)
    try:
        _serve_root(args, config, mqtt, sockets, xmpp)
    except OSError as error:
        if not config.data_from_file or isinstance(error, BrokenPipeError):
            raise  # said by `main`, which names --data
        # A root the file named (read-only, not this user's, a full disk): the key to change,
        # as a listener's address in use names its table.
        root = f"data in {config.source}"
        raise InvalidArgument(cli_errors.os_error(error, str(config.data), root=root)) from None
    finally:
        if sockets is not None:
            from boxmq.mqtt.server import close_sockets

            close_sockets(sockets)  # closed already when served; not when the root failed
    return 0


def _bind_listeners(
    args: argparse.Namespace, config: ServeConfig, mqtt: MqttSettings
) -> list[list[socket.socket]]:
    import asyncio

    from boxmq.mqtt.server import bind_listeners

    with _listener_refused(args, config, mqtt):
        return asyncio.run(bind_listeners(mqtt.listeners))


@contextlib.contextmanager
def _listener_refused(
    args: argparse.Namespace, config: ServeConfig, mqtt: MqttSettings | None
) -> Iterator[None]:
    """An address a listener cannot have, refused in the block (at the bind, or in the run),
    as InvalidArgument: the same line `main` prints, with the setting the listener came
    from. Any other OSError goes on as it is."""
    try:
        yield
    except OSError as error:
        if not cli_errors.is_listener_error(error):
            raise
        problem = error.strerror or ""
        setting = listener_setting(args, config, problem)
        own = "" if mqtt is None else own_listeners_in_use(mqtt.listeners, problem)
        if error.errno == errno.EADDRINUSE and own:
            raise InvalidArgument(f"{problem}{own}") from None
        raise InvalidArgument(
            cli_errors.os_error(error, str(config.data), listener=setting)
        ) from None


def _serve_root(
    args: argparse.Namespace,
    config: ServeConfig,
    mqtt: MqttSettings | None,
    sockets: list[list[socket.socket]] | None,
    xmpp: XmppSettings | None,
) -> None:
    from boxmq import runtime

    with boxmq.open(
        config.data,
        fsync=config.fsync,
        # Refused with another policy; the file's is then warned of (unused_settings).
        fsync_interval=config.fsync_interval if config.fsync == "interval" else None,
        keep_processed=config.keep_processed,
        processed_retention=config.processed_retention_or_none,
        expired_retention=config.expired_retention_or_none,
        polling=config.polling,
        exactly_once=config.exactly_once,
        dispatch=config.dispatch,
        group_dispatch=dict(config.group_dispatch),
        max_deliveries=config.max_deliveries,
    ) as box:
        # A broker that seems stuck shows where each thread waits, and goes on serving:
        # `kill -USR1 <pid>` writes every thread's Python stack to the log (stderr). Started
        # with stderr closed (`2>&-`) it has no log to write to, and serves all the same.
        if sys.stderr is not None:
            faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
        serving = runtime.serve(
            box, sweep_interval=config.sweep_interval, mqtt=mqtt, mqtt_sockets=sockets, xmpp=xmpp
        )
        with _listener_refused(args, config, mqtt):  # the listeners listen already
            runtime.run(serving)
