"""The door through what goes wrong: a failure serving one stanza, errors bounced to it (RFC
6120 §8.3), through a real Prosody with real slixmpp clients (docs/xmpp.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from harness.prosody import PS, SERVICE, Client, Prosody, clients
from tests.waiting import until_async
from tests.xmpp.clients import component
from tests.xmpp.test_xmpp_prosody import _raw_request, run

import boxmq
from boxmq.store.layout import queue_path
from boxmq.xmpp import ns, payloads, requests, service


@pytest.fixture
def box(tmp_path: Path) -> Iterator[boxmq.Box]:
    with boxmq.open(tmp_path / "data", fsync="never") as opened:
        opened.queue("jobs")
        yield opened


async def _subscribed(user: Client) -> list[str | None]:
    """The JIDs of `user`'s subscriptions to the service, as it lists them (XEP-0060 §5.6)."""
    reply = await user.request(f"<pubsub xmlns='{PS}'><subscriptions/></pubsub>", type="get")
    assert reply.get("type") == "result", ET.tostring(reply)
    return [s.get("jid") for s in reply.iter(f"{{{PS}}}subscription")]


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.exc_info]


@pytest.fixture
def other_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on another file system than the root's (tmpfs): a rename between the two is
    refused EXDEV."""
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no tmpfs at /dev/shm apart from the test's folder")
    folder = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="boxmq-other-disk-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_a_store_failure_as_a_subscriber_leaves_keeps_the_stream_and_the_item(
    prosody: Prosody, box: boxmq.Box, other_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # target/ moved to a bigger disk under a symlink: alice's item, given back to target/ as
    # she leaves, is a rename across file systems (EXDEV), a real OSError, which left gone()
    # through slixmpp's data_received: asyncio closed the transport, the component's stream
    # ended, every notification in flight and the stanzas read with it lost.
    target = Path(queue_path(box.root, "jobs")) / "target"

    async def scenario() -> None:
        async with (
            component(prosody, box) as running,
            clients(prosody, "alice", "bob", "carol") as [alice, bob, carol],
        ):
            drops: list[object] = []
            running.add_event_handler("disconnected", drops.append)
            await alice.subscribe(1)
            item = await carol.publish("<job xmlns='urn:example'>kept</job>")
            assert (await alice.next_event()).item == item
            target.rmdir()  # empty: the item is alice's, in processing/
            target.symlink_to(other_disk, target_is_directory=True)
            await alice.disconnect(wait=0.5)  # Prosody tells the service: unavailable
            await until_async(lambda: drops or _tracebacks(caplog), "alice's leaving not served")
            reply = await bob.request(f"<query xmlns='{ns.DISCO_INFO}'/>", type="get")
            assert reply.get("type") == "result"
            assert drops == []

    with caplog.at_level(logging.ERROR):
        run(scenario())
    [logged] = _tracebacks(caplog)
    assert logged.name == "boxmq.xmpp"
    assert isinstance(logged.exc_info[1], OSError)  # type: ignore[index]
    assert logged.getMessage() == "alice@localhost/r left: its subscription to jobs not ended"
    # Nothing lost: still in processing/ under alice's lock, which the sweep gives back at
    # its deadline (docs/xmpp.md)
    assert box.queue("jobs").counts().locked == 1
    [held] = (target.parent / "processing").iterdir()
    assert b">kept</job>" in held.read_bytes()


@pytest.mark.parametrize("kind", ["iq", "message"])
def test_a_bug_serving_one_stanza_answers_it_and_keeps_the_stream(
    prosody: Prosody,
    box: boxmq.Box,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    # No real fault gets past the service's own catch of a request's failure (a store error
    # is answered as one): the bug is made by patching the narrowest function outside it, the
    # parse of the stanza's envelope, to raise for the stanza with id 'boom'. Raised, it ended
    # the component's stream, the stanza unanswered.
    parse = requests.parse_iq if kind == "iq" else requests.parse_message

    def buggy(element: ET.Element) -> object:
        if element.get("id") == "boom":
            raise RuntimeError("a bug")
        return parse(element)

    monkeypatch.setattr(service, f"parse_{kind}", buggy)

    async def scenario() -> None:
        async with (
            component(prosody, box) as running,
            clients(prosody, "alice", "bob") as [alice, bob],
        ):
            drops: list[object] = []
            running.add_event_handler("disconnected", drops.append)
            alice.timeout = 5.0
            if kind == "iq":
                answer = await _raw_request(
                    alice, "boom", f"<query xmlns='{ns.DISCO_INFO}'/>", SERVICE
                )
            else:
                errors: asyncio.Queue[ET.Element] = asyncio.Queue()
                alice.add_event_handler("message_error", lambda m: errors.put_nowait(m.xml))
                alice.send_raw(f"<message to='jobs@{SERVICE}' id='boom'><body>b</body></message>")
                answer = await asyncio.wait_for(errors.get(), alice.timeout)
            assert (answer.get("type"), answer.get("id")) == ("error", "boom")
            error = answer.find("{jabber:client}error")
            assert error is not None
            assert error.get("type") == "wait"
            assert error.find(f"{{{ns.STANZAS}}}internal-server-error") is not None
            reply = await bob.request(f"<query xmlns='{ns.DISCO_INFO}'/>", type="get")
            assert reply.get("type") == "result"
            assert drops == []

    with caplog.at_level(logging.ERROR):
        run(scenario())
    [logged] = _tracebacks(caplog)
    assert (logged.name, str(logged.exc_info[1])) == ("boxmq.xmpp", "a bug")  # type: ignore[index]


async def _bounced_holding_one(
    user: Client, publisher: Client, queue_requests: int, kind: str, condition: str
) -> str:
    """`user` subscribes, is given the one item `publisher` publishes, and sends the service
    an error for it, as its server or client bounces one (RFC 6120 §8.3): the type and the
    defined condition given. The item's id."""
    await user.subscribe(queue_requests)
    item = await publisher.publish("<job xmlns='urn:example'>1</job>")
    assert (await user.next_event()).item == item
    user.send_raw(
        f"<message type='error' id='bounced' to='{SERVICE}'><error type='{kind}'>"
        f"<{condition} xmlns='{ns.STANZAS}'/></error></message>"
    )
    return item


@pytest.mark.parametrize(
    ("kind", "condition"),
    [
        ("wait", "resource-constraint"),  # a full offline store: room comes back
        ("wait", "remote-server-timeout"),
        ("wait", "internal-server-error"),
        ("modify", "not-acceptable"),
        ("modify", "policy-violation"),
    ],
)
def test_a_bounce_that_says_try_later_keeps_the_subscription(
    prosody: Prosody, box: boxmq.Box, kind: str, condition: str
) -> None:
    # Every <message type='error'> ended the subscription of its sender, a full offline store
    # as much as a session gone: a subscriber still there stopped getting items, untold.
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as [alice, carol]:
            item = await _bounced_holding_one(alice, carol, 2, kind, condition)
            assert await _subscribed(alice) == [str(alice.boundjid.bare)]
            assert (await alice.retract(item)).get("type") == "result"  # still hers
            later = await carol.publish("<job xmlns='urn:example'>2</job>")
            while (event := await alice.next_event()).what != "item":
                pass
            assert event.item == later

    run(scenario())


@pytest.mark.parametrize(
    ("kind", "condition"),
    [
        ("cancel", "service-unavailable"),  # RFC 6121 §8.5.3.2.3: no such session
        ("wait", "recipient-unavailable"),  # of type wait, but the session is gone
        ("cancel", "item-not-found"),
        ("cancel", "remote-server-not-found"),
        ("cancel", "gone"),
        ("auth", "forbidden"),
        ("auth", "not-authorized"),
    ],
)
def test_a_bounce_that_says_gone_or_refused_ends_the_subscription(
    prosody: Prosody, box: boxmq.Box, kind: str, condition: str
) -> None:
    async def scenario() -> None:
        async with (
            component(prosody, box),
            clients(prosody, "alice", "bob", "carol") as [alice, bob, carol],
        ):
            item = await _bounced_holding_one(alice, carol, 1, kind, condition)
            assert await _subscribed(alice) == []
            bob.auto_retract = True
            await bob.subscribe(1)  # what alice held is bob's now (XEP-0254 §4)
            await until_async(lambda: item in bob.received, "alice's item never reached bob")

    run(scenario())


def test_a_store_failure_ending_one_subscription_of_a_leaver_ends_the_others(
    prosody: Prosody, box: boxmq.Box, other_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # gone() ended a leaver's subscriptions one after another and stopped at the first that
    # failed: alice's item of `other`, a node whose store works, stayed locked to her, gone,
    # until its lock timed out (30 s here), where bob was waiting for it.
    box.queue("other")
    target = Path(queue_path(box.root, "jobs")) / "target"

    async def scenario() -> None:
        async with (
            component(prosody, box),
            clients(prosody, "alice", "bob", "carol") as [alice, bob, carol],
        ):
            await alice.subscribe(1)  # first: the one that fails
            await alice.subscribe(1, "other")
            job = await carol.publish("<job xmlns='urn:example'>kept</job>")
            assert (await alice.next_event()).item == job
            item = await carol.publish("<job xmlns='urn:example'>moved</job>", "other")
            assert (await alice.next_event()).item == item
            await bob.subscribe(1, "other")
            target.rmdir()  # empty: the item is alice's, in processing/
            target.symlink_to(other_disk, target_is_directory=True)
            await alice.disconnect(wait=0.5)  # Prosody tells the service: unavailable
            assert (await asyncio.wait_for(bob.next_event(), 10)).item == item

    with caplog.at_level(logging.ERROR):
        run(scenario())
    [logged] = _tracebacks(caplog)
    assert isinstance(logged.exc_info[1], OSError)  # type: ignore[index]
    assert logged.getMessage() == "alice@localhost/r left: its subscription to jobs not ended"
    assert box.queue("jobs").counts().locked == 1  # kept under alice's lock, for the sweep


def test_a_store_failure_taking_a_subscribers_items_is_logged_once_and_keeps_the_others(
    prosody: Prosody, box: boxmq.Box, other_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # jobs' target/ moved to another disk under a symlink, a file dropped there: each claim
    # of it for alice is a rename across file systems (EXDEV), a real OSError, which left
    # poll_touched through the component's call_later (asyncio's "Exception in callback",
    # none of boxmq's words), and the timer's poll a traceback every 50 ms.
    box.queue("other")
    target = Path(queue_path(box.root, "jobs")) / "target"
    target.rmdir()
    target.symlink_to(other_disk, target_is_directory=True)
    (other_disk / "4.dropped.T").write_bytes(b"<job xmlns='urn:example'>stuck</job>")

    async def scenario() -> None:
        async with (
            component(prosody, box),
            clients(prosody, "alice", "bob", "carol") as [alice, bob, carol],
        ):
            assert (await alice.subscribe(1)).get("type") == "result"
            await bob.subscribe(1, "other")
            item = await carol.publish("<job xmlns='urn:example'>served</job>", "other")
            assert (await bob.next_event()).item == item
            await asyncio.sleep(0.5)  # ten rounds of the timer, each claim refused
            assert alice.received == []

    with caplog.at_level(logging.INFO):
        run(scenario())
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    assert _tracebacks(caplog) == []
    [told] = [r for r in caplog.records if "not taken" in r.getMessage()]
    assert (told.name, told.levelname) == ("boxmq.xmpp", "ERROR")
    assert told.getMessage().startswith("jobs: deliveries to alice@localhost/r not taken: ")
    assert "EXDEV" in told.getMessage()
    assert (other_disk / "4.dropped.T").exists()  # still ready, for when the store takes it


def test_an_unsubscribe_whose_locks_cannot_be_given_back_is_answered_result(
    prosody: Prosody, box: boxmq.Box, other_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # target/ moved to another disk under a symlink: alice's item, given back as she
    # unsubscribes, is a rename across file systems (EXDEV). The subscription was ended
    # before the release failed, and she was answered wait internal-server-error: an
    # unsubscribe to try again, which then said she was not subscribed.
    target = Path(queue_path(box.root, "jobs")) / "target"

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as [alice, carol]:
            await alice.subscribe(1)
            item = await carol.publish("<job xmlns='urn:example'>kept</job>")
            assert (await alice.next_event()).item == item
            target.rmdir()  # empty: the item is alice's, in processing/
            target.symlink_to(other_disk, target_is_directory=True)
            reply = await alice.request(
                f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='{alice.boundjid.bare}'/>"
                "</pubsub>"
            )
            assert reply.get("type") == "result", ET.tostring(reply)
            assert await _subscribed(alice) == []  # ended, as the result says

    with caplog.at_level(logging.ERROR):
        run(scenario())
    assert _tracebacks(caplog) == []  # the store's refusal, not a bug
    [logged] = [r for r in caplog.records if r.name == "boxmq.xmpp"]
    assert logged.getMessage().startswith(
        "alice@localhost/r unsubscribed from jobs; its 1 held item(s) not given back: "
    )
    assert "EXDEV" in logged.getMessage()
    # Nothing lost: still in processing/ under alice's lock, which the sweep gives back at
    # its deadline (docs/xmpp.md)
    assert box.queue("jobs").counts().locked == 1


def test_an_item_that_cannot_go_to_error_costs_only_itself_the_next_delivered(
    prosody: Prosody, box: boxmq.Box, other_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # jobs' error/ moved to another disk under a symlink, and a script dropped an item whose
    # id XML cannot carry (`4.a%01b.T`) beside one it can: the first, never sendable, is
    # rejected to error/, a rename across file systems (EXDEV), a real OSError. It left
    # poll() at that item, and `ok`, taken for alice in the same look, stayed locked to
    # her, no notification sent, until its lock timed out (30 s here).
    error = Path(queue_path(box.root, "jobs")) / "error"
    error.rmdir()
    error.symlink_to(other_disk, target_is_directory=True)
    target = Path(queue_path(box.root, "jobs")) / "target"
    (target / "4.a%01b.T").write_bytes(b"<job xmlns='urn:example'>unsendable</job>")
    (target / "4.ok.T").write_bytes(b"<job xmlns='urn:example'>fine</job>")

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice") as [alice]:
            assert (await alice.subscribe(2)).get("type") == "result"
            assert (await asyncio.wait_for(alice.next_event(), 10)).item == "ok"

    with caplog.at_level(logging.WARNING):
        run(scenario())
    assert _tracebacks(caplog) == []  # the store's refusal, not a bug
    [told] = [r for r in caplog.records if "nor moved to error/" in r.getMessage()]
    assert (told.name, told.levelname) == ("boxmq.xmpp", "ERROR")
    assert told.getMessage().startswith("jobs: 'a\\x01b' not sent, nor moved to error/: ")
    assert "EXDEV" in told.getMessage()
    # Nothing lost: still in processing/ under alice's lock, which the sweep gives back at
    # its deadline
    assert [p.envelope.message_id for p in box.queue("jobs").peek(state="processing")] == ["a\x01b"]


def test_a_bug_delivering_one_item_costs_only_that_item(
    prosody: Prosody,
    box: boxmq.Box,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No real fault is left in _delivered (a store's refusal to move an unsendable item is
    # the test above): the bug is made by patching the wrapping of a body into its item to
    # raise for one body. Raised, it left poll() at that item, and the one taken with it
    # stayed locked to alice, not sent, until its lock timed out (30 s here).
    def buggy(body: bytes) -> str:
        if b"buggy" in body:
            raise RuntimeError("a bug")
        return payloads.payload_of(body)

    monkeypatch.setattr(service, "payload_of", buggy)
    jobs = box.queue("jobs")
    first = jobs.put(b"<job xmlns='urn:example'>buggy</job>")
    second = jobs.put(b"<job xmlns='urn:example'>fine</job>")

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice") as [alice]:
            assert (await alice.subscribe(2)).get("type") == "result"
            assert (await asyncio.wait_for(alice.next_event(), 10)).item == second

    with caplog.at_level(logging.ERROR):
        run(scenario())
    [logged] = _tracebacks(caplog)
    assert (logged.name, str(logged.exc_info[1])) == ("boxmq.xmpp", "a bug")  # type: ignore[index]
    assert logged.getMessage() == (
        f"jobs: {first!r} not sent to alice@localhost/r (a bug); it comes back at its lock timeout"
    )
