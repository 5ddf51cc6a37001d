"""Deleting stale (expired) retained messages never deletes one a publisher put in place."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

from tests.descriptors import no_descriptor_left

from boxmq.store.retained import RETAINED_DIR, RetainedHeader, RetainedStore

# Called at each audited file call (open, rename, link, unlink) while a test puts them here:
# another publisher's step, taken at a chosen point of the sweep.
_on_file_calls: list[Callable[[str, tuple[object, ...]], None]] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    for call in list(_on_file_calls):
        call(event, args)


sys.addaudithook(_audit)  # for good (a hook cannot be removed): it calls only what is listed


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
