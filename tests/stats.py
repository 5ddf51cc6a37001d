"""For tests that count the file system's looks a piece of code makes (a stat per path is the
cost the store's hot paths are kept to): every path os.stat is asked about, recorded."""

from __future__ import annotations

import os
from typing import Any

import pytest

__all__ = ["recorded_stats"]


def recorded_stats(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths os.stat is asked about from now on, in order, each as str(path): the list
    grows as the code under test looks, until `monkeypatch` undoes the patch."""
    looked: list[str] = []
    real = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    return looked
