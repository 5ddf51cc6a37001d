"""The values the XMPP door starts with (`boxmq serve --xmpp-*`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from boxmq.core.durations import LONGEST
from boxmq.core.topics import utf8_size
from boxmq.errors import InvalidArgument, InvalidName
from boxmq.host_names import HOST_NAME_RULE, is_host_name
from boxmq.store.names import NAME_LIMIT, escape_segment

__all__ = [
    "ENVELOPE",
    "SECRET_ENV",
    "STANZA_SIZE_LIMIT",
    "XmppSettings",
    "component_domain",
    "settings_from",
    "stanza_size_refusal",
    "without_component",
]

# Prosody's component_stanza_size_limit by default: a bigger stanza from the component ends
# its stream. A server set to take more (or less) needs the same number here.
STANZA_SIZE_LIMIT = 512 * 1024
ENVELOPE = 8 * 1024  # room an item leaves for its event: addresses, a QoS iq around it
_SMALLEST = 2 * ENVELOPE


def stanza_size_refusal(limit: object) -> str | None:
    """Why `limit` cannot be the server's stanza size limit for the component, else None."""
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= _SMALLEST:
        return None
    return (
        f"{limit!r} is no stanza size limit: give the XMPP server's limit for the component "
        f"in bytes (Prosody's component_stanza_size_limit, {STANZA_SIZE_LIMIT} by default), "
        f"at least {_SMALLEST}"
    )


# The defaults of XmppSettings, which settings_from gives too when serve's flags leave them.
_LOCK_TIMEOUT: Final = 30.0  # XEP-0254 §4: unanswered deliveries go to the next subscriber
_RECONNECT_MAX: Final = 30.0  # the longest wait between reconnect attempts


@dataclass(frozen=True, slots=True)
class XmppSettings:
    component: str  # the component's JID, e.g. queue.example.org
    host: str  # the XMPP server's component listener (XEP-0114)
    port: int
    secret: str
    lock_timeout: float = _LOCK_TIMEOUT
    reconnect_max: float = _RECONNECT_MAX
    stanza_size_limit: int = STANZA_SIZE_LIMIT  # the server's, for what the component sends

    def __post_init__(self) -> None:
        # The one run of the rules, whoever makes the settings. Named as written in Python
        # (a flag named here sent a caller looking for it); settings_from names the flag.
        for field, rule in _RULES.items():
            if (refused := rule(getattr(self, field))) is not None:
                raise _Refused(field, refused)


class _Refused(InvalidArgument):
    """A value XmppSettings refuses, said with its field's Python name; `field` and `why`
    for settings_from, which says it with `boxmq serve`'s flag instead."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"XmppSettings {field} {why}")
        self.field, self.why = field, why


def _kind(value: object) -> str:
    return {bool: "a bool", int: "an int", float: "a float", str: "a str"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _component_rule(component: object) -> str | None:
    if not isinstance(component, str):  # b'q.x' was a TypeError from `in`
        return f"{component!r} is {_kind(component)}: give a bare domain as a str"
    if not component or "@" in component or "/" in component:
        return f"{component!r}: give a bare domain"
    if utf8_size(component) is None:  # a byte of the argument that is not UTF-8
        return f"{component!r}: not valid Unicode: give a bare domain"
    domain, invalid = _jid_domain(component)
    if invalid is not None:  # 'a b'
        return (
            f"{component!r}: not a domain name ({invalid}): "
            "give a bare domain, such as queues.example.org"
        )
    try:  # its records' folder (records.py), else refused at start as a "destination name"
        escape_segment(domain)
    except InvalidName:
        return f"{component!r}: too long: its folder under the root passes {NAME_LIMIT} bytes"
    return None


def _host_rule(host: object) -> str | None:
    if not isinstance(host, str):  # 5 was an AttributeError from inside the IDNA check
        return f"{host!r} is {_kind(host)}: give a host name or address as a str"
    if utf8_size(host) is None:
        return f"{host!r}: not valid Unicode"
    if not is_host_name(host):  # slixmpp logged a traceback every 3 s
        return f"{host!r} is no host name: {HOST_NAME_RULE}"
    return None


def _port_rule(port: object) -> str | None:
    # True passed as port 1, '5347' was a TypeError from a comparison
    if isinstance(port, bool) or not isinstance(port, int):
        return f"{port!r} is {_kind(port)}: give a TCP port, an int from 1 to 65535"
    if not 0 < port < 65536:
        return f"{port} is not a TCP port"
    return None


def _secret_rule(secret: object) -> str | None:
    if not isinstance(secret, str):  # not shown: it is a secret
        return f"is {_kind(secret)}: give the secret as a str"
    if not secret:
        return "is empty"
    return None


def _seconds_rule(seconds: object) -> str | None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):  # '30' a TypeError
        return f"{seconds!r} is {_kind(seconds)}: give a positive number of seconds"
    # not NaN, which every comparison passed: a lock that never timed out
    if not 0 < seconds < math.inf:
        return f"{seconds!r}: give a positive number of seconds"
    if seconds > LONGEST:  # a lock's deadline past a century: refused at the first subscribe
        return f"{seconds!r}: at most {LONGEST:g} seconds (100 years)"
    return None


# What each field must be, said after its name (XmppSettings's field for Python, _FLAGS for
# the command line): run once, by XmppSettings, whoever asks.
_RULES: Final[dict[str, Callable[[object], str | None]]] = {
    "component": _component_rule,
    "host": _host_rule,
    "port": _port_rule,
    "secret": _secret_rule,
    "lock_timeout": _seconds_rule,
    "reconnect_max": _seconds_rule,
    "stanza_size_limit": stanza_size_refusal,
}
_FLAGS: Final = {
    "component": "--xmpp-component",
    "host": "--xmpp-server host",
    "port": "--xmpp-server port",
    "secret": "the component secret",
    "lock_timeout": "--xmpp-lock-timeout",
    "reconnect_max": "the longest reconnect wait",
    "stanza_size_limit": "--xmpp-stanza-size-limit",
}


def component_domain(component: str) -> str:
    """The component's domain as the XMPP server compares it (RFC 7622 §3.2: `Queue.Example`,
    `queue.example.` and `queue.example` are one domain), as slixmpp sends it in the
    handshake: the component's name on disk (records.py). `component` itself where slixmpp
    is missing or takes it for no JID (the door then refuses to start)."""
    return _jid_domain(component)[0]


def _jid_domain(component: str) -> tuple[str, str | None]:
    """`component_domain`, and why slixmpp takes `component` for no JID, else None: checked
    with the settings, not where the component is made, so that the error names the setting
    as the caller wrote it. None without slixmpp: the door then refuses to start, naming the
    extra it needs."""
    try:
        from slixmpp.jid import JID, InvalidJID
    except ImportError:
        return component, None
    try:
        return str(JID(component).domain), None
    except InvalidJID as error:
        return component, str(error)


SECRET_ENV = "BOXMQ_XMPP_SECRET"


def without_component(
    server: tuple[str, int] | None,
    secret: str | None,
    secret_file: str | None,
    lock_timeout: float | None,
    stanza_size_limit: int | None,
) -> str | None:
    """What to add when --xmpp-* flags are given without --xmpp-component, else None: they
    would be ignored without a word, and serve would run with no XMPP door."""
    given = [
        flag
        for flag, value in (
            ("--xmpp-server", server),
            ("--xmpp-secret", secret),
            ("--xmpp-secret-file", secret_file),
            ("--xmpp-lock-timeout", lock_timeout),
            ("--xmpp-stanza-size-limit", stanza_size_limit),
        )
        if value is not None
    ]
    if not given:
        return None
    need = "needs" if len(given) == 1 else "need"
    return f"{' and '.join(given)} {need} --xmpp-component NAME"


def settings_from(
    component: str | None,
    server: tuple[str, int] | None,
    *,
    secret: str | None,
    secret_file: str | None,
    environ: Mapping[str, str],
    lock_timeout: float | None = None,
    stanza_size_limit: int | None = None,
) -> XmppSettings | None:
    """`boxmq serve`'s --xmpp-* flags as settings; None when no component is asked for.
    Each refusal names the flag; `boxmq serve` says it as a usage error (exit 2), before it
    reads its config.

    The secret comes from --xmpp-secret-file, then $BOXMQ_XMPP_SECRET, then --xmpp-secret
    (the last one shows on the process list: the others are for production).
    """
    if component is None:
        missing = without_component(server, secret, secret_file, lock_timeout, stanza_size_limit)
        if missing is not None:
            raise InvalidArgument(missing)
        return None
    if secret_file is not None:
        try:
            # utf-8-sig: an editor's byte order mark is not part of the secret.
            with open(secret_file, encoding="utf-8-sig") as source:
                secret = source.read().strip()
        except OSError as error:
            raise InvalidArgument(f"--xmpp-secret-file {secret_file}: {error.strerror}") from None
        except UnicodeDecodeError as error:
            # The secret is text: the handshake hashes its UTF-8 bytes with the stream id.
            raise InvalidArgument(
                f"--xmpp-secret-file {secret_file}: not UTF-8 text (byte "
                f"0x{error.object[error.start]:02x}): save the secret as UTF-8"
            ) from None
    elif SECRET_ENV in environ:
        secret = environ[SECRET_ENV]
    if not secret:
        raise InvalidArgument(
            f"the component needs its secret: --xmpp-secret-file FILE, ${SECRET_ENV}, "
            "or --xmpp-secret SECRET"
        )
    host, port = server if server is not None else ("127.0.0.1", 5347)
    lock_timeout = lock_timeout if lock_timeout else _LOCK_TIMEOUT
    limit = STANZA_SIZE_LIMIT if stanza_size_limit is None else stanza_size_limit
    try:
        return XmppSettings(component, host, port, secret, lock_timeout, _RECONNECT_MAX, limit)
    except _Refused as refused:
        raise InvalidArgument(f"{_FLAGS[refused.field]} {refused.why}") from None
