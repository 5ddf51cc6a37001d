"""The password file: who may connect, checked against salted, slow hashes.

One line per user, `NAME:HASH`; blank lines and lines starting with '#' are kept as they are.
HASH is self-describing so that the algorithm can change without breaking old entries:

    scrypt$n=16384,r=8,p=1$<salt, base64>$<digest, base64>
    pbkdf2-sha256$i=600000$<salt, base64>$<digest, base64>

Invariants:
- Every entry has its own random salt; the cost parameters are stored with it, so verifying
  an entry uses the cost it was made with (raising the default never breaks old entries).
- Digests are compared in constant time, and an unknown user costs as much as a wrong
  password, so neither timing nor the answer tells whether a user exists.
- The file is replaced atomically (temporary file in the same folder, fsync, rename, fsync of
  the folder) with mode 0600: a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import logging
import os
import secrets
import shlex
import stat
import tempfile
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from boxmq.core.topics import MQTT_STRING_MAX, utf8_size
from boxmq.errors import InvalidArgument
from boxmq.store.commit import flush_directories
from boxmq.store.layout import open_folder

__all__ = [
    "PasswordEntry",
    "PasswordFile",
    "ReadAtStart",
    "delete_user",
    "entry_user",
    "file_version",
    "hash_password",
    "set_password",
    "validate_username",
]

SCRYPT: Final = "scrypt"
PBKDF2_SHA256: Final = "pbkdf2-sha256"
# scrypt with N=2^14, r=8 (16 MiB, tens of ms) is the floor the scrypt paper and OWASP give
# for interactive logins; the MQTT CONNECT is one.
_SCRYPT_COST: Final = {"n": 1 << 14, "r": 8, "p": 1}
_PBKDF2_COST: Final = {"i": 600_000}  # OWASP 2023 figure for PBKDF2-HMAC-SHA256
_DEFAULT_COSTS: Final = {SCRYPT: _SCRYPT_COST, PBKDF2_SHA256: _PBKDF2_COST}
_MAX_SCRYPT_MEMORY: Final = 1 << 30  # bytes (_scrypt_memory); 64x the default
_MAX_PBKDF2_ITERATIONS: Final = 10_000_000
_SALT_BYTES: Final = 16
_DIGEST_BYTES: Final = 32
_COMMENT: Final = "#"
# The first words of an ACL file's lines (boxmq.mqtt.acl, which imports this module): a line
# starting with one, that is no entry, is a sign of the ACL given as the password file.
_ACL_KEYWORDS: Final = ("user", "topic", "pattern")

log = logging.getLogger("boxmq.mqtt")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _derive(algorithm: str, cost: dict[str, int], password: bytes, salt: bytes) -> bytes:
    if algorithm == SCRYPT:
        n, r, p = cost["n"], cost["r"], cost["p"]
        # maxmem: hashlib's default (32 MiB) refuses N=2^15 and up; allow what the cost needs.
        memory = _scrypt_memory(n, r, p)
        return hashlib.scrypt(
            password, salt=salt, n=n, r=r, p=p, maxmem=memory, dklen=_DIGEST_BYTES
        )
    if algorithm == PBKDF2_SHA256:
        return hashlib.pbkdf2_hmac("sha256", password, salt, cost["i"], dklen=_DIGEST_BYTES)
    raise InvalidArgument(f"unknown password hash algorithm {algorithm!r}")


@dataclass(frozen=True, slots=True)
class PasswordEntry:
    """One user's salted hash, with the algorithm and cost it was made with."""

    username: str
    algorithm: str
    cost: tuple[tuple[str, int], ...]  # e.g. (("n", 16384), ("r", 8), ("p", 1))
    salt: bytes
    digest: bytes

    def matches(self, password: bytes) -> bool:
        if b"\0" in password:
            return False  # never stored (see hash_password): "" and "\0" would derive alike
        actual = _derive(self.algorithm, dict(self.cost), password, self.salt)
        return hmac.compare_digest(actual, self.digest)

    def __str__(self) -> str:
        cost = ",".join(f"{k}={v}" for k, v in self.cost)
        return f"{self.username}:{self.algorithm}${cost}${_b64(self.salt)}${_b64(self.digest)}"

    @classmethod
    def parse(cls, line: str) -> PasswordEntry:
        """Parse `NAME:HASH`; InvalidArgument says what is wrong (the caller adds where)."""
        username, colon, hashed = line.rpartition(":")
        if not colon:
            raise InvalidArgument("expected NAME:HASH")
        validate_username(username)
        parts = hashed.split("$")
        # Two habits from mosquitto: `user:password` in plain text, to be hashed later by
        # `mosquitto_passwd -U`, and its own hashes ($6$ SHA-512, $7$ PBKDF2-SHA512).
        again = f"set the password with boxmq passwd FILE {username}"
        if len(parts) == 1:
            text = ", only text (a password in plain text?)" if hashed else ""
            raise InvalidArgument(
                f"user {username!r} has no hash{text}: the file holds hashes only; {again}"
            )
        if hashed.startswith(("$6$", "$7$")):
            raise InvalidArgument(f"a hash of mosquitto_passwd, which boxmq cannot check; {again}")
        if len(parts) != 4:
            raise InvalidArgument("expected the hash as ALGORITHM$COST$SALT$DIGEST")
        algorithm, cost_text, salt, digest = parts
        expected = _DEFAULT_COSTS.get(algorithm)
        if expected is None:
            raise InvalidArgument(
                f"unknown hash algorithm {algorithm!r} (known: {SCRYPT}, {PBKDF2_SHA256})"
            )
        cost = _parse_cost(cost_text)
        if {k for k, _ in cost} != set(expected):
            raise InvalidArgument(f"{algorithm} needs the cost fields {', '.join(expected)}")
        _check_cost(algorithm, dict(cost))
        try:
            salt_bytes, digest_bytes = _unb64(salt), _unb64(digest)
        except ValueError:
            raise InvalidArgument("the salt or the digest is not valid base64") from None
        if not salt_bytes:
            # A hash without a salt is the same for every user with the same password, and
            # open to precomputed tables; `boxmq passwd` never writes one (a random salt each).
            raise InvalidArgument(f"the salt is empty, which is weak; {again}")
        if len(digest_bytes) != _DIGEST_BYTES:
            # Every digest is derived _DIGEST_BYTES long, so a shorter one (a line cut by four
            # base64 characters, which still decode) matches no password: the user could
            # never log in, and nothing would say why.
            raise InvalidArgument(
                f"the digest is {len(digest_bytes)} bytes, not {_DIGEST_BYTES}: the entry is "
                f"damaged; {again}"
            )
        return cls(username, algorithm, cost, salt_bytes, digest_bytes)


def _parse_cost(text: str) -> tuple[tuple[str, int], ...]:
    cost = []
    for item in text.split(","):
        key, equals, value = item.partition("=")
        if not equals or not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise InvalidArgument(f"bad cost field {item!r}: expected NAME=POSITIVE_INTEGER")
        cost.append((key, int(value)))
    return tuple(cost)


def _scrypt_memory(n: int, r: int, p: int) -> int:
    """The bytes OpenSSL's scrypt asks for at cost n, r, p, and refuses to run past maxmem:
    its V (128·r·(n+2)) and B (128·r·p) arrays (EVP_PBE_scrypt_ex)."""
    return 128 * r * (n + 2 + p)


def _check_cost(algorithm: str, cost: dict[str, int]) -> None:
    """Refuse, when the file is read, a cost that would fail or stall every CONNECT later."""
    if algorithm == SCRYPT:
        n, r, p = cost["n"], cost["r"], cost["p"]
        if n < 2 or n & (n - 1):
            raise InvalidArgument(f"scrypt n={n} must be a power of two, at least 2")
        # The memory of n, r and p together: 128·n·r alone let n=2^20,r=8 through, whose
        # maxmem was past what hashlib takes (2 GiB), and n=2,r=8192,p=16, past its maxmem:
        # every check of such an entry failed, and its user could never log in.
        memory = _scrypt_memory(n, r, p)
        if memory > _MAX_SCRYPT_MEMORY or p > 16:
            raise InvalidArgument(
                f"scrypt cost n={n},r={r},p={p} is beyond what a login can use "
                f"({memory:,} bytes of memory a check, at most {_MAX_SCRYPT_MEMORY:,} (1 GiB); "
                "p at most 16)"
            )
    elif cost["i"] > _MAX_PBKDF2_ITERATIONS:
        raise InvalidArgument(f"pbkdf2 i={cost['i']} is beyond what a login can use")


def _breaks(c: str) -> bool:
    """A control character, or one `str.splitlines` breaks a line at."""
    code = ord(c)
    return code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029)


def validate_username(username: str) -> str:
    """A name the file can hold, and reads back the same: not empty, no ':' (the separator),
    no control characters or line breaks (the file is read line by line, and Python breaks
    lines at U+0085, U+2028 and U+2029 too), no white space at either end (entry lines are
    read stripped), and not starting with '#' (a comment)."""
    if not username:
        raise InvalidArgument("a user name must not be empty")
    if username != username.strip():
        raise InvalidArgument(f"user name {username!r} must not start or end with white space")
    if username.startswith(_COMMENT):
        raise InvalidArgument(f"user name {username!r} must not start with '#'")
    if ":" in username or any(_breaks(c) for c in username):
        raise InvalidArgument(f"user name {username!r} must not contain ':' or control characters")
    size = utf8_size(username)
    if size is None:  # bytes that are not UTF-8, from a command line: a lone surrogate
        raise InvalidArgument(
            f"user name {username!r} is not UTF-8, which an MQTT user name must be"
        )
    if size > MQTT_STRING_MAX:
        raise InvalidArgument(f"a user name of {size} bytes: MQTT allows at most {MQTT_STRING_MAX}")
    return username


def hash_password(
    username: str,
    password: bytes,
    *,
    algorithm: str = SCRYPT,
    cost: dict[str, int] | None = None,
) -> PasswordEntry:
    """A new entry with a fresh random salt. `cost` overrides the default work factor."""
    default = _DEFAULT_COSTS.get(algorithm)
    if default is None:
        raise InvalidArgument(f"unknown password hash algorithm {algorithm!r}")
    validate_username(username)
    if b"\0" in password:
        # Both algorithms key HMAC with the password, which pads it with NUL bytes: "pw" and
        # "pw\0" would be the same password. So a NUL never belongs to one.
        raise InvalidArgument("a password cannot contain a NUL byte")
    chosen = dict(default if cost is None else cost)
    salt = secrets.token_bytes(_SALT_BYTES)
    digest = _derive(algorithm, chosen, password, salt)
    return PasswordEntry(username, algorithm, tuple(chosen.items()), salt, digest)


@dataclass(frozen=True)
class PasswordFile:
    """The `Authenticator` of `boxmq.mqtt.settings`, backed by a password file.

    A client without a user name connects only when `allow_anonymous` is set; a client with
    one connects only with the right password (a user name is never "anonymous").
    """

    path: Path
    entries: tuple[PasswordEntry, ...]
    allow_anonymous: bool = False
    # The file as it was read (file_version), None when not read from a file: the file is read at
    # start only, so a user added later by `boxmq passwd` is refused until a restart (one
    # deleted gets in), and the log says why at the first login after each change.
    read_as: ReadAtStart | None = None
    # Checked for unknown users, so that they cost what a known one costs (same algorithm and
    # cost as the first entry); its salt and digest are random, so no password matches it.
    _decoy: PasswordEntry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        model = self.entries[0] if self.entries else None
        decoy = PasswordEntry(
            "decoy",
            model.algorithm if model else SCRYPT,
            model.cost if model else tuple(_SCRYPT_COST.items()),
            secrets.token_bytes(_SALT_BYTES),
            secrets.token_bytes(_DIGEST_BYTES),
        )
        object.__setattr__(self, "_decoy", decoy)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, allow_anonymous: bool = False) -> PasswordFile:
        source = Path(path)
        read_as = ReadAtStart.before_reading("password file", source)
        entries = tuple(_parse_entries(source, _read_lines(source)))
        return cls(source, entries, allow_anonymous, read_as)

    def users(self) -> tuple[str, ...]:
        return tuple(e.username for e in self.entries)

    def authenticate(self, username: str | None, password: bytes | None, client_id: str) -> bool:
        if username is None:
            return self.allow_anonymous
        # Before the answer, right or wrong: a user deleted since the start still gets in,
        # and the operator who deleted him must hear why.
        self._tell_if_changed()
        entry = next((e for e in self.entries if e.username == username), None)
        if entry is None:
            self._decoy.matches(password or b"")  # timing must not reveal which names exist
        elif password is None:
            entry.matches(b"")  # the same work as a wrong password, or timing tells the name
        elif entry.matches(password):
            return True
        return False

    def _tell_if_changed(self) -> None:
        """A warning when the file on disk is no longer the one read, once per change."""
        if self.read_as is not None:
            self.read_as.tell_if_changed()


# -- the file -------------------------------------------------------------------------------------


def file_version(path: Path) -> tuple[int, int, int] | None:
    """What tells one version of a file from another (the password file, the ACL file):
    `boxmq passwd` replaces it (a new inode), an editor may rewrite it in place (a new
    mtime, often a new size)."""
    try:
        found = os.stat(path)
    except OSError:
        return None  # removed: a change too
    return (found.st_ino, found.st_mtime_ns, found.st_size)


@dataclass(frozen=True)
class ReadAtStart:
    """A file `boxmq serve` reads at start only (the password file, the ACL file) and the
    version it read (`file_version`, taken before the read: a change while it reads is told
    of), to warn that the file on disk is no longer that one, once per version: `_told` keeps
    the one last told of, so that a flood of refusals warns once."""

    kind: str
    path: Path
    version: tuple[int, int, int] | None = None  # None: gone before the read, nothing to tell
    _told: list[tuple[int, int, int] | None] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    @classmethod
    def before_reading(cls, kind: str, path: Path) -> ReadAtStart:
        return cls(kind, path, file_version(path))

    def tell_if_changed(self) -> None:
        now = file_version(self.path)
        if self.version is None or now == self.version or now in self._told:
            return
        self._told[:] = [now]
        log.warning(
            "the %s %s has changed since boxmq serve read it at start: it is read at start "
            "only, so its changes are not in force (restart boxmq serve)",
            self.kind,
            self.path,
        )


def _read_lines(path: Path) -> list[str]:
    # utf-8-sig: a byte order mark that an editor (Windows Notepad) put before the first line
    # is not part of its user name, which no client could then log in as.
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise InvalidArgument(f"password file {path} does not exist") from None
    except UnicodeDecodeError:
        raise InvalidArgument(f"password file {path} is not UTF-8 text") from None
    except OSError as error:
        raise InvalidArgument(f"cannot read password file {path}: {error.strerror}") from None


def entry_user(line: str) -> str | None:
    """The user of `line` if it is written as an entry of a password file (`NAME:HASH`, the
    hash boxmq's or mosquitto_passwd's), else None: for the ACL file to tell a password file
    given in its place, without quoting the hash."""
    username, colon, hashed = line.strip().rpartition(":")
    known = hashed.startswith(("$6$", "$7$")) or hashed.split("$")[0] in _DEFAULT_COSTS
    return username if colon and known and "$" in hashed else None


def _is_entry(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(_COMMENT)


def _no_entry(line: str, error: InvalidArgument) -> str:
    """What to say of a line that is no entry: the ACL file given as the password file is
    told so, rather than `expected NAME:HASH` of a `user alice` line."""
    if line.split(maxsplit=1)[0] in _ACL_KEYWORDS:
        return (
            f"a line of an ACL file ({line.strip()!r}), not a user's NAME:HASH: password_file "
            "names the ACL file (give it as acl_file, and the file `boxmq passwd` makes as "
            "password_file)"
        )
    return str(error)


def _parse_entries(
    path: Path, lines: list[str], *, replaced: Collection[int] = ()
) -> Iterable[PasswordEntry]:
    """The entries of `lines`, but those at the indexes `replaced`, which are being set again
    or deleted: that is how a damaged entry, a password in plain text, or a user written on
    two lines, is mended."""
    seen: dict[str, int] = {}  # each user's line
    for number, line in enumerate(lines, start=1):
        if not _is_entry(line) or number - 1 in replaced:
            continue
        try:
            entry = PasswordEntry.parse(line.strip())
        except InvalidArgument as error:
            raise InvalidArgument(f"{path}:{number}: {_no_entry(line, error)}") from None
        name = entry.username
        if name in seen:
            # Which one a broker took would be the file's order, and a user "deleted" by
            # removing one line still got in with the other's password.
            raise InvalidArgument(
                f"{path}:{number}: user {name!r} appears twice, on lines {seen[name]} and "
                f"{number}: keep one of them (`boxmq passwd {shlex.quote(str(path))} "
                f"{shlex.quote(name)}` sets a password on one line, `--delete` removes both)"
            )
        seen[name] = number
        yield entry


def set_password(path: str | os.PathLike[str], username: str, password: bytes) -> bool:
    """Add the user or change their password; create the file if needed. True if added. A
    user on more than one line is left on the first, with the new password."""
    target = _followed(path)
    entry = hash_password(username, password)  # the slow part, outside the lock
    with _editing(target):
        lines = _read_lines(target) if target.exists() else []
        found = _find(lines, username)
        # Never rewrite a file we cannot read back, but for the lines being replaced.
        list(_parse_entries(target, lines, replaced=found))
        if not found:
            lines.append(str(entry))
        else:
            lines[found[0]] = str(entry)
            lines = [line for index, line in enumerate(lines) if index not in found[1:]]
        _write_atomically(target, lines)
    return not found


def delete_user(path: str | os.PathLike[str], username: str) -> None:
    """Remove the user, from every line that names them (a file written by hand may have
    two, and deleting one would leave the other's password in force, as mosquitto_passwd -D
    removes them all); InvalidArgument if the file or the user does not exist."""
    target = _followed(path)
    with _editing(target):
        lines = _read_lines(target)
        found = _find(lines, username)
        # Never rewrite a file we cannot read back, but for the lines being deleted.
        list(_parse_entries(target, lines, replaced=found))
        if not found:
            raise InvalidArgument(f"user {username!r} is not in {target}")
        lines = [line for index, line in enumerate(lines) if index not in found]
        _write_atomically(target, lines)


def _followed(path: str | os.PathLike[str]) -> Path:
    """The file a symbolic link points to (the path itself when it is none): the new file is
    renamed over that one, in its folder, so that the link stays and whoever reads the file
    through it, or by its own name, sees the change. Renamed over the link, it would become
    a copy that nothing else reads, and the file the broker reads would keep the old entry."""
    return Path(os.path.realpath(path))


def _find(lines: list[str], username: str) -> list[int]:
    """The indexes of the lines of `username`'s entry: one, unless written twice by hand."""
    return [
        index
        for index, line in enumerate(lines)
        if _is_entry(line) and line.strip().rpartition(":")[0] == username
    ]


@contextlib.contextmanager
def _editing(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the file's folder while reading, changing and replacing the
    file, so that two `boxmq passwd` at once cannot lose one's change. The folder, because the
    file itself is replaced (a lock on it would stay with the old inode)."""
    folder = path.parent
    if not folder.is_dir():
        raise InvalidArgument(f"cannot write {path}: the folder {folder} does not exist")
    if path.exists() and not path.is_file():
        # The new file is renamed over the old one: a device (/dev/null) was replaced by a
        # regular file, and a named pipe was read first, which waited for a writer forever.
        raise InvalidArgument(
            f"cannot write {path}: it is not a regular file (a folder, a device, a pipe): "
            "name the password file itself"
        )
    directory = open_folder(str(folder))
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        yield
    finally:
        os.close(directory)  # closing releases the lock


def _write_atomically(path: Path, lines: list[str]) -> None:
    folder = path.parent
    text = "".join(line + "\n" for line in lines)
    try:
        _replace(path, folder, text)
    except OSError as error:
        raise InvalidArgument(f"cannot write {path}: {error.strerror}") from None


def _replace(path: Path, folder: Path, text: str) -> None:
    """Replace `path` by `text`, keeping the mode and owner the operator gave the file (a
    broker running as another user must still read it), 0600 for a new one."""
    try:
        old: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        old = None
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o600 if old is None else stat.S_IMODE(old.st_mode))  # before any secret
        if old is not None:
            with contextlib.suppress(PermissionError):  # only root may give a file away
                os.fchown(fd, old.st_uid, old.st_gid)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    flush_directories([str(folder)])  # the rename itself must survive a crash
