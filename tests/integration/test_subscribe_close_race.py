"""A Box closed while a thread subscribes: the subscribe either makes the whole subscription (its
record and its dropbox, on disk) or raises Closed and leaves nothing. A close between the
subscription's records and its engine raised Closed and left a durable subscription collecting
for a subscriber that was told it was never made."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import boxmq

ROUNDS = 60  # bounded: each round a fresh root, a subscribe and a close started together


def _a_subscribe_s_time(root: Path, filter: str) -> float:
    """Seconds a subscribe takes here: the least of three (the first imports what it uses)."""
    times = []
    with boxmq.open(root, fsync="never") as box:
        for n in range(3):
            began = time.monotonic()
            box.subscribe(filter, f"s{n}", durable=True)
            times.append(time.monotonic() - began)
    return min(times)


@pytest.mark.parametrize("filter", ["a/#", "$share/g/a/#"])
def test_a_close_racing_a_subscribe_leaves_nothing_or_a_whole_subscription(
    tmp_path: Path, filter: str
) -> None:
    took = _a_subscribe_s_time(tmp_path / "timed", filter)
    for round in range(ROUNDS):
        root = tmp_path / str(round)
        box = boxmq.open(root, fsync="never")
        box.topics  # noqa: B018 made before the race: the subscribe's own steps race the close
        start = threading.Barrier(2)
        outcome: list[BaseException | None] = []

        def subscribe(
            box: boxmq.Box = box,
            start: threading.Barrier = start,
            outcome: list[BaseException | None] = outcome,
        ) -> None:
            start.wait()
            try:
                box.subscribe(filter, "s", durable=True)
            except boxmq.Closed as error:
                outcome.append(error)
            else:
                outcome.append(None)

        racer = threading.Thread(target=subscribe)
        racer.start()
        start.wait()
        time.sleep(took * round / ROUNDS)  # the close lands at each point of the subscribe
        box.close()
        racer.join(timeout=30)
        [closed] = outcome
        with boxmq.open(root, fsync="never") as fresh:
            found = fresh.topics.subscriptions()
            folders = list((root / "topic-root").glob("*/.subscriptions/*"))
        if closed is None:
            assert [len(found), len(folders)] == [1, 1], round
        else:
            assert (found, folders) == ([], []), round
