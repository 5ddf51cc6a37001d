"""SubscriptionTree: the filter trie agrees with the reference matcher and stays small."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.subscriptions import SubscriptionTree
from boxmq.core.topics import matches, validate_filter
from boxmq.errors import InvalidTopic

LEVELS = ["", "a", "b", "$SYS"]


def _join(levels: list[str]) -> str:
    return "/".join(levels)


TOPICS = st.lists(st.sampled_from(LEVELS), min_size=1, max_size=4).map(_join).filter(bool)
FILTERS = st.builds(
    lambda levels, hash_: _join([*levels, "#"] if hash_ else levels) or "#",
    st.lists(st.sampled_from([*LEVELS, "+"]), max_size=4),
    st.booleans(),
)
SUBSCRIPTIONS = st.lists(st.tuples(FILTERS, st.integers(0, 3)), max_size=25)


@given(SUBSCRIPTIONS, st.lists(TOPICS, min_size=1, max_size=5))
def test_match_agrees_with_the_reference_matcher(
    subscriptions: list[tuple[str, int]], topics: list[str]
) -> None:
    tree: SubscriptionTree[int] = SubscriptionTree()
    for filter, key in subscriptions:
        tree.add(validate_filter(filter), key)
    for topic in topics:
        assert tree.match(topic) == {k for f, k in subscriptions if matches(f, topic)}


@given(SUBSCRIPTIONS, st.data())
def test_remove_undoes_add_and_prunes(
    subscriptions: list[tuple[str, int]], data: st.DataObject
) -> None:
    tree: SubscriptionTree[int] = SubscriptionTree()
    added = {pair for pair in subscriptions if tree.add(*pair)}
    assert added == set(subscriptions)
    assert len(tree) == len(added)
    assert sorted(tree.filters()) == sorted(added)
    gone = data.draw(st.sets(st.sampled_from(sorted(added)))) if added else set()
    for pair in gone:
        assert tree.remove(*pair)
        assert not tree.remove(*pair)
    kept = added - gone
    assert len(tree) == len(kept)
    assert sorted(tree.filters()) == sorted(kept)
    topic = data.draw(TOPICS)
    assert tree.match(topic) == {k for f, k in kept if matches(f, topic)}
    for pair in kept:
        tree.remove(*pair)
    assert tree._root.empty()  # every node was pruned


def test_add_is_idempotent_and_validates() -> None:
    tree: SubscriptionTree[str] = SubscriptionTree()
    assert tree.add("a/+", "k")
    assert not tree.add("a/+", "k")
    assert tree.add("a/+", "j")
    assert len(tree) == 2
    with pytest.raises(InvalidTopic):
        tree.add("a/#/b", "k")
    assert len(tree) == 2


def test_remove_of_unknown_filter_or_key() -> None:
    tree: SubscriptionTree[str] = SubscriptionTree()
    tree.add("a/b", "k")
    assert not tree.remove("a/c", "k")
    assert not tree.remove("a", "k")
    assert not tree.remove("a/b", "j")
    assert tree.remove("a/b", "k")
    assert list(tree.filters()) == []


def test_dollar_topics_are_not_matched_by_a_leading_wildcard() -> None:
    tree: SubscriptionTree[str] = SubscriptionTree()
    for filter in ["#", "+/monitor/Clients", "$SYS/#", "$SYS/monitor/+", "+/#"]:
        tree.add(filter, filter)
    assert tree.match("$SYS/monitor/Clients") == {"$SYS/#", "$SYS/monitor/+"}
    assert tree.match("x/monitor/Clients") == {"#", "+/monitor/Clients", "+/#"}


def test_match_does_not_visit_unrelated_branches() -> None:
    tree: SubscriptionTree[int] = SubscriptionTree()
    for i in range(5_000):
        tree.add(f"devices/{i}/temperature", i)
        tree.add(f"other/{i}/+", i)
    tree.add("devices/+/temperature", -1)
    tree.add("devices/#", -2)
    assert tree.match("devices/42/temperature") == {42, -1, -2}
    # root, devices, devices/42, devices/+, and one 'temperature' under each
    assert tree.visits == 6
    assert tree.match("nothing/here") == set()
    assert tree.visits == 1


def test_match_cost_follows_matches_not_size() -> None:
    small: SubscriptionTree[int] = SubscriptionTree()
    large: SubscriptionTree[int] = SubscriptionTree()
    for tree, count in ((small, 10), (large, 10_000)):
        for i in range(count):
            tree.add(f"t/{i}", i)
            tree.add(f"{i}/#", i)
    assert small.match("t/7") == large.match("t/7") == {7}
    assert small.visits == large.visits


def test_filters_lists_every_pair() -> None:
    tree: SubscriptionTree[str] = SubscriptionTree()
    pairs = [("a/b", "1"), ("a/b", "2"), ("a", "3"), ("#", "4"), ("/x", "5")]
    for pair in pairs:
        tree.add(*pair)
    assert sorted(tree.filters()) == sorted(pairs)
