"""A directory (made by hand) where a topic's retained file belongs holds no retained message:
`boxmq serve` starts and serves, a SUBSCRIBE over MQTT and `boxmq subscribe` get every other
topic's, and the directory is told in one line. Every look raised IsADirectoryError: the
server stopped at its start-up sweep, and the CLI said only "Is a directory"."""

from __future__ import annotations

from pathlib import Path

from tests.integration.mqtt.clients import boxmq_cli, paho, serving_fresh
from tests.retained import retained_file

import boxmq

BLOCKED = "dev/3/status"


def _retained_with_a_directory(root: Path) -> Path:
    """Three retained messages, the second's file then replaced by a directory."""
    with boxmq.open(root, fsync="never") as box:
        for n in range(2, 5):
            box.publish(f"dev/{n}/status", f"on {n}", retain=True)
    path = retained_file(root, BLOCKED)
    path.unlink()
    path.mkdir()
    return path


def test_boxmq_subscribe_gets_the_others_and_names_the_directory(tmp_path: Path) -> None:
    blocked = _retained_with_a_directory(tmp_path)
    others = "dev/2/status on 2\ndev/4/status on 4\n"
    for wanted, printed in [("dev/+/status", others), (BLOCKED, "")]:
        done = boxmq_cli(tmp_path, "subscribe", "--idle", "0", wanted)
        assert (done.returncode, done.stdout) == (0, printed), done.stderr
        [told] = done.stderr.splitlines()
        assert str(blocked) in told
        assert "is a directory" in told


def test_an_mqtt_subscribe_gets_the_others_and_the_server_goes_on(tmp_path: Path) -> None:
    blocked = _retained_with_a_directory(tmp_path / "root")
    with serving_fresh(tmp_path) as running:
        reader = paho(running, "reader")
        reader.subscribe(BLOCKED, 1)
        reader.subscribe("dev/+/status", 1)
        assert sorted(reader.next().payload for _ in range(2)) == [b"on 2", b"on 4"]
        assert reader.nothing()
        reader.stop()
    told = [
        line for line in (tmp_path / "serve.log").read_text().splitlines() if str(blocked) in line
    ]
    assert len(told) == 1, told  # once, not at each look nor each sweep
    assert "WARNING" in told[0]


def test_a_retained_publish_to_its_topic_names_the_topic_and_the_directory(
    tmp_path: Path,
) -> None:
    # The refusal named the temporary file the publish wrote (.retained/.tmp-...), which the
    # user neither made nor can remove the cause with.
    blocked = _retained_with_a_directory(tmp_path)
    done = boxmq_cli(tmp_path, "publish", "--retain", BLOCKED, "off")
    assert done.returncode != 0
    assert BLOCKED in done.stderr, done.stderr
    assert str(blocked) in done.stderr, done.stderr
    assert ".tmp-" not in done.stderr, done.stderr
    assert "remove it" in done.stderr, done.stderr
    assert not [p.name for p in blocked.parent.iterdir() if p.name.startswith(".tmp-")]


def test_a_retained_publish_refused_so_sends_its_subscribers_nothing(tmp_path: Path) -> None:
    # The copies went out before the directory refused the retained message: the publisher
    # was told it failed (and a QoS 1 or 2 one sends it again) for a message delivered.
    blocked = _retained_with_a_directory(tmp_path)
    with boxmq.open(tmp_path, fsync="never") as box:
        box.subscribe(BLOCKED, "keeper").close()  # durable: collects while closed
    done = boxmq_cli(tmp_path, "publish", "--retain", BLOCKED, "off")
    assert done.returncode != 0
    assert str(blocked) in done.stderr, done.stderr
    with boxmq.open(tmp_path, fsync="never") as box, box.subscribe(BLOCKED, "keeper") as keeper:
        assert keeper.receive(timeout=0.5) is None
