"""Message files as rows: the schema every boxmq DataFrame has, and the columns of a file.

The row of a message is read from two places only: its file name (the DropboxMQ envelope,
decoded leniently, as every boxmq tool does, so a file a script dropped in is a message with
default metadata) and its content (the body, byte for byte). Nothing here imports pyspark;
`Columns` collects plain Python values per column and the source turns them into Arrow.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from boxmq.client.lifecycle import shown
from boxmq.model import (
    PROPERTIES_FILE,
    V5_PROPERTIES,
    Envelope,
    PropertyValue,
    property_text,
    timestamp_of,
)
from boxmq.store.dropbox import folder_made_for
from boxmq.store.layout import State, open_folder
from boxmq.store.names import PLAIN_ID, decode_lenient, split_lock
from boxmq.store.side_files import SideFiles
from boxmq.store.v5_properties import CORRELATION_DATA, RESPONSE_TOPIC, V5Reader

__all__ = [
    "COLUMNS",
    "FIELDS",
    "SCHEMA",
    "Columns",
    "FileRef",
    "MqttProperties",
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
    # The producer's properties, values as text; an MQTT v5 message's decoded
    # (store/v5_properties.py: User Properties, mqtt.content-type, ...).
    ("properties", "map<string,string>"),
    ("body", "binary"),
    ("delivery_count", "int"),  # deliveries so far, the one at hand included
)
SCHEMA = ", ".join(f"{name} {kind}" for name, kind in FIELDS)
COLUMNS = tuple(name for name, _ in FIELDS)

# States whose files have been delivered once more than their name counts (the deliveries
# that ended without an ack): the delivery at hand (processing/), or the one that was
# acknowledged (processed/). error/ names count the delivery that ended there too.
_DELIVERED = frozenset({State.PROCESSING, State.PROCESSED})


# The columns every message with the same name apart from its id has in common, in SCHEMA's
# positions; message_id, destination, timestamp, body and delivery_count are the row's own.
_SHARED_COLUMNS = (2, 3, 4, 6, 7, 8, 9, 10)
_TIMESTAMP_MAX = 2**63 - 1  # a Spark (and Arrow) timestamp: epoch microseconds in an int64
_ID_STANDIN = "x"  # any plain id: what a name decodes to does not depend on which


# (message id, the shared columns, delivery count, the envelope when it has MQTT v5 properties)
_Decoded = tuple[str, tuple[object, ...], int, Envelope | None]


def _decoded(name: str) -> _Decoded:
    """(message id, the shared columns, delivery count) of a message name, as decode_lenient
    reads it.

    Decoding a name costs ~10 µs of Python, as much as opening and reading the file; but the
    messages of one producer differ in their ids only. So the name is decoded once per
    remainder (priority, class, expiration, ..., properties) with a stand-in id and cached;
    the row's own id is the text between the first two dots when nothing in it is escaped,
    which leaves its meaning to the remainder. Any other name takes the full decode."""
    priority, dot, rest = name.partition(".")
    message_id, dot2, tail = rest.partition(".")
    if dot and PLAIN_ID.fullmatch(message_id):
        shared = _shared(f"{priority}.{_ID_STANDIN}{dot2}{tail}")
        if shared is not None:
            return message_id, *shared
    return _full(decode_lenient(name)[0])


@functools.lru_cache(maxsize=4096)
def _shared(template: str) -> tuple[tuple[object, ...], int, Envelope | None] | None:
    """The shared columns and delivery count of a stand-in name; None when it does not
    decode (the whole name is then the id, and the row takes the full decode)."""
    envelope, error = decode_lenient(template)
    return None if error is not None else _full(envelope)[1:]


def _timestamp(expiration: int) -> int | None:
    """An expiration (epoch ms, 0 for never) as a Spark timestamp (epoch µs, an int64); None
    for never, and for one past year 294247, which no timestamp holds (a name may carry up to
    Java's Long.MAX_VALUE ms): such a message does not expire in any time a reader knows."""
    if not 0 < expiration <= _TIMESTAMP_MAX // 1000:
        return None
    return expiration * 1000


def _full(envelope: Envelope) -> _Decoded:
    shared = (
        envelope.topic,
        envelope.priority,
        envelope.message_class.value,
        _timestamp(envelope.expiration),
        envelope.correlation_id,
        envelope.reply_to,
        envelope.type,
        _column(envelope.user_properties()),
    )
    v5 = envelope if _read_by_v5(envelope) else None
    return envelope.message_id, shared, envelope.delivery_count, v5


# Names that make what a reader shows differ from the name's own fields (V5Reader): MQTT v5
# properties, or the `mqtt.*` ones that are also a message's reply-to and correlation id.
_V5_NAMES = frozenset({V5_PROPERTIES, PROPERTIES_FILE, RESPONSE_TOPIC, CORRELATION_DATA})


def _read_by_v5(envelope: Envelope) -> bool:
    return any(p.name in _V5_NAMES for p in envelope.properties)


def _column(properties: dict[str, PropertyValue]) -> list[tuple[str, str]]:
    """The `properties` column: values as text; bytes of a name that are not UTF-8
    (surrogate escapes, which Arrow cannot carry) as \\xNN, as the CLI shows them."""
    pairs = [(key, property_text(value)) for key, value in properties.items()]
    return [(k, v) if (k + v).isascii() else (shown(k), shown(v)) for k, v in pairs]


class MqttProperties:
    """The `properties`, `correlation_id` and `reply_to` columns of messages with MQTT v5
    properties, decoded for one root (their side files are there), as `Message` shows them;
    one decode per kind of name, as for the other columns."""

    _KEPT = 4096

    def __init__(self, root: str | None) -> None:
        self._reader = V5Reader(SideFiles(root) if root is not None else None)
        # By the identity of a kind's cached shared columns (kept here, so that no other
        # tuple takes its id): those columns with the properties decoded.
        self._seen: dict[int, tuple[tuple[object, ...], tuple[object, ...]]] = {}

    def shared(self, shared: tuple[object, ...], envelope: Envelope) -> tuple[object, ...]:
        """`shared` (of `envelope`) with its correlation id, reply-to and properties decoded."""
        seen = self._seen.get(id(shared))
        if seen is None or seen[0] is not shared:
            reader = self._reader
            decoded = (
                *shared[:4],
                reader.correlation_id(envelope),
                reader.reply_to(envelope),
                shared[6],
                _column(reader.properties(envelope)),
            )
            if len(self._seen) >= self._KEPT:
                self._seen.clear()
            seen = self._seen[id(shared)] = (shared, decoded)
        return seen[1]


@dataclass(frozen=True, slots=True)
class FileRef:
    """A message file to read: its name in `directory`, possibly with a lock suffix.

    With `claim_from`, the message is claimed first: renamed from `claim_from`/`message` to
    `directory`/`name`, unless an earlier attempt already did (plans.py says why that is
    the same claim, and why losing the rename to another consumer means skipping it)."""

    directory: str
    name: str
    message: str | None = None  # its name without the lock suffix, when known
    claim_from: str | None = None


@dataclass(slots=True)
class Columns:
    """Rows of messages, column by column, in SCHEMA's order."""

    destination: str
    state: State
    values: tuple[list[object], ...] = field(default_factory=lambda: tuple([] for _ in COLUMNS))
    # Decodes MQTT v5 properties; the default reads those in names only (no side files).
    mqtt: MqttProperties = field(default_factory=lambda: MqttProperties(None))

    def __len__(self) -> int:
        return len(self.values[0])

    def add(self, name: str, body: bytes, mtime: Callable[[], float]) -> None:
        """One message: `name` is its name without a lock suffix; `mtime` gives its file's
        modification time in s, asked for only when the id carries no timestamp."""
        message_id, shared, deliveries, v5 = _decoded(name)
        if v5 is not None:
            shared = self.mqtt.shared(shared, v5)
        stamp = timestamp_of(message_id)
        micros = stamp * 1000 if stamp is not None else int(mtime() * 1_000_000)
        values = self.values
        values[0].append(message_id)
        values[1].append(self.destination)
        values[5].append(micros)
        values[11].append(body)
        values[12].append(deliveries + (self.state in _DELIVERED))
        for index, value in zip(_SHARED_COLUMNS, shared, strict=True):
            values[index].append(value)

    def clear(self) -> None:
        for column in self.values:
            column.clear()


# Body bytes per chunk: a chunk becomes one Arrow batch, whose binary column holds at most
# 2 GiB (pyarrow then returns a ChunkedArray, which no RecordBatch takes: the task failed).
CHUNK_BYTES = 256 << 20


def read_files(
    files: list[FileRef],
    destination: str,
    state: State,
    *,
    chunk: int,
    root: str | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[Columns]:
    """The messages of `files`, `chunk` rows at a time, fewer once their bodies reach
    `chunk_bytes` (one message alone at least); files that are gone are skipped.

    A file can vanish between the listing and the read (another consumer, a sweeper, an ack):
    a batch read is a snapshot of whatever is still there when it is read. `root` is where
    the side files of MQTT v5 properties are (None: only those in names are read).
    """
    mqtt = MqttProperties(root)
    columns = Columns(destination, state, mqtt=mqtt)
    locked = state is State.PROCESSING
    folders: dict[str, int | None] = {}  # opened once: a name is looked up in it, not a path
    size = 0  # body bytes in `columns`

    def opened(path: str, claim_from: str | None = None) -> int | None:
        """The folder, open; None when it is gone (its queue deleted: so are its files)."""
        if path in folders:
            return folders[path]
        try:
            fd: int | None = open_folder(path)
        except FileNotFoundError:
            fd = None
            # processing/ deleted by hand: made again for the claims, as a consumer's claim
            # makes it (Dropbox.claim); the task failed, and so did the query.
            if claim_from is not None and folder_made_for(claim_from, path):
                fd = open_folder(path)
        folders[path] = fd
        return fd

    try:
        for ref in files:
            folder = opened(ref.directory, ref.claim_from)
            if folder is None:
                continue
            if ref.claim_from is not None and ref.message is not None:
                source = opened(ref.claim_from)
                if source is not None:
                    _claim(ref.message, source, ref.name, folder)
            body = _read(ref.name, folder)
            if body is None:
                continue
            if ref.message is not None:
                name = ref.message
            else:
                name = _unlocked(ref.name) if locked else ref.name
            columns.add(name, body, functools.partial(_mtime, ref.name, folder))
            size += len(body)
            if len(columns) >= chunk or size >= chunk_bytes:
                yield columns
                columns, size = Columns(destination, state, mqtt=mqtt), 0
        if len(columns):
            yield columns
    finally:
        for fd in folders.values():
            if fd is not None:
                os.close(fd)


def _unlocked(name: str) -> str:
    """split_lock(name)[0], with the suffix checked once per kind of suffix: checking it costs
    more than reading the file, and the claims of a batch differ only in the number that ends
    their owner (spark~<stream>~<seq>), which digits of the same count stand in for."""
    parts = name.rsplit("@", 3)
    if len(parts) != 4 or not parts[0]:
        return name
    owner, deadline, token = parts[1:]
    stem = owner.rstrip(_DIGITS)
    valid = _is_lock_suffix(stem, len(owner) - len(stem), deadline, token)
    return parts[0] if valid else name


_DIGITS = "0123456789"


@functools.lru_cache(maxsize=1024)
def _is_lock_suffix(stem: str, digits: int, deadline: str, token: str) -> bool:
    return split_lock(f"x@{stem}{'0' * digits}@{deadline}@{token}")[1] is not None


_FIRST_READ = 1 << 16
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _claim(name: str, source: int, locked: str, folder: int) -> None:
    with contextlib.suppress(FileNotFoundError):  # claimed before, or by someone else
        os.rename(name, locked, src_dir_fd=source, dst_dir_fd=folder)


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
