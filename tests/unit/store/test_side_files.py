"""Side files: put/get by content key, the cache, and the collection of unnamed old files."""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import time
from pathlib import Path

import pytest
from tests.crashes import Killed, kill_at

from boxmq.errors import InvalidArgument
from boxmq.store.records import read_file
from boxmq.store.side_files import GRACE, SIDE_DIR, SideFiles, referenced

NOW = time.time()  # a put stamps real mtimes; ages are set with os.utime, nobody sleeps
OLD = NOW - GRACE - 1
YOUNG = NOW - GRACE + 60


def _age(side: SideFiles, key: str, mtime: float) -> None:
    os.utime(os.path.join(side.path, key), (mtime, mtime))


def _name_with(key: str) -> str:
    return f"4.1795333413065000-9266017507.B.....bx_topicS=t&bx_v5hS={key}&bx_qosY=1"


def test_what_is_put_comes_back_by_its_key_after_a_restart(tmp_path: Path) -> None:
    key = SideFiles(str(tmp_path)).put(b"\x26\x00\x01k\x00\x01v")
    assert len(key) == 32
    assert (tmp_path / SIDE_DIR / key).read_bytes() == b"\x26\x00\x01k\x00\x01v"
    assert SideFiles(str(tmp_path)).get(key) == b"\x26\x00\x01k\x00\x01v"  # no cache there
    assert [p.name for p in (tmp_path / SIDE_DIR).iterdir()] == [key]  # no temporary left


def test_the_same_bytes_reuse_the_file_and_make_it_young_again(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    key = side.put(b"props")
    _age(side, key, OLD)
    assert SideFiles(str(tmp_path)).put(b"props") == key
    assert os.stat(os.path.join(side.path, key)).st_mtime > OLD  # the collection keeps it
    assert len(os.listdir(side.path)) == 1


def test_other_bytes_under_an_existing_key_are_refused(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    key = side.put(b"props")
    Path(side.path, key).write_bytes(b"other")  # as a crafted collision would leave it
    with pytest.raises(InvalidArgument):
        SideFiles(str(tmp_path)).put(b"props")


def test_withdraw_deletes_only_a_file_its_place_made_and_no_put_reused_since(
    tmp_path: Path,
) -> None:
    """For a message refused after its side file (a full disk): the file goes if nothing
    else can name it, and stays where another message's put found it or replaced it."""
    side = SideFiles(str(tmp_path))
    made = side.place(b"alone")
    side.withdraw(made)
    assert os.listdir(side.path) == []
    assert side.get(made.key) is None  # not served from the cache either
    found = SideFiles(str(tmp_path)).place(b"named")
    reused = side.place(b"named")  # another message's, stored before: the file was there
    assert (found.made is not None, reused.made) == (True, None)
    side.withdraw(reused)
    side.withdraw(found)  # a put replaced the file it made since: another message's now
    assert os.listdir(side.path) == [found.key]
    assert SideFiles(str(tmp_path)).get(found.key) == b"named"


def test_a_put_while_withdraw_looks_keeps_the_file_it_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the withdrawn file's rename aside and its unlink, another message's put finds
    no file and makes its own, which stays."""
    side = SideFiles(str(tmp_path))
    made = side.place(b"props")
    real = os.stat
    raced: list[str] = []

    def racing(path: str, *args: object, **kwargs: object) -> os.stat_result:
        if os.path.basename(path) == ".gc-" + made.key and not raced:
            raced.append(path)
            SideFiles(str(tmp_path)).put(b"props")  # another message's, right now
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", racing)
    side.withdraw(made)
    assert raced
    assert os.listdir(side.path) == [made.key]
    assert SideFiles(str(tmp_path)).get(made.key) == b"props"


def test_withdraw_keeps_a_file_of_another_put_that_took_the_same_inode(tmp_path: Path) -> None:
    """A file known by its inode alone: once a put replaced the file `place` made (its inode
    freed), a later put of the same bytes could write its own in that very inode, which the
    withdraw of the first then deleted, a side file other messages named (found at an earlier
    stop). The file's mtime tells them apart too."""
    side = SideFiles(str(tmp_path))
    for _ in range(50):  # a freed inode is taken again at once on ext4 or tmpfs, not always
        made = side.place(b"props")
        time.sleep(0.01)  # past the clock's tick, which stamps the mtimes
        assert side.place(b"props").made is None  # another message's: over the same bytes
        time.sleep(0.01)
        assert side.place(b"props").made is None  # and a third's, in a freed inode
        status = os.stat(os.path.join(side.path, made.key))
        assert made.made is not None
        if (status.st_dev, status.st_ino) == made.made[:2]:
            break
        os.unlink(os.path.join(side.path, made.key))  # try again from none
    else:
        pytest.skip("this file system took no freed inode again")
    side.withdraw(made)
    assert os.listdir(side.path) == [made.key]
    assert SideFiles(str(tmp_path)).get(made.key) == b"props"


def test_get_serves_from_its_cache_and_checks_what_it_reads(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    key = side.put(b"props")
    os.unlink(os.path.join(side.path, key))
    assert side.get(key) == b"props"  # a fan-out's copies read it once
    fresh = SideFiles(str(tmp_path))
    assert fresh.get(key) is None
    Path(side.path, key).write_bytes(b"changed by hand")
    assert fresh.get(key) is None  # the key no longer names these bytes
    assert fresh.get("../../etc/passwd") is None  # a key from a name made by hand


def test_the_cache_holds_16_mib_of_files_and_always_the_newest(tmp_path: Path) -> None:
    """A file may be as large as a packet: 256 of 1 MiB each stayed held for good."""
    side = SideFiles(str(tmp_path))
    keys = [side.put(bytes([n]) * (1 << 20)) for n in range(20)]
    for key in keys:
        os.unlink(os.path.join(side.path, key))  # what get() serves now comes from the cache
    served = [side.get(key) is not None for key in reversed(keys)]
    assert served == [True] * 16 + [False] * 4  # the newest 16 MiB
    huge = side.put(b"h" * (20 << 20))  # over the whole budget, alone: kept, as the newest
    os.unlink(os.path.join(side.path, huge))
    assert side.get(huge) == b"h" * (20 << 20)
    assert side.get(keys[-1]) is None  # it took the others' room


def test_collect_deletes_old_unnamed_files_only(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    named_old, unnamed_old, unnamed_young = (side.put(d) for d in (b"a", b"b", b"c"))
    for key, mtime in ((named_old, OLD), (unnamed_old, OLD), (unnamed_young, YOUNG)):
        _age(side, key, mtime)
    asked = []

    def named() -> set[str]:
        asked.append(1)
        return {named_old}

    assert side.collect(named, now=NOW) == 1
    assert sorted(os.listdir(side.path)) == sorted([named_old, unnamed_young])
    assert len(asked) == 2  # looked twice before deleting anything
    asked.clear()
    assert side.collect(named, now=NOW) == 0
    assert asked == [1]  # the old file is named: no second look
    assert SideFiles(str(tmp_path)).get(named_old) == b"a"


def test_collect_reads_nothing_when_no_file_is_old(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    side.put(b"a")

    def named() -> set[str]:
        raise AssertionError("the root was listed for nothing")

    assert side.collect(named, now=NOW) == 0


def test_referenced_finds_keys_in_every_kind_of_message_file(tmp_path: Path) -> None:
    keys = [f"{i:032x}" for i in range(5)]
    target = tmp_path / "jobs" / "target"
    processing = tmp_path / "topic-root" / "a" / ".subscriptions" / "client.x" / "processing"
    pending = tmp_path / "topic-root" / "a" / ".subscriptions" / "client.x" / "working"
    retained = tmp_path / "topic-root" / ".retained"
    spare = tmp_path / ".spare"
    for folder in (target, processing, pending / ".exactly-once", retained, spare):
        folder.mkdir(parents=True)
    (target / _name_with(keys[0])).write_bytes(b"")
    (processing / (_name_with(keys[1]) + "@w1@1795333443065@tok")).write_bytes(b"")
    (pending / ".exactly-once" / _name_with(keys[2])).write_bytes(b"")
    header = json.dumps({"topic": "t", "name": _name_with(keys[3])})
    (retained / "ab12").write_bytes(header.encode() + b"\n" + b"bx_v5hS=" + b"f" * 32)
    (spare / _name_with(keys[4])).write_bytes(b"")  # not a message: a spare's name is its own
    assert referenced(str(tmp_path)) == set(keys[:4])


def test_a_file_reused_while_collect_looks_is_kept(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    key = side.put(b"props")
    _age(side, key, OLD)
    looks = []

    def named() -> set[str]:
        looks.append(1)
        if len(looks) == 2:  # a publish of the same properties, not committed yet
            assert SideFiles(str(tmp_path)).put(b"props") == key
        return set()

    assert side.collect(named, now=NOW) == 0
    assert os.listdir(side.path) == [key]


def test_a_write_the_disk_refuses_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: str, data: bytes) -> None:
        with open(path, "xb") as out:
            out.write(data[:1])  # begun, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device", path)

    side = SideFiles(str(tmp_path))
    first = side.put(b"first")  # the folder exists
    monkeypatch.setattr("boxmq.store.side_files._write", full)
    with pytest.raises(OSError, match="No space"):
        side.put(b"second")
    assert [p.name for p in (tmp_path / SIDE_DIR).iterdir()] == [first]


def test_a_put_placed_unlinks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """put's cleanup unlinked its temporary after every put, placed or not: on success the
    name was renamed already, so one system call each that could only fail."""
    side = SideFiles(str(tmp_path))
    side.put(b"first")  # the folder exists
    unlinked: list[str] = []
    real = os.unlink

    def counted(path: str, *args: object, **kwargs: object) -> None:
        unlinked.append(path)
        real(path)

    monkeypatch.setattr(os, "unlink", counted)
    side.put(b"second")  # a new file
    SideFiles(str(tmp_path)).put(b"first")  # the same bytes, replacing the file
    assert unlinked == []
    assert sorted(p.name.startswith(".") for p in (tmp_path / SIDE_DIR).iterdir()) == [False] * 2


def test_a_collection_killed_between_its_renames_is_finished_by_the_next(tmp_path: Path) -> None:
    """Killed after renaming a file aside, a collection leaves `.gc-<key>`, which its messages
    still read under that name: the next one puts it back, or drops it beside a `<key>` a put
    wrote since, and judges it as any other file."""
    side = SideFiles(str(tmp_path))
    named_key, unnamed_key, rewritten_key = (side.put(d) for d in (b"a", b"b", b"c"))
    for key in (named_key, unnamed_key, rewritten_key):
        _age(side, key, OLD)
        os.rename(os.path.join(side.path, key), os.path.join(side.path, ".gc-" + key))
    assert SideFiles(str(tmp_path)).put(b"c") == rewritten_key  # a put writes its own anew
    later = time.time() + GRACE + 1  # an hour on: the renames aside are an hour old too
    _age(side, rewritten_key, later - 60)  # and that put's message is not committed yet
    assert side.collect(lambda: {named_key}, now=later) == 1
    assert sorted(os.listdir(side.path)) == sorted([named_key, rewritten_key])
    assert SideFiles(str(tmp_path)).get(named_key) == b"a"
    assert SideFiles(str(tmp_path)).get(rewritten_key) == b"c"


def test_a_file_another_collection_has_just_renamed_aside_is_left_to_it(tmp_path: Path) -> None:
    side = SideFiles(str(tmp_path))
    key = side.put(b"props")
    _age(side, key, OLD)
    os.rename(os.path.join(side.path, key), os.path.join(side.path, ".gc-" + key))
    assert side.collect(set, now=NOW) == 0  # renamed a moment ago: that collection is alive
    assert os.listdir(side.path) == [".gc-" + key]


def test_a_read_while_a_collection_puts_the_file_back_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that missed `<key>` (renamed aside) and then `.gc-<key>` (renamed back in
    between, by a collection that found it reused or by the next after a kill) served its
    message without the properties."""
    side = SideFiles(str(tmp_path))
    key = side.put(b"props")
    path, aside = os.path.join(side.path, key), os.path.join(side.path, ".gc-" + key)
    os.rename(path, aside)

    def racing(name: str) -> bytes:
        if name == path and os.path.exists(aside):
            try:
                return read_file(name)
            finally:
                os.rename(aside, path)  # right after the reader's miss
        return read_file(name)

    monkeypatch.setattr("boxmq.store.side_files.read_file", racing)
    assert SideFiles(str(tmp_path)).get(key) == b"props"


def test_referenced_reads_a_retained_header_longer_than_a_page(tmp_path: Path) -> None:
    # MQTT allows a topic of 65,535 bytes: a retained file whose header passes the first
    # page still names its message's properties, which the collector must then keep.
    key = f"{7:032x}"
    retained = tmp_path / "topic-root" / ".retained"
    retained.mkdir(parents=True)
    header = json.dumps({"topic": "long/" + "x" * 5000, "name": _name_with(key)})
    (retained / "cd34").write_bytes(header.encode() + b"\n" + b"body")
    assert referenced(str(tmp_path)) == {key}


def test_collections_killed_at_any_change_keep_what_is_named_and_end_by_deleting_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection killed at each of its changes (the rename aside, the delete), then the
    next one, an hour on, killed at each of its own (putting back what the first left aside,
    a rename that replaces none): a third one leaves the named file, readable, and nothing
    else."""
    for first, second in itertools.product(range(1, 4), range(1, 5)):
        side = SideFiles(str(tmp_path / f"{first}-{second}"))
        named, unnamed = side.put(b"named"), side.put(b"unnamed")
        for key in (named, unnamed):
            _age(side, key, OLD)
        naming = {named}.copy  # what `referenced` finds: one message names `named`
        for step, now in ((first, NOW), (second, NOW + GRACE + 1)):
            with monkeypatch.context() as dying, contextlib.suppress(Killed):
                kill_at(dying, step)
                side.collect(naming, now=now)
        side.collect(naming, now=NOW + 2 * GRACE + 2)
        assert os.listdir(side.path) == [named], f"killed at {first}, then at {second}"
        assert SideFiles(side.path.removesuffix(SIDE_DIR)).get(named) == b"named"
