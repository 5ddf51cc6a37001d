"""XEP-0004 data forms as a client submits them: the one reader of every form a request carries
(a subscribe's <options/>, a create's or an owner's <configure/>, a publish's
<publish-options/>).

Pure: an ElementTree element in, a dict out. What a field means is its caller's business; what
a form says is read here once, so that no two requests can read one form two ways.
"""

from __future__ import annotations

from typing import Final
from xml.etree.ElementTree import Element

from boxmq.xmpp import ns

__all__ = ["FormError", "SeveralValues", "submitted", "without_blanks"]

_FIELD: Final = ns.tag(ns.DATA, "field")
_VALUE: Final = ns.tag(ns.DATA, "value")
_XML_BLANKS: Final = " \t\r\n"  # XML's white space (XML 1.0, production 3: S)


class FormError(ValueError):
    """A form whose fields do not each say one thing: the request refuses it, in the words of
    its own XEP (bad-request for options, not-acceptable for a configuration)."""


class SeveralValues(FormError):
    """A field given several values. It names them, so that a caller that would refuse the
    field whatever its values (one no one serves, or one like pubsub#show-values, which
    XEP-0060 sends as a list) can say that, the real reason, instead of the count."""

    def __init__(self, var: str, values: list[str]) -> None:
        super().__init__(f"field {var} has {len(values)} values: it takes one")
        self.var, self.values = var, values


def submitted(form: Element | None, form_type: str) -> dict[str, str] | None:
    """The fields of a submitted form of kind `form_type`, var -> value, FORM_TYPE left out;
    None if there is no form or it is of type 'cancel' (XEP-0004 §3.1: it submits nothing,
    whatever fields slixmpp's Form kept in it).

    A form whose FORM_TYPE names another kind is refused with FormError: its fields mean what
    that kind says (XEP-0068 §3), and a node_config form read as subscribe options would be
    answered for fields its sender never asked of a subscription. A form without FORM_TYPE
    (or with an empty one) is read as `form_type`: XEP-0004 does not require the field, and
    the element the form comes in (<options/>, <configure/>) says already what it is for.

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
        if var == "FORM_TYPE":
            _check_form_type(field, form_type)
            continue
        if not var:
            continue
        if var in values:
            raise FormError(f"field {var} is given twice: a field is given once")
        given = field.findall(_VALUE)
        if len(given) > 1:
            raise SeveralValues(var, [without_blanks(value.text or "") for value in given])
        values[var] = without_blanks(given[0].text or "") if given else ""
    return values


def _check_form_type(field: Element, expected: str) -> None:
    named = without_blanks(field.findtext(_VALUE) or "")
    if named and named != expected:
        raise FormError(f"FORM_TYPE {named} is not {expected}: send a form of that kind here")


def without_blanks(value: str) -> str:
    """A form field's value without the XML blanks around it, as XML Schema's whiteSpace
    collapse takes them: not `str.strip()`, which also takes a no-break space, an em space or
    NEL (U+0085), none of which a field's integer or word may be written with."""
    return value.strip(_XML_BLANKS)
