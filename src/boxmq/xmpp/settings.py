"""The values the XMPP door starts with (`boxmq serve --xmpp-*`)."""

from __future__ import annotations

from dataclasses import dataclass

from boxmq.errors import InvalidArgument

__all__ = ["XmppSettings", "parse_server"]


@dataclass(frozen=True, slots=True)
class XmppSettings:
    component: str  # the component's JID, e.g. queue.example.org
    host: str  # the XMPP server's component listener (XEP-0114)
    port: int
    secret: str
    lock_timeout: float = 30.0  # XEP-0254 §4: unanswered deliveries go to the next subscriber
    reconnect_max: float = 30.0  # the longest wait between reconnect attempts

    def __post_init__(self) -> None:
        if not self.component or "@" in self.component or "/" in self.component:
            raise InvalidArgument(f"--xmpp-component {self.component!r}: give a bare domain")
        if not 0 < self.port < 65536:
            raise InvalidArgument(f"xmpp server port {self.port} is not a TCP port")
        if not self.secret:
            raise InvalidArgument("the component secret is empty")
        if self.lock_timeout <= 0:
            raise InvalidArgument("the lock timeout must be a positive number of seconds")


def parse_server(value: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgument(f"--xmpp-server {value!r}: write HOST:PORT, e.g. 127.0.0.1:5347")
    return host.strip("[]"), int(port)
