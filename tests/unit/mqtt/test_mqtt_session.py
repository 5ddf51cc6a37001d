"""The filters a session holds, as `max_subscriptions` counts them, and the QoS 2 messages
sessions hold until their PUBRELs, as the exactly-once totals count them (session.py)."""

from __future__ import annotations

from boxmq.mqtt.packets import Publish
from boxmq.mqtt.session import HeldTotals, Session, SubscriptionOptions

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
    session.adding = {"c"}
    assert session.held_count() == 3
    assert all(session.holds(text) for text in ("a", "$share/g/b", "c"))
    assert not session.holds("d")


def test_the_totals_count_what_every_live_session_holds_until_its_pubrel() -> None:
    """A repeat replaces its PUBLISH (its bytes, not its count); a PUBREL takes it out; a
    session's end takes out what it still holds, and what it holds after counts no more. A
    message weighs its payload, its topic ("t": 1 byte) and its properties."""
    totals = HeldTotals()
    one = Session("one", window=10, queue_limit=10, totals=totals)
    two = Session("two", window=10, queue_limit=10, totals=totals)
    one.hold_for_release(1, Publish("t", b"12345", 2))
    one.hold_for_release(1, Publish("t", b"123", 2))  # a repeat
    one.hold_for_release(2, None, stored=True)  # known by its id only (after a restart)
    two.hold_for_release(1, Publish("t", b"1234567", 2))
    assert (totals.count, totals.held_bytes) == (3, 12)
    assert one.release(1) is not None
    assert one.release(1) is None  # released before: nothing more to take out
    assert (totals.count, totals.held_bytes) == (2, 8)
    two.stop_counting()
    assert (totals.count, totals.held_bytes) == (1, 0)
    two.hold_for_release(2, Publish("t", b"late", 2))  # its last read's, after its end
    assert two.release(1) is not None
    assert (totals.count, totals.held_bytes) == (1, 0)
    assert (two.held_bytes, len(two.awaiting_release)) == (5, 1)
