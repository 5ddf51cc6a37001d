"""Every answer of the XMPP door that promises something is stored (a publish's result, an
<acknowledged/>'s result, an <assured/>'s <received/>, a <deliver/>'s result, a retract's
result, a node's create and delete) holds across a SIGKILL of `boxmq serve` right after it,
under every fsync policy: the next start has each message and node, the item retracted
stays done, the node deleted gone (docs/xmpp.md)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import pytest
from harness.prosody import SERVICE, Prosody, clients
from harness.stopping import kill, stop
from tests.xmpp.test_xmpp_serve import _assured, _serve, _wait_for_service, run

import boxmq
from boxmq.store.commit import FsyncPolicy
from boxmq.xmpp import ns

# Each test runs under every fsync policy (FsyncPolicy.words()): a crash of a process loses nothing
# that was answered under any of them (docs/operations.md, Durability); the policy is for a
# crash of the machine.


def _bodies(box: boxmq.Box, queue: str) -> dict[str, bytes]:
    """Every message ready in `queue`, by id, taken and acknowledged (bounded: each get
    takes one of a finite folder)."""
    taken: dict[str, bytes] = {}
    jobs = box.queue(queue)
    while (message := jobs.get("check")) is not None:
        taken[message.id] = message.body
        message.ack()
    return taken


@pytest.mark.parametrize("fsync", FsyncPolicy.words())
def test_what_the_component_answered_survives_a_sigkill_right_after(
    prosody: Prosody, tmp_path: Path, fsync: str
) -> None:
    data = tmp_path / "data"
    with boxmq.open(data, fsync="always") as box:
        box.queue("jobs")
        box.queue("old").put(b"with the node")
    node = f"jobs@{SERVICE}"
    published: list[str] = []
    retracted: list[str] = []

    async def before_the_kill() -> None:
        async with clients(prosody, "alice", "carol") as [alice, carol]:
            await _wait_for_service(alice)
            assert (await alice.subscribe(1)).get("type") == "result"
            published.extend(
                [await carol.publish(f"<job xmlns='urn:example'>{n}</job>") for n in range(5)]
            )
            taken = (await alice.next_event()).item
            assert (await alice.retract(taken)).get("type") == "result"
            retracted.append(taken)
            acknowledged = "<message xmlns='jabber:client'><body>acknowledged</body></message>"
            reply = await carol.request(
                f"<acknowledged xmlns='urn:xmpp:qos'>{acknowledged}</acknowledged>", to=node
            )
            assert reply.get("type") == "result"
            for msg_id in ("m1", "m2"):
                reply = await carol.request(_assured("assured", msg_id, msg_id), to=node)
                assert reply.find("{urn:xmpp:qos}received") is not None
            reply = await carol.request(_assured("deliver", "m1"), to=node)
            assert reply.get("type") == "result"
            reply = await carol.request(
                f"<pubsub xmlns='{ns.PUBSUB}'><create node='new'/></pubsub>"
            )
            assert reply.get("type") == "result"
            reply = await carol.request(
                f"<pubsub xmlns='{ns.PUBSUB_OWNER}'><delete node='old'/></pubsub>"
            )
            assert reply.get("type") == "result"
            kill(first)  # at once: the last answer is the one just read

    async def after_the_restart() -> None:
        async with clients(prosody, "carol") as [carol]:
            await _wait_for_service(carol)
            # <received/> promised m2 is kept until its deliver (urn:xmpp:qos, exactly once)
            reply = await carol.request(_assured("deliver", "m2"), to=node)
            assert reply.get("type") == "result", reply

    first = _serve(prosody, data, fsync=fsync)
    try:
        run(before_the_kill())
    finally:
        kill(first)
        first.communicate(timeout=10)
    second = _serve(prosody, data, fsync=fsync)
    try:
        run(after_the_restart())
    finally:
        stop(second, seconds=10)
        output, _ = second.communicate(timeout=10)
    assert second.returncode == 0, output
    assert "Traceback" not in output, output

    with boxmq.open(data, fsync="never") as box:
        assert box.queues() == ["jobs", "new"]  # the node created is there, the deleted gone
        assert box.queue("new").owner == "carol@localhost"  # XEP-0060 §8.1: its creator's
        [done] = retracted
        found = box.queue("jobs").find(done)  # deleted, or in processed/: never again ready
        assert found is None or found.state is boxmq.State.PROCESSED, found
        bodies = _bodies(box, "jobs")
    kept = sorted(item for item in published if item != done)
    assert sorted(item for item in bodies if item in published) == kept
    others = sorted(body for item, body in bodies.items() if item not in published)
    assert len(others) == 3, bodies  # the acknowledged one, m1 and m2, once each
    assert [b"acknowledged" in others[0], b">m1<" in others[1], b">m2<" in others[2]] == [True] * 3


@pytest.mark.parametrize("fsync", FsyncPolicy.words())
def test_every_publish_answered_of_a_stream_killed_at_a_random_moment_is_stored(
    prosody: Prosody, tmp_path: Path, fsync: str
) -> None:
    # The component puts the publishes of one batch of stanzas together and answers them
    # after (QueueService.flush): a SIGKILL in the middle of a stream of them, twenty in
    # flight at a time, must find each one answered in the queue.
    data = tmp_path / "data"
    with boxmq.open(data, fsync="always") as box:
        box.queue("jobs")
    delay = random.uniform(0.0, 0.5)  # after the first answer
    answered: list[str] = []
    sent = 0

    async def stream() -> None:
        nonlocal sent
        async with clients(prosody, "carol") as [carol]:
            await _wait_for_service(carol)
            carol.timeout = 2.0  # what the component read before its kill is never answered
            first_answer = asyncio.Event()

            async def publish(n: int) -> None:
                try:
                    reply = await carol.request(
                        f"<pubsub xmlns='{ns.PUBSUB}'><publish node='jobs'>"
                        f"<item><job xmlns='urn:example'>{n}</job></item></publish></pubsub>"
                    )
                except AssertionError:  # no reply: killed before it answered, no promise
                    return
                item = reply.find(f".//{{{ns.PUBSUB}}}item")
                if reply.get("type") == "result" and item is not None:
                    answered.append(item.get("id", ""))
                    first_answer.set()

            async def killer() -> None:
                # The random moment counts from the first answer, not from the first send: a
                # loaded machine took longer than the 0.1 s drawn to store and answer the
                # first twenty publishes under fsync=always, and the kill came before any
                # answer ("nothing answered"). None within the client's timeout: killed all
                # the same, and the assertion below says so.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(first_answer.wait(), carol.timeout)
                await asyncio.sleep(delay)
                kill(first)

            killing = asyncio.ensure_future(killer())
            while sent < 2000 and not killing.done():
                await asyncio.gather(*(publish(sent + n) for n in range(20)))
                sent += 20
            await killing

    first = _serve(prosody, data, fsync=fsync)
    try:
        run(stream())
    finally:
        kill(first)
        first.communicate(timeout=10)
    assert answered, "nothing answered before the kill"
    with boxmq.open(data, fsync="never") as box:
        stored = {peeked.envelope.message_id for peeked in box.queue("jobs").peek()}
    lost = [item for item in answered if item not in stored]
    assert not lost, (
        f"killed {delay:.2f} s after the first answer, {len(answered)} of {sent} answered: {lost}"
    )
