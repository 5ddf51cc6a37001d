"""Where a Will meets its session (MQTT 5.0 §3.1.2.5, §3.1.3.2.2): a Will Delay Interval longer
than the session, over real sockets and paho clients, each case under a few seconds."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from tests.integration.mqtt.clients import (
    WAIT,
    RunningServer,
    drop,
    loop_stopped,
    paho,
    paho_properties,
    recorded_away,
    recorded_will_sent,
    serve_fresh,
    serve_process,
    start_server,
    stop_process,
)
from tests.integration.mqtt.raw import connect_packet_311, open_raw, packet, publish, read

from boxmq.clock import ManualClock
from boxmq.mqtt.session import NEVER
from boxmq.mqtt.session_record import read_record
from boxmq.mqtt.settings import Limits, MqttSettings


def _left_with_will(server: RunningServer, client_id: str, *, expiry: int, will_delay: int) -> None:
    """`client_id` connected over a raw socket with a delayed Will ("gone" to wills/<client_id>)
    and closed it without a DISCONNECT, and the server recorded it away."""
    sock, _ = open_raw(
        server,
        client_id,
        expiry=expiry,
        will=(f"wills/{client_id}", b"gone"),
        will_delay=will_delay,
    )
    sock.close()  # no DISCONNECT: the Will waits for the delay or the session's end
    recorded_away(server.root, client_id)


def test_a_will_delay_longer_than_the_session_sends_the_will_when_the_session_ends(
    tmp_path: Path,
) -> None:
    """Session Expiry 10 s, Will Delay 30 s: the Will goes out when the session ends, 10 s
    after the close on the broker's clock (moved here, not waited for), not 30 s later
    ("until the Will Delay Interval has passed or the Session ends, whichever happens
    first", §3.1.3.2.2), and the session is gone."""
    clock = ManualClock(time.time())
    with start_server(tmp_path / "root", clock=clock) as server:
        watcher = paho(server, "watcher")
        watcher.subscribe("wills/#", 1)
        _left_with_will(server, "short", expiry=10, will_delay=30)
        clock.advance(9)
        assert watcher.nothing(0.5)  # the session's last second runs (two ticks)
        clock.advance(2)
        will = watcher.next(timeout=WAIT)
        assert (will.topic, will.payload) == ("wills/short", b"gone")
        assert not paho(server, "short", clean=False, expiry=60).session_present
        assert watcher.nothing(0.3)  # once


def _disconnect(reason: int, expiry: int) -> bytes:
    """A v5 DISCONNECT with `reason` and a Session Expiry Interval of `expiry` seconds."""
    properties = b"\x11" + expiry.to_bytes(4, "big")
    return packet(0xE0, bytes([reason, len(properties)]) + properties)


def test_a_disconnect_that_raises_session_expiry_from_0_is_a_protocol_error_and_sends_the_will(
    server: RunningServer,
) -> None:
    """CONNECT with Session Expiry 0, then DISCONNECT 0x00 asking for 60 s: "a Protocol
    Error" (§3.14.2.2.2), so the server answers DISCONNECT 0x82 and closes, and since the
    client's DISCONNECT was no normal one, its Will goes out (§3.1.2.5), once."""
    watcher = paho(server, "watcher")
    watcher.subscribe("wills/#", 1)
    sock, _ = open_raw(server, "raiser", expiry=0, will=("wills/raiser", b"gone"))
    with sock:
        sock.sendall(_disconnect(0x00, 60))
        assert read(sock) == (0xE0, b"\x82")  # Protocol Error
        assert read(sock) == (0, b"")  # closed
    will = watcher.next(timeout=WAIT)
    assert (will.topic, will.payload) == ("wills/raiser", b"gone")
    assert watcher.nothing(0.3)


@pytest.mark.parametrize("expiry", [1, 0])
def test_a_disconnect_with_will_that_shortens_the_session_sends_the_will_at_its_new_end(
    server: RunningServer, expiry: int
) -> None:
    """CONNECT with Session Expiry 60 s and Will Delay 30 s, then DISCONNECT 0x04 (Disconnect
    with Will Message) setting the expiry to 1 s, or 0: the Will goes out when the session, as
    the DISCONNECT left it, ends, a second after the close, or at once (§3.14.2.2.2,
    §3.1.3.2.2; docs/mqtt.md's table of how boxmq and mosquitto differ names the 0)."""
    watcher = paho(server, "watcher")
    watcher.subscribe("wills/#", 1)
    sock, _ = open_raw(server, "leaving", expiry=60, will=("wills/leaving", b"gone"), will_delay=30)
    with sock:
        closed = time.monotonic()  # before the send: the server's count starts at its read
        sock.sendall(_disconnect(0x04, expiry))
        assert read(sock) == (0, b"")  # closed, with no answer
    will = watcher.next(timeout=WAIT)
    waited = time.monotonic() - closed
    assert (will.topic, will.payload) == ("wills/leaving", b"gone")
    assert expiry - 0.1 < waited < 10, f"the Will came {waited:.2f} s after the DISCONNECT"
    assert not paho(server, "leaving", clean=False, expiry=60).session_present


def _will(topic: str, payload: bytes, **properties: object) -> Callable[[mqtt.Client], None]:
    """A paho `configure` that sets a QoS 1 Will with these Will Properties."""

    def configure(client: mqtt.Client) -> None:
        will_properties = paho_properties(PacketTypes.WILLMESSAGE, **properties)
        client.will_set(topic, payload, 1, properties=will_properties)

    return configure


def test_a_will_carries_its_will_properties_to_its_subscribers(server: RunningServer) -> None:
    """Payload Format Indicator, Message Expiry Interval, Content Type, Response Topic,
    Correlation Data and User Properties of a Will go out with it (MQTT 5.0 §3.1.3.2.3 to
    §3.1.3.2.8), the User Properties in their order (MQTT-3.1.3-10)."""
    watcher = paho(server, "watcher")
    watcher.subscribe("wills/#", 1)
    pairs = [("z", "1"), ("a", "2"), ("z", "3")]
    dying = paho(
        server,
        "rich",
        configure=_will(
            "wills/rich",
            b"gone",
            PayloadFormatIndicator=1,
            MessageExpiryInterval=100,
            ContentType="text/plain",
            ResponseTopic="replies/rich",
            CorrelationData=b"\x00\x01",
            UserProperty=pairs,
        ),
    )
    drop(dying)
    will = watcher.next(timeout=WAIT)
    assert (will.topic, will.payload) == ("wills/rich", b"gone")
    told = will.properties
    assert told.PayloadFormatIndicator == 1
    assert 90 <= told.MessageExpiryInterval <= 100
    assert (told.ContentType, told.ResponseTopic) == ("text/plain", "replies/rich")
    assert told.CorrelationData == b"\x00\x01"
    assert told.UserProperty == pairs


def test_an_away_sessions_will_holds_user_properties_far_past_65535_bytes(
    server: RunningServer,
) -> None:
    """A Will's payload is at most 65,535 bytes, but its User Properties may fill the rest of
    `max_packet_size` (1 MiB): an away session holds all of it, in its record on disk and in
    memory, until its delay runs out (docs/security.md said a Will held at most 65,535
    bytes; 60 away sessions with a Will of 1 MB of User Properties held 90 MB)."""
    watcher = paho(server, "watcher")
    watcher.subscribe("wills/#", 1)
    pairs = [(f"k{n:03}", "v" * 1000) for n in range(500)]  # 503,000 bytes of strings
    heavy = paho(
        server,
        "heavy",
        clean=False,
        expiry=60,
        configure=_will("wills/heavy", b"gone", WillDelayInterval=2, UserProperty=pairs),
    )
    drop(heavy)
    recorded_away(server.root, "heavy")
    record = read_record(str(server.root), "heavy")
    assert record is not None
    assert record.will is not None
    assert sum(len(k) + len(v) for k, v in record.will.properties.user_properties) > 500_000
    will = watcher.next(timeout=WAIT)
    assert (will.topic, will.payload) == ("wills/heavy", b"gone")
    assert will.properties.UserProperty == pairs


def test_a_wills_message_expiry_counts_while_its_subscriber_is_away(
    server: RunningServer,
) -> None:
    """A Will's Message Expiry Interval is its Publication Expiry Interval (§3.1.3.2.4): a
    persistent subscriber away for 2.5 s is not sent the Will that lived 1 s, and is sent the one
    that lives 60 s with what is left of it (MQTT-3.3.2-5, MQTT-3.3.2-6)."""
    away = paho(server, "away", clean=False, expiry=60)
    away.subscribe("wills/#", 1)
    away.stop()
    brief = paho(server, "brief", configure=_will("wills/brief", b"b", MessageExpiryInterval=1))
    lasting = paho(
        server, "lasting", configure=_will("wills/lasting", b"l", MessageExpiryInterval=60)
    )
    drop(brief)
    drop(lasting)
    time.sleep(2.5)
    back = paho(server, "away", clean=False, expiry=60)
    assert back.session_present
    will = back.next(timeout=WAIT)
    assert (will.topic, will.payload) == ("wills/lasting", b"l")
    # Counted down from its publication, which a loaded server makes when it reads the
    # dropped connection, up to a second after the drop: 58 at once, 59 at worst (seen in the
    # whole suite's run), never the 60 it was published with.
    assert will.properties.MessageExpiryInterval <= 59
    assert back.nothing(0.5)  # not the brief one


def test_a_311_clients_will_goes_out_when_its_keep_alive_runs_out(server: RunningServer) -> None:
    """A 3.1.1 client with Keep Alive 1 s falls silent, its socket left open: after 1.5 s the
    server closes the connection "as if the network had failed" (3.1.1 MQTT-3.1.2-24), and
    that sends its Will (3.1.1 MQTT-3.1.2-8, §3.1.2.5), which a paho 3.1.1 watcher gets."""
    watcher = paho(server, "watcher", v5=False)
    watcher.subscribe("wills/#", 1)
    connect = connect_packet_311("quiet", keep_alive=1, will=("wills/quiet", b"gone"), will_qos=1)
    with socket.create_connection((server.host, server.port), timeout=WAIT) as sock:
        # Timed from the CONNECT's send, the last packet the client sends: the server's count
        # starts when it reads it, later, never earlier. Timed from the CONNACK's read, a
        # loaded machine's late read ate into the 1.5 s (the Will came "1.33 s" after it).
        sent = time.monotonic()
        sock.sendall(connect)
        assert read(sock) == (0x20, b"\x00\x00")  # CONNACK, accepted
        will = watcher.next(timeout=WAIT)
        waited = time.monotonic() - sent
        assert read(sock) == (0, b"")  # closed, with no DISCONNECT in 3.1.1
    assert (will.topic, will.payload, will.qos) == ("wills/quiet", b"gone", 1)
    assert waited >= 1.5, f"the Will came {waited:.2f} s into a 1 s Keep Alive"


# -- a `boxmq serve` stopped or killed while a Will waits ------------------------------------------


def _watcher_away(address: RunningServer) -> None:
    """A durable subscriber to wills/#, left away without a DISCONNECT, for `paho(address,
    "watcher", clean=False, expiry=60)` to take up after a restart."""
    watcher = paho(address, "watcher", clean=False, expiry=60)
    watcher.subscribe("wills/#", 1)
    loop_stopped(watcher.client)


def test_a_sigterm_closes_a_connected_clients_session_and_its_delayed_will_goes_after_it(
    tmp_path: Path,
) -> None:
    """`boxmq serve` stopped (SIGTERM) while a persistent client with a Will Delay of 2 s is
    connected: the stop closes its connection without a DISCONNECT of the client's, so its
    record keeps the Will, due 2 s after the stop (§3.1.3.2.2), and the next start sends it,
    once, to a durable subscriber. A non-persistent client's Will, which cannot outlast its
    session, went out at the stop: that subscriber is sent it first."""
    address, process = serve_fresh(tmp_path)
    try:
        _watcher_away(address)  # away at the restart: its durable subscription keeps it
        loop_stopped(paho(address, "held", clean=False, expiry=60,
                          will=("wills/held", b"gone", 1), will_delay=2).client)  # fmt: skip
        loop_stopped(paho(address, "brief", will=("wills/brief", b"bye", 1)).client)
        stopped = time.time()
        stop_process(process)
        record = read_record(str(address.root), "held")
        assert record is not None
        assert record.will is not None
        assert record.disconnected_at is not None
        assert stopped - 1 < record.disconnected_at < time.time()  # the close is the stop
        assert record.will_due == record.disconnected_at + 2
        process = serve_process(address.root, address.port)
        back = paho(address, "watcher", clean=False, expiry=60)
        at_the_stop = back.next(timeout=WAIT)
        assert (at_the_stop.topic, at_the_stop.payload) == ("wills/brief", b"bye")
        will = back.next(timeout=WAIT)
        assert (will.topic, will.payload) == ("wills/held", b"gone")
        assert time.time() >= record.will_due - 0.1  # not before its delay
        assert back.nothing(0.5)  # once
        recorded_will_sent(address.root, "held")  # a next start sends nothing
    finally:
        stop_process(process)


def test_a_will_delay_longer_than_the_session_still_ends_with_it_across_a_sigkill(
    tmp_path: Path,
) -> None:
    """A client left (no DISCONNECT) with Session Expiry 2 s and Will Delay 30 s; `boxmq
    serve` is killed (SIGKILL) and started again: the time it was down counts, and the Will
    goes out when the session ends, 2 s after the close, not 30 s (§3.1.3.2.2), the session
    gone with it."""
    address, process = serve_fresh(tmp_path)
    try:
        _watcher_away(address)
        _left_with_will(address, "short", expiry=2, will_delay=30)
        record = read_record(str(address.root), "short")
        assert record is not None
        assert record.disconnected_at is not None
        assert record.will_due == record.disconnected_at + 2  # the session's end, not 30 s
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=WAIT)
        process = serve_process(address.root, address.port)
        due = max(time.time(), record.will_due)  # at once if it fell due while it was down
        back = paho(address, "watcher", clean=False, expiry=60)
        will = back.next(timeout=WAIT)
        assert (will.topic, will.payload) == ("wills/short", b"gone")
        assert record.will_due - 0.1 <= time.time() < due + 10
        assert back.nothing(0.3)
        assert not paho(address, "short", clean=False, expiry=60).session_present
    finally:
        stop_process(process)


def test_a_session_asked_for_never_ends_at_the_servers_limit_and_sends_its_delayed_will(
    tmp_path: Path,
) -> None:
    """Session Expiry 0xFFFFFFFF ("never") under `max_session_expiry = 1`: the session the
    client is told of (CONNACK 1 s, §3.2.2.3.2) is the one that ends, so its Will Delay of 30
    s gives way and the Will goes out a second after the close (§3.1.3.2.2)."""
    limits = MqttSettings(limits=Limits(max_session_expiry=1))
    with start_server(tmp_path / "root", limits) as server:
        watcher = paho(server, "watcher")
        watcher.subscribe("wills/#", 1)
        forever = paho(server, "forever", clean=False, expiry=NEVER,
                       will=("wills/forever", b"gone", 1), will_delay=30)  # fmt: skip
        assert forever.connack_properties.SessionExpiryInterval == 1
        closed = time.monotonic()
        drop(forever)
        will = watcher.next(timeout=WAIT)
        waited = time.monotonic() - closed
        assert (will.topic, will.payload) == ("wills/forever", b"gone")
        assert waited < 10, f"the Will came {waited:.2f} s after the close"
        # The Will goes with the session's end, right before it (Lifetimes, Wills.send_early):
        # reconnecting the moment it is seen, its client finds no session.
        assert not paho(server, "forever", clean=False, expiry=NEVER).session_present


def test_a_delayed_wills_message_expiry_counts_from_its_publication_not_the_close(
    server: RunningServer,
) -> None:
    """Will Delay 4 s, Message Expiry 6 s, a persistent subscriber away: the Will is published
    4 s after the close and lives 6 s from then (§3.1.3.2.4: its Publication Expiry Interval),
    so the subscriber back 7 s after the close is sent it, with what is left of it; counted
    from the close, it would have expired a second before. The return waits for the Will's
    publication, seen by a watcher, and comes 1.5 s after it at least: however late a loaded
    server publishes it, the Will has 4.5 s to live then, and has been counted down."""
    away = paho(server, "away", clean=False, expiry=60)
    away.subscribe("wills/#", 1)
    away.stop()
    watcher = paho(server, "watcher")
    watcher.subscribe("wills/#", 1)
    will_properties = {"WillDelayInterval": 4, "MessageExpiryInterval": 6}
    dying = paho(server, "late", clean=False, expiry=60,
                 configure=_will("wills/late", b"gone", **will_properties))  # fmt: skip
    sock = dying.client.socket()
    assert sock is not None
    loop_stopped(dying.client)
    closed = time.monotonic()
    sock.close()  # no DISCONNECT: the Will waits its delay
    seen = watcher.next(timeout=4 + WAIT)  # published
    assert (seen.topic, seen.payload) == ("wills/late", b"gone")
    time.sleep(max(1.5, closed + 7 - time.monotonic()))
    back = paho(server, "away", clean=False, expiry=60)
    will = back.next(timeout=WAIT)
    assert (will.topic, will.payload) == ("wills/late", b"gone")
    assert 0 < will.properties.MessageExpiryInterval < 6


@pytest.mark.parametrize("delay", [None, 1])
def test_a_takeover_sends_the_old_connections_will_unless_its_delay_lets_the_resume_cancel_it(
    server: RunningServer, delay: int | None
) -> None:
    """The same client id connects again, Clean Start 0, over a raw socket: the old connection
    is told DISCONNECT 0x8E and closed (MQTT-3.1.4-3) without a DISCONNECT of its own, so its
    Will goes out at once when it has no delay (§3.1.2.5); with a delay of 1 s the resumed
    session cancels it (MQTT-3.1.3-9), and it is still not sent once that second is past."""
    watcher = paho(server, "watcher")
    watcher.subscribe("wills/#", 1)
    old, _ = open_raw(server, "twice", expiry=60, will=("wills/twice", b"gone"), will_delay=delay)
    new, present = open_raw(server, "twice", expiry=60)
    with old, new:
        assert present
        assert read(old) == (0xE0, b"\x8e")  # Session taken over
        assert read(old) == (0, b"")
        if delay is None:
            will = watcher.next(timeout=WAIT)
            assert (will.topic, will.payload) == ("wills/twice", b"gone")
        assert watcher.nothing(delay + 1.0 if delay else 0.5)


@pytest.mark.parametrize("last_word", [b"offline", b""])
def test_a_retained_will_replaces_its_topics_retained_message_or_clears_it_when_empty(
    server: RunningServer, last_word: bytes
) -> None:
    """A device publishes "online" retained, and its Will (raw CONNECTs set Will Retain) is
    "offline" or empty: once its connection breaks, a late subscriber finds the Will instead
    of "online" (MQTT-3.1.2-15, MQTT-3.3.1-5), or, for an empty one, nothing: a retained
    message of zero bytes removes the one its topic had (MQTT-3.3.1-6)."""
    watcher = paho(server, "watcher")
    watcher.subscribe("status/#", 1)
    device, _ = open_raw(server, "device", expiry=0, will=("status/device", last_word))
    with device:
        device.sendall(publish("status/device", b"online", qos=1, packet_id=1, retain=True))
        assert read(device)[0] == 0x40  # PUBACK: "online" is stored
    assert watcher.next(timeout=WAIT).payload == b"online"
    assert watcher.next(timeout=WAIT).payload == last_word  # the Will went out
    late = paho(server, "late")
    late.subscribe("status/#", 1)
    if last_word:
        message = late.next(timeout=WAIT)
        assert (message.topic, message.payload) == ("status/device", last_word)
        assert message.retain
    assert late.nothing(0.5)


def test_a_delayed_will_the_acl_refuses_after_a_restart_is_not_sent(tmp_path: Path) -> None:
    """A Will is checked against the ACL when it is due, not at its CONNECT (docs/mqtt.md):
    a client's delayed Will, accepted under an ACL that let it write `wills/#`, waits out its
    delay across a SIGTERM; the ACL file loses that right before the restart, so the Will
    goes to nobody and the log says why."""
    acl = tmp_path / "acl"
    acl.write_text("pattern readwrite #\n")
    config = tmp_path / "boxmq.toml"
    config.write_text('[security]\nacl_file = "acl"\n')
    address, process = serve_fresh(tmp_path, "--config", str(config))
    try:
        _watcher_away(address)
        _left_with_will(address, "dev", expiry=60, will_delay=1)
        stop_process(process)
        acl.write_text("pattern read #\n")  # dev may no longer write its Will's topic
        process = serve_process(address.root, address.port, "--config", str(config))
        back = paho(address, "watcher", clean=False, expiry=60)
        assert back.nothing(2.0)  # past the Will's due time
        log = (tmp_path / "serve.log").read_text()
        assert "client dev may not publish its will to wills/dev" in log
    finally:
        stop_process(process)


def test_a_clean_start_after_a_restart_sends_the_delayed_will_the_restart_took_on(
    tmp_path: Path,
) -> None:
    """A client left with a Will Delay of 30 s and the server was restarted: the restart
    counts that delay from the record, and the client's return with Clean Start 1 ends the
    session, so the Will goes out at once (§3.1.3.2.2), and once, not 30 s later."""
    root = tmp_path / "root"
    with start_server(root) as first:
        _left_with_will(first, "back", expiry=60, will_delay=30)
    with start_server(root) as second:
        watcher = paho(second, "watcher")
        watcher.subscribe("wills/#", 1)
        assert watcher.nothing(0.3)  # its delay runs
        assert not paho(second, "back", clean=True, expiry=0).session_present
        will = watcher.next(timeout=WAIT)
        assert (will.topic, will.payload) == ("wills/back", b"gone")
        assert watcher.nothing(0.5)
