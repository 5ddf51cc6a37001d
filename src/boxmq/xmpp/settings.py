"""The values the XMPP door starts with (`boxmq serve --xmpp-*`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from boxmq.core.topics import utf8_size
from boxmq.errors import InvalidArgument
from boxmq.host_names import HOST_NAME_RULE, is_host_name

__all__ = [
    "ENVELOPE",
    "SECRET_ENV",
    "STANZA_SIZE_LIMIT",
    "XmppSettings",
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


@dataclass(frozen=True, slots=True)
class XmppSettings:
    component: str  # the component's JID, e.g. queue.example.org
    host: str  # the XMPP server's component listener (XEP-0114)
    port: int
    secret: str
    lock_timeout: float = 30.0  # XEP-0254 §4: unanswered deliveries go to the next subscriber
    reconnect_max: float = 30.0  # the longest wait between reconnect attempts
    stanza_size_limit: int = STANZA_SIZE_LIMIT  # the server's, for what the component sends

    def __post_init__(self) -> None:
        if not self.component or "@" in self.component or "/" in self.component:
            raise InvalidArgument(f"--xmpp-component {self.component!r}: give a bare domain")
        if utf8_size(self.component) is None:  # a byte of the argument that is not UTF-8
            raise InvalidArgument(
                f"--xmpp-component {self.component!r}: not valid Unicode: give a bare domain"
            )
        if utf8_size(self.host) is None:
            raise InvalidArgument(f"xmpp server host {self.host!r}: not valid Unicode")
        if not is_host_name(self.host):  # slixmpp logged a traceback every 3 s
            raise InvalidArgument(
                f"xmpp server host {self.host!r} is no host name: {HOST_NAME_RULE}"
            )
        if not 0 < self.port < 65536:
            raise InvalidArgument(f"xmpp server port {self.port} is not a TCP port")
        if not self.secret:
            raise InvalidArgument("the component secret is empty")
        if self.lock_timeout <= 0:
            raise InvalidArgument("the lock timeout must be a positive number of seconds")
        if (refused := stanza_size_refusal(self.stanza_size_limit)) is not None:
            raise InvalidArgument(f"--xmpp-stanza-size-limit {refused}")


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
    return XmppSettings(
        component,
        host,
        port,
        secret,
        lock_timeout=lock_timeout if lock_timeout else 30.0,
        stanza_size_limit=STANZA_SIZE_LIMIT if stanza_size_limit is None else stanza_size_limit,
    )
