"""`boxmq subscribe` and `boxmq unsubscribe` under the name of an MQTT client's own session, its
client connected to a running `boxmq serve` or away: refused (exit 1), and the client gets
every message its subscriptions were to bring. Before, a CLI run under that name took some of
them (acked, never sent to the client), a subscription it made there was taken by the session
for its own at the next start, and an unsubscribe removed the folder while the session record
and the client (told at its return that its session was present) still counted on it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    RunningServer,
    boxmq_cli,
    boxmq_cli_ok,
    mosquitto_tools,
    paho,
    persistent_paho,
    publish_each,
    recorded_away,
    serve_fresh,
    serving_fresh,
    subscriptions_on_disk,
)
from tests.waiting import until

from boxmq.mqtt.session_record import read_record

SESSION = "is the client id of an MQTT session"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RunningServer]:
    """A real `boxmq serve` process on a new root (its address, as paho() takes it)."""
    with serving_fresh(tmp_path) as address:
        yield address


def _refused(done: subprocess.CompletedProcess[str], *said: str) -> None:
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    for words in (SESSION, *said):
        assert words in done.stderr, done.stderr


def test_a_connected_mosquitto_sub_keeps_its_session(served: RunningServer) -> None:
    """mosquitto_sub -c (3.1.1, clean session 0) connected: neither a CLI subscribe nor an
    unsubscribe under its client id touches its subscription, and it gets every message."""
    mosquitto_tools()
    root = served.root
    command = ["timeout", "-k", "5", "60", "mosquitto_sub", "-h", served.host]
    command += ["-p", str(served.port), "-c", "-i", "laptop", "-q", "1", "-t", "a/#", "-C", "6"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as sub:

        def subscribed() -> bool:
            record = read_record(str(root), "laptop")
            return record is not None and "a/#" in record.options

        until(subscribed, "mosquitto_sub never subscribed")
        cli = [sys.executable, "-m", "boxmq.cli", "--data", str(root), "subscribe", "a/#"]
        cli += ["--name", "laptop", "--idle", "3"]
        with subprocess.Popen(
            cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as run:
            publish_each(served, "a/x", [b"m1", b"m2", b"m3"])  # while the CLI run would read
            out, err = run.communicate(timeout=60)
        reading = subprocess.CompletedProcess(cli, run.returncode, out, err)
        _refused(reading, "its client connected to boxmq serve", "another --name")
        _refused(boxmq_cli(root, "unsubscribe", "a/#", "--name", "laptop"), "UNSUBSCRIBE")
        _refused(boxmq_cli(root, "subscribe", "b/#", "--name", "laptop", "--keep", "--idle", "0"))
        publish_each(served, "a/x", [b"m4", b"m5", b"m6"])
        got, _ = sub.communicate(timeout=30)
    assert got.split() == ["m1", "m2", "m3", "m4", "m5", "m6"]
    assert subscriptions_on_disk(root) == {("a/#", None, "laptop")}


@pytest.mark.parametrize(
    ("client_id", "name", "v5"),
    [("laptop", "laptop", True), ("dev/7", "dev%2F7", False)],  # stored.consumer_name
    ids=["v5-expiry", "v311-slash"],
)
def test_a_session_away_keeps_what_waits_for_its_client(
    served: RunningServer, client_id: str, name: str, v5: bool
) -> None:
    """Its client away: what waits for it is neither read nor deleted by the CLI, a new
    filter under its name is not made (the session took it for its own at the next start),
    its record and its client agree on its subscriptions when it returns; and once the
    client ends its session with a clean start, as the refusal says, the name is free."""
    root = served.root
    client = persistent_paho(served, client_id, v5)
    client.subscribe("a/#", 1)
    client.stop()
    recorded_away(root, client_id)
    publish_each(served, "a/x", [b"w1", b"w2", b"w3"])
    ends = "it ends at"  # a 3.1.1 session too: its end is max_session_expiry's (7 days)
    away = "its client away since"
    _refused(boxmq_cli(root, "subscribe", "a/#", "--name", name, "--idle", "1"), away, ends)
    _refused(boxmq_cli(root, "subscribe", "z/#", "--name", name, "--keep", "--idle", "0"), away)
    _refused(boxmq_cli(root, "unsubscribe", "a/#", "--name", name), away, "clean start")
    assert subscriptions_on_disk(root) == {("a/#", None, name)}
    record = read_record(str(root), client_id)
    assert record is not None
    assert set(record.options) == {"a/#"}
    back = persistent_paho(served, client_id, v5)
    try:
        assert back.session_present
        assert [back.next().payload for _ in range(3)] == [b"w1", b"w2", b"w3"]
        publish_each(served, "a/x", [b"w4"])
        assert back.next().payload == b"w4"  # still subscribed, as its session says
    finally:
        back.stop()
    paho(served, client_id, v5=v5).stop()  # a clean start ends the session
    assert read_record(str(root), client_id) is None
    boxmq_cli_ok(root, "subscribe", "a/#", "--name", name, "--idle", "0")


def test_a_share_group_member_away_keeps_its_membership(served: RunningServer) -> None:
    """The same for a persistent session's membership of a share group, its only member:
    an unsubscribe under its name ended the group, and what it held."""
    root = served.root
    group = "$share/g/jobs/#"
    member = persistent_paho(served, "worker", True)
    member.subscribe(group, 1)
    member.stop()
    recorded_away(root, "worker")
    publish_each(served, "jobs/1", [b"j1", b"j2"])
    _refused(
        boxmq_cli(root, "subscribe", group, "--name", "worker", "--idle", "1"),
        "another --name (a member of its own)",  # not "each name gets every message"
    )
    _refused(boxmq_cli(root, "unsubscribe", group, "--name", "worker"), "UNSUBSCRIBE")
    assert subscriptions_on_disk(root) == {("jobs/#", "g", None)}
    back = persistent_paho(served, "worker", True)
    try:
        assert sorted(back.next().payload for _ in range(2)) == [b"j1", b"j2"]
    finally:
        back.stop()


def test_a_session_whose_server_was_killed_is_its_client_s(tmp_path: Path) -> None:
    """`boxmq serve` killed while the client was connected: its record still names that
    server; the session is its client's all the same (a restart resumes it)."""
    served, process = serve_fresh(tmp_path)
    try:
        client = persistent_paho(served, "laptop", True)
        client.subscribe("a/#", 1)
        publish_each(served, "a/x", [b"k1"])
        assert client.next().payload == b"k1"
    finally:
        process.kill()
        process.wait()
    client.stop()  # its server gone: it only stops reconnecting
    done = boxmq_cli(served.root, "subscribe", "a/#", "--name", "laptop", "--idle", "0")
    _refused(done, f"the boxmq serve it was connected to, process {process.pid}, stopped")
