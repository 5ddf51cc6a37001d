"""`boxmq serve` names a client that came over IPv6 by `[host]:port` in its log, as it names its
own listeners: `::1:50312` could be read as the address ::1:50312 and no port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from harness.ports import free_port
from tests.integration.mqtt.clients import WAIT, serve_process, stop_process
from tests.waiting import until


def _loopback_v6() -> bool:
    """Whether ::1 can be bound here (not in a container without IPv6)."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _loopback_v6(), reason="no ::1 here")


def test_a_client_over_ipv6_is_logged_with_its_host_in_brackets(tmp_path: Path) -> None:
    root, port, v6_port = tmp_path / "root", free_port(), free_port()
    process = serve_process(root, port, "--mqtt", f"[::1]:{v6_port}")
    try:
        with socket.create_connection(("::1", v6_port), timeout=WAIT) as client:
            own_port = client.getsockname()[1]
            client.sendall(b"\xf0\x00")  # reserved packet type 15: the server closes
            client.settimeout(WAIT)
            while client.recv(1024):
                pass
        expected = f"[::1]:{own_port}: closing: "
        log = tmp_path / "serve.log"
        until(lambda: expected in log.read_text(errors="replace"), f"no {expected!r} in the log")
    finally:
        stop_process(process)
