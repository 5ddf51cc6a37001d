"""Spare files through the embedded API: an ack that deletes leaves its inode for the next put,
and no body is ever mixed up with another."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.crashes import Killed, kill_at
from tests.descriptors import deleted_files_open

import boxmq
from boxmq.clock import ManualClock
from boxmq.store import spares as spares_module
from boxmq.store.spares import SPARE_DIR


def test_an_acked_file_is_the_next_put_s_file(root: Path) -> None:
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w", max_in_flight=1) as consumer:
            jobs.put(b"a first body, longer than the second")
            first = consumer.receive(timeout=5)
            assert first is not None
            first.ack()
            spares = [path for path in (root / SPARE_DIR).rglob("*") if path.is_file()]
            assert len(spares) == 1
            inode = os.stat(spares[0]).st_ino

            jobs.put(b"second")
            second = consumer.receive(timeout=5)
            assert second is not None
            assert second.body == b"second"
            (held,) = os.listdir(root / "jobs" / "processing")
            assert os.stat(root / "jobs" / "processing" / held).st_ino == inode
            second.ack()


def test_acking_one_copy_of_a_fan_out_leaves_the_others_intact(root: Path) -> None:
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        fast = box.subscribe("news/#", "fast", max_in_flight=5)
        slow = box.subscribe("news/#", "slow", max_in_flight=5)
        box.publish("news/today", b"one body, two subscriptions")
        copy = fast.receive_nowait()
        assert copy is not None
        copy.ack()  # the body is still linked from slow's dropbox: not a spare
        for index in range(5):
            box.publish("news/today", f"later {index}".encode())
        held = slow.receive_nowait()
        assert held is not None
        assert held.body == b"one body, two subscriptions"
        held.ack()
        rest = [m.body for m in iter(fast.receive_nowait, None)]
        assert rest == [f"later {index}".encode() for index in range(5)]


def put_and_ack_one(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"body")
    with jobs.consumer("w") as consumer:
        message = consumer.receive(timeout=5)
        assert message is not None
        message.ack()


def test_spares_zero_deletes_at_once(root: Path) -> None:
    with boxmq.open(root, fsync="never", keep_processed=False, spares=0) as box:
        put_and_ack_one(box)
    assert not (root / SPARE_DIR).exists()
    assert os.listdir(root / "jobs" / "processing") == []


def test_the_spare_folder_is_not_a_queue(root: Path) -> None:
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        put_and_ack_one(box)
        assert (root / SPARE_DIR).is_dir()
        assert box.queues() == ["jobs"]


def test_deleting_the_spare_folder_while_spares_are_kept_open_fails_no_put(root: Path) -> None:
    """docs/operations.md: deleting .spare/ while boxmq runs costs nothing but the spares. A
    process keeps its spares' files open; the next put wrote into one whose file was gone,
    and failed with FileNotFoundError at the rename into target/."""
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w") as consumer:
            for n in range(3):
                jobs.put(b"x%d" % n)
                message = consumer.receive(timeout=5)
                assert message is not None
                message.ack()
            shutil.rmtree(root / SPARE_DIR)
            for n in range(3):
                jobs.put(b"after%d" % n)
            got = []
            for _ in range(3):
                message = consumer.receive(timeout=5)
                assert message is not None
                got.append(message.body)
                message.ack()
            assert sorted(got) == [b"after0", b"after1", b"after2"]


def _put_through_own_spares(jobs: boxmq.Queue) -> None:
    """Eight messages put and acked (eight own spares), then eight more written through
    those spares, whose files this process keeps open."""
    with jobs.consumer("w", max_in_flight=8) as consumer:
        jobs.put_many([b"x%d" % n for n in range(8)])
        for message in consumer.receive_ready():
            message.ack()
    jobs.put_many([b"y%d" % n for n in range(8)])


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_deleted_queue_s_messages_free_their_blocks(root: Path) -> None:
    """A put through an own spare keeps its file open for the ack to give back; a queue
    deleted with those messages in it left the files open, their blocks held (up to 128
    files per root, 64 KiB each), for as long as the process put nothing more."""
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        jobs = box.queue("jobs")
        _put_through_own_spares(jobs)
        assert box.delete_queue("jobs")
        assert deleted_files_open(root) == []


def _ack_eight_publications(box: boxmq.Box, topic: str, subscriber: str) -> None:
    """Eight publications into `topic` received and acked by `subscriber` (eight own spares)."""
    with box.subscribe(topic, subscriber, max_in_flight=8) as subscription:
        for n in range(8):
            box.publish(topic, b"x%d" % n)
        for message in subscription.receive_ready():
            message.ack()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_an_unsubscribed_subscription_s_messages_free_their_blocks(root: Path) -> None:
    """The same for a subscription that ends (its unsubscribe, its share group's last
    member leaving): a publication into it alone goes through an own spare too."""
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        _ack_eight_publications(box, "t/x", "s")  # own spares
        for n in range(8):
            box.publish("t/x", b"y%d" % n)  # written through them, kept open
        assert box.unsubscribe("t/x", "s")
        assert deleted_files_open(root) == []


def _two_subscriptions_holding_eight(box: boxmq.Box) -> None:
    """s1 and s2 subscribed to t/x, eight publications in both, kept open through them."""
    for name in ("s1", "s2"):
        box.subscribe("t/x", name).close()
    _ack_eight_publications(box, "t/y", "r")  # own spares
    for n in range(8):
        box.publish("t/x", b"y%d" % n)  # into s1 and s2, through them, kept open


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_subscriptions_ending_together_free_their_blocks_at_the_next_sweep(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each subscription's end looked at every file kept open (up to 128 fstats): 1,000
    persistent sessions expiring together paid it 1,000 times. One that ends within a
    second of the last look leaves it to the next sweep (serve's, every second)."""
    monkeypatch.setattr(spares_module, "_GONE_INTERVAL", 3600.0)  # however slow the machine
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        _two_subscriptions_holding_eight(box)
        assert box.unsubscribe("t/x", "s1")
        assert _unlinked_files_open(root) == 0  # s2 holds their copies (hard links) still
        assert box.unsubscribe("t/x", "s2")
        assert _unlinked_files_open(root) == 8  # within the second: left to the sweep
        box.sweep(full=False)
        assert _unlinked_files_open(root) == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_script_that_never_sweeps_frees_the_blocks_at_its_next_put(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same two ends in a script (boxmq.open, puts and unsubscribes, no sweep): the
    second's files stayed open, their blocks held, until the root was closed. The first put
    a second after the last look closes them."""

    class Clock:
        now = 1000.0

        def monotonic(self) -> float:
            return self.now

    clock = Clock()
    monkeypatch.setattr(spares_module, "time", clock)
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        _two_subscriptions_holding_eight(box)
        assert box.unsubscribe("t/x", "s1")
        assert box.unsubscribe("t/x", "s2")
        jobs = box.queue("jobs")
        jobs.put(b"within the second")
        assert _unlinked_files_open(root) == 8
        clock.now += 1.0
        jobs.put(b"a second later")
        assert _unlinked_files_open(root) == 0


def _unlinked_files_open(root: Path) -> int:
    """How many files under `root` this process holds open that no name is left to (a file
    of several hard links shows " (deleted)" as soon as the one it was opened by is gone)."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(root)):
                held += os.stat(f"/proc/self/fd/{fd}").st_nlink == 0
    return held


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_queue_another_process_deleted_has_its_files_closed_at_the_full_pass(
    root: Path,
) -> None:
    """`boxmq delete` beside a server: the server's own files of that queue's messages are
    closed at its next full pass, not when newer puts push them out (a quiet root: never)."""
    with (
        boxmq.open(root, fsync="never", keep_processed=False) as box,
        boxmq.open(root, fsync="never") as other,  # as another process would
    ):
        jobs = box.queue("jobs")
        with jobs.consumer("w", max_in_flight=8) as consumer:
            jobs.put_many([b"x%d" % n for n in range(8)])
            for message in consumer.receive_ready():
                message.ack()
        jobs.put_many([b"y%d" % n for n in range(8)])
        assert other.delete_queue("jobs")
        assert len(deleted_files_open(root)) == 8
        box.sweep()
        assert deleted_files_open(root) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_purge_through_the_process_frees_its_messages_blocks(root: Path) -> None:
    """A purge of target/ through the queue deleted files its own puts kept open: their
    blocks stayed held until newer puts pushed them out or the next full sweep, where a
    delete of the queue closes them at once."""
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        jobs = box.queue("jobs")
        _put_through_own_spares(jobs)
        assert jobs.purge() == 8
        assert deleted_files_open(root) == []


# (what, a number): put one body, ack what was received, both, delete the spare folder, or
# delete one of the files in it (a spare kept open, or not).
_SPARE_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "take", "cycle", "cycle", "rmtree", "rm"]), st.integers(0, 7)
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(steps=_SPARE_STEPS)
def test_a_bare_put_after_spares_were_deleted_does_what_put_many_does(
    steps: list[tuple[str, int]],
) -> None:
    """`put(body)` writes a spare kept open without checking that its file is still there,
    and writes again when the rename tells it is gone: every put succeeds, every body is
    received, and the spares and descriptors left are those put_many's checked write leaves."""
    seen = []
    for how in ("put", "put_many"):
        with (
            tempfile.TemporaryDirectory() as root,
            boxmq.open(root, fsync="never", keep_processed=False) as box,
        ):
            jobs = box.queue("jobs")
            got: list[bytes] = []
            left = []
            with jobs.consumer("w", max_in_flight=100) as consumer:
                for index, (step, number) in enumerate(steps):
                    if step in ("put", "cycle"):
                        body = b"%d" % index * (number + 1)
                        jobs.put(body) if how == "put" else jobs.put_many([body])
                    if step in ("take", "cycle"):
                        for message in consumer.receive_ready():
                            got.append(message.body)
                            message.ack()
                    if step == "rmtree":
                        shutil.rmtree(os.path.join(root, SPARE_DIR), ignore_errors=True)
                    elif step == "rm":
                        files = sorted(Path(root, SPARE_DIR).rglob("*.*"), key=str)
                        files += sorted(Path(root, SPARE_DIR).rglob("*+*/*"), key=str)
                        if files:
                            files[number % len(files)].unlink()
                    spares = box._spares
                    assert spares is not None
                    left.append((len(spares._own), len(spares._open)))
                for message in consumer.receive_ready():
                    got.append(message.body)
                    message.ack()
            seen.append((got, left))
    assert seen[0] == seen[1]
    puts = [b"%d" % i * (n + 1) for i, (s, n) in enumerate(steps) if s in ("put", "cycle")]
    assert sorted(seen[0][0]) == sorted(puts)


def test_a_put_get_and_ack_killed_anywhere_lose_no_stored_message_and_leave_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed at each change of a put, a get and an ack on a root where another process left
    spares (the put takes one by a rename that replaces none, the get claims by another):
    after a restart past the lock's deadline and abandon_after, a message whose put returned
    comes once more with its own body unless its ack was done, and nothing is left in
    working/ or processing/."""
    for step in itertools.count(1):
        root = tmp_path / str(step)
        # Another process leaves its two acked files, handed to the shared spares at its close.
        with boxmq.open(root, fsync="never", keep_processed=False) as earlier:
            jobs = earlier.queue("jobs")
            for body in (b"an old body", b"another old body"):
                jobs.put(body)
                taken = jobs.get("w")
                assert taken is not None
                jobs.ack(taken.id, "w")
        clock = ManualClock(time.time())
        box = boxmq.open(root, fsync="never", keep_processed=False, clock=clock)
        done = []
        with monkeypatch.context() as dying:
            kill_at(dying, step)
            with contextlib.suppress(Killed):
                jobs = box.queue("jobs")
                jobs.put(b"new")
                done.append("put")
                taken = jobs.get("w", lock_timeout=30)
                assert taken is not None
                assert taken.body == b"new"
                jobs.ack(taken.id, "w")
                done.append("ack")
        box.close()
        clock.advance(7200.0)  # past the lock's deadline and abandon_after
        with boxmq.open(root, fsync="never", keep_processed=False, clock=clock) as restarted:
            restarted.sweep()
            jobs = restarted.queue("jobs")
            bodies = []
            while (taken := jobs.get("w")) is not None:
                bodies.append(taken.body)
                jobs.ack(taken.id, "w")
            left = {state: os.listdir(root / "jobs" / state) for state in ("working", "processing")}
        assert bodies == ([b"new"] if done == ["put"] else []), f"killed at change {step}"
        assert left == {"working": [], "processing": []}, f"killed at change {step}"
        if done == ["put", "ack"]:
            assert step > 3
            return


_KILLED_WITH_SPARES = """
import os, signal, sys
import boxmq
with boxmq.open(sys.argv[1], fsync="never", keep_processed=False) as box:
    jobs = box.queue("jobs")
    with jobs.consumer("w", max_in_flight=3) as consumer:
        jobs.put_many([b"one", b"two", b"three"])
        for message in consumer.receive_ready():
            message.ack()  # its file kept as one of this process's own spares
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_first_full_sweep_empties_a_killed_process_s_own_spares(root: Path) -> None:
    """A process SIGKILLed with spares of its own left `.spare/<its token>+0/` behind; a
    server that only sweeps (a put or an ack adopts them, nothing else did) left it there
    for as long as it ran. The first full pass takes it over, as it ends the dead's locks,
    and so does a later one for a process killed since."""
    first = _killed_with_three_spares(root)
    with boxmq.open(root, fsync="never") as box:
        box.sweep()
        left = os.listdir(root / SPARE_DIR)
        assert first not in left
        assert len(left) == 3  # the shared pool's, for any process's next put
        second = _killed_with_three_spares(root)
        box.sweep()
        assert second not in os.listdir(root / SPARE_DIR)


def _killed_with_three_spares(root: Path) -> str:
    """Run a process that leaves three spares of its own and is SIGKILLed: its folder's name."""
    before = set(os.listdir(root / SPARE_DIR)) if (root / SPARE_DIR).is_dir() else set()
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_WITH_SPARES, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (own,) = set(os.listdir(root / SPARE_DIR)) - before
    assert len(os.listdir(root / SPARE_DIR / own)) == 3
    return own
