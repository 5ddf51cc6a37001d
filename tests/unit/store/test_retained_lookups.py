"""A SUBSCRIBE reads only the retained files it may send, and never an old message: an exact
topic its one file, a wildcard the files of the topics it matches (their topics known from an
earlier listing), whatever another process replaced or deleted since."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from tests.retained import retained_file, retained_folder, retained_name

import boxmq
from boxmq.clock import ManualClock
from boxmq.model import QOS
from boxmq.store.retained import RETAINED_DIR

_opened: list[str] | None = None  # the paths opened while `_retained_opens` records


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _opened is not None and event == "open" and RETAINED_DIR in str(args[0]):
        _opened.append(str(args[0]))


sys.addaudithook(_audit)  # for good (a hook cannot be removed): it records only when asked


@contextmanager
def _retained_opens() -> Iterator[list[str]]:
    """The retained files opened (the real `open` calls, counted by Python's audit hook)."""
    global _opened
    _opened = []
    try:
        yield _opened
    finally:
        _opened = None


def _bodies(subscriber: boxmq.Subscriber) -> dict[str, bytes]:
    """The retained messages a memory subscription got, by topic."""
    got = {}
    while (message := subscriber.receive(timeout=0)) is not None:
        assert message.topic is not None
        got[message.topic] = message.body
    subscriber.close()
    return got


def _twenty(box: boxmq.Box) -> None:
    for n in range(20):
        box.publish(f"dev/{n}/status", f"on {n}", retain=True)


def test_an_exact_topic_opens_its_one_file(tmp_path: Path) -> None:
    with boxmq.open(tmp_path, fsync="never") as box:
        _twenty(box)
        with _retained_opens() as opened:
            got = _bodies(box.subscribe("dev/7/status", "m", durable=False))
        assert got == {"dev/7/status": b"on 7"}
        assert len(opened) == 1
        with _retained_opens() as opened:
            box.subscribe("dev/8/status", "d").close()  # a durable one: its copy on disk
        assert len(opened) == 1
        with _retained_opens() as opened:
            assert _bodies(box.subscribe("dev/99/status", "m", durable=False)) == {}
        assert len(opened) == 1  # not found


def test_a_wildcard_opens_the_files_it_matches_once_their_topics_are_known(
    tmp_path: Path,
) -> None:
    with boxmq.open(tmp_path, fsync="never") as box:
        _twenty(box)
        with _retained_opens() as opened:
            assert len(_bodies(box.subscribe("dev/+/status", "m", durable=False))) == 20
        assert len(opened) == 20  # the first look reads each
        with _retained_opens() as opened:
            got = _bodies(box.subscribe("dev/3/+", "m", durable=False))
        assert got == {"dev/3/status": b"on 3"}
        assert len(opened) == 1
        with _retained_opens() as opened:
            assert _bodies(box.subscribe("other/#", "m", durable=False)) == {}
        assert opened == []


_OTHER_PROCESS = """
import sys, boxmq
with boxmq.open(sys.argv[1], fsync="never") as box:
    box.publish("dev/3/status", "off 3", retain=True)  # replaced
    box.publish("dev/4/status", "", retain=True)  # deleted
    box.publish("dev/40/status", "on 40", retain=True)  # new
"""


def test_what_another_process_replaced_or_deleted_is_seen(tmp_path: Path) -> None:
    with boxmq.open(tmp_path, fsync="never") as box:
        _twenty(box)
        assert len(_bodies(box.subscribe("dev/+/status", "m", durable=False))) == 20
        subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(tmp_path)], check=True)
        got = _bodies(box.subscribe("dev/+/status", "m", durable=False))
        assert len(got) == 20
        assert (got["dev/3/status"], got["dev/40/status"]) == (b"off 3", b"on 40")
        assert "dev/4/status" not in got
        assert _bodies(box.subscribe("dev/3/+", "m", durable=False)) == {"dev/3/status": b"off 3"}
        assert _bodies(box.subscribe("dev/4/+", "m", durable=False)) == {}
        assert _bodies(box.subscribe("dev/3/status", "m", durable=False)) == {
            "dev/3/status": b"off 3"
        }


def test_an_expired_retained_message_is_not_copied_to_a_new_durable_subscription(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        box.publish("dev/1/status", "on", retain=True, expires_in=10)
        box.publish("dev/2/status", "on", retain=True)
        clock.advance(11)
        for filter, copied in (("dev/1/status", 0), ("dev/+/status", 1)):  # dev/2's
            box.subscribe(filter, "d").close()
            counts = box.subscription(filter, "d").counts()
            assert (counts.ready, counts.expired) == (copied, 0)  # none made to expire there


def test_the_topics_kept_are_those_of_the_folder(tmp_path: Path) -> None:
    """What a box keeps to skip files (the topic of each name read) never outgrows the
    folder: topics cleared by an empty retained publish, or by the sweep once expired, are
    forgotten at the next look."""
    clock = ManualClock()
    with boxmq.open(tmp_path, fsync="never", clock=clock) as box:
        _twenty(box)
        box.publish("dev/99/status", "on", retain=True, expires_in=10)
        assert len(_bodies(box.subscribe("dev/#", "m", durable=False))) == 21
        assert len(box.topics._retained._topics) == 21
        for n in range(10):
            box.publish(f"dev/{n}/status", "", retain=True)
        clock.advance(11)
        assert box.topics.remove_expired_retained(clock.now()) == 1
        assert len(_bodies(box.subscribe("dev/#", "m", durable=False))) == 10
        assert sorted(box.topics._retained._topics.values()) == sorted(
            f"dev/{n}/status" for n in range(10, 20)
        )


def test_a_file_not_named_for_its_topic_goes_to_no_subscription(tmp_path: Path) -> None:
    """A retained file is its topic's when named by the SHA-256 of the topic its header
    holds (file-format.md), dropped by hand or not; under another name it was not put there
    by a publish and no delete of its topic could clear it: an exact topic and a wildcard
    both pass it by (before, a wildcard sent it, and a second message of its topic with it)."""
    with boxmq.open(tmp_path, fsync="never") as box:
        box.publish("dev/1/status", "on 1", retain=True)
        folder = retained_folder(tmp_path)

        def drop(file: str, topic: str, body: bytes) -> None:
            name = f"4.byhand.T.....bx_topicS={quote(topic, safe='')}&bx_qosY=1"
            header = json.dumps({"topic": topic, "name": name}).encode()
            (folder / file).write_bytes(header + b"\n" + body)

        drop(retained_name("dev/2/status"), "dev/2/status", b"by hand")
        drop("dev-3", "dev/3/status", b"misnamed")
        drop(retained_name("dev/4/status"), "dev/1/status", b"misnamed")
        expected = {"dev/1/status": b"on 1", "dev/2/status": b"by hand"}
        assert _bodies(box.subscribe("dev/+/status", "m", durable=False)) == expected
        for n in (1, 2, 3, 4):
            got = _bodies(box.subscribe(f"dev/{n}/status", "m", durable=False))
            assert got == {k: v for k, v in expected.items() if k == f"dev/{n}/status"}


def test_a_retained_file_written_by_hand_with_the_least_name_is_sent(tmp_path: Path) -> None:
    """One written by hand under its topic's hash whose name is `4.<id>.T` (no `bx_topicS`,
    no `bx_qosY`, as a dropbox takes it): a subscribe that matched it failed ("qos None"),
    and its message had no topic (over MQTT, a PUBLISH to an empty topic). It goes now,
    to its topic, at QoS 1 at most, the default of a name without one."""
    with boxmq.open(tmp_path, fsync="never") as box:
        box.publish("dev/1/status", "on 1", retain=True)  # makes the folder
        header = json.dumps({"topic": "dev/2/status", "name": "4.byhand.T"}).encode()
        retained_file(tmp_path, "dev/2/status").write_bytes(header + b"\nhi")
        for filter in ("dev/2/status", "dev/+/status"):
            subscriber = box.subscribe(filter, "m", durable=False, qos=2)
            got = {}
            while (message := subscriber.receive(timeout=0)) is not None:
                got[message.topic] = (message.body, message.qos)
            subscriber.close()
            assert got["dev/2/status"] == (b"hi", 1)
            box.subscribe(filter, "d", qos=2).close()  # a durable one: its copy on disk
            stored = {p.envelope.topic: p for p in box.subscription(filter, "d").peek()}
            assert stored["dev/2/status"].envelope.property_value(QOS) == 1
        found = box.topics.retained("dev/2/status")
        assert found is not None
        assert found[0].topic == "dev/2/status"
        read = box.topics.retained_reading("dev/2/status")  # an MQTT SUBSCRIBE's
        assert [envelope.topic for envelope, _ in read] == ["dev/2/status"]


def _taken_by_a_directory(root: Path, topic: str) -> Path:
    """The topic's retained file replaced by a directory (made by hand)."""
    path = retained_file(root, topic)
    path.unlink()
    path.mkdir()
    return path


def test_a_directory_at_a_topic_s_name_is_passed_by_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory where a retained file belongs raised IsADirectoryError from every look:
    a SUBSCRIBE to the topic or a wildcard over it got none of the others, and the sweep of
    expired messages stopped `boxmq serve` at its start. It holds no retained message, is
    told once, and every other topic's is sent."""
    with boxmq.open(tmp_path, fsync="never") as box:
        _twenty(box)
        blocked = _taken_by_a_directory(tmp_path, "dev/3/status")
        with caplog.at_level(logging.WARNING, logger="boxmq.store"):
            assert box.topics.retained("dev/3/status") is None
            got = {envelope.topic for envelope, _ in box.topics.retained_reading("dev/+/status")}
            assert got == {f"dev/{n}/status" for n in range(20) if n != 3}
            assert box.topics.remove_expired_retained(time.time(), tombstones_before=0.0) == 0
            assert box.topics.retained("dev/3/status") is None
        told = [record.getMessage() for record in caplog.records]
        assert len(told) == 1, told
        assert str(blocked) in told[0]
        assert "is a directory" in told[0]
        assert blocked.is_dir()  # left as it is: not the store's to delete
