"""What this server counted, for `$SYS` (sys_topics.py): the packets and bytes of its
connections, those closed kept as totals when they close (`Traffic.retire`), the open ones'
added when the figures are taken, once an interval; and the values that changed sent to the
connected clients whose subscriptions match them."""

from __future__ import annotations

from collections.abc import Iterable

from boxmq.core.topics import matches
from boxmq.mqtt.clients import Client, Link, Outgoing
from boxmq.mqtt.session import Session
from boxmq.mqtt.sys_topics import Figures, about_sys, send_sys

__all__ = ["Traffic", "send_changed"]

_Counts = tuple[int, int, int, int]  # packets received, sent; bytes received, sent


def _counted(totals: _Counts, link: Link) -> _Counts:
    """`totals` with what the connection of `link` counted added."""
    connection = link.connection
    received, sent, read, written = totals
    return (
        received + connection.packets_received,
        sent + connection.packets_sent,
        read + connection.bytes_received,
        written + connection.bytes_sent,
    )


class Traffic:
    """What the connections closed so far counted (Connection's counters): the open ones
    are added when the figures are taken."""

    def __init__(self) -> None:
        self._retired: _Counts = (0, 0, 0, 0)

    def retire(self, link: Link) -> None:
        """A connection closed: what it counted goes to the totals of the closed ones."""
        self._retired = _counted(self._retired, link)

    def figures(
        self, links: Iterable[Link], connected: int, sessions: Iterable[Session]
    ) -> Figures:
        """The figures now: the closed connections' counts and those of the open `links`
        (a sum over the connections and sessions, once an interval)."""
        totals = self._retired
        for link in links:
            totals = _counted(totals, link)
        received, sent, read, written = totals
        return Figures(
            connected=connected,
            subscriptions=sum(len(s.subscriptions) for s in sessions),
            messages_received=received,
            messages_sent=sent,
            bytes_received=read,
            bytes_sent=written,
        )


def send_changed(
    out: Outgoing, clients: Iterable[Client], changed: list[tuple[str, bytes]]
) -> None:
    """The $SYS values that changed since the last interval, to the connected `clients`
    whose subscriptions match them. A share group gets none: it is a queue on disk, and
    these are never written."""
    for client in clients:
        session = client.session
        if session is None:
            continue
        for text, options in session.subscriptions.items():
            if not about_sys(text):  # also every $share/...: never a $SYS filter
                continue
            for topic, payload in changed:
                if matches(text, topic):
                    send_sys(out, client, options, topic, payload, retained=False)
