from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import boxmq
from boxmq.clock import ManualClock

# No test may pass or fail by how fast the machine is (a timed unit test is no test here): CI's
# two cores, shared with servers that other tests start, ran an example of a config test past
# Hypothesis's default deadline of 200 ms once. Tests that want a deadline set their own.
settings.register_profile("boxmq", deadline=None)
settings.load_profile("boxmq")


@pytest.fixture(autouse=True)
def _stop_leftover_mqtt_clients() -> Iterator[None]:
    """After each test (and its servers' teardown), the paho clients it left looping stop."""
    yield
    _stop_leftover_clients()


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """The root logger is as the test found it. `boxmq serve` run in-process (cli.main, which
    configures logging as its own process's entry point may) left it at the config's
    log_level, INFO: each later test then captured every boxmq logger's INFO records, and
    four of test_mqtt_share_away.py failed after test_cli.py on paths that named them."""
    root = logging.getLogger()
    level, handlers = root.level, set(root.handlers)
    yield
    root.setLevel(level)
    for handler in root.handlers[:]:
        # basicConfig's, where pytest's own capture is off (-p no:logging); pytest adds and
        # removes its handlers around each phase itself
        if handler not in handlers and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)


@pytest.fixture(autouse=True, scope="session")
def _join_leftover_mqtt_clients() -> Iterator[None]:
    """At the session's end, the clients the last test left are joined and closed too."""
    yield
    _stop_leftover_clients()
    _stop_leftover_clients()


def _stop_leftover_clients() -> None:
    clients = sys.modules.get("tests.integration.mqtt.clients")
    if clients is not None:
        clients.stop_leftover_clients()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def box(root: Path) -> Iterator[boxmq.Box]:
    with boxmq.open(root, fsync="never") as opened:
        yield opened


@pytest.fixture
def manual_box(root: Path, clock: ManualClock) -> Iterator[boxmq.Box]:
    """A box on a clock that only moves when the test says so."""
    with boxmq.open(root, fsync="never", clock=clock) as opened:
        yield opened


@pytest.fixture
def file_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the message files read back from disk (`Dropbox.read`) during the test."""
    from boxmq.store.dropbox import Dropbox
    from boxmq.store.layout import State

    reads: list[str] = []
    read = Dropbox.read

    def counted(self: Dropbox, state: State, name: str) -> bytes | None:
        reads.append(name)
        return read(self, state, name)

    monkeypatch.setattr(Dropbox, "read", counted)
    return reads


class StuckCheck:
    """An MQTT password check that lets every client in, but only once the test sets
    `release` (10 s at most): a client whose check is still under way while the test looks."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def authenticate(self, username: str | None, password: bytes | None, client_id: str) -> bool:
        self.release.wait(10)
        return True


class HeldFlush:
    """The committer's flush of the renames (`commit.flush_directories`), held until the test
    releases it: `reached` is set once a commit is waiting there."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def wait_for_release(self) -> None:
        self.reached.set()
        assert self._released.wait(5), "the test never released the held flush"


@pytest.fixture
def held_flush(monkeypatch: pytest.MonkeyPatch) -> HeldFlush:
    from boxmq.store import commit

    held = HeldFlush()
    flush = commit.flush_directories

    def flush_directories(paths: set[str]) -> None:
        held.wait_for_release()
        flush(paths)

    monkeypatch.setattr(commit, "flush_directories", flush_directories)
    return held
