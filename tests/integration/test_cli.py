"""The `boxmq` command, run as a user runs it: a separate process, text in and out."""

from __future__ import annotations

import base64
import datetime
import errno
import faulthandler
import functools
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harness.output import Drained, read_line, read_until
from tests.diskfull import small_disk
from tests.retained import retained_folder

import boxmq
from boxmq import cli, cli_message
from boxmq.cli_args import DURATION_OPTIONS, joined_negative_durations
from boxmq.client.housekeeping import FULL_SWEEP_EVERY
from boxmq.clock import ManualClock
from boxmq.core.topics import sys_unserved
from boxmq.model import ConsumerId
from boxmq.mqtt.session_record import SessionRecord, write_record
from boxmq.mqtt.stored import consumer_name
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import State
from boxmq.store.names import Lock, decode, escape_segment, locked_name, split_lock
from boxmq.store.process import process_token


def boxmq_cli(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        env=os.environ.copy(),
    )


def ok(root: Path, *args: str, stdin: str | None = None) -> str:
    done = boxmq_cli(root, *args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_put_get_ack_round_trip(root: Path) -> None:
    message_id = ok(
        root, "put", "jobs", "hello", "--priority", "7", "--property", "tenant=acme"
    ).strip()
    [name] = os.listdir(root / "jobs" / "target")
    assert decode(name).message_id == message_id
    assert decode(name).priority == 7
    got = json.loads(ok(root, "--json", "get", "jobs", "--lock", "30s"))
    assert (got["id"], got["body"], got["properties"]) == (message_id, "hello", {"tenant": "acme"})
    ok(root, "ack", "jobs", message_id)
    listing = json.loads(ok(root, "--json", "ls"))
    assert listing == {
        "queues": [{"queue": "jobs", "ready": 0, "locked": 0, "done": 1, "dead": 0, "expired": 0}],
        "subscriptions": [],
    }


def test_put_into_a_queue_whose_target_is_moved_aside_is_refused_and_makes_none(
    root: Path,
) -> None:
    # `put` made a new target/ in operations.md's `mv target target.old && mkdir target`:
    # the message went into it, and the operator's `mkdir target` failed (File exists).
    ok(root, "put", "jobs", "one")
    folder = root / "jobs"
    (folder / "target").rename(folder / "target.old")
    before = sorted(folder.rglob("*"))
    done = boxmq_cli(root, "put", "jobs", "two")
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    said = done.stderr.strip()
    assert said.startswith("boxmq put: queue 'jobs' has no target/"), said
    assert "nothing was put; put again once it is back" in said, said
    assert sorted(folder.rglob("*")) == before  # no target/, no body left in working/
    (folder / "target").mkdir()
    ok(root, "put", "jobs", "two")
    assert json.loads(ok(root, "--json", "get", "jobs"))["body"] == "two"  # "one" is aside
    ok(root, "put", "fresh", "three")  # a queue with no folder is made, as ever
    assert len(os.listdir(root / "fresh" / "target")) == 1


def test_put_into_a_queue_whose_making_was_cut_short_finishes_making_it(root: Path) -> None:
    # A put killed between Dropbox's working/ and its target/ leaves working/ alone: `put`
    # took that for a target/ moved aside and refused it for ever, where the assured intake
    # finishes making it. Refused still: a folder holding more, as a queue made whole does.
    (root / "half" / "working").mkdir(parents=True)
    ok(root, "put", "half", "one")
    assert len(os.listdir(root / "half" / "target")) == 1
    assert json.loads(ok(root, "--json", "get", "half"))["body"] == "one"
    (root / "aside" / "working").mkdir(parents=True)
    (root / "aside" / "processing").mkdir()
    done = boxmq_cli(root, "put", "aside", "two")
    assert done.returncode == 1, done
    assert done.stderr.strip().startswith("boxmq put: queue 'aside' has no target/"), done.stderr
    assert not (root / "aside" / "target").exists()


def test_put_into_a_queue_whose_target_is_a_file_says_the_queue_is_broken(root: Path) -> None:
    # `put` said "target: File exists: it is a file, not a folder (or choose another --data
    # folder)", advice for a root in the way, where `get` said the queue is broken and how to
    # mend it.
    ok(root, "put", "jobs", "one")
    folder = root / "jobs"
    (folder / "target").rename(folder / "target.old")
    (folder / "target").write_bytes(b"")
    before = sorted(folder.rglob("*"))
    done = boxmq_cli(root, "put", "jobs", "two")
    assert done.returncode == 1, done
    said = done.stderr.strip()
    assert said.startswith("boxmq put: queue 'jobs' is broken: "), said
    assert "is a file, not a folder" in said, said
    assert "boxmq delete jobs" in said, said
    assert sorted(folder.rglob("*")) == before  # nothing put, nothing made


def test_version_prints_the_version_and_makes_no_root(root: Path) -> None:
    """`boxmq --version` said "the following arguments are required: COMMAND", exit 2."""
    done = boxmq_cli(root, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"boxmq {boxmq.__version__}\n", "")
    assert not root.exists()


def test_human_output_of_get_and_ls(root: Path) -> None:
    ok(root, "put", "jobs", "-", stdin="from stdin")
    text = ok(root, "get", "jobs")
    assert "locked-by" in text
    assert text.rstrip().endswith("from stdin")
    table = ok(root, "ls").splitlines()
    assert table[0].split() == ["QUEUE", "READY", "LOCKED", "DONE", "DEAD", "EXPIRED"]
    assert table[1].split() == ["jobs", "0", "1", "0", "0", "0"]


def test_unlock_reject_requeue_peek_purge(root: Path) -> None:
    message_id = ok(root, "put", "jobs", "work").strip()
    assert json.loads(ok(root, "--json", "get", "jobs"))["id"] == message_id
    ok(root, "unlock", "jobs", message_id)
    again = json.loads(ok(root, "--json", "get", "jobs", "--consumer", "other"))
    assert again["delivery"] == 2
    ok(root, "reject", "jobs", message_id, "--consumer", "other")
    assert "1 message(s) from error/" in ok(root, "requeue", "jobs", "--from", "error")
    assert json.loads(ok(root, "--json", "peek", "jobs"))[0]["id"] == message_id
    assert json.loads(ok(root, "--json", "purge", "jobs")) == {"queue": "jobs", "purged": 1}


def test_peek_of_error_names_the_consumer_that_held_the_message_last(root: Path) -> None:
    # error/ named the holder of the delivery before the last, a rejects b's message: "a"
    message_id = ok(root, "put", "jobs", "work").strip()
    ok(root, "get", "jobs", "--consumer", "a")
    ok(root, "unlock", "jobs", message_id, "--consumer", "a")
    # in target/ it is the consumer passed over for a while (docs/file-format.md): not shown
    [row] = json.loads(ok(root, "--json", "peek", "jobs"))
    assert "last-holder" not in row
    ok(root, "get", "jobs", "--consumer", "b")
    ok(root, "reject", "jobs", message_id, "--consumer", "b")
    [row] = json.loads(ok(root, "--json", "peek", "jobs", "--state", "error"))
    assert (row["dead"], row["last-holder"]) == ("rejected", "b")
    header, line = ok(root, "peek", "jobs", "--state", "error").splitlines()
    assert header.split()[3:] == ["DELIVERIES", "DEAD", "LAST-HOLDER", "PROPERTIES"]
    assert line.split()[3:] == ["2", "rejected", "b"]


def test_delete_deletes_a_queue_and_refuses_one_whose_messages_are_locked(root: Path) -> None:
    ok(root, "put", "jobs", "one")
    ok(root, "put", "jobs", "two")
    ok(root, "get", "jobs")
    refused = boxmq_cli(root, "delete", "jobs")
    assert refused.returncode == 1
    assert "jobs: 1 message(s) locked: 1 by `boxmq get`: settle them by id" in refused.stderr
    assert (root / "jobs" / "target").is_dir()
    assert json.loads(ok(root, "--json", "delete", "jobs", "--force")) == {
        "queue": "jobs",
        "deleted": 2,
        "ready": 1,
        "locked": 1,
        **dict.fromkeys(("done", "dead", "expired", "uncommitted"), 0),
    }
    assert not (root / "jobs").exists()
    missing = boxmq_cli(root, "delete", "jobs")
    assert missing.returncode == 1
    assert "no queue 'jobs'" in missing.stderr


def test_delete_refused_for_locks_tells_running_processes_from_dead_ones(root: Path) -> None:
    """Only a running consumer is to be stopped: the locks of one that died are released by
    the next sweep of `boxmq serve`, and one bound to no process ends when settled."""
    ended = subprocess.Popen(["sleep", "60"])
    dead = process_token(ended.pid)
    ended.kill()
    ended.wait()
    with boxmq.open(root) as box:
        box.queue("jobs").put_many([b"m0", b"m1", b"m2", b"m3"])
    deadline = int(time.time() + 600) * 1000
    holders = [process_token(), dead, dead, ""]
    for name, token in zip(sorted(os.listdir(root / "jobs" / "target")), holders, strict=True):
        locked = locked_name(name, Lock(ConsumerId("worker"), deadline, token))
        os.rename(root / "jobs" / "target" / name, root / "jobs" / "processing" / locked)
    refused = boxmq_cli(root, "delete", "jobs")
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(
        f"jobs: 4 message(s) locked: 1 by running process(es) {os.getpid()}: stop them (or "
        f"settle the messages); 2 by process(es) {ended.pid} that ended: the next sweep of "
        "`boxmq serve` sends them back (or wait for their lock to end); 1 bound to no "
        "process of this machine: settle them by id, or wait for their lock to end; or "
        "--force deletes those with the rest"
    )
    assert len(os.listdir(root / "jobs" / "processing")) == 4


def test_delete_refused_for_a_claim_with_no_lock_says_so(root: Path) -> None:
    """A file a script (or DropboxMQ) moved into processing/ carries no lock: it is counted
    with the locks, in the same one look at the folder, and said apart."""
    ok(root, "put", "jobs", "one")
    [name] = os.listdir(root / "jobs" / "target")
    os.rename(root / "jobs" / "target" / name, root / "jobs" / "processing" / name)
    refused = boxmq_cli(root, "delete", "jobs")
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(
        "jobs: 1 message(s) locked: 1 claimed with no lock in their name (a script's or "
        "DropboxMQ's): stop what claimed them; or --force deletes those with the rest"
    )
    assert os.listdir(root / "jobs" / "processing") == [name]


def test_get_lists_properties_as_peek_does(root: Path) -> None:
    """NAME=VALUE,... (not a Python dict), as peek lists them; for bytes that are not UTF-8
    see test_a_property_in_bytes_that_are_not_utf8_is_shown_sanely."""

    def shown_properties(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("properties "))

    ok(root, "put", "jobs", "a", "--property", "tenant=acme", "--property", "n=2")
    assert shown_properties(ok(root, "get", "jobs")).split() == ["properties", "tenant=acme,n=2"]


def test_get_on_an_empty_queue_says_so_with_status_3(root: Path) -> None:
    ok(root, "put", "jobs", "x")
    ok(root, "get", "jobs")
    done = boxmq_cli(root, "get", "jobs")
    assert done.returncode == 3
    assert "no message is ready" in done.stderr


def test_get_says_which_ready_messages_it_found_expired(root: Path) -> None:
    """`ls` counts a message whose expiration passed in target/ READY until a sweep or a get
    moves it to expired/; `get` moved it without a word, and said "no message is ready": the
    user saw one ready, then none, with nothing said of where it went."""
    ok(root, "put", "jobs", "seed")
    ok(root, "get", "jobs")
    _dropped(root, "jobs", "4.old.T.1000")  # a script's, expired in 1970
    assert json.loads(ok(root, "--json", "ls"))["queues"][0]["ready"] == 1
    done = boxmq_cli(root, "get", "jobs")
    assert (done.returncode, done.stdout) == (3, "")
    said = done.stderr.splitlines()
    assert said[0].endswith(
        " INFO boxmq: jobs: 1 message(s) expired before a consumer took them: moved to expired/"
    )
    assert said[1:] == ["boxmq get: no message is ready in 'jobs'"]
    assert os.listdir(root / "jobs" / "expired") == ["4.old.T.1000"]


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (("get", "nope"), 1, "no queue 'nope'"),
        (("get", "jobs", "--lock", "3x"), 2, "bad duration '3x'"),
        (("put", "jobs", "x", "--property", "novalue"), 2, "use NAME=VALUE"),
        (("put", "jobs", "x", "--property", "n:int=abc"), 2, "bad int value"),
        (("put", "jobs", "x", "-p", "d:double=1e309"), 2, "1e309 does not fit a double"),
        (("ack", "jobs", "no-such-id"), 1, "no-such-id"),
        (("put", "jobs", "x", "-p", "a=1", "-p", "a=2"), 2, "property 'a' is given twice"),
        (("unlock", "jobs", "x", "--delay", "-1"), 2, "bad duration"),
        (("put", "jobs", "x", "-p", "bx_x=1"), 2, "keeps for its own properties: give it another"),
    ],
)
def test_errors_are_one_clear_line_and_no_traceback(
    root: Path, args: tuple[str, ...], status: int, says: str
) -> None:
    ok(root, "put", "jobs", "seed")
    done = boxmq_cli(root, *args)
    assert done.returncode == status
    assert says in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("put", "jobs", "x", "-p", "n:int=x"),
        ("publish", "t", "x", "-p", "mqtt.payload-format=2"),
        ("put", "jobs", "x", "-p", "a=1", "-p", "a=2"),
        ("publish", "t", "x", "-p", "bx_dc:int=1"),  # was exit 1, "is in boxmq's bx_*", root made
        ("put", "jobs", "x", "--priority", "2147483648"),  # was exit 1, after the root was made
    ],
    ids=["bad-int", "bad-mqtt-value", "twice", "boxmqs-own", "priority-over-int32"],
)
def test_a_bad_property_is_a_usage_error_before_anything_is_done(
    root: Path, args: tuple[str, ...]
) -> None:
    """A -p value the user typed that is no property is a usage error (2), as a bad
    --priority is, said before the root is made or the body read: it was 1, after both."""
    done = boxmq_cli(root, *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert f"usage: boxmq {args[0]}" in done.stderr
    assert not root.exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("ack", "jobs", "a\nb"), "boxmq ack: a\\nb: no such message"),
        (
            ("unsubscribe", "t/#", "--name", "k\n"),
            "boxmq unsubscribe: no subscription of 'k\\n' to 't/#' under ",
        ),
        (("put", "jobs", "--file", "x\ny"), "boxmq put: cannot read x\\ny: No such file"),
    ],
)
def test_an_error_that_repeats_a_newline_given_stays_one_line(
    root: Path, args: tuple[str, ...], line: str
) -> None:
    """An id, a name or a file name given with a newline (a script's `$(...)` that kept one)
    is shown escaped, as `get` shows its metadata: the error was two lines, the second
    starting with what followed the newline."""
    ok(root, "put", "jobs", "seed")
    done = boxmq_cli(root, *args)
    assert done.returncode == 1
    [said] = done.stderr.splitlines()
    assert said.startswith(line), said


_NEGATIVE_DURATIONS = [
    ("get", "jobs", "--lock"),
    ("put", "jobs", "x", "--expires-in"),
    ("publish", "t", "x", "--expires-in"),
    ("unlock", "jobs", "x", "--delay"),
    ("extend", "jobs", "x", "--by"),
    ("subscribe", "t/#", "--idle"),
    ("serve", "--sweep-interval"),
    ("serve", "--sys-interval"),
    ("serve", "--xmpp-lock-timeout"),
]


@pytest.mark.parametrize("args", _NEGATIVE_DURATIONS, ids=lambda args: args[-1])
def test_a_negative_duration_after_a_space_says_what_is_wrong_with_it(
    root: Path, args: tuple[str, ...]
) -> None:
    """`--lock -5s` is read as `--lock=-5s`, not as an option -5s and a missing value."""
    ok(root, "put", "jobs", "seed")
    done = boxmq_cli(root, *args, "-5s")
    assert done.returncode == 2
    # It said "use a number of seconds in digits 0-9", which '-5s' is but for its sign.
    assert f"argument {args[-1]}: bad duration '-5s': it is negative (drop the '-')" in (
        done.stderr
    )


def test_subscribe_idle_0_takes_what_is_there_and_stops(root: Path) -> None:
    """As docs/cli.md says: every message the subscription holds ready is printed and acked,
    then the run ends at once, exit 0, where a longer --idle waits that long for more."""
    ok(root, "subscribe", "news/#", "--name", "reader", "--keep", "--idle", "0")
    for number in range(30):
        ok(root, "publish", f"news/{number}", f"body {number}")
    # Run to its end: one that waited for more would never end (ok's timeout fails it).
    printed = ok(root, "subscribe", "news/#", "--name", "reader", "--keep", "--idle", "0")
    assert sorted(printed.splitlines()) == sorted(f"news/{n} body {n}" for n in range(30))
    assert ok(root, "subscribe", "news/#", "--name", "reader", "--idle", "0") == ""


@pytest.mark.parametrize("filter", ["$SYS/#", "$SYS/broker/clients/connected", "$share/g/$SYS/#"])
def test_subscribe_to_sys_topics_says_they_come_from_the_mqtt_server_only(
    root: Path, filter: str
) -> None:
    """mqtt.md's $SYS figures, asked of `boxmq subscribe '$SYS/#'`, waited in silence: each
    `boxmq serve` answers them from memory to its MQTT clients, never through the root (found
    on a new user's tour). It still subscribes (an MQTT client an ACL lets publish there
    reaches it), and says on stderr where the figures are."""
    done = boxmq_cli(root, "subscribe", filter, "--idle", "0")
    assert done.returncode == 0, done.stderr
    said = f"boxmq subscribe: warning: {filter!r} is {sys_unserved('this')}\n"
    assert done.stderr == said, done.stderr  # the API's words (Box.subscribe's warning)
    assert "WARNING" not in done.stderr, done.stderr  # said once: not the API's log line too
    quiet = boxmq_cli(root, "subscribe", "sys/#", "--idle", "0")
    assert quiet.stderr == "", quiet.stderr


def test_subscribe_idle_0_of_a_share_group_member_drains_what_it_can_take_and_stops(
    root: Path,
) -> None:
    """A member's `--idle 0` prints and acks what the group holds ready, then ends, exit 0:
    what another member holds locked is not for it, and the run does not wait for that lock
    to end. `--idle=-0`, zero, was refused as negative; it reads as `--idle 0`."""
    group = "$share/g/jobs/#"
    ok(root, "subscribe", group, "--name", "w1", "--keep", "--idle", "0")
    sent = {f"jobs/{n} body {n}" for n in range(10)}
    with boxmq.open(root, fsync="never") as box, box.subscribe(group, "w2") as member:
        for n in range(10):
            box.publish(f"jobs/{n}", f"body {n}".encode())
        held = member.receive(timeout=5)
        assert held is not None
        started = time.monotonic()
        printed = ok(root, "subscribe", group, "--name", "w1", "--keep", "--idle=-0")
        assert time.monotonic() - started < 10  # not held up by w2's lock (30 s)
        locked = json.loads(ok(root, "--json", "peek", group, "--state", "processing"))
        assert {row["locked-by"] for row in locked} == {"w2"}  # only w2's, none of w1's
        kept = {f"{row['topic']} body {row['topic'][5:]}" for row in locked}
        assert f"{held.topic} {held.body.decode()}" in kept
        assert sorted(printed.splitlines()) == sorted(sent - kept)  # each once, the rest all
        assert ok(root, "subscribe", group, "--name", "w1", "--keep", "--idle", "0") == ""
        held.ack()


def test_every_duration_option_is_read_whole_when_negative() -> None:
    assert {args[-1] for args in _NEGATIVE_DURATIONS} == DURATION_OPTIONS


def test_only_a_duration_option_s_value_is_joined_and_nothing_after_double_dash() -> None:
    assert joined_negative_durations(["get", "q", "--lock", "-5s", "--consumer", "-x"]) == [
        *("get", "q", "--lock=-5s", "--consumer", "-x"),
    ]
    assert joined_negative_durations(["put", "q", "--", "--lock", "-5s"]) == [
        *("put", "q", "--", "--lock", "-5s"),
    ]


def test_an_unlock_that_sends_the_message_to_error_says_so(root: Path) -> None:
    # A name dropped by a script, long enough that one more delivery count does not fit.
    name = "x." * 83
    (root / "h" / "working").mkdir(parents=True)
    (root / "h" / "target").mkdir()
    (root / "h" / "working" / "t").write_bytes(b"b")
    os.rename(root / "h" / "working" / "t", root / "h" / "target" / name)
    message_id = json.loads(ok(root, "--json", "get", "h"))["id"]
    done = boxmq_cli(root, "unlock", "h", message_id)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == f"unlock: {message_id} went to error/ (metadata-full), not back to target/\n"
    )
    assert "to error/ (metadata-full)" in done.stderr  # the log says it too
    assert os.listdir(root / "h" / "error") == [name]  # kept as it was: never lost
    assert os.listdir(root / "h" / "target") == []


def test_the_unlock_that_reaches_max_deliveries_says_where_the_message_went(root: Path) -> None:
    ok(root, "put", "jobs", "poison")
    said = []
    for _ in range(5):  # max_deliveries is 5
        message_id = json.loads(ok(root, "--json", "get", "jobs"))["id"]
        said.append(ok(root, "unlock", "jobs", message_id))
    assert said[:4] == [f"unlock: {message_id}\n"] * 4
    assert said[4] == f"unlock: {message_id} went to error/ (max-deliveries), not back to target/\n"


def _unlocked_until_dead(root: Path, *limit: str, rounds: int) -> list[str]:
    """What `boxmq unlock` says of one message got and unlocked `rounds` times, each command
    given `limit`'s options."""
    ok(root, "put", "jobs", "poison")
    said = []
    for _ in range(rounds):
        got = boxmq_cli(root, *limit, "--json", "get", "jobs")
        if got.returncode == 3:  # nothing ready: it went to error/
            break
        message_id = json.loads(got.stdout)["id"]
        said.append(ok(root, *limit, "unlock", "jobs", message_id).split(" ", 2)[-1])
    return said


def test_the_delivery_limit_is_the_one_the_applications_open_the_root_with(root: Path) -> None:
    """The CLI opened the root with the default limit (5) whatever the applications use, so a
    `get` and `unlock` on a queue of another limit dead-lettered at its own 5th: --max-deliveries
    gives it theirs, before or after the command, 0 for none."""
    said = _unlocked_until_dead(root, "--max-deliveries", "2", rounds=3)
    assert said[1].startswith("went to error/ (max-deliveries)"), said
    assert len(said) == 2
    assert os.listdir(root / "jobs" / "error")
    after = boxmq_cli(root, "get", "jobs", "--max-deliveries", "0")  # after the command too
    assert after.returncode == 3, after.stderr  # nothing to get, the option taken
    shutil.rmtree(root / "jobs")
    said = _unlocked_until_dead(root, "--max-deliveries", "0", rounds=7)
    assert len(said) == 7
    assert not any("error/" in line for line in said), said
    assert not os.listdir(root / "jobs" / "error")


@pytest.mark.parametrize("typed", ["-1", "x", "2.5", "", "1_0"])
def test_a_bad_delivery_limit_is_a_usage_error_saying_what_to_give(root: Path, typed: str) -> None:
    ok(root, "put", "jobs", "kept")
    done = boxmq_cli(root, "--max-deliveries", typed, "get", "jobs")
    assert done.returncode == 2, done.stderr
    assert "argument --max-deliveries: bad number" in done.stderr
    assert "0 for no limit" in done.stderr
    assert len(os.listdir(root / "jobs" / "target")) == 1  # nothing got, nothing locked


def _dropped(root: Path, queue: str, name: str, body: bytes = b"b") -> None:
    """A message file a script drops into `queue`'s target/, written aside then renamed."""
    (root / queue / "working").mkdir(parents=True, exist_ok=True)
    (root / queue / "target").mkdir(exist_ok=True)
    (root / queue / "working" / "t").write_bytes(body)
    os.rename(root / queue / "working" / "t", root / queue / "target" / name)


@pytest.mark.parametrize("expiration", ["253402300800000", "9223372036854775807"])
def test_get_shows_an_expiration_past_year_9999_as_epoch_ms(root: Path, expiration: str) -> None:
    """DropboxMQ's expiration is any long (a script may write Long.MAX_VALUE): one that no date
    can show is printed as the name gives it, never a traceback after the message is locked."""
    _dropped(root, "far", f"4.far.T.{expiration}", b"far body")
    shown = f"{expiration} ms after 1970-01-01T00:00:00+00:00"
    text = ok(root, "get", "far", "--consumer", "a")
    assert f"expires         {shown}\n" in text
    assert text.endswith("\n\nfar body")
    ok(root, "unlock", "far", "far", "--consumer", "a")
    got = json.loads(ok(root, "--json", "get", "far", "--consumer", "b"))
    assert (got["expires"], got["body"]) == (shown, "far body")
    assert json.loads(ok(root, "--json", "peek", "far", "--state", "processing"))[0]["id"] == "far"


@pytest.mark.parametrize(
    "given",
    [
        ["-p", "note=line1\n\nline2"],
        ["--correlation-id", "c\n\nX"],
        ["--reply-to", "r\n\nY"],
        ["--type", "t\r\n\r\nZ"],
    ],
    ids=["property", "correlation-id", "reply-to", "type"],
)
def test_get_escapes_a_newline_in_the_header_so_the_first_blank_line_starts_the_body(
    root: Path, given: list[str]
) -> None:
    ok(root, "put", "q", "REAL BODY", *given)
    header, body = ok(root, "get", "q").split("\n\n", 1)
    assert body == "REAL BODY"
    assert "\\n" in header  # shown escaped, as peek shows it


def test_get_escapes_a_newline_in_an_id_a_script_wrote(root: Path) -> None:
    _dropped(root, "q", "4.id%0A%0Aline.T", b"REAL BODY")
    header, body = ok(root, "get", "q").split("\n\n", 1)
    assert (header.splitlines()[0], body) == ("id              id\\n\\nline", "REAL BODY")


def test_get_prints_no_line_for_what_is_unset(root: Path) -> None:
    ok(root, "put", "jobs", "plain")
    head, _, body = ok(root, "get", "jobs").partition("\n\n")
    assert body == "plain"
    assert "None" not in head
    assert [line.split()[0] for line in head.splitlines()] == [
        "id",
        "queue",
        "priority",
        "delivery",
        "locked-by",
        "lock-until",
    ]


def test_a_table_keeps_one_line_per_row_whatever_a_name_holds(root: Path) -> None:
    ok(root, "put", "a\nb", "x")
    lines = ok(root, "ls").splitlines()
    assert len(lines) == 2
    assert lines[1].startswith("a\\nb ")


def test_what_a_command_says_it_did_keeps_to_one_line_whatever_a_name_holds(root: Path) -> None:
    """`ls` and `get` escape a newline in a name, as errors do; the line saying what was done
    (requeue, purge, delete, unsubscribe, peek of an empty folder, subscribe's note on a kept
    subscription) printed it as it was, one line in two for a script or a log reader. A name
    ending in one is quoted besides, as `ls` shows it (a blank at its end)."""
    ok(root, "put", "a\nb", "x")
    said = [
        ok(root, "requeue", "a\nb"),
        ok(root, "purge", "a\nb"),
        ok(root, "peek", "a\nb"),
        ok(root, "delete", "a\nb"),
        ok(root, "subscribe", "t\n", "--name", "k", "--keep", "--idle", "0"),
    ]
    note = boxmq_cli(root, "subscribe", "t\n", "--name", "k", "--idle", "0").stderr
    said += [note, ok(root, "unsubscribe", "t\n", "--name", "k"), ok(root, "retained", "t\n")]
    assert said == [
        "a\\nb: 0 message(s) from error/ back to target/\n",
        "a\\nb: 1 message(s) deleted from target/\n",
        "a\\nb: no messages in target/\n",
        "a\\nb: deleted, with its 0 message(s)\n",
        "",
        "boxmq subscribe: reading the kept subscription 't\\n' of k; it stays after this run "
        "(`boxmq unsubscribe 't\\n' --name k` ends it)\n",
        "unsubscribed: 't\\n' k\n",
        f"no retained messages match 't\\n' under {root}\n",
    ]


def test_ack_of_someone_else_s_lock_is_a_conflict(root: Path) -> None:
    ok(root, "put", "jobs", "x")
    message_id = json.loads(ok(root, "--json", "get", "jobs", "--consumer", "alice"))["id"]
    done = boxmq_cli(root, "ack", "jobs", message_id, "--consumer", "bob")
    assert done.returncode == 1
    assert "locked by" in done.stderr
    # the line says what to fix: who holds it is in `peek`, and --consumer settles as them
    assert "peek jobs --state processing" in done.stderr
    assert "--consumer" in done.stderr
    assert "alice" in ok(root, "peek", "jobs", "--state", "processing")
    ok(root, "ack", "jobs", message_id, "--consumer", "alice")


def test_a_settle_of_a_message_nobody_holds_says_get_locks_it(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = ["--data", str(root), "--fsync", "never"]
    assert cli.main([*data, "put", "night jobs", "x"]) == 0
    message_id = capsys.readouterr().out.strip()
    for verb in ("ack", "unlock", "reject", "extend"):
        assert cli.main([*data, verb, "night jobs", message_id]) == 1
        assert capsys.readouterr().err == (
            f"boxmq {verb}: {message_id}: 'cli' did not receive this message, which no "
            "consumer holds (`boxmq get 'night jobs'` locks the next ready message and "
            "prints its id)\n"
        )
    assert json.loads(ok(root, "--json", "ls"))["queues"][0]["ready"] == 1  # left as it was


def test_a_settle_of_a_message_a_dropboxmq_consumer_claimed_says_who_has_it(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DropboxMQ consumer (a script) claims by moving the file into processing/ under its
    own name. `ls` counts it LOCKED and `get` cannot take it, so the refusal said what is
    false, "which no consumer holds", and sent the user to a `boxmq get` that finds nothing."""
    data = ["--data", str(root), "--fsync", "never"]
    assert cli.main([*data, "put", "night jobs", "x"]) == 0
    message_id = capsys.readouterr().out.strip()
    (name,) = os.listdir(root / "night%20jobs" / "target")
    subprocess.run(
        ["mv", f"night%20jobs/target/{name}", f"night%20jobs/processing/{name}"],
        cwd=root,
        check=True,
    )
    for verb in ("ack", "unlock", "reject", "extend"):
        assert cli.main([*data, verb, "night jobs", message_id]) == 1
        assert capsys.readouterr().err == (
            f"boxmq {verb}: {message_id}: 'cli' did not receive this message, which a "
            "consumer outside boxmq holds (a script's or DropboxMQ's: its file is in "
            "processing/ with no lock in its name): it settles it, or a sweep gives it back "
            "to target/ 5 minutes after its claim\n"
        )
    assert os.listdir(root / "night%20jobs" / "processing") == [name]  # left as it was


def test_a_settle_after_the_lock_ended_says_the_message_goes_again_and_get_locks_it(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`no longer holds the lock` (UnexpectedRequest) alone did not say where the message
    went nor what to do, as the message for one never received does (`boxmq get`)."""
    data = ["--data", str(root), "--fsync", "never"]
    assert cli.main([*data, "put", "night jobs", "x"]) == 0
    message_id = capsys.readouterr().out.strip()
    hint = (
        "; the message goes back to be delivered again (`boxmq get 'night jobs'` locks the "
        "next ready message and prints its id; `boxmq peek 'night jobs' --state processing` "
        "shows who holds it, if one does)\n"
    )
    for then_bob in (False, True):  # waiting in target/, then locked by another consumer
        assert cli.main([*data, "get", "night jobs"]) == 0
        assert cli.main([*data, "unlock", "night jobs", message_id]) == 0
        if then_bob:
            assert cli.main([*data, "get", "night jobs", "--consumer", "bob"]) == 0
        capsys.readouterr()
        assert cli.main([*data, "ack", "night jobs", message_id]) == 1
        said = capsys.readouterr().err
        why = "'cli' no longer holds the lock: it ended (--lock ran out, or an unlock)"
        assert said == f"boxmq ack: {message_id}: {why}{hint}", then_bob


def test_a_settle_after_its_holder_left_says_so_once_and_what_now(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A message whose holder's process stopped (or died) is refused `holds no lock on it`,
    which said nothing of where the message went nor what to do; a second hint, added to the
    same refusal, was never reached (the first handler of UnexpectedRequest took it)."""
    data = ["--data", str(root), "--fsync", "never"]
    with boxmq.open(root, fsync="never") as box:
        message_id = box.queue("jobs").put("x")
        assert box.queue("jobs").consumer("w").receive(timeout=5) is not None
    capsys.readouterr()
    assert cli.main([*data, "ack", "jobs", message_id, "--consumer", "w"]) == 1
    assert capsys.readouterr().err == (
        f"boxmq ack: {message_id}: 'w' holds no lock on it: its last lock ended when its "
        "holder left (a restart, a disconnect), and who held it was not kept; the message "
        "goes back to be delivered again (`boxmq get jobs` locks the next ready message and "
        "prints its id; `boxmq peek jobs --state processing` shows who holds it, if one does)\n"
    )


def test_a_body_given_twice_is_a_usage_error_that_makes_no_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = tmp_path / "body"
    given.write_text("from the file")
    for command in ("put", "publish"):
        with pytest.raises(SystemExit) as exit:
            cli.main(["--data", str(tmp_path / "data"), command, "q", "x", "--file", str(given)])
        assert exit.value.code == 2
        said = capsys.readouterr().err
        assert f"usage: boxmq {command}" in said
        assert said.endswith(
            f"boxmq {command}: error: give the body either as BODY or with --file, not both\n"
        )
    assert not (tmp_path / "data").exists()


def test_a_queue_name_too_long_for_its_folder_says_to_shorten_it(root: Path) -> None:
    # It said only "encodes to 600 bytes, over the 255-byte file-name limit", and the docs
    # said any queue name is allowed: nothing told the user what to type instead.
    for name, size in (("a" * 256, 256), ("\u00e9" * 100, 600)):
        done = boxmq_cli(root, "put", name, "x")
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == (
            f"boxmq put: destination name {name[:40]!r}... encodes to {size} bytes, over the "
            "255-byte file-name limit: give a shorter name (a character other than a letter, "
            "a digit, '_', '-', '.' or '~' takes 3 to 12 bytes once percent-encoded)\n"
        )
        assert not root.exists()
    assert ok(root, "put", "a" * 255, "x")  # the longest that fits


def test_a_conflict_s_peek_command_is_quoted_for_a_shell(root: Path) -> None:
    # `boxmq peek night jobs --state processing` was two queue words to a shell.
    ok(root, "put", "night jobs", "x")
    message_id = json.loads(ok(root, "--json", "get", "night jobs", "--consumer", "alice"))["id"]
    done = boxmq_cli(root, "ack", "night jobs", message_id, "--consumer", "bob")
    assert done.returncode == 1
    command = done.stderr.split("`")[1]
    assert command == "boxmq peek 'night jobs' --state processing"
    words = subprocess.run(
        ["bash", "-c", 'printf "%s\\n" ' + command], capture_output=True, text=True, timeout=60
    ).stdout.splitlines()
    assert "alice" in ok(root, *words[1:])


def test_publish_and_subscribe_from_the_command_line(root: Path) -> None:
    ok(root, "publish", "sensors/kitchen/temp", "20.5", "--retain")
    command = [
        sys.executable,
        "-m",
        "boxmq.cli",
        "--data",
        str(root),
        "--fsync",
        "never",
        "--json",
        "subscribe",
        "sensors/#",
        "--name",
        "dash",
        "--count",
        "2",
    ]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as sub:
        assert sub.stdout is not None
        first = json.loads(read_line(sub.stdout, 30))  # the retained one: the subscription exists
        assert (first["topic"], first["body"], first["retained"]) == (
            "sensors/kitchen/temp",
            "20.5",
            True,
        )
        ok(root, "publish", "sensors/hall/temp", "19", "--qos", "0")
        second = json.loads(read_line(sub.stdout, 30))
        assert (second["topic"], second["body"], second["qos"]) == ("sensors/hall/temp", "19", 0)
        assert sub.wait(timeout=30) == 0
    # a plain CLI subscription ends with the command unless --keep
    assert not list((root / "topic-root").rglob("client.dash"))


def test_a_bad_filter_on_the_command_line_is_a_clear_error(root: Path) -> None:
    done = boxmq_cli(root, "subscribe", "$share/g")
    assert done.returncode == 1
    assert "share" in done.stderr
    assert "Traceback" not in done.stderr


def test_ls_shows_subscriptions_and_share_groups(root: Path) -> None:
    import boxmq

    with boxmq.open(root, fsync="never") as box:
        box.subscribe("$share/etl/sensors/#", "w1").close()  # last member: the group ends
        box.topics.attach_dropbox("$share/etl/sensors/#", "spark")
        box.subscribe("alerts/#", "pager").close()  # durable: it stays
        box.publish("alerts/fire", "!")
    table = ok(root, "ls").splitlines()
    assert table[0].split()[:3] == ["SUBSCRIPTION", "SUBSCRIBER", "READY"]
    assert table[1].split()[:3] == ["$share/etl/sensors/#", "spark", "0"]
    assert table[2].split()[:3] == ["alerts/#", "pager", "1"]


def _in_process(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """`boxmq ARGS...`'s output, run in this process (no interpreter to start)."""
    assert cli.main(["--data", str(root), "--fsync", "never", *args]) == 0
    return capsys.readouterr().out


def test_a_share_groups_rejected_message_is_kept_with_its_metadata_and_peek_says_why(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A member's reject (the API's nack; an MQTT member's negative PUBACK is the same) puts
    the message in the group's error/ with all it came with. `ls` counts it dead, and `peek`
    shows it with the topic it was published to and why it is there (as `get` shows the
    topic, and `unlock` why): it showed neither, so a rejection could not be told from a
    message that reached max_deliveries, nor which topic's messages the members refuse."""
    group = "$share/etl/jobs/#"
    with boxmq.open(root, fsync="never") as box, box.subscribe(group, "w1") as member:
        sent = box.publish("jobs/1", b"poison", properties={"tenant": "acme"}, correlation_id="c")
        message = member.receive(timeout=5)
        assert message is not None
        message.reject()
        [dead] = box.subscription(group).peek(state="error")
        assert (dead.envelope.message_id, dead.topic, dead.dead) == (sent, "jobs/1", "rejected")
        assert (dead.properties, dead.correlation_id, dead.size) == ({"tenant": "acme"}, "c", 6)
        [row] = json.loads(_in_process(root, capsys, "--json", "ls"))["subscriptions"]
        assert (row["subscription"], row["ready"], row["locked"], row["dead"]) == (group, 0, 0, 1)
        in_error = ("peek", group, "--state", "error")
        [peeked] = json.loads(_in_process(root, capsys, "--json", *in_error))
        assert peeked == {
            "id": sent,
            "topic": "jobs/1",
            "priority": 4,
            "bytes": 6,
            "deliveries": 1,
            "dead": "rejected",
            "last-holder": "w1",  # the member that rejected it
            "properties": {"tenant": "acme"},
            "correlation-id": "c",
        }
        header, line = _in_process(root, capsys, *in_error).splitlines()
        assert header.split() == [
            *("ID", "TOPIC", "PRIORITY", "BYTES", "DELIVERIES", "DEAD", "LAST-HOLDER"),
            "PROPERTIES",
            "CORRELATION-ID",
        ]
        assert line.split() == [sent, "jobs/1", "4", "6", "1", "rejected", "w1", "tenant=acme", "c"]


def test_dead_letters_of_a_share_group_and_a_subscription_are_peeked_and_requeued(
    root: Path,
) -> None:
    # A share group's and a durable subscription's error/ are redriven as a queue's is: the
    # group is named as `ls` lists it, a plain subscription by its filter and --subscriber.
    with boxmq.open(root, fsync="never") as box:
        group = box.subscribe("$share/etl/jobs/#", "w1")
        plain = box.subscribe("jobs/#", "keeper")
        box.publish("jobs/1", b"poison")
        for subscription in (group, plain):
            message = subscription.receive(timeout=5)
            assert message is not None
            message.reject()
        [dead] = json.loads(ok(root, "--json", "peek", "$share/etl/jobs/#", "--state", "error"))
        assert json.loads(ok(root, "--json", "requeue", "$share/etl/jobs/#")) == {
            "queue": "$share/etl/jobs/#",
            "requeued": 1,
            "left": 0,
        }
        again = group.receive(timeout=5)
        assert again is not None
        assert again.id == dead["id"]
        again.ack()
        assert "1 message(s) from error/" in ok(root, "requeue", "jobs/#", "--subscriber", "keeper")
        back = plain.receive(timeout=5)
        assert back is not None
        assert back.body == b"poison"
        back.reject()
        purged = ok(root, "--json", "purge", "jobs/#", "--subscriber", "keeper", "--state", "error")
        assert json.loads(purged) == {"queue": "jobs/#", "subscriber": "keeper", "purged": 1}
        both = boxmq_cli(root, "peek", "$share/etl/jobs/#", "--subscriber", "w1")
        assert both.returncode == 1
        assert "is a share group: it has members, not a subscriber" in both.stderr
        assert json.loads(ok(root, "--json", "ls"))["subscriptions"][1]["dead"] == 0
        missing = boxmq_cli(root, "requeue", "jobs/#")  # a filter, no subscriber: says how
        assert missing.returncode == 1
        assert "durable subscription(s) of keeper: add --subscriber NAME" in missing.stderr
        nobody = boxmq_cli(root, "peek", "$share/nobody/jobs/#")
        assert nobody.returncode == 1
        assert "no share group '$share/nobody/jobs/#'" in nobody.stderr
        group.close()
        plain.close()


def test_a_subscription_s_locked_message_is_settled_by_id_as_a_queue_s(root: Path) -> None:
    """ack, unlock, reject and extend name a share group as peek does, a durable subscription
    by its filter and --subscriber. A lock that names a process on another machine (which
    cannot be told alive from here) is settled only with --force."""
    with boxmq.open(root, fsync="never") as box:
        group = box.subscribe("$share/etl/jobs/#", "w1", max_in_flight=2, process_bound=False)
        plain = box.subscribe("jobs/#", "keeper", process_bound=False)
        box.publish("jobs/1", b"one")
        box.publish("jobs/2", b"two")
        held = [group.receive(timeout=5), group.receive(timeout=5)]
        kept = plain.receive(timeout=5)
        assert None not in held
        assert kept is not None
        group.detach()  # its locks stay: a member that outlives this process
        plain.detach()
    first, second = (m.id for m in held if m is not None)
    done = json.loads(ok(root, "--json", "ack", "$share/etl/jobs/#", first, "--consumer", "w1"))
    assert done == {"queue": "$share/etl/jobs/#", "id": first, "done": "ack"}
    keeper = ["jobs/#", kept.id, "--subscriber", "keeper"]
    wrong = boxmq_cli(root, "unlock", *keeper, "--consumer", "cli")
    assert wrong.returncode == 1
    assert "boxmq peek 'jobs/#' --subscriber keeper --state processing" in wrong.stderr
    done = json.loads(ok(root, "--json", "unlock", *keeper, "--consumer", "keeper"))
    assert done == {"queue": "jobs/#", "subscriber": "keeper", "id": kept.id, "done": "unlock"}
    [locked] = (root / "topic-root").rglob("share.etl/processing/*")
    name, lock = split_lock(locked.name)
    assert lock is not None
    elsewhere = Lock(lock.owner, lock.deadline_ms, "elsewhere-4242-99")  # another host's process
    locked.rename(locked.with_name(locked_name(name, elsewhere)))
    unlock = ["unlock", "$share/etl/jobs/#", second, "--consumer", "w1"]
    refused = boxmq_cli(root, *unlock)
    assert refused.returncode == 1
    said = "w1, whose lock names process 4242, and that process is on another machine"
    assert said in refused.stderr
    assert refused.stderr.endswith("If that process stopped for good, --force settles it\n")
    assert ok(root, *unlock, "--force") == f"unlock: {second}\n"
    ready = json.loads(ok(root, "--json", "peek", "$share/etl/jobs/#"))
    assert [row["id"] for row in ready] == [second]


_GROUP = "$share/etl/jobs/#"


def test_get_locks_a_share_group_s_or_a_subscription_s_message_for_the_settles(
    root: Path,
) -> None:
    """`get` names a share group as peek and the settles do, a durable subscription by its
    filter and --subscriber: `get` then `ack` (or `reject`) by hand, as for a queue, the
    message's topic (and the subscriber) said beside its queue. Before, `get` took a queue
    only: nothing could lock a subscription's message from the command line."""
    ok(root, "subscribe", _GROUP, "--name", "w1", "--keep", "--idle", "0")
    ok(root, "subscribe", "jobs/#", "--name", "keeper", "--keep", "--idle", "0")
    message_id = ok(root, "publish", "jobs/1", "one", "-p", "tenant=acme").strip()
    got = json.loads(ok(root, "--json", "get", _GROUP, "--lock", "30s"))
    assert list(got)[:3] == ["id", "queue", "topic"]
    assert (got["id"], got["queue"], got["topic"], got["body"]) == (
        message_id,
        _GROUP,
        "jobs/1",
        "one",
    )
    assert (got["locked-by"], got["delivery"], got["properties"]) == ("cli", 1, {"tenant": "acme"})
    [locked] = json.loads(ok(root, "--json", "peek", _GROUP, "--state", "processing"))
    assert (locked["id"], locked["locked-by"]) == (message_id, "cli")
    assert ok(root, "ack", _GROUP, message_id) == f"ack: {message_id}\n"
    empty = boxmq_cli(root, "get", _GROUP)
    assert (empty.returncode, empty.stdout) == (3, "")
    assert empty.stderr == f"boxmq get: no message is ready in '{_GROUP}'\n"
    text = ok(root, "get", "jobs/#", "--subscriber", "keeper")
    header = dict(line.split(maxsplit=1) for line in text.split("\n\n")[0].splitlines())
    assert (header["id"], header["queue"], header["subscriber"], header["topic"]) == (
        message_id,
        "jobs/#",
        "keeper",
        "jobs/1",
    )
    assert text.endswith("\n\none")
    keeper = ["jobs/#", message_id, "--subscriber", "keeper"]
    assert ok(root, "reject", *keeper) == f"reject: {message_id}\n"
    empty = boxmq_cli(root, "get", "jobs/#", "--subscriber", "keeper")
    assert (empty.returncode, empty.stderr) == (
        3,
        "boxmq get: no message is ready in 'jobs/#' for subscriber 'keeper'\n",
    )
    counts = {
        row["subscription"]: row for row in json.loads(ok(root, "--json", "ls"))["subscriptions"]
    }
    assert (counts[_GROUP]["done"], counts["jobs/#"]["dead"]) == (1, 1)


def test_what_get_locked_in_a_share_group_comes_back_when_its_lock_ends(root: Path) -> None:
    """As a queue's: the next get (or a sweep of `boxmq serve`) sends it back to target/, a
    delivery counted, for the group's members or the next get."""
    ok(root, "subscribe", _GROUP, "--name", "w1", "--keep", "--idle", "0")
    message_id = ok(root, "publish", "jobs/1", "one").strip()
    first = json.loads(ok(root, "--json", "get", _GROUP, "--lock", "1s"))
    assert first["id"] == message_id
    time.sleep(1.2)  # past its lock, from before the get returned
    again = json.loads(ok(root, "--json", "get", _GROUP, "--consumer", "other"))
    assert (again["id"], again["delivery"], again["locked-by"]) == (message_id, 2, "other")


def _one_line_refusal(done: subprocess.CompletedProcess[str], *said: str) -> None:
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    for words in said:
        assert words in done.stderr, done.stderr


def test_get_refuses_a_lock_a_subscriber_would_take_for_its_own(root: Path) -> None:
    """A lock under a member's name (or the subscriber's) could not be told from that
    member's own in peek's LOCKED-BY or by the settles' --consumer: refused, untouched."""
    ok(root, "subscribe", _GROUP, "--name", "w1", "--keep", "--idle", "0")
    ok(root, "subscribe", "jobs/#", "--name", "keeper", "--keep", "--idle", "0")
    ok(root, "publish", "jobs/1", "one")
    _one_line_refusal(
        boxmq_cli(root, "get", _GROUP, "--consumer", "w1"),
        f"w1 is a member of the share group {_GROUP}",
        "Give get another --consumer",
    )
    _one_line_refusal(
        boxmq_cli(root, "get", "jobs/#", "--subscriber", "keeper", "--consumer", "keeper"),
        "keeper is the subscriber of jobs/#",
        "Give get another --consumer",
    )
    rows = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert [(row["ready"], row["locked"]) for row in rows] == [(1, 0), (1, 0)]  # untouched
    _one_line_refusal(boxmq_cli(root, "get", "jobs/#"), "keeper: add --subscriber NAME")
    _one_line_refusal(boxmq_cli(root, "get", "$share/nobody/jobs/#"), "no share group")
    _one_line_refusal(
        boxmq_cli(root, "get", "jobs/#", "--subscriber", "nobody"),
        "no subscription of 'nobody' to 'jobs/#'",
    )


def test_a_member_joining_under_get_s_consumer_name_does_not_take_its_lock(root: Path) -> None:
    """A lock `get` took (consumer `cli`, the default) stays get's when a member joins the
    group under that name later, a kept `subscribe` run here (a persistent MQTT session's
    resume is the same): before, that member took the lock for its own and was sent the
    message while get's user held it too, and get's `ack` then found it gone."""
    ok(root, "subscribe", _GROUP, "--name", "w1", "--keep", "--idle", "0")
    message_id = ok(root, "publish", "jobs/1", "one").strip()
    got = json.loads(ok(root, "--json", "get", _GROUP, "--lock", "30s"))
    assert (got["id"], got["locked-by"]) == (message_id, "cli")
    joined = boxmq_cli(
        root,
        "--json",
        "subscribe",
        _GROUP,
        "--name",
        "cli",
        "--keep",
        "--count",
        "1",
        "--idle",
        "1s",
    )
    assert joined.stdout == "", joined.stdout  # nothing for it: get holds the only message
    assert ok(root, "ack", _GROUP, message_id) == f"ack: {message_id}\n"
    [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (row["ready"], row["locked"], row["done"]) == (0, 0, 1)


def test_get_refuses_a_durable_subscription_a_running_process_reads(root: Path) -> None:
    """A durable subscription has one reader, which takes its messages in order: one that a
    `boxmq subscribe` run reads (and removes when it ends) is not drained from under it
    while it runs; on another machine, where it cannot be told alive, --force takes it."""
    ok(root, "publish", "news/today", "first", "--retain")
    with _subscribing(root, "--name", "reader") as sub:
        try:
            done = boxmq_cli(root, "get", "news/#", "--subscriber", "reader")
            _one_line_refusal(done, f"news/# of reader is read by process {sub.pid}", "still runs")
            deadline = time.monotonic() + 30
            while json.loads(ok(root, "--json", "ls"))["subscriptions"][0]["done"] != 1:
                assert time.monotonic() < deadline, "the run never acked what it printed"
                time.sleep(0.05)
        finally:
            sub.kill()
            sub.wait(timeout=30)
    [record] = (root / "topic-root").rglob(".subscription")
    data = json.loads(record.read_text())
    data["owner"] = "elsewhere-4242-99"  # another host's process token (store/process.py)
    record.write_text(json.dumps(data))
    ok(root, "publish", "news/later", "second")
    far = ["get", "news/#", "--subscriber", "reader"]
    _one_line_refusal(
        boxmq_cli(root, *far), "process 4242", "on another machine", "--force takes it"
    )
    assert ok(root, *far, "--force").endswith("\n\nsecond")


def test_the_global_options_may_also_follow_the_command(tmp_path: Path) -> None:
    # `make run` says `boxmq serve --data ./data`; every command takes them in either place.
    where = tmp_path / "after"
    command = [sys.executable, "-m", "boxmq", "put", "jobs", "hi", "--data", str(where)]
    done = subprocess.run([*command, "--fsync", "never"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "boxmq",
            "--data",
            str(tmp_path),
            "ls",
            "--data",
            str(where),
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0, listed.stderr
    [queue] = json.loads(listed.stdout)["queues"]
    assert (queue["queue"], queue["ready"]) == ("jobs", 1)
    assert not (tmp_path / "jobs").exists()  # the one after the command won


def test_a_name_that_is_not_utf8_is_set_aside_and_shown_sanely(root: Path) -> None:
    ok(root, "put", "m", "valid")
    (root / "m" / "target").joinpath(b"\xff\xfe".decode(errors="surrogateescape")).write_text("x")
    assert ok(root, "get", "m").rstrip().endswith("valid")
    assert "\\xff\\xfe" in ok(root, "peek", "m", "--state", "error")
    [row] = json.loads(ok(root, "--json", "peek", "m", "--state", "error"))
    assert row["id"] == "\\xff\\xfe"
    assert json.loads(ok(root, "--json", "ls"))["queues"][0]["dead"] == 1


def test_requeue_leaves_a_name_that_is_not_utf8_in_error_and_says_so(root: Path) -> None:
    """It was counted as requeued and moved back to target/, where the next get set it aside
    to error/ again: a loop that never delivered it. It stays, and requeue says so."""
    ok(root, "put", "m", "valid")
    (root / "m" / "target").joinpath(b"\xff\xfe".decode(errors="surrogateescape")).write_text("x")
    assert ok(root, "get", "m").rstrip().endswith("valid")  # sets the bad name aside
    done = boxmq_cli(root, "requeue", "m")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "m: 0 message(s) from error/ back to target/; 1 left in error/ that can never be "
        "delivered (logged)"
    )
    assert "\\xff\\xfe is not valid UTF-8: left in error/" in done.stderr
    assert json.loads(ok(root, "--json", "requeue", "m")) == {
        "queue": "m",
        "requeued": 0,
        "left": 1,
    }
    assert json.loads(ok(root, "--json", "ls"))["queues"][0]["dead"] == 1
    assert os.listdir(root / "m" / "target") == []


def test_a_property_in_bytes_that_are_not_utf8_is_shown_sanely(root: Path) -> None:
    ok(root, "put", "m", "valid")
    (root / "m" / "target" / "4.s1.T.....kS=v%FF").write_text("x")
    assert "k=v\\xff" in ok(root, "peek", "m")
    got = ok(root, "get", "m", "--consumer", "a") + ok(root, "get", "m")
    assert "k=v\\xff" in got  # as peek shows it
    assert "\\udc" not in got


def test_a_queue_missing_some_state_folders_works(root: Path) -> None:
    (root / "half" / "target").mkdir(parents=True)
    (root / "half" / "target" / "x").write_text("m")
    assert ok(root, "ls").split("\n")[1].split() == ["half", "1", "0", "0", "0", "0"]
    assert ok(root, "get", "half").endswith("\n\nm")


@pytest.mark.parametrize("command", [("put", "q", "x"), ("ls",)])
def test_a_data_path_that_is_a_file_is_one_clear_line(tmp_path: Path, command: tuple[str]) -> None:
    (tmp_path / "afile").write_text("")
    done = boxmq_cli(tmp_path / "afile", *command)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"boxmq {command[0]}: ")
    assert str(tmp_path / "afile") in line
    assert "not a folder" in line
    assert "Traceback" not in done.stderr


def test_a_data_path_that_is_a_link_to_nothing_says_so(tmp_path: Path) -> None:
    """It was "File exists: it is a file, not a folder", of a path where no file stands."""
    (tmp_path / "data").symlink_to(tmp_path / "gone")
    done = boxmq_cli(tmp_path / "data", "put", "q", "x")
    assert done.returncode == 1
    assert done.stderr == (
        f"boxmq put: the root {tmp_path / 'data'} is a symbolic link to {tmp_path / 'gone'}, "
        "which is no folder; make that folder, or give another path\n"
    )


def test_a_data_path_that_cannot_be_made_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    done = boxmq_cli(tmp_path / "afile" / "sub", "put", "q", "x")
    assert done.returncode == 1
    assert str(tmp_path / "afile" / "sub") in done.stderr
    assert f"{tmp_path / 'afile'} is a file, not a folder" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_reader_that_leaves_early_ends_the_command_quietly(root: Path) -> None:
    ok(root, "put", "q", "x")
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--json", "ls"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()  # before it writes: its write finds no reader
        stderr = process.stderr.read()
        assert process.wait(timeout=60) == 141
    assert stderr == b""


def test_a_port_in_use_is_one_clear_line(root: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = boxmq_cli(root, "serve", "--mqtt", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"('127.0.0.1', {port})" in done.stderr
    assert "choose another --mqtt" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_this_user_may_not_listen_on_names_it_and_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Port 80 as a user that is not root: the kernel refuses the bind with EACCES, which is
    no file's access to give (the bind is refused here for root too)."""
    from boxmq import cli

    bind = socket.socket.bind

    def privileged(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address[1] == 80:
            raise PermissionError(errno.EACCES, "Permission denied")
        bind(self, address)

    monkeypatch.setattr(socket.socket, "bind", privileged)
    flags = ["--data", str(tmp_path / "data"), "serve", "--mqtt", "127.0.0.1:80"]
    try:
        assert cli.main(flags) == 1
    finally:
        faulthandler.unregister(signal.SIGUSR1)  # serve's, on this test's captured stderr
    line = capfd.readouterr().err.strip().splitlines()[-1]
    assert line == (
        "boxmq serve: error while attempting to bind on address ('127.0.0.1', 80): permission "
        "denied (a port below 1024 needs root, or the CAP_NET_BIND_SERVICE capability: choose "
        "another --mqtt HOST:PORT)"
    )


def test_a_permission_error_is_one_line_and_the_message_stays(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from boxmq import cli

    ok(root, "put", "q", "x")

    def refused(source: str, target: str) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", source)

    from boxmq.store import dropbox

    monkeypatch.setattr(dropbox, "rename_noreplace", refused)  # what the claim of `get` calls
    assert cli.main(["--data", str(root), "--fsync", "never", "get", "q"]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"boxmq get: {root / 'q' / 'target'}")
    assert "give this user access to it" in line
    assert len(os.listdir(root / "q" / "target")) == 1


def test_a_body_argument_that_is_not_utf8_is_stored_as_its_bytes(root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "--data", str(root), "put", "n", b"\xff\xfe"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    [name] = os.listdir(root / "n" / "target")
    assert (root / "n" / "target" / name).read_bytes() == b"\xff\xfe"


@pytest.mark.parametrize("command", [("put", "q"), ("publish", "t"), ("put", "q", "-")])
def test_a_body_from_a_closed_stdin_is_one_clear_line_and_nothing_is_sent(
    root: Path, command: tuple[str, ...]
) -> None:
    """`boxmq put q <&-`: Python has no sys.stdin then, and reading the body was a traceback."""
    ok(root, "put", "q", "first")
    ok(root, "subscribe", "t", "--name", "k", "--keep", "--idle", "0")
    shell = 'exec "$@" <&-'  # the shell closes fd 0 for the command
    argv = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never", *command]
    done = subprocess.run(["sh", "-c", shell, "sh", *argv], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr == (
        f"boxmq {command[0]}: no body: the standard input is closed; give BODY, --file F, "
        "or pipe it in\n"
    )
    counts = json.loads(ok(root, "--json", "ls"))
    assert [row["ready"] for row in counts["queues"] + counts["subscriptions"]] == [1, 0]


def test_a_folder_as_the_standard_input_is_refused_by_python_before_boxmq_runs(
    root: Path, tmp_path: Path
) -> None:
    """`boxmq put q < data/`: the interpreter stops at its start (init_sys_streams), before
    any code of boxmq's entry point runs, so no line of boxmq's can say it; docs/cli.md's
    exit status 1 says what the user meets instead. Nothing is sent, no folder made."""
    folder = os.open(tmp_path, os.O_RDONLY)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "boxmq.cli", "--data", str(root), "put", "q"],
            stdin=folder,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(folder)
    assert done.returncode == 1
    assert "Fatal Python error: init_sys_streams: <stdin> is a directory" in done.stderr
    assert not root.exists()


def test_file_dash_reads_the_body_from_the_standard_input(root: Path) -> None:
    """`--file -` said `cannot read -: No such file or directory`, exit 1, where BODY `-`
    reads the standard input: the spelling of most tools (a file named `-` is `--file ./-`)."""
    ok(root, "subscribe", "t", "--name", "k", "--keep", "--idle", "0")
    for command in (("put", "q"), ("publish", "t")):
        ok(root, *command, "--file", "-", stdin="from stdin\n")
    got = json.loads(ok(root, "--json", "get", "q"))
    assert got["body"] == "from stdin\n"
    [line] = ok(root, "--json", "subscribe", "t", "--name", "k", "--idle", "0").splitlines()
    assert json.loads(line)["body"] == "from stdin\n"


@pytest.mark.parametrize(
    "command",
    [
        ("subscribe", "t/#", "--name", "k", "--count", "1"),
        ("get", "q"),
        ("put", "q", "second"),
        ("publish", "t/b", "second"),
    ],
)
def test_a_command_with_its_standard_output_closed_does_nothing_and_says_so(
    root: Path, command: tuple[str, ...]
) -> None:
    """`>&-`: Python has no sys.stdout and print() writes nowhere. `subscribe` acked the
    messages it never printed (lost), `get` locked one and failed with a traceback, `put`
    sent a message and failed with a traceback."""
    ok(root, "subscribe", "t/#", "--name", "k", "--keep", "--idle", "0")
    ok(root, "publish", "t/a", "first")
    ok(root, "put", "q", "first")
    shell = 'exec "$@" >&-'  # the shell closes fd 1 for the command
    argv = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never", *command]
    done = subprocess.run(["sh", "-c", shell, "sh", *argv], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr == (
        f"boxmq {command[0]}: the standard output is closed, so nothing it prints could be "
        "read: give it one (>/dev/null to discard what it prints)\n"
    )
    counts = json.loads(ok(root, "--json", "ls"))
    rows = counts["queues"] + counts["subscriptions"]
    assert [(row["ready"], row["locked"], row["done"]) for row in rows] == [(1, 0, 0)] * 2


@pytest.mark.parametrize(
    ("command", "what", "counts"),
    [
        (("put", "q", "second"), "the message is sent: its id is what was lost", (2, 0, 1, 0)),
        (("get", "q"), "the message it locked comes back when --lock ends", (0, 1, 1, 0)),
        (
            ("subscribe", "t/#", "--name", "k", "--count", "1"),
            "the message it could not write is not acked",
            (1, 0, 0, 1),
        ),
    ],
)
def test_an_output_that_refuses_writes_is_named_and_what_was_done_said(
    root: Path, command: tuple[str, ...], what: str, counts: tuple[int, ...]
) -> None:
    """`> /dev/full` (a full disk under `> file`): the line said "the disk is full; free
    some space", as if the root's disk were, and nothing of the message put or locked."""
    ok(root, "subscribe", "t/#", "--name", "k", "--keep", "--idle", "0")
    ok(root, "publish", "t/a", "first")
    ok(root, "put", "q", "first")
    argv = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never", *command]
    with open("/dev/full", "w") as full:
        done = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last == f"boxmq {command[0]}: cannot write its output: No space left on device ({what})"
    listing = json.loads(ok(root, "--json", "ls"))
    [queue], [subscription] = listing["queues"], listing["subscriptions"]
    assert (queue["ready"], queue["locked"], subscription["ready"], subscription["locked"]) == (
        counts
    )


def test_an_output_that_cannot_encode_a_character_shows_it_escaped(root: Path) -> None:
    """PYTHONIOENCODING=ascii (or a Latin-1 terminal): printing "€" was a UnicodeEncodeError,
    a traceback, and the message subscribe was printing stayed unacked."""
    ok(root, "subscribe", "t/#", "--name", "k", "--keep", "--idle", "0")
    ok(root, "publish", "t/€", "5 €")
    argv = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never"]
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run(
        [*argv, "subscribe", "t/#", "--name", "k", "--count", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "t/\\u20ac 5 \\u20ac\n"
    [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (row["ready"], row["locked"], row["done"]) == (0, 0, 1)


def test_get_writes_the_body_byte_for_byte_after_the_blank_line(root: Path) -> None:
    body = b"\x00\xff binary, no newline at the end"
    (root.parent / "body").write_bytes(body)
    ok(root, "put", "q", "--file", str(root.parent / "body"))
    done = subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "--data", str(root), "get", "q"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    head, blank, rest = done.stdout.partition(b"\n\n")
    assert blank
    assert b"locked-by" in head
    assert rest == body


def _body_of(record: dict[str, Any]) -> bytes:
    """A body as a script reads it back from a `--json` record (docs/cli.md)."""
    if "body_base64" in record:
        return base64.b64decode(record["body_base64"])
    return str(record["body"]).encode()


def test_json_records_give_every_body_back_byte_for_byte(root: Path) -> None:
    """`--json` shows bytes that are not UTF-8 as `\\xNN` in `body`, so the byte 0xFF and the
    four characters `\\xff` read the same there: a body that is not UTF-8 also comes as
    `body_base64`, its bytes exactly (get and subscribe)."""
    bodies = [b"\xff", b"\\xff", b"caf\xc3\xa9 \\ plain"]
    for index, body in enumerate(bodies):
        (root.parent / f"body{index}").write_bytes(body)
        ok(root, "put", "q", "--file", str(root.parent / f"body{index}"))
        ok(root, "publish", f"t/{index}", "--retain", "--file", str(root.parent / f"body{index}"))
    got = [json.loads(ok(root, "--json", "get", "q", "--consumer", f"c{n}")) for n in range(3)]
    assert [_body_of(record) for record in got] == bodies
    assert got[0]["body"] == got[1]["body"] == "\\xff"  # readable alike, told apart by base64
    assert ["body_base64" in record for record in got] == [True, False, False]
    lines = ok(root, "--json", "subscribe", "t/#", "--count", "3").splitlines()
    assert sorted(_body_of(json.loads(line)) for line in lines) == sorted(bodies)


def _subscribing(root: Path, *args: str, under: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    """`boxmq subscribe news/# ARGS...`, running, once it printed the retained message that
    `news/today` holds (so its subscription exists). `under`: the command it runs under
    (`nohup`)."""
    command = [*under, sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never"]
    command += ["subscribe", "news/#", *args]
    sub = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert sub.stdout is not None
    assert read_line(sub.stdout, 30) == "news/today first\n"
    return sub


def _subscribers(root: Path) -> list[str]:
    return [row["subscriber"] for row in json.loads(ok(root, "--json", "ls"))["subscriptions"]]


# SIGHUP is what a closed terminal sends (finding: it left `cli-<pid>` behind, collecting).
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_subscribe_stopped_by_a_signal_removes_its_subscription(
    root: Path, signum: signal.Signals
) -> None:
    ok(root, "publish", "news/today", "first", "--retain")
    # Its SIGHUP the default one even where the tests run under nohup, which it would keep.
    with _subscribing(root, "--name", "reader", under=("env", "--default-signal")) as sub:
        assert list((root / "topic-root").rglob("client.reader"))
        sub.send_signal(signum)
        assert sub.wait(timeout=30) == 128 + signum
    assert not list((root / "topic-root").rglob("client.reader"))


def test_subscribe_run_under_nohup_goes_on_after_sighup(root: Path) -> None:
    """`nohup boxmq subscribe ... >> file &` is how a shell keeps a command past the end of its
    terminal: nohup ignores SIGHUP, which the closed terminal's shell sends to its jobs, and
    subscribe's own handler undid that, so the run ended with the terminal all the same."""
    ok(root, "publish", "news/today", "first", "--retain")
    with _subscribing(root, "--name", "reader", under=("nohup",)) as sub:
        assert sub.stdout is not None
        sub.send_signal(signal.SIGHUP)
        ok(root, "publish", "news/later", "second")
        assert read_line(sub.stdout, 30) == "news/later second\n"  # still reading
        sub.send_signal(signal.SIGTERM)
        assert sub.wait(timeout=30) == 128 + signal.SIGTERM
    assert not list((root / "topic-root").rglob("client.reader"))


_SIGNALLED_MID_ACK = """
import os, signal, sys
from boxmq import cli
from boxmq.client.live_queue import LiveQueue

finish = LiveQueue._finish

def signalled(self, message_id, name):  # the signal comes in the ack, before its move
    os.kill(os.getpid(), signal.SIGTERM)
    finish(self, message_id, name)

LiveQueue._finish = signalled
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_signal_during_an_ack_of_subscribe_lets_the_ack_finish(root: Path) -> None:
    """SIGTERM's handler (and Ctrl-C's KeyboardInterrupt) raised wherever the signal came,
    in the middle of a step of the library too: here an ack taken in memory whose file never
    moved (the printed message stayed locked, to come again); in a share group, seen under
    load, the close then failed on such a half-done state (KeyError, a traceback) and the
    member never left. The run now ends between two steps."""
    ok(root, "subscribe", "t/#", "--name", "k", "--keep", "--idle", "0")
    ok(root, "publish", "t/a", "one")
    ok(root, "publish", "t/b", "two")
    argv = ["--data", str(root), "--fsync", "never", "subscribe", "t/#", "--name", "k"]
    done = subprocess.run(
        [sys.executable, "-c", _SIGNALLED_MID_ACK, *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 143, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == "t/a one\n"
    [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (row["ready"], row["locked"], row["done"]) == (1, 0, 1)


def test_a_sweep_ends_the_subscription_of_a_killed_subscribe(root: Path) -> None:
    """SIGKILL leaves no time to unsubscribe: the subscription names its process, and the
    sweep (`boxmq serve`) ends it once that process is dead, but not before; a --keep one
    belongs to no process and stays."""
    ok(root, "publish", "news/today", "first", "--retain")
    ok(root, "subscribe", "news/#", "--name", "kept", "--keep", "--count", "1")
    with _subscribing(root) as sub:
        with boxmq.open(root, fsync="never") as box:
            box.sweep()
        assert _subscribers(root) == [f"cli-{sub.pid}", "kept"]  # alive: left alone
        sub.kill()
        sub.wait(timeout=30)
    ok(root, "publish", "news/later", "nobody reads this")
    with boxmq.open(root, fsync="never") as box:
        box.sweep()
    assert _subscribers(root) == ["kept"]


@pytest.mark.parametrize("filter", ["news/#", "$share/g/news/#"], ids=["plain", "member"])
def test_serve_ends_within_seconds_the_subscription_of_a_subscribe_killed_after_its_full_pass(
    root: Path, filter: str
) -> None:
    """`boxmq serve` learnt the processes the subscriptions (and share-group memberships)
    end with at its full pass (once a minute) only: a run begun after it and killed was
    removed up to a minute later (57 s measured). Its sweeps read the subscriptions the
    generation names as changed."""
    ok(root, "publish", "news/today", "first", "--retain")
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never"]
    begun = time.monotonic()  # before its full pass at start, timed from its own start
    with subprocess.Popen(
        [*command, "serve", "--no-mqtt", "--sweep-interval", "0.2"],
        stderr=subprocess.PIPE,
        text=True,
    ) as serve:
        try:
            assert serve.stderr is not None
            # It says "ready" once its sweep at start, a full pass, is over: every subscribe
            # from here on is one its full passes have not seen (a fixed second's sleep for
            # that pass proved nothing on a machine that took longer to get there).
            said = read_until(serve.stderr, lambda said: b"ready" in said, 30)
            assert b"ready" in said, said
            Drained(serve.stderr)  # its log goes on: a full pipe would stop it in a write
            with subprocess.Popen(
                [*command, "subscribe", filter], stdout=subprocess.PIPE, text=True
            ) as sub:
                deadline = time.monotonic() + 30
                while not _subscribers(root) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert _subscribers(root) == [f"cli-{sub.pid}"]
                sub.kill()
                sub.wait(timeout=30)
            deadline = time.monotonic() + 10
            while _subscribers(root) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _subscribers(root) == []
            # Ended by a sweep between full passes, or the test proved nothing.
            assert time.monotonic() - begun < FULL_SWEEP_EVERY, "its next full pass came first"
        finally:
            serve.terminate()


@pytest.mark.parametrize("keep", [False, True], ids=["plain", "keep"])
def test_a_second_subscribe_under_a_running_one_s_name_is_refused(root: Path, keep: bool) -> None:
    """The first run's subscription ends with it: a second run under its --name took it for
    kept ("it stays after this run"), shared its messages, then stopped with exit 1 when the
    first ended it, blaming `boxmq unsubscribe`. It is refused at once; once the first run
    is over (or killed: its subscription left for the sweep), the name is free again."""
    ok(root, "publish", "news/today", "first", "--retain")
    with _subscribing(root, "--name", "reader") as first:
        try:
            options = ["--keep"] if keep else []
            again = boxmq_cli(
                root, "subscribe", "news/#", "--name", "reader", "--idle", "0", *options
            )
            assert again.returncode == 1
            assert again.stdout == ""
            assert again.stderr == (
                f"boxmq subscribe: news/# of reader is read by another process ({first.pid}), "
                "and ends with it: give this run another --name (each name gets every message)\n"
            )
            ok(root, "publish", "news/a", "one")
            assert first.stdout is not None
            assert read_line(first.stdout, 30) == "news/a one\n"  # it goes on, alone
        finally:
            first.kill()  # killed: its subscription is left for the sweep
            first.wait(timeout=30)
    # a run that died without removing its subscription: read (and kept) as before
    done = boxmq_cli(root, "subscribe", "news/#", "--name", "reader", "--idle", "0")
    assert done.returncode == 0, done.stderr
    assert "reading the kept subscription" in done.stderr


def test_a_subscription_bound_to_another_machine_s_run_is_refused_with_a_command_to_paste(
    root: Path,
) -> None:
    """A run on another host sharing the root cannot be told alive or dead from here: the
    second run is refused, and told the unsubscribe command that ends it, quoted for a shell
    (`$share` and a name with a space would otherwise not reach boxmq as they are)."""
    ok(root, "publish", "news/today", "first", "--retain")
    with _subscribing(root, "--name", "night reader") as first:
        first.kill()
        first.wait(timeout=30)
    [record] = (root / "topic-root").rglob(".subscription")
    data = json.loads(record.read_text())
    data["owner"] = "elsewhere-4242-99"  # another host's process token (store/process.py)
    record.write_text(json.dumps(data))
    again = boxmq_cli(root, "subscribe", "news/#", "--name", "night reader", "--idle", "0")
    assert again.returncode == 1
    assert again.stderr.endswith(
        ", or end it with `boxmq unsubscribe 'news/#' --name 'night reader'`\n"
    )
    assert "(4242 on another machine)" in again.stderr


def test_a_second_subscribe_under_a_running_member_s_name_is_refused(root: Path) -> None:
    """The same for a share group: the first run's membership ends with it (the group with
    it, its last member), and a second run as the same member took it for kept."""
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never"]
    command += ["subscribe", "$share/g/jobs/#", "--name", "worker"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as first:
        try:
            deadline = time.monotonic() + 30
            while "worker" not in boxmq_cli(root, "--json", "ls").stdout:  # the root made
                assert time.monotonic() < deadline, "the first run never joined"
                time.sleep(0.1)
            again = boxmq_cli(root, "subscribe", "$share/g/jobs/#", "--name", "worker")
            assert again.returncode == 1
            assert again.stderr == (
                f"boxmq subscribe: $share/g/jobs/# of worker is read by another process "
                f"({first.pid}), and ends with it: give this run another --name (a member of "
                "its own)\n"
            )
            other = boxmq_cli(
                root, "subscribe", "$share/g/jobs/#", "--name", "other", "--idle", "0"
            )
            assert other.returncode == 0, other.stderr  # another member: welcome
        finally:
            first.kill()
            first.wait(timeout=30)


def test_subscribe_without_keep_leaves_a_kept_subscription_in_place(root: Path) -> None:
    # A run without --keep attached to a subscription an earlier --keep run made, then
    # deleted it on exit, and the messages it held for later runs with it.
    ok(root, "subscribe", "news/#", "--name", "reader", "--keep", "--idle", "0.1")
    ok(root, "publish", "news/a", "one")
    ok(root, "publish", "news/b", "two")
    done = boxmq_cli(root, "subscribe", "news/#", "--name", "reader", "--count", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "news/a one\n"
    [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (row["subscription"], row["subscriber"], row["ready"]) == ("news/#", "reader", 1)
    assert "boxmq unsubscribe 'news/#' --name reader" in done.stderr  # it stays, and how not
    assert ok(root, "subscribe", "news/#", "--name", "reader", "--count", "1") == "news/b two\n"
    assert json.loads(ok(root, "--json", "ls"))["subscriptions"] != []


def test_subscribe_escapes_a_newline_in_a_topic_so_each_message_starts_one_line(
    root: Path,
) -> None:
    """MQTT lets a topic hold a newline. Printed as it was, the topic "evil", a newline,
    "fake/topic" and its body "x" read as a line "evil" and a message "x" of the topic
    "fake/topic". The topic is shown escaped, as get and peek show their metadata; the body is
    printed as it is (--json is for bodies that may hold newlines)."""
    ok(root, "subscribe", "#", "--name", "reader", "--keep", "--idle", "0.1")
    ok(root, "publish", "evil\nfake/topic", "x")
    ok(root, "publish", "tab\there", "y")
    out = ok(root, "subscribe", "#", "--name", "reader", "--count", "2")
    assert out == "evil\\nfake/topic x\ntab\\there y\n"


@pytest.mark.parametrize(
    ("filter", "folder"),
    [("sensors/kitchen", "client.reader"), ("$share/etl/sensors/#", "share.etl")],
)
def test_subscribe_shows_the_filter_as_the_topic_of_a_file_a_script_dropped_in_without_one(
    root: Path, filter: str, folder: str
) -> None:
    """DropboxMQ's shortest name (`4.dropped.T`) carries no topic. The line said `None x`,
    Python's None printed, and `None` is a topic name a publisher may use. The filter is what
    the MQTT door sends such a message on when it is a topic name (docs/mqtt.md), and one with
    wildcards is plainly no topic."""
    ok(root, "subscribe", filter, "--name", "reader", "--keep", "--idle", "0.1")
    [dropbox] = root.glob(f"topic-root/*/.subscriptions/{folder}")
    (dropbox / "working" / "4.dropped.T").write_text("x")
    os.rename(dropbox / "working" / "4.dropped.T", dropbox / "target" / "4.dropped.T")
    line = ok(root, "subscribe", filter, "--name", "reader", "--count", "1")
    assert line == f"{filter.removeprefix('$share/etl/')} x\n"


def test_subscribe_s_note_on_a_kept_share_group_gives_a_command_a_shell_runs_as_it_is(
    root: Path,
) -> None:
    """The note of a run reading a kept membership says how to end it. Unquoted, `boxmq
    unsubscribe $share/etl/jobs/# --name w 1` pasted into a shell lost `$share` (a variable)
    and split the name in two: the command it ran was not the one meant."""
    ok(root, "subscribe", "$share/etl/jobs/#", "--name", "w 1", "--keep", "--idle", "0.1")
    done = boxmq_cli(root, "subscribe", "$share/etl/jobs/#", "--name", "w 1", "--idle", "0.1")
    assert done.returncode == 0, done.stderr
    command = done.stderr.split("`")[1]  # (`boxmq unsubscribe ...` ends it)
    # The words bash makes of it, as it would run them.
    words = subprocess.run(
        ["bash", "-c", 'printf "%s\\n" ' + command], capture_output=True, text=True, timeout=60
    ).stdout.splitlines()
    assert words == ["boxmq", "unsubscribe", "$share/etl/jobs/#", "--name", "w 1"]
    ok(root, *words[1:])
    assert json.loads(ok(root, "--json", "ls"))["subscriptions"] == []


def test_subscribe_leaves_a_kept_subscription_s_qos_and_no_local_as_they_were(
    root: Path,
) -> None:
    """A run without --qos subscribed again at QoS 1, No Local off: a subscription the Python
    API (or an MQTT session) made at QoS 2 with No Local came out of a mere read changed,
    its subscriber getting its own messages back. --qos given still changes the QoS."""

    def settings() -> tuple[int, bool]:
        with boxmq.open(root, fsync="never") as box:
            [(_, record)] = box.topics.subscribed("k")
            return record.qos, record.no_local

    with boxmq.open(root, fsync="never") as box:
        box.subscribe("t/#", "k", qos=2, no_local=True).detach()
    assert settings() == (2, True)
    ok(root, "subscribe", "t/#", "--name", "k", "--idle", "0")
    assert settings() == (2, True)
    ok(root, "subscribe", "t/#", "--name", "k", "--idle", "0", "--qos", "0")
    assert settings() == (0, True)


def test_a_kept_subscription_gets_the_retained_message_once_not_at_every_run(
    root: Path,
) -> None:
    """A new subscription gets the retained messages (pubsub.md); each later run that reads
    a kept one wrote them into it again, so every run printed the same retained message."""
    ok(root, "publish", "st/a", "RETAINED", "--retain")
    first = ok(root, "subscribe", "st/#", "--name", "k", "--keep", "--idle", "0.5")
    assert first == "st/a RETAINED\n"
    ok(root, "publish", "st/a", "live")
    again = boxmq_cli(root, "subscribe", "st/#", "--name", "k", "--keep", "--idle", "0.5")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "st/a live\n"


def test_subscribe_goes_on_when_a_slow_reader_outlasted_a_message_s_lock(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`boxmq subscribe ... | slow-reader`: print() waits on a full pipe; when that outlasts
    the lock (30 s), the ack after it is refused (UnexpectedRequest). The run stopped there,
    exit 1; the message comes again (printed twice, as at-least-once allows) and it goes on.
    Here the lock is 0.3 s and the first print takes 0.6 s."""
    from boxmq import cli, cli_subscribe

    ok(root, "subscribe", "t/#", "--name", "k", "--keep", "--idle", "0")
    ok(root, "publish", "t/a", "one")
    from boxmq.client.topics import Topics

    subscribe = Topics.subscribe  # what the CLI calls (not Box.subscribe, which warns of $SYS)

    def short_locks(self: Topics, *args: Any, **kwargs: Any) -> Any:
        return subscribe(self, *args, **kwargs, lock_timeout=0.3)

    printed = cli_subscribe._print_message

    calls: list[str] = []

    def slow_first(args: Any, message: Any) -> None:
        printed(args, message)
        calls.append(message.id)
        if len(calls) == 1:
            time.sleep(0.6)  # a reader that took this long to make room in the pipe

    monkeypatch.setattr(Topics, "subscribe", short_locks)
    monkeypatch.setattr(cli_subscribe, "_print_message", slow_first)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # subscribe's, not pytest's
    argv = ["--data", str(root), "--fsync", "never", "subscribe", "t/#", "--name", "k"]
    assert cli.main([*argv, "--count", "2", "--idle", "10"]) == 0
    out, err = capsys.readouterr()
    assert out == "t/a one\nt/a one\n"
    assert f"{calls[0]}: k no longer holds the lock: printed but not acked" in err
    [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (row["ready"], row["locked"], row["done"]) == (0, 0, 1)


def test_unsubscribe_ends_a_kept_subscription(root: Path) -> None:
    ok(root, "subscribe", "news/#", "--name", "reader", "--keep", "--idle", "0.1")
    assert ok(root, "unsubscribe", "news/#", "--name", "reader") == "unsubscribed: news/# reader\n"
    assert json.loads(ok(root, "--json", "ls"))["subscriptions"] == []
    done = boxmq_cli(root, "unsubscribe", "news/#", "--name", "reader")
    assert done.returncode == 1
    assert done.stderr == (
        f"boxmq unsubscribe: no subscription of 'reader' to 'news/#' under {root} "
        "(`boxmq ls` lists them)\n"
    )
    done = boxmq_cli(root, "unsubscribe", "news/#", "--name", "")  # a script's empty $NAME
    assert done.stderr.startswith("boxmq unsubscribe: no subscription of '' to 'news/#' under")


def test_a_subscriber_name_looked_up_in_records_that_cannot_be_listed_says_what_to_fix(
    root: Path,
) -> None:
    """A subscriber name shortened from a long client id (`%h`) is looked up among the MQTT
    session records' names: a folder of them that cannot be listed (a link to itself here)
    went out as the bare errno against the root (found at an earlier stop); it says what
    `serve` and `session ls` say of it now, and nothing is changed."""
    boxmq.open(root, fsync="never").close()
    folder = root / ".mqtt" / "sessions"
    folder.parent.mkdir()
    os.symlink("sessions", folder)
    name = consumer_name("c" * 300)
    assert "%h" in name
    done = boxmq_cli(root, "subscribe", "news/#", "--name", name, "--idle", "0")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"boxmq subscribe: the MQTT session records in {folder} cannot be listed: ELOOP (Too "
        "many levels of symbolic links); a symbolic link that leads nowhere stands there: make "
        "it a folder. No persistent session is known until then (a record alone that cannot be "
        "read only waits for its own session)\n"
    )
    assert os.readlink(folder) == "sessions"  # left as it is
    assert _subscribers(root) == []


@pytest.mark.parametrize("client_id", ["dev", "device-" + "7" * 40])
def test_a_subscriber_name_whose_record_cannot_be_read_says_which_file_and_what_to_do(
    root: Path, client_id: str
) -> None:
    """A session record the file system refuses to read (EIO of a failing disk; a link to
    itself here) went out of `--name`'s lookup as the errno's text against its path, nothing
    saying it was an MQTT session record or what to do; it says both now, for a short name
    and one shortened from a long client id, and the file is left as it is."""
    boxmq.open(root, fsync="never").close()
    folder = root / ".mqtt" / "sessions"
    folder.mkdir(parents=True)
    record = folder / escape_segment(client_id)
    os.symlink(record.name, record)
    done = boxmq_cli(root, "subscribe", "news/#", "--name", consumer_name(client_id), "--idle", "0")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"boxmq subscribe: the MQTT session record {record} cannot be read: ELOOP (Too many "
        "levels of symbolic links); a symbolic link that leads nowhere stands there: delete it "
        "to forget the session, or make it the record. It is left as it is\n"
    )
    assert os.readlink(record) == record.name
    assert _subscribers(root) == []


@pytest.mark.parametrize("subscription", ["news/#", "$share/g/news/#"])
def test_a_subscribe_whose_subscription_is_ended_elsewhere_stops_and_says_so(
    root: Path, subscription: str
) -> None:
    """`boxmq unsubscribe FILTER --name cli-PID` from another shell, on a run that was alive:
    the run waited on, forever without --idle, for messages that could no longer come."""
    ok(root, "subscribe", "$share/g/news/#", "--name", "other", "--keep", "--idle", "0")
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never"]
    command += ["subscribe", subscription, "--name", "live"]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as sub:
        try:
            with boxmq.open(root, fsync="never") as box:
                for _ in range(600):  # until it has subscribed, at most 60 s
                    if box.topics.has_subscription(subscription, "live"):
                        break
                    time.sleep(0.1)
            ok(root, "unsubscribe", subscription, "--name", "live")
            assert sub.wait(timeout=30) == 1
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.wait(timeout=30)
        assert sub.stderr is not None
        assert sub.stderr.read() == (
            f"boxmq subscribe: {subscription} of live was ended while this run read it "
            "(`boxmq unsubscribe`): nothing more can come to it\n"
        )
    assert _subscribers(root) == ["other"]


def test_a_member_ended_elsewhere_stops_within_seconds_while_the_group_s_messages_flow(
    root: Path,
) -> None:
    """A share group outlives a member that `boxmq unsubscribe` ended: the run of that member
    looked for its end only when no message came for a quarter of a second, so while the
    group's messages flowed it went on taking a share of them (every one, here) as a member
    of nothing, until the flow stopped. Every message is printed by the run or waits for the
    group's other member, none locked to the member that left."""
    ok(root, "subscribe", "$share/g/news/#", "--name", "other", "--keep", "--idle", "0")
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "--fsync", "never"]
    command += ["subscribe", "$share/g/news/#", "--name", "live"]
    published = 0
    with (
        boxmq.open(root, fsync="never") as box,
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as sub,
    ):
        try:
            assert sub.stdout is not None
            output = Drained(sub.stdout)  # counted at the end: a full pipe would stop it
            while not box.topics.has_subscription("$share/g/news/#", "live"):
                assert sub.poll() is None, "the run never joined"
                time.sleep(0.05)
            ok(root, "unsubscribe", "$share/g/news/#", "--name", "live")
            ended = time.monotonic()
            # A message every 50 ms, for 20 s at most: the old run stopped only after them.
            while sub.poll() is None and time.monotonic() - ended < 20:
                box.publish("news/a", str(published))
                published += 1
                time.sleep(0.05)
            assert sub.wait(timeout=30) == 1
            assert time.monotonic() - ended < 5, "it read on while the messages came"
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.wait(timeout=30)
    [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (row["subscriber"], row["locked"]) == ("other", 0)
    assert len(output.text().splitlines()) == row["done"]  # each printed line acked, once
    assert row["ready"] + row["done"] == published


def test_subscribe_errors_name_the_command_not_the_subscriber(root: Path) -> None:
    done = boxmq_cli(root, "subscribe", "a/#/b", "--name", "dash")  # '#' must come last
    assert done.returncode == 1
    assert done.stderr.startswith("boxmq subscribe: ")


_FF = os.fsdecode(b"\xff")  # an argument's byte that is not UTF-8, as Python reads it


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("put", f"q{_FF}", "x"), "boxmq put: destination name 'q\\xff' is not valid Unicode"),
        (("get", "q", "--consumer", f"c{_FF}"), "consumer name 'c\\xff' is not valid Unicode"),
        (("ack", "q", f"bad{_FF}"), "boxmq ack: bad\\xff: no such message"),
        (("put", "q", "x", "--property", f"a{_FF}=1"), "boxmq put: property 'a\\xff' = '1'"),
        (("get", "q", "--lock", _FF), "argument --lock: bad duration '\\xff'"),
        (("--data", f"d{_FF}", "ls"), "boxmq ls: no folder d\\xff (it does not exist)"),
        (("serve", "--mqtt", f"h{_FF}:1883"), "--mqtt: 'h\\xff:1883': the host is not valid"),
        (
            ("serve", "--no-mqtt", "--xmpp-component", "c", "--xmpp-server", f"h{_FF}:5347"),
            "--xmpp-server: 'h\\xff:5347': the host is not valid Unicode",
        ),
        (
            ("serve", "--no-mqtt", "--xmpp-component", f"c{_FF}", "--xmpp-secret", "s"),
            "boxmq serve: error: --xmpp-component 'c\\xff': not valid Unicode",
        ),
    ],
)
def test_an_argument_s_bytes_that_are_not_utf_8_are_shown_as_xnn_in_its_error(
    root: Path, args: tuple[str, ...], says: str
) -> None:
    ok(root, "put", "q", "x")
    done = boxmq_cli(root, *args)
    assert done.returncode in (1, 2)
    assert says in done.stderr, done.stderr
    assert "\\udcff" not in done.stderr
    assert "Traceback" not in done.stderr


def test_an_xmpp_component_name_that_is_no_domain_is_refused_not_a_traceback(root: Path) -> None:
    """A usage error (exit 2) as the other flags' values, said before the config is read: it
    was an error of the run (exit 1), where docs/xmpp.md says a usage error."""
    pytest.importorskip("slixmpp")
    done = boxmq_cli(root, "serve", "--no-mqtt", "--xmpp-component", "a b", "--xmpp-secret", "s")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith(
        "boxmq serve: error: --xmpp-component 'a b': not a domain name ("
    ), done.stderr
    assert "config:" not in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("subscribe", "a/#", "--name", f"n{_FF}", "--idle", "0"),
        ("unsubscribe", "a/#", "--name", f"n{_FF}"),
        ("peek", "a/#", "--subscriber", f"n{_FF}"),
        ("requeue", "a/#", "--subscriber", f"n{_FF}"),
    ],
)
def test_a_subscriber_name_in_bytes_that_are_not_utf_8_is_called_a_subscriber_name(
    root: Path, args: tuple[str, ...]
) -> None:
    """Not "destination name 'client.n\\xff'... is not valid Unicode", the folder it would have."""
    ok(root, "put", "q", "x")
    done = boxmq_cli(root, *args)
    assert done.returncode == 1
    assert f"boxmq {args[0]}: subscriber name 'n\\xff' is not valid Unicode" in done.stderr, (
        done.stderr
    )
    assert "client." not in done.stderr


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("serve", "--no-mqtt", "extra"), "extra"),
        (("put", "q", "x", "extra"), "extra"),
        (("passwd", "pw", "u", "--password", "p", "--json"), "--json"),
        (("ls", f"q{_FF}"), "q\\xff"),
    ],
)
def test_an_argument_no_command_takes_is_refused_with_the_command_s_usage(
    root: Path, args: tuple[str, ...], extra: str
) -> None:
    """Not "boxmq: error: unrecognized arguments" under boxmq's usage, which names none of
    the command's options."""
    done = boxmq_cli(root, *args)
    assert done.returncode == 2
    assert done.stderr.startswith(f"usage: boxmq {args[0]} "), done.stderr
    last = done.stderr.splitlines()[-1]
    assert last == f"boxmq {args[0]}: error: unrecognized arguments: {extra}", last
    assert not (root / "pw").exists()


def _refused_as_unrecognized(root: Path, args: tuple[str, ...], says: str) -> None:
    """`boxmq *args` is a usage error whose last line names the arguments not recognized
    and ends with `(says)`, and no queue q is made."""
    done = boxmq_cli(root, *args)
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"boxmq {args[0]}: error: unrecognized arguments: "), last
    assert last.endswith(f" ({says})"), last
    assert not (root / "q").exists()


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (("put", "q", "x", "--priorty", "3"), "--priority"),
        (("put", "q", "x", "--proprety=a=b"), "--property"),
        (("get", "q", "--lok", "30s"), "--lock"),
        (("serve", "--no-mqqt"), "--no-mqtt"),
        (("ls", "--jsno"), "--json"),
    ],
)
def test_a_misspelt_option_is_refused_with_the_option_it_looks_like(
    root: Path, args: tuple[str, ...], meant: str
) -> None:
    """A new user's typo (`--priorty`) was told only "unrecognized arguments", left to find
    the option in the usage above; as a misspelt config key is, it is now named, and nothing
    is done (found by typing the README's tour with typos)."""
    _refused_as_unrecognized(root, args, f"did you mean {meant}?")


@pytest.mark.parametrize("args", [("purge", "q", "--colour"), ("ls", "--x")])
def test_an_unknown_option_like_none_is_named_without_a_guess(
    root: Path, args: tuple[str, ...]
) -> None:
    """An option close to none of the command's, and no other command's word for one of its
    options: no guess is better than a wrong one."""
    done = boxmq_cli(root, *args)
    assert done.returncode == 2
    assert "did you mean" not in done.stderr, done.stderr
    assert " takes " not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("purge", "q", "--from", "error"), "purge takes --state, not --from"),
        (("purge", "q", "--from=error"), "purge takes --state, not --from"),
        (("requeue", "q", "--state", "error"), "requeue takes --from, not --state"),
        (("peek", "q", "--from", "error"), "peek takes --state, not --from"),
    ],
)
def test_another_command_s_option_for_the_same_folder_is_refused_with_this_one_s(
    root: Path, args: tuple[str, ...], says: str
) -> None:
    """requeue names the folder it takes from --from, purge and peek the folder they read
    --state: `purge q --from error`, requeue's word, was told only "unrecognized arguments"
    (far from any of purge's options by spelling), now the option purge has for it (found
    typing the README's tour after a requeue)."""
    _refused_as_unrecognized(root, args, says)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("peek", "q", "--state", "dead"), "(ls's DEAD is error/: --state error)"),
        (("peek", "q", "--state", "locked"), "(ls's LOCKED is processing/: --state processing)"),
        (("peek", "q", "--state", "ready"), "(ls's READY is target/: --state target)"),
        (("purge", "q", "--state", "done"), "(ls's DONE is processed/: --state processed)"),
        (("requeue", "q", "--from", "dead"), "(ls's DEAD is error/: --from error)"),
        (("requeue", "q", "--from=done"), "(ls's DONE is processed/: --from processed)"),
    ],
)
def test_a_state_named_as_ls_counts_it_is_refused_with_the_folder_it_is(
    root: Path, args: tuple[str, ...], says: str
) -> None:
    """`ls` counts READY, LOCKED, DONE and DEAD, where --state and --from take the folders'
    names: `peek q --state dead` was told only "invalid choice" and the folders, none of them
    `ls`'s word (found typing the README's tour as a new user, after `ls`)."""
    done = boxmq_cli(root, *args)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(says), done.stderr


@pytest.mark.parametrize(
    "args", [("purge", "q", "--state", "locked"), ("peek", "q", "--state", "x")]
)
def test_a_state_whose_folder_the_option_does_not_take_gets_no_folder_named(
    root: Path, args: tuple[str, ...]
) -> None:
    """purge leaves locked messages alone: it is not told to purge processing/, which it refuses."""
    done = boxmq_cli(root, *args)
    assert done.returncode == 2
    assert "invalid choice" in done.stderr
    assert "ls's" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("lss",), " (did you mean ls?)"),
        (("sesion", "end", "c"), " (did you mean session?)"),
        (("peek", "q", "--state", "procesing"), " (did you mean processing?)"),
        (("put", "q", "x", "--fsync", "alwys"), " (did you mean always?)"),
        (("bogus",), "'help')"),  # no word near enough: the list alone, as before
        # Another tool's word for a command, far from it in spelling.
        (("list",), "'help') (did you mean ls?)"),
        (("rm", "q"), " (did you mean delete?)"),
        # One spelt near another command: the word it stands for wins, not the look-alike
        # (`nack` is 0.86 of `ack`, which would settle for good what was meant to go back).
        (("nack", "q", "x"), " (did you mean reject?)"),
        (("enqueue", "q", "x"), " (did you mean put?)"),  # not requeue, a redrive of error/
        (("dequeue", "q"), " (did you mean get?)"),
    ],
)
def test_a_misspelt_command_or_choice_is_told_the_word_meant(
    root: Path, args: tuple[str, ...], says: str
) -> None:
    """As a misspelt option is (`--priorty`: did you mean --priority?): `boxmq lss` was shown
    the list of commands alone."""
    done = boxmq_cli(root, *args)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(says), done.stderr


@pytest.mark.parametrize("filter", ["a/b", "$share/g/a/b"])
@pytest.mark.parametrize(("name", "says"), [("x/y", "contains '/'"), ("x" * 41, "40-byte")])
def test_a_bad_subscribe_name_is_called_a_subscriber_name_not_a_consumer_name(
    root: Path, filter: str, name: str, says: str
) -> None:
    done = boxmq_cli(root, "subscribe", filter, "--name", name, "--idle", "0")
    assert done.returncode == 1
    assert done.stderr.startswith(f"boxmq subscribe: subscriber name {name!r}"), done.stderr
    assert says in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("ls",),
        ("peek", "q"),
        ("get", "q"),
        ("ack", "q", "x"),
        ("purge", "q"),
        ("delete", "q"),
        ("requeue", "q"),
        ("unsubscribe", "a/#", "--name", "x"),
    ],
)
def test_commands_that_only_read_do_not_create_a_missing_root(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    done = boxmq_cli(tmp_path / "typo", *command)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"boxmq {command[0]}: no folder {tmp_path / 'typo'}")
    assert not (tmp_path / "typo").exists()


def test_a_missing_root_under_a_file_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--data file/data ls` said the root "does not exist", as if a folder were missing."""
    (tmp_path / "file").write_text("")
    assert cli.main(["--data", str(tmp_path / "file" / "data"), "ls"]) == 1
    said = capsys.readouterr().err
    assert f"({tmp_path / 'file'} is a file, not a folder): check --data" in said


@pytest.mark.parametrize("under", [False, True])
def test_a_root_blocked_by_a_file_says_to_move_it_not_that_put_makes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], under: bool
) -> None:
    """A read's `--data` that is a file (or lies under one) ended "(put, publish, subscribe
    and serve make it)", but each of those refuses such a root: found by running each
    command's failure cases against docs/cli.md's exit status table. It says to move the
    file away now, and the file is left as it is."""
    (tmp_path / "file").write_text("kept")
    data = tmp_path / "file" / "data" if under else tmp_path / "file"
    assert cli.main(["--data", str(data), "peek", "q"]) == 1
    [said] = capsys.readouterr().err.splitlines()
    what = f"{tmp_path / 'file'} is a file" if under else "it is a file"
    assert said == (
        f"boxmq peek: no folder {data} ({what}, not a folder): check --data or $BOXMQ_DATA, "
        "or move the file away (no command makes a folder where a file stands)"
    )
    assert (tmp_path / "file").read_text() == "kept"


def test_a_root_that_is_a_link_to_nothing_says_so_not_that_put_makes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read's `--data` that is a symbolic link to nothing said "(it does not exist) ...
    (put, publish, subscribe and serve make it)", but it stands there, and each of those
    refuses it (`is a symbolic link to ..., which is no folder`): found by the operator's
    probe of a root given as a link. The link is left as it is, nothing made through it."""
    (tmp_path / "data").symlink_to(tmp_path / "gone")
    assert cli.main(["--data", str(tmp_path / "data"), "ls"]) == 1
    [said] = capsys.readouterr().err.splitlines()
    assert said == (
        f"boxmq ls: no folder {tmp_path / 'data'} (it is a symbolic link to "
        f"{tmp_path / 'gone'}, which is no folder): check --data or $BOXMQ_DATA, or make "
        "that folder (no command makes a folder through a link)"
    )
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize(
    "command", [["ls"], ["put", "x", "hi"], ["get", "jobs"], ["serve", "--mqtt", "127.0.0.1:0"]]
)
def test_a_queue_s_own_folder_as_the_root_is_refused_naming_the_root(
    root: Path, command: list[str]
) -> None:
    """`--data data/jobs` (a queue's folder, not the root) said "no queues or subscriptions",
    and a put there made a queue inside the queue: found walking the README as a new user.
    Each command says which folder is the root (serve before it listens), and nothing is
    made or moved."""
    ok(root, "put", "jobs", "kept")
    before = sorted(os.walk(root / "jobs"))
    done = boxmq_cli(root / "jobs", *command)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (  # serve's log lines before it
        f"boxmq {command[0]}: {root / 'jobs'} is a queue's folder (it holds target/ and "
        "processing/), not a root: check --data or $BOXMQ_DATA, which takes the folder that "
        f"holds the queues ({root})"
    )
    assert sorted(os.walk(root / "jobs")) == before


def test_a_subscription_s_folder_as_the_root_names_the_root_above_topic_root(root: Path) -> None:
    """The same for a subscription's dropbox, four folders under the root; a root holding
    queues named target and processing is a root, not a dropbox."""
    ok(root, "subscribe", "t/#", "--name", "s", "--idle", "0", "--keep")
    [folder] = (root / "topic-root").glob("*/.subscriptions/*")
    done = boxmq_cli(folder, "ls")
    assert done.returncode == 1
    assert "is a subscription's folder (it holds target/ and processing/)" in done.stderr
    assert done.stderr.endswith(f"holds the queues ({root})\n")
    for queue in ("target", "processing"):
        ok(root, "put", queue, "a queue's message")
    assert [line.split()[0] for line in ok(root, "ls").splitlines()[1:3]] == [
        "processing",
        "target",
    ]


@pytest.mark.parametrize("given", ["flag", "env"])
def test_a_data_folder_under_a_quoted_tilde_is_in_the_home_folder(
    tmp_path: Path, given: str
) -> None:
    """`--data '~/q'` or `BOXMQ_DATA="~/q"` (quoted, so no shell expands it) made a folder
    named `~` in the current one, one `rm -rf ~` away from the home folder, where the config
    file's `data = "~/q"` is the home folder's q (found on a new user's tour). The CLI reads it
    as the config file does; a user this machine does not have is a usage error."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    env = {**os.environ, "HOME": str(home)}
    flag = ["--data", "~/q"] if given == "flag" else []
    if given == "env":
        env["BOXMQ_DATA"] = "~/q"
    command = [sys.executable, "-m", "boxmq.cli", *flag, "--fsync", "never"]
    done = subprocess.run(
        [*command, "put", "jobs", "x"], capture_output=True, text=True, cwd=here, env=env
    )
    assert done.returncode == 0, done.stderr
    assert list(here.iterdir()) == []
    assert len(list((home / "q" / "jobs" / "target").iterdir())) == 1
    if given == "flag":
        command[command.index("~/q")] = "~no-such-user-xyz/q"
    else:
        env["BOXMQ_DATA"] = "~no-such-user-xyz/q"
    done = subprocess.run(
        [*command, "put", "jobs", "x"], capture_output=True, text=True, cwd=here, env=env
    )
    assert done.returncode == 2, done.stderr
    assert "no user no-such-user-xyz" in done.stderr, done.stderr
    named = "--data" if given == "flag" else "$BOXMQ_DATA"  # what the user wrote it in
    assert f"{named} '~no-such-user-xyz/q': " in done.stderr, done.stderr
    assert list(here.iterdir()) == []


def test_a_config_file_under_a_quoted_tilde_is_in_the_home_folder(tmp_path: Path) -> None:
    """`serve --config '~/boxmq.toml'` said "config file ~/boxmq.toml does not exist", though
    the file's own paths take a leading ~ as the home folder (found beside --data's)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "boxmq.toml").write_text('fsnc = "always"\n')
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "serve", "--config", "~/boxmq.toml", "--no-mqtt"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "did you mean fsync?" in done.stderr, done.stderr


def test_put_creates_a_missing_root(tmp_path: Path) -> None:
    ok(tmp_path / "new", "put", "q", "x")
    assert (tmp_path / "new" / "q" / "target").is_dir()


_LONG_LABEL = "--xmpp-server=" + "a" * 64 + ":5347"  # a host part over 63 characters


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("get", "jobs", "--lock", "0"), "bad duration '0': it must be more than zero"),
        (("put", "jobs", "x", "--expires-in", "0"), "bad duration '0': it must be more than zero"),
        (("extend", "jobs", "x", "--by", "0ms"), "bad duration '0ms': it must be more than zero"),
        (("get", "jobs", "--lock", "9" * 400), "at most 36500d (100 years)"),  # float: infinity
        (("extend", "jobs", "x", "--by", "99999999999d"), "at most 36500d (100 years)"),
        (("unlock", "jobs", "x", "--delay", "99999999999999d"), "at most 36500d (100 years)"),
        (("put", "jobs", "x", "--expires-in", "99999999999999d"), "at most 36500d (100 years)"),
        (("serve", "--no-mqtt", "--sweep-interval", "9" * 400), "at most 36500d (100 years)"),
        # As the config file refuses it: a sweep every nanosecond kept a core busy for nothing.
        (("serve", "--no-mqtt", "--sweep-interval", "0.000000001"), "at least 10ms; a loop"),
        (("serve", "--no-mqtt", "--sys-interval", "5ms"), "'5ms': at least 10ms; a loop that"),
        (("peek", "jobs", "--limit", "0"), "bad number '0': it must be at least 1"),
        (("peek", "jobs", "--limit", "-1"), "bad number '-1': it must be at least 1"),
        (("subscribe", "a", "--count", "0"), "bad number '0': it must be at least 1"),
        # A part between dots empty or over 63 characters: a traceback from the resolver, at
        # each retry of the XMPP component's connection.
        (("serve", "--mqtt", "a..b:0"), "'a..b:0': the host is no host name: each part"),
        (
            ("serve", "--no-mqtt", "--xmpp-component=x", "--xmpp-secret=s", _LONG_LABEL),
            "the host is no host name: each part between dots is 1 to 63 characters",
        ),
        # An IPv6 address without brackets: `::1` was host ':' and port 1, "cannot resolve".
        (("serve", "--mqtt", "::1"), "goes in brackets before the port: write [::1]:PORT"),
        (("serve", "--mqtt", "fe80::1"), "write [fe80::1]:PORT, e.g. [fe80::1]:1883"),
        # It said "use HOST:PORT", which 127.0.0.1:99999 is.
        (("serve", "--mqtt", "127.0.0.1:99999"), "port 99999 is out of range: use 0 to 65535"),
        (("serve", "--mqtt", "[::1]:65536"), "port 65536 is out of range: use 0 to 65535"),
        (("serve", "--mqtt", "127.0.0.1:-1"), "port -1 is out of range: use 0 to 65535"),
        (
            ("serve", "--no-mqtt", "--xmpp-component=x", "--xmpp-secret=s", "--xmpp-server=::1"),
            "'::1': an IPv6 address goes in brackets before the port",
        ),
        # The XMPP server's examples named MQTT's port, where serve's own listener may be
        (
            ("serve", "--no-mqtt", "--xmpp-component=x", "--xmpp-secret=s", "--xmpp-server=a"),
            "'a': use HOST:PORT, e.g. 127.0.0.1:5347",
        ),
        (
            (
                "serve",
                "--no-mqtt",
                "--xmpp-component=x",
                "--xmpp-secret=s",
                "--xmpp-server=fe80::1",
            ),
            "write [fe80::1]:PORT, e.g. [fe80::1]:5347",
        ),
    ],
)
def test_durations_and_limits_out_of_range_are_usage_errors(
    root: Path, args: tuple[str, ...], says: str
) -> None:
    ok(root, "put", "jobs", "seed")
    done = boxmq_cli(root, *args)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("put", "jobs", "x", "--priority", "\u0663"), "bad number '\u0663': use a whole number"),
        (("put", "jobs", "x", "--priority", "5_0"), "bad number '5_0': use a whole number"),
        (("publish", "a", "x", "--qos", "\u0661"), "bad number '\u0661': use a whole number"),
        (("subscribe", "a", "--qos", "\uff12"), "bad number '\uff12': use a whole number"),
        (("subscribe", "a", "--count", "\uff13"), "bad number '\uff13': use a whole number"),
        (("peek", "jobs", "--limit", "\u0662"), "bad number '\u0662': use a whole number"),
        (("get", "jobs", "--lock", "\uff130s"), "bad duration '\uff130s': use a number of"),
        (("put", "jobs", "x", "--expires-in", "\u0665m"), "bad duration '\u0665m': use a"),
        (("unlock", "jobs", "x", "--delay", "\u0661s"), "bad duration '\u0661s': use a"),
        (("serve", "--mqtt", "127.0.0.1:\uff11\uff18\uff18\uff13"), "use HOST:PORT"),
        (("serve", "--mqtt", "127.0.0.1:\u00b9"), "use HOST:PORT"),  # isdigit, not int()
    ],
)
def test_numbers_in_other_scripts_digits_are_usage_errors(
    root: Path, args: tuple[str, ...], says: str
) -> None:
    """int(), float() and `\\d` take Arabic-Indic and fullwidth digits; a person typing
    `--priority \u0663` gets no message at priority 3 but a usage error."""
    ok(root, "put", "jobs", "seed")
    done = boxmq_cli(root, *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert len(os.listdir(root / "jobs" / "target")) == 1


def test_json_shows_a_property_in_bytes_that_are_not_utf8_as_xnn(root: Path) -> None:
    (root / "h" / "working").mkdir(parents=True)
    (root / "h" / "target").mkdir()
    (root / "h" / "working" / "t").write_bytes(b"b")
    # The value %FF: a byte that is not UTF-8, as a script may URL-encode into a name.
    os.rename(root / "h" / "working" / "t", root / "h" / "target" / "4.x.T.0.c.r.t.kS=%FF")
    for command in (("peek", "h"), ("get", "h")):
        out = ok(root, "--json", *command)
        assert "\\udcff" not in out  # a lone surrogate, which JSON readers turn into U+FFFD
        document = json.loads(out)
        found = document[0] if isinstance(document, list) else document
        assert found["properties"] == {"k": "\\xff"}, command


def test_json_documents_have_the_keys_docs_cli_md_lists(root: Path) -> None:
    def keys(*args: str) -> list[str]:
        return list(json.loads(ok(root, "--json", *args)))

    common = ["id", "queue", "priority", "delivery", "locked-by", "lock-until", "properties"]
    get = [*common, "correlation-id", "reply-to", "type", "expires", "body"]
    ok(root, "subscribe", "t/#", "--name", "k", "--keep", "--idle", "0")
    assert keys("publish", "t/a", "x") == ["topic", "id"]
    [line] = ok(root, "--json", "subscribe", "t/#", "--name", "k", "--count", "1").splitlines()
    assert list(json.loads(line)) == ["topic", "id", "qos", "retained", "properties", "body"]
    assert keys("put", "q", "x") == ["queue", "id"]
    message_id = json.loads(ok(root, "--json", "get", "q"))["id"]
    assert keys("unlock", "q", message_id) == ["queue", "id", "done"]
    assert keys("get", "q") == get
    assert keys("ack", "q", message_id) == ["queue", "id", "done"]
    listing = json.loads(ok(root, "--json", "ls"))
    counts = ["ready", "locked", "done", "dead", "expired"]
    assert [list(row) for row in listing["queues"]] == [["queue", *counts]]
    assert [list(row) for row in listing["subscriptions"]] == [
        ["subscription", "subscriber", *counts]
    ]
    [row] = json.loads(ok(root, "--json", "peek", "q", "--state", "processed"))
    assert list(row) == ["id", "priority", "bytes", "deliveries", "properties"]
    assert keys("requeue", "q", "--from", "processed") == ["queue", "requeued", "left"]
    assert keys("purge", "t/#", "--subscriber", "k") == ["queue", "subscriber", "purged"]
    assert keys("unsubscribe", "t/#", "--name", "k") == ["subscription", "subscriber"]


def test_json_output_stays_json_with_nan_and_infinite_properties(root: Path) -> None:
    ok(root, "put", "q", "x", "-p", "a:double=nan", "-p", "b:double=inf", "-p", "c:float=-inf")
    expected = {"a": "NaN", "b": "Infinity", "c": "-Infinity"}
    got = json.loads(ok(root, "--json", "get", "q"), parse_constant=pytest.fail)
    assert got["properties"] == expected


def test_ls_shows_queue_folders_made_by_hand_under_any_name(root: Path) -> None:
    ok(root, "put", "jobs", "x")
    (root / "50%off" / "target").mkdir(parents=True)
    (root / "50%off" / "target" / "m").write_text("m")
    (root / b"\xff".decode(errors="surrogateescape") / "target").mkdir(parents=True)
    listing = json.loads(ok(root, "--json", "ls"))
    assert [(q["queue"], q["ready"]) for q in listing["queues"]] == [
        ("50%off", 1),
        ("\\xff", 0),
        ("jobs", 1),
    ]
    assert "50%off" in ok(root, "ls")


def test_ls_shows_a_queue_named_in_blanks_quoted_as_an_error_names_it(root: Path) -> None:
    """A queue named ' ' was a row with no name, and 'jobs ' one that read as 'jobs' (found
    by a walk of the docs): a name with a blank at an end is quoted, as an error quotes it
    (`no queue ' '`), and so is one that starts with a quote; --json gives them as they are."""
    names = [" ", "  ", "jobs", "jobs ", " x", "'x'", "q\u00a0"]
    for name in names:
        ok(root, "put", name, "m")
    rows = ok(root, "ls").splitlines()[1:]
    shown = [row.rsplit(None, 5)[0] for row in rows]
    assert sorted(shown) == sorted(
        ["' '", "'  '", "jobs", "'jobs '", "' x'", "\"'x'\"", "'q\\xa0'"]
    )
    assert [row.split()[-5:] for row in rows] == [["1", "0", "0", "0", "0"]] * len(names)
    listing = json.loads(ok(root, "--json", "ls"))
    assert sorted(q["queue"] for q in listing["queues"]) == sorted(names)
    done = boxmq_cli(root, "get", "nothing here ")
    assert "no queue 'nothing here '" in done.stderr  # the quoting errors use


def test_ls_quotes_a_name_holding_two_blanks_in_a_row_which_read_as_two_columns(
    root: Path,
) -> None:
    """A queue named 'a  b' was listed `a  b`, two blanks being what a table puts between
    its columns: a row that read as a queue `a` with a count `b` (found by a review). It is
    quoted, as a name with a blank at an end is; one blank, or a tab (shown \\t), is not."""
    for name in ("a  b", "a b", "a\tb"):
        ok(root, "put", name, "m")
    rows = ok(root, "ls").splitlines()[1:]
    assert sorted(row.rsplit(None, 5)[0] for row in rows) == ["'a  b'", "a b", "a\\tb"]
    ok(root, "put", "q", "m", "-p", "note=x  y")
    assert "note='x  y'" not in ok(root, "peek", "q")  # the properties cell: quoted whole
    assert "'note=x  y'" in ok(root, "peek", "q")


def test_the_line_saying_what_a_command_did_names_a_queue_as_ls_does(root: Path) -> None:
    """`purge`, `requeue`, `delete` and an empty `peek` printed the queue's name bare, where
    `ls` and `get` quote one with a blank at an end: `boxmq purge 'jobs '` said `jobs : 1
    message(s) deleted`, which read as the queue jobs (found by a review). The name is
    shown as `ls` shows it, in these lines and in the Ctrl-C notes."""
    ok(root, "put", "jobs ", "m")
    assert ok(root, "purge", "jobs ") == "'jobs ': 1 message(s) deleted from target/\n"
    assert ok(root, "peek", "jobs ") == "'jobs ': no messages in target/\n"
    assert ok(root, "requeue", "jobs ") == "'jobs ': 0 message(s) from error/ back to target/\n"
    assert ok(root, "delete", "jobs ") == "'jobs ': deleted, with its 0 message(s)\n"
    assert json.loads(ok(root, "--json", "put", "jobs ", "m"))["queue"] == "jobs "  # as it is


def test_the_lines_of_subscribe_unsubscribe_and_retained_name_a_filter_as_ls_does(
    root: Path,
) -> None:
    """`unsubscribe 't ' --name 'n  m'` said `unsubscribed: t  n  m`, three words for two
    names, and `subscribe`'s note on a kept subscription and an empty `retained` named the
    filter bare too (found by a review): each name is shown as `ls` shows it."""
    ok(root, "subscribe", "t ", "--name", "n  m", "--keep", "--idle", "0")
    done = boxmq_cli(root, "subscribe", "t ", "--name", "n  m", "--idle", "0")
    assert done.returncode == 0, done.stderr
    assert "reading the kept subscription 't ' of 'n  m'; it stays" in done.stderr
    assert ok(root, "unsubscribe", "t ", "--name", "n  m") == "unsubscribed: 't ' 'n  m'\n"
    assert ok(root, "retained", "x ").startswith("no retained messages match 'x ' under ")


def test_session_end_names_its_client_as_ls_does(root: Path) -> None:
    """`session end 'c '` said `ended the session of client c ` (found by a review)."""
    dead_server = f"{process_token().rsplit('-', 1)[0]}-1"  # this pid, a start long gone
    away = SessionRecord("c ", 3600, server=dead_server, disconnected_at=time.time())
    write_record(str(root), away)
    assert ok(root, "session", "end", "c ") == "ended the session of client 'c '\n"


def test_delete_s_refusal_names_the_queue_as_ls_does(root: Path) -> None:
    """The refusal of a queue whose messages are locked named it bare, `a  b: 1 message(s)
    locked`, where `ls` and delete's own line show `'a  b'` (two blanks are a column gap)."""
    ok(root, "put", "a  b", "x")
    ok(root, "get", "a  b")
    done = boxmq_cli(root, "delete", "a  b")
    _one_line_refusal(done, "boxmq delete: 'a  b': 1 message(s) locked: 1 by `boxmq get`")


def test_a_refusal_names_a_subscription_and_its_subscriber_as_ls_does(root: Path) -> None:
    """`get` and a second `subscribe` refused under a running run's --name said `news/# of
    r  x is read by ...`, one name or two for `ls`'s `'r  x'`."""
    ok(root, "publish", "news/today", "first", "--retain")
    with _subscribing(root, "--name", "r  x") as sub:
        try:
            done = boxmq_cli(root, "get", "news/#", "--subscriber", "r  x")
            _one_line_refusal(done, f"boxmq get: news/# of 'r  x' is read by process {sub.pid}")
            done = boxmq_cli(root, "subscribe", "news/#", "--name", "r  x", "--idle", "0")
            _one_line_refusal(done, "boxmq subscribe: news/# of 'r  x' is read by another")
        finally:
            sub.kill()
            sub.wait(timeout=30)


def test_the_refusals_for_an_mqtt_session_name_its_client_as_ls_does(root: Path) -> None:
    """`session end 'c '` of a session a running server holds, and a `subscribe` under its
    name, said `session of client c : ...` and `c  is the client id ...`."""
    held = SessionRecord("c ", 3600, server=process_token(), disconnected_at=time.time())
    write_record(str(root), held)
    done = boxmq_cli(root, "session", "end", "c ")
    _one_line_refusal(done, "boxmq session end: session of client 'c ': kept by boxmq serve")
    done = boxmq_cli(root, "subscribe", "t ", "--name", "c ", "--idle", "0")
    _one_line_refusal(done, "boxmq subscribe: 'c ' is the client id of an MQTT session")


def test_ls_names_no_two_queue_folders_alike_nor_a_folder_by_a_name_that_misses_it(
    root: Path,
) -> None:
    """A folder made by hand under a name that unescapes but is not boxmq's escape of it
    ("a%41", "caf%c3%a9" in lower case) was listed as "aA" and "café", which `peek` then
    called no queue; and beside the queue's own folder ("50%25off" by `put 50%off`) a folder
    "50%off" made one row of two, one queue's messages missing (found by a walk through the
    docs)."""
    for folder in ("a%41", "caf%c3%a9", "50%off"):
        (root / folder / "target").mkdir(parents=True)
        (root / folder / "target" / "m").write_text("m")
    ok(root, "put", "50%off", "x")
    ok(root, "put", "aA", "x")
    listing = json.loads(ok(root, "--json", "ls"))
    assert [(q["queue"], q["ready"]) for q in listing["queues"]] == [
        ("50%off", 1),
        ("50%off (not escaped)", 1),
        ("a%41", 1),
        ("aA", 1),
        ("caf%c3%a9", 1),
    ]
    done = boxmq_cli(root, "peek", "caf%c3%a9")  # the name ls gives: says how to reach it
    assert done.returncode == 1
    assert str(root / "caf%25c3%25a9") in done.stderr
    assert ok(root, "peek", "aA").count("\n") == 2  # the queue's own, with its one message


def test_ls_shows_a_hidden_queue_folder_made_by_hand_and_the_queue_of_that_name(
    root: Path,
) -> None:
    """`mv data/.x/working/m data/.x/target/4.m.T` made a queue folder `ls` skipped (hidden),
    its message counted nowhere, while a folder made by hand under any other name is listed;
    the queue ".x" of `put .x` has the folder %2Ex (found by a review)."""
    (root / ".x" / "working").mkdir(parents=True)
    (root / ".x" / "target").mkdir()
    (root / ".x" / "working" / "m").write_text("m")
    os.rename(root / ".x" / "working" / "m", root / ".x" / "target" / "4.m.T")
    ok(root, "put", "jobs", "x")  # and boxmq's own hidden folders (.spare ...) stay unlisted
    listing = json.loads(ok(root, "--json", "ls"))
    assert [(q["queue"], q["ready"]) for q in listing["queues"]] == [(".x", 1), ("jobs", 1)]
    done = boxmq_cli(root, "peek", ".x")  # says how to reach it
    assert done.returncode == 1
    assert str(root / "%2Ex") in done.stderr
    ok(root, "put", ".x", "y")
    listing = json.loads(ok(root, "--json", "ls"))
    assert [q["queue"] for q in listing["queues"]] == [".x", ".x (not escaped)", "jobs"]


def test_a_queue_folder_made_by_hand_unescaped_says_how_to_reach_it(root: Path) -> None:
    # `ls` lists 50%off, so "no queue '50%off' (see `boxmq ls`)" left the user stuck:
    # the error names the folder and the name to rename it to (docs/file-format.md).
    ok(root, "put", "jobs", "x")
    (root / "50%off" / "target").mkdir(parents=True)
    (root / "50%off" / "target" / "m").write_text("m")
    done = boxmq_cli(root, "get", "50%off")
    assert done.returncode == 1
    assert "rename" in done.stderr
    assert str(root / "50%25off") in done.stderr
    os.rename(root / "50%off", root / "50%25off")
    assert ok(root, "get", "50%off").endswith("\n\nm")


@pytest.mark.parametrize("command", [("get",), ("peek",), ("ack", "1-2")])
def test_a_queue_named_by_its_folder_s_name_is_told_the_queue_s_name(
    root: Path, command: tuple[str, ...]
) -> None:
    """`put 'my jobs'` makes the folder my%20jobs; a user who then gave that name, as `ls
    data` shows it, was told to rename boxmq's own folder to my%2520jobs (found on the
    README's tour, a queue name with a space): it is the queue 'my jobs', to be named so."""
    ok(root, "put", "my jobs", "x")
    done = boxmq_cli(root, command[0], "my%20jobs", *command[1:])
    assert done.returncode == 1
    assert "rename" not in done.stderr, done.stderr
    assert "the folder of the queue 'my jobs'" in done.stderr, done.stderr
    assert (root / "my%20jobs" / "target").is_dir()
    assert not (root / "my%2520jobs").exists()


def test_peek_json_gives_properties_as_an_object_as_get_does(root: Path) -> None:
    ok(root, "put", "q", "x", "-p", "tenant=a,b", "-p", "n:int=3")
    [row] = json.loads(ok(root, "--json", "peek", "q"))
    assert row["properties"] == {"tenant": "a,b", "n": 3}
    assert "tenant=a,b" in ok(root, "peek", "q")  # the table keeps NAME=VALUE


def test_peek_shows_when_a_message_expires_as_get_does(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`get` showed `expires` and `peek` did not, neither in its table nor in --json: a queue's
    messages could not be told from those about to go to expired/ without locking each."""
    with boxmq.open(root, fsync="never") as box:
        soon = box.queue("jobs").put(b"soon", priority=9, expires_in=3600)
        box.queue("jobs").put(b"never")
    rows = json.loads(_in_process(root, capsys, "--json", "peek", "jobs"))
    assert [(row["id"], "expires" in row) for row in rows] == [(soon, True), (rows[1]["id"], False)]
    header, first, second = _in_process(root, capsys, "peek", "jobs").splitlines()
    assert "EXPIRES" in header.split()
    got = json.loads(_in_process(root, capsys, "--json", "get", "jobs"))
    assert (got["id"], got["expires"]) == (soon, rows[0]["expires"])
    assert f"  {got['expires']}" in first
    assert got["expires"] not in second


def test_peek_counts_a_locked_message_s_delivery_as_get_does(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`get` said `delivery 1` while `peek --state processing` said DELIVERIES 0 for the same
    message: peek counts the delivery under way too, and the count goes on as get's does."""

    def deliveries(state: str) -> int:
        [row] = json.loads(_in_process(root, capsys, "--json", "peek", "q", "--state", state))
        return int(row["deliveries"])

    ok(root, "put", "q", "x")
    assert deliveries("target") == 0
    got = json.loads(_in_process(root, capsys, "--json", "get", "q"))
    assert (got["delivery"], deliveries("processing")) == (1, 1)
    _in_process(root, capsys, "unlock", "q", got["id"])
    assert deliveries("target") == 1
    got = json.loads(_in_process(root, capsys, "--json", "get", "q"))
    assert (got["delivery"], deliveries("processing")) == (2, 2)
    table = _in_process(root, capsys, "peek", "q", "--state", "processing").splitlines()
    assert dict(zip(table[0].split(), table[1].split(), strict=False))["DELIVERIES"] == "2"


def test_publish_with_mqtt_properties_too_long_for_a_name_keeps_them_in_a_side_file(
    root: Path,
) -> None:
    """docs/mqtt.md: the `mqtt.*` examples, combined, take more than a name's 135 bytes. They
    go to a side file as MQTT v5 properties (docs/file-format.md), and read back the same."""
    ok(root, "subscribe", "jobs/#", "--name", "w", "--keep", "--idle", "0.1")
    given = {
        "mqtt.response-topic": "replies/dev1",
        "mqtt.content-type": "application/json",
        "mqtt.correlation-data": "cmVxLTc=",
        "tenant": "acme",
    }
    pairs = [arg for name, value in given.items() for arg in ("-p", f"{name}={value}")]
    ok(root, "publish", "jobs/a", "{}", *pairs)
    [name] = os.listdir(next(root.glob("topic-root/*/.subscriptions/client.w/target")))
    assert "bx_v5hS=" in name  # the side file's key
    assert "tenant" not in name
    [record] = ok(root, "--json", "subscribe", "jobs/#", "--name", "w", "--count", "1").splitlines()
    got = json.loads(record)
    assert got["properties"] == given
    assert (got["reply-to"], got["correlation-id"]) == ("replies/dev1", "req-7")


def test_a_request_whose_reply_to_leaves_no_room_for_the_side_files_key_is_stored(
    root: Path,
) -> None:
    """docs/file-format.md "Properties too long for the name": a 10-character topic, a
    reply-to, a correlation id, an expiration and a content type were refused as too long
    (140 bytes), since the key took the room the content type left. The reply-to and the
    correlation id go to the side file too then, where a v5 subscriber gets them, and every
    reader shows them as the message's own, as for an MQTT v5 request. (A queue's name has
    no topic: its reply-to is longer here.)"""
    replies = {"cfg/line-4": "cfg/answers", "jobs": "cfg/answers/" + "a" * 50}
    fields = ["--correlation-id", "req-7", "--expires-in", "60s"]
    content_type = ["-p", "mqtt.content-type=application/json"]
    ok(root, "subscribe", "cfg/#", "--name", "w", "--keep", "--idle", "0.1")
    for command, where in (("publish", "cfg/line-4"), ("put", "jobs")):
        ok(root, command, where, "x", "--reply-to", replies[where], *fields, *content_type)
    [name] = os.listdir(next(root.glob("topic-root/*/.subscriptions/client.w/target")))
    [queued] = os.listdir(root / "jobs" / "target")
    for each in (name, queued):
        assert "bx_v5hS=" in each  # the side file's key, and no field 5 or 6 any more
        assert "req-7" not in each
        assert "answers" not in each
    [record] = ok(root, "--json", "subscribe", "cfg/#", "--name", "w", "--count", "1").splitlines()
    got = json.loads(ok(root, "--json", "get", "jobs"))
    [peeked] = json.loads(ok(root, "--json", "peek", "jobs", "--state", "processing"))
    for each, where in ((json.loads(record), "cfg/line-4"), (got, "jobs"), (peeked, "jobs")):
        assert (each["reply-to"], each["correlation-id"]) == (replies[where], "req-7")
        assert each["properties"]["mqtt.content-type"] == "application/json"
        assert each["expires"] is not None


def test_subscribe_keep_keeps_a_share_group_membership(root: Path) -> None:
    # --keep kept plain subscriptions only: a share-group member left the group on exit, and
    # the last member out deleted the group with what it was about to collect.
    group = "$share/etl/sensors/#"
    ok(root, "subscribe", group, "--name", "w1", "--keep", "--idle", "0.1")
    ok(root, "publish", "sensors/a", "one")
    ok(root, "publish", "sensors/b", "two")
    [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (row["subscription"], row["subscriber"], row["ready"]) == (group, "w1", 2)
    done = boxmq_cli(root, "subscribe", group, "--name", "w1", "--count", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "sensors/a one\n"
    assert f"boxmq unsubscribe '{group}' --name w1" in done.stderr  # it stays, and how not
    [row] = json.loads(ok(root, "--json", "ls"))["subscriptions"]
    assert (row["subscriber"], row["ready"]) == ("w1", 1)
    ok(root, "unsubscribe", group, "--name", "w1")
    assert json.loads(ok(root, "--json", "ls"))["subscriptions"] == []


def test_subscribe_to_a_share_group_without_keep_leaves_it(root: Path) -> None:
    group = "$share/etl/sensors/#"
    ok(root, "subscribe", group, "--name", "w1", "--idle", "0.1")
    assert json.loads(ok(root, "--json", "ls"))["subscriptions"] == []  # the last one out


# How the CLI ends its line for a write the full disk refused (docs/cli.md, exit status 1).
_DISK_FULL = (
    "No space left on device: the disk is full (df -h), or out of inodes (df -i); "
    "free some space (or choose another --data folder)"
)


def test_publish_retain_on_a_full_disk_names_the_file(tmp_path: Path) -> None:
    """As put and a plain publish do (docs/cli.md, exit status 1): the retained message's
    new file is the one the disk has no room for; the topic keeps its retained message."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        ok(root, "subscribe", "r/#", "--name", "k1", "--keep", "--idle", "0.1s")
        ok(root, "publish", "r/a", "first", "--retain")
        disk.fill()
        done = boxmq_cli(root, "publish", "r/a", "x" * 60_000, "--retain")
        assert done.returncode == 1
        line = done.stderr.strip()
        assert line.startswith(f"boxmq publish: {retained_folder(root)}/"), line
        assert line.endswith(_DISK_FULL), line
        disk.free()
        retained = ok(root, "subscribe", "r/#", "--idle", "0.3s")
        assert retained == "r/a first\n"


def test_subscribe_on_a_full_disk_names_the_record_it_could_not_write(tmp_path: Path) -> None:
    """The record's write was refused when its file closed, an OSError naming no file:
    `boxmq subscribe: No space left on device: the disk is full; free some space`, without
    where. No subscription is left, and one made once space is back gets what is sent."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        ok(root, "put", "q", "first")
        disk.fill()
        done = boxmq_cli(root, "subscribe", "u/#", "--name", "k2", "--keep", "--idle", "0.1s")
        assert done.returncode == 1
        line = done.stderr.strip()
        folder = root / "topic-root" / "u%2F%23" / ".subscriptions" / "client.k2"
        assert line.startswith(f"boxmq subscribe: {folder}/.tmp-"), line
        assert line.endswith(_DISK_FULL), line
        disk.free()
        assert json.loads(ok(root, "--json", "ls"))["subscriptions"] == []
        ok(root, "subscribe", "u/#", "--name", "k2", "--keep", "--idle", "0.1s")
        ok(root, "publish", "u/a", "second")
        assert ok(root, "subscribe", "u/#", "--name", "k2", "--idle", "0.2s") == "u/a second\n"


def test_a_request_s_side_file_a_full_disk_refuses_is_named(tmp_path: Path) -> None:
    """A --reply-to and --correlation-id too long for a name go to a side file in
    .properties/, whose write was refused when its file closed, an OSError naming no file:
    `boxmq publish: No space left on device: ...`, without where (the MQTT door's log line
    alike). No side file or temporary is left, and the request sent again once space is
    back is stored once, whole."""
    with small_disk(tmp_path / "disk") as disk:
        root = disk.path / "data"
        ok(root, "subscribe", "cfg/#", "--name", "k3", "--keep", "--idle", "0.1s")
        request = ["publish", "cfg/line-4", "x", "--reply-to", "cfg/answers/" + "a" * 300]
        request += ["--correlation-id", "req-" + "7" * 300]
        disk.fill()
        done = boxmq_cli(root, *request)
        assert done.returncode == 1
        line = done.stderr.strip()
        assert line.startswith(f"boxmq publish: {root / '.properties'}/.tmp-"), line
        assert line.endswith(_DISK_FULL), line
        assert list((root / ".properties").iterdir()) == []
        disk.free()
        ok(root, *request)
        [got] = json.loads(ok(root, "--json", "peek", "cfg/#", "--subscriber", "k3"))
        assert got["reply-to"] == "cfg/answers/" + "a" * 300, got
        assert got["correlation-id"] == "req-" + "7" * 300, got


def test_serve_with_no_mqtt_and_mqtt_is_a_usage_error_naming_both(root: Path) -> None:
    """Not a broker that starts with no listener while --mqtt says where it should listen."""
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "serve"]
    command += ["--no-mqtt", "--mqtt", "127.0.0.1:0"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("serve started, --mqtt ignored")
    assert done.returncode == 2
    assert "argument --mqtt: not allowed with argument --no-mqtt" in done.stderr
    assert not root.exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--xmpp-server", "127.0.0.1:5347"], "--xmpp-server needs --xmpp-component NAME"),
        (
            ["--xmpp-secret", "s", "--xmpp-lock-timeout", "5s"],
            "--xmpp-secret and --xmpp-lock-timeout need",
        ),
    ],
)
def test_serve_with_xmpp_flags_and_no_component_is_a_usage_error_saying_what_to_add(
    root: Path, flags: list[str], says: str
) -> None:
    """Exit 2 as every usage error, said before the root is made or recovered."""
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "serve", "--no-mqtt"]
    try:
        done = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("serve started, the --xmpp-* flags ignored")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: boxmq serve ")
    assert f"boxmq serve: error: {says}" in done.stderr
    assert not root.exists()


@pytest.mark.parametrize("where", ["after", "before"])
def test_serve_with_json_is_a_usage_error_saying_serve_only_logs(root: Path, where: str) -> None:
    """`serve --json` was taken and did nothing: serve prints no output, only its log."""
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root)]
    command += ["serve", "--json"] if where == "after" else ["--json", "serve"]
    try:
        done = subprocess.run([*command, "--no-mqtt"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("serve started, --json ignored")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: boxmq serve ")
    assert "boxmq serve: error: --json: serve prints no output, only its log on stderr" in (
        done.stderr
    )
    assert not root.exists()


def test_serve_help_does_not_offer_json(root: Path) -> None:
    """`boxmq serve --help` listed --json, which serve refuses (above): a user who read it
    got a usage error for an option the help had offered."""
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "serve", "--help"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "--data" in done.stdout  # the options every command shares, --json left out
    assert "--json" not in done.stdout


def _cli(*words: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "boxmq.cli", *words]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_help_prints_a_command_s_options_as_its_help_flag_does(root: Path) -> None:
    """`boxmq help put`, as git and pip take it, was `invalid choice: 'help'`: it prints
    what `boxmq put --help` prints, and `boxmq help` alone the list of commands."""
    for words in (["help", "put"], ["--data", str(root), "help", "requeue"]):
        done = _cli(*words)
        assert done.returncode == 0, done.stderr
        assert done.stdout == _cli(words[-1], "--help").stdout
    top = _cli("help")
    assert top.returncode == 0, top.stderr
    assert top.stdout == _cli("--help").stdout
    assert not root.exists()  # help opens no root


def test_help_of_no_command_is_told_the_one_meant() -> None:
    done = _cli("help", "requeu")
    assert done.returncode == 2
    assert "invalid choice: 'requeu'" in done.stderr
    assert "(did you mean requeue?)" in done.stderr


def test_peek_of_processing_shows_when_each_lock_ends_and_which_ended(root: Path) -> None:
    """A lock past its deadline still names its holder until a sweep sends the message
    back; peek says until when each lock runs, and which ended, so nobody takes it for held."""
    ok(root, "put", "jobs", "held")
    ok(root, "put", "jobs", "dropped")
    ok(root, "get", "jobs", "--lock", "1h", "--consumer", "alice")
    ok(root, "get", "jobs", "--lock", "1h", "--consumer", "bob")
    processing = root / "jobs" / "processing"
    for locked in os.listdir(processing):  # bob's lock ended a minute ago (his process hung)
        name, lock = split_lock(locked)
        if lock is not None and lock.owner == "bob":
            ended = Lock(lock.owner, int((time.time() - 60) * 1000), lock.token)
            os.rename(processing / locked, processing / locked_name(name, ended))
    rows = json.loads(ok(root, "--json", "peek", "jobs", "--state", "processing"))
    until = {row["locked-by"]: row["lock-until"] for row in rows}
    assert set(until) == {"alice", "bob"}
    assert until["alice"] > until["bob"]  # ISO times, alice's in an hour, bob's a minute ago
    table = ok(root, "peek", "jobs", "--state", "processing").splitlines()
    assert table[0].split()[-2:] == ["LOCKED-BY", "LOCK-UNTIL"]
    [alice] = [line for line in table if " alice " in line]
    [bob] = [line for line in table if " bob " in line]
    assert bob.endswith("(ended)")
    assert not alice.endswith("(ended)")


def test_peek_says_a_lock_is_held_by_a_get_and_until_when(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock `get` took (`boxmq get`, Queue.get) is held by hand: no running consumer of its
    name settles it, only an ack by id or its deadline does. peek showed it as any
    consumer's lock, the name alone; it says it is get's now, beside when it ends."""
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        jobs.put("running")
        jobs.put("by hand")
        with jobs.consumer("w") as consumer:
            assert consumer.receive(timeout=5) is not None
            got = jobs.get("alice", lock_timeout=3600)
            assert got is not None
            peeked = {str(p.holder): p for p in jobs.peek(state="processing")}
            assert (peeked["alice"].by_get, peeked["w"].by_get) == (True, False)
            processing = ("peek", "jobs", "--state", "processing")
            rows = json.loads(_in_process(root, capsys, "--json", *processing))
            by_holder = {row["locked-by"]: row for row in rows}
            assert (by_holder["alice"]["by-get"], "by-get" in by_holder["w"]) == (True, False)
            header, *lines = _in_process(root, capsys, *processing).splitlines()
            assert header.split()[-2:] == ["LOCKED-BY", "LOCK-UNTIL"]
            [line] = [line for line in lines if "alice" in line]
            until = datetime.datetime.fromtimestamp(got.lock_deadline, datetime.UTC)
            assert line.endswith(f"alice (get)  {until.isoformat(timespec='seconds')}")


@pytest.mark.parametrize(
    ("args", "data", "says"),
    [
        (("--data", "", "put", "q", "x"), None, "--data is empty: give the root folder"),
        (("ls",), "", "$BOXMQ_DATA is empty: give it the root folder, or unset it"),
        (("serve", "--config", ""), None, "--config is empty: give a TOML file, or leave"),
    ],
)
def test_an_empty_data_or_config_is_a_usage_error(
    tmp_path: Path, args: tuple[str, ...], data: str | None, says: str
) -> None:
    """The system reads "" as the current folder: `put --data ""` made its queue there, and
    `--config ""` said "cannot read config file .: Is a directory"."""
    env = os.environ.copy()
    env.pop("BOXMQ_DATA", None)
    if data is not None:
        env["BOXMQ_DATA"] = data
    command = [sys.executable, "-m", "boxmq.cli", *args]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60
    )
    assert done.returncode == 2
    assert says in done.stderr
    assert list(tmp_path.iterdir()) == []  # no queue, no ./data made


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_body_over_the_limit_is_refused_and_nothing_sent(
    root: Path,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`put --file /dev/zero` read until memory ran out: past MAX_BODY it is refused, having
    read one byte more. The limit made small here, so that the test reads little."""
    monkeypatch.setattr(cli_message, "MAX_BODY", 10)
    over = root.parent / "over"
    over.write_bytes(b"x" * 11)
    fits = root.parent / "fits"
    fits.write_bytes(b"y" * 10)
    for command in ("put", "publish"):
        if how == "file":
            status = cli.main(["--data", str(root), command, "q", "--file", str(over)])
        else:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(over.read_bytes())))
            status = cli.main(["--data", str(root), command, "q"])
        error = capsys.readouterr().err
        assert status == 1
        where = f"--file {over}" if how == "file" else "the standard input"
        assert f"boxmq {command}: {where} holds more than 10 bytes" in error
        assert "nothing is sent" in error
    assert cli.main(["--data", str(root), "put", "q", "--file", str(fits)]) == 0
    with boxmq.open(root) as box:
        message = box.queue("q").get("t")
        assert message is not None
        assert message.body == b"y" * 10  # the one that fits, and only it
        assert box.queue("q").get("t") is None


def test_a_file_over_the_limit_is_refused_before_its_body_is_read(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`put --file` of a 300 MB file read 256 MiB (284 MB of RSS) before refusing it, though
    a regular file's size is known from the start; the bytes this process read (Linux's
    rchar) show the body is not read now. The limit made small, and the file sparse."""
    monkeypatch.setattr(cli_message, "MAX_BODY", 1 << 20)
    over = root.parent / "over"
    with open(over, "wb") as sparse:
        sparse.truncate((1 << 20) + 1)
    before = _bytes_read()
    status = cli.main(["--data", str(root), "put", "q", "--file", str(over)])
    read = _bytes_read() - before
    assert status == 1
    assert f"--file {over} holds more than {1 << 20} bytes" in capsys.readouterr().err
    assert read < 1 << 16  # the config and the root's few small files, not the megabyte
    with boxmq.open(root) as box:
        assert box.queue("q").get("t") is None


def _bytes_read() -> int:
    """What this process has read so far, from every file and pipe (/proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no rchar")


def test_put_reading_the_body_from_a_terminal_says_so(root: Path) -> None:
    """`boxmq put jobs` with BODY forgotten waited on the terminal, saying nothing."""
    terminal, its_end = os.openpty()
    try:
        put = subprocess.Popen(
            [sys.executable, "-m", "boxmq.cli", "--data", str(root), "put", "jobs"],
            stdin=its_end,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert put.stderr is not None
        said = read_line(put.stderr, 30) or "nothing"  # before anything is typed
        os.write(terminal, b"hi\n\x04")  # a line, then Ctrl-D
        out, _ = put.communicate(timeout=60)
    finally:
        put.kill()  # reaped by communicate already, unless that timed out: then waited for here
        put.wait(timeout=30)
        os.close(terminal)
        os.close(its_end)
    assert said == (
        "boxmq put: reading the body from the terminal: type it, then Ctrl-D on a line of its "
        "own (Ctrl-C: nothing is sent)\n"
    )
    assert put.returncode == 0
    [name] = os.listdir(root / "jobs" / "target")
    assert decode(name).message_id == out.strip()
    assert (root / "jobs" / "target" / name).read_bytes() == b"hi\n"


def test_get_of_only_delayed_messages_says_they_wait(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ls` counts a message an `unlock --delay` holds back as READY; `get` said "no message
    is ready", no more."""
    data = ["--data", str(root), "--fsync", "never"]
    assert cli.main([*data, "put", "jobs", "x"]) == 0
    assert cli.main([*data, "--json", "get", "jobs"]) == 0
    got = json.loads(capsys.readouterr().out.splitlines()[-1])["id"]
    assert cli.main([*data, "unlock", "jobs", got, "--delay", "1h"]) == 0
    capsys.readouterr()
    assert cli.main([*data, "get", "jobs"]) == 3
    assert capsys.readouterr().err == (
        "boxmq get: no message is ready in 'jobs' (1 in target/ wait out an `unlock --delay`: "
        "`boxmq peek jobs` says until when)\n"
    )


def test_peek_shows_until_when_an_unlock_delay_holds_a_message_back(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ls` counts a message an `unlock --delay` holds back as READY and `get` passes it by,
    but `peek` showed nothing of the delay: no one could tell when it would be ready."""
    data = ["--data", str(root), "--fsync", "never"]
    assert cli.main([*data, "put", "jobs", "held"]) == 0
    assert cli.main([*data, "--json", "get", "jobs"]) == 0
    held = json.loads(capsys.readouterr().out.splitlines()[-1])["id"]
    before = time.time()
    assert cli.main([*data, "unlock", "jobs", held, "--delay", "1h"]) == 0
    assert cli.main([*data, "put", "jobs", "ready"]) == 0
    capsys.readouterr()
    rows = json.loads(_in_process(root, capsys, "--json", "peek", "jobs"))
    assert [(row["id"] == held, "delay-until" in row) for row in rows] == [
        (True, True),
        (False, False),
    ]
    ready_at = datetime.datetime.fromisoformat(rows[0]["delay-until"]).timestamp()
    assert int(before) + 3600 <= ready_at <= time.time() + 3600  # UTC, as LOCK-UNTIL
    header, first, second = _in_process(root, capsys, "peek", "jobs").splitlines()
    assert "DELAY-UNTIL" in header.split()
    assert first.endswith(f"  {rows[0]['delay-until']}")
    assert rows[0]["delay-until"] not in second


@pytest.mark.parametrize(
    ("command", "name", "wrong"),
    [
        (("get", "jobs"), "", "is empty"),
        (("ack", "jobs", "some-id"), "a/b", "contains '/'"),
    ],
)
def test_a_consumer_name_refused_says_what_a_name_may_be(
    root: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...], name: str, wrong: str
) -> None:
    """`--consumer ''` and `--consumer a/b` said the name "is empty or contains NUL or '/'":
    what was wrong, not what to give."""
    data = ["--data", str(root), "--fsync", "never"]
    assert cli.main([*data, "put", "jobs", "x"]) == 0
    capsys.readouterr()
    assert cli.main([*data, *command, "--consumer", name]) == 1
    assert capsys.readouterr().err == (
        f"boxmq {command[0]}: consumer name {name!r} {wrong}: a name goes into the lock's file "
        "name, so give 1 to 40 bytes once percent-encoded (A-Z a-z 0-9 - _ are 1 byte each, "
        "any other character 3 per UTF-8 byte), without '/' or NUL, such as 'worker-1'\n"
    )
    assert json.loads(ok(root, "--json", "ls"))["queues"][0]["ready"] == 1  # left as it was


@pytest.mark.parametrize("command", [("put", "jobs"), ("publish", "t")], ids=["put", "publish"])
@pytest.mark.parametrize("reply_to", ["a/+", "replies/#", "c++"])
def test_a_reply_to_with_a_wildcard_is_refused_as_a_response_topic_property_is(
    root: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...], reply_to: str
) -> None:
    """`-p mqtt.response-topic=a/+` was a usage error while `--reply-to a/+` was stored, and
    then left out (logged) of what MQTT v5 subscribers get: a wildcard makes a filter, never a
    queue or topic to answer on. Both are usage errors now, before the root is made."""
    data = ["--data", str(root), "--fsync", "never"]
    for given in (["--reply-to", reply_to], ["-p", f"mqtt.response-topic={reply_to}"]):
        with pytest.raises(SystemExit) as usage:
            cli.main([*data, *command, "x", *given])
        assert usage.value.code == 2, given
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main([*data, *command, "x", "--reply-to", reply_to])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"boxmq {command[0]}: error: argument --reply-to: {reply_to!r} holds a wildcard ('+' or "
        "'#'), which makes a topic filter: a reply goes to one queue or topic, named without "
        "them (as the property mqtt.response-topic is)"
    )
    assert not root.exists()
    assert cli.main([*data, *command, "x", "--reply-to", ""]) == 0  # no value, as before
    assert cli.main([*data, *command, "x", "--reply-to", "replies/dev1"]) == 0


@pytest.mark.parametrize(
    ("name", "known"),
    [
        ("mqtt.content_type", "mqtt.content-type"),
        ("MQTT.Content-Type", "mqtt.content-type"),
        ("mqtt.corelation-data", "mqtt.correlation-data"),
        ("mqtt.responsetopic", "mqtt.response-topic"),
        ("mqtt.payload_format", "mqtt.payload-format"),
        ("mqtt.correlation-id", "mqtt.correlation-data"),
        ("mqtt.content-length", None),  # a v5 publisher's own names: no warning
        ("mqtt.payload-format-indicator", None),
        ("mqtt.topic", None),
        ("content_type", None),
        ("mqtt.content-type", None),  # the v5 property itself
    ],
)
def test_an_mqtt_name_close_to_a_v5_property_is_stored_with_a_warning(
    root: Path, capsys: pytest.CaptureFixture[str], name: str, known: str | None
) -> None:
    """`-p mqtt.content_type=json` went as a User Property without a word, where the user
    meant Content Type: a typo no one saw. A v5 publisher may use `mqtt.*` names of its own,
    so it is still stored, as given; one that looks like one of the four gets a warning."""
    data = ["--data", str(root), "--fsync", "never"]
    assert cli.main([*data, "--json", "put", "q", "x", "-p", f"{name}=json"]) == 0
    err = capsys.readouterr().err
    if known is None:
        assert err == ""
    else:
        assert err == (
            f"boxmq put: warning: property {name!r} goes as a property of its own (a User "
            f"Property to MQTT v5 subscribers), not as {known!r}, the v5 property it looks "
            f"like; if you meant that one, write -p {known}=...\n"
        )
    [row] = json.loads(_in_process(root, capsys, "--json", "peek", "q"))
    assert row["properties"] == {name: "json"}


def test_a_kept_subscription_whose_record_was_edited_to_no_local_0_is_written_again(
    root: Path,
) -> None:
    """A record edited by hand to "no_local": 0 (or null) was read as it was, and subscribe
    then refused "no_local is True or False, not 0", an option `boxmq subscribe` has not: the
    record is told of as unreadable, and the subscribe writes it again (found by a second
    read)."""
    ok(root, "subscribe", "news/#", "--name", "reader", "--keep", "--idle", "0")
    [record] = root.glob("topic-root/*/.subscriptions/client.reader/.subscription")
    record.write_text(json.dumps({**json.loads(record.read_text()), "no_local": 0}))
    done = boxmq_cli(root, "subscribe", "news/#", "--name", "reader", "--idle", "0")
    assert done.returncode == 0, done.stderr
    assert json.loads(record.read_text())["no_local"] is False


def test_ls_counts_a_lock_whose_deadline_passed_as_ready_as_peek_says_it_ended(root: Path) -> None:
    """Nobody holds it (a get takes it next, a delete does not count it): LOCKED said a
    consumer still did, until a get or a sweep moved it back to target/."""
    with boxmq.open(root) as box:
        box.queue("jobs").put_many([b"held", b"ended"])
    now_ms = int(time.time() * 1000)
    deadlines = [now_ms + 600_000, now_ms - 1000]
    for name, deadline in zip(sorted(os.listdir(root / "jobs" / "target")), deadlines, strict=True):
        locked = locked_name(name, Lock(ConsumerId("worker"), deadline, ""))
        os.rename(root / "jobs" / "target" / name, root / "jobs" / "processing" / locked)
    listed = json.loads(ok(root, "ls", "--json"))["queues"]
    assert [(q["queue"], q["ready"], q["locked"]) for q in listed] == [("jobs", 1, 1)]
    assert sorted(os.listdir(root / "jobs" / "processing")) != []  # ls only reads
    with boxmq.open(root) as box:  # the API counts as ls does: it counted both locked
        counts = box.queue("jobs").counts()
        assert (counts.ready, counts.locked) == (1, 1)
    assert ok(root, "peek", "jobs", "--state", "processing").count("(ended)") == 1


def test_peek_says_a_lock_ended_and_a_delay_at_the_boxs_clock_as_ls_counts(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ls` counts at the box's clock, `peek` read time.time() for "(ended)" and DELAY-UNTIL:
    on a clock of its own (a ManualClock, three years behind the wall) both locks had ended
    and the delay had passed, though `ls` counted one lock held. It reads the box's now."""
    clock = ManualClock()
    monkeypatch.setattr(boxmq, "open", functools.partial(boxmq.open, clock=clock))
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"ends", b"held", b"later"])
        taken = [jobs.get("w", lock_timeout=timeout) for timeout in (10, 100, 100)]
        later = taken[2]
        assert later is not None
        jobs.unlock(later.id, "w", delay=50)
    clock.advance(10)
    [listed] = json.loads(_in_process(root, capsys, "ls", "--json"))["queues"]
    assert (listed["ready"], listed["locked"]) == (2, 1)
    assert _in_process(root, capsys, "peek", "jobs", "--state", "processing").count("(ended)") == 1
    [delayed] = json.loads(_in_process(root, capsys, "--json", "peek", "jobs"))
    assert delayed["delay-until"]


def test_ls_counts_a_subscriptions_lock_whose_deadline_passed_as_ready_as_its_queues(
    root: Path,
) -> None:
    """The queue rows counted such a lock READY (nobody holds it), the subscription rows still
    LOCKED: one `ls`, two answers. The API's listing counted the files as they lie: it counts
    as `ls` does now."""
    with boxmq.open(root) as box:
        folder = Path(box.topics.attach_dropbox("news/#", "reader"))
        box.publish("news/a", b"held")
        box.publish("news/b", b"ended")
    now_ms = int(time.time() * 1000)
    deadlines = [now_ms + 600_000, now_ms - 1000]
    for name, deadline in zip(sorted(os.listdir(folder / "target")), deadlines, strict=True):
        locked = locked_name(name, Lock(ConsumerId("worker"), deadline, ""))
        os.rename(folder / "target" / name, folder / "processing" / locked)
    listed = json.loads(ok(root, "ls", "--json"))["subscriptions"]
    assert [(s["subscription"], s["ready"], s["locked"]) for s in listed] == [("news/#", 1, 1)]
    assert len(os.listdir(folder / "processing")) == 2  # ls only reads
    with boxmq.open(root) as box:
        (info,) = box.topics.subscriptions()
        assert (info.counts.ready, info.counts.locked) == (1, 1)


@pytest.mark.parametrize(("name", "shown"), [("jobs", "jobs"), ("jobs ", "'jobs '")])
def test_a_purge_stopped_by_ctrl_c_says_what_it_left(
    root: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    shown: str,
) -> None:
    # A purge of 200,000 messages ran 100 s (a disk that discards freed blocks) saying
    # nothing; a Ctrl-C then ended it with no word of how far it went. The queue is named
    # as `ls` names it ('jobs ' was `of jobs ,`).
    with boxmq.open(root, fsync="never") as box:
        box.queue(name).put_many([b"x"] * 50)
    removed = 0
    remove = Dropbox.remove

    def ctrl_c_after_ten(self: Dropbox, state: State, name: str) -> bool:
        nonlocal removed
        if removed == 10:
            raise KeyboardInterrupt  # what SIGINT raises between two deletes
        removed += 1
        return remove(self, state, name)

    monkeypatch.setattr(Dropbox, "remove", ctrl_c_after_ten)
    assert cli.main(["--data", str(root), "purge", name]) == 130
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == (
        f"boxmq purge: interrupted: 40 message(s) left in target/ of {shown}, the others "
        "deleted (purge again to delete them)\n"
    )
    with boxmq.open(root) as box:
        assert box.queue(name, create=False).counts().ready == 40


def test_a_purge_stopped_by_ctrl_c_counts_only_the_folder_it_purged(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The line of the test above counted every folder of the queue (`ls`'s counts: six
    # listings, processed/ and its 200,000 done ones too) for the one it names (found at an
    # earlier stop). A lock whose deadline passed is in no count of target/: a purge leaves it.
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"x"] * 21)
        held = jobs.get(lock_timeout=0.001)
        assert held is not None
    listed: list[str] = []
    real_scandir, real_listdir = os.scandir, os.listdir

    def scandir(path: str) -> object:
        listed.append(path)
        return real_scandir(path)

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return real_listdir(path)

    def ctrl_c(self: Dropbox, state: State, name: str) -> bool:
        monkeypatch.setattr(os, "scandir", scandir)  # the listings after the interrupt
        monkeypatch.setattr(os, "listdir", listdir)
        raise KeyboardInterrupt  # what SIGINT raises before the first delete

    monkeypatch.setattr(Dropbox, "remove", ctrl_c)
    assert cli.main(["--data", str(root), "purge", "jobs"]) == 130
    monkeypatch.undo()
    assert capsys.readouterr().err == (
        "boxmq purge: interrupted: 20 message(s) left in target/ of jobs, the others deleted "
        "(purge again to delete them)\n"
    )
    assert [os.path.basename(path) for path in listed] == ["target"]


@pytest.mark.parametrize(("name", "shown"), [("jobs", "jobs"), ("jobs ", "'jobs '")])
def test_a_delete_stopped_by_ctrl_c_says_the_queue_is_gone_and_who_clears_the_rest(
    root: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    shown: str,
) -> None:
    # The queue leaves its path in one rename, then its files are deleted one by one
    # (minutes for 200,000 on some disks): a Ctrl-C then ended the delete with exit 130 and
    # not a word, the queue gone from `ls` and its files still on disk.
    with boxmq.open(root, fsync="never") as box:
        box.queue(name).put_many([b"x"] * 5)
    rmtree = shutil.rmtree

    def ctrl_c(path: str, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # what SIGINT raises amid the deletes

    monkeypatch.setattr(shutil, "rmtree", ctrl_c)
    assert cli.main(["--data", str(root), "delete", name]) == 130
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == (
        f"boxmq delete: interrupted: {shown} is deleted, with its 5 message(s), but some of its "
        f"files are left in {root}/.deleting/, which the next delete or a sweep of "
        "`boxmq serve` removes\n"
    )
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert json.loads(ok(root, "--json", "ls"))["queues"] == []
    assert os.listdir(root / ".deleting")
    with boxmq.open(root) as box:
        box.sweep()
    assert not (root / ".deleting").exists()


def test_a_delete_run_again_after_one_cut_short_removes_what_that_one_left(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopped amid its deletes (Ctrl-C, or a SIGKILL), a delete leaves files in .deleting/,
    # which its message says "the next delete" removes: the user runs the same command
    # again, which found no queue and left them, taking the space until some other queue
    # was deleted or `boxmq serve` swept (the crash probe of stop 63).
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put_many([b"x"] * 5)
    rmtree = shutil.rmtree

    def ctrl_c(path: str, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # what SIGINT raises amid the deletes

    monkeypatch.setattr(shutil, "rmtree", ctrl_c)
    assert cli.main(["--data", str(root), "delete", "jobs"]) == 130
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert os.listdir(root / ".deleting")
    again = boxmq_cli(root, "delete", "jobs")
    assert again.returncode == 1
    assert again.stderr == (
        f"boxmq delete: no queue 'jobs' under {root} (see `boxmq ls`); the files a delete "
        f"cut short left in {root}/.deleting/ are removed now\n"
    )
    assert not (root / ".deleting").exists()
    again = boxmq_cli(root, "delete", "jobs")  # nothing left: the refusal alone
    assert again.stderr == f"boxmq delete: no queue 'jobs' under {root} (see `boxmq ls`)\n"


def test_a_delete_stopped_by_ctrl_c_while_it_counts_stops_there_as_its_line_says(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between the rename and the deletes the moved folder is counted (a second for 200,000):
    # a Ctrl-C there went on to delete every file (minutes on some disks), then said that
    # some were left in .deleting/, where nothing was.
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put_many([b"x"] * 5)

    def ctrl_c(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # what SIGINT raises amid the count

    monkeypatch.setattr("boxmq.client.box.counts_of", ctrl_c)
    assert cli.main(["--data", str(root), "delete", "jobs"]) == 130
    monkeypatch.undo()
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == (
        f"boxmq delete: interrupted: jobs is deleted, but some of its files are left in "
        f"{root}/.deleting/, which the next delete or a sweep of `boxmq serve` removes\n"
    )
    assert os.listdir(root / ".deleting")  # stopped there, as said
    assert json.loads(ok(root, "--json", "ls"))["queues"] == []
    with boxmq.open(root) as box:
        box.sweep()
    assert not (root / ".deleting").exists()


def test_a_delete_stopped_by_ctrl_c_before_its_rename_says_the_queue_is_not_deleted(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other side of the test above: a Ctrl-C before the queue left its path deletes
    # nothing, and the line says so, under the command's name as the others are.
    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs").put_many([b"x"] * 5)

    def ctrl_c(*args: Any, **kwargs: Any) -> bool:
        raise KeyboardInterrupt  # what SIGINT raises before the rename

    monkeypatch.setattr("boxmq.client.box.remove_dropbox", ctrl_c)
    assert cli.main(["--data", str(root), "delete", "jobs"]) == 130
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == "boxmq delete: interrupted: jobs was not deleted\n"
    monkeypatch.undo()
    with boxmq.open(root) as box:
        assert box.queue("jobs", create=False).counts().ready == 5


def test_a_requeue_stopped_by_ctrl_c_says_what_it_left(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A requeue of a big error/ is a long run of renames: a Ctrl-C ended it with exit 130
    # and no word of how many went back.
    with boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        jobs.put_many([b"x"] * 30)
        for _ in range(30):
            message = jobs.get()
            assert message is not None
            jobs.reject(message.id)
    moved = 0
    move = Dropbox.move

    def ctrl_c_after_ten(self: Dropbox, *args: Any, **kwargs: Any) -> bool:
        nonlocal moved
        if moved == 10:
            raise KeyboardInterrupt  # what SIGINT raises between two renames
        moved += 1
        return move(self, *args, **kwargs)

    monkeypatch.setattr(Dropbox, "move", ctrl_c_after_ten)
    assert cli.main(["--data", str(root), "requeue", "jobs"]) == 130
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == (
        "boxmq requeue: interrupted: 20 message(s) left in error/ of jobs, the others back "
        "in target/ (requeue again to send them)\n"
    )
    assert len(os.listdir(root / "jobs" / "target")) == 10
