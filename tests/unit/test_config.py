"""The serve config file: what it sets, what it refuses (naming key and file), flags over it."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq import cli, cli_parser
from boxmq import config as config_module
from boxmq.cli_serve import describe_security, mqtt_settings, security_warnings
from boxmq.config import LIMITS_HIGHEST, LIMITS_LOWEST, Security, ServeConfig, load_config
from boxmq.core import ExactlyOnceLimits
from boxmq.errors import InvalidArgument
from boxmq.mqtt.acl import Acl
from boxmq.mqtt.passwords import PasswordFile, set_password
from boxmq.mqtt.settings import Limits, Listener, MqttSettings, listener_url

REPO = Path(__file__).resolve().parents[2]


def _write(folder: Path, text: str) -> Path:
    path = folder / "boxmq.toml"
    path.write_text(text)
    return path


def _served(config: ServeConfig) -> tuple[ServeConfig, MqttSettings]:
    """`describe_security`'s arguments for a serve with the listeners of `config`."""
    return config, config.mqtt


def test_an_empty_file_keeps_the_defaults(tmp_path: Path) -> None:
    defaults = ServeConfig(data=Path("/srv/boxmq"), fsync="never", sweep_interval=5.0)
    config = load_config(_write(tmp_path, ""), defaults=defaults)
    assert dataclasses.replace(config, source=None, file_sets_nothing=False) == defaults
    assert config.source == tmp_path / "boxmq.toml"


@pytest.mark.parametrize(
    ("text", "empty"),
    [
        ("", True),
        ("# data = './data'\n\n   # fsync = 'never'\n", True),
        ("[mqtt]\n[mqtt.limits]\n", True),
        ("fsync = 'always'\n", False),  # a default, written: a setting all the same
        ("[mqtt]\nsys_interval = '10s'\n", False),
    ],
)
def test_the_start_up_line_says_when_the_file_sets_nothing(
    tmp_path: Path, text: str, empty: bool
) -> None:
    """A file of 0 bytes or comments alone was named as the config, as if in force."""
    path = _write(tmp_path, text)
    [line, _, _] = describe_security(*_served(load_config(path)))
    expected = f"config: no settings in {path}, using the defaults (and flags)"
    assert line == (expected if empty else f"config: {path}")


def test_a_config_read_from_a_pipe_takes_its_relative_names_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--config <(envsubst < boxmq.toml.in)` (configuration.md) names /dev/fd/63, whose folder
    is no place of the user's: `data = "state"` was /dev/fd/state (and under /dev/stdin a root
    made in /dev), and `password_file = "passwd"` one that never exists."""
    set_password(tmp_path / "passwd", "alice", b"wonder")
    monkeypatch.chdir(tmp_path)
    read, write = os.pipe()
    os.write(write, b'data = "state"\n[security]\npassword_file = "passwd"\n')
    os.close(write)
    try:
        config = load_config(f"/dev/fd/{read}")
    finally:
        os.close(read)
    assert config.data == tmp_path / "state"
    assert config.security.password_file == tmp_path / "passwd"


def test_every_setting(tmp_path: Path) -> None:
    set_password(tmp_path / "passwd", "alice", b"wonder")
    (tmp_path / "acl").write_text("user alice\ntopic alice/#\n")
    path = _write(
        tmp_path,
        """
        data = "state"
        fsync = "interval"
        fsync_interval = "250ms"
        sweep_interval = 2
        keep_processed = true
        dispatch = "sticky"
        max_deliveries = 0
        log_level = "debug"
        polling = true

        [share_groups.etl]
        dispatch = "least-in-flight"

        [mqtt]
        response_information = "reply/%c/"
        sys_interval = "1m"

        [[mqtt.listener]]
        host = "0.0.0.0"
        port = 1884

        [[mqtt.listener]]
        port = 0

        [mqtt.limits]
        max_connections = 7
        connect_timeout = "3s"
        max_queued_bytes = 0
        max_subscriptions = 0
        max_topic_levels = 0
        max_session_expiry = 0

        [exactly_once]
        max_pending_per_source = 5
        max_pending_total = 0
        max_bytes_per_source = 1000
        max_bytes_total = 2000
        max_message_size = 100
        pending_ttl = "10m"
        done_ttl = 0
        trusted_sources = ["mqtt:billing", "mqtt:site/7", "Alice@Example.org", "bob@example.org/x"]

        [security]
        password_file = "passwd"
        acl_file = "acl"
        """,
    )
    config = load_config(path)
    assert config.data == tmp_path / "state"  # relative to the config file's folder
    assert (config.fsync, config.fsync_interval, config.sweep_interval) == ("interval", 0.25, 2.0)
    assert config.keep_processed is True
    assert (config.dispatch, config.group_dispatch) == ("sticky", (("etl", "least-in-flight"),))
    assert config.max_deliveries is None  # 0: no limit
    assert config.log_level == "debug"
    assert config.logging_level == 10
    assert config.polling is True
    assert config.mqtt.listeners == (Listener("0.0.0.0", 1884), Listener("127.0.0.1", 0))
    assert config.mqtt.limits == Limits(
        max_connections=7,
        connect_timeout=3.0,
        max_queued_bytes=0,
        max_subscriptions=0,
        max_topic_levels=0,
        max_session_expiry=0,  # no v5 session outlives its connection
    )
    assert config.mqtt.response_information == "reply/%c/"
    assert config.mqtt.sys_interval == 60.0
    assert config.exactly_once == ExactlyOnceLimits(
        max_pending_per_source=5,
        max_pending_total=0,
        max_bytes_per_source=1000,
        max_bytes_total=2000,
        max_message_size=100,
        pending_ttl=600.0,
        done_ttl=0.0,
        # as written: each door compares its own (jids.normal for the XMPP one)
        trusted_sources=frozenset(
            {"mqtt:billing", "mqtt:site/7", "Alice@Example.org", "bob@example.org/x"}
        ),
    )
    assert config.security == Security(tmp_path / "passwd", tmp_path / "acl", None)
    assert isinstance(config.mqtt.authenticator, PasswordFile)
    assert isinstance(config.mqtt.authorizer, Acl)
    # No allow_anonymous with a password file: only users get in.
    assert not config.mqtt.authenticator.authenticate(None, None, "c")
    assert config.mqtt.authenticator.authenticate("alice", b"wonder", "c")
    assert config.mqtt.authorizer.can_publish("alice", "c", "alice/x")


@pytest.mark.parametrize(
    ("written", "trusted"),
    [
        ("", None),  # left out: anyone, as the embedded API's default
        ("trusted_sources = []", frozenset()),  # no one
        ("trusted_sources = ['mqtt:a b', 'mqtt:x%y']", frozenset({"mqtt:a b", "mqtt:x%y"})),
    ],
)
def test_trusted_sources_of_the_file(tmp_path: Path, written: str, trusted: object) -> None:
    """An MQTT client id may hold any character: after `mqtt:`, anything is one."""
    config = load_config(_write(tmp_path, f"[exactly_once]\n{written}\n"))
    assert config.exactly_once.trusted_sources == trusted


def test_without_a_security_table_anyone_may_do_anything(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, "[[mqtt.listener]]\nport = 1\n"))
    assert config.mqtt.authenticator is None
    assert config.mqtt.authorizer is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dta = 'x'", "dta: unknown key"),
        ("fsync = 'sometimes'", "fsync: 'sometimes' is not one of always, interval, never"),
        ("fsync = 1", "fsync: expected a string, got an integer"),
        ("sweep_interval = 'soon'", "sweep_interval: bad duration 'soon'"),
        ("sweep_interval = '\uff13s'", "sweep_interval: bad duration '\uff13s'"),  # fullwidth 3
        ("[exactly_once]\ndone_ttl = '\u0663m'", "done_ttl: bad duration"),  # Arabic-Indic 3
        ("sweep_interval = 0", "sweep_interval: 0 is not a positive number of seconds"),
        ("sweep_interval = 1e300", "sweep_interval: 1e+300 seconds is too long: at most"),
        ("keep_processed = 'yes'", "keep_processed: expected true or false, got a string"),
        ("polling = 1", "polling: expected true or false, got an integer"),
        ("max_deliveries = -1", "max_deliveries: -1 is out of range: use at least 0"),
        ("[[mqtt.listener]]\nhost = ''", 'mqtt.listener[1].host: empty: write "127.0.0.1"'),
        # serve's start failed with a traceback: ValueError "embedded null character"
        ('[[mqtt.listener]]\nhost = "a\\u0000"', "listener[1].host: 'a\\x00' holds a NUL"),
        ("max_deliveries = '5'", "max_deliveries: expected an integer, got a string"),
        ("log_level = 'loud'", "log_level: 'loud' is not one of debug, info, warning, error"),
        ("dispatch = 'fair'", "dispatch: 'fair' is not one of round-robin, least-in-flight"),
        ("[share_groups.etl]\ndispatch = 'x'", "share_groups.etl.dispatch: 'x' is not one of"),
        ("[share_groups.etl]\ndispath = 'sticky'", "share_groups.etl.dispath: unknown key"),
        ("[share_groups]\netl = 'sticky'", "share_groups.etl: expected a table"),
        ("mqtt = 3", "mqtt: expected a table, got an integer: write its keys below a [mqtt] "),
        # mosquitto.conf's names: boxmq's for each, not "check its spelling".
        (
            "persistence = true",
            "persistence: unknown key: persistence is mosquitto.conf's; boxmq keeps every "
            "message on disk under data, always: leave it out",
        ),
        (
            "[[mqtt.listener]]\ncafile = 'ca.pem'",
            "mqtt.listener[1].cafile: unknown key: cafile is mosquitto.conf's; boxmq names it "
            "ca, in a listener's tls table (tls = { ... } in its [[mqtt.listener]])",
        ),
        ("[mqtt.limits]\nmax_inflight_messages = 5", "boxmq names it max_inflight, in [mqtt.l"),
        ("log_type = 'all'", "log_type: unknown key: log_type is mosquitto.conf's; boxmq names"),
        ("[security]\nper_listener_settings = true", "boxmq has none: [security] holds for ev"),
        # A value, or a header of its own, where a table goes: the header said was none a
        # file can have ([mqtt.listener[1].tls]).
        (
            "[[mqtt.listener]]\ntls = 'server.crt'",
            "mqtt.listener[1].tls: expected a table, got a string: write tls = { cert = "
            '"server.crt", key = "server.key" } in its [[mqtt.listener]] table, or its keys '
            "below a [mqtt.listener.tls] header under that [[mqtt.listener]]",
        ),
        ("[[mqtt.listener]]\n[[mqtt.listener.tls]]", "tls: expected a table, got an array: wr"),
        ("[[security]]", "security: expected a table, got an array: write its keys below a [s"),
        # A header for a key of one value: "expected a string, got a table" alone.
        (
            "[fsync]",
            "fsync: expected a string, got a table ([fsync] is a table's header, and fsync one "
            "value: write fsync = ... above the first [table] header)",
        ),
        ("[keep_processed]", "got a table ([keep_processed] is a table's header, and keep_pr"),
        ("[sweep_interval]", "got a table ([sweep_interval] is a table's header, and sweep_i"),
        (
            "[mqtt.limits.max_connections]",
            "got a table ([mqtt.limits.max_connections] is a table's header, and "
            "max_connections one value: write max_connections = ... under [mqtt.limits])",
        ),
        (
            "[[mqtt.listener]]\n[mqtt.listener.port]",
            "mqtt.listener[1].port: expected an integer, got a table ([mqtt.listener.port] is a "
            "table's header, and port one value: write port = ... in its [[mqtt.listener]] table)",
        ),
        ("[mqtt]\nlistener = { port = 1 }", "mqtt.listener: expected tables ([[mqtt.listener]])"),
        ("[[mqtt.listener]]\n[[mqtt.listener]]\nprot = 1", "mqtt.listener[2].prot: unknown key"),
        ("[[mqtt.listener]]\nport = '1883'", "mqtt.listener[1].port: expected an integer"),
        ("[[mqtt.listener]]\nport = 70000", "port: 70000 is out of range: use from 0 to 65535"),
        ("[[mqtt.listener]]\ntls = {}", "mqtt.listener[1].tls.cert: a TLS listener needs a cert"),
        (
            "[[mqtt.listener]]\ntls = { cert = 'c.pem', require_client_cert = true }",
            "mqtt.listener[1].tls.ca: require_client_cert = true needs the CA file",
        ),
        (
            "[[mqtt.listener]]\ntls = { cert = 'c.pem', identity_as_username = true }",
            "tls.identity_as_username: takes the user name from a client certificate, which needs",
        ),
        ("[[mqtt.listener]]\nport=1\n[[mqtt.listener]]\nport=1", "listener[2]: 127.0.0.1:1 is"),
        ("[mqtt]\nresponse_information = 'r/#'", "mqtt.response_information: topic name 'r/#' mu"),
        ("[mqtt]\nresponse_information = ''", "mqtt.response_information: a topic name must be"),
        ("[mqtt]\nresponse_information = 1", "mqtt.response_information: expected a string"),
        ("[mqtt]\nsys_interval = -1", "mqtt.sys_interval: -1 is not 0 or more seconds"),
        ("[mqtt.limits]\nmax_connection = 1", "mqtt.limits.max_connection: unknown key"),
        ("[mqtt.limits]\nmax_connections = true", "max_connections: expected an integer, got a b"),
        ("[mqtt.limits]\nmax_inflight = 0", "mqtt.limits.max_inflight: 0 is out of range"),
        ("[mqtt.limits]\nmax_queued_bytes = -1", "max_queued_bytes: -1 is out of range"),
        ("[mqtt.limits]\nmax_subscriptions = -1", "max_subscriptions: -1 is out of range"),
        # Values that go to v5 clients in CONNACK must fit their field (MQTT 5.0 §3.2.2.3):
        # accepted, they made every v5 CONNECT fail in the server.
        ("[mqtt.limits]\nreceive_maximum = 65536", "receive_maximum: 65536 is out of range: use"),
        ("[mqtt.limits]\ntopic_alias_maximum = 65536", "from 0 to 65535"),
        ("[mqtt.limits]\nmax_keepalive = 65536", "max_keepalive: 65536 is out of range"),
        ("[mqtt.limits]\nmax_session_expiry = 4294967296", "from 0 to 4294967295"),
        ("[mqtt.limits]\nmax_packet_size = 268435456", "from 20 to 268435455"),
        # Written as --mqtt takes it: a resolver error would call it a host that does not resolve.
        ("[[mqtt.listener]]\nhost = '0.0.0.0:1883'", "[1].host: '0.0.0.0:1883' holds a port: wr"),
        ("[[mqtt.listener]]\nhost = '[::1]'", "host: '[::1]': write the IPv6 address without"),
        ("[[mqtt.listener]]\nhost = '[::1]:1883'", "holds a port: write host = '::1' and port"),
        # A URL, or spaces around the address: no host name, refused at the resolver.
        (
            "[[mqtt.listener]]\nhost = 'mqtt://0.0.0.0:1883'",
            "[1].host: 'mqtt://0.0.0.0:1883' is a URL: write host = '0.0.0.0' and port = 1883",
        ),
        ("[[mqtt.listener]]\nhost = 'tcp://[::1]'", "'tcp://[::1]' is a URL: write host = '::1'"),
        (
            "[[mqtt.listener]]\nhost = ' 127.0.0.1'",
            "[1].host: ' 127.0.0.1' has spaces around it: write host = '127.0.0.1'",
        ),
        # No CONNECT fits in less: every client would be refused by a broker that started.
        ("[mqtt.limits]\nmax_packet_size = 1", "max_packet_size: 1 is out of range: use from 20"),
        ("[mqtt.limits]\nmax_packet_size = 19", "max_packet_size: 19 is out of range"),
        ("exactly_once = 1", "exactly_once: expected a table, got an integer: write its keys"),
        ("[exactly_once]\nmax_pending = 1", "exactly_once.max_pending: unknown key"),
        ("[exactly_once]\nmax_message_size = -1", "exactly_once.max_message_size: -1 is out of"),
        ("[exactly_once]\nmax_bytes_total = 1.5", "max_bytes_total: expected an integer, got a n"),
        ("[exactly_once]\npending_ttl = -1", "exactly_once.pending_ttl: -1 is not 0 or more sec"),
        ("[exactly_once]\ndone_ttl = 'later'", "exactly_once.done_ttl: bad duration 'later'"),
        # Who may send exactly once: a list of the names the doors give their senders.
        (
            "[exactly_once]\ntrusted_sources = 'mqtt:billing'",
            "exactly_once.trusted_sources: expected a list of strings, got a string "
            "('mqtt:billing'): write [\"mqtt:billing\"]",
        ),
        ("[exactly_once]\ntrusted_sources = 1", "trusted_sources: expected a list of strings, got"),
        (
            "[exactly_once]\ntrusted_sources = { mqtt = 'billing' }",
            "exactly_once.trusted_sources: expected a list of strings, got a table",
        ),
        (
            "[exactly_once]\ntrusted_sources = ['mqtt:a', 7]",
            "exactly_once.trusted_sources[2]: expected a string, got an integer",
        ),
        (
            "[exactly_once]\ntrusted_sources = ['mqtt:a', ['mqtt:b']]",
            "exactly_once.trusted_sources[2]: expected a string, got an array",
        ),
        (
            "[exactly_once]\ntrusted_sources = ['mqtt:a', 'b@example.org', 'mqtt:a']",
            "exactly_once.trusted_sources[3]: 'mqtt:a' is listed twice (trusted_sources[1] too)",
        ),
        (
            "[exactly_once]\ntrusted_sources = ['']",
            "exactly_once.trusted_sources[1]: an empty string names no one: write mqtt:<client "
            'id> for an MQTT client ("mqtt:sensor-1"), a JID for an XMPP sender '
            '("alice@example.org")',
        ),
        ("[exactly_once]\ntrusted_sources = ['mqtt:']", "[1]: 'mqtt:' names no client id: write"),
        (
            "[exactly_once]\ntrusted_sources = ['billing job']",
            "trusted_sources[1]: 'billing job' is neither an MQTT client nor a JID: write mqtt:",
        ),
        ("[exactly_once]\ntrusted_sources = ['MQTT:a']", "'MQTT:a' is neither an MQTT client n"),
        ("[exactly_once]\ntrusted_sources = ['a@b/']", "'a@b/' is neither an MQTT client nor a"),
        # A key of [exactly_once] written below another header: its table is named.
        (
            "[security]\ntrusted_sources = []",
            "security.trusted_sources: not a key of this table: it goes in [exactly_once]",
        ),
        ("[security]\nallow_anonymous = 'yes'", "allow_anonymous: expected true or false"),
        ("[security]\npassword_file = ''", "password_file: expected a file name, got an empty"),
        # A TOML escape no file name can hold: open() raised ValueError, a traceback.
        ('[security]\npassword_file = "pw\\u0000"', "password_file: a file name cannot hold a"),
        ('[security]\nacl_file = "acl\\u0000"', "security.acl_file: a file name cannot hold a"),
        ('data = "state\\u0000"', "data: a file name cannot hold a NUL character (\\u0000)"),
        # The home of a user this machine does not have: expanduser's RuntimeError, a traceback.
        (
            'data = "~no-such-boxmq-user/state"',
            "data: '~no-such-boxmq-user/state': this machine has no user no-such-boxmq-user, "
            "so ~no-such-boxmq-user names no home folder: write its full path",
        ),
        ("[security]\nacl_file = '~no-such-boxmq-user/acl'", "security.acl_file: '~no-such-"),
        # The key whose file is wrong, as for TLS files, not only its table.
        ("[security]\nallow_anonymous = false", "security.allow_anonymous: false needs a passw"),
        ("[security]\nacl_file = 'nope'", "security.acl_file: ACL file "),
        ("[security]\npassword_file = 'nope'", "security.password_file: password file "),
        ("[security]\npassword_file = 'boxmq.toml'", "security.password_file: "),
        ("data = ", "not valid TOML: Invalid value (at line 1, column 8)"),
        # A top-level key below a [table] header is that table's in TOML: said where it goes.
        ('[mqtt]\nfsync = "never"', "mqtt.fsync: not a key of this table: it goes at the top"),
        (
            "[[mqtt.listener]]\nmax_connections = 5",
            "max_connections: not a key of this table: it goes in [mqtt.limits]",
        ),
        ("password_file = 'p'", "password_file: not a key of the top of the file: it goes in [s"),
        (
            "[[mqtt.listener]]\nkey = 'k'",
            "listener[1].key: not a key of this table: it goes in a listener's tls table",
        ),
        # A table under the wrong header: its own header, not "above the first [table] header".
        (
            "[mqtt.security]\nacl_file = 'acl'",
            "mqtt.security: not a key of this table: it goes at the top of the file, as the "
            "table [security]",
        ),
        ("[[listener]]\nport = 1", "listener: not a key of the top of the file: it goes in [mq"),
        ("[[listener]]\nport = 1", "it goes in [mqtt], as [[mqtt.listener]] tables"),
        ("[limits]\nmax_queued = 5", "limits: not a key of the top of the file: it goes in [mq"),
        ("[limits]\nmax_queued = 5", "it goes in [mqtt], as the table [mqtt.limits]"),
        # No typo to look for: the XMPP component is set with flags (docs/configuration.md).
        (
            "[xmpp]\ncomponent = 'pubsub.example.org'",
            "xmpp: the XMPP component has no keys in the file: give serve its flags "
            "(--xmpp-component NAME, --xmpp-server HOST:PORT, --xmpp-secret-file FILE; "
            "docs/xmpp.md)",
        ),
        # A misspelt key: the one meant, and its table when it is another.
        ("fsyn = 'never'", "fsyn: unknown key: did you mean fsync?"),
        ("[[mqtt.listener]]\nprot = 1883", "listener[1].prot: unknown key: did you mean port?"),
        ("[mqtt]\nmax_conections = 5", "did you mean max_connections in [mqtt.limits]?"),
        # No misspelling of any key: the keys the table takes, to pick from.
        ("colour = 'blue'", "colour: unknown key: the top of the file takes data, dispatch, "),
        (
            "[security]\npasswords = 'p'",
            "security.passwords: unknown key: this table takes acl_file, allow_anonymous, "
            "password_file",
        ),
        # tls too, which the listener asks for only when it is there.
        ("[[mqtt.listener]]\ncolour = 1", "colour: unknown key: this table takes host, port, tls"),
        (
            "[[mqtt.listener]]\ntls = { colour = 1 }",
            "tls.colour: unknown key: this table takes ca, cert, identity_as_username, key, "
            "require_client_cert",
        ),
        # A size with a unit, as other brokers take it: the bytes to write instead.
        (
            "[mqtt.limits]\nmax_queued_bytes = '64MiB'",
            "max_queued_bytes: expected an integer, got a string ('64MiB'): write 67108864, "
            "a number of bytes without a unit",
        ),
        (
            "[exactly_once]\nmax_message_size = '1MB'",
            "max_message_size: expected an integer, got a string ('1MB'): write 1000000 "
            "(1 MB), or 1048576 (1 MiB), a number of bytes without a unit",
        ),
        (
            "[mqtt.limits]\nmax_packet_size = '256 kb'",
            "got a string ('256 kb'): write 256000 (256 kB), or 262144 (256 KiB), a number",
        ),
        # Not a size: no bytes are said of it.
        ("[mqtt.limits]\nmax_connections = '10k'", "max_connections: expected an integer, got a"),
        # TOML's booleans are bare words.
        ("keep_processed = 'true'", "got a string ('true'): write true, without quotes"),
        ("polling = 'yes'", "polling: expected true or false, got a string ('yes'): write true"),
        ("keep_processed = 'Off'", "got a string ('Off'): write false, without quotes"),
        ("polling = 'maybe'", "polling: expected true or false, got a string"),
        # Whole seconds, written as a duration too: not a fraction of one.
        ("[mqtt.limits]\nmax_keepalive = '1500ms'", "'1500ms' is not a whole number of seconds"),
        # Out of range: the limit in seconds and in the unit the user wrote.
        (
            "[mqtt.limits]\nmax_keepalive = '1d'",
            "max_keepalive: '1d' (86400 seconds) is out of range: use from 1 to 65535 seconds "
            "(1s to about 18.2h)",
        ),
        (
            "[mqtt.limits]\nmax_keepalive = '19h'",
            "(68400 seconds) is out of range: use from 1 to 65535 seconds (1s to about 18.2h)",
        ),
        ("sweep_interval = '0ms'", "sweep_interval: '0ms' is not a positive number of seconds"),
        ("[mqtt.limits]\nmax_session_expiry = 'x'", "max_session_expiry: bad duration 'x'"),
        ("[mqtt.limits]\nmax_session_expiry = '1x'", "use a number of seconds in digits 0-9, or o"),
        # Its largest, "never" to MQTT (0xFFFFFFFF, 136 years), is past what a duration says.
        (
            "[mqtt.limits]\nmax_session_expiry = '49711d'",
            "max_session_expiry: bad duration '49711d': at most 36500d (100 years); or write "
            "4294967295, the most it takes, as an integer",
        ),
        ("[mqtt.limits]\nmax_connections = '10s'", "max_connections: expected an integer, got"),
        # Past TOML's 64-bit integers, which tomllib reads all the same: served before.
        (
            "max_deliveries = 99999999999999999999",
            "max_deliveries: 99999999999999999999 is past TOML's integers, "
            "-9223372036854775808 to 9223372036854775807 (64 bits)",
        ),
        ("[exactly_once]\nmax_message_size = 9223372036854775808", "past TOML's integers"),
        # A choice mistyped: the one meant.
        ("fsync = 'allways'", "'allways' is not one of always, interval, never: did you mean 'al"),
        ("fsync = 'Always'", "fsync: 'Always' is not one of always, interval, never: did you m"),
        ("log_level = 'warn'", "debug, info, warning, error: did you mean 'warning'?"),
        ("dispatch = 'round_robin'", "hash-by-key, random: did you mean 'round-robin'?"),
        # A group no $share/<group>/ can name: its strategy would never be used.
        ('[share_groups."etl/sensors/#"]\ndispatch = "sticky"', 'share_groups."etl/sensors/#": '),
        ('[share_groups."$share/etl"]\ndispatch = "sticky"', "the table is [share_groups.etl]"),
        ('[share_groups."a+b"]\ndispatch = "sticky"', 'share_groups."a+b": not a share group'),
        ('[share_groups.""]\ndispatch = "sticky"', 'share_groups."": not a share group'),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text + "\n")
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


@pytest.mark.parametrize("key", ["data", "config"])
def test_a_tilde_of_no_user_is_worded_in_the_file_as_on_the_command_line(
    tmp_path: Path, key: str
) -> None:
    """`data = "~nobody/q"` and `--data '~nobody/q'` are the same mistake: the file and the
    CLI said it in words of their own ("whose home folder ~nobody names", "so ~ names no home
    folder"); both say it alike, after the key or option that holds the path."""
    written = "~no-such-boxmq-user/state"
    path = _write(tmp_path, f"data = {written!r}\n")
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    in_file = str(caught.value).removeprefix(f"{path}: data: ")
    args = argparse.Namespace(name="serve", **{"data": None, "config": None, key: written})
    said = cli._home_folder(args).removeprefix(f"--{key} ")
    assert said == in_file
    assert said == (
        f"{written!r}: this machine has no user no-such-boxmq-user, so ~no-such-boxmq-user "
        "names no home folder: write its full path"
    )


@pytest.mark.parametrize("written", ["forever", "Never", "infinite", "unlimited"])
def test_a_word_for_never_is_told_the_integer_to_write(tmp_path: Path, written: str) -> None:
    """A session meant never to expire, written as a word: only its integer says that (it
    was told "bad duration" and the units alone)."""
    path = _write(tmp_path, f"[mqtt.limits]\nmax_session_expiry = '{written}'\n")
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    assert str(caught.value).endswith("; or write 4294967295, the most it takes, as an integer")


@pytest.mark.parametrize("written", ["x", "1x", "-49711d", "1.5s"])
def test_only_a_duration_past_100_years_is_told_the_integer_to_write(
    tmp_path: Path, written: str
) -> None:
    """max_session_expiry's largest is no duration: its integer is said to one too long to
    be a duration, or to a word for never, and to no other mistake (a mistyped, negative or
    fractional one)."""
    path = _write(tmp_path, f"[mqtt.limits]\nmax_session_expiry = '{written}'\n")
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    assert "the most it takes" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # "Cannot overwrite a value" named neither the key nor what to do: the line names it.
        (
            'fsync = "never"\nfsync = "always"',
            'Cannot overwrite a value (at line 2, column 17): fsync = "always" (a key set twice '
            "in one table: keep one of them)",
        ),
        (
            "[mqtt]\nsys_interval = 0\n[mqtt]",
            "Cannot declare ('mqtt',) twice (at line 3, column 6): [mqtt] (a table declared "
            "twice: put all its keys under one [table] header)",
        ),
        (
            "fsync = never",
            "Invalid value (at line 1, column 9): fsync = never (a string goes in double quotes: "
            'fsync = "never", sweep_interval = "30s")',
        ),
        (
            'data = "state',
            "Illegal character '\\n' (at line 1, column 14): data = \"state (a string not closed "
            'on its line: end it with its quote ("))',
        ),
        ("[mqtt", "Expected ']' at the end of a table declaration (at line 1, column 6): [mqtt"),
        # Python's and YAML's booleans: not strings to quote.
        (
            "keep_processed = True",
            "Invalid value (at line 1, column 18): keep_processed = True (a boolean is true or "
            "false, in lower case and without quotes)",
        ),
        (
            "polling = yes  # NFS",
            "Invalid value (at line 1, column 11): polling = yes  # NFS (a boolean is true or "
            "false, in lower case and without quotes)",
        ),
        # A duration without its quotes was told "one key = value a line".
        (
            "sweep_interval = 30s  # every half minute",
            "Expected newline or end of document after a statement (at line 1, column 20): "
            "sweep_interval = 30s  # every half minute (a value with a unit is a string, in "
            'double quotes: sweep_interval = "30s")',
        ),
        # A word TOML begins to read as a number (inf, nan) and stops in: log_level's default,
        # unquoted, was told "one key = value a line" where `debug` was told its quotes.
        (
            "log_level = info",
            "Expected newline or end of document after a statement (at line 1, column 16): "
            'log_level = info (a string goes in double quotes: log_level = "info")',
        ),
        (
            "dispatch = nano  # a typo",
            "Expected newline or end of document after a statement (at line 1, column 15): "
            'dispatch = nano  # a typo (a string goes in double quotes: dispatch = "nano")',
        ),
        # An INI file's comment, or C's: TOML's begin with #.
        (
            "; the root\ndata = 'd'",
            "Invalid statement (at line 1, column 1): ; the root (a comment begins with #: "
            "# the root)",
        ),
        (
            "// the root\ndata = 'd'",
            "Invalid statement (at line 1, column 1): // the root (a comment begins with #: "
            "# the root)",
        ),
        # YAML's colon, or a key of two words.
        (
            'fsync: "never"',
            "Expected '=' after a key in a key/value pair (at line 1, column 6): fsync: \"never\" "
            '(one key = value a line, the key one word: fsync = "never", max_connections = 5)',
        ),
        # A mosquitto.conf line ("name value"): what boxmq's file writes for it.
        (
            "allow_anonymous false",
            "Expected '=' after a key in a key/value pair (at line 1, column 17): "
            "allow_anonymous false (a mosquitto.conf line; this file is TOML, one key = value a "
            "line under its [table]: write allow_anonymous = false, in [security])",
        ),
        (
            "listener 8883 0.0.0.0",
            "Expected '=' after a key in a key/value pair (at line 1, column 10): listener 8883 "
            "0.0.0.0 (a mosquitto.conf line; this file is TOML, one key = value a line under its "
            '[table]: write [[mqtt.listener]] and below it port = 8883, host = "0.0.0.0")',
        ),
        (
            "persistence true",
            "Expected '=' after a key in a key/value pair (at line 1, column 13): persistence "
            "true (a mosquitto.conf line; this file is TOML, one key = value a line under its "
            "[table]: persistence is mosquitto.conf's; boxmq keeps every message on disk under "
            "data, always: leave it out)",
        ),
        # boxmq's own key, no mosquitto name: no word of mosquitto.
        (
            "fsync always",
            "Expected '=' after a key in a key/value pair (at line 1, column 7): fsync always "
            '(one key = value a line, the key one word: fsync = "never", max_connections = 5)',
        ),
        # A Windows path: a backslash begins an escape in a "..." string.
        (
            'data = "D:\\srv"',
            "Unescaped '\\' in a string (at line 1, column 13): data = \"D:\\srv\" (a "
            'backslash begins an escape in a "..." string: write it in single quotes, where it '
            "is plain, 'D:\\srv')",
        ),
        (
            # TOML ends a line at \n alone: a comment's U+2028 (or \x85) showed the line above
            '# the data\u2028folder\ndata = "a"\ndata = "b"',
            'Cannot overwrite a value (at line 3, column 11): data = "b" (a key set twice in '
            "one table: keep one of them)",
        ),
    ],
)
def test_a_toml_mistake_names_its_line_and_what_to_write(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text + "\n")
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: not valid TOML: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # A last line without its newline (an editor or a script that writes none): tomllib
        # says "at end of document", which named no line, and so no hint was given either.
        (
            'fsync = "never"\nfsync = "always"',
            'Cannot overwrite a value (at line 2, column 17): fsync = "always" (a key set twice '
            "in one table: keep one of them)",
        ),
        (
            'data = "state',
            "Illegal character '\\n' (at line 1, column 14): data = \"state (a string not closed "
            'on its line: end it with its quote ("))',
        ),
        (
            "fsync = never",
            "Invalid value (at line 1, column 9): fsync = never (a string goes in double quotes: "
            'fsync = "never", sweep_interval = "30s")',
        ),
        ("[mqtt", "Expected ']' at the end of a table declaration (at line 1, column 6): [mqtt"),
        (
            "x = [\n  5,",
            "Invalid value (at end of document): the file ends inside what line 1 begins: "
            "x = [ (an array not closed: end it with ])",
        ),
    ],
)
def test_a_toml_mistake_on_a_last_line_without_its_newline_is_named_as_with_one(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: not valid TOML: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Something opened and never closed: the file ends inside it, and the line that opened
        # it is named, not the end (which may be far below it).
        (
            'data = """state\nfsync = "never"\nsweep_interval = 2',
            "Unterminated string (at end of document): the file ends inside what line 1 "
            'begins: data = """state (a string not closed: end it with the quotes it began '
            "with)",
        ),
        (
            "fsync = 'never'\n[mqtt.limits]\nmax_connections = [\n  5,\n",
            "Invalid value (at end of document): the file ends inside what line 3 begins: "
            "max_connections = [ (an array not closed: end it with ])",
        ),
        (
            # Its items are not tried as beginnings: a parse of the lines above each of 3,000.
            "x = [\n" + "  5,\n" * 3000,
            "Invalid value (at end of document): the file ends inside what line 1 begins: "
            "x = [ (an array not closed: end it with ])",
        ),
        (
            "fsync = 'never'\nx = [\n  5\n# end",
            "Unclosed array (at end of document): the file ends inside what line 2 begins: "
            "x = [ (an array not closed: end it with ])",
        ),
    ],
)
def test_a_toml_value_never_closed_names_the_line_it_begins_on(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text + "\n")
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: not valid TOML: {message}"


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"config file .*none.toml does not exist"):
        load_config(tmp_path / "none.toml")


def test_the_limits_in_whole_seconds_take_a_duration_too(tmp_path: Path) -> None:
    text = '[mqtt.limits]\nmax_keepalive = "10m"\nmax_session_expiry = "30d"\n'
    limits = load_config(_write(tmp_path, text)).mqtt.limits
    assert (limits.max_keepalive, limits.max_session_expiry) == (600, 30 * 86400)
    assert isinstance(limits.max_keepalive, int)  # told to v5 clients in CONNACK, as integers


def test_a_security_file_that_does_not_exist_says_where_it_was_looked_for(tmp_path: Path) -> None:
    """A relative name is taken from the config file's folder, not from where serve ran."""
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "boxmq.toml"
    path.write_text('[security]\npassword_file = "passwd"\n')
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: security.password_file: password file {tmp_path}/etc/passwd does not exist "
        f'("passwd" is taken from {tmp_path}/etc, the config file\'s folder; make it with '
        f"`boxmq passwd {tmp_path}/etc/passwd USER`, or fix password_file)"
    )
    path.write_text(f'[security]\nacl_file = "{tmp_path}/acl"\n')
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    assert str(caught.value).endswith(" does not exist (write it, or fix acl_file)")


def test_a_missing_security_file_given_by_the_defaults_is_not_said_to_be_the_files(
    tmp_path: Path,
) -> None:
    # load_config's defaults (docs/configuration.md) name a password file the config file
    # does not: it is not "taken from the config file's folder", and the file wrote no "".
    defaults = ServeConfig(security=Security(password_file=tmp_path / "passwd"))
    with pytest.raises(InvalidArgument) as caught:
        load_config(_write(tmp_path, ""), defaults=defaults)
    assert str(caught.value).endswith(
        f"password file {tmp_path}/passwd does not exist "
        f"(make it with `boxmq passwd {tmp_path}/passwd USER`, or fix password_file)"
    )


def test_a_folder_is_no_config_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as caught:
        load_config(tmp_path)  # was "cannot read config file ...: Is a directory"
    assert str(caught.value) == (
        f"config file {tmp_path} is a folder: give --config the TOML file itself"
    )


def test_a_byte_order_mark_before_the_first_key_is_read_past(tmp_path: Path) -> None:
    path = tmp_path / "notepad.toml"
    path.write_bytes(b'\xef\xbb\xbffsync = "never"\n')
    assert load_config(path).fsync == "never"


def test_a_file_not_in_utf8_is_one_error_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('fsync = "never"\ndata = "d\u00e9p\u00f4t"\n'.encode("latin-1"))
    with pytest.raises(InvalidArgument) as caught:
        load_config(path)
    expected = f"{path}: not UTF-8 text (byte 0xe9 on line 2): save the file as UTF-8"
    assert str(caught.value) == expected


@pytest.mark.parametrize(
    ("key", "text", "retention"),
    [
        ("processed_retention", "", 86400.0),
        ("processed_retention", 'processed_retention = "forever"', None),
        ("processed_retention", "processed_retention = 90", 90.0),
        # expired/ is kept forever unless the file or the flag says otherwise.
        ("expired_retention", "", None),
        ("expired_retention", 'expired_retention = "forever"', None),
        ("expired_retention", 'expired_retention = "7d"', 604800.0),
    ],
)
def test_a_retention_as_serve_opens_the_root_with_it(
    tmp_path: Path, key: str, text: str, retention: float | None
) -> None:
    """The file's "forever" is the Python API's None: serve's sweeps never purge."""
    config = load_config(_write(tmp_path, text + "\n"))
    assert getattr(config, f"{key}_or_none") == retention
    flagged = (
        config.override(processed_retention=60.0)
        if key == "processed_retention"
        else config.override(expired_retention=60.0)
    )
    assert getattr(flagged, f"{key}_or_none") == 60.0


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, "fsync = 'never'\n[[mqtt.listener]]\nport = 1\n"))
    flagged = config.override(data="/elsewhere", fsync="always", sweep_interval=9.0)
    assert (flagged.data, flagged.fsync, flagged.sweep_interval) == (
        Path("/elsewhere"),
        "always",
        9.0,
    )
    assert flagged.mqtt.listeners == (Listener(port=1),)  # --mqtt replaces them at serve
    assert config.keep_processed is False  # a broker's default: acknowledged means gone
    assert config.override(keep_processed=True).keep_processed is True
    assert config.polling is False  # inotify unless told
    assert config.max_deliveries == 5
    assert config.override(polling=True).polling is True
    polled = load_config(_write(tmp_path, "polling = true\n"))
    assert polled.override(polling=False).polling is False
    assert config.override() == config  # nothing typed, nothing changed
    with pytest.raises(InvalidArgument, match="fsync 'maybe'"):
        config.override(fsync="maybe")


LIMIT_FIELDS = dataclasses.fields(Limits)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            f.name: (
                st.floats(min_value=0.001, max_value=1e6)
                if isinstance(f.default, float)
                else st.integers(
                    min_value=LIMITS_LOWEST.get(f.name, 1),
                    max_value=min(2**31, LIMITS_HIGHEST.get(f.name, 2**31)),
                )
            )
            for f in LIMIT_FIELDS
        },
    )
)
def test_any_limits_table_reads_back_as_those_limits(limits: dict[str, Any]) -> None:
    text = "[mqtt.limits]\n" + "".join(f"{k} = {v!r}\n" for k, v in limits.items())
    with tempfile.TemporaryDirectory() as folder:  # Hypothesis examples cannot share tmp_path
        parsed = load_config(_write(Path(folder), text))
    assert parsed.mqtt.limits == dataclasses.replace(Limits(), **limits)


def _self_signed(key: Path, cert: Path) -> None:
    """A P-256 key at `key` and a certificate for localhost it signs at `cert` (openssl)."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key),
         "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_a_tls_listener_gets_a_context_and_port_8883(tmp_path: Path) -> None:
    _self_signed(tmp_path / "k.pem", tmp_path / "c.pem")
    path = _write(tmp_path, "[[mqtt.listener]]\ntls = { cert = 'c.pem', key = 'k.pem' }\n")
    [listener] = load_config(path).mqtt.listeners
    assert listener.port == 8883
    assert listener.ssl is not None
    bad = _write(tmp_path, "[[mqtt.listener]]\ntls = { cert = 'k.pem', key = 'k.pem' }\n")
    with pytest.raises(InvalidArgument, match=r"mqtt.listener\[1\].tls.cert: TLS certificate"):
        load_config(bad)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_a_tls_key_other_users_may_read_is_warned_of_once_with_its_chmod(tmp_path: Path) -> None:
    """A private key any user of the machine could read (0644: pasted into an editor, or
    written with `cat >`, under umask 022) let them pass for the broker, and nothing said so;
    ssh refuses such a key, serve warns at start, once a file."""
    _self_signed(tmp_path / "k.pem", tmp_path / "c.pem")
    key = tmp_path / "k.pem"
    two = "[[mqtt.listener]]\nport = 0\ntls = { cert = 'c.pem', key = 'k.pem' }\n" * 2
    path = _write(tmp_path, two)
    for mode, loose in ((0o644, "0644"), (0o640, "0640"), (0o604, "0604")):
        key.chmod(mode)
        assert security_warnings(load_config(path).mqtt) == [
            f"the TLS key file {key} has mode {loose}: users of this machine other than its "
            f"owner may read it (chmod 0600 {key})"
        ]
    key.chmod(0o660)
    [line] = security_warnings(load_config(path).mqtt)
    assert line.endswith(f"may read and change it (chmod 0600 {key})")
    key.chmod(0o600)
    assert security_warnings(load_config(path).mqtt) == []
    if os.geteuid() == 0:  # a key of another user, read through a group of this process
        os.chown(key, 65534, os.getegid())
        key.chmod(0o640)
        assert security_warnings(load_config(path).mqtt) == []
        os.chown(key, 0, os.getegid())
    # The key in the certificate's file: that file is the key's.
    (tmp_path / "both.pem").write_text(key.read_text() + (tmp_path / "c.pem").read_text())
    (tmp_path / "both.pem").chmod(0o644)
    both = _write(tmp_path, "[[mqtt.listener]]\ntls = { cert = 'both.pem' }\n")
    [line] = security_warnings(load_config(both).mqtt)
    assert line.startswith(f"the TLS key file {tmp_path / 'both.pem'} has mode 0644")
    # Replaced by --mqtt, the TLS listener is not opened: its key is nobody's business.
    plain = dataclasses.replace(load_config(both).mqtt, listeners=(Listener(),))
    assert security_warnings(plain) == []


@pytest.mark.parametrize(
    ("template", "warned"),
    [
        ("reply/%c/", None),
        ("reply/%u/%c/", None),
        ("replies/", None),
        (
            "reply/%C/",
            "response_information 'reply/%C/' holds %C, which is taken as it is: only %c "
            "(client id) and %u (user name) are filled in, so every client is told the same "
            "response topics and may read the others' answers",
        ),
        ("reply/%c/%x", "holds %x, which is taken as it is: only %c"),
    ],
)
def test_a_response_information_placeholder_that_is_none_is_warned_of(
    tmp_path: Path, template: str, warned: str | None
) -> None:
    """`reply/%C/` (a capital) was told to every client as it is, the same topic for all, with
    no word at start."""
    path = _write(tmp_path, f"[mqtt]\nresponse_information = {template!r}\n")
    warnings = [w for w in security_warnings(load_config(path).mqtt) if "response_inf" in w]
    if warned is None:
        assert warnings == []
    else:
        assert len(warnings) == 1
        assert warned in warnings[0]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_a_tls_error_names_the_key_of_the_file_at_fault(tmp_path: Path) -> None:
    for name in ("a", "b"):
        _self_signed(tmp_path / f"{name}.key", tmp_path / f"{name}.crt")
    (tmp_path / "junk.pem").write_text("not pem\n")
    cases = [
        ("cert = 'none.crt', key = 'a.key'", "tls.cert: TLS certificate file"),
        ("cert = 'junk.pem', key = 'a.key'", "tls.cert: TLS certificate file"),
        ("cert = 'a.crt', key = 'none.key'", "tls.key: TLS key file"),
        ("cert = 'a.crt', key = 'junk.pem'", "tls.key: TLS key file"),
        ("cert = 'a.crt', key = 'b.key'", "tls.key: TLS key"),  # not a.crt's key
        ("cert = 'a.crt'", "tls.key: no TLS key: set `key`"),  # and none in the certificate's file
        ("cert = 'a.crt', key = 'a.key', ca = 'none.pem'", "tls.ca: TLS CA file"),
        ("cert = 'a.crt', key = 'a.key', ca = 'junk.pem'", "tls.ca: TLS CA file"),
    ]
    for tls, message in cases:
        path = _write(tmp_path, f"[[mqtt.listener]]\ntls = {{ {tls} }}\n")
        with pytest.raises(InvalidArgument) as caught:
            load_config(path)
        assert f"{path}: mqtt.listener[1].{message}" in str(caught.value), tls


def test_the_example_in_the_repository_loads() -> None:
    config = load_config(REPO / "boxmq.example.toml")
    assert config.mqtt.listeners == (Listener("127.0.0.1", 1883),)
    assert config.mqtt.limits == Limits()  # it says "the values shown are the defaults"
    assert config.exactly_once == ExactlyOnceLimits()  # and so does it here
    defaults = ServeConfig(data=REPO / "data")  # "./data", from the file's folder
    assert config.listeners_from_file  # it lists one: a bind error names mqtt.listener[1]
    assert config.data_from_file  # it sets data: an error of the root names that key
    assert not config.override(data="elsewhere").data_from_file  # --data typed: that flag
    unlisted = dataclasses.replace(
        config, mqtt=ServeConfig().mqtt, listeners_from_file=False, data_from_file=False
    )
    assert dataclasses.replace(unlisted, source=None) == defaults


def _names(settings: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(settings)}


def test_the_example_shows_every_key_of_the_settings() -> None:
    """It says it shows every key; a field added to a settings dataclass without it (as
    max_queued_bytes was) fails here."""
    text = (REPO / "boxmq.example.toml").read_text()
    document = tomllib.loads(text)
    # The tables whose values it says are the defaults: each key, set, not commented out.
    assert set(document["mqtt"]["limits"]) == _names(Limits)
    assert set(document["exactly_once"]) == _names(ExactlyOnceLimits) - {"trusted_sources"}
    assert "\n# trusted_sources = [" in text  # no default to write: shown commented out
    # The others: each key at least commented out ("# key = ..."). The fields left out are
    # no key: what the file is read into, tables checked below, and what [security] sets.
    written = set(re.findall(r"^(?:# )?(\w+) *=", text, re.MULTILINE))
    not_keys = {
        "ServeConfig": {"source", "listeners_from_file", "group_dispatch", "exactly_once"}
        | {"security", "mqtt", "fsync_interval_from_file", "file_sets_nothing"}
        | {"data_from_file"},
        "MqttSettings": {"listeners", "limits", "authenticator", "authorizer"},
        "Listener": {"ssl", "identity_as_username", "tls_key"},  # written tls = {...}, with it
        "Security": set(),
    }
    for settings in (ServeConfig, MqttSettings, Listener, Security):
        name = settings.__name__
        missing = _names(settings) - not_keys[name] - written
        assert not missing, f"{name}: {sorted(missing)} not in boxmq.example.toml"
    tables = ["[share_groups.", "[mqtt]", "[[mqtt.listener]]", "[mqtt.limits]", "[security]"]
    for table in [*tables, "[exactly_once]", "tls = {", "identity_as_username = true"]:
        assert table in text


def _serve_options() -> set[str]:
    """The option strings `boxmq serve` takes (the common ones too)."""
    parser = cli_parser.parser()
    (commands,) = [a for a in parser._actions if isinstance(a, cli_parser.Commands)]
    serve = commands.parser("serve")
    return {option for action in serve._actions for option in action.option_strings}


def _flags_over_the_file() -> set[str]:
    """The flags of serve that win over a key of the file: each that `override` applies, and
    the listeners' two, which replace the file's [[mqtt.listener]] tables."""
    names = inspect.signature(ServeConfig.override).parameters
    return {"--" + name.replace("_", "-") for name in names if name != "self"} | {
        "--mqtt",
        "--no-mqtt",
    }


def test_the_example_names_the_flags_that_win_over_it() -> None:
    """Its first lines listed the flags over the file without --sys-interval and
    --max-deliveries, both added since: each it names is a flag of serve, and it names all."""
    text = (REPO / "boxmq.example.toml").read_text()
    header = text.partition("\n\n")[0]  # the comment above the first key
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", header)) - {"--config"}
    assert named <= _serve_options()
    assert named == _flags_over_the_file()
    assert "-v over log_level" in header.replace("\n# ", " ")


def test_the_docs_order_of_precedence_names_the_flags_that_win_over_the_file() -> None:
    """docs/configuration.md's list lacked --sys-interval and --max-deliveries, and said
    nothing of which of the file and $BOXMQ_DATA wins."""
    text = (REPO / "docs" / "configuration.md").read_text()
    section = text.partition("## Order of precedence")[2].partition("\n2. ")[0]
    named = set(re.findall(r"`(--[a-z][a-z-]*)", section))
    assert named - {"--no-keep-processed", "--no-polling"} == _flags_over_the_file()
    assert named <= _serve_options()
    assert "`-v`" in section


def test_the_file_wins_over_boxmq_data_and_a_typed_flag_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What docs/configuration.md's order of precedence says, as serve reads its arguments."""
    from boxmq.cli_serve import serve_config

    path = _write(tmp_path, 'data = "from-file"\nmax_deliveries = 3\n[mqtt]\nsys_interval = 5\n')
    monkeypatch.setenv("BOXMQ_DATA", str(tmp_path / "from-env"))
    words = ["serve", "--config", str(path)]
    config = serve_config(cli_parser.parser().parse_args(words))
    assert (config.data, config.max_deliveries) == (tmp_path / "from-file", 3)
    typed = [*words, "--max-deliveries", "0", "--sys-interval", "1s", "--data", "typed"]
    config = serve_config(cli_parser.parser().parse_args(typed))
    assert (config.data, config.max_deliveries) == (Path("typed"), None)
    assert config.mqtt.sys_interval == 1
    config = serve_config(cli_parser.parser().parse_args(["serve"]))
    assert config.data == tmp_path / "from-env"  # no file, no flag: the environment


def test_each_mosquitto_name_hinted_is_no_key_of_boxmq_and_names_one() -> None:
    """A mosquitto.conf name that is boxmq's key too is told its table (`_homes`), never this
    hint; each hint names a key the file takes."""
    homes = config_module._homes()
    for name, hint in config_module.MOSQUITTO_KEYS.items():
        assert name not in homes, name
        named = re.fullmatch(rf"{name} is mosquitto.conf's; boxmq names it (\w+)[ ,].*", hint)
        assert named is None or named[1] in homes, hint
    assert all(name in homes for name in config_module._MOSQUITTO_SHARED)


def test_the_start_up_line_of_the_acl_counts_each_part_of_it(tmp_path: Path) -> None:
    """Rules for clients without a user name are counted too: an ACL of those alone read
    '0 user section(s), 0 pattern(s)', as if it held nothing."""
    acl = tmp_path / "acl"
    acl.write_text("topic read public/#\ntopic write sensors/#\n")
    path = _write(tmp_path, '[security]\nacl_file = "acl"\n')
    [_, _, line] = describe_security(*_served(load_config(path)))
    assert line == (
        f"authorization: {acl} (2 rule(s) for clients without a user name, 0 user section(s), "
        "0 pattern(s)); anything not allowed is refused"
    )
    acl.write_text("topic read public/#\nuser alice\ntopic alice/#\npattern read %c/in\n")
    [_, _, line] = describe_security(*_served(load_config(path)))
    assert "(1 rule(s) for clients without a user name, 1 user section(s), 1 pattern(s))" in line


def test_the_start_up_line_names_the_listeners_that_take_the_user_name_from_a_certificate(
    tmp_path: Path,
) -> None:
    """A listener with identity_as_username asks no password: the start-up line says so, where
    it read as if every client were checked against the password file."""
    config = load_config(_write(tmp_path, ""))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    listeners = (
        Listener(port=1883),
        Listener(port=8883, ssl=context, identity_as_username=True),
    )
    config = dataclasses.replace(config, mqtt=dataclasses.replace(config.mqtt, listeners=listeners))
    [_, who, _] = describe_security(config, config.mqtt)
    assert who.endswith(
        "; on mqtts://127.0.0.1:8883: the user name is the client certificate's Common Name, "
        "and no password is asked"
    )
    [_, plain, _] = describe_security(*_served(load_config(_write(tmp_path, ""))))
    assert "certificate" not in plain
    # `--mqtt 127.0.0.1:1883` replaced the file's listeners: its 8883 was still named
    flags = argparse.Namespace(no_mqtt=False, mqtt=[("127.0.0.1", 1883)])
    [_, who, _] = describe_security(config, mqtt_settings(flags, config.mqtt))
    assert "certificate" not in who


def test_an_acl_by_user_name_without_a_password_file_is_warned_of(tmp_path: Path) -> None:
    """Nobody checks the user name a client claims: the ACL's user sections are anyone's."""
    (tmp_path / "by_name").write_text("user alice\ntopic alice/#\n")
    (tmp_path / "by_pattern").write_text("pattern read users/%u/inbox\n")
    (tmp_path / "by_client").write_text("pattern readwrite devices/%c/#\n")
    warned = {}
    for acl in ("by_name", "by_pattern", "by_client"):
        path = _write(tmp_path, f'[security]\nacl_file = "{acl}"\n')
        warned[acl] = security_warnings(load_config(path).mqtt)
    assert [bool(lines) for lines in warned.values()] == [True, True, False]
    assert "set [security] password_file" in warned["by_name"][0]
    set_password(tmp_path / "passwd", "alice", b"wonder")
    checked = _write(tmp_path, '[security]\nacl_file = "by_name"\npassword_file = "passwd"\n')
    assert security_warnings(load_config(checked).mqtt) == []


def test_a_password_file_without_users_that_lets_nobody_in_is_warned_of(tmp_path: Path) -> None:
    (tmp_path / "passwd").write_text("# users, none yet\n")
    (tmp_path / "passwd").chmod(0o600)
    path = _write(tmp_path, '[security]\npassword_file = "passwd"\n')
    [line] = security_warnings(load_config(path).mqtt)
    assert f"the password file {tmp_path / 'passwd'} has no user" in line
    assert "no client can connect" in line
    anonymous = _write(tmp_path, '[security]\npassword_file = "passwd"\nallow_anonymous = true\n')
    assert security_warnings(load_config(anonymous).mqtt) == []  # anonymous clients get in
    set_password(tmp_path / "passwd", "alice", b"wonder")
    assert security_warnings(load_config(path).mqtt) == []


def test_a_password_file_others_may_read_and_files_they_may_change_are_warned_of(
    tmp_path: Path,
) -> None:
    """Its hashes let anyone who reads them guess passwords offline, and a file others may
    write lets them add a user or a right at the next start: mosquitto warns too."""
    set_password(tmp_path / "passwd", "alice", b"wonder")  # 0600
    (tmp_path / "acl").write_text("user alice\ntopic alice/#\n")
    (tmp_path / "acl").chmod(0o644)  # anyone may read an ACL
    path = _write(tmp_path, '[security]\npassword_file = "passwd"\nacl_file = "acl"\n')
    assert security_warnings(load_config(path).mqtt) == []
    (tmp_path / "passwd").chmod(0o644)
    (tmp_path / "acl").chmod(0o664)
    passwd, acl = tmp_path / "passwd", tmp_path / "acl"
    assert security_warnings(load_config(path).mqtt) == [
        f"the password file {passwd} has mode 0644: users of this machine other than its "
        f"owner may read it (chmod 0640 {passwd})",
        f"the ACL file {acl} has mode 0664: users of this machine other than its owner may "
        f"change it (chmod 0644 {acl})",
    ]
    (tmp_path / "passwd").chmod(0o666)
    [line, _] = security_warnings(load_config(path).mqtt)
    assert f"may read and change it (chmod 0640 {passwd})" in line
    (tmp_path / "passwd").chmod(0o640)  # a group the broker runs in
    (tmp_path / "acl").chmod(0o640)
    assert security_warnings(load_config(path).mqtt) == []


def test_an_acl_section_of_a_user_the_password_file_lacks_is_warned_of(tmp_path: Path) -> None:
    """A misspelt `user alcie`: alice is refused what it allows her, and nothing says why."""
    set_password(tmp_path / "passwd", "alice", b"wonder")
    (tmp_path / "acl").write_text("user alice\ntopic alice/#\n\nuser alcie\ntopic read news/#\n")
    path = _write(tmp_path, '[security]\npassword_file = "passwd"\nacl_file = "acl"\n')
    [line] = security_warnings(load_config(path).mqtt)
    assert line == (
        f"{tmp_path / 'acl'}: the section of user 'alcie' (line 5) names no user of the "
        f"password file {tmp_path / 'passwd'}: no client gets its rules (check the name)"
    )
    set_password(tmp_path / "passwd", "alcie", b"x")
    assert security_warnings(load_config(path).mqtt) == []


def test_user_names_from_client_certificates_are_not_warned_of_as_unknown(
    tmp_path: Path,
) -> None:
    """With a listener that takes the user name from the client certificate's Common Name
    (identity_as_username), the start-up log said of a device's ACL section that "no client
    gets its rules" (its certificate's client did), of an empty password file that "no client
    can connect" (every device could), and, without a password file, that "nobody checks the
    user name a client claims" (the listener's CA does)."""
    (tmp_path / "passwd").write_text("")
    (tmp_path / "passwd").chmod(0o600)
    (tmp_path / "acl").write_text("user sensor-7\ntopic sensors/7/#\n")
    (tmp_path / "acl").chmod(0o600)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    by_certificate = Listener(port=8883, ssl=context, identity_as_username=True)

    def warned(security: str, *listeners: Listener) -> list[str]:
        mqtt = load_config(_write(tmp_path, f"[security]\n{security}")).mqtt
        return security_warnings(dataclasses.replace(mqtt, listeners=listeners))

    with_passwords = 'password_file = "passwd"\nacl_file = "acl"\n'
    assert warned(with_passwords, by_certificate) == []
    assert warned('acl_file = "acl"\n', by_certificate) == []
    # A listener that asks for passwords: those clients are what the warnings are about.
    plain = Listener(port=1883)
    assert len(warned(with_passwords, plain)) == 2  # no user; a section of nobody
    [claimed] = warned('acl_file = "acl"\n', plain, by_certificate)
    assert "nobody checks the user name a client claims" in claimed


def test_acl_rules_for_clients_without_a_user_name_that_none_may_be_are_warned_of(
    tmp_path: Path,
) -> None:
    """Rules at the top of the file read as "for everyone"; they are for clients without a
    user name only, and with allow_anonymous = false those are refused: they allow nothing."""
    set_password(tmp_path / "passwd", "alice", b"wonder")
    (tmp_path / "acl").write_text("# everyone\ntopic read public/#\nuser alice\ntopic alice/#\n")
    path = _write(tmp_path, '[security]\npassword_file = "passwd"\nacl_file = "acl"\n')
    [line] = security_warnings(load_config(path).mqtt)
    assert line == (
        f"{tmp_path / 'acl'}: the 1 rule(s) before the first `user` line (line 2) are for "
        "clients without a user name, which are refused (allow_anonymous = false): no client "
        "gets them (for rules every client gets, write `pattern` instead of `topic`)"
    )
    anonymous = _write(
        tmp_path,
        '[security]\npassword_file = "passwd"\nacl_file = "acl"\nallow_anonymous = true\n',
    )
    assert security_warnings(load_config(anonymous).mqtt) == []


def test_a_topic_rule_with_a_placeholder_only_patterns_fill_in_is_warned_of(
    tmp_path: Path,
) -> None:
    """`topic readwrite users/%u/#` in alice's section allows the topic level "%u", not
    "alice": she is refused her own topics, and nothing said why."""
    set_password(tmp_path / "passwd", "alice", b"wonder")
    (tmp_path / "acl").write_text(
        "user alice\ntopic readwrite users/%u/#\ntopic read news/#\ntopic deny devices/%c\n"
        "pattern read inbox/%u\n"
    )
    path = _write(tmp_path, '[security]\npassword_file = "passwd"\nacl_file = "acl"\n')
    assert security_warnings(load_config(path).mqtt) == [
        f"{tmp_path / 'acl'}:2: `topic readwrite users/%u/#` is taken literally: only "
        "`pattern` lines fill in %u (user name) and %c (client id); write "
        "`pattern readwrite users/%u/#` if that was meant",
        f"{tmp_path / 'acl'}:4: `topic deny devices/%c` is taken literally: only `pattern` "
        "lines fill in %u (user name) and %c (client id); write `pattern deny devices/%c` if "
        "that was meant",
    ]
    (tmp_path / "acl").write_text("topic read users/%u/#\n")  # without a password file too
    bare = _write(tmp_path, '[security]\nacl_file = "acl"\n')
    [line] = security_warnings(load_config(bare).mqtt)
    assert line.startswith(f"{tmp_path / 'acl'}:1: `topic read users/%u/#` is taken literally")


def test_a_listener_is_logged_as_a_url_an_ipv6_address_in_brackets() -> None:
    """`mqtt://::1:1883` leaves the port to be guessed from the address (RFC 3986 §3.2.2)."""
    assert str(Listener("::1", 1883)) == "mqtt://[::1]:1883"
    assert str(Listener("0.0.0.0", 1884)) == "mqtt://0.0.0.0:1884"
    assert listener_url("::", 8883, tls=True) == "mqtts://[::]:8883"
    assert listener_url("broker.example", 8883, tls=True) == "mqtts://broker.example:8883"


def test_a_sys_interval_of_0_turns_the_sys_topics_off_from_the_file_or_the_flag(
    tmp_path: Path,
) -> None:
    config = load_config(_write(tmp_path, "[mqtt]\nsys_interval = 0\n"))
    assert config.mqtt.sys_interval == 0.0
    assert config.override(sys_interval=5.0).mqtt.sys_interval == 5.0  # the flag wins
    assert ServeConfig().mqtt.sys_interval == 10.0
    assert ServeConfig().override(sys_interval=0.0).mqtt.sys_interval == 0.0


def test_an_fsync_interval_without_the_interval_policy_is_warned_of(tmp_path: Path) -> None:
    """`fsync_interval = "5s"` with fsync left "always" (or "never") was silently ignored:
    a user who meant to flush every 5 s flushed every write, and nothing said why."""
    path = _write(tmp_path, 'fsync_interval = "5s"\n')
    assert load_config(path).unused_settings() == [
        f'fsync_interval in {path} is ignored: only fsync = "interval" uses it, and fsync '
        'is "always"'
    ]
    assert load_config(path).override(fsync="interval").unused_settings() == []  # --fsync
    path.write_text('fsync = "interval"\nfsync_interval = "5s"\n')
    assert load_config(path).unused_settings() == []
    path.write_text('fsync = "never"\n')
    assert load_config(path).unused_settings() == []  # the interval not given
