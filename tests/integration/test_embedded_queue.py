"""The embedded API on real files: put, consume, settle, inspect; with a manual clock."""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tests.integration.mqtt.clients import put_file
from tests.stats import recorded_stats

import boxmq
from boxmq import State
from boxmq.client import lifecycle
from boxmq.client import queue as queue_module
from boxmq.client.live_queue import LiveQueue
from boxmq.client.publishing import Publication
from boxmq.clock import ManualClock
from boxmq.model import GROUP_KEY, PROPERTIES_FILE, ConsumerId
from boxmq.store import topics as layout
from boxmq.store.commit import FsyncPolicy
from boxmq.store.names import Lock, decode, locked_name, split_lock


def drain(consumer: boxmq.Consumer) -> list[boxmq.Message]:
    got = []
    while (message := consumer.receive_nowait()) is not None:
        got.append(message)
    return got


def files(root: Path, queue: str, state: str) -> list[str]:
    return sorted(p.name for p in (root / queue / state).iterdir())


def assert_locked_from_now(message: boxmq.Message, root: Path, clock: ManualClock) -> None:
    """`message` (the only one of "jobs" in processing/) is locked for 1 s from the clock's
    now: in the Message, and in the deadline its lock file's name carries."""
    assert message.lock_deadline == pytest.approx(clock.now() + 1, abs=0.001)
    [locked] = files(root, "jobs", "processing")
    _, lock = split_lock(locked)
    assert lock is not None
    assert lock.deadline_ms == pytest.approx((clock.now() + 1) * 1000, abs=1)


def test_put_then_consume_and_ack_moves_the_file_to_processed(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    message_id = jobs.put(b"payload", priority=7, properties={"tenant": "acme"})
    [name] = files(root, "jobs", "target")
    assert (root / "jobs" / "target" / name).read_bytes() == b"payload"  # the body is the payload
    with jobs.consumer("worker-1") as consumer:
        message = consumer.receive(timeout=1)
        assert message is not None
        assert (message.id, message.body, message.priority) == (message_id, b"payload", 7)
        assert message.properties == {"tenant": "acme"}
        assert message.delivery_count == 1
        [locked] = files(root, "jobs", "processing")
        assert split_lock(locked)[1] is not None
        message.ack()
    assert files(root, "jobs", "processed") == [name]
    assert decode(name).message_id == message_id


def test_state_folders_deleted_by_hand_are_made_again_by_a_claim_and_an_ack(
    box: boxmq.Box, root: Path
) -> None:
    # A consumer took each claim for lost (the message stayed in target/), and each ack kept in
    # processed/ said "the lock was taken away" (the message was redelivered at its deadline).
    jobs = box.queue("jobs")
    jobs.put(b"a")
    jobs.put(b"b")
    os.rmdir(root / "jobs" / "processing")
    os.rmdir(root / "jobs" / "processed")
    with jobs.consumer("worker-1") as consumer:
        message = consumer.receive(timeout=0)
        assert message is not None
        assert message.body == b"a"
        message.ack()
    assert len(files(root, "jobs", "processed")) == 1
    shutil.rmtree(root / "jobs" / "processed")  # to clear what was consumed
    got = jobs.get()  # `boxmq get`'s way: a lock on disk, settled by name
    assert got is not None
    assert got.body == b"b"
    got.ack()
    assert len(files(root, "jobs", "processed")) == 1
    assert files(root, "jobs", "processing") == files(root, "jobs", "target") == []


@pytest.mark.parametrize("fsync", FsyncPolicy.words())
def test_put_many_of_nothing_puts_nothing(tmp_path: Path, fsync: str) -> None:
    with boxmq.open(tmp_path, fsync=fsync) as box:  # under always it used to wait forever
        jobs = box.queue("jobs")
        assert jobs.put_many([]) == []
        assert files(tmp_path, "jobs", "target") == []


@pytest.mark.parametrize("seconds", [math.nan, math.inf, 1e300])
def test_a_duration_refused_leaves_the_message_where_it_was(box: boxmq.Box, seconds: float) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"x")
    with pytest.raises(boxmq.InvalidArgument):
        jobs.get(lock_timeout=seconds)
    by_id = jobs.get()
    assert by_id is not None
    with pytest.raises(boxmq.InvalidArgument):
        jobs.unlock(by_id.id, delay=seconds)
    with pytest.raises(boxmq.InvalidArgument):
        jobs.extend(by_id.id, seconds=seconds)
    jobs.unlock(by_id.id)  # still its lock: the refusals moved nothing
    with jobs.consumer("w") as consumer:
        message = consumer.receive(timeout=5)
        assert message is not None
        with pytest.raises(boxmq.InvalidArgument):
            message.unlock(delay=seconds)  # a century's delay once dropped the lock first
        with pytest.raises(boxmq.InvalidArgument):
            message.extend(seconds)
        message.unlock()
    with jobs.consumer("v") as consumer:
        again = consumer.receive(timeout=5)
        assert again is not None
        assert again.body == b"x"
        again.ack()


@pytest.mark.parametrize("body", [5, None, 1.5, "lone \udcff surrogate"])
def test_a_body_that_is_not_bytes_or_text_is_refused_and_nothing_is_left(
    box: boxmq.Box, root: Path, body: object
) -> None:
    jobs = box.queue("jobs")
    with pytest.raises(boxmq.InvalidArgument):
        jobs.put(body)  # type: ignore[arg-type]
    with pytest.raises(boxmq.InvalidArgument):
        jobs.put(body, priority=7)  # type: ignore[arg-type]
    with pytest.raises(boxmq.InvalidArgument):
        jobs.put_many([b"written first", body])  # type: ignore[list-item]
    assert files(root, "jobs", "working") == []  # the first one too: not left for the sweep
    assert files(root, "jobs", "target") == []
    with pytest.raises(boxmq.InvalidArgument):
        box.publish("t", body)  # type: ignore[arg-type]


@pytest.mark.parametrize("priority", [True, 7.0, 7.5, "7"])
def test_a_priority_that_is_not_an_int_is_refused_and_nothing_is_written(
    box: boxmq.Box, root: Path, priority: object
) -> None:
    """str() would write `True.<id>.B` or `7.0.<id>.B`: a name no reader decodes."""
    jobs = box.queue("jobs")
    with pytest.raises(boxmq.InvalidArgument, match=r"priority .* is not an int"):
        jobs.put(b"x", priority=priority)  # type: ignore[arg-type]
    with pytest.raises(boxmq.InvalidArgument, match=r"priority .* is not an int"):
        jobs.put(b"x", priority=priority, properties={"k": "v"})  # type: ignore[arg-type]
    with pytest.raises(boxmq.InvalidArgument, match=r"priority .* is not an int"):
        jobs.put_many([boxmq.Outgoing(b"x", priority=priority)])  # type: ignore[arg-type]
    with pytest.raises(boxmq.InvalidArgument, match=r"priority .* is not an int"):
        box.assured("src", "m1", b"x", queue="jobs", priority=priority)  # type: ignore[arg-type]
    assert files(root, "jobs", "working") == []
    assert files(root, "jobs", "target") == []
    assert box.assured("src", "m1", b"x", queue="jobs") is True  # refused, so not a repeat


def test_a_state_may_be_named_by_its_folder(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"x")
    assert [p.size for p in jobs.peek(state="target")] == [1]
    with pytest.raises(boxmq.InvalidArgument, match="no state 'ready': use one of working, target"):
        jobs.peek(state="ready")
    assert jobs.requeue(source="error") == 0
    assert jobs.purge(state="target") == 1


def test_find_tells_where_a_message_is_by_its_id(box: boxmq.Box, root: Path) -> None:
    """As peek shows it, from whichever folder holds it; None for an id no folder holds.
    An id with what a name escapes ('.', '~', a space) is found too, and `states` limits
    where it is looked for."""
    jobs = box.queue("jobs")
    ready, held, done = jobs.put_many([b"ready", b"held", b"done"])
    deadline = int((time.time() + 60) * 1000)
    for message_id, to in ((held, "processing"), (done, "processed")):
        [name] = [n for n in files(root, "jobs", "target") if decode(n).message_id == message_id]
        moved = (
            locked_name(name, Lock(ConsumerId("worker"), deadline, ""))
            if to == "processing"
            else name
        )
        os.rename(root / "jobs" / "target" / name, root / "jobs" / to / moved)
    put_file(root / "jobs" / "target", "4.odd%2Eid%7E%20x.B", b"odd")
    found = {m: jobs.find(m) for m in (ready, held, done, "odd.id~ x")}
    assert {m: (f.state, f.size) for m, f in found.items() if f} == {
        ready: (State.TARGET, 5),
        held: (State.PROCESSING, 4),
        done: (State.PROCESSED, 4),
        "odd.id~ x": (State.TARGET, 3),
    }
    assert (held_found := found[held]) is not None
    assert held_found.holder == "worker"
    assert jobs.find("1-2") is None
    assert jobs.find(done, states=["target", State.ERROR]) is None
    with pytest.raises(boxmq.InvalidArgument, match="is not a str"):
        jobs.find(5)  # type: ignore[arg-type]


def test_find_reads_only_the_names_that_may_be_its_message_s(
    box: boxmq.Box, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look-up by id among many messages stats only its own file and decodes only the
    names that may carry its id: a peek of the folder read every one of them (seconds for
    300,000, what a refused `boxmq ack` did to say a message was settled already)."""
    jobs = box.queue("jobs")
    ids = jobs.put_many([b"x"] * 200)
    decodes: list[str] = []
    real_decode = lifecycle.envelope_of

    def envelope_of(name: str) -> Any:
        decodes.append(name)
        return real_decode(name)

    stats = recorded_stats(monkeypatch)
    monkeypatch.setattr(queue_module, "envelope_of", envelope_of)
    found = jobs.find(ids[150])
    assert found is not None
    assert found.envelope.message_id == ids[150]
    assert (len(stats), len(decodes)) == (1, 1)


def test_counts_take_a_lock_whose_deadline_passed_for_ready_as_ls_does(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    """Nobody holds it: the next get takes it. `queue.counts()` counted the files as they
    lie, such a lock `locked`, where `boxmq ls` and `box.counts()` said `ready`; a
    subscription's counts, and `box.topics.subscriptions()`, did the same."""
    jobs = manual_box.queue("jobs")
    jobs.put_many([b"ends", b"held"])
    folder = manual_box.topics.attach_dropbox("news/#", "reader")
    manual_box.publish("news/a", b"ends")
    manual_box.publish("news/b", b"held")
    news = manual_box.subscription("news/#", "reader")
    for queue in (jobs, news):
        assert queue.get(lock_timeout=10) is not None
        assert queue.get(lock_timeout=100) is not None
    clock.advance(10)
    (info,) = manual_box.topics.subscriptions()
    for counts in (jobs.counts(), manual_box.counts()["jobs"], news.counts(), info.counts):
        assert (counts.ready, counts.locked) == (1, 1)
    assert len(os.listdir(os.path.join(folder, "processing"))) == 2  # counting moves nothing


def test_lock_process_tells_get_s_lock_from_a_consumer_s(box: boxmq.Box) -> None:
    """As docs/python.md says: "get" for a lock `get` took (what `boxmq unlock` reads to let
    it be settled whoever joined under its name), a consumer's own process token, None for
    a consumer that holds no lock on it. The docs said "" for `get`'s."""
    jobs = box.queue("jobs")
    jobs.put_many([b"a", b"b"])
    got = jobs.get()
    assert got is not None
    assert jobs.lock_process(got.id) == "get"
    assert jobs.lock_process(got.id, "worker-1") is None
    with jobs.consumer("worker-1") as consumer:
        held = consumer.receive(timeout=5)
        assert held is not None
        token = jobs.lock_process(held.id, "worker-1")
        assert token is not None
        assert token.split("-")[1] == str(os.getpid())


def test_a_paused_consumer_gives_back_what_it_has_not_received_as_it_was(
    box: boxmq.Box, root: Path
) -> None:
    jobs = box.queue("jobs")
    for n in range(2):
        jobs.put(f"m{n}".encode())
    names = files(root, "jobs", "target")
    with jobs.consumer("a", max_in_flight=2) as a, jobs.consumer("b", max_in_flight=2) as b:
        first = a.receive(timeout=5)  # the dispatch claims one for each, round robin
        assert first is not None
        assert files(root, "jobs", "target") == []
        b.pause()  # b's claim, never received, goes back under its own name
        assert files(root, "jobs", "target") == [n for n in names if first.id not in n]
        second = a.receive(timeout=5)
        assert second is not None
        assert second.delivery_count == 1  # delivered once: the claim given back did not count
        assert b.receive_nowait() is None  # paused: nothing more for b
        b.resume()
        jobs.put(b"m2")
        third = b.receive(timeout=5)
        assert third is not None
        assert third.body == b"m2"


def test_a_lowered_max_in_flight_gives_back_what_is_over_it_and_not_received_as_it_was(
    box: boxmq.Box, root: Path
) -> None:
    """XEP-0254 §2.1: queue_requests caps what a subscriber holds. Lowered with set_limits,
    a consumer kept what was locked ahead for it under the old limit, never received: it held
    four with a limit of one, and the consumer of another process waited for those messages
    until their locks timed out (30 s)."""
    jobs = box.queue("jobs")
    jobs.put_many([f"m{n}" for n in range(4)])
    with jobs.consumer("a", max_in_flight=4) as a:
        first = a.receive(timeout=5)
        assert first is not None
        assert a.holding() == 4  # `first`, and three locked ahead for it
        a.set_limits(max_in_flight=1, lock_timeout=30)
        assert a.holding() == 1
        assert len(files(root, "jobs", "target")) == 3  # back at once, for the others
        with (
            boxmq.open(root, fsync="never") as other,
            other.queue("jobs").consumer("b", max_in_flight=3) as b,
        ):
            given_back = [b.receive(timeout=5) for _ in range(3)]
            assert [m.text() if m else None for m in given_back] == ["m1", "m2", "m3"]
            assert [m.delivery_count for m in given_back if m] == [1, 1, 1]  # as they were
        first.ack()  # still its own


def test_a_put_the_watcher_told_of_first_comes_back_to_a_consumer_after_a_give_back(
    box: boxmq.Box, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put renames its file into target/ before it tells the process's consumers of it
    (LiveQueue.sent); a consumer thread that reads the watcher in between offers it first,
    and it may be claimed (here for `b`, the consumer with room) before the put tells. The
    put then recorded the name as known again, though the engine had it leased: given back
    under that name (`b` pauses), it was never offered again, not even by the rescan, and
    waited in target/ while this process's consumers got nothing (found by a stress of six
    consumer threads that pause now and then: 2 to 15 of 3,500 messages stuck)."""
    jobs = box.queue("jobs")
    with jobs.consumer("a") as a, jobs.consumer("b") as b:
        jobs.put(b"first")
        held = a.receive(timeout=5)  # `a` is full now
        assert held is not None
        sent = LiveQueue.sent

        def told_late(live: LiveQueue, messages: list[Any]) -> None:
            assert a.receive(timeout=0) is None  # reads the watcher: claimed for `b`
            assert a.receive(timeout=0) is None  # reads the claim's news too
            sent(live, messages)

        monkeypatch.setattr(LiveQueue, "sent", told_late)
        jobs.put(b"second")
        monkeypatch.undo()
        assert files(root, "jobs", "target") == []  # claimed for `b`, not received
        b.pause()  # given back as it was, under its own name
        b.resume()
        message = b.receive(timeout=6)  # past the rescan (every 5 s)
        assert message is not None
        assert message.body == b"second"


def test_a_put_the_watcher_told_of_first_and_a_consumer_unlocked_is_delivered_again(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, the message received and unlocked (ready under its new name) before the put
    tells: the put's offer took its place in the engine under the name that was gone, whose
    claim then failed, and the unlocked message waited for nobody."""
    jobs = box.queue("jobs")
    with jobs.consumer("a") as a, jobs.consumer("b") as b:
        jobs.put(b"first")
        held = a.receive(timeout=5)
        assert held is not None
        sent = LiveQueue.sent

        def told_late(live: LiveQueue, messages: list[Any]) -> None:
            early = b.receive(timeout=0)  # from the watcher, before the put tells
            assert early is not None
            assert early.unlock() is None
            assert b.receive(timeout=0) is None  # `b` is passed over; reads the news
            sent(live, messages)

        monkeypatch.setattr(LiveQueue, "sent", told_late)
        jobs.put(b"second")
        monkeypatch.undo()
        held.ack()
        message = a.receive(timeout=6)  # past the rescan (every 5 s)
        assert message is not None
        assert (message.body, message.delivery_count) == (b"second", 2)


def test_closing_a_consumer_counts_only_the_deliveries_it_received(
    box: boxmq.Box, root: Path
) -> None:
    """A job run again and again takes one message and closes: the messages claimed for it
    that it never received must not climb towards max deliveries unseen."""
    jobs = box.queue("jobs")
    for n in range(6):  # max deliveries is 5: the sixth was claimed five times before its turn
        jobs.put(f"m{n}".encode())
    for n in range(6):
        with jobs.consumer("cron", max_in_flight=6) as consumer:
            message = consumer.receive(timeout=5)
            assert message is not None
            assert (message.text(), message.delivery_count) == (f"m{n}", 1)
            message.ack()
    assert files(root, "jobs", "error") == []
    with jobs.consumer("cron", max_in_flight=1) as consumer:  # a received one still counts
        assert consumer.receive_nowait() is None
        jobs.put(b"m6")
        held = consumer.receive(timeout=5)
        assert held is not None
    with jobs.consumer("next") as consumer:
        again = consumer.receive(timeout=5)
        assert again is not None
        assert (again.text(), again.delivery_count) == ("m6", 2)


def test_a_box_closed_over_a_received_message_counts_its_delivery(root: Path) -> None:
    """A process that received a message and closed its box without settling it (a job
    that gives up, a service stopped) had it delivered: after max deliveries of those it is
    in error/, not offered for ever."""
    with boxmq.open(root, fsync="never", max_deliveries=2) as box:
        box.queue("jobs").put(b"poison")
    for count in (1, 2):
        with boxmq.open(root, fsync="never", max_deliveries=2) as box:
            message = box.queue("jobs").consumer("job").receive(timeout=5)
            assert message is not None
            assert message.delivery_count == count
    assert len(files(root, "jobs", "error")) == 1
    assert files(root, "jobs", "target") == []


def test_priority_order_then_fifo(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    for index, priority in enumerate([4, 9, 4, 0, 9]):
        jobs.put(f"{index}", priority=priority)
    with jobs.consumer("w", max_in_flight=10) as consumer:
        assert [m.text() for m in drain(consumer)] == ["1", "4", "0", "2", "3"]


def test_max_in_flight_caps_what_one_consumer_holds(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    jobs.put_many([b"x"] * 10)
    with jobs.consumer("w", max_in_flight=3) as consumer:
        held = drain(consumer)
        assert len(held) == 3
        held[0].ack()
        assert len(drain(consumer)) == 1


def test_receive_ready_takes_what_the_free_slots_allow_without_waiting(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    jobs.put_many([b"1", b"2", b"3", b"4", b"5"])
    with jobs.consumer("w", max_in_flight=3) as consumer, jobs.consumer("idle") as other:
        first = consumer.receive_ready()  # round-robin: "2" went to `other`, which is full
        assert [m.body for m in first] == [b"1", b"3", b"4"]
        assert consumer.receive_ready() == []  # no free slot
        first[0].ack()
        assert [m.body for m in consumer.receive_ready()] == [b"5"]
        assert [m.body for m in other.receive_ready()] == [b"2"]
    with pytest.raises(boxmq.Closed):
        consumer.receive_ready()


def test_receive_ready_takes_at_most_what_it_is_asked_for(box: boxmq.Box) -> None:
    """`most` bounds what it hands out (an MQTT session's room in flight); the rest stays
    claimed for it and comes at the next receive, in order."""
    jobs = box.queue("jobs")
    jobs.put_many([b"1", b"2", b"3", b"4"])
    with jobs.consumer("w", max_in_flight=3) as consumer:
        assert [m.body for m in consumer.receive_ready(most=2)] == [b"1", b"2"]
        assert consumer.holding() == 3  # "3" claimed, not handed out
        assert [m.body for m in consumer.receive_ready(most=5)] == [b"3"]
        assert consumer.receive_ready(most=1) == []  # no free slot
    topics = box.topics
    member = topics.subscribe("$share/g/t", "m", max_in_flight=5)
    topics.publish_many([Publication("t", body) for body in (b"a", b"b", b"c")])
    assert [m.body for m in member.receive_ready(most=2)] == [b"a", b"b"]
    assert [m.body for m in member.receive_ready(most=2)] == [b"c"]
    member.close()
    with topics.subscribe("u", "s", durable=False) as listener:  # in memory
        topics.publish_many([Publication("u", body) for body in (b"x", b"y")])
        assert [m.body for m in listener.receive_ready(most=1)] == [b"x"]
        assert [m.body for m in listener.receive_ready(most=1)] == [b"y"]


def test_a_put_reaches_this_process_s_consumer_without_the_watcher(root: Path) -> None:
    """A polling watcher (NFS) looks every 0.25 s; a put in the same process is offered to
    its consumers at once, and the watcher's later news of it delivers nothing twice."""
    with boxmq.open(root, fsync="never", polling=True) as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w", max_in_flight=10) as consumer:
            assert consumer.receive_nowait() is None  # the first look at the folder
            jobs.put(b"now")
            message = consumer.receive_nowait()
            assert message is not None
            assert message.body == b"now"
            message.ack()
            assert consumer.receive(timeout=0.6) is None  # after the watcher's next look


def test_a_receive_of_this_process_s_small_put_reads_no_file(
    root: Path, file_reads: list[str]
) -> None:
    """The body of a small put is kept for the receive that takes it; a large one, and one
    another producer dropped in, are read from their files."""
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w", max_in_flight=10) as consumer:
            jobs.put(b"small")
            jobs.put(b"L" * 100_000)
            put_file(root / "jobs" / "target", "4.from-a-script.B", b"dropped")
            bodies = []
            for _ in range(3):
                message = consumer.receive(timeout=5)
                assert message is not None
                bodies.append(message.body)
                message.ack()
    assert sorted(bodies) == sorted([b"small", b"L" * 100_000, b"dropped"])
    assert len(file_reads) == 2  # the large body and the dropped file


def test_many_puts_at_once_read_back_exactly_their_bodies(root: Path) -> None:
    """More puts than the kept bodies (1,024): every message still carries its own body."""
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w", max_in_flight=2000) as consumer:
            jobs.put_many([f"body {index}".encode() for index in range(700)])
            jobs.put_many([f"body {index}".encode() for index in range(700, 1500)])
            got = [m.body for m in consumer.receive_ready()]
    assert sorted(got) == sorted(f"body {index}".encode() for index in range(1500))


def test_own_puts_in_memory_are_served_without_reading_the_watcher_each_time(
    manual_box: boxmq.Box, root: Path, clock: ManualClock
) -> None:
    """While this process's own puts serve the receives, other producers' news is read at
    most every watch_interval (2 ms), not once per message: a higher priority dropped
    meanwhile waits that long at most."""
    jobs = manual_box.queue("jobs")
    with jobs.consumer("w", max_in_flight=1) as consumer:

        def next_text() -> str:
            message = consumer.receive(timeout=0)
            assert message is not None
            message.ack()
            return message.text()

        for index in range(3):
            jobs.put(f"own{index}")
        assert next_text() == "own0"
        put_file(root / "jobs" / "target", "9.other.T", b"other")
        assert next_text() == "own1"
        clock.advance(0.002)
        assert next_text() == "other"
        assert next_text() == "own2"


def test_a_receive_that_gets_nothing_from_memory_reads_the_watcher_at_once(
    manual_box: boxmq.Box, root: Path
) -> None:
    jobs = manual_box.queue("jobs")
    jobs.put(b"own")
    with jobs.consumer("w", max_in_flight=10) as consumer:
        own = consumer.receive(timeout=0)
        assert own is not None
        own.unlock()  # back in memory, but waiting out its handoff (not for "w" at once)
        put_file(root / "jobs" / "target", "4.other.T", b"other")
        other = consumer.receive(timeout=0)
        assert other is not None
        assert other.body == b"other"
        assert consumer.receive(timeout=0) is None
        put_file(root / "jobs" / "target", "4.more.T", b"more")
        more = consumer.receive_ready()  # nothing in memory for it: it looks at once
        assert [m.body for m in more] == [b"more"]


def test_this_process_s_own_puts_and_claims_are_no_news_to_its_listeners(
    manual_box: boxmq.Box, root: Path
) -> None:
    """Box.read_news (an MQTT broker's tick) tells the listeners of a queue whose watcher
    had news only if another process's files brought some: this process's puts were told
    as they were put, and its claims and acks bring nothing to take. Each of them made the
    broker's next tick look into the queue again for nothing (docs/benchmarks.md, "Many
    share groups"). A file dropped by a script is still told."""
    told: list[str] = []
    manual_box.listen_offered(lambda consumers, queue: told.append(queue))
    jobs = manual_box.queue("jobs")
    with jobs.consumer("w", max_in_flight=2) as consumer:
        assert consumer.receive_ready() == []  # the first look at target/
        for round in range(3):
            jobs.put_many([b"a%d" % round, b"b%d" % round])  # told once, as put
            received = consumer.receive_ready()  # claimed after its look at the watcher
            assert [m.body for m in received] == [b"a%d" % round, b"b%d" % round]
            for message in received:
                message.ack()
            jobs.put(b"c%d" % round)  # put, claimed and acked between two reads
            [message] = consumer.receive_ready()
            message.ack()
        assert told == ["jobs"] * 6
        told.clear()
        manual_box.read_news()
        assert told == []
        put_file(root / "jobs" / "target", "4.from-a-script.T", b"dropped")
        manual_box.read_news()
        assert told == ["jobs"]
        [dropped] = consumer.receive_ready()
        assert dropped.body == b"dropped"


def test_lock_timeout_redelivers_and_the_late_ack_is_refused(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    jobs = manual_box.queue("jobs")
    jobs.put(b"x")
    with jobs.consumer("a", lock_timeout=10) as a, jobs.consumer("b", lock_timeout=10) as b:
        first = a.receive_nowait() or b.receive_nowait()
        assert first is not None
        clock.advance(10)
        other = b if first.consumer == "a" else a
        again = other.receive_nowait()
        assert again is not None
        assert again.id == first.id
        assert again.delivery_count == 2
        with pytest.raises(boxmq.UnexpectedRequest):
            first.ack()
        with pytest.raises(boxmq.Conflict):
            manual_box.queue("jobs").ack(first.id, "nobody-else")
        again.ack()


def test_an_answer_by_id_of_a_consumer_closed_after_another_took_its_message_says_its_lock_is_gone(
    box: boxmq.Box,
) -> None:
    # Its owner gone, "a"'s lock went back, and "b" holds the message now. "a"'s answer by id
    # (an XMPP subscriber back after unavailable presence) is told its lock is gone, as after a
    # timeout (XEP-0254 §2.3/§2.4), not Conflict: the release recorded no holder to tell by.
    jobs = box.queue("jobs")
    jobs.put(b"x")
    a = jobs.consumer("a")
    first = a.receive_nowait()
    assert first is not None
    a.close()
    with jobs.consumer("b") as b:
        again = b.receive(timeout=5)
        assert again is not None
        assert again.id == first.id
        for answer in (jobs.ack, jobs.unlock):
            with pytest.raises(boxmq.UnexpectedRequest):
                answer(first.id, "a")
        again.ack()
    assert jobs.counts().done == 1


@pytest.mark.timeout(20)
@pytest.mark.parametrize("durable", [False, True], ids=["consumer", "durable subscriber"])
def test_a_receive_timeout_is_wall_time_on_a_manual_clock(
    manual_box: boxmq.Box, clock: ManualClock, durable: bool
) -> None:
    """A test suite's box on a ManualClock: receive(timeout=...) comes back empty once that
    much wall time passed, the clock not moved; it waited for the clock to get there, for
    ever. The clock still times the lock of what it then receives."""
    receiver: boxmq.Consumer | boxmq.Subscriber
    send: Callable[[], str]
    if durable:
        receiver = manual_box.subscribe("news", "s", lock_timeout=10)
        send = partial(manual_box.publish, "news", b"x")
    else:
        jobs = manual_box.queue("jobs")
        receiver = jobs.consumer("w", lock_timeout=10)
        send = partial(jobs.put, b"x")
    with receiver:
        started = clock.now()
        assert receiver.receive(timeout=0.05) is None
        assert clock.now() == started
        send()
        message = receiver.receive(timeout=0.05)
        assert message is not None
        assert message.lock_deadline == started + 10


@pytest.mark.parametrize("operation", ["ack", "unlock", "reject", "extend"])
@pytest.mark.parametrize("ended", ["timed out", "unlocked by id"])
def test_a_stale_handle_cannot_settle_the_next_delivery_to_the_same_consumer(
    manual_box: boxmq.Box, root: Path, clock: ManualClock, operation: str, ended: str
) -> None:
    """The first delivery's lock ends (it times out, or another process unlocks it by id) and
    the message comes back to the same consumer: the first handle's ack, unlock, reject or
    extend is told its lock is gone (UnexpectedRequest) and leaves the second delivery as it
    is, and the second handle's ack is the one that counts. Before, the first handle settled
    the second delivery, and the second handle's ack then failed with ItemNotFound (or, after
    a stale extend, acked a lock its holder had not asked to move)."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"x")
    with jobs.consumer("w", lock_timeout=10) as w:
        first = w.receive_nowait()
        assert first is not None
        if ended == "timed out":
            clock.advance(10)
        else:
            assert jobs.unlock(first.id, "w") is None  # as `boxmq unlock` would, by id
        assert w.receive_nowait() is None  # the hand-off: it waits for another consumer
        clock.advance(1.1)
        second = w.receive_nowait()
        assert second is not None
        assert (second.id, second.delivery_count) == (first.id, 2)
        [locked] = files(root, "jobs", "processing")
        with pytest.raises(boxmq.UnexpectedRequest):
            getattr(first, operation)()
        assert files(root, "jobs", "processing") == [locked]  # the second lock, as it was
        assert w.holding() == 1
        second.ack()
        with pytest.raises(boxmq.ItemNotFound):  # done: nobody holds it any more
            first.ack()
    assert len(files(root, "jobs", "processed")) == 1
    assert files(root, "jobs", "target") == files(root, "jobs", "error") == []


def test_claims_locked_ahead_that_time_out_come_back_to_their_only_consumer(
    manual_box: boxmq.Box, root: Path, clock: ManualClock
) -> None:
    """Claims locked ahead of receive whose lock runs out go back to target/; the consumer's
    next receives must still find them there (they were left in target/, forgotten)."""
    jobs = manual_box.queue("jobs")
    for n in range(3):
        jobs.put(f"m{n}".encode())
    with jobs.consumer("w", max_in_flight=3, lock_timeout=1) as w:
        first = w.receive_nowait()  # all three are locked for w now
        assert first is not None
        clock.advance(0.5)
        first.ack()
        second = w.receive_nowait()
        assert second is not None
        clock.advance(0.6)  # past the deadline of the second and of the third, never received
        with pytest.raises(boxmq.UnexpectedRequest):
            second.ack()
        got = []
        for _ in range(2):  # then once the hand-off is over: back to w, the only consumer
            for message in drain(w):
                got.append(message.text())
                message.ack()
            clock.advance(1.1)
        assert sorted(got) == ["m1", "m2"]
    assert files(root, "jobs", "target") == []
    assert files(root, "jobs", "processing") == []


def test_receive_never_hands_out_a_claim_whose_lock_ran_out(
    manual_box: boxmq.Box, root: Path, clock: ManualClock
) -> None:
    """A claim locked ahead and never received goes back as it was when its lock runs out,
    and is claimed again under a new lock: the message received holds a live lock."""
    jobs = manual_box.queue("jobs")
    for n in range(2):
        jobs.put(f"m{n}".encode())
    names = files(root, "jobs", "target")
    with jobs.consumer("w", max_in_flight=2, lock_timeout=1) as w:
        first = w.receive_nowait()  # m1 is locked for w too, until 1 s from now
        assert first is not None
        clock.advance(0.8)
        first.ack()
        clock.advance(0.7)
        second = w.receive_nowait()
        assert second is not None
        assert second.text() == "m1"
        assert second.lock_deadline == pytest.approx(clock.now() + 1, abs=0.001)
        assert second.delivery_count == 1  # nobody saw it before: no delivery counted
        [locked] = files(root, "jobs", "processing")
        assert locked.startswith(names[1].rsplit(".", 1)[0])  # its name as it was, relocked
        second.ack()
    assert files(root, "jobs", "processed") == names


def test_a_claim_made_after_a_long_look_at_the_folder_is_locked_from_then(
    manual_box: boxmq.Box, root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receive's look at target/ (thousands of names another process put) may take longer
    than a short lock timeout: what it then claims is locked from the claim, not from the
    time the receive read before looking, which had the lock run out before the message was
    handed out (and a sweep then counted a delivery nobody saw). Found by a torture run: a
    consumer with a 1 s lock timeout received a message whose lock had ended 0.5 s before."""
    jobs = manual_box.queue("jobs")
    put_file(root / "jobs" / "target", "4.from-elsewhere.T", b"m")
    real_scan = LiveQueue._scan

    def slow_scan(self: LiveQueue, now: float) -> None:
        clock.advance(3)  # the folder was long, the machine busy
        real_scan(self, now)

    monkeypatch.setattr(LiveQueue, "_scan", slow_scan)
    with jobs.consumer("w", lock_timeout=1) as w:
        message = w.receive_nowait()
        assert message is not None
        assert_locked_from_now(message, root, clock)
        message.ack()
    assert files(root, "jobs", "processed") == ["4.from-elsewhere.T"]


def test_a_claim_made_after_long_news_from_the_watcher_is_locked_from_then(
    manual_box: boxmq.Box, root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same when the time goes into the watcher's news (names another process put)."""
    jobs = manual_box.queue("jobs")
    real_absorb = LiveQueue._absorb

    def slow_absorb(self: LiveQueue, changes: Any) -> None:
        if changes.names:
            clock.advance(3)
        real_absorb(self, changes)

    monkeypatch.setattr(LiveQueue, "_absorb", slow_absorb)
    with jobs.consumer("w", lock_timeout=1) as w:
        assert w.receive_nowait() is None  # the first look at the folder: empty
        put_file(root / "jobs" / "target", "4.from-elsewhere.T", b"m")
        message = w.receive_nowait()
        assert message is not None
        assert message.lock_deadline == pytest.approx(clock.now() + 1, abs=0.001)
        message.ack()


def test_claims_lost_to_other_processes_one_after_another_never_hand_out_a_lock_run_out(
    manual_box: boxmq.Box, root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer that read a long target/ while other processes took its head claims name
    after name they took (each a failed rename) and dispatches again after each: seconds
    on a busy machine (a consumer started beside two others on 30,000 messages spent 4 s so,
    and was handed a message whose lock had ended 0.4 s before). The claims after a lost
    one are locked from then, and one made before that ran out meanwhile goes back as it
    was, unseen, rather than be handed out."""
    jobs = manual_box.queue("jobs")
    target = root / "jobs" / "target"
    for priority, name in enumerate(["m3", "m2", "m1", "m0"], start=6):
        put_file(target, f"{priority}.{name}.T", name.encode())
    taken = {"8.m1.T", "7.m2.T"}  # by another process, between our look and our claim
    real_claim = LiveQueue._claim

    def claim(self: LiveQueue, effect: Any) -> bool:
        if effect.message.key in taken:
            taken.discard(effect.message.key)
            os.rename(target / effect.message.key, root / "jobs" / "processed" / effect.message.key)
            clock.advance(0.6)  # the failed renames of a long, stale look
        return real_claim(self, effect)

    monkeypatch.setattr(LiveQueue, "_claim", claim)
    with jobs.consumer("w", max_in_flight=2, lock_timeout=1) as w:
        first = w.receive_nowait()  # m0 was claimed first, and its lock ran out since
        assert first is not None
        assert first.text() == "m3"
        assert first.lock_deadline == pytest.approx(clock.now() + 1, abs=0.001)
        second = w.receive_nowait()  # m0, claimed again under a lock of its own
        assert second is not None
        assert second.text() == "m0"
        assert second.delivery_count == 1  # nobody saw it before
        assert second.lock_deadline == pytest.approx(clock.now() + 1, abs=0.001)
        first.ack()
        second.ack()


def test_get_locks_from_after_its_look_at_the_folders(
    manual_box: boxmq.Box, root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Queue.get` (`boxmq get --lock`) likewise: its lock runs from the claim, not from
    before its sweep of processing/ and its read of target/."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"m")
    real_ready = boxmq.Queue._ready_in_order

    def slow_ready(self: boxmq.Queue, now: float) -> Any:
        clock.advance(3)
        return real_ready(self, now)

    monkeypatch.setattr(boxmq.Queue, "_ready_in_order", slow_ready)
    message = jobs.get(lock_timeout=1)
    assert message is not None
    assert_locked_from_now(message, root, clock)
    message.ack()


def test_unlock_goes_to_the_next_consumer(manual_box: boxmq.Box) -> None:
    jobs = manual_box.queue("jobs")
    jobs.put(b"x")
    with jobs.consumer("a") as a, jobs.consumer("b") as b:
        first = a.receive_nowait()
        assert first is not None
        first.unlock()
        assert a.receive_nowait() is None  # not straight back to who gave it up
        second = b.receive_nowait()
        assert second is not None
        assert second.id == first.id
        assert second.delivery_count == 2


@pytest.mark.parametrize("ended", ["unlock", "timeout"])
def test_a_message_given_back_keeps_its_place_before_newer_ones(
    manual_box: boxmq.Box, clock: ManualClock, ended: str
) -> None:
    """XEP-0254 §2.4 and §4: an unlocked or timed-out item goes to the next subscriber; it
    goes there first, ahead of the messages put after it, and its last holder, passed over,
    takes the next one."""
    jobs = manual_box.queue("jobs")
    jobs.put_many([b"1", b"2", b"3", b"4"])
    with (
        jobs.consumer("a", max_in_flight=1, lock_timeout=10) as a,
        jobs.consumer("b", max_in_flight=1, lock_timeout=60) as b,
    ):
        given_back, other = a.receive_nowait(), b.receive_nowait()
        assert given_back is not None
        assert other is not None
        assert (given_back.text(), other.text()) == ("1", "2")
        if ended == "unlock":
            given_back.unlock()
        else:
            clock.advance(10)
        other.ack()
        again = b.receive_nowait()
        assert again is not None
        assert (again.text(), again.delivery_count) == ("1", 2)
        newer = a.receive_nowait()
        assert newer is not None
        assert newer.text() == "3"


def test_delayed_unlock_waits_and_holds_no_slot(manual_box: boxmq.Box, clock: ManualClock) -> None:
    jobs = manual_box.queue("jobs")
    jobs.put(b"slow")
    with jobs.consumer("a", max_in_flight=1) as a:
        message = a.receive_nowait()
        assert message is not None
        message.unlock(delay=30)
        jobs.put(b"fast")
        assert [m.text() for m in drain(a)] == ["fast"]  # the delayed one holds no slot
        clock.advance(31)
    with jobs.consumer("a") as a:
        late = a.receive_nowait()
        assert late is not None
        assert late.text() == "slow"


def test_reject_sends_to_error_and_requeue_redrives(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"poison")
    with jobs.consumer("w") as consumer:
        message = consumer.receive_nowait()
        assert message is not None
        message.reject()
        assert consumer.receive_nowait() is None
    [dead] = files(root, "jobs", "error")
    assert decode(dead).property_value("bx_why") == "rejected"
    assert jobs.counts().dead == 1
    assert jobs.requeue() == 1
    with jobs.consumer("w") as consumer:
        again = consumer.receive_nowait()
        assert again is not None
        assert again.body == b"poison"
        assert again.delivery_count == 1


def test_max_deliveries_sends_a_poison_message_to_error(manual_box: boxmq.Box, root: Path) -> None:
    jobs = manual_box.queue("jobs")
    jobs.put(b"poison")
    with jobs.consumer("a") as a, jobs.consumer("b") as b:
        for attempt in range(5):
            message = a.receive_nowait() or b.receive_nowait()
            assert message is not None, attempt
            assert message.delivery_count == attempt + 1
            message.unlock()
        assert a.receive_nowait() is None
        assert b.receive_nowait() is None
    dead = decode(files(root, "jobs", "error")[0])
    assert dead.property_value("bx_why") == "max-deliveries"
    assert dead.delivery_count == 5  # every delivery ended without an ack, the last included


@pytest.mark.parametrize("ending", ["Message.unlock", "unlock by id", "lock timeout"])
def test_error_counts_every_delivery_that_ended_without_an_ack(
    manual_box: boxmq.Box, root: Path, clock: ManualClock, ending: str
) -> None:
    """file-format.md: bx_dcI counts the deliveries that ended without an ack; in error/
    after max deliveries (5) that is 5, the last one included."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"poison")
    for attempt in range(5):
        message = jobs.get("cli", lock_timeout=1)  # a `get` sweeps the timed-out lock first
        assert message is not None, attempt
        assert message.delivery_count == attempt + 1
        if ending == "Message.unlock":
            message.unlock()
        elif ending == "unlock by id":
            jobs.unlock(message.id, "cli")
        else:
            clock.advance(2)
    manual_box.sweep()
    [dead] = jobs.peek(state="error")
    assert dead.envelope.property_value("bx_why") == "max-deliveries"
    assert dead.envelope.delivery_count == 5


def test_a_rejected_message_counts_the_delivery_it_rejects(
    manual_box: boxmq.Box, root: Path
) -> None:
    jobs = manual_box.queue("jobs")
    jobs.put(b"received")
    jobs.put(b"got")
    with jobs.consumer("w") as w:
        received = w.receive_nowait()
        assert received is not None
        received.reject()
    got = jobs.get()
    assert got is not None
    jobs.reject(got.id, "cli")
    dead = jobs.peek(state="error")
    assert {m.envelope.message_id for m in dead} == {received.id, got.id}
    assert [m.envelope.delivery_count for m in dead] == [1, 1]


def test_message_unlock_says_why_the_message_went_to_error_instead(
    root: Path, clock: ManualClock
) -> None:
    with boxmq.open(root, fsync="never", clock=clock, max_deliveries=2) as box:
        jobs = box.queue("jobs")
        jobs.put(b"got")
        for answer in (None, "max-deliveries"):
            got = jobs.get()
            assert got is not None
            assert got.unlock() == answer
        jobs.put(b"received")
        with jobs.consumer("w") as w:
            for answer in (None, "max-deliveries"):
                received = w.receive_nowait()
                assert received is not None
                assert received.unlock() == answer
                clock.advance(1.1)  # the hand-off: back to w, the only consumer
        assert len(files(root, "jobs", "error")) == 2


def test_a_message_in_error_names_the_consumer_that_held_it_last(
    root: Path, clock: ManualClock
) -> None:
    """docs/file-format.md `bx_lastS`: a move to error/ kept the name's holder, that of the
    delivery before the last (or none): a user reading error/ could not tell which consumer
    failed. Each way there writes the one that held it last: a reject and an unlock at max
    deliveries by id (`get`) or by a consumer, a lock that timed out at the sweep."""
    with boxmq.open(root, fsync="never", clock=clock, max_deliveries=2) as box:
        jobs = box.queue("jobs")
        sent = {jobs.put(b"got"): "g2"}
        for consumer in ("g1", "g2"):
            got = jobs.get(consumer)
            assert got is not None
            got.unlock()
        sent[jobs.put(b"rejected by id")] = "r1"
        got = jobs.get("r1")
        assert got is not None
        got.reject()
        sent[jobs.put(b"received")] = "w"
        with jobs.consumer("w") as w:
            received = w.receive_nowait()
            assert received is not None
            received.reject()
        sent[jobs.put(b"unlocked")] = "v"
        for consumer in ("u", "v"):
            with jobs.consumer(consumer) as each:
                received = each.receive_nowait()
                assert received is not None
                received.unlock()
        sent[jobs.put(b"timed out")] = "t2"
        for consumer in ("t1", "t2"):
            got = jobs.get(consumer, lock_timeout=10)
            assert got is not None
            clock.advance(11)
            box.sweep()
        held = {p.envelope.message_id: p.envelope.last_holder for p in jobs.peek(state="error")}
        assert held == sent


def test_a_lock_that_times_out_after_its_message_expired_is_logged_as_expiring(
    manual_box: boxmq.Box, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A received message whose lock timed out after its expiration passed was logged
    # "timed out by w: redelivering", then moved to expired/: nobody got it again.
    jobs = manual_box.queue("jobs")
    message_id = jobs.put(b"brief", expires_in=5)
    kept = jobs.put(b"kept")
    with caplog.at_level(logging.INFO, logger="boxmq"), jobs.consumer("w", lock_timeout=10) as w:
        held = w.receive_nowait()
        assert held is not None
        assert held.id == message_id
        clock.advance(11)  # the expiration (5 s) passed while it was locked, then the lock ended
        again = w.receive_nowait()
        assert again is not None
        assert again.id == kept
        again.ack()
    said = [r.getMessage() for r in caplog.records if message_id in r.getMessage()]
    assert said == [f"jobs: {message_id} timed out by w after it expired: to expired/"]
    assert not [r for r in caplog.records if "redelivering" in r.getMessage()]
    assert (jobs.counts().expired, jobs.counts().done) == (1, 1)


def test_a_sweep_releasing_another_box_s_lock_after_its_message_expired_says_so(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The sweep of processing/ (boxmq serve's, another Box's) logged a lock of another Box
    # that timed out after the message's expiration as "redelivering (delivery 2)".
    holding_clock, sweeping_clock = ManualClock(), ManualClock()
    with boxmq.open(root, fsync="never", clock=holding_clock) as holding:
        jobs = holding.queue("jobs")
        message_id = jobs.put(b"brief", expires_in=5)
        with jobs.consumer("w", lock_timeout=10) as w:
            assert w.receive_nowait() is not None
            sweeping_clock.advance(11)
            with (
                caplog.at_level(logging.INFO, logger="boxmq"),
                boxmq.open(root, fsync="never", clock=sweeping_clock) as sweeping,
            ):
                sweeping.sweep()
                said = [r.getMessage() for r in caplog.records if message_id in r.getMessage()]
                assert said == [
                    f"{message_id}: lock of 'w' timed out after it expired: not redelivered, "
                    "to expired/ at the next look"
                ]
                with sweeping.queue("jobs").consumer("next") as taker:
                    assert taker.receive_nowait() is None  # the look that moves it
                assert sweeping.queue("jobs").counts().expired == 1
    assert not [r for r in caplog.records if "redelivering" in r.getMessage()]


def test_expired_messages_go_to_expired(manual_box: boxmq.Box, clock: ManualClock) -> None:
    jobs = manual_box.queue("jobs")
    jobs.put(b"stale", expires_in=60)
    jobs.put(b"fresh")
    clock.advance(61)
    with jobs.consumer("w", max_in_flight=5) as consumer:
        assert [m.text() for m in drain(consumer)] == ["fresh"]
    assert jobs.counts().expired == 1


def test_a_consumer_says_which_ready_messages_it_moved_to_expired(
    manual_box: boxmq.Box, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer moves what expired in target/ to expired/ as it reads the queue; it did so
    without a word, where `get` and the sweep of `boxmq serve` say it: an operator saw
    messages leave target/ with nothing in the log of where they went."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"stale", expires_in=60)
    jobs.put(b"old", expires_in=60)
    jobs.put(b"fresh")
    clock.advance(61)
    with caplog.at_level(logging.INFO, logger="boxmq"), jobs.consumer("w") as consumer:
        assert [m.text() for m in drain(consumer)] == ["fresh"]
    said = [r.getMessage() for r in caplog.records if "expired" in r.getMessage()]
    assert said == ["jobs: 2 message(s) expired before a consumer took them: moved to expired/"]
    assert jobs.counts().expired == 2


def test_closing_a_consumer_releases_its_locks_to_the_others(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    jobs.put_many([b"1", b"2", b"3"])
    a = jobs.consumer("a", max_in_flight=5)
    held = drain(a)
    assert len(held) == 3
    with jobs.consumer("b", max_in_flight=5) as b:
        a.close()
        again = drain(b)
        assert sorted(m.text() for m in again) == ["1", "2", "3"]
        assert all(m.delivery_count == 2 for m in again)
        with pytest.raises(boxmq.UnexpectedRequest):
            held[0].ack()


def test_extend_keeps_the_lock(manual_box: boxmq.Box, clock: ManualClock) -> None:
    jobs = manual_box.queue("jobs")
    jobs.put(b"long job")
    with jobs.consumer("a", lock_timeout=10) as a, jobs.consumer("b") as b:
        message = a.receive_nowait()
        assert message is not None
        clock.advance(8)
        message.extend(30)
        clock.advance(8)
        assert b.receive_nowait() is None
        message.ack()


def test_a_message_s_lock_deadline_is_the_one_its_own_extend_set(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    # concepts.md: the holder sees Message.lock_deadline, can extend() before it, and after it
    # its answers are refused. It stayed the deadline of the delivery: after extend(30) it said
    # the lock had ended while the holder's ack still settled the message.
    jobs = manual_box.queue("jobs")
    jobs.put_many([b"received", b"got"])
    with jobs.consumer("a", lock_timeout=10) as a:
        message = a.receive_nowait()
        assert message is not None
        clock.advance(8)
        message.extend(30)
        assert message.lock_deadline == pytest.approx(clock.now() + 30, abs=0.001)
        clock.advance(8)
        message.extend()  # for its lock timeout again
        assert message.lock_deadline == pytest.approx(clock.now() + 10, abs=0.001)
        message.extend(1)  # sooner than before
        assert message.lock_deadline == pytest.approx(clock.now() + 1, abs=0.001)
        message.ack()
    got = jobs.get("cli", lock_timeout=10)
    assert got is not None
    got.extend(50)
    assert got.lock_deadline == pytest.approx(clock.now() + 50, abs=0.001)
    assert jobs.peek(state=State.PROCESSING)[0].lock_deadline == pytest.approx(got.lock_deadline)
    got.ack()


def _taken_by_receive_nowait(consumer: boxmq.Consumer) -> list[boxmq.Message]:
    message = consumer.receive_nowait()
    return [] if message is None else [message]


def _taken_by_receive_ready(consumer: boxmq.Consumer) -> list[boxmq.Message]:
    return consumer.receive_ready()


@pytest.mark.parametrize("take", [_taken_by_receive_nowait, _taken_by_receive_ready])
def test_a_message_locked_ahead_that_expires_before_the_receive_goes_to_expired(
    manual_box: boxmq.Box,
    clock: ManualClock,
    take: Callable[[boxmq.Consumer], list[boxmq.Message]],
) -> None:
    # concepts.md: a message past its expiration goes to expired/, no consumer given it. One
    # locked ahead for a consumer (a free slot) was handed out by its receive, expired; and
    # what waits behind it takes its slot in the same call (receive_ready once came back
    # empty, "next" left for the call after).
    jobs = manual_box.queue("jobs")
    jobs.put(b"lasts")
    jobs.put(b"brief", expires_in=5)
    jobs.put(b"next")
    with jobs.consumer("a", max_in_flight=2, lock_timeout=60) as a:
        first = a.receive_nowait()
        assert first is not None
        assert first.text() == "lasts"
        assert a.holding() == 2  # "brief" locked ahead
        clock.advance(6)
        [second] = take(a)
        assert second.text() == "next"
        assert jobs.counts().expired == 1
        assert [p.envelope.expiration for p in jobs.peek(state=State.EXPIRED)] == [
            int((clock.now() - 1) * 1000)
        ]
        assert a.holding() == 2
        first.ack()
        second.ack()
    assert jobs.counts() == boxmq.QueueCounts(0, 0, 2, 0, 1, 0)


def test_a_queue_consumer_closed_with_keep_locks_releases_what_it_holds(
    manual_box: boxmq.Box,
) -> None:
    # concepts.md: locks are kept on purpose by a subscriber that outlives its process (its
    # detach), not by a queue's consumer, whose locks name its process; it once said
    # close(keep_locks=True) kept them.
    jobs = manual_box.queue("jobs")
    jobs.put(b"held")
    a = jobs.consumer("a")
    message = a.receive_nowait()
    assert message is not None
    a.close(keep_locks=True)
    with jobs.consumer("b") as b:
        again = b.receive_nowait()
        assert again is not None
        assert again.delivery_count == 2
        again.ack()


def test_same_consumer_name_twice_in_one_box_is_refused(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    with jobs.consumer("w"), pytest.raises(boxmq.InvalidArgument, match="already open"):
        jobs.consumer("w")


def test_metadata_that_does_not_fit_a_file_name_is_refused(box: boxmq.Box, root: Path) -> None:
    # A type is a field of the name that MQTT has no place for: unlike properties, a reply-to
    # or a correlation id, it has nowhere else to go.
    with pytest.raises(boxmq.MetadataTooLong, match="shorten the type"):
        box.queue("jobs").put(b"x", type="y" * 300, properties={"note": "y" * 300})
    assert box.queue("jobs").counts() == boxmq.QueueCounts(0, 0, 0, 0, 0, 0)
    assert not (root / ".properties").exists()  # nothing written for a put refused


def test_properties_too_long_for_a_name_go_to_a_side_file_and_read_back_the_same(
    box: boxmq.Box, root: Path
) -> None:
    """docs/file-format.md "Properties too long for the name": the string properties leave
    the name for a side file (as MQTT v5 User Properties), typed ones stay in it where they
    fit, so every reader sees what the producer put."""
    properties: dict[str, str | int | bool] = {"note": "y" * 300, "tenant": "acme", "n": 3}
    jobs = box.queue("jobs")
    jobs.put(b"x", properties=properties | {"ok": True})
    assert box.assured("src", "m1", b"z", queue="jobs", properties=properties)
    assert box.deliver("src", "m1")
    short = jobs.put(b"s", properties={"tenant": "acme"})
    keys = os.listdir(root / ".properties")  # the long ones' (ok is in its file too); none
    assert len(keys) == 2
    peeked = {p.envelope.message_id: p for p in jobs.peek()}
    assert peeked.pop(short).envelope.property_value(PROPERTIES_FILE) is None
    assert sorted((p.properties for p in peeked.values()), key=len) == [
        properties,
        properties | {"ok": True},
    ]
    for each in peeked.values():
        own = each.envelope.user_properties()  # what stays in the name: the typed ones
        assert own in ({"n": 3}, {"n": 3, "ok": True})
        assert each.envelope.property_value(PROPERTIES_FILE) in keys
    for _ in range(3):
        got = jobs.get()
        assert got is not None
        assert got.properties in ({"tenant": "acme"}, properties, properties | {"ok": True})
        got.ack()


def test_typed_properties_that_fit_beside_the_side_files_key_read_back_typed(
    box: boxmq.Box,
) -> None:
    """A put whose typed properties do not all fit beside the side file's key keeps those
    that do in the name: `urgent=False` reads back False, where it read "false" (a str Python
    takes for true) once a long counter crowded the name (before 2026-12-02)."""
    properties: dict[str, str | int | bool] = {
        "note": "y" * 200,
        "urgent": False,
        "n": 3,
        "a_counter_with_a_long_name": 2**62,
        "another_counter_with_a_long_name": 2**62,
    }
    jobs = box.queue("jobs")
    jobs.put("x", properties=properties)
    with jobs.consumer("w") as consumer:
        got = consumer.receive(timeout=5)
        assert got is not None
        assert got.properties["urgent"] is False
        assert got.properties["n"] == 3
        assert {k: str(v) for k, v in got.properties.items()} == {
            k: str(v) if k != "urgent" else "False" for k, v in properties.items()
        }
        got.ack()


def test_properties_that_cannot_spill_for_the_key_s_room_say_so(box: boxmq.Box, root: Path) -> None:
    """A reply-to that fits alone but leaves no room for the side file's key, and cannot go to
    the side file itself (U+0000 is in no MQTT Response Topic): the error says the properties
    went to a side file first and names the reply-to (which stays in the name), and nothing is
    written."""
    jobs = box.queue("jobs")
    reply_to = "r" * 57 + "\0"  # 60 bytes encoded
    jobs.put(b"fits", reply_to=reply_to)  # alone it fits
    with pytest.raises(boxmq.MetadataTooLong) as refused:
        jobs.put(b"x", reply_to=reply_to, properties={"note": "y" * 100})
    said = str(refused.value)
    assert said.startswith("the properties are too long for a file name, and with them in a side")
    assert "shorten the reply-to (60 bytes encoded)" in said
    assert jobs.counts().ready == 1
    assert not (root / ".properties").exists() or not os.listdir(root / ".properties")


@pytest.mark.parametrize("others", [{}, {"note": "y" * 200}])
@pytest.mark.parametrize(
    ("value", "why"), [("v" * 70_000, "over MQTT's"), ("a\0" + "b" * 200, "U+0000")]
)
def test_a_property_no_side_file_can_hold_is_named_in_the_refusal(
    box: boxmq.Box, root: Path, value: str, why: str, others: dict[str, str]
) -> None:
    """A side file holds MQTT v5 property bytes, so a property MQTT cannot carry (over 65,535
    bytes, or a U+0000) stays in the name: the error names it and why, where it told only to
    shorten the properties, though a user had read that those too long for the name go to a
    side file (`properties={"big": "v" * 1000}` does). Nothing is written."""
    jobs = box.queue("jobs")
    with pytest.raises(boxmq.MetadataTooLong) as refused:
        jobs.put(b"x", properties={"big": value, **others})
    said = str(refused.value)
    assert "property 'big' cannot go to a side file" in said
    assert why in said
    assert said.endswith("put large values in the body")
    assert jobs.counts().ready == 0
    assert not (root / ".properties").exists() or not os.listdir(root / ".properties")


def test_a_request_whose_fields_leave_no_room_for_the_side_files_key_is_stored(
    box: boxmq.Box, root: Path
) -> None:
    """docs/file-format.md "Properties too long for the name": a reply-to and a correlation id
    that leave the side file's key no room go to the side file too (as an MQTT v5 client's
    Response Topic and Correlation Data are), and read back as the message's own: a modest
    request (a 10-character topic, a content type, an expiration) was refused as too long."""
    request: dict[str, Any] = {
        "reply_to": "cfg/answers",
        "correlation_id": "req-7",
        "expires_in": 60,
        "properties": {"mqtt.content-type": "application/json", "n": 3},
    }
    queue_reply_to = "cfg/answers/" + "a" * 50  # a queue's name has no topic to fill it
    jobs = box.queue("jobs")
    with jobs.consumer("w") as consumer, box.subscribe("cfg/#", "s") as subscriber:
        box.publish("cfg/line-4", b"x", **request)
        jobs.put(b"x", **request | {"reply_to": queue_reply_to})
        jobs.put(b"long", reply_to="r" * 60, properties={"note": "y" * 100})
        for receiver, reply_to in ((consumer, queue_reply_to), (subscriber, "cfg/answers")):
            message = receiver.receive(timeout=5)
            assert message is not None
            # The name has no field 5 or 6 any more: the side file has them.
            assert (message.envelope.reply_to, message.envelope.correlation_id) == (None, None)
            assert message.envelope.property_value(PROPERTIES_FILE) is not None
            assert (message.reply_to, message.correlation_id) == (reply_to, "req-7")
            assert message.properties["mqtt.content-type"] == "application/json"
            assert message.properties["n"] in (3, "3")
            assert message.expiration is not None
            message.ack()
        long = consumer.receive(timeout=5)
        assert long is not None
        assert (long.reply_to, long.properties["note"]) == ("r" * 60, "y" * 100)
        long.unlock()  # a redelivery and a dead letter rewrite the name: the key stays in it
        again = consumer.receive(timeout=5)
        assert again is not None
        assert (again.delivery_count, again.reply_to) == (2, "r" * 60)
        again.reject()
    [dead] = jobs.peek(state=State.ERROR)
    assert (dead.reply_to, dead.properties["note"]) == ("r" * 60, "y" * 100)


@pytest.mark.parametrize("length", [110, 140, 300])
def test_metadata_too_long_names_a_put_s_limit_however_long_it_is(
    box: boxmq.Box, length: int
) -> None:
    """Over a name's own limit (167) or only over a put's (135): one limit, the put's, at
    once, never 167 first and then 135 once trimmed."""
    with pytest.raises(boxmq.MetadataTooLong) as refused:
        box.queue("jobs").put(b"x", type="y" * length)
    assert "over the 135-byte limit" in str(refused.value)
    assert "167" not in str(refused.value)
    # The message's group stays in its name (dispatch reads it there): it cannot spill.
    with pytest.raises(boxmq.MetadataTooLong) as refused:
        box.assured("src", "m1", b"x", queue="jobs", properties={GROUP_KEY: "y" * length})
    assert "over the 135-byte limit" in str(refused.value)


@pytest.mark.parametrize(
    ("properties", "says"),
    [
        ({5: "v"}, "property name 5: a name is a str, not int"),
        ({("a",): "v"}, "property name ('a',): a name is a str, not tuple"),
        ({0: "v"}, "property name 0: a name is a str, not int"),
        ({None: "v"}, "property name None: a name is a str, not NoneType"),
        ({"": "v"}, "a property name is empty"),
        ({"a": boxmq.Property("a", "S", "v")}, "property 'a': its type 'S' is not a boxmq"),  # type: ignore[arg-type]
    ],
    ids=["int", "tuple", "zero", "none", "empty", "type-letter"],
)
def test_a_property_name_that_is_no_str_or_a_type_that_is_a_letter_is_named(
    box: boxmq.Box, root: Path, properties: dict[Any, Any], says: str
) -> None:
    jobs = box.queue("jobs")
    with pytest.raises(boxmq.InvalidArgument) as refused:
        jobs.put(b"x", properties=properties)
    assert says in str(refused.value)
    with pytest.raises(boxmq.InvalidArgument) as refused:
        box.publish("t", b"x", properties=properties)
    assert says in str(refused.value)
    with pytest.raises(boxmq.InvalidArgument) as refused:
        box.assured("src", "m1", b"x", queue="jobs", properties=properties)
    assert says in str(refused.value)
    assert files(root, "jobs", "working") == []
    assert files(root, "jobs", "target") == []


@pytest.mark.parametrize("limit", [-1, 0, 1.5, True])
def test_peek_refuses_a_limit_that_is_not_a_count(box: boxmq.Box, limit: object) -> None:
    """Sliced with it, -1 would silently drop the last message."""
    jobs = box.queue("jobs")
    jobs.put(b"a")
    jobs.put(b"b")
    with pytest.raises(boxmq.InvalidArgument, match="limit must be None or an int >= 1"):
        jobs.peek(limit=limit)  # type: ignore[arg-type]
    assert len(jobs.peek(limit=1)) == 1
    assert len(jobs.peek()) == 2


@pytest.mark.parametrize("max_in_flight", [1.5, 2.0, "2"])
def test_a_consumer_refuses_a_max_in_flight_that_is_not_an_int(
    box: boxmq.Box, max_in_flight: object
) -> None:
    with pytest.raises(boxmq.InvalidArgument, match="max_in_flight must be an int"):
        box.queue("jobs").consumer("w", max_in_flight=max_in_flight)  # type: ignore[arg-type]
    with box.queue("jobs").consumer("w", max_in_flight=2):  # the name was not taken
        pass


def test_reserved_property_names_are_refused(box: boxmq.Box) -> None:
    with pytest.raises(boxmq.InvalidName, match=r"'bx_dc' starts with bx_.*give it another name"):
        box.queue("jobs").put(b"x", properties={"bx_dc": 3})


def test_queue_names_cannot_escape_the_root(box: boxmq.Box, root: Path) -> None:
    for name in ("..", "../evil", "a/b", "c:d", ".hidden"):
        box.queue(name).put(b"x")
    assert sorted(box.queues()) == sorted(["..", "../evil", "a/b", "c:d", ".hidden"])
    assert {p.parent for p in root.iterdir()} == {root}
    assert not any(":" in p.name or p.name.startswith(".") for p in root.iterdir())


def test_peek_purge_and_counts(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    jobs.put_many([b"a", b"bb"])
    assert [p.size for p in jobs.peek()] == [1, 2]
    assert jobs.counts().ready == 2
    assert jobs.purge() == 2
    assert jobs.counts().ready == 0
    with pytest.raises(boxmq.InvalidArgument):
        jobs.purge(state=State.PROCESSING)


def test_peek_shows_target_in_the_order_get_takes_it(box: boxmq.Box, root: Path) -> None:
    """A name a script wrote carries no time in its id: a consumer orders it by its file's
    mtime, and peek put it before every message of its priority (`boxmq peek jobs --limit 1`
    showed the script's message while `boxmq get` took the older one)."""
    jobs = box.queue("jobs")
    jobs.put(b"older")
    target = root / "jobs" / "target"
    put_file(target, "4.from-a-script.T", b"newer")
    os.utime(target / "4.from-a-script.T", (1e10, 1e10))  # made after the put, for sure
    assert [p.envelope.message_id for p in jobs.peek()][1] == "from-a-script"
    order = []
    while (message := jobs.get()) is not None:
        order.append(message.body)
    assert order == [b"older", b"newer"]


def test_unknown_queue_is_an_error_when_not_creating(box: boxmq.Box) -> None:
    with pytest.raises(boxmq.QueueNotFound):
        box.queue("nope", create=False)


BAD_NAME = b"\xff\xfe"  # not UTF-8: os.listdir gives it back with surrogate escapes


def test_a_name_that_is_not_utf8_goes_to_error_and_blocks_nobody(
    box: boxmq.Box, root: Path
) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"behind it")
    (root / "jobs" / "target").joinpath(BAD_NAME.decode(errors="surrogateescape")).write_bytes(b"x")
    message = jobs.get("one-shot")
    assert message is not None
    assert message.body == b"behind it"
    assert [os.fsencode(n) for n in os.listdir(root / "jobs" / "error")] == [BAD_NAME]
    assert jobs.counts().dead == 1


def test_requeue_leaves_what_can_never_be_delivered_where_it_is(box: boxmq.Box, root: Path) -> None:
    """A name that is not UTF-8 or too long to lock, and what is no file, set aside to error/
    by a consumer, stay there: sent back, each was counted as requeued and set aside again by
    the next look at target/, over and over. The dead letter beside them goes."""
    jobs = box.queue("jobs")
    jobs.put(b"dead")
    target = root / "jobs" / "target"
    bad, long = BAD_NAME.decode(errors="surrogateescape"), "4." + "x" * 200 + ".T"
    target.joinpath(bad).write_bytes(b"x")
    target.joinpath(long).write_bytes(b"y")
    target.joinpath("4.dir.T").mkdir()
    message = jobs.get("one-shot")
    assert message is not None
    assert message.body == b"dead"
    message.reject()
    assert jobs.counts().dead == 4
    left: list[str] = []
    assert jobs.requeue(left=left) == 1
    assert sorted(left) == sorted([bad, long, "4.dir.T"])
    assert (jobs.counts().dead, jobs.counts().ready) == (3, 1)
    again = jobs.get("one-shot")  # the dead letter, and nothing set aside again
    assert again is not None
    assert again.body == b"dead"
    again.ack()
    assert jobs.get("one-shot") is None
    assert jobs.requeue() == 0
    assert (jobs.counts().dead, jobs.counts().ready) == (3, 0)


def test_the_live_consumer_sets_a_name_that_is_not_utf8_aside(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    (root / "jobs" / "target").joinpath(BAD_NAME.decode(errors="surrogateescape")).write_bytes(b"x")
    jobs.put(b"behind it")
    with jobs.consumer("worker") as consumer:
        message = consumer.receive(timeout=5)
        assert message is not None
        assert message.body == b"behind it"
    assert [os.fsencode(n) for n in os.listdir(root / "jobs" / "error")] == [BAD_NAME]


def test_get_moves_a_name_too_long_to_lock_to_error(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"behind it")
    long_name = "4." + "x" * 200 + ".T"  # over 167 bytes: no room for a lock suffix
    (root / "jobs" / "target" / long_name).write_bytes(b"long")
    message = jobs.get("one-shot")
    assert message is not None
    assert message.body == b"behind it"
    assert files(root, "jobs", "error") == [long_name]
    assert jobs.get("one-shot") is None


def test_get_releases_timed_out_locks_without_a_server(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    jobs = manual_box.queue("jobs")
    message_id = jobs.put(b"work")
    first = jobs.get("cli", lock_timeout=1)
    assert first is not None
    assert jobs.get("cli") is None  # still locked
    clock.advance(2)
    again = jobs.get("cli")
    assert again is not None
    assert (again.id, again.delivery_count) == (message_id, 2)


def test_get_expires_a_message_an_earlier_get_read(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    """A get keeps what it read of each name for the next (it decodes only new names): a
    message read before its expiration is still expired once it passes."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"fresh")
    jobs.put(b"stale", expires_in=60)
    first = jobs.get()
    assert first is not None
    assert first.body == b"fresh"
    first.ack()
    clock.advance(61)
    assert jobs.get() is None
    assert (jobs.counts().expired, jobs.counts().ready) == (1, 0)


def test_get_hands_out_a_delayed_message_an_earlier_get_read_once_due(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    jobs = manual_box.queue("jobs")
    message_id = jobs.put(b"later")
    first = jobs.get()
    assert first is not None
    assert first.unlock(delay=10) is None
    assert jobs.get() is None  # read, and not yet due
    clock.advance(11)
    again = jobs.get()
    assert again is not None
    assert again.id == message_id


def test_get_through_a_new_queue_each_time_decodes_each_name_once(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`box.queue(name).get()` in a loop (a new Queue each call) keeps what the earlier gets
    decoded: it decoded every waiting name at each call (~20 us each), as before a Queue kept
    them. A queue deleted and made again starts afresh."""
    decoded: list[str] = []
    real = queue_module._known_of

    def spy(name: str, path: str) -> Any:
        decoded.append(name)
        return real(name, path)

    monkeypatch.setattr(queue_module, "_known_of", spy)
    box.queue("jobs").put_many([b"a", b"b", b"c"])
    bodies = []
    while (message := box.queue("jobs").get()) is not None:
        bodies.append(message.body)
        message.ack()
    assert bodies == [b"a", b"b", b"c"]
    assert len(decoded) == 3
    assert box.delete_queue("jobs")
    box.queue("jobs").put(b"d")
    message = box.queue("jobs").get()
    assert message is not None
    assert message.body == b"d"
    assert len(decoded) == 4


def test_get_orders_a_script_s_name_by_the_file_under_it_now(box: boxmq.Box, root: Path) -> None:
    """A name a script wrote (no time in its id) is ordered by its file's mtime, read at each
    get: a file renamed over it since the last get may be older."""
    jobs = box.queue("jobs")
    target = root / "jobs" / "target"
    put_file(target, "4.from-a-script.T", b"newest")
    os.utime(target / "4.from-a-script.T", (1e10, 1e10))
    jobs.put_many([b"first", b"second"])
    first = jobs.get()
    assert first is not None
    assert first.body == b"first"
    (target.parent / "working" / "older").write_bytes(b"oldest")
    os.utime(target.parent / "working" / "older", (1, 1))
    os.rename(target.parent / "working" / "older", target / "4.from-a-script.T")
    order = []
    while (message := jobs.get()) is not None:
        order.append(message.body)
    assert order == [b"oldest", b"second"]


@pytest.mark.parametrize("operation", ["ack", "unlock", "reject", "extend"])
def test_a_stale_message_from_get_cannot_settle_the_next_get_of_the_same_consumer(
    manual_box: boxmq.Box, root: Path, clock: ManualClock, operation: str
) -> None:
    """As for a consumer's messages: the first get's lock times out and the next get of the
    same consumer locks the message again; the first Message's answers are told the lock is
    gone and leave the second lock as it is. Answers by id (`boxmq ack`) still settle the
    lock the consumer holds."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"work")
    first = jobs.get("cli", lock_timeout=1)
    assert first is not None
    clock.advance(2)
    second = jobs.get("cli", lock_timeout=10)
    assert second is not None
    assert (second.id, second.delivery_count) == (first.id, 2)
    [locked] = files(root, "jobs", "processing")
    with pytest.raises(boxmq.UnexpectedRequest):
        getattr(first, operation)()
    assert files(root, "jobs", "processing") == [locked]
    second.extend()  # the later handle's own answers hold
    second.ack()
    assert jobs.counts().done == 1
    jobs.put(b"more")
    third = jobs.get("cli")
    assert third is not None
    jobs.ack(third.id, "cli")  # by id: whichever lock cli holds
    assert jobs.counts().done == 2


def test_a_timed_out_lock_on_a_name_that_is_not_utf8_goes_to_error(
    box: boxmq.Box, root: Path
) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"behind it")
    locked = BAD_NAME.decode(errors="surrogateescape") + "@cli@1@"  # its deadline long past
    (root / "jobs" / "processing" / locked).write_bytes(b"x")
    message = jobs.get("one-shot")
    assert message is not None
    assert message.body == b"behind it"
    assert [os.fsencode(n) for n in os.listdir(root / "jobs" / "error")] == [BAD_NAME]
    assert box.sweep()  # and a sweep does not trip on it either


def test_a_sweep_goes_through_queue_folders_made_by_hand(box: boxmq.Box, root: Path) -> None:
    (root / b"\xff".decode(errors="surrogateescape") / "target").mkdir(parents=True)
    (root / "50%off" / "target").mkdir(parents=True)
    (root / "50%off" / "target" / "4.old.T.1").write_text("expired in 1970")
    reports = box.sweep()
    assert reports["50%off"].expired == 1
    assert "\\xff" in reports


def test_extend_without_seconds_after_get_renews_the_lock_timeout(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    # python.md: Message.extend(seconds=None) renews the lock for its lock timeout, and a
    # message from get() is no exception (it used to raise "say for how long").
    jobs = manual_box.queue("jobs")
    jobs.put(b"long job")
    message = jobs.get("cli", lock_timeout=10)
    assert message is not None
    clock.advance(8)
    message.extend()
    clock.advance(8)  # 16 s after get: past the first deadline, within the renewed one
    assert jobs.get("other") is None
    message.ack()
    assert jobs.counts().done == 1


def test_requeue_from_expired_makes_the_messages_deliverable_again(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    # cli.md: `requeue --from expired` sends them back to target/; keeping the expiration
    # that had passed sent them straight back to expired/ at the next get.
    jobs = manual_box.queue("jobs")
    message_id = jobs.put(b"late", expires_in=60)
    keeps = jobs.put(b"expires later", expires_in=600)
    clock.advance(61)
    kept = jobs.get("cli")
    assert kept is not None
    assert kept.id == keeps
    kept.ack()
    assert jobs.counts().expired == 1
    assert jobs.requeue(source=State.EXPIRED) == 1
    again = jobs.get("cli")
    assert again is not None
    assert (again.id, again.expiration) == (message_id, None)
    again.ack()
    # a redrive keeps an expiration still ahead (here: from processed/)
    assert jobs.requeue(source=State.PROCESSED) == 2
    expirations = {p.envelope.message_id: p.envelope.expiration for p in jobs.peek()}
    assert expirations[message_id] == 0
    assert expirations[keeps] != 0


def test_hash_by_key_keeps_a_message_group_on_one_consumer_and_through_a_redelivery(
    root: Path, clock: ManualClock
) -> None:
    # The group key is the JMSXGroupID property a producer sets; without it, hash-by-key
    # hashed each message's id and spread one group over every consumer.
    with boxmq.open(root, fsync="never", dispatch="hash-by-key", clock=clock) as box:
        jobs = box.queue("jobs")
        names = ("a", "b", "c")
        consumers = [jobs.consumer(name, max_in_flight=100) for name in names]
        for index in range(60):
            jobs.put(f"{index}", properties={GROUP_KEY: f"order-{index % 6}"})
        held = {name: drain(consumer) for name, consumer in zip(names, consumers, strict=True)}
        owner: dict[object, str] = {}
        for name, messages in held.items():
            for message in messages:
                group = message.properties[GROUP_KEY]
                assert owner.setdefault(group, name) == name, f"{group} went to two consumers"
        assert len(owner) == 6
        assert len(set(owner.values())) > 1  # the groups spread out
        # A redelivery keeps the key: the message waits for its group's consumer
        name, messages = next((n, m) for n, m in held.items() if m)
        message = messages[0]
        message.unlock()
        assert all(c.receive_nowait() is None for c in consumers)  # nobody else takes it
        clock.advance(2)  # the hand-off (1 s) is over: back to its last holder
        again = consumers[names.index(name)].receive_nowait()
        assert again is not None
        assert (again.id, again.delivery_count) == (message.id, 2)
        assert again.properties[GROUP_KEY] == message.properties[GROUP_KEY]
        for consumer in consumers:
            consumer.close()


def test_hash_by_key_gives_an_unlocked_message_back_before_the_rest_of_its_group(
    root: Path, clock: ManualClock
) -> None:
    # While m0 waited out its hand-off for its group's consumer, that consumer got m1, m2, m3
    # of the group: the group came as m0, m1, m2, m3, m0.
    with boxmq.open(root, fsync="never", dispatch="hash-by-key", clock=clock) as box:
        jobs = box.queue("jobs")
        for index in range(4):
            jobs.put(f"m{index}", properties={GROUP_KEY: "order-17"})
        consumers = [jobs.consumer(name, max_in_flight=1) for name in ("a", "b")]
        [(consumer, first)] = [(c, m) for c in consumers if (m := c.receive_nowait()) is not None]
        assert first.body == b"m0"
        first.unlock()
        assert all(c.receive_nowait() is None for c in consumers)  # the group waits for m0
        clock.advance(2)  # the hand-off (1 s) is over
        got = []
        while (message := consumer.receive_nowait()) is not None:
            got.append(message.body)
            message.ack()
        assert got == [b"m0", b"m1", b"m2", b"m3"]
        for each in consumers:
            each.close()


def test_sticky_stays_on_its_consumer_after_that_consumer_unlocks_a_message(
    root: Path, clock: ManualClock
) -> None:
    with boxmq.open(root, fsync="never", dispatch="sticky", clock=clock) as box:
        jobs = box.queue("jobs")
        first, other = jobs.consumer("a", max_in_flight=3), jobs.consumer("b", max_in_flight=3)
        jobs.put("m0")
        message = first.receive_nowait()
        assert message is not None
        message.unlock()  # for the next consumer (XEP-0254 §2.4)
        again = other.receive_nowait()
        assert again is not None
        assert again.id == message.id
        for index in range(1, 3):
            jobs.put(f"m{index}")
        # The next ones went to b as well, though a, the sticky one, had room.
        assert [m.body for m in drain(first)] == [b"m1", b"m2"]
        assert other.receive_nowait() is None
        first.close()
        other.close()


# A script's name whose property escapes are not UTF-8: read with those bytes as surrogate
# escapes (os.listdir's way), the rest of its metadata intact.
SCRIPTED = "4.s1.T.....tenantS=acme&kS=%ED%A0%80&JMSXGroupIDS=g%FF"


def test_a_property_in_bytes_that_are_not_utf8_keeps_the_rest_and_its_bytes_through_an_unlock(
    root: Path,
) -> None:
    with boxmq.open(root, fsync="never", dispatch="hash-by-key") as box:
        jobs = box.queue("jobs")
        (root / "jobs" / "target" / SCRIPTED).write_bytes(b"x")
        consumer = jobs.consumer("c")
        message = consumer.receive(timeout=5)
        assert message is not None
        assert message.id == "s1"
        assert message.properties == {
            "tenant": "acme",
            "k": "\udced\udca0\udc80",
            GROUP_KEY: "g\udcff",
        }
        message.unlock()
        [name] = files(root, "jobs", "target")
        assert name.startswith(SCRIPTED + "&bx_dcI=1")  # its bytes as they were
        consumer.close()


def test_a_put_of_a_property_with_a_lone_surrogate_is_refused_naming_it(box: boxmq.Box) -> None:
    # No UTF-8 reader, and no MQTT subscriber, could ever be given it.
    for properties in ({"k": "a\ud800"}, {"k\udcff": "v"}):
        with pytest.raises(boxmq.InvalidArgument, match=r"property 'k.*lone surrogate"):
            box.queue("jobs").put(b"x", properties=properties)
    with pytest.raises(boxmq.InvalidArgument, match="property 'k'"):
        box.publish("t", b"x", properties={"k": "\udcff"})
    assert box.queue("jobs").counts().ready == 0


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("mqtt.payload-format", "2", "bytes \\(0\\) or utf-8 \\(1\\)"),
        ("mqtt.payload-format", True, "bytes \\(0\\) or utf-8 \\(1\\)"),
        ("mqtt.response-topic", "rpc/+/replies", "wildcards"),
        ("mqtt.response-topic", "", "topic"),
        ("mqtt.correlation-data", "req-7!", "base64"),
        ("mqtt.content-type", "text\0csv", "U\\+0000"),
    ],
)
def test_an_mqtt_property_that_means_nothing_to_mqtt_is_refused_at_put(
    box: boxmq.Box, name: str, value: str | bool, why: str
) -> None:
    # What could never go out as the MQTT v5 property it names is never stored.
    with pytest.raises(boxmq.InvalidArgument, match=f"property '{name}'.*{why}"):
        box.queue("jobs").put(b"x", properties={name: value})
    with pytest.raises(boxmq.InvalidArgument, match=f"property '{name}'.*{why}"):
        box.publish("t", b"x", properties={name: value})
    assert box.queue("jobs").counts().ready == 0


def test_mqtt_properties_a_producer_set_are_its_reply_to_and_correlation_id(
    box: boxmq.Box,
) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"x", properties={"mqtt.response-topic": "r/7", "mqtt.correlation-data": "/3I="})
    jobs.put(b"y", properties={"mqtt.response-topic": "r/7"}, reply_to="own", correlation_id="c")
    first, second = jobs.get("a"), jobs.get("b")
    assert first is not None
    assert second is not None
    assert (first.reply_to, first.correlation_id) == ("r/7", "/3I=")  # not UTF-8: base64
    assert (second.reply_to, second.correlation_id) == ("own", "c")  # the name's own win


def _in_a_thread(what: str, call: Any) -> Any:
    """`call()`'s result or error, from a thread given 10 s: a put that waits for a committer
    that is gone would otherwise hang the test run."""
    import threading

    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert outcome, f"{what} still waits 10 s after the box was closed"
    return outcome[0]


@pytest.mark.parametrize("fsync", FsyncPolicy.words())
def test_a_box_used_after_close_raises_closed_and_never_waits(tmp_path: Path, fsync: str) -> None:
    """The mistake of using a queue after its `with boxmq.open(...)` block: a put under
    fsync=always, on a box that had committed before, waited for ever for the committing
    thread that close() had stopped (found by a walk through the docs)."""
    with boxmq.open(tmp_path, fsync=fsync) as box:
        jobs = box.queue("jobs")
        jobs.put(b"before")  # starts the committing thread, which close() stops
    calls = {
        "put": lambda: jobs.put(b"after"),
        "put with metadata": lambda: jobs.put(b"after", priority=7, properties={"k": "v"}),
        "put_many": lambda: jobs.put_many([b"a", b"b"]),
        "publish": lambda: box.publish("news/a", b"after"),
        "assured": lambda: box.assured("src", "m1", b"after", queue="jobs"),
        "consumer": lambda: jobs.consumer("w"),
        "subscribe": lambda: box.subscribe("news/#", "s"),
        "join a share group": lambda: box.subscribe("$share/g/news/#", "s"),
        # What the CLI and the MQTT door call: it wrote the subscription's folders first.
        "topics.subscribe": lambda: box.topics.subscribe("sport/#", "t"),
        "topics.subscribe to a group": lambda: box.topics.subscribe("$share/h/sport/#", "t"),
        "resubscribe": lambda: box.topics.resubscribe("sport/#", "t", qos=2),
        "attach a dropbox": lambda: box.topics.attach_dropbox("sport/#", "spark"),
    }
    for what, call in calls.items():
        outcome = _in_a_thread(what, call)
        assert isinstance(outcome, boxmq.Closed), (what, outcome)
        assert "closed" in str(outcome)
    assert files(tmp_path, "jobs", "target") == [files(tmp_path, "jobs", "target")[0]]
    assert files(tmp_path, "jobs", "working") == []  # nothing half-sent is left behind
    with boxmq.open(tmp_path, fsync=fsync) as box:  # the root itself is fine: open it again
        assert box.queue("jobs").put(b"again")
        assert box.queue("jobs").counts().ready == 2
        assert box.topics.subscriptions() == []  # none was left to collect for nobody
    assert list(layout.subscription_folders(str(tmp_path))) == []  # nor half made


@pytest.mark.parametrize(
    "option",
    [
        {"fsync_interval": "1s", "fsync": "interval"},  # the committing thread died: no flush
        {"fsync_interval": 0, "fsync": "interval"},  # a flush without a pause, for ever
        {"processed_retention": "1d"},  # the first sweep failed with a TypeError
        {"processed_retention": -5.0},  # every sweep purged processed/ at once
        {"processed_retention": math.nan},
        {"expired_retention": "7d"},
        {"expired_retention": -1.0},
        {"abandon_after": "1h"},
        {"abandon_after": -1.0},
        {"spares": 1.5},
    ],
)
def test_open_refuses_a_duration_that_is_no_number_of_seconds(
    tmp_path: Path, option: dict[str, Any]
) -> None:
    """boxmq.open checked fsync, dispatch and max_deliveries but took any value for its
    durations (found by a walk through the docs: `processed_retention="1d"`, as the config
    file writes it)."""
    name = next(key for key in option if key != "fsync")
    with pytest.raises(boxmq.InvalidArgument, match=name):
        boxmq.open(tmp_path, **option)
    assert not (tmp_path / ".spare").exists()  # refused before anything was made


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_open_refuses_an_fsync_interval_its_policy_never_uses(tmp_path: Path, fsync: str) -> None:
    """fsync_interval=5 with fsync "always" (the default) or "never" was taken without a word
    and never used, where serve's config file warns of it."""
    with pytest.raises(boxmq.InvalidArgument, match='only used with fsync="interval"'):
        boxmq.open(tmp_path, fsync=fsync, fsync_interval=5.0)
    assert not (tmp_path / ".spare").exists()  # refused before anything was made


def test_open_takes_zero_to_clean_at_once_and_none_to_keep_forever(tmp_path: Path) -> None:
    with boxmq.open(tmp_path, abandon_after=0, processed_retention=0, spares=0) as box:
        box.queue("jobs").put(b"x")
    with boxmq.open(tmp_path, processed_retention=None, fsync_interval=0.5, fsync="interval"):
        pass


def test_a_claim_given_back_reaches_its_last_holder_when_the_hand_off_ends(
    manual_box: boxmq.Box, clock: ManualClock
) -> None:
    """w1 unlocked the message, it was locked ahead for w2, and w2 closed without receiving
    it: it is back as it was, w1 its last holder, and w1 (the one consumer left) takes it once
    the hand-off after the give-back is over. The watcher's news of the claim and the give-back
    (gone from target/, and back under the same name) made the queue offer it again at w1's
    next look, and the hand-off began again from there: w1 waited a second more."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"x")
    w1 = jobs.consumer("w1", max_in_flight=1, lock_timeout=10)
    w2 = jobs.consumer("w2", max_in_flight=1, lock_timeout=10)
    first = w1.receive_nowait()
    assert first is not None
    first.unlock()
    clock.advance(0.5)
    assert w1.receive_ready() == []  # passed over: locked ahead for w2
    assert [p.holder for p in jobs.peek(state="processing")] == ["w2"]
    w2.close()  # never received it: back as it was
    clock.advance(1.0)  # the hand-off from the give-back is over
    again = w1.receive_nowait()
    assert again is not None
    assert (again.id, again.delivery_count) == (first.id, 2)
    again.ack()
    w1.close()


def test_random_dispatch_picks_differently_in_each_box(tmp_path: Path) -> None:
    # Two Boxes doing the same steps stand for two processes (or two runs): with one fixed
    # seed, "random" gave every consumer the same share of messages in each.
    def picks(root: Path) -> list[int]:
        with boxmq.open(root, fsync="never", dispatch="random") as box:
            jobs = box.queue("jobs")
            consumers = [jobs.consumer(f"c{i}", max_in_flight=64) for i in range(4)]
            jobs.put_many([str(n).encode() for n in range(48)])
            taken: dict[int, int] = {}
            for index, consumer in enumerate(consumers):
                for message in consumer.receive_ready():
                    taken[int(message.body)] = index
            for consumer in consumers:
                consumer.close()
        assert sorted(taken) == list(range(48))
        return [taken[n] for n in range(48)]

    assert picks(tmp_path / "a") != picks(tmp_path / "b")


def test_a_box_dropped_without_close_is_collected_warned_of_and_closed(tmp_path: Path) -> None:
    """A box that had a consumer, dropped without close(), was never collected: the process's
    inotify instance held its queue's watcher, whose news callback held the queue and so
    the box; its locks stayed held and its committing thread ran until the process ended
    (20 such boxes under fsync=always left 21 threads; found by an API hunt). Now it is
    collected, says so as an unclosed file does (ResourceWarning), and is closed."""
    import gc
    import threading
    import weakref

    before = threading.active_count()

    def drop() -> weakref.ref[boxmq.Box]:
        box = boxmq.open(tmp_path, fsync="always")
        jobs = box.queue("jobs")
        jobs.put(b"held")
        message = jobs.consumer("w").receive(0)
        assert message is not None  # locked in processing/ by the dropped box
        return weakref.ref(box)

    dropped = drop()
    with pytest.warns(ResourceWarning, match="unclosed box"):
        gc.collect()
    assert dropped() is None
    for thread in threading.enumerate():
        if thread.name == "boxmq-unclosed":
            thread.join(10)
    assert threading.active_count() == before  # the committing thread stopped
    with boxmq.open(tmp_path, fsync="never") as box:  # its lock was released: ready again
        again = box.queue("jobs").consumer("v").receive(0)
        assert again is not None
        assert again.body == b"held"
        again.ack()


# A box dropped unclosed whose close() fails or hangs, in a process of its own that then ends.
_DROPPED = """
import logging, sys, threading, warnings
import boxmq
logging.basicConfig(stream=sys.stderr)
warnings.simplefilter("ignore", ResourceWarning)
box = boxmq.open(sys.argv[1], fsync="never")
box.queue("jobs").put(b"x")
if sys.argv[2] == "raises":
    def close():
        raise ValueError("a close that failed")
    box.close = close
else:
    box.close = threading.Event().wait  # never returns
del box  # collected: closed in a thread of its own
"""


@pytest.mark.parametrize("close", ["raises", "hangs"])
def test_a_dropped_box_whose_close_fails_or_hangs_is_logged_and_lets_the_process_end(
    tmp_path: Path, close: str
) -> None:
    """The thread that closes a dropped box caught OSError alone: any other error went to
    the thread's hook (a traceback on stderr, not in the application's log); and it was no
    daemon, so a close that hung (a lock never let go, a hung network disk) kept the
    interpreter from exiting. A process that ends lets go of its locks for the others all
    the same (its owner is gone)."""
    done = subprocess.run(
        [sys.executable, "-c", _DROPPED, str(tmp_path), close],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "Exception in thread" not in done.stderr
    if close == "raises":
        assert "closing a box of" in done.stderr
        assert "ValueError: a close that failed" in done.stderr


def test_an_int_given_for_a_float_property_reads_back_as_a_float_on_every_path(
    box: boxmq.Box,
) -> None:
    # The name holds "300.0" (Java widens an int), but a consumer of this process was handed
    # the envelope as put, with the int 300: int here, float in another process, and the
    # MQTT User Property "300" or "300.0" by the path the message took.
    given = {
        "f": boxmq.Property("f", boxmq.PropertyType.FLOAT, 300),
        "d": boxmq.Property("d", boxmq.PropertyType.DOUBLE, -2),
    }
    jobs = box.queue("jobs")
    with jobs.consumer("w") as consumer, box.subscribe("t", "s") as subscriber:
        jobs.put(b"x", properties=given)
        box.publish("t", b"x", properties=given)
        for receiver in (consumer, subscriber):
            message = receiver.receive(timeout=5)
            assert message is not None
            assert {k: (v, type(v)) for k, v in message.properties.items()} == {
                "f": (300.0, float),
                "d": (-2.0, float),
            }
            message.ack()


def test_options_set_on_an_open_box_rule_the_engines_made_after(root: Path) -> None:
    """Box.options is read when an engine is made, as it was before the engines had their own
    class (client/engines.py): tests set it on an open box (rescan_interval, to see what the
    watch alone tells), and one that kept the options of the open went on rescanning."""
    with boxmq.open(root, fsync="never") as box:  # max_deliveries 5
        box.options = replace(box.options, policy=replace(box.options.policy, max_deliveries=1))
        jobs = box.queue("jobs")
        jobs.put(b"poison")
        with jobs.consumer("a") as consumer:
            message = consumer.receive_nowait()
            assert message is not None
            message.unlock()
            assert consumer.receive_nowait() is None  # dead at its first delivery
    assert len(files(root, "jobs", "error")) == 1


def test_a_declined_message_goes_to_the_other_consumer_and_to_error_once_all_declined(
    box: boxmq.Box, root: Path
) -> None:
    """`Message.decline`: for another consumer, its delivery not counted, never back to the
    one that declined it; declined by every consumer, it is in error/ as too-large. A get's
    lock knows no other consumer: its decline is an unlock."""
    jobs = box.queue("jobs")
    jobs.put(b"big")
    with jobs.consumer("a") as a, jobs.consumer("b") as b:
        [first] = drain(a) or drain(b)
        declined, other = (a, b) if first.consumer == "a" else (b, a)
        assert first.decline() is None
        assert drain(declined) == []  # never back to it, though it has room
        [second] = drain(other)
        assert (second.id, second.delivery_count) == (first.id, 1)
        assert second.decline() == "too-large"
    [dead] = jobs.peek(state=State.ERROR)
    assert (dead.dead, dead.envelope.delivery_count) == ("too-large", 1)
    jobs.put(b"got")
    got = jobs.get("cli")
    assert got is not None
    assert got.decline() is None
    assert [p.envelope.delivery_count for p in jobs.peek()] == [1]  # unlocked: counted


def test_a_consumer_closed_after_declining_is_handed_it_again_once_opened_again(
    manual_box: boxmq.Box, root: Path, clock: ManualClock
) -> None:
    """Declined while the only other consumer was paused, a message waits for it; the one
    that declined it, closed and opened again under its name (an MQTT member connecting again
    with a clean start), may take it now and is handed it, rather than it waiting on."""
    jobs = manual_box.queue("jobs")
    with jobs.consumer("b") as b:
        b.pause()
        jobs.put(b"big")
        with jobs.consumer("a") as a:
            [first] = drain(a)
            assert first.decline() is None
        clock.advance(2.0)  # past the handoff (1 s), which keeps it from its last holder
        with jobs.consumer("a") as a:
            [again] = drain(a)
            assert (again.id, again.delivery_count) == (first.id, 1)
            again.ack()
    assert files(root, "jobs", "target") == []


def test_a_consumer_paused_after_declining_is_waited_for_once_the_others_decline(
    box: boxmq.Box, root: Path
) -> None:
    """One that declined a message and paused (an MQTT member gone away, its session kept)
    may come back able to take it, as any paused one: the other declining it too leaves it in
    target/, not error/, and it goes to the first once it resumes."""
    jobs = box.queue("jobs")
    jobs.put(b"held")
    with jobs.consumer("b", max_in_flight=1) as b:
        [held] = drain(b)
        with jobs.consumer("a", max_in_flight=1) as a:
            jobs.put(b"big")
            [first] = drain(a)
            assert first.decline() is None
            a.pause()
            held.ack()
            [second] = drain(b)
            assert second.id == first.id
            assert second.decline() is None  # a may take it once back
            assert files(root, "jobs", "error") == []
            a.resume()
            [again] = drain(a)
            assert (again.id, again.delivery_count) == (first.id, 1)
