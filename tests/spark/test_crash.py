"""Exactly once end to end: the driver SIGKILLed mid-stream, then restarted on its checkpoint.

Each test runs crash_driver.py in a process group of its own, which kills its whole driver (JVM
and Python workers) at the point under test; then the same stream, which never dies, restarts
on that checkpoint in the tests' SparkSession and completes (a new driver of its own each time
cost the tests as much again: a JVM, a session and the first batch's Python workers, about 25 s,
where the restart itself takes a few). The source alone is at-least-once (the log shows the
killed batch read twice, with exactly the same messages); with the idempotent boxmq sink, or
Parquet, every message is in the output exactly once. Killed in the middle of the sink's own
commit, with a consumer taking (and deleting) what was out before the restart, still none is
published twice.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from tests.spark.crash_driver import KILL_AT_ACK, Crash, start
from tests.spark.jvm import JVM_OPTIONS

import boxmq
from boxmq.model import MessageId
from boxmq.spark.options import subscription_dropbox
from boxmq.store.layout import queue_path
from boxmq.store.names import decode_lenient

# A driver run of half a minute and a restart here, the run bounded by RUN_SECONDS.
pytestmark = pytest.mark.timeout(600)

DRIVER = Path(__file__).with_name("crash_driver.py")
MESSAGES = 60  # 3 batches of 20; the driver dies in the second
RUN_SECONDS = 240
PATHS = ("data", "chk", "out")  # crash_driver's ROOT, CHECKPOINT and OUTPUT


def _run(mode: str, tmp_path: Path) -> int:
    arguments = [str(tmp_path / name) for name in (*PATHS, "read.log", "killed")]
    arguments.append(JVM_OPTIONS)
    with (tmp_path / "driver.log").open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, str(DRIVER), mode, *arguments],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            return process.wait(timeout=RUN_SECONDS)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever of the group is left
            process.wait()


def _kill(mode: str, tmp_path: Path) -> None:
    """The first run: a driver of its own, SIGKILLed at MODE's point."""
    first = _run(mode, tmp_path)
    log = (tmp_path / "driver.log").read_text(errors="replace")[-3000:]
    assert first == -signal.SIGKILL, f"the first run was to be killed; it ended {first}:\n{log}"


Restart = Callable[[str], StreamingQuery]


@pytest.fixture
def restart(
    tmp_path: Path, spark: SparkSession, finish: Callable[[StreamingQuery], StreamingQuery]
) -> Restart:
    """The second run: MODE's stream on the killed driver's checkpoint, in the tests' session,
    to its end (a failure of the query is raised as it was)."""

    def run(mode: str) -> StreamingQuery:
        root, checkpoint, output = (str(tmp_path / name) for name in PATHS)
        return finish(
            start(spark, mode, root, checkpoint, output, Crash(str(tmp_path / "read.log")))
        )

    return run


def _reads(tmp_path: Path) -> list[tuple[int, str]]:
    lines = (tmp_path / "read.log").read_text().splitlines()
    return [(int(line.split()[0]), line.split()[1]) for line in lines]


def _each_once(copies: Sequence[boxmq.Peeked], ids: Sequence[str]) -> None:
    """The sink's copies carry each source message's id once: none lost, none twice."""
    sources = collections.Counter(str(p.envelope.user_properties()["source_id"]) for p in copies)
    assert sorted(sources) == sorted(ids)  # every message once...
    assert set(sources.values()) == {1}  # ...and not one twice


def _crash_and_restart(
    mode: str, tmp_path: Path, restart: Restart, between: Callable[[], object] = lambda: None
) -> list[MessageId]:
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        ids = box.queue("in").put_many([f"reading {i}".encode() for i in range(MESSAGES)])
    _kill(mode, tmp_path)
    assert (tmp_path / "killed").exists()
    reads_before = len(_reads(tmp_path))
    between()
    restart(mode)

    reads = _reads(tmp_path)
    # At least once: every message was read; only the killed batch was read again, and its
    # replay read exactly what the killed run had planned (a subset of it, if killed mid-read).
    assert {message_id for _, message_id in reads} == set(ids)
    counts = collections.Counter(message_id for _, message_id in reads)
    again = {message_id for message_id, count in counts.items() if count > 1}
    killed_batch = {m for batch, m in reads[:reads_before] if batch == 1}
    replayed_batch = {m for batch, m in reads[reads_before:] if batch == 1}
    assert again == killed_batch
    assert killed_batch <= replayed_batch
    assert len(replayed_batch) == 20
    assert max(counts.values()) == 2
    # Everything acknowledged at the end: nothing left claimed or ready in the input.
    folder = queue_path(str(tmp_path / "data"), "in")
    assert len(os.listdir(os.path.join(folder, "processed"))) == MESSAGES
    return ids


def test_exactly_once_when_killed_between_the_sinks_publish_and_sparks_commit(
    tmp_path: Path, restart: Restart
) -> None:
    ids = _crash_and_restart("publish", tmp_path, restart)
    assert (tmp_path / "killed").read_text() == "commit"

    with boxmq.open(tmp_path / "data") as box:
        _each_once(box.queue("out").peek(), ids)


def test_exactly_once_when_killed_after_the_source_planned_a_batch_spark_never_logged(
    tmp_path: Path, restart: Restart
) -> None:
    """Killed in latestOffset once the plan of batch 1 is on disk, before Spark writes its
    offsets: the restart asks for batch 1 again and gets the messages the plan numbered."""
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        ids = box.queue("in").put_many([f"reading {i}".encode() for i in range(MESSAGES)])
    _kill("midplan", tmp_path)
    assert (tmp_path / "killed").read_text() == "plan"
    assert {batch for batch, _ in _reads(tmp_path)} == {0}  # batch 1 was never read
    restart("midplan")

    reads = collections.Counter(message_id for _, message_id in _reads(tmp_path))
    assert sorted(reads) == sorted(ids)
    assert set(reads.values()) == {1}  # nothing read twice: batch 1 ran once, after the restart
    folder = Path(queue_path(str(tmp_path / "data"), "in"))
    assert sorted(os.listdir(folder / "processing")) == []
    assert len(os.listdir(folder / "processed")) == MESSAGES
    with boxmq.open(tmp_path / "data") as box:
        _each_once(box.queue("out").peek(), ids)


def test_exactly_once_from_a_share_group_to_a_topic_when_killed_after_the_sinks_publish(
    tmp_path: Path, restart: Restart
) -> None:
    """As above, with the stream on a share group and the sink publishing to a topic: the
    claims live in the group's dropbox, the copies fan out to a subscription."""
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        box.topics.attach_dropbox("$share/etl/in/#", "spark")  # as the stream registers it
        box.topics.attach_dropbox("out/#", "collector")
        ids = [box.publish(f"in/{i % 3}", f"reading {i}") for i in range(MESSAGES)]
    _kill("topicpublish", tmp_path)
    assert (tmp_path / "killed").read_text() == "commit"
    restart("topicpublish")

    with boxmq.open(tmp_path / "data") as box:
        copies = box.subscription("out/#", "collector").peek()
        group = subscription_dropbox(box.root, "$share/etl/in/#", "spark")
    _each_once(copies, ids)
    assert {p.envelope.topic for p in copies} == {"out/copy"}
    left = [len(os.listdir(os.path.join(group, state))) for state in ("target", "processing")]
    assert left == [0, 0]  # the group's messages all acknowledged
    assert len(os.listdir(os.path.join(group, "processed"))) == MESSAGES


def test_exactly_once_when_killed_in_the_middle_of_the_sinks_publish(
    tmp_path: Path, restart: Restart
) -> None:
    taken: list[str] = []

    def consume() -> None:
        """A consumer takes and acknowledges (deletes) what the killed commit published."""
        target = Path(queue_path(str(tmp_path / "data"), "out"), "target")
        for path in target.iterdir():
            taken.append(str(decode_lenient(path.name)[0].user_properties()["source_id"]))
            path.unlink()

    ids = _crash_and_restart("midpublish", tmp_path, restart, consume)
    assert (tmp_path / "killed").read_text() == "publish"
    assert taken  # the kill came after some messages were out

    with boxmq.open(tmp_path / "data") as box:
        copies = box.queue("out").peek()
    rest = [str(p.envelope.user_properties()["source_id"]) for p in copies]
    sources = collections.Counter(taken + rest)
    assert sorted(sources) == sorted(ids)  # every message once...
    twice = sorted(source for source, count in sources.items() if count > 1)
    assert not twice, f"published twice: {twice}; taken {sorted(taken)}; rest {sorted(rest)}"


def test_exactly_once_and_nothing_left_claimed_when_killed_in_the_middle_of_the_acks(
    tmp_path: Path, restart: Restart
) -> None:
    """Killed between a batch's commit (sink and commit log) and the end of its acks: the
    restart does not replay the batch, so it must acknowledge the claims the killed run left
    in processing/, which would otherwise stay locked until lockTimeout (a day) and then be
    delivered again."""
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        ids = box.queue("in").put_many([f"reading {i}".encode() for i in range(MESSAGES)])
    _kill("midack", tmp_path)
    assert (tmp_path / "killed").read_text() == "ack"
    folder = Path(queue_path(str(tmp_path / "data"), "in"))
    assert len(os.listdir(folder / "processed")) == KILL_AT_ACK - 1  # killed half-way
    restart("midack")

    reads = collections.Counter(message_id for _, message_id in _reads(tmp_path))
    assert sorted(reads) == sorted(ids)
    assert set(reads.values()) == {1}  # the committed batch was not read again
    assert sorted(os.listdir(folder / "processing")) == []  # nothing left locked
    assert len(os.listdir(folder / "processed")) == MESSAGES
    with boxmq.open(tmp_path / "data") as box:
        _each_once(box.queue("out").peek(), ids)


def test_exactly_once_in_parquet_when_killed_mid_batch(
    tmp_path: Path, spark: SparkSession, restart: Restart
) -> None:
    ids = _crash_and_restart("midbatch", tmp_path, restart)
    assert (tmp_path / "killed").read_text() == "read"

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(row.message_id for row in rows) == sorted(ids)
    assert {bytes(row.body) for row in rows} == {f"reading {i}".encode() for i in range(MESSAGES)}
