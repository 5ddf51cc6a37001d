"""One error tree for all of boxmq, in protocol-neutral words.

Front-ends map these classes to their own vocabulary once (MQTT reason codes, XMPP stanza
conditions, CLI exit messages); nothing here knows those vocabularies.
"""

from __future__ import annotations

import errno
import reprlib
from collections.abc import Iterable, Mapping
from typing import Final, Literal, overload

__all__ = [
    "BoxMQError",
    "Closed",
    "Conflict",
    "Forbidden",
    "InvalidArgument",
    "InvalidName",
    "InvalidTopic",
    "ItemNotFound",
    "LockError",
    "MalformedName",
    "MalformedPacket",
    "MessageTooLarge",
    "MetadataTooLong",
    "NotAllowed",
    "PacketTooLarge",
    "ProtocolViolation",
    "QueueNotFound",
    "RecurringFailure",
    "ResourceConstraint",
    "StoreFailed",
    "StoreFull",
    "TargetMissing",
    "UnexpectedRequest",
    "check_count",
    "check_flag",
    "naming",
    "store_failure",
]


class BoxMQError(Exception):
    """The root of every error boxmq raises on purpose."""


class InvalidArgument(BoxMQError, ValueError):
    """The caller passed something boxmq cannot use; the message says what to fix."""


def check_flag(what: str, value: object) -> bool:
    """`value` if it is True or False; else an InvalidArgument that names `what`. Anything
    Python calls true or false was taken: durable="no" made a durable subscription, and
    retain="no" a retained message."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} is True or False, not {value!r}")
    return value


def check_listed(call: str, value: object, items: str, *, alone: str) -> None:
    """An InvalidArgument unless `value`, given to the batch call `call`, is a list (any
    iterable) of `items`. A text or bytes given alone is iterable too, item by character, and
    a dict by its keys: unsubscribe_many("a/#", ...) ended "a", "/" and "#". `alone`: what to
    write instead for one item."""
    if isinstance(value, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(
        value, Iterable
    ):
        raise InvalidArgument(
            f"{call} takes a list of {items}, not {type(value).__name__}: "
            f"{reprlib.repr(value)}; {alone}"
        )


@overload
def check_count(what: str, value: object, *, least: int, none: Literal[False] = False) -> int: ...


@overload
def check_count(what: str, value: object, *, least: int, none: bool) -> int | None: ...


def check_count(what: str, value: object, *, least: int, none: bool = False) -> int | None:
    """`value` if it is an int of at least `least` (or None, if `none`); else an
    InvalidArgument that names `what` and what it may be. A bool is refused, though Python
    counts True as 1: max_in_flight=True was one slot. A float too, though 2.0 compares as 2:
    1.5 slots made "how many are free" a fraction, and a NaN limit was no limit at all (every
    comparison with it false). An int under `least` is told the bound alone, unless None is
    allowed too, which the message then names."""
    if value is None and none:
        return None
    allowed = f"{'None or ' if none else ''}an int >= {least}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be {allowed}, not {value!r}")
    if value < least:
        raise InvalidArgument(f"{what} must be {allowed if none else f'>= {least}'}, not {value}")
    return value


class InvalidName(InvalidArgument):
    """A destination, consumer or property name that cannot be stored safely."""


class MetadataTooLong(InvalidArgument):
    """The message's metadata does not fit in a file name (see docs/file-format.md)."""


class InvalidTopic(InvalidArgument):
    """A topic name or topic filter that MQTT 5.0 §4.7 does not allow."""


class MessageTooLarge(InvalidArgument):
    """A body over the configured size limit."""


class ResourceConstraint(BoxMQError):
    """A limit on pending state was reached (QoS document, memory attacks); try again later."""


class NotAllowed(BoxMQError):
    """The source may not do this (e.g. an untrusted source asking for exactly-once)."""


class ProtocolViolation(BoxMQError):
    """A peer did something its state does not allow (an acknowledgement out of turn)."""


class MalformedPacket(ProtocolViolation):
    """Bytes from a peer that do not decode (a bad length, bad UTF-8, a reserved bit set)."""


class PacketTooLarge(ProtocolViolation):
    """A packet over the agreed maximum size."""


class MalformedName(BoxMQError):
    """A file name that is not in the DropboxMQ encoding (raised by the strict decoder only)."""


class QueueNotFound(BoxMQError):
    """The destination does not exist under the root."""


class Closed(BoxMQError):
    """The consumer, queue or box was closed."""


class LockError(BoxMQError):
    """A lock operation (ack, unlock, reject, extend) that XEP-0254 §2.3/§2.4 refuses."""

    def __init__(self, message_id: str, detail: str = "") -> None:
        # kept apart, not only in the text: a front-end rewords the detail for its
        # clients (the XMPP door names the requester by its JID) without parsing the text
        self.message_id = message_id
        self.detail = detail
        super().__init__(f"{message_id}: {detail}" if detail else message_id)


class ItemNotFound(LockError):
    """No such message in the queue (XEP-0254: item-not-found)."""


class Forbidden(LockError):
    """The requester never received this message (XEP-0254: forbidden)."""


class Conflict(LockError):
    """The message is locked by another consumer (XEP-0254: conflict)."""


class UnexpectedRequest(LockError):
    """The requester held this message, but its lock is gone (XEP-0254: unexpected-request)."""


# What an operator can do about each errno a file system gives us; the fallback names none.
_REMEDIES: Final[Mapping[int, str]] = {
    errno.ENOSPC: "the file system is full: free space (or inodes) on it",
    errno.EDQUOT: "the disk quota is used up: free space or raise the quota",
    errno.EROFS: "the file system is read-only (remounted after errors?): check it, remount rw",
    errno.EIO: "the disk reported an I/O error: check the device (dmesg) before going on",
    errno.EMFILE: "the process has too many open files: raise its limit (ulimit -n)",
    errno.ENFILE: "the system has too many open files: raise fs.file-max",
    errno.EPERM: "the dropbox folder does not accept changes (immutable? lsattr)",
    errno.EACCES: "the dropbox folder does not accept changes: check its owner and mode",
}
_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


class StoreFailed(BoxMQError):
    """The file system refused to store or move a message (EIO, EROFS, EMFILE, ...): nothing
    of the message was kept. Its text says where, what and what to fix, for an operator."""

    def __init__(self, error: OSError) -> None:
        self.errno = error.errno or 0
        self.path = error.filename if isinstance(error.filename, str) else None
        name = errno.errorcode.get(self.errno, "unknown error")
        remedy = _REMEDIES.get(self.errno, "check the file system of the root")
        where = f" at {self.path}" if self.path else ""
        super().__init__(f"the store failed{where}: {name} ({error.strerror}); {remedy}")


class StoreFull(StoreFailed):
    """No space left, or the quota used up (ENOSPC, EDQUOT): may pass once space is freed."""


class TargetMissing(StoreFailed):
    """A put into a queue whose folder is there but its target/ is not: moved aside to be
    made again (docs/operations.md, "Disk usage") or removed by hand. A state of the store
    that passes once target/ is back, not a deleted queue (QueueNotFound): the doors refuse
    the message as any store failure (XMPP internal-server-error, type wait), and keep the
    queue's subscribers. Nothing of the message was kept. Worded for its caller: `putting`
    for a put ("nothing was put; put again"), else for any request refused so (an XMPP
    subscribe, disco#items, unlock: "nothing was changed; try again"); `since`, when that
    target/ was there, as " since this Queue was made". `subscription`, for a topic's
    subscription (an exactly-once deliver to a topic): who subscribes and to which filter,
    as "subscriber 's'" and "t/#", the message naming it so, not as a queue."""

    def __init__(
        self,
        error: OSError,
        queue: str,
        target: str,
        *,
        putting: bool = False,
        since: str = "",
        subscription: tuple[str, str] | None = None,
    ) -> None:
        self.errno = error.errno or errno.ENOENT
        self.path = target
        undone, again = ("put", "put") if putting else ("changed", "try")
        if subscription is None:
            what = f"queue {queue!r}"
        else:
            who, filter = subscription
            what = f"subscription of {who} to topic filter {filter!r}"
        BoxMQError.__init__(
            self,
            f"{what} has no target/ ({target}): moved aside or removed{since}, "
            f"nothing was {undone}; {again} again once it is back (mkdir {target}, as "
            "operations.md's Disk usage does)",
        )


def store_failure(error: OSError) -> StoreFailed:
    """The BoxMQError that a front-end answers for an OSError of the store."""
    return StoreFull(error) if error.errno in _FULL else StoreFailed(error)


class RecurringFailure:
    """The failure a task repeated on a timer (a sweep each second) met at its last run, so
    that a file system failing every run (read-only, EIO) is told once, not at each: `news`
    says whether an error is worth telling (the first, or another errno), `recovered` whether
    a run that succeeded ends a failure told."""

    def __init__(self) -> None:
        self._errno: int | None = None  # None: the last run succeeded

    def news(self, error: OSError) -> bool:
        code = error.errno or 0  # 0: an OSError with no errno, still a failure
        told, self._errno = code != self._errno, code
        return told

    def recovered(self) -> bool:
        failed, self._errno = self._errno is not None, None
        return failed


def naming(error: OSError, path: str) -> OSError:
    """`error` (its errno and text) naming `path` as its file: the one the user knows, where
    the error named none (a write refused at the file's close) or a file of boxmq's own (a
    spare: '<root>/.spare/<process>+0/3' says nothing of the queue)."""
    return OSError(error.errno, error.strerror, path)
