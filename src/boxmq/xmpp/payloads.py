"""What a stored body looks like inside an <item/>.

Bodies published over XMPP are the item's payload element as XML text, delivered as is.
Anything else (a put from the embedded API or the CLI, a file a script dropped) is wrapped:
UTF-8 text in <text xmlns='urn:boxmq:0'>, other bytes base64 in <data xmlns='urn:boxmq:0'>.
A body is only passed through once it parses as one element: a stray '<' in a text file must
never break the component's stream.
"""

from __future__ import annotations

import base64
from typing import Final
from xml.etree.ElementTree import ParseError, XMLParser
from xml.sax.saxutils import escape

from boxmq.client.message import Message

__all__ = ["BOXMQ_NS", "payload_of"]

BOXMQ_NS: Final = "urn:boxmq:0"


def payload_of(message: Message) -> str:
    body = message.body
    if body[:1] == b"<" and _is_one_element(body):
        return body.decode()
    try:
        return f"<text xmlns='{BOXMQ_NS}'>{escape(body.decode())}</text>"
    except UnicodeDecodeError:
        return f"<data xmlns='{BOXMQ_NS}'>{base64.b64encode(body).decode()}</data>"


def _is_one_element(body: bytes) -> bool:
    parser = XMLParser()
    try:
        parser.feed(body)
        parser.close()
    except ParseError:
        return False
    return True
