"""covers/overlaps against brute force over the reference matcher `topics.matches`."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmq.core.filter_relations import covers, overlaps
from boxmq.core.topics import matches

# Level words: two plain ones, an empty level and a $-word (MQTT 5.0 §4.7.2 treats '$' apart).
WORDS = ("a", "b", "", "$s")
MAX_LEVELS = 4


def _topics() -> list[str]:
    """Every topic of up to MAX_LEVELS + 1 levels over WORDS: deep enough that a filter of
    MAX_LEVELS levels ending in '#' is told apart from one ending in '+'."""
    found: list[str] = []
    for depth in range(1, MAX_LEVELS + 2):
        found.extend("/".join(levels) for levels in itertools.product(WORDS, repeat=depth))
    return found


TOPICS = _topics()


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.sampled_from((*WORDS, "+")), min_size=1, max_size=MAX_LEVELS))
    if draw(st.booleans()):
        levels = [*levels[:-1], "#"] if draw(st.booleans()) else [*levels, "#"]
    return "/".join(levels[:MAX_LEVELS])


def _covers_by_brute_force(outer: str, inner: str) -> bool:
    return all(matches(outer, t) for t in TOPICS if matches(inner, t))


def _overlaps_by_brute_force(a: str, b: str) -> bool:
    return any(matches(a, t) and matches(b, t) for t in TOPICS)


@settings(max_examples=300)  # cheap, and the corners are few: '#' at the first level, '$'
@given(filters(), filters())
def test_covers_agrees_with_brute_force(outer: str, inner: str) -> None:
    assert covers(outer, inner) == _covers_by_brute_force(outer, inner)


@settings(max_examples=300)
@given(filters(), filters())
def test_overlaps_agrees_with_brute_force_and_is_symmetric(a: str, b: str) -> None:
    assert overlaps(a, b) == _overlaps_by_brute_force(a, b) == overlaps(b, a)


@given(filters())
def test_a_filter_covers_and_overlaps_itself(text: str) -> None:
    assert covers(text, text)
    assert overlaps(text, text)


@pytest.mark.parametrize(
    ("outer", "inner", "expected"),
    [
        ("a/#", "a", True),  # '#' matches its parent level
        ("a/#", "a/+/c", True),
        ("a/+", "a/#", False),  # a/# also means a/b/c
        ("a/+/#", "a/#", False),  # a/# matches "a", a/+/# does not
        ("#", "$SYS/#", False),  # §4.7.2
        ("$SYS/#", "$SYS/broker/+", True),
        ("a/b", "a/+", False),
        ("+/#", "#", True),  # every topic has a first level; '#' also takes its parent
    ],
)
def test_covers_examples(outer: str, inner: str, expected: bool) -> None:
    assert covers(outer, inner) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("secret/#", "#", True),
        ("secret/#", "+/x", True),
        ("secret/#", "public/#", False),
        ("#", "$SYS/x", False),
        ("a", "a/#", True),
        ("a/b", "a/b/c", False),
    ],
)
def test_overlaps_examples(a: str, b: str, expected: bool) -> None:
    assert overlaps(a, b) is expected
