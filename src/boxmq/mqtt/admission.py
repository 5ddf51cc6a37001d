"""Whether one more connection fits under [mqtt.limits] max_connections: the open ones and
the TLS handshakes under way count (each handshake holds memory and a descriptor for up to
connect_timeout, so stalled ones must not go past the limit). A refusal is told once while
they are refused, and the count of those refused when connections are accepted again."""

from __future__ import annotations

import logging

from boxmq.mqtt.drops import Refusals
from boxmq.mqtt.peer_address import PeerAddress

__all__ = ["Admission"]

log = logging.getLogger("boxmq.mqtt")


class Admission:
    """max_connections, for the broker's `opened` and `handshake_started`, and the count of
    the TLS handshakes under way (`handshaking`), which only this class changes."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._over_max = Refusals()  # sockets refused at max_connections
        self.handshaking = 0  # TLS handshakes under way: connections for max_connections

    def room_for(self, peer: PeerAddress, connected: int) -> bool:
        """Whether one more connection fits beside the `connected` ones (and the handshakes
        under way); told once while not."""
        most = self._most
        taken = connected + self.handshaking
        if taken >= most:
            if self._over_max.refused():
                log.warning(
                    "%s refused: %d connection(s) already%s, [mqtt.limits] max_connections = %d "
                    "(told once, and again when connections are accepted again)",
                    peer,
                    taken,
                    f" ({self.handshaking} in their TLS handshake)" if self.handshaking else "",
                    most,
                )
            return False
        if refused := self._over_max.accepted():
            log.info(
                "connections accepted again under [mqtt.limits] max_connections = %d "
                "(%d refused meanwhile)",
                most,
                refused,
            )
        return True

    def handshake_started(self, peer: PeerAddress, connected: int) -> bool:
        """A TLS handshake begins, counted as a connection until `handshake_ended`, if one
        more fits beside the `connected` ones (`room_for`)."""
        if not self.room_for(peer, connected):
            return False
        self.handshaking += 1
        return True

    def handshake_ended(self) -> None:
        """A handshake counted by `handshake_started` is over."""
        self.handshaking -= 1
