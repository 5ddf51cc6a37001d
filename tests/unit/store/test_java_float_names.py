"""D and F property values are written as Java's Double.toString and Float.toString write
them (Java 19+: the shortest text), so that DropboxMQ reads back the value boxmq wrote, and
every text Java or an older boxmq wrote reads back as its value."""

from __future__ import annotations

import math
import struct
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.store.java import run_java

from boxmq.errors import InvalidArgument
from boxmq.java_floats import double_text, float_text, to_float32
from boxmq.model import (
    Envelope,
    MessageId,
    Property,
    PropertyType,
    properties_from,
    property_text,
)
from boxmq.store.names import decode, encode

T = PropertyType

# Printed by OpenJDK 17's Double.toString and Float.toString; where Java 17 wrote a longer
# text than the shortest (JDK-4511638, fixed in Java 19), the Java 19 text is given.
DOUBLES = [
    (1e20, "1.0E20"),
    (1e-5, "1.0E-5"),
    (12345678.0, "1.2345678E7"),
    (1e7, "1.0E7"),
    (9999999.0, "9999999.0"),
    (0.001, "0.001"),
    (0.0009, "9.0E-4"),
    (100.0, "100.0"),
    (0.1, "0.1"),
    (-0.0, "-0.0"),
    (0.0, "0.0"),
    (123456.7, "123456.7"),
    (5e-324, "4.9E-324"),
    (-5e-324, "-4.9E-324"),
    (1e-323, "9.9E-324"),  # Java 17: 1.0E-323, farther off
    (1.7976931348623157e308, "1.7976931348623157E308"),
    (2.2250738585072014e-308, "2.2250738585072014E-308"),
    (1e23, "1.0E23"),  # Java 17: 9.999999999999999E22
    (2e23, "2.0E23"),  # Java 17: 1.9999999999999998E23
    (2.3851136372966235e25, "2.3851136372966235E25"),  # Java 17: ...234E25, farther off
]
FLOATS = [
    (1e20, "1.0E20"),
    (0.1, "0.1"),
    (3.4028234663852886e38, "3.4028235E38"),
    (3.4028235e38, "3.4028235E38"),  # MAX_VALUE's text, a little over it as a double
    (1.4e-45, "1.4E-45"),
    (1e-45, "1.4E-45"),
    (1.17549435e-38, "1.1754944E-38"),  # Java 17: 1.17549435E-38
    (7.211000584952736e25, "7.2110006E25"),  # Java 17: 7.2110005E25, farther off
    (12345678.0, "1.2345678E7"),
    (-0.0, "-0.0"),
]


def _written(kind: PropertyType, value: float) -> str:
    name = encode(Envelope(MessageId("id"), properties=(Property("v", kind, value),)))
    return unquote(name.rsplit("v" + kind.value + "=", 1)[1])


def _read(kind: PropertyType, text: str) -> float:
    # As URLEncoder writes it: '.' and '-' stay, a '+' is %2B.
    [prop] = decode(f"4.id.B.....v{kind.value}={quote(text, safe='.-')}").properties
    assert isinstance(prop.value, float)
    return prop.value


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


@pytest.mark.parametrize(("value", "text"), DOUBLES)
def test_doubles_are_written_as_java_writes_them(value: float, text: str) -> None:
    assert _written(T.DOUBLE, value) == text
    assert property_text(value) == text  # the Spark column and MQTT user properties
    assert _bits(_read(T.DOUBLE, text)) == _bits(value)


@pytest.mark.parametrize(("value", "text"), FLOATS)
def test_floats_are_written_as_java_writes_them(value: float, text: str) -> None:
    assert _written(T.FLOAT, value) == text
    assert to_float32(_read(T.FLOAT, text)) == to_float32(value)


@pytest.mark.parametrize("value", [3.4028236e38, -3.4028236e38, 1e39])
def test_a_float_past_a_java_float_is_refused(value: float) -> None:
    with pytest.raises(InvalidArgument, match="does not fit a Java float"):
        _written(T.FLOAT, value)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e+20", 1e20), ("5e-324", 5e-324), ("1.2345678e-05", 1.2345678e-05), ("1E7", 1e7)],
)
def test_texts_an_older_boxmq_wrote_still_read_as_their_value(text: str, value: float) -> None:
    assert _read(T.DOUBLE, text) == value


# What OpenJDK 17's Float.parseFloat makes of texts a script may write, as Float.toString
# prints the float it reads: the nearest Java float, an infinity past the largest one.
SCRIPT_FLOATS = [
    ("0.123456789", "0.12345679"),
    ("1.0000001192092896", "1.0000001"),
    ("3.4028235677973366E38", "3.4028235E38"),
    ("3.5E38", "Infinity"),
    ("-3.5E38", "-Infinity"),
    ("1e-50", "0.0"),
    ("-1e-46", "-0.0"),
    ("0.1", "0.1"),
]


@pytest.mark.parametrize(("text", "java"), SCRIPT_FLOATS)
def test_a_float_a_script_wrote_reads_as_the_java_float_parsefloat_makes_of_it(
    text: str, java: str
) -> None:
    """DropboxMQ reads an F value with Float.parseFloat: boxmq reads the same float, as it
    hands out the floats it writes (Float.toString's value), so that a redelivery, which
    writes the name again, changes nothing and never finds a value no float can hold."""
    value = _read(T.FLOAT, text)
    assert _bits(value) == _bits(float(java))
    assert _read(T.FLOAT, _written(T.FLOAT, value)) == value


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_double_reads_back_unchanged(value: float) -> None:
    assert _bits(_read(T.DOUBLE, _written(T.DOUBLE, value))) == _bits(value)


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_every_finite_float_reads_back_as_the_same_java_float(value: float) -> None:
    text = _written(T.FLOAT, value)
    assert _bits(to_float32(_read(T.FLOAT, text))) == _bits(value)
    assert len(text.replace("-", "").split("E")[0]) <= 11  # 9 digits, a point, a 0 at most


_JAVA = """
public class Spell {
    public static void main(String[] args) {
        for (int i = 0; i < args.length; i += 2) {
            double d = Double.longBitsToDouble(Long.parseUnsignedLong(args[i], 16));
            float f = (float) d;
            String[] ours = args[i + 1].split(",");
            System.out.println(Double.toString(d) + " " + Float.toString(f) + " "
                + (Double.doubleToRawLongBits(Double.parseDouble(ours[0]))
                    == Double.doubleToRawLongBits(d)) + " "
                + (Float.floatToRawIntBits(Float.parseFloat(ours[1]))
                    == Float.floatToRawIntBits(f)));
        }
    }
}
"""


def test_java_reads_what_boxmq_writes_and_writes_what_boxmq_does(tmp_path: Path) -> None:
    values = [value for value, _ in DOUBLES + FLOATS]
    values += [1.5e300, 3.0e-310, 7.0e-4, 1.0e-3, 9999999.5, 1e7 + 1, 0.3, 2.0 / 3, math.pi]
    args: list[str] = []
    for value in values:
        args += [_bits(value)[::-1].hex(), f"{double_text(value)},{float_text(value)}"]
    out = run_java(tmp_path, "Spell", _JAVA, *args).split("\n")
    for value, line in zip(values, out, strict=False):
        java_double, java_float, double_ok, float_ok = line.split()
        assert (double_ok, float_ok) == ("true", "true"), (value, line)
        for exact, ours, theirs in (
            (value, double_text(value), java_double),
            (to_float32(value), float_text(value), java_float),
        ):
            # Java up to 18 wrote a longer text for some values, or one as long but farther
            # from the value (JDK-4511638); Java 19's is never shorter, nor closer.
            assert _no_worse(exact, ours, theirs), (value, ours, theirs)


_PARSE_JAVA = """
public class Parse {
    public static void main(String[] args) {
        for (String text : args) {
            System.out.println(Integer.toHexString(Float.floatToRawIntBits(Float.parseFloat(text))));
        }
    }
}
"""


def _midpoint_texts() -> list[str]:
    """Decimals on, just under and just over the midpoint between a float and the next (the
    infinity past MAX_VALUE counted as 2^128): read through a double, they round twice."""
    texts = []
    for bits in (1, 2, 0x7FFFFF, 0x800000, 0x3DCCCCCD, 0x3F800000, 0x4B000000, 0x5C00303A):
        texts += _around(bits)
    texts += _around(0x7F7FFFFE) + _around(0x7F7FFFFF)
    return texts + [f"-{text}" for text in texts]


def _around(bits: int) -> list[str]:
    low = Fraction(struct.unpack("<f", struct.pack("<I", bits))[0])
    high = (
        2**128
        if bits == 0x7F7FFFFF
        else Fraction(struct.unpack("<f", struct.pack("<I", bits + 1))[0])
    )
    midpoint = (low + high) / 2
    with localcontext(prec=200):  # enough for every midpoint's exact decimal
        exact = Decimal(midpoint.numerator) / Decimal(midpoint.denominator)
        return [str(exact), str(exact.next_plus()), str(exact.next_minus())]


def test_java_reads_a_script_s_float_text_as_boxmq_does(tmp_path: Path) -> None:
    """Float.parseFloat rounds the exact decimal once; boxmq reads through a double and must
    not round twice where that double lands on a midpoint between two floats."""
    texts = _midpoint_texts()
    out = run_java(tmp_path, "Parse", _PARSE_JAVA, *texts).split()
    assert len(out) == len(texts)
    for text, java in zip(texts, out, strict=True):
        ours = struct.unpack("<I", struct.pack("<f", to_float32(_read(T.FLOAT, text))))[0]
        assert ours == int(java, 16), (text, java)


def _no_worse(value: float, ours: str, theirs: str) -> bool:
    if ours == theirs or len(ours) < len(theirs):
        return True
    exact = Fraction(value)
    closer = abs(Fraction(Decimal(ours)) - exact) < abs(Fraction(Decimal(theirs)) - exact)
    return len(ours) == len(theirs) and closer


@pytest.mark.parametrize("value", [0.123456789, 68268928.0, 1e-40, 300, -0.0])
def test_a_float_is_the_same_in_this_process_as_read_from_its_name(value: float) -> None:
    # A consumer of this process is handed the properties as given, one of another process
    # reads them from the name: both see Float.toString's value (0.12345679, 6.826893E7).
    [given] = properties_from({"f": Property("f", T.FLOAT, value)})
    assert _bits(_read(T.FLOAT, _written(T.FLOAT, value))) == _bits(given.value)  # type: ignore[arg-type]
    assert to_float32(given.value) == to_float32(value)  # type: ignore[arg-type]
