"""`boxmq session ls` and `boxmq session end` beside real `boxmq serve` processes: a persistent
session whose client never comes back (3.1.1 CleanSession 0, v5 with no expiry) ends from the
command line as its expiry would, its share group's message in flight going to the other
member; and one a running server holds is refused (exit 1), nothing changed. Before, such a
session lasted for ever, and held its share groups' messages locked."""

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
    drop,
    paho,
    publish_each,
    recorded_away,
    subscriptions_on_disk,
)

from boxmq.mqtt.session import NEVER
from boxmq.mqtt.session_record import read_record

GROUP = "$share/workers/jobs/#"


def _sessions(root: Path) -> dict[str, dict[str, object]]:
    done = boxmq_cli(root, "session", "ls", "--json")
    assert done.returncode == 0, done.stderr
    return {s["client_id"]: s for s in json.loads(done.stdout)}


def _refused(done: subprocess.CompletedProcess[str], *said: str) -> None:
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    for words in ("session of client stuck", "still runs", *said):
        assert words in done.stderr, done.stderr


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v3.1.1"])
def test_a_session_whose_client_never_returns_ends_and_its_message_goes_to_the_other_member(
    two_servers: tuple[RunningServer, RunningServer, Served], v5: bool
) -> None:
    first, second, process = two_servers
    root, pid = first.root, str(process.pid)
    stuck = paho(
        first,
        "stuck",
        v5=v5,
        clean=False,
        expiry=NEVER if v5 else None,
        configure=lambda client: client.manual_ack_set(True),  # it never acknowledges
    )
    stuck.subscribe(GROUP, 1)
    stuck.subscribe("alerts/#", 1)
    publish_each(first, "jobs/1", [b"job"])
    assert stuck.next().payload == b"job"
    other = paho(second, "other")
    other.subscribe(GROUP, 1)

    listed = _sessions(root)["stuck"]
    assert list(listed) == [  # as docs/cli.md lists them
        "client_id",
        "connected_to",
        "kept_by",
        "counted_by",
        "server_running",
        "away_since",
        "expiry",
        "ends",
        "subscriptions",
        "will",
    ]
    assert (listed["connected_to"], listed["server_running"]) == (pid, True)
    assert listed["ends"] is None  # counted from its client's leaving
    # As long as the server allows (7 days unless configured), 3.1.1 CleanSession 0 too
    assert listed["expiry"] == 604800
    assert listed["subscriptions"] == [GROUP, "alerts/#"]
    end = ("session", "end", "stuck")
    _refused(boxmq_cli(root, *end), f"its client is connected to boxmq serve, process {pid}")
    _refused(boxmq_cli(root, *end, "--force"), pid)  # known to run: --force changes nothing
    drop(stuck)  # away, and kept by its server, which would send the message again
    recorded_away(root, "stuck")
    assert _sessions(root)["stuck"]["kept_by"] == pid
    _refused(boxmq_cli(root, *end), f"kept by boxmq serve, process {pid}")
    assert other.nothing(within=0.5)

    # Its server stops (and so never sends it again): the session stays on disk for ever,
    # until it is ended from here.
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    assert "stuck" in _sessions(root)
    done = boxmq_cli(root, *end)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ended the session of client stuck; subscriptions ended: ")
    assert other.next().payload == b"job"  # the group's other member gets it
    assert read_record(str(root), "stuck") is None
    assert "stuck" not in _sessions(root)
    assert ("jobs/#", "workers", None) in subscriptions_on_disk(root)  # the other's group
    assert ("alerts/#", None, "stuck") not in subscriptions_on_disk(root)
    again = boxmq_cli(root, *end)
    assert (again.returncode, again.stdout) == (1, ""), again.stderr
    assert "no persistent MQTT session of client stuck" in again.stderr
    # Its client comes back one day: a new session, nothing of the old one.
    back = paho(second, "stuck", v5=v5, clean=False, expiry=NEVER if v5 else None)
    assert not back.session_present
    assert back.nothing(within=0.5)
    back.stop()
    other.stop()
