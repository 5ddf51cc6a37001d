"""XEP-0004 data forms as a client submits them: the one reader of every form a request carries
(a subscribe's <options/>, a create's or an owner's <configure/>).

Pure: an ElementTree element in, a dict out. What a field means is its caller's business; what
a form says is read here once, so that the two requests cannot read one form two ways.
"""

from __future__ import annotations

from typing import Final
from xml.etree.ElementTree import Element

from boxmq.xmpp import ns

__all__ = ["FormError", "submitted", "without_blanks"]

_FIELD: Final = ns.tag(ns.DATA, "field")
_VALUE: Final = ns.tag(ns.DATA, "value")
_XML_BLANKS: Final = " \t\r\n"  # XML's white space (XML 1.0, production 3: S)


class FormError(ValueError):
    """A form whose fields do not each say one thing: the request refuses it, in the words of
    its own XEP (bad-request for options, not-acceptable for a configuration)."""


def submitted(form: Element | None) -> dict[str, str] | None:
    """The fields of a submitted form, var -> value, FORM_TYPE left out; None if there is no
    form or it is of type 'cancel' (XEP-0004 §3.1: it submits nothing, whatever fields
    slixmpp's Form kept in it).

    A field with no <value/> is an empty one (""), as an empty <value/> is: the form sent back
    unfilled is answered for what it lacks. A field without a var is a fixed one, a label
    (XEP-0004 §3.2), and is left out. A field with several values, or a var given twice, is
    refused with FormError: every field served here takes one value, and reading the first
    (or the last) would answer a request for something else as if it were granted.
    """
    if form is None or form.get("type") == "cancel":
        return None
    values: dict[str, str] = {}
    for field in form.findall(_FIELD):  # the form's own, not a <reported/>'s or an <item/>'s
        var = field.get("var")
        if not var or var == "FORM_TYPE":
            continue
        if var in values:
            raise FormError(f"field {var} is given twice: a field is given once")
        given = field.findall(_VALUE)
        if len(given) > 1:
            raise FormError(f"field {var} has {len(given)} values: it takes one")
        values[var] = without_blanks(given[0].text or "") if given else ""
    return values


def without_blanks(value: str) -> str:
    """A form field's value without the XML blanks around it, as XML Schema's whiteSpace
    collapse takes them: not `str.strip()`, which also takes a no-break space, an em space or
    NEL (U+0085), none of which a field's integer or word may be written with."""
    return value.strip(_XML_BLANKS)
