"""Which processes serve MQTT clients from a root: one empty file per running broker.

    <root>/.mqtt/brokers/<process token>

A session that is not persistent writes no record (session_record.py), and its share-group
memberships are bound to its broker's process (the member's file names that process's token,
store/topics.py), as a `boxmq subscribe` run's are to its own: the disk alone could not tell
the two apart, and `boxmq unsubscribe` ended a connected client's membership while its broker
still sent to it, the group deleted once its other members left, the client subscribed and
getting nothing. This mark tells the CLI that a process a member is bound to is a broker, so
that the member is an MQTT client's, which its client ends (cli_subscribe).

Invariants:
- A broker makes its mark when it starts, before it accepts a client, and deletes it when it
  closes. A mark is only believed while its process lives (store/process.py): one a broker that
  died left behind means nothing, and the next broker to start deletes it (this host's only:
  another host's processes cannot be judged).
- A mark the disk refuses (full, out of inodes, read-only) is told once and made at a later
  tick (server.py): the memberships written once the disk takes files again must find it, or
  the CLI would end a connected client's (while the disk refuses, it takes no membership).
"""

from __future__ import annotations

import contextlib
import os

from boxmq.client import Box
from boxmq.store.process import process_alive
from boxmq.store.records import make_folders

__all__ = ["client_s_broker", "folder", "is_broker", "mark", "unmark"]


def folder(root: str) -> str:
    return os.path.join(root, ".mqtt", "brokers")


def mark(root: str, token: str) -> OSError | None:
    """Say that the process `token` serves MQTT clients from `root`; the marks of this host's
    brokers that died go. The OSError the disk refused it with (the broker serves all the
    same, and tries again), None once it is said."""
    marks = folder(root)
    try:
        make_folders(marks, flush=False, within=root)
        for name in os.listdir(marks):
            if process_alive(name) is False:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(marks, name))
        with open(os.path.join(marks, token), "a"):
            pass
    except OSError as error:
        return error
    return None


def unmark(root: str, token: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(folder(root), token))


def is_broker(root: str, token: str) -> bool:
    """Whether `token` names a broker serving MQTT clients from `root` that may still run
    (one of another host cannot be told dead)."""
    if not token or os.sep in token or token.startswith("."):
        return False
    return os.path.exists(os.path.join(folder(root), token)) and process_alive(token) is not False


def client_s_broker(box: Box, filter: str, subscriber: str) -> str | None:
    """The token of the running broker that `subscriber`'s subscription to `filter` (a share
    group's membership: a session that is not persistent keeps no other on disk) is bound to,
    being a connected MQTT client's that is not persistent; None if it is bound to none."""
    token = box.topics.bound_to(filter, subscriber)
    return token if is_broker(box.root, token) else None
