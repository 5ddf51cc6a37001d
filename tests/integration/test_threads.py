"""The embedded API used from many threads at once, with real threads on real files: a
receive another thread ends by a close, an ack, an unlock; a consumer or a Message shared by
two threads; a close during a group commit. Every wait is bounded: a hang fails the test."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boxmq

# How long a thread may take to see what another thread did: far more than any of it takes
# (milliseconds), so only a hang fails.
_PROMPT = 5.0


def _both_at_once(first: Callable[[], Any], second: Callable[[], Any]) -> list[str]:
    """Run the two calls in two threads released together; what each did ("ok" or the name
    of what it raised), in the calls' order."""
    start = threading.Barrier(2, timeout=_PROMPT)
    outcomes = ["hung", "hung"]

    def run(index: int, call: Callable[[], Any]) -> None:
        start.wait()
        try:
            call()
            outcomes[index] = "ok"
        except boxmq.BoxMQError as error:
            outcomes[index] = type(error).__name__

    threads = [
        threading.Thread(target=run, args=(index, call), daemon=True)
        for index, call in enumerate((first, second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(_PROMPT)
    return outcomes


def test_two_threads_settling_one_got_message_at_once_one_wins_the_other_is_told_item_not_found(
    tmp_path: Path,
) -> None:
    # The loser's rename found the file gone and said "the lock was taken away"
    # (UnexpectedRequest), where an ack after the ack, and docs/python.md, say ItemNotFound.
    with boxmq.open(tmp_path) as box:
        jobs = box.queue("jobs")
        for _ in range(200):  # a race: the loser must have seen the lock before the win
            jobs.put("job")
            message = jobs.get("cli")
            assert message is not None
            outcomes = _both_at_once(message.ack, message.ack)
            assert sorted(outcomes) == ["ItemNotFound", "ok"]
        assert jobs.counts().done == 200
