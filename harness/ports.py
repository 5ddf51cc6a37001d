"""Free TCP ports on 127.0.0.1 for the servers the tests and the benchmarks start, kept here
since bench/ runs without tests/ (bench/processes.py puts this folder's parent on sys.path)."""

from __future__ import annotations

import contextlib
import random
import socket

# Where free_ports picks: below the ports the kernel gives a connection as its own
# (ip_local_port_range, 32768-60999 by default). A port picked by bind(("127.0.0.1", 0)) came
# from that range, and between a SIGKILL of `boxmq serve` and its restart on the same port (a
# test's, or bench/chaos.py's while its clients reconnect) a connection of another test or
# client (or a paho client reconnecting to that very port: TCP's self-connect) took it as its
# own: the restart failed, "address already in use".
_LOWEST_PORT = 10000
# Not `random`'s: pytest-randomly seeds it alike in each worker, and a benchmark may seed it.
_pick = random.SystemRandom()


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_ports(count: int) -> list[int]:
    """`count` distinct ports on 127.0.0.1 that nothing holds now, outside the kernel's range
    for a connection's own port, so that only a server listening there can take one from a
    test (bind(0) picks in that range, where another socket of the machine may be given it
    between this check and the server's bind); from that range only where the range leaves
    no room below it. Each socket stays bound until all are known, where two picks in a row
    could each find the same port free once the first socket was closed."""
    top = _ephemeral_start()
    tries = 100 * count if top - _LOWEST_PORT >= 1000 else 0
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = socket.socket()
            picked = tries > 0  # else bind(0): the kernel's pick, which fails only for good
            try:
                if picked:
                    tries -= 1
                    sock.bind(("127.0.0.1", _pick.randrange(_LOWEST_PORT, top)))
                else:
                    sock.bind(("127.0.0.1", 0))
            except OSError:  # held, or a TIME_WAIT of a server that was there: another one
                sock.close()
                if picked:  # the last pick that failed falls back to bind(0) too (5efe5ac)
                    continue
                raise
            stack.enter_context(sock)
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port() -> int:
    """One port of `free_ports`: nothing holds it now, and only a server listening there can
    take it from a test or a benchmark that restarts `boxmq serve` on it."""
    [port] = free_ports(1)
    return port
