"""The small JSON files the connector keeps under a root (stream state, batch plans, the sink's
books): each one whole or absent, and on disk before the call returns when the stream flushes."""

from __future__ import annotations

import json
import os

from boxmq.store.commit import flush_directories

__all__ = ["write_json"]


def write_json(path: str, data: object, *, flush: bool) -> None:
    """Replace `path` with `data` as JSON: written aside, then renamed over it.

    With `flush`, the file and then its folder are fsynced, so the rename too survives a power
    cut. JSON escapes every non-ASCII character, so a name that is not UTF-8 (a surrogate from
    os.listdir) is kept and reads back the same.
    """
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="ascii") as out:
        json.dump(data, out)
        if flush:
            out.flush()
            os.fsync(out.fileno())
    os.replace(temporary, path)
    if flush:
        flush_directories([os.path.dirname(path)])
