"""Topic names, filters, `$share/` parsing and the reference matcher (MQTT 5.0 §4.7, §4.8.2)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.topics import (
    TopicFilter,
    matcher,
    matches,
    parse_filter,
    validate_filter,
    validate_topic,
)
from boxmq.errors import InvalidArgument, InvalidTopic

# (filter, topic, matches?) — the examples of MQTT 5.0 §4.7.1 and §4.7.2, and a few more.
MATCHES = [
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/tennis/player1/#", "sport/tennis/player2", False),
    ("sport/#", "sport", True),
    ("sport/#", "sports", False),
    ("#", "sport", True),
    ("#", "/", True),
    ("#", "a/b/c", True),
    ("#", "$SYS/x", False),
    ("+", "finance", True),
    ("+", "/finance", False),
    ("/+", "/finance", True),
    ("+/+", "/finance", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/tennis/#", "sport/tennis", True),
    ("sport/+/player1", "sport/tennis/player1", True),
    ("sport/+/player1", "sport/tennis/player2", False),
    ("a//b", "a//b", True),
    ("a/+/b", "a//b", True),
    ("Sport", "sport", False),  # §4.7.3: case-sensitive
    ("$SYS/#", "$SYS/x", True),
    ("$SYS/#", "$SYS", True),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("$share/#", "$share/x", True),
    ("a/$b/+", "a/$b/c", True),  # '$' only matters at the first level
]


@pytest.mark.parametrize(("filter", "topic", "expected"), MATCHES)
def test_matches_the_spec_examples(filter: str, topic: str, expected: bool) -> None:
    validate_filter(filter)
    validate_topic(topic)
    assert matches(filter, topic) is expected
    assert matcher(filter)(topic) is expected


@pytest.mark.parametrize(
    "name", ["a", "/", "a/b", "/finance", "sport/", "$SYS/x", "a b/c", "ü/€", "x" * 65_535]
)
def test_valid_topic_names(name: str) -> None:
    assert validate_topic(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "at least one character"),
        ("a\x00b", "NUL"),
        ("a/+", "wildcards"),
        ("a/#", "wildcards"),
        ("a+b", "wildcards"),
        ("x" * 65_536, "limit is 65535"),
        ("€" * 21_846, "65538 bytes"),
        ("\ud800", "UTF-8"),
    ],
)
def test_invalid_topic_names(name: str, why: str) -> None:
    with pytest.raises(InvalidTopic, match=why):
        validate_topic(name)


@pytest.mark.parametrize(
    "filter", ["#", "+", "a/#", "+/+", "/+", "a/+/b/#", "+/#", "//", "$SYS/#", "a" * 65_535]
)
def test_valid_filters(filter: str) -> None:
    assert validate_filter(filter) == filter


@pytest.mark.parametrize(
    ("filter", "why"),
    [
        ("", "at least one character"),
        ("a/\x00", "NUL"),
        ("a/#/b", "'#' must be alone in the last level"),
        ("#/a", "'#' must be alone in the last level"),
        ("a#", "'#' must be alone in the last level"),
        ("a/b#", "'#' must be alone in the last level"),
        ("a+", "'\\+' must fill a whole level"),
        ("a/+b/c", "'\\+' must fill a whole level"),
        ("++", "'\\+' must fill a whole level"),
        ("a" * 65_536, "limit"),
        ("a/\udfff", "UTF-8"),
    ],
)
def test_invalid_filters(filter: str, why: str) -> None:
    with pytest.raises(InvalidTopic, match=why):
        validate_filter(filter)


@pytest.mark.parametrize(
    ("check", "text", "said"),
    [
        (validate_topic, "a\x00b", "topic name 'a\\x00b' must not contain NUL (U+0000)"),
        (validate_filter, "a/\x00", "topic filter 'a/\\x00' must not contain NUL (U+0000)"),
        (validate_topic, "a/\udcff", "topic name 'a/\\udcff' must be well-formed UTF-8"),
        (validate_filter, "a/\udcff/#", "topic filter 'a/\\udcff/#' must be well-formed UTF-8"),
    ],
)
def test_a_refused_character_names_the_topic_or_filter(
    check: Callable[[str], str], text: str, said: str
) -> None:
    """A NUL or a byte that is not UTF-8 (a script's argument, read with surrogate escapes)
    was refused without the topic (`a topic name must be well-formed UTF-8`): of a batch, the
    caller could not tell which. Named now, as a wildcard's refusal names it."""
    with pytest.raises(InvalidTopic) as refused:
        check(text)
    assert str(refused.value).startswith(said), refused.value


def test_invalid_topic_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        validate_topic("")


@pytest.mark.parametrize(
    ("text", "group", "filter"),
    [
        ("a/+", None, "a/+"),
        ("$share", None, "$share"),  # no '/': an ordinary filter
        ("$shared/g/x", None, "$shared/g/x"),
        ("$share/consumer1/sport/tennis/+", "consumer1", "sport/tennis/+"),
        ("$share/consumer1//finance", "consumer1", "/finance"),  # MQTT-234 example 2
        ("$share/g/#", "g", "#"),
        ("$share/g/$SYS/#", "g", "$SYS/#"),
        ("$share/g/$share/x", "g", "$share/x"),
        ("$share/$g/a", "$g", "a"),
    ],
)
def test_parse_filter(text: str, group: str | None, filter: str) -> None:
    parsed = parse_filter(text)
    assert parsed == TopicFilter(filter, group)
    assert parsed.shared is (group is not None)
    assert str(parsed) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("$share/g", "followed by '/' and a topic filter"),
        ("$share/", "share name .* must not be empty"),
        ("$share//x", "share name .* must not be empty"),
        ("$share/g/", "needs a topic filter"),
        ("$share/a+b/x", "must not contain '/', '\\+' or '#'"),
        ("$share/a#/x", "must not contain '/', '\\+' or '#'"),
        ("$share/#/x", "must not contain '/', '\\+' or '#'"),
        ("$share/g/a/#/b", "'#' must be alone"),
        ("$share/g\x00/x", "NUL"),
        ("$share/g/" + "a" * 65_530, "limit is 65535"),
        ("", "at least one character"),
        ("a/b+", "whole level"),
    ],
)
def test_parse_filter_refuses(text: str, why: str) -> None:
    with pytest.raises(InvalidTopic, match=why):
        parse_filter(text)


def test_share_consumer1_slash_finance_matches_slash_finance() -> None:
    parsed = parse_filter("$share/consumer1//finance")
    assert matches(parsed.filter, "/finance")
    assert not matches(parsed.filter, "finance")


def test_topic_filter_is_checked_on_construction() -> None:
    with pytest.raises(InvalidTopic):
        TopicFilter("a/#/b")
    with pytest.raises(InvalidTopic):
        TopicFilter("a", "g/h")
    with pytest.raises(InvalidTopic):
        TopicFilter("a", "")
    with pytest.raises(InvalidTopic, match="use parse_filter"):
        TopicFilter("$share/g/a")  # str() would read back as shared


LEVEL = st.sampled_from(["", "a", "b", "$SYS", "ü"])
WILD = st.sampled_from(["", "a", "b", "$SYS", "+"])


def _topic(levels: list[str]) -> str:
    return "/".join(levels)


@given(st.lists(LEVEL, min_size=1, max_size=5).map(_topic).filter(bool))
def test_a_topic_matches_itself_and_hash(topic: str) -> None:
    assert matches(topic, topic)
    assert matches("#", topic) is not topic.startswith("$")
    assert matches(topic + "/#", topic)


@given(st.lists(WILD, min_size=1, max_size=4), st.booleans(), st.text(max_size=8))
def test_every_filter_round_trips(levels: list[str], hash_: bool, group: str) -> None:
    filter = _topic([*levels, "#"] if hash_ else levels)
    if not filter:
        return
    plain = parse_filter(validate_filter(filter))
    assert parse_filter(str(plain)) == plain
    try:
        shared = TopicFilter(filter, group)
    except InvalidTopic:
        return
    assert parse_filter(str(shared)) == shared


# Levels that a regular expression would take for something else, and '$' first or not.
TRICKY = ["", "a", "$SYS", "$", ".", "a.b", "*", "[a]", "\\", "\n", "ü"]


@given(
    st.lists(st.sampled_from([*TRICKY, "+"]), max_size=4),
    st.booleans(),
    st.lists(st.lists(st.sampled_from(TRICKY), min_size=1, max_size=5).map(_topic), max_size=8),
)
def test_matcher_agrees_with_the_reference_matcher(
    levels: list[str], hash_: bool, topics: list[str]
) -> None:
    filter = _topic([*levels, "#"] if hash_ else levels) or "#"
    compiled = matcher(validate_filter(filter))
    for topic in filter.replace("+", "x").replace("#", "y"), *topics:
        if topic:
            assert compiled(topic) is matches(filter, topic), (filter, topic)
