"""The "boxmq" data source: a stream reader that claims, a batch reader of any state folder.

Where each method runs (research note §3): `schema`, `reader`, `partitions` (batch) in short
planning workers; the stream reader's offset methods in one long-lived runner process per query;
`read` in executor workers, on a copy of the reader pickled at planning time. So `read` only
uses what its partition carries, and every piece of driver-side state the stream needs is on
disk (claims.py): nothing is lost when the runner is killed with the whole driver.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import boxmq
from boxmq import log_lines
from boxmq.errors import InvalidArgument
from boxmq.spark.claims import Budget, Claims
from boxmq.spark.options import (
    BatchReadOptions,
    StreamReadOptions,
    batch_read_options,
    check_read,
    sink_options,
    stream_read_options,
)
from boxmq.spark.records import FIELDS, FileRef, read_files
from boxmq.spark.sink import BoxMQBatchWriter, BoxMQStreamWriter, columns_of
from boxmq.store.commit import FsyncPolicy
from boxmq.store.layout import State

__all__ = ["STRUCT", "BoxMQDataSource", "FilesPartition"]

_T = TypeVar("_T")
_CHUNK = 10_000  # rows per Arrow batch: Spark's own spark.sql.execution.arrow.maxRecordsPerBatch


class FilesPartition(InputPartition):
    """One Spark task's share of a batch: message files in one folder (pickled to the task)."""

    def __init__(
        self,
        directory: str,
        names: Sequence[str],
        destination: str,
        state: str,
        claims: Sequence[str] | None = None,
        claim_from: str | None = None,
        root: str | None = None,
    ):
        super().__init__(len(names))
        self.directory = directory
        self.names = tuple(names)
        self.destination = destination
        self.state = state
        # A stream's batch: names[i] is the locked name of claims[i], claimed by the task from
        # claim_from (target/) before it reads (plans.py).
        self.claims = None if claims is None else tuple(claims)
        self.claim_from = claim_from
        self.root = root  # where the side files of MQTT v5 properties are

    def __repr__(self) -> str:  # the base repr would print every name
        return f"FilesPartition({self.directory!r}, {len(self.names)} files)"


def _split(names: Sequence[_T], parts: int) -> list[Sequence[_T]]:
    """Contiguous, nearly equal chunks, none empty: one per task."""
    parts = max(1, min(parts, len(names)))
    size, extra = divmod(len(names), parts)
    chunks, start = [], 0
    for index in range(parts):
        end = start + size + (index < extra)
        chunks.append(names[start:end])
        start = end
    return [chunk for chunk in chunks if chunk]


def _read(partition: InputPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    """The rows of a FilesPartition, as Arrow batches matching `schema` exactly."""
    if not isinstance(partition, FilesPartition):
        raise TypeError(f"boxmq source: unexpected partition {partition!r}")
    arrow = to_arrow_schema(schema, timezone="UTC")
    directory = partition.directory
    if partition.claims is None:
        files = [FileRef(directory, name) for name in partition.names]
    else:
        source = partition.claim_from
        pairs = zip(partition.names, partition.claims, strict=True)
        files = [FileRef(directory, locked, name, source) for locked, name in pairs]
    state = State(partition.state)
    root = partition.root
    for columns in read_files(files, partition.destination, state, chunk=_CHUNK, root=root):
        arrays = [
            pa.array(values, type=field.type)
            for values, field in zip(columns.values, arrow, strict=True)
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow)


class _BatchReader(DataSourceReader):
    def __init__(self, options: BatchReadOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        # Listed once, when the DataFrame is made: re-create it to see later files (§7.8).
        directory = os.path.join(self._options.dropbox, self._options.state.value)
        try:
            with os.scandir(directory) as entries:
                names = sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
        except FileNotFoundError:  # a folder nobody made yet, or deleted: holds nothing
            names = []
        chunks = _split(names, self._options.num_partitions)
        state = self._options.state.value
        destination, root = self._options.destination, self._options.root
        return [
            FilesPartition(directory, chunk, destination, state, root=root) for chunk in chunks
        ] or [FilesPartition(directory, (), destination, state, root=root)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self._schema)


def _seq(offset: Mapping[str, Any], reads: Mapping[str, str]) -> int:
    """The number of `offset`, a checkpoint's offset of the stream that `reads` names (the
    destination and consumer, as _StreamReader._reads): a checkpoint another queue's query
    wrote holds that stream's numbers, and the first batch acknowledged this one's claims up
    to them, unread. An offset without them (written before 2026-12-01) is taken as it is."""
    value = offset.get("seq")
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(
            f"boxmq source: offset {dict(offset)!r} is not boxmq's; was this checkpoint "
            "written by another source? Use a new checkpointLocation"
        )
    written = {key: offset[key] for key in ("queue", "subscription", "consumer") if key in offset}
    if written and written != reads:
        raise InvalidArgument(
            f"boxmq source: this checkpoint was written by a query reading {_what(written)}; "
            f"this one reads {_what(reads)}, whose messages its offsets would acknowledge "
            "unread: use a new checkpointLocation (or the options it was written with)"
        )
    return value


def _what(reads: Mapping[str, Any]) -> str:
    """'queue 'a' as consumer 'spark'', for an error."""
    kind = "queue" if "queue" in reads else "subscription"
    return f"{kind} {reads.get(kind)!r} as consumer {reads.get('consumer')!r}"


def _say_on_the_drivers_stderr() -> None:
    """Let this process's boxmq log records reach its standard error, from INFO on.

    The stream's offset methods run in a Python process Spark starts, whose standard error is
    the driver's but whose logging nobody configures: the user's script configures its own
    process, not this one. Left so, the INFO line saying how many messages expired unread
    (lifecycle.tell_expired, which every reader of a queue logs) was dropped, and the errors
    came out bare through Python's last resort. A process whose logging is set up keeps its own.
    """
    boxmq_log = logging.getLogger("boxmq")
    if boxmq_log.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()  # sys.stderr
    handler.setFormatter(logging.Formatter(log_lines.FORMAT))
    boxmq_log.addHandler(handler)
    if boxmq_log.level == logging.NOTSET:
        boxmq_log.setLevel(logging.INFO)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches are ranges of claim numbers; see claims.py for the invariants."""

    def __init__(self, options: StreamReadOptions, dropbox: str, schema: StructType) -> None:
        self._options = options
        self._dropbox = dropbox
        self._schema = schema
        self._claims: Claims | None = None  # made in the runner, on the first offset call
        self._only: frozenset[str] | None = None
        # Written in every offset, and checked in each one read from the checkpoint.
        kind = "queue" if options.queue is not None else "subscription"
        self._reads = {kind: options.destination, "consumer": options.consumer}

    def _offset(self, seq: int) -> dict[str, Any]:
        # Always the same keys in the same order: Spark compares offsets as JSON text (§4).
        return {"seq": seq, **self._reads}

    def _seq(self, offset: Mapping[str, Any]) -> int:
        return _seq(offset, self._reads)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_claims"] = None  # an open lock file is never pickled to the executors
        return state

    def _book(self) -> Claims:
        if self._claims is None:
            _say_on_the_drivers_stderr()
            self._claims = Claims(
                self._options.root,
                self._dropbox,
                self._options.consumer,
                lock_timeout=self._options.lock_timeout,
                flush=self._options.fsync is not FsyncPolicy.NEVER,
                subscription=self._options.subscription,
            )
        return self._claims

    def initialOffset(self) -> dict[str, Any]:
        # 0, not the high-water mark: claims a previous checkpoint left in processing/ are
        # read again rather than acknowledged unread (at-least-once; docs/spark.md).
        return self._offset(0)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_records is not None:
            return ReadMaxRows(self._options.max_records)
        if self._options.max_bytes is not None:
            return ReadMaxBytes(self._options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Called before any offset is known: only note what is ready now (§4: numbering here
        # lost data in the prototype).
        self._only = self._book().snapshot()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        # Spark never calls commit() for the last batch, and calls this only once the previous
        # batch is in its commit log: so everything up to `start` is acknowledged here too.
        first = self._seq(start)
        end = self._book().next_end(first, self._budget(limit), self._only)
        # Nothing new is `start` as it was: an offset written before the destination was in it
        # would otherwise differ as text and make an empty batch.
        return start if end == first else self._offset(end)

    def _budget(self, limit: ReadLimit) -> Budget:
        if isinstance(limit, ReadAllAvailable):
            return Budget()  # Trigger.Once: the engine says ignore our own limits
        rows, size = self._options.max_records, self._options.max_bytes
        if isinstance(limit, ReadMaxRows):
            rows = limit.max_rows
        elif isinstance(limit, ReadMaxFiles):
            rows = limit.max_files  # one message is one file
        elif isinstance(limit, ReadMaxBytes):
            size = limit.max_bytes
        return Budget(rows, size)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        # The tasks claim what the batch's plan numbered, then read it (plans.py).
        claims = self._book().between(self._seq(start), self._seq(end))
        directory = os.path.join(self._dropbox, State.PROCESSING.value)
        target = os.path.join(self._dropbox, State.TARGET.value)
        destination = self._options.destination
        processing = State.PROCESSING.value
        return [
            FilesPartition(
                directory,
                [claim.locked for claim in chunk],
                destination,
                processing,
                [claim.name for claim in chunk],
                target,
                root=self._options.root,
            )
            for chunk in _split(claims, self._options.num_partitions)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self._schema)

    def commit(self, end: dict[str, Any]) -> None:
        self._book().ack(self._seq(end))

    def stop(self) -> None:
        if self._claims is not None:
            self._claims.close()
            self._claims = None


_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "int": IntegerType(),
    "timestamp": TimestampType(),
    "binary": BinaryType(),
    "map<string,string>": MapType(StringType(), StringType()),
}
# Built in Python: StructType.fromDDL needs a JVM, and the planning workers have none.
STRUCT = StructType([StructField(name, _TYPES[kind]) for name, kind in FIELDS])


def _check_schema(schema: StructType) -> None:
    if schema != STRUCT:
        raise InvalidArgument(
            "boxmq source: the schema is fixed (docs/spark.md); drop .schema(...) and select "
            "the columns you need after load()"
        )


class BoxMQDataSource(DataSource):
    """`format("boxmq")`: read a queue or subscription, as a stream or a batch; write to one."""

    @classmethod
    def name(cls) -> str:
        return "boxmq"

    def schema(self) -> StructType:
        # Spark asks for the schema at load() (reads only): the place for early errors.
        check_read(self.options)
        return STRUCT

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return _BatchReader(batch_read_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        options = stream_read_options(self.options)
        if options.queue is not None:
            dropbox = options.queue_dropbox()
        else:
            assert options.subscription is not None
            # Registers the member so publishers route to it; harmless to repeat (Spark makes
            # a reader in the runner and another one to pickle to the executors).
            with boxmq.open(options.root, fsync=options.fsync.value) as box:
                dropbox = box.topics.attach_dropbox(options.subscription, options.consumer)
        return _StreamReader(options, dropbox, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:  # appending instead would leave the old messages beside the new ones
            raise InvalidArgument(
                "boxmq sink: mode('overwrite') would not replace the messages already there, "
                "only add to them; use mode('append')"
            )
        return BoxMQBatchWriter(sink_options(self.options, _names(schema)), columns_of(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            raise InvalidArgument(
                "boxmq sink: outputMode('complete') would send every result row again in each "
                "batch; use append (with a watermark for aggregates)"
            )
        return BoxMQStreamWriter(sink_options(self.options, _names(schema)), columns_of(schema))


def _names(schema: StructType) -> frozenset[str]:
    return frozenset(field.name for field in schema.fields)
