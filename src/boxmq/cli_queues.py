"""The commands that look after queues rather than pass messages: `ls` and its counts, `peek`
and its rows, `requeue`, `purge`, and `delete` with its refusal while consumers hold locks."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from collections import Counter
from typing import Any

from boxmq import cli_dropbox
from boxmq import cli_output as output
from boxmq.client import Box, Peeked, Queue, QueueCounts
from boxmq.client.lifecycle import shown
from boxmq.errors import Conflict, QueueNotFound
from boxmq.store.layout import DELETING_DIR, State, broken_target, clear_deleting, queue_path
from boxmq.store.names import GET_TOKEN
from boxmq.store.process import process_alive, token_pid


def ls(args: argparse.Namespace, box: Box) -> int:
    queues = [{"queue": name, **_counts(counts)} for name, counts in box.counts().items()]
    subscriptions = [
        {
            "subscription": info.filter,
            "subscriber": info.subscriber or ",".join(info.members) or "-",
            # A share group's members as a list too: a name may hold a comma, so the joined
            # text alone cannot tell `a,b` and `c` from `a`, `b` and `c`.
            **({"members": list(info.members)} if args.json and info.subscriber is None else {}),
            **_counts(info.counts),
        }
        for info in box.topics.subscriptions()
    ]
    if args.json:
        output.out(output.to_json({"queues": queues, "subscriptions": subscriptions}))
        return 0
    if not queues and not subscriptions:
        output.out(output.said(f"no queues or subscriptions under {box.root}"))
    for rows in (queues, subscriptions):
        if rows:
            output.table(rows)
            if rows is queues and subscriptions:
                output.out()
    return 0


def _counts(counts: QueueCounts) -> dict[str, int]:
    return {
        "ready": counts.ready,
        "locked": counts.locked,
        "done": counts.done,
        "dead": counts.dead,
        "expired": counts.expired,
    }


def peek(args: argparse.Namespace, box: Box) -> int:
    peeked = cli_dropbox.dropbox(args, box).peek(state=State(args.state), limit=args.limit)
    # The box's clock, as `ls` counts: a lock `ls` counts ready is one peek says ended.
    now = box.now()
    rows = [_peek_row(p, now=now, as_json=args.json) for p in peeked]
    if args.json:
        output.out(output.to_json(rows))
    elif not rows:
        output.out(output.said(f"{output.cell(args.queue)}: no messages in {args.state}/"))
    else:
        output.table(rows)
    return 0


def _peek_row(peeked: Peeked, *, now: float, as_json: bool) -> dict[str, Any]:
    """One message of `peek` at `now` (the box's clock, epoch s); its properties as an object
    for --json (as `get` gives them), as NAME=VALUE,... in a table."""
    envelope = peeked.envelope
    visible = peeked.properties  # an MQTT v5 message's decoded too (store/v5_properties.py)
    row: dict[str, Any] = {"id": shown(envelope.message_id)}  # not UTF-8: its bytes as \xNN
    if (topic := peeked.topic) is not None:  # a subscription's message, as `get` names it
        row["topic"] = topic
    # A locked message counts the delivery under way, as `get` numbers it (`delivery 1` for
    # the first): the name counts only those that ended without an ack, so peek said 0 there.
    under_way = 1 if peeked.state is State.PROCESSING else 0
    row |= {
        "priority": envelope.priority,
        "bytes": peeked.size,
        "deliveries": envelope.delivery_count + under_way,
    }
    if (dead := peeked.dead) is not None:  # error/: rejected, or why else (as `unlock` says)
        row["dead"] = dead
    # error/'s names the consumer whose delivery failed; target/'s is one passed over for a
    # while (docs/file-format.md), no holder to show.
    if peeked.state is State.ERROR and (last := envelope.last_holder) is not None:
        row["last-holder"] = last
    row["properties"] = visible if as_json else output.listed(visible)
    # As `get` shows them (an MQTT v5 request's too); only when set, as `subscribe --json`.
    if (correlation_id := peeked.correlation_id) is not None:
        row["correlation-id"] = correlation_id
    if (reply_to := peeked.reply_to) is not None:
        row["reply-to"] = reply_to
    if (kind := envelope.type) is not None:  # `put --type`, which `get` shows as `type`
        row["type"] = kind
    if envelope.expiration:  # as `get` shows it: when it goes to expired/ unless taken
        row["expires"] = output.expires(envelope.expiration)
    if (ready_at := envelope.not_before) > now:
        # Held back by an `unlock --delay`: `ls` counts it READY and `get` passes it by, so
        # this is where a user sees when it becomes ready. Once past, it is ready as any.
        row["delay-until"] = output.when(ready_at)
    if peeked.holder is not None:
        # A lock `get` took is held by hand (settled by id, or ended by --lock), not by a
        # running consumer of that name: the table says so, --json with "by-get".
        row["locked-by"] = peeked.holder
        if peeked.by_get and as_json:
            row["by-get"] = True
        elif peeked.by_get:
            row["locked-by"] += " (get)"
    if (deadline := peeked.lock_deadline) is not None:
        # A lock past its deadline still names its holder until a sweep sends the message
        # back: the table says it ended, so nobody takes it for held (--json gives the time).
        ended = not as_json and deadline <= now
        row["lock-until"] = output.when(deadline) + (" (ended)" if ended else "")
    return row


def requeue(args: argparse.Namespace, box: Box) -> int:
    left: list[str] = []  # never deliverable: left where they are, each logged
    queue = cli_dropbox.dropbox(args, box)
    try:
        moved = queue.requeue(source=State(args.source), left=left)
    except KeyboardInterrupt:  # a long run of renames for a big folder, as purge's deletes
        _interrupted(args, queue, args.source, "back in target/ (requeue again to send them)")
        return 130
    text = f"{output.cell(args.queue)}: {moved} message(s) from {args.source}/ back to target/"
    if left:
        text += f"; {len(left)} left in {args.source}/ that can never be delivered (logged)"
    output.emit(args, {**cli_dropbox.named(args), "requeued": moved, "left": len(left)}, text)
    return 0


def purge(args: argparse.Namespace, box: Box) -> int:
    queue = cli_dropbox.dropbox(args, box)
    try:
        removed = queue.purge(state=State(args.state))
    except KeyboardInterrupt:
        _interrupted(args, queue, args.state, "deleted (purge again to delete them)")
        return 130
    output.emit(
        args,
        {**cli_dropbox.named(args), "purged": removed},
        f"{output.cell(args.queue)}: {removed} message(s) deleted from {args.state}/",
    )
    return 0


def _interrupted(args: argparse.Namespace, queue: Queue, folder: str, others: str) -> None:
    """What a Ctrl-C left of a purge or a requeue of `folder`. A big folder is a long run of
    deletes or renames (a purge of 200,000 took 100 s on a disk that discards freed blocks):
    a Ctrl-C stops it between two, and the user learnt nothing of how far it went."""
    left = queue.count(folder)  # that folder alone: counts() lists all six
    output.err(
        output.said(
            f"{output.said_by(args)}: interrupted: {left} message(s) left in {folder}/ of "
            f"{output.cell(args.queue)}, the others {others}"
        )
    )


def delete(args: argparse.Namespace, box: Box) -> int:
    try:
        queue = box.queue(args.queue, create=False)  # none: `no queue`, and nothing deleted
    except QueueNotFound as error:
        if broken_target(queue_path(box.root, args.queue)) is not None:
            return _delete(args, box)  # its locks cannot be read: target/ is not a folder
        said = str(error)
        if (ends := _unsubscribe_line(box, args.queue)) is not None:
            said += f"; {args.queue!r} is a subscription, not a queue: {ends}"
        # A delete cut short (Ctrl-C, a kill) says the next delete removes the files it left:
        # the user runs it again, and finds the queue gone.
        if clear_deleting(box.root):
            leftovers = os.path.join(box.root, DELETING_DIR)
            said += f"; the files a delete cut short left in {leftovers}/ are removed now"
        raise QueueNotFound(said) from None
    # Looked at twice without --force, and both are needed: this look (processing/ alone,
    # once: it counts the locks and says who holds them) comes before the rename, which
    # cannot be undone (a put makes the queue again at its path at once); the count below
    # says what went, counted where nothing more can come, so a message put or locked in
    # between is in it, as it is in the delete. --force needs only the second.
    if not args.force and (locks := queue.lock_processes()):
        # Their consumers' acks would find no message, and a consumer still taking messages
        # moves them under the delete: it should be stopped first (docs/cli.md).
        raise Conflict(
            f"{output.cell(args.queue)}: {len(locks)} message(s) locked{_held_by(locks)}; "
            "or --force deletes those with the rest"
        )
    return _delete(args, box)


def _delete(args: argparse.Namespace, box: Box) -> int:
    deleted: list[QueueCounts] = []
    try:
        found = box.delete_queue(args.queue, counted=deleted)
    except KeyboardInterrupt:
        _interrupted_delete(args, box, deleted)
        return 130
    if not found:  # another process deleted it first
        raise QueueNotFound(f"no queue {args.queue!r}: another process deleted it meanwhile")
    messages = _messages(deleted[0])
    # By state as the line says it, under `ls --json`'s keys: a script can tell whether only
    # done messages went (consumed already) or some that never will be now.
    by_state = _counts(deleted[0]) | {"uncommitted": deleted[0].uncommitted}
    text = f"{output.cell(args.queue)}: deleted, with its {messages} message(s)"
    output.emit(
        args,
        {"queue": args.queue, "deleted": messages, **by_state},
        text + _by_state(deleted[0]),
    )
    return 0


def _interrupted_delete(args: argparse.Namespace, box: Box, deleted: list[QueueCounts]) -> None:
    """What a Ctrl-C left of a delete: the queue leaves its path in one rename, counted then,
    and its files are deleted after it, one by one (minutes for 200,000 on a disk mounted
    with discard), so a Ctrl-C mostly comes when the queue is gone and files are left; it was
    exit 130 with not a word, the queue gone from `ls` and its files still on disk."""
    said, name = f"{output.said_by(args)}: interrupted", output.cell(args.queue)
    if deleted:
        gone = f"{name} is deleted, with its {_messages(deleted[0])} message(s)"
    elif not os.path.lexists(queue_path(box.root, args.queue)):  # Ctrl-C amid the count
        gone = f"{name} is deleted"
    else:
        output.err(output.said(f"{said}: {name} was not deleted"))
        return
    leftovers = os.path.join(box.root, DELETING_DIR)
    output.err(
        output.said(
            f"{said}: {gone}, but some of its files are left in "
            f"{leftovers}/, which the next delete or a sweep of `boxmq serve` removes"
        )
    )


def _messages(counts: QueueCounts) -> int:
    """How many messages a deleted queue held, in every state."""
    return sum(dataclasses.astuple(counts))


def _unsubscribe_line(box: Box, name: str) -> str | None:
    """What ends the subscriptions (or share group) `name` is the filter of, for delete's
    refusal, which said `no queue` alone; None if `name` is none. The `boxmq unsubscribe`
    for those the CLI or the API kept; not for an MQTT session's, which unsubscribe refuses
    (cli_subscribe: its client counts on it), so said as its client ends it."""
    from boxmq.cli_subscribe import bound_xmpp_subscriber  # here: `ls` loads none of them
    from boxmq.mqtt.brokers import client_s_broker
    from boxmq.mqtt.session_record import record_named

    readers = [
        reader
        for info in box.topics.subscriptions()
        if info.filter == name
        for reader in ([info.subscriber] if info.subscriber else info.members)
    ]
    sessions = [r for r in readers if (record := record_named(box.root, r)) and record.made(name)]
    # A topic node's XMPP subscriber, bound to the component's process (which unsubscribe
    # refuses as it refuses a client's), before the MQTT clients: it is none.
    xmpp = {
        r: bound[0]
        for r in readers
        if r not in sessions and (bound := bound_xmpp_subscriber(box, name, r)) is not None
    }
    # A connected client's whose session is not persistent: no record, bound to its broker.
    clients = [
        r for r in readers if r not in sessions and r not in xmpp and client_s_broker(box, name, r)
    ]
    kept = [r for r in readers if r not in sessions and r not in xmpp and r not in clients]
    said = []
    if len(kept) == 1:
        said.append(f"`{shlex.join(['boxmq', 'unsubscribe', name, '--name', kept[0]])}` ends it")
    elif kept:
        line = shlex.join(["boxmq", "unsubscribe", name])
        said.append(f"`{line} --name N` ends each (N: {output.cells(kept)})")
    if len(sessions) == 1:
        said.append(
            f"that of the MQTT session of {output.cell(sessions[0])} ends when its client "
            "unsubscribes (UNSUBSCRIBE), or connects once with a clean start"
        )
    elif sessions:
        said.append(
            f"those of the MQTT sessions of {output.cells(sessions)} end when each client "
            "unsubscribes (UNSUBSCRIBE), or connects once with a clean start"
        )
    if len(clients) == 1:
        said.append(
            f"that of the MQTT client {output.cell(clients[0])}, connected with a session that "
            "is not persistent, ends when it unsubscribes (UNSUBSCRIBE) or disconnects"
        )
    elif clients:
        said.append(
            f"those of the MQTT clients {output.cells(clients)}, connected with sessions that are "
            "not persistent, end when each unsubscribes (UNSUBSCRIBE) or disconnects"
        )
    said.extend(
        f"that of the XMPP subscriber {output.cell(reader)} of the topic node {node!r} ends "
        "when it unsubscribes (XEP-0060 unsubscribe) or goes offline"
        for reader, node in xmpp.items()
    )
    return "; ".join(said) or None


def _held_by(tokens: list[str | None]) -> str:
    """Who holds the locks of `tokens` (Queue.lock_processes, one at least) and what ends
    them, for `delete`'s refusal: only a running consumer is to be stopped; the locks of a
    process that died are for a sweep to release, and the others end when settled or timed
    out; a claim with no lock, when whatever made it moves it on."""
    running: Counter[str] = Counter()  # pid: its locks
    dead: Counter[str] = Counter()
    by_get = unbound = unnamed = 0
    for token, locks in Counter(tokens).items():  # a process asked about once, not per lock
        if token is None:
            unnamed += locks
        elif token == GET_TOKEN:
            by_get += locks
        elif not token or (alive := process_alive(token)) is None:
            unbound += locks  # a persistent MQTT session's, a kept subscriber's, another host's
        else:
            (running if alive else dead)[token_pid(token)] += locks
    said = []
    if running:
        said.append(
            f"{running.total()} by running process(es) {_pids(running)}: stop them "
            "(or settle the messages)"
        )
    if dead:
        said.append(
            f"{dead.total()} by process(es) {_pids(dead)} that ended: the next sweep of "
            "`boxmq serve` sends them back (or wait for their lock to end)"
        )
    if by_get:
        said.append(f"{by_get} by `boxmq get`: settle them by id (ack, unlock)")
    if unbound:
        said.append(
            f"{unbound} bound to no process of this machine: settle them by id, or wait "
            "for their lock to end"
        )
    if unnamed:
        said.append(
            f"{unnamed} claimed with no lock in their name (a script's or DropboxMQ's): "
            "stop what claimed them"
        )
    return ": " + "; ".join(said)


def _pids(pids: Counter[str]) -> str:
    return ", ".join(sorted(pids, key=lambda pid: (len(pid), pid)))


def _by_state(counts: QueueCounts) -> str:
    """The states of the messages counted, as `ls` names them: the done ones (processed/)
    were consumed already, the others never will be now."""
    held = {**_counts(counts), "uncommitted": counts.uncommitted}
    said = ", ".join(f"{number} {state}" for state, number in held.items() if number)
    return f" ({said})" if said else ""
