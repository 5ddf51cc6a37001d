"""What the MQTT door is told at start: where to listen, who may do what, and its limits.

These are plain values built by `boxmq serve` from the config file and the flags; the server
reads them and never parses anything itself. Authentication and authorization are protocols
so that the password file and the ACL file (or a test's stand-in) plug in the same way.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from boxmq.host_names import host_port

__all__ = [
    "Authenticator",
    "Authorizer",
    "Limits",
    "Listener",
    "MqttSettings",
    "host_port",
    "listener_url",
    "open_to_anyone",
    "open_warning",
]


@dataclass(frozen=True)
class Listener:
    """One socket: plain TCP, or TLS when `ssl` is set."""

    host: str = "127.0.0.1"
    port: int = 1883
    ssl: ssl.SSLContext | None = None
    # TLS with a required client certificate: its subject's Common Name is the client's user
    # name, and the CONNECT's user name and password are not asked (mosquitto's
    # use_identity_as_username).
    identity_as_username: bool = False
    # The file the TLS private key was read from (`key`, or `cert` holding it too): serve
    # warns at start of one that other users of the machine may read.
    tls_key: Path | None = None

    def __str__(self) -> str:
        return listener_url(self.host, self.port, tls=self.ssl is not None)


def listener_url(host: str, port: int, *, tls: bool) -> str:
    """`mqtt://host:port` (`mqtts` with TLS)."""
    return f"{'mqtts' if tls else 'mqtt'}://{host_port(host, port)}"


def open_to_anyone(settings: MqttSettings, listener: Listener, address: str) -> bool:
    """True for a socket of `listener` bound on `address` that other machines may reach while
    any client may connect (no password file, no client certificate required): the safe
    default of 127.0.0.1 turned into a broker open to all. The address bound, not the host
    written: a host name is known to be this machine's alone only once it is resolved."""
    if settings.authenticator is not None or _certified(listener):
        return False
    return not ipaddress.ip_address(address.partition("%")[0]).is_loopback


def open_warning(settings: MqttSettings, urls: Sequence[str]) -> str:
    """The warning for the listeners `open_to_anyone` found, `urls` their addresses."""
    return (
        f"{', '.join(urls)}: other machines may reach this, and there is no "
        "password_file: any client may connect there, and read and publish "
        + ("what the ACL allows" if settings.authorizer is not None else "every topic")
        + " (set [security] password_file, or listen on 127.0.0.1)"
    )


def _certified(listener: Listener) -> bool:
    """A TLS listener that lets in only clients with a certificate its `ca` signed."""
    return listener.ssl is not None and listener.ssl.verify_mode == ssl.CERT_REQUIRED


@dataclass(frozen=True)
class Limits:
    """Caps that keep one client from holding the broker's memory or slots."""

    max_connections: int = 10_000
    max_packet_size: int = 1 << 20  # bytes a client may send; v5 clients are told in CONNACK
    receive_maximum: int = 100  # QoS 1/2 PUBLISHes a client may have unacknowledged to us
    max_inflight: int = 100  # QoS 1/2 deliveries unacknowledged by a client (≤ its own maximum)
    max_queued: int = 10_000  # messages queued in memory per session, behind its in-flight window
    max_queued_bytes: int = 64 << 20  # their bytes (payload, topic, properties); 0: no limit
    # Distinct filters one session may hold (share groups included): each durable one is a
    # dropbox on disk, kept after the client leaves; 0: no limit.
    max_subscriptions: int = 1000
    # Levels of a filter a client may subscribe to: the server's index of filters holds an
    # entry per level (~300 bytes), and `a` followed by 65,000 slashes was 19 MB; 0: no limit.
    max_topic_levels: int = 128
    connect_timeout: float = 10.0  # seconds a socket may stay open without a CONNECT
    max_keepalive: int = 65_535  # seconds; a v5 client asking more, or 0 (none), is told ours
    max_session_expiry: int = 7 * 24 * 3600  # seconds
    topic_alias_maximum: int = 100  # aliases a v5 client may set for the topics it publishes


class Authenticator(Protocol):
    def authenticate(self, username: str | None, password: bytes | None, client_id: str) -> bool:
        """True when this CONNECT may go on."""
        ...


class Authorizer(Protocol):
    def can_publish(self, username: str | None, client_id: str, topic: str) -> bool: ...

    def can_subscribe(self, username: str | None, client_id: str, topic_filter: str) -> bool: ...


@dataclass(frozen=True)
class MqttSettings:
    listeners: tuple[Listener, ...] = (Listener(),)
    limits: Limits = field(default_factory=Limits)
    authenticator: Authenticator | None = None  # None: anyone may connect
    authorizer: Authorizer | None = None  # None: everyone may publish and subscribe to anything
    # What a v5 client that sets Request Response Information is told in CONNACK as the
    # basis of its response topics (MQTT 5.0 §3.2.2.3.15), %c and %u filled in; None: nothing.
    response_information: str | None = None
    # Seconds between two publications of the $SYS topics (sys_topics.py); 0: none.
    sys_interval: float = 10.0
