"""A persistent session taken by another broker on this root while its connection here is open
(its client connected there: DESIGN.md §7; one process cannot close another's connection, so
both are open meanwhile). The other broker's record names it now, and this one must not write
over it: it would name this broker again, which kept the session when this connection closed
and ended it at its expiry under the client connected there. So the broker asks `since` before
it writes the record while connected (a QoS 2 PUBLISH, a PUBREL, a SUBSCRIBE, an
UNSUBSCRIBE), and closes the connection if so (`disconnect`); and `at_close` when the
connection closes, the session then let go (`let_go`), not ended. Each look is one stat of the
record, read only if another write replaced the one this broker wrote last."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from boxmq.errors import store_failure
from boxmq.mqtt.batches import Batches
from boxmq.mqtt.clients import Client, Kick
from boxmq.mqtt.lifetimes import Lifetimes
from boxmq.mqtt.packets import Will
from boxmq.mqtt.reasons import ReasonCode, reason_for
from boxmq.mqtt.recording import Recorder
from boxmq.mqtt.session import Session
from boxmq.mqtt.session_record import read_record
from boxmq.mqtt.wills import Wills

__all__ = ["TakenElsewhere"]

log = logging.getLogger("boxmq.mqtt")

_R = ReasonCode


class TakenElsewhere:
    """Whether another broker on this root took a connected session, and what this one then
    does: close the connection, let the session go."""

    def __init__(
        self,
        root: str,
        records: Recorder,
        lifetimes: Lifetimes,
        wills: Wills,
        batches: Batches,
        kick: Kick,
    ) -> None:
        self._root = root
        self._records = records
        self._lifetimes = lifetimes
        self._wills = wills
        self._batches = batches
        self._kick = kick

    def since(self, session: Session) -> bool:
        """Whether the client of this connected persistent session connected to another
        broker on this root since, which took the session (its record names it, this
        connection still open: one process cannot close another's). Asked before this broker
        writes the record while connected (a QoS 2 PUBLISH, a PUBREL, a SUBSCRIBE): written
        over the other's, it named this broker again, which kept the session when this
        connection closed and ended it at its expiry under the client connected there. One
        stat, the record read only if another write replaced it."""
        client_id = session.client_id
        return self._records.replaced(client_id) and self._lifetimes.held_elsewhere(
            read_record(self._root, client_id)
        )

    def closes(self, session: Session) -> Callable[[Client], None] | None:
        """`since`, asked before this broker writes the record of a connected session: what
        closes its connection, or None if the record may be written. Taken elsewhere, it is
        `disconnect`; a record the file system cannot look at now (EIO, EMFILE) closes it as
        a disk failure is answered (the reason code its errno gives, one ERROR line), not
        written over what this broker cannot see. Raised, the failure dropped the packet with
        a traceback and no answer."""
        try:
            taken = self.since(session)
        except OSError as error:
            return functools.partial(self._not_looked_at, error=error)
        return self.disconnect if taken else None

    def _not_looked_at(self, client: Client, *, error: OSError) -> None:
        session = client.session
        assert session is not None
        failure = store_failure(error)
        log.error(
            "client %s: its session record cannot be looked at before it is written, so this "
            "connection is closed: %s",
            session.client_id,
            failure,
        )
        self._kick(client, reason_for(failure), f"its session record cannot be read: {failure}")

    def disconnect(self, client: Client) -> None:
        """`since`: the connection is closed as at a takeover here (MQTT-3.1.4-3, 0x8E to a
        v5 client) and the session let go, its record left alone (the broker's `closed`)."""
        session = client.session
        assert session is not None
        log.info(
            "client %s: connected to another server on this root meanwhile: this connection "
            "is closed",
            session.client_id,
        )
        self._kick(client, _R.SESSION_TAKEN_OVER, "session taken over by another server")

    def at_close(self, session: Session) -> bool:
        """Whether another broker on this root took the session of a connection closing here
        (its record names that broker): `since`, one stat, the record read and parsed only
        if another write replaced the one this broker wrote last (at every close of a
        persistent session, before). A record the file system cannot stat or read now
        (EMFILE, EIO) counts as this broker's: the close goes on as any other (record, Will,
        expiry), where the error raised out of `closed` left it half done."""
        client_id = session.client_id
        try:
            # A record write of this broker still queued (fsync=always: a SUBSCRIBE's, one
            # before a QoS 2 PUBLISH) makes `replaced` say no without a look, and the session
            # stays this broker's. Rightly: this close's record goes after that write
            # (`save`), so the disk's last word names this broker whatever another wrote
            # meanwhile, and the other lets go of the session at its next write or close
            # (`since`, here), its client told to connect again. Had this close read the
            # other's record and let go, the queued write, not yet done, then put back a
            # record naming this broker as holding a connection since closed: no broker
            # counted the session (its end, its Will) while this one ran.
            return self.since(session)
        except OSError as error:
            log.warning(
                "client %s: its session's record could not be read at its close (the session "
                "stays this server's): %s",
                client_id,
                store_failure(error),
            )
            return False

    def let_go(self, client: Client, session: Session, will: Will | None) -> None:
        """The connection closed after its client connected to another broker on this root,
        which took the session (a process cannot close another's connection, so both were
        open meanwhile): its record is that broker's now, and is not written over (this one
        would count the session's expiry, and end it under the client connected there). The
        session is let go, not ended; the Will of this connection goes out as at a takeover
        here (§3.1.2.5), unless it has a delay, which the session living on cancels."""
        log.info(
            "client %s: its session was taken by another server on this root", session.client_id
        )
        if will is not None and not will.properties.will_delay_interval:
            self._wills.schedule(session, will, client, None)
        if client.jobs:  # its last read's disk work goes on, ahead of the Will's
            self._batches.start(client)
        self._lifetimes.let_go(session)
