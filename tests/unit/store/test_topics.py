"""The topic tree's own files: a subscription's record and the generation, written whole."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from boxmq.store import topics
from boxmq.store.topics import (
    SubscriptionRecord,
    bump_generation,
    read_records,
    subscription_path,
    topic_root,
    write_record,
)

_RECORD = SubscriptionRecord(filter="a/#", group=None, subscriber="s", qos=1)


def _full_disk(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _created_then_full(path: str, *args: Any, **kwargs: Any) -> Any:
    """`open` on a full disk: the file is made, then its first write is refused."""
    open(path, *args, **kwargs).close()
    _full_disk()


def _refused_write(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("boxmq.store.records.open", _created_then_full, raising=False)


def _refused_rename(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "rename", _full_disk)


@pytest.mark.parametrize("refuse", [_refused_write, _refused_rename], ids=["write", "rename"])
def test_a_record_the_disk_refuses_leaves_no_temporary(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refuse: Callable[[pytest.MonkeyPatch], None],
) -> None:
    root = str(tmp_path)
    folder = subscription_path(root, "a/#", "client.s")
    write_record(folder, _RECORD)
    refuse(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        write_record(folder, SubscriptionRecord("a/#", None, "s", qos=2))
    monkeypatch.undo()
    hidden = [name for name in os.listdir(folder) if name.startswith(".")]
    assert hidden == [".subscription"]  # nothing beside it but its dropbox's folders
    assert [record for record, _ in read_records(root)] == [_RECORD]  # the old one


@pytest.mark.parametrize("refuse", [_refused_write, _refused_rename], ids=["write", "rename"])
def test_a_generation_the_disk_refuses_leaves_no_temporary(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refuse: Callable[[pytest.MonkeyPatch], None],
) -> None:
    bump_generation(str(tmp_path))
    before = topics.generation(str(tmp_path))
    assert before is not None
    refuse(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        bump_generation(str(tmp_path))
    monkeypatch.undo()
    assert os.listdir(topic_root(str(tmp_path))) == [".generation"]
    assert topics.generation(str(tmp_path)) == before


def test_a_generation_watch_tells_each_change_once(tmp_path: Path) -> None:
    watch = topics.GenerationWatch(str(tmp_path))
    assert not watch.changed()  # no subscription was ever made: nothing to read
    bump_generation(str(tmp_path))
    assert watch.changed()
    assert not watch.changed()
    bump_generation(str(tmp_path))
    assert watch.changed()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "Expecting value"),  # renamed into place, its data lost to a power cut (fsync never)
        ("[1]", "JSON that is no object: list"),
        ('{"filter": "a/#", "qos": 1}', "its fields are filter, qos"),
    ],
)
def test_a_record_that_is_none_is_skipped_and_says_why(tmp_path: Path, text: str, why: str) -> None:
    """Read as a subscription being made, it was left out of ls and of routing with nothing
    said, and one holding JSON that is no object made ls and every publish fail with a
    TypeError (found by an upgrade hunt)."""
    root = str(tmp_path)
    good = subscription_path(root, "a/#", "client.good")
    bad = subscription_path(root, "a/#", "client.bad")
    write_record(good, _RECORD)
    os.makedirs(bad)
    with open(os.path.join(bad, ".subscription"), "w") as out:
        out.write(text)
    assert [path for _, path in read_records(root)] == [good]
    assert topics.unreadable_record(good) is None
    told = topics.unreadable_record(bad)
    assert told is not None
    assert told[0] == os.path.join(bad, ".subscription")
    assert told[1].startswith(why)
    assert topics.unreadable_record(os.path.join(root, "none")) is None  # no record (yet)
