"""`boxmq passwd`, run as a user runs it: a separate process."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from harness.output import read_until

from boxmq.errors import InvalidArgument
from boxmq.mqtt.passwords import PasswordFile


def passwd(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "boxmq.cli", "passwd", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        env=os.environ.copy(),
    )


def test_add_change_and_delete_users(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    added = passwd(str(path), "alice", "--password", "wonder")
    assert added.returncode == 0, added.stderr
    assert added.stdout == f"added user alice in {path}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    piped = passwd(str(path), "bob", "--stdin", stdin="builder\n")
    assert piped.returncode == 0, piped.stderr
    changed = passwd(str(path), "alice", "--password", "land")
    assert changed.stdout == f"changed the password of alice in {path}\n"
    users = PasswordFile.load(path)
    assert users.authenticate("alice", b"land", "c")
    assert users.authenticate("bob", b"builder", "c")  # the newline is not part of it
    deleted = passwd(str(path), "bob", "--delete")
    assert deleted.stdout == f"deleted user bob from {path}\n"
    assert PasswordFile.load(path).users() == ("alice",)
    assert not (tmp_path / "data").exists()  # passwd opens no root folder


def test_a_user_written_twice_is_deleted_from_both_lines(tmp_path: Path) -> None:
    """A file edited by hand with alice on two lines: `--delete` said "deleted" and removed the
    first, and alice still got in with the second's password."""
    path = tmp_path / "passwd"
    for user, password in (("alice", "one"), ("bob", "two"), ("alice", "three")):
        old = path.read_text() if path.exists() else ""
        path.unlink(missing_ok=True)
        assert passwd(str(path), user, "--password", password).returncode == 0
        path.write_text(old + path.read_text())  # appended by hand, as an editor would
    with pytest.raises(InvalidArgument, match="user 'alice' appears twice, on lines 1 and 3"):
        PasswordFile.load(path)
    deleted = passwd(str(path), "alice", "--delete")
    assert deleted.stdout == f"deleted user alice from {path}\n", deleted.stderr
    assert PasswordFile.load(path).users() == ("bob",)


def test_a_rewrite_keeps_the_mode_and_owner_given_to_the_file(tmp_path: Path) -> None:
    """Shared with a broker running as another user (0640, its group): still readable by it
    after `boxmq passwd`, which made it 0600 and the caller's."""
    path = tmp_path / "passwd"
    assert passwd(str(path), "alice", "--password", "wonder").returncode == 0
    os.chmod(path, 0o640)
    owner = (os.getuid(), 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    os.chown(path, *owner)  # as root: group nogroup, as the broker's might be
    changed = passwd(str(path), "bob", "--password", "builder")
    assert changed.returncode == 0, changed.stderr
    after = path.stat()
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_uid, after.st_gid) == owner


def test_a_file_behind_a_symbolic_link_is_rewritten_and_the_link_kept(tmp_path: Path) -> None:
    """/etc/boxmq/passwd -> /srv/secrets/passwd: the broker may read either name."""
    (tmp_path / "secrets").mkdir()
    real = tmp_path / "secrets" / "passwd"
    assert passwd(str(real), "alice", "--password", "wonder").returncode == 0
    link = tmp_path / "passwd"
    link.symlink_to(Path("secrets") / "passwd")
    added = passwd(str(link), "bob", "--password", "builder")
    assert added.returncode == 0, added.stderr
    assert link.is_symlink()
    assert PasswordFile.load(real).users() == ("alice", "bob")
    deleted = passwd(str(link), "alice", "--delete")
    assert deleted.returncode == 0, deleted.stderr
    assert link.is_symlink()
    assert PasswordFile.load(real).users() == ("bob",)
    assert sorted(p.name for p in tmp_path.glob("secrets/*")) == ["passwd"]  # no temporary


def _at_the_prompt(path: Path, *typed: bytes) -> subprocess.CompletedProcess[str]:
    """`boxmq passwd FILE alice` asking on a terminal (a pseudo-terminal of its own session,
    where getpass prompts on stderr), each of `typed` sent once a prompt is shown."""
    main, terminal = os.openpty()
    command = [sys.executable, "-m", "boxmq.cli", "passwd", str(path), "alice"]
    with subprocess.Popen(
        command,
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # no controlling terminal: getpass asks on stdin, not /dev/tty
    ) as run:
        os.close(terminal)
        assert run.stderr is not None
        try:
            for keys in typed:
                # getpass flushes the terminal's input first: each keys once its prompt shows.
                # A read with a deadline: a plain read(1) waited as long as a run that showed
                # no prompt lived, and that run (waiting on the terminal) never ended.
                shown = read_until(run.stderr, lambda said: said.endswith(b": "), 30, most=1)
                assert shown.endswith(b": "), f"no prompt within 30 s, only {shown!r}"
                os.write(main, keys)
            out, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:  # left by a failed check: Popen's exit then waits for it
                run.kill()
    os.close(main)
    return subprocess.CompletedProcess(command, run.returncode, out.decode(), err.decode())


def test_the_prompt_asks_twice_and_ctrl_d_there_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    added = _at_the_prompt(path, b"wonder\n", b"wonder\n")
    assert (added.returncode, added.stdout) == (0, f"added user alice in {path}\n"), added.stderr
    assert PasswordFile.load(path).authenticate("alice", b"wonder", "c")
    ended = _at_the_prompt(path, b"\x04")  # Ctrl-D: a traceback of getpass's EOFError before
    assert (ended.returncode, ended.stderr) == (
        1,
        "boxmq passwd: no password typed (Ctrl-D); nothing changed\n",
    )
    assert PasswordFile.load(path).authenticate("alice", b"wonder", "c")


def test_errors_are_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    cases = [
        (("alice",), None, "no terminal to ask on: give --password, or --stdin and pipe it in"),
        (("alice", "--stdin"), "\n", "the password must not be empty"),
        (
            ("al:ice", "--password", "x"),
            None,
            "user name 'al:ice' must not contain ':' or control characters",
        ),
        (("alice", "--delete"), None, f"password file {path} does not exist"),
        (
            ("u\udcff", "--password", "x"),
            None,
            "user name 'u\\xff' is not UTF-8, which an MQTT user name must be",
        ),  # argv b"u\xff"
        (
            ("u" * 65_536, "--password", "x"),
            None,
            "a user name of 65536 bytes: MQTT allows at most 65535",
        ),
        (
            ("alice", "--password", "p" * 65_536),
            None,
            "a password of 65536 bytes: MQTT allows at most 65535",
        ),
    ]
    for args, stdin, message in cases:
        done = passwd(str(path), *args, stdin=stdin if stdin is not None else "")
        assert done.returncode == 1, (args, done.stdout)
        assert done.stderr == f"boxmq passwd: {message}\n", args
    assert not path.exists()


def test_a_file_that_is_no_regular_file_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    """The new file is renamed over the old: `boxmq passwd /dev/null alice` (as root) made
    /dev/null a regular file holding alice's hash, and a named pipe was read first, which
    waited forever for a writer. A pipe here: a device would need root, and replacing one
    is the harm."""
    pipe = tmp_path / "passwd"
    os.mkfifo(pipe)
    for args in (("alice", "--password", "x"), ("alice", "--delete")):
        done = subprocess.run(
            [sys.executable, "-m", "boxmq.cli", "passwd", str(pipe), *args],
            capture_output=True,
            text=True,
            timeout=20,  # the time a read of the pipe waited, at most
        )
        assert done.returncode == 1
        assert done.stderr == (
            f"boxmq passwd: cannot write {pipe}: it is not a regular file (a folder, a device, "
            "a pipe): name the password file itself\n"
        )
        assert stat.S_ISFIFO(pipe.stat().st_mode)


def test_a_password_that_is_not_utf8_is_taken_as_the_bytes_typed(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    done = passwd(str(path), "dave", "--password", "p\udcff")  # argv b"p\xff": binary data
    assert done.returncode == 0, done.stderr
    assert PasswordFile.load(path).authenticate("dave", b"p\xff", "c")


def test_password_and_delete_together_is_a_usage_error(tmp_path: Path) -> None:
    done = passwd(str(tmp_path / "p"), "alice", "--password", "x", "--delete")
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr


def test_json_prints_what_was_done_as_one_object(tmp_path: Path) -> None:
    """`--json` prints one JSON document for every command (docs/cli.md), passwd's too."""
    path = tmp_path / "passwd"

    def as_json(*args: str) -> object:
        done = subprocess.run(
            [sys.executable, "-m", "boxmq.cli", "--json", "passwd", str(path), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    record = {"file": str(path), "user": "alice"}
    assert as_json("alice", "--password", "wonder") == {**record, "done": "added"}
    assert as_json("alice", "--password", "land") == {**record, "done": "changed"}
    assert as_json("alice", "--delete") == {**record, "done": "deleted"}


def test_stdin_of_more_than_one_line_is_refused_not_cut(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    done = passwd(str(path), "bob", "--stdin", stdin="first\nsecond\n")
    assert done.returncode == 1
    assert done.stderr == (
        "boxmq passwd: --stdin read 2 lines: give the password alone on one line (a password "
        "with a line break in it can only be given with --password); nothing changed\n"
    )
    assert not path.exists()
    crlf = passwd(str(path), "bob", "--stdin", stdin="builder\r\n")  # one line, a DOS end
    assert crlf.returncode == 0, crlf.stderr
    assert PasswordFile.load(path).authenticate("bob", b"builder", "c")


def test_a_plain_text_or_mosquitto_entry_is_named_and_mended_by_setting_it_again(
    tmp_path: Path,
) -> None:
    """`alice:wonder` (mosquitto's users write that, then run `mosquitto_passwd -U`) or a hash
    of mosquitto_passwd: the error said "expected the hash as ALGORITHM$COST$SALT$DIGEST",
    and `boxmq passwd` refused to touch the file, so the line could only be edited by hand."""
    path = tmp_path / "passwd"
    path.write_text("# users\nalice:wonder\nbob:$7$101$YWJj$ZGVm\n")
    refused = passwd(str(path), "carol", "--password", "rose")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"boxmq passwd: {path}:2: user 'alice' has no hash, only text (a password in plain "
        "text?): the file holds hashes only; set the password with boxmq passwd FILE alice\n"
    )
    mended = passwd(str(path), "alice", "--password", "wonder")
    assert mended.returncode == 1  # bob's line is still one it cannot read back
    assert mended.stderr == (
        f"boxmq passwd: {path}:3: a hash of mosquitto_passwd, which boxmq cannot check; set "
        "the password with boxmq passwd FILE bob\n"
    )
    assert passwd(str(path), "bob", "--delete").returncode == 1  # alice's line, unmended
    path.write_text("# users\nalice:wonder\n")
    mended = passwd(str(path), "alice", "--password", "wonder")
    assert mended.returncode == 0, mended.stderr
    assert PasswordFile.load(path).authenticate("alice", b"wonder", "c")
    path.write_text(path.read_text() + "bob:$7$101$YWJj$ZGVm\n")
    assert passwd(str(path), "bob", "--delete").returncode == 0
    assert PasswordFile.load(path).users() == ("alice",)


def test_a_quoted_leading_tilde_is_the_home_folder(tmp_path: Path) -> None:
    """`boxmq passwd '~/pw' alice` (quoted, so no shell expands it) wrote into a folder named
    `~` in the current one when there was one, where --data's and --config's `~` are the home
    folder (found on a new user's tour). One naming no user is a usage error, nothing written."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    (here / "~").mkdir(parents=True)
    env = {**os.environ, "HOME": str(home)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "boxmq.cli", "passwd", *args, "--password", "w"]
        return subprocess.run(command, capture_output=True, text=True, cwd=here, env=env)

    added = run("~/pw", "alice")
    assert added.returncode == 0, added.stderr
    assert added.stdout == f"added user alice in {home / 'pw'}\n"
    assert PasswordFile.load(home / "pw").users() == ("alice",)
    assert list((here / "~").iterdir()) == []
    nobody = run("~no-such-user-xyz/pw", "alice")
    assert nobody.returncode == 2
    assert "FILE '~no-such-user-xyz/pw': this machine has no user no-such-user-xyz" in (
        nobody.stderr
    ), nobody.stderr
    assert list(here.iterdir()) == [here / "~"]
