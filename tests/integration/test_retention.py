"""processed/ retention: acknowledged messages are deleted once older than the retention, by a
sweep that looks through processed/ at most every hundredth of the retention."""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from tests.retained import retained_folder

import boxmq
from boxmq.store import topics as layout


def ack_all(box: boxmq.Box, count: int) -> None:
    jobs = box.queue("jobs")
    for index in range(count):
        jobs.put(f"m{index}".encode())
    with jobs.consumer("w", max_in_flight=count) as consumer:
        for _ in range(count):
            message = consumer.receive(timeout=5)
            assert message is not None
            message.ack()


def processed(root: Path) -> list[str]:
    return sorted(os.listdir(root / "jobs" / "processed"))


def _full_disk(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_acknowledged_messages_go_once_older_than_the_retention(root: Path) -> None:
    clock = boxmq.ManualClock(time.time())  # ages are measured against the files' ctime
    with boxmq.open(root, fsync="never", processed_retention=100.0, clock=clock) as box:
        ack_all(box, 3)
        # A file a DropboxMQ producer named: its id carries no time, so its ctime decides.
        (root / "jobs" / "processed" / "4.outside-id").write_bytes(b"x")
        assert box.sweep()["jobs"].purged == 0
        clock.advance(50)
        assert box.sweep()["jobs"].purged == 0
        assert len(processed(root)) == 4
        # 105 s on the clock: the files written after it was set (a ctime in real time) are
        # then past the 100 s retention unless writing them took over 5 s, not over 1 s.
        clock.advance(55)
        assert box.sweep()["jobs"].purged == 4
    assert processed(root) == []


def test_processed_is_looked_through_at_most_every_hundredth_of_the_retention(
    root: Path,
) -> None:
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", processed_retention=1000.0, clock=clock) as box:
        ack_all(box, 2)
        clock.advance(998)
        assert box.sweep()["jobs"].purged == 0  # looked, nothing due; next look in 10 s
        clock.advance(5)
        assert box.sweep()["jobs"].purged == 0  # due, but not looked at yet
        assert len(processed(root)) == 2
        clock.advance(6)
        assert box.sweep()["jobs"].purged == 2


def test_no_retention_keeps_everything(root: Path) -> None:
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", processed_retention=None, clock=clock) as box:
        ack_all(box, 2)
        clock.advance(10**7)
        assert box.sweep()["jobs"].purged == 0
    assert len(processed(root)) == 2


def expired(root: Path) -> list[str]:
    return sorted(os.listdir(root / "jobs" / "expired"))


def test_expired_messages_go_once_expired_longer_than_their_retention(root: Path) -> None:
    """expired/ kept every expired message for good: a persistent MQTT session away for weeks
    filled the disk with telemetry it will never get. Its age there counts from the expiry."""
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", expired_retention=100.0, clock=clock) as box:
        jobs = box.queue("jobs")
        for index in range(3):
            jobs.put(f"m{index}".encode(), expires_in=10)
        clock.advance(11)
        report = box.sweep()["jobs"]
        assert (report.expired, report.expired_purged) == (3, 0)
        # A file moved there by hand, its id with no time: its ctime decides.
        (root / "jobs" / "expired" / "4.outside-id").write_bytes(b"x")
        clock.advance(50)  # 61 s on the clock since the files moved there, in real time
        assert box.sweep()["jobs"].expired_purged == 0
        assert len(expired(root)) == 4
        clock.advance(55)
        assert box.sweep()["jobs"].expired_purged == 4
    assert expired(root) == []


def test_expired_messages_stay_without_a_retention_and_processed_keeps_its_own(
    root: Path,
) -> None:
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", processed_retention=100.0, clock=clock) as box:
        ack_all(box, 1)
        box.queue("jobs").put(b"late", expires_in=1)
        clock.advance(10**7)
        report = box.sweep()["jobs"]
        assert (report.expired, report.purged, report.expired_purged) == (1, 1, 0)
    assert len(expired(root)) == 1


def test_temporaries_a_dead_writer_left_go_once_older_than_working_ttl(root: Path) -> None:
    """A write renames `.tmp-*` into place; a process that died in between left one behind,
    in a dropbox, the topic root (its generation), the retained store, the side files or the
    exactly-once markers."""
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", abandon_after=60.0, clock=clock) as box:
        box.queue("jobs").put(b"x")
        box.publish("t", b"kept", retain=True)
        folders = [
            root / "jobs",
            root / "topic-root",
            retained_folder(root),
            root / ".properties",
            root / ".exactly-once",
        ]
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ".tmp-left-by-a-dead-writer").write_bytes(b"half")
        box.sweep()
        assert all((f / ".tmp-left-by-a-dead-writer").exists() for f in folders)  # young
        clock.advance(61)
        box.sweep()
        assert not any((f / ".tmp-left-by-a-dead-writer").exists() for f in folders)
        assert box.queue("jobs").counts().ready == 1  # what was written whole stays
    with boxmq.open(root) as box:
        assert box.topics.retained("t") is not None


def test_temporaries_in_subscriptions_and_the_intake_go_too(root: Path) -> None:
    """A subscription whose first record never got renamed into place has no record, so no
    scan of subscriptions finds it; and an exactly-once message's temporary waits in the
    topics' intake (.incoming/working/) until it is renamed there."""
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", abandon_after=60.0, clock=clock) as box:
        box.subscribe("t/#", "s").close()
        topics = root / "topic-root"
        folders = [
            topics / "t%2F%23" / ".subscriptions" / "client.s",
            topics / "never%2Fsubscribed" / ".subscriptions" / "client.s",
            topics / ".incoming" / "working",
        ]
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ".tmp-left-by-a-dead-writer").write_bytes(b"half")
        clock.advance(61)
        box.sweep()
        assert [f for f in folders if (f / ".tmp-left-by-a-dead-writer").exists()] == []
        assert box.topics.subscribed("s") != []  # its record stays


def test_a_subscription_folder_left_without_a_record_goes_once_old(root: Path) -> None:
    """A subscribe that died after making its folder and before renaming its first record in
    leaves a folder no scan of subscriptions finds: the sweep deletes it once nothing in it
    changed for `abandon_after`, as it does temporaries. One that holds messages is what an
    unsubscribe killed after deleting the record left, its messages an ended subscription's:
    it goes too, where no subscribe of another process holds it (store/topics.py)."""
    clock = boxmq.ManualClock(time.time())
    states = ("working", "target", "processing", "processed", "error", "expired", "routing")
    with boxmq.open(root, fsync="never", abandon_after=60.0, clock=clock) as box:
        box.subscribe("t/#", "s").close()  # a subscription, with its record: it stays
        topics = root / "topic-root"

        def left(filter: str) -> Path:
            folder = topics / filter / ".subscriptions" / "client.s"
            for state in states:
                (folder / state).mkdir(parents=True)
            (folder / ".tmp-left-by-a-dead-writer").write_bytes(b"{")
            return folder

        empty = left("left%2Fbehind")
        ready = left("holds%2Fone") / "target" / "4.a-message.T"
        ready.write_bytes(b"m")
        pending = left("holds%2Fpending") / "working" / ".exactly-once" / "x" / "4.a-copy.T"
        pending.parent.mkdir(parents=True)
        pending.write_bytes(b"m")
        box.sweep()
        assert empty.exists()  # young
        clock.advance(61)
        box.sweep()
        assert not empty.exists()
        assert not ready.parent.parent.exists()
        assert not pending.parent.parent.parent.parent.exists()
        assert [text for text, _ in box.topics.subscribed("s")] == ["t/#"]


def test_a_folder_an_end_killed_before_telling_the_others_stops_being_routed_to(
    root: Path,
) -> None:
    """An end killed after deleting the record, before the generation that tells the other
    processes: they went on copying every publication into its folder until they restarted,
    which kept the folder young, so the sweep never deleted it. The sweep's full pass tells
    them when it first finds the folder, once."""
    clock = boxmq.ManualClock(time.time())
    generation = root / "topic-root" / ".generation"
    with (
        boxmq.open(root, fsync="never", abandon_after=60.0, clock=clock) as sweeper,
        boxmq.open(root, fsync="never") as publisher,
    ):
        path = Path(sweeper.topics.attach_dropbox("t/#", "s"))
        publisher.publish("t/1", b"before")  # the publisher routes to it from here on
        (path / ".subscription").unlink()  # the unsubscribe, killed right after
        (path.parent / "sub.conn" / "target").mkdir(parents=True)  # DropboxMQ's: no news
        publisher.publish("t/2", b"routed still")
        before = int(generation.read_text().partition("\n")[0])
        sweeper.sweep()
        told = generation.read_text().partition("\n")[0]
        assert int(told) == before + 1
        publisher.publish("t/3", b"after")
        assert len(os.listdir(path / "target")) == 2
        sweeper.sweep()
        assert generation.read_text().partition("\n")[0] == told  # once, not at every pass
        clock.advance(61)
        sweeper.sweep()
        assert not path.exists()


def test_a_folder_without_a_record_the_disk_refuses_to_tell_of_is_told_at_the_next_pass(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with boxmq.open(root, fsync="never") as sweeper, boxmq.open(root, fsync="never") as publisher:
        path = Path(sweeper.topics.attach_dropbox("t/#", "s"))
        publisher.publish("t/1", b"before")
        (path / ".subscription").unlink()  # the unsubscribe, killed right after
        monkeypatch.setattr(layout, "bump_generation", _full_disk)
        with caplog.at_level(logging.WARNING, logger="boxmq"):
            sweeper.sweep()
            sweeper.sweep()
        monkeypatch.undo()
        assert caplog.text.count("are not told it is none") == 1  # once, not at each pass
        assert str(root / "topic-root" / ".generation") in caplog.text
        sweeper.sweep()
        publisher.publish("t/2", b"after")
        assert len(os.listdir(path / "target")) == 1


def test_a_sweep_deletes_the_retained_messages_that_expired(root: Path) -> None:
    """An expired retained message is never sent; without this its file stayed for good, one
    per topic (a status per device), and each one was read again at every subscription."""
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        box.publish("status/a", b"on", retain=True, expires_in=10)
        box.publish("status/b", b"on", retain=True, expires_in=1000)
        box.publish("status/c", b"on", retain=True)
        box.sweep()
        assert len(os.listdir(retained_folder(root))) == 3  # none expired yet
        clock.advance(61)  # past a's expiry, and past the next look for expired ones
        box.sweep()
        assert len(os.listdir(retained_folder(root))) == 2
        kept = {envelope.topic for envelope, _ in box.topics.retained_reading("status/#")}
        assert kept == {"status/b", "status/c"}


def test_a_retention_set_on_an_open_box_rules_its_next_sweeps(root: Path) -> None:
    """Box.options is read at each sweep, as it was before the housekeeping had its own class
    (client/housekeeping.py): one that kept the options of the open kept everything here."""
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", processed_retention=None, clock=clock) as box:
        limits = replace(box.options.limits, processed_retention=100.0)
        box.options = replace(box.options, limits=limits)
        ack_all(box, 2)
        clock.advance(105)
        assert box.sweep()["jobs"].purged == 2
    assert processed(root) == []


def test_the_sweep_log_names_the_age_each_deleted_working_file_passed(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An exactly-once message whose `deliver` never came goes after `pending_ttl`, a file a
    producer left after `abandon_after` (working_ttl): each count is logged with its own age,
    where both were said to be older than working_ttl's."""
    from boxmq.core import ExactlyOnceLimits

    clock = boxmq.ManualClock(time.time())
    limits = ExactlyOnceLimits(pending_ttl=600.0)
    with boxmq.open(
        root, fsync="never", abandon_after=60.0, exactly_once=limits, clock=clock
    ) as box:
        box.queue("jobs").put(b"ready")
        assert box.assured("sender", "m1", b"never delivered", queue="jobs")
        (root / "jobs" / "working" / "left-by-a-producer").write_bytes(b"half")
        clock.advance(61)
        with caplog.at_level(logging.WARNING, logger="boxmq.sweep"):
            assert box.sweep()["jobs"].abandoned == 1
            clock.advance(600)
            assert box.sweep()["jobs"].abandoned == 1
        lines = [r.getMessage() for r in caplog.records if "deleted" in r.getMessage()]
        assert lines == [
            "jobs: deleted 1 uncommitted file(s) older than 1m in working/",
            "jobs: deleted 1 exactly-once message(s) whose deliver did not come within "
            "10m (pending_ttl) in working/",
        ]
        assert box.pending("sender") == []
        assert box.queue("jobs").counts().ready == 1
