"""Deleting stale (expired) retained messages never deletes one a publisher put in place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.descriptors import no_descriptor_left

from boxmq.store.commit import Committer, FsyncPolicy
from boxmq.store.retained import RetainedHeader, RetainedStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RetainedStore]:
    committer = Committer(str(tmp_path), FsyncPolicy.NEVER)
    try:
        yield RetainedStore(str(tmp_path), committer)
    finally:
        committer.close()


def _only_the_new_one_is_there(store: RetainedStore, tmp_path: Path) -> None:
    """Topic "a" holds the message a publisher put in place, and nothing is left aside."""
    kept = store.get("a")
    assert kept is not None
    assert (kept.name, kept.body) == ("4.new.T", b"2")
    assert sorted(p.name for p in (tmp_path / "topic-root" / ".retained").iterdir()) == [
        Path(store._path("a")).name
    ]


def test_only_the_stale_ones_go(store: RetainedStore) -> None:
    store.replace(store.stage("a", "4.old.T", b"1"))
    store.replace(store.stage("b", "4.new.T", b"2"))
    assert store.remove_if(lambda found: found.name == "4.old.T") == 1
    assert store.get("a") is None
    assert store.get("b") is not None
    assert store.remove_if(lambda found: True) == 1  # no folder entry left but "b"'s
    assert store.remove_if(lambda found: True) == 0


def test_one_replaced_after_it_was_read_stays(store: RetainedStore, tmp_path: Path) -> None:
    """A publisher (of any process) replaces the message between the read that finds it stale
    and its delete: the new one stays in place."""
    store.replace(store.stage("a", "4.old.T", b"1"))
    replaced: list[bool] = []

    def stale(found: RetainedHeader) -> bool:
        if not replaced:
            replaced.append(True)
            store.replace(store.stage("a", "4.new.T", b"2"))
        return found.name == "4.old.T"

    assert store.remove_if(stale) == 0
    _only_the_new_one_is_there(store, tmp_path)


def test_one_the_second_read_fails_on_is_put_back_not_deleted(
    store: RetainedStore, tmp_path: Path
) -> None:
    """The read of the message moved aside fails (EMFILE: the broker's clients took the last
    descriptors between the two reads): not known to be stale still, it goes back to its
    topic, where the failure deleted it (a fresh one a publisher had put in place too)."""
    store.replace(store.stage("a", "4.new.T", b"2"))
    with contextlib.ExitStack() as out_of_descriptors:

        def stale(found: RetainedHeader) -> bool:  # read once: every descriptor taken then
            out_of_descriptors.enter_context(no_descriptor_left())
            return True

        with pytest.raises(OSError, match="Too many open files"):
            store.remove_if(stale)
    _only_the_new_one_is_there(store, tmp_path)
