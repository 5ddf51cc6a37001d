"""Floating-point numbers spelled as Java's Double.toString and Float.toString spell them.

DropboxMQ writes a `D` or `F` property with Java's toString and reads one with parseDouble
or parseFloat; boxmq writes the same text, so that a name reads the same to both.

Java 19 and later write the shortest decimal that reads back as the same number (the
closest of those, and of one or two digits when one would do: `4.9E-324`, not `5.0E-324`).
Java up to 18 wrote a longer text for some values (`9.999999999999999E22` for `1.0E23`,
`1.17549435E-38` for the float `1.1754944E-38`), or one as long but farther from the value
(the float `7.2110006E25` as `7.2110005E25`): JDK-4511638. Both read back as the same
number, in any Java; boxmq writes Java 19's text, which the tests compare with the `java`
on PATH (a longer or farther text from it is taken as that old one).

The layout is Java's at every version: `-0.0`, `NaN`, `Infinity`; plain decimals from 10^-3
up to (not including) 10^7, with at least one digit after the point (`100.0`, `0.001`);
otherwise `d.dddE<n>` (`1.0E7`, `1.2345678E7`, `1.0E-4`, `-4.9E-324`)."""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fractions import Fraction

__all__ = ["double_text", "fits_float32", "float_text", "parse_float32", "to_float32"]


def double_text(value: float) -> str:
    """`value` as Java's Double.toString (Java 19+) writes it."""
    special = _special(value)
    if special is not None:
        return special
    digits, point = _python_digits(value)
    if len(digits) == 1:
        # Java weighs two-digit texts too when one digit would do: the closest wins.
        two, two_point = _python_digits(value, 2)
        if len(two) == 2 and float(f"0.{two}e{two_point}") == abs(value):
            digits, point = two, two_point
    return _layout(math.copysign(1.0, value) < 0, digits, point)


def float_text(value: float) -> str:
    """`value`, rounded to a Java float (32 bits), as Java's Float.toString (Java 19+)
    writes it."""
    value = to_float32(value)
    special = _special(value)
    if special is not None:
        return special
    digits, point = _shortest32(abs(value))
    return _layout(math.copysign(1.0, value) < 0, digits, point)


def to_float32(value: float) -> float:
    """The Java float nearest `value` (ties to even), as a Python float; an overflow is
    an infinity, as Java's `(float)` cast makes it."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def parse_float32(text: str) -> float:
    """The Java float Float.parseFloat reads from the decimal `text` (digits, a point, an
    exponent; not Java's `f` suffix nor its hex form): the nearest to the exact decimal, an
    infinity from half an ulp past Float.MAX_VALUE on."""
    number = float(text)
    near = to_float32(number)
    if near == number or math.isinf(number):
        return near
    # Through a double, the text is rounded twice: the second rounding goes wrong only when
    # the first lands on a midpoint between two floats (or between MAX_VALUE and the
    # infinity past it), where the exact decimal decides (3.4028235677973366E38 is below
    # that last midpoint and reads as MAX_VALUE, its double on it and rounded up).
    down = to_float32(math.nextafter(number, -math.inf))
    up = to_float32(math.nextafter(number, math.inf))
    if down == up:
        return near
    from fractions import Fraction  # here alone: 2 ms of every boxmq import

    def exact(value: float) -> Fraction:
        return Fraction(value) if math.isfinite(value) else Fraction(math.copysign(2**128, value))

    midpoint = (exact(down) + exact(up)) / 2
    decimal = Fraction(text)
    return up if decimal > midpoint else down if decimal < midpoint else near


def fits_float32(value: float) -> bool:
    """Whether a finite `value` is a finite Java float once rounded: up to Float.MAX_VALUE
    and less than half an ulp more, as parseFloat and a `(float)` cast take it. MAX_VALUE's
    own text, `3.4028235E38`, is a little over it as a double."""
    return math.isfinite(to_float32(value))


def _special(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    return None


def _python_digits(value: float, count: int = 0, *, strip: bool = True) -> tuple[str, int]:
    """The significant digits of `value` and where the point goes: value = 0.<digits> x
    10^point. `count` 0 is the shortest that reads back (Python's repr), else that many,
    rounded to nearest."""
    text = repr(abs(value)) if count == 0 else f"{abs(value):.{count - 1}e}"
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    point = len(whole) + (int(exponent) if exponent else 0) - (len(whole + fraction) - len(digits))
    return (digits.rstrip("0") if strip else digits) or "0", point


def _shortest32(value: float) -> tuple[str, int]:
    """The shortest digits that read back as the positive float32 `value` (Java 19's
    choice: of those, the closest; one digit counts as two)."""
    # A text of n digits that reads back makes one of n + 1 (a 0 more): search, 9 suffice.
    low, high = 1, 9
    while low < high:
        middle = (low + high) // 2
        if _closest32(value, middle) is None:
            low = middle + 1
        else:
            high = middle
    found = _closest32(value, low)
    assert found is not None, value
    if low == 1:
        two, point = _python_digits(value, 2)
        if len(two) == 2 and _reads_as32(int(two), point - 2, value):
            return two, point
    return found


def _closest32(value: float, count: int) -> tuple[str, int] | None:
    """The closest text of `count` digits that reads back as `value`, if one does."""
    digits, point = _python_digits(value, count, strip=False)
    scale = point - len(digits)
    nearest = int(digits)
    # The nearest is the closest, if it reads back. When it does not, one beside it may
    # yet: next to a power of two, the floats below are twice as dense as those above.
    for candidate in (nearest, nearest - 1, nearest + 1):
        if candidate > 0 and _reads_as32(candidate, scale, value):
            return _normal(str(candidate), scale)
    return None


def _reads_as32(digits: int, scale: int, value: float) -> bool:
    """Whether Float.parseFloat reads `digits` x 10^scale as the float32 `value`. Parsed to
    a double and then to a float, it is rounded twice: the second rounding is wrong only
    when the first lands on a midpoint between two floats, where the exact sum decides."""
    number = float(f"{digits}e{scale}")
    near = to_float32(number)
    if near != number and math.isfinite(near):
        bits = _bits32(near)
        other = _float32(bits + 1 if number > near else bits - 1)
        if (near + other) / 2 == number:  # exact: two floats' sum has room in a double
            from fractions import Fraction  # here alone: 2 ms of every boxmq import

            low, high, even = _interval32(value)
            decimal = Fraction(digits) * Fraction(10) ** scale
            return low < decimal < high or (even and decimal in (low, high))
    return near == value


def _normal(digits: str, scale: int) -> tuple[str, int]:
    """`int(digits) x 10^scale` as (digits without trailing zeros, point)."""
    stripped = digits.rstrip("0")
    return stripped, scale + len(digits)


def _interval32(value: float) -> tuple[Fraction, Fraction, bool]:
    """The numbers that round to the positive float32 `value`: between the midpoints to
    its neighbours, the midpoints included when its significand is even (ties to even)."""
    from fractions import Fraction

    bits = _bits32(value)
    below, above = _float32(bits - 1), _float32(bits + 1)  # 0.0 below the least
    exact = Fraction(value)
    low = (exact + Fraction(below)) / 2
    # Past Float.MAX_VALUE, what is under half an ulp more still reads as it.
    upper = 2 * exact - Fraction(below) if math.isinf(above) else Fraction(above)
    return low, (exact + upper) / 2, bits % 2 == 0


def _bits32(value: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", value))[0])


def _float32(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def _layout(negative: bool, digits: str, point: int) -> str:
    """Java's layout of 0.<digits> x 10^point (see the module's text)."""
    sign = "-" if negative else ""
    if -2 <= point <= 7:  # 10^-3 <= |value| < 10^7
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        whole, fraction = digits[:point].ljust(point, "0"), digits[point:]
        return f"{sign}{whole}.{fraction or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"
