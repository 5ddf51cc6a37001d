"""`boxmq get|ack|unlock|reject|extend` on a share group or a durable subscription: whether
a message may be locked or settled from here, or a running process counts on it.

A message in flight to an MQTT session is held twice: by its lock on disk, and by the session
in the memory of the `boxmq serve` that holds it (the packet id it went out under, to send
again with DUP, and whose PUBACK settles it). Settled from here under that server's feet, the
session would still count it as its own: it sends it again, or takes its client's answer for
a message it no longer holds, while another member of the group gets it too. So a lock is
settled only once no running process holds it that way:

- a lock bound to a process (a non-persistent session's, its server's token; a `boxmq
  subscribe` run's, a Python subscriber's) while that process runs;
- a lock bound to none held by a persistent MQTT session (its name the session's, which its
  record says: session_record.record_named) while the server that holds the session runs:
  the one its client is connected to, or the one it left (`SessionRecord.server`).

One that runs is known on this host only: on another machine sharing the root, the process
cannot be told alive or dead, and `--force` settles all the same (the user knows that it
stopped for good). One known to run is refused even so: its client answers, or its session
ends (a clean start gives what it held to the other members), or the process is stopped.

`get` takes a ready message (target/), which no process holds yet: one rename claims it,
and a member or a subscriber that tries to claim it too finds it gone, as competing
consumers of a queue do (DESIGN.md §7). So:

- a share group's: taken whoever its members and wherever they run; `get` is one more
  consumer of the group, and what it locked comes back to them when its lock ends (the
  sweeps of `boxmq serve`, a member's process, or the next `get`), or once unlocked;
- a durable subscription's: refused while a process known to run reads it: a `boxmq
  subscribe` run that removes it when it ends (SubscriptionRecord.owner), or the server
  holding the MQTT session whose subscription it is (as above). It has one reader, which
  takes its messages in order (MQTT 5.0 §4.6 for its client): taken from under it, one
  would be missing from its stream, or come back after later ones. `--force` takes it when
  that process runs on another machine, as for a settle. A reader that names no process on
  disk (a kept `subscribe` run, a Python subscriber) cannot be known: `get` competes with
  it, as in a group, the message still going to one of them only.

`get`'s lock names no process, as a persistent MQTT session's or a kept `subscribe` run's
does, but its token says it is `get`'s (GET_TOKEN): a member that joins under `--consumer`'s
name later (the default `cli` is a fine client id) does not take it for its own at its start
(LiveQueue.attach adopts the "" locks under its name), so the message never goes out to it
while `get`'s user holds it too. A `--consumer` that is a member, or the subscriber itself, is
refused all the same: `peek`'s LOCKED-BY and the settles' `--consumer` would not tell get's
lock from that member's own.

`cli` imports this module only for a subscription's get or settle: a queue's `get` and `ack`
load no MQTT module (tests/unit/test_light_imports.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from boxmq import cli_output as output
from boxmq.client import Box, Queue
from boxmq.errors import InvalidArgument
from boxmq.mqtt.session_record import SessionRecord, record_named
from boxmq.store.names import GET_TOKEN, check_consumer_name
from boxmq.store.process import process_alive, token_pid

__all__ = ["check_may_get", "check_no_live_holder"]


def check_may_get(args: argparse.Namespace, box: Box) -> None:
    """InvalidArgument if `boxmq get` may not lock a message of the share group or durable
    subscription `args` names for `args.consumer` (above)."""
    consumer = check_consumer_name(args.consumer)
    # Queue.get refuses it too, in the API's words: here first, in the command's.
    if (whose := box.topics.reader_named(args.queue, args.subscriber, consumer)) is not None:
        raise InvalidArgument(
            f"{output.cell(consumer)} is {whose}: a lock under its name could not be told "
            "from its own (peek's LOCKED-BY, the settles' --consumer). Give get "
            "another --consumer (the default is cli)"
        )
    if args.subscriber is None:
        return  # one more consumer of the group: no member counts on a ready message
    process, who = _reader(args, box)
    if not process:
        return
    _refuse_while_it_runs(
        process,
        lambda where: (
            f"{output.of(args.queue, args.subscriber)} is read by {who}, and "
            f"that process {where}: a durable subscription has one reader, which takes its "
            "messages in order, and get would take one from under it"
        ),
        while_alive="Let that reader take it, or stop that process first",
        forced="takes it",
        force=args.force,
    )


def _reader(args: argparse.Namespace, box: Box) -> tuple[str, str]:
    """The process known to read the durable subscription `args` names, as its token, and
    who it is for the refusal; ("", "") for none known."""
    record = box.topics.record_of(args.queue, args.subscriber)
    if record is not None and record.owner:
        return record.owner, f"process {token_pid(record.owner)}, which ends it when it ends"
    session = record_named(box.root, args.subscriber)
    if session is None or not session.made(args.queue) or session.held_by is None:
        return "", ""
    return session.held_by, _held_session(session, session.held_by)


def check_no_live_holder(args: argparse.Namespace, box: Box, dropbox: Queue) -> None:
    """InvalidArgument if the lock `args.consumer` holds on `args.id` in the subscription
    `dropbox` is still counted as in flight by a running process (above); with `--force`,
    only if that process is known to run."""
    token = dropbox.lock_process(args.id, args.consumer)
    if token is None:
        return  # it holds no such lock: the settle itself says so (Conflict, unknown id)
    if token == GET_TOKEN:
        return  # `get`'s: no process counts on it, whoever joined under its name since
    if token:
        process, who = (
            token,
            f"{output.cell(args.consumer)}, whose lock names process {token_pid(token)}",
        )
    else:
        record = record_named(box.root, args.consumer)
        if record is None or not record.made(args.queue):
            return  # no MQTT session's: a kept `subscribe` run's, the Python API's
        held_by = record.held_by
        if held_by is None:
            return  # no server holds its session: the one that did stopped, or restarted
        process, who = held_by, _held_session(record, held_by)
    _refuse_while_it_runs(
        process,
        lambda where: (
            f"{args.id} is in flight to {who}, and that process {where}: settled from here, "
            "under that process, an MQTT session would still count it as its own, and send it "
            "to its client again, or take its answer for a message it no longer holds, while "
            "another consumer gets it too"
        ),
        while_alive="Its client answers it, or ends its session (a clean start gives what it "
        "held to the other members of a share group), or stop that process first",
        forced="settles it",
        force=args.force,
    )


def _refuse_while_it_runs(
    process: str,
    said: Callable[[str], str],
    *,
    while_alive: str,
    forced: str,
    force: bool,
) -> None:
    """InvalidArgument, `said` of where `process` is, if that process is known to run, or if
    it cannot be told (another machine's) and `force` was not given; nothing if it died."""
    alive = process_alive(process)
    if alive is False or (alive is None and force):
        return
    where = "still runs" if alive else "is on another machine (this one cannot tell if it runs)"
    if alive:
        raise InvalidArgument(f"{said(where)}. {while_alive}")
    raise InvalidArgument(f"{said(where)}. If that process stopped for good, --force {forced}")


def _held_session(record: SessionRecord, process: str) -> str:
    """The session `process` holds, named for a refusal with where it is held."""
    client = output.cell(record.client_id)
    return f"the MQTT session of client {client} ({_where_held(record, process)})"


def _where_held(record: SessionRecord, process: str) -> str:
    """Where the session is held, for the refusal: connected, or away and kept."""
    pid = token_pid(process)
    if record.holder is not None:
        return f"its client connected to boxmq serve, process {pid}"
    away = "its client away"
    if record.disconnected_at is not None:
        away += f" since {output.when(record.disconnected_at)}"
    return f"{away}, its session kept by boxmq serve, process {pid}"
