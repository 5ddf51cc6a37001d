"""A persistent session that ends while `boxmq serve` runs (its expiry, or a clean start of its
client that replaces it) leaves its share groups: the remaining member gets every message of
the group, and neither `boxmq ls` nor the session records name the gone member any more."""

from __future__ import annotations

from pathlib import Path

from tests.integration.mqtt.clients import (
    Paho,
    RunningServer,
    boxmq_cli,
    paho,
    publish_each,
    record_deleted,
    recorded_away,
    serve_fresh,
    serve_process,
    stop_process,
)
from tests.integration.mqtt.raw import open_raw, read, subscribe, take_publishes

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
        record_deleted(served.root, "gone-member")
        _the_remaining_member_gets_all(served, remaining)
        assert _members_listed(served.root) == {"remaining-member"}
        remaining.stop()
    finally:
        stop_process(process)


def test_what_an_expired_member_was_sent_and_never_acknowledged_goes_to_the_others(
    tmp_path: Path,
) -> None:
    """MQTT-234: the messages in flight to a member whose session ends go to the others."""
    served, process = serve_fresh(tmp_path)
    try:
        gone, _ = open_raw(served, "gone-member", expiry=1)
        gone.sendall(subscribe(1, GROUP, 1))
        assert read(gone)[0] == 0x90
        publish_each(served, "t", [b"held"])  # the only member: sent to it
        [held] = take_publishes(gone, 1)  # and never acknowledged
        assert held.payload == b"held"
        remaining = paho(served, "remaining-member")
        remaining.subscribe(GROUP, 1)
        gone.close()
        record_deleted(served.root, "gone-member")
        assert remaining.next().payload == b"held"
        _the_remaining_member_gets_all(served, remaining)
        assert _members_listed(served.root) == {"remaining-member"}
        remaining.stop()
    finally:
        stop_process(process)


def _back_clean_leaves_the_group(served: RunningServer, remaining: Paho) -> None:
    """member311 connects again with a clean start: the remaining member gets every message
    of the group, member311 none, and neither `boxmq ls` nor a session record names it."""
    back = paho(served, "member311", v5=False, clean=True)
    _the_remaining_member_gets_all(served, remaining)
    assert back.nothing(within=0.5)
    assert _members_listed(served.root) == {"remaining-member"}
    assert read_record(str(served.root), "member311") is None
    back.stop()
    remaining.stop()


def test_a_311_member_back_clean_after_a_restart_leaves_its_share_group(tmp_path: Path) -> None:
    """The session outlived the server that held it: the clean start ends it from what the
    restart found on disk (`Lifetimes.forget_on_disk`), not from memory."""
    served, process = serve_fresh(tmp_path)
    try:
        member = paho(served, "member311", v5=False, clean=False)
        member.subscribe(GROUP, 1)
        member.stop()
        recorded_away(served.root, "member311")
        stop_process(process)
        process = serve_process(served.root, served.port)
        remaining = paho(served, "remaining-member")
        remaining.subscribe(GROUP, 1)
        assert _members_listed(served.root) == {"member311", "remaining-member"}
        _back_clean_leaves_the_group(served, remaining)
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
        _back_clean_leaves_the_group(served, remaining)
    finally:
        stop_process(process)
