"""Option checks (boxmq.spark.options) and row-to-message rules (boxmq.spark.messages), no JVM."""

from __future__ import annotations

import base64
import datetime
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import boxmq
from boxmq.errors import InvalidArgument, InvalidName, MetadataTooLong, QueueNotFound
from boxmq.ids import IdFactory
from boxmq.model import MessageClass
from boxmq.mqtt.stored import _properties_of
from boxmq.spark import messages
from boxmq.spark.options import (
    DEFAULT_LOCK_TIMEOUT,
    batch_read_options,
    check_read,
    sink_options,
    stream_read_options,
    subscription_dropbox,
)
from boxmq.store.commit import FsyncPolicy
from boxmq.store.layout import State
from boxmq.store.names import decode_lenient, encode
from boxmq.store.side_files import SideFiles
from boxmq.store.v5_properties import V5Reader


@pytest.fixture
def root(tmp_path: Path) -> Iterator[str]:
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        box.queue("sensors")
        yield box.root


R = "<the test's root>"


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({}, InvalidArgument, 'option "root" is missing'),
        ({"queue": "sensors"}, InvalidArgument, 'option "root" is missing'),
        ({"root": "/no/such/folder", "queue": "sensors"}, InvalidArgument, "is not a folder"),
        ({"root": R, "queue": "nope"}, QueueNotFound, "no queue 'nope'"),
        ({"root": R}, InvalidArgument, "exactly one of the options 'queue'"),
        ({"root": R, "queue": "sensors", "subscription": "a/#"}, InvalidArgument, "exactly one"),
        ({"root": R, "queue": "sensors", "maxRecordsPerTrigger": "0"}, InvalidArgument, "whole"),
        ({"root": R, "queue": "sensors", "maxBytesPerTrigger": "1e3"}, InvalidArgument, "whole"),
        ({"root": R, "queue": "sensors", "numPartitions": "-2"}, InvalidArgument, "numPartitions"),
        # int() also takes other scripts' digits (Arabic-Indic 3, fullwidth 4) and "1_000"
        ({"root": R, "queue": "sensors", "numPartitions": "\u0663"}, InvalidArgument, "whole"),
        ({"root": R, "queue": "sensors", "maxRecordsPerTrigger": "\uff14"}, InvalidArgument, "wh"),
        ({"root": R, "queue": "sensors", "maxBytesPerTrigger": "1_000"}, InvalidArgument, "whole"),
        # a no-break or ideographic space is no blank, as in a duration ("5\u00a0s" is refused)
        ({"root": R, "queue": "s", "maxRecordsPerTrigger": "5\u00a0"}, InvalidArgument, "whole"),
        ({"root": R, "queue": "s", "numPartitions": "\u30002"}, InvalidArgument, "whole"),
        # a positive whole number refused: the message says which bound it broke
        ({"root": R, "queue": "s", "maxBytesPerTrigger": "1" * 19}, InvalidArgument, "most 18"),
        ({"root": R, "queue": "sensors", "lockTimeout": "soon"}, InvalidArgument, "1d"),
        # at most 100 years, as every duration; infinity failed the first batch (OverflowError)
        ({"root": R, "queue": "sensors", "lockTimeout": "36501d"}, InvalidArgument, "100 y"),
        ({"root": R, "queue": "sensors", "lockTimeout": "9" * 400}, InvalidArgument, "100 y"),
        ({"root": R, "queue": "sensors", "fsync": "sometimes"}, InvalidArgument, "interval"),
        ({"root": R, "queue": "topic-root"}, InvalidArgument, "'queue': 'topic-root' is where"),
        ({"root": "", "queue": "sensors"}, InvalidArgument, "option 'root' is empty"),
        ({"root": R, "queue": "sensors", "state": "done"}, InvalidArgument, "for a batch read"),
        ({"root": R, "queue": "sensors", "maxRecords": "5"}, InvalidArgument, "unknown option"),
        ({"root": R, "queue": "sensors", "consumer": "x" * 41}, InvalidArgument, "40-byte"),
        # the option the user gave, and the name it gave: a subscriber is no consumer to them
        ({"root": R, "queue": "s", "subscriber": "a/b"}, InvalidArgument, "'subscriber': subs"),
        ({"root": R, "queue": "s", "consumer": "a", "subscriber": "b"}, InvalidArgument, "one"),
        # refused at load(), not once the stream started and registered it
        ({"root": R, "subscription": "a/#/b"}, InvalidArgument, "'subscription': topic filter"),
        ({"root": R, "subscription": "$share/etl"}, InvalidArgument, "'subscription': '.share"),
    ],
)
def test_a_bad_stream_option_says_what_to_fix(
    root: str, options: dict[str, str], error: type[Exception], says: str
) -> None:
    given = {key: root if value == R else value for key, value in options.items()}
    with pytest.raises(error, match=says):
        stream_read_options(given)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"maxRecordsPerTrigger": "abc"}, "'maxRecordsPerTrigger' is 'abc'; give a positive"),
        ({"maxBytesPerTrigger": "0"}, "'maxBytesPerTrigger' is '0'"),
        ({"numPartitions": "-2"}, "'numPartitions' is '-2'"),
        ({"lockTimeout": "0"}, "'lockTimeout' is '0'; give a positive duration"),
        ({"lockTimeout": "36501d"}, "at most 36500d"),
        ({"state": "finished"}, "'state' is 'finished'; choose one of"),
    ],
)
def test_a_bad_option_value_is_refused_at_load(
    root: str, options: dict[str, str], says: str
) -> None:
    """load() checks what it can before Spark says whether it reads a stream or a batch; a
    bad value fails either, but it passed load() and failed a stream's start in the query's
    thread, as a StreamingQueryException out of awaitTermination (found by a Spark hunt)."""
    with pytest.raises(InvalidArgument, match=says):
        check_read({"root": root, "queue": "sensors", **options})


def test_a_missing_queue_names_a_command_that_lists_the_queues(root: str) -> None:
    # It said `boxmq ls ROOT`, which boxmq refuses (ls takes no folder: --data gives it).
    with pytest.raises(QueueNotFound) as raised:
        stream_read_options({"root": root, "queue": "nope"})
    command = str(raised.value).split("`")[1]
    done = subprocess.run(
        [sys.executable, "-m", "boxmq.cli", *shlex.split(command)[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "sensors" in done.stdout


def test_a_missing_root_names_a_command_that_makes_it(tmp_path: Path) -> None:
    # "any `boxmq` command" made it, said the hint; `boxmq ls` and the other read-only
    # commands refuse a missing root (docs/cli.md)
    with pytest.raises(InvalidArgument) as raised:
        stream_read_options({"root": str(tmp_path / "typo"), "queue": "sensors"})
    hint = str(raised.value)
    assert "any `boxmq` command" not in hint
    assert "`boxmq put`" in hint
    assert "`boxmq serve`" in hint


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"queue": "sensors", "state": "finished"}, "processed"),
        ({"queue": "sensors", "locktimeout": "1d"}, "'lockTimeout' is for a stream read"),
        ({"subscription": "$share/etl"}, "'subscription': '.share/etl': the share name must be"),
        ({"subscription": "$share/etl/sensors/#"}, "no subscription"),
    ],
)
def test_a_bad_batch_option_says_what_to_fix(root: str, options: dict[str, str], says: str) -> None:
    with pytest.raises((InvalidArgument, QueueNotFound), match=says):
        batch_read_options({"root": root, **options})


def test_options_are_read_by_their_camel_case_names_in_any_case(root: str) -> None:
    # Spark lower-cases the keys; users write camelCase.
    chosen = stream_read_options(
        {
            "ROOT": root,
            "queue": "sensors",
            "maxrecordspertrigger": "50",
            "lockTimeout": "2h",
            "checkpointLocation": "/ignored",
        }
    )
    assert chosen.max_records == 50
    assert chosen.lock_timeout == 7200.0
    assert chosen.consumer == "spark"
    assert stream_read_options({"path": root, "queue": "sensors"}).root == root
    assert stream_read_options({"root": root, "queue": "sensors"}).lock_timeout == (
        DEFAULT_LOCK_TIMEOUT
    )
    batch = batch_read_options({"root": root, "queue": "sensors", "state": "Processed"})
    assert batch.state is State.PROCESSED
    check_read({"root": root, "subscription": "a/#", "state": "error"})  # not created yet: fine


def test_root_and_a_path_naming_the_same_folder_are_one_root(
    root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`root` and the load()/save() path were compared as text, so
    `.option("root", "./data").save("data")` was refused as two roots (found reading root())."""
    monkeypatch.chdir(tmp_path)
    os.symlink("data", tmp_path / "link")
    for given, path in [
        ("./data", "data"),
        ("data", root),
        (root + "/", "data/."),
        ("other/../data", "data"),
        ("link", root),  # a symlink to the root: the same folder
    ]:
        options = {"root": given, "path": path, "queue": "sensors"}
        assert stream_read_options(options).root == os.path.abspath(given)
        assert batch_read_options(options).root == os.path.abspath(given)
        check_read(options)
        assert sink_options(options, frozenset({"body"})).root == os.path.abspath(given)


def test_root_and_a_path_naming_two_folders_are_refused_naming_both(
    root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "other").mkdir()
    for path in ["other", "missing", "data/..", "da\x00ta"]:  # a NUL: no folder at all
        with pytest.raises(InvalidArgument) as raised:
            sink_options({"root": "./data", "path": path, "queue": "q"}, frozenset({"body"}))
        said = str(raised.value)
        assert "'./data'" in said
        assert repr(path) in said
        assert root in said  # what each names, for a relative one
        assert repr(os.path.abspath(path)) in said


def test_a_subscription_is_found_without_subscribing(root: str) -> None:
    with boxmq.open(root) as box:
        path = box.topics.attach_dropbox("$share/etl/sensors/#", "spark")
        box.topics.attach_dropbox("alerts/#", "auditor")
    assert subscription_dropbox(root, "$share/etl/sensors/#", "anyone") == path
    assert subscription_dropbox(root, "alerts/#", "auditor").endswith("client.auditor")
    with pytest.raises(QueueNotFound, match="subscriber 'spark'"):
        subscription_dropbox(root, "alerts/#", "spark")


@pytest.mark.parametrize(
    ("options", "columns", "says"),
    [
        ({"queue": "a", "topic": "b"}, {"body"}, "not both"),
        ({}, {"body"}, "say where the messages go"),
        ({"queue": " "}, {"body"}, "empty"),
        ({"queue": "q", "state": "target"}, {"body"}, "is for a batch read, not a write$"),
        ({"queue": "q", "subscription": "a/#"}, {"body"}, "is for a read, not a write"),
        ({"queue": "q", "maxrecordspertrigger": "5"}, {"body"}, "'maxRecordsPerTrigger' is for"),
        ({"queue": "q", "FSYNC": "sometimes"}, {"body"}, "'fsync' is 'sometimes'; choose one of"),
        ({"queue": "topic-root"}, {"body"}, "option 'queue': 'topic-root' is where topics live"),
        # at save(), naming the option: a topic no row can go to failed every row in the tasks
        ({"topic": "alerts/+"}, {"body"}, "^boxmq data source: option 'topic': .*wildcards"),
        ({"topic": "alerts/\ud800"}, {"body"}, "option 'topic': .*no lone surrogates"),
        ({"topic": "a" * 80}, {"body"}, "option 'topic': the topic is too long .* at most 79"),
        ({"topic": "$SYS/broker/version"}, {"body"}, r"option 'topic': .*\$SYS topics are"),
    ],
)
def test_a_bad_sink_option_says_what_to_fix(
    root: str, options: dict[str, str], columns: set[str], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        sink_options({"root": root, **options}, frozenset(columns))


@pytest.mark.parametrize(
    ("read", "options", "says"),
    [
        (check_read, {"queue": "s", "topic": "a"}, "'topic' is for a write, not a read .*'subs"),
        (stream_read_options, {"TOPIC": "a/b"}, "for a write, not a stream read .*'subscription'"),
        (batch_read_options, {"topic": "a/b"}, "for a write, not a batch read .*'subscription'"),
    ],
)
def test_a_write_option_given_to_a_read_says_what_a_read_takes(
    root: str, read: Callable[[dict[str, str]], object], options: dict[str, str], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        read({"root": root, **options})


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"subscription": "a/#"}, "'subscription' is for a read, not a write .*'topic'"),
        ({"queue": "q", "consumer": "etl"}, "'consumer' is for a read, not a write$"),
        # JDBC's numPartitions bounds a write's tasks; here the DataFrame's partitions are them
        ({"queue": "q", "numpartitions": "4"}, "'numPartitions' is for a read, .*repartition"),
    ],
)
def test_a_read_option_given_to_a_write_says_what_a_write_takes(
    root: str, options: dict[str, str], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        sink_options({"root": root, **options}, frozenset({"body"}))


@pytest.mark.parametrize(
    ("read", "options", "says"),
    [
        (check_read, {"maxRecordPerTrigger": "5"}, "'maxrecordpertrigger' \\(did you mean 'maxR"),
        (stream_read_options, {"lock_timeout": "1h"}, "\\(did you mean 'lockTimeout'\\?\\) for"),
        (batch_read_options, {"numPartition": "2"}, "did you mean 'numPartitions'"),
        # nothing near: the list of the options alone
        (check_read, {"colour": "red"}, "^[^(]*unknown option 'colour' for a read; the options"),
        (check_read, {"a": "1", "bb": "2"}, "unknown options 'a', 'bb' for a read; the options"),
    ],
)
def test_a_misspelt_option_names_the_one_meant(
    root: str, read: Callable[[dict[str, str]], object], options: dict[str, str], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        read({"root": root, "queue": "sensors", **options})
    with pytest.raises(InvalidArgument, match="did you mean 'topic'"):
        sink_options({"root": root, "topics": "a/b"}, frozenset({"body"}))


def test_a_sink_root_that_is_no_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="is not a folder; check the path"):
        sink_options({"root": str(tmp_path / "typo"), "queue": "q"}, frozenset({"body"}))


def test_a_topic_option_as_long_as_a_name_holds_is_taken(root: str) -> None:
    assert sink_options({"root": root, "topic": "a" * 79}, frozenset({"body"})).topic == "a" * 79


def test_a_topic_column_can_say_where_each_row_goes(root: str) -> None:
    chosen = sink_options({"root": root}, frozenset({"body", "topic"}))
    assert (chosen.queue, chosen.topic) == (None, None)


# -- rows as messages ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("columns", "says"),
    [
        ([("value", "binary")], "unknown column"),
        ([("priority", "integer")], "need a 'body' column"),
        ([("body", "integer")], "column 'body' is integer"),
        ([("body", "binary"), ("properties", "array<string>")], "must be map"),
    ],
)
def test_a_sink_schema_without_a_usable_body_is_refused(
    columns: list[tuple[str, str]], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        messages.layout_of(columns)


def _message(
    row: dict[str, object], topic: str | None = None, side_files: SideFiles | None = None
) -> tuple[boxmq.Envelope, bytes]:
    kinds = {str: "string", bytes: "binary", int: "integer", dict: messages.STRING_MAP}
    kinds |= {datetime.datetime: "timestamp"}
    columns = [(name, kinds[type(value)]) for name, value in row.items()]
    layout = messages.layout_of(columns)
    ids = IdFactory(boxmq.SystemClock())
    envelope, body, _ = messages.message_of(list(row.values()), layout, ids, topic, side_files)
    return envelope, body


def test_a_row_carries_its_metadata_into_the_message() -> None:
    expires = datetime.datetime(2031, 1, 2, 3, 4, 5)
    envelope, body = _message(
        {
            "body": "21.5",
            "priority": 7,
            "correlation_id": "c1",
            "reply_to": "replies",
            "type": "reading",
            "expiration": expires,
            "properties": {"sensor": "s1", "unit": "C"},
            "destination": "ignored",
        }
    )
    assert body == b"21.5"
    assert envelope.message_class is MessageClass.TEXT
    assert envelope.priority == 7
    assert (envelope.correlation_id, envelope.reply_to, envelope.type) == (
        "c1",
        "replies",
        "reading",
    )
    assert envelope.expiration == int(expires.timestamp() * 1000)
    assert envelope.user_properties() == {"sensor": "s1", "unit": "C"}
    assert envelope.topic is None


def test_the_topic_option_wins_over_the_topic_column() -> None:
    envelope, _ = _message({"body": b"x", "topic": "from/column"}, topic="from/option")
    assert envelope.topic == "from/option"
    envelope, _ = _message({"body": b"x", "topic": "from/column"})
    assert envelope.topic == "from/column"
    assert envelope.message_class is MessageClass.BYTES


def test_a_row_to_a_queue_keeps_no_topic_from_the_topic_column() -> None:
    """A queue's message has no topic (`put` gives none; docs/spark.md reads it as null): the
    column's was stored as the topic of a subscription's copy, which hash-by-key grouped by."""
    columns = [("body", "binary"), ("topic", "string")]
    ids = IdFactory(boxmq.SystemClock())
    to_queue = messages.layout_of(columns, to_queue=True)
    envelope, _, _ = messages.message_of([b"x", "sensors/r1/temp"], to_queue, ids, None)
    assert (envelope.topic, envelope.group_key, envelope.properties) == (None, None, ())
    to_topics = messages.layout_of(columns)
    envelope, _, _ = messages.message_of([b"x", "sensors/r1/temp"], to_topics, ids, None)
    assert envelope.topic == "sensors/r1/temp"


@pytest.mark.parametrize(
    ("row", "error", "says"),
    [
        (
            {"body": b"x", "properties": {"bx_dc": "1"}},
            InvalidName,
            "^boxmq sink: column 'properties': property name 'bx_dc' starts with bx_, which "
            "boxmq keeps for its own properties: give it another name$",
        ),
        (  # the row, when it has an id: one row of millions fails the query
            {"body": b"x", "message_id": "m7", "properties": {"bx_nb": "1"}},
            InvalidName,
            "^boxmq sink: column 'properties' of message_id 'm7': property name 'bx_nb' ",
        ),
        ({"body": b"x", "properties": {"": "1"}}, InvalidName, "'': a name is a non-empty"),
        ({"body": b"x", "priority": 2**40}, InvalidArgument, "priority"),
        ({"body": b"x", "class": "Q"}, InvalidArgument, "M, B, S, P, O, T"),
        ({"body": b"x", "topic": "a/+/b"}, InvalidArgument, "wildcards"),
        ({"body": b"x", "topic": "$SYS"}, InvalidArgument, r"^boxmq sink: topic name '\$SYS': "),
        (  # stored, where the API and boxmq put refuse it: a request no one could answer
            {"body": b"x", "reply_to": "r/#"},
            InvalidArgument,
            "^boxmq sink: column 'reply_to': 'r/#' holds a wildcard",
        ),
        (
            {"body": b"x", "message_id": "m7", "reply_to": "a/+"},
            InvalidArgument,
            "^boxmq sink: column 'reply_to' of message_id 'm7': 'a/\\+' holds a wildcard",
        ),
        ({"body": b"x", "correlation_id": "c" * 200}, MetadataTooLong, "correlation"),
    ],
)
def test_a_row_that_cannot_be_a_message_is_refused(
    row: dict[str, object], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        _message(row)


@pytest.mark.parametrize("topic", [None, "alerts/a"])
def test_properties_too_long_for_a_name_go_to_a_side_file(
    tmp_path: Path, topic: str | None
) -> None:
    """Where the sink has its root's side files, a row's long properties leave the name for one
    (written at once, before the staged file names it); without, the row is refused."""
    long = {"note": "y" * 200, "unit": "C"}
    row: dict[str, object] = {"body": b"x", "properties": long}
    with pytest.raises(MetadataTooLong, match="boxmq sink: message"):
        _message(row, topic)
    sides = SideFiles(str(tmp_path))
    envelope, _ = _message(row, topic, sides)
    assert envelope.topic == topic
    assert V5Reader(sides).properties(envelope) == long
    assert len(os.listdir(sides.path)) == 1
    short, _ = _message({"body": b"x", "properties": {"unit": "C"}}, topic, sides)
    assert short.user_properties() == {"unit": "C"}  # a name that fits keeps them


def test_a_row_that_cannot_fit_even_with_a_side_file_names_what_to_shorten(tmp_path: Path) -> None:
    row: dict[str, object] = {"body": b"x", "type": "t" * 100, "properties": {"n": "y" * 99}}
    with pytest.raises(MetadataTooLong, match=r"in a side file.*shorten the type"):
        _message(row, side_files=SideFiles(str(tmp_path)))


def test_a_rows_reply_to_the_side_files_key_leaves_no_room_for_goes_there_too(
    tmp_path: Path,
) -> None:
    """docs/file-format.md, "Properties too long for the name": where the key leaves the
    reply-to no room, it goes to the side file as an MQTT v5 request's Response Topic, and
    reads back in the `reply_to` column (V5Reader, what the source shows); it was refused."""
    row: dict[str, object] = {"body": b"x", "reply_to": "r" * 80, "properties": {"n": "y" * 99}}
    sides = SideFiles(str(tmp_path))
    envelope, _ = _message(row, side_files=sides)
    assert envelope.reply_to is None
    assert V5Reader(sides).reply_to(envelope) == "r" * 80
    assert V5Reader(sides).properties(envelope)["n"] == "y" * 99


def test_a_row_read_from_an_mqtt_v5_request_is_written_back_with_its_exact_correlation_data(
    tmp_path: Path,
) -> None:
    """Its correlation_id and reply_to columns show its Correlation Data and Response Topic,
    which its properties carry too: written back to a topic, both went into the name, which
    no longer fitted beside the side file's key with an expiration (MetadataTooLong), and the
    name's correlation id won, so a v5 subscriber got the base64 text of binary Correlation
    Data, not its bytes (found by a Spark hunt)."""
    data = b"\x00\xffcd"
    text = base64.b64encode(data).decode()  # what both columns show for binary data
    row: dict[str, object] = {
        "body": b"x",
        "correlation_id": text,
        "reply_to": "replies/x",
        "expiration": datetime.datetime(2031, 1, 2, 3, 4, 5),
        "properties": {
            "mqtt.correlation-data": text,
            "mqtt.response-topic": "replies/x",
            "mqtt.content-type": "application/json",
            "room": "r1",
        },
    }
    sides = SideFiles(str(tmp_path))
    envelope, _ = _message(row, "back/x", sides)

    sent = _properties_of(envelope, sides)  # what an MQTT v5 subscriber gets
    assert (sent.correlation_data, sent.response_topic) == (data, "replies/x")
    reader = V5Reader(sides)  # and what the columns show, read again
    assert (reader.correlation_id(envelope), reader.reply_to(envelope)) == (text, "replies/x")


@pytest.mark.parametrize(
    ("values", "accepted"),
    [
        ("string", True),
        ("int", True),  # str() of a whole number is its text, as Spark's cast to string
        ("bigint", True),
        ("boolean", False),  # written as 'True', where a read shows 'true'
        ("binary", False),  # written as "b'hi'"
        ("double", False),  # 1e20 written as '1e+20', Spark's cast says '1.0E20'
        ("timestamp", False),
        ("array<string>", False),
    ],
)
def test_a_properties_map_takes_string_or_whole_number_values(values: str, accepted: bool) -> None:
    """The sink wrote each value as Python's str(): a map<string,binary> column stored the text
    "b'hi'", a boolean 'True' (found by a Spark hunt); other values need a cast to string."""
    from pyspark.sql import types

    from boxmq.spark.sink import columns_of

    value_type = {
        "string": types.StringType(),
        "int": types.IntegerType(),
        "bigint": types.LongType(),
        "boolean": types.BooleanType(),
        "binary": types.BinaryType(),
        "double": types.DoubleType(),
        "timestamp": types.TimestampType(),
        "array<string>": types.ArrayType(types.StringType()),
    }[values]
    properties = types.MapType(types.StringType(), value_type)
    schema = types.StructType(
        [types.StructField("body", types.BinaryType()), types.StructField("properties", properties)]
    )
    if accepted:
        messages.layout_of(columns_of(schema))
    else:
        with pytest.raises(
            InvalidArgument,
            match=rf"column 'properties' is map<string,{values}>; .*cast\('map<string,string>'\)",
        ):
            messages.layout_of(columns_of(schema))


@pytest.mark.parametrize(
    "expiration", [-5000, 0, datetime.datetime(1960, 1, 1), datetime.datetime(1970, 1, 1)]
)
def test_an_expiration_at_or_before_1970_has_passed(expiration: object) -> None:
    """A time before the epoch was clamped to 0, which a name reads as 'never expires': a
    row that had long expired was stored for ever (found by a Spark hunt)."""
    if isinstance(expiration, datetime.datetime):  # PySpark hands timestamps over as local time
        expiration = expiration.replace(tzinfo=datetime.UTC).astimezone().replace(tzinfo=None)
    envelope, _ = _message({"body": b"x", "expiration": expiration})
    assert envelope.expiration == 1  # the first millisecond: expired at once
    assert decode_lenient(encode(envelope))[0].expiration == 1  # as the name says it


@pytest.mark.parametrize("key", ["spark.sql.shuffle.partitions", "Spark.Executor.Memory"])
def test_a_spark_setting_given_as_an_option_says_it_goes_in_the_session_conf(
    root: str, key: str
) -> None:
    """Spark hands a Python data source none of its own settings, so a `spark.` option is the
    user's mistake: it was dropped in silence, and the setting never took effect."""
    for read in (check_read, stream_read_options, batch_read_options):
        with pytest.raises(InvalidArgument, match=r"is a Spark setting.*spark\.conf\.set"):
            read({"root": root, "queue": "sensors", key: "4"})
    with pytest.raises(InvalidArgument, match=r"is a Spark setting.*spark\.conf\.set"):
        sink_options({"root": root, "queue": "q", key: "4"}, frozenset({"body"}))


def test_of_two_spark_settings_the_first_by_name_is_named(root: str) -> None:
    # One at a time, as Spark handed them over (lower case), whatever order they came in
    given = {"spark.sql.x": "1", "root": root, "queue": "q", "Spark.App.Name": "n"}
    with pytest.raises(InvalidArgument, match=r"option 'spark\.app\.name' is a Spark setting"):
        check_read(given)


def test_a_choice_takes_ascii_blanks_around_it_as_a_count_or_duration_does(root: str) -> None:
    # fsync and state refused " never" though numPartitions took " 2 " and lockTimeout " 2h"
    batch = batch_read_options(
        {"root": root, "queue": "sensors", "state": " Processed\t", "fsync": "never "}
    )
    assert batch.state is State.PROCESSED
    assert sink_options({"root": root, "queue": "q", "fsync": "\tnever"}, frozenset()).fsync == (
        FsyncPolicy.NEVER
    )
    check_read({"root": root, "queue": "sensors", "state": " error ", "fsync": " interval"})
    with pytest.raises(InvalidArgument, match="'fsync' is '\\\\xa0never'; choose one of"):
        check_read({"root": root, "queue": "sensors", "fsync": "\u00a0never"})
