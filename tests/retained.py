"""Where the store keeps a topic's retained message (docs/file-format.md): one file per topic
in topic-root/.retained/, named by the SHA-256 of the topic in hex. For the tests that write,
block, age or count those files by hand, so that the layout is written down once."""

from __future__ import annotations

import hashlib
from pathlib import Path

from boxmq.store.layout import TOPIC_ROOT
from boxmq.store.retained import RETAINED_DIR

__all__ = ["retained_file", "retained_folder", "retained_name"]


def retained_folder(root: str | Path) -> Path:
    """The folder of the retained messages of the root `root`."""
    return Path(root, TOPIC_ROOT, RETAINED_DIR)


def retained_name(topic: str) -> str:
    """The name of `topic`'s retained file in that folder."""
    return hashlib.sha256(topic.encode()).hexdigest()


def retained_file(root: str | Path, topic: str) -> Path:
    """Where `topic`'s retained message is (or would be) stored under `root`."""
    return retained_folder(root) / retained_name(topic)
