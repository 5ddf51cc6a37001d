"""The XML namespaces and element names the door speaks; nothing else here."""

from __future__ import annotations

__all__ = [
    "CLIENT",
    "COMPONENT",
    "DATA",
    "DISCO_INFO",
    "DISCO_ITEMS",
    "NODE_CONFIG",
    "PUBLISH_OPTIONS",
    "PUBSUB",
    "PUBSUB_ERRORS",
    "PUBSUB_EVENT",
    "PUBSUB_OWNER",
    "QOS",
    "QUEUEING",
    "QUEUEING_TYPO",
    "STANZAS",
    "SUBSCRIBE_OPTIONS",
    "tag",
]

CLIENT = "jabber:client"
COMPONENT = "jabber:component:accept"
PUBSUB = "http://jabber.org/protocol/pubsub"
PUBSUB_OWNER = "http://jabber.org/protocol/pubsub#owner"
PUBSUB_EVENT = "http://jabber.org/protocol/pubsub#event"
PUBSUB_ERRORS = "http://jabber.org/protocol/pubsub#errors"
SUBSCRIBE_OPTIONS = "http://jabber.org/protocol/pubsub#subscribe_options"
NODE_CONFIG = "http://jabber.org/protocol/pubsub#node_config"
PUBLISH_OPTIONS = "http://jabber.org/protocol/pubsub#publish-options"
QUEUEING = "urn:xmpp:pubsub:queueing:0"
# XEP-0254 Listing 11 writes the unlock notification in this namespace, which the document
# never defines: accepted on input, never sent (docs/xmpp.md, "The document's slips").
QUEUEING_TYPO = "urn:xmpp:queueing:0"
QOS = "urn:xmpp:qos"
DISCO_INFO = "http://jabber.org/protocol/disco#info"
DISCO_ITEMS = "http://jabber.org/protocol/disco#items"
DATA = "jabber:x:data"
STANZAS = "urn:ietf:params:xml:ns:xmpp-stanzas"


def tag(namespace: str, name: str) -> str:
    """ElementTree's `{namespace}name`."""
    return f"{{{namespace}}}{name}"
