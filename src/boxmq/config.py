"""The `boxmq serve` configuration file (TOML), read into one frozen `ServeConfig`.

    data = "./data"                  # the root folder
    fsync = "always"                 # always | interval | never
    fsync_interval = "1s"            # for fsync = "interval"
    sweep_interval = "1s"            # lock timeouts, expiry, retention
    keep_processed = false           # true: what clients acknowledge stays in processed/
    processed_retention = "1d"       # how long processed/ files are kept; "forever"
    expired_retention = "forever"    # how long expired/ files are kept once expired
    dispatch = "round-robin"         # how the consumers of a queue or share group take turns
    max_deliveries = 5               # deliveries before error/; 0: no limit
    log_level = "info"               # debug | info | warning | error
    polling = false                  # true: never inotify (a root shared over NFS)

    [share_groups.etl]               # one table per share group that dispatches its own way
    dispatch = "least-in-flight"

    [mqtt]
    response_information = "reply/%c/"  # told to v5 clients that ask (%c, %u filled in)
    sys_interval = "10s"             # how often the $SYS topics are published; 0: never

    [[mqtt.listener]]                # one table per socket
    host = "0.0.0.0"
    port = 8883
    tls = { cert = "server.crt", key = "server.key", ca = "clients-ca.crt" }

    [mqtt.limits]                    # any field of boxmq.mqtt.settings.Limits
    max_connections = 1000

    [exactly_once]                   # any limit of boxmq.core.ExactlyOnceLimits
    max_message_size = 16777216
    trusted_sources = ["mqtt:billing", "alice@example.org"]  # who may send; absent: anyone

    [security]
    password_file = "passwd"         # written by `boxmq passwd`
    acl_file = "acl"
    allow_anonymous = false

Rules: every key is checked (unknown keys and wrong types are errors naming the key and the
file); relative file names are taken from the config file's folder; keys the file leaves
out keep the values of `defaults` (the command line's defaults), and `override` applies the
flags a user typed, so flags win over the file. The password file, the ACL file and the TLS
files are read here, at start: a broker that starts has usable ones.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import logging
import math
import os
import re
import select
import shlex
import ssl
import stat
import time
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from boxmq.cli_args import SHORTEST_INTERVAL
from boxmq.config_table import BOOLEAN_WORDS, Table
from boxmq.core import Dispatch, ExactlyOnceLimits
from boxmq.core.topics import is_share_name, validate_topic
from boxmq.errors import InvalidArgument, InvalidTopic
from boxmq.model import MQTT_SOURCE_PREFIX
from boxmq.mqtt.acl import Acl
from boxmq.mqtt.passwords import PasswordFile
from boxmq.mqtt.settings import Authenticator, Authorizer, Limits, Listener, MqttSettings
from boxmq.mqtt.tls import TlsFileError, server_context
from boxmq.store.commit import FsyncPolicy

__all__ = ["Security", "ServeConfig", "load_config", "session_config"]

DISPATCH_STRATEGIES: Final = tuple(d.value for d in Dispatch)
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
# The least each integer limit may be; 1 for those not named. 0: no aliases (MQTT 5.0
# §3.2.2.3.8); no byte limit on a session's queue; no cap on the subscriptions of a session, nor
# on the levels of their filters; no session outlives its connection (a v5 client told in
# CONNACK, §3.2.2.3.2; a 3.1.1 one, which asks for no expiry, gets this one all the same). A
# Maximum Packet Size under 20 bytes leaves no room for a CONNECT with a client id and a user
# name, let alone a PUBLISH: the broker would start and refuse every client (mosquitto forbids
# it below 20 for the same reason).
LIMITS_LOWEST: Final = {
    "topic_alias_maximum": 0,
    "max_queued_bytes": 0,
    "max_subscriptions": 0,
    "max_topic_levels": 0,
    "max_session_expiry": 0,
    "max_packet_size": 20,
}
# Integer limits that count seconds (MQTT's Keep Alive and Session Expiry Interval are whole
# seconds): written as durations too, "1h", as the file's other times are.
LIMITS_IN_SECONDS: Final = ("max_keepalive", "max_session_expiry")
# The limits of [mqtt.limits] and [exactly_once] that count bytes: one written with a unit
# ("1MB", as other brokers' files take it) is told its bytes.
IN_BYTES: Final = (
    "max_packet_size",
    "max_queued_bytes",
    "max_bytes_per_source",
    "max_bytes_total",
    "max_message_size",
)
# Limits that v5 clients are told in CONNACK, or that they ask for, fit that field (MQTT 5.0
# §3.2.2.3): two-byte integers, four-byte ones. Maximum Packet Size stops at the largest
# Remaining Length (a few bytes under the largest packet): paho refuses a CONNACK above it.
LIMITS_HIGHEST: Final = {
    "receive_maximum": 0xFFFF,
    "topic_alias_maximum": 0xFFFF,
    "max_keepalive": 0xFFFF,
    "max_session_expiry": 0xFFFF_FFFF,
    "max_packet_size": 268_435_455,
}


@dataclass(frozen=True)
class Security:
    """Who may connect and what they may do, as the file names them (None: not configured)."""

    password_file: Path | None = None
    acl_file: Path | None = None
    # None: anonymous clients are let in exactly when there is no password file.
    allow_anonymous: bool | None = None

    def authenticator(self) -> Authenticator | None:
        anonymous = self.allow_anonymous
        if self.password_file is None:
            if anonymous is False:
                raise InvalidArgument(
                    "false needs a password_file in [security] (otherwise nobody could connect)"
                )
            return None  # no password file: anyone may connect
        return PasswordFile.load(self.password_file, allow_anonymous=bool(anonymous))

    def authorizer(self) -> Authorizer | None:
        return Acl.load(self.acl_file) if self.acl_file is not None else None


@dataclass(frozen=True)
class ServeConfig:
    data: Path = Path("./data")
    fsync: str = "always"
    fsync_interval: float = 1.0
    sweep_interval: float = 1.0
    # A broker forgets what its clients acknowledged (as MQTT brokers do): a processed/ copy of
    # every message for a day would be tens of millions of files at a broker's rates.
    keep_processed: bool = False
    # How long the sweeps keep a file in processed/, in every queue and subscription of the
    # root, whoever acknowledged it; math.inf: forever (the Python API's None).
    processed_retention: float = 86400.0
    # How long the sweeps keep a file in expired/ once it expired, in every queue and
    # subscription; math.inf: forever, as before the key (a requeue may still want it).
    expired_retention: float = math.inf
    dispatch: str = "round-robin"
    group_dispatch: tuple[tuple[str, str], ...] = ()  # (share group, strategy)
    # The sweeps of serve release every process's timed-out locks: they dead-letter with this.
    max_deliveries: int | None = 5  # None: no limit
    log_level: str = "info"
    polling: bool = False  # True: new files are found by polling, never inotify (NFS)
    exactly_once: ExactlyOnceLimits = field(default_factory=ExactlyOnceLimits)  # QoS 2 intake
    security: Security = field(default_factory=Security)
    mqtt: MqttSettings = field(default_factory=MqttSettings)
    source: Path | None = None  # the file it was read from
    listeners_from_file: bool = False  # mqtt.listeners are the file's [[mqtt.listener]] tables
    data_from_file: bool = False  # `data` is the file's (an error of the root names that key)
    fsync_interval_from_file: bool = False  # the file gave fsync_interval (`unused_settings`)
    # The file set nothing: 0 bytes, comments or empty tables only (the start-up log says so).
    file_sets_nothing: bool = False

    @property
    def processed_retention_or_none(self) -> float | None:
        """`processed_retention` as `boxmq.open` takes it: None for forever."""
        return _none_for_forever(self.processed_retention)

    @property
    def expired_retention_or_none(self) -> float | None:
        """`expired_retention` as `boxmq.open` takes it: None for forever."""
        return _none_for_forever(self.expired_retention)

    @property
    def logging_level(self) -> int:
        return logging.getLevelNamesMapping()[self.log_level.upper()]

    def unused_settings(self) -> list[str]:
        """What serve says at start of the file's settings that do nothing, once `--fsync`
        is applied: each was silently ignored. Warnings, not errors: a user switching fsync
        policies back and forth keeps the interval written for the next time."""
        if self.fsync_interval_from_file and self.fsync != "interval":
            return [
                f'fsync_interval in {self.source} is ignored: only fsync = "interval" uses '
                f'it, and fsync is "{self.fsync}"'
            ]
        return []

    def override(
        self,
        *,
        data: str | os.PathLike[str] | None = None,
        fsync: str | None = None,
        sweep_interval: float | None = None,
        keep_processed: bool | None = None,
        processed_retention: float | None = None,
        expired_retention: float | None = None,
        polling: bool | None = None,
        sys_interval: float | None = None,
        max_deliveries: int | None = None,
    ) -> ServeConfig:
        """This configuration with what the user typed on the command line (None: not typed).
        Not the listeners: `--mqtt` and `--no-mqtt` replace them when serve opens them
        (cli_serve.mqtt_settings), so that the file's stay here for the line that says which
        were not opened (cli_serve.replaced_listeners)."""
        changed = self
        if data is not None:
            changed = dataclasses.replace(changed, data=Path(data), data_from_file=False)
        if fsync is not None:
            if fsync not in FsyncPolicy.words():
                choices = ", ".join(FsyncPolicy.words())
                raise InvalidArgument(f"fsync {fsync!r}: choose one of {choices}")
            changed = dataclasses.replace(changed, fsync=fsync)
        if sweep_interval is not None:
            changed = dataclasses.replace(changed, sweep_interval=sweep_interval)
        if keep_processed is not None:
            changed = dataclasses.replace(changed, keep_processed=keep_processed)
        if processed_retention is not None:
            changed = dataclasses.replace(changed, processed_retention=processed_retention)
        if expired_retention is not None:
            changed = dataclasses.replace(changed, expired_retention=expired_retention)
        if polling is not None:
            changed = dataclasses.replace(changed, polling=polling)
        if sys_interval is not None:
            mqtt = dataclasses.replace(changed.mqtt, sys_interval=sys_interval)
            changed = dataclasses.replace(changed, mqtt=mqtt)
        if max_deliveries is not None:  # 0: no limit, as the file's key
            changed = dataclasses.replace(changed, max_deliveries=max_deliveries or None)
        return changed


def load_config(
    path: str | os.PathLike[str], *, defaults: ServeConfig | None = None
) -> ServeConfig:
    """Read and check the file, and the password, ACL and TLS files it names."""
    return _load(Path(path), defaults or ServeConfig(), read_files=True)


def _none_for_forever(seconds: float) -> float | None:
    """A retention as the file keeps it (math.inf for "forever") as `boxmq.open` takes it."""
    return None if math.isinf(seconds) else seconds


def _load(source: Path, base: ServeConfig, *, read_files: bool) -> ServeConfig:
    """The file, every key checked; `read_files` False for a reader that uses none of the
    files it names (`session_config`): their keys are checked, their listeners' TLS contexts
    left None and no authenticator or authorizer made."""
    document = _read_toml(source)
    folder = _names_folder(source)
    top = Table(document, source=source, folder=folder, homes=_homes(), foreign=MOSQUITTO_KEYS)
    listed = isinstance(document.get("mqtt"), dict) and bool(document["mqtt"].get("listener"))
    data = top.path("data")
    fsync = top.choice("fsync", FsyncPolicy.words())
    fsync_interval = top.seconds("fsync_interval", shortest=SHORTEST_INTERVAL)
    sweep_interval = top.seconds("sweep_interval", shortest=SHORTEST_INTERVAL)
    keep_processed = top.boolean("keep_processed")
    processed_retention = top.seconds_or_forever("processed_retention")
    expired_retention = top.seconds_or_forever("expired_retention")
    dispatch = top.choice("dispatch", DISPATCH_STRATEGIES)
    max_deliveries = top.integer("max_deliveries", low=0)
    group_dispatch = _share_groups(top.table("share_groups"))
    log_level = top.choice("log_level", LOG_LEVELS)
    polling = top.boolean("polling")
    exactly_once = _exactly_once(top.table("exactly_once"), base.exactly_once)
    security = _security(top.table("security"), base.security)
    mqtt = _mqtt(top.table("mqtt"), base.mqtt, read_files=read_files)
    if top.has("xmpp"):
        # Set with flags only: "unknown key" sent a user looking for a typo in a table that
        # has no right spelling.
        raise top.error(
            "xmpp",
            "the XMPP component has no keys in the file: give serve its flags "
            "(--xmpp-component NAME, --xmpp-server HOST:PORT, --xmpp-secret-file FILE; "
            "docs/xmpp.md)",
        )
    top.finish()
    if read_files:
        mqtt = _authenticated(mqtt, security, document, source)
    return ServeConfig(
        data=data if data is not None else base.data,
        fsync=fsync or base.fsync,
        fsync_interval=fsync_interval or base.fsync_interval,
        sweep_interval=sweep_interval or base.sweep_interval,
        keep_processed=base.keep_processed if keep_processed is None else keep_processed,
        processed_retention=processed_retention or base.processed_retention,
        expired_retention=expired_retention or base.expired_retention,
        dispatch=dispatch or base.dispatch,
        max_deliveries=base.max_deliveries if max_deliveries is None else max_deliveries or None,
        group_dispatch=group_dispatch or base.group_dispatch,
        log_level=log_level or base.log_level,
        polling=base.polling if polling is None else polling,
        exactly_once=exactly_once,
        security=security,
        mqtt=mqtt,
        source=source,
        listeners_from_file=listed,
        data_from_file=data is not None,
        fsync_interval_from_file=fsync_interval is not None,
        file_sets_nothing=_sets_nothing(document),
    )


def _authenticated(
    mqtt: MqttSettings, security: Security, document: dict[str, Any], source: Path
) -> MqttSettings:
    """`mqtt` with the authenticator and authorizer the password and ACL files make."""
    # Each error names its key, as a TLS file's does: the file at fault, or allow_anonymous.
    try:
        authenticator = security.authenticator()
    except InvalidArgument as error:
        key = "allow_anonymous" if security.password_file is None else "password_file"
        hint = _missing(document, "password_file", security.password_file, source)
        raise InvalidArgument(f"{source}: security.{key}: {error}{hint}") from None
    try:
        authorizer = security.authorizer()
    except InvalidArgument as error:
        hint = _missing(document, "acl_file", security.acl_file, source)
        raise InvalidArgument(f"{source}: security.acl_file: {error}{hint}") from None
    return dataclasses.replace(mqtt, authenticator=authenticator, authorizer=authorizer)


def session_config(path: str | os.PathLike[str]) -> ServeConfig:
    """The config file at `path` as `boxmq session ls --config` reads it: its `data` (the
    root, unless --data is typed) and its `[mqtt.limits] max_session_expiry` (the default if
    it sets none), what `boxmq serve --config` caps the sessions it finds on disk by. The
    whole file is checked as `load_config` checks it, so a file serve refuses is refused in
    its words (a key out of its table or misspelt was taken, its cap not applied); the
    password, ACL and TLS files it names are not read, which the CLI's user may not read."""
    return _load(Path(path), ServeConfig(), read_files=False)


def _names_folder(source: Path) -> Path:
    """The folder the config file's relative names are taken from: its own, so that the file
    and the files it names move together; the current directory for one read as it comes (a
    pipe, `--config <(envsubst < boxmq.toml.in)`, /dev/stdin, a FIFO, a device), whose
    folder (/dev/fd) is no place of the user's: `data = "state"` was /dev/fd/state."""
    try:
        regular = stat.S_ISREG(os.stat(source).st_mode)
    except OSError:
        regular = True  # gone since it was read: its folder, as for any file
    return source.parent if regular else Path.cwd()


def _which_folder(source: Path, folder: Path) -> str:
    """The folder `_names_folder` chose, in words, for an error about a file not there."""
    if folder == source.parent:
        return "the config file's folder"
    return "the current directory, the config file being read as it comes"


def _sets_nothing(document: dict[str, Any]) -> bool:
    """No key of the file has a value but a table that sets nothing either: an empty file, one
    of comments (the example's every line commented out), or `[mqtt]` alone."""
    return all(isinstance(value, dict) and _sets_nothing(value) for value in document.values())


def _missing(document: dict[str, Any], key: str, path: Path | None, source: Path) -> str:
    """What to do about a [security] file that does not exist: a relative name is taken
    from the config file's folder, not from where serve was started, which a user who wrote
    "passwd" beside a `--config etc/boxmq.toml` may not expect; a password file is made by
    `boxmq passwd`. A file `load_config`'s defaults name, and this file does not, is not
    the config file's to place (it was said as "" taken from its folder)."""
    if path is None or path.exists():
        return ""
    folder = _names_folder(source)
    written = document.get("security", {}).get(key)
    where = (
        f"{json.dumps(written)} is taken from {folder}, {_which_folder(source, folder)}; "
        if isinstance(written, str) and not Path(written).expanduser().is_absolute()
        else ""
    )
    make = (
        f"make it with `boxmq passwd {shlex.quote(str(path))} USER`"
        if key == "password_file"
        else "write it"
    )
    return f" ({where}{make}, or fix {key})"


# The longest config file read (a few KB in practice): --config /dev/zero, or a pipe that
# never ends, read until memory ran out.
CONFIG_LONGEST: Final = 16 * 1024 * 1024
# Seconds a FIFO, a pipe or a device given as --config has to come to its end: a named FIFO
# nothing writes to kept serve waiting for ever.
CONFIG_PIPE_WAIT: Final = 5.0


def _config_bytes(source: Path) -> bytes:
    """The bytes of the config file; an InvalidArgument that says what to give instead for
    what is no file (a folder, a device, a FIFO nothing writes to, one with no end)."""
    # Not blocking: opening a FIFO waits for a writer, which may never come.
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InvalidArgument(
                f"config file {source} is a folder: give --config the TOML file itself"
            )
        # A pipe (`--config <(envsubst < tpl.toml)`) or a character device (/dev/null: no
        # settings) is read as it comes, for CONFIG_PIPE_WAIT seconds at most.
        streamed = "a FIFO (a pipe)" if stat.S_ISFIFO(mode) else "a device"
        if not stat.S_ISREG(mode) and not stat.S_ISFIFO(mode) and not stat.S_ISCHR(mode):
            raise InvalidArgument(
                f"config file {source} is no file (a socket or a block device): give --config "
                "the TOML file itself"
            )
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + CONFIG_PIPE_WAIT
        while True:
            if not stat.S_ISREG(mode) and not _readable(fd, deadline - time.monotonic()):
                raise InvalidArgument(
                    f"config file {source} is {streamed} that did not come to its end within "
                    f"{CONFIG_PIPE_WAIT:g} s: give --config the TOML file itself"
                )
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > CONFIG_LONGEST:
                raise InvalidArgument(
                    f"config file {source} is longer than {CONFIG_LONGEST // 1024 // 1024} MiB: "
                    "no config file is; give --config the TOML file itself"
                )
    finally:
        os.close(fd)


def _readable(fd: int, wait: float) -> bool:
    """Whether a read of `fd` (a pipe, a device) returns at once (bytes or its end) within
    `wait` seconds."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, math.ceil(wait * 1000))))


def _read_toml(source: Path) -> dict[str, Any]:
    """The file's TOML document, or an error of one line that names the file."""
    try:
        raw = _config_bytes(source)
    except FileNotFoundError:
        raise InvalidArgument(f"config file {source} does not exist") from None
    except OSError as error:
        raise InvalidArgument(f"cannot read config file {source}: {error.strerror}") from None
    # An editor's byte order mark (Windows Notepad) is no TOML: tomllib would say only
    # "Invalid statement (at line 1, column 1)" of a file that looks right.
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        text = raw.decode("utf-8")  # TOML files are UTF-8 (TOML 1.0, "Spec")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise InvalidArgument(
            f"{source}: not UTF-8 text (byte 0x{raw[error.start]:02x} on line {line}): "
            "save the file as UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InvalidArgument(f"{source}: not valid TOML: {_toml_error(error, text)}") from None


# tomllib's message and where it stopped: "Invalid value (at line 1, column 8)" (Python 3.11
# and 3.12 give no attributes for them).
_TOML_WHERE: Final = re.compile(r"(.*) \(at line (\d+), column \d+\)", re.DOTALL)
# What to write instead, for the mistakes tomllib names only in its grammar's words: a key
# given twice ("Cannot overwrite a value" named neither the key nor the first one), a table
# declared twice, a string without its quotes ("Invalid value").
_TOML_HINTS: Final = (
    ("Cannot overwrite a value", "a key set twice in one table: keep one of them"),
    ("Cannot declare", "a table declared twice: put all its keys under one [table] header"),
    ("Invalid value", 'a string goes in double quotes: fsync = "never", sweep_interval = "30s"'),
    ("Illegal character '\\n'", 'a string not closed on its line: end it with its quote (")'),
    ("Expected newline or end of document", "one key = value a line"),
    (
        "Expected '=' after a key",
        'one key = value a line, the key one word: fsync = "never", max_connections = 5',
    ),
)


# What was left open when tomllib says only that the file ended ("at end of document"): a
# value spread over lines, never closed (a blank line or comment after an array's last comma
# gives "Invalid value").
_TOML_AT_END: Final = " (at end of document)"
_TOML_UNCLOSED_HINTS: Final = (
    ("Unterminated string", "a string not closed: end it with the quotes it began with"),
    ("Expected \"'", "a string not closed: end it with the quotes it began with"),
    ("Unclosed array", "an array not closed: end it with ]"),
    ("Invalid value", "an array not closed: end it with ]"),
)


def _toml_error(error: tomllib.TOMLDecodeError, text: str) -> str:
    """tomllib's message, with the line it stopped at as the file has it, and what to write
    instead where tomllib's words do not say."""
    message = str(error)
    if message.endswith(_TOML_AT_END):
        return _toml_error_at_end(message, text)
    found = _TOML_WHERE.fullmatch(message)
    if found is None:
        return message
    problem, number = found[1], int(found[2])
    lines = text.split("\n")  # TOML's lines: splitlines() also ends one at U+2028 or \x85
    line = lines[number - 1].strip() if number <= len(lines) else ""
    shown = f": {line}" if line else ""
    hint = _toml_hint(problem, line)
    return f"{message}{shown}" + (f" ({hint})" if hint else "")


# A number with its unit and no quotes (sweep_interval = 30s): TOML reads the number, then
# finds more on the line.
_UNQUOTED_UNIT: Final = re.compile(r"[0-9][0-9_.]*\s*[A-Za-z]+")
# A word without quotes that begins as TOML's inf or nan (log_level = info): TOML reads the
# number and finds more on the line, where any other word is an "Invalid value".
_UNQUOTED_WORD: Final = re.compile(r"(inf|nan)[A-Za-z0-9_-]+")


def _toml_hint(problem: str, line: str) -> str | None:
    """What to write instead of `line`, where tomllib stopped with `problem`; the value's
    mistakes first, which tomllib's words name least."""
    if problem.startswith("Invalid statement") and line.startswith((";", "//")):
        return f"a comment begins with #: # {line.lstrip(';/').strip()}"  # an INI file's, C's
    key, equals, value = line.partition("=")
    key, value = key.strip(), value.partition("#")[0].strip()
    # Booleans as Python, YAML or an INI file write them, which TOML reads as no value at all.
    if equals and problem.startswith("Invalid value") and value.lower() in BOOLEAN_WORDS:
        return "a boolean is true or false, in lower case and without quotes"
    if equals and problem.startswith("Expected newline") and _UNQUOTED_UNIT.fullmatch(value):
        written = value.replace(" ", "")
        return f'a value with a unit is a string, in double quotes: {key} = "{written}"'
    if equals and problem.startswith("Expected newline") and _UNQUOTED_WORD.fullmatch(value):
        return f'a string goes in double quotes: {key} = "{value}"'
    if equals and problem.startswith("Unescaped '\\'") and value.startswith('"'):
        plain = value.strip('"')
        return (
            'a backslash begins an escape in a "..." string: write it in single quotes, where '
            f"it is plain, '{plain}'"
        )
    if problem.startswith("Expected '=' after a key") and (mosquitto := _mosquitto_line(line)):
        return mosquitto
    return next((hint for start, hint in _TOML_HINTS if problem.startswith(start)), None)


def _mosquitto_line(line: str) -> str | None:
    """What to write for a mosquitto.conf line (`allow_anonymous false`, `listener 1883`:
    a name, a space, its value), None for a line that is none."""
    name, _, value = line.partition(" ")
    value = value.strip()
    homes = _homes()
    if not value or (name not in MOSQUITTO_KEYS and name not in _MOSQUITTO_SHARED):
        return None
    said = "a mosquitto.conf line; this file is TOML, one key = value a line under its [table]"
    if name == "listener":
        port, _, host = value.partition(" ")
        where = f", host = {json.dumps(host.strip())}" if host.strip() else ""
        return f"{said}: write [[mqtt.listener]] and below it port = {port}{where}"
    if name in MOSQUITTO_KEYS:
        return f"{said}: {MOSQUITTO_KEYS[name]}"
    written = value if value in ("true", "false") or value.isdigit() else json.dumps(value)
    return f"{said}: write {name} = {written}, {homes[name].split(', as ')[0]}"


def _toml_error_at_end(message: str, text: str) -> str:
    """A mistake tomllib found only at the file's end, which named no line. On a last line
    without its newline (`a = 2` set twice, `data = "state`), it is the mistake the same file
    with one has, said as for that file. Otherwise a value was opened and never closed (an
    array, a triple-quoted string), and the line it begins on is the last `key = ` line whose
    lines above are TOML: every run of lines from the top holding it fails."""
    if not text.endswith("\n"):
        try:
            tomllib.loads(text + "\n")
        except tomllib.TOMLDecodeError as error:
            return _toml_error(error, text + "\n")  # at its end again: left open above
        return message  # TOML ends a statement at the file's end as at a newline: not reached
    lines = text.split("\n")
    # A value begins on a `key = ` line: only those are tried (a long array's items are not),
    # and no more than _TOML_TRIES of them, each a parse of the lines above it: a file given
    # to --config by mistake (thousands of lines) is not parsed thousands of times.
    begins = [k for k in range(len(lines) - 1, -1, -1) if "=" in lines[k]][:_TOML_TRIES]
    complete = next((k for k in begins if _is_toml(lines[:k])), None)
    if complete is None:
        return message
    problem = message.removesuffix(_TOML_AT_END)
    hint = next((hint for start, hint in _TOML_UNCLOSED_HINTS if problem.startswith(start)), None)
    return (
        f"{message}: the file ends inside what line {complete + 1} begins: "
        f"{lines[complete].strip()}" + (f" ({hint})" if hint else "")
    )


_TOML_TRIES: Final = 100


def _is_toml(lines: list[str]) -> bool:
    try:
        tomllib.loads("\n".join(lines))
    except tomllib.TOMLDecodeError:
        return False
    return True


def _homes() -> dict[str, str]:
    """Where each key goes, said of one found in another table (`Table.finish`): the usual
    TOML slip is a top-level key written below a [table] header, which makes it that
    table's. A name of two tables (dispatch) is said as the top-level one."""
    tables: list[tuple[str, tuple[str, ...]]] = [
        ("in [[mqtt.listener]]", ("host", "port", "tls")),
        (
            "in a listener's tls table",
            ("cert", "key", "ca", "require_client_cert", "identity_as_username"),
        ),
        ("in [mqtt.limits]", tuple(limit.name for limit in dataclasses.fields(Limits))),
        ("in [exactly_once]", (*_EXACTLY_ONCE_COUNTS, *_EXACTLY_ONCE_SECONDS, "trusted_sources")),
        ("in [security]", ("password_file", "acl_file", "allow_anonymous")),
        ("in [mqtt]", ("response_information", "sys_interval", "listener", "limits")),
        ("at the top of the file, above the first [table] header", _TOP_KEYS),
    ]
    homes = {key: home for home, keys in tables for key in keys}
    # A table's name is no key written above a header: `[mqtt.security]` is [security] under
    # the wrong header, and "above the first [table] header" would send it where it cannot go.
    for table, header in _TABLE_HEADERS.items():
        kind = "" if header.endswith(" tables") else "the table "
        where = homes[table].removesuffix(", above the first [table] header")
        homes[table] = f"{where}, as {kind}{header}"
    return homes


# mosquitto.conf's names that boxmq's file does not take, and what to write instead: a user
# coming from mosquitto writes its names, and was told only to check their spelling. Those
# boxmq shares with it (allow_anonymous, password_file, acl_file, max_connections, port, ...)
# are its own keys, told their table when written elsewhere (`_homes`).
_IN_TLS: Final = "in a listener's tls table (tls = { ... } in its [[mqtt.listener]])"
MOSQUITTO_KEYS: Final = {
    name: f"{name} is mosquitto.conf's; boxmq "
    + (instead if instead.startswith(("keeps", "has")) else f"names it {instead}")
    for name, instead in {
        "bind_address": "host, in [[mqtt.listener]]",
        "bind_interface": "host (the interface's address), in [[mqtt.listener]]",
        "persistence": "keeps every message on disk under data, always: leave it out",
        "persistence_location": "data, at the top of the file",
        "persistence_file": "has none: each message is a file under data",
        "autosave_interval": "fsync (and fsync_interval), at the top of the file",
        "autosave_on_changes": "fsync (and fsync_interval), at the top of the file",
        "cafile": f"ca, {_IN_TLS}",
        "capath": f"ca (one file of CA certificates), {_IN_TLS}",
        "certfile": f"cert, {_IN_TLS}",
        "keyfile": f"key, {_IN_TLS}",
        "require_certificate": f"require_client_cert, {_IN_TLS}",
        "use_identity_as_username": f"identity_as_username, {_IN_TLS}",
        "max_inflight_messages": "max_inflight, in [mqtt.limits]",
        "max_queued_messages": "max_queued, in [mqtt.limits]",
        "message_size_limit": "max_packet_size, in [mqtt.limits]",
        "persistent_client_expiration": "max_session_expiry, in [mqtt.limits]",
        "log_type": "log_level (debug, info, warning, error), at the top of the file",
        "log_dest": "has none: serve logs to its standard error",
        "per_listener_settings": "has none: [security] holds for every listener",
    }.items()
}


# mosquitto.conf's names that are boxmq's keys too (in their own tables).
_MOSQUITTO_SHARED: Final = (
    "listener",
    "port",
    "allow_anonymous",
    "password_file",
    "acl_file",
    "max_connections",
    "max_keepalive",
    "max_packet_size",
    "max_queued_bytes",
    "sys_interval",
)


# The keys of the file that are tables, and the header each is written with.
_TABLE_HEADERS: Final = {
    "share_groups": "[share_groups.<group>] tables",
    "exactly_once": "[exactly_once]",
    "security": "[security]",
    "mqtt": "[mqtt]",
    "listener": "[[mqtt.listener]] tables",
    "limits": "[mqtt.limits]",
}


# The keys of the file outside any table, as load_config reads them (a test checks they agree).
_TOP_KEYS: Final = (
    "data",
    "fsync",
    "fsync_interval",
    "sweep_interval",
    "keep_processed",
    "processed_retention",
    "expired_retention",
    "dispatch",
    "max_deliveries",
    "log_level",
    "polling",
    "share_groups",
    "exactly_once",
    "security",
    "mqtt",
)


_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")  # TOML writes other keys quoted


def _share_groups(table: Table) -> tuple[tuple[str, str], ...]:
    """[share_groups.<name>] tables: each group's own dispatch strategy."""
    found = []
    for group in table.names():
        if not is_share_name(group):
            # No client's $share/<group>/ can name it (MQTT 5.0 §4.8.2), so its strategy would
            # never be used, without a word, as a misspelt key would not be.
            raise table.error(
                json.dumps(group) if not _BARE_KEY.fullmatch(group) else group,
                "not a share group's name, which is not empty and has no '/', '+' or '#': "
                "for clients of $share/etl/sensors/#, the table is [share_groups.etl]",
            )
        settings = table.table(group)
        strategy = settings.choice("dispatch", DISPATCH_STRATEGIES)
        settings.finish()
        if strategy is not None:
            found.append((group, strategy))
    table.finish()
    return tuple(found)


# What the exactly-once intake holds back (MQTT QoS 2, XMPP assured): counts and bytes are
# integers, ttls seconds, all of them 0 or more; trusted_sources, who may send at all, a list.
_EXACTLY_ONCE_COUNTS: Final = (
    "max_pending_per_source",
    "max_pending_total",
    "max_bytes_per_source",
    "max_bytes_total",
    "max_message_size",
)
_EXACTLY_ONCE_SECONDS: Final = ("pending_ttl", "done_ttl")


def _exactly_once(table: Table, base: ExactlyOnceLimits) -> ExactlyOnceLimits:
    values: dict[str, Any] = {}  # ints for counts, floats for seconds
    for name in _EXACTLY_ONCE_COUNTS:
        count = table.integer(name, low=0, in_bytes=name in IN_BYTES)
        if count is not None:
            values[name] = count
    for name in _EXACTLY_ONCE_SECONDS:
        seconds = table.seconds(name, zero=True)
        if seconds is not None:
            values[name] = seconds
    trusted = _trusted_sources(table)
    if trusted is not None:
        values["trusted_sources"] = trusted
    table.finish()
    return dataclasses.replace(base, **values)


def _trusted_sources(table: Table) -> frozenset[str] | None:
    """`trusted_sources`: the senders each door names (`mqtt:<client id>`, a JID) that may
    send exactly once; [] none. An entry no door of serve could name (`billing job`,
    `MQTT:sensor-1`) would trust no one, found only when its client's QoS 2 PUBLISHes were
    refused: it is refused here, at start. (`sensor-1` alone is a JID, a server's: taken.)"""
    entries = table.strings("trusted_sources")
    if entries is None:
        return None
    for index, entry in enumerate(entries, start=1):
        if _wildcard_domain(entry):
            raise table.error(
                f"trusted_sources[{index}]",
                f"{entry!r} holds a '*', which no JID's domain holds: the list takes no "
                "wildcards (leave trusted_sources out to let anyone send exactly once, or list "
                "each sender)",
            )
        problem = _names_no_sender(entry)
        if problem is not None:
            raise table.error(
                f"trusted_sources[{index}]",
                f"{problem}: write mqtt:<client id> for an MQTT client "
                '("mqtt:sensor-1"), a JID for an XMPP sender ("alice@example.org")',
            )
    return frozenset(entries)


def _wildcard_domain(entry: str) -> bool:
    """Whether `entry` is a JID with a `*` in its domain (`*`, `alice@*.example.org`): one
    written as a wildcard, which slixmpp takes as a JID, but no XMPP server stamps a `from`
    with (a domain is a host name or an address, RFC 7622 §3.2), so it would trust no one.
    A `*` of a localpart, a resource or an MQTT client id may be a sender's own: kept."""
    if entry.startswith(MQTT_SOURCE_PREFIX):
        return False
    domain = entry.partition("/")[0].rpartition("@")[2]
    return "*" in domain


def _names_no_sender(entry: str) -> str | None:
    """Why `entry` of trusted_sources names no sender of serve's doors, None if it names one."""
    if not entry:
        return "an empty string names no one"
    if entry.startswith(MQTT_SOURCE_PREFIX):
        # MQTT 3.1.1 §3.1.3.1, MQTT 5.0 §3.1.3.1: an empty client id is replaced by the one
        # the server assigns, which no file can know.
        return None if entry != MQTT_SOURCE_PREFIX else f"{entry!r} names no client id"
    from boxmq.xmpp.jids import normal  # slixmpp's JIDs: only for a file that lists some

    return None if normal(entry) is not None else f"{entry!r} is neither an MQTT client nor a JID"


def _security(table: Table, base: Security) -> Security:
    password_file = table.path("password_file")
    acl_file = table.path("acl_file")
    allow_anonymous = table.boolean("allow_anonymous")
    table.finish()
    return Security(
        password_file=password_file or base.password_file,
        acl_file=acl_file or base.acl_file,
        allow_anonymous=allow_anonymous if allow_anonymous is not None else base.allow_anonymous,
    )


def _mqtt(table: Table, base: MqttSettings, *, read_files: bool) -> MqttSettings:
    listeners: list[Listener] = []
    # `listener = []` reads as "no MQTT", but the default listener would have been opened.
    none = "leave it out for the default, 127.0.0.1:1883, or run serve with --no-mqtt for none"
    for index, item in enumerate(table.tables("listener", if_empty=none), start=1):
        listener = _listener(item, read_files=read_files)
        if listener.port and any(
            (o.host, o.port) == (listener.host, listener.port) for o in listeners
        ):
            # Caught here, with its place in the file, rather than as a bind error at start.
            raise table.error(
                f"listener[{index}]", f"{listener.host}:{listener.port} is listed twice"
            )
        listeners.append(listener)
    limits = _limits(table.table("limits"), base.limits)
    response_information = _response_information(table)
    sys_interval = table.seconds("sys_interval", zero=True, shortest=SHORTEST_INTERVAL)
    table.finish()
    return dataclasses.replace(
        base,
        listeners=tuple(listeners) or base.listeners,
        limits=limits,
        response_information=response_information or base.response_information,
        sys_interval=base.sys_interval if sys_interval is None else sys_interval,
    )


def _response_information(table: Table) -> str | None:
    """`response_information`: a topic name (the basis of a client's response topics), which
    may hold %c and %u."""
    template = table.string("response_information")
    if template is not None:
        try:
            validate_topic(template)  # %c and %u are plain characters to it
        except InvalidTopic as error:
            raise table.error("response_information", str(error)) from None
    return template


def _listener(table: Table, *, read_files: bool) -> Listener:
    host = table.string("host")
    if host == "":
        # `--mqtt :PORT` means every interface, the key left out means this machine only: an
        # empty string could be read either way, and the wrong one would expose the broker.
        raise table.error(
            "host", 'empty: write "127.0.0.1" (this machine only) or "0.0.0.0" (every interface)'
        )
    if host is not None:
        _check_host(table, host)
    host = host or Listener.host
    port = table.integer("port", low=0, high=65_535)
    # Asked for whether or not it is there: a key the table takes, named with the others
    # to a key that is no misspelling of any (Table.finish).
    tls_table = table.table("tls", example=_TLS_EXAMPLE)
    tls, identity, key = (
        _tls(tls_table, read_files=read_files) if table.has("tls") else (None, False, None)
    )
    table.finish()
    if port is None:
        port = 8883 if table.has("tls") else Listener.port  # the IANA ports for MQTT
    return Listener(host=host, port=port, ssl=tls, identity_as_username=identity, tls_key=key)


# A tls table's keys as the error of a tls that is no table shows them (`tls = "server.crt"`).
_TLS_EXAMPLE: Final = 'cert = "server.crt", key = "server.key"'


def _check_host(table: Table, host: str) -> None:
    """A host written as --mqtt takes it, with its port ("0.0.0.0:1883") or an IPv6 address in
    brackets ("[::1]"), would reach the resolver as a host name, and fail there as one that
    does not resolve: say what to write instead."""
    if "\0" in host:  # a TOML "\u0000": serve's start failed with a ValueError's traceback
        raise table.error("host", f"{host!r} holds a NUL character (\\u0000): no host name does")
    if host != host.strip():  # " 127.0.0.1": the resolver's "name or service not known"
        raise table.error("host", f"{host!r} has spaces around it: write host = {host.strip()!r}")
    if "://" in host:  # "mqtt://0.0.0.0:1883", as a client's broker address is written
        _check_url(table, host)
    name, colon, port = host.rpartition(":")
    bracketed = name.startswith("[") and name.endswith("]")  # "[::1]:1883"
    if colon and (":" not in name or bracketed) and port.isascii() and port.isdigit():
        name = name[1:-1] if bracketed else name
        raise table.error(
            "host", f"{host!r} holds a port: write host = {name!r} and port = {int(port)}"
        )
    if host.startswith("[") and host.endswith("]"):
        raise table.error(
            "host", f"{host!r}: write the IPv6 address without brackets, host = {host[1:-1]!r}"
        )


def _check_url(table: Table, host: str) -> None:
    """A listener's address written as a URL: the host and port to write instead."""
    url = urllib.parse.urlsplit(host)
    try:
        port = url.port
    except ValueError:  # a port that is no number, or past 65535: the host alone is said
        port = None
    name = url.hostname or ""
    write = f"host = {name!r}" + (f" and port = {port}" if port is not None else "")
    raise table.error("host", f"{host!r} is a URL: write {write}" if name else f"{host!r} is a URL")


def _tls(table: Table, *, read_files: bool) -> tuple[ssl.SSLContext | None, bool, Path | None]:
    """The listener's context (None, its keys checked alone, without `read_files`), whether
    its client certificates name their users, and the file of its private key (`key`, or
    `cert` that holds it too; None without `read_files`)."""
    cert = table.path("cert")
    key = table.path("key")
    ca = table.path("ca")
    require = table.boolean("require_client_cert")
    identity = table.boolean("identity_as_username")
    table.finish()
    if cert is None:
        raise table.error("cert", "a TLS listener needs a certificate file")
    if require and ca is None:
        # Without a CA there is nothing to check a client certificate against, so the
        # listener would let every client in: refuse at start rather than look secure.
        raise table.error(
            "ca",
            "require_client_cert = true needs the CA file that signs client certificates: "
            "set tls.ca (or drop require_client_cert)",
        )
    if identity and (ca is None or require is False):
        # A client without a certificate would have no user name, and no password is asked.
        raise table.error(
            "identity_as_username",
            "takes the user name from a client certificate, which needs tls.ca "
            "(and require_client_cert left true)",
        )
    if not read_files:
        return None, identity is True, None
    try:
        context = server_context(cert, key, ca=ca, require_client_cert=require is not False)
        return context, identity is True, key or cert
    except TlsFileError as error:
        raise table.error(error.setting, str(error)) from None


def _limits(table: Table, base: Limits) -> Limits:
    """Every field of `Limits`, typed after its default: int fields take integers, float
    fields seconds."""
    values: dict[str, Any] = {}  # each typed after its field's default just below
    for limit in dataclasses.fields(Limits):
        current = getattr(base, limit.name)
        if isinstance(current, float):
            value: int | float | None = table.seconds(limit.name)
        else:
            low = LIMITS_LOWEST.get(limit.name, 1)
            high = LIMITS_HIGHEST.get(limit.name)
            seconds = limit.name in LIMITS_IN_SECONDS
            in_bytes = limit.name in IN_BYTES
            value = table.integer(
                limit.name, low=low, high=high, seconds=seconds, in_bytes=in_bytes
            )
        if value is not None:
            values[limit.name] = value
    table.finish()
    return dataclasses.replace(base, **values)
