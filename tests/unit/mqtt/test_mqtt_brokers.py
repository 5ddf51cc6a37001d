"""The marks of the brokers serving MQTT from a root (mqtt/brokers.py): believed only while
their process lives, and those of this host's dead brokers deleted by the next to start."""

from __future__ import annotations

from pathlib import Path

from tests.processes import dead_token

from boxmq.mqtt import brokers
from boxmq.store.process import process_token


def test_a_mark_names_a_live_broker_until_it_is_taken_back(tmp_path: Path) -> None:
    root, token = str(tmp_path), process_token()
    assert not brokers.is_broker(root, token)
    brokers.mark(root, token)
    assert brokers.is_broker(root, token)
    assert not brokers.is_broker(root, "")  # a member bound to no process
    brokers.unmark(root, token)
    assert not brokers.is_broker(root, token)


def test_a_dead_broker_s_mark_counts_for_nothing_and_the_next_start_deletes_it(
    tmp_path: Path,
) -> None:
    root, dead = str(tmp_path), dead_token()
    (tmp_path / ".mqtt" / "brokers").mkdir(parents=True)
    (tmp_path / ".mqtt" / "brokers" / dead).touch()
    assert not brokers.is_broker(root, dead)
    brokers.mark(root, process_token())
    assert sorted(p.name for p in (tmp_path / ".mqtt" / "brokers").iterdir()) == [process_token()]
