"""Under fsync=always, what a client is told of is on disk first (DESIGN.md §5): the records
a persistent session's CONNACK and SUBACK stand for (its session record, its subscription's
record) are flushed, file before its rename and folder after, and by a worker thread, not the
loop that serves every client. Under the other policies nothing is flushed.

`os.fsync` is watched in the server's process (it runs in a thread here), a real paho client
on a real socket does the rest."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from tests.integration.mqtt.clients import WAIT, Paho, RunningServer, paho, start_server
from tests.integration.mqtt.raw import connect_packet, open_raw, pubrel, read, subscribe
from tests.waiting import logged, until

from boxmq.client.box import Box
from boxmq.mqtt.session_record import records_folder
from boxmq.mqtt.stored import consumer_name
from boxmq.mqtt.subscribing import Subscribing
from boxmq.store.topics import subscription_key, subscription_path


class Flushes:
    """Every fsync of the process: what was flushed (a path), and by which thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, str]] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            self.seen.append((path, threading.current_thread().name))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]

    def watched_by(self, client: mqtt.Client, told: list[list[str]]) -> None:
        """`told` gets what was flushed when the client got its CONNACK, then each SUBACK."""
        on_connect, on_subscribe = client.on_connect, client.on_subscribe
        assert on_connect is not None
        assert on_subscribe is not None

        def connected(*args: Any) -> None:
            told.append(self.paths())
            on_connect(*args)

        def subscribed(*args: Any) -> None:
            told.append(self.paths())
            on_subscribe(*args)

        client.on_connect, client.on_subscribe = connected, subscribed


def _written_then_renamed(flushed: list[str], folder: str) -> bool:
    """A temporary in `folder` was flushed (before its rename), then `folder` itself."""
    files = [i for i, path in enumerate(flushed) if os.path.dirname(path) == folder]
    return any(path == folder for path in flushed[min(files, default=len(flushed)) :])


@pytest.fixture
def always(tmp_path: Path) -> Iterator[RunningServer]:
    with start_server(tmp_path / "root", fsync="always") as running:
        yield running


def _client(running: RunningServer, told: list[list[str]], flushes: Flushes) -> Paho:
    return paho(
        running,
        "keeper",
        clean=False,
        expiry=600,
        configure=lambda client: flushes.watched_by(client, told),
    )


def test_a_persistent_subscription_is_on_disk_before_its_suback(
    always: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes, told = Flushes(monkeypatch), list[list[str]]()
    client = _client(always, told, flushes)
    try:
        assert client.subscribe("sensors/#", qos=1)[0].value == 1
    finally:
        client.stop()
    root = str(always.box.root)
    sessions = records_folder(root)
    subscription = subscription_path(
        root, "sensors/#", subscription_key(None, consumer_name("keeper"))
    )
    at_connack, at_suback = told
    assert _written_then_renamed(at_connack, sessions)
    assert _written_then_renamed(at_suback, subscription)
    new_folders = [os.path.dirname(subscription), os.path.join(root, "topic-root")]
    assert set(new_folders) <= set(at_suback)  # the new folders are entries of their parents
    # The session record again, with the subscription's options, before the SUBACK too.
    assert _written_then_renamed(at_suback[len(at_connack) :], sessions)
    records = [thread for path, thread in flushes.seen if path.startswith((sessions, subscription))]
    assert records
    assert "mqtt-server" not in records  # never on the loop's thread


def test_under_fsync_never_no_record_is_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with start_server(tmp_path / "root", fsync="never") as running:
        flushes, told = Flushes(monkeypatch), list[list[str]]()
        client = _client(running, told, flushes)
        assert client.subscribe("sensors/#", qos=1)[0].value == 1
        client.stop()
    assert flushes.seen == []


def test_a_publish_right_behind_a_subscribe_finds_the_subscription(
    always: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SUBSCRIBE's records are written by a worker; the packets its client sent behind
    it (here a PUBLISH sent without waiting for the SUBACK) wait for them, as if it had been
    made at once. A disk slow to flush gives the PUBLISH the time to arrive before."""
    client = paho(always, "eager", clean=False, expiry=600)
    real = os.fsync

    def slow(fd: int) -> None:
        time.sleep(0.05)
        real(fd)

    monkeypatch.setattr(os, "fsync", slow)
    try:
        client.client.subscribe("eager/#", 1)  # no wait for the SUBACK
        client.publish("eager/x", b"mine", qos=1)
        received = client.next()
        assert (received.topic, received.payload) == ("eager/x", b"mine")
    finally:
        client.stop()


def test_a_session_resumed_while_the_one_before_still_makes_a_subscription(
    always: RunningServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A persistent session's SUBSCRIBE is being made by a worker (its dropbox open, its
    records still being flushed) when a clean start ends the session, and a CONNECT with
    clean start 0 comes right after: it waits for that work, then finds no session (the
    late subscription undone, `_drop_late`). It found the dropbox on disk and resumed the
    ended session with it (session present); or, the dropbox opened already, opened it a
    second time, which raised out of the read: no CONNACK, a traceback in the log (found by
    fuzzing `boxmq serve`)."""
    first, _ = open_raw(always, "back", clean=True, expiry=300)
    real = os.fsync

    def slow(fd: int) -> None:
        time.sleep(0.2)
        real(fd)

    monkeypatch.setattr(os, "fsync", slow)
    first.sendall(subscribe(1, "back/#", 1))
    name = consumer_name("back")
    until(  # its dropbox is there: being flushed
        lambda: always.box.topics.subscribed(name), f"{name} not subscribed", every=0.005
    )
    ending, _ = open_raw(always, "back", clean=True, expiry=0)  # takes over, ends the session
    ending.sendall(b"\xe0\x00")
    resuming = socket.create_connection((always.host, always.port), timeout=WAIT)
    resuming.sendall(connect_packet("back", expiry=300))
    kind, body = read(resuming)
    assert kind == 0x20, "CONNACK"
    assert body[:2] == b"\x00\x00"  # no session present: the clean start ended it
    for sock in (first, ending, resuming):
        sock.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


def test_nothing_follows_the_disconnect_of_a_client_whose_packets_wait_for_a_subscribe(
    always: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PUBREL held behind a SUBSCRIBE that waits for the disk is handled when its
    connection ends, here by a takeover: its PUBCOMP was written after the DISCONNECT 0x8E
    (MQTT-3.14.4-1: nothing after a DISCONNECT; found by fuzzing `boxmq serve`)."""
    real = os.fsync

    def slow(fd: int) -> None:
        time.sleep(0.2)
        real(fd)

    first, _ = open_raw(always, "held", clean=True, expiry=0)
    monkeypatch.setattr(os, "fsync", slow)
    first.sendall(subscribe(1, "$share/g/held/#", 1) + pubrel(7))  # a share group: on disk
    time.sleep(0.1)  # both read; the SUBSCRIBE's records are being flushed
    second, _ = open_raw(always, "held", clean=True, expiry=0)
    got = []
    while (packet := read(first)) != (0, b""):
        got.append(packet)
    assert got[-1] == (0xE0, b"\x8e"), got  # DISCONNECT 0x8E, and nothing after
    first.close()
    second.close()


def test_a_clean_start_says_nothing_of_the_subscription_its_ended_session_is_still_making(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A persistent session's SUBSCRIBE is made by a worker (its dropbox open, held here) when
    a clean start takes the session over and ends it, and another takes that one over. Each
    end looked for what its session left under the name on disk, found that dropbox, no
    session's yet, and warned that another door's subscription was left alone (once per
    filter, at each takeover of a client reconnecting in a loop: found by fuzzing `boxmq
    serve`), though `_drop_late` deletes it once the worker is done."""
    opened = threading.Event()
    release = threading.Event()
    real = Subscribing._open_durable

    def held(self: Subscribing, *args: Any, **kwargs: Any) -> Any:
        made = real(self, *args, **kwargs)
        if not _on_a_loop():  # a worker's: held (on the loop, it would hold every client)
            opened.set()
            release.wait(WAIT)
        return made

    monkeypatch.setattr(Subscribing, "_open_durable", held)
    caplog.set_level(logging.INFO, logger="boxmq.mqtt")
    with start_server(tmp_path / "root", fsync="always") as running:
        first, _ = open_raw(running, "late", clean=True, expiry=300)
        first.sendall(subscribe(1, "late/#", 1))
        assert opened.wait(WAIT), "the SUBSCRIBE's dropbox was never made"
        takers = []
        for takeovers in (1, 2):  # the second ends a session that subscribed to nothing
            taker = socket.create_connection((running.host, running.port), timeout=WAIT)
            taker.sendall(connect_packet("late", clean=True, expiry=0))
            until(partial(_taken_over, caplog, takeovers), "no takeover")
            takers.append(taker)
        release.set()  # the CONNACKs wait for the first connection's disk work
        assert read(takers[-1])[0] == 0x20, "CONNACK"
        name = consumer_name("late")
        until(lambda: not running.box.topics.subscribed(name), f"{name} still subscribed")
        for sock in (first, *takers):
            sock.close()
    assert logged(caplog, "not its session's") == []


def _taken_over(caplog: pytest.LogCaptureFixture, times: int) -> bool:
    return len(logged(caplog, "late: taken over")) == times


def test_a_late_subscription_is_deleted_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A subscription made by a worker for a session that ended meanwhile is deleted
    (`_drop_late`: a folder's rmtree, as long as its messages are many) by a worker too,
    after the disk work before it and before the next connection's; it was deleted on the
    loop, which every client waits for (found reading `_drop_late`)."""
    opened = threading.Event()
    release = threading.Event()
    real = Subscribing._open_durable

    def held(self: Subscribing, *args: Any, **kwargs: Any) -> Any:
        made = real(self, *args, **kwargs)
        if not _on_a_loop():
            opened.set()
            release.wait(WAIT)
        return made

    deleted_on: list[bool] = []  # each deletion: whether on the loop's thread
    unsubscribe = Box.unsubscribe

    def watched(self: Box, *args: Any, **kwargs: Any) -> Any:
        deleted_on.append(_on_a_loop())
        return unsubscribe(self, *args, **kwargs)

    monkeypatch.setattr(Subscribing, "_open_durable", held)
    monkeypatch.setattr(Box, "unsubscribe", watched)
    caplog.set_level(logging.INFO, logger="boxmq.mqtt")
    with start_server(tmp_path / "root", fsync="always") as running:
        first, _ = open_raw(running, "late", clean=True, expiry=300)
        first.sendall(subscribe(1, "late/#", 1))
        assert opened.wait(WAIT), "the SUBSCRIBE's dropbox was never made"
        second = socket.create_connection((running.host, running.port), timeout=WAIT)
        second.sendall(connect_packet("late", clean=True, expiry=300))  # ends the session
        until(partial(_taken_over, caplog, 1), "no takeover")
        release.set()
        assert read(second)[0] == 0x20, "CONNACK"
        name = consumer_name("late")
        until(lambda: not running.box.topics.subscribed(name), f"{name} still subscribed")
        for sock in (first, second):
            sock.close()
    assert deleted_on == [False]


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_a_stop_drops_the_subscribes_waiting_behind_one_the_disk_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A client's SUBSCRIBEs read behind one the disk is making wait for its SUBACK (their
    order kept); a stop handled them one after another, each flushed, and a backlog kept a
    SIGTERM'd server busy for over a minute (found by fuzzing `boxmq serve`). Not answered,
    they are dropped with the connection, as if never read, and the log says so."""
    real = os.fsync

    def slow(fd: int) -> None:
        time.sleep(0.02)
        real(fd)

    caplog.set_level(logging.INFO, logger="boxmq.mqtt")
    many = 60
    with start_server(tmp_path / "root", fsync="always") as running:
        sock, _ = open_raw(running, "many", clean=True, expiry=300)
        monkeypatch.setattr(os, "fsync", slow)
        sock.sendall(b"".join(subscribe(n, f"many/{n}", 1) for n in range(1, many + 1)))
        assert read(sock)[0] == 0x90, "SUBACK"
        began = time.monotonic()  # and the server stops
    stopped = time.monotonic() - began
    sock.close()
    assert stopped < 1.5, f"the stop took {stopped:.1f} s"
    [dropped] = logged(caplog, "at the stop dropped, as if never read")
    assert dropped.startswith("client many: ")
