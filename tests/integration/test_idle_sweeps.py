"""Subscriptions nobody reads cost the sweeps of `boxmq serve` nothing until something in them
is due (Box.sweep(full=False)): the dropboxes a sweep visits are the keys of its report."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from harness.output import read_line

import boxmq
from boxmq.client import housekeeping, sweeps
from boxmq.client.housekeeping import FULL_SWEEP_EVERY
from boxmq.client.live_queue import LiveQueue
from boxmq.client.topics import Topics
from boxmq.clock import ManualClock
from boxmq.store import layout, process, temporaries
from boxmq.store.dropbox import Dropbox, Entry
from boxmq.store.layout import State
from boxmq.store.topics import bump_generation

SESSIONS = 100

K = TypeVar("K")


def _name(i: int) -> str:
    """The name a sweep's report gives subscription `i` (its filter and folder)."""
    return f"dev/{i}/cmd (client.dev{i})"


def _offline(box: boxmq.Box, count: int) -> None:
    """`count` durable subscriptions whose subscribers left (as offline MQTT sessions)."""
    for i in range(count):
        box.subscribe(f"dev/{i}/cmd", f"dev{i}", lock_timeout=5).detach()


def _count_scans(monkeypatch: pytest.MonkeyPatch, key: Callable[[Dropbox, State], K]) -> Counter[K]:
    """Every listing of a state folder (Dropbox.scan) from now on, counted by `key` of its
    dropbox and state."""
    reads: Counter[K] = Counter()
    scan = Dropbox.scan

    def counted(self: Dropbox, state: State, strays: list[str] | None = None) -> Iterator[Entry]:
        reads[key(self, state)] += 1
        return scan(self, state, strays)

    monkeypatch.setattr(Dropbox, "scan", counted)
    return reads


def test_between_full_passes_a_sweep_visits_only_the_subscriptions_where_something_is_due(
    root: Path, clock: ManualClock
) -> None:
    """Every sweep read each subscription's record and scanned its folders: 70-80 µs each, a
    second, for 2,000 offline sessions 17 % of a core doing nothing."""
    with boxmq.open(root, fsync="never", clock=clock) as box:
        _offline(box, SESSIONS)
        assert len(box.sweep(full=False)) == SESSIONS  # the first is a full pass
        clock.advance(1)
        assert box.sweep(full=False) == {}
        # A copy with an expiry, published here: visited at the next sweep, then at its expiry.
        box.publish("dev/7/cmd", b"soon", expires_in=10)
        box.publish("dev/8/cmd", b"forever")  # nothing due: not visited
        assert list(box.sweep(full=False)) == [_name(7)]
        clock.advance(1)
        assert box.sweep(full=False) == {}
        clock.advance(9)
        [(name, report)] = box.sweep(full=False).items()
        assert (name, report.expired) == (_name(7), 1)
        # A subscriber receiving: visited at the sweep after something changed in it (its
        # own receives sweep processing/ meanwhile); once it rests, at its lock's deadline.
        reader = box.subscribe("dev/8/cmd", "dev8", lock_timeout=5)
        held = reader.receive(0)
        assert held is not None
        assert list(box.sweep(full=False)) == [_name(8)]
        clock.advance(1)
        assert box.sweep(full=False) == {}  # nothing new (2,000 such: 10 % of a core)
        box.publish("dev/8/cmd", b"more")
        assert list(box.sweep(full=False)) == [_name(8)]
        reader.rest()
        clock.advance(1)
        assert list(box.sweep(full=False)) == [_name(8)]  # the visit after the rest
        clock.advance(1)
        assert box.sweep(full=False) == {}
        clock.advance(2)  # its lock's deadline: the lock timeout still ends it on time
        [report] = box.sweep(full=False).values()
        assert report.released == 1
        reader.detach()


def test_what_another_process_did_is_seen_at_the_next_full_pass(
    root: Path, clock: ManualClock
) -> None:
    with (
        boxmq.open(root, fsync="never", clock=clock) as box,
        boxmq.open(root, fsync="never", clock=clock) as other,
    ):
        _offline(box, SESSIONS)
        box.sweep(full=False)
        other.publish("dev/3/cmd", b"soon", expires_in=2)
        clock.advance(3)
        assert box.sweep(full=False) == {}  # this process cannot know of it
        clock.advance(FULL_SWEEP_EVERY)
        reports = box.sweep(full=False)
        assert len(reports) == SESSIONS
        assert reports[_name(3)].expired == 1
        # box.sweep() (the API's, full by default) visits every one, as it always did.
        clock.advance(1)
        assert len(box.sweep()) == SESSIONS


def test_a_resting_subscriber_lets_its_watcher_go_and_finds_what_came_meanwhile(
    root: Path, clock: ManualClock
) -> None:
    """Each offline session's subscription kept an inotify watcher (3 descriptors, and one
    of the 128 instances a user has) for as long as the session lasted."""
    with boxmq.open(root, fsync="never", clock=clock) as box:
        # Fewer: closing an inotify instance waits for the kernel (milliseconds each).
        readers = [box.subscribe(f"dev/{i}/cmd", f"dev{i}") for i in range(50)]
        lives = list(box._engines._live.values())
        assert len(lives) == 50
        assert all(live.watching() for live in lives)
        for reader in readers:
            reader.rest()
        assert all(live.watching() for live in lives)  # a reader back at once keeps it
        box.sweep(full=False)  # closes them, out of the reader's way
        assert not any(live.watching() for live in lives)
        box.publish("dev/5/cmd", b"while away")
        message = readers[5].receive(1)
        assert message is not None
        assert message.text() == "while away"
        assert lives[5].watching()  # watching again, until it rests again
        message.ack()
        box.publish("dev/5/cmd", b"back")
        message = readers[5].receive(1)
        assert message is not None
        assert message.text() == "back"
        assert sum(live.watching() for live in lives) == 1
        for reader in readers:
            reader.detach()


def test_an_idle_subscribers_periodic_looks_read_no_folder_that_stayed_as_it_was(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An MQTT broker pumps each idle persistent session once in 5 s, for what no inotify
    event tells: each pump read target/ (the rescan) and processing/ (the sweep), most of an
    idle server's CPU with 4,000 devices connected. A folder that did not change since its
    last read is not read again (one stat); one that changed is, though its event was lost."""
    reads = _count_scans(monkeypatch, lambda dropbox, state: state)
    folder = root / "topic-root" / "dev%2F1%2Fcmd" / ".subscriptions" / "client.dev1"
    with boxmq.open(root, fsync="never", clock=clock) as box:
        reader = box.subscribe("dev/1/cmd", "dev1")
        assert reader.receive_ready() == []
        past = time.time() - 10  # as a device's folders are, minutes after its last message
        for state in ("target", "processing"):
            os.utime(folder / state, (past, past))
        clock.advance(6)
        assert reader.receive_ready() == []
        assert set(reads) == {State.TARGET, State.PROCESSING}
        reads.clear()
        for _ in range(3):
            clock.advance(6)
            assert reader.receive_ready() == []
        assert not reads
        # Another writer's file, whose inotify event is lost (an overflow, say): found at
        # the next periodic look all the same, target/ having changed.
        (folder / "working" / "x").write_bytes(b"dropped")
        with monkeypatch.context() as lost:
            lost.setattr(LiveQueue, "_absorb", lambda self, changes: None)
            os.rename(folder / "working" / "x", folder / "target" / "4.x.T")
            assert reader.receive_ready() == []
        clock.advance(6)
        [got] = reader.receive_ready()
        assert got.body == b"dropped"


def test_a_sweep_asks_only_the_live_queues_something_stirred_whether_they_want_a_visit(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve's sweep asked each live queue whether it wanted a visit, every second: with
    4,000 MQTT devices connected and quiet, as much as the rest of their idle walk. Those
    with nothing new since the last ask are not asked (they would say no)."""
    asked: Counter[str] = Counter()
    wants_sweep = LiveQueue.wants_sweep

    def counted(self: LiveQueue) -> bool:
        asked[self.queue] += 1
        return wants_sweep(self)

    monkeypatch.setattr(LiveQueue, "wants_sweep", counted)
    with boxmq.open(root, fsync="never", clock=clock) as box:
        readers = [box.subscribe(f"dev/{i}/cmd", f"dev{i}", lock_timeout=5) for i in range(20)]
        box.sweep(full=False)  # a full pass: each one is new
        assert len(asked) == 20
        asked.clear()
        clock.advance(1)
        assert box.sweep(full=False) == {}
        assert not asked
        box.publish("dev/3/cmd", b"news")
        assert list(box.sweep(full=False)) == [_name(3)]  # its reader receiving: visited
        assert list(asked) == ["dev/3/cmd"]
        held = readers[4].receive(0)
        assert held is None
        box.publish("dev/4/cmd", b"held")
        assert (held := readers[4].receive(0)) is not None
        readers[4].rest()
        asked.clear()
        clock.advance(1)
        assert list(box.sweep(full=False)) == [_name(4)]  # the visit after the rest
        assert list(asked) == ["dev/4/cmd"]
        asked.clear()
        clock.advance(1)
        assert box.sweep(full=False) == {}
        assert not asked
        for reader in readers:
            reader.detach()


def test_the_doors_records_and_the_topic_root_are_looked_through_at_full_passes(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An MQTT broker's session records (one file a persistent session) and the topic root
    (a folder a filter) were listed at every sweep, each second, for temporaries an hour
    old: at the full pass (a minute) is as good."""
    listed: Counter[str] = Counter()
    remove = temporaries.remove_stale_temporaries

    def counted(folders: list[str], *, now: float, age: float) -> int:
        listed.update(folders)
        return remove(folders, now=now, age=age)

    monkeypatch.setattr(housekeeping, "remove_stale_temporaries", counted)
    sessions = root / "records"
    sessions.mkdir(parents=True)
    with boxmq.open(root, fsync="never", clock=clock, abandon_after=10) as box:
        box.sweep_temporaries_in(sessions)
        (root / "topic-root").mkdir(exist_ok=True)
        box.sweep(full=False)  # the first is a full pass
        topic_root = str(root / "topic-root")
        assert (listed[str(sessions)], listed[topic_root]) == (1, 1)
        stale = [sessions / ".tmp-dead", root / "topic-root" / ".tmp-dead"]
        past = clock.now() - 60
        for path in stale:
            path.write_bytes(b"")
            os.utime(path, (past, past))
        for _ in range(3):
            clock.advance(1)
            box.sweep(full=False)
        assert (listed[str(sessions)], listed[topic_root]) == (1, 1)
        clock.advance(FULL_SWEEP_EVERY)
        box.sweep(full=False)
        assert (listed[str(sessions)], listed[topic_root]) == (2, 2)
        assert not any(path.exists() for path in stale)
        # One given later is looked through at the next sweep (what a crash left), once.
        later = root / "later"
        later.mkdir()
        box.sweep_temporaries_in(later)
        for _ in range(2):
            clock.advance(1)
            box.sweep(full=False)
        assert (listed[str(sessions)], listed[str(later)]) == (2, 1)


def _lock_holder(root: Path, reader: str, ready: str) -> subprocess.Popen[str]:
    """Another process that opens `reader` (an expression on its `box`), says `ready`,
    takes a message and says "held", then exits when its stdin closes, its lock left
    behind, as by a SIGKILL."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, boxmq\n"
            f"box = boxmq.open({str(root)!r}, fsync='never')\n"
            f"reader = {reader}\n"
            f"print({ready!r}, flush=True)\n"
            "assert reader.receive(10) is not None\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n"
            "os._exit(0)\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_subscription_whose_lock_holder_died_is_visited_between_full_passes(
    root: Path, clock: ManualClock
) -> None:
    """The sweeps between full passes find the subscriptions due without looking at each
    one: one where a process that died holds a lock is still visited at the next sweep."""
    holder = _lock_holder(
        root, "box.subscribe('dev/5/cmd', 'dev5', lock_timeout=3600)", "subscribed"
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    with holder, boxmq.open(root, fsync="never", clock=clock) as box:
        _offline(box, 5)
        assert read_line(holder.stdout, 30) == "subscribed\n"
        box.publish("dev/5/cmd", b"held")
        assert read_line(holder.stdout, 30) == "held\n"
        box.sweep(full=False)  # the full pass: the lock's holder runs
        holder.stdin.close()
        assert holder.wait(10) == 0
        clock.advance(1)
        [(name, report)] = box.sweep(full=False).items()
        assert (name, report.released) == (_name(5), 1)


def _settle(folders: list[Path]) -> None:
    """Their mtimes a while back, as a queue's are seconds after its last change (a sweep
    trusts a folder's mtime only once it is over a second old)."""
    past = time.time() - 10
    for folder in folders:
        os.utime(folder, (past, past))


def test_between_full_passes_a_sweep_lists_no_queue_whose_folders_stayed_as_they_were(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sweep of serve (each second) visited every queue: a listing of its
    processing/, target/ and working/, and of its folder for temporaries. A root with 1,000
    queues and nothing happening took 4.6-5.8 % of a core (10,000: 26-30 %). A queue whose
    visit left nothing due before a time is passed by while its processing/ and target/ keep
    their inode and mtime; its working/ and folder wait for the full pass (files an hour old)."""
    reads = _count_scans(monkeypatch, lambda dropbox, state: os.path.basename(dropbox.path))
    listed: Counter[str] = Counter()
    remove = temporaries.remove_stale_temporaries

    def listing(folders: list[str], *, now: float, age: float) -> int:
        listed.update(os.path.basename(folder) for folder in folders)
        return remove(folders, now=now, age=age)

    monkeypatch.setattr(housekeeping, "remove_stale_temporaries", listing)
    names = [f"q{i}" for i in range(20)]
    with boxmq.open(root, fsync="never", clock=clock) as box:
        queues = [box.queue(name) for name in names]
        queues[1].put(b"soon", expires_in=30)
        queues[2].put(b"held")
        assert queues[2].get("w", lock_timeout=10) is not None
        _settle([root / name / state for name in names for state in ("processing", "target")])
        assert sorted(box.sweep(full=False)) == sorted(names)  # the first is a full pass
        assert set(reads) == set(listed) & set(names) == set(names)
        reads.clear()
        listed.clear()
        for _ in range(3):
            clock.advance(1)
            assert box.sweep(full=False) == {}
        assert not reads
        assert not set(listed) & set(names)
        # A put: visited at the next sweeps, until its target/ is old enough to trust.
        queues[3].put(b"news")
        assert list(box.sweep(full=False)) == ["q3"]
        _settle([root / "q3" / "target"])
        clock.advance(1)
        assert list(box.sweep(full=False)) == ["q3"]
        assert box.sweep(full=False) == {}
        # Another program's file (DropboxMQ's producer): its folder changed.
        (root / "q4" / "working" / "x").write_bytes(b"dropped")
        os.rename(root / "q4" / "working" / "x", root / "q4" / "target" / "4.x.T")
        assert list(box.sweep(full=False)) == ["q4"]
        _settle([root / "q4" / "target"])
        clock.advance(1)
        assert list(box.sweep(full=False)) == ["q4"]
        assert box.sweep(full=False) == {}
        # A lock's deadline and an expiry come on time, as the last visit saw them.
        clock.advance(5)
        [(name, report)] = box.sweep(full=False).items()
        assert (name, report.released) == ("q2", 1)
        clock.advance(20)
        reports = box.sweep(full=False)
        assert reports["q1"].expired == 1
        reads.clear()
        listed.clear()
        clock.advance(FULL_SWEEP_EVERY)
        assert sorted(box.sweep(full=False)) == sorted(names)
        assert set(reads) == set(listed) & set(names) == set(names)


def test_a_queue_whose_lock_holder_died_is_visited_between_full_passes(
    root: Path, clock: ManualClock
) -> None:
    """A queue passed by while its folders stay as they were is still visited at the next
    sweep when a process that holds a lock in it dies (its lock is released at once)."""
    holder = _lock_holder(root, "box.queue('jobs').consumer('w', lock_timeout=3600)", "reading")
    assert holder.stdin is not None
    assert holder.stdout is not None
    with holder, boxmq.open(root, fsync="never", clock=clock) as box:
        assert read_line(holder.stdout, 30) == "reading\n"
        box.queue("jobs").put(b"held")
        assert read_line(holder.stdout, 30) == "held\n"
        _settle([root / "jobs" / "processing", root / "jobs" / "target"])
        assert list(box.sweep(full=False)) == ["jobs"]  # the full pass: the holder runs
        clock.advance(1)
        assert box.sweep(full=False) == {}
        holder.stdin.close()
        assert holder.wait(10) == 0
        clock.advance(1)
        [(name, report)] = box.sweep(full=False).items()
        assert (name, report.dead or report.released) == ("jobs", 1)


def test_between_full_passes_a_sweep_lists_the_root_again_only_when_it_changed(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sweep listed the root for its queues, a stat and an unescape a queue (10,000:
    about as much as the stats of their folders). A root that stayed as it was has the same
    queues, but for a folder made by hand that got its target/ since."""
    listings = 0
    folders = layout.dropbox_folders

    def counted(at: str, *others: list[str]) -> list[tuple[str, str]]:
        nonlocal listings
        listings += 1
        return folders(at, *others)

    monkeypatch.setattr(housekeeping, "dropbox_folders", counted)
    with boxmq.open(root, fsync="never", clock=clock) as box:
        for i in range(5):
            box.queue(f"q{i}")
        (root / "by-hand").mkdir()  # target/ comes later (a slow script)
        _settle([root])
        box.sweep(full=False)  # a full pass lists it
        for _ in range(3):
            clock.advance(1)
            box.sweep(full=False)
        assert listings == 1
        (root / "by-hand" / "target").mkdir()
        assert "by-hand" in box.sweep(full=False)
        assert listings == 2
        box.queue("q5").put(b"new")  # the root changed
        assert "q5" in box.sweep(full=False)
        assert listings == 3
        box.delete_queue("q5")
        _settle([root])
        assert "q5" not in box.sweep(full=False)
        clock.advance(1)
        box.sweep(full=False)
        assert listings == 4
        clock.advance(FULL_SWEEP_EVERY)
        box.sweep(full=False)
        assert listings == 5


def test_a_receiving_subscribers_sweep_lists_processing_once_and_knows_itself_alive(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While it holds a lock, a subscriber's receive sweeps processing/ each second: a member
    of many share groups, each with a message in flight, does so in each of them. The sweep
    listed the folder twice (the other processes' locks, then its own) and read its own
    /proc entry for its own lock: 37 µs a sweep, 14 µs after."""
    reads = _count_scans(monkeypatch, lambda dropbox, state: state)
    asked: list[str] = []
    alive = process.process_alive

    def asking(token: str) -> bool | None:
        asked.append(token)
        return alive(token)

    monkeypatch.setattr(sweeps, "process_alive", asking)
    with boxmq.open(root, fsync="never", clock=clock) as box:
        reader = box.subscribe("dev/1/cmd", "dev1", max_in_flight=2)
        box.publish("dev/1/cmd", b"held")
        [held] = reader.receive_ready()
        for _ in range(3):
            reads.clear()
            clock.advance(1)
            box.publish("dev/1/cmd", b"more")
            [more] = reader.receive_ready()
            assert reads[State.PROCESSING] == 1
            more.ack()
        assert asked == []
        held.ack()
        reader.detach()


def test_a_box_that_never_sweeps_keeps_no_engine_of_what_it_ended(tmp_path: Path) -> None:
    """A live queue that something stirred waits in the box's set for the next sweep's ask,
    and one forgotten (its subscription ended, its queue deleted) waited there too: a box
    that never sweeps (an application beside `boxmq serve`) kept every subscription and
    queue it ever ended, ~12 engines and 140 KiB a round of bench/soak.py (found by a soak)."""
    import gc

    with boxmq.open(tmp_path, fsync="never") as box:
        for n in range(50):
            subscriber = box.subscribe(f"soak/{n}", "app")
            box.publish(f"soak/{n}", b"p")
            message = subscriber.receive(0)
            assert message is not None
            message.ack()
            subscriber.close()
            box.unsubscribe(f"soak/{n}", "app")
            queue = box.queue(f"q{n % 3}")
            queue.put(b"m")
            taken = queue.consumer("w").receive(0)
            assert taken is not None
            taken.ack()
            box.delete_queue(f"q{n % 3}")
        del subscriber, message, taken  # each holds its engine
        gc.collect()
        assert sum(isinstance(o, LiveQueue) for o in gc.get_objects()) == 0


def test_a_box_that_never_sweeps_keeps_a_bounded_count_of_the_folders_sent_expiring_copies(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each publication with an expiry named its subscriptions' folders for the next sweep to
    visit, and a box that never sweeps (an application beside `boxmq serve`) kept them all:
    1,000 subscriptions made, sent one and ended, 1,000 paths (found by a soak). Past a
    bound the next sweep is a full pass instead, which visits them all: none expires late."""
    monkeypatch.setattr(housekeeping, "EXPIRING_KEPT", 5)
    with boxmq.open(root, fsync="never", clock=clock) as box:
        _offline(box, 20)
        assert len(box.sweep(full=False)) == 20  # the first is a full pass
        clock.advance(1)
        for i in range(20):
            box.publish(f"dev/{i}/cmd", b"soon", expires_in=10)
        assert len(box._housekeeping._expiring) <= 5
        assert len(box.sweep(full=False)) == 20  # every subscription: a full pass
        clock.advance(10)
        reports = box.sweep(full=False)
        assert sorted(report.expired for report in reports.values()) == [1] * 20


def test_a_subscription_that_ended_leaves_nothing_due_behind_it(
    root: Path, clock: ManualClock
) -> None:
    """What a visit found due in a subscription was kept until the next full pass, ended or
    not: an MQTT broker whose clients come and go (a clean session each) kept one entry per
    subscription of the minute, each visited once for a copy with an expiry."""
    with boxmq.open(root, fsync="never", clock=clock) as box:
        box.sweep(full=False)  # the first is a full pass
        for i in range(50):
            box.subscribe(f"brief/{i}", f"brief{i}", lock_timeout=5).detach()
            box.publish(f"brief/{i}", b"soon", expires_in=10)
            assert list(box.sweep(full=False)) == [f"brief/{i} (client.brief{i})"]
            assert box.unsubscribe(f"brief/{i}", f"brief{i}")
            clock.advance(0.5)
        assert len(box._housekeeping._due) == 0


def test_subscriptions_ended_together_leave_nothing_due_behind_them(
    root: Path, clock: ManualClock
) -> None:
    """The same for an MQTT UNSUBSCRIBE of many filters (`unsubscribe_many`, told to the
    other processes in one write): its folders are deleted after the write, and each is
    forgotten by the sweep there, as `unsubscribe` forgets it."""
    with boxmq.open(root, fsync="never", clock=clock) as box:
        box.sweep(full=False)  # the first is a full pass
        filters = [f"brief/{i}" for i in range(20)]
        for topic in filters:
            box.subscribe(topic, "brief", lock_timeout=5).detach()
            box.publish(topic, b"soon", expires_in=10)
        assert len(box.sweep(full=False)) == 20
        assert box.unsubscribe_many(filters, "brief") == [True] * 20
        assert len(box._housekeeping._due) == 0


def test_the_due_times_kept_between_full_passes_stay_within_twice_the_subscriptions(
    root: Path, clock: ManualClock
) -> None:
    """Each visit of a subscription pushed its due time on the heap again, the same time or
    not, and only a time that came or the next full pass took one off: 20 subscribers that
    receive each second, their copies expiring in an hour, left 420 times for 20
    subscriptions 20 sweeps after a full pass (up to a minute's sweeps per busy subscription),
    and each subscription ended here left its time behind too (found measuring the sweeps)."""
    kept = 20
    with boxmq.open(root, fsync="never", clock=clock, processed_retention=None) as box:
        due = box._housekeeping._due
        readers = [box.subscribe(f"busy/{i}", f"busy{i}", lock_timeout=30) for i in range(kept)]
        box.sweep(full=False)  # the first is a full pass
        largest = 0
        for second in range(int(FULL_SWEEP_EVERY) - 2):
            for i, reader in enumerate(readers):
                box.publish(f"busy/{i}", b"x", expires_in=3600)
                if (message := reader.receive(0)) is not None and second % 2:
                    message.ack()
            box.subscribe(f"brief/{second}", "brief", lock_timeout=5).detach()
            box.publish(f"brief/{second}", b"x", expires_in=3600)
            assert box.sweep(full=False)  # not a full pass: those are visited each second
            assert box.unsubscribe(f"brief/{second}", "brief")
            largest = max(largest, len(due._times))
            clock.advance(1)
        assert len(due) == kept
        assert largest <= 2 * (kept + 1) + 64  # the brief one kept until its end
        for reader in readers:
            reader.detach()


def test_what_sweeps_keep_of_ended_subscriptions_and_deleted_queues_lasts_a_full_pass(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between full passes a sweep keeps, by path, when a target/ is next looked through for
    expirations (`_next_expiry`), the quiet queues (`_quiet`) and the due subscriptions
    (`_due`), and an end or delete meanwhile leaves its entry (`_due`'s too, when the end
    came during its subscription's visit on a sweep's thread). None grows past a full pass,
    which makes each of them again of what it visited: a subscription and a queue made,
    visited and gone each second keep a full pass's worth at most (two entries a second)."""
    monkeypatch.setattr(layout, "SETTLED", -1.0)  # folders are quiet at once: `_quiet` fills

    def ending_meanwhile(dropbox: Dropbox, **options: Any) -> sweeps.SweepReport:
        report = sweeps.sweep(dropbox, **options)
        if os.path.basename(dropbox.path) == "client.ending":  # ends as its visit finishes
            assert box.unsubscribe("ending/1", "ending")
        return report

    monkeypatch.setattr(housekeeping, "sweep", ending_meanwhile)
    with boxmq.open(root, fsync="never", clock=clock, processed_retention=None) as box:
        kept = box._housekeeping
        box.sweep(full=False)  # the first is a full pass
        box.subscribe("ending/1", "ending", lock_timeout=5).detach()
        box.publish("ending/1", b"x")
        clock.advance(FULL_SWEEP_EVERY)
        box.sweep(full=False)  # a full pass, which visits it as it ends
        assert len(kept._due) == 1  # back, after the end dropped it
        largest = [0, 0, 0]
        for second in range(3 * int(FULL_SWEEP_EVERY)):
            box.subscribe(f"brief/{second}", "brief", lock_timeout=5).detach()
            box.publish(f"brief/{second}", b"x", expires_in=3600)
            queue = box.queue(f"q{second}")
            queue.put(b"m", expires_in=3600)
            box.sweep(full=False)
            assert box.unsubscribe(f"brief/{second}", "brief")
            box.delete_queue(f"q{second}")
            box.sweep(full=False)
            expiries, quiet, due = len(kept._next_expiry), len(kept._quiet), len(kept._due)
            largest = [max(pair) for pair in zip(largest, (expiries, quiet, due), strict=True)]
            clock.advance(1)
            if second and second % int(FULL_SWEEP_EVERY) == 0:  # its first sweep: a full pass
                assert expiries <= 2  # this second's queue and subscription
                assert quiet <= 1
                assert due == 0  # the one back after its end too
        assert 0 < largest[0] <= 2 * (FULL_SWEEP_EVERY + 1)  # a queue and a subscription a second
        assert 0 < largest[1] <= FULL_SWEEP_EVERY + 1  # the queues
        assert largest[2] == 1  # the one back after its end, until the full pass


def test_changes_the_generation_no_longer_names_read_every_record_once_per_named_read_every(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep that finds the generation naming no longer every change since its last look (a
    burst of subscribes, a write that failed) reads every subscription record, as a full pass
    does; while such changes go on, once per NAMED_READ_EVERY seconds at most, not at every
    sweep (a broker's burst of thousands of sessions subscribing read them all each second)."""
    reads: list[float] = []
    sweep_subscriptions = Topics.sweep_subscriptions

    def counted(self: Topics, *args: Any, **kwargs: Any) -> int:
        reads.append(clock.now())
        return sweep_subscriptions(self, *args, **kwargs)

    with boxmq.open(root, fsync="never", clock=clock) as box:
        _offline(box, 3)
        box.sweep(full=False)  # the first is a full pass
        monkeypatch.setattr(Topics, "sweep_subscriptions", counted)
        start = clock.now()
        seconds = int(FULL_SWEEP_EVERY) - 1  # no full pass among them
        for _ in range(seconds):
            clock.advance(1)
            bump_generation(str(root))  # any change: every record is to be read
            box.sweep(full=False)
    assert reads, "the changes were never read"
    assert reads[0] - start <= 1  # the first at the next sweep
    assert len(reads) <= seconds / housekeeping.NAMED_READ_EVERY + 1, reads
    assert all(b - a >= housekeeping.NAMED_READ_EVERY for a, b in itertools.pairwise(reads))
