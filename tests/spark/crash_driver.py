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
exist (it is created just before). JVM_OPTIONS: the driver JVM's
spark.driver.defaultJavaOptions (jvm.JVM_OPTIONS).

The restart needs no driver of its own: the test imports this module and starts the same
stream, with a Crash that never kills, on the checkpoint the killed driver left, in its own
SparkSession (`start`). Run as a script, the classes below live in __main__; imported, they are
in a module the Python workers may not find: either way Spark pickles them by value.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.cloudpickle import register_pickle_by_value
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.functions import col, create_map, lit
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

import boxmq.spark
from boxmq.spark import claims
from boxmq.spark.options import sink_options
from boxmq.spark.sink import BoxMQStreamWriter, columns_of
from boxmq.spark.source import BoxMQDataSource

KILL_AT = 1  # the batch during which the driver dies
KILL_AT_ACK = 25  # "midack": the 20 messages of batch 0, then 5 of batch KILL_AT
KILL_AT_CHANGE = 6  # "midpublish": the unlink or rename of the sink's commit that never happens
_OPTION = "crash."  # the prefix of the options that carry a Crash, boxmq's own the others


@dataclasses.dataclass(frozen=True)
class Crash:
    """What the stream does besides boxmq's work: it appends each row it reads to `log`; with a
    `mode`, it also SIGKILLs the driver's process `group` at that mode's point, once."""

    log: str
    mode: str = ""  # none: this run never dies (the restart)
    marker: str = ""
    group: int = 0

    def options(self) -> dict[str, str]:
        return {_OPTION + field: str(value) for field, value in dataclasses.asdict(self).items()}

    @classmethod
    def of(cls, options: Mapping[str, str]) -> Crash:
        given = {key[len(_OPTION) :]: value for key, value in options.items()}
        return cls(given["log"], given["mode"], given["marker"], int(given["group"]))

    def dies_in(self, *modes: str) -> bool:
        return self.mode in modes

    def die_once(self, where: str) -> None:
        """SIGKILL the driver (its JVM included) and this worker's group, the first time only."""
        assert self.group > 0, "a Crash without a driver's group must never die: killpg(0) is us"
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, where.encode())
        os.close(fd)
        os.killpg(self.group, signal.SIGKILL)
        os.killpg(os.getpgid(0), signal.SIGKILL)  # the Python workers' own group (pyspark daemon)


def _batch() -> int:
    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context else None
    return -1 if value is None else int(value)


class LoggingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """boxmq's stream reader, noting every row it hands Spark (and dying mid-batch once)."""

    def __init__(self, inner: Any, crash: Crash) -> None:
        self.inner = inner
        self.crash = crash
        if crash.dies_in("midack"):  # this runs in the Python process that plans and acknowledges
            # The name claims.py looks up at each ack (imported there, not one of its exports).
            names = vars(claims)
            names["move_apart"] = _dying_at(names["move_apart"], [0], KILL_AT_ACK, crash, "ack")

    def initialOffset(self) -> dict[str, Any]:
        return dict(self.inner.initialOffset())

    def getDefaultReadLimit(self) -> ReadLimit:
        limit: ReadLimit = self.inner.getDefaultReadLimit()
        return limit

    def prepareForTriggerAvailableNow(self) -> None:
        self.inner.prepareForTriggerAvailableNow()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        end = dict(self.inner.latestOffset(start, limit))
        if self.crash.dies_in("midplan") and start["seq"] > 0 and end["seq"] > start["seq"]:
            self.crash.die_once("plan")  # batch 0 ended at seq 20 > 0: this is KILL_AT's plan
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
            with open(self.crash.log, "a") as log:
                log.write("".join(f"{batch} {message_id}\n" for message_id in ids))
            yield records
            if self.crash.dies_in("midbatch") and batch == KILL_AT:
                self.crash.die_once("read")


def _dying_at(real: Any, counter: list[int], at: int, crash: Crash, where: str) -> Any:
    """`real`, counting its calls in `counter` (shared by the functions it is given to):
    the `at`-th call dies (crash.die_once(where)) before it is made."""

    def call(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        if counter[0] == at:
            crash.die_once(where)
        return real(*args, **kwargs)

    return call


class CrashingWriter(BoxMQStreamWriter):
    def __init__(self, options: Any, columns: Sequence[tuple[str, str]], crash: Crash) -> None:
        super().__init__(options, columns)
        self.crash = crash

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.crash.dies_in("midpublish") and batchId == KILL_AT:
            counter = [0]
            unlink, rename = os.unlink, os.rename
            os.unlink = _dying_at(unlink, counter, KILL_AT_CHANGE, self.crash, "publish")
            os.rename = _dying_at(rename, counter, KILL_AT_CHANGE, self.crash, "publish")
            try:
                super().commit(messages, batchId)
            finally:
                os.unlink, os.rename = unlink, rename
            return
        super().commit(messages, batchId)  # published: the messages are in "out" now
        if self.crash.dies_in("publish", "topicpublish") and batchId == KILL_AT:
            self.crash.die_once("commit")


class CrashingSource(DataSource):
    """`format("boxmq_crash")`: boxmq's source and sink, with the Crash its options carry."""

    @classmethod
    def name(cls) -> str:
        return "boxmq_crash"

    def _boxmq(self) -> BoxMQDataSource:
        boxmq = {k: v for k, v in self.options.items() if not k.startswith(_OPTION)}
        return BoxMQDataSource(CaseInsensitiveDict(boxmq))

    def _crash(self) -> Crash:
        return Crash.of({k: v for k, v in self.options.items() if k.startswith(_OPTION)})

    def schema(self) -> StructType:
        return self._boxmq().schema()

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LoggingReader(self._boxmq().streamReader(schema), self._crash())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        names = frozenset(field.name for field in schema.fields)
        options = sink_options(self._boxmq().options, names)
        return CrashingWriter(options, columns_of(schema), self._crash())


def start(
    spark: SparkSession, mode: str, root: str, checkpoint: str, output: str, crash: Crash
) -> StreamingQuery:
    """Start MODE's stream (see the top) on `checkpoint`, in `spark`."""
    if __name__ != "__main__":  # imported by the test: its workers cannot import this module
        register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    spark.dataSource.register(CrashingSource)
    topics = mode == "topicpublish"
    stream = (
        spark.readStream.format("boxmq_crash")
        .options(**crash.options())
        .option("root", root)
        .option(*(("subscription", "$share/etl/in/#") if topics else ("queue", "in")))
        .option("maxRecordsPerTrigger", 20)
        .option("numPartitions", 2)
        .load()
    )
    if mode in ("publish", "topicpublish", "midplan", "midpublish", "midack"):
        # New ids for the copies, the original id in a property: a message published twice
        # would show as two messages, not hide behind one file name.
        copies = stream.select(col("body"), create_map(lit("source_id"), col("message_id")))
        writer = (
            copies.toDF("body", "properties")
            .writeStream.format("boxmq_crash")
            .options(**crash.options())
            .option("root", root)
            .option(*(("topic", "out/copy") if topics else ("queue", "out")))
        )
    else:
        writer = stream.select("message_id", "body").writeStream.format("parquet")
        writer = writer.option("path", output)
    return writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()


def main() -> None:
    mode, root, checkpoint, output, log, marker, jvm_options = sys.argv[1:8]
    jvm = {"spark.driver.defaultJavaOptions": jvm_options}
    spark = boxmq.spark.local_session("crash-driver", config=jvm)
    # The test starts this driver in a session of its own: its process group is the driver's.
    crash = Crash(log, mode, marker, os.getpgid(0))
    query = start(spark, mode, root, checkpoint, output, crash)
    query.awaitTermination(timeout=180)
    spark.stop()


if __name__ == "__main__":
    main()
