"""The boxmq side of the Prosody tests: our QueueComponent connected to the session's Prosody
(its clients, and Prosody itself, are harness/prosody.py's)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from harness.prosody import SECRET, SERVICE, TIMEOUT, Prosody

import boxmq
from boxmq.xmpp.component import QueueComponent
from boxmq.xmpp.settings import XmppSettings


@contextlib.asynccontextmanager
async def component(
    server: Prosody,
    box: boxmq.Box,
    *,
    lock_timeout: float = 30.0,
    name: str = SERVICE,
    **more: int,
) -> AsyncIterator[QueueComponent]:
    settings = XmppSettings(
        name, "127.0.0.1", server.component_port, SECRET, lock_timeout=lock_timeout, **more
    )
    running = QueueComponent(box, settings)
    running.connect()
    try:
        await asyncio.wait_for(running.connected.wait(), TIMEOUT)
        yield running
    finally:
        await running.stop()
