"""`boxmq serve --xmpp-component` through Prosody: the CLI wiring, one instance per name,
reconnecting, and urn:xmpp:qos assured delivery with duplicates."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.output import Drained
from harness.ports import free_port
from harness.prosody import SECRET, SERVICE, TIMEOUT, Prosody, clients, first_to_hear
from harness.stopping import kill, stop
from tests.waiting import logged, until_async
from tests.xmpp.clients import component

import boxmq
from boxmq.xmpp import ns
from boxmq.xmpp.component import ComponentRefused, run_component
from boxmq.xmpp.records import hold_component
from boxmq.xmpp.settings import XmppSettings
from boxmq.xmpp.subscriptions import consumer_name

SCENARIO_SECONDS = 60


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, SCENARIO_SECONDS))


def _serve(
    prosody: Prosody,
    data: Path,
    secret: str = SECRET,
    *more: str,
    fsync: str = "never",
    component: str = SERVICE,
) -> subprocess.Popen[str]:
    return _serve_at(prosody.component_port, data, secret, *more, fsync=fsync, component=component)


def _serve_at(
    port: int,
    data: Path,
    secret: str = SECRET,
    *more: str,
    fsync: str = "never",
    component: str = SERVICE,
) -> subprocess.Popen[str]:
    """`boxmq serve` of the XMPP component `component` alone, on the Prosody at `port`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "boxmq.cli",
            "--data",
            str(data),
            "--fsync",
            fsync,
            "serve",
            "--no-mqtt",
            "--xmpp-component",
            component,
            "--xmpp-server",
            f"127.0.0.1:{port}",
            *more,
        ],
        env={**os.environ, "BOXMQ_XMPP_SECRET": secret},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _drained(process: subprocess.Popen[str]) -> Drained:
    """The output of a component that serves on while the test runs, read as it comes: read
    only at its end, a log longer than the pipe holds stopped it in a write, serving no one."""
    assert process.stdout is not None
    return Drained(process.stdout)


@pytest.fixture
def served(prosody: Prosody, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    data = tmp_path / "data"
    with boxmq.open(data, fsync="never") as box:
        box.queue("jobs")
    process = _serve(prosody, data)
    said = _drained(process)
    try:
        yield process, data
    finally:
        stop(process, seconds=10)
        output = said.text()
        assert process.stdout is not None
        process.stdout.close()
    # SIGTERM: the component leaves cleanly (its subscribers' locks back on disk), exit 0
    assert process.returncode == 0, output
    assert "Traceback" not in output, output


async def _wait_for_service(user: Any) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        reply = await user.request(f"<query xmlns='{ns.DISCO_INFO}'/>", type="get")
        if reply.get("type") == "result":
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the component never answered")


def test_serve_runs_the_component_and_a_second_instance_is_refused(
    prosody: Prosody, served: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    first, _ = served

    async def scenario() -> None:
        async with clients(prosody, "alice", "carol") as [alice, carol]:
            await _wait_for_service(alice)
            await alice.subscribe(1)
            item = await carol.publish("<job xmlns='urn:example'>via serve</job>")
            event = await alice.next_event()
            assert event.item == item
            assert (await alice.retract(item)).get("type") == "result"

    run(scenario())
    second = _serve(prosody, tmp_path / "other")
    try:
        output, _ = second.communicate(timeout=30)
    finally:
        kill(second)  # still running only if it did not end within the 30 s
    assert second.returncode != 0
    assert "another instance with this name is connected" in output
    assert "Traceback" not in output, output
    assert first.poll() is None  # the first one serves on


def test_a_second_serve_of_the_component_on_the_same_root_is_refused_at_start(
    tmp_path: Path,
) -> None:
    # Prosody refuses a second connection of one component name only while the first is
    # connected. A second `boxmq serve` on the first's root that connected while the first
    # was reconnecting (Prosody restarted) took the first's live subscriber records for a
    # crash's and told those subscribers their subscriptions had ended; at its reconnect
    # the first was refused (conflict) and exited. Now the second is refused by the root.
    port = free_port()  # nothing listens: the first is "reconnecting"
    settings = XmppSettings(SERVICE, "127.0.0.1", port, SECRET)
    data = tmp_path / "data"

    async def scenario() -> None:
        stop = asyncio.Event()
        with boxmq.open(data, fsync="never") as box:
            first = asyncio.ensure_future(run_component(box, settings, stop))
            await asyncio.sleep(0.05)  # it holds the root's lock from its first step
            refused = await asyncio.to_thread(_refused_at_start, _serve_at(port, data), 20)
            holder = f"process {os.getpid()}"
            assert f"is served from {data} by another process ({holder})" in refused
            assert not first.done()  # the first serves on
            stop.set()
            await first
        held = hold_component(str(data), SERVICE)  # let go at its stop
        assert held is not None
        held.release()

    run(scenario())


def test_a_wrong_secret_stops_serve_with_a_message_that_says_what_to_fix(
    prosody: Prosody, tmp_path: Path
) -> None:
    # docs/xmpp.md: a wrong secret stops it (`not-authorized`). Prosody's own text ("Given
    # token does not match calculated token") does not tell an operator what to change.
    refused = _refused_at_start(_serve(prosody, tmp_path / "data", secret="not-the-secret"))
    assert "not-authorized" in refused
    assert "component_secret" in refused
    assert "BOXMQ_XMPP_SECRET" in refused


def test_a_component_the_server_does_not_know_stops_serve_saying_what_to_fix(
    prosody: Prosody, tmp_path: Path
) -> None:
    # docs/xmpp.md: a name the server has no Component section for is refused with
    # host-unknown, final as a wrong secret is: retried, it would be refused each time.
    # Prosody's text ("... does not match any configured external components") names
    # neither the condition nor where the name comes from on boxmq's side.
    refused = _refused_at_start(_serve(prosody, tmp_path / "data", component="elsewhere.localhost"))
    assert refused.startswith(
        "boxmq serve: the XMPP server refused component elsewhere.localhost: "
    ), refused
    assert "host-unknown" in refused
    assert 'Component "elsewhere.localhost"' in refused
    assert "--xmpp-component" in refused
    # refused once, not retried until someone stops it
    assert prosody.log().count("elsewhere.localhost does not match any configured") == 1


def _refused_at_start(process: subprocess.Popen[str], timeout: float = 30) -> str:
    """The last `boxmq serve: ` line of a serve refused at start: exit 1, no traceback."""
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        kill(process)  # still running only if it did not end within `timeout`
    assert process.returncode == 1, output
    assert "Traceback" not in output, output
    refused = [line for line in output.splitlines() if line.startswith("boxmq serve: ")]
    assert refused, output
    return refused[-1]


def _served_across_a_kill(
    prosody: Prosody,
    data: Path,
    scenario: Callable[[Callable[[], None]], Coroutine[Any, Any, None]],
) -> None:
    """Run `scenario` beside a component serving `data`; the callable it is given SIGKILLs
    that component and starts another, which then stops cleanly, with no traceback."""
    first = _serve(prosody, data)
    _drained(first)  # what it says before its kill is not checked
    started: list[tuple[subprocess.Popen[str], Drained]] = []

    def kill_and_start_again() -> None:
        kill(first)
        again = _serve(prosody, data)
        started.append((again, _drained(again)))

    outputs: list[str] = []
    try:
        run(scenario(kill_and_start_again))
    finally:
        first.kill()
        first.wait(timeout=10)
        for second, said in started:
            stop(second, seconds=10)
            outputs.append(said.text())  # all of its output, to its end
        for process in [first, *(second for second, _ in started)]:
            assert process.stdout is not None
            process.stdout.close()
    [(second, _)], [output] = started, outputs
    assert second.returncode == 0, output
    assert "Traceback" not in output, output


def test_unsubscribe_refuses_an_xmpp_subscribers_membership_saying_what_it_is(
    served: tuple[subprocess.Popen[str], Path], prosody: Prosody
) -> None:
    # The XMPP subscribers of a topic node are members of $share/xmpp/<node>, bound to the
    # serving process as a connected MQTT client's are. `boxmq unsubscribe` ended one under
    # --no-mqtt (no broker mark), and beside MQTT called it "an MQTT client".
    _, data = served
    node = "sensors/1"

    async def scenario() -> None:
        async with clients(prosody, "alice") as [alice]:
            await _wait_for_service(alice)
            assert (await alice.subscribe(1, node)).get("type") == "result"
            member = consumer_name(str(alice.boundjid))
            group = f"$share/xmpp/{node}"
            command = [sys.executable, "-m", "boxmq.cli", "--data", str(data), "unsubscribe"]
            refused = await asyncio.to_thread(
                subprocess.run,
                [*command, group, "--name", member],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert refused.returncode != 0, refused.stdout
            assert "XMPP subscriber" in refused.stderr, refused.stderr
            assert "MQTT" not in refused.stderr, refused.stderr
            with boxmq.open(data, fsync="never") as box:
                assert box.topics.has_subscription(group, member)
            # delete's refusal says what ends it, not the unsubscribe refused above
            delete = [sys.executable, "-m", "boxmq.cli", "--data", str(data), "delete", group]
            told = await asyncio.to_thread(
                subprocess.run, delete, capture_output=True, text=True, timeout=30
            )
            assert told.returncode != 0, told.stdout
            assert "boxmq unsubscribe" not in told.stderr, told.stderr
            assert f"the XMPP subscriber {member}" in told.stderr, told.stderr

    run(scenario())


def test_a_subscriber_is_told_after_the_component_was_killed(
    prosody: Prosody, tmp_path: Path
) -> None:
    # A clean stop tells each subscriber subscription='none'; a SIGKILL told nobody, and a
    # client still connected waited for items for ever. The next start tells it now, from
    # the subscriber records (docs/xmpp.md, After a crash).
    data = tmp_path / "data"
    with boxmq.open(data, fsync="never") as box:
        box.queue("jobs")

    async def scenario(kill_and_start_again: Callable[[], None]) -> None:
        async with clients(prosody, "alice") as [alice]:
            await _wait_for_service(alice)
            assert (await alice.subscribe(1)).get("type") == "result"
            kill_and_start_again()
            event = await alice.next_event()
            assert (event.what, event.item) == ("subscription", "none")
            assert event.payload is not None
            assert (event.payload.get("node"), event.payload.get("jid")) == (
                "jobs",
                "alice@localhost",
            )
            assert (await alice.subscribe(1)).get("type") == "result"  # what it does then

    _served_across_a_kill(prosody, data, scenario)


def test_a_topic_nodes_items_end_with_the_component_killed(
    prosody: Prosody, tmp_path: Path
) -> None:
    # The XMPP subscribers of a topic node are the share group $share/xmpp/<node>, which
    # lives while it has members; they live in the component's memory, bound to its process.
    # After a SIGKILL the next start's recovery ends the group with what it holds (the item
    # delivered and not retracted, the one waiting) before anyone can subscribe again: the
    # subscriber gets neither again, nor twice, only what is published after (docs/xmpp.md).
    data = tmp_path / "data"
    boxmq.open(data, fsync="never").close()  # the root made before serve opens it
    node = "sensors/1"

    async def scenario(kill_and_start_again: Callable[[], None]) -> None:
        async with clients(prosody, "alice", "carol") as [alice, carol]:
            await _wait_for_service(alice)
            assert (await alice.subscribe(1, node)).get("type") == "result"
            before = [await carol.publish(f"<n xmlns='urn:example'>{i}</n>", node) for i in (1, 2)]
            assert (await alice.next_event()).item == before[0]  # held; the other waits
            kill_and_start_again()
            assert (await alice.next_event()).what == "subscription"  # none: it ended
            assert (await alice.subscribe(1, node)).get("type") == "result"
            after = await carol.publish("<n xmlns='urn:example'>3</n>", node)
            assert (await alice.next_event()).item == after
            stored = [path.name for path in data.rglob("*")]
            assert not [name for name in stored if any(item in name for item in before)]

    _served_across_a_kill(prosody, data, scenario)


def test_serve_with_the_servers_raised_stanza_limit_sends_items_up_to_it(
    roomy_prosody: Prosody, tmp_path: Path
) -> None:
    # 512 KiB was fixed in the component: with Prosody's component_stanza_size_limit raised
    # to 1 MiB, a 600 kB item put by the API still went to error/, never sent.
    data = tmp_path / "data"
    with boxmq.open(data, fsync="never") as box:
        item = box.queue("jobs").put(b"x" * 600_000)
    process = _serve(roomy_prosody, data, SECRET, "--xmpp-stanza-size-limit", str(2**20))
    said = _drained(process)

    async def scenario() -> None:
        async with clients(roomy_prosody, "alice") as [alice]:
            await _wait_for_service(alice)
            await alice.subscribe(1)
            event = await asyncio.wait_for(alice.events.get(), 5)
            assert (event.what, event.item) == ("item", item)
            assert event.payload is not None
            assert event.payload.text == "x" * 600_000
            assert (await alice.retract(item)).get("type") == "result"

    try:
        run(scenario())
    finally:
        stop(process, seconds=10)
        output = said.text()
        assert process.stdout is not None
        process.stdout.close()
    assert process.returncode == 0, output
    assert "error/" not in output, output


def test_the_component_reconnects_and_keeps_its_subscribers(
    prosody: Prosody, tmp_path: Path
) -> None:
    box = boxmq.open(tmp_path / "data", fsync="never")
    box.queue("jobs")

    async def scenario() -> None:
        async with (
            component(prosody, box) as running,
            clients(prosody, "alice", "carol") as [alice, carol],
        ):
            await alice.subscribe(1)
            assert running.transport is not None
            running.transport.abort()  # the server "goes away"
            await asyncio.sleep(0.1)
            await asyncio.wait_for(running.connected.wait(), TIMEOUT)
            item = await carol.publish("<job xmlns='urn:example'>after</job>")
            assert (await alice.next_event()).item == item

    run(scenario())
    box.close()


def test_nothing_is_delivered_while_the_component_is_disconnected(
    prosody: Prosody, tmp_path: Path
) -> None:
    # docs/xmpp.md: a reconnect loses no item. But items put while the server was away were
    # locked to subscribers who could not hear of them, timed out unseen, one delivery each
    # time: with two subscribers and a 0.3 s lock timeout an item was in error/ within 2 s of
    # an outage, never seen (with the 30 s default: an outage of three minutes).
    box = boxmq.open(tmp_path / "data", fsync="never")
    jobs = box.queue("jobs")

    async def scenario() -> None:
        async with (
            component(prosody, box) as running,
            clients(prosody, "alice", "bob") as [alice, bob],
        ):
            await alice.subscribe(1)
            await bob.subscribe(1)
            # Its reconnect (due 0.5 s after it noticed) waits for the checks below: a put
            # and six rounds of the timer could take longer than that on a loaded machine,
            # and the checks then ran with the server back.
            back = asyncio.Event()
            reconnect = running._reconnect
            held: list[asyncio.Future[None]] = []  # the reconnect waiting (kept from the GC)

            def reconnect_once_told() -> None:
                async def when_told() -> None:
                    await back.wait()
                    reconnect()

                held.append(asyncio.ensure_future(when_told()))

            running._reconnect = reconnect_once_told  # type: ignore[method-assign]
            assert running.transport is not None
            running.transport.abort()  # the server goes away
            for _ in range(500):  # what comes before it notices, the door cannot know
                if not running.connected.is_set():
                    break
                await asyncio.sleep(0.01)
            item = jobs.put(b"while away")
            await asyncio.sleep(0.3)  # six rounds of the timer
            assert not running.connected.is_set()
            assert jobs.counts().ready == 1  # waiting, not locked to someone who cannot hear
            back.set()
            await asyncio.wait_for(running.connected.wait(), TIMEOUT)
            heard = await asyncio.wait_for(first_to_hear(alice, bob), TIMEOUT)
            first = heard.events.get_nowait()
            assert first.item == item

    run(scenario())
    box.close()


def _assured(kind: str, msg_id: str, body: str = "") -> str:
    inner = f"<message xmlns='jabber:client'><body>{body}</body></message>" if body else ""
    return f"<{kind} xmlns='{ns.QOS}' msgId='{msg_id}'>{inner}</{kind}>"


def test_assured_delivery_with_duplicates_arrives_once(prosody: Prosody, tmp_path: Path) -> None:
    box = boxmq.open(tmp_path / "data", fsync="never")
    box.queue("jobs")

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "bob", "carol") as [bob, carol]:
            bob.auto_retract = True
            await bob.subscribe(5)
            node = f"jobs@{SERVICE}"
            for msg_id in ("m1", "m2"):
                for _ in range(3):  # the sender retries: each step is idempotent
                    reply = await carol.request(_assured("assured", msg_id, msg_id), to=node)
                    assert reply.find(f"{{{ns.QOS}}}received") is not None
                for _ in range(2):
                    reply = await carol.request(_assured("deliver", msg_id), to=node)
                    assert reply.get("type") == "result"
            for _ in range(100):
                if len(bob.received) >= 2 and box.queue("jobs").counts().done == 2:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # room for a duplicate to show up, if there were one
            assert len(bob.received) == 2
            assert box.queue("jobs").counts().done == 2

    run(scenario())
    box.close()


@pytest.mark.parametrize("level", ["acknowledged", "assured"])
def test_notifications_at_the_subscribers_qos_level(
    prosody: Prosody, tmp_path: Path, level: str
) -> None:
    box = boxmq.open(tmp_path / "data", fsync="never")
    box.queue("jobs")
    count = 20

    async def scenario() -> None:
        async with component(prosody, box), clients(prosody, "alice", "carol") as [alice, carol]:
            alice.auto_retract = True
            assert (await alice.subscribe(3, qos=level)).get("type") == "result"
            items = [
                await carol.publish(f"<job xmlns='urn:example'>{n}</job>") for n in range(count)
            ]
            for _ in range(200):
                if box.queue("jobs").counts().done == count:
                    break
                await asyncio.sleep(0.05)
            assert sorted(alice.received) == sorted(items)  # each once, through the QoS iqs
            steps = 2 if level == "assured" else 1
            assert alice.qos_requests == count * steps

    run(scenario())
    assert box.queue("jobs").counts().done == count
    box.close()


@pytest.mark.parametrize(("host", "shown"), [("127.0.0.1", "127.0.0.1"), ("::1", "[::1]")])
def test_an_unreachable_server_is_logged_and_retried_within_reconnect_max(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, host: str, shown: str
) -> None:
    # docs/xmpp.md: retried with a doubling back-off up to 30 s. With nothing listening at
    # the address, slixmpp's own back-off (3, 9, 21 ... 300 s) applied, and nothing was logged:
    # a mistyped --xmpp-server left the operator with a silent broker. An IPv6 address is
    # written in brackets, as cli.md asks it typed: `::1:5347` was the line's before 2026-12-03.
    port = free_port()  # closed again: nothing listens there
    settings = XmppSettings("queue.localhost", host, port, SECRET, reconnect_max=0.5)

    async def scenario() -> None:
        stop = asyncio.Event()
        with boxmq.open(tmp_path / "data", fsync="never") as box:
            task = asyncio.ensure_future(run_component(box, settings, stop))
            await asyncio.sleep(4)
            stop.set()
            await task

    with caplog.at_level(logging.WARNING, logger="boxmq.xmpp"):
        run(scenario())
    failures = logged(caplog, "cannot reach")
    assert len(failures) >= 4, failures  # about one a second (before: 2, at 0 s and 3 s)
    assert f"the XMPP server at {shown}:{port} (" in failures[0]
    assert "--xmpp-server" in failures[0]


def test_the_component_is_logged_by_its_domain_and_the_typed_name_said_once(
    prosody: Prosody, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # --xmpp-component Queue.Example. serves queue.example (records, the handshake), but its
    # log lines named it as typed: an operator grepping the logs for the name the server
    # shows found neither its connection nor its refusal.
    typed = SERVICE.upper() + "."
    settings = XmppSettings(typed, "127.0.0.1", prosody.component_port, SECRET)

    async def scenario() -> None:
        stop = asyncio.Event()
        with boxmq.open(tmp_path / "a", fsync="never") as box:
            first = asyncio.ensure_future(run_component(box, settings, stop))
            while f"XMPP component {SERVICE} connected" not in caplog.text:
                assert not first.done(), caplog.text
                await asyncio.sleep(0.05)
            other = boxmq.open(tmp_path / "b", fsync="never")
            with other, pytest.raises(ComponentRefused) as refused:
                await run_component(other, settings, asyncio.Event())
            assert str(refused.value).startswith(
                f"the XMPP server refused component {SERVICE}: "
            ), refused.value
            stop.set()
            await first

    with caplog.at_level(logging.INFO, logger="boxmq.xmpp"):
        run(scenario())
    typed_lines = logged(caplog, typed)
    # once per start, each saying which domain it serves
    assert len(typed_lines) == 2, typed_lines
    assert all(f"as {SERVICE}" in line for line in typed_lines), typed_lines


def test_a_component_stopped_while_it_retries_tries_no_more(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # stop() ended the stream only when one was open: a component stopped between two tries
    # kept trying, and a try that connected after its event loop had ended left an open
    # socket behind (a ResourceWarning in whichever test collected it).
    port = free_port()  # nothing listens there yet
    settings = XmppSettings("queue.localhost", "127.0.0.1", port, SECRET, reconnect_max=0.5)

    async def scenario() -> None:
        stop = asyncio.Event()
        with boxmq.open(tmp_path / "data", fsync="never") as box:
            task = asyncio.ensure_future(run_component(box, settings, stop))
            await until_async(lambda: logged(caplog, "cannot reach"), "never tried")
            stop.set()
            await task
            heard: list[object] = []

            def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                heard.append(writer.get_extra_info("peername"))
                writer.close()

            server = await asyncio.start_server(answer, "127.0.0.1", port)
            async with server:
                await asyncio.sleep(1.5)  # three times reconnect_max
            assert heard == []

    with caplog.at_level(logging.WARNING, logger="boxmq.xmpp"):
        run(scenario())
