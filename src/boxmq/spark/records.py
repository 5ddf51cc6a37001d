"""Message files as rows: the schema every boxmq DataFrame has, and the columns of a file.

The row of a message is read from two places only: its file name (the DropboxMQ envelope,
decoded leniently, as every boxmq tool does, so a file a script dropped in is a message with
default metadata) and its content (the body, byte for byte). Nothing here imports pyspark;
`Columns` collects plain Python values per column and the source turns them into Arrow.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from boxmq.model import PropertyValue
from boxmq.store.layout import State
from boxmq.store.names import decode_lenient, split_lock

__all__ = [
    "COLUMNS",
    "FIELDS",
    "SCHEMA",
    "Columns",
    "FileRef",
    "property_text",
    "read_files",
]

# (column, Spark SQL type). Every column is nullable: Spark's Arrow check compares nullability
# too (research note §5), and the source builds both sides from this one table.
FIELDS = (
    ("message_id", "string"),
    ("destination", "string"),  # the queue, or the subscription, as the reader's option says
    ("topic", "string"),  # what a message to a topic was published to; null in a queue
    ("priority", "int"),
    ("class", "string"),  # the DropboxMQ class letter: M B S P O T
    ("timestamp", "timestamp"),  # from the id (DropboxMQ ids carry it), else the file's mtime
    ("expiration", "timestamp"),  # null: never
    ("correlation_id", "string"),
    ("reply_to", "string"),
    ("type", "string"),
    ("properties", "map<string,string>"),  # the producer's properties, values as text
    ("body", "binary"),
    ("delivery_count", "int"),  # deliveries so far, the one at hand included
)
SCHEMA = ", ".join(f"{name} {kind}" for name, kind in FIELDS)
COLUMNS = tuple(name for name, _ in FIELDS)

# States whose files have been delivered once more than their name counts: the delivery at
# hand (processing/), the one that was acknowledged (processed/), or the one that ended in
# error/ (a reject, or the delivery that reached max deliveries).
_DELIVERED = frozenset({State.PROCESSING, State.PROCESSED, State.ERROR})


def property_text(value: PropertyValue) -> str:
    """A property value as the string the `properties` map holds (Java's spelling)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    return str(value)


@dataclass(frozen=True, slots=True)
class FileRef:
    """A message file to read: its name in `directory`, possibly with a lock suffix."""

    directory: str
    name: str


@dataclass(slots=True)
class Columns:
    """Rows of messages, column by column, in SCHEMA's order."""

    destination: str
    state: State
    values: tuple[list[object], ...] = field(default_factory=lambda: tuple([] for _ in COLUMNS))

    def __len__(self) -> int:
        return len(self.values[0])

    def add(self, name: str, body: bytes, mtime: Callable[[], float]) -> None:
        """One message: `name` is its name without a lock suffix; `mtime` gives its file's
        modification time in s, asked for only when the id carries no timestamp."""
        envelope, _ = decode_lenient(name)
        stamp = envelope.timestamp
        micros = stamp * 1000 if stamp is not None else int(mtime() * 1_000_000)
        row: tuple[object, ...] = (
            envelope.message_id,
            self.destination,
            envelope.topic,
            envelope.priority,
            envelope.message_class.value,
            micros,
            envelope.expiration * 1000 if envelope.expiration else None,
            envelope.correlation_id,
            envelope.reply_to,
            envelope.type,
            [(key, property_text(value)) for key, value in envelope.user_properties().items()],
            body,
            envelope.delivery_count + (self.state in _DELIVERED),
        )
        for column, value in zip(self.values, row, strict=True):
            column.append(value)

    def clear(self) -> None:
        for column in self.values:
            column.clear()


def read_files(
    files: list[FileRef], destination: str, state: State, *, chunk: int
) -> Iterator[Columns]:
    """The messages of `files`, `chunk` rows at a time; files that are gone are skipped.

    A file can vanish between the listing and the read (another consumer, a sweeper, an ack):
    a batch read is a snapshot of whatever is still there when it is read.
    """
    columns = Columns(destination, state)
    locked = state is State.PROCESSING
    folders: dict[str, int] = {}  # opened once: a name is looked up in it, not a whole path
    try:
        for ref in files:
            folder = folders.get(ref.directory)
            if folder is None:
                folder = folders[ref.directory] = os.open(ref.directory, _DIRECTORY)
            body = _read(ref.name, folder)
            if body is None:
                continue
            name = split_lock(ref.name)[0] if locked else ref.name
            columns.add(name, body, functools.partial(_mtime, ref.name, folder))
            if len(columns) >= chunk:
                yield columns
                columns = Columns(destination, state)
        if len(columns):
            yield columns
    finally:
        for folder in folders.values():
            os.close(folder)


_FIRST_READ = 1 << 16
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC


def _read(name: str, folder: int) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | _CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        return None
    try:
        # Most bodies are small: one read that comes back short is the whole file (a regular
        # file returns less than asked only at its end), with no fstat and no second read.
        first = os.read(fd, _FIRST_READ)
        if len(first) < _FIRST_READ:
            return first
        chunks = [first]
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _mtime(name: str, folder: int) -> float:
    try:
        return os.stat(name, dir_fd=folder).st_mtime
    except FileNotFoundError:
        return 0.0  # moved on since it was read; the row still needs some time
