"""A persistent session's record on disk: round trips, defaults, and what is not a record."""

from __future__ import annotations

import errno
import json
import logging
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.mqtt.packets import Will
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.session import NEVER
from boxmq.mqtt.session_record import (
    DeliveryOptions,
    RecordUnreadable,
    SessionRecord,
    read_record,
    read_records,
    record_named,
    record_path,
    remove_record,
    write_record,
)
from boxmq.mqtt.stored import consumer_name

_options = st.builds(
    DeliveryOptions,
    identifier=st.none() | st.integers(min_value=1, max_value=268_435_455),  # §3.8.2.1.2
    retain_as_published=st.booleans(),
    qos=st.none() | st.sampled_from([0, 1, 2]),
)
_mqtt_chars = st.characters(codec="utf-8", exclude_characters="\0")  # MQTT-1.5.4-1/2
_wills = st.builds(
    Will,
    topic=st.text(_mqtt_chars, min_size=1, max_size=20),
    payload=st.binary(max_size=64),
    qos=st.sampled_from([0, 1, 2]),
    retain=st.booleans(),
    properties=st.builds(
        lambda delay, pairs: Properties.build(will_delay_interval=delay, user_properties=pairs),
        st.none() | st.integers(min_value=0, max_value=2**32 - 1),
        st.lists(st.tuples(st.text(_mqtt_chars, max_size=5), st.text(_mqtt_chars, max_size=5))),
    ),
)
_records = st.builds(
    SessionRecord,
    # An MQTT client id is UTF-8 (the codec refuses surrogates and NUL, MQTT-1.5.4-1/2).
    client_id=st.text(
        st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=20
    ),
    expiry=st.integers(min_value=0, max_value=NEVER),
    holder=st.none() | st.text(max_size=30),
    server=st.none() | st.text(max_size=30),
    disconnected_at=st.none() | st.floats(min_value=0, max_value=4e9),
    options=st.dictionaries(st.text(min_size=1, max_size=30), _options, max_size=4),
    username=st.none() | st.text(max_size=10),
    will=st.none() | _wills,
    will_due=st.none() | st.floats(min_value=0, max_value=4e9),
    releasing=st.lists(st.integers(min_value=1, max_value=65_535), max_size=4).map(tuple),
    sent=st.lists(
        st.tuples(
            st.text(max_size=20),
            st.integers(min_value=1, max_value=65_535),
            st.none() | st.text(max_size=20),
        ),
        max_size=4,
    ).map(tuple),
    sent_qos2=st.lists(st.integers(min_value=1, max_value=65_535), max_size=4).map(tuple),
    next_packet_id=st.none() | st.integers(min_value=1, max_value=65_535),
    counted_by=st.none() | st.text(max_size=30),
)


@given(_records)
def test_a_record_written_is_read_back_as_it_was(record: SessionRecord) -> None:
    with tempfile.TemporaryDirectory() as root:  # not tmp_path: one per example
        write_record(root, record)
        assert read_record(root, record.client_id) == record


def test_a_record_keeps_its_will_binary_payload_and_properties(tmp_path: Path) -> None:
    root = str(tmp_path)
    will = Will(
        "status/dev",
        b"\x00\xff gone",
        2,
        True,
        Properties.build(
            will_delay_interval=30,
            correlation_data=b"\x01\x02",
            user_properties=[("k", "v")],
        ),
    )
    record = SessionRecord(
        "dev", 60, disconnected_at=100.0, username="u", will=will, will_due=130.0
    )
    write_record(root, record)
    back = read_record(root, "dev")
    assert back == record
    assert back is not None
    assert back.will is not None
    assert back.will.properties.will_delay_interval == 30
    assert back.will.properties.correlation_data == b"\x01\x02"
    assert back.will.properties.user_properties == (("k", "v"),)


def test_a_record_without_the_subscriptions_of_what_it_sent_names_none(tmp_path: Path) -> None:
    """A record of a boxmq before 2026-11-30 names the messages in flight by id alone: they
    are taken back from whichever of the session's dropboxes holds them, as that boxmq did.
    And the pairs of `sent` stay as they were, so that such a boxmq reads a newer record."""
    folder = tmp_path / ".mqtt" / "sessions"
    folder.mkdir(parents=True)
    (folder / "old").write_text('{"client_id": "old", "expiry": 60, "sent": [["m1", 7]]}')
    record = read_record(str(tmp_path), "old")
    assert record is not None
    assert record.sent == (("m1", 7, None),)
    write_record(str(tmp_path), SessionRecord("new", 60, sent=(("m1", 7, "a/#"),)))
    data = json.loads((folder / "new").read_text())
    assert data["sent"] == [["m1", 7]]
    assert data["sent_subscriptions"] == ["a/#"]


def test_a_record_with_a_damaged_will_is_not_a_record(tmp_path: Path) -> None:
    folder = tmp_path / ".mqtt" / "sessions"
    folder.mkdir(parents=True)
    will = '{"topic": "t", "payload": "", "properties": "AQ=="}'  # a property cut short
    (folder / "bad").write_text(f'{{"client_id": "bad", "expiry": 60, "will": {will}}}')
    assert read_record(str(tmp_path), "bad") is None


def test_a_record_is_found_under_its_escaped_id_and_removed(tmp_path: Path) -> None:
    root = str(tmp_path)
    record = SessionRecord(
        "dev/1:a",  # '/' and ':' cannot be in a file name here: escaped
        120,
        disconnected_at=1_700_000_000.5,
        options={"$share/g/a/#": DeliveryOptions(7, True), "b": DeliveryOptions()},
    )
    write_record(root, record)
    assert read_record(root, "dev/1:a") == record
    assert list(read_records(root)) == [record]
    remove_record(root, "dev/1:a")
    assert read_record(root, "dev/1:a") is None
    remove_record(root, "dev/1:a")  # twice: nothing to do


def test_the_share_groups_being_left_are_kept_and_an_older_record_names_none(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    record = SessionRecord("dev", 60, leaving=("$share/g/a/#",))
    write_record(root, record)
    assert read_record(root, "dev") == record
    (tmp_path / ".mqtt" / "sessions" / "old").write_text('{"client_id": "old", "expiry": 60}')
    older = read_record(root, "old")
    assert older is not None
    assert older.leaving is None


def test_a_session_made_only_the_subscriptions_its_record_names() -> None:
    """Another under its name was made by another door (the CLI, the Python API)."""
    record = SessionRecord(
        "dev",
        60,
        options={"a/#": DeliveryOptions(), "$share/g/b": DeliveryOptions()},
        leaving=("$share/g/c",),
    )
    assert [record.made(t) for t in ("a/#", "$share/g/b", "$share/g/c")] == [True] * 3
    assert [record.made(t) for t in ("cli/#", "a/+", "$share/h/a/#")] == [False] * 3
    # A record that lists no groups being left (an older boxmq's): any membership may be one.
    older = SessionRecord("dev", 60, options={"a/#": DeliveryOptions()})
    assert (older.made("$share/h/a/#"), older.made("cli/#")) == (True, False)


@pytest.mark.parametrize(
    "client_id",
    ["laptop", "dev/1", "100%", "%2F", "a%25b/c", "device-" + "7" * 40, "é/" * 10],
)
def test_a_record_is_found_by_its_subscriber_name_on_disk(tmp_path: Path, client_id: str) -> None:
    """The name its subscriptions go by (escaped; a long id's shortened with a hash), as
    the CLI's --name gives it; no other name finds it."""
    root = str(tmp_path)
    record = SessionRecord(client_id, 60)
    write_record(root, record)
    write_record(root, SessionRecord("other", 60))
    name = consumer_name(client_id)
    assert record_named(root, name) == record
    for other in {client_id + "x", name + "x", "laptop%", "%h0", "%2f" + name, "x%2Fy"} - {name}:
        assert record_named(root, other) is None, other


def test_a_long_names_record_is_found_without_warning_of_the_unrelated_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`boxmq subscribe --name <a long client id's name>` read every record to find its
    own, and warned of each damaged one, files that had nothing to do with it."""
    root = str(tmp_path)
    client_id = "device-" + "7" * 40
    record = SessionRecord(client_id, 60)
    write_record(root, record)
    (tmp_path / ".mqtt" / "sessions" / "half").write_text('{"client_id": "half", "exp')
    with caplog.at_level(logging.WARNING, "boxmq.mqtt.session_record"):
        assert record_named(root, consumer_name(client_id)) == record
        assert record_named(root, consumer_name("device-" + "8" * 40)) is None
    assert caplog.records == []


@pytest.mark.parametrize("client_id", ["dev", "device-" + "7" * 40])
def test_a_record_the_disk_refuses_to_read_is_named_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client_id: str
) -> None:
    """EIO of a failing disk on the record `--name` looks up reached the CLI as the bare
    OSError: now the record's file, the errno and what to check, and nothing is removed."""
    root = str(tmp_path)
    write_record(root, SessionRecord(client_id, 60))
    path = record_path(root, client_id)

    def failing(name: str) -> bytes:
        raise OSError(errno.EIO, "Input/output error", name)

    monkeypatch.setattr("boxmq.mqtt.session_record.read_file", failing)
    with pytest.raises(RecordUnreadable) as raised:
        record_named(root, consumer_name(client_id))
    assert str(raised.value) == (
        f"the MQTT session record {path} cannot be read: EIO (Input/output error); the disk "
        "reported an I/O error: check the device (dmesg) before going on. It is left as it is"
    )
    assert os.path.exists(path)


def test_a_record_with_only_the_first_fields_loads_with_the_defaults(tmp_path: Path) -> None:
    folder = tmp_path / ".mqtt" / "sessions"
    folder.mkdir(parents=True)
    (folder / "old").write_text('{"client_id": "old", "expiry": 60, "some_later_field": 1}')
    record = read_record(str(tmp_path), "old")
    assert record is not None
    assert (record.client_id, record.expiry) == ("old", 60)
    assert (record.holder, record.disconnected_at, record.options) == (None, None, {})
    assert (record.username, record.will, record.will_due) == (None, None, None)
    assert record.releasing == ()
    assert record.sent == ()
    assert record.next_packet_id is None  # a restart's new ids: past those it names
    assert (record.counted_by, record.counter) == (None, None)  # a start takes it on


def test_the_server_holding_a_session_counts_it_else_the_one_that_took_it_on() -> None:
    """`counter`: the broker that times the session's end and its Will (lifetimes.py)."""
    kept = SessionRecord("dev", 60, server="b", counted_by="stale")
    assert kept.counter == "b"
    assert SessionRecord("dev", 60, holder="a", server="a").counter == "a"
    assert SessionRecord("dev", 60, holder="a").counter == "a"  # an older boxmq's
    taken = SessionRecord("dev", 60, disconnected_at=1.0, counted_by="c")
    assert (taken.held_by, taken.counter) == (None, "c")


@pytest.mark.parametrize("ids", ["[0]", "[65536]", '["7"]', "[true]", "7"])
def test_a_record_whose_released_packet_ids_are_not_packet_ids_is_not_a_record(
    tmp_path: Path, ids: str
) -> None:
    folder = tmp_path / ".mqtt" / "sessions"
    folder.mkdir(parents=True)
    (folder / "bad").write_text(f'{{"client_id": "bad", "expiry": 60, "releasing": {ids}}}')
    assert read_record(str(tmp_path), "bad") is None


def test_a_damaged_record_is_skipped_with_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Skipped in silence, its session was missing from `boxmq session ls` and never ended,
    its Will never sent, and nothing told the user which file to look at (found by an
    upgrade hunt: a record this boxmq cannot read, from an older one or damaged)."""
    root = str(tmp_path)
    write_record(root, SessionRecord("good", 5))
    folder = tmp_path / ".mqtt" / "sessions"
    (folder / "half").write_text('{"client_id": "half", "exp')
    (folder / "other").write_text('{"client": "not a session"}')
    (folder / ".tmp-123").write_text("being written")
    with caplog.at_level(logging.WARNING, "boxmq.mqtt.session_record"):
        assert [r.client_id for r in read_records(root)] == ["good"]
    assert sorted(os.listdir(folder)) == [".tmp-123", "good", "half", "other"]  # none removed
    told = sorted(r.getMessage() for r in caplog.records)
    assert len(told) == 2
    for line, name in zip(told, ["half", "other"], strict=True):
        assert line.startswith(f"{folder / name} is no session record this boxmq reads (")
        assert "delete the file to forget the session" in line


def test_a_record_that_cannot_be_read_is_told_and_left_and_the_others_are_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a record that is none (ValueError) was skipped: one the file system refused to
    read (EIO of a failing disk; ELOOP here, a symlink to itself; EISDIR) raised out of the
    walk, so one such file stopped `boxmq serve` from starting, and `boxmq session ls` from
    listing the others (found by a second read). It is told at ERROR, naming the file and
    what to do, left as it is, and named to a caller that asks (`unread`)."""
    root = str(tmp_path)
    write_record(root, SessionRecord("good", 5))
    folder = tmp_path / ".mqtt" / "sessions"
    os.symlink("looping", folder / "looping")
    (folder / "a-folder").mkdir()
    unread: list[str] = []
    with caplog.at_level(logging.WARNING, "boxmq.mqtt.session_record"):
        assert [r.client_id for r in read_records(root, unread)] == ["good"]
    assert sorted(unread) == [str(folder / "a-folder"), str(folder / "looping")]
    assert sorted(os.listdir(folder)) == ["a-folder", "good", "looping"]  # none removed
    assert os.readlink(folder / "looping") == "looping"
    told = sorted((r.levelno, r.getMessage()) for r in caplog.records)
    assert [level for level, _ in told] == [logging.ERROR, logging.ERROR]
    for (_, line), name in zip(told, ["a-folder", "looping"], strict=True):
        assert line.startswith(f"{folder / name} cannot be read (")
        assert "left as it is" in line


def test_the_deadline_counts_from_the_disconnect() -> None:
    assert SessionRecord("a", 30, disconnected_at=100.0).deadline() == 130.0
    assert SessionRecord("a", 30, holder="connected").deadline() is None
    assert SessionRecord("a", NEVER, disconnected_at=100.0).deadline() is None
    assert SessionRecord("a", 0, disconnected_at=100.0).deadline() == 100.0


def test_a_write_the_disk_refuses_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: bytes) -> None:
        os.write(fd, data[:1])  # begun, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    write_record(str(tmp_path), SessionRecord("a", 60))
    monkeypatch.setattr("boxmq.store.records._write_all", full)
    with pytest.raises(OSError, match="No space"):
        write_record(str(tmp_path), SessionRecord("b", 60))
    assert os.listdir(tmp_path / ".mqtt" / "sessions") == ["a"]
