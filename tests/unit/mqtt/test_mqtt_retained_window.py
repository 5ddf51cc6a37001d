"""What the routing of a retained message leaves out: the subscriptions sent it, or a later
one of its topic, as retained while it was in flight (retained_window.py)."""

from __future__ import annotations

from boxmq.core import matcher
from boxmq.mqtt.retained_window import RetainedWindow, Written

A, B = object(), object()  # two sessions


def test_nothing_is_recorded_for_a_topic_with_nothing_in_flight() -> None:
    window = RetainedWindow()
    window.sent("t", A, "t/#", "id0")
    window.taken("t", 1)
    assert window.routed("t", Written(1, "id0")) == set()


def test_the_subscription_sent_the_message_as_retained_is_left_out_of_its_routing() -> None:
    window = RetainedWindow()
    window.taken("t", 1)
    window.sent("t", A, "t/#", "id1")  # the store took it before the loop routed it
    window.sent("t", A, "#", "old")  # another filter of the session, sent the one before
    window.sent("t", B, "t/#", "old")
    assert window.routed("t", Written(1, "id1")) == {(A, "t/#")}


def test_a_subscription_sent_a_later_message_is_left_out_of_an_earlier_ones_routing() -> None:
    window = RetainedWindow()
    window.taken("t", 1)
    window.taken("t", 2)
    window.sent("t", A, "t/#", "id2")  # the later one's write came first
    assert window.routed("t", Written(2, "id2")) == {(A, "t/#")}
    assert window.routed("t", Written(1, "id1")) == {(A, "t/#")}  # superseded, and older


def test_an_unknown_message_sent_as_retained_is_taken_as_older() -> None:
    window = RetainedWindow()
    window.taken("t", 5)
    window.sent("t", A, "t/#", "from-before")  # retained before this process, say
    assert window.routed("t", Written(5, "id5")) == set()


def test_the_records_of_a_topic_go_once_nothing_of_it_is_in_flight() -> None:
    window = RetainedWindow()
    window.taken("t", 1)
    window.sent("t", A, "t/#", "id1")
    window.dropped("t", 1)  # its write failed
    window.taken("t", 2)
    assert window.routed("t", Written(2, "id1")) == set()  # the record went with it
    window.taken("u", 3)
    window.sent("u", A, "u", "id3")
    assert window.routed("u", Written(3, None)) == set()  # a write that told no id
    assert window.routed("u", Written(3, "id3")) == set()  # routed already: nothing kept


def test_a_message_of_a_topic_not_known_yet_is_left_out_where_it_was_sent_retained() -> None:
    window = RetainedWindow()
    window.taken(None, 1)  # a PUBREL after a restart: its message is read from disk
    window.sent("t", A, "t/#", "id1")  # its write replaced the retained one, then a SUBSCRIBE
    window.sent("t", B, "t/#", "old")
    assert window.routed("t", Written(1, "id1")) == {(A, "t/#")}


def test_the_records_kept_for_a_message_of_no_topic_yet_go_once_it_is_not_retained() -> None:
    window = RetainedWindow()
    window.taken(None, 1)
    window.taken("u", 2)
    window.sent("t", A, "t", "id0")
    window.sent("u", A, "u", "id2")
    window.dropped(None, 1)  # no retained message after all
    window.taken("t", 3)
    assert window.routed("t", Written(3, "id0")) == set()  # the record went with it
    assert window.routed("u", Written(2, "id2")) == {(A, "u")}  # u's is kept for its own


def test_a_subscribe_waits_for_the_messages_under_way_it_matches_and_not_for_later_ones() -> None:
    window = RetainedWindow()
    assert window.under_way([matcher("a/#")]) == set()  # nothing in flight: nothing to wait
    window.taken("a/1", 1)
    window.taken("b/1", 2)
    window.taken(None, 3)  # a PUBREL's message after a restart: its topic not known yet
    under_way = window.under_way([matcher("a/#"), matcher("c")])
    assert under_way == {1, 3}
    done: list[str] = []
    window.when_done(under_way, lambda: done.append("go"))
    window.taken("a/1", 4)  # came after the SUBSCRIBE: not waited for
    window.routed("a/1", Written(1, "id1"))
    window.routed("b/1", Written(2, "id2"))
    assert done == []
    window.dropped(None, 3)  # it was no retained message
    assert done == ["go"]
    window.routed("a/1", Written(4, "id4"))
    assert done == ["go"]  # once


def test_a_wait_for_nothing_goes_on_at_once() -> None:
    done: list[str] = []
    RetainedWindow().when_done(set(), lambda: done.append("go"))
    assert done == ["go"]
