"""The files of acknowledged messages are renamed out of processing/ by the ack and unlinked
in the deleter's thread (store/deleter.py), on real files; which thread did what is counted by
Python's audit hook (os.rename, os.remove), never timed."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.processes import dead_token

from boxmq.store.deleter import PENDING_LIMIT, Deleter
from boxmq.store.spares import SPARE_DIR, Spares, write_new

WAIT = 30  # seconds: only a broken deleter waits this long
_calls: list[tuple[str, str, bool]] | None = None  # (event, path, on the caller's thread)
_caller: int | None = None
_held: tuple[threading.Event, threading.Event] | None = None  # (reached, released)
_before_gone: Callable[[], None] | None = None  # run once before a rename to <own>/gone.<n>


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _calls is not None and event in ("os.rename", "os.remove"):
        _calls.append((event, str(args[0]), threading.get_ident() == _caller))
    if _held is not None and event == "os.remove" and threading.get_ident() != _caller:
        reached, released = _held  # another thread's unlink waits here until released
        reached.set()
        released.wait(WAIT)
    global _before_gone
    if _before_gone is not None and event == "os.rename" and f"{os.sep}gone." in str(args[1]):
        run, _before_gone = _before_gone, None
        run()


sys.addaudithook(_audit)  # for good (a hook cannot be removed): it records only when asked


@contextmanager
def _file_calls() -> Iterator[list[tuple[str, str, bool]]]:
    """The renames and unlinks made meanwhile, and whether this thread made them."""
    global _calls, _caller
    _calls, _caller = [], threading.get_ident()
    try:
        yield _calls
    finally:
        _calls = _caller = None


def _finished(tmp_path: Path, count: int, body: bytes = b"body") -> list[str]:
    (tmp_path / "processing").mkdir(exist_ok=True)
    paths = [tmp_path / "processing" / f"m{index}" for index in range(count)]
    for path in paths:
        path.write_bytes(body)
    return [str(path) for path in paths]


def test_an_ack_renames_its_file_out_of_processing_and_another_thread_unlinks_it(
    tmp_path: Path,
) -> None:
    spares = Spares(str(tmp_path), "t", limit=0)  # no spare kept: every file deleted
    with _file_calls() as calls:
        for path in _finished(tmp_path, 5):
            assert spares.give(path)
            assert not os.path.exists(path)  # gone from processing/ when the ack returns
        spares.close()
    # Renames only here (one more the first time: the own folder is made after it failed).
    assert {event for event, _, here in calls if here} == {"os.rename"}
    assert [event for event, _, here in calls if not here] == ["os.remove"] * 5
    assert os.listdir(tmp_path / SPARE_DIR) == []  # every file deleted, the own folder too


def test_a_linked_or_large_body_is_deleted_in_the_thread_too(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t")
    linked, large = _finished(tmp_path, 1)[0], str(tmp_path / "processing" / "large")
    os.link(linked, tmp_path / "their-copy")
    Path(large).write_bytes(b"x" * (1 << 17))
    with _file_calls() as calls:
        assert spares.give(linked)
        assert spares.give(large)
        spares.close()
    assert not [path for event, path, here in calls if event == "os.remove" and here]
    assert len([path for event, path, here in calls if event == "os.remove"]) == 2
    assert (tmp_path / "their-copy").read_bytes() == b"body"
    assert os.listdir(tmp_path / SPARE_DIR) == []


def test_drain_deletes_every_file_handed_over_then_deletes_at_once(tmp_path: Path) -> None:
    deleter = Deleter()
    paths = _finished(tmp_path, 200)
    for path in paths[:199]:
        deleter.delete(path)
    deleter.drain()
    assert deleter.pending == 0
    assert os.listdir(tmp_path / "processing") == ["m199"]
    with _file_calls() as calls:
        deleter.delete(paths[199])  # after the drain: here, at once
    assert calls == [("os.remove", paths[199], True)]
    assert os.listdir(tmp_path / "processing") == []


def test_past_the_limit_waiting_the_caller_unlinks_at_once(tmp_path: Path) -> None:
    """A thread behind on slow unlinks: past `limit` files waiting, the caller unlinks (as the
    ack did before the thread), so a drain never waits on more than `limit` unlinks."""
    global _held
    assert 100 <= PENDING_LIMIT <= 5000  # a stop within seconds at 2 ms an unlink
    deleter = Deleter(limit=3)
    paths = _finished(tmp_path, 7)
    reached, released = threading.Event(), threading.Event()
    _held = reached, released
    try:
        with _file_calls() as calls:
            deleter.delete(paths[0])
            assert reached.wait(WAIT)  # the thread holds paths[0], and unlinks no more
            for path in paths[1:]:
                deleter.delete(path)
            assert deleter.pending == 3  # paths[1:4]
            here = [path for event, path, on_caller in calls if on_caller]
            assert here == paths[4:]  # unlinked before delete returned
            assert all(not os.path.exists(path) for path in here)
            released.set()
            deleter.drain()
    finally:
        _held = None
        released.set()
    assert [path for event, path, on_caller in calls if not on_caller] == paths[:4]
    assert {event for event, *_ in calls} == {"os.remove"}
    assert os.listdir(tmp_path / "processing") == []


def test_an_ack_racing_close_in_another_thread_leaves_no_own_folder(tmp_path: Path) -> None:
    """close() in another thread between an ack's check of it and its rename into the own
    folder: the rename finds the folder gone and makes it again, and the file is unlinked at
    once (the deleter is drained); the folder made again goes too, not left behind."""
    global _before_gone
    spares = Spares(str(tmp_path), "t", limit=0)
    first, second = _finished(tmp_path, 2)
    assert spares.give(first)  # the own folder made, the thread started

    def close_elsewhere() -> None:
        closer = threading.Thread(target=spares.close)
        closer.start()
        closer.join(WAIT)

    _before_gone = close_elsewhere
    try:
        assert spares.give(second)
    finally:
        _before_gone = None
    assert os.listdir(tmp_path / "processing") == []
    assert os.listdir(tmp_path / SPARE_DIR) == []  # no own folder made again and left


def test_a_failing_unlink_is_logged_and_the_others_are_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    deleter = Deleter()
    first, last = _finished(tmp_path, 2)
    refused = tmp_path / "processing" / "a-folder"  # unlink refuses a directory
    refused.mkdir()
    with caplog.at_level(logging.WARNING, logger="boxmq.store"):
        for path in (first, str(refused), last):
            deleter.delete(path)
        deleter.drain()
    assert os.listdir(tmp_path / "processing") == ["a-folder"]
    assert [record.getMessage() for record in caplog.records] == [
        f"could not delete {refused} ({caplog.records[0].args[1]}): "  # type: ignore[index]
        "left for the next start to clean"
    ]


def test_files_a_killed_process_left_to_delete_are_adopted_and_never_a_linked_body(
    tmp_path: Path,
) -> None:
    """Killed before its thread unlinked them, a process leaves the files its acks renamed in
    its own folder: the next pool deletes a body another dropbox links, and takes the others
    as spares (no message is ever in them)."""
    token = dead_token()
    own = tmp_path / SPARE_DIR / f"{token}+0"
    own.mkdir(parents=True)
    (own / "gone.1").write_bytes(b"acked")
    (tmp_path / "subscription").mkdir()
    os.link(own / "gone.1", tmp_path / "subscription" / "ID")
    (own / "gone.2").write_bytes(b"acked too")
    after = Spares(str(tmp_path), "alive")
    write_new(str(tmp_path / "next"), b"the next put", after)
    assert (tmp_path / "subscription" / "ID").read_bytes() == b"acked"
    assert os.stat(tmp_path / "subscription" / "ID").st_nlink == 1
    assert not own.exists()
    assert os.listdir(tmp_path / SPARE_DIR) == []  # gone.2 written again by the put
