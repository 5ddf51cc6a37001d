"""What a host name must be before a resolver sees it.

A resolver's first step is to encode the name by IDNA, which raises UnicodeError, no error of
the lookup, on a part between two dots that is empty or over 63 characters (`a..b`). Each door
that takes a host (`--mqtt`, `--xmpp-server`, the XMPP settings, a listener's bind) asks here,
so that such a name is refused in one line, never a traceback. And how a host and port are
written in the lines that name them, an IPv6 address in brackets, as they are typed.
"""

from __future__ import annotations

__all__ = ["HOST_NAME_RULE", "host_port", "is_host_name"]

HOST_NAME_RULE = "each part between dots is 1 to 63 characters"


def is_host_name(host: str) -> bool:
    """Whether a resolver's IDNA step takes `host` (an IP address, IPv6 included, passes)."""
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return True


def host_port(host: str, port: int) -> str:
    """`host:port`, an IPv6 address in brackets as URLs write it (RFC 3986 §3.2.2): `[::1]:1883`,
    not `::1:1883`, whose port cannot be told from the address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
