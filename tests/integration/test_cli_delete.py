"""`boxmq delete` of a queue whose messages were locked once: a lock whose deadline passed
holds the message for nobody (a settle by its holder is refused: "it ended"), so it does not
stop the delete, which the user could otherwise not get past but with --force."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.integration.test_cli import boxmq_cli, ok


def test_delete_is_not_refused_for_a_lock_that_ended(root: Path) -> None:
    """It was refused with `1 by boxmq get: settle them by id (ack, unlock)`, and the unlock
    it advised was refused in turn (`'cli' no longer holds the lock: it ended`): a loop."""
    ok(root, "put", "jobs", "one")
    ok(root, "put", "jobs", "two")
    ok(root, "get", "jobs", "--lock", "100ms")
    time.sleep(0.3)
    assert json.loads(ok(root, "--json", "delete", "jobs")) == {"queue": "jobs", "deleted": 2}
    assert not (root / "jobs").exists()


def test_delete_is_still_refused_for_a_lock_in_time_beside_one_that_ended(root: Path) -> None:
    ok(root, "put", "jobs", "one")
    ok(root, "put", "jobs", "two")
    ok(root, "get", "jobs", "--lock", "100ms")
    time.sleep(0.3)
    ok(root, "get", "jobs", "--lock", "10m")  # sends the ended one back first, then locks it
    ok(root, "get", "jobs", "--lock", "10m")
    refused = boxmq_cli(root, "delete", "jobs")
    assert refused.returncode == 1, refused
    assert "jobs: 2 message(s) locked: 2 by `boxmq get`" in refused.stderr
    assert len(os.listdir(root / "jobs" / "processing")) == 2  # nothing moved or deleted
