"""The filters a session holds, as `max_subscriptions` counts them (session.py)."""

from __future__ import annotations

from boxmq.mqtt.session import Session, SubscriptionOptions

_OPTIONS = SubscriptionOptions(qos=1, durable=True)


def _session() -> Session:
    return Session("c", window=10, queue_limit=10)


def test_a_session_holds_its_subscriptions_share_groups_included() -> None:
    session = _session()
    assert session.held_count() == 0
    assert not session.holds("a/#")
    session.subscriptions["a/#"] = _OPTIONS
    session.subscriptions["$share/g/a/#"] = _OPTIONS  # another filter than a/#: counted too
    assert session.held_count() == 2
    assert session.holds("a/#")
    assert session.holds("$share/g/a/#")
    assert not session.holds("$share/h/a/#")
    assert not session.holds("a/+")


def test_a_share_group_it_is_leaving_and_a_filter_it_is_adding_are_held_too() -> None:
    """A membership left while it holds messages is still a dropbox of the session, and a
    filter whose disk work is not done yet will be one: both count, and subscribing to either
    again adds nothing."""
    session = _session()
    session.subscriptions["a"] = _OPTIONS
    session.leaving["$share/g/b"] = _OPTIONS
    session.adding.add("c")
    assert session.held_count() == 3
    assert all(session.holds(text) for text in ("a", "$share/g/b", "c"))
    assert not session.holds("d")
