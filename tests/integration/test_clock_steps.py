"""The wall clock stepped (NTP at boot, a virtual machine resumed, `date -s`): what a process's
own timers, which read the box's clock, do after it (docs/operations.md "Clocks")."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.processes import dead_token

import boxmq
from boxmq.client.housekeeping import FULL_SWEEP_EVERY
from boxmq.model import ConsumerId
from boxmq.store.names import Lock, locked_name


class SteppedClock:
    """A wall clock that an operator (or NTP) may set to any time, backwards too."""

    def __init__(self, start: float) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def set(self, now: float) -> None:
        self._now = now


def _locked_by_a_dead_process(source: Path, processing: Path, deadline: float) -> None:
    """The one message in `source` (a target/ folder) moved to `processing`, as a consumer
    process of this host that was killed left it: locked until `deadline` (far off), by a
    process token that ended."""
    [name] = os.listdir(source)
    lock = Lock(ConsumerId("gone"), int(deadline * 1000), dead_token())
    os.rename(source / name, processing / locked_name(name, lock))


def test_a_clock_stepped_back_does_not_put_off_the_look_for_dead_processes_locks(
    root: Path,
) -> None:
    """A consumer looks in processing/ every `sweep_interval` (1 s) for the locks of processes
    of its host that died, which go back to the queue at once. Its next look was a time of
    the wall clock: stepped back an hour, the consumer did not look for an hour, and a
    message a killed process held stayed locked all that time."""
    clock = SteppedClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w") as w:
            assert w.receive_nowait() is None  # its first look: the next in a second
            clock.set(clock.now() - 3600)
            box.queue("elsewhere").put(b"x")
            _locked_by_a_dead_process(
                root / "elsewhere" / "target", root / "jobs" / "processing", clock.now() + 600
            )
            clock.set(clock.now() + 2)
            # The look sends it back to target/; the watcher's news of that offers it.
            message = w.receive(timeout=1)
            assert message is not None
            assert message.body == b"x"


def test_a_clock_stepped_back_does_not_put_off_the_full_pass_of_the_sweep(root: Path) -> None:
    """`boxmq serve`'s sweep visits every subscription once a minute (FULL_SWEEP_EVERY), for
    what other processes did there: a lock of a consumer process of this host that died
    goes back then. The next full pass was a time of the wall clock: stepped back an hour,
    the sweep made none for an hour, and the message stayed locked all that time."""
    clock = SteppedClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        with box.subscribe("news", "s"):
            pass  # a durable subscription, nobody receiving from it in this process
        box.publish("news", b"x")
        box.sweep(full=False)  # the first is a full pass: the next in a minute
        clock.set(clock.now() - 3600)
        [target] = (root / "topic-root").glob("news/.subscriptions/*/target")
        _locked_by_a_dead_process(target, target.parent / "processing", clock.now() + 600)
        clock.set(clock.now() + FULL_SWEEP_EVERY + 1)
        [report] = box.sweep(full=False).values()
        assert report.released == 1
        assert len(os.listdir(target)) == 1
