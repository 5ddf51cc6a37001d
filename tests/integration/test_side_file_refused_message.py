"""A message whose side file was written, then whose own file a full disk refused, leaves no
side file that nothing names (it stayed until the hourly collection), and never takes one
that another message names."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from tests.diskfull import SmallDisk, small_disk
from tests.retained import retained_file, retained_folder

import boxmq
from boxmq.client.assured import AssuredMessage
from boxmq.client.publishing import Publication
from boxmq.model import PROPERTIES_FILE, PUBLISHED_RETAINED
from boxmq.mqtt.properties import Properties
from boxmq.store.commit import Committer, Move
from boxmq.store.side_files import SIDE_DIR, key_of, referenced

RAW = Properties.build(user_properties=[("k", "v" * 300)]).raw
KEY = key_of(RAW)
BODY = b"x" * 20_000  # more than the page the full disk leaves: the side file takes that


def _door_message(msg_id: str) -> AssuredMessage:
    """A persistent MQTT session's QoS 2 PUBLISH of long v5 properties, as the door hands it
    to the exactly-once intake: the key in its properties, the bytes to write beside."""
    return AssuredMessage(
        "mqtt:pub", msg_id, BODY, topic="t/a", properties={PROPERTIES_FILE: KEY}, side_file=RAW
    )


def _refused_then_stored(
    disk: SmallDisk, box: boxmq.Box, send: Callable[[], object], *, named_before: bool
) -> object:
    """`send`, refused by the full disk, leaves the side file only if a message stored before
    names it; sent again once there is room, it stores the side file, named. What the second
    `send` returned."""
    root = disk.path / "data"
    disk.fill(leave=1)
    with pytest.raises(OSError, match="No space left"):
        send()
    assert os.listdir(root / SIDE_DIR) == ([KEY] if named_before else [])
    assert referenced(str(root)) == ({KEY} if named_before else set())
    disk.free()
    sent = send()  # sent again
    assert box.side_files.get(KEY) == RAW
    assert referenced(str(root)) == {KEY}
    return sent


@pytest.mark.parametrize("named_before", [False, True], ids=["alone", "named-before"])
def test_an_exactly_once_message_the_disk_refuses_leaves_no_side_file_named_by_nothing(
    tmp_path: Path, named_before: bool
) -> None:
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        with boxmq.open(root, fsync="never") as box:
            assert box.intake.assured_one(
                _door_message("0") if named_before else AssuredMessage("a", "0", b"", topic="t/a"),
                reserved=True,
            )
            send = partial(box.intake.assured_one, _door_message("1"), reserved=True)
            assert _refused_then_stored(disk, box, send, named_before=named_before)


def test_an_exactly_once_message_whose_commit_fails_leaves_no_side_file_named_by_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its file written, its move into working/ refused (a flush's EIO): the file goes, and
    the side file made for it alone with it; the sender's second try stores both."""
    with boxmq.open(root, fsync="never") as box:
        intake = box.intake
        with monkeypatch.context() as failing:
            failing.setattr(
                Committer,
                "commit_each",
                lambda self, groups: [OSError(5, "Input/output error")] * len(groups),
            )
            with pytest.raises(OSError, match="Input/output error"):
                intake.assured_one(_door_message("1"), reserved=True)
        assert os.listdir(root / SIDE_DIR) == []
        assert intake.assured_one(_door_message("1"), reserved=True)
        assert referenced(str(root)) == {KEY}
        assert box.side_files.get(KEY) == RAW


@pytest.mark.parametrize("named_before", [False, True], ids=["alone", "named-before"])
def test_a_publication_whose_copies_the_disk_refuses_leaves_no_side_file_named_by_nothing(
    tmp_path: Path, named_before: bool
) -> None:
    """A door's publication (the MQTT door's QoS 1 PUBLISH of long v5 properties) writes its
    side file, then the copies that name it: refused, it is told to send them again."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        with boxmq.open(root, fsync="never") as box:
            box.subscribe("t/#", "s").close()  # a durable subscription: a copy to write
            publish = partial(
                box.topics.publish,
                "t/a",
                BODY,
                properties={PROPERTIES_FILE: KEY},
                reserved=True,
                side_file=RAW,
            )
            if named_before:
                publish()
            _refused_then_stored(disk, box, publish, named_before=named_before)


def test_a_publication_whose_commit_fails_after_its_copies_went_out_keeps_its_side_file(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit's flush that fails (EIO) once the copies are linked: the publisher is told
    of a failure for copies that were delivered, which still read their properties."""
    with boxmq.open(root, fsync="never") as box:
        subscriber = box.subscribe("t/#", "s")
        real = Committer.commit

        def flush_failed(self: Committer, moves: list[Move]) -> None:
            real(self, moves)
            raise OSError(5, "Input/output error")

        with monkeypatch.context() as failing:
            failing.setattr(Committer, "commit", flush_failed)
            with pytest.raises(OSError, match="Input/output error"):
                box.topics.publish(
                    "t/a", BODY, properties={PROPERTIES_FILE: KEY}, reserved=True, side_file=RAW
                )
        assert os.listdir(root / SIDE_DIR) == [KEY]
        message = subscriber.receive(timeout=5)
        assert message is not None
        assert message.properties.get("k") == "v" * 300
        subscriber.close()


LONG_TOPIC = "t/a-topic-of-sixty-bytes-that-leaves-a-name-no-room-for-a-key"


@pytest.mark.parametrize("named_before", [False, True], ids=["alone", "named-before"])
def test_a_retained_message_the_disk_refuses_leaves_no_side_file_its_header_was_to_name(
    tmp_path: Path, named_before: bool
) -> None:
    """A retained PUBLISH on a topic whose name has no room for the key: its side file is
    written, then the retained file whose header names it, which the full disk refuses."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        with boxmq.open(root, fsync="never") as box:
            publish = partial(
                box.topics.publish, LONG_TOPIC, BODY, retain=True, reserved=True, side_file=RAW
            )
            if named_before:
                publish()
            _refused_then_stored(disk, box, publish, named_before=named_before)


def test_an_exactly_once_retained_deliver_the_disk_refuses_leaves_no_side_file_unnamed(
    tmp_path: Path,
) -> None:
    """The same at the PUBREL of a persistent session's QoS 2 retained PUBLISH, whose
    `deliver` writes the side file, then the retained file whose header names it."""
    message = AssuredMessage(
        "mqtt:pub",
        "1",
        BODY,
        topic=LONG_TOPIC,
        properties={PUBLISHED_RETAINED: True},
        side_file=RAW,
    )
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        with boxmq.open(root, fsync="never") as box:
            assert box.intake.assured_one(message, reserved=True)
            disk.fill(leave=2)  # the deliver's marker, then the side file
            with pytest.raises(OSError, match="No space left"):
                box.intake.deliver("mqtt:pub", "1", remember=False)
            assert os.listdir(root / SIDE_DIR) == []
            assert referenced(str(root)) == set()
            disk.free()
            assert box.intake.deliver("mqtt:pub", "1", remember=False)  # the PUBREL again
            assert box.side_files.get(KEY) == RAW
            assert referenced(str(root)) == {KEY}


def test_a_retained_message_whose_flush_fails_once_in_place_keeps_its_side_file(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retained file renamed into place, then its flush refused (EIO): its header names
    the side file, which later subscribers read."""
    with boxmq.open(root, fsync="never") as box:
        real = Committer.commit

        def flush_failed(self: Committer, moves: list[Move]) -> None:
            real(self, moves)
            raise OSError(5, "Input/output error")

        with monkeypatch.context() as failing:
            failing.setattr(Committer, "commit", flush_failed)
            with pytest.raises(OSError, match="Input/output error"):
                box.topics.publish(LONG_TOPIC, BODY, retain=True, reserved=True, side_file=RAW)
        assert os.listdir(root / SIDE_DIR) == [KEY]
        assert referenced(str(root)) == {KEY}


def _blocked(root: Path, topic: str) -> None:
    """The topic's retained file is a directory (made by hand): the rename that would put a
    retained message in place fails (EISDIR), before any flush."""
    os.makedirs(retained_file(root, topic))


@pytest.mark.parametrize("named_before", [False, True], ids=["alone", "named-before"])
def test_a_retained_message_whose_rename_fails_leaves_no_side_file_its_header_was_to_name(
    root: Path, named_before: bool
) -> None:
    """The retained file written, its header naming the side file, then its rename into
    place refused: no header names the side file (a message of another topic named it first
    keeps it), which stayed until the hourly collection."""
    with boxmq.open(root, fsync="never") as box:
        if named_before:
            box.topics.publish(LONG_TOPIC + "2", BODY, retain=True, reserved=True, side_file=RAW)
        _blocked(root, LONG_TOPIC)
        with pytest.raises(IsADirectoryError):
            box.topics.publish(LONG_TOPIC, BODY, retain=True, reserved=True, side_file=RAW)
        assert os.listdir(root / SIDE_DIR) == ([KEY] if named_before else [])
        assert referenced(str(root)) == ({KEY} if named_before else set())
        kept = os.listdir(retained_folder(root))
        assert [name for name in kept if name.startswith(".")] == []  # nor its staged file


def test_an_exactly_once_retained_deliver_whose_rename_fails_leaves_no_side_file_unnamed(
    root: Path,
) -> None:
    """The same at the PUBREL's deliver of a persistent session's QoS 2 retained PUBLISH."""
    message = AssuredMessage(
        "mqtt:pub",
        "1",
        BODY,
        topic=LONG_TOPIC,
        properties={PUBLISHED_RETAINED: True},
        side_file=RAW,
    )
    with boxmq.open(root, fsync="never") as box:
        assert box.intake.assured_one(message, reserved=True)
        _blocked(root, LONG_TOPIC)
        with pytest.raises(IsADirectoryError):
            box.intake.deliver("mqtt:pub", "1", remember=False)
        assert os.listdir(root / SIDE_DIR) == []
        assert referenced(str(root)) == set()


LONG = {"k": "v" * 300}  # a producer's property too long for a name: spilled to a side file


def _queue_put(box: boxmq.Box) -> object:
    return box.queue("jobs").put(BODY, properties=LONG)


def _publish(box: boxmq.Box) -> object:
    return box.publish("t/a", BODY, properties=LONG)


def _publish_retained(box: boxmq.Box) -> object:
    return box.publish("t/a", BODY, properties=LONG, retain=True)


def _publish_many(box: boxmq.Box) -> object:
    return box.topics.publish_many([Publication("t/a", BODY, properties=LONG)])


def _assured(box: boxmq.Box) -> object:
    return box.assured("meter", "1", BODY, queue="jobs", properties=LONG)


@pytest.mark.parametrize("send", [_queue_put, _publish, _publish_retained, _publish_many, _assured])
def test_a_producers_message_the_disk_refuses_leaves_no_side_file_named_by_nothing(
    tmp_path: Path, send: Callable[[boxmq.Box], object]
) -> None:
    """A put, publish or exactly-once message of the Python API (or the CLI) whose properties
    do not fit in its name writes them to a side file (client/spill.py), then its file."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        with boxmq.open(root, fsync="never") as box:
            box.subscribe("t/#", "s").close()  # a durable subscription: a copy to write
            box.queue("jobs").put(b"")  # its folders made
            disk.fill(leave=1)
            with pytest.raises(OSError, match="No space left"):
                send(box)
            assert os.listdir(root / SIDE_DIR) == []
            assert referenced(str(root)) == set()
            disk.free()
            send(box)  # sent again
            [key] = referenced(str(root))
            assert os.listdir(root / SIDE_DIR) == [key]


def test_a_batch_refused_for_a_bad_message_leaves_no_side_file_of_the_good_ones(
    root: Path,
) -> None:
    """publish_many checks every message before it writes their files, but the side file of
    one whose properties spill was written as it was checked, and stayed when a later one
    failed its check."""
    with boxmq.open(root, fsync="never") as box:
        box.subscribe("t/#", "s").close()
        batch = [Publication("t/a", BODY, properties=LONG), Publication("t/+", b"no topic")]
        with pytest.raises(boxmq.InvalidTopic):
            box.topics.publish_many(batch)
        assert not os.path.exists(root / SIDE_DIR) or os.listdir(root / SIDE_DIR) == []
