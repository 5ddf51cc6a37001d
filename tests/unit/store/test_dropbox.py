"""A dropbox opened on folders made by hand or by DropboxMQ, which may lack state folders."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.stats import recorded_stats

from boxmq.errors import QueueNotFound
from boxmq.store import dropbox as dropbox_module
from boxmq.store.commit import Committer, FsyncPolicy
from boxmq.store.dropbox import Dropbox, NotAFile
from boxmq.store.layout import State, remove_dropbox
from boxmq.store.names import decode


@pytest.fixture
def committer(tmp_path: Path) -> Iterator[Committer]:
    committer = Committer(str(tmp_path), FsyncPolicy.NEVER)
    yield committer
    committer.close()


def test_opening_a_queue_with_only_target_makes_the_other_state_folders(
    tmp_path: Path, committer: Committer
) -> None:
    """DropboxMQ, The DropboxMQ Dropbox: "Each queue dropbox has the same directory
    structure", working/ target/ processing/ processed/ routing/ expired/ error/ (its
    diagram's incoming/ is not made: docs/file-format.md)."""
    (tmp_path / "half" / "target").mkdir(parents=True)
    (tmp_path / "half" / "target" / "x").write_text("m")
    box = Dropbox(str(tmp_path / "half"), committer, create=False)
    assert sorted(os.listdir(tmp_path / "half")) == sorted(s.value for s in State)
    assert box.move(State.TARGET, "x", State.PROCESSING)


def test_opening_a_queue_looks_at_its_target_once(
    tmp_path: Path, committer: Committer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The look that tells a queue from none found target/ a folder: the look for the state
    # folders the queue lacks looked at it again, where only the three others may be missing.
    for state in State:
        (tmp_path / "q" / state.value).mkdir(parents=True)
    stats = recorded_stats(monkeypatch)
    Dropbox(str(tmp_path / "q"), committer, create=False)
    assert sorted(map(os.path.basename, stats)) == sorted(s.value for s in State)


def test_a_move_into_a_state_folder_not_made_yet_makes_it_and_no_other(
    tmp_path: Path, committer: Committer
) -> None:
    # What a sweep opens is not completed (an `rm -rf` of the queue may be under way): the
    # folder a message goes to is made at its move, and a dropbox deleted whole stays deleted.
    (tmp_path / "half" / "target").mkdir(parents=True)
    (tmp_path / "half" / "target" / "x").write_text("m")
    (tmp_path / "half" / "target" / "y").write_text("m")
    box = Dropbox(str(tmp_path / "half"), committer, create=False, complete=False)
    assert os.listdir(tmp_path / "half") == ["target"]
    assert box.move(State.TARGET, "x", State.EXPIRED)
    assert box.place(State.TARGET, "y", State.PROCESSING, "y") == "y"
    assert sorted(os.listdir(tmp_path / "half")) == ["expired", "processing", "target"]
    assert not box.move(State.TARGET, "gone", State.ERROR)  # no message, no folder
    assert not (tmp_path / "half" / "error").exists()
    (tmp_path / "half" / "target" / "z").write_text("m")
    os.rename(tmp_path / "half", tmp_path / "deleting")
    assert not box.move(State.TARGET, "z", State.ERROR)
    assert not (tmp_path / "half").exists()


def test_a_claim_into_a_processing_folder_deleted_by_hand_makes_it(
    tmp_path: Path, committer: Committer
) -> None:
    # As `place` does: a consumer took each such claim for lost, and the messages stayed.
    (tmp_path / "q" / "target").mkdir(parents=True)
    (tmp_path / "q" / "target" / "x").write_text("m")
    box = Dropbox(str(tmp_path / "q"), committer, create=False)
    os.rmdir(tmp_path / "q" / "processing")
    assert box.claim("x", "x@c@1@") == "x@c@1@"
    assert os.listdir(tmp_path / "q" / "processing") == ["x@c@1@"]
    os.rename(tmp_path / "q" / "processing" / "x@c@1@", tmp_path / "q" / "target" / "x")
    os.rmdir(tmp_path / "q" / "processing")
    assert box.claim("gone", "gone@c@1@") is None  # lost: no folder made for it
    assert not (tmp_path / "q" / "processing").exists()
    os.rename(tmp_path / "q", tmp_path / "deleting")
    assert box.claim("x", "x@c@1@") is None  # a dropbox deleted whole stays deleted
    assert not (tmp_path / "q").exists()


def test_an_ack_kept_in_a_processed_folder_deleted_by_hand_makes_it(
    tmp_path: Path, committer: Committer
) -> None:
    (tmp_path / "q" / "target").mkdir(parents=True)
    box = Dropbox(str(tmp_path / "q"), committer, create=False)
    (tmp_path / "q" / "processing" / "x@c@1@").write_text("m")
    os.rmdir(tmp_path / "q" / "processed")
    assert not box.finish("gone@c@1@", "gone", keep=True)  # no message, no folder
    assert not (tmp_path / "q" / "processed").exists()
    assert box.finish("x@c@1@", "x", keep=True)
    assert os.listdir(tmp_path / "q" / "processed") == ["x"]


def test_a_missing_state_folder_reads_as_empty(tmp_path: Path, committer: Committer) -> None:
    (tmp_path / "q" / "target").mkdir(parents=True)
    box = Dropbox(str(tmp_path / "q"), committer, create=False)
    os.rmdir(tmp_path / "q" / "processing")  # e.g. a read-only root where none could be made
    assert list(box.scan(State.PROCESSING)) == []
    assert box.count(State.PROCESSING) == 0


def test_a_folder_without_target_is_no_queue(tmp_path: Path, committer: Committer) -> None:
    with pytest.raises(QueueNotFound):
        Dropbox(str(tmp_path), committer, create=False)


@pytest.mark.parametrize("size", [0, 1, 65535, 65536, 65537, 3 * 65536 + 7])
def test_read_returns_the_whole_body_at_any_size(
    tmp_path: Path, committer: Committer, size: int
) -> None:
    box = Dropbox(str(tmp_path / "q"), committer)
    body = os.urandom(size)
    box.send([box.write("4.x.B", body)])
    assert box.read(State.TARGET, "4.x.B") == body
    assert box.read(State.TARGET, "gone") is None


def _full_disk(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _created_then_full(path: str, *args: Any, **kwargs: Any) -> Any:
    """`open` on a full disk: the file is made, then its first write is refused."""
    open(path, *args, **kwargs).close()
    _full_disk()


@pytest.mark.parametrize("failing", ["write", "rename"])
def test_a_setting_the_disk_refuses_leaves_no_temporary(
    tmp_path: Path, committer: Committer, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    box = Dropbox(str(tmp_path / "q"), committer)
    box.set_setting("owner", "first")
    if failing == "rename":
        monkeypatch.setattr(os, "rename", _full_disk)
    else:
        monkeypatch.setattr("boxmq.store.dropbox.open", _created_then_full, raising=False)
    with pytest.raises(OSError, match="No space"):
        box.set_setting("owner", "second")
    monkeypatch.undo()
    assert box.setting("owner") == "first"
    assert not [name for name in os.listdir(box.path) if name.startswith(".tmp-")]


@pytest.mark.parametrize("into", [State.ERROR, State.EXPIRED, State.PROCESSED, State.TARGET])
def test_a_move_never_replaces_a_file_of_the_same_name(
    tmp_path: Path, committer: Committer, into: State
) -> None:
    """A producer may send a name again once its first message left target/: both messages
    stay, the second under a distinct name, and id."""
    box = Dropbox(str(tmp_path / "q"), committer, create=True)
    folder = tmp_path / "q"
    (folder / into.value / "4.job.T").write_bytes(b"first")
    (folder / "processing" / "4.job.T").write_bytes(b"second")
    (folder / "processing" / "4.job.T@w@1@").write_bytes(b"third")
    placed = box.place(State.PROCESSING, "4.job.T", into)
    assert placed is not None
    assert placed != "4.job.T"
    assert box.move(State.PROCESSING, "4.job.T@w@1@", into, "4.job.T")
    bodies = {
        name: (folder / into.value / name).read_bytes() for name in os.listdir(folder / into.value)
    }
    assert sorted(bodies.values()) == [b"first", b"second", b"third"]
    assert bodies["4.job.T"] == b"first"
    assert bodies[placed] == b"second"
    ids = {decode(name).message_id: body for name, body in bodies.items()}
    assert ids == {"job": b"first", "job~2": b"second", "job~3": b"third"}
    assert box.place(State.PROCESSING, "gone", into) is None


def test_claim_is_place_into_processing(tmp_path: Path, committer: Committer) -> None:
    """The claim's shortcut: the locked name it took (a millisecond later where another lock
    has that name, never over it), or None when another claim took the file first
    (DropboxMQ, Dropbox Message Consumers: a consumer moves the file from target/ to
    processing/, "Only one consumer will succeed")."""
    box = Dropbox(str(tmp_path / "q"), committer, create=True)
    folder = tmp_path / "q"
    for name in ("4.a.B", "4.b.B"):
        (folder / "target" / name).write_bytes(name.encode())
    (folder / "processing" / "4.b.B@w@1000@t").write_bytes(b"held")
    assert box.claim("4.a.B", "4.a.B@w@1000@t") == "4.a.B@w@1000@t"
    assert box.claim("4.b.B", "4.b.B@w@1000@t") == "4.b.B@w@1001@t"
    assert box.claim("4.a.B", "4.a.B@w@2000@t") is None  # gone: claimed already
    assert sorted(os.listdir(folder / "processing")) == [
        "4.a.B@w@1000@t",
        "4.b.B@w@1000@t",
        "4.b.B@w@1001@t",
    ]
    assert (folder / "processing" / "4.b.B@w@1001@t").read_bytes() == b"4.b.B"
    assert os.listdir(folder / "target") == []


def test_read_refuses_what_is_not_a_regular_file(tmp_path: Path, committer: Committer) -> None:
    """A directory, a symbolic link (never followed: it could lend a file outside the root)
    and a named pipe (never waited on) are no message; an empty file is one."""
    box = Dropbox(str(tmp_path / "q"), committer, create=True)
    target = tmp_path / "q" / "target"
    (tmp_path / "secret").write_bytes(b"not for consumers")
    (target / "dir").mkdir()
    (target / "link").symlink_to(tmp_path / "secret")
    os.mkfifo(target / "pipe")
    (target / "empty").write_bytes(b"")
    for name in ("dir", "link", "pipe"):
        with pytest.raises(NotAFile):
            box.read(State.TARGET, name)
    writer = os.open(target / "pipe", os.O_RDWR)  # a pipe with a writer: no data yet
    try:
        with pytest.raises(NotAFile):
            box.read(State.TARGET, "pipe")
    finally:
        os.close(writer)
    assert box.read(State.TARGET, "empty") == b""
    strays: list[str] = []
    assert [entry.name for entry in box.scan(State.TARGET, strays)] == ["empty"]
    assert sorted(strays) == ["dir", "link", "pipe"]


@pytest.mark.parametrize("made", ["folder", "file", "link to nothing", "nothing"])
def test_remove_dropbox_deletes_whatever_stands_at_target(tmp_path: Path, made: str) -> None:
    """A dropbox, or a broken one (target/ a file, a link to nothing) is deleted; a folder
    with no target/ at all is no dropbox and is left alone."""
    path = tmp_path / "q"
    path.mkdir()
    target = path / State.TARGET.value
    if made == "folder":
        target.mkdir()
    elif made == "file":
        target.write_text("not a folder")
    elif made == "link to nothing":
        target.symlink_to(tmp_path / "gone")
    assert remove_dropbox(str(tmp_path), str(path)) is (made != "nothing")
    assert path.exists() is (made == "nothing")


def test_count_makes_no_entry_of_each_file(
    tmp_path: Path, committer: Committer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `boxmq ls` and `stats` count every folder: count made an Entry of each file only to
    # count it, about half of what `ls` cost on 200,000 messages (found at an earlier stop).
    # The counts stay: regular files, and with `strays` what is no regular file too.
    box = Dropbox(str(tmp_path / "q"), committer)
    for name in ("a", "b", "c"):
        (tmp_path / "q" / "error" / name).write_text("m")
    (tmp_path / "q" / "error" / "d").mkdir()
    os.symlink("a", tmp_path / "q" / "error" / "e")
    made: list[str] = []
    real = dropbox_module.Entry

    def entry(name: str, path: str) -> dropbox_module.Entry:
        made.append(name)
        return real(name, path)

    monkeypatch.setattr(dropbox_module, "Entry", entry)
    assert box.count(State.ERROR) == 3
    assert box.count(State.ERROR, strays=True) == 5
    assert box.count(State.TARGET) == 0
    assert made == []
    os.rmdir(tmp_path / "q" / "target")
    assert box.count(State.TARGET) == 0  # a folder gone holds nothing
