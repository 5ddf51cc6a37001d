"""The watcher: inotify reports new names; polling says "rescan"; wakeup interrupts a wait."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.descriptors import no_descriptor_left
from tests.inotify import inotify_watcher

from boxmq.store.watch import Changes, InotifyWatcher, PollingWatcher, watch


@pytest.fixture
def inotify(tmp_path: Path) -> InotifyWatcher:
    return inotify_watcher(watch(str(tmp_path), poll_interval=0.1))


def test_inotify_reports_renamed_linked_and_written_files(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    (tmp_path / "x.tmp").write_bytes(b"1")  # written in place: reported once closed
    names = set(inotify.wait(1.0).names)
    os.rename(tmp_path / "x.tmp", tmp_path / "renamed")
    os.link(tmp_path / "renamed", tmp_path / "linked")
    for _ in range(3):
        names |= set(inotify.wait(0.2).names)
    assert {"x.tmp", "renamed", "linked"} <= names
    inotify.close()


def test_inotify_wait_times_out_with_nothing(inotify: InotifyWatcher) -> None:
    started = time.monotonic()
    changes = inotify.wait(0.05)
    assert changes.names == []
    assert not changes.everything
    assert time.monotonic() - started < 1.0
    inotify.close()


def test_wakeup_interrupts_a_wait(inotify: InotifyWatcher) -> None:
    timer = threading.Timer(0.05, inotify.wakeup)
    timer.start()
    started = time.monotonic()
    inotify.wait(10.0)
    assert time.monotonic() - started < 5.0
    timer.join()
    inotify.close()


def test_polling_says_rescan_at_most_once_per_interval(tmp_path: Path) -> None:
    # A whole second between rescans: the two "not due" checks below hold unless this thread
    # stalls for a second, where a 0.05 s interval failed on any 50 ms stall of a loaded machine.
    watcher = watch(str(tmp_path), poll_interval=1.0, polling=True)
    assert isinstance(watcher, PollingWatcher)
    assert watcher.wait(0).everything is False  # not due yet: no rescan
    assert watcher.wait(5.0).everything is True  # naps until due (~1 s), then says rescan
    watcher.wakeup()
    assert watcher.wait(5.0).everything is False  # woken early: nothing due


def test_a_name_that_came_and_left_between_two_reads_is_not_reported(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    """Another process's put that it claimed at once: nothing to offer, nothing to claim."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a").write_bytes(b"a")
    (tmp_path / "elsewhere" / "b").write_bytes(b"b")
    assert inotify.wait(1.0).names == ["elsewhere"]  # a folder made in the watched one
    os.rename(tmp_path / "elsewhere" / "a", tmp_path / "came-and-left")
    os.rename(tmp_path / "elsewhere" / "b", tmp_path / "came-and-stayed")
    os.rename(tmp_path / "came-and-left", tmp_path / "elsewhere" / "a")
    changes = inotify.wait(1.0)
    assert changes.names == ["came-and-stayed"]
    assert changes.gone == []
    inotify.close()


def test_a_name_that_left_after_it_was_reported_is_gone(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a").write_bytes(b"a")
    assert inotify.wait(1.0).names == ["elsewhere"]  # a folder made in the watched one
    os.rename(tmp_path / "elsewhere" / "a", tmp_path / "claimed-later")
    assert inotify.wait(1.0).names == ["claimed-later"]
    os.rename(tmp_path / "claimed-later", tmp_path / "elsewhere" / "a")
    (tmp_path / "deleted").write_bytes(b"d")
    changes = inotify.wait(1.0)
    assert (changes.names, changes.gone) == (["deleted"], ["claimed-later"])
    os.unlink(tmp_path / "deleted")
    changes = inotify.wait(1.0)
    assert (changes.names, changes.gone) == ([], ["deleted"])
    inotify.close()


def test_names_of_every_length_and_not_utf8_are_reported_as_fsdecode_reads_them(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    """Events carry their names NUL padded (to the next 16 bytes) and are matched that way:
    names of lengths around each padding, one a prefix of the next, and one that is not
    UTF-8 come, stay, leave, or come and leave, as their names."""
    (tmp_path / "elsewhere").mkdir()
    raw = [b"n" * length for length in (1, 14, 15, 16, 17, 31, 32, 33, 100)] + [b"bad\xff"]
    for index, name in enumerate(raw):
        (tmp_path / "elsewhere" / str(index)).write_bytes(name)
    assert inotify.wait(1.0).names == ["elsewhere"]
    base = os.fsencode(tmp_path)
    for index, name in enumerate(raw):
        os.rename(os.fsencode(tmp_path / "elsewhere" / str(index)), base + b"/" + name)
    for name in raw[1::2]:  # came and left in one read: never reported
        os.rename(base + b"/" + name, base + b"/elsewhere/" + name)
    stayed = [os.fsdecode(name) for name in raw[::2]]
    assert inotify.wait(1.0) == Changes(stayed, False, [])
    for name in raw[::2]:
        os.rename(base + b"/" + name, base + b"/elsewhere/" + name)
    assert inotify.wait(1.0) == Changes([], False, stayed)
    inotify.close()


def _folder_watcher(tmp_path: Path) -> tuple[Path, InotifyWatcher]:
    """A watcher of a dropbox's target/ (a folder with a parent of its own)."""
    folder = tmp_path / "box" / "target"
    folder.mkdir(parents=True)
    return folder, inotify_watcher(watch(str(folder), poll_interval=0.1))


def _until(watcher: InotifyWatcher, wanted: Callable[[Changes], bool]) -> list[Changes]:
    """What the watcher says, wait after wait, until `wanted` (at most 5 s)."""
    seen: list[Changes] = []
    end = time.monotonic() + 5.0
    while time.monotonic() < end:
        seen.append(watcher.wait(0.5))
        if wanted(seen[-1]):
            return seen
    pytest.fail(f"never: the watcher said {seen}")


@pytest.mark.parametrize("when", ["read-between", "made-again-at-once"])
def test_inotify_follows_its_folder_deleted_and_made_again_at_its_path(
    tmp_path: Path, when: str
) -> None:
    """A subscription ended and made again (an unsubscribe, a share group's last member out),
    a queue deleted and put to again, by any process: the watch was on the old folder, so the
    new one's files were found only by the reader's next full rescan (5 s). A file kept open
    that was renamed into the folder (a spare's descriptor, store/spares.py) holds the old
    folder's inode, whose own IN_DELETE_SELF then comes only once it is closed."""
    folder, watcher = _folder_watcher(tmp_path)
    (tmp_path / "spare").write_bytes(b"old")
    with open(tmp_path / "spare", "rb"):  # held open across the deletion
        os.rename(tmp_path / "spare", folder / "old")
        assert _until(watcher, lambda changes: "old" in changes.names)
        shutil.rmtree(tmp_path / "box")
        if when == "read-between":
            # Told of the folder's leaving, it rescans (nothing there); until the folder is
            # made again it looks for it on a timer (poll_interval), and then rescans again.
            assert watcher.wait(1.0).everything
            time.sleep(0.3)
            assert not watcher.wait(0).everything  # no folder yet
            folder.mkdir(parents=True)
            assert _until(watcher, lambda changes: changes.everything)
        else:
            folder.mkdir(parents=True)
            assert _until(watcher, lambda changes: changes.everything)
        (folder / "new").write_bytes(b"new")
        assert _until(watcher, lambda changes: "new" in changes.names)
    watcher.close()


def test_inotify_follows_its_folder_renamed_away_and_made_again(tmp_path: Path) -> None:
    """docs/operations.md: a folder grown large is made again by `mv` and `mkdir`; the
    watch stays with the new folder, not with the old one moved aside."""
    folder, watcher = _folder_watcher(tmp_path)
    os.rename(folder, tmp_path / "box" / "target.old")
    folder.mkdir()
    assert _until(watcher, lambda changes: changes.everything)
    (tmp_path / "box" / "target.old" / "aside").write_bytes(b"a")
    (folder / "new").write_bytes(b"n")
    seen = _until(watcher, lambda changes: "new" in changes.names)
    assert not any("aside" in changes.names for changes in seen)
    watcher.close()


def test_inotify_watches_a_folder_made_again_at_once_where_its_parent_stayed(
    tmp_path: Path,
) -> None:
    """Between the `mv` and the `mkdir`, nothing is at the path: the parent says when a folder
    comes to it, long before the next look on the timer (10 s here)."""
    folder = tmp_path / "box" / "target"
    folder.mkdir(parents=True)
    watcher = inotify_watcher(watch(str(folder), poll_interval=10.0))
    os.rename(folder, tmp_path / "box" / "target.old")
    assert watcher.wait(1.0).everything  # its folder left: rescan (nothing there)
    assert watcher.wait(0).names == []
    folder.mkdir()
    assert watcher.wait(2.0).everything  # watched again, at the mkdir
    (folder / "new").write_bytes(b"n")
    assert _until(watcher, lambda changes: "new" in changes.names)
    watcher.close()


def test_an_inotify_watcher_without_descriptors_for_its_pipe_keeps_none(tmp_path: Path) -> None:
    """Its inotify instance takes the last descriptor, its wake-up pipe finds none (EMFILE):
    the watcher is refused (`watch` polls instead) and holds nothing, neither the descriptor
    nor one of the 128 inotify instances a user may have."""
    with no_descriptor_left(free=1):  # the instance's
        with pytest.raises(OSError, match="Too many open files"):
            InotifyWatcher(str(tmp_path))
        os.close(os.open(os.devnull, os.O_RDONLY))  # the one left is free again
