"""A persistent session that ends while `boxmq serve` runs (its expiry, or a clean start of its
client that replaces it) leaves its share groups: the remaining member gets every message of
the group, and neither `boxmq ls` nor the session records name the gone member any more."""

from __future__ import annotations

import time
from pathlib import Path

from tests.integration.mqtt.clients import (
    WAIT,
    Paho,
    RunningServer,
    boxmq_cli,
    paho,
    publish_each,
    serve_fresh,
    stop_process,
)

from boxmq.mqtt.session_record import read_record

GROUP = "$share/g/t"


def _members_listed(root: Path) -> set[str]:
    """The members `boxmq ls` lists for the group (its second column, comma-separated)."""
    rows = boxmq_cli(root, "ls").stdout.splitlines()[1:]
    return {name for row in rows if row.startswith(GROUP) for name in row.split()[1].split(",")}


def _the_remaining_member_gets_all(served: RunningServer, remaining: Paho) -> None:
    payloads = [f"m{n}".encode() for n in range(6)]
    publish_each(served, "t", payloads)
    got = sorted(remaining.next().payload for _ in payloads)
    assert got == sorted(payloads)
    assert remaining.nothing(within=0.5)


def test_a_v5_member_whose_session_expires_leaves_its_share_group(tmp_path: Path) -> None:
    served, process = serve_fresh(tmp_path)
    try:
        gone = paho(served, "gone-member", clean=False, expiry=1)
        gone.subscribe(GROUP, 1)
        remaining = paho(served, "remaining-member")
        remaining.subscribe(GROUP, 1)
        assert _members_listed(served.root) == {"gone-member", "remaining-member"}
        gone.stop()
        deadline = time.monotonic() + WAIT  # its second, and the tick that ends it
        while read_record(str(served.root), "gone-member") is not None:
            assert time.monotonic() < deadline, "the session did not end"
            time.sleep(0.1)
        _the_remaining_member_gets_all(served, remaining)
        assert _members_listed(served.root) == {"remaining-member"}
        remaining.stop()
    finally:
        stop_process(process)


def test_a_311_member_that_comes_back_clean_leaves_its_share_group(tmp_path: Path) -> None:
    served, process = serve_fresh(tmp_path)
    try:
        member = paho(served, "member311", v5=False, clean=False)
        member.subscribe(GROUP, 1)
        remaining = paho(served, "remaining-member")
        remaining.subscribe(GROUP, 1)
        member.stop()
        assert _members_listed(served.root) == {"member311", "remaining-member"}
        back = paho(served, "member311", v5=False, clean=True)
        _the_remaining_member_gets_all(served, remaining)
        assert back.nothing(within=0.5)
        assert _members_listed(served.root) == {"remaining-member"}
        assert read_record(str(served.root), "member311") is None
        back.stop()
        remaining.stop()
    finally:
        stop_process(process)
