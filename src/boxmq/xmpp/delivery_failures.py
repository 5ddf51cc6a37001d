"""What the service logs of an item it could not deliver, and the item's way out.

A failure of one delivery costs that item, or that round of one subscription, alone: raised,
it left the service's poll() there, and the items taken with it stayed locked to the
subscriber, none of them sent, until their lock timeouts.
"""

from __future__ import annotations

import logging

from boxmq.client.message import Message
from boxmq.errors import BoxMQError, store_failure
from boxmq.xmpp.subscriptions import Subscription

__all__ = ["not_delivered", "not_taken", "unsendable"]

log = logging.getLogger("boxmq.xmpp")


def not_delivered(subscription: Subscription, message: Message) -> None:
    """A bug in the service's `_delivered` (called in its except clause: the traceback is
    logged) costs `message` alone: raised, it left poll() there, and the items taken with it
    stayed locked to the subscriber, none of them sent, until their lock timeouts.
    `message`'s lock times out as theirs did (its unlock told if it was held), and it goes
    round again."""
    log.exception(
        "%s: %r not sent to %s (a bug); it comes back at its lock timeout",
        subscription.node,
        message.id,
        subscription.jid,
    )


def not_taken(subscription: Subscription, error: OSError) -> None:
    """The store refused to lock `subscription`'s next items (a read-only disk, EIO, a
    target/ moved to another disk): told once, not at each round of the timer, and
    again if the errno changes; the items stay ready and are tried again each round."""
    if subscription.failing.news(error):
        log.error(
            "%s: deliveries to %s not taken: %s; what is ready stays in target/ and is "
            "tried again (told once)",
            subscription.node,
            subscription.jid,
            store_failure(error),
        )


def unsendable(node: str, message: Message, why: str) -> None:
    """An item no XMPP server would take from the component (put by the API, the CLI,
    MQTT or a script): sent, it would end the component's stream at each try, everyone's
    notifications in flight with it. It goes to error/, where `boxmq requeue` finds it.
    A move the file system refuses (error/ on another disk, read-only, EIO) costs this
    item alone: raised, it left poll() there, and the items taken with it stayed locked
    to the subscriber, none of them sent, until their lock timeouts."""
    try:
        message.reject()
    except OSError as error:
        log.error(
            "%s: %r not sent, nor moved to error/: %s; %s; it stays in processing/ under "
            "its lock until the sweep gives it back at its deadline, then is tried again",
            node,
            message.id,
            why,
            store_failure(error),
        )
        return
    except BoxMQError as error:  # taken back meanwhile: it comes round again
        log.debug("ignored: %s", error)
        return
    log.warning("%s: %r not sent, moved to error/: %s", node, message.id, why)
