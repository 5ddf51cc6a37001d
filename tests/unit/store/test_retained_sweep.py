"""The sweep of retained messages reads each file's header (topic and name), never its body."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.retained import retained_folder

from boxmq.store.retained import RetainedHeader, RetainedStore


def _bytes_read() -> int:
    """What this process read so far, by every read system call (Linux's /proc/self/io)."""
    try:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))
    except FileNotFoundError:
        pytest.skip("no /proc/self/io here")


def test_a_big_body_is_not_read_to_learn_it_has_not_expired(store: RetainedStore) -> None:
    store.replace(store.stage("big", "4.m1.T", bytes(1 << 20)))
    seen: list[RetainedHeader] = []

    def stale(found: RetainedHeader) -> bool:
        seen.append(found)
        return False

    before = _bytes_read()
    assert store.remove_if(stale) == 0
    assert _bytes_read() - before < 64 * 1024  # a page of it, and /proc/self/io's lines
    assert seen == [RetainedHeader("big", "4.m1.T")]
    assert store.get("big") is not None


def test_a_header_longer_than_a_page_is_read_whole(store: RetainedStore) -> None:
    long = "t/" + "\x01" * 5000  # a control character is 6 bytes in JSON: a 30 kB header
    store.replace(store.stage(long, "4.old.T", b"body\nwith a newline"))
    store.replace(store.stage("short", "4.old.T", b"1"))
    seen: list[str] = []

    def stale(found: RetainedHeader) -> bool:
        seen.append(found.topic)
        return found.topic == long

    assert store.remove_if(stale) == 1
    assert sorted(seen) == sorted([long, "short"])
    assert store.get(long) is None
    assert store.get("short") is not None


def test_a_damaged_header_is_passed_by(store: RetainedStore, tmp_path: Path) -> None:
    """No newline (cut short by a power cut) or no JSON: neither read as stale nor a failure."""
    folder = retained_folder(tmp_path)
    store.replace(store.stage("a", "4.m1.T", b"1"))
    (folder / "cut").write_bytes(json.dumps({"topic": "b", "name": "4.m2.T"}).encode()[:-3])
    (folder / "junk").write_bytes(b"\x00" * 10_000)
    assert store.remove_if(lambda found: True) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["cut", "junk"]


def test_a_header_cut_before_its_newline_is_no_message(
    store: RetainedStore, tmp_path: Path
) -> None:
    """A file cut short right after its whole header is damaged, passed by as any other: read
    as a message with an empty body, it would go to subscribers as a delete (MQTT 5.0
    §3.3.1.3), and the sweep would judge it."""
    store.replace(store.stage("a", "4.m1.T", b"1"))
    cut = Path(store._path("b"))
    cut.write_bytes(json.dumps({"topic": "b", "name": "4.m2.T"}).encode())
    assert store.get("b") is None
    assert [found.topic for found in store.matching(lambda topic: True)] == ["a"]
    seen: list[str] = []

    def stale(found: RetainedHeader) -> bool:
        seen.append(found.topic)
        return True

    assert store.remove_if(stale) == 1
    assert seen == ["a"]
    assert cut.exists()
