from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from boxmq.errors import InvalidArgument, InvalidName, MalformedName, MetadataTooLong
from boxmq.java_floats import to_float32
from boxmq.model import (
    TOPIC,
    ConsumerId,
    Envelope,
    MessageClass,
    MessageId,
    Property,
    PropertyType,
    PropertyValue,
)
from boxmq.store.names import (
    LOCK_RESERVE,
    MAX_NAME,
    MAX_OWNER,
    NAME_LIMIT,
    PLAIN_ID,
    Lock,
    _decode,
    _decode_fields,
    check_consumer_name,
    decode,
    decode_lenient,
    distinct_name,
    encode,
    escape_segment,
    folder_segment,
    locked_name,
    may_carry_id,
    plain_name,
    split_lock,
    unescape_segment,
)

SPEC_ID = MessageId("1140429201295000-9262574723")
NASTY = "a.b@c/d:e%f&g=h~i#j k"  # every separator and reserved character at once
T = PropertyType


def envelope(**fields: object) -> Envelope:
    return Envelope(MessageId("id"), **fields)  # type: ignore[arg-type]


# --- the spec's examples and the defaults --------------------------------------------------


def test_spec_example_1_all_fields() -> None:
    """DropboxMQ, Message Filenames, "Example 1: All fields defined": the eight dot-separated
    fields in their order, read and written back as the page prints them."""
    name = "4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello"
    expected = Envelope(
        message_id=SPEC_ID,
        priority=4,
        message_class=MessageClass.TEXT,
        expiration=1140429211295,
        correlation_id="corr1283",
        reply_to="TestQueue1",
        type="XYZType",
        properties=(Property("prop1", T.STRING, "hello"),),
    )
    assert decode(name) == expected
    assert encode(expected) == name


def test_spec_example_2_minimum_fields() -> None:
    """DropboxMQ, Message Filenames, "Example 2: Minimum fields defined": "only the first
    three (JMS Priority, JMS Message Id and Message Class) are required"."""
    name = "4.1140429201295000-9262574723.T"
    expected = Envelope(SPEC_ID, message_class=MessageClass.TEXT)
    assert decode(name) == expected
    assert encode(expected) == name


def test_defaults_are_written_as_the_three_required_fields() -> None:
    """DropboxMQ, Message Filenames, the field table's defaults: priority 4
    (Message.DEFAULT_PRIORITY), message class 'B' (BytesMessage), the rest none."""
    assert encode(envelope()) == "4.id.B"
    assert decode("4.id.B") == envelope()


def test_empty_fields_take_their_defaults() -> None:
    assert decode(".id.") == envelope()
    assert decode(".id..0") == envelope()


@pytest.mark.parametrize("name", ["4.x.T.", "4.x.T....", "4.x.T....."])
def test_trailing_dots_are_allowed(name: str) -> None:
    """DropboxMQ, Message Filenames: "Trailing dots are required if the remaining fields are
    undefined", yet Example 2 has none: both are read, to the same envelope."""
    assert decode(name) == Envelope(MessageId("x"), message_class=MessageClass.TEXT)


def test_properties_as_java_url_encodes_them_keep_dots_and_plus_spaces() -> None:
    """DropboxMQ's producers URL-encode names and values as java.net.URLEncoder does: '.'
    stays as it is (a double always has one) and a space is '+'."""
    value = decode("9.m-1.T..corr1.replyQ.T1.priceD=12.5&hostS=db.example.com&whoS=John+Smith")
    assert value.priority == 9
    assert (value.correlation_id, value.reply_to, value.type) == ("corr1", "replyQ", "T1")
    assert value.user_properties() == {
        "price": 12.5,
        "host": "db.example.com",
        "who": "John Smith",
    }


def test_boxmq_writes_a_plus_so_that_it_reads_back_as_one() -> None:
    name = encode(envelope(properties=(Property("k", T.STRING, "a+b c"),)))
    assert decode(name).user_properties() == {"k": "a+b c"}


def test_a_middle_empty_field_stays() -> None:
    value = Envelope(MessageId("id"), message_class=MessageClass.TEXT, correlation_id="corr")
    assert encode(value) == "4.id.T..corr"
    assert decode("4.id.T.0.corr") == value


def test_an_empty_string_is_written_like_none() -> None:
    name = encode(envelope(correlation_id="", reply_to="", type=""))
    assert name == "4.id.B"
    assert decode(name) == envelope()


def test_properties_keep_their_order_and_duplicates() -> None:
    props = (Property("b", T.INT, 1), Property("a", T.INT, 2), Property("b", T.INT, 3))
    name = encode(envelope(properties=props))
    assert name.endswith(".....bI=1&aI=2&bI=3")
    assert decode(name).properties == props


# --- property types ------------------------------------------------------------------------

RANGES = [(T.BYTE, 8), (T.SHORT, 16), (T.INT, 32), (T.LONG, 64)]


@pytest.mark.parametrize(("kind", "bits"), RANGES)
def test_integer_types_round_trip_at_their_java_limits(kind: PropertyType, bits: int) -> None:
    for value in (-(2 ** (bits - 1)), -1, 0, 2 ** (bits - 1) - 1):
        prop = Property("n", kind, value)
        assert decode(encode(envelope(properties=(prop,)))).properties == (prop,)


@pytest.mark.parametrize(("kind", "bits"), RANGES)
def test_integer_types_refuse_values_outside_their_range(kind: PropertyType, bits: int) -> None:
    for value in (-(2 ** (bits - 1)) - 1, 2 ** (bits - 1)):
        with pytest.raises(InvalidArgument, match="not an int in"):
            encode(envelope(properties=(Property("n", kind, value),)))
        with pytest.raises(MalformedName, match="not an integer"):
            decode(f"4.id.B.....n{kind.value}={value}")


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (T.BOOLEAN, 1),
        (T.BOOLEAN, "true"),
        (T.INT, True),
        (T.INT, 1.0),
        (T.LONG, "1"),
        (T.DOUBLE, "1.5"),
        (T.DOUBLE, False),
        (T.DOUBLE, 10**400),
        (T.FLOAT, 1e39),
        (T.STRING, 1),
    ],
)
def test_a_value_of_the_wrong_python_type_is_refused(kind: PropertyType, value: object) -> None:
    prop = Property("p", kind, value)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="'p'"):
        encode(envelope(properties=(prop,)))


@pytest.mark.parametrize(
    ("kind", "accepted", "refused"), [(T.BOOLEAN, True, 1), (T.INT, 1, True), (T.STRING, "1", 1)]
)
def test_an_encoded_value_does_not_vouch_for_an_equal_one_of_another_type(
    kind: PropertyType, accepted: object, refused: object
) -> None:
    # Encoded properties are remembered; True == 1, so the memory must tell them apart.
    encode(envelope(properties=(Property("p", kind, accepted),)))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="'p'"):
        encode(envelope(properties=(Property("p", kind, refused),)))  # type: ignore[arg-type]


def test_zero_and_negative_zero_keep_their_own_text() -> None:
    # 0.0 == -0.0 (one hash): a remembered text for one must not serve the other.
    for value, text in [(0.0, "0%2E0"), (-0.0, "-0%2E0"), (0.0, "0%2E0")]:
        name = encode(envelope(properties=(Property("z", T.DOUBLE, value),)))
        assert name.endswith(f"zD={text}")
        assert math.copysign(1, decode(name).properties[0].value) == math.copysign(1, value)  # type: ignore[arg-type]


def test_booleans_are_java_words() -> None:
    props = (Property("t", T.BOOLEAN, True), Property("f", T.BOOLEAN, False))
    assert encode(envelope(properties=props)).endswith("tB=true&fB=false")
    assert decode("4.id.B.....xB=TRUE").properties == (Property("x", T.BOOLEAN, True),)


@pytest.mark.parametrize("text", ["yes", "1", "", "on", "true%20", "t"])
def test_a_boolean_other_than_true_is_false_as_java_reads_it(text: str) -> None:
    # Boolean.valueOf: "true" in any case is true, any other text false; the name keeps its
    # priority and its other properties (a topic), as DropboxMQ keeps them.
    name = f"7.id.B.....xB={text}&topicS=a%2Fb"
    assert decode(name) == envelope(
        priority=7,
        properties=(Property("x", T.BOOLEAN, False), Property("topic", T.STRING, "a/b")),
    )


def test_floats_and_doubles_keep_their_exact_value() -> None:
    props = (Property("f", T.FLOAT, 1.5), Property("d", T.DOUBLE, 0.1), Property("i", T.DOUBLE, 3))
    name = encode(envelope(properties=props))
    assert "." not in name.split(".", 7)[-1]  # a float's point is escaped, not a separator
    assert decode(name).properties == props


@pytest.mark.parametrize(
    ("value", "text"), [(math.inf, "Infinity"), (-math.inf, "-Infinity"), (math.nan, "NaN")]
)
def test_special_floats_use_java_spelling(value: float, text: str) -> None:
    name = encode(envelope(properties=(Property("d", T.DOUBLE, value),)))
    assert name.endswith(f"dD={text}")
    [prop] = decode(name).properties
    assert _same_value(prop.value, value)


@pytest.mark.parametrize(
    ("text", "value"), [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)]
)
def test_python_float_spelling_is_accepted(text: str, value: float) -> None:
    [prop] = decode(f"4.id.B.....dD={text}").properties
    assert _same_value(prop.value, value)


def test_a_double_between_blanks_reads_as_java_parses_it() -> None:
    # Double.parseDouble trims every char up to ' ' first; `+1.5` unescaped is ` 1.5`.
    name = "4.id.B.....aD=+1.5&bD=%091.5%20%1F&cD=-2.5+"
    assert [p.value for p in decode(name).properties] == [1.5, 1.5, -2.5]
    with pytest.raises(MalformedName, match="not a number"):
        decode("4.id.B.....aD=%C2%A01.5")  # a no-break space is no blank to Java


def test_a_signed_nan_or_infinity_reads_as_java_parses_it() -> None:
    name = "4.id.B.....aD=%2BNaN&bD=-NaN&cD=%2BInfinity&dD=%20-Infinity%0A"
    a, b, c, d = (p.value for p in decode(name).properties)
    assert (math.isnan(a), math.isnan(b), c, d) == (True, True, math.inf, -math.inf)  # type: ignore[arg-type]
    with pytest.raises(MalformedName, match="not a number"):
        decode("4.id.B.....aD=%2Binf")  # Python's spelling is read as boxmq wrote it, unsigned


def test_a_double_with_javas_type_suffix_reads_as_java_parses_it() -> None:
    name = "4.id.B.....aD=1.5f&bD=-2D&cD=.5d&dD=1e3F%20"
    assert [p.value for p in decode(name).properties] == [1.5, -2.0, 0.5, 1000.0]
    for text in ("NaNd", "Infinityf", "1.5%20f", "1.5ff", "f"):  # as Java refuses them
        with pytest.raises(MalformedName, match="not a number"):
            decode(f"4.id.B.....aD={text}")


def test_a_double_with_a_long_exponent_reads_as_java_parses_it() -> None:
    name = "4.id.B.....aD=1e999999&bD=-1e-999999&cD=1.5e0000003"
    a, b, c = (p.value for p in decode(name).properties)
    assert (a, math.copysign(1, b), b, c) == (math.inf, -1, 0.0, 1500.0)  # type: ignore[arg-type]


def test_a_double_in_javas_hexadecimal_form_reads_as_java_parses_it() -> None:
    name = "4.id.B.....aD=0x1.8p1&bD=-0X1P-1074&cD=0x1p3f&dD=0x1.fffffffffffff8p1023"
    assert [p.value for p in decode(name).properties] == [3.0, -5e-324, 8.0, math.inf]
    for text in ("0x10", "0x1p", "0xp1", "1p3"):  # Java needs the digits and the exponent
        with pytest.raises(MalformedName, match="not a number"):
            decode(f"4.id.B.....aD={text}")


@pytest.mark.parametrize("pair", ["dD=abc", "dD=1.0x", "xQ=1", "S=x", "noequals", "aS=1&"])
def test_malformed_properties_are_refused(pair: str) -> None:
    with pytest.raises(MalformedName):
        decode(f"4.id.B.....{pair}")


# --- escaping ------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["message_id", "correlation_id", "reply_to", "type"])
def test_reserved_characters_round_trip_in_every_text_field(field: str) -> None:
    value = Envelope(**{"message_id": MessageId("id"), field: NASTY})  # type: ignore[arg-type]
    name = encode(value)
    assert decode(name) == value
    assert not set(name) & set("/:@~#")


def test_reserved_characters_round_trip_in_property_names_and_values() -> None:
    value = envelope(properties=(Property(NASTY, T.STRING, NASTY), Property(NASTY, T.LONG, -5)))
    name = encode(value)
    assert decode(name) == value
    assert not set(name) & set("/:@~#")


@pytest.mark.parametrize("name", ["4.a%zz.B", "4.a%.B", "4.%FF.B", "4.id.B.....p%S=x"])
def test_bad_percent_escapes_are_malformed(name: str) -> None:
    with pytest.raises(MalformedName, match="escape"):
        decode(name)


# --- invalid envelopes and length ----------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        Envelope(MessageId("")),
        envelope(priority=2**31),
        envelope(priority=-(2**31) - 1),
        envelope(expiration=-1),
        envelope(properties=(Property("", T.STRING, "x"),)),
        Envelope(MessageId("\udcff")),
    ],
)
def test_invalid_envelopes_are_refused(value: Envelope) -> None:
    with pytest.raises(InvalidArgument):
        encode(value)


def test_a_plus_sign_reads_as_java_parses_it() -> None:
    # Integer.parseInt("+4") is 4; in a property value a '+' is a space, so a sign is %2B.
    assert decode("+7.id.B.+1700000000000....yY=%2B1&iI=%2B0&lL=%2B9") == envelope(
        priority=7,
        expiration=1_700_000_000_000,
        properties=(Property("y", T.BYTE, 1), Property("i", T.INT, 0), Property("l", T.LONG, 9)),
    )
    with pytest.raises(MalformedName, match="not an integer"):
        decode("+-7.id.B")


def test_digits_of_any_script_and_any_leading_zeros_read_as_java_parses_them() -> None:
    # Character.digit, which parseInt and parseLong use, reads every script's decimal digits
    # (Unicode's Nd) in UTF-16: one outside the BMP is two chars, neither a digit.
    arabic_indic_3, fullwidth_2 = "\u0663", "\uff12"
    name = f"{arabic_indic_3}.id.B.{'0' * 30}9....iI=%D9%A3{fullwidth_2}&lL=-{'0' * 40}1"
    assert decode(name) == envelope(
        priority=3,
        expiration=9,
        properties=(Property("i", T.INT, 32), Property("l", T.LONG, -1)),
    )
    for bad in ("\U0001d7d1", "\u00b2", "\u2163", "3\u00a0", "1_000"):  # 3 outside, ², IV
        with pytest.raises(MalformedName, match="not an integer"):
            decode(f"{bad}.id.B")


def test_priority_limits_round_trip() -> None:
    """DropboxMQ, field 1: "DropboxMQ supports priority values from -2^31 to 2^31-1"."""
    for priority in (-(2**31), 0, 9, 2**31 - 1):
        assert decode(encode(envelope(priority=priority))) == envelope(priority=priority)


def test_too_long_metadata_says_how_long_the_limit_and_what_to_shorten() -> None:
    with pytest.raises(MetadataTooLong) as caught:
        encode(envelope(correlation_id="ü" * 40))
    message = str(caught.value)
    assert f"{MAX_NAME}-byte limit" in message
    assert "a 248-byte file name" in message
    assert "shorten the correlation id (240 bytes encoded)" in message


def test_a_topic_too_long_is_named_with_its_escaped_length_and_the_room_left() -> None:
    """A topic too long for the name (the longest of its properties): the message said
    "shorten the properties (N bytes encoded)", which reached an MQTT PUBACK's reason string
    and the CLI as it was, of a topic alone."""

    def on(topic: str, *others: Property) -> Envelope:
        return envelope(properties=(Property(TOPIC, PropertyType.STRING, topic), *others))

    qos = Property("q", PropertyType.INT, 1)  # what a copy always has (its QoS)
    room = MAX_NAME - len(encode(on("", qos)))
    with pytest.raises(MetadataTooLong) as caught:
        encode(on("é" * 40, qos))
    message = str(caught.value)
    assert "the topic is too long" in message
    assert f"it takes 240 bytes, and at most {room} fit" in message
    assert f"{MAX_NAME}-byte limit" in message
    assert "shorten the properties" not in message
    assert len(encode(on("t" * room, qos))) == MAX_NAME  # the room it names is all there is
    with pytest.raises(MetadataTooLong, match=f"it takes {room + 1} bytes, and at most {room}"):
        encode(on("t" * (room + 1), qos))
    # A short topic, with other properties that make the name too long: those are named.
    with pytest.raises(MetadataTooLong, match=r"shorten the properties \(") as caught:
        encode(on("t", *(Property(f"p{n}", PropertyType.STRING, "v" * 20) for n in range(8))))
    assert "the topic" not in str(caught.value)


def test_the_longest_allowed_name_is_accepted() -> None:
    name = encode(Envelope(MessageId("x" * (MAX_NAME - 4))))
    assert len(name) == MAX_NAME
    with pytest.raises(MetadataTooLong):
        encode(Envelope(MessageId("x" * (MAX_NAME - 3))))


# --- names that are not in the encoding ----------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["report.csv", "hello", "a.b.c.d.e.f.g.h.i", "4..T", "x.id.T", "4.id.Q", "4.id.T.soon"],
)
def test_foreign_names_decode_leniently_to_their_whole_name(name: str) -> None:
    value, reason = decode_lenient(name)
    assert value == Envelope(MessageId(name))
    assert reason
    with pytest.raises(MalformedName, match=re.escape(reason)):
        decode(name)


def test_lenient_decoding_of_a_good_name_has_no_reason() -> None:
    assert decode_lenient("4.id.T") == (envelope(message_class=MessageClass.TEXT), None)


def test_an_undecodable_file_system_name_is_malformed() -> None:
    value, reason = decode_lenient("4.\udcff.T")  # how os.listdir() shows a non-UTF-8 byte
    assert value.message_id == "4.\udcff.T"
    assert reason == "the name is not valid UTF-8"


# --- properties (hypothesis) ---------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
OPTIONAL = st.none() | TEXT.filter(bool)


def _same_value(a: PropertyValue, b: PropertyValue) -> bool:
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return both_nan or (a == b and type(a) is type(b))


def _values(kind: PropertyType) -> st.SearchStrategy[PropertyValue]:
    bits = dict(RANGES).get(kind)
    if bits is not None:
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    strategies: dict[PropertyType, st.SearchStrategy[PropertyValue]] = {
        T.BOOLEAN: st.booleans(),
        T.FLOAT: st.floats(width=32),
        T.DOUBLE: st.floats(),
        T.STRING: TEXT,
    }
    return strategies[kind]


PROPERTIES = st.sampled_from(PropertyType).flatmap(
    lambda kind: st.builds(Property, TEXT.filter(bool), st.just(kind), _values(kind))
)
ENVELOPES = st.builds(
    Envelope,
    message_id=TEXT.filter(bool).map(MessageId),
    priority=st.integers(-(2**31), 2**31 - 1),
    message_class=st.sampled_from(MessageClass),
    expiration=st.integers(0, 2**63 - 1) | st.just(0),
    correlation_id=OPTIONAL,
    reply_to=OPTIONAL,
    type=OPTIONAL,
    properties=st.lists(PROPERTIES, max_size=3).map(tuple),
)


@given(ENVELOPES)
def test_decode_inverts_encode(value: Envelope) -> None:
    try:
        name = encode(value)
    except MetadataTooLong:
        reject()
    assert len(name.encode()) <= MAX_NAME
    assert not set(name) & {"/", "\0", ":", "@"}
    assert _without_nan(decode(name)) == _without_nan(value)


def _without_nan(value: Envelope) -> Envelope:
    """NaN != NaN, so equal envelopes with a NaN property would not compare equal. A float
    (F) reads back as the same Java float, not always as the same double: 68268928.0 is
    written 6.826893E7, as Java's Float.toString writes it, and read as 68268930.0."""
    return replace(value, properties=tuple(_comparable(p) for p in value.properties))


def _comparable(prop: Property) -> Property:
    if isinstance(prop.value, float) and math.isnan(prop.value):
        return replace(prop, value="<NaN>")
    if prop.type is T.FLOAT and isinstance(prop.value, float):
        return replace(prop, value=to_float32(prop.value))
    return prop


NAMEISH = st.text(st.sampled_from("0123456789-.%&=@~+eE TBSDFLIYHnaINf\u00e9"), max_size=40)


@given(st.text().filter(lambda s: "/" not in s and "\0" not in s) | NAMEISH)
def test_lenient_decoding_never_raises(name: str) -> None:
    value, reason = decode_lenient(name)
    if reason is None:
        assert _without_nan(decode(name)) == _without_nan(value)
    else:
        assert value == Envelope(MessageId(name))


@given(st.text().filter(lambda s: "/" not in s and "\0" not in s and s) | NAMEISH.filter(bool))
def test_a_distinct_name_is_the_same_message_under_another_id(name: str) -> None:
    """A reused name's second file is told apart by its id, `<id>~2` (a foreign name: its whole
    name, so the same), and keeps the rest of its metadata."""
    first, second = distinct_name(name, 2), distinct_name(name, 3)
    assert len({name, first, second}) == 3
    assert "/" not in first
    assert "\0" not in first
    value, _ = decode_lenient(name)
    copy, _ = decode_lenient(first)
    assert copy.message_id == f"{value.message_id}~2"
    if first != f"{name}~2":  # in the encoding: every other field as it was
        assert _without_nan(replace(copy, message_id=value.message_id)) == _without_nan(value)


def test_a_name_that_is_not_utf8_gains_the_suffix() -> None:
    name = os.fsdecode(b"4.rapport-\xe9t\xe9.T")
    assert distinct_name(name, 2) == name + "~2"
    assert decode_lenient(name + "~2")[0].message_id == name + "~2"


def test_an_encoded_name_takes_the_suffix_in_its_id() -> None:
    assert distinct_name("7.job-1.T.....kS=v", 2) == "7.job-1%7E2.T.....kS=v"


def _encoded(value: Envelope) -> str:
    try:
        return encode(value)
    except MetadataTooLong:
        return ""


def _decoded_or_error(decoder: Callable[[str], Envelope], name: str) -> Envelope | str:
    try:
        return _without_nan(decoder(name))
    except MalformedName:
        return "malformed"


def _properties_field(props: list[Property]) -> str:
    try:
        name = encode(Envelope(MessageId("x"), properties=tuple(props)))
    except MetadataTooLong:
        return ""
    return name.split(".", 7)[7] if props else ""


# Names in the shape a topic publish writes, with edge cases in the fields around them.
PUBLISHED = st.builds(
    lambda priority, stamp, expiration, props: f"{priority}.{stamp}-1.B.{expiration}....{props}",
    st.sampled_from(["4", "-1", "0", "2147483648", "007"]),
    st.integers(0, 10**16),
    st.sampled_from(["", "0", "1", "9223372036854775807", "9223372036854775808", "01"]),
    st.lists(PROPERTIES, max_size=3).map(_properties_field)
    | st.text(st.sampled_from("abxBYISDF=&%2E0-_1"), max_size=24),
)


@given(st.one_of(ENVELOPES.map(_encoded), PUBLISHED, NAMEISH).filter(bool))
def test_the_fast_paths_decode_as_the_general_one_does(name: str) -> None:
    assert _decoded_or_error(_decode, name) == _decoded_or_error(_decode_fields, name)


@given(
    st.one_of(ENVELOPES.map(_encoded), PUBLISHED, NAMEISH, st.text()).filter(
        lambda s: s and "/" not in s and "\0" not in s
    ),
    st.text(min_size=1),
)
def test_may_carry_id_never_passes_by_a_name_of_the_message(name: str, other: str) -> None:
    """What lets a look-up by id (Queue.find) decode only a few names of a folder: it may
    say yes to another message's name, never no to its own, whatever the name holds."""
    value, _ = decode_lenient(name)
    assert may_carry_id(name, value.message_id)
    if may_carry_id(name, other) is False:
        assert value.message_id != other


def test_may_carry_id_says_no_to_the_names_of_other_plain_ids() -> None:
    assert not may_carry_id("4.1796068827039000-2945524166.B", "1796068827039000-2945524167")
    assert not may_carry_id("4.id.B.0....topic=news%2Fa", "other")  # '%' in a property only
    assert may_carry_id("4.odd%2Eid.B", "other")  # escaped: decode it to know


# --- locks ---------------------------------------------------------------------------------

OWNERS = st.text(st.characters(codec="utf-8", exclude_characters="/\0"), max_size=20)
TOKENS = st.text(st.sampled_from("abcXYZ019-"), max_size=30)


@given(
    name=st.text(min_size=1),
    owner=OWNERS,
    deadline=st.integers(0, 10**15 - 1),
    token=TOKENS,
)
def test_a_lock_suffix_splits_off_again(name: str, owner: str, deadline: int, token: str) -> None:
    try:
        lock = Lock(check_consumer_name(owner), deadline, token)
    except InvalidName:
        reject()
    locked = locked_name(name, lock)
    assert split_lock(locked) == (name, lock)
    assert len(locked.encode()) - len(name.encode()) <= LOCK_RESERVE


def test_the_largest_lock_suffix_fits_the_reserve() -> None:
    lock = Lock(ConsumerId("c" * MAX_OWNER), 10**15 - 1, "t" * 30)
    assert len(locked_name("", lock)) == LOCK_RESERVE
    assert MAX_NAME + LOCK_RESERVE == NAME_LIMIT


def test_a_name_with_at_signs_survives_locking() -> None:
    lock = Lock(ConsumerId("user@host"), 1700000000000, "p-1")
    name = "job@2024@x.csv"
    locked = locked_name(name, lock)
    assert locked == "job@2024@x.csv@user%40host@1700000000000@p-1"
    assert split_lock(locked) == (name, lock)


def test_a_lock_without_process_token() -> None:
    lock = Lock(ConsumerId("c1"), 5, "")
    assert split_lock(locked_name("4.id.T", lock)) == ("4.id.T", lock)


@pytest.mark.parametrize(
    "name",
    [
        "4.id.T",
        "a@b",
        "a@b@c",
        "a@c1@soon@tok",
        "a@c1@12@tok!",
        "a@c1@12@" + "t" * 31,
        "a@c1@1234567890123456@t",
        "a@@12@t",
        "@c1@12@t",
        "a@c%zz@12@t",
        "a@c.1@12@t",
        "a@%2F@12@t",
        "a@c1@١٢@t",
    ],
)
def test_a_malformed_suffix_is_no_lock(name: str) -> None:
    assert split_lock(name) == (name, None)


@pytest.mark.parametrize(
    ("owner", "token", "deadline"),
    [
        ("c" * (MAX_OWNER + 1), "", 0),
        ("é" * 7, "", 0),
        ("", "", 0),
        ("a/b", "", 0),
        ("c", "a_b", 0),
        ("c", "t" * 31, 0),
    ],
)
def test_bad_locks_are_refused(owner: str, token: str, deadline: int) -> None:
    with pytest.raises(InvalidName):
        locked_name("4.id.T", Lock(ConsumerId(owner), deadline, token))


@pytest.mark.parametrize("deadline", [-1, 10**15])
def test_a_deadline_must_fit_fifteen_digits(deadline: int) -> None:
    with pytest.raises(InvalidArgument, match="deadline"):
        locked_name("4.id.T", Lock(ConsumerId("c"), deadline, ""))


def test_consumer_names() -> None:
    assert check_consumer_name("alice@example.org") == "alice@example.org"
    assert check_consumer_name("c" * MAX_OWNER) == "c" * MAX_OWNER
    for bad in ("", "a\0b", "a/b", "c" * (MAX_OWNER + 1), "\u00e9" * 7):
        with pytest.raises(InvalidName):
            check_consumer_name(bad)


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("", "is empty"),
        ("a/b", "contains '/'"),
        ("a\0b", "contains NUL"),
        ("\u00e9" * 7, "encodes to 42 bytes, over the 40-byte limit"),
    ],
)
def test_a_refused_consumer_name_says_what_a_name_may_be(name: str, wrong: str) -> None:
    """`boxmq get --consumer ''` said the name "is empty or contains NUL or '/'": what was
    wrong, not what to give instead."""
    with pytest.raises(InvalidName) as refused:
        check_consumer_name(name)
    assert str(refused.value) == (
        f"consumer name {name!r} {wrong}: a name goes into the lock's file name, so give 1 to "
        "40 bytes once percent-encoded (A-Z a-z 0-9 - _ are 1 byte each, any other character "
        "3 per UTF-8 byte), without '/' or NUL, such as 'worker-1'"
    )


# --- directory segments --------------------------------------------------------------------


@pytest.mark.parametrize("text", ["..", ".", ".hidden", "a/b", "a:b", "%2E", "...", "a b~c.d"])
def test_any_destination_becomes_one_safe_directory_name(text: str) -> None:
    """DropboxMQ, The Root: "Each individual dropbox has its own directory directly in the
    root directory", named as the destination: whatever the name, one directory of the
    root's own, never a path into another or a hidden one."""
    segment = escape_segment(text)
    assert segment not in (".", "..")
    assert not segment.startswith(".")
    assert not set(segment) & {"/", ":", "\0"}
    assert unescape_segment(segment) == text


def test_plain_destination_names_are_kept_as_they_are() -> None:
    assert escape_segment("orders.eu-west_1~") == "orders.eu-west_1~"


@pytest.mark.parametrize("text", ["", "a\0b", "x" * (NAME_LIMIT + 1), "é" * 43, "\udcff"])
def test_unstorable_destination_names_are_refused(text: str) -> None:
    with pytest.raises(InvalidName):
        escape_segment(text)


@pytest.mark.parametrize("segment", ["50%off", "%FF"])
def test_a_directory_that_is_not_percent_encoded_utf8_is_refused(segment: str) -> None:
    with pytest.raises(InvalidName):
        unescape_segment(segment)


@given(st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1))
def test_segments_round_trip(text: str) -> None:
    try:
        segment = escape_segment(text)
    except InvalidName:
        reject()
    assert unescape_segment(segment) == text
    assert "/" not in segment
    assert not segment.startswith(".")
    assert len(segment.encode()) <= NAME_LIMIT


@given(
    st.integers(-(2**31), 2**31 - 1),
    st.from_regex(PLAIN_ID, fullmatch=True),
    st.sampled_from(MessageClass),
    st.integers(0, 2**63 - 1),
)
def test_plain_name_is_what_encode_writes(
    priority: int, message_id: str, message_class: MessageClass, expiration: int
) -> None:
    envelope = Envelope(MessageId(message_id), priority, message_class, expiration)
    name = plain_name(priority, message_id, message_class, expiration)
    assert name == encode(envelope)
    assert decode(name) == envelope


def test_a_lock_suffix_is_checked_for_each_owner_and_token_even_when_cached() -> None:
    assert locked_name("4.a.B", Lock(ConsumerId("w"), 5, "t")).endswith("@w@5@t")
    with pytest.raises(InvalidName):
        locked_name("4.a.B", Lock(ConsumerId("w"), 5, "bad token"))
    with pytest.raises(InvalidName):
        locked_name("4.a.B", Lock(ConsumerId("w/x"), 5, "t"))
    with pytest.raises(InvalidArgument):
        locked_name("4.a.B", Lock(ConsumerId("w"), -1, "t"))


@given(ENVELOPES, PROPERTIES)
def test_setting_a_property_keeps_every_other_field(value: Envelope, prop: Property) -> None:
    # with_property builds the Envelope field by field; a field it forgot would fall back to
    # its default here.
    kept = tuple(p for p in value.properties if p.name != prop.name)
    assert value.with_property(prop.name, prop.type, prop.value) == replace(
        value, properties=(*kept, prop)
    )
    assert value.without_property(prop.name) == replace(value, properties=kept)


@pytest.mark.parametrize("escapes", ["%FF", "%ED%A0%80", "a%C3"])
def test_a_property_whose_escapes_are_not_utf8_reads_as_surrogate_escapes_and_writes_back(
    escapes: str,
) -> None:
    # A script's bytes: the rest of the name still reads, and a rename keeps them as they were.
    name = f"4.id.T.....okS=1&k{escapes}S=v{escapes}"
    read = decode(name)
    [ok, bad] = read.properties
    assert ok == Property("ok", T.STRING, "1")
    raw = bytes.fromhex(escapes.replace("%", "").replace("a", "61"))
    assert os.fsencode(bad.name) == b"k" + raw
    assert os.fsencode(str(bad.value)) == b"v" + raw
    assert encode(read, as_read=True) == name
    with pytest.raises(InvalidName, match=r"property 'k.*lone surrogate"):
        encode(read)  # what a producer puts is UTF-8


def test_a_field_whose_escapes_are_not_utf8_still_leaves_the_name_unreadable() -> None:
    assert decode_lenient("4.id.T..c%FF")[1] is not None


_FOLDER_TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"))


@given(_FOLDER_TEXT.filter(bool), _FOLDER_TEXT.filter(bool))
def test_a_folder_segment_of_any_length_fits_and_is_distinct(a: str, b: str) -> None:
    """Long MQTT filters and share names: one folder name each, never another's."""
    for text in (a, b, a * 30):
        segment = folder_segment(text)
        assert 0 < len(segment.encode()) <= NAME_LIMIT
        assert "/" not in segment
        assert not segment.startswith(".")
    assert (folder_segment(a) == folder_segment(b)) == (a == b)
    assert (folder_segment(a * 30) == folder_segment(b * 30)) == (a == b)


def test_a_short_folder_segment_is_the_escaped_text() -> None:
    assert folder_segment("sensors/#") == escape_segment("sensors/#") == "sensors%2F%23"
    long = "plant/" * 60
    assert folder_segment(long).startswith("plant%2Fplant%2F")
    assert "%h" in folder_segment(long)
