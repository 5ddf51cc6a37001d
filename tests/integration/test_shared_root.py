"""Two boxes on one root, as two processes see it: one never claims what the other took."""

from __future__ import annotations

import time
from pathlib import Path
from unittest.mock import ANY

import pytest
from tests.inotify import require_inotify
from tests.integration.test_embedded_queue import files

import boxmq
from boxmq.clock import ManualClock
from boxmq.core.queue import QueueEngine
from boxmq.model import ConsumerId, MessageId
from boxmq.store.names import Lock, split_lock


def test_a_message_another_box_claimed_is_withdrawn_not_claimed_in_vain(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B has seen A's put but had no free slot; A claims it. When B's slot frees, B must not
    try to claim it (a rename that fails, and an offer undone): the watcher told B it left."""
    lost: list[object] = []
    claim_lost = QueueEngine.claim_lost

    def counted(self: QueueEngine, message_id: MessageId) -> None:
        lost.append(message_id)
        claim_lost(self, message_id)

    monkeypatch.setattr(QueueEngine, "claim_lost", counted)
    with boxmq.open(root, fsync="never") as a, boxmq.open(root, fsync="never") as b:
        b_jobs, a_jobs = b.queue("jobs"), a.queue("jobs")
        with b_jobs.consumer("b", max_in_flight=1) as b_consumer:
            b_jobs.put(b"B's own")
            held = b_consumer.receive(timeout=5)
            assert held is not None  # B's one slot is taken
            a_jobs.put(b"A's")
            assert b_consumer.receive(timeout=0.2) is None  # B reads the news: no free slot
            with a_jobs.consumer("a") as a_consumer:
                taken = a_consumer.receive(timeout=5)
                assert taken is not None
                assert taken.body == b"A's"
                held.ack()  # B's slot is free; A's message is held by A
                time.sleep(0.01)  # past the watch interval: B reads its news before it claims
                assert b_consumer.receive(timeout=0.2) is None
                taken.ack()
    assert lost == []


@pytest.mark.parametrize("verb", ["ack", "unlock", "reject"])
def test_a_lock_settled_by_id_from_another_box_frees_its_holder_s_slot(
    root: Path, clock: ManualClock, verb: str
) -> None:
    """`boxmq ack|unlock|reject q ID` from another process ends the lock of a consumer that
    holds one message at a time: it takes the next message within a sweep, not after the
    lock's old deadline, and its own answer on the message is refused."""
    with (
        boxmq.open(root, fsync="never", clock=clock) as holder_box,
        boxmq.open(root, fsync="never", clock=clock) as cli_box,
    ):
        jobs = holder_box.queue("jobs")
        jobs.put(b"a")
        jobs.put(b"b")
        with jobs.consumer("w1", max_in_flight=1, lock_timeout=30) as w1:
            held = w1.receive_nowait()
            assert held is not None
            assert held.text() == "a"
            getattr(cli_box.queue("jobs"), verb)(held.id, "w1")
            clock.advance(1.0)  # one sweep interval
            after = w1.receive_nowait()
            assert after is not None
            assert after.text() == "b"
            with pytest.raises(boxmq.UnexpectedRequest):
                held.ack()
            after.ack()
            if verb == "unlock":
                clock.advance(1.0)  # w1 unlocked it: the hand-off
                again = w1.receive_nowait()
                assert again is not None
                assert (again.text(), again.delivery_count) == ("a", 2)
                again.ack()
            assert w1.receive_nowait() is None


@pytest.mark.parametrize("settled", ["ack", "unlock", "reject"])
@pytest.mark.parametrize("answer", ["unlock", "reject"])
def test_a_holder_s_unlock_or_reject_after_another_box_settled_its_lock_is_refused(
    root: Path, clock: ManualClock, settled: str, answer: str
) -> None:
    """XEP-0254 §2.3/§2.4: a subscriber whose lock is gone gets unexpected-request, whatever
    it answers. An unlock or a reject after another process settled the lock by id returned
    as if done (a reject logged "to error/"), and the message the holder thought it had
    dead-lettered came back to it."""
    if settled == "unlock":
        require_inotify(root.parent)  # the holder is told of the message put back at once
    with (
        boxmq.open(root, fsync="never", clock=clock) as holder_box,
        boxmq.open(root, fsync="never", clock=clock) as cli_box,
    ):
        jobs = holder_box.queue("jobs")
        jobs.put(b"a")
        with jobs.consumer("w1", max_in_flight=1, lock_timeout=30) as w1:
            held = w1.receive_nowait()
            assert held is not None
            getattr(cli_box.queue("jobs"), settled)(held.id, "w1")
            with pytest.raises(boxmq.UnexpectedRequest):
                getattr(held, answer)()
            where = {
                state: files(root, "jobs", state) for state in ("target", "processed", "error")
            }
            expected = {"ack": "processed", "unlock": "target", "reject": "error"}[settled]
            assert [state for state, names in where.items() if names] == [expected]
            if settled == "unlock":  # what the other process put back is delivered
                clock.advance(1.0)  # one sweep to see it, one for the hand-off to w1 alone
                assert w1.receive_nowait() is None
                clock.advance(1.0)
                again = w1.receive_nowait()
                assert again is not None
                assert again.delivery_count == 2
                again.ack()
            assert w1.receive_nowait() is None


def test_an_answer_after_another_consumer_took_the_message_is_refused(
    root: Path, clock: ManualClock
) -> None:
    """`boxmq extend q ID --consumer w1 --by 1s` from another process shortens w1's lock; once
    that ran out, w2 in the other process takes the message. w1's unlock and reject are
    refused and leave w2's lock alone: a reject said "to error/" and moved nothing."""
    with (
        boxmq.open(root, fsync="never", clock=clock) as box1,
        boxmq.open(root, fsync="never", clock=clock) as box2,
    ):
        box1.queue("jobs").put(b"a")
        with box1.queue("jobs").consumer("w1", lock_timeout=30) as w1:
            late = w1.receive_nowait()
            assert late is not None
            box2.queue("jobs").extend(late.id, "w1", seconds=1)
            clock.advance(2)
            with box2.queue("jobs").consumer("w2", lock_timeout=30) as w2:
                taken = w2.receive_nowait()
                assert taken is not None
                assert taken.id == late.id
                for answer in ("unlock", "reject"):
                    with pytest.raises(boxmq.UnexpectedRequest):
                        getattr(late, answer)()
                assert files(root, "jobs", "error") == []
                taken.ack()
        assert len(files(root, "jobs", "processed")) == 1


def test_a_lock_extended_by_id_from_another_box_holds_in_its_holder_until_the_new_deadline(
    root: Path, clock: ManualClock
) -> None:
    """`boxmq extend q ID --consumer w1 --by 30s` from another process: the holder keeps the
    lock past its own deadline, and its answers find the file under its new name."""
    with (
        boxmq.open(root, fsync="never", clock=clock) as holder_box,
        boxmq.open(root, fsync="never", clock=clock) as cli_box,
    ):
        jobs, cli_jobs = holder_box.queue("jobs"), cli_box.queue("jobs")
        jobs.put(b"a")
        jobs.put(b"b")
        with jobs.consumer("w1", max_in_flight=1, lock_timeout=2) as w1:
            held = w1.receive_nowait()
            assert held is not None
            cli_jobs.extend(held.id, "w1", seconds=30)
            clock.advance(3)  # past the holder's own deadline, within the new one
            assert w1.receive_nowait() is None  # its one slot is still a's
            [locked] = [p.name for p in (root / "jobs" / "processing").iterdir()]
            assert split_lock(locked)[1] == Lock(
                ConsumerId("w1"), int((clock.now() + 27) * 1000), ANY
            )
            held.ack()
            other = w1.receive_nowait()
            assert other is not None
            cli_jobs.extend(other.id, "w1", seconds=30)  # before the holder's deadline:
            other.extend(10)  # its answers find the file under the name the extend gave it
            clock.advance(5)
            other.ack()
        assert jobs.counts().done == 2


def test_an_ack_finds_its_lock_renamed_by_an_extend_from_another_box(
    root: Path, clock: ManualClock
) -> None:
    """The ack right after `boxmq extend` by id from another process (no look at processing/
    between): the holder's first try misses its file, and it finds it under its new name."""
    with (
        boxmq.open(root, fsync="never", clock=clock, keep_processed=False) as holder_box,
        boxmq.open(root, fsync="never", clock=clock) as cli_box,
    ):
        jobs, cli_jobs = holder_box.queue("jobs"), cli_box.queue("jobs")
        jobs.put(b"a")
        with jobs.consumer("w1", max_in_flight=1, lock_timeout=2) as w1:
            held = w1.receive_nowait()
            assert held is not None
            cli_jobs.extend(held.id, "w1", seconds=30)
            held.ack()
        counts = jobs.counts()
        assert (counts.ready, counts.locked, counts.dead) == (0, 0, 0)


@pytest.mark.parametrize("seconds", [600, 0.5])
def test_a_message_locked_ahead_and_extended_by_id_is_still_received_by_its_consumer(
    root: Path, clock: ManualClock, seconds: float
) -> None:
    """`boxmq extend` by id of a message boxmq locked for a consumer ahead of its receive (it
    shows in processing/ with the consumer's name): the receive finds the file under the name
    the extend gave it, with the new deadline. It found no file, dropped the lock and handed
    out nothing, and the message sat in processing/ until the extension ran out. One whose
    extension ran out before the receive goes back as it was, for the next receive."""
    with (
        boxmq.open(root, fsync="never", clock=clock) as holder_box,
        boxmq.open(root, fsync="never", clock=clock) as cli_box,
    ):
        jobs, cli_jobs = holder_box.queue("jobs"), cli_box.queue("jobs")
        jobs.put(b"first")
        second = jobs.put(b"second")
        with jobs.consumer("w1", max_in_flight=2, lock_timeout=30) as w1:
            first = w1.receive_nowait()  # and the second is locked ahead for w1
            assert first is not None
            assert [p.holder for p in jobs.peek(state="processing")] == ["w1", "w1"]
            cli_jobs.extend(second, "w1", seconds=seconds)
            clock.advance(0.75)
            taken = w1.receive_nowait()
            assert taken is not None
            assert (taken.id, taken.body, taken.delivery_count) == (second, b"second", 1)
            assert taken.lock_deadline > clock.now()
            if seconds == 600:
                assert taken.lock_deadline == pytest.approx(clock.now() - 0.75 + 600, abs=0.001)
            assert w1.holding() == 2
            taken.ack()
            first.ack()
        assert jobs.counts().done == 2


def test_a_late_answer_after_another_box_took_the_message_says_the_lock_is_gone(
    root: Path, clock: ManualClock
) -> None:
    """w1 unlocked its message, and another process took it (`boxmq get`) and gave it back:
    w1's late answer through its old handle is UnexpectedRequest (its lock is gone), both while
    the other process holds the message and once it is back in target/. It was ItemNotFound,
    then Forbidden ("w1 did not receive this message")."""
    with (
        boxmq.open(root, fsync="never", clock=clock) as box,
        boxmq.open(root, fsync="never", clock=clock) as cli_box,
    ):
        jobs = box.queue("jobs")
        wanted = jobs.put(b"wanted", priority=9)
        jobs.put(b"later", priority=0)
        with jobs.consumer("w1", max_in_flight=1) as w1:
            first = w1.receive_nowait()
            assert first is not None
            assert first.id == wanted
            first.unlock()
            clock.advance(2)
            taken = cli_box.queue("jobs").get("cli")
            assert taken is not None
            assert taken.id == wanted
            later = w1.receive_nowait()  # w1 looks at the folder: the message left target/
            assert later is not None
            assert later.body == b"later"
            with pytest.raises(boxmq.UnexpectedRequest):
                first.ack()
            taken.unlock()
            assert w1.receive_nowait() is None  # w1 looks again: it is back, w1 is full
            for answer in (first.ack, first.unlock, first.reject, first.extend):
                with pytest.raises(boxmq.UnexpectedRequest):
                    answer()
            later.ack()
        assert jobs.counts().ready == 1


def test_a_message_another_box_took_and_gave_back_before_a_look_is_not_left_for_the_rescan(
    root: Path, clock: ManualClock
) -> None:
    """w unlocked its message; before w's Box looked at target/ again, another process took it
    (`boxmq get`) and gave it back under a new name. The Box still had the old name ready: its
    claim of it failed, and the new name waited behind it until the full rescan (5 s later),
    with w asking for it all along. Now the failed claim lets the new name be offered at once."""
    require_inotify(root.parent)  # w is told of the new name at once
    with (
        boxmq.open(root, fsync="never", clock=clock) as box,
        boxmq.open(root, fsync="never", clock=clock) as cli_box,
    ):
        jobs = box.queue("jobs")
        jobs.put(b"m")
        with jobs.consumer("w", max_in_flight=1, lock_timeout=30) as w:
            first = w.receive_nowait()
            assert first is not None
            first.unlock()
            taken = cli_box.queue("jobs").get("cli")
            assert taken is not None
            assert taken.id == first.id
            clock.advance(1.0)
            taken.unlock()
            clock.advance(1.0)
            again = w.receive_nowait()
            assert again is not None
            assert (again.id, again.delivery_count) == (first.id, 3)
            again.ack()


def test_a_message_another_box_took_from_an_unlock_and_gave_back_goes_to_the_first_at_once(
    root: Path, clock: ManualClock
) -> None:
    """A unlocks a message, B takes it and unlocks it in turn, all before A's watcher read
    the unlock's rename into target/ (a name that came and left between two reads is no
    news): A's consumer, no longer its last holder, must get it at once. A's engine kept
    the name of its own unlock, gone, with A's hand-off on it, so the name B gave back
    waited behind it: A's receive found nothing until the hand-off ended (1 s; never, the
    clock standing still)."""
    require_inotify(root.parent)
    with (
        boxmq.open(root, fsync="never", clock=clock) as a,
        boxmq.open(root, fsync="never", clock=clock) as b,
    ):
        a.queue("jobs").put(b"m")
        with (
            a.queue("jobs").consumer("a", lock_timeout=30) as a_consumer,
            b.queue("jobs").consumer("b", lock_timeout=30) as b_consumer,
        ):
            first = a_consumer.receive(timeout=5)
            assert first is not None
            first.unlock()
            second = b_consumer.receive(timeout=5)
            assert second is not None  # at once: A is its last holder
            second.unlock()
            third = a_consumer.receive(timeout=2)
            assert third is not None, "A waited out a hand-off that was no longer its own"
            assert third.delivery_count == 3
            third.ack()


def test_an_unlock_s_delay_and_delivery_count_hold_in_another_box(
    root: Path, clock: ManualClock
) -> None:
    """What concepts.md says holds across processes: a delayed unlock is not delivered by
    another box before its delay, and deliveries counted in two boxes add up to one
    max_deliveries (both open the root with the same)."""
    with (
        boxmq.open(root, fsync="never", clock=clock, max_deliveries=2) as a,
        boxmq.open(root, fsync="never", clock=clock, max_deliveries=2) as b,
    ):
        a.queue("jobs").put(b"m")
        with (
            a.queue("jobs").consumer("a", lock_timeout=30) as a_consumer,
            b.queue("jobs").consumer("b", lock_timeout=30) as b_consumer,
        ):
            first = a_consumer.receive(timeout=5)
            assert first is not None
            assert first.unlock(delay=5) is None
            assert b_consumer.receive(timeout=0.5) is None  # the clock stands still
            clock.advance(5)
            second = b_consumer.receive(timeout=5)
            assert second is not None
            assert second.delivery_count == 2
            assert second.unlock() == "max-deliveries"
            assert a_consumer.receive(timeout=0.5) is None
    assert files(root, "jobs", "target") == []
    [dead] = files(root, "jobs", "error")
    assert "bx_dcI=2" in dead


def test_a_message_every_consumer_of_one_box_declined_is_dead_though_another_box_has_one(
    root: Path,
) -> None:
    # concepts.md: a decline sends the message to error/ once every consumer of its process
    # declined it; a consumer of another process is not known there (it once said "every
    # consumer", as if those of other processes were waited for).
    with (
        boxmq.open(root, fsync="never") as declining,
        boxmq.open(root, fsync="never") as other,
        other.queue("jobs").consumer("b") as b,
        declining.queue("jobs").consumer("a") as a,
    ):
        assert b.receive_nowait() is None
        declining.queue("jobs").put(b"too large for a")
        message = a.receive(timeout=5)
        assert message is not None
        assert message.decline() == "too-large"
        assert b.receive_nowait() is None
        assert [p.dead for p in other.queue("jobs").peek(state="error")] == ["too-large"]


def test_an_answer_by_id_of_a_holder_before_the_last_is_forbidden_its_handle_unexpected(
    manual_box: boxmq.Box,
) -> None:
    # concepts.md: the name records the last holder only, so an answer by id of a consumer that
    # held the message before it is told Forbidden, as one that never received it; the holder's
    # own Message, whose lock ended, is told UnexpectedRequest.
    jobs = manual_box.queue("jobs")
    message_id = jobs.put(b"passed along")
    with jobs.consumer("a") as a, jobs.consumer("b") as b:
        first = a.receive_nowait()
        assert first is not None
        first.unlock()
        second = b.receive_nowait()
        assert second is not None
        second.unlock()  # its name now records b
        with pytest.raises(boxmq.UnexpectedRequest):
            first.ack()
        with pytest.raises(boxmq.Forbidden):
            jobs.ack(message_id, "a")
        assert jobs.counts().ready == 1
