"""Which names of target/ rank without being decoded, and at what priority.

A deep backlog keeps most of its names undecoded (target_names): those whose order the name
alone tells, the engine's order, which a property test checks against the decoding
(tests/unit/test_ranked_names.py).
"""

from __future__ import annotations

import re

from boxmq.model import DELIVERY_COUNT, LAST_HOLDER, NOT_BEFORE

__all__ = ["ranked_priority"]

# The names ranked without their envelope: an id of IdFactory's, a priority spelt as str(int)
# writes it, no expiration, correlation id, reply-to or type, and none of the properties a
# release writes (a delay and a last holder decide when and to whom it goes; a delivery count
# marks a rare name, decoded at once as before). So what a put without metadata writes
# (`4.<id>.B`), and a publication's copy in a share group or a subscription
# (`4.<id>.B.....bx_topicS=...&bx_qosY=1`, an MQTT v5 message's properties too). Within one
# priority their order as strings is the engine's (the id's 16 digits start with its time in
# ms, then ties by name). Each property must decode as it is written, or the whole name
# would read as an id with default metadata: a name with no escape (with one it could be a
# reserved name spelt otherwise, `bx%5Fnb`), and a value its type reads whatever its digits
# (a float, or a number that may be out of its type's range, is decoded). The group key of
# hash-by-key is not read here: under it nothing is kept cold.
_VALUE = (
    # A string's escapes as an unrolled loop: an alternative per character costs sre 4x.
    r"(?:S=[A-Za-z0-9_-]*(?:%[0-9A-Fa-f]{2}[A-Za-z0-9_-]*)*|B=(?:true|false)|Y=-?[0-9]{1,2}"
    r"|H=-?[0-9]{1,4}|I=-?[0-9]{1,9}|L=-?[0-9]{1,18})"
)
_RESERVED = "|".join(re.escape(name) for name in (NOT_BEFORE, DELIVERY_COUNT, LAST_HOLDER))
_PAIR = rf"(?!(?:{_RESERVED})[BYHILFDS]=)[A-Za-z0-9_-]+{_VALUE}"
_RANKED = re.compile(
    rf"(0|-?[1-9][0-9]{{0,9}})\.[0-9]{{16}}-[0-9]+\.[MBSPOT](?:\.\.\.\.\.{_PAIR}(?:&{_PAIR})*)?"
)
_INT32 = (-(2**31), 2**31 - 1)


def ranked_priority(name: str) -> int | None:
    """The priority of a name that ranks from the name alone (_RANKED), else None."""
    ranked = _RANKED.fullmatch(name)
    if ranked is None or not _INT32[0] <= (priority := int(ranked[1])) <= _INT32[1]:
        return None
    return priority
