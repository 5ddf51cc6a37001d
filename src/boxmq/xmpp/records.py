"""Who is subscribed to the component, on disk: so that its next start after a crash tells
each subscriber that its subscription is gone (docs/xmpp.md, After a crash).

Subscriptions live in memory (a consumer each, holding locks). A clean stop tells every
subscriber `subscription='none'`; a SIGKILL or a power cut told nobody, and a client still
connected waited for items for ever. So each subscription leaves one small file while it
lasts, `.xmpp/<component>/subscribers/<hash>` under the root (docs/file-format.md), written
when it begins and deleted when it ends; what the next start finds there are the
subscriptions a crash ended unheard. One file per subscription, not one list: a subscribe
writes one small file whatever the number of others. Written as the store's other records
are (store/records.py): replaced whole by a rename, flushed under fsync=always only, and
read on a descriptor (records.read_file).
The component's name in the path keeps two components on one root apart; two processes
serving one component on one root are kept apart by `hold_component`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from dataclasses import dataclass

from boxmq.errors import InvalidName, store_failure
from boxmq.forks import renew_in_children
from boxmq.store.names import escape_segment, unescape_segment
from boxmq.store.records import make_folders, read_file, replace_file
from boxmq.xmpp.payloads import NOT_XML
from boxmq.xmpp.settings import component_domain

__all__ = [
    "ComponentHeld",
    "ComponentHold",
    "Recorded",
    "SubscriberRecords",
    "hold_component",
    "records_folder",
]

log = logging.getLogger("boxmq.xmpp")


def _component_folder(root: str, component: str) -> str:
    """The component's folder, named by its domain as the XMPP server compares it, so that
    `Queue.Example` and `queue.example`, one component to the server, share one lock."""
    return os.path.join(root, ".xmpp", escape_segment(component_domain(component)))


def _spelled_folders(root: str, component: str) -> list[str]:
    """The folders a boxmq up to f4eb31da (2026-11-30) kept the component's lock and records
    in, named by the component as written then (`Queue.Example`, `queue.example.`), apart
    from `_component_folder`, whatever the spelling given now: their locks are taken too, so
    that such a boxmq serving it in a rolling upgrade keeps this one off, and their records
    are read, so that the subscribers a crash left there are told. Only the spelling given
    now was looked for: started as `queue.example` over a root of `Queue.Example`, it ran
    beside the older boxmq still serving that one, and never told its crash's subscribers."""
    base, domain = os.path.join(root, ".xmpp"), component_domain(component)
    mine = _component_folder(root, component)
    try:
        entries = list(os.scandir(base))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in entries:
        try:
            spelled = unescape_segment(entry.name)
        except InvalidName:  # no name boxmq wrote
            continue
        if entry.path != mine and component_domain(spelled) == domain and entry.is_dir():
            found.append(entry.path)
    return found


def _written_folder(root: str, component: str) -> str | None:
    """The folder a boxmq up to f4eb31da (2026-11-30) would keep the component's lock in,
    named by `component` as written now, where that differs from `_component_folder`: its
    lock is taken too, made if need be, so that such a boxmq started after this one (a
    rollback, a rolling upgrade in that order) is kept off, not only one that ran before."""
    try:
        folder = os.path.join(root, ".xmpp", escape_segment(component))
    except InvalidName:  # too long once escaped: no boxmq could make it
        return None
    return None if folder == _component_folder(root, component) else folder


def records_folder(root: str, component: str) -> str:
    return os.path.join(_component_folder(root, component), "subscribers")


class ComponentHeld(Exception):
    """Another process on the root serves this component now (`holder`: its process id as
    it wrote it, "" if unknown)."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


class ComponentHold:
    """The flocks `hold_component` took, on `fds`, until `release`."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds
        # An flock belongs to the open file, which a fork shares: a child that kept its copy
        # (a multiprocessing worker) kept every later start of the component refused.
        renew_in_children(self)

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)

    def renew_in_child(self) -> None:
        self.release()  # the child's copy: the parent's flock stays


_UNGUARDED = "nothing keeps a second process serving this component off this root"


def hold_component(root: str, component: str) -> ComponentHold | None:
    """The flock one process at a time holds on `.xmpp/<component>/lock` while it serves
    that component from `root` (release it to let go), or None
    where it cannot be had (a file system that keeps no flocks, some NFS; a folder that
    cannot be made), logged: the component runs unguarded then. Raises ComponentHeld if
    another holds it. The kernel lets go of the flock of a process that dies, so a crash
    never blocks the next start. Why: a second process took the first's live records for
    a crash's (the first only reconnecting) and told its subscribers that their
    subscriptions ended (docs/xmpp.md, One instance per name)."""
    fd = _flock(root, _component_folder(root, component))
    fds = [] if fd is None else [fd]
    written = _written_folder(root, component)
    spelled_folders = _spelled_folders(root, component)
    if written is not None and written not in spelled_folders:
        spelled_folders.append(written)
    for spelled in spelled_folders:
        try:
            fd = _flock(root, spelled)
        except ComponentHeld:
            for taken in fds:
                os.close(taken)
            raise
        fds += [] if fd is None else [fd]
    return ComponentHold(fds) if fds else None


def _flock(root: str, folder: str) -> int | None:
    """The descriptor of `folder`'s lock, flocked, with our process id written in it; None
    (logged) where it cannot be had; ComponentHeld if another process holds it."""
    path = os.path.join(folder, "lock")
    try:
        make_folders(folder, flush=False, within=root)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        log.warning("%s: not made (%s): %s", path, error, _UNGUARDED)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = ""
        with contextlib.suppress(OSError, ValueError):
            holder = os.pread(fd, 32, 0).decode().strip()
        os.close(fd)
        raise ComponentHeld(holder) from None
    except OSError as error:
        os.close(fd)
        log.warning("%s: no flock (%s): %s", path, error, _UNGUARDED)
        return None
    with contextlib.suppress(OSError):  # the holder's pid, only for the message of one refused
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _file_name(jid: str, node: str) -> str:
    """32 hex digits of the subscription's key: any JID and node fit in a file name."""
    key = json.dumps([jid, node]).encode()
    return hashlib.blake2b(key, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Recorded:
    jid: str  # the subscriber's full JID
    node: str


class SubscriberRecords:
    """The records of one component (its JID) under one root. A write the file system
    refuses (a full disk) is logged and passed by: the subscription stands, only the notice
    after a crash is lost with it."""

    def __init__(self, root: str, component: str, *, flush: bool) -> None:
        self._root = root
        self._folder = records_folder(root, component)
        self._component = component
        self._flush = flush
        self._made = False  # the folder, looked for once
        # The records the disk refused (full, read-only): written again by `retry`. Left
        # unwritten, a subscriber that subscribed on a full disk was never told of its
        # subscription's end by the start after a crash, space back or not.
        self._unwritten: set[tuple[str, str]] = set()

    def add(self, jid: str, node: str) -> None:
        refused = self._write(jid, node)
        if refused is None:
            return
        self._unwritten.add((jid, node))
        log.warning(
            "%s: the subscription of %s is not recorded, tried again each second: %s; if "
            "this process dies meanwhile, it is not told that the subscription is gone",
            node,
            jid,
            store_failure(refused),
        )

    def retry(self) -> None:
        """Write the records the disk refused (`add`); on the component's timer. A refusal
        again is not told again."""
        for jid, node in sorted(self._unwritten):
            if self._write(jid, node) is None:
                self._unwritten.discard((jid, node))
                log.info("%s: the subscription of %s is recorded now", node, jid)

    def _write(self, jid: str, node: str) -> OSError | None:
        try:
            self._make_folder()
            text = json.dumps({"jid": jid, "node": node})
            replace_file(self._path(jid, node), text, flush=self._flush)
        except OSError as error:
            return error
        return None

    def remove(self, jid: str, node: str) -> None:
        """Not flushed: a record a power cut brings back costs its subscriber one notice
        that its subscription is gone, which it is."""
        self._unwritten.discard((jid, node))
        try:
            os.unlink(self._path(jid, node))
        except FileNotFoundError:
            pass
        except OSError as error:
            log.warning("%s: the record of %s's subscription stays (%s)", node, jid, error)

    def left_over(self) -> list[Recorded]:
        """The subscriptions an earlier run of the component recorded and never ended (it
        died): what its next start reads, before it serves. A file that is no record
        (damaged, or a temporary a write left when the process died) is deleted, a damaged
        one with a warning: its subscriber is not told."""
        found: list[Recorded] = []
        for spelled in _spelled_folders(self._root, self._component):
            self._take_spelled(os.path.join(spelled, "subscribers"))
        try:
            entries = list(os.scandir(self._folder))
        except FileNotFoundError:
            return found  # nothing was ever recorded
        except OSError as error:
            log.warning("%s: not read (%s): no subscriber is told", self._folder, error)
            return found
        for entry in entries:
            record = None if entry.name.startswith(".") else _read(entry.path)
            if record is not None and _file_name(record.jid, record.node) == entry.name:
                found.append(record)
                continue
            if not entry.name.startswith("."):
                log.warning(
                    "%s is no subscriber record (damaged?): deleted; its subscriber, if any, "
                    "is not told that its subscription is gone",
                    entry.path,
                )
            with contextlib.suppress(OSError):  # gone meanwhile, or a folder put there
                os.unlink(entry.path)
        return found

    def _take_spelled(self, spelled: str) -> None:
        """Move the records an older boxmq left under the component's name as written into
        the domain's folder, where `left_over` reads them (`_spelled_folders`)."""
        try:
            entries = list(os.scandir(spelled))
        except FileNotFoundError:
            return
        except OSError as error:
            log.warning("%s: not read (%s): its subscribers are not told", spelled, error)
            return
        for entry in entries:
            try:
                self._make_folder()
                os.rename(entry.path, os.path.join(self._folder, entry.name))
            except OSError as error:
                log.warning("%s: not moved (%s): its subscriber is not told", entry.path, error)

    def _make_folder(self) -> None:
        """The records' folder, made if need be, and looked for once it was there (OSError if
        it cannot be made: the next call tries again)."""
        if not self._made:
            make_folders(self._folder, flush=self._flush, within=self._root)
            self._made = True

    def _path(self, jid: str, node: str) -> str:
        return os.path.join(self._folder, _file_name(jid, node))


def _read(path: str) -> Recorded | None:
    """The record in `path`, or None if it is none: each value a string XML can carry, as
    the notice quotes it."""
    try:
        data = json.loads(read_file(path).decode())
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(data, dict):
        return None
    jid, node = data.get("jid"), data.get("node")
    if not (isinstance(jid, str) and isinstance(node, str) and jid and node):
        return None
    if NOT_XML.search(jid) or NOT_XML.search(node):
        return None
    return Recorded(jid, node)
