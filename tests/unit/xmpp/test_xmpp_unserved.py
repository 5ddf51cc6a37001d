"""What the service answers for a stanza whose serving raised (`QueueService.unserved`, which
the component calls after logging the traceback): internal-server-error of type wait to a
request that asks for an answer, nothing to one that asks none (RFC 6120 §8.3.1)."""

from __future__ import annotations

import pytest
from tests.unit.xmpp.wire import ALICE, SERVICE, STANZA_NS, Wire, in_stream

INTERNAL = f"{{{STANZA_NS}}}internal-server-error"


@pytest.mark.parametrize(
    "stanza",
    [
        f"<iq type='set' id='boom' from='{ALICE}' to='{SERVICE}'><x xmlns='urn:x'/></iq>",
        f"<iq type='get' id='boom' from='{ALICE}' to='{SERVICE}'/>",
        f"<message id='boom' from='{ALICE}' to='jobs@{SERVICE}'><body>b</body></message>",
        f"<message type='chat' id='boom' from='{ALICE}' to='jobs@{SERVICE}'/>",
    ],
)
def test_a_request_is_answered_internal_server_error_from_its_envelope(
    wire: Wire, stanza: str
) -> None:
    wire.service.unserved(in_stream(stanza))
    [answer] = wire.take()
    assert (answer.get("type"), answer.get("id")) == ("error", "boom")
    assert (answer.get("to"), answer.get("from")) == (ALICE, in_stream(stanza).get("to"))
    [error] = list(answer)  # the request not echoed: its parse may be what failed
    assert error.get("type") == "wait"
    assert error.find(INTERNAL) is not None


@pytest.mark.parametrize(
    "stanza",
    [
        f"<iq type='result' id='bq-1' from='{ALICE}' to='{SERVICE}'/>",
        f"<iq type='error' id='bq-1' from='{ALICE}' to='{SERVICE}'/>",
        f"<presence type='unavailable' from='{ALICE}' to='{SERVICE}'/>",
        f"<message type='error' id='bx1' from='{ALICE}' to='{SERVICE}'/>",
        f"<message type='headline' id='h' from='{ALICE}' to='jobs@{SERVICE}'/>",
        f"<message type='groupchat' id='g' from='{ALICE}' to='jobs@{SERVICE}'/>",
        # its answer would pass the stanza size limit, and end the stream itself
        f"<iq type='set' id='{'i' * 600_000}' from='{ALICE}' to='{SERVICE}'/>",
    ],
)
def test_a_stanza_that_asks_no_answer_gets_none(wire: Wire, stanza: str) -> None:
    wire.service.unserved(in_stream(stanza))
    assert wire.take() == []
