"""store/fanout.py: the copies a crash left pending go into target/, each once."""

from __future__ import annotations

from pathlib import Path

import boxmq
from boxmq.store.fanout import finish_pending
from boxmq.store.topics import EXACTLY_ONCE_PENDING, subscription_folders


def test_a_copy_left_pending_is_finished_whatever_its_subscription_s_record_says(
    tmp_path: Path,
) -> None:
    """The recovery read every subscription's record (an open and a JSON parse each, 82 % of
    its instructions for 10,000 subscriptions at each first open of a root, for folders it
    only lists) and passed over a folder whose record it could not read, its pending copy
    left in working/ for good. It lists the folders, their records unread."""
    with boxmq.open(tmp_path, fsync="never") as box:
        for name in ("readable", "damaged"):
            box.topics.subscribe("t", name, process_bound=False).close()
    folders = sorted(Path(folder) for folder in subscription_folders(str(tmp_path)))
    for folder in folders:
        pending = folder / "working" / EXACTLY_ONCE_PENDING
        pending.mkdir()
        (pending / "4.copy.B").write_bytes(b"body")
    damaged = next(folder for folder in folders if "damaged" in folder.name)
    (damaged / ".subscription").write_text("{cut short")
    emptied = finish_pending(str(tmp_path), EXACTLY_ONCE_PENDING)
    assert sorted(emptied) == sorted(str(f / "working" / EXACTLY_ONCE_PENDING) for f in folders)
    for folder in folders:
        assert [p.name for p in (folder / "target").iterdir()] == ["4.copy.B"]
        assert list((folder / "working" / EXACTLY_ONCE_PENDING).iterdir()) == []
