"""A dropbox is a public interface: shell scripts publish with `mv`, and read what we write."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import boxmq
from boxmq import MessageClass
from boxmq.clock import ManualClock
from boxmq.store.names import decode, split_lock


def sh(script: str, cwd: Path) -> str:
    """Run `script` as a shell script in `cwd`; what it printed."""
    return subprocess.run(
        ["sh", "-ec", script], cwd=cwd, check=True, stdout=subprocess.PIPE, text=True
    ).stdout


def test_a_shell_script_publishes_with_mv_and_boxmq_delivers_it(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    with jobs.consumer("w") as consumer:
        assert consumer.receive_nowait() is None
        sh("echo hi > jobs/working/x && mv jobs/working/x jobs/target/4.x.T", root)
        message = consumer.receive(timeout=5)  # woken by the rename, not by a poll
        assert message is not None
        assert (message.id, message.body, message.message_class) == (
            "x",
            b"hi\n",
            MessageClass.TEXT,
        )
        message.ack()
    assert (root / "jobs" / "processed" / "4.x.T").read_bytes() == b"hi\n"


def test_the_full_dropboxmq_example_name_is_understood(box: boxmq.Box, root: Path) -> None:
    name = "4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello"
    box.queue("jobs").put(b"warm-up")  # creates the folders
    sh(f"printf body > jobs/working/m && mv jobs/working/m 'jobs/target/{name}'", root)
    peeked = [p.envelope for p in box.queue("jobs").peek()]
    example = next(e for e in peeked if e.message_id == "1140429201295000-9262574723")
    assert example.correlation_id == "corr1283"
    assert example.reply_to == "TestQueue1"
    assert example.type == "XYZType"
    assert example.user_properties() == {"prop1": "hello"}
    assert example.timestamp == 1140429201295


def test_a_file_with_any_name_is_delivered_with_defaults(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    sh("echo data > jobs/working/r && mv jobs/working/r 'jobs/target/report 2024.csv'", root)
    with jobs.consumer("w") as consumer:
        message = consumer.receive(timeout=5)
        assert message is not None
        assert message.id == "report 2024.csv"
        assert message.priority == 4
        message.unlock()  # a redelivery re-encodes the name; the id survives
    with jobs.consumer("w2") as consumer:
        again = consumer.receive(timeout=5)
        assert again is not None
        assert again.id == "report 2024.csv"
        assert again.delivery_count == 2
        again.ack()


def test_a_name_too_long_to_lock_goes_to_error_not_away(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    long_name = "y" * 240
    sh(f"echo data > jobs/working/r && mv jobs/working/r jobs/target/{long_name}", root)
    with jobs.consumer("w") as consumer:
        assert consumer.receive(timeout=0.5) is None
    assert (root / "jobs" / "error" / long_name).read_text() == "data\n"


def test_files_boxmq_writes_are_dropboxmq_names_a_script_can_read(
    box: boxmq.Box, root: Path
) -> None:
    box.queue("jobs").put(b"for the script", priority=6, properties={"k": "v w"})
    out = sh('for f in jobs/target/*; do basename "$f"; cat "$f"; done', root).splitlines()
    name, body = out
    assert body == "for the script"
    assert name.startswith("6.")
    assert name.split(".")[2] == "B"
    assert decode(name).user_properties() == {"k": "v w"}


def send(root: Path, name: str, body: str) -> None:
    """A script's send: write in working/, then mv into target/."""
    sh(f"printf '{body}' > jobs/working/w && mv jobs/working/w 'jobs/target/{name}'", root)


def acked(consumer: boxmq.Consumer, count: int) -> list[boxmq.Message]:
    """`count` messages, each acknowledged as it is received (within 5 s each)."""
    got = []
    for _ in range(count):
        message = consumer.receive(timeout=5)
        assert message is not None
        message.ack()
        got.append(message)
    return got


def test_a_name_sent_again_keeps_both_messages_in_processed(box: boxmq.Box, root: Path) -> None:
    """A nightly script that always sends 4.nightly.T: yesterday's acked file stays."""
    jobs = box.queue("jobs")
    with jobs.consumer("w") as consumer:
        for night in ("monday", "tuesday"):
            send(root, "4.nightly.T", night)
            message = consumer.receive(timeout=5)
            assert message is not None
            assert message.id == "nightly"
            message.ack()
    processed = root / "jobs" / "processed"
    assert sorted(p.read_bytes() for p in processed.iterdir()) == [b"monday", b"tuesday"]
    assert (processed / "4.nightly.T").read_bytes() == b"monday"


def test_a_redrive_beside_a_new_message_of_its_name_delivers_both(
    box: boxmq.Box, root: Path
) -> None:
    jobs = box.queue("jobs")
    with jobs.consumer("w") as consumer:
        send(root, "4.job-1.T", "first attempt")
        message = consumer.receive(timeout=5)
        assert message is not None
        message.reject()
        send(root, "4.job-1.T", "corrected job")  # unique in target/ again
        assert jobs.requeue(source="error") == 1
        got = sorted((m.body, m.id) for m in acked(consumer, 2))
        assert got == [(b"corrected job", "job-1"), (b"first attempt", "job-1~2")]


def test_an_unlock_beside_a_new_message_of_its_name_delivers_both(
    box: boxmq.Box, root: Path
) -> None:
    """Both have the id x: the consumer takes them one after the other."""
    jobs = box.queue("jobs")
    with jobs.consumer("w", max_in_flight=1) as consumer:
        send(root, "4.x.T", "old")
        held = consumer.receive(timeout=5)
        assert held is not None
        send(root, "4.x.T", "new")  # while the first is locked in processing/
        held.unlock()
        assert sorted(m.body for m in acked(consumer, 2)) == [b"new", b"old"]
    assert sorted(os.listdir(root / "jobs" / "target")) == []


def test_a_name_sent_again_while_its_first_is_locked_is_taken_up_when_that_one_is_settled(
    manual_box: boxmq.Box, root: Path
) -> None:
    """docs/file-format.md: a process "takes up the other once that one is settled". A
    receive that read the second 4.nightly.T's coming while the first was locked under that
    name took it for the late news of its own claim and let it go: after the ack it waited
    for the next full read of target/ (5 s of the box's clock; here, where the clock stands
    still, for ever)."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"warm-up")  # creates the folders
    with jobs.consumer("w1") as first:
        assert acked(first, 1)[0].body == b"warm-up"
        send(root, "4.nightly.T", "monday")
        monday = first.receive(timeout=5)
        assert monday is not None
        assert monday.body == b"monday"
        with jobs.consumer("w2") as second:  # reads the news of tuesday's coming
            send(root, "4.nightly.T", "tuesday")  # while monday is locked in processing/
            assert second.receive(timeout=0.5) is None  # one message of an id at a time
        monday.ack()
        tuesday = first.receive(timeout=5)
        assert tuesday is not None
        assert tuesday.body == b"tuesday"
        tuesday.ack()


def test_one_name_sent_twice_and_claimed_in_one_millisecond_keeps_both_locks(
    manual_box: boxmq.Box, root: Path
) -> None:
    """A script sends 4.nightly.T again while the first one is locked, and `get` (`boxmq
    get`) claims it for the same holder at the same instant (one millisecond): both locks had
    one name in processing/, and the second claim's rename replaced the first message's file.
    The first was lost, and its ack settled the second."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"warm-up")  # creates the folders
    warm = jobs.get("cli")
    assert warm is not None
    warm.ack()
    held = []
    for body in ("first", "second"):
        send(root, "4.nightly.T", body)
        message = jobs.get("cli")
        assert message is not None
        held.append(message)
    assert [m.body for m in held] == [b"first", b"second"]
    assert len(os.listdir(root / "jobs" / "processing")) == 2
    for message in held:
        message.ack()
    processed = sorted(p.read_bytes() for p in (root / "jobs" / "processed").iterdir())
    assert processed == [b"first", b"second", b"warm-up"]


def test_two_ready_messages_with_one_id_are_both_delivered(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"warm-up")  # creates the folders
    send(root, "4.same.T", "low")
    send(root, "7.same.T", "high")
    with jobs.consumer("w", max_in_flight=5) as consumer:
        got = sorted(m.body for m in acked(consumer, 3))
    assert got == [b"high", b"low", b"warm-up"]


def test_one_process_holds_one_message_of_an_id_at_a_time_whatever_their_priorities(
    box: boxmq.Box, root: Path
) -> None:
    """docs/file-format.md said "a consumer holds one message of an id at a time": no other
    consumer of the process gets the second either. Which goes first is not the higher
    priority's: either does, by the order the process read them in (both orders were seen
    here, so neither is asserted)."""
    jobs = box.queue("jobs")
    jobs.put(b"warm-up")
    first = jobs.get()
    assert first is not None
    first.ack()
    send(root, "4.same.T", "low")
    send(root, "7.same.T", "high")
    with jobs.consumer("w1") as one, jobs.consumer("w2") as two:
        held = one.receive(timeout=5)
        assert held is not None
        assert two.receive(timeout=0.5) is None  # the other is ready, and not for anyone here
        assert one.receive(timeout=0.2) is None
        held.ack()
        other = two.receive(timeout=5)
        assert other is not None
        other.ack()
    assert sorted([held.body, other.body]) == [b"high", b"low"]
    assert {held.id, other.id} == {"same"}


def test_two_processes_may_hold_both_and_a_settle_by_id_takes_one_of_them(
    box: boxmq.Box, root: Path
) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"warm-up")
    warm = jobs.get()
    assert warm is not None
    warm.ack()
    send(root, "4.same.T", "low")
    send(root, "7.same.T", "high")
    taken = [cli_get(root), cli_get(root)]  # two `boxmq get` processes hold both at once
    assert sorted(got["body"] for got in taken if got is not None) == ["high", "low"]
    jobs.ack("same")  # as `boxmq ack jobs same`
    processing = root / "jobs" / "processing"
    (left,) = [processing / name for name in os.listdir(processing)]
    processed = {p.read_bytes() for p in (root / "jobs" / "processed").iterdir()}
    assert processed - {b"warm-up"} == {b"high", b"low"} - {left.read_bytes()}


STRAYS = {
    "4.folder.T": "mkdir jobs/target/4.folder.T",
    "4.pipe.T": "mkfifo jobs/target/4.pipe.T",
    "4.link.T": "ln -s /etc/hostname jobs/target/4.link.T",
}


def test_what_is_no_file_in_target_goes_to_error_and_blocks_no_consumer(
    box: boxmq.Box, root: Path
) -> None:
    """A directory, a named pipe or a symbolic link moved into target/ while a consumer runs
    (it learns the name from inotify, which does not say what it is): set aside, and the
    consumer goes on; a receive keeps to its timeout."""
    jobs = box.queue("jobs")
    jobs.put(b"warm-up")  # creates the folders
    with jobs.consumer("w", max_in_flight=5) as consumer:
        first = consumer.receive(timeout=5)
        assert first is not None
        first.ack()
        sh("; ".join(STRAYS.values()), root)
        send(root, "4.good.T", "good")
        message = consumer.receive(timeout=5)
        assert message is not None
        assert message.body == b"good"
        message.ack()
        assert consumer.receive(timeout=0.5) is None
    assert sorted(os.listdir(root / "jobs" / "error")) == sorted(STRAYS)
    assert os.listdir(root / "jobs" / "target") == []
    assert box.counts()["jobs"].dead == len(STRAYS)  # what watchers of dead letters count (ls)


def test_get_sets_aside_what_is_no_file_in_target(box: boxmq.Box, root: Path) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"warm-up")
    sh("; ".join(STRAYS.values()), root)
    message = jobs.get()
    assert message is not None
    assert message.body == b"warm-up"
    assert jobs.get() is None
    assert sorted(os.listdir(root / "jobs" / "error")) == sorted(STRAYS)


# A delivery count an INT cannot hold one more of: a script's name, or a DropboxMQ tool's.
FULL_COUNT = "9.full.T.....bx_dcI=2147483647"


@pytest.mark.parametrize(
    ("max_deliveries", "dead"),
    # the consumer whose delivery ended there too (docs/file-format.md `bx_lastS`)
    [
        (5, f"{FULL_COUNT}&bx_whyS=max-deliveries&bx_lastS=w"),
        (None, f"{FULL_COUNT}&bx_whyS=metadata-full&bx_lastS=w"),
    ],
)
def test_a_delivery_count_that_cannot_grow_goes_to_error_and_blocks_no_consumer(
    root: Path, max_deliveries: int | None, dead: str
) -> None:
    """One more delivery than 2^31-1 is no INT: writing it raised InvalidArgument out of the
    unlock, and out of every receive after (the sweep met it again at its deadline), with
    the message left in processing/ for ever."""
    with boxmq.open(root, fsync="never", max_deliveries=max_deliveries) as box:
        jobs = box.queue("jobs")
        send(root, FULL_COUNT, "poison")
        jobs.put(b"good")
        with jobs.consumer("w", lock_timeout=0.2) as consumer:
            message = consumer.receive(timeout=5)
            assert message is not None
            assert message.body == b"poison"
            assert message.unlock() == dead.partition("bx_whyS=")[2].partition("&")[0]
            assert [m.body for m in acked(consumer, 1)] == [b"good"]
    assert os.listdir(root / "jobs" / "error") == [dead]
    assert os.listdir(root / "jobs" / "processing") == []


def test_get_sends_a_timed_out_lock_whose_count_cannot_grow_to_error(
    manual_box: boxmq.Box, root: Path, clock: ManualClock
) -> None:
    """`boxmq get` releases the locks that timed out first: this one raised there, so every
    get of the queue failed and the message stayed locked for ever."""
    jobs = manual_box.queue("jobs")
    send(root, FULL_COUNT, "poison")
    jobs.put(b"good")
    locked = jobs.get(lock_timeout=1)
    assert locked is not None
    assert locked.body == b"poison"
    clock.advance(2)
    message = jobs.get()
    assert message is not None
    assert message.body == b"good"
    # `get`'s consumer, "cli", held it last
    assert os.listdir(root / "jobs" / "error") == [
        f"{FULL_COUNT}&bx_whyS=max-deliveries&bx_lastS=cli"
    ]


@pytest.mark.parametrize(
    ("name", "max_deliveries", "dead"),
    [
        # 164 bytes: a lock fits (MAX_NAME 167), one more delivery does not.
        (f"4.{'L' * 160}.T", 5, f"4.{'L' * 160}.T"),
        (FULL_COUNT, None, f"{FULL_COUNT}&bx_whyS=metadata-full&bx_lastS=cli"),
    ],
)
def test_the_sweep_says_a_timed_out_lock_whose_name_cannot_grow_is_no_max_deliveries(
    root: Path,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    name: str,
    max_deliveries: int | None,
    dead: str,
) -> None:
    """`boxmq serve`'s sweep logged it as "delivered 1 times: to error/" (a script's long name
    on its first delivery), and recorded max-deliveries under no max_deliveries, where an
    unlock says metadata-full (found by a review)."""
    with boxmq.open(root, fsync="never", clock=clock, max_deliveries=max_deliveries) as box:
        jobs = box.queue("jobs")
        send(root, name, "long")
        locked = jobs.get(lock_timeout=1)
        assert locked is not None
        assert locked.body == b"long"
        clock.advance(2)
        with caplog.at_level(logging.WARNING, "boxmq.sweep"):
            assert box.sweep()["jobs"].dead == 1
    assert os.listdir(root / "jobs" / "error") == [dead]
    assert "its name cannot carry one more delivery: to error/" in caplog.text
    assert "times: to error/" not in caplog.text


def test_a_consumer_s_lock_whose_name_cannot_grow_goes_to_error_and_says_so(
    box: boxmq.Box, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A lock timeout in the consumer's process, or a close, sent a script's long name to
    error/ without a word: no bx_why fits such a name, so nothing said why it was there
    (found by a review)."""
    jobs = box.queue("jobs")
    long = f"4.{'L' * 160}.T"  # a lock fits (MAX_NAME 167), one more delivery does not
    send(root, long.replace("L", "A", 1), "timed-out")
    with (
        caplog.at_level(logging.WARNING, "boxmq.queue"),
        jobs.consumer("w", max_in_flight=1, lock_timeout=0.3) as consumer,
    ):
        first = consumer.receive(timeout=5)
        assert first is not None
        assert first.body == b"timed-out"
        send(root, long.replace("L", "C", 1), "closed")
        second = consumer.receive(timeout=5)  # once the first lock timed out
        assert second is not None
        assert second.body == b"closed"
    assert sorted(os.listdir(root / "jobs" / "error")) == sorted(
        [long.replace("L", "A", 1), long.replace("L", "C", 1)]
    )
    assert caplog.text.count("to error/ (metadata-full)") == 2


def test_a_long_name_a_leaving_share_member_held_goes_to_error_and_says_so(
    box: boxmq.Box, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A member whose locks name no process (a persistent MQTT session's), made to leave from
    another process: a script's name with no room for one more delivery went to error/
    without a word, logged as one that "went back to the others" (found by a review)."""
    name = f"4.{'L' * 140}.T.....bx_topicS=t%2Fa"  # 164 bytes: a lock fits, a count does not
    with (
        box.subscribe("$share/g/t/#", "m2") as other,
        box.subscribe("$share/g/t/#", "m1", process_bound=False) as member,
    ):
        other.pause()
        group = root / "topic-root" / "t%2F%23" / ".subscriptions" / "share.g"
        sh(f"printf x > working/w && mv working/w 'target/{name}'", group)
        message = member.receive(timeout=5)
        assert message is not None
        assert message.body == b"x"
        with (
            caplog.at_level(logging.INFO, "boxmq.sweep"),
            boxmq.open(root, fsync="never") as elsewhere,
        ):
            assert elsewhere.unsubscribe("$share/g/t/#", "m1")
        assert os.listdir(group / "error") == [name]
    assert "to error/ (metadata-full)" in caplog.text
    assert "went back to the others" not in caplog.text


# The DropboxMQ document, statement by statement, with real files and real `boxmq` processes.


def cli_get(root: Path) -> dict[str, Any] | None:
    """One `boxmq get --json` process: the message it locked, or None when none is ready."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "boxmq.cli",
            f"--data={root}",
            "--fsync=never",
            "get",
            "jobs",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode == 3:
        return None
    assert done.returncode == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout)
    return got


def test_a_file_in_working_is_not_sent_however_long_its_producer_takes(
    box: boxmq.Box, root: Path
) -> None:
    """'While the message file remains in the working directory, the message has not actually
    been sent': a consumer never takes it, however often it looks."""
    box.queue("jobs").put(b"warm-up")
    assert cli_get(root) is not None
    sh("printf 'half' > jobs/working/slow", root)
    assert cli_get(root) is None
    sh("printf ' and the rest' >> jobs/working/slow", root)
    sh("mv jobs/working/slow jobs/target/4.slow.T", root)
    got = cli_get(root)
    assert got is not None
    assert (got["id"], got["body"]) == ("slow", "half and the rest")


def test_the_priorities_a_script_writes_order_delivery_across_the_whole_int_range(
    box: boxmq.Box, root: Path
) -> None:
    """Field 1: -2^31..2^31-1, default 4 (a name not in the encoding, a missing field 1)."""
    box.queue("jobs").put(b"warm-up", priority=5)
    names = ["1.low.T", "-2147483648.min.T", "2147483647.max.T", "plain", ".dflt.T", "9.high.T"]
    for name in names:
        send(root, name, "x")
    order = []
    while (got := cli_get(root)) is not None:
        order.append((got["priority"], got["id"]))
    assert order[:3] == [(2147483647, "max"), (9, "high"), (5, order[2][1])]
    assert sorted(order[3:5]) == [(4, "dflt"), (4, "plain")]
    assert order[5:] == [(1, "low"), (-2147483648, "min")]


def test_a_priority_outside_the_int_range_makes_the_name_one_not_in_the_encoding(
    box: boxmq.Box, root: Path
) -> None:
    box.queue("jobs").put(b"warm-up", priority=0)
    send(root, "2147483648.big.T", "x")
    got = cli_get(root)
    assert got is not None
    assert (got["id"], got["priority"]) == ("2147483648.big.T", 4)


def test_a_script_s_message_whose_expiration_passed_goes_to_expired_not_to_a_consumer(
    box: boxmq.Box, root: Path
) -> None:
    """Field 4: epoch milliseconds; the expired/ folder holds what expired, body and name."""
    box.queue("jobs").put(b"warm-up")
    assert cli_get(root) is not None
    send(root, "4.old.T.1140429211295", "stale")  # example 1's expiration: 2006
    send(root, "4.new.T.32503680000000", "fresh")  # the year 3000
    send(root, "4.none.T.0", "never")  # 0: no expiration
    got = sorted(m["id"] for m in iter(lambda: cli_get(root), None))
    assert got == ["new", "none"]
    assert (root / "jobs" / "expired" / "4.old.T.1140429211295").read_bytes() == b"stale"


def test_every_property_type_a_script_writes_reads_back_typed(box: boxmq.Box, root: Path) -> None:
    """Field 8: name<T>=value pairs joined by &, names and values URL-encoded."""
    jobs = box.queue("jobs")
    jobs.put(b"warm-up")
    props = "bB=true&yY=-128&hH=32767&iI=-2147483648&lL=9223372036854775807&fF=1.5&dD=12.5"
    send(root, f"4.p.T.....{props}&a%26b%3DcS=x+y%25z", "typed")
    with jobs.consumer("w", max_in_flight=5) as consumer:
        message = next(m for m in acked(consumer, 2) if m.id == "p")
    assert message.properties == {
        "b": True,
        "y": -128,
        "h": 32767,
        "i": -2147483648,
        "l": 9223372036854775807,
        "f": 1.5,
        "d": 12.5,
        "a&b=c": "x y%z",
    }


def test_every_message_class_a_script_writes_is_read_and_a_missing_one_is_bytes(
    box: boxmq.Box, root: Path
) -> None:
    jobs = box.queue("jobs")
    jobs.put(b"warm-up", priority=9)
    for letter in "MBSPOT":
        send(root, f"4.{letter}.{letter}", letter)
    send(root, "4.none.", "none")
    with jobs.consumer("w", max_in_flight=10) as consumer:
        classes = {m.id: m.message_class.value for m in acked(consumer, 8)[1:]}
    assert classes == {**{c: c for c in "MBSPOT"}, "none": "B"}


def test_a_malformed_name_is_delivered_whole_as_its_id_with_default_metadata(
    box: boxmq.Box, root: Path
) -> None:
    """'If no message identifier can be parsed, the entire message filename is used'."""
    jobs = box.queue("jobs")
    jobs.put(b"warm-up", priority=9)
    for name in ("7.x.Q", "7.x.T.soon", "7..T", "7.x"):
        send(root, name, name)
    with jobs.consumer("w", max_in_flight=10) as consumer:
        got = {(m.id, m.priority, m.message_class.value) for m in acked(consumer, 5)[1:]}
    assert got == {(n, 4, "B") for n in ("7.x.Q", "7.x.T.soon", "7..T", "7.x")}


def test_an_acked_message_stays_in_processed_and_a_rejected_one_in_error_as_sent(
    box: boxmq.Box, root: Path
) -> None:
    """What a DropboxMQ reader finds after consumption: the body as sent, under a name that
    still decodes to the message (a reject adds boxmq's own bx_ properties only)."""
    jobs = box.queue("jobs")
    jobs.put(b"warm-up")
    send(root, "6.keep.T.....kS=v", "kept")
    send(root, "6.bad.T.....kS=v", "refused")
    with jobs.consumer("w", max_in_flight=10) as consumer:
        for _ in range(3):
            message = consumer.receive(timeout=5)
            assert message is not None
            if message.id == "bad":
                message.reject()
            else:
                message.ack()
    assert (root / "jobs" / "processed" / "6.keep.T.....kS=v").read_bytes() == b"kept"
    (dead,) = os.listdir(root / "jobs" / "error")
    assert (root / "jobs" / "error" / dead).read_bytes() == b"refused"
    envelope = decode(dead)
    assert (envelope.message_id, envelope.priority, envelope.user_properties()) == (
        "bad",
        6,
        {"k": "v"},
    )


def test_two_boxmq_get_processes_racing_for_script_files_each_take_a_message_once(
    box: boxmq.Box, root: Path
) -> None:
    """'Only one consumer will succeed' the move to processing/; the others go on scanning."""
    box.queue("jobs").put(b"warm-up")
    assert cli_get(root) is not None
    for n in range(12):
        send(root, f"4.m{n}.T", str(n))
    script = "for i in 1 2 3 4 5 6 7 8; do boxmq_get || true; done"
    cmd = f"{sys.executable} -m boxmq.cli --data {root} --fsync never get jobs --json"
    racers = [
        subprocess.Popen(
            ["sh", "-c", f"boxmq_get() {{ {cmd}; }}; {script}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [racer.communicate(timeout=120)[0] for racer in racers]
    ids = [json.loads(line)["id"] for out in outs for line in out.splitlines()]
    assert sorted(ids) == sorted(f"m{n}" for n in range(12))


def test_a_working_file_still_being_written_outlives_abandon_after_and_an_untouched_one_not(
    root: Path,
) -> None:
    """DropboxMQ lets a producer take as long as it needs; boxmq's sweep deletes a working/
    file only once it has not changed for `abandon_after` (its ctime), so a slow writer keeps
    its file and a crashed script's is cleaned up."""
    with boxmq.open(root, fsync="never", abandon_after=2) as box:
        box.queue("jobs").put(b"warm-up")
        sh("printf a > jobs/working/crashed && printf a > jobs/working/slow", root)
        time.sleep(2.5)
        sh("printf b >> jobs/working/slow", root)  # still writing: its ctime moves
        box.sweep()
        assert sorted(os.listdir(root / "jobs" / "working")) == ["slow"]
        sh("mv jobs/working/slow jobs/target/4.slow.T", root)
        got = [m["body"] for m in iter(lambda: cli_get(root), None)]
        assert sorted(got) == ["ab", "warm-up"]


def test_a_file_in_routing_is_never_delivered(box: boxmq.Box, root: Path) -> None:
    """boxmq has no content routes: routing/ is made for DropboxMQ's layout and left alone."""
    box.queue("jobs").put(b"warm-up")
    sh("printf r > jobs/working/r && mv jobs/working/r jobs/routing/4.routed.T", root)
    got = [m["id"] for m in iter(lambda: cli_get(root), None)]
    assert len(got) == 1
    assert "routed" not in got
    assert os.listdir(root / "jobs" / "routing") == ["4.routed.T"]


def test_a_dropboxmq_topic_s_incoming_and_subscription_folders_are_not_boxmq_s(
    box: boxmq.Box, root: Path
) -> None:
    """As docs/file-format.md says: a file in a topic's .incoming/target/ is not published, and
    a `<subscription>.<connection>` folder is fed nothing; a subscription's target/ is."""
    with box.subscribe("topic1", "sub1") as subscription:
        topic = root / "topic-root" / "topic1"
        (topic / ".incoming" / "working").mkdir(parents=True)
        (topic / ".incoming" / "target").mkdir()
        (topic / ".subscriptions" / "sub1.connection1" / "target").mkdir(parents=True)
        sh("printf i > working/i && mv working/i target/4.in.T", topic / ".incoming")
        box.publish("topic1", b"published")
        own = topic / ".subscriptions" / "client.sub1"
        sh("printf s > working/s && mv working/s target/4.dropped.T", own)
        got = []
        for _ in range(2):
            message = subscription.receive(timeout=5)
            assert message is not None
            message.ack()
            got.append(message.body)
        assert sorted(got) == [b"published", b"s"]
        assert subscription.receive(timeout=0.3) is None
    assert os.listdir(topic / ".incoming" / "target") == ["4.in.T"]
    assert os.listdir(topic / ".subscriptions" / "sub1.connection1" / "target") == []


def test_a_dropboxmq_consumer_s_claim_is_respected_for_five_minutes_then_redelivered(
    root: Path,
) -> None:
    """A DropboxMQ consumer claims by moving the file into processing/ under its own name: no
    boxmq consumer takes it, and the sweep gives it back only 5 minutes after the move (its
    ctime), counted as a delivery that ended without an ack."""
    clock = ManualClock(start=time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put(b"warm-up")
        send(root, "4.claimed.T", "held")
        sh("mv jobs/target/4.claimed.T jobs/processing/4.claimed.T", root)
        with jobs.consumer("w", max_in_flight=5) as consumer:
            assert [m.id for m in acked(consumer, 1)] != ["claimed"]
            assert consumer.receive_nowait() is None
        clock.advance(290)
        box.sweep()
        assert os.listdir(root / "jobs" / "processing") == ["4.claimed.T"]
        clock.advance(20)
        box.sweep()
        assert os.listdir(root / "jobs" / "processing") == []
        with jobs.consumer("w") as consumer:
            (message,) = acked(consumer, 1)
        assert (message.id, message.body, message.delivery_count) == ("claimed", b"held", 2)


_PRODUCER = """
import sys, boxmq
with boxmq.open(sys.argv[1], fsync="never", keep_processed=False) as box:
    jobs = box.queue("jobs")
    jobs.put(b"first")
    with jobs.consumer("w") as consumer:
        consumer.receive(timeout=5).ack()  # deleted: its file is a spare for the next put
    jobs.put(b"second")
    jobs.put_many([b"third", b"fourth"])
    box.subscribe("news/+", "a").close()
    box.subscribe("news/#", "b").close()
    box.publish("news/x", b"fanned out")
"""


def test_boxmq_as_a_producer_writes_elsewhere_and_only_moves_files_into_target(
    root: Path, tmp_path: Path
) -> None:
    """'The producer must move (not copy) the file to assure that a consumer doesn't attempt
    to read a message before it is completely written': every system call of a real boxmq
    process that puts (a new file, a spare, a batch) and publishes to two subscriptions is
    watched with strace, and none opens a file in a target/; each message arrives there by
    one rename (a publication: one link per subscription) of a file written elsewhere."""
    if shutil.which("strace") is None:
        if os.environ.get("CI"):
            pytest.fail("no strace on PATH (make test installs it from Debian)")
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace"
    done = subprocess.run(
        [
            "strace",
            "-qq",
            "-e",
            "trace=open,openat,creat,rename,renameat,renameat2,link,linkat",
            "-o",
            str(trace),
            sys.executable,
            "-c",
            _PRODUCER,
            str(root),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0 and "ptrace" in done.stderr and not os.environ.get("CI"):
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    in_target = re.compile(rf"{re.escape(str(root))}/(?:[^/]+/)+target/")
    calls = trace.read_text().splitlines()
    opened = [
        c
        for c in calls
        if (m := re.match(r'(?:open|openat|creat)\((?:AT_FDCWD, )?"([^"]+)"', c))
        and in_target.match(m[1])
    ]
    assert opened == []
    moved = [
        (m[1], m[2])
        for c in calls
        if (m := re.match(r'(\w+)\((?:AT_FDCWD, )?"([^"]+)", (?:AT_FDCWD, )?"([^"]+)".*= 0$', c))
        and in_target.match(m[3])
    ]
    assert len(moved) == 6
    for call, source in moved:
        assert "/working/" in source or source.startswith(f"{root}/.spare/"), source
        assert call.startswith("rename") or ".fanout-" in source, (call, source)
    assert sorted(p.read_bytes() for p in (root / "jobs" / "target").iterdir()) == [
        b"fourth",
        b"second",
        b"third",
    ]
    copies = (root / "topic-root").glob("*/.subscriptions/*/target/*")
    assert [p.read_bytes() for p in copies] == [b"fanned out"] * 2


DROPBOXMQ_CONSUMER = """
for f in $(ls jobs/target); do
    mv "jobs/target/$f" "jobs/processing/$f" 2>/dev/null || continue  # another took it
    if [ "$(cat "jobs/processing/$f")" = good ]; then
        mv "jobs/processing/$f" "jobs/processed/$f"
    else
        mv "jobs/processing/$f" "jobs/error/$f"
    fi
done
"""


def test_a_dropboxmq_consumer_s_processed_and_error_moves_are_final_to_boxmq(root: Path) -> None:
    """'If the message is consumed and acknowledged, the consumer moves the message file to the
    processed directory ... not successfully consumed ... to the error directory': boxmq's
    messages, taken and settled so by a script, count as done and dead, never come back by
    a sweep, and the dead one goes again, with its metadata, when requeued."""
    clock = ManualClock(start=time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put(b"good", priority=7, properties={"k": "v"})
        jobs.put(b"bad", priority=6, properties={"k": "w"}, correlation_id="c1")
        sh(DROPBOXMQ_CONSUMER, root)
        counts = box.counts()["jobs"]
        assert (counts.ready, counts.locked, counts.done, counts.dead) == (0, 0, 1, 1)
        (done,) = os.listdir(root / "jobs" / "processed")
        assert decode(done).user_properties() == {"k": "v"}
        clock.advance(3600)
        box.sweep()
        with jobs.consumer("w") as consumer:
            assert consumer.receive_nowait() is None
            assert jobs.requeue() == 1
            message = consumer.receive(timeout=5)
            assert message is not None
            assert (message.body, message.priority, message.properties) == (b"bad", 6, {"k": "w"})
            assert message.correlation_id == "c1"
            message.ack()


def test_a_float_a_script_wrote_is_read_as_java_reads_it_and_survives_an_unlock(
    box: boxmq.Box, root: Path
) -> None:
    """Field 8's `F` is a Java float, read with Float.parseFloat: past the largest float is
    Infinity, 0.123456789 is 0.12345679. Read as a double, the first went to error/ as
    "metadata-full" at its unlock (no float could hold it when the name was written again),
    and the second changed value between its deliveries."""
    jobs = box.queue("jobs")
    send(root, "4.f.T.....hugeF=3.5E38&fineF=0.123456789", "floats")
    with jobs.consumer("w") as consumer:
        first = consumer.receive(timeout=5)
        assert first is not None
        assert first.properties == {"huge": math.inf, "fine": 0.12345679}
        first.unlock()
        again = consumer.receive(timeout=5)
        assert again is not None
        assert (again.id, again.delivery_count) == ("f", 2)
        assert again.properties == first.properties
        again.ack()
    assert os.listdir(root / "jobs" / "error") == []


def test_a_put_with_example_1_s_metadata_at_its_time_writes_example_1_s_name(root: Path) -> None:
    """What a DropboxMQ-style reader splits at the dots: the eight fields in their order
    (example 1's, but for the id's 10 random digits), the id carrying the put's time."""
    with boxmq.open(root, fsync="never", clock=ManualClock(start=1140429201.295)) as box:
        message_id = box.queue("jobs").put(
            "a text",
            expires_in=10,
            correlation_id="corr1283",
            reply_to="TestQueue1",
            type="XYZType",
            properties={"prop1": "hello"},
        )
    fields = sh(
        'for f in jobs/target/*; do basename "$f" | tr . "\\n"; cat "$f"; done', root
    ).split("\n")
    assert message_id.startswith("1140429201295000-")
    assert fields == [
        "4",
        message_id,
        "T",
        "1140429211295",
        "corr1283",
        "TestQueue1",
        "XYZType",
        "prop1S=hello",
        "a text",
    ]


def test_a_boxmq_consumer_that_loses_a_claim_to_a_script_quietly_takes_the_next(
    box: boxmq.Box, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """'The consumers that fail to move the message file ... quietly go back to scanning':
    a sh consumer claims with mv while a boxmq consumer receives from the same target/;
    each message is taken once, by one of them, and boxmq logs nothing about the ones lost."""
    jobs = box.queue("jobs")
    for n in range(200):
        jobs.put(str(n))
    script = subprocess.Popen(
        ["sh", "-c", 'for f in jobs/target/*; do mv "$f" jobs/processing/ 2>/dev/null || :; done'],
        cwd=root,
    )
    got = []
    with caplog.at_level(logging.DEBUG, "boxmq"), jobs.consumer("w") as consumer:
        while (message := consumer.receive(timeout=0.5)) is not None:
            got.append(message.text())
            message.ack()
            time.sleep(0.002)  # as slow as the script's mv, so that both take some
    assert script.wait(timeout=60) == 0
    taken = [
        (root / "jobs" / "processing" / n).read_text()
        for n in os.listdir(root / "jobs" / "processing")
    ]
    assert sorted(got + taken, key=int) == [str(n) for n in range(200)]
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


HOLDER = "h" * 40  # the longest consumer name a lock suffix takes (docs/file-format.md)


def _script_name(size: int, properties: str = "") -> str:
    """A `4.<id>.T` name a script writes, `size` bytes long with its properties field."""
    tail = f".T.....{properties}" if properties else ".T"
    return f"4.{'L' * (size - 2 - len(tail))}{tail}"


@pytest.mark.parametrize(
    ("size", "properties", "delay", "after"),
    [
        (168, "", 0, "set aside"),  # over 167: no lock suffix fits
        (167, "", 0, "metadata-full"),  # a lock fits, `.....bx_dcI=1` (13) does not
        (155, "", 0, "metadata-full"),
        (154, "", 0, "redelivered"),
        (158, "kS=v", 0, "redelivered"),  # `&bx_dcI=1`: 9 bytes
        (159, "kS=v", 0, "metadata-full"),
        (133, "", 60, "redelivered"),  # a delay's `&bx_nbL=<13 digits>`: 21 more
        (134, "", 60, "not delayed"),  # room for the count, not the delay: ready at once
        (137, "kS=v", 60, "redelivered"),
        (138, "kS=v", 60, "not delayed"),
        (154, "", 60, "not delayed"),
        (155, "", 60, "metadata-full"),  # not even the count
    ],
)
def test_a_script_s_long_name_is_delivered_up_to_167_bytes_and_again_where_its_count_fits(
    manual_box: boxmq.Box,
    root: Path,
    clock: ManualClock,
    size: int,
    properties: str,
    delay: float,
    after: str,
) -> None:
    """docs/file-format.md, the 255-byte limit: the edges it gives, with real files."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"warm-up")  # creates the folders
    warm = jobs.get()
    assert warm is not None
    warm.ack()
    name = _script_name(size, properties)
    assert len(name.encode()) == size
    send(root, name, "long")
    message = jobs.get(HOLDER)
    if after == "set aside":
        assert message is None
        assert os.listdir(root / "jobs" / "error") == [name]
        return
    assert message is not None
    assert message.body == b"long"
    (locked,) = os.listdir(root / "jobs" / "processing")
    assert f"@{HOLDER}@" in locked
    assert len(locked.encode()) <= 255
    if after == "metadata-full":
        assert message.unlock(delay=delay) == "metadata-full"
        (dead,) = os.listdir(root / "jobs" / "error")
        assert dead.startswith(name)  # its own name, bx_whyS only where it fits
        assert os.listdir(root / "jobs" / "target") == []
        return
    assert message.unlock(delay=delay) is None
    (back,) = os.listdir(root / "jobs" / "target")
    assert len(back.encode()) <= 167
    assert "bx_dcI=1" in back
    assert ("bx_nbL=" in back) is (after == "redelivered" and delay > 0)
    if after == "redelivered":
        clock.advance(delay + 1)
    again = jobs.get(HOLDER)
    assert again is not None
    assert (again.body, again.delivery_count) == (b"long", 2)
    assert os.listdir(root / "jobs" / "error") == []


# docs/file-format.md's move of a lock back by hand, as the page writes it.
MOVE_BACK = next(
    line.strip()
    for line in (Path(__file__).parents[2] / "docs" / "file-format.md").read_text().splitlines()
    if line.strip().startswith('mv -n "data/jobs/processing/$f"')
)


def _move_back(root: Path, folder: str, name: str, *, cut: bool = False) -> None:
    """The page's move of `folder`/`name` back to target/ by a script (its lock suffix cut
    if `cut`, else under the same name)."""
    assert MOVE_BACK == 'mv -n "data/jobs/processing/$f" "data/jobs/target/${f%@*@*@*}" || :'
    command = MOVE_BACK.replace("/processing/", f"/{folder}/")
    if not cut:
        command = command.replace("${f%@*@*@*}", "$f")
    sh(f"f={shlex.quote(name)}; {command}", root.parent)
    assert name not in os.listdir(root / "jobs" / folder)


def test_a_dead_letter_moved_back_by_hand_keeps_its_count_and_metadata(root: Path) -> None:
    """docs/file-format.md, moving a message back by hand: from error/ under its own name, its
    count goes on (a max-deliveries one gets one delivery more), where a requeue starts it
    again."""
    with boxmq.open(root, fsync="never", max_deliveries=2) as box:
        jobs = box.queue("jobs")
        jobs.put(b"poison", priority=6, properties={"k": "v"})
        for _ in range(2):
            message = jobs.get("w")
            assert message is not None
            unlocked = message.unlock()
        assert unlocked == "max-deliveries"
        (dead,) = os.listdir(root / "jobs" / "error")
        _move_back(root, "error", dead)
        again = jobs.get("w")
        assert again is not None
        assert (again.delivery_count, again.priority, again.properties) == (3, 6, {"k": "v"})
        assert again.unlock() == "max-deliveries"  # at once: its count went on
        assert jobs.requeue() == 1
        fresh = jobs.get("w")
        assert fresh is not None
        assert fresh.delivery_count == 1  # a requeue starts it again
        fresh.ack()


def test_a_lock_moved_back_by_hand_needs_its_suffix_cut(
    manual_box: boxmq.Box, root: Path, clock: ManualClock
) -> None:
    """From processing/: cut with ${f%@*@*@*}, the message comes back as it was (the delivery
    not counted) and its old holder's settle is refused; moved with its suffix, the suffix is
    read as part of the name's last field: a string property's value, or else a name not in
    the encoding, the whole of it its id and its metadata lost."""
    jobs = manual_box.queue("jobs")
    jobs.put(b"cut", priority=6, properties={"k": "v"})
    jobs.put(b"string", priority=5, properties={"k": "w"})
    jobs.put(b"bytes", priority=3)
    held = [jobs.get("worker-1", lock_timeout=1) for _ in range(3)]
    assert [m.body for m in held if m is not None] == [b"cut", b"string", b"bytes"]
    clock.advance(2)  # the holder is gone: its deadline passed, no sweep has run
    locked = {
        m.body: next(n for n in os.listdir(root / "jobs" / "processing") if m.id in n)
        for m in held
        if m is not None
    }
    _move_back(root, "processing", locked[b"cut"], cut=True)
    _move_back(root, "processing", locked[b"string"])
    _move_back(root, "processing", locked[b"bytes"])
    back = [jobs.get("worker-2") for _ in range(3)]
    got = {m.body: m for m in back if m is not None}
    cut = got[b"cut"]
    assert (cut.id, cut.delivery_count, cut.priority, cut.properties) == (
        held[0].id if held[0] is not None else None,
        1,
        6,
        {"k": "v"},
    )
    suffix = locked[b"string"].partition("@")[2]
    assert (got[b"string"].priority, got[b"string"].properties) == (5, {"k": f"w@{suffix}"})
    assert (got[b"bytes"].id, got[b"bytes"].priority) == (locked[b"bytes"], 4)  # the default
    assert held[0] is not None
    with pytest.raises(boxmq.BoxMQError):
        held[0].ack()


def test_a_script_s_name_may_end_in_what_reads_as_a_lock_suffix_and_keeps_its_id(
    box: boxmq.Box, root: Path
) -> None:
    """docs/file-format.md (moving a message back by hand) says why boxmq does not take a lock
    suffix moved by hand off a name in target/: any unique name may be sent, and the page's
    `backup@2024@12@31`, which ends in what reads as a valid suffix, is delivered under its
    whole name, as its id, at each delivery (a redelivery writes its `@` as `%40`)."""
    name = "backup@2024@12@31"
    page = (Path(__file__).parents[2] / "docs" / "file-format.md").read_text()
    assert f"`{name}` ends in what reads as a lock suffix" in page
    assert split_lock(name)[1] is not None  # a valid suffix, as the page says
    jobs = box.queue("jobs")
    sh(f"echo x > jobs/working/b && mv jobs/working/b 'jobs/target/{name}'", root)
    first = jobs.get("w")
    assert first is not None
    assert (first.id, first.priority, first.delivery_count) == (name, 4, 1)
    first.unlock()
    [back] = os.listdir(root / "jobs" / "target")
    assert "@" not in back  # written again, encoded
    again = jobs.get("w")
    assert again is not None
    assert (again.id, again.delivery_count) == (name, 2)
    again.ack()


def unlocked_at_once_for_lack_of_room(
    message: boxmq.Message, root: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Unlock `message` (sent as `name` to jobs) with a delay its name has no room for: it is
    said at INFO, and it is back in target/ ready, its count written, none in error/."""
    with caplog.at_level(logging.INFO, "boxmq"):
        assert message.unlock(delay=60) is None
    assert "no room" in caplog.text, caplog.text
    assert os.listdir(root / "jobs" / "error") == []
    assert os.listdir(root / "jobs" / "target") == [f"{name}.....bx_dcI=1"]


def test_a_delayed_unlock_whose_name_has_no_room_for_the_delay_releases_it_at_once(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A delay is a hint: a name with room for the delivery count but not for the delay's
    bx_nbL went to error/ as metadata-full; it is released ready at once, its count kept."""
    name = f"4.{'L' * 140}.T"  # 144 bytes: the count fits (MAX_NAME 167), the count and delay not
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        send(root, name, "long")
        with jobs.consumer("w", lock_timeout=5) as consumer:
            message = consumer.receive(timeout=5)
            assert message is not None
            unlocked_at_once_for_lack_of_room(message, root, name, caplog)
            again = consumer.receive(timeout=1)
            assert again is not None
            assert again.body == b"long"
            assert again.delivery_count == 2
            again.ack()


def test_a_get_s_delayed_unlock_whose_name_has_no_room_for_the_delay_releases_it_at_once(
    box: boxmq.Box, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same through `get` (`boxmq get`'s settler, the lock on disk)."""
    name = f"4.{'L' * 140}.T"
    jobs = box.queue("jobs")
    send(root, name, "long")
    message = jobs.get()
    assert message is not None
    unlocked_at_once_for_lack_of_room(message, root, name, caplog)
    again = jobs.get()
    assert again is not None
    assert again.delivery_count == 2
