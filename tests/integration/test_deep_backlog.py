"""A deep backlog (hundreds of thousands of ready messages): what the sweeps and the
inspection commands do per message, counted on a few thousand, where a cost paid for every
message at every sweep (or every look) showed only as time on a big one."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import boxmq
from boxmq.client import housekeeping, live_news, sweeps, target_names
from boxmq.client import queue as queue_module
from boxmq.client.lifecycle import envelope_of as decode
from boxmq.client.publishing import Publication
from boxmq.model import ConsumerId, Envelope
from boxmq.store import names
from boxmq.store.dropbox import Dropbox, Entry
from boxmq.store.layout import State
from boxmq.store.watch import PollingWatcher


def _decoded_by(module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names `module` (the sweeps, or a queue's gets and peeks) decodes from now on, in
    the list returned."""
    decoded: list[str] = []

    def envelope_of(name: str) -> Envelope:
        decoded.append(name)
        return decode(name)

    monkeypatch.setattr(module, "envelope_of", envelope_of)
    return decoded


def test_a_sweep_decodes_only_the_names_whose_expiration_may_be_due(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded = _decoded_by(sweeps, monkeypatch)
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"x"] * 2000)
        for _ in range(3):
            jobs.put(b"soon", expires_in=10)
        jobs.put(b"later", expires_in=100)
        # A script's name whose expiration field is escaped: decoded, and expired all the same.
        (root / "jobs" / "target" / "4.script-1.T.%31").write_bytes(b"old")
        clock.advance(20)
        assert box.sweep()["jobs"].expired == 4
        assert jobs.counts().ready == 2001
    assert len(decoded) == 4  # the three due and the script's; not the 2001 others


def test_a_big_target_is_looked_through_for_expirations_in_proportion_to_its_size(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[str] = []
    real = Dropbox.scan

    def scan(self: Dropbox, state: State, strays: list[str] | None = None) -> Iterator[Entry]:
        if state is State.TARGET:
            looked.append(os.path.basename(self.path))
        return real(self, state, strays)

    monkeypatch.setattr(Dropbox, "scan", scan)
    # 3,000 names as 300,000 are at the real rate: looked through every 3 s, not every sweep.
    monkeypatch.setattr(housekeeping, "EXPIRY_NAMES_PER_SECOND", 1000)
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        box.queue("jobs").put_many([b"x"] * 2999)
        box.queue("jobs").put(b"soon", expires_in=0.5)
        box.queue("small").put(b"soon", expires_in=0.5)
        assert box.sweep()["jobs"].looked == 3000
        small = []
        for _ in range(5):
            clock.advance(0.5)
            reports = box.sweep()
            assert reports["jobs"].expired == 0
            small.append(reports["small"].expired)
        assert small == [1, 0, 0, 0, 0]  # a small target/ is looked through at every sweep
        assert looked.count("jobs") == 1
        assert looked.count("small") == 6
        clock.advance(0.5)
        assert box.sweep()["jobs"].expired == 1  # 3 s after the last look
        assert looked.count("jobs") == 2


def test_peek_with_a_limit_stats_only_the_messages_it_shows(
    root: Path, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = box.queue("jobs")
    ids = jobs.put_many([b"x"] * 2000)
    urgent = jobs.put(b"urgent", priority=9)
    (root / "jobs" / "target" / "4.script-1.T").write_bytes(b"abc")  # no time: mtime
    stated: list[str] = []
    real = queue_module._status

    def status(path: str) -> os.stat_result | None:
        stated.append(path)
        return real(path)

    monkeypatch.setattr(queue_module, "_status", status)
    shown = jobs.peek(limit=3)
    assert [peeked.envelope.message_id for peeked in shown] == [urgent, ids[0], ids[1]]
    assert [peeked.size for peeked in shown] == [6, 1, 1]
    assert len(stated) == 1 + 3  # the script's file, for its order; then the three shown
    assert len(jobs.peek()) == 2002


def test_a_sweep_decodes_no_name_of_a_lock_held_in_time(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded = _decoded_by(sweeps, monkeypatch)
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"x"] * 2000)
        with jobs.consumer("w", max_in_flight=2000, lock_timeout=60) as consumer:
            held = consumer.receive_ready()
            assert len(held) == 2000
            # Another process's sweep: none of these locks is its own.
            with boxmq.open(root, fsync="never", clock=clock) as other:
                assert other.sweep()["jobs"].released == 0
                assert decoded == []
                clock.advance(61)
                assert other.sweep()["jobs"].released == 2000
                assert len(decoded) == 2000


def test_the_owner_of_many_locks_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    real = names.check_consumer_name

    def check_consumer_name(name: str, what: str = "consumer name") -> ConsumerId:
        checked.append(name)
        return real(name, what)

    monkeypatch.setattr(names, "check_consumer_name", check_consumer_name)
    names._lock_owner.cache_clear()
    locks = [
        names.split_lock(f"4.{index}.T@worker%20{index % 3}@1796000000000@tok")[1]
        for index in range(2000)
    ]
    assert {lock.owner for lock in locks if lock is not None} == {
        "worker 0",
        "worker 1",
        "worker 2",
    }
    assert len(checked) == 3


def test_many_locks_timing_out_at_once_log_a_hundred_lines_and_a_count(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"x"] * 500)
        with jobs.consumer("w", max_in_flight=500, lock_timeout=60) as consumer:
            assert len(consumer.receive_ready()) == 500
            with boxmq.open(root, fsync="never", clock=clock) as other:
                clock.advance(61)
                with caplog.at_level(logging.DEBUG, logger="boxmq.sweep"):
                    assert other.sweep()["jobs"].released == 500
    told = [r for r in caplog.records if r.name == "boxmq.sweep" and r.levelno >= logging.INFO]
    assert len(told) == 101
    assert (
        told[-1]
        .getMessage()
        .endswith(
            "400 more lock(s) released or sent to error/ in this sweep, each logged at DEBUG (-v)"
        )
    )
    assert sum("redelivering" in r.getMessage() for r in caplog.records) == 500


def test_a_watcher_asking_for_a_rescan_at_every_look_reads_a_big_target_in_proportion(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # inotify's queue overflowing at every read (another process draining the same deep
    # queue), or a polling timer that is always due: the watcher says "rescan" each time.
    monkeypatch.setattr(live_news, "watch", lambda directory, **_: PollingWatcher(0.0))
    # 3,000 names as 60,000 are at the real rate: read again after 3 s, not at every look.
    monkeypatch.setattr(target_names, "RESCAN_NAMES_PER_SECOND", 1000)
    looked: list[str] = []
    real = Dropbox.scan

    def scan(self: Dropbox, state: State, strays: list[str] | None = None) -> Iterator[Entry]:
        if state is State.TARGET:
            looked.append(os.path.basename(self.path))
        return real(self, state, strays)

    monkeypatch.setattr(Dropbox, "scan", scan)
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"x"] * 3000)
        with jobs.consumer("w") as consumer:
            for _ in range(50):
                clock.advance(0.01)  # past watch_interval: each receive looks at the watcher
                message = consumer.receive(timeout=0)
                assert message is not None
                message.ack()
            assert looked.count("jobs") == 1
            clock.advance(2.6)  # 3 s after the first read
            assert consumer.receive(timeout=0) is not None
            assert looked.count("jobs") == 2


def test_claims_lost_to_another_process_on_stale_news_lead_to_a_read_of_target(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The news of what another process took is lost (inotify's queue overflowed), and the
    # next read is far off (3,000 names as 60,000 are at the real rate).
    monkeypatch.setattr(live_news, "watch", lambda directory, **_: PollingWatcher(0.0))
    monkeypatch.setattr(target_names, "RESCAN_NAMES_PER_SECOND", 1000)
    lost: list[str] = []
    real = Dropbox.claim

    def claim(self: Dropbox, name: str, locked: str) -> str | None:
        taken = real(self, name, locked)
        if taken is None:
            lost.append(name)
        return taken

    monkeypatch.setattr(Dropbox, "claim", claim)
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        ids = jobs.put_many([b"x"] * 3000)
        with jobs.consumer("w") as consumer:
            first = consumer.receive(timeout=0)
            assert first is not None
            assert first.id == ids[0]
            first.ack()
            with boxmq.open(root, fsync="never", clock=clock) as other:
                taker = other.queue("jobs").consumer("t", max_in_flight=2000)
                assert len(taker.receive_ready()) == 2000
                clock.advance(0.01)
                following = consumer.receive(timeout=0)
                assert following is not None
                assert following.id == ids[2001]
                taker.close()
    assert len(lost) < 200  # a 16th of the names known, then a read; not the 2,000 taken


def test_a_consumer_decodes_only_a_front_and_keeps_the_order_of_all(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A front of 5 over 40 names, as one of 256 over a deep queue: the rest wait as bare
    # names, while this process and another put urgent and late messages meanwhile, and some
    # that expire (decoded at once, wherever they rank: they wait behind the names kept).
    monkeypatch.setattr(target_names, "FRONT", 5)
    clock = boxmq.ManualClock(time.time())
    waiting: dict[str, int] = {}  # message id: priority

    def put(queue: boxmq.Queue, priority: int, expires_in: float | None = None) -> None:
        waiting[queue.put(b"x", priority=priority, expires_in=expires_in)] = priority

    with (
        boxmq.open(root, fsync="never", clock=clock) as box,
        boxmq.open(root, fsync="never", clock=clock) as other,
    ):
        jobs, theirs = box.queue("jobs"), other.queue("jobs")
        for index in range(40):
            put(jobs, (4, 4, 1, 7)[index % 4], expires_in=3600 if index % 10 == 9 else None)
        with jobs.consumer("w") as consumer:
            decoded, cold = [], []
            for step in range(90):  # the 40, and the 50 put meanwhile
                if step % 4 == 3 and step < 40:
                    put(jobs, 9)  # ours, urgent
                    put(jobs, 0)  # ours, after everything
                    put(theirs, 8)  # another process's (the watcher's news)
                    put(theirs, 4)
                    put(theirs, 0, expires_in=3600)
                clock.advance(0.01)  # past watch_interval: the receive reads the news
                message = consumer.receive(timeout=0)
                assert message is not None
                assert message.id == min(waiting, key=lambda id: (-waiting[id], id))
                del waiting[message.id]
                message.ack()
                decoded.append(len(consumer._live._known))
                cold.append(len(consumer._live._cold))
            assert consumer.receive(timeout=0) is None
    assert max(decoded) <= 20  # the front, and those that expire
    assert max(cold) >= 30


_NOW_MS = 1_796_018_477_450  # the clock of the drains below, in ms
_PRIORITIES = st.sampled_from([0, 4, 4, 4, 7])
# What follows a name's id: none (a plain put), a publication's copy, and names decoded at
# once wherever they rank (a released one: a delivery count, a last holder, a delay passed;
# one that expires later).
_TAILS = st.sampled_from(
    [
        ".B",
        ".B.....bx_topicS=sensors%2Fa&bx_qosY=1",
        ".T.....bx_topicS=sensors%2Fb&bx_qosY=2&bx_v5S=JgAB",
        ".B.....bx_topicS=sensors%2Fa&bx_qosY=1&bx_dcI=1",
        ".B.....bx_topicS=sensors%2Fa&bx_dcI=2&bx_lastS=other",
        f".B.....bx_topicS=sensors%2Fa&bx_nbL={_NOW_MS - 5}",
        f".B.{_NOW_MS + 3_600_000}....bx_topicS=sensors%2Fa",
    ]
)
_BACKLOG_NAME = st.one_of(
    st.builds(
        lambda priority, ms, tail, rest: f"{priority}.{_NOW_MS - ms:013d}{rest}{tail}",
        _PRIORITIES,
        st.integers(0, 3),  # few milliseconds: many ties, ordered by name
        _TAILS,
        st.from_regex(r"[0-9]{3}-[0-9]{1,4}", fullmatch=True),
    ),
    # No IdFactory stamp (a file `mv` dropped in): ranked by its mtime, set below within the
    # same milliseconds as the stamped names, at a fraction of one; "0job" sorts before the
    # stamped ids as a string, "job" after them.
    st.builds(
        lambda priority, prefix, number: f"{priority}.{prefix}-{number}.B",
        _PRIORITIES,
        st.sampled_from(["job", "0job"]),
        st.integers(0, 9),
    ),
)


def _drain_order(root: Path, front: int) -> list[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_names, "FRONT", front)
        clock = boxmq.ManualClock(_NOW_MS / 1000)
        with (
            boxmq.open(root, fsync="never", clock=clock) as box,
            box.queue("jobs").consumer("w") as consumer,
        ):
            order: list[str] = []
            while (message := consumer.receive(timeout=0)) is not None:
                order.append(message.id)
                message.ack()
            return order


@settings(max_examples=30, deadline=None)
@given(names=st.lists(_BACKLOG_NAME, min_size=1, max_size=60, unique_by=lambda n: n.split(".")[1]))
def test_a_mixed_backlog_drains_in_one_order_with_a_small_front_or_none(
    tmp_path_factory: pytest.TempPathFactory, names: list[str]
) -> None:
    # A front of 3 keeps most names cold (bare strings, ranked from the name), a front larger
    # than the backlog none: the engine's order, which the two drains must both be. A name
    # without a stamp ranks by its mtime, to the nanosecond, and the cold horizon by whole
    # milliseconds: both are the rank the name has decoded, so they order alike.
    roots = [tmp_path_factory.mktemp("root") for _ in range(2)]
    for root in roots:
        with boxmq.open(root, fsync="never") as box:
            box.queue("jobs")
        for index, name in enumerate(names):
            path = root / "jobs" / "target" / name
            path.write_bytes(b"x")
            mtime = (_NOW_MS - index % 3) * 1_000_000 + index * 7_919 % 1_000_000  # ns
            os.utime(path, ns=(mtime, mtime))
    small, whole = _drain_order(roots[0], 3), _drain_order(roots[1], 10_000)
    assert small == whole
    assert len(whole) == len(names)


def test_a_share_groups_deep_backlog_stays_cold_and_goes_round(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every copy a share group gets carries its topic: with a front of 5, the 60 waiting wait
    # as bare names, and the two members still take turns, each in the order published.
    monkeypatch.setattr(target_names, "FRONT", 5)
    with boxmq.open(root, fsync="never") as box:
        members = [box.subscribe("$share/etl/sensors/#", name) for name in ("a", "b")]
        box.topics.publish_many([Publication(f"sensors/{i % 3}", b"%d" % i) for i in range(60)])
        got: list[tuple[str, int]] = []
        cold = []
        for _ in range(30):
            for member in members:
                message = member.receive(timeout=5)
                assert message is not None
                got.append((member.name, int(message.body)))
                assert member._consumer is not None  # a durable one, not a memory inbox
                cold.append(len(member._consumer._live._cold))
                message.ack()
        assert all(member.receive(timeout=0) is None for member in members)
        for member in members:
            member.close()
    assert [number for _, number in got] == list(range(60))
    assert [name for name, _ in got] == ["a", "b"] * 30
    assert max(cold) >= 50


def test_a_first_get_on_a_deep_queue_stats_only_what_is_no_regular_file(
    root: Path, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `boxmq get` opens the root for one get: each name it had not seen was lstat'ed to learn
    # whether it was a file, 200,000 system calls (a second of 4) on a queue of 200,000.
    jobs = box.queue("jobs")
    ids = jobs.put_many([b"x"] * 2000)
    target = root / "jobs" / "target"
    (target / "4.1796094129337178-1.T").mkdir()  # a stray, set aside to error/ as before
    os.mkfifo(target / "4.1796094129337178-2.T")
    stated: list[str] = []
    real = os.lstat

    def lstat(path: str | os.PathLike[str], *args: object, **kwargs: object) -> os.stat_result:
        stated.append(os.fspath(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", lstat)
    with boxmq.open(root) as other:  # a new box, as a `boxmq get` run is
        got = other.queue("jobs").get()
    assert got is not None
    assert got.id == ids[0]
    assert len([path for path in stated if path.startswith(str(target))]) <= 2
    assert sorted(os.listdir(root / "jobs" / "error")) == [
        "4.1796094129337178-1.T",
        "4.1796094129337178-2.T",
    ]


def test_a_first_get_on_a_deep_queue_lists_target_once(
    root: Path, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first get listed target/ twice (its names, then their file types) and made an Entry
    # of each file only to drop it: about half of its look on a queue of 100,000 (found by a
    # second read).
    jobs = box.queue("jobs")
    ids = jobs.put_many([b"x"] * 2000)
    target = root / "jobs" / "target"
    (target / "4.1796094129337178-1.T").mkdir()  # a stray, told by the one listing
    listed: list[str] = []
    real_listdir, real_scandir = os.listdir, os.scandir

    def listdir(path: str) -> list[str]:
        listed.append(os.fspath(path))
        return real_listdir(path)

    def scandir(path: str) -> object:
        listed.append(os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)
    with boxmq.open(root) as other:  # a new box, as a `boxmq get` run is
        got = other.queue("jobs").get()
    assert got is not None
    assert got.id == ids[0]
    assert listed.count(str(target)) == 1
    assert os.listdir(root / "jobs" / "error") == ["4.1796094129337178-1.T"]


def test_a_later_get_lists_target_with_the_file_types_only_for_a_burst(
    root: Path, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A get that knows most names (a consumer catching up a backlog) lists target/ for the
    # names alone and lstats its few new ones: with the file types at every get (58bb9d5f) a
    # backlog of 100,000 took 83 ms a get where it had taken 75 and takes 70 now (found by
    # counting the listings of both patterns). A burst is told by the types, no lstat of each
    # new name: listed again when it comes unforeseen, at once at the get after it.
    jobs = box.queue("jobs")
    jobs.put_many([b"x"] * 2000)
    assert jobs.get() is not None  # the names of target/ known from now
    target = root / "jobs" / "target"
    calls: list[tuple[str, str]] = []
    real_listdir, real_scandir, real_lstat = os.listdir, os.scandir, os.lstat

    def listdir(path: str) -> list[str]:
        calls.append(("listdir", os.fspath(path)))
        return real_listdir(path)

    def scandir(path: str) -> object:
        calls.append(("scandir", os.fspath(path)))
        return real_scandir(path)

    def lstat(path: str | os.PathLike[str], *args: object, **kwargs: object) -> os.stat_result:
        calls.append(("lstat", os.fspath(path)))
        return real_lstat(path, *args, **kwargs)  # type: ignore[arg-type]

    def looks_of_a_get(new: int) -> list[str]:
        """What the next get made of target/ after `new` more messages: its listings by kind,
        and "lstat" for each name in it looked at."""
        jobs.put_many([b"y"] * new)
        calls.clear()
        monkeypatch.setattr(os, "listdir", listdir)
        monkeypatch.setattr(os, "scandir", scandir)
        monkeypatch.setattr(os, "lstat", lstat)
        got = jobs.get()
        monkeypatch.undo()
        assert got is not None
        return [
            kind
            for kind, path in calls
            if path == str(target) or path.startswith(str(target) + os.sep)
        ]

    assert looks_of_a_get(3) == ["listdir", "lstat", "lstat", "lstat"]  # catching up
    (target / "4.1796094129337178-1.T").mkdir()  # a new stray, told by the types
    assert looks_of_a_get(1000) == ["listdir", "scandir", "lstat"]  # a burst unforeseen
    assert looks_of_a_get(3) == ["scandir"]  # the get after a burst lists with the types
    assert looks_of_a_get(3) == ["listdir", "lstat", "lstat", "lstat"]  # quiet again
    assert os.listdir(root / "jobs" / "error") == ["4.1796094129337178-1.T"]


def test_a_first_get_on_a_deep_queue_decodes_only_what_its_name_does_not_rank(
    root: Path, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A get decoded every name of target/ it had not seen, and kept each envelope for the
    # next gets: on a queue of 200,000, a `boxmq get` decoded 200,000 names (a second) and
    # held 120 MB, where the order of a plain put's name is read from the name alone.
    jobs = box.queue("jobs")
    ids = jobs.put_many([b"x"] * 2000)
    late = jobs.put(b"late", expires_in=3600)  # an expiration: decoded, as before
    urgent = jobs.put(b"urgent", priority=9)
    decoded = _decoded_by(queue_module, monkeypatch)
    with boxmq.open(root) as other:  # a new box, as a `boxmq get` run is
        taken = [other.queue("jobs").get() for _ in range(3)]
    assert [message.id if message else None for message in taken] == [urgent, ids[0], ids[1]]
    assert [message.body if message else None for message in taken] == [b"urgent", b"x", b"x"]
    assert len(decoded) == 1 + 3  # the message with an expiration; then the three handed out
    assert late in {decode(name).message_id for name in decoded}


def test_peek_decodes_only_the_messages_it_shows_and_what_their_names_do_not_rank(
    root: Path, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `boxmq peek` on a queue of 200,000 decoded every name to order them (a second of two).
    jobs = box.queue("jobs")
    ids = jobs.put_many([b"x"] * 2000)
    jobs.put(b"late", expires_in=3600)  # an expiration: decoded, as before
    urgent = jobs.put(b"urgent", priority=9)
    decoded = _decoded_by(queue_module, monkeypatch)
    shown = jobs.peek(limit=3)
    assert [peeked.envelope.message_id for peeked in shown] == [urgent, ids[0], ids[1]]
    assert len(decoded) == 1 + 3  # the message with an expiration; then the three shown


@pytest.mark.parametrize("moved", [True, False], ids=["after the rename", "before it"])
def test_a_claim_cut_short_by_ctrl_c_leaves_the_consumer_whole(
    root: Path, monkeypatch: pytest.MonkeyPatch, moved: bool
) -> None:
    """Ctrl-C in a busy receive loop lands when a claim's rename returns (ctypes raises the
    KeyboardInterrupt there): the engine counted a lock this process kept no file name for,
    so the consumer's close raised KeyError in place of the interrupt, and the message stayed
    locked until its deadline. Now the claim is as the disk says: held, then released at the
    close, or never made."""
    real = Dropbox.claim

    def interrupted(self: Dropbox, name: str, locked: str) -> str | None:
        if moved:
            real(self, name, locked)
        raise KeyboardInterrupt

    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"a", b"b", b"c"])
        consumer = jobs.consumer("w", max_in_flight=1)
        with monkeypatch.context() as patched:
            patched.setattr(Dropbox, "claim", interrupted)
            with pytest.raises(KeyboardInterrupt):
                consumer.receive(timeout=0)
        consumer.close()  # raised KeyError
        counts = jobs.counts()
        assert (counts.ready, counts.locked) == (3, 0)
        with jobs.consumer("again", max_in_flight=3) as again:
            bodies = [again.receive(timeout=5) for _ in range(3)]
            assert sorted(m.body for m in bodies if m is not None) == [b"a", b"b", b"c"]
