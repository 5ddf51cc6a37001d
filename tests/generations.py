"""The writes of the subscriptions' generation (`boxmq.store.topics.bump_generation`) a test
counts, where a change must tell the other processes on the root once, not once per filter
or node ended."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from boxmq.store import topics as layout

__all__ = ["count_generation_writes"]


def count_generation_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The generation's writes from now on, each as the number of changes it told."""
    told: list[int] = []
    real = layout.bump_generation

    def counted(
        root: str, *, flush: bool = False, paths: Sequence[str] = ()
    ) -> layout.Counted | None:
        result = real(root, flush=flush, paths=paths)
        told.append(getattr(result, "changes", 1))  # None: a change told as any
        return result

    monkeypatch.setattr(layout, "bump_generation", counted)
    return told
