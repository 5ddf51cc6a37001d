"""The "boxmq" sink in a real SparkSession: batch writes, topics, and replays publishing once."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.functions import expr, udf
from pyspark.sql.streaming.query import StreamingQuery
from tests.integration.test_cli import ok
from tests.waiting import waited

import boxmq
from boxmq.store.layout import queue_path
from boxmq.store.side_files import SIDE_DIR

Finish = Callable[[StreamingQuery], StreamingQuery]


@pytest.fixture
def root(tmp_path: Path) -> Iterator[str]:
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        yield box.root


def _ready(root: str, queue: str) -> list[boxmq.Envelope]:
    with boxmq.open(root) as box:
        return [peeked.envelope for peeked in box.queue(queue).peek()]


def _bodies(root: str, queue: str) -> list[str]:
    folder = Path(queue_path(root, queue), "target")
    return sorted(path.read_text() for path in folder.iterdir())


def test_a_batch_write_turns_rows_into_messages_with_their_metadata(
    spark: SparkSession, root: str
) -> None:
    frame = spark.createDataFrame(
        [("a", 9, {"k": "v"}, "c-1"), ("b", 1, None, None)],
        "body string, priority int, properties map<string,string>, correlation_id string",
    )
    frame.write.format("boxmq").option("root", root).option("queue", "out").mode("append").save()

    first, second = _ready(root, "out")  # peek gives delivery order: priority first
    assert (first.priority, first.correlation_id, first.user_properties()) == (9, "c-1", {"k": "v"})
    assert first.message_class is boxmq.MessageClass.TEXT
    assert (second.priority, second.properties) == (1, ())
    assert _bodies(root, "out") == ["a", "b"]
    assert not os.listdir(Path(queue_path(root, "out"), "working"))  # staging cleaned up


def test_properties_too_long_for_a_name_go_to_a_side_file_and_read_back_the_same(
    spark: SparkSession, root: str
) -> None:
    """As a put's (docs/file-format.md): a row read from a message whose properties came in a
    side file can be written back, to a queue and to a topic's subscriptions."""
    long = {"note": "y" * 300, "tenant": "acme"}
    with boxmq.open(root, fsync="never") as box:
        box.topics.attach_dropbox("alerts/#", "auditor")
    frame = spark.createDataFrame(
        [("a", long, "alerts/a"), ("b", {"k": "v"}, "alerts/b")],
        "body string, properties map<string,string>, topic string",
    )
    frame.write.format("boxmq").option("root", root).option("queue", "out").mode("append").save()
    frame.write.format("boxmq").option("root", root).mode("append").save()  # to the topics

    with boxmq.open(root) as box:
        got = {}
        while (message := box.queue("out").get()) is not None:
            got[message.text()] = message.properties
            message.ack()
    assert got == {"a": long, "b": {"k": "v"}}
    rows = (
        spark.read.format("boxmq")
        .option("root", root)
        .option("subscription", "alerts/#")
        .option("consumer", "auditor")
        .load()
        .collect()
    )
    assert {bytes(r.body): r.properties for r in rows} == {b"a": long, b"b": {"k": "v"}}
    assert len(os.listdir(Path(root, ".properties"))) == 1  # one side file, named by all


def test_a_topic_column_written_to_a_queue_is_not_the_messages_topic(
    spark: SparkSession, root: str
) -> None:
    """A subscription's rows piped into a queue: each row's topic was stored as the message's
    topic (bx_topic, which boxmq writes into a subscription's copies alone), so the queue read
    back with a topic where docs/spark.md says null, and hash-by-key dispatch grouped its
    messages by it. A queue takes them as `put` does, which gives no topic (found by reading
    messages.message_of against model.TOPIC)."""
    frame = spark.createDataFrame(
        [("a", "sensors/r1/temp", None), ("b", "sensors/r2/temp", {"JMSXGroupID": "r2"})],
        "body string, topic string, properties map<string,string>",
    )
    frame.write.format("boxmq").option("root", root).option("queue", "out").mode("append").save()

    ready = {
        envelope.user_properties().get("JMSXGroupID"): envelope for envelope in _ready(root, "out")
    }
    assert [envelope.topic for envelope in ready.values()] == [None, None]
    assert {key: envelope.group_key for key, envelope in ready.items()} == {None: None, "r2": "r2"}
    read = spark.read.format("boxmq").option("root", root).option("queue", "out").load()
    assert sorted((bytes(row.body), row.topic) for row in read.collect()) == [
        (b"a", None),
        (b"b", None),
    ]
    with boxmq.open(root) as box:
        message = box.queue("out").get()
        assert message is not None
        assert message.topic is None

    # What docs/spark.md says to write to keep it: a property of the row's own.
    kept = frame.selectExpr(
        "body", "map_concat(coalesce(properties, map()), map('topic', topic)) AS properties"
    )
    kept.write.format("boxmq").option("root", root).option("queue", "kept").mode("append").save()
    assert sorted(envelope.user_properties()["topic"] for envelope in _ready(root, "kept")) == [
        "sensors/r1/temp",
        "sensors/r2/temp",
    ]


def test_a_stream_to_a_topic_reaches_every_matching_subscription(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    with boxmq.open(root, fsync="never") as box:
        box.topics.attach_dropbox("$share/ops/alerts/#", "w1")
        box.topics.attach_dropbox("alerts/temperature", "auditor")
        box.queue("readings").put_many([b"20", b"31", b"35"])
    alerts = (
        spark.readStream.format("boxmq")
        .option("root", root)
        .option("queue", "readings")
        .load()
        .where("cast(cast(body AS string) AS int) > 30")
        .select("body", "properties")
    )
    query = (
        alerts.writeStream.format("boxmq")
        .option("root", root)
        .option("topic", "alerts/temperature")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)

    for subscription, reader in (("$share/ops/alerts/#", "w1"), ("alerts/temperature", "auditor")):
        rows = (
            spark.read.format("boxmq")
            .option("root", root)
            .option("subscription", subscription)
            .option("consumer", reader)
            .load()
            .collect()
        )
        assert sorted(bytes(r.body) for r in rows) == [b"31", b"35"]
        assert {r.topic for r in rows} == {"alerts/temperature"}


def test_a_replayed_batch_publishes_nothing_twice(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    for batch in range(3):
        lines = [json.dumps({"body": f"b{batch}-r{row}"}) for row in range(4)]
        (source / f"part-{batch}.json").write_text("\n".join(lines))
    checkpoint = tmp_path / "chk"

    def run() -> StreamingQuery:
        frame = spark.readStream.schema("body string").option("maxFilesPerTrigger", 1)
        query = (
            frame.json(str(source))
            .writeStream.format("boxmq")
            .option("root", root)
            .option("queue", "out")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        return finish(query)

    run()
    assert len(_bodies(root, "out")) == 12
    # What a crash between our commit and Spark's commit log leaves: batch 2 not in the log.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    replay = run()

    assert [p.batchId for p in replay.recentProgress if p.numInputRows] == [2]  # it ran again
    assert _bodies(root, "out") == sorted(f"b{b}-r{r}" for b in range(3) for r in range(4))


def test_a_sink_needs_a_body_column_and_appends_only(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    with boxmq.open(root) as box:
        box.queue("in").put("x")
    frame = spark.readStream.format("boxmq").option("root", root).option("queue", "in").load()

    def start(selected: str, mode: str) -> StreamingQuery:
        writer = frame.selectExpr(selected).writeStream.format("boxmq").outputMode(mode)
        writer = writer.trigger(availableNow=True)
        return (
            writer.option("root", root)
            .option("queue", "out")
            .start(
                checkpointLocation=str(tmp_path / f"chk-{selected}-{mode}"),
            )
        )

    with pytest.raises(Exception, match="need a 'body' column"):
        finish(start("priority", "append"))
    with pytest.raises(Exception, match="unknown column\\(s\\) value"):
        finish(start("message_id AS value", "append"))
    with pytest.raises(Exception, match="outputMode\\('complete'\\)"):
        finish(start("count(*) AS body", "complete"))
    # A batch write in mode("overwrite") once appended: the queue's earlier messages stayed.
    overwrite = spark.createDataFrame([("y",)], "body string").write.format("boxmq")
    with pytest.raises(Exception, match="mode\\('overwrite'\\) would not replace"):
        overwrite.option("root", root).option("queue", "out").mode("overwrite").save()
    assert not os.path.isdir(queue_path(root, "out"))
    # A map of booleans was written as Python's 'True': refused at save(), with the cast.
    flags = spark.createDataFrame([("y",)], "body string").selectExpr(
        "body", "map('ok', true) AS properties"
    )
    with pytest.raises(Exception, match="is map<string,boolean>; it must be map<string,string>"):
        flags.write.format("boxmq").option("root", root).option("queue", "out").mode(
            "append"
        ).save()
    assert not os.path.isdir(queue_path(root, "out"))
    # A topic option no message's name holds failed every row in the tasks: now save() names it
    too_long = spark.createDataFrame([("y",)], "body string").write.format("boxmq")
    with pytest.raises(Exception, match="option 'topic': the topic is too long"):
        too_long.option("root", root).option("topic", "a" * 80).mode("append").save()


def _staged_files(root: str, queue: str) -> list[str]:
    working = Path(queue_path(root, queue), "working")
    return sorted(str(path.relative_to(working)) for path in working.rglob("*") if path.is_file())


def test_a_sys_topic_is_refused_as_a_publish_refuses_it(spark: SparkSession, root: str) -> None:
    """`$SYS` topics are each `boxmq serve`'s own, which the API and `boxmq publish` refuse;
    the sink published there, and a `$SYS/#` subscriber got a user's row as the server's
    figure (found by the upgrade hunt: both writes below reached a `$SYS/#` subscription)."""
    with boxmq.open(root, fsync="never") as box:
        watcher = box.topics.attach_dropbox("$SYS/#", "watcher")
    row = spark.createDataFrame([("fake",)], "body string")
    with pytest.raises(Exception, match=r"option 'topic': .*\$SYS topics are the MQTT server's"):
        row.write.format("boxmq").option("root", root).option("topic", "$SYS/broker/version").mode(
            "append"
        ).save()
    # Where a column names each row's topic, the row that names a $SYS one fails the query.
    columns = spark.createDataFrame([("fake", "$SYS/broker/uptime")], "body string, topic string")
    with pytest.raises(Exception, match=r"boxmq sink: topic name '\$SYS/broker/uptime': \$SYS"):
        columns.write.format("boxmq").option("root", root).mode("append").save()
    assert os.listdir(Path(watcher, "target")) == []


def test_a_failed_write_leaves_no_staged_rows_behind(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    """A task that fails on a bad row has staged the rows before it, and Spark hands the abort
    no commit message of a failed task: a batch write's job is never run again, so its rows
    stayed in working/.spark/ for ever, which no sweep empties (found by a Spark hunt)."""
    rows = spark.createDataFrame([("a",), ("b",), (None,)], "body string").coalesce(1)
    with pytest.raises(Exception, match="null body"):
        rows.write.format("boxmq").option("root", root).option("queue", "out").mode("append").save()
    assert _staged_files(root, "out") == []
    assert not os.listdir(Path(queue_path(root, "out"), "target"))

    # A stream's batch that failed so is replayed by the restart on its checkpoint (here with
    # the bad row filtered out): its commit publishes each row once and drops every attempt.
    with boxmq.open(root) as box:
        for body in ("a", "b", "bad"):
            box.queue("in").put(body)
    stream = spark.readStream.format("boxmq").option("root", root).option("queue", "in").load()

    def run(selected: str) -> StreamingQuery:
        writer = stream.selectExpr(selected).coalesce(1).writeStream.format("boxmq")
        writer = writer.option("root", root).option("queue", "streamed")
        return writer.trigger(availableNow=True).start(checkpointLocation=str(tmp_path / "chk"))

    with pytest.raises(Exception, match="null body"):
        finish(run("IF(body = CAST('bad' AS BINARY), NULL, body) AS body"))
    finish(run("IF(body = CAST('bad' AS BINARY), CAST('fixed' AS BINARY), body) AS body"))
    assert _bodies(root, "streamed") == ["a", "b", "fixed"]
    assert _staged_files(root, "streamed") == []


def _failing_once_a_task_is_done(spark: SparkSession, go: Path) -> Any:
    """A UDF of a row's number giving its body, null for 3 (a bad row) once a task of the
    running stage is done: that task's commit message is then the abort's (a second's sleep
    was not always enough on a busy box). Released after 60 s anyway: the test fails then."""

    def body(number: int) -> str | None:
        if number == 3:
            while not go.exists():
                time.sleep(0.02)
            return None
        return str(number)

    def release() -> None:
        tracker = spark.sparkContext.statusTracker()

        def a_task_is_done() -> bool:
            stages = [tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds()]
            return any(stage is not None and stage.numCompletedTasks for stage in stages)

        waited(a_task_is_done, within=60, every=0.02)
        go.touch()

    threading.Thread(target=release, daemon=True).start()
    return udf(body, "string", useArrow=False)


def _side_files(root: str) -> list[str]:
    side = Path(root, SIDE_DIR)
    return sorted(os.listdir(side)) if side.exists() else []


def _long_properties() -> Any:
    """Properties too long for a name: each row's in a side file its staged file alone names."""
    return expr("map('trace', repeat(CAST(id AS STRING), 300))").alias("properties")


def test_an_aborted_write_leaves_no_side_file_named_by_nothing(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    """Rows whose properties do not fit in a name wrote side files; the job failed on a bad
    row of another task, and the abort deleted the staged files, the only ones naming them,
    which then waited for the hourly collection: the task that failed withdraws its own, the
    abort those of the tasks that succeeded (Spark hands it their commit messages)."""
    body = _failing_once_a_task_is_done(spark, tmp_path / "go")
    rows = spark.range(0, 4, 1, numPartitions=2).select(  # ids 0 and 1, then 2 and 3
        body("id").alias("body"), _long_properties()
    )
    with pytest.raises(Exception, match="null body"):
        rows.write.format("boxmq").option("root", root).option("queue", "out").mode("append").save()
    assert _staged_files(root, "out") == []
    assert _side_files(root) == []


def test_an_aborted_stream_batch_leaves_no_side_file_named_by_nothing(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    """The same for a stream's batch: the stream writer's abort withdraws the side files of
    the task that succeeded, whose staged folder it drops."""
    with boxmq.open(root) as box:
        for number in range(4):
            box.queue("in").put(str(number))
    # Two tasks, each reading a contiguous share: ids 0 and 1, then 2 and 3 (no shuffle,
    # whose stage's tasks done would release the bad row before a task of the write is).
    reader = spark.readStream.format("boxmq").option("root", root).option("queue", "in")
    stream = reader.option("numPartitions", 2).load()
    body = _failing_once_a_task_is_done(spark, tmp_path / "go")
    rows = stream.selectExpr("CAST(CAST(body AS STRING) AS BIGINT) AS id").select(
        body("id").alias("body"), _long_properties()
    )
    writer = rows.writeStream.format("boxmq").option("root", root).option("queue", "out")
    query = writer.trigger(availableNow=True).start(checkpointLocation=str(tmp_path / "chk"))
    with pytest.raises(Exception, match="null body"):
        finish(query)
    assert _staged_files(root, "out") == []
    assert _side_files(root) == []


@pytest.mark.parametrize(
    ("column", "selected"),
    [
        ("body", "CAST(X'FF41' AS STRING) AS body"),
        ("type", "'x' AS body, CAST(X'FF41' AS STRING) AS type"),
        ("properties", "'x' AS body, map('k', CAST(X'FF41' AS STRING)) AS properties"),
    ],
)
def test_a_string_column_that_is_not_utf8_fails_the_write_naming_it(
    spark: SparkSession, root: str, column: str, selected: str
) -> None:
    """Spark keeps a cast of bytes to string as it is; the write failed in the worker on a bare
    UnicodeDecodeError that named neither the column nor what to do."""
    frame = spark.sql(f"SELECT {selected}")
    with pytest.raises(Exception, match=rf"column '{column}' holds text that is not UTF-8"):
        frame.write.format("boxmq").option("root", root).option("queue", "out").mode(
            "append"
        ).save()
    assert _ready(root, "out") == []


def test_a_row_that_fails_every_replay_is_rejected_by_hand_and_the_restart_reads_the_rest(
    spark: SparkSession, root: str, tmp_path: Path, finish: Finish
) -> None:
    """A row the query cannot write fails its batch, and every replay of it: a replay reads what
    the plan numbered, and a claim's delivery count does not grow (no max_deliveries sends it to
    error/). docs/spark.md's way out: `boxmq reject` of that claim, under the holder `boxmq peek`
    shows; the restart then reads the batch's other messages, once."""
    with boxmq.open(root, fsync="never") as box:
        box.queue("in").put_many([b"ok1", b"bad\xff", b"ok2"])

    def run() -> StreamingQuery:
        stream = spark.readStream.format("boxmq").option("root", root).option("queue", "in")
        return finish(
            stream.load()
            .selectExpr("CAST(body AS STRING) AS body")  # the bad row's bytes stay as they are
            .writeStream.format("boxmq")
            .option("root", root)
            .option("queue", "out")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )

    for _ in range(2):  # the run, then its restart: the same batch fails again
        with pytest.raises(Exception, match="column 'body' holds text that is not UTF-8"):
            run()
    claims = json.loads(ok(Path(root), "--json", "peek", "in", "--state", "processing"))
    assert [claim["deliveries"] for claim in claims] == [1, 1, 1]
    [bad] = [claim for claim in claims if claim["bytes"] == len(b"bad\xff")]
    ok(Path(root), "reject", "in", bad["id"], "--consumer", bad["locked-by"])
    run()
    assert _bodies(root, "out") == ["ok1", "ok2"]
    assert _ready(root, "in") == []
