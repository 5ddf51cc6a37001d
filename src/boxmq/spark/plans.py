"""Batch plans: which ready message gets which claim number, on disk before Spark logs a batch.

The stream's driver decides a micro-batch's members (a listing and a sort, cheap) and writes
them here; the tasks then make the claims (the renames target/ → processing/) themselves, on
every executor core, before they read. A plan is what makes that replayable: a task retried,
or a batch replayed after the driver died, finds each planned message either still in target/
(it claims it now) or in processing/ under the locked name the plan gives it (an earlier
attempt claimed it), and reads exactly that; one rename decides, so two attempts never both
claim one file. A message another consumer took first is in neither place and is skipped by
every attempt alike.

One file per planning step, `<stream>/plans/<first number, 20 digits>.json`: the names in
claim order, numbered from `first`, and the two halves of their common lock suffix (a plan's
claims share their owner prefix and deadline, only the number differs). Written to a temporary
name and renamed, so a plan is whole or absent; fsynced (file and folder) when the stream
flushes, because Spark's offset log, which names the batch's range, is durable too.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

from boxmq.spark.durable import write_json

__all__ = ["Plan", "load_plans", "remove_plans", "write_plan"]

_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class Plan:
    first: int  # the number of names[0]; the others follow one by one
    names: tuple[str, ...]  # in target/, in claim order
    head: str  # locked name = name + head + number + "@" + tail
    tail: str
    sizes: tuple[int, ...] = ()  # body bytes per name, when a byte budget needed them

    @property
    def last(self) -> int:
        return self.first + len(self.names) - 1

    def locked(self, index: int) -> str:
        return f"{self.names[index]}{self.head}{self.first + index}@{self.tail}"

    def size(self, index: int) -> int:
        return self.sizes[index] if self.sizes else 0


def write_plan(folder: str, plan: Plan, *, flush: bool) -> None:
    data = {
        "first": plan.first,
        "head": plan.head,
        "tail": plan.tail,
        "names": plan.names,
        "sizes": plan.sizes,
    }
    write_json(_path(folder, plan.first), data, flush=flush)


def load_plans(folder: str) -> list[Plan]:
    """Every plan in `folder`, oldest first (temporary files of a write cut short are left out)."""
    plans = []
    for entry in sorted(os.listdir(folder)):
        if not entry.endswith(_SUFFIX):
            continue
        with open(os.path.join(folder, entry), encoding="utf-8", errors="surrogateescape") as src:
            data = json.load(src)
        plans.append(
            Plan(
                int(data["first"]),
                tuple(data["names"]),
                str(data["head"]),
                str(data["tail"]),
                tuple(int(size) for size in data.get("sizes", ())),
            )
        )
    return plans


def remove_plans(folder: str, plans: list[Plan]) -> None:
    for plan in plans:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_path(folder, plan.first))


def _path(folder: str, first: int) -> str:
    return os.path.join(folder, f"{first:020d}{_SUFFIX}")
