"""Process tokens for tests: the token of a process of this host that has ended."""

from __future__ import annotations

import subprocess

from boxmq.store.process import process_token

__all__ = ["dead_token"]


def dead_token() -> str:
    """The process token of a process of this host that ran and ended (a server that died,
    a consumer killed): `process_alive` says False of it."""
    finished = subprocess.Popen(["true"])
    finished.wait()
    return process_token(finished.pid)
