"""harness/ports.py: the free ports the servers of the tests and benchmarks listen on."""

from __future__ import annotations

import socket

import pytest
from harness import ports


def test_free_ports_falls_back_to_the_kernels_pick_when_every_pick_is_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its last own pick that failed raised "address already in use", where the kernel's
    pick (bind to port 0) was to be the fallback."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports._pick, "randrange", lambda low, high: taken)
        found = ports.free_ports(2)
    assert len(set(found)) == 2
    assert taken not in found
