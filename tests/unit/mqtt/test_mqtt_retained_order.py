"""The order of retained writes (retained_order.py): a write older than its topic's newest
replaces nothing, and what is kept for that goes once no older write can come."""

from __future__ import annotations

from collections.abc import Iterator

from boxmq.mqtt.retained_order import RetainedOrder


def _write(order: RetainedOrder, topic: str, number: int) -> bool:
    with order.turn(topic, number) as newest:
        return newest


def test_a_topic_written_is_forgotten_once_no_older_write_can_come() -> None:
    """A server whose devices each publish their state, retained, to a topic of their own
    kept a lock and a number for every topic it ever saw (bench/soak.py)."""
    order = RetainedOrder()
    for n in range(500):
        assert _write(order, f"dev/{n}/state", order.take())
    assert order.held() == 0


def test_an_older_write_that_comes_last_still_replaces_nothing() -> None:
    order = RetainedOrder()
    older, newer = order.take(), order.take()
    assert _write(order, "t", newer)
    for n in range(50):  # other topics come and go meanwhile
        assert _write(order, f"other/{n}", order.take())
    assert not _write(order, "t", older)  # what `older` blocked is forgotten now
    assert order.held() == 0
    assert _write(order, "t", order.take())


def test_a_number_whose_message_is_no_retained_one_is_released() -> None:
    """A PUBREL after a restart takes a number before it knows its message: one that is no
    retained message has no turn, and its release lets the topics before it go."""
    order = RetainedOrder()
    unknown = order.take()
    assert _write(order, "t", order.take())
    assert order.held() == 1  # `unknown` might have been an older write of "t"
    order.release(unknown)
    assert order.held() == 0


def test_a_failed_write_is_forgotten_too_and_does_not_count() -> None:
    order = RetainedOrder()
    assert _write(order, "t", order.take())
    first = order.take()
    try:
        with order.turn("t", first) as newest:
            assert newest
            raise OSError("disk full")
    except OSError:
        pass
    assert order.held() == 0
    assert _write(order, "t", order.take())


class _Counted(set[int]):
    """The pending numbers, counting each one looked at (a membership test, or one number
    of a walk through them): a bound on the steps that no machine's load moves."""

    looked = 0

    def __contains__(self, number: object) -> bool:
        self.looked += 1
        return super().__contains__(number)

    def __iter__(self) -> Iterator[int]:
        for number in super().__iter__():
            self.looked += 1
            yield number


def test_a_big_batch_of_retained_writes_costs_in_proportion_to_it() -> None:
    """A client's batch of retained PUBLISHes takes its numbers on the loop before their
    writes run: each write looked for the lowest pending number among all of them (min() of
    the set): 30,000 writes took 450 million steps, 20 s here. Counted, not timed (a CPU-time
    bound fails on a loaded or traced machine): 3,000 writes looked at 4.5 million numbers,
    now at two a write."""
    order = RetainedOrder()
    pending = order._pending = _Counted()
    numbers = [order.take() for _ in range(3_000)]
    for n, number in enumerate(numbers):
        assert _write(order, f"dev/{n}/state", number)
    assert pending.looked <= 2 * len(numbers)
    assert order.held() == 0
