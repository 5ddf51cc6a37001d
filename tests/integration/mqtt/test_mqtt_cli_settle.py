"""`boxmq unlock` (and ack, reject, extend) on a share group beside real `boxmq serve`
processes: a message in flight to a member whose server is gone goes to the other members,
and one whose server still runs, which counts it as its session's, is refused (exit 1), the
message left where it is. Before, a stuck message (its lock lasts as long as the session)
could only be moved back to target/ by hand."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    RunningServer,
    Served,
    boxmq_cli,
    boxmq_cli_ok,
    paho,
    publish_each,
    recorded_away,
)
from tests.integration.mqtt.raw import open_raw, publishes, read, subscribe, take_publishes

GROUP = "$share/workers/jobs/#"


def _in_flight(root: Path) -> dict[str, str]:
    [locked] = json.loads(boxmq_cli_ok(root, "--json", "peek", GROUP, "--state", "processing"))
    return locked  # type: ignore[no-any-return]


def _refused(done: subprocess.CompletedProcess[str], *said: str) -> None:
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    for words in ("is in flight to", "still runs", *said):
        assert words in done.stderr, done.stderr


@pytest.mark.parametrize("stop", ["kill", "term"])
def test_a_stuck_member_s_message_goes_to_the_others_once_its_server_is_gone(
    two_servers: tuple[RunningServer, RunningServer, Served], stop: str
) -> None:
    first, second, process = two_servers
    pid = process.pid
    root = first.root
    stuck, _ = open_raw(first, "stuck", expiry=3600)  # a persistent session: no process
    try:
        stuck.sendall(subscribe(1, GROUP, 1))
        assert read(stuck)[0] == 0x90
        publish_each(first, "jobs/1", [b"job"])
        take_publishes(stuck, 1)  # never acknowledged
        other = paho(second, "other")
        other.subscribe(GROUP, 1)
        locked = _in_flight(root)
        assert locked["locked-by"] == "stuck"
        message_id = locked["id"]
        unlock = ["unlock", GROUP, message_id, "--consumer", "stuck"]
        connected = f"its client connected to boxmq serve, process {pid}"
        for verb in ("unlock", "ack", "reject", "extend"):
            _refused(boxmq_cli(root, verb, *unlock[1:]), "MQTT session of client stuck", connected)
        _refused(boxmq_cli(root, *unlock, "--force"), connected)  # known to run: no force
        if stop == "term":
            stuck.close()  # away: its server keeps the session, to send it again (DUP)
            recorded_away(root, "stuck")
            _refused(boxmq_cli(root, *unlock), f"its session kept by boxmq serve, process {pid}")
        assert other.nothing(within=0.5)
        assert _in_flight(root)["id"] == message_id
        # The server never starts again: killed with its client connected, or stopped.
        process.send_signal(signal.SIGKILL if stop == "kill" else signal.SIGTERM)
        process.wait(timeout=30)
        assert boxmq_cli_ok(root, *unlock) == f"unlock: {message_id}\n"
        assert other.next().payload == b"job"  # the running server gives it to the other
        other.stop()
        stuck.close()
        # Its client comes back, to the server still running: its session is there, and
        # the message, no longer its own, is not sent to it again.
        stuck, present = open_raw(second, "stuck", expiry=3600)
        assert present
        assert publishes(stuck, within=0.5) == []
    finally:
        stuck.close()


def test_a_non_persistent_member_s_message_is_refused_while_its_server_runs(
    two_servers: tuple[RunningServer, RunningServer, Served],
) -> None:
    """Its lock names its server's process: refused while that one runs, whichever door."""
    first, _, process = two_servers
    pid = process.pid
    member, _ = open_raw(first, "passing", clean=True, expiry=0)
    try:
        member.sendall(subscribe(1, GROUP, 1))
        assert read(member)[0] == 0x90
        publish_each(first, "jobs/1", [b"job"])
        take_publishes(member, 1)
        message_id = _in_flight(first.root)["id"]
        done = boxmq_cli(first.root, "ack", GROUP, message_id, "--consumer", "passing")
        _refused(done, f"passing, whose lock names process {pid}")
        assert _in_flight(first.root)["id"] == message_id
    finally:
        member.close()
