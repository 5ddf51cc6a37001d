"""TLS contexts from files made by the `openssl` CLI, with a real handshake over asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import ssl
import subprocess
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Final

import pytest
from tests.conftest import StuckCheck
from tests.integration.mqtt.raw import connect_packet_311, packet, string
from tests.waiting import logged, until_async

import boxmq
from boxmq.clock import ManualClock
from boxmq.errors import InvalidArgument
from boxmq.mqtt import server as server_module
from boxmq.mqtt import tls
from boxmq.mqtt.acl import Acl
from boxmq.mqtt.passwords import PasswordFile
from boxmq.mqtt.server import MqttServer
from boxmq.mqtt.settings import Limits, Listener, MqttSettings
from boxmq.mqtt.tls import server_context

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _self_signed(folder: Path, name: str, *, key_type: str = "ec") -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    algorithm = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    if key_type == "rsa":
        algorithm = ["-newkey", "rsa:2048"]
    _openssl(
        "req", "-x509", *algorithm, "-nodes", "-days", "1", "-subj", f"/CN={name}",
        "-addext", f"subjectAltName=DNS:{name}", "-keyout", key, "-out", cert,
    )  # fmt: skip
    return cert, key


def _signed_by(
    folder: Path, name: str, ca: tuple[Path, Path], *, subject: str | None = None
) -> tuple[Path, Path]:
    cert, key, request = folder / f"{name}.crt", folder / f"{name}.key", folder / f"{name}.csr"
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", subject or f"/CN={name}", "-keyout", key, "-out", request,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
        "-days", "1", "-out", cert,
    )  # fmt: skip
    return cert, key


async def _echo_once(server_ssl: ssl.SSLContext, client_ssl: ssl.SSLContext) -> bytes:
    """Start a TLS echo server on port 0, send one line through it, return the answer."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await reader.readline())
            await writer.drain()
        except (ssl.SSLError, ConnectionError):
            pass  # a refused client: the client side reports it
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ssl)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ssl, server_hostname="localhost"
        )
        writer.write(b"hello over tls\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.readline(), timeout=10)
        writer.close()
        return answer
    finally:
        server.close()
        await server.wait_closed()


def _client(trust: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=trust)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def test_a_client_that_trusts_the_certificate_completes_a_handshake(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "localhost")
    context = server_context(cert, key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert asyncio.run(_echo_once(context, _client(cert))) == b"hello over tls\n"


def test_a_key_in_the_certificate_file_is_enough(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "localhost")
    both = tmp_path / "both.pem"
    both.write_text(cert.read_text() + key.read_text())
    assert asyncio.run(_echo_once(server_context(both), _client(cert))) == b"hello over tls\n"


def test_with_a_ca_only_clients_with_a_signed_certificate_get_in(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "localhost")
    ca = _self_signed(tmp_path, "clients-ca")
    device = _signed_by(tmp_path, "device-1", ca)
    context = server_context(cert, key, ca=ca[0])
    assert context.verify_mode == ssl.CERT_REQUIRED
    answer = asyncio.run(_echo_once(context, _client(cert, device)))
    assert answer == b"hello over tls\n"
    assert _refused(context, _client(cert))


def _refused(server_ssl: ssl.SSLContext, client_ssl: ssl.SSLContext) -> bool:
    """TLS 1.3 reports the refusal after the client's side of the handshake: as an error on
    the client's next read, or as an end of stream without the echo."""
    try:
        return asyncio.run(_echo_once(server_ssl, client_ssl)) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def test_an_optional_client_certificate(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "localhost")
    ca = _self_signed(tmp_path, "clients-ca")
    context = server_context(cert, key, ca=ca[0], require_client_cert=False)
    assert context.verify_mode == ssl.CERT_OPTIONAL
    assert asyncio.run(_echo_once(context, _client(cert))) == b"hello over tls\n"


def test_errors_say_which_file_to_fix(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "localhost")
    _, other_key = _self_signed(tmp_path, "other")
    _, rsa_key = _self_signed(tmp_path, "rsa", key_type="rsa")
    junk = tmp_path / "junk.pem"
    junk.write_text("not pem\n")
    damaged = tmp_path / "damaged.key"  # one line of its base64 changed
    lines = key.read_text().splitlines(keepends=True)
    damaged.write_text("".join([lines[0], "X" + lines[1][1:], *lines[2:]]))
    encrypted = tmp_path / "encrypted.key"
    _openssl("pkey", "-in", key, "-aes256", "-passout", "pass:secret", "-out", encrypted)
    cases = [
        ((tmp_path / "missing.crt", key, None), r"certificate file .*missing.crt does not exist"),
        ((cert, tmp_path / "missing.key", None), r"key file .*missing.key does not exist"),
        ((junk, key, None), r"certificate file .*junk.pem holds no PEM certificate"),
        ((cert, junk, None), r"key file .*junk.pem holds no PEM private key"),
        ((cert, None, None), r"no TLS key: set `key` to the file of .*localhost.crt holds none"),
        ((cert, other_key, None), r"key .*other.key does not belong to the certificate"),
        ((cert, rsa_key, None), r"key .*rsa.key does not belong to the certificate"),
        ((cert, damaged, None), r"key file .*damaged.key holds a private key that cannot be"),
        ((cert, encrypted, None), r"encrypted.key is encrypted with a passphrase"),
        ((cert, key, junk), r"CA file .*junk.pem holds no PEM certificate"),
        ((cert, key, tmp_path / "missing-ca.pem"), r"CA file .*missing-ca.pem does not exist"),
        # There, but no file: a folder named for the file in it, a device.
        ((tmp_path, key, None), r"certificate file .* is a folder, not a file: fix `cert`"),
        ((cert, tmp_path, None), r"key file .* is a folder, not a file: fix `key`"),
        ((cert, key, tmp_path), r"CA file .* is a folder, not a file: fix `ca`"),
        ((Path("/dev/null"), key, None), r"file /dev/null is not a regular file: fix `cert`"),
    ]
    for (c, k, ca), message in cases:
        with pytest.raises(InvalidArgument, match=message):
            server_context(c, k, ca=ca)
    with pytest.raises(tls.TlsFileError) as caught:
        server_context(cert)  # no key, and none in the certificate's file: `key` is missing
    assert caught.value.setting == "key"


def test_an_error_of_the_system_reading_a_file_names_the_file_and_its_setting(
    tmp_path: Path,
) -> None:
    """A name longer than the system takes (ENAMETOOLONG): the serve said only the name and
    "File name too long", not which setting of which listener gave it."""
    cert, key = _self_signed(tmp_path, "localhost")
    long = tmp_path / ("x" * 300)
    cases = [((long, key, None), "cert"), ((cert, long, None), "key"), ((cert, key, long), "ca")]
    for (c, k, ca), setting in cases:
        with pytest.raises(tls.TlsFileError) as caught:
            server_context(c, k, ca=ca)
        assert caught.value.setting == setting
        assert str(caught.value).startswith("cannot read TLS ")
        assert str(caught.value).endswith(f"file {long}: File name too long")


def test_a_certificate_out_of_its_dates_is_warned_of_by_file_and_date(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served, since clients that do not check dates still connect, but said at start: a
    client that checks them is refused with nothing in the broker's log to say why."""
    cert, key = _self_signed(tmp_path, "localhost")
    expired = tmp_path / "expired.crt"
    _openssl("x509", "-in", cert, "-signkey", key, "-days", "-1", "-out", expired)
    not_before, not_after = tls.certificate_dates(cert) or pytest.fail("no dates read")
    assert timedelta(0) < not_after - not_before <= timedelta(days=1, seconds=1)
    with caplog.at_level(logging.WARNING, logger="boxmq.mqtt"):
        server_context(cert, key)
        assert caplog.messages == []
        server_context(expired, key)
        _, ended = tls.certificate_dates(expired) or pytest.fail("no dates read")
        [message] = caplog.messages
        assert message.startswith(
            f"TLS certificate {expired} expired on {ended:%Y-%m-%d %H:%M:%S} UTC"
        )
        caplog.clear()
        monkeypatch.setattr(time, "time", lambda: not_before.timestamp() - 3600)
        server_context(cert, key)
        [message] = caplog.messages
        assert message.startswith(
            f"TLS certificate {cert} is not valid before {not_before:%Y-%m-%d %H:%M:%S} UTC"
        )


_CONNECT = connect_packet_311("", keep_alive=60)
_CONNACK = bytes.fromhex("20020000")


@contextlib.asynccontextmanager
async def _serving(
    tmp_path: Path,
    settings: MqttSettings,
    clock: ManualClock | None = None,
    steady: ManualClock | None = None,
) -> AsyncIterator[tuple[MqttServer, int]]:
    """A server of `settings` on a root of its own, and the port of its one listener;
    `steady`: the monotonic clock its steps of `clock` are told against."""
    box = boxmq.open(tmp_path / "root", fsync="never")
    server = MqttServer(box, settings, clock=clock, steady=steady.now if steady else None)
    try:
        [(_, port)] = await server.start()
        yield server, port
    finally:
        await server.close()
        box.close()


def _tls_client(port: int, trust: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLSocket:
    """A blocking client of localhost:`port`, past its TLS handshake (`_client`)."""
    plain = socket.create_connection(("127.0.0.1", port), timeout=10)
    return _client(trust, cert).wrap_socket(plain, server_hostname="localhost")


def _mqtt_over_tls(port: int, trust: Path, count: int) -> list[ssl.SSLSocket]:
    """`count` clients past their CONNACK: blocking sockets, whose buffers are OpenSSL's
    (asyncio's would be traced beside the server's)."""
    clients = []
    for _ in range(count):
        client = _tls_client(port, trust)
        client.sendall(_CONNECT)
        assert client.recv(4) == _CONNACK
        clients.append(client)
    return clients


def test_tls_clients_share_one_read_buffer(tmp_path: Path) -> None:
    """asyncio's SSL protocol reads into 256 KiB of its own per socket (284 MB for 1,000
    clients, where plain ones took 2.6 MB): the server hands each a shared one once in."""
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))

    async def grown_per_client() -> float:
        async with _serving(tmp_path, MqttSettings(listeners=(listener,))) as (_, port):
            clients = await asyncio.to_thread(_mqtt_over_tls, port, cert, 1)  # makes the shared
            tracemalloc.start()
            try:
                clients += await asyncio.to_thread(_mqtt_over_tls, port, cert, 8)
                await asyncio.sleep(0.1)  # the server's side of the last one
                grown = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
            for client in clients:
                client.close()
            return grown / 8

    assert asyncio.run(grown_per_client()) < 64 << 10


_STALLED: Final = bytes.fromhex("160301")  # a TLS record's header cut short: no ClientHello


def _stall(port: int, count: int) -> list[socket.socket]:
    """`count` sockets that begin a ClientHello and send no more (closed by the caller)."""
    stalled = []
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        client.sendall(_STALLED)
        stalled.append(client)
    return stalled


def test_tls_handshakes_under_way_count_against_max_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Sockets stalled in their handshake did not count: 2,000 of them held 500 MB and their
    descriptors past max_connections until connect_timeout. Now one past it is closed at
    once, and a client gets in once a stalled socket's connect_timeout closes it."""
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))
    limits = Limits(max_connections=5, connect_timeout=0.5)

    async def run() -> None:
        async with _serving(tmp_path, MqttSettings(listeners=(listener,), limits=limits)) as (
            server,
            port,
        ):
            stalled = await asyncio.to_thread(_stall, port, 5)
            await until_async(lambda: server.broker.handshaking == 5)
            [refused] = await asyncio.to_thread(_stall, port, 1)
            with contextlib.suppress(ConnectionResetError):  # closed with its byte unread
                assert await asyncio.to_thread(refused.recv, 1) == b""  # at once, not in 0.5 s
            assert server.broker.handshaking == 5
            [line] = logged(caplog, "max_connections")
            assert "refused: 5 connection(s) already (5 in their TLS handshake)" in line
            await until_async(lambda: server.broker.handshaking == 0)  # their connect_timeout
            [client] = await asyncio.to_thread(_mqtt_over_tls, port, cert, 1)
            assert server.broker.handshaking == 0  # the client counts as one connection
            for sock in [*stalled, refused, client]:
                sock.close()

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        asyncio.run(run())


def test_a_tls_socket_the_server_closes_frees_its_slot_without_its_clients_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TLS socket closed for sending no CONNECT waited for its client's close_notify for
    asyncio's 30 s: a client that never answered (gone from the network, or stalling on
    purpose) kept its descriptor and its slot under max_connections 30 s past its
    connect_timeout, and new clients were refused meanwhile. It waits `_LINGER` now."""
    monkeypatch.setattr(server_module, "_LINGER", 0.2)
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))
    limits = Limits(max_connections=1, connect_timeout=10)
    clock = ManualClock()

    def silent(port: int) -> ssl.SSLSocket:
        """A client past its handshake that sends nothing and never reads (so never answers
        the server's close_notify)."""
        return _tls_client(port, cert)

    async def run() -> None:
        settings = MqttSettings(listeners=(listener,), limits=limits)
        async with _serving(tmp_path, settings, clock) as (server, port):
            stalling = await asyncio.to_thread(silent, port)
            await until_async(lambda: bool(server.broker._clients))
            clock.advance(11)
            server.broker.tick(clock.now())  # no CONNECT within 10 s: closed
            await until_async(lambda: not server.broker._clients)  # in 0.2 s, not 30
            [client] = await asyncio.to_thread(_mqtt_over_tls, port, cert, 1)
            for sock in (stalling, client):
                sock.close()

    asyncio.run(run())


def test_the_connect_timeout_of_a_tls_socket_counts_from_its_accept(tmp_path: Path) -> None:
    """The CONNECT timeout of a TLS socket counted from the end of its handshake, which
    may itself take connect_timeout: a client could hold its slot twice as long as
    [mqtt.limits] connect_timeout says, and a socket that opened 11 s ago without a
    CONNECT was left open under connect_timeout = 10 s."""
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))
    limits = Limits(connect_timeout=10)
    clock = ManualClock()

    async def run() -> None:
        settings = MqttSettings(listeners=(listener,), limits=limits)
        async with _serving(tmp_path, settings, clock) as (server, port):
            plain = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", port), 10)
            await until_async(lambda: server.broker.handshaking == 1)
            clock.advance(6)  # a slow handshake
            wrap = _client(cert).wrap_socket
            client = await asyncio.to_thread(wrap, plain, server_hostname="localhost")
            await until_async(lambda: bool(server.broker._clients))
            clock.advance(5)  # 11 s since its accept, 5 since its handshake
            server.broker.tick(clock.now())
            with contextlib.suppress(ConnectionError):
                assert await asyncio.to_thread(client.recv, 1) == b""  # its close_notify
            client.close()

    asyncio.run(run())


_MEASURED = 32  # handshakes stalled while their memory is traced


def test_tls_handshakes_under_way_share_the_read_buffer(tmp_path: Path) -> None:
    """Each socket in its handshake held 256 KiB of asyncio's own to read into (zeroed, so
    resident: 1,000 stalled ones held 308 MB) until it ended: it reads into the shared one
    from the start now. What each costs besides (its transport, its SSL object, the test's
    socket) traces at 8 to 17 KiB with 32 of them; with 8, the rest of the process's
    allocations in the window weighed more, and a clean CI run measured 40 KiB each against
    the bound of 32 then. 64 KiB is still a quarter of the 256 KiB this looks for."""
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))

    async def grown_per_handshake() -> float:
        async with _serving(tmp_path, MqttSettings(listeners=(listener,))) as (server, port):
            stalled = await asyncio.to_thread(_stall, port, 1)  # makes the shared buffer
            await until_async(lambda: server.broker.handshaking == 1)
            tracemalloc.start()
            try:
                stalled += await asyncio.to_thread(_stall, port, _MEASURED)
                await until_async(lambda: server.broker.handshaking == _MEASURED + 1)
                await asyncio.sleep(0.05)  # their ClientHello's first bytes read
                grown = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
            for sock in stalled:
                sock.close()
            return grown / _MEASURED

    assert asyncio.run(grown_per_handshake()) < 64 << 10


def _not_tls(port: int, count: int) -> None:
    """`count` plain-TCP clients on a TLS port, each read to its end: the server is done."""
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(_CONNECT)
            assert client.recv(100) == b""


def test_a_client_retrying_a_failing_handshake_is_told_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A device that retries every second with an expired certificate wrote a line a try."""
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))
    clock = ManualClock()
    failed = "TLS handshake failed: not TLS (a client without TLS on the TLS port?)"

    def told() -> list[str]:
        return logged(caplog, "TLS handshake")

    async def run() -> None:
        async with _serving(tmp_path, MqttSettings(listeners=(listener,)), clock) as (server, port):
            await asyncio.to_thread(_not_tls, port, 3)
            [line] = told()
            assert line.startswith("127.0.0.1:")
            assert failed in line
            clock.advance(10)
            server.tell_failed_handshakes(now=clock.now())
            assert told()[1].startswith(
                f"127.0.0.1: 2 more TLS handshake(s) failed in the last 10s: {failed[22:]}"
            )
            clock.advance(10)
            server.tell_failed_handshakes(now=clock.now())  # none since: the run is over
            await asyncio.to_thread(_not_tls, port, 1)
            assert len(told()) == 3
            assert failed in told()[2]

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        asyncio.run(run())


def _wrong_password(port: int, count: int) -> None:
    """`count` 3.1.1 CONNECTs with a password nobody has, each read to its refusal."""
    connect = connect_packet_311("dev-1", keep_alive=60, username="al", password=b"x")
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(connect)
            assert client.recv(4) == bytes.fromhex("20020004")  # bad user name or password


def test_a_client_retrying_a_wrong_password_is_told_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A device that retries a wrong password in a loop, or a script guessing passwords,
    wrote a line a try (found driving `boxmq serve`: 100 tries, 100 lines)."""
    (tmp_path / "passwd").write_text("")  # knows nobody
    settings = MqttSettings(
        listeners=(Listener("127.0.0.1", 0),),
        authenticator=PasswordFile.load(tmp_path / "passwd"),
    )
    clock = ManualClock()
    refused = "refused: bad user name or password (return code 4)"

    def told() -> list[str]:
        return logged(caplog, "refused")

    async def run() -> None:
        async with _serving(tmp_path, settings, clock) as (server, port):
            await asyncio.to_thread(_wrong_password, port, 3)
            [line] = told()
            assert line.startswith("client 'dev-1' (user 'al', from 127.0.0.1:")
            assert line.endswith(refused)
            clock.advance(10)
            server.broker.tick(clock.now())
            assert told()[1] == (
                "127.0.0.1: 2 more CONNECT(s) refused in the last 10s: "
                "bad user name or password (return code 4)"
            )
            clock.advance(10)
            server.broker.tick(clock.now())  # none since: the run is over
            await asyncio.to_thread(_wrong_password, port, 2)
            assert len(told()) == 3
            assert told()[2].endswith(refused)
        assert told()[3].startswith("127.0.0.1: 1 more CONNECT(s) refused")  # at close

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        asyncio.run(run())


def _with_certificate(port: int, trust: Path, cert: tuple[Path, Path]) -> None:
    """A client with `cert`, read to its end: TLS 1.3 tells it of a refusal after its side
    of the handshake."""
    with (
        contextlib.suppress(ssl.SSLError, ConnectionError),
        _tls_client(port, trust, cert) as client,
    ):
        client.sendall(_CONNECT)
        client.recv(4)


def test_a_client_certificate_of_another_ca_is_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenSSL says "unable to get local issuer certificate" or "self-signed certificate": the
    log says that tls.ca does not hold the CA that signed it."""
    cert, key = _self_signed(tmp_path, "localhost")
    ca = _self_signed(tmp_path, "clients-ca")
    other = _signed_by(tmp_path, "device-of-another-ca", _self_signed(tmp_path, "another-ca"))
    own = _self_signed(tmp_path, "device-on-its-own")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key, ca=ca[0]))

    async def run() -> None:
        async with _serving(tmp_path, MqttSettings(listeners=(listener,))) as (server, port):
            await asyncio.to_thread(_with_certificate, port, cert, other)
            await asyncio.to_thread(_with_certificate, port, cert, own)
            if server.handshakes:  # the server's side of the last one, which logs it
                await asyncio.wait(set(server.handshakes))

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        asyncio.run(run())
    failed = logged(caplog, "handshake failed")
    assert "unable to get local issuer certificate (its issuer is not in tls.ca" in failed[0]
    assert "self-signed certificate (it signed itself; give the client one signed" in failed[1]


def test_a_client_certificate_names_its_user_for_the_acl(tmp_path: Path) -> None:
    """identity_as_username: the certificate's Common Name is the user name %u stands for,
    whatever user name and password the CONNECT brings (the password file knows nobody)."""
    cert, key = _self_signed(tmp_path, "localhost")
    ca = _self_signed(tmp_path, "clients-ca")
    alice = _signed_by(tmp_path, "alice", ca)
    nameless = _signed_by(tmp_path, "nameless", ca, subject="/O=devices")  # no Common Name
    (tmp_path / "passwd").write_text("")
    (tmp_path / "acl").write_text("pattern readwrite users/%u/#\n")
    context = server_context(cert, key, ca=ca[0])
    listener = Listener("127.0.0.1", 0, ssl=context, identity_as_username=True)
    settings = MqttSettings(
        listeners=(listener,),
        authenticator=PasswordFile.load(tmp_path / "passwd"),
        authorizer=Acl.load(tmp_path / "acl"),
    )
    connect = connect_packet_311("", keep_alive=60, username="mallory", password=b"x")
    subscribe = packet(  # 3.1.1: no properties
        0x82, b"\x00\x01" + string("users/alice/#") + b"\0" + string("users/bob/#") + b"\0"
    )

    def as_alice(port: int) -> bytes:
        with _tls_client(port, cert, alice) as client:
            client.sendall(connect)
            assert client.recv(4) == _CONNACK
            client.sendall(subscribe)
            return client.recv(6)

    def as_nameless(port: int) -> bytes:
        with _tls_client(port, cert, nameless) as client:
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                client.sendall(connect)
                return client.recv(4)  # closed after its handshake: no CONNACK
            return b""

    async def run() -> tuple[bytes, bytes]:
        async with _serving(tmp_path, settings) as (_, port):
            answers = await asyncio.to_thread(as_alice, port)
            return answers, await asyncio.to_thread(as_nameless, port)

    answers, nameless_answer = asyncio.run(run())
    assert answers == bytes.fromhex("9004 0001 00 80")  # alice's, not bob's
    assert nameless_answer == b""


def test_a_tls_client_closed_while_its_password_waited_is_not_connected_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """connect_timeout closed a client whose password still waited for its check, but a TLS
    socket stays among the broker's clients until its close is over (its client's
    close_notify, or 5 s): the check that ended meanwhile connected it there, a session
    (and a takeover of another connection of its client id) for a socket already closed."""
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))
    stuck = StuckCheck()
    settings = MqttSettings(
        listeners=(listener,), limits=Limits(connect_timeout=10), authenticator=stuck
    )
    clock = ManualClock()
    connect = connect_packet_311("c1", keep_alive=60, username="carol", password=b"x")

    def silent(port: int) -> ssl.SSLSocket:
        """A client that sends its CONNECT and never reads (nor answers a close_notify)."""
        client = _tls_client(port, cert)
        client.sendall(connect)
        return client

    async def run() -> None:
        async with _serving(tmp_path, settings, clock) as (server, port):
            client = await asyncio.to_thread(silent, port)
            broker = server.broker
            await until_async(lambda: any(c.checking for c in broker._clients.values()))
            clock.advance(11)
            with caplog.at_level(logging.INFO, "boxmq.mqtt"):
                broker.tick(clock.now())  # closed: its password still waits
                stuck.release.set()
                await until_async(lambda: broker._checks.running == 0)
                await asyncio.sleep(0.05)  # the check's answer, on the loop
            assert broker._links == {}
            client.close()

    asyncio.run(run())
    assert logged(caplog, "connected") == []


class _Nobody:
    def authenticate(self, username: str | None, password: bytes | None, client_id: str) -> bool:
        return False


def test_a_tls_client_refused_that_writes_first_still_reads_its_connack(tmp_path: Path) -> None:
    """The TLS twin of tests/integration/mqtt/test_mqtt_close_linger.py: a TLS socket cannot
    be half-closed under its TLS (server.py `_Protocol.close`), but asyncio's TLS close sends
    close_notify after the CONNACK and reads on, dropping what the client sends, until the
    client's own close_notify or `_LINGER`: a client that writes twice after the refusal
    came, before it reads, meets no RST and reads the refusal."""
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))
    settings = MqttSettings(listeners=(listener,), authenticator=_Nobody())
    closing = threading.Event()
    connect = connect_packet_311("id", keep_alive=60, username="al", password=b"x")

    def eager(port: int) -> bytes:
        with _tls_client(port, cert) as client:
            client.sendall(connect)
            assert closing.wait(10)
            client.sendall(b"\xc0\x00")  # PINGREQ
            time.sleep(0.05)  # a RST, if one came, is back by now (the loopback answers at once)
            client.sendall(b"\xc0\x00")
            got = b""
            while chunk := client.recv(16):
                got += chunk
            return got

    async def run() -> bytes:
        async with _serving(tmp_path, settings) as (server, port):
            answer = asyncio.create_task(asyncio.to_thread(eager, port))
            clients = server.broker._clients  # the refused one is there until its close ends
            await until_async(lambda: not clients or any(map(_closing, clients)))
            closing.set()
            return await answer

    assert asyncio.run(run()) == bytes.fromhex("20020004")  # bad user name or password


def _closing(link: object) -> bool:
    transport = getattr(link, "_transport", None)
    return transport is not None and bool(transport.is_closing())


def test_the_count_of_failed_handshakes_keeps_its_interval_across_a_step_of_the_clock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The wall clock stepped forward an hour (NTP, `date -s`) 5 s into the count's interval:
    the server's next tick told the count, "in the last 10s" for 5. The server tells the
    step against its monotonic clock and moves the interval with it."""
    cert, key = _self_signed(tmp_path, "localhost")
    settings = MqttSettings(listeners=(Listener("127.0.0.1", 0, ssl=server_context(cert, key)),))
    wall, steady = ManualClock(), ManualClock(1000.0)

    def counted() -> list[str]:
        return logged(caplog, "more TLS handshake(s) failed")

    async def run() -> None:
        async with _serving(tmp_path, settings, wall, steady) as (server, port):
            stop = asyncio.Event()
            try:
                ticking = asyncio.create_task(server.run(stop))
                await asyncio.to_thread(_not_tls, port, 3)
                wall.advance(3605)
                steady.advance(5)
                await asyncio.sleep(0.6)  # two ticks of the server at least: the step is told
                assert counted() == []
                wall.advance(5)
                steady.advance(5)
                await until_async(lambda: bool(counted()))
                stop.set()
                await ticking
            finally:
                stop.set()

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        asyncio.run(run())
    [line] = counted()
    assert line.startswith("127.0.0.1: 2 more TLS handshake(s) failed in the last 10s")


def test_a_wall_clock_stepped_forward_during_a_tls_handshake_does_not_close_its_connection(
    tmp_path: Path,
) -> None:
    """The CONNECT timeout of a TLS socket counts from its accept, a time of the wall clock
    read before its handshake: stepped forward an hour meanwhile (NTP, `date -s`), the
    connection was closed at the next tick for no CONNECT, though it had just opened."""
    cert, key = _self_signed(tmp_path, "localhost")
    listener = Listener("127.0.0.1", 0, ssl=server_context(cert, key))
    wall, steady = ManualClock(), ManualClock(1000.0)

    async def run() -> None:
        settings = MqttSettings(listeners=(listener,), limits=Limits(connect_timeout=10))
        async with _serving(tmp_path, settings, wall, steady) as (server, port):
            plain = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", port), 10)
            await until_async(lambda: server.broker.handshaking == 1)
            wall.advance(3600)  # the monotonic clock does not move
            wrap = _client(cert).wrap_socket
            client = await asyncio.to_thread(wrap, plain, server_hostname="localhost")
            await until_async(lambda: bool(server.broker._clients))
            server.broker.tick(wall.now())
            client.sendall(_CONNECT)
            assert await asyncio.to_thread(client.recv, 4) == _CONNACK
            client.close()

    asyncio.run(run())


def test_a_certificate_without_a_common_name_is_told_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """identity_as_username: a device whose certificate names no user, retrying in a loop,
    wrote a line a try; it is told as a socket closed for a protocol error is."""
    cert, key = _self_signed(tmp_path, "localhost")
    ca = _self_signed(tmp_path, "clients-ca")
    nameless = _signed_by(tmp_path, "nameless", ca, subject="/O=devices")  # no Common Name
    listener = Listener(
        "127.0.0.1", 0, ssl=server_context(cert, key, ca=ca[0]), identity_as_username=True
    )
    clock = ManualClock()
    words = "the client's certificate has no Common Name, which this listener takes as its user"

    def told() -> list[str]:
        return logged(caplog, "no Common Name")

    async def run() -> None:
        async with _serving(tmp_path, MqttSettings(listeners=(listener,)), clock) as (server, port):
            for _ in range(3):
                await asyncio.to_thread(_with_certificate, port, cert, nameless)
            while server.handshakes:  # the server's side of the last ones, which log them
                await asyncio.wait(set(server.handshakes))
            [line] = told()
            assert line.startswith("127.0.0.1:")
            assert f": closing: {words}" in line
            clock.advance(10)
            server.tell_failed_handshakes(now=clock.now())
            assert told()[1] == (
                f"127.0.0.1: 2 more connection(s) closed in the last 10s: {words} name "
                "(identity_as_username)"
            )

    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        asyncio.run(run())
