"""XEP-0004 data forms as a client library writes them, read for <options/> and <configure/>.

Each form is built with slixmpp's xep_0004 stanza, as an application would, and read by both
requests a form comes with: a subscribe's options and an owner's configure submit.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slixmpp.plugins.xep_0004.stanza import FieldOption, Form, FormField
from slixmpp.xmlstream import register_stanza_plugin
from tests.unit.xmpp.wire import ALICE, Wire, condition

from boxmq.xmpp import ns
from boxmq.xmpp.errors import StanzaError
from boxmq.xmpp.forms import FormError, submitted, without_blanks
from boxmq.xmpp.requests import Configure, Request, Subscribe, parse_iq, parse_request

_FORM_TYPE = ns.SUBSCRIBE_OPTIONS
_NODE_CONFIG = ns.NODE_CONFIG

# What slixmpp's xep_0004 plugin registers when a client loads it: without, a Form written
# type='cancel' keeps its fields, which no client with the plugin sends
register_stanza_plugin(FormField, FieldOption, iterable=True)
register_stanza_plugin(Form, FormField, iterable=True)


# One line of XML 1.0 characters, as a single-valued field holds (slixmpp writes a value with
# a line break as several <value/>s, and XML reads \r as \n)
_XML_TEXT = st.text(
    st.just("\t")
    | st.characters(min_codepoint=0x20, codec="utf-8", blacklist_characters="\ufffe\uffff")
)
_VARS = st.from_regex(r"[a-z]{1,6}#[a-z_]{1,10}", fullmatch=True)


def _form() -> Form:
    return Form()  # type: ignore[no-untyped-call]


def _add(form: Form, **field: object) -> None:
    form.add_field(**field)  # type: ignore[no-untyped-call]


def _submitted(*fields: tuple[str, str | list[str] | None]) -> Form:
    form = _form()
    form["type"] = "submit"
    _add(form, var="FORM_TYPE", ftype="hidden", value=_FORM_TYPE)
    for var, value in fields:
        if value is None:
            _add(form, var=var)  # written <field var='...'/>, no <value/>
        else:
            _add(form, var=var, value=value)
    return form


def _request(payload: str) -> Request | tuple[str, str, str | None]:
    """The request an iq from alice carrying `payload` asks for, or the error it is answered
    with (type, condition, pubsub condition)."""
    iq = ET.fromstring(
        "<iq xmlns='jabber:component:accept' type='set' id='1' from='alice@localhost/r'"
        f" to='pubsub.localhost'>{payload}</iq>"
    )
    try:
        return parse_request(parse_iq(iq))
    except StanzaError as error:
        return error.condition.type, error.condition.name, error.condition.pubsub


def _options(form: Form | str) -> dict[str, str] | tuple[str, str, str | None] | None:
    """What a subscribe carrying `form` asks for, or the error it is answered with."""
    request = _request(
        f"<pubsub xmlns='{ns.PUBSUB}'><subscribe node='jobs' jid='alice@localhost'/>"
        f"<options node='jobs'>{form}</options></pubsub>"
    )
    if isinstance(request, tuple):
        return request
    assert isinstance(request, Subscribe)
    return request.options


def test_a_subscribe_whose_options_ask_what_is_not_served_is_refused_as_it_is_read() -> None:
    """One place refuses the options no subscription here honours, the reader of the form, for
    one value as for several (a field of several values it cannot hand on): the service
    refused the one-value ones again after the reader."""
    for value in ("false", ["false", "0"]):
        assert _options(_submitted(("pubsub#deliver", value))) == (
            "modify",
            "bad-request",
            "invalid-options",
        )
    assert _options(_submitted(("pubsub#queue_request", "5"))) == (  # a misspelt field
        "modify",
        "bad-request",
        "invalid-options",
    )
    assert _options(_submitted(("pubsub#deliver", "true"))) == {"pubsub#deliver": "true"}


def _config(
    form: Form | str, form_type: str = _NODE_CONFIG
) -> dict[str, str] | tuple[str, str, str | None]:
    """What a configure submit carrying `form` asks for, or the error it is answered with; the
    form's FORM_TYPE made `form_type`, so that one form is tried as options and as config."""
    written = str(form).replace(_FORM_TYPE, form_type)
    request = _request(
        f"<pubsub xmlns='{ns.PUBSUB_OWNER}'><configure node='jobs'>{written}</configure></pubsub>"
    )
    if isinstance(request, tuple):
        return request
    assert isinstance(request, Configure)
    return request.config


def test_a_submitted_form_is_its_fields_without_form_type() -> None:
    form = _submitted(("pubsub#queue_requests", "3"), ("boxmq#qos", "assured"))
    asked = {"pubsub#queue_requests": "3", "boxmq#qos": "assured"}
    assert _options(form) == asked
    assert _config(form) == asked


def test_an_empty_value_is_the_empty_string() -> None:
    assert _options(_submitted(("pubsub#queue_requests", ""))) == {"pubsub#queue_requests": ""}
    assert _config(_submitted(("pubsub#title", ""))) == {"pubsub#title": ""}


def test_a_field_with_no_value_is_read_as_an_empty_one_by_both() -> None:
    # XEP-0004 §3.2: a field submitted with no <value/> is an empty field. The options reader
    # left it out, the configure reader read it as "": a subscriber that sent back the
    # configuration-required form unfilled (slixmpp's Form.reply()) was asked for it again,
    # with no word of what was wrong, where an owner's empty field was refused.
    assert _options(_submitted(("pubsub#queue_requests", None))) == {"pubsub#queue_requests": ""}
    assert _config(_submitted(("pubsub#title", None))) == {"pubsub#title": ""}


def test_the_options_form_sent_back_unfilled_is_invalid_options_not_asked_for_again(
    wire: Wire,
) -> None:
    # the form of configuration-required, its queue_requests left empty, as Form.reply() sends
    # it back: it was answered configuration-required again, the subscriber none the wiser
    form = _submitted(("pubsub#queue_requests", None))
    reply = wire.iq(
        ALICE,
        f"<pubsub xmlns='{ns.PUBSUB}'><subscribe node='jobs' jid='alice@localhost'/>"
        f"<options>{form}</options></pubsub>",
    )
    assert condition(reply) == ("modify", "bad-request")
    assert reply.find(f".//{{{ns.PUBSUB_ERRORS}}}invalid-options") is not None
    assert "pubsub#queue_requests" in ET.tostring(reply, encoding="unicode")


def test_a_field_without_var_is_left_out() -> None:
    # XEP-0004 §3.2: only a fixed field goes without a var; it is a label, asking for nothing
    form = _submitted(("pubsub#queue_requests", "2"))
    _add(form, ftype="fixed", value="a label")
    assert _options(form) == {"pubsub#queue_requests": "2"}
    assert _config(form) == {"pubsub#queue_requests": "2"}


def test_a_field_with_several_values_is_refused_not_read_as_its_first() -> None:
    # Every field either request knows takes one value; both read the first and dropped the
    # rest, so pubsub#node_type=[leaf, collection] was answered result, the owner believing
    # the node a collection too.
    form = _submitted(("pubsub#node_type", ["leaf", "collection"]))
    assert _config(form) == ("modify", "not-acceptable", None)  # XEP-0060 §8.2.5
    form = _submitted(("pubsub#queue_requests", ["1", "10000"]))
    assert _options(form) == ("modify", "bad-request", "invalid-options")  # XEP-0060 §6.3


def test_a_field_given_twice_is_refused_not_read_as_its_last() -> None:
    # XEP-0004 §3.2: a var is unique within a form; both read the last one given
    form = _submitted(("pubsub#queue_requests", "1"), ("pubsub#queue_requests", "10000"))
    assert _options(form) == ("modify", "bad-request", "invalid-options")
    assert _config(form) == ("modify", "not-acceptable", None)


def test_a_cancelled_form_asks_for_nothing_whatever_fields_it_carries() -> None:
    # XEP-0004 §3.1: type='cancel' submits nothing. slixmpp sends it empty; a form cancelled
    # by hand, its fields left in, was applied by the options reader (queue_requests became
    # 3) where the configure reader asked for nothing.
    form = _submitted(("pubsub#queue_requests", "3"))
    by_hand = str(form).replace('type="submit"', 'type="cancel"', 1)
    assert "<value>3</value>" in by_hand
    assert _options(by_hand) is None
    assert _config(by_hand) == {}
    form["type"] = "cancel"
    assert str(form) == '<x xmlns="jabber:x:data" type="cancel" />'
    assert _options(form) is None
    assert _config(form) == {}


@given(st.dictionaries(_VARS, _XML_TEXT, max_size=6))
def test_whatever_a_field_holds_it_is_read_back_without_its_blanks(
    fields: dict[str, str],
) -> None:
    form = ET.fromstring(str(_submitted(*fields.items())))
    assert submitted(form, _FORM_TYPE) == {
        var: without_blanks(value) for var, value in fields.items()
    }


@given(
    st.dictionaries(_VARS, _XML_TEXT, min_size=1, max_size=4),
    st.data(),
)
def test_any_field_with_two_values_or_given_twice_refuses_the_whole_form(
    fields: dict[str, str], data: st.DataObject
) -> None:
    var = data.draw(st.sampled_from(sorted(fields)))
    twice = _submitted(*fields.items())
    _add(twice, var=var, value=fields[var])
    with pytest.raises(FormError, match=var):
        submitted(ET.fromstring(str(twice)), _FORM_TYPE)
    both = _submitted(*((v, [x, x] if v == var else x) for v, x in fields.items()))
    with pytest.raises(FormError, match=var):
        submitted(ET.fromstring(str(both)), _FORM_TYPE)


def test_no_form_and_a_form_without_fields() -> None:
    assert submitted(None, _FORM_TYPE) is None
    assert submitted(ET.fromstring(str(_submitted())), _FORM_TYPE) == {}
    # a <reported/> or an <item/> is a result's, its fields are no answer of the submitter's
    result = _submitted()
    result.add_reported("pubsub#queue_requests")  # type: ignore[no-untyped-call]
    result.add_item({"pubsub#queue_requests": "5"})  # type: ignore[no-untyped-call]
    assert submitted(ET.fromstring(str(result)), _FORM_TYPE) == {}


def test_a_form_of_another_form_type_is_refused_not_read_as_the_expected_kind() -> None:
    # XEP-0068 §3: FORM_TYPE says what the fields mean. An owner's node_config form sent in a
    # subscribe's <options/> (or the other way) was read as the kind expected, its fields
    # taken for options: both requests now refuse it, naming the FORM_TYPE it should carry.
    assert _options(
        str(_submitted(("pubsub#queue_requests", "3"))).replace(_FORM_TYPE, _NODE_CONFIG)
    ) == ("modify", "bad-request", "invalid-options")
    assert _config(_submitted(("pubsub#node_type", "leaf")), _FORM_TYPE) == (
        "modify",
        "not-acceptable",
        None,
    )
    with pytest.raises(FormError, match=_FORM_TYPE):
        submitted(ET.fromstring(str(_submitted()).replace(_FORM_TYPE, _NODE_CONFIG)), _FORM_TYPE)


def test_a_form_without_form_type_is_read_as_the_expected_kind() -> None:
    # XEP-0004 does not require a FORM_TYPE (slixmpp writes one only when told), and the
    # element a form comes in says which kind it is: a form without one, or with an empty
    # one, is read as before
    form = _form()
    form["type"] = "submit"
    _add(form, var="pubsub#queue_requests", value="3")
    assert _options(form) == {"pubsub#queue_requests": "3"}
    assert _config(form) == {"pubsub#queue_requests": "3"}
    _add(form, var="FORM_TYPE", ftype="hidden")
    assert _options(form) == {"pubsub#queue_requests": "3"}


def test_two_forms_in_one_request_are_refused_bad_request_not_one_taken() -> None:
    """A subscribe's <options/>, a configure's <configure/> and a publish's
    <publish-options/> each carry one form. With two, the first was read and the second
    dropped without a word: a publish whose second form asked for an access model was
    stored where its publisher forbade it, a subscribe granted the first form's options."""
    asked = _submitted(("pubsub#queue_requests", "3"))
    other = _submitted(("pubsub#queue_requests", "7"))
    refused = ("modify", "bad-request", None)
    assert _options(f"{asked}{other}") == refused
    assert _config(f"{_submitted()}{_submitted()}") == refused
    access = str(_submitted(("pubsub#access_model", "whitelist"))).replace(
        _FORM_TYPE, ns.PUBLISH_OPTIONS
    )
    blank = str(_submitted()).replace(_FORM_TYPE, ns.PUBLISH_OPTIONS)
    publish = (
        f"<pubsub xmlns='{ns.PUBSUB}'><publish node='jobs'><item><job xmlns='urn:e'/></item>"
        "</publish><publish-options>{}</publish-options></pubsub>"
    )
    assert _request(publish.format(blank + access)) == refused
    assert _request(publish.format(blank + blank)) == refused
    # what the refusal says, for the one who sent it
    iq = ET.fromstring(
        "<iq xmlns='jabber:component:accept' type='set' id='1' from='alice@localhost/r'"
        f" to='pubsub.localhost'><pubsub xmlns='{ns.PUBSUB}'><subscribe node='jobs'"
        f" jid='alice@localhost'/><options>{asked}{other}</options></pubsub></iq>"
    )
    with pytest.raises(StanzaError, match="<options/> carries 2 data forms: send one"):
        parse_request(parse_iq(iq))
    # one form, and things beside it that are no form, are read as before
    assert _options(f"{asked}<note xmlns='urn:e'/>") == {"pubsub#queue_requests": "3"}
