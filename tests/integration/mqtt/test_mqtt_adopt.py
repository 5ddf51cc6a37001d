"""A subscription that `boxmq subscribe --keep` or the Python API keeps under a name that is
also an MQTT client's id is not that client's: a persistent client connecting with that id
(paho v5 with a Session Expiry Interval, paho 3.1.1 and mosquitto_sub with clean session 0)
gets no "session present" for it and none of its messages, and a clean start with that id
does not delete it with what it holds. Before, the first persistent client with that id took
it for its session (session present, messages of a filter it never subscribed to), and a
clean start deleted it and its messages; a line in the server's log now says so, and the
session's own subscriptions (those its record names) come back and end as before."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    boxmq_cli,
    boxmq_cli_ok,
    mosquitto_tools,
    paho,
    persistent_paho,
    publish_each,
    recorded_away,
    serving_fresh,
    subscriptions_on_disk,
)
from tests.waiting import waited

import boxmq


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[RunningServer, Path]]:
    """A real `boxmq serve` process on a new root, and the file its log goes to."""
    with serving_fresh(tmp_path) as address:
        yield address, tmp_path / "serve.log"  # serve_process's


def _keep(root: Path, filter: str, name: str) -> None:
    """`boxmq subscribe FILTER --name NAME --keep`, as a user keeps a subscription."""
    boxmq_cli_ok(root, "subscribe", filter, "--name", name, "--keep", "--idle", "0")


def _said(log: Path, words: str) -> bool:
    return waited(lambda: words in log.read_text(errors="replace"))


def _read_all(root: Path, filter: str, name: str) -> list[str]:
    done = boxmq_cli(root, "subscribe", filter, "--name", name, "--idle", "1")
    assert done.returncode == 0, done.stderr
    return [line.split(" ", 1)[1] for line in done.stdout.splitlines()]


@pytest.mark.parametrize("v5", [True, False], ids=["v5-expiry", "v311-clean-session-0"])
def test_a_persistent_client_does_not_adopt_a_cli_subscription(
    served: tuple[RunningServer, Path], v5: bool
) -> None:
    server, log = served
    root = server.root
    _keep(root, "cli/#", "laptop")
    publish_each(server, "cli/x", [b"c1", b"c2"])
    client = persistent_paho(server, "laptop", v5)
    try:
        assert not client.session_present
        publish_each(server, "cli/x", [b"c3"])
        assert client.nothing(1.0)  # it never subscribed to cli/#
        client.subscribe("own/#", 1)
        publish_each(server, "own/x", [b"o1"])
        assert client.next().payload == b"o1"
    finally:
        client.stop()
    assert _said(log, "a subscription to cli/# under its name on disk is not its session's")
    back = persistent_paho(server, "laptop", v5)  # its own session, with its own subscription
    try:
        assert back.session_present
        publish_each(server, "own/x", [b"o2"])
        assert back.next().payload == b"o2"
        assert back.nothing(0.5)
    finally:
        back.stop()
    paho(server, "laptop", v5=v5).stop()  # a clean start ends its session, only its own
    assert subscriptions_on_disk(root) == {("cli/#", None, "laptop")}
    assert _read_all(root, "cli/#", "laptop") == ["c1", "c2", "c3"]  # every one kept


def test_a_clean_start_leaves_an_api_subscription_and_its_messages(
    served: tuple[RunningServer, Path],
) -> None:
    """mosquitto_sub (clean by default) with the id of a subscription the Python API keeps."""
    mosquitto_tools()
    server, log = served
    root = server.root
    with boxmq.open(str(root)) as box:
        box.subscribe("api/#", "worker").close()
        box.publish("api/x", b"a1")
        command = ["timeout", "-k", "5", "30", "mosquitto_sub", "-h", server.host]
        command += ["-p", str(server.port), "-i", "worker", "-t", "unused", "-W", "1"]
        subprocess.run(command, capture_output=True, timeout=60)
        box.publish("api/x", b"a2")
        subscriber = box.subscribe("api/#", "worker")
        try:
            bodies = []
            for _ in range(2):
                message = subscriber.receive(timeout=WAIT)
                assert message is not None
                bodies.append(message.body)
                message.ack()
        finally:
            subscriber.close()
        assert bodies == [b"a1", b"a2"]
    assert _said(log, "a subscription to api/# under its name on disk is not its session's")


def test_a_session_away_is_not_given_a_cli_subscription_at_its_return(
    served: tuple[RunningServer, Path],
) -> None:
    """The CLI refuses a new subscription under the name of a session (186e1d7); one kept
    before the client first connected is read and ended by the CLI as any other."""
    server, _ = served
    root = server.root
    _keep(root, "cli/#", "laptop")
    client = persistent_paho(server, "laptop", True)
    client.subscribe("own/#", 1)
    client.stop()
    recorded_away(root, "laptop")
    publish_each(server, "cli/x", [b"c1"])
    back = persistent_paho(server, "laptop", True)
    try:
        assert back.session_present
        assert back.nothing(1.0)
    finally:
        back.stop()
    recorded_away(root, "laptop")
    assert _read_all(root, "cli/#", "laptop") == ["c1"]
    boxmq_cli_ok(root, "unsubscribe", "cli/#", "--name", "laptop")
    assert subscriptions_on_disk(root) == {("own/#", None, "laptop")}


def test_a_client_subscribing_to_a_cli_subscription_s_filter_is_said_in_the_log(
    served: tuple[RunningServer, Path],
) -> None:
    """Not prevented yet (one dropbox per filter and name): the client joins it, and the
    server's log says so."""
    server, log = served
    _keep(server.root, "cli/#", "laptop")
    client = persistent_paho(server, "laptop", True)
    try:
        client.subscribe("cli/#", 1)
        assert _said(log, "client laptop: subscribing to cli/# joins a subscription on disk")
    finally:
        client.stop()


@pytest.mark.parametrize("filter", ["api/#", "$share/g/api/#"], ids=["plain", "share"])
def test_a_subscribe_again_makes_a_subscription_the_api_ended(
    served: tuple[RunningServer, Path], filter: str
) -> None:
    """The Python API, unlike the CLI, ends a session's subscription under the client's name
    (docs/mqtt.md). A SUBSCRIBE of that filter again, with the same options, was granted
    (SUBACK 0x01) and changed nothing: no process routed to the dropbox gone, and the client,
    connected or back from away, got nothing more on it until the server restarted. It is
    made again now, and the log says why."""
    server, log = served
    client = persistent_paho(server, "dev1", v5=True)
    with boxmq.open(server.root) as box:
        try:
            client.subscribe(filter, 1)
            assert box.unsubscribe(filter, "dev1")
            assert [reason.value for reason in client.subscribe(filter, 1)] == [1]
            box.publish("api/x", b"after")
            assert client.next().payload == b"after"
        finally:
            client.stop()
        box.publish("api/x", b"away")
        back = persistent_paho(server, "dev1", v5=True)
        try:
            assert back.next().payload == b"away"
        finally:
            back.stop()
    assert _said(log, f"client dev1: its subscription to {filter} was ended on disk by another")
