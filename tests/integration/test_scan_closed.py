"""Every listing of a state folder is closed when its reader is done with it, early or not.

`Dropbox.scan` is a generator around `os.scandir`: a reader that stops before the end (a look-up
that found its message, a refusal raised mid-listing) left the directory open until the
generator was finalised. CPython does that as the last reference goes, but a build without
reference counting (or a traceback kept by the caller) held it open for as long as it lived:
one descriptor per `find` or refused `ack`. Here every listing is kept alive past its reader,
as such a runtime would, and must be closed all the same.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator
from pathlib import Path

import pytest
from tests.diskfull import small_disk

import boxmq
from boxmq.clock import ManualClock
from boxmq.errors import Forbidden
from boxmq.store.dropbox import Dropbox, Entry
from boxmq.store.layout import State


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[Generator[Entry, None, None]]:
    """Every listing `Dropbox.scan` gives from now on, each kept alive here."""
    made: list[Generator[Entry, None, None]] = []
    real_scan = Dropbox.scan

    def scan(
        self: Dropbox, state: State, strays: list[str] | None = None
    ) -> Generator[Entry, None, None]:
        listing = real_scan(self, state, strays)
        made.append(listing)
        return listing

    monkeypatch.setattr(Dropbox, "scan", scan)
    return made


def open_listings(listings: list[Generator[Entry, None, None]]) -> int:
    return sum(inspect.getgeneratorstate(g) != inspect.GEN_CLOSED for g in listings)


def test_a_reader_that_stops_early_closes_its_listing(
    box: boxmq.Box, listings: list[Generator[Entry, None, None]]
) -> None:
    jobs = box.queue("jobs")
    ids = jobs.put_many([b"a", b"b", b"c", b"d"])
    first, second = jobs.get(), jobs.get()
    assert first is not None
    assert second is not None
    held = {first.id, second.id}
    ready = next(m for m in ids if m not in held)

    assert jobs.find(ids[0]) is not None  # found: the look-up returns mid-listing
    assert jobs.lock_process(first.id) == "get"  # the first lock it lists may be the one
    assert jobs.lock_process(second.id) == "get"
    with pytest.raises(Forbidden) as refused:
        jobs.ack(ready)  # in target/, held by nobody: refused mid-listing of target/
    assert refused.value is not None  # the traceback, and the frames it holds, still alive
    jobs.ack(first.id)  # by id: the settle returns at its lock, mid-listing of processing/
    second.ack()

    assert listings, "no folder was listed"
    assert open_listings(listings) == 0


def test_a_sweep_the_disk_refuses_mid_listing_closes_its_listing(
    tmp_path: Path, clock: ManualClock, listings: list[Generator[Entry, None, None]]
) -> None:
    """A move refused mid-listing (EROFS here; EIO, EMFILE alike) ends the sweep by an
    exception: `boxmq serve` logs it and sweeps again at the next tick, each failed sweep's
    listing left open until finalised."""
    # spares=0: a spare's file kept open for writing makes the remount ro EBUSY
    with (
        small_disk(tmp_path / "disk") as disk,
        boxmq.open(disk.path / "data", fsync="never", spares=0, clock=clock) as box,
    ):
        jobs = box.queue("jobs")
        jobs.put_many([b"a", b"b", b"c"])
        for _ in range(3):
            assert jobs.get(lock_timeout=1) is not None
        clock.advance(2)  # every lock ended: the sweep moves each back to target/
        with disk.read_only(), pytest.raises(OSError, match="Read-only"):
            jobs.get()  # which sweeps processing/ first
        assert open_listings(listings) == 0
        with disk.read_only(), pytest.raises(OSError, match="Read-only"):
            box.sweep()
        assert open_listings(listings) == 0
        assert len(jobs.peek(state="processing")) == 3  # nothing lost meanwhile
    assert open_listings(listings) == 0
