"""`boxmq session ls` and `boxmq session end CLIENT_ID`: the persistent MQTT sessions on the
root, and the end of one whose client never comes back.

A session with no expiry (v5 Session Expiry 0xFFFFFFFF, or MQTT 3.1.1 CleanSession 0, under
`max_session_expiry = 4294967295`) ends only on a clean start by its client: one that never
returns keeps its durable subscriptions collecting on disk, and its share groups' messages in
flight to it locked, for ever (their locks last as long as the session); one with an expiry
does so until then. `end` ends it as its expiry would (mqtt/lifetimes.py `forget_on_disk`):
its durable subscriptions deleted, its share groups left (what it held goes to the other
members), its QoS 2 messages awaiting PUBREL discarded, its record deleted, last, so that a
step the disk refused is done again by a second run.

Its Will, if one is still due, is discarded, not sent: from here it could reach the durable
subscribers only, not the clients connected to a running `boxmq serve`, nor be checked
against that server's ACL; the operator ending a session decides for its client, as a
DISCONNECT 0x00 (no Will) would.

A session that a running `boxmq serve` holds (its client connected, or away and kept in that
server's memory, `SessionRecord.server`) is refused: that server would go on with its copy,
write its record back, and count what the session was sent as its own (cli_settle.py). A
server on another machine cannot be told alive: `--force` ends the session all the same.

`cli` imports this module only for `session`: `put`, `get`, `ack` and `ls` load no MQTT
module (tests/unit/test_light_imports.py).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from boxmq import cli_output as output
from boxmq.cli_args import Default
from boxmq.client import Box
from boxmq.errors import InvalidArgument, QueueNotFound, store_failure
from boxmq.mqtt.session import NEVER
from boxmq.mqtt.session_record import SessionRecord, read_record, read_records, remove_record
from boxmq.mqtt.stored import consumer_name, exactly_once_source
from boxmq.mqtt.succession import NONE, Chains
from boxmq.store.process import process_alive, token_pid

__all__ = ["end", "holding_server", "listed", "ls", "read_config"]

log = logging.getLogger(__name__)


def read_config(args: argparse.Namespace) -> None:
    """`session ls --config FILE`, before the root is opened: the limit of the server's
    config file (`args.session_limit`; without a file, the CLI cannot know the limit a server
    runs with, so a session shows the end it was granted, which a max_session_expiry lowered
    since cuts short: `listed`), and its `data`, the root that server serves, unless --data
    was typed (as serve takes it: flags, then the file, then $BOXMQ_DATA). The default
    ./data was listed instead, `no persistent MQTT sessions` under the wrong root. A root
    taken from the file that is no folder is told naming its key there (`args.root_from`,
    cli._check_root), not the --data or $BOXMQ_DATA the user did not give."""
    args.session_limit = None
    if args.config is None:
        return
    from boxmq.config import session_config  # here: the config reader loads TLS, the ACL

    config = session_config(args.config)
    args.session_limit = config.mqtt.limits.max_session_expiry
    if isinstance(args.data, Default) and config.data_from_file:
        args.data = str(config.data)
        args.root_from = f"data in {config.source}"


def ls(args: argparse.Namespace, box: Box) -> int:
    limit = args.session_limit  # read_config's, before the root was opened
    chains = Chains(box.root, None)
    records = sorted(read_records(box.root), key=lambda r: r.client_id)
    sessions = [listed(r, chains, limit=limit) for r in records]
    if args.json:
        output.out(output.to_json(sessions))
        return 0
    if not sessions:  # a line saying so, as `ls` and `peek` say it, not a silence
        output.out(output.said(f"no persistent MQTT sessions under {box.root}"))
        return 0
    output.table(
        [
            {
                "CLIENT-ID": s["client_id"],
                "STATE": _state(s),
                "ENDS": s["ends"] or _never_or_after(s),
                "SUBSCRIPTIONS": " ".join(s["subscriptions"]) or "-",
            }
            for s in sessions
        ]
    )
    return 0


def listed(
    record: SessionRecord, chains: Chains | None = None, *, limit: int | None = None
) -> dict[str, Any]:
    """One session as `ls --json` shows it: pids, not process tokens (a user reads them).
    Its counter is followed through the succession files of the root (`chains`). Its
    expiry and its end are those a server whose `max_session_expiry` is `limit` applies (it
    caps what it finds on disk by it: SessionRecord.capped), or as granted (None)."""
    if limit is not None:
        record = record.capped(limit)
    deadline = record.deadline()
    follow = record.holder is None  # one connected to a dead server is taken on by itself
    counter = record.counter if chains is None else _resolved(record, chains, follow=follow)
    if counter == NONE:
        counter = None  # named none, and taken on by none yet
    return {
        "client_id": record.client_id,
        "connected_to": None if record.holder is None else token_pid(record.holder),
        "kept_by": None if record.server is None else token_pid(record.server),
        # The server that took it on (at its start, or from one that died), and counts its
        # end and its Will, if not the one holding it.
        "counted_by": None if counter in (None, record.held_by) else token_pid(counter),
        # Whether the one counting it still runs: True, False, or None (another machine's,
        # or none).
        "server_running": None if counter is None else process_alive(counter),
        "away_since": None
        if record.disconnected_at is None
        else output.when(record.disconnected_at),
        "expiry": None if record.expiry == NEVER else record.expiry,
        "ends": None if deadline is None else output.when(deadline),
        "subscriptions": sorted(record.options),
        "will": None if record.will is None else record.will.topic,
    }


def _resolved(record: SessionRecord, chains: Chains, *, follow: bool) -> str | None:
    """The server counting `record`'s session, followed through the succession files; the
    counter its record names if one of those cannot be read (EIO of a failing disk): raised,
    it ended `ls` with no session listed."""
    try:
        return chains.resolve(record.counter, follow=follow)
    except OSError as error:
        log.warning(
            "client %s: who counts its session is not known: %s",
            record.client_id,
            store_failure(error),
        )
        return record.counter


def _state(session: dict[str, Any]) -> str:
    # A server killed (SIGKILL) left its name in the record: said, or the session would look
    # held by a process that is gone, and `end` refused, which it is not.
    gone = " (not running)" if session["server_running"] is False else ""
    counted = session["counted_by"]
    # Counted by another than the one it names: that one died, and the other took it on.
    held_gone = " (not running)" if counted is not None else gone
    if session["connected_to"] is not None:
        state = f"connected to process {session['connected_to']}{held_gone}"
    else:
        state = f"away since {session['away_since'] or '?'}"
        if session["kept_by"] is not None:
            state += f", kept by process {session['kept_by']}{held_gone}"
    if counted is not None:
        state += f", counted by process {counted}{gone}"
    return state


def _never_or_after(session: dict[str, Any]) -> str:
    """ENDS of a session with no deadline yet: never, or its expiry after its client leaves."""
    if session["expiry"] is None:
        return "never"
    return f"{session['expiry']}s after its client leaves"


def holding_server(record: SessionRecord, *, force: bool) -> str | None:
    """Why the session cannot be ended from here, or None: the server its client is
    connected to, or that keeps it, still runs (or, without `force`, may run elsewhere)."""
    token = record.held_by
    if token is None:
        return None
    alive = process_alive(token)
    if alive is False or (alive is None and force):
        return None
    how = "its client is connected to" if record.holder is not None else "kept by"
    server = f"boxmq serve, process {token_pid(token)}"
    session = f"session of client {output.cell(record.client_id)}"
    if alive:
        return (
            f"{session}: {how} {server}, which still runs and holds it; its client connects "
            "once with a clean start to end it, or stop that server first"
        )
    return (
        f"{session}: {how} {server} on another machine (this one cannot tell if it runs); "
        "if that process stopped for good, --force ends it"
    )


def end(args: argparse.Namespace, box: Box) -> int:
    client_id = args.client_id
    record = read_record(box.root, client_id)
    if record is None:
        raise QueueNotFound(
            f"no persistent MQTT session of client {output.cell(client_id)} under {box.root} "
            "(see `boxmq session ls`)"  # as a queue that is not there: see `boxmq ls`
        )
    if (refused := holding_server(record, force=args.force)) is not None:
        raise InvalidArgument(refused)
    name = consumer_name(client_id)
    ended = []
    for text, _ in box.topics.subscribed(name):
        if record.made(text):  # not one the CLI or the Python API kept under that name
            box.unsubscribe(text, name)  # a share group left: what it held goes to the others
            ended.append(text)
    discarded = box.drop_pending(exactly_once_source(client_id))
    remove_record(box.root, client_id)
    will = None if record.will is None else record.will.topic
    done = {
        "client_id": client_id,
        "done": "ended",
        "subscriptions": sorted(ended),
        "qos2_discarded": discarded,
        "will_discarded": will,
    }
    text = f"ended the session of client {output.cell(client_id)}"
    if ended:
        text += f"; subscriptions ended: {' '.join(map(output.cell, sorted(ended)))}"
    if discarded:
        text += f"; {discarded} QoS 2 message(s) awaiting PUBREL discarded"
    if will is not None:
        text += f"; its Will to {output.cell(will)} discarded, not sent"
    output.emit(args, done, text)
    return 0
