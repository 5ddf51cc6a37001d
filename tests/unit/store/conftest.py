"""Fixtures shared by the store's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmq.store.commit import Committer, FsyncPolicy
from boxmq.store.retained import RetainedStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RetainedStore]:
    """A retained-message store in tmp_path, nothing flushed."""
    committer = Committer(str(tmp_path), FsyncPolicy.NEVER)
    try:
        yield RetainedStore(str(tmp_path), committer)
    finally:
        committer.close()
