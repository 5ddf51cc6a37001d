"""The commands that pass messages: `put` and `publish` (with the body they read, and what they
check before the root is made), `get` (with the record it prints before the body), and the
settles of a locked message: `ack`, `unlock`, `reject` and `extend`, whose refusals say what to
do next."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable
from typing import Any, BinaryIO, Final

from boxmq import cli_dropbox
from boxmq import cli_output as output
from boxmq.client import Box, Message, Queue
from boxmq.client.lifecycle import shown
from boxmq.client.sweeps import SweepLimits
from boxmq.core.topics import validate_topic
from boxmq.errors import (
    BoxMQError,
    Conflict,
    Forbidden,
    InvalidArgument,
    ItemNotFound,
    QueueNotFound,
    TargetMissing,
    UnexpectedRequest,
)
from boxmq.store.layout import State, broken_target, queue_path, target_moved_aside

EMPTY = 3  # the exit status of a `get` that found no message ready


def before_put(args: argparse.Namespace) -> None:
    """What refuses a `put` for its own arguments, said before the root is made (cli._run):
    a queue name no folder can carry, or a body that cannot be read, made an empty root at a
    mistyped --data first. The body is read here, as `args.payload`."""
    queue_path(str(args.data), args.queue)  # InvalidName, in the words the put would say
    args.payload = _body(args)


def before_publish(args: argparse.Namespace) -> None:
    """As `before_put`: a topic name that is none, or a body that cannot be read."""
    validate_topic(args.topic)
    args.payload = _body(args)


def put(args: argparse.Namespace, box: Box) -> int:
    body: bytes = args.payload  # before_put read it
    properties = dict(args.property)  # each name once: cli.main refused one given twice
    message_id = _queue_to_put(box, args.queue).put(
        body,
        priority=args.priority,
        properties=properties,
        expires_in=args.expires_in,
        correlation_id=args.correlation_id,
        reply_to=args.reply_to,
        type=args.type,
    )
    output.emit(args, {"queue": args.queue, "id": message_id}, message_id)
    return 0


def _queue_to_put(box: Box, name: str) -> Queue:
    """The queue `name`, made if its folder is not there, or finished if its making was cut
    short (a put killed between working/ and target/), as the assured intake does. One whose
    target/ was moved aside to be made again (docs/operations.md, "Disk usage";
    layout.target_moved_aside tells the two apart) is not made again: a new target/ made here
    took the message in the middle of it and made the operator's `mkdir target` fail. Refused
    as the API's put refuses it then (TargetMissing), nothing put. One whose target/ is a file
    is refused in box.queue's words ("queue is broken", and how to mend it), as `boxmq get`
    refuses it: making it said "File exists", with advice for a --data folder in the way."""
    try:
        return box.queue(name, create=False)
    except QueueNotFound:
        path = queue_path(box.root, name)
        if target_moved_aside(path):
            target = os.path.join(path, State.TARGET.value)
            missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), target)
            raise TargetMissing(missing, name, target, putting=True) from None
        if broken_target(path) is not None:
            raise  # target/ a file: broken, said so
        return box.queue(name)  # no folder, or one half made: made, as ever


# The largest body `put` and `publish` read: the largest MQTT packet (MQTT 5.0 §1.5.5, the
# highest max_packet_size), so no MQTT subscriber is sent what it could never receive, and the
# limit mosquitto_pub sets on its --file. Without it, `--file /dev/zero` read until memory ran out.
MAX_BODY = 268_435_455


def _body(args: argparse.Namespace) -> bytes:
    # `--file -` is the standard input, as BODY `-` is (`--file ./-` names a file so called):
    # it said "cannot read -: No such file or directory".
    if args.file is not None and args.file != "-":  # BODY is None: cli.main refused both
        try:
            with open(args.file, "rb") as source:
                where = f"--file {args.file}"
                # A regular file's size is known before a byte of it is read: one over the
                # limit was read up to 256 MiB before it was refused. A pipe or a device
                # (/dev/zero) says 0 and is bounded as it is read.
                if os.fstat(source.fileno()).st_size > MAX_BODY:
                    raise _too_big(where)
                return _bounded(source, where)
        except OSError as error:
            raise InvalidArgument(f"cannot read {args.file}: {error.strerror}") from None
    if args.body is None or args.body == "-":
        if sys.stdin is None:  # `<&-`: Python has no stdin to read, and nothing is sent
            raise InvalidArgument(
                "no body: the standard input is closed; give BODY, --file F, or pipe it in"
            )
        if sys.stdin.isatty():  # a BODY forgotten left the command waiting, without a word
            output.err(
                f"{output.said_by(args)}: reading the body from the terminal: type it, then Ctrl-D "
                "on a line of its own (Ctrl-C: nothing is sent)",
                flush=True,
            )
        return _bounded(sys.stdin.buffer, "the standard input")
    return os.fsencode(args.body)  # the bytes given, UTF-8 or not (surrogate escapes)


def _bounded(source: BinaryIO, where: str) -> bytes:
    """All of `source`, reading at most one byte past MAX_BODY: InvalidArgument past it."""
    body = source.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise _too_big(where)
    return body


def _too_big(where: str) -> InvalidArgument:
    return InvalidArgument(
        f"{where} holds more than {MAX_BODY} bytes (256 MiB), the largest body boxmq "
        "sends (MQTT's largest packet): nothing is sent"
    )


def publish(args: argparse.Namespace, box: Box) -> int:
    properties = dict(args.property)  # each name once: cli.main refused one given twice
    message_id = box.publish(
        args.topic,
        args.payload,  # before_publish read it
        qos=args.qos,
        retain=args.retain,
        properties=properties,
        expires_in=args.expires_in,
        correlation_id=args.correlation_id,
        reply_to=args.reply_to,
    )
    output.emit(args, {"topic": args.topic, "id": message_id}, message_id)
    return 0


def get(args: argparse.Namespace, box: Box) -> int:
    queue, subscription = cli_dropbox.found(args, box)
    if subscription:
        from boxmq import cli_settle  # here: a queue's get loads no MQTT module

        cli_settle.check_may_get(args, box)
    message = queue.get(args.consumer, lock_timeout=args.lock)
    if message is None:
        whose = "" if args.subscriber is None else f" for subscriber {args.subscriber!r}"
        # What is in target/ now is held back by an `unlock --delay` (get took any other):
        # `ls` counted it READY, and "no message is ready" alone read as a contradiction.
        waiting = queue.counts().ready
        peek = cli_dropbox.command_line(args, "peek")
        held = (
            f" ({waiting} in target/ wait out an `unlock --delay`: `{peek}` says until when)"
            if waiting
            else ""
        )
        output.err(f"boxmq get: no message is ready in {args.queue!r}{whose}{held}")
        return EMPTY
    if args.json:
        output.out_json_with_body(_message_record(message, args.subscriber), message.body)
        return 0
    record = _message_record(message, args.subscriber)
    record["id"] = shown(message.id)  # a name that is not UTF-8: its bytes as \xNN, as peek
    record["properties"] = output.listed(message.properties)
    width = max(len(k) for k in record)
    for key, value in record.items():
        if value not in (None, ""):  # unset (no reply-to, no type): no line, not "None"
            # Escaped as peek escapes them: a newline a producer put in a property, an id or
            # a reply-to must not end the header, whose first blank line starts the body.
            output.out(f"{key:<{width}}  {output.cell(value)}")
    output.out()
    output.flush()
    # The body byte for byte: everything after the first blank line is exactly the payload, and
    # it is never decoded (a big body costs its size once, not a text copy of it). Only on a
    # terminal does a newline end a body that lacks one, for the prompt.
    output.out_bytes(message.body)
    if not message.body.endswith(b"\n") and sys.stdout.isatty():
        output.out_bytes(b"\n")
    return 0


def _message_record(message: Message, subscriber: str | None) -> dict[str, Any]:
    """What `get` prints before the body: a subscription's message names its subscriber
    (`--subscriber`, as the settles' --json does) and the topic it was published to."""
    named: dict[str, Any] = {"id": message.id, "queue": message.queue}
    if subscriber is not None:
        named["subscriber"] = subscriber
    if message.topic is not None:
        named["topic"] = message.topic
    return named | {
        "priority": message.priority,
        "delivery": message.delivery_count,
        "locked-by": message.consumer,
        "lock-until": output.when(message.lock_deadline),
        "properties": message.properties,
        "correlation-id": message.correlation_id,
        "reply-to": message.reply_to,
        "type": message.type,
        "expires": output.expires(message.envelope.expiration) if message.expiration else None,
    }


def settle(verb: str) -> Callable[[argparse.Namespace, Box], int]:
    def run(args: argparse.Namespace, box: Box) -> int:
        queue, subscription = cli_dropbox.found(args, box)
        if subscription:
            from boxmq import cli_settle  # here: a queue's ack loads no MQTT module

            cli_settle.check_no_live_holder(args, box, queue)
        dead = None
        try:
            if verb == "ack":
                queue.ack(args.id, args.consumer)
            elif verb == "unlock":
                dead = queue.unlock(args.id, args.consumer, delay=args.delay)
            elif verb == "reject":
                queue.reject(args.id, args.consumer)
            else:
                queue.extend(args.id, args.consumer, seconds=args.by)
        except Conflict:
            peek = cli_dropbox.command_line(args, "peek", "--state", "processing")
            raise Conflict(
                args.id,
                f"locked by another consumer than {args.consumer!r} "
                f"(`{peek}` shows which; --consumer NAME settles as that one)",
            ) from None
        except Forbidden:
            raise Forbidden(args.id, _not_received(args, queue)) from None
        except UnexpectedRequest as error:
            # Its lock is gone (it ended, or its holder left): XEP-0254's words alone said
            # nothing of the message, which goes to a consumer again, nor what to do next.
            try:
                cli_dropbox.dropbox(args, box)
            except BoxMQError:
                raise error from None  # its queue was deleted meanwhile, which `error` says
            raise UnexpectedRequest(args.id, _lock_gone(args, error)) from None
        except ItemNotFound as error:
            if (settled := _settled_already(args, queue)) is None:
                raise
            raise ItemNotFound(args.id, settled) from error
        done = {**cli_dropbox.named(args), "id": args.id, "done": verb}
        if dead is not None:  # unlocked, but its next delivery would pass a limit
            line = f"{verb}: {args.id} went to error/ ({dead}), not back to target/"
            output.emit(args, {**done, "dead": dead}, line)
            return 0
        output.emit(args, done, f"{verb}: {args.id}")
        return 0

    return run


# How long a sweep leaves a claim made outside boxmq in processing/, in the sweeps' own figure.
_FOREIGN_LOCK_MINUTES: Final = SweepLimits().foreign_lock_timeout / 60


def _not_received(args: argparse.Namespace, queue: Queue) -> str:
    """What a settle refused Forbidden says. Ready, or its lock ended: nobody holds it, and
    XEP-0254's "did not receive" alone left a user wondering what to do (`ack` of an id `put`
    printed). Claimed by a consumer outside boxmq (DropboxMQ's, a script's: a rename into
    processing/ with no lock suffix), it is held all the same: `ls` counts it locked and
    `get` cannot take it, so "no consumer holds" and a `get` to run were both wrong."""
    refused = f"{args.consumer!r} did not receive this message"
    if _claimed_outside_boxmq(args, queue):
        return (
            f"{refused}, which a consumer outside boxmq holds (a script's or DropboxMQ's: its "
            "file is in processing/ with no lock in its name): it settles it, or a sweep gives "
            f"it back to target/ {_FOREIGN_LOCK_MINUTES:g} minutes after its claim"
        )
    get = cli_dropbox.command_line(args, "get")
    return (
        f"{refused}, which no consumer holds (`{get}` locks the next ready message and prints "
        "its id)"
    )


def _claimed_outside_boxmq(args: argparse.Namespace, queue: Queue) -> bool:
    """`args.id` is in processing/ under a name with no lock suffix. Looked for only once
    refused, as `_settled_already` looks, so a settle that succeeds reads no folder more."""
    try:
        found = queue.find(args.id, states=(State.PROCESSING,))
    except BoxMQError:
        return False  # its queue was deleted meanwhile: the refusal says what it said
    # A lock whose deadline passed still names its holder; only a foreign claim names none.
    return found is not None and found.holder is None


# Where a settled message may be, and what a refusal says of it there: "no such message"
# sent a user who acked twice (a script run again, two terminals racing on one id) looking for
# a message that is right there.
_SETTLED = {
    State.PROCESSED: "settled already: it was acked, and is in processed/ (nothing to do)",
    State.ERROR: "settled already: it is dead{why}, in error/ (`{requeue}` sends it back to be "
    "delivered again)",
    State.EXPIRED: "it expired before it was settled, and is in expired/ (`{requeue}` sends it "
    "back to be delivered again)",
}


def _settled_already(args: argparse.Namespace, queue: Queue) -> str | None:
    """What a settle refused ItemNotFound says when `args.id` is a message of the queue
    that was settled already (in processed/, error/ or expired/); None when it is in none.
    Looked for only once refused, so a settle that succeeds reads no folder more, and by id:
    a peek of each folder read all 300,000 messages of a long-lived queue's processed/."""
    try:
        found = queue.find(args.id, states=_SETTLED)
    except BoxMQError:
        return None  # its queue was deleted meanwhile: the refusal says so as it is
    if found is None:
        return None
    options = ("--from", found.state.value) if found.state is not State.ERROR else ()
    requeue = cli_dropbox.command_line(args, "requeue", *options)
    why = f" ({found.dead})" if found.dead else ""
    return _SETTLED[found.state].format(why=why, requeue=requeue)


def _lock_gone(args: argparse.Namespace, error: UnexpectedRequest) -> str:
    """What a settle refused UnexpectedRequest says: why the lock is gone, as the consumer
    named quoted as the CLI's other refusals name it, then where the message went and what to
    do, once."""
    detail = str(error).removeprefix(f"{error.message_id}: ")
    if detail.startswith(f"{args.consumer} "):
        detail = f"{args.consumer!r}{detail.removeprefix(args.consumer)}"
    if detail.endswith(" no longer holds the lock"):  # held by it, not by one that left
        detail += ": it ended (--lock ran out, or an unlock)"
    get = cli_dropbox.command_line(args, "get")
    held = cli_dropbox.command_line(args, "peek", "--state", "processing")
    return (
        f"{detail}; the message goes back to be delivered again (`{get}` locks the next ready "
        f"message and prints its id; `{held}` shows who holds it, if one does)"
    )
