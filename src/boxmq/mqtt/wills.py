"""Wills sent from a session record, and the record that must stop holding them.

A Will waiting in a session record (a delay, or a broker that died with its client connected)
is removed from the record once sent, so that a restart does not send it again. If the disk
refuses that record (full, failing), the Will stays in it:

- this broker remembers that it sent it, so that it never sends it twice however the record
  reads (MQTT 5.0 §3.1.3.2.2: a Will is published once);
- the record is written again on every `retry` (the broker's timer) until the disk takes it,
  unless the record changed meanwhile (the client came back, the session ended), which
  settles it; until then, a restart would send the Will again, as the log says.

Invariants: at most one Will per client id is waiting to be recorded; one is forgotten once
its record is written or no longer holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from boxmq.errors import store_failure
from boxmq.mqtt.session_record import SessionRecord, read_record, write_record

__all__ = ["SentWills"]

log = logging.getLogger("boxmq.mqtt")

_RETRY_EVERY: Final = 1.0  # seconds between two tries of a refused record

HoldsIt = Callable[[SessionRecord | None], bool]
"""Whether the record on disk now is still the one that holds the Will sent."""


@dataclass(frozen=True, slots=True)
class _Unrecorded:
    sent: SessionRecord  # the record the Will was sent from
    holds_it: HoldsIt


class SentWills:
    def __init__(self, root: str) -> None:
        self._root = root
        self._unrecorded: dict[str, _Unrecorded] = {}
        self._next_try = 0.0

    def already_sent(self, record: SessionRecord) -> bool:
        """Whether this broker sent the Will `record` holds (the record could not say so)."""
        waiting = self._unrecorded.get(record.client_id)
        return waiting is not None and waiting.sent.will_due == record.will_due

    def sent(self, record: SessionRecord, holds_it: HoldsIt, *, now: float) -> None:
        """The Will of `record` was sent: the record without it is written, or retried."""
        client_id = record.client_id
        try:
            self._write(record)
        except OSError as error:
            self._unrecorded[client_id] = _Unrecorded(record, holds_it)
            self._next_try = now + _RETRY_EVERY
            log.error(
                "client %s: its Will was sent, but its session record, which still holds it, "
                "could not be rewritten: %s; tried again every %gs, and a restart before it "
                "is written sends the Will again",
                client_id,
                store_failure(error),
                _RETRY_EVERY,
            )
            return
        self._unrecorded.pop(client_id, None)

    def retry(self, *, now: float) -> None:
        """Write the records still holding a Will sent; on the broker's timer."""
        if not self._unrecorded or now < self._next_try:
            return
        self._next_try = now + _RETRY_EVERY
        for client_id, waiting in list(self._unrecorded.items()):
            if not waiting.holds_it(read_record(self._root, client_id)):
                del self._unrecorded[client_id]  # the client came back, or the session ended
                continue
            try:
                self._write(waiting.sent)
            except OSError:
                continue  # said once already; the disk is still refusing
            del self._unrecorded[client_id]
            log.info("client %s: its session record no longer holds its Will sent", client_id)

    def _write(self, record: SessionRecord) -> None:
        write_record(self._root, replace(record, will=None, will_due=None))
