"""A Spark driver for the crash tests: a boxmq stream that SIGKILLs its whole driver once.

    python crash_driver.py MODE ROOT CHECKPOINT OUTPUT LOG MARKER JVM_OPTIONS

MODE "publish": queue "in" → boxmq sink (queue "out"); the kill comes inside the sink's commit
of batch KILL_AT, after its messages are published and before Spark writes its commit log.
MODE "topicpublish": as "publish", from the share group "$share/etl/in/#" to the topic
"out/copy" (the test registers the member and a subscription "out/#" of "collector" first).
MODE "midplan": as "publish", but the kill comes when the source has planned batch KILL_AT
(its plan on disk) and before Spark logs its offsets: the restart plans that batch again.
MODE "midpublish": as "publish", but the kill comes in the middle of the sink's commit of
batch KILL_AT: at the sixth unlink or rename it makes, so some messages are out and others
still staged (with the old link-then-unlink publishing: just after a link, before its unlink).
MODE "midack": as "publish", but the kill comes in the middle of the source's acknowledgement
of batch KILL_AT, which Spark has committed (sink and commit log): at its KILL_AT_ACK-th move
processing/ → processed/ of the run, so some of the batch's messages are acknowledged and
the others still claimed.
MODE "midbatch": queue "in" → Parquet files in OUTPUT; the kill comes inside the source's
read() of batch KILL_AT, once some rows of it are out.

Every run appends "batch message_id" lines to LOG for each row the source hands Spark, so the
test sees which batch read what, in which run. The kill happens only while MARKER does not
exist (it is created just before), so the next run with the same checkpoint completes.
JVM_OPTIONS: the driver JVM's spark.driver.defaultJavaOptions (jvm.JVM_OPTIONS). The
classes below live in __main__, so Spark pickles them by value to its Python workers.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.functions import col, create_map, lit
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

import boxmq.spark
from boxmq.spark import claims
from boxmq.spark.options import sink_options
from boxmq.spark.sink import BoxMQStreamWriter, columns_of
from boxmq.spark.source import BoxMQDataSource

KILL_AT = 1  # the batch during which the driver dies
MODE, ROOT, CHECKPOINT, OUTPUT, LOG, MARKER, JVM_OPTIONS = sys.argv[1:8]
DRIVER_GROUP = os.getpgid(0)  # the test starts this driver in a session of its own


def _die_once(where: str) -> None:
    """SIGKILL the driver (its JVM included) and this worker's group, the first time only."""
    try:
        fd = os.open(MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, where.encode())
    os.close(fd)
    os.killpg(DRIVER_GROUP, signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)  # the Python workers' own group (pyspark daemon)


def _batch() -> int:
    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context else None
    return -1 if value is None else int(value)


class LoggingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """boxmq's stream reader, noting every row it hands Spark (and dying mid-batch once)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        if MODE == "midack":  # this runs in the Python process that plans and acknowledges
            # The name claims.py looks up at each ack (imported there, not one of its exports).
            names = vars(claims)
            names["move_apart"] = _dying_at(names["move_apart"], [0], KILL_AT_ACK, "ack")

    def initialOffset(self) -> dict[str, Any]:
        return dict(self.inner.initialOffset())

    def getDefaultReadLimit(self) -> ReadLimit:
        limit: ReadLimit = self.inner.getDefaultReadLimit()
        return limit

    def prepareForTriggerAvailableNow(self) -> None:
        self.inner.prepareForTriggerAvailableNow()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        end = dict(self.inner.latestOffset(start, limit))
        if MODE == "midplan" and start["seq"] > 0 and end["seq"] > start["seq"]:
            _die_once("plan")  # batch 0 ended at seq 20 > 0: this is KILL_AT's plan
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        partitions: Sequence[InputPartition] = self.inner.partitions(start, end)
        return partitions

    def commit(self, end: dict[str, Any]) -> None:
        self.inner.commit(end)

    def stop(self) -> None:
        self.inner.stop()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batch = _batch()
        for records in self.inner.read(partition):
            ids = records.column("message_id").to_pylist()
            with open(LOG, "a") as log:
                log.write("".join(f"{batch} {message_id}\n" for message_id in ids))
            yield records
            if MODE == "midbatch" and batch == KILL_AT:
                _die_once("read")


KILL_AT_ACK = 25  # "midack": the 20 messages of batch 0, then 5 of batch KILL_AT
KILL_AT_CHANGE = 6  # "midpublish": the unlink or rename of the sink's commit that never happens


def _dying_at(real: Any, counter: list[int], at: int, where: str) -> Any:
    """`real`, counting its calls in `counter` (shared by the functions it is given to):
    the `at`-th call dies (_die_once(where)) before it is made."""

    def call(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        if counter[0] == at:
            _die_once(where)
        return real(*args, **kwargs)

    return call


class CrashingWriter(BoxMQStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if MODE == "midpublish" and batchId == KILL_AT:
            counter = [0]
            unlink, rename = os.unlink, os.rename
            os.unlink = _dying_at(unlink, counter, KILL_AT_CHANGE, "publish")
            os.rename = _dying_at(rename, counter, KILL_AT_CHANGE, "publish")
            try:
                super().commit(messages, batchId)
            finally:
                os.unlink, os.rename = unlink, rename
            return
        super().commit(messages, batchId)  # published: the messages are in "out" now
        if MODE in ("publish", "topicpublish") and batchId == KILL_AT:
            _die_once("commit")


class CrashingSource(BoxMQDataSource):
    @classmethod
    def name(cls) -> str:
        return "boxmq_crash"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LoggingReader(super().streamReader(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        names = frozenset(field.name for field in schema.fields)
        return CrashingWriter(sink_options(self.options, names), columns_of(schema))


def main() -> None:
    jvm = {"spark.driver.defaultJavaOptions": JVM_OPTIONS}
    spark = boxmq.spark.local_session("crash-driver", config=jvm)
    spark.dataSource.register(CrashingSource)
    topics = MODE == "topicpublish"
    stream = (
        spark.readStream.format("boxmq_crash")
        .option("root", ROOT)
        .option(*(("subscription", "$share/etl/in/#") if topics else ("queue", "in")))
        .option("maxRecordsPerTrigger", 20)
        .option("numPartitions", 2)
        .load()
    )
    if MODE in ("publish", "topicpublish", "midplan", "midpublish", "midack"):
        # New ids for the copies, the original id in a property: a message published twice
        # would show as two messages, not hide behind one file name.
        copies = stream.select(col("body"), create_map(lit("source_id"), col("message_id")))
        writer = (
            copies.toDF("body", "properties")
            .writeStream.format("boxmq_crash")
            .option("root", ROOT)
            .option(*(("topic", "out/copy") if topics else ("queue", "out")))
        )
    else:
        writer = stream.select("message_id", "body").writeStream.format("parquet")
        writer = writer.option("path", OUTPUT)
    query = writer.option("checkpointLocation", CHECKPOINT).trigger(availableNow=True).start()
    query.awaitTermination(timeout=180)
    spark.stop()


if __name__ == "__main__":
    main()
