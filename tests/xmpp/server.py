"""A Prosody of our own for one test session: config from tests/xmpp/prosody/, free ports,
state in a temporary folder, users registered with prosodyctl (research/xmpp.md §1)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_ports

__all__ = ["SECRET", "SERVICE", "USERS", "Prosody", "prosody_or_reason", "run_prosody"]

CONFIG = Path(__file__).parent / "prosody" / "prosody.cfg.lua"
SERVICE = "queue.localhost"
PUBSUB = "pubsub.localhost"
SECRET = "boxmq-test-secret"
USERS = ("alice", "bob", "carol", "dave")


@dataclass
class Prosody:
    c2s_port: int
    component_port: int
    folder: Path
    pid: int = 0  # of the running server (bench/xmpp.py reads its CPU time)

    def password(self, user: str) -> str:
        return f"{user}-pw"

    def log(self) -> str:
        path = self.folder / "prosody.log"
        return path.read_text() if path.exists() else ""


def prosody_or_reason() -> str | None:
    """None if Prosody can run here, else why not."""
    if shutil.which("prosody") is None or shutil.which("prosodyctl") is None:
        return "prosody is not installed (make test installs it from Debian as root)"
    return None


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@contextlib.contextmanager
def run_prosody(
    folder: Path, *, component_stanza_size_limit: int = 512 * 1024
) -> Iterator[Prosody]:
    """`component_stanza_size_limit`: Prosody's default unless a test raises it."""
    c2s_port, component_port = free_ports(2)
    server = Prosody(c2s_port, component_port, folder)
    (folder / "certs").mkdir(parents=True, exist_ok=True)
    config = folder / "prosody.cfg.lua"
    shutil.copy(CONFIG, config)
    env = {
        **os.environ,
        "BOXMQ_PROSODY_DIR": str(folder),
        "BOXMQ_C2S_PORT": str(server.c2s_port),
        "BOXMQ_COMPONENT_PORT": str(server.component_port),
        "BOXMQ_COMPONENT_SECRET": SECRET,
        "BOXMQ_COMPONENT_STANZA_SIZE_LIMIT": str(component_stanza_size_limit),
        # As root the binary refuses to start unless told (and then half-starts): tell it.
        "BOXMQ_PROSODY_AS_ROOT": "1" if os.geteuid() == 0 else "0",
    }
    for user in USERS:
        subprocess.run(
            [
                "prosodyctl",
                "--config",
                str(config),
                "register",
                user,
                "localhost",
                server.password(user),
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=30,
        )
    console = (folder / "console.log").open("w")
    process = subprocess.Popen(
        ["prosody", "-F", "--config", str(config)], env=env, stdout=console, stderr=console
    )
    server.pid = process.pid
    try:
        deadline = time.monotonic() + 15
        while not (_accepts(server.c2s_port) and _accepts(server.component_port)):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"prosody did not start:\n{(folder / 'console.log').read_text()}"
                )
            time.sleep(0.02)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        console.close()
