"""An error of the system (OSError) told in one line: what failed, where, and what to change
(a folder's access, a full disk, a listener's address in use)."""

from __future__ import annotations

import errno
import os

from boxmq.errors import InvalidArgument
from boxmq.store.layout import State
from boxmq.store.topics import SUBSCRIPTIONS_DIR


def os_error(
    error: OSError,
    data: str,
    *,
    listener: str = "--mqtt HOST:PORT",
    root: str = "--data folder",
) -> str:
    """One line for an error of the system: what failed, where, and what to change.
    `listener`: the setting a listener that cannot bind came from; `root`: the one the root
    folder `data` came from."""
    what = error.strerror or str(error)
    hint = _hint(error).format(listener=listener)
    if error.filename is None:  # e.g. a listener: asyncio names the address in strerror
        return f"{what}{hint}"
    where = os.fsdecode(error.filename)
    if error.errno == errno.EEXIST and os.path.islink(where):
        # makedirs on a link to nothing (or to itself): no file stands there to move away
        hint = f": a symbolic link to {os.readlink(where)}, which is no folder; make that folder"
    if hint and _within(where, data) and error.errno not in _OF_THE_PROCESS:
        hint += f" (or choose another {root})"
    if error.filename2 is not None:
        where += f" -> {os.fsdecode(error.filename2)}"
    return f"{where}: {what}{hint}"


def check_not_a_dropbox(path: str, root_from: str | None = None) -> None:
    """Refuse (InvalidArgument) a queue's or a subscription's own folder given as the root
    (`--data data/jobs`: `ls` listed nothing, a `put` made a queue inside the queue), naming
    the root it is in. Told by its state folders: a queue named `target` is a folder holding
    a target/ of its own, which a dropbox's target/ (message files) never does. `root_from`:
    where the root came from when not --data or $BOXMQ_DATA."""
    target = os.path.join(path, State.TARGET.value)
    if not (
        os.path.isdir(target)
        and os.path.isdir(os.path.join(path, State.PROCESSING.value))
        and not os.path.isdir(os.path.join(target, State.TARGET.value))
    ):
        return
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.basename(parent) == SUBSCRIPTIONS_DIR:  # <root>/topic-root/<filter>/.subscriptions
        what, root = (
            "a subscription's folder",
            os.path.dirname(os.path.dirname(os.path.dirname(parent))),
        )
    else:
        what, root = "a queue's folder", parent
    given = root_from or "--data or $BOXMQ_DATA"
    raise InvalidArgument(
        f"{path} is {what} (it holds target/ and processing/), not a root: check {given}, "
        f"which takes the folder that holds the queues ({root})"
    )


def _within(path: str, folder: str) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _hint(error: OSError) -> str:
    # getaddrinfo's errors (EAI_*) have numbers of their own, which errno's may share.
    if _is_unknown_host(error):
        return " (check the host name, or choose another {listener})"
    if error.errno == errno.EACCES and _is_bind(error):  # a privileged port
        return (
            " (a port below 1024 needs root, or the CAP_NET_BIND_SERVICE capability: "
            "choose another {listener})"
        )
    if error.errno == errno.EINVAL and _is_bind(error):
        # What Linux answers for a link-local IPv6 address without its interface: the same
        # fe80:: address may be on every interface, so it names none.
        return (
            " (a link-local IPv6 address, fe80::..., needs the interface it is on after a %: "
            "fe80::1%eth0; else choose another {listener})"
        )
    return _HINTS_BY_ERRNO.get(error.errno or 0, "")


def _is_unknown_host(error: OSError) -> bool:
    """A listener's host name that does not resolve (getaddrinfo's error). `socket` is
    imported here, where an error is being told, not by every command (2.5 % of a put)."""
    import socket

    return isinstance(error, socket.gaierror)


def _is_bind(error: OSError) -> bool:
    """A listener's bind that the system refused: asyncio's bind errors name the address in
    their text, and carry no file name, which every file's error has."""
    return error.filename is None and "bind" in (error.strerror or "")


_HINTS_BY_ERRNO = {
    errno.EACCES: ": give this user access to it",
    errno.EPERM: ": give this user access to it",
    errno.EROFS: ": the file system is read-only; mount it writable",
    errno.EEXIST: ": it is a file, not a folder",
    errno.ENOTDIR: ": a file stands where a folder must be",
    errno.ENOENT: ": it does not exist and cannot be made here",
    # df -h may show room left on a disk out of inodes (many small files: one a message).
    errno.ENOSPC: ": the disk is full (df -h), or out of inodes (df -i); free some space",
    errno.EDQUOT: ": the disk quota is used up; free some space",
    errno.EMFILE: ": raise this process's limit of open files (ulimit -n)",
    errno.ENFILE: ": the system's open files are all taken; raise fs.file-max",
    errno.EADDRINUSE: " (another program listens there: stop it, or choose another {listener})",
    errno.EADDRNOTAVAIL: " (this machine has no such address: choose another {listener})",
}


# Limits of the process or the system, not of the place: another root would not help.
_OF_THE_PROCESS = frozenset({errno.EMFILE, errno.ENFILE})


def is_listener_error(error: OSError) -> bool:
    """An address a listener cannot have: in use, not this machine's, a port this user may
    not listen on, a link-local address without its interface, or a host name that does not
    resolve."""
    unknown_host = _is_unknown_host(error)
    refused = error.errno in (errno.EACCES, errno.EINVAL) and _is_bind(error)
    return unknown_host or refused or error.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL)
