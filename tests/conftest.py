from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import boxmq
from boxmq.clock import ManualClock


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
