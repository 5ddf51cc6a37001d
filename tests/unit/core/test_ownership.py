"""check_holder's decision order (XEP-0254 §2.3/§2.4) and the bounded past-holder memory."""

from __future__ import annotations

import pytest

from boxmq.core import check_holder
from boxmq.core.ownership import PastHolders
from boxmq.errors import Conflict, Forbidden, ItemNotFound, LockError, UnexpectedRequest
from boxmq.model import ConsumerId, MessageId

A, B, C = ConsumerId("a"), ConsumerId("b"), ConsumerId("c")
M = MessageId("m1")

# (holder, known, past_holders, requester) -> expected error (None = allowed)
CASES: list[tuple[ConsumerId | None, bool, frozenset[ConsumerId], type[LockError] | None]] = [
    (A, True, frozenset(), None),  # the holder
    (A, True, frozenset({A}), None),  # held it before and holds it again
    (A, False, frozenset(), None),
    (None, True, frozenset({A}), UnexpectedRequest),  # lock gone, message ready again
    (None, False, frozenset({A}), UnexpectedRequest),  # lock gone, message elsewhere
    (B, True, frozenset({A}), UnexpectedRequest),  # lock gone, now held by another
    (B, True, frozenset(), Conflict),  # held by another, never received
    (B, False, frozenset({C}), Conflict),
    (None, True, frozenset(), Forbidden),  # exists, unlocked, never received
    (None, True, frozenset({B}), Forbidden),
    (None, False, frozenset(), ItemNotFound),  # does not exist
    (None, False, frozenset({B, C}), ItemNotFound),
]


@pytest.mark.parametrize(("holder", "known", "past", "expected"), CASES)
def test_decision_order(
    holder: ConsumerId | None,
    known: bool,
    past: frozenset[ConsumerId],
    expected: type[LockError] | None,
) -> None:
    if expected is None:
        check_holder(M, A, holder=holder, known=known, past_holders=past)
        return
    with pytest.raises(expected) as info:
        check_holder(M, A, holder=holder, known=known, past_holders=past)
    assert type(info.value) is expected
    assert info.value.message_id == M


def test_released_holders_are_parked_until_offered_again() -> None:
    past = PastHolders()
    past.released(M, A)
    assert past.is_parked(M)
    assert past.of(M) == {A}
    past.offered(M, last_holder=A)
    assert not past.is_parked(M)
    assert past.of(M) == {A}
    past.released(M, B)
    assert past.of(M) == {A, B}
    past.forget(M)
    assert past.of(M) == frozenset()
    assert not past.is_parked(M)


def test_a_last_holder_from_the_file_counts_as_a_past_holder() -> None:
    past = PastHolders()
    past.offered(M, last_holder=C)
    assert past.of(M) == {C}
    assert not past.is_parked(M)


def test_parked_memory_is_bounded_oldest_first() -> None:
    past = PastHolders(limit=3)
    ids = [MessageId(f"m{i}") for i in range(5)]
    for message_id in ids:
        past.released(message_id, A)
    assert [past.is_parked(message_id) for message_id in ids] == [False, False, True, True, True]
    assert past.of(ids[0]) == frozenset()


def test_a_handle_of_an_earlier_delivery_to_the_holder_is_told_its_lock_is_gone() -> None:
    """The holder asks with the handle of a delivery before the one it holds: its lock is
    gone (UnexpectedRequest), whatever else is known; the holder's own handle passes."""
    with pytest.raises(UnexpectedRequest):
        check_holder(M, A, holder=A, known=True, past_holders=frozenset(), earlier_delivery=True)
    with pytest.raises(Conflict):  # another holds it and `a` never did: as before
        check_holder(M, A, holder=B, known=True, past_holders=frozenset(), earlier_delivery=True)
    check_holder(M, A, holder=A, known=True, past_holders=frozenset({A}), earlier_delivery=False)


def test_a_message_delivered_to_an_unrecorded_holder_is_no_proof_of_never_receiving_it() -> None:
    """Released when its holder left (a restart), its file names no past holder: the one that
    held it must hear that its lock is gone, so nobody is told it never received it, nor,
    once another holds it, that another holds it (XEP-0254 §2.3/§2.4: a timeout's holder is
    told unexpected-request; one that left and came back is told the same)."""
    with pytest.raises(UnexpectedRequest):
        check_holder(
            M, A, holder=None, known=True, past_holders=frozenset(), holders_unrecorded=True
        )
    with pytest.raises(UnexpectedRequest):  # given to another since: still may have been A's
        check_holder(M, A, holder=B, known=True, past_holders=frozenset(), holders_unrecorded=True)
    with pytest.raises(Conflict):  # its holders recorded, A not among them
        check_holder(M, A, holder=B, known=True, past_holders=frozenset({C}))
    with pytest.raises(ItemNotFound):
        check_holder(
            M, A, holder=None, known=False, past_holders=frozenset(), holders_unrecorded=True
        )
