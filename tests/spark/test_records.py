"""Rows of message files (boxmq.spark.records): the cached decode reads every name as the full
decode does, without a JVM."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from boxmq.client.spill import spilled
from boxmq.errors import MetadataTooLong
from boxmq.model import (
    PROPERTIES_FILE,
    V5_PROPERTIES,
    ConsumerId,
    Envelope,
    MessageId,
    Property,
    PropertyType,
    timestamp_of,
)
from boxmq.mqtt.properties import Properties
from boxmq.spark.records import COLUMNS, Columns, FileRef, _unlocked, property_text, read_files
from boxmq.store.layout import State
from boxmq.store.names import Lock, decode_lenient, encode, locked_name, split_lock
from boxmq.store.side_files import SideFiles

_ID = "1795335668836000-2435950913"
NAMES = [
    encode(Envelope(MessageId(_ID))),
    encode(Envelope(MessageId(_ID), properties=(Property("sensor", PropertyType.STRING, "s1"),))),
    encode(Envelope(MessageId("1795335668836001-7"), priority=9, expiration=1_900_000_000_000)),
    encode(
        Envelope(
            MessageId("id with spaces.and:dots"),  # escaped: the full decode
            correlation_id="c-1",
            reply_to="replies",
            type="reading",
            properties=(
                Property("bx_topic", PropertyType.STRING, "sensors/a"),
                Property("bx_dc", PropertyType.INT, 2),
                Property("count", PropertyType.INT, 3),
                Property("ok", PropertyType.BOOLEAN, True),
            ),
        )
    ),
    "not-a-boxmq-name",  # dropped by a script
    "4..T",  # an empty id: not decodable, the whole name is the id
    "4.plain.Q",  # a class that does not exist
    "4.plain.T.notanumber",
    "4.plain%ZZ.T",
    "4.a.T.0.......",  # too many fields
]


def _reference(name: str, state: State) -> tuple[object, ...]:
    """The row as the full decode reads it (the columns the file's name decides)."""
    envelope, _ = decode_lenient(name)
    stamp = envelope.timestamp
    return (
        envelope.message_id,
        "q",
        envelope.topic,
        envelope.priority,
        envelope.message_class.value,
        stamp * 1000 if stamp is not None else 7_000_000,
        envelope.expiration * 1000 if envelope.expiration else None,
        envelope.correlation_id,
        envelope.reply_to,
        envelope.type,
        [(key, property_text(value)) for key, value in envelope.user_properties().items()],
        b"body",
        envelope.delivery_count + (state is State.PROCESSING),
    )


@pytest.mark.parametrize("state", [State.TARGET, State.PROCESSING])
def test_the_cached_decode_reads_every_name_as_the_full_decode(state: State) -> None:
    columns = Columns("q", state)
    for _ in range(2):  # the second time from the cache
        for name in NAMES:
            columns.add(name, b"body", lambda: 7.0)
    rows = list(zip(*columns.values, strict=True))
    assert rows == [_reference(name, state) for name in NAMES * 2]
    assert len(rows[0]) == len(COLUMNS)
    assert timestamp_of(str(rows[0][0])) is not None


@pytest.mark.parametrize("base", [n for n in NAMES if "@" not in n])
@pytest.mark.parametrize(
    "suffix",
    [
        "",
        "@spark%7E0f975228cd%7E7@1795422068836@",
        "@spark%7E0f975228cd%7E1207@1795422068836@",  # the same kind, another number
        "@worker@1795422068836@a-token",
        "@not an owner@1@",  # '@' in a name that is no lock
        "@user@host",
        "@x@123456789012345678@",  # a deadline too long
        "@%ZZ@1@",
    ],
)
def test_a_lock_suffix_comes_off_exactly_when_split_lock_takes_it_off(
    base: str, suffix: str
) -> None:
    name = base + suffix
    assert _unlocked(name) == split_lock(name)[0]
    assert _unlocked(name) == _unlocked(name)  # cached


def test_a_boxmq_lock_comes_off() -> None:
    name = NAMES[1]
    locked = locked_name(name, Lock(ConsumerId("spark~0f975228cd~42"), 1_795_422_068_836, ""))
    assert _unlocked(locked) == name


def test_mqtt_v5_properties_are_decoded_from_the_name_and_from_side_files(tmp_path: Path) -> None:
    short = Properties.build(user_properties=[("tenant", "acme")])
    long = Properties.build(user_properties=[("trace", "t" * 80)], response_topic="r/1")
    inline = base64.urlsafe_b64encode(short.raw).decode().rstrip("=")
    key = SideFiles(str(tmp_path)).put(long.raw)
    folder = tmp_path / "q" / "target"
    folder.mkdir(parents=True)
    names = []
    for id_, name, value in ((_ID, V5_PROPERTIES, inline), ("x2", PROPERTIES_FILE, key)):
        own = (
            Property("sensor", PropertyType.STRING, "s1"),
            Property(name, PropertyType.STRING, value),
        )
        names.append(encode(Envelope(MessageId(id_), properties=own)))
        (folder / names[-1]).write_bytes(b"{}")
    files = [FileRef(str(folder), name) for name in names * 2]  # the second time: remembered

    [columns] = read_files(files, "q", State.TARGET, chunk=10, root=str(tmp_path))

    replies = columns.values[COLUMNS.index("reply_to")]
    assert replies == [None, "r/1"] * 2  # as `Message.reply_to` shows them
    properties = columns.values[COLUMNS.index("properties")]
    assert (
        properties
        == [
            [("sensor", "s1"), ("tenant", "acme")],
            [("sensor", "s1"), ("mqtt.response-topic", "r/1"), ("trace", "t" * 80)],
        ]
        * 2
    )


def test_reply_to_correlation_id_and_properties_are_what_message_shows(tmp_path: Path) -> None:
    folder = tmp_path / "q" / "target"
    folder.mkdir(parents=True)
    names = [
        # a producer's mqtt.* (not the name's own fields): also its reply-to and correlation id
        encode(
            Envelope(
                MessageId(_ID),
                properties=(
                    Property("mqtt.response-topic", PropertyType.STRING, "r/2"),
                    Property("mqtt.correlation-data", PropertyType.STRING, "cmVxLTc="),
                ),
            )
        ),
        "4.s1.T.....kS=%FF",  # a script's bytes that are not UTF-8: shown as \\xNN
    ]
    for name in names:
        (folder / name).write_bytes(b"{}")

    [columns] = read_files([FileRef(str(folder), n) for n in names], "q", State.TARGET, chunk=9)

    assert columns.values[COLUMNS.index("reply_to")] == ["r/2", None]
    assert columns.values[COLUMNS.index("correlation_id")] == ["req-7", None]
    assert columns.values[COLUMNS.index("properties")][1] == [("k", "\\xff")]


def test_a_request_spilled_with_its_reply_to_and_correlation_id_shows_them_as_its_own(
    tmp_path: Path,
) -> None:
    """A put whose reply-to and correlation id left its name for the side file with its
    properties (client/spill.py, docs/file-format.md "Properties too long for the name"):
    the `reply_to` and `correlation_id` columns are what the producer gave, as
    `Message.reply_to` and `Message.correlation_id` show them."""
    request = Envelope(
        MessageId(_ID),
        reply_to="cfg/answers",
        correlation_id="req-7",
        properties=(Property("mqtt.content-type", PropertyType.STRING, "application/json"),),
    )

    def fields_left(candidate: Envelope) -> str:
        if candidate.reply_to is not None or candidate.correlation_id is not None:
            raise MetadataTooLong("no room beside the reply-to and the correlation id")
        return encode(candidate)

    _, name, _ = spilled(request, SideFiles(str(tmp_path)), fields_left, MetadataTooLong("long"))
    folder = tmp_path / "q" / "target"
    folder.mkdir(parents=True)
    (folder / name).write_bytes(b"{}")

    files = [FileRef(str(folder), name)]
    [columns] = read_files(files, "q", State.TARGET, chunk=1, root=str(tmp_path))

    assert columns.values[COLUMNS.index("reply_to")] == ["cfg/answers"]
    assert columns.values[COLUMNS.index("correlation_id")] == ["req-7"]
    [properties] = columns.values[COLUMNS.index("properties")]
    assert isinstance(properties, list)
    assert ("mqtt.content-type", "application/json") in properties


def test_a_chunk_ends_once_its_bodies_reach_the_byte_bound(tmp_path: Path) -> None:
    """A chunk is one Arrow batch, whose binary column holds at most 2 GiB: ten thousand rows
    of large messages made a ChunkedArray, and the task failed with a TypeError (found by a
    Spark hunt; shown with two 1.1 GiB bodies, too big for this suite)."""
    names = [encode(Envelope(MessageId(f"1795335668836000-{n}"))) for n in range(5)]
    for name, size in zip(names, (600, 500, 3000, 10, 10), strict=True):
        (tmp_path / name).write_bytes(b"x" * size)
    files = [FileRef(str(tmp_path), name) for name in names]
    chunks = read_files(files, "q", State.TARGET, chunk=100, chunk_bytes=1000)
    assert [len(columns) for columns in chunks] == [2, 1, 2]  # 1100, 3000 alone, 20
