"""A subscription that ends while a sweep of another thread visits it (Housekeeping.ended,
client/housekeeping.py): the visit keeps what it found due after the end dropped it, judged
bounded (test_idle_sweeps). These check what that entry's later visit does to the disk:
it makes no folder where the ended subscription was, and a subscription made again under
the same name meanwhile keeps every message it was given."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import boxmq
from boxmq.client import housekeeping, sweeps
from boxmq.client.housekeeping import FULL_SWEEP_EVERY
from boxmq.clock import ManualClock
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import State


def _files(path: str) -> dict[str, list[bytes]]:
    """The bodies in each state folder of the dropbox at `path` that holds any."""
    found = {}
    for state in State:
        folder = Path(path, state.value)
        if folder.is_dir() and (bodies := sorted(p.read_bytes() for p in folder.iterdir())):
            found[state.value] = bodies
    return found


@pytest.mark.parametrize("when", ["before", "amid", "after"])
@pytest.mark.parametrize("again", [False, True])
def test_a_subscription_ended_during_its_visit_is_left_alone_by_the_visit_that_comes_back(
    root: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, when: str, again: bool
) -> None:
    """The end comes as the visit opened the folder (`before` its look, which then finds
    the folder gone), between its look and its move of a message expired (`amid`: the move
    finds no file) or as it finishes (`after`); `again`, a subscribe of the same name and
    a publication follow at once. The visit's due time (an expiry) brings it back later:
    it visits a folder gone and makes none, or the new subscription's, whose message stays
    ready; the next full pass forgets the ended one; a subscribe after it finds a whole
    dropbox that gets the next publication."""
    path, ended = "", False

    def ending_meanwhile(dropbox: Dropbox, **options: Any) -> sweeps.SweepReport:
        ending = dropbox.path == path and not ended
        if ending and when == "before":
            end()
        if ending and when == "amid":
            move = dropbox.move

            def ending_first(*args: Any) -> bool:
                if not ended:
                    end()
                return move(*args)

            monkeypatch.setattr(dropbox, "move", ending_first)
        report = sweeps.sweep(dropbox, **options)
        if ending and when == "after":
            end()
        return report

    def end() -> None:
        nonlocal ended
        ended = True
        assert box.unsubscribe("ending/1", "ending")
        assert not os.path.exists(path)
        if again:
            box.subscribe("ending/1", "ending", lock_timeout=5).detach()
            box.publish("ending/1", b"new")

    monkeypatch.setattr(housekeeping, "sweep", ending_meanwhile)
    with boxmq.open(root, fsync="never", clock=clock) as box:
        box.sweep(full=False)  # the first is a full pass
        box.subscribe("ending/1", "ending", lock_timeout=5).detach()
        path = box.topics.attach_dropbox("ending/1", "ending")
        box.publish("ending/1", b"gone", expires_in=1)  # moved to expired/ by the visit
        box.publish("ending/1", b"old", expires_in=10)  # due in 10 s: the visit keeps it
        clock.advance(2)
        box.sweep(full=False)  # visits it (copies with an expiry), as it ends
        assert ended
        assert path in box._housekeeping._due.known()  # the race: back after the end
        clock.advance(11)
        box.sweep(full=False)  # its time came: visited again (a look that found the
        # folder gone found nothing due: kept, unvisited, until the full pass)
        for _ in range(2):
            if again:
                assert _files(path) == {"target": [b"new"]}
            else:
                assert not os.path.exists(path), "the visit made a folder where none is"
            clock.advance(FULL_SWEEP_EVERY)
            box.sweep(full=False)  # a full pass: what it keeps is what it visited
        assert (path in box._housekeeping._due.known()) == again
        with box.subscribe("ending/1", "ending", lock_timeout=5) as reader:
            box.publish("ending/1", b"next")
            bodies = []
            while (message := reader.receive(0)) is not None:
                bodies.append(message.body)
                message.ack()
        assert bodies == ([b"new", b"next"] if again else [b"next"])
        assert not os.path.exists(os.path.join(root, ".deleting"))
