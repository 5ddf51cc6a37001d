"""SentWills: a Will sent from a session record the disk then refused to rewrite is never
sent twice by this broker, and the record is written again until the disk takes it. Wills:
one waiting for its record to read is forgotten at its client's return."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from tests.waiting import logged

from boxmq.clock import ManualClock
from boxmq.mqtt.packets import Will
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.session_record import (
    AwayAtStart,
    SessionRecord,
    read_record,
    record_path,
    write_record,
)
from boxmq.mqtt.wills import SentWills, Wills

_AWAY = SessionRecord("c1", 60, disconnected_at=100.0, will=Will("w/c1", b"gone"), will_due=101.0)


def _full(*_: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _holds(current: SessionRecord | None) -> bool:
    return current == _AWAY


def _sent_on_a_full_disk(root: str, monkeypatch: pytest.MonkeyPatch, *, now: float) -> SentWills:
    """SentWills on `root`, told at `now` of _AWAY's Will sent while the disk refused to
    rewrite its record; the disk takes writes again."""
    write_record(root, _AWAY)
    wills = SentWills(root)
    monkeypatch.setattr(os, "rename", _full)
    wills.sent(_AWAY, _holds, now=now)
    monkeypatch.undo()
    return wills


def test_a_refused_record_is_remembered_then_written_once_the_disk_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    write_record(root, _AWAY)
    wills = SentWills(root)
    monkeypatch.setattr(os, "rename", _full)
    wills.sent(_AWAY, _holds, now=0.0)
    assert wills.already_sent(_AWAY)
    wills.retry(now=5.0)  # still full
    assert read_record(root, "c1") == _AWAY
    monkeypatch.undo()
    wills.retry(now=5.5)  # not yet: one try a second
    assert read_record(root, "c1") == _AWAY
    wills.retry(now=6.0)
    record = read_record(root, "c1")
    assert record is not None
    assert (record.will, record.will_due) == (None, None)
    assert not wills.already_sent(_AWAY)


def test_a_record_changed_meanwhile_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    wills = _sent_on_a_full_disk(root, monkeypatch, now=0.0)
    back = SessionRecord("c1", 60, holder="another broker")  # its client came back
    write_record(root, back)
    wills.retry(now=10.0)
    assert read_record(root, "c1") == back
    assert not wills.already_sent(_AWAY)


def test_a_clock_stepped_back_does_not_put_the_next_try_off_for_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock stepped back an hour (NTP, `date -s`) after the disk refused the record: its
    next try was an hour off, and a restart meanwhile sent the Will again. It is tried at
    the broker's next tick."""
    root = str(tmp_path)
    wills = _sent_on_a_full_disk(root, monkeypatch, now=3600.0)
    wills.retry(now=0.5)  # half a second on, stepped back an hour
    record = read_record(root, "c1")
    assert record is not None
    assert (record.will, record.will_due) == (None, None)


@contextlib.contextmanager
def _looping(root: str, client_id: str) -> Iterator[None]:
    """The client's record a symlink to itself, which every read refuses (ELOOP, as EIO of a
    failing disk), then put back."""
    path = record_path(root, client_id)
    os.rename(path, f"{path}.aside")
    os.symlink(os.path.basename(path), path)
    try:
        yield
    finally:
        os.unlink(path)
        os.rename(f"{path}.aside", path)


def test_a_record_that_cannot_be_read_keeps_the_sent_will_for_the_next_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The retry (inside Broker.tick) read the record with no guard: a read failing with
    anything but a missing file (EIO of a failing disk, the very case it is for) left the
    tick and stopped the server (found by a second read). The record made a symlink to
    itself (ELOOP) stands for it: the Will sent stays remembered for the next try, the
    failure told once."""
    root = str(tmp_path)
    wills = _sent_on_a_full_disk(root, monkeypatch, now=0.0)
    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        with _looping(root, "c1"):
            for now in (1.0, 2.0, 3.0):
                wills.retry(now=now)
            told = logged(caplog, "client c1: its session record cannot be")
            assert len(told) == 1, told
            assert "ELOOP" in told[0], told
            assert wills.already_sent(_AWAY)
        wills.retry(now=4.0)
    record = read_record(root, "c1")
    assert record is not None
    assert (record.will, record.will_due) == (None, None)
    assert not wills.already_sent(_AWAY)


def test_a_will_waiting_for_its_record_is_forgotten_with_its_clients_return(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Will found on disk at start whose record cannot be read when due waits a second at a
    time (Wills._not_read), told once. Its client's return cancels it (Resuming.take:
    `forget_timer`): no retry sends it after. And the return forgets that it was told: kept,
    a later Will of the client id whose record could not be read was never told of."""
    root = str(tmp_path)
    clock = ManualClock(1000.0)
    will = Will("w/c1", b"gone", properties=Properties.build(will_delay_interval=5))
    away = SessionRecord("c1", 60, disconnected_at=990.0, will=will, will_due=995.0)
    write_record(root, away)
    published: list[str] = []
    wills = Wills(
        root,
        clock,
        "this broker",
        {},
        lambda client_id, *_: published.append(client_id),
        lambda: None,
        lambda *_: None,
    )
    with caplog.at_level(logging.INFO, "boxmq.mqtt"):
        with _looping(root, "c1"):
            wills.resume(AwayAtStart(away, away), clock.now())  # due: its record read, refused
        wills.forget_timer("c1")  # its client came back
        for later in (1.0, 2.0, 3.0):
            wills.send_due(clock.now() + later)
        assert published == []
        again = replace(away, disconnected_at=1010.0, will_due=1015.0)  # it left again
        write_record(root, again)
        with _looping(root, "c1"):
            wills.resume(AwayAtStart(again, again), 1020.0)
    told = logged(caplog, "client c1: its session record cannot be read")
    assert len(told) == 2, told
    assert published == []
