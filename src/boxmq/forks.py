"""State that belongs to one process, and what a forked child does with what it inherits.

A fork copies every object of the parent into the child: a random generator that would give
both the same ids, a thread the child does not have, a lock another thread held at the fork
(held for ever in the child), files the parent writes into. Each holder of such state
registers here, and is told to renew it in the child, before the child runs anything else.
Only weak references are kept: a fork hook cannot be removed, and must not keep a closed
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


_holders: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def renew_in_children(holder: ForkAware) -> None:
    """Have `holder.renew_in_child()` called in every child forked from now on."""
    _holders.add(holder)


def _renew_all() -> None:
    for holder in list(_holders):
        holder.renew_in_child()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_renew_all)
