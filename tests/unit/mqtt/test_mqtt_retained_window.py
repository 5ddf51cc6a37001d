"""What the routing of a retained message leaves out: the subscriptions sent it, or a later
one of its topic, as retained while it was in flight (retained_window.py)."""

from __future__ import annotations

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
