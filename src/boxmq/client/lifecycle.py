"""The names a message takes as it moves between state folders.

A file keeps its DropboxMQ name from target/ to processed/; only three things rename it:
a lock (the `@owner@deadline@token` suffix in processing/), a release (delivery count, last
holder and not-before time go into reserved properties) and a dead letter (the reason goes in).
"""

from __future__ import annotations

import dataclasses
import logging
import os

from boxmq.core import Ready
from boxmq.errors import InvalidArgument, MetadataTooLong, UnexpectedRequest
from boxmq.model import (
    DEAD_REASON,
    DELIVERY_COUNT,
    LAST_HOLDER,
    NOT_BEFORE,
    ConsumerId,
    Envelope,
    MessageId,
    PropertyType,
)
from boxmq.store.dropbox import Dropbox
from boxmq.store.layout import State, is_dropbox
from boxmq.store.names import MAX_NAME, decode_lenient, encode

__all__ = [
    "PUT_HEADROOM",
    "PUT_NAME_LIMIT",
    "dead_name",
    "delay_dropped",
    "envelope_of",
    "lock_gone",
    "ready_of",
    "redrive_name",
    "released_name",
    "set_aside",
    "set_aside_claimed",
    "set_aside_strays",
    "shown",
    "tell_expired",
    "unusable",
]

log = logging.getLogger("boxmq")

# A producer's name must leave room for what a release adds (`&bx_dcI=NN&bx_nbL=<13 digits>`),
# so that a message can always go back to target/ with its delivery count.
PUT_HEADROOM = 32
PUT_NAME_LIMIT = MAX_NAME - PUT_HEADROOM  # the longest name a put may write


def unusable(name: str) -> str | None:
    """Why a name in target/ can never be delivered, or None if it can (docs/file-format.md).

    A name that is not UTF-8 (os.listdir gives it with surrogate escapes) has no id any door
    could carry; a name over MAX_NAME bytes has no room for a lock suffix.
    """
    size = len(name) if name.isascii() else len(os.fsencode(name))
    if size > MAX_NAME:
        return f"more than {MAX_NAME} bytes, too long to lock"
    if not name.isascii():
        try:
            name.encode()
        except UnicodeEncodeError:
            return "not valid UTF-8"
    return None


def set_aside(box: Dropbox, queue: str, name: str, why: str) -> bool:
    """Move target/<name>, which can never be delivered, to error/ under the same name, so that
    it blocks nobody and is never lost; True if it was moved (False: someone else did)."""
    if not box.move(State.TARGET, name, State.ERROR):
        return False
    log.error("%s: %s is %s: moved to error/", queue, shown(name), why)
    return True


NOT_A_FILE = "not a regular file"  # why a stray of target/ is set aside


def set_aside_strays(box: Dropbox, queue: str, strays: list[str]) -> None:
    """Move what `Dropbox.scan` found in target/ that is not a message file (a directory, a
    symbolic link, a named pipe) to error/, where people look, logged: never delivered."""
    for name in strays:
        set_aside(box, queue, name, NOT_A_FILE)


def set_aside_claimed(box: Dropbox, queue: str, processing: str, name: str) -> None:
    """What a claim found to be no message file (it was a directory or a pipe when renamed
    into processing/): from processing/<processing> to error/<name>, logged."""
    if box.move(State.PROCESSING, processing, State.ERROR, name):
        log.error("%s: %s is %s: moved to error/", queue, shown(name), NOT_A_FILE)


def tell_expired(queue: str, moved: int) -> None:
    """Say that a reader of `queue` moved `moved` messages whose expiration passed from
    target/ to expired/: `boxmq ls` counted them ready, and they left with no one's ack."""
    if moved:
        log.info(
            "%s: %d message(s) expired before a consumer took them: moved to expired/",
            queue,
            moved,
        )


def shown(text: str) -> str:
    """`text` fit to print: bytes that are not UTF-8 (surrogate escapes) as \\xNN."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def envelope_of(name: str) -> Envelope:
    envelope, _ = decode_lenient(name)
    return envelope


def ready_of(name: str, envelope: Envelope, sequence: float) -> Ready:
    """What the engine needs to know of a file in target/. `sequence` orders it within its
    priority: its id's timestamp in seconds (`envelope.timestamp / 1000`), else the file's
    mtime (the caller knows which it has, and reads the timestamp once)."""
    if not envelope.properties:  # a first delivery: none of the reserved properties to look up
        return Ready(
            name, envelope.message_id, envelope.priority, sequence, envelope.expiration / 1000
        )
    not_before, delivery_count, last_holder, group_key = envelope.dispatch_fields()
    return Ready(
        name,
        envelope.message_id,
        envelope.priority,
        sequence,
        envelope.expiration / 1000,
        not_before,
        delivery_count,
        last_holder,
        group_key,
    )


def released_name(
    name: str, *, delivery_count: int, holder: ConsumerId | None, not_before: float
) -> str | None:
    """The target/ name after a release, or None if the metadata cannot grow (see PUT_HEADROOM).
    `not_before`: the epoch seconds the message waits until (`unlocked_until`), 0 for none.
    The last holder and the delay (`not_before`) are hints, dropped in that order where the
    name has no room for them: a delayed unlock of a long name releases it ready at once
    (`delay_dropped` tells), the message kept; only a name that cannot carry the delivery
    count is None (to error/ as metadata-full)."""
    counted = envelope_of(name).with_property(DELIVERY_COUNT, PropertyType.INT, delivery_count)
    counted = counted.without_property(NOT_BEFORE)
    envelope = counted
    if not_before > 0:
        envelope = counted.with_property(NOT_BEFORE, PropertyType.LONG, int(not_before * 1000))
    with_holder = (
        envelope.without_property(LAST_HOLDER)  # nobody passed over: no older hint either
        if holder is None
        else envelope.with_property(LAST_HOLDER, PropertyType.STRING, holder)
    )
    # The last holder is a hint (the *next* consumer gets it first); drop it before failing,
    # then the delay (a hint too: the message is what matters).
    candidates = [with_holder, envelope.without_property(LAST_HOLDER)]
    if not_before > 0:
        candidates.append(counted.without_property(LAST_HOLDER))
    for candidate in candidates:
        try:
            return encode(candidate, as_read=True)
        except InvalidArgument:  # too long, or a count past an INT's (a name a script wrote)
            continue
    return None


def delay_dropped(released: str, not_before: float) -> bool:
    """Whether `released_name` gave `released` without the delay `not_before` asked for:
    the same epoch seconds (or 0) as `released_name` was given, not the delay's seconds."""
    return not_before > 0 and envelope_of(released).property_value(NOT_BEFORE) is None


def released_or_dead(
    name: str,
    *,
    delivery_count: int,
    max_deliveries: int | None,
    holder: ConsumerId | None,
    not_before: float,
) -> tuple[str | None, str | None]:
    """Where a lock that ends without an ack sends its message: (the target/ name, None) for
    another delivery, or (None, why) for error/: "max-deliveries" once `delivery_count`
    reaches `max_deliveries`, "metadata-full" when the name cannot carry the count."""
    if max_deliveries is not None and delivery_count >= max_deliveries:
        return None, "max-deliveries"
    new = released_name(name, delivery_count=delivery_count, holder=holder, not_before=not_before)
    return (new, None) if new is not None else (None, "metadata-full")


def dead_name(
    name: str, reason: str, *, holder: ConsumerId | None, delivery_count: int | None = None
) -> str:
    """The error/ name: the reason, `delivery_count`, the deliveries that ended without an
    ack, the one that ends here included (None: the name's count stays), and `holder`, the
    consumer whose delivery ends here (None: no consumer held it), recorded if they fit; else
    the same without the holder (a hint, dropped first), the count alone, the reason with the
    holder and then alone (a count past an INT's), or the original name. The name's older
    holder never stays: in error/ it would name the consumer of a delivery before the last
    as the one that failed."""
    envelope = envelope_of(name).without_property(LAST_HOLDER)
    counted = envelope
    if delivery_count is not None:
        counted = envelope.with_property(DELIVERY_COUNT, PropertyType.INT, delivery_count)
    why = (DEAD_REASON, PropertyType.STRING, reason)
    reasoned, alone = counted.with_property(*why), envelope.with_property(*why)
    candidates: tuple[Envelope, ...] = (reasoned, counted, alone)
    if holder is not None:
        last = (LAST_HOLDER, PropertyType.STRING, holder)
        held, held_alone = reasoned.with_property(*last), alone.with_property(*last)
        candidates = (held, reasoned, counted, held_alone, alone)
    for candidate in candidates:
        try:
            return encode(candidate, as_read=True)
        except InvalidArgument:  # too long, or a count past an INT's (a name a script wrote)
            continue
    return name


def redrive_name(name: str, *, now: float) -> str:
    """The target/ name of a dead letter sent back: a fresh start, no count, no reason, and no
    expiration once it has passed (else a redrive from expired/ would expire again at once)."""
    envelope, reason = decode_lenient(name)
    if reason is not None:
        return name  # a foreign name: keep it exactly as its producer wrote it
    for reserved in (DELIVERY_COUNT, DEAD_REASON, NOT_BEFORE, LAST_HOLDER):
        envelope = envelope.without_property(reserved)
    if envelope.expired(now):
        envelope = dataclasses.replace(envelope, expiration=0)
    try:
        return encode(envelope, as_read=True)
    except MetadataTooLong:
        return name


def lock_gone(message_id: MessageId, path: str) -> UnexpectedRequest:
    """The error of a settle whose lock is no longer there: XEP-0254's unexpected-request
    (the requester held the message, and its lock is gone), which still fits when the queue
    or subscription at `path` was deleted under it; item-not-found would tell the consumer it
    never had such a message. Deleted, it says so, rather than leave the consumer looking for
    who took its lock."""
    if not is_dropbox(path):
        return UnexpectedRequest(
            message_id, f"the lock was taken away: its queue was deleted ({path} is gone)"
        )
    return UnexpectedRequest(message_id, "the lock was taken away")
