"""`boxmq serve --xmpp-*`: where the secret comes from, and what is refused."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from boxmq import cli
from boxmq.errors import InvalidArgument
from boxmq.xmpp.settings import SECRET_ENV, XmppSettings, settings_from

Rule = Callable[[object], str | None]


def test_no_component_no_xmpp() -> None:
    assert settings_from(None, None, secret=None, secret_file=None, environ={}) is None


def test_the_secret_file_wins_over_the_environment_and_the_flag(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-file\n")
    settings = settings_from(
        "queue.example.org",
        ("10.0.0.1", 5347),
        secret="from-flag",
        secret_file=str(secret),
        environ={SECRET_ENV: "from-env"},
    )
    assert settings is not None
    assert (settings.secret, settings.host, settings.port) == ("from-file", "10.0.0.1", 5347)
    from_env = settings_from(
        "q.example.org", None, secret="from-flag", secret_file=None, environ={SECRET_ENV: "e"}
    )
    assert from_env is not None
    assert (from_env.secret, from_env.host, from_env.port) == ("e", "127.0.0.1", 5347)


def test_a_secret_file_not_in_utf8_is_one_line_naming_it(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes("s\u00e9cret\n".encode("latin-1"))
    with pytest.raises(InvalidArgument) as caught:
        settings_from("q.example.org", None, secret=None, secret_file=str(secret), environ={})
    assert str(caught.value) == (
        f"--xmpp-secret-file {secret}: not UTF-8 text (byte 0xe9): save the secret as UTF-8"
    )
    secret.write_bytes(b"\xef\xbb\xbfs\xc3\xa9cret\n")  # UTF-8 with a BOM (Notepad)
    settings = settings_from(
        "q.example.org", None, secret=None, secret_file=str(secret), environ={}
    )
    assert settings is not None
    assert settings.secret == "s\u00e9cret"


@pytest.mark.parametrize(
    ("component", "server", "secret", "says"),
    [
        ("q.example.org", None, None, "needs its secret"),
        (None, ("h", 1), "s", "need --xmpp-component"),
        ("user@q.example.org", None, "s", "bare domain"),
        # Through the Python API, where no --xmpp-server check stands: slixmpp logged the
        # resolver's UnicodeError as a traceback every 3 s, forever.
        ("q.example.org", ("a..b", 5347), "s", "host 'a..b' is no host name: each part"),
        ("q.example.org", ("a" * 64, 5347), "s", "is no host name"),
        ("q.example.org", ("\udcff", 5347), "s", "server host .*: not valid Unicode"),
    ],
)
def test_refusals_say_what_to_fix(
    component: str | None, server: tuple[str, int] | None, secret: str | None, says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        settings_from(component, server, secret=secret, secret_file=None, environ={})


def test_any_xmpp_flag_without_the_component_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgument) as caught:
        settings_from(None, None, secret=None, secret_file=None, environ={}, lock_timeout=60.0)
    assert str(caught.value) == "--xmpp-lock-timeout needs --xmpp-component NAME"
    with pytest.raises(InvalidArgument) as caught:
        settings_from(None, ("h", 1), secret=None, secret_file="f", environ={})
    assert str(caught.value) == "--xmpp-server and --xmpp-secret-file need --xmpp-component NAME"


def test_the_lock_timeout_is_passed_on() -> None:
    settings = settings_from(
        "q.example.org", None, secret="s", secret_file=None, environ={}, lock_timeout=2.5
    )
    assert settings is not None
    assert settings.lock_timeout == 2.5


def test_the_stanza_size_limit_is_passed_on_and_prosodys_by_default() -> None:
    def limit(given: int | None) -> int:
        settings = settings_from(
            "q.example.org", None, secret="s", secret_file=None, environ={}, stanza_size_limit=given
        )
        assert settings is not None
        return settings.stanza_size_limit

    assert limit(None) == 512 * 1024  # Prosody's component_stanza_size_limit
    assert limit(4 * 1024 * 1024) == 4 * 1024 * 1024


@pytest.mark.parametrize("limit", [0, -1, 16383, True, 2.5e6, "1MiB"])
def test_a_stanza_size_limit_that_is_none_says_what_to_give(limit: object) -> None:
    # from Python, where no --xmpp-stanza-size-limit parser stands before it
    with pytest.raises(InvalidArgument) as caught:
        XmppSettings("q.example.org", "127.0.0.1", 5347, "s", stanza_size_limit=limit)  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"XmppSettings stanza_size_limit {limit!r} is no stanza size limit: give the XMPP server's "
        "limit for the component in bytes (Prosody's component_stanza_size_limit, 524288 by "
        "default), at least 16384"
    )


@pytest.mark.parametrize("given", ["100", "1MiB", "5_000_000"])
def test_serve_refuses_a_bad_stanza_size_limit_as_a_usage_error(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        cli.main(["serve", "--xmpp-component", "q.x", "--xmpp-stanza-size-limit", given])
    assert exit.value.code == 2
    assert "argument --xmpp-stanza-size-limit: " in capsys.readouterr().err


def test_the_stanza_size_limit_without_the_component_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgument) as caught:
        settings_from(
            None, None, secret=None, secret_file=None, environ={}, stanza_size_limit=2**20
        )
    assert str(caught.value) == "--xmpp-stanza-size-limit needs --xmpp-component NAME"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"component": "a@b"}, "XmppSettings component 'a@b': give a bare domain"),
        ({"host": "a..b"}, "XmppSettings host 'a..b' is no host name: each part"),
        ({"port": 0}, "XmppSettings port 0 is not a TCP port"),
        ({"secret": ""}, "XmppSettings secret is empty"),
        ({"lock_timeout": 0.0}, "XmppSettings lock_timeout 0.0: give a positive number"),
        # NaN passed `<= 0`, as every comparison does
        ({"lock_timeout": math.nan}, "XmppSettings lock_timeout nan: give a positive number"),
        ({"reconnect_max": -1.0}, "XmppSettings reconnect_max -1.0: give a positive number"),
        # past a century: taken here, then refused by the consumer at the first subscribe
        ({"lock_timeout": 2.0**63}, "XmppSettings lock_timeout 9.223372036854776e+18: at most"),
        # each was a TypeError or AttributeError from inside a check, naming no setting
        ({"component": b"q.x"}, "XmppSettings component b'q.x' is a bytes: give a bare domain"),
        ({"host": 5}, "XmppSettings host 5 is an int: give a host name or address as a str"),
        ({"port": "5347"}, "XmppSettings port '5347' is a str: give a TCP port, an int from 1"),
        ({"lock_timeout": "30"}, "XmppSettings lock_timeout '30' is a str: give a positive"),
        # and these passed, as port 1 and a one-second wait
        ({"port": True}, "XmppSettings port True is a bool: give a TCP port"),
        ({"port": 5347.0}, "XmppSettings port 5347.0 is a float: give a TCP port"),
        ({"reconnect_max": True}, "XmppSettings reconnect_max True is a bool: give a positive"),
        ({"secret": b"s"}, "XmppSettings secret is a bytes: give the secret as a str"),
    ],
)
def test_from_python_an_error_names_the_setting_as_written(
    given: dict[str, object], says: str
) -> None:
    """The errors named `boxmq serve`'s flags (--xmpp-component) to a Python caller, who
    wrote no flag; the command line's still name the flags."""
    settings: dict[str, object] = {
        "component": "q.example.org",
        "host": "127.0.0.1",
        "port": 5347,
        "secret": "s",
    }
    with pytest.raises(InvalidArgument) as caught:
        XmppSettings(**(settings | given))  # type: ignore[arg-type]
    assert str(caught.value).startswith(says)


def test_from_the_command_line_an_error_names_the_flag() -> None:
    with pytest.raises(InvalidArgument) as caught:
        settings_from("a@b", None, secret="s", secret_file=None, environ={})
    assert str(caught.value) == "--xmpp-component 'a@b': give a bare domain"
    with pytest.raises(InvalidArgument) as caught:
        settings_from("q.x", ("127.0.0.1", 0), secret="s", secret_file=None, environ={})
    assert str(caught.value) == "--xmpp-server port 0 is not a TCP port"


def test_a_component_name_that_is_no_jid_is_named_as_written() -> None:
    # slixmpp refuses 'a b' when the component is made; that error named the flag
    # (--xmpp-component) to a Python caller too.
    pytest.importorskip("slixmpp")
    with pytest.raises(InvalidArgument) as caught:
        XmppSettings("a b", "127.0.0.1", 5347, "s")
    assert str(caught.value).startswith("XmppSettings component 'a b': not a domain name (")
    with pytest.raises(InvalidArgument) as caught:
        settings_from("a b", None, secret="s", secret_file=None, environ={})
    assert str(caught.value).startswith("--xmpp-component 'a b': not a domain name (")


def test_a_component_name_too_long_for_its_folder_is_a_usage_error() -> None:
    # a JID (each label under 63), but 601 bytes once escaped: it passed, and serve stopped
    # at the component's start on a "destination name ... over the 255-byte file-name limit"
    pytest.importorskip("slixmpp")
    name = ".".join(["\u00fc" * 50] * 2)
    with pytest.raises(InvalidArgument) as caught:
        settings_from(name, None, secret="s", secret_file=None, environ={})
    assert str(caught.value) == (
        f"--xmpp-component {name!r}: too long: its folder under the root passes 255 bytes"
    )


def test_serve_runs_each_rule_of_the_settings_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The command line checked the component's name, settings_from the whole table, then
    # XmppSettings the whole table again: each rule (slixmpp's JID parse among them) three
    # times at every start.
    from boxmq import cli_parser
    from boxmq.xmpp import settings

    runs: dict[str, int] = {}
    for field, rule in settings._RULES.items():

        def counted(value: object, field: str = field, rule: Rule = rule) -> str | None:
            runs[field] = runs.get(field, 0) + 1
            return rule(value)

        monkeypatch.setitem(settings._RULES, field, counted)
    args = cli_parser.parser().parse_args(
        ["serve", "--xmpp-component", "Q.Example.", "--xmpp-secret", "s"]
    )
    cli._USAGE_CHECKS["serve"](args)
    assert runs == dict.fromkeys(settings._RULES, 1)
    assert args.xmpp_settings == XmppSettings("Q.Example.", "127.0.0.1", 5347, "s")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--xmpp-component", "a@b", "--xmpp-secret", "s"], "--xmpp-component 'a@b': give a"),
        (["--xmpp-component", "q.x"], "the component needs its secret: --xmpp-secret-file"),
        (["--xmpp-secret", "s"], "--xmpp-secret needs --xmpp-component NAME"),
    ],
)
def test_serve_says_a_refused_setting_as_a_usage_error_before_the_config(
    flags: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.toml"  # read after: its error would be the one said
    with pytest.raises(SystemExit) as exit:
        cli.main(["serve", "--no-mqtt", "--config", str(missing), *flags])
    assert exit.value.code == 2
    assert says in capsys.readouterr().err
