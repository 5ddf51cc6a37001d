"""Free TCP ports on 127.0.0.1 for servers the tests start."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each socket stays bound until all are known, where two
    calls in a row could each be given the same port once the first socket was closed."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
