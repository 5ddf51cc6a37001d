"""The `$SYS/` topics: this server's own figures, as a mosquitto user reads them
(`mosquitto_sub -t '$SYS/#' -v`), published every `sys_interval` seconds.

They are one server's, not the root's: two servers on one root each publish their own. So
they live in memory only. Each interval, the figures that changed since the last one go to
the connected clients whose subscriptions match them, at QoS 0; a new subscription gets the
latest of each at once, as retained messages. Nothing of them is written to the disk store,
to a persistent session's dropbox or to a share group (a queue on disk), and nothing of them
is queued for a client that is not connected.

`SysTopics` is the pure part (figures in, topic and payload out; time passed in as `now`);
`send_sys` puts one on a client's connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from boxmq.clock import periodic_due
from boxmq.core.topics import SYS, about_sys, matches
from boxmq.mqtt.clients import Client, Outgoing
from boxmq.mqtt.packets import new_publish
from boxmq.mqtt.properties import EMPTY, subscription_identifier
from boxmq.mqtt.session import SubscriptionOptions

__all__ = ["SYS", "Figures", "SysTopics", "about_sys", "send_sys"]

_BROKER: Final = "$SYS/broker/"


@dataclass(frozen=True)
class Figures:
    """What the server counted, as of one moment. Counters are totals since it started."""

    connected: int  # clients connected now (their CONNECT accepted)
    subscriptions: int  # filters the sessions held in this server hold
    # MQTT packets of every kind, as mosquitto counts them: each PUBLISH, PUBACK, PINGREQ...
    messages_received: int  # read from clients
    messages_sent: int  # written to them
    bytes_received: int  # every byte read from clients' connections
    bytes_sent: int  # every byte written to them


class SysTopics:
    """The latest value of each `$SYS` topic, and when the next are due. `interval` 0: off
    (nothing is ever due, nothing kept)."""

    def __init__(self, interval: float, *, version: str, started: float) -> None:
        self.interval = interval
        self._version = version
        self._next = started  # the first figures go out at the first tick
        # The uptime adds up the time from update to update, none when the clock went back
        # (NTP, `date -s`): `now - started` went out as -3585 seconds after a step of an hour.
        # A step the server told (`clock_stepped`) moves the last update and the next: not
        # counted, and the figures keep their interval.
        self._uptime, self._updated = 0.0, started
        self._maximum = 0  # the most clients connected at once, as seen at an interval
        self.latest: dict[str, bytes] = {}  # topic -> its last payload, in publishing order

    def due(self, now: float) -> bool:
        # Stepped back an hour, the figures stopped for an hour (`periodic_due`).
        return self.interval > 0 and periodic_due(now, self._next, self.interval)

    def clock_stepped(self, by: float) -> None:
        """The wall clock was stepped `by` seconds (Broker.clock_stepped): the uptime counts
        the time that passed, not the step (a step forward of an hour added an hour), and the
        next figures are due an interval after the last still (a step forward sent them at
        the next tick, a step back at once)."""
        self._updated += by
        self._next += by

    def update(self, now: float, figures: Figures) -> list[tuple[str, bytes]]:
        """The topics whose values changed since the last update (all of them the first
        time), each with its new payload, kept as the latest; the next are due an interval
        from now (a late tick does not make the next come sooner)."""
        self._next = now + self.interval
        self._uptime += max(0.0, now - self._updated)
        self._updated = now
        self._maximum = max(self._maximum, figures.connected)
        values = {
            "version": self._version,
            "uptime": f"{int(self._uptime)} seconds",
            "clients/connected": figures.connected,
            "clients/maximum": self._maximum,
            "subscriptions/count": figures.subscriptions,
            "messages/received": figures.messages_received,
            "messages/sent": figures.messages_sent,
            "bytes/received": figures.bytes_received,
            "bytes/sent": figures.bytes_sent,
        }
        changed = []
        latest = self.latest
        for name, value in values.items():
            topic, payload = _BROKER + name, str(value).encode()
            if latest.get(topic) != payload:
                latest[topic] = payload
                changed.append((topic, payload))
        return changed

    def matching(self, filter: str) -> list[tuple[str, bytes]]:
        """The latest values that a subscription to `filter` gets at once (retained)."""
        if not about_sys(filter):
            return []
        latest = self.latest
        return [(topic, latest[topic]) for topic in latest if matches(filter, topic)]


def send_sys(
    out: Outgoing,
    client: Client,
    options: SubscriptionOptions,
    topic: str,
    payload: bytes,
    *,
    retained: bool,
) -> None:
    """One `$SYS` value to a connected client, at QoS 0 and straight to its connection (no
    outbox: nothing waits for a window or is kept for later). `retained`: sent as a new
    subscription's retained message; otherwise the flag is what Retain As Published says,
    these being retained values. Dropped, as any QoS 0 copy, for a client that does not
    keep up, or one whose Maximum Packet Size it passes."""
    if client.link.congested:
        return
    identifier = options.identifier
    properties = EMPTY if identifier is None else subscription_identifier(identifier)
    retain = retained or options.retain_as_published
    publish = new_publish(topic, payload, 0, retain, False, None, properties)
    if client.link.connection.send_publish(publish, None, False):
        out.dirty.add(client)
