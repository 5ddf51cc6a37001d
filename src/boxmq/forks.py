"""State that belongs to one process, and what a forked child does with what it inherits.

A fork copies every object of the parent into the child: a random generator that would give
both the same ids, a thread the child does not have, a lock another thread held at the fork
(held for ever in the child), files the parent writes into. Each holder of such state
registers here, and is told to renew it in the child, before the child runs anything else.
What others use as they renew (the process's inotify instance, whose lock a box's watchers
take to close) registers `first`: it is renewed before them, whatever the order they were
made in (a set has none: a box renewed before the instance waited in the child on a lock a
thread of the parent held at the fork, or let go of the parent's watches). Only weak
references are kept: a fork hook cannot be removed, and must not keep a closed
box alive.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["ForkAware", "renew_in_children"]


class ForkAware(Protocol):
    def renew_in_child(self) -> None:
        """Called in a forked child: make what belongs to the parent this process's own."""


_first: weakref.WeakSet[ForkAware] = weakref.WeakSet()
_holders: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def renew_in_children(holder: ForkAware, *, first: bool = False) -> None:
    """Have `holder.renew_in_child()` called in every child forked from now on; `first`
    before every holder registered without it."""
    (_first if first else _holders).add(holder)


def _renew_all() -> None:
    for holders in (_first, _holders):
        for holder in list(holders):
            holder.renew_in_child()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_renew_all)
