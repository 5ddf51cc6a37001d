"""One client connection, sans-IO: bytes in, checked packets out; packets in, bytes out.

`receive(data, now)` frames and decodes what came and returns the packets the broker must act
on; `send(packet)` encodes one for the client and `data_to_send()` takes everything encoded
so far (`data_to_write()` joined), so the edge writes once per read. Nothing here awaits or reads a
clock: `now` is passed in, and `deadline()` says when the connection has been silent too long.

Invariants (the rules a single connection can check alone):
- The first packet is CONNECT and there is no second one (MQTT 5.0 §3.1); it fixes the version.
- A PUBLISH handed to the broker always has its topic: a v5 Topic Alias is resolved here and
  removed from its properties (§3.3.2.3.4); the alias map is per connection.
- The client's own limits are kept: a PUBLISH larger than its Maximum Packet Size is not sent
  (§3.1.2.25), and it may not send us more QoS 1/2 PUBLISHes unanswered than our Receive
  Maximum (§3.3.4).
- Every error raised is a ProtocolViolation; `closing(error)` says what to send before closing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Final

from boxmq.errors import MalformedPacket, PacketTooLarge, ProtocolViolation
from boxmq.mqtt.codec import (
    POSITIVE_ACKS,
    connect_version,
    decode,
    decode_publish,
    encode,
    encode_publish,
)
from boxmq.mqtt.errors import (
    ClientIdNotValid,
    ProtocolError,
    ReceiveMaximumExceeded,
    TopicAliasInvalid,
    UnsupportedProtocolVersion,
)
from boxmq.mqtt.framing import Frame, FrameReader, PacketType, remaining_length
from boxmq.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Incoming,
    Packet,
    ProtocolVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Unsuback,
    new_publish,
)
from boxmq.mqtt.properties import EMPTY, Properties, PropertyId
from boxmq.mqtt.reasons import ReasonCode, connect_return_code, reason_for

__all__ = ["Connection", "ReceiveMaximumExceeded"]

_V5: Final = ProtocolVersion.V5  # an Enum member read off its class costs more (outbox.py)
_PUBLISH: Final = int(PacketType.PUBLISH)
_CONNECT: Final = int(PacketType.CONNECT)
# A positive PUBACK, PUBREC, PUBREL or PUBCOMP without properties is its id alone, in either
# version (MQTT 5.0 §3.4.2.1): its first two bytes, and whether it finishes a PUBLISH the
# client sent (Receive Maximum).
_SHORT_ACK_SIZE: Final = 4  # those two bytes and the packet id
_SHORT_ACKS: Final = {
    Puback: (bytes((int(PacketType.PUBACK) << 4, 2)), True),
    Pubrec: (bytes((int(PacketType.PUBREC) << 4, 2)), False),
    Pubrel: (bytes((int(PacketType.PUBREL) << 4 | 0b0010, 2)), False),  # its flags (§2.1.3)
    Pubcomp: (bytes((int(PacketType.PUBCOMP) << 4, 2)), True),
}
_ACKS: Final = (Puback, Pubrec, Pubrel, Pubcomp)
# What of a CONNECT says its version: its protocol name ("MQTT", 6 bytes) and level (1), after
# its fixed header (at most 5).
_NAME_AND_LEVEL: Final = 7
_CONNECT_HEAD: Final = 5 + _NAME_AND_LEVEL
# How other protocols begin, which a client on the wrong port sends where a CONNECT (0x10)
# must come first: read as MQTT they were "CONNECT: fixed header flags 0b0110" (a TLS
# ClientHello's record header, 0x16 0x03) or "PUBACK before CONNECT" (GET).
_TLS_RECORD: Final = b"\x16\x03"
_HTTP_METHODS: Final = (b"GET ", b"HEAD ", b"POST ", b"PUT ", b"DELETE ", b"OPTIONS ", b"PATCH ")
_HTTP_LONGEST: Final = max(len(method) for method in _HTTP_METHODS)
_HTTP_REQUEST: Final = "an HTTP request, not MQTT"
# What a CONNACK over the client's Maximum Packet Size goes without (`_shortened`). The
# four availabilities are sent as 1, which their absence means too (MQTT 5.0 §3.2.2.3: "if
# not present, then ... supported"): an assigned client id and a told Session Expiry
# Interval made a CONNACK of 69 bytes without Response Information.
_CONNACK_OPTIONAL: Final = (
    PropertyId.RESPONSE_INFORMATION,
    PropertyId.REASON_STRING,
    PropertyId.USER_PROPERTY,
    PropertyId.RETAIN_AVAILABLE,
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE,
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE,
)


class Connection:
    # One per socket: slots, and the set of a v5 client's QoS 2 packet ids made when it
    # sends one (None until then: an empty set takes 216 bytes; docs/benchmarks.md, "Many
    # idle connections").
    __slots__ = (
        "_aliases",
        "_open_qos2",
        "_out",
        "_out_aliases",
        "_reader",
        "_unanswered",
        "accepted",
        "bytes_received",
        "bytes_sent",
        "client_alias_maximum",
        "client_max_packet_size",
        "ended",
        "keep_alive",
        "last_heard",
        "packets_sent",
        "problems",
        "receive_maximum",
        "topic_alias_maximum",
        "version",
    )

    def __init__(
        self, *, max_packet_size: int, receive_maximum: int, topic_alias_maximum: int, now: float
    ) -> None:
        self._reader = FrameReader(max_packet_size=max_packet_size)
        self._reader.shortest = False  # until a CONNECT says MQTT 5.0 (`_connect`)
        self.version: ProtocolVersion | None = None  # known once CONNECT came
        self.receive_maximum = receive_maximum  # ours: what the client may have unanswered
        self.topic_alias_maximum = topic_alias_maximum  # ours, for the client's aliases
        self.client_max_packet_size = 0  # 0: no limit (the client did not say)
        self.keep_alive = 0  # seconds, as granted; 0: off
        self.last_heard = now
        self._aliases: dict[int, str] = {}  # the client's, for what it publishes
        self.client_alias_maximum = 0  # how many aliases the client takes from us (v5)
        self._out_aliases: dict[str, int] = {}  # ours, for what we send it
        self._unanswered = 0  # QoS 1/2 PUBLISHes from the client we have not finished
        self._open_qos2: set[int] | None = None  # their QoS 2 packet ids: a repeat counts once
        self._out: list[bytes] = []
        self.accepted = False  # a positive CONNACK was sent
        # A DISCONNECT was sent (or `closing` gave one): nothing may follow it (MQTT-3.14.4-1),
        # such as the answers to the packets held behind a SUBSCRIBE, handled at the close.
        self.ended = False
        self.problems = True  # Request Problem Information (MQTT 5.0 §3.1.2.11.7): Reason Strings
        # What went through, for the server's $SYS figures (sys_topics.py): plain ints, one
        # addition per read and per write (`data_to_write`, the edge's), none per packet:
        # each cost about 150 instructions (an int object made), 0.3 % of a QoS 0 message.
        self.bytes_received = 0
        self.bytes_sent = 0
        self.packets_sent = 0

    # -- reading ---------------------------------------------------------------------------------

    def receive(self, data: bytes, now: float) -> list[Packet]:
        """The packets in `data` (and what was left from before), checked."""
        return [_built(packet) for packet in self.packets(data, now)]

    def packets(self, data: bytes | memoryview, now: float) -> Iterator[Incoming]:
        """As `receive`, one at a time, a positive acknowledgement without properties as a
        `ShortAck`: a bad packet raises only once those before it were taken, so a server
        acts on them as it would have had they come alone. A view is copied before this
        returns: its buffer may take the next read at once."""
        # The keep-alive counts control packets (MQTT-3.1.2-22), not bytes: a read is heard
        # when it brings a packet's last byte, so a client trickling the bytes of a packet it
        # never finishes (a slowloris) is closed in time, as mosquitto closes it.
        if self._reader.receive(data):
            self.last_heard = now
        self.bytes_received += len(data)
        frames = self._reader.frames()
        if self.version is None:
            frames = self._before_connect(frames)
        return map(self._packet, frames)

    def stop_reading(self) -> None:
        """The connection ends: the packets of this read not taken yet are not decoded, and
        `packets` gives no more of them (nothing after a DISCONNECT, MQTT-3.14.4-1, or
        after a CONNECT the server refused, MQTT-3.1.4-6)."""
        self._reader.clear()

    def _before_connect(self, frames: Iterator[Frame]) -> Iterator[Frame]:
        """`frames`, but a CONNECT refused as too large from its fixed header alone, before
        its body came, is first read as far as its protocol level: a v5 one is answered with
        CONNACK 0x95 Packet too large (MQTT 5.0 §3.2.2.2, §4.13.1), as a bad CONNECT is
        answered in its version (`_connect`); a 3.1.1 one has no such code and is closed."""
        try:
            yield from frames
            # An HTTP request shorter than the frame its first bytes read as ("GET " is a
            # PUBACK of 69 bytes): a health check waits for an answer, and was closed at
            # connect_timeout as a socket that sent nothing ("no CONNECT within 10s"), or
            # said nothing at all if its client gave up first.
            if (
                self.version is None
                and not self._reader.frames_read
                and self._reader.head(_HTTP_LONGEST).startswith(_HTTP_METHODS)
            ):
                raise MalformedPacket(_HTTP_REQUEST)
        except PacketTooLarge:
            if self.version is None:
                head = self._reader.head(_CONNECT_HEAD)
                header = remaining_length(head, 0, False)  # whole: the reader refused it by it
                assert header is not None
                size = header[1]
                if head[0] >> 4 == _CONNECT and len(head) < size + _NAME_AND_LEVEL:
                    return  # its level has not come: the next read refuses it again
                self.version = connect_version((head[0] >> 4, head[0] & 0x0F, head[size:]))
            raise

    def _packet(self, frame: Frame) -> Incoming:
        version = self.version
        if version is None:
            return self._connect(frame)
        kind, flags, body = frame
        if kind != _PUBLISH:
            positive = POSITIVE_ACKS.get(kind << 4 | flags)
            if positive is not None and len(body) == 2 and (packet_id := body[0] << 8 | body[1]):
                return (positive, packet_id)  # decode's common ack, not built
            if kind == _CONNECT:
                raise ProtocolError("a second CONNECT (MQTT 5.0 §3.1)")
            return decode(frame, version)
        v5 = version is _V5
        packet = decode_publish(flags, body, v5)  # decode's first case, called here
        if v5:
            # 3.1.1 has no Receive Maximum and no aliases: its clients are slowed by reading
            # them less (batches.py), never disconnected for having many PUBLISHes in flight.
            if packet.qos == 1:
                self._count_unanswered()
            elif packet.qos == 2:
                open_qos2 = self._open_qos2
                if open_qos2 is None:
                    open_qos2 = self._open_qos2 = set()
                if packet.packet_id not in open_qos2:
                    # A repeat before PUBREL is answered again (PUBREC) but finishes once.
                    open_qos2.add(packet.packet_id or 0)
                    self._count_unanswered()
            mask = packet.properties.mask
            if mask >> PropertyId.SUBSCRIPTION_IDENTIFIER & 1:
                raise ProtocolError("a PUBLISH from a client with a Subscription Identifier")
            if mask >> PropertyId.TOPIC_ALIAS & 1:
                return self._resolve_alias(packet)
        return packet

    def _connect(self, frame: Frame) -> Connect:
        kind = frame[0]
        if (other := _other_protocol(frame)) is not None:
            raise MalformedPacket(other)
        if kind != _CONNECT:
            # Type 0 is reserved and has no name: PacketType(0) would raise ValueError.
            name = PacketType(kind).name if kind else "reserved packet type 0"
            raise ProtocolError(f"{name} before CONNECT (MQTT 5.0 §3.1)")
        self.version = connect_version(frame)  # so that a bad CONNECT is answered in its version
        if self.version is ProtocolVersion.V5:
            if self._reader.longer:  # read before its version was known: malformed in 5.0
                raise MalformedPacket("remaining length is not in its shortest form (§1.5.5)")
            self._reader.shortest = True
        packet = decode(frame, self.version or ProtocolVersion.V5)
        assert isinstance(packet, Connect)
        self.version = packet.version
        props = packet.properties
        self.client_max_packet_size = props.maximum_packet_size or 0
        if packet.version is ProtocolVersion.V5:
            self.client_alias_maximum = props.topic_alias_maximum or 0
            self.problems = props.request_problem_information != 0
        return packet

    def _count_unanswered(self) -> None:
        self._unanswered += 1
        if self._unanswered > self.receive_maximum:
            raise ReceiveMaximumExceeded(
                f"more than {self.receive_maximum} QoS 1/2 PUBLISHes unanswered"
            )

    def _resolve_alias(self, packet: Publish) -> Publish:
        alias = packet.properties.topic_alias
        assert alias is not None
        if not 0 < alias <= self.topic_alias_maximum:
            raise TopicAliasInvalid(f"Topic Alias {alias} is over {self.topic_alias_maximum}")
        topic = packet.topic
        if topic:
            self._aliases[alias] = topic
        else:
            known = self._aliases.get(alias)
            if known is None:
                raise ProtocolError(f"Topic Alias {alias} was never set (MQTT 5.0 §3.3.2.3.4)")
            topic = known
        properties = packet.properties.without(PropertyId.TOPIC_ALIAS)
        return new_publish(
            topic,
            packet.payload,
            packet.qos,
            packet.retain,
            packet.dup,
            packet.packet_id,
            properties,
        )

    # -- keep-alive --------------------------------------------------------------------------------

    def deadline(self) -> float | None:
        """When the client has been silent too long: 1.5 keep-alive periods (§3.1.2.10)."""
        return self.last_heard + 1.5 * self.keep_alive if self.keep_alive else None

    # -- writing ---------------------------------------------------------------------------------

    def send(self, packet: Packet) -> bool:
        """Queue `packet` for the client; False if it was a PUBLISH larger than the client's
        Maximum Packet Size, which is discarded (MQTT 5.0 §3.1.2.25: the caller then behaves
        as if it had been sent). A PUBLISH that cannot be encoded (a payload over the largest
        packet MQTT has) raises, and nothing of it is kept."""
        if type(packet) is Publish:  # it makes the checks below itself
            return self.send_publish(packet, packet.packet_id, packet.dup)
        version = self.version
        assert version is not None, "nothing is sent before CONNECT"
        if self.ended:
            return True  # as a write to a socket gone: the session keeps what it holds
        if isinstance(packet, _ACKS) and not packet.reason and packet.properties is EMPTY:
            self.acknowledge(type(packet), packet.packet_id)  # e.g. the PUBREL of every QoS 2
            return True
        self._send_other(packet, version)
        return True

    def send_publish(self, packet: Publish, packet_id: int | None, dup: bool) -> bool:
        """`send` of a PUBLISH, under `packet_id` and with `dup` whatever its own: a message
        an outbox just took goes out under the packet id it gave, without a PUBLISH built to
        carry it (outbox.offer; building one cost about 5 % of a QoS 1 message's work)."""
        version = self.version
        assert version is not None, "nothing is sent before CONNECT"
        if self.ended:
            return True  # as a write to a socket gone: the session keeps what it holds
        if self.client_alias_maximum:
            aliases = len(self._out_aliases)  # a new one is forgotten if this is not sent
            aliased = self._aliased(packet)
        else:  # no aliases (every 3.1.1 client): none learnt, none to forget
            aliases, aliased = 0, packet
        try:
            data = encode_publish(aliased, version is _V5, packet_id, dup)
        except Exception:
            self._unlearn_alias(aliases)
            raise
        limit = self.client_max_packet_size
        if limit and len(data) > limit:
            self._unlearn_alias(aliases)
            if aliased is packet:
                return False
            # The alias is ours to add: a new one adds its property to the whole topic,
            # and one already set can be longer than a short topic. The message goes
            # with its topic and no alias if that fits (MQTT-3.1.2-25 discards only a
            # message too large to send).
            data = encode_publish(packet, version is _V5, packet_id, dup)
            if len(data) > limit:
                return False
        self._out.append(data)
        return True

    def fits(self, packet: Publish) -> bool:
        """Whether `packet` fits the client's Maximum Packet Size without a topic alias, so
        that `send_publish` sends it, with an alias or without (one that fits only with an
        alias set before is taken for too large). Encodes it: for the rare caller that must
        know before it sends (a share group's QoS 0 copy, `Delivery._hand`)."""
        limit = self.client_max_packet_size
        if not limit:  # most clients: nothing to encode
            return True
        version = self.version
        assert version is not None, "nothing is sent before CONNECT"
        return len(encode_publish(packet, version is _V5, packet.packet_id, False)) <= limit

    def _send_other(self, packet: Packet, version: ProtocolVersion) -> None:
        """Any packet but a PUBLISH: one over the client's limit goes without its properties."""
        if isinstance(packet, Puback):
            self._finished(packet.packet_id, qos2=False)
        elif isinstance(packet, Pubcomp) or (
            isinstance(packet, Pubrec) and packet.reason >= ReasonCode.UNSPECIFIED_ERROR
        ):
            self._finished(packet.packet_id, qos2=True)
        self._out.append(self._encoded(packet, version))
        if type(packet) is Disconnect:
            self.ended = True

    def sent_size(self, packet: Packet) -> int:
        """The bytes `packet` (not a PUBLISH) goes out in (`_send_other`)."""
        version = self.version
        assert version is not None, "nothing is sent before CONNECT"
        return len(self._encoded(packet, version))

    def _encoded(self, packet: Packet, version: ProtocolVersion) -> bytes:
        """`packet` (not a PUBLISH) as it goes out: over the client's Maximum Packet Size,
        without the properties it may go without."""
        data = encode(packet, version)
        limit = self.client_max_packet_size
        if limit and len(data) > limit:
            data = encode(_shortened(packet), version)
        return data

    def acknowledge(self, kind: type[Puback | Pubrec | Pubrel | Pubcomp], packet_id: int) -> None:
        """`send(kind(packet_id))`, a success, for the path every QoS 1 and 2 message takes:
        the same bytes without the packet object."""
        if self.ended:
            return
        head, finishes = _SHORT_ACKS[kind]
        if 0 < self.client_max_packet_size < _SHORT_ACK_SIZE:
            assert self.version is not None, "nothing is sent before CONNECT"
            self._send_other(kind(packet_id), self.version)  # a client too small for any
            return
        if finishes and (self._unanswered or self._open_qos2):  # v5's counts; 3.1.1 has none
            self._finished(packet_id, qos2=kind is Pubcomp)
        self._out.append(head + packet_id.to_bytes(2, "big"))

    def _finished(self, packet_id: int, *, qos2: bool) -> None:
        """A PUBLISH from the client is answered: it no longer counts against our Receive
        Maximum. A QoS 2 one only if it was counted: a PUBCOMP also answers a PUBREL for a
        packet id this connection never took (0x92, or one from before a reconnect), and
        must not free a place that a PUBLISH still holds (MQTT 5.0 §3.3.4)."""
        if qos2:
            open_qos2 = self._open_qos2
            if not open_qos2 or packet_id not in open_qos2:
                return
            open_qos2.remove(packet_id)
        self._unanswered = max(0, self._unanswered - 1)

    def _unlearn_alias(self, aliases: int) -> None:
        """A PUBLISH that set a new alias is not sent: the client never learns the alias, so
        the next PUBLISH of its topic must set it again (there were `aliases` before)."""
        if len(self._out_aliases) > aliases:
            self._out_aliases.popitem()

    def _aliased(self, packet: Publish) -> Publish:
        """Topic aliases to the client (MQTT 5.0 §3.3.2.3.4): the first PUBLISH of a topic
        sets one while there is room; later ones send the alias and an empty topic."""
        topic = packet.topic
        alias = self._out_aliases.get(topic)
        if alias is None:
            if len(self._out_aliases) >= self.client_alias_maximum:
                return packet
            alias = self._out_aliases[topic] = len(self._out_aliases) + 1
        else:
            topic = ""
        properties = packet.properties + Properties.build(topic_alias=alias)
        return new_publish(
            topic,
            packet.payload,
            packet.qos,
            packet.retain,
            packet.dup,
            packet.packet_id,
            properties,
        )

    def refuse(self, reason: ReasonCode) -> None:
        """Take back the CONNACK still waiting here (and what followed it, none of it sent)
        for one refusing the CONNECT with `reason`: its record was refused (recording.py)."""
        version = self.version
        assert version is not None
        assert reason >= ReasonCode.UNSPECIFIED_ERROR
        self._out = [encode(Connack(reason=reason), version)]
        self.accepted = False
        self.ended = True

    def data_to_send(self) -> list[bytes]:
        out, self._out = self._out, []
        return out

    def data_to_write(self) -> bytes:
        """`data_to_send` joined, and counted as sent (`bytes_sent`): what the edge writes.
        Joined here as asyncio's `writelines` would join it, so the count is one `len`: a
        sum of the pieces' lengths cost about 4,000 instructions per write of ten."""
        out, self._out = self._out, []
        data = b"".join(out)
        self.bytes_sent += len(data)
        self.packets_sent += len(out)
        return data

    @property
    def packets_received(self) -> int:
        """The packets read from the client so far, CONNECT included."""
        return self._reader.frames_read

    @property
    def pending(self) -> bool:
        return bool(self._out)

    # -- closing ---------------------------------------------------------------------------------

    def closing(self, error: ProtocolViolation) -> tuple[bytes, str]:
        """What to send before closing for `error`, and what the client is told by it, for
        the log. Before a CONNACK: a CONNACK with the reason when the version allows one (v5
        always; 3.1.1, as its return code, for a bad protocol level or client id, 3.1.1
        §3.2.2.3). After it: a v5 DISCONNECT with the reason; in 3.1.1 nothing, the
        connection is just closed (3.1.1 §4.8)."""
        reason = reason_for(error)
        self.ended = True
        if not self.accepted:
            if self.version is ProtocolVersion.V5:
                return encode(Connack(reason=reason), ProtocolVersion.V5), f"CONNACK {reason:#04x}"
            if isinstance(error, (UnsupportedProtocolVersion, ClientIdNotValid)):
                code = connect_return_code(reason)
                told = f"CONNACK return code {code:#04x}"
                return encode(Connack(reason=reason), ProtocolVersion.V311), told
            return b"", "nothing sent"
        if self.version is ProtocolVersion.V5:
            return encode(Disconnect(reason), ProtocolVersion.V5), f"DISCONNECT {reason:#04x}"
        return b"", "nothing sent"


def _shortened(packet: Packet) -> Packet:
    """An ack or DISCONNECT without its properties (Reason String, User Properties), which the
    client's Maximum Packet Size lets us drop (MQTT 5.0 §3.1.2.25). A CONNACK keeps what the
    client needs (its assigned id, the server's limits) and loses what it may go without: the
    same two, Response Information, which a server may always leave out (§3.2.2.3.15;
    it holds the client id, so a long id and a small limit made a CONNACK over it), and the
    availabilities, which say what their absence says."""
    if isinstance(packet, (Puback, Pubrec, Pubrel, Pubcomp, Suback, Unsuback, Disconnect)):
        return replace(packet, properties=EMPTY)
    if isinstance(packet, Connack):
        return replace(packet, properties=packet.properties.without(*_CONNACK_OPTIONAL))
    return packet


def _built(packet: Incoming) -> Packet:
    """`packet` as `decode` gives it: a `ShortAck` built."""
    if isinstance(packet, tuple):
        kind, packet_id = packet
        return kind(packet_id)
    return packet


def _other_protocol(frame: Frame) -> str | None:
    """What a first frame that is the start of TLS or HTTP is, in words; None otherwise. No
    CONNECT begins so (its first byte is 0x10), so no client of MQTT is turned away by it."""
    kind, flags, body = frame
    if len(body) >= 0x80:  # a length of more than one byte: neither starts so
        return None
    start = bytes((kind << 4 | flags, len(body))) + bytes(body[:8])
    if start.startswith(_TLS_RECORD):
        return (
            "a TLS handshake, not MQTT: this listener has no TLS (a client with TLS on the "
            "plain port?)"
        )
    if start.startswith(_HTTP_METHODS):
        return _HTTP_REQUEST
    return None
