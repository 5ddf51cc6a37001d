"""The MQTT listeners: the one place MQTT meets sockets (`asyncio.BufferedProtocol`, no
streams).

Each read is handed to the connection (sans-IO) and the broker in one go, and everything the
read caused is written with one `write` per connection (broker.flush). A client that
cannot keep up is not buffered without end: QoS 1/2 wait behind its Receive Maximum, QoS 0
messages are dropped while its socket's write buffer is over the high-water mark, and nothing
more is read from it meanwhile (what it sends would only add answers to the pile: a PINGRESP
per PINGREQ, a PUBACK per PUBLISH); the kernel's buffers then slow it down.

Reading is paused for two reasons kept apart: the broker's (`pause_reading`: disk work piled
up, a SUBSCRIBE waiting for the disk, shutting down) and the client's write buffer
(`pause_writing`); `_Protocol._read_or_not` alone decides, and reading resumes only once
neither holds. While a client is not read, its keep-alive (1.5 periods without a packet) does
not count against it what we did not read: each tick, a client held by the broker counts as
heard, and a congested one as heard if what it has not read (our write buffer and the kernel's
send queue) shrank since the last tick (it reads, so it lives). A congested client that reads
nothing for 1.5 periods is disconnected, as one that sends nothing is
(`MqttServer._heard_unread`).

Reads go into one buffer per server, reused: a plain `Protocol` is handed a new 256 KiB
`bytes` per read, which glibc maps, shrinks and unmaps: three system calls, and a fresh page
to fault in, per read (`strace -c`: 0.3 of each per share-group message). The connection copies
what a read brought out of the buffer before the next read (framing.FrameReader.receive), so
one buffer serves every socket of the loop (docs/benchmarks.md, "Reads into one buffer":
less broker CPU per message at QoS 2, by 7 to 17 % in alternated runs).

A TCP socket the server closes is half-closed and read out, for a second at most, before it
is closed (`_Linger`): closed at once, its client's next bytes drew a RST, and a client that
writes before it reads lost the DISCONNECT or CONNACK that said why. A TLS socket's close
does the like by itself (`_Protocol.close`).

A TLS listener accepts plain TCP and starts TLS itself on each socket (`_TlsHandshake`), so that
a failed handshake is logged with the peer and ssl's reason: under `create_server(ssl=...)`
asyncio drops one without a word outside its debug mode, and an operator could not tell why a
client with the wrong CA, no certificate or no TLS at all never connected. A plain listener is
as before.

A TLS socket reads its encrypted bytes into a buffer of asyncio's SSL protocol: 256 KiB of its
own per socket, zeroed when made, so resident (1,000 TLS clients held 287 MB where plain ones
held 5 MB, docs/benchmarks.md "TLS (stop 41)"). What a read brings is copied into the
protocol's MemoryBIO at once (`buffer_updated`), so, as for the plain reads, one buffer serves
every TLS socket of the loop, from the start of its handshake (`MqttServer.share_tls_buffer`):
the buffer asyncio makes for each is dropped before its first read, so 1,000 sockets stalled
in their handshake hold 93 MB, not 308. They count as connections for max_connections too,
so they cannot pile up past it, each with its descriptor and ssl's state, for `connect_timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import resource
import socket
import ssl
import sys
import termios
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final, cast

from boxmq.client.box import Box
from boxmq.clock import Clock, SystemClock
from boxmq.core.durations import spelled
from boxmq.errors import ProtocolViolation, RecurringFailure, store_failure
from boxmq.host_names import HOST_NAME_RULE
from boxmq.mqtt import brokers
from boxmq.mqtt.broker import Broker
from boxmq.mqtt.connection import Connection
from boxmq.mqtt.drops import DropLog, Refusals, tell_by_host
from boxmq.mqtt.peer_address import PeerAddress, peer_address
from boxmq.mqtt.settings import (
    Listener,
    MqttSettings,
    listener_url,
    open_to_anyone,
    open_warning,
)
from boxmq.store.process import process_token

__all__ = ["MqttServer", "bind_listeners", "close_sockets"]

log = logging.getLogger("boxmq.mqtt")

_TICK: Final = 0.25  # seconds: keep-alives, CONNECT timeouts, files others dropped
# A difference between the wall clock's move and the monotonic clock's from one tick to the
# next that is a step of the wall clock (NTP at boot, `date -s`), not a slew (NTP slews at
# most 0.5 ms a second) nor a late tick (both clocks move alike).
_STEP: Final = 1.0
_READ_SIZE: Final = 256 << 10  # bytes a read may bring: what asyncio's own reads ask for
_WRITE_HIGH: Final = 4 << 20  # bytes buffered for a client before it counts as congested
_LINGER: Final = 5.0  # seconds a closed connection's last bytes get to be read (`close`)
# What a socket the server closed is read for, discarded, after its half-close (`_Linger`).
_DISCARD_TIME: Final = 1.0  # seconds
_DISCARD_BYTES: Final = 64 << 10
_QUICKACK: Final = getattr(socket, "TCP_QUICKACK", None)  # Linux only
# Linux: the bytes of a TCP socket's send queue the peer has not acknowledged (SIOCOUTQ).
_OUTQ: Final = getattr(termios, "TIOCOUTQ", None) if sys.platform == "linux" else None


class _Protocol(asyncio.BufferedProtocol):
    """One client socket; implements the broker's `Link`. `buffer` is the server's read
    buffer, shared by all its sockets: nothing may keep a view of it past a read."""

    __slots__ = (  # one per connection (many idle devices)
        "_broker",
        "_buffer",
        "_buffered",
        "_clock",
        "_failed",
        "_held",
        "_lingering",
        "_tcp",
        "_transport",
        "_unread",
        "accepted",
        "congested",
        "connection",
        "gone",
        "identity",
        "peer",
    )

    def __init__(
        self,
        broker: Broker,
        clock: Clock,
        buffer: memoryview,
        unread: set[_Protocol],
        lingering: set[_Linger],
        failed: Callable[[PeerAddress, str], None],
        accepted: float | None = None,
    ) -> None:
        self._broker = broker
        self._clock = clock
        self._failed = failed  # the server's: logs a close for a protocol error, or counts it
        # When a TLS listener accepted the socket, before its handshake: the CONNECT timeout
        # counts from there (None: from connection_made, as for a plain socket).
        self.accepted = accepted
        self._buffer = buffer
        self._unread = unread  # the server's: its sockets not read now, this one among them
        self._lingering = lingering  # the server's: sockets closed, read until they end
        limits = broker.limits
        self.connection = Connection(
            max_packet_size=limits.max_packet_size,
            receive_maximum=limits.receive_maximum,
            topic_alias_maximum=limits.topic_alias_maximum,
            now=clock.now(),
        )
        self.peer = PeerAddress("?")
        self.identity: str | None = None  # the user name its certificate gives (Link)
        self.gone = False  # refused at connection_made, or closed for a protocol error
        self.congested = False
        self._held = False  # the broker paused reading (`pause_reading`)
        self._buffered = 0  # `_unread_bytes` at the last tick while congested
        self._transport: asyncio.Transport | None = None
        self._tcp: socket.socket | None = None  # for acknowledge_reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; uvloop's does not subclass asyncio.Transport, so no isinstance.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        self.peer = peer_address(transport)
        transport.set_write_buffer_limits(high=_WRITE_HIGH)
        self._tcp = transport.get_extra_info("socket")  # the listeners are all TCP
        if not self._broker.opened(self, self.accepted):
            self.gone = True
            transport.abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        data = self._buffer[:nbytes]  # copied by the connection's frame reader at once
        try:
            # One at a time: the packets before a bad one are acted on, as they would be alone.
            self._broker.received(self, self.connection.packets(data, self._clock.now()))
        except ProtocolViolation as error:
            self._fail(error)
        except OSError as error:
            # Disk work done on the loop (a look for the subscriptions on disk a PUBLISH may
            # go to) that the file system failed (EMFILE, EIO): raised on, asyncio closed the
            # socket without a word (it logs an OSError of a read in debug mode only).
            failure = store_failure(error)
            log.error("%s: closing: %s", self.peer, failure)
            self.gone = True
            self.flush()
            self._broker.closed(self, f"closed by the server: {failure}")
            self.close()

    def _fail(self, error: ProtocolViolation) -> None:
        self.gone = True
        self.flush()
        goodbye, told = self.connection.closing(error)
        self._failed(self.peer, f"{error} ({told})")
        transport = self._transport
        if transport is not None and goodbye and not transport.is_closing():
            transport.write(goodbye)
        self._broker.closed(self, f"protocol error: {error}")
        self.close()

    def flush(self) -> None:
        out = self.connection.data_to_write()
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            transport.write(out)

    def close(self) -> None:
        """Close once what is buffered for the client is written, and the client had the
        time to read it (`_Linger`), or `_LINGER` seconds later at the latest: a client that
        does not read would otherwise keep its socket and up to the high-water mark of our
        memory for good (the peer acknowledges TCP's window probes, so the kernel never gives
        up), out of the broker's count of connections. This protocol is done with the socket:
        what the broker asks of it from now on (flush, pause_reading) does nothing."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if transport.can_write_eof():  # TCP
            self._transport = self._tcp = None
            self._unread.discard(self)
            self._lingering.add(_Linger(self, transport, self._buffer, self._lingering))
            return
        # TLS: a half-close of the TCP socket under it would cut its close_notify off, and
        # asyncio's SSL transport has none of its own (can_write_eof is False). Its close
        # sends close_notify once the buffer is written and reads until the client's, for up
        # to ssl_shutdown_timeout (`_LINGER`, `_TlsHandshake`): the client's last bytes are
        # read meanwhile, as `_Linger` reads them, and only what comes after the client's
        # close_notify or that timeout can still draw a RST.
        transport.close()
        if transport.get_write_buffer_size():
            asyncio.get_running_loop().call_later(_LINGER, transport.abort)

    def pause_reading(self) -> None:
        self._held = True
        self._read_or_not()

    def resume_reading(self) -> None:
        self._held = False
        self._read_or_not()

    def _read_or_not(self) -> None:
        """The one place that pauses and resumes reading: paused while the broker holds the
        client or while its write buffer is over the high-water mark, read once neither."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._held or self.congested:
            if self not in self._unread:
                self._unread.add(self)
                transport.pause_reading()
        elif self in self._unread:
            self._unread.discard(self)
            transport.resume_reading()

    def heard_unread(self, now: float) -> None:
        """A tick while the client is not read (see the module's docstring): whether it
        counts as heard from."""
        transport = self._transport
        if transport is None:
            return
        if self.congested:
            buffered = self._unread_bytes(transport)
            if buffered < self._buffered:  # it read some
                self.connection.last_heard = now
            self._buffered = buffered
        else:  # held by the broker: its silence is ours
            self.connection.last_heard = now

    def acknowledge_reads(self) -> None:
        if self._tcp is not None and _QUICKACK is not None:
            with contextlib.suppress(OSError):  # closed meanwhile: nothing left to acknowledge
                self._tcp.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)

    def _unread_bytes(self, transport: asyncio.Transport) -> int:
        """What was written for the client and is not read by it yet, as far as we see: our
        write buffer and, on Linux, the kernel's send queue. The kernel's counts: it takes
        up to 4 MiB on its own, and our buffer shrinks only once a good part of that is
        free, which a client reading slowly may take longer than its keep-alive to free."""
        size = transport.get_write_buffer_size()
        if _OUTQ is not None and self._tcp is not None:
            with contextlib.suppress(OSError):  # closed meanwhile
                queued = fcntl.ioctl(self._tcp.fileno(), _OUTQ, bytes(4))
                size += int.from_bytes(queued, sys.byteorder)
        return size

    def pause_writing(self) -> None:
        self.congested = True
        if self._transport is not None:
            self._buffered = self._unread_bytes(self._transport)
        self._read_or_not()

    def resume_writing(self) -> None:
        self.congested = False
        self._read_or_not()
        self._broker.pump_all()
        self._broker.flush()

    def eof_received(self) -> bool | None:
        return None  # close: MQTT has no half-closed connections

    def connection_lost(self, exc: Exception | None) -> None:
        self._unread.discard(self)
        self._broker.closed(self, "connection lost" if exc is None else f"connection lost: {exc}")


class _Linger(asyncio.BufferedProtocol):
    """A TCP socket the server closed (`_Protocol.close`), until it ends: its write side is
    shut once what was buffered for the client is written (FIN after the last packet), and
    what the client still sends is read and dropped, for `_DISCARD_TIME` seconds and
    `_DISCARD_BYTES` bytes at most (`_LINGER` seconds if the buffer was not written yet),
    then it is closed; at once if the client closes its side first.

    Closed at once, a socket with bytes of the client unread in the kernel, or that gets more
    from it, is answered with a RST (Linux, RFC 2525 §2.17), which also drops what the kernel
    had not sent yet: a client that writes before it reads (a PUBREL after the PUBLISH that
    drew DISCONNECT 0x93, a PINGREQ after a refused CONNECT; paho's loops) failed its write
    with ECONNRESET or EPIPE and never read why it was disconnected. Reading the socket out
    keeps its receive queue empty, so the close that ends it sends nothing more.

    The connection stops counting for max_connections when the broker forgets it, as
    before: at once for a DISCONNECT, a kick or a protocol error (`Broker.closed` comes before
    `close`), at the end of the linger for a refused CONNECT or a CONNECT timeout (at
    `connection_lost`), so that those, which need no more than a socket, cannot pile up past
    the limit. Reads go into the server's one buffer, as a client's (`_Protocol.get_buffer`)."""

    __slots__ = ("_buffer", "_left", "_lingering", "_protocol", "_timer", "_transport", "ended")

    def __init__(
        self,
        protocol: _Protocol,
        transport: asyncio.Transport,
        buffer: memoryview,
        lingering: set[_Linger],
    ) -> None:
        self._protocol = protocol  # told connection_lost, as if it had been its own
        self._transport = transport
        self._buffer = buffer
        self._lingering = lingering
        self._left = _DISCARD_BYTES
        loop = asyncio.get_running_loop()
        self.ended: asyncio.Future[None] = loop.create_future()  # awaited at shutdown
        wait = _LINGER if transport.get_write_buffer_size() else _DISCARD_TIME
        self._timer = loop.call_later(wait, transport.abort)
        transport.set_protocol(self)
        try:
            transport.write_eof()  # once the buffer is written, if it is not yet
        except OSError:  # ENOTCONN: reset by the client, not yet read: nothing to shut
            transport.abort()
            return
        transport.resume_reading()  # if the broker or a congestion had paused it

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._left -= nbytes
        if self._left < 0:
            self._transport.abort()  # no more reads for one that would not stop

    def eof_received(self) -> bool | None:
        return None  # the client closed too: asyncio closes the socket

    def abort(self) -> None:
        """Shutting down: end it now (its FIN was sent, or it is not written anyway)."""
        self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        self._lingering.discard(self)
        if not self.ended.done():
            self.ended.set_result(None)
        self._protocol.connection_lost(exc)


class _TlsHandshake(asyncio.Protocol):
    """A socket of a TLS listener until its handshake is over, then the `_Protocol` it makes.

    It is first the plain socket's protocol (reading paused: `loop.start_tls` reads), then
    the TLS transport's, and keeps what the TLS transport hands it before `_Protocol` is made
    (a client's CONNECT may come with its last handshake message, and its end too), which
    `_Protocol` then gets in order. After that it passes on what still comes to it.

    Its handshake counts as a connection for max_connections until it ends (the broker's
    `handshake_started`, `handshake_ended`): one past the limit is closed at once.
    """

    def __init__(self, server: MqttServer, context: ssl.SSLContext, identity: bool) -> None:
        self._server = server
        self._context = context
        self._identity = identity  # the certificate's Common Name is the user name
        self._early: list[bytes | None] = []  # bytes, or None for the end of the stream
        self._lost: list[Exception | None] = []  # connection_lost's argument, once lost
        self._next: _Protocol | None = None
        self._task: asyncio.Task[None] | None = None
        self._counted = False  # its handshake counts against max_connections (`_uncount`)
        self._accepted = 0.0  # when its socket was accepted (`_Protocol.accepted`)
        self._accepted_steady: float | None = None  # the same, on the monotonic clock

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        transport.pause_reading()  # the TLS transport reads from here: nothing may come first
        shown = peer_address(transport)
        self._accepted = self._server.now()
        self._accepted_steady = self._server.steady()
        if not self._server.broker.handshake_started(shown):
            transport.abort()
            return
        self._counted = True
        self._task = asyncio.get_running_loop().create_task(self._handshake(transport, shown))
        self._server.handshakes.add(self._task)
        self._task.add_done_callback(self._server.handshakes.discard)
        self._task.add_done_callback(self._uncount)  # cancelled by `close` before it ran

    def _uncount(self, _: object = None) -> None:
        if self._counted:
            self._counted = False
            self._server.broker.handshake_ended()

    def _accepted_now(self) -> float:
        """When its socket was accepted, read from the wall clock as it is now: the time the
        handshake took on the monotonic clock, before now. The wall clock stepped forward an
        hour during a handshake (`Broker.clock_stepped` moves the connections, not these)
        closed its connection at the next tick for no CONNECT."""
        steady = self._server.steady()
        if steady is None or self._accepted_steady is None:
            return self._accepted
        return self._server.now() - (steady - self._accepted_steady)

    async def _handshake(self, transport: asyncio.Transport, peer: PeerAddress) -> None:
        timeout = self._server.settings.limits.connect_timeout
        loop = asyncio.get_running_loop()
        # start_tls puts its SSL protocol on the socket at once and queues the socket's first
        # read after this callback: the protocol reads into the shared buffer from the start.
        loop.call_soon(self._server.share_tls_buffer, transport)
        try:
            tls = await loop.start_tls(
                transport,
                self,
                self._context,
                server_side=True,
                # A socket still in its handshake is no client yet: it gets the time a CONNECT
                # gets, not asyncio's minute, or silent sockets could hold descriptors.
                ssl_handshake_timeout=timeout,
                # A TLS socket the server closes (no CONNECT in time, a keep-alive over, a
                # refused CONNECT) waits for its client's close_notify: asyncio's 30 s, its
                # descriptor and max_connections slot held, for a client gone from the network
                # or one that stalls on purpose. It gets what a plain one's last bytes get.
                ssl_shutdown_timeout=_LINGER,
            )
        except OSError as error:  # ssl.SSLError, the timeout's ConnectionAbortedError, EOF
            self._server.handshake_failed(peer, *_handshake_failure(error, timeout))
            transport.abort()  # start_tls closed it: nothing is left to write
            return
        finally:
            self._uncount()  # before `_Protocol` counts itself as a connection (`opened`)
        if tls is None:  # closed meanwhile
            return
        protocol = self._server.protocol(self._accepted_now())
        if self._identity:
            protocol.identity = _common_name(tls.get_extra_info("peercert"))
            if protocol.identity is None:
                # Told once, then counted by client host, as a failed handshake: a device
                # that retries with its certificate wrote a line a try.
                self._server.protocol_failed(peer, _NO_COMMON_NAME)
                tls.abort()
                return
        self._next = protocol
        tls.set_protocol(protocol)
        protocol.connection_made(tls)
        for data in self._early:
            if protocol.gone:
                break  # refused or failed: the broker has forgotten it
            if data is None:
                protocol.eof_received()  # the TLS transport is closing already
            else:
                _feed(protocol, data)
        self._early = []
        for exc in self._lost:
            protocol.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._next is None:
            self._early.append(bytes(data))
        else:
            _feed(self._next, data)

    def eof_received(self) -> bool | None:
        if self._next is None:
            self._early.append(None)
            return None
        return self._next.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._next is None:
            self._lost.append(exc)
        else:
            self._next.connection_lost(exc)


_NO_COMMON_NAME: Final = (
    "the client's certificate has no Common Name, which this listener takes as its user name "
    "(identity_as_username)"
)


def _common_name(certificate: object) -> str | None:
    """The last Common Name of a certificate's subject, as `SSLSocket.getpeercert` gives it
    (a tuple of RDNs, each of (name, value) pairs); None if it has none."""
    if not isinstance(certificate, dict):
        return None
    subject = certificate.get("subject", ())
    names = [value for rdn in subject for name, value in rdn if name == "commonName"]
    return names[-1] if names else None


def _feed(protocol: _Protocol, data: bytes) -> None:
    """Hand `data` to `protocol` as a read of its own would."""
    view = memoryview(data)
    while view:
        buffer = protocol.get_buffer(len(view))
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        view = view[size:]
        protocol.buffer_updated(size)


# ssl's reasons for the failed handshakes an operator meets most, in words (what to check).
_HANDSHAKE_REASONS: Final = {
    "WRONG_VERSION_NUMBER": "not TLS (a client without TLS on the TLS port?)",
    "HTTP_REQUEST": "an HTTP request, not TLS",
    "UNSUPPORTED_PROTOCOL": "the client offers only TLS versions under 1.2",
    "TLSV1_ALERT_PROTOCOL_VERSION": "the client wants another TLS version",
    "TLSV1_ALERT_UNKNOWN_CA": "the client does not trust this server's certificate",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the client refused this server's certificate",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the client refused this server's certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the client says this server's certificate has expired",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "the client sent no certificate, which this listener "
    "requires (tls.ca)",
    "NO_SHARED_CIPHER": "no cipher both sides accept",
    # What a mosquitto client (libmosquitto) answers a certificate without the name it was
    # told to connect to (-h 127.0.0.1 for a certificate of DNS:localhost); it then says only
    # "A TLS error occurred", so this line is the operator's one clue.
    "TLSV1_ALERT_INTERNAL_ERROR": "the client gave up on its side (a mosquitto client does "
    "when the host it connects to is not a name in this server's certificate: connect to "
    "one of those, or add the name to the certificate's subjectAltName)",
}


# OpenSSL's verify codes (x509_vfy.h) for a client certificate no CA of the listener signed:
# "unable to get local issuer certificate" does not say which CA, nor whose is missing.
_NOT_FROM_THE_CA: Final = {
    18: " (it signed itself; give the client one signed by a CA of tls.ca)",  # DEPTH_ZERO_...
    19: " (its chain ends in a CA that is not in tls.ca)",  # SELF_SIGNED_CERT_IN_CHAIN
    20: " (its issuer is not in tls.ca: a certificate of another CA?)",  # ..._LOCALLY
}


def _handshake_failure(error: OSError, timeout: float) -> tuple[int, str]:
    """The log level and the words for a TLS handshake that failed with `error`: INFO, as a
    refused CONNECT, for what a client did; DEBUG for a socket closed before or during the
    handshake (a port check), as a plain socket closed without a CONNECT is not logged."""
    if isinstance(error, ssl.SSLCertVerificationError):  # the client's certificate
        why = _NOT_FROM_THE_CA.get(error.verify_code, "")
        return logging.INFO, (
            f"the client's certificate is not accepted: {error.verify_message}{why} "
            f"(ssl: {error.reason})"
        )
    if isinstance(error, ssl.SSLError):
        reason = error.reason or type(error).__name__
        words = _HANDSHAKE_REASONS.get(reason)
        return logging.INFO, f"{words} (ssl: {reason})" if words else f"ssl: {reason}"
    if isinstance(error, ConnectionAbortedError):  # start_tls's own timeout
        return logging.INFO, f"no TLS handshake within {spelled(timeout)}"
    return logging.DEBUG, f"the client closed the connection ({error or type(error).__name__})"


# Accepting stops for a while when the process (or the system) is out of what a socket
# needs: asyncio's own loop (3.11) logs a traceback and schedules a retry for each of up to
# 100 accepts in a row that fail so, and each retry does the same (55,741 tracebacks in 17 s
# under `ulimit -n 256` with 400 clients, docs/operations.md).
_OUT_OF: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_RETRY: Final = 0.25  # seconds between tries to accept while out of descriptors
_BACKLOG: Final = 100  # connections waiting to be accepted (the kernel's queue); asyncio's
_MOST_KEPT: Final = 256  # descriptors kept for files, at most (an eighth of the limit below)


def _out_of_words(error: OSError) -> str:
    """What a failed accept ran out of, and where to raise it."""
    if error.errno == errno.EMFILE:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (
            f"this process has too many open files (its limit, ulimit -n, is {soft}: raise "
            "it, or lower [mqtt.limits] max_connections)"
        )
    if error.errno == errno.ENFILE:
        return "the system has too many open files (raise fs.file-max)"
    return f"out of memory for sockets ({error.strerror})"


class _Descriptors:
    """The descriptors kept for the broker's files: a connection accepted on one of the last
    `kept` below the limit of open files is closed at once, so that clients alone never take
    every descriptor and leave a publication, a session's record or a sweep to fail with
    EMFILE. The socket's own number tells how many are in use: the kernel gives the lowest
    free one, so every descriptor below it is taken (no count of /proc/self/fd, which would
    cost a look at every open file per accept)."""

    def __init__(self) -> None:
        self.limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # after serve raised it
        self.kept = min(self.limit // 8, _MOST_KEPT)
        self._refused = Refusals()

    @property
    def connections(self) -> int:
        """About the most connections the limit leaves room for."""
        return max(0, self.limit - self.kept)

    def admits(self, fd: int, url: str) -> bool:
        if self.limit == resource.RLIM_INFINITY or fd < self.limit - self.kept:
            if refused := self._refused.accepted():
                log.info("%s: accepting connections again (%d refused meanwhile)", url, refused)
            return True
        if self._refused.refused():
            log.warning(
                "%s: refusing new connections: %d of the %d descriptors this process may "
                "open (ulimit -n) are in use, the last %d are kept for the broker's files "
                "(told once, and again when connections are accepted again; raise the "
                "limit, or lower [mqtt.limits] max_connections)",
                url,
                fd,
                self.limit,
                self.kept,
            )
        return False


async def _listen(listener: Listener) -> list[socket.socket]:
    """The sockets bound for `listener` (a host name may give several addresses), by
    asyncio, which also says what it could not bind; we accept from them (`_Listening`).
    A host name that does not resolve is reported with the listener's address, as asyncio
    reports an address it cannot bind: getaddrinfo's own message ("Name or service not
    known") names nothing to fix."""
    loop = asyncio.get_running_loop()
    try:
        server = await loop.create_server(
            asyncio.Protocol,
            listener.host,
            listener.port,
            reuse_address=True,
            start_serving=False,
        )
    except socket.gaierror as error:
        code, problem = error.errno, (error.strerror or str(error)).lower()
    except UnicodeError:
        # getaddrinfo encodes a host name by IDNA first, which fails, as no error of a
        # bind, on a label (the text between two dots) empty or over 63 characters.
        code = socket.EAI_NONAME
        problem = f"not a host name ({HOST_NAME_RULE})"
    else:
        # Copies of its sockets, ours to listen on; closing the server closes its own.
        sockets = [socket.socket(fileno=os.dup(sock.fileno())) for sock in server.sockets]
        server.close()
        try:
            _hold(sockets)
        except BaseException:
            close_sockets([sockets])
            raise
        return sockets
    address = (listener.host, listener.port)
    raise socket.gaierror(code, f"cannot resolve the host of address {address!r}: {problem}")


def _hold(sockets: Sequence[socket.socket]) -> None:
    """Listen on `sockets` at once, which alone keeps their port from another program: with
    SO_REUSEADDR (set so that a restart is not refused by the last run's connections in
    TIME_WAIT) Linux lets two sockets bind one port while neither listens, so a second
    `boxmq serve` on the port bound too, opened and recovered its root, and was refused only
    at its listen() after that. A listen() refused here (two serves that bound at the same
    moment) is told as a bind is, with the address."""
    for sock in sockets:
        try:
            sock.listen(_BACKLOG)
        except OSError as error:
            address = sock.getsockname()
            problem = (error.strerror or str(error)).lower()
            raise OSError(
                error.errno, f"error while attempting to bind on address {address!r}: {problem}"
            ) from None


async def bind_listeners(listeners: Sequence[Listener]) -> list[list[socket.socket]]:
    """The sockets of each listener, bound and listening (`_hold`); `MqttServer.start`
    accepts from them after the recovery: a client that connects meanwhile waits in the
    kernel's queue. `boxmq serve` binds them before it opens the root, so that an address in
    use (another serve's too) or a host that does not resolve stops it before it makes the
    root or recovers it. The sockets are plain ones, of no loop: bound in one, they are
    served in another. On an error, those bound before it are closed."""
    bound: list[list[socket.socket]] = []
    try:
        for listener in listeners:
            # Two of them whose addresses overlap on one port (0.0.0.0 beside 127.0.0.1,
            # localhost beside 127.0.0.1, in either order) are refused here by the kernel:
            # the first listens already, and Linux binds no socket beside a listening one.
            bound.append(await _listen(listener))
    except BaseException:
        close_sockets(bound)
        raise
    return bound


def close_sockets(sockets: Sequence[list[socket.socket]]) -> None:
    for socks in sockets:
        for sock in socks:
            sock.close()


class _Listening:
    """One listening socket, accepted from by us rather than by `asyncio.Server`: a socket
    the process has no descriptor for leaves accepting paused for `_ACCEPT_RETRY` seconds,
    told once (and once more when it accepts again); the clients it has are served meanwhile,
    and the connections waiting stay in the kernel's queue until a descriptor is free."""

    def __init__(
        self,
        sock: socket.socket,
        url: str,
        factory: Callable[[], asyncio.BaseProtocol],
        descriptors: _Descriptors,
    ) -> None:
        self._sock = sock
        self._url = url
        self._factory = factory
        self._descriptors = descriptors
        self._loop = asyncio.get_running_loop()
        self._failing = RecurringFailure()
        self._retry: asyncio.TimerHandle | None = None
        self._opening: set[asyncio.Task[object]] = set()  # accepted sockets being wrapped
        sock.setblocking(False)  # listening already, since it was bound (`_hold`)
        self._loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(_BACKLOG):  # as asyncio's: other events get their turn after these
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                # Only with the kernel's queue empty is a shortage over: a descriptor freed
                # by one client leaving, taken by the next waiting, is no end of it.
                if self._failing.recovered():
                    log.info("%s: accepting connections again", self._url)
                return
            except ConnectionAbortedError:
                continue  # reset by the client before we took it
            except OSError as error:
                if error.errno not in _OUT_OF:
                    raise  # the loop logs it; the listener goes on
                self._pause(error)
                return
            if not self._descriptors.admits(conn.fileno(), self._url):
                conn.close()  # closed at once, as over max_connections: the client retries
                continue
            conn.setblocking(False)
            task = self._loop.create_task(self._loop.connect_accepted_socket(self._factory, conn))
            self._opening.add(task)
            task.add_done_callback(partial(self._opened, conn))

    def _opened(self, conn: socket.socket, task: asyncio.Task[object]) -> None:
        self._opening.discard(task)
        if task.cancelled():
            # By `close`: one cancelled before it started never took the socket, which was
            # left open (a ResourceWarning at shutdown). Taken, its transport closes it too.
            conn.close()
        elif task.exception() is not None:  # closed meanwhile
            log.debug("%s: an accepted socket failed: %s", self._url, task.exception())

    def _pause(self, error: OSError) -> None:
        if self._failing.news(error):
            log.error(
                "%s: cannot accept a connection: %s: new clients wait in the kernel's "
                "queue until connections close, those connected are served (told once)",
                self._url,
                _out_of_words(error),
            )
        self._loop.remove_reader(self._sock.fileno())
        self._retry = self._loop.call_later(_ACCEPT_RETRY, self._resume)

    def _resume(self) -> None:
        self._retry = None
        self._loop.add_reader(self._sock.fileno(), self._accept)

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        else:
            self._loop.remove_reader(self._sock.fileno())
        for task in self._opening:
            task.cancel()
        self._sock.close()


class MqttServer:
    """The listeners of `settings`, one broker behind them, and its timer."""

    def __init__(
        self,
        box: Box,
        settings: MqttSettings,
        *,
        clock: Clock | None = None,
        steady: Callable[[], float] | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        # What a step of the clock is told against, from tick to tick (`_stepped`): the
        # system's monotonic clock for the system's, passed or not (a SystemClock passed got
        # none, and no step was told); a test's clock comes with its own, or none (a
        # ManualClock moved by hand is no step).
        system = isinstance(self._clock, SystemClock)
        self._steady = steady if steady is not None or not system else time.monotonic
        self.broker = Broker(box, settings, self._clock)
        self.settings = settings
        self._listening: list[_Listening] = []
        self._read_buffer = memoryview(bytearray(_READ_SIZE))  # one loop: reads never overlap
        self._unread: set[_Protocol] = set()  # sockets not read now (_Protocol._read_or_not)
        self._lingering: set[_Linger] = set()  # sockets closed, read until they end (_Linger)
        self.handshakes: set[asyncio.Task[None]] = set()  # TLS handshakes under way
        self._tls_buffer: bytearray | None = None  # the TLS sockets' reads (share_tls_buffer)
        # Failed handshakes by client host and reason: a client that retries every second
        # with an expired certificate is told once, then counted (handshake_failed).
        self._failed_handshakes: DropLog[tuple[str, str]] = DropLog()
        # Sockets closed for a protocol error, by client host and error, so too: a script
        # sending the same bad packet in a loop wrote a line a socket (protocol_failed).
        self._protocol_errors: DropLog[tuple[str, str]] = DropLog()
        self._token: str | None = None  # this process, marked a broker from `start` (brokers.py)
        self._marked = False  # the mark made: one the disk refused is tried at each tick
        self._mark_refused = RecurringFailure()

    def protocol(self, accepted: float | None = None) -> _Protocol:
        """The protocol of a client's socket (after its TLS handshake, on a TLS listener,
        whose socket was `accepted` then)."""
        return _Protocol(
            self.broker,
            self._clock,
            self._read_buffer,
            self._unread,
            self._lingering,
            self.protocol_failed,
            accepted,
        )

    def now(self) -> float:
        return self._clock.now()

    def steady(self) -> float | None:
        """The monotonic clock the steps of the wall clock are told against; None if there
        is none (a test's own wall clock alone)."""
        return None if self._steady is None else self._steady()

    def handshake_failed(self, peer: PeerAddress, level: int, words: str) -> None:
        """Log a failed TLS handshake: the first from a client address for a reason at once,
        with its port; those after it from there for that reason counted, and told as one
        line per `DropLog.interval` while they go on (`tell_failed_handshakes`)."""
        if level < logging.INFO:  # a closed socket, a port check: not counted, rarely shown
            log.log(level, "%s: TLS handshake failed: %s", peer, words)
            return
        if self._failed_handshakes.dropped((peer.host, words), now=self._clock.now()):
            log.log(level, "%s: TLS handshake failed: %s", peer, words)

    def tell_failed_handshakes(self, *, now: float | None = None) -> None:
        """Log the failed handshakes counted in the intervals over by `now` (None: all), and
        the sockets closed for a protocol error (`protocol_failed`)."""
        tell_by_host(self._failed_handshakes, "TLS handshake(s) failed", now=now)
        tell_by_host(self._protocol_errors, "connection(s) closed", now=now)

    def protocol_failed(self, peer: PeerAddress, words: str) -> None:
        """Log a socket closed for a protocol error: the first from a client address for that
        error at once, with its port; those after it counted as failed handshakes are."""
        if self._protocol_errors.dropped((peer.host, words), now=self._clock.now()):
            log.info("%s: closing: %s", peer, words)

    def share_tls_buffer(self, transport: asyncio.BaseTransport) -> None:
        """Give the SSL protocol that `start_tls` put on the TCP `transport` the loop's one
        buffer for encrypted reads in place of its own (see the module's docstring). asyncio's
        SSL protocol (3.11 on) keeps it in `_ssl_buffer`, asks for reads of its length, and
        copies each read into its MemoryBIO in `buffer_updated`, before the next read, in its
        handshake as after it: another loop's (uvloop's) is left as it is."""
        ssl_protocol: Any = transport.get_protocol()  # asyncio's private attributes, below
        own = getattr(ssl_protocol, "_ssl_buffer", None)
        if not isinstance(own, bytearray):
            return
        if self._tls_buffer is None or len(self._tls_buffer) < len(own):
            self._tls_buffer = bytearray(len(own))  # shorter, and get_buffer would make another
        ssl_protocol._ssl_buffer = self._tls_buffer
        ssl_protocol._ssl_buffer_view = memoryview(self._tls_buffer)

    async def start(
        self, sockets: Sequence[list[socket.socket]] | None = None
    ) -> list[tuple[str, int]]:
        """Listen on every listener; the addresses bound (a port of 0 gets a free one).
        `sockets`: each listener's, bound already (`bind_listeners`); None: bound here."""
        self.broker.resume_expiries()  # before any client: one that returns cancels its own
        # Before any client too: its memberships name this process, and the CLI, which must
        # not end them, tells them from a `boxmq subscribe` run's by this mark (brokers.py).
        self._token = process_token()
        self._mark()
        own = sockets is None
        if sockets is None:
            sockets = await bind_listeners(self.settings.listeners)
        bound: list[tuple[str, int]] = []
        descriptors = _Descriptors()  # here: after serve raised the limit
        self._tell_room(descriptors)
        open_to_all: list[str] = []
        try:
            for listener, socks in zip(self.settings.listeners, sockets, strict=True):
                for sock in socks:
                    host, port = sock.getsockname()[:2]
                    url = listener_url(host, port, tls=listener.ssl is not None)
                    accepting = _Listening(sock, url, self._factory(listener), descriptors)
                    self._listening.append(accepting)
                    bound.append((host, port))
                    log.info("MQTT listening on %s", url)
                    if open_to_anyone(self.settings, listener, host):
                        open_to_all.append(url)
        except BaseException:
            # Each socket listens since it was bound (`_hold`), so no listen() can be refused
            # here; whatever else fails midway leaves nothing accepting: those set up stop,
            # their sockets closed (a caller's too: closing twice is harmless), and the rest
            # of the sockets bound here are closed; the rest of a caller's own are its to
            # close, as `boxmq serve` does.
            for listening in self._listening:
                listening.close()
            self._listening = []
            if own:
                close_sockets(sockets)
            raise
        # Once every listener is bound: before, a host that then did not resolve was called
        # open to the network, a line before the error that stopped serve.
        if open_to_all:
            log.warning("%s", open_warning(self.settings, open_to_all))
        return bound

    def _mark(self) -> None:
        """This process marked a broker (brokers.py); a refusal told once, as its end. Made
        before a membership the disk takes once it is writable again, give or take a tick."""
        assert self._token is not None
        root = self.broker.box.root
        refused = brokers.mark(root, self._token)
        if refused is None:
            self._marked = True
            if self._mark_refused.recovered():
                log.info("MQTT: this broker is marked in %s at last", brokers.folder(root))
        elif self._mark_refused.news(refused):
            log.warning(
                "MQTT: this broker could not mark itself in %s, tried again at each tick; "
                "till then `boxmq unsubscribe` does not know its clients' share group "
                "memberships from a `boxmq subscribe` run's: %s",
                brokers.folder(root),
                store_failure(refused),
            )

    def _tell_room(self, descriptors: _Descriptors) -> None:
        """A max_connections the limit of open files leaves no room for is warned of at
        start, not found by the client it refuses."""
        room, most = descriptors.connections, self.settings.limits.max_connections
        if descriptors.limit != resource.RLIM_INFINITY and room < most:
            log.warning(
                "MQTT: about %d connections at most, not [mqtt.limits] max_connections = %d: "
                "the limit of open files (ulimit -n) is %d, and %d of it are kept for the "
                "broker's files (raise the hard limit: docs/operations.md)",
                room,
                most,
                descriptors.limit,
                descriptors.kept,
            )

    def _factory(self, listener: Listener) -> Callable[[], asyncio.BaseProtocol]:
        context = listener.ssl
        if context is None:
            return self.protocol
        return lambda: _TlsHandshake(self, context, listener.identity_as_username)

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set, then close (see `close`)."""
        steady = self._steady
        last = (self._clock.now(), steady()) if steady is not None else None
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=_TICK)
                now = self._clock.now()
                if steady is not None and last is not None:
                    last = self._stepped(last, (now, steady()))
                self._heard_unread(now)
                if not self._marked:
                    self._mark()
                self.broker.tick(now)
                self.tell_failed_handshakes(now=now)
        finally:
            await self.close()

    def _stepped(self, last: tuple[float, float], now: tuple[float, float]) -> tuple[float, float]:
        """(wall, monotonic) `now`, after the broker was told of a step of the wall clock
        since the `last` tick's (`Broker.clock_stepped`)."""
        step = (now[0] - last[0]) - (now[1] - last[1])
        if abs(step) >= _STEP:
            log.warning(
                "the wall clock was stepped %s %s: the keep-alives and CONNECT timeouts move "
                "with it; lock deadlines and expirations do not (docs/operations.md, Clocks)",
                "forward" if step > 0 else "back",
                spelled(round(abs(step), 1)),
            )
            self.broker.clock_stepped(step)
            self._failed_handshakes.shift(step)
            self._protocol_errors.shift(step)
        return now

    def _heard_unread(self, now: float) -> None:
        """Before the keep-alives are checked: the clients not read now that count as heard
        (`_Protocol.heard_unread`)."""
        for link in list(self._unread):
            link.heard_unread(now)

    async def close(self) -> None:
        """Stop accepting, tell the clients, and finish the disk work under way: whatever a
        client was told is stored stays stored."""
        for listening in self._listening:
            listening.close()
        self._listening = []
        for handshake in list(self.handshakes):
            handshake.cancel()  # start_tls closes its socket
        self.tell_failed_handshakes()
        await self.broker.close()
        if self._token is not None:
            brokers.unmark(self.broker.box.root, self._token)
        await self._lingered()
        log.info("MQTT listeners closed")

    async def _lingered(self) -> None:
        """The sockets the broker closed now (a v5 client is sent DISCONNECT 0x8B) or before
        linger as any closed socket does, each ended by its own limit (`_Linger`: 1 second
        once its buffer is written, 5 from the close while it is not), so no more than
        `_LINGER` in all: aborted at once, a client that still had much to read lost the
        DISCONNECT behind it (the abort's RST drops what the kernel had not sent, and what
        the client had not read), as the first of test_mqtt_shutdown_linger's SIGTERMs did;
        with 1 second in all, two of its twenty on a loaded machine. Those left then are
        aborted: they would outlive the loop."""
        if self._lingering:
            await asyncio.wait([linger.ended for linger in self._lingering], timeout=_LINGER)
        for linger in list(self._lingering):
            linger.abort()
