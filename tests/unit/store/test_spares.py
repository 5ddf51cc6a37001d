"""Spare files: a deleted message's inode written again by the next put, on real files."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.crashes import Killed, kill_at
from tests.processes import dead_token

from boxmq.store.commit import Committer, FsyncPolicy, Move
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import State
from boxmq.store.process import process_alive, process_token
from boxmq.store.spares import SPARE_DIR, Spares, rename_noreplace, write_new


def finished(tmp_path: Path, name: str, body: bytes) -> str:
    """A message file as an ack finds it."""
    (tmp_path / "processing").mkdir(exist_ok=True)
    path = tmp_path / "processing" / name
    path.write_bytes(body)
    return str(path)


def pool(root: Path) -> list[str]:
    """Every spare under the root: shared ones and those in pools' own folders (not the files
    an ack left there for the deleter's thread: deleter.py)."""
    return sorted(
        str(path)
        for path in (root / SPARE_DIR).rglob("*")
        if path.is_file() and not path.name.startswith("gone.")
    )


def test_a_retired_file_is_written_again_by_the_next_put(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t")
    old = finished(tmp_path, "m1", b"the old and longer body")
    inode = os.stat(old).st_ino
    assert spares.give(old)
    assert not os.path.exists(old)

    new = str(tmp_path / "fresh")
    write_new(new, b"short", spares)
    assert Path(new).read_bytes() == b"short"  # truncated: nothing of the old body is left
    assert os.stat(new).st_ino == inode
    assert pool(tmp_path) == []


def test_a_longer_body_overwrites_a_shorter_spare(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t")
    spares.give(finished(tmp_path, "m1", b"ab"))
    write_new(str(tmp_path / "fresh"), b"0123456789", spares)
    assert (tmp_path / "fresh").read_bytes() == b"0123456789"


def test_without_a_spare_a_put_creates_its_file(tmp_path: Path) -> None:
    write_new(str(tmp_path / "fresh"), b"body", Spares(str(tmp_path), "t"))
    write_new(str(tmp_path / "plain"), b"body", None)
    assert (tmp_path / "fresh").read_bytes() == (tmp_path / "plain").read_bytes() == b"body"


def test_a_put_never_replaces_an_existing_file(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t")
    spares.give(finished(tmp_path, "m1", b"spare"))
    (tmp_path / "taken").write_bytes(b"somebody's message")
    with pytest.raises(FileExistsError):
        write_new(str(tmp_path / "taken"), b"mine", spares)
    assert (tmp_path / "taken").read_bytes() == b"somebody's message"
    write_new(str(tmp_path / "other"), b"mine", spares)  # the spare was kept for the next put
    assert pool(tmp_path) == []


def test_rename_noreplace_refuses_an_existing_target(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    with pytest.raises(FileExistsError):
        rename_noreplace(str(tmp_path / "a"), str(tmp_path / "b"))
    rename_noreplace(str(tmp_path / "a"), str(tmp_path / "c"))
    assert sorted(os.listdir(tmp_path)) == ["b", "c"]
    with pytest.raises(FileNotFoundError):
        rename_noreplace(str(tmp_path / "a"), str(tmp_path / "d"))


def test_a_body_another_dropbox_links_is_never_written_into(tmp_path: Path) -> None:
    """A fan-out links one body into several subscriptions: acking one copy must leave the
    others' bytes alone."""
    spares = Spares(str(tmp_path), "t")
    mine = finished(tmp_path, "m1", b"shared body")
    theirs = str(tmp_path / "their-copy")
    os.link(mine, theirs)
    assert spares.give(mine)
    assert pool(tmp_path) == []  # not even for a moment: another process could take it there
    write_new(str(tmp_path / "fresh"), b"XXXXXXXXXXXXXXXXX", spares)
    assert Path(theirs).read_bytes() == b"shared body"
    spares.close()  # its deletes done (deleter.py)
    assert os.stat(theirs).st_nlink == 1


def test_a_large_file_is_deleted_not_kept(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t")
    assert spares.give(finished(tmp_path, "big", b"x" * (1 << 17)))
    spares.close()  # its deletes done (deleter.py)
    assert pool(tmp_path) == []


def test_a_file_gone_already_is_reported(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t")
    assert not spares.give(str(tmp_path / "processing-nothing"))  # the pool folder made first
    assert not spares.give(str(tmp_path / "processing-nothing"))  # the pool folder there


def test_the_pool_keeps_at_most_its_limit(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t", limit=3)
    for index in range(5):
        assert spares.give(finished(tmp_path, f"m{index}", b"body"))
    spares.close()  # its deletes done (deleter.py)
    assert len(pool(tmp_path)) == 3
    assert os.listdir(tmp_path / "processing") == []


def test_a_new_process_adopts_the_spares_it_finds_up_to_its_limit(tmp_path: Path) -> None:
    before = Spares(str(tmp_path), "ended")
    for index in range(6):
        before.give(finished(tmp_path, f"m{index}", b"old"))
    before.close()  # its own spares go to the shared pool
    after = Spares(str(tmp_path), "alive", limit=4)
    for index in range(4):
        write_new(str(tmp_path / f"new{index}"), b"new", after)
    assert pool(tmp_path) == []  # 4 reused, 2 over the limit deleted


def test_two_processes_racing_for_one_spare_never_share_it(tmp_path: Path) -> None:
    ended = Spares(str(tmp_path), "ended")
    ended.give(finished(tmp_path, "m", b"old"))
    ended.close()
    racers = [Spares(str(tmp_path), f"p{index}") for index in range(8)]
    barrier = threading.Barrier(len(racers))
    won: list[int | None] = [None] * len(racers)

    def race(index: int) -> None:
        barrier.wait()
        won[index] = racers[index].take(str(tmp_path / f"taken-{index}"))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(racers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(result is not None for result in won) == 1
    assert len([n for n in os.listdir(tmp_path) if n.startswith("taken-")]) == 1


def test_a_limit_of_zero_deletes_at_once(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t", limit=0)
    assert spares.give(finished(tmp_path, "m", b"body"))
    spares.close()  # its deletes done (deleter.py)
    assert pool(tmp_path) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300), st.booleans()), min_size=1, max_size=40))
def test_every_body_reads_back_exactly_whatever_was_recycled(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[bytes, bool]]
) -> None:
    """Puts of any sizes, each retired or kept at random: a live file always holds exactly
    its own body."""
    root = tmp_path_factory.mktemp("spares")
    spares = Spares(str(root), "t", limit=5)
    live: dict[str, bytes] = {}
    for index, (body, retire) in enumerate(steps):
        path = str(root / f"m{index}")
        write_new(path, body, spares)
        live[path] = body
        if retire:
            victim = sorted(live)[len(live) // 2]
            assert spares.give(victim)
            del live[victim]
        for kept, expected in live.items():
            assert Path(kept).read_bytes() == expected


def test_a_dropbox_on_another_file_system_deletes_and_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rename across file systems fails with EXDEV: the ack deletes, the put creates, and
    neither fails (the kernel's answer is simulated: one file system is all a test has)."""
    import errno

    from boxmq.store import spares as module

    spares = Spares(str(tmp_path), "t")
    spares.give(finished(tmp_path, "kept", b"spare"))

    def cross_device(source: str, target: str) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), source, None, target)

    monkeypatch.setattr(module, "rename_noreplace", cross_device)
    monkeypatch.setattr(os, "rename", cross_device)
    assert spares.give(finished(tmp_path, "elsewhere", b"body"))
    assert os.listdir(tmp_path / "processing") == []
    write_new(str(tmp_path / "fresh"), b"new", spares)
    assert (tmp_path / "fresh").read_bytes() == b"new"
    assert len(pool(tmp_path)) == 1  # the spare stays for another dropbox


def test_a_process_that_only_puts_reuses_what_an_acking_process_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An acking process keeps half its `limit` as own spares (for its own puts), and shares
    the rest."""
    from boxmq.store import spares as module

    monkeypatch.setattr(module, "_LOOK_INTERVAL", 0.0)  # no second to wait between looks
    producer, consumer = (
        Spares(str(tmp_path), "producer"),
        Spares(str(tmp_path), "consumer", limit=2),
    )
    write_new(str(tmp_path / "first"), b"made", producer)  # nothing to reuse yet
    write_new(str(tmp_path / "second"), b"made", producer)
    inode = os.stat(tmp_path / "second").st_ino
    assert consumer.give(str(tmp_path / "first"))  # the consumer acks both: one it keeps,
    assert consumer.give(str(tmp_path / "second"))  # one it shares
    write_new(str(tmp_path / "third"), b"reused", producer)
    assert os.stat(tmp_path / "third").st_ino == inode
    assert (tmp_path / "third").read_bytes() == b"reused"
    assert producer.take(str(tmp_path / "fourth")) is None  # the consumer's own one stays its own


def test_a_put_writes_an_own_spare_in_place_and_renames_it_straight_into_target(
    tmp_path: Path,
) -> None:
    """working/ only hides a file being written: an own spare, which no other process takes,
    hides it as well, and saves the put a rename."""
    spares = Spares(str(tmp_path), "t")
    committer = Committer(str(tmp_path), FsyncPolicy.NEVER)
    try:
        box = Dropbox(str(tmp_path / "jobs"), committer, spares=spares)
        spares.give(finished(tmp_path, "m1", b"an older, longer body"))
        inode = os.stat(pool(tmp_path)[0]).st_ino
        move = box.write("4.ID.B", b"new")
        assert os.path.dirname(move.source) != box.dir(State.WORKING)
        assert os.listdir(box.dir(State.WORKING)) == []
        box.send([move])
        assert (tmp_path / "jobs" / "target" / "4.ID.B").read_bytes() == b"new"
        assert os.stat(tmp_path / "jobs" / "target" / "4.ID.B").st_ino == inode
        assert pool(tmp_path) == []
    finally:
        committer.close()


def test_another_pool_never_takes_an_own_spare_of_a_live_process(tmp_path: Path) -> None:
    mine = Spares(str(tmp_path), process_token())
    mine.give(finished(tmp_path, "m", b"mine"))
    other = Spares(str(tmp_path), "other")
    assert other.take(str(tmp_path / "taken")) is None
    assert other.write(b"theirs") is None
    assert len(pool(tmp_path)) == 1
    assert mine.write(b"reused") is not None


def test_the_own_spares_of_a_process_that_died_are_adopted(tmp_path: Path) -> None:
    token = dead_token()
    assert process_alive(token) is False
    crashed = Spares(str(tmp_path), token)
    for index in range(3):
        crashed.give(finished(tmp_path, f"m{index}", b"old"))
    inodes = {os.stat(path).st_ino for path in pool(tmp_path)}
    # no close(): the process was killed
    after = Spares(str(tmp_path), "alive")
    for index in range(3):
        write_new(str(tmp_path / f"new{index}"), b"new", after)
        assert os.stat(tmp_path / f"new{index}").st_ino in inodes
    assert pool(tmp_path) == []
    assert os.listdir(tmp_path / SPARE_DIR) == []  # its folder is gone too


def test_closing_hands_the_own_spares_to_the_other_processes(tmp_path: Path) -> None:
    leaving = Spares(str(tmp_path), process_token())
    leaving.give(finished(tmp_path, "m", b"old"))
    leaving.close()
    assert leaving.write(b"after close") is None
    staying = Spares(str(tmp_path), "staying")
    assert staying.take(str(tmp_path / "taken")) is not None
    assert os.listdir(tmp_path / SPARE_DIR) == []


def test_an_ack_racing_close_still_hands_its_spare_to_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() in another thread between an ack's choice of the own pool and its rename
    there: the file must not stay in an own folder nobody takes from until the process
    ends."""
    spares = Spares(str(tmp_path), process_token())
    real_keep = spares._keep

    def close_meanwhile(path: str, folder: str, prefix: str) -> str | bool:
        kept = real_keep(path, folder, prefix)
        spares.close()  # the other thread's close, just after the rename
        return kept

    monkeypatch.setattr(spares, "_keep", close_meanwhile)
    assert spares.give(finished(tmp_path, "m", b"old"))
    assert [entry.is_file() for entry in os.scandir(tmp_path / SPARE_DIR)] == [True]
    staying = Spares(str(tmp_path), "staying")
    assert staying.take(str(tmp_path / "taken")) is not None


def test_a_deleted_spare_folder_costs_only_the_spares(tmp_path: Path) -> None:
    spares = Spares(str(tmp_path), "t")
    spares.give(finished(tmp_path, "m", b"old"))
    shutil.rmtree(tmp_path / SPARE_DIR)
    assert spares.write(b"body") is None
    write_new(str(tmp_path / "fresh"), b"body", spares)
    assert (tmp_path / "fresh").read_bytes() == b"body"


# --- open own spares -------------------------------------------------------------------------


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def sent(spares: Spares, body: bytes, where: Path) -> Path:
    """A put through an own spare, its file then moved on as a message's is (target/, then
    processing/): where it now is."""
    written = spares.write(body)
    assert written is not None
    os.rename(written, where)
    return where


def test_a_file_given_back_is_written_again_through_the_descriptor_its_put_left_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spares = Spares(str(tmp_path), "t")
    spares.give(finished(tmp_path, "m0", b"the first spare"))
    message = sent(spares, b"one", tmp_path / "processing" / "m1")
    opened: list[str] = []
    real_open = os.open

    def counted(path: str, *args: int) -> int:
        opened.append(path)
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", counted)
    assert spares.give(str(message))
    again = spares.write(b"two")
    assert again is not None
    assert opened == []  # one pwrite, no open and close
    assert Path(again).read_bytes() == b"two"


def test_a_descriptor_left_open_by_another_pool_writes_only_its_own_file(tmp_path: Path) -> None:
    """Pool a's put is acked by pool b, which writes another message into it; when a acks
    that one, it writes through the descriptor it kept, into that same file, never another."""
    a, b = Spares(str(tmp_path), "a"), Spares(str(tmp_path), "b")
    a.give(finished(tmp_path, "a0", b"a's spare"))
    b.give(finished(tmp_path, "b0", b"b's spare"))
    first = sent(a, b"put by a", tmp_path / "processing" / "m1")  # a keeps it open
    other = sent(b, b"put by b", tmp_path / "processing" / "m2")  # b's own spare
    assert b.give(str(first))  # b acks a's message: b's spare now
    second = sent(b, b"b again, longer", tmp_path / "processing" / "m3")  # into a's old file
    assert os.stat(second).st_ino == os.stat(tmp_path / "processing" / "m3").st_ino
    assert a.give(str(second))  # a acks it: the file a kept open comes back
    third = sent(a, b"a!", tmp_path / "processing" / "m4")
    assert third.read_bytes() == b"a!"
    assert other.read_bytes() == b"put by b"


def test_a_pool_keeps_a_bounded_number_of_files_open_and_closes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from boxmq.store import spares as module

    monkeypatch.setattr(module, "_MOST_KEPT_FDS", 4)
    spares = Spares(str(tmp_path), "t", limit=40)
    for index in range(20):
        spares.give(finished(tmp_path, f"m{index}", b"old"))
    before = open_descriptors()
    for index in range(20):  # messages another process will ack: they never come back
        sent(spares, b"new", tmp_path / f"out{index}")
    assert open_descriptors() == before + 4  # the newest four, for when they come back
    spares.close()
    assert open_descriptors() == before


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("ab"), st.binary(max_size=300), st.sampled_from("ab-")),
        min_size=1,
        max_size=50,
    )
)
def test_two_pools_acking_each_other_s_messages_never_write_into_a_live_one(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, bytes, str]]
) -> None:
    """Two processes' pools put (through own spares, kept open, or new files) and ack ('-':
    nobody this step) each other's messages at random: every live file holds exactly its
    own body."""
    root = tmp_path_factory.mktemp("spares")
    (root / "processing").mkdir()
    pools = {"a": Spares(str(root), "a", limit=6), "b": Spares(str(root), "b", limit=6)}
    live: dict[Path, bytes] = {}
    for index, (writer, body, acker) in enumerate(steps):
        where = root / "processing" / f"m{index}"
        if (written := pools[writer].write(body)) is not None:
            os.rename(written, where)
        else:
            write_new(str(where), body, pools[writer])
        live[where] = body
        if acker != "-":
            victim = sorted(live)[len(live) // 2]
            assert pools[acker].give(str(victim))
            del live[victim]
        for path, expected in live.items():
            assert path.read_bytes() == expected
    for spares in pools.values():
        spares.close()


def test_an_ack_while_the_spare_folder_is_being_deleted_deletes_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rm -rf .spare/` racing an ack: the folder the ack makes for its spare goes again
    before (or while) it is made. The ack raised FileNotFoundError and left its message in
    processing/, to come back at its lock's deadline; now the file is deleted instead."""
    spares = Spares(str(tmp_path), "t")

    def deleted_as_made(name: str, mode: int = 0o777, exist_ok: bool = False) -> None:
        raise FileNotFoundError(2, "No such file or directory", name)

    monkeypatch.setattr(os, "makedirs", deleted_as_made)
    done = finished(tmp_path, "m1", b"acked")
    assert spares.give(done)
    assert not os.path.exists(done)
    assert not (tmp_path / SPARE_DIR).exists()


def test_closing_the_files_gone_closes_the_descriptor_it_takes_from_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`close_gone` judged a kept descriptor, then closed that one, though another thread
    may have put another in its place meanwhile (an ack gave the file back once the bound had
    closed the first, a put opened it again): it closed a number that was no longer the
    pool's (a socket's by then, say) and leaked the new descriptor."""
    spares = Spares(str(tmp_path), process_token())
    (tmp_path / "gone").write_bytes(b"x")
    judged = os.open(tmp_path / "gone", os.O_RDONLY)  # its number, reused by another file
    os.unlink(tmp_path / "gone")
    (tmp_path / "kept").write_bytes(b"y")
    replaced = os.open(tmp_path / "kept", os.O_RDONLY)
    inode = os.fstat(replaced).st_ino
    spares._open[inode] = judged
    fstat = os.fstat

    def meanwhile(fd: int) -> os.stat_result:
        if fd == judged:
            spares._open[inode] = replaced  # the other threads' ack and put
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", meanwhile)
    try:
        spares.close_gone()
        monkeypatch.undo()
        os.fstat(judged)  # not the pool's: left open
        assert inode not in spares._open
        with pytest.raises(OSError, match="Bad file descriptor"):  # the pool's: closed, not leaked
            os.fstat(replaced)
    finally:
        for fd in (judged, replaced):
            with contextlib.suppress(OSError):
                os.close(fd)


def test_deletes_within_a_second_of_a_look_leave_it_to_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every subscription's end fstat-ed each kept descriptor (128): many ending together
    (sessions expiring) paid that for each. The first closes at once, the others within
    the second are closed together by the sweep's close_gone_due."""
    from boxmq.store import spares as module

    monkeypatch.setattr(module, "_GONE_INTERVAL", 3600.0)  # however slow the machine
    spares = Spares(str(tmp_path), process_token())
    kept = _two_kept(tmp_path, spares)
    os.unlink(tmp_path / "a")
    spares.close_gone_soon()
    assert list(spares._open.values()) == [kept["b"]]  # at once
    os.unlink(tmp_path / "b")
    spares.close_gone_soon()
    assert list(spares._open.values()) == [kept["b"]]  # within the second: left
    spares.close_gone_due()
    assert spares._open == {}
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(kept["b"])


def _two_kept(folder: Path, spares: Spares) -> dict[str, int]:
    """Files a and b made in `folder`, each kept open by `spares`: their descriptors."""
    kept = {}
    for name in ("a", "b"):
        (folder / name).write_bytes(b"x")
        fd = os.open(folder / name, os.O_RDONLY)
        kept[name] = fd
        spares._open[os.fstat(fd).st_ino] = fd
    return kept


class _Clock:
    """time.monotonic, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.mark.parametrize("late", ["put", "ack"])
def test_a_close_left_for_the_sweep_is_done_by_a_put_or_an_ack_a_second_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, late: str
) -> None:
    """Only the sweep closed what deletes within a second of the last look left: a script
    (boxmq.open) that never sweeps held those files' blocks until it closed the root. The
    next put or ack closes them once the second is past, not before (not at each call)."""
    from boxmq.store import spares as module

    clock = _Clock()
    monkeypatch.setattr(module, "time", clock)
    spares = Spares(str(tmp_path), process_token())
    kept = _two_kept(tmp_path, spares)
    os.unlink(tmp_path / "a")
    spares.close_gone_soon()  # at once
    os.unlink(tmp_path / "b")
    clock.now += 0.5
    spares.close_gone_soon()  # within the second: left

    def late_call() -> None:
        if late == "put":
            assert spares.write(b"body") is None  # no own spare: nothing written
        else:
            assert spares.give(finished(tmp_path, "m", b"acked"))

    late_call()
    assert list(spares._open.values()) == [kept["b"]]  # still within the second
    clock.now += 0.5
    late_call()
    assert spares._open == {}
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(kept["b"])


def test_a_fan_out_killed_before_its_unlink_leaves_its_body_to_the_subscriptions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish writes its body into an own spare, links it into each subscription and
    then unlinks it from the pool. Killed before that unlink, it left the file in its own
    folder: the next pool adopted it as a spare and its next put wrote over the body the
    subscriptions were to read, which then read another message's."""
    crashed = Spares(str(tmp_path), dead_token())
    crashed.give(finished(tmp_path, "m", b"an older body"))
    staged = crashed.write(b"published")
    assert staged is not None
    copies = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        copies.append(str(tmp_path / name / "ID.B"))
    with monkeypatch.context() as dying:
        kill_at(dying, 3)  # both copies linked, the pool's name not yet unlinked
        with pytest.raises(Killed):
            Move(staged, None, tuple(copies)).apply()
    after = Spares(str(tmp_path), "alive")
    write_new(str(tmp_path / "next"), b"the next put", after)
    assert [Path(copy).read_bytes() for copy in copies] == [b"published", b"published"]
    assert pool(tmp_path) == []
    assert os.listdir(tmp_path / SPARE_DIR) == []  # nothing left that nobody cleans


def test_a_large_body_a_dead_process_wrote_into_its_own_spare_is_deleted_not_adopted(
    tmp_path: Path,
) -> None:
    """A put writes its body into an own spare in place, whatever its size, and renames it
    into target/. Killed between the two, it left a large file in its own folder, which the
    next pool adopted as a spare (the link count checked, the size not, unlike `give`), taken
    as _LARGEST bytes long: a put of a body between that and the file's size was not cut to
    its length, and its message ended with the dead put's bytes."""
    crashed = Spares(str(tmp_path), dead_token())
    crashed.give(finished(tmp_path, "m", b"an older body"))
    assert crashed.write(b"x" * 300_000) is not None  # killed before its rename
    after = Spares(str(tmp_path), "alive")
    body = b"y" * 100_000
    write_new(str(tmp_path / "next"), body, after)
    assert (tmp_path / "next").read_bytes() == body
    assert pool(tmp_path) == []


def test_a_large_file_found_in_the_shared_pool_is_cut_to_the_body_written_into_it(
    tmp_path: Path,
) -> None:
    """The shared pool's files are taken without a stat (`_look`), for any length: `give`
    keeps none over _LARGEST, but a file put into .spare/ by hand, or left there by an older
    boxmq, may be longer. Taken as _LARGEST bytes long, a put of a body between that and the
    file's size was not cut to its length, and its message ended with the old file's bytes."""
    (tmp_path / SPARE_DIR).mkdir()
    (tmp_path / SPARE_DIR / "older.0").write_bytes(b"x" * 300_000)
    spares = Spares(str(tmp_path), "alive")
    body = b"y" * 100_000
    write_new(str(tmp_path / "next"), body, spares)
    assert (tmp_path / "next").read_bytes() == body
    assert pool(tmp_path) == []


def test_a_sweep_taking_over_a_process_that_died_since_keeps_the_pool_within_its_limit(
    tmp_path: Path,
) -> None:
    """The first adoption deletes the spares over the limit; a later sweep's full pass, which
    takes over the own spares of a process that died since, moved them all into the shared
    pool, which then held more than the limit for as long as the sweeper ran."""
    sweeper = Spares(str(tmp_path), "sweeper", limit=4)
    sweeper.take_over_the_dead()  # the first full pass: adopts what there is (nothing)
    ended = Spares(str(tmp_path), "ended")
    for index in range(4):
        ended.give(finished(tmp_path, f"m{index}", b"old"))
    ended.close()  # its own spares go to the shared pool: 4, the limit
    crashed = Spares(str(tmp_path), dead_token())
    for index in range(3):
        crashed.give(finished(tmp_path, f"c{index}", b"old"))
    # no close(): the process was killed
    sweeper.take_over_the_dead()  # a later full pass
    assert len(pool(tmp_path)) == 4
    assert all(path.is_file() for path in (tmp_path / SPARE_DIR).iterdir())  # its folder gone
