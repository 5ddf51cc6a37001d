"""Reason codes, the one error map, and the shape of the boxmq.mqtt package (exports, imports)."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

import mqtt5
import pytest

import boxmq.mqtt
from boxmq.errors import (
    BoxMQError,
    InvalidTopic,
    MalformedPacket,
    MessageTooLarge,
    MetadataTooLong,
    NotAllowed,
    PacketTooLarge,
    ProtocolViolation,
    ResourceConstraint,
    StoreFailed,
    StoreFull,
)
from boxmq.mqtt.errors import (
    ClientIdNotValid,
    ProtocolError,
    TopicAliasInvalid,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from boxmq.mqtt.framing import PacketType
from boxmq.mqtt.reasons import (
    ALLOWED_REASONS,
    ConnectReturnCode,
    ReasonCode,
    connect_return_code,
    reason_for,
    reason_from_connect_return_code,
    reason_from_v311_suback,
    reason_in,
    v311_suback_code,
)

R = ReasonCode


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (MalformedPacket("x"), R.MALFORMED_PACKET),
        (ProtocolError("x"), R.PROTOCOL_ERROR),
        (TopicNameInvalid("x"), R.TOPIC_NAME_INVALID),
        (TopicAliasInvalid("x"), R.TOPIC_ALIAS_INVALID),
        (UnsupportedProtocolVersion(3), R.UNSUPPORTED_PROTOCOL_VERSION),
        (ClientIdNotValid("x"), R.CLIENT_IDENTIFIER_NOT_VALID),
        (PacketTooLarge("x"), R.PACKET_TOO_LARGE),
        (ProtocolViolation("x"), R.PROTOCOL_ERROR),
        (NotAllowed("x"), R.NOT_AUTHORIZED),
        (ResourceConstraint("x"), R.QUOTA_EXCEEDED),
        (BoxMQError("x"), R.UNSPECIFIED_ERROR),
        (InvalidTopic("x"), R.UNSPECIFIED_ERROR),
        (MetadataTooLong("x"), R.TOPIC_NAME_INVALID),  # a topic too long to store
        (RuntimeError("x"), R.UNSPECIFIED_ERROR),
    ],
    ids=lambda v: type(v).__name__,
)
def test_each_error_maps_to_the_code_the_server_sends(
    error: BaseException, reason: ReasonCode
) -> None:
    assert reason_for(error) is reason


@pytest.mark.parametrize(
    ("kind", "error", "reason"),
    [
        (PacketType.PUBREC, MessageTooLarge("x"), R.QUOTA_EXCEEDED),  # not 0x95
        (PacketType.PUBACK, PacketTooLarge("x"), R.QUOTA_EXCEEDED),
        (PacketType.PUBREC, ResourceConstraint("x"), R.QUOTA_EXCEEDED),
        (PacketType.PUBACK, MetadataTooLong("x"), R.TOPIC_NAME_INVALID),
        (PacketType.PUBACK, NotAllowed("x"), R.NOT_AUTHORIZED),
        (PacketType.UNSUBACK, StoreFull(OSError(28, "full")), R.UNSPECIFIED_ERROR),  # not 0x97
        (PacketType.UNSUBACK, StoreFailed(OSError(5, "EIO")), R.UNSPECIFIED_ERROR),
        (PacketType.SUBACK, StoreFull(OSError(28, "full")), R.QUOTA_EXCEEDED),
        (PacketType.DISCONNECT, MessageTooLarge("x"), R.PACKET_TOO_LARGE),
    ],
    ids=lambda v: v.name if isinstance(v, PacketType) else type(v).__name__,
)
def test_an_acknowledgement_carries_only_its_own_reason_codes(
    kind: PacketType, error: BaseException, reason: ReasonCode
) -> None:
    """MQTT-3.4.2-1, MQTT-3.5.2-1, MQTT-3.11.3-2: the nearest code the packet has, else 0x80."""
    assert reason_in(kind, error) is reason
    assert reason in ALLOWED_REASONS[kind]


@pytest.mark.parametrize(
    "error",
    [
        MalformedPacket("x"),
        ProtocolError("x"),
        TopicNameInvalid("x"),
        TopicAliasInvalid("x"),
        PacketTooLarge("x"),
        MessageTooLarge("x"),
        ProtocolViolation("x"),
        NotAllowed("x"),
        ResourceConstraint("x"),
        StoreFull(OSError(28, "full")),
        StoreFailed(OSError(5, "EIO")),
    ],
    ids=lambda v: type(v).__name__,
)
def test_an_error_closing_a_connection_gives_a_code_of_disconnect_and_connack(
    error: BaseException,
) -> None:
    """MQTT-3.14.2-1, MQTT-3.2.2-8: a connection closed for an error is told with a code of
    DISCONNECT's table once accepted, of CONNACK's before (`Connection.closing`), but for a
    Topic Alias, which only a PUBLISH after the CONNACK has. (The CONNECT's own errors, a
    protocol version or a client id, give CONNACK-only codes, and are not listed here.)"""
    reason = reason_for(error)
    assert reason in ALLOWED_REASONS[PacketType.DISCONNECT]
    if not isinstance(error, TopicAliasInvalid):
        assert reason in ALLOWED_REASONS[PacketType.CONNACK]


def test_the_most_specific_mapped_class_wins() -> None:
    class Unlisted(TopicNameInvalid):
        pass

    assert reason_for(Unlisted("x")) is R.TOPIC_NAME_INVALID


def test_every_codec_error_is_in_the_one_protocol_error_family() -> None:
    for cls in (ProtocolError, TopicNameInvalid, TopicAliasInvalid, ClientIdNotValid):
        assert issubclass(cls, MalformedPacket)
    assert issubclass(UnsupportedProtocolVersion, MalformedPacket)
    assert UnsupportedProtocolVersion(6).level == 6


def test_reason_codes_are_the_spec_table() -> None:
    # MQTT 5.0 §2.4, Table 2-6: 43 distinct values, some with two or three names.
    assert len({int(code) for code in ReasonCode}) == 43
    assert {R.NORMAL_DISCONNECTION, R.SUCCESS, R.GRANTED_QOS_0} == {R(0)}  # aliases
    assert (R.MALFORMED_PACKET, R.PROTOCOL_ERROR, R.PACKET_TOO_LARGE) == (0x81, 0x82, 0x95)
    assert (R.UNSUPPORTED_PROTOCOL_VERSION, R.CLIENT_IDENTIFIER_NOT_VALID) == (0x84, 0x85)
    assert int(R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED) == 0xA2


@pytest.mark.parametrize("code", list(ConnectReturnCode))
def test_311_connack_return_codes_map_both_ways(code: ConnectReturnCode) -> None:
    assert connect_return_code(reason_from_connect_return_code(code)) is code


def test_v5_only_refusals_become_server_unavailable_in_311() -> None:
    assert connect_return_code(R.QUOTA_EXCEEDED) is ConnectReturnCode.SERVER_UNAVAILABLE
    with pytest.raises(MalformedPacket):
        reason_from_connect_return_code(6)


def test_311_suback_knows_granted_qos_and_failure() -> None:
    assert [v311_suback_code(r) for r in (R.GRANTED_QOS_0, R.GRANTED_QOS_2, R.NOT_AUTHORIZED)] == [
        0,
        2,
        0x80,
    ]
    assert reason_from_v311_suback(0x80) is R.UNSPECIFIED_ERROR
    assert reason_from_v311_suback(1) is R.GRANTED_QOS_1
    with pytest.raises(MalformedPacket):
        reason_from_v311_suback(0x87)


@pytest.mark.parametrize(
    ("kind", "family"),
    [
        (PacketType.CONNACK, mqtt5.ConnAckReasonCode),
        (PacketType.PUBACK, mqtt5.PubAckReasonCode),
        (PacketType.PUBREC, mqtt5.PubRecReasonCode),
        (PacketType.PUBREL, mqtt5.PubRelReasonCode),
        (PacketType.PUBCOMP, mqtt5.PubCompReasonCode),
        (PacketType.SUBACK, mqtt5.SubAckReasonCode),
        (PacketType.UNSUBACK, mqtt5.UnsubAckReasonCode),
        (PacketType.DISCONNECT, mqtt5.DisconnectReasonCode),
        (PacketType.AUTH, mqtt5.AuthReasonCode),
    ],
)
def test_our_reason_codes_per_packet_match_mqtt5s(kind: PacketType, family: type) -> None:
    theirs_ = {int(getattr(family, name)) for name in dir(family) if name.isupper()}  # pyo3 enums
    assert {int(code) for code in ALLOWED_REASONS[kind]} == theirs_


# --- the package's shape (STYLE.md: sorted complete __all__, sans-IO, future import first) -----

PACKAGE = Path(boxmq.mqtt.__file__).parent
MODULES = sorted(f"boxmq.mqtt.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__")
CODEC = {
    "boxmq.mqtt." + name
    for name in ("errors", "framing", "properties", "reasons", "packets", "codec")
}


@pytest.mark.parametrize("name", ["boxmq.mqtt", *MODULES])
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    # isort style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), not n[0].isupper(), n))
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == name
    }
    assert public <= set(exported)
    for attr in exported:
        assert hasattr(module, attr), attr


@pytest.mark.parametrize("name", sorted(CODEC))
def test_the_codec_is_sans_io(name: str) -> None:
    path = PACKAGE / (name.rsplit(".", 1)[1] + ".py")
    tree = ast.parse(path.read_text())
    first = tree.body[1 if ast.get_docstring(tree) else 0]
    assert isinstance(first, ast.ImportFrom)
    assert first.module == "__future__"
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [node.module]
        for module in names:
            top = module.split(".")[0]
            if top == "boxmq":
                assert module in {"boxmq.errors", "boxmq.model"} or module in CODEC, module
            else:
                assert top in sys.stdlib_module_names, module
                assert top not in {"asyncio", "socket", "time", "threading", "os", "select"}, module
