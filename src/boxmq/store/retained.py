"""Retained messages: the last one per topic, kept apart from every dropbox.

    <root>/topic-root/.retained/<sha256 of the topic>

Each file is one JSON header line (the topic and the message's encoded name) and then the body.
Topics can be longer than a file name, hence the hash. A new retained message replaces the old
one with one rename; an empty body deletes it (MQTT 5.0 §3.3.1.3). Writes go through the
committer, so they are as durable as the fsync policy says.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from boxmq.store.commit import Committer, Move
from boxmq.store.layout import TOPIC_ROOT

__all__ = ["Retained", "RetainedStore"]


@dataclass(frozen=True, slots=True)
class Retained:
    topic: str
    name: str  # the message's DropboxMQ name (its metadata)
    body: bytes


class RetainedStore:
    def __init__(self, root: str, committer: Committer) -> None:
        self._dir = os.path.join(root, TOPIC_ROOT, ".retained")
        self._committer = committer

    def _path(self, topic: str) -> str:
        return os.path.join(self._dir, hashlib.sha256(topic.encode()).hexdigest())

    def put(self, topic: str, name: str, body: bytes) -> None:
        """Keep `body` as the topic's retained message; an empty body deletes it."""
        if not body:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(topic))
            return
        os.makedirs(self._dir, exist_ok=True)
        temporary = os.path.join(self._dir, f".tmp-{uuid.uuid4().hex}")
        header = json.dumps({"topic": topic, "name": name}).encode() + b"\n"
        with open(temporary, "wb") as out:
            out.write(header + body)
        self._committer.commit([Move(temporary, self._path(topic))])

    def get(self, topic: str) -> Retained | None:
        return _load(self._path(topic))

    def __iter__(self) -> Iterator[Retained]:
        with contextlib.suppress(FileNotFoundError), os.scandir(self._dir) as entries:
            for entry in entries:
                if not entry.name.startswith("."):
                    retained = _load(entry.path)
                    if retained is not None:
                        yield retained


def _load(path: str) -> Retained | None:
    try:
        with open(path, "rb") as source:
            data = source.read()
    except FileNotFoundError:
        return None
    header, _, body = data.partition(b"\n")
    fields = json.loads(header)
    return Retained(str(fields["topic"]), str(fields["name"]), body)
