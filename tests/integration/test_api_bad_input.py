"""The embedded API given what a user's Python may pass by mistake: each is refused at once
with a boxmq error that says what to give, and nothing stored is lost or changed."""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import boxmq
from boxmq.client.assured import AssuredMessage
from boxmq.client.publishing import Publication
from boxmq.errors import StoreFailed, TargetMissing
from boxmq.store.topics import incoming_working


def test_a_receive_timeout_that_is_no_number_of_seconds_is_refused_not_waited_on_for_ever(
    box: boxmq.Box,
) -> None:
    # NaN compares false with every deadline: receive(timeout=nan) on an empty queue waited
    # for ever instead of returning None after no time at all, or saying why.
    jobs = box.queue("jobs")
    with (
        jobs.consumer("worker") as consumer,
        box.subscribe("a/b", "durable") as durable,
        box.subscribe("a/b", "memory", durable=False) as memory,
    ):
        for receiver in (consumer, durable, memory):
            for timeout in (math.nan, "1", b"1", True):
                outcome: list[object] = []
                waiting = threading.Thread(
                    target=_receive_into, args=(receiver, timeout, outcome), daemon=True
                )
                waiting.start()
                waiting.join(10)
                assert not waiting.is_alive(), f"receive(timeout={timeout!r}) still waits"
                [refused] = outcome
                assert isinstance(refused, boxmq.InvalidArgument), (timeout, refused)
                assert "timeout" in str(refused)
        jobs.put(b"kept")
        message = consumer.receive(timeout=5)  # what a refused receive left is there
        assert message is not None
        assert message.body == b"kept"
        message.ack()


def _receive_into(receiver: boxmq.Consumer, timeout: object, outcome: list[object]) -> None:
    try:
        outcome.append(receiver.receive(timeout=timeout))  # type: ignore[arg-type]
    except Exception as error:
        outcome.append(error)


@pytest.mark.parametrize("durable", [True, False])
def test_a_subscriber_takes_none_zero_a_negative_wait_and_infinity(
    box: boxmq.Box, durable: bool
) -> None:
    # A memory subscription's wait (a threading.Condition) raised OverflowError for infinity
    # and for any timeout over threading.TIMEOUT_MAX (about 292 years).
    with box.subscribe("a/b", "worker", durable=durable) as subscriber:
        assert subscriber.receive(timeout=0) is None
        assert subscriber.receive(timeout=-1) is None  # a deadline already passed: no wait
        for timeout in (math.inf, 1e12):
            box.publish("a/b", b"one")
            message = subscriber.receive(timeout=timeout)
            assert message is not None
            assert message.body == b"one"
            message.ack()


def test_a_consumer_takes_none_zero_a_negative_wait_and_infinity(box: boxmq.Box) -> None:
    jobs = box.queue("jobs")
    with jobs.consumer("worker") as consumer:
        assert consumer.receive(timeout=0) is None
        assert consumer.receive(timeout=-1) is None
        for timeout in (math.inf, 1e12):
            jobs.put(b"one")
            message = consumer.receive(timeout=timeout)
            assert message is not None
            message.ack()


def test_a_folder_to_sweep_that_is_no_path_under_the_root_is_refused_at_once(
    box: boxmq.Box, root: Path, tmp_path: Path
) -> None:
    # It was taken as it came, and refused only by os.scandir at the next sweep: every
    # sweep from then on raised NotADirectoryError (for 5) and ran no housekeeping.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / ".tmp-x").write_bytes(b"another program's")
    for folder in (5, None, b"/tmp", str(outside), outside, root / ".." / "elsewhere"):
        with pytest.raises(boxmq.InvalidArgument, match=r"folder to sweep|not under the root"):
            box.sweep_temporaries_in(folder)  # type: ignore[arg-type]
    box.queue("jobs").put(b"kept")
    box.sweep()
    assert (outside / ".tmp-x").exists()
    records = root / "mine"
    records.mkdir()
    box.sweep_temporaries_in(records)  # a path under the root, as a door's records are
    box.sweep()
    assert box.queue("jobs").counts().ready == 1


@pytest.mark.parametrize("name", [5, None, b"jobs", 1.5, ["jobs"]])
def test_a_name_or_topic_that_is_no_str_is_refused_saying_so(box: boxmq.Box, name: object) -> None:
    # Each came out of the validators' innards: "argument of type 'int' is not iterable",
    # "a bytes-like object is required, not 'str'", an AttributeError from parse_filter
    # (subscribe(None, ...)), or None called "empty".
    jobs = box.queue("jobs")
    jobs.put(b"kept")
    bad: Any = name
    calls: list[Callable[[], object]] = [
        lambda: box.queue(bad),
        lambda: box.queue(bad, create=False),
        lambda: box.delete_queue(bad),
        lambda: jobs.consumer(bad),
        lambda: jobs.get(bad),
        lambda: box.publish(bad, b"x"),
        lambda: box.subscribe(bad, "worker"),
        lambda: box.subscribe("a/b", bad),
        lambda: box.unsubscribe(bad, "worker"),
        lambda: box.unsubscribe("a/b", bad),  # was False: "no such subscription"
        lambda: box.subscription(bad),
        lambda: box.assured("source", "1", b"x", queue=bad),
        lambda: box.assured("source", "2", b"x", topic=bad),
    ]
    if name is not None:  # None: a share group's way, refused as "no share group" already
        calls.append(lambda: box.subscription("a/b", bad))  # was QueueNotFound, "no ... of 5"
    if name is None:  # no queue nor topic: the call names neither
        del calls[-2:]
    for call in calls:
        with pytest.raises(
            boxmq.InvalidArgument, match=f"not a str|is a str, not {type(name).__name__}"
        ):
            call()
    assert box.queues() == ["jobs"]
    assert jobs.counts().ready == 1


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"properties": 5}, "properties map names to values (a dict), not int"),
        ({"properties": "ab"}, "not str"),
        ({"properties": [("a", "b")]}, "not list"),
        ({"correlation_id": 5}, "correlation_id is a str or None, not int"),
        ({"correlation_id": b"\x01"}, "bytes go in properties={'mqtt.correlation-data'"),
        ({"reply_to": b"a/b"}, "reply_to is a str or None, not bytes"),
        # A value of no property type was said to be "of type STRING", a type never given.
        ({"properties": {"p": {"x": 1}}}, "property 'p' = {'x': 1}: a value is a str, int, f"),
        ({"properties": {"p": [1, 2]}}, "property 'p' = [1, 2]: a value is a str, int, float"),
        ({"properties": {"p": None}}, "property 'p' = None: a value is a str, int, float, bool"),
        ({"properties": {"p": b"\x01"}}, "property 'p' = b'\\x01': a value is a str, int, f"),
    ],
)
def test_metadata_of_the_wrong_type_is_refused_saying_what_to_give(
    box: boxmq.Box, root: Path, given: dict[str, Any], says: str
) -> None:
    # TypeErrors from the name encoder's regex ("cannot use a string pattern on a bytes-like
    # object") or dict(), AttributeError ('int' object has no attribute 'items') from publish.
    # A list of pairs was taken by put (dict() of it) and refused by publish.
    jobs = box.queue("jobs")
    with box.subscribe("a/b", "worker") as subscriber:
        sends: list[Callable[[], object]] = [
            lambda: jobs.put(b"x", **given),
            lambda: jobs.put_many([boxmq.Outgoing(b"x", **given)]),
            lambda: box.publish("a/b", b"x", **given),
        ]
        if "properties" in given:
            sends.append(lambda: box.assured("s", "1", b"x", queue="jobs", **given))
        for send in sends:
            with pytest.raises(boxmq.InvalidArgument, match=re.escape(says)):
                send()
        assert subscriber.receive_nowait() is None
    assert jobs.counts() == boxmq.QueueCounts(0, 0, 0, 0, 0, 0)
    assert not any((root / "jobs" / "working").iterdir())


@pytest.mark.parametrize("reply_to", ["a/+", "replies/#", "c++"])
def test_a_reply_to_with_a_wildcard_is_refused_as_the_cli_refuses_it(
    box: boxmq.Box, root: Path, reply_to: str
) -> None:
    # Stored, while `boxmq put --reply-to a/+` was a usage error: a request no one could
    # answer (a publish to a filter is refused), sent to MQTT v5 subscribers without it.
    jobs = box.queue("jobs")
    with box.subscribe("a/b", "worker") as subscriber:
        for send in (
            lambda: jobs.put(b"x", reply_to=reply_to),
            lambda: jobs.put_many([boxmq.Outgoing(b"x", reply_to=reply_to)]),
            lambda: box.publish("a/b", b"x", reply_to=reply_to),
        ):
            # named as the API names it, not in the CLI's words (-p, --reply-to)
            with pytest.raises(boxmq.InvalidArgument) as refused:
                send()
            assert str(refused.value).startswith(f"reply_to {reply_to!r} holds a wildcard")
            assert str(refused.value).endswith("(as the property mqtt.response-topic is)")
        assert subscriber.receive_nowait() is None
        assert jobs.counts() == boxmq.QueueCounts(0, 0, 0, 0, 0, 0)
        assert not any((root / "jobs" / "working").iterdir())
        jobs.put(b"x", reply_to="replies/dev1")  # a queue or topic to answer on
        box.publish("a/b", b"x", reply_to="replies/dev1")
        message = subscriber.receive(timeout=5)
        assert message is not None
        assert message.reply_to == "replies/dev1"
    assert [peeked.reply_to for peeked in jobs.peek()] == ["replies/dev1"]


@pytest.mark.parametrize("body", ["abc", b"abc", bytearray(b"abc"), memoryview(b"abc")])
def test_put_many_of_one_body_is_refused_not_split_into_messages(box: boxmq.Box, body: Any) -> None:
    # A str is an iterable of one-character strs: put_many("abc") put "a", "b" and "c".
    jobs = box.queue("jobs")
    with pytest.raises(boxmq.InvalidArgument, match=r"not one body .*put_many\(\[body\]\)"):
        jobs.put_many(body)
    assert jobs.counts().ready == 0
    assert len(jobs.put_many([body])) == 1


@pytest.mark.parametrize("messages", [None, 5, {"a": b"x"}, {b"a": b"x"}])
def test_put_many_of_no_list_is_refused_naming_what_it_takes(box: boxmq.Box, messages: Any) -> None:
    # None and 5: "'NoneType' object is not iterable"; a dict put its keys, "a", as messages.
    jobs = box.queue("jobs")
    with pytest.raises(boxmq.InvalidArgument, match=r"put_many takes a list of messages, not"):
        jobs.put_many(messages)
    assert jobs.counts() == boxmq.QueueCounts(0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("states", ["target", boxmq.State.TARGET, None, 5])
def test_find_of_one_state_alone_is_refused_saying_to_list_it(box: boxmq.Box, states: Any) -> None:
    # "target" was read a character at a time ("no state 't'"), State.TARGET and None raised
    # TypeError ("'State' object is not iterable"), though peek's state= takes either.
    jobs = box.queue("jobs")
    message_id = jobs.put(b"x")
    with pytest.raises(boxmq.InvalidArgument, match=r"states takes a list of states, such as \["):
        jobs.find(message_id, states=states)
    found = jobs.find(message_id, states=["target"])
    assert found is not None
    assert found.state is boxmq.State.TARGET


@pytest.mark.parametrize("filters", ["a/#", b"a/#", None, 5, {"a/#": 1}])
def test_unsubscribe_many_of_no_list_is_refused_before_anything_ends(
    box: boxmq.Box, filters: Any
) -> None:
    # A str is an iterable of one-character filters: unsubscribe_many("a/#", ...) ended the
    # subscriber's "#", with what it had collected, and left "a/#". A dict ended its keys.
    for kept in ("#", "a/#"):
        box.subscribe(kept, "s").close()
    box.publish("a/b", b"collected")
    with pytest.raises(boxmq.InvalidArgument, match=r"unsubscribe_many takes a list of filters"):
        box.unsubscribe_many(filters, "s")
    for kept in ("#", "a/#"):
        assert box.subscription(kept, "s").counts().ready == 1
    assert box.unsubscribe_many(["a/#"], "s") == [True]


@pytest.mark.parametrize("given", ["abc", b"abc", None, 5, {"a": 1}])
@pytest.mark.parametrize(
    ("call", "items"),
    [
        ("publish_many", "publications"),
        ("assured_many", "assured messages"),
        ("deliver_many", "(source, msg_id) pairs"),
    ],
)
def test_a_door_s_batch_call_of_no_list_is_refused_naming_what_it_takes(
    box: boxmq.Box, call: str, items: str, given: Any
) -> None:
    # A str gave AttributeError ("'str' object has no attribute 'source'") or a TypeError
    # from deep inside; None "not iterable". Nothing was stored, but nothing said why.
    batch = getattr(box.topics if call == "publish_many" else box.intake, call)
    with pytest.raises(boxmq.InvalidArgument, match=rf"{call} takes a list of {re.escape(items)}"):
        batch(given)


@pytest.mark.parametrize("durable", [True, False])
@pytest.mark.parametrize("most", [-1, 1.5, "3", True])
def test_receive_ready_takes_none_or_a_count_of_zero_or_more(
    box: boxmq.Box, durable: bool, most: Any
) -> None:
    # -1 gave nothing without a word (a caller may have meant "all"), 1.5 up to two
    # messages, and "3" a TypeError from a comparison inside.
    jobs = box.queue("jobs")
    with (
        jobs.consumer("worker", max_in_flight=3) as consumer,
        box.subscribe("a/b", "worker", durable=durable, max_in_flight=3) as subscriber,
    ):
        for _ in range(2):
            jobs.put(b"x")
            box.publish("a/b", b"x")
        for receiver in (consumer, subscriber):
            with pytest.raises(boxmq.InvalidArgument, match="most must be None or an int >= 0"):
                receiver.receive_ready(most=most)
            assert receiver.receive_ready(most=0) == []
            assert len(receiver.receive_ready()) == 2


def test_a_bool_is_no_duration(box: boxmq.Box) -> None:
    # True is 1 to arithmetic: lock_timeout=True locked for one second, expires_in=True let
    # a message expire a second after its put, extend(True) gave a lock one more second.
    jobs = box.queue("jobs")
    jobs.put(b"kept")
    with pytest.raises(boxmq.InvalidArgument, match="not True"):
        jobs.put(b"x", expires_in=True)
    with pytest.raises(boxmq.InvalidArgument, match="not True"):
        jobs.consumer("worker", lock_timeout=True)
    with pytest.raises(boxmq.InvalidArgument, match="not True"):
        jobs.get("worker", lock_timeout=True)
    message = jobs.get("worker", lock_timeout=30)
    assert message is not None
    deadline = message.lock_deadline
    with pytest.raises(boxmq.InvalidArgument, match="not True"):
        message.extend(True)
    with pytest.raises(boxmq.InvalidArgument, match="not False"):
        message.unlock(delay=False)
    assert jobs.peek(state=boxmq.State.PROCESSING)[0].lock_deadline == pytest.approx(deadline)
    assert jobs.counts().ready == 0


@pytest.mark.parametrize("step", [math.nan, math.inf, "5", None])
def test_a_manual_clock_refuses_a_step_that_is_no_finite_number_of_seconds(
    manual_box: boxmq.Box, clock: boxmq.ManualClock, step: Any
) -> None:
    # advance(nan) was taken and the clock read nan for good: every put then raised "cannot
    # convert float NaN to integer", and the box's close a KeyError. "5" raised a bare TypeError.
    jobs = manual_box.queue("jobs")
    before = clock.now()
    with pytest.raises(ValueError, match=r"advance takes a finite number of seconds"):
        clock.advance(step)
    assert clock.now() == before
    jobs.put(b"x", expires_in=5)
    clock.advance(1)
    message = jobs.get("worker")
    assert message is not None
    message.ack()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"root": ""}, "the root '' is empty"),  # it opened the current directory
        ({"root": None}, "the root is a folder's path"),
        ({"root": 5}, "the root is a folder's path"),
        ({"root": b"data"}, "the root is a folder's path"),
        ({"root": "da\0ta"}, "holds NUL"),
        ({"group_dispatch": [("etl", "random")]}, "group_dispatch maps share group names"),
        ({"exactly_once": 5}, "exactly_once is a boxmq.core.ExactlyOnceLimits"),
        ({"clock": 5}, "clock is a boxmq.Clock"),
        ({"keep_processed": "no"}, "keep_processed is True or False, not 'no'"),
        ({"polling": 1}, "polling is True or False, not 1"),
        # bytes: "a bytes-like object is required, not 'str'" from inside the name's lookup
        ({"dispatch": b"random"}, "dispatch b'random': choose one of round-robin"),
        ({"group_dispatch": {"etl": b"random"}}, "dispatch b'random': choose one of"),
    ],
)
def test_open_refuses_options_of_the_wrong_type_before_it_makes_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: dict[str, Any], says: str
) -> None:
    monkeypatch.chdir(tmp_path)
    options = {"root": tmp_path / "data", **given}
    with pytest.raises(boxmq.InvalidArgument, match=re.escape(says)):
        boxmq.open(**options)
    assert list(tmp_path.iterdir()) == []


def _iterate_into(receiver: boxmq.Consumer | boxmq.Subscriber, outcome: list[object]) -> None:
    try:
        outcome.append(list(receiver))
    except Exception as error:
        outcome.append(error)


def test_box_close_ends_the_iterations_other_threads_wait_in(root: Path) -> None:
    # A consumer's thread waiting on the folder read the watcher's wake pipe after close had
    # closed it: OSError EBADF (or a read of whatever file took that descriptor number). A
    # memory subscription was never told: its thread waited for ever.
    for attempt in range(5):
        box = boxmq.open(root / str(attempt), fsync="never")
        receivers = [
            box.queue("jobs").consumer("worker"),
            box.subscribe("a/b", "durable"),
            box.subscribe("a/b", "memory", durable=False),
        ]
        outcomes: list[list[object]] = [[] for _ in receivers]
        threads = [
            threading.Thread(target=_iterate_into, args=(r, o), daemon=True)
            for r, o in zip(receivers, outcomes, strict=True)
        ]
        for thread in threads:
            thread.start()
        box.queue("jobs").put(b"first")  # the consumer's thread is woken by the watcher
        box.close()
        for thread in threads:
            thread.join(10)
        assert [t.is_alive() for t in threads] == [False, False, False]
        for outcome in outcomes:
            [ended] = outcome
            assert isinstance(ended, list), ended  # the iteration ended, with no error


@pytest.mark.parametrize("left", [5, "names", ("a",)])
def test_requeue_refuses_a_left_it_cannot_append_to_before_it_moves_anything(
    box: boxmq.Box, root: Path, left: Any
) -> None:
    # The AttributeError came at the first name that stays, after the others had gone back:
    # the caller heard neither how many went back nor which stayed.
    jobs = box.queue("jobs")
    jobs.put(b"dead")
    message = jobs.get("worker")
    assert message is not None
    message.reject()
    (root / "jobs" / "error" / "a folder").mkdir()  # never deliverable: it stays, named in left
    with pytest.raises(boxmq.InvalidArgument, match="left is a list"):
        jobs.requeue(left=left)
    assert jobs.counts().dead == 2
    names: list[str] = []
    assert jobs.requeue(left=names) == 1
    assert names == ["a folder"]


@settings(max_examples=150)
@given(queue=st.text(max_size=90), consumer=st.text(max_size=50))
def test_any_text_is_a_queue_and_consumer_name_or_refused_with_invalid_name(
    tmp_path_factory: pytest.TempPathFactory, queue: str, consumer: str
) -> None:
    # What a hunt tried (`/`, `..`, NUL, lone surrogates, 200 bytes of é): every name is one
    # folder the root lists back, read again by a second open, or InvalidName; never a
    # traceback, and never a message put under it lost.
    root = tmp_path_factory.mktemp("names")
    with boxmq.open(root, fsync="never") as box:
        try:
            jobs = box.queue(queue)
        except boxmq.InvalidName:
            assert box.queues() == []
            return
        assert box.queues() == [queue]
        message_id = jobs.put(b"kept")
        try:
            message = jobs.get(consumer)
        except boxmq.InvalidName:
            message, consumer = jobs.get("worker"), "worker"
        assert message is not None
        assert (message.id, message.consumer) == (message_id, consumer)
        jobs.ack(message.id, consumer)
    with boxmq.open(root, fsync="never") as again:
        assert again.queue(queue, create=False).counts().done == 1


def test_a_put_to_a_queue_deleted_meanwhile_says_so(box: boxmq.Box, root: Path) -> None:
    # A Queue kept by a producer across box.delete_queue (or another process's delete)
    # raised FileNotFoundError naming a file in working/ that it had been about to write.
    jobs = box.queue("jobs")
    jobs.put(b"old")
    assert box.delete_queue("jobs")
    sends: list[Callable[[], object]] = [
        lambda: jobs.put(b"x"),
        lambda: jobs.put(b"x", priority=5),
        lambda: jobs.put_many([b"x", b"y"]),
    ]
    for send in sends:
        with pytest.raises(boxmq.QueueNotFound, match=r"'jobs' was deleted.*box\.queue\('jobs'\)"):
            send()
    assert box.queues() == []
    box.queue("jobs").put(b"new")  # made again, as the error says
    assert box.queue("jobs").counts().ready == 1


@pytest.mark.parametrize("batch", [1, 10])
def test_a_put_racing_a_delete_and_a_making_again_raises_queue_not_found_or_passes(
    box: boxmq.Box, batch: int
) -> None:
    # One thread puts through the Queue it made once, one deletes the queue, one makes it
    # again. A put whose folder was deleted under it and made again (whole, or half: working/
    # without target/ yet) before it looked why its rename failed raised a bare
    # FileNotFoundError naming working/, or TargetMissing advising a mkdir of target/.
    jobs = box.queue("jobs")
    stop = threading.Event()
    refused: list[BaseException] = []
    wrong: list[BaseException] = []

    def produce() -> None:
        while not stop.is_set():
            try:
                jobs.put(b"x") if batch == 1 else jobs.put_many([b"x"] * batch)
            except boxmq.QueueNotFound as error:
                refused.append(error)
            except Exception as error:  # what the test is looking for
                wrong.append(error)

    def churn(step: Callable[[], object]) -> None:
        for _ in range(80):
            step()
            stop.wait(0.003)

    threads = [
        threading.Thread(target=produce),
        threading.Thread(target=churn, args=(lambda: box.delete_queue("jobs"),)),
        threading.Thread(target=churn, args=(lambda: box.queue("jobs"),)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads[1:]:
        thread.join(timeout=30)
    stop.set()
    threads[0].join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    folder = str(box.root)  # left out of what is said, for the message to show whole
    assert [f"{type(error).__name__}: {error}".replace(folder, "") for error in wrong] == []
    assert refused  # the race was run: some puts met a delete
    assert all("'jobs' was deleted" in str(error) for error in refused)


@pytest.mark.parametrize("fsync", ["always", "interval", "never"])
def test_a_put_to_a_queue_whose_target_was_moved_meanwhile_says_so_and_leaves_nothing(
    root: Path, fsync: str
) -> None:
    # A Queue kept by a producer while another process moved its target/ aside (operations.md's
    # "Disk usage" recreates it so) raised a bare FileNotFoundError naming working/ and target/.
    # A store failure, not QueueNotFound: the queue is there, and takes puts once target/ is.
    with boxmq.open(root, fsync=fsync) as box:
        jobs = box.queue("jobs")
        jobs.put(b"old")
        folder = root / "jobs"
        (folder / "target").rename(folder / "target.old")
        before = sorted(root.rglob("*"))
        sends: list[Callable[[], object]] = [
            lambda: jobs.put(b"x"),
            lambda: jobs.put(b"x", priority=5),
            lambda: jobs.put_many([b"x", b"y"]),
        ]
        for send in sends:
            with pytest.raises(
                TargetMissing,
                match=r"queue 'jobs' has no target/ .*moved aside or removed.*nothing was put; "
                r"put again once it is back \(mkdir .*target, as operations\.md's Disk usage",
            ) as raised:
                send()
            assert isinstance(raised.value, StoreFailed)  # what the doors refuse, retryable
            assert raised.value.path == str(folder / "target")
        # Neither a body in working/ or a spare file left, nor a target/ made under the mover.
        assert sorted(root.rglob("*")) == before
        assert [p.name for p in (folder / "target.old").iterdir()]
        (folder / "target").mkdir()  # the mover's next step
        jobs.put(b"new")  # the same Queue: taken again
        assert jobs.counts().ready == 1


@pytest.mark.parametrize("where", [{"queue": "jobs"}, {"topic": "a/b"}])
def test_assured_takes_a_str_body_as_put_does_and_refuses_an_int_leaving_nothing(
    box: boxmq.Box, root: Path, where: dict[str, Any]
) -> None:
    # A str body raised TypeError from the write, its temporary left in working/ until a
    # sweep; an int one a TypeError from len().
    with box.subscribe("a/b", "worker") as subscriber:
        for body in (5, None, ["x"]):
            with pytest.raises(boxmq.InvalidArgument, match="a message body is bytes or str"):
                box.assured("sender", "1", body, **where)  # type: ignore[arg-type]
        assert not list(root.rglob(".tmp-*"))
        assert box.pending("sender") == []
        assert box.assured("sender", "1", "héllo", **where)
        assert box.deliver("sender", "1")
        receiver = subscriber if "topic" in where else box.queue("jobs").consumer("worker")
        message = receiver.receive(timeout=5)
        assert message is not None
        assert (message.body, message.text()) == ("héllo".encode(), "héllo")
        assert message.message_class is boxmq.MessageClass.TEXT
        message.ack()


@pytest.mark.parametrize(("source", "msg_id", "says"), [(None, "1", "source"), ("s", 7, "msg_id")])
def test_assured_names_its_own_argument_for_a_source_or_id_that_is_no_str(
    box: boxmq.Box, source: Any, msg_id: Any, says: str
) -> None:
    # It said "property 'bx_src' of type STRING: None is not a str": boxmq's own name.
    with pytest.raises(boxmq.InvalidArgument, match=f"^{says} is a str, not"):
        box.assured(source, msg_id, b"x", queue="jobs")
    assert box.queue("jobs").counts().uncommitted == 0


@pytest.mark.parametrize("where", ["afile", "afile/sub", "link"])
def test_a_root_where_a_file_stands_is_refused_naming_the_path_and_what_to_fix(
    tmp_path: Path, where: str
) -> None:
    # makedirs' FileExistsError ("[Errno 17] File exists") or NotADirectoryError came out raw,
    # naming neither what was wrong with the root nor what to do.
    (tmp_path / "afile").write_bytes(b"a user's file")
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    with pytest.raises(boxmq.InvalidArgument) as refused:
        boxmq.open(tmp_path / where)
    said = str(refused.value)
    assert said.startswith(f"the root {tmp_path / where} ")
    if where == "link":
        assert f"a symbolic link to {tmp_path / 'gone'}, which is no folder" in said
        assert "make that folder" in said
    else:
        assert f"{tmp_path / 'afile'} is a file, not a folder" in said
        assert "give a folder's path, or move the file away" in said
    assert (tmp_path / "afile").read_bytes() == b"a user's file"
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize("source", [5, None, b"sender", ("sender",)])
def test_a_source_that_is_no_str_is_refused_by_the_exactly_once_intake_and_publish(
    box: boxmq.Box, source: Any
) -> None:
    # deliver answered False, pending [] and drop_pending 0, as for a source with nothing
    # stored, and publish(source=5) went out: a caller's mistake looked like an empty intake.
    assert box.assured("sender", "1", b"kept", queue="jobs")
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: box.deliver(source, "1"), "source is a str"),
        (lambda: box.deliver("sender", source), "msg_id is a str"),
        (lambda: box.pending(source), "source is a str"),
        (lambda: box.drop_pending(source), "source is a str"),
    ]
    if source is not None:  # publish's source is None by default: no publisher to skip
        calls.append((lambda: box.publish("a/b", b"x", source=source), "source is a str or None"))
    with box.subscribe("a/b", "worker") as subscriber:
        for call, says in calls:
            with pytest.raises(boxmq.InvalidArgument, match=f"^{says}"):
                call()
        assert subscriber.receive_nowait() is None
    assert box.pending("sender") == ["1"]  # what was stored waits for its deliver, as it was
    assert box.deliver("sender", "1")
    assert box.queue("jobs").counts().ready == 1


def test_an_empty_correlation_id_reply_to_or_type_is_stored_as_none_everywhere(
    box: boxmq.Box, root: Path
) -> None:
    # The file name writes None and "" alike, as an empty field (DropboxMQ's "none"): "" names
    # no queue or topic to reply to, correlates nothing and is no type, so it is no value.
    empty: dict[str, Any] = {"correlation_id": "", "reply_to": "", "type": ""}
    jobs = box.queue("jobs")
    with (
        box.subscribe("a/b", "durable") as durable,
        box.subscribe("a/b", "memory", durable=False) as memory,
    ):
        jobs.put(b"x", **empty)
        jobs.put_many([boxmq.Outgoing(b"y", **empty)])
        box.publish("a/b", b"z", correlation_id="", reply_to="")
        for subscriber in (durable, memory):  # each read "" (from memory), the files None
            message = subscriber.receive(timeout=5)
            assert message is not None
            said = (message.correlation_id, message.reply_to, message.properties)
            assert said == (None, None, {})
            message.ack()
    for peeked in jobs.peek():
        assert (peeked.correlation_id, peeked.reply_to, peeked.properties) == (None, None, {})
    while (got := jobs.get("worker")) is not None:
        assert (got.correlation_id, got.reply_to, got.type) == (None, None, None)
        got.ack()
    names = [path.name for path in (root / "jobs" / "processed").iterdir()]
    assert len(names) == 2
    assert all(name.count(".") == 2 for name in names), names  # trailing empty fields left out


def _sends_of(given: dict[str, Any]) -> dict[str, Callable[[boxmq.Box], object]]:
    """Every public way to store a message with `given` properties."""

    def never(_: object) -> None:
        pytest.fail("a refused batch commits nothing")

    def assured_many(box: boxmq.Box) -> object:
        message = AssuredMessage("s", "3", b"x", topic="a/b", properties=given)
        [outcome] = box.intake.assured_many([message])  # said per message, not raised
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return {
        "put": lambda box: box.queue("jobs").put(b"x", properties=given),
        "put_many": lambda box: box.queue("jobs").put_many(
            [boxmq.Outgoing(b"x", properties=given)]
        ),
        "publish": lambda box: box.publish("a/b", b"x", properties=given),
        "publish_many": lambda box: box.topics.publish_many(
            [Publication("a/b", b"x", properties=given)]
        ),
        "publish_many_then": lambda box: box.topics.publish_many_then(
            [Publication("a/b", b"x", properties=given)], never
        ),
        "assured-queue": lambda box: box.assured("s", "1", b"x", queue="jobs", properties=given),
        "assured-topic": lambda box: box.assured("s", "2", b"x", topic="a/b", properties=given),
        "assured_many": assured_many,
    }


@pytest.mark.parametrize("name", ["bx_nb", "bx_v5"])
@pytest.mark.parametrize("send", list(_sends_of({})))
def test_a_property_named_in_boxmqs_own_bx_is_refused_by_every_put_and_publish(
    box: boxmq.Box, root: Path, send: str, name: str
) -> None:
    """`bx_*` names what boxmq writes itself (docs/file-format.md): the CLI and `put` refused
    them, but `publish` and `assured` stored them, so a `bx_nb` held every copy back until the
    year 5138, a `bx_dc` or `bx_why` passed for boxmq's delivery count or dead reason. The
    MQTT door's own (`bx_v5`) go around the check (`reserved=True`), not through it."""
    given: dict[str, Any] = {"tenant": "acme", name: 99_999_999_999_999}
    says = (
        f"^property name '{name}' starts with bx_, which boxmq keeps for its own properties: "
        "give it another name$"
    )
    jobs = box.queue("jobs")
    with box.subscribe("a/b", "worker") as subscriber:
        with pytest.raises(boxmq.InvalidName, match=says):
            _sends_of(given)[send](box)
        assert subscriber.receive_nowait() is None
    assert jobs.counts() == boxmq.QueueCounts(0, 0, 0, 0, 0, 0)
    assert box.pending("s") == []
    assert not any((root / "jobs" / "working").iterdir())


_FLAGS: list[tuple[str, Callable[[boxmq.Box, Any], object]]] = [
    ("retain", lambda box, v: box.publish("a/b", b"x", retain=v)),
    ("durable", lambda box, v: box.subscribe("a/b", "s", durable=v)),
    ("no_local", lambda box, v: box.subscribe("a/b", "s", no_local=v)),
    ("send_retained", lambda box, v: box.subscribe("a/b", "s", send_retained=v)),
    ("process_bound", lambda box, v: box.subscribe("a/b", "s", process_bound=v)),
    ("ends_with_process", lambda box, v: box.subscribe("a/b", "s", ends_with_process=v)),
    ("create", lambda box, v: box.queue("jobs", create=v)),
    ("full", lambda box, v: box.sweep(full=v)),
    ("keep_claimed", lambda box, v: box.queue("q").consumer("c").pause(keep_claimed=v)),
    ("keep_claimed", lambda box, v: box.subscribe("a/#", "c").pause(keep_claimed=v)),
    ("keep_locks", lambda box, v: box.queue("q").consumer("c").close(keep_locks=v)),
    ("reclaim", lambda box, v: box.assured("s", "1", b"x", queue="jobs", reclaim=v)),
    ("remember", lambda box, v: box.deliver("s", "1", remember=v)),
    ("must_exist", lambda box, v: box.deliver("s", "1", must_exist=v)),
    # What the doors call, reached from box.topics and box.intake: refused as the calls above
    # (found by a second read)
    ("no_local", lambda box, v: box.topics.resubscribe("a/b", "s", no_local=v)),
    ("process_bound", lambda box, v: box.topics.resubscribe("a/b", "s", process_bound=v)),
    ("reclaim", lambda box, v: box.intake.assured_one(_assured(reclaim=v))),
    ("text", lambda box, v: box.intake.assured_one(_assured(text=v))),
    ("remember", lambda box, v: box.intake.deliver_many([("s", "1")], remember=v)),
    ("must_exist", lambda box, v: box.intake.deliver_many([("s", "1")], must_exist=v)),
    ("superseded", lambda box, v: box.intake.deliver_many([("s", "1")], superseded=v)),
]


def _assured(**flag: Any) -> AssuredMessage:
    return AssuredMessage("s", "1", b"x", queue="jobs", **flag)


@pytest.mark.parametrize("value", ["no", 0, None])
@pytest.mark.parametrize(
    ("what", "call"), _FLAGS, ids=[f"{i}-{f[0]}" for i, f in enumerate(_FLAGS)]
)
def test_a_flag_is_true_or_false_not_any_value_python_calls_true_or_false(
    box: boxmq.Box, root: Path, what: str, call: Callable[[boxmq.Box, Any], object], value: Any
) -> None:
    # durable="no" made a durable subscription, retain="no" a retained message, create="no"
    # a queue's folders, as boxmq.open refuses keep_processed="no" (taken as True).
    with pytest.raises(boxmq.InvalidArgument, match=re.escape(f"{what} is True or False, not")):
        call(box, value)
    assert not (root / "jobs").exists()
    assert not any(root.glob("topic-root/a%2Fb*"))  # no subscription recorded
    assert box.topics.retained("a/b") is None


@pytest.mark.parametrize("value", ["no", 0, None])
def test_the_batch_twins_of_assured_and_deliver_check_their_flags_too(
    box: boxmq.Box, root: Path, value: Any
) -> None:
    """`assured` and `deliver` refused reclaim="no" and must_exist=1, but the batches they
    stand on took them as Python's truth: assured_many([AssuredMessage(..., reclaim=0)])
    stored without reclaiming, deliver_many(keys, must_exist=1) raised ItemNotFound as True
    would, and superseded="no" kept a retained message from replacing the topic's (found
    by a second read)."""
    says = re.escape(" is True or False, not")
    [outcome] = box.intake.assured_many(
        [AssuredMessage("s", "1", b"x", queue="jobs", reclaim=value)]
    )
    assert isinstance(outcome, boxmq.InvalidArgument)
    assert re.search("^reclaim" + says, str(outcome))
    assert box.pending("s") == []
    assert not (root / "jobs").exists()
    for flag in ("remember", "must_exist", "superseded"):
        with pytest.raises(boxmq.InvalidArgument, match="^" + flag + says):
            box.intake.deliver_many([("s", "1")], **{flag: value})


@pytest.mark.parametrize("value", ["no", 0, None])
def test_the_doors_flags_of_publish_are_true_or_false_too(
    box: boxmq.Box, root: Path, value: Any
) -> None:
    """`box.topics.publish` refused retain="no" but took its twin flags as Python's truth:
    superseded="no" kept a retained message from replacing the topic's, and reserved="no"
    let a user's `bx_nb` through (found by a second read)."""
    box.publish("a/b", b"old", retain=True)
    says = re.escape(" is True or False, not")
    with box.subscribe("a/b", "worker", send_retained=False) as subscriber:
        with pytest.raises(boxmq.InvalidArgument, match="^superseded" + says):
            box.topics.publish("a/b", b"new", retain=True, superseded=value)
        with pytest.raises(boxmq.InvalidArgument, match="^reserved" + says):
            box.topics.publish("a/b", b"new", reserved=value)
        with pytest.raises(boxmq.InvalidArgument, match="^reserved" + says):
            box.topics.publish_many([Publication("a/b", b"new")], reserved=value)
        assert subscriber.receive_nowait() is None
    retained = box.topics.retained("a/b")
    assert retained is not None
    assert retained[1] == b"old"


@pytest.mark.parametrize("flag", ["no_local", "process_bound"])
@pytest.mark.parametrize("value", ["no", 0, None])
def test_resubscribe_checks_the_flags_subscribe_checks(
    box: boxmq.Box, flag: str, value: Any
) -> None:
    """`subscribe` refused no_local="no", its twin `box.topics.resubscribe` wrote it into
    the subscription's record as it came, `"no_local": "no"`, which every process then read
    as No Local on (found by a second read)."""
    with box.subscribe("a/b", "s"):
        with pytest.raises(boxmq.InvalidArgument, match=f"^{flag} is True or False, not"):
            box.topics.resubscribe("a/b", "s", **{flag: value})
        record = box.topics.record_of("a/b", "s")
        assert record is not None
        assert record.no_local is False


@pytest.mark.parametrize("owner", [5, b"alice@example.org", None, "", "\ud800"])
def test_an_owner_that_is_no_text_is_refused_saying_so(box: boxmq.Box, owner: Any) -> None:
    # 5 or bytes: "write() argument must be str, not int", and a lone surrogate a
    # UnicodeEncodeError, from inside the file's write.
    jobs = box.queue("jobs")
    with pytest.raises(boxmq.InvalidArgument, match="an owner is a non-empty str"):
        jobs.set_owner(owner)
    assert jobs.owner is None


@pytest.mark.parametrize("message_id", [5, None, b"1-2", ["1-2"]])
def test_a_message_id_that_is_no_str_is_refused_saying_so(box: boxmq.Box, message_id: Any) -> None:
    # ItemNotFound "5: no such message", and lock_process(5) None, as for an id of no lock.
    jobs = box.queue("jobs")
    jobs.put(b"kept")
    held = jobs.get("worker", lock_timeout=30)
    assert held is not None
    calls: list[Callable[[], object]] = [
        lambda: jobs.ack(message_id, "worker"),
        lambda: jobs.unlock(message_id, "worker"),
        lambda: jobs.reject(message_id, "worker"),
        lambda: jobs.extend(message_id, "worker", seconds=5),
        lambda: jobs.lock_process(message_id, "worker"),
    ]
    for call in calls:
        with pytest.raises(boxmq.InvalidArgument, match=r"message id .* is not a str"):
            call()
    assert jobs.counts().locked == 1
    jobs.ack(held.id, "worker")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"max_in_flight": 0}, "max_in_flight must be >= 1, not 0"),
        ({"max_in_flight": "2"}, "max_in_flight must be an int >= 1, not '2'"),
        ({"lock_timeout": -1}, "the lock timeout must be a finite number of seconds > 0"),
        ({"lock_timeout": math.nan}, "the lock timeout must be a finite number of seconds > 0"),
    ],
)
def test_a_memory_subscription_refuses_the_limits_a_durable_one_refuses(
    box: boxmq.Box, given: dict[str, Any], says: str
) -> None:
    # Taken without a word (a memory subscription holds no locks): the same call with
    # durable=True raised, so a script that turned durable on met the error only then.
    for durable in (False, True):
        with pytest.raises(boxmq.InvalidArgument, match=re.escape(says)):
            box.subscribe("a/b", "worker", durable=durable, **given)
    assert not box.topics.has_subscription("a/b", "worker")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"properties": {"mqtt.response-topic": "replies/+"}}, "property 'mqtt.response-topic'"),
        ({"properties": {"mqtt.payload-format": 2}}, "property 'mqtt.payload-format'"),
        ({"source": 5}, "source is a str or None, not int"),
        ({"body": 5}, "a message body is bytes or str, not int"),
    ],
)
def test_publish_many_refuses_what_publish_refuses_and_stores_none_of_its_batch(
    box: boxmq.Box, root: Path, given: dict[str, Any], says: str
) -> None:
    """publish_many skipped two of publish's checks: an `mqtt.*` property with no MQTT
    meaning was stored (and left out, logged, when it went out over MQTT) and a source of 5
    was compared with the subscribers' client ids (found by a second read)."""
    fields: dict[str, Any] = {"body": b"x", **given}
    body = fields.pop("body")
    refused = f"^{re.escape(says)}"
    with (
        box.subscribe("a/b", "worker", durable=True) as durable,
        box.subscribe("a/b", "listener") as memory,
    ):
        with pytest.raises(boxmq.InvalidArgument, match=refused):
            box.topics.publish("a/b", body, **fields)
        batch = [Publication("a/b", b"fine"), Publication("a/b", body, **fields)]
        with pytest.raises(boxmq.InvalidArgument, match=refused):
            box.topics.publish_many(batch)
        with pytest.raises(boxmq.InvalidArgument, match=refused):
            box.topics.publish_many_then(batch, lambda errors: None)
        box.publish("a/b", b"after")
        for subscriber in (durable, memory):
            got = subscriber.receive(timeout=5)
            assert got is not None
            assert got.body == b"after"
            got.ack()
            assert subscriber.receive_nowait() is None
    staged = incoming_working(str(root))
    assert not os.path.isdir(staged) or os.listdir(staged) == []
