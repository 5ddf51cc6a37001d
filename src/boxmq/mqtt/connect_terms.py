"""What a CONNECT is granted or refused, read off the packet and the settings alone: whether
it is refused before any session is looked at, its session's expiry, its keep-alive, its
Response Information, and how the log names it and its refusal. connect_answers.py answers it."""

from __future__ import annotations

from typing import Final

from boxmq.core.topics import validate_topic
from boxmq.errors import InvalidTopic
from boxmq.mqtt.acl import substitute
from boxmq.mqtt.clients import Client
from boxmq.mqtt.packets import Connect, ProtocolVersion
from boxmq.mqtt.reasons import ReasonCode, connect_return_code
from boxmq.mqtt.settings import Limits, MqttSettings
from boxmq.mqtt.stored import storable

__all__ = [
    "LONGEST_KEEP_ALIVE",
    "connecting",
    "expiry_of",
    "granted_keep_alive",
    "reason_text",
    "refusal_of",
    "response_information",
]

_R = ReasonCode

LONGEST_KEEP_ALIVE: Final = 0xFFFF  # seconds: the most a CONNECT can ask (two bytes)


def granted_keep_alive(asked: int, cap: int, *, v5: bool) -> int:
    """The keep-alive period a client gets for the one it `asked` (0: none). A v5 client
    asking for more than `cap` is told `cap` in Server Keep Alive (MQTT 5.0 §3.2.2.3.14), and
    asking for none is asking for more than any cap; a cap of 65535 (the default) caps
    nothing, 0 included. A 3.1.1 client cannot be told, so it keeps what it asked."""
    if not v5:
        return asked
    if asked == 0:
        return cap if cap < LONGEST_KEEP_ALIVE else 0
    return min(asked, cap)


def connecting(client: Client, packet: Connect) -> str:
    """Who a CONNECT came from, for the log: client id, user (or none), address."""
    user = "no user name" if packet.username is None else f"user {packet.username!r}"
    return f"client {packet.client_id!r} ({user}, from {client.link.peer})"


def reason_text(reason: ReasonCode, version: ProtocolVersion) -> str:
    """A CONNACK's refusal as the log reads it, with the code the client was sent: `bad user
    name or password (0x86)` for a v5 client, `(return code 4)` for a 3.1.1 one."""
    if version is ProtocolVersion.V5:
        name, told = reason.name, f"0x{reason.value:02x}"
    else:
        code = connect_return_code(reason)
        name, told = code.name, f"return code {code.value}"
    return f"{name.lower().replace('_', ' ')} ({told})"


def expiry_of(packet: Connect, limits: Limits) -> int:
    """The session expiry a CONNECT gets, in seconds."""
    if packet.version is ProtocolVersion.V5:
        # Capped, "never" too (told in CONNACK): an operator's limit is a limit.
        return min(packet.properties.session_expiry_interval or 0, limits.max_session_expiry)
    # 3.1.1: CleanSession 0 asks for no end, as "never" does, and gets the same limit
    # (mosquitto's persistent_client_expiration); it cannot be told in CONNACK.
    return 0 if packet.clean_start else limits.max_session_expiry


def refusal_of(packet: Connect, *, authenticated: bool) -> ReasonCode | None:
    """Why a CONNECT is refused before its session is looked at, or None."""
    if packet.properties.authentication_method is not None:
        return _R.BAD_AUTHENTICATION_METHOD  # no enhanced authentication (§4.12)
    if not authenticated:
        return _R.NOT_AUTHORIZED if packet.username is None else _R.BAD_USER_NAME_OR_PASSWORD
    if packet.client_id and not storable(packet.client_id):
        return _R.CLIENT_IDENTIFIER_NOT_VALID
    return None


def response_information(settings: MqttSettings, packet: Connect, client_id: str) -> str | None:
    """What a client that asked for Response Information is told (MQTT 5.0 §3.1.2.11.7):
    the configured one filled in for it, or nothing (the server may always say nothing),
    as when it needs a user name the client has not or a value that would widen it."""
    template = settings.response_information
    if template is None or not packet.properties.request_response_information:
        return None
    text = substitute(template, packet.username, client_id)
    try:
        return None if text is None else validate_topic(text)
    except InvalidTopic:
        return None  # a client id too long for it
