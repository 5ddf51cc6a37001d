"""The options of the "boxmq" data source, read and checked once, with errors that say what to fix.

Spark hands options over as a case-insensitive mapping whose keys are lower-cased (research note
§7.3), so every lookup here goes through `_Options`, never a plain dict copy. Every problem is an
`InvalidArgument` (or `QueueNotFound`) whose message names the option and the fix; nothing here
imports pyspark, so the checks are tested without a JVM.
"""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from boxmq.client.topics import check_filter
from boxmq.core.durations import BLANKS, LONGEST, written_seconds
from boxmq.errors import InvalidArgument, InvalidName, QueueNotFound
from boxmq.spark.messages import topic_for_every_row
from boxmq.store.commit import FsyncPolicy
from boxmq.store.layout import State, no_dropbox, queue_path
from boxmq.store.names import check_consumer_name
from boxmq.store.topics import subscription_key, subscription_path

__all__ = [
    "DEFAULT_CONSUMER",
    "DEFAULT_LOCK_TIMEOUT",
    "BatchReadOptions",
    "SinkOptions",
    "StreamReadOptions",
    "batch_read_options",
    "check_read",
    "sink_options",
    "stream_read_options",
    "subscription_dropbox",
]

DEFAULT_CONSUMER = "spark"
DEFAULT_LOCK_TIMEOUT = 86_400.0  # a day: a stopped query may come back within it (docs/spark.md)
_SHARE = "$share/"  # core.topics.SHARE_PREFIX: Spark imports no core (DESIGN.md §6)
_Choice = TypeVar("_Choice", FsyncPolicy, State)  # the options whose value is one of a few words

# Options Spark itself puts in the map; accepted and ignored (the sink reads no path).
_FROM_SPARK = frozenset({"path", "checkpointlocation", "queryname"})
_COMMON = ("root", "fsync")
_READ = ("queue", "subscription", "consumer", "subscriber", "numPartitions")
_STREAM = ("maxRecordsPerTrigger", "maxBytesPerTrigger", "lockTimeout")
_KNOWN = {
    "batch read": (*_COMMON, *_READ, "state"),
    "stream read": (*_COMMON, *_READ, *_STREAM),
    "read": (*_COMMON, *_READ, "state", *_STREAM),  # load(), before Spark says which
    "write": (*_COMMON, "queue", "topic"),
}
# What the user meant, when an option of the other side says it: keyed by (option, the side
# given it), "read" standing for every read.
_WHY = {
    ("state", "stream read"): " (a stream reads what is ready: target/)",
    ("topic", "read"): " (a read of topics takes 'subscription', a topic filter: 'alerts/#')",
    ("subscription", "write"): " (a write to topics takes 'topic', a topic name)",
    # JDBC's numPartitions bounds a write's connections; here each partition is a task already
    ("numpartitions", "write"): (
        " (a write runs one task per partition of the DataFrame: df.repartition(n) sets them)"
    ),
}


@dataclass(frozen=True, slots=True)
class BatchReadOptions:
    """`spark.read.format("boxmq")`: one state folder of one queue or subscription."""

    root: str  # absolute
    dropbox: str  # the dropbox read
    destination: str  # what the `destination` column says: the queue or the subscription
    state: State
    num_partitions: int


@dataclass(frozen=True, slots=True)
class StreamReadOptions:
    """`spark.readStream.format("boxmq")`: claims from target/ of a queue or subscription."""

    root: str
    queue: str | None
    subscription: str | None  # "$share/<group>/<filter>" or a plain filter
    consumer: str  # whose claims these are; a subscription's subscriber or group member
    num_partitions: int
    max_records: int | None  # maxRecordsPerTrigger
    max_bytes: int | None  # maxBytesPerTrigger
    lock_timeout: float  # seconds a claim is held before boxmq sweepers may take it back
    fsync: FsyncPolicy

    @property
    def destination(self) -> str:
        return self.queue if self.queue is not None else str(self.subscription)

    def queue_dropbox(self) -> str:
        """The queue's dropbox (which must exist); subscriptions are attached by the source."""
        assert self.queue is not None
        return _existing_queue(self.root, self.queue)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """`writeStream.format("boxmq")` / `write.format("boxmq")`: rows become messages."""

    root: str
    queue: str | None  # exactly one of queue, topic; or neither and a `topic` column
    topic: str | None
    fsync: FsyncPolicy


class _Options:
    """Lookups in Spark's option map, by the camelCase names users write."""

    def __init__(self, options: Mapping[str, str], role: str) -> None:
        known = {name.lower(): name for name in _KNOWN[role]}
        given = {str(key).lower(): value for key, value in options.items()}
        # Spark hands a Python data source none of its own settings: a "spark." option is one
        # the user meant for Spark, and ignored (as it was) it never took effect.
        # The first by name, as the unknown ones are listed.
        if setting := min((key for key in given if key.startswith("spark.")), default=None):
            raise InvalidArgument(
                f"boxmq data source: option {setting!r} is a Spark setting, which Spark passes to "
                f"no data source; set it in the session's conf: spark.conf.set({setting!r}, ...) "
                "or SparkSession.builder.config(...)"
            )
        unknown = sorted(key for key in given if key not in known and key not in _FROM_SPARK)
        for key in unknown:
            # Named as users write it (Spark hands over lower case); "a read" when both take it.
            roles = [
                other
                for other, names in _KNOWN.items()
                if other != "read" and key in {name.lower() for name in names}
            ]
            if roles:
                name = next(n for n in _KNOWN["read"] + _KNOWN["write"] if n.lower() == key)
                other = "read" if roles == ["batch read", "stream read"] else roles[0]
                raise InvalidArgument(
                    f"boxmq data source: option {name!r} is for a {other}, not a {role}"
                    + _WHY.get((key, role), _WHY.get((key, role.split()[-1]), ""))
                )
        if unknown:
            named = ", ".join(_with_the_one_meant(key, known) for key in unknown)
            raise InvalidArgument(
                f"boxmq data source: unknown option{'s' if len(unknown) > 1 else ''} {named} "
                f"for a {role}; the options are: {', '.join(_KNOWN[role])}"
            )
        self._given = given

    def text(self, name: str) -> str | None:
        value = self._given.get(name.lower())
        if value is None:
            return None
        if not str(value).strip():
            raise InvalidArgument(f"boxmq data source: option {name!r} is empty")
        return str(value)

    def positive_int(self, name: str) -> int | None:
        value = self.text(name)
        if value is None:
            return None
        # Digits 0-9 between ASCII blanks, as a duration is written: int() also takes "1_000"
        # and other scripts' digits, and str.strip() a no-break or ideographic space.
        digits = value.strip(BLANKS)
        number = int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 19 else 0
        if number <= 0:
            raise InvalidArgument(
                f"boxmq data source: option {name!r} is {value!r}; give a positive whole number "
                "in the digits 0-9, at most 18 of them"
            )
        return number

    def seconds(self, name: str, default: float) -> float:
        value = self.text(name)
        if value is None:
            return default
        seconds = written_seconds(value, spaced=True)
        if seconds is None or seconds <= 0:
            raise InvalidArgument(
                f"boxmq data source: option {name!r} is {value!r}; give a positive duration "
                "in seconds, or with a unit: 90s, 30m, 12h, 1d"
            )
        if seconds > LONGEST:  # infinity too (400 digits): the first batch raised OverflowError
            raise InvalidArgument(
                f"boxmq data source: option {name!r} is {value!r}; at most "
                f"{LONGEST / 86_400:g}d (100 years)"
            )
        return seconds

    def root(self) -> str:
        root, path = self.text("root"), self.text("path")
        if root is None and path is None:
            raise InvalidArgument(
                'boxmq data source: option "root" is missing; give the boxmq root folder, '
                'e.g. .option("root", "./data")'
            )
        if root is not None and path is not None and not _same_folder(root, path):
            raise InvalidArgument(
                f"boxmq data source: root {_named(root)} and load()/save() path {_named(path)} "
                "name different folders; give the root once"
            )
        chosen = os.path.abspath(root or str(path))
        if not os.path.isdir(chosen):
            raise InvalidArgument(
                f"boxmq data source: root {chosen!r} is not a folder; check the path, or "
                "create the root first: boxmq.open(root), `boxmq put`, `boxmq publish`, "
                "`boxmq subscribe` or `boxmq serve` makes it (`boxmq ls` and the other "
                "commands that only read do not)"
            )
        return chosen

    def fsync(self) -> FsyncPolicy:
        return self._choice("fsync", FsyncPolicy.ALWAYS)

    def state(self) -> State:
        return self._choice("state", State.TARGET)

    def _choice(self, name: str, default: _Choice) -> _Choice:
        """One of an enumeration's values, in any case, ASCII blanks around it ignored as a
        count's or a duration's are, named by the option `name`."""
        kind = type(default)
        value = self.text(name) or default.value
        try:
            return kind(value.strip(BLANKS).lower())
        except ValueError:
            choices = ", ".join(member.value for member in kind)
            raise InvalidArgument(
                f"boxmq data source: option {name!r} is {value!r}; choose one of {choices}"
            ) from None

    def consumer(self) -> str:
        consumer, subscriber = self.text("consumer"), self.text("subscriber")
        if consumer is not None and subscriber is not None and consumer != subscriber:
            raise InvalidArgument(
                "boxmq data source: options 'consumer' and 'subscriber' are two names for the "
                "same thing; give one"
            )
        name = consumer or subscriber or DEFAULT_CONSUMER
        option = "subscriber" if consumer is None and subscriber is not None else "consumer"
        try:
            return check_consumer_name(name, f"{option} name")
        except InvalidName as error:
            raise InvalidArgument(f"boxmq data source: option {option!r}: {error}") from None

    def destination(self) -> tuple[str | None, str | None]:
        """(queue, subscription): exactly one of them."""
        queue, subscription = self.text("queue"), self.text("subscription")
        if (queue is None) == (subscription is None):
            raise InvalidArgument(
                "boxmq data source: give exactly one of the options 'queue' (a queue name) "
                "and 'subscription' (a topic filter, e.g. '$share/etl/sensors/#')"
            )
        if subscription is not None:
            # At load(): a stream registers its filter only when it starts, and failed then.
            try:
                check_filter(subscription)
            except InvalidArgument as error:
                raise InvalidArgument(
                    f"boxmq data source: option 'subscription': {error}"
                ) from None
        return queue, subscription


def _with_the_one_meant(key: str, known: Mapping[str, str]) -> str:
    """An unknown option as Spark handed it over (lower case), and the known one it is a
    misspelling of, if one is near: the list of every option left the user to find it."""
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    return f"{key!r} (did you mean {known[near[0]]!r}?)" if near else repr(key)


def _same_folder(root: str, path: str) -> bool:
    """Whether `root` and the load()/save() path name one folder, however each is written
    ("./data", "data/", an absolute path, a symlink): compared as text, the same root given
    twice was refused. One stat of each (os.path.exists before samefile made it two); one
    that cannot be looked at (missing, a NUL, no permission) is compared as text, as exists()
    answering False had it."""
    try:
        return os.path.samefile(root, path)
    except (OSError, ValueError):
        return os.path.abspath(root) == os.path.abspath(path)


def _named(path: str) -> str:
    """A path as given, and what it names when that is not plain from the text."""
    absolute = os.path.abspath(path)
    return repr(path) if absolute == path else f"{path!r} ({absolute!r})"


def _num_partitions(options: _Options) -> int:
    return options.positive_int("numPartitions") or max(1, os.cpu_count() or 1)


def _existing_queue(root: str, queue: str) -> str:
    try:
        path = queue_path(root, queue)
    except InvalidName as error:
        raise InvalidArgument(f"boxmq data source: option 'queue': {error}") from None
    if no_dropbox(path):
        raise QueueNotFound(
            f"boxmq data source: no queue {queue!r} under {root} "
            f"(`{shlex.join(['boxmq', '--data', root, 'ls'])}` lists "
            "them; a queue exists once something was put in it or `boxmq.open(root)."
            "queue(name)` made it)"
        )
    return path


def subscription_dropbox(root: str, subscription: str, consumer: str) -> str:
    """The dropbox of an existing subscription, found without registering anything."""
    group: str | None = None
    filter = subscription
    if subscription.startswith(_SHARE):
        group, separator, filter = subscription[len(_SHARE) :].partition("/")
        if not group or not separator or not filter:
            raise InvalidArgument(
                f"boxmq data source: subscription {subscription!r} is not '$share/<group>/<filter>'"
            )
    try:
        path = subscription_path(root, filter, subscription_key(group, None if group else consumer))
    except InvalidName as error:
        raise InvalidArgument(f"boxmq data source: option 'subscription': {error}") from None
    if no_dropbox(path):
        whose = f"share group {group!r}" if group else f"subscriber {consumer!r}"
        raise QueueNotFound(
            f"boxmq data source: no subscription {subscription!r} for {whose} under {root} "
            "(a stream on it, or boxmq.open(root).subscribe(...), creates it)"
        )
    return path


def check_read(given: Mapping[str, str]) -> None:
    """What load() can check before Spark says whether it reads a stream or a batch."""
    options = _Options(given, "read")
    root = options.root()
    queue, _ = options.destination()
    options.consumer()
    options.fsync()
    # The values a stream or a batch read refuses alike: here rather than at a stream's
    # start, whose errors come out of awaitTermination, in a StreamingQueryException.
    for count in ("numPartitions", "maxRecordsPerTrigger", "maxBytesPerTrigger"):
        options.positive_int(count)
    options.seconds("lockTimeout", DEFAULT_LOCK_TIMEOUT)
    options.state()
    if queue is not None:
        _existing_queue(root, queue)


def batch_read_options(given: Mapping[str, str]) -> BatchReadOptions:
    options = _Options(given, "batch read")
    root = options.root()
    queue, subscription = options.destination()
    state = options.state()
    if queue is not None:
        dropbox, destination = _existing_queue(root, queue), queue
    else:
        assert subscription is not None
        dropbox = subscription_dropbox(root, subscription, options.consumer())
        destination = subscription
    options.fsync()  # checked for typos even though a read never flushes
    return BatchReadOptions(root, dropbox, destination, state, _num_partitions(options))


def stream_read_options(given: Mapping[str, str]) -> StreamReadOptions:
    options = _Options(given, "stream read")
    root = options.root()
    queue, subscription = options.destination()
    chosen = StreamReadOptions(
        root=root,
        queue=queue,
        subscription=subscription,
        consumer=options.consumer(),
        num_partitions=_num_partitions(options),
        max_records=options.positive_int("maxRecordsPerTrigger"),
        max_bytes=options.positive_int("maxBytesPerTrigger"),
        lock_timeout=options.seconds("lockTimeout", DEFAULT_LOCK_TIMEOUT),
        fsync=options.fsync(),
    )
    if queue is not None:
        chosen.queue_dropbox()
    return chosen


def sink_options(given: Mapping[str, str], columns: frozenset[str]) -> SinkOptions:
    options = _Options(given, "write")
    root = options.root()
    queue, topic = options.text("queue"), options.text("topic")
    if queue is not None and topic is not None:
        raise InvalidArgument(
            "boxmq data source: give the option 'queue' or the option 'topic', not both"
        )
    if queue is None and topic is None and "topic" not in columns:
        raise InvalidArgument(
            "boxmq data source: say where the messages go: option 'queue', option 'topic', "
            "or a 'topic' column naming each row's topic"
        )
    if queue is not None:
        try:
            queue_path(root, queue)
        except InvalidName as error:
            raise InvalidArgument(f"boxmq data source: option 'queue': {error}") from None
    if topic is not None:
        try:
            topic_for_every_row(topic)
        except InvalidArgument as error:
            raise InvalidArgument(f"boxmq data source: option 'topic': {error}") from None
    return SinkOptions(root, queue, topic, options.fsync())
