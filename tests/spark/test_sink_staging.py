"""A sink task's staging of its rows, on the real files of a full disk (no JVM: the writer's
task side, called as Spark's task calls it, outside a task)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.diskfull import small_disk

import boxmq
from boxmq.spark import messages
from boxmq.spark.options import sink_options
from boxmq.spark.sink import BoxMQBatchWriter
from boxmq.store.side_files import SIDE_DIR, referenced


def test_a_row_whose_file_the_disk_refuses_leaves_no_side_file_named_by_nothing(
    tmp_path: Path,
) -> None:
    """Its properties, too long for a name, went to a side file; then the full disk refused
    the message file, failing the task, and the side file stayed named by nothing until the
    hourly collection, beside the message file cut short where the disk refused it. The
    task Spark runs again writes it anew."""
    columns = [("body", "binary"), ("properties", messages.STRING_MAP)]
    row = [b"x" * 20_000, {"trace": "t" * 300}]
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        boxmq.open(root, fsync="never").close()
        options = sink_options({"root": str(root), "topic": "t/a"}, frozenset({"body"}))
        writer = BoxMQBatchWriter(options, columns)
        disk.fill(leave=1)
        with pytest.raises(OSError, match="No space left"):
            writer._stage(iter([row]), "job", None)
        side = root / SIDE_DIR
        assert (sorted(os.listdir(side)) if side.exists() else []) == []
        # Nor a message file cut short, which named the side file withdrawn.
        assert referenced(str(root)) == set()
        assert [p for p in (root / ".spark").rglob("*") if p.is_file()] == []
        disk.free()
        staged = writer._stage(iter([row]), "job-2", None)  # the task run again
        assert staged.count == 1
        assert len(os.listdir(side)) == 1
