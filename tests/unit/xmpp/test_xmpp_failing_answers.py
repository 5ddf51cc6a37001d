"""A failure while answering a failure: logged with its traceback, the stream kept.

A bug in serving a stanza is answered internal-server-error; if building or sending that
answer raised too, it left the service, and the component's data handler with it, which
ends the component's stream and every notification in flight. No stanza a client can send
is known to reach this path (the last one, a payload nested 2,000 deep, was mended in
render.xml_of), so the failure is provoked at the edge the service is given: its `send`,
which raises for the stanzas to one JID, as a transport could. No code of boxmq's is
replaced.
"""

from __future__ import annotations

import logging
from xml.etree import ElementTree as ET

import pytest
from tests.unit.xmpp.wire import ALICE, BOB, SERVICE, in_stream

import boxmq
from boxmq.xmpp import ns
from boxmq.xmpp.service import QueueService


class SendFailingFor:
    """A `send` that raises for every stanza to `jid`, and keeps the others."""

    def __init__(self, jid: str) -> None:
        self.jid = jid
        self.sent: list[ET.Element] = []

    def __call__(self, xml: str) -> None:
        stanza = in_stream(xml)
        if stanza.get("to") == self.jid:
            raise RuntimeError(f"cannot send to {self.jid}")
        self.sent.append(stanza)


def _disco(sender: str, iq_id: str) -> ET.Element:
    return in_stream(
        f"<iq type='get' id='{iq_id}' from='{sender}' to='{SERVICE}'>"
        f"<query xmlns='{ns.DISCO_INFO}'/></iq>"
    )


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "boxmq.xmpp" and r.levelno >= logging.ERROR]


def test_an_iq_whose_error_cannot_be_sent_is_logged_and_the_next_one_served(
    box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    send = SendFailingFor(BOB)
    service = QueueService(box, domain=SERVICE, send=send)
    with caplog.at_level(logging.ERROR, logger="boxmq.xmpp"):
        service.iq(_disco(BOB, "b1"))  # its result fails, then its internal-server-error
        service.iq(_disco(ALICE, "a1"))
    answered = [(s.get("id"), s.get("type")) for s in send.sent]
    assert answered == [("a1", "result")]
    records = _errors(caplog)
    assert [r.exc_info is not None for r in records] == [True, True], records
    assert "internal-server-error to iq b1 from bob@localhost/b not sent" in records[1].message
    service.close()


def test_a_message_whose_refusal_cannot_be_sent_is_logged_and_the_next_one_served(
    box: boxmq.Box, caplog: pytest.LogCaptureFixture
) -> None:
    send = SendFailingFor(BOB)
    service = QueueService(box, domain=SERVICE, send=send)
    refused = "<message from='{}' to='a+b@" + SERVICE + "' id='{}'><body>x</body></message>"
    with caplog.at_level(logging.ERROR, logger="boxmq.xmpp"):
        service.message(in_stream(refused.format(BOB, "m1")))  # its error fails
        service.message(in_stream(refused.format(ALICE, "m2")))
    assert [(s.get("id"), s.get("type")) for s in send.sent] == [("m2", "error")]
    records = _errors(caplog)
    assert [r.exc_info is not None for r in records] == [True], records
    assert "bad-request to message m1 from bob@localhost/b not sent" in records[0].message
    service.close()
