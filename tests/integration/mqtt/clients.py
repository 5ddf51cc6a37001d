"""A real boxmq MQTT server on 127.0.0.1 (a free port): in a thread over a tmp root, or as a
`boxmq serve` process; and the clients the tests drive it with."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import paho.mqtt.client as mqtt
import pytest
from harness.ports import free_port
from harness.stopping import kill, stop
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from tests.waiting import WAIT as WAIT  # seconds any single expected event may take
from tests.waiting import until, waited

import boxmq
from boxmq.client.box import Box
from boxmq.clock import Clock
from boxmq.core import ExactlyOnceLimits
from boxmq.mqtt.server import MqttServer
from boxmq.mqtt.session_record import read_record, record_path
from boxmq.mqtt.settings import Listener, MqttSettings
from boxmq.store.process import process_token
from boxmq.store.topics import read_records

# Every client paho() started, for stop_leftover_clients: a client whose test ends without
# stopping it goes on reconnecting to its port, once a second, for the rest of the suite (170
# such threads were found in one run), and would take over the client of the same id of a
# later test whose server the system gave that port again.
_started: list[mqtt.Client] = []
_stopping: list[mqtt.Client] = []  # told to stop after the last test, to be joined


class OnlyAlice:
    """An authenticator that lets in the user alice with the password "secret", and no one else."""

    def authenticate(self, username: str | None, password: bytes | None, client_id: str) -> bool:
        return username == "alice" and password == b"secret"


@dataclass
class RunningServer:
    """A server start_server started in a thread; `with start_server(...) as running:` shuts it
    down at the block's end. (serve_fresh's address of a `boxmq serve` process is one too, only
    its root, host and port set: stop_process stops that process.)"""

    root: Path
    box: Box
    host: str
    port: int
    server: MqttServer
    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event
    thread: threading.Thread

    def shutdown(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(timeout=20)
        self.box.close()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def start_server(
    root: Path,
    settings: MqttSettings | None = None,
    *,
    group_dispatch: dict[str, str] | None = None,
    fsync: str = "never",
    clock: Clock | None = None,
    spares: int = 256,
    exactly_once: ExactlyOnceLimits | None = None,
    keep_processed: bool = True,
) -> RunningServer:
    """The server in a thread over `root`, on a free port; `clock`: the broker's (keep-alives,
    expiries, Wills), by default the system's; `spares`: boxmq.open's (0: no file of the root
    kept open for writing, which a remount read-only refuses, EBUSY); `exactly_once`:
    boxmq.open's too (trusted_sources); `keep_processed`:
    boxmq.open's (False: acks delete, as `boxmq serve` does by default)."""
    # Only the listeners replaced: rebuilt field by field, a setting not copied (its
    # response_information was not) was dropped without a word.
    settings = dataclasses.replace(
        settings or MqttSettings(), listeners=(Listener("127.0.0.1", 0),)
    )
    box = boxmq.open(
        root,
        fsync=fsync,
        group_dispatch=group_dispatch,
        spares=spares,
        exactly_once=exactly_once,
        keep_processed=keep_processed,
    )
    server = MqttServer(box, settings, clock=clock)
    ready: queue.Queue[Any] = queue.Queue()

    def run() -> None:
        async def main() -> None:
            stop = asyncio.Event()
            try:
                [(host, port)] = await server.start()
            except BaseException as error:
                ready.put(error)
                raise
            ready.put((asyncio.get_running_loop(), stop, host, port))
            await server.run(stop)

        asyncio.run(main())

    thread = threading.Thread(target=run, name="mqtt-server", daemon=True)
    thread.start()
    got = ready.get(timeout=WAIT)
    if isinstance(got, BaseException):
        raise got
    loop, stop, host, port = got
    return RunningServer(root, box, host, port, server, loop, stop, thread)


START = 60.0  # seconds a `boxmq serve` may take to listen: a loaded machine took over 20
IN_USE_TRIES = 5  # starts on a port another socket holds for a moment (its bind check)


def serve_process(
    root: Path,
    port: int,
    *flags: str,
    open_files: tuple[int, int] | None = None,
    program: tuple[str, ...] = ("-m", "boxmq.cli"),
) -> subprocess.Popen[bytes]:
    """`boxmq serve` on `root`, its MQTT door on `port`, once it is ready (log: ../serve.log).
    Its start is waited for as long as a loaded machine takes (START: the interpreter, the
    imports, the root's recovery), unless the process ends first; started again, a second
    apart, if it ended because the port was in use (IN_USE_TRIES in all), as a restart after
    a SIGKILL finds it when another process's socket holds it for a moment (free_port's
    check). `open_files`: its (soft, hard) limits of open files, set by prlimit(1) (a
    preexec_fn is unsafe beside threads). `program`: what the interpreter runs, given the
    command line (`-c` and a script that calls boxmq.cli.main, to stop the server at a chosen
    point)."""
    log_path = root.parent / "serve.log"
    command = [sys.executable, *program, "--data", str(root), "serve"]
    if open_files is not None:
        command = ["prlimit", "--nofile={}:{}".format(*open_files), *command]
    command += ["--mqtt", f"127.0.0.1:{port}", "--sweep-interval", "0.5", *flags]
    for attempt in range(1, IN_USE_TRIES + 1):
        with open(log_path, "ab") as log:  # the child keeps its own copy
            said_from = log.tell()
            process = subprocess.Popen(command, stderr=log)
        deadline = time.monotonic() + START
        with ready_watch(log_path, said_from) as said_ready:
            while process.poll() is None and time.monotonic() < deadline:
                # It listens as soon as it is bound, before the root's recovery (clients
                # wait in the backlog): served is when it says it is ready, the sessions on
                # disk counted.
                if said_ready():
                    return process
                time.sleep(0.05)
        if process.poll() is None:
            kill(process)
            raise AssertionError(f"boxmq serve was not ready within {START:.0f} s")
        with open(log_path, "rb") as log:
            log.seek(said_from)
            said = log.read().decode(errors="replace")
        if "address already in use" not in said or attempt == IN_USE_TRIES:
            break
        time.sleep(1.0)
    last = said.strip().rsplit("\n", 1)[-1]
    raise AssertionError(
        f"boxmq serve exited ({process.returncode}) before it listened, "
        f"start {attempt} of {IN_USE_TRIES}: {last}"
    )


_READY = b" ready; sweeping every "  # runtime.py's, after its recovery and its doors' start


@contextmanager
def ready_watch(log_path: Path, said_from: int) -> Iterator[Callable[[], bool]]:
    """A question: has the server started at `said_from` of its log said it is ready? Each
    asking reads only what the log gained since the last, keeping the end of what it saw in
    case the line was cut there: the whole log since the start was read again every 50 ms,
    quadratic in a long start's lines."""
    with open(log_path, "rb") as log:
        log.seek(said_from)
        seen = b""

        def said() -> bool:
            nonlocal seen
            seen = seen[1 - len(_READY) :] + log.read()
            return _READY in seen

        yield said


def recorded_away(root: Path, client_id: str) -> None:
    """Wait until the session record of `client_id` says its connection closed: the broker
    writes it when it sees the close, which a SIGKILL must come after to find it written."""

    def closed() -> bool:
        record = read_record(str(root), client_id)
        return record is not None and record.disconnected_at is not None

    until(closed, f"{client_id}: no close recorded within {WAIT} s", every=0.02)


def recorded_connected_since(root: Path, client_id: str, since_ns: int) -> None:
    """Wait until the session record of `client_id` says its client is connected in a file
    written after `since_ns` (time.time_ns()): what a CONNECT read since then wrote, not a
    record of before nor the one of a close (which says away). The file is looked at before
    it is read: the record read is that one or a newer one (each is written anew)."""
    path = record_path(str(root), client_id)

    def connected() -> bool:
        try:
            written = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            return False
        if written <= since_ns:
            return False
        record = read_record(str(root), client_id)
        return record is not None and record.disconnected_at is None

    until(connected, f"{client_id}: no connection recorded within {WAIT} s", every=0.02)


def recorded_will_sent(root: Path, client_id: str) -> None:
    """Wait until the session record of `client_id`, if it still has one, no longer holds a
    Will: the broker drops it once the Will was sent and written, so a next start does not
    send it again."""

    def dropped() -> bool:
        record = read_record(str(root), client_id)
        return record is None or record.will is None

    until(dropped, f"{client_id}: its record still holds its Will", every=0.02)


def record_deleted(root: Path, client_id: str) -> None:
    """Wait until the session record of `client_id` is gone: the broker deletes it last when
    the session ends."""
    until(
        lambda: read_record(str(root), client_id) is None,
        f"the session of {client_id} did not end",
        every=0.02,
    )


def serve_fresh(
    folder: Path, *flags: str, program: tuple[str, ...] = ("-m", "boxmq.cli")
) -> tuple[RunningServer, subprocess.Popen[bytes]]:
    """`boxmq serve` on a new root in `folder`, on a free port; and its address as `paho()`
    takes it (`.root`, `.port`; none of the in-thread server's parts). `program`: as
    `serve_process` takes it."""
    root, port = folder / "root", free_port()
    address = RunningServer(root, None, "127.0.0.1", port, None, None, None, None)  # type: ignore[arg-type]
    return address, serve_process(root, port, *flags, program=program)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """`boxmq serve` stopped as a user stops it (SIGTERM), killed past 20 s; reaped either way."""
    stop(process, seconds=20)


@contextmanager
def serving_fresh(
    folder: Path, *flags: str, program: tuple[str, ...] = ("-m", "boxmq.cli")
) -> Iterator[RunningServer]:
    """`serve_fresh` for a with block: the address of its `boxmq serve` process, which the
    block's end stops. A test that kills or restarts the process keeps serve_fresh's own."""
    address, process = serve_fresh(folder, *flags, program=program)
    try:
        yield address
    finally:
        stop_process(process)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    with start_server(tmp_path / "root") as running:
        yield running


# -- a paho client that hands what it gets to the test thread -------------------------------------


Served = subprocess.Popen[bytes]


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[RunningServer, RunningServer, Served]]:
    """Two `boxmq serve` processes on one root (their addresses, as paho() takes them), and
    the first's process, which a test may stop."""
    first, process = serve_fresh(tmp_path)
    second = RunningServer(first.root, None, "127.0.0.1", free_port(), None, None, None, None)  # type: ignore[arg-type]
    other = serve_process(first.root, second.port)
    try:
        yield first, second, process
    finally:
        for each in (process, other):
            stop_process(each)


@dataclass
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Any = None


@dataclass
class Paho:
    client: mqtt.Client
    messages: queue.Queue[Received] = field(default_factory=queue.Queue)
    connacks: queue.Queue[Any] = field(default_factory=queue.Queue)
    subacks: queue.Queue[Any] = field(default_factory=queue.Queue)
    unsubacks: queue.Queue[Any] = field(default_factory=queue.Queue)
    disconnects: queue.Queue[Any] = field(default_factory=queue.Queue)
    session_present: bool = False  # as its CONNACK said
    connack_properties: Any = None  # v5: paho's Properties of its CONNACK

    def next(self, timeout: float = WAIT) -> Received:
        return self.messages.get(timeout=timeout)

    def nothing(self, within: float = 0.5) -> bool:
        try:
            self.messages.get(timeout=within)
        except queue.Empty:
            return True
        return False

    def subscribe(self, topic: str, qos: int = 0, **options: Any) -> Any:
        if self.client.protocol == mqtt.MQTTv5:
            from paho.mqtt.subscribeoptions import SubscribeOptions

            props = options.pop("properties", None)
            self.client.subscribe(
                topic, options=SubscribeOptions(qos=qos, **options), properties=props
            )
        else:
            self.client.subscribe(topic, qos)
        return self.subacks.get(timeout=WAIT)

    def unsubscribe(self, topic: str) -> Any:
        """UNSUBSCRIBE, once its UNSUBACK came: what it said (v5: a reason code each)."""
        self.client.unsubscribe(topic)
        return self.unsubacks.get(timeout=WAIT)

    def publish(self, topic: str, payload: bytes | str, qos: int = 0, **kw: Any) -> None:
        info = self.client.publish(topic, payload, qos, **kw)
        info.wait_for_publish(timeout=WAIT)
        assert info.is_published(), f"{topic}: not acknowledged"

    def stop(self) -> None:
        self.client.disconnect()
        loop_stopped(self.client)


def loop_stopped(client: mqtt.Client) -> None:
    """`client.loop_stop()`, and the socket pair that woke its loop thread closed: paho 2.2
    leaves it open after loop_stop. Collected at the session's end, it made pytest exit 1 on a
    ResourceWarning though every test passed (a run of test_mqtt_dropped_files.py alone, every
    time); a client in a reference cycle of its callbacks (a thread class's bound method, a
    closure over it) may have each socket finalized before its own __del__ closes them, which
    failed a run of test_mqtt_takeover_kill.py in three under load."""
    client.loop_stop()
    client._reset_sockets(sockpair_only=True)


def paho(
    running: RunningServer,
    client_id: str = "",
    *,
    v5: bool = True,
    clean: bool = True,
    expiry: int | None = None,
    will: tuple[str, bytes, int] | None = None,
    will_delay: int | None = None,
    username: str | None = None,
    password: str | None = None,
    expect: int = 0,
    configure: Callable[[mqtt.Client], None] | None = None,
    connect_properties: dict[str, object] | None = None,
) -> Paho:
    """A connected paho client (v5 or 3.1.1); `expect` is the CONNACK reason it should get."""
    from paho.mqtt.packettypes import PacketTypes

    protocol = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
    kwargs: dict[str, Any] = {"client_id": client_id, "protocol": protocol}
    if not v5:
        kwargs["clean_session"] = clean
    client = mqtt.Client(CallbackAPIVersion.VERSION2, **kwargs)
    box = Paho(client)

    def on_message(_c: Any, _u: Any, message: Any) -> None:
        props = getattr(message, "properties", None)
        box.messages.put(
            Received(message.topic, message.payload, message.qos, message.retain, props)
        )

    client.on_message = on_message
    client.on_connect = lambda _c, _u, flags, reason, props: box.connacks.put(
        (flags, reason, props)
    )
    client.on_subscribe = lambda _c, _u, mid, reasons, props: box.subacks.put(reasons)
    client.on_unsubscribe = lambda _c, _u, mid, reasons, props: box.unsubacks.put(reasons)
    client.on_disconnect = lambda _c, _u, flags, reason, props: box.disconnects.put(reason)
    if username is not None:
        client.username_pw_set(username, password)
    if will is not None:
        will_props = None
        if will_delay is not None:
            will_props = paho_properties(PacketTypes.WILLMESSAGE, WillDelayInterval=will_delay)
        client.will_set(will[0], will[1], will[2], properties=will_props)
    if configure is not None:
        configure(client)
    connect_props = None
    if v5:
        connect_props = paho_properties(PacketTypes.CONNECT)
        if expiry is not None:
            connect_props.SessionExpiryInterval = expiry
        for name, value in (connect_properties or {}).items():
            setattr(connect_props, name, value)
    client.connect(
        running.host,
        running.port,
        keepalive=30,
        clean_start=clean if v5 else 3,
        properties=connect_props,
    )
    client.loop_start()
    _started.append(client)
    flags, reason, box.connack_properties = box.connacks.get(timeout=WAIT)
    assert int(reason.value if hasattr(reason, "value") else reason) == expect, reason
    box.session_present = bool(flags.session_present)
    return box


def stop_leftover_clients() -> None:
    """Tell every client paho() started since the last call to stop its loop, and join and
    close those told at the last call (tests/conftest.py calls this after each test, and
    twice at the session's end). A loop sleeps up to a second between reconnects before it
    sees it is told; a join at once cost the suite that second after every such test."""
    for client in _stopping:
        client.loop_stop()
        client._reset_sockets()
    _stopping[:] = _started
    _started.clear()
    for client in _stopping:
        client._thread_terminate = True  # loop_stop's flag, without its join


def paho_properties(kind: int, **values: object) -> Any:
    """paho's Properties for a packet type (PacketTypes.*), with `values` set."""
    from paho.mqtt.properties import Properties

    props = Properties(kind)  # type: ignore[no-untyped-call]
    for name, value in values.items():
        setattr(props, name, value)
    return props


Label = TypeVar("Label")


class AckedPublisher(threading.Thread, Generic[Label]):
    """A paho v5 publisher on its own thread that notes which of its messages the server
    acknowledged with success (PUBACK, PUBCOMP): `acked` holds the labels `publish` was given.
    A subclass's `run` publishes, and stops when `stop` is set or the connection is gone."""

    def __init__(self, port: int, client_id: str, *, persistent: bool = False) -> None:
        super().__init__(daemon=True)
        self.acked: set[Label] = set()
        self.stop = threading.Event()
        self._mids: dict[int, Label] = {}
        self._early: set[int] = set()
        self._lock = threading.Lock()
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
        )
        self.client.on_publish = self._on_publish
        if persistent:
            props = paho_properties(PacketTypes.CONNECT, SessionExpiryInterval=3600)
            self.client.connect("127.0.0.1", port, clean_start=False, properties=props)
        else:
            self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        waited(self.client.is_connected, every=0.01)

    def _on_publish(self, _c: Any, _u: Any, mid: int, reason: Any, _p: Any) -> None:
        if not reason.is_failure:
            with self._lock:
                if mid in self._mids:
                    self.acked.add(self._mids.pop(mid))
                else:
                    self._early.add(mid)  # answered before publish() returned its mid

    def publish(self, topic: str, payload: bytes | str, qos: int, label: Label, **kw: Any) -> None:
        info = self.client.publish(topic, payload, qos, **kw)
        with self._lock:
            if info.mid in self._early:
                self._early.discard(info.mid)
                self.acked.add(label)
            else:
                self._mids[info.mid] = label

    def unanswered(self, sent: int) -> int:
        """How many of `sent` messages are not acknowledged yet."""
        with self._lock:
            return sent - len(self.acked)

    def running(self) -> bool:
        return not self.stop.is_set() and self.client.is_connected()

    def end(self) -> None:
        self.stop.set()
        self.join(timeout=10)
        loop_stopped(self.client)


def keeper_target(server: RunningServer, filter: str) -> tuple[Paho, Path]:
    """A persistent session `keeper` subscribed to `filter` at QoS 1, and the `target/` of
    its subscription's dropbox, where a script may drop files for it."""
    keeper = paho(server, "keeper", clean=False, expiry=300)
    keeper.subscribe(filter, 1)
    return keeper, next(server.root.glob("topic-root/*/.subscriptions/client.keeper/target"))


def put_file(target: Path, name: str, body: bytes) -> None:
    """Drop a message file into a dropbox's `target/` as a script must: written in its
    `working/`, then renamed in whole (a file written in place may be taken half written)."""
    working = target.parent / "working"
    working.mkdir(exist_ok=True)
    (working / name).write_bytes(body)
    os.rename(working / name, target / name)


def drop(client: Paho) -> None:
    """End the connection without DISCONNECT, as a crash or a broken network would."""
    loop_stopped(client.client)
    sock = client.client.socket()
    assert sock is not None
    sock.close()


def mosquitto_tools() -> None:
    """Skip without mosquitto_pub/sub, unless CI=true, where their absence is a failure."""
    if shutil.which("mosquitto_pub") and shutil.which("mosquitto_sub"):
        return
    message = "mosquitto_pub/mosquitto_sub are not installed (make test installs them)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


# -- the CLI beside MQTT clients on one root (test_mqtt_cli_session, test_mqtt_adopt) ----------


def boxmq_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`boxmq --data ROOT ARGS...` as a user runs it, its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "--data", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )


def boxmq_cli_ok(root: Path, *args: str) -> str:
    """`boxmq_cli`, which must succeed: its standard output."""
    done = boxmq_cli(root, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def publish_each(served: RunningServer, topic: str, payloads: list[bytes]) -> None:
    """Each payload at QoS 1 from a client of its own ("sender"), which then leaves."""
    sender = paho(served, "sender")
    try:
        for payload in payloads:
            sender.publish(topic, payload, 1)
    finally:
        sender.stop()


def subscriptions_on_disk(root: Path) -> set[tuple[str, str | None, str | None]]:
    """(filter, share group, subscriber) of every subscription's folder on disk."""
    return {(r.filter, r.group, r.subscriber) for r, _ in read_records(str(root))}


def persistent_paho(served: RunningServer, client_id: str, v5: bool) -> Paho:
    """A paho client whose session outlives its connection: v5 with an hour's Session Expiry
    Interval, 3.1.1 with clean session 0."""
    return paho(served, client_id, v5=v5, clean=False, expiry=3600 if v5 else None)


def marked_and_bound(running: RunningServer, why: str) -> None:
    """Waits for the broker's mark in .mqtt/brokers/ (made at a tick once the disk takes it;
    `why` fails the wait), then checks what the mark is for: `boxmq unsubscribe` refuses to end
    the share group membership of a connected client that is not persistent."""
    root = running.root
    mark = root / ".mqtt" / "brokers" / process_token()
    until(mark.exists, why)
    np = paho(running, "np", v5=True)  # not persistent: its membership bound to us
    try:
        np.subscribe("$share/h/r/#", 1)
        refused = boxmq_cli(root, "unsubscribe", "$share/h/r/#", "--name", "np")
        assert refused.returncode == 1, refused
        assert "np is the client id of an MQTT client connected" in refused.stderr
    finally:
        np.stop()
