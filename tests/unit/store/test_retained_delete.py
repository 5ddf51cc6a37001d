"""A retained message's delete is as durable as its replacement under each fsync policy. While
an exactly-once marker is on the root, it leaves a tombstone, an empty file in its place: no
retained message to every reader, but a write a restart that finishes a retained publication
marked before it can see (`written_since`), swept once no marker is older.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from tests.crashes import Killed
from tests.retained import retained_file, retained_folder, retained_name

import boxmq
from boxmq.client.assured import AssuredMessage
from boxmq.client.housekeeping import RETAINED_EVERY
from boxmq.clock import ManualClock
from boxmq.model import PUBLISHED_RETAINED
from boxmq.store.commit import Committer, FsyncPolicy, flush_directories
from boxmq.store.retained import Marked, RetainedStore


def _folder(tmp_path: Path) -> Path:
    return retained_folder(tmp_path)


def _flushed_folders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    flushed: list[str] = []

    def recording(folders: Iterable[str]) -> None:
        folders = list(folders)
        flushed.extend(folders)
        flush_directories(folders)

    monkeypatch.setattr("boxmq.store.retained.flush_directories", recording)
    return flushed


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_a_delete_flushes_the_folder_under_always_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: FsyncPolicy
) -> None:
    committer = Committer(str(tmp_path), policy)
    store = RetainedStore(str(tmp_path), committer)
    try:
        store.replace(store.stage("a/b", "4.m1.T", b"21.5"))
        assert store.get("a/b") is not None
        flushed = _flushed_folders(monkeypatch)
        store.replace(store.stage("a/b", "4.m2.T", b""))  # an empty body deletes it
        assert store.get("a/b") is None
        expected = [str(retained_folder(tmp_path))]
        assert flushed == (expected if policy is FsyncPolicy.ALWAYS else [])
        store.replace(store.stage("a/b", "4.m3.T", b""))  # nothing left to delete or flush
        assert flushed == (expected if policy is FsyncPolicy.ALWAYS else [])
    finally:
        committer.close()


def _a_marker(root: Path) -> None:
    """A "delivered" marker on the root, as a PUBREL cut short by a crash leaves it: its
    message still waits in the incoming working/."""
    (root / ".exactly-once").mkdir(exist_ok=True)
    (root / ".exactly-once" / ("0" * 64)).write_text('{"source": "s", "msg_id": "1"}')
    incoming = root / "topic-root" / ".incoming" / "working"
    incoming.mkdir(parents=True, exist_ok=True)
    (incoming / "4.1.B").write_bytes(b"its message")


@pytest.mark.parametrize("policy", [FsyncPolicy.ALWAYS, FsyncPolicy.NEVER])
def test_a_delete_while_a_marker_is_there_leaves_a_tombstone(
    tmp_path: Path, policy: FsyncPolicy
) -> None:
    """An empty body puts a tombstone in place through the committer, as a replacement; a
    delete of a topic with none writes one too. Every reader finds no message there."""
    committer = Committer(str(tmp_path), policy)
    store = RetainedStore(str(tmp_path), committer)
    _a_marker(tmp_path)
    try:
        store.replace(store.stage("a/b", "4.m1.T", b"21.5"))
        store.replace(store.stage("a/b", "4.m2.T", b""))  # an empty body deletes it
        assert store.get("a/b") is None
        assert list(store.matching(lambda topic: True)) == []
        assert store.remove_if(lambda found: True) == 0
        [tombstone] = _folder(tmp_path).iterdir()
        assert tombstone.stat().st_size == 0
        store.replace(store.stage("c", "4.m3.T", b""))  # none to delete: a tombstone all the same
        assert store.get("c") is None
        assert store.version("c") is not None
    finally:
        committer.close()


def test_a_restart_tells_a_write_since_its_marker_by_the_version_not_the_time(
    store: RetainedStore, tmp_path: Path
) -> None:
    """A marker that records the retained file in place when it was written: the same file
    later is no write since, whatever the times say (a tick shared with the marker, or a file
    system of 1 s timestamps); another file, a tombstone too, is."""
    _a_marker(tmp_path)
    store.replace(store.stage("t", "4.m1.T", b"before"))
    seen = store.version("t")
    later = os.stat(_folder(tmp_path) / os.listdir(_folder(tmp_path))[0]).st_mtime
    marked = Marked(later - 10.0, recorded=True, version=seen)  # the marker's time is older
    assert not store.written_since("t", marked)
    store.replace(store.stage("t", "4.m2.T", b""))  # a delete
    assert store.written_since("t", marked)
    assert store.written_since("t", Marked(later - 10.0, recorded=True, version=None))
    # A marker of an older boxmq records nothing: the times decide, as they did.
    assert store.written_since("t", Marked(later - 10.0, recorded=False))
    assert not store.written_since("t", Marked(later + 10.0, recorded=False))


def test_a_tombstone_goes_once_older_than_the_sweep_is_told(
    store: RetainedStore, tmp_path: Path
) -> None:
    """Only tombstones written before `tombstones_before`, not a message or a damaged file.
    One swept that a marker recorded was no write since it, nor is an expired message swept:
    no publication (a restart that finished a retained QoS 2 message's PUBREL left its topic
    without one)."""
    _a_marker(tmp_path)
    folder = _folder(tmp_path)
    store.replace(store.stage("old", "4.m1.T", b""))
    store.replace(store.stage("kept", "4.m2.T", b"1"))
    (folder / "damaged").write_bytes(b'{"topic": "x"')
    for path in folder.iterdir():
        os.utime(path, (1000.0, 1000.0))
    tombstone, message = store.version("old"), store.version("kept")
    store.replace(store.stage("young", "4.m3.T", b""))
    assert store.remove_if(lambda found: False, tombstones_before=1000.0) == 0
    assert len(os.listdir(folder)) == 4  # none written before 1000.0
    assert store.remove_if(lambda found: False, tombstones_before=2000.0) == 0  # uncounted
    assert store.version("old") is None
    assert store.version("young") is not None
    assert store.get("kept") is not None
    assert (folder / "damaged").exists()
    assert not store.written_since("old", Marked(999.0, recorded=True, version=tombstone))
    assert store.remove_if(lambda found: found.topic == "kept") == 1  # expired
    assert store.version("kept") is None
    assert not store.written_since("kept", Marked(999.0, recorded=True, version=message))


def test_the_sweep_keeps_a_tombstone_while_a_marker_that_tells_nothing_is_older(
    tmp_path: Path,
) -> None:
    """`boxmq serve`'s sweep deletes a tombstone older than 5 minutes and than every
    "delivered" marker that may be of a publication a restart still finishes: one of a boxmq
    before 2026-11-30 names no file, and may be."""
    clock = ManualClock(time.time())
    _a_marker(tmp_path)
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        box.intake.expire()  # read: renamed as the key it holds names it
        box.publish("t", b"", retain=True)
        [tombstone] = _folder(tmp_path).iterdir()
        marker = _ten_minutes_old(tmp_path)
        box.sweep()
        assert tombstone.exists()
        os.utime(marker)  # written now: after the tombstone
        clock.advance(RETAINED_EVERY)
        box.sweep()
        assert not tombstone.exists()
        assert box.topics.retained("t") is None


def _a_marked_message_delivered(box: boxmq.Box, to: str) -> None:
    """An exactly-once message to a queue, or a retained publication to the topic "mine",
    taken in and delivered: its marker stays in `.exactly-once/` for done_ttl."""
    if to == "queue":
        assert box.assured("door", "1", b"+1", queue="counts")
    else:  # a retained publication, sent
        retained = {PUBLISHED_RETAINED: True}
        sent = AssuredMessage("mqtt:here", "1", b"on", topic="mine", properties=retained)
        assert box.intake.assured_one(sent, reserved=True)
    assert box.deliver(*(("door", "1") if to == "queue" else ("mqtt:here", "1")))


@pytest.mark.parametrize("to", ["queue", "topic"])
def test_a_marker_of_a_message_sent_or_to_a_queue_keeps_no_tombstone(
    tmp_path: Path, to: str
) -> None:
    """A marker whose file left working/ tells no restart anything, nor does one of a message
    that replaces no retained message: such markers (an exactly-once queue's, each kept for
    done_ttl, an hour) kept every tombstone of the root as long, one for each topic whose
    retained message was cleared meanwhile (11 files a round of bench/soak.py, 132 at its round
    12; found by a soak)."""
    clock = ManualClock(time.time())
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        _a_marked_message_delivered(box, to)
        # Another message to a topic waits for its deliver in the incoming working/: the
        # delete cannot tell its marker will not come, and leaves a tombstone.
        assert box.assured("door", "2", b"waits", topic="elsewhere")
        box.publish("t", b"", retain=True)
        assert retained_file(tmp_path, "t").exists()  # a tombstone
        marker = _ten_minutes_old(tmp_path)
        box.sweep()
        assert marker.exists()  # remembered for done_ttl
        assert [path.name for path in _folder(tmp_path).iterdir()] == (
            [] if to == "queue" else [retained_name("mine")]  # its message
        )


@pytest.mark.parametrize("to", ["queue", "topic"])
def test_a_delete_while_no_marked_message_waits_writes_no_tombstone(
    tmp_path: Path, to: str
) -> None:
    """A delete wrote a tombstone whenever `.exactly-once/` held a marker, and a marker stays
    for done_ttl (an hour) after its message was sent: one QoS 2 message in the last hour,
    even to a queue, made each retained delete create a file that the sweep deleted later
    (12 system calls a delete and a file's creation, against 7 to 10 now: strace). Only a
    marked message still waiting in the incoming working/ can have a restart replace a
    retained message: with none there, a delete unlinks."""
    with boxmq.open(tmp_path, fsync="never") as box:
        box.publish("t", b"on", retain=True)
        _a_marked_message_delivered(box, to)
        assert os.listdir(tmp_path / ".exactly-once")  # remembered for done_ttl
        box.publish("t", b"", retain=True)
        box.publish("never/retained", b"", retain=True)
        assert [path.name for path in _folder(tmp_path).iterdir()] == (
            [] if to == "queue" else [retained_name("mine")]  # its message
        )


def test_a_marker_whose_retained_message_waits_keeps_its_own_topics_tombstone_alone(
    tmp_path: Path,
) -> None:
    """Not yet past done_ttl: a PUBREL cut short (its process killed between the marker and
    the send) keeps its topic's tombstone, which tells its restart that a delete came since,
    and no other."""
    clock = ManualClock(time.time())
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        box.sweep()  # its books read before the message was stored
        _a_pubrel_cut_short(tmp_path, clock, box)
        clock.advance(RETAINED_EVERY)
        box.sweep()
        [kept] = _folder(tmp_path).iterdir()
        assert kept.name == retained_name("mine")
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        box.sweep()  # the restart: the deliver is finished, the delete since kept
        assert box.topics.retained("mine") is None


def test_a_marker_left_waiting_past_done_ttl_keeps_its_own_topics_tombstone_alone(
    tmp_path: Path,
) -> None:
    """A retained QoS 2 PUBREL cut short (its process killed between the marker and the
    send) whose session never comes back keeps its marker while its message waits: that
    marker kept every tombstone of the root, for good. Only its topic's may still matter to
    the restart that finishes it; the others go once older than the markers of done_ttl."""
    clock = ManualClock(time.time())
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        box.sweep()  # its books read before the message was stored
        marker = _a_pubrel_cut_short(tmp_path, clock, box)
        clock.advance(box.intake.limits.done_ttl + 1)
        box.sweep()
        assert marker.exists()  # its message waits: a restart finishes it
        [kept] = _folder(tmp_path).iterdir()
        assert kept.name == retained_name("mine")
        assert box.intake.pinned == {"mine": marker.stat().st_mtime}
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        box.sweep()  # the restart: the deliver is finished, the delete since kept
        assert box.topics.retained("mine") is None


def _a_pubrel_cut_short(tmp_path: Path, clock: ManualClock, box: boxmq.Box) -> Path:
    """A retained QoS 2 message on "mine" whose PUBREL was cut short (its process killed
    between the marker and the send), then retained deletes of "mine" and "other": the
    marker, written before both tombstones, all ten minutes old."""
    with boxmq.open(tmp_path, fsync="never", clock=clock) as dying:
        retained = {PUBLISHED_RETAINED: True}  # as the MQTT door's: boxmq's own bx_rp
        old = AssuredMessage("mqtt:gone", "1", b"old", topic="mine", properties=retained)
        assert dying.intake.assured_one(old, reserved=True)

        def killed(*args: object, **kwargs: object) -> list[OSError | None]:
            raise Killed

        dying.topics.send_files = killed  # type: ignore[method-assign]
        with pytest.raises(Killed):
            dying.intake.deliver_many([("mqtt:gone", "1")], remember=False)
    box.publish("mine", b"", retain=True)
    box.publish("other", b"", retain=True)
    return _ten_minutes_old(tmp_path)


def _ten_minutes_old(tmp_path: Path) -> Path:
    """The root's one exactly-once marker, aged to a second before its tombstones, each
    aged to ten minutes: past the sweep's five minutes, the marker older than every one."""
    [marker] = (tmp_path / ".exactly-once").iterdir()
    written = time.time() - 600
    os.utime(marker, (written - 1, written - 1))
    for tombstone in _folder(tmp_path).iterdir():
        os.utime(tombstone, (written, written))
    return marker
