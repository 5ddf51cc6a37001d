"""A retained message's delete is as durable as its replacement under each fsync policy."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from boxmq.store import retained
from boxmq.store.commit import Committer, FsyncPolicy, flush_directories
from boxmq.store.retained import RetainedStore


def _flushed_folders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    flushed: list[str] = []

    def recording(folders: Iterable[str]) -> None:
        folders = list(folders)
        flushed.extend(folders)
        flush_directories(folders)

    monkeypatch.setattr("boxmq.store.retained.flush_directories", recording)
    return flushed


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_a_delete_flushes_the_folder_under_always_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: FsyncPolicy
) -> None:
    committer = Committer(str(tmp_path), policy)
    store = RetainedStore(str(tmp_path), committer)
    try:
        store.replace(store.stage("a/b", "4.m1.T", b"21.5"))
        assert store.get("a/b") is not None
        flushed = _flushed_folders(monkeypatch)
        store.replace(store.stage("a/b", "4.m2.T", b""))  # an empty body deletes it
        assert store.get("a/b") is None
        expected = [str(tmp_path / "topic-root" / retained.RETAINED_DIR)]
        assert flushed == (expected if policy is FsyncPolicy.ALWAYS else [])
        store.replace(store.stage("a/b", "4.m3.T", b""))  # nothing left to delete or flush
        assert flushed == (expected if policy is FsyncPolicy.ALWAYS else [])
    finally:
        committer.close()
