"""For tests that need inotify, where a polling watcher would find another box's files only at
its next rescan: on CI, where inotify is expected, they fail without it; elsewhere (a kernel
without it, `watch` falling back to polling) they are skipped, saying why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from boxmq.store.watch import InotifyWatcher, Watcher, watch

__all__ = ["inotify_watcher", "require_inotify"]


def inotify_watcher(watcher: Watcher) -> InotifyWatcher:
    """`watcher`, if inotify's; else the test fails on CI, and is skipped elsewhere."""
    if isinstance(watcher, InotifyWatcher):
        return watcher
    watcher.close()
    if os.environ.get("CI"):
        pytest.fail("inotify is expected on the CI machine")
    pytest.skip("no inotify on this system: watchers poll")


def require_inotify(directory: Path) -> None:
    """The test needs inotify: a box that polls learns of another box's changes only at its
    next rescan of the folder."""
    inotify_watcher(watch(str(directory), poll_interval=60.0)).close()
