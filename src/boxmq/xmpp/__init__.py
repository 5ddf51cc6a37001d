"""The XMPP door: XEP-0060 pubsub with XEP-0254 queueing and urn:xmpp:qos, as an XEP-0114
component (docs/xmpp.md). Everything below needs the `xmpp` extra (slixmpp), except what
`boxmq serve` reads before it starts the door: the settings, and `component_runner`."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from boxmq.errors import InvalidArgument
from boxmq.xmpp.settings import XmppSettings

__all__ = ["XmppSettings", "component_runner"]


def component_runner() -> Callable[..., Coroutine[Any, Any, None]]:
    """`run_component`, or InvalidArgument saying how to install what it needs."""
    try:
        from boxmq.xmpp.component import run_component
    except ImportError as error:
        raise InvalidArgument(
            f"the XMPP door needs the xmpp extra ({error.name} is missing): "
            "pip install 'boxmq[xmpp]'"
        ) from None
    return run_component
