"""The queue of password checks, taken in turn by address."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from boxmq.mqtt.fair import FairQueue


def test_keys_take_turns_and_each_keeps_its_order() -> None:
    queue: FairQueue[str, str] = FairQueue()
    for job in ("a1", "a2", "a3", "b1", "c1", "b2"):
        queue.put(job[0], job)
    assert [queue.take() for _ in range(len(queue))] == ["a1", "b1", "c1", "a2", "b2", "a3"]
    assert queue.take() is None
    assert len(queue) == 0


@given(st.lists(st.tuples(st.booleans(), st.sampled_from("abc")), max_size=60))
def test_every_job_is_taken_once_and_in_its_keys_order(
    steps: list[tuple[bool, str]],
) -> None:
    queue: FairQueue[str, tuple[str, int]] = FairQueue()
    put: list[tuple[str, int]] = []
    taken: list[tuple[str, int]] = []
    for number, (take, key) in enumerate(steps):
        if take:
            job = queue.take()
            if job is not None:
                taken.append(job)
        else:
            put.append((key, number))
            queue.put(key, (key, number))
    while (job := queue.take()) is not None:
        taken.append(job)
    assert sorted(taken) == sorted(put)
    for key in "abc":
        assert [job for job in taken if job[0] == key] == [job for job in put if job[0] == key]
