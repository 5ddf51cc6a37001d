"""A file system that turns read-only under the MQTT door (a small tmpfs remounted ro, as the
kernel does after errors: tests/diskfull.py): the broker keeps its connections, says what
the disk refused, and carries on with nothing lost once it is writable again. The full
disk's tests are in test_mqtt_disk_full.py."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.diskfull import SmallDisk, small_disk
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    boxmq_cli_ok,
    drop,
    marked_and_bound,
    paho,
    record_deleted,
    recorded_away,
    serve_fresh,
    serve_process,
    start_server,
    stop_process,
)
from tests.waiting import logged, until

from boxmq.clock import ManualClock
from boxmq.mqtt.session_record import SessionRecord, read_record


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk") as disk:
        yield disk


@pytest.fixture
def running(disk: SmallDisk) -> Iterator[RunningServer]:
    with start_server(disk.path / "root", spares=0) as running:
        yield running


def _until_told(
    caplog: pytest.LogCaptureFixture, told: Callable[[str], bool], why: str, *, times: int = 1
) -> None:
    """Wait until `times` of the captured lines are `told` (the server logs from its own
    thread); `why` fails the wait."""
    until(lambda: sum(map(told, caplog.messages)) >= times, why)


def _back_refused(line: str) -> bool:
    """A line saying the record of the client "back" was refused."""
    return "back: session record not written" in line


def test_a_session_whose_messages_cannot_be_claimed_stays_connected_and_gets_them_later(
    running: RunningServer, disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim's OSError went up through the read being handled, which closed that
    connection: the subscriber's at each reconnect, so it never stayed connected while the
    disk was read-only (and the claims behind the refused one were never made again)."""
    subscriber = paho(running, "sub", clean=False, expiry=3600)
    subscriber.subscribe("t/#", qos=1)
    subscriber.stop()
    publisher = paho(running, "pub")
    for n in range(3):
        publisher.client.publish("t/a", f"m{n}".encode(), qos=1).wait_for_publish(WAIT)
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"), disk.read_only():
        subscriber = paho(running, "sub", clean=False, expiry=3600)
        assert subscriber.nothing(within=0.8)
        assert subscriber.disconnects.empty()
    refused = [r for r in caplog.records if "messages of t/# not sent" in r.getMessage()]
    assert len(refused) == 1, caplog.text  # told once, not at each tick
    assert "EROFS (Read-only file system)" in refused[0].getMessage()
    assert [subscriber.next().payload for _ in range(3)] == [b"m0", b"m1", b"m2"]
    assert subscriber.nothing(within=0.3)
    subscriber.stop()
    publisher.stop()


def test_a_session_record_the_disk_refuses_refuses_its_connect_with_what_to_fix(
    running: RunningServer, disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """Logged as "[Errno 30] Read-only file system: '...'", where every other refusal of
    the disk says which errno and what to do; and its CONNACK said the session was kept
    (v5: now 0x80, as for the other refusals of a read-only disk)."""
    with caplog.at_level(logging.WARNING, logger="boxmq.mqtt"), disk.read_only():
        client = paho(running, "c1", clean=False, expiry=3600, expect=0x80)
        client.stop()
    [line] = {r.getMessage() for r in caplog.records if "c1" in r.getMessage()}
    where = running.root / ".mqtt"  # a root's first session: the folder is made first
    assert line.startswith(
        "client c1 refused: its session's record was not written (unspecified error (0x80)): "
        f"the store failed at {where}"
    ), line
    assert line.endswith(
        "EROFS (Read-only file system); the file system is read-only "
        "(remounted after errors?): check it, remount rw"
    ), line


def test_a_broker_started_read_only_marks_itself_once_the_disk_is_writable_again(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """Its mark in .mqtt/brokers/ refused at start was never made again nor told: once the
    disk was writable, `boxmq unsubscribe` ended a connected client's share group membership
    while the broker still sent to it (as on a disk out of inodes: test_mqtt_disk_full)."""
    root = disk.path / "root"
    start_server(root, spares=0).shutdown()  # the root made
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        with disk.read_only():
            running = start_server(root, spares=0)
        try:
            marked_and_bound(running, "no mark once the disk was writable")
        finally:
            running.shutdown()
    told = logged(caplog, "/.mqtt/brokers")
    assert len(told) == 2, told  # refused once, then made
    assert "EROFS (Read-only file system)" in told[0], told
    assert told[1].endswith("/.mqtt/brokers at last"), told


def test_a_session_end_the_disk_refused_is_finished_once_it_is_writable_again(
    running: RunningServer, disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """A session that expired while the disk was read-only kept its record and subscription
    while the server ran: `boxmq session ls` listed it away, ending in the past, its
    dropbox went on collecting what was published to g/#, and its client's return resumed
    the ended session with those messages (found by the read-only hunt). The end is
    finished at a tick once the disk takes it, its refusals told once."""
    root = running.root
    gone = paho(running, "gone", clean=False, expiry=1)
    gone.subscribe("g/#", qos=1)
    drop(gone)
    recorded_away(root, "gone")
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        with disk.read_only():
            _until_told(caplog, "client gone: session expired".__eq__, "the session did not expire")
            time.sleep(1.5)  # ticks, each of which may try the end again
        record_deleted(root, "gone")
        # Told just after the record's deletion, which the wait above may see first.
        done = "client gone: what its session's end left on disk is deleted now"
        _until_told(caplog, done.__eq__, "the end's finish was not told")
    assert not (root / "topic-root" / "g%2F%23" / ".subscriptions" / "client.gone").exists()
    refused = logged(caplog, "so that is left on disk")
    assert len(refused) == 2, refused  # its subscription, its record: once each
    assert "gone" not in boxmq_cli_ok(root, "session", "ls")
    publisher = paho(running, "pub")
    publisher.publish("g/1", "after its end", qos=1)
    publisher.stop()
    back = paho(running, "gone", clean=False, expiry=60)
    assert not back.session_present
    assert back.nothing(within=0.3)
    back.stop()


def test_a_client_back_before_the_sweep_finished_its_ended_session_starts_a_new_one(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep finishes such an end once a second; a CONNECT of the client in between
    resumed the ended session from what was left on disk. It finishes the end first now
    and starts a new session. The broker's clock moves when the test says: its sweep ran
    once, with the session's end, while the disk was read-only, and not since."""
    clock = ManualClock()
    root = disk.path / "root"
    with start_server(root, spares=0, clock=clock) as running:
        gone = paho(running, "gone", clean=False, expiry=5)
        gone.subscribe("g/#", qos=1)
        drop(gone)
        recorded_away(root, "gone")
        with caplog.at_level(logging.INFO, logger="boxmq.mqtt"), disk.read_only():
            clock.advance(6)
            _until_told(caplog, "client gone: session expired".__eq__, "the session did not expire")
            time.sleep(0.3)  # the tick's sweep too
        assert (root / ".mqtt" / "sessions" / "gone").exists()  # left, till the next sweep
        back = paho(running, "gone", clean=False, expiry=60)
        assert not back.session_present
        back.stop()
        assert not (root / "topic-root" / "g%2F%23" / ".subscriptions" / "client.gone").exists()


def test_a_session_found_at_start_whose_end_the_disk_refused_is_ended_after(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """A session away when `boxmq serve` stopped, counted by the next start (its record
    names the process before, as it did not write it): its end refused by a read-only disk
    was left for good, since the retry took that record for another broker's."""
    address, before = serve_fresh(disk.path)
    root = address.root
    try:
        gone = paho(address, "gone", clean=False, expiry=4)
        gone.subscribe("g/#", qos=1)
        drop(gone)
        recorded_away(root, "gone")
    finally:
        stop_process(before)
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"), start_server(root, spares=0):
        with disk.read_only():
            _until_told(caplog, lambda m: "so that is left on disk" in m, "the session did not end")
        record_deleted(root, "gone")
    assert not (root / "topic-root" / "g%2F%23" / ".subscriptions" / "client.gone").exists()


def _recorded_away_without_will(root: Path, client_id: str) -> SessionRecord:
    """The record of `client_id` once it says its connection closed and holds no Will."""
    deadline = time.monotonic() + WAIT
    while (
        (record := read_record(str(root), client_id)) is None
        or record.disconnected_at is None
        or record.will is not None
    ):
        assert time.monotonic() < deadline, f"{client_id}: no close recorded, without its Will"
        time.sleep(0.05)
    return record


@pytest.mark.parametrize("delay", [0, 1])
def test_a_close_record_the_disk_refused_is_written_once_it_is_writable_again(
    running: RunningServer, disk: SmallDisk, caplog: pytest.LogCaptureFixture, delay: int
) -> None:
    """The record written when a persistent session's connection closed, refused by the
    disk, was never tried again: the record still said the client was connected, with its
    Will, so `boxmq session ls` listed it connected until its end. It is written by the
    broker's sweep once the disk takes it, without the Will sent meanwhile."""
    root = running.root
    listener = paho(running, "listener")
    listener.subscribe("w/#", qos=1)
    dying = paho(
        running, "dying", clean=False, expiry=600, will=("w/dying", b"gone", 1), will_delay=delay
    )
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        with disk.read_only():
            dropped_at = time.time()
            drop(dying)
            assert listener.next().payload == b"gone"
            will_came_at = time.time()
        record = _recorded_away_without_will(root, "dying")
    assert record.holder is None
    assert record.disconnected_at is not None
    assert dropped_at <= record.disconnected_at <= will_came_at  # its close, not a retry's time
    assert "client dying: its session record is written now, its close with it" in caplog.messages
    [listed] = json.loads(boxmq_cli_ok(root, "session", "ls", "--json"))
    assert (listed["client_id"], listed["connected_to"], listed["will"]) == ("dying", None, None)
    assert listener.nothing(within=0.5)
    listener.stop()


def test_a_will_sent_while_the_close_record_was_refused_is_not_sent_again_by_a_restart(
    disk: SmallDisk,
) -> None:
    """A real `boxmq serve` whose record of a delayed Will's close a full disk refused sent the
    Will, and the record still said the client was connected with it: a restart took the
    client for one that died connected, sent the Will a second time and counted the
    session's end from the restart. Written once the disk takes it, without the Will."""
    address, before = serve_fresh(disk.path)
    root = address.root
    try:
        listener = paho(address, "listener")
        listener.subscribe("w/#", qos=1)
        dying = paho(
            address, "dying", clean=False, expiry=600, will=("w/dying", b"gone", 1), will_delay=1
        )
        disk.fill()  # not remounted read-only: the process holds files open for writing
        try:
            dropped_at = time.time()
            drop(dying)
            assert listener.next().payload == b"gone"
            will_came_at = time.time()
        finally:
            disk.free()
        record = _recorded_away_without_will(root, "dying")
        listener.stop()
    finally:
        stop_process(before)
    assert record.disconnected_at is not None
    assert dropped_at <= record.disconnected_at <= will_came_at  # its close, not a retry's time
    after = serve_process(root, address.port)
    try:
        listener = paho(address, "listener")
        listener.subscribe("w/#", qos=1)
        assert listener.nothing(within=2.5)  # past its delay, counted from the restart
        listener.stop()
        [listed] = json.loads(boxmq_cli_ok(root, "session", "ls", "--json"))
        assert listed["away_since"] is not None
        assert listed["will"] is None
        now = read_record(str(root), "dying")
        assert now is not None
        assert now.disconnected_at == record.disconnected_at  # its end counted from the drop
    finally:
        stop_process(after)


def test_a_client_back_before_its_refused_close_record_is_written_again_stays_connected(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """The record of its close that the disk refused is written again by the sweep; its
    client's return in between wrote a newer one, which the older must not replace (it
    would list the client away while connected, and a restart would count its end). The
    broker's clock moves when the test says: no sweep ran before the return."""
    clock = ManualClock()
    root = disk.path / "root"
    with start_server(root, spares=0, clock=clock) as running:
        client = paho(running, "back", clean=False, expiry=600)
        with caplog.at_level(logging.WARNING, logger="boxmq.mqtt"), disk.read_only():
            drop(client)
            _until_told(caplog, _back_refused, "no close refused")
        client = paho(running, "back", clean=False, expiry=600)
        assert client.session_present
        clock.advance(3)
        time.sleep(0.5)  # the sweep's ticks
        record = read_record(str(root), "back")
        assert record is not None
        assert record.disconnected_at is None
        assert record.holder
        client.stop()


def test_a_refused_close_of_a_session_resumed_after_a_restart_is_written_again(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """A session resumed after a restart, its CONNECT's record refused too: this broker had
    written no record of it, which `replaced` took for another broker's, so the sweep forgot
    the refused close instead of writing it, and the record kept the close before the
    restart (its end counted from then)."""
    root = disk.path / "root"
    with start_server(root, spares=0) as running:
        paho(running, "back", clean=False, expiry=600).stop()
    with start_server(root, spares=0) as running:
        with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
            with disk.read_only():
                client = paho(running, "back", clean=False, expiry=600)
                assert client.session_present
                dropped_at = time.time()
                drop(client)
                _until_told(caplog, _back_refused, "no close refused", times=2)

            def closed_again() -> bool:
                record = read_record(str(root), "back")
                closed = record.disconnected_at if record is not None else None
                return closed is not None and closed >= dropped_at

            until(
                closed_again,
                lambda: f"close not written again: {read_record(str(root), 'back')}",
            )
        assert "client back: its session record is written now, its close with it" in (
            caplog.messages
        )


def test_a_will_whose_write_was_refused_is_not_sent_again_by_each_refused_clean_start(
    running: RunningServer, disk: SmallDisk
) -> None:
    """A clean start of a client away with a delayed Will sends it early; on a read-only disk
    its write for the durable subscribers, the session's end and the new session's record
    are refused (CONNECT 0x80), and the record keeps the Will for a restart. Each CONNECT
    the client sent again (paho reconnects once a second) found that record and sent the
    Will again to the subscribers in memory, which this broker had sent it to already."""
    listener = paho(running, "listener")
    listener.subscribe("w/#", qos=1)
    durable = paho(running, "durable", clean=False, expiry=600)  # the Will is written for it
    durable.subscribe("w/#", qos=1)
    dying = paho(
        running, "dying", clean=False, expiry=600, will=("w/dying", b"gone", 1), will_delay=60
    )
    drop(dying)
    recorded_away(running.root, "dying")
    with disk.read_only():
        for _ in range(3):
            paho(running, "dying", clean=True, expiry=600, expect=0x80).stop()
        assert listener.next().payload == b"gone"
        assert listener.nothing(within=0.5)
    listener.stop()
    durable.stop()


def test_a_refused_record_of_a_connected_session_is_written_once_the_disk_takes_it(
    running: RunningServer, disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """A session resumed while the disk refused its CONNECT's record was only logged: the
    record kept its last close, so `boxmq session ls` listed the connected client away. The
    latest record refused is written again, connected or not, once the disk takes it."""
    root = running.root
    paho(running, "back", clean=False, expiry=600).stop()
    recorded_away(root, "back")
    with caplog.at_level(logging.INFO, logger="boxmq.mqtt"):
        with disk.read_only():
            client = paho(running, "back", clean=False, expiry=600)
            assert client.session_present
        deadline = time.monotonic() + WAIT
        while (record := read_record(str(root), "back")) is None or record.holder is None:
            assert time.monotonic() < deadline, f"connected record not written: {record}"
            time.sleep(0.05)
    assert record.disconnected_at is None
    assert "client back: its session record is written now" in caplog.messages
    [listed] = json.loads(boxmq_cli_ok(root, "session", "ls", "--json"))
    assert listed["connected_to"] is not None
    client.stop()
