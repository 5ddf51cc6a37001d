"""Message ids: ordered within a process, apart across processes, forked ones included."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from boxmq.clock import Clock
from boxmq.ids import IdFactory
from boxmq.model import _DROPBOXMQ_ID, MessageId, timestamp_of


class _Frozen(Clock):
    def now(self) -> float:
        return 1_700_000_000.0


def test_ids_never_go_backwards_even_when_the_clock_stands_still() -> None:
    ids = IdFactory(_Frozen())
    made = [ids.new() for _ in range(1000)]
    assert made == sorted(made)
    assert len(set(made)) == 1000


def test_a_forked_child_draws_other_random_parts_than_its_parent() -> None:
    # The timestamp part can be equal in both (same clock, same counter): the random part is
    # all that keeps a parent's and a child's puts from taking one file name.
    ids = IdFactory(_Frozen())
    ids.new()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave at once
        os.close(read)
        os.write(write, " ".join(ids.new() for _ in range(5)).encode())
        os._exit(0)
    os.close(write)
    parent = [ids.new() for _ in range(5)]
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode().split()
    os.waitpid(pid, 0)
    assert len(child) == 5
    assert {i.split("-")[1] for i in parent}.isdisjoint(i.split("-")[1] for i in child)


@given(
    st.one_of(
        st.text(max_size=40),
        st.from_regex(r"\d{16}-\d+", fullmatch=True),
        st.from_regex(r"[0-9\u0660-\u0669]{15,17}-[0-9\u0660-\u0669-]{0,3}\n?", fullmatch=True),
    )
)
def test_timestamp_of_reads_the_shape_its_pattern_names(message_id: str) -> None:
    """timestamp_of checks the id with str methods; it must agree with `_DROPBOXMQ_ID`."""
    match = _DROPBOXMQ_ID.fullmatch(message_id)
    assert timestamp_of(message_id) == (int(match[1]) // 1000 if match else None)


class _Stepping(Clock):
    def __init__(self, times: list[float]) -> None:
        self._times = iter(times)

    def now(self) -> float:
        return next(self._times)


@given(st.lists(st.floats(1_600_000_000.0, 1_800_000_000.0), min_size=1, max_size=30))
def test_an_id_carries_the_clock_s_time_unless_that_would_go_backwards(
    times: list[float],
) -> None:
    ids = IdFactory(_Stepping(times))
    last = 0
    for now in times:
        stamp = int(ids.new().split("-")[0])
        assert stamp == max(int(now * 1_000_000), last + 1)
        last = stamp


def test_an_id_beside_another_keeps_its_stamp_and_is_another() -> None:
    """A copy that must be a message of its own (a retained message sent again to a
    subscription holding its live copy) takes its original's place in the order."""
    ids = IdFactory(_Frozen())
    original = ids.new()
    beside = ids.beside(original)
    assert beside != original
    assert _DROPBOXMQ_ID.fullmatch(beside)
    assert timestamp_of(beside) == timestamp_of(original)
    assert beside[:16] == original[:16]
    chosen = MessageId("chosen-by-a-producer")  # no stamp to keep: a new id
    assert _DROPBOXMQ_ID.fullmatch(ids.beside(chosen))
