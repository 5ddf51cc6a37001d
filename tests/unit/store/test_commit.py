"""The committer: fsync policies and group commit, on real files."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.waiting import until

from boxmq.errors import Closed
from boxmq.store import commit
from boxmq.store.commit import Committed, Committer, FsyncPolicy, Move

# Seconds a commit may take to call back: an fsync on a disk a loaded machine shares can take
# seconds; an event that never comes still fails the test.
WAIT = 30


def written(tmp_path: Path, count: int, prefix: str = "m") -> list[Move]:
    (tmp_path / "working").mkdir(exist_ok=True)
    (tmp_path / "target").mkdir(exist_ok=True)
    moves = []
    for index in range(count):
        source = tmp_path / "working" / f"{prefix}{index}"
        source.write_bytes(b"body")
        moves.append(Move(str(source), str(tmp_path / "target" / f"{prefix}{index}")))
    return moves


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_every_policy_moves_the_files(tmp_path: Path, policy: FsyncPolicy) -> None:
    committer = Committer(str(tmp_path), policy, interval=0.05)
    committer.commit(written(tmp_path, 3))
    committer.close()
    assert sorted(os.listdir(tmp_path / "target")) == ["m0", "m1", "m2"]
    assert os.listdir(tmp_path / "working") == []


def test_concurrent_commits_share_flushes(tmp_path: Path) -> None:
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    threads = 16
    per_thread = 20
    batches = [written(tmp_path, per_thread, prefix=f"t{t}-") for t in range(threads)]

    def run(moves: list[Move]) -> None:
        for move in moves:
            committer.commit([move])  # one message per call: only grouping can help

    workers = [threading.Thread(target=run, args=(batch,)) for batch in batches]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    committer.close()
    assert len(os.listdir(tmp_path / "target")) == threads * per_thread
    # Two flushes per group; with 16 writers waiting at once, groups hold several messages.
    assert committer.flushes < threads * per_thread * 2


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_commit_each_tells_each_group_its_own_error(tmp_path: Path, policy: FsyncPolicy) -> None:
    committer = Committer(str(tmp_path), policy, interval=0.05)
    moves = written(tmp_path, 4)
    os.unlink(moves[2].source)
    errors = committer.commit_each([[moves[0], moves[1]], [moves[2]], [], [moves[3]]])
    committer.close()
    assert [type(error) for error in errors] == [type(None), FileNotFoundError] + [type(None)] * 2
    assert sorted(os.listdir(tmp_path / "target")) == ["m0", "m1", "m3"]
    assert committer.commit_each([]) == []


def test_commit_each_flushes_its_groups_together(tmp_path: Path) -> None:
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    groups = [[move] for move in written(tmp_path, 20)]
    assert committer.commit_each(groups) == [None] * 20
    committer.close()
    assert len(os.listdir(tmp_path / "target")) == 20
    # Two flushes per group commit, mostly two groups (the first move alone, as the committer
    # wakes at once, then the rest); committed one after the other they would take forty.
    assert committer.flushes <= 10


def test_a_failed_move_raises_for_its_caller_only(tmp_path: Path) -> None:
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    good, bad = written(tmp_path, 2)
    os.unlink(bad.source)
    with pytest.raises(FileNotFoundError):
        committer.commit([good, bad])
    committer.close()
    assert os.listdir(tmp_path / "target") == ["m0"]


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_a_fan_out_links_every_copy_and_removes_the_staged_file(
    tmp_path: Path, policy: FsyncPolicy
) -> None:
    for name in ("a", "b", "gone"):
        (tmp_path / name / "target").mkdir(parents=True)
    staged = tmp_path / "staged"
    staged.write_bytes(b"once")
    shutil.rmtree(tmp_path / "gone")  # a subscription deleted while publishing: skipped
    copies = tuple(str(tmp_path / d / "target" / "m") for d in ("a", "b", "gone"))
    committer = Committer(str(tmp_path), policy)
    committer.commit([Move(str(staged), None, copies)])  # `always` flushes no folder gone
    committer.close()
    assert not staged.exists()
    assert (tmp_path / "a" / "target" / "m").read_bytes() == b"once"
    a, b = (os.stat(tmp_path / d / "target" / "m").st_ino for d in ("a", "b"))
    assert a == b


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_nothing_to_commit_returns_at_once(tmp_path: Path, policy: FsyncPolicy) -> None:
    # Under always the committer wakes only for moves: an empty commit used to wait forever.
    committer = Committer(str(tmp_path), policy, interval=0.05)
    told: list[OSError | None] = []
    returned = threading.Event()

    def commit_nothing() -> None:
        committer.commit([])
        committer.commit_then([], told.append)
        returned.set()

    threading.Thread(target=commit_nothing, daemon=True).start()
    assert returned.wait(WAIT)
    assert told == [None]
    committer.close()


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_commit_then_calls_back_once_the_moves_are_done(
    tmp_path: Path, policy: FsyncPolicy
) -> None:
    committer = Committer(str(tmp_path), policy, interval=0.05)
    told: list[tuple[OSError | None, list[str]]] = []
    done = threading.Event()

    def committed(error: OSError | None) -> None:
        told.append((error, sorted(os.listdir(tmp_path / "target"))))  # already moved
        done.set()

    committer.commit_then(written(tmp_path, 3), committed)
    assert done.wait(WAIT)
    committer.close()
    assert told == [(None, ["m0", "m1", "m2"])]


def test_commit_then_tells_each_caller_its_own_error(tmp_path: Path) -> None:
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    ok, bad = written(tmp_path, 1, "ok"), written(tmp_path, 1, "bad")
    os.unlink(bad[0].source)
    told: dict[str, OSError | None] = {}
    events = {"ok": threading.Event(), "bad": threading.Event()}

    def tell(name: str) -> Callable[[OSError | None], None]:
        def committed(error: OSError | None) -> None:
            told[name] = error
            events[name].set()

        return committed

    committer.commit_then(bad, tell("bad"))
    committer.commit_then(ok, tell("ok"))
    assert all(event.wait(WAIT) for event in events.values())
    committer.close()
    assert told["ok"] is None
    assert isinstance(told["bad"], FileNotFoundError)
    assert os.listdir(tmp_path / "target") == ["ok0"]


def test_ready_is_told_between_the_renames_and_their_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `always` a caller whose moves were all renamed hears `ready` before the
    directories are flushed, and `committed` after; a caller with a failed move hears
    only `committed`."""
    events: list[str] = []
    flush = commit.flush_directories

    def flush_directories(paths: set[str]) -> None:
        events.append("flush")
        flush(paths)

    monkeypatch.setattr(commit, "flush_directories", flush_directories)
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    ok, bad = written(tmp_path, 2, "ok"), written(tmp_path, 1, "bad")
    os.unlink(bad[0].source)

    def ready(name: str) -> Callable[[], None]:
        return lambda: events.append(f"{name} ready: {sorted(os.listdir(tmp_path / 'target'))}")

    def commit_as(name: str, moves: list[Move]) -> None:
        done = threading.Event()

        def committed(error: OSError | None) -> None:
            events.append(f"{name} committed: {type(error).__name__}")
            done.set()

        committer.commit_then(moves, committed, ready(name))
        assert done.wait(WAIT)

    commit_as("bad", bad)
    commit_as("ok", ok)
    committer.close()
    assert events == [
        "flush",
        "bad committed: FileNotFoundError",
        "ok ready: ['ok0', 'ok1']",
        "flush",
        "ok committed: NoneType",
    ]


def test_a_group_that_follows_another_shares_its_flush_with_the_renames_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `always` a busy committer flushes once per group: the flush of the next group's
    data is the flush of the last group's renames, whose callers are told only after it;
    the last group's renames, with no group after, get a flush of their folders."""
    events: list[str] = []
    flush_filesystem, flush_directories = commit.flush_filesystem, commit.flush_directories

    def flushing_filesystem(root: str) -> None:
        events.append("flush the file system")
        flush_filesystem(root)

    def flushing_directories(paths: set[str]) -> None:
        events.append("flush the folders")
        flush_directories(paths)

    monkeypatch.setattr(commit, "flush_filesystem", flushing_filesystem)
    monkeypatch.setattr(commit, "flush_directories", flushing_directories)
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    first, second = written(tmp_path, 1, "a"), written(tmp_path, 1, "b")
    done = threading.Event()

    def committed(name: str) -> Callable[[OSError | None], None]:
        def told(error: OSError | None) -> None:
            events.append(f"{name} committed: {type(error).__name__}")
            if name == "b":
                done.set()

        return told

    def first_ready() -> None:
        events.append(f"a ready: {sorted(os.listdir(tmp_path / 'target'))}")
        committer.commit_then(second, committed("b"), lambda: events.append("b ready"))

    committer.commit_then(first, committed("a"), first_ready)  # b comes while a is renamed
    assert done.wait(WAIT)
    committer.close()
    assert events == [
        "flush the file system",
        "a ready: ['a0']",
        "flush the file system",  # b's data and a's rename
        "a committed: NoneType",
        "b ready",
        "flush the folders",
        "b committed: NoneType",
    ]
    assert committer.flushes == 3


def test_a_failed_flush_fails_the_group_renamed_before_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush that would have made the last group's renames durable failed: its callers
    hear that error, as do the next group's, which is not renamed."""
    flush_filesystem = commit.flush_filesystem
    flushes: list[str] = []

    def failing_the_second(root: str) -> None:
        flushes.append(root)
        if len(flushes) == 2:
            raise OSError(5, "Input/output error", root)
        flush_filesystem(root)

    monkeypatch.setattr(commit, "flush_filesystem", failing_the_second)
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    first, second = written(tmp_path, 1, "a"), written(tmp_path, 1, "b")
    told: dict[str, OSError | None] = {}
    done = threading.Event()

    def committed(name: str) -> Callable[[OSError | None], None]:
        def tell(error: OSError | None) -> None:
            told[name] = error
            if len(told) == 2:
                done.set()

        return tell

    def first_ready() -> None:
        committer.commit_then(second, committed("b"))

    committer.commit_then(first, committed("a"), first_ready)
    assert done.wait(WAIT)
    committer.close()
    assert {name: getattr(error, "errno", None) for name, error in told.items()} == {
        "a": 5,
        "b": 5,
    }
    assert os.listdir(tmp_path / "target") == ["a0"]  # renamed, not known to be durable
    assert os.listdir(tmp_path / "working") == ["b0"]


@pytest.mark.parametrize("policy", [FsyncPolicy.INTERVAL, FsyncPolicy.NEVER])
def test_ready_is_never_told_when_the_renames_are_not_waited_for(
    tmp_path: Path, policy: FsyncPolicy
) -> None:
    committer = Committer(str(tmp_path), policy, interval=0.05)
    told: list[str] = []
    committer.commit_then(
        written(tmp_path, 2), lambda _: told.append("committed"), lambda: told.append("ready")
    )
    committer.close()
    assert told == ["committed"]


@contextlib.contextmanager
def _no_descriptor_left() -> Iterator[None]:
    """This process's soft limit of open files set to its lowest free descriptor number:
    the kernel refuses its next open (EMFILE), for real, until the block ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.dup(0)  # where the next open would land: no number from it is allowed
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_interval_flush_the_file_system_refuses_is_told_and_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `interval`, a flush refused (EMFILE while clients hold every descriptor, EIO)
    ended the flushing thread: no flush again for the life of the process, its puts still
    acknowledged, and nothing in the log but the thread's traceback (found by the operator's
    probe: `boxmq serve --fsync interval`, its limit of open files lowered a moment with
    prlimit). The refusal is one ERROR line now, and the next interval flushes again."""
    caplog.set_level(logging.INFO, logger="boxmq.store")
    # A thread ended by the refusal fails the test below; its hook, which opens files
    # under the limit, would fail in its stead.
    monkeypatch.setattr(threading, "excepthook", lambda args: None)
    committer = Committer(str(tmp_path), FsyncPolicy.INTERVAL, interval=0.01)
    committer.commit(written(tmp_path, 1))  # starts the flushing thread
    until(lambda: committer.flushes > 0, "no flush under interval")

    def refusals() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]

    with _no_descriptor_left():
        until(refusals, "the refused flush was not told")
        refused_at = committer.flushes
    until(lambda: committer.flushes > refused_at, "no flush once descriptors were back")
    committer.close()
    [refusal] = refusals()  # told once, however many intervals it lasted
    assert "EMFILE" in refusal, refusal
    assert any("flushes again" in r.getMessage() for r in caplog.records)


def test_a_fan_out_to_one_dropbox_is_one_rename(tmp_path: Path) -> None:
    (tmp_path / "staged").write_bytes(b"body")
    inode = os.stat(tmp_path / "staged").st_ino
    (tmp_path / "sub" / "target").mkdir(parents=True)
    copy = tmp_path / "sub" / "target" / "m"
    Committer(str(tmp_path), FsyncPolicy.NEVER).commit(
        [Move(str(tmp_path / "staged"), None, (str(copy),))]
    )
    assert copy.read_bytes() == b"body"
    assert os.stat(copy).st_ino == inode
    assert not (tmp_path / "staged").exists()


def test_a_fan_out_to_one_dropbox_deleted_meanwhile_goes_nowhere(tmp_path: Path) -> None:
    (tmp_path / "staged").write_bytes(b"body")
    gone = tmp_path / "deleted-subscription" / "target" / "m"
    Committer(str(tmp_path), FsyncPolicy.NEVER).commit(
        [Move(str(tmp_path / "staged"), None, (str(gone),))]
    )
    assert not (tmp_path / "staged").exists()
    assert not gone.parent.exists()


def test_a_fan_out_to_one_dropbox_whose_staged_file_is_gone_fails(tmp_path: Path) -> None:
    (tmp_path / "sub" / "target").mkdir(parents=True)
    with pytest.raises(FileNotFoundError):
        Committer(str(tmp_path), FsyncPolicy.NEVER).commit(
            [Move(str(tmp_path / "never-written"), None, (str(tmp_path / "sub" / "target" / "m"),))]
        )


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_commit_one_is_commit_of_one_move(tmp_path: Path, policy: FsyncPolicy) -> None:
    """A put's shortcut (no Move under never and interval): the file renamed, flushed as
    commit flushes it, its error raised as it is, and refused once closed."""
    committer = Committer(str(tmp_path), policy, interval=0.05)
    [move] = written(tmp_path, 1)
    assert move.target is not None
    committer.commit_one(move.source, move.target)
    assert os.listdir(tmp_path / "target") == ["m0"]
    if policy is FsyncPolicy.ALWAYS:
        assert committer.flushes == 2  # a group of one: the file's data, then the rename
    with pytest.raises(FileNotFoundError):
        committer.commit_one(move.source, move.target)  # sent already: nothing to rename
    committer.close()
    with pytest.raises(Closed):
        committer.commit_one(move.source, move.target)
    assert os.listdir(tmp_path / "target") == ["m0"]


def test_discard_unsent_file_deletes_what_was_not_sent(tmp_path: Path) -> None:
    [move] = written(tmp_path, 1)
    assert commit.discard_unsent_file(move.source)
    assert not os.path.lexists(move.source)
    assert not commit.discard_unsent_file(move.source)  # gone: nothing to discard


def test_discard_unsent_file_makes_one_call_of_the_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It looked (lexists) and then deleted: two calls for one file, and a file that went in
    # between was said unsent all the same (found by a second read).
    [move] = written(tmp_path, 1)
    calls: list[str] = []
    real_lstat, real_unlink = os.lstat, os.unlink

    def lstat(path: str, *args: object, **kwargs: object) -> os.stat_result:
        calls.append("lstat")
        return real_lstat(path)

    def unlink(path: str, *args: object, **kwargs: object) -> None:
        calls.append("unlink")
        real_unlink(path)

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "unlink", unlink)
    assert commit.discard_unsent_file(move.source)
    assert not commit.discard_unsent_file(move.source)
    assert calls == ["unlink", "unlink"]


@pytest.mark.parametrize("failing", ["flush_filesystem", "flush_directories"])
def test_a_flush_interrupted_by_no_os_error_tells_its_callers_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A flush that raises something other than an OSError (a MemoryError, a KeyboardInterrupt
    in a thread that handles signals) never flushed: the callers waiting on it hear an error,
    not None (a put that would return as durable), and the exception still goes on."""

    flushing: list[threading.Thread] = []

    def interrupted(_: object) -> None:
        flushing.append(threading.current_thread())
        raise MemoryError("no memory to flush")

    monkeypatch.setattr(commit, failing, interrupted)
    uncaught: list[type[BaseException]] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: uncaught.append(args.exc_type))
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    told: list[OSError | None] = []
    done = threading.Event()

    def committed(error: OSError | None) -> None:
        told.append(error)
        done.set()

    committer.commit_then(written(tmp_path, 2), committed)
    assert done.wait(WAIT)
    [thread] = flushing  # the committer forgets its thread once it ends: see the next test
    thread.join(WAIT)
    assert len(told) == 1
    assert isinstance(told[0], OSError)
    assert "MemoryError" in str(told[0])
    assert uncaught == [MemoryError]


def test_a_committer_whose_thread_an_interruption_ended_commits_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interruption above ends the committing thread; a commit after it, and a commit
    that was waiting behind the interrupted one, must not wait for ever for a thread that is
    gone: a new one takes them, and they are flushed."""
    flushes = 0
    real_flush = commit.flush_filesystem
    entered = threading.Event()
    release = threading.Event()

    def interrupted_once(root: str) -> None:
        nonlocal flushes
        flushes += 1
        if flushes == 1:
            entered.set()
            release.wait(WAIT)  # a second commit arrives meanwhile, and waits behind this one
            raise MemoryError("no memory to flush")
        real_flush(root)

    monkeypatch.setattr(commit, "flush_filesystem", interrupted_once)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    first, waiting, later = written(tmp_path, 3)
    told: dict[str, OSError | None] = {}
    done = {name: threading.Event() for name in ("first", "waiting", "later")}

    def committed_as(name: str) -> Committed:
        def committed(error: OSError | None) -> None:
            told[name] = error
            done[name].set()

        return committed

    committer.commit_then([first], committed_as("first"))
    assert entered.wait(WAIT)
    committer.commit_then([waiting], committed_as("waiting"))
    release.set()
    assert done["first"].wait(WAIT)
    assert isinstance(told["first"], OSError)
    assert done["waiting"].wait(WAIT), "a commit waiting behind the interruption was stranded"
    assert isinstance(told["waiting"], OSError)  # never flushed: not acknowledged
    committer.commit_then([later], committed_as("later"))
    assert done["later"].wait(WAIT), "a commit after the interruption waited for a dead thread"
    assert told["later"] is None
    assert later.target is not None
    assert os.path.exists(later.target)
    committer.close()


@pytest.mark.parametrize("raised", [KeyboardInterrupt, MemoryError])
def test_an_interrupted_callback_strands_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: type[BaseException]
) -> None:
    """Telling the group renamed before that it is durable is interrupted: a callback raises
    something not an Exception (a KeyboardInterrupt), or a MemoryError the log of it runs out
    of memory too. The others of that group still hear their success, the group whose flush
    carried it (not renamed yet) hears a failure, each once, where they would otherwise wait
    for ever for a thread the interruption ended."""
    flush_filesystem = commit.flush_filesystem
    entered, release = threading.Event(), threading.Event()

    def first_waits(root: str) -> None:
        entered.set()
        release.wait(WAIT)  # only the first blocks: a1 and a2 arrive meanwhile, one group
        flush_filesystem(root)

    def out_of_memory(*_: object, **__: object) -> None:
        raise MemoryError("no memory to log the failure")

    monkeypatch.setattr(commit, "flush_filesystem", first_waits)
    monkeypatch.setattr(commit.log, "exception", out_of_memory)
    uncaught: list[type[BaseException]] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: uncaught.append(args.exc_type))
    committer = Committer(str(tmp_path), FsyncPolicy.ALWAYS)
    x, a1, a2, b = (written(tmp_path, 1, name) for name in ("x", "a1", "a2", "b"))
    told: dict[str, list[OSError | None]] = {name: [] for name in ("x", "a1", "a2", "b")}
    done = {name: threading.Event() for name in told}

    def committed_as(name: str) -> Committed:
        def committed(error: OSError | None) -> None:
            told[name].append(error)
            done[name].set()
            if name == "a1":
                raise raised("interrupted while a1's producer was woken")

        return committed

    def a2_ready() -> None:  # b comes while a is renamed: b's flush makes a durable
        committer.commit_then(b, committed_as("b"))

    committer.commit_then(x, committed_as("x"))
    assert entered.wait(WAIT)
    committer.commit_then(a1, committed_as("a1"))
    committer.commit_then(a2, committed_as("a2"), a2_ready)
    release.set()
    for name, event in done.items():
        assert event.wait(WAIT), f"{name} was never told"
    assert told["x"] == told["a1"] == told["a2"] == [None]  # flushed with b's data
    [error] = told["b"]
    assert isinstance(error, OSError)
    assert raised.__name__ in str(error)
    assert uncaught == [raised]
    assert sorted(os.listdir(tmp_path / "target")) == ["a10", "a20", "x0"]
    committer.close()


# Paths of a few parts, empty ones among them: doubled separators, a root, no separator at all.
_PATHS = st.lists(st.sampled_from(["", "a", "target", "m.1"]), min_size=1, max_size=5).map("/".join)
_MOVES = st.builds(
    Move,
    source=st.just("/w/spare"),
    target=st.one_of(st.none(), _PATHS),
    also=st.lists(_PATHS, max_size=3).map(tuple),
)


@given(st.lists(_MOVES, max_size=6))
def test_the_folders_a_group_flushes_are_those_its_moves_wrote_into(moves: list[Move]) -> None:
    # _folders_of reads most folders off their paths without posixpath.dirname: the same.
    assert commit._folders_of(moves) == set[str]().union(*(m.directories() for m in moves))


def test_a_fan_out_to_one_dropbox_whose_target_was_moved_aside_fails(tmp_path: Path) -> None:
    """The subscription is still there (its folder), only its target/ is missing (an operator
    moved it aside to recreate it): the publication fails, for its publisher to send again,
    rather than being dropped as for a deleted subscription."""
    (tmp_path / "staged").write_bytes(b"body")
    for state in ("working", "processing"):  # made whole once: its processing/ is there
        (tmp_path / "sub" / state).mkdir(parents=True)
    with pytest.raises(FileNotFoundError):
        Committer(str(tmp_path), FsyncPolicy.NEVER).commit(
            [Move(str(tmp_path / "staged"), None, (str(tmp_path / "sub" / "target" / "m"),))]
        )
    assert (tmp_path / "staged").read_bytes() == b"body"


def test_a_fan_out_to_a_dropbox_whose_target_was_moved_aside_fails_and_takes_back_its_copies(
    tmp_path: Path,
) -> None:
    for name in ("a/target", "b/working", "b/processing", "gone"):
        (tmp_path / name).mkdir(parents=True)
    os.rmdir(tmp_path / "gone")
    (tmp_path / "staged").write_bytes(b"body")
    copies = tuple(str(tmp_path / d / "target" / "m") for d in ("a", "gone", "b"))
    with pytest.raises(FileNotFoundError):
        Committer(str(tmp_path), FsyncPolicy.NEVER).commit(
            [Move(str(tmp_path / "staged"), None, copies)]
        )
    assert os.listdir(tmp_path / "a" / "target") == []
    assert (tmp_path / "staged").read_bytes() == b"body"


@pytest.mark.parametrize("made", [(), ("working",), ("working", ".subscription")])
def test_a_fan_out_to_a_dropbox_still_being_made_drops_its_copy_quietly(
    tmp_path: Path, made: tuple[str, ...]
) -> None:
    """Another process subscribing right now makes the folder, then working/, then target/:
    a copy finding the folder but no target/ yet is dropped, as for a subscription deleted
    meanwhile (the publication listed an older one), not failed (test_processes' unsubscribe
    loop met it: its publisher died of the refusal)."""
    (tmp_path / "sub").mkdir()
    for name in made:
        path = tmp_path / "sub" / name
        path.mkdir() if "." not in name else path.write_bytes(b"")
    (tmp_path / "staged").write_bytes(b"body")
    Committer(str(tmp_path), FsyncPolicy.NEVER).commit(
        [Move(str(tmp_path / "staged"), None, (str(tmp_path / "sub" / "target" / "m"),))]
    )
    assert not (tmp_path / "staged").exists()
    assert not (tmp_path / "sub" / "target").exists()
