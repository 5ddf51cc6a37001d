"""Relations between two topic filters, decided level by level without listing topics.

Both take valid filters proper (no "$share/<group>/" prefix; see `topics.parse_filter`) and
answer in terms of the reference matcher `topics.matches` over every possible topic name:

- `covers(outer, inner)`: every topic that `inner` matches, `outer` matches too. An ACL rule
  allows a subscription only if it covers it (a `read a/+` rule must not let `a/#` through).
- `overlaps(a, b)`: some topic is matched by both. A `deny` rule refuses every subscription it
  overlaps, since the subscription could otherwise receive a denied topic.

The §4.7.2 rule counts: a filter whose first level is a wildcard matches no topic that starts
with '$', so `#` does not cover `$SYS/x`. Tests compare both with brute force over `matches`.
"""

from __future__ import annotations

__all__ = ["covers", "overlaps"]

_ONE_LEVEL = "+"
_ALL_BELOW = "#"


def _wildcard(level: str) -> bool:
    return level in (_ONE_LEVEL, _ALL_BELOW)


def covers(outer: str, inner: str) -> bool:
    """Whether every topic matched by `inner` is matched by `outer`."""
    wide, narrow = outer.split("/"), inner.split("/")
    if _wildcard(wide[0]) and narrow[0].startswith("$"):
        return False  # `inner` matches $-topics, which `outer` never does (MQTT 5.0 §4.7.2)
    for index, level in enumerate(narrow):
        if index >= len(wide):
            return False  # `inner` asks for a deeper level than `outer` has
        if wide[index] == _ALL_BELOW:
            return True
        if level == _ALL_BELOW:
            # `inner` takes every depth from here on, and (below the first level) its parent
            # too. Only '#' does the same, except at the first level: there is no level above
            # it, so "+/#" (one level or more) takes all that "#" does.
            return index == 0 and wide == [_ONE_LEVEL, _ALL_BELOW]
        if wide[index] == _ONE_LEVEL:
            continue
        if level == _ONE_LEVEL or level != wide[index]:
            return False
    # Same depth, or `outer` ends in one '#' more, which also matches its parent level (§4.7.1.2).
    return len(wide) == len(narrow) or (len(wide) == len(narrow) + 1 and wide[-1] == _ALL_BELOW)


def overlaps(a: str, b: str) -> bool:
    """Whether at least one topic name is matched by both filters."""
    first, second = a.split("/"), b.split("/")
    for one, other in ((first, second), (second, first)):
        if _wildcard(one[0]) and not _wildcard(other[0]) and other[0].startswith("$"):
            return False  # one matches only $-topics, the other none of them (§4.7.2)
    for index in range(max(len(first), len(second))):
        x = first[index] if index < len(first) else None
        y = second[index] if index < len(second) else None
        if _ALL_BELOW in (x, y):
            return True  # '#' takes this level and below, or none (its parent level)
        if x is None or y is None:
            return False  # different depths, and no '#' to make up for it
        if not (x == y or _ONE_LEVEL in (x, y)):
            return False
    return True
