"""A deep backlog (hundreds of thousands of ready messages): what the sweeps and the
inspection commands do per message, counted on a few thousand, where a cost paid for every
message at every sweep (or every look) showed only as time on a big one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import boxmq
from boxmq.client import sweeps
from boxmq.client.lifecycle import envelope_of as decode
from boxmq.model import Envelope


def test_a_sweep_decodes_only_the_names_whose_expiration_may_be_due(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[str] = []

    def envelope_of(name: str) -> Envelope:
        decoded.append(name)
        return decode(name)

    monkeypatch.setattr(sweeps, "envelope_of", envelope_of)
    clock = boxmq.ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"x"] * 2000)
        for _ in range(3):
            jobs.put(b"soon", expires_in=10)
        jobs.put(b"later", expires_in=100)
        # A script's name whose expiration field is escaped: decoded, and expired all the same.
        (root / "jobs" / "target" / "4.script-1.T.%31").write_bytes(b"old")
        clock.advance(20)
        assert box.sweep()["jobs"].expired == 4
        assert jobs.counts().ready == 2001
    assert len(decoded) == 4  # the three due and the script's; not the 2001 others
