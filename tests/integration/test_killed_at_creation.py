"""A publish killed at each change to the file system, its files' creations too (the body in
working/ or a spare, the side file of its v5 properties and its temporary, a retained copy):
after a restart and a sweep, what was acknowledged is all there, and nothing half written
is delivered."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest
from tests.crashes import Killed, kill_at

import boxmq
from boxmq.model import PROPERTIES_FILE, TOPIC, Envelope
from boxmq.mqtt.packets import Publish
from boxmq.mqtt.properties import Properties
from boxmq.mqtt.stored import side_file_of, store_with_properties
from boxmq.store.names import decode
from boxmq.store.side_files import GRACE, SideFiles
from boxmq.store.temporaries import TEMPORARY_PREFIX

# Too long for a message's name: they go to a side file, as the MQTT door writes them.
_PROPERTIES = Properties.build(user_properties=[("k", "v" * 300)], content_type="text/plain")


def _publish(box: boxmq.Box, topic: str, body: bytes) -> None:
    """Store a PUBLISH with long v5 properties as the MQTT door does (mqtt/publishing.py)."""
    packet = Publish(topic, body, 1, packet_id=1, retain=True, properties=_PROPERTIES)

    def publish(properties: dict[str, str]) -> object:
        return box.topics.publish(
            topic,
            body,
            retain=True,
            properties=properties,
            reserved=True,
            side_file=side_file_of(packet, properties),
        )

    store_with_properties(packet, publish, lambda _: 0)


def _whole(envelope: Envelope, side: SideFiles) -> None:
    """The side file `envelope` names holds its properties whole."""
    key = envelope.property_value(PROPERTIES_FILE)
    assert isinstance(key, str), f"{envelope} names no side file"
    assert side.get(key) == _PROPERTIES.raw, f"{envelope}'s side file is not whole"


def _delivered(dropbox: str, side: SideFiles) -> list[tuple[str, bytes]]:
    """Each message ready in `dropbox`: its topic and body, its side file checked whole."""
    found = []
    target = os.path.join(dropbox, "target")
    for name in os.listdir(target):
        envelope = decode(name)
        _whole(envelope, side)
        topic = envelope.property_value(TOPIC)
        assert isinstance(topic, str)
        found.append((topic, Path(target, name).read_bytes()))
    return sorted(found)


def _retained(box: boxmq.Box, topic: str, side: SideFiles) -> bytes | None:
    """The body of `topic`'s retained message, its side file checked whole."""
    found = box.topics.retained(topic)
    if found is None:
        return None
    _whole(found[0], side)
    return found[1]


def _empty_files_left(root: Path) -> bool:
    """Whether the root holds an empty file, made by a write killed before it wrote (no file
    a publish of these messages writes is empty: a retained delete's tombstone would be)."""
    return any(path.is_file() and not path.stat().st_size for path in root.rglob("*"))


@pytest.mark.parametrize("spares", [256, 0])
def test_a_publish_killed_at_any_change_or_creation_delivers_whole_messages_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spares: int
) -> None:
    """Killed once the file it makes is there, empty, before its write (a SIGKILL between
    the open and the write), at every creation and every rename of a publish, with a spare
    an ack left (the body written into it in place) or without: the
    publishes that returned before are delivered and retained whole; the one killed is
    delivered whole or not at all, its retained copy whole or the older one; and nothing is
    left in working/ or among the temporaries once the sweep is past abandon_after."""
    killed_at_creation = 0  # kills that left a file made, nothing written into it yet
    for step in itertools.count(1):
        root = tmp_path / str(step)
        clock = boxmq.ManualClock(time.time())
        box = boxmq.open(root, fsync="never", spares=spares, keep_processed=False, clock=clock)
        dropbox = box.topics.attach_dropbox("t/#", "reader")
        _publish(box, "t/1", b"acknowledged")  # returned: its publisher was told
        _publish(box, "t/2", b"an older one")
        jobs = box.queue("jobs")  # an ack: with spares, the killed publish writes into its file
        jobs.put(b"a job's body, longer than the publish's")
        taken = jobs.get("w")
        assert taken is not None
        jobs.ack(taken.id, "w")
        with monkeypatch.context() as dying:
            kill_at(dying, step)
            try:
                _publish(box, "t/2", b"killed or not")
                killed = False
            except Killed:
                killed = True
        box.close()
        if killed and _empty_files_left(root):
            killed_at_creation += 1
        clock.advance(GRACE + 7200.0)  # past abandon_after and the temporaries' age
        with boxmq.open(root, fsync="never", spares=spares, clock=clock) as restarted:
            restarted.sweep()
            assert restarted.queue("jobs").get("w") is None, f"killed at change {step}"
            side = SideFiles(str(root))
            got = _delivered(dropbox, side)
            retained = [_retained(restarted, topic, side) for topic in ("t/1", "t/2")]
        assert got in (
            [("t/1", b"acknowledged"), ("t/2", b"an older one")],
            [("t/1", b"acknowledged"), ("t/2", b"an older one"), ("t/2", b"killed or not")],
        ), f"killed at change {step}: {got}"
        assert retained[0] == b"acknowledged", f"killed at change {step}"
        assert retained[1] in (b"an older one", b"killed or not"), f"killed at change {step}"
        left = [
            str(path.relative_to(root))
            for path in root.rglob("*")
            if path.is_file()
            and (path.name.startswith(TEMPORARY_PREFIX) or path.parent.name == "working")
        ]
        assert left == [], f"killed at change {step}: {left}"
        if not killed:
            assert killed_at_creation, "no creation was a kill point"
            assert got[-1] == ("t/2", b"killed or not")
            assert retained[1] == b"killed or not"
            return
