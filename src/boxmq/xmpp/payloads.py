"""What a stored body looks like inside an <item/>.

Bodies published over XMPP are the item's payload element as XML text, delivered as is.
Anything else (a put from the embedded API or the CLI, a file a script dropped) is wrapped:
UTF-8 text in <text xmlns='urn:boxmq:0'>, other bytes (and text with characters XML cannot
carry, such as control characters) base64 in <data xmlns='urn:boxmq:0'>.
A body is only passed through once it parses as one element in the XML an XMPP stream allows
(RFC 6120 §11.1: no XML declaration, DTD, comment or processing instruction): a stray '<' in
a text file, or a whole XML document, must never break the component's stream.
"""

from __future__ import annotations

import base64
import re
from typing import Final
from xml.parsers import expat
from xml.sax.saxutils import escape

__all__ = ["BOXMQ_NS", "NOT_XML", "payload_of"]

BOXMQ_NS: Final = "urn:boxmq:0"


def payload_of(body: bytes) -> str:
    if body[:1] == b"<" and (_PLAIN_ELEMENT.fullmatch(body) or _is_one_element(body)):
        return body.decode()
    try:
        text = body.decode()
    except UnicodeDecodeError:
        text = None
    if text is not None and not NOT_XML.search(text):
        return f"<text xmlns='{BOXMQ_NS}'>{escape(text)}</text>"
    return f"<data xmlns='{BOXMQ_NS}'>{base64.b64encode(body).decode()}</data>"


# UTF-8 that XML 1.0 cannot carry, escaped or not (§2.2 Char): the C0 controls but tab, line
# feed and carriage return, and U+FFFE, U+FFFF. b"\x01\x02\x03" decodes; sent as <text/>,
# it made Prosody end the component's stream (not-well-formed) at each try.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


# The shape render.xml_of gives a publish's usual payload, `<job xmlns="urn:x">text</job>`,
# in plain ASCII: a name with no prefix, a namespace attribute and nothing else, text without
# & < or ] (no entity, markup or CDATA end can be in it), no W3C namespace (expat refuses to
# bind the reserved ones). Whatever has it is one element of the XML a stream allows, without
# a parser made for it: 14,700 fewer instructions per item, 2.7 % (docs/benchmarks.md, XMPP,
# 2026-11-24). A Hypothesis test checks that expat accepts all it accepts; the rest is
# expat's to decide.
_PLAIN_ELEMENT = re.compile(
    rb'<([A-Za-z_][A-Za-z0-9_.-]*) xmlns="(?!http://www\.w3\.org/)[ !#-%\'-;=-~]*"'
    rb"(?:>[\t\n\r -%'-;=-\\^-~]*</\1>| />)"
)


def _is_one_element(body: bytes) -> bool:
    # expat itself, not ElementTree's parser, which builds a tree for nothing (3x the cost).
    # The namespace separator makes an unbound prefix an error, as the stream's parser does.
    parser = expat.ParserCreate(namespace_separator="}")
    parser.XmlDeclHandler = _forbidden
    parser.StartDoctypeDeclHandler = _forbidden
    parser.CommentHandler = _forbidden
    parser.ProcessingInstructionHandler = _forbidden
    try:
        parser.Parse(body, True)
    except (expat.ExpatError, _Restricted):
        return False
    return True


class _Restricted(Exception):
    """What XMPP's restricted XML leaves out was found."""


def _forbidden(*_: object) -> None:
    raise _Restricted
