"""The XMPP door: XEP-0060 pubsub with XEP-0254 queueing and urn:xmpp:qos, as an XEP-0114
component (docs/xmpp.md). Needs the `xmpp` extra (slixmpp) for the component only; parsing,
rendering and the service logic work on plain ElementTree elements."""

from __future__ import annotations

from boxmq.xmpp.settings import XmppSettings

__all__ = ["XmppSettings"]
