"""`-p NAME:TYPE=VALUE` of `put` and `publish`: a value too big for its type is a usage error
(exit 2), said before the root is made, for a float as for the other types."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("command", "written", "says"),
    [
        # Past Java's Float.MAX_VALUE (3.4028235e38), a double still: put and publish refused
        # it once the root was made, as an error of the run (exit 1).
        ("put", "f:float=1e39", "1e39 does not fit a float in property 'f:float=1e39'"),
        ("publish", "f:float=-4e38", "-4e38 does not fit a float in property 'f:float=-4e38'"),
        # Past a double too: it said "does not fit a double" of a float.
        ("put", "f:float=1e999", "1e999 does not fit a float in property 'f:float=1e999'"),
        ("put", "d:double=1e309", "1e309 does not fit a double in property 'd:double=1e309'"),
    ],
)
def test_a_value_too_big_for_its_type_is_a_usage_error(
    tmp_path: Path, command: str, written: str, says: str
) -> None:
    root = tmp_path / "data"
    where = "jobs" if command == "put" else "t"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "boxmq.cli",
            "--data",
            str(root),
            command,
            where,
            "x",
            "-p",
            written,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stderr.splitlines()[-1] == f"boxmq {command}: error: argument --property/-p: {says}"
    assert not root.exists()


@pytest.mark.parametrize(
    "written", ["f:float=3.4028234e38", "f:float=3.4028235e38", "f:float=-3.4e38", "f:float=inf"]
)
def test_a_float_within_its_range_is_sent(tmp_path: Path, written: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "boxmq.cli",
            "--data",
            str(tmp_path),
            "put",
            "jobs",
            "x",
            "-p",
            written,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done
