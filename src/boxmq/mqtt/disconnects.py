"""A connection's end as the broker reads it: what a DISCONNECT says of its session's end
(its expiry, and whether its Will goes), and nothing more read from a connection that ends."""

from __future__ import annotations

from boxmq.mqtt.clients import Client
from boxmq.mqtt.errors import ProtocolError
from boxmq.mqtt.packets import Disconnect
from boxmq.mqtt.reasons import ReasonCode
from boxmq.mqtt.session import Session

__all__ = ["stop_reading", "take_disconnect"]

_R = ReasonCode


def stop_reading(client: Client) -> None:
    """Nothing more that `client` sent is acted on: its connection ends (a DISCONNECT, a
    refused CONNECT, a close by the server), and a client may send nothing after its
    DISCONNECT (MQTT-3.14.4-1), nor be served after a CONNECT refused (MQTT-3.1.4-6). The
    rest of the read being handled (or of the packets a SUBSCRIBE held back) is dropped,
    undecoded: a SUBSCRIBE after a DISCONNECT would otherwise subscribe a session that has
    just ended, and a packet after a refused CONNECT would be handled with no session."""
    client.link.connection.stop_reading()
    if client.reading is not None:
        for _ in client.reading:  # ends at once for a read: its connection has no more
            pass


def take_disconnect(
    client: Client, session: Session, packet: Disconnect, longest_expiry: int
) -> None:
    """What a DISCONNECT says of the session's end: its expiry (at most `longest_expiry`,
    [mqtt.limits] max_session_expiry), and whether its Will goes."""
    asked = packet.properties.session_expiry_interval
    if asked is not None:
        if client.asked_expiry == 0 and asked:
            # Not a valid DISCONNECT: it deletes no Will (§3.14.2.2.2, MQTT-3.1.2-8).
            raise ProtocolError("DISCONNECT sets a Session Expiry Interval after 0 (§3.14.2.2.2)")
        session.expiry = min(asked, longest_expiry)
    # Only a normal disconnection deletes the Will (MQTT-3.1.2-8, MQTT-3.1.2-10): 0x04 asks
    # for it, and a client that ends with an error (0x80, 0x81, ...) ends abnormally.
    client.clean_exit = packet.reason == _R.NORMAL_DISCONNECTION
