"""The subscriber records: after a crash of the component, its next start tells each
subscriber that its subscription is gone (records.py, docs/xmpp.md)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from tests.unit.xmpp.wire import ALICE, BOB, PS, SERVICE, Wire, condition

import boxmq
from boxmq.xmpp import ns
from boxmq.xmpp.component import QueueComponent
from boxmq.xmpp.records import (
    ComponentHeld,
    SubscriberRecords,
    _file_name,
    hold_component,
    records_folder,
)
from boxmq.xmpp.settings import XmppSettings

OTHER = "other.localhost"


def _recorded(box: boxmq.Box, component: str = SERVICE) -> list[str]:
    folder = records_folder(box.root, component)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def _told(wire: Wire) -> list[tuple[str, str, str]]:
    """(to, node, state) of each subscription-state notification sent."""
    found = []
    for stanza in wire.take():
        for state in stanza.iter(ns.tag(ns.PUBSUB_EVENT, "subscription")):
            found.append(
                (stanza.get("to", ""), state.get("node", ""), state.get("subscription", ""))
            )
    return found


def test_a_crash_leaves_the_records_and_the_next_start_tells_each_subscriber(
    wire: Wire, box: boxmq.Box
) -> None:
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    wire.subscribe(ALICE, 1, node="other")
    assert len(_recorded(box)) == 3
    # the process dies: no close, nobody told
    after = Wire(box)
    after.service.tell_left_over()
    assert sorted(_told(after)) == [
        (ALICE, "jobs", "none"),
        (ALICE, "other", "none"),
        (BOB, "jobs", "none"),
    ]
    assert _recorded(box) == []
    after.service.tell_left_over()  # told once
    assert _told(after) == []


def test_the_notice_after_a_crash_is_the_one_a_clean_stop_sends(wire: Wire, box: boxmq.Box) -> None:
    wire.subscribe(ALICE, 1)
    after = Wire(box)
    after.service.tell_left_over()
    [after_crash] = after.take()
    wire.service.close()
    [clean] = wire.take()
    for stanza in (after_crash, clean):
        stanza.set("id", "")  # the same stanza but its id
    assert ET.tostring(after_crash) == ET.tostring(clean)
    state = clean.find(f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}subscription")
    assert state is not None
    assert (state.get("jid"), state.get("subscription")) == ("alice@localhost", "none")
    assert state.get("subid")


@pytest.mark.parametrize("how", ["unsubscribe", "gone", "delete", "close"])
def test_a_subscription_that_ends_takes_its_record_with_it(
    wire: Wire, box: boxmq.Box, how: str
) -> None:
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    assert len(_recorded(box)) == 2
    if how == "unsubscribe":
        reply = wire.unsubscribe(ALICE)
        assert reply.get("type") == "result"
        left = 1
    elif how == "gone":  # unavailable presence
        wire.service.gone(ALICE)
        left = 1
    elif how == "delete":
        reply = wire.iq(ALICE, f"<pubsub xmlns='{ns.PUBSUB_OWNER}'><delete node='jobs'/></pubsub>")
        assert reply.get("type") == "result"
        left = 0
    else:
        wire.service.close()
        left = 0
    assert len(_recorded(box)) == left
    wire.take()
    after = Wire(box)
    after.service.tell_left_over()
    assert _told(after) == ([(BOB, "jobs", "none")] if left else [])


def test_subscribing_again_writes_no_second_record(wire: Wire, box: boxmq.Box) -> None:
    wire.subscribe(ALICE, 1)
    wire.subscribe(ALICE, 4)  # new options, the same subscription
    assert len(_recorded(box)) == 1


def test_a_stop_with_no_server_to_hear_it_leaves_the_records_for_the_next_start(
    wire: Wire, box: boxmq.Box
) -> None:
    wire.subscribe(ALICE, 1)
    wire.service.close(heard=False)
    assert len(_recorded(box)) == 1
    after = Wire(box)
    after.service.tell_left_over()
    assert _told(after) == [(ALICE, "jobs", "none")]


def test_two_components_on_one_root_keep_their_own_records(box: boxmq.Box) -> None:
    box.queue("jobs")
    ours = Wire(box)
    theirs = Wire(box, domain=OTHER)
    ours.subscribe(ALICE, 1)
    theirs.subscribe(BOB, 1)
    assert len(_recorded(box)) == 1
    assert len(_recorded(box, OTHER)) == 1
    # ours restarts after a crash: it tells its own subscriber, not the other's
    again = Wire(box)
    again.service.tell_left_over()
    assert _told(again) == [(ALICE, "jobs", "none")]
    assert len(_recorded(box, OTHER)) == 1
    theirs.service.close()
    assert _recorded(box, OTHER) == []


def test_a_damaged_record_is_logged_and_deleted_and_the_others_are_told(
    wire: Wire, box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    folder = Path(records_folder(box.root, SERVICE))
    [first, second] = sorted(folder.iterdir())
    first.write_bytes(b'{"jid": "alice@localh')  # cut short by a power cut, say
    (folder / "not-a-record").write_bytes(b"\xff\xfe")
    # named as its subscription's, but a character no XML carries
    (folder / _file_name("x\x01@y/r", "jobs")).write_text('{"jid": "x\\u0001@y/r", "node": "jobs"}')
    (folder / ".tmp-0123").write_text("{}")  # a write the crash interrupted
    after = Wire(box)
    with caplog.at_level(logging.WARNING, "boxmq.xmpp"):
        after.service.tell_left_over()
    told = _told(after)
    assert len(told) == 1
    assert told[0] in ((ALICE, "jobs", "none"), (BOB, "jobs", "none"))
    assert list(folder.iterdir()) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert all("is no subscriber record" in w for w in warnings)
    assert any(str(first) in w for w in warnings)
    assert second.name not in " ".join(warnings)


def test_a_record_that_cannot_be_written_is_logged_and_the_subscription_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / ".xmpp").write_text("a file where the folder goes")
    records = SubscriberRecords(str(root), SERVICE, flush=False)
    with caplog.at_level(logging.WARNING, "boxmq.xmpp"):
        records.add(ALICE, "jobs")
    assert "is not recorded" in caplog.text
    assert records.left_over() == []


@pytest.mark.parametrize("policy", ["never", "always"])
def test_a_record_is_flushed_under_fsync_always_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    with boxmq.open(tmp_path / "root", fsync=policy) as box:
        wire = Wire(box)
        wire.create()
        wire.subscribe(ALICE, 1)  # the records' folder is made
        flushed: list[str] = []
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        wire.subscribe(BOB, 1)
        monkeypatch.undo()
        folder = records_folder(box.root, SERVICE)
        if policy == "never":
            assert flushed == []
        else:  # the record, then its folder (the rename)
            record, renamed = [p for p in flushed if p.startswith(folder)]
            assert (os.path.dirname(record), renamed) == (folder, folder)
        wire.service.close()


def test_a_record_is_deleted_only_once_its_notice_is_written(wire: Wire, box: boxmq.Box) -> None:
    """The records were deleted as the notices were queued, before the component wrote them:
    a connection dropped at that moment left those subscribers never told."""
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    wire.service.close(heard=False)  # as a crash: records kept, nobody told
    after = Wire(box)
    written: list[Callable[[], None]] = []
    after.service.tell_left_over(written.append)
    assert len(_told(after)) == 2
    assert len(_recorded(box)) == 2  # not written yet: kept
    written[0]()
    assert len(_recorded(box)) == 1
    written[1]()
    assert _recorded(box) == []


def test_a_subscriber_back_before_its_notice_is_written_keeps_its_new_record(
    wire: Wire, box: boxmq.Box
) -> None:
    wire.subscribe(ALICE, 1)
    wire.service.close(heard=False)  # as a crash: records kept, nobody told
    after = Wire(box)
    written: list[Callable[[], None]] = []
    after.service.tell_left_over(written.append)
    assert after.subscribe(ALICE, 1).get("type") == "result"  # its record, anew
    [told] = written
    told()
    assert len(_recorded(box)) == 1  # the new subscription's, kept
    after.service.close()
    assert _recorded(box) == []


class _Transport:
    """What a QueueComponent writes to: `closing` as after the stream dropped."""

    def __init__(self, *, closing: bool) -> None:
        self.closing = closing
        self.written = b""

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written += data


def test_notices_dropped_with_the_stream_are_sent_at_the_next_start(
    wire: Wire, box: boxmq.Box
) -> None:
    """The component's flush drops what it cannot write: the records stay for the next
    start, which tells them (the first connection of this run has told nobody)."""
    wire.subscribe(ALICE, 1)
    settings = XmppSettings(SERVICE, "127.0.0.1", 5347, "secret")

    async def start(closing: bool) -> bytes:
        component = QueueComponent(box, settings)
        transport = _Transport(closing=closing)
        component.transport = transport  # type: ignore[assignment]
        component._started(None)  # the stream is up: the first thing done
        await asyncio.sleep(0)  # the flush, at the next turn of the loop
        return transport.written

    assert asyncio.run(start(closing=True)) == b""  # dropped
    assert len(_recorded(box)) == 1
    assert b"alice@localhost" in asyncio.run(start(closing=False))
    assert _recorded(box) == []


def test_at_a_clean_stop_a_record_is_deleted_only_once_its_notice_is_written(
    wire: Wire, box: boxmq.Box
) -> None:
    """The stop path had the fault the start path had: the records went as the notices
    were queued, so a stream dropped while stopping left those subscribers never told."""
    wire.subscribe(ALICE, 1)
    wire.subscribe(BOB, 1)
    written: list[Callable[[], None]] = []
    wire.service.close(once_written=written.append)
    assert len(_told(wire)) == 2
    assert len(_recorded(box)) == 2  # not written yet: kept
    written[0]()
    assert len(_recorded(box)) == 1
    written[1]()
    assert _recorded(box) == []


def test_notices_dropped_at_a_clean_stop_are_sent_at_the_next_start(
    wire: Wire, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The component stops while the stream is dropping (connected, its transport closing):
    the notices are not written, so the records stay and the next start tells them."""
    settings = XmppSettings(SERVICE, "127.0.0.1", 5347, "secret")

    async def serve_then_stop() -> None:
        component = QueueComponent(box, settings)
        component.service.iq(
            ET.fromstring(
                f"<iq xmlns='{ns.COMPONENT}' type='set' id='s1' from='{ALICE}' to='{SERVICE}'>"
                f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='{ALICE}'/><options>"
                "<x xmlns='jabber:x:data' type='submit'><field var='FORM_TYPE' type='hidden'>"
                "<value>http://jabber.org/protocol/pubsub#subscribe_options</value></field>"
                "<field var='pubsub#queue_requests'><value>1</value></field></x>"
                "</options></pubsub></iq>"
            )
        )
        assert len(_recorded(box)) == 1
        component.transport = _Transport(closing=True)  # type: ignore[assignment]
        component.connected.set()  # the drop not yet seen

        async def no_stream_end(**_: object) -> None:  # nobody would answer </stream>
            pass

        monkeypatch.setattr(component, "disconnect", no_stream_end)
        await component.stop()

    asyncio.run(serve_then_stop())
    assert len(_recorded(box)) == 1  # kept: that notice was dropped
    after = Wire(box)
    after.service.tell_left_over()
    assert _told(after) == [(ALICE, "jobs", "none")]
    assert _recorded(box) == []


def test_a_request_that_reaches_the_component_as_it_stops_is_told_to_retry(
    wire: Wire, box: boxmq.Box
) -> None:
    """The stream lasts a moment after the close (until the server's </stream>): a subscribe
    then was answered 'subscribed' by a component about to exit, and handed items."""
    box.queue("jobs").put(b"waiting")
    wire.service.close()
    _told(wire)
    reply = wire.subscribe(BOB, 1)
    assert condition(reply) == ("wait", "remote-server-timeout")  # as Prosody's, then
    assert _recorded(box) == []
    assert wire.events() == []  # nothing handed out
    item = "<item><x xmlns='u:x'/></item>"
    publish = wire.iq(ALICE, f"<pubsub xmlns='{PS}'><publish node='jobs'>{item}</publish></pubsub>")
    assert condition(publish) == ("wait", "remote-server-timeout")
    assert box.queue("jobs").counts().ready == 1  # not stored: its sender was told to retry


def test_a_child_forked_while_the_component_is_held_does_not_keep_it(tmp_path: Path) -> None:
    # An flock belongs to the open file, which a fork shares: a child that lived on (a
    # multiprocessing worker) kept the next start of the component refused.
    held = hold_component(str(tmp_path), SERVICE)
    assert held is not None
    with pytest.raises(ComponentHeld) as caught:
        hold_component(str(tmp_path), SERVICE)
    assert caught.value.holder == str(os.getpid())
    go_on, told = os.pipe()
    started, starts = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child: its fork hooks have run)
        os.write(starts, b"x")
        os.read(go_on, 1)
        os._exit(0)
    try:
        os.read(started, 1)
        held.release()
        again = hold_component(str(tmp_path), SERVICE)  # the child lives on
        assert again is not None
        again.release()
    finally:
        os.write(told, b"x")
        os.waitpid(child, 0)
        for fd in (go_on, told, started, starts):
            os.close(fd)


def test_names_that_differ_only_in_case_are_one_component_and_share_its_lock(
    tmp_path: Path,
) -> None:
    # One component to the server (RFC 7622 §3.2, as slixmpp sends it): two serves of
    # Queue.Localhost and queue.localhost. on one root each took a lock of its own, and
    # each took the other's records for a crash's.
    held = hold_component(str(tmp_path), "Queue.Localhost")
    assert held is not None
    try:
        for spelled in (SERVICE, SERVICE + "."):
            with pytest.raises(ComponentHeld):
                hold_component(str(tmp_path), spelled)
        assert records_folder(str(tmp_path), "QUEUE.localhost") == records_folder(
            str(tmp_path), SERVICE
        )
    finally:
        held.release()


def test_a_root_of_an_older_boxmq_keeps_its_lock_and_its_records_are_told(
    box: boxmq.Box,
) -> None:
    # An older boxmq named the folder as the flag was written: .xmpp/Queue.Localhost/.
    older = os.path.join(box.root, ".xmpp", "Queue.Localhost")
    os.makedirs(os.path.join(older, "subscribers"))
    record = os.path.join(older, "subscribers", _file_name(ALICE, "jobs"))
    Path(record).write_text(json.dumps({"jid": ALICE, "node": "jobs"}))
    lock = os.open(os.path.join(older, "lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # that boxmq still serves it
        # whatever the spelling given now: as `queue.localhost` it ran beside that boxmq, and
        # never told the subscribers left in its folder (found by a second read)
        for spelled in ("Queue.Localhost", SERVICE, "QUEUE.LOCALHOST."):
            with pytest.raises(ComponentHeld):
                hold_component(box.root, spelled)
    finally:
        os.close(lock)  # it stopped (or died)
    held = hold_component(box.root, SERVICE)  # each refusal let go of the domain's lock
    assert held is not None
    held.release()
    # it had died: this start tells its subscriber, once
    after = Wire(box, domain=SERVICE)
    after.service.tell_left_over()
    assert _told(after) == [(ALICE, "jobs", "none")]
    assert os.listdir(os.path.join(older, "subscribers")) == []
    assert _recorded(box) == []


def test_an_older_boxmq_started_after_this_one_on_a_new_root_is_kept_off(
    tmp_path: Path,
) -> None:
    # Going back while this one serves Queue.Localhost: the older boxmq flocks
    # .xmpp/Queue.Localhost/lock, which this one took only where the folder was there
    # already, so on a root the older one never served both served the component.
    held = hold_component(str(tmp_path), "Queue.Localhost")
    assert held is not None
    folder = os.path.join(tmp_path, ".xmpp", "Queue.Localhost")
    os.makedirs(folder, exist_ok=True)  # as that boxmq's hold_component makes it
    older = os.open(os.path.join(folder, "lock"), os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(BlockingIOError):  # that boxmq is refused
            fcntl.flock(older, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.release()
        fcntl.flock(older, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(older)
