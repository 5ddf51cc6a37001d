"""The sink's disk side (boxmq.spark.publish), without a JVM: staging, once-per-batch commits."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.crashes import Killed, kill_at, take_everything

import boxmq
from boxmq.errors import QueueNotFound
from boxmq.ids import IdFactory
from boxmq.model import TOPIC, Envelope, PropertyType
from boxmq.spark.publish import Destination, Publisher, ensure_queue, stage_dir, write_staged
from boxmq.store.commit import FsyncPolicy, Move
from boxmq.store.layout import queue_path
from boxmq.store.names import decode_lenient, encode


@pytest.fixture
def box(tmp_path: Path) -> Iterator[boxmq.Box]:
    with boxmq.open(tmp_path / "data", fsync="never") as opened:
        yield opened


def _stage(destination: Destination, job: str, batch: int, task: str, bodies: list[str]) -> str:
    folder = stage_dir(destination, job, batch, task)
    ids = IdFactory(boxmq.SystemClock())
    for body in bodies:
        envelope = Envelope(ids.new())
        if destination.queue is None:
            envelope = envelope.with_property(TOPIC, PropertyType.STRING, "alerts/t")
        assert write_staged(folder, encode(envelope), body.encode())
    return folder


def _bodies(box: boxmq.Box, queue: str) -> list[str]:
    return sorted(
        path.read_text() for path in Path(queue_path(box.root, queue), "target").iterdir()
    )


def test_a_batch_is_published_once_and_a_replay_publishes_nothing(box: boxmq.Box) -> None:
    destination = Destination(box.root, "out")
    ensure_queue(destination)
    publisher = Publisher(destination, FsyncPolicy.ALWAYS)
    first = [
        _stage(destination, "job", 0, "0-0", ["a", "b"]),
        _stage(destination, "job", 0, "1-0", ["c"]),
    ]

    assert publisher.commit("job", 0, first) == 3
    replay = [_stage(destination, "job", 0, "0-0", ["a", "b"])]  # Spark ran batch 0 again
    assert publisher.commit("job", 0, replay) == 0

    assert _bodies(box, "out") == ["a", "b", "c"]
    assert not os.path.exists(destination.staging("job"))  # every attempt's staging is gone
    assert box.queue("out").counts().uncommitted == 0


def test_a_commit_cut_short_is_finished_by_the_replay_from_its_own_files(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = Destination(box.root, "out")
    ensure_queue(destination)
    staged = [_stage(destination, "job", 3, "0-0", ["a", "b", "c", "d"])]
    real_apply = Move.apply
    calls = 0

    def crash_after_two(move: Move) -> None:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise SystemExit("the driver died here")
        real_apply(move)

    monkeypatch.setattr(Move, "apply", crash_after_two)
    with pytest.raises(SystemExit):
        Publisher(destination, FsyncPolicy.NEVER).commit("job", 3, staged)
    monkeypatch.setattr(Move, "apply", real_apply)
    assert len(_bodies(box, "out")) == 2

    # The replay's new attempt holds other copies of the same rows, under new ids.
    replay = [_stage(destination, "job", 3, "0-1", ["a", "b", "c", "d"])]
    assert Publisher(destination, FsyncPolicy.NEVER).commit("job", 3, replay) == 2
    assert _bodies(box, "out") == ["a", "b", "c", "d"]


def test_a_queue_deleted_under_a_running_sink_is_made_again_by_its_next_batch(
    box: boxmq.Box,
) -> None:
    """As a put makes a missing queue: the next batch's staging made out/working/ again, but
    its commit found no target/ and took that for "published before a crash", so it recorded
    the batch and deleted its messages (found by a Spark hunt)."""
    destination = Destination(box.root, "out")
    ensure_queue(destination)
    assert box.delete_queue("out")  # `boxmq delete out --force` between two batches
    staged = [_stage(destination, "job", 4, "0-0", ["a", "b"])]

    assert Publisher(destination, FsyncPolicy.NEVER).commit("job", 4, staged) == 2
    assert _bodies(box, "out") == ["a", "b"]


def test_a_batch_whose_staged_rows_were_deleted_with_the_queue_fails_and_its_replay_publishes(
    box: boxmq.Box,
) -> None:
    """The queue deleted between the tasks' staging (in its working/) and the driver's commit:
    the commit found no folder, published nothing and recorded the batch, whose rows the
    source then acknowledged: lost. It fails now, so the batch is run again (found by a Spark
    hunt)."""
    destination = Destination(box.root, "out")
    ensure_queue(destination)
    publisher = Publisher(destination, FsyncPolicy.NEVER)
    staged = [_stage(destination, "job", 2, "0-0", ["a", "b"])]
    assert box.delete_queue("out")  # `boxmq delete out --force` during the batch

    with pytest.raises(QueueNotFound, match=r"staged rows of batch 2 .* were deleted"):
        publisher.commit("job", 2, staged)
    again = [_stage(destination, "job", 2, "0-1", ["a", "b"])]  # Spark runs batch 2 again
    assert publisher.commit("job", 2, again) == 2
    assert _bodies(box, "out") == ["a", "b"]


def test_abort_drops_the_attempt_but_not_a_commit_in_progress(box: boxmq.Box) -> None:
    destination = Destination(box.root, "out")
    ensure_queue(destination)
    publisher = Publisher(destination, FsyncPolicy.NEVER)
    failed = _stage(destination, "job", 1, "0-0", ["a"])
    publisher.abort("job", 1, [failed])
    assert not os.path.exists(failed)
    assert publisher.commit("job", 1, [_stage(destination, "job", 1, "0-1", ["a"])]) == 1
    assert _bodies(box, "out") == ["a"]


def test_a_one_off_batch_write_keeps_no_books(box: boxmq.Box) -> None:
    destination = Destination(box.root, "out")
    ensure_queue(destination)
    folder = stage_dir(destination, "batch-1", None, "0-0")
    assert write_staged(folder, "4.x.T", b"hi")
    assert not write_staged(folder, "4.x.T", b"again")  # the caller draws another id
    assert Publisher(destination, FsyncPolicy.NEVER).commit("batch-1", None, [folder]) == 1
    assert not os.path.exists(os.path.join(box.root, ".spark", "sinks"))


def test_messages_to_a_topic_fan_out_to_every_matching_subscription(box: boxmq.Box) -> None:
    group = box.subscribe("$share/ops/alerts/#", "w1")
    durable = box.subscribe("alerts/+", "auditor")
    other = box.subscribe("sensors/#", "nobody")
    destination = Destination(box.root, None)
    folder = _stage(destination, "job", 0, "0-0", ["hot", "cold"])

    assert Publisher(destination, FsyncPolicy.ALWAYS).commit("job", 0, [folder]) == 2

    for subscriber in (group, durable):
        bodies = []
        for _ in range(2):
            message = subscriber.receive(timeout=20)  # committed: at once, but for a loaded disk
            assert message is not None
            assert message.envelope.topic == "alerts/t"
            bodies.append(message.body.decode())
            message.ack()
        assert sorted(bodies) == ["cold", "hot"]
    assert other.receive(timeout=0) is None
    for subscriber in (group, durable, other):
        subscriber.close()


# -- a driver killed at any point of a commit, then replayed ------------------------------------


def _ids(folders: list[str]) -> list[str]:
    return sorted(decode_lenient(name)[0].message_id for f in folders for name in os.listdir(f))


def _take_everything(dropboxes: list[str]) -> dict[str, list[str]]:
    """A consumer claims and acknowledges (deletes) every ready message: its ids per dropbox."""
    taken = take_everything(dropboxes).items()
    return {
        dropbox: [decode_lenient(name)[0].message_id for name in names] for dropbox, names in taken
    }


def _kill_take_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, topic: bool) -> int:
    """For each step of a commit in turn: kill the driver there, let a consumer take and
    acknowledge what was published so far, replay the batch (Spark's new attempt stages the
    same rows under new ids), and check that each dropbox got the messages of one attempt,
    each exactly once. Returns how many steps a commit takes."""
    step = 0
    while True:
        step += 1
        with boxmq.open(tmp_path / f"killed-at-{step}", fsync="never") as box:
            if topic:
                dropboxes = [
                    box.topics.attach_dropbox("$share/ops/alerts/#", "w1"),
                    box.topics.attach_dropbox("alerts/+", "auditor"),
                ]
                destination = Destination(box.root, None)
            else:
                destination = Destination(box.root, "out")
                ensure_queue(destination)
                dropboxes = [queue_path(box.root, "out")]
        first = [
            _stage(destination, "job", 3, "0-0", ["a", "b"]),
            _stage(destination, "job", 3, "1-0", ["c"]),
        ]
        attempts = [_ids(first)]
        with monkeypatch.context() as dying:
            kill_at(dying, step)
            try:
                Publisher(destination, FsyncPolicy.NEVER).commit("job", 3, first)
                killed = False
            except Killed:
                killed = True
        published = _take_everything(dropboxes)
        if killed:
            # A restarted driver numbers its tasks from 0 again: the same task name.
            replay = [_stage(destination, "job", 3, "0-0", ["a", "b", "c"])]
            attempts.append(_ids(replay))
            Publisher(destination, FsyncPolicy.NEVER).commit("job", 3, replay)
        for dropbox, ids in _take_everything(dropboxes).items():
            got = sorted(published[dropbox] + ids)
            assert got in attempts, f"killed at step {step}: {dropbox} got {got}"
            left = [files for _, _, files in os.walk(os.path.join(dropbox, "working")) if files]
            assert not left, f"killed at step {step}: {dropbox} still holds {left}"
        assert not os.path.exists(destination.staging("job"))
        if not killed:
            return step


def test_a_queue_gets_each_message_once_wherever_the_commit_was_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _kill_take_replay(tmp_path, monkeypatch, topic=False) > 3


def test_each_subscription_gets_each_message_once_wherever_the_commit_was_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _kill_take_replay(tmp_path, monkeypatch, topic=True) > 6
