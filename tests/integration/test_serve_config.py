"""`boxmq serve --config FILE`: the file chooses the root, flags typed by the user win."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.output import read_line
from harness.ports import free_port, free_ports
from harness.stopping import stop
from tests.diskfull import small_disk
from tests.processes import dead_token

import boxmq
from boxmq.model import DELIVERY_COUNT, ConsumerId, PropertyType
from boxmq.mqtt.passwords import set_password
from boxmq.mqtt.server import bind_listeners, close_sockets
from boxmq.mqtt.settings import Listener
from boxmq.store.names import Lock, decode, encode, locked_name


def _serve_refused(config: Path, cwd: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run `boxmq serve --config CONFIG FLAGS...`, which is expected to exit at once
    (`--no-mqtt`: a serve the old code let start holds no port another test may want)."""
    return _boxmq("serve", "--config", str(config), *flags, cwd=cwd)


def _boxmq(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `boxmq ARGS...` (a serve expected to exit at once), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "boxmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def _serve_until_ready(*args: str, cwd: Path) -> str:
    """Start `boxmq serve`, wait for its "ready" log line, stop it; return its log."""
    server = subprocess.Popen(
        [sys.executable, "-m", "boxmq.cli", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    assert server.stderr is not None
    lines = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            line = read_line(server.stderr, deadline - time.monotonic())
            if not line:
                break
            lines.append(line)
            if "ready" in line:
                break
    finally:
        stop(server, seconds=30)
        rest = server.communicate()[1]  # the rest of its log, to its end
    return "".join(lines) + rest


def test_the_config_file_chooses_the_root_and_a_typed_flag_wins(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "boxmq.toml"
    config.parent.mkdir()
    config.write_text('data = "../state"\nfsync = "never"\nsweep_interval = "50ms"\n')
    # On a free port: the default one, 1883, held by another broker of the machine or a test
    # beside this one, stopped the serve before it was ready.
    free = ("--mqtt", "127.0.0.1:0")
    log = _serve_until_ready("serve", "--config", str(config), *free, cwd=tmp_path)
    assert (tmp_path / "state").is_dir()  # relative to the config file's folder
    assert "fsync=never" in log
    assert "sweeping every 50ms" in log  # as the config wrote it, not 0.05s
    assert "acknowledge there is deleted after 1d" in log  # the default, not 86400s
    assert not (tmp_path / "data").exists()  # the default root was not used

    flags = ("--data", str(tmp_path / "flag"), "--fsync", "interval", "serve", "--config")
    log = _serve_until_ready(*flags, str(config), "--sweep-interval", "2s", *free, cwd=tmp_path)
    assert (tmp_path / "flag").is_dir()
    assert "fsync=interval" in log
    assert "sweeping every 2s" in log


def test_a_bad_config_file_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "boxmq.toml"
    config.write_text("[mqtt.limits]\nmax_conections = 5\n")
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        f"boxmq serve: {config}: mqtt.limits.max_conections: unknown key: did you mean "
        "max_connections?\n"
    )
    assert not (tmp_path / "data").exists()


def test_an_empty_list_of_listeners_is_refused_not_the_default_opened(tmp_path: Path) -> None:
    """`listener = []` reads as "no MQTT"; serve opened the default 127.0.0.1:1883 instead."""
    config = tmp_path / "boxmq.toml"
    config.write_text("[mqtt]\nlistener = []\n")
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        f"boxmq serve: {config}: mqtt.listener: an empty list: leave it out for the default, "
        "127.0.0.1:1883, or run serve with --no-mqtt for none\n"
    )
    assert not (tmp_path / "data").exists()


def test_an_integer_written_as_a_string_or_a_float_is_told_how_to_write_it(
    tmp_path: Path,
) -> None:
    """`port = "1883"` and `port = 1883.0` look right to a person; "expected an integer, got a
    string" left them to find the quotes or the point."""
    config = tmp_path / "boxmq.toml"
    for value, says in [
        ('"1883"', "got a string ('1883'): write 1883, without quotes"),
        ("1883.0", "got a number (1883.0): write 1883, without a decimal point or exponent"),
    ]:
        config.write_text(f"[[mqtt.listener]]\nport = {value}\n")
        done = _serve_refused(config, tmp_path)
        assert done.returncode == 1
        assert done.stderr == (
            f"boxmq serve: {config}: mqtt.listener[1].port: expected an integer, {says}\n"
        )


def test_listeners_of_the_file_that_a_flag_replaces_are_named_in_the_log(tmp_path: Path) -> None:
    """`--mqtt` (or `--no-mqtt`) typed to try something took away every listener of the
    file, a TLS one too, and the log showed only the new one."""
    config = tmp_path / "boxmq.toml"
    port = free_port()
    config.write_text(f'data = "data"\n[[mqtt.listener]]\nport = {port}\n')
    log = _serve_until_ready(
        "serve", "--config", str(config), "--mqtt", "127.0.0.1:0", cwd=tmp_path
    )
    assert (
        f"INFO boxmq.serve: --mqtt replaces the [[mqtt.listener]] tables of {config}: "
        f"mqtt://127.0.0.1:{port} not opened\n"
    ) in log
    log = _serve_until_ready("serve", "--config", str(config), "--no-mqtt", cwd=tmp_path)
    assert f"--no-mqtt replaces the [[mqtt.listener]] tables of {config}" in log
    log = _serve_until_ready("serve", "--config", str(config), cwd=tmp_path)
    assert "replaces" not in log


def test_serve_without_mqtt_says_nothing_of_mqtt_clients(tmp_path: Path) -> None:
    """`--no-mqtt` logged "authentication: none (no password_file): any client may connect",
    and the warnings of an ACL no client can meet, for a door that is not opened."""
    (tmp_path / "acl").write_text("user alice\ntopic alice/#\n")
    config = tmp_path / "boxmq.toml"
    config.write_text('data = "data"\n[security]\nacl_file = "acl"\n')
    log = _serve_until_ready("serve", "--config", str(config), "--no-mqtt", cwd=tmp_path)
    assert f"INFO boxmq.serve: config: {config}\n" in log
    for mqtt_only in ("authentication", "authorization", "password_file", "boxmq.mqtt"):
        assert mqtt_only not in log
    flags = ("serve", "--config", str(config), "--mqtt", "127.0.0.1:0")
    log = _serve_until_ready(*flags, cwd=tmp_path)
    assert "authentication: none" in log
    assert "any client may take any user's rights" in log


def test_the_start_up_log_says_who_trusted_sources_lets_send_exactly_once(
    tmp_path: Path,
) -> None:
    """`[exactly_once] trusted_sources` in the file refused every other sender's QoS 2
    PUBLISHes, and the start-up log, which says who may connect and what they may do, did
    not say that a list was in force, nor that `[]` let no one send."""
    config = tmp_path / "boxmq.toml"
    said = "INFO boxmq.serve: exactly once: "
    served = ("serve", "--config", str(config), "--mqtt", "127.0.0.1:0")
    config.write_text('data = "data"\n[exactly_once]\ntrusted_sources = ["mqtt:a", "b@c.d"]\n')
    log = _serve_until_ready(*served, cwd=tmp_path)
    assert log.count(said) == 1, log
    assert (
        f"{said}trusted_sources lists 2 sender(s); any other sender's QoS 2 or assured "
        "messages are refused\n"
    ) in log
    config.write_text('data = "data"\n[exactly_once]\ntrusted_sources = []\n')
    log = _serve_until_ready(*served, cwd=tmp_path)
    assert log.count(said) == 1, log
    assert (
        f"{said}trusted_sources is [], no one may send: every QoS 2 or assured message is refused\n"
    ) in log
    # No door (no MQTT, no XMPP): no sender for the list to refuse
    log = _serve_until_ready("serve", "--config", str(config), "--no-mqtt", cwd=tmp_path)
    assert said not in log
    config.write_text('data = "data"\n')  # anyone: said by no line, as before
    log = _serve_until_ready(*served, cwd=tmp_path)
    assert said not in log


@pytest.mark.parametrize(("entry", "index"), [("*", 1), ("alice@*.example.org", 2)])
def test_a_wildcard_in_trusted_sources_is_refused_not_taken_for_a_sender(
    tmp_path: Path, entry: str, index: int
) -> None:
    """`trusted_sources = ["*"]`, written to let anyone send, was served as a JID of domain
    "*", which no XMPP server stamps: every QoS 2 and assured message was refused."""
    listed = ", ".join(f'"{e}"' for e in [*["mqtt:billing"] * (index - 1), entry])
    config = tmp_path / "boxmq.toml"
    config.write_text(f"[exactly_once]\ntrusted_sources = [{listed}]\n")
    # --no-mqtt: the old code served it, on no port another test or broker may hold.
    done = _serve_refused(config, tmp_path, "--no-mqtt")
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"boxmq serve: {config}: exactly_once.trusted_sources[{index}]: {entry!r} holds a '*', "
        "which no JID's domain holds: the list takes no wildcards (leave trusted_sources out "
        "to let anyone send exactly once, or list each sender)\n"
    )
    assert not (tmp_path / "data").exists()


def test_a_listener_other_machines_reach_without_a_password_file_is_warned_of(
    tmp_path: Path,
) -> None:
    """`--mqtt 0.0.0.0:1883` to let a device in, and the broker was open to anyone on the
    network, every topic readable and writable, with nothing in the log to say so."""
    data = str(tmp_path / "data")
    log = _serve_until_ready("serve", "--data", data, "--mqtt", "0.0.0.0:0", cwd=tmp_path)
    [url] = re.findall(r"MQTT listening on (\S+)", log)  # the port bound, not 0
    assert (
        f"WARNING boxmq.mqtt: {url}: other machines may reach this, and there is "
        "no password_file: any client may connect there, and read and publish every topic (set "
        "[security] password_file, or listen on 127.0.0.1)\n"
    ) in log
    for local in ("127.0.0.1:0", "localhost:0"):
        log = _serve_until_ready("serve", "--data", data, "--mqtt", local, cwd=tmp_path)
        assert "other machines may reach" not in log
    set_password(tmp_path / "passwd", "alice", b"wonder")
    config = tmp_path / "boxmq.toml"
    config.write_text('[security]\npassword_file = "passwd"\n')
    flags = ("serve", "--data", data, "--config", str(config), "--mqtt", "0.0.0.0:0")
    assert "other machines may reach" not in _serve_until_ready(*flags, cwd=tmp_path)


def _self_signed_certificate(folder: Path) -> None:
    """server.crt and its unencrypted key, server.key, in `folder`, by the openssl CLI."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", str(folder / "server.key"), "-out", str(folder / "server.crt")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_a_listener_that_requires_client_certificates_is_not_called_open(tmp_path: Path) -> None:
    """Its clients are those its CA signed: no password file needed for it to be closed.
    One that takes the user name from the certificate is said to; not once `--mqtt`
    replaced it, which the start-up line went on naming."""
    _self_signed_certificate(tmp_path)
    tls = 'cert = "server.crt", key = "server.key", ca = "server.crt"'
    config = tmp_path / "boxmq.toml"
    config.write_text(
        f'data = "data"\n[[mqtt.listener]]\nhost = "0.0.0.0"\nport = 0\n'
        f"tls = {{ {tls}, identity_as_username = true }}\n"
        f'[[mqtt.listener]]\nhost = "0.0.0.0"\nport = 0\n'
        f"tls = {{ {tls}, require_client_cert = false }}\n"
    )
    log = _serve_until_ready("serve", "--config", str(config), cwd=tmp_path)
    [warned] = [line for line in log.splitlines() if "other machines may reach" in line]
    second = re.findall(r"MQTT listening on (\S+)", log)[1]
    assert f"WARNING boxmq.mqtt: {second}: other machines" in warned  # only the second
    by_certificate = "the user name is the client certificate's Common Name"
    assert by_certificate in log
    flags = ("serve", "--config", str(config), "--mqtt", "127.0.0.1:0")
    assert by_certificate not in _serve_until_ready(*flags, cwd=tmp_path)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_a_certificate_in_der_form_is_told_how_to_convert_it(tmp_path: Path) -> None:
    """A certificate exported in DER (binary; a Windows `.cer`, a `.der`) was refused with
    "holds no PEM certificate": true, but the operator holding a certificate did not learn
    that it was one, nor the openssl line that makes the PEM file boxmq reads."""
    _self_signed_certificate(tmp_path)
    der = tmp_path / "server.cer"
    der.write_bytes(ssl.PEM_cert_to_DER_cert((tmp_path / "server.crt").read_text()))
    config = tmp_path / "boxmq.toml"
    for key, files in [
        ("cert", 'cert = "server.cer", key = "server.key"'),
        ("ca", 'cert = "server.crt", key = "server.key", ca = "server.cer"'),
    ]:
        config.write_text(f"[[mqtt.listener]]\nport = 0\ntls = {{ {files} }}\n")
        done = _serve_refused(config, tmp_path)
        assert done.returncode == 1, done.stderr
        what = "certificate" if key == "cert" else "CA"
        assert done.stderr == (
            f"boxmq serve: {config}: mqtt.listener[1].tls.{key}: TLS {what} file {der} holds a "
            "certificate in DER (binary) form, where PEM is read: convert it with `openssl "
            f"x509 -inform der -in {der} -out {tmp_path / 'server.pem'}` and give the new file\n"
        )
    assert not (tmp_path / "data").exists()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_a_private_key_in_der_form_is_told_how_to_convert_it(tmp_path: Path) -> None:
    """As a DER certificate is: a key in DER was told only "holds no PEM private key"."""
    _self_signed_certificate(tmp_path)
    der = tmp_path / "server.der"
    subprocess.run(
        ["openssl", "pkey", "-in", str(tmp_path / "server.key"), "-outform", "der",
         "-out", str(der)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    config = tmp_path / "boxmq.toml"
    config.write_text(
        '[[mqtt.listener]]\nport = 0\ntls = { cert = "server.crt", key = "server.der" }\n'
    )
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"boxmq serve: {config}: mqtt.listener[1].tls.key: TLS key file {der} holds no PEM "
        "private key, and looks like one in DER (binary) form: convert it with `openssl pkey "
        f"-inform der -in {der} -out {tmp_path / 'server.pem'}` and give the new file\n"
    )
    assert not (tmp_path / "data").exists()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_the_conversion_of_a_der_key_never_writes_over_the_certificate_converted_before_it(
    tmp_path: Path,
) -> None:
    """A Windows export in DER, server.cer and server.key: the certificate is told first, and
    converted as told into server.pem; the key was then told `-out server.pem` too, and the
    line as given wrote the key over that certificate. A PEM name already taken is not given."""
    _self_signed_certificate(tmp_path)
    key = tmp_path / "server.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-outform", "der", "-out", str(tmp_path / "der")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    (tmp_path / "der").replace(key)
    (tmp_path / "server.crt").rename(tmp_path / "server.pem")  # the certificate, converted
    config = tmp_path / "boxmq.toml"
    config.write_text(
        '[[mqtt.listener]]\nport = 0\ntls = { cert = "server.pem", key = "server.key" }\n'
    )
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"boxmq serve: {config}: mqtt.listener[1].tls.key: TLS key file {key} holds no PEM "
        "private key, and looks like one in DER (binary) form: convert it with `openssl pkey "
        f"-inform der -in {key} -out {tmp_path / 'server.key.pem'}` and give the new file\n"
    )


def test_a_misspelt_access_in_the_acl_stops_serve_rather_than_lose_a_deny(
    tmp_path: Path,
) -> None:
    """`topic denny alice/secret/#` was a readwrite rule on a topic named "denny alice/...":
    serve started, and alice could read alice/secret/#."""
    set_password(tmp_path / "passwd", "alice", b"wonder")
    acl = tmp_path / "acl"
    acl.write_text("user alice\ntopic readwrite alice/#\ntopic denny alice/secret/#\n")
    config = tmp_path / "boxmq.toml"
    config.write_text('[security]\npassword_file = "passwd"\nacl_file = "acl"\n')
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        f"boxmq serve: {config}: security.acl_file: {acl}:3: 'denny' is no access: expected read, "
        "write, readwrite or deny before the filter (for a topic filter whose first level holds "
        "a space, give its access first: readwrite denny alice/secret/#)\n"
    )


def test_a_password_file_and_an_acl_file_given_for_each_other_are_named_so(
    tmp_path: Path,
) -> None:
    """The two files swapped in [security]: the password file's check said `expected
    NAME:HASH` of `user alice`, and the ACL's `unknown keyword` quoted alice's hash, salt and
    digest, to the terminal and the log, without a word of the swap."""
    set_password(tmp_path / "passwd", "alice", b"wonder")
    (tmp_path / "acl").write_text("# who may do what\nuser alice\ntopic readwrite alice/#\n")
    config = tmp_path / "boxmq.toml"
    for key, given, says in [
        (
            "password_file",
            "acl",
            "a line of an ACL file ('user alice'), not a user's NAME:HASH: password_file names "
            "the ACL file (give it as acl_file, and the file `boxmq passwd` makes as "
            "password_file)",
        ),
        (
            "acl_file",
            "passwd",
            "a line of a password file (user 'alice' and the hash of a password), not of an ACL: "
            "acl_file names the password file (give it as password_file, and the ACL file as "
            "acl_file)",
        ),
    ]:
        config.write_text(f'[security]\n{key} = "{given}"\n')
        done = _serve_refused(config, tmp_path, "--no-mqtt")
        assert done.returncode == 1, done.stderr
        line = 2 if given == "acl" else 1
        assert done.stderr == (
            f"boxmq serve: {config}: security.{key}: {tmp_path / given}:{line}: {says}\n"
        )
        assert "scrypt" not in done.stderr
    assert not (tmp_path / "data").exists()


def test_a_nul_character_in_a_file_name_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    """TOML can write one (\\u0000) and no file name holds one: `data` was a traceback from
    the root's makedirs, `password_file` and `acl_file` one from their open()."""
    config = tmp_path / "boxmq.toml"
    config.write_text('data = "state\\u0000"\n')
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        f"boxmq serve: {config}: data: a file name cannot hold a NUL character (\\u0000)\n"
    )


@pytest.mark.parametrize(
    ("written", "shown", "control"),
    [("state\\n", r"'state\n'", r"'\n'"), ("\\u001b[2Jstate", r"'\x1b[2Jstate'", r"'\x1b'")],
)
def test_a_control_character_in_a_file_name_is_one_line_naming_file_and_key(
    tmp_path: Path, written: str, shown: str, control: str
) -> None:
    """A newline ("C:\\new" in double quotes) or an escape in `data`: serve made a folder no
    log line nor `ls` showed as typed, and served it."""
    config = tmp_path / "boxmq.toml"
    config.write_text(f'data = "{written}"\n')
    done = _serve_refused(config, tmp_path, "--no-mqtt")
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"boxmq serve: {config}: data: {shown} holds a control character ({control}): no file "
        "name should; write the name without it (in double quotes a backslash starts an "
        "escape: use single quotes or / for a path)\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["boxmq.toml"]


@pytest.mark.parametrize(
    ("setting", "shown"),
    [
        ("sweep_interval = 1e-9", "sweep_interval: 1e-09"),
        ('fsync = "interval"\nfsync_interval = "1ms"', "fsync_interval: '1ms'"),
        ("[mqtt]\nsys_interval = 0.001", "mqtt.sys_interval: 0.001"),
    ],
)
def test_an_interval_too_short_to_be_more_than_a_busy_loop_is_refused(
    tmp_path: Path, setting: str, shown: str
) -> None:
    """sweep_interval = 1e-9 was served: a sweep after another without a pause, a core busy."""
    config = tmp_path / "boxmq.toml"
    config.write_text(f"{setting}\n")
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"boxmq serve: {config}: {shown} is too short: at least 0.01 seconds (10ms); a loop "
        "that often keeps a core busy\n"
    )
    assert not (tmp_path / "data").exists()


def _no_more_memory_than(size: int) -> None:
    """In a child: a `boxmq serve` that reads without end fails, not the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (size, size))


def test_a_config_of_no_end_is_refused_not_read_until_memory_runs_out(tmp_path: Path) -> None:
    """`--config /dev/zero` read until memory ran out (a MemoryError traceback at best)."""
    done = subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "serve", "--config", "/dev/zero"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        preexec_fn=lambda: _no_more_memory_than(2**30),
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "boxmq serve: config file /dev/zero is longer than 16 MiB: no config file is; give "
        "--config the TOML file itself\n"
    )


def test_a_fifo_nothing_writes_to_is_refused_not_waited_for_for_ever(tmp_path: Path) -> None:
    """serve opened it and waited for a writer that never came; a pipe that is written still
    works (`--config <(envsubst < boxmq.toml.in)`)."""
    fifo = tmp_path / "boxmq.toml"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = _serve_refused(fifo, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"boxmq serve: config file {fifo} is a FIFO (a pipe) that did not come to its end within "
        "5 s: give --config the TOML file itself\n"
    )
    assert time.monotonic() - started < 30
    written = subprocess.run(
        ["bash", "-c", f'{sys.executable} -m boxmq.cli serve --config <(echo "fsync = 1")'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert written.returncode == 1, written.stderr
    assert "fsync: " in written.stderr  # read: its value is what is wrong
    assert sorted(os.listdir(tmp_path)) == ["boxmq.toml"]


def test_a_folder_given_as_the_config_file_is_named_so(tmp_path: Path) -> None:
    done = _serve_refused(tmp_path, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"boxmq serve: config file {tmp_path} is a folder: give --config the TOML file itself\n"
    )


def test_polling_from_the_file_and_a_typed_flag_over_it(tmp_path: Path) -> None:
    config = tmp_path / "boxmq.toml"
    config.write_text("polling = true\n")
    flags = ("serve", "--config", str(config), "--mqtt", "127.0.0.1:0")
    log = _serve_until_ready(*flags, cwd=tmp_path)
    assert "new files found by polling" in log
    log = _serve_until_ready(*flags, "--no-polling", cwd=tmp_path)
    assert "new files found by inotify" in log
    log = _serve_until_ready("serve", "--mqtt", "127.0.0.1:0", "--polling", cwd=tmp_path)
    assert "new files found by polling" in log


def test_max_deliveries_from_the_file_and_a_typed_flag_over_it(tmp_path: Path) -> None:
    """--max-deliveries, which the other commands take, is serve's too: typed, it wins over the
    file's key, as the other flags do; left out, the file's stays."""
    from boxmq import cli_parser
    from boxmq.cli_serve import serve_config

    config = tmp_path / "boxmq.toml"
    config.write_text("max_deliveries = 3\n")

    def limit(*flags: str) -> int | None:
        words = ["serve", "--config", str(config), "--data", str(tmp_path / "d"), *flags]
        return serve_config(cli_parser.parser().parse_args(words)).max_deliveries

    assert limit() == 3
    assert limit("--max-deliveries", "7") == 7
    assert limit("--max-deliveries", "0") is None  # no limit


def test_a_root_of_the_file_that_cannot_be_made_names_the_key_it_came_from(
    tmp_path: Path,
) -> None:
    """As a listener's address in use names its table: the line said neither `data` nor the
    file, and the hint that --data gets (`or choose another --data folder`) was lost, the
    error checked against the default ./data rather than the file's folder."""
    config = tmp_path / "etc" / "boxmq.toml"
    config.parent.mkdir()
    config.write_text('data = "../disk/data"\n')
    with small_disk(tmp_path / "disk") as disk, disk.read_only():
        done = _serve_refused(config, tmp_path, "--no-mqtt")
        typed = _boxmq("--data", str(disk.path / "data"), "serve", "--no-mqtt", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().endswith(
        "Read-only file system: the file system is read-only; mount it writable "
        f"(or choose another data in {config})"
    ), done.stderr
    # A --data typed over the file is the one to change: said as before.
    assert typed.returncode == 1, typed.stderr
    assert typed.stderr.strip().endswith("(or choose another --data folder)"), typed.stderr
    assert "Traceback" not in done.stderr + typed.stderr


def test_a_port_in_use_names_the_setting_it_came_from(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "boxmq.toml"
        config.write_text(f"[[mqtt.listener]]\nport = 0\n\n[[mqtt.listener]]\nport = {port}\n")
        done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert f"('127.0.0.1', {port})" in done.stderr
    assert f"choose another mqtt.listener[2] in {config}" in done.stderr
    assert "--mqtt" not in done.stderr
    assert "Traceback" not in done.stderr


def test_an_address_given_twice_to_mqtt_is_named_not_taken_for_another_program(
    tmp_path: Path,
) -> None:
    port = free_port()  # a port free a moment ago, for both flags
    for first, second, named in (
        (f"127.0.0.1:{port}", f"127.0.0.1:{port}", f"127.0.0.1:{port}"),
        (f":{port}", f"0.0.0.0:{port}", f"0.0.0.0:{port}"),
        (f"[::1]:{port}", f"::1:{port}", f"[::1]:{port}"),
    ):
        flags = ["serve", "--data", str(tmp_path / "data"), "--mqtt", first, "--mqtt", second]
        done = _boxmq(*flags)
        assert done.returncode == 1
        assert (
            done.stderr == f"boxmq serve: --mqtt {named} is given twice: give each address once\n"
        )
        assert not (tmp_path / "data").exists()  # refused before anything was opened
    ready = _serve_until_ready(
        "serve", "--mqtt", "127.0.0.1:0", "--mqtt", "127.0.0.1:0", cwd=tmp_path
    )
    assert ready.count("MQTT listening on") == 2  # port 0: two ports


def test_two_listeners_of_one_port_that_overlap_are_named_not_taken_for_another_program(
    tmp_path: Path,
) -> None:
    """`--mqtt :PORT --mqtt 127.0.0.1:PORT` (and localhost beside 127.0.0.1) pass the check
    for an address given twice, and the second bind fails: the error named another program."""
    port = free_port()  # a port free a moment ago, for both flags
    for first in (f":{port}", f"localhost:{port}"):
        flags = ["serve", "--data", str(tmp_path / "data"), "--mqtt", first]
        done = _boxmq(*flags, "--mqtt", f"127.0.0.1:{port}")
        assert done.returncode == 1
        last = done.stderr.splitlines()[-1]
        assert "address already in use (this server listens on " in last, last
        assert f":{port} and 127.0.0.1:{port}: one bound first takes the other's address" in last
        assert "Traceback" not in done.stderr
    try:  # IPv6 asyncio names as ('::1', PORT, 0, 0), where there is an IPv6 loopback
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", port))
    except OSError:
        pass
    else:
        flags = ["serve", "--data", str(tmp_path / "data"), "--mqtt", f"[::]:{port}"]
        done = _boxmq(*flags, "--mqtt", f"[::1]:{port}")
        assert done.returncode == 1
        assert f"this server listens on [::]:{port} and [::1]:{port}" in done.stderr
    config = tmp_path / "boxmq.toml"
    config.write_text(
        f'[[mqtt.listener]]\nhost = "0.0.0.0"\nport = {port}\n\n[[mqtt.listener]]\nport = {port}\n'
    )
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert f"this server listens on 0.0.0.0:{port} and 127.0.0.1:{port}" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before the root was made


def test_a_port_in_use_stops_serve_before_it_makes_or_recovers_the_root(tmp_path: Path) -> None:
    """The listeners were bound after the root was opened and recovered: a port in use left
    a root made where the file (or a mistyped --data) named it, for a server that never ran."""
    free, taken = free_ports(2)
    config = tmp_path / "boxmq.toml"
    listener = '[[mqtt.listener]]\nhost = "127.0.0.1"\nport = {}\n'
    config.write_text('data = "state"\n' + listener.format(free) + listener.format(taken))
    with socket.socket() as other:  # another program on the second listener's port
        other.bind(("127.0.0.1", taken))
        other.listen()
        done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"boxmq serve: error while attempting to bind on address ('127.0.0.1', {taken}): "
        "address already in use (another program listens there: stop it, or choose another "
        f"mqtt.listener[2] in {config})"
    )
    assert "Traceback" not in done.stderr
    assert "recovering" not in done.stderr
    assert not (tmp_path / "state").exists()
    with socket.socket() as again:  # the first listener's port was let go
        again.bind(("127.0.0.1", free))


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_second_serve_on_a_bound_port_is_refused_before_it_opens_its_root(host: str) -> None:
    """Bound with SO_REUSEADDR and not yet listening (until its recovery was done), a serve's
    listeners let Linux bind a second serve's beside them: both opened and recovered their
    roots, and the second was refused only at its listen(), its error naming no address."""
    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6")
    first = asyncio.run(bind_listeners([Listener(host, 0)]))
    try:
        port = first[0][0].getsockname()[1]
        with pytest.raises(OSError, match=r"bind on address \(.*: address already in use"):
            close_sockets(asyncio.run(bind_listeners([Listener(host, port)])))
    finally:
        close_sockets(first)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("0.0.0.0", "127.0.0.1"),
        ("127.0.0.1", "0.0.0.0"),
        ("localhost", "127.0.0.1"),
        ("::", "::1"),
        ("::1", "::"),
    ],
)
def test_two_listeners_of_one_serve_that_overlap_are_refused_by_the_kernel_at_the_bind(
    first: str, second: str
) -> None:
    """Each listener listens as it is bound, and Linux refuses a bind (SO_REUSEADDR or not)
    beside a listening socket whose address overlaps, 0.0.0.0 beside 127.0.0.1 in either
    order: the check boxmq made of its listeners' addresses after binding them all caught
    nothing the kernel lets through, and is gone."""
    if ":" in first and not socket.has_ipv6:
        pytest.skip("no IPv6")
    port = free_port()  # a port free a moment ago
    shown = f"('{second}', {port}"
    with pytest.raises(OSError, match=re.escape(shown) + r".*: address already in use"):
        close_sockets(asyncio.run(bind_listeners([Listener(first, port), Listener(second, port)])))
    if socket.has_ipv6:  # asyncio's IPv6 sockets are IPv6 only: 0.0.0.0 and :: do not overlap
        both = asyncio.run(bind_listeners([Listener("0.0.0.0", port), Listener("::", port)]))
        close_sockets(both)
        assert len(both) == 2


def test_a_host_that_does_not_resolve_names_its_address_and_setting(tmp_path: Path) -> None:
    config = tmp_path / "boxmq.toml"
    config.write_text('[[mqtt.listener]]\nhost = "mqtt.example.invalid"\nport = 0\n')
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    line = done.stderr.splitlines()[-1]  # after the start-up log
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # refused before the root was made
    assert "('mqtt.example.invalid', 0)" in line
    assert f"choose another mqtt.listener[1] in {config}" in line

    flags = ["serve", "--data", str(tmp_path / "data"), "--mqtt", "mqtt.example.invalid:0"]
    done = _boxmq(*flags)
    assert done.returncode == 1
    line = done.stderr.splitlines()[-1]  # after the start-up log
    assert "Traceback" not in done.stderr
    assert "('mqtt.example.invalid', 0)" in line
    assert "choose another --mqtt HOST:PORT" in line
    # Not first called open to the network: a listener that never listened reaches nobody.
    assert "WARNING" not in done.stderr


def test_a_host_that_is_no_host_name_names_its_address_and_setting(tmp_path: Path) -> None:
    """A label (the text between dots) over 63 characters, or empty: the resolver's IDNA
    encoding raised a UnicodeError, a traceback, where a name that does not resolve is one
    line. (`--mqtt` refuses such a host as a usage error first.)"""
    long = "a" * 64 + ".example"
    config = tmp_path / "boxmq.toml"
    config.write_text(f'[[mqtt.listener]]\nhost = "{long}"\nport = 0\n')
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    line = done.stderr.splitlines()[-1]  # after the start-up log
    assert line.startswith(f"boxmq serve: cannot resolve the host of address ('{long}', 0)")
    assert "not a host name (each part between dots is 1 to 63 characters)" in line
    assert f"choose another mqtt.listener[1] in {config}" in line


def _link_local_without_interface_is_invalid() -> bool:
    """Linux refuses a bind to fe80::1 without its interface with EINVAL, wherever IPv6 is."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("fe80::1", 0))
    except OSError as error:
        return error.errno == errno.EINVAL
    return False


@pytest.mark.skipif(not _link_local_without_interface_is_invalid(), reason="no IPv6 here")
def test_a_link_local_address_without_its_interface_names_the_fix_and_setting(
    tmp_path: Path,
) -> None:
    """`fe80::1` alone: "invalid argument", nothing said what to change, nor which listener
    (an IPv6 address is shown as ('fe80::1', 0, 0, 0), which was not found among them)."""
    config = tmp_path / "boxmq.toml"
    config.write_text(
        '[[mqtt.listener]]\nhost = "::1"\nport = 0\n\n[[mqtt.listener]]\nhost = "fe80::1"\n'
        "port = 0\n"
    )
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    line = done.stderr.splitlines()[-1]  # after the start-up log
    assert line == (
        "boxmq serve: error while attempting to bind on address ('fe80::1', 0, 0, 0): invalid "
        "argument (a link-local IPv6 address, fe80::..., needs the interface it is on after a "
        f"%: fe80::1%eth0; else choose another mqtt.listener[2] in {config})"
    )
    done = _boxmq("serve", "--data", str(tmp_path / "data"), "--mqtt", "[fe80::1]:0")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].endswith(
        "fe80::1%eth0; else choose another --mqtt HOST:PORT)"
    )


def test_serve_dead_letters_with_the_max_deliveries_of_its_config(tmp_path: Path) -> None:
    """serve's sweeps release every process's dead locks: with the limit of the file, not
    its own 5 (here none, as the applications on this root open it with)."""
    root = tmp_path / "state"
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put(b"tried four times")
    [name] = os.listdir(root / "jobs" / "target")
    counted = encode(decode(name).with_property(DELIVERY_COUNT, PropertyType.INT, 4))
    lock = Lock(ConsumerId("w"), int((time.time() + 3600) * 1000), dead_token())
    os.rename(
        root / "jobs" / "target" / name, root / "jobs" / "processing" / locked_name(counted, lock)
    )
    config = tmp_path / "boxmq.toml"
    config.write_text('data = "state"\nfsync = "never"\nmax_deliveries = 0\n')
    _serve_until_ready("serve", "--config", str(config), "--mqtt", "127.0.0.1:0", cwd=tmp_path)
    assert os.listdir(root / "jobs" / "error") == []
    [released] = os.listdir(root / "jobs" / "target")
    assert decode(released).property_value(DELIVERY_COUNT) == 5


def _processed_files(root: Path) -> list[str]:
    """Two acknowledged messages in processed/ of the queue `audit`, more than a second old."""
    with boxmq.open(root, fsync="never") as box:
        queue = box.queue("audit")
        for body in (b"kept for the auditors", b"and this one"):
            queue.put(body)
            message = queue.get()
            assert message is not None
            message.ack()
    time.sleep(1.1)  # a file's age is its ctime, which no test can set back
    return sorted(os.listdir(root / "audit" / "processed"))


def test_serve_keeps_processed_files_as_long_as_its_config_says(tmp_path: Path) -> None:
    """serve's sweeps purge processed/ of every queue of the root, its applications' too:
    with the retention of the file or the flag, "forever" included, not always a day."""
    root = tmp_path / "state"
    names = _processed_files(root)
    config = tmp_path / "boxmq.toml"
    config.write_text('data = "state"\nfsync = "never"\nprocessed_retention = "forever"\n')
    log = _serve_until_ready("serve", "--config", str(config), "--no-mqtt", cwd=tmp_path)
    assert "acknowledge there is kept forever" in log
    assert sorted(os.listdir(root / "audit" / "processed")) == names
    flags = ("--no-mqtt", "--processed-retention", "1s")  # a typed flag wins over the file
    log = _serve_until_ready("serve", "--config", str(config), *flags, cwd=tmp_path)
    assert "acknowledge there is deleted after 1s" in log
    assert os.listdir(root / "audit" / "processed") == []


def test_serve_deletes_expired_files_once_past_the_retention_its_config_gives(
    tmp_path: Path,
) -> None:
    """expired/ stayed for good, whatever the operator wanted: the key and the flag say how
    long, and serve says it at start and at each sweep that deletes."""
    root = tmp_path / "state"
    with boxmq.open(root, fsync="never") as box:
        box.queue("audit").put(b"stale", expires_in=0.001)
        time.sleep(0.01)
        assert box.sweep()["audit"].expired == 1
    config = tmp_path / "boxmq.toml"
    config.write_text('data = "state"\nfsync = "never"\n')
    log = _serve_until_ready("serve", "--config", str(config), "--no-mqtt", cwd=tmp_path)
    assert "expired/ files are kept until purged (expired_retention = forever)" in log
    (kept,) = os.listdir(root / "audit" / "expired")
    # Past the retention before serve starts, so that its first sweep, before "ready", deletes it.
    time.sleep(max(0.0, 1.5 - (time.time() - os.stat(root / "audit" / "expired" / kept).st_ctime)))
    config.write_text('data = "state"\nfsync = "never"\nexpired_retention = "1s"\n')
    log = _serve_until_ready("serve", "--config", str(config), "--no-mqtt", cwd=tmp_path)
    assert "expired/ files are deleted 1s after they expired (expired_retention)" in log
    assert "audit: 1 expired message(s) past retention deleted" in log
    assert os.listdir(root / "audit" / "expired") == []


def test_a_bad_processed_retention_names_its_key_and_forever(tmp_path: Path) -> None:
    config = tmp_path / "boxmq.toml"
    config.write_text('data = "state"\nprocessed_retention = "never"\n')
    done = _serve_refused(config, tmp_path)
    assert done.returncode == 1
    assert f"boxmq serve: {config}: processed_retention: " in done.stderr
    assert '(or "forever")' in done.stderr
