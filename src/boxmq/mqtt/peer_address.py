"""A client's address, kept as its host and port from the socket on: the password checks take
their turns by the host alone, and the logs write it once, an IPv6 host in brackets
(`[::1]:50312`), where a "host:port" string built first had to be parsed back for its host."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from boxmq.mqtt.settings import host_port

__all__ = ["PeerAddress", "peer_address"]


@dataclass(frozen=True, slots=True)
class PeerAddress:
    """`host` and `port` of a client's socket; no port when the socket gave none (closed
    before it was asked, or not known yet: "?")."""

    host: str
    port: int | None = None

    def __str__(self) -> str:
        return self.host if self.port is None else host_port(self.host, self.port)


def peer_address(transport: asyncio.BaseTransport) -> PeerAddress:
    """The address of the client at the other end of `transport` (a TCP socket's)."""
    address = transport.get_extra_info("peername")
    if isinstance(address, tuple):  # (host, port) or IPv6's (host, port, flowinfo, scope)
        return PeerAddress(str(address[0]), int(address[1]))
    return PeerAddress(str(address))
