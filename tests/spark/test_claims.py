"""The stream's claims on disk (boxmq.spark.claims), without a JVM: numbering, plans, the tasks'
claims, replay, acks."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import boxmq
from boxmq.clock import ManualClock
from boxmq.spark.claims import Budget, Claims, StreamBusy, state_dir
from boxmq.spark.records import FileRef, read_files
from boxmq.store.layout import State, queue_path
from boxmq.store.names import decode_lenient, split_lock

DAY = 86_400.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


@pytest.fixture
def box(tmp_path: Path, clock: ManualClock) -> Iterator[boxmq.Box]:
    with boxmq.open(tmp_path / "data", fsync="never", clock=clock) as opened:
        yield opened


def _claims(box: boxmq.Box, clock: ManualClock, consumer: str = "spark") -> Claims:
    return Claims(
        box.root,
        queue_path(box.root, "q"),
        consumer,
        lock_timeout=DAY,
        flush=False,
        now=clock.now,
        wait=0.3,
    )


def _folder(box: boxmq.Box, state: str) -> list[str]:
    return sorted(os.listdir(os.path.join(queue_path(box.root, "q"), state)))


def _bodies(box: boxmq.Box, claims: list[str]) -> list[bytes]:
    folder = os.path.join(queue_path(box.root, "q"), "processing")
    return [Path(folder, name).read_bytes() for name in claims]


def _task(box: boxmq.Box, claims: Claims, start: int, end: int) -> list[bytes]:
    """What the batch's Spark tasks do (source.py): claim what the plan numbered, then read it;
    the bodies read, in order."""
    dropbox = queue_path(box.root, "q")
    target, processing = (os.path.join(dropbox, state) for state in ("target", "processing"))
    files = [FileRef(processing, c.locked, c.name, target) for c in claims.between(start, end)]
    batches = read_files(files, "q", State.PROCESSING, chunk=1000)
    bodies = [body for columns in batches for body in columns.values[11]]
    assert all(isinstance(body, bytes) for body in bodies)
    return bodies  # type: ignore[return-value]


def test_a_batch_claims_in_priority_order_within_the_row_budget(
    box: boxmq.Box, clock: ManualClock
) -> None:
    queue = box.queue("q")
    for index in range(20):
        queue.put(f"low{index:02}", priority=1)
    queue.put("high", priority=9)
    claims = _claims(box, clock)

    end = claims.next_end(0, Budget(rows=3))  # a small batch of a big backlog
    assert end == 3
    assert len(_folder(box, "target")) == 21  # planned: the tasks claim
    assert _task(box, claims, 0, end) == [b"high", b"low00", b"low01"]
    assert len(_folder(box, "target")) == 18  # the rest stays ready for other consumers

    end = claims.next_end(end, Budget(rows=100))  # all of the rest, fully sorted
    assert _task(box, claims, 3, end) == [f"low{index:02}".encode() for index in range(2, 20)]


def test_a_claim_is_an_ordinary_boxmq_lock_naming_the_stream_and_the_number(
    box: boxmq.Box, clock: ManualClock
) -> None:
    box.queue("q").put("x")
    claims = _claims(box, clock)
    claims.next_end(0, Budget())
    _task(box, claims, 0, 1)

    [locked] = _folder(box, "processing")
    name, lock = split_lock(locked)
    assert lock is not None
    assert lock.owner == f"spark~{claims.stream}~1"
    assert lock.token == ""  # no process: only the deadline ends it
    assert lock.deadline_ms == int((clock.now() + DAY) * 1000)
    assert box.queue("q").peek(state=boxmq.State.PROCESSING)[0].holder == lock.owner
    assert name == claims.between(0, 1)[0].name


def test_a_restarted_stream_replays_exactly_the_same_messages(
    box: boxmq.Box, clock: ManualClock
) -> None:
    box.queue("q").put_many([f"m{i}".encode() for i in range(10)])
    first = _claims(box, clock)
    end = first.next_end(0, Budget(rows=4))
    planned = first.between(0, end)
    first.close()  # the driver died after Spark logged (0, end]

    box.queue("q").put("late")  # arrives before the restart: not part of the replay
    again = _claims(box, clock)
    replayed = again.between(0, end)

    assert replayed == planned
    assert _task(box, again, 0, end) == [b"m0", b"m1", b"m2", b"m3"]


def test_a_retried_task_or_a_replayed_batch_reads_what_the_first_attempt_claimed(
    box: boxmq.Box, clock: ManualClock
) -> None:
    box.queue("q").put_many([f"m{i}".encode() for i in range(6)])
    first = _claims(box, clock)
    end = first.next_end(0, Budget())
    planned = first.between(0, end)
    # The first attempt claimed and read half of the batch, then its driver died.
    dropbox = queue_path(box.root, "q")
    target, processing = (os.path.join(dropbox, state) for state in ("target", "processing"))
    half = [FileRef(processing, c.locked, c.name, target) for c in planned[:3]]
    assert sum(len(columns) for columns in read_files(half, "q", State.PROCESSING, chunk=9)) == 3
    first.close()
    assert (len(_folder(box, "target")), len(_folder(box, "processing"))) == (3, 3)

    again = _claims(box, clock)  # the restarted driver replays (0, end] from the plan
    bodies = [f"m{i}".encode() for i in range(6)]
    assert _task(box, again, 0, end) == bodies
    assert _task(box, again, 0, end) == bodies  # a task retried: the same, no claim lost
    assert (len(_folder(box, "target")), len(_folder(box, "processing"))) == (0, 6)
    assert again.ack(end) == 6
    assert len(_folder(box, "processed")) == 6


def test_a_message_another_consumer_claimed_first_is_skipped_by_every_attempt(
    box: boxmq.Box, clock: ManualClock
) -> None:
    queue = box.queue("q")
    queue.put_many([b"a", b"b", b"c"])
    claims = _claims(box, clock)
    end = claims.next_end(0, Budget())
    taken = queue.get("other")  # between the plan and the task
    assert taken is not None

    read = _task(box, claims, 0, end)
    assert sorted([*read, taken.body]) == [b"a", b"b", b"c"]
    assert _task(box, claims, 0, end) == read
    assert claims.ack(end) == 2  # the third is the other consumer's to acknowledge
    assert len(_folder(box, "processing")) == 1


def test_plans_are_removed_once_acknowledged(box: boxmq.Box, clock: ManualClock) -> None:
    box.queue("q").put_many([b"a", b"b", b"c"])
    claims = _claims(box, clock)
    plans = os.path.join(state_dir(box.root, claims.stream), "plans")
    end = claims.next_end(0, Budget(rows=2))
    _task(box, claims, 0, end)
    assert len(os.listdir(plans)) == 1

    end = claims.next_end(end, Budget(rows=2))  # acknowledges (0, 2], plans 3
    assert len(os.listdir(plans)) == 1
    _task(box, claims, 2, end)
    claims.ack(end)
    assert os.listdir(plans) == []
    claims.close()
    assert _claims(box, clock).between(0, end) == []  # nothing left to read again


def test_numbers_only_grow_across_restarts_and_new_checkpoints(
    box: boxmq.Box, clock: ManualClock
) -> None:
    queue = box.queue("q")
    queue.put_many([b"a", b"b", b"c"])
    first = _claims(box, clock)
    end = first.next_end(0, Budget())
    _task(box, first, 0, end)
    first.ack(end)  # Spark committed the batch
    first.close()

    queue.put("d")
    again = _claims(box, clock)
    # A new checkpoint starts at 0; numbering must not restart, or "ack <= start" could
    # swallow messages a later batch has not read yet.
    end_again = again.next_end(0, Budget())
    assert [claim.seq for claim in again.between(0, end_again)] == [4]


def test_claims_not_yet_planned_come_first_with_their_numbers(
    box: boxmq.Box, clock: ManualClock
) -> None:
    box.queue("q").put_many([b"a", b"b", b"c"])
    first = _claims(box, clock)
    first.next_end(0, Budget())  # planned 1..3, then the driver died before Spark's WAL
    first.close()

    box.queue("q").put("d")
    again = _claims(box, clock)
    end = again.next_end(0, Budget(rows=2))
    assert end == 2
    assert _task(box, again, 0, end) == [b"a", b"b"]
    end = again.next_end(end, Budget(rows=5))
    assert [claim.seq for claim in again.between(2, end)] == [3, 4]  # not numbered twice
    assert _task(box, again, 2, end) == [b"c", b"d"]


def test_start_acknowledges_everything_up_to_it_under_the_original_names(
    box: boxmq.Box, clock: ManualClock
) -> None:
    box.queue("q").put_many([b"a", b"b", b"c"])
    claims = _claims(box, clock)
    end = claims.next_end(0, Budget(rows=2))
    names = [claim.name for claim in claims.between(0, end)]
    _task(box, claims, 0, end)

    later = claims.next_end(end, Budget(rows=2))  # Spark asks for the next batch: (0, 2] is done
    _task(box, claims, end, later)

    assert _folder(box, "processed") == sorted(names)
    assert len(_folder(box, "processing")) == 1


def test_an_ack_never_replaces_a_processed_message_of_the_same_name(
    box: boxmq.Box, clock: ManualClock
) -> None:
    """A producer that reuses a name (a nightly 4.nightly.T): yesterday's stays in processed/."""
    box.queue("q").put("warm-up")
    box.queue("q").purge()
    dropbox = queue_path(box.root, "q")
    Path(dropbox, "processed", "4.nightly.T").write_bytes(b"monday")
    Path(dropbox, "target", "4.nightly.T").write_bytes(b"tuesday")
    claims = _claims(box, clock)
    end = claims.next_end(0, Budget())
    _task(box, claims, 0, end)
    claims.next_end(end, Budget())  # the next batch: the first one is done

    processed = {n: Path(dropbox, "processed", n).read_bytes() for n in _folder(box, "processed")}
    assert processed == {"4.nightly.T": b"monday", "4.nightly%7E2.T": b"tuesday"}


def test_a_byte_budget_always_takes_at_least_one_message(
    box: boxmq.Box, clock: ManualClock
) -> None:
    box.queue("q").put_many([b"x" * 100, b"y" * 100, b"z" * 10])
    claims = _claims(box, clock)

    assert claims.next_end(0, Budget(bytes=50)) == 1  # bigger than the budget, taken alone
    assert _task(box, claims, 0, 1) == [b"x" * 100]
    assert claims.next_end(1, Budget(bytes=250)) == 3


def test_available_now_reads_only_what_was_ready_at_its_start(
    box: boxmq.Box, clock: ManualClock
) -> None:
    box.queue("q").put_many([b"a", b"b"])
    claims = _claims(box, clock)
    ready = claims.snapshot()
    box.queue("q").put("later")

    end = claims.next_end(0, Budget(), ready)

    assert end == 2
    assert _task(box, claims, 0, end) == [b"a", b"b"]
    assert len(_folder(box, "target")) == 1


def test_expired_messages_go_to_expired_and_delayed_ones_wait(
    box: boxmq.Box, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    queue = box.queue("q")
    queue.put("delayed")
    queue.put("old", expires_in=5)
    message = queue.get("someone")
    assert message is not None
    queue.unlock(message.envelope.message_id, "someone", delay=60)
    clock.advance(10)
    claims = _claims(box, clock)

    caplog.set_level(logging.INFO, logger="boxmq")
    assert claims.next_end(0, Budget()) == 0
    assert len(_folder(box, "expired")) == 1
    # Said as every reader of a queue says it: `boxmq ls` had counted it ready.
    expired_lines = [r.getMessage() for r in caplog.records if "expired/" in r.getMessage()]
    assert expired_lines == [
        f"{os.path.realpath(queue_path(box.root, 'q'))}: 1 message(s) expired before a "
        "consumer took them: moved to expired/"
    ]
    clock.advance(60)
    assert claims.next_end(0, Budget()) == 1


def test_a_second_reader_of_the_same_stream_is_refused(box: boxmq.Box, clock: ManualClock) -> None:
    box.queue("q")
    first = _claims(box, clock)
    with pytest.raises(StreamBusy, match="another running query"):
        _claims(box, clock)
    other = _claims(box, clock, consumer="other")  # another consumer name is another stream
    assert other.stream != first.stream
    first.close()
    _claims(box, clock).close()


def test_boxmq_sweepers_take_claims_back_only_after_the_lock_timeout(
    box: boxmq.Box, clock: ManualClock
) -> None:
    box.queue("q").put("x")
    claims = _claims(box, clock)
    claims.next_end(0, Budget())
    _task(box, claims, 0, 1)

    box.sweep()
    assert len(_folder(box, "processing")) == 1  # no process token: not "owner gone"
    clock.advance(DAY + 1)
    box.sweep()
    [back] = _folder(box, "target")
    assert decode_lenient(back)[0].delivery_count == 1  # one delivery ended without an ack
    assert claims.ack(1) == 0  # the stream's ack finds nothing: someone else delivers it now


@pytest.mark.parametrize(
    "bad",
    [b"\xff\xfe", b"4." + b"\xff" * 200 + b".T"],  # short: it was claimed; long: encode() raised
    ids=["short", "long"],
)
def test_a_name_that_is_not_utf8_goes_to_error_and_blocks_nobody(
    box: boxmq.Box, clock: ManualClock, caplog: pytest.LogCaptureFixture, bad: bytes
) -> None:
    # os.listdir gives such a name with surrogate escapes: no id a row could carry.
    queue = box.queue("q")
    queue.put("behind it")
    target = Path(queue_path(box.root, "q"), "target")
    target.joinpath(os.fsdecode(bad)).write_bytes(b"x")
    claims = _claims(box, clock)

    assert claims.next_end(0, Budget()) == 1
    assert _task(box, claims, 0, 1) == [b"behind it"]
    assert [os.fsencode(name) for name in _folder(box, "error")] == [bad]
    assert "moved to error/" in caplog.text  # not UTF-8 (the long one: too long first)
    assert queue.counts().dead == 1


def test_state_folders_deleted_by_hand_are_made_again_by_the_claims_and_the_ack(
    box: boxmq.Box, clock: ManualClock
) -> None:
    # As a consumer's claim, ack and expiry make them (store/dropbox.py): the stream did not
    # start without processing/, nor did a task claim into it; an ack left its claims locked
    # for lockTimeout (a day), then read again; an expired message was left in target/.
    queue = box.queue("q")
    queue.put("a")
    queue.put("old", expires_in=1.0)
    clock.advance(2.0)
    dropbox = queue_path(box.root, "q")
    for state in ("processing", "processed", "expired"):
        os.rmdir(os.path.join(dropbox, state))
    claims = _claims(box, clock)
    end = claims.next_end(0, Budget())
    assert _task(box, claims, 0, end) == [b"a"]
    assert claims.ack(end) == 1
    assert len(_folder(box, "processed")) == 1
    assert len(_folder(box, "expired")) == 1
    assert _folder(box, "processing") == _folder(box, "target") == []
    claims.close()


def test_a_queue_deleted_under_a_running_stream_reads_as_empty_until_a_put_makes_it_again(
    box: boxmq.Box, clock: ManualClock
) -> None:
    # As a consumer of another process finds it gone (docs/operations.md): `boxmq delete q`
    # between two batches failed the query with FileNotFoundError (found by a Spark hunt).
    box.queue("q").put("a")
    claims = _claims(box, clock)
    first = claims.next_end(0, Budget())
    assert _task(box, claims, 0, first) == [b"a"]
    claims.ack(first)
    assert box.delete_queue("q")

    assert claims.next_end(first, Budget()) == first  # nothing to read, and no error
    assert claims.snapshot() == frozenset()  # Trigger.AvailableNow's look
    box.queue("q").put("b")
    end = claims.next_end(first, Budget())
    assert _task(box, claims, first, end) == [b"b"]
    claims.close()


def test_a_subscription_ended_under_a_running_stream_fails_it_saying_so(
    box: boxmq.Box, clock: ManualClock
) -> None:
    # Nothing makes it again (a publish routes to registered subscriptions only): reading it
    # as empty would wait for ever; a restarted query registers it again.
    dropbox = box.topics.attach_dropbox("t/#", "spark")
    claims = Claims(
        box.root,
        dropbox,
        "spark",
        lock_timeout=DAY,
        flush=False,
        now=clock.now,
        wait=0.3,
        subscription="t/#",
    )
    assert box.unsubscribe("t/#", "spark")
    with pytest.raises(boxmq.QueueNotFound, match="'t/#' of 'spark' was ended under the running"):
        claims.next_end(0, Budget())
    claims.close()
