"""The door through what goes wrong: errors bounced to it (RFC 6120 §8.3), through a real
Prosody with real slixmpp clients (docs/xmpp.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from harness.prosody import PS, SERVICE, Client, Prosody, clients
from tests.waiting import until_async
from tests.xmpp.clients import component

import boxmq
from boxmq.xmpp import ns

SCENARIO_SECONDS = 60


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, SCENARIO_SECONDS))


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


def _bounce(user: Client, kind: str, condition: str) -> None:
    """`user` sends the service an error for its last event, as its server or client bounces
    one (RFC 6120 §8.3): the type and the defined condition given."""
    user.send_raw(
        f"<message type='error' id='bounced' to='{SERVICE}'><error type='{kind}'>"
        f"<{condition} xmlns='{ns.STANZAS}'/></error></message>"
    )


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
            await alice.subscribe(2)
            item = await carol.publish("<job xmlns='urn:example'>1</job>")
            assert (await alice.next_event()).item == item
            _bounce(alice, kind, condition)
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
            await alice.subscribe(1)
            item = await carol.publish("<job xmlns='urn:example'>1</job>")
            assert (await alice.next_event()).item == item
            _bounce(alice, kind, condition)
            assert await _subscribed(alice) == []
            bob.auto_retract = True
            await bob.subscribe(1)  # what alice held is bob's now (XEP-0254 §4)
            await until_async(lambda: item in bob.received, "alice's item never reached bob")

    run(scenario())
