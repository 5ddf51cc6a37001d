"""Facts about the machine that a benchmark prints beside its figures."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def interpreter() -> str:
    """The CPython that runs this, and how it links libpython (statically: ~20 % faster)."""
    linked = "shared" if "libpython" in Path("/proc/self/maps").read_text() else "static"
    where = os.path.realpath(sys.executable)
    return f"Python {sys.version.split()[0]} ({where}, libpython {linked})"
