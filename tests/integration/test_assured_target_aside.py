"""An exactly-once `deliver` (MQTT's PUBREL, urn:xmpp:qos `<deliver/>`) to a queue or a
subscription whose target/ an operator moved aside to make it again (docs/operations.md, "Disk
usage"): it waits a moment for target/ to come back, else is refused as the store's failure,
its message still waiting for a `deliver` again, no new target/ made, no copy left in working/.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import boxmq
from boxmq.errors import StoreFailed, TargetMissing
from boxmq.store import layout
from boxmq.store.topics import EXACTLY_ONCE_PENDING, subscription_path

WAIT = 0.5  # layout.TARGET_BACK_WAIT, shorter for the tests


@pytest.fixture(autouse=True)
def _short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout, "TARGET_BACK_WAIT", WAIT)


@pytest.fixture
def subscribed(box: boxmq.Box) -> Path:
    """The folder of a subscription of "s" to t/#, made whole."""
    box.subscribe("t/#", "s").close()
    return Path(subscription_path(str(box.root), "t/#", "client.s"))


def _files(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def test_a_deliver_to_a_queue_whose_target_is_moved_aside_is_refused_and_makes_none(
    box: boxmq.Box, root: Path
) -> None:
    box.queue("jobs")
    assert box.assured("meter", "1", b"+1", queue="jobs")
    (root / "jobs" / "target").rename(root / "jobs" / "target.old")
    started = time.monotonic()
    with pytest.raises(TargetMissing, match="has no target/"):
        box.deliver("meter", "1")
    assert time.monotonic() - started >= WAIT  # waited for it first
    assert not (root / "jobs" / "target").exists()  # the operator's mkdir still makes it
    assert box.pending("meter") == ["1"]
    assert _files(Path(box.intake.markers)) == []  # nothing was marked delivered
    (root / "jobs" / "target").mkdir()
    assert box.deliver("meter", "1") is True
    assert [name.split(".")[1] for name in os.listdir(root / "jobs" / "target")]
    assert box.deliver("meter", "1") is False  # a repeat now


def test_a_deliver_to_a_subscription_whose_target_is_moved_aside_is_refused_and_sends_later(
    box: boxmq.Box, root: Path, subscribed: Path
) -> None:
    assert box.assured("meter", "1", b"+1", topic="t/x")
    (subscribed / "target").rename(subscribed / "target.old")
    with pytest.raises(TargetMissing) as refused:
        box.deliver("meter", "1")
    # named as the subscription it is, with its topic filter, not as a queue named by its path
    assert str(refused.value).startswith(
        f"subscription of subscriber 's' to topic filter 't/#' has no target/ ({subscribed}/target)"
    )
    assert not (subscribed / "target").exists()
    assert _files(subscribed / "working") == []  # no copy stranded there
    assert box.pending("meter") == ["1"]
    (subscribed / "target").mkdir()
    assert box.deliver("meter", "1") is True
    assert len(os.listdir(subscribed / "target")) == 1
    assert _files(subscribed / "working") == []
    with box.subscribe("t/#", "s") as subscription:
        message = subscription.receive_nowait()
        assert message is not None
        assert message.body == b"+1"


def test_a_share_group_s_target_moved_aside_is_named_as_the_group_s_subscription(
    box: boxmq.Box, root: Path
) -> None:
    folder = Path(box.topics.attach_dropbox("$share/ops/a b/#", "w1"))
    assert box.assured("meter", "1", b"+1", topic="a b/x")
    (folder / "target").rename(folder / "target.old")
    with pytest.raises(TargetMissing) as refused:
        box.deliver("meter", "1")
    assert str(refused.value).startswith(
        "subscription of share group 'ops' to topic filter 'a b/#' has no target/ "
    ), refused.value


@pytest.mark.parametrize("to", ["queue", "topic"])
def test_a_deliver_waits_for_a_target_that_comes_back(
    box: boxmq.Box, root: Path, subscribed: Path, to: str
) -> None:
    """`mv target target.old && mkdir target`, the deliver between the two: sent, not refused."""
    box.queue("jobs")
    dropbox = root / "jobs" if to == "queue" else subscribed
    if to == "queue":
        assert box.assured("meter", "1", b"+1", queue="jobs")
    else:
        assert box.assured("meter", "1", b"+1", topic="t/x")
    (dropbox / "target").rename(dropbox / "target.old")
    back = threading.Timer(WAIT / 4, (dropbox / "target").mkdir)
    back.start()
    try:
        assert box.deliver("meter", "1") is True
    finally:
        back.join()
    assert len(os.listdir(dropbox / "target")) == 1
    assert _files(dropbox / "working") == []


def test_a_queue_s_target_moved_aside_after_its_deliver_was_marked_is_not_made_again(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moved aside between the marker and the move: the move fails as the disk's, and the
    message waits for its `deliver` again; no new target/ under the operator's mkdir."""
    from boxmq.client.markers import Markers

    with boxmq.open(root, fsync="never") as box:
        box.queue("jobs")
        assert box.assured("meter", "1", b"+1", queue="jobs")
        mark_all = Markers.mark_all

        def then_moved_aside(self: Markers, *args: object, **kwargs: object) -> object:
            marked = mark_all(self, *args, **kwargs)  # type: ignore[arg-type]
            target = root / "jobs" / "target"
            if target.is_dir():
                target.rename(root / "jobs" / "target.old")
            return marked

        monkeypatch.setattr(Markers, "mark_all", then_moved_aside)
        with pytest.raises((StoreFailed, OSError)):
            box.deliver("meter", "1")
        assert not (root / "jobs" / "target").exists()
        assert box.pending("meter") == ["1"]


def test_a_copy_whose_target_goes_aside_during_its_fan_out_waits_for_it(
    box: boxmq.Box, root: Path, subscribed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moved aside between the copies' pending links and their renames into target/ (the
    staged file gone: the copy is out): it is renamed once target/ is back, not left in
    working/ until a restart."""
    from boxmq.store import fanout

    assert box.assured("meter", "1", b"+1", topic="t/x")
    link = fanout._link_pending

    def then_moved_aside(*args: object) -> None:
        link(*args)  # type: ignore[arg-type]
        (subscribed / "target").rename(subscribed / "target.old")
        threading.Timer(WAIT / 4, (subscribed / "target").mkdir).start()

    monkeypatch.setattr(fanout, "_link_pending", then_moved_aside)
    assert box.deliver("meter", "1") is True
    assert len(os.listdir(subscribed / "target")) == 1
    assert not (subscribed / "working" / EXACTLY_ONCE_PENDING).exists() or not os.listdir(
        subscribed / "working" / EXACTLY_ONCE_PENDING
    )


def test_a_deliver_waiting_for_its_target_holds_up_no_other_exactly_once_message(
    box: boxmq.Box, root: Path
) -> None:
    """The wait was made holding the intake's lock, so every exactly-once store and deliver
    of the process to any destination (an MQTT door's QoS 2 PUBLISHes and PUBRELs, the XMPP
    door's loop) waited for a target/ it had nothing to do with."""
    box.queue("jobs")
    box.queue("other")
    assert box.assured("meter", "1", b"+1", queue="jobs")
    (root / "jobs" / "target").rename(root / "jobs" / "target.old")
    refused: list[BaseException] = []

    def deliver() -> None:
        try:
            box.deliver("meter", "1")
        except TargetMissing as error:
            refused.append(error)

    waiting = threading.Thread(target=deliver)
    waiting.start()
    try:
        time.sleep(WAIT / 5)  # it waits for jobs' target/ now
        started = time.monotonic()
        assert box.assured("meter", "2", b"+2", queue="other")
        assert box.deliver("meter", "2") is True
        took = time.monotonic() - started
    finally:
        waiting.join()
    assert took < WAIT / 2
    assert len(refused) == 1
    assert box.pending("meter") == ["1"]
    (root / "jobs" / "target").mkdir()
    assert box.deliver("meter", "1") is True
