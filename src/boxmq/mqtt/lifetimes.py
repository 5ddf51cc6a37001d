"""How sessions end: in memory and on disk, on time (expiry timers), and those found at start.

A non-persistent session ends with its connection; a persistent one when its Session Expiry
Interval runs out after its client left (MQTT 5.0 §3.1.2.11.2), or on a clean start. Its end
drops its memory subscriptions, deletes its durable ones, leaves its share groups (their
messages in flight go to the other members, MQTT-234), and discards its QoS 2 messages
awaiting PUBREL and its record. At start, the sessions on disk whose clients are away are
timed again from their records (`resume_expiries`): the timers of the process before died
with it. Those granted more than this broker's `max_session_expiry` (lowered while none ran)
end by it (`_capped`).

Invariants:
- A session away is counted (its end and its Will's delay timed) by one broker of its host
  that runs: the one its record names (SessionRecord.counter), which holds it in memory
  (`server`) or took it on (`counted_by`), followed through the succession files while it
  is dead (succession.py). A start, or a sweep, takes on the sessions away that lead to a
  dead broker whose succession none claimed by claiming it (`_succeed`: one link), and
  writes none of their records: claiming and writing each took 1.5-2.8 s over 1,000. One
  whose client was connected to a dead broker is taken on by itself, under the claim on
  its record (adoption.session_claim), read again under it, and written (its connection
  closed then); so is one at its client's CONNECT. A start that counted every session
  away, and a sweep that passed over those no broker held, sent a Will twice (both it and
  the broker keeping the session), or never.
- One step of an end on disk that fails (a full or failing disk) is logged, and the next one
  is done all the same (`session_end_step`); the end is done again by the sweep, or at its
  client's CONNECT, till nothing of it is left (`EndsLeft`).
- A session found on disk at start ends only if its client has not come back since (here, or
  to another broker on this root: its record changed).
- A session held here ends by its timer only if its record still names this broker: one
  that names another (its client came back there), or none (another took it on from a
  broker that died, or that one's restart did, and counts it), is let go from memory, not
  ended (`let_go`), its subscriptions, messages awaiting PUBREL, record and locks left to
  that broker (`moved_on`).
- A CONNECT that finds its session counted by no broker that runs (its counter of this
  host died, or none named) takes it on as a restart would (`left_by_the_dead`): away since
  now if its client was connected to the dead one, its Will sent when due; under the same
  claim as a sweep (below), never waited for on the loop: held by another, the CONNECT is
  tried again (claim_wait.wait_for_claim).
- So does a running broker's sweep for a session connected to a broker that died, whose
  client never comes back (`adopt_the_dead`, which adoption.Orphans finds), under a claim
  (an flock) that one broker of this host holds at a time; the claimer reads the record
  again under it, and takes it on only if it still names the dead broker, writing it
  first as no broker's, counted by itself: a second survivor, or a claimer's successor
  after it died too, finds it taken, so its Will goes out once. The sessions away it
  takes on by succession, as a start does. A session whose record leads to a broker
  alive, or of another host (it cannot be told), is left alone.
- A broker counting a session from a record it did not write (its `found`) sends its Will
  and ends it only if the record is still that one (AwayAtStart): its client's return to
  another broker, or another broker taking it on by its claim, writes it.
- What a session left awaiting PUBREL is discarded after the disk work of its connections
  (`after_disk_work`): a PUBREL read before the end goes on to the subscribers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import replace
from enum import Enum, auto
from functools import partial
from typing import Final

from boxmq.client.box import Box
from boxmq.client.subscriber import Subscriber
from boxmq.client.topics import Topics
from boxmq.clock import Clock
from boxmq.core import parse_filter
from boxmq.errors import RecurringFailure, store_failure
from boxmq.mqtt.adoption import CONNECTED, Orphans, session_claim
from boxmq.mqtt.routes import MemoryRoutes
from boxmq.mqtt.session import NEVER, Session
from boxmq.mqtt.session_record import (
    AwayAtStart,
    SessionRecord,
    read_record,
    read_record_file,
    read_records,
    record_path,
    write_record,
)
from boxmq.mqtt.stored import consumer_name, exactly_once_source
from boxmq.mqtt.succession import NONE, Chains, claim
from boxmq.mqtt.timed import Timed
from boxmq.mqtt.wills import Wills, will_delay
from boxmq.store.process import token_pid
from boxmq.store.topics import SubscriptionRecord

__all__ = [
    "CLAIMED",
    "Claimed",
    "EndStep",
    "EndsLeft",
    "Lifetimes",
    "owned_on_disk",
    "session_end_step",
]

log = logging.getLogger("boxmq.mqtt")

_END_RETRY: Final = 1.0  # seconds: an end due whose record cannot be read is tried again


class Claimed(Enum):
    """What `Lifetimes.left_by_the_dead` says of a session another broker is taking on."""

    CLAIMED = auto()


CLAIMED: Final = Claimed.CLAIMED


class _Unread(Enum):
    """What `EndsLeft` keeps of an end whose record could not be read after a step failed."""

    UNREAD = auto()


_UNREAD: Final = _Unread.UNREAD


EndStep = Callable[[str, str], contextlib.AbstractContextManager[None]]
"""A step of a session's end on disk: (client id, what the step does) -> its context."""


@contextlib.contextmanager
def session_end_step(client_id: str, what: str) -> Iterator[None]:
    """One step of a session's end on disk. A failure (a full or failing disk) is logged,
    and the caller goes on with the next step: one thing left on disk keeps none of the
    others there, nor the session alive in memory, nor the CONNECT that ended it unanswered."""
    try:
        yield
    except OSError as error:
        _tell_left(client_id, what, error)


def _tell_left(client_id: str, what: str, error: OSError) -> None:
    log.error(
        "client %s: its session ended, but %s failed, so that is left on disk: %s",
        client_id,
        what,
        store_failure(error),
    )


class EndsLeft:
    """The sessions ended here whose end on disk the file system refused a step of (read-only,
    failing), with their record as the end left it: what they left (subscriptions, that
    record) is deleted again by the broker's sweep, once a second (`Lifetimes.finish_ends`),
    each refusal told once, unless the record changed since (its client came back, here or
    to another broker). Left for the next start, a session that expired while the disk was
    read-only kept its record and dropbox while the server ran: listed away by `boxmq
    session ls`, collecting what was published to its filters, and resumed by its client's
    return."""

    def __init__(self, root: str, token: str) -> None:
        self._root = root
        self._token = token  # this broker's, named by the records of the sessions it keeps
        # Client id -> its record then (_UNREAD: it could not be read, `still_left`).
        self.ended: dict[str, SessionRecord | _Unread | None] = {}
        self.retrying = False  # the sweep's retry: its refusals were told already
        self._unread: set[str] = set()  # those whose record the sweep could not read, told

    @contextlib.contextmanager
    def step(self, client_id: str, what: str) -> Iterator[None]:
        """`session_end_step`, the session kept here if the step fails."""
        try:
            yield
        except OSError as error:
            try:
                self.ended[client_id] = read_record(self._root, client_id)
            except OSError:
                # EIO with the step's: None, it was left for the next start, the sweep told
                # it would try again each second, and the client's return resumed the
                # session that had ended.
                self.ended[client_id] = _UNREAD
            if not self.retrying:
                _tell_left(client_id, what, error)

    def unread(self, client_id: str, error: OSError) -> None:
        """The sweep could not read `client_id`'s record (EIO of a failing disk): its end
        stays for the next sweep, told once, not at each, until the record is read."""
        if client_id in self._unread:
            return
        self._unread.add(client_id)
        log.error(
            "client %s: its record cannot be read, so what its session's end left on disk "
            "waits (tried again each second): %s",
            client_id,
            store_failure(error),
        )

    def still_left(self, client_id: str, record: SessionRecord | None) -> bool:
        """Whether `client_id`'s end is to be done again, its `record` read now being the
        one its end left (and forgotten here: a refusal again keeps it anew)."""
        self._unread.discard(client_id)
        if client_id not in self.ended:
            return False
        left = self.ended.pop(client_id)
        if record is None:
            return False
        if left is _UNREAD:
            # The end's own record names this broker, which kept the session; one its client
            # came back to another broker with names that one. (A session found on disk at
            # start names none: left for the next start, its return elsewhere unseen.)
            return record.held_by == self._token
        return record == left


def _session_made(client_id: str, record: SessionRecord | None, text: str) -> bool:
    """Whether the subscription `text` found on disk under the client id's name is its
    session's own (SessionRecord.made); a session with no record (one an older boxmq left)
    owns none. Another is said, and left alone: taken by the session, its client would get
    what it never subscribed to; deleted with it, another consumer's messages would go."""
    if record is not None and record.made(text):
        return True
    log.warning(
        "client %s: a subscription to %s under its name on disk is not its session's (made "
        "by `boxmq subscribe --name` or the Python API, or left by an older boxmq): left "
        "alone, neither taken nor deleted; give that subscriber or this client another name",
        client_id,
        text,
    )
    return False


def owned_on_disk(
    topics: Topics,
    client_id: str,
    record: SessionRecord | None,
    making: Collection[str] = (),
) -> list[tuple[str, SubscriptionRecord]]:
    """The subscriptions on disk under the client id's name that are its session's own
    (`_session_made`: another door's is said, and left alone), for its return (which keeps
    them) or its end (which deletes them). `making`: the filters that SUBSCRIBEs of sessions
    of the client id that ended here are still making (`Lifetimes._making`), passed over: a
    worker's dropbox, none of a session's, which `Subscribing._drop_late` deletes once made.
    Found by the look for another door's, each was said to be one, at each takeover of a
    client reconnecting in a loop (found by fuzzing `boxmq serve`)."""
    return [
        (text, subscription)
        for text, subscription in _under_its_name(topics, client_id, record)
        if text not in making and _session_made(client_id, record, text)
    ]


def _under_its_name(
    topics: Topics, client_id: str, record: SessionRecord | None
) -> list[tuple[str, SubscriptionRecord]]:
    """The subscriptions on disk under the client id's name that may be its session's: after
    a restart each persistent device's return made this look, and a read of every
    subscription's record on the root (10,000 devices: 10^8 reads in the storm of their
    returns) where its record names the few that are its own (SessionRecord.made)."""
    name = consumer_name(client_id)
    if record is not None and record.leaving is not None:
        return topics.subscribed_among(name, (*record.options, *record.leaving))
    if record is None and not topics.holds_any(name):
        return []  # its first CONNECT, most likely (or its record lost): nothing to say
    # A record of an older boxmq, which did not list the share groups being left, owns
    # every membership under its name (`made`): only the scan of them all finds them.
    # With no record the session owns none, but the scan finds another door's under
    # its name, which `_session_made` tells of (its client would otherwise wonder why
    # it is sent nothing of them), at one stat while the root's subscriptions did not
    # change (`holds_any`, above) when there is none.
    return topics.subscribed(name)


def _named(token: str) -> str:
    """The token of a broker that no longer runs, as the log says it. Not "died": a server
    stopped by SIGTERM leaves the same records (disconnected_at, held by none) as the
    sessions away when one was killed, so the files cannot tell the two apart."""
    if token == NONE:
        return "no server"
    return f"process {token_pid(token)} (a server of this host that no longer runs)"


def _whose(record: SessionRecord) -> str:
    """Who counted the session of `record`, which no broker that runs counts, for the log."""
    if record.held_by is not None:
        return "was held by a server of this host that died"
    if record.counted_by is not None:
        return "was counted by a server of this host that no longer runs"  # stopped, or died
    return "was counted by no server"


AfterDiskWork = Callable[[str, Callable[[], object], Callable[[object], None]], bool]
"""`(client id, work, then)`: run `work` after the disk work of the client id's connections,
and `then` with its result (or the error it raised) on the loop; False if none has any
(the caller does it now)."""


class Lifetimes:
    """Ends sessions, and times their ends. The registries are the broker's, shared:
    `sessions` (client id -> session), `memory` (the in-memory subscriptions), `durable`
    (client id -> filter -> its dropbox); `token` names this broker in the records;
    `max_expiry` is its `max_session_expiry`, which caps the sessions it takes from the disk."""

    def __init__(
        self,
        box: Box,
        clock: Clock,
        token: str,
        wills: Wills,
        *,
        sessions: dict[str, Session],
        memory: MemoryRoutes,
        durable: dict[str, dict[str, Subscriber]],
        after_disk_work: AfterDiskWork,
        remove_record: Callable[[str, EndStep], None],
        refused_here: Callable[[str], bool],
        max_expiry: int,
    ) -> None:
        self._box = box
        self._refused_here = refused_here  # recording.Recorder.refused_here
        self._max_expiry = max_expiry
        self._after_disk_work = after_disk_work
        self._remove_record = remove_record  # recording.Recorder.remove
        self._clock = clock
        self._token = token
        self._wills = wills
        self._sessions = sessions
        self._memory = memory
        self._durable = durable
        # Client id -> when its session ends, on the broker's clock (`end_due`, at each of
        # its ticks, as its keep-alives are): the loop's timer ran on real time, so a clock
        # moved on (a test's) ended no session. And what ends it then.
        self.expiries: Timed[str] = Timed()
        # The sweep for sessions of dead brokers (`adopt_the_dead`), and what its looks saw.
        self._orphans = Orphans(box.root, token)
        self._sweep_failing = RecurringFailure()
        # The ends the disk refused a step of, finished by the sweep.
        self._left = EndsLeft(box.root, token)
        # Client id -> the filters that sessions of it ended here were still subscribing to
        # (each its Session.adding, emptied by Subscribing as each is made, then undone by
        # `_drop_late`): `forget_on_disk` passes over their dropboxes (`owned_on_disk`).
        self._still_made: dict[str, list[set[str]]] = {}
        self._looking = False  # a look through the records under way (`Orphans.look`)
        self._told_no_claim = False  # told once: claims fail on every sweep, for every record
        # A dead broker -> the refusal of the claim of its succession, told once (`_succeed`).
        self._claims_refused: dict[str, RecurringFailure] = {}
        self._unread_ends: set[str] = set()  # ends due waiting for their records, told
        self._unread_at_start: list[str] = []  # the records a start could not read, by path

    def forget_on_disk(self, client_id: str, record: SessionRecord | None) -> None:
        """A session this process holds nothing of ended (a clean start, or one found on disk
        at start whose time ran out): what it left on disk is deleted, its durable
        subscriptions (those its `record` names, as the caller just read it: `owned_on_disk`,
        which passes over what SUBSCRIBEs of sessions ended here are still making), its QoS 2
        messages awaiting PUBREL and its record."""
        name = consumer_name(client_id)
        topics = self._box.topics
        # The filters its record names, each read from its own folder; the records of every
        # subscription on the root only for a record of an older boxmq (`owned_on_disk`).
        making = self._making(client_id)
        found = {text for text, _ in owned_on_disk(topics, client_id, record, making)}
        with topics.ending_together():  # told to the other processes once, not per filter
            for text in found:
                with self._left.step(client_id, f"deleting its subscription to {text}"):
                    self._box.unsubscribe(text, name)
            # An end killed while it deleted a subscription (its record gone, its folder not
            # yet) left the folder with its messages, which `subscribed` does not see: the
            # record, deleted last, still names the filter. Left there, the next client of
            # this id to subscribe to it got the ended session's messages.
            for text in record.options if record is not None else ():
                if text not in found:
                    with self._left.step(client_id, f"deleting what is left of {text}"):
                        topics.remove_left_behind(text, name)
        self._discard_session_state(client_id)

    def _making(self, client_id: str) -> set[str]:
        """The filters that sessions of `client_id` ended here are still subscribing to
        (those made since are forgotten)."""
        adding = [left for left in self._still_made.pop(client_id, ()) if left]
        if adding:
            self._still_made[client_id] = adding
        return set().union(*adding)

    def finish_ends(self) -> None:
        """The sweep's (once a second): the ends the disk refused a step of are done again,
        quietly, and told once done. One whose client came back (here: its CONNECT finished
        it, `finish_end`; to another broker: its record changed) is left alone; one whose
        record cannot be read waits for the next sweep (`EndsLeft.unread`)."""
        left = self._left
        for client_id in sorted(left.ended):
            try:
                record = read_record(self._box.root, client_id)
            except OSError as error:  # a failing disk: raised, it stopped the server
                left.unread(client_id, error)
                continue
            if not left.still_left(client_id, record) or client_id in self._sessions:
                continue
            left.retrying = True
            try:
                self.forget_on_disk(client_id, record)
            finally:
                left.retrying = False
            if client_id not in left.ended:
                log.info("client %s: what its session's end left on disk is deleted now", client_id)

    def finish_end(self, client_id: str, record: SessionRecord | None) -> bool:
        """At a CONNECT of `client_id` (its `record` read for it): whether its session had
        ended here with something left on disk, which is deleted now (told if it fails
        again), so that the CONNECT does not resume it."""
        if not self._left.still_left(client_id, record):
            return False
        self.forget_on_disk(client_id, record)
        return True

    def _discard_session_state(self, client_id: str) -> None:
        """What a session keeps on disk besides its subscriptions: its QoS 2 messages awaiting
        PUBREL and its record. Both ways a session ends come here; a clean start of a session
        held in memory goes both ways, and the second finds nothing left."""
        self._drop_unreleased(client_id)
        self._wills.session_ended(client_id)
        self._remove_record(client_id, self._left.step)

    def _drop_unreleased(self, client_id: str) -> None:
        """The session ended, and its QoS 2 exchanges with it (MQTT 5.0 §3.1.2.4): what it got
        PUBREC for and never released leaves the intake now, not after its pending_ttl, so
        its packet ids name new messages (not repeats of the old ones, which would be sent
        instead) and the old ones stop counting against the client's limits. Before the next
        session's first PUBLISH can reach the intake: on the loop, or, while a connection of
        the client still has disk work (a PUBREL read just before a DISCONNECT or a
        takeover), after that work, ahead of the next connection's (batches.py)."""
        source = exactly_once_source(client_id)

        def dropped(result: object) -> None:
            if isinstance(result, BaseException):  # left in working/, to be dropped by age
                log.warning("client %s: QoS 2 messages awaiting PUBREL kept: %s", client_id, result)
            elif result:
                log.info(
                    "client %s: %d QoS 2 message(s) awaiting PUBREL discarded with its session",
                    client_id,
                    result,
                )

        if self._after_disk_work(client_id, partial(self._box.drop_pending, source), dropped):
            return
        try:
            count: object = self._box.drop_pending(source)
        except OSError as error:
            count = error
        dropped(count)

    def end(self, session: Session) -> None:
        """The session is over: memory subscriptions dropped, durable ones deleted, share
        groups left (their messages in flight go to the other members, MQTT-234), QoS 2
        messages awaiting PUBREL discarded."""
        client_id = session.client_id
        self._drop_from_memory(session)
        if session.adding:  # its SUBSCRIBE's disk work goes on, undone once done
            self._still_made.setdefault(client_id, []).append(session.adding)
        name = consumer_name(client_id)
        with self._box.topics.ending_together():  # told to the other processes once
            for text, subscriber in self._durable.pop(client_id, {}).items():
                shared = parse_filter(text).shared
                leaving = f"leaving the share group of {text}" if shared else f"closing {text}"
                with self._left.step(client_id, leaving):
                    subscriber.close()
                if not shared:
                    with self._left.step(client_id, f"deleting its subscription to {text}"):
                        self._box.unsubscribe(text, name)
        self._discard_session_state(client_id)

    def _drop_from_memory(self, session: Session) -> None:
        """What both an end and a let-go do first: the session is no longer held here, its
        expiry timer cancelled, its memory subscriptions dropped, its in-flight window and
        its exactly-once counts forgotten."""
        client_id = session.client_id
        self._sessions.pop(client_id, None)
        self.cancel_expiry(client_id)
        self._memory.remove_subscriber(client_id)
        session.outbox.clear()
        session.stop_counting()

    def held_elsewhere(self, record: SessionRecord | None) -> bool:
        """Whether `record`, read from disk now, says that another broker on this root holds
        the session (its client came back there): this one's copy in memory is stale."""
        other = None if record is None else record.held_by
        return other is not None and other != self._token

    def moved_on(self, record: SessionRecord | None) -> bool:
        """Whether `record`, read from disk now, says that this broker's copy of a session
        whose client is away is stale: another broker holds it (`held_elsewhere`), or took
        it on from one of this host that died, or at its restart, and counts it (a record
        naming no broker: this one names itself in the record of every session it keeps).
        The record naming no broker was taken for one no other holds: the copy here ended
        the session at its own expiry, earlier than the record says, and was resumed from
        at its client's return, with what it was sent here and acknowledged elsewhere."""
        return record is not None and record.held_by != self._token

    def stale_here(self, client_id: str, record: SessionRecord | None) -> bool:
        """Whether `record`, read from disk now, says that this broker's copy of the session
        of `client_id`, whose client is away, is stale (`moved_on`), and is not the record
        that this broker's own refused write would have replaced (Recorder.refused_here):
        after a full or read-only disk refused every record of a session resumed here since
        a restart, the one on disk is the one found at that start, naming no server; taken
        for another's word, the copy here was let go, neither ended at its expiry nor
        resumed at its client's return with what it subscribed to since. OSError if the
        record's file cannot be looked at (EIO)."""
        return self.moved_on(record) and not self._refused_here(client_id)

    def left_by_the_dead(self, record: SessionRecord | None) -> SessionRecord | Claimed | None:
        """`record`, read for a CONNECT of its client, as this broker takes it on: if no
        broker that runs counts it (`_counted`: the one it names, `counter`, followed
        through the succession files, is of this host and died), it is taken on, written
        (`_taken_on`):
        a connection held by a broker that died (SIGKILL) closed with it, unseen, and that
        death is counted from now; the Will of that connection, or one left waiting out its
        delay, goes out when due, at once if it has no delay (or is overdue). One with a
        delay still to run is cancelled by this CONNECT, which resumes the session (MQTT
        5.0 §3.1.3.2.2), unless it starts clean, which sends it. CLAIMED: another broker
        holds the claim on it (its sweep, its start or a CONNECT there is taking it on):
        the caller asks again shortly, with the record read again."""
        if record is None or self._counted(record):
            return record
        now = self._clock.now()
        # Under the claim a sweep or a start takes it on with, which may have done so since
        # the record was read.
        taken = self._take_under_claim(record, now, sweep=False)
        if not isinstance(taken, AwayAtStart):
            return taken  # CLAIMED, or taken on by another broker since (away, counted there)
        log.info("client %s: its session %s: taken over", record.client_id, _whose(taken.found))
        if taken.counted.will_due is not None:
            self._wills.resume(taken, now)
        return taken.counted

    def _counted(self, record: SessionRecord) -> bool:
        """Whether a broker that runs (or may: of another host) counts the session of
        `record`, this one included: its counter, followed through the succession files."""
        chains = Chains(self._box.root, self._token)
        return chains.counts(chains.resolve(record.counter, follow=record.holder is None))

    def let_go(self, session: Session) -> None:
        """The session lives on in another broker on this root: dropped from memory here
        without ending it. Its durable subscriptions, its QoS 2 messages awaiting PUBREL,
        its record and the locks of what it was sent stay, for that broker (detach)."""
        client_id = session.client_id
        log.info("client %s: its session is held by another server on this root now", client_id)
        self._drop_from_memory(session)
        self._wills.forget_timer(client_id)
        for subscriber in self._durable.pop(client_id, {}).values():
            subscriber.detach()

    def resume_expiries(self) -> None:
        """At start: the persistent sessions on disk that no broker that runs counts end
        when their records say, those whose time is up at once. The timers of the process
        before died with it; without this, a session whose client never returns would
        collect messages on disk forever. One that a broker that runs holds (connected or
        kept there) or counts is left to it: both sent its Will, and both ended it. Those
        of a dead broker are taken on with one claim of its succession (`_succeed`), not a
        write each: 1,000 records claimed and written one by one took 1.5-2.8 s."""
        chains = Chains(self._box.root, self._token)
        self._resume(read_records(self._box.root, self._unread_at_start), chains)
        if not self._unread_at_start:
            # Else one a record not read leads through may go: read then, its session led to
            # its dead server with no successor, and was taken on beside the one counting it.
            self._drop_unneeded(chains)

    def resume_unread(self) -> None:
        """The sweep's (once a second): the records the start could not read (EIO of a
        failing disk, told then by `read_records`) read again, and those that read now taken
        as the start would have (`_resume`); their clients' CONNECTs were refused as a disk
        failure meanwhile. One whose client connected here since is its own. Left to the
        look for the dead (`adopt_the_dead`), one counted by a dead server whose succession
        the start won was never taken on: it leads to this broker."""
        if not self._unread_at_start:
            return
        waiting, read = [], []
        for path in self._unread_at_start:
            try:
                record = read_record_file(path)
            except OSError:
                waiting.append(path)  # told at start: quiet till it reads
                continue
            if record is not None and record.client_id not in self._sessions:
                read.append(record)
        self._unread_at_start = waiting
        if read:
            self._resume(read, Chains(self._box.root, self._token), told=True)

    def _resume(
        self, records: Iterable[SessionRecord], chains: Chains, *, told: bool = False
    ) -> None:
        """The sessions of `records`, found on disk, timed by this broker unless another
        that runs counts them (`resume_expiries`); one whose succession file cannot be read
        waits for `resume_unread`, told unless `told` already."""
        now = self._clock.now()
        orphans: dict[str, list[SessionRecord]] = {}
        for found in records:
            try:
                counter = chains.resolve(found.counter, follow=found.holder is None)
            except OSError as error:  # a succession file unreadable: as its record
                self._unread_at_start.append(record_path(self._box.root, found.client_id))
                if told:
                    continue
                log.error(
                    "client %s: the succession file its session record leads through cannot "
                    "be read, so its session is not timed or ended while it cannot (tried "
                    "again each second): %s",
                    found.client_id,
                    store_failure(error),
                )
                continue
            if counter == self._token:  # a broker before this one, in this process (a test's)
                self._count_found(found, now)
            elif chains.alive(counter) is not False:
                continue  # counted by that one
            elif found.holder is not None:
                self._count_at_start(found, now)  # claimed and written, one by one
            else:
                orphans.setdefault(counter, []).append(found)
        for dead, records in orphans.items():
            if self._succeed(dead):
                chains.won(dead, self._token)
                for found in records:
                    self._count_found(found, now)

    def _count_at_start(self, found: SessionRecord, now: float) -> None:
        """`found`, whose client was connected to a broker that died, taken on by the start;
        one whose claim the file system refuses (EMFILE, EIO, EACCES) is left to the sweep,
        which finds it again: a start does not fail for one record."""
        try:
            self._count_found(found, now)
        except OSError as error:
            log.error(
                "the session of client %s, connected to a server of this host that died, is "
                "not taken on at this start (tried again at the next sweep): %s",
                found.client_id,
                store_failure(error),
            )

    def _succeed(self, dead: str) -> bool:
        """Whether this broker won the succession of `dead`, which no broker claimed when
        looked (`succession.claim`): it counts every session whose counter leads to it."""
        try:
            won = claim(self._box.root, dead, self._token) == self._token
        except OSError as error:
            # Tried again at each sweep, once a second: a full disk refused it as often, and
            # each refusal was an ERROR line. Told once per errno; the same again at DEBUG.
            refused = self._claims_refused.setdefault(dead, RecurringFailure())
            log.log(
                logging.ERROR if refused.news(error) else logging.DEBUG,
                "the sessions counted by %s are not taken on (tried again at the next "
                "sweep): claiming them failed: %s",
                _named(dead),
                store_failure(error),
            )
            return False
        self._claims_refused.pop(dead, None)
        if won:
            log.info("the sessions counted by %s are taken on", _named(dead))
        return won

    def _drop_unneeded(self, chains: Chains) -> None:
        """The succession files no record leads through any more, deleted (`Chains`)."""
        try:
            chains.drop_unneeded()
        except OSError as error:
            log.debug("succession files left: %s", error)

    def _count_found(self, found: SessionRecord, now: float, *, sweep: bool = False) -> None:
        """`found`, which this broker counts from now on (its counter's successor), timed:
        away already, counted as it is, its record not written (its client's return, or its
        end, writes it). Its client connected to a broker that died, that connection closed
        then: the record is written (`_claim_and_take`), so that a second restart does not
        start the countdown again; unless another broker holds its claim (a CONNECT of the
        client there, a sweep) or took it on since. Such a record names its dead holder
        till then, which a sweep finds again: it is not followed through the successions
        (`Chains.resolve`)."""
        away = AwayAtStart(self._capped(found), found) if found.holder is None else None
        if away is None:
            away = self._claim_and_take(found, now, sweep=sweep)
        if away is not None:
            self._count(away, now)

    def _claim_and_take(
        self, record: SessionRecord, now: float, *, sweep: bool = False
    ) -> AwayAtStart | None:
        """`record`, whose client was connected to a broker that died, taken on by a start
        or a `sweep` (`_take_under_claim`); None if another broker holds the claim (a
        CONNECT of the client there, a sweep) or took it on since."""
        taken = self._take_under_claim(record, now, sweep=sweep)
        return taken if isinstance(taken, AwayAtStart) else None

    def _take_under_claim(
        self, record: SessionRecord, now: float, *, sweep: bool
    ) -> AwayAtStart | SessionRecord | Claimed | None:
        """`record`, whose client was connected to a broker that died, taken on (`_taken_on`)
        under its claim, read again under it, and written; CLAIMED if another broker holds
        the claim (a CONNECT of the client there, a sweep: never waited for, on the loop),
        or the record as read again (None: gone) if another broker took it on, or its
        client came back, since. Where the file system keeps no flocks, a start or a
        CONNECT takes it on all the same, a `sweep` leaves it (None). The one way of both
        `left_by_the_dead` (a CONNECT) and `_claim_and_take` (a start, a sweep)."""
        counter = record.counter
        path = record_path(self._box.root, record.client_id)
        with session_claim(path, counter) as claimed:
            if claimed is None and sweep and not self._told_no_claim:
                self._told_no_claim = True
                log.warning(
                    "%s: no claim could be made beside it (a file system without flock, or "
                    "refusing the file), so a session whose server died with its client "
                    "connected is left to the next boxmq serve started on this host",
                    path,
                )
            if claimed is False:
                return CLAIMED
            if claimed is None and sweep:
                return None
            current = read_record_file(path)
            if current is None or current.counter != counter:
                return current
            return self._write_taken_on(current, now)

    def _count(self, away: AwayAtStart, now: float) -> None:
        """A session away that no timer of this broker counts yet: its Will and its end are
        timed from its record (`counted`)."""
        deadline = away.counted.deadline()
        due = away.counted.will_due
        if due is not None:  # a Will due with the end is sent by it, right before it
            self._wills.resume(away, now, with_end=deadline is not None and due >= deadline)
        if deadline is None:
            return
        client_id = away.counted.client_id
        self.cancel_expiry(client_id)
        # Never more than the expiry from now: a record written by a clock ahead of ours
        # (another server's on this root, or ours before NTP stepped it back) held the
        # session for the expiry and that lead too (an hour and a minute for 60 s).
        left = min(deadline - now, away.counted.expiry)
        if left <= 0:
            self._end_if_still_away(away)
        else:
            self._end_at(client_id, now + left, partial(self._end_if_still_away, away))

    def adopt_the_dead(self) -> None:
        """The sweep of a running broker: the sessions whose counters (followed through the
        succession files) are brokers of this host that died (SIGKILL, a crash), with their
        clients connected or kept there, or that took them on, and whose clients never came
        back, are taken on as a restart would (`_adopt`). Without this, nothing sent their
        Wills or ended them until that root was served again by a broker started on this
        host, and the messages of their share groups stayed locked to them. The records are
        looked through in a worker thread (`Orphans.look`: 10,000 records took 40 ms, their
        first reading 260 ms; one stat while nothing changed), one look at a time, and only
        those found are taken on, on the loop."""
        if self._looking:
            return
        self._looking = True
        looked = asyncio.get_running_loop().run_in_executor(None, self._orphans.look)
        looked.add_done_callback(self._adopt_found)

    def _adopt_found(self, looked: asyncio.Future[dict[str, list[tuple[str, str | None]]]]) -> None:
        """On the loop: the sessions `Orphans.look` found are taken on. A failing disk is told
        once per errno, and tried again at the next sweep."""
        self._looking = False
        if looked.cancelled():
            return
        failed: OSError | None = None
        try:
            for dead, records in looked.result().items():
                if dead == CONNECTED or self._succeed(dead):
                    for path, counter in records:
                        try:
                            self._adopt(path, counter)
                        except OSError as error:  # that one's: the others are taken on
                            failed = error
        except OSError as error:
            failed = error
        if failed is not None:
            if self._sweep_failing.news(failed):
                log.error(
                    "the sweep for sessions of dead servers in %s failed, tried again at "
                    "each next one: %s",
                    self._box.root,
                    store_failure(failed),
                )
            return
        self._sweep_failing.recovered()

    def _adopt(self, path: str, counter: str | None) -> None:
        """The session whose record at `path` named `counter`, which leads to a broker of
        this host that died whose succession this one claimed (or which held it connected):
        read again, and taken on if its counter is still that one (`_take_on`); another
        broker took it on, or its client came back, since, otherwise."""
        record = read_record_file(path)
        if record is not None and record.counter == counter:
            self._take_on(record)

    def _take_on(self, record: SessionRecord) -> None:
        """`record`, counted by a broker of this host that died, whose succession this one
        claimed: counted here, its Will sent when due (`_count_found`)."""
        client_id = record.client_id
        held = self._sessions.get(client_id)
        if held is not None:
            if held.connected:
                return  # its client just connected here: this broker's record comes
            # A stale copy: its client moved on to the broker that died, since.
            self.let_go(held)
        log.info("client %s: its session %s: taken on", client_id, _whose(record))
        self._count_found(record, self._clock.now(), sweep=True)

    def _write_taken_on(self, record: SessionRecord, now: float) -> AwayAtStart:
        """`record`, which no broker that runs counts, as this one takes it on (`_taken_on`),
        written: so that another broker, starting or sweeping, leaves it to this one, and a
        second restart does not start the countdown again. A failed write is logged: its end
        and its Will keep their time here all the same (AwayAtStart.found)."""
        away = self._taken_on(record, now)
        try:
            write_record(self._box.root, away)
        except OSError as error:
            log.warning(
                "client %s: its session record not written as counted by this server (%s), "
                "which still counts it: %s",
                record.client_id,
                _whose(record),
                store_failure(error),
            )
        return AwayAtStart(away, record)

    def _taken_on(self, record: SessionRecord, now: float) -> SessionRecord:
        """`record`, which no broker that runs counts, as this one counts it (`counted_by`),
        held by none in memory (a client's return takes it from the disk). Away already,
        its times stand (under this broker's limit: `_capped`). Connected to a broker that
        died, no disconnect was recorded: the network connection closed with it, and now is
        the first moment known after that (MQTT 5.0 §3.1.2.11), its Will due after its delay."""
        away = replace(self._capped(record), holder=None, server=None, counted_by=self._token)
        if record.holder is None:
            return away
        away = replace(away, disconnected_at=now)
        if record.will is not None:  # the connection closed without DISCONNECT: a Will to send
            away = replace(away, will_due=now + will_delay(record.will, away.expiry))
        return away

    def _capped(self, record: SessionRecord) -> SessionRecord:
        """`record`, read from the disk, under this broker's `max_session_expiry`
        (SessionRecord.capped). Kept as granted, it outlived the limit the operator set by
        days, collecting messages."""
        return record.capped(self._max_expiry)

    def _end_if_still_away(self, away: AwayAtStart) -> None:
        """The end of a session found on disk at start, unless its client came back (here, or
        to another broker on this root: its record changed)."""
        client_id = away.counted.client_id
        if client_id in self._sessions:
            return
        end = partial(self._end_if_still_away, away)
        read, record = self._read_at_end(client_id, end)
        if not read:
            return
        if not away.still_away(record):
            self._unread_ends.discard(client_id)
            return
        self._will_first(client_id, record)
        log.info("client %s: session expired (it was on disk at start)", client_id)
        self.forget_on_disk(client_id, record)

    def schedule_expiry(self, session: Session) -> None:
        if session.expiry == NEVER:
            return
        client_id = session.client_id

        def expire() -> None:
            current = self._sessions.get(client_id)
            if current is not session or session.connected:
                return
            read, record = self._read_at_end(client_id, expire)
            if not read:
                return
            try:
                stale = self.stale_here(client_id, record)
            except OSError as error:  # the record's file cannot be looked at (EIO)
                self._end_waits(client_id, expire, "its session's end waits", error)
                return
            if stale:
                # Its client came back to another broker on this root, which holds the
                # session now (and counts its expiry from the client's next close there),
                # or one took it on from a broker that died and counts it.
                self.let_go(session)
                return
            self._will_first(client_id, record)
            log.info("client %s: session expired", client_id)
            self.end(session)

        self._end_at(client_id, self._clock.now() + session.expiry, expire)

    def _will_first(self, client_id: str, record: SessionRecord | None) -> None:
        """Before the session's end on time: its Will waiting for it (due with it) goes
        first, right before it (Wills.send_early), judged by the `record` the end read (read
        again there, a record that changed meanwhile had the two decide apart)."""
        self._wills.send_early(client_id, lambda: record)
        self._unread_ends.discard(client_id)  # read at last, if it was not: told again

    def _read_at_end(
        self, client_id: str, end: Callable[[], None]
    ) -> tuple[bool, SessionRecord | None]:
        """The record of a session whose end is due (whether its client came back to another
        broker): (True, it), or (False, None) if it cannot be read now (EIO of a failing
        disk), the end waiting a second more. Raised, the failure left Broker.tick and
        stopped the server."""
        try:
            record = read_record(self._box.root, client_id)
        except OSError as error:
            self._end_waits(client_id, end, "its session's end waits", error)
            return False, None
        return True, record

    def _end_waits(
        self, client_id: str, end: Callable[[], None], what: str, error: OSError
    ) -> None:
        """The session's end is tried again a second later, its record (or its Will's)
        unreadable now: told once, not each second, until it reads."""
        self._end_at(client_id, self._clock.now() + _END_RETRY, end)
        if client_id in self._unread_ends:
            return
        self._unread_ends.add(client_id)
        log.warning(
            "client %s: its session record cannot be read, so %s (tried again every second): %s",
            client_id,
            what,
            store_failure(error),
        )

    def _end_at(self, client_id: str, when: float, end: Callable[[], None]) -> None:
        """The session of `client_id` ends at `when` (the broker's clock) by `end`, which
        replaces any end it had."""
        self.expiries.set(client_id, when, end)

    def clock_stepped(self, by: float) -> None:
        """The wall clock was stepped `by` seconds (Broker.clock_stepped): the ends of the
        sessions away move with it, counting the time that passed, not the step."""
        self.expiries.shift(by)

    def end_due(self, now: float) -> None:
        """On the broker's timer: the sessions whose time came at `now` end (or are let go,
        those another broker holds or counts now)."""
        for end in self.expiries.due(now):
            end()

    def cancel_expiry(self, client_id: str) -> None:
        self.expiries.discard(client_id)
        self._unread_ends.discard(client_id)
