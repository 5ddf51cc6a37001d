"""The ACL file: parsing, errors that name file and line, and decisions checked against a
brute-force reading of the rules over every topic of a small universe."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmq.core.filter_relations import overlaps
from boxmq.core.topics import matches, validate_filter
from boxmq.errors import InvalidArgument, InvalidTopic
from boxmq.mqtt.acl import Access, Acl, Rule

EXAMPLE = """\
# anonymous clients may read public/
topic read public/#

user alice
topic readwrite alice/#
topic deny alice/secret/#
topic write shared/in

user bob
topic bob/#

pattern readwrite devices/%c/#
pattern read users/%u/inbox
"""


@pytest.fixture
def acl(tmp_path: Path) -> Acl:
    path = tmp_path / "acl"
    path.write_text(EXAMPLE)
    return Acl.load(path)


def test_sections_and_default_access(acl: Acl) -> None:
    assert acl.anonymous == (Rule(Access.READ, "public/#", 2),)
    assert acl.users["bob"] == (Rule(Access.READWRITE, "bob/#", 10),)
    assert [r.filter for r in acl.patterns] == ["devices/%c/#", "users/%u/inbox"]


def test_publish_needs_write_and_no_deny(acl: Acl) -> None:
    assert acl.can_publish("alice", "c1", "alice/notes")
    assert not acl.can_publish("alice", "c1", "alice/secret/plans")
    assert acl.can_publish("alice", "c1", "shared/in")
    assert not acl.can_publish("alice", "c1", "public/news")  # not in alice's section
    assert not acl.can_publish(None, "c1", "public/news")  # anonymous may only read
    assert not acl.can_publish("mallory", "c1", "alice/notes")  # unknown user: nothing


def test_subscribe_needs_a_read_rule_that_covers_the_whole_filter(acl: Acl) -> None:
    assert acl.can_subscribe(None, "c1", "public/#")
    assert acl.can_subscribe(None, "c1", "public/+/weather")
    assert not acl.can_subscribe(None, "c1", "#")
    assert not acl.can_subscribe("alice", "c1", "shared/in")  # write only
    assert acl.can_subscribe("bob", "c1", "bob/+")


def test_a_deny_rule_refuses_every_filter_that_could_receive_its_topics(acl: Acl) -> None:
    assert acl.can_subscribe("alice", "c1", "alice/public/#")
    assert not acl.can_subscribe("alice", "c1", "alice/#")  # would receive alice/secret/...
    assert not acl.can_subscribe("alice", "c1", "alice/+/plans")


def test_shared_subscriptions_are_checked_by_their_filter(acl: Acl) -> None:
    assert acl.can_subscribe("bob", "c1", "$share/workers/bob/jobs")
    assert not acl.can_subscribe("bob", "c1", "$share/workers/alice/jobs")
    assert not acl.can_subscribe("bob", "c1", "$share/bad+name/bob/jobs")  # invalid: refused


def test_patterns_substitute_client_id_and_user_name(acl: Acl) -> None:
    assert acl.can_publish(None, "sensor-7", "devices/sensor-7/temp")
    assert not acl.can_publish(None, "sensor-7", "devices/sensor-8/temp")
    assert acl.can_subscribe("bob", "x", "users/bob/inbox")
    assert not acl.can_subscribe("bob", "x", "users/alice/inbox")
    assert not acl.can_subscribe(None, "x", "users//inbox")  # no user name: %u never applies


@pytest.mark.parametrize("client_id", ["+", "#", "a/b", "x+"])
def test_a_client_id_with_wildcards_or_levels_gets_no_pattern_rule(
    acl: Acl, client_id: str
) -> None:
    # "+" would make devices/+/# (everyone's devices); "a/b" would reach into client "a/b"'s
    # levels from the name "a" and the other way round.
    assert not acl.can_subscribe(None, client_id, f"devices/{client_id}/#")
    assert not acl.can_publish(None, client_id, "devices/a/b/x")


@pytest.mark.parametrize("client_id", ["$SYS", "$share", "$x"])
def test_a_value_never_makes_a_patterns_first_level_a_dollar_one(client_id: str) -> None:
    # Client id "$SYS" made `%c/#` the rule `$SYS/#`: it could publish the server's own
    # figures ($SYS/broker/clients/connected) to every client reading them.
    acl = Acl.parse("pattern readwrite %c/#\npattern read %u/%c\n", Path("acl"))
    assert not acl.can_publish(None, client_id, f"{client_id}/broker/clients/connected")
    assert not acl.can_subscribe(None, client_id, f"{client_id}/#")
    assert not acl.can_subscribe("$SYS", "c", "$SYS/c")
    assert acl.can_publish(None, "c", "c/broker")
    assert acl.can_subscribe("u", "c", "u/c")
    written = Acl.parse("pattern read $SYS/%c/#\n", Path("acl"))  # a rule written so gives it
    assert written.can_subscribe(None, "c", "$SYS/c/x")


def test_a_user_name_holding_a_placeholder_is_not_substituted_twice(tmp_path: Path) -> None:
    acl = Acl.parse("pattern read u/%u/c/%c\n", tmp_path / "acl")
    assert acl.can_subscribe("%c", "id", "u/%c/c/id")
    assert not acl.can_subscribe("%c", "id", "u/id/c/id")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topic read a/#/b\n", "acl:1: topic filter 'a/#/b'"),
        ("\n# c\nuser\n", "acl:3: `user` needs a user name"),
        ("user a\nsubscribe a/b\n", "acl:2: unknown keyword 'subscribe'"),
        ("topic\n", "acl:1: expected [read|write|readwrite|deny] FILTER"),
        ("topic $share/g/a\n", "acl:1: '$share/g/a': name the topic filter without"),
        ("pattern read a/%u+/b\n", "acl:1: topic filter 'a/%u+/b'"),
        # An access word alone is not a filter: it would have granted readwrite on "deny".
        ("topic deny\n", "acl:1: 'deny' is an access with no topic filter after it"),
        ("user a\ntopic read \n", "acl:2: 'read' is an access with no topic filter"),
        ("pattern write\n", "acl:1: 'write' is an access with no topic filter"),
        # A misspelt access was part of the filter, a readwrite rule: the deny was lost.
        ("user a\ntopic denny a/secret/#\n", "acl:2: 'denny' is no access: expected read,"),
        ("topic Read news/#\n", "acl:1: 'Read' is no access: expected read, write, readwr"),
        ("pattern rw d/%c\n", "acl:1: 'rw' is no access: expected read, write, readwrite"),
        ("topic my room/t\n", "acl:1: 'my' is no access: expected read, write, readwrite or"),
    ],
)
def test_parse_errors_name_the_file_and_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "acl"
    path.write_text(text)
    with pytest.raises(InvalidArgument) as caught:
        Acl.load(path)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")


def test_a_byte_order_mark_is_not_part_of_the_first_keyword(tmp_path: Path) -> None:
    path = tmp_path / "acl"
    path.write_bytes(b"\xef\xbb\xbfuser alice\ntopic read a/#\n")
    acl = Acl.load(path)
    assert acl.can_subscribe("alice", "c", "a/b")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"ACL file .*nope does not exist"):
        Acl.load(tmp_path / "nope")


def test_words_may_be_separated_by_tabs_and_a_filter_may_hold_spaces() -> None:
    acl = Acl.parse("user\talice\ntopic\tread  a b/#\n", Path("acl"))
    assert acl.users["alice"] == (Rule(Access.READ, "a b/#", 2),)
    assert acl.can_subscribe("alice", "c", "a b/c")
    assert acl.can_subscribe("alice", "c", "a b/c")  # the remembered answer is the same
    assert not acl.can_subscribe("alice", "c", "a/c")


def test_a_topic_named_like_an_access_word_is_a_topic_after_its_access() -> None:
    acl = Acl.parse("topic readwrite write\ntopic deny read\n", Path("acl"))
    assert acl.anonymous == (Rule(Access.READWRITE, "write", 1), Rule(Access.DENY, "read", 2))


# -- decisions against brute force -----------------------------------------------------------

WORDS = ("a", "b", "$s")
TOPICS = [
    "/".join(levels)
    for depth in range(1, 5)
    for levels in itertools.product((*WORDS, ""), repeat=depth)
]


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.sampled_from((*WORDS, "+")), min_size=1, max_size=3))
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


rules = st.lists(
    st.builds(lambda a, f: f"topic {a.value} {f}", st.sampled_from(Access), filters()),
    max_size=4,
)


def _readable(lines: list[str], topic: str) -> bool:
    """The meaning of the rules for one topic, read naively off the text."""
    parsed = [line.split(" ", 2)[1:] for line in lines]
    if any(a == "deny" and matches(f, topic) for a, f in parsed):
        return False
    return any(a in ("read", "readwrite") and matches(f, topic) for a, f in parsed)


@given(rules, filters(), st.booleans())
def test_an_allowed_subscription_never_receives_an_unreadable_topic(
    lines: list[str], wanted: str, shared: bool
) -> None:
    acl = Acl.parse("user u\n" + "\n".join(lines), Path("acl"))
    allowed = acl.can_subscribe("u", "c", f"$share/g/{wanted}" if shared else wanted)
    received = [t for t in TOPICS if matches(wanted, t)]
    if allowed:
        assert all(_readable(lines, t) for t in received)


@given(rules, filters())
def test_a_filter_within_one_read_rule_and_clear_of_denies_is_allowed(
    lines: list[str], wanted: str
) -> None:
    acl = Acl.parse("user u\n" + "\n".join(lines), Path("acl"))
    parsed = [line.split(" ", 2)[1:] for line in lines]
    received = [t for t in TOPICS if matches(wanted, t)]
    inside_one = any(
        a in ("read", "readwrite") and all(matches(f, t) for t in received) for a, f in parsed
    )
    clear = not any(a == "deny" and matches(f, t) for a, f in parsed for t in received)
    assert acl.can_subscribe("u", "c", wanted) == (inside_one and clear)


@given(rules, st.lists(st.sampled_from((*WORDS, "")), min_size=1, max_size=4))
def test_publish_agrees_with_the_naive_reading(lines: list[str], levels: list[str]) -> None:
    topic = "/".join(levels)
    acl = Acl.parse("user u\n" + "\n".join(lines), Path("acl"))
    parsed = [line.split(" ", 2)[1:] for line in lines]
    naive = not any(a == "deny" and matches(f, topic) for a, f in parsed) and any(
        a in ("write", "readwrite") and matches(f, topic) for a, f in parsed
    )
    assert acl.can_publish("u", "c", topic) == naive


@given(
    st.sampled_from(Access),
    st.sampled_from(("d/%c/#", "u/%u/+", "%u/%c", "x/%c")),
    st.text(alphabet="ab+#/%cu$", min_size=1, max_size=4),
    st.text(alphabet="ab+#/%cu$", min_size=1, max_size=4) | st.none(),
    filters(),
)
def test_a_pattern_acts_as_its_literal_substitution_or_not_at_all(
    access: Access, pattern: str, client_id: str, username: str | None, wanted: str
) -> None:
    acl = Acl.parse(f"pattern {access.value} {pattern}\n", Path("acl"))
    values = {"%u": username, "%c": client_id}
    used = [values[p] for p in ("%u", "%c") if p in pattern]
    safe = all(v and not any(c in v for c in "+#/") for v in used)
    literal = pattern.replace("%u", "\0u").replace("%c", "\0c")
    literal = literal.replace("\0u", username or "").replace("\0c", client_id)
    safe = safe and not literal.startswith("$")  # no value opens the server's `$` topics
    reference = Acl.parse(f"topic {access.value} {literal}\n" if safe else "", Path("acl"))
    topic = wanted.replace("+", "a").replace("#", "b")
    assert acl.can_subscribe(username, client_id, wanted) == reference.can_subscribe(
        None, "other", wanted
    )
    assert acl.can_publish(username, client_id, topic) == reference.can_publish(
        None, "other", topic
    )


def test_a_refusal_after_the_file_changed_says_to_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The file is read at start only: a rule added since still refused alice, and the log
    said only `may not subscribe`, nothing of the change the operator was waiting for."""
    path = tmp_path / "acl"
    path.write_text("user alice\ntopic alice/#\n")
    clock = [0.0]
    served = dataclasses.replace(Acl.load(path), clock=lambda: clock[0])
    assert not served.can_subscribe("alice", "c1", "news/#")
    assert caplog.messages == []  # the file is as it was read
    path.write_text("user alice\ntopic alice/#\ntopic read news/#\n")
    clock[0] = 1.0
    assert not served.can_subscribe("alice", "c1", "news/#")  # as read at start
    assert not served.can_publish("alice", "c1", "news/x")
    assert served.can_publish("alice", "c1", "alice/x")
    assert caplog.messages == [
        f"the ACL file {path} has changed since boxmq serve read it at start: it is read at "
        "start only, so its changes are not in force (restart boxmq serve)"
    ]  # once per change


def test_refusals_in_a_loop_look_at_the_file_once_a_second(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each refusal stat-ed the ACL file on the event loop, so a client refused in a tight
    loop paid a system call per PUBLISH; a change is now looked for at most once a second,
    and told at the first refusal that looks."""
    path = tmp_path / "acl"
    path.write_text("user alice\ntopic alice/#\n")
    clock = [0.0]
    served = dataclasses.replace(Acl.load(path), clock=lambda: clock[0])
    assert not served.can_publish("alice", "c1", "news/x")  # looks: as it was read
    path.write_text("user alice\ntopic alice/#\ntopic news/#\n")
    clock[0] = 0.999
    for _ in range(100):
        assert not served.can_publish("alice", "c1", "news/x")
    assert caplog.messages == []  # not looked at again within the second
    clock[0] = 1.0
    assert not served.can_publish("alice", "c1", "news/x")
    assert len(caplog.messages) == 1
    assert "has changed since boxmq serve read it" in caplog.messages[0]


@given(
    st.sampled_from(("d/%c/#", "u/%u/+", "%u/%c", "x/%c")),
    st.text(alphabet="ab+#/%cu$", min_size=1, max_size=4),
    st.text(alphabet="ab+#/%cu$", max_size=4),
    filters(),
)
def test_a_deny_pattern_acts_as_its_literal_substitution_whatever_the_value(
    pattern: str, client_id: str, username: str, wanted: str
) -> None:
    # A deny skipped for a value holding '/' (client `d1/x`, `deny devices/%c/firmware/#`)
    # widened the rights of a client that chose its id; a deny is filled in as it is, and a
    # filter no topic can match (`a#` in a level) denies nothing.
    granted = "pattern readwrite #\npattern readwrite $s/#\n"
    acl = Acl.parse(f"{granted}pattern deny {pattern}\n", Path("acl"))
    everything = Acl.parse(granted, Path("acl"))
    literal = pattern.replace("%u", "\0u").replace("%c", "\0c")
    literal = literal.replace("\0u", username).replace("\0c", client_id)
    try:
        validate_filter(literal)
    except InvalidTopic:  # `a#` in a level: no topic matches it
        literal = ""
    topic = wanted.replace("+", "a").replace("#", "b")
    assert acl.can_subscribe(username, client_id, wanted) == (
        everything.can_subscribe(username, client_id, wanted)
        and not (literal and overlaps(literal, wanted))
    )
    assert acl.can_publish(username, client_id, topic) == (
        everything.can_publish(username, client_id, topic)
        and not (literal and matches(literal, topic))
    )
