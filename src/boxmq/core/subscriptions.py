"""A trie of topic filters, one level per node, for finding who matches a topic.

Invariants:
- Every node but the root holds at least one key or one child: `remove` prunes what it empties.
- `len(tree)` is the number of (filter, key) pairs; a pair is stored at most once.
- `match(topic)` only follows the children that can match the next level (the level itself,
  '+' and '#'), so its cost grows with the topic's depth and the matching entries, never with
  the number of subscriptions. It agrees with `topics.matches`, the '$' rule included.
- Keys are kept in insertion order, so `filters()` is deterministic.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from boxmq.core.topics import validate_filter

__all__ = ["SubscriptionTree"]

K = TypeVar("K", bound=Hashable)

_SEPARATOR = "/"
_ONE_LEVEL = "+"
_ALL_BELOW = "#"


class _Node(Generic[K]):
    __slots__ = ("children", "keys")

    def __init__(self) -> None:
        self.children: dict[str, _Node[K]] = {}
        self.keys: dict[K, None] = {}  # the filters that end here; a dict keeps the order

    def empty(self) -> bool:
        return not self.children and not self.keys


class SubscriptionTree(Generic[K]):
    """Topic filters, each with any number of keys (e.g. subscription ids)."""

    def __init__(self) -> None:
        self._root: _Node[K] = _Node()
        self._size = 0
        self.visits = 0  # nodes the last `match` looked at (a debug counter for tests)

    def __len__(self) -> int:
        return self._size

    def add(self, filter: str, key: K) -> bool:
        """Add `key` under `filter` (InvalidTopic if the filter is not valid); True if new."""
        node = self._root
        for level in validate_filter(filter).split(_SEPARATOR):
            node = node.children.setdefault(level, _Node())
        if key in node.keys:
            return False
        node.keys[key] = None
        self._size += 1
        return True

    def remove(self, filter: str, key: K) -> bool:
        """Remove `key` from `filter` and prune the nodes left empty; True if it was there."""
        path: list[tuple[_Node[K], str]] = []
        node = self._root
        for level in filter.split(_SEPARATOR):
            child = node.children.get(level)
            if child is None:
                return False
            path.append((node, level))
            node = child
        if key not in node.keys:
            return False
        del node.keys[key]
        self._size -= 1
        for parent, level in reversed(path):
            if not parent.children[level].empty():
                break
            del parent.children[level]
        return True

    def match(self, topic: str) -> set[K]:
        """The keys of every filter that matches the topic name (MQTT 5.0 §4.7).

        The topic is taken as valid (the Router validates it before routing).
        """
        levels = topic.split(_SEPARATOR)
        dollar = topic.startswith("$")  # MQTT 5.0 §4.7.2: no wildcard at the first level
        found: set[K] = set()
        self.visits = 0
        stack = [(self._root, 0)]
        while stack:
            node, depth = stack.pop()
            self.visits += 1
            wildcards = not (dollar and depth == 0)
            everything = node.children.get(_ALL_BELOW)
            if everything is not None and wildcards:
                found.update(everything.keys)  # §4.7.1.2: '#' also matches the parent level
            if depth == len(levels):
                found.update(node.keys)
                continue
            exact = node.children.get(levels[depth])
            if exact is not None:
                stack.append((exact, depth + 1))
            one = node.children.get(_ONE_LEVEL)
            if one is not None and wildcards:
                stack.append((one, depth + 1))
        return found

    def filters(self) -> Iterator[tuple[str, K]]:
        """Every (filter, key) pair, depth first."""
        stack: list[tuple[_Node[K], tuple[str, ...]]] = [(self._root, ())]
        while stack:
            node, levels = stack.pop()
            for key in node.keys:
                yield _SEPARATOR.join(levels), key
            for level, child in reversed(node.children.items()):
                stack.append((child, (*levels, level)))
