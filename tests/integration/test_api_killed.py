"""What the embedded API returned holds across a SIGKILL of its process at a random moment
of a stream of calls: each `put` that returned is stored, each `ack` that returned
stays done, each retained message set or deleted is as the last call that returned left
it, each `subscribe` that returned is there and each `unsubscribe` gone. Under every fsync
policy: a crash of a process loses nothing that returned under any (docs/operations.md,
Durability)."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from harness.output import read_until
from harness.stopping import kill

import boxmq
from boxmq.store.commit import FsyncPolicy

WITHIN = 30.0  # seconds for the child to make the calls the kill waits for
TOPICS = 3  # retained topics r/0 ... r/2
REPO = Path(__file__).parents[2]


def _call(step: int) -> tuple[str, str]:
    """The call the child makes at `step` (the parent knows it too, for the one a kill cut
    short): its kind and its topic or filter."""
    kind = ("put", "retain", "ack", "sub", "unretain", "unsub")[step % 6]
    if kind == "unsub" and step // 6 % 2 == 0:
        return "put", ""  # every other subscription stays
    return kind, {
        "retain": f"r/{step % TOPICS}",
        "unretain": f"r/{(step + 1) % TOPICS}",
        "sub": f"f{step}/#",
        "unsub": f"f{step - 2}/#",  # the one subscribed two calls before
    }.get(kind, "")


def child(root: str, fsync: str) -> None:
    """The calls, each told on stdout once it returned (one line a call), until killed: a
    stream that ended by itself after so many calls let a parent held off the CPU past its
    end kill a process with nothing under way."""
    box = boxmq.open(root, fsync=fsync)
    jobs = box.queue("jobs")
    for step in itertools.count():
        kind, name = _call(step)
        said = kind
        if kind == "put":
            said += f" {jobs.put(str(step).encode())}"
        elif kind == "retain":
            said += f" {name} {box.publish(name, str(step), retain=True)}"
        elif kind == "unretain":
            box.publish(name, b"", retain=True)  # MQTT's delete of a retained message
            said += f" {name}"
        elif kind == "ack":
            message = jobs.get("worker")
            if message is not None:
                message.ack()
            said += f" {message.id if message else '-'}"
        elif kind == "sub":
            box.subscribe(name, "keeper", process_bound=False).close()
            said += f" {name}"
        else:
            box.unsubscribe(name, "keeper")
            said += f" {name}"
        print(said, flush=True)


def _said_until_killed(root: Path, fsync: str, lines: int) -> list[list[str]]:
    """Run the child, SIGKILL it once it said `lines` lines, and return all it said before
    the kill (more lines than `lines` if it went on while the parent was off the CPU), each
    line split into its words."""
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tests.integration.test_api_killed import child; child(*sys.argv[1:])",
            str(root),
            fsync,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=os.environ.copy(),
    )
    try:
        assert run.stdout is not None
        said = read_until(run.stdout, lambda said: said.count(b"\n") >= lines, WITHIN)
    finally:
        kill(run)
        # What it said between that read and the kill: calls that returned as well.
        rest, errors = run.communicate(timeout=10)
    said += rest
    whole = said[: said.rfind(b"\n") + 1].decode().splitlines()  # a line cut short: untold
    assert len(whole) >= lines, (said, errors)
    assert run.returncode == -9, (run.returncode, errors)  # killed in the middle of its calls
    return [line.split() for line in whole]


@pytest.mark.parametrize("fsync", FsyncPolicy.words())
def test_what_the_api_returned_before_a_sigkill_at_a_random_call_holds(
    root: Path, fsync: str
) -> None:
    boxmq.open(root, fsync="never").close()  # the root made before the child opens it
    lines = random.randint(3, 120)
    said = _said_until_killed(root, fsync, lines)
    where = f"killed after {len(said)} calls"
    cut_short, cut_name = _call(len(said))  # the call under way: either way is right
    put = [words[1] for words in said if words[0] == "put"]
    acked = [words[1] for words in said if words[0] == "ack" and words[1] != "-"]
    retained: dict[str, str | None] = {f"r/{n}": None for n in range(TOPICS)}
    subscribed: dict[str, bool] = {}
    for words in said:
        if words[0] in ("retain", "unretain"):
            retained[words[1]] = words[2] if words[0] == "retain" else None
        elif words[0] in ("sub", "unsub"):
            subscribed[words[1]] = words[0] == "sub"
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        for message_id in put:
            assert jobs.find(message_id) is not None, f"{where}: put {message_id} lost"
        for message_id in acked:
            found = jobs.find(message_id)
            assert found is not None, f"{where}: {message_id} acked, then gone"
            assert found.state is boxmq.State.PROCESSED, f"{where}: ack of {message_id} undone"
        for topic, last in retained.items():
            ids = [envelope.message_id for envelope, _ in box.topics.retained_reading(topic)]
            assert len(ids) <= 1, (where, topic, ids)
            now = ids[0] if ids else None
            if topic == cut_name and cut_short == "retain":
                assert now == last or now not in [w[-1] for w in said], (where, topic, now)
            elif topic == cut_name and cut_short == "unretain":
                assert now in (last, None), (where, topic, now)
            else:
                assert now == last, (where, topic, now)
        for filter, kept in subscribed.items():
            if filter == cut_name:
                continue  # its unsubscribe was under way
            try:
                box.subscription(filter, "keeper")
            except boxmq.QueueNotFound:
                assert not kept, f"{where}: {filter} subscribed, then gone"
            else:
                assert kept, f"{where}: {filter} unsubscribed, then there again"
