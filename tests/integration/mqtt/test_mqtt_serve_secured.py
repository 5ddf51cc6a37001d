"""`boxmq serve --config` with a real password file, ACL file and TLS listener, driven by paho
over real sockets: who may connect, what they may publish and subscribe to, and TLS.
(test_mqtt_security.py covers the server's side of the same protocols with stand-ins.)"""

from __future__ import annotations

import queue
import shutil
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from harness.ports import free_port, free_ports
from harness.stopping import stop
from paho.mqtt.enums import CallbackAPIVersion
from tests.integration.mqtt.clients import loop_stopped
from tests.integration.mqtt.raw import connect_packet_311, string
from tests.waiting import WAIT, until

from boxmq.mqtt.passwords import set_password

SUBACK_REFUSED = 0x80  # MQTT 3.1.1 §3.9.3 and 5.0 §3.9.3: Failure / Unspecified error
CONNACK_REFUSED = (4, 5, 0x86, 0x87)  # bad user name or password / not authorized, 3.1.1 and 5.0

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")

ACL = """\
user alice
topic readwrite alice/#
topic deny alice/secret/#
topic read news/#

user bob
topic write news/#
"""


@dataclass(frozen=True)
class Served:
    plain: int
    tls: int
    ca: Path  # the self-signed server certificate clients trust
    log: Path  # what boxmq serve wrote on stderr
    mutual: int  # TLS with client certificates signed by clients-ca.crt required


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("secured")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(folder / "server.key"), "-out", str(folder / "server.crt")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    for name in ("clients-ca", "stranger"):  # a CA for client certificates, and one not it
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "1", "-subj", f"/CN={name}",
             "-keyout", str(folder / f"{name}.key"), "-out", str(folder / f"{name}.crt")],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    set_password(folder / "passwd", "alice", b"wonderland")
    set_password(folder / "passwd", "bob", b"builder")
    (folder / "acl").write_text(ACL)
    plain, tls, mutual = free_ports(3)
    (folder / "boxmq.toml").write_text(
        f"""
        data = "data"
        fsync = "never"
        [[mqtt.listener]]
        port = {plain}
        [[mqtt.listener]]
        port = {tls}
        tls = {{ cert = "server.crt", key = "server.key" }}
        [[mqtt.listener]]
        port = {mutual}
        tls = {{ cert = "server.crt", key = "server.key", ca = "clients-ca.crt" }}
        [mqtt.limits]
        connect_timeout = "1s"
        [security]
        password_file = "passwd"
        acl_file = "acl"
        """
    )
    command = [sys.executable, "-m", "boxmq.cli", "serve", "--config", str(folder / "boxmq.toml")]
    with open(folder / "serve.log", "w") as log:
        server = subprocess.Popen(command, stderr=log)
        try:
            _wait_for_ports(server, folder, plain, tls, mutual)
            yield Served(plain, tls, folder / "server.crt", folder / "serve.log", mutual)
        finally:
            stop(server, seconds=30)


def _wait_for_ports(server: subprocess.Popen[bytes], folder: Path, *ports: int) -> None:
    deadline = time.monotonic() + 30
    for port in ports:
        while True:
            assert server.poll() is None, (folder / "serve.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (folder / "serve.log").read_text()
                time.sleep(0.1)


@dataclass
class Client:
    client: mqtt.Client
    connack: int
    messages: queue.Queue[tuple[str, bytes]]
    subacks: queue.Queue[list[int]]

    def subscribe(self, topic_filter: str) -> int:
        self.client.subscribe(topic_filter, 1)
        [reason] = self.subacks.get(timeout=WAIT)
        return reason

    def publish(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, 1).wait_for_publish(timeout=WAIT)

    def close(self) -> None:
        self.client.disconnect()
        loop_stopped(self.client)


def _connect(
    served: Served,
    user: str | None,
    password: str | None,
    *,
    tls: bool,
    v5: bool = False,
    client_id: str = "",
) -> Client:
    protocol = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=protocol)
    connacks: queue.Queue[int] = queue.Queue()
    messages: queue.Queue[tuple[str, bytes]] = queue.Queue()
    subacks: queue.Queue[list[int]] = queue.Queue()

    def on_connect(_c: Any, _u: Any, _flags: Any, reason: Any, _props: Any) -> None:
        connacks.put(int(reason.value))

    def on_subscribe(_c: Any, _u: Any, _mid: Any, reasons: Any, _props: Any) -> None:
        subacks.put([int(r.value) for r in reasons])

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = lambda _c, _u, m: messages.put((m.topic, bytes(m.payload)))
    if user is not None:
        client.username_pw_set(user, password)
    if tls:
        client.tls_set_context(ssl.create_default_context(cafile=served.ca))
    client.connect("localhost" if tls else "127.0.0.1", served.tls if tls else served.plain, 30)
    client.loop_start()
    return Client(client, connacks.get(timeout=WAIT), messages, subacks)


def test_users_connect_over_tls_and_the_acl_decides(served: Served) -> None:
    alice = _connect(served, "alice", "wonderland", tls=True)
    bob = _connect(served, "bob", "builder", tls=True, v5=True)
    try:
        assert (alice.connack, bob.connack) == (0, 0)
        assert alice.subscribe("alice/inbox/#") == 1  # granted QoS 1
        assert alice.subscribe("news/+") == 1
        assert alice.subscribe("alice/#") == SUBACK_REFUSED  # would receive alice/secret/...
        assert alice.subscribe("$share/team/bob/#") == SUBACK_REFUSED
        assert bob.subscribe("news/#") >= SUBACK_REFUSED  # write-only: v5 says Not authorized
        bob.publish("news/today", b"allowed")
        bob.publish("alice/inbox/x", b"refused")  # not bob's to write: dropped or refused
        alice.publish("alice/inbox/note", b"to self")
        got = {alice.messages.get(timeout=WAIT), alice.messages.get(timeout=WAIT)}
        assert got == {("news/today", b"allowed"), ("alice/inbox/note", b"to self")}
        with pytest.raises(queue.Empty):
            alice.messages.get(timeout=0.5)
    finally:
        alice.close()
        bob.close()


@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", "wrong"), ("mallory", "wonderland"), (None, None)],
)
def test_wrong_passwords_unknown_users_and_anonymous_clients_are_refused(
    served: Served, user: str | None, password: str | None
) -> None:
    client = _connect(served, user, password, tls=False)
    try:
        assert client.connack in CONNACK_REFUSED
    finally:
        client.close()


def test_the_tls_port_shows_the_configured_certificate(served: Served) -> None:
    trusting = ssl.create_default_context(cafile=served.ca)
    with (
        socket.create_connection(("127.0.0.1", served.tls), WAIT) as raw,
        trusting.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    untrusting = ssl.create_default_context()  # the system CAs only
    with (
        socket.create_connection(("127.0.0.1", served.tls), WAIT) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        untrusting.wrap_socket(raw, server_hostname="localhost")


def test_the_log_says_who_may_connect_and_what_they_may_do(served: Served) -> None:
    log = served.log.read_text()
    folder = served.log.parent
    assert f"config: {folder / 'boxmq.toml'}" in log
    assert (
        f"authentication: {folder / 'passwd'} (2 user(s)), clients without a user name refused"
    ) in log
    assert (
        f"authorization: {folder / 'acl'} (0 rule(s) for clients without a user name, "
        "2 user section(s), 0 pattern(s))"
    ) in log


def test_a_client_id_with_line_breaks_cannot_write_a_line_of_its_own_in_the_log(
    served: Served,
) -> None:
    forged = "2026-01-01 00:00:00,000 INFO boxmq.mqtt: client admin connected from 10.0.0.1:1"
    client = mqtt.Client(CallbackAPIVersion.VERSION2, f"x\n{forged}\u2028\x1b[2J")
    connected: queue.Queue[int] = queue.Queue()
    client.on_connect = lambda _c, _u, _f, reason, _p: connected.put(int(reason.value))
    client.username_pw_set("alice", "wonderland")
    client.connect("127.0.0.1", served.plain, 30)
    client.loop_start()
    try:
        assert connected.get(timeout=WAIT) == 0
    finally:
        client.disconnect()
        loop_stopped(client)
    escaped = f"client x\\n{forged}\\u2028\\x1b[2J connected from 127.0.0.1:"
    deadline = time.monotonic() + WAIT
    while escaped not in (log := served.log.read_text()):
        assert time.monotonic() < deadline, log
        time.sleep(0.02)
    assert not any(line.startswith(forged) for line in log.splitlines())
    assert "\x1b" not in log


def test_a_socket_that_never_starts_its_handshake_is_closed_after_the_connect_timeout(
    served: Served,
) -> None:
    """An idle socket on the TLS port holds a descriptor as one on the plain port would: it
    gets `connect_timeout` (1 s here), not asyncio's minute for a handshake."""
    with socket.create_connection(("127.0.0.1", served.tls), timeout=10) as sock:
        peer = _address(sock)
        started = time.monotonic()
        assert sock.recv(10) == b""  # closed by the server
        assert time.monotonic() - started < 5
    assert f"{peer}: TLS handshake failed: no TLS handshake within 1s" in _logged(served, peer)


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def _logged(served: Served, line: str, *, after: int = 0) -> str:
    """The first line of the server's log that holds `line`, after the `after` lines that
    held it before, once it is written."""

    def found() -> list[str]:
        return [text for text in served.log.read_text().splitlines() if line in text]

    until(lambda: len(found()) > after, lambda: f"{line!r} not in:\n{served.log.read_text()}")
    return found()[after]


# The address the handshakes of test_failed_tls_handshakes_are_logged_with_the_peer_and_the_reason
# come from: the server counts a failure it told of from an address, for the same reason, into
# a line every 10 s, and other tests of the module fail handshakes from 127.0.0.1.
_ELSEWHERE = ("127.0.0.2", 0)


def _handshake(served: Served, port: int, context: ssl.SSLContext) -> str:
    """A TLS handshake with `context` on `port`, and the peer address the server logs it by."""
    with socket.create_connection(("127.0.0.1", port), WAIT, _ELSEWHERE) as raw:
        peer = _address(raw)
        try:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.recv(1)  # TLS 1.3: a refused client certificate shows here
        except (ssl.SSLError, ConnectionError):
            pass
    return peer


def test_failed_tls_handshakes_are_logged_with_the_peer_and_the_reason(served: Served) -> None:
    """Asyncio drops a failed handshake without a word: each gets one line, in words."""
    with socket.create_connection(("127.0.0.1", served.tls), WAIT, _ELSEWHERE) as raw:
        peer = _address(raw)
        raw.sendall(bytes.fromhex("100c00044d5154540402003c0000"))  # an MQTT CONNECT
        assert raw.recv(10) == b""
    assert "not TLS (a client without TLS on the TLS port?)" in _logged(served, peer)
    untrusting = ssl.create_default_context()  # the system CAs only
    peer = _handshake(served, served.tls, untrusting)
    assert "the client does not trust this server's certificate" in _logged(served, peer)
    old = ssl.create_default_context(cafile=served.ca)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1 is, as it should be
        old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
    peer = _handshake(served, served.tls, old)
    assert "the client offers only TLS versions under 1.2" in _logged(served, peer)
    trusting = ssl.create_default_context(cafile=served.ca)
    peer = _handshake(served, served.mutual, trusting)
    line = _logged(served, peer)
    assert "INFO" in line
    assert "the client sent no certificate, which this listener requires (tls.ca)" in line
    assert "(ssl: PEER_DID_NOT_RETURN_A_CERTIFICATE)" in line
    stranger = ssl.create_default_context(cafile=served.ca)
    folder = served.log.parent
    stranger.load_cert_chain(folder / "stranger.crt", folder / "stranger.key")
    peer = _handshake(served, served.mutual, stranger)
    assert "the client's certificate is not accepted: self-signed certificate" in _logged(
        served, peer
    )


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="needs mosquitto_pub")
def test_mosquitto_pub_with_the_wrong_ca_file_is_logged(served: Served) -> None:
    folder = served.log.parent
    command = ["mosquitto_pub", "-h", "localhost", "-p", str(served.tls), "-t", "x", "-m", "y"]
    command += ["-A", "127.0.0.3"]  # an address of its own: see _ELSEWHERE
    words = "TLS handshake failed: the client does not trust this server's certificate"
    before = served.log.read_text().count(words)
    wrong = subprocess.run(
        [*command, "--cafile", str(folder / "stranger.crt")],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert wrong.returncode != 0
    _logged(served, words, after=before)
    right = subprocess.run(
        [*command, "--cafile", str(served.ca), "-u", "alice", "-P", "wonderland"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert right.returncode == 0, right.stderr


def test_packets_that_come_with_the_last_handshake_message_are_read(served: Served) -> None:
    """A client's CONNECT, PUBLISH and DISCONNECT in the same segment as its TLS Finished,
    then its end of stream: they reach the broker before its protocol is made (the TLS
    handshake is its own step), and are read, in order, once it is."""
    alice = _connect(served, "alice", "wonderland", tls=True)
    try:
        assert alice.subscribe("alice/inbox/#") == 1
        connect = connect_packet_311(
            "early-bird", keep_alive=60, username="alice", password=b"wonderland"
        )
        publish = string("alice/inbox/early") + b"with the Finished"
        packets = connect + bytes([0x30, len(publish)]) + publish + b"\xe0\x00"
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ssl.create_default_context(cafile=served.ca).wrap_bio(
            incoming, outgoing, server_hostname="localhost"
        )
        with socket.create_connection(("127.0.0.1", served.tls), WAIT) as raw:
            while True:
                try:
                    tls.do_handshake()  # done once the server's Finished is read
                    break
                except ssl.SSLWantReadError:
                    raw.sendall(outgoing.read())
                    incoming.write(raw.recv(65536) or pytest.fail("closed in the handshake"))
            tls.write(packets)
            raw.sendall(outgoing.read())  # our Finished, then the packets, in one go
            raw.shutdown(socket.SHUT_WR)
            assert alice.messages.get(timeout=WAIT) == ("alice/inbox/early", b"with the Finished")
    finally:
        alice.close()


def test_a_user_added_while_serve_runs_is_refused_and_the_log_says_to_restart(
    tmp_path: Path,
) -> None:
    """The password file is read at start only: carol, added by `boxmq passwd` meanwhile, was
    refused as any wrong password is, and nothing told the operator why."""
    set_password(tmp_path / "passwd", "alice", b"wonderland")
    port = free_port()
    config = tmp_path / "boxmq.toml"
    config.write_text(
        f'data = "data"\n[[mqtt.listener]]\nport = {port}\n[security]\npassword_file = "passwd"\n'
    )
    command = [sys.executable, "-m", "boxmq.cli", "serve", "--config", str(config)]
    served = Served(port, 0, tmp_path / "none.crt", tmp_path / "serve.log", 0)
    with open(served.log, "w") as log:
        server = subprocess.Popen(command, stderr=log)
        try:
            _wait_for_ports(server, tmp_path, port)
            wrong = _connect(served, "alice", "wrong", tls=False)
            wrong.close()
            assert wrong.connack in CONNACK_REFUSED
            assert "has changed" not in served.log.read_text()  # the file is as it was read
            passwd = [sys.executable, "-m", "boxmq.cli", "passwd", str(tmp_path / "passwd")]
            subprocess.run(
                [*passwd, "carol", "--password", "rose"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            for _ in range(2):
                carol = _connect(served, "carol", "rose", tls=False)
                carol.close()
                assert carol.connack in CONNACK_REFUSED
        finally:
            stop(server, seconds=30)
    told = [line for line in served.log.read_text().splitlines() if "has changed" in line]
    assert len(told) == 1, told  # once per change, not once per refusal
    assert told[0].endswith(
        f"WARNING boxmq.mqtt: the password file {tmp_path / 'passwd'} has changed since boxmq "
        "serve read it at start: it is read at start only, so its changes are not in force "
        "(restart boxmq serve)"
    )


def test_a_deny_pattern_binds_a_client_whose_id_holds_a_slash(tmp_path: Path) -> None:
    """`pattern deny devices/%c/firmware/#` was skipped for client id `d1/x`, as an allowing
    pattern is (it would reach into other clients' levels): a client that chose such an id
    wrote and read the firmware topics the deny was written to keep from it, though a deny
    wins over every allow (the class of mosquitto's CVE-2017-7650)."""
    set_password(tmp_path / "passwd", "fleet", b"manager")
    (tmp_path / "acl").write_text(
        "user fleet\ntopic readwrite devices/#\npattern deny devices/%c/firmware/#\n"
    )
    port = free_port()
    (tmp_path / "boxmq.toml").write_text(
        f'data = "data"\nfsync = "never"\n[[mqtt.listener]]\nport = {port}\n'
        '[security]\npassword_file = "passwd"\nacl_file = "acl"\n'
    )
    command = [sys.executable, "-m", "boxmq.cli", "serve", "--config", str(tmp_path / "boxmq.toml")]
    served = Served(port, 0, tmp_path / "none.crt", tmp_path / "serve.log", 0)
    with open(served.log, "w") as log:
        server = subprocess.Popen(command, stderr=log)
        try:
            _wait_for_ports(server, tmp_path, port)
            watcher = _connect(served, "fleet", "manager", tls=False, client_id="watcher")
            device = _connect(served, "fleet", "manager", tls=False, client_id="d1/x")
            try:
                assert watcher.subscribe("devices/d1/x/#") == 1
                assert device.subscribe("devices/d1/x/firmware/#") == SUBACK_REFUSED
                assert device.subscribe("devices/d2/firmware/#") == 1  # another's: allowed
                device.publish("devices/d1/x/firmware/image", b"refused")
                device.publish("devices/d1/x/status", b"allowed")
                assert watcher.messages.get(timeout=WAIT) == ("devices/d1/x/status", b"allowed")
            finally:
                device.close()
                watcher.close()
        finally:
            stop(server, seconds=30)


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="needs mosquitto_pub")
def test_mosquitto_pub_to_a_host_not_named_in_the_certificate_is_logged_in_words(
    served: Served,
) -> None:
    """The certificate names DNS:localhost only; mosquitto_pub -h 127.0.0.1 says "A TLS error
    occurred", and the log said only "ssl: TLSV1_ALERT_INTERNAL_ERROR"."""
    words = "TLS handshake failed: the client gave up on its side (a mosquitto client does"
    before = served.log.read_text().count(words)
    refused = subprocess.run(
        ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(served.tls), "-t", "x", "-m", "y",
         "--cafile", str(served.ca), "-u", "alice", "-P", "wonderland"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    _logged(served, words, after=before)
    [line] = [line for line in served.log.read_text().splitlines() if words in line][before:]
    assert line.endswith("subjectAltName) (ssl: TLSV1_ALERT_INTERNAL_ERROR)")


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="needs mosquitto_pub")
def test_tls_or_http_on_the_plain_port_is_logged_as_such(served: Served) -> None:
    """mosquitto_pub --cafile to the plain port was logged "CONNECT: fixed header flags
    0b0110, not 0b0000" (a TLS record header read as MQTT), and a browser's GET as "PUBACK
    before CONNECT"."""
    refused = subprocess.run(
        ["mosquitto_pub", "-h", "localhost", "-p", str(served.plain), "-t", "x", "-m", "y",
         "--cafile", str(served.ca), "-u", "alice", "-P", "wonderland"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    line = _logged(served, "a TLS handshake, not MQTT")
    assert line.endswith(
        ": closing: a TLS handshake, not MQTT: this listener has no TLS (a client with TLS on "
        "the plain port?) (nothing sent)"
    )
    with socket.create_connection(("127.0.0.1", served.plain), WAIT) as browser:
        browser.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n" + b" " * 30)
        assert browser.recv(100) == b""  # closed
    assert _logged(served, "not MQTT (nothing").endswith(
        ": closing: an HTTP request, not MQTT (nothing sent)"
    )
