"""`boxmq get` on a share group and on a durable subscription beside a real `boxmq serve`
and real MQTT clients. In a share group, `get` is one more consumer: it takes a ready message
from under the live members, and what it locked comes back to them, once, when it is unlocked
or its lock ends; what it acks they never get. A durable subscription that an MQTT session
reads is its client's: `get` is refused while the server holding that session runs, and
takes its message once that server is gone. Before, `get` took a queue only."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.mqtt.clients import (
    RunningServer,
    Served,
    boxmq_cli,
    boxmq_cli_ok,
    publish_each,
    recorded_away,
    serve_fresh,
    stop_process,
)
from tests.integration.mqtt.raw import (
    open_raw,
    puback,
    publishes,
    read,
    subscribe,
    take_publishes,
)
from tests.waiting import until

GROUP = "$share/workers/jobs/#"


def _got(root: Path, *args: str) -> dict[str, object]:
    got: dict[str, object] = json.loads(boxmq_cli_ok(root, "--json", "get", *args))
    return got


def _ready(root: Path, count: int) -> None:
    """Wait until the group holds `count` ready messages (its server wrote them)."""
    until(
        lambda: len(json.loads(boxmq_cli_ok(root, "--json", "peek", GROUP))) == count,
        f"not {count} ready in {GROUP}",
        within=30,
    )


def test_get_is_one_more_consumer_of_a_share_group_whose_members_are_live(
    tmp_path: Path,
) -> None:
    served, process = serve_fresh(tmp_path)
    root = served.root
    # A member that takes one message at a time (Receive Maximum 1), and holds its first:
    # what comes after it waits in the group's target/, for get or for the member.
    member, _ = open_raw(served, "busy", clean=True, expiry=0, receive_maximum=1)
    try:
        member.sendall(subscribe(1, GROUP, 1))
        assert read(member)[0] == 0x90
        publish_each(served, "jobs/1", [b"a", b"b", b"c", b"d"])
        [held] = take_publishes(member, 1)
        assert held.payload == b"a"
        _ready(root, 3)
        unlocked = _got(root, GROUP, "--lock", "30s")
        acked = _got(root, GROUP, "--lock", "30s")
        # The short lock last: a get after it, started more than a second later on a busy
        # machine, took its message again.
        timed_out = _got(root, GROUP, "--lock", "1s")
        assert [m["body"] for m in (unlocked, acked, timed_out)] == ["b", "c", "d"]
        assert unlocked["topic"] == "jobs/1"
        assert boxmq_cli_ok(root, "ack", GROUP, str(acked["id"])) == f"ack: {acked['id']}\n"
        assert (
            boxmq_cli_ok(root, "unlock", GROUP, str(unlocked["id"]))
            == f"unlock: {unlocked['id']}\n"
        )
        assert publishes(member, within=0.5) == []  # its window is full: nothing sent beside
        member.sendall(puback(held.packet_id))
        # The one unlocked at once, the other once its lock ended (the server's sweep): each
        # to the member once, and never the one get acked.
        came = []
        for _ in range(2):
            [each] = take_publishes(member, 1)
            came.append(each.payload)
            member.sendall(puback(each.packet_id))
        assert sorted(came) == [b"b", b"d"]
        assert publishes(member, within=1.5) == []
        [row] = json.loads(boxmq_cli_ok(root, "--json", "ls"))["subscriptions"]
        assert (row["ready"], row["locked"]) == (0, 0)
    finally:
        member.close()
        stop_process(process)


def _refused(done: subprocess.CompletedProcess[str], *said: str) -> None:
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    for words in ("is read by the MQTT session of client keeper", "still runs", *said):
        assert words in done.stderr, done.stderr


def test_get_on_an_mqtt_session_s_subscription_waits_for_its_server_to_be_gone(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    first, second, process = two_servers
    root, pid = first.root, process.pid
    named = ["jobs/#", "--subscriber", "keeper"]
    get = ["get", *named]
    keeper, _ = open_raw(first, "keeper", expiry=3600)  # a persistent session
    try:
        keeper.sendall(subscribe(1, "jobs/#", 1))
        assert read(keeper)[0] == 0x90
        _refused(boxmq_cli(root, *get), f"its client connected to boxmq serve, process {pid}")
        keeper.close()  # away: its server keeps the session, and what comes for it
        recorded_away(root, "keeper")
        publish_each(first, "jobs/1", [b"job"])
        kept = f"its session kept by boxmq serve, process {pid}"
        _refused(boxmq_cli(root, *get), kept)
        _refused(boxmq_cli(root, *get, "--force"), kept)  # known to run: no force
        process.send_signal(signal.SIGTERM)  # it never starts again
        process.wait(timeout=30)
        got = _got(root, *named)
        assert (got["body"], got["subscriber"], got["topic"]) == ("job", "keeper", "jobs/1")
        assert boxmq_cli_ok(root, "ack", *named, str(got["id"])) == f"ack: {got['id']}\n"
        # Its client comes back, to the server still running: its session is there, and
        # the message taken by hand is not sent to it.
        keeper, present = open_raw(second, "keeper", expiry=3600)
        assert present
        assert publishes(keeper, within=1.0) == []
    finally:
        keeper.close()


def test_an_mqtt_client_joining_under_get_s_consumer_name_is_not_sent_what_get_holds(
    tmp_path: Path,
) -> None:
    """A persistent MQTT session takes, when it joins, the locks that name no process under
    its client id (those its server held for it before); `get`'s lock under `cli`, the
    default --consumer, was taken so too by a client `cli` joining the group, and sent to it
    while get's user held it, and `boxmq ack` then refused, that client's server running."""
    served, process = serve_fresh(tmp_path)
    root = served.root
    boxmq_cli_ok(root, "subscribe", GROUP, "--name", "w1", "--keep", "--idle", "0")
    message_id = boxmq_cli_ok(root, "publish", "jobs/1", "held").strip()
    got = _got(root, GROUP, "--lock", "30s")
    assert (got["id"], got["locked-by"]) == (message_id, "cli")
    client, _ = open_raw(served, "cli", expiry=3600)
    try:
        client.sendall(subscribe(1, GROUP, 1))
        assert read(client)[0] == 0x90
        assert publishes(client, within=1.0) == []
        assert boxmq_cli_ok(root, "ack", GROUP, message_id) == f"ack: {message_id}\n"
        publish_each(served, "jobs/2", [b"next"])  # and it is a member as any other
        [sent] = take_publishes(client, 1)
        assert sent.payload == b"next"
    finally:
        client.close()
        stop_process(process)


def test_a_get_killed_at_any_moment_leaves_its_message_to_the_live_member_once(
    tmp_path: Path,
) -> None:
    """`boxmq get` on a share group, SIGKILLed at varied moments (before its claim, during
    it, after it printed): what it locked (token `get`, bound to no process) comes back to
    the live MQTT member when its lock ends, nothing stays locked, and the member gets every
    message once.

    With no delivery limit, on the server and in each get (`--max-deliveries 0`): each get
    first releases the locks that ended, then takes the first ready message, so every get
    that claims more than its 1 s lock after the last one's claim (the kill's wait, a peek
    and the next interpreter's start: near that second on a quiet machine, past it on one
    a little busy) takes message 0 again, a delivery more each time; at the default limit's
    fifth it went to error/ (dead-lettered, as DESIGN.md §4 says), and the member never got
    it."""
    served, process = serve_fresh(tmp_path, "--max-deliveries", "0")
    root = served.root
    member, _ = open_raw(served, "busy", clean=True, expiry=0, receive_maximum=1)
    payloads = [str(n).encode() for n in range(6)]
    try:
        member.sendall(subscribe(1, GROUP, 1))
        assert read(member)[0] == 0x90
        publish_each(served, "jobs/1", [b"held", *payloads])
        [held] = take_publishes(member, 1)  # its window full: the rest wait for get
        _ready(root, len(payloads))
        rng = random.Random(5)
        command = [sys.executable, "-m", "boxmq.cli", "--data", str(root)]
        command += ["--max-deliveries", "0", "get", GROUP]
        finished = 0
        claimed = 1  # the held one's, in processing/
        for attempt in range(12):
            get = subprocess.Popen(
                [*command, "--lock", "1s"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=os.environ.copy(),
            )
            # Six kills at random moments; on a machine so busy that none of them came after
            # a claim, up to six more given longer to get there.
            time.sleep(rng.uniform(0.1, 0.8) if attempt < 6 else rng.uniform(0.8, 2.0))
            get.send_signal(signal.SIGKILL)
            finished += get.wait(timeout=10) == 0
            locked = json.loads(
                boxmq_cli_ok(root, "--json", "peek", GROUP, "--state", "processing")
            )
            claimed = max(claimed, len(locked))
            if attempt >= 5 and finished + claimed > 1:
                break
        assert finished + claimed > 1, "no get killed after its claim"
        member.sendall(puback(held.packet_id))
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < len(payloads) and time.monotonic() < deadline:
            for message in publishes(member, within=0.5):
                got.append(message.payload)
                member.sendall(puback(message.packet_id))
        dead = boxmq_cli_ok(root, "--json", "peek", GROUP, "--state", "error")
        assert sorted(got) == payloads, dead  # each once: none lost to a killed get, none twice
        assert json.loads(dead) == []
        assert publishes(member, within=1.5) == []
        assert (
            json.loads(boxmq_cli_ok(root, "--json", "peek", GROUP, "--state", "processing")) == []
        )
    finally:
        member.close()
        stop_process(process)
