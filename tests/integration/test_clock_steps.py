"""The wall clock stepped (NTP at boot, a virtual machine resumed, `date -s`): what a process's
own timers, which read the box's clock, do after it (docs/operations.md "Clocks")."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from tests.integration.mqtt.raw import connect_packet_311
from tests.processes import dead_token

import boxmq
from boxmq.client.housekeeping import FULL_SWEEP_EVERY
from boxmq.model import ConsumerId
from boxmq.mqtt.server import MqttServer
from boxmq.mqtt.settings import Listener, MqttSettings
from boxmq.store.names import Lock, locked_name
from boxmq.store.side_files import GRACE


class SteppedClock:
    """A wall clock that an operator (or NTP) may set to any time, backwards too."""

    def __init__(self, start: float) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def set(self, now: float) -> None:
        self._now = now


def _locked_by_a_dead_process(source: Path, processing: Path, deadline: float) -> None:
    """The one message in `source` (a target/ folder) moved to `processing`, as a consumer
    process of this host that was killed left it: locked until `deadline` (far off), by a
    process token that ended."""
    [name] = os.listdir(source)
    lock = Lock(ConsumerId("gone"), int(deadline * 1000), dead_token())
    os.rename(source / name, processing / locked_name(name, lock))


def test_a_clock_stepped_back_does_not_put_off_the_look_for_dead_processes_locks(
    root: Path,
) -> None:
    """A consumer looks in processing/ every `sweep_interval` (1 s) for the locks of processes
    of its host that died, which go back to the queue at once. Its next look was a time of
    the wall clock: stepped back an hour, the consumer did not look for an hour, and a
    message a killed process held stayed locked all that time."""
    clock = SteppedClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w") as w:
            assert w.receive_nowait() is None  # its first look: the next in a second
            clock.set(clock.now() - 3600)
            box.queue("elsewhere").put(b"x")
            _locked_by_a_dead_process(
                root / "elsewhere" / "target", root / "jobs" / "processing", clock.now() + 600
            )
            clock.set(clock.now() + 2)
            # The look sends it back to target/; the watcher's news of that offers it.
            message = w.receive(timeout=1)
            assert message is not None
            assert message.body == b"x"


def test_a_clock_stepped_back_does_not_put_off_the_full_pass_of_the_sweep(root: Path) -> None:
    """`boxmq serve`'s sweep visits every subscription once a minute (FULL_SWEEP_EVERY), for
    what other processes did there: a lock of a consumer process of this host that died
    goes back then. The next full pass was a time of the wall clock: stepped back an hour,
    the sweep made none for an hour, and the message stayed locked all that time."""
    clock = SteppedClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        with box.subscribe("news", "s"):
            pass  # a durable subscription, nobody receiving from it in this process
        box.publish("news", b"x")
        box.sweep(full=False)  # the first is a full pass: the next in a minute
        clock.set(clock.now() - 3600)
        [target] = (root / "topic-root").glob("news/.subscriptions/*/target")
        _locked_by_a_dead_process(target, target.parent / "processing", clock.now() + 600)
        clock.set(clock.now() + FULL_SWEEP_EVERY + 1)
        [report] = box.sweep(full=False).values()
        assert report.released == 1
        assert len(os.listdir(target)) == 1


def test_a_clock_stepped_back_does_not_put_off_the_sweeps_look_for_expired_messages(
    root: Path,
) -> None:
    """The sweep moves a queue's expired messages to expired/ (what `boxmq stats` counts),
    looking through its target/ again a while after the last look (a minute at most). That
    while was a time of the wall clock: stepped back an hour, a message that expired
    meanwhile stayed in target/ for the hour (no consumer got it: each expires what it
    offers)."""
    clock = SteppedClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        jobs = box.queue("jobs")
        jobs.put(b"kept")
        box.sweep()  # its look through target/: the next in a moment
        clock.set(clock.now() - 3600)
        jobs.put(b"x", expires_in=5)  # 5 s of the clock as it is now
        clock.set(clock.now() + 10)
        box.sweep()
        assert len(os.listdir(root / "jobs" / "expired")) == 1


def test_a_clock_stepped_back_does_not_put_off_the_collection_of_side_files(
    root: Path,
) -> None:
    """The sweep deletes the side files no message names, old by GRACE, every
    COLLECT_EVERY s. Its next collection was a time of the wall clock: stepped back an
    hour, none was made for the hour, and one written after the step was kept up to an hour
    longer than its GRACE and a COLLECT_EVERY (disk space, nothing a client sees)."""
    clock = SteppedClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box:
        box.sweep()  # a collection: the next in COLLECT_EVERY
        clock.set(clock.now() - 3600)
        orphan = box.side_files.put(b"its message was acknowledged and deleted")
        os.utime(os.path.join(box.side_files.path, orphan), (clock.now(),) * 2)
        box.sweep()  # the first after the step
        clock.set(clock.now() + GRACE + 1)  # COLLECT_EVERY since that sweep, and more
        box.sweep()
        assert orphan not in os.listdir(box.side_files.path)


# An MQTT 3.1.1 CONNECT with a keep-alive of 60 s, clean session, client id "c"; its CONNACK.
_CONNECT = connect_packet_311("c", keep_alive=60)
_CONNACK = b"\x20\x02\x00\x00"
_PINGREQ, _PINGRESP = b"\xc0\x00", b"\xd0\x00"


def test_a_clock_stepped_forward_does_not_close_every_mqtt_connection(root: Path) -> None:
    """MQTT keep-alives count from each connection's last packet, read from the wall clock:
    stepped forward an hour (NTP, `date -s`), the next tick closed every connection whose
    keep-alive is under 40 minutes (keep-alive timeout) and sent its Will. The server tells
    the step against a monotonic clock, and the keep-alives move with it."""
    wall, steady = SteppedClock(time.time()), SteppedClock(1000.0)

    async def main() -> None:
        with boxmq.open(root, fsync="never") as box:
            settings = MqttSettings(listeners=(Listener("127.0.0.1", 0),))
            server = MqttServer(box, settings, clock=wall, steady=steady.now)
            [(host, port)] = await server.start()
            stop = asyncio.Event()
            running = asyncio.create_task(server.run(stop))
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(_CONNECT)
            assert await asyncio.wait_for(reader.readexactly(4), 10) == _CONNACK
            wall.set(wall.now() + 3600)  # the monotonic clock does not move
            await asyncio.sleep(1)  # four ticks
            writer.write(_PINGREQ)
            assert await asyncio.wait_for(reader.readexactly(2), 10) == _PINGRESP
            writer.close()
            stop.set()
            await running

    asyncio.run(main())


def test_a_clock_stepped_back_does_not_put_off_the_read_of_target_when_polling(
    root: Path,
) -> None:
    """A box that polls (`polling=True`, a root on NFS) reads target/ when its poll says the
    folder changed, no sooner than its next read is due (`rescan_interval`, or later for a
    big folder). That time was one of the wall clock: stepped back an hour, what another
    process put was not received for an hour."""
    clock = SteppedClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock, polling=True) as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w") as w:
            assert w.receive_nowait() is None  # its first read of target/
            clock.set(clock.now() - 3600)
            with boxmq.open(root, fsync="never") as other:
                other.queue("jobs").put(b"x")
            message = w.receive(timeout=2)
            assert message is not None
            assert message.body == b"x"


def test_a_receive_waits_its_timeout_whatever_the_clock_does(root: Path) -> None:
    """A receive's timeout is how long its caller waits, on the monotonic clock: the box's
    wall clock stepped back an hour during `receive(timeout=1.5)` must not hold it an hour,
    nor a step forward end it early."""
    for step in (-3600.0, 3600.0):
        clock = SteppedClock(time.time())
        stepper = threading.Timer(0.3, clock.set, (clock.now() + step,))
        with (
            boxmq.open(root, fsync="never", clock=clock) as box,
            box.queue("jobs").consumer("w") as w,
        ):
            began = time.monotonic()
            stepper.start()
            assert w.receive(timeout=1.5) is None
            waited = time.monotonic() - began
            stepper.join()
            assert 1.4 < waited < 3.0, (step, waited)


def test_a_receive_that_waits_just_after_a_step_back_sleeps_no_longer_than_its_looks(
    root: Path,
) -> None:
    """A receive waits (`_nap`) until its next read of target/ or look in processing/, times
    of the wall clock: computed after a step back of an hour (between its look and its wait)
    that was an hour, so a `receive()` without a timeout missed the locks of its host's dead
    processes and, polling, other processes' messages for the hour. The looks are due at once
    then (`periodic_due`), and the wait is no longer than the shorter of their intervals."""
    clock = SteppedClock(time.time())
    with boxmq.open(root, fsync="never", clock=clock) as box, box.queue("jobs").consumer("w") as w:
        assert w.receive_nowait() is None  # its first looks: the next in 1 s and 5 s
        clock.set(clock.now() - 3600)
        assert w._live._nap(clock.now(), None) <= 1.0  # the wait is private to the receive


def test_an_mqtt_server_given_the_system_clock_tells_its_steps(root: Path) -> None:
    """MqttServer tells a step of its wall clock against the monotonic clock only when it
    reads the system's: given `clock=SystemClock()` (as an embedding program may pass the
    clock it gives its Box), it told none, and a step forward closed every connection."""
    with boxmq.open(root, fsync="never") as box:
        settings = MqttSettings(listeners=(Listener("127.0.0.1", 0),))
        assert MqttServer(box, settings).steady() is not None
        assert MqttServer(box, settings, clock=boxmq.SystemClock()).steady() is not None
        assert MqttServer(box, settings, clock=boxmq.ManualClock()).steady() is None
