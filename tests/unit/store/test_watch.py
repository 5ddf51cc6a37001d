"""The watcher: inotify reports new names; polling says "rescan"; wakeup interrupts a wait."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from boxmq.store.watch import InotifyWatcher, PollingWatcher, watch


@pytest.fixture
def inotify(tmp_path: Path) -> InotifyWatcher:
    watcher = watch(str(tmp_path), poll_interval=0.1)
    if not isinstance(watcher, InotifyWatcher):
        if os.environ.get("CI"):
            pytest.fail("inotify is expected on the CI machine")
        pytest.skip("no inotify on this system")
    return watcher


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
