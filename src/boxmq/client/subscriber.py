"""The messages of one subscription, for one subscriber: a durable subscription's or share
group member's through its dropbox's consumer, a memory subscription's from its inbox."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Final

from boxmq.client.consumer import Consumer
from boxmq.client.copies import at_qos
from boxmq.client.memory import MemoryInbox
from boxmq.client.message import Message
from boxmq.client.receiver import Receiver
from boxmq.core import QoS, TopicFilter
from boxmq.core.durations import check_wait
from boxmq.errors import Closed, check_flag
from boxmq.model import QOS, ConsumerId, MessageId
from boxmq.store.v5_properties import V5Reader

__all__ = ["Subscriber"]

# Seconds between a share-group member's looks for its end (one file's stat each): how long it
# may go on taking the group's messages once another process ended its membership.
_END_LOOK: Final = 1.0


class Subscriber(Receiver):
    """The messages of one subscription, for one subscriber: iterate it, or `receive`."""

    def __init__(
        self,
        filter: TopicFilter,
        name: ConsumerId,
        *,
        consumer: Consumer | None = None,
        inbox: MemoryInbox | None = None,
        on_close: Callable[[], object],  # what it returns is not used
        v5: V5Reader | None = None,
        granted: Callable[[], QoS | None] | None = None,
        now: Callable[[], float] | None = None,
        still_member: Callable[[], bool] | None = None,
    ) -> None:
        self.filter = filter
        self._now = now  # a memory subscription's clock: what expired waiting is dropped
        self.name = name
        # A share-group member's own QoS, as it stands now: the group's copies are stored at
        # the highest any member was granted, and each member gets at most its own (MQTT-234,
        # note 2).
        self._granted = granted
        self._v5 = v5
        self._consumer = consumer
        # What the `Message.queue` of the messages it hands out names: its filter
        # ("$share/GROUP/FILTER" for a share group's member), as `box.subscription` takes it.
        # An attribute: a broker's pump reads it for each of a session's subscriptions.
        self.queue = consumer.queue if consumer is not None else str(filter)
        self._inbox = inbox
        self._on_close = on_close
        self._closed = False
        # A share-group member's look at its membership: the group outlives a member another
        # process ended (`unsubscribe`), and its messages went on coming here, taken from its
        # members. Ended, it is paused until it is a member again (`_look_at_membership`).
        self._still_member = still_member
        self._ended = False
        self._looked = time.monotonic()
        self._paused = False  # by its caller (`pause`): a member again stays paused then

    def receive(self, timeout: float | None = None) -> Message | None:
        if self._consumer is not None:
            try:
                if self._still_member is None:
                    message = self._consumer.receive(timeout)
                else:
                    message = self._receive_as_member(self._consumer, timeout)
            except Closed as error:
                raise self._closed_error(error) from None
            if message is None or self._granted is None:
                return message
            return self._capped(message, self._granted())
        assert self._inbox is not None
        timeout = check_wait(timeout)  # a NaN deadline is never reached
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            delivery = self._inbox.pop(timeout)
            if delivery is None:
                return None
            if self._now is None or not delivery.envelope.expired(self._now()):
                break
            # MQTT 5.0 §3.3.2.3.3: expired before its delivery began, it goes to nobody, as
            # a dropbox's copy goes to expired/ (at most once: nothing else to tell).
            if deadline is not None:
                timeout = max(0.0, deadline - time.monotonic())
        return Message(
            str(self.filter),
            delivery.envelope,
            delivery.body,
            self.name,
            0.0,
            _AT_MOST_ONCE,
            self._v5,
        )

    def _receive_as_member(self, consumer: Consumer, timeout: float | None) -> Message | None:
        """`consumer.receive(timeout)`, its wait cut at each look at the membership: a
        receive that waits on takes nothing more than a second after the end. Ended, the
        consumer is paused: its receive waits out `timeout` and returns None, as a plain
        subscription's does once another process ended it (nothing comes to its folder)."""
        timeout = check_wait(timeout)  # before the arithmetic: a NaN or a str is refused
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if now - self._looked >= _END_LOOK:
                self._look_at_membership(now)
            left = None if end is None else max(0.0, end - now)
            until_look = self._looked + _END_LOOK - now
            message = consumer.receive(until_look if left is None else min(until_look, left))
            if message is not None or left == 0.0:
                return message
            if end is not None and time.monotonic() >= end:
                return None

    def _look_at_membership(self, now: float) -> None:
        """A member's look at its member file (`now`: time.monotonic()), once a second at
        most while it is one (not one per message: a share group's flow reads nothing more
        than before): ended, it is paused; a member again (made again by another process,
        or an MQTT client's SUBSCRIBE again, `Topics.resubscribe`, which keeps this
        Subscriber), it takes the group's messages again, unless its caller paused it."""
        self._looked = now
        assert self._still_member is not None
        assert self._consumer is not None
        ended = not self._still_member()
        if ended == self._ended:
            return
        self._ended = ended
        if ended:
            # What was claimed for it and not received goes back to the group's members, its
            # delivery not counted; what it received stays its own to settle, as a pause
            # leaves it (the unsubscribe released only the locks that name no process).
            self._consumer.pause()
        elif not self._paused:
            self._consumer.resume()

    def receive_ready(self, *, most: int | None = None) -> list[Message]:
        if self._consumer is not None:
            # Ended, a look at each call: a broker pumps it only when told of news, and an
            # MQTT client's SUBSCRIBE again makes it a member again.
            now = time.monotonic()
            if self._still_member is not None and (self._ended or now - self._looked >= _END_LOOK):
                self._look_at_membership(now)
            try:
                ready = self._consumer.receive_ready(most=most)
            except Closed as error:
                raise self._closed_error(error) from None
            if self._granted is None:
                return ready
            granted = self._granted()
            return [self._capped(m, granted) for m in ready]
        return super().receive_ready(most=most)

    @staticmethod
    def _capped(message: Message, granted: QoS | None) -> Message:
        if granted is None or message.qos <= granted:
            return message
        envelope = at_qos(message.envelope.without_property(QOS), granted)
        return replace(message, envelope=envelope)

    def set_limits(self, *, max_in_flight: int, lock_timeout: float) -> None:
        if self._consumer is None:
            super().set_limits(max_in_flight=max_in_flight, lock_timeout=lock_timeout)
            return
        try:
            self._consumer.set_limits(max_in_flight=max_in_flight, lock_timeout=lock_timeout)
        except Closed as error:
            raise self._closed_error(error) from None

    def _closed_error(self, error: Closed) -> Closed:
        """`error`, its consumer's, in the words of a subscriber: the consumer's named a
        consumer and the subscription's folder, whether the subscriber was closed, its
        subscription ended by an unsubscribe (another thread's, say) or its Box closed. A
        fork's stays as it is: its own words say why."""
        if self._consumer is not None and self._consumer.made_before_fork():
            return error
        return Closed(f"subscriber {self.name!r} of {str(self.filter)!r} is closed")

    def pause(self, *, keep_claimed: bool = False) -> None:
        """A durable subscription or share-group member takes nothing more until `resume`
        (what it holds stays its own): a share group's messages go to its other members.
        keep_claimed: what was claimed for it and not received yet stays its own too, such
        as the messages a subscriber with process_bound=False took back at its subscribe."""
        check_flag("keep_claimed", keep_claimed)
        if self._consumer is not None:
            self._paused = True
            self._consumer.pause(keep_claimed=keep_claimed)

    def resume(self) -> None:
        """A member that another process ended stays paused until it is a member again."""
        self._paused = False
        if self._consumer is not None and not self._ended:
            self._consumer.resume()

    def rest(self) -> None:
        """It receives nothing for a while (its MQTT client is away, its session kept): its
        dropbox's watcher is let go until the next receive, and the box's sweeps visit the
        dropbox only when something in it is due (docs/operations.md)."""
        if self._consumer is not None:
            self._consumer.rest()

    def take_back(self) -> int:
        """For a subscriber with process_bound=False: the messages another process's
        subscriber of its name and filter received since this one subscribed, and left
        locked to it (`detach`), are its own again here, ahead of what it has not received
        yet in their order; how many. One look at the dropbox's processing/."""
        return 0 if self._consumer is None else self._consumer.take_back()

    def holding(self) -> int:
        """How many messages it holds locked (a memory subscription holds none)."""
        return 0 if self._consumer is None else self._consumer.holding()

    def has_more(self) -> bool:
        """Whether a receive might get something no news told of (LiveQueue.has_more); a
        memory subscription's inbox is looked at by every receive."""
        return self._consumer is None or self._consumer.has_more()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._consumer is not None:
            self._consumer.close()  # its locks go to the other members at once
        self._on_close()

    def detach(self) -> None:
        """Stop receiving here but stay subscribed (an MQTT session that lives on elsewhere):
        a share group keeps this member, and the locks held are released, unless it was
        subscribed with process_bound=False: then what it received stays locked to it, what
        its subscribe took back included, received here again or not. Only detach keeps
        them: a close (this Subscriber's, or its Box's before a detach) releases them, each
        delivery counted."""
        if not self._closed:
            self._closed = True
            if self._consumer is not None:
                self._consumer.close(keep_locks=True)
            elif self._inbox is not None:
                self._on_close()  # a memory subscription cannot outlive its inbox


class _AtMostOnce:
    """Settling a QoS 0 message in memory: there is nothing to settle."""

    def ack(self, message_id: MessageId, consumer: ConsumerId, delivery: int | None) -> None:
        pass

    def unlock(
        self, message_id: MessageId, consumer: ConsumerId, delay: float, delivery: int | None
    ) -> str | None:
        return None

    def reject(self, message_id: MessageId, consumer: ConsumerId, delivery: int | None) -> None:
        pass

    def decline(
        self, message_id: MessageId, consumer: ConsumerId, delivery: int | None
    ) -> str | None:
        return None

    def extend(
        self,
        message_id: MessageId,
        consumer: ConsumerId,
        seconds: float | None,
        delivery: int | None,
    ) -> float | None:
        return None


_AT_MOST_ONCE = _AtMostOnce()
