"""A subscription made or ended is read again alone by the other boxes on the root: each
change read every record on disk again (10,000 persistent sessions subscribing at connect
made 50 million record reads in a broker)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import boxmq
from boxmq.store import topics as layout
from boxmq.store.layout import State
from boxmq.store.records import read_file


class Reads:
    """The subscription records read (layout.read_record, which the scan calls for each)."""

    def __init__(self) -> None:
        self.count = 0

    def taken(self) -> int:
        count, self.count = self.count, 0
        return count


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    counted, read = Reads(), layout.read_record

    def counting(path: str) -> layout.SubscriptionRecord | None:
        counted.count += 1
        return read(path)

    monkeypatch.setattr(layout, "read_record", counting)
    return counted


@pytest.fixture
def boxes(root: Path) -> Iterator[tuple[boxmq.Box, boxmq.Box]]:
    with boxmq.open(root, fsync="never") as changer, boxmq.open(root, fsync="never") as router:
        yield changer, router


def test_each_subscribe_and_unsubscribe_reads_one_record(
    boxes: tuple[boxmq.Box, boxmq.Box], reads: Reads
) -> None:
    changer, router = boxes
    for device in range(30):
        changer.topics.attach_dropbox(f"dev/{device}/#", f"d{device}")
    assert router.topics.has_durable("dev/0/x")
    assert reads.taken() >= 30  # the first look reads them all
    for device in range(30, 40):
        assert not router.topics.has_durable(f"dev/{device}/x")
        changer.topics.attach_dropbox(f"dev/{device}/#", f"d{device}")
        reads.taken()  # the changer's own look at the record it writes
        assert router.topics.has_durable(f"dev/{device}/x")
        assert reads.taken() == 1
    for device in range(0, 40, 4):
        changer.topics.unsubscribe(f"dev/{device}/#", f"d{device}")
        reads.taken()
        assert not router.topics.has_durable(f"dev/{device}/x")
        assert router.topics.has_durable(f"dev/{device + 1}/x")
        assert reads.taken() == 1
    # Changes between two looks (a burst of subscribes): each read once.
    for device in range(100, 110):
        changer.topics.attach_dropbox(f"dev/{device}/#", f"d{device}")
    reads.taken()
    assert all(router.topics.has_durable(f"dev/{device}/x") for device in range(100, 110))
    assert reads.taken() == 10


def test_a_share_group_joined_and_left_elsewhere_is_routed_as_it_stands(
    boxes: tuple[boxmq.Box, boxmq.Box], reads: Reads
) -> None:
    changer, router = boxes
    changer.topics.attach_dropbox("other/#", "o")
    a = changer.subscribe("$share/g/jobs/#", "a", qos=0)
    assert router.topics.has_durable("jobs/1")
    assert reads.taken() >= 2
    b = changer.subscribe("$share/g/jobs/#", "b", qos=1)
    reads.taken()
    assert router.topics.has_durable("jobs/1")
    assert reads.taken() == 1
    router.publish("jobs/1", b"one", qos=1)  # into the group's one dropbox
    got = next(m for _ in range(100) for member in (a, b) if (m := member.receive(timeout=0.05)))
    assert got.body == b"one"
    got.ack()
    a.close()
    assert router.topics.has_durable("jobs/1")
    assert reads.taken() == 1
    b.close()  # the last member: the group ends
    assert not router.topics.has_durable("jobs/1")
    assert router.topics.has_durable("other/1")
    assert reads.taken() == 1


def test_a_memory_subscription_keeps_its_place_beside_a_durable_one_of_its_name_elsewhere(
    boxes: tuple[boxmq.Box, boxmq.Box],
) -> None:
    """A memory subscription here, a durable one of the same subscriber and filter made and
    ended by another process: this process's publications go to the memory one throughout,
    as a scan of every record leaves it."""
    changer, router = boxes
    router.topics.has_durable("m/1")
    with router.subscribe("m/#", "s", durable=False) as memory:
        changer.topics.attach_dropbox("m/#", "s")
        router.publish("m/1", b"one", qos=0)
        changer.topics.unsubscribe("m/#", "s")
        router.publish("m/2", b"two", qos=0)
        got = [memory.receive(timeout=1), memory.receive(timeout=1)]
    assert [m.body for m in got if m is not None] == [b"one", b"two"]


def test_a_durable_subscription_a_memory_one_stood_in_for_is_routed_again_once_it_closes(
    boxes: tuple[boxmq.Box, boxmq.Box],
) -> None:
    """The memory one's close took the durable one of its name and filter (another
    process's) out of this process's router with it: its publications went to nobody until
    the next change of the subscriptions, acknowledged all the same (found by a second
    read)."""
    changer, router = boxes
    memory = router.subscribe("m/#", "s", durable=False)
    with changer.subscribe("m/#", "s") as durable:  # made after it: refused before
        router.publish("m/1", b"to the memory one")
        memory.close()
        router.publish("m/2", b"after its close")
        got = durable.receive(timeout=1)
    assert got is not None
    assert got.body == b"after its close"


def test_a_burst_of_a_boxs_own_subscribes_reads_no_other_record(root: Path, reads: Reads) -> None:
    """More of its own changes between two looks than the generation file names (a broker's
    200 devices subscribing at once): each record read as it is written, none again at the
    look (it read every record on the root then)."""
    with boxmq.open(root, fsync="never") as box:
        for device in range(10):
            box.topics.attach_dropbox(f"dev/{device}/#", f"d{device}")
        assert box.topics.has_durable("dev/0/x")
        reads.taken()
        for device in range(10, 110):  # over layout._KEPT
            box.topics.attach_dropbox(f"dev/{device}/#", f"d{device}")
        assert reads.taken() == 100  # each record: a look before it is written, none after
        assert all(box.topics.has_durable(f"dev/{device}/x") for device in range(110))
        assert reads.taken() == 0
        for device in range(0, 110, 2):
            box.topics.unsubscribe(f"dev/{device}/#", f"d{device}")
        assert not box.topics.has_durable("dev/0/x")
        assert box.topics.has_durable("dev/1/x")
        assert reads.taken() == 55


def test_a_new_subscription_s_state_folders_are_made_once_and_one_lost_made_again(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its record's write makes its seven state folders; its Dropbox looked at each again (a
    stat each). A subscription found on disk is still looked at: a folder removed by hand is
    made again when it is opened. The one look before the record is written is at working/:
    whether the folder holds what an ended subscription left (topics.clear_left_behind)."""
    looked: list[str] = []
    isdir = os.path.isdir

    def counting(path: str) -> bool:
        looked.append(path)
        return isdir(path)

    with boxmq.open(root, fsync="never") as box:
        monkeypatch.setattr(os.path, "isdir", counting)
        path = box.topics.attach_dropbox("dev/#", "d")
        states = {os.path.join(path, state.value) for state in State}
        assert [p for p in looked if p in states] == [os.path.join(path, State.WORKING.value)]
        shutil.rmtree(os.path.join(path, State.PROCESSED.value))
        assert box.topics.attach_dropbox("dev/#", "d") == path  # its record as it was
        assert states <= set(looked)
        assert all(isdir(folder) for folder in states)


def test_a_member_s_join_and_leave_read_no_other_member_s_file(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A join read every member's file (its process token) twice, to check its own and to
    route the group, and a leave once: a group's N joins read N² files."""
    opened: list[str] = []

    def counting(file: str) -> bytes:
        opened.append(file)
        return read_file(file)

    with boxmq.open(root, fsync="never") as box:
        box.topics.attach_dropbox("warm/#", "w")
        assert box.topics.has_durable("warm/x")  # a look: its own changes are routed at once
        members = [box.subscribe("$share/g/t/#", f"m{i}") for i in range(10)]
        monkeypatch.setattr(layout, "read_file", counting)
        joined = box.subscribe("$share/g/t/#", "m10")
        assert [os.path.basename(file) for file in opened if ".members" in file] == ["m10"]
        opened.clear()
        joined.close()
        assert [file for file in opened if ".members" in file] == []
        monkeypatch.undo()
        assert box.topics.members_of("g", "t/#") == sorted(f"m{i}" for i in range(10))
        for member in members:
            member.close()


def test_what_needs_a_group_s_member_names_reads_no_member_s_file(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing (`boxmq ls`), a member's subscriptions, the members of a group, whether one
    is a member and the process it is bound to read the file of every member (its process
    token) where only their names, or one's token, were needed: 100 members made each of
    them 100 opens, a sweep 200 (its token each, then again to see whether any was left)."""
    opened: list[str] = []

    def counting(file: str) -> bytes:
        opened.append(file)
        return read_file(file)

    def member_files() -> list[str]:
        found = [os.path.basename(file) for file in opened if ".members" in file]
        opened.clear()
        return found

    names = [f"m{i}" for i in range(5)]
    with boxmq.open(root, fsync="never") as box:
        topics = box.topics
        for name in names:
            topics.attach_dropbox("$share/g/t/#", name)
        monkeypatch.setattr(layout, "read_file", counting)
        [info] = topics.subscriptions()
        assert info.members == tuple(names)
        assert topics.members_of("g", "t/#") == names
        assert [text for text, _ in topics.subscribed("m3")] == ["$share/g/t/#"]
        assert topics.has_subscription("$share/g/t/#", "m3")
        assert not topics.has_subscription("$share/g/t/#", "m9")
        assert member_files() == []
        assert topics.bound_to("$share/g/t/#", "m3") == ""  # bound to no process
        assert member_files() == ["m3"]
        assert topics.sweep_subscriptions() == 0
        assert sorted(member_files()) == names  # each one's token, once
