"""The file system's refusals, for real, for tests: a full disk (a small tmpfs mounted in the
test, filled until the kernel says ENOSPC, then freed; or a small ext4, where a rename may
need room too), a read-only one (the tmpfs remounted
ro, then rw again), and a root another user may not change (a command run as nobody: root
passes every permission check). Needs root (mount, setpriv); skipped where the container
does not allow it."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

import pytest

__all__ = ["SmallDisk", "as_nobody", "shared_folder", "small_disk", "small_ext4_disk"]

_SIZE = "8m"  # room for a root and its dropboxes; filled in well under a second
_EXT4_SIZE = 8 << 20  # the same room on ext4


class SmallDisk:
    """A tmpfs at `path`; `fill()` takes its last free pages, `fill_inodes()` its last free
    inodes, `free()` gives them back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._filler = path / "filler"
        self._inodes = path / "inodes"

    def fill(self, *, leave: int = 0) -> None:
        """Take every free page; then give `leave` of them back (room for one small file,
        say, when the next one must be refused)."""
        self._fill()
        if leave:
            page = os.statvfs(self.path).f_frsize
            kept = os.stat(self._filler).st_blocks * 512 - leave * page
            os.truncate(self._filler, kept)
            assert os.statvfs(self.path).f_bavail == leave

    def _fill(self) -> None:
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            # Big writes, then the last pages in small ones: no page may be left for a message.
            for size in (1 << 16, 512):
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * size)
        finally:
            os.close(fd)
        probe = os.open(self.path / "probe", os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError, match="No space left") as raised:
                os.write(probe, b"x")
        finally:
            os.close(probe)
            os.unlink(self.path / "probe")
        assert raised.value.errno == errno.ENOSPC

    def fill_inodes(self) -> None:
        """Take every free inode (a disk mounted with `inodes=`): blocks left, no file or
        folder can be made, as on a disk of many small files."""
        self._inodes.mkdir()
        for n in range(1 << 20):
            try:
                (self._inodes / str(n)).touch()
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                return
        raise AssertionError("inodes left after a million files: mount with inodes=")

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)
        shutil.rmtree(self._inodes, ignore_errors=True)

    @contextlib.contextmanager
    def read_only(self) -> Iterator[None]:
        """The disk mounted read-only for the block (EROFS), as the kernel does after errors;
        writable again afterwards."""
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True)
        try:
            yield
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(self.path)], check=True)


@contextlib.contextmanager
def small_disk(folder: Path, *, inodes: int | None = None) -> Iterator[SmallDisk]:
    """Mount a tmpfs at `folder` for the block, with room for `inodes` files and folders
    if given (a disk out of inodes is as full as one out of blocks); unmounted afterwards,
    even on failure. CI runs as root: there a tmpfs that cannot be mounted fails the test."""
    options = f"size={_SIZE}" + (f",nr_inodes={inodes}" if inodes is not None else "")
    with _mounted(folder, "a tmpfs", ["-t", "tmpfs", "-o", options, "tmpfs"]):
        yield SmallDisk(folder)


@contextlib.contextmanager
def small_ext4_disk(folder: Path) -> Iterator[SmallDisk]:
    """Mount a small ext4 at `folder` for the block (an image beside it, in a loop device);
    unmounted afterwards. Where a tmpfs never needs room for a rename, ext4 does once the
    blocks of the folder renamed into are full of names (1 KiB blocks here: a dozen or two
    message names), as on the disks brokers run on."""
    image = folder.with_name(f"{folder.name}.ext4")
    with open(image, "wb") as made:
        made.truncate(_EXT4_SIZE)
    if shutil.which("mkfs.ext4") is None:
        _cannot("make an ext4 here: no mkfs.ext4")
    formatted = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-b", "1024", "-N", "4096", str(image)],
        capture_output=True,
        check=False,
    )
    if formatted.returncode != 0:
        _cannot(f"cannot make an ext4 here: {formatted.stderr.decode().strip()}")
    with _mounted(folder, "an ext4", ["-o", "loop", str(image)]):
        yield SmallDisk(folder)


@contextlib.contextmanager
def _mounted(folder: Path, what: str, arguments: Sequence[str]) -> Iterator[None]:
    """`mount arguments folder` for the block; unmounted afterwards, even on failure. CI runs
    as root: there a file system that cannot be mounted fails the test."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", *arguments, str(folder)], capture_output=True, check=False)
    if mounted.returncode != 0:
        _cannot(f"cannot mount {what} here: {mounted.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _cannot(why: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI runs as root and mounts it)")
    pytest.skip(why)


_NOBODY = 65534


def as_nobody(command: Sequence[str]) -> list[str]:
    """`command` run as the user nobody, in no group: a root owned by root refuses it (EACCES)
    what root itself is never refused."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running a command as another user needs root and setpriv")
    ids = [f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups"]
    return ["setpriv", *ids, *command]


@contextlib.contextmanager
def shared_folder() -> Iterator[Path]:
    """A folder of root's, mode 0755, that nobody can reach (pytest's tmp_path is under a
    folder of mode 0700): removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="boxmq-refusals-"))
    try:
        folder.chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
