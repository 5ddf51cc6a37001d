"""A persistent MQTT session's own record on disk: when it ends, and how its messages go out.

    <root>/.mqtt/sessions/<client id>    one JSON file per session (the id escaped as a name)

A persistent session's durable subscriptions are dropboxes with their own records
(store/topics.py), read by every publisher to route. Those records are shared by the members
of a share group and say nothing of time, so what belongs to one session is kept here: its
Session Expiry Interval and since when its client is away (MQTT 5.0 §3.1.2.11.2), and, per
filter as subscribed, the options that shape what it is sent (Subscription Identifier
§3.8.2.1.2, Retain As Published §3.8.3.1, and the QoS granted: a share group's record holds
the highest any member was granted, MQTT-3.8.4-8). Retain Handling only acts at SUBSCRIBE
time and is not kept. And its connection's Will Message (§3.1.3.2.2), so that a delayed Will
outlives a restart of the broker. And the packet ids of the QoS 2 messages it was sent,
acknowledged with PUBREC and was sent PUBREL for, not yet completed: a restarted broker sends
those PUBRELs again (§4.4), where the process before would have, so that the client frees
them; the messages themselves were settled at PUBREC and are never sent again.

Invariants:
- The session's subscriptions are those its record names: `options` (every filter it holds,
  and those on their way to SUBACK) and `leaving` (SessionRecord.made). Another found on
  disk under its name (stored.consumer_name) was made by another door, and is not its own.
- `holder` is the process token of the broker the client is connected to; None once the
  connection closed, at `disconnected_at` (wall clock, seconds since the epoch). A session
  away ends `expiry` seconds after that, one with expiry NEVER only on a clean start.
- `server` is the process token of the broker that holds the session in memory: the one its
  client is connected to, or the one it left, which keeps what it was sent (to send again)
  until the session ends or its client returns. A broker that holds a copy and finds
  another named lets go of its copy without ending the session (Lifetimes.let_go): at its
  expiry timer and at its client's return (there also when it finds none named: one took
  the session on and counts it, Lifetimes.moved_on), at the close of a connection whose
  client connected there meanwhile (TakenElsewhere.at_close), and before writing the record
  on such a connection (a QoS 2 PUBLISH, a PUBREL, a SUBSCRIBE), which it closes
  (TakenElsewhere.since): both one stat of the record, read only if another write replaced
  it. None when no broker holds it (a record
  rewritten at a restart, or by a running broker that took it on from one of its host that
  died: Lifetimes.adopt_the_dead, or written by a boxmq before 2026-11-29), or naming a
  broker that died (a session away that its successor took on, writing no record): what
  tells `boxmq unlock` and the other settles whether a running broker counts a message in
  flight as the session's (cli_settle.py).
- `counted_by` is the process token of the broker that counts the session's end and its
  Will's delay while none holds it (`server` None): the one that took it on with its
  client connected to a broker of its host that died, or at its client's CONNECT
  (Lifetimes). One counts it (`counter`: `server`, or else `counted_by`), or, once that one
  died, its successor (succession.py: a broker that took on all its sessions away with one
  file, writing none of their records); when that one dies, a running broker of its host
  takes it on, and no broker that starts counts it while that one runs.
  None in a record that a broker holds (whose `server` counts it), and in one written by a
  boxmq before 2026-11-30 that none holds: a broker that starts takes such a one on.
- `will` is the Will of the connection (held or last closed) still to be sent: written at
  CONNECT, so that a broker killed while the client is connected finds it at its restart,
  and at close (due then, or after its delay); None once it is sent and written for the
  durable subscribers (kept if the disk refused that write: a restart sends it again), or
  if the connection closed with DISCONNECT 0x00. `will_due` (wall clock) is when it goes
  out: None while the connection is open (the delay counts from its close).
- `sent` names the stored messages (from its dropboxes) the session was sent and had not
  acknowledged when the record was written, with their packet ids and the subscription
  (filter, or `$share/...`) each came from, in the order they were first sent: its locks
  outlive the broker, so a restarted one sends them again under those ids, with DUP (§4.4),
  in that order and before anything new (MQTT-4.6.0-1; delivery.py). A message matching two
  of the session's filters is in both dropboxes under one message id, a copy sent under each
  packet id: by the id alone, one copy took the other's packet id and the other went as new,
  a QoS 2 one delivered twice. The subscriptions are kept in `sent_subscriptions`, a list
  beside `sent` (whose pairs an older boxmq still reads); a record without it names none
  (None), and its ids match a message in any of the session's dropboxes, the copies of one
  message taking its packet ids in turn (delivery.py, `_taken`). It is
  written at a close (and so at a graceful shutdown), and before each write to the client
  that sends a QoS 2 PUBLISH (unflushed: a killed broker's page cache keeps it; a power cut
  may lose the last one). So after a SIGKILL it names every QoS 2 message in flight, and a
  client that has one never gets it under a new id (which it would deliver again). QoS 1
  ones sent since the last write go out under new ids (at least once allows a second
  delivery), and an id of a message since settled names nothing. A session resumed after a
  restart names what its record named until it has sent those again (`sent_qos2` too):
  the record its CONNECT writes comes before the pump that sends them.
- `releasing` is written the same way: before each write that sends a PUBREL, when the
  connection closes, and at a graceful shutdown (which closes every connection).
- `sent_qos2` names the packet ids of `sent` that went at QoS 2. A restarted broker that
  finds the message of one gone from its dropbox knows it was settled by a PUBREC read
  after the record was written (a positive PUBREC settles at once, and its PUBREL is
  recorded only before the write that sends it): it sends that PUBREL, rather than leave
  the client holding the id (and taking the next message under it for a repeat).
- `next_packet_id` is the packet id the session's next new message takes, written with the
  rest (no write of its own): a restarted broker goes on from there, not from 1, since a
  client may still hold a stale copy under an id the process before used (libmosquitto,
  docs/mqtt.md). QoS 1 messages sent after the last write took ids from it on, which a
  restart gives out again (a client holds no copy of a QoS 1 message it acknowledged; the
  record is written before each QoS 2 PUBLISH). A record without it (an older boxmq's) has
  new ids start after the highest of `sent` and `releasing`.
- A record is replaced by a rename: a reader sees the old one or the new one, never half.
- Every field but `client_id` and `expiry` has a default, and unknown fields are ignored, so a
  record written by another boxmq version still loads.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from boxmq.core.topics import SHARE_PREFIX
from boxmq.errors import BoxMQError, InvalidName, ProtocolViolation, store_failure
from boxmq.mqtt.framing import PacketType, encode_varint
from boxmq.mqtt.packets import Will
from boxmq.mqtt.properties import read_properties
from boxmq.mqtt.session import NEVER
from boxmq.mqtt.stored import consumer_name
from boxmq.store.names import escape_segment, unescape_segment
from boxmq.store.records import make_folders, read_file, replace_file

log = logging.getLogger(__name__)

__all__ = [
    "AwayAtStart",
    "DeliveryOptions",
    "RecordUnreadable",
    "RecordsUnlisted",
    "SessionRecord",
    "read_record",
    "read_record_file",
    "read_records",
    "record_named",
    "record_path",
    "records_folder",
    "remove_record",
    "write_record",
]


@dataclass(frozen=True, slots=True)
class DeliveryOptions:
    """What a subscription's own record does not carry: how its messages go to this session."""

    identifier: int | None = None  # Subscription Identifier, sent back with each message
    retain_as_published: bool = False
    # The QoS granted to this session: a share group's record holds the group's, the highest
    # any member was granted. None: written by a boxmq that did not keep it.
    qos: int | None = None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    client_id: str
    expiry: int  # Session Expiry Interval in seconds; NEVER; 0 ends with the connection
    holder: str | None = None  # the broker process the client is connected to
    server: str | None = None  # the broker process holding the session in memory
    disconnected_at: float | None = None  # when the client's connection closed
    options: Mapping[str, DeliveryOptions] = field(default_factory=dict)  # by filter
    username: str | None = None  # the client's, whose rights its Will is published with
    will: Will | None = None  # the Will still to be sent
    will_due: float | None = None  # when: None while the client is connected
    releasing: tuple[int, ...] = ()  # QoS 2 packet ids sent PUBREL, awaiting PUBCOMP
    # (message id, packet id, subscription) of the stored messages sent and not yet
    # acknowledged; the subscription is None in a record of a boxmq that did not write it.
    sent: tuple[tuple[str, int, str | None], ...] = ()
    sent_qos2: tuple[int, ...] = ()  # those of `sent` sent at QoS 2, by packet id
    # The share groups it unsubscribed from while it held some of their messages (left once
    # those are settled); None: written by a boxmq that did not keep them.
    leaving: tuple[str, ...] | None = None
    # The packet id its next new message takes; None: written by a boxmq that did not keep it.
    next_packet_id: int | None = None
    # The broker counting its end and its Will while none holds it (`counter`).
    counted_by: str | None = None

    @property
    def held_by(self) -> str | None:
        """The process token of the broker holding the session in memory (its client
        connected there, or away and kept there), or None: `server`, or in a record of a boxmq
        that did not write it, `holder` (a broker always writes both as itself when its client
        is connected)."""
        return self.server or self.holder

    @property
    def counter(self) -> str | None:
        """The process token of the broker that counts the session's end and its Will's
        delay: the one holding it (`held_by`), or, if none does, the one that took it on
        (`counted_by`); None if nothing names one (a record of a boxmq before 2026-11-30)."""
        return self.held_by or self.counted_by

    def made(self, text: str) -> bool:
        """Whether the subscription `text` (as subscribed, "$share/<group>/<filter>" for a
        membership) found on disk under the session's name is the session's own: one its
        record names. Any other was made by another door (`boxmq subscribe --name`, the
        Python API) under a name that happens to be this client id, and the session neither
        takes it nor deletes it: its client never subscribed to it, and another consumer
        counts on it. A record that does not list the groups being left (an older boxmq's)
        counts every membership it does not name as one."""
        if text in self.options:
            return True
        if not text.startswith(SHARE_PREFIX):
            return False
        return self.leaving is None or text in self.leaving

    def deadline(self) -> float | None:
        """When the session ends if its client stays away; None: it never does, or the client
        is connected."""
        if self.expiry == NEVER or self.disconnected_at is None:
            return None
        return self.disconnected_at + self.expiry

    def capped(self, limit: int) -> SessionRecord:
        """This record under a broker's `max_session_expiry` of `limit`: a session granted
        longer (never, or a limit lowered while no broker ran) ends by it, counted from its
        client's leaving, and its Will no later (MQTT 5.0 §3.1.3.2.2), as if its CONNECT had
        come under this limit (mosquitto caps the sessions it restores too). A broker caps
        what it reads from the disk so (Lifetimes), and `boxmq session ls --config` shows it."""
        if self.expiry <= limit:
            return self
        capped = replace(self, expiry=limit)
        if self.will_due is not None and self.disconnected_at is not None:
            capped = replace(capped, will_due=min(self.will_due, self.disconnected_at + limit))
        return capped


def _same_away(record: SessionRecord | None, scheduled: SessionRecord) -> bool:
    """Whether `record` is still the session away that `scheduled` was (its Will sent since
    or not): its client has not come back."""
    if record is None:
        return False
    return replace(record, will=None, will_due=None) == replace(scheduled, will=None, will_due=None)


@dataclass(frozen=True, slots=True)
class AwayAtStart:
    """A session found on disk at start whose client is away: `counted` as this broker
    counts it (since when, when its Will is due), `found` as it was read, which the disk
    still holds if `counted` could not be written over it. Either on disk means that its
    client has not come back since: a client's return writes a record of its own."""

    counted: SessionRecord
    found: SessionRecord

    def still_away(self, current: SessionRecord | None) -> bool:
        """Whether `current`, the record on disk now, says so (its Will sent since or not)."""
        return _same_away(current, self.counted) or _same_away(current, self.found)

    def will_unsent(self, current: SessionRecord | None) -> bool:
        """Whether `current` says so, and that its Will was not sent yet."""
        return current is not None and current in (self.counted, self.found)


def _to_json(record: SessionRecord) -> dict[str, Any]:
    return {
        "client_id": record.client_id,
        "expiry": record.expiry,
        "holder": record.holder,
        "server": record.server,
        "disconnected_at": record.disconnected_at,
        "options": {
            text: {
                "identifier": o.identifier,
                "retain_as_published": o.retain_as_published,
                "qos": o.qos,
            }
            for text, o in record.options.items()
        },
        "username": record.username,
        "will": None if record.will is None else _will_to_json(record.will),
        "will_due": record.will_due,
        "releasing": list(record.releasing),
        "sent": [[message_id, packet_id] for message_id, packet_id, _ in record.sent],
        "sent_subscriptions": [queue for _, _, queue in record.sent],
        "sent_qos2": list(record.sent_qos2),
        "leaving": None if record.leaving is None else list(record.leaving),
        "next_packet_id": record.next_packet_id,
        "counted_by": record.counted_by,
    }


def _will_to_json(will: Will) -> dict[str, Any]:
    """The payload and the properties are bytes: base64 (the properties as on the wire)."""
    return {
        "topic": will.topic,
        "payload": base64.b64encode(will.payload).decode("ascii"),
        "qos": will.qos,
        "retain": will.retain,
        "properties": base64.b64encode(will.properties.raw).decode("ascii"),
    }


def _will_from_json(data: Mapping[str, Any]) -> Will:
    raw = base64.b64decode(data.get("properties", ""), validate=True)
    # Checked as a CONNECT's Will Properties are: the accessors trust what they read.
    properties, _ = read_properties(encode_varint(len(raw)) + raw, 0, PacketType.CONNECT, will=True)
    qos = int(data.get("qos", 0))
    if qos not in (0, 1, 2):
        raise ValueError(f"a Will with QoS {qos}")
    return Will(
        topic=str(data["topic"]),
        payload=base64.b64decode(data.get("payload", ""), validate=True),
        qos=qos,
        retain=bool(data.get("retain", False)),
        properties=properties,
    )


def _from_json(data: Mapping[str, Any]) -> SessionRecord:
    """The record `data` holds; missing fields take their defaults (ValueError if it is not
    a session record at all)."""
    try:
        options = {
            str(text): DeliveryOptions(
                identifier=_optional_int(o.get("identifier")),
                retain_as_published=bool(o.get("retain_as_published", False)),
                qos=_optional_qos(o.get("qos")),
            )
            for text, o in data.get("options", {}).items()
        }
        at = data.get("disconnected_at")
        holder = data.get("holder")
        server = data.get("server")
        username = data.get("username")
        will = data.get("will")
        due = data.get("will_due")
        leaving = data.get("leaving")
        next_id = data.get("next_packet_id")
        counted_by = data.get("counted_by")
        return SessionRecord(
            client_id=str(data["client_id"]),
            expiry=int(data["expiry"]),
            holder=None if holder is None else str(holder),
            server=None if server is None else str(server),
            disconnected_at=None if at is None else float(at),
            options=options,
            username=None if username is None else str(username),
            will=None if will is None else _will_from_json(will),
            will_due=None if due is None else float(due),
            releasing=tuple(_packet_id(i) for i in data.get("releasing", ())),
            sent=_sent(data.get("sent", ()), data.get("sent_subscriptions")),
            sent_qos2=tuple(_packet_id(i) for i in data.get("sent_qos2", ())),
            leaving=None if leaving is None else tuple(str(text) for text in leaving),
            next_packet_id=None if next_id is None else _packet_id(next_id),
            counted_by=None if counted_by is None else str(counted_by),
        )
    except (KeyError, TypeError, AttributeError, binascii.Error, ProtocolViolation) as error:
        raise ValueError(f"not a session record: {error!r}") from None


def _sent(pairs: Any, subscriptions: Any) -> tuple[tuple[str, int, str | None], ...]:
    """`sent` read back: its pairs with the subscription beside each, None for all of them if
    the record has no list of them, or one that does not match (written by another boxmq)."""
    sent = [(str(m), _packet_id(i)) for m, i in pairs]
    if type(subscriptions) is not list or len(subscriptions) != len(sent):
        subscriptions = [None] * len(sent)
    return tuple(
        (m, i, None if queue is None else str(queue))
        for (m, i), queue in zip(sent, subscriptions, strict=True)
    )


def _packet_id(value: Any) -> int:
    if type(value) is not int or not 0 < value <= 0xFFFF:
        raise TypeError(f"{value!r} is not a packet id")
    return value


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_qos(value: Any) -> int | None:
    if value is not None and value not in (0, 1, 2):
        raise TypeError(f"{value!r} is not a QoS")
    return None if value is None else int(value)


def records_folder(root: str) -> str:
    return os.path.join(root, ".mqtt", "sessions")


def _path(root: str, client_id: str) -> str:
    return os.path.join(records_folder(root), escape_segment(client_id))


def write_record(root: str, record: SessionRecord, *, flush: bool = False) -> os.stat_result:
    """Replace the session's record. With `flush` (fsync=always, before its client is told:
    CONNACK, SUBACK, UNSUBACK), on disk when this returns. A refused write (disk full)
    leaves no temporary behind: the broker logs it and goes on, and writes one at every
    CONNECT, SUBSCRIBE and disconnect. Returns the file's status as written, which
    a stat of `record_path` gives back until another write replaces it."""
    folder = records_folder(root)
    make_folders(folder, flush=flush, within=root)
    return replace_file(_path(root, record.client_id), json.dumps(_to_json(record)), flush=flush)


def record_path(root: str, client_id: str) -> str:
    """Where the session's record is: for a caller that stats it often (escaping the client
    id costs four times the stat)."""
    return _path(root, client_id)


def read_record(root: str, client_id: str) -> SessionRecord | None:
    return _read(_path(root, client_id))


def record_named(root: str, subscriber: str) -> SessionRecord | None:
    """The record of the session whose subscriptions on disk go by `subscriber`
    (stored.consumer_name of its client id), or None: what tells another door (the CLI) that
    a subscriber name is an MQTT client's. One record read, but a name shortened from a long
    client id (`%h` and a hash) cannot be turned back into it: the record files' names,
    the client ids escaped, are listed then, and only the one with that name read. (Every
    record was read, and one damaged warned of, though it had nothing to do with it.) A
    folder that cannot be listed is `RecordsUnlisted`, what `serve` and `session ls` say:
    the CLI's lookup said only the folder and the errno's text. A record the file system
    refuses to read (EIO, a link to itself) is `RecordUnreadable`, for the same reason."""
    if "%h" in subscriber:
        for entry in _listed(records_folder(root)):
            if entry.name.startswith("."):
                continue  # a record being written, or a claim
            try:
                client_id = unescape_segment(entry.name)
            except InvalidName:
                continue  # no record's name
            if consumer_name(client_id) == subscriber:
                return _read_named(entry.path)  # damaged: None, as for a short name
        return None
    client_id = _UNESCAPE.sub(lambda m: "%" if m[1] == "25" else "/", subscriber)
    if consumer_name(client_id) != subscriber:  # a '%' no client id's name holds
        return None
    return _read_named(_path(root, client_id))


def _read_named(path: str) -> SessionRecord | None:
    try:
        return _read(path)
    except OSError as error:
        raise RecordUnreadable(path, error) from error


_UNESCAPE = re.compile("%(25|2F)")  # consumer_name's two escapes, undone


def remove_record(root: str, client_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_path(root, client_id))


def read_records(root: str, unread: list[str] | None = None) -> Iterator[SessionRecord]:
    """Every session record under the root. One unreadable (damaged, or not written by a
    boxmq) is skipped with a warning naming it: its session was left out of `boxmq session
    ls` and never ended, its Will never sent, and nothing said why. One the file system
    refuses to read (EIO of a failing disk, ELOOP, EISDIR) is skipped too, told at ERROR,
    and its path added to `unread` (a broker's start reads it again later, Lifetimes):
    raised, one such file stopped `boxmq serve` from starting and `boxmq session ls` from
    listing the others. Neither is deleted or written: the session is the user's.

    The folder itself that cannot be listed (EACCES, EIO, a link to nothing) raises
    `RecordsUnlisted`: no session of it is known then, so none can be skipped alone."""
    for entry in _listed(records_folder(root)):
        if entry.name.startswith("."):
            continue  # a record being written
        try:
            record = _read_strictly(entry.path)
        except ValueError as error:
            log.warning(
                "%s is no session record this boxmq reads (%s): its session is not "
                "listed, timed or ended, and its Will is not sent; the next connection "
                "of its client replaces it, or delete the file to forget the session "
                "(its subscriptions stay: `boxmq unsubscribe --name`)",
                entry.path,
                error,
            )
            continue
        except OSError as error:
            log.error(
                "%s cannot be read (%s): its session is not listed, timed or ended, and "
                "its Will is not sent, while it cannot (a server takes it on once it "
                "reads, and refuses its client's CONNECT as a disk failure till then); "
                "the file is left as it is",
                entry.path,
                store_failure(error),
            )
            if unread is not None:
                unread.append(entry.path)
            continue
        if record is not None:
            yield record


class RecordsUnlisted(BoxMQError):
    """The folder of the session records cannot be listed: what `boxmq serve` stops its start
    with (its sessions could be neither timed, ended nor taken on), and `session ls` says."""

    def __init__(self, folder: str, error: OSError) -> None:
        super().__init__(
            f"the MQTT session records in {folder} cannot be listed: "
            f"{_refusal(error, _UNLISTED_REMEDIES)}. No persistent session is known until then "
            "(a record alone that cannot be read only waits for its own session)"
        )


class RecordUnreadable(BoxMQError):
    """A session record the file system refuses to read, named with what to do: what the
    CLI says when it looks a subscriber name up (`record_named`)."""

    def __init__(self, path: str, error: OSError) -> None:
        super().__init__(
            f"the MQTT session record {path} cannot be read: "
            f"{_refusal(error, _UNREADABLE_REMEDIES)}. It is left as it is"
        )


def _refusal(error: OSError, remedies: dict[int, str]) -> str:
    """What the file system said and what to do about it: `EIO (Input/output error); <remedy>`."""
    name = errno.errorcode.get(error.errno or 0, "unknown error")
    remedy = remedies.get(error.errno or 0, "check the file system of the root")
    return f"{name} ({error.strerror}); {remedy}"


_UNREADABLE_REMEDIES = {
    # Refused by the file or by a folder above it (a root of mode 0700): both are named.
    errno.EACCES: "give this user read access to it, and search access to the folders above",
    errno.EPERM: "give this user read access to it, and search access to the folders above",
    errno.EIO: "the disk reported an I/O error: check the device (dmesg) before going on",
    errno.EISDIR: "a folder stands where the record must be: move it away to forget the session",
    errno.ELOOP: (
        "a symbolic link that leads nowhere stands there: delete it to forget the session, "
        "or make it the record"
    ),
}


_UNLISTED_REMEDIES = {
    errno.EACCES: "give this user read and search access to the folder",
    errno.EPERM: "give this user read and search access to the folder",
    errno.EIO: "the disk reported an I/O error: check the device (dmesg) before going on",
    errno.ENOTDIR: "a file stands where the folder must be: make it a folder",
    errno.ELOOP: "a symbolic link that leads nowhere stands there: make it a folder",
}


def _listed(folder: str) -> Iterator[os.DirEntry[str]]:
    """The entries of `folder`, none if it was never made; its failure as `RecordsUnlisted`."""
    try:
        with os.scandir(folder) as entries:
            yield from entries
    except FileNotFoundError:
        return  # no session was ever recorded here
    except OSError as error:
        raise RecordsUnlisted(folder, error) from error


def read_record_file(path: str) -> SessionRecord | None:
    """The record in the file `path` of `records_folder` (None: gone, or not a record)."""
    return _read(path)


def _read(path: str) -> SessionRecord | None:
    try:
        return _read_strictly(path)
    except ValueError:
        return None  # not ours, or damaged: the session is kept until its client comes back


def _read_strictly(path: str) -> SessionRecord | None:
    """The record in `path`, None if it is gone; ValueError if it is none."""
    try:
        return _from_json(json.loads(read_file(path)))
    except (FileNotFoundError, NotADirectoryError):
        return None  # removed right now: the session ended
