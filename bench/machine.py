"""Facts about the machine that a benchmark prints beside its figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def interpreter() -> str:
    """The CPython that runs this, and how it links libpython (statically: ~20 % faster)."""
    linked = "shared" if "libpython" in Path("/proc/self/maps").read_text() else "static"
    where = os.path.realpath(sys.executable)
    return f"Python {sys.version.split()[0]} ({where}, libpython {linked})"


class Source:
    """Which boxmq a run measures. `make` installs the checkout in editable mode, so a
    process a benchmark starts (a broker, a worker) runs whatever `src/` holds at that
    moment: a file edited during the run puts other code into the rounds after it (at stop
    28 a broker started while `spares.py` lacked two methods, and its round delivered
    nothing). Made at the start of a run; `finish()` at its end tells whether to trust it."""

    def __init__(self) -> None:
        self._src = Path(__file__).resolve().parent.parent / "src"
        self._at_start = self._files()

    def _files(self) -> list[tuple[str, int, int]]:
        found = []
        for path in sorted(self._src.rglob("*.py")):
            try:
                status = path.stat()
            except FileNotFoundError:  # deleted while we looked: a change all the same
                continue
            found.append((str(path), status.st_mtime_ns, status.st_size))
        return found

    def describe(self) -> str:
        """`boxmq at <commit>`, and whether src/ differs from that commit."""
        commit = _git(self._src, "rev-parse", "--short", "HEAD")
        if commit is None:
            return f"boxmq from {self._src} (not a git checkout)"
        dirty = _git(self._src, "status", "--porcelain", "--", ".")
        return f"boxmq at {commit}" + (", with uncommitted changes in src/" if dirty else "")

    def finish(self) -> int:
        """The run's exit status: 0, or 1 after a line that voids the run when a file under
        src/ was added, removed or written since the start."""
        if self._files() == self._at_start:
            return 0
        print(
            "VOID: src/ changed while this ran, so processes started after the change ran "
            "other code than those before it; run again from a checkout nobody edits"
        )
        return 1


def _git(cwd: Path, *args: str) -> str | None:
    """What `git ARGS` prints in `cwd`; None if git is missing or fails there."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
