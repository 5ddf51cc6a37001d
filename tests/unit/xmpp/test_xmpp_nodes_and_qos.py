"""Discovery, node create/configure/delete, and urn:xmpp:qos received (seed 003), no server."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple
from xml.etree import ElementTree as ET

import pytest
from tests.stats import recorded_stats
from tests.unit.xmpp.wire import (
    ALICE,
    BOB,
    CAROL,
    EVENT,
    PS,
    SERVICE,
    Wire,
    condition,
    error_text,
    form_values,
    ready_messages,
    wired,
)
from tests.waiting import logged

import boxmq
from boxmq.core import ExactlyOnceLimits
from boxmq.store import layout
from boxmq.xmpp import ns

OWNER = ns.PUBSUB_OWNER
NODE_AT = f"jobs@{SERVICE}"


@pytest.fixture
def wire(box: boxmq.Box) -> Iterator[Wire]:
    with wired(box, node=None) as wire:  # these tests make their nodes
        yield wire


def _features(reply: ET.Element) -> set[str]:
    return {f.get("var", "") for f in reply.iter(ns.tag(ns.DISCO_INFO, "feature"))}


def test_disco_info_of_the_service_names_the_features(wire: Wire) -> None:
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}'/>", type="get")
    identity = reply.find(f".//{{{ns.DISCO_INFO}}}identity")
    assert identity is not None
    assert (identity.get("category"), identity.get("type")) == ("pubsub", "service")
    assert {ns.PUBSUB, ns.QUEUEING, ns.QOS} <= _features(reply)


@pytest.mark.parametrize("node", [None, "jobs"], ids=["service", "node"])
def test_disco_info_advertises_the_pubsub_features_served_and_no_other(
    wire: Wire, node: str | None
) -> None:
    # XEP-0060 §10: what is advertised is what a client may rely on. persistent-items was
    # missing though every node keeps its items until they are retracted (§7.1.3.6 answers
    # a publish with no <item/> item-required for such a node, as this one does); what the
    # door refuses feature-not-implemented must not be advertised.
    wire.create()
    at = "" if node is None else f" node='{node}'"
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}'{at}/>", type="get")
    pubsub = {f.removeprefix(PS + "#") for f in _features(reply) if f.startswith(PS + "#")}
    assert pubsub == {
        "create-nodes",
        "delete-nodes",
        "config-node",
        "persistent-items",
        "publish",
        "retract-items",
        "retrieve-affiliations",
        "retrieve-subscriptions",
        "subscribe",
        "subscription-notifications",
    }
    refused = {"retrieve-items", "subscription-options", "publish-options", "instant-nodes"}
    assert not pubsub & refused


@pytest.mark.parametrize("node", ["jobs", "sensors"], ids=["queue", "topic"])
def test_disco_info_of_the_jid_qos_requests_go_to_names_urn_xmpp_qos(wire: Wire, node: str) -> None:
    # urn:xmpp:qos, Determining Support: an entity that supports it "MUST advertise that
    # fact by returning a feature of 'urn:xmpp:qos'"; its requests go to NODE@service
    wire.create()
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}'/>", type="get", to=f"{node}@{SERVICE}")
    assert ns.QOS in _features(reply)


def test_disco_info_of_a_queue_node_and_of_a_topic_node(wire: Wire) -> None:
    wire.create()
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}' node='jobs'/>", type="get")
    identity = reply.find(f".//{{{ns.DISCO_INFO}}}identity")
    assert identity is not None
    assert identity.get("type") == "leaf"
    assert ns.QUEUEING in _features(reply)
    topic = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}' node='a/b'/>", type="get")
    assert topic.get("type") == "result"  # any node that is no queue is a topic


def test_disco_info_of_a_topic_node_nobody_subscribed_to_is_a_leaf_as_its_publish_is_stored(
    wire: Wire, box: boxmq.Box
) -> None:
    # Not item-not-found (XEP-0060 §5.4), as its delete, configure and unsubscribe are: a
    # publish to it is answered result and reaches its MQTT subscribers, and Smack's
    # getOrCreateLeafNode asks disco#info first and creates the node on item-not-found, a
    # queue here that would take those publishes from them.
    mqtt = box.subscribe("sensors/1", "mqtt-client")
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}' node='sensors/1'/>", type="get")
    identity = reply.find(f".//{{{ns.DISCO_INFO}}}identity")
    assert identity is not None
    assert (identity.get("category"), identity.get("type")) == ("pubsub", "leaf")
    item = wire.publish(node="sensors/1")
    assert [m.id for m in mqtt.receive_ready()] == [item]
    configure = f"<pubsub xmlns='{OWNER}'><configure node='sensors/1'/></pubsub>"
    assert condition(wire.iq(ALICE, configure, type="get")) == ("cancel", "item-not-found")


def test_disco_items_lists_nodes_and_a_nodes_waiting_items(wire: Wire) -> None:
    wire.create("jobs")
    wire.create("mail")
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_ITEMS}'/>", type="get")
    nodes = [i.get("node") for i in reply.iter(ns.tag(ns.DISCO_ITEMS, "item"))]
    assert nodes == ["jobs", "mail"]
    item = wire.publish()
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_ITEMS}' node='jobs'/>", type="get")
    [listed] = reply.iter(ns.tag(ns.DISCO_ITEMS, "item"))
    # XEP-0060 §5.5: an item's id is its name=; node= would make it a node
    assert (listed.get("jid"), listed.get("name"), listed.get("node")) == (SERVICE, item, None)


def test_disco_items_leaves_out_the_names_xml_cannot_carry(wire: Wire, box: boxmq.Box) -> None:
    # A queue made by the API as "a\x01b", a file a script dropped as `4.c%01d.T`: written
    # in the answer, either broke the component's stream (Prosody: not-well-formed).
    wire.create("jobs")
    box.queue("a\x01b")
    (Path(box.root) / "jobs" / "target" / "4.c%01d.T").write_bytes(b"x")
    item = wire.publish()
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_ITEMS}'/>", type="get")
    assert [i.get("node") for i in reply.iter(ns.tag(ns.DISCO_ITEMS, "item"))] == ["jobs"]
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_ITEMS}' node='jobs'/>", type="get")
    assert [i.get("name") for i in reply.iter(ns.tag(ns.DISCO_ITEMS, "item"))] == [item]


def test_create_twice_is_conflict_and_a_bad_name_is_bad_request(wire: Wire) -> None:
    assert wire.create().get("type") == "result"
    assert condition(wire.create()) == ("cancel", "conflict")
    assert condition(wire.create("topic-root")) == ("modify", "bad-request")


@pytest.mark.parametrize("node", ["..", ".", ".x", "a/../b"])
def test_a_node_named_as_a_path_step_is_a_queue_like_any_other(
    wire: Wire, box: boxmq.Box, root: Path, node: str
) -> None:
    # Answered result, its folder could have been the root's parent (`..`), the root
    # itself (`.`), a hidden folder `boxmq ls` passes over (`.x`) or another queue's:
    # escaped as the API and the CLI escape it, it is a queue of its own inside the root.
    assert wire.create(node).get("type") == "result"
    assert node in box.queues()
    assert [p.name for p in root.parent.iterdir()] == [root.name]  # nothing made beside it
    [folder] = [p for p in root.iterdir() if (p / "target").is_dir()]
    assert not folder.name.startswith(".")  # not hidden, and no path step
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_ITEMS}'/>", type="get")
    assert [i.get("node") for i in reply.iter(ns.tag(ns.DISCO_ITEMS, "item"))] == [node]
    assert wire.subscribe(BOB, 1, node=node).get("type") == "result"
    item = wire.publish(node=node)
    wire.service.poll()
    assert wire.items_to(BOB) == [item]
    assert box.counts()[node].locked == 1


def test_a_create_without_a_node_is_not_acceptable_nodeid_required(wire: Wire) -> None:
    # slixmpp's create_node(jid, None) asks for an instant node, which boxmq does not make:
    # XEP-0060 §8.1.2 answers that with not-acceptable (before 2026-11-30: bad-request)
    reply = wire.iq(ALICE, f"<pubsub xmlns='{PS}'><create/></pubsub>")
    assert condition(reply) == ("modify", "not-acceptable")
    error = reply.find(ns.tag(ns.COMPONENT, "error"))
    assert error is not None
    assert error.find(ns.tag(ns.PUBSUB_ERRORS, "nodeid-required")) is not None
    assert wire.create("made").get("type") == "result"  # a named one is made as ever


def test_a_topic_node_too_long_for_a_file_name_is_bad_request_saying_so(wire: Wire) -> None:
    # what docs/xmpp.md says of topic nodes: the topic is in each item's file name
    def publish(node: str) -> ET.Element:
        return wire.iq(
            CAROL,
            f"<pubsub xmlns='{PS}'><publish node='{node}'><item><j xmlns='u'/></item>"
            "</publish></pubsub>",
        )

    assert publish("a" * 79).get("type") == "result"
    refused = publish("a" * 80)
    assert condition(refused) == ("modify", "bad-request")
    text = ET.tostring(refused, encoding="unicode")
    assert "use a shorter topic" in text
    assert "fewer properties" not in text  # an XMPP publisher has none to drop


def test_a_subscribe_to_a_topic_node_no_publish_fits_is_refused_as_its_publish_is(
    wire: Wire,
) -> None:
    # The subscribe was answered result, and every publish to the node refused: a
    # subscription that could never receive. Refused alike now, saying the limit; a filter
    # only when even the shortest topic it matches (each + empty, no /#) does not fit.
    long = "a/" * 26 + "bb"  # 26 '/' of 3 bytes each escaped, 28 letters: 106 bytes
    refused = wire.subscribe(BOB, 1, node=long)
    assert condition(refused) == ("modify", "bad-request")
    text = error_text(refused)
    assert "takes 106 bytes, and at most 79 fit" in text, text
    assert long in text, text
    assert (
        wire.iq(BOB, f"<pubsub xmlns='{PS}'><subscriptions/></pubsub>", type="get").find(
            f".//{{{PS}}}subscription"
        )
        is None
    )
    assert condition(wire.subscribe(BOB, 1, node=f"{long}/+")) == ("modify", "bad-request")
    assert wire.subscribe(BOB, 1, node="a" * 79).get("type") == "result"
    # a filter longer than the limit that matches a topic that fits: "a"*78 + "/#" matches
    # "a"*78 itself
    assert wire.subscribe(BOB, 1, node="a" * 78 + "/#").get("type") == "result"
    # a queue node's name is not in its items' file names: any length its folder takes
    assert wire.create("q" * 120).get("type") == "result"
    assert wire.subscribe(BOB, 1, node="q" * 120).get("type") == "result"


def test_subscribes_to_a_sys_topic_node_in_a_loop_write_one_line_a_minute(
    wire: Wire, caplog: pytest.LogCaptureFixture
) -> None:
    # A subscribe to a topic node under $SYS went through the API's subscribe, which warns
    # its caller that the MQTT figures never reach it: a WARNING line for the operator each
    # time any JID subscribed, written as fast as one subscribed and unsubscribed in a loop
    # (found by a hunt of the limits across the doors). Told once a minute a JID now, at
    # INFO, counting the ones passed over; the subscription is served as before.
    with caplog.at_level(logging.DEBUG, "boxmq"):
        for _ in range(5):
            assert wire.subscribe(BOB, 1, node="$SYS/broker/uptime").get("type") == "result"
            assert wire.unsubscribe(BOB, node="$SYS/broker/uptime").get("type") == "result"
    told = [r for r in caplog.records if r.levelno >= logging.INFO and "$SYS" in r.getMessage()]
    assert [r.levelno for r in told] == [logging.INFO], [r.getMessage() for r in told]
    line = told[0].getMessage()
    assert BOB in line, line
    assert "$SYS/broker/uptime" in line, line
    assert "to its MQTT clients only" in line, line


def test_disco_of_a_topic_node_no_publish_fits_is_refused_as_its_subscribe_is(
    wire: Wire,
) -> None:
    # disco#info answered result, a pubsub/leaf, for a topic node whose every publish and
    # subscribe is refused (the topic is in each item's file name): a client that looks
    # first was told it could use the node. Refused alike now, with the subscribe's
    # condition and text; disco#items of it too.
    long = "a/" * 26 + "bb"  # 106 bytes escaped, at most 79 fit
    subscribe = wire.subscribe(BOB, 1, node=long)
    for query in (ns.DISCO_INFO, ns.DISCO_ITEMS):
        for node in (long, f"{long}/+"):
            reply = wire.iq(ALICE, f"<query xmlns='{query}' node='{node}'/>", type="get")
            assert condition(reply) == ("modify", "bad-request"), (query, node)
            text = error_text(reply)
            assert "could never receive an item" in text, text
        reply = wire.iq(ALICE, f"<query xmlns='{query}' node='{long}'/>", type="get")
        assert error_text(reply) == error_text(subscribe)
    # a filter that fits is a node one subscribes to (Smack's getNode asks disco#info
    # before its subscribe): a leaf, as its subscribe is answered result
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}' node='a/+'/>", type="get")
    identity = reply.find(f".//{{{ns.DISCO_INFO}}}identity")
    assert identity is not None
    assert (identity.get("category"), identity.get("type")) == ("pubsub", "leaf")
    assert wire.subscribe(BOB, 1, node="a/+").get("type") == "result"
    publish = (
        f"<pubsub xmlns='{PS}'><publish node='a/+'><item><j xmlns='u'/></item></publish></pubsub>"
    )
    assert condition(wire.iq(CAROL, publish)) == ("modify", "bad-request")  # docs/xmpp.md
    # a queue node's name is not in its items' file names: any length its folder takes
    wire.create("q" * 120)
    for query in (ns.DISCO_INFO, ns.DISCO_ITEMS):
        reply = wire.iq(ALICE, f"<query xmlns='{query}' node='{'q' * 120}'/>", type="get")
        assert reply.get("type") == "result", query


def test_create_of_a_topic_node_that_has_subscribers_is_conflict(wire: Wire) -> None:
    # A topic node exists while it has subscribers here (docs/xmpp.md). Its create made a
    # queue of that name, which took every later publish to the node: its subscribers got
    # nothing more, and subscribing again answered their topic subscription as it was.
    wire.subscribe(BOB, 2, node="news")
    first = wire.publish(node="news")
    assert wire.events() == [(BOB, "item", first)]
    assert condition(wire.create("news")) == ("cancel", "conflict")
    item = wire.publish(node="news")
    assert wire.events() == [(BOB, "item", item)]  # still the topic's
    unsubscribe = f"<pubsub xmlns='{PS}'><unsubscribe node='news' jid='bob@localhost'/></pubsub>"
    assert wire.iq(BOB, unsubscribe).get("type") == "result"
    assert wire.create("news").get("type") == "result"  # nobody's topic any more


def test_configure_returns_the_form_and_accepts_a_submission(wire: Wire) -> None:
    wire.create()
    reply = wire.iq(ALICE, f"<pubsub xmlns='{OWNER}'><configure node='jobs'/></pubsub>", type="get")
    values = form_values(reply)
    assert values["boxmq#destination"] == "queue"
    submit = wire.iq(
        ALICE,
        f"<pubsub xmlns='{OWNER}'><configure node='jobs'>"
        "<x xmlns='jabber:x:data' type='submit'/></configure></pubsub>",
    )
    assert submit.get("type") == "result"


def _config_form(fields: dict[str, str]) -> str:
    given = "".join(f"<field var='{k}'><value>{v}</value></field>" for k, v in fields.items())
    return (
        "<x xmlns='jabber:x:data' type='submit'><field var='FORM_TYPE' type='hidden'>"
        f"<value>http://jabber.org/protocol/pubsub#node_config</value></field>{given}</x>"
    )


def test_a_configuration_boxmq_cannot_apply_is_not_acceptable(wire: Wire, box: boxmq.Box) -> None:
    # XEP-0060 §8.2.5: an option the service cannot apply is not-acceptable. A node here has
    # one fixed configuration: pubsub#max_items=5 was answered result and changed nothing,
    # so the owner believed the node kept five items.
    wire.create()

    def configure(node: str, fields: dict[str, str]) -> ET.Element:
        return wire.iq(
            ALICE,
            f"<pubsub xmlns='{OWNER}'><configure node='{node}'>{_config_form(fields)}"
            "</configure></pubsub>",
        )

    refused = configure("jobs", {"pubsub#max_items": "5"})
    assert condition(refused) == ("modify", "not-acceptable")
    assert "pubsub#max_items" in ET.tostring(refused, encoding="unicode")
    assert condition(configure("jobs", {"boxmq#destination": "topic"})) == (
        "modify",
        "not-acceptable",
    )
    assert condition(configure("jobs", {"boxmq#lock_timeout": "5"})) == (
        "modify",
        "not-acceptable",
    )
    # what the node has already is accepted: the form as the service sent it, sent back
    same = {"pubsub#node_type": "leaf", "boxmq#destination": "queue", "boxmq#lock_timeout": "30"}
    assert configure("jobs", same).get("type") == "result"
    # a topic node's form can be read, and changed no more than a queue's
    wire.subscribe(BOB, 1, node="news")
    assert condition(configure("news", {"pubsub#max_items": "5"})) == ("modify", "not-acceptable")
    assert configure("news", {"boxmq#destination": "topic"}).get("type") == "result"
    # a create with such a form makes nothing
    create = wire.iq(
        ALICE,
        f"<pubsub xmlns='{PS}'><create node='made'/><configure>"
        f"{_config_form({'pubsub#max_items': '5'})}</configure></pubsub>",
    )
    assert condition(create) == ("modify", "not-acceptable")
    assert "made" not in box.queues()
    create = wire.iq(
        ALICE,
        f"<pubsub xmlns='{PS}'><create node='made'/><configure>"
        f"{_config_form({'pubsub#node_type': 'leaf'})}</configure></pubsub>",
    )
    assert create.get("type") == "result"
    assert "made" in box.queues()


def test_a_configuration_field_of_several_values_is_refused_for_the_fixed_configuration(
    wire: Wire,
) -> None:
    # XEP-0060's own node configuration form lists pubsub#roster_groups_allowed with three
    # values: it was refused "has 3 values: it takes one", as if one group would be applied,
    # where no value of it is (a node here has one fixed configuration)
    wire.create()
    refused = wire.iq(
        ALICE,
        f"<pubsub xmlns='{OWNER}'><configure node='jobs'>"
        "<x xmlns='jabber:x:data' type='submit'><field var='pubsub#roster_groups_allowed'>"
        "<value>friends</value><value>servants</value><value>courtiers</value></field></x>"
        "</configure></pubsub>",
    )
    assert condition(refused) == ("modify", "not-acceptable")  # XEP-0060 §8.2.5
    text = error_text(refused)
    assert "pubsub#roster_groups_allowed" in text, text
    assert "one fixed configuration" in text, text
    assert "takes one" not in text, text


def test_a_refused_configuration_says_the_one_the_node_has(wire: Wire) -> None:
    # The refusal named the fields and not their values: the owner was left to read the form
    # again to learn what a submission may ask for (the lock timeout, say).
    wire.create()
    wire.subscribe(BOB, 1, node="news")
    for node, destination in (("jobs", "queue"), ("news", "topic")):
        refused = wire.iq(
            ALICE,
            f"<pubsub xmlns='{OWNER}'><configure node='{node}'>"
            f"{_config_form({'boxmq#lock_timeout': '5'})}</configure></pubsub>",
        )
        assert condition(refused) == ("modify", "not-acceptable")
        text = error_text(refused)
        assert "boxmq#lock_timeout='5' cannot be applied" in text, text
        for setting in (
            "pubsub#node_type=leaf",
            f"boxmq#destination={destination}",
            "boxmq#lock_timeout=30",
        ):
            assert setting in text, text


def test_delete_removes_the_queue_and_its_subscribers(wire: Wire, box: boxmq.Box) -> None:
    wire.create()
    wire.subscribe(ALICE, 1)
    wire.publish()
    wire.events()
    reply = wire.iq(ALICE, f"<pubsub xmlns='{OWNER}'><delete node='jobs'/></pubsub>")
    assert reply.get("type") == "result"
    assert "jobs" not in box.queues()
    again = wire.iq(ALICE, f"<pubsub xmlns='{OWNER}'><delete node='jobs'/></pubsub>")
    assert condition(again) == ("cancel", "item-not-found")
    # in the door's words: not the API's (the server's folder, `boxmq ls`, a queue)
    assert error_text(again) == "no node 'jobs'"
    # created again, it starts afresh: a new item reaches a new subscriber at once
    wire.create()
    wire.subscribe(ALICE, 1)
    item = wire.publish()
    assert wire.events() == [(ALICE, "item", item)]


def _delete(wire: Wire, jid: str) -> ET.Element:
    return wire.iq(jid, f"<pubsub xmlns='{OWNER}'><delete node='jobs'/></pubsub>")


def test_only_the_owner_deletes_or_configures_a_node_and_it_survives_a_restart(
    box: boxmq.Box,
) -> None:
    wire = Wire(box)
    wire.create()  # by alice@localhost/a: alice@localhost owns it
    wire.service.close()
    wire = Wire(box)  # a new component: the owner is on disk
    form = f"<pubsub xmlns='{OWNER}'><configure node='jobs'/></pubsub>"
    submit = (
        f"<pubsub xmlns='{OWNER}'><configure node='jobs'>"
        "<x xmlns='jabber:x:data' type='submit'/></configure></pubsub>"
    )
    assert condition(_delete(wire, BOB)) == ("auth", "forbidden")
    assert condition(wire.iq(BOB, form, type="get")) == ("auth", "forbidden")
    assert condition(wire.iq(BOB, submit)) == ("auth", "forbidden")
    assert "jobs" in box.queues()
    assert wire.iq("alice@localhost/phone", form, type="get").get("type") == "result"
    assert _delete(wire, "alice@localhost/phone").get("type") == "result"  # any resource
    wire.service.close()


def _affiliations(wire: Wire, jid: str, node: str = "") -> list[dict[str, str]]:
    attribute = f" node='{node}'" if node else ""
    reply = wire.iq(jid, f"<pubsub xmlns='{PS}'><affiliations{attribute}/></pubsub>", type="get")
    assert reply.get("type") == "result", ET.tostring(reply)
    listed = reply.find(f"{{{PS}}}pubsub/{{{PS}}}affiliations")
    assert listed is not None
    return [dict(a.attrib) for a in listed]


def test_an_entity_retrieves_the_nodes_it_owns(wire: Wire, box: boxmq.Box) -> None:
    # slixmpp's get_affiliations(service[, node]), XEP-0060 §5.7: before 2026-11-30 it was
    # feature-not-implemented, and a client could not learn which nodes it may delete
    wire.create("jobs")  # by alice@localhost/a
    wire.create("mail")
    box.queue("made-elsewhere")  # no owner
    box.queue("bobs").set_owner("Bob@Localhost")  # written by hand, in capitals
    owner = {"affiliation": "owner"}
    assert _affiliations(wire, "alice@localhost/phone") == [
        {**owner, "node": "jobs"},
        {**owner, "node": "mail"},
    ]
    assert _affiliations(wire, ALICE, "mail") == [{**owner, "node": "mail"}]
    assert _affiliations(wire, ALICE, "bobs") == []
    assert _affiliations(wire, ALICE, "sensors/1") == []  # a topic node: nobody owns it
    assert _affiliations(wire, BOB) == [{**owner, "node": "bobs"}]
    disco = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}'/>", type="get")
    assert ns.PUBSUB + "#retrieve-affiliations" in _features(disco)


def test_retrieving_affiliations_looks_at_each_queue_once(
    wire: Wire, box: boxmq.Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The listing (box.queues(), which looks at each queue's target/) asks each one's owner:
    # a queue the service knows was looked at again before its owner was read, which says
    # None for a queue deleted meanwhile all the same; one it does not know was looked at,
    # then by box.queue(create=False), then by the Dropbox it made, then by the look for its
    # missing folders: 2 and 5 looks, where 1 and 2 do (the listing's, the Dropbox's).
    wire.create("jobs")  # known here, as it was created through the service
    box.queue("mail").set_owner("alice@localhost")  # made elsewhere: not known here
    stats = recorded_stats(monkeypatch)
    owner = {"affiliation": "owner"}
    assert _affiliations(wire, ALICE) == [{**owner, "node": "jobs"}, {**owner, "node": "mail"}]
    looks = [os.path.basename(os.path.dirname(p)) for p in stats if os.path.basename(p) == "target"]
    assert sorted(looks) == ["jobs", "mail", "mail"]


def test_a_queue_made_elsewhere_has_no_owner_and_anyone_may_delete_it(
    wire: Wire, box: boxmq.Box
) -> None:
    box.queue("jobs")
    assert _delete(wire, BOB).get("type") == "result"


def test_an_owner_written_in_capitals_into_the_owner_file_is_that_jid(
    wire: Wire, box: boxmq.Box
) -> None:
    # docs/xmpp.md has a person write the bare JID into .owner; RFC 7622 compares its
    # localpart and domainpart without case, as the server's stamped `from` is lower case
    box.queue("jobs").set_owner("Alice@LocalHost")
    assert condition(_delete(wire, BOB)) == ("auth", "forbidden")
    assert _delete(wire, ALICE).get("type") == "result"


def test_delete_tells_the_subscribers_before_their_subscriptions_end(wire: Wire) -> None:
    wire.create()
    wire.subscribe(BOB, 1)
    assert _delete(wire, ALICE).get("type") == "result"
    notice, ended = [s for s in wire.take() if s.find(f"{{{ns.PUBSUB_EVENT}}}event") is not None]
    assert notice.get("to") == ended.get("to") == BOB
    deleted = notice.find(f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}delete")
    assert deleted is not None
    assert deleted.get("node") == "jobs"
    # then the subscription's new state, as after every end the service decides
    state = ended.find(f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}subscription")
    assert state is not None
    assert (state.get("node"), state.get("jid"), state.get("subscription")) == (
        "jobs",
        "bob@localhost",
        "none",
    )


def test_a_delete_over_xmpp_keeps_the_subscribers_of_the_topic_of_that_name(
    wire: Wire, box: boxmq.Box
) -> None:
    # Bob subscribed to the topic `jobs`, then the API made a queue of that name, and alice
    # subscribed to it. Deleting the queue over XMPP told bob his node was deleted and ended
    # his subscription, where a delete by the API kept it: the topic was never deleted, and
    # the node is that topic again (XEP-0060 §8.4.2 tells the deleted node's subscribers).
    wire.subscribe(BOB, 1)  # the topic's: no queue of that name yet
    box.queue("jobs")
    wire.subscribe(ALICE, 1)  # the queue's
    assert _delete(wire, ALICE).get("type") == "result"
    assert _deletes(wire) == [ALICE]
    item = wire.publish()  # to the topic `jobs` now
    assert wire.events() == [(BOB, "item", item)]


def test_a_topic_node_with_subscribers_is_not_allowed_to_be_deleted_and_keeps_them(
    wire: Wire, root: Path
) -> None:
    # The node exists (a create of it is conflict, an unsubscribe from it is answered), and
    # docs/xmpp.md says a topic node cannot be deleted; its delete was item-not-found, the
    # node that does not exist, with the API's text: the box's folder on the server's disk
    # and `boxmq ls`, which the XMPP owner can neither read nor run.
    wire.subscribe(BOB, 1, node="sensors/1")
    reply = wire.iq(ALICE, f"<pubsub xmlns='{OWNER}'><delete node='sensors/1'/></pubsub>")
    assert condition(reply) == ("cancel", "not-allowed")  # XEP-0060 §8.4.3: cannot be deleted
    text = error_text(reply)
    assert "topic" in text, text
    assert str(root) not in text, text
    item = wire.publish(node="sensors/1")
    assert wire.events() == [(BOB, "item", item)]


def test_the_delete_of_a_node_that_does_not_exist_names_the_node_not_the_folder(
    wire: Wire, root: Path
) -> None:
    reply = wire.iq(ALICE, f"<pubsub xmlns='{OWNER}'><delete node='nothing'/></pubsub>")
    assert condition(reply) == ("cancel", "item-not-found")  # XEP-0060 §8.4.3
    text = error_text(reply)
    assert "'nothing'" in text, text
    assert str(root) not in text, text
    assert "boxmq ls" not in text, text


def _deleted_elsewhere(root: Path) -> None:
    """`boxmq delete jobs` while the door runs: the queue deleted by another process's box,
    which this service learns of only from the disk."""
    with boxmq.open(root, fsync="never") as other:
        other.delete_queue("jobs")


def _deletes(wire: Wire) -> list[str]:
    """To whom a <delete node='jobs'/> event went."""
    path = f"{{{ns.PUBSUB_EVENT}}}event/{{{ns.PUBSUB_EVENT}}}delete"
    return [s.get("to", "") for s in wire.take() if s.find(path) is not None]


def test_a_queue_deleted_by_another_process_is_a_topic_node_again(wire: Wire, root: Path) -> None:
    # `boxmq delete jobs` while `boxmq serve` runs the door: the door kept the node a queue,
    # refused every publish to it (item-not-found, "box.queue('jobs') makes it again") and
    # answered a subscribe with a subscription to the deleted queue. docs/xmpp.md: a node
    # that names no queue is the topic of that name.
    wire.create()
    wire.subscribe(BOB, 1)
    wire.publish()
    wire.events()
    _deleted_elsewhere(root)
    wire.publish()  # published to the topic `jobs`: no subscriber of it, so dropped
    assert _deletes(wire) == [BOB]  # told as for a delete over XMPP, then unsubscribed
    assert wire.subscribe(BOB, 1).get("type") == "result"  # the topic's, now
    item = wire.publish()
    assert wire.events() == [(BOB, "item", item)]


def test_a_queue_deleted_by_another_process_ends_its_subscriptions_here(
    wire: Wire, root: Path
) -> None:
    wire.create()
    wire.subscribe(BOB, 1)
    _deleted_elsewhere(root)
    assert wire.subscribe(ALICE, 1).get("type") == "result"  # to the topic
    assert _deletes(wire) == [BOB]
    item = wire.publish()
    assert wire.events() == [(ALICE, "item", item)]


def test_a_queue_deleted_by_another_process_can_be_created_again_here(
    wire: Wire, root: Path
) -> None:
    """The create of a node whose queue another process deleted makes it afresh (one look at
    its folder): its old subscribers are told of the delete first, and nothing it held comes
    to the new one's subscribers."""
    wire.create()
    wire.subscribe(BOB, 1)
    wire.publish()
    wire.events()
    _deleted_elsewhere(root)
    assert wire.create().get("type") == "result"
    assert _deletes(wire) == [BOB]
    assert wire.subscribe(CAROL, 1).get("type") == "result"
    item = wire.publish()
    assert wire.events() == [(CAROL, "item", item)]
    assert condition(wire.create()) == ("cancel", "conflict")  # it exists again


@pytest.mark.parametrize("asks", ["delete", "configure"])
def test_a_queue_deleted_by_another_process_is_not_found_by_an_owner_request(
    wire: Wire, root: Path, asks: str
) -> None:
    # Still known here, the gone queue's delete (or configure) by anyone was answered
    # result (or with a queue's form): its owner, in the deleted folder, no longer read,
    # so no owner was checked. The node does not exist (XEP-0060 §8.4.3, §8.2.3.4).
    wire.create()
    wire.subscribe(BOB, 1)
    _deleted_elsewhere(root)
    reply = wire.iq(
        CAROL,  # not the owner: forbidden, while the queue was there
        f"<pubsub xmlns='{OWNER}'><{asks} node='jobs'/></pubsub>",
        type="set" if asks == "delete" else "get",
    )
    assert condition(reply) == ("cancel", "item-not-found")
    assert "no node 'jobs'" in error_text(reply)
    assert _deletes(wire) == [BOB]  # its subscribers told, as for a delete over XMPP


_A_MESSAGE = "<message xmlns='jabber:client'><body>1</body></message>"


class _Request(NamedTuple):
    """A request a client may send about a node, `{node}` in `inner` and `to` its name."""

    sender: str
    inner: str
    type: str
    # The iq goes to the service's JID, as wire.iq's does, the node named in `inner`; the
    # urn:xmpp:qos ones go to NODE@component, whose local part names the node (docs/xmpp.md).
    to: str = SERVICE


_ABOUT_A_NODE = {
    "publish": _Request(
        CAROL,
        f"<pubsub xmlns='{PS}'><publish node='{{node}}'><item><j/></item></publish></pubsub>",
        "set",
    ),
    "retract": _Request(
        BOB,
        f"<pubsub xmlns='{PS}'><retract node='{{node}}'><item id='x'/></retract></pubsub>",
        "set",
    ),
    "unlock": _Request(
        BOB,
        f"<pubsub xmlns='{PS}'><unlock xmlns='{ns.QUEUEING}' node='{{node}}'>"
        "<item id='x'/></unlock></pubsub>",
        "get",
    ),
    "unsubscribe": _Request(
        BOB,
        f"<pubsub xmlns='{PS}'><unsubscribe node='{{node}}' jid='bob@localhost'/></pubsub>",
        "set",
    ),
    "subscriptions": _Request(
        BOB,
        f"<pubsub xmlns='{PS}'><subscriptions node='{{node}}'/></pubsub>",
        "get",
    ),
    "affiliations": _Request(
        ALICE,
        f"<pubsub xmlns='{PS}'><affiliations node='{{node}}'/></pubsub>",
        "get",
    ),
    "disco#info": _Request(BOB, f"<query xmlns='{ns.DISCO_INFO}' node='{{node}}'/>", "get"),
    "disco#items": _Request(BOB, f"<query xmlns='{ns.DISCO_ITEMS}' node='{{node}}'/>", "get"),
    "configure": _Request(
        ALICE,
        f"<pubsub xmlns='{OWNER}'><configure node='{{node}}'/></pubsub>",
        "get",
    ),
    "delete": _Request(
        ALICE,
        f"<pubsub xmlns='{OWNER}'><delete node='{{node}}'/></pubsub>",
        "set",
    ),
    "acknowledged": _Request(
        CAROL,
        f"<acknowledged xmlns='{ns.QOS}'>{_A_MESSAGE}</acknowledged>",
        "set",
        to="{node}@" + SERVICE,
    ),
    "assured": _Request(
        CAROL,
        f"<assured xmlns='{ns.QOS}' msgId='m1'>{_A_MESSAGE}</assured>",
        "set",
        to="{node}@" + SERVICE,
    ),
    "create": _Request(ALICE, f"<pubsub xmlns='{PS}'><create node='{{node}}'/></pubsub>", "set"),
    "subscribe": _Request(
        BOB,
        f"<pubsub xmlns='{PS}'><subscribe node='{{node}}' jid='bob@localhost'/></pubsub>",
        "set",
    ),
}


def _answer(reply: ET.Element) -> tuple[str, ...]:
    """A reply as two nodes' can be compared: its type, and an error's condition and text
    or a result's children's tags (node names and ids left out)."""
    if reply.get("type") == "error":
        text = error_text(reply)
        return (*condition(reply), text.replace("never", "NODE").replace("jobs", "NODE"))
    return ("result", *(e.tag for e in reply.iter() if e is not reply and e.tag != "item"))


@pytest.mark.parametrize("asks", list(_ABOUT_A_NODE))
def test_a_queue_deleted_by_another_process_nobody_subscribed_to_is_answered_as_no_queue(
    wire: Wire, root: Path, box: boxmq.Box, asks: str
) -> None:
    # A queue nobody here subscribed to stays known until a request looks for it (the
    # timer looks at the subscribed ones only): no request may answer from that memory.
    # Deleted elsewhere, `jobs` is answered as `never`, a node that was never a queue.
    wire.create()
    wire.publish()
    _deleted_elsewhere(root)
    request = _ABOUT_A_NODE[asks]
    answers = [
        _answer(
            wire.iq(
                request.sender,
                request.inner.format(node=n),
                type=request.type,
                to=request.to.format(node=n),
            )
        )
        for n in ("never", "jobs")
    ]
    assert answers[1] == answers[0]
    assert ("jobs" in box.queues()) == (asks == "create")  # not made again by any other


def test_disco_items_of_a_queue_deleted_by_another_process_tells_its_subscribers(
    wire: Wire, root: Path
) -> None:
    # A client that lists a node's items to see whether it is still there learnt nothing,
    # and its subscribers waited for the timer's round: the node is the topic of that name.
    wire.create()
    wire.subscribe(BOB, 1)
    wire.publish()
    wire.events()
    _deleted_elsewhere(root)
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_ITEMS}' node='jobs'/>", type="get")
    assert reply.get("type") == "result"
    assert list(reply.iter(ns.tag(ns.DISCO_ITEMS, "item"))) == []
    assert _deletes(wire) == [BOB]


def test_disco_info_of_a_queue_deleted_by_another_process_tells_its_subscribers(
    wire: Wire, root: Path
) -> None:
    # As its disco#items: disco#info answered from the door's memory of the queue, and its
    # subscribers waited for the timer's round (Smack's getNode asks disco#info first).
    wire.create()
    wire.subscribe(BOB, 1)
    _deleted_elsewhere(root)
    reply = wire.iq(ALICE, f"<query xmlns='{ns.DISCO_INFO}' node='jobs'/>", type="get")
    assert reply.get("type") == "result"  # the topic of that name, a leaf too
    assert _deletes(wire) == [BOB]


def test_the_timer_finds_a_queue_deleted_by_another_process(wire: Wire, root: Path) -> None:
    # no request to the node at all: the timer's round finds it (once a second, as sweeps go)
    wire.create()
    wire.subscribe(BOB, 1)
    _deleted_elsewhere(root)
    wire.service.expire(time.time() + 2)
    assert _deletes(wire) == [BOB]


def test_the_timer_keeps_the_subscribers_of_a_queue_whose_target_is_moved_aside(
    wire: Wire, root: Path
) -> None:
    # operations.md's "Disk usage" recreates a queue's target/ (mv target target.old && mkdir
    # target): the timer's look in between took the missing target/ for a queue deleted
    # elsewhere, and told bob so and unsubscribed him. The queue's folder is what goes.
    wire.create()
    wire.subscribe(BOB, 1)
    folder = root / "jobs"
    (folder / "target").rename(folder / "target.old")
    wire.service.expire(time.time() + 2)
    assert _deletes(wire) == []
    (folder / "target").mkdir()
    item = wire.publish()
    assert wire.events() == [(BOB, "item", item)]


def test_a_create_of_a_queue_whose_target_is_moved_aside_is_conflict_and_keeps_it(
    wire: Wire, root: Path
) -> None:
    # A create during operations.md's `mv target target.old && mkdir target` took the queue
    # for deleted elsewhere: bob was told <delete/> and unsubscribed, and a new target/ was
    # made, on which the operator's `mkdir target` then failed.
    wire.create()
    wire.subscribe(BOB, 1)
    folder = root / "jobs"
    (folder / "target").rename(folder / "target.old")
    assert condition(wire.create()) == ("cancel", "conflict")  # the node exists
    assert _deletes(wire) == []
    assert not (folder / "target").exists()  # none made: the operator's mkdir is to come
    (folder / "target").mkdir()
    item = wire.publish()
    assert wire.events() == [(BOB, "item", item)]  # still subscribed


def test_a_create_of_a_queue_whose_making_was_cut_short_makes_it(wire: Wire, root: Path) -> None:
    # A put killed between Dropbox's working/ and its target/ leaves working/ alone: a create
    # took that for a queue whose target/ was moved aside (conflict), for ever, where a put
    # finishes making it. More than working/ there without target/ is moved aside: conflict.
    (root / "jobs" / "working").mkdir(parents=True)
    assert wire.create().get("type") == "result"
    assert (root / "jobs" / "target").is_dir()
    wire.subscribe(BOB, 1)
    item = wire.publish()
    assert wire.events() == [(BOB, "item", item)]


def test_a_clock_stepped_back_does_not_put_off_the_timers_look_for_deleted_queues(
    wire: Wire, root: Path
) -> None:
    """The timer's look for queues another process deleted was next due at a time of the
    wall clock: stepped back an hour (NTP, `date -s`), it made none for an hour, and the
    subscribers of a queue deleted meanwhile were not told."""
    wire.create()
    wire.subscribe(BOB, 1)
    now = time.time()
    wire.service.expire(now)  # its look: the next in a second
    _deleted_elsewhere(root)
    wire.service.expire(now + 2 - 3600)  # two seconds on, stepped back an hour
    assert _deletes(wire) == [BOB]


def test_qos_to_a_queue_deleted_by_another_process_goes_to_the_topic(
    wire: Wire, root: Path, box: boxmq.Box
) -> None:
    # acknowledged was refused item-not-found ("box.queue('jobs') makes it again"), and
    # assured made the deleted queue again, where a node that names no queue is a topic
    wire.create()
    wire.publish()
    _deleted_elsewhere(root)
    reply = wire.iq(CAROL, _wrapped("acknowledged", None, "1"), to=NODE_AT)
    assert reply.get("type") == "result"
    reply = wire.iq(CAROL, _wrapped("assured", "m1", "2"), to=NODE_AT)
    assert reply.find(ns.tag(ns.QOS, "received")) is not None
    deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
    assert deliver.get("type") == "result"
    assert "jobs" not in box.queues()  # published to the topic (no subscriber: dropped)


def test_acknowledged_to_a_known_queue_looks_at_no_folder_first(
    wire: Wire, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each acknowledged message looked at the queue's folder (a stat) before its put, for a
    # queue deleted elsewhere, which the put finds by itself (as a publish's does). A look is
    # an isdir of its folder: deleted is the folder gone, not its target/ alone.
    import os.path

    looks: list[str] = []
    folder = str(root / "jobs")

    def counted(path: str) -> bool:
        if os.fspath(path) == folder:
            looks.append(folder)
        return real(path)

    wire.create()
    real = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", counted)
    for n in range(3):
        reply = wire.iq(CAROL, _wrapped("acknowledged", None, str(n)), to=NODE_AT)
        assert reply.get("type") == "result"
    assert looks == []
    with boxmq.open(root, fsync="never") as other:
        other.delete_queue("jobs")
        reply = wire.iq(CAROL, _wrapped("acknowledged", None, "3"), to=NODE_AT)
        assert reply.get("type") == "result"
        assert "jobs" not in other.queues()  # published to the topic: not made again


def test_a_subscribe_to_a_topic_node_looks_at_its_folder_once(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The subscribe asked whether the node was a queue to refuse a topic no publish fits,
    # then again to choose its receiver: two looks at a folder that is not there.
    from boxmq.store.layout import no_dropbox
    from boxmq.xmpp import service

    looks: list[str] = []

    def counted(path: str) -> bool:
        looks.append(path)
        return real(path)

    real = no_dropbox
    monkeypatch.setattr(service, "no_dropbox", counted)
    assert wire.subscribe(BOB, 1, node="sensors/1").get("type") == "result"
    assert len(looks) == 1


def _wrapped(kind: str, msg_id: str | None, body: str) -> str:
    at = f" msgId='{msg_id}'" if msg_id else ""
    return (
        f"<{kind} xmlns='{ns.QOS}'{at}><message xmlns='jabber:client' to='somewhere@else' "
        f"from='mallory@evil'><body>{body}</body></message></{kind}>"
    )


@pytest.mark.parametrize(
    "inner",
    [
        _wrapped("assured", None, "x"),
        f"<deliver xmlns='{ns.QOS}'/>",
        f"<assured xmlns='{ns.QOS}' msgId='m'/>",
        f"<acknowledged xmlns='{ns.QOS}'/>",
        f"<received xmlns='{ns.QOS}' msgId='m'/>",
    ],
    ids=[
        "assured-no-msgId",
        "deliver-no-msgId",
        "assured-no-message",
        "ack-no-message",
        "received",
    ],
)
def test_a_qos_request_the_schema_refuses_is_bad_request(
    wire: Wire, box: boxmq.Box, inner: str
) -> None:
    # urn:xmpp:qos, XML Schema: msgId is required on <assured/> and <deliver/>, and
    # <acknowledged/> and <assured/> carry one <message/>; <received/> is an answer, no request
    wire.create()
    assert condition(wire.iq(CAROL, inner, to=NODE_AT)) == ("modify", "bad-request")
    assert box.queue("jobs").counts().ready == 0


_MESSAGE = "<message xmlns='jabber:client'><body>{}</body></message>"


@pytest.mark.parametrize("kind", ["acknowledged", "assured"])
@pytest.mark.parametrize(
    "carried",
    [
        _MESSAGE.format("first") + _MESSAGE.format("second"),
        "<note xmlns='urn:example'/>" + _MESSAGE.format("first"),
        "<message xmlns='urn:example'><body>first</body></message>",
    ],
    ids=["two-messages", "another-element-beside", "message-of-another-namespace"],
)
def test_a_qos_request_carrying_other_than_one_message_is_bad_request_and_stores_nothing(
    wire: Wire, box: boxmq.Box, kind: str, carried: str
) -> None:
    """urn:xmpp:qos, XML Schema: <acknowledged/> and <assured/> are an EmbeddedMessage, a
    sequence of exactly one jabber:client <message/>. Before 2026-12-01 the first element
    named message was taken, whatever its namespace, and everything beside it dropped: a
    second message was lost while its sender was answered that both were received."""
    wire.create()
    at = " msgId='m1'" if kind == "assured" else ""
    reply = wire.iq(CAROL, f"<{kind} xmlns='{ns.QOS}'{at}>{carried}</{kind}>", to=NODE_AT)
    assert condition(reply) == ("modify", "bad-request")
    assert "one <message/>" in error_text(reply)
    if kind == "assured":  # nothing held for a deliver to hand out
        deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
        assert condition(deliver) == ("cancel", "item-not-found")
    assert box.queue("jobs").counts().ready == 0


def test_a_qos_request_in_an_iq_get_is_bad_request(wire: Wire, box: boxmq.Box) -> None:
    # urn:xmpp:qos, Use Cases: each step is "an iq stanza of type set"
    wire.create()
    reply = wire.iq(CAROL, _wrapped("acknowledged", None, "x"), to=NODE_AT, type="get")
    assert condition(reply) == ("modify", "bad-request")
    assert box.queue("jobs").counts().ready == 0


def test_the_documents_examples_written_as_they_are_store_a_jabber_client_message(
    wire: Wire, box: boxmq.Box
) -> None:
    """urn:xmpp:qos, examples "Setting light level" and "Counting cars or individuals" (its
    mismatched </buy> closed as <log>): the <message/> is unqualified under a prefixed
    <qos:acknowledged/>, so on the component's stream it is in the stream's namespace.
    Before 2026-12-01 it was stored, and handed to subscribers, as <message
    xmlns='jabber:component:accept'/>, a namespace no client's stanza has, where docs/xmpp.md
    promises the <message xmlns='jabber:client'/> of a wrapped message written qualified."""
    wire.create()
    light = (
        "<qos:acknowledged xmlns:qos='urn:xmpp:qos'><message>"
        "<set xmlns='urn:xmpp:iot:control'><int name='Light' value='80'/></set>"
        "</message></qos:acknowledged>"
    )
    assert wire.iq(CAROL, light, to=NODE_AT).get("type") == "result"
    entered = (
        "<qos:assured xmlns:qos='urn:xmpp:qos' msgId='984232334'><message>"
        "<log xmlns='urn:xmpp:eventlog' timestamp='2015-11-12T09:07:12Z' id='Entered'>"
        "<message>Entered.</message></log></message></qos:assured>"
    )
    received = wire.iq(CAROL, entered, to=NODE_AT).find(ns.tag(ns.QOS, "received"))
    assert received is not None
    assert received.get("msgId") == "984232334"
    deliver = "<qos:deliver xmlns:qos='urn:xmpp:qos' msgId='984232334'/>"
    assert wire.iq(CAROL, deliver, to=NODE_AT).get("type") == "result"
    stored = [ET.fromstring(m.body) for m in ready_messages(box)]
    assert [m.tag for m in stored] == ["{jabber:client}message"] * 2
    assert [m[0].tag for m in stored] == [
        "{urn:xmpp:iot:control}set",
        "{urn:xmpp:eventlog}log",
    ]
    assert [e.tag for e in stored[1].iter()][-1] == "{urn:xmpp:eventlog}message"  # its own


@pytest.mark.parametrize("kind", ["acknowledged", "assured"])
def test_the_body_of_an_unqualified_message_is_stored_as_jabber_clients(
    wire: Wire, box: boxmq.Box, kind: str
) -> None:
    """The <body/> of such a message is the stream's too: it is stored as jabber:client's
    <body/>, as in a message written qualified, so a reader finds it where it looks."""
    wire.create()
    at = " msgId='m1'" if kind == "assured" else ""
    wrapped = (
        f"<qos:{kind} xmlns:qos='{ns.QOS}'{at}><message><body>hi</body></message></qos:{kind}>"
    )
    wire.iq(CAROL, wrapped, to=NODE_AT)
    if kind == "assured":
        wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
    [stored] = ready_messages(box)
    assert ET.fromstring(stored.body).findtext("{jabber:client}body") == "hi"


@pytest.mark.parametrize("kind", ["acknowledged", "assured"])
def test_a_qos_message_is_stored_with_the_iqs_addresses(wire: Wire, kind: str) -> None:
    # urn:xmpp:qos, To and from attributes: "In the case of acknowledged and assured quality
    # of service levels, the message element MUST have its to and from attributes
    # overwritten by the corresponding attributes of the iq stanza"
    wire.create()
    wire.subscribe(BOB, 5)
    if kind == "acknowledged":
        reply = wire.iq(CAROL, _wrapped("acknowledged", None, "hello"), to=NODE_AT)
        assert len(reply) == 0  # an empty result (seed 003, Acknowledged service)
    else:
        wire.iq(CAROL, _wrapped("assured", "m1", "hello"), to=NODE_AT)
        reply = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
    assert reply.get("type") == "result"
    wire.service.poll()
    [event] = [s for s in wire.take() if s.find(f".//{{{ns.PUBSUB_EVENT}}}item") is not None]
    message = event.find(f".//{{{ns.PUBSUB_EVENT}}}item/{{jabber:client}}message")
    assert message is not None
    # the embedded addresses are overwritten from the iq: never trust what is inside
    assert (message.get("from"), message.get("to")) == (CAROL, NODE_AT)
    assert message.findtext("{jabber:client}body") == "hello"


def test_assured_then_deliver_delivers_once_however_often_repeated(
    wire: Wire, box: boxmq.Box
) -> None:
    wire.create()
    # urn:xmpp:qos, Assured service: "If multiple messages are received using the same msgId
    # from the same sender, they are simply ignored, as one is already held ... Still, the
    # received response is returned as normal", whatever they carry
    for body in ("once", "again", "a third"):
        reply = wire.iq(CAROL, _wrapped("assured", "m1", body), to=NODE_AT)
        received = reply.find(ns.tag(ns.QOS, "received"))
        assert received is not None
        assert received.get("msgId") == "m1"
    assert box.queue("jobs").counts().ready == 0  # stored, not yet delivered
    for _ in range(3):  # "it will acknowledge each one": an empty iq result
        deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
        assert (deliver.get("type"), len(deliver)) == ("result", 0)
    [delivered] = ready_messages(box)
    assert _body_text(delivered) == b"once"
    # the same msgId from a user other than Carol is another message
    wire.iq(ALICE, _wrapped("assured", "m1", "other"), to=NODE_AT)
    wire.iq(ALICE, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
    assert box.queue("jobs").counts().ready == 2


def test_received_echoes_a_msgid_that_needs_escaping_as_it_was_sent(
    wire: Wire, box: boxmq.Box
) -> None:
    # urn:xmpp:qos, Assured service: "This received response echoes the msgId attribute"; a
    # msgId is any string (XML Schema), so quotes, & and < and a tab come back as they went
    wire.create()
    written = "a&apos;b&amp;c&lt;d&quot;e&#9;f"
    reply = wire.iq(CAROL, _wrapped("assured", written, "x"), to=NODE_AT)
    received = reply.find(ns.tag(ns.QOS, "received"))
    assert received is not None
    assert received.get("msgId") == "a'b&c<d\"e\tf"
    deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='{written}'/>", to=NODE_AT)
    assert deliver.get("type") == "result"
    assert box.queue("jobs").counts().ready == 1


def test_a_msgid_too_long_for_a_file_name_is_refused_naming_the_msgid_and_its_room(
    wire: Wire, box: boxmq.Box
) -> None:
    # the msgId and the sender's JID are kept in the stored message's name until its deliver:
    # the text says what the sender can shorten (it sent no properties), and by how much
    wire.create()
    refused = wire.iq(CAROL, _wrapped("assured", "m" * 80, "x"), to=NODE_AT)
    assert condition(refused) == ("modify", "bad-request")
    text = error_text(refused)
    assert "properties" not in text
    assert "the msgId takes 80 bytes" in text
    assert "at most 61 fit" in text
    assert f"the sender's JID {CAROL} takes 21" in text  # '@' and '/' take 3 bytes each
    fits = wire.iq(CAROL, _wrapped("assured", "m" * 61, "x"), to=NODE_AT)
    assert fits.find(ns.tag(ns.QOS, "received")) is not None
    # to a topic node the topic is in the name too, and the text says how long it is
    topic_node = f"{'t' * 60}@{SERVICE}"
    refused = wire.iq(CAROL, _wrapped("assured", "m" * 80, "x"), to=topic_node)
    text = error_text(refused)
    assert "the msgId takes 80 bytes" in text
    assert "the node (topic) takes 60" in text
    assert box.queue("jobs").counts().ready == 0


def test_a_topic_node_too_long_for_its_copies_is_refused_naming_the_node_alone(
    wire: Wire, box: boxmq.Box
) -> None:
    # a delivered copy keeps the node (its topic) in its name: an XMPP sender sent no
    # properties to drop, so the text names the node alone
    topic_node = f"{'t' * 200}@{SERVICE}"
    refused = wire.iq(CAROL, _wrapped("assured", "m1", "x"), to=topic_node)
    assert condition(refused) == ("modify", "bad-request")
    text = error_text(refused)
    assert "properties" not in text
    assert "topic" not in text.replace("node (topic)", "")
    assert "the node (topic) takes 200 bytes" in text
    assert text.endswith("use a shorter node")
    assert box.pending(CAROL) == []


def test_the_same_msgid_from_two_resources_of_one_user_is_two_messages(
    wire: Wire, box: boxmq.Box
) -> None:
    # urn:xmpp:qos, Message IDs: msgIds are "unique for the sender (counting the Full JID as
    # the sender)": two resources of Carol may hold the same one at once
    wire.create()
    senders = (CAROL, "carol@localhost/d")
    for sender in senders:
        reply = wire.iq(sender, _wrapped("assured", "m1", sender[-1]), to=NODE_AT)
        assert reply.find(ns.tag(ns.QOS, "received")) is not None
    for sender in senders:
        reply = wire.iq(sender, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
        assert reply.get("type") == "result"
    assert sorted(_body_text(message) for message in ready_messages(box)) == [b"c", b"d"]


def _body_text(message: boxmq.Message) -> bytes:
    """The <body/> text of a stored wrapped message."""
    return message.body.split(b"<body>")[1].split(b"</body>")[0]


def test_an_assured_message_outlives_a_restart_of_the_receiver(tmp_path: Path) -> None:
    # urn:xmpp:qos, Persistence: "Will delivery be guaranteed, even beyond a system reset at
    # the receiving end?" boxmq's answer is yes (docs/xmpp.md: "also after a restart"): the
    # message held between <received/> and <deliver/> is on disk, and its repeats after the
    # restart store and deliver nothing more.
    with boxmq.open(tmp_path / "d", fsync="never") as box:
        wire = Wire(box)
        wire.create()
        assert wire.iq(CAROL, _wrapped("assured", "m1", "held"), to=NODE_AT).get("type") == "result"
        wire.service.close()
    with boxmq.open(tmp_path / "d", fsync="never") as box:
        wire = Wire(box)
        again = wire.iq(CAROL, _wrapped("assured", "m1", "held again"), to=NODE_AT)
        assert again.find(ns.tag(ns.QOS, "received")) is not None
        for _ in range(2):
            deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
            assert deliver.get("type") == "result"
        wire.service.close()
    with boxmq.open(tmp_path / "d", fsync="never") as box:
        wire = Wire(box)
        deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
        assert deliver.get("type") == "result"  # remembered as delivered, past a restart
        assert [_body_text(message) for message in ready_messages(box)] == [b"held"]
        wire.service.close()


@pytest.mark.parametrize("deliver_to", ["node", SERVICE, f"other@{SERVICE}"])
@pytest.mark.parametrize("node", ["jobs", "news"], ids=["queue", "topic"])
def test_a_deliver_wakes_the_node_its_assured_went_to_wherever_it_is_addressed(
    wire: Wire, deliver_to: str, node: str
) -> None:
    # A <deliver/> woke the node its own `to` named, so one addressed to the service or to
    # another node delivered the item at the next round of polling (~50 ms), not in the
    # batch that delivered it: the poll of the touched nodes alone now hands it out.
    wire.create()  # "jobs" is a queue; "news", naming none, a topic
    wire.subscribe(ALICE, 1, node=node)
    node_at = f"{node}@{SERVICE}"
    deliver_to = node_at if deliver_to == "node" else deliver_to
    wire.iq(CAROL, _wrapped("assured", "m1", "x"), to=node_at)
    wire.service.poll_touched()
    assert wire.take() == []
    deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=deliver_to)
    assert deliver.get("type") == "result"
    wire.service.poll_touched()  # what the component does after the batch, and no more
    sent = [stanza.get("to") for stanza in wire.take() if stanza.find(EVENT) is not None]
    assert sent == [ALICE]


def test_deliver_of_an_unknown_or_expired_msgid_is_item_not_found(
    manual_box: boxmq.Box, clock: boxmq.ManualClock
) -> None:
    wire = Wire(manual_box)
    wire.create()
    never = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='never-sent'/>", to=NODE_AT)
    assert condition(never) == ("cancel", "item-not-found")
    wire.iq(CAROL, _wrapped("assured", "late", "x"), to=NODE_AT)
    clock.advance(ExactlyOnceLimits().pending_ttl + 1)
    manual_box.sweep()  # its deliver never came in time: dropped
    late = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='late'/>", to=NODE_AT)
    assert condition(late) == ("cancel", "item-not-found")
    wire.iq(CAROL, _wrapped("assured", "ok", "x"), to=NODE_AT)
    for _ in range(2):  # delivered, then a repeat: both results
        done = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='ok'/>", to=NODE_AT)
        assert done.get("type") == "result"
    wire.service.close()


def test_a_delivered_msgid_is_remembered_for_done_ttl(tmp_path: Path) -> None:
    # urn:xmpp:qos, Assured service: each repeat of <deliver/> is acknowledged, for as long
    # as docs/xmpp.md says the id is remembered (done_ttl), then item-not-found. The clock
    # starts now: the delivery records are files, and their age is the clock's less their
    # time of change.
    clock = boxmq.ManualClock(time.time())
    limits = ExactlyOnceLimits(done_ttl=600)
    with boxmq.open(tmp_path / "d", fsync="never", clock=clock, exactly_once=limits) as box:
        wire = Wire(box, now=clock.now)
        wire.create()
        wire.iq(CAROL, _wrapped("assured", "m1", "x"), to=NODE_AT)
        deliver = f"<deliver xmlns='{ns.QOS}' msgId='m1'/>"
        assert wire.iq(CAROL, deliver, to=NODE_AT).get("type") == "result"
        clock.advance(590)
        box.sweep()
        assert wire.iq(CAROL, deliver, to=NODE_AT).get("type") == "result"
        clock.advance(20)
        box.sweep()
        assert condition(wire.iq(CAROL, deliver, to=NODE_AT)) == ("cancel", "item-not-found")
        assert box.queue("jobs").counts().ready == 1
        wire.service.close()


def test_a_msgid_reused_after_a_completed_delivery_is_a_new_message(
    wire: Wire, box: boxmq.Box
) -> None:
    wire.create()
    for body in ("first", "second"):
        received = wire.iq(CAROL, _wrapped("assured", "seq1", body), to=NODE_AT)
        assert received.find(ns.tag(ns.QOS, "received")) is not None
        for _ in range(2):  # a repeat of deliver is still answered, delivering nothing
            deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='seq1'/>", to=NODE_AT)
            assert deliver.get("type") == "result"
    bodies = sorted(b"second" in p.body for p in ready_messages(box))
    assert bodies == [False, True]


def test_qos_to_the_service_without_a_node_is_item_not_found(wire: Wire) -> None:
    reply = wire.iq(CAROL, _wrapped("acknowledged", None, "x"))
    assert condition(reply) == ("cancel", "item-not-found")


def test_limits_answer_resource_constraint_and_untrusted_not_allowed(tmp_path: Path) -> None:
    limits = ExactlyOnceLimits(max_pending_per_source=1, trusted_sources=frozenset({CAROL}))
    with boxmq.open(tmp_path / "d", fsync="never", exactly_once=limits) as box:
        wire = Wire(box)
        wire.create()
        assert wire.iq(CAROL, _wrapped("assured", "a", "1"), to=NODE_AT).get("type") == "result"
        full = wire.iq(CAROL, _wrapped("assured", "b", "2"), to=NODE_AT)
        assert condition(full) == ("wait", "resource-constraint")
        untrusted = wire.iq(ALICE, _wrapped("assured", "c", "3"), to=NODE_AT)
        assert condition(untrusted) == ("cancel", "not-allowed")
        # Named by the JID each sent from, as it knows itself: the intake's source is that JID
        # (MQTT's is an internal `mqtt:` name, which its door says as the client id).
        assert error_text(full) == (
            f"{CAROL!r}: this message would pass max_pending_per_source (1); try again later"
        )
        assert error_text(untrusted) == f"{ALICE!r} may not send messages exactly once"
        wire.service.close()


@pytest.mark.parametrize(
    ("limits", "refused"),
    [
        (ExactlyOnceLimits(max_pending_per_source=1), CAROL),
        (ExactlyOnceLimits(max_bytes_per_source=250), CAROL),
        (ExactlyOnceLimits(max_pending_total=1), ALICE),
        (ExactlyOnceLimits(max_bytes_total=250), ALICE),
    ],
    ids=["number-per-source", "size-per-source", "number-in-total", "size-in-total"],
)
def test_a_message_over_a_limit_is_refused_and_not_held(
    tmp_path: Path, limits: ExactlyOnceLimits, refused: str
) -> None:
    # urn:xmpp:qos, Memory attacks: "a limit on the number and size of assured messages that
    # can be simultaneously received from a single source", and "a total limit ... from all
    # sources": over either, "the resource-constraint error should be returned instead of
    # accepting the message". Carol holds one of about 150 bytes; then one of about 210 comes,
    # from Carol (over her limit) or from Alice (over the total), whose deliver finds nothing.
    with boxmq.open(tmp_path / "d", fsync="never", exactly_once=limits) as box:
        wire = Wire(box)
        wire.create()
        assert wire.iq(CAROL, _wrapped("assured", "a", "1"), to=NODE_AT).get("type") == "result"
        reply = wire.iq(refused, _wrapped("assured", "c", "3" * 60), to=NODE_AT)
        assert condition(reply) == ("wait", "resource-constraint")
        deliver = wire.iq(refused, f"<deliver xmlns='{ns.QOS}' msgId='c'/>", to=NODE_AT)
        assert condition(deliver) == ("cancel", "item-not-found")
        # a repeat of the one held takes no room: "the received response is returned as
        # normal" (Assured service), however full the receiver is
        repeat = wire.iq(CAROL, _wrapped("assured", "a", "1"), to=NODE_AT)
        assert repeat.find(ns.tag(ns.QOS, "received")) is not None
        wire.service.close()


def _carol_trusted_and_alice_not(wire: Wire) -> None:
    """Carol's assured request is taken; Alice's is refused as from an untrusted sender."""
    assert wire.iq(CAROL, _wrapped("assured", "a", "1"), to=NODE_AT).get("type") == "result"
    untrusted = wire.iq(ALICE, _wrapped("assured", "c", "3"), to=NODE_AT)
    assert condition(untrusted) == ("cancel", "not-allowed")
    # refused, not held (urn:xmpp:qos, Memory attacks 1): its deliver finds nothing
    deliver = wire.iq(ALICE, f"<deliver xmlns='{ns.QOS}' msgId='c'/>", to=NODE_AT)
    assert condition(deliver) == ("cancel", "item-not-found")


def test_a_bare_jid_in_trusted_sources_trusts_each_of_its_resources(tmp_path: Path) -> None:
    # urn:xmpp:qos, Memory attacks: untrusted are senders "not in the roster", whose entries
    # are bare JIDs; the full JID of each request was looked up alone, so carol@localhost
    # listed refused carol@localhost/c
    limits = ExactlyOnceLimits(trusted_sources=frozenset({"carol@localhost"}))
    with boxmq.open(tmp_path / "d", fsync="never", exactly_once=limits) as box:
        wire = Wire(box)
        wire.create()
        _carol_trusted_and_alice_not(wire)
        wire.service.close()


def test_trusted_sources_match_jids_written_in_any_case(tmp_path: Path) -> None:
    # RFC 7622 compares a JID's localpart and domainpart without case, and the server stamps
    # them in lower case: Carol@LocalHost listed refused carol@localhost/c, whom it names.
    # The MQTT door shares the set and compares its client ids exactly: mqtt:Alice trusts no
    # JID, and the set itself is left as it was given.
    sources = frozenset({"Carol@LocalHost", "mqtt:Alice@LocalHost"})
    limits = ExactlyOnceLimits(trusted_sources=sources)
    with boxmq.open(tmp_path / "d", fsync="never", exactly_once=limits) as box:
        wire = Wire(box)
        wire.create()
        _carol_trusted_and_alice_not(wire)
        assert box.exactly_once.trusted_sources == sources
        wire.service.close()


def test_a_trusted_source_that_is_no_jid_is_left_to_the_other_senders(tmp_path: Path) -> None:
    # The set is shared with the embedded API, whose box.assured names its sources freely: an
    # entry that is no JID trusts no XMPP sender, and the door still starts and trusts the
    # JIDs beside it.
    sources = frozenset({"carol@localhost", "carol@", "billing job"})
    limits = ExactlyOnceLimits(trusted_sources=sources)
    with boxmq.open(tmp_path / "d", fsync="never", exactly_once=limits) as box:
        wire = Wire(box)
        wire.create()
        _carol_trusted_and_alice_not(wire)
        assert box.assured("billing job", "m1", b"x", queue="jobs") is True
        wire.service.close()


def test_refused_exactly_once_messages_are_logged_naming_their_sender(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # urn:xmpp:qos, Memory attacks: "Whenever invalid use of the assured messaging service is
    # detected ... an event should be logged ... so that the source of the error can be
    # found". Each was answered, and nothing was logged. One line per sender a minute, the
    # others counted in the next, so that a flood of them does not flood the log.
    clock = [1000.0]
    limits = ExactlyOnceLimits(max_pending_per_source=1, trusted_sources=frozenset({CAROL}))
    with (
        boxmq.open(tmp_path / "d", fsync="never", exactly_once=limits) as box,
        caplog.at_level(logging.WARNING, logger="boxmq.xmpp"),
    ):
        wire = Wire(box, now=lambda: clock[0])
        wire.create()
        assert wire.iq(CAROL, _wrapped("assured", "a", "1"), to=NODE_AT).get("type") == "result"
        for n in range(3):
            wire.iq(ALICE, _wrapped("assured", f"u{n}", "x"), to=NODE_AT)
        wire.iq(CAROL, _wrapped("assured", "b", "2"), to=NODE_AT)
        clock[0] += 61
        wire.iq(ALICE, _wrapped("assured", "u3", "x"), to=NODE_AT)
        wire.service.close()
    lines = logged(caplog, "refused")
    assert len(lines) == 3, lines
    said = [(line.split(" refused, ")[0].rsplit(" ", 1)[-1], line.split(", ")[1]) for line in lines]
    assert [(who, condition.split(":")[0]) for who, condition in said] == [
        (ALICE, "not-allowed"),
        (CAROL, "resource-constraint"),
        (ALICE, "not-allowed"),
    ]
    assert lines[2].endswith("(2 more since the last line)")


@pytest.mark.parametrize("cap", ["max_message_size", "max_bytes_per_source", "max_bytes_total"])
def test_an_oversized_assured_message_is_payload_too_big_not_to_be_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cap: str
) -> None:
    # It was `wait` resource-constraint, which tells the sender to retry after waiting
    # (RFC 6120 §8.3.2), though the same message is refused again whenever it comes: it is
    # `modify` not-acceptable + payload-too-big, as a publish, a plain and an <acknowledged/>
    # message too big for an item are. The pending limits keep resource-constraint; but a
    # message alone over a cap on bytes is as too large: no room will ever take it.
    limits = ExactlyOnceLimits(**{cap: 50})  # type: ignore[arg-type]
    with (
        boxmq.open(tmp_path / "d", fsync="never", exactly_once=limits) as box,
        caplog.at_level(logging.WARNING, logger="boxmq.xmpp"),
    ):
        wire = Wire(box)
        wire.create()
        reply = wire.iq(CAROL, _wrapped("assured", "a", "x" * 200), to=NODE_AT)
        assert condition(reply) == ("modify", "not-acceptable")
        assert reply.find(f".//{{{ns.PUBSUB_ERRORS}}}payload-too-big") is not None
        assert f"{cap} (50)" in error_text(reply)
        assert box.intake.destination(CAROL, "a") is None  # nothing held for a deliver
        wire.service.close()
    [line] = logged(caplog, "refused")  # urn:xmpp:qos, memory attacks: still logged
    assert f"from {CAROL} refused, not-acceptable: " in line


def test_a_pubsub_request_without_a_node_is_nodeid_required(wire: Wire) -> None:
    reply = wire.iq(ALICE, f"<pubsub xmlns='{PS}'><retract><item id='x'/></retract></pubsub>")
    assert condition(reply) == ("modify", "bad-request")
    error = reply.find(ns.tag(ns.COMPONENT, "error"))
    assert error is not None
    assert error.find(ns.tag(ns.PUBSUB_ERRORS, "nodeid-required")) is not None


@pytest.mark.parametrize("submit", [False, True], ids=["get", "submit"])
def test_the_configure_of_a_node_that_does_not_exist_is_item_not_found(
    wire: Wire, root: Path, submit: bool
) -> None:
    # A node with neither a queue nor subscribers here does not exist for a delete and an
    # unsubscribe (item-not-found); its configure was answered with a topic's form, or its
    # submit accepted, as if it did (XEP-0060 §8.2.3.4: item-not-found).
    form = "<x xmlns='jabber:x:data' type='submit'/>" if submit else ""
    reply = wire.iq(
        ALICE,
        f"<pubsub xmlns='{OWNER}'><configure node='nothing'>{form}</configure></pubsub>",
        type="set" if submit else "get",
    )
    assert condition(reply) == ("cancel", "item-not-found")
    text = error_text(reply)
    assert "'nothing'" in text, text
    assert str(root) not in text, text
    # with a subscriber here the topic node exists: its form is read
    wire.subscribe(BOB, 1, node="nothing")
    again = wire.iq(
        ALICE,
        f"<pubsub xmlns='{OWNER}'><configure node='nothing'>{form}</configure></pubsub>",
        type="set" if submit else "get",
    )
    assert again.get("type") == "result"


def test_a_deliver_while_the_queue_s_target_is_moved_aside_is_refused_and_sent_once_back(
    wire: Wire, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # urn:xmpp:qos exactly once, its <deliver/> in operations.md's "Disk usage" window: it
    # made a new target/ (the operator's mkdir then failed). It waits TARGET_BACK_WAIT, then
    # is refused as any store failure (wait): the sender delivers again, once it is back.
    monkeypatch.setattr(layout, "TARGET_BACK_WAIT", 0.2)
    wire.create()
    reply = wire.iq(CAROL, _wrapped("assured", "m1", "2"), to=NODE_AT)
    assert reply.find(ns.tag(ns.QOS, "received")) is not None
    folder = root / "jobs"
    (folder / "target").rename(folder / "target.old")
    deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
    assert condition(deliver) == ("wait", "internal-server-error")
    assert "has no target/" in error_text(deliver)
    assert not (folder / "target").exists()
    (folder / "target").mkdir()
    deliver = wire.iq(CAROL, f"<deliver xmlns='{ns.QOS}' msgId='m1'/>", to=NODE_AT)
    assert deliver.get("type") == "result"
    assert len(os.listdir(folder / "target")) == 1
