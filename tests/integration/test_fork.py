"""A Box opened before a fork, used in the child: never the parent's files, threads or locks."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.descriptors import no_descriptor_left
from tests.inotify import inotify_watcher

import boxmq
from boxmq.store import watch as watch_module
from boxmq.store.watch import Changes, watch


def warmed(root: Path, fsync: str) -> tuple[boxmq.Box, boxmq.Queue]:
    """A box whose puts go through own spares kept open (two rounds of put and ack)."""
    box = boxmq.open(root, fsync=fsync, keep_processed=False)
    jobs = box.queue("jobs")
    with jobs.consumer("warm", max_in_flight=50) as consumer:
        for _ in range(2):
            jobs.put_many([b"warm"] * 20)
            for _ in range(20):
                message = consumer.receive(timeout=5)
                assert message is not None
                message.ack()
    return box, jobs


def in_child(work: Callable[[], object]) -> int:
    """Fork; run `work()` in the child, exit 0 if it returned, 1 if it raised; the pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child's coverage is not collected)
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


def waited(pid: int, timeout: float = 30.0) -> int:
    """The child's exit code; it is killed and the test fails if it has not exited in time
    (a child whose commit waited for the parent's committing thread never would)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the child did not exit in {timeout} s")


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_parent_and_child_put_through_one_box_and_every_body_is_its_own(
    tmp_path: Path, fsync: str
) -> None:
    """Before the child renewed the box, both wrote into the same spare files: a message
    the parent had put carried the child's body."""
    box, jobs = warmed(tmp_path, fsync)
    try:
        pid = in_child(lambda: [jobs.put(b"child %d" % n) for n in range(30)])
        for n in range(30):
            jobs.put(b"parent %d" % n)
        assert waited(pid) == 0
        target = tmp_path / "jobs" / "target"
        bodies = sorted(path.read_bytes() for path in target.iterdir())
        expected = sorted(
            [b"child %d" % n for n in range(30)] + [b"parent %d" % n for n in range(30)]
        )
        assert bodies == expected
    finally:
        box.close()


def test_a_child_receives_through_a_consumer_of_its_own(tmp_path: Path) -> None:
    box, jobs = warmed(tmp_path, "never")
    try:
        jobs.put(b"for the child")

        def consume() -> None:
            with jobs.consumer("child") as consumer:
                message = consumer.receive(timeout=5)
                assert message is not None
                assert message.body == b"for the child"
                message.ack()
            box.close()  # closes only what the child made

        assert waited(in_child(consume)) == 0
        assert box.queue("jobs").counts().ready == 0
        jobs.put(b"the parent goes on")  # its spares and committer are untouched
        with jobs.consumer("parent") as consumer:
            message = consumer.receive(timeout=5)
            assert message is not None
            assert message.body == b"the parent goes on"
            message.ack()
    finally:
        box.close()


def test_a_consumer_made_before_the_fork_is_refused_in_the_child(tmp_path: Path) -> None:
    """It is the parent's: the child can neither receive through it nor settle its
    messages, and the parent's lock stays where it is."""
    box, jobs = warmed(tmp_path, "never")
    try:
        jobs.put(b"the parent's")
        consumer = jobs.consumer("parent")
        held = consumer.receive(timeout=5)
        assert held is not None
        subscriber = box.subscribe("a/#", "parent")  # its consumer's words say why, not its own

        def misuse() -> None:
            assert consumer.made_before_fork()
            with pytest.raises(boxmq.Closed, match="before this process was forked"):
                consumer.receive(timeout=0)
            with pytest.raises(boxmq.Closed, match="before this process was forked"):
                held.ack()
            with pytest.raises(boxmq.Closed, match="before this process was forked"):
                subscriber.receive(timeout=0)

        assert waited(in_child(misuse)) == 0
        assert not consumer.made_before_fork()
        subscriber.close()
        assert len(os.listdir(tmp_path / "jobs" / "processing")) == 1  # still the parent's
        held.ack()
        consumer.close()
    finally:
        box.close()


def test_a_get_message_made_before_the_fork_may_be_settled_in_the_child(tmp_path: Path) -> None:
    """A `get()` lock belongs to no process (it is settled by id from the files, as the CLI
    does from another process), so the child may settle the parent's message, as it could by
    id; the parent then finds it settled (docs/python.md, "Processes")."""
    box, jobs = warmed(tmp_path, "never")
    try:
        jobs.put(b"settled by id")
        got = jobs.get("cli")
        assert got is not None
        assert waited(in_child(got.ack)) == 0
        assert os.listdir(tmp_path / "jobs" / "processing") == []
        with pytest.raises(boxmq.ItemNotFound):
            got.ack()
    finally:
        box.close()


def test_a_child_forked_while_a_share_group_join_holds_its_flock_does_not_keep_it(
    tmp_path: Path,
) -> None:
    """A join or leave holds the share group's folder with an flock, which belongs to the open
    file, shared with a child forked meanwhile: the child's copy kept the group locked after
    the join let go (or its process was SIGKILLed), for as long as the child lived, and every
    later join and leave of the group, in any process, waited for it (20 forks beside a join
    and leave loop: stuck 8 s of 8). A forked child closes its copies."""
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        keep = box.subscribe("$share/g/t/#", "p")  # the group and its folder stay
        stop = threading.Event()

        def churn() -> None:
            while not stop.is_set():
                box.subscribe("$share/g/t/#", "a").close()

        churner = threading.Thread(target=churn, daemon=True)
        churner.start()
        children = []
        try:
            for _ in range(20):
                time.sleep(0.01)
                children.append(in_child(lambda: time.sleep(20)))
            stop.set()
            churner.join(timeout=5)
            assert not churner.is_alive(), "a join or leave waits for a child's flock"
            joined: list[boxmq.Subscriber] = []
            joiner = threading.Thread(
                target=lambda: joined.append(box.subscribe("$share/g/t/#", "b")), daemon=True
            )
            joiner.start()
            joiner.join(timeout=5)
            assert joined, "a join waits for a child's flock"
            joined[0].close()
        finally:
            stop.set()
            for pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        keep.close()


def test_a_child_watches_through_an_inotify_instance_of_its_own(tmp_path: Path) -> None:
    """The process's one inotify instance is shared with a child forked from it: a child that
    read it would take the parent's events, one that let go of a watch would end the
    parent's. The child's watchers, those it inherits too, use an instance of its own."""
    folder = tmp_path / "folder"
    folder.mkdir()
    closed, kept = (inotify_watcher(watch(str(folder), poll_interval=60.0)) for _ in range(2))

    def put(name: str) -> None:
        (tmp_path / name).write_bytes(b"m")
        os.rename(tmp_path / name, folder / name)

    def child() -> None:
        closed.close()  # the parent's watch of the folder stays
        assert kept.wait(0).everything  # moved to the child's own instance: rescan
        mine = watch(str(folder), poll_interval=60.0)
        put("from-child")
        assert mine.wait(5.0).names == ["from-child"]
        assert kept.wait(5.0).names == ["from-child"]
        mine.close()
        kept.close()

    assert waited(in_child(child)) == 0
    put("from-parent")
    told: list[str] = []
    end = time.monotonic() + 5.0
    while len(told) < 2 and time.monotonic() < end:
        told += kept.wait(1.0).names
    assert told == ["from-child", "from-parent"]
    closed.close()
    kept.close()


def test_a_child_refused_an_inotify_instance_polls_says_so_once_and_watches_once_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A watcher made before the fork makes the child's own instance at its first wait there:
    refused it (the user's 128 taken, or here the child's descriptors, its RLIMIT_NOFILE),
    the wait raised OSError. It polls, the log says why once, and it tries again now and
    then: watched once there is room, it says "rescan" (the file that landed meanwhile)."""
    monkeypatch.setattr(watch_module, "_RETRY_FIRST", 0.0)  # a try at each look
    caplog.set_level(logging.INFO, logger="boxmq.queue")
    folder = tmp_path / "folder"
    folder.mkdir()
    kept = inotify_watcher(watch(str(folder), poll_interval=60.0))

    def child() -> None:
        caplog.clear()  # the child's copy: the parent's records are not its own
        with no_descriptor_left():
            assert kept.wait(0).everything  # what came before went to the parent's
            polled = kept.polls
            assert kept.wait(0) == Changes()  # tried again, refused again: it polls
        (folder / "early").write_bytes(b"e")
        assert kept.wait(0).everything  # watched: rescan, which finds "early"
        assert (polled, kept.polls) == (True, False)
        (folder / "late").write_bytes(b"l")
        assert kept.wait(5.0).names == ["late"]
        told = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "boxmq.queue"]
        assert [level for level, _ in told] == ["WARNING", "INFO"]
        assert told[0][1].startswith("no inotify instance for this process (Too many open files")
        assert told[1][1].startswith("an inotify instance for this process at last")
        kept.close()

    assert waited(in_child(child)) == 0
    kept.close()


def test_a_child_forked_while_a_thread_holds_the_inotify_lock_starts_and_leaves_the_watches(
    tmp_path: Path,
) -> None:
    """The child renewed what it inherited in no set order: a box renewed before the
    process's inotify instance closed its queues' watchers through the parent's instance,
    waiting for ever on its lock if a thread of the parent held it at the fork (the child
    hung in os.fork()), else removing the parent's watches. Several boxes, so that one came
    before the instance whatever the order."""
    boxes = [boxmq.open(tmp_path / f"root{n}", fsync="never") for n in range(8)]
    consumers = [box.queue("jobs").consumer("parent") for box in boxes]
    try:
        for consumer in consumers:
            assert consumer.receive(timeout=0.01) is None  # its queue is watched
        target = tmp_path / "root0" / "jobs" / "target"
        kept = inotify_watcher(watch(str(target), poll_interval=60.0))
        inotify = watch_module._process
        assert inotify is not None
        with inotify.lock:  # as a thread of the parent polling at the fork
            pid = in_child(lambda: None)
        assert waited(pid, timeout=10.0) == 0
        (tmp_path / "m").write_bytes(b"m")
        os.rename(tmp_path / "m", target / "4.m.T")
        assert kept.wait(5.0).names == ["4.m.T"]  # the parent's watch of it stays
        kept.close()
    finally:
        for box in boxes:
            box.close()
