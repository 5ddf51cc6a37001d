"""The password file: hashes, the Authenticator, and atomic rewrites."""

from __future__ import annotations

import hashlib
import stat
from base64 import b64encode
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.waiting import logged

from boxmq.errors import InvalidArgument
from boxmq.mqtt.passwords import (
    PasswordEntry,
    PasswordFile,
    delete_user,
    hash_password,
    set_password,
    validate_username,
)

# Cheap costs keep the property tests fast; the stored cost is what verification uses.
CHEAP = {"scrypt": {"n": 16, "r": 1, "p": 1}, "pbkdf2-sha256": {"i": 10}}

usernames = st.text(min_size=1, max_size=20).filter(
    lambda s: (
        not s.startswith("#")
        and ":" not in s
        and s == s.strip()
        and not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029" for c in s)
    )
)


passwords = st.binary(max_size=40).filter(lambda b: b"\0" not in b)


@settings(max_examples=50)
@given(usernames, passwords, st.binary(max_size=40), st.sampled_from(sorted(CHEAP)))
def test_round_trip_through_text_accepts_only_the_password(
    username: str, password: bytes, other: bytes, algorithm: str
) -> None:
    entry = hash_password(username, password, algorithm=algorithm, cost=CHEAP[algorithm])
    again = PasswordEntry.parse(str(entry))
    assert again == entry
    assert again.matches(password)
    assert again.matches(other) == (other == password)


def test_every_entry_gets_its_own_salt() -> None:
    first = hash_password("u", b"same", cost=CHEAP["scrypt"])
    second = hash_password("u", b"same", cost=CHEAP["scrypt"])
    assert first.salt != second.salt
    assert first.digest != second.digest


def test_the_default_cost_is_stored_in_the_entry() -> None:
    entry = hash_password("u", b"pw")
    assert str(entry).startswith("u:scrypt$n=16384,r=8,p=1$")


@pytest.mark.parametrize(
    "name",
    # The file is read line by line, stripped: a name with white space at an end read back as
    # another user's, and one with a line break Python splits at (U+0085, U+2028, U+2029)
    # made the file unreadable.
    ["", "#root", "a:b", "tab\there", "nul\x00", " alice", "alice ", " #ops", "a\u2028b", "a\x85b"],
)
def test_names_the_file_cannot_hold_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument, match="user name"):
        validate_username(name)


def _file(tmp_path: Path, *users: tuple[str, bytes]) -> Path:
    path = tmp_path / "passwd"
    lines = ["# boxmq users", ""]
    lines += [str(hash_password(u, p, cost=CHEAP["scrypt"])) for u, p in users]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_authenticate(tmp_path: Path) -> None:
    path = _file(tmp_path, ("alice", b"wonder"), ("bob", b"builder"))
    closed = PasswordFile.load(path)
    assert closed.users() == ("alice", "bob")
    assert closed.authenticate("alice", b"wonder", "c1")
    assert not closed.authenticate("alice", b"builder", "c1")
    assert not closed.authenticate("alice", None, "c1")
    assert not closed.authenticate("carol", b"wonder", "c1")
    assert not closed.authenticate(None, None, "c1")
    opened = PasswordFile.load(path, allow_anonymous=True)
    assert opened.authenticate(None, None, "c1")
    assert not opened.authenticate("alice", b"wrong", "c1")  # a name is never anonymous


def test_a_known_name_without_a_password_costs_a_hash_like_any_other_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/security.md: neither the answer nor its timing tells whether a user exists. A
    known name without a password was refused at once, an unknown one after a decoy hash."""
    passwords = PasswordFile.load(_file(tmp_path, ("alice", b"wonder")))
    hashed: list[bytes] = []
    matches = PasswordEntry.matches

    def counted(self: PasswordEntry, password: bytes) -> bool:
        hashed.append(password)
        return matches(self, password)

    monkeypatch.setattr(PasswordEntry, "matches", counted)
    for name in ("alice", "carol"):
        for password in (None, b"wrong"):
            hashed.clear()
            assert not passwords.authenticate(name, password, "c1")
            assert len(hashed) == 1, (name, password)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("alice", "expected NAME:HASH"),
        ("alice:scrypt$n=16$AAAA", "ALGORITHM$COST$SALT$DIGEST"),
        ("alice:md5$i=1$AAAA$AAAA", "unknown hash algorithm 'md5'"),
        ("alice:scrypt$n=16,r=1$AAAA$AAAA", "scrypt needs the cost fields n, r, p"),
        ("alice:scrypt$n=x,r=1,p=1$AAAA$AAAA", "bad cost field 'n=x'"),
        ("alice:pbkdf2-sha256$i=10$A!$AAAA", "not valid base64"),
        ("alice:scrypt$n=3,r=1,p=1$AAAA$AAAA", "scrypt n=3 must be a power of two"),
        ("alice:scrypt$n=1048576,r=1024,p=1$AAAA$AAAA", "beyond what a login can use"),
        (
            "alice:scrypt$n=1048576,r=8,p=1$AAAA$AAAA",
            "(1,073,744,896 bytes of memory a check, at most",
        ),
        ("alice:pbkdf2-sha256$i=²$AAAA$AAAA", "bad cost field 'i=²'"),
        # A digest cut short by whole base64 groups still decodes, and matches no password.
        ("alice:scrypt$n=16,r=1,p=1$AAAA$" + "A" * 40, "the digest is 30 bytes, not 32"),
        ("alice:pbkdf2-sha256$i=10$AAAA$", "the digest is 0 bytes, not 32: the entry is damaged"),
        # Every entry `boxmq passwd` writes has a random salt of its own.
        (
            "alice:scrypt$n=16,r=1,p=1$$" + "A" * 43 + "=",
            "the salt is empty, which is weak; set the password with boxmq passwd FILE alice",
        ),
    ],
)
def test_errors_name_the_file_and_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "passwd"
    path.write_text(f"# users\n{line}\n")
    with pytest.raises(InvalidArgument) as caught:
        PasswordFile.load(path)
    assert str(caught.value).startswith(f"{path}:2: ")
    assert message in str(caught.value)


def test_every_scrypt_cost_a_file_is_let_in_with_can_check_a_password(tmp_path: Path) -> None:
    """n=2, r=8192, p=16 passed the file's check (128·n·r, 2 MiB) and its every check failed
    (ValueError: memory limit exceeded, what B, 128·r·p, adds): alice could never log in."""
    salt = b"s" * 16
    digest = hashlib.scrypt(b"wonder", salt=salt, n=2, r=8192, p=16, maxmem=1 << 26, dklen=32)
    entry = f"alice:scrypt$n=2,r=8192,p=16${b64encode(salt).decode()}${b64encode(digest).decode()}"
    (tmp_path / "passwd").write_text(entry + "\n")
    users = PasswordFile.load(tmp_path / "passwd")
    assert users.authenticate("alice", b"wonder", "c")
    assert not users.authenticate("alice", b"wrong", "c")


def test_a_byte_order_mark_is_not_part_of_the_first_user_name(tmp_path: Path) -> None:
    """An editor that saves UTF-8 with a BOM (Windows Notepad): the first user still gets in,
    and `boxmq passwd` finds them rather than adding them a second time."""
    path = tmp_path / "passwd"
    path.write_bytes(b"\xef\xbb\xbf" + f"{hash_password('alice', b'wonder')}\n".encode())
    users = PasswordFile.load(path)
    assert users.users() == ("alice",)
    assert users.authenticate("alice", b"wonder", "c")
    assert not set_password(path, "alice", b"land")  # changed, not added
    assert PasswordFile.load(path).authenticate("alice", b"land", "c")


def test_a_user_twice_is_an_error(tmp_path: Path) -> None:
    path = _file(tmp_path, ("alice", b"a"), ("alice", b"b"))
    with pytest.raises(InvalidArgument) as caught:
        PasswordFile.load(path)
    assert str(caught.value) == (
        f"{path}:4: user 'alice' appears twice, on lines 3 and 4: keep one of them (`boxmq "
        f"passwd {path} alice` sets a password on one line, `--delete` removes both)"
    )


def test_a_user_on_two_lines_is_deleted_from_both_and_set_on_one(tmp_path: Path) -> None:
    """`--delete` removed the first line alone and said "deleted": the user still got in with
    the second line's password. Setting a password left the second line, and the file was
    still refused at serve's start."""
    path = _file(tmp_path, ("alice", b"a"), ("bob", b"b"), ("alice", b"c"))
    delete_user(path, "alice")
    assert PasswordFile.load(path).users() == ("bob",)
    path = _file(tmp_path, ("alice", b"a"), ("bob", b"b"), ("alice", b"c"))
    assert set_password(path, "alice", b"new") is False
    users = PasswordFile.load(path)
    assert users.users() == ("alice", "bob")  # on the first line, where it was
    assert users.authenticate("alice", b"new", "c")


def test_set_password_creates_changes_and_keeps_comments(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    assert set_password(path, "alice", b"one") is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("# kept\n" + path.read_text())
    assert set_password(path, "bob", b"two") is True
    assert set_password(path, "alice", b"three") is False
    text = path.read_text().splitlines()
    assert text[0] == "# kept"
    assert [line.split(":")[0] for line in text[1:]] == ["alice", "bob"]
    users = PasswordFile.load(path)
    assert users.authenticate("alice", b"three", "c")
    assert not users.authenticate("alice", b"one", "c")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["passwd"]  # no temporary file left


def test_delete_user(tmp_path: Path) -> None:
    path = _file(tmp_path, ("alice", b"a"), ("bob", b"b"))
    delete_user(path, "alice")
    assert PasswordFile.load(path).users() == ("bob",)
    with pytest.raises(InvalidArgument, match="user 'alice' is not in"):
        delete_user(path, "alice")


def test_a_user_deleted_while_serve_runs_still_gets_in_and_the_log_says_to_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The file is read at start only. Only a refusal told that it had changed since, so
    the operator who deleted bob to shut him out saw him get in, and no word of why."""
    path = _file(tmp_path, ("alice", b"a"), ("bob", b"b"))
    served = PasswordFile.load(path)
    delete_user(path, "bob")
    assert served.authenticate("bob", b"b", "c1")  # as read at start
    assert served.authenticate("bob", b"b", "c2")
    told = logged(caplog, "has changed since")
    assert told == [
        f"the password file {path} has changed since boxmq serve read it at start: it is read "
        "at start only, so its changes are not in force (restart boxmq serve)"
    ]  # once per change


def test_a_damaged_file_is_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text("garbage\n")
    with pytest.raises(InvalidArgument, match="passwd:1: expected NAME:HASH"):
        set_password(path, "alice", b"a")
    assert path.read_text() == "garbage\n"


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"the folder .*nowhere does not exist"):
        set_password(tmp_path / "nowhere" / "passwd", "alice", b"a")


def test_concurrent_changes_are_all_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    import boxmq.mqtt.passwords as passwords

    slow = passwords._replace

    def slowly(path: Path, folder: Path, text: str) -> None:
        time.sleep(0.05)  # widen the read-modify-write window that the lock must close
        slow(path, folder, text)

    monkeypatch.setattr(passwords, "_replace", slowly)
    path = tmp_path / "passwd"
    users = [f"user{i}" for i in range(6)]
    threads = [threading.Thread(target=set_password, args=(path, u, b"pw")) for u in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(PasswordFile.load(path).users()) == users


@pytest.mark.parametrize("algorithm", sorted(CHEAP))
def test_a_nul_byte_is_never_part_of_a_password(algorithm: str) -> None:
    # HMAC pads its key with NUL bytes, so b"" and b"\0" would derive the same digest.
    entry = hash_password("u", b"", algorithm=algorithm, cost=CHEAP[algorithm])
    assert entry.matches(b"")
    assert not entry.matches(b"\0")
    assert not entry.matches(b"\0\0")
    with pytest.raises(InvalidArgument, match="NUL"):
        hash_password("u", b"pw\0", algorithm=algorithm, cost=CHEAP[algorithm])
