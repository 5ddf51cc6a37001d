"""Several OS processes on one root, and processes killed with SIGKILL."""

from __future__ import annotations

import importlib.util
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from harness.output import read_line
from harness.stopping import kill
from tests.waiting import waited

import boxmq
from boxmq.store.names import decode, split_lock

WORKER = str(Path(__file__).with_name("worker.py"))
pytestmark = pytest.mark.slow
KILL_AFTER = 90.0  # s; the workers stop by themselves after worker.MAX_RUN (120 s)
SAID_WITHIN = 60.0  # s for a child to say what it was to say, on a loaded machine


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("boxmq_test_worker", WORKER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


body_for: Callable[[int], bytes] = _load_worker().body_for


def _spawning(head: list[str]) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `head + args` with its stdout read as text; what still runs at the test's end
    is killed, and every pipe closed."""
    started: list[subprocess.Popen[str]] = []

    def run(*args: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [*head, *args],
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        started.append(process)
        return process

    yield run
    for process in started:
        kill(process)  # a no-op on one that ended; reaped either way
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """tests/integration/worker.py with the arguments given."""
    yield from _spawning([sys.executable, WORKER])


@pytest.fixture
def script() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """`python -c SOURCE ARGS...`: the inline scripts of the tests below."""
    yield from _spawning([sys.executable, "-c"])


def wait_for_line(process: subprocess.Popen[str], expected: str) -> None:
    assert process.stdout is not None
    line = read_line(process.stdout, SAID_WITHIN)
    assert line.strip() == expected, (
        f"worker said {line!r} in {SAID_WITHIN:.0f} s, not {expected!r} (silent, or it ended)"
    )


def test_two_processes_share_ten_thousand_messages_each_exactly_once(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put_many([str(i).encode() for i in range(10_000)])
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    gate = tmp_path / "go"
    workers = [
        start("consume", str(root), "jobs", f"w{i}", str(log), "--gate", str(gate))
        for i, log in enumerate(logs)
    ]
    for worker in workers:
        wait_for_line(worker, "ready")
    gate.touch()
    for worker in workers:
        assert worker.wait(timeout=180) == 0
    seen = [line.split()[1] for log in logs for line in log.read_text().splitlines()]
    assert sorted(seen, key=int) == [str(i) for i in range(10_000)]  # all, and none twice
    counts = [len(log.read_text().splitlines()) for log in logs]
    # Both took part. Not an even split: on a loaded machine one process may be scheduled
    # far more than the other (9,808 against 192 was seen at a load of 6).
    assert min(counts) > 0, f"one process did nothing: {counts}"
    with boxmq.open(root) as box:
        assert box.queue("jobs").counts().done == 10_000


def test_a_killed_consumer_s_locks_go_to_another_consumer(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put_many([str(i).encode() for i in range(20)])
    held_log = tmp_path / "held.log"
    victim = start("consume", str(root), "jobs", "victim", str(held_log), "--hold", "5")
    wait_for_line(victim, "holding")
    kill(victim)
    held = set(held_log.read_text().split())
    assert len(held) == 5
    with boxmq.open(root, fsync="never") as box, box.queue("jobs").consumer("rescuer") as consumer:
        got: dict[str, int] = {}
        end = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < end:
            message = consumer.receive(timeout=5)
            if message is not None:
                got[message.id] = message.delivery_count
                message.ack()
    assert len(got) == 20  # none lost
    assert {i for i, count in got.items() if count == 2} == held  # the victim's, delivered again


def where(queue: boxmq.Queue) -> set[tuple[str, str, str | None, float | None]]:
    """Each message of `queue` in target/ or processing/: its id, state, holder and deadline."""
    return {
        (p.envelope.message_id, p.state.value, p.holder, p.lock_deadline)
        for state in ("target", "processing")
        for p in queue.peek(state=state)
    }


@pytest.mark.parametrize("verb", ["ack", "unlock", "reject", "extend"])
def test_an_answer_by_id_from_another_process_gets_the_xep_0254_error_and_moves_nothing(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]], verb: str
) -> None:
    """XEP-0254 §2.3 (delete) and §2.4 (unlock) across processes: a message locked by a
    consumer of another process is a conflict, one in target/ the requester never received is
    forbidden, and an id the queue never had is item-not-found; none of them moves a file."""
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put_many([b"0", b"1", b"2"])
    held_log = tmp_path / "held.log"
    holder = start("consume", str(root), "jobs", "w1", str(held_log), "--hold", "2")
    wait_for_line(holder, "holding")
    held = held_log.read_text().split()
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        before = where(jobs)
        [waiting] = [message_id for message_id, _, _, deadline in before if deadline is None]
        answer = getattr(jobs, verb)
        extra = {"seconds": 5.0} if verb == "extend" else {}
        cases = [
            (held[0], "w2", boxmq.Conflict),
            (held[1], "w2", boxmq.Conflict),
            (waiting, "w1", boxmq.Forbidden),  # w1 holds others, never this one
            (waiting, "w2", boxmq.Forbidden),
            ("1700000000000000-0000000000", "w1", boxmq.ItemNotFound),
        ]
        for message_id, consumer, error in cases:
            with pytest.raises(error) as info:
                answer(message_id, consumer, **extra)
            assert type(info.value) is error, (message_id, consumer)
        assert where(jobs) == before
    assert holder.poll() is None  # the holder was there throughout


@pytest.mark.parametrize("verb", ["ack", "unlock", "reject", "extend"])
def test_an_answer_by_id_after_the_lock_of_a_live_process_timed_out_is_unexpected(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]], verb: str
) -> None:
    """XEP-0254 §2.3, §2.4 and §4: once a lock timed out its holder no longer holds the item,
    even while its process is alive and nothing has moved the file back yet; an answer by id
    in its name from another process is unexpected-request, moves nothing, and the message
    goes to the next consumer as a second delivery."""
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put(b"0")
    held_log = tmp_path / "held.log"
    holder = start("consume", str(root), "jobs", "w1", str(held_log), "--hold", "1", "--lock", "1")
    wait_for_line(holder, "holding")
    [held] = held_log.read_text().split()
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        [locked] = jobs.peek(state="processing")
        assert locked.lock_deadline is not None
        time.sleep(max(0.0, locked.lock_deadline - time.time()) + 0.05)
        extra = {"seconds": 5.0} if verb == "extend" else {}
        with pytest.raises(boxmq.UnexpectedRequest) as info:
            getattr(jobs, verb)(held, "w1", **extra)
        assert type(info.value) is boxmq.UnexpectedRequest
        assert [(p.envelope.message_id, p.holder) for p in jobs.peek(state="processing")] in (
            [(held, "w1")],  # as it was, or back in target/ by the holder's own sweep
            [],
        )
        with jobs.consumer("w2") as w2:
            again = w2.receive(timeout=10)
            assert again is not None
            assert (again.id, again.delivery_count) == (held, 2)
            again.ack()
    assert holder.poll() is None  # the holder was alive throughout


def kill_once_logged(
    process: subprocess.Popen[str], log: Path, enough: Callable[[str], bool], what: str
) -> str:
    """SIGKILL `process` as soon as its log is `enough`; the log then. Fails, saying how far
    it got, if the process ends first or is not that far after KILL_AFTER s (a loaded machine
    is slow: the test waits for the work, not for a time)."""
    started = time.monotonic()
    text = ""
    while process.poll() is None and time.monotonic() < started + KILL_AFTER:
        text = log.read_text() if log.exists() else ""
        if enough(text):
            break
        time.sleep(0.02)
    ended = process.poll()
    kill(process)
    text = log.read_text() if log.exists() else ""
    lines = len(text.splitlines())
    assert ended is None, (
        f"the worker ended (exit {ended}) before {what}: its log has {lines} lines"
    )
    elapsed = time.monotonic() - started
    assert enough(text), f"not {what} after {elapsed:.0f} s: its log has {lines} lines"
    return text


def test_a_producer_killed_during_group_commit_loses_nothing_it_acknowledged(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    log = tmp_path / "put.log"
    producer = start("produce", str(root), "jobs", str(log), "8")
    wait_for_line(producer, "producing")
    written = kill_once_logged(
        producer, log, lambda text: len(text) >= 20_000, "20,000 bytes of puts logged"
    )

    acknowledged = dict(line.split() for line in written.splitlines() if " " in line)
    assert len(acknowledged) > 100
    target = root / "jobs" / "target"
    on_disk = {decode(p.name).message_id: p for p in target.iterdir()}
    for message_id, index in acknowledged.items():
        assert message_id in on_disk, f"put {message_id} (#{index}) returned, is not in target/"
    for message_id, path in on_disk.items():  # nothing half-written is ever where consumers look
        body = path.read_bytes()
        assert body == body_for(int(body.split(b":")[0])), message_id
    leftovers = list((root / "jobs" / "working").iterdir())
    with boxmq.open(root, fsync="never", abandon_after=0.0) as box:
        report = box.sweep()["jobs"]
    assert report.abandoned == len(leftovers)
    assert not list((root / "jobs" / "working").iterdir())


def test_a_process_writing_into_its_open_spares_killed_loses_and_mixes_nothing(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    """Puts and acks in one process, so that its acked files are spares kept open and written
    again by its puts (bodies of two pages): killed anywhere, every put it did not ack is on
    disk with exactly its own body, and no file holds another message's body."""
    log = tmp_path / "cycle.log"
    worker = start("cycle", str(root), "jobs", str(log))
    wait_for_line(worker, "cycling")
    written = kill_once_logged(worker, log, lambda text: text.count("A ") >= 600, "600 acks logged")

    lines = [line.split() for line in written.splitlines()]
    put = {words[1]: int(words[2]) for words in lines if len(words) == 3 and words[0] == "P"}
    acked = {words[1] for words in lines if len(words) == 2 and words[0] == "A"}
    # Acked, but killed before its "A" line: gone from the disk, or there if the kill came
    # first. A put's line is written after it returned, so none is missing that way.
    acking = {words[1] for words in lines if len(words) == 2 and words[0] == "R"} - acked
    assert len(acked) >= 600  # the spares were reused many times over
    assert len(acking) <= 1
    on_disk = {}
    for state in ("target", "processing"):
        for path in (root / "jobs" / state).iterdir():
            on_disk[decode(split_lock(path.name)[0]).message_id] = path
    for message_id, index in put.items():
        if message_id not in acked | acking:
            assert message_id in on_disk, f"put #{index} returned, is neither acked nor on disk"
    for message_id, path in on_disk.items():
        body = path.read_bytes()
        assert body == body_for(int(body.split(b":")[0])), f"{message_id}: a torn body"
        if message_id in put:
            assert body == body_for(put[message_id]), f"{message_id}: another message's body"


def test_a_killed_share_group_member_s_messages_go_to_the_other_members(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    with boxmq.open(root, fsync="never") as box:
        rescuer = box.subscribe("$share/etl/sensors/#", "rescuer", max_in_flight=1)
        held_log = tmp_path / "held.log"
        victim = start("member", str(root), "$share/etl/sensors/#", "victim", str(held_log), "5")
        waited(lambda: len(box.topics.members_of("etl", "sensors/#")) >= 2, within=60)
        assert len(box.topics.members_of("etl", "sensors/#")) == 2, "the victim never joined"
        for index in range(20):
            box.publish(f"sensors/{index % 3}", f"{index}")
        wait_for_line(victim, "holding")
        kill(victim)
        held = set(held_log.read_text().split())
        assert len(held) == 5
        got: dict[str, int] = {}
        end = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < end:
            message = rescuer.receive(timeout=5)
            if message is not None:
                got[message.id] = message.delivery_count
                message.ack()
        rescuer.close()
    assert len(got) == 20  # none lost, each once
    assert {i for i, count in got.items() if count == 2} == held


def test_exactly_once_survives_a_sigkill_between_and_within_its_steps(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    log = tmp_path / "steps.log"
    sender = start("assure", str(root), "counts", str(log))
    wait_for_line(sender, "assuring")
    steps = kill_once_logged(
        sender, log, lambda text: text.count("D") >= 50, "50 deliveries logged"
    ).split("\n")
    assured = {int(line[2:]) for line in steps if line.startswith("A ")}
    assert len(assured) >= 50
    last = max(assured) + 1  # may have been stored without its log line: retried as well
    with boxmq.open(root, fsync="never") as box:
        for index in range(last + 1):  # the sender retries both steps after its restart
            box.assured("meter", str(index), str(index).encode(), queue="counts")
            box.deliver("meter", str(index))
            box.deliver("meter", str(index))  # and a duplicate of step 2 for good measure
        got = []
        with box.queue("counts").consumer("reader", max_in_flight=100) as reader:
            while (message := reader.receive(timeout=1)) is not None:
                got.append(int(message.body))
                message.ack()
    assert sorted(got) == list(range(last + 1))  # every message exactly once


def _boxmq(root: Path, *args: str) -> None:
    """The command line, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "boxmq", "--data", str(root), "--fsync", "never", *args],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("case", "polling"),
    [("share-group", False), ("subscription", False), ("subscription", True), ("queue", False)],
)
def test_a_dropbox_another_process_deleted_and_made_again_is_watched_afresh(
    root: Path, case: str, polling: bool
) -> None:
    """This process keeps the engine of a dropbox, idle or read: a share group its persistent
    member detached from, a durable subscription whose subscriber closed, a queue a consumer
    reads. Another process deletes the dropbox (`boxmq unsubscribe`: the group's last member
    out, the subscription's end; `rm -rf` of a queue), and it is made again at its path. The
    engine's watch was on the old folder, so what other processes put into the new one was
    found only by its next full rescan (5 s); the watch now follows the path. With polling
    (NFS) the rescans on a timer find it as before."""
    filter = "$share/g/jobs/#" if case == "share-group" else "jobs/#"
    with boxmq.open(root, fsync="never", polling=polling) as here:
        # Only the watch (or the polling) tells of what another process puts: no rescan.
        here.options = replace(here.options, rescan_interval=3600.0)
        reader: boxmq.Consumer | boxmq.Subscriber
        if case == "queue":
            reader = here.queue("jobs").consumer("reader")
            _boxmq(root, "put", "jobs", "one")
        else:
            reader = here.subscribe(filter, "mine", process_bound=case != "share-group")
            _boxmq(root, "publish", "jobs/1", "one")
        message = reader.receive(timeout=5)
        assert message is not None
        assert message.body == b"one"
        message.ack()
        if case == "queue":
            subprocess.run(["rm", "-rf", str(root / "jobs")], check=True)
            _boxmq(root, "put", "jobs", "two")
        else:
            assert isinstance(reader, boxmq.Subscriber)
            if case == "share-group":
                reader.detach()  # still a member: the group lives on, its engine here idle
            else:
                reader.close()  # the subscription lives on, its engine here idle
            _boxmq(root, "unsubscribe", filter, "--name", "mine")
            assert not any((root / "topic-root").glob("*/.subscriptions/*"))  # deleted there
            reader = here.subscribe(filter, "mine", process_bound=case != "share-group")
            _boxmq(root, "publish", "jobs/2", "two")
        message = reader.receive(timeout=3)
        assert message is not None, "the new folder's message was not seen"
        assert message.body == b"two"
        message.ack()
        reader.close()


def test_put_many_killed_mid_commit_while_another_process_consumes_loses_and_tears_nothing(
    root: Path, tmp_path: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    """A producer of batches (put_many under `always`, some messages with their properties in
    a side file) is SIGKILLed three times while this process consumes the queue: every batch
    put_many returned is consumed, each message once and whole (its own body and properties),
    and what a kill left in working/ is never delivered, only cleaned."""
    note_for: Callable[[int], str | None] = _load_worker().note_for
    shuffle = random.Random(77)
    got: dict[str, int] = {}
    torn: list[str] = []
    stop = threading.Event()

    def consume() -> None:
        with (
            boxmq.open(root, fsync="never") as box,
            box.queue("jobs").consumer("reader", max_in_flight=32) as reader,
        ):
            quiet = 0.0
            while quiet < 2.0:  # once told to stop: until the queue stays empty for 2 s
                message = reader.receive(timeout=0.2)
                if message is None:
                    quiet += 0.2 if stop.is_set() else 0.0
                    continue
                index = int(message.body.split(b":")[0])
                note = message.properties.get("note")
                if message.body != body_for(index) or note != note_for(index):
                    torn.append(message.id)
                if message.id in got:
                    torn.append(f"{message.id} twice")
                got[message.id] = index
                message.ack()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    returned: dict[str, int] = {}
    try:
        for run in range(3):
            log = tmp_path / f"batches{run}.log"
            producer = start("batches", str(root), "jobs", str(log), str(run * 100_000))
            wait_for_line(producer, "batching")
            lines = shuffle.randint(20, 60)

            def enough(text: str, lines: int = lines) -> bool:
                return text.count("\n") >= lines

            text = kill_once_logged(producer, log, enough, f"{lines} batches")
            for line in text.splitlines():
                for pair in line.split():
                    message_id, index = pair.split("=")
                    returned[message_id] = int(index)
    finally:
        stop.set()
        consumer.join(timeout=60)
    assert not consumer.is_alive()
    assert torn == []
    missing = sorted(i for m, i in returned.items() if m not in got)
    assert missing == []  # every message of a returned put_many was consumed
    assert len(returned) > 100
    with boxmq.open(root, fsync="never", abandon_after=0.0) as box:
        box.sweep()
        assert box.queue("jobs").counts().ready == 0  # nothing a kill left was made ready
    assert not list((root / "jobs" / "working").iterdir())


# Subscribes and unsubscribes one durable subscription 1,000 times (or for 8 s).
_CHURN = """
import sys, time
import boxmq
with boxmq.open(sys.argv[1], fsync="never") as box:
    deadline = time.monotonic() + 8
    for _ in range(1000):
        if time.monotonic() > deadline:
            break
        box.topics.subscribe("t/x", "s", process_bound=False).close()
        box.topics.unsubscribe("t/x", "s")
"""


def test_subscriptions_listed_while_another_process_unsubscribes_never_fail_nor_linger(
    root: Path, script: Callable[..., subprocess.Popen[str]]
) -> None:
    """`boxmq ls` lists the subscriptions while another process deletes one: a record read
    just before the delete had the listing make the dropbox's folders again under the
    deleting rmtree, a FileExistsError (a traceback for `boxmq ls`) or folders left behind."""
    churn = script(_CHURN, str(root))
    with boxmq.open(root, fsync="never") as box:
        listings = 0
        while churn.poll() is None:
            assert all(info.filter == "t/x" for info in box.topics.subscriptions())
            listings += 1
        assert churn.returncode == 0
        assert box.topics.subscriptions() == []
    assert listings > 0
    assert list((root / "topic-root").glob("*/.subscriptions/*")) == []


# Joins the share group $share/g/t/# as argv[2] and leaves it again, 400 times (or for 8 s);
# prints what went wrong: a join that raised, or a member or record gone right after it.
_JOIN_AND_LEAVE = """
import collections, sys, time
import boxmq
me, wrong = sys.argv[2], collections.Counter()
with boxmq.open(sys.argv[1], fsync="never") as box:
    deadline = time.monotonic() + 8
    for _ in range(400):
        if time.monotonic() > deadline:
            break
        try:
            member = box.subscribe("$share/g/t/#", me)
        except OSError as error:
            wrong[type(error).__name__] += 1
            continue
        if me not in box.topics.members_of("g", "t/#"):
            wrong["member gone"] += 1
        if box.topics.record_of("$share/g/t/#", me) is None:
            wrong["record gone"] += 1
        member.close()
print(dict(wrong))
"""


def test_a_member_joining_a_share_group_its_last_member_leaves_in_another_process_stays(
    root: Path, script: Callable[..., subprocess.Popen[str]]
) -> None:
    """Two processes join one share group and leave it, over and over: the last member out
    deletes the group, and the other process's join came in between, its record and member
    written into the folder the leave then deleted (a member of no group, its client told
    the subscription stands, sent nothing), or its folder made under the rmtree (the join
    raised FileNotFoundError). Joins and leaves now hold the group's folder with an flock."""
    members = [script(_JOIN_AND_LEAVE, str(root), name) for name in ("a", "b")]
    said = [member.communicate(timeout=60)[0].strip() for member in members]
    assert [member.returncode for member in members] == [0, 0]
    assert said == ["{}", "{}"]
    assert [p.name for p in (root / "topic-root").iterdir() if not p.name.startswith(".")] == []


# Makes the queue q by hand and deletes it with an rm -rf, 2,000 times (or for 8 s); prints
# how many deletes failed.
_MAKE_AND_RM = """
import os, shutil, sys, time
root, failed = sys.argv[1], 0
deadline = time.monotonic() + 8
for _ in range(2000):
    if time.monotonic() > deadline:
        break
    for state in ("working", "target", "processing", "processed", "error", "expired"):
        os.makedirs(os.path.join(root, "q", state), exist_ok=True)
    try:
        shutil.rmtree(os.path.join(root, "q"))
    except OSError:
        failed += 1
print(failed)
"""


def test_boxmq_ls_makes_no_folder_under_an_rm_rf_of_a_queue(
    root: Path, script: Callable[..., subprocess.Popen[str]]
) -> None:
    """`rm -rf` of a queue's folder (how docs/cli.md says to delete one) while `boxmq ls`
    counts the queues: the count made the state folders the queue lacked, so one the rm had
    just deleted came back under it, and the rm failed (Directory not empty) and left the
    queue there (5 to 8 % of 2,000 deletes)."""
    remover = script(_MAKE_AND_RM, str(root))
    with boxmq.open(root, fsync="never") as box:
        while remover.poll() is None:
            assert set(box.counts()) <= {"q"}
    assert remover.communicate(timeout=10)[0].strip() == "0"


# Locks the messages of the queue q and unlocks them again, for the seconds given.
_LOCK_AND_UNLOCK = """
import sys, time, boxmq
with boxmq.open(sys.argv[1], fsync="never") as box:
    queue = box.queue("q")
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        message = queue.get("w")
        if message is not None:
            try:
                message.unlock()
            except boxmq.BoxMQError:  # its queue was deleted: "the lock was taken away"
                pass
"""


def test_delete_queue_deletes_it_while_a_consumer_of_another_process_takes_messages(
    root: Path, script: Callable[..., subprocess.Popen[str]]
) -> None:
    """python.md: consumers in other processes find their folder gone. Deleted in place, the
    folder a consumer moved a message into under the rmtree made it fail (Directory not
    empty), ignored: delete_queue said True and left the queue (105 of 500 deletes)."""
    with boxmq.open(root, fsync="never") as box:
        box.queue("q").put_many([b"x"] * 50)
        consumer = script(_LOCK_AND_UNLOCK, str(root), "30")
        wait_for_line(consumer, "ready")
        left = 0
        deadline = time.monotonic() + 8
        for _ in range(300):
            if time.monotonic() > deadline:
                break
            box.queue("q").put_many([b"x"] * 50)
            assert box.delete_queue("q")
            left += (root / "q").exists()
        assert consumer.poll() is None  # it took messages all along
        kill(consumer)
    assert left == 0
    assert not (root / ".deleting").exists()  # emptied, and removed with its last delete


# Publishes to t/x, one message at a time, for the seconds given.
_PUBLISH_LOOP = """
import sys, time, boxmq
with boxmq.open(sys.argv[1], fsync="never") as box:
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        box.publish("t/x", b"x")
"""


def test_unsubscribe_deletes_a_subscription_a_publisher_of_another_process_fans_out_into(
    root: Path, script: Callable[..., subprocess.Popen[str]]
) -> None:
    """Deleted in place, a subscription a publication of another process fanned out into
    under the rmtree (its pending copy's folder made again) made it fail (Directory not
    empty), ignored: its folders stayed behind, with no record and a message in them."""
    with boxmq.open(root, fsync="never") as box:
        box.topics.subscribe("t/x", "s", process_bound=False).close()
        publisher = script(_PUBLISH_LOOP, str(root), "30")
        wait_for_line(publisher, "ready")
        subscriptions = root / "topic-root" / "t%2Fx" / ".subscriptions"
        left, deletes = 0, 0
        deadline = time.monotonic() + 8
        for _ in range(300):
            if time.monotonic() > deadline:
                break
            box.topics.subscribe("t/x", "s", process_bound=False).close()
            time.sleep(0.01)  # a few publications into it
            assert box.topics.unsubscribe("t/x", "s")
            deletes += 1
            left += subscriptions.exists() and any(subscriptions.iterdir())
        assert publisher.poll() is None  # it published all along
        kill(publisher)
    assert deletes > 50
    assert left == 0
    assert not (root / ".deleting").exists()


# Deletes the queue q, once it has said so.
_DELETE = """
import sys, boxmq
with boxmq.open(sys.argv[1], fsync="never") as box:
    print("deleting", flush=True)
    box.delete_queue("q")
"""


def test_a_delete_killed_midway_leaves_the_queue_whole_or_gone_and_the_sweep_clears_it(
    root: Path, script: Callable[..., subprocess.Popen[str]]
) -> None:
    """A process killed (SIGKILL) while deleting a big queue never leaves it half in place:
    it is whole under its name, or gone from it. What the rmtree in .deleting/ had not
    finished was left there until the next delete; a sweep (boxmq serve's) removes it."""
    size = 20_000
    leftovers = 0
    with boxmq.open(root, fsync="never") as box:
        for attempt in range(6):
            if not (root / "q").exists():
                box.queue("q").put_many([b"x"] * size)
            deleter = script(_DELETE, str(root))
            wait_for_line(deleter, "deleting")
            time.sleep(0.05 * (attempt + 1))  # into its rmtree, or not yet
            kill(deleter)
            if (root / "q").exists():
                assert len(os.listdir(root / "q" / "target")) == size  # whole
            if (root / ".deleting").exists() and os.listdir(root / ".deleting"):
                leftovers += 1
                box.sweep()
                assert not (root / ".deleting").exists()
                if leftovers >= 2:
                    break
    assert leftovers  # a kill landed in the rmtree at least once


# Joins the share group $share/g/t/# as argv[2] and leaves it again, for ever (its test kills
# it), a message published to it now and then so that a leave deletes a group with messages.
_JOIN_AND_LEAVE_FOR_EVER = """
import sys, time
import boxmq
with boxmq.open(sys.argv[1], fsync="never") as box:
    print("joining", flush=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        member = box.subscribe("$share/g/t/#", sys.argv[2])
        box.publish("t/x", b"to a group about to go")
        member.close()
"""


def test_a_process_killed_holding_a_share_group_s_flock_keeps_no_one_waiting(
    root: Path, script: Callable[..., subprocess.Popen[str]]
) -> None:
    """A process joining a share group and leaving it (its last member: the leave deletes it)
    holds the group's folder with an flock: SIGKILLed at varied moments in those steps, the
    flock goes with it, and a member of another process joins at once, takes what is
    published to the group after (once), and leaves it, deleting it."""
    rng = random.Random(3)
    deadline = time.monotonic() + 12
    for attempt in range(8):
        if time.monotonic() > deadline:
            break
        churn = script(_JOIN_AND_LEAVE_FOR_EVER, str(root), "a")
        wait_for_line(churn, "joining")
        time.sleep(rng.uniform(0, 0.2))
        kill(churn)
        joined: list[object] = []
        with boxmq.open(root, fsync="never") as box:
            joiner = threading.Thread(
                target=lambda into=joined, box=box: into.append(box.subscribe("$share/g/t/#", "b")),
                daemon=True,
            )
            joiner.start()
            joiner.join(timeout=5)
            assert joined, f"attempt {attempt}: the join waits for the killed process's flock"
            member = joined[0]
            assert isinstance(member, boxmq.Subscriber)
            sent = box.publish("t/x", f"after kill {attempt}")
            got = []
            while (message := member.receive(timeout=0.5)) is not None:
                got.append(message)
                message.ack()
            after = [m for m in got if m.body != b"to a group about to go"]
            assert [m.id for m in after] == [sent], attempt
            assert "b" in box.topics.members_of("g", "t/#")
            member.close()  # the last live member, with "a" killed: or "a" is still a member
    assert not (root / ".deleting").exists() or os.listdir(root / ".deleting") == []


_PUT_EACH_LINE = """
import sys, boxmq
with boxmq.open(sys.argv[1], fsync="never") as box:
    jobs = box.queue("jobs")
    for line in sys.stdin:
        jobs.put(line.strip().encode())
        print("put", flush=True)
"""


def test_puts_of_two_processes_taking_turns_go_out_in_the_order_they_were_put(
    root: Path,
) -> None:
    # FIFO within a priority across processes: each put starts after the other process's
    # returned, most pairs within one millisecond, so the ids' stamps alone must order them.
    other = subprocess.Popen(
        [sys.executable, "-c", _PUT_EACH_LINE, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert other.stdin is not None
    assert other.stdout is not None
    try:
        with boxmq.open(root, fsync="never") as box:
            jobs = box.queue("jobs")
            for turn in range(300):
                jobs.put(str(2 * turn).encode())
                other.stdin.write(f"{2 * turn + 1}\n")
                other.stdin.flush()
                assert read_line(other.stdout, SAID_WITHIN) == "put\n"
            other.stdin.close()
            assert other.wait(timeout=30) == 0
            with jobs.consumer("reader", max_in_flight=1) as consumer:
                bodies = []
                for _ in range(600):
                    message = consumer.receive(timeout=5)
                    assert message is not None
                    bodies.append(int(message.body))
                    message.ack()
    finally:
        kill(other)  # a no-op on one that ended; reaped either way
        other.stdout.close()
    out_of_order = [(a, b) for a, b in itertools.pairwise(bodies) if a > b]
    assert not out_of_order, f"{len(out_of_order)} out of FIFO order, e.g. {out_of_order[:5]}"


# Member m1 of $share/g/h/# (max_in_flight=2), waiting in receive for argv[2] seconds: prints
# "reading" once it joined, then the body of each message it received (and acked), and "end".
_MEMBER_READING = """
import sys, time
import boxmq
with boxmq.open(sys.argv[1], fsync="never") as box:
    member = box.subscribe("$share/g/h/#", "m1", max_in_flight=2)
    print("reading", flush=True)
    deadline = time.monotonic() + float(sys.argv[2])
    while (left := deadline - time.monotonic()) > 0:
        message = member.receive(timeout=left)
        if message is not None:
            print(message.body.decode(), flush=True)
            message.ack()
print("end", flush=True)
"""


def test_a_member_ended_from_another_process_takes_no_more_of_the_group_s_messages(
    root: Path, script: Callable[..., subprocess.Popen[str]]
) -> None:
    """A process waits in receive as member m1 of a share group; another ends m1
    (`unsubscribe`) while m2 keeps the group, then publishes: within a second m1's Subscriber
    sees its membership gone, takes nothing more (its receive returns None, as a plain
    subscription's ended elsewhere does), and the group's messages go to m2. It read on, and
    took them from m2, as a member of nothing (findings F3, stop 62)."""
    reading_for = 6.0  # s: past the look for the end (1 s) and the publish
    with boxmq.open(root, fsync="never") as box:
        m2 = box.subscribe("$share/g/h/#", "m2", max_in_flight=2)
        m2.pause()  # a member, taking nothing yet: on the old code m1 took them all
        m1 = script(_MEMBER_READING, str(root), str(reading_for))
        wait_for_line(m1, "reading")
        assert box.unsubscribe("$share/g/h/#", "m1")
        time.sleep(2.0)  # past m1's look for its end, which comes at most once a second
        for index in range(2):
            box.publish("h/a", str(index))
        said, _ = m1.communicate(timeout=SAID_WITHIN)  # m1 alone reads until it ends
        m2.resume()
        got: list[tuple[str, int]] = []
        end = time.monotonic() + SAID_WITHIN
        while len(got) < 2 and (left := end - time.monotonic()) > 0:
            message = m2.receive(timeout=left)
            if message is not None:
                got.append((message.body.decode(), message.delivery_count))
                message.ack()
        m2.close()
    assert m1.returncode == 0
    assert said.split() == ["end"], "m1 took the group's messages after it was ended"
    assert sorted(got) == [("0", 1), ("1", 1)]
