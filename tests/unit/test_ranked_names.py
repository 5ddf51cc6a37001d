"""The names a consumer keeps cold (undecoded) rank as their decoding would: a name the live
queue ranks (`ranked_priority`) decodes strictly, with the priority its first field spells, nothing
that delays it or picks its consumer, and an order among its priority's names that is its
order as a string (the engine's: the id's time in ms, then the name)."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from boxmq.client.lifecycle import ready_of
from boxmq.client.ranked_names import ranked_priority
from boxmq.model import DELIVERY_COUNT, LAST_HOLDER, NOT_BEFORE
from boxmq.store.names import decode_lenient

# Each piece is most often what boxmq writes, else something near it that it does not.
_DIGITS = st.text("0123456789", min_size=1, max_size=20)
_PRIORITY = st.one_of(
    st.integers(-9, 9).map(str),
    st.integers(-9, 9).map(str),
    st.integers(-(2**31) - 2, 2**31 + 2).map(str),
    st.sampled_from(["04", "-0", "", "+4", "4 "]),
)
# Ids of IdFactory's shape, most with one millisecond in common (their order then by name).
_GOOD_ID = st.builds(
    lambda ms, rest, tail: f"{ms}{rest}-{tail}",
    st.sampled_from(["1796018477450", "1796018477451", "0000000000000"]),
    st.text("0123456789", min_size=3, max_size=3),
    _DIGITS,
)
_ID = st.one_of(
    _GOOD_ID,
    _GOOD_ID,
    _GOOD_ID,
    st.sampled_from(["job-1", "1796018477450050", "1796018477450050-", "17960184774500501-2"]),
)
_GOOD_PROPERTIES = ["bx_topic", "bx_qos", "bx_v5", "bx_rp", "bx_lastX", "ID"]
# The reserved names of a release, two of them spelt otherwise, and names decoded otherwise.
_ODD_PROPERTIES = [NOT_BEFORE, DELIVERY_COUNT, LAST_HOLDER, "bx%5Fnb", "bx_n%62", "a+b", "x.y"]
_PROPERTY_NAME = st.sampled_from([*_GOOD_PROPERTIES, *_GOOD_PROPERTIES, *_ODD_PROPERTIES])
_VALUE = st.one_of(
    st.text("abcAZ09_-", max_size=6),
    st.text("0123456789", min_size=1, max_size=3),
    st.from_regex(r"-?[0-9]{1,20}", fullmatch=True),
    st.sampled_from(["true", "false", "True", "sensors%2Fa", "%G1", "%", "1.5", "NaN", "a+b"]),
)
_ANY_PROPERTY = st.builds(
    lambda name, kind, value: f"{name}{kind}={value}",
    _PROPERTY_NAME,
    st.sampled_from("SSSYYBBILHFDX"),
    _VALUE,
)
_GOOD_PROPERTY = st.one_of(
    st.text("abcAZ09_-", max_size=6).map(lambda topic: f"bx_topicS=sensors%2F{topic}"),
    st.integers(0, 2).map(lambda qos: f"bx_qosY={qos}"),
    st.sampled_from(["bx_rpB=true", "bx_v5S=JgAB-_x", "IDI=-2147483648", "bx_lastXS=w"]),
)
_PROPERTY = st.one_of(_GOOD_PROPERTY, _GOOD_PROPERTY, _GOOD_PROPERTY, _ANY_PROPERTY)
_NAME = st.builds(
    lambda priority, message_id, kind, middle, properties: (
        f"{priority}.{message_id}.{kind}"
        + (f"{middle}{'&'.join(properties)}" if middle and properties else "")
    ),
    _PRIORITY,
    _ID,
    st.sampled_from("BBBBMT?"),
    st.sampled_from([*["....."] * 6, "", ".1900000000000....", "....x."]),
    st.lists(_PROPERTY, max_size=3),
)


def _rank(name: str) -> tuple[int, float, str]:
    """The engine's rank of `name`'s message, from its decoding, as the live queue offers it."""
    envelope, reason = decode_lenient(name)
    assert reason is None, reason
    assert envelope.timestamp is not None
    ready = ready_of(name, envelope, envelope.timestamp / 1000)
    assert (ready.not_before, ready.delivery_count, ready.last_holder) == (0.0, 0, None)
    assert ready.expiration == 0
    return (-ready.priority, ready.sequence, ready.key)


@given(first=_NAME, second=_NAME)
@example(
    first="4.1796018477450050-7.B.....bx_topicS=a%2Fb&bx_qosY=1", second="4.1796018477450050-12.B"
)
def test_a_name_kept_cold_ranks_as_its_decoding(first: str, second: str) -> None:
    priorities = {name: ranked_priority(name) for name in (first, second)}
    for name, priority in priorities.items():
        if priority is not None:
            rank = _rank(name)
            assert rank[0] == -priority
            at = name.index(".") + 1
            assert rank[1] == int(name[at : at + 13]) / 1000  # the horizon's sequence
    if priorities[first] is not None and priorities[first] == priorities[second]:
        assert (first < second) == (_rank(first) < _rank(second))  # one heap of strings


def test_a_publications_copies_are_kept_cold_and_a_released_one_is_not() -> None:
    copy = "4.1796018477450050-7140087205.B.....bx_topicS=sensors%2Froom49%2Ftemp&bx_qosY=1"
    v5 = "7.1796018477450050-7.T.....bx_topicS=a&bx_qosY=2&bx_rpB=true&bx_v5S=JgAB-_x"
    assert ranked_priority(copy) == 4
    assert ranked_priority(v5) == 7
    assert ranked_priority("4.1796018477450050-7.B.....") is None  # no encoder writes it
    for released in (f"{copy}&bx_dcI=1", f"{copy}&bx_dcI=1&bx_lastS=w1", f"{copy}&bx_nbL=1"):
        assert ranked_priority(released) is None
    expiring = copy.replace("B.....", "B.1796018477999000....")
    assert ranked_priority(expiring) is None
