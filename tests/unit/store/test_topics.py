"""The topic tree's own files: a subscription's record and the generation, written whole."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

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


def _fields_with(**changed: object) -> str:
    """A record's JSON as boxmq writes it, with `changed` fields."""
    return json.dumps({**dataclasses.asdict(_RECORD), **changed})


def _full_disk(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _refused_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk: the file is made, then its first write is refused."""
    monkeypatch.setattr("boxmq.store.records._write_all", _full_disk)


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


def test_each_generation_is_later_than_the_one_it_replaced_within_one_tick(
    tmp_path: Path,
) -> None:
    # A reader compares the file's (inode, mtime) with what it saw: the inode numbers of a
    # rename's files come back (A, B, A on ext4), and the kernel's clock for a file's time
    # is coarse (a tick of 1 to 4 ms before Linux 6.13), so two changes in one tick gave the
    # reader its pair back, and it routed by old records. The tick is played by a time the
    # clock has not reached yet on the file replaced.
    root = str(tmp_path)
    file = topics.generation_file(root)
    bump_generation(root)
    tick = time.time_ns() + 3_600 * 10**9
    os.utime(file, ns=(tick, tick))
    watch = topics.GenerationWatch(root)
    assert watch.change() == topics.Change(None)
    seen = [os.stat(file).st_mtime_ns]
    for name in ("a", "b"):
        counted = bump_generation(root, paths=(os.path.join(topic_root(root), name),))
        assert counted is not None
        seen.append(os.stat(file).st_mtime_ns)
        assert counted.seen == (os.stat(file).st_ino, seen[-1])
    assert seen == sorted(set(seen))  # strictly later each time: no pair comes back
    change = watch.change()
    assert change == topics.Change(tuple(os.path.join(topic_root(root), n) for n in "ba"))


def test_a_generation_watch_names_the_subscriptions_changed_since_it_looked(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    one, two = (subscription_path(root, "a/#", f"client.{name}") for name in ("one", "two"))
    watch = topics.GenerationWatch(root)
    assert watch.change() is None  # no subscription was ever made
    bump_generation(root, paths=(one,))
    assert watch.change() == topics.Change(None)  # the first look reads everything
    assert watch.change() is None
    bump_generation(root, paths=(two,))
    assert watch.change() == topics.Change((two,))
    bump_generation(root, paths=(one,))
    bump_generation(root, paths=(two,))
    bump_generation(root, paths=(one,))
    assert watch.change() == topics.Change((one, two))  # the latest first, each once
    bump_generation(root, paths=(two,))
    bump_generation(root)  # several (a sweep)
    assert watch.change() == topics.Change(None)
    for _ in range(topics._KEPT + 1):
        bump_generation(root, paths=(one,))
    assert watch.change() == topics.Change(None)  # further behind than the file tells
    bump_generation(root, paths=(one,))
    assert watch.change() == topics.Change((one,))
    older = tmp_path / "older"
    older.write_text("")  # as a version before counts replaces it
    os.replace(older, os.path.join(topic_root(root), ".generation"))
    assert watch.change() == topics.Change(None)
    bump_generation(root, paths=(two,))  # counted from 1 again
    assert watch.change() == topics.Change(None)
    bump_generation(root, paths=(one,))
    assert watch.change() == topics.Change((one,))
    watch.forget()  # what it was read into failed
    assert watch.change() == topics.Change(None)


def test_a_forgotten_change_is_read_whole_even_after_a_change_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change whose generation the disk refused (ENOSPC: the count did not move) is
    forgotten; the process's next change of its own, written, must not count the reader
    caught up: it would read only that change's folder, and keep routing to the
    subscription the refused change ended."""
    root = str(tmp_path)
    one, two = (subscription_path(root, "a/#", f"client.{name}") for name in ("one", "two"))
    watch = topics.GenerationWatch(root)
    bump_generation(root, paths=(one,))
    assert watch.change() == topics.Change(None)
    _refused_write(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        bump_generation(root, paths=(one,))  # `one` ended, and nobody was told
    monkeypatch.undo()
    watch.forget()  # as client.Topics does after that refusal
    counted = bump_generation(root, paths=(two,))
    assert counted is not None
    assert counted.count == 2  # the count after the last seen: the refused one took none
    assert not watch.caught_up(counted)
    assert watch.change() == topics.Change(None)  # every record read again
    counted = bump_generation(root, paths=(two,))
    assert counted is not None
    assert watch.caught_up(counted)  # seen every change since: its own is read alone


def test_changes_made_at_once_each_get_their_own_count(tmp_path: Path) -> None:
    """Two changes with one count: a reader that saw the count before would read the
    subscription one names, never the other's."""
    root = str(tmp_path)
    bump_generation(root)
    ready = threading.Barrier(4)

    def bumps(name: str) -> None:
        ready.wait()
        for _ in range(25):
            bump_generation(root, paths=(subscription_path(root, "a/#", f"client.{name}"),))

    threads = [threading.Thread(target=bumps, args=(str(n),)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with open(os.path.join(topic_root(root), ".generation")) as counted:
        assert counted.read().partition("\n")[0] == "101"


def test_a_folder_an_ended_subscription_left_goes_once_old_never_under_a_join(
    tmp_path: Path,
) -> None:
    """An unsubscribe killed between deleting the record and moving the folder away left the
    messages of a subscription that ended. A subscribe making that folder again holds its
    flock until its record lands; a folder boxmq names no subscription by is another
    program's."""
    root = str(tmp_path)
    path = subscription_path(root, "a/#", "client.s")
    write_record(path, _RECORD)
    Path(path, "target", "4.m1.T").write_bytes(b"m")
    os.unlink(os.path.join(path, ".subscription"))  # the end, killed right after
    foreign = os.path.join(os.path.dirname(path), "sub.conn")  # DropboxMQ's kind of name
    os.makedirs(os.path.join(foreign, "target"))
    Path(foreign, "target", "4.m2.T").write_bytes(b"m")
    now = time.time()
    assert topics.remove_if_ended(path, now=now, age=60) == 0  # changed within the minute
    later = now + 61
    with topics.locked_folder(path):  # a subscribe under that name, its record not written
        assert topics.remove_if_ended(path, now=later, age=60) == 0
    assert topics.remove_if_ended(foreign, now=later, age=60) == 0
    assert topics.remove_if_ended(path, now=later, age=60) == 1
    assert not os.path.exists(path)
    assert os.listdir(foreign) == ["target"]
    assert os.listdir(tmp_path) == ["topic-root"]  # nothing left in .deleting/ either


def test_an_empty_folder_without_a_record_goes_only_under_a_name_boxmq_gives(
    tmp_path: Path,
) -> None:
    """A subscribe that died before its first record left its folder, which the sweep deletes
    once old; it deleted DropboxMQ's empty subscription folders (`sub.conn`) beside it too,
    which boxmq never made (found by a review against remove_if_ended)."""
    path = subscription_path(str(tmp_path), "a/#", "client.s")
    os.makedirs(os.path.join(path, "target"))
    foreign = os.path.join(os.path.dirname(path), "sub.conn")
    os.makedirs(os.path.join(foreign, "target"))
    later = time.time() + 61
    assert not topics.remove_if_abandoned(foreign, now=later, age=60)
    assert os.listdir(foreign) == ["target"]
    assert topics.remove_if_abandoned(path, now=later, age=60)
    assert not os.path.exists(path)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "Expecting value"),  # renamed into place, its data lost to a power cut (fsync never)
        ("[1]", "JSON that is no object: list"),
        ('{"filter": "a/#", "qos": 1}', "its fields are filter, qos"),
        # Edited by hand: the subscribe of a resumed MQTT session or `boxmq subscribe` that
        # read no_local 0 was refused for an argument nobody gave; qos "1" failed every publish
        # (found by a second read).
        (_fields_with(no_local=0), "no_local 0 is not true or false"),
        (_fields_with(no_local=None), "no_local None is not true or false"),
        (_fields_with(qos="1"), "qos '1' is not 0, 1 or 2"),
        (_fields_with(qos=3), "qos 3 is not 0, 1 or 2"),
        (_fields_with(qos=True), "qos True is not 0, 1 or 2"),
        (_fields_with(filter=5), "filter 5 is no string"),
        (_fields_with(subscriber=["s"]), "subscriber ['s'] is no string nor null"),
        (_fields_with(owner=None), "owner None is no string"),
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


def test_clearing_a_folder_left_behind_leaves_empty_state_folders(tmp_path: Path) -> None:
    """Only a state folder that holds something goes: where the file system keeps no flocks,
    a record-less folder may be one that another process's subscribe is making right now,
    its state folders made, its record not yet written."""
    path = topics.subscription_path(str(tmp_path), "a", topics.subscription_key(None, "s"))
    for state in ("working", "target"):
        os.makedirs(os.path.join(path, state))
    assert not topics.clear_left_behind(str(tmp_path), path)
    assert sorted(os.listdir(path)) == ["target", "working"]
    Path(path, "target", "0.m1.M").write_bytes(b"old")
    assert topics.clear_left_behind(str(tmp_path), path)
    assert os.listdir(path) == ["working"]
    assert not (tmp_path / ".deleting").exists()


def test_a_change_left_untold_by_one_thread_is_told_by_the_next_write_of_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One thread's write (telling of a change left untold before) fails on a full disk while
    # another thread writes: that other one must tell of any change, not of its own alone.
    from boxmq.client.routes import Routes

    root = str(tmp_path)
    routes = Routes(root)
    bump_generation(root)
    monkeypatch.setattr(topics, "bump_generation", _full_disk)
    assert routes.tell_others(None) is not None  # a sweep's change left untold
    entered, fail = threading.Event(), threading.Event()
    told: list[tuple[str, ...]] = []

    def bump(root: str, *, flush: bool = False, paths: Sequence[str] = ()) -> topics.Counted | None:
        if not entered.is_set():
            entered.set()
            fail.wait(5)
            _full_disk()
        told.append(tuple(paths))
        return bump_generation(root, flush=flush, paths=paths)

    monkeypatch.setattr(topics, "bump_generation", bump)
    first = threading.Thread(target=routes.tell_others, args=(None,))
    first.start()
    assert entered.wait(5)
    second = threading.Thread(target=routes.changed, args=(os.path.join(root, "x"),))
    second.start()
    second.join(0.1)  # its write, unless it waits for the first's
    fail.set()
    first.join(5)
    second.join(5)
    assert told == [()]  # any change: the untold one too


def test_several_changes_told_in_one_write_are_each_named_to_a_reader_behind(
    tmp_path: Path,
) -> None:
    # An UNSUBSCRIBE of many filters tells them in one write (`paths`): a reader that had
    # seen every change before reads those folders alone, as after one write each.
    root = str(tmp_path)
    base = topic_root(root)
    bump_generation(root, paths=(os.path.join(base, "x"),))
    watch = topics.GenerationWatch(root)
    assert watch.change() == topics.Change(None)  # the first look reads everything
    ended = [os.path.join(base, name) for name in ("a", "b", "c")]
    counted = bump_generation(root, paths=ended)
    assert counted is not None
    assert counted.changes == 3
    change = watch.change()
    assert change is not None
    assert sorted(change.paths or ()) == ended
    # A process that made them catches up with the three as with one.
    own = topics.GenerationWatch(root)
    own.change()
    again = bump_generation(root, paths=ended[:2])
    assert again is not None
    assert own.caught_up(again)
    assert own.change() is None


def test_more_changes_at_once_than_the_generation_names_are_told_as_any(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    bump_generation(root)
    watch = topics.GenerationWatch(root)
    watch.change()
    many = [os.path.join(topic_root(root), f"f{n}") for n in range(topics.KEPT_CHANGES + 1)]
    counted = bump_generation(root, paths=many)
    assert counted is not None
    assert counted.changes == 1
    assert watch.change() == topics.Change(None)
