"""`boxmq retained`: the retained messages a filter matches, listed without subscribing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import boxmq
from boxmq import cli
from boxmq.store.layout import TOPIC_ROOT
from boxmq.store.retained import RETAINED_DIR


def _store(root: Path) -> dict[str, tuple[int, int]]:
    """The retained files as they lie: name, inode and mtime, for `nothing changed`."""
    folder = root / TOPIC_ROOT / RETAINED_DIR
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}


def _said(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> str:
    assert cli.main(["--data", str(root), *args]) == 0
    said = capsys.readouterr()
    assert said.err == ""
    return said.out


def test_retained_lists_topic_size_qos_expiry_and_properties_and_changes_nothing(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No command showed the retained messages but a subscribe, which makes a subscription
    # and prints their bodies (found at an earlier stop).
    with boxmq.open(root, fsync="never") as box:
        box.publish(
            "dev/1/status", "on", retain=True, qos=2, properties={"site": "a"}, expires_in=600
        )
        box.publish("dev/2/status", "offline", retain=True)
        box.publish("other", "x", retain=True)
        box.publish("dev/3/status", "gone", retain=True, expires_in=0.05)
        box.publish("dev/4/status", "not kept", retain=False)
    time.sleep(0.1)  # dev/3's expiry passes: a subscriber is sent it no more
    before = _store(root)
    table = _said(capsys, root, "retained").splitlines()
    assert table[0].split() == ["TOPIC", "BYTES", "QOS", "EXPIRES-IN", "PROPERTIES"]
    assert [line.split() for line in table[1:]] == [
        ["dev/1/status", "2", "2", "600s", "site=a"],
        ["dev/2/status", "7", "1", "never"],
        ["other", "1", "1", "never"],
    ]
    listed = json.loads(_said(capsys, root, "--json", "retained", "dev/+/status"))
    assert [row["topic"] for row in listed] == ["dev/1/status", "dev/2/status"]
    first, second = listed
    assert 590 <= first.pop("expires-in") <= 600
    assert first.pop("expires").endswith("+00:00")
    assert first == {"topic": "dev/1/status", "bytes": 2, "qos": 2, "properties": {"site": "a"}}
    assert second == {
        "topic": "dev/2/status",
        "bytes": 7,
        "qos": 1,
        "expires-in": None,
        "properties": {},
    }
    assert _said(capsys, root, "retained", "nothing/#") == (
        f"no retained messages match nothing/# under {root}\n"
    )
    assert _store(root) == before  # read, never written nor deleted: dev/3's is there still
    assert os.listdir(root / TOPIC_ROOT) == [RETAINED_DIR]  # no subscription made


@pytest.mark.parametrize(
    ("filter", "said"),
    [
        (
            "$share/g/#",
            "'$share/g/#' is a share group's filter, which gets no retained messages: "
            "give the filter alone",
        ),
        ("a/#/b", "topic filter 'a/#/b': '#' must be alone in the last level"),
    ],
)
def test_retained_refuses_a_filter_it_cannot_answer(
    root: Path, capsys: pytest.CaptureFixture[str], filter: str, said: str
) -> None:
    boxmq.open(root).close()
    assert cli.main(["--data", str(root), "retained", filter]) == 1
    assert capsys.readouterr() == ("", f"boxmq retained: {said}\n")


def test_retained_on_a_root_that_is_not_there_makes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--data", str(tmp_path / "typo"), "retained"]) == 1
    assert "no folder" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("filter", ["big/#", "big/1"])  # a wildcard's look, and one topic's
def test_retained_reads_each_file_s_header_not_its_body(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, filter: str
) -> None:
    # It read each matching file whole for its size alone: a body of 4 MB read to print
    # "4194304" (found at an earlier stop). The header is read, and the size is the fstat's.
    with boxmq.open(root, fsync="never") as box:
        box.publish("big/1", b"x" * (4 << 20), retain=True)
        box.publish("big/2", "small", retain=True)
    read: list[int] = []
    real = os.read

    def counted(fd: int, size: int) -> bytes:
        chunk = real(fd, size)
        read.append(len(chunk))
        return chunk

    monkeypatch.setattr(os, "read", counted)
    rows = json.loads(_said(capsys, root, "--json", "retained", filter))
    monkeypatch.undo()
    sizes = {row["topic"]: row["bytes"] for row in rows}
    assert sizes == ({"big/1": 4 << 20, "big/2": 5} if filter == "big/#" else {"big/1": 4 << 20})
    assert sum(read) < 64 << 10
