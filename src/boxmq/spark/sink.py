"""The "boxmq" sink: tasks stage rows as message files, the driver publishes them per batch.

`write` runs in executor workers: it learns its batch and query from the task's local
properties (Spark passes no batch id to it) and stages one file per row (publish.py). It takes
the rows as Arrow batches, not as PySpark's Rows: a Row's TIMESTAMP is naive local time, which
in the repeated hour of a zone with daylight saving cannot say which of the two it was. `commit`
runs on the driver, in a writer Spark makes afresh for every commit, so everything it needs
travels in the commit messages: the job (the query id, stable across restarts) and the folders.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    CharType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from boxmq.clock import SystemClock
from boxmq.errors import InvalidArgument
from boxmq.ids import IdFactory
from boxmq.model import TOPIC
from boxmq.spark import messages
from boxmq.spark.messages import Layout, layout_of, message_of
from boxmq.spark.options import SinkOptions
from boxmq.spark.publish import Destination, Publisher, ensure_queue, stage_dir, write_staged
from boxmq.spark.zones import SESSION_TIME_ZONE, session_zone
from boxmq.store.names import encode
from boxmq.store.side_files import Placed, SideFiles

__all__ = ["BoxMQBatchWriter", "BoxMQStreamWriter", "Staged", "columns_of"]


# The most side files a task tells the driver it made, for an abort to withdraw: a task of
# many rows of long properties, each its own file, would send a commit message as large as
# all their keys (the others wait for the hourly collection).
_MADE_TOLD = 10_000


@dataclass(frozen=True)
class Staged(WriterCommitMessage):
    """What one task staged: the folder, for the driver's commit; the side files it made
    (SideFiles.place), which only the folder's files name, for its abort."""

    job: str
    folder: str
    count: int
    made: tuple[Placed, ...] = ()


def _kind(data_type: DataType) -> str:
    if isinstance(data_type, BinaryType):
        return messages.BINARY
    if isinstance(data_type, StringType | VarcharType | CharType):
        return messages.STRING
    if isinstance(data_type, ByteType | ShortType | IntegerType | LongType):
        return messages.INTEGER
    if isinstance(data_type, TimestampType):
        return messages.TIMESTAMP
    if isinstance(data_type, TimestampNTZType):
        return messages.TIMESTAMP_NTZ
    # Map values are written as their str(): the text Spark's cast gives for strings and whole
    # numbers only ("b'hi'" for binary, 'True' for a boolean): the others must be cast.
    if (
        isinstance(data_type, MapType)
        and isinstance(data_type.keyType, StringType)
        and _kind(data_type.valueType) in (messages.STRING, messages.INTEGER)
    ):
        return messages.STRING_MAP
    return data_type.simpleString()


def columns_of(schema: StructType) -> list[tuple[str, str]]:
    return [(field.name, _kind(field.dataType)) for field in schema.fields]


class _Writer:
    """What the stream and the batch writer share: checks on the driver, staging in tasks."""

    def __init__(self, options: SinkOptions, columns: Sequence[tuple[str, str]]) -> None:
        self._layout: Layout = layout_of(columns, to_queue=options.queue is not None)
        self._topic = options.topic  # checked by sink_options: a topic name every row fits
        self._destination = Destination(options.root, options.queue)
        self._fsync = options.fsync
        ensure_queue(self._destination)

    def _stage(self, rows: Iterator[Sequence[object]], job: str, batch: int | None) -> Staged:
        context = TaskContext.get()
        task = "0-0" if context is None else f"{context.partitionId()}-{context.attemptNumber()}"
        folder = stage_dir(self._destination, job, batch, task)
        ids = IdFactory(SystemClock())
        side_files = SideFiles(self._destination.root)  # for properties too long for a name
        zone = None
        if self._layout.expiration_wall_clock and context is not None:
            zone = session_zone(context.getLocalProperty(SESSION_TIME_ZONE))
        count = 0
        made: list[Placed] = []  # the side files this task made, up to _MADE_TOLD
        placed: Placed | None = None  # the row's at hand, until its file is written
        try:
            for row in rows:
                envelope, body, placed = message_of(
                    row, self._layout, ids, self._topic, side_files, zone
                )
                if self._destination.queue is None and envelope.property_value(TOPIC) is None:
                    raise InvalidArgument("boxmq sink: a row has a null topic; it cannot be sent")
                # A generated id taken in this folder: draw another. A given id taken: it is
                # the same message twice in this task, and a message name is published once.
                while not write_staged(folder, encode(envelope), body):
                    if self._layout.message_id is not None and row[self._layout.message_id]:
                        break
                    envelope = replace(envelope, message_id=ids.new())
                count += 1
                if placed is not None and placed.made is not None and len(made) < _MADE_TOLD:
                    made.append(placed)
                placed = None
        except BaseException:
            # The task fails, and no commit publishes its folder (the abort, or the commit of
            # the attempt Spark runs again, deletes it): the side files it made, named by its
            # files alone (the row's own, its file refused by a full disk, and those of the
            # rows before a bad one), stayed named by nothing until the hourly collection.
            _withdraw(side_files, made if placed is None else [*made, placed])
            raise
        return Staged(job, folder, count, tuple(made))

    def _abort(self, job: str, batch: int | None, staged: Sequence[Staged]) -> None:
        """Drop the batch's staged folders, and withdraw the side files the tasks that
        succeeded made, which the files of the folders dropped alone named."""
        dropped = self._publisher().abort(job, batch, [m.folder for m in staged])
        side_files = SideFiles(self._destination.root)
        for message in staged:
            if message.folder in dropped:
                _withdraw(side_files, message.made)

    def _publisher(self) -> Publisher:
        return Publisher(self._destination, self._fsync)


def _withdraw(side_files: SideFiles, made: Sequence[Placed]) -> None:
    """SideFiles.withdraw's rules: a file a later put reused (a row of another task, a
    message from elsewhere, which names it) is kept."""
    for placed in made:
        side_files.withdraw(placed)


def _rows(batches: Iterator[pa.RecordBatch]) -> Iterator[Sequence[object]]:
    """The rows of `batches`, each its values in column order; a TIMESTAMP is an Instant,
    where PySpark's Rows give it as naive local time (astimezone().replace(tzinfo=None)):
    that cannot tell the two passes of the hour the clocks go back apart (a message due at
    the second 02:30 expired at the first, an hour early), ends at year 9999 (later ones
    failed on OverflowError), and needs the zone Spark names the values by, which may be one
    of Java's names Python does not know ("PST", "GMT-08", "Z": UnknownTimeZoneError).
    A map is a dict, as in a Row."""
    for batch in batches:
        columns = zip(batch.schema.names, batch.columns, strict=True)
        yield from zip(*(_values(name, column) for name, column in columns), strict=True)


_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}  # Spark's are "us"


def _values(name: str, column: pa.Array) -> list[object]:
    if pa.types.is_timestamp(column.type) and column.type.tz is not None:
        # The values are UTC instants, whatever zone the type names.
        unit = column.type.unit
        counts = column.view(pa.int64()).to_pylist()
        return [
            None
            if count is None
            else messages.Instant(count * _MICROS[unit] if unit in _MICROS else count // 1000)
            for count in counts
        ]
    try:
        values: list[object] = column.to_pylist(maps_as_pydicts="strict")
    except UnicodeDecodeError:
        # Spark keeps the bytes of a cast from binary to string as they are.
        fix = "keep it binary (no cast to string)" if name == "body" else "fix or drop them"
        raise InvalidArgument(
            f"boxmq sink: column {name!r} holds text that is not UTF-8, which a message "
            f"cannot carry as text: {fix}"
        ) from None
    return values


def _staged(messages: Sequence[WriterCommitMessage | None]) -> list[Staged]:
    return [message for message in messages if isinstance(message, Staged)]


class BoxMQStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """Exactly once per batch id: a replayed batch publishes nothing twice (publish.py)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        context = TaskContext.get()
        assert context is not None, "write() runs in a Spark task"
        job = context.getLocalProperty("sql.streaming.queryId")
        batch = context.getLocalProperty("streaming.sql.batchId")
        if not job or batch is None:
            raise RuntimeError("boxmq sink: Spark gave this task no query id or batch id")
        return self._stage(_rows(iterator), job, int(batch))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = _staged(messages)
        if staged:
            self._publisher().commit(staged[0].job, batchId, [m.folder for m in staged])

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = _staged(messages)
        if staged:
            self._abort(staged[0].job, batchId, staged)


class BoxMQBatchWriter(_Writer, DataSourceArrowWriter):
    """`df.write.format("boxmq")`: one job, published at its commit."""

    def __init__(self, options: SinkOptions, columns: Sequence[tuple[str, str]]) -> None:
        super().__init__(options, columns)
        self._job = f"batch-{uuid.uuid4().hex}"  # made on the driver, pickled to the tasks

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._stage(_rows(iterator), self._job, None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._publisher().commit(self._job, None, [m.folder for m in _staged(messages)])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(self._job, None, _staged(messages))
