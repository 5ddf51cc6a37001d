"""Router: one copy per plain subscription, one per share group (MQTT 5.0 §4.8, MQTT-234)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.qos import QoS
from boxmq.core.router import Destination, Router, Subscription, Unsubscribed, destination_name
from boxmq.core.topics import TopicFilter, matches, parse_filter
from boxmq.errors import InvalidArgument, InvalidTopic
from boxmq.model import ConsumerId


def sub(subscriber: str, text: str, qos: QoS = QoS.AT_LEAST_ONCE, **options: bool) -> Subscription:
    return Subscription(ConsumerId(subscriber), parse_filter(text), qos, **options)


def copies(
    router: Router, topic: str, qos: QoS = QoS.EXACTLY_ONCE, source: str | None = None
) -> list[str]:
    return [d.name for d in router.route(topic, qos=qos, source=source)]


def test_mqtt_234_example_1_distinct_groups_and_plain_subscribers() -> None:
    router = Router()
    for member in ("s1", "s2", "s3"):
        router.subscribe(sub(member, "$share/consumer1/sport/tennis/+"))
    for member in ("s4", "s5"):
        router.subscribe(sub(member, "$share/consumer2/sport/tennis/+"))
    router.subscribe(sub("p1", "sport/tennis/+"))
    router.subscribe(sub("p2", "sport/tennis/+"))
    destinations = router.route("sport/tennis/player1", qos=QoS.AT_LEAST_ONCE)
    assert [(d.name, d.shared, d.subscriber) for d in destinations] == [
        ("client.p1/sport/tennis/+", False, "p1"),
        ("client.p2/sport/tennis/+", False, "p2"),
        ("share.consumer1/sport/tennis/+", True, None),
        ("share.consumer2/sport/tennis/+", True, None),
    ]
    assert router.members("consumer1", "sport/tennis/+") == ["s1", "s2", "s3"]
    assert router.members("consumer2", "sport/tennis/+") == ["s4", "s5"]
    assert len(router) == 7
    assert copies(router, "sport/tennis") == []


def test_mqtt_234_example_2_share_consumer1_slash_finance() -> None:
    router = Router()
    router.subscribe(sub("s1", "$share/consumer1//finance"))
    router.subscribe(sub("s1", "$share/consumer1/sport/tennis/+"))  # a distinct subscription
    assert copies(router, "/finance") == ["share.consumer1//finance"]
    assert copies(router, "finance") == []
    [destination] = router.route("/finance", qos=QoS.AT_MOST_ONCE)
    assert destination.filter == TopicFilter("/finance", "consumer1")
    assert str(destination.filter) == "$share/consumer1//finance"


def test_a_client_with_a_shared_and_a_plain_subscription_gets_two_copies() -> None:
    router = Router()
    router.subscribe(sub("c1", "$share/g/a/#"))
    router.subscribe(sub("c1", "a/+"))
    router.subscribe(sub("c1", "a/b"))  # overlapping plain filters: one copy each (§4.8)
    assert copies(router, "a/b") == ["client.c1/a/+", "client.c1/a/b", "share.g/a/#"]


def test_subscribing_again_replaces_a_plain_subscription() -> None:
    router = Router()
    assert router.subscribe(sub("c1", "a/+", QoS.AT_MOST_ONCE))
    assert not router.subscribe(sub("c1", "a/+", QoS.EXACTLY_ONCE, durable=False))
    assert len(router) == 1
    [destination] = router.route("a/b", qos=QoS.EXACTLY_ONCE)
    assert destination.qos is QoS.EXACTLY_ONCE
    assert not destination.durable
    assert router.subscriptions_of("c1") == [sub("c1", "a/+", QoS.EXACTLY_ONCE, durable=False)]


def test_a_member_joining_again_only_updates_its_qos() -> None:
    router = Router()
    assert router.subscribe(sub("m1", "$share/g/x", QoS.AT_MOST_ONCE))
    assert not router.subscribe(sub("m1", "$share/g/x", QoS.AT_LEAST_ONCE))  # MQTT-234 note 6
    assert len(router) == 1
    assert router.members("g", "x") == ["m1"]
    [destination] = router.route("x", qos=QoS.EXACTLY_ONCE)
    assert destination.qos is QoS.AT_LEAST_ONCE
    assert router.unsubscribe("m1", parse_filter("$share/g/x")) is Unsubscribed.GROUP_ENDED


def test_no_local_skips_the_publishing_session() -> None:
    router = Router()
    router.subscribe(sub("c1", "chat/#", no_local=True))
    router.subscribe(sub("c2", "chat/#"))
    router.subscribe(sub("c1", "$share/g/chat/#"))
    assert copies(router, "chat/room", source="c1") == ["client.c2/chat/#", "share.g/chat/#"]
    assert copies(router, "chat/room", source="c2") == [
        "client.c1/chat/#",
        "client.c2/chat/#",
        "share.g/chat/#",
    ]
    assert copies(router, "chat/room") == copies(router, "chat/room", source="c2")


def test_no_local_on_a_shared_subscription_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="no_local"):
        sub("c1", "$share/g/a", no_local=True)


@pytest.mark.parametrize(
    ("published", "granted", "expected"),
    [(q, g, min(q, g)) for q in QoS for g in QoS],
)
def test_a_plain_copy_goes_at_the_lower_qos(published: QoS, granted: QoS, expected: QoS) -> None:
    router = Router()
    router.subscribe(sub("c1", "t", granted))
    [destination] = router.route("t", qos=published)
    assert destination.qos is QoS(expected)


def test_a_group_copy_goes_at_the_highest_grant_capped_by_the_publish() -> None:
    router = Router()
    router.subscribe(sub("m1", "$share/g/t", QoS.AT_MOST_ONCE))
    router.subscribe(sub("m2", "$share/g/t", QoS.AT_LEAST_ONCE))
    assert router.route("t", qos=QoS.EXACTLY_ONCE)[0].qos is QoS.AT_LEAST_ONCE
    assert router.route("t", qos=QoS.AT_MOST_ONCE)[0].qos is QoS.AT_MOST_ONCE
    router.unsubscribe("m2", parse_filter("$share/g/t"))
    assert router.route("t", qos=QoS.EXACTLY_ONCE)[0].qos is QoS.AT_MOST_ONCE


def test_a_share_group_is_always_durable() -> None:
    router = Router()
    router.subscribe(sub("m1", "$share/g/t", durable=False))
    router.subscribe(sub("c1", "t", durable=False))
    assert [(d.name, d.durable) for d in router.route("t", qos=QoS.AT_LEAST_ONCE)] == [
        ("client.c1/t", False),
        ("share.g/t", True),
    ]


def test_the_last_member_leaving_ends_the_group() -> None:
    router = Router()
    shared = parse_filter("$share/g/t")
    router.subscribe(sub("m1", "$share/g/t"))
    router.subscribe(sub("m2", "$share/g/t"))
    assert router.unsubscribe("m1", shared) is Unsubscribed.REMOVED
    assert router.unsubscribe("m1", shared) is Unsubscribed.NOT_SUBSCRIBED
    assert copies(router, "t") == ["share.g/t"]
    assert router.unsubscribe("m2", shared) is Unsubscribed.GROUP_ENDED
    assert copies(router, "t") == []
    assert router.members("g", "t") == []
    assert len(router) == 0
    assert router.subscribe(sub("m3", "$share/g/t"))  # a new group of the same name


def test_unsubscribed_reads_as_a_bool() -> None:
    assert not Unsubscribed.NOT_SUBSCRIBED
    assert Unsubscribed.REMOVED
    assert Unsubscribed.GROUP_ENDED


def test_unsubscribe_a_plain_subscription() -> None:
    router = Router()
    router.subscribe(sub("c1", "a/+"))
    router.subscribe(sub("c2", "a/+"))
    assert router.unsubscribe("c1", parse_filter("a/+")) is Unsubscribed.REMOVED
    assert not router.unsubscribe("c1", parse_filter("a/+"))
    assert not router.unsubscribe("c1", parse_filter("$share/c1/a/+"))
    assert copies(router, "a/b") == ["client.c2/a/+"]


def test_remove_subscriber_drops_everything_and_reports_ended_groups() -> None:
    router = Router()
    router.subscribe(sub("c1", "a/#"))
    router.subscribe(sub("c1", "$share/alone/a/#"))
    router.subscribe(sub("c1", "$share/busy/a/#"))
    router.subscribe(sub("c2", "$share/busy/a/#"))
    router.subscribe(sub("c2", "a/#"))
    assert router.remove_subscriber("c1") == [
        (parse_filter("a/#"), Unsubscribed.REMOVED),
        (parse_filter("$share/alone/a/#"), Unsubscribed.GROUP_ENDED),
        (parse_filter("$share/busy/a/#"), Unsubscribed.REMOVED),
    ]
    assert router.remove_subscriber("c1") == []
    assert router.subscriptions_of("c1") == []
    assert copies(router, "a/b") == ["client.c2/a/#", "share.busy/a/#"]
    assert len(router) == 2


def test_route_validates_the_topic() -> None:
    router = Router()
    with pytest.raises(InvalidTopic):
        router.route("a/+", qos=QoS.AT_MOST_ONCE)


def test_dollar_topics_and_wildcards() -> None:
    router = Router()
    router.subscribe(sub("c1", "#"))
    router.subscribe(sub("c2", "$SYS/#"))
    router.subscribe(sub("c3", "$share/g/#"))
    assert copies(router, "$SYS/x") == ["client.c2/$SYS/#"]
    assert copies(router, "x") == ["client.c1/#", "share.g/#"]


@pytest.mark.parametrize(
    ("subscriber", "filter", "name"),
    [
        ("c1", "a/+", "client.c1/a/+"),
        ("a/b", "c", "client.a%2Fb/c"),
        ("a", "b/c", "client.a/b/c"),
        ("50%", "x", "client.50%25/x"),
        ("50%2F", "x", "client.50%252F/x"),
    ],
)
def test_destination_names_never_collide(subscriber: str, filter: str, name: str) -> None:
    assert destination_name(parse_filter(filter), subscriber) == name


def test_destination_name_needs_a_subscriber_for_a_plain_filter() -> None:
    assert destination_name(parse_filter("$share/g/a")) == "share.g/a"
    with pytest.raises(InvalidArgument):
        destination_name(parse_filter("a"))


MEMBERS = st.sampled_from(["c1", "c2", "c/3"])
FILTER_TEXTS = st.sampled_from(
    ["a/+", "a/#", "+/b", "a/b", "$share/g/a/+", "$share/h/#", "$share/g/+/b"]
)
OPS = st.lists(st.tuples(st.booleans(), MEMBERS, FILTER_TEXTS, st.sampled_from(QoS)), max_size=30)


@given(OPS, st.sampled_from(["a/b", "a/c", "x/b", "a"]), st.sampled_from(QoS))
def test_route_agrees_with_a_naive_model(
    ops: list[tuple[bool, str, str, QoS]], topic: str, published: QoS
) -> None:
    router = Router()
    model: dict[tuple[str, TopicFilter], QoS] = {}
    for add, member, text, qos in ops:
        filter = parse_filter(text)
        if add:
            router.subscribe(Subscription(ConsumerId(member), filter, qos))
            model[member, filter] = qos
        else:
            router.unsubscribe(member, filter)
            model.pop((member, filter), None)
    assert len(router) == len(model)
    expected: dict[str, Destination] = {}
    for (member, filter), granted in model.items():
        if not matches(filter.filter, topic):
            continue
        name = destination_name(filter, member)
        old = expected.get(name)
        qos = min(published, max(granted, old.qos if old else QoS.AT_MOST_ONCE))
        subscriber = None if filter.shared else ConsumerId(member)
        expected[name] = Destination(name, filter, filter.shared, QoS(qos), True, subscriber)
    assert router.route(topic, qos=published) == sorted(expected.values(), key=lambda d: d.name)
