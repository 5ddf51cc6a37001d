"""XEP-0254 through a real Prosody, with real slixmpp clients (docs/xmpp.md)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from harness.prosody import (
    PS,
    SERVICE,
    TIMEOUT,
    Client,
    Prosody,
    QosRequests,
    clients,
    first_to_hear,
)
from slixmpp.exceptions import IqError
from slixmpp.plugins.xep_0004.stanza import Form
from slixmpp.xmlstream.handler import Callback
from slixmpp.xmlstream.matcher import MatcherId
from tests.waiting import until_async
from tests.xmpp.clients import component

import boxmq
from boxmq.core import ExactlyOnceLimits
from boxmq.xmpp import ns

SCENARIO_SECONDS = 60
UNEXPECTED = "{urn:ietf:params:xml:ns:xmpp-stanzas}unexpected-request"
ITEM_NOT_FOUND = "{urn:ietf:params:xml:ns:xmpp-stanzas}item-not-found"
BAD_REQUEST = "{urn:ietf:params:xml:ns:xmpp-stanzas}bad-request"


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, SCENARIO_SECONDS))


@pytest.fixture
def box(tmp_path: Path) -> Iterator[boxmq.Box]:
    with boxmq.open(tmp_path / "data", fsync="never") as opened:
        opened.queue("jobs")
        yield opened


def test_disco_shows_the_queueing_and_qos_features(prosody: Prosody, box: boxmq.Box) -> None:
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice") as [alice]:
            reply = await alice.request(
                "<query xmlns='http://jabber.org/protocol/disco#info'/>", type="get"
            )
            features = {
                f.get("var") for f in reply.iter("{http://jabber.org/protocol/disco#info}feature")
            }
            assert {PS, "urn:xmpp:pubsub:queueing:0", "urn:xmpp:qos"} <= features

    run(scenario())


def test_the_component_named_in_capitals_and_with_a_final_dot_is_served(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # One domain (RFC 7622 §3.2), and the checks passed it, but slixmpp opened the stream to
    # the name as written: Prosody refused it ("... does not match any configured external
    # components"), and serve stopped.
    async def scenario() -> None:
        async with (
            component(prosody, box, name=SERVICE.upper() + "."),
            clients(prosody, "alice", "bob") as [alice, bob],
        ):
            assert (await alice.subscribe(1)).get("type") == "result"
            item = await bob.publish("<job xmlns='urn:example'/>")
            event = await alice.next_event()
            assert (event.what, event.item) == ("item", item)
            assert (await alice.retract(item)).get("type") == "result"

    run(scenario())


def test_two_subscribers_share_a_thousand_items_each_exactly_once(
    prosody: Prosody, box: boxmq.Box
) -> None:
    count = 1000

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "bob", "carol") as users:
            alice, bob, carol = users
            for subscriber, queue_requests in ((alice, 2), (bob, 3)):
                subscriber.auto_retract = True
                assert (await subscriber.subscribe(queue_requests)).get("type") == "result"
            window = asyncio.Semaphore(50)

            async def publish(n: int) -> str:
                async with window:
                    return await carol.publish(f"<job xmlns='urn:example'>{n}</job>")

            published = await asyncio.gather(*(publish(n) for n in range(count)))
            for _ in range(SCENARIO_SECONDS * 10):
                if box.queue("jobs").counts().done == count:
                    break
                await asyncio.sleep(0.1)
            received = alice.received + bob.received
            assert sorted(received) == sorted(published)  # each one, once
            assert alice.received
            assert bob.received

    run(scenario())
    assert box.queue("jobs").counts().done == count


def test_unlock_hands_the_item_to_the_other_subscriber(prosody: Prosody, box: boxmq.Box) -> None:
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "bob", "carol") as users:
            alice, bob, carol = users
            await alice.subscribe(1)
            await bob.subscribe(1)
            item = await carol.publish("<job xmlns='urn:example'>x</job>")
            first = await asyncio.wait_for(first_to_hear(alice, bob), 20)
            other = bob if first is alice else alice
            assert (await first.next_event()).item == item
            assert (await first.unlock(item)).get("type") == "result"
            notice = await first.next_event()
            assert (notice.what, notice.item) == ("unlock", item)
            again = await other.next_event()
            assert (again.what, again.item) == ("item", item)
            assert again.payload is not None
            assert again.payload.text == "x"
            # the first one may no longer touch it: it had it, its lock is gone
            error = await first.retract(item)
            assert error.get("type") == "error"
            assert error.find(f".//{UNEXPECTED}") is not None
            assert (await other.retract(item)).get("type") == "result"
            assert (await other.next_event()).what == "retract"

    run(scenario())


def test_the_retract_and_unlock_errors_of_xep_0254_through_the_server(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # §2.3 and §2.4's error flows as a client gets them through a real server (the unit
    # tests feed them to the service alone): the type and condition of each, the request
    # echoed.
    def said(reply: ET.Element) -> tuple[str, str]:
        assert reply.get("type") == "error", ET.tostring(reply)
        error = reply.find("{jabber:client}error")
        assert error is not None, ET.tostring(reply)
        names = [c.tag.rsplit("}", 1)[-1] for c in error if c.tag.startswith("{" + ns.STANZAS)]
        [condition] = [name for name in names if name != "text"]
        assert reply.find(f"{{{PS}}}pubsub") is not None, ET.tostring(reply)  # echoed
        return error.get("type", ""), condition

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "bob", "carol") as users:
            alice, bob, carol = users
            await alice.subscribe(1)
            await bob.subscribe(1)
            held = await carol.publish("<job xmlns='urn:example'>1</job>")
            first = await asyncio.wait_for(first_to_hear(alice, bob), 20)
            other = bob if first is alice else alice
            assert (await first.next_event()).item == held
            second = await carol.publish("<job xmlns='urn:example'>2</job>")
            assert (await other.next_event()).item == second
            waiting = await carol.publish("<job xmlns='urn:example'>3</job>")
            for act in (Client.retract, Client.unlock):
                assert said(await act(other, held)) == ("cancel", "conflict")
                assert said(await act(other, waiting)) == ("auth", "forbidden")
                assert said(await act(carol, waiting)) == ("auth", "forbidden")  # no subscriber
                assert said(await act(first, "no-such-item")) == ("cancel", "item-not-found")
                assert said(await act(first, held, "no-such-node")) == ("cancel", "item-not-found")
            assert (await first.unlock(held)).get("type") == "result"
            assert (await first.next_event()).what == "unlock"
            for act in (Client.retract, Client.unlock):
                assert said(await act(first, held)) == ("wait", "unexpected-request")

    run(scenario())


def test_a_subscriber_that_unsubscribes_then_unlocks_its_items_is_answered_result(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # XEP-0254 §4: a subscriber that cannot process its items "SHOULD unsubscribe and then
    # unlock all of its outstanding queue items". The unsubscribe gives them back already
    # (docs/xmpp.md), and each unlock after it was answered wait/unexpected-request, an
    # error that tells the client to try again later, for an unlock that was done.
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "bob", "carol") as users:
            alice, bob, carol = users
            await alice.subscribe(2)
            items = [await carol.publish(f"<job xmlns='urn:example'>{n}</job>") for n in (1, 2)]
            assert sorted([(await alice.next_event()).item for _ in items]) == sorted(items)
            jid = alice.boundjid.bare
            unsubscribe = f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='{jid}'/></pubsub>"
            assert (await alice.request(unsubscribe)).get("type") == "result"
            for item in items:
                reply = await alice.unlock(item)
                assert reply.get("type") == "result", ET.tostring(reply)
            # answered once: the items are no longer hers, a second unlock is the usual error
            assert (await alice.unlock(items[0])).find(f".//{UNEXPECTED}") is not None
            await bob.subscribe(2)
            assert sorted([(await bob.next_event()).item for _ in items]) == sorted(items)
            # no unlock notification: she is no longer subscribed (XEP-0060 §6.2)
            assert alice.events.empty()

    run(scenario())


def test_a_subscriber_may_write_its_jid_in_capitals(prosody: Prosody, box: boxmq.Box) -> None:
    # RFC 7622 §3.2-§3.3: Alice@LOCALHOST is alice@localhost. Prosody stamps `from` in lower
    # case and passes the subscribe's jid attribute on as written: the door refused it,
    # bad-request/invalid-jid, comparing the two as strings.
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as users:
            alice, carol = users
            options = (
                "<options><x xmlns='jabber:x:data' type='submit'>"
                "<field var='pubsub#queue_requests'><value>1</value></field></x></options>"
            )
            subscribe = (
                f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='Alice@LOCALHOST'/>"
                f"{options}</pubsub>"
            )
            reply = await alice.request(subscribe)
            assert reply.get("type") == "result", ET.tostring(reply)
            item = await carol.publish("<job xmlns='urn:example'>1</job>")
            assert (await alice.next_event()).item == item
            unsubscribe = (
                f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='ALICE@localhost'/></pubsub>"
            )
            reply = await alice.request(unsubscribe)
            assert reply.get("type") == "result", ET.tostring(reply)
            assert box.queue("jobs").counts().locked == 0  # given back at the unsubscribe

    run(scenario())


def test_a_resource_neither_subscribes_nor_unsubscribes_another_resource_of_its_user(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # A subscription here is the requester's full JID's, its events sent there and ended by
    # its presence. alice@localhost/r's subscribe naming alice@localhost/phone was answered
    # 'subscribed' and subscribed alice@localhost/r; its unsubscribe naming /phone ended its
    # own subscription, and /phone's went on. Now each is refused, as for another user's JID.
    invalid_jid = f"{{{ns.PUBSUB_ERRORS}}}invalid-jid"
    forbidden = "{urn:ietf:params:xml:ns:xmpp-stanzas}forbidden"

    def subscribe(jid: str) -> str:
        return (
            f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='{jid}'/><options>"
            "<x xmlns='jabber:x:data' type='submit'>"
            "<field var='pubsub#queue_requests'><value>1</value></field></x></options></pubsub>"
        )

    def unsubscribe(jid: str) -> str:
        return f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='{jid}'/></pubsub>"

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as users:
            alice, carol = users
            phone = Client(prosody, "alice", "phone")
            await phone.start()
            try:
                own = await phone.request(subscribe("alice@localhost/phone"))
                assert own.get("type") == "result", ET.tostring(own)
                other = await alice.request(subscribe("alice@localhost/phone"))
                assert other.find(f".//{invalid_jid}") is not None, ET.tostring(other)
                listed = await alice.request(
                    f"<pubsub xmlns='{PS}'><subscriptions/></pubsub>", type="get"
                )
                assert listed.find(f".//{{{PS}}}subscription") is None, ET.tostring(listed)
                ended = await alice.request(unsubscribe("alice@localhost/phone"))
                assert ended.find(f".//{forbidden}") is not None, ET.tostring(ended)
                item = await carol.publish("<job xmlns='urn:example'/>")
                assert (await phone.next_event()).item == item  # still subscribed
                mine = await phone.request(unsubscribe("alice@localhost/phone"))
                assert mine.get("type") == "result", ET.tostring(mine)
            finally:
                await phone.disconnect(wait=0.5)

    run(scenario())


def test_a_subscription_made_with_the_full_jid_is_named_so(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # XEP-0060 §6.1.2: the result's <subscription/> carries the JID subscribed. One made with
    # the sender's own full JID was answered, listed and ended with its bare JID.
    full = "alice@localhost/phone"
    subscribe = (
        f"<pubsub xmlns='{PS}'><subscribe node='jobs' jid='{full}'/><options>"
        "<x xmlns='jabber:x:data' type='submit'>"
        "<field var='pubsub#queue_requests'><value>1</value></field></x></options></pubsub>"
    )

    def jids(reply: ET.Element) -> list[str | None]:
        assert reply.get("type") == "result", ET.tostring(reply)
        return [s.get("jid") for s in reply.iter(f"{{{PS}}}subscription")]

    async def scenario() -> None:
        phone = Client(prosody, "alice", "phone")
        await phone.start()
        try:
            async with component(prosody, box):
                assert jids(await phone.request(subscribe)) == [full]
                listed = await phone.request(
                    f"<pubsub xmlns='{PS}'><subscriptions/></pubsub>", type="get"
                )
                assert jids(listed) == [full]
            ended = await _subscription_ended(phone)  # told at the component's stop
            assert ended.get("jid") == full
        finally:
            await phone.disconnect(wait=0.5)

    run(scenario())


def test_another_user_cannot_answer_a_subscribers_qos_notification(
    prosody: Prosody, box: boxmq.Box
) -> None:
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "bob", "carol") as users:
            alice, bob, carol = users
            ids: list[str] = []
            alice.remove_handler("qos")  # alice is slow: she never answers the notification
            alice.register_handler(
                Callback("slow", QosRequests(), lambda s: ids.append(s.xml.get("id", "")))
            )
            await alice.subscribe(1, qos="acknowledged")
            item = await carol.publish("<job xmlns='urn:example'>x</job>")
            for _ in range(200):
                if ids:
                    break
                await asyncio.sleep(0.05)
            await bob.subscribe(1)
            # bob answers alice's notification with an error, under her iq id
            bob.send_raw(
                f"<iq type='error' id='{ids[0]}' to='{SERVICE}'><error type='cancel'>"
                "<not-acceptable xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/></error></iq>"
            )
            await bob.request(f"<query xmlns='{ns.DISCO_INFO}'/>", type="get")  # after it
            assert (await alice.retract(item)).get("type") == "result"  # still hers
            assert bob.events.empty()

    run(scenario())


def test_a_subscriber_whose_connection_drops_loses_its_items_to_the_other(
    prosody: Prosody, box: boxmq.Box
) -> None:
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "bob", "carol") as users:
            alice, bob, carol = users
            await alice.subscribe(3)
            items = {await carol.publish(f"<job xmlns='urn:example'>{n}</job>") for n in range(3)}
            held = {(await alice.next_event()).item for _ in range(3)}
            assert held == items
            bob.auto_retract = True
            await bob.subscribe(3)
            assert alice.transport is not None
            alice.transport.abort()  # TCP gone, no </stream>: Prosody tells the service
            for _ in range(200):
                if set(bob.received) == items:
                    break
                await asyncio.sleep(0.05)
            assert set(bob.received) == items

    run(scenario())


def test_a_lock_that_times_out_goes_to_the_next_subscriber(
    prosody: Prosody, box: boxmq.Box
) -> None:
    async def scenario() -> None:
        async with (
            component(prosody, box, lock_timeout=0.5),
            clients(prosody, "alice", "bob", "carol") as users,
        ):
            alice, bob, carol = users
            await alice.subscribe(1)
            item = await carol.publish("<job xmlns='urn:example'>slow</job>")
            assert (await alice.next_event()).item == item
            await bob.subscribe(1)
            notice = await alice.next_event()
            assert (notice.what, notice.item) == ("unlock", item)
            assert (await bob.next_event()).item == item
            late = await alice.retract(item)
            assert late.find(f".//{UNEXPECTED}") is not None

    run(scenario())


def test_a_lock_extended_by_id_from_another_process_holds_for_its_subscriber(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # docs/cli.md: `boxmq extend` pushes a lock's deadline for a consumer holding it in a
    # running process too. The door timed its subscribers' locks by the deadline it had sent
    # each item with: there it told the holder the item was unlocked and gave it to the next
    # subscriber, though the extend had answered `extend: ID`.
    async def scenario() -> None:
        async with (
            component(prosody, box, lock_timeout=6),
            clients(prosody, "alice", "bob", "carol") as users,
        ):
            alice, bob, carol = users
            await alice.subscribe(1)
            item = await carol.publish("<job xmlns='urn:example'>long</job>")
            assert (await alice.next_event()).item == item
            [locked] = box.queue("jobs").peek(state="processing")
            assert locked.lock_deadline is not None
            extend = [sys.executable, "-m", "boxmq", "--data", str(box.root), "extend", "jobs"]
            extend += [item, "--consumer", str(locked.holder), "--by", "60s"]
            done = await asyncio.to_thread(
                subprocess.run, extend, capture_output=True, text=True, timeout=TIMEOUT
            )
            assert done.returncode == 0, done.stderr
            assert time.time() < locked.lock_deadline, "the extend came too late to tell"
            await bob.subscribe(1)
            await asyncio.sleep(locked.lock_deadline + 1.5 - time.time())  # past the first
            assert alice.events.empty()  # no unlock notification
            assert bob.events.empty()  # nor the item
            assert (await alice.retract(item)).get("type") == "result"  # still alice's lock
            assert (await alice.next_event()).what == "retract"

    run(scenario())


def test_a_queue_deleted_by_the_api_of_this_process_tells_its_subscribers(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # box.delete_queue in the process that runs the door ended its XMPP subscriptions with
    # no word (the consumer found closed), where a delete by another process sent them the
    # <delete/> event: a live client waited for items for ever.
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice") as [alice]:
            await alice.subscribe(1)
            assert box.delete_queue("jobs")
            event = await asyncio.wait_for(alice.events.get(), 5)
            assert (event.what, event.item) == ("delete", "jobs")
            assert (await alice.next_event()).item == "none"  # its subscription's state
            # unsubscribed, and the node is the topic `jobs` now, as after another's delete
            reply = await alice.request(
                f"<pubsub xmlns='{PS}'><unsubscribe node='jobs' jid='alice@localhost'/></pubsub>"
            )
            assert reply.find(f".//{ITEM_NOT_FOUND}") is not None

    run(scenario())


async def _subscription_ended(user: Client) -> ET.Element:
    """The subscription-state notification (XEP-0060 §8.8.4) that `user` gets next, after any
    items and unlock notifications."""
    while (event := await asyncio.wait_for(user.events.get(), 5)).what != "subscription":
        assert event.what in ("item", "unlock"), event
    assert event.payload is not None
    assert (event.item, event.payload.get("node")) == ("none", "jobs")
    return event.payload


def test_a_subscriber_dropped_after_three_silences_is_told(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # After three lock timeouts in a row the service unsubscribed a subscriber and sent it
    # nothing: a client still connected (slow, or its handler stuck) waited for items for
    # ever. It now gets <subscription subscription='none'/> and may subscribe again.
    async def scenario() -> None:
        async with (
            component(prosody, box, lock_timeout=0.2),
            clients(prosody, "alice", "carol") as [alice, carol],
        ):
            await alice.subscribe(1)
            for n in range(3):
                await carol.publish(f"<job xmlns='urn:example'>{n}</job>")
            state = await _subscription_ended(alice)
            assert state.get("jid") == "alice@localhost"
            assert (await alice.subscribe(1)).get("type") == "result"  # it may come back

    run(scenario())


def test_a_subscriber_still_connected_when_the_component_stops_is_told(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # Subscriptions are not kept across a restart of the component: a client that stayed
    # connected was never told, and after the restart waited for items for ever.
    # Its retract after the restart of an item it held was auth/forbidden ("did not receive
    # this message"), where XEP-0254 §2.3 answers the one that received it unexpected-request.
    async def scenario() -> None:
        async with clients(prosody, "alice", "carol") as [alice, carol]:
            async with component(prosody, box):
                await alice.subscribe(1)
                item = await carol.publish("<job xmlns='urn:example'>x</job>")
                assert (await alice.next_event()).item == item
            await _subscription_ended(alice)
            async with component(prosody, box):
                late = await alice.retract(item)
                assert late.find(f".//{UNEXPECTED}") is not None
                await alice.subscribe(1)  # what docs/xmpp.md tells a client to do
                again = await alice.next_event()
                assert (again.what, again.item) == ("item", item)
                assert (await alice.retract(item)).get("type") == "result"

    run(scenario())


def test_a_qos_subscriber_whose_client_refuses_each_notification_is_unsubscribed(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # A client that does not serve urn:xmpp:qos answers each notification iq with an error
    # (slixmpp: feature-not-implemented), as the server does for a subscriber gone unheard
    # (service-unavailable). The item came back to it a second later, five times, then went
    # to error/, and every item after it the same: the queue drained into error/.
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as users:
            alice, carol = users
            alice.remove_handler("qos")  # her client knows nothing of urn:xmpp:qos
            assert (await alice.subscribe(1, qos="acknowledged")).get("type") == "result"
            item = await carol.publish("<job xmlns='urn:example'>1</job>")
            unlocks = [(await alice.next_event()) for _ in range(3)]
            assert [(e.what, e.item) for e in unlocks] == [("unlock", item)] * 3
            ended = await alice.next_event()  # after three refusals in a row: gone
            assert (ended.what, ended.item) == ("subscription", "none")
            # Its handoff: the item back in target/, neither held nor dead.
            jobs = box.queue("jobs")
            await until_async(
                lambda: not jobs.counts().locked, jobs.counts, within=alice.timeout, every=0.05
            )
            counts = jobs.counts()
            assert (counts.ready, counts.locked, counts.dead) == (1, 0, 0)
            # And the rounds of deliveries after it: the next one goes to a subscriber that
            # takes it, with no delivery more to alice (each counts one) nor to error/. A
            # fixed 1.5 s sleep for a round proved nothing where the round came later.
            await carol.subscribe(1)
            again = await carol.next_event()
            assert (again.what, again.item) == ("item", item)
            held = jobs.find(item)
            assert held is not None
            assert (held.state, held.envelope.delivery_count) == (boxmq.State.PROCESSING, 3)
            assert jobs.counts().dead == 0

    run(scenario())


def test_slixmpps_pubsub_plugin_lists_a_subscription_and_ends_it_by_its_subid_only(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # slixmpp's xep_0060 calls as an application makes them, through the server: before
    # 2026-11-30 get_subscriptions was feature-not-implemented, and an unsubscribe naming
    # another subid ended the subscription all the same
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice") as [alice]:
            alice.register_plugin("xep_0060")
            pubsub = alice.plugin["xep_0060"]
            subscribed = (await alice.subscribe(1)).find(f"{{{PS}}}pubsub/{{{PS}}}subscription")
            assert subscribed is not None
            subid = subscribed.get("subid")

            async def subids() -> list[str]:
                listed = await pubsub.get_subscriptions(  # type: ignore[no-untyped-call]
                    SERVICE, "jobs", timeout=alice.timeout
                )
                return [s["subid"] for s in listed["pubsub"]["subscriptions"]]

            assert await subids() == [subid]
            with pytest.raises(IqError) as refused:
                await pubsub.unsubscribe(  # type: ignore[no-untyped-call]
                    SERVICE, "jobs", subid=f"not-{subid}", timeout=alice.timeout
                )
            assert refused.value.condition == "not-acceptable"
            assert await subids() == [subid]
            await pubsub.unsubscribe(  # type: ignore[no-untyped-call]
                SERVICE, "jobs", subid=subid, timeout=alice.timeout
            )
            assert await subids() == []

    run(scenario())


def test_slixmpps_node_config_form_asking_two_node_types_is_not_acceptable(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # Both form readers took a field's first value and dropped the rest: an owner asking for
    # pubsub#node_type = leaf and collection was answered result (docs/xmpp.md, Data forms)
    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice") as [alice]:
            alice.register_plugin("xep_0060")
            pubsub = alice.plugin["xep_0060"]

            def config(node_type: str | list[str]) -> Form:
                form = Form()  # type: ignore[no-untyped-call]
                form["type"] = "submit"
                form.add_field(  # type: ignore[no-untyped-call]
                    var="FORM_TYPE", ftype="hidden", value=ns.NODE_CONFIG
                )
                form.add_field(var="pubsub#node_type", value=node_type)  # type: ignore[no-untyped-call]
                return form

            with pytest.raises(IqError) as refused:
                await pubsub.set_node_config(  # type: ignore[no-untyped-call]
                    SERVICE, "jobs", config(["leaf", "collection"]), timeout=alice.timeout
                )
            assert refused.value.condition == "not-acceptable"
            assert "pubsub#node_type" in refused.value.text
            await pubsub.set_node_config(  # type: ignore[no-untyped-call]
                SERVICE, "jobs", config("leaf"), timeout=alice.timeout
            )

    run(scenario())


async def _raw_request(user: Client, iq_id: str, inner: str, to: str) -> ET.Element:
    """An iq set written by hand (its children as the text has them, namespaces and all, not
    as slixmpp would write an element), and its reply."""
    answered: asyncio.Future[ET.Element] = asyncio.get_running_loop().create_future()

    def take(stanza: Any) -> None:
        if not answered.done():
            answered.set_result(stanza.xml)

    user.register_handler(Callback(f"reply {iq_id}", MatcherId(iq_id), take))
    user.send_raw(f"<iq type='set' id='{iq_id}' to='{to}'>{inner}</iq>")
    return await asyncio.wait_for(answered, user.timeout)


def test_the_qos_documents_examples_sent_as_written_reach_a_subscriber_as_client_messages(
    prosody: Prosody, box: boxmq.Box
) -> None:
    """urn:xmpp:qos, examples "Setting light level" and "Counting cars or individuals" (its
    </buy> closed as </log>) sent to the node's JID as the document writes them: a prefixed
    <qos:acknowledged/> or <qos:assured/>, its <message/> unqualified, without to and from
    ("left empty"). Each reaches a subscriber as a jabber:client <message/> from the sender's
    full JID as the server stamped it (the Security Considerations' MUST), and is stored so."""
    node_at = f"jobs@{SERVICE}"

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as users:
            alice, carol = users
            await alice.subscribe(5)
            light = await _raw_request(
                carol,
                "123",
                "<qos:acknowledged xmlns:qos='urn:xmpp:qos'><message>"
                "<set xmlns='urn:xmpp:iot:control'><int name='Light' value='80'/></set>"
                "</message></qos:acknowledged>",
                node_at,
            )
            assert (light.get("type"), len(light)) == ("result", 0)
            entered = await _raw_request(
                carol,
                "456",
                "<qos:assured xmlns:qos='urn:xmpp:qos' msgId='984232334'><message>"
                "<log xmlns='urn:xmpp:eventlog' timestamp='2015-11-12T09:07:12Z' id='Entered'>"
                "<message>Entered.</message></log></message></qos:assured>",
                node_at,
            )
            received = entered.find(ns.tag(ns.QOS, "received"))
            assert received is not None
            assert received.get("msgId") == "984232334"
            deliver = await _raw_request(
                carol, "457", "<qos:deliver xmlns:qos='urn:xmpp:qos' msgId='984232334'/>", node_at
            )
            assert (deliver.get("type"), len(deliver)) == ("result", 0)
            payloads = [(await alice.next_event()).payload for _ in range(2)]
            assert [p.tag if p is not None else None for p in payloads] == [
                "{jabber:client}message"
            ] * 2
            assert [(p.get("from"), p[0].tag) for p in payloads if p is not None] == [
                (str(carol.boundjid), "{urn:xmpp:iot:control}set"),
                (str(carol.boundjid), "{urn:xmpp:eventlog}log"),
            ]

    run(scenario())
    # stored as it was handed out: jabber:client, not the component stream's namespace
    stored = [
        ET.fromstring(path.read_bytes())
        for path in Path(box.root, "jobs").glob("*/*")
        if path.parent.name in ("target", "processing")
    ]
    assert sorted(m.tag for m in stored) == ["{jabber:client}message"] * 2


def test_a_plain_message_to_a_node_reaches_a_subscriber_and_a_refused_one_is_answered(
    prosody: Prosody, box: boxmq.Box
) -> None:
    """urn:xmpp:qos, Unacknowledged service: "a normal message stanza" is the at-most-once
    level. The document's "Sensor sending a momentary value" (no type), sent to the node's
    JID, reaches a subscriber as a jabber:client message from the sender's full JID; one
    sent to the component without a node comes back as a message error under its id.
    Before 2026-12-01 the component dropped both without a word."""

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as users:
            alice, carol = users
            await alice.subscribe(5)
            refused: asyncio.Future[ET.Element] = asyncio.get_running_loop().create_future()

            def take(stanza: Any) -> None:
                if not refused.done():
                    refused.set_result(stanza.xml)

            carol.add_event_handler("message_error", take)
            carol.send_raw(
                f"<message to='jobs@{SERVICE}' id='s1'>"
                "<fields xmlns='urn:xmpp:iot:sensordata' seqnr='1' done='true'>"
                "<node nodeId='Temp01'><numeric name='Temperature' value='23.4'/></node>"
                "</fields></message>"
            )
            event = await alice.next_event()
            assert event.what == "item"
            assert event.payload is not None
            assert event.payload.tag == "{jabber:client}message"
            assert event.payload.get("from") == str(carol.boundjid)
            assert event.payload[0].tag == "{urn:xmpp:iot:sensordata}fields"
            carol.send_raw(f"<message to='{SERVICE}' id='s2'><body>which node?</body></message>")
            answer = await asyncio.wait_for(refused, carol.timeout)
            assert (answer.get("id"), answer.get("from")) == ("s2", SERVICE)
            assert answer.find(f".//{ITEM_NOT_FOUND}") is not None

    run(scenario())


def test_qos_messages_to_a_topic_node_no_subscription_matches_are_answered_and_dropped(
    prosody: Prosody, box: boxmq.Box
) -> None:
    """docs/xmpp.md, urn:xmpp:qos "Received.": a message to a topic no subscription matches
    is dropped, but an iq is still answered as if it were stored (an <acknowledged/> its empty
    result, an <assured/> its <received/> and its <deliver/> a result) and a plain message is
    not answered at all. The plain one goes first: the stream keeps the order, so no error
    for it comes once the iqs are answered."""
    node_at = f"weather@{SERVICE}"  # no queue of that name, nobody subscribed to it

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "carol") as [carol]:
            errors: list[ET.Element] = []
            carol.add_event_handler("message_error", lambda stanza: errors.append(stanza.xml))
            carol.send_raw(f"<message to='{node_at}' id='p1'><body>plain</body></message>")
            acknowledged = await _raw_request(
                carol,
                "a1",
                f"<acknowledged xmlns='{ns.QOS}'><message xmlns='jabber:client'>"
                "<body>acknowledged</body></message></acknowledged>",
                node_at,
            )
            assert (acknowledged.get("type"), len(acknowledged)) == ("result", 0)
            assured = await _raw_request(
                carol,
                "s1",
                f"<assured xmlns='{ns.QOS}' msgId='m1'><message xmlns='jabber:client'>"
                "<body>assured</body></message></assured>",
                node_at,
            )
            assert assured.get("type") == "result"
            received = assured.find(ns.tag(ns.QOS, "received"))
            assert received is not None
            assert received.get("msgId") == "m1"
            deliver = await _raw_request(
                carol, "d1", f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", node_at
            )
            assert (deliver.get("type"), len(deliver)) == ("result", 0)
            assert errors == []

    run(scenario())
    assert "weather" not in box.queues()  # published to the topic, not taken for a queue
    kept = [p for p in Path(box.root).rglob("*") if p.is_file() and b"<body>" in p.read_bytes()]
    assert kept == []  # dropped: no subscription matched


def test_a_message_to_a_node_named_with_xep_0106_escapes_reaches_that_node(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # A JID's local part cannot hold a `/` or a space (RFC 7622 §3.3.1), so a topic node
    # `sensors/1` or a queue `night jobs` can only be written `sensors\2f1@...` and
    # `night\20jobs@...` (XEP-0106). The escapes were taken as written: the messages went to
    # a topic `sensors\2f1` nobody subscribed to, answered `result` and dropped, and to a
    # topic `night\20jobs`, not the queue.
    box.queue("night jobs")

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as users:
            alice, carol = users
            await alice.subscribe(5, "sensors/1")
            for iq_id, to in (("s", rf"sensors\2f1@{SERVICE}"), ("n", rf"night\20jobs@{SERVICE}")):
                acknowledged = await _raw_request(
                    carol,
                    iq_id,
                    f"<acknowledged xmlns='{ns.QOS}'><message xmlns='jabber:client'>"
                    f"<body>{iq_id}</body></message></acknowledged>",
                    to,
                )
                assert (acknowledged.get("type"), len(acknowledged)) == ("result", 0)
            carol.send_raw(rf"<message to='sensors\2f1@{SERVICE}' id='p'><body>p</body></message>")
            got = [await alice.next_event() for _ in range(2)]
            bodies = [
                e.payload.findtext("{jabber:client}body") for e in got if e.payload is not None
            ]
            assert bodies == ["s", "p"]

    run(scenario())
    assert box.queue("night jobs").counts().ready == 1


def test_an_assured_message_over_max_message_size_is_not_to_be_retried(
    prosody: Prosody, tmp_path: Path
) -> None:
    # Over ExactlyOnceLimits.max_message_size it was answered `wait` resource-constraint,
    # which tells a client to send it again later (RFC 6120 §8.3.2), to be refused again: it is
    # `modify` not-acceptable + payload-too-big, as a publish too big for an item is.
    limits = ExactlyOnceLimits(max_message_size=200)
    payload_too_big = f"{{{ns.PUBSUB_ERRORS}}}payload-too-big"

    async def scenario(box: boxmq.Box) -> None:
        async with component(prosody, box), clients(prosody, "carol") as [carol]:
            refused = await _raw_request(
                carol,
                "s1",
                f"<assured xmlns='{ns.QOS}' msgId='m1'><message xmlns='jabber:client'>"
                f"<body>{'x' * 300}</body></message></assured>",
                f"jobs@{SERVICE}",
            )
            error = refused.find("{jabber:client}error")
            assert error is not None, ET.tostring(refused)
            assert error.get("type") == "modify", ET.tostring(refused)
            assert error.find(f"{{{ns.STANZAS}}}not-acceptable") is not None, ET.tostring(refused)
            assert error.find(payload_too_big) is not None, ET.tostring(refused)

    with boxmq.open(tmp_path / "data", fsync="never", exactly_once=limits) as box:
        box.queue("jobs")
        run(scenario(box))
        assert box.queue("jobs").counts().ready == 0


async def _raw_reply(user: Client, xml: str, iq_id: str, *, wait: float) -> ET.Element | None:
    """Send `xml` as written (slixmpp would escape each `'` or `>`: the test sends what any
    client may), then the answer to iq `iq_id`; None if none came within `wait` s
    (`_raw_request` for one that must be answered)."""
    answered: asyncio.Future[ET.Element] = asyncio.get_running_loop().create_future()

    def take(stanza: Any) -> None:
        if not answered.done():
            answered.set_result(stanza.xml)

    user.register_handler(Callback("raw answer", MatcherId(iq_id), take))
    user.send_raw(xml)
    try:
        return await asyncio.wait_for(answered, wait)
    except TimeoutError:
        return None
    finally:
        user.remove_handler("raw answer")


def test_an_answer_past_the_servers_stanza_limit_is_never_sent(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # What a client sends within its own limit (256 KiB) grew past the component's (512
    # KiB) on the way back: an error echoing 200,000 quotes as `&apos;` (1.2 MB), a result
    # carrying back an id of 150,000 `>` as `&gt;` (600 kB). Prosody ended the component's
    # stream at each (everyone's notifications in flight with it) and the sender heard
    # nothing. Now the error goes without its echo, and the iq no answer fits is not served.
    async def scenario() -> None:
        async with component(prosody, box) as running, clients(prosody, "alice") as [alice]:
            dropped: list[object] = []
            running.add_event_handler("disconnected", dropped.append)
            big = "'" * 200_000
            echoed = await _raw_reply(
                alice,
                f"<iq type='get' id='big' to='{SERVICE}'><big xmlns='urn:e'>{big}</big></iq>",
                "big",
                wait=10.0,
            )
            assert echoed is not None, "no answer"
            assert echoed.get("type") == "error", ET.tostring(echoed)
            unavailable = "{urn:ietf:params:xml:ns:xmpp-stanzas}service-unavailable"
            assert echoed.find(f".//{unavailable}") is not None, ET.tostring(echoed)
            assert echoed.find("{urn:e}big") is None
            huge = ">" * 150_000
            disco = f"<query xmlns='{ns.DISCO_INFO}'/>"
            unserved = await _raw_reply(
                alice, f"<iq type='get' id='{huge}' to='{SERVICE}'>{disco}</iq>", huge, wait=2.0
            )
            assert unserved is None
            assert (await alice.request(disco, type="get")).get("type") == "result"
            assert dropped == []  # the component's stream was never ended
            assert running.connected.is_set()

    run(scenario())


def test_a_payload_nested_deeper_than_pythons_recursion_limit_is_stored_and_delivered(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # A payload of 2,000 nested elements is 14 kB, well within a client's stanza limit, and
    # the server passes it on; the component's writer called itself once per level, so the
    # publish raised RecursionError, and so did its error's echo of the request: the
    # component's stream ended at each (everyone's notifications in flight with it), nothing
    # stored, no answer. Any iq echoed in an error did the same (a get in a namespace not
    # served). Now it is stored, answered and delivered like any other payload.
    depth = 2000
    nested = "<a xmlns='urn:deep'>" + "<a>" * depth + "x" + "</a>" * depth + "</a>"
    publish = f"<pubsub xmlns='{PS}'><publish node='jobs'><item>{nested}</item></publish></pubsub>"
    unserved = nested.replace("urn:deep", "urn:unserved")

    async def scenario() -> None:
        async with (
            component(prosody, box) as running,
            clients(prosody, "alice", "carol") as [alice, carol],
        ):
            dropped: list[object] = []
            running.add_event_handler("disconnected", dropped.append)
            await alice.subscribe(1)
            # as text: slixmpp's own writer, which calls itself per level too, cannot send it
            sent = f"<iq type='set' id='deep' to='{SERVICE}'>{publish}</iq>"
            published = await _raw_reply(carol, sent, "deep", wait=10.0)
            assert published is not None, "no answer to the publish"
            assert published.get("type") == "result", ET.tostring(published)[:300]
            item = published.find(f".//{{{PS}}}item").get("id", "")  # type: ignore[union-attr]
            event = await alice.next_event()
            assert (event.what, event.item) == ("item", item)
            assert event.payload is not None
            assert len(list(event.payload.iter("{urn:deep}a"))) == depth + 1
            assert (await alice.retract(item)).get("type") == "result"
            sent = f"<iq type='get' id='deep-get' to='{SERVICE}'>{unserved}</iq>"
            refused = await _raw_reply(carol, sent, "deep-get", wait=10.0)
            assert refused is not None, "no answer to the get"
            unavailable = "{urn:ietf:params:xml:ns:xmpp-stanzas}service-unavailable"
            assert refused.find(f".//{unavailable}") is not None, ET.tostring(refused)[:300]
            assert dropped == []  # the component's stream was never ended

    run(scenario())


def test_a_payload_that_would_grow_past_the_limit_of_an_item_is_refused_not_stored(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # 200,000 quotes in a payload's text are 200 kB from the client, within its 256 KiB, and
    # 1.2 MB as the XML stored for them (`&apos;`): the publish, and an <acknowledged/>
    # message, were answered `result`, and the item moved to error/ at its first delivery,
    # over the component's stanza limit, its subscriber sent nothing. Now both are refused
    # as XEP-0060 §7.1.3.4 says, payload-too-big, and nothing is stored.
    quotes = "<t xmlns='urn:q'>" + "'" * 200_000 + "</t>"
    publish = f"<pubsub xmlns='{PS}'><publish node='jobs'><item>{quotes}</item></publish></pubsub>"
    acknowledged = (
        f"<qos:acknowledged xmlns:qos='{ns.QOS}'><message>{quotes}</message></qos:acknowledged>"
    )
    too_big = f"{{{ns.PUBSUB_ERRORS}}}payload-too-big"

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as users:
            alice, carol = users
            await alice.subscribe(1)
            for iq_id, to, inner in (
                ("quotes", SERVICE, publish),
                ("quotes-ack", f"jobs@{SERVICE}", acknowledged),
            ):
                sent = f"<iq type='set' id='{iq_id}' to='{to}'>{inner}</iq>"
                refused = await _raw_reply(carol, sent, iq_id, wait=10.0)
                assert refused is not None, f"no answer to {iq_id}"
                assert refused.find(f".//{too_big}") is not None, ET.tostring(refused)[:300]
            item = await carol.publish("<t xmlns='urn:q'>fits</t>")
            assert (await alice.next_event()).item == item  # the first item she was sent

    run(scenario())
    counts = box.queue("jobs").counts()
    assert (counts.ready + counts.locked, counts.dead) == (1, 0)


def test_text_beside_a_payload_is_refused_and_white_space_around_it_dropped(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # The payload's tail was stored with it: `<x xmlns="urn:x" />text` is no one element,
    # so its subscriber was sent it as text, <text xmlns='urn:boxmq:0'>&lt;x ...</text>, and
    # never the element published; text before the payload was dropped without a word.
    invalid_payload = f"{{{ns.PUBSUB_ERRORS}}}invalid-payload"

    def publish(item: str) -> str:
        return f"<pubsub xmlns='{PS}'><publish node='jobs'><item>{item}</item></publish></pubsub>"

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as users:
            alice, carol = users
            for beside in ("<x xmlns='urn:x'/>after", "before<x xmlns='urn:x'/>"):
                refused = await carol.request(publish(beside))
                assert refused.find(f".//{invalid_payload}") is not None, ET.tostring(refused)
                # beside an <acknowledged/> message, "and nothing else": it went the same way
                message = beside.replace("x xmlns='urn:x'/", "message xmlns='jabber:client'/")
                acknowledged = f"<acknowledged xmlns='{ns.QOS}'>{message}</acknowledged>"
                refused = await carol.request(acknowledged, to=f"jobs@{SERVICE}")
                assert refused.find(f".//{BAD_REQUEST}") is not None, ET.tostring(refused)
            pretty = await carol.request(publish("\n  <x xmlns='urn:x'>1</x>\n"))
            assert pretty.get("type") == "result", ET.tostring(pretty)
            await alice.subscribe(1)
            event = await alice.next_event()
            assert event.payload is not None
            assert (event.payload.tag, event.payload.text) == ("{urn:x}x", "1")

    run(scenario())
    [stored] = [path.read_bytes() for path in Path(box.root, "jobs").glob("*/*")]
    assert stored == b'<x xmlns="urn:x">1</x>'


def test_disco_items_of_a_thousand_long_queue_names_are_cut_to_fit(
    prosody: Prosody, box: boxmq.Box
) -> None:
    # 1,000 queues of 250-character names are 550 kB of <item/>s, over Prosody's 512 KiB for
    # the component: the whole list ended the component's stream and the client heard
    # nothing. The first that fit are listed, whole (docs/xmpp.md: no XEP-0059 paging).
    names = sorted(f"{n:04d}" + "q" * 246 for n in range(1000))
    for name in names:
        box.queue(name)

    async def scenario() -> None:
        async with component(prosody, box) as running, clients(prosody, "alice") as [alice]:
            dropped: list[object] = []
            running.add_event_handler("disconnected", dropped.append)
            reply = await alice.request(f"<query xmlns='{ns.DISCO_ITEMS}'/>", type="get")
            assert reply.get("type") == "result", ET.tostring(reply)[:300]
            listed = [i.get("node") for i in reply.iter(ns.tag(ns.DISCO_ITEMS, "item"))]
            assert 900 < len(listed) < len(names) + 1  # jobs is one of them
            assert listed == sorted([*names, "jobs"])[: len(listed)]
            assert dropped == []

    run(scenario())
