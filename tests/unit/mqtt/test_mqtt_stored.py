"""MQTT messages as files and back: names, properties, expiry."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from boxmq.model import Envelope, MessageId, Property, PropertyType
from boxmq.mqtt.packets import Publish
from boxmq.mqtt.properties import Properties, PropertyId
from boxmq.mqtt.session import SubscriptionOptions
from boxmq.mqtt.stored import V5_PROPERTIES, consumer_name, kept_properties, retained_publish
from boxmq.store.names import check_consumer_name


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_client_ids_become_distinct_names_without_a_slash(a: str, b: str) -> None:
    assert "/" not in consumer_name(a)
    assert (consumer_name(a) == consumer_name(b)) == (a == b)


def test_a_client_id_with_a_slash_is_a_valid_subscriber_name() -> None:
    assert check_consumer_name(consumer_name("site/7%")) == "site%2F7%25"


def _envelope(kept: dict[str, str], expiration: int = 0) -> Envelope:
    props = tuple(Property(k, PropertyType.STRING, v) for k, v in kept.items())
    topic = Property("bx_topic", PropertyType.STRING, "t")
    return Envelope(MessageId("m"), expiration=expiration, properties=(topic, *props))


_MQTT_TEXT = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=8)  # §1.5.4


@given(
    st.lists(st.tuples(_MQTT_TEXT, _MQTT_TEXT), max_size=3),
    st.none() | _MQTT_TEXT,
    st.none() | st.binary(max_size=10),
)
def test_v5_properties_round_trip_through_the_envelope(
    user: list[tuple[str, str]], content_type: str | None, correlation: bytes | None
) -> None:
    props = Properties.build(
        user_properties=user, content_type=content_type, correlation_data=correlation, topic_alias=3
    )
    kept = kept_properties(Publish("t", b"", 1, packet_id=1, properties=props))
    back = retained_publish(_envelope(kept), b"", SubscriptionOptions(qos=1, durable=True), now=0)
    assert back.properties == props.without(PropertyId.TOPIC_ALIAS)  # the alias was ours
    assert (V5_PROPERTIES in kept) == bool(
        user or content_type is not None or correlation is not None
    )


def test_what_is_left_of_the_expiry_is_sent_on() -> None:
    kept = kept_properties(
        Publish("t", b"", 1, packet_id=1, properties=Properties.build(message_expiry_interval=60))
    )
    envelope = _envelope(kept, expiration=1_000_060_000)  # epoch ms: 60 s after now=1_000_000
    back = retained_publish(
        envelope, b"", SubscriptionOptions(qos=1, durable=True), now=1_000_045.5
    )
    assert back.properties.message_expiry_interval == 15  # rounded up, never 0
