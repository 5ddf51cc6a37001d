"""What a command on one queue names: QUEUE, or a subscription as `boxmq ls` lists it (a share
group, $share/GROUP/FILTER, or a durable subscription's filter with --subscriber NAME), found
in the root, and the command line that a refusal suggests next for it."""

from __future__ import annotations

import argparse
import shlex

from boxmq import cli_output as output
from boxmq import cli_types as types
from boxmq.client import Box, Queue
from boxmq.core.topics import SHARE_PREFIX
from boxmq.errors import QueueNotFound


def add_arguments(p: argparse.ArgumentParser) -> None:
    """QUEUE, or a subscription as `boxmq ls` lists it (`get`, `peek`, `requeue`, `purge`,
    and the settles: `ack`, `unlock`, `reject`, `extend`)."""
    p.add_argument(
        "queue", type=types.queue_name, help="a queue; or a share group, $share/GROUP/FILTER"
    )
    p.add_argument(
        "--subscriber",
        metavar="NAME",
        help="QUEUE is the filter of NAME's durable subscription (ls: SUBSCRIBER)",
    )


def named(args: argparse.Namespace) -> dict[str, str]:
    """How `--json` names what `dropbox` found: the queue, and the subscriber if given."""
    named = {"queue": args.queue}
    if args.subscriber is not None:
        named["subscriber"] = args.subscriber
    return named


def is_subscription(args: argparse.Namespace, box: Box) -> bool:
    """Whether `args` names a share group or a durable subscription, not a queue: a name that
    is both a queue and a share group's ("$share/..." made a queue) is the queue."""
    if args.subscriber is not None:
        return True
    return bool(args.queue.startswith(SHARE_PREFIX) and args.queue not in box.queues())


def command_line(args: argparse.Namespace, command: str, *options: str) -> str:
    """`boxmq COMMAND` on the queue (or subscription) `args` names, quoted for a shell: the
    next step a refusal or an empty `get` suggests."""
    subscriber = [] if args.subscriber is None else ["--subscriber", args.subscriber]
    return shlex.join(["boxmq", command, args.queue, *subscriber, *options])


def dropbox(args: argparse.Namespace, box: Box) -> Queue:
    """The queue, share group or durable subscription `args` names (`is_subscription`)."""
    return found(args, box)[0]


def found(args: argparse.Namespace, box: Box) -> tuple[Queue, bool]:
    """`dropbox`, and whether it is a subscription (`is_subscription`), asked once: for a
    $share/ name that lists every queue of the root."""
    name, subscriber = args.queue, args.subscriber
    if is_subscription(args, box):
        try:
            return box.subscription(name, subscriber), True
        except QueueNotFound as error:
            if (on_disk := client_named(box, name, subscriber)) is None:
                raise
            raise QueueNotFound(
                f"{error}; {goes_by(subscriber, on_disk, '--subscriber')}"
            ) from None
    try:
        return box.queue(name, create=False), False
    except QueueNotFound as error:
        subscribers = [i.subscriber for i in box.topics.subscriptions() if i.filter == name]
        if not subscribers:
            raise
        raise QueueNotFound(
            f"{error}; {name!r} is the filter of the durable subscription(s) of "
            f"{output.cells(subscribers)}: add --subscriber NAME"
        ) from None


def goes_by(client_id: str, on_disk: str, flag: str) -> str:
    """The hint that an MQTT client's id is not its subscriptions' name on disk
    (`client_named`), and the `flag` (--subscriber, --name) that names them."""
    return (
        f"{client_id!r} is the id of an MQTT client, whose subscriptions go by {on_disk!r} "
        f"on disk (`boxmq ls`): give `{flag} {shlex.quote(on_disk)}`"
    )


def client_named(box: Box, filter: str, subscriber: str | None) -> str | None:
    """The name on disk of the subscription to `filter` of the MQTT client whose id is
    `subscriber`, when that differs and is there: `session ls` lists the client `site/7`,
    `ls` its subscription as `site%2F7` (a long id shortened), and the id copied from the
    first was told `no subscription` alone. None otherwise."""
    if subscriber is None:
        return None
    from boxmq.mqtt.stored import consumer_name  # here: a queue's command loads no MQTT module

    on_disk = consumer_name(subscriber)
    if on_disk == subscriber or not box.topics.has_subscription(filter, on_disk):
        return None
    return on_disk
