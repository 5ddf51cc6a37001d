"""A CONNECT whose session another server of this host is taking on from one that died (it
holds the claim: Lifetimes.left_by_the_dead) is answered once that server is done (a read and
a write of one record), its packets behind it held: tried again every `CLAIM_RETRY` seconds,
the record read again. Never waited for on the loop: a claimer stopped (SIGSTOP) or stuck on
a slow NFS would freeze every client. Still claimed after `CLAIM_PATIENCE` seconds, it is
refused as server busy (v5 0x89, 3.1.1 return code 3), for the client to try again. The
patience is timed on the broker's clock, as its ticks and connect_timeout are (a test's
ManualClock drives it); the tries are spaced on the loop's. The refusal's line is the
caller's (`CLAIM_HELD` says why), told once for a client host and then counted as other
refused CONNECTs are: a device retrying wrote a warning a try."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from boxmq.core.durations import spelled
from boxmq.mqtt.clients import Client
from boxmq.mqtt.subscribing import hold_the_rest

__all__ = ["CLAIM_HELD", "CLAIM_PATIENCE", "CLAIM_RETRY", "wait_for_claim", "waits_for_claim"]

# Seconds between two tries, and how long a CONNECT waits before it is refused as server busy.
CLAIM_RETRY: Final = 0.05
CLAIM_PATIENCE: Final = 5.0

# Why such a CONNECT was refused, as its line and the count of those after it say it.
CLAIM_HELD: Final = (
    "its session is being taken on by another server of this host from one that died, "
    f"and its claim was still held after this CONNECT waited {spelled(CLAIM_PATIENCE)} "
    "(that server stopped?)"
)


def waits_for_claim(client: Client, now: float) -> bool:
    """Whether `client`'s CONNECT waits for another server's claim on its session (see
    `wait_for_claim`), which answers it in time."""
    since = client.claim_waited_since
    return since is not None and now - since <= CLAIM_PATIENCE + 1.0


def wait_for_claim(
    client: Client,
    now: float,
    again: Callable[[], None],
    busy: Callable[[], None],
) -> None:
    """`client`'s CONNECT found its session claimed at `now`: `again` answers it once more
    after `CLAIM_RETRY` seconds, or `busy` refuses it (and says so: `CLAIM_HELD`) once it
    waited `CLAIM_PATIENCE` seconds."""
    if client.claim_waited_since is None:
        client.claim_waited_since = now
    elif now - client.claim_waited_since >= CLAIM_PATIENCE:
        busy()
        return
    if client.held is None:  # held already while its password was checked
        hold_the_rest(client)
    asyncio.get_running_loop().call_later(CLAIM_RETRY, again)
