"""A received message, and what its consumer can say about it (the small ack vocabulary)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from boxmq.model import (
    PUBLISHED_RETAINED,
    QOS,
    RETAINED,
    ConsumerId,
    Envelope,
    MessageClass,
    MessageId,
    PropertyValue,
    cheap_init,
)
from boxmq.store.v5_properties import (
    V5Reader,
    correlation_id_shown,
    properties_shown,
    reply_to_shown,
)

__all__ = ["Message", "Settler", "qos_of"]


class Settler(Protocol):
    """Whoever can end or change a lock: a consumer in this process, or the queue's files.

    `delivery` is the Message's: which of the consumer's locks on the message it got (the
    engine's Lease.delivery; None where the settler has no such number). A settler that knows
    one refuses a handle of an earlier delivery with UnexpectedRequest, and settles nothing."""

    def ack(self, message_id: MessageId, consumer: ConsumerId, delivery: int | None) -> None: ...
    # None, or why the message went to error/ instead of target/ (a settler from the files).
    def unlock(
        self, message_id: MessageId, consumer: ConsumerId, delay: float, delivery: int | None
    ) -> str | None: ...
    def reject(self, message_id: MessageId, consumer: ConsumerId, delivery: int | None) -> None: ...
    # As `unlock`'s answer; the message is for another consumer, never back to this one.
    def decline(
        self, message_id: MessageId, consumer: ConsumerId, delivery: int | None
    ) -> str | None: ...
    # The lock's new deadline, epoch seconds (None: no lock to extend, as at most once).
    def extend(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        seconds: float | None,
        delivery: int | None,
    ) -> float | None: ...


@cheap_init
@dataclass(frozen=True, slots=True, eq=False)
class Message:
    """One delivery of a message to one consumer, locked until acked, unlocked or rejected."""

    queue: str
    envelope: Envelope
    body: bytes
    consumer: ConsumerId
    # Epoch seconds; after it the lock times out and the message moves on. Set at delivery and
    # by this handle's extend (an extend by id from elsewhere is not seen here).
    lock_deadline: float
    _settler: Settler
    _v5: V5Reader | None = None  # decodes MQTT v5 properties (None: the name's own only)
    # Which delivery of the message to `consumer` this is (Settler): a handle kept past its
    # lock must not settle the message when it has come to the same consumer again.
    _delivery: int | None = None

    @property
    def id(self) -> MessageId:
        return self.envelope.message_id

    @property
    def priority(self) -> int:
        return self.envelope.priority

    @property
    def properties(self) -> dict[str, PropertyValue]:
        """The producer's properties, without boxmq's own; for a message published over MQTT
        v5, its User Properties and `mqtt.*` fields too (store/v5_properties.py)."""
        return properties_shown(self._v5, self.envelope)

    @property
    def delivery_count(self) -> int:
        """How many times it was delivered, this delivery included (1 the first time)."""
        return self.envelope.delivery_count + 1

    @property
    def expiration(self) -> float | None:
        return self.envelope.expiration / 1000 if self.envelope.expiration else None

    @property
    def timestamp(self) -> float | None:
        stamp = self.envelope.timestamp
        return stamp / 1000 if stamp is not None else None

    @property
    def topic(self) -> str | None:
        """The topic it was published to; None for a message put on a queue."""
        return self.envelope.topic

    @property
    def qos(self) -> int:
        """The QoS it is delivered at: 0 at most once, 1 at least once, 2 exactly once."""
        return qos_of(self.envelope.property_value(QOS))

    @property
    def retained(self) -> bool:
        """Sent from the retained store because a subscription was made."""
        return self.envelope.property_value(RETAINED) is True

    @property
    def published_retained(self) -> bool:
        """Published with retain=True (a live message that also became the retained one)."""
        return self.envelope.property_value(PUBLISHED_RETAINED) is True

    @property
    def correlation_id(self) -> str | None:
        """The producer's; for a message published over MQTT v5, its Correlation Data as text
        (UTF-8, else base64: store/v5_properties.py)."""
        return correlation_id_shown(self._v5, self.envelope)

    @property
    def reply_to(self) -> str | None:
        """The producer's; for a message published over MQTT v5, its Response Topic."""
        return reply_to_shown(self._v5, self.envelope)

    @property
    def type(self) -> str | None:
        return self.envelope.type

    @property
    def message_class(self) -> MessageClass:
        return self.envelope.message_class

    def text(self, encoding: str = "utf-8") -> str:
        return self.body.decode(encoding)

    def ack(self) -> None:
        """Done: the message moves to processed/ (XEP-0254 §2.3, delete)."""
        # Not self.id: a call less.
        self._settler.ack(self.envelope.message_id, self.consumer, self._delivery)

    def unlock(self, delay: float = 0.0) -> str | None:
        """Cannot handle it: give it to the next consumer, after `delay` seconds (§2.4).
        None when it is back in target/; else why it went to error/ instead:
        "max-deliveries", or "metadata-full" (its name cannot carry one more delivery)."""
        return self._settler.unlock(self.id, self.consumer, delay, self._delivery)

    def reject(self) -> None:
        """It can never be handled: straight to error/, no redelivery."""
        self._settler.reject(self.id, self.consumer, self._delivery)

    def decline(self) -> str | None:
        """This consumer cannot take it (larger than its MQTT client may receive): for another
        consumer, its delivery not counted, and never for this one again while it stays (a
        share group's members). None when it is back in target/; else why it went to error/:
        "too-large" once every consumer declined it."""
        return self._settler.decline(self.id, self.consumer, self._delivery)

    def extend(self, seconds: float | None = None) -> None:
        """Still working on it: push the lock deadline to now + seconds (or the lock timeout),
        which `lock_deadline` then says: the holder reads it to know when to extend again."""
        deadline = self._settler.extend(self.id, self.consumer, seconds, self._delivery)
        if deadline is not None:
            object.__setattr__(self, "lock_deadline", deadline)  # frozen but for this


def qos_of(stored: object) -> int:
    """The QoS a name's `bx_qos` asks for, or 1 (the default, as for a name without one) if it
    is no QoS at all: a script's `bx_qosY=-1` must not make a PUBLISH that cannot be encoded."""
    if isinstance(stored, int) and not isinstance(stored, bool) and 0 <= stored <= 2:
        return stored
    return 1
