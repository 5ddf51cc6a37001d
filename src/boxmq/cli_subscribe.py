"""`boxmq subscribe` and `boxmq unsubscribe`: a topic filter's messages printed as they come,
and the end of a kept subscription.

`cli` defines their arguments and imports this module when one of them runs: `put`, `get`,
`ack` and `ls` need none of it (tests/unit/test_light_imports.py).
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import time
from collections.abc import Iterator

from boxmq import cli_output as output
from boxmq.cli_dropbox import client_named, goes_by
from boxmq.client import Box, Message
from boxmq.core.topics import SHARE_PREFIX, parse_filter
from boxmq.errors import InvalidArgument, LockError, QueueNotFound
from boxmq.mqtt.brokers import client_s_broker
from boxmq.mqtt.session_record import SessionRecord, record_named
from boxmq.store.process import process_alive, token_pid
from boxmq.xmpp.subscriptions import topic_node_of

__all__ = ["subscribe", "unsubscribe"]


def subscribe(args: argparse.Namespace, box: Box) -> int:
    _refuse_an_mqtt_session(box, args.filter, args.subscriber, unsubscribe=False)
    received = 0
    # SIGTERM (kill, systemd, docker stop) and SIGHUP (the terminal closed) end it as Ctrl-C
    # does: through the `finally` below, so that a plain subscription does not outlive the
    # command. SIGKILL skips that: see `ends_with_process` below. A SIGHUP that came ignored
    # stays so: `nohup` asked that the run outlive its terminal.
    stop = _Stop()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signum is signal.SIGHUP and signal.getsignal(signum) is signal.SIG_IGN:
            continue
        signal.signal(signum, stop)
    # Only a subscription (or share-group membership) this run made ends with it: one an
    # earlier `--keep` (or the Python API, or a Spark stream) made is read and left in place,
    # with what it holds for later.
    existed = box.topics.has_subscription(args.filter, args.subscriber)
    # Subscribing again replaces a plain subscription's QoS and No Local (pubsub.md): one that
    # existed keeps its own, an MQTT session's or the Python API's too, unless --qos says.
    # (A share group's QoS is its members' highest, and a member's own is not kept.)
    qos, no_local = 1, False
    if existed:
        record = box.topics.record_of(args.filter, args.subscriber)  # read once for both
        if record is not None and record.group is None:
            owner, qos, no_local = record.owner, record.qos, record.no_local
        else:
            owner = box.topics.bound_to(args.filter, args.subscriber)  # a member's process
        _refuse_a_second_run(args.filter, args.subscriber, owner)
    kept = args.keep or existed
    if args.qos is not None:
        qos = args.qos
    # A kept membership belongs to no process, so the sweep of dead processes' members
    # leaves it; only `boxmq unsubscribe` ends it. A plain subscription this run makes records
    # this process, so that a sweep (`boxmq serve`) ends it if the run dies without the
    # `finally` (SIGKILL, a crash): nobody would read what it collects.
    # Box's warning of a $SYS filter aside: `_before_subscribe` said it as a CLI says things.
    with box.topics.subscribe(
        args.filter,
        args.subscriber,
        qos=qos,
        no_local=no_local,
        process_bound=not kept,
        ends_with_process=not kept,
        send_retained=not existed,  # a new subscription's (pubsub.md): not again at each run
    ) as subscriber:
        shared = subscriber.filter.shared
        if kept and not args.keep:
            what = "membership of the share group" if shared else "subscription"
            # The command quoted for a shell, to be pasted as it is: unquoted, `$share/...`
            # lost its `$share` to the shell, and a name with a space was two words.
            ends = shlex.join(["boxmq", "unsubscribe", args.filter, "--name", args.subscriber])
            output.err(
                output.said(
                    f"boxmq subscribe: reading the kept {what} "
                    f"{output.of(args.filter, args.subscriber)}; it stays after this run "
                    f"(`{ends}` ends it)"
                ),
            )
        idle_until = None if args.idle is None else time.monotonic() + args.idle
        try:
            while stop.signum is None and (args.count is None or received < args.count):
                # In slices, so that a signal is seen between two of the library's steps.
                wait = _STOP_SLICE
                if idle_until is not None:
                    wait = min(wait, max(0.0, idle_until - time.monotonic()))
                message = subscriber.receive(timeout=wait)
                if message is None:
                    if idle_until is not None and time.monotonic() >= idle_until:
                        break
                    _stop_if_ended(box, args)
                    continue
                with stop.at_once():  # a write blocked on a full pipe ends at a signal
                    _print_message(args, message)
                try:
                    message.ack()
                except LockError as error:
                    # Its lock (30 s) ended while its line waited for a slow reader of the
                    # output: the message went back, and comes again. Not a reason to stop.
                    output.err(
                        f"boxmq subscribe: {error}: printed but not acked, its lock having "
                        "ended while the output waited for its reader; it may come again",
                    )
                received += 1
                if args.idle is not None:
                    idle_until = time.monotonic() + args.idle
        finally:
            if kept:
                # The subscription or membership stays, and what it received and did not ack
                # (the message a closed pipe or a signal interrupted) stays locked to it, to
                # come first to the next run (python.md: process_bound=False).
                subscriber.detach()
            elif not shared:
                box.unsubscribe(args.filter, args.subscriber)
            elif not box.topics.has_subscription(args.filter, args.subscriber):
                subscriber.detach()  # it left already (boxmq unsubscribe): none to leave again
    return 0 if stop.signum is None else 128 + stop.signum


_STOP_SLICE = 0.25  # seconds: how long a signal may wait for a subscribe waiting for messages


def _stop_if_ended(box: Box, args: argparse.Namespace) -> None:
    """QueueNotFound once `boxmq unsubscribe` from another shell ended what this run reads,
    asked when nothing came: a plain subscription gets nothing any more, and a share group's
    member ended so gets nothing either once its Subscriber saw the end (within a second:
    client/subscriber.py), and the run would wait for it, forever without --idle."""
    if not box.topics.has_subscription(args.filter, args.subscriber):
        raise QueueNotFound(
            f"{output.of(args.filter, args.subscriber)} was ended while this "
            "run read it (`boxmq unsubscribe`): nothing more can come to it"
        )


class _Stop:
    """The signal handler of `subscribe`: a signal is noted, and the loop ends at its next
    step. Raised where it came, as Python's own KeyboardInterrupt and a raising handler are,
    it could cut the library in the middle of a step (a lock released on disk, not yet in
    memory), and the close that followed failed on that half-done state: a traceback, and a
    share-group member that never left. Only our own write of a message, which may block on
    a full pipe for as long as its reader pleases, is cut at once (`at_once`)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._at_once = False

    def __call__(self, signum: int, frame: object) -> None:
        self.signum = signum
        if self._at_once:
            self._at_once = False
            raise SystemExit(128 + signum)

    @contextlib.contextmanager
    def at_once(self) -> Iterator[None]:
        if self.signum is not None:
            raise SystemExit(128 + self.signum)
        self._at_once = True
        try:
            yield
        finally:
            self._at_once = False


def _refuse_a_second_run(filter: str, subscriber: str, owner: str) -> None:
    """InvalidArgument if `subscriber`'s plain subscription to `filter`, or its membership of
    a share group, ends with another live process, `owner` (Topics.bound_to: a `boxmq
    subscribe` without --keep, a Python subscriber bound to its process): that one removes
    it when it ends, so this run would take it for kept, say it stays, share its messages,
    and stop when it ends. One whose process died without removing it is read (and kept) as
    before."""
    if not owner:
        return
    alive = process_alive(owner)
    if alive is False:
        return
    pid = token_pid(owner)
    where = "" if alive else " on another machine"
    ends = ["boxmq", "unsubscribe", filter, "--name", subscriber]  # quoted below, for a shell
    raise InvalidArgument(
        f"{output.of(filter, subscriber)} is read by another process ({pid}{where}), and ends "
        f"with it: give this run another --name ({_what_another_name_gets(filter)})"
        + ("" if alive else f", or end it with `{shlex.join(ends)}`")
    )


def _refuse_an_mqtt_session(box: Box, filter: str, subscriber: str, *, unsubscribe: bool) -> None:
    """InvalidArgument if `subscriber` is the name of an MQTT session kept on disk (its
    client connected or away; session_record.record_named), unless the subscription exists
    and is not the session's (made by this door or the API before: read or ended as any
    other). Its subscriptions are its client's: a run that read one took the messages that
    client was to get (or gets again when it returns); an unsubscribe removed a subscription
    its session record and its client still counted on, so that what came for it was lost
    without a word. And a new one under its name would be taken by the session if its
    client subscribed to that filter (one dropbox per filter and name)."""
    record = record_named(box.root, subscriber)
    if record is None:
        return
    if not record.made(filter) and box.topics.has_subscription(filter, subscriber):
        return  # made by this door or the API, never the session's (SessionRecord.made)
    # Its client id, not `subscriber`, its name on disk (`site%2F7` for `site/7`).
    what = (
        f"{output.cell(record.client_id)} is the client id of an MQTT session "
        f"({_session_state(record)})"
    )
    if unsubscribe:
        raise InvalidArgument(
            f"{what}: its session and its client would still count on {output.cell(filter)}, "
            "and wait for messages that no longer come. That client unsubscribes (UNSUBSCRIBE), or "
            "ends its whole session, its subscriptions and what they hold, by connecting "
            "once as itself with a clean start (clean session 1)"
        )
    raise InvalidArgument(
        f"{what}: its subscriptions and what they hold are its client's, and this run would "
        "take its messages or give it ones it never subscribed to. Give this run another "
        f"--name ({_what_another_name_gets(filter)})"
    )


def _refuse_a_connected_client(box: Box, filter: str, subscriber: str) -> None:
    """InvalidArgument if `subscriber`'s membership of the share group `filter` is that of a
    connected MQTT client whose session is not persistent: it has no record on disk to tell
    it (`_refuse_an_mqtt_session`), but its membership is bound to the process of the broker
    it is connected to (brokers.py), where a `boxmq subscribe` run's is bound to that run's.
    Ended here, the broker still counted it a member and sent to it; once the group's other
    members left, the group was deleted, and the client, still subscribed and connected, got
    nothing of what came (`publish` saying published). A topic node's XMPP subscriber is
    refused as well, its membership bound to the process serving the component, broker or
    not (`boxmq serve --no-mqtt` marks none)."""
    _refuse_an_xmpp_subscriber(box, filter, subscriber)
    broker = client_s_broker(box, filter, subscriber)
    if broker is None:
        return
    where = "" if process_alive(broker) else " on another machine"
    raise InvalidArgument(
        f"{output.cell(subscriber)} is the client id of an MQTT client connected to boxmq serve, "
        f"process {token_pid(broker)}{where}, and {output.cell(filter)} its own: that broker "
        "would still send to it as a member, and the client wait for messages that no longer "
        "come. That client unsubscribes (UNSUBSCRIBE), or disconnects: its session is not "
        "persistent, and its subscriptions end with its connection"
    )


def bound_xmpp_subscriber(box: Box, filter: str, subscriber: str) -> tuple[str, str] | None:
    """(its topic node, the process token it is bound to) if `subscriber`'s membership of
    `filter` is a topic node's XMPP subscriber's bound to a process that may still run (not
    known dead); else None."""
    node = topic_node_of(filter, subscriber)
    owner = box.topics.bound_to(filter, subscriber) if node is not None else ""
    if node is None or not owner or process_alive(owner) is False:
        return None
    return node, owner


def _refuse_an_xmpp_subscriber(box: Box, filter: str, subscriber: str) -> None:
    """InvalidArgument if `subscriber`'s membership of `filter` is a topic node's XMPP
    subscriber's (xmpp/subscriptions.py) bound to a process that may still run: the
    component still counts it a subscriber and sends it what comes; ended here, the group
    could be deleted under it, the subscriber getting nothing (the refusal beside MQTT
    called it an MQTT client, which it is not)."""
    bound = bound_xmpp_subscriber(box, filter, subscriber)
    if bound is None:
        return
    node, owner = bound
    where = "" if process_alive(owner) else " on another machine"
    raise InvalidArgument(
        f"{output.cell(subscriber)} is an XMPP subscriber of the topic node {node!r}, served by "
        f"the XMPP component of boxmq serve, process {token_pid(owner)}{where}, and "
        f"{output.cell(filter)} its own: the component would still send to it, and the "
        "subscriber wait for items that no longer come. That subscriber unsubscribes "
        "(XEP-0060 unsubscribe), or goes offline (unavailable presence), which ends its "
        "subscription"
    )


def _what_another_name_gets(filter: str) -> str:
    """What a run under another --name gets, for the refusals that ask for one: a member of a
    share group shares the group's messages with the others, it does not get every one."""
    return (
        "a member of its own" if filter.startswith(SHARE_PREFIX) else "each name gets every message"
    )


def _session_state(record: SessionRecord) -> str:
    """Where an MQTT session's client is, as its record says, for `_refuse_an_mqtt_session`."""
    if record.holder is not None:
        alive = process_alive(record.holder)
        pid = token_pid(record.holder)
        if alive is not False:
            where = "" if alive else " on another machine"
            return f"its client connected to boxmq serve, process {pid}{where}"
        return f"its client away: the boxmq serve it was connected to, process {pid}, stopped"
    away = "its client away"
    if record.disconnected_at is not None:
        away += f" since {output.when(record.disconnected_at)}"
    deadline = record.deadline()
    if deadline is None:
        return f"{away}; it lasts until its client connects with a clean start"
    return f"{away}; it ends at {output.when(deadline)} unless its client comes back"


def unsubscribe(args: argparse.Namespace, box: Box) -> int:
    _refuse_an_mqtt_clients(box, args.filter, args.subscriber)
    if not box.topics.has_subscription(args.filter, args.subscriber):
        raise _no_subscription(box, args.filter, args.subscriber)
    box.unsubscribe(args.filter, args.subscriber)
    record = {"subscription": args.filter, "subscriber": args.subscriber}
    text = f"unsubscribed: {output.cell(args.filter)} {output.cell(args.subscriber)}"
    output.emit(args, record, text)
    return 0


def _refuse_an_mqtt_clients(box: Box, filter: str, subscriber: str) -> None:
    """`unsubscribe`'s refusals of a subscription an MQTT client counts on: its persistent
    session's, or its connection's."""
    _refuse_an_mqtt_session(box, filter, subscriber, unsubscribe=True)
    _refuse_a_connected_client(box, filter, subscriber)


def _no_subscription(box: Box, filter: str, subscriber: str) -> QueueNotFound:
    """What `unsubscribe` says of a subscription that is not there. Given an MQTT client's id
    as `session ls` lists it (`site/7`, where `ls` shows `site%2F7`), the refusals of its
    name on disk are made first: it said `no subscription` alone, where `--name site%2F7` is
    refused, the subscription being its session's."""
    # Quoted, as peek and get of one that is not there say it: `--name ''` (a script's
    # empty variable) said "no subscription x for  (...)", the name nowhere to be seen.
    missing = (
        f"no subscription of {subscriber!r} to {filter!r} under {box.root} (`boxmq ls` lists them)"
    )
    on_disk = client_named(box, filter, subscriber)
    if on_disk is None:
        return QueueNotFound(missing)
    _refuse_an_mqtt_clients(box, filter, on_disk)
    return QueueNotFound(f"{missing}; {goes_by(subscriber, on_disk, '--name')}")


def _print_message(args: argparse.Namespace, message: Message) -> None:
    if args.json:
        record = {
            "topic": message.topic,
            "id": message.id,
            "qos": message.qos,
            "retained": message.retained,
            "properties": message.properties,
        }
        # After the body: where to answer, and with what, an MQTT v5 request's Response Topic
        # and Correlation Data too (store/v5_properties.py). Only when set, so other records
        # stay as they were.
        after: dict[str, object] = {}
        if (correlation_id := message.correlation_id) is not None:
            after["correlation-id"] = correlation_id
        if (reply_to := message.reply_to) is not None:
            after["reply-to"] = reply_to
        if message.expiration:  # a publish --expires-in (an MQTT Message Expiry), as get shows it
            after["expires"] = output.expires(message.envelope.expiration)
        # The body a chunk at a time, as get's: the whole record made at once took 18.6 times
        # a big body that is not UTF-8.
        output.out_json_with_body(record, message.body, after, flush_too=True)
    else:
        # The topic escaped, as get's header and the tables are (MQTT lets it hold a newline,
        # which would start a line of its own); the body as it is, as mosquitto_sub -v does.
        # A chunk at a time, as --json's: decoded whole, a big body that is not UTF-8 took
        # 7.5 to 12 times itself.
        topic = output.cell(message.topic or _topic_of_none(args.filter))
        output.out_text_with_body(f"{topic} ", message.body, flush_too=True)


def _topic_of_none(subscribed: str) -> str:
    """The topic a `topic body` line starts with for a message that names none: a file a
    script dropped into the dropbox (DropboxMQ's shortest name, `4.id.T`). Its line shows the
    filter, what the MQTT door sends it on when that is a topic name (mqtt/delivery.py), and
    plainly no topic when it has wildcards. It showed `None`, itself a topic name a publisher
    may use."""
    return parse_filter(subscribed).filter
