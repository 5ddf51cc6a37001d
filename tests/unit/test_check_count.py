"""The one check of an argument that must be an int of at least some bound (max_in_flight,
spares, most, limit, max_deliveries, the exactly-once counts)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.errors import InvalidArgument, check_count

_LEAST = st.integers(min_value=-5, max_value=5)


@given(_LEAST, st.integers(min_value=0, max_value=2**70))
def test_an_int_at_or_over_the_bound_passes_as_it_is(least: int, over: int) -> None:
    value = least + over
    checked = check_count("n", value, least=least)
    assert checked == value
    assert type(checked) is int


@given(_LEAST, st.integers(min_value=1, max_value=2**70), st.booleans())
def test_an_int_under_the_bound_is_refused_naming_the_argument_and_the_bound(
    least: int, under: int, none: bool
) -> None:
    value = least - under
    # With None allowed the message says so; else the bound alone (max_in_flight's wording).
    allowed = f"None or an int >= {least}" if none else f">= {least}"
    with pytest.raises(InvalidArgument, match=re.escape(f"n must be {allowed}, not {value}")):
        check_count("n", value, least=least, none=none)


not_ints = st.one_of(
    st.booleans(),  # True is 1 to Python: max_in_flight=True was one slot
    st.floats(allow_nan=True),  # 2.0 too: 1.5 made free slots a fraction, NaN no limit
    st.text(max_size=3),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.builds(complex, st.integers(), st.integers()),
)


@given(not_ints, _LEAST, st.booleans())
def test_anything_but_an_int_is_refused_saying_what_is_allowed(
    value: object, least: int, none: bool
) -> None:
    allowed = f"{'None or ' if none else ''}an int >= {least}"
    with pytest.raises(InvalidArgument) as raised:
        check_count("most", value, least=least, none=none)
    assert str(raised.value) == f"most must be {allowed}, not {value!r}"


def test_none_passes_only_where_it_is_allowed() -> None:
    assert check_count("limit", None, least=1, none=True) is None
    with pytest.raises(InvalidArgument, match=re.escape("limit must be an int >= 1, not None")):
        check_count("limit", None, least=1)
