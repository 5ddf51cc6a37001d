"""What a box tells its `listen_offered` listeners, driven as an MQTT broker drives it: each
tick reads the news (`Box.read_news`) and pumps only the consumers told of
(`receive_ready`). A queue's deadlines (a lock's end, an unlock's delay) make no file event:
the queue's reminder (LiveQueue._remind_when_due, the box's heap) is all that tells of them,
and else only the broker's walk, every 5 s, would find them. Listeners are called with no
lock of the queue held: one that calls back into it must not wait for itself."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import boxmq
from boxmq.client.consumer import Consumer
from boxmq.clock import ManualClock
from boxmq.model import ConsumerId


class Told(list[list[ConsumerId]]):
    """A listener that keeps the consumers each call named, in order (the queue it names
    is the one these tests drive)."""

    def __call__(self, consumers: list[ConsumerId], queue: str) -> None:
        self.append(consumers)


@pytest.fixture
def told(manual_box: boxmq.Box) -> Iterator[Told]:
    """The consumers each listener call named, in order."""
    calls = Told()
    manual_box.listen_offered(calls)
    yield calls
    manual_box.forget_offered(calls)


def tick(box: boxmq.Box, told: Told, consumer: Consumer) -> list[boxmq.Message]:
    """One broker tick: read the news, pump `consumer` if it was told of (once)."""
    told.clear()
    box.read_news()
    return consumer.receive_ready() if any("c1" in names for names in told) else []


def put_one(queue: boxmq.Queue, told: Told, consumer: Consumer) -> boxmq.Message:
    """A put of this process, told to the listeners as it is put (not at a tick: its own
    put is no news to its watcher), then taken as the broker's pump takes it."""
    told.clear()
    queue.put(b"hi")
    assert told == [["c1"]]
    [message] = consumer.receive_ready()
    return message


def settled(box: boxmq.Box, told: Told, consumer: Consumer) -> None:
    """Ticks until no news is left of the files moved so far (the put's, the claim's, a
    release's): what follows is told by reminders alone."""
    for _ in range(5):
        assert tick(box, told, consumer) == []
        if not told:
            return
    raise AssertionError(f"news never ran dry: {told}")


def held_one(
    box: boxmq.Box, told: Told, *, lock_timeout: float
) -> tuple[boxmq.Queue, Consumer, boxmq.Message]:
    """Queue "q" and its consumer "c1", holding the one message put (`put_one`), once no
    news is left of it (`settled`)."""
    queue = box.queue("q")
    consumer = queue.consumer("c1", lock_timeout=lock_timeout)
    first = put_one(queue, told, consumer)
    settled(box, told, consumer)
    return queue, consumer, first


def test_a_lock_that_ends_is_told_at_its_deadline(
    manual_box: boxmq.Box, clock: ManualClock, told: Told
) -> None:
    # Shorter than the sweep of processing/ (1 s), so only the deadline's own reminder tells.
    _queue, consumer, first = held_one(manual_box, told, lock_timeout=0.5)
    clock.advance(0.25)
    assert tick(manual_box, told, consumer) == []
    assert told == []  # no news, no reminder: not yet due
    clock.advance(0.25)
    assert tick(manual_box, told, consumer) == []  # timed out: back in target/ (handoff)
    assert told == [["c1"]]  # told once, by the reminder, exactly at the deadline
    settled(manual_box, told, consumer)
    clock.advance(1.0)  # its handoff to another consumer is over: c1's again
    [again] = tick(manual_box, told, consumer)
    assert again.id == first.id
    assert again.delivery_count == first.delivery_count + 1


def test_an_unlock_delay_is_told_when_it_ends(
    manual_box: boxmq.Box, clock: ManualClock, told: Told
) -> None:
    _queue, consumer, first = held_one(manual_box, told, lock_timeout=30.0)
    first.unlock(delay=3.0)
    settled(manual_box, told, consumer)
    # Told once meanwhile, at the sweep the lock asked for (1 s): that look asks for the
    # delay's end, which the queue's earlier reminder stood for until then.
    for _ in range(11):  # quarters, exact in binary: the clock lands on the delay's end
        clock.advance(0.25)
        assert tick(manual_box, told, consumer) == []
    clock.advance(0.25)
    [again] = tick(manual_box, told, consumer)
    assert told == [["c1"]]
    assert again.id == first.id


def test_a_reminder_is_asked_once(manual_box: boxmq.Box, clock: ManualClock, told: Told) -> None:
    _queue, consumer, first = held_one(manual_box, told, lock_timeout=30.0)
    first.unlock(delay=3.0)
    settled(manual_box, told, consumer)
    for _ in range(5):  # looks that find the same deadline ask for no other reminder
        assert consumer.receive_ready() == []
    clock.advance(3.0)
    told.clear()
    manual_box.read_news()
    assert told == [["c1"]]


def test_a_shortened_lock_is_told_at_its_new_deadline(
    manual_box: boxmq.Box, clock: ManualClock, told: Told
) -> None:
    queue, consumer, first = held_one(manual_box, told, lock_timeout=30.0)
    first.extend(0.5)
    clock.advance(0.5)
    assert tick(manual_box, told, consumer) == []
    assert told == [["c1"]]
    assert queue.counts().locked == 0


def test_a_closed_consumer_is_told_of_nothing(
    manual_box: boxmq.Box, clock: ManualClock, told: Told
) -> None:
    _queue, consumer, _first = held_one(manual_box, told, lock_timeout=0.5)
    consumer.close()  # its reminder was asked for: nobody is left to tell at its time
    manual_box.read_news()
    told.clear()
    clock.advance(0.5)
    manual_box.read_news()
    assert told == []


def test_a_deleted_queue_is_told_of_nothing(
    manual_box: boxmq.Box, clock: ManualClock, told: Told
) -> None:
    _queue, _consumer, _first = held_one(manual_box, told, lock_timeout=0.5)  # kept open
    assert manual_box.delete_queue("q")
    again = manual_box.queue("q").consumer("c1", lock_timeout=30.0)  # same name, afresh
    assert again.receive_ready() == []
    manual_box.read_news()
    told.clear()
    clock.advance(0.5)
    manual_box.read_news()
    assert told == []


def test_a_polled_queue_is_told_at_every_tick(
    root: Path, clock: ManualClock, tmp_path: Path
) -> None:
    # No watch: only a look finds what another process dropped, so each tick looks.
    with boxmq.open(root, fsync="never", clock=clock, polling=True) as box:
        calls = Told()
        box.listen_offered(calls)
        consumer = box.queue("q").consumer("c1")
        assert consumer.receive_ready() == []  # a broker pumps a consumer it opens
        for _ in range(3):
            clock.advance(0.25)
            assert tick(box, calls, consumer) == []
            assert calls == [["c1"]]
        dropped = tmp_path / "dropped"  # a script's message, the shell way
        dropped.write_bytes(b"from a script")
        dropped.rename(root / "q" / "target" / "4.from-script.T")
        clock.advance(0.25)
        assert tick(box, calls, consumer) == []  # this look reads the folder once it's due
        clock.advance(5.0)
        [message] = tick(box, calls, consumer)
        assert message.body == b"from a script"


# -- listeners call back ---------------------------------------------------------------------


@contextlib.contextmanager
def calling_back(box: boxmq.Box, act: Callable[[], object]) -> Iterator[list[bool]]:
    """While in the block, a listener that makes another thread call `act` (a call into
    the queue) and waits for it at most 5 s: whether each such call ended in time. Under
    the queue's mutex it could not until the listener returned. Its threads are waited
    for at the end of the block, once the listener let go."""
    ended: list[bool] = []
    helpers: list[threading.Thread] = []

    def listener(consumers: list[ConsumerId], queue: str) -> None:
        helper = threading.Thread(target=act, daemon=True)
        helpers.append(helper)
        helper.start()
        helper.join(5.0)
        ended.append(not helper.is_alive())

    box.listen_offered(listener)
    try:
        yield ended
    finally:
        box.forget_offered(listener)
        for helper in helpers:
            helper.join(5.0)


@pytest.mark.parametrize("how", ["unlock", "pause", "close", "put"])
def test_a_listener_may_call_into_the_queue(manual_box: boxmq.Box, how: str) -> None:
    queue = manual_box.queue("q")
    first = queue.consumer("c1", max_in_flight=2)
    queue.put_many([b"one", b"two"])
    [message] = first.receive_ready(most=1)  # the other one is claimed for it, not received
    other = queue.consumer("c2")
    got: list[boxmq.Message] = []
    with calling_back(manual_box, lambda: got.extend(other.receive_ready())) as ended:
        if how == "unlock":
            message.unlock()
        elif how == "pause":
            first.pause()
        elif how == "close":
            first.close()
        else:
            queue.put(b"three")
    assert ended
    assert all(ended)  # never waited for the thread that told it
    assert got  # and what was told of is there for the other consumer


def test_a_listener_forgotten_while_told_skips_no_other(manual_box: boxmq.Box) -> None:
    """A broker that closes forgets its listener from its own thread (`forget_offered`)
    while a disk thread may be telling the box's listeners: the others are told all the
    same. Iterating the box's list itself, the removal shifted the next listener into
    the place already passed, and that one missed the put (a lost wake-up)."""
    queue = manual_box.queue("q")
    queue.consumer("c1")
    second = Told()

    def first(consumers: list[ConsumerId], shown: str) -> None:
        closing = threading.Thread(target=manual_box.forget_offered, args=(first,))
        closing.start()
        closing.join(5.0)

    manual_box.listen_offered(first)
    manual_box.listen_offered(second)
    try:
        queue.put(b"hi")
    finally:
        manual_box.forget_offered(first)
        manual_box.forget_offered(second)
    assert second == [["c1"]]


def test_has_more_says_what_a_receive_finds_that_no_news_tells(
    manual_box: boxmq.Box, clock: ManualClock, told: Told
) -> None:
    """What a broker asks before it looks again after a PUBACK (delivery.py, `acked`): a
    message that waited while its consumer was full, a lock come to its end; not what was
    taken already (docs/benchmarks.md, "Many share groups")."""
    queue = manual_box.queue("q")
    consumer = queue.consumer("c1", lock_timeout=0.5)  # one in flight at most
    first = put_one(queue, told, consumer)
    assert not consumer.has_more()
    queue.put(b"second")  # waits: its consumer is full
    assert consumer.has_more()
    first.ack()
    [second] = consumer.receive_ready()
    assert second.body == b"second"
    assert not consumer.has_more()
    clock.advance(0.5)  # its lock ends: the next receive gives it back (a rename)
    assert consumer.has_more()


def test_has_more_says_a_sweep_is_due_while_the_consumer_holds_locks(
    manual_box: boxmq.Box, clock: ManualClock, told: Told
) -> None:
    """The reminder a queue holding locks asks for its next sweep of processing/ (another
    process may have acked or extended one by id) tells its consumers; has_more says
    there is something to look for then, or the broker's pump would not look."""
    _queue, consumer, _first = held_one(manual_box, told, lock_timeout=3600)
    assert not consumer.has_more()
    clock.advance(1.0)  # the sweep's interval
    assert consumer.has_more()


@pytest.mark.parametrize("listener", [5, None, "print"])
def test_a_listener_that_cannot_be_called_is_refused_before_any_put_meets_it(
    box: boxmq.Box, listener: object
) -> None:
    """listen_offered(5) was taken, and each later put into a queue with a consumer raised
    TypeError ('int' object is not callable) after its message was stored: a producer that
    sent it again on the error stored it twice."""
    queue = box.queue("q")
    with queue.consumer("c1") as consumer:
        with pytest.raises(boxmq.InvalidArgument, match=r"listen_offered takes a callable"):
            box.listen_offered(listener)  # type: ignore[arg-type]
        queue.put(b"once")
        assert queue.counts().ready == 1
        message = consumer.receive(timeout=5)
        assert message is not None
        message.ack()


def test_a_listener_that_raises_costs_its_news_not_the_put(
    box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    """A listener's bug (an exception) made each put into a queue with a consumer raise after
    its message was stored: a producer that sent it again on the error stored it twice. The
    put returns, the error is logged with its traceback, and the receive still gets it."""

    def broken(consumers: list[ConsumerId], queue: str) -> None:
        raise RuntimeError("listener bug")

    queue = box.queue("q")
    with queue.consumer("c1") as consumer:
        box.listen_offered(broken)
        with caplog.at_level(logging.ERROR, logger="boxmq"):
            queue.put(b"once")
        assert queue.counts().ready == 1
        assert "listener bug" in caplog.text
        assert "a listen_offered listener failed" in caplog.text
        message = consumer.receive(timeout=5)
        assert message is not None
        assert message.body == b"once"
        message.ack()
        box.forget_offered(broken)
