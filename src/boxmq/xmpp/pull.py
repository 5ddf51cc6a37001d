"""One thread per subscription that waits on its consumer and hands deliveries to the loop.

The embedded consumer blocks (it waits on the folder's watcher); the component's loop must
not. So each subscription gets a thread that does nothing but `receive` and pass the locked
message over with `call_soon_threadsafe`; the service itself only ever runs on the loop. A
thread ends when its consumer is closed (unsubscribe, unavailable presence, shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from boxmq.client.message import Message
from boxmq.errors import BoxMQError, Closed
from boxmq.xmpp.subscriptions import Subscription

__all__ = ["Pullers"]

log = logging.getLogger("boxmq.xmpp")

_Deliver = Callable[[Subscription, Message], None]


class Pullers:
    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: _Deliver) -> None:
        self._loop = loop
        self._deliver = deliver
        self._threads: list[threading.Thread] = []

    def start(self, subscription: Subscription) -> None:
        self._threads = [t for t in self._threads if t.is_alive()]
        thread = threading.Thread(
            target=self._pull,
            args=(subscription,),
            name=f"xmpp-pull {subscription.node} {subscription.jid}",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the threads of closed consumers to end."""
        for thread in self._threads:
            thread.join(timeout)

    def _pull(self, subscription: Subscription) -> None:
        consumer = subscription.consumer
        while True:
            try:
                message = consumer.receive(timeout=5.0)
            except Closed:
                return
            except BoxMQError as error:  # a file swept away under us, a full disk: try on
                log.warning("%s for %s: %s", subscription.node, subscription.jid, error)
                continue
            if message is None:
                continue
            try:
                self._loop.call_soon_threadsafe(self._deliver, subscription, message)
            except RuntimeError:  # the loop is gone: give the message back
                message.unlock()
                return
