"""Deleting stale (expired) retained messages never deletes one a publisher put in place."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from tests.crashes import Killed, kill_at
from tests.descriptors import no_descriptor_left

from boxmq.store.retained import ASIDE_PREFIX, RETAINED_DIR, RetainedHeader, RetainedStore

# Called at each audited file call (open, rename, link, unlink) while a test puts them here:
# another publisher's step, taken at a chosen point of the sweep.
_on_file_calls: list[Callable[[str, tuple[object, ...]], None]] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    for call in list(_on_file_calls):
        call(event, args)


sys.addaudithook(_audit)  # for good (a hook cannot be removed): it calls only what is listed


def _only_the_new_one_is_there(
    store: RetainedStore, tmp_path: Path, *, also: Iterable[str] = ()
) -> None:
    """Topic "a" holds the message a publisher put in place, and nothing is left aside
    (beside the files of the topics `also`)."""
    kept = store.get("a")
    assert kept is not None
    assert (kept.name, kept.body) == ("4.new.T", b"2")
    assert sorted(p.name for p in (tmp_path / "topic-root" / ".retained").iterdir()) == sorted(
        Path(store._path(topic)).name for topic in ("a", *also)
    )


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


def test_a_delete_after_the_replacement_holds(store: RetainedStore, tmp_path: Path) -> None:
    """A publisher replaces the message between the read that finds it stale and its delete,
    then deletes it (an empty retained publication) at the sweep's next open, link or unlink
    of a file there: the delete holds, and the new message was in place until then. The
    sweep moved the new one aside to read it again, so a subscriber saw none, and the delete
    found nothing to delete and was undone when the sweep put the new one back."""
    store.replace(store.stage("a", "4.old.T", b"1"))
    seen: list[str | None] = []  # what a subscriber found when the delete came

    def publisher_deletes(event: str, args: tuple[object, ...]) -> None:
        if event in {"open", "os.link", "os.remove"} and RETAINED_DIR in str(args[0]):
            _on_file_calls.clear()  # once, and not for its own calls
            found = store.get("a")
            seen.append(None if found is None else found.name)
            store.replace(store.stage("a", "4.del.T", b""))

    def stale(found: RetainedHeader) -> bool:
        if found.name == "4.old.T":
            store.replace(store.stage("a", "4.new.T", b"2"))
            _on_file_calls.append(publisher_deletes)
        return found.name == "4.old.T"

    try:
        assert store.remove_if(stale) == 0
    finally:
        _on_file_calls.clear()
    if not seen:  # the sweep touched no file after the replacement: the delete comes now
        seen.append("4.new.T")
        store.replace(store.stage("a", "4.del.T", b""))
    assert store.get("a") is None
    assert seen == ["4.new.T"]
    assert list((tmp_path / "topic-root" / RETAINED_DIR).iterdir()) == []


def test_one_replaced_just_before_the_move_aside_goes_back(
    store: RetainedStore, tmp_path: Path
) -> None:
    """The replacement lands between the sweep's look at the name and its move aside: the
    file moved is not the one judged, and it goes back to its topic."""
    store.replace(store.stage("a", "4.old.T", b"1"))

    def publisher_replaces(event: str, args: tuple[object, ...]) -> None:
        if event == "os.rename" and str(args[0]) == store._path("a"):
            _on_file_calls.clear()
            store.replace(store.stage("a", "4.new.T", b"2"))

    def stale(found: RetainedHeader) -> bool:
        _on_file_calls.append(publisher_replaces)
        return found.name == "4.old.T"

    try:
        assert store.remove_if(stale) == 0
    finally:
        _on_file_calls.clear()
    _only_the_new_one_is_there(store, tmp_path)


def test_one_moved_aside_by_a_sweep_killed_before_it_went_back_is_put_back_by_the_next(
    store: RetainedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, and the sweep's process dies between its move aside and the link that puts
    the new message back: the publisher was told it is retained, and it was lost, left as
    a file no reader looks at. The next sweep (of a restart, or of any process) puts it
    back; an aside of the stale one goes back too, and goes at the sweep after; one whose
    topic got a newer message meanwhile is deleted, the newer one kept."""
    store.replace(store.stage("a", "4.old.T", b"1"))
    store.replace(store.stage("b", "4.old.T", b"1"))
    store.replace(store.stage("c", "4.old.T", b"1"))

    def publisher_replaces(event: str, args: tuple[object, ...]) -> None:
        if event == "os.rename" and str(args[0]) == store._path("a"):
            _on_file_calls.clear()
            store.replace(store.stage("a", "4.new.T", b"2"))
            kill_at(monkeypatch, 1)  # the rename aside is under way: the link back dies

    def stale(found: RetainedHeader) -> bool:
        if found.topic == "a":
            _on_file_calls.append(publisher_replaces)
        return found.topic == "a"  # b's and c's are left for below

    try:
        with pytest.raises(Killed):
            store.remove_if(stale)
    finally:
        _on_file_calls.clear()
        monkeypatch.undo()
    assert store.get("a") is None  # the killed sweep left it aside
    folder = tmp_path / "topic-root" / RETAINED_DIR
    for topic in ("b", "c"):  # their stale messages, as sweeps killed before the unlink left them
        os.rename(store._path(topic), folder / f"{ASIDE_PREFIX}{topic}")
    store.replace(store.stage("c", "4.newer.T", b"3"))
    restarted = RetainedStore(str(tmp_path), store._committer)
    assert restarted.remove_if(lambda found: found.name == "4.old.T") == 0  # put back
    assert restarted.remove_if(lambda found: found.name == "4.old.T") == 1  # b's, stale
    _only_the_new_one_is_there(restarted, tmp_path, also=["c"])
    kept = restarted.get("c")
    assert kept is not None
    assert kept.name == "4.newer.T"


def test_one_another_sweep_puts_back_under_a_live_sweep_s_feet_stays_put_back(
    store: RetainedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep of another process puts back what this one just moved aside (a replacement
    that landed just before the move): this one finds no file aside, and leaves it so."""
    store.replace(store.stage("a", "4.old.T", b"1"))
    other = RetainedStore(str(tmp_path), store._committer)
    lstat = os.lstat

    def other_sweeps_first(path: str) -> os.stat_result:
        if os.path.basename(path).startswith(ASIDE_PREFIX):
            monkeypatch.setattr(os, "lstat", lstat)
            assert other.remove_if(lambda found: False) == 0
        return lstat(path)

    def publisher_replaces(event: str, args: tuple[object, ...]) -> None:
        if event == "os.rename" and str(args[0]) == store._path("a"):
            _on_file_calls.clear()
            store.replace(store.stage("a", "4.new.T", b"2"))
            monkeypatch.setattr(os, "lstat", other_sweeps_first)

    def stale(found: RetainedHeader) -> bool:
        _on_file_calls.append(publisher_replaces)
        return found.name == "4.old.T"

    try:
        assert store.remove_if(stale) == 0
    finally:
        _on_file_calls.clear()
    assert os.lstat is lstat  # the other sweep came
    _only_the_new_one_is_there(store, tmp_path)


def test_the_delete_needs_no_descriptor(store: RetainedStore, tmp_path: Path) -> None:
    """Every descriptor is taken once the message is judged (the broker's clients took the
    last ones): its delete opens no file, so it neither fails nor deletes anything unjudged."""
    store.replace(store.stage("a", "4.old.T", b"1"))
    with contextlib.ExitStack() as out_of_descriptors:

        def stale(found: RetainedHeader) -> bool:
            out_of_descriptors.enter_context(no_descriptor_left())
            return True

        assert store.remove_if(stale) == 1
    assert list((tmp_path / "topic-root" / RETAINED_DIR).iterdir()) == []
