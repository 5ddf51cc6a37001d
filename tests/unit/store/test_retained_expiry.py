"""Deleting stale (expired) retained messages never deletes one a publisher put in place."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from tests.descriptors import no_descriptor_left

from boxmq.store.commit import Committer, FsyncPolicy
from boxmq.store.retained import Retained, RetainedStore


def test_only_the_stale_ones_go(tmp_path: Path) -> None:
    committer = Committer(str(tmp_path), FsyncPolicy.NEVER)
    store = RetainedStore(str(tmp_path), committer)
    try:
        store.replace(store.stage("a", "4.old.T", b"1"))
        store.replace(store.stage("b", "4.new.T", b"2"))
        assert store.remove_if(lambda found: found.name == "4.old.T") == 1
        assert store.get("a") is None
        assert store.get("b") is not None
        assert store.remove_if(lambda found: True) == 1  # no folder entry left but "b"'s
        assert store.remove_if(lambda found: True) == 0
    finally:
        committer.close()


def test_one_replaced_after_it_was_read_stays(tmp_path: Path) -> None:
    """A publisher (of any process) replaces the message between the read that finds it stale
    and its delete: the new one stays in place."""
    committer = Committer(str(tmp_path), FsyncPolicy.NEVER)
    store = RetainedStore(str(tmp_path), committer)
    try:
        store.replace(store.stage("a", "4.old.T", b"1"))
        replaced: list[bool] = []

        def stale(found: Retained) -> bool:
            if not replaced:
                replaced.append(True)
                store.replace(store.stage("a", "4.new.T", b"2"))
            return found.name == "4.old.T"

        assert store.remove_if(stale) == 0
        kept = store.get("a")
        assert kept is not None
        assert (kept.name, kept.body) == ("4.new.T", b"2")
        assert sorted(p.name for p in (tmp_path / "topic-root" / ".retained").iterdir()) == [
            Path(store._path("a")).name  # nothing left aside
        ]
    finally:
        committer.close()


def test_one_the_second_read_fails_on_is_put_back_not_deleted(tmp_path: Path) -> None:
    """The read of the message moved aside fails (EMFILE: the broker's clients took the last
    descriptors between the two reads): not known to be stale still, it goes back to its
    topic, where the failure deleted it (a fresh one a publisher had put in place too)."""
    committer = Committer(str(tmp_path), FsyncPolicy.NEVER)
    store = RetainedStore(str(tmp_path), committer)
    try:
        store.replace(store.stage("a", "4.new.T", b"2"))
        with contextlib.ExitStack() as out_of_descriptors:

            def stale(found: Retained) -> bool:  # read once: every descriptor taken then
                out_of_descriptors.enter_context(no_descriptor_left())
                return True

            with pytest.raises(OSError, match="Too many open files"):
                store.remove_if(stale)
        kept = store.get("a")
        assert kept is not None
        assert (kept.name, kept.body) == ("4.new.T", b"2")
        assert sorted(p.name for p in (tmp_path / "topic-root" / ".retained").iterdir()) == [
            Path(store._path("a")).name  # nothing left aside
        ]
    finally:
        committer.close()
