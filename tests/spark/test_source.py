"""The "boxmq" source in a real SparkSession: the batch reader of each state, and the stream."""

from __future__ import annotations

import base64
import datetime
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from tests.spark.jvm import JVM_OPTIONS

import boxmq
import boxmq.spark
from boxmq.clock import ManualClock
from boxmq.model import PROPERTIES_FILE, V5_PROPERTIES, Envelope, MessageId, Property, PropertyType
from boxmq.mqtt.properties import Properties
from boxmq.spark import COLUMNS
from boxmq.spark.claims import Budget, Claims
from boxmq.spark.session import _cores
from boxmq.spark.source import STRUCT, BoxMQDataSource, FilesPartition, _split
from boxmq.store.layout import queue_path
from boxmq.store.names import encode
from boxmq.store.side_files import SideFiles

Finish = Callable[[StreamingQuery], StreamingQuery]
NOW = 1_800_000_000.0
STATES = ("target", "processing")


@pytest.fixture
def root(tmp_path: Path) -> Iterator[str]:
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        yield box.root


def _read(spark: SparkSession, root: str, **options: str) -> DataFrame:
    return spark.read.format("boxmq").option("root", root).options(**options).load()


def _stream(spark: SparkSession, root: str, **options: str) -> DataFrame:
    return spark.readStream.format("boxmq").option("root", root).options(**options).load()


def _to_memory(frame: DataFrame, checkpoint: Path) -> tuple[StreamingQuery, str]:
    table = f"t_{uuid.uuid4().hex}"
    query = (
        frame.writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    return query, table


def _count(root: str, queue: str, state: str) -> int:
    return len(os.listdir(os.path.join(queue_path(root, queue), state)))


# -- the batch reader ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One queue with messages in every state a message can rest in."""
    clock = ManualClock(NOW)
    with boxmq.open(tmp_path_factory.mktemp("states"), fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put("old", expires_in=1)
        for body in ("locked", "done", "dead"):
            jobs.put(body)
        clock.advance(2)
        box.sweep()  # "old" expires
        for verb in ("locked", "done", "dead"):
            message = jobs.get("worker")
            assert message is not None
            assert message.body.decode() == verb
            if verb == "done":
                jobs.ack(message.envelope.message_id, "worker")
            elif verb == "dead":
                jobs.reject(message.envelope.message_id, "worker")
        jobs.put_many([b"ready-1", b"ready-2"])
        yield box.root


@pytest.mark.parametrize(
    ("state", "bodies", "deliveries"),
    [
        ("target", [b"ready-1", b"ready-2"], 0),
        ("processing", [b"locked"], 1),
        ("processed", [b"done"], 1),
        ("error", [b"dead"], 1),
        ("expired", [b"old"], 0),
        ("routing", [], 0),  # empty
    ],
)
def test_the_batch_reader_reads_any_state_folder(
    spark: SparkSession, states: str, state: str, bodies: list[bytes], deliveries: int
) -> None:
    rows = _read(spark, states, queue="jobs", state=state).collect()

    assert sorted(bytes(row.body) for row in rows) == bodies
    assert {row.destination for row in rows} <= {"jobs"}
    assert {row.delivery_count for row in rows} <= {deliveries}


def test_a_row_is_the_whole_message(spark: SparkSession, root: str) -> None:
    with boxmq.open(root) as box:
        message_id = box.queue("q").put(
            "21.5",
            priority=7,
            properties={"sensor": "s1", "count": 3, "ok": True, "ratio": 0.5},
            expires_in=3600,
            correlation_id="c-1",
            reply_to="replies",
            type="reading",
        )
    frame = _read(spark, root, queue="q")
    [row] = frame.collect()

    assert frame.columns == list(COLUMNS)
    assert row.message_id == message_id
    assert (row.priority, row["class"], row.topic) == (7, "T", None)
    assert (row.correlation_id, row.reply_to, row.type) == ("c-1", "replies", "reading")
    assert row.properties == {"sensor": "s1", "count": "3", "ok": "true", "ratio": "0.5"}
    assert bytes(row.body) == b"21.5"
    stamp = int(message_id[:16]) // 1000
    assert row.timestamp == datetime.datetime.fromtimestamp(stamp / 1000)
    assert 3599 < (row.expiration - row.timestamp).total_seconds() < 3601


def test_a_file_dropped_by_a_script_is_a_message_with_default_metadata(
    spark: SparkSession, root: str
) -> None:
    with boxmq.open(root) as box:
        box.queue("q")
    Path(queue_path(root, "q"), "target", "not-a-boxmq-name").write_bytes(b"hi")

    [row] = _read(spark, root, queue="q").collect()

    assert (row.message_id, row.priority, row["class"], bytes(row.body)) == (
        "not-a-boxmq-name",
        4,
        "B",
        b"hi",
    )
    assert row.timestamp is not None  # the file's mtime


def test_an_expiration_past_what_a_spark_timestamp_holds_reads_as_never(
    spark: SparkSession, root: str
) -> None:
    """A name may carry any expiration up to Java's Long.MAX_VALUE ms; in microseconds, a
    Spark timestamp's unit, one past year 294247 overflowed, and the read failed on
    OverflowError: a batch read, and every retry of a stream's batch, so it never got past."""
    with boxmq.open(root) as box:
        box.queue("q")
    target = Path(queue_path(root, "q"), "target")
    for expiration, body in (
        (2**63 - 1, b"max"),
        (10**17, b"far"),
        (9_223_372_036_854_775, b"top"),
    ):
        name = encode(
            Envelope(MessageId(f"1795335668836000-{len(body)}{body[0]}"), expiration=expiration)
        )
        (target / name).write_bytes(body)

    rows = _read(spark, root, queue="q").selectExpr("body", "unix_millis(expiration) AS ms")

    assert {bytes(row.body): row.ms for row in rows.collect()} == {
        b"max": None,
        b"far": None,
        b"top": 9_223_372_036_854_775,  # the last millisecond a timestamp holds: kept
    }


def test_tasks_share_a_batch_in_contiguous_chunks() -> None:
    names = [f"n{i}" for i in range(7)]
    assert [list(chunk) for chunk in _split(names, 3)] == [names[:3], names[3:5], names[5:]]
    assert _split(names[:1], 4) == [names[:1]]
    assert repr(FilesPartition("/d", names, "q", "target")) == "FilesPartition('/d', 7 files)"


def test_a_state_folder_the_queue_lacks_or_lost_reads_as_empty(root: str) -> None:
    """As every boxmq reader finds it (Dropbox.scan): DropboxMQ's target/ alone makes a queue,
    and `rm -rf q/processed` clears what was consumed (docs/operations.md); a batch read of
    it failed with FileNotFoundError, at planning, or in the task when the queue was deleted
    after planning (found by a Spark hunt). No JVM: the reader's own methods."""
    with boxmq.open(root) as box:
        box.queue("q").put("a")
    shutil.rmtree(Path(queue_path(root, "q"), "processed"))
    reader = BoxMQDataSource({"root": root, "queue": "q", "state": "processed"}).reader(STRUCT)
    assert [list(reader.read(p)) for p in reader.partitions()] == [[]]

    reader = BoxMQDataSource({"root": root, "queue": "q"}).reader(STRUCT)
    partitions = reader.partitions()  # planned: one message in target/
    with boxmq.open(root) as box:
        assert box.delete_queue("q")
    assert [list(reader.read(p)) for p in partitions] == [[]]


# -- the stream ----------------------------------------------------------------------------------


def test_the_stream_reads_by_priority_in_batches_and_acknowledges_everything(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    with boxmq.open(root, fsync="never") as box:
        box.queue("q").put_many(
            [boxmq.Outgoing(f"m{i}", priority=9 if i % 5 == 0 else 4) for i in range(25)]
        )
    frame = _stream(spark, root, queue="q", maxRecordsPerTrigger="10", numPartitions="2")
    query, table = _to_memory(frame, tmp_path / "chk")
    finish(query)

    assert [p.numInputRows for p in query.recentProgress if p.numInputRows] == [10, 10, 5]
    rows = spark.table(table).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(f"m{i}".encode() for i in range(25))
    first_batch = {bytes(r.body) for r in rows[:10]}
    assert {f"m{i}".encode() for i in range(0, 25, 5)} <= first_batch  # priority 9 first
    assert {r.delivery_count for r in rows} == {1}
    # Spark never commits the last batch; the source acknowledges it when asked for more.
    assert (_count(root, "q", "target"), _count(root, "q", "processing")) == (0, 0)
    assert _count(root, "q", "processed") == 25


def test_the_drivers_log_says_how_many_messages_expired_before_the_stream_took_them(
    root: str, tmp_path: Path
) -> None:
    # Put a minute ago, for a second: expired whenever the driver gets to it.
    with boxmq.open(root, fsync="never", clock=ManualClock(time.time() - 60)) as box:
        box.queue("in").put("stale", expires_in=1)
        box.queue("in").put("fresh")
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("log_driver.py")),
            root,
            str(tmp_path / "chk"),
            JVM_OPTIONS,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (_count(root, "in", "expired"), _count(root, "out", "target")) == (1, 1)
    # Where Spark's own lines go, without the script configuring any logging.
    queue = os.path.realpath(queue_path(root, "in"))
    said = (
        f"INFO boxmq: {queue}: 1 message(s) expired before a consumer took them: moved to expired/"
    )
    assert said in done.stderr, done.stderr[-3000:]


def test_a_byte_budget_bounds_each_batch_and_with_a_row_budget_the_first_reached_does(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    cases = {"bytes": None, "rows-first": "1", "bytes-first": "5"}  # maxRecordsPerTrigger
    with boxmq.open(root, fsync="never") as box:
        for queue in cases:
            box.queue(queue).put_many([b"x" * 100] * 6)
    for queue, rows in cases.items():
        limits = {"maxBytesPerTrigger": "250"} | ({"maxRecordsPerTrigger": rows} if rows else {})
        query, _ = _to_memory(_stream(spark, root, queue=queue, **limits), tmp_path / queue)
        finish(query)
        batches = [p.numInputRows for p in query.recentProgress if p.numInputRows]
        assert batches == ([1] * 6 if queue == "rows-first" else [2, 2, 2]), queue


def test_a_stream_on_a_share_group_registers_its_member_and_reads_the_topics(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    subscription = "$share/etl/sensors/#"
    frame = _stream(spark, root, subscription=subscription, consumer="spark-1")
    first, _ = _to_memory(frame, tmp_path / "chk")
    finish(first)  # nothing yet; but now the group exists and publishers route to it

    with boxmq.open(root, fsync="never") as box:
        for topic in ("sensors/a", "sensors/b", "other/c"):
            box.publish(topic, f"from {topic}")
    again, table = _to_memory(frame, tmp_path / "chk2")  # the memory sink cannot resume
    finish(again)

    rows = spark.table(table).collect()
    assert sorted((r.topic, bytes(r.body)) for r in rows) == [
        ("sensors/a", b"from sensors/a"),
        ("sensors/b", b"from sensors/b"),
    ]
    assert {r.destination for r in rows} == {subscription}
    batch = _read(spark, root, subscription=subscription, state="processed").collect()
    assert len(batch) == 2


# -- errors the user sees ------------------------------------------------------------------------


def test_a_missing_root_or_queue_fails_at_load_with_what_to_fix(
    spark: SparkSession, root: str
) -> None:
    with pytest.raises(Exception, match="is not a folder; check the path"):
        _read(spark, root + "-typo", queue="q")
    with pytest.raises(Exception, match="no queue 'nope' under"):
        _stream(spark, root, queue="nope")
    with pytest.raises(Exception, match=r"unknown option.*did you mean 'maxRecordsPerTrigger'"):
        _read(spark, root, queue="nope", maxRecordPerTrigger="5")
    # A value a stream refuses: at load() too, not once the query runs (found by a Spark hunt)
    with pytest.raises(Exception, match="option 'lockTimeout' is '0'; give a positive"):
        _stream(spark, root, queue="nope", lockTimeout="0")


def test_an_option_given_twice_in_any_case_counts_as_given_last(
    spark: SparkSession, root: str
) -> None:
    # Spark keeps one value per name, whatever its case: the source never sees the first one.
    with boxmq.open(root) as box:
        box.queue("q").put("x")
    reader = spark.read.format("boxmq").option("root", root).option("queue", "nope")
    rows = reader.option("QUEUE", "q").option("state", "error").option("State", "target").load()
    assert [bytes(row.body) for row in rows.collect()] == [b"x"]


def test_a_bad_stream_option_fails_the_query_with_what_to_fix(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    with boxmq.open(root) as box:
        box.queue("q")
    frame = _stream(spark, root, queue="q", state="processed")
    with pytest.raises(Exception, match="'state' is for a batch read"):
        finish(_to_memory(frame, tmp_path / "chk")[0])


def test_a_schema_cannot_be_imposed(spark: SparkSession, root: str) -> None:
    with boxmq.open(root) as box:
        box.queue("q")
    reader = spark.read.format("boxmq").schema("body binary").option("root", root)
    with pytest.raises(Exception, match="the schema is fixed"):
        reader.option("queue", "q").load().collect()


def test_register_finds_the_active_session(spark: SparkSession) -> None:
    # What `import boxmq.spark` does when a session is already running.
    assert boxmq.spark.register() is spark
    assert spark.read.format("BoxMQ") is not None  # the short name, in any case


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local[3]", 3), ("local[3,2]", 3), ("local", 1), ("local[*]", os.cpu_count())],
)
def test_a_local_session_shuffles_into_as_many_partitions_as_its_master_has_cores(
    master: str, cores: int
) -> None:
    # Spark runs `local` in one thread and `local[*]` in one per core; both were taken as 2.
    assert _cores(master) == cores


def test_the_properties_of_an_mqtt_v5_message_are_read_decoded(
    spark: SparkSession, root: str
) -> None:
    # MQTT v5 properties as the MQTT door stores them: in the name when short, else in a side
    # file of the root (store/v5_properties.py). A Spark job sees what the publisher set.
    short = Properties.build(user_properties=[("tenant", "acme")], content_type="text/csv")
    long = Properties.build(
        user_properties=[("trace", "t" * 80)], response_topic="r/7", correlation_data=b"req-7"
    )
    inline = base64.urlsafe_b64encode(short.raw).decode().rstrip("=")
    key = SideFiles(root).put(long.raw)
    with boxmq.open(root) as box:
        box.queue("q")
    for id_, name, value in (("1", V5_PROPERTIES, inline), ("2", PROPERTIES_FILE, key)):
        own = (Property(name, PropertyType.STRING, value),)
        envelope = Envelope(MessageId(id_), properties=own)
        Path(queue_path(root, "q"), "target", encode(envelope)).write_bytes(b"{}")

    rows = sorted(_read(spark, root, queue="q").collect(), key=lambda row: row.message_id)

    assert [row.properties for row in rows] == [
        {"mqtt.content-type": "text/csv", "tenant": "acme"},
        {"mqtt.response-topic": "r/7", "mqtt.correlation-data": "cmVxLTc=", "trace": "t" * 80},
    ]
    # An MQTT v5 request's Response Topic and Correlation Data, as `Message` shows them.
    assert [(row.reply_to, row.correlation_id) for row in rows] == [(None, None), ("r/7", "req-7")]


def test_a_checkpoint_of_another_queue_is_refused_and_loses_nothing(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    with boxmq.open(root, fsync="never") as box:
        box.queue("a").put_many([f"a{i}".encode() for i in range(5)])
        box.queue("b").put_many([f"b{i}".encode() for i in range(3)])
    # A query on b planned and claimed a batch, then its driver died (nothing acknowledged).
    killed = Claims(root, queue_path(root, "b"), "spark", lock_timeout=86_400.0, flush=False)
    end = killed.next_end(0, Budget())
    for claim in killed.between(0, end):
        target, processing = (os.path.join(queue_path(root, "b"), s) for s in STATES)
        os.rename(os.path.join(target, claim.name), os.path.join(processing, claim.locked))
    killed.close()

    def parquet(queue: str) -> StreamingQuery:
        frame = _stream(spark, root, queue=queue).select("message_id", "body")
        writer = frame.writeStream.format("parquet").option("path", str(tmp_path / queue))
        writer = writer.option("checkpointLocation", str(tmp_path / "chk"))
        return writer.trigger(availableNow=True).start()

    finish(parquet("a"))  # the checkpoint's offsets are a's numbers, up to 5
    # Reused for b, its 5 acknowledged b's three claims (numbers 1-3) unread: lost.
    with pytest.raises(Exception, match=r"checkpoint.*queue 'a'.*new checkpointLocation"):
        finish(parquet("b"))
    assert _count(root, "b", "processing") == 3
    assert _count(root, "b", "processed") == 0
