"""`boxmq session`: how a session record is shown, when its end is refused, and an end on a
root no server serves (tests/integration/mqtt/test_mqtt_cli_session_end.py has real servers)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

import boxmq
from boxmq import cli
from boxmq.cli_session import _state, holding_server, listed
from boxmq.config import load_config
from boxmq.mqtt.packets import Will
from boxmq.mqtt.properties import EMPTY
from boxmq.mqtt.session import NEVER
from boxmq.mqtt.session_record import DeliveryOptions, SessionRecord, read_record, write_record
from boxmq.mqtt.stored import consumer_name
from boxmq.mqtt.succession import NONE, Chains, claim
from boxmq.store.process import process_token

ALIVE = process_token()  # this test's process
DEAD = f"{ALIVE.rsplit('-', 1)[0]}-1"  # this pid, another start: a process long gone
ELSEWHERE = "0000beef-4242-1"  # another machine's
AT = 1_800_000_000.0  # 2027-01-15T08:00:00+00:00


def test_an_away_session_shows_when_it_ends_and_one_with_no_expiry_never_ends() -> None:
    away = SessionRecord(
        "c", 3600, server=DEAD, disconnected_at=AT, options={"a/#": DeliveryOptions()}
    )
    shown = listed(away)
    assert shown["connected_to"] is None
    assert shown["kept_by"] == DEAD.split("-")[1]
    assert shown["server_running"] is False  # killed: the table says "(not running)"
    assert _state(shown).endswith(f"kept by process {shown['kept_by']} (not running)")
    assert (shown["away_since"], shown["ends"]) == (
        "2027-01-15T08:00:00+00:00",
        "2027-01-15T09:00:00+00:00",
    )
    assert shown["subscriptions"] == ["a/#"]
    forever = listed(SessionRecord("c", NEVER, disconnected_at=AT))
    assert (forever["expiry"], forever["ends"]) == (None, None)


def test_a_session_granted_more_than_the_servers_limit_shows_the_end_that_limit_gives() -> None:
    """A server caps what it finds on disk by its `max_session_expiry` (lowered since the
    session was granted), counted from the client's leaving (Lifetimes._capped): `listed`
    under that limit shows that end, not the one the record was granted."""
    away = SessionRecord("c", 3600, disconnected_at=AT)
    shown = listed(away, limit=60)
    assert (shown["expiry"], shown["ends"]) == (60, "2027-01-15T08:01:00+00:00")
    assert listed(away, limit=7200)["ends"] == "2027-01-15T09:00:00+00:00"  # under it: as is
    connected = listed(SessionRecord("c", NEVER, holder=ALIVE), limit=60)
    assert (connected["expiry"], connected["ends"]) == (60, None)  # "60s after it leaves"


def test_ls_with_the_servers_config_shows_the_end_its_limit_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`session ls --config FILE` reads the [mqtt.limits] max_session_expiry of the file
    `boxmq serve` runs with; without it, the end the record was granted."""
    root = tmp_path / "root"
    root.mkdir()
    write_record(str(root), SessionRecord("c", 3600, disconnected_at=AT))
    config = tmp_path / "boxmq.toml"
    config.write_text('[mqtt.limits]\nmax_session_expiry = "1m"\n')
    assert cli.main(["--data", str(root), "--json", "session", "ls", "--config", str(config)]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert (shown["expiry"], shown["ends"]) == (60, "2027-01-15T08:01:00+00:00")
    assert cli.main(["--data", str(root), "session", "ls", "--config", str(config)]) == 0
    assert "2027-01-15T08:01:00+00:00" in capsys.readouterr().out
    assert cli.main(["--data", str(root), "--json", "session", "ls"]) == 0
    [granted] = json.loads(capsys.readouterr().out)
    assert (granted["expiry"], granted["ends"]) == (3600, "2027-01-15T09:00:00+00:00")
    config.write_text("[mqtt.limits]\nmax_session_expiry = -1\n")
    assert cli.main(["--data", str(root), "session", "ls", "--config", str(config)]) == 1
    assert "max_session_expiry" in capsys.readouterr().err  # the file's error, as serve's


def test_ls_with_the_servers_config_lists_the_root_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`session ls --config FILE` listed the sessions of ./data (or $BOXMQ_DATA), not of the
    root the file's `data` names, which its server serves: "no persistent MQTT sessions".
    The root is taken as serve takes it: --data typed, then the file's, then $BOXMQ_DATA."""
    root = tmp_path / "etc" / "state"
    root.mkdir(parents=True)
    write_record(str(root), SessionRecord("c", 3600, disconnected_at=AT))
    config = tmp_path / "etc" / "boxmq.toml"
    config.write_text('data = "state"\n[mqtt.limits]\nmax_session_expiry = "1m"\n')
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "data").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("BOXMQ_DATA", raising=False)
    assert cli.main(["--json", "session", "ls", "--config", str(config)]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert (shown["client_id"], shown["expiry"]) == ("c", 60)
    monkeypatch.setenv("BOXMQ_DATA", str(elsewhere / "data"))  # the file wins over it
    assert cli.main(["--json", "session", "ls", "--config", str(config)]) == 0
    assert [s["client_id"] for s in json.loads(capsys.readouterr().out)] == ["c"]
    typed = ["--data", str(elsewhere / "data"), "--json", "session", "ls", "--config", str(config)]
    assert cli.main(typed) == 0  # a typed --data wins over the file
    assert json.loads(capsys.readouterr().out) == []
    config.write_text('[mqtt.limits]\nmax_session_expiry = "1m"\n')  # no data: $BOXMQ_DATA
    assert cli.main(["--json", "session", "ls", "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize("missing", [True, False], ids=["no folder", "a file"])
def test_ls_with_a_config_whose_root_is_no_folder_names_the_files_data(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    missing: bool,
) -> None:
    """The root of `session ls --config FILE` is the file's `data`: where it is no folder,
    the error said "check --data or $BOXMQ_DATA", neither of which the user gave; it names
    the key and its file, as serve's errors of such a root do ("data in FILE")."""
    config = tmp_path / "boxmq.toml"
    config.write_text('data = "state"\n')
    if not missing:
        (tmp_path / "state").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BOXMQ_DATA", raising=False)
    assert cli.main(["session", "ls", "--config", str(config)]) == 1
    said = capsys.readouterr().err
    assert said.startswith(f"boxmq session ls: no folder {tmp_path / 'state'} ("), said
    assert f"): check data in {config}" in said, said
    assert "--data" not in said, said
    assert "BOXMQ_DATA" not in said, said
    # Typed, --data wins over the file, and the error names it as before.
    assert cli.main(["--data", "typo", "session", "ls", "--config", str(config)]) == 1
    assert "): check --data or $BOXMQ_DATA " in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        "[mqtt]\nmax_session_expiry = 60\n",  # serve: "it goes in [mqtt.limits]"
        "[mqtt.limits]\nmax_sesion_expiry = 60\n",  # a typo: the cap not applied
        "[mqtt.limits]\nmax_session_expiry = 60\n[mqtt.listener]\nport = 1883\n",
        "fsync = 'sometimes'\n[mqtt.limits]\nmax_session_expiry = 60\n",
        "[xmpp]\ncomponent = 'queues.example.org'\n",
    ],
)
def test_ls_refuses_a_config_serve_refuses_in_serves_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """Only [mqtt.limits] was read, its keys unchecked: a file `boxmq serve` refuses was
    taken (exit 0) and its cap silently not applied. The whole file is checked, as serve's
    start checks it, and refused with the words `load_config` says."""
    root = tmp_path / "root"
    root.mkdir()
    write_record(str(root), SessionRecord("c", 3600, disconnected_at=AT))
    config = tmp_path / "boxmq.toml"
    config.write_text(text)
    with pytest.raises(boxmq.InvalidArgument) as refused:
        load_config(config)
    assert cli.main(["--data", str(root), "session", "ls", "--config", str(config)]) == 1
    assert str(refused.value) in capsys.readouterr().err


def test_ls_takes_a_config_whose_password_acl_and_tls_files_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The files a config names are serve's to read (the CLI's user may not have them):
    their keys are checked, not the files."""
    root = tmp_path / "root"
    root.mkdir()
    write_record(str(root), SessionRecord("c", 3600, disconnected_at=AT))
    config = tmp_path / "boxmq.toml"
    config.write_text(
        '[security]\npassword_file = "passwd"\nacl_file = "acl"\n'
        '[[mqtt.listener]]\ntls = { cert = "server.crt", key = "server.key" }\n'
        '[mqtt.limits]\nmax_session_expiry = "1m"\n'
    )
    assert cli.main(["--data", str(root), "--json", "session", "ls", "--config", str(config)]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert shown["expiry"] == 60


def test_a_session_taken_on_by_a_server_shows_which_one_counts_it() -> None:
    """Kept by none (a server took it on at its start, or from one that died): the one
    that counts its end and its Will is shown, and an end is not refused (it holds nothing
    of it in memory)."""
    for counter, running in ((ALIVE, True), (DEAD, False)):
        taken = SessionRecord("c", 3600, disconnected_at=AT, counted_by=counter)
        shown = listed(taken)
        assert (shown["kept_by"], shown["counted_by"]) == (None, counter.split("-")[1])
        assert shown["server_running"] is running
        gone = "" if running else " (not running)"
        assert _state(shown).endswith(f"counted by process {shown['counted_by']}{gone}")
        assert holding_server(taken, force=False) is None


def test_a_session_kept_by_a_dead_server_shows_the_one_that_succeeded_it(tmp_path: Path) -> None:
    """A server that takes on a dead one's sessions writes none of their records: it claims
    that one's succession (mqtt/succession.py). The one counting a session is found by
    following it, from the server the record names, or from none (an older boxmq's)."""
    root = str(tmp_path)
    kept = SessionRecord("c", 3600, server=DEAD, disconnected_at=AT)
    older = SessionRecord("d", 3600, disconnected_at=AT)
    for record in (kept, older):
        write_record(root, record)
    assert listed(older, Chains(root, None))["counted_by"] is None  # none took it on yet
    for dead in (DEAD, NONE):
        claim(root, dead, ALIVE)
    chains = Chains(root, None)
    shown = listed(kept, chains)
    assert (shown["kept_by"], shown["counted_by"]) == (DEAD.split("-")[1], str(os.getpid()))
    assert shown["server_running"] is True
    assert _state(shown).endswith(
        f"kept by process {shown['kept_by']} (not running), counted by process {os.getpid()}"
    )
    assert listed(older, chains)["counted_by"] == str(os.getpid())


def test_ls_lists_a_session_whose_succession_file_cannot_be_read_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """`session ls` follows each record through the succession files of the dead servers
    that counted it, catching only a missing file: one it cannot read (EISDIR here; EIO of
    a failing disk alike) ended the command with that error and listed no session at all
    (found by a second read). Every session is listed, that one as its record names its
    counter, and a warning names the file."""
    root = tmp_path / "root"
    root.mkdir()
    write_record(str(root), SessionRecord("c", 3600, disconnected_at=AT, counted_by=DEAD))
    write_record(str(root), SessionRecord("d", 3600, disconnected_at=AT))
    succession = root / ".mqtt" / "sessions" / f".succeeded-{DEAD}"
    succession.mkdir()
    with caplog.at_level(logging.WARNING, "boxmq"):
        assert cli.main(["--data", str(root), "--json", "session", "ls"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [s["client_id"] for s in shown] == ["c", "d"]
    assert shown[0]["counted_by"] == DEAD.split("-")[1]
    assert shown[0]["server_running"] is False
    [told] = caplog.messages
    assert told.startswith("client c: who counts its session is not known: "), told
    assert f"{succession}: EISDIR" in told


def test_a_session_held_by_a_running_server_is_refused_even_with_force() -> None:
    for record in (
        SessionRecord("c", NEVER, holder=ALIVE, server=ALIVE),
        SessionRecord("c", NEVER, server=ALIVE, disconnected_at=AT),
    ):
        for force in (False, True):
            said = holding_server(record, force=force)
            assert said is not None
            assert f"process {os.getpid()}, which still runs" in said


def test_a_server_gone_holds_nothing_and_one_elsewhere_needs_force() -> None:
    assert holding_server(SessionRecord("c", NEVER, holder=DEAD, server=DEAD), force=False) is None
    assert holding_server(SessionRecord("c", NEVER), force=False) is None
    elsewhere = SessionRecord("c", NEVER, server=ELSEWHERE, disconnected_at=AT)
    said = holding_server(elsewhere, force=False)
    assert said is not None
    assert "on another machine" in said
    assert "--force" in said
    assert holding_server(elsewhere, force=True) is None


def test_end_deletes_the_session_s_subscriptions_and_record_and_discards_its_will(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path)
    will = Will("wills/c", b"gone", 1, False, EMPTY)
    record = SessionRecord(
        "c",
        NEVER,
        server=DEAD,
        disconnected_at=AT,
        options={"a/#": DeliveryOptions()},
        will=will,
        will_due=AT + 10**9,
    )
    with boxmq.open(root) as box:
        box.subscribe("a/#", consumer_name("c"), durable=True).close()
        box.subscribe(
            "b/#", consumer_name("c"), durable=True
        ).close()  # `subscribe --name c --keep`
    write_record(root, record)
    assert cli.main(["--data", root, "session", "ls"]) == 0
    table = capsys.readouterr().out
    assert "c " in table
    assert "never" in table
    assert "a/#" in table
    assert cli.main(["--data", root, "--json", "session", "end", "c"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done == {
        "client_id": "c",
        "done": "ended",
        "subscriptions": ["a/#"],
        "qos2_discarded": 0,
        "will_discarded": "wills/c",
    }
    assert read_record(root, "c") is None
    with boxmq.open(root) as box:
        assert [text for text, _ in box.topics.subscribed(consumer_name("c"))] == ["b/#"]


def test_ls_says_there_is_none_as_ls_says_there_is_no_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path)
    assert cli.main(["--data", root, "session", "ls"]) == 0
    assert capsys.readouterr().out == f"no persistent MQTT sessions under {root}\n"
    assert cli.main(["--data", root, "--json", "session", "ls"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_end_of_no_session_names_the_root_and_what_lists_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # as `get` of no queue says `no queue 'q' under ROOT (see `boxmq ls`)`
    root = str(tmp_path)
    assert cli.main(["--data", root, "session", "end", "gone"]) == 1
    assert capsys.readouterr().err == (
        f"boxmq session end: no persistent MQTT session of client gone under {root} "
        "(see `boxmq session ls`)\n"
    )
    # Named as typed, as every command's error is: `boxmq session:` told not which action.
    (tmp_path / "file").write_text("")
    assert cli.main(["--data", str(tmp_path / "file"), "session", "ls"]) == 1
    assert capsys.readouterr().err.startswith(f"boxmq session ls: no folder {tmp_path / 'file'}")


def test_end_takes_a_client_id_and_ls_none(tmp_path: Path) -> None:
    # on a root that is not there too: it was told of the root (exit 1), not of the usage
    for root in (tmp_path, tmp_path / "missing"):
        for words in (
            ["session", "end"],
            ["session", "ls", "c"],
            ["session", "ls", "--force"],
            ["session", "end", "c", "--config", str(tmp_path / "boxmq.toml")],
        ):
            with pytest.raises(SystemExit) as exit:
                cli.main(["--data", str(root), *words])
            assert exit.value.code == 2


def test_end_of_an_empty_client_id_is_a_usage_error_that_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "destination name '' is empty or contains NUL", exit 1: no destination was
    given, and a persistent session's client id is never empty."""
    with pytest.raises(SystemExit) as exit:
        cli.main(["--data", str(tmp_path), "session", "end", ""])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "boxmq session: error: CLIENT_ID is empty: give the client id `boxmq session ls` "
        "lists (a persistent session's is never empty)"
    )
