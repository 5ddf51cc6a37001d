"""Exactly-once receive on real files: duplicates of both steps in every order, restarts,
limits."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.crashes import Killed, kill_at, take_everything
from tests.integration.test_cli import boxmq_cli
from tests.retained import retained_file

import boxmq
from boxmq.client.assured import AssuredMessage
from boxmq.clock import ManualClock
from boxmq.core import ExactlyOnceLimits
from boxmq.errors import InvalidArgument, ItemNotFound, MetadataTooLong
from boxmq.model import GROUP_KEY as GROUP
from boxmq.model import PUBLISHED_RETAINED, SOURCE, SOURCE_MESSAGE_ID
from boxmq.store.side_files import SIDE_DIR, referenced

ORDERS = sorted(set(itertools.permutations("AADD")))  # A: assured, D: deliver (each twice)


def delivered(box: boxmq.Box) -> list[bytes]:
    with box.queue("counts").consumer("reader", max_in_flight=10) as consumer:
        got = []
        while (message := consumer.receive_nowait()) is not None:
            got.append(message.body)
            message.ack()
        return got


@pytest.mark.parametrize("order", ORDERS, ids="".join)
@pytest.mark.parametrize("restart_at", range(5))
def test_duplicates_in_every_order_with_a_restart_deliver_at_most_once(
    root: Path, order: tuple[str, ...], restart_at: int
) -> None:
    box = boxmq.open(root, fsync="never")
    try:
        for step, event in enumerate(order):
            if step == restart_at:
                box.close()
                box = boxmq.open(root, fsync="never")
            if event == "A":
                box.assured("meter-7", "42", b"+1", queue="counts")
            else:
                box.deliver("meter-7", "42")
        first_assured = order.index("A")
        expected = [b"+1"] if "D" in order[first_assured:] else []
        assert delivered(box) == expected
    finally:
        box.close()


def test_assured_to_a_topic_reaches_its_subscribers_once(box: boxmq.Box) -> None:
    with box.subscribe("counts/#", "dash") as dash:
        assert box.assured("door", "1", b"+1", topic="counts/door") is True
        assert dash.receive_nowait() is None  # stored, not delivered yet
        assert box.assured("door", "1", b"+1", topic="counts/door") is False
        assert box.deliver("door", "1") is True
        assert box.deliver("door", "1") is False
        message = dash.receive_nowait()
        assert message is not None
        assert (message.topic, message.body) == ("counts/door", b"+1")
        message.ack()
        assert dash.receive_nowait() is None


def test_a_topics_copies_leave_the_intakes_books_behind(box: boxmq.Box) -> None:
    """Who sent it and under which id are the intake's business; a copy's name has room for
    the topic and the properties instead."""
    with box.subscribe("counts/#", "dash") as dash:
        box.assured("a-sender-with-a-long-name", "65535", b"+1", topic="counts/door")
        box.deliver("a-sender-with-a-long-name", "65535")
        message = dash.receive_nowait()
        assert message is not None
        assert message.envelope.property_value(SOURCE) is None
        assert message.envelope.property_value(SOURCE_MESSAGE_ID) is None
        message.ack()


@pytest.mark.parametrize("to", ["queue", "topic"])
def test_metadata_too_long_for_step_2_is_refused_at_step_1(box: boxmq.Box, to: str) -> None:
    """What `deliver` could not send (its copies' names, like any put's, must leave room for
    a redelivery's count) is refused before `received`, never lost after it."""
    long = "x" * 90
    steps = {
        # The message's group stays in its name (dispatch reads it there), unlike properties
        # that a side file can take (client/spill.py).
        "queue": lambda: box.assured("door", "1", b"+", queue="q", properties={GROUP: long}),
        "topic": lambda: box.assured("door", "1", b"+", topic=f"long/{long}"),
    }
    with box.subscribe("long/#", "dash"), pytest.raises(MetadataTooLong):
        steps[to]()
    assert box.pending("door") == []


def test_an_id_too_long_for_a_name_is_refused_in_the_words_of_the_api(box: boxmq.Box) -> None:
    """The text names assured()'s own parameters, not the XMPP door's msgId, JID and node."""
    with pytest.raises(MetadataTooLong) as refused:
        box.assured("carol@localhost/c", "m" * 80, b"+", queue="q")
    text = str(refused.value)
    assert "msgId" not in text
    assert "JID" not in text
    assert "node" not in text
    assert "msg_id takes 80 bytes" in text
    assert "source 'carol@localhost/c' takes 21" in text
    assert text.endswith("at most 61 fit; use a shorter msg_id")
    with pytest.raises(MetadataTooLong) as refused:
        box.assured("carol@localhost/c", "m" * 80, b"+", topic="t" * 60)
    text = str(refused.value)
    assert "msgId" not in text
    assert "node" not in text
    assert "and topic takes 60" in text
    assert text.endswith("use a shorter msg_id or topic")
    # its copies keep the topic, the only text there to shorten with no properties given
    with pytest.raises(MetadataTooLong) as refused:
        box.assured("carol@localhost/c", "1", b"+", topic="t" * 200)
    assert "properties" not in str(refused.value)
    assert str(refused.value).endswith("at most 79 fit; use a shorter topic")
    assert box.pending("carol@localhost/c") == []
    assert box.assured("carol@localhost/c", "1", b"+", topic="t" * 79)


def test_a_source_past_its_limit_is_refused_and_nothing_accepted_is_lost(root: Path) -> None:
    limits = ExactlyOnceLimits(max_pending_per_source=3, max_bytes_total=100)
    with boxmq.open(root, fsync="never", exactly_once=limits) as box:
        for index in range(3):
            assert box.assured("greedy", str(index), b"x", queue="counts")
        with pytest.raises(boxmq.ResourceConstraint):
            box.assured("greedy", "3", b"x", queue="counts")
        assert box.assured("modest", "0", b"y", queue="counts")  # other sources go on
        with pytest.raises(boxmq.ResourceConstraint):  # total bytes: 4 held, 97 more is 101
            box.assured("modest", "1", b"z" * 97, queue="counts")
        with pytest.raises(boxmq.MessageTooLarge, match="max_bytes_total"):
            box.assured("modest", "1", b"z" * 101, queue="counts")  # alone over: never fits
        for index in range(3):
            assert box.deliver("greedy", str(index))
        assert box.assured("greedy", "3", b"x", queue="counts")  # room again
        assert box.deliver("greedy", "3")
        assert box.deliver("modest", "0")
        assert sorted(delivered(box)) == [b"x"] * 4 + [b"y"]


def test_untrusted_sources_and_oversized_messages_are_refused(root: Path) -> None:
    limits = ExactlyOnceLimits(trusted_sources=frozenset({"friend"}), max_message_size=10)
    with boxmq.open(root, fsync="never", exactly_once=limits) as box:
        with pytest.raises(boxmq.NotAllowed):
            box.assured("stranger", "1", b"x", queue="counts")
        with pytest.raises(boxmq.MessageTooLarge):
            box.assured("friend", "1", b"x" * 11, queue="counts")
        assert box.assured("friend", "2", b"ok", queue="counts")


def test_pending_messages_expire_and_are_never_delivered(root: Path) -> None:
    clock = boxmq.ManualClock()
    limits = ExactlyOnceLimits(pending_ttl=60)
    with boxmq.open(root, fsync="never", exactly_once=limits, clock=clock) as box:
        box.assured("s", "1", b"late", queue="counts")
        clock.advance(61)
        box.sweep()
        assert box.deliver("s", "1") is False
        assert delivered(box) == []
        assert box.queue("counts").counts().uncommitted == 0


def test_must_exist_tells_an_unknown_id_from_a_repeat(box: boxmq.Box) -> None:
    with pytest.raises(boxmq.ItemNotFound) as refused:
        box.deliver("s", "never", must_exist=True)
    # in words every door shares: the API's is msg_id, the XMPP door's msgId
    assert str(refused.value) == "never: no message is stored under this id (or it expired)"
    assert box.deliver("s", "never") is False  # the default stays quiet (MQTT's PUBREL)
    box.assured("s", "1", b"x", queue="counts")
    assert box.deliver("s", "1", must_exist=True) is True
    assert box.deliver("s", "1", must_exist=True) is False  # a repeat is no error


def test_the_destination_of_a_stored_message_is_known_until_its_deliver(root: Path) -> None:
    # What an XMPP <deliver/> wakes: the queue or topic its <assured/> went to, also after a
    # restart between the two steps; nothing once it is delivered, or for an id never stored.
    with boxmq.open(root, fsync="never") as box:
        box.assured("s", "q", b"x", queue="counts")
        box.assured("s", "t", b"x", topic="news")
    with boxmq.open(root, fsync="never") as box:
        intake = box.intake
        assert intake.destination("s", "q") == "counts"
        assert intake.destination("s", "t") == "news"
        assert intake.destination("s", "never") is None
        assert box.deliver("s", "q") is True
        assert intake.destination("s", "q") is None


def test_a_message_swept_away_before_its_deliver_can_be_sent_again(root: Path) -> None:
    """Another process's sweeper (or an operator) removed the stored file: the id is not
    kept as delivered, or the sender's resend would be taken for a repeat and lost."""
    with boxmq.open(root, fsync="never") as box:
        box.assured("s", "1", b"first", queue="counts")
        for stored in (root / "counts" / "working").iterdir():
            stored.unlink()
        with pytest.raises(boxmq.ItemNotFound):
            box.deliver("s", "1", must_exist=True)
        assert box.assured("s", "1", b"again", queue="counts") is True  # stored, not a repeat
        assert box.deliver("s", "1", must_exist=True) is True
        assert delivered(box) == [b"again"]
    with boxmq.open(root, fsync="never") as box:  # and no marker says otherwise after a restart
        assert box.deliver("s", "1") is False
        assert delivered(box) == []


def test_a_deliver_after_its_queue_was_deleted_makes_no_queue_again(root: Path) -> None:
    """The queue went with the stored message (`boxmq delete` from another process): the
    `deliver` tells the sender so (ItemNotFound, the XMPP door's item-not-found) and leaves
    the queue deleted. Its move into target/ made the queue's folders first, so the queue
    came back, empty and ownerless (`boxmq ls` listed it; over XMPP a create of the node
    was refused `conflict`, "node 'counts' exists")."""
    with boxmq.open(root, fsync="never") as box:
        assert box.assured("s", "1", b"x", queue="counts") is True
        deleted = boxmq_cli(root, "delete", "counts")
        assert deleted.returncode == 0, deleted.stderr
        with pytest.raises(boxmq.ItemNotFound):
            box.deliver("s", "1", must_exist=True)
        assert box.queues() == []
        assert not (root / "counts").exists()
        assert box.assured("s", "1", b"again", queue="counts") is True  # a new message
        assert box.deliver("s", "1", must_exist=True) is True
        assert delivered(box) == [b"again"]


def test_a_reclaimed_id_is_a_new_message_also_across_a_restart(root: Path) -> None:
    with boxmq.open(root, fsync="never") as box:
        assert box.assured("s", "1", b"first", queue="counts", reclaim=True)
        assert box.deliver("s", "1")
        assert box.assured("s", "1", b"late", queue="counts") is False  # default: a late repeat
        assert box.assured("s", "1", b"second", queue="counts", reclaim=True)
    with boxmq.open(root, fsync="never") as box:  # restarted before its deliver came
        assert delivered(box) == [b"first"]
        assert box.deliver("s", "1")
        assert delivered(box) == [b"second"]


@pytest.mark.parametrize("done_ttl", [0.0, 10.0])
def test_an_id_no_longer_remembered_names_a_new_message_that_a_restart_does_not_send(
    root: Path, done_ttl: float
) -> None:
    """Its marker stayed on disk (done_ttl 0 keeps none in memory; past done_ttl the books
    forget before a sweep forgets the marker): a restart took the new file for one delivered
    and not yet moved, and sent it without its deliver (found by a stateful model test)."""
    clock = boxmq.ManualClock()
    limits = ExactlyOnceLimits(done_ttl=done_ttl)
    with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as box:
        assert box.assured("s", "1", b"first", queue="counts")
        assert box.deliver("s", "1")
        clock.advance(done_ttl + 1)  # no sweep meanwhile
        assert box.assured("s", "1", b"second", queue="counts") is True  # a new message
    with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as box:
        assert box.pending("s") == ["1"]
        assert delivered(box) == [b"first"]
        assert box.deliver("s", "1") is True
        assert delivered(box) == [b"second"]


def test_a_sweep_keeps_a_message_waiting_for_its_deliver_until_pending_ttl(root: Path) -> None:
    """working/'s sweep took it for a producer's uncommitted file and deleted it after
    `abandon_after` (an hour), whatever `pending_ttl` said: a message answered `received`
    was lost, and its `deliver` found nothing (found by a review)."""
    clock = boxmq.ManualClock(time.time())  # the sweep ages a file by its ctime
    limits = ExactlyOnceLimits(pending_ttl=7200.0)
    with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as box:
        assert box.assured("s", "1", b"late", queue="counts")
        jobs = box.queue("counts")
        working = root / "counts" / "working"
        (working / "4.1-1.B").write_bytes(b"abandoned")  # a producer's, never committed
        clock.advance(3700.0)  # past abandon_after, within pending_ttl
        box.sweep()
        assert len(os.listdir(working)) == 1  # the producer's file went, the message stays
        assert "4.1-1.B" not in os.listdir(working)
        assert box.deliver("s", "1", must_exist=True)
        assert [p.size for p in jobs.peek()] == [4]
        assert box.assured("s", "2", b"never", queue="counts")
        clock.advance(7300.0)  # past pending_ttl: the sweep drops it, never delivered
        box.sweep()
        assert os.listdir(working) == []
        with pytest.raises(ItemNotFound):
            box.deliver("s", "2", must_exist=True)


def test_a_sender_that_moves_to_a_process_that_read_the_files_before_finds_its_messages(
    root: Path,
) -> None:
    """The other process read the intake's files at its first use, before the sender's
    first process stored its message: `pending` did not list it (the MQTT server resumed
    the session without it: its PUBREL was "not found"), a repeat of step 1 stored a second
    copy, and a restart then sent the first one too, under the second one's marker."""
    other = boxmq.open(root, fsync="never")
    try:
        assert other.pending("door") == []  # it serves other senders: it read the files
        with boxmq.open(root, fsync="never") as first:
            assert first.assured("door", "1", b"once", queue="counts")
        # the first process stopped; the sender goes on with the other one
        assert other.pending("door") == ["1"]
        assert other.assured("door", "1", b"once", queue="counts") is False  # a repeat
        assert other.deliver("door", "1", must_exist=True)
        assert other.pending("door") == []
        assert delivered(other) == [b"once"]
    finally:
        other.close()
    with boxmq.open(root, fsync="never") as box:
        assert box.pending("door") == []
        assert delivered(box) == []
    # and the other way: what it still counted as pending left working/ in another process
    with boxmq.open(root, fsync="never") as box:
        assert box.assured("door", "2", b"two", queue="counts")
        with boxmq.open(root, fsync="never") as first:
            assert first.pending("door") == ["2"]  # it reads the files now
            assert first.deliver("door", "2", remember=False)
        assert box.pending("door") == []
        assert box.assured("door", "2", b"new", queue="counts") is True  # a new message
        assert box.deliver("door", "2")
        assert delivered(box) == [b"two", b"new"]


# -- a process killed at any point of `deliver`, then restarted ---------------------------------


def _files_in(folder: Path) -> list[str]:
    return [name for _, _, names in os.walk(folder) for name in names]


def _kill_take_restart(
    root: Path, monkeypatch: pytest.MonkeyPatch, *, topic: bool, count: int = 1
) -> int:
    """For each step of a `deliver` (of `count` messages: one `deliver_many`) in turn: kill
    the process there, let a consumer take and acknowledge what was out so far, restart on
    the same root (the sender repeats its `deliver`, as an MQTT client repeats PUBREL), and
    check that every destination got each message exactly once and that nothing is left on
    its way. Returns how many steps a `deliver` takes."""
    keys = [("door", str(n)) for n in range(count)]
    step = 0
    while True:
        step += 1
        data = root / f"killed-at-{step}"
        box = boxmq.open(data, fsync="never")
        try:
            if topic:
                dropboxes = [
                    box.topics.attach_dropbox("$share/ops/counts/#", "w1"),
                    box.topics.attach_dropbox("counts/+", "auditor"),
                ]
            else:
                dropboxes = [str(data / "counts")]
            for source, msg_id in keys:
                if topic:
                    box.assured(source, msg_id, msg_id.encode(), topic="counts/door")
                else:
                    box.assured(source, msg_id, msg_id.encode(), queue="counts")
            with monkeypatch.context() as dying:
                kill_at(dying, step)
                try:
                    _deliver(box, keys)
                    killed = False
                except Killed:
                    killed = True
        finally:
            box.close()
        published = take_everything(dropboxes)
        if killed:
            with boxmq.open(data, fsync="never") as restarted:
                _deliver(restarted, keys)
        for dropbox, names in take_everything(dropboxes).items():
            got = published[dropbox] + names
            assert len(got) == len(set(got)) == count, f"killed at step {step}: {dropbox} got {got}"
            left = _files_in(Path(dropbox, "working"))
            assert not left, f"killed at step {step}: {dropbox} still holds {left}"
        assert not _files_in(data / "topic-root" / ".incoming"), f"killed at step {step}"
        if not killed:
            return step


def _deliver(box: boxmq.Box, keys: list[tuple[str, str]]) -> None:
    """One message as `Box.deliver` takes it, several as the intake's `deliver_many` does."""
    if len(keys) == 1:
        box.deliver(*keys[0])
    else:
        box.intake.deliver_many(keys)


def test_a_queue_gets_an_assured_message_once_wherever_deliver_was_killed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _kill_take_restart(root, monkeypatch, topic=False) > 2


def test_each_subscription_gets_an_assured_message_once_wherever_deliver_was_killed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _kill_take_restart(root, monkeypatch, topic=True) > 4


@pytest.mark.parametrize("topic", [False, True], ids=["queue", "topic"])
def test_an_id_delivered_unremembered_names_a_new_message_wherever_deliver_was_killed(
    root: Path, monkeypatch: pytest.MonkeyPatch, topic: bool
) -> None:
    """MQTT's PUBREL is `deliver(remember=False)`: after PUBCOMP the client may send a new
    message under the packet id. Killed anywhere in that deliver (a SIGKILL of `boxmq
    serve`), the restart must not take the id for delivered: the client's PUBREL again is
    answered, and its next message under that id is stored and sent, not answered as a
    repeat and dropped (its PUBCOMP then acknowledged a message nobody got)."""
    step = 0
    while True:
        step += 1
        data = root / f"killed-at-{step}"
        box = boxmq.open(data, fsync="never")  # the kill is the process's: no flush matters
        queue, to = (None, "counts/door") if topic else ("counts", None)
        try:
            dropbox = box.topics.attach_dropbox("counts/#", "keeper") if topic else None
            box.assured("mqtt:door", "7", b"first", queue=queue, topic=to)
            with monkeypatch.context() as dying:
                kill_at(dying, step)
                try:
                    box.intake.deliver("mqtt:door", "7", remember=False, must_exist=True)
                    killed = False
                except Killed:
                    killed = True
        finally:
            box.close()
        with boxmq.open(data, fsync="never") as restarted:
            if killed:  # the client sends its PUBREL again: answered, whatever it finds
                with contextlib.suppress(ItemNotFound):
                    restarted.intake.deliver("mqtt:door", "7", remember=False, must_exist=True)
            stored = restarted.assured("mqtt:door", "7", b"second", queue=queue, topic=to)
            assert stored, f"killed at step {step}: a new message taken for a repeat"
            assert restarted.intake.deliver("mqtt:door", "7", remember=False, must_exist=True)
        folder = Path(dropbox) if dropbox else data / "counts"
        bodies = sorted(path.read_bytes() for path in (folder / "target").iterdir())
        assert bodies == [b"first", b"second"], f"killed at step {step}"
        if not killed:
            assert step > 3
            return


def test_drop_pending_deletes_one_sources_files_and_frees_its_ids(box: boxmq.Box) -> None:
    box.assured("gone", "1", b"queued", queue="counts")
    box.assured("gone", "2", b"topical", topic="t")
    box.assured("stays", "1", b"kept", queue="counts")
    assert box.drop_pending("gone") == 2
    assert box.pending("gone") == []
    assert box.queue("counts").counts().uncommitted == 1  # the other source's
    assert not os.listdir(os.path.join(box.root, "topic-root", ".incoming", "working"))
    assert box.assured("gone", "1", b"new", queue="counts")  # a new message, not a repeat
    assert box.deliver("gone", "1")
    assert box.deliver("stays", "1")
    assert sorted(delivered(box)) == [b"kept", b"new"]


def test_assured_many_tells_each_message_what_assured_would(box: boxmq.Box) -> None:
    intake = box.intake
    box.assured("door", "0", b"before", queue="counts")
    outcomes = intake.assured_many(
        [
            AssuredMessage("door", "0", b"repeat", queue="counts"),
            AssuredMessage("door", "1", b"+1", queue="counts"),
            AssuredMessage("door", "2", b"+2", topic="counts/door"),
            AssuredMessage("door", "3", b"lost", queue="counts", topic="counts/door"),
            AssuredMessage("door", "4", b"long", topic="t" * 300),
            AssuredMessage("door", "1", b"repeat", queue="counts"),
        ]
    )
    assert outcomes[:3] == [False, True, True]
    assert isinstance(outcomes[3], InvalidArgument)
    assert isinstance(outcomes[4], MetadataTooLong)
    assert outcomes[5] is False
    assert sorted(box.pending("door")) == ["0", "1", "2"]  # the refused ones left nothing


def test_deliver_many_tells_each_id_what_deliver_would(box: boxmq.Box) -> None:
    with box.subscribe("counts/#", "dash") as dash:
        for msg_id in ("1", "2", "3"):
            box.assured("door", msg_id, msg_id.encode(), topic="counts/door")
        box.assured("desk", "1", b"queued", queue="counts")
        keys = [("door", "2"), ("door", "1"), ("door", "2"), ("desk", "1"), ("door", "9")]
        outcomes = box.intake.deliver_many(keys, must_exist=True)
        assert outcomes[:4] == [True, True, False, True]
        assert isinstance(outcomes[4], ItemNotFound)
        assert box.intake.deliver_many([("door", "9")]) == [False]
        got = []
        while (message := dash.receive_nowait()) is not None:
            got.append(message.body)
            message.ack()
        assert sorted(got) == [b"1", b"2"]
    assert box.pending("door") == ["3"]
    assert delivered(box) == [b"queued"]


def test_deliver_many_finishes_a_batch_wherever_it_was_killed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three messages delivered together to two subscriptions, killed at each step in turn."""
    assert _kill_take_restart(root, monkeypatch, topic=True, count=3) > 12


@pytest.mark.parametrize("topic", ["a/+", "a/#", "", "x\x00y"])
def test_a_topic_no_publish_could_take_is_refused_before_anything_is_kept(
    root: Path, topic: str
) -> None:
    """It was stored, then failed at `deliver` after its "delivered" marker, and at every
    later start it failed the first call of each process and kept other senders' pending
    messages out of the books (their deliver then said "done", and they were lost)."""
    with boxmq.open(root, fsync="never") as box:
        with pytest.raises(InvalidArgument):
            box.assured("evil", "1", b"x", topic=topic)
        assert box.pending("evil") == []
        assert box.assured("evil", "1", b"x", topic="ok/t")  # the id is still free


@pytest.mark.parametrize("topic", ["a/+", "", "x\x00y"])
def test_a_pending_message_that_cannot_be_sent_keeps_no_other_from_its_books(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, topic: str
) -> None:
    """A file in .incoming/working/ that fails at restore (here one an older version let in,
    marked delivered and never sent) is logged and left; the other pending messages are
    restored, delivered once, and their repeats still known. The empty topic is stored with
    no topic at all, which a restore must refuse as well (it failed an assertion there)."""
    with boxmq.open(root, fsync="never") as box:
        box.subscribe("ok/#", "sub").close()
        for n in range(5):
            assert box.assured("meter", str(n), b"m%d" % n, topic="ok/t")
        monkeypatch.setattr("boxmq.client.assured.validate_topic", lambda topic: topic)
        box.assured("evil", "1", b"x", topic=topic)
        with pytest.raises((boxmq.BoxMQError, AssertionError)):  # the older version's failure
            box.deliver("evil", "1")
    monkeypatch.undo()
    with boxmq.open(root, fsync="never") as box:
        assert sorted(box.pending("meter")) == [str(n) for n in range(5)]
        assert all(box.deliver("meter", str(n)) for n in range(5))
        assert not box.assured("meter", "0", b"m0", topic="ok/t")  # a repeat, still known
        with box.subscribe("ok/#", "sub") as sub:
            got = []
            while (message := sub.receive_nowait()) is not None:
                got.append(message.body)
                message.ack()
        assert sorted(got) == [b"m%d" % n for n in range(5)]
    assert [r.levelname for r in caplog.records if "stays in" in r.getMessage()] == ["ERROR"]


@pytest.mark.parametrize("policy", ["always", "never"])
def test_an_id_forgotten_at_deliver_is_forgotten_on_disk_before_deliver_returns(
    root: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """deliver(remember=False) (an MQTT PUBREL: the client may reuse the packet id at once)
    removes the id's marker; under `always` the removal is flushed before the sender is
    answered. Were it lost to a machine crash, the marker would come back, and the new
    message sent again under the id after the restart (never answered before it) would be
    taken for a repeat of the delivered one: answered, never stored, as the end shows."""
    events: list[tuple[str, str]] = []
    real_unlink, real_fsync = os.unlink, os.fsync

    def unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        events.append(("unlink", os.path.dirname(os.fspath(path))))
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    def spy_fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    with boxmq.open(root, fsync=policy) as box:
        markers = box.intake.markers
        assert box.assured("door", "7", b"first", queue="counts")
        monkeypatch.setattr(os, "unlink", unlink)
        monkeypatch.setattr(os, "fsync", spy_fsync)
        assert box.deliver("door", "7", remember=False, must_exist=True)
        monkeypatch.undo()
        removed = events.index(("unlink", markers))
        flushed = ("fsync", markers) in events[removed:]
        assert flushed is (policy == "always")
        # what a lost removal would do: the marker back on disk, as a crash could bring it
        with open(os.path.join(markers, "back"), "w") as marker:
            marker.write('{"source": "door", "msg_id": "7"}')
    with boxmq.open(root, fsync=policy) as box:
        assert box.assured("door", "7", b"second", queue="counts") is False  # taken for a repeat
        assert delivered(box) == [b"first"]


def test_deliver_many_tells_a_repeat_of_a_message_swept_away_what_deliver_would(
    root: Path,
) -> None:
    """The file was gone at `deliver` (swept by another process): the first of the id is
    unknown, and so is its repeat in the same batch, as two `deliver` calls would tell; it
    was told False, a repeat of a message delivered, and the sender took it for sent."""
    clock = ManualClock(time.time())
    limits = ExactlyOnceLimits(pending_ttl=20.0)
    with (
        boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as box,
        boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as other,
    ):
        assert other.pending("door") == []  # it read the files: it sweeps what it knows
        assert box.assured("door", "1", b"lost", queue="counts")
        assert other.pending("door") == ["1"]
        clock.advance(25.0)
        other.sweep()
        outcomes = box.intake.deliver_many([("door", "1"), ("door", "1")], must_exist=True)
        assert [type(outcome) for outcome in outcomes] == [ItemNotFound, ItemNotFound]
        assert box.intake.deliver_many([("door", "1"), ("door", "1")]) == [False, False]
        assert box.assured("door", "1", b"again", queue="counts")  # a new message
        assert delivered(box) == []


def test_deliver_many_tells_a_repeat_of_a_message_it_failed_to_deliver_the_failure(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its marker could not be written, so the message still waits for its `deliver`: the
    repeat in the batch (an MQTT client's PUBREL twice) was told ItemNotFound, as if the
    message were lost, rather than the failure that a `deliver` after the first would meet."""
    assert box.assured("door", "1", b"+1", queue="counts")
    with monkeypatch.context() as failing:
        failing.setattr(
            "boxmq.client.markers.temporary_in", lambda folder: os.path.join(folder, "no", "tmp")
        )
        outcomes = box.intake.deliver_many(
            [("door", "1"), ("door", "1")], remember=False, must_exist=True
        )
    assert [type(outcome) for outcome in outcomes] == [FileNotFoundError] * 2
    assert box.pending("door") == ["1"]
    assert box.intake.deliver_many([("door", "1"), ("door", "1")], remember=False) == [True, False]
    assert delivered(box) == [b"+1"]


def test_a_repeat_under_a_pending_id_is_answered_and_the_first_message_kept(
    box: boxmq.Box,
) -> None:
    """The QoS document: messages with the msgId of one held are "simply ignored", even when
    their content differs; `deliver` sends the one first received."""
    assert box.assured("door", "1", b"first", queue="counts") is True
    assert box.assured("door", "1", b"other", queue="counts", priority=9) is False
    assert box.queue("counts").counts().uncommitted == 1
    assert box.deliver("door", "1") is True
    assert delivered(box) == [b"first"]


def test_a_restart_frees_no_room_the_pending_messages_take(root: Path) -> None:
    """Memory attacks 2 and 3: a source cannot pass its limits, nor everyone the total,
    by making the receiver restart; the pending messages read back count as before."""
    limits = ExactlyOnceLimits(max_pending_per_source=2, max_pending_total=3)
    with boxmq.open(root, fsync="never", exactly_once=limits) as box:
        assert box.assured("greedy", "1", b"x", queue="counts")
        assert box.assured("greedy", "2", b"x", topic="counts/door")
        assert box.assured("modest", "1", b"y", queue="counts")
    with boxmq.open(root, fsync="never", exactly_once=limits) as box:
        with pytest.raises(boxmq.ResourceConstraint, match="max_pending_per_source"):
            box.assured("greedy", "3", b"x", queue="counts")
        with pytest.raises(boxmq.ResourceConstraint, match="max_pending_total"):
            box.assured("third", "1", b"z", queue="counts")
        assert box.assured("greedy", "1", b"x", queue="counts") is False  # repeats answered
        assert box.deliver("greedy", "1") is True
        assert box.assured("third", "1", b"z", queue="counts") is True  # room again
        assert box.pending("greedy") == ["2"]


def test_each_process_counts_the_limits_against_what_it_stored_and_read_at_its_first_use(
    root: Path,
) -> None:
    """docs/pubsub.md, Exactly once: the limits are each process's. One opened later reads
    what the others stored at its first use and counts it; one that read the files before
    does not see what another stored since, so two of them may hold more between them than
    max_pending_total."""
    limits = ExactlyOnceLimits(max_pending_total=2)
    with (
        boxmq.open(root, fsync="never", exactly_once=limits) as first,
        boxmq.open(root, fsync="never", exactly_once=limits) as second,
    ):
        assert first.assured("s3", "1", b"x", queue="counts") is True  # its first use
        assert second.assured("s1", "1", b"x", queue="counts") is True  # s3 read and counted
        with pytest.raises(boxmq.ResourceConstraint, match="max_pending_total"):
            second.assured("s2", "1", b"x", queue="counts")
        assert first.assured("s4", "1", b"x", queue="counts") is True  # s1 is not counted here
        with pytest.raises(boxmq.ResourceConstraint, match="max_pending_total"):
            first.assured("s5", "1", b"x", queue="counts")
    assert len(list((root / "counts" / "working").iterdir())) == 3


def test_a_restart_keeps_the_clocks_of_done_ttl_and_pending_ttl(root: Path) -> None:
    """How long a delivered msgId is remembered and a stored message waits for its deliver
    count from the step, not from the restart that read them back."""
    clock = ManualClock(time.time())
    limits = ExactlyOnceLimits(done_ttl=100, pending_ttl=100)

    def opened() -> boxmq.Box:
        return boxmq.open(root, fsync="never", exactly_once=limits, clock=clock)

    with opened() as box:
        assert box.assured("s", "done", b"first", queue="counts")
        assert box.deliver("s", "done")
        assert box.assured("s", "waits", b"late", queue="counts")
    clock.advance(60)
    with opened() as box:
        assert box.assured("s", "done", b"repeat", queue="counts") is False  # remembered
        assert box.pending("s") == ["waits"]
    clock.advance(60)  # 120 s after both steps, 60 s after the restart
    with opened() as box:
        box.sweep()
        assert box.pending("s") == []
        assert box.deliver("s", "waits") is False  # expired: never delivered
        assert box.assured("s", "done", b"second", queue="counts") is True  # a new message
        assert box.deliver("s", "done") is True
        assert delivered(box) == [b"first", b"second"]


def test_ids_of_two_sources_that_join_alike_keep_their_own_delivery_record(root: Path) -> None:
    """A delivery's record was named by a hash of source, NUL, msg_id, so ('a\\0b', 'c') and
    ('a', 'b\\0c') shared one: the second deliver overwrote the first's, and after a restart
    a late repeat of the first was stored and delivered again."""
    first, second = ("a\0b", "c"), ("a", "b\0c")
    with boxmq.open(root, fsync="never") as box:
        for key in (first, second):
            assert box.assured(*key, key[0].encode(), queue="counts")
            assert box.deliver(*key)
    with boxmq.open(root, fsync="never") as box:
        for key in (first, second):
            assert box.assured(*key, b"late", queue="counts") is False, key
            assert box.deliver(*key) is False, key
        assert sorted(delivered(box)) == [b"a", b"a\0b"]


@pytest.mark.parametrize("bad", ["source", "msg_id"])
def test_a_lone_surrogate_in_a_batch_is_refused_alone_and_the_others_kept(
    box: boxmq.Box, bad: str
) -> None:
    """A source or msg_id no file can name (a lone surrogate, which has no UTF-8) raised
    UnicodeEncodeError out of `assured_many`, after the messages before it were written and
    given room: their files stayed in working/ and their ids reserved, never `received`."""
    odd = {"source": ("\udc80", "1"), "msg_id": ("door", "\udc80")}[bad]
    outcomes = box.intake.assured_many(
        [
            AssuredMessage("door", "0", b"before", queue="counts"),
            AssuredMessage(*odd, b"odd", queue="counts"),
            AssuredMessage("door", "2", b"after", queue="counts"),
        ]
    )
    assert outcomes[0] is True
    assert outcomes[2] is True
    assert isinstance(outcomes[1], InvalidArgument)
    assert f"{bad} has a lone surrogate" in str(outcomes[1])
    with pytest.raises(InvalidArgument, match=f"{bad} has a lone surrogate"):
        box.assured(*odd, b"odd", queue="counts")
    assert box.deliver("door", "0")
    assert box.deliver("door", "2")
    assert sorted(delivered(box)) == [b"after", b"before"]
    assert box.queue("counts").counts().uncommitted == 0


@pytest.mark.parametrize("spilled", [False, True], ids=["short", "side-file"])
@pytest.mark.parametrize("reclaim", [False, True], ids=["new-id", "reclaimed-id"])
@pytest.mark.parametrize("topic", [False, True], ids=["queue", "topic"])
def test_an_assured_killed_anywhere_is_sent_once_after_the_senders_retry(
    root: Path, monkeypatch: pytest.MonkeyPatch, topic: bool, reclaim: bool, spilled: bool
) -> None:
    """Step 1 killed at each change it makes to the files (its `received` never sent): after
    a restart the sender sends it again and then its `deliver`, and the message goes out
    exactly once, whether the kill came before or after it was kept. With an id reclaimed
    after an earlier delivery, the record of that delivery must not make the new message
    pass for delivered, nor for a repeat. Properties too long for a name go to a side file
    first, which every message sent must find."""
    properties = {"note": "n" * 300} if spilled else None
    queue, to = (None, "counts/door") if topic else ("counts", None)

    def send(into: boxmq.Box) -> None:  # the sender's step 1 of the message
        into.assured(
            "door", "7", b"new", queue=queue, topic=to, reclaim=reclaim, properties=properties
        )

    step = 0
    while True:
        step += 1
        data = root / f"killed-at-{step}"
        box = boxmq.open(data, fsync="never")
        try:
            dropbox = box.topics.attach_dropbox("counts/#", "keeper") if topic else None
            if reclaim:
                assert box.assured("door", "7", b"earlier", queue=queue, topic=to)
                assert box.deliver("door", "7")
            with monkeypatch.context() as dying:
                kill_at(dying, step)
                try:
                    send(box)
                    killed = False
                except Killed:
                    killed = True
        finally:
            box.close()
        with boxmq.open(data, fsync="never") as restarted:
            if killed:  # no `received`: the sender sends step 1 again
                send(restarted)
            assert restarted.pending("door") == ["7"], f"killed at step {step}"
            assert restarted.deliver("door", "7", must_exist=True), f"killed at step {step}"
            assert restarted.deliver("door", "7") is False
        folder = Path(dropbox) if dropbox else data / "counts"
        bodies = sorted(path.read_bytes() for path in (folder / "target").iterdir())
        expected = [b"earlier", b"new"] if reclaim else [b"new"]
        assert bodies == expected, f"killed at step {step}"
        # A temporary the kill left behind is the sweep's, after abandon_after.
        left = [name for name in _files_in(folder / "working") if not name.startswith(".tmp-")]
        assert not left, f"killed at step {step}"
        side_files = set(os.listdir(data / SIDE_DIR)) if spilled else set()
        assert referenced(str(data)) <= side_files, f"killed at step {step}"
        if not killed:
            assert step > 1
            return


def test_a_delivery_record_an_older_boxmq_named_for_a_source_with_a_nul_is_renamed(
    root: Path,
) -> None:
    """boxmq before fd6c436 (2026-11-29) named the delivery record of a source holding a NUL
    by sha256(source, NUL, msg_id), as it names every other. Read back by its content, it
    was never removed by that name: a reclaimed id's new message was then taken, at the
    next restart, for one delivered and not yet moved, and sent without its deliver."""
    markers = root / ".exactly-once"
    markers.mkdir(parents=True)
    old_name = hashlib.sha256(b"a\0b\0c").hexdigest()  # the name boxmq 2026-11-22..29 gave it
    (markers / old_name).write_text(json.dumps({"source": "a\0b", "msg_id": "c"}))
    with boxmq.open(root, fsync="never") as box:
        assert box.assured("a\0b", "c", b"late", queue="counts") is False  # still remembered
        assert box.assured("a\0b", "c", b"new", queue="counts", reclaim=True) is True
    with boxmq.open(root, fsync="never") as box:
        assert delivered(box) == []  # waits for its deliver
        assert box.deliver("a\0b", "c") is True
        assert delivered(box) == [b"new"]
    assert old_name not in os.listdir(markers)


def test_a_delivery_record_that_is_none_is_skipped_with_a_warning_naming_it(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged record was skipped in silence, and one holding JSON that is no object failed
    every exactly-once call after a restart with a TypeError (found by an upgrade hunt)."""
    markers = root / ".exactly-once"
    markers.mkdir(parents=True)
    (markers / "list").write_text("[1]")
    (markers / "half").write_text('{"sou')
    (markers / "keyless").write_text('{"source": "s"}')
    with caplog.at_level(logging.WARNING, "boxmq.exactly_once"), boxmq.open(root) as box:
        assert box.assured("s", "1", b"x", queue="counts") is True
        assert box.deliver("s", "1") is True
    told = sorted(r.getMessage() for r in caplog.records)
    assert [line.split(" is no delivery record")[0] for line in told] == [
        f"exactly once: {markers / name}" for name in ("half", "keyless", "list")
    ]


def _killed_after_its_marker(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch, *, remember: bool = True
) -> None:
    """`deliver` of ("s", "1"), killed once its marker is in place, before the move."""
    with monkeypatch.context() as dying:
        kill_at(dying, 4)  # the markers' folder made, the marker written and renamed into it
        with pytest.raises(Killed):
            box.deliver("s", "1", remember=remember)


def test_a_restart_that_sweeps_first_sends_a_message_marked_delivered(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed between a `deliver`'s marker and its move, restarted past pending_ttl
    from its `assured`: working/'s sweep, before the books were read, deleted the message as
    one whose `deliver` never came, and the marker then answered the sender's repeated
    `deliver` as done: lost, and its sender told it was delivered."""
    clock = ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        assert box.assured("s", "1", b"x", queue="counts")
        clock.advance(3000.0)
        _killed_after_its_marker(box, monkeypatch)
    clock.advance(700.0)
    with boxmq.open(root, fsync="never", clock=clock) as box:
        box.sweep()
        assert delivered(box) == [b"x"]
        assert box.deliver("s", "1") is False  # its repeat: nothing sent again


@pytest.mark.parametrize("record", ["current", "older"])
def test_another_process_keeps_the_marker_of_a_message_still_waiting_past_done_ttl(
    root: Path, monkeypatch: pytest.MonkeyPatch, record: str
) -> None:
    """A process killed between a `deliver`'s marker and its move, and another on the root
    sweeping past done_ttl before it restarts: it deleted the marker as an old one, and the
    restart took the message for one whose `deliver` never came (and a queue's sweep deleted
    the message past pending_ttl). A marker of a boxmq before 2026-11-30 names no file: the
    sweep looks for its message in working/."""
    clock = ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as other:
        other.sweep()  # its books read before the message was stored
        with boxmq.open(root, fsync="never", clock=clock) as box:
            assert box.assured("s", "1", b"x", queue="counts")
            _killed_after_its_marker(box, monkeypatch)
        [marker] = (root / ".exactly-once").glob("[!.]*")
        if record == "older":
            marker.write_text(json.dumps({"source": "s", "msg_id": "1"}))
        clock.advance(3601.0)  # past done_ttl and pending_ttl
        other.sweep()
        assert marker.exists()
    with boxmq.open(root, fsync="never", clock=clock) as box:
        box.sweep()  # what `boxmq serve` runs at its start
        assert delivered(box) == [b"x"]
        clock.advance(3601.0)
        box.sweep()
        assert not marker.exists()  # sent: forgotten past done_ttl
        assert delivered(box) == []


@pytest.mark.parametrize("remember", [True, False], ids=["remembered", "forgotten"])
def test_a_deliver_finished_at_its_senders_arrival_is_remembered_as_at_a_restart(
    root: Path, monkeypatch: pytest.MonkeyPatch, remember: bool
) -> None:
    """`pending` of a sender arriving from a process killed after its `deliver`'s marker sent
    the message but left its id unknown: a repeat of the `deliver` was told the message was
    lost (ItemNotFound), where a restart answers it as done. One that remembers nothing
    (MQTT's PUBREL) keeps its marker, as a restart does: it answers the repeat as done."""
    with boxmq.open(root, fsync="never") as other:
        other.pending("s")  # read before the message was stored
        with boxmq.open(root, fsync="never") as box:
            assert box.assured("s", "1", b"x", queue="counts")
            _killed_after_its_marker(box, monkeypatch, remember=remember)
        [marker] = (root / ".exactly-once").glob("[!.]*")
        assert other.pending("s") == []
        assert delivered(other) == [b"x"]
        # a repeat, answered as done: remembered, or (MQTT's PUBREL again) by its marker,
        # which stays, as at a restart, until a sweep or a new message under the id
        assert other.deliver("s", "1", remember=remember, must_exist=True) is False
        assert marker.exists()
        if not remember:  # not remembered: the id names a new message at once
            assert other.assured("s", "1", b"y", queue="counts")
            assert not marker.exists()


@pytest.mark.parametrize("found_by", ["restart", "reread"])
def test_a_damaged_marker_of_a_waiting_message_delivers_it_once(root: Path, found_by: str) -> None:
    """A marker is written only by a `deliver`, named for its id: one damaged (a power cut
    under `fsync never`) whose message still waits in working/ marks a `deliver` whose
    message was never sent. A restart took it for none: the message waited for a `deliver`
    its sender need not send again, dropped after pending_ttl; while `pending` (a sender
    arriving from another process) read it as delivered and sent it."""
    with boxmq.open(root, fsync="never") as other:
        other.intake.pending("s")  # read before the message was stored
        with boxmq.open(root, fsync="never") as box:
            assert box.assured("s", "1", b"x", queue="counts")
        marker = root / ".exactly-once" / hashlib.sha256(b"s\0" + b"1").hexdigest()
        marker.parent.mkdir()
        marker.write_text('{"source": "s", "ms')  # cut short
        if found_by == "reread":
            assert other.pending("s") == []
            assert delivered(other) == [b"x"]
    with boxmq.open(root, fsync="never") as box:
        assert box.pending("s") == []
        assert delivered(box) == ([b"x"] if found_by == "restart" else [])
        assert box.deliver("s", "1") is False  # its repeat: nothing sent again
        assert delivered(box) == []


def test_a_queue_folder_made_by_hand_is_not_made_again_under_its_escaped_name(root: Path) -> None:
    """The restore of the exactly-once intake opened every queue by the name `ls` gives it,
    and a folder made by hand under a name that is not boxmq's escape of it (a hidden `.x`,
    `50%off`) leads elsewhere: each start made an empty queue `%2Ex` beside `.x`, listed as
    `.x` while the messages went under `.x (not escaped)` (found by an upgrade hunt)."""
    for folder in (".x", "50%off"):
        (root / folder / "target").mkdir(parents=True)
        (root / folder / "target" / "4.m.T").write_text("m")
    with boxmq.open(root, fsync="never") as box:
        assert box.assured("s", "1", b"x", queue="counts") is True
        box.sweep()
        assert sorted(os.listdir(root)) == [".x", "50%off", "counts"]
        assert {name: c.ready for name, c in box.counts().items()} == {
            ".x": 1,
            "50%off": 1,
            "counts": 0,
        }
    with boxmq.open(root, fsync="never") as box:  # a restart finds the pending message
        assert box.deliver("s", "1") is True
        assert delivered(box) == [b"x"]


def _killed_before_its_send(
    box: boxmq.Box, monkeypatch: pytest.MonkeyPatch, *, superseded: bool = False
) -> None:
    """A door's `deliver` of ("mqtt:pub", "1") (MQTT's PUBREL), its process killed once the
    marker is written, before the send."""

    def killed(*args: object, **kwargs: object) -> None:
        raise Killed

    with monkeypatch.context() as dying:
        dying.setattr(box.topics, "send_files", killed)
        with pytest.raises(Killed):
            box.intake.deliver_many(
                [("mqtt:pub", "1")], remember=False, must_exist=True, superseded=superseded
            )


def test_a_superseded_retained_deliver_finished_by_a_restart_replaces_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retained message's `deliver` told that a later retained message of its topic is in
    place (superseded: an MQTT PUBREL whose disk work came after a later retained PUBLISH's)
    sends its copies and replaces nothing; a crash between its marker and its send left the
    restart to replace the later one with it, for good, as the marker said nothing of it and
    the later file was older than the marker (found by an upgrade hunt)."""
    retained = {PUBLISHED_RETAINED: True}
    with boxmq.open(root, fsync="never") as box:
        box.subscribe("ret/#", "sub").close()
        assert box.intake.assured_one(
            AssuredMessage("mqtt:pub", "1", b"older", topic="ret/1", properties=retained),
            reserved=True,  # bx_rp, as the MQTT door's
        )
        box.publish("ret/1", b"later", retain=True)
        later = retained_file(root, "ret/1")
        written = later.stat().st_mtime - 10.0  # well before the marker, whatever the clock
        os.utime(later, (written, written))
        _killed_before_its_send(box, monkeypatch, superseded=True)
    with boxmq.open(root, fsync="never") as box:
        box.intake.expire()  # the restart: the marked deliver is finished
        found = box.topics.retained("ret/1")
        assert found is not None
        assert found[1] == b"later"
        with box.subscribe("ret/#", "sub") as sub:
            message = sub.receive_nowait()
            assert message is not None
            assert message.body == b"older"  # its copy went
            message.ack()


@pytest.mark.parametrize("since", [None, b"", b"newer"], ids=["nothing", "delete", "message"])
def test_a_retained_deliver_marked_by_an_older_boxmq_is_finished_by_the_times(
    root: Path, monkeypatch: pytest.MonkeyPatch, since: bytes | None
) -> None:
    """A root of 58be21f (2026-11-29) whose server died between a retained QoS 2 PUBREL's
    marker, which records no retained file, and its send, opened by this boxmq: the restart
    replaces the retained message in place before the marker, and keeps a message or a
    delete (a tombstone, the marker being on the root) published since by this boxmq."""
    retained = {PUBLISHED_RETAINED: True}
    path = retained_file(root, "ret/1")
    with boxmq.open(root, fsync="never") as box:
        box.publish("ret/1", b"before", retain=True)
        written = path.stat().st_mtime - 10.0
        os.utime(path, (written, written))  # well before the marker, whatever the clock
        assert box.intake.assured_one(
            AssuredMessage("mqtt:pub", "1", b"marked", topic="ret/1", properties=retained),
            reserved=True,
        )
        _killed_before_its_send(box, monkeypatch)
    [marker] = (root / ".exactly-once").glob("[!.]*")
    record = json.loads(marker.read_text())
    stat = marker.stat()
    del record["retained"]  # as 58be21f wrote it
    marker.write_text(json.dumps(record))
    os.utime(marker, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    if since is not None:
        with boxmq.open(root, fsync="never") as box:
            box.publish("ret/1", since, retain=True)
        if not since:
            assert path.stat().st_size == 0  # a tombstone
    with boxmq.open(root, fsync="never") as box:
        box.intake.expire()  # the restart: the marked deliver is finished
        found = box.topics.retained("ret/1")
        expected = b"marked" if since is None else since or None
        assert (found and found[1]) == expected


def test_a_sweep_looks_at_the_markers_that_changed_or_are_due_not_at_every_one(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`expire`, which `boxmq serve` runs each second, listed `.exactly-once/` and stat'ed
    every marker of the last done_ttl each time: a busy QoS 2 server's thousands. A folder
    as it was, settled, is not listed again, and no marker is looked at until one is due
    (the oldest was stat'ed each time for `oldest_marker`, which nothing but this test read)."""
    clock = ManualClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        for n in range(50):
            assert box.assured("s", str(n), b"x", queue="counts")
            assert box.deliver("s", str(n))
        markers = str(root / ".exactly-once")
        settled = time.time() - 10
        os.utime(markers, (settled, settled))
        box.intake.expire()  # learns them: one listing, one stat each
        looked: list[str] = []
        real_stat, real_scandir = os.stat, os.scandir

        def stat(path: str, *args: object, **kwargs: object) -> os.stat_result:
            if str(path).startswith(markers):
                looked.append(str(path))
            return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

        def scandir(path: str) -> object:
            if str(path) == markers:
                looked.append("listed")
            return real_scandir(path)

        monkeypatch.setattr(os, "stat", stat)
        monkeypatch.setattr(os, "scandir", scandir)
        for _ in range(3):
            clock.advance(1.0)
            box.intake.expire()
        assert "listed" not in looked
        assert looked == [markers] * 3  # the folder alone: no marker is due
        monkeypatch.undo()
        assert box.assured("s", "new", b"y", queue="counts")
        assert box.deliver("s", "new")  # the folder changed: listed again
        clock.advance(box.intake.limits.done_ttl + 1)
        box.intake.expire()
        assert os.listdir(markers) == []  # each one due, looked at and deleted


@pytest.mark.parametrize("by", ["deliver", "restart", "restart-unremembered"])
def test_a_deliver_of_a_message_another_process_sent_first_is_answered_as_done(
    root: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """A process that listed a message as pending, whose `deliver` another process on the
    root (or a restart's) sent first: its `deliver` again found the file gone, took it for
    swept away and said the id names nothing (MQTT's PUBCOMP 0x92, though the message went
    out once), deleting the other's marker with its own (a late repeat of `assured` was then
    stored again)."""
    remember = by != "restart-unremembered"
    with boxmq.open(root, fsync="never") as other:
        other.pending("s")  # read before the message was stored
        with boxmq.open(root, fsync="never") as box:
            assert box.assured("s", "1", b"x", queue="counts")
            assert other.pending("s") == ["1"]
            if by == "deliver":
                assert box.deliver("s", "1")
            else:
                _killed_after_its_marker(box, monkeypatch, remember=remember)
        if by != "deliver":
            with boxmq.open(root, fsync="never") as restarted:
                restarted.sweep()  # finishes the `deliver` cut short
        assert other.deliver("s", "1", remember=remember, must_exist=True) is False
        assert other.deliver("s", "1", remember=remember, must_exist=True) is False
        # a repeat of step 1: answered if remembered, else a new message under the id
        assert other.assured("s", "1", b"y", queue="counts") is not remember
        if not remember:
            assert other.deliver("s", "1", remember=False, must_exist=True)
        assert delivered(other) == ([b"x"] if remember else [b"x", b"y"])


@pytest.mark.parametrize("remember", [True, False], ids=["remembered", "forgotten"])
def test_a_message_listed_as_pending_then_marked_delivered_elsewhere_is_sent_at_arrival(
    root: Path, monkeypatch: pytest.MonkeyPatch, remember: bool
) -> None:
    """`pending` of a sender arriving at a process that already listed its message, marked
    delivered since by another process killed before its send: the re-read skipped it as
    known, so it was not sent, and the `deliver` was answered by stale books."""
    with boxmq.open(root, fsync="never") as other:
        other.pending("s")
        with boxmq.open(root, fsync="never") as box:
            assert box.assured("s", "1", b"x", queue="counts")
            assert other.pending("s") == ["1"]
            _killed_after_its_marker(box, monkeypatch, remember=remember)
        assert other.pending("s") == []
        assert delivered(other) == [b"x"]
        assert other.deliver("s", "1", remember=remember, must_exist=True) is False  # done
        assert delivered(other) == []


@pytest.mark.parametrize("remember", [True, False], ids=["remembered", "forgotten"])
def test_a_message_marked_delivered_elsewhere_is_sent_not_dropped_past_pending_ttl(
    root: Path, monkeypatch: pytest.MonkeyPatch, remember: bool
) -> None:
    """A process whose books held a message as pending dropped it past pending_ttl though
    another process had marked it delivered since (killed before its send): never sent, and
    the marker, which c13de61 reads as "sent elsewhere", then answered the sender's
    `deliver` again (MQTT's PUBREL) as done, where it used to say the id was unknown."""
    clock = ManualClock(time.time())
    limits = ExactlyOnceLimits(pending_ttl=60.0)
    with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as other:
        other.pending("s")  # read before the message was stored
        with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as box:
            assert box.assured("s", "1", b"x", queue="counts")
            assert other.pending("s") == ["1"]
            clock.advance(50.0)  # its `deliver` just within pending_ttl
            _killed_after_its_marker(box, monkeypatch, remember=remember)
        clock.advance(20.0)
        assert other.intake.expire() == 0  # sent, as the restart would: nothing dropped
        assert delivered(other) == [b"x"]
        assert other.deliver("s", "1", remember=remember, must_exist=True) is False  # done
        assert delivered(other) == []


def test_a_marker_deleted_while_it_is_read_answers_no_deliver_as_done(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `deliver` its books do not know looked at the marker's time, then at its record:
    a marker deleted in between (its own `deliver` found the file swept away: never sent)
    read as one whose file is gone, which was taken for a message sent elsewhere."""
    with boxmq.open(root, fsync="never") as other:
        other.pending("s")  # its books read before the message was stored
        with boxmq.open(root, fsync="never") as box:
            assert box.assured("s", "1", b"x", queue="counts")
            assert box.deliver("s", "1")
        [marker] = (root / ".exactly-once").glob("[!.]*")
        waits = other.intake._markers.waits

        def unmarked_meanwhile(path: str) -> tuple[bool | None, str | None]:
            marker.unlink(missing_ok=True)
            return waits(path)

        monkeypatch.setattr(other.intake._markers, "waits", unmarked_meanwhile)
        with pytest.raises(ItemNotFound):
            other.deliver("s", "1", must_exist=True)


def test_a_message_another_process_sent_is_not_told_dropped_past_pending_ttl(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep of a process that listed a message another one then delivered finds its
    marker: sent, nothing to drop or to log, and its repeat is answered as done."""
    clock = ManualClock(time.time())
    limits = ExactlyOnceLimits(pending_ttl=60.0)
    with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as other:
        other.pending("s")
        with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as box:
            assert box.assured("s", "1", b"x", queue="counts")
            assert other.pending("s") == ["1"]
            assert box.deliver("s", "1")
        clock.advance(70.0)
        with caplog.at_level(logging.ERROR, logger="boxmq.exactly_once"):
            assert other.intake.expire() == 0
        assert caplog.records == []
        assert other.deliver("s", "1", must_exist=True) is False
        assert delivered(other) == [b"x"]


def _refused(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _refused_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first deliver's `.exactly-once/` folder refused (ext4 gives a folder a block)."""

    def refused(path: str, *_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(os, "makedirs", refused)


def _refused_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker's write refused, as a full disk refuses a write (an error naming no file)."""
    monkeypatch.setattr("boxmq.client.markers.write_file", _refused)


@pytest.mark.parametrize("refuse", [_refused_folder, _refused_marker], ids=["folder", "marker"])
def test_a_deliver_the_disk_refuses_names_where_and_delivers_once_tried_again(
    root: Path, monkeypatch: pytest.MonkeyPatch, refuse: Callable[[pytest.MonkeyPatch], None]
) -> None:
    """The disk refused the first deliver's folder of markers: its error left the deliver
    half done, its id taken for delivered and its message forgotten in working/, so the
    deliver tried again once space was back answered False (a repeat) and the message was
    never sent (found by a disk-full hunt). A marker's write refused named no file."""
    with boxmq.open(root, fsync="never") as box:
        assert box.assured("meter-7", "42", b"+1", queue="counts")
        with monkeypatch.context() as full:
            refuse(full)
            with pytest.raises(OSError, match="No space") as raised:
                box.deliver("meter-7", "42")
        assert raised.value.filename is not None
        assert str(root / ".exactly-once") in raised.value.filename
        assert box.deliver("meter-7", "42") is True
        assert delivered(box) == [b"+1"]
        assert box.deliver("meter-7", "42") is False


def test_two_processes_finishing_one_marked_deliver_log_no_error(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two processes started on a root where a `deliver` was killed after its marker both
    finish it: the one whose send found the file gone, sent by the other, logged an error
    that the message "stays in" working/, which it had left, sent once."""
    with boxmq.open(root, fsync="never") as box:
        assert box.assured("s", "1", b"x", queue="counts")
        _killed_after_its_marker(box, monkeypatch)
    with boxmq.open(root, fsync="never") as first, boxmq.open(root, fsync="never") as second:
        send_all = second.intake._send_all

        def first_sends_it_meanwhile(*args: Any) -> list[OSError | None]:
            first.pending("s")  # its start finishes the `deliver`
            return send_all(*args)

        monkeypatch.setattr(second.intake, "_send_all", first_sends_it_meanwhile)
        with caplog.at_level(logging.DEBUG, logger="boxmq.exactly_once"):
            assert second.pending("s") == []
        assert [r.levelno for r in caplog.records] == [logging.DEBUG]
        assert "sent by another process" in caplog.records[0].getMessage()
        assert delivered(second) == [b"x"]
        assert second.deliver("s", "1", must_exist=True) is False  # done


@pytest.mark.parametrize("found_by", ["restart", "arrival", "sweep"])
def test_the_marker_of_an_earlier_message_under_the_id_marks_no_later_one(
    root: Path, found_by: str
) -> None:
    """A new message under a delivered id (reclaimed) has its `assured` delete the id's
    marker; a `deliver` of the earlier message still running in another process may write
    it again after that. Keyed by (source, msg_id) alone, it marked the new message: a
    restart or a sender's arrival sent it before its own `deliver` came, and a sweep past
    pending_ttl sent it where it drops a message whose `deliver` never came."""
    clock = ManualClock(time.time())
    limits = ExactlyOnceLimits(pending_ttl=60.0)
    with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as other:
        with boxmq.open(root, fsync="never", clock=clock, exactly_once=limits) as box:
            if found_by != "sweep":
                other.pending("s")  # its books read before anything was stored
            assert box.assured("s", "1", b"x", queue="counts")
            assert box.deliver("s", "1")
            [marker] = (root / ".exactly-once").glob("[!.]*")
            earlier = marker.read_bytes()
            assert box.assured("s", "1", b"y", queue="counts", reclaim=True)
            assert not marker.exists()
            if found_by == "sweep":
                assert other.pending("s") == ["1"]  # the later message, listed
            marker.write_bytes(earlier)  # the earlier message's deliver, elsewhere, late
        assert delivered(other) == [b"x"]
        if found_by == "sweep":
            clock.advance(70.0)
            assert other.intake.expire() == 1  # its `deliver` never came: dropped
            assert delivered(other) == []
            return
        with contextlib.ExitStack() as stack:
            if found_by == "restart":
                other = stack.enter_context(
                    boxmq.open(root, fsync="never", clock=clock, exactly_once=limits)
                )
            assert other.pending("s") == ["1"]
            assert delivered(other) == []  # the later message waits for its `deliver`
            assert other.deliver("s", "1", must_exist=True)
            assert delivered(other) == [b"y"]


def test_a_deliver_whose_message_another_process_marked_later_and_sent_first_is_done(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes listing one message both `deliver` it: this one's marker first, the
    other's in its place, the other's send first. This one's send found the file gone and,
    no marker there before its own, took it for swept away: it told its sender the id names
    nothing and deleted the other's marker, and forgot the id, so a late repeat of step 1
    was stored and delivered again."""
    with boxmq.open(root, fsync="never") as box, boxmq.open(root, fsync="never") as other:
        assert box.assured("s", "1", b"x", queue="counts")
        assert other.pending("s") == ["1"]
        send_all = box.intake._send_all

        def other_delivers_meanwhile(*args: Any) -> list[OSError | None]:
            assert other.deliver("s", "1")  # marks after this one, sends first
            return send_all(*args)

        monkeypatch.setattr(box.intake, "_send_all", other_delivers_meanwhile)
        assert box.deliver("s", "1", must_exist=True) is False  # done, by the other
        monkeypatch.undo()
        assert box.assured("s", "1", b"x", queue="counts") is False  # a late repeat
        assert box.deliver("s", "1", must_exist=True) is False
        assert delivered(box) == [b"x"]


@pytest.mark.parametrize("found_by", ["start", "arrival", "sweep"])
@pytest.mark.parametrize("remember", [True, False], ids=["remembered", "forgotten"])
def test_a_deliver_another_process_finished_from_its_marker_before_its_send_is_done(
    root: Path, monkeypatch: pytest.MonkeyPatch, found_by: str, remember: bool
) -> None:
    """Another process finds the message in working/ marked by this one's `deliver` (its
    start, its sender's arrival, its sweep past pending_ttl) and sends it before this one's
    send: the marker still this one's, the file gone read as swept away, so the `deliver`
    said the id names nothing (MQTT's PUBCOMP 0x92, the API's ItemNotFound) and deleted the
    marker, though the message went once; remembering ids, a late repeat was then stored
    and delivered again."""
    clock = ManualClock(time.time())
    limits = ExactlyOnceLimits(pending_ttl=60.0)
    with contextlib.ExitStack() as stack:
        box = stack.enter_context(boxmq.open(root, fsync="never", clock=clock, exactly_once=limits))
        other = stack.enter_context(
            boxmq.open(root, fsync="never", clock=clock, exactly_once=limits)
        )
        if found_by == "arrival":
            other.pending("s")  # its books read before the message was stored
        assert box.assured("s", "1", b"x", queue="counts")
        if found_by == "sweep":
            assert other.pending("s") == ["1"]
        clock.advance(50.0)  # this `deliver` just within pending_ttl
        send_all = box.intake._send_all

        def other_finishes_it_meanwhile(*args: Any) -> list[OSError | None]:
            if found_by == "sweep":
                clock.advance(20.0)
                assert other.intake.expire() == 0  # sent from the marker, not dropped
            else:
                assert other.pending("s") == []  # its start, or the sender's arrival
            return send_all(*args)

        with monkeypatch.context() as racing:
            racing.setattr(box.intake, "_send_all", other_finishes_it_meanwhile)
            assert box.deliver("s", "1", remember=remember, must_exist=True) is False  # done
        [marker] = (root / ".exactly-once").glob("[!.]*")  # kept, as the finisher leaves it
        assert delivered(box) == [b"x"]
        assert box.deliver("s", "1", remember=remember, must_exist=True) is False
        # a late repeat of step 1: answered if remembered, else a new message under the id
        assert box.assured("s", "1", b"x", queue="counts") is not remember
        assert marker.exists() is remember


def test_a_repeat_of_a_sys_message_an_older_boxmq_holds_is_answered_as_a_repeat(
    tmp_path: Path,
) -> None:
    """A root boxmq d2f8abf0 (stop 48) wrote: it stored step 1 of alice's s-1 to the topic
    `$SYS/app/fake` (fixtures/README.md), which today's intake refuses, a `$SYS` topic being
    an MQTT server's own. Step 1 sent again after the upgrade (its answer lost, as a sender
    whose server stopped before answering sends it) raised InvalidTopic, so the sender took
    its message for refused and never sent the deliver: it waited in working/ until
    pending_ttl dropped it. A repeat of a message held is answered as one, and its deliver
    sends it once; a new message to `$SYS` is refused as before."""
    root = tmp_path / "root"
    shutil.copytree(Path(__file__).parent / "fixtures" / "sys-assured-d2f8abf0", root)
    clock = ManualClock(start=1_796_086_130.0)  # seconds after that release wrote it
    with boxmq.open(root, clock=clock) as box:
        subscription = box.subscribe("$SYS/app/#", "watcher")
        assert box.assured("alice@example.org/r", "s-1", b"x", topic="$SYS/app/fake") is False
        assert box.deliver("alice@example.org/r", "s-1") is True
        assert box.deliver("alice@example.org/r", "s-1") is False
        message = subscription.receive(timeout=5)
        assert message is not None
        assert (message.topic, message.body) == ("$SYS/app/fake", b"x")
        message.ack()
        assert subscription.receive_nowait() is None
        with pytest.raises(boxmq.InvalidTopic, match=r"\$SYS topics are the MQTT server's own"):
            box.assured("alice@example.org/r", "s-2", b"y", topic="$SYS/app/fake")
        subscription.close()
    assert not list((root / "topic-root" / ".incoming" / "working").iterdir())
