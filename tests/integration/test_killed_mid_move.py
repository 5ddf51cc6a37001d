"""The state changes of a message after its put, each killed at every change to the file
system it makes (tests/crashes.py): a sweep's expiries, releases and dead letters, a
requeue, a subscription's end followed by a subscribe of the same name. After the kill,
and after a restart that finishes the work, every message stored is in exactly one state
folder, where the change put it or where it was: none lost, none copied."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from harness.stopping import kill
from tests.crashes import Killed, kill_at
from tests.retained import retained_folder

import boxmq
from boxmq.client.housekeeping import RETAINED_EVERY
from boxmq.store import layout, topics
from boxmq.store.layout import State


def _where(dropbox: str) -> Counter[tuple[str, bytes]]:
    """(state, body) of every message file in the dropbox at `dropbox`, counted."""
    found: Counter[tuple[str, bytes]] = Counter()
    for state in State:
        folder = Path(dropbox, state.value)
        if folder.is_dir():
            found.update((state.value, path.read_bytes()) for path in folder.iterdir())
    return found


def _holds_any(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return any(entries)


def _once_each(dropbox: str, bodies: list[bytes], when: str) -> dict[bytes, str]:
    """The state of each of `bodies`, each found in exactly one file of the dropbox; `when`
    the kill came, for the failure's message."""
    found = _where(dropbox)
    copies = Counter(body for _, body in found.elements())
    assert copies == Counter(bodies), f"killed at {when}: {sorted(found.items())[:20]}"
    return {body: state for state, body in found}


def test_a_sweep_killed_at_any_change_moves_each_message_once_and_a_restart_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep sends an expired message to expired/, a timed-out lock back to target/ and
    one at its last delivery to error/, each by one rename, and deletes an expired retained
    message (moved aside, then unlinked): killed at any of them, each message is where it
    was or where it goes, never in both and never nowhere, the topic that kept its
    retained message keeps it, and the sweeps of a restart finish the rest."""
    bodies = [b"dead", b"released", b"expiring", b"ready"]
    for step in itertools.count(1):
        root = tmp_path / str(step)
        clock = boxmq.ManualClock(time.time())
        with boxmq.open(root, fsync="never", max_deliveries=2, clock=clock) as box:
            jobs = box.queue("jobs")
            for body in bodies:
                jobs.put(body, expires_in=10.0 if body == b"expiring" else None)
                clock.advance(0.01)  # delivered in the order put
            first = jobs.get("w", lock_timeout=5.0)
            assert first is not None
            assert first.body == b"dead"
            assert jobs.unlock(first.id, "w") is None  # its first delivery counted
            for expected in (b"dead", b"released"):
                taken = jobs.get("w", lock_timeout=5.0)
                assert taken is not None
                assert taken.body == expected
            dropbox = layout.queue_path(str(root), "jobs")
            box.publish("r/stale", b"old", retain=True, expires_in=10.0)
            box.publish("r/kept", b"kept", retain=True)
        clock.advance(60.0)  # both locks timed out, the expirations passed
        box = boxmq.open(root, fsync="never", max_deliveries=2, clock=clock)
        with monkeypatch.context() as dying:
            kill_at(dying, step)
            try:
                box.sweep(full=True)
                killed = False
            except Killed:
                killed = True
        box.close()
        states = _once_each(dropbox, bodies, f"change {step}")
        assert states[b"ready"] == "target", f"killed at change {step}"
        assert states[b"dead"] in ("processing", "error"), f"killed at change {step}"
        assert states[b"released"] in ("processing", "target"), f"killed at change {step}"
        assert states[b"expiring"] in ("target", "expired"), f"killed at change {step}"
        with boxmq.open(root, fsync="never", max_deliveries=2, clock=clock) as restarted:
            kept = restarted.topics.retained("r/kept")
            assert kept is not None, f"killed at change {step}"
            assert kept[1] == b"kept"
            restarted.sweep(full=True)
            clock.advance(RETAINED_EVERY)  # a retained message put back goes at the next look
            restarted.sweep(full=True)
            assert restarted.topics.retained("r/stale") is None, f"killed at change {step}"
            kept = restarted.topics.retained("r/kept")
            assert kept is not None, f"killed at change {step}"
            assert kept[1] == b"kept"
        retained = os.listdir(retained_folder(root))
        assert len(retained) == 1, f"killed at change {step}: {retained}"  # r/kept's alone
        assert _once_each(dropbox, bodies, f"change {step}") == {
            b"dead": "error",
            b"released": "target",
            b"expiring": "expired",
            b"ready": "target",
        }, f"killed at change {step}"
        if not killed:
            assert step > 5, "the sweep made fewer changes than its three moves and a delete"
            return


def test_a_requeue_killed_at_any_change_sends_each_message_back_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`boxmq requeue` (Queue.requeue) moves the dead messages back to target/ one rename
    each: killed at any of them, each is in error/ or in target/, once, and a requeue
    again sends back the rest."""
    bodies = [b"one", b"two", b"three"]
    for step in itertools.count(1):
        root = tmp_path / str(step)
        with boxmq.open(root, fsync="never") as box:
            jobs = box.queue("jobs")
            for body in bodies:
                jobs.put(body)
            for _ in bodies:
                taken = jobs.get("w")
                assert taken is not None
                jobs.reject(taken.id, "w")
            dropbox = layout.queue_path(str(root), "jobs")
        assert set(_once_each(dropbox, bodies, f"change {step}").values()) == {"error"}
        box = boxmq.open(root, fsync="never")
        with monkeypatch.context() as dying:
            kill_at(dying, step)
            try:
                moved = box.queue("jobs").requeue()
                killed = False
            except Killed:
                killed = True
        box.close()
        states = _once_each(dropbox, bodies, f"change {step}")
        assert set(states.values()) <= {"error", "target"}, f"killed at change {step}"
        with boxmq.open(root, fsync="never") as restarted:
            again = restarted.queue("jobs").requeue()
        assert again == list(states.values()).count("error"), f"killed at change {step}"
        assert set(_once_each(dropbox, bodies, f"change {step}").values()) == {"target"}
        if not killed:
            assert moved == len(bodies)
            return


@pytest.mark.parametrize("ending_filter", ["a/#", "$share/g/a/#"])
def test_an_unsubscribe_killed_at_any_change_loses_nothing_of_a_living_subscription(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending_filter: str
) -> None:
    """An unsubscribe deletes the subscription's record, then renames its folder into
    .deleting/ and deletes it there. Killed at any change of it: the other subscription to
    the filter keeps its message; one whose record stands keeps its own; and a subscribe
    of the same name after a restart gets the next publication once, none of the ended
    subscription's messages, wherever its folders were left. The same for a share group's
    last member leaving (the group ends with it)."""
    for step in itertools.count(1):
        root = tmp_path / str(step)
        with boxmq.open(root, fsync="never") as box:
            ending = box.topics.attach_dropbox(ending_filter, "ending")
            kept = box.topics.attach_dropbox("a/#", "kept")
            box.publish("a/1", b"old")
        box = boxmq.open(root, fsync="never")
        with monkeypatch.context() as dying:
            kill_at(dying, step)
            try:
                assert box.unsubscribe(ending_filter, "ending") is True
                killed = False
            except Killed:
                killed = True
        box.close()
        assert _where(kept) == {("target", b"old"): 1}, f"killed at change {step}"
        stands = topics.has_record(ending)
        if stands:
            assert _where(ending) == {("target", b"old"): 1}, f"killed at change {step}"
        with boxmq.open(root, fsync="never") as restarted:
            again = restarted.topics.attach_dropbox(ending_filter, "ending")
            assert again == ending
            restarted.publish("a/1", b"new")
            restarted.sweep(full=True)
        assert _where(kept) == {("target", b"old"): 1, ("target", b"new"): 1}, f"step {step}"
        expected = {("target", b"new"): 1}
        if stands:  # never ended: it keeps what it held
            expected[("target", b"old")] = 1
        assert _where(ending) == expected, f"killed at change {step}"
        assert not os.path.exists(os.path.join(root, ".deleting")), f"killed at change {step}"
        if not killed:
            assert not stands
            return


@pytest.mark.slow
def test_boxmq_requeue_sigkilled_midway_loses_and_copies_no_message(tmp_path: Path) -> None:
    """The same in a real process: `boxmq requeue` of 5,000 dead messages, SIGKILLed as
    soon as the first is back in target/. Each message is in error/ or target/, once, and
    `boxmq requeue` run again sends back the rest (three rounds: at least one is killed
    midway, not after its last move)."""
    root = tmp_path / "data"
    count = 5000
    bodies = [str(n).encode() for n in range(count)]
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put_many(bodies)
    dropbox = layout.queue_path(str(root), "jobs")
    target, error = Path(dropbox, "target"), Path(dropbox, "error")
    command = [sys.executable, "-m", "boxmq", "--data", str(root), "--fsync", "never"]
    midway = 0
    for round_ in range(3):
        for path in list(target.iterdir()):  # dead letters, as consumers left them
            path.rename(error / path.name)
        requeue = subprocess.Popen([*command, "requeue", "jobs"], stdout=subprocess.DEVNULL)
        try:
            while requeue.poll() is None and not _holds_any(target):
                time.sleep(0.0005)
        finally:
            kill(requeue)
        states = _once_each(dropbox, bodies, f"round {round_}")
        assert set(states.values()) <= {"error", "target"}
        midway += "error" in states.values()
        subprocess.run([*command, "requeue", "jobs"], check=True, stdout=subprocess.DEVNULL)
        assert set(_once_each(dropbox, bodies, f"round {round_}").values()) == {"target"}
    assert midway, "every requeue ended before its kill"
